//! Element numerics (docs/ir.md, "Numerics") as LLVM IR: register and storage types of
//! each dtype, the exact conversions between them, casts, elementwise arithmetic and
//! vectorizable approximations of the transcendental functions.
//!
//! Registers hold dtype-exact values: every 16- and 8-bit float lives in an `f32` whose
//! value is representable in its dtype (rounded to nearest even after each op), `int8`
//! and `int4` in an `i8` (wrapped to their width), `bool` in an `i1`. All conversions
//! are branch-free integer and float arithmetic so that they vectorize.

use tessera_frontend::check::DType;

use super::builder::{lit, Elem, FnBuilder, VTy};

/// How a dtype's elements are stored in a tensor or a buffer.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum Storage {
    /// The register type itself (private buffers hold register values).
    Direct(Elem),
    /// bf16 bits in an i16.
    Bf16,
    /// IEEE half bits in an i16.
    F16,
    Fp8E4m3,
    Fp8E5m2,
    /// `bool` as an i8 0/1.
    Bool8,
}

impl Storage {
    /// The in-memory element.
    pub(super) fn elem(self) -> Elem {
        match self {
            Storage::Direct(e) => e,
            Storage::Bf16 | Storage::F16 => Elem::I16,
            Storage::Fp8E4m3 | Storage::Fp8E5m2 | Storage::Bool8 => Elem::I8,
        }
    }

    /// Storage of a tensor of `dtype` (the host layout of `backends::tensor`).
    pub(super) fn of_tensor(dtype: DType) -> Storage {
        match dtype {
            DType::F64 => Storage::Direct(Elem::F64),
            DType::F32 | DType::TF32 => Storage::Direct(Elem::F32),
            DType::BF16 => Storage::Bf16,
            DType::F16 => Storage::F16,
            DType::Fp8E4m3 => Storage::Fp8E4m3,
            DType::Fp8E5m2 => Storage::Fp8E5m2,
            DType::Int8 | DType::Int4 => Storage::Direct(Elem::I8),
            DType::I32 => Storage::Direct(Elem::I32),
            DType::I64 => Storage::Direct(Elem::I64),
            DType::Bool => Storage::Bool8,
        }
    }

    /// Storage of a private buffer holding `dtype` registers.
    pub(super) fn private(dtype: DType) -> Storage {
        match reg(dtype) {
            Elem::I1 => Storage::Bool8,
            e => Storage::Direct(e),
        }
    }
}

/// The register element of a dtype.
pub(super) fn reg(dtype: DType) -> Elem {
    match dtype {
        DType::F64 => Elem::F64,
        DType::F32 | DType::TF32 | DType::BF16 | DType::F16 | DType::Fp8E4m3 | DType::Fp8E5m2 => Elem::F32,
        DType::Int8 | DType::Int4 => Elem::I8,
        DType::I32 => Elem::I32,
        DType::I64 => Elem::I64,
        DType::Bool => Elem::I1,
    }
}

/// The register element of an IR scalar type (`None`: index).
pub(super) fn reg_of(dtype: Option<DType>) -> Elem {
    dtype.map_or(Elem::I64, reg)
}

pub(super) fn bitcast(b: &mut FnBuilder, from: VTy, v: &str, to: VTy) -> String {
    b.val("bc", format!("bitcast {} {v} to {}", from.ir(), to.ir()))
}

pub(super) fn ins(b: &mut FnBuilder, op: &str, ty: VTy, x: &str, y: &str) -> String {
    b.val(op, format!("{op} {} {x}, {y}", ty.ir()))
}

pub(super) fn icmp(b: &mut FnBuilder, pred: &str, ty: VTy, x: &str, y: &str) -> String {
    b.val("c", format!("icmp {pred} {} {x}, {y}", ty.ir()))
}

pub(super) fn fcmp(b: &mut FnBuilder, pred: &str, ty: VTy, x: &str, y: &str) -> String {
    b.val("c", format!("fcmp {pred} {} {x}, {y}", ty.ir()))
}

pub(super) fn select(b: &mut FnBuilder, ty: VTy, c: &str, x: &str, y: &str) -> String {
    b.val("sel", format!("select {} {c}, {} {x}, {} {y}", ty.with(Elem::I1).ir(), ty.ir(), ty.ir()))
}

pub(super) fn conv(b: &mut FnBuilder, op: &str, from: VTy, v: &str, to: VTy) -> String {
    b.val("cv", format!("{op} {} {v} to {}", from.ir(), to.ir()))
}

/// `@llvm.<name>.<mangled ty>(args...)` with all arguments of type `ty`.
pub(super) fn intr(b: &mut FnBuilder, name: &str, ty: VTy, args: &[&str]) -> String {
    let full = format!("llvm.{name}.{}", ty.mangle());
    let a: Vec<(String, String)> = args.iter().map(|v| (ty.ir(), v.to_string())).collect();
    b.call(name, &full, &ty.ir(), &a)
}

fn f(ty: VTy, v: f64) -> String {
    lit(ty, v)
}

// ----- storage conversions ---------------------------------------------------------------

/// A loaded storage value (`ty` lanes of the storage element) as registers of `dtype`.
pub(super) fn from_storage(b: &mut FnBuilder, st: Storage, ty: VTy, v: &str) -> String {
    let i32t = ty.with(Elem::I32);
    let f32t = ty.with(Elem::F32);
    match st {
        Storage::Direct(_) => v.to_string(),
        Storage::Bool8 => icmp(b, "ne", ty.with(Elem::I8), v, &lit(ty.with(Elem::I8), 0.0)),
        Storage::Bf16 => {
            let w = conv(b, "zext", ty.with(Elem::I16), v, i32t);
            let s = ins(b, "shl", i32t, &w, &lit(i32t, 16.0));
            bitcast(b, i32t, &s, f32t)
        }
        Storage::F16 => f16_to_f32(b, ty, v),
        Storage::Fp8E4m3 => fp8_to_f32(b, ty, v, 3, 7),
        Storage::Fp8E5m2 => fp8_to_f32(b, ty, v, 2, 15),
    }
}

/// Registers of `ty` (the register element) encoded for storage (rounding to nearest even).
pub(super) fn to_storage(b: &mut FnBuilder, st: Storage, ty: VTy, v: &str) -> String {
    match st {
        Storage::Direct(_) => v.to_string(),
        Storage::Bool8 => conv(b, "zext", ty.with(Elem::I1), v, ty.with(Elem::I8)),
        Storage::Bf16 => f32_to_bf16(b, ty, v),
        Storage::F16 => f32_to_f16(b, ty, v),
        // Registers hold exact fp8 values: the encoding never overflows.
        Storage::Fp8E4m3 => f32_to_fp8(b, ty, v, Fp8::E4M3, false),
        Storage::Fp8E5m2 => f32_to_fp8(b, ty, v, Fp8::E5M2, false),
    }
}

