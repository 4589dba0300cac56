//! A graph function's shardings, from its parameters' `@shard(mesh, ...)`, and its Graph
//! IR with the collectives they imply: what `tessera lower --stage graph` and
//! `tessera check` show for a sharded function.

use std::collections::BTreeMap;
use std::sync::Arc;

use smol_str::SmolStr;
use tessera_frontend::check::{fn_signature, ParamSharding, Ty};
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::syntax::ast::Expr;
use tessera_frontend::FnKey;

use super::insert::{insert_with_shardings, Inserted, MeshAxes};
use super::propagate::{propagate, Propagation, Sharding};
use crate::error::LowerError;
use crate::ir::{Func, OpId, OpKind, Origin, Type, ValueId};
use crate::queries::graph_ir;
use tessera_frontend::db::Db;

/// A function's mesh and the sharding of each Graph IR parameter (`None`: replicated).
pub type ParameterShardings = (MeshAxes, Vec<Option<Sharding>>);

/// The mesh and the per-parameter shardings of Graph IR's parameters, when any
/// parameter of the function has `@shard`. Graph IR's parameters are matched to the
/// signature's by name (a KV cache or optimizer state parameter expands to several,
/// none of them sharded).
pub fn parameter_shardings(
    db: &dyn Db,
    key: FnKey<'_>,
    graph: &Func,
) -> Result<Option<ParameterShardings>, LowerError> {
    let signature = fn_signature(db, key);
    // Each Graph IR parameter's layout: its `@shard`, or for a module-level
    // `dist.tensor` the function reads (an implicit parameter), its `ShardSpec`.
    let mut layouts: Vec<Option<(String, ParamSharding)>> = Vec::with_capacity(graph.params.len());
    for &v in &graph.params {
        let name = graph.values[v.0 as usize].name.as_deref().unwrap_or("");
        let layout = match signature.params.iter().find(|p| p.name == name) {
            Some(p) => p.sharding.clone(),
            None => global_layout(db, key, name),
        };
        layouts.push(layout.map(|l| (name.to_string(), l)));
    }
    let Some((first_name, first)) = layouts.iter().flatten().next().cloned() else { return Ok(None) };
    if let Some((other, _)) = layouts.iter().flatten().find(|(_, l)| l.mesh != first.mesh) {
        return Err(LowerError {
            message: format!(
                "`{first_name}` and `{other}` are sharded over different meshes; one function runs on one mesh"
            ),
            range: tessera_frontend::db::function_def(db, key).as_ref().map(|d| d.name_range).unwrap_or_default(),
        });
    }
    let mesh = &first.mesh;
    let axes = MeshAxes(mesh.axes.iter().zip(&mesh.shape).map(|(a, &s)| (SmolStr::new(a), s as usize)).collect());
    let params = layouts
        .iter()
        .map(|l| l.as_ref().map(|(_, l)| Sharding::split(&l.dims.iter().map(|d| d.as_deref()).collect::<Vec<_>>())))
        .collect();
    Ok(Some((axes, params)))
}

/// The layout of the module-level `NAME = dist.tensor(shape=..., layout=ShardSpec(...),
/// mesh=...)` of the function's file: `partition` entries `"row"` (dim 0), `"col"` (the
/// last dim) or a dim index, each split over the `mesh_axes` entry at its position.
fn global_layout(db: &dyn Db, key: FnKey<'_>, name: &str) -> Option<ParamSharding> {
    let file = key.file(db);
    let index = tessera_frontend::db::item_index(db, file);
    let entry = index.constants.iter().find(|c| c.names.iter().any(|(n, _)| n == name))?;
    let ast = tessera_frontend::db::constant_ast(db, entry.key).clone()?;
    let value = tessera_frontend::check::const_value(db, entry.key);
    let tessera_frontend::check::Ty::DistTensor(t) = &value.ty else { return None };
    let Expr::Call { args, .. } = ast.arena.expr(ast.arena.unparen(ast.value)) else { return None };
    let arg = |n: &str| args.iter().find(|a| a.name.as_ref().is_some_and(|(k, _)| k == n)).map(|a| a.value);
    let (Ty::ShardSpec { partition, mesh_axes }, Ty::Mesh(mesh)) =
        (value.inference.type_of(arg("layout")?), value.inference.type_of(arg("mesh")?))
    else {
        return None;
    };
    let rank = t.dims.len();
    let mut dims: Vec<Option<String>> = vec![None; rank];
    for (p, axis) in partition.iter().zip(mesh_axes) {
        let d = match p.as_str() {
            "row" => 0,
            "col" => rank.checked_sub(1)?,
            other => other.parse::<usize>().ok()?,
        };
        *dims.get_mut(d)? = Some(axis.clone());
    }
    Some(ParamSharding { mesh: mesh.clone(), dims })
}

