//! The server's state: the salsa database, the open documents, and the settings.
//!
//! One `State` behind a mutex. Requests take a `Snapshot` (a clone of the database
//! handle plus the document's text and version) and release the lock at once; edits
//! apply setters on the main handle, which cancels queries running on snapshots.
//! Invariant: code holding a snapshot never takes the state lock (the setter waits for
//! every snapshot to be dropped while the lock is held).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use salsa::{Database as _, Setter};
use tessera_frontend::diagnostics::Code;
use tessera_frontend::{Database, LineIndex, SourceFile};
use tessera_passes::Target;
use tower_lsp::lsp_types::{TextDocumentContentChangeEvent, Url};

use crate::convert;

/// Which diagnostic codes are shown (tessera.toml `select` / `ignore`, code prefixes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeFilter {
    select: Vec<String>,
    ignore: Vec<String>,
}

impl CodeFilter {
    pub fn allows(&self, code: Code) -> bool {
        let matches = |p: &String| p == "ALL" || code.as_str().starts_with(p.as_str());
        (self.select.is_empty() || self.select.iter().any(matches)) && !self.ignore.iter().any(matches)
    }
}

/// What a `tessera.toml` says (the fields the server uses; others are ignored).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectConfig {
    pub path: Option<PathBuf>,
    pub target: Option<Target>,
    pub filter: CodeFilter,
}

