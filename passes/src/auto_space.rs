//! The default search space of `@kernel.auto` (docs/language.md, "Schedules and
//! autotuning"): derived from the target and the kernel's tensor-core dots, then pruned
//! like any `@kernel.autotune` space (W0702/E0703, `tessera autotune`).
//!
//! The derivation:
//! - a key is searched only when the kernel reads it through `ctx` (`BM`, `BN`, `BK`,
//!   `vector`), or, on a GPU, when the compiler consumes it (`warps`, `stages`, and on
//!   sm_90 `mma`, `copy`, `producer`); a key an explicit `@kernel.schedule` fixes is kept,
//!   not searched;
//! - `BM`, `BN` ∈ {64, 128}: multiples of the tensor-core instruction's M (16) and N (8)
//!   that a 4- or 8-warp block divides evenly;
//! - `BK` ∈ {2q, 4q} where q is the instruction's K for the dots' operand dtypes (16 for
//!   f16/bf16, 32 for 8-bit operands, the largest when dots mix them; m16n8k16 and
//!   m16n8k32 on sm_80 and sm_90); without a tensor-core dot, {16, 32};
//! - `warps` ∈ {4, 8}; `stages` ∈ {2, 3} on sm_80 and {2, 3, 4} on sm_90 (227 KB of shared
//!   memory per block against 163 KB); `vector` ∈ {4, 8};
//! - on sm_90, for the Hopper paths the kernel can take ([`HopperPaths`]): `mma` ∈
//!   {"mma.sync", "wgmma"}, `copy` ∈ {"cp.async", "tma"}, `producer` ∈ {"none",
//!   "warpgroup"}, and `BN` = 256 (CUTLASS 3's 128×256 tile). Only combinations that
//!   exist are candidates ([`SpaceRule`]s): TMA feeds `wgmma`, a producer warpgroup
//!   issues TMA, and a 256-wide tile is a `wgmma` tile over two consumer warpgroups;
//!   and single configurations the kernel's Hopper rules refuse are left out too
//!   (`KernelSchedule::excluded`), so W0702 speaks only of the budgets;
//! - on `cpu`, `warps` and `stages` are not searched (the base schedule's values are kept).

use std::collections::BTreeMap;

use tessera_frontend::check::schedule::{
    KernelSchedule, KeyValue, SpaceKey, CP_ASYNC, MMA_SYNC, NO_PRODUCER, PRODUCER_WARPGROUP, TMA, WGMMA,
};
use tessera_frontend::check::{fn_decorators, infer_function, ScheduleValue, SpaceRule};
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey};

use crate::config::SymbolSites;
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
        // The Hopper rules read Graph IR, through each candidate's configuration.
        let sites = match (target, mma, crate::graph_ir(db, key)) {
            (Target::Sm90, Some(_), Ok(graph)) => Some(SymbolSites::of(graph)),
            _ => None,
        };
        let hopper = sites.as_ref().map_or_else(HopperPaths::default, |s| hopper_paths(db, key, s, schedule, target));
        let (space, rules) = auto_space(mma, &inference.ctx_reads, schedule, target, hopper);
        schedule.space = space;
        schedule.rules = rules;
        if let (Some(sites), true) = (&sites, hopper.wgmma) {
            schedule.excluded = refused_by_hopper_rules(db, key, sites, schedule, target);
        }
    }
}

/// The configurations of a derived space that the Hopper rules refuse for this kernel
/// (a `wgmma` whose A comes from registers over warpgroups that split N, say): the
/// derivation added those keys, so such combinations are left out rather than pruned
/// with a warning (W0702 is for the budgets). Each check reads Graph IR only.
fn refused_by_hopper_rules(
    db: &dyn Db,
    key: FnKey<'_>,
    sites: &SymbolSites,
    schedule: &KernelSchedule,
    target: Target,
) -> Vec<ScheduleValue> {
    schedule.configurations().into_iter().filter(|s| refuses(db, key, sites, s, target)).collect()
}

