//! Host tensors and the exact element conversions every backend and the interpreter
//! share (docs/ir.md, "Numerics"): values are stored in their dtype's bits and read
//! as f64; rounding is to nearest even, casts to fp8 saturate to the largest finite.

use tessera_frontend::check::DType;

/// A row-major, contiguous tensor in host memory. Elements are stored in their dtype's
/// encoding; `int4` uses one byte per element.
#[derive(Clone, PartialEq, Debug)]
pub struct HostTensor {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// A kernel argument.
#[derive(Clone, PartialEq, Debug)]
pub enum Arg {
    Tensor(HostTensor),
    Scalar(DType, f64),
    Index(i64),
}

/// Bytes one element occupies in a `HostTensor`.
pub fn elem_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Int4 => 1,
        d => d.bytes() as usize,
    }
}

impl HostTensor {
    pub fn zeros(dtype: DType, dims: &[usize]) -> HostTensor {
        let n: usize = dims.iter().product();
        HostTensor { dtype, dims: dims.to_vec(), data: vec![0; n * elem_bytes(dtype)] }
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// A tensor holding `values` rounded to `dtype`.
    pub fn from_f64(dtype: DType, dims: &[usize], values: &[f64]) -> HostTensor {
        let mut t = HostTensor::zeros(dtype, dims);
        assert_eq!(values.len(), t.numel(), "value count and dims disagree");
        for (i, &v) in values.iter().enumerate() {
            t.set(i, v);
        }
        t
    }

    /// Element `i` (row-major) as f64.
    pub fn get(&self, i: usize) -> f64 {
        let b = elem_bytes(self.dtype);
        decode(self.dtype, &self.data[i * b..(i + 1) * b])
    }

    /// Stores `value` rounded to the dtype.
    pub fn set(&mut self, i: usize, value: f64) {
        let b = elem_bytes(self.dtype);
        encode(self.dtype, value, &mut self.data[i * b..(i + 1) * b]);
    }

    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.get(i)).collect()
    }

    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.get(i) as f32).collect()
    }
}

/// Rounds `x` to the nearest value of `dtype` (what storing it and reading it back gives):
/// round to nearest even directly from the f64 value (no double rounding through f32),
/// IEEE overflow to infinity for f32/tf32/bf16/f16, `satfinite` for fp8 (infinities and
/// overflow become the largest finite value, NaN stays NaN), truncation toward zero with
/// saturation for integers (NaN becomes 0), and `x != 0` for bool.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => x as f32 as f64,
        DType::TF32 => round_float(x, FloatFormat::TF32),
        DType::BF16 => round_float(x, FloatFormat::BF16),
        DType::F16 => round_float(x, FloatFormat::F16),
        DType::Fp8E4m3 => round_float(x, FloatFormat::E4M3),
        DType::Fp8E5m2 => round_float(x, FloatFormat::E5M2),
        DType::Int8 => saturate_int(x, -128.0, 127.0),
        DType::Int4 => saturate_int(x, -8.0, 7.0),
        DType::I32 => saturate_int(x, i32::MIN as f64, i32::MAX as f64),
        DType::I64 => saturate_int(x, i64::MIN as f64, i64::MAX as f64),
        DType::Bool => f64::from(u8::from(x != 0.0)),
    }
}

/// A binary float format narrower than f64, for exact rounding.
#[derive(Copy, Clone, Debug)]
struct FloatFormat {
    /// Stored mantissa bits.
    mbits: i32,
    /// Exponent of the smallest normal number.
    emin: i32,
    /// The largest finite value.
    max: f64,
    /// Overflow gives the largest finite value (fp8 `satfinite`) instead of infinity.
    saturate: bool,
}

impl FloatFormat {
    const TF32: FloatFormat = FloatFormat { mbits: 10, emin: -126, max: 3.4011621342146535e38, saturate: false };
    const BF16: FloatFormat = FloatFormat { mbits: 7, emin: -126, max: 3.3895313892515355e38, saturate: false };
    const F16: FloatFormat = FloatFormat { mbits: 10, emin: -14, max: 65504.0, saturate: false };
    const E4M3: FloatFormat = FloatFormat { mbits: 3, emin: -6, max: 448.0, saturate: true };
    const E5M2: FloatFormat = FloatFormat { mbits: 2, emin: -14, max: 57344.0, saturate: true };
}

/// 2^n for n in the normal f64 range.
fn pow2(n: i32) -> f64 {
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// Round to nearest even into `fmt`, exactly: the quantum of `x`'s binade (or of the
/// subnormal range) is a power of two, so `x / q` is exact and one `round_ties_even`
/// is the whole rounding.
fn round_float(x: f64, fmt: FloatFormat) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a.is_infinite() {
        return if fmt.saturate { fmt.max.copysign(x) } else { x };
    }
    // Far below every format's smallest subnormal (and below the normal f64 range,
    // where the exponent field would not give the binade).
    if a < pow2(-1000) {
        return 0.0f64.copysign(x);
    }
    let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(fmt.emin);
    let q = pow2(e - fmt.mbits);
    let r = (a / q).round_ties_even() * q;
    let r = if r > fmt.max {
        if fmt.saturate {
            fmt.max
        } else {
            f64::INFINITY
        }
    } else {
        r
    };
    r.copysign(x)
}

