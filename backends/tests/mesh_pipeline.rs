//! Pipeline parallelism: `dist.pipeline(block, stages=2, microbatches=4, axis="pp")`
//! (`tests/corpus/valid/pipeline_mlp.tsr`) runs a GPipe schedule on the simulated mesh,
//! each stage on the devices at its position of `pp` with its own slice of the stacked
//! weights, the activations moving between them through `dist.send`. The mesh run must
//! match the single-device run (the f64 reference of the same Graph IR) and both a
//! plain-loop oracle written here; the schedule Graph IR holds must be GPipe's. Under
//! `grad` (`tests/corpus/valid/pipeline_grad.tsr`), the weight gradients must match one
//! device and central differences of the oracle's loss, and the backward ticks must
//! mirror the forward ones.

mod mesh_common;

use mesh_common::*;
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_passes::dist::schedule::pipeline_schedules;
use tessera_passes::ir::{Func, OpKind};

const PROGRAM: &str = include_str!("../../tests/corpus/valid/pipeline_mlp.tsr");
const TRAINING: &str = include_str!("../../tests/corpus/valid/pipeline_grad.tsr");

const B: usize = 8;
const D: usize = 4;
const F: usize = 8;
const MICROBATCHES: usize = 4;

fn args(seed: u64) -> ([Vec<f64>; 3], [Arg; 3]) {
    let dims: [&[usize]; 3] = [&[B, D], &[2, D, F], &[2, F, D]];
    let mut state = seed;
    let values = dims.map(|d| {
        (0..d.iter().product::<usize>())
            .map(|_| {
                // A 24-bit LCG draw in [-1, 1): exact in f32.
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 40) as f64 / (1u64 << 23) as f64) - 1.0
            })
            .collect::<Vec<f64>>()
    });
    let args = [0, 1, 2].map(|i| Arg::Tensor(HostTensor::from_f64(DType::F32, dims[i], &values[i])));
    (values, args)
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}

/// `block` of the program on one row: `h + gelu(rmsnorm(h) @ W1) @ W2`.
fn block(h: &[f64], w1: &[f64], w2: &[f64]) -> Vec<f64> {
    let rms = (h.iter().map(|x| x * x).sum::<f64>() / D as f64 + 1e-6).sqrt();
    let hidden: Vec<f64> = (0..F).map(|f| gelu((0..D).map(|d| h[d] / rms * w1[d * F + f]).sum())).collect();
    (0..D).map(|d| h[d] + (0..F).map(|f| hidden[f] * w2[f * D + d]).sum::<f64>()).collect()
}

/// The two stages in `order` on every row (the stage is row-wise, so microbatching does
/// not change it).
fn oracle(v: &[Vec<f64>; 3], order: [usize; 2]) -> Vec<f64> {
    let (x, w1, w2) = (&v[0], &v[1], &v[2]);
    let mut out = Vec::new();
    for row in x.chunks(D) {
        let mut h = row.to_vec();
        for k in order {
            h = block(&h, &w1[k * D * F..(k + 1) * D * F], &w2[k * F * D..(k + 1) * F * D]);
        }
        out.extend(h);
    }
    out
}

fn max_rel(want: &[f64], got: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    want.iter().zip(got).map(|(a, b)| (a - b).abs() / scale).fold(0.0, f64::max)
}

