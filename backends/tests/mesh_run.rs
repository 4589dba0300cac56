//! Sharded graph functions on the simulated 8-device mesh against the same functions on
//! one device (the f64 reference): the layouts change where data lives and which
//! collectives run, never the numbers beyond summation order.

mod mesh_common;

use std::collections::BTreeMap;

use mesh_common::{layouts, tensor};

use tessera_backends::interp::graph::{run_graph_f64, run_graph_on_mesh};
use tessera_backends::tensor::Arg;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::dist::function::sharded_program;
use tessera_passes::graph_ir;

const MESH: &str = r#"from tessera import *

mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7"],
                 axes=("dp", "tp"), shape=(4, 2))
"#;

/// Runs `name` of `program` on one device and on the mesh; returns the largest
/// difference relative to the largest magnitude, and the bytes the busiest device sent.
fn compare(program: &str, name: &str, args: &[Arg], dims: &[(&str, i64)]) -> (f64, u64, u32) {
    let source = format!("{MESH}\n{program}");
    let db = Database::default();
    let file = SourceFile::new(&db, "p.tsr".into(), source, None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == name).expect("the function").key;
    let dims: BTreeMap<String, i64> = dims.iter().map(|(s, v)| (s.to_string(), *v)).collect();
    let graph = graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{}", e.message));
    let single = run_graph_f64(&graph, args, 7).unwrap_or_else(|e| panic!("one device: {e}"));
    let program =
        sharded_program(&db, key, &dims).unwrap_or_else(|e| panic!("{}", e.message)).expect("a sharded function");
    let (inserted, mesh, propagation) = (program.inserted, program.mesh, program.propagation);
    assert!(propagation.conflicts.is_empty(), "{:?}", propagation.conflicts);
    let run = run_graph_on_mesh(&inserted.func, &inserted.shardings, &mesh, args, &dims, 7, true, None)
        .unwrap_or_else(|e| panic!("mesh: {e}"));
    assert_eq!(single.len(), run.results.len());
    let mut worst: f64 = 0.0;
    for (a, b) in single.iter().zip(&run.results) {
        let (Arg::Tensor(a), Arg::Tensor(b)) = (a, b) else { panic!("tensor results") };
        assert_eq!(a.dims, b.dims);
        let (a, b) = (a.to_f64(), b.to_f64());
        let scale = a.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        for (x, y) in a.iter().zip(&b) {
            assert!(x.is_finite() && y.is_finite());
            worst = worst.max((x - y).abs() / scale);
        }
    }
    (worst, run.network.busiest(), run.network.steps)
}

#[test]
fn a_megatron_mlp_on_the_mesh_matches_one_device() {
    let program = r#"
@jit
def mlp(x: Tensor["B", "D", f32] @shard(mesh, "dp", None),
        W1: Tensor["D", "F", f32] @shard(mesh, None, "tp"),
        W2: Tensor["F", "D", f32] @shard(mesh, "tp", None)) -> Tensor["B", "D", f32]:
    return matmul(gelu(matmul(x, W1)), W2)
"#;
    let args = [tensor(&[8, 16], 1), tensor(&[16, 32], 2), tensor(&[32, 16], 3)];
    let (worst, sent, steps) = compare(program, "mlp", &args, &[("B", 8), ("D", 16), ("F", 32)]);
    assert!(worst < 1e-5, "relative difference {worst}");
    // One all-reduce over tp (2 devices): each device's [2, 16] f32 block, once.
    assert!(sent > 0 && steps >= 1, "{sent} bytes, {steps} steps");
}

