//! Sharding propagation (`passes::dist::propagate`) on the Graph IR of real programs:
//! the collectives the typical layouts need, counted, and the conflicts it refuses.

use std::collections::BTreeMap;

use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::dist::cost::Collective;
use tessera_passes::dist::propagate::{propagate, Propagation, Sharding, BUCKET_BYTES};
use tessera_passes::graph_ir;
use tessera_passes::ir::{Func, Type};

const PROGRAM: &str = r#"from tessera import *

@jit
def mlp(x: Tensor["B", "D", f32], W1: Tensor["D", "F", f32], W2: Tensor["F", "D", f32]) -> Tensor["B", "D", f32]:
    return matmul(gelu(matmul(x, W1)), W2)

@jit @autodiff
def loss(x: Tensor["B", "D", f32], W: Tensor["D", "E", f32], y: Tensor["B", "E", f32]) -> Tensor[f32]:
    return mse(matmul(x, W), y)

@jit
def dp_step(x: Tensor["B", "D", f32], W: Tensor["D", "E", f32], y: Tensor["B", "E", f32]):
    return grad(loss, wrt=("W",))(x, W, y)

@jit @autodiff
def mlp_loss(x: Tensor["B", "D", f32], W1: Tensor["D", "F", f32], W2: Tensor["F", "D", f32], y: Tensor["B", "D", f32]) -> Tensor[f32]:
    return mse(matmul(relu(matmul(x, W1)), W2), y)

@jit
def dp_mlp_step(x: Tensor["B", "D", f32], W1: Tensor["D", "F", f32], W2: Tensor["F", "D", f32], y: Tensor["B", "D", f32]):
    return grad(mlp_loss, wrt=("W1", "W2"))(x, W1, W2, y)

@jit
def attend(q: Tensor["B", "H", "S", "Dh", f32], k: Tensor["B", "H", "S", "Dh", f32], v: Tensor["B", "H", "S", "Dh", f32]) -> Tensor["B", "H", "S", "Dh", f32]:
    return flash_attention(q, k, v, causal=True)

@jit
def probabilities(x: Tensor["B", "C", f32]) -> Tensor["B", "C", f32]:
    return softmax_safe(x)

@jit
def total(x: Tensor["B", "C", f32]) -> Tensor["C", f32]:
    return sum(x, axis=0)

@jit
def mixed(x: Tensor["N", "N", f32], y: Tensor["N", "N", f32]) -> Tensor["N", "N", f32]:
    return x + y
"#;

fn split(dims: &[Option<&str>]) -> Option<Sharding> {
    Some(Sharding::split(dims))
}

