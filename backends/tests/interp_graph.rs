//! The Graph IR interpreter (`interp::graph`): the graph functions of the examples built
//! by the real compiler and checked against references written here (plain f32/f64
//! Rust, finite differences, the closed-form gradient, a straightforward transformer
//! block with the documented dropout hash), single ops on hand-built Graph IR, and the
//! launch plans (generated kernels run by the Tile IR interpreter) against the graph.

use std::path::PathBuf;
use std::sync::Arc;

use tessera_backends::interp::compare::{compare, compare_with, Tolerance};
use tessera_backends::interp::graph::{
    run_graph, run_graph_f64, run_graph_f64_with_dims, run_graph_traced, run_plan, run_plan_with_dims, InterpExecutor,
};
use tessera_backends::interp::inputs::Rng;
use tessera_backends::tensor::{round_to, Arg, HostTensor};
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::ir::rand::uniform;
use tessera_passes::ir::{Attr, Builder, Func, FuncKind, Level, Loc, OpKind, TensorType, Type, ValueId};
use tessera_passes::Target;

const SEED: u64 = 20240611;

// ----- loading graph functions -----------------------------------------------------------

fn example(file: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

fn key<'db>(db: &'db Database, file: SourceFile, name: &str) -> FnKey<'db> {
    item_index(db, file)
        .functions
        .iter()
        .find(|f| f.key.name(db) == name)
        .unwrap_or_else(|| panic!("no function `{name}`"))
        .key
}

fn graph_ir(db: &Database, file: SourceFile, name: &str) -> Arc<Func> {
    tessera_passes::graph_ir(db, key(db, file, name)).clone().unwrap_or_else(|e| panic!("`{name}`: {}", e.message))
}

/// The Graph IR of `name` in `file` of the examples with `extra` source appended.
fn load(file: &str, extra: &str) -> (Database, SourceFile) {
    let (path, text) = example(file);
    let db = Database::default();
    let source = SourceFile::new(&db, path, format!("{text}{extra}"), None);
    (db, source)
}

// ----- inputs and plain references ---------------------------------------------------------

/// Seeded normal values times `scale`, rounded to `dtype`.
fn seeded(dtype: DType, dims: &[usize], stream: u64, scale: f64) -> HostTensor {
    let mut rng = Rng::stream(SEED, stream);
    let n: usize = dims.iter().product();
    let values: Vec<f64> = (0..n).map(|_| rng.normal() * scale).collect();
    HostTensor::from_f64(dtype, dims, &values)
}

fn values(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        other => panic!("not a tensor: {other:?}"),
    }
}

fn tensor(a: &Arg) -> &HostTensor {
    match a {
        Arg::Tensor(t) => t,
        other => panic!("not a tensor: {other:?}"),
    }
}

fn bf16(x: f64) -> f64 {
    round_to(DType::BF16, x)
}

/// `[m, k] x [k, n]` exactly (f64 sums of exact products).
fn matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + kk] * b[kk * n + j];
            }
        }
    }
    c
}

/// `[m, k] x [k, n]` as docs/ir.md specifies it for f32 accumulation: exact products,
/// f32 sums over `k` in order.
fn matmul_f32(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for kk in 0..k {
            for j in 0..n {
                c[i * n + j] = (a[i * k + kk] as f32).mul_add(b[kk * n + j] as f32, c[i * n + j]);
            }
        }
    }
    c.into_iter().map(f64::from).collect()
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols * rows).map(|i| a[(i % rows) * cols + i / rows]).collect()
}

