//! Conversions under the numerics policies (docs/ir.md, "Numerics policies"): `arith.cast`
//! with its wrapping, NaN/Inf and `@saturate` rules, and `@stochastic_round` — exactly
//! the interpreter's `round_stochastic`, computed in f64 where every step is exact.

use tessera_frontend::check::DType;

use super::builder::{Builder, Class, Operand, Reg};
use super::emit::{const_operand, cvt_type, mov, Emitter, R};
use super::numerics::{self, arith_type, materialize, round_wide_with, wide_class};

impl Emitter<'_> {
    /// A conversion (docs/ir.md, "Numerics policies"): float → int truncates toward zero
    /// to an i64 (saturating, NaN → 0) and wraps to the width, int → int wraps, fp8
    /// overflow is NaN (e4m3) / Inf (e5m2); `saturate` (`@saturate`) clamps instead.
    pub(super) fn cast(&mut self, from: DType, to: DType, x: Operand, saturate: bool) -> R<Operand> {
        let target = self.target;
        let (fc, tc) = (wide_class(from), wide_class(to));
        if from == to {
            return Ok(x);
        }
        // Constants fold.
        match x {
            Operand::Int(v) if !from.is_float() && fc != Class::Pred => {
                return Ok(if to.is_float() {
                    const_operand(to, v as f64)
                } else if tc == Class::Pred {
                    Operand::Int((v != 0) as i64)
                } else if saturate {
                    Operand::Int(clamp_int(to, v))
                } else {
                    Operand::Int(to.wrap_int(v))
                });
            }
            Operand::F32(bits) if to.is_float() && to != DType::F64 => {
                let v = f32::from_bits(bits) as f64;
                return Ok(if saturate && to.is_fp8() {
                    Operand::f32(numerics::round_host_saturating(to, v) as f32)
                } else {
                    const_operand(to, v)
                });
            }
            _ => {}
        }
        let b = &mut self.b;
        if tc == Class::Pred {
            let r = b.reg(Class::Pred);
            let x = materialize(b, fc, x);
            match fc {
                Class::F32 => b.ins(format!("setp.neu.f32 {r}, {x}, 0f00000000")),
                Class::F64 => b.ins(format!("setp.neu.f64 {r}, {x}, 0d0000000000000000")),
                Class::Pred => return Ok(Operand::Reg(x)),
                _ => b.ins(format!("setp.ne.{} {r}, {x}, 0", arith_type(from))),
            }
            return Ok(Operand::Reg(r));
        }
        if fc == Class::Pred {
            let p = materialize(b, Class::Pred, x);
            let r = b.reg(tc);
            match tc {
                Class::F32 => b.ins(format!("selp.f32 {r}, 0f3F800000, 0f00000000, {p}")),
                Class::F64 => b.ins(format!("selp.f64 {r}, 0d3FF0000000000000, 0d0000000000000000, {p}")),
                Class::B64 => b.ins(format!("selp.b64 {r}, 1, 0, {p}")),
                _ => b.ins(format!("selp.b32 {r}, 1, 0, {p}")),
            }
            return Ok(Operand::Reg(r));
        }
        let x = materialize(b, fc, x);
        let r = b.reg(tc);
        let (fs, ts) = (cvt_type(from), cvt_type(to));
        match (from.is_float(), to.is_float()) {
            (true, true) => {
                if fc == tc {
                    // Both wide f32: round the value to the narrower type.
                    return Ok(round_wide_with(b, target, to, Operand::Reg(x), saturate));
                }
                if tc == Class::F64 {
                    // Widening is exact: ptxas refuses a rounding modifier on it.
                    b.ins(format!("cvt.{ts}.{fs} {r}, {x}"));
                    return Ok(Operand::Reg(r));
                }
                b.ins(format!("cvt.rn.{ts}.{fs} {r}, {x}"));
                Ok(round_wide_with(b, target, to, Operand::Reg(r), saturate))
            }
            (false, true) => {
                b.ins(format!("cvt.rn.{ts}.{fs} {r}, {x}"));
                Ok(round_wide_with(b, target, to, Operand::Reg(r), saturate))
            }
            (true, false) if saturate || tc == Class::B64 => {
                // Truncates toward zero, saturates, NaN → 0.
                b.ins(format!("cvt.rzi.{ts}.{fs} {r}, {x}"));
                if to == DType::Int8 || to == DType::Int4 {
                    let (lo, hi) = if to == DType::Int8 { (-128, 127) } else { (-8, 7) };
                    b.ins(format!("max.s32 {r}, {r}, {lo}"));
                    b.ins(format!("min.s32 {r}, {r}, {hi}"));
                }
                Ok(Operand::Reg(r))
            }
            (true, false) => {
                // Truncates toward zero to an i64 (saturating, NaN → 0), then wraps.
                let wide = b.reg(Class::B64);
                b.ins(format!("cvt.rzi.s64.{fs} {wide}, {x}"));
                b.ins(format!("cvt.u32.u64 {r}, {wide}"));
                match to {
                    DType::Int8 => b.ins(format!("cvt.s32.s8 {r}, {r}")),
                    DType::Int4 => b.ins(format!("bfe.s32 {r}, {r}, 0, 4")),
                    _ => {}
                }
                Ok(Operand::Reg(r))
            }
            (false, false) => {
                match (fc, tc) {
                    (Class::B64, Class::B32) => b.ins(format!("cvt.u32.u64 {r}, {x}")),
                    (Class::B32, Class::B64) => b.ins(format!("cvt.s64.s32 {r}, {x}")),
                    _ => mov(b, r, Operand::Reg(x)),
                }
                match (to, saturate) {
                    (DType::Int8, false) => b.ins(format!("cvt.s32.s8 {r}, {r}")),
                    (DType::Int4, false) => b.ins(format!("bfe.s32 {r}, {r}, 0, 4")),
                    (DType::Int8 | DType::Int4, true) => {
                        let (lo, hi) = if to == DType::Int8 { (-128, 127) } else { (-8, 7) };
                        let wide = if fc == Class::B64 { x } else { r };
                        if fc == Class::B64 {
                            // Clamp in 64 bits before keeping the low word.
                            let c = b.reg(Class::B64);
                            b.ins(format!("max.s64 {c}, {wide}, {lo}"));
                            b.ins(format!("min.s64 {c}, {c}, {hi}"));
                            b.ins(format!("cvt.u32.u64 {r}, {c}"));
                        } else {
                            b.ins(format!("max.s32 {r}, {r}, {lo}"));
                            b.ins(format!("min.s32 {r}, {r}, {hi}"));
                        }
                    }
                    (DType::I32, true) if fc == Class::B64 => {
                        let c = b.reg(Class::B64);
                        b.ins(format!("max.s64 {c}, {x}, {}", i32::MIN));
                        b.ins(format!("min.s64 {c}, {c}, {}", i32::MAX));
                        b.ins(format!("cvt.u32.u64 {r}, {c}"));
                    }
                    _ => {}
                }
                Ok(Operand::Reg(r))
            }
        }
    }
}

