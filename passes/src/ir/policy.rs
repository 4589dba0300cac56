//! Numerics policies as IR attributes (docs/ir.md, "Numerics policies"): the one place
//! that names them, for the lowering that sets them and every backend that reads them.
//!
//! - `tile.dot`, `tile.reduce {kind = sum}`, `graph.matmul`, `graph.reduce`:
//!   `acc = T` — `@accum(T)` on the operands' element type: the running sum is kept in
//!   `T` (rounded to `T` after every addition when `T` is narrower than `f32`).
//! - `arith.cast` (and elementwise fp8 arithmetic): `saturate = true` — `@saturate` on
//!   the destination type: overflow clamps to the largest finite value instead of
//!   becoming NaN (e4m3) / Inf (e5m2) or wrapping (integers).
//! - `arith.cast %x, %u {rounding = "stochastic"}` — `@stochastic_round` on the
//!   destination type: `%u` is a `tile.rand` tile of the run's seed (the hidden kernel
//!   parameter [`SEED_PARAM`]) and the element rounds up when `u < fraction`.

use tessera_frontend::check::{DType, ElemType, Policy};

use super::{Attr, Op};

/// `acc = T` on dots and reductions.
pub const ACC: &str = "acc";
/// `saturate = true` on conversions to fp8 and integer types.
pub const SATURATE: &str = "saturate";
/// `rounding = "stochastic"` on a conversion (its second operand is the uniform tile).
pub const ROUNDING: &str = "rounding";
pub const STOCHASTIC: &str = "stochastic";
/// `loss_scale = k` on the backward graph's seed (`graph.full`) and on the division of
/// each gradient by `k`.
pub const LOSS_SCALE: &str = "loss_scale";
/// The hidden index parameter that carries the run's seed into kernels that round
/// stochastically (the last parameter; `func` attribute [`SEED_ATTR`] gives its index).
pub const SEED_PARAM: &str = "__seed";
/// Function attribute: the position of [`SEED_PARAM`] among the parameters.
pub const SEED_ATTR: &str = "seed_param";

/// The accumulation type an op's `acc` attribute asks for.
pub fn acc(op: &Op) -> Option<DType> {
    match op.attr(ACC) {
        Some(Attr::DType(d)) => Some(*d),
        _ => None,
    }
}

/// The binary format a stochastic conversion rounds to, for the generators: (stored
/// mantissa bits, exponent of the smallest normal, largest finite, has Inf).
pub fn float_format(dtype: DType) -> Option<(i64, i64, f64, bool)> {
    Some(match dtype {
        DType::BF16 => (7, -126, 3.3895313892515355e38, true),
        DType::F16 => (10, -14, 65504.0, true),
        DType::Fp8E4m3 => (3, -6, 448.0, false),
        DType::Fp8E5m2 => (2, -14, 57344.0, true),
        _ => return None,
    })
}

/// What a stochastically rounded value beyond the largest finite `max` becomes: `max`
/// under `@saturate`, else Inf where the format has one and NaN where it has none (e4m3).
pub fn overflow_value(max: f64, has_inf: bool, saturate: bool) -> f64 {
    if saturate {
        max
    } else if has_inf {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

/// Whether a conversion (or fp8 arithmetic) clamps on overflow.
pub fn saturates(op: &Op) -> bool {
    matches!(op.attr(SATURATE), Some(Attr::Bool(true)))
}

/// Whether an `arith.cast` rounds stochastically (with its second operand as `u`).
pub fn stochastic(op: &Op) -> bool {
    op.str_attr(ROUNDING) == Some(STOCHASTIC) && op.operands.len() == 2
}

/// `@saturate` applies to this element type (fp8 and integer storage).
pub fn wants_saturate(elem: &ElemType) -> bool {
    elem.policies.contains(&Policy::Saturate) && (elem.dtype.is_fp8() || elem.dtype.is_int())
}

/// `@stochastic_round` applies to this element type (bf16, f16, fp8).
pub fn wants_stochastic(elem: &ElemType) -> bool {
    elem.policies.contains(&Policy::StochasticRound)
        && matches!(elem.dtype, DType::BF16 | DType::F16 | DType::Fp8E4m3 | DType::Fp8E5m2)
}

/// Whether accumulating in `acc` means rounding the running sum after every addition
/// (it is narrower than the f32 every backend sums in by default).
pub fn rounds_each_step(acc: DType) -> bool {
    acc.is_float() && acc != DType::F32 && acc != DType::F64
}

/// The element type (dtype and policies) of a checked value, if it has one.
pub fn elem_of(ty: &tessera_frontend::check::Ty) -> Option<&ElemType> {
    use tessera_frontend::check::Ty;
    match ty {
        Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => Some(&t.elem),
        Ty::Tile(t) => Some(&t.elem),
        Ty::Scalar(e) => Some(e),
        _ => None,
    }
}

/// `acc = T` when one of the tensors an op reads has `@accum(T)` (for `graph.matmul` and
/// `graph.reduce`, and the backward graph's).
pub fn acc_attrs(types: &[&super::Type]) -> Vec<(&'static str, Attr)> {
    let acc = types.iter().find_map(|t| match t {
        super::Type::Tensor(t) => t.policies.iter().find_map(|p| match p {
            Policy::Accum(d) => Some(*d),
            _ => None,
        }),
        _ => None,
    });
    acc.map(|d| vec![(ACC, Attr::DType(d))]).unwrap_or_default()
}

/// `@loss_scale(k)` on one of these types: the factor `grad` scales the loss by.
pub fn loss_scale(types: &[&super::Type]) -> Option<f64> {
    types.iter().find_map(|t| match t {
        super::Type::Tensor(t) => t.policies.iter().find_map(Policy::loss_scale),
        _ => None,
    })
}
