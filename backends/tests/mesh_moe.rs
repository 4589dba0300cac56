//! Expert parallelism: the mixture-of-experts layer of `tests/corpus/valid/
//! moe_expert_parallel.tsr` (top-1 routing, a capacity per expert, GShard's dispatch and
//! combine) with its tokens' groups and its experts split over the 4 devices of `ep`,
//! the dispatched tokens reaching their experts' devices through one all-to-all and
//! coming back through another. The mesh run must match the single-device run (the f64
//! reference of the same Graph IR) and both must match a plain-loop oracle written here,
//! which shares no code with the compiler or the interpreter.

mod mesh_common;

use mesh_common::*;
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_passes::dist::cost::{self, Algorithm, Collective};
use tessera_passes::ir::OpKind;

const PROGRAM: &str = include_str!("../../tests/corpus/valid/moe_expert_parallel.tsr");

const G: usize = 4; // token groups, one per device
const S: usize = 16; // tokens per group
const M: usize = 8; // model dim
const E: usize = 8; // experts, two per device
const F: usize = 16; // expert hidden dim
const C: usize = 3; // slots per expert and group
const DEVICES: usize = 4;

/// Uniform numbers in [-1, 1) from splitmix64, so routing sees no ties.
fn random(dims: &[usize], seed: u64) -> (Vec<f64>, Arg) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let n: usize = dims.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // 24 bits: exactly representable in f32, so the arguments are these values.
            ((z >> 40) as f64 / (1u64 << 23) as f64) - 1.0
        })
        .collect();
    let arg = Arg::Tensor(HostTensor::from_f64(DType::F32, dims, &values));
    (values, arg)
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}

struct Oracle {
    out: Vec<f64>,
    kept: usize,
    dropped: usize,
    /// Tokens each device's experts processed.
    per_device: Vec<usize>,
}

/// The layer in plain loops: `expert_of(e)` picks the weights expert `e` uses (the
/// identity for the layer itself; a permutation to build a wrong answer).
fn oracle(x: &[f64], wr: &[f64], w1: &[f64], w2: &[f64], expert_of: impl Fn(usize) -> usize) -> Oracle {
    let mut out = vec![0.0; G * S * M];
    let (mut kept, mut dropped, mut per_device) = (0, 0, vec![0; DEVICES]);
    for g in 0..G {
        let mut used = [0usize; E];
        for s in 0..S {
            let token = &x[(g * S + s) * M..(g * S + s + 1) * M];
            let logits: Vec<f64> = (0..E).map(|e| (0..M).map(|m| token[m] * wr[m * E + e]).sum()).collect();
            let mut sorted = logits.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            assert!(sorted[0] - sorted[1] > 1e-4, "a near tie in routing: pick other inputs");
            let e = (0..E).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap();
            let total: f64 = logits.iter().map(|l| (l - sorted[0]).exp()).sum();
            let gate = (logits[e] - sorted[0]).exp() / total;
            used[e] += 1;
            if used[e] > C {
                dropped += 1;
                continue;
            }
            kept += 1;
            per_device[e / (E / DEVICES)] += 1;
            let w = expert_of(e);
            let hidden: Vec<f64> =
                (0..F).map(|f| gelu((0..M).map(|m| token[m] * w1[(w * M + m) * F + f]).sum())).collect();
            for m in 0..M {
                let y: f64 = (0..F).map(|f| hidden[f] * w2[(w * F + f) * M + m]).sum();
                out[(g * S + s) * M + m] = gate * y;
            }
        }
    }
    Oracle { out, kept, dropped, per_device }
}

fn max_rel(want: &[f64], got: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    want.iter().zip(got).map(|(a, b)| (a - b).abs() / scale).fold(0.0, f64::max)
}

#[test]
fn a_mixture_of_experts_dispatched_through_all_to_all_matches_one_device_and_the_oracle() {
    let (x, xa) = random(&[G, S, M], 1);
    let (wr, wra) = random(&[M, E], 2);
    let (w1, w1a) = random(&[E, M, F], 3);
    let (w2, w2a) = random(&[E, F, M], 4);
    let args = [xa, wra, w1a, w2a, Arg::Index(C as i64)];
    let d =
        dims(&[("G", G as i64), ("S", S as i64), ("M", M as i64), ("E", E as i64), ("F", F as i64), ("C", C as i64)]);
    let Outcome::Ran { single, mesh, func } = run_both(PROGRAM, "moe", &args, &d, 1) else { panic!("did not run") };

    let want = oracle(&x, &wr, &w1, &w2, |e| e);
    // The routing the data gives exercises the layer: tokens dropped past capacity,
    // tokens kept, and every device's experts busy.
    assert!(want.dropped > 0 && want.kept > want.dropped, "kept {}, dropped {}", want.kept, want.dropped);
    assert!(want.per_device.iter().all(|&n| n > 0), "tokens per device {:?}", want.per_device);

    let (one, many) = (values(&single[0]), values(&mesh.results[0]));
    let against_oracle = max_rel(&want.out, &one);
    assert!(against_oracle < 1e-5, "one device against the oracle: {against_oracle}");
    let against_one = max_rel(&one, &many);
    assert!(against_one < 1e-6, "the mesh against one device: {against_one}");
    assert!(max_rel(&want.out, &many) < 1e-5);
    // Not vacuous: had the all-to-all sent the tokens to the neighbouring device's
    // experts, the result would be far off.
    let misrouted = oracle(&x, &wr, &w1, &w2, |e| (e + E / DEVICES) % E);
    assert!(max_rel(&misrouted.out, &many) > 0.05, "misrouting would not be noticed");

    // Exactly the two written all-to-alls, nothing inserted; each moves 3/4 of every
    // device's [G/4, E, C, M] f32 block.
    let collectives: Vec<OpKind> =
        func.body.ops.iter().map(|&o| func.op(o).kind).filter(|k| k.is_collective()).collect();
    assert_eq!(collectives, [OpKind::AllToAll, OpKind::AllToAll]);
    let block = (G / DEVICES * E * C * M * 4) as u64;
    let (steps, sent) = cost::traffic(Collective::AllToAll, Algorithm::Pairwise, block, DEVICES);
    assert_eq!((mesh.network.busiest(), mesh.network.steps), (2 * sent, 2 * steps));
}