/// The function's Graph IR with its collectives (itself when no parameter is sharded),
/// and the propagation behind it. `dims` gives sizes for the collectives' bytes.
pub fn graph_with_collectives(
    db: &dyn Db,
    key: FnKey<'_>,
    dims: &BTreeMap<String, i64>,
) -> Result<(Arc<Func>, Option<Propagation>), LowerError> {
    Ok(match sharded_program(db, key, dims)? {
        Some(p) => (Arc::new(p.inserted.func), Some(p.propagation)),
        None => (graph_ir(db, key).clone()?, None),
    })
}

/// The program of a sharded function on its mesh, collectives overlapped with the
/// launches that do not touch their buffers (`graph_plan::plan_on_mesh`); `None` when no
/// parameter is sharded.
pub fn mesh_plan(
    db: &dyn Db,
    key: FnKey<'_>,
    dims: &BTreeMap<String, i64>,
) -> Result<Option<crate::graph_plan::GraphPlan>, LowerError> {
    match sharded_program(db, key, dims)? {
        Some(p) => Ok(Some(crate::graph_plan::plan_on_mesh(&p.inserted.func)?)),
        None => Ok(None),
    }
}

/// A sharded function as the mesh runs it.
pub struct ShardedProgram {
    /// Graph IR with its collectives, and every value's sharding.
    pub inserted: Inserted,
    pub mesh: MeshAxes,
    pub propagation: Propagation,
}

/// The function as the mesh runs it (`None` when no parameter is sharded).
pub fn sharded_program(
    db: &dyn Db,
    key: FnKey<'_>,
    dims: &BTreeMap<String, i64>,
) -> Result<Option<ShardedProgram>, LowerError> {
    let graph = graph_ir(db, key).clone()?;
    let Some((mesh, params)) = parameter_shardings(db, key, &graph)? else { return Ok(None) };
    Ok(Some(laid_out(&graph, mesh, &params, dims)))
}

/// The mesh `tessera run --mesh N` gives an unsharded function: one axis, `dp`.
pub const DATA_PARALLEL_AXIS: &str = "dp";

/// An unsharded function run data-parallel over `devices` devices (`tessera run --mesh
/// N`): a one-axis mesh `dp`; the batch is dim 0 of the first tensor parameter, and each
/// tensor parameter whose dim 0 is that same dim is split over `dp` there, the others
/// whole on every device. Propagation then decides the rest, as for `@shard`.
pub fn data_parallel_program(
    db: &dyn Db,
    key: FnKey<'_>,
    dims: &BTreeMap<String, i64>,
    devices: usize,
) -> Result<ShardedProgram, LowerError> {
    let graph = graph_ir(db, key).clone()?;
    let at = tessera_frontend::db::function_def(db, key).as_ref().map(|d| d.name_range).unwrap_or_default();
    let refuse = |message: String| LowerError { message, range: at };
    let name = key.name(db);
    if parameter_shardings(db, key, &graph)?.is_some() {
        return Err(refuse(format!(
            "`{name}` lays out its parameters with `@shard` and runs on its own mesh: --mesh is for unsharded functions"
        )));
    }
    let leading = |v: &ValueId| match graph.ty(*v) {
        Type::Tensor(t) => t.dims.first().cloned(),
        _ => None,
    };
    let Some(batch) = graph.params.iter().find_map(leading) else {
        return Err(refuse(format!("`{name}` has no tensor parameter whose dim 0 could be split over --mesh devices")));
    };
    let params: Vec<Option<Sharding>> = graph
        .params
        .iter()
        .map(|v| match graph.ty(*v) {
            Type::Tensor(t) if leading(v).as_ref() == Some(&batch) => {
                let mut dims = vec![None; t.dims.len()];
                dims[0] = Some(DATA_PARALLEL_AXIS);
                Some(Sharding::split(&dims))
            }
            _ => None,
        })
        .collect();
    let mesh = MeshAxes(vec![(SmolStr::new(DATA_PARALLEL_AXIS), devices)]);
    Ok(laid_out(&graph, mesh, &params, dims))
}

