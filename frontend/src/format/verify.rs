//! Positions zeroed out of an AST (`strip_module`), so that the formatter's output and
//! its input compare equal exactly when they are the same program. Separate from the
//! printer because it is pure data plumbing over `syntax::ast`, also used by tests.

use std::sync::Arc;

use crate::syntax::ast;
use crate::text::TextRange;

/// The module with every position zeroed, for comparisons "modulo ranges".
pub fn strip_module(m: &ast::ModuleAst) -> ast::ModuleAst {
    ast::ModuleAst { items: m.items.iter().map(strip_item).collect() }
}

pub(super) fn strip_item(item: &ast::Item) -> ast::Item {
    use ast::ItemKind;
    let kind = match &item.kind {
        ItemKind::Function(f) => ItemKind::Function(Arc::new(ast::FunctionAst {
            decorators: Arc::new(ast::Decorators {
                exprs: f.decorators.exprs.clone(),
                arena: strip_body(&f.decorators.arena),
            }),
            decorator_offset: 0,
            def: Arc::new(ast::FunctionDef {
                name: f.name.clone(),
                name_range: TextRange::default(),
                params: f
                    .params
                    .iter()
                    .map(|p| ast::Param { name_range: TextRange::default(), range: TextRange::default(), ..p.clone() })
                    .collect(),
                params_range: TextRange::default(),
                return_type: f.return_type,
                body: f.body.clone(),
                docstring: f.docstring.clone(),
                header_range: TextRange::default(),
                arena: strip_body(&f.arena),
            }),
        })),
        ItemKind::Constant(c) => ItemKind::Constant(Arc::new(ast::ConstantAst {
            names: c.names.iter().map(|(n, _)| (n.clone(), TextRange::default())).collect(),
            target: c.target,
            value: c.value,
            arena: strip_body(&c.arena),
        })),
        ItemKind::Import(import) => {
            let strip_names = |names: &[ast::ImportedName]| -> Vec<ast::ImportedName> {
                names
                    .iter()
                    .map(|n| ast::ImportedName {
                        range: TextRange::default(),
                        binding_range: TextRange::default(),
                        ..n.clone()
                    })
                    .collect()
            };
            ItemKind::Import(match import {
                ast::ImportAst::Import { names } => ast::ImportAst::Import { names: strip_names(names) },
                ast::ImportAst::From { module, names, wildcard, .. } => ast::ImportAst::From {
                    module: module.clone(),
                    module_range: TextRange::default(),
                    names: strip_names(names),
                    wildcard: *wildcard,
                },
            })
        }
        ItemKind::Invalid => ItemKind::Invalid,
    };
    ast::Item { anchor: 0, range: TextRange::default(), kind }
}

fn strip_body(body: &ast::Body) -> ast::Body {
    use ast::{Expr, Stmt};
    ast::Body {
        exprs: body
            .exprs
            .iter()
            .map(|e| match e {
                Expr::Attribute { object, name, .. } => {
                    Expr::Attribute { object: *object, name: name.clone(), name_range: TextRange::default() }
                }
                Expr::Call { func, args } => Expr::Call {
                    func: *func,
                    args: args
                        .iter()
                        .map(|a| ast::Arg {
                            name: a.name.as_ref().map(|(n, _)| (n.clone(), TextRange::default())),
                            value: a.value,
                        })
                        .collect(),
                },
                other => other.clone(),
            })
            .collect(),
        expr_ranges: vec![TextRange::default(); body.expr_ranges.len()],
        stmts: body
            .stmts
            .iter()
            .map(|s| match s {
                Stmt::AugAssign { target, op, value, .. } => {
                    Stmt::AugAssign { target: *target, op: *op, op_range: TextRange::default(), value: *value }
                }
                other => other.clone(),
            })
            .collect(),
        stmt_ranges: vec![TextRange::default(); body.stmt_ranges.len()],
    }
}
