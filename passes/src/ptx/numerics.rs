//! Element types in registers and the conversions between them (docs/ir.md,
//! "Numerics"): 16- and 8-bit floats compute in `f32` and round to nearest even after
//! every op; a conversion to fp8 that overflows is NaN (e4m3) or Inf (e5m2), or the
//! largest finite value under `@saturate`; NaN stays NaN.
//!
//! In registers an element is *wide*: floats up to 32 bits as `f32` holding a value
//! exactly representable in the element type, integers up to 32 bits as `b32`, 64-bit
//! types in 64-bit registers, `bool` as a predicate. 16- and 8-bit elements may also be
//! *packed* into `b32` words (two or four, lowest index in the low bits) — the form
//! `mma`, `ldmatrix` and vector stores use.

use tessera_frontend::check::DType;

use super::builder::{Builder, Class, Operand, Reg};
use crate::target::Target;

pub fn wide_class(dtype: DType) -> Class {
    match dtype {
        DType::F64 => Class::F64,
        DType::I64 => Class::B64,
        DType::Bool => Class::Pred,
        DType::I32 | DType::Int8 | DType::Int4 => Class::B32,
        _ => Class::F32,
    }
}

/// Elements per packed `b32` word, for the types that pack.
pub fn per_word(dtype: DType) -> Option<usize> {
    match dtype {
        DType::BF16 | DType::F16 => Some(2),
        DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Int8 => Some(4),
        _ => None,
    }
}

/// Bytes of one element in memory.
pub fn mem_bytes(dtype: DType) -> u32 {
    dtype.bytes()
}

/// The PTX type of a single-element memory access and the register class it uses.
pub fn mem_access(dtype: DType) -> (&'static str, Class) {
    match dtype {
        DType::F64 => ("f64", Class::F64),
        DType::F32 | DType::TF32 => ("f32", Class::F32),
        DType::I64 => ("s64", Class::B64),
        DType::I32 => ("s32", Class::B32),
        DType::BF16 | DType::F16 => ("b16", Class::B16),
        DType::Int8 => ("s8", Class::B32),
        DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Bool | DType::Int4 => ("u8", Class::B32),
    }
}

/// The PTX arithmetic type suffix of a wide element.
pub fn arith_type(dtype: DType) -> &'static str {
    match wide_class(dtype) {
        Class::F64 => "f64",
        Class::F32 => "f32",
        Class::B64 => "s64",
        Class::B32 => "s32",
        Class::Pred => "pred",
        Class::B16 => "b16",
    }
}

pub fn float_imm(dtype: DType, v: f64) -> Operand {
    if dtype == DType::F64 {
        Operand::F64(v.to_bits())
    } else {
        Operand::f32(round_host(dtype, v) as f32)
    }
}

/// What the device computes for a constant of `dtype` (round to nearest even; fp8
/// overflow NaN for e4m3 and Inf for e5m2), so constants fold exactly as the runtime
/// would round them.
pub fn round_host(dtype: DType, v: f64) -> f64 {
    let f = v as f32;
    match dtype {
        DType::BF16 => round_f32_bits(f, 16),
        DType::F16 => half_round(f),
        DType::Fp8E4m3 | DType::Fp8E5m2 => {
            let r = fp8_round(dtype, f as f64);
            let (max, overflow) = fp8_limits(dtype);
            let rounded_past = if dtype == DType::Fp8E4m3 { f.abs() > 464.0 } else { f.abs() >= 61440.0 };
            if rounded_past && r.abs() == max {
                if dtype == DType::Fp8E4m3 {
                    f64::NAN
                } else {
                    overflow.copysign(f as f64)
                }
            } else {
                r
            }
        }
        DType::TF32 => round_f32_bits(f, 13),
        _ => f as f64,
    }
}

/// [`round_host`] under `@saturate`: fp8 overflow clamps to the largest finite value.
pub fn round_host_saturating(dtype: DType, v: f64) -> f64 {
    if dtype.is_fp8() {
        fp8_round(dtype, v as f32 as f64)
    } else {
        round_host(dtype, v)
    }
}

