//! Where an IR location is in the file: `FileLocs` turns a `Loc` (a range relative to its
//! function's `def`, or a stdlib function) into an absolute range or a path:line:col. A
//! leaf the printers, the analyses and the session share. `SourcePositions` is the same
//! without a database, for the interpreter's messages.

use std::collections::HashMap;
use std::sync::Arc;

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

/// The positions of one file's IR locations, owned: what a launch carries so that the
/// interpreter can name a source position (`path:line:col`) in its messages without a
/// database, instead of an offset for a front door to re-parse.
#[derive(Clone, Debug)]
pub struct SourcePositions {
    path: String,
    text: Arc<str>,
    index: LineIndex,
    /// Each function's anchor (first byte), by name; the first definition of a name.
    anchors: HashMap<String, u32>,
}

impl SourcePositions {
    pub fn of(db: &dyn Db, file: SourceFile) -> SourcePositions {
        let text = file.text(db);
        let mut anchors = HashMap::new();
        for f in &item_index(db, file).functions {
            anchors.entry(f.key.name(db).to_string()).or_insert(f.anchor);
        }
        SourcePositions {
            path: file.path(db).to_string_lossy().into_owned(),
            index: LineIndex::new(text),
            text: Arc::from(text.as_str()),
            anchors,
        }
    }
}

impl LocResolver for SourcePositions {
    fn resolve(&self, loc: &Loc) -> Option<(String, u32, u32)> {
        match &loc.origin {
            Origin::Stdlib { file, .. } => Some((format!("tessera/stdlib/{file}"), 1, 1)),
            Origin::Function(name) => {
                let start = loc.range.start + self.anchors.get(name.as_str())?;
                let lc = self.index.line_col(&self.text, start);
                Some((self.path.clone(), lc.line + 1, lc.col + 1))
            }
            Origin::None => None,
        }
    }
}
