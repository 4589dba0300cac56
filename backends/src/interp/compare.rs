//! Comparing a result with the expected one, with a tolerance that depends on the
//! output dtype.
//!
//! # Tolerance policy
//!
//! Non-finite values are never silently equal. Where the expected value is finite, a NaN
//! or an infinity in the result is a mismatch. Where the expected value itself is NaN or
//! infinite, the element is counted in [`Comparison::expected_nonfinite`] and the
//! comparison does not pass, whatever the result holds: the verdict is "non-finite", not
//! "correct". Only a tolerance that allows non-finite values (`@verify.numerics(
//! allow_nonfinite=True)`, [`Tolerance::allowing_nonfinite`]) accepts a NaN where NaN is
//! expected, or the same infinity. Every other element passes when
//!
//! ```text
//! |actual - expected| <= rtol * |expected| + atol * scale
//! ```
//!
//! where `scale` is the root mean square of the finite expected values (1 when they are
//! all zero): the absolute term is relative to the output's magnitude, so values near
//! zero from cancellation (a GEMM element, a centred LayerNorm output) do not need a
//! relative match, while any error of the output's own size fails. Outputs whose error
//! scales with an input rather than with themselves give that scale explicitly
//! ([`Tolerance::relative_to`]): attention rounds its probabilities to bf16 before
//! `P @ V`, which bounds the error by `2^-9 * max|V|` however small the output is.
//!
//! | output dtype | rtol | atol (× scale) | why |
//! |---|---|---|---|
//! | f64 | 1e-9 | 1e-9 | f64 math; order of sums |
//! | f32 | 1e-4 | 1e-5 | f32 math: GPU `ex2.approx`/`tanh.approx` (~2 ulp), sum order, a few roundings |
//! | tf32, f16 | 2^-9 | 2^-10 | 2 ulp of the 11-bit significand |
//! | bf16 | 2^-7 | 2^-8 | 1 ulp of the 8-bit significand: the rounding of the last op may go either way after f32 differences |
//! | fp8 e4m3 | 2^-3 | 2^-4 | 1 ulp of the 4-bit significand |
//! | fp8 e5m2 | 2^-2 | 2^-3 | 1 ulp of the 3-bit significand |
//! | int8, int4, i32, i64, bool | 0 | 0 | exact |
//!
//! [`Tolerance::with_reduction`] widens `atol` by `sqrt(k) * 2^-20` for outputs that sum
//! `k` f32 terms (a GEMM's K): the summation order is unspecified (docs/ir.md), and the
//! typical error of an f32 sum is `sqrt(k) * 2^-24` of its magnitude (16x headroom).
//! Any wrong element (a sign, a swapped row, a missing term) is of the order of `scale`
//! and fails; `tests` check that it does. [`Tolerance::with_accumulator`] widens it for
//! accumulators narrower than f32 and [`Tolerance::with_fp8_tensor_cores`] for the
//! tensor cores' fp8 sums (`wgmma` with fp8 operands). [`Tolerance::with_intermediate`]
//! adds the tolerance of a narrower float that arithmetic on the way to the output rounds
//! to, where the reference keeps f64 (`interp::precision`).

use std::fmt;

use tessera_frontend::check::DType;

use tessera_passes::ir::Func;

use super::param_access;
use crate::tensor::{Arg, HostTensor};

