//! Find references: every occurrence of a `Definition` in its file, reads and writes
//! told apart. Separate from go to definition because it walks every function and
//! constant of the file rather than one binding; `rename` edits exactly these ranges.

use super::goto::{import_binding, symbol_occurrences};
use super::{all_constants, all_functions, classify, Definition, FnCtx};
use crate::check::{schedule::canonical_key, Resolution, Ty};
use crate::db::{self, Db, SourceFile};
use crate::syntax::ast::*;
use crate::text::TextRange;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum ReferenceKind {
    /// The defining occurrence (def name, parameter, import binding, constant).
    Definition,
    /// An assignment to a local.
    Write,
    Read,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Reference {
    pub range: TextRange,
    pub kind: ReferenceKind,
}

/// Every occurrence of the name at `offset` in its file, in source order.
pub fn find_references(db: &dyn Db, file: SourceFile, offset: u32, include_declaration: bool) -> Vec<Reference> {
    let Some(at) = classify(db, file, offset) else {
        return Vec::new();
    };
    let mut refs = references_of(db, file, &at.def);
    if !include_declaration {
        refs.retain(|r| r.kind != ReferenceKind::Definition);
    }
    refs
}

pub(crate) fn references_of(db: &dyn Db, file: SourceFile, def: &Definition) -> Vec<Reference> {
    let text = file.text(db);
    let mut out: Vec<Reference> = Vec::new();
    let mut push = |range: TextRange, kind: ReferenceKind| out.push(Reference { range, kind });
    match def {
        Definition::Local { function, local } => {
            if let Some(f) = FnCtx::new(db, file, *function) {
                let defs: Vec<TextRange> =
                    f.inf.locals.get(*local as usize).map(|l| l.defs.clone()).unwrap_or_default();
                for r in &defs {
                    push(f.abs(*r), ReferenceKind::Write);
                }
                for id in f.body().expr_ids() {
                    if f.inf.resolution(id) == Some(&Resolution::Local(*local)) {
                        let r = f.body().expr_range(id);
                        if !defs.contains(&r) {
                            push(f.abs(r), ReferenceKind::Read);
                        }
                    }
                }
            }
        }
        Definition::Param { function, index } => {
            let functions = all_functions(db, file);
            if let Some(f) = functions.iter().find(|f| f.index == *function) {
                if let Some(p) = f.ast.params.get(*index as usize) {
                    push(f.abs(p.name_range), ReferenceKind::Definition);
                    for id in f.body().expr_ids() {
                        if f.inf.resolution(id) == Some(&Resolution::Param(*index)) {
                            push(f.abs(f.body().expr_range(id)), ReferenceKind::Read);
                        }
                    }
                    // `state: OptimizerState[W]` names the parameter in another's type.
                    for (name, at) in f.optimizer_state_targets() {
                        if name == p.name.as_str() {
                            push(f.abs(f.body().expr_range(at)), ReferenceKind::Read);
                        }
                    }
                    // `callee(name=...)` at every call site of this function.
                    let callee = f.name().to_string();
                    for g in &functions {
                        for id in g.body().expr_ids() {
                            let Expr::Call { func, args } = g.body().expr(id) else {
                                continue;
                            };
                            let calls_it = matches!(
                                g.inf.resolution(g.body().unparen(*func)),
                                Some(Resolution::Function(n)) if *n == callee
                            );
                            if !calls_it {
                                continue;
                            }
                            for a in args {
                                if let Some((n, r)) = &a.name {
                                    if *n == p.name {
                                        push(g.abs(*r), ReferenceKind::Read);
                                    }
                                }
                            }
                        }
                        // `grad(callee, wrt=("name",))` names the parameter in a string.
                        for w in grad_wrt_strings(g, text) {
                            if w.callee == callee && w.param == p.name.as_str() {
                                push(w.range, ReferenceKind::Read);
                            }
                        }
                    }
                }
            }
        }
        Definition::DimSymbol { function, name } => {
            if let Some(f) = FnCtx::new(db, file, *function) {
                for r in symbol_occurrences(&f, name, text) {
                    push(r, ReferenceKind::Definition);
                }
                if let Some(p) = f.ast.params.iter().find(|p| p.name == *name) {
                    push(f.abs(p.name_range), ReferenceKind::Definition);
                }
                for id in f.body().expr_ids() {
                    let hit = match f.body().expr(id) {
                        Expr::Name(_) => {
                            matches!(f.inf.resolution(id), Some(Resolution::Symbol(s)) if s == name)
                        }
                        Expr::Attribute { object, name: attr, name_range } => {
                            if attr == name && matches!(f.inf.type_of(*object), Ty::Context) {
                                push(f.abs(*name_range), ReferenceKind::Read);
                            }
                            false
                        }
                        _ => false,
                    };
                    if hit {
                        push(f.abs(f.body().expr_range(id)), ReferenceKind::Read);
                    }
                }
            }
        }
        Definition::Function { name } | Definition::Constant { name } | Definition::Import { name } => {
            let wanted = |r: Option<&Resolution>| match (def, r) {
                (Definition::Function { .. }, Some(Resolution::Function(n)))
                | (Definition::Constant { .. }, Some(Resolution::Constant(n)))
                | (Definition::Import { .. }, Some(Resolution::Import(n))) => n == name,
                _ => false,
            };
            // Definitions.
            match def {
                Definition::Function { .. } => {
                    for e in &db::item_index(db, file).functions {
                        if e.key.name(db) == name {
                            push(e.name_range, ReferenceKind::Definition);
                        }
                    }
                }
                Definition::Constant { .. } => {
                    for c in &db::item_index(db, file).constants {
                        for (n, r) in &c.names {
                            if n == name {
                                push(*r, ReferenceKind::Definition);
                            }
                        }
                    }
                }
                _ => {
                    if let Some((_, r)) = import_binding(db, file, name) {
                        push(r, ReferenceKind::Definition);
                    }
                }
            }
            for f in all_functions(db, file) {
                let sig = f.sig_exprs();
                for id in f.body().expr_ids() {
                    let Expr::Name(n) = f.body().expr(id) else {
                        continue;
                    };
                    let hit = if sig[id.0 as usize] {
                        // Signature names resolve at module level: match by name.
                        n == name
                    } else {
                        wanted(f.inf.resolution(id))
                    };
                    if hit {
                        push(f.abs(f.body().expr_range(id)), ReferenceKind::Read);
                    }
                }
                // Decorators resolve at module level too (`@kernel.schedule(base)`).
                let deco = f.deco_body();
                for id in deco.expr_ids() {
                    if matches!(deco.expr(id), Expr::Name(n) if n == name) {
                        push(f.deco_abs(deco.expr_range(id)), ReferenceKind::Read);
                    }
                }
            }
            for c in all_constants(db, file) {
                let body = &c.ast.arena;
                for id in body.expr_ids() {
                    if matches!(body.expr(id), Expr::Name(_)) && wanted(c.value.inference.resolution(id)) {
                        push(body.expr_range(id).shift(c.anchor), ReferenceKind::Read);
                    }
                }
            }
        }
        Definition::ScheduleKey { function, key } => {
            if let Some(f) = FnCtx::new(db, file, *function) {
                if let Some(sched) = &f.deco.schedule {
                    for k in &sched.space {
                        if canonical_key(&k.key) == canonical_key(key) {
                            push(f.deco_abs(k.key_range), ReferenceKind::Definition);
                        }
                    }
                }
                for id in f.body().expr_ids() {
                    if let Expr::Attribute { object, name, name_range } = f.body().expr(id) {
                        if canonical_key(name) == canonical_key(key) && matches!(f.inf.type_of(*object), Ty::Context) {
                            push(f.abs(*name_range), ReferenceKind::Read);
                        }
                    }
                }
            }
        }
        Definition::Builtin { path } => {
            for f in all_functions(db, file) {
                for id in f.body().expr_ids() {
                    let hit = match f.body().expr(id) {
                        Expr::Name(_) => f.inf.resolution(id) == Some(&Resolution::Builtin(path)),
                        Expr::Attribute { name_range, .. } => {
                            if matches!(f.inf.type_of(id), Ty::Builtin(p) if p == path) {
                                push(f.abs(*name_range), ReferenceKind::Read);
                            }
                            false
                        }
                        _ => false,
                    };
                    if hit {
                        push(f.abs(f.body().expr_range(id)), ReferenceKind::Read);
                    }
                }
            }
        }
        Definition::BuiltinParam { .. }
        | Definition::DType(_)
        | Definition::Policy(_)
        | Definition::Namespace(_)
        | Definition::Member { .. }
        | Definition::Keyword(_) => {}
    }
    out.sort_by_key(|r| (r.range.start, r.range.end, r.kind));
    out.dedup_by_key(|r| r.range);
    out
}

/// A string that names a parameter of a graph function: `"W"` in the `wrt=` of a
/// `grad(callee, wrt=("W",))` call in `g`. `range` is absolute, inside the quotes.
pub(crate) struct WrtString {
    pub callee: String,
    pub param: String,
    pub expr: ExprId,
    pub range: TextRange,
}

/// Every `wrt=` string of the `grad` calls in `g`.
pub(crate) fn grad_wrt_strings(g: &FnCtx<'_>, text: &str) -> Vec<WrtString> {
    let body = g.body();
    let mut out = Vec::new();
    for id in body.expr_ids() {
        let Expr::Call { func, args } = body.expr(id) else { continue };
        if !matches!(g.inf.type_of(body.unparen(*func)), Ty::Builtin("grad")) {
            continue;
        }
        // `grad(f, wrt)`: by position or by keyword.
        let arg = |name: &str, position: usize| {
            args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name)).or_else(|| {
                args.get(position).filter(|a| a.name.is_none() && args[..position].iter().all(|b| b.name.is_none()))
            })
        };
        let Some(Resolution::Function(callee)) = arg("f", 0).and_then(|a| g.inf.resolution(body.unparen(a.value)))
        else {
            continue;
        };
        let Some(wrt) = arg("wrt", 1) else { continue };
        let mut strings = vec![body.unparen(wrt.value)];
        while let Some(e) = strings.pop() {
            match body.expr(e) {
                Expr::Tuple(items) | Expr::List(items) => strings.extend(items.iter().map(|&i| body.unparen(i))),
                Expr::Str(param) => {
                    let whole = g.abs(body.expr_range(e));
                    let literal = &text[whole.start as usize..whole.end as usize];
                    if let Some(at) = literal.find(param.as_str()).filter(|_| !param.is_empty()) {
                        let start = whole.start + at as u32;
                        out.push(WrtString {
                            callee: callee.to_string(),
                            param: param.clone(),
                            expr: e,
                            range: TextRange::new(start, start + param.len() as u32),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    out
}
