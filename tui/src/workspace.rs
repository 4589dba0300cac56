//! The explorer's one source of compiler facts: a salsa database with the open file as its
//! input. Every answer comes from the same queries `tessera lower`, `tessera check` and
//! the language server ask; nothing here caches IR of its own.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use salsa::Setter;
use tessera_backends::autotune;
use tessera_backends::launch::{self, Plan, PlanRequest};
use tessera_frontend::check::schedule::{validate, SpaceKey};
use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind, KeyValue};
use tessera_frontend::db::item_index;
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::ide::{highlight, HlRange};
use tessera_frontend::text::{LineIndex, TextRange};
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::analysis::{register_profile, RegisterProfile};
use tessera_passes::ir::{Func, Level};
use tessera_passes::{
    default_config, file_diagnostics, lowering_text, print_ir, Config, LowerError, LoweredText, Stage, Target,
};

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

/// User overrides on top of a kernel's own schedule: what the schedule panel edits.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Overrides {
    pub schedule: BTreeMap<String, KeyValue>,
    pub dims: BTreeMap<String, i64>,
}

/// The configuration a kernel is lowered with, and where each value came from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConfigInfo {
    pub config: Config,
    /// Shape symbols given [`tessera_passes::DEFAULT_SHAPE`] because nothing set them.
    pub assumed: Vec<String>,
    /// The kernel's autotune space (empty for a fixed schedule).
    pub space: Vec<SpaceKey>,
    /// Every dim symbol of the signature (what a launch must give values for).
    pub symbols: Vec<String>,
    /// Overrides the frontend's schedule validation rejected: (key, E0701 message).
    pub rejected: Vec<(String, String)>,
}

/// An autotune space after pruning.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TuneSpace {
    pub candidates: Vec<Config>,
    /// Each pruned configuration with the reason (`pruned (registers): ...`).
    pub pruned: Vec<(Config, String)>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

pub struct Workspace {
    db: Database,
    file: SourceFile,
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

/// Runs a compiler query, turning a panic (a compiler bug) into an error message: the
/// explorer shows it and keeps going.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    crate::panics::catching(|| catch_unwind(AssertUnwindSafe(f))).map_err(|payload| {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "unknown panic".to_string()
        };
        format!("internal error while {what}: {text}")
    })
}

