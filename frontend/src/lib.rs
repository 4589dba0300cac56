//! The Tessera frontend: parsing (tree-sitter), the item AST, name resolution and the
//! checker for names, types, shapes, dtype policies and schedules, all as salsa queries.
//!
//! Layering: `syntax` knows nothing of salsa; `db` holds the inputs and per-item
//! queries; `check` holds the semantic queries. Front doors (CLI, LSP, explorer) and the
//! IR passes ask these queries; none keeps a private copy of the compiler.

pub mod check;
pub mod db;
pub mod diagnostics;
pub mod format;
pub mod ide;
pub mod stdlib;
pub mod syntax;
#[doc(hidden)]
pub mod synthetic;
pub mod text;

pub use db::{Db, FnKey, SourceFile};
pub use diagnostics::{Code, Diagnostic, Severity};
pub use text::{LineIndex, TextRange};

/// The concrete database. Every tool owns one (the LSP shares it across requests via
/// snapshots); passes and backends add their queries on `&dyn Db`.
#[salsa::db]
#[derive(Clone)]
pub struct Database {
    storage: salsa::Storage<Self>,
}

impl Default for Database {
    fn default() -> Self {
        Database { storage: salsa::Storage::new(None) }
    }
}

impl Database {
    /// A database that reports every salsa event to `on_event` (tests use it to observe
    /// which queries re-execute).
    pub fn with_event_callback(on_event: impl Fn(salsa::Event) + Send + Sync + 'static) -> Database {
        Database { storage: salsa::Storage::new(Some(Box::new(on_event))) }
    }
}

#[salsa::db]
impl salsa::Database for Database {}
