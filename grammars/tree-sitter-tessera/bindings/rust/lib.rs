//! Tree-sitter grammar for Tessera (`.tsr`), a Python-like tile-first GPU kernel language.
//!
//! The node kinds and field names produced by [`LANGUAGE`] are a contract with the
//! Tessera frontend; they are listed in `NODES.md` next to the grammar.
//!
//! ```
//! let mut parser = tree_sitter::Parser::new();
//! parser
//!     .set_language(&tree_sitter_tessera::LANGUAGE.into())
//!     .expect("the Tessera grammar is compatible with this tree-sitter");
//! let tree = parser.parse("x = tile.load(A[i0:i0 + 128])\n", None).unwrap();
//! assert!(!tree.root_node().has_error());
//! ```

use tree_sitter_language::LanguageFn;

unsafe extern "C" {
    fn tree_sitter_tessera() -> *const ();
}

/// The tree-sitter [`LanguageFn`] of the Tessera grammar.
pub const LANGUAGE: LanguageFn = unsafe { LanguageFn::from_raw(tree_sitter_tessera) };

/// The content of the [`node-types.json`] file of this grammar.
///
/// [`node-types.json`]: https://tree-sitter.github.io/tree-sitter/using-parsers/6-static-node-types
pub const NODE_TYPES: &str = include_str!("../../src/node-types.json");

/// Syntax highlighting query (Neovim and Helix capture names).
pub const HIGHLIGHTS_QUERY: &str = include_str!("../../queries/highlights.scm");

/// Scopes, definitions and references.
pub const LOCALS_QUERY: &str = include_str!("../../queries/locals.scm");

/// Fold ranges (`@fold`).
pub const FOLDS_QUERY: &str = include_str!("../../queries/folds.scm");

/// Indentation (nvim-treesitter `@indent.*` captures).
pub const INDENTS_QUERY: &str = include_str!("../../queries/indents.scm");

/// Injections (nvim-treesitter capture names).
pub const INJECTIONS_QUERY: &str = include_str!("../../queries/injections.scm");

/// Text objects (nvim-treesitter-textobjects capture names).
pub const TEXTOBJECTS_QUERY: &str = include_str!("../../queries/textobjects.scm");

#[cfg(test)]
mod tests {
    #[test]
    fn loads_the_grammar() {
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&super::LANGUAGE.into()).expect("Error loading the Tessera parser");
        let tree = parser.parse("import tessera as ts\n", None).unwrap();
        assert_eq!(tree.root_node().kind(), "module");
        assert!(!tree.root_node().has_error());
    }

    #[test]
    fn node_types_is_json_array() {
        let text = super::NODE_TYPES.trim_start();
        assert!(text.starts_with('['), "node-types.json should be a JSON array");
    }
}
