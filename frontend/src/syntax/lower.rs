//! Lowers tree-sitter's concrete tree into the item-relative AST of `ast.rs`, and turns
//! the parser's ERROR/MISSING nodes into E0100 diagnostics.
//!
//! The walk uses one reused `TreeCursor` and compares numeric kind and field ids: this
//! runs on every keystroke in the editor and over whole trees in `tessera check`.

use std::sync::{Arc, OnceLock};

use tree_sitter::{Language, Node, Tree, TreeCursor};

use super::ast::*;
use super::lexical::LexicalReport;
use crate::diagnostics::{Code, Diagnostic};
use crate::text::TextRange;

/// Expressions nested deeper than this are not lowered (and reported): it bounds the
/// recursion of every later pass, whatever the input.
const MAX_DEPTH: u32 = 200;

pub fn language() -> Language {
    tree_sitter_tessera::LANGUAGE.into()
}

/// Field ids (`f_*`) and node-kind ids (`k_*`) of the grammar.
struct Ids {
    f_left: u16,
    f_right: u16,
    f_operator: u16,
    f_name: u16,
    f_alias: u16,
    f_module_name: u16,
    f_parameters: u16,
    f_return_type: u16,
    f_body: u16,
    f_decorator: u16,
    f_definition: u16,
    f_value: u16,
    f_condition: u16,
    f_consequence: u16,
    f_alternative: u16,
    f_object: u16,
    f_attribute: u16,
    f_subscript: u16,
    f_start: u16,
    f_stop: u16,
    f_step: u16,
    f_function: u16,
    f_arguments: u16,
    f_argument: u16,
    f_key: u16,
    f_type: u16,
    k_identifier: u16,
    k_integer: u16,
    k_float: u16,
    k_string: u16,
    k_true: u16,
    k_false: u16,
    k_none: u16,
    k_ellipsis: u16,
    k_attribute: u16,
    k_subscript: u16,
    k_slice: u16,
    k_call: u16,
    k_keyword_argument: u16,
    k_binary_operator: u16,
    k_unary_operator: u16,
    k_not_operator: u16,
    k_boolean_operator: u16,
    k_comparison_operator: u16,
    k_conditional_expression: u16,
    k_parenthesized_expression: u16,
    k_tuple: u16,
    k_expression_list: u16,
    k_pattern_list: u16,
    k_list: u16,
    k_dictionary: u16,
    k_pair: u16,
    k_expression_statement: u16,
    k_assignment: u16,
    k_augmented_assignment: u16,
    k_return_statement: u16,
    k_pass_statement: u16,
    k_break_statement: u16,
    k_continue_statement: u16,
    k_if_statement: u16,
    k_elif_clause: u16,
    k_else_clause: u16,
    k_for_statement: u16,
    k_while_statement: u16,
    k_with_statement: u16,
    k_with_item: u16,
    k_function_definition: u16,
    k_decorated_definition: u16,
    k_typed_parameter: u16,
    k_default_parameter: u16,
    k_typed_default_parameter: u16,
    k_keyword_separator: u16,
    k_import_statement: u16,
    k_import_from_statement: u16,
    k_aliased_import: u16,
    k_wildcard_import: u16,
    k_comment: u16,
}

