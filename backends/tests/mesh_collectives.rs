//! The collectives a graph function writes (`dist.all_gather(x, axis="a")`, ...) on the
//! simulated mesh. On one device each is its operand's value (Graph IR is the global
//! view), so for every layout the mesh run must give back exactly the single-device
//! result, which only holds if the data really moved to the right devices, or
//! propagation must refuse the layout (E0316) for the reason the language gives,
//! computed here independently of the compiler.

mod mesh_common;

use mesh_common::*;
use tessera_passes::dist::cost::{self, Algorithm, Collective};
use tessera_passes::ir::OpKind;

const SMALL_MESH: &str = r#"from tessera import *

mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], axes=("a", "b"), shape=(2, 2))
"#;

/// Every layout of a rank-3 `x`, every axis, and every data-moving collective over it:
/// all-gather and all-to-all (each pair of dims). Misplaced exactly when the language
/// says so; otherwise the mesh returns `x` itself, element for element.
#[test]
fn gathers_and_all_to_alls_of_every_layout_return_the_value_or_are_refused() {
    let shape = [4usize, 8, 4];
    let d = dims(&[("A", 4), ("B", 8), ("C", 4)]);
    let x = tensor(&shape, 21);
    let (mut ran, mut refused) = (0, 0);
    for layout in layouts(3, &["a", "b"]) {
        for axis in ["a", "b"] {
            let split_over = |dim: usize| layout[dim] == Some(axis);
            let mut calls = vec![(format!("dist.all_gather(x, axis=\"{axis}\")"), !(0..3).any(split_over))];
            for (split, split_layout) in layout.iter().enumerate() {
                for concat in (0..3).filter(|&c| c != split) {
                    let misplaced = !split_over(concat) || split_layout.is_some();
                    calls.push((
                        format!("dist.all_to_all(x, axis=\"{axis}\", split_dim={split}, concat_dim={concat})"),
                        misplaced,
                    ));
                }
            }
            for (call, misplaced) in calls {
                let source = format!(
                    "{SMALL_MESH}\n@jit\ndef f(x: Tensor[\"A\", \"B\", \"C\", f32] {}):\n    return {call}\n",
                    shard(&layout)
                );
                match run_both(&source, "f", std::slice::from_ref(&x), &d, 1) {
                    Outcome::Misplaced(m) => {
                        assert!(misplaced, "{source}\nrefused: {m}");
                        refused += 1;
                    }
                    Outcome::Conflict(c) => panic!("{source}\nconflict: {c}"),
                    Outcome::Ran { single, mesh, .. } => {
                        assert!(!misplaced, "{source}\nshould have been refused");
                        assert_eq!(values(&single[0]), values(&x), "{source}\none device");
                        assert_eq!(values(&mesh.results[0]), values(&x), "{source}\nthe mesh moved data wrong");
                        ran += 1;
                    }
                }
            }
        }
    }
    eprintln!("{ran} collectives ran, {refused} were refused");
    assert!(ran >= 40 && refused >= 100, "{ran} ran, {refused} refused");
}