/// The largest finite value of an fp8 type and what overflow gives without `@saturate`.
fn fp8_limits(dtype: DType) -> (f64, f64) {
    if dtype == DType::Fp8E4m3 {
        (448.0, f64::NAN)
    } else {
        (57344.0, f64::INFINITY)
    }
}

fn round_f32_bits(f: f32, dropped: u32) -> f64 {
    if !f.is_finite() {
        return f as f64;
    }
    let b = f.to_bits();
    let lsb = (b >> dropped) & 1;
    let r = b.wrapping_add((1 << (dropped - 1)) - 1 + lsb) & !((1u32 << dropped) - 1);
    f32::from_bits(r) as f64
}

fn half_round(f: f32) -> f64 {
    // Through the largest binade walk: exact for the values constants take.
    if !f.is_finite() || f == 0.0 {
        return f as f64;
    }
    let a = f.abs() as f64;
    if a >= 65520.0 {
        return f64::INFINITY.copysign(f as f64);
    }
    let exp = a.log2().floor().max(-14.0);
    let ulp = 2f64.powf(exp - 10.0);
    let q = a / ulp;
    let r = q.round();
    let r = if (q - q.floor() - 0.5).abs() < f64::EPSILON && r % 2.0 != 0.0 { r - 1.0 } else { r };
    (r * ulp).copysign(f as f64)
}

fn fp8_round(dtype: DType, x: f64) -> f64 {
    let (mbits, bias, max) = if dtype == DType::Fp8E4m3 { (3, 7, 448.0) } else { (2, 15, 57344.0) };
    if x.is_nan() || x == 0.0 {
        return x;
    }
    let a = x.abs().min(max);
    let exp = a.log2().floor().max(1.0 - bias as f64);
    let ulp = 2f64.powf(exp - mbits as f64);
    let q = a / ulp;
    let mut r = q.round();
    if (q - q.floor() - 0.5).abs() < f64::EPSILON && r % 2.0 != 0.0 {
        r -= 1.0;
    }
    (r * ulp).min(max).copysign(x)
}

/// Rounds a wide `f32` to `dtype` (no-op for `f32`); returns the wide result.
pub fn round_wide(b: &mut Builder, target: Target, dtype: DType, x: Operand) -> Operand {
    round_wide_with(b, target, dtype, x, false)
}

/// [`round_wide`]; fp8 overflow clamps when `saturate` (`@saturate`).
pub fn round_wide_with(b: &mut Builder, target: Target, dtype: DType, x: Operand, saturate: bool) -> Operand {
    match dtype {
        DType::BF16 | DType::F16 => {
            let ty = if dtype == DType::BF16 { "bf16" } else { "f16" };
            let x = materialize(b, Class::F32, x);
            let h = b.reg(Class::B16);
            b.ins(format!("cvt.rn.{ty}.f32 {h}, {x}"));
            let r = b.reg(Class::F32);
            b.ins(format!("cvt.f32.{ty} {r}, {h}"));
            Operand::Reg(r)
        }
        DType::Fp8E4m3 | DType::Fp8E5m2 => {
            let byte = f32_to_fp8_with(b, target, dtype, x, saturate);
            fp8_to_f32(b, target, dtype, Operand::Reg(byte))
        }
        DType::TF32 => {
            // Round to nearest even at mantissa bit 13 (integer arithmetic on the bits;
            // infinities and NaN keep their exponent).
            let x = materialize(b, Class::F32, x);
            let bits = b.reg(Class::B32);
            b.ins(format!("mov.b32 {bits}, {x}"));
            let lsb = b.reg(Class::B32);
            b.ins(format!("bfe.u32 {lsb}, {bits}, 13, 1"));
            let r = b.reg(Class::B32);
            b.ins(format!("add.u32 {r}, {bits}, 4095"));
            b.ins(format!("add.u32 {r}, {r}, {lsb}"));
            b.ins(format!("and.b32 {r}, {r}, -8192"));
            let special = b.reg(Class::Pred);
            let mag = b.reg(Class::B32);
            b.ins(format!("and.b32 {mag}, {bits}, 2147483647"));
            b.ins(format!("setp.ge.u32 {special}, {mag}, 2139095040"));
            b.ins(format!("selp.b32 {r}, {bits}, {r}, {special}"));
            let f = b.reg(Class::F32);
            b.ins(format!("mov.b32 {f}, {r}"));
            Operand::Reg(f)
        }
        _ => x,
    }
}

