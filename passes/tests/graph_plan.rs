//! Graph plans of the operations `docs/language.md` ("How operations become kernels")
//! describes: the kernel each maps to, the batch indices a broadcasting batched matmul
//! computes, and that every generated module checks clean on every target. Running the
//! plans against the f64 reference and NumPy is `tests/graph_level.rs`.

use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{file_diagnostics, plan_module, Target};

const SOURCE: &str = r#"from tessera import *


@jit
def mm_f32(a: Tensor["M", "K", f32], b: Tensor["K", "N", f32]):
    return a @ b


@jit
def mm_f16(a: Tensor["B", "M", "K", f16], b: Tensor["K", "N", f16]):
    return a @ b


@jit
def same_batch(a: Tensor["B", "M", "K", bf16], b: Tensor["B", "K", "N", bf16]):
    return a @ b


@jit
def outer_batch(a: Tensor["B", 1, "M", "K", bf16], b: Tensor["H", "K", "N", bf16]):
    return a @ b


@jit
def inner_batch(a: Tensor[2, "H", "M", "K", f32], b: Tensor["H", "K", "N", f32], s: Tensor["H", "M", 1, f32]):
    return a @ b * s


@jit
def no_left_batch(a: Tensor["M", "K", f32], b: Tensor["B", "K", "N", f32]):
    return relu(a @ b)


@jit
def reductions(x: Tensor["A", "B", "C", "D", f16]):
    return sum(x, axis=0), mean(x, axis=(1, 2)), max(x, axis=(0, 2)), min(x, axis=-1, keepdim=True)


@jit
def softmaxes(x: Tensor["A", "B", "C", f32]):
    return softmax_safe(x, axis=0), softmax_safe(x, axis=-1), logsumexp_safe(x, axis=1), logsumexp_safe(x)


@jit
def mm_f64(a: Tensor["M", "K", f64], b: Tensor["K", "N", f64]):
    return a @ b


@jit
def chooses(a: Tensor["M", "N", f32], c: Tensor["M", "N", f32]):
    return where(a > c, a * 2.0, c)


@jit
def two_exps(a: Tensor["M", "N", f32], c: Tensor["M", "N", f32]):
    return exp(a) + exp(c) * tanh(a)
"#;

struct Planned {
    summaries: Vec<String>,
    source: String,
}

fn plan(db: &Database, file: SourceFile, name: &str) -> Result<Planned, String> {
    let key = item_index(db, file).functions.iter().find(|f| f.key.name(db) == name).unwrap().key;
    let (plan, module) = plan_module(db, key).map_err(|e| e.message.clone())?;
    for target in [Target::Sm80, Target::Sm90, Target::Cpu] {
        let diags = file_diagnostics(db, module, target);
        assert!(diags.is_empty(), "{name} on {target:?}: {diags:#?}\n{}", plan.source);
    }
    Ok(Planned { summaries: plan.kernels.iter().map(|k| k.summary.clone()).collect(), source: plan.source.clone() })
}

fn setup() -> (Database, SourceFile) {
    let db = Database::default();
    let file = SourceFile::new(&db, "graph_plan.tsr".into(), SOURCE.to_string(), None);
    (db, file)
}

#[test]
fn matmuls_of_every_float_dtype_use_the_stdlib_kernel_instantiated_for_it() {
    let (db, file) = setup();
    let p = plan(&db, file, "mm_f32").unwrap();
    assert_eq!(p.summaries, ["stdlib matmul (f32)"]);
    assert!(p.source.contains("A: Tensor[\"M\", \"K\", f32], B: Tensor[\"K\", \"N\", f32]"), "{}", p.source);
    assert!(p.source.contains("tile.alloc_shared((ctx.BM, ctx.BK), f32"), "{}", p.source);
    // f32 operands keep k blocks of 32: 128 x 128 blocks in 3 stages fit in shared memory.
    assert!(p.source.contains("BK=[32]"), "{}", p.source);
    // A left operand's batch dims fold into the rows of one GEMM.
    let p = plan(&db, file, "mm_f16").unwrap();
    assert_eq!(p.summaries, ["stdlib matmul (f16)"]);
    assert!(p.source.contains("O0[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(acc, f16)"), "{}", p.source);
}

