//! The explorer's one source of compiler facts: an analysis session
//! (`tessera_passes::session`) over the open file, plus what only the explorer needs (the
//! file on disk, its line index, a revision counter). Every answer comes from the session
//! `tessera lower`, `tessera run` and the language server ask; nothing here caches IR of
//! its own or decides a rule of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tessera_backends::launch::Plan;
use tessera_backends::session::Launches;
pub use tessera_backends::session::TuneSpace;
use tessera_frontend::check::{FunctionKind, KeyValue};
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::ide::{highlight, HlRange};
use tessera_frontend::text::{LineIndex, TextRange};
use tessera_frontend::Database;
use tessera_passes::analysis::RegisterProfile;
use tessera_passes::ir::Func;
pub use tessera_passes::session::Overrides;
use tessera_passes::session::{Analysis, AnalysisHost, Cancellable, Configured, Function, SessionError};
use tessera_passes::{Config, LoweredText, Stage, Target};

use crate::irdoc::IrDoc;

/// A function of the file, as the kernel picker lists it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FunctionInfo {
    pub name: String,
    pub kind: FunctionKind,
    /// Absolute range of the whole item, decorators included.
    pub range: TextRange,
    /// Absolute range of its name.
    pub name_range: TextRange,
    /// 0-based line of its name.
    pub line: u32,
}

/// Why a stage has no IR, with the absolute source range to point at.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StageError {
    pub message: String,
    pub range: Option<TextRange>,
}

impl From<SessionError> for StageError {
    fn from(e: SessionError) -> StageError {
        StageError { message: e.message, range: e.range }
    }
}

pub type StageOutcome = Result<Arc<IrDoc>, StageError>;

/// Every stage of one kernel under one configuration and target.
#[derive(Clone, Debug)]
pub struct Lowering {
    pub stages: [StageOutcome; 4],
    /// Wall time of each stage's query plus printing (memoized stages are near zero).
    pub times: [Duration; 4],
    pub elapsed: Duration,
}

impl Lowering {
    pub fn stage(&self, stage: Stage) -> &StageOutcome {
        &self.stages[stage_index(stage)]
    }
}

pub fn stage_index(stage: Stage) -> usize {
    Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0)
}

/// The configuration a kernel is lowered with, and where each value came from: the
/// session's own answer (`Configured`), with the overrides its rule refused.
pub type ConfigInfo = Configured;

#[derive(Clone, PartialEq, Eq, Debug)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

pub struct Workspace {
    host: AnalysisHost,
    /// Where the file lives on disk (absent for a workspace made from text).
    disk: Option<PathBuf>,
    stamp: Option<Stamp>,
    revision: u64,
    line_index: LineIndex,
}

fn decode(bytes: Vec<u8>) -> (String, Option<u32>) {
    match String::from_utf8(bytes) {
        Ok(text) => (text, None),
        Err(e) => {
            let at = e.utf8_error().valid_up_to() as u32;
            (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(at))
        }
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp { modified: meta.modified().ok(), len: meta.len() })
}

/// Runs a compiler query through the session's panic capture, with the terminal's
/// panic hook quiet (the explorer shows the error and keeps going).
pub fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    crate::panics::catching(|| tessera_passes::session::catch(what, f)).map_err(|e| e.message)
}

/// A session answer, with panics kept off the terminal.
fn quiet<T>(f: impl FnOnce() -> Cancellable<T>) -> Cancellable<T> {
    crate::panics::catching(f)
}

