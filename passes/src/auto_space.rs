//! The default search space of `@kernel.auto` (docs/language.md, "Schedules and
//! autotuning"): derived from the target and the kernel's tensor-core dots, then pruned
//! like any `@kernel.autotune` space (W0702/E0703, `tessera autotune`).
//!
//! The derivation:
//! - a key is searched only when the kernel reads it through `ctx` (`BM`, `BN`, `BK`,
//!   `vector`), or, on a GPU, when the compiler consumes it (`warps`, `stages`); a key an
//!   explicit `@kernel.schedule` fixes is kept, not searched;
//! - `BM`, `BN` ∈ {64, 128}: multiples of the tensor-core instruction's M (16) and N (8)
//!   that a 4- or 8-warp block divides evenly;
//! - `BK` ∈ {2q, 4q} where q is the instruction's K for the dots' operand dtypes (16 for
//!   f16/bf16, 32 for 8-bit operands, the largest when dots mix them; m16n8k16 and
//!   m16n8k32 on sm_80 and sm_90); without a tensor-core dot, {16, 32};
//! - `warps` ∈ {4, 8}; `stages` ∈ {2, 3} on sm_80 and {2, 3, 4} on sm_90 (227 KB of shared
//!   memory per block against 163 KB); `vector` ∈ {4, 8};
//! - on `cpu`, `warps` and `stages` are not searched (the base schedule's values are kept).

use tessera_frontend::check::schedule::{KernelSchedule, KeyValue, SpaceKey};
use tessera_frontend::check::{fn_decorators, infer_function};
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey};

use crate::target::Target;

/// The kernel's schedule on `target`: its decorators' schedule, with the default search
/// space filled in for `@kernel.auto` (an explicit `@kernel.autotune` space wins).
pub fn kernel_schedule(db: &dyn Db, key: FnKey<'_>, target: Target) -> KernelSchedule {
    let mut schedule = fn_decorators(db, key).schedule.clone().unwrap_or_default();
    fill_auto_space(db, key, &mut schedule, target);
    schedule
}

/// Gives an `@kernel.auto` schedule with no explicit space the default one on `target`.
pub fn fill_auto_space(db: &dyn Db, key: FnKey<'_>, schedule: &mut KernelSchedule, target: Target) {
    if schedule.auto && schedule.space.is_empty() {
        let inference = infer_function(db, key);
        let mma = inference.mma_sites.iter().filter_map(|s| s.dtype.mma_multiple()).max();
        schedule.space = auto_space(mma, &inference.ctx_reads, schedule, target);
    }
}

/// The keys of the default space, in the order `dict(BM=, BN=, BK=, warps=, stages=,
/// vector=)` would list them. `mma_k` is the tensor-core instruction's K of the
/// kernel's dots, `reads` the canonical keys the body reads through `ctx`.
pub fn auto_space(mma_k: Option<u32>, reads: &[String], schedule: &KernelSchedule, target: Target) -> Vec<SpaceKey> {
    let q = i64::from(mma_k.unwrap_or(8));
    let stages: &[i64] = if target == Target::Sm90 { &[2, 3, 4] } else { &[2, 3] };
    let gpu = target != Target::Cpu;
    let read = |k: &str| reads.iter().any(|r| r == k);
    let keys: [(&str, bool, &[i64]); 6] = [
        ("BM", read("BM"), &[64, 128]),
        ("BN", read("BN"), &[64, 128]),
        ("BK", read("BK"), &[2 * q, 4 * q]),
        ("warps", gpu, &[4, 8]),
        ("stages", gpu, stages),
        ("vector", read("vector"), &[4, 8]),
    ];
    keys.iter()
        .filter(|(k, searched, _)| *searched && schedule.fixed.get(k).is_none())
        .map(|(k, _, values)| SpaceKey {
            key: k.to_string(),
            key_range: TextRange::default(),
            candidates: values.iter().map(|&v| (KeyValue::Int(v), TextRange::default())).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(space: &[SpaceKey]) -> Vec<(String, Vec<i64>)> {
        space.iter().map(|k| (k.key.clone(), k.candidates.iter().filter_map(|(v, _)| v.as_int()).collect())).collect()
    }

    fn reads(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn f16_dots_on_sm90_search_tensor_core_multiples() {
        let space = auto_space(Some(16), &reads(&["BM", "BN", "BK"]), &KernelSchedule::default(), Target::Sm90);
        assert_eq!(
            keys(&space),
            vec![
                ("BM".into(), vec![64, 128]),
                ("BN".into(), vec![64, 128]),
                ("BK".into(), vec![32, 64]),
                ("warps".into(), vec![4, 8]),
                ("stages".into(), vec![2, 3, 4]),
            ]
        );
    }

    #[test]
    fn eight_bit_dots_double_bk_and_sm80_has_fewer_stages() {
        let space = auto_space(Some(32), &reads(&["BK"]), &KernelSchedule::default(), Target::Sm80);
        assert_eq!(
            keys(&space),
            vec![("BK".into(), vec![64, 128]), ("warps".into(), vec![4, 8]), ("stages".into(), vec![2, 3])]
        );
    }

    #[test]
    fn cpu_searches_only_what_the_body_reads_and_fixed_keys_stay() {
        let mut schedule = KernelSchedule::default();
        schedule.fixed.set("BN", KeyValue::Int(32));
        let space = auto_space(None, &reads(&["BM", "BN", "BK", "vector"]), &schedule, Target::Cpu);
        assert_eq!(
            keys(&space),
            vec![("BM".into(), vec![64, 128]), ("BK".into(), vec![16, 32]), ("vector".into(), vec![4, 8])]
        );
    }
}