fn rms(v: &[f64]) -> f64 {
    (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt()
}

/// The documented dropout mask: element `coords` of stream `stream` is kept when
/// `uniform(seed * 1000003 + stream + 1, coords) >= p`.
fn kept(seed: i64, stream: i64, coords: &[i64], p: f32) -> bool {
    uniform(seed * 1_000_003 + stream + 1, coords) >= p
}

// ----- (a) mse_loss --------------------------------------------------------------------------

const B: usize = 8;
const D: usize = 32;
const N: usize = 16;

fn train_inputs() -> Vec<Arg> {
    vec![
        Arg::Tensor(seeded(DType::BF16, &[B, D], 0, 1.0)),
        Arg::Tensor(seeded(DType::F32, &[B, N], 1, 1.0)),
        Arg::Tensor(seeded(DType::BF16, &[D, N], 2, 1.0)),
    ]
}

/// `mean((cast(x @ W, f32) - target) ** 2)` with the IR's numerics: the matmul in f32
/// rounded to bf16, the rest in f32.
fn mse_loss_f32(x: &[f64], target: &[f64], w: &[f64]) -> f64 {
    let pred = matmul_f32(x, w, B, D, N);
    let mut sum = 0f32;
    for (p, t) in pred.iter().zip(target) {
        let d = bf16(*p) as f32 - *t as f32;
        sum += d * d;
    }
    (sum / (B * N) as f32) as f64
}

/// The same loss computed exactly in f64 (no rounding of the prediction).
fn mse_loss_f64(x: &[f64], target: &[f64], w: &[f64]) -> f64 {
    let pred = matmul_f64(x, w, B, D, N);
    pred.iter().zip(target).map(|(p, t)| (p - t) * (p - t)).sum::<f64>() / (B * N) as f64
}

#[test]
fn mse_loss_matches_a_plain_computation() {
    let (db, file) = load("train_step.tsr", "");
    let f = graph_ir(&db, file, "mse_loss");
    let args = train_inputs();
    let out = run_graph(&f, &args, 0).unwrap();
    assert_eq!(out.len(), 1);
    let loss = tensor(&out[0]);
    assert_eq!((loss.dtype, loss.dims.as_slice()), (DType::F32, &[][..]));
    let (x, t, w) = (values(&args[0]), values(&args[1]), values(&args[2]));
    let want = mse_loss_f32(&x, &t, &w);
    let c = compare_with(&[want], &loss.to_f64(), &Tolerance::for_dtype(DType::F32).with_reduction(B * N));
    assert!(c.passed, "loss vs the f32 reference: {c}");
    // Against the exact loss: only the bf16 rounding of the prediction differs.
    let exact = mse_loss_f64(&x, &t, &w);
    assert!((loss.get(0) - exact).abs() <= 2f64.powi(-8) * exact, "loss {} vs exact {exact}", loss.get(0));
}

// ----- (b) the gradient of mse_loss and sgd_step ---------------------------------------------

const GRAD_W: &str = r#"

@jit
def grad_w(x: Tensor["B", "D", bf16 @accum(f32)],
           target: Tensor["B", "N", f32],
           W: Tensor["D", "N", bf16 @accum(f32)]) -> Tensor["D", "N", bf16]:
    (dW,) = grad(mse_loss, wrt=("W",))(x, target, W)
    return dW
"#;

/// dW = 2/(B·N) · xᵀ (x·W − target), exactly.
fn grad_exact(x: &[f64], t: &[f64], w: &[f64]) -> Vec<f64> {
    let pred = matmul_f64(x, w, B, D, N);
    let r: Vec<f64> = pred.iter().zip(t).map(|(p, t)| 2.0 / (B * N) as f64 * (p - t)).collect();
    matmul_f64(&transpose(x, B, D), &r, D, B, N)
}

/// The backward graph's numerics: the bf16 prediction, `1/(B·N) · (2·diff)` in f32
/// rounded to bf16, then `xᵀ @ g` accumulated in f32 and rounded to bf16.
fn grad_ir_numerics(x: &[f64], t: &[f64], w: &[f64]) -> Vec<f64> {
    let pred = matmul_f32(x, w, B, D, N);
    let inv = 1.0f32 / (B * N) as f32;
    let g: Vec<f64> =
        pred.iter().zip(t).map(|(p, t)| bf16((inv * ((bf16(*p) as f32 - *t as f32) * 2.0)) as f64)).collect();
    matmul_f32(&transpose(x, B, D), &g, D, B, N).into_iter().map(bf16).collect()
}

#[test]
fn the_gradient_matches_finite_differences_and_the_closed_form() {
    let (db, file) = load("train_step.tsr", GRAD_W);
    let f = graph_ir(&db, file, "grad_w");
    assert!(f.walk().iter().any(|&id| f.op(id).kind == OpKind::GTranspose), "the backward graph is expanded");
    let args = train_inputs();
    let (x, t, w) = (values(&args[0]), values(&args[1]), values(&args[2]));
    let out = run_graph(&f, &args, 0).unwrap();
    let dw = tensor(&out[0]);
    assert_eq!((dw.dtype, dw.dims.as_slice()), (DType::BF16, &[D, N][..]));
    let dw = dw.to_f64();

    // The closed form with the IR's roundings: bf16 tolerance (a sum of B f32 terms).
    let faithful = grad_ir_numerics(&x, &t, &w);
    let c = compare_with(&faithful, &dw, &Tolerance::for_dtype(DType::BF16).with_reduction(B));
    assert!(c.passed, "dW vs the closed form with the IR's roundings: {c}");

    // The exact closed form: the bf16 prediction and gradient cost ~2^-8 of the scale.
    let exact = grad_exact(&x, &t, &w);
    let loose = Tolerance { rtol: 2f64.powi(-6), atol: 2f64.powi(-6), scale: None, allow_nonfinite: false };
    let c = compare_with(&exact, &dw, &loose);
    assert!(c.passed, "dW vs the exact closed form: {c}");

    // Central differences of the loss in f64 (exact for a quadratic up to rounding).
    let scale = rms(&exact);
    let h = 1e-3;
    for (i, j) in [(0, 0), (3, 7), (17, 2), (31, 15), (12, 9), (25, 11)] {
        let mut plus = w.clone();
        let mut minus = w.clone();
        plus[i * N + j] += h;
        minus[i * N + j] -= h;
        let fd = (mse_loss_f64(&x, &t, &plus) - mse_loss_f64(&x, &t, &minus)) / (2.0 * h);
        let got = dw[i * N + j];
        assert!(
            (got - fd).abs() <= 2f64.powi(-6) * (fd.abs() + scale),
            "dW[{i}, {j}] = {got}, finite difference {fd} (gradient scale {scale})"
        );
    }
}

#[test]
fn sgd_step_applies_the_gradient() {
    let (db, file) = load("train_step.tsr", GRAD_W);
    let step = graph_ir(&db, file, "sgd_step");
    let grad = graph_ir(&db, file, "grad_w");
    let loss = graph_ir(&db, file, "mse_loss");
    let mut args = train_inputs();
    let lr = 0.1;
    let dw = values(&run_graph(&grad, &args, 0).unwrap()[0]);
    args.push(Arg::Scalar(DType::F32, lr));
    let out = run_graph(&step, &args, 0).unwrap();
    let new_w = tensor(&out[0]);
    assert_eq!((new_w.dtype, new_w.dims.as_slice()), (DType::BF16, &[D, N][..]));
    let w = values(&args[2]);
    // W - dW * lr with lr cast to bf16 and every op rounded to bf16: the same ops as the
    // gradient graph, so bit for bit.
    let lr_b = bf16(lr as f32 as f64);
    let want: Vec<f64> = w.iter().zip(&dw).map(|(w, g)| bf16((*w as f32 - bf16(g * lr_b) as f32) as f64)).collect();
    assert_eq!(new_w.to_f64(), want);
    // Against the exact update.
    let exact = grad_exact(&values(&args[0]), &values(&args[1]), &w);
    let exact_w: Vec<f64> = w.iter().zip(&exact).map(|(w, g)| w - lr * g).collect();
    let c = compare(&exact_w, &new_w.to_f64(), DType::BF16);
    assert!(c.passed, "W - lr dW vs exact: {c}");
    // A step down the gradient lowers the loss.
    let before = tensor(&run_graph(&loss, &args[..3], 0).unwrap()[0]).get(0);
    let after_args = vec![args[0].clone(), args[1].clone(), out[0].clone()];
    let after = tensor(&run_graph(&loss, &after_args, 0).unwrap()[0]).get(0);
    assert!(after < before, "loss {before} -> {after}");
}

// ----- (c) the transformer block ---------------------------------------------------------------

struct Block {
    b: usize,
    s: usize,
    d: usize,
    h: usize,
    f: usize,
}

const BLOCK: Block = Block { b: 2, s: 16, d: 32, h: 2, f: 64 };

fn block_inputs(blk: &Block, p: f64) -> Vec<Arg> {
    let &Block { b, s, d, f, h } = blk;
    let w = |dims: &[usize], stream: u64| Arg::Tensor(seeded(DType::BF16, dims, stream, 1.0 / (dims[0] as f64).sqrt()));
    vec![
        Arg::Tensor(seeded(DType::BF16, &[b, s, d], 10, 1.0)),
        w(&[d, 3 * d], 11),
        w(&[d, d], 12),
        w(&[d, f], 13),
        w(&[f, d], 14),
        Arg::Index(h as i64),
        Arg::Scalar(DType::F32, p),
    ]
}

/// How the reference block may deviate from the graph, for the negative tests.
#[derive(Clone, Copy, Default)]
struct Deviation {
    non_causal: bool,
    /// Dropout streams shifted by one.
    shift_streams: bool,
}

fn rmsnorm_rows(x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let r = 1.0 / (ms + 1e-6).sqrt();
            row.iter().map(move |v| bf16(v * r)).collect::<Vec<_>>()
        })
        .collect()
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}

