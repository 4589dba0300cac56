//! Source text → item AST: lexical checks, tree-sitter parsing, lowering.

pub mod ast;
pub mod chunks;
pub mod fast;
pub mod lexical;
pub mod lower;
pub mod render;

use std::cell::RefCell;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::diagnostics::Diagnostic;

/// The result of parsing one file.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Parse {
    pub module: ast::ModuleAst,
    /// Lexical and syntax diagnostics with absolute ranges, in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// (name, ordinal among items of that name) → index into `module.items`, for
    /// functions and for constants (by their first name): per-item queries look their
    /// item up in O(1) after every edit.
    pub functions: FxHashMap<(ast::Name, u32), usize>,
    pub constants: FxHashMap<(ast::Name, u32), usize>,
}

impl Parse {
    pub fn function(&self, name: &str, ordinal: u32) -> Option<&Arc<ast::FunctionAst>> {
        let &i = self.functions.get(&(ast::Name::new(name), ordinal))?;
        match &self.module.items[i].kind {
            ast::ItemKind::Function(f) => Some(f),
            _ => None,
        }
    }

    pub fn constant(&self, name: &str, ordinal: u32) -> Option<&Arc<ast::ConstantAst>> {
        let &i = self.constants.get(&(ast::Name::new(name), ordinal))?;
        match &self.module.items[i].kind {
            ast::ItemKind::Constant(c) => Some(c),
            _ => None,
        }
    }

    fn index_items(&mut self) {
        let mut counts: FxHashMap<(bool, ast::Name), u32> = FxHashMap::default();
        for (i, item) in self.module.items.iter().enumerate() {
            let (is_fn, name) = match &item.kind {
                ast::ItemKind::Function(f) => (true, f.name.clone()),
                ast::ItemKind::Constant(c) => match c.names.first() {
                    Some((n, _)) => (false, n.clone()),
                    None => continue,
                },
                _ => continue,
            };
            let ordinal = counts.entry((is_fn, name.clone())).or_insert(0);
            let map = if is_fn { &mut self.functions } else { &mut self.constants };
            map.insert((name, *ordinal), i);
            *ordinal += 1;
        }
    }
}

/// The parse of one chunk (see `chunks`), with chunk-relative offsets.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ChunkParse {
    pub items: Vec<ast::Item>,
    pub diagnostics: Vec<Diagnostic>,
}

thread_local! {
    // A parser per thread: creating one allocates, and `tessera check` parses many files.
    static PARSER: RefCell<Option<tree_sitter::Parser>> = const { RefCell::new(None) };
}

/// Lexical checks, tree-sitter and lowering for one chunk of text.
pub fn parse_chunk(text: &str) -> ChunkParse {
    let lexical = lexical::scan(text, None);
    // The common case, an error-free chunk, without tree-sitter (see `fast`).
    if lexical.diagnostics.is_empty() {
        if let Some(items) = fast::parse_items(text) {
            return ChunkParse { items, diagnostics: Vec::new() };
        }
    }
    parse_chunk_with_tree_sitter(text, lexical)
}

/// [`parse_chunk`] without the fast path: tree-sitter and the lowering of its tree.
/// The fast parser's tests compare the two.
pub fn parse_chunk_tree_sitter(text: &str) -> ChunkParse {
    parse_chunk_with_tree_sitter(text, lexical::scan(text, None))
}

fn parse_chunk_with_tree_sitter(text: &str, lexical: lexical::LexicalReport) -> ChunkParse {
    let tree = PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let parser = slot.get_or_insert_with(|| {
            let mut p = tree_sitter::Parser::new();
            p.set_language(&lower::language()).expect("the bundled grammar matches the tree-sitter runtime");
            p
        });
        parser.parse(text, None)
    });
    let Some(tree) = tree else {
        // Only happens on cancellation or timeout, neither of which we set.
        return ChunkParse { items: Vec::new(), diagnostics: lexical.diagnostics };
    };
    let lowered = lower::lower(text, &tree, &lexical);
    drop(tree);
    let mut diagnostics = lexical.diagnostics;
    diagnostics.extend(lowered.diagnostics);
    ChunkParse { items: lowered.module.items, diagnostics }
}

/// Assembles a file's parse from its chunks' parses (`chunk_parse` gets each chunk's
/// text; the database memoizes it, plain callers just parse).
pub fn assemble<'p>(text: &str, utf8_error: Option<u32>, mut chunk_parse: impl FnMut(&str) -> &'p ChunkParse) -> Parse {
    let mut items = Vec::new();
    let mut diagnostics = Vec::new();
    if let Some(at) = utf8_error {
        diagnostics.push(lexical::utf8_diagnostic(text, at));
    }
    for range in chunks::split(text) {
        let chunk = chunk_parse(range.slice(text));
        items.extend(chunk.items.iter().map(|item| item.shifted(range.start)));
        diagnostics.extend(chunk.diagnostics.iter().map(|d| d.clone().shift(range.start)));
    }
    diagnostics.sort_by_key(|d| (d.range.start, d.range.end));
    let mut parse = Parse { module: ast::ModuleAst { items }, diagnostics, ..Parse::default() };
    parse.index_items();
    parse
}

/// Parses a whole file without a database.
pub fn parse(text: &str, utf8_error: Option<u32>) -> Parse {
    let mut parsed = Vec::new();
    for range in chunks::split(text) {
        parsed.push(parse_chunk(range.slice(text)));
    }
    let mut it = parsed.iter();
    assemble(text, utf8_error, |_| it.next().expect("one parse per chunk"))
}
