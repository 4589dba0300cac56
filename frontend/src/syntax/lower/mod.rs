//! Lowers tree-sitter's concrete tree into the item-relative AST of `ast.rs`, and turns
//! the parser's ERROR/MISSING nodes into E0100 diagnostics.
//!
//! The walk uses one reused `TreeCursor` and compares numeric kind and field ids: this
//! runs on every keystroke in the editor and over whole trees in `tessera check`.
//!
//! This file owns the grammar's ids, the cursor walk and the file-level items;
//! `body` lowers one item's definitions, statements and expressions into its arena,
//! `literals` decodes numbers and strings, and `errors` phrases the syntax errors.

use std::sync::{Arc, OnceLock};

use tree_sitter::{Language, Node, Tree, TreeCursor};

use super::ast::*;
use super::lexical::LexicalReport;
use crate::diagnostics::{Code, Diagnostic};
use crate::text::TextRange;

mod body;
mod errors;
mod literals;
mod python_side;

use body::Cx;
use errors::collect_syntax_errors;
pub(crate) use literals::parse_int;
pub use literals::unquote;

/// Expressions nested deeper than this are not lowered (and reported): it bounds the
/// recursion of every later pass, whatever the input.
pub(crate) const MAX_DEPTH: u32 = 200;

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
                    let mut cx = Cx { lw: self, anchor, body: Body::default(), depth: 0, too_deep_reported: false };
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
            let mut cx = Cx { lw: self, anchor: item_start, body: Body::default(), depth: 0, too_deep_reported: false };
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
        let mut cx = Cx { lw: self, anchor: def_start, body: Body::default(), depth: 0, too_deep_reported: false };
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
    let first_line = TextRange::new(range.start, first_line_end);
    if let Some((message, note)) = python_side::python_side_hint(range.slice(text)) {
        return Diagnostic::new(Code::E0100, first_line, message).with_note(note);
    }
    Diagnostic::new(
        Code::E0100,
        first_line,
        "only imports, constant assignments and function definitions are allowed at the top level",
    )
    .with_note("move this statement into a function")
}