/// `dropout(x)` of a `[rows, cols]` view: kept values divided by `1 - p` (in f32).
fn dropout_ref(x: &[f64], cols: usize, seed: i64, stream: i64, p: f32) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(e, &v)| {
            if kept(seed, stream, &[(e / cols) as i64, (e % cols) as i64], p) {
                bf16((v as f32 / (1.0 - p)) as f64)
            } else {
                0.0
            }
        })
        .collect()
}

/// The block written out directly: f64 arithmetic, rounded to bf16 wherever the graph
/// holds a bf16 tensor.
fn block_reference(blk: &Block, args: &[Arg], p: f32, seed: i64, dev: Deviation) -> Vec<f64> {
    let &Block { b, s, d, h, f } = blk;
    let dh = d / h;
    let (x, w_qkv, w_out, w_up, w_down) =
        (values(&args[0]), values(&args[1]), values(&args[2]), values(&args[3]), values(&args[4]));
    let stream = |k: i64| if dev.shift_streams { k + 1 } else { k };
    let rows = b * s;
    let hn = rmsnorm_rows(&x, d);
    let qkv: Vec<f64> = matmul_f64(&hn, &w_qkv, rows, d, 3 * d).into_iter().map(bf16).collect();
    // q, k, v [b, h, s, dh] from qkv [b, s, 3 d]: part i, head hh at column i d + hh dh.
    let part = |i: usize, bb: usize, hh: usize, ss: usize, dd: usize| qkv[(bb * s + ss) * 3 * d + i * d + hh * dh + dd];
    let mut merged = vec![0.0; rows * d];
    let scale = 1.0 / (dh as f64).sqrt();
    for bb in 0..b {
        for hh in 0..h {
            for qi in 0..s {
                let scores: Vec<f64> = (0..s)
                    .map(|kj| {
                        if !dev.non_causal && kj > qi {
                            f64::NEG_INFINITY
                        } else {
                            (0..dh).map(|dd| part(0, bb, hh, qi, dd) * part(1, bb, hh, kj, dd)).sum::<f64>() * scale
                        }
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|v| (v - m).exp()).collect();
                let l: f64 = e.iter().sum();
                for dd in 0..dh {
                    let mut o = 0.0;
                    for (kj, ej) in e.iter().enumerate() {
                        let coords = [(bb * h + hh) as i64, qi as i64, kj as i64];
                        if kept(seed, stream(0), &coords, p) {
                            o += ej / (1.0 - p as f64) * part(2, bb, hh, kj, dd);
                        }
                    }
                    // merge_heads: [b, s, h dh].
                    merged[(bb * s + qi) * d + hh * dh + dd] = bf16(o / l);
                }
            }
        }
    }
    let o: Vec<f64> = matmul_f64(&merged, &w_out, rows, d, d).into_iter().map(bf16).collect();
    let o = dropout_ref(&o, d, seed, stream(1), p);
    let y: Vec<f64> = x.iter().zip(&o).map(|(a, b)| bf16(a + b)).collect();
    let h2 = rmsnorm_rows(&y, d);
    let up: Vec<f64> = matmul_f64(&h2, &w_up, rows, d, f).into_iter().map(|v| bf16(gelu(bf16(v)))).collect();
    let mlp: Vec<f64> = matmul_f64(&up, &w_down, rows, f, d).into_iter().map(bf16).collect();
    let mlp = dropout_ref(&mlp, d, seed, stream(2), p);
    y.iter().zip(&mlp).map(|(a, b)| bf16(a + b)).collect()
}

/// Two bf16 ulps: the reference computes in f64, the graph in f32, and a value that
/// rounds the other way at one bf16 rounding moves the values computed from it.
fn block_tolerance() -> Tolerance {
    Tolerance { rtol: 2f64.powi(-6), atol: 2f64.powi(-6), scale: None, allow_nonfinite: false }
}

fn run_block(p: f64, seed: i64) -> (Arc<Func>, Vec<Arg>, Vec<Arg>, tessera_backends::interp::graph::GraphTrace) {
    let (db, file) = load("transformer_block.tsr", "");
    let f = graph_ir(&db, file, "transformer_block");
    let args = block_inputs(&BLOCK, p);
    let (out, trace) = run_graph_traced(&f, &args, seed).unwrap();
    (f, args, out, trace)
}

#[test]
fn transformer_block_without_dropout_matches_the_reference() {
    let (_, args, out, _) = run_block(0.0, 7);
    let y = tensor(&out[0]);
    assert_eq!((y.dtype, y.dims.as_slice()), (DType::BF16, &[BLOCK.b, BLOCK.s, BLOCK.d][..]));
    let want = block_reference(&BLOCK, &args, 0.0, 7, Deviation::default());
    let c = compare_with(&want, &y.to_f64(), &block_tolerance());
    assert!(c.passed, "{c}");
    // Without dropout the seed does not matter.
    let (_, _, other, _) = run_block(0.0, 12345);
    assert_eq!(out, other);
}

#[test]
fn transformer_block_with_dropout_matches_the_reference_and_the_hash() {
    let p = 0.1f32;
    let seed = 7;
    let (f, args, out, trace) = run_block(p as f64, seed);
    let y = tensor(&out[0]).to_f64();
    let want = block_reference(&BLOCK, &args, p, seed, Deviation::default());
    let c = compare_with(&want, &y, &block_tolerance());
    assert!(c.passed, "{c}");

    // Each dropout op's mask is the documented hash of (row, col) of its stream.
    let mut checked = 0;
    let mut kept_total = 0;
    let mut total = 0;
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::Dropout {
            continue;
        }
        let stream = op.int_attr("stream").unwrap();
        let x = values(&trace.value(op.operands[0]).unwrap());
        let yv = values(&trace.value(op.results[0]).unwrap());
        let cols = BLOCK.d;
        for (e, (&xv, &yv)) in x.iter().zip(&yv).enumerate() {
            let keep = kept(seed, stream, &[(e / cols) as i64, (e % cols) as i64], p);
            let want = if keep { bf16((xv as f32 / (1.0 - p)) as f64) } else { 0.0 };
            assert_eq!(yv, want, "stream {stream}, element {e}: x = {xv}");
            kept_total += usize::from(keep);
            total += 1;
        }
        checked += 1;
    }
    assert_eq!(checked, 2, "the block has two dropout ops besides attention");
    let fraction = kept_total as f64 / total as f64;
    assert!((0.87..=0.93).contains(&fraction), "kept {fraction} of {total}");

    // Another seed draws other masks.
    let (_, _, other, _) = run_block(p as f64, seed + 1);
    assert_ne!(out, other);
}