#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    /// Absolute tolerance in units of `scale`.
    pub atol: f64,
    /// What `atol` is relative to; `None`: the RMS of the expected values.
    pub scale: Option<f64>,
    /// Whether a non-finite expected value matched by the same non-finite result passes.
    pub allow_nonfinite: bool,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance { rtol: 0.0, atol: 0.0, scale: None, allow_nonfinite: false };

    /// The policy of the module doc for outputs of `dtype`.
    pub fn for_dtype(dtype: DType) -> Tolerance {
        let p = |e: i32| 2f64.powi(e);
        match dtype {
            DType::F64 => Tolerance { rtol: 1e-9, atol: 1e-9, scale: None, allow_nonfinite: false },
            DType::F32 => Tolerance { rtol: 1e-4, atol: 1e-5, scale: None, allow_nonfinite: false },
            DType::TF32 | DType::F16 => Tolerance { rtol: p(-9), atol: p(-10), scale: None, allow_nonfinite: false },
            DType::BF16 => Tolerance { rtol: p(-7), atol: p(-8), scale: None, allow_nonfinite: false },
            DType::Fp8E4m3 => Tolerance { rtol: p(-3), atol: p(-4), scale: None, allow_nonfinite: false },
            DType::Fp8E5m2 => Tolerance { rtol: p(-2), atol: p(-3), scale: None, allow_nonfinite: false },
            DType::Int8 | DType::Int4 | DType::I32 | DType::I64 | DType::Bool => Tolerance::EXACT,
        }
    }

    /// Widened for outputs that accumulate `k` terms in f32 (see the module doc).
    pub fn with_reduction(self, k: usize) -> Tolerance {
        if self.rtol == 0.0 && self.atol == 0.0 {
            return self;
        }
        Tolerance { atol: self.atol + (k.max(1) as f64).sqrt() * 2f64.powi(-20), ..self }
    }

    /// Widened for an output computed through arithmetic that rounds to `intermediate`
    /// (bf16, f16, fp8) where the f64 reference does not round (`interp::precision`):
    /// the intermediate's tolerance is added to the output's, as their errors add. That
    /// holds for an intermediate as coarse as the output too: `exp(x) * x + y` on bf16
    /// tiles rounds three times before its bf16 store rounds again, and the kernel on the
    /// CPU came out two bf16 ulps from the reference. An exact (integer) output, or an
    /// intermediate finer than the output, changes nothing.
    pub fn with_intermediate(self, intermediate: Option<DType>) -> Tolerance {
        let Some(d) = intermediate else { return self };
        let inner = Tolerance::for_dtype(d);
        if (self.rtol == 0.0 && self.atol == 0.0) || inner.rtol < self.rtol {
            return self;
        }
        Tolerance { rtol: self.rtol + inner.rtol, atol: self.atol + inner.atol, ..self }
    }

    /// The tolerance of one output of a kernel: its dtype's, widened for sums as long
    /// as `longest` (the longest tensor dim), for the narrowest float that arithmetic on
    /// the way to it rounds to, for an accumulator narrower than f32, and for fp8
    /// `wgmma`s.
    pub fn for_output(
        dtype: DType,
        longest: usize,
        intermediate: Option<DType>,
        accumulator: Option<DType>,
        fp8_tensor_cores: bool,
    ) -> Tolerance {
        // An f32 intermediate matters only to an f64 output: f32's own tolerance covers
        // f32 arithmetic, and the narrower intermediates are added as before.
        let intermediate = intermediate.filter(|&d| d != DType::F32 || dtype == DType::F64);
        let mut tol = if dtype == DType::F64 && intermediate.is_none() {
            // Computed in f64 throughout: sums in any order, 16x the typical error.
            Tolerance::for_dtype(dtype).widened_for_rounding(2f64.powi(-53) * 4.0, longest)
        } else {
            Tolerance::for_dtype(dtype).with_reduction(longest).with_intermediate(intermediate)
        };
        if let Some(acc) = accumulator {
            tol = tol.with_accumulator(acc, longest);
        }
        if fp8_tensor_cores {
            tol = tol.with_fp8_tensor_cores();
        }
        tol
    }

    /// Accepting NaN where NaN is expected and the same infinity where one is expected.
    pub fn allowing_nonfinite(self, allow: bool) -> Tolerance {
        Tolerance { allow_nonfinite: allow, ..self }
    }

    /// Widened for a kernel that accumulates `k` terms in `acc` narrower than f32
    /// (`@accum(f16)`): each addition rounds the running sum to `acc`, a relative error of
    /// its unit roundoff `u` (f16 2^-11, bf16 2^-8) that grows like `sqrt(k)`; the budget
    /// is `4 sqrt(k) u` of the output's RMS. Wider accumulators change nothing.
    pub fn with_accumulator(self, acc: DType, k: usize) -> Tolerance {
        let u = match acc {
            DType::F16 | DType::TF32 => 2f64.powi(-11),
            DType::BF16 => 2f64.powi(-8),
            DType::Fp8E4m3 => 2f64.powi(-4),
            DType::Fp8E5m2 => 2f64.powi(-3),
            _ => return self,
        };
        self.widened_for_rounding(u, k)
    }

    /// Widened for a kernel whose dots run on fp8 `wgmma`s: Hopper's tensor cores add an
    /// fp8 MMA's products with an adder narrower than f32 (about 14 bits kept,
    /// DeepSeek-V3 §3.3.2), and the generated code sums at most
    /// `FP8_PROMOTION_K` = 128 of them that way before adding the sum to an f32
    /// accumulator. So the budget is that of an accumulator with `u = 2^-13` over 128
    /// terms: `4 sqrt(128) 2^-13`, about 0.55% of the output's RMS, whatever K is (a sum
    /// left in the tensor cores for all of K fails it at K = 4096).
    pub fn with_fp8_tensor_cores(self) -> Tolerance {
        self.widened_for_rounding(2f64.powi(-13), tessera_passes::wgmma::FP8_PROMOTION_K as usize)
    }

    /// `atol` widened by `4 sqrt(k) u` (a sum of `k` terms each rounded with unit
    /// roundoff `u`), unless the tolerance is exact.
    fn widened_for_rounding(self, u: f64, k: usize) -> Tolerance {
        if self.rtol == 0.0 && self.atol == 0.0 {
            return self;
        }
        Tolerance { atol: self.atol + 4.0 * (k.max(1) as f64).sqrt() * u, ..self }
    }

    /// `atol` relative to `scale` instead of the expected values' RMS.
    pub fn relative_to(self, scale: f64) -> Tolerance {
        Tolerance { scale: Some(scale), ..self }
    }
}

