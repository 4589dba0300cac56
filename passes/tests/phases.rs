//! The staging protocol check (`analysis::phases`, E0501 for the compiler's pipeline):
//! every kernel of the examples, the corpus and the WGMMA fixtures, under each of its
//! configurations and staged every way sm_80 and sm_90 allow (`cp.async`, TMA, a producer
//! warpgroup, ping-pong, clusters), has a clean pipeline; and the pipeliner's mistakes,
//! planted into Tile IR, are each reported.

use std::collections::{BTreeMap, BTreeSet};

use tessera_frontend::check::{fn_decorators, KeyValue, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::analysis::phases::check_pipeline;
use tessera_passes::ir::{Attr, Func, OpKind, Type};
use tessera_passes::{default_config, tile_ir, Config, Target};

mod common;
use common::repo;

const FILES: &[&str] = &[
    "tests/fixtures/wgmma/gemms.tsr",
    "tests/fixtures/wgmma/operands.tsr",
    "tests/fixtures/wgmma/fp8.tsr",
    "tests/fixtures/wgmma/int8.tsr",
    "examples/flash_attention.tsr",
    "examples/gemm.tsr",
    "examples/linear_gelu.tsr",
    "examples/fp8_gemm.tsr",
    "examples/layernorm.tsr",
    "examples/softmax.tsr",
    "tests/corpus/valid/flash_attention.tsr",
    "tests/corpus/valid/gemm.tsr",
    "tests/corpus/valid/schedules.tsr",
    "tests/corpus/valid/search_spaces.tsr",
    "tests/corpus/valid/derived_kernels.tsr",
    "tests/corpus/valid/fp8_gemm.tsr",
    "tests/corpus/valid/kv_cache_decode.tsr",
];

/// The staged variants of `config`: as written, with WGMMA, with TMA, with a producer,
/// with ping-pong, in a cluster.
fn variants(config: &Config) -> Vec<Config> {
    let set = |c: &Config, k: &str, v: KeyValue| {
        let mut c = c.clone();
        c.schedule.set(k, v);
        c
    };
    let wgmma = set(config, "mma", KeyValue::Str("wgmma".into()));
    let tma = set(&wgmma, "copy", KeyValue::Str("tma".into()));
    let producer = set(&tma, "producer", KeyValue::Str("warpgroup".into()));
    let pingpong = set(
        &set(&set(&producer, "producer", KeyValue::Str("pingpong".into())), "warps", KeyValue::Int(8)),
        "BM",
        KeyValue::Int(128),
    );
    let cluster = set(&producer, "cluster_x", KeyValue::Int(2));
    let cluster_y = set(&producer, "cluster_y", KeyValue::Int(2));
    vec![config.clone(), wgmma, tma, producer, pingpong, cluster, cluster_y]
}

/// Every kernel's Tile IR under each variant that lowers, for `target`.
fn staged_kernels(target: Target) -> Vec<(String, Func)> {
    let mut out = Vec::new();
    for f in FILES {
        common::for_each_kernel(f, |db, key| {
            let Ok((default, _)) = default_config(db, key, &BTreeMap::new()) else { return };
            let space: Vec<ScheduleValue> =
                fn_decorators(db, key).schedule.as_ref().map(|s| s.configurations()).unwrap_or_default();
            let mut configs = vec![default.clone()];
            configs.extend(space.into_iter().map(|schedule| Config { schedule, shapes: default.shapes.clone() }));
            let mut seen = BTreeSet::new();
            for config in configs.iter().flat_map(variants) {
                if !seen.insert(config.to_string()) {
                    continue;
                }
                if let Ok(tile) = tile_ir(db, key, config.clone(), target).as_ref() {
                    out.push((format!("{f} `{}` [{config}]", key.name(db)), (**tile).clone()));
                }
            }
        });
    }
    out
}

fn staged(f: &Func) -> bool {
    f.walk().into_iter().any(|id| f.op(id).kind == OpKind::CpAsync)
}

#[test]
fn every_staged_pipeline_keeps_its_protocol() {
    for target in [Target::Sm80, Target::Sm90] {
        let kernels = staged_kernels(target);
        let pipelined: Vec<&(String, Func)> = kernels.iter().filter(|(_, f)| staged(f)).collect();
        let mut failures = Vec::new();
        for (what, f) in &pipelined {
            for race in check_pipeline(f) {
                failures.push(format!("{what}: {}", race.message));
            }
        }
        assert!(failures.is_empty(), "{target}: {} races:\n{}", failures.len(), failures.join("\n"));
        let tma = pipelined.iter().filter(|(_, f)| tessera_passes::tma::mbarrier_ring(f).is_some()).count();
        eprintln!("{target}: {} staged kernels checked ({tma} with mbarrier rings)", pipelined.len());
        assert!(pipelined.len() >= 40, "{target}: only {} staged kernels", pipelined.len());
        if target == Target::Sm90 {
            assert!(tma >= 40, "only {tma} kernels with TMA");
        }
    }
}

/// One of the fixture's pipelined GEMMs, as Tile IR for sm_90, with `extra` schedule keys.
fn gemm(extra: &[(&str, KeyValue)]) -> Func {
    let f = "tests/fixtures/wgmma/gemms.tsr";
    let db = Database::default();
    let file = SourceFile::new(&db, f.into(), std::fs::read_to_string(repo().join(f)).unwrap(), None);
    let key = item_index(&db, file).functions.iter().find(|e| e.key.name(&db) == "wide_n_relu").unwrap().key;
    let (mut config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
    for (k, v) in extra {
        config.schedule.set(k, v.clone());
    }
    let tile = (**tile_ir(&db, key, config, Target::Sm90).as_ref().unwrap()).clone();
    assert!(check_pipeline(&tile).is_empty(), "{:?}", check_pipeline(&tile));
    tile
}

/// The K loop's ops.
fn k_loop_ops(f: &Func) -> Vec<tessera_passes::ir::OpId> {
    let k = f.walk().into_iter().find(|&id| f.op(id).kind == OpKind::For).unwrap();
    f.op(k).regions[0].ops.clone()
}

#[test]
fn a_wait_for_too_few_groups_a_missing_barrier_or_a_short_mbarrier_ring_is_reported() {
    for copy in ["cp.async", "tma"] {
        let tile = gemm(&[("copy", KeyValue::Str(copy.into()))]);
        // The loop's wait leaves one group more in flight: the dot reads a slot whose copy
        // may not have landed.
        let mut late = tile.clone();
        let wait = k_loop_ops(&late).into_iter().find(|&id| late.op(id).kind == OpKind::AsyncWait).unwrap();
        let pending = late.op(wait).int_attr("pending").unwrap();
        late.op_mut(wait).set_attr("pending", Attr::Int(pending + 1));
        let races = check_pipeline(&late);
        assert!(races.iter().any(|r| r.message.contains("before the copy into it")), "{copy}: {races:?}");
        // No CTA barrier in the loop: the next copy overwrites a slot another thread may
        // still read (and, for cp.async, a thread reads chunks another thread copied).
        let mut unsynced = tile.clone();
        let body = k_loop_ops(&unsynced);
        let k = unsynced.walk().into_iter().find(|&id| unsynced.op(id).kind == OpKind::For).unwrap();
        unsynced.op_mut(k).regions[0].ops =
            body.into_iter().filter(|&id| tile.op(id).kind != OpKind::Barrier).collect();
        let races = check_pipeline(&unsynced);
        assert!(
            races.iter().any(|r| r.message.contains("while other threads may still be reading")),
            "{copy}: {races:?}"
        );
    }
    // A ring of one mbarrier for three stages: the prologue's second group reuses it
    // before anyone waited for the first.
    let mut short = gemm(&[("copy", KeyValue::Str("tma".into()))]);
    let (ring, _) = tessera_passes::tma::mbarrier_ring(&short).unwrap();
    if let Type::Smem(s) = &mut short.values[ring.0 as usize].ty {
        s.dims = vec![tessera_frontend::check::Dim::constant(1)];
    }
    let races = check_pipeline(&short);
    assert!(races.iter().any(|r| r.message.contains("reuses mbarrier 0")), "{races:?}");
}