fn f32_to_bf16(b: &mut FnBuilder, ty: VTy, v: &str) -> String {
    let i32t = ty.with(Elem::I32);
    let bits = bitcast(b, ty.with(Elem::F32), v, i32t);
    // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top half.
    let hi = ins(b, "lshr", i32t, &bits, &lit(i32t, 16.0));
    let odd = ins(b, "and", i32t, &hi, &lit(i32t, 1.0));
    let bias = ins(b, "add", i32t, &odd, &lit(i32t, 32767.0));
    let sum = ins(b, "add", i32t, &bits, &bias);
    let rounded = ins(b, "lshr", i32t, &sum, &lit(i32t, 16.0));
    // NaN stays a (quiet) NaN.
    let quiet = ins(b, "or", i32t, &hi, &lit(i32t, 64.0));
    let nan = fcmp(b, "uno", ty.with(Elem::F32), v, v);
    let out = select(b, i32t, &nan, &quiet, &rounded);
    conv(b, "trunc", i32t, &out, ty.with(Elem::I16))
}

fn f16_to_f32(b: &mut FnBuilder, ty: VTy, v: &str) -> String {
    let i32t = ty.with(Elem::I32);
    let f32t = ty.with(Elem::F32);
    let h = conv(b, "zext", ty.with(Elem::I16), v, i32t);
    let sign = ins(b, "and", i32t, &h, &lit(i32t, 32768.0));
    let sign = ins(b, "shl", i32t, &sign, &lit(i32t, 16.0));
    let em = ins(b, "and", i32t, &h, &lit(i32t, 32767.0));
    let shifted = ins(b, "shl", i32t, &em, &lit(i32t, 13.0));
    // Normal and subnormal halves: rebias the exponent by multiplying by 2^112 (exact).
    let asf = bitcast(b, i32t, &shifted, f32t);
    let scaled = ins(b, "fmul", f32t, &asf, &f(f32t, 2f64.powi(112)));
    let scaled_bits = bitcast(b, f32t, &scaled, i32t);
    // Infinities and NaNs keep an all-ones exponent.
    let special = ins(b, "or", i32t, &shifted, &lit(i32t, f64::from(0x7f80_0000u32)));
    let is_special = icmp(b, "uge", i32t, &em, &lit(i32t, f64::from(0x7c00u32)));
    let mag = select(b, i32t, &is_special, &special, &scaled_bits);
    let bits = ins(b, "or", i32t, &mag, &sign);
    bitcast(b, i32t, &bits, f32t)
}

/// f32 → f16 bits, round to nearest even, overflow to infinity (F. Giesen's method).
fn f32_to_f16(b: &mut FnBuilder, ty: VTy, v: &str) -> String {
    let i32t = ty.with(Elem::I32);
    let f32t = ty.with(Elem::F32);
    let bits = bitcast(b, f32t, v, i32t);
    let sign = ins(b, "and", i32t, &bits, &lit(i32t, f64::from(0x8000_0000u32)));
    let a = ins(b, "xor", i32t, &bits, &sign);
    // Too large: infinity, or a quiet NaN for NaNs.
    let f32_inf = f64::from(0x7f80_0000u32);
    let is_nan = icmp(b, "ugt", i32t, &a, &lit(i32t, f32_inf));
    let big = select(b, i32t, &is_nan, &lit(i32t, f64::from(0x7e00u32)), &lit(i32t, f64::from(0x7c00u32)));
    let f16max = f64::from((127u32 + 16) << 23);
    let is_big = icmp(b, "uge", i32t, &a, &lit(i32t, f16max));
    // Subnormal results: let the float adder round at the half's subnormal ulp.
    let magic_bits = ((127u32 - 15) + (23 - 10) + 1) << 23;
    let af = bitcast(b, i32t, &a, f32t);
    let summed = ins(b, "fadd", f32t, &af, &f(f32t, f64::from(f32::from_bits(magic_bits))));
    let sb = bitcast(b, f32t, &summed, i32t);
    let sub = ins(b, "sub", i32t, &sb, &lit(i32t, f64::from(magic_bits)));
    // Normal results: rebias and round to nearest even.
    let odd = ins(b, "lshr", i32t, &a, &lit(i32t, 13.0));
    let odd = ins(b, "and", i32t, &odd, &lit(i32t, 1.0));
    let rebias = (15i64 - 127) << 23;
    let n1 = ins(b, "add", i32t, &a, &lit(i32t, (rebias + 0xfff) as f64));
    let n2 = ins(b, "add", i32t, &n1, &odd);
    let normal = ins(b, "lshr", i32t, &n2, &lit(i32t, 13.0));
    let is_sub = icmp(b, "ult", i32t, &a, &lit(i32t, f64::from(113u32 << 23)));
    let small = select(b, i32t, &is_sub, &sub, &normal);
    let mag = select(b, i32t, &is_big, &big, &small);
    let s16 = ins(b, "lshr", i32t, &sign, &lit(i32t, 16.0));
    let out = ins(b, "or", i32t, &mag, &s16);
    conv(b, "trunc", i32t, &out, ty.with(Elem::I16))
}

#[derive(Copy, Clone)]
enum Fp8 {
    E4M3,
    E5M2,
}

