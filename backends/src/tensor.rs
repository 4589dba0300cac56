//! Host tensors and the exact element conversions every backend and the interpreter
//! share (docs/ir.md, "Numerics" and "Numerics policies"): values are stored in their
//! dtype's bits and read as f64. Rounding is to nearest even; a conversion that
//! overflows gives Inf (f16, bf16, fp8 e5m2) or NaN (fp8 e4m3, which has no Inf) and a
//! float → integer conversion wraps — unless the destination is `@saturate`
//! ([`round_to_saturating`]), which clamps to the largest finite value.
//! [`round_stochastic`] is `@stochastic_round`.

use tessera_frontend::check::DType;
use tessera_passes::abi::{AbiParam, KernelAbi};

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

/// Checks the argument count, and each tensor argument's dtype and data size, against
/// `abi`; returns the tensors' dims in parameter order (for `KernelAbi::bind`). Every
/// other (parameter, argument) pair goes to `check_other`: the backends differ in
/// which scalar and index conversions they take and in how they word a refusal.
pub(crate) fn tensor_dims(
    abi: &KernelAbi,
    args: &[Arg],
    mut check_other: impl FnMut(&AbiParam, &Arg) -> Result<(), String>,
) -> Result<Vec<Vec<i64>>, String> {
    if args.len() != abi.params.len() {
        return Err(format!("`{}` takes {} arguments, got {}", abi.name, abi.params.len(), args.len()));
    }
    let mut shapes = Vec::new();
    for (p, a) in abi.params.iter().zip(args) {
        match (p, a) {
            (AbiParam::Tensor { name, dtype, .. }, Arg::Tensor(t)) => {
                if t.dtype != *dtype {
                    return Err(format!("`{name}` is {dtype}, got a {} tensor", t.dtype));
                }
                if t.data.len() != t.numel() * elem_bytes(t.dtype) {
                    return Err(format!("`{name}`: data size does not match its dims"));
                }
                shapes.push(t.dims.iter().map(|&d| d as i64).collect());
            }
            (p, a) => check_other(p, a)?,
        }
    }
    Ok(shapes)
}

/// Rounds `x` to the nearest value of `dtype` (what storing it and reading it back gives),
/// the default conversion rule:
///
/// - floats: round to nearest even directly from the f64 value (no double rounding
///   through f32); a result beyond the largest finite value (after rounding: e4m3's 464
///   still rounds to 448) is ±Inf for tf32/bf16/f16/fp8 e5m2 and NaN for fp8 e4m3
///   (OCP `e4m3fn` has no Inf, as in PyTorch); Inf stays Inf (NaN for e4m3), NaN stays NaN;
/// - int8, int4, i32: truncate toward zero to an i64 (saturating at the i64 range; NaN
///   → 0), then wrap to the width (two's complement): 300 → 44 in int8; i64 saturates;
/// - bool: `x != 0`.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    round_with(dtype, x, false)
}

/// The `@saturate` conversion rule: as [`round_to`], but overflow (and Inf) clamps to the
/// largest finite value (e4m3 ±448, e5m2 ±57344) and integers clamp to their range
/// (int8 [-128, 127], int4 [-8, 7]); NaN stays NaN (→ 0 for integers).
pub fn round_to_saturating(dtype: DType, x: f64) -> f64 {
    round_with(dtype, x, true)
}

/// [`round_to`], or [`round_to_saturating`] when `saturate`.
pub fn round_with(dtype: DType, x: f64, saturate: bool) -> f64 {
    match (dtype, FloatFormat::of(dtype)) {
        (_, Some(fmt)) => round_float(x, fmt, saturate),
        (DType::F64, _) => x,
        (DType::F32, _) => x as f32 as f64,
        (DType::Bool, _) => f64::from(u8::from(x != 0.0)),
        (d, _) => convert_int(d, x, saturate),
    }
}

/// `@stochastic_round` of `x` to `dtype` (bf16, f16, fp8; other dtypes round to nearest)
/// with `u` uniform in [0, 1): with `a = |x|`, `e = max(exponent(a), emin)` and the
/// quantum `q = 2^(e - mantissa bits)`, `t = a / q`, the result is
/// `sign(x) · (floor(t) + (u < t - floor(t) ? 1 : 0)) · q` — rounded up with probability
/// equal to the fractional distance — then overflow as [`round_with`] says.
pub fn round_stochastic(dtype: DType, x: f64, u: f64, saturate: bool) -> f64 {
    let Some(fmt) = FloatFormat::of(dtype).filter(|_| dtype != DType::TF32) else {
        return round_with(dtype, x, saturate);
    };
    if x.is_nan() {
        return x;
    }
    if x.is_infinite() {
        return fmt.overflow(x, saturate);
    }
    let a = x.abs();
    let e = exponent(a).max(fmt.emin);
    let t = a / pow2(e - fmt.mbits);
    let n = t.floor();
    let r = (n + f64::from(u8::from(u < t - n))) * pow2(e - fmt.mbits);
    if r > fmt.max {
        fmt.overflow(x, saturate)
    } else {
        r.copysign(x)
    }
}