impl Ids {
    fn load(language: &Language) -> Ids {
        let f = |name: &str| {
            language.field_id_for_name(name).unwrap_or_else(|| panic!("grammar has no field `{name}`")).get()
        };
        let k = |name: &str| {
            let id = language.id_for_node_kind(name, true);
            assert!(id != 0, "grammar has no node kind `{name}`");
            id
        };
        Ids {
            f_left: f("left"),
            f_right: f("right"),
            f_operator: f("operator"),
            f_name: f("name"),
            f_alias: f("alias"),
            f_module_name: f("module_name"),
            f_parameters: f("parameters"),
            f_return_type: f("return_type"),
            f_body: f("body"),
            f_decorator: f("decorator"),
            f_definition: f("definition"),
            f_value: f("value"),
            f_condition: f("condition"),
            f_consequence: f("consequence"),
            f_alternative: f("alternative"),
            f_object: f("object"),
            f_attribute: f("attribute"),
            f_subscript: f("subscript"),
            f_start: f("start"),
            f_stop: f("stop"),
            f_step: f("step"),
            f_function: f("function"),
            f_arguments: f("arguments"),
            f_argument: f("argument"),
            f_key: f("key"),
            f_type: f("type"),
            k_identifier: k("identifier"),
            k_integer: k("integer"),
            k_float: k("float"),
            k_string: k("string"),
            k_true: k("true"),
            k_false: k("false"),
            k_none: k("none"),
            k_ellipsis: k("ellipsis"),
            k_attribute: k("attribute"),
            k_subscript: k("subscript"),
            k_slice: k("slice"),
            k_call: k("call"),
            k_keyword_argument: k("keyword_argument"),
            k_binary_operator: k("binary_operator"),
            k_unary_operator: k("unary_operator"),
            k_not_operator: k("not_operator"),
            k_boolean_operator: k("boolean_operator"),
            k_comparison_operator: k("comparison_operator"),
            k_conditional_expression: k("conditional_expression"),
            k_parenthesized_expression: k("parenthesized_expression"),
            k_tuple: k("tuple"),
            k_expression_list: k("expression_list"),
            k_pattern_list: k("pattern_list"),
            k_list: k("list"),
            k_dictionary: k("dictionary"),
            k_pair: k("pair"),
            k_expression_statement: k("expression_statement"),
            k_assignment: k("assignment"),
            k_augmented_assignment: k("augmented_assignment"),
            k_return_statement: k("return_statement"),
            k_pass_statement: k("pass_statement"),
            k_break_statement: k("break_statement"),
            k_continue_statement: k("continue_statement"),
            k_if_statement: k("if_statement"),
            k_elif_clause: k("elif_clause"),
            k_else_clause: k("else_clause"),
            k_for_statement: k("for_statement"),
            k_while_statement: k("while_statement"),
            k_with_statement: k("with_statement"),
            k_with_item: k("with_item"),
            k_function_definition: k("function_definition"),
            k_decorated_definition: k("decorated_definition"),
            k_typed_parameter: k("typed_parameter"),
            k_default_parameter: k("default_parameter"),
            k_typed_default_parameter: k("typed_default_parameter"),
            k_keyword_separator: k("keyword_separator"),
            k_import_statement: k("import_statement"),
            k_import_from_statement: k("import_from_statement"),
            k_aliased_import: k("aliased_import"),
            k_wildcard_import: k("wildcard_import"),
            k_comment: k("comment"),
        }
    }
}

fn ids() -> &'static Ids {
    static IDS: OnceLock<Ids> = OnceLock::new();
    IDS.get_or_init(|| Ids::load(&language()))
}

/// The children of one node that matter: named ones and those with a field.
struct Kids<'t> {
    items: smallvec::SmallVec<[(u16, Node<'t>); 6]>,
}

impl<'t> Kids<'t> {
    fn field(&self, field: u16) -> Option<Node<'t>> {
        self.items.iter().find(|(f, _)| *f == field).map(|(_, n)| *n)
    }

    fn fields(&self, field: u16) -> impl Iterator<Item = Node<'t>> + '_ {
        self.items.iter().filter(move |(f, _)| *f == field).map(|(_, n)| *n)
    }

    /// Named children (with or without a field), skipping comments.
    fn named(&self) -> impl Iterator<Item = Node<'t>> + '_ {
        let comment = ids().k_comment;
        self.items.iter().map(|(_, n)| *n).filter(move |n| n.is_named() && n.kind_id() != comment)
    }
}

pub struct Lowered {
    pub module: ModuleAst,
    pub diagnostics: Vec<Diagnostic>,
}

pub fn lower(text: &str, tree: &Tree, lexical: &LexicalReport) -> Lowered {
    let mut diagnostics = Vec::new();
    collect_syntax_errors(text, tree.root_node(), lexical, &mut diagnostics);
    let root = tree.root_node();
    let mut cursor = root.walk();
    let mut lw = Lowering { text, cursor: root.walk(), diagnostics: &mut diagnostics };
    let mut items = Vec::new();
    let children: Vec<Node> = root.named_children(&mut cursor).collect();
    for child in children {
        if child.is_error() || child.is_missing() || child.kind_id() == ids().k_comment {
            continue;
        }
        if let Some(item) = lw.item(child, lexical) {
            items.push(item);
        }
    }
    Lowered { module: ModuleAst { items }, diagnostics }
}

fn range_of(node: Node) -> TextRange {
    TextRange::new(node.start_byte() as u32, node.end_byte() as u32)
}