/// Whether the Hopper rules (`analysis::hopper_reason`) refuse the kernel under `s`.
fn refuses(db: &dyn Db, key: FnKey<'_>, sites: &SymbolSites, s: &ScheduleValue, target: Target) -> bool {
    let config = sites.config(s.clone(), &BTreeMap::new()).0;
    crate::analysis::hopper_reason(db, key, &config, target).is_some()
}

/// The Hopper paths a kernel's dots can take, each on top of the one before: warpgroup
/// MMAs, fed by the TMA, from a producer warpgroup.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct HopperPaths {
    pub wgmma: bool,
    pub tma: bool,
    pub producer: bool,
}

/// Which Hopper paths the kernel takes under its base schedule (the fixed values over
/// the plain-kernel defaults): the rules of E0704, E0706 and E0707
/// (`analysis::hopper_reason`). These decide whether the keys exist; the single
/// configurations the same rules refuse at other tile sizes are then left out
/// (`refused_by_hopper_rules`).
fn hopper_paths(
    db: &dyn Db,
    key: FnKey<'_>,
    sites: &SymbolSites,
    schedule: &KernelSchedule,
    target: Target,
) -> HopperPaths {
    let mut s = schedule.first_configuration();
    let mut takes = |k: &str, v: &str| {
        if schedule.fixed.get(k).is_some_and(|fixed| *fixed != KeyValue::Str(v.into())) {
            return false;
        }
        s.set(k, KeyValue::Str(v.into()));
        !refuses(db, key, sites, &s, target)
    };
    let wgmma = takes("mma", WGMMA);
    let tma = wgmma && takes("copy", TMA);
    let producer = tma && takes("producer", PRODUCER_WARPGROUP);
    HopperPaths { wgmma, tma, producer }
}