/// The nearest `tessera.toml` at or above `file`'s directory.
pub fn project_config(file: &Path) -> ProjectConfig {
    let mut dir = file.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join("tessera.toml");
        if candidate.is_file() {
            let mut config = ProjectConfig { path: Some(candidate.clone()), ..ProjectConfig::default() };
            if let Ok(text) = std::fs::read_to_string(&candidate) {
                if let Ok(value) = text.parse::<toml::Table>() {
                    config.target = value.get("target").and_then(|t| t.as_str()).and_then(|t| t.parse().ok());
                    let list = |key: &str| -> Vec<String> {
                        value
                            .get(key)
                            .and_then(|v| v.as_array())
                            .map(|a| {
                                a.iter()
                                    .filter_map(|c| c.as_str())
                                    .map(|c| c.trim().to_ascii_uppercase())
                                    .filter(|c| !c.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default()
                    };
                    config.filter = CodeFilter { select: list("select"), ignore: list("ignore") };
                }
            }
            return config;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    ProjectConfig::default()
}

pub struct Document {
    pub file: SourceFile,
    pub version: i32,
    pub text: Arc<String>,
    pub index: Arc<LineIndex>,
    pub project: ProjectConfig,
    /// Diagnostics of an earlier version are still being computed (an edit now is part
    /// of a burst: debounce it).
    pub diagnostics_pending: bool,
    pub published: Option<i32>,
}

pub struct State {
    pub db: Database,
    pub docs: HashMap<Url, Document>,
    /// Bytes of the documents closed since the database was last rebuilt: their inputs
    /// are emptied, but salsa keeps what was memoized for them (per-function results are
    /// keyed by interned names that are never collected) until the database is rebuilt.
    closed_bytes: usize,
    /// The target from the editor settings.
    pub settings_target: Option<Target>,
    /// Whether diagnostics include the target lints (setting `targetLints`, default on).
    pub target_lints: bool,
}

impl Default for State {
    fn default() -> State {
        State {
            db: Database::default(),
            docs: HashMap::new(),
            closed_bytes: 0,
            settings_target: None,
            target_lints: true,
        }
    }
}

/// Everything a request needs, detached from the state lock.
pub struct Snapshot {
    pub db: Database,
    pub uri: Url,
    pub file: SourceFile,
    pub text: Arc<String>,
    pub index: Arc<LineIndex>,
    pub target: Target,
    pub target_lints: bool,
    pub filter: CodeFilter,
}

pub fn path_of(uri: &Url) -> PathBuf {
    uri.to_file_path().unwrap_or_else(|_| PathBuf::from(uri.as_str()))
}

impl State {
    pub fn target_for(&self, doc: &Document) -> Target {
        doc.project.target.or(self.settings_target).unwrap_or_default()
    }

    pub fn snapshot(&self, uri: &Url) -> Option<Snapshot> {
        let doc = self.docs.get(uri)?;
        Some(Snapshot {
            db: self.db.clone(),
            uri: uri.clone(),
            file: doc.file,
            text: doc.text.clone(),
            index: doc.index.clone(),
            target: self.target_for(doc),
            target_lints: self.target_lints,
            filter: doc.project.filter.clone(),
        })
    }

    pub fn open(&mut self, uri: Url, version: i32, text: String) {
        let path = path_of(&uri);
        let file = match self.docs.get(&uri) {
            // Opened again without a close: the same input, new text.
            Some(doc) => {
                let file = doc.file;
                file.set_text(&mut self.db).to(text.clone());
                file
            }
            None => SourceFile::new(&self.db, path.clone(), text.clone(), None),
        };
        let index = Arc::new(LineIndex::new(&text));
        let project = if uri.scheme() == "file" { project_config(&path) } else { ProjectConfig::default() };
        self.docs.insert(
            uri,
            Document {
                file,
                version,
                text: Arc::new(text),
                index,
                project,
                diagnostics_pending: false,
                published: None,
            },
        );
    }

    /// Applies LSP content changes (ranges in UTF-16; positions past a line's end or the
    /// file's end are clamped). Returns false for an unknown document.
    pub fn change(&mut self, uri: &Url, version: i32, changes: Vec<TextDocumentContentChangeEvent>) -> bool {
        let Some(doc) = self.docs.get_mut(uri) else {
            return false;
        };
        let mut text: String = doc.text.as_str().to_owned();
        let mut index = doc.index.clone();
        for change in changes {
            match change.range {
                None => text = change.text,
                Some(range) => {
                    let mut start = convert::offset(&text, &index, range.start) as usize;
                    let mut end = convert::offset(&text, &index, range.end) as usize;
                    if start > end {
                        std::mem::swap(&mut start, &mut end);
                    }
                    text.replace_range(start..end, &change.text);
                }
            }
            index = Arc::new(LineIndex::new(&text));
        }
        doc.version = version;
        doc.index = index;
        doc.text = Arc::new(text.clone());
        let file = doc.file;
        file.set_text(&mut self.db).to(text);
        true
    }

    /// Forgets a document and releases what was computed for it. Returns true when the
    /// database was rebuilt (the other open documents' analyses are then recomputed on
    /// their next request: the caller may warm them).
    ///
    /// Emptying the input is not enough: salsa keeps the memoized results of queries
    /// nobody asks again, and the per-function ones are keyed by interned names that
    /// live as long as the database. So the database is rebuilt from the open documents
    /// once the text closed since the last rebuild is at least as large as the open
    /// text: memory returns after a large document is closed, and the recomputation a
    /// rebuild costs is paid for by the closed text (amortized, closing small files
    /// beside a large one does not re-analyze the large one each time).
    pub fn close(&mut self, uri: &Url) -> bool {
        let Some(doc) = self.docs.remove(uri) else {
            return false;
        };
        self.closed_bytes = self.closed_bytes.saturating_add(doc.text.len().max(1));
        let open_bytes: usize = self.docs.values().map(|d| d.text.len()).sum();
        if self.closed_bytes >= open_bytes {
            self.rebuild_database();
            return true;
        }
        // Its analyses become small when asked again, and nothing depends on it.
        doc.file.set_text(&mut self.db).to(String::new());
        false
    }

    /// A fresh database holding only the open documents.
    pub fn rebuild_database(&mut self) {
        // Cancels the queries running on snapshots and waits until they let go of the
        // old database (a snapshot holder never takes the state lock), so that it is
        // freed here rather than whenever the slowest of them would have finished.
        self.db.trigger_cancellation();
        let db = Database::default();
        for (uri, doc) in self.docs.iter_mut() {
            let utf8_error = doc.file.utf8_error(&self.db);
            doc.file = SourceFile::new(&db, path_of(uri), doc.text.as_str().to_owned(), utf8_error);
        }
        drop(std::mem::replace(&mut self.db, db));
        self.closed_bytes = 0;
    }

    /// Re-reads every open document's `tessera.toml`.
    pub fn reload_project_configs(&mut self) {
        for (uri, doc) in self.docs.iter_mut() {
            if uri.scheme() == "file" {
                doc.project = project_config(&path_of(uri));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp::lsp_types::{Position, Range};

    fn change(range: Option<((u32, u32), (u32, u32))>, text: &str) -> TextDocumentContentChangeEvent {
        TextDocumentContentChangeEvent {
            range: range.map(|((a, b), (c, d))| Range::new(Position::new(a, b), Position::new(c, d))),
            range_length: None,
            text: text.into(),
        }
    }

    #[test]
    fn incremental_edits_use_utf16_and_clamp() {
        let mut state = State::default();
        let uri = Url::parse("untitled:a.tsr").unwrap();
        state.open(uri.clone(), 1, "x = \"é😀\" + y\nz\n".into());
        // Replace `y` (UTF-16 column 12: é is 1 unit, 😀 is 2).
        assert!(state.change(&uri, 2, vec![change(Some(((0, 12), (0, 13))), "w")]));
        assert_eq!(state.docs[&uri].text.as_str(), "x = \"é😀\" + w\nz\n");
        // Past the end of a line: clamped to its end; past the file: to its end.
        state.change(&uri, 3, vec![change(Some(((1, 99), (1, 200))), "!")]);
        state.change(&uri, 4, vec![change(Some(((10_000, 10_000), (10_000, 10_000))), "#")]);
        assert_eq!(state.docs[&uri].text.as_str(), "x = \"é😀\" + w\nz!\n#");
        // Several changes in one notification apply in order.
        state.change(&uri, 5, vec![change(Some(((0, 0), (0, 1))), "xx"), change(Some(((0, 0), (0, 2))), "q")]);
        assert!(state.docs[&uri].text.starts_with("q = "));
        assert_eq!(state.docs[&uri].file.text(&state.db), state.docs[&uri].text.as_str());
        assert_eq!(state.docs[&uri].version, 5);
    }
}
