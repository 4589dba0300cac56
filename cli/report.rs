//! What `tessera check` found, before a format renders it: each file's diagnostics
//! (`FileReport`) and the paths it could not read (`Run`). `emit` and `sarif` read it.

use serde_json::{json, Value};
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::text::{LineIndex, TextRange};

use crate::files::PathError;

/// A checked file with its diagnostics (absolute ranges).
pub struct FileReport {
    pub path: String,
    pub text: String,
    pub index: LineIndex,
    pub diagnostics: Vec<Diagnostic>,
}

impl FileReport {
    /// 1-based line and column (Unicode scalar values).
    pub fn position(&self, offset: u32) -> (u32, u32) {
        let lc = self.index.line_col(&self.text, offset);
        (lc.line + 1, lc.col + 1)
    }

    pub(crate) fn range_json(&self, range: TextRange) -> Value {
        let (sl, sc) = self.position(range.start);
        let (el, ec) = self.position(range.end);
        json!({"start": {"line": sl, "column": sc}, "end": {"line": el, "column": ec}})
    }
}

/// What one run reports: the checked files and the paths it could not read.
pub struct Run<'a> {
    pub reports: &'a [FileReport],
    pub unreadable: &'a [PathError],
}
