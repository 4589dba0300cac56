//! Pipeline parallelism: `dist.pipeline(block, stages=2, microbatches=4, axis="pp")`
//! (`tests/corpus/valid/pipeline_mlp.tsr`) runs a GPipe schedule on the simulated mesh,
//! each stage on the devices at its position of `pp` with its own slice of the stacked
//! weights, the activations moving between them through `dist.send`. The mesh run must
//! match the single-device run (the f64 reference of the same Graph IR) and both a
//! plain-loop oracle written here; the schedule Graph IR holds must be GPipe's.

mod mesh_common;

use mesh_common::*;
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_passes::dist::schedule::pipeline_schedules;
use tessera_passes::ir::{Func, OpKind};

const PROGRAM: &str = include_str!("../../tests/corpus/valid/pipeline_mlp.tsr");

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

/// The same pipeline with Megatron-split weights inside each stage (`tp`): the
/// all-reduce each stage's row-parallel product needs runs on that stage's devices only.
#[test]
fn a_pipeline_of_tensor_parallel_stages_matches_one_device_and_the_oracle() {
    let source = PROGRAM
        .replace(
            r#"mesh = dist.mesh(devices=["cuda:0", "cuda:1"], axes=("pp",), shape=(2,))"#,
            r#"mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], axes=("pp", "tp"), shape=(2, 2))"#,
        )
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
