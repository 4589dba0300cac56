//! IR queries are incremental: editing one kernel's schedule or autotune candidate
//! re-runs only that kernel's Schedule/Tile/Target queries (observed through salsa's
//! events), never Graph IR, inference, or another kernel's queries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use salsa::{Database as _, Setter};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::codegen::target_code;
use tessera_passes::{default_config, tile_ir, Config, Target};

const SOURCE: &str = r#"import tessera as ts
from tessera import tile, block, Tensor, bf16, f32

@ts.kernel.autotune(space=dict(BM=[64, 128], BN=[64, 128], warps=[4, 8]))
def gemm_a(A: Tensor["M", "K", bf16], B: Tensor["K", "N", bf16], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                acc = tile.mma(a, b, accumulator=acc)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@ts.kernel.schedule(block(64, 64).k(32).warps(4).stages(2))
def gemm_b(A: Tensor["M", "K", bf16], B: Tensor["K", "N", bf16], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                acc = tile.mma(a, b, accumulator=acc)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc
"#;

type Executed = Arc<Mutex<Vec<salsa::DatabaseKeyIndex>>>;

fn database() -> (Database, Executed) {
    let keys: Executed = Arc::default();
    let sink = keys.clone();
    let db = Database::with_event_callback(move |event| {
        if let salsa::EventKind::WillExecute { database_key } = event.kind {
            sink.lock().unwrap().push(database_key);
        }
    });
    (db, keys)
}

fn executed(db: &Database, keys: &Executed) -> Vec<String> {
    std::mem::take(&mut *keys.lock().unwrap())
        .into_iter()
        .map(|k| db.ingredient_debug_name(k.ingredient_index()).to_string())
        .collect()
}

fn count(names: &[String], query: &str) -> usize {
    names.iter().filter(|n| *n == query).count()
}

fn kernel<'db>(db: &'db Database, file: SourceFile, name: &str) -> FnKey<'db> {
    item_index(db, file).functions.iter().find(|f| f.key.name(db) == name).unwrap().key
}

/// Lowers both kernels to Tile IR and Target code for their default configurations
/// (the first candidate of `gemm_a`'s space; `gemm_b`'s fixed schedule).
fn lower_both(db: &Database, file: SourceFile, target: Target) -> Vec<Config> {
    let mut configs = Vec::new();
    for name in ["gemm_a", "gemm_b"] {
        let key = kernel(db, file, name);
        let (config, _) = default_config(db, key, &BTreeMap::new()).unwrap();
        tile_ir(db, key, config.clone(), target).as_ref().unwrap();
        let _ = target_code(db, key, config.clone(), target);
        configs.push(config);
    }
    configs
}

fn edit(db: &mut Database, file: SourceFile, from: &str, to: &str) {
    let text = file.text(db).clone();
    assert_eq!(text.matches(from).count(), 1, "`{from}` is unique");
    file.set_text(db).to(text.replace(from, to));
}

#[test]
fn changing_the_first_autotune_candidate_reruns_only_that_kernels_schedule_tile_and_target() {
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "two.tsr".into(), SOURCE.to_string(), None);
    for target in [Target::Sm90, Target::Cpu] {
        lower_both(&db, file, target);
    }
    let cold = executed(&db, &keys);
    assert_eq!(count(&cold, "graph_ir"), 2, "{cold:?}");
    assert_eq!(count(&cold, "tile_ir"), 4, "{cold:?}");

    edit(&mut db, file, "BM=[64, 128], BN", "BM=[128, 64], BN");
    for target in [Target::Sm90, Target::Cpu] {
        let configs = lower_both(&db, file, target);
        assert_eq!(configs[0].schedule.int("BM"), Some(128), "the edit changed gemm_a's default config");
    }
    let warm = executed(&db, &keys);
    for query in ["graph_ir", "infer_function"] {
        assert_eq!(count(&warm, query), 0, "{query} re-ran: {warm:?}");
    }
    // One kernel, two targets: its new configuration is lowered once per target.
    for query in ["sched_ir", "tile_ir", "target_code"] {
        assert_eq!(count(&warm, query), 2, "{query}: {warm:?}");
    }
}

#[test]
fn an_unused_candidate_or_a_body_edit_elsewhere_reruns_no_lowering() {
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "two.tsr".into(), SOURCE.to_string(), None);
    lower_both(&db, file, Target::Sm90);
    executed(&db, &keys);

    // A later candidate of gemm_a does not change its default configuration.
    edit(&mut db, file, "warps=[4, 8]", "warps=[4, 16]");
    lower_both(&db, file, Target::Sm90);
    let warm = executed(&db, &keys);
    for query in ["graph_ir", "sched_ir", "tile_ir", "target_code"] {
        assert_eq!(count(&warm, query), 0, "{query} re-ran: {warm:?}");
    }
}

#[test]
fn changing_a_fixed_schedule_value_reruns_only_that_kernels_schedule_tile_and_target() {
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "two.tsr".into(), SOURCE.to_string(), None);
    lower_both(&db, file, Target::Sm90);
    executed(&db, &keys);

    edit(&mut db, file, ".k(32)", ".k(64)");
    lower_both(&db, file, Target::Sm90);
    let warm = executed(&db, &keys);
    for query in ["graph_ir", "infer_function"] {
        assert_eq!(count(&warm, query), 0, "{query} re-ran: {warm:?}");
    }
    for query in ["sched_ir", "tile_ir", "target_code"] {
        assert_eq!(count(&warm, query), 1, "{query}: {warm:?}");
    }
}