/// An integer constant clamped to a dtype's range (`@saturate`).
fn clamp_int(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::I32 => v.clamp(i32::MIN as i64, i32::MAX as i64),
        DType::Int8 => v.clamp(-128, 127),
        DType::Int4 => v.clamp(-8, 7),
        _ => v,
    }
}

/// The wide `f32` (or `f64`) `x` rounded stochastically to `to` with the uniform `u` in
/// [0, 1): with `a = |x|`, `e = max(exponent(a), emin)`, `t = a · 2^(m - e)`, the result is
/// `sign(x) · (floor(t) + (u < t - floor(t))) · 2^(e - m)`; past the largest finite value
/// it is Inf (bf16, f16, e5m2), NaN (e4m3), or the largest finite when `saturate`. The
/// result is a wide `f32` holding a value of `to`; `None` when `to` does not round
/// stochastically.
pub(super) fn stochastic(b: &mut Builder, x: Operand, u: Operand, to: DType, saturate: bool) -> Option<Operand> {
    let (m, emin, max, has_inf) = crate::ir::policy::float_format(to)?;
    let x64 = match x {
        Operand::Reg(r) if r.class == Class::F64 => r,
        x => {
            let x = materialize(b, Class::F32, x);
            let r = b.reg(Class::F64);
            b.ins(format!("cvt.f64.f32 {r}, {x}"));
            r
        }
    };
    let u = materialize(b, Class::F32, u);
    let u64 = b.reg(Class::F64);
    b.ins(format!("cvt.f64.f32 {u64}, {u}"));
    let a = b.reg(Class::F64);
    b.ins(format!("abs.f64 {a}, {x64}"));
    // max(exponent, emin) as a biased exponent; the quantum 2^(e - m) and its inverse.
    let e = b.reg(Class::B64);
    b.ins(format!("mov.b64 {e}, {a}"));
    b.ins(format!("shr.u64 {e}, {e}, 52"));
    b.ins(format!("max.s64 {e}, {e}, {}", emin + 1023));
    let q = pow2_reg(b, e, -m);
    let neg = b.reg(Class::B64);
    b.ins(format!("sub.s64 {neg}, {}, {e}", 2046 + m));
    let inv = b.reg(Class::F64);
    b.ins(format!("shl.b64 {neg}, {neg}, 52"));
    b.ins(format!("mov.b64 {inv}, {neg}"));
    let t = b.reg(Class::F64);
    b.ins(format!("mul.rn.f64 {t}, {a}, {inv}"));
    let n = b.reg(Class::F64);
    b.ins(format!("cvt.rmi.f64.f64 {n}, {t}"));
    let frac = b.reg(Class::F64);
    b.ins(format!("sub.rn.f64 {frac}, {t}, {n}"));
    let up = b.reg(Class::Pred);
    b.ins(format!("setp.lt.f64 {up}, {u64}, {frac}"));
    let one = b.reg(Class::F64);
    b.ins(format!("selp.f64 {one}, {}, {}, {up}", Operand::F64(1f64.to_bits()), Operand::F64(0f64.to_bits())));
    b.ins(format!("add.rn.f64 {n}, {n}, {one}"));
    let r = b.reg(Class::F64);
    b.ins(format!("mul.rn.f64 {r}, {n}, {q}"));
    let over = crate::ir::policy::overflow_value(max, has_inf, saturate);
    let big = b.reg(Class::Pred);
    b.ins(format!("setp.gt.f64 {big}, {r}, {}", Operand::F64(max.to_bits())));
    b.ins(format!("selp.f64 {r}, {}, {r}, {big}", Operand::F64(over.to_bits())));
    // PTX `copysign.f64 d, a, b`: b with the sign of a.
    b.ins(format!("copysign.f64 {r}, {x64}, {r}"));
    let out = b.reg(Class::F32);
    b.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    Some(Operand::Reg(out))
}

/// `2^(e - 1023 + delta)` for a biased exponent register `e` (a normal f64).
fn pow2_reg(b: &mut Builder, e: Reg, delta: i64) -> Reg {
    let bits = b.reg(Class::B64);
    b.ins(format!("add.s64 {bits}, {e}, {delta}"));
    b.ins(format!("shl.b64 {bits}, {bits}, 52"));
    let r = b.reg(Class::F64);
    b.ins(format!("mov.b64 {r}, {bits}"));
    r
}