/// `x + k` as a 32-bit operand: folded into an immediate, `x` itself for `k = 0`, else
/// an `add.u32` into a new register.
pub fn add_u32(b: &mut Builder, x: Operand, k: i64) -> Operand {
    match x {
        Operand::Int(v) => Operand::Int(v + k),
        x if k == 0 => x,
        x => {
            let sum = b.reg(Class::B32);
            b.ins(format!("add.u32 {sum}, {x}, {k}"));
            Operand::Reg(sum)
        }
    }
}

/// Moves an immediate into a register of `class` (registers pass through).
pub fn materialize(b: &mut Builder, class: Class, x: Operand) -> Reg {
    match x {
        Operand::Reg(r) => r,
        imm => {
            let r = b.reg(class);
            match class {
                Class::Pred => {
                    let v = imm.as_int().unwrap_or(0) != 0;
                    b.ins(format!("setp.ne.u32 {r}, {}, 0", u32::from(v)));
                }
                Class::F32 => b.ins(format!("mov.f32 {r}, {imm}")),
                Class::F64 => b.ins(format!("mov.f64 {r}, {imm}")),
                Class::B64 => b.ins(format!("mov.b64 {r}, {imm}")),
                Class::B32 => b.ins(format!("mov.b32 {r}, {}", imm_bits32(imm))),
                Class::B16 => b.ins(format!("mov.b16 {r}, {}", imm_bits32(imm) & 0xffff)),
            }
            r
        }
    }
}

fn imm_bits32(imm: Operand) -> i64 {
    match imm {
        Operand::F32(bits) => bits as i64,
        Operand::Int(v) => v & 0xffff_ffff,
        Operand::F64(bits) => (f64::from_bits(bits) as f32).to_bits() as i64,
        Operand::Reg(_) => 0,
    }
}

/// The storage bits of a wide element: `f32`/`f64`/integers as they are, 16-bit
/// floats in a `b16`, 8-bit types in the low byte of a `b32`.
pub fn to_storage(b: &mut Builder, target: Target, dtype: DType, x: Operand) -> Operand {
    match dtype {
        DType::BF16 | DType::F16 => {
            if let Operand::F32(bits) = x {
                let v = f32::from_bits(bits);
                let h = if dtype == DType::BF16 { (round_f32_bits(v, 16) as f32).to_bits() >> 16 } else { f16_bits(v) };
                return Operand::Int(h as i64);
            }
            let ty = if dtype == DType::BF16 { "bf16" } else { "f16" };
            let x = materialize(b, Class::F32, x);
            let h = b.reg(Class::B16);
            b.ins(format!("cvt.rn.{ty}.f32 {h}, {x}"));
            Operand::Reg(h)
        }
        // Registers hold fp8 values: e4m3's `satfinite` encoding is exact (NaN stays NaN),
        // e5m2 needs the overflow check to keep its infinities.
        DType::Fp8E4m3 => Operand::Reg(f32_to_fp8(b, target, dtype, x)),
        DType::Fp8E5m2 => Operand::Reg(f32_to_fp8_with(b, target, dtype, x, false)),
        DType::Bool => {
            let r = b.reg(Class::B32);
            let p = materialize(b, Class::Pred, x);
            b.ins(format!("selp.u32 {r}, 1, 0, {p}"));
            Operand::Reg(r)
        }
        _ => x,
    }
}

