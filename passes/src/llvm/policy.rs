//! `@stochastic_round` as LLVM IR (docs/ir.md, "Numerics policies"): exactly the
//! interpreter's `round_stochastic`, computed in f64 where every step is exact.

use tessera_frontend::check::DType;

use super::builder::{lit, Elem, FnBuilder, VTy};
use super::numerics::{bitcast, conv, fcmp, ins, intr, reg, select};

/// Registers `x` (of `from`) rounded stochastically to `to` with the uniform numbers
/// `u` (f32 registers in [0, 1)): with `a = |x|`, `e = max(exponent(a), emin)`,
/// `t = a · 2^(m - e)`, the result is `sign(x) · (floor(t) + (u < t - floor(t))) · 2^(e - m)`,
/// then overflow past the largest finite value gives Inf (bf16, f16, e5m2), NaN (e4m3)
/// or, when `saturate`, the largest finite value. Returns registers of `to`, or `None`
/// when `to` is not a stochastic-rounding type.
pub(super) fn stochastic(
    b: &mut FnBuilder,
    from: DType,
    to: DType,
    w: u32,
    x: &str,
    u: &str,
    saturate: bool,
) -> Option<String> {
    let (m, emin, max, has_inf) = crate::ir::policy::float_format(to)?;
    let f64t = VTy::new(Elem::F64, w);
    let i64t = VTy::new(Elem::I64, w);
    let rt = VTy::new(reg(from), w);
    let x64 = if rt.elem == Elem::F64 { x.to_string() } else { conv(b, "fpext", rt, x, f64t) };
    let u64 = conv(b, "fpext", VTy::new(Elem::F32, w), u, f64t);
    let a = intr(b, "fabs", f64t, &[&x64]);
    let bits = bitcast(b, f64t, &a, i64t);
    let biased = ins(b, "lshr", i64t, &bits, &lit(i64t, 52.0));
    // max(exponent, emin) as a biased exponent, then the quantum 2^(e - m) and its inverse.
    let e = intr(b, "smax", i64t, &[&biased, &lit(i64t, (emin + 1023) as f64)]);
    let qe = ins(b, "sub", i64t, &e, &lit(i64t, m as f64));
    let qbits = ins(b, "shl", i64t, &qe, &lit(i64t, 52.0));
    let q = bitcast(b, i64t, &qbits, f64t);
    let ie = ins(b, "sub", i64t, &lit(i64t, (2046 + m) as f64), &e);
    let ibits = ins(b, "shl", i64t, &ie, &lit(i64t, 52.0));
    let inv = bitcast(b, i64t, &ibits, f64t);
    let t = ins(b, "fmul", f64t, &a, &inv);
    let n = intr(b, "floor", f64t, &[&t]);
    let frac = ins(b, "fsub", f64t, &t, &n);
    let up = fcmp(b, "olt", f64t, &u64, &frac);
    let one = conv(b, "uitofp", VTy::new(Elem::I1, w), &up, f64t);
    let n = ins(b, "fadd", f64t, &n, &one);
    let r = ins(b, "fmul", f64t, &n, &q);
    let over = crate::ir::policy::overflow_value(max, has_inf, saturate);
    let big = fcmp(b, "ogt", f64t, &r, &lit(f64t, max));
    let r = select(b, f64t, &big, &lit(f64t, over), &r);
    let r = intr(b, "copysign", f64t, &[&r, &x64]);
    Some(conv(b, "fptrunc", f64t, &r, VTy::new(Elem::F32, w)))
}
