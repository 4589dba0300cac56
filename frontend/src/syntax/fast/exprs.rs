//! Expressions for the fast parser: precedence climbing in the grammar's order
//! (conditional < or < and < not < comparison < | < ^ < & < shifts < + - < * @ / // %
//! < unary < ** < calls, attributes and subscripts), allocating each node as soon as
//! it is complete, which is the post-order the tree-sitter lowering allocates in.

use super::lexer::{Kind, Kw, P};
use super::Parser;
use crate::syntax::ast::*;
use crate::syntax::lower::{parse_int, unquote};
use crate::text::TextRange;

/// Deeper nesting goes to tree-sitter, whose lowering reports it past its own limit.
const MAX_NESTING: u32 = 100;

/// An expression with its absolute range.
#[derive(Copy, Clone)]
pub(super) struct E {
    pub id: ExprId,
    pub start: u32,
    pub end: u32,
}

impl Parser<'_> {
    pub(super) fn alloc(&mut self, expr: Expr, start: u32, end: u32) -> E {
        let range = TextRange::new(start - self.anchor, end - self.anchor);
        E { id: self.body.alloc_expr(expr, range), start, end }
    }

    /// `_expression`: everything but unparenthesized tuples.
    pub(super) fn expr(&mut self) -> Option<E> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return None;
        }
        let e = self.conditional();
        self.nesting -= 1;
        e
    }

    fn conditional(&mut self) -> Option<E> {
        let then = self.or_test()?;
        if !self.at_kw(Kw::If) {
            return Some(then);
        }
        self.bump();
        let cond = self.or_test()?;
        self.expect(Kind::Kw(Kw::Else))?;
        let otherwise = self.expr()?;
        Some(self.alloc(
            Expr::IfExpr { cond: cond.id, then: then.id, otherwise: otherwise.id },
            then.start,
            otherwise.end,
        ))
    }

    fn or_test(&mut self) -> Option<E> {
        self.bool_chain(Kw::Or, BoolOp::Or, Self::and_test)
    }

    fn and_test(&mut self) -> Option<E> {
        self.bool_chain(Kw::And, BoolOp::And, Self::not_test)
    }

    /// `a kw b kw c`, left-associative, with operands at the next level.
    fn bool_chain(&mut self, kw: Kw, op: BoolOp, operand: fn(&mut Self) -> Option<E>) -> Option<E> {
        let mut lhs = operand(self)?;
        while self.at_kw(kw) {
            self.bump();
            let rhs = operand(self)?;
            lhs = self.alloc(Expr::BoolOp { op, lhs: lhs.id, rhs: rhs.id }, lhs.start, rhs.end);
        }
        Some(lhs)
    }

    fn not_test(&mut self) -> Option<E> {
        if !self.at_kw(Kw::Not) {
            return self.comparison();
        }
        let start = self.bump().start;
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return None;
        }
        let operand = self.not_test()?;
        self.nesting -= 1;
        Some(self.alloc(Expr::Unary { op: UnaryOp::Not, operand: operand.id }, start, operand.end))
    }

    fn comparison(&mut self) -> Option<E> {
        let mut lhs = self.binary(0)?;
        loop {
            let op = match self.peek().kind {
                Kind::P(P::Lt) => CmpOp::Lt,
                Kind::P(P::Le) => CmpOp::Le,
                Kind::P(P::Gt) => CmpOp::Gt,
                Kind::P(P::Ge) => CmpOp::Ge,
                Kind::P(P::EqEq) => CmpOp::Eq,
                Kind::P(P::NotEq) => CmpOp::Ne,
                Kind::Kw(Kw::In) => CmpOp::In,
                Kind::Kw(Kw::Is) if self.peek_at(1).kind == Kind::Kw(Kw::Not) => {
                    self.bump();
                    CmpOp::IsNot
                }
                Kind::Kw(Kw::Is) => CmpOp::Is,
                Kind::Kw(Kw::Not) if self.peek_at(1).kind == Kind::Kw(Kw::In) => {
                    self.bump();
                    CmpOp::NotIn
                }
                _ => return Some(lhs),
            };
            self.bump();
            // The grammar's right operand is any `_expression`; Python's is not. Leave
            // the difference (`a < not b`) to tree-sitter.
            if self.at_kw(Kw::Not) {
                return None;
            }
            let rhs = self.binary(0)?;
            lhs = self.alloc(Expr::Compare { op, lhs: lhs.id, rhs: rhs.id }, lhs.start, rhs.end);
        }
    }

    /// Left-associative binary levels from `level` up; then unary and power.
    fn binary(&mut self, level: usize) -> Option<E> {
        const LEVELS: [&[(P, BinOp)]; 6] = [
            &[(P::Pipe, BinOp::BitOr)],
            &[(P::Caret, BinOp::BitXor)],
            &[(P::Amp, BinOp::BitAnd)],
            &[(P::Shl, BinOp::Shl), (P::Shr, BinOp::Shr)],
            &[(P::Plus, BinOp::Add), (P::Minus, BinOp::Sub)],
            &[
                (P::Star, BinOp::Mul),
                (P::At, BinOp::MatMul),
                (P::Slash, BinOp::Div),
                (P::DoubleSlash, BinOp::FloorDiv),
                (P::Percent, BinOp::Mod),
            ],
        ];
        let Some(ops) = LEVELS.get(level) else { return self.unary() };
        let mut lhs = self.binary(level + 1)?;
        loop {
            let Kind::P(p) = self.peek().kind else { return Some(lhs) };
            let Some(&(_, op)) = ops.iter().find(|(q, _)| *q == p) else { return Some(lhs) };
            self.bump();
            let rhs = self.binary(level + 1)?;
            lhs = self.alloc(Expr::Binary { op, lhs: lhs.id, rhs: rhs.id }, lhs.start, rhs.end);
        }
    }

    fn unary(&mut self) -> Option<E> {
        let op = match self.peek().kind {
            Kind::P(P::Minus) => UnaryOp::Neg,
            Kind::P(P::Plus) => UnaryOp::Pos,
            Kind::P(P::Tilde) => UnaryOp::Invert,
            _ => return self.power(),
        };
        let start = self.bump().start;
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return None;
        }
        let operand = self.unary()?;
        self.nesting -= 1;
        Some(self.alloc(Expr::Unary { op, operand: operand.id }, start, operand.end))
    }

    fn power(&mut self) -> Option<E> {
        let base = self.postfix()?;
        if self.peek().kind != Kind::P(P::DoubleStar) {
            return Some(base);
        }
        self.bump();
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return None;
        }
        let exponent = self.unary()?;
        self.nesting -= 1;
        Some(self.alloc(Expr::Binary { op: BinOp::Pow, lhs: base.id, rhs: exponent.id }, base.start, exponent.end))
    }

    /// An atom and its calls, attributes and subscripts; `subscripts: false` for a
    /// decorator, whose expression is a name, an attribute or a call.
    pub(super) fn postfix_chain(&mut self, subscripts: bool) -> Option<E> {
        let mut e = self.atom()?;
        loop {
            match self.peek().kind {
                Kind::P(P::Dot) => {
                    self.bump();
                    let name = self.expect(Kind::Name)?;
                    let text = self.text(name.start, name.end);
                    let name_range = self.rel(name.start, name.end);
                    e = self.alloc(Expr::Attribute { object: e.id, name: text.into(), name_range }, e.start, name.end);
                }
                Kind::P(P::LParen) => {
                    self.bump();
                    let args = self.arguments()?;
                    let close = self.expect(Kind::P(P::RParen))?;
                    e = self.alloc(Expr::Call { func: e.id, args }, e.start, close.end);
                }
                Kind::P(P::LBracket) if subscripts => {
                    self.bump();
                    let mut indices = Vec::new();
                    loop {
                        indices.push(self.subscript_item()?.id);
                        if self.peek().kind != Kind::P(P::Comma) {
                            break;
                        }
                        self.bump();
                        if self.peek().kind == Kind::P(P::RBracket) {
                            break;
                        }
                    }
                    let close = self.expect(Kind::P(P::RBracket))?;
                    e = self.alloc(Expr::Subscript { value: e.id, indices }, e.start, close.end);
                }
                _ => return Some(e),
            }
        }
    }

    fn postfix(&mut self) -> Option<E> {
        self.postfix_chain(true)
    }

    fn arguments(&mut self) -> Option<Vec<Arg>> {
        let mut args = Vec::new();
        while self.peek().kind != Kind::P(P::RParen) {
            if self.peek().kind == Kind::Name && self.peek_at(1).kind == Kind::P(P::Assign) {
                let name = self.bump();
                self.bump();
                let value = self.expr()?;
                let text = self.text(name.start, name.end);
                args.push(Arg { name: Some((text.into(), self.rel(name.start, name.end))), value: value.id });
            } else {
                args.push(Arg { name: None, value: self.expr()?.id });
            }
            if self.peek().kind != Kind::P(P::Comma) {
                break;
            }
            self.bump();
        }
        Some(args)
    }

    /// An index or a slice (`start:stop:step`, each part optional).
    fn subscript_item(&mut self) -> Option<E> {
        let first = self.peek();
        let start = if first.kind == Kind::P(P::Colon) { None } else { Some(self.expr()?) };
        if self.peek().kind != Kind::P(P::Colon) {
            return start;
        }
        let mut end = self.bump().end;
        let ends = |k: Kind| matches!(k, Kind::P(P::Colon | P::Comma | P::RBracket));
        let stop = if ends(self.peek().kind) { None } else { Some(self.expr()?) };
        if let Some(s) = stop {
            end = s.end;
        }
        let mut step = None;
        if self.peek().kind == Kind::P(P::Colon) {
            end = self.bump().end;
            if !ends(self.peek().kind) {
                let s = self.expr()?;
                end = s.end;
                step = Some(s);
            }
        }
        Some(self.alloc(
            Expr::Slice { start: start.map(|e| e.id), stop: stop.map(|e| e.id), step: step.map(|e| e.id) },
            first.start,
            end,
        ))
    }

    fn atom(&mut self) -> Option<E> {
        let t = self.bump();
        let expr = match t.kind {
            Kind::Name => Expr::Name(self.text(t.start, t.end).into()),
            Kind::Int => Expr::Int(parse_int(self.text(t.start, t.end))?),
            Kind::Float => Expr::Float(FloatLit::new(self.text(t.start, t.end).replace('_', "").parse().ok()?)),
            Kind::Str => {
                let (value, error) = unquote(self.text(t.start, t.end));
                if error.is_some() {
                    return None;
                }
                Expr::Str(value)
            }
            Kind::Kw(Kw::True) => Expr::Bool(true),
            Kind::Kw(Kw::False) => Expr::Bool(false),
            Kind::Kw(Kw::None) => Expr::NoneLit,
            Kind::P(P::Ellipsis) => Expr::Ellipsis,
            Kind::P(P::LParen) => return self.parenthesized(t.start),
            Kind::P(P::LBracket) => {
                let items = self.comma_list(P::RBracket)?;
                let close = self.expect(Kind::P(P::RBracket))?;
                return Some(self.alloc(Expr::List(items), t.start, close.end));
            }
            Kind::P(P::LBrace) => {
                let mut pairs = Vec::new();
                while self.peek().kind != Kind::P(P::RBrace) {
                    let key = self.expr()?;
                    self.expect(Kind::P(P::Colon))?;
                    let value = self.expr()?;
                    pairs.push((key.id, value.id));
                    if self.peek().kind != Kind::P(P::Comma) {
                        break;
                    }
                    self.bump();
                }
                let close = self.expect(Kind::P(P::RBrace))?;
                return Some(self.alloc(Expr::Dict(pairs), t.start, close.end));
            }
            _ => return None,
        };
        Some(self.alloc(expr, t.start, t.end))
    }

    /// After `(`: `()`, `(x)`, `(x,)`, `(x, y)`.
    fn parenthesized(&mut self, open: u32) -> Option<E> {
        if self.peek().kind == Kind::P(P::RParen) {
            let close = self.bump();
            return Some(self.alloc(Expr::Tuple(Vec::new()), open, close.end));
        }
        let first = self.expr()?;
        if self.peek().kind == Kind::P(P::RParen) {
            let close = self.bump();
            return Some(self.alloc(Expr::Paren(first.id), open, close.end));
        }
        self.expect(Kind::P(P::Comma))?;
        let mut items = vec![first.id];
        items.extend(self.comma_list(P::RParen)?);
        let close = self.expect(Kind::P(P::RParen))?;
        Some(self.alloc(Expr::Tuple(items), open, close.end))
    }

    /// Comma-separated expressions up to (not including) `close`, trailing comma allowed.
    fn comma_list(&mut self, close: P) -> Option<Vec<ExprId>> {
        let mut items = Vec::new();
        while self.peek().kind != Kind::P(close) {
            items.push(self.expr()?.id);
            if self.peek().kind != Kind::P(P::Comma) {
                break;
            }
            self.bump();
        }
        Some(items)
    }

    /// `_expression` or an unparenthesized list (`a, b` / `a,`): a statement's
    /// expression, an assignment's sides, a return value.
    pub(super) fn expr_or_list(&mut self) -> Option<E> {
        let first = self.expr()?;
        self.list_after(first, Self::expr)
    }

    /// A `for` loop's target: primaries, so that `in` ends it.
    pub(super) fn for_target(&mut self) -> Option<E> {
        let first = self.binary(0)?;
        self.list_after(first, |p| p.binary(0))
    }

    pub(super) fn list_after(&mut self, first: E, mut item: impl FnMut(&mut Self) -> Option<E>) -> Option<E> {
        if self.peek().kind != Kind::P(P::Comma) {
            return Some(first);
        }
        let mut end = self.bump().end;
        let mut items = vec![first.id];
        while self.starts_expression() {
            let e = item(self)?;
            items.push(e.id);
            end = e.end;
            if self.peek().kind != Kind::P(P::Comma) {
                break;
            }
            end = self.bump().end;
        }
        Some(self.alloc(Expr::Tuple(items), first.start, end))
    }

    fn starts_expression(&self) -> bool {
        match self.peek().kind {
            Kind::Name | Kind::Int | Kind::Float | Kind::Str => true,
            Kind::Kw(k) => matches!(k, Kw::True | Kw::False | Kw::None | Kw::Not),
            Kind::P(p) => {
                matches!(p, P::LParen | P::LBracket | P::LBrace | P::Minus | P::Plus | P::Tilde | P::Ellipsis)
            }
            _ => false,
        }
    }
}
