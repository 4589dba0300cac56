//! Where an IR location is in the file: `FileLocs` turns a `Loc` (a range relative to its
//! function's `def`, or a stdlib function) into an absolute range or a path:line:col. A
//! leaf the printers, the analyses and the session share.

use tessera_frontend::db::item_index;
use tessera_frontend::text::{LineIndex, TextRange};
use tessera_frontend::{Db, SourceFile};

use crate::ir::print::LocResolver;
use crate::ir::{Loc, Origin};

/// Resolves locations of one file's functions (and stdlib functions) to positions.
pub struct FileLocs<'a> {
    db: &'a dyn Db,
    file: SourceFile,
    index: LineIndex,
}

impl<'a> FileLocs<'a> {
    pub fn new(db: &'a dyn Db, file: SourceFile) -> FileLocs<'a> {
        FileLocs { db, file, index: LineIndex::new(file.text(db)) }
    }

    /// The absolute range of a location in this file.
    pub fn absolute(&self, loc: &Loc) -> Option<TextRange> {
        match &loc.origin {
            Origin::Function(name) => {
                let index = item_index(self.db, self.file);
                let entry = index.function(self.db, name)?;
                Some(loc.range.shift(entry.anchor))
            }
            _ => None,
        }
    }
}

impl LocResolver for FileLocs<'_> {
    fn resolve(&self, loc: &Loc) -> Option<(String, u32, u32)> {
        match &loc.origin {
            Origin::Stdlib { file, .. } => Some((format!("tessera/stdlib/{file}"), 1, 1)),
            _ => {
                let range = self.absolute(loc)?;
                let text = self.file.text(self.db);
                let lc = self.index.line_col(text, range.start);
                let path = self.file.path(self.db).to_string_lossy().into_owned();
                Some((path, lc.line + 1, lc.col + 1))
            }
        }
    }
}