/// fp8 bits → f32 (`m` mantissa bits, exponent bias `bias`).
fn fp8_to_f32(b: &mut FnBuilder, ty: VTy, v: &str, m: u32, bias: i32) -> String {
    let i32t = ty.with(Elem::I32);
    let f32t = ty.with(Elem::F32);
    let x = conv(b, "zext", ty.with(Elem::I8), v, i32t);
    let sign = ins(b, "and", i32t, &x, &lit(i32t, 128.0));
    let sign = ins(b, "shl", i32t, &sign, &lit(i32t, 24.0));
    let em = ins(b, "and", i32t, &x, &lit(i32t, 127.0));
    // Normal: exponent and mantissa shifted into place, rebiased by adding to the bits.
    let shifted = ins(b, "shl", i32t, &em, &lit(i32t, f64::from(23 - m)));
    let normal = ins(b, "add", i32t, &shifted, &lit(i32t, f64::from(((127 - bias) as u32) << 23)));
    // Subnormal (exponent 0): mantissa * 2^(1 - bias - m), exact in f32.
    let mf = conv(b, "uitofp", i32t, &em, f32t);
    let subf = ins(b, "fmul", f32t, &mf, &f(f32t, 2f64.powi(1 - bias - m as i32)));
    let sub = bitcast(b, f32t, &subf, i32t);
    let is_sub = icmp(b, "ult", i32t, &em, &lit(i32t, f64::from(1u32 << m)));
    let mag = select(b, i32t, &is_sub, &sub, &normal);
    let top = f64::from(((1u32 << (7 - m)) - 1) << m);
    let mag = match m {
        // E4M3 (no infinities): S.1111.111 is NaN.
        3 => {
            let nan = icmp(b, "eq", i32t, &em, &lit(i32t, 127.0));
            select(b, i32t, &nan, &lit(i32t, f64::from(0x7fc0_0000u32)), &mag)
        }
        // E5M2: an all-ones exponent is infinity (mantissa 0) or NaN.
        _ => {
            let special = icmp(b, "uge", i32t, &em, &lit(i32t, top));
            let mant = ins(b, "and", i32t, &em, &lit(i32t, 3.0));
            let mant = ins(b, "shl", i32t, &mant, &lit(i32t, 21.0));
            let inf = ins(b, "or", i32t, &mant, &lit(i32t, f64::from(0x7f80_0000u32)));
            select(b, i32t, &special, &inf, &mag)
        }
    };
    let bits = ins(b, "or", i32t, &mag, &sign);
    bitcast(b, i32t, &bits, f32t)
}

/// f32 → fp8, round to nearest even; NaN → 0x7f. A result beyond the largest finite
/// (Inf included) is NaN for e4m3 and Inf for e5m2, or the largest finite when
/// `saturate` (`@saturate`).
fn f32_to_fp8(b: &mut FnBuilder, ty: VTy, v: &str, kind: Fp8, saturate: bool) -> String {
    let (m, bias, max_code, overflow_code): (u32, i64, u32, u32) = match kind {
        Fp8::E4M3 => (3, 7, 0x7e, 0x7f),
        Fp8::E5M2 => (2, 15, 0x7b, 0x7c),
    };
    let i32t = ty.with(Elem::I32);
    let f32t = ty.with(Elem::F32);
    let bits = bitcast(b, f32t, v, i32t);
    let sign = ins(b, "lshr", i32t, &bits, &lit(i32t, 24.0));
    let sign = ins(b, "and", i32t, &sign, &lit(i32t, 128.0));
    let a = ins(b, "and", i32t, &bits, &lit(i32t, f64::from(0x7fff_ffffu32)));
    // Subnormal codes: the float adder rounds at the fp8 subnormal ulp 2^(1 - bias - m).
    let magic = 2f64.powi(1 - bias as i32 - m as i32 + 23);
    let af = bitcast(b, i32t, &a, f32t);
    let summed = ins(b, "fadd", f32t, &af, &f(f32t, magic));
    let sb = bitcast(b, f32t, &summed, i32t);
    let sub = ins(b, "sub", i32t, &sb, &lit(i32t, f64::from((magic as f32).to_bits())));
    // Normal codes: round the mantissa to `m` bits (nearest even) and rebias.
    let shift = 23 - m;
    let odd = ins(b, "lshr", i32t, &a, &lit(i32t, f64::from(shift)));
    let odd = ins(b, "and", i32t, &odd, &lit(i32t, 1.0));
    let n1 = ins(b, "add", i32t, &a, &lit(i32t, f64::from((1u32 << (shift - 1)) - 1)));
    let n2 = ins(b, "add", i32t, &n1, &odd);
    let n3 = ins(b, "lshr", i32t, &n2, &lit(i32t, f64::from(shift)));
    let normal = ins(b, "sub", i32t, &n3, &lit(i32t, ((127 - bias) << m) as f64));
    let min_normal = 2f32.powi(1 - bias as i32).to_bits();
    let is_sub = icmp(b, "ult", i32t, &a, &lit(i32t, f64::from(min_normal)));
    let code = select(b, i32t, &is_sub, &sub, &normal);
    // Rounded past the largest finite code (Inf lands there too).
    let is_big = icmp(b, "ugt", i32t, &code, &lit(i32t, f64::from(max_code)));
    let over = if saturate { max_code } else { overflow_code };
    let code = select(b, i32t, &is_big, &lit(i32t, f64::from(over)), &code);
    let code = ins(b, "or", i32t, &code, &sign);
    let nan = fcmp(b, "uno", f32t, v, v);
    let code = select(b, i32t, &nan, &lit(i32t, 127.0), &code);
    conv(b, "trunc", i32t, &code, ty.with(Elem::I8))
}

/// Rounds f32 registers to the values of `dtype` (identity for f32).
pub(super) fn round_f32(b: &mut FnBuilder, dtype: DType, ty: VTy, v: &str) -> String {
    round_f32_with(b, dtype, ty, v, false)
}

/// [`round_f32`]; fp8 overflow clamps when `saturate` (`@saturate`).
pub(super) fn round_f32_with(b: &mut FnBuilder, dtype: DType, ty: VTy, v: &str, saturate: bool) -> String {
    match dtype {
        DType::BF16 => {
            let s = f32_to_bf16(b, ty, v);
            from_storage(b, Storage::Bf16, ty.with(Elem::I16), &s)
        }
        DType::F16 => {
            let s = f32_to_f16(b, ty, v);
            from_storage(b, Storage::F16, ty.with(Elem::I16), &s)
        }
        DType::Fp8E4m3 => {
            let s = f32_to_fp8(b, ty, v, Fp8::E4M3, saturate);
            from_storage(b, Storage::Fp8E4m3, ty.with(Elem::I8), &s)
        }
        DType::Fp8E5m2 => {
            let s = f32_to_fp8(b, ty, v, Fp8::E5M2, saturate);
            from_storage(b, Storage::Fp8E5m2, ty.with(Elem::I8), &s)
        }
        DType::TF32 => {
            // 10 mantissa bits, nearest even; infinities and NaNs unchanged.
            let i32t = ty.with(Elem::I32);
            let f32t = ty.with(Elem::F32);
            let bits = bitcast(b, f32t, v, i32t);
            let odd = ins(b, "lshr", i32t, &bits, &lit(i32t, 13.0));
            let odd = ins(b, "and", i32t, &odd, &lit(i32t, 1.0));
            let s = ins(b, "add", i32t, &bits, &lit(i32t, 4095.0));
            let s = ins(b, "add", i32t, &s, &odd);
            let r = ins(b, "and", i32t, &s, &lit(i32t, f64::from(!0x1fffu32)));
            let fin = intr(b, "fabs", f32t, &[v]);
            let finite = fcmp(b, "olt", f32t, &fin, &f(f32t, f64::INFINITY));
            let out = select(b, i32t, &finite, &r, &bits);
            bitcast(b, i32t, &out, f32t)
        }
        _ => v.to_string(),
    }
}