/// The unbiased binary exponent of a finite f64 (-1023 for zero and subnormals).
fn exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
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
    /// The format has infinities (e4m3 does not: its overflow is NaN).
    has_inf: bool,
}

impl FloatFormat {
    const TF32: FloatFormat = FloatFormat { mbits: 10, emin: -126, max: 3.4011621342146535e38, has_inf: true };
    const BF16: FloatFormat = FloatFormat { mbits: 7, emin: -126, max: 3.3895313892515355e38, has_inf: true };
    const F16: FloatFormat = FloatFormat { mbits: 10, emin: -14, max: 65504.0, has_inf: true };
    const E4M3: FloatFormat = FloatFormat { mbits: 3, emin: -6, max: 448.0, has_inf: false };
    const E5M2: FloatFormat = FloatFormat { mbits: 2, emin: -14, max: 57344.0, has_inf: true };

    fn of(dtype: DType) -> Option<FloatFormat> {
        Some(match dtype {
            DType::TF32 => FloatFormat::TF32,
            DType::BF16 => FloatFormat::BF16,
            DType::F16 => FloatFormat::F16,
            DType::Fp8E4m3 => FloatFormat::E4M3,
            DType::Fp8E5m2 => FloatFormat::E5M2,
            _ => return None,
        })
    }

    /// What a value of `x`'s sign beyond the largest finite becomes.
    fn overflow(self, x: f64, saturate: bool) -> f64 {
        if saturate {
            self.max.copysign(x)
        } else if self.has_inf {
            f64::INFINITY.copysign(x)
        } else {
            f64::NAN
        }
    }
}

