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

/// Rounds `x` to the nearest value of `dtype` (what storing it and reading it back gives).
pub fn round_to(dtype: DType, x: f64) -> f64 {
    let mut buf = [0u8; 8];
    let b = elem_bytes(dtype);
    encode(dtype, x, &mut buf[..b]);
    decode(dtype, &buf[..b])
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
    match dtype {
        DType::F64 => out.copy_from_slice(&x.to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(x as f32).to_le_bytes()),
        // TF32: f32 storage with a 10-bit mantissa (round to nearest even).
        DType::TF32 => out.copy_from_slice(&round_mantissa(x as f32, 10).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&half::bf16::from_f64(x).to_bits().to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(x).to_bits().to_le_bytes()),
        DType::Fp8E4m3 => out[0] = fp8_encode(x, Fp8::E4M3),
        DType::Fp8E5m2 => out[0] = fp8_encode(x, Fp8::E5M2),
        DType::Int8 => out[0] = saturate_int(x, -128.0, 127.0) as i8 as u8,
        DType::Int4 => out[0] = saturate_int(x, -8.0, 7.0) as i8 as u8,
        DType::I32 => out.copy_from_slice(&(saturate_int(x, i32::MIN as f64, i32::MAX as f64) as i32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(saturate_int(x, i64::MIN as f64, i64::MAX as f64) as i64).to_le_bytes()),
        DType::Bool => out[0] = u8::from(x != 0.0),
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

fn round_mantissa(x: f32, bits: u32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let shift = 23 - bits;
    let b = x.to_bits();
    let lsb = (b >> shift) & 1;
    let rounded = b.wrapping_add((1 << (shift - 1)) - 1 + lsb) & !((1 << shift) - 1);
    f32::from_bits(rounded)
}

#[derive(Copy, Clone)]
enum Fp8 {
    /// OCP E4M3FN: bias 7, no infinities, max 448, NaN = S.1111.111.
    E4M3,
    /// OCP E5M2: bias 15, IEEE-like with infinities, max 57344.
    E5M2,
}

impl Fp8 {
    fn params(self) -> (i32, u32, f64) {
        match self {
            Fp8::E4M3 => (7, 3, 448.0),
            Fp8::E5M2 => (15, 2, 57344.0),
        }
    }
}

fn fp8_decode(byte: u8, kind: Fp8) -> f64 {
    let (bias, mbits, _) = kind.params();
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
        _ if exp == 0 => sign * man / (1 << mbits) as f64 * 2f64.powi(1 - bias),
        _ => sign * (1.0 + man / (1 << mbits) as f64) * 2f64.powi(exp - bias),
    }
}

/// Round to nearest even, saturating to the largest finite value (`satfinite`).
fn fp8_encode(x: f64, kind: Fp8) -> u8 {
    let (bias, mbits, max) = kind.params();
    if x.is_nan() {
        return match kind {
            Fp8::E4M3 => 0x7f,
            Fp8::E5M2 => 0x7f,
        };
    }
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs().min(max);
    if a == 0.0 {
        return sign;
    }
    // Find the representable neighbours by scanning the (few) codes: exact and simple.
    let mut best = 0u8;
    let mut best_err = f64::INFINITY;
    for code in 0u8..0x80 {
        let v = fp8_decode(code, kind);
        if !v.is_finite() {
            continue;
        }
        let err = (v - a).abs();
        // Ties go to the even code (last mantissa bit zero).
        if err < best_err || (err == best_err && code & 1 == 0) {
            best = code;
            best_err = err;
        }
    }
    let _ = (bias, mbits);
    sign | best
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