/// Wraps integer registers to their dtype's width (int4 in an i8).
pub(super) fn wrap(b: &mut FnBuilder, dtype: Option<DType>, ty: VTy, v: &str) -> String {
    if dtype == Some(DType::Int4) {
        let s = ins(b, "shl", ty, v, &lit(ty, 4.0));
        ins(b, "ashr", ty, &s, &lit(ty, 4.0))
    } else {
        v.to_string()
    }
}

/// Rounds or wraps a freshly computed result to its dtype.
pub(super) fn finish(b: &mut FnBuilder, dtype: Option<DType>, ty: VTy, v: &str) -> String {
    match (dtype, ty.elem) {
        (Some(d), Elem::F32) => round_f32(b, d, ty, v),
        (_, Elem::I8) => wrap(b, dtype, ty, v),
        _ => v.to_string(),
    }
}

// ----- casts -------------------------------------------------------------------------------

/// Saturating signed integer narrowing or widening between register elements.
fn int_resize(b: &mut FnBuilder, from: VTy, v: &str, to: Elem, lo: f64, hi: f64) -> String {
    let fb = from.elem.bits();
    let tb = to.bits();
    if tb > fb {
        return conv(b, "sext", from, v, from.with(to));
    }
    let c = intr(b, "smax", from, &[v, &lit(from, lo)]);
    let c = intr(b, "smin", from, &[&c, &lit(from, hi)]);
    if tb == fb {
        c
    } else {
        conv(b, "trunc", from, &c, from.with(to))
    }
}

fn int_range(dtype: Option<DType>) -> (f64, f64) {
    match dtype {
        Some(DType::Int4) => (-8.0, 7.0),
        Some(DType::Int8) => (-128.0, 127.0),
        Some(DType::I32) => (f64::from(i32::MIN), f64::from(i32::MAX)),
        _ => (i64::MIN as f64, i64::MAX as f64),
    }
}

/// Converts registers of `from` (a dtype, or index for `None`) to `to`: rounding to
/// nearest even (fp8 overflow: NaN for e4m3, Inf for e5m2), float → int truncating
/// toward zero to an i64 (saturating, NaN → 0) and wrapping to the width, int → int
/// wrapping, `x != 0` for bool. Index results saturate.
pub(super) fn cast(b: &mut FnBuilder, from: Option<DType>, to: Option<DType>, w: u32, v: &str) -> String {
    cast_with(b, from, to, w, v, false)
}

/// [`cast`]; under `@saturate` (`saturate`) fp8 overflow clamps to the largest finite
/// value and integer results clamp to their range.
pub(super) fn cast_with(
    b: &mut FnBuilder,
    from: Option<DType>,
    to: Option<DType>,
    w: u32,
    v: &str,
    saturate: bool,
) -> String {
    let fe = reg_of(from);
    let te = reg_of(to);
    let ft = VTy::new(fe, w);
    let tt = VTy::new(te, w);
    if from == to {
        return v.to_string();
    }
    match (fe, te) {
        (Elem::I1, Elem::I1) => v.to_string(),
        (Elem::I1, e) if e.is_float() => conv(b, "uitofp", ft, v, tt),
        (Elem::I1, _) => conv(b, "zext", ft, v, tt),
        (e, Elem::I1) if e.is_float() => fcmp(b, "une", ft, v, &lit(ft, 0.0)),
        (_, Elem::I1) => icmp(b, "ne", ft, v, &lit(ft, 0.0)),
        (Elem::F32, Elem::F32) => round_f32_with(b, to.unwrap_or(DType::F32), tt, v, saturate),
        (Elem::F32, Elem::F64) => conv(b, "fpext", ft, v, tt),
        (Elem::F64, Elem::F32) => {
            let t = conv(b, "fptrunc", ft, v, tt);
            round_f32_with(b, to.unwrap_or(DType::F32), tt, &t, saturate)
        }
        (fe, te) if fe.is_float() && (saturate || to.is_none()) => {
            // Saturating float → int: through i32/i64, then clamped to int8/int4.
            let wide = if te == Elem::I64 { Elem::I64 } else { Elem::I32 };
            let wt = VTy::new(wide, w);
            let name = format!("llvm.fptosi.sat.{}.{}", wt.mangle(), ft.mangle());
            let r = b.call("sat", &name, &wt.ir(), &[(ft.ir(), v.to_string())]);
            if wide == te {
                r
            } else {
                let (lo, hi) = int_range(to);
                int_resize(b, wt, &r, te, lo, hi)
            }
        }
        (fe, te) if fe.is_float() => {
            // Wrapping float → int: truncate to an i64 (saturating), keep the low bits.
            let wt = VTy::new(Elem::I64, w);
            let name = format!("llvm.fptosi.sat.{}.{}", wt.mangle(), ft.mangle());
            let r = b.call("sat", &name, &wt.ir(), &[(ft.ir(), v.to_string())]);
            let r = if te == Elem::I64 { r } else { conv(b, "trunc", wt, &r, tt) };
            wrap(b, to, tt, &r)
        }
        (_, te) if te.is_float() => {
            let r = conv(b, "sitofp", ft, v, tt);
            if te == Elem::F32 {
                round_f32_with(b, to.unwrap_or(DType::F32), tt, &r, saturate)
            } else {
                r
            }
        }
        _ => {
            let (lo, hi) = int_range(to);
            if fe.bits() < te.bits() {
                conv(b, "sext", ft, v, tt)
            } else if saturate || to.is_none() {
                int_resize(b, ft, v, te, lo, hi)
            } else {
                // Wrapping: keep the low bits (int4: the low nibble, sign-extended).
                let r = if fe.bits() == te.bits() { v.to_string() } else { conv(b, "trunc", ft, v, tt) };
                wrap(b, to, tt, &r)
            }
        }
    }
}

// ----- elementwise arithmetic ------------------------------------------------------------

/// Why an element operation cannot be emitted.
pub(super) type NumError = String;