/// File-level lowering state: the text, a reusable cursor and the diagnostics.
struct Lowering<'a, 't> {
    text: &'a str,
    cursor: TreeCursor<'t>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl<'a, 't> Lowering<'a, 't> {
    fn kids(&mut self, node: Node<'t>) -> Kids<'t> {
        let mut items = smallvec::SmallVec::new();
        self.cursor.reset(node);
        if self.cursor.goto_first_child() {
            loop {
                let child = self.cursor.node();
                let field = self.cursor.field_id().map_or(0, |f| f.get());
                if field != 0 || child.is_named() {
                    items.push((field, child));
                }
                if !self.cursor.goto_next_sibling() {
                    break;
                }
            }
        }
        Kids { items }
    }

    fn src(&self, node: Node) -> &'a str {
        self.text.get(node.start_byte()..node.end_byte()).unwrap_or("")
    }

    fn item(&mut self, node: Node<'t>, lexical: &LexicalReport) -> Option<Item> {
        let id = ids();
        let range = range_of(node);
        let anchor = range.start;
        let kind = node.kind_id();
        let item_kind = if kind == id.k_decorated_definition || kind == id.k_function_definition {
            let (function, def_start) = self.function(node)?;
            return Some(Item { anchor: def_start, range, kind: ItemKind::Function(Arc::new(function)) });
        } else if kind == id.k_import_statement || kind == id.k_import_from_statement {
            ItemKind::Import(self.import(node))
        } else if kind == id.k_expression_statement || kind == id.k_assignment {
            let inner = if kind == id.k_assignment { Some(node) } else { self.kids(node).named().next() };
            match inner {
                Some(a) if a.kind_id() == id.k_assignment => {
                    let mut cx = Cx { lw: self, anchor, body: Body::default(), depth: 0 };
                    ItemKind::Constant(Arc::new(cx.constant(a)?))
                }
                // A module docstring is allowed.
                Some(s) if s.kind_id() == id.k_string => return None,
                _ => {
                    if !lexical.shadows(range) {
                        self.diagnostics.push(top_level_error(range, self.text));
                    }
                    ItemKind::Invalid
                }
            }
        } else {
            if !lexical.shadows(range) {
                self.diagnostics.push(top_level_error(range, self.text));
            }
            ItemKind::Invalid
        };
        Some(Item { anchor, range, kind: item_kind })
    }

    /// A function item: decorators (relative to the item's start) and definition
    /// (relative to `def`); also returns the absolute offset of `def`.
    fn function(&mut self, node: Node<'t>) -> Option<(FunctionAst, u32)> {
        let id = ids();
        let item_start = node.start_byte() as u32;
        let mut decorators = Decorators::default();
        let def = if node.kind_id() == id.k_decorated_definition {
            let kids = self.kids(node);
            let mut cx = Cx { lw: self, anchor: item_start, body: Body::default(), depth: 0 };
            for d in kids.fields(id.f_decorator).collect::<Vec<_>>() {
                let inner = cx.kids(d).named().next();
                let expr = match inner {
                    Some(e) => cx.expr(e),
                    None => cx.missing(cx.rel(d)),
                };
                decorators.exprs.push(expr);
            }
            decorators.arena = cx.body;
            kids.field(id.f_definition)?
        } else {
            node
        };
        let def_start = def.start_byte() as u32;
        let mut cx = Cx { lw: self, anchor: def_start, body: Body::default(), depth: 0 };
        let function = cx.function_def(def)?;
        Some((
            FunctionAst {
                def: Arc::new(function),
                decorators: Arc::new(decorators),
                decorator_offset: def_start - item_start,
            },
            def_start,
        ))
    }

    fn import(&mut self, node: Node<'t>) -> ImportAst {
        let id = ids();
        let kids = self.kids(node);
        let names: Vec<ImportedName> =
            kids.fields(id.f_name).collect::<Vec<_>>().into_iter().map(|n| self.imported_name(n)).collect();
        if node.kind_id() == id.k_import_statement {
            return ImportAst::Import { names };
        }
        let module_node = kids.field(id.f_module_name);
        let module = module_node.map(|m| self.dotted(m)).unwrap_or_default();
        let wildcard = kids.named().any(|c| c.kind_id() == id.k_wildcard_import);
        ImportAst::From { module, module_range: module_node.map(range_of).unwrap_or_default(), names, wildcard }
    }

    fn dotted(&mut self, node: Node<'t>) -> Vec<Name> {
        if node.kind_id() == ids().k_identifier {
            return vec![self.src(node).into()];
        }
        let kids = self.kids(node);
        kids.named().filter(|c| c.kind_id() == ids().k_identifier).map(|c| self.src(c).into()).collect()
    }