fn decode(dtype: DType, bytes: &[u8]) -> f64 {
    match dtype {
        DType::F64 => f64::from_le_bytes(bytes.try_into().unwrap()),
        DType::F32 | DType::TF32 => f32::from_le_bytes(bytes.try_into().unwrap()) as f64,
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes(bytes.try_into().unwrap())).to_f64(),
        DType::F16 => half::f16::from_bits(u16::from_le_bytes(bytes.try_into().unwrap())).to_f64(),
        DType::Fp8E4m3 => fp8_decode(bytes[0], Fp8::E4M3),
        DType::Fp8E5m2 => fp8_decode(bytes[0], Fp8::E5M2),
        DType::Int8 | DType::Int4 => bytes[0] as i8 as f64,
        DType::I32 => i32::from_le_bytes(bytes.try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(bytes.try_into().unwrap()) as f64,
        DType::Bool => f64::from(u8::from(bytes[0] != 0)),
    }
}

fn encode(dtype: DType, x: f64, out: &mut [u8]) {
    // After `round_to` every value is exactly representable, so the bit conversions below
    // are exact (half's f64 conversions drop low mantissa bits before rounding, which
    // would break ties: they only ever see representable values here).
    let r = round_to(dtype, x);
    match dtype {
        DType::F64 => out.copy_from_slice(&r.to_le_bytes()),
        DType::F32 | DType::TF32 => out.copy_from_slice(&(r as f32).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&half::bf16::from_f64(r).to_bits().to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(r).to_bits().to_le_bytes()),
        DType::Fp8E4m3 => out[0] = fp8_bits(r, Fp8::E4M3),
        DType::Fp8E5m2 => out[0] = fp8_bits(r, Fp8::E5M2),
        DType::Int8 | DType::Int4 => out[0] = r as i8 as u8,
        DType::I32 => out.copy_from_slice(&(r as i32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(r as i64).to_le_bytes()),
        DType::Bool => out[0] = r as u8,
    }
}

/// Float → int: truncate toward zero, saturate; NaN → 0.
fn saturate_int(x: f64, lo: f64, hi: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.trunc().clamp(lo, hi)
    }
}

#[derive(Copy, Clone)]
enum Fp8 {
    /// OCP E4M3FN: bias 7, no infinities, max 448, NaN = S.1111.111.
    E4M3,
    /// OCP E5M2: bias 15, IEEE-like with infinities, max 57344.
    E5M2,
}

impl Fp8 {
    fn params(self) -> (i32, u32) {
        match self {
            Fp8::E4M3 => (7, 3),
            Fp8::E5M2 => (15, 2),
        }
    }
}