/// Where a runtime error (integer division by zero) is recorded.
pub(super) struct ErrSink<'a> {
    /// The i32 slot of the program's first error.
    pub slot: &'a str,
    /// This op's error code.
    pub code: u32,
}

fn record_error(b: &mut FnBuilder, ty: VTy, bad: &str, sink: &ErrSink<'_>) {
    let any = if ty.w == 0 {
        bad.to_string()
    } else {
        let name = format!("llvm.vector.reduce.or.{}", ty.with(Elem::I1).mangle());
        b.call("any", &name, "i1", &[(ty.with(Elem::I1).ir(), bad.to_string())])
    };
    let (slot, code) = (sink.slot.to_string(), sink.code);
    b.when(&any, "err", &mut |b| {
        let cur = b.val("e", format!("load i32, i32* {slot}"));
        let first = b.val("first", format!("icmp eq i32 {cur}, 0"));
        let next = b.val("e", format!("select i1 {first}, i32 {code}, i32 {cur}"));
        b.emit(format!("store i32 {next}, i32* {slot}"));
    });
}

/// A divisor with zeros replaced by 1 (recording the error) and, to avoid the one
/// overflowing quotient, -1 by 1 as well; returns (safe divisor, divisor was -1).
fn safe_divisor(b: &mut FnBuilder, ty: VTy, d: &str, sink: &ErrSink<'_>) -> (String, String) {
    let zero = icmp(b, "eq", ty, d, &lit(ty, 0.0));
    record_error(b, ty, &zero, sink);
    let minus = icmp(b, "eq", ty, d, &lit(ty, -1.0));
    let bad = ins(b, "or", ty.with(Elem::I1), &zero, &minus);
    (select(b, ty, &bad, &lit(ty, 1.0), d), minus)
}

/// `a op b` of registers of `dtype` (`None`: index) computed per docs/ir.md.
pub(super) fn binary(
    b: &mut FnBuilder,
    op: &str,
    dtype: Option<DType>,
    w: u32,
    x: &str,
    y: &str,
    sink: &ErrSink<'_>,
) -> Result<String, NumError> {
    let e = reg_of(dtype);
    let ty = VTy::new(e, w);
    let r = match e {
        Elem::F32 | Elem::F64 => match op {
            "add" => ins(b, "fadd", ty, x, y),
            "sub" => ins(b, "fsub", ty, x, y),
            "mul" => ins(b, "fmul", ty, x, y),
            "div" => ins(b, "fdiv", ty, x, y),
            "floordiv" => {
                let q = ins(b, "fdiv", ty, x, y);
                intr(b, "floor", ty, &[&q])
            }
            "rem" => {
                // Python's: fmod, moved into the divisor's sign when it is not already
                // there, and a zero remainder signed like the divisor.
                let r = ins(b, "frem", ty, x, y);
                let shifted = ins(b, "fadd", ty, &r, y);
                let r_neg = fcmp(b, "olt", ty, &r, &lit(ty, 0.0));
                let y_neg = fcmp(b, "olt", ty, y, &lit(ty, 0.0));
                let differ = ins(b, "xor", ty.with(Elem::I1), &r_neg, &y_neg);
                let nonzero = fcmp(b, "one", ty, &r, &lit(ty, 0.0));
                let adjust = ins(b, "and", ty.with(Elem::I1), &nonzero, &differ);
                let r = select(b, ty, &adjust, &shifted, &r);
                let zero = fcmp(b, "oeq", ty, &r, &lit(ty, 0.0));
                let signed_zero = intr(b, "copysign", ty, &[&lit(ty, 0.0), y]);
                select(b, ty, &zero, &signed_zero, &r)
            }
            "pow" => {
                // In f64, rounded once (the reference's definition).
                if e == Elem::F64 {
                    intr(b, "pow", ty, &[x, y])
                } else {
                    let dt = ty.with(Elem::F64);
                    let xd = conv(b, "fpext", ty, x, dt);
                    let yd = conv(b, "fpext", ty, y, dt);
                    let p = intr(b, "pow", dt, &[&xd, &yd]);
                    conv(b, "fptrunc", dt, &p, ty)
                }
            }
            "max" => intr(b, "maxnum", ty, &[x, y]),
            "min" => intr(b, "minnum", ty, &[x, y]),
            _ => return Err(format!("`arith.{op}` is not defined on {}", describe(dtype))),
        },
        Elem::I1 => match op {
            "and" | "min" | "mul" => ins(b, "and", ty, x, y),
            "or" | "max" => ins(b, "or", ty, x, y),
            "xor" => ins(b, "xor", ty, x, y),
            _ => return Err(format!("`arith.{op}` is not defined on bool")),
        },
        _ => match op {
            "add" => ins(b, "add", ty, x, y),
            "sub" => ins(b, "sub", ty, x, y),
            "mul" => ins(b, "mul", ty, x, y),
            "and" => ins(b, "and", ty, x, y),
            "or" => ins(b, "or", ty, x, y),
            "xor" => ins(b, "xor", ty, x, y),
            // An amount outside 0..width (unsigned compare: negatives too) is poison in
            // LLVM; Tessera's shifts every bit out there (`frontend::arith::shl_i64`).
            "shl" | "shr" => {
                let width = lit(ty, f64::from(ty.elem.bits()));
                let inside = icmp(b, "ult", ty, y, &width);
                if op == "shl" {
                    let amount = select(b, ty, &inside, y, &lit(ty, 0.0));
                    let shifted = ins(b, "shl", ty, x, &amount);
                    select(b, ty, &inside, &shifted, &lit(ty, 0.0))
                } else {
                    let last = lit(ty, f64::from(ty.elem.bits() - 1));
                    let amount = select(b, ty, &inside, y, &last);
                    ins(b, "ashr", ty, x, &amount)
                }
            }
            "max" => intr(b, "smax", ty, &[x, y]),
            "min" => intr(b, "smin", ty, &[x, y]),
            "div" | "floordiv" | "rem" => {
                let (d, minus) = safe_divisor(b, ty, y, sink);
                match op {
                    "div" => {
                        // x / -1 is -x (wrapping).
                        let q = ins(b, "sdiv", ty, x, &d);
                        let neg = ins(b, "sub", ty, &lit(ty, 0.0), x);
                        select(b, ty, &minus, &neg, &q)
                    }
                    "floordiv" => {
                        let q = ins(b, "sdiv", ty, x, &d);
                        let r = ins(b, "srem", ty, x, &d);
                        let nz = icmp(b, "ne", ty, &r, &lit(ty, 0.0));
                        let sx = ins(b, "xor", ty, &r, &d);
                        let differ = icmp(b, "slt", ty, &sx, &lit(ty, 0.0));
                        let adj = ins(b, "and", ty.with(Elem::I1), &nz, &differ);
                        let adj = conv(b, "zext", ty.with(Elem::I1), &adj, ty);
                        let q = ins(b, "sub", ty, &q, &adj);
                        let neg = ins(b, "sub", ty, &lit(ty, 0.0), x);
                        select(b, ty, &minus, &neg, &q)
                    }
                    _ => {
                        // Python's: moved by the divisor when its sign differs.
                        let r = ins(b, "srem", ty, x, &d);
                        let shifted = ins(b, "add", ty, &r, &d);
                        let nz = icmp(b, "ne", ty, &r, &lit(ty, 0.0));
                        let sx = ins(b, "xor", ty, &r, &d);
                        let differ = icmp(b, "slt", ty, &sx, &lit(ty, 0.0));
                        let adjust = ins(b, "and", ty.with(Elem::I1), &nz, &differ);
                        let r = select(b, ty, &adjust, &shifted, &r);
                        // x rem -1 is 0.
                        select(b, ty, &minus, &lit(ty, 0.0), &r)
                    }
                }
            }
            "pow" => int_pow(b, ty, x, y, sink),
            _ => return Err(format!("`arith.{op}` is not defined on {}", describe(dtype))),
        },
    };
    Ok(finish(b, dtype, ty, &r))
}

