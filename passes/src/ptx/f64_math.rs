//! f64 transcendental functions. PTX has `ex2`, `lg2` and `tanh` only as f32
//! approximations, so an f64 kernel's `exp`, `log`, `tanh`, `pow` and the activations
//! built on them are computed here from f64 arithmetic (`fma.rn.f64` Horner
//! polynomials), branch-free, as libm does on a CPU:
//! - `exp`: `x = k ln2 + r` with `|r| <= ln2 / 2` (Cody and Waite: `ln2` in two parts,
//!   so that `k ln2_hi` is exact), `e^r - 1` by its Taylor series to `r^13`, and the
//!   scale `2^k` as two exact powers of two, so that a result in the subnormal range is
//!   rounded once;
//! - `log`: `x = 2^e m` with `sqrt(1/2) <= m < sqrt(2)`, `f = m - 1`, `s = f / (2 + f)`,
//!   `log m = f - f^2/2 + s (f^2/2 + R(s^2))` with `R` the atanh series;
//! - `tanh`: `t / (t + 2)` with `t = expm1(2|x|)`, from the same reduction, so that small
//!   arguments keep their relative accuracy.
//!
//! Each is within a few ulp of the correctly rounded result over the whole range,
//! subnormals, infinities and NaN included (the PTX emulator test checks them against
//! Rust's libm: `backends/tests/cuda_emulator.rs`, `f64_transcendentals`).

use tessera_frontend::check::DType;

use super::builder::{Builder, Class, Operand, Reg};
use super::numerics::float_imm;

/// `ln 2` in two parts: `LN2_HI` has 32 significant bits, so `k LN2_HI` is exact for
/// every `|k| < 2^21`; `LN2_LO` is `ln 2 - LN2_HI` rounded.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

fn imm(v: f64) -> Operand {
    float_imm(DType::F64, v)
}

/// `2^k` for `-1022 <= k <= 1023` in a 32-bit register: the exponent field alone.
fn power_of_two(b: &mut Builder, k: Reg) -> Reg {
    let (wide, out) = (b.reg(Class::B64), b.reg(Class::F64));
    b.ins(format!("cvt.s64.s32 {wide}, {k}"));
    b.ins(format!("add.s64 {wide}, {wide}, 1023"));
    b.ins(format!("shl.b64 {wide}, {wide}, 52"));
    b.ins(format!("mov.b64 {out}, {wide}"));
    out
}

/// For `|x| <= 746`: `k` (32-bit) and `p = e^r - 1` with `x = k ln2 + r`.
fn reduce(b: &mut Builder, x: Reg) -> (Reg, Reg) {
    let (kf, r, q, r2, p) =
        (b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64));
    let k = b.reg(Class::B32);
    b.ins(format!("mul.f64 {kf}, {x}, {}", imm(std::f64::consts::LOG2_E)));
    b.ins(format!("cvt.rni.f64.f64 {kf}, {kf}"));
    b.ins(format!("cvt.rni.s32.f64 {k}, {kf}"));
    b.ins(format!("fma.rn.f64 {r}, {kf}, {}, {x}", imm(-LN2_HI)));
    b.ins(format!("fma.rn.f64 {r}, {kf}, {}, {r}", imm(-LN2_LO)));
    // q = sum over i >= 2 of r^(i-2) / i!, to i = 13: the next term, r^14 / 14!, is
    // below 2^-57 for |r| <= ln2 / 2.
    let inverse_factorial = |i: u32| 1.0 / (1..=i).map(f64::from).product::<f64>();
    b.ins(format!("mov.f64 {q}, {}", imm(inverse_factorial(13))));
    for i in (2..13).rev() {
        b.ins(format!("fma.rn.f64 {q}, {q}, {r}, {}", imm(inverse_factorial(i))));
    }
    b.ins(format!("mul.f64 {r2}, {r}, {r}"));
    b.ins(format!("fma.rn.f64 {p}, {q}, {r2}, {r}"));
    (k, p)
}

/// `r = x` where `x` is NaN (the clamps before a reduction drop NaN: `min`/`max` return
/// the other operand).
fn keep_nan(b: &mut Builder, r: Reg, x: Reg) {
    let nan = b.reg(Class::Pred);
    b.ins(format!("setp.neu.f64 {nan}, {x}, {x}"));
    b.ins(format!("selp.f64 {r}, {x}, {r}, {nan}"));
}

/// `r = e^x`.
pub(super) fn exp(b: &mut Builder, r: Reg, x: Reg) {
    debug_assert_ne!(r, x, "x is read after r is written");
    // e^710 overflows and e^-746 is below half the smallest subnormal: clamped there,
    // |k| <= 1077 and 2^k is two normal powers of two.
    let clamped = b.reg(Class::F64);
    b.ins(format!("max.f64 {clamped}, {x}, {}", imm(-746.0)));
    b.ins(format!("min.f64 {clamped}, {clamped}, {}", imm(710.0)));
    let (k, p) = reduce(b, clamped);
    let (k1, k2) = (b.reg(Class::B32), b.reg(Class::B32));
    b.ins(format!("shr.s32 {k1}, {k}, 1"));
    b.ins(format!("sub.s32 {k2}, {k}, {k1}"));
    let (s1, s2) = (power_of_two(b, k1), power_of_two(b, k2));
    b.ins(format!("add.f64 {r}, {p}, {}", imm(1.0)));
    // Exact (a normal result), then the one rounding, to a subnormal or infinity too.
    b.ins(format!("mul.f64 {r}, {r}, {s1}"));
    b.ins(format!("mul.f64 {r}, {r}, {s2}"));
    keep_nan(b, r, x);
}