/// IEEE half bits of an `f32` (round to nearest even), for immediates.
fn f16_bits(v: f32) -> u32 {
    let r = half_round(v);
    if r.is_nan() {
        return 0x7e00;
    }
    let sign = if r.is_sign_negative() { 0x8000 } else { 0 };
    let a = r.abs();
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a == 0.0 {
        return sign;
    }
    if a < 2f64.powi(-14) {
        return sign | (a / 2f64.powi(-24)).round() as u32;
    }
    let e = a.log2().floor() as i32;
    let m = ((a / 2f64.powi(e) - 1.0) * 1024.0).round() as u32;
    sign | (((e + 15) as u32) << 10) | m
}

/// A wide element from its storage bits (as loaded by `mem_access`).
pub fn from_storage(b: &mut Builder, target: Target, dtype: DType, bits: Reg) -> Operand {
    match dtype {
        DType::BF16 | DType::F16 => {
            let ty = if dtype == DType::BF16 { "bf16" } else { "f16" };
            let f = b.reg(Class::F32);
            b.ins(format!("cvt.f32.{ty} {f}, {bits}"));
            Operand::Reg(f)
        }
        DType::Fp8E4m3 | DType::Fp8E5m2 => fp8_to_f32(b, target, dtype, Operand::Reg(bits)),
        DType::Bool => {
            let p = b.reg(Class::Pred);
            b.ins(format!("setp.ne.u32 {p}, {bits}, 0"));
            Operand::Reg(p)
        }
        DType::Int4 => {
            // Sign-extend the low nibble.
            let r = b.reg(Class::B32);
            b.ins(format!("bfe.s32 {r}, {bits}, 0, 4"));
            Operand::Reg(r)
        }
        _ => Operand::Reg(bits),
    }
}

/// `f32` → fp8 (round to nearest even, saturating to the largest finite, NaN kept) in
/// the low byte of a `b32`: the encoding of values that are exact (stores), where the
/// rules agree.
pub fn f32_to_fp8(b: &mut Builder, target: Target, dtype: DType, x: Operand) -> Reg {
    f32_to_fp8_with(b, target, dtype, x, true)
}

