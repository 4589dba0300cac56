//! A hand-written parser for the common, error-free case of a chunk.
//!
//! `tessera check` spends much of its frontend time in tree-sitter (a GLR parser
//! with an external scanner, and a tree to walk afterwards). This parser goes from
//! text to the item AST of `ast.rs` in one pass, and gives exactly what
//! `lower::lower` gives on tree-sitter's tree, ranges and arena order included,
//! or `None`. It never reports anything: on a syntax error, and on anything it does
//! not handle (tabs, line continuations, non-ASCII names, constructs the lowering
//! reports), the caller parses with tree-sitter, which owns every syntax diagnostic.
//! `tests/fast_parser.rs` holds the two to the same answers on every source in the
//! repository and on random mutations of them.

mod exprs;
mod lexer;

use std::sync::Arc;

use lexer::{Kind, Kw, Tok, P};

use super::ast::*;
use crate::text::TextRange;

/// The items of one chunk, or `None` where tree-sitter must parse it.
pub fn parse_items(text: &str) -> Option<Vec<Item>> {
    let toks = lexer::lex(text)?;
    let mut p = Parser { text, toks, pos: 0, anchor: 0, body: Body::default(), nesting: 0 };
    let mut items = Vec::new();
    while p.peek().kind != Kind::Eof {
        p.item(&mut items)?;
    }
    // A long left-associative chain (`x + x + ... + x`, thousands of terms) is parsed
    // by a loop, not by recursion, but every pass over its tree recurses: tree-sitter's
    // lowering reports it past its depth limit (E0100) instead.
    let deep = items.iter().any(|item| match &item.kind {
        ItemKind::Function(f) => too_deep(&f.def.arena) || too_deep(&f.decorators.arena),
        ItemKind::Constant(c) => too_deep(&c.arena),
        _ => false,
    });
    (!deep).then_some(items)
}

/// Whether an expression of `body` nests deeper than the lowering's limit. Children are
/// allocated before their parents, so one pass in id order sees each child's depth first.
fn too_deep(body: &Body) -> bool {
    let mut depth = vec![0u32; body.exprs.len()];
    for i in 0..body.exprs.len() {
        let mut d = 0;
        body.walk_children(ExprId(i as u32), |c| d = d.max(depth.get(c.0 as usize).copied().unwrap_or(0)));
        depth[i] = d + 1;
        if depth[i] > crate::syntax::lower::MAX_DEPTH {
            return true;
        }
    }
    false
}

pub(super) struct Parser<'a> {
    text: &'a str,
    toks: Vec<Tok>,
    pos: usize,
    /// The absolute offset the current arena's ranges count from.
    anchor: u32,
    body: Body,
    nesting: u32,
}

/// A parsed statement.
#[derive(Copy, Clone)]
struct S {
    id: StmtId,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Tok {
        self.toks[self.pos]
    }

