//! E0808: an operation that `vmap` or `jvp` cannot transform, found at check time in the
//! body of the transformed function (or of a function it calls), instead of at lowering.
//!
//! The rules mirror the lowering's (`passes/src/lower/graph/transforms/`): `vmap` has no
//! batching rule for `dropout` (its mask is drawn per call site) or for `flash_attention`
//! with dropout; neither transform sees into a kernel call (`graph.call_kernel`: a
//! `@kernel` of the file or a standard-library kernel); `jvp` has no forward rule for
//! `flash_attention`; neither transforms a collective (`dist.all_reduce`, ...: its dims
//! are the untransformed layout's); and a `custom_vjp(f, backward)` call inside either is refused
//! (**decision**: its backward would be lost by `vmap`, and `jvp` has no custom rule to
//! take from it; docs/language.md, "Transforms").
//!
//! The diagnostic is at the operation, in the function whose body has it, with a label at
//! the transform; ranges are absolute, since the two are in different items.

use crate::check::infer::{callee_inference, callee_signature};
use crate::check::{builtins, FunctionKind, Inference, Ty};
use crate::db::{self, Db, FnKey, SourceFile};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::{Arg, Expr, FunctionDef};
use crate::text::TextRange;

/// Which transform is applied.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Transform {
    Vmap,
    Jvp,
}

impl Transform {
    fn name(self) -> &'static str {
        match self {
            Transform::Vmap => "vmap",
            Transform::Jvp => "jvp",
        }
    }
}

/// Every E0808 of `file`, absolute; one per operation.
pub fn transform_refusals(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    let index = db::item_index(db, file);
    for entry in &index.functions {
        if db::derived_kernel(db, entry.key).is_some() {
            continue;
        }
        let Some(def) = db::function_def(db, entry.key).clone() else { continue };
        let inf = callee_inference(db, entry.key);
        for e in &def.arena.exprs {
            let Expr::Call { func, args } = e else { continue };
            let transform = match inf.type_of(*func) {
                Ty::Builtin("vmap") => Transform::Vmap,
                Ty::Builtin("jvp") => Transform::Jvp,
                _ => continue,
            };
            let Some(Arg { value: f, .. }) = args.iter().find(|a| a.name.is_none()) else { continue };
            let Ty::Function(target) = inf.type_of(*f) else { continue };
            let at = def.arena.expr_range(*f).shift(entry.anchor);
            let mut seen = vec![target.clone()];
            let mut todo = vec![(target.clone(), 0u32)];
            while let Some((name, depth)) = todo.pop() {
                let Some((key, _)) = callee_signature(db, file, &name) else { continue };
                let Some(body) = db::function_def(db, key).clone() else { continue };
                let Some(anchor) = db::function_anchor(db, key) else { continue };
                let found = refusals_in(db, file, key, &body, transform);
                for (range, message) in found.refused {
                    let range = range.shift(anchor);
                    if out.iter().any(|d| d.range == range) {
                        continue;
                    }
                    let d = Diagnostic::new(Code::E0808, range, message)
                        .with_label(at, format!("transformed by `{}` here", transform.name()))
                        .with_note(format!(
                            "`{}` transforms the graph ops of `{target}`'s body (and of the functions it calls); \
                             move this operation out of the transformed function",
                            transform.name()
                        ));
                    out.push(d);
                }
                if depth < 16 {
                    for callee in found.callees {
                        if !seen.contains(&callee) {
                            seen.push(callee.clone());
                            todo.push((callee, depth + 1));
                        }
                    }
                }
            }
        }
    }
    out
}

/// What one body holds: the refused operations (item-relative) and the graph functions
/// and helpers it calls (whose bodies the transform inlines too).
struct Found {
    refused: Vec<(TextRange, String)>,
    callees: Vec<String>,
}

fn refusals_in(db: &dyn Db, file: SourceFile, key: FnKey<'_>, def: &FunctionDef, t: Transform) -> Found {
    let inf: &Inference = callee_inference(db, key);
    let mut found = Found { refused: Vec::new(), callees: Vec::new() };
    let of = key.name(db);
    let tn = t.name();
    for (i, e) in def.arena.exprs.iter().enumerate() {
        let Expr::Call { func, args } = e else { continue };
        let id = crate::syntax::ast::ExprId(i as u32);
        let range = def.arena.expr_range(id);
        let message = match inf.type_of(*func) {
            Ty::Builtin("dropout") if t == Transform::Vmap => Some(format!(
                "`vmap` cannot batch `dropout` (in `{of}`): its mask is drawn per call site, and one site \
                 drawing a mask per example has no rule"
            )),
            Ty::Builtin("flash_attention") if t == Transform::Jvp => {
                Some(format!("`jvp` has no forward-mode rule for `flash_attention` (in `{of}`)"))
            }
            Ty::Builtin("flash_attention") if has_dropout(def, args) => Some(format!(
                "`vmap` cannot batch `flash_attention` with dropout (in `{of}`): its mask would be drawn over \
                 the folded batch"
            )),
            Ty::Builtin("custom_vjp") => Some(format!(
                "`custom_vjp` inside `{tn}` (in `{of}`) is not supported: {}",
                match t {
                    Transform::Vmap => "the batched function would lose its custom backward",
                    Transform::Jvp => "`jvp` has no custom forward rule to take from it",
                }
            )),
            Ty::Builtin("dist.pipeline") => Some(format!(
                "`{tn}` cannot transform `dist.pipeline` (in `{of}`): its schedule places each stage on the devices \
                 of its mesh axis"
            )),
            Ty::Builtin(path @ ("dist.all_reduce" | "dist.all_gather" | "dist.reduce_scatter" | "dist.all_to_all")) => {
                Some(format!(
                    "`{tn}` cannot transform the collective `{path}` (in `{of}`): its axis and dims name the \
                     untransformed function's layout"
                ))
            }
            Ty::Builtin(path) if builtins::lookup(path).is_none() => {
                Some(format!("`{tn}` cannot see into the standard-library kernel `{path}` (called in `{of}`)"))
            }
            Ty::Function(callee) => match callee_signature(db, file, callee) {
                Some((_, sig)) if sig.kind == FunctionKind::Kernel => {
                    Some(format!("`{tn}` cannot see into the kernel `{callee}` (called in `{of}`)"))
                }
                Some(_) => {
                    found.callees.push(callee.clone());
                    None
                }
                None => None,
            },
            _ => None,
        };
        if let Some(m) = message {
            found.refused.push((range, m));
        }
    }
    found
}

/// Whether a `flash_attention` call passes a dropout (`dropout=p` or a fifth argument)
/// that is not the literal 0.
fn has_dropout(def: &FunctionDef, args: &[Arg]) -> bool {
    let given = args
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|(n, _)| n.as_str() == "dropout"))
        .or_else(|| args.iter().filter(|a| a.name.is_none()).nth(4));
    match given.map(|a| def.arena.expr(a.value)) {
        None => false,
        Some(Expr::Float(v)) => v.get() != 0.0,
        Some(Expr::Int(v)) => *v != 0,
        Some(_) => true,
    }
}