/// `graph` with `params`' layouts on `mesh`: propagated, and its collectives inserted.
fn laid_out(graph: &Func, mesh: MeshAxes, params: &[Option<Sharding>], dims: &BTreeMap<String, i64>) -> ShardedProgram {
    let bytes = |v: ValueId| value_bytes(graph, v, dims);
    let propagation = propagate(graph, params, &bytes);
    let inserted = insert_with_shardings(graph, &propagation, &mesh, &bytes);
    ShardedProgram { inserted, mesh, propagation }
}

/// E0314 for each conflict of a sharded function, E0316 for each collective it writes
/// whose operand is not laid out for it (E0311 for one over an axis its mesh lacks), and
/// W0315 for large all-gathers; item-relative: at the op when it comes from the
/// function's own body, else at the function's name.
pub fn sharding_diagnostics(db: &dyn Db, key: FnKey<'_>) -> Vec<Diagnostic> {
    // Only functions with a sharded parameter or a module-level `dist.tensor` in their
    // body have a mesh: the others skip lowering here.
    let sharded_param = fn_signature(db, key).params.iter().any(|p| p.sharding.is_some());
    let reads_global =
        || tessera_frontend::check::infer_function(db, key).expr_types.iter().any(|t| matches!(t, Ty::DistTensor(_)));
    if !sharded_param && !reads_global() {
        return collectives_without_mesh(db, key);
    }
    let Ok(Some(program)) = sharded_program(db, key, &BTreeMap::new()) else { return Vec::new() };
    let (graph, p) = (&program.inserted.func, &program.propagation);
    let name = key.name(db);
    let fallback = tessera_frontend::db::function_def(db, key).as_ref().map(|d| d.name_range).unwrap_or_default();
    let at = |op: OpId| {
        let loc = &graph.op(op).loc;
        match &loc.origin {
            Origin::Function(f) if f == name => loc.range,
            _ => fallback,
        }
    };
    let mut out: Vec<Diagnostic> = Vec::new();
    for c in &p.conflicts {
        let at = at(c.op);
        if out.iter().any(|d| d.range == at && d.message == c.message) {
            continue;
        }
        out.push(Diagnostic::new(Code::E0314, at, c.message.clone()).with_note(
            "split the operands the same way, or give one of them whole: no re-layout is inserted silently",
        ));
    }
    // Collectives the function writes, over an axis its mesh does not have (the checker
    // already said so where a parameter's `@shard` names the mesh).
    let mut unknown_axis: Vec<OpId> = Vec::new();
    for &id in &graph.body.ops {
        let op = graph.op(id);
        let axis = op.str_attr("axis").unwrap_or("");
        if !op.kind.is_collective() || op.attr("explicit").is_none() || program.mesh.0.iter().any(|(a, _)| a == axis) {
            continue;
        }
        unknown_axis.push(id);
        if sharded_param {
            continue;
        }
        let axes: Vec<&str> = program.mesh.0.iter().map(|(a, _)| a.as_str()).collect();
        out.push(Diagnostic::new(
            Code::E0311,
            at(id),
            format!(
                "`{}` over `{axis}`: the function's mesh has no axis `{axis}` (its axes: {})",
                op.kind.name(),
                axes.join(", ")
            ),
        ));
    }
    // Pipelines over a mesh that only module-level `dist.tensor`s give (the checker
    // compared the stages with a `@shard` parameter's mesh already).
    for pipeline in super::schedule::pipeline_schedules(graph).iter().filter(|_| !sharded_param) {
        let size = program.mesh.0.iter().find(|(a, _)| *a == pipeline.axis).map(|(_, s)| *s);
        let message = match size {
            None => format!("the pipeline's axis `{}` is not an axis of the function's mesh", pipeline.axis),
            Some(n) if n != pipeline.stages => format!(
                "{} pipeline stages over mesh axis `{}`, which has {n} devices: each stage runs at one position of the axis",
                pipeline.stages, pipeline.axis
            ),
            Some(_) => continue,
        };
        out.push(Diagnostic::new(if size.is_none() { Code::E0311 } else { Code::E0317 }, fallback, message));
    }
    for m in p.misplaced.iter().filter(|m| !unknown_axis.contains(&m.op)) {
        out.push(Diagnostic::new(Code::E0316, at(m.op), m.message.clone()).with_note(
            "a collective moves a layout its operand has (Graph IR is the global view: the value stays the same); \
             hover the operand to see its layout",
        ));
    }
    // Large all-gathers, where the sizes are static: each call of the function moves them.
    for &id in &graph.body.ops {
        let op = graph.op(id);
        if op.kind != OpKind::AllGather || op.attr("explicit").is_some() {
            continue;
        }
        let Some(bytes) = op.int_attr("bytes").filter(|&b| b as u64 >= LARGE_GATHER_BYTES) else { continue };
        let at = at(id);
        let what = op.operands.first().and_then(|v| graph.values[v.0 as usize].name.clone());
        let axis = op.str_attr("axis").unwrap_or("?");
        let time = op.attr("time_us").and_then(|a| a.as_float()).map(|t| format!(", ~{t:.0} µs")).unwrap_or_default();
        out.push(
            Diagnostic::new(
                Code::W0315,
                at,
                format!(
                    "this all-gathers {} over `{axis}` on every call: {} per device{time}",
                    what.map_or("an operand".to_string(), |n| format!("`{n}`")),
                    crate::units::bytes(bytes as u64)
                ),
            )
            .with_note("keep the operand whole (no @shard), or split its consumer the same way"),
        );
    }
    out
}