#[test]
fn batched_matmuls_index_each_operand_by_numpy_broadcasting() {
    let (db, file) = setup();
    // Equal batches: the stdlib's own `c % BA` / `c % BB`.
    let p = plan(&db, file, "same_batch").unwrap();
    assert_eq!(p.summaries, ["stdlib batched_matmul (bf16)"]);
    assert!(p.source.contains("ia = c % BA") && p.source.contains("ib = c % BB"), "{}", p.source);
    // [B, 1] x [H] -> [B, H]: a's matrix is c // H, b's is c % H.
    let p = plan(&db, file, "outer_batch").unwrap();
    assert!(p.source.contains("ia = (c // ia_0)") && p.source.contains("ib = (c % ib_0)"), "{}", p.source);
    // [2, H] x [H] -> [2, H]: a is indexed along, b's matrix is c % H; the row scale
    // [H, M, 1] is loaded in the epilogue, per matrix at its own batch index.
    let p = plan(&db, file, "inner_batch").unwrap();
    assert!(p.source.contains("ia = c % BA") && p.source.contains("ib = (c % ib_0)"), "{}", p.source);
    assert_eq!(p.summaries, ["stdlib batched_matmul (f32) + epilogue: broadcast, mul"]);
    assert!(p.source.contains("tile.load(I0[(c % I0b_0), m0:m0 + ctx.BM])[:, None]"), "{}", p.source);
    // No left batch: a single matrix (c % 1), and the epilogue is fused per matrix.
    let p = plan(&db, file, "no_left_batch").unwrap();
    assert_eq!(p.summaries, ["stdlib batched_matmul (f32) + epilogue: relu"]);
    assert!(p.source.contains("O0[c, m0:m0 + ctx.BM, n0:n0 + ctx.BN]"), "{}", p.source);
}

#[test]
fn reductions_over_any_axes_are_one_kernel_each() {
    let (db, file) = setup();
    let p = plan(&db, file, "reductions").unwrap();
    assert_eq!(
        p.summaries,
        ["sum over axes [0]", "mean over axes [1, 2]", "max over axes [0, 2]", "min over axes [3]"]
    );
    // axis=0 of [A, B, C, D]: [A, B*C*D] reduced along the columns.
    assert!(p.source.contains("X: Tensor[\"D0\", \"D1\", f16], Y: Tensor[\"D1\", f16]"), "{}", p.source);
    assert!(p.source.contains("acc + tile.sum(x, axis=0)"), "{}", p.source);
    // axes (0, 2): D0 and D2 reduced, D1 a grid axis, D3 the tile's kept dim.
    assert!(p.source.contains("for i1 in tile.parallel(0, D1):"), "{}", p.source);
    assert!(p.source.contains("for i0 in tile.range(0, D0):"), "{}", p.source);
    // The mean divides by the count of reduced elements.
    assert!(p.source.contains("acc / (D1)"), "{}", p.source);
    let p = plan(&db, file, "softmaxes").unwrap();
    assert_eq!(
        p.summaries,
        [
            "stdlib stable_softmax_columns (f32, axis 0)",
            "stdlib stable_softmax (f32)",
            "stdlib stable_logsumexp_columns (f32, axis 1)",
            "stdlib stable_logsumexp (f32, axis 2)"
        ]
    );
}

/// Elementwise ops of one shape whose operands are all in memory join the plan's last
/// elementwise group, and a value an earlier group produced is stored by it for a later
/// one: each of these is one kernel (`where` was three, the sum of exps two).
#[test]
fn independent_elementwise_chains_fuse_into_one_kernel() {
    let (db, file) = setup();
    let p = plan(&db, file, "chooses").unwrap();
    assert_eq!(p.summaries, ["fused elementwise: cmp, mul, select"], "{}", p.source);
    let p = plan(&db, file, "two_exps").unwrap();
    assert_eq!(p.summaries.len(), 1, "{:?}\n{}", p.summaries, p.source);
}

#[test]
fn an_unplanned_dtype_is_an_error_at_the_matmul() {
    let (db, file) = setup();
    let message = plan(&db, file, "mm_f64").err().expect("f64 operands are refused");
    assert!(message.contains("a matmul of f64 x f64 tensors"), "{message}");
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "mm_f64").unwrap().key;
    let err = plan_module(&db, key).unwrap_err();
    // The range is the matmul's (relative to the item's anchor, its `def`), not the whole
    // function's.
    let item = &SOURCE[SOURCE.find("def mm_f64").unwrap()..];
    let at = item.find("a @ b").unwrap();
    assert_eq!((err.range.start as usize, err.range.end as usize), (at, at + "a @ b".len()), "{err:?}");
}