/// `r = ln x` (NaN below 0, -inf at ±0, inf at inf).
pub(super) fn log(b: &mut Builder, r: Reg, x: Reg) {
    debug_assert_ne!(r, x, "x is read after r is written");
    // A subnormal is scaled into the normal range first.
    let (tiny, scaled) = (b.reg(Class::Pred), b.reg(Class::F64));
    b.ins(format!("setp.lt.f64 {tiny}, {x}, {}", imm(f64::MIN_POSITIVE)));
    b.ins(format!("mul.f64 {scaled}, {x}, {}", imm(2f64.powi(54))));
    b.ins(format!("selp.f64 {scaled}, {scaled}, {x}, {tiny}"));
    let (bits, e) = (b.reg(Class::B64), b.reg(Class::B64));
    b.ins(format!("mov.b64 {bits}, {scaled}"));
    b.ins(format!("shr.u64 {e}, {bits}, 52"));
    b.ins(format!("and.b64 {bits}, {bits}, {:#x}", (1u64 << 52) - 1));
    b.ins(format!("or.b64 {bits}, {bits}, {:#x}", 1023u64 << 52));
    // m in [1, 2), then in [sqrt(1/2), sqrt(2)): f = m - 1 is exact (Sterbenz).
    let (m, high) = (b.reg(Class::F64), b.reg(Class::Pred));
    b.ins(format!("mov.b64 {m}, {bits}"));
    b.ins(format!("setp.gt.f64 {high}, {m}, {}", imm(std::f64::consts::SQRT_2)));
    b.ins_if(high, false, format!("mul.f64 {m}, {m}, {}", imm(0.5)));
    b.ins_if(high, false, format!("add.s64 {e}, {e}, 1"));
    b.ins(format!("sub.s64 {e}, {e}, 1023"));
    b.ins_if(tiny, false, format!("sub.s64 {e}, {e}, 54"));
    let ef = b.reg(Class::F64);
    b.ins(format!("cvt.rn.f64.s64 {ef}, {e}"));
    let (f, s, z, q, hfsq) =
        (b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64), b.reg(Class::F64));
    b.ins(format!("sub.f64 {f}, {m}, {}", imm(1.0)));
    b.ins(format!("add.f64 {s}, {f}, {}", imm(2.0)));
    b.ins(format!("div.rn.f64 {s}, {f}, {s}"));
    b.ins(format!("mul.f64 {z}, {s}, {s}"));
    // R(z) = sum over i >= 1 of 2 z^i / (2i + 1), to i = 11: |s| <= 0.1716, so the next
    // term is below 2^-60 of log m.
    let coefficient = |i: u32| 2.0 / f64::from(2 * i + 1);
    b.ins(format!("mov.f64 {q}, {}", imm(coefficient(11))));
    for i in (1..11).rev() {
        b.ins(format!("fma.rn.f64 {q}, {q}, {z}, {}", imm(coefficient(i))));
    }
    b.ins(format!("mul.f64 {q}, {q}, {z}"));
    b.ins(format!("mul.f64 {hfsq}, {f}, {f}"));
    b.ins(format!("mul.f64 {hfsq}, {hfsq}, {}", imm(0.5)));
    // ln x = e ln2_hi - ((hfsq - (s (hfsq + R) + e ln2_lo)) - f)
    b.ins(format!("add.f64 {q}, {hfsq}, {q}"));
    b.ins(format!("mul.f64 {q}, {s}, {q}"));
    b.ins(format!("fma.rn.f64 {q}, {ef}, {}, {q}", imm(LN2_LO)));
    b.ins(format!("sub.f64 {q}, {hfsq}, {q}"));
    b.ins(format!("sub.f64 {q}, {q}, {f}"));
    b.ins(format!("mul.f64 {r}, {ef}, {}", imm(LN2_HI)));
    b.ins(format!("sub.f64 {r}, {r}, {q}"));
    let special = b.reg(Class::Pred);
    b.ins(format!("setp.lt.f64 {special}, {x}, {}", imm(0.0)));
    b.ins(format!("selp.f64 {r}, {}, {r}, {special}", imm(f64::NAN)));
    b.ins(format!("setp.eq.f64 {special}, {x}, {}", imm(0.0)));
    b.ins(format!("selp.f64 {r}, {}, {r}, {special}", imm(f64::NEG_INFINITY)));
    b.ins(format!("setp.eq.f64 {special}, {x}, {}", imm(f64::INFINITY)));
    b.ins(format!("selp.f64 {r}, {x}, {r}, {special}"));
    keep_nan(b, r, x);
}