/// E0316 at each collective a `@jit` function without a mesh writes, or reaches through
/// the helpers it calls: nothing is laid out over any axis there, so there is nothing to
/// move (item-relative, at the call in the function's own body).
fn collectives_without_mesh(db: &dyn Db, key: FnKey<'_>) -> Vec<Diagnostic> {
    if !fn_signature(db, key).jit {
        return Vec::new();
    }
    let Some(def) = tessera_frontend::db::function_def(db, key).clone() else { return Vec::new() };
    let inference = tessera_frontend::check::infer_function(db, key);
    let name = key.name(db);
    let mut out = Vec::new();
    for (i, e) in def.arena.exprs.iter().enumerate() {
        let Expr::Call { func, .. } = e else { continue };
        let range = def.arena.expr_range(tessera_frontend::syntax::ast::ExprId(i as u32));
        let message = match inference.type_of(*func) {
            Ty::Builtin(path) if is_collective_builtin(path) => format!(
                "`{path}` needs a mesh, and `{name}` has none (no parameter has `@shard` and it reads no \
                 `dist.tensor`): nothing is split or partial over any axis here"
            ),
            Ty::Function(callee) => match helper_collective(db, key.file(db), callee, &mut vec![callee.clone()]) {
                Some(path) => format!(
                    "`{callee}` runs `{path}`, which needs a mesh, and `{name}` has none (no parameter has \
                     `@shard` and it reads no `dist.tensor`)"
                ),
                None => continue,
            },
            _ => continue,
        };
        out.push(Diagnostic::new(Code::E0316, range, message).with_note(
            "give a parameter its layout with `@shard(mesh, ...)`; on one device a collective would move nothing",
        ));
    }
    out
}

fn is_collective_builtin(path: &str) -> bool {
    matches!(path, "dist.all_reduce" | "dist.all_gather" | "dist.reduce_scatter" | "dist.all_to_all")
}

/// The first collective the helper `name` (or a function it calls, up to 16 deep) writes.
fn helper_collective(
    db: &dyn Db,
    file: tessera_frontend::SourceFile,
    name: &str,
    seen: &mut Vec<String>,
) -> Option<&'static str> {
    let key = FnKey::new(db, file, name.to_string(), 0);
    let def = tessera_frontend::db::function_def(db, key).clone()?;
    let inference = tessera_frontend::check::infer_function(db, key);
    for e in &def.arena.exprs {
        let Expr::Call { func, .. } = e else { continue };
        match inference.type_of(*func) {
            Ty::Builtin(path) if is_collective_builtin(path) => return Some(path),
            Ty::Function(callee) if seen.len() < 16 && !seen.contains(callee) => {
                seen.push(callee.clone());
                if let Some(path) = helper_collective(db, file, callee, seen) {
                    return Some(path);
                }
            }
            _ => {}
        }
    }
    None
}

/// An all-gather of at least this many bytes per device is worth a warning (W0315).
pub const LARGE_GATHER_BYTES: u64 = 16 << 20;

fn value_bytes(graph: &Func, v: ValueId, dims: &BTreeMap<String, i64>) -> Option<u64> {
    let Type::Tensor(t) = graph.ty(v) else { return None };
    let n: Option<i64> = t.dims.iter().map(|d| d.eval(&|s| dims.get(s).copied())).product();
    n.map(|n| n.max(0) as u64 * u64::from(t.dtype.bytes()))
}
