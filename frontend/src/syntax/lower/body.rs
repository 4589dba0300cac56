//! Lowering inside one item: function definitions, parameters, constants, statements
//! and expressions, allocated into the item's arena with ranges relative to its anchor.
//! Separate from the file-level walk in `mod.rs` (imports, item boundaries), which
//! creates one `Cx` per item and shares its cursor and diagnostics with it.

use tree_sitter::Node;

use super::literals::{parse_int, unquote};
use super::{ids, range_of, Kids, Lowering, MAX_DEPTH};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

/// The lowering context of one item: its arena and anchor.
pub(super) struct Cx<'l, 'a, 't> {
    pub(super) lw: &'l mut Lowering<'a, 't>,
    pub(super) anchor: u32,
    pub(super) body: Body,
    pub(super) depth: u32,
    /// Set when an expression too deep was reported, until lowering climbs out of it:
    /// both operands of the node at the limit are too deep, one diagnostic says so.
    pub(super) too_deep_reported: bool,
}

impl<'l, 'a, 't> Cx<'l, 'a, 't> {
    pub(super) fn rel(&self, node: Node) -> TextRange {
        range_of(node).unshift(self.anchor)
    }

    fn src(&self, node: Node) -> &'a str {
        self.lw.src(node)
    }

    pub(super) fn kids(&mut self, node: Node<'t>) -> Kids<'t> {
        self.lw.kids(node)
    }

    fn report(&mut self, code: Code, node: Node, message: impl Into<String>) {
        self.lw.diagnostics.push(Diagnostic::new(code, range_of(node), message));
    }

    pub(super) fn missing(&mut self, range: TextRange) -> ExprId {
        self.body.alloc_expr(Expr::Missing, range)
    }

    fn opt_expr(&mut self, node: Option<Node<'t>>, fallback: TextRange) -> ExprId {
        match node {
            Some(n) => self.expr(n),
            None => self.missing(fallback),
        }
    }

    // ----- items -------------------------------------------------------------------

    /// The definition of a function, with ranges relative to its `def` keyword.
    pub(super) fn function_def(&mut self, def: Node<'t>) -> Option<FunctionDef> {
        let id = ids();
        if def.kind_id() != id.k_function_definition {
            return None;
        }
        let kids = self.kids(def);
        let name_node = kids.field(id.f_name)?;
        let params_node = kids.field(id.f_parameters);
        let params = match params_node {
            Some(p) => self.params(p),
            None => Vec::new(),
        };
        let return_type = kids.field(id.f_return_type).map(|r| self.expr(r));
        let body_node = kids.field(id.f_body);
        let header_end = body_node.map_or(def.end_byte(), |b| b.start_byte()) as u32;
        let (body, docstring) = match body_node {
            Some(b) => {
                let stmts = self.kids(b);
                let docstring = self.docstring(&stmts);
                (self.block_of(stmts), docstring)
            }
            None => (Vec::new(), None),
        };
        Some(FunctionDef {
            name: self.src(name_node).into(),
            name_range: self.rel(name_node),
            params,
            params_range: params_node.map(|p| self.rel(p)).unwrap_or_default(),
            return_type,
            body,
            docstring,
            header_range: TextRange::new(def.start_byte() as u32, header_end).unshift(self.anchor),
            arena: std::mem::take(&mut self.body),
        })
    }

    fn docstring(&mut self, block: &Kids<'t>) -> Option<String> {
        let first = block.named().next()?;
        if first.kind_id() != ids().k_expression_statement {
            return None;
        }
        let s = self.kids(first).named().next()?;
        (s.kind_id() == ids().k_string).then(|| unquote(self.src(s)).0)
    }

    fn params(&mut self, node: Node<'t>) -> Vec<Param> {
        let id = ids();
        let mut params = Vec::new();
        let mut keyword_only = false;
        let kids = self.kids(node);
        for p in kids.named().collect::<Vec<_>>() {
            let k = p.kind_id();
            let (name_node, annotation, default) = if k == id.k_identifier {
                (Some(p), None, None)
            } else if k == id.k_typed_parameter || k == id.k_default_parameter || k == id.k_typed_default_parameter {
                let pk = self.kids(p);
                (pk.field(id.f_name), pk.field(id.f_type), pk.field(id.f_value))
            } else if k == id.k_keyword_separator {
                keyword_only = true;
                continue;
            } else {
                continue; // ERROR nodes: already reported
            };
            let Some(name_node) = name_node else { continue };
            let annotation = annotation.map(|a| self.expr(a));
            let default = default.map(|d| self.expr(d));
            params.push(Param {
                name: self.src(name_node).into(),
                name_range: self.rel(name_node),
                annotation,
                default,
                keyword_only,
                range: self.rel(p),
            });
        }
        params
    }

    pub(super) fn constant(&mut self, node: Node<'t>) -> Option<ConstantAst> {
        let id = ids();
        let kids = self.kids(node);
        let left = kids.field(id.f_left)?;
        let target = self.expr(left);
        let value = self.opt_expr(kids.field(id.f_right), self.rel(node));
        let mut names = Vec::new();
        self.collect_target_names(target, &mut names);
        Some(ConstantAst { names, target, value, arena: std::mem::take(&mut self.body) })
    }

    fn collect_target_names(&self, target: ExprId, out: &mut Vec<(Name, TextRange)>) {
        match self.body.expr(target) {
            Expr::Name(n) => out.push((n.clone(), self.body.expr_range(target))),
            Expr::Tuple(items) | Expr::List(items) => {
                for &i in items {
                    self.collect_target_names(i, out);
                }
            }
            Expr::Paren(inner) => self.collect_target_names(*inner, out),
            _ => {}
        }
    }

    // ----- statements --------------------------------------------------------------

    fn block(&mut self, node: Node<'t>) -> Vec<StmtId> {
        let kids = self.kids(node);
        self.block_of(kids)
    }

    fn block_of(&mut self, kids: Kids<'t>) -> Vec<StmtId> {
        let mut stmts = Vec::with_capacity(kids.items.len());
        for child in kids.named().collect::<Vec<_>>() {
            if let Some(s) = self.stmt(child) {
                stmts.push(s);
            }
        }
        stmts
    }

    fn stmt(&mut self, node: Node<'t>) -> Option<StmtId> {
        let id = ids();
        let range = self.rel(node);
        let k = node.kind_id();
        let stmt = if node.is_error() {
            Stmt::Invalid
        } else if k == id.k_expression_statement {
            let inner = self.kids(node).named().next()?;
            let ik = inner.kind_id();
            if ik == id.k_assignment || ik == id.k_augmented_assignment {
                return self.stmt(inner);
            }
            Stmt::Expr(self.expr(inner))
        } else if k == id.k_assignment {
            let kids = self.kids(node);
            let target = self.opt_expr(kids.field(id.f_left), range);
            let annotation = kids.field(id.f_type).map(|t| self.expr(t));
            let value = self.opt_expr(kids.field(id.f_right), range);
            Stmt::Assign { target, annotation, value }
        } else if k == id.k_augmented_assignment {
            let kids = self.kids(node);
            let target = self.opt_expr(kids.field(id.f_left), range);
            let op_node = kids.field(id.f_operator);
            let op = op_node.and_then(|o| BinOp::from_symbol(self.src(o))).unwrap_or(BinOp::Add);
            let op_range = op_node.map(|o| self.rel(o)).unwrap_or(range);
            let value = self.opt_expr(kids.field(id.f_right), range);
            Stmt::AugAssign { target, op, op_range, value }
        } else if k == id.k_return_statement {
            let value = self.kids(node).named().next();
            Stmt::Return(value.map(|v| self.expr(v)))
        } else if k == id.k_pass_statement {
            Stmt::Pass
        } else if k == id.k_break_statement {
            Stmt::Break
        } else if k == id.k_continue_statement {
            Stmt::Continue
        } else if k == id.k_if_statement {
            let kids = self.kids(node);
            let cond = self.opt_expr(kids.field(id.f_condition), range);
            let body = match kids.field(id.f_consequence) {
                Some(b) => self.block(b),
                None => Vec::new(),
            };
            let mut branches = vec![IfBranch { cond, body }];
            let mut orelse = None;
            for alt in kids.fields(id.f_alternative).collect::<Vec<_>>() {
                let ak = self.kids(alt);
                if alt.kind_id() == id.k_elif_clause {
                    let cond = self.opt_expr(ak.field(id.f_condition), self.rel(alt));
                    let body = match ak.field(id.f_consequence) {
                        Some(b) => self.block(b),
                        None => Vec::new(),
                    };
                    branches.push(IfBranch { cond, body });
                } else if alt.kind_id() == id.k_else_clause {
                    orelse = Some(match ak.field(id.f_body) {
                        Some(b) => self.block(b),
                        None => Vec::new(),
                    });
                }
            }
            Stmt::If { branches, orelse }
        } else if k == id.k_for_statement {
            let kids = self.kids(node);
            let target = self.opt_expr(kids.field(id.f_left), range);
            let iter = self.opt_expr(kids.field(id.f_right), range);
            let body = match kids.field(id.f_body) {
                Some(b) => self.block(b),
                None => Vec::new(),
            };
            let orelse = match kids.field(id.f_alternative) {
                Some(e) => match self.kids(e).field(id.f_body) {
                    Some(b) => Some(self.block(b)),
                    None => Some(Vec::new()),
                },
                None => None,
            };
            Stmt::For { target, iter, body, orelse }
        } else if k == id.k_while_statement {
            let kids = self.kids(node);
            let cond = self.opt_expr(kids.field(id.f_condition), range);
            let body = match kids.field(id.f_body) {
                Some(b) => self.block(b),
                None => Vec::new(),
            };
            if let Some(e) = kids.field(id.f_alternative) {
                self.report(Code::E0100, e, "`while ... else` is not supported");
            }
            Stmt::While { cond, body }
        } else if k == id.k_with_statement {
            let kids = self.kids(node);
            let mut items = Vec::new();
            for w in kids.named().filter(|w| w.kind_id() == id.k_with_item).collect::<Vec<_>>() {
                let wk = self.kids(w);
                let value = self.opt_expr(wk.field(id.f_value), self.rel(w));
                let alias = wk.field(id.f_alias).map(|a| self.expr(a));
                items.push(WithItem { value, alias });
            }
            let body = match kids.field(id.f_body) {
                Some(b) => self.block(b),
                None => Vec::new(),
            };
            Stmt::With { items, body }
        } else if k == id.k_function_definition || k == id.k_decorated_definition {
            let at = node.child(0).unwrap_or(node);
            self.report(
                Code::E0100,
                at,
                "nested function definitions are not supported; define helpers at the top level",
            );
            Stmt::Invalid
        } else if k == id.k_import_statement || k == id.k_import_from_statement {
            self.report(Code::E0100, node, "imports are only allowed at the top level");
            Stmt::Invalid
        } else {
            Stmt::Invalid
        };
        Some(self.body.alloc_stmt(stmt, range))
    }

    // ----- expressions -------------------------------------------------------------

    pub(super) fn expr(&mut self, node: Node<'t>) -> ExprId {
        self.depth += 1;
        let id = if self.depth > MAX_DEPTH {
            if !self.too_deep_reported {
                self.too_deep_reported = true;
                self.report(Code::E0100, node, format!("expression nested more than {MAX_DEPTH} levels deep"));
            }
            self.missing(self.rel(node))
        } else if node.is_missing() {
            // A token the parser invented to recover (the name of `def f():` with no
            // body): its E0100 is reported; a name with no text would be E0200 too.
            self.missing(self.rel(node))
        } else {
            self.expr_inner(node)
        };
        self.depth -= 1;
        if self.depth < MAX_DEPTH {
            self.too_deep_reported = false;
        }
        id
    }

    fn expr_inner(&mut self, node: Node<'t>) -> ExprId {
        let id = ids();
        let range = self.rel(node);
        let k = node.kind_id();
        // A container or call with a syntax error inside has an unknown arity: lowering
        // what is left would invent a value (a one-element list, a missing argument)
        // and cause a second diagnostic for the one syntax error.
        if self.contains_error(node) {
            return self.missing(range);
        }
        let expr = if k == id.k_identifier {
            Expr::Name(self.src(node).into())
        } else if k == id.k_integer {
            match parse_int(self.src(node)) {
                Some(v) => Expr::Int(v),
                None => {
                    self.report(Code::E0100, node, "integer literal does not fit in 64 bits");
                    Expr::Missing
                }
            }
        } else if k == id.k_float {
            match self.src(node).replace('_', "").parse::<f64>() {
                Ok(v) => Expr::Float(FloatLit::new(v)),
                Err(_) => {
                    self.report(Code::E0100, node, "malformed float literal");
                    Expr::Missing
                }
            }
        } else if k == id.k_string {
            let (value, prefix_error) = unquote(self.src(node));
            if let Some(message) = prefix_error {
                self.report(Code::E0100, node, message);
            }
            Expr::Str(value)
        } else if k == id.k_true {
            Expr::Bool(true)
        } else if k == id.k_false {
            Expr::Bool(false)
        } else if k == id.k_none {
            Expr::NoneLit
        } else if k == id.k_ellipsis {
            Expr::Ellipsis
        } else if k == id.k_attribute {
            let kids = self.kids(node);
            let object = self.opt_expr(kids.field(id.f_object), range);
            match kids.field(id.f_attribute) {
                Some(a) => Expr::Attribute { object, name: self.src(a).into(), name_range: self.rel(a) },
                None => Expr::Missing,
            }
        } else if k == id.k_subscript {
            let kids = self.kids(node);
            let value = self.opt_expr(kids.field(id.f_value), range);
            let indices = kids.fields(id.f_subscript).collect::<Vec<_>>().into_iter().map(|s| self.expr(s)).collect();
            Expr::Subscript { value, indices }
        } else if k == id.k_slice {
            let kids = self.kids(node);
            Expr::Slice {
                start: kids.field(id.f_start).map(|n| self.expr(n)),
                stop: kids.field(id.f_stop).map(|n| self.expr(n)),
                step: kids.field(id.f_step).map(|n| self.expr(n)),
            }
        } else if k == id.k_call {
            let kids = self.kids(node);
            let func = self.opt_expr(kids.field(id.f_function), range);
            let mut args = Vec::new();
            if let Some(list) = kids.field(id.f_arguments) {
                let list_kids = self.kids(list);
                for a in list_kids.named().collect::<Vec<_>>() {
                    if a.kind_id() == id.k_keyword_argument {
                        let ak = self.kids(a);
                        let name = ak.field(id.f_name).map(|n| (self.src(n).into(), self.rel(n)));
                        let value = self.opt_expr(ak.field(id.f_value), self.rel(a));
                        args.push(Arg { name, value });
                    } else {
                        let value = self.expr(a);
                        args.push(Arg { name: None, value });
                    }
                }
            }
            Expr::Call { func, args }
        } else if k == id.k_binary_operator {
            let kids = self.kids(node);
            let lhs = self.opt_expr(kids.field(id.f_left), range);
            let rhs = self.opt_expr(kids.field(id.f_right), range);
            let op = kids.field(id.f_operator).and_then(|o| BinOp::from_symbol(self.src(o))).unwrap_or(BinOp::Add);
            Expr::Binary { op, lhs, rhs }
        } else if k == id.k_unary_operator {
            let kids = self.kids(node);
            let operand = self.opt_expr(kids.field(id.f_argument), range);
            let op = match kids.field(id.f_operator).map(|o| self.src(o)) {
                Some("-") => UnaryOp::Neg,
                Some("~") => UnaryOp::Invert,
                _ => UnaryOp::Pos,
            };
            Expr::Unary { op, operand }
        } else if k == id.k_not_operator {
            let kids = self.kids(node);
            let operand = self.opt_expr(kids.field(id.f_argument), range);
            Expr::Unary { op: UnaryOp::Not, operand }
        } else if k == id.k_boolean_operator {
            let kids = self.kids(node);
            let lhs = self.opt_expr(kids.field(id.f_left), range);
            let rhs = self.opt_expr(kids.field(id.f_right), range);
            let op = match kids.field(id.f_operator).map(|o| self.src(o)) {
                Some("or") => BoolOp::Or,
                _ => BoolOp::And,
            };
            Expr::BoolOp { op, lhs, rhs }
        } else if k == id.k_comparison_operator {
            let kids = self.kids(node);
            let lhs = self.opt_expr(kids.field(id.f_left), range);
            let rhs = self.opt_expr(kids.field(id.f_right), range);
            let words: Vec<&str> =
                kids.fields(id.f_operator).map(|o| self.src(o)).flat_map(str::split_whitespace).collect();
            let op = match words.as_slice() {
                ["<"] => CmpOp::Lt,
                ["<="] => CmpOp::Le,
                [">"] => CmpOp::Gt,
                [">="] => CmpOp::Ge,
                ["!="] => CmpOp::Ne,
                ["in"] => CmpOp::In,
                ["not", "in"] => CmpOp::NotIn,
                ["is"] => CmpOp::Is,
                ["is", "not"] => CmpOp::IsNot,
                _ => CmpOp::Eq,
            };
            Expr::Compare { op, lhs, rhs }
        } else if k == id.k_conditional_expression {
            let kids = self.kids(node);
            let then = self.opt_expr(kids.field(id.f_consequence), range);
            let cond = self.opt_expr(kids.field(id.f_condition), range);
            let otherwise = self.opt_expr(kids.field(id.f_alternative), range);
            Expr::IfExpr { cond, then, otherwise }
        } else if k == id.k_parenthesized_expression {
            match self.kids(node).named().next() {
                Some(inner) => Expr::Paren(self.expr(inner)),
                None => Expr::Missing,
            }
        } else if k == id.k_tuple || k == id.k_expression_list || k == id.k_pattern_list {
            Expr::Tuple(self.children(node))
        } else if k == id.k_list {
            Expr::List(self.children(node))
        } else if k == id.k_dictionary {
            let kids = self.kids(node);
            let mut pairs = Vec::new();
            for p in kids.named().filter(|p| p.kind_id() == id.k_pair).collect::<Vec<_>>() {
                let pk = self.kids(p);
                let key = self.opt_expr(pk.field(id.f_key), self.rel(p));
                let value = self.opt_expr(pk.field(id.f_value), self.rel(p));
                pairs.push((key, value));
            }
            Expr::Dict(pairs)
        } else {
            // ERROR nodes and a keyword argument outside a call: already reported.
            Expr::Missing
        };
        self.body.alloc_expr(expr, range)
    }

    fn contains_error(&mut self, node: Node<'t>) -> bool {
        let id = ids();
        let k = node.kind_id();
        let container = k == id.k_list || k == id.k_tuple || k == id.k_dictionary || k == id.k_expression_list;
        // `has_error` is a flag tree-sitter keeps per subtree: no walk needed.
        (container || k == id.k_call || k == id.k_subscript) && node.has_error()
    }

    fn children(&mut self, node: Node<'t>) -> Vec<ExprId> {
        let kids = self.kids(node);
        kids.named().collect::<Vec<_>>().into_iter().map(|c| self.expr(c)).collect()
    }
}