/// `r = tanh x`.
pub(super) fn tanh(b: &mut Builder, r: Reg, x: Reg) {
    debug_assert_ne!(r, x, "x is read after r is written");
    // tanh 20 is 1 in f64; clamped there, 2^k of expm1(2|x|) stays below 2^58.
    let u = b.reg(Class::F64);
    b.ins(format!("abs.f64 {u}, {x}"));
    b.ins(format!("min.f64 {u}, {u}, {}", imm(20.0)));
    b.ins(format!("add.f64 {u}, {u}, {u}"));
    let (k, p) = reduce(b, u);
    let s = power_of_two(b, k);
    // t = expm1(2|x|) = 2^k p + (2^k - 1), one rounding: 2^k - 1 is exact to k = 53
    // and rounds to 2^k beyond, where t is that large anyway.
    let (t, d) = (b.reg(Class::F64), b.reg(Class::F64));
    b.ins(format!("sub.f64 {t}, {s}, {}", imm(1.0)));
    b.ins(format!("fma.rn.f64 {t}, {s}, {p}, {t}"));
    b.ins(format!("add.f64 {d}, {t}, {}", imm(2.0)));
    b.ins(format!("div.rn.f64 {r}, {t}, {d}"));
    b.ins(format!("copysign.f64 {r}, {x}, {r}"));
    keep_nan(b, r, x);
}

/// `r = 1 / (1 + e^-x)`, the interpreter's formula.
pub(super) fn sigmoid(b: &mut Builder, r: Reg, x: Reg) {
    let negated = b.reg(Class::F64);
    b.ins(format!("neg.f64 {negated}, {x}"));
    exp(b, r, negated);
    b.ins(format!("add.f64 {r}, {r}, {}", imm(1.0)));
    b.ins(format!("div.rn.f64 {r}, {}, {r}", imm(1.0)));
}

/// `r = x sigmoid(x)`.
pub(super) fn silu(b: &mut Builder, r: Reg, x: Reg) {
    let s = b.reg(Class::F64);
    sigmoid(b, s, x);
    b.ins(format!("mul.f64 {r}, {x}, {s}"));
}

/// `r = x/2 (1 + tanh(0.7978845608 (x + 0.044715 x^3)))`, the interpreter's tanh form.
pub(super) fn gelu(b: &mut Builder, r: Reg, x: Reg) {
    let t = b.reg(Class::F64);
    b.ins(format!("mul.f64 {t}, {x}, {}", imm(0.044715)));
    b.ins(format!("mul.f64 {t}, {t}, {x}"));
    b.ins(format!("fma.rn.f64 {t}, {t}, {x}, {x}"));
    b.ins(format!("mul.f64 {t}, {t}, {}", imm(0.7978845608)));
    let th = b.reg(Class::F64);
    tanh(b, th, t);
    b.ins(format!("add.f64 {t}, {th}, {}", imm(1.0)));
    b.ins(format!("mul.f64 {r}, {x}, {}", imm(0.5)));
    b.ins(format!("mul.f64 {r}, {r}, {t}"));
}

/// `r = 1 / sqrt(x)`: `rsqrt.approx.f64` has about 2^-40 relative error, so two
/// correctly rounded operations instead.
pub(super) fn rsqrt(b: &mut Builder, r: Reg, x: Reg) {
    b.ins(format!("sqrt.rn.f64 {r}, {x}"));
    b.ins(format!("div.rn.f64 {r}, {}, {r}", imm(1.0)));
}

/// `r = x^y` as `e^(y ln|x|)` with the sign rules of [`super::emit::pow_signs`]. The
/// relative error grows with `|y ln x|` (about `|y ln x| 2^-53` on top of a few ulp: 1e-13
/// at a result near the f64 limits).
pub(super) fn pow(b: &mut Builder, r: Reg, x: Reg, y: Operand) {
    let y = super::numerics::materialize(b, Class::F64, y);
    let (magnitude, l) = (b.reg(Class::F64), b.reg(Class::F64));
    b.ins(format!("abs.f64 {magnitude}, {x}"));
    log(b, l, magnitude);
    b.ins(format!("mul.f64 {l}, {l}, {y}"));
    exp(b, r, l);
    super::emit::pow_signs(b, DType::F64, r, x, y);
}

#[cfg(test)]
mod tests {
    use super::{LN2_HI, LN2_LO};

    #[test]
    fn ln2_is_split_so_that_k_ln2_hi_is_exact() {
        // 32 significant bits: the low 21 of the 52 stored are zero.
        assert_eq!(LN2_HI.to_bits() & ((1 << 21) - 1), 0);
        assert_eq!(LN2_HI + LN2_LO, std::f64::consts::LN_2);
        // ln 2 = 0.693147180559945309417232121458...: the pair carries the digits past f64's.
        assert!((LN2_HI - 0.693_147_180_369_123_8).abs() < 1e-17);
        assert!((LN2_LO - 1.908_214_929_270_587_7e-10).abs() < 1e-26);
    }
}
