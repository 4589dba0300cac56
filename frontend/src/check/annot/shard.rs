//! `@shard(mesh, "dp", None, ...)`: how a graph function's tensor parameter is laid out
//! on a device mesh, one entry per dim (a mesh axis name, or `None` for a dim every
//! device holds whole). It is written last, after any dtype policies, and only on a
//! parameter of a `@jit` function: it is the parameter's layout, not part of its type,
//! so it does not change what the function accepts.

use super::annotation::annotation_type;
use crate::check::infer::Infer;
use crate::check::types::{TensorKind, Ty};
use crate::check::ParamSharding;
use crate::diagnostics::{suggest, Code, Diagnostic};
use crate::syntax::ast::*;

/// Whether `e` is a `shard(...)` policy expression.
pub(super) fn is_shard(body: &Body, e: ExprId) -> bool {
    match body.expr(e) {
        Expr::Call { func, .. } => body.dotted_path(*func).and_then(|p| p.last().copied()) == Some("shard"),
        _ => false,
    }
}

/// A parameter's type and, when its annotation ends in `@shard(...)`, its sharding.
pub(super) fn param_annotation(cx: &mut Infer, ann: ExprId, graph: bool) -> (Ty, Option<ParamSharding>) {
    let body = cx.body;
    let Expr::Binary { op: BinOp::MatMul, lhs, rhs } = body.expr(ann) else {
        return (annotation_type(cx, ann), None);
    };
    let (lhs, rhs) = (*lhs, *rhs);
    if !is_shard(body, rhs) {
        return (annotation_type(cx, ann), None);
    }
    let ty = annotation_type(cx, lhs);
    if !graph {
        cx.error(Code::E0402, cx.range(rhs), "`@shard` lays out a parameter of a @jit function, not of a kernel");
        return (ty, None);
    }
    let sharding = match &ty {
        Ty::Tensor(t) if t.kind == TensorKind::Tensor => shard_spec(cx, rhs, t.dims.len(), &t.dims),
        Ty::Unknown => None,
        other => {
            let kind = other.kind_name();
            cx.error(Code::E0402, cx.range(rhs), format!("`@shard` applies to a Tensor parameter, not to {kind}"));
            None
        }
    };
    (ty, sharding)
}

fn shard_spec(cx: &mut Infer, call: ExprId, rank: usize, dims: &[crate::check::dims::Dim]) -> Option<ParamSharding> {
    let body = cx.body;
    let Expr::Call { args, .. } = body.expr(call) else { return None };
    let args = args.clone();
    if let Some(a) = args.iter().find(|a| a.name.is_some()) {
        let (_, range) = a.name.clone().expect("found by its name");
        cx.error(Code::E0402, range, "`@shard` takes positional arguments: @shard(mesh, \"dp\", None)");
        return None;
    }
    let Some((mesh_arg, entries)) = args.split_first() else {
        cx.error(
            Code::E0402,
            cx.range(call),
            "`@shard` needs the mesh and one entry per dim: @shard(mesh, \"dp\", None)",
        );
        return None;
    };
    let mesh = match cx.expr(mesh_arg.value) {
        Ty::Mesh(m) => m,
        Ty::Unknown => return None,
        other => {
            let kind = other.kind_name();
            cx.error(
                Code::E0402,
                cx.range(mesh_arg.value),
                format!("the first argument of `@shard` is a mesh (`dist.mesh(...)`), not {kind}"),
            );
            return None;
        }
    };
    if entries.len() != rank {
        cx.push(
            Diagnostic::new(
                Code::E0300,
                cx.range(call),
                format!(
                    "`@shard` gives {} entr{} for a tensor of rank {rank}",
                    entries.len(),
                    if entries.len() == 1 { "y" } else { "ies" }
                ),
            )
            .with_note("one entry per dim: a mesh axis name, or None for a dim every device holds whole"),
        );
        return None;
    }
    let mut axes: Vec<Option<String>> = Vec::with_capacity(rank);
    let mut ok = true;
    for (d, entry) in entries.iter().enumerate() {
        let axis = match body.expr(entry.value) {
            Expr::NoneLit => None,
            Expr::Str(s) => Some(s.clone()),
            _ => {
                cx.expr(entry.value);
                cx.error(Code::E0402, cx.range(entry.value), "a `@shard` entry is a mesh axis name (\"dp\") or None");
                ok = false;
                continue;
            }
        };
        if let Some(name) = &axis {
            let Some(position) = mesh.axes.iter().position(|a| a == name) else {
                let mut diag = Diagnostic::new(
                    Code::E0311,
                    cx.range(entry.value),
                    format!("the mesh has no axis `{name}` (its axes: {})", mesh.axes.join(", ")),
                );
                if let Some(s) = suggest(name, mesh.axes.iter().map(String::as_str)) {
                    diag = diag.with_did_you_mean(cx.range(entry.value), &format!("\"{s}\""));
                }
                cx.push(diag);
                ok = false;
                continue;
            };
            if let Some(first) = axes.iter().position(|a| a.as_ref() == Some(name)) {
                cx.push(
                    Diagnostic::new(
                        Code::E0313,
                        cx.range(entry.value),
                        format!("mesh axis `{name}` already splits dim {first}: one axis splits at most one dim"),
                    )
                    .with_label(cx.range(entries[first].value), "first used here"),
                );
                ok = false;
                continue;
            }
            let size = mesh.shape[position];
            if let Some(n) = dims.get(d).and_then(|dim| dim.as_const()) {
                if n % size != 0 {
                    cx.push(Diagnostic::new(
                        Code::E0312,
                        cx.range(entry.value),
                        format!(
                            "dim {d} has {n} elements, which do not split evenly over the {size} devices of `{name}`"
                        ),
                    ));
                    ok = false;
                }
            }
        }
        axes.push(axis);
    }
    ok.then_some(ParamSharding { mesh, dims: axes })
}