fn intr_abs(b: &mut FnBuilder, ty: VTy, v: &str) -> String {
    let name = format!("llvm.abs.{}", ty.mangle());
    b.call("abs", &name, &ty.ir(), &[(ty.ir(), v.to_string()), ("i1".into(), "false".into())])
}

/// Integer power by squaring over the exponent's bits (a negative exponent is an error).
fn int_pow(b: &mut FnBuilder, ty: VTy, x: &str, y: &str, sink: &ErrSink<'_>) -> String {
    let neg = icmp(b, "slt", ty, y, &lit(ty, 0.0));
    record_error(b, ty, &neg, sink);
    let bits = ty.elem.bits().min(64);
    let mut result = lit(ty, 1.0);
    let mut base = x.to_string();
    for i in 0..bits - 1 {
        let bit = ins(b, "lshr", ty, y, &lit(ty, f64::from(i)));
        let bit = ins(b, "and", ty, &bit, &lit(ty, 1.0));
        let on = icmp(b, "ne", ty, &bit, &lit(ty, 0.0));
        let prod = ins(b, "mul", ty, &result, &base);
        result = select(b, ty, &on, &prod, &result);
        base = ins(b, "mul", ty, &base, &base);
    }
    result
}

fn describe(dtype: Option<DType>) -> String {
    dtype.map_or("index".to_string(), |d| d.to_string())
}

/// `arith.cmp`: IEEE comparisons (false with a NaN but for `ne`), signed integers.
pub(super) fn compare(
    b: &mut FnBuilder,
    pred: &str,
    dtype: Option<DType>,
    w: u32,
    x: &str,
    y: &str,
) -> Result<String, NumError> {
    let e = reg_of(dtype);
    let ty = VTy::new(e, w);
    let p = match (e.is_float(), e == Elem::I1, pred) {
        (true, _, "lt") => "olt",
        (true, _, "le") => "ole",
        (true, _, "gt") => "ogt",
        (true, _, "ge") => "oge",
        (true, _, "eq") => "oeq",
        (true, _, "ne") => "une",
        (false, true, "lt") => "ult",
        (false, true, "le") => "ule",
        (false, true, "gt") => "ugt",
        (false, true, "ge") => "uge",
        (false, false, "lt") => "slt",
        (false, false, "le") => "sle",
        (false, false, "gt") => "sgt",
        (false, false, "ge") => "sge",
        (false, _, "eq") => "eq",
        (false, _, "ne") => "ne",
        _ => return Err(format!("`arith.cmp` has an unknown predicate `{pred}`")),
    };
    Ok(if e.is_float() { fcmp(b, p, ty, x, y) } else { icmp(b, p, ty, x, y) })
}

pub(super) fn select_vals(b: &mut FnBuilder, ty: VTy, c: &str, x: &str, y: &str) -> String {
    select(b, ty, c, x, y)
}

/// Unary elementwise ops (`math.*`, `arith.neg`, `arith.not`).
pub(super) fn unary(b: &mut FnBuilder, op: &str, dtype: Option<DType>, w: u32, x: &str) -> Result<String, NumError> {
    let e = reg_of(dtype);
    let ty = VTy::new(e, w);
    let bad = || Err(format!("`{op}` is not defined on {}", describe(dtype)));
    let r = match e {
        Elem::F32 | Elem::F64 => match op {
            "neg" => b.val("neg", format!("fneg {} {x}", ty.ir())),
            "abs" => intr(b, "fabs", ty, &[x]),
            "floor" => intr(b, "floor", ty, &[x]),
            "ceil" => intr(b, "ceil", ty, &[x]),
            // `rint` rounds in the default mode, to nearest with halves to even (libm's
            // `rintf` where the target has no rounding instruction; `roundeven` may not
            // be in the C library).
            "round" => intr(b, "rint", ty, &[x]),
            "relu" => intr(b, "maxnum", ty, &[x, &lit(ty, 0.0)]),
            "sqrt" => intr(b, "sqrt", ty, &[x]),
            "rsqrt" => {
                let s = intr(b, "sqrt", ty, &[x]);
                ins(b, "fdiv", ty, &lit(ty, 1.0), &s)
            }
            "exp" => exp(b, ty, x),
            "log" => log(b, ty, x),
            "tanh" => tanh(b, ty, x),
            "sigmoid" => sigmoid(b, ty, x),
            "silu" => {
                let s = sigmoid(b, ty, x);
                ins(b, "fmul", ty, x, &s)
            }
            "gelu" => gelu(b, ty, x),
            _ => return bad(),
        },
        Elem::I1 => match op {
            "not" => ins(b, "xor", ty, x, &lit(ty, 1.0)),
            "abs" | "relu" => x.to_string(),
            _ => return bad(),
        },
        _ => match op {
            "neg" => ins(b, "sub", ty, &lit(ty, 0.0), x),
            "not" => ins(b, "xor", ty, x, &lit(ty, -1.0)),
            "abs" => intr_abs(b, ty, x),
            "relu" => intr(b, "smax", ty, &[x, &lit(ty, 0.0)]),
            _ => return bad(),
        },
    };
    Ok(finish(b, dtype, ty, &r))
}

