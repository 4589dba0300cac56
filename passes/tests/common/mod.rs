//! What several of this crate's integration tests share.

use std::path::{Path, PathBuf};

use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Calls `visit` with a database holding the file at `path` (relative to the repository)
/// and each of its kernels, in order.
pub fn for_each_kernel(path: &str, mut visit: impl for<'db> FnMut(&'db Database, FnKey<'db>)) {
    let db = Database::default();
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    let file = SourceFile::new(&db, path.into(), text, None);
    for entry in &item_index(&db, file).functions {
        if fn_signature(&db, entry.key).kind == FunctionKind::Kernel {
            visit(&db, entry.key);
        }
    }
}