/// GPipe's order in Graph IR: stage k runs microbatch t − k at tick t, ticks never go
/// back in program order, and a stage's microbatch arrives by a send before its ops.
fn assert_gpipe(func: &Func) {
    let schedules = pipeline_schedules(func);
    assert_eq!(schedules.len(), 1);
    let p = &schedules[0];
    assert_eq!((p.axis.as_str(), p.stages, p.microbatches, p.ticks), ("pp", 2, 4, 5));
    assert_eq!(
        p.cells,
        [vec![Some(0), Some(1), Some(2), Some(3), None], vec![None, Some(0), Some(1), Some(2), Some(3)]]
    );
    assert!((p.bubble() - 0.2).abs() < 1e-12);
    let mut last_tick = 0;
    let mut sent: Vec<usize> = Vec::new();
    for &id in &func.body.ops {
        let op = func.op(id);
        let Some(tick) = op.int_attr("tick") else { continue };
        assert!(tick >= last_tick, "tick {tick} after tick {last_tick}");
        last_tick = tick;
        let mb = op.int_attr("microbatch").unwrap() as usize;
        if op.kind == OpKind::Send {
            assert_eq!((op.int_attr("from"), op.int_attr("to")), (Some(0), Some(1)));
            sent.push(mb);
        } else if op.int_attr("stage") == Some(1) {
            assert!(sent.contains(&mb), "stage 1 runs microbatch {mb} before it is sent");
        }
    }
    assert_eq!(sent, [0, 1, 2, 3]);
}

#[test]
fn two_stages_and_four_microbatches_match_one_device_and_the_oracle() {
    let (values, args) = args(7);
    let d = dims(&[("B", B as i64), ("D", D as i64), ("F", F as i64)]);
    let Outcome::Ran { single, mesh, func } = run_both(PROGRAM, "mlp", &args, &d, 1) else { panic!("did not run") };
    assert_gpipe(&func);
    let (one, many) = (values_of(&single), values_of(&mesh.results));
    let want = oracle(&values, [0, 1]);
    assert!(max_rel(&want, &one) < 1e-5, "one device against the oracle: {}", max_rel(&want, &one));
    assert!(max_rel(&one, &many) < 1e-6, "the mesh against one device: {}", max_rel(&one, &many));
    // Not vacuous: the stages in the other order give another answer.
    assert!(max_rel(&oracle(&values, [1, 0]), &many) > 0.01);
    // Stage 0 (device 0) sends each microbatch's [B/4, D] f32 activation once; stage 1
    // sends nothing; the weights never move.
    let activation = (B / MICROBATCHES * D * 4) as u64;
    assert_eq!(mesh.network.sent, [MICROBATCHES as u64 * activation, 0]);
    assert_eq!(mesh.network.steps, MICROBATCHES as u32);
}

/// `source` with its 2-device `pp` mesh made a 2x2 `pp` x `tp` mesh.
fn on_pp_by_tp(source: &str) -> String {
    let (pp, pp_tp) = (
        r#"mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("pp",), shape=(2,))"#,
        r#"mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], axes=("pp", "tp"), shape=(2, 2))"#,
    );
    assert!(source.contains(pp), "{source}");
    source.replace(pp, pp_tp)
}

