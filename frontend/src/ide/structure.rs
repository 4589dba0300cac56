//! The outline of a file (functions and constants), its code-lens targets, and its
//! folding ranges.

use super::lex::{self, TokKind};
use super::nav::{self, FnCtx};
use crate::check::FunctionKind;
use crate::db::{self, Db, SourceFile};
use crate::syntax::ast::{Body, ItemKind, Stmt, StmtId};
use crate::text::TextRange;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum SymbolKind {
    Kernel,
    /// `@jit` / `@autodiff`.
    Graph,
    Helper,
    Constant,
}

impl SymbolKind {
    /// The kind as the `tessera/kernels` request spells it.
    pub fn name(self) -> &'static str {
        match self {
            SymbolKind::Kernel => "kernel",
            SymbolKind::Graph => "graph",
            SymbolKind::Helper => "helper",
            SymbolKind::Constant => "constant",
        }
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FileSymbol {
    pub name: String,
    pub kind: SymbolKind,
    /// The decorators (`kernel.autotune`, `jit, autodiff`), "helper", or a constant's type.
    pub detail: String,
    /// The whole definition (decorators included).
    pub range: TextRange,
    pub name_range: TextRange,
}

/// Every function and constant of the file, in source order.
pub fn file_structure(db: &dyn Db, file: SourceFile) -> Vec<FileSymbol> {
    let mut out = Vec::new();
    for f in nav::all_functions(db, file) {
        let kind = match f.sig.kind {
            FunctionKind::Kernel => SymbolKind::Kernel,
            FunctionKind::Graph => SymbolKind::Graph,
            FunctionKind::Helper => SymbolKind::Helper,
        };
        let detail = match kind {
            SymbolKind::Kernel => f
                .sig
                .decorators
                .iter()
                .find(|d| d.starts_with("kernel"))
                .cloned()
                .unwrap_or_else(|| "kernel".to_string()),
            SymbolKind::Graph => f
                .sig
                .decorators
                .iter()
                .filter(|d| *d == "jit" || *d == "autodiff")
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            _ => "helper".to_string(),
        };
        out.push(FileSymbol {
            name: f.name().to_string(),
            kind,
            detail,
            range: f.range,
            name_range: f.abs(f.ast.name_range),
        });
    }
    for c in nav::all_constants(db, file) {
        for (name, range) in &c.ast.names {
            let ty = c.value.names.get(name.as_str()).unwrap_or(&c.value.ty);
            // A derived kernel (`name = kernel.with_schedule(S)`) is a kernel symbol.
            let key = crate::db::FnKey::new(db, file, name.as_str(), 0);
            let derived = crate::db::derived_kernel(db, key)
                .filter(|_| crate::check::fn_decorators(db, key).kind == FunctionKind::Kernel);
            let (kind, detail) = match derived {
                Some(d) => (SymbolKind::Kernel, format!("{}.with_schedule", d.original.name(db))),
                None => (SymbolKind::Constant, if ty.is_unknown() { String::new() } else { ty.to_string() }),
            };
            out.push(FileSymbol {
                name: name.to_string(),
                kind,
                detail,
                range: c.range,
                name_range: range.shift(c.anchor),
            });
        }
    }
    out.sort_by_key(|s| (s.range.start, s.name_range.start));
    out
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FoldKind {
    Region,
    Comment,
    Imports,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Fold {
    pub range: TextRange,
    pub kind: FoldKind,
}

/// Folding ranges: functions, compound statements, multi-line brackets and strings,
/// runs of comment lines, and the import block. Ranges may sit on one line; front ends
/// drop those.
pub fn folding_ranges(db: &dyn Db, file: SourceFile) -> Vec<Fold> {
    let text = file.text(db);
    let mut out = Vec::new();
    let region = |range| Fold { range, kind: FoldKind::Region };
    for f in nav::all_functions(db, file) {
        let start = f.abs(f.ast.header_range).start;
        out.push(region(TextRange::new(start, f.range.end)));
        stmt_folds(&f, &f.ast.body, text, &mut out);
    }
    // Imports: from the first to the last of a run of import items.
    let mut run: Option<TextRange> = None;
    for item in &db::parse(db, file).module.items {
        if matches!(item.kind, ItemKind::Import(_)) {
            run = Some(run.map_or(item.range, |r| r.cover(item.range)));
        } else if let Some(r) = run.take() {
            out.push(Fold { range: r, kind: FoldKind::Imports });
        }
    }
    if let Some(r) = run {
        out.push(Fold { range: r, kind: FoldKind::Imports });
    }
    // Brackets, strings and comment runs, from the tokens.
    let toks = lex::lex(text, 0);
    let mut stack = Vec::new();
    let mut comment_run: Option<(TextRange, usize)> = None;
    let mut line_has_code = false;
    for t in &toks {
        match t.kind {
            TokKind::Open => stack.push(t.range.start),
            TokKind::Close => {
                if let Some(open) = stack.pop() {
                    // Keep the closing bracket visible when it starts its line.
                    let line_start = text[..t.range.start as usize].rfind('\n').map_or(0, |p| p + 1);
                    let only_ws = text[line_start..t.range.start as usize].chars().all(char::is_whitespace);
                    let end = if only_ws && line_start > 0 { line_start as u32 - 1 } else { t.range.end };
                    if end > open {
                        out.push(region(TextRange::new(open, end)));
                    }
                }
            }
            TokKind::Str => out.push(region(t.range)),
            _ => {}
        }
        match t.kind {
            TokKind::Comment if !line_has_code => {
                comment_run = Some(match comment_run {
                    Some((r, n)) => (r.cover(t.range), n + 1),
                    None => (t.range, 1),
                });
            }
            TokKind::Newline => line_has_code = false,
            TokKind::Comment => {}
            _ => {
                line_has_code = true;
                if let Some((r, n)) = comment_run.take() {
                    if n >= 2 {
                        out.push(Fold { range: r, kind: FoldKind::Comment });
                    }
                }
            }
        }
    }
    if let Some((r, n)) = comment_run {
        if n >= 2 {
            out.push(Fold { range: r, kind: FoldKind::Comment });
        }
    }
    out.sort_by_key(|f| (f.range.start, std::cmp::Reverse(f.range.end)));
    out
}

fn last_end(f: &FnCtx<'_>, body: &Body, stmts: &[StmtId]) -> Option<u32> {
    stmts.last().map(|s| f.abs(body.stmt_range(*s)).end)
}

fn stmt_folds(f: &FnCtx<'_>, stmts: &[StmtId], text: &str, out: &mut Vec<Fold>) {
    let body = f.body();
    for &s in stmts {
        let range = f.abs(body.stmt_range(s));
        let region = |range| Fold { range, kind: FoldKind::Region };
        match body.stmt(s) {
            Stmt::If { branches, orelse } => {
                let mut prev_end = range.start;
                for (i, b) in branches.iter().enumerate() {
                    let start = if i == 0 { range.start } else { f.abs(body.expr_range(b.cond)).start };
                    if let Some(end) = last_end(f, body, &b.body) {
                        out.push(region(TextRange::new(start, end)));
                        prev_end = end;
                    }
                    stmt_folds(f, &b.body, text, out);
                }
                if let Some(orelse) = orelse {
                    if let (Some(first), Some(end)) = (orelse.first(), last_end(f, body, orelse)) {
                        // The `else` keyword between the last branch and the else body.
                        let first_start = f.abs(body.stmt_range(*first)).start;
                        let gap = TextRange::new(prev_end.min(first_start), first_start);
                        let else_at = lex::lex(gap.slice(text), gap.start)
                            .into_iter()
                            .find(|t| t.kind == TokKind::Keyword && t.text(text) == "else")
                            .map_or(first_start, |t| t.range.start);
                        out.push(region(TextRange::new(else_at, end)));
                    }
                    stmt_folds(f, orelse, text, out);
                }
            }
            Stmt::For { body: b, orelse, .. } => {
                out.push(region(range));
                stmt_folds(f, b, text, out);
                if let Some(o) = orelse {
                    stmt_folds(f, o, text, out);
                }
            }
            Stmt::While { body: b, .. } | Stmt::With { body: b, .. } => {
                out.push(region(range));
                stmt_folds(f, b, text, out);
            }
            _ => {}
        }
    }
}