#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Mismatch {
    pub index: usize,
    pub expected: f64,
    pub actual: f64,
}

#[derive(Clone, PartialEq, Debug)]
pub struct Comparison {
    pub len: usize,
    /// Largest `|actual - expected|` and `|actual - expected| / |expected|` over finite
    /// pairs (the relative one over nonzero expected values).
    pub max_abs: f64,
    pub max_rel: f64,
    pub mismatches: usize,
    pub first_mismatch: Option<Mismatch>,
    /// NaN or infinite expected values, and the first of them.
    pub expected_nonfinite: usize,
    pub first_expected_nonfinite: Option<usize>,
    /// NaN or infinite results, and the first of them.
    pub actual_nonfinite: usize,
    pub first_actual_nonfinite: Option<usize>,
    /// The RMS of the expected values that `atol` is relative to.
    pub scale: f64,
    pub tolerance: Tolerance,
    pub passed: bool,
    /// Set when the lengths differ (nothing else is meaningful then).
    pub length_mismatch: Option<(usize, usize)>,
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((e, a)) = self.length_mismatch {
            return write!(f, "expected {e} elements, got {a}");
        }
        write!(
            f,
            "{} of {} elements differ (max abs {:.3e}, max rel {:.3e}; rtol {:.1e}, atol {:.1e} x scale {:.3e})",
            self.mismatches, self.len, self.max_abs, self.max_rel, self.tolerance.rtol, self.tolerance.atol, self.scale
        )?;
        if let Some(m) = self.first_mismatch {
            write!(f, "; first at [{}]: expected {}, got {}", m.index, m.expected, m.actual)?;
        }
        if self.expected_nonfinite > 0 {
            write!(f, "; {} expected values are NaN or infinite", self.expected_nonfinite)?;
        }
        if self.actual_nonfinite > 0 {
            write!(f, "; {} results are NaN or infinite", self.actual_nonfinite)?;
        }
        Ok(())
    }
}

