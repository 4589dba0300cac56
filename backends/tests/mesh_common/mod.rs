//! What the simulated-mesh suites share: small deterministic inputs, running one graph
//! function both on one device (the f64 reference of its Graph IR) and on the mesh its
//! program declares, and comparing the two.

#![allow(dead_code)]

use std::collections::BTreeMap;

use tessera_backends::interp::graph::{run_graph_f64, run_graph_on_mesh, MeshRun};
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::dist::function::sharded_program;
use tessera_passes::graph_ir;
use tessera_passes::ir::Func;

/// A tensor of `dims` with values in [-0.72, 0.71], different for each `seed`.
pub fn tensor(dims: &[usize], seed: u64) -> Arg {
    let n: usize = dims.iter().product();
    let data: Vec<f64> =
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64 - 500.0) / 700.0).collect();
    Arg::Tensor(HostTensor::from_f64(DType::F32, dims, &data))
}

pub fn dims(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(s, v)| (s.to_string(), *v)).collect()
}

/// How one function fared on one device and on the mesh.
pub enum Outcome {
    /// Propagation found operands split incompatibly (E0314).
    Conflict(String),
    /// A collective the function writes whose operand is not laid out for it (E0316).
    Misplaced(String),
    Ran {
        single: Vec<Arg>,
        mesh: MeshRun,
        /// Graph IR as the mesh runs it (with its collectives).
        func: Box<Func>,
    },
}

/// Runs `name` of `source` on one device (the f64 reference) and on its mesh; panics
/// with the source on anything but a conflict, a misplaced collective or two runs.
pub fn run_both(source: &str, name: &str, args: &[Arg], dims: &BTreeMap<String, i64>, seed: i64) -> Outcome {
    let db = Database::default();
    let file = SourceFile::new(&db, "p.tsr".into(), source.to_string(), None);
    let key = item_index(&db, file)
        .functions
        .iter()
        .find(|f| f.key.name(&db) == name)
        .unwrap_or_else(|| panic!("no function `{name}`"))
        .key;
    let graph = graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{source}\n{}", e.message));
    let program = sharded_program(&db, key, dims)
        .unwrap_or_else(|e| panic!("{source}\n{}", e.message))
        .unwrap_or_else(|| panic!("{source}\nnot a sharded function"));
    if let Some(c) = program.propagation.conflicts.first() {
        return Outcome::Conflict(c.message.clone());
    }
    if let Some(m) = program.propagation.misplaced.first() {
        return Outcome::Misplaced(m.message.clone());
    }
    let single = run_graph_f64(&graph, args, seed).unwrap_or_else(|e| panic!("{source}\none device: {e}"));
    let mesh = run_graph_on_mesh(
        &program.inserted.func,
        &program.inserted.shardings,
        &program.mesh,
        args,
        dims,
        seed,
        true,
        None,
    )
    .unwrap_or_else(|e| panic!("{source}\nmesh: {e}"));
    Outcome::Ran { single, mesh, func: Box::new(program.inserted.func) }
}

/// The largest difference between two lists of results relative to the largest
/// magnitude of `want`; panics on different shapes or a non-finite value (a NaN is
/// never equal to anything).
pub fn max_rel_diff(want: &[Arg], got: &[Arg]) -> f64 {
    assert_eq!(want.len(), got.len(), "result counts");
    let mut worst: f64 = 0.0;
    for (a, b) in want.iter().zip(got) {
        let (Arg::Tensor(a), Arg::Tensor(b)) = (a, b) else { panic!("tensor results") };
        assert_eq!(a.dims, b.dims, "result shapes");
        let (a, b) = (a.to_f64(), b.to_f64());
        let scale = a.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
        for (x, y) in a.iter().zip(&b) {
            assert!(x.is_finite() && y.is_finite(), "non-finite result: {x} vs {y}");
            worst = worst.max((x - y).abs() / scale);
        }
    }
    worst
}

/// The values of a tensor argument.
pub fn values(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        other => panic!("a tensor, not {other:?}"),
    }
}

/// Every layout of a tensor of rank `rank` over mesh axes `axes`: each dim whole or
/// split over one axis, no axis twice.
pub fn layouts(rank: usize, axes: &[&'static str]) -> Vec<Vec<Option<&'static str>>> {
    let mut out = vec![vec![]];
    for _ in 0..rank {
        out = out
            .into_iter()
            .flat_map(|prefix: Vec<Option<&'static str>>| {
                std::iter::once(None).chain(axes.iter().copied().map(Some)).filter_map(move |c| {
                    if c.is_some() && prefix.contains(&c) {
                        return None;
                    }
                    let mut next = prefix.clone();
                    next.push(c);
                    Some(next)
                })
            })
            .collect();
    }
    out
}

/// `@shard(mesh, "a", None, ...)` for a layout.
pub fn shard(layout: &[Option<&str>]) -> String {
    let entries: Vec<String> = layout.iter().map(|l| l.map_or("None".to_string(), |a| format!("\"{a}\""))).collect();
    format!("@shard(mesh, {})", entries.join(", "))
}