// ----- transcendental functions ------------------------------------------------------------
//
// f32 versions are branch-free polynomial approximations (Cephes coefficients) accurate to
// about 1–2 ulp; f64 versions call the C library per lane (f64 tiles are rare).

fn fma(b: &mut FnBuilder, ty: VTy, x: &str, y: &str, z: &str) -> String {
    intr(b, "fmuladd", ty, &[x, y, z])
}

/// Calls a C library function of one double per lane.
fn libm(b: &mut FnBuilder, name: &str, ty: VTy, x: &str) -> String {
    let decl = format!("declare double @{name}(double)");
    b.declare(name, decl);
    if ty.w == 0 {
        return b.val(name, format!("call double @{name}(double {x})"));
    }
    let mut acc = "undef".to_string();
    for i in 0..ty.w {
        let lane = b.val("lane", format!("extractelement {} {x}, i32 {i}", ty.ir()));
        let r = b.val(name, format!("call double @{name}(double {lane})"));
        acc = b.val("v", format!("insertelement {} {acc}, double {r}, i32 {i}", ty.ir()));
    }
    acc
}

/// e^x.
pub(super) fn exp(b: &mut FnBuilder, ty: VTy, x: &str) -> String {
    if ty.elem == Elem::F64 {
        return intr(b, "exp", ty, &[x]);
    }
    let i32t = ty.with(Elem::I32);
    // Clamp so that 2^n stays in range; the clamped ends give 0 and +inf exactly (one
    // min/max instruction each).
    let hi = fcmp(b, "olt", ty, &f(ty, 88.8), x);
    let xc = select(b, ty, &hi, &f(ty, 88.8), x);
    let lo = fcmp(b, "ogt", ty, &f(ty, -104.0), &xc);
    let xc = select(b, ty, &lo, &f(ty, -104.0), &xc);
    let t = ins(b, "fmul", ty, &xc, &f(ty, std::f64::consts::LOG2_E));
    let n = intr(b, "rint", ty, &[&t]);
    // r = x - n ln2 in two steps (Cody–Waite).
    let r = fma(b, ty, &n, &f(ty, -0.693_359_375), &xc);
    let r = fma(b, ty, &n, &f(ty, 2.121_944_4e-4), &r);
    let mut p = f(ty, 1.987_569_150_0e-4);
    for c in [1.398_199_950_7e-3, 8.333_451_907_3e-3, 4.166_579_589_4e-2, 1.666_666_545_9e-1, 5.000_000_120_1e-1] {
        p = fma(b, ty, &p, &r, &f(ty, c));
    }
    let r2 = ins(b, "fmul", ty, &r, &r);
    let p = fma(b, ty, &p, &r2, &r);
    let p = ins(b, "fadd", ty, &p, &f(ty, 1.0));
    // A NaN lane converts to poison: freeze it (its result is replaced by NaN below).
    let ni = conv(b, "fptosi", ty, &n, i32t);
    let ni = b.val("n", format!("freeze {} {ni}", i32t.ir()));
    // Scaling by 2^n. Where every lane's result is a normal number (n in [-125, 127]:
    // p is in [0.7, 1.42]) adding n to p's exponent is exact; otherwise 2^n is applied
    // as two factors so that subnormal results round once and large n overflow.
    let biased = ins(b, "add", i32t, &ni, &lit(i32t, 125.0));
    let out = icmp(b, "ugt", i32t, &biased, &lit(i32t, 252.0));
    let any = if ty.w == 0 {
        out
    } else {
        let name = format!("llvm.vector.reduce.or.{}", i32t.with(Elem::I1).mangle());
        b.call("edge", &name, "i1", &[(i32t.with(Elem::I1).ir(), out)])
    };
    let fast = b.label("exp.fast");
    let slow = b.label("exp.edge");
    let join = b.label("exp.done");
    b.cond_br(&any, &slow, &fast);
    b.start(&fast);
    let pb = bitcast(b, ty, &p, i32t);
    let sh = ins(b, "shl", i32t, &ni, &lit(i32t, 23.0));
    let yb = ins(b, "add", i32t, &pb, &sh);
    let y_fast = bitcast(b, i32t, &yb, ty);
    let fast_end = b.cur_label();
    b.br(&join);
    b.start(&slow);
    let n1 = ins(b, "ashr", i32t, &ni, &lit(i32t, 1.0));
    let n2 = ins(b, "sub", i32t, &ni, &n1);
    let e1 = ins(b, "add", i32t, &n1, &lit(i32t, 127.0));
    let e1 = ins(b, "shl", i32t, &e1, &lit(i32t, 23.0));
    let e2 = ins(b, "add", i32t, &n2, &lit(i32t, 127.0));
    let e2 = ins(b, "shl", i32t, &e2, &lit(i32t, 23.0));
    let s1 = bitcast(b, i32t, &e1, ty);
    let s2 = bitcast(b, i32t, &e2, ty);
    let y = ins(b, "fmul", ty, &p, &s1);
    let y_slow = ins(b, "fmul", ty, &y, &s2);
    let slow_end = b.cur_label();
    b.br(&join);
    b.start(&join);
    let y = b.val("exp", format!("phi {} [ {y_fast}, {fast_end} ], [ {y_slow}, {slow_end} ]", ty.ir()));
    let nan = fcmp(b, "uno", ty, x, x);
    select(b, ty, &nan, x, &y)
}