/// Compares with the policy for `dtype` (see the module doc).
pub fn compare(expected: &[f64], actual: &[f64], dtype: DType) -> Comparison {
    compare_with(expected, actual, &Tolerance::for_dtype(dtype))
}

/// Compares two tensors of the same dtype and dims with the policy for their dtype.
pub fn compare_tensors(expected: &HostTensor, actual: &HostTensor) -> Comparison {
    let mut c = compare(&expected.to_f64(), &actual.to_f64(), expected.dtype);
    if expected.dims != actual.dims || expected.dtype != actual.dtype {
        c.passed = false;
        c.length_mismatch.get_or_insert((expected.numel(), actual.numel()));
    }
    c
}

/// The comparison of one output parameter of a kernel.
#[derive(Clone, PartialEq, Debug)]
pub struct OutputComparison {
    pub param: usize,
    pub name: String,
    pub comparison: Comparison,
}

/// The largest dim of any tensor argument (1 without one): an upper bound on the length
/// of any sum a kernel or graph over them computes, which widens comparison budgets.
pub fn longest_dim(args: &[Arg]) -> usize {
    args.iter()
        .filter_map(|a| match a {
            Arg::Tensor(t) => t.dims.iter().copied().max(),
            _ => None,
        })
        .max()
        .unwrap_or(1)
}

/// Compares every tensor the kernel writes (by [`param_access`]) between two argument
/// lists of the same kernel: the interpreter's (`expected`) and a backend's (`actual`).
/// Each output gets the policy of its dtype, widened for sums as long as the largest
/// tensor dim (an upper bound on the length of any reduction in a kernel over them), and
/// for fp8 `wgmma`s ([`Tolerance::with_fp8_tensor_cores`]).
pub fn compare_outputs(func: &Func, expected: &[Arg], actual: &[Arg]) -> Vec<OutputComparison> {
    let longest = longest_dim(expected);
    let fp8_tensor_cores = tessera_passes::wgmma::has_fp8_wgmma(func);
    let intermediates = super::precision::narrow_intermediates(func);
    param_access(func)
        .iter()
        .enumerate()
        .filter(|(_, a)| a.written)
        .filter_map(|(i, _)| match (expected.get(i), actual.get(i)) {
            (Some(Arg::Tensor(e)), Some(Arg::Tensor(a))) => {
                let intermediate = intermediates.get(i).copied().flatten();
                let tol = Tolerance::for_output(e.dtype, longest, intermediate, None, fp8_tensor_cores);
                let mut comparison = compare_with(&e.to_f64(), &a.to_f64(), &tol);
                if e.dims != a.dims || e.dtype != a.dtype {
                    comparison.passed = false;
                    comparison.length_mismatch.get_or_insert((e.numel(), a.numel()));
                }
                let v = func.params[i];
                let name = func.values[v.0 as usize].name.as_ref().map_or_else(|| format!("arg{i}"), |n| n.to_string());
                Some(OutputComparison { param: i, name, comparison })
            }
            _ => None,
        })
        .collect()
}

pub fn compare_with(expected: &[f64], actual: &[f64], tol: &Tolerance) -> Comparison {
    let scale = scale_of(expected, tol);
    let mut c = Comparison {
        len: expected.len(),
        max_abs: 0.0,
        max_rel: 0.0,
        mismatches: 0,
        first_mismatch: None,
        expected_nonfinite: 0,
        first_expected_nonfinite: None,
        actual_nonfinite: 0,
        first_actual_nonfinite: None,
        scale,
        tolerance: *tol,
        passed: false,
        length_mismatch: None,
    };
    if expected.len() != actual.len() {
        c.length_mismatch = Some((expected.len(), actual.len()));
        return c;
    }
    for (i, (&e, &a)) in expected.iter().zip(actual).enumerate() {
        if !e.is_finite() {
            c.expected_nonfinite += 1;
            c.first_expected_nonfinite.get_or_insert(i);
        }
        if !a.is_finite() {
            c.actual_nonfinite += 1;
            c.first_actual_nonfinite.get_or_insert(i);
        }
        if e.is_finite() && a.is_finite() {
            let d = (a - e).abs();
            c.max_abs = c.max_abs.max(d);
            if e != 0.0 {
                c.max_rel = c.max_rel.max(d / e.abs());
            }
        }
        if !element_ok(e, a, tol, scale) {
            c.mismatches += 1;
            c.first_mismatch.get_or_insert(Mismatch { index: i, expected: e, actual: a });
        }
    }
    c.passed = c.mismatches == 0 && (c.expected_nonfinite == 0 || tol.allow_nonfinite);
    c
}