/// 2^n for n in the normal f64 range.
fn pow2(n: i32) -> f64 {
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// Round to nearest even into `fmt`, exactly: the quantum of `x`'s binade (or of the
/// subnormal range) is a power of two, so `x / q` is exact and one `round_ties_even`
/// is the whole rounding.
fn round_float(x: f64, fmt: FloatFormat, saturate: bool) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a.is_infinite() {
        return fmt.overflow(x, saturate);
    }
    // Far below every format's smallest subnormal (and below the normal f64 range,
    // where the exponent field would not give the binade).
    if a < pow2(-1000) {
        return 0.0f64.copysign(x);
    }
    let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(fmt.emin);
    let q = pow2(e - fmt.mbits);
    let r = (a / q).round_ties_even() * q;
    if r > fmt.max {
        fmt.overflow(x, saturate)
    } else {
        r.copysign(x)
    }
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

/// Float (or integer) → an integer dtype: truncate toward zero (NaN → 0), then clamp to
/// the dtype's range when `saturate`, else saturate to i64 and wrap to the width.
fn convert_int(dtype: DType, x: f64, saturate: bool) -> f64 {
    if x.is_nan() {
        return 0.0;
    }
    let (bits, lo, hi) = match dtype {
        DType::Int4 => (4, -8.0, 7.0),
        DType::Int8 => (8, -128.0, 127.0),
        DType::I32 => (32, i32::MIN as f64, i32::MAX as f64),
        _ => (64, i64::MIN as f64, i64::MAX as f64),
    };
    if saturate || bits == 64 {
        return x.trunc().clamp(lo, hi);
    }
    // `as` truncates toward zero and saturates at the i64 range.
    let v = x as i64;
    ((v << (64 - bits)) >> (64 - bits)) as f64
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
    if r.is_infinite() {
        // Only e5m2 has infinities (`round_to` never gives e4m3 one).
        return sign | 0x7c;
    }
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
        assert!(round_to(DType::Fp8E4m3, 1000.0).is_nan()); // no Inf in e4m3
        assert_eq!(round_to_saturating(DType::Fp8E4m3, 1000.0), 448.0);
        assert_eq!(round_to_saturating(DType::Fp8E4m3, -1000.0), -448.0);
        assert_eq!(round_to(DType::Fp8E4m3, -0.3), -0.3125);
        assert_eq!(round_to(DType::Fp8E5m2, 100000.0), f64::INFINITY);
        assert_eq!(round_to(DType::Fp8E5m2, -100000.0), f64::NEG_INFINITY);
        assert_eq!(round_to_saturating(DType::Fp8E5m2, 100000.0), 57344.0);
        assert_eq!(round_to(DType::Fp8E4m3, 2f64.powi(-9)), 2f64.powi(-9)); // smallest subnormal
        assert_eq!(round_to(DType::Int8, 300.0), 44.0); // wraps
        assert_eq!(round_to(DType::Int8, -129.5), 127.0);
        assert_eq!(round_to_saturating(DType::Int8, 300.0), 127.0);
        assert_eq!(round_to_saturating(DType::Int4, -9.0), -8.0);
        assert_eq!(round_to(DType::Int4, 9.0), -7.0);
        assert_eq!(round_to(DType::I32, 2f64.powi(31)), i32::MIN as f64);
        assert_eq!(round_to(DType::Int8, f64::NAN), 0.0);
        assert_eq!(round_to(DType::Int8, -3.7), -3.0);
        assert_eq!(round_to(DType::TF32, 1.0 + 2f64.powi(-11)), 1.0);
        assert!(round_to(DType::Fp8E4m3, f64::NAN).is_nan());
    }

    /// The exhaustive definition of the saturating rule: the nearest finite code, ties
    /// to the even code.
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
            // Round to nearest beyond the top (halfway to the next binade step and up).
            let overflow = if kind == DType::Fp8E4m3 { 464.0 } else { 61440.0 };
            for &p in &probes {
                for x in [p, -p] {
                    let want = fp8_nearest_by_scan(x, kind);
                    let got = round_to_saturating(kind, x);
                    assert_eq!(got.to_bits(), want.to_bits(), "{kind} {x:e}: {got:e} != {want:e}");
                    // The default rule agrees below the overflow point (e4m3's tie at 464
                    // goes to the even 448; e5m2's tie at 61440 to the even 65536 = Inf).
                    let plain = round_to(kind, x);
                    let overflows = if kind == DType::Fp8E4m3 { x.abs() > overflow } else { x.abs() >= overflow };
                    if overflows {
                        assert!(if kind == DType::Fp8E4m3 {
                            plain.is_nan()
                        } else {
                            plain == f64::INFINITY.copysign(x)
                        });
                    } else {
                        assert_eq!(plain.to_bits(), want.to_bits(), "{kind} {x:e}");
                    }
                    let mut b = [0u8];
                    encode(kind, x, &mut b);
                    assert_eq!(decode(kind, &b).to_bits(), plain.to_bits(), "{kind} encode {x:e}");
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
        assert!(round_to(DType::Fp8E4m3, f64::NEG_INFINITY).is_nan());
        assert_eq!(round_to_saturating(DType::Fp8E4m3, f64::NEG_INFINITY), -448.0);
        assert_eq!(round_to(DType::Fp8E4m3, 464.0), 448.0);
        assert!(round_to(DType::Fp8E4m3, 464.5).is_nan());
        assert_eq!(round_to(DType::Fp8E5m2, 61439.0), 57344.0);
        assert_eq!(round_to(DType::Fp8E5m2, 61440.0), f64::INFINITY);
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

    #[test]
    fn stochastic_rounding_picks_a_neighbour_by_the_fraction() {
        // 1 + 3/4 of a bf16 ulp (2^-7): rounds up when u < 0.75.
        let x = 1.0 + 0.75 * 2f64.powi(-7);
        assert_eq!(round_stochastic(DType::BF16, x, 0.0, false), 1.0 + 2f64.powi(-7));
        assert_eq!(round_stochastic(DType::BF16, x, 0.7499, false), 1.0 + 2f64.powi(-7));
        assert_eq!(round_stochastic(DType::BF16, x, 0.75, false), 1.0);
        assert_eq!(round_stochastic(DType::BF16, -x, 0.2, false), -(1.0 + 2f64.powi(-7)));
        // Representable values never move; NaN stays NaN.
        assert_eq!(round_stochastic(DType::F16, 1.5, 0.0, false), 1.5);
        assert!(round_stochastic(DType::F16, f64::NAN, 0.3, false).is_nan());
        // Subnormals round at the subnormal quantum; the top overflows by the policy.
        assert_eq!(round_stochastic(DType::F16, 1.5 * 2f64.powi(-24), 0.6, false), 2f64.powi(-24));
        assert!(round_stochastic(DType::Fp8E4m3, 447.0 + 20.0, 0.0, false).is_nan());
        assert_eq!(round_stochastic(DType::Fp8E4m3, 460.0, 0.0, true), 448.0);
        assert_eq!(round_stochastic(DType::Fp8E4m3, 460.0, 0.99, false), 448.0);
        assert_eq!(round_stochastic(DType::Fp8E5m2, 1e6, 0.5, false), f64::INFINITY);
        // Unbiased: the mean over u of the rounded value is the value.
        let n = 4096;
        let mean: f64 =
            (0..n).map(|i| round_stochastic(DType::BF16, x, (i as f64 + 0.5) / n as f64, false)).sum::<f64>()
                / n as f64;
        assert!((mean - x).abs() < 1e-12, "{mean} vs {x}");
    }
}