    fn imported_name(&mut self, node: Node<'t>) -> ImportedName {
        let id = ids();
        if node.kind_id() == id.k_aliased_import {
            let kids = self.kids(node);
            let path = kids.field(id.f_name).map(|n| self.dotted(n)).unwrap_or_default();
            let alias_node = kids.field(id.f_alias);
            ImportedName {
                path,
                alias: alias_node.map(|a| self.src(a).into()),
                range: range_of(node),
                binding_range: alias_node.map(range_of).unwrap_or_else(|| range_of(node)),
            }
        } else {
            ImportedName { path: self.dotted(node), alias: None, range: range_of(node), binding_range: range_of(node) }
        }
    }
}

fn top_level_error(range: TextRange, text: &str) -> Diagnostic {
    let first_line_end = range.slice(text).find('\n').map_or(range.end, |i| range.start + i as u32);
    Diagnostic::new(
        Code::E0100,
        TextRange::new(range.start, first_line_end),
        "only imports, constant assignments and function definitions are allowed at the top level",
    )
    .with_note("move this statement into a function")
}

/// The lowering context of one item: its arena and anchor.
struct Cx<'l, 'a, 't> {
    lw: &'l mut Lowering<'a, 't>,
    anchor: u32,
    body: Body,
    depth: u32,
}

impl<'l, 'a, 't> Cx<'l, 'a, 't> {
    fn rel(&self, node: Node) -> TextRange {
        range_of(node).unshift(self.anchor)
    }