/// `f32` → fp8 in the low byte of a `b32`, round to nearest even, NaN kept; a result
/// past the largest finite value (Inf included) is the largest finite when `saturate`,
/// else NaN (e4m3) or Inf (e5m2). sm_90's only conversion is `satfinite`: the overflow
/// is a compare of the magnitude with the rounding threshold (e4m3: above 464; e5m2:
/// 61440 and above) and a `selp`.
pub fn f32_to_fp8_with(b: &mut Builder, target: Target, dtype: DType, x: Operand, saturate: bool) -> Reg {
    let x = materialize(b, Class::F32, x);
    let kind = if dtype == DType::Fp8E4m3 { "e4m3x2" } else { "e5m2x2" };
    let overflow_code = if dtype == DType::Fp8E4m3 { 0x7f } else { 0x7c };
    if target == Target::Sm90 {
        let h = b.reg(Class::B16);
        let zero = b.reg(Class::F32);
        b.ins(format!("mov.f32 {zero}, 0f00000000"));
        b.ins(format!("cvt.rn.satfinite.{kind}.f32 {h}, {zero}, {x}"));
        let r = b.reg(Class::B32);
        b.ins(format!("cvt.u32.u16 {r}, {h}"));
        if !saturate {
            let ax = b.reg(Class::F32);
            b.ins(format!("abs.f32 {ax}, {x}"));
            let over = b.reg(Class::Pred);
            if dtype == DType::Fp8E4m3 {
                b.ins(format!("setp.gt.f32 {over}, {ax}, {}", Operand::f32(464.0)));
            } else {
                b.ins(format!("setp.ge.f32 {over}, {ax}, {}", Operand::f32(61440.0)));
            }
            let code = b.reg(Class::B32);
            b.ins(format!("and.b32 {code}, {r}, 128"));
            b.ins(format!("or.b32 {code}, {code}, {overflow_code}"));
            b.ins(format!("selp.b32 {r}, {code}, {r}, {over}"));
        }
        return r;
    }
    // sm_80 has no fp8 conversions: round the magnitude's bits by hand.
    let (mbits, bias, max_code) = if dtype == DType::Fp8E4m3 { (3, 7, 0x7e) } else { (2, 15, 0x7b) };
    let bits = b.reg(Class::B32);
    b.ins(format!("mov.b32 {bits}, {x}"));
    let sign = b.reg(Class::B32);
    b.ins(format!("shr.u32 {sign}, {bits}, 24"));
    b.ins(format!("and.b32 {sign}, {sign}, 128"));
    let mag = b.reg(Class::B32);
    b.ins(format!("and.b32 {mag}, {bits}, 2147483647"));
    // Normal range: round to nearest even at the mantissa cut, then rebias.
    let drop = 23 - mbits;
    let lsb = b.reg(Class::B32);
    b.ins(format!("bfe.u32 {lsb}, {mag}, {drop}, 1"));
    let normal = b.reg(Class::B32);
    b.ins(format!("add.u32 {normal}, {mag}, {}", (1u32 << (drop - 1)) - 1));
    b.ins(format!("add.u32 {normal}, {normal}, {lsb}"));
    b.ins(format!("shr.u32 {normal}, {normal}, {drop}"));
    b.ins(format!("sub.u32 {normal}, {normal}, {}", (127 - bias) << mbits));
    // Below the smallest normal: an integer count of the smallest subnormal (the
    // conversion rounds to nearest even).
    let absf = b.reg(Class::F32);
    b.ins(format!("abs.f32 {absf}, {x}"));
    let scaled = b.reg(Class::F32);
    let scale = 2f32.powi(bias - 1 + mbits);
    b.ins(format!("mul.f32 {scaled}, {absf}, {}", Operand::f32(scale)));
    let sub = b.reg(Class::B32);
    b.ins(format!("cvt.rni.u32.f32 {sub}, {scaled}"));
    let is_sub = b.reg(Class::Pred);
    let min_normal = 2f32.powi(1 - bias);
    b.ins(format!("setp.lt.f32 {is_sub}, {absf}, {}", Operand::f32(min_normal)));
    let code = b.reg(Class::B32);
    b.ins(format!("selp.b32 {code}, {sub}, {normal}, {is_sub}"));
    let nan = b.reg(Class::Pred);
    b.ins(format!("setp.gt.u32 {nan}, {mag}, 2139095040"));
    if saturate {
        // Saturate (also catches infinities: their rebias lands past the top).
        let big = b.reg(Class::Pred);
        b.ins(format!("setp.gt.u32 {big}, {mag}, 2139095039"));
        b.ins(format!("min.u32 {code}, {code}, {max_code}"));
        b.ins(format!("selp.b32 {code}, {max_code}, {code}, {big}"));
    } else {
        // Rounded past the largest finite code (infinities land there too).
        let over = b.reg(Class::Pred);
        b.ins(format!("setp.gt.u32 {over}, {code}, {max_code}"));
        b.ins(format!("selp.b32 {code}, {overflow_code}, {code}, {over}"));
    }
    b.ins(format!("selp.b32 {code}, 127, {code}, {nan}"));
    b.ins(format!("or.b32 {code}, {code}, {sign}"));
    code
}