    fn peek_at(&self, ahead: usize) -> Tok {
        self.toks[(self.pos + ahead).min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Tok {
        let t = self.toks[self.pos];
        if t.kind != Kind::Eof {
            self.pos += 1;
        }
        t
    }

    fn at_kw(&self, kw: Kw) -> bool {
        self.peek().kind == Kind::Kw(kw)
    }

    fn expect(&mut self, kind: Kind) -> Option<Tok> {
        (self.peek().kind == kind).then(|| self.bump())
    }

    fn text(&self, start: u32, end: u32) -> &'a str {
        &self.text[start as usize..end as usize]
    }

    fn rel(&self, start: u32, end: u32) -> TextRange {
        TextRange::new(start - self.anchor, end - self.anchor)
    }

    /// Starts a new arena whose ranges count from `anchor`.
    fn begin(&mut self, anchor: u32) {
        self.anchor = anchor;
        self.body = Body::default();
    }

    // ----- items -------------------------------------------------------------------

    fn item(&mut self, items: &mut Vec<Item>) -> Option<()> {
        let first = self.peek();
        match first.kind {
            Kind::P(P::At) | Kind::Kw(Kw::Def) => {
                items.push(self.function()?);
                return Some(());
            }
            Kind::Kw(Kw::Import | Kw::From) => {
                let import = self.import()?;
                let range = TextRange::new(first.start, self.toks[self.pos - 1].end);
                items.push(Item { anchor: first.start, range, kind: ItemKind::Import(import) });
            }
            _ => {
                self.begin(first.start);
                let left = self.expr_or_list()?;
                match self.peek().kind {
                    Kind::P(P::Assign | P::Colon) => {
                        let annotated = self.bump().kind == Kind::P(P::Colon);
                        let mut end;
                        if annotated {
                            // A constant's annotation is not lowered: parse it aside.
                            let kept = std::mem::take(&mut self.body);
                            end = self.expr()?.end;
                            self.body = kept;
                        } else {
                            end = 0;
                        }
                        let value = if !annotated || self.peek().kind == Kind::P(P::Assign) {
                            if annotated {
                                self.bump();
                            }
                            let v = self.expr_or_list()?;
                            end = v.end;
                            v.id
                        } else {
                            self.body.alloc_expr(Expr::Missing, self.rel(first.start, end))
                        };
                        let mut names = Vec::new();
                        collect_target_names(&self.body, left.id, &mut names);
                        let arena = std::mem::take(&mut self.body);
                        let constant = ConstantAst { names, target: left.id, value, arena };
                        let range = TextRange::new(first.start, end);
                        items.push(Item { anchor: first.start, range, kind: ItemKind::Constant(Arc::new(constant)) });
                    }
                    // A module docstring: no item.
                    _ if matches!(self.body.expr(left.id), Expr::Str(_)) => {}
                    _ => return None,
                }
            }
        }
        self.end_of_simple_statement()
    }

    /// `;` and the line's NEWLINE after a simple statement at the top level (the next
    /// statement of a `;` line is the next item).
    fn end_of_simple_statement(&mut self) -> Option<()> {
        if self.peek().kind == Kind::P(P::Semi) {
            self.bump();
            if self.peek().kind != Kind::Newline {
                return Some(());
            }
        }
        self.expect(Kind::Newline).map(|_| ())
    }

    fn import(&mut self) -> Option<ImportAst> {
        if self.bump().kind == Kind::Kw(Kw::Import) {
            let mut names = vec![self.imported_name()?];
            while self.peek().kind == Kind::P(P::Comma) {
                self.bump();
                names.push(self.imported_name()?);
            }
            return Some(ImportAst::Import { names });
        }
        let (module, module_range) = self.dotted()?;
        self.expect(Kind::Kw(Kw::Import))?;
        let mut names = Vec::new();
        let mut wildcard = false;
        if self.peek().kind == Kind::P(P::Star) {
            self.bump();
            wildcard = true;
        } else if self.peek().kind == Kind::P(P::LParen) {
            self.bump();
            loop {
                names.push(self.imported_name()?);
                if self.peek().kind != Kind::P(P::Comma) {
                    break;
                }
                self.bump();
                if self.peek().kind == Kind::P(P::RParen) {
                    break;
                }
            }
            self.expect(Kind::P(P::RParen))?;
        } else {
            names.push(self.imported_name()?);
            while self.peek().kind == Kind::P(P::Comma) {
                self.bump();
                names.push(self.imported_name()?);
            }
        }
        Some(ImportAst::From { module, module_range, names, wildcard })
    }

    fn dotted(&mut self) -> Option<(Vec<Name>, TextRange)> {
        let first = self.expect(Kind::Name)?;
        let mut path = vec![Name::new(self.text(first.start, first.end))];
        let mut end = first.end;
        while self.peek().kind == Kind::P(P::Dot) {
            self.bump();
            let next = self.expect(Kind::Name)?;
            path.push(self.text(next.start, next.end).into());
            end = next.end;
        }
        Some((path, TextRange::new(first.start, end)))
    }

    fn imported_name(&mut self) -> Option<ImportedName> {
        let (path, range) = self.dotted()?;
        if !self.at_kw(Kw::As) {
            return Some(ImportedName { path, alias: None, range, binding_range: range });
        }
        self.bump();
        let alias = self.expect(Kind::Name)?;
        let binding_range = TextRange::new(alias.start, alias.end);
        Some(ImportedName {
            path,
            alias: Some(self.text(alias.start, alias.end).into()),
            range: TextRange::new(range.start, alias.end),
            binding_range,
        })
    }

    /// A function with its decorators.
    fn function(&mut self) -> Option<Item> {
        let item_start = self.peek().start;
        self.begin(item_start);
        let mut decorators = Decorators::default();
        while self.peek().kind == Kind::P(P::At) {
            self.bump();
            if self.peek().kind != Kind::Name {
                return None;
            }
            let e = self.postfix_chain(false)?;
            decorators.exprs.push(e.id);
            if self.peek().kind == Kind::Newline {
                self.bump();
            }
        }
        decorators.arena = std::mem::take(&mut self.body);
        let def = self.expect(Kind::Kw(Kw::Def))?;
        self.begin(def.start);
        let name = self.expect(Kind::Name)?;
        let open = self.expect(Kind::P(P::LParen))?;
        let params = self.params()?;
        let close = self.expect(Kind::P(P::RParen))?;
        let return_type = if self.peek().kind == Kind::P(P::Arrow) {
            self.bump();
            Some(self.expr()?.id)
        } else {
            None
        };
        self.expect(Kind::P(P::Colon))?;
        let body_start = self.peek_body_start();
        let (body, end) = self.suite()?;
        let docstring = body.first().and_then(|&s| match self.body.stmt(s) {
            Stmt::Expr(e) => match self.body.expr(*e) {
                Expr::Str(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        });
        let function = FunctionDef {
            name: self.text(name.start, name.end).into(),
            name_range: self.rel(name.start, name.end),
            params,
            params_range: self.rel(open.start, close.end),
            return_type,
            body,
            docstring,
            header_range: self.rel(def.start, body_start),
            arena: std::mem::take(&mut self.body),
        };
        Some(Item {
            anchor: def.start,
            range: TextRange::new(item_start, end),
            kind: ItemKind::Function(Arc::new(FunctionAst {
                def: Arc::new(function),
                decorators: Arc::new(decorators),
                decorator_offset: def.start - item_start,
            })),
        })
    }

    /// Where a suite's block node starts: its first statement.
    fn peek_body_start(&self) -> u32 {
        match self.peek().kind {
            Kind::Indent => self.peek_at(1).start,
            _ => self.peek().start,
        }
    }

    fn params(&mut self) -> Option<Vec<Param>> {
        let mut params = Vec::new();
        let mut keyword_only = false;
        while self.peek().kind != Kind::P(P::RParen) {
            if self.peek().kind == Kind::P(P::Star) {
                self.bump();
                keyword_only = true;
            } else {
                let name = self.expect(Kind::Name)?;
                let mut end = name.end;
                let annotation = if self.peek().kind == Kind::P(P::Colon) {
                    self.bump();
                    let a = self.expr()?;
                    end = a.end;
                    Some(a.id)
                } else {
                    None
                };
                let default = if self.peek().kind == Kind::P(P::Assign) {
                    self.bump();
                    let d = self.expr()?;
                    end = d.end;
                    Some(d.id)
                } else {
                    None
                };
                params.push(Param {
                    name: self.text(name.start, name.end).into(),
                    name_range: self.rel(name.start, name.end),
                    annotation,
                    default,
                    keyword_only,
                    range: self.rel(name.start, end),
                });
            }
            if self.peek().kind != Kind::P(P::Comma) {
                break;
            }
            self.bump();
        }
        Some(params)
    }

    // ----- statements --------------------------------------------------------------

    /// After a header's `:`: an indented block, or simple statements on the same line.
    /// Returns the statements and the block's end.
    fn suite(&mut self) -> Option<(Vec<StmtId>, u32)> {
        let mut stmts = Vec::new();
        if self.peek().kind != Kind::Indent {
            let end = self.simple_statements(&mut stmts)?;
            return Some((stmts, end));
        }
        self.bump();
        loop {
            if self.peek().kind == Kind::Dedent {
                let end = self.bump().end;
                return Some((stmts, end));
            }
            self.statement(&mut stmts)?;
        }
    }

    fn statement(&mut self, stmts: &mut Vec<StmtId>) -> Option<()> {
        let t = self.peek();
        let compound = match t.kind {
            Kind::Kw(Kw::If) => self.if_statement()?,
            Kind::Kw(Kw::For) => self.for_statement()?,
            Kind::Kw(Kw::While) => self.while_statement()?,
            Kind::Kw(Kw::With) => self.with_statement()?,
            _ => {
                self.simple_statements(stmts)?;
                return Some(());
            }
        };
        stmts.push(compound.id);
        Some(())
    }

    /// `a; b; c` up to the NEWLINE, whose position is returned (it ends a block made
    /// of this line).
    fn simple_statements(&mut self, stmts: &mut Vec<StmtId>) -> Option<u32> {
        loop {
            stmts.push(self.simple_statement()?.id);
            if self.peek().kind == Kind::P(P::Semi) {
                self.bump();
                if self.peek().kind != Kind::Newline {
                    continue;
                }
            }
            return Some(self.expect(Kind::Newline)?.end);
        }
    }

    fn simple_statement(&mut self) -> Option<S> {
        let t = self.peek();
        let (stmt, end) = match t.kind {
            Kind::Kw(Kw::Pass) => (Stmt::Pass, self.bump().end),
            Kind::Kw(Kw::Break) => (Stmt::Break, self.bump().end),
            Kind::Kw(Kw::Continue) => (Stmt::Continue, self.bump().end),
            Kind::Kw(Kw::Return) => {
                let end = self.bump().end;
                if matches!(self.peek().kind, Kind::Newline | Kind::P(P::Semi)) {
                    (Stmt::Return(None), end)
                } else {
                    let v = self.expr_or_list()?;
                    (Stmt::Return(Some(v.id)), v.end)
                }
            }
            Kind::Name
            | Kind::Int
            | Kind::Float
            | Kind::Str
            | Kind::Kw(Kw::True | Kw::False | Kw::None | Kw::Not)
            | Kind::P(P::LParen | P::LBracket | P::LBrace | P::Minus | P::Plus | P::Tilde | P::Ellipsis) => {
                self.assignment_or_expression()?
            }
            _ => return None,
        };
        let range = self.rel(t.start, end);
        Some(S { id: self.body.alloc_stmt(stmt, range) })
    }

    fn assignment_or_expression(&mut self) -> Option<(Stmt, u32)> {
        let first = self.expr()?;
        let is_list = self.peek().kind == Kind::P(P::Comma);
        let left = self.list_after(first, Self::expr)?;
        Some(match self.peek().kind {
            Kind::P(P::Assign) => {
                self.bump();
                let value = self.expr_or_list()?;
                (Stmt::Assign { target: left.id, annotation: None, value: value.id }, value.end)
            }
            Kind::P(P::Colon) => {
                self.bump();
                let annotation = self.expr()?;
                if self.peek().kind == Kind::P(P::Assign) {
                    self.bump();
                    let value = self.expr_or_list()?;
                    (Stmt::Assign { target: left.id, annotation: Some(annotation.id), value: value.id }, value.end)
                } else {
                    // No value: the lowering puts a Missing at the statement's range.
                    let value = self.body.alloc_expr(Expr::Missing, self.rel(left.start, annotation.end));
                    (Stmt::Assign { target: left.id, annotation: Some(annotation.id), value }, annotation.end)
                }
            }
            Kind::P(P::AugAssign) => {
                // An augmented assignment's target is one expression, not a list.
                if is_list {
                    return None;
                }
                let op_tok = self.bump();
                let op = BinOp::from_symbol(self.text(op_tok.start, op_tok.end))?;
                let value = self.expr_or_list()?;
                let stmt = Stmt::AugAssign {
                    target: left.id,
                    op,
                    op_range: self.rel(op_tok.start, op_tok.end),
                    value: value.id,
                };
                (stmt, value.end)
            }
            _ => (Stmt::Expr(left.id), left.end),
        })
    }

    fn if_statement(&mut self) -> Option<S> {
        let start = self.bump().start;
        let cond = self.expr()?;
        self.expect(Kind::P(P::Colon))?;
        let (body, mut end) = self.suite()?;
        let mut branches = vec![IfBranch { cond: cond.id, body }];
        while self.at_kw(Kw::Elif) {
            self.bump();
            let cond = self.expr()?;
            self.expect(Kind::P(P::Colon))?;
            let (body, e) = self.suite()?;
            end = e;
            branches.push(IfBranch { cond: cond.id, body });
        }
        let orelse = self.else_clause(&mut end)?;
        let range = self.rel(start, end);
        Some(S { id: self.body.alloc_stmt(Stmt::If { branches, orelse }, range) })
    }

    /// An optional `else:` suite; moves `end` to its end when there is one.
    fn else_clause(&mut self, end: &mut u32) -> Option<Option<Vec<StmtId>>> {
        if !self.at_kw(Kw::Else) {
            return Some(None);
        }
        self.bump();
        self.expect(Kind::P(P::Colon))?;
        let (body, e) = self.suite()?;
        *end = e;
        Some(Some(body))
    }

    fn for_statement(&mut self) -> Option<S> {
        let start = self.bump().start;
        let target = self.for_target()?;
        self.expect(Kind::Kw(Kw::In))?;
        let iter = self.expr()?;
        self.expect(Kind::P(P::Colon))?;
        let (body, mut end) = self.suite()?;
        let orelse = self.else_clause(&mut end)?;
        let range = self.rel(start, end);
        let stmt = Stmt::For { target: target.id, iter: iter.id, body, orelse };
        Some(S { id: self.body.alloc_stmt(stmt, range) })
    }

    fn while_statement(&mut self) -> Option<S> {
        let start = self.bump().start;
        let cond = self.expr()?;
        self.expect(Kind::P(P::Colon))?;
        let (body, end) = self.suite()?;
        if self.at_kw(Kw::Else) {
            // `while ... else` is reported by the lowering.
            return None;
        }
        let range = self.rel(start, end);
        Some(S { id: self.body.alloc_stmt(Stmt::While { cond: cond.id, body }, range) })
    }

    fn with_statement(&mut self) -> Option<S> {
        let start = self.bump().start;
        let mut items = Vec::new();
        loop {
            let value = self.expr()?;
            let alias = if self.at_kw(Kw::As) {
                self.bump();
                Some(self.expr()?.id)
            } else {
                None
            };
            items.push(WithItem { value: value.id, alias });
            if self.peek().kind != Kind::P(P::Comma) {
                break;
            }
            self.bump();
        }
        self.expect(Kind::P(P::Colon))?;
        let (body, end) = self.suite()?;
        let range = self.rel(start, end);
        Some(S { id: self.body.alloc_stmt(Stmt::With { items, body }, range) })
    }
}

fn collect_target_names(body: &Body, target: ExprId, out: &mut Vec<(Name, TextRange)>) {
    match body.expr(target) {
        Expr::Name(n) => out.push((n.clone(), body.expr_range(target))),
        Expr::Tuple(items) | Expr::List(items) => {
            for &i in items {
                collect_target_names(body, i, out);
            }
        }
        Expr::Paren(inner) => collect_target_names(body, *inner, out),
        _ => {}
    }
}