/// The keys of the default space, in the order `dict(BM=, BN=, BK=, warps=, stages=,
/// vector=, mma=, copy=, producer=)` would list them, and the rules that drop the
/// combinations that do not exist. `mma_k` is the tensor-core instruction's K of the
/// kernel's dots, `reads` the canonical keys the body reads through `ctx`.
pub fn auto_space(
    mma_k: Option<u32>,
    reads: &[String],
    schedule: &KernelSchedule,
    target: Target,
    hopper: HopperPaths,
) -> (Vec<SpaceKey>, Vec<SpaceRule>) {
    let q = i64::from(mma_k.unwrap_or(8));
    let stages: &[i64] = if target == Target::Sm90 { &[2, 3, 4] } else { &[2, 3] };
    let gpu = target != Target::Cpu;
    let read = |k: &str| reads.iter().any(|r| r == k);
    let int = |vs: &[i64]| vs.iter().map(|&v| KeyValue::Int(v)).collect::<Vec<_>>();
    let str = |vs: &[&str]| vs.iter().map(|&v| KeyValue::Str(v.into())).collect::<Vec<_>>();
    let wide = hopper.wgmma && read("BN");
    let keys: [(&str, bool, Vec<KeyValue>); 9] = [
        ("BM", read("BM"), int(&[64, 128])),
        ("BN", read("BN"), int(if wide { &[64, 128, 256] } else { &[64, 128] })),
        ("BK", read("BK"), int(&[2 * q, 4 * q])),
        ("warps", gpu, int(&[4, 8])),
        ("stages", gpu, int(stages)),
        ("vector", read("vector"), int(&[4, 8])),
        ("mma", hopper.wgmma, str(&[MMA_SYNC, WGMMA])),
        ("copy", hopper.tma, str(&[CP_ASYNC, TMA])),
        ("producer", hopper.producer, str(&[NO_PRODUCER, PRODUCER_WARPGROUP])),
    ];
    let space: Vec<SpaceKey> = keys
        .into_iter()
        .filter(|(k, searched, _)| *searched && schedule.fixed.get(k).is_none())
        .map(|(k, _, values)| SpaceKey {
            key: k.to_string(),
            key_range: TextRange::default(),
            candidates: values.into_iter().map(|v| (v, TextRange::default())).collect(),
        })
        .collect();
    let searched = |k: &str| space.iter().any(|s| s.key == k);
    let rule = |key: &str, value: KeyValue, needs: &[(&str, KeyValue)]| SpaceRule {
        key: key.into(),
        value,
        needs: needs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
    };
    let wgmma = || ("mma", KeyValue::Str(WGMMA.into()));
    let mut rules = Vec::new();
    if searched("BN") && wide {
        // 128×256 over 4 warps is 256 f32 accumulators a thread: only two warpgroups hold it.
        rules.push(rule("BN", KeyValue::Int(256), &[wgmma(), ("warps", KeyValue::Int(8))]));
    }
    if searched("copy") {
        rules.push(rule("copy", KeyValue::Str(TMA.into()), &[wgmma()]));
    }
    if searched("producer") {
        rules.push(rule("producer", KeyValue::Str(PRODUCER_WARPGROUP.into()), &[("copy", KeyValue::Str(TMA.into()))]));
    }
    (space, rules)
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
        let (space, _) = auto_space(
            Some(16),
            &reads(&["BM", "BN", "BK"]),
            &KernelSchedule::default(),
            Target::Sm90,
            HopperPaths::default(),
        );
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
        let (space, _) =
            auto_space(Some(32), &reads(&["BK"]), &KernelSchedule::default(), Target::Sm80, HopperPaths::default());
        assert_eq!(
            keys(&space),
            vec![("BK".into(), vec![64, 128]), ("warps".into(), vec![4, 8]), ("stages".into(), vec![2, 3])]
        );
    }

    #[test]
    fn cpu_searches_only_what_the_body_reads_and_fixed_keys_stay() {
        let mut schedule = KernelSchedule::default();
        schedule.fixed.set("BN", KeyValue::Int(32));
        let (space, _) =
            auto_space(None, &reads(&["BM", "BN", "BK", "vector"]), &schedule, Target::Cpu, HopperPaths::default());
        assert_eq!(
            keys(&space),
            vec![("BM".into(), vec![64, 128]), ("BK".into(), vec![16, 32]), ("vector".into(), vec![4, 8])]
        );
    }

    #[test]
    fn hopper_paths_add_their_keys_and_only_the_combinations_that_exist() {
        let all = HopperPaths { wgmma: true, tma: true, producer: true };
        let (space, rules) =
            auto_space(Some(16), &reads(&["BM", "BN", "BK"]), &KernelSchedule::default(), Target::Sm90, all);
        let names: Vec<&str> = space.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(names, ["BM", "BN", "BK", "warps", "stages", "mma", "copy", "producer"]);
        assert_eq!(keys(&space)[1], ("BN".into(), vec![64, 128, 256]));
        let schedule = KernelSchedule { space, rules, auto: true, ..Default::default() };
        let configs = schedule.configurations();
        // (mma.sync, cp.async, none), (wgmma, cp.async, none), (wgmma, tma, none) and
        // (wgmma, tma, warpgroup) for BN 64 and 128 over BM, BK, warps and stages (48
        // each); BN = 256 only with wgmma and 8 warps: 3 paths over BM, BK, stages.
        assert_eq!(configs.len(), 4 * 48 + 3 * 12);
        let s = |c: &ScheduleValue, k: &str| c.get(k).map(|v| v.to_string()).unwrap_or_default();
        for c in &configs {
            if s(c, "copy") == "\"tma\"" {
                assert_eq!(s(c, "mma"), "\"wgmma\"", "{c}");
            }
            if s(c, "producer") == "\"warpgroup\"" {
                assert_eq!(s(c, "copy"), "\"tma\"", "{c}");
            }
            if c.int("BN") == Some(256) {
                assert_eq!((s(c, "mma").as_str(), c.warps()), ("\"wgmma\"", 8), "{c}");
            }
        }
        // A kernel that cannot take the TMA searches mma alone; on sm_80 nothing changes.
        let only_wgmma = HopperPaths { wgmma: true, ..Default::default() };
        let (space, rules) =
            auto_space(Some(16), &reads(&["BK"]), &KernelSchedule::default(), Target::Sm90, only_wgmma);
        assert_eq!(space.last().unwrap().key, "mma");
        assert!(rules.is_empty(), "{rules:?}");
    }
}