/// Propagates `params` through `name` with `dims` giving the sizes (for bucketing).
fn run(name: &str, params: &[Option<Sharding>], dims: &[(&str, i64)]) -> (Func, Propagation) {
    let db = Database::default();
    let file = SourceFile::new(&db, "p.tsr".into(), PROGRAM.to_string(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == name).expect("the function").key;
    let graph = graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{name}: {}", e.message));
    let sizes: BTreeMap<&str, i64> = dims.iter().copied().collect();
    let bytes = |v| match graph.ty(v) {
        Type::Tensor(t) => {
            let n: Option<i64> = t.dims.iter().map(|d| d.eval(&|s| sizes.get(s).copied())).product();
            n.map(|n| n as u64 * u64::from(t.dtype.bytes()))
        }
        _ => None,
    };
    let p = propagate(&graph, params, &bytes);
    ((*graph).clone(), p)
}

fn reasons(p: &Propagation) -> String {
    p.collectives.iter().map(|n| format!("{:?} over {} ({})", n.kind, n.axis, n.reason)).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_megatron_mlp_needs_exactly_one_forward_all_reduce() {
    // Column-parallel W1, row-parallel W2 over `tp`.
    let params = [None, split(&[None, Some("tp")]), split(&[Some("tp"), None])];
    let (graph, p) = run("mlp", &params, &[]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    assert_eq!(p.collective_count(Collective::AllReduce), 1, "{}", reasons(&p));
    assert_eq!(p.collective_count(Collective::AllGather), 0, "{}", reasons(&p));
    let hidden = graph.op(graph.body.ops[1]).results[0];
    assert_eq!(p.sharding(hidden).unwrap().describe(), "[-, tp]");
    let out = graph.op(graph.body.ops[3]).results[0];
    assert_eq!(p.sharding(out).unwrap().describe(), "[-, -] partial(sum over tp)");
}

#[test]
fn data_parallel_gradients_take_one_all_reduce_per_bucket() {
    let batch = split(&[Some("dp"), None]);
    let (_, p) = run("dp_step", &[batch.clone(), None, batch.clone()], &[("B", 64), ("D", 512), ("E", 256)]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    assert_eq!(p.collective_count(Collective::AllReduce), 1, "{}", reasons(&p));
    assert_eq!(p.collective_count(Collective::AllGather), 0, "{}", reasons(&p));

    // Two gradients of 1 MiB share a bucket; two of 16 MiB do not.
    let params = [batch.clone(), None, None, batch.clone()];
    let (_, small) = run("dp_mlp_step", &params, &[("B", 64), ("D", 256), ("F", 1024)]);
    assert_eq!(small.collective_count(Collective::AllReduce), 1, "{}", reasons(&small));
    let (_, large) = run("dp_mlp_step", &params, &[("B", 64), ("D", 1024), ("F", 4096)]);
    assert_eq!(1024 * 4096 * 4, BUCKET_BYTES);
    assert_eq!(large.collective_count(Collective::AllReduce), 2, "{}", reasons(&large));
    assert_eq!(large.collectives.len(), 2);
}

#[test]
fn sequence_sharding_gathers_keys_and_values_for_attention() {
    let seq = split(&[None, None, Some("sp"), None]);
    let (graph, p) = run("attend", &[seq.clone(), seq.clone(), seq], &[]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    let gathers: Vec<_> = p.collectives.iter().filter(|n| n.kind == Collective::AllGather).collect();
    assert_eq!(gathers.len(), 2, "{}", reasons(&p));
    assert!(gathers.iter().all(|n| n.dim == Some(2) && n.axis == "sp"));
    let gathered: Vec<_> = gathers.iter().map(|n| n.value).collect();
    assert_eq!(gathered, graph.params[1..].to_vec());
    // Each device keeps its own queries.
    let out = graph.op(*graph.body.ops.iter().rev().nth(1).unwrap()).results[0];
    assert_eq!(p.sharding(out).unwrap().describe(), "[-, -, sp, -]");
}

#[test]
fn softmax_gathers_a_split_row_and_a_split_sum_is_all_reduced() {
    let (_, p) = run("probabilities", &[split(&[None, Some("tp")])], &[]);
    assert_eq!(p.collective_count(Collective::AllGather), 1, "{}", reasons(&p));
    assert_eq!(p.collective_count(Collective::AllReduce), 0, "{}", reasons(&p));
    let (_, p) = run("probabilities", &[split(&[Some("dp"), None])], &[]);
    assert!(p.collectives.is_empty(), "{}", reasons(&p));
    let (_, p) = run("total", &[split(&[Some("dp"), None])], &[]);
    assert_eq!(p.collective_count(Collective::AllReduce), 1, "{}", reasons(&p));
}

#[test]
fn incompatible_shardings_are_conflicts_not_silent_relayouts() {
    let (_, p) = run("mixed", &[split(&[Some("dp"), None]), split(&[None, Some("dp")])], &[]);
    assert_eq!(p.conflicts.len(), 1, "{:?}", p.conflicts);
    assert!(p.conflicts[0].message.contains("same mesh axis `dp`"), "{}", p.conflicts[0].message);
    let (_, p) = run("mixed", &[split(&[Some("dp"), None]), split(&[Some("tp"), None])], &[]);
    assert!(p.conflicts[0].message.contains("different mesh axes"), "{:?}", p.conflicts);
    let (_, p) = run("mlp", &[None, split(&[Some("dp"), None]), split(&[None, None])], &[]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    assert_eq!(p.collective_count(Collective::AllReduce), 1, "a split K is a partial sum: {}", reasons(&p));
}

#[test]
fn graph_ir_shows_the_collectives_on_the_token_chain_with_their_cost() {
    use tessera_passes::dist::insert::{insert_collectives, MeshAxes};
    use tessera_passes::ir::print::{print_func, NoLocs};
    use tessera_passes::ir::verify::verify;

    let mesh = MeshAxes(vec![("dp".into(), 4), ("tp".into(), 2)]);
    let sizes: BTreeMap<&str, i64> = [("B", 64), ("D", 1024), ("F", 4096)].into_iter().collect();
    let bytes_of = |g: &Func| {
        let g = g.clone();
        let sizes = sizes.clone();
        move |v| match g.ty(v) {
            Type::Tensor(t) => t
                .dims
                .iter()
                .map(|d| d.eval(&|s| sizes.get(s).copied()))
                .product::<Option<i64>>()
                .map(|n| n as u64 * u64::from(t.dtype.bytes())),
            _ => None,
        }
    };
    let params = [None, split(&[None, Some("tp")]), split(&[Some("tp"), None])];
    let (graph, p) = run("mlp", &params, &[]);
    let with = insert_collectives(&graph, &p, &mesh, &bytes_of(&graph));
    verify(&with).unwrap();
    let text = print_func(&with, &NoLocs).text;
    assert_eq!(text.matches("dist.all_reduce").count(), 1, "{text}");
    // [B, D] f32 partial over tp: 64 × 1024 × 4 bytes on each device, over NVLink.
    let line = text.lines().find(|l| l.contains("dist.all_reduce")).unwrap();
    for part in ["axis = \"tp\"", "combine = \"sum\"", "bytes = 262144", "link = \"nvlink4\"", "!token"] {
        assert!(line.contains(part), "{line}");
    }
    assert!(text.contains("func.return %"), "{text}");

    let batch = split(&[Some("dp"), None]);
    let (graph, p) = run("dp_mlp_step", &[batch.clone(), None, None, batch], &[("B", 64), ("D", 1024), ("F", 4096)]);
    let with = insert_collectives(&graph, &p, &mesh, &bytes_of(&graph));
    verify(&with).unwrap();
    let text = print_func(&with, &NoLocs).text;
    let reduces: Vec<&str> = text.lines().filter(|l| l.contains("dist.all_reduce")).collect();
    assert_eq!(reduces.len(), 2, "{text}");
    assert!(reduces.iter().all(|l| l.contains("algorithm = \"ring\"") && l.contains("bucket = ")), "{text}");
    // The returned values are the all-reduced ones.
    let ret = text.lines().find(|l| l.contains("func.return")).unwrap();
    for l in &reduces {
        let result = l.trim().split(',').next().unwrap().trim();
        assert!(ret.contains(result), "{ret} does not return {result}");
    }
}

/// Hover on a sharded value (`$0` marks the cursor): its layout, global shape and the
/// shape each device holds, through the same path the language server takes.
#[test]
fn hover_on_a_sharded_value_shows_its_layout_and_per_device_shape() {
    use tessera_frontend::ide::{self, HoverSubject};
    use tessera_passes::session::Analysis;

    let fixture = r#"from tessera import *

mesh = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7"],
                 axes=("dp", "tp"), shape=(4, 2))

@jit
def mlp(x: Tensor["B", "D", f32] @shard(mesh, "dp", None),
        W1: Tensor["D", "F", f32] @shard(mesh, None, "tp"),
        W2: Tensor["F", "D", f32] @shard(mesh, "tp", None)) -> Tensor["B", "D", f32]:
    h = gelu(matmul(x, W1))
    y = matmul(h, W2)
    return y$0
"#;
    let text = fixture.replace("$0", "");
    let offset = fixture.find("$0").unwrap() as u32 - 1;
    let db = Database::default();
    let file = SourceFile::new(&db, "p.tsr".into(), text.clone(), None);
    let h = ide::hover(&db, file, offset).expect("a hover on y");
    let extra = match &h.subject {
        HoverSubject::GraphValue { function, value } => Analysis::new(&db, file).sharding_hover(function, value),
        other => panic!("{other:?}"),
    };
    let extra = extra.expect("a sharding hover");
    assert!(extra.contains("mesh (dp=4, tp=2)"), "{extra}");
    assert!(extra.contains("layout `[dp, -] partial(sum over tp)`"), "{extra}");
    assert!(extra.contains("global `[B, D]`, each device holds `[B/4, D]`"), "{extra}");
    assert!(extra.contains("partial sum"), "{extra}");

    // A parameter: its @shard layout.
    let at = text.find("W1: Tensor").unwrap() as u32;
    let h = ide::hover(&db, file, at).expect("a hover on W1");
    let HoverSubject::GraphValue { function, value } = &h.subject else { panic!("{:?}", h.subject) };
    let extra = Analysis::new(&db, file).sharding_hover(function, value).expect("a sharding hover");
    assert!(extra.contains("layout `[-, tp]`") && extra.contains("each device holds `[D, F/2]`"), "{extra}");
}