#[test]
fn a_data_parallel_training_step_on_the_mesh_matches_one_device() {
    let program = r#"
@jit @autodiff
def loss(x: Tensor["B", "D", f32], W: Tensor["D", "E", f32], y: Tensor["B", "E", f32]) -> Tensor[f32]:
    return mse(matmul(x, W), y)

@jit
def step(x: Tensor["B", "D", f32] @shard(mesh, "dp", None),
         W: Tensor["D", "E", f32],
         y: Tensor["B", "E", f32] @shard(mesh, "dp", None)):
    (dW,) = grad(loss, wrt=("W",))(x, W, y)
    return loss(x, W, y), dW
"#;
    let args = [tensor(&[16, 8], 4), tensor(&[8, 4], 5), tensor(&[16, 4], 6)];
    let (worst, sent, _) = compare(program, "step", &args, &[("B", 16), ("D", 8), ("E", 4)]);
    assert!(worst < 1e-5, "relative difference {worst}");
    assert!(sent > 0);
}

#[test]
fn gathers_for_softmax_and_attention_on_the_mesh_match_one_device() {
    let program = r#"
@jit
def probabilities(x: Tensor["B", "C", f32] @shard(mesh, "dp", "tp")) -> Tensor["B", "C", f32]:
    return softmax_safe(x)

@jit
def attend(q: Tensor["B", "H", "S", "Dh", f32] @shard(mesh, None, "tp", "dp", None),
           k: Tensor["B", "H", "S", "Dh", f32] @shard(mesh, None, "tp", "dp", None),
           v: Tensor["B", "H", "S", "Dh", f32] @shard(mesh, None, "tp", "dp", None)) -> Tensor["B", "H", "S", "Dh", f32]:
    return flash_attention(q, k, v)
"#;
    let (worst, _, _) = compare(program, "probabilities", &[tensor(&[8, 12], 7)], &[("B", 8), ("C", 12)]);
    assert!(worst < 1e-6, "softmax: relative difference {worst}");
    let qkv = [tensor(&[1, 2, 8, 4], 8), tensor(&[1, 2, 8, 4], 9), tensor(&[1, 2, 8, 4], 10)];
    let (worst, sent, _) = compare(program, "attend", &qkv, &[("B", 1), ("H", 2), ("S", 8), ("Dh", 4)]);
    assert!(worst < 1e-5, "attention: relative difference {worst}");
    assert!(sent > 0, "keys and values are gathered");
}

