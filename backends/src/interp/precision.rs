//! Where a kernel rounds and its f64 reference does not: arithmetic on tiles narrower
//! than f32.
//!
//! The reference (docs/run.md, "The reference") keeps every intermediate in f64 whatever
//! dtype the IR gives it, and rounds only where the program stores to a tensor or
//! converts explicitly (`tile.cast`). A kernel that computes `z = tile.exp(x) * x` on a
//! bf16 tile holds z in bf16, so an output computed from z (`W = tile.cast(z * 0.5,
//! f16)`) carries z's bf16 error. Judged by its own dtype's tolerance, f16's, that
//! output fails against the reference however right the kernel is. Its tolerance adds
//! the narrowest such intermediate's ([`super::Tolerance::with_intermediate`]).
//!
//! Only ops that round count: arithmetic and transcendental functions whose result is a
//! float narrower than f32. Loads (the inputs are exact), data movement, comparisons,
//! `max`/`min`/`abs`/`neg`/`relu`/`select` (exact on their operands' values) and explicit
//! casts of loaded values (which the reference rounds too) do not; an explicit cast of a
//! computed value that more arithmetic reads does (see [`narrowest_rounding`]); a dot's accumulator has its own
//! widening (`@accum`, [`super::Tolerance::with_accumulator`]).

use tessera_frontend::check::DType;
use tessera_passes::ir::{Func, OpId, OpKind, Type, ValueId};

use super::program::significant_bits;

/// For each parameter of `func`, the narrowest float dtype (fewest significand bits)
/// that a rounding op gives a value the kernel's writes to that parameter depend on;
/// `None` when nothing narrower than f32 rounds on the way (or the parameter is not
/// written). For an f64 parameter, f32 arithmetic (and f32 dots) count too: an f64
/// output computed in f32 has f32's error, which f64's tolerance does not allow.
pub fn narrow_intermediates(func: &Func) -> Vec<Option<DType>> {
    let defs = func.definitions();
    // The op owning each region argument (a loop's carried values, an if's results).
    let mut region_owner: Vec<Option<OpId>> = vec![None; func.values.len()];
    for id in func.walk() {
        for region in &func.op(id).regions {
            for &a in &region.args {
                region_owner[a.0 as usize] = Some(id);
            }
        }
    }
    // Values written to shared memory: a read of any slot depends on all of them.
    let shared_writes: Vec<ValueId> = func
        .walk()
        .into_iter()
        .filter(|&id| func.op(id).kind == OpKind::StoreShared)
        .flat_map(|id| func.op(id).operands.iter().copied().filter(|&v| !matches!(func.ty(v), Type::Smem(_))))
        .collect();
    let param_of_view = |v: ValueId| -> Option<usize> {
        let op = func.op(defs.get(v.0 as usize).copied().flatten()?);
        (op.kind == OpKind::View).then(|| func.params.iter().position(|&p| p == op.operands[0])).flatten()
    };
    let mut out = vec![None; func.params.len()];
    for id in func.walk() {
        let op = func.op(id);
        let (param, stored): (Option<usize>, Vec<ValueId>) = match op.kind {
            OpKind::Store | OpKind::TmaStore => {
                (op.operands.first().and_then(|&v| param_of_view(v)), op.operands[1..].to_vec())
            }
            OpKind::Scatter => {
                (op.operands.first().and_then(|&v| func.params.iter().position(|&p| p == v)), op.operands[1..].to_vec())
            }
            _ => continue,
        };
        let Some(param) = param else { continue };
        let f64_output = matches!(func.ty(func.params[param]), Type::Tensor(t) if t.dtype == DType::F64);
        let below_bits = if f64_output { 64 } else { 32 };
        let narrowest = narrowest_rounding(func, &defs, &region_owner, &shared_writes, stored, below_bits);
        out[param] = coarser(out[param], narrowest);
    }
    out
}