/// The same pipeline with Megatron-split weights inside each stage (`tp`): the
/// all-reduce each stage's row-parallel product needs runs on that stage's devices only.
#[test]
fn a_pipeline_of_tensor_parallel_stages_matches_one_device_and_the_oracle() {
    let source = on_pp_by_tp(PROGRAM)
        .replace(r#"@shard(mesh, "pp", None, None),"#, r#"@shard(mesh, "pp", None, "tp"),"#)
        .replace(r#"@shard(mesh, "pp", None, None))"#, r#"@shard(mesh, "pp", "tp", None))"#);
    assert!(source.contains(r#""pp", "tp", None)"#) && source.contains(r#""pp", None, "tp")"#), "{source}");
    let (values, args) = args(11);
    let d = dims(&[("B", B as i64), ("D", D as i64), ("F", F as i64)]);
    let Outcome::Ran { single, mesh, func } = run_both(&source, "mlp", &args, &d, 1) else { panic!("did not run") };
    assert_gpipe(&func);
    let (one, many) = (values_of(&single), values_of(&mesh.results));
    let want = oracle(&values, [0, 1]);
    assert!(max_rel(&want, &one) < 1e-5 && max_rel(&one, &many) < 1e-6, "{}", max_rel(&one, &many));
    // One all-reduce over tp per stage and microbatch, each on its stage's devices.
    let mut reduces: Vec<(i64, i64)> = func
        .body
        .ops
        .iter()
        .map(|&o| func.op(o))
        .filter(|op| op.kind == OpKind::AllReduce)
        .map(|op| (op.int_attr("stage").expect("a stage's all-reduce"), op.int_attr("microbatch").unwrap_or(-1)))
        .collect();
    reduces.sort();
    assert_eq!(reduces.len(), 8, "{reduces:?}");
    assert!(reduces.iter().filter(|r| r.0 == 0).count() == 4 && reduces.iter().filter(|r| r.0 == 1).count() == 4);
}

fn values_of(results: &[Arg]) -> Vec<f64> {
    assert_eq!(results.len(), 1);
    values(&results[0])
}

/// `block` of the training program on one row: `h + gelu(h @ W1) @ W2`.
fn plain_block(h: &[f64], w1: &[f64], w2: &[f64]) -> Vec<f64> {
    let hidden: Vec<f64> = (0..F).map(|f| gelu((0..D).map(|d| h[d] * w1[d * F + f]).sum())).collect();
    (0..D).map(|d| h[d] + (0..F).map(|f| hidden[f] * w2[f * D + d]).sum::<f64>()).collect()
}

/// The training program's loss, `mse(stage 1(stage 0(x)), y)`, in f64.
fn loss(x: &[f64], w1: &[f64], w2: &[f64], y: &[f64]) -> f64 {
    let mut total = 0.0;
    for (row, want) in x.chunks(D).zip(y.chunks(D)) {
        let mut h = row.to_vec();
        for k in 0..2 {
            h = plain_block(&h, &w1[k * D * F..(k + 1) * D * F], &w2[k * F * D..(k + 1) * F * D]);
        }
        total += h.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>();
    }
    total / (B * D) as f64
}

/// d loss / d w for each element of `w` (W1 when `which` is 0, W2 when 1), by central
/// differences in f64: an oracle that shares nothing with autodiff.
fn central_differences(v: &[Vec<f64>; 4], which: usize) -> Vec<f64> {
    let h = 1e-6;
    (0..v[1 + which].len())
        .map(|i| {
            let at = |delta: f64| {
                let mut w = v[1 + which].clone();
                w[i] += delta;
                let (w1, w2) = if which == 0 { (&w, &v[2]) } else { (&v[1], &w) };
                loss(&v[0], w1, w2, &v[3])
            };
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect()
}

fn training_args(seed: u64) -> ([Vec<f64>; 4], Vec<Arg>) {
    let (three, _) = args(seed);
    let [x, w1, w2] = three;
    let y: Vec<f64> = x.iter().map(|v| 0.5 - v).collect();
    let values = [x, w1, w2, y];
    let dims: [&[usize]; 4] = [&[B, D], &[2, D, F], &[2, F, D], &[B, D]];
    let args = (0..4).map(|i| Arg::Tensor(HostTensor::from_f64(DType::F32, dims[i], &values[i]))).collect();
    (values, args)
}

/// The backward ticks mirror the forward ones, in program order, and each microbatch's
/// gradient goes back from stage 1 to stage 0 by a send, the last microbatch first.
fn assert_gpipe_backward(func: &Func) {
    let schedules = pipeline_schedules(func);
    assert_eq!(schedules.len(), 1);
    let p = &schedules[0];
    assert_eq!((p.stages, p.microbatches, p.ticks, p.backward_from), (2, 4, 10, Some(5)));
    assert_eq!(
        p.cells,
        [
            vec![Some(0), Some(1), Some(2), Some(3), None, None, Some(3), Some(2), Some(1), Some(0)],
            vec![None, Some(0), Some(1), Some(2), Some(3), Some(3), Some(2), Some(1), Some(0), None],
        ]
    );
    assert!((p.bubble() - 0.2).abs() < 1e-12);
    let mut last_tick = 0;
    let mut sends: Vec<(i64, i64, i64)> = Vec::new();
    for &id in &func.body.ops {
        let op = func.op(id);
        let Some(tick) = op.int_attr("tick") else { continue };
        assert!(tick >= last_tick, "tick {tick} after tick {last_tick}");
        last_tick = tick;
        if op.kind == OpKind::Send {
            sends.push((op.int_attr("from").unwrap(), op.int_attr("to").unwrap(), op.int_attr("microbatch").unwrap()));
        }
    }
    assert_eq!(sends, [(0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 1, 3), (1, 0, 3), (1, 0, 2), (1, 0, 1), (1, 0, 0)]);
}

#[test]
fn grad_through_two_stages_matches_one_device_and_central_differences() {
    let (inputs, args) = training_args(5);
    let d = dims(&[("B", B as i64), ("D", D as i64), ("F", F as i64)]);
    let Outcome::Ran { single, mesh, func } = run_both(TRAINING, "pipeline_step", &args, &d, 1) else {
        panic!("did not run")
    };
    assert_gpipe_backward(&func);
    assert_eq!((single.len(), mesh.results.len()), (2, 2));
    for (which, (one, many)) in single.iter().zip(&mesh.results).enumerate() {
        let want = central_differences(&inputs, which);
        let (one, many) = (values(one), values(many));
        assert!(max_rel(&want, &one) < 1e-4, "W{}: one device against the oracle: {}", which + 1, max_rel(&want, &one));
        assert!(max_rel(&one, &many) < 1e-6, "W{}: the mesh against one device: {}", which + 1, max_rel(&one, &many));
        // Not vacuous: each stage's gradient is its own (the other stage's differs).
        let half = want.len() / 2;
        let swapped: Vec<f64> = want[half..].iter().chain(&want[..half]).copied().collect();
        assert!(max_rel(&swapped, &many) > 0.01, "W{}: the stages' gradients are alike", which + 1);
    }
    // Four [B/4, D] f32 activations forward from stage 0, four gradients back from stage
    // 1; the weights and their gradients never move.
    let activation = (B / MICROBATCHES * D * 4) as u64;
    assert_eq!(mesh.network.sent, [MICROBATCHES as u64 * activation, MICROBATCHES as u64 * activation]);
}

/// Under `grad` with Megatron-split stages: each stage's all-reduces over `tp`, forward
/// and backward, run on its own devices, and the gradients match one device.
#[test]
fn grad_through_tensor_parallel_stages_matches_one_device() {
    let source = on_pp_by_tp(TRAINING)
        .replace(r#"F", f32] @shard(mesh, "pp", None, None)"#, r#"F", f32] @shard(mesh, "pp", None, "tp")"#)
        .replace(r#"D", f32] @shard(mesh, "pp", None, None)"#, r#"D", f32] @shard(mesh, "pp", "tp", None)"#);
    assert_eq!(source.matches(r#""pp", "tp", None)"#).count(), 2, "{source}");
    let (inputs, args) = training_args(9);
    let d = dims(&[("B", B as i64), ("D", D as i64), ("F", F as i64)]);
    let Outcome::Ran { single, mesh, func } = run_both(&source, "pipeline_step", &args, &d, 1) else {
        panic!("did not run")
    };
    assert_gpipe_backward(&func);
    for (which, (one, many)) in single.iter().zip(&mesh.results).enumerate() {
        let want = central_differences(&inputs, which);
        let (one, many) = (values(one), values(many));
        assert!(max_rel(&want, &many) < 1e-4, "W{}: the mesh against the oracle: {}", which + 1, max_rel(&want, &many));
        assert!(max_rel(&one, &many) < 1e-5, "W{}: the mesh against one device: {}", which + 1, max_rel(&one, &many));
    }
    let stages: Vec<i64> = func
        .body
        .ops
        .iter()
        .map(|&o| func.op(o))
        .filter(|op| op.kind == OpKind::AllReduce)
        .map(|op| op.int_attr("stage").expect("a stage's all-reduce"))
        .collect();
    assert!(stages.iter().filter(|&&s| s == 0).count() >= 4 && stages.iter().filter(|&&s| s == 1).count() >= 4);
}