impl Workspace {
    /// Opens a file from disk; the path as given is the one shown (and printed in `loc(...)`).
    pub fn open(path: &Path) -> Result<Workspace, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (text, utf8_error) = decode(bytes);
        let db = Database::default();
        let line_index = LineIndex::new(&text);
        let file = SourceFile::new(&db, path.to_path_buf(), text, utf8_error);
        Ok(Workspace { db, file, disk: Some(path.to_path_buf()), stamp: stamp(path), revision: 0, line_index })
    }

    /// A workspace over text that is not on disk (tests, benchmarks).
    pub fn from_text(shown: &Path, text: String) -> Workspace {
        let db = Database::default();
        let line_index = LineIndex::new(&text);
        let file = SourceFile::new(&db, shown.to_path_buf(), text, None);
        Workspace { db, file, disk: None, stamp: None, revision: 0, line_index }
    }

    /// Bumps on every change of the text.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn path(&self) -> &Path {
        self.file.path(&self.db)
    }

    pub fn text(&self) -> &str {
        self.file.text(&self.db)
    }

    pub fn line_index(&self) -> &LineIndex {
        &self.line_index
    }

    /// Replaces the text: salsa then recomputes only what depends on the items that
    /// changed (an edit inside one kernel leaves the others' IR memoized).
    pub fn set_text(&mut self, text: String, utf8_error: Option<u32>) {
        if self.text() == text && self.file.utf8_error(&self.db) == utf8_error {
            return;
        }
        self.line_index = LineIndex::new(&text);
        self.file.set_text(&mut self.db).to(text);
        self.file.set_utf8_error(&mut self.db).to(utf8_error);
        self.revision += 1;
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

    fn key(&self, name: &str) -> Option<(FnKey<'_>, u32)> {
        item_index(&self.db, self.file)
            .functions
            .iter()
            .find(|f| f.key.name(&self.db) == name)
            .map(|f| (f.key, f.anchor))
    }

    /// Every function of the file in source order.
    pub fn functions(&self) -> Vec<FunctionInfo> {
        let db = &self.db;
        let listed = guarded("listing the functions", || {
            item_index(db, self.file)
                .functions
                .iter()
                .map(|f| FunctionInfo {
                    name: f.key.name(db).clone(),
                    kind: fn_decorators(db, f.key).kind,
                    range: f.range,
                    name_range: f.name_range,
                    line: self.line_index.line_of(f.name_range.start),
                })
                .collect()
        });
        listed.unwrap_or_default()
    }

    fn absolute(&self, anchor: u32, e: &LowerError) -> StageError {
        let range = (e.range != TextRange::default() || anchor != 0).then(|| e.range.shift(anchor));
        StageError { message: e.message.clone(), range }
    }

    /// The configuration `tessera lower` would use for `name` with `--schedule`/`--dims`
    /// set to the overrides: the kernel's schedule (first autotune candidate), shape
    /// symbols from the dims or the default, then every override the frontend's schedule
    /// validation accepts.
    pub fn config(&self, name: &str, overrides: &Overrides) -> Result<ConfigInfo, StageError> {
        let Some((key, anchor)) = self.key(name) else {
            return Err(StageError { message: format!("no function `{name}` in this file"), range: None });
        };
        let db = &self.db;
        let computed = guarded("choosing a configuration", || {
            let (mut config, assumed) =
                default_config(db, key, &overrides.dims).map_err(|e| self.absolute(anchor, &e))?;
            let mut rejected = Vec::new();
            for (k, v) in &overrides.schedule {
                match validate(k, v) {
                    Some(problem) => rejected.push((k.clone(), problem)),
                    None => config.schedule.set(k, v.clone()),
                }
            }
            let space = fn_decorators(db, key).schedule.as_ref().map(|s| s.space.clone()).unwrap_or_default();
            let symbols = fn_signature(db, key).symbols.clone();
            Ok(ConfigInfo { config, assumed, space, symbols, rejected })
        });
        computed.map_err(|message| StageError { message, range: None })?
    }

    /// Every stage of `name`, each through `lowering_text` (the query behind `tessera
    /// lower`). One stage's failure does not hide the stages before it.
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
        let Some((key, anchor)) = self.key(name) else {
            return Err(StageError { message: format!("no function `{name}` in this file"), range: None });
        };
        let what = format!("lowering `{name}` to {} IR", stage.name());
        match guarded(&what, || lowering_text(&self.db, key, stage, target, config)) {
            Ok(Ok(text)) => Ok(Arc::new(IrDoc::new(text, stage, target))),
            Ok(Err(e)) => Err(self.absolute(anchor, &e)),
            Err(message) => Err(StageError { message, range: None }),
        }
    }

    /// The kernel's Tile IR, as the interpreter and the code generators consume it (the
    /// memoized query result itself, shared through its `Arc`).
    pub fn tile_func(&self, name: &str, config: &Config, target: Target) -> Result<Arc<Func>, StageError> {
        let Some((key, anchor)) = self.key(name) else {
            return Err(StageError { message: format!("no function `{name}` in this file"), range: None });
        };
        match guarded("lowering to Tile IR", || tessera_passes::tile_ir(&self.db, key, config.clone(), target).clone())
        {
            Ok(Ok(func)) => Ok(func),
            Ok(Err(e)) => Err(self.absolute(anchor, &e)),
            Err(message) => Err(StageError { message, range: None }),
        }
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
        let Some((key, _)) = self.key(name) else {
            return Err(format!("no function `{name}` in this file"));
        };
        let db = &self.db;
        guarded("planning the launch", || {
            let info = launch::kernel_info(db, key).map_err(|e| e.message)?;
            let request = PlanRequest {
                target,
                config: config.clone(),
                dims: dims.clone(),
                args: Vec::new(),
                seed: launch::DEFAULT_SEED,
                code,
                max_memory: None,
            };
            launch::plan(db, key, &info, &request).map_err(|e| e.message)
        })?
    }

    /// The kernel's autotune space at these dims, pruned as `tessera autotune` and W0702
    /// prune it: the configurations to measure, and each pruned one with its reason.
    pub fn tune_space(&self, name: &str, dims: &BTreeMap<String, i64>, target: Target) -> Result<TuneSpace, String> {
        let Some((key, _)) = self.key(name) else {
            return Err(format!("no function `{name}` in this file"));
        };
        let db = &self.db;
        guarded("pruning the autotune space", || {
            let info = launch::kernel_info(db, key).map_err(|e| e.message)?;
            let space = autotune::space(db, key, &info, dims, target).map_err(|e| e.message)?;
            let candidates = space.candidates.into_iter().map(|c| c.config).collect();
            let mut pruned = Vec::new();
            for p in space.pruned {
                let config = launch::config_for(db, key, p.schedule, dims).map_err(|e| e.message)?;
                pruned.push((config, format!("pruned ({}): {}", p.reason.category(), p.reason.detail())));
            }
            Ok(TuneSpace { candidates, pruned })
        })?
    }

    /// Every pass from Graph IR to Tile IR with the IR after it, printed with its source
    /// map (`tessera_passes::pipeline`, the query behind `--print-after-all`).
    pub fn pipeline(
        &self,
        name: &str,
        config: &Config,
        target: Target,
    ) -> Result<Vec<(String, Stage, LoweredText, bool)>, StageError> {
        let Some((key, anchor)) = self.key(name) else {
            return Err(StageError { message: format!("no function `{name}` in this file"), range: None });
        };
        let db = &self.db;
        let computed = guarded("running the pass pipeline", || {
            let snapshots = tessera_passes::pipeline::pipeline(db, key, config.clone(), target).clone()?;
            Ok(snapshots
                .iter()
                .map(|s| {
                    let stage = match s.level {
                        Level::Graph => Stage::Graph,
                        Level::Schedule => Stage::Sched,
                        Level::Tile => Stage::Tile,
                    };
                    (s.pass.to_string(), stage, print_ir(db, self.file, &s.func), s.changed)
                })
                .collect())
        });
        match computed {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.absolute(anchor, &e)),
            Err(message) => Err(StageError { message, range: None }),
        }
    }

    /// Live registers per source line of a kernel (`tessera_passes::analysis`).
    pub fn register_profile(&self, name: &str, config: &Config, target: Target) -> Result<RegisterProfile, StageError> {
        let Some((key, anchor)) = self.key(name) else {
            return Err(StageError { message: format!("no function `{name}` in this file"), range: None });
        };
        match guarded("estimating registers", || register_profile(&self.db, key, config.clone(), target)) {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(self.absolute(anchor, &e)),
            Err(message) => Err(StageError { message, range: None }),
        }
    }

    /// Every diagnostic of the file for `target` (`tessera check`'s list).
    pub fn diagnostics(&self, target: Target) -> Result<Vec<Diagnostic>, String> {
        guarded("checking the file", || file_diagnostics(&self.db, self.file, target))
    }

    /// Semantic highlighting of the source (the language server's semantic tokens).
    pub fn highlights(&self) -> Vec<HlRange> {
        guarded("highlighting", || highlight(&self.db, self.file)).unwrap_or_default()
    }

    /// The database, for callers that ask further queries (benchmarks, tests).
    pub fn db(&self) -> &Database {
        &self.db
    }
}