/// fp8 bits (low byte) → `f32`, exact.
pub fn fp8_to_f32(b: &mut Builder, target: Target, dtype: DType, bits: Operand) -> Operand {
    let bits = materialize(b, Class::B32, bits);
    let half = b.reg(Class::B32);
    if target == Target::Sm90 {
        let kind = if dtype == DType::Fp8E4m3 { "e4m3x2" } else { "e5m2x2" };
        let h = b.reg(Class::B16);
        b.ins(format!("cvt.u16.u32 {h}, {bits}"));
        b.ins(format!("cvt.rn.f16x2.{kind} {half}, {h}"));
    } else {
        // Both fields placed in an f16: e5m2 is the high byte of an f16; e4m3 needs a
        // shift and a scale by 2^8 (and its NaN code made an f16 NaN).
        b.ins(format!("shl.b32 {half}, {bits}, 8"));
        if dtype == DType::Fp8E4m3 {
            fp8x2_e4m3_fix(b, half);
        }
    }
    let lo = b.reg(Class::B16);
    let hi = b.reg(Class::B16);
    b.ins(format!("mov.b32 {{{lo}, {hi}}}, {half}"));
    let f = b.reg(Class::F32);
    b.ins(format!("cvt.f32.f16 {f}, {lo}"));
    Operand::Reg(f)
}

/// `t` holds two e4m3 codes shifted to bits 8-15 and 24-31; makes it two f16 of the
/// same values (sm_80, no fp8 conversions).
fn fp8x2_e4m3_fix(b: &mut Builder, t: Reg) {
    let sign = b.reg(Class::B32);
    b.ins(format!("and.b32 {sign}, {t}, {}", 0x8000_8000u32));
    let mag = b.reg(Class::B32);
    b.ins(format!("and.b32 {mag}, {t}, {}", 0x7f00_7f00u32));
    // A magnitude field of 0x7f is e4m3's NaN.
    let nan = b.reg(Class::B32);
    b.ins(format!("add.u32 {nan}, {mag}, {}", 0x0100_0100u32));
    b.ins(format!("and.b32 {nan}, {nan}, {}", 0x8000_8000u32));
    b.ins(format!("shr.u32 {nan}, {nan}, 15"));
    b.ins(format!("mul.lo.u32 {nan}, {nan}, {}", 0x7c00));
    b.ins(format!("shr.u32 {mag}, {mag}, 1"));
    b.ins(format!("or.b32 {t}, {sign}, {mag}"));
    // Exponent bias 7 → 15: times 2^8, exact in f16.
    let scale = b.reg(Class::B32);
    b.ins(format!("mov.b32 {scale}, {}", 0x5c00_5c00u32));
    b.ins(format!("mul.rn.f16x2 {t}, {t}, {scale}"));
    b.ins(format!("or.b32 {t}, {t}, {nan}"));
}

/// Two f16 pairs from four fp8 codes in a word: (bytes 0-1, bytes 2-3) — the sm_80
/// path of fp8 `mma`.
pub fn fp8x4_to_f16x2(b: &mut Builder, dtype: DType, word: Operand) -> (Reg, Reg) {
    let word = materialize(b, Class::B32, word);
    let lo = b.reg(Class::B32);
    let hi = b.reg(Class::B32);
    // Byte k to bits 8-15 / 24-31 of a pair: prmt selects (zero, b0, zero, b1).
    b.ins(format!("prmt.b32 {lo}, {word}, 0, {}", 0x1404));
    b.ins(format!("prmt.b32 {hi}, {word}, 0, {}", 0x3424));
    if dtype == DType::Fp8E4m3 {
        fp8x2_e4m3_fix(b, lo);
        fp8x2_e4m3_fix(b, hi);
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rounding_matches_the_formats() {
        assert_eq!(round_host(DType::BF16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_host(DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_host(DType::F16, 1.0 + 1.0 / 2048.0), 1.0);
        assert!(round_host(DType::Fp8E4m3, 1000.0).is_nan());
        assert_eq!(round_host_saturating(DType::Fp8E4m3, 1000.0), 448.0);
        assert_eq!(round_host(DType::Fp8E4m3, 464.0), 448.0);
        assert_eq!(round_host(DType::Fp8E5m2, -1e6), f64::NEG_INFINITY);
        assert_eq!(round_host_saturating(DType::Fp8E5m2, -1e6), -57344.0);
        assert_eq!(round_host(DType::Fp8E4m3, -0.3), -0.3125);
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.5), 0xc100);
        assert_eq!(f16_bits(65504.0), 0x7bff);
    }
}