/// The narrowest dtype below `below_bits` bits that a rounding op in the backward slice
/// of `roots` produces.
fn narrowest_rounding(
    func: &Func,
    defs: &[Option<OpId>],
    region_owner: &[Option<OpId>],
    shared_writes: &[ValueId],
    roots: Vec<ValueId>,
    below_bits: u32,
) -> Option<DType> {
    let mut stack = roots.clone();
    let mut seen = vec![false; func.values.len()];
    let mut seen_ops = vec![false; func.ops.len()];
    let mut narrowest = None;
    let mut shared_followed = false;
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v.0 as usize], true) {
            continue;
        }
        // Indices, views and tensors address the data and carry none of its values (a
        // tensor parameter's values are exact inputs).
        if matches!(func.ty(v), Type::Index | Type::View(_) | Type::Tensor(_) | Type::Token) {
            continue;
        }
        if matches!(func.ty(v), Type::Smem(_)) && !shared_followed {
            shared_followed = true;
            stack.extend_from_slice(shared_writes);
        }
        // A loop's carried value or an if's result: what enters the op and what its
        // regions yield.
        let op = match (defs.get(v.0 as usize).copied().flatten(), region_owner[v.0 as usize]) {
            (Some(op), _) | (None, Some(op)) => op,
            (None, None) => continue,
        };
        if std::mem::replace(&mut seen_ops[op.0 as usize], true) {
            continue;
        }
        let o = func.op(op);
        let narrow = func.ty(v).dtype().filter(|d| d.is_float() && d.bits() < below_bits);
        if rounds(o.kind) || (o.kind == OpKind::Dot && below_bits > 32) {
            narrowest = coarser(narrowest, narrow);
        }
        // An explicit narrowing of a computed value that more arithmetic reads (the
        // probabilities of attention, `tile.cast(p, bf16)` before `P @ V`): the reference
        // rounds the same conversion, but of its f64 value, and where the kernel's f32
        // value and the exact one straddle a rounding boundary the two differ by one ulp
        // of the narrow dtype. A cast that is itself stored (`tile.cast(acc, bf16)`) is
        // the output's own rounding, which the output's tolerance covers.
        if o.kind == OpKind::Cast && !roots.contains(&v) && o.operands.first().is_some_and(|&x| computed(func, defs, x))
        {
            narrowest = coarser(narrowest, narrow);
        }
        stack.extend_from_slice(&o.operands);
        for region in &o.regions {
            for &inner in &region.ops {
                let inner = func.op(inner);
                if matches!(inner.kind, OpKind::Yield | OpKind::Condition) {
                    stack.extend_from_slice(&inner.operands);
                }
            }
        }
    }
    narrowest
}

/// Whether `v` is computed by arithmetic (in any precision) rather than loaded or moved:
/// the kernel's value of it may then differ from the reference's f64 one in the last
/// bits.
fn computed(func: &Func, defs: &[Option<OpId>], v: ValueId) -> bool {
    let mut seen = vec![false; func.values.len()];
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v.0 as usize], true) {
            continue;
        }
        let Some(op) = defs.get(v.0 as usize).copied().flatten() else { continue };
        let o = func.op(op);
        if rounds(o.kind) || o.kind == OpKind::Dot {
            return true;
        }
        stack.extend(
            o.operands
                .iter()
                .copied()
                .filter(|&x| !matches!(func.ty(x), Type::Index | Type::View(_) | Type::Tensor(_))),
        );
    }
    false
}

/// Ops whose narrow float result is rounded from a value the reference keeps in f64.
fn rounds(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(kind, Add | Sub | Mul | Div | Pow | Exp | Log | Sqrt | Rsqrt | Tanh | Sigmoid | Gelu | Silu | Reduce)
}

/// The coarser of two dtypes (fewer significand bits; `None` is exact).
fn coarser(a: Option<DType>, b: Option<DType>) -> Option<DType> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if significant_bits(y) < significant_bits(x) { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use tessera_frontend::db::item_index;
    use tessera_frontend::{Database, SourceFile};
    use tessera_passes::{default_config, tile_ir, Target};

    use super::*;
    use crate::interp::Tolerance;

    const HEADER: &str =
        "import tessera as ts\nfrom tessera import tile, Tensor, bf16, f16, f32, i32, kernel, Schedule\n\n";

    /// [`intermediates`] of a kernel written without the imports.
    fn intermediates_with_imports(body: &str, kernel: &str) -> BTreeMap<String, Option<DType>> {
        intermediates(&format!("{HEADER}{body}"), kernel)
    }

    /// `kernel` of `source`: its parameters by name, with what [`narrow_intermediates`]
    /// says of each.
    fn intermediates(source: &str, kernel: &str) -> BTreeMap<String, Option<DType>> {
        let db = Database::default();
        let file = SourceFile::new(&db, PathBuf::from("precision.tsr"), source.to_string(), None);
        let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
        let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
        let func = tile_ir(&db, key, config, Target::Sm90).clone().unwrap();
        let names = func.params.iter().map(|p| func.values[p.0 as usize].name.clone().unwrap().to_string());
        names.zip(narrow_intermediates(&func)).collect()
    }

    #[test]
    fn an_output_computed_through_bf16_arithmetic_carries_bf16() {
        // The fixture `tessera run` is tested on: Z = exp(x) * x + y in bf16, and
        // W = cast(z * 0.5, f16) from it.
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run/narrow_intermediate.tsr");
        let found = intermediates(&std::fs::read_to_string(path).unwrap(), "narrow_math");
        assert_eq!(found["Z"], Some(DType::BF16));
        assert_eq!(found["W"], Some(DType::BF16));
        assert_eq!((found["X"], found["Y"]), (None, None), "inputs are not written");
    }

    #[test]
    fn relu_and_casts_of_loaded_values_round_nothing() {
        let found = intermediates_with_imports(
            r#"@kernel.schedule(Schedule(block=(32, 64), warps=4))
def exact(X: Tensor["R", "C", bf16], Y: Tensor["R", "C", f16], V: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.relu(tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN]))
            V[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x, f32) + tile.cast(tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN]), f32)
