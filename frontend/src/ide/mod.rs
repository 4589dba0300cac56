//! Editor-facing queries over the checked program: plain data (byte offsets, strings,
//! markdown), no protocol. The language server converts these to LSP types; other
//! front ends (the explorer) can use them as they are.
//!
//! Every function takes the database and a file; offsets are absolute byte offsets
//! into the file's text. Cursor positions "touch" a name when they are inside it or
//! just after it.

mod completion;
mod context;
mod highlight;
mod hover;
mod inlay;
pub mod lex;
mod nav;
mod signature_help;
mod structure;

#[cfg(test)]
mod tests;

pub use completion::{completions, CompletionItem, CompletionKind, Completions};
pub use highlight::{highlight, HlMods, HlRange, HlTag};
pub use hover::{hover, HoverResult, HoverSubject};
pub use inlay::{inlay_hints, InlayHint};
pub use nav::{
    classify, find_references, goto_definition, prepare_rename, rename, Definition, NameAt, NavTarget, Reference,
    ReferenceKind, RenameError,
};
pub use signature_help::{signature_help, SignatureHelp};
pub use structure::{file_structure, folding_ranges, FileSymbol, Fold, FoldKind, SymbolKind};