fn fp8_decode(byte: u8, kind: Fp8) -> f64 {
    let (bias, mbits) = kind.params();
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let ebits = 7 - mbits;
    let exp = ((byte >> mbits) & ((1 << ebits) - 1)) as i32;
    let man = (byte & ((1 << mbits) - 1)) as f64;
    let max_exp = (1 << ebits) - 1;
    match kind {
        Fp8::E4M3 if exp == max_exp && man as u32 == (1 << mbits) - 1 => f64::NAN,
        Fp8::E5M2 if exp == max_exp => {
            if man == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ if exp == 0 => sign * man / (1 << mbits) as f64 * pow2(1 - bias),
        _ => sign * (1.0 + man / (1 << mbits) as f64) * pow2(exp - bias),
    }
}

/// The code of `r`, a value the format represents exactly (see `round_to`).
fn fp8_bits(r: f64, kind: Fp8) -> u8 {
    if r.is_nan() {
        return 0x7f;
    }
    let (bias, mbits) = kind.params();
    let sign: u8 = if r.is_sign_negative() { 0x80 } else { 0 };
    let a = r.abs();
    if a == 0.0 {
        return sign;
    }
    let emin = 1 - bias;
    let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    if e < emin {
        // Subnormal: exponent field 0, mantissa counts quanta of 2^(emin - mbits).
        return sign | (a / pow2(emin - mbits as i32)) as u8;
    }
    let man = (a / pow2(e - mbits as i32)) as u32 - (1 << mbits);
    sign | (((e + bias) as u8) << mbits) | man as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_the_formats() {
        assert_eq!(round_to(DType::BF16, 1.0 + 1.0 / 256.0), 1.0); // tie to even
        assert_eq!(round_to(DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_to(DType::F16, 65520.0), f64::INFINITY);
        assert_eq!(round_to(DType::Fp8E4m3, 1000.0), 448.0);
        assert_eq!(round_to(DType::Fp8E4m3, -0.3), -0.3125);
        assert_eq!(round_to(DType::Fp8E5m2, 100000.0), 57344.0);
        assert_eq!(round_to(DType::Fp8E4m3, 2f64.powi(-9)), 2f64.powi(-9)); // smallest subnormal
        assert_eq!(round_to(DType::Int8, 300.0), 127.0);
        assert_eq!(round_to(DType::Int8, -3.7), -3.0);
        assert_eq!(round_to(DType::TF32, 1.0 + 2f64.powi(-11)), 1.0);
        assert!(round_to(DType::Fp8E4m3, f64::NAN).is_nan());
    }

    /// The exhaustive definition: the nearest finite code, ties to the even code.
    fn fp8_nearest_by_scan(x: f64, kind: DType) -> f64 {
        let max = if kind == DType::Fp8E4m3 { 448.0 } else { 57344.0 };
        let a = x.abs().min(max);
        let mut best = 0u8;
        let mut best_err = f64::INFINITY;
        for code in 0u8..0x80 {
            let v = decode(kind, &[code]);
            if !v.is_finite() {
                continue;
            }
            let err = (v - a).abs();
            if err < best_err || (err == best_err && code & 1 == 0) {
                best = code;
                best_err = err;
            }
        }
        decode(kind, &[best]).copysign(x)
    }

    #[test]
    fn fp8_rounding_matches_the_exhaustive_definition() {
        for kind in [DType::Fp8E4m3, DType::Fp8E5m2] {
            // Every code, every midpoint between neighbours and points just beside them.
            let mut values: Vec<f64> = (0u8..0x7f).map(|c| decode(kind, &[c])).filter(|v| v.is_finite()).collect();
            values.sort_by(f64::total_cmp);
            let mut probes = Vec::new();
            for w in values.windows(2) {
                let mid = (w[0] + w[1]) / 2.0;
                probes.extend([w[0], mid, mid * (1.0 + 1e-12), mid * (1.0 - 1e-12), w[1]]);
            }
            probes.extend([1e-30, 1e6, 470.0, 60000.0, 61440.0, 2f64.powi(-20)]);
            for &p in &probes {
                for x in [p, -p] {
                    let want = fp8_nearest_by_scan(x, kind);
                    let got = round_to(kind, x);
                    assert_eq!(got.to_bits(), want.to_bits(), "{kind} {x:e}: {got:e} != {want:e}");
                    let mut b = [0u8];
                    encode(kind, x, &mut b);
                    assert_eq!(decode(kind, &b).to_bits(), want.to_bits(), "{kind} encode {x:e}");
                }
            }
        }
    }

    #[test]
    fn rounding_from_f64_is_direct() {
        // A value just above a bf16 tie: rounding through f32 (or dropping the low
        // mantissa bits first) would make it an exact tie and round down to even.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(round_to(DType::BF16, x), 1.0 + 2f64.powi(-7));
        let y = 1.0 + 2f64.powi(-11) + 2f64.powi(-45);
        assert_eq!(round_to(DType::F16, y), 1.0 + 2f64.powi(-10));
        assert_eq!(round_to(DType::BF16, 1e-45), 0.0);
        assert_eq!(round_to(DType::BF16, 2f64.powi(-133)), 2f64.powi(-133)); // smallest subnormal
        assert_eq!(round_to(DType::F16, 2f64.powi(-24)), 2f64.powi(-24));
        assert_eq!(round_to(DType::F16, 2f64.powi(-26)), 0.0);
        assert_eq!(round_to(DType::BF16, 3.39e38), 3.3895313892515355e38);
        assert_eq!(round_to(DType::BF16, 3.4e38), f64::INFINITY); // past the midpoint to 2^128
        assert_eq!(round_to(DType::Fp8E4m3, f64::NEG_INFINITY), -448.0);
        assert!(round_to(DType::BF16, f64::NAN).is_nan());
        for v in [1.5f64, -2.75, 1e-3, 12345.678] {
            assert_eq!(round_to(DType::BF16, v), half::bf16::from_f32(v as f32).to_f64());
            assert_eq!(round_to(DType::F16, v), half::f16::from_f32(v as f32).to_f64());
        }
    }

    #[test]
    fn every_fp8_code_round_trips() {
        for kind in [DType::Fp8E4m3, DType::Fp8E5m2] {
            for code in 0u8..=255 {
                let v = decode(kind, &[code]);
                if v.is_finite() && !(v == 0.0 && code & 0x80 != 0) {
                    assert_eq!(round_to(kind, v), v, "{kind} code {code:#x}");
                }
            }
        }
    }
}
