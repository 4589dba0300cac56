//! The Tessera frontend: parsing (tree-sitter), the item AST, name resolution and the
//! checker for names, types, shapes, dtype policies and schedules, all as salsa queries.
//!
//! Layering: `syntax` knows nothing of salsa; `db` holds the inputs and per-item
//! queries; `check` holds the semantic queries. Front doors (CLI, LSP, explorer) and the
//! IR passes ask these queries; none keeps a private copy of the compiler.

pub mod arith;
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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use db::{Db, FnKey, SourceFile};
pub use diagnostics::{Code, Diagnostic, Severity};
pub use text::{LineIndex, TextRange};

/// The concrete database. Every tool owns one (the LSP shares it across requests via
/// snapshots); passes and backends add their queries on `&dyn Db`.
#[salsa::db]
#[derive(Clone)]
pub struct Database {
    storage: salsa::Storage<Self>,
    generated: Arc<Mutex<HashMap<(PathBuf, String), SourceFile>>>,
}

impl Default for Database {
    fn default() -> Self {
        Database { storage: salsa::Storage::new(None), generated: Arc::default() }
    }
}

impl Database {
    /// A database that reports every salsa event to `on_event` (tests use it to observe
    /// which queries re-execute).
    pub fn with_event_callback(on_event: impl Fn(salsa::Event) + Send + Sync + 'static) -> Database {
        Database { storage: salsa::Storage::new(Some(Box::new(on_event))), generated: Arc::default() }
    }
}

#[salsa::db]
impl salsa::Database for Database {}

#[salsa::db]
impl Db for Database {
    fn generated_file(&self, path: &Path, text: &str) -> SourceFile {
        let key = (path.to_path_buf(), text.to_string());
        let mut files = self.generated.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *files.entry(key).or_insert_with(|| SourceFile::new(self, path.to_path_buf(), text.to_string(), None))
    }
}