/// Per element of [`compare_with`]'s comparison: whether it is within tolerance.
pub fn elements_within(expected: &[f64], actual: &[f64], tol: &Tolerance) -> Vec<bool> {
    let scale = scale_of(expected, tol);
    expected.iter().zip(actual).map(|(&e, &a)| element_ok(e, a, tol, scale)).collect()
}

/// The scale of the tolerance's absolute part: the expected values' RMS unless given.
fn scale_of(expected: &[f64], tol: &Tolerance) -> f64 {
    let finite: Vec<f64> = expected.iter().copied().filter(|v| v.is_finite()).collect();
    let rms =
        if finite.is_empty() { 0.0 } else { (finite.iter().map(|v| v * v).sum::<f64>() / finite.len() as f64).sqrt() };
    tol.scale.unwrap_or(if rms > 0.0 { rms } else { 1.0 })
}

fn element_ok(e: f64, a: f64, tol: &Tolerance, scale: f64) -> bool {
    if !e.is_finite() {
        // Counted apart; it fails the comparison unless non-finite values are allowed,
        // and then only the same kind of value matches.
        !tol.allow_nonfinite || (e.is_nan() && a.is_nan()) || e == a
    } else {
        a.is_finite() && (a - e).abs() <= tol.rtol * e.abs() + tol.atol * scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f64_output_computed_in_f64_allows_only_f64_errors() {
        let expected: Vec<f64> = (0..1000).map(|i| (i as f64 - 500.0) * 0.01).collect();
        // 0.1 rounded to f32 (the error of a literal widened from f32): 1.5e-8 relative.
        let off: Vec<f64> = expected.iter().map(|&e| e * (0.1f32 as f64 / 0.1)).collect();
        let f64_only = Tolerance::for_output(DType::F64, 1000, None, None, false);
        assert!(!compare_with(&expected, &off, &f64_only).passed);
        // The same error where the kernel computes in f32 on the way: f32's tolerance.
        let through_f32 = Tolerance::for_output(DType::F64, 1000, Some(DType::F32), None, false);
        assert!(compare_with(&expected, &off, &through_f32).passed);
        // f64 rounding noise in sums passes.
        let noise: Vec<f64> = expected.iter().map(|&e| e * (1.0 + 4.0 * f64::EPSILON)).collect();
        assert!(compare_with(&expected, &noise, &f64_only).passed);
    }
    use crate::interp::inputs::Rng;

    fn normal(n: usize, seed: u64, dtype: DType) -> Vec<f64> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| crate::tensor::round_to(dtype, r.normal())).collect()
    }

    #[test]
    fn rounding_differences_pass() {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::Fp8E4m3, DType::Fp8E5m2] {
            let exact: Vec<f64> = normal(4096, 3, DType::F64);
            let rounded: Vec<f64> = exact.iter().map(|&v| crate::tensor::round_to(dtype, v)).collect();
            let c = compare(&exact, &rounded, dtype);
            assert!(c.passed, "{dtype}: {c}");
        }
    }

    #[test]
    fn a_wrong_result_fails() {
        for dtype in [DType::F32, DType::BF16, DType::Fp8E4m3, DType::F64] {
            let rows = 32;
            let cols = 16;
            let good = normal(rows * cols, 5, dtype);
            // One element with its sign flipped.
            let mut flipped = good.clone();
            let i = (0..good.len()).find(|&i| good[i].abs() > 0.5).unwrap();
            flipped[i] = -flipped[i];
            let c = compare(&good, &flipped, dtype);
            assert!(!c.passed && c.mismatches == 1, "{dtype}: {c}");
            assert_eq!(c.first_mismatch.unwrap().index, i);
            // Every row shifted down by one (an off-by-one row offset).
            let mut shifted = good.clone();
            shifted.copy_within(0..(rows - 1) * cols, cols);
            let c = compare(&good, &shifted, dtype);
            assert!(!c.passed && c.mismatches > rows * cols / 2, "{dtype}: {c}");
            // One element off by a tenth of the output's scale.
            let mut nudged = good.clone();
            nudged[7] += 0.1;
            assert!(!compare(&good, &nudged, dtype).passed || dtype == DType::Fp8E4m3, "{dtype}");
        }
        // Integers are exact.
        assert!(!compare(&[1.0, 2.0], &[1.0, 3.0], DType::I32).passed);
        assert!(compare(&[1.0, 2.0], &[1.0, 2.0], DType::I32).passed);
        // A NaN is never silently equal to a NaN: a non-finite expected value fails the
        // comparison (the verdict "non-finite") unless non-finite values are allowed, and
        // then NaN only matches NaN and infinities only themselves.
        let c = compare(&[f64::NAN, f64::INFINITY, 1.0], &[f64::NAN, f64::INFINITY, 1.0], DType::F32);
        assert!(!c.passed && c.mismatches == 0 && c.expected_nonfinite == 2 && c.actual_nonfinite == 2, "{c}");
        let allow = Tolerance::for_dtype(DType::F32).allowing_nonfinite(true);
        assert!(compare_with(&[f64::NAN, f64::INFINITY], &[f64::NAN, f64::INFINITY], &allow).passed);
        assert!(!compare_with(&[f64::NAN], &[0.0], &allow).passed);
        assert!(!compare_with(&[f64::INFINITY], &[f64::NEG_INFINITY], &allow).passed);
        // A finite expected value and a non-finite result is a mismatch.
        let c = compare(&[1.0, 2.0], &[f64::NAN, 2.0], DType::F32);
        assert!(!c.passed && c.mismatches == 1 && c.first_actual_nonfinite == Some(0), "{c}");
        assert!(!compare(&[f64::NAN], &[0.0], DType::F32).passed);
        assert!(!compare(&[f64::INFINITY], &[f64::MAX], DType::F32).passed);
        assert!(!compare(&[1.0], &[1.0, 2.0], DType::F32).passed);
    }

    #[test]
    fn reduction_widening_is_modest() {
        let t = Tolerance::for_dtype(DType::F32).with_reduction(4096);
        assert!(t.atol < 1e-4, "{t:?}");
        assert_eq!(Tolerance::for_dtype(DType::I32).with_reduction(4096), Tolerance::EXACT);
    }

    /// The fp8 tensor-core budget is about 0.55% of the output's RMS whatever K is: an
    /// error of 0.1% of it passes, one of 1% (what a K = 4096 sum left in the tensor
    /// cores showed on an H200, in places) fails.
    #[test]
    fn fp8_tensor_core_widening_is_bounded_by_the_promotion_interval() {
        let t = Tolerance::for_dtype(DType::F32).with_fp8_tensor_cores();
        let budget = 4.0 * 128f64.sqrt() * 2f64.powi(-13);
        assert!((t.atol - 1e-5 - budget).abs() < 1e-12, "{t:?}");
        let expected = vec![1.0; 64];
        let off = |d: f64| expected.iter().map(|e| e + d).collect::<Vec<_>>();
        assert!(compare_with(&expected, &off(1e-3), &t).passed);
        assert!(!compare_with(&expected, &off(1e-2), &t).passed);
        assert_eq!(Tolerance::for_dtype(DType::I32).with_fp8_tensor_cores(), Tolerance::EXACT);
    }
}