/// Every layout of every parameter over a 2×2 mesh (each dim whole or split over `a` or
/// `b`, no axis twice in one tensor), for small programs covering the propagation rules:
/// the mesh run matches the single-device f64 reference, or propagation reports the
/// conflict. Nothing else is allowed: no panic, no silent wrong answer.
#[test]
fn every_layout_of_small_programs_matches_one_device_or_is_a_conflict() {
    const SMALL_MESH: &str = r#"from tessera import *

mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], axes=("a", "b"), shape=(2, 2))
"#;
    // (name, parameter ranks, body): parameters are x, y (f32, dims from M, N, K = 4).
    let programs: &[(&str, &[&[&str]], &str)] = &[
        ("elementwise", &[&["M", "N"], &["M", "N"]], "return gelu(x * y + x) - y"),
        ("product", &[&["M", "K"], &["K", "N"]], "return matmul(x, y)"),
        ("chained", &[&["M", "K"], &["K", "N"]], "return relu(matmul(x, y)) * 2.0"),
        ("row_sum", &[&["M", "N"]], "return sum(x, axis=1)"),
        ("col_mean", &[&["M", "N"]], "return mean(x, axis=0)"),
        ("row_max", &[&["M", "N"]], "return max(x, axis=1)"),
        ("softmax", &[&["M", "N"]], "return softmax_safe(x)"),
        ("transposed", &[&["M", "N"], &["N", "M"]], "return x.T + y"),
        ("norm", &[&["M", "N"]], "return rmsnorm_safe(x)"),
        ("mse_grad", &[&["M", "K"], &["K", "N"]], "return mse(matmul(x, y), matmul(x, y) * 0.5)"),
        ("row_broadcast", &[&["M", "N"], &["N"]], "return x * y + y"),
        ("flatten", &[&["M", "N"]], "return reshape(x, (M * N,)) * 3.0"),
        ("kept_sum", &[&["M", "N"]], "return x - sum(x, axis=1, keepdim=True)"),
        ("stacked", &[&["M", "N"], &["M", "N"]], "return concat([x, y], axis=0)"),
        ("halves", &[&["M", "N"]], "a, b = split(x, 2, axis=1)\n    return a * b"),
        ("scaled_norm", &[&["M", "N"], &["N"]], "return layernorm_safe(x, weight=y, bias=y)"),
        ("batched", &[&["B", "M", "K"], &["K", "N"]], "return matmul(x, y)"),
        ("permuted", &[&["B", "M", "N"]], "return transpose(x, axes=(2, 0, 1)) * 2.0"),
        ("attention", &[&["B", "M", "N", "K"], &["B", "M", "N", "K"]], "return flash_attention(x, y, y)"),
    ];
    let (mut matched, mut conflicts) = (0, 0);
    for (name, ranks, body) in programs {
        let params_for = |choice: &[Vec<Option<&str>>]| -> String {
            ranks
                .iter()
                .zip(["x", "y"])
                .zip(choice)
                .map(|((dims, p), layout)| {
                    let dims: Vec<String> = dims.iter().map(|d| format!("\"{d}\"")).collect();
                    let entries: Vec<String> =
                        layout.iter().map(|l| l.map_or("None".to_string(), |a| format!("\"{a}\""))).collect();
                    format!("{p}: Tensor[{}, f32] @shard(mesh, {})", dims.join(", "), entries.join(", "))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut choices: Vec<Vec<Vec<Option<&str>>>> = vec![vec![]];
        for &r in ranks.iter() {
            choices = choices
                .into_iter()
                .flat_map(|c| {
                    layouts(r.len(), &["a", "b"]).into_iter().map(move |l| {
                        let mut next = c.clone();
                        next.push(l);
                        next
                    })
                })
                .collect();
        }
        for choice in choices {
            let source = format!("{SMALL_MESH}\n@jit\ndef {name}({}):\n    {body}\n", params_for(&choice));
            let db = Database::default();
            let file = SourceFile::new(&db, "p.tsr".into(), source.clone(), None);
            let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == *name).expect("fn").key;
            let dims: BTreeMap<String, i64> =
                [("M", 4), ("N", 4), ("K", 4), ("B", 2)].iter().map(|(s, v)| (s.to_string(), *v)).collect();
            let graph = graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{source}\n{}", e.message));
            let program =
                sharded_program(&db, key, &dims).unwrap_or_else(|e| panic!("{source}\n{}", e.message)).unwrap();
            if !program.propagation.conflicts.is_empty() {
                conflicts += 1;
                continue;
            }
            let args: Vec<Arg> = ranks
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let shape: Vec<usize> = r.iter().map(|d| if *d == "B" { 2 } else { 4 }).collect();
                    tensor(&shape, 11 + i as u64)
                })
                .collect();
            let single = run_graph_f64(&graph, &args, 3).unwrap_or_else(|e| panic!("{source}\none device: {e}"));
            let run = run_graph_on_mesh(
                &program.inserted.func,
                &program.inserted.shardings,
                &program.mesh,
                &args,
                &dims,
                3,
                true,
                None,
            )
            .unwrap_or_else(|e| panic!("{source}\nmesh: {e}"));
            for (a, b) in single.iter().zip(&run.results) {
                let (Arg::Tensor(a), Arg::Tensor(b)) = (a, b) else { panic!("tensors") };
                let (a, b) = (a.to_f64(), b.to_f64());
                let scale = a.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
                let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs() / scale).fold(0.0, f64::max);
                assert!(worst < 1e-5, "{source}\nrelative difference {worst}");
            }
            matched += 1;
        }
    }
    eprintln!("{matched} layouts matched one device, {conflicts} were conflicts");
    assert!(matched > 100 && conflicts > 0, "{matched} matched, {conflicts} conflicts");
}