/// Partial sums from a matmul with a split contracting dim, completed by an explicit
/// all-reduce or reduce-scatter (every dim): misplaced exactly when the product is not
/// partial over the axis, else the mesh matches one device.
#[test]
fn all_reduces_and_reduce_scatters_of_every_matmul_layout_match_one_device_or_are_refused() {
    let d = dims(&[("M", 4), ("K", 8), ("N", 4)]);
    let args = [tensor(&[4, 8], 3), tensor(&[8, 4], 4)];
    let (mut ran, mut refused) = (0, 0);
    for lx in layouts(2, &["a", "b"]) {
        for lw in layouts(2, &["a", "b"]) {
            for axis in ["a", "b"] {
                let partial = lx[1] == Some(axis) || lw[0] == Some(axis);
                let mut calls = vec![(format!("dist.all_reduce(y, axis=\"{axis}\")"), !partial)];
                for dim in 0..2 {
                    // The product's layout: M from x, N from w.
                    let taken = if dim == 0 { lx[0] } else { lw[1] };
                    calls.push((
                        format!("dist.reduce_scatter(y, axis=\"{axis}\", dim={dim})"),
                        !partial || taken.is_some(),
                    ));
                }
                for (call, misplaced) in calls {
                    let source = format!(
                        "{SMALL_MESH}\n@jit\ndef f(x: Tensor[\"M\", \"K\", f32] {}, w: Tensor[\"K\", \"N\", f32] {}):\n    y = matmul(x, w)\n    return {call} * 2.0\n",
                        shard(&lx),
                        shard(&lw)
                    );
                    match run_both(&source, "f", &args, &d, 1) {
                        Outcome::Conflict(_) => {}
                        Outcome::Misplaced(m) => {
                            assert!(misplaced, "{source}\nrefused: {m}");
                            refused += 1;
                        }
                        Outcome::Ran { single, mesh, .. } => {
                            assert!(!misplaced, "{source}\nshould have been refused");
                            let worst = max_rel_diff(&single, &mesh.results);
                            assert!(worst < 1e-6, "{source}\nrelative difference {worst}");
                            ran += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{ran} reductions ran, {refused} were refused");
    assert!(ran > 30 && refused > 30, "{ran} ran, {refused} refused");
}

/// Megatron's sequence-parallel MLP written out: the row-parallel product is
/// reduce-scattered over `tp` along the sequence, the elementwise tail runs on
/// sequence blocks, and an all-gather makes it whole. Propagation inserts nothing of
/// its own; the devices send what the cost model says.
#[test]
fn a_sequence_parallel_mlp_with_written_collectives_matches_one_device() {
    let source = format!(
        "{SMALL_MESH}\n{}",
        r#"
@jit
def mlp(x: Tensor["S", "D", f32] @shard(mesh, None, None),
        W1: Tensor["D", "F", f32] @shard(mesh, None, "b"),
        W2: Tensor["F", "D", f32] @shard(mesh, "b", None)) -> Tensor["S", "D", f32]:
    y = matmul(gelu(matmul(x, W1)), W2)
    y = dist.reduce_scatter(y, axis="b", dim=0)
    return dist.all_gather(relu(y) + 1.0, axis="b")
"#
    );
    let d = dims(&[("S", 8), ("D", 4), ("F", 8)]);
    let args = [tensor(&[8, 4], 5), tensor(&[4, 8], 6), tensor(&[8, 4], 7)];
    let Outcome::Ran { single, mesh, func } = run_both(&source, "mlp", &args, &d, 1) else { panic!("did not run") };
    let worst = max_rel_diff(&single, &mesh.results);
    assert!(worst < 1e-6, "relative difference {worst}");
    let kinds: Vec<OpKind> = func.body.ops.iter().map(|&o| func.op(o).kind).filter(|k| k.is_collective()).collect();
    assert_eq!(kinds, [OpKind::ReduceScatter, OpKind::AllGather], "only the written collectives");
    // Reduce-scatter of the [8, 4] f32 partial sum (128 bytes) over 2 devices, then an
    // all-gather back to 128 bytes: each ring sends half.
    let (rs_steps, rs) = cost::traffic(Collective::ReduceScatter, Algorithm::Ring, 128, 2);
    let (ag_steps, ag) = cost::traffic(Collective::AllGather, Algorithm::Ring, 128, 2);
    assert_eq!(mesh.network.busiest(), rs + ag);
    assert_eq!(mesh.network.steps, rs_steps + ag_steps);
}

/// A written all-to-all's bytes, counted by the simulated network, are the pairwise
/// exchange's: (p − 1)/p of each device's buffer.
#[test]
fn an_all_to_all_sends_what_the_cost_model_says() {
    let source = format!(
        "{SMALL_MESH}\n{}",
        r#"
@jit
def f(x: Tensor["A", "B", f32] @shard(mesh, "a", None)):
    return dist.all_to_all(x, axis="a", split_dim=1, concat_dim=0)
"#
    );
    let d = dims(&[("A", 8), ("B", 8)]);
    let x = tensor(&[8, 8], 9);
    let Outcome::Ran { mesh, func, .. } = run_both(&source, "f", std::slice::from_ref(&x), &d, 1) else {
        panic!("did not run")
    };
    assert_eq!(values(&mesh.results[0]), values(&x));
    // Each device holds a [4, 8] f32 block: 128 bytes, half of it sent.
    let (steps, sent) = cost::traffic(Collective::AllToAll, Algorithm::Pairwise, 128, 2);
    assert_eq!((mesh.network.busiest(), mesh.network.steps), (sent, steps));
    let op = func.body.ops.iter().map(|&o| func.op(o)).find(|o| o.kind == OpKind::AllToAll).unwrap();
    assert_eq!(op.str_attr("algorithm"), Some("pairwise"));
    assert_eq!(op.int_attr("bytes"), Some(128));
}
