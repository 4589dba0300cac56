//! Inlay hints: the type (shape, dtype, policies) of every `=` binding in kernels and
//! graph functions.

use super::nav;
use crate::check::{FunctionKind, Ty};
use crate::db::{Db, SourceFile};
use crate::syntax::ast::{Body, Expr, ExprId, Stmt, StmtId};
use crate::text::TextRange;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct InlayHint {
    /// Where the hint goes (just after the bound name).
    pub offset: u32,
    /// `: tile<BMxBNxf32>`
    pub label: String,
}

/// Hints for the bindings inside `range` (the whole file when `None`).
pub fn inlay_hints(db: &dyn Db, file: SourceFile, range: Option<TextRange>) -> Vec<InlayHint> {
    let mut out = Vec::new();
    for f in nav::all_functions(db, file) {
        if !matches!(f.sig.kind, FunctionKind::Kernel | FunctionKind::Graph) {
            continue;
        }
        if range.is_some_and(|r| !r.intersects(f.range) && !r.contains_range(f.range)) {
            continue;
        }
        let body = f.body();
        let mut targets = Vec::new();
        collect_assign_targets(body, &f.ast.body, &mut targets);
        for b in &f.inf.bindings {
            if !targets.contains(&b.range) || !worth_showing(&b.ty) {
                continue;
            }
            let at = f.abs(b.range).end;
            if range.is_some_and(|r| !r.touches(at)) {
                continue;
            }
            out.push(InlayHint { offset: at, label: format!(": {}", b.ty) });
        }
    }
    out.sort_by_key(|h| h.offset);
    out.dedup();
    out
}

fn worth_showing(ty: &Ty) -> bool {
    !matches!(ty, Ty::Unknown | Ty::Builtin(_) | Ty::Function(_) | Ty::Namespace(_) | Ty::Method { .. } | Ty::NoneVal)
}

/// The names bound by unannotated `=` statements.
fn collect_assign_targets(body: &Body, stmts: &[StmtId], out: &mut Vec<TextRange>) {
    for &s in stmts {
        match body.stmt(s) {
            Stmt::Assign { target, annotation: None, .. } => target_names(body, *target, out),
            Stmt::If { branches, orelse } => {
                for b in branches {
                    collect_assign_targets(body, &b.body, out);
                }
                if let Some(o) = orelse {
                    collect_assign_targets(body, o, out);
                }
            }
            Stmt::For { body: b, orelse, .. } => {
                collect_assign_targets(body, b, out);
                if let Some(o) = orelse {
                    collect_assign_targets(body, o, out);
                }
            }
            Stmt::While { body: b, .. } | Stmt::With { body: b, .. } => collect_assign_targets(body, b, out),
            _ => {}
        }
    }
}

fn target_names(body: &Body, target: ExprId, out: &mut Vec<TextRange>) {
    match body.expr(target) {
        Expr::Name(_) => out.push(body.expr_range(target)),
        Expr::Paren(inner) => target_names(body, *inner, out),
        Expr::Tuple(items) | Expr::List(items) => {
            for &i in items {
                target_names(body, i, out);
            }
        }
        _ => {}
    }
}