/// Natural logarithm.
pub(super) fn log(b: &mut FnBuilder, ty: VTy, x: &str) -> String {
    if ty.elem == Elem::F64 {
        return intr(b, "log", ty, &[x]);
    }
    let i32t = ty.with(Elem::I32);
    // Subnormals: scale by 2^23 first.
    let tiny = fcmp(b, "olt", ty, x, &f(ty, f64::from(f32::MIN_POSITIVE)));
    let scaled = ins(b, "fmul", ty, x, &f(ty, 8_388_608.0));
    let xs = select(b, ty, &tiny, &scaled, x);
    let adj = select(b, i32t, &tiny, &lit(i32t, 23.0), &lit(i32t, 0.0));
    let bits = bitcast(b, ty, &xs, i32t);
    // x = m 2^e with m in [sqrt(1/2), sqrt(2)).
    let e = ins(b, "lshr", i32t, &bits, &lit(i32t, 23.0));
    let e = ins(b, "and", i32t, &e, &lit(i32t, 255.0));
    let mb = ins(b, "and", i32t, &bits, &lit(i32t, f64::from(0x007f_ffffu32)));
    let mb = ins(b, "or", i32t, &mb, &lit(i32t, f64::from(0x3f00_0000u32)));
    let m = bitcast(b, i32t, &mb, ty); // in [0.5, 1)
    let e = ins(b, "sub", i32t, &e, &lit(i32t, 126.0));
    let e = ins(b, "sub", i32t, &e, &adj);
    let small = fcmp(b, "olt", ty, &m, &f(ty, std::f64::consts::FRAC_1_SQRT_2));
    let m2 = ins(b, "fadd", ty, &m, &m);
    let m = select(b, ty, &small, &m2, &m);
    let dec = select(b, i32t, &small, &lit(i32t, 1.0), &lit(i32t, 0.0));
    let e = ins(b, "sub", i32t, &e, &dec);
    let ef = conv(b, "sitofp", i32t, &e, ty);
    let z = ins(b, "fsub", ty, &m, &f(ty, 1.0));
    let z2 = ins(b, "fmul", ty, &z, &z);
    let mut p = f(ty, 7.037_683_629_2e-2);
    for c in [
        -1.151_461_031_0e-1,
        1.167_699_874_0e-1,
        -1.242_014_084_6e-1,
        1.424_932_278_7e-1,
        -1.666_805_766_5e-1,
        2.000_071_476_5e-1,
        -2.499_999_399_3e-1,
        3.333_333_117_4e-1,
    ] {
        p = fma(b, ty, &p, &z, &f(ty, c));
    }
    let y = ins(b, "fmul", ty, &p, &z);
    let y = ins(b, "fmul", ty, &y, &z2);
    let y = fma(b, ty, &ef, &f(ty, -2.121_944_4e-4), &y);
    let y = fma(b, ty, &z2, &f(ty, -0.5), &y);
    let y = ins(b, "fadd", ty, &z, &y);
    let y = fma(b, ty, &ef, &f(ty, 0.693_359_375), &y);
    // log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN.
    let zero = fcmp(b, "oeq", ty, x, &f(ty, 0.0));
    let y = select(b, ty, &zero, &f(ty, f64::NEG_INFINITY), &y);
    let neg = fcmp(b, "ult", ty, x, &f(ty, 0.0));
    let y = select(b, ty, &neg, &f(ty, f64::NAN), &y);
    let inf = fcmp(b, "oeq", ty, x, &f(ty, f64::INFINITY));
    select(b, ty, &inf, x, &y)
}

/// tanh: an odd polynomial near 0, `1 - 2 / (e^{2|x|} + 1)` beyond.
pub(super) fn tanh(b: &mut FnBuilder, ty: VTy, x: &str) -> String {
    if ty.elem == Elem::F64 {
        return libm(b, "tanh", ty, x);
    }
    let ax = intr(b, "fabs", ty, &[x]);
    let z = ins(b, "fmul", ty, x, x);
    let mut p = f(ty, -5.704_988_727_45e-3);
    for c in [2.063_908_879_54e-2, -5.373_971_555_31e-2, 1.333_144_220_36e-1, -3.333_328_194_22e-1] {
        p = fma(b, ty, &p, &z, &f(ty, c));
    }
    let xz = ins(b, "fmul", ty, x, &z);
    let small = fma(b, ty, &xz, &p, x);
    // `x + x^3 p` is +0.0 at x = -0.0 (the product is +0.0); tanh is odd.
    let small = intr(b, "copysign", ty, &[&small, x]);
    let two = ins(b, "fadd", ty, &ax, &ax);
    let e = exp(b, ty, &two);
    let d = ins(b, "fadd", ty, &e, &f(ty, 1.0));
    let q = ins(b, "fdiv", ty, &f(ty, 2.0), &d);
    let big = ins(b, "fsub", ty, &f(ty, 1.0), &q);
    let big = intr(b, "copysign", ty, &[&big, x]);
    let is_small = fcmp(b, "olt", ty, &ax, &f(ty, 0.625));
    let y = select(b, ty, &is_small, &small, &big);
    let nan = fcmp(b, "uno", ty, x, x);
    select(b, ty, &nan, x, &y)
}

/// 1 / (1 + e^-x), as `e^x / (1 + e^x)` for negative x so that e^-x cannot overflow
/// where the result is still representable.
pub(super) fn sigmoid(b: &mut FnBuilder, ty: VTy, x: &str) -> String {
    let ax = intr(b, "fabs", ty, &[x]);
    let nax = b.val("neg", format!("fneg {} {ax}", ty.ir()));
    let e = exp(b, ty, &nax);
    let d = ins(b, "fadd", ty, &e, &f(ty, 1.0));
    let pos = ins(b, "fdiv", ty, &f(ty, 1.0), &d);
    let neg = ins(b, "fmul", ty, &e, &pos);
    let ge = fcmp(b, "oge", ty, x, &f(ty, 0.0));
    let r = select(b, ty, &ge, &pos, &neg);
    // NaN in, NaN out.
    let nan = fcmp(b, "uno", ty, x, x);
    select(b, ty, &nan, x, &r)
}

/// `0.5 x (1 + tanh(u))` computed as `x * sigmoid(2u)` (the same function, without the
/// cancellation of `1 + tanh(u)` for negative `u`), `u = 0.7978845608 (x + 0.044715 x^3)`.
pub(super) fn gelu(b: &mut FnBuilder, ty: VTy, x: &str) -> String {
    if ty.elem == Elem::F64 {
        let x3 = ins(b, "fmul", ty, x, x);
        let x3 = ins(b, "fmul", ty, &x3, x);
        let inner = fma(b, ty, &x3, &f(ty, 0.044715), x);
        let u = ins(b, "fmul", ty, &inner, &f(ty, 0.7978845608));
        let t = libm(b, "tanh", ty, &u);
        let t1 = ins(b, "fadd", ty, &t, &f(ty, 1.0));
        let hx = ins(b, "fmul", ty, x, &f(ty, 0.5));
        return ins(b, "fmul", ty, &hx, &t1);
    }
    let x2 = ins(b, "fmul", ty, x, x);
    let c = fma(b, ty, &x2, &f(ty, 0.044715 * 0.7978845608 * 2.0), &f(ty, 0.7978845608 * 2.0));
    let two_u = ins(b, "fmul", ty, &c, x);
    let s = sigmoid(b, ty, &two_u);
    ins(b, "fmul", ty, x, &s)
}