"#,
            "exact",
        );
        assert_eq!(found["V"], None);
    }

    #[test]
    fn a_loop_carried_f16_sum_reaches_the_output_after_the_loop() {
        let found = intermediates_with_imports(
            r#"@kernel.schedule(Schedule(block=(32, 64), warps=4))
def running(X: Tensor["R", "C", f16], S: Tensor["R", f32], G: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        acc = tile.zeros((ctx.BM,), f16)
        for c0 in tile.range(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            acc = acc + tile.sum(x, axis=1)
            G[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x, f32)
        S[r0:r0 + ctx.BM] = tile.cast(acc, f32)
"#,
            "running",
        );
        assert_eq!(found["S"], Some(DType::F16));
        assert_eq!(found["G"], None);
    }

    #[test]
    fn the_corpus_gemms_with_f32_accumulators_and_epilogues_round_nothing_narrow() {
        for (file, kernel) in [("gemm.tsr", "gemm"), ("linear_gelu.tsr", "linear_gelu")] {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid").join(file);
            let found = intermediates(&std::fs::read_to_string(path).unwrap(), kernel);
            assert!(found.values().all(Option::is_none), "{kernel}: {found:?}");
        }
    }

    #[test]
    fn attention_rounds_its_computed_probabilities_to_bf16_before_p_at_v() {
        // `tile.cast(p, bf16)` of `p = exp(s - m)`: the kernel's f32 `p` and the
        // reference's f64 one can round to neighbouring bf16 values (seed 78 at
        // BH=S=80 on sm_80 came out 7 bf16 ulps off in one element of 409 600 without
        // this). The output's own `tile.cast(acc / l, bf16)` is not counted again.
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/flash_attention.tsr");
        let found = intermediates(&std::fs::read_to_string(path).unwrap(), "flash_attention");
        assert_eq!(found["O"], Some(DType::BF16));
        // A cast of loaded values rounds nothing the reference keeps (the test above),
        // and neither does the cast that is stored.
        let stored_cast = intermediates_with_imports(
            r#"@kernel.schedule(Schedule(block=(32, 64), warps=4))
def scaled(X: Tensor["R", "C", f32], Y: Tensor["R", "C", bf16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(tile.exp(tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])), bf16)
"#,
            "scaled",
        );
        assert_eq!(stored_cast["Y"], None);
    }

    #[test]
    fn an_intermediate_as_coarse_as_the_output_or_coarser_widens_and_never_an_exact_output() {
        let f16 = Tolerance::for_dtype(DType::F16);
        let widened = f16.with_intermediate(Some(DType::BF16));
        let bf16 = Tolerance::for_dtype(DType::BF16);
        assert_eq!((widened.rtol, widened.atol), (f16.rtol + bf16.rtol, f16.atol + bf16.atol));
        assert_eq!(bf16.with_intermediate(Some(DType::F16)), bf16);
        // bf16 arithmetic before a bf16 store: both roundings count.
        let twice = bf16.with_intermediate(Some(DType::BF16));
        assert_eq!((twice.rtol, twice.atol), (2.0 * bf16.rtol, 2.0 * bf16.atol));
        assert_eq!(f16.with_intermediate(None), f16);
        assert_eq!(Tolerance::EXACT.with_intermediate(Some(DType::Fp8E5m2)), Tolerance::EXACT);
    }
}