    fn src(&self, node: Node) -> &'a str {
        self.lw.src(node)
    }

    fn kids(&mut self, node: Node<'t>) -> Kids<'t> {
        self.lw.kids(node)
    }

    fn report(&mut self, code: Code, node: Node, message: impl Into<String>) {
        self.lw.diagnostics.push(Diagnostic::new(code, range_of(node), message));
    }

    fn missing(&mut self, range: TextRange) -> ExprId {
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
    fn function_def(&mut self, def: Node<'t>) -> Option<FunctionDef> {
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

    fn constant(&mut self, node: Node<'t>) -> Option<ConstantAst> {
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

    fn expr(&mut self, node: Node<'t>) -> ExprId {
        self.depth += 1;
        let id = if self.depth > MAX_DEPTH {
            if self.depth == MAX_DEPTH + 1 {
                self.report(Code::E0100, node, format!("expression nested more than {MAX_DEPTH} levels deep"));
            }
            self.missing(self.rel(node))
        } else {
            self.expr_inner(node)
        };
        self.depth -= 1;
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

fn parse_int(src: &str) -> Option<i64> {
    let s = src.replace('_', "");
    let lower = s.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()
    } else {
        s.parse().ok()
    }
}

/// Decodes a string literal; returns its value and an error for unsupported prefixes.
pub fn unquote(src: &str) -> (String, Option<String>) {
    let prefix_len = src.find(['\'', '"']).unwrap_or(0);
    let prefix = src[..prefix_len].to_ascii_lowercase();
    let body = &src[prefix_len..];
    let error = if prefix.contains('f') {
        Some("f-strings are not supported: Tessera strings are compile-time constants".to_string())
    } else if prefix.contains('b') {
        Some("byte strings are not supported".to_string())
    } else {
        None
    };
    let quote_len = if body.starts_with("\"\"\"") || body.starts_with("'''") { 3 } else { 1 };
    let inner = if body.len() >= 2 * quote_len {
        &body[quote_len..body.len() - quote_len]
    } else {
        body.get(quote_len..).unwrap_or("")
    };
    if prefix.contains('r') || !inner.contains('\\') {
        return (inner.to_string(), error);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\n') => {}
            Some(other) => {
                if !matches!(other, '\\' | '\'' | '"') {
                    out.push('\\');
                }
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    (out, error)
}

/// One E0100 per ERROR region and per MISSING token, unless a lexical error explains it.
fn collect_syntax_errors(text: &str, root: Node, lexical: &LexicalReport, out: &mut Vec<Diagnostic>) {
    if !root.has_error() {
        return;
    }
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.is_missing() {
            let at = node.start_byte() as u32;
            let range = TextRange::empty(at);
            if !lexical.shadows(range) {
                let kind = node.kind();
                let what =
                    if kind.chars().all(|c| c.is_ascii_alphabetic() || c == '_') && kind.len() > 1 && !is_keyword(kind)
                    {
                        describe_kind(kind).to_string()
                    } else {
                        format!("`{kind}`")
                    };
                out.push(Diagnostic::new(Code::E0100, range, format!("syntax error: expected {what}")));
            }
            continue;
        }
        if node.is_error() {
            let range = error_span(text, node);
            if !lexical.shadows(range) && !lexical.shadows(range_of(node)) {
                let token = range.slice(text);
                let context = node.parent().map(|p| describe_context(p.kind())).unwrap_or("");
                let message = if let Some(hint) = python_construct(token, node) {
                    hint
                } else if token.is_empty() {
                    format!("syntax error{context}")
                } else {
                    format!("syntax error: unexpected `{}`{context}", truncate(token, 30))
                };
                out.push(Diagnostic::new(Code::E0100, range, message));
            }
            continue;
        }
        let mut cursor = node.walk();
        // Push in reverse so that diagnostics come out in source order.
        let children: Vec<Node> = node.children(&mut cursor).filter(|c| c.has_error() || c.is_missing()).collect();
        stack.extend(children.into_iter().rev());
    }
}

/// Python constructs Tessera does not have, recognised from the token the parser
/// stumbled on, so the message names the construct instead of the token.
fn python_construct(token: &str, node: Node) -> Option<String> {
    let in_brackets = std::iter::successors(node.parent(), |n| n.parent()).take(4).any(|p| {
        matches!(p.kind(), "list" | "argument_list" | "parenthesized_expression" | "dictionary" | "subscript")
    });
    match token {
        "for" if in_brackets => Some(
            "comprehensions are not supported: write the values out, or build them in a compile-time `for ... in range(...)` loop"
                .to_string(),
        ),
        "lambda" => Some("lambda expressions are not supported: define a helper function".to_string()),
        "class" => Some("classes are not supported: Tessera programs are functions and constants".to_string()),
        "try" | "except" | "raise" => Some("exceptions are not supported in Tessera".to_string()),
        "yield" | "async" | "await" => Some(format!("`{token}` is not supported in Tessera")),
        _ => None,
    }
}

/// The first token of an ERROR node: a precise primary span even for large regions.
fn error_span(text: &str, node: Node) -> TextRange {
    let mut first = node;
    while let Some(child) = first.child(0) {
        first = child;
    }
    let mut range = range_of(first);
    if range.is_empty() {
        range = range_of(node);
    }
    // Never more than the first line.
    let slice = range.slice(text);
    if let Some(nl) = slice.find('\n') {
        range = TextRange::new(range.start, range.start + nl as u32);
    }
    if range.is_empty() {
        let end = (range.start as usize + 1).min(text.len()) as u32;
        range = TextRange::new(range.start, crate::text::clamp_to_char_boundary(text, end).max(range.start));
    }
    range
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn is_keyword(kind: &str) -> bool {
    matches!(
        kind,
        "def"
            | "return"
            | "if"
            | "elif"
            | "else"
            | "for"
            | "in"
            | "while"
            | "break"
            | "continue"
            | "with"
            | "as"
            | "import"
            | "from"
            | "pass"
            | "and"
            | "or"
            | "not"
    )
}

fn describe_kind(kind: &str) -> &str {
    match kind {
        "identifier" => "a name",
        "block" => "an indented block",
        "_newline" | "newline" => "the end of the line",
        "_indent" | "indent" => "an indented block",
        "expression" | "primary_expression" => "an expression",
        other => other,
    }
}

fn describe_context(parent: &str) -> &'static str {
    match parent {
        "argument_list" => " in the argument list",
        "parameters" => " in the parameter list",
        "subscript" => " in the subscript",
        "binary_operator" | "unary_operator" | "comparison_operator" | "boolean_operator" => " in this expression",
        "assignment" | "augmented_assignment" => " in this assignment",
        "decorated_definition" | "decorator" => " in the decorator",
        "function_definition" => " in the function header",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_decode() {
        assert_eq!(unquote("\"ab\"").0, "ab");
        assert_eq!(unquote("'''a\nb'''").0, "a\nb");
        assert_eq!(unquote("\"a\\nb\"").0, "a\nb");
        assert_eq!(unquote("r\"a\\nb\"").0, "a\\nb");
        assert!(unquote("f\"x{i}\"").1.is_some());
    }

    #[test]
    fn integer_literals() {
        assert_eq!(parse_int("0x2A"), Some(42));
        assert_eq!(parse_int("1_024"), Some(1024));
        assert_eq!(parse_int("99999999999999999999"), None);
    }
}