impl Workspace {
    /// Opens a file from disk; the path as given is the one shown (and printed in `loc(...)`).
    pub fn open(path: &Path) -> Result<Workspace, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (text, utf8_error) = decode(bytes);
        let line_index = LineIndex::new(&text);
        let host = AnalysisHost::new(path.to_path_buf(), text, utf8_error);
        Ok(Workspace { host, disk: Some(path.to_path_buf()), stamp: stamp(path), revision: 0, line_index })
    }

    /// A workspace over text that is not on disk (tests, benchmarks).
    pub fn from_text(shown: &Path, text: String) -> Workspace {
        let line_index = LineIndex::new(&text);
        let host = AnalysisHost::new(shown.to_path_buf(), text, None);
        Workspace { host, disk: None, stamp: None, revision: 0, line_index }
    }

    /// The session over the current text.
    pub fn analysis(&self) -> Analysis<'_> {
        self.host.analysis()
    }

    /// Bumps on every change of the text.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn path(&self) -> &Path {
        self.host.file().path(self.host.db())
    }

    pub fn text(&self) -> &str {
        self.host.file().text(self.host.db())
    }

    pub fn line_index(&self) -> &LineIndex {
        &self.line_index
    }

    /// Replaces the text: salsa then recomputes only what depends on the items that
    /// changed (an edit inside one kernel leaves the others' IR memoized).
    pub fn set_text(&mut self, text: String, utf8_error: Option<u32>) {
        let index = LineIndex::new(&text);
        if self.host.set_text(text, utf8_error) {
            self.line_index = index;
            self.revision += 1;
        }
    }

    /// Re-reads the file when its modification time or size changed. `Ok(true)` when the
    /// text changed; an error when the file became unreadable (the last text stays).
    pub fn poll_disk(&mut self) -> Result<bool, String> {
        let Some(path) = self.disk.clone() else {
            return Ok(false);
        };
        let now = stamp(&path);
        if now.is_some() && now == self.stamp {
            return Ok(false);
        }
        self.reload_from_disk(&path, now)
    }

    /// Re-reads the file whatever its stamp says.
    pub fn reload(&mut self) -> Result<bool, String> {
        let Some(path) = self.disk.clone() else {
            return Ok(false);
        };
        let now = stamp(&path);
        self.reload_from_disk(&path, now)
    }

    fn reload_from_disk(&mut self, path: &Path, now: Option<Stamp>) -> Result<bool, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                // Editors that save by rename leave a moment with no file: try again on
                // the next poll rather than forgetting the stamp.
                return Err(format!("{}: {e}", path.display()));
            }
        };
        self.stamp = now;
        let (text, utf8_error) = decode(bytes);
        let before = self.revision;
        self.set_text(text, utf8_error);
        Ok(self.revision != before)
    }

    fn function(&self, name: &str) -> Cancellable<Function<'_>> {
        quiet(|| self.analysis().function(name))
    }

    /// Every function of the file in source order.
    pub fn functions(&self) -> Vec<FunctionInfo> {
        let listed = quiet(|| self.analysis().functions()).unwrap_or_default();
        listed
            .into_iter()
            .map(|f| FunctionInfo {
                line: self.line_index.line_of(f.name_range.start),
                name: f.name,
                kind: f.kind,
                range: f.range,
                name_range: f.name_range,
            })
            .collect()
    }

    /// The configuration `tessera lower` would use for `name` with `--schedule`/`--dims`
    /// set to the overrides (the session's one builder and override rule); overrides the
    /// rule refuses are listed, not applied.
    pub fn config(&self, name: &str, overrides: &Overrides) -> Result<ConfigInfo, StageError> {
        Ok(quiet(|| {
            let f = self.analysis().function(name)?;
            self.analysis().configure(f, None, overrides)
        })?)
    }

    /// Why the override rule refuses `key = value` for `name`'s schedule (the rule the CLI
    /// and the server apply), if it does.
    pub fn schedule_rejection(&self, name: &str, key: &str, value: &KeyValue) -> Option<String> {
        let f = self.function(name).ok()?;
        let schedule = quiet(|| self.analysis().schedule(f)).ok()?;
        tessera_passes::session::overrides::schedule_rejection(name, &schedule, key, value).map(|r| r.reason)
    }

    /// Every stage of `name`, each through the session's lowering (what `tessera lower`
    /// prints). One stage's failure does not hide the stages before it.
    pub fn lower_all(&self, name: &str, config: &Config, target: Target) -> Lowering {
        let start = Instant::now();
        let mut times = [Duration::ZERO; 4];
        let stages = Stage::ALL.map(|stage| {
            let t = Instant::now();
            let out = self.lower(name, stage, config, target);
            times[stage_index(stage)] = t.elapsed();
            out
        });
        Lowering { stages, times, elapsed: start.elapsed() }
    }

    pub fn lower(&self, name: &str, stage: Stage, config: &Config, target: Target) -> StageOutcome {
        let text = quiet(|| {
            let f = self.analysis().function(name)?;
            self.analysis().lower(f, stage, config, target)
        })?;
        Ok(Arc::new(IrDoc::new(text, stage, target)))
    }

    /// The kernel's Tile IR, as the interpreter and the code generators consume it (the
    /// memoized query result itself, shared through its `Arc`).
    pub fn tile_func(&self, name: &str, config: &Config, target: Target) -> Result<Arc<Func>, StageError> {
        Ok(quiet(|| self.analysis().tile_ir(self.analysis().function(name)?, config, target))?)
    }

    /// Plans one launch (`tessera run`'s planning: Tile IR for the target and the CPU
    /// reference, target code when the device needs it, the dims bound, seeded inputs).
    pub fn plan(
        &self,
        name: &str,
        config: &Config,
        target: Target,
        dims: &BTreeMap<String, i64>,
        code: bool,
    ) -> Result<Plan, String> {
        quiet(|| self.analysis().plan(self.analysis().function(name)?, config, target, dims, code))
            .map_err(|e| e.message)
    }

    /// The kernel's autotune space at these dims, pruned as `tessera autotune` and W0702
    /// prune it: the configurations to measure, and each pruned one with its reason.
    pub fn tune_space(&self, name: &str, dims: &BTreeMap<String, i64>, target: Target) -> Result<TuneSpace, String> {
        quiet(|| self.analysis().tune_space(self.analysis().function(name)?, dims, target)).map_err(|e| e.message)
    }

    /// Every pass from Graph IR to Tile IR with the IR after it, printed with its source
    /// map (`tessera_passes::pipeline`, the query behind `--print-after-all`).
    pub fn pipeline(
        &self,
        name: &str,
        config: &Config,
        target: Target,
    ) -> Result<Vec<(String, Stage, LoweredText, bool)>, StageError> {
        Ok(quiet(|| self.analysis().pipeline(self.analysis().function(name)?, config, target))?)
    }

    /// Live registers per source line of a kernel (`tessera_passes::analysis`).
    pub fn register_profile(&self, name: &str, config: &Config, target: Target) -> Result<RegisterProfile, StageError> {
        Ok(quiet(|| self.analysis().register_profile(self.analysis().function(name)?, config, target))?)
    }

    /// Every diagnostic of the file for `target` (`tessera check`'s list).
    pub fn diagnostics(&self, target: Target) -> Result<Vec<Diagnostic>, String> {
        quiet(|| self.analysis().diagnostics(target)).map_err(|e| e.message)
    }

    /// Semantic highlighting of the source (the language server's semantic tokens).
    pub fn highlights(&self) -> Vec<HlRange> {
        guarded("highlighting", || highlight(self.host.db(), self.host.file())).unwrap_or_default()
    }

    /// The database, for callers that ask further queries (benchmarks, tests).
    pub fn db(&self) -> &Database {
        self.host.db()
    }
}