// ----- (e) wrong results are detected --------------------------------------------------------

#[test]
fn a_wrong_block_fails_the_comparison() {
    let p = 0.1f32;
    let seed = 7;
    let (_, args, out, _) = run_block(p as f64, seed);
    let y = tensor(&out[0]).to_f64();
    for (what, dev) in [
        ("attention without the causal mask", Deviation { non_causal: true, ..Deviation::default() }),
        ("dropout streams shifted by one", Deviation { shift_streams: true, ..Deviation::default() }),
    ] {
        let wrong = block_reference(&BLOCK, &args, p, seed, dev);
        let c = compare_with(&wrong, &y, &block_tolerance());
        assert!(!c.passed, "{what} passed: {c}");
    }
    // One element with its sign flipped.
    let right = block_reference(&BLOCK, &args, p, seed, Deviation::default());
    let mut flipped = y.clone();
    let i = flipped.iter().position(|v| v.abs() > 0.5).unwrap();
    flipped[i] = -flipped[i];
    let c = compare_with(&right, &flipped, &block_tolerance());
    assert!(!c.passed && c.mismatches == 1, "{c}");
}

// ----- (d) single ops on hand-built Graph IR -------------------------------------------------

// A file of tests/ that is not a test crate of its own: the path names its folder.
#[path = "interp_graph/single_ops.rs"]
mod single_ops;
