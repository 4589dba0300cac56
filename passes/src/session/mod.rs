//! The analysis session: the one layer every front door asks (in the spirit of
//! rust-analyzer's `ide` crate). `tessera lower`/`run`/`autotune`, the language server's
//! requests and hovers, and the explorer hold an [`AnalysisHost`] (or, on a database
//! they manage themselves, an [`Analysis`] over a snapshot) and render its answers.
//!
//! The contract:
//! - **Function lookup** is [`Analysis::function`]: the first definition of a name, or
//!   an error listing the file's functions.
//! - **Configurations** come from [`Analysis::configure`] alone: one set of defaults
//!   (the fixed schedule or the first autotune candidate; shape symbols the tiles use at
//!   [`crate::config::DEFAULT_SHAPE`]) and one override rule ([`overrides`]).
//! - **Lowering** at any stage, resource, register and bank-conflict summaries, and the
//!   hovers that need a target are methods here; launches are the backends crate's
//!   extension of the same session (`tessera_backends::session`).
//! - **Every answer is a [`Cancellable`]**: panics and salsa cancellation are caught
//!   here ([`capture`]) and come back as a [`SessionError`] with a kind and an absolute
//!   span — never text for the caller to parse.

pub mod capture;
mod hover;
mod mesh;
pub use mesh::{MeshCollective, MeshValue, MeshView};
pub mod overrides;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use salsa::Setter;
use tessera_frontend::check::schedule::SpaceKey;
use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind, KernelSchedule, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::text::TextRange;
use tessera_frontend::{Database, Db, FnKey, SourceFile};

use crate::analysis::{BankConflict, RegisterProfile, Resources};
use crate::config::Config;
use crate::ir::{Func, Loc};
use crate::stages::LoweredText;
use crate::stages::Stage;
use crate::target::Target;
pub use capture::{catch, Cancellable, ErrorKind, SessionError};
pub use overrides::{OverrideKind, Overrides, Rejection};

/// Owns the database of one file and applies edits to it; [`AnalysisHost::analysis`]
/// answers questions about the current text.
pub struct AnalysisHost {
    db: Database,
    file: SourceFile,
}

impl AnalysisHost {
    /// A session over `text`, shown as `path` in messages and IR locations.
    pub fn new(path: PathBuf, text: String, utf8_error: Option<u32>) -> AnalysisHost {
        let db = Database::default();
        let file = SourceFile::new(&db, path, text, utf8_error);
        AnalysisHost { db, file }
    }

    pub fn analysis(&self) -> Analysis<'_> {
        Analysis { db: &self.db, file: self.file }
    }

    /// Replaces the text (salsa then recomputes only the items that changed). Returns
    /// whether anything changed.
    pub fn set_text(&mut self, text: String, utf8_error: Option<u32>) -> bool {
        if self.file.text(&self.db) == &text && self.file.utf8_error(&self.db) == utf8_error {
            return false;
        }
        self.file.set_text(&mut self.db).to(text);
        self.file.set_utf8_error(&mut self.db).to(utf8_error);
        true
    }

    pub fn db(&self) -> &Database {
        &self.db
    }

    pub fn file(&self) -> SourceFile {
        self.file
    }
}

/// Questions about one file of a database.
#[derive(Copy, Clone)]
pub struct Analysis<'db> {
    db: &'db dyn Db,
    file: SourceFile,
}

/// A function of the file, found by name.
#[derive(Copy, Clone, Debug)]
pub struct Function<'db> {
    pub key: FnKey<'db>,
    /// The item's first byte (its first decorator); the base of its relative ranges.
    pub anchor: u32,
}

/// A function as a picker or an outline lists it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FunctionSummary {
    pub name: String,
    pub kind: FunctionKind,
    /// Absolute range of the whole item, decorators included.
    pub range: TextRange,
    /// Absolute range of its name.
    pub name_range: TextRange,
}

/// The configuration a kernel is lowered or launched with, and what went into it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Configured {
    pub config: Config,
    /// Shape symbols given [`crate::config::DEFAULT_SHAPE`] because no dim set them.
    pub assumed: Vec<String>,
    /// The kernel's autotune space (empty for a fixed schedule).
    pub space: Vec<SpaceKey>,
    /// The schedule keys its decorator writes (`@kernel.schedule(S)`'s, canonical names);
    /// the configuration's other keys are the plain-kernel defaults.
    pub written: Vec<String>,
    /// The schedule keys its body reads through `ctx.` (canonical names).
    pub read: Vec<String>,
    /// The declared defaults of int parameters that are shape symbols (`reps: int = 3`):
    /// what a launch binds them to when no dim is given.
    pub symbol_defaults: BTreeMap<String, i64>,
    /// `@kernel.auto`: searched over the target's default space when `space` is empty
    /// (`crate::auto_space`).
    pub auto: bool,
    /// Every shape symbol of the signature (what a launch gives values for).
    pub symbols: Vec<String>,
    /// Overrides the rule refused; the configuration leaves them out.
    pub rejected: Vec<Rejection>,
}

impl Configured {
    /// The refusal of the `kind` override named `key` (schedule keys by canonical name).
    pub fn rejection(&self, kind: OverrideKind, key: &str) -> Option<&Rejection> {
        let canonical = |k: &str| tessera_frontend::check::schedule::canonical_key(k).to_string();
        self.rejected.iter().find(|r| {
            r.kind == kind
                && if kind == OverrideKind::Schedule { canonical(&r.key) == canonical(key) } else { r.key == key }
        })
    }

    /// The configuration only if every override was accepted: the CLI and the server
    /// refuse a request with a rejected override; the explorer shows the rejection.
    pub fn strict(self) -> Cancellable<Configured> {
        match self.rejected.first() {
            Some(r) => Err(SessionError::new(ErrorKind::Rejected, r.to_string())),
            None => Ok(self),
        }
    }
}

impl<'db> Analysis<'db> {
    /// A session view of `file` in a database the caller manages (the language server's
    /// snapshots).
    pub fn new(db: &'db dyn Db, file: SourceFile) -> Analysis<'db> {
        Analysis { db, file }
    }

    pub fn db(&self) -> &'db dyn Db {
        self.db
    }

    pub fn file(&self) -> SourceFile {
        self.file
    }

    /// The path as shown in messages.
    pub fn shown_path(&self) -> String {
        self.file.path(self.db).to_string_lossy().into_owned()
    }

    /// Every function of the file in source order.
    pub fn functions(&self) -> Cancellable<Vec<FunctionSummary>> {
        let db = self.db;
        catch("listing the functions", || {
            item_index(db, self.file)
                .functions
                .iter()
                .map(|f| FunctionSummary {
                    name: f.key.name(db).to_string(),
                    kind: fn_decorators(db, f.key).kind,
                    range: f.range,
                    name_range: f.name_range,
                })
                .collect()
        })
    }

    /// The function named `name`, or an error listing the file's functions.
    pub fn function(&self, name: &str) -> Cancellable<Function<'db>> {
        let db = self.db;
        let found = catch("finding a function", || {
            let index = item_index(db, self.file);
            match index.function(db, name) {
                Some(entry) => Ok(Function { key: entry.key, anchor: entry.anchor }),
                None => Err(index.function_names(db)),
            }
        })?;
        found.map_err(|names| {
            let listed = if names.is_empty() {
                " (it defines no function)".to_string()
            } else {
                format!(" (it defines {})", names.join(", "))
            };
            SessionError::new(ErrorKind::NoFunction, format!("{} has no function `{name}`{listed}", self.shown_path()))
        })
    }

    /// The schedule a function declares (the default one for a plain kernel).
    pub fn schedule(&self, f: Function<'db>) -> Cancellable<KernelSchedule> {
        let db = self.db;
        catch("reading the schedule", || fn_decorators(db, f.key).schedule.clone().unwrap_or_default())
    }

    /// The one builder of configurations: `base` (the kernel's own — its fixed schedule
    /// or first autotune candidate — when `None`) with every override the rule accepts,
    /// and each shape symbol the tiles use from the dims or [`crate::config::DEFAULT_SHAPE`].
    pub fn configure(
        &self,
        f: Function<'db>,
        base: Option<&ScheduleValue>,
        overrides: &Overrides,
    ) -> Cancellable<Configured> {
        let db = self.db;
        let computed = catch("choosing a configuration", || {
            if let Some(e) = crate::queries::decorator_error(db, f.key) {
                return Err(SessionError::lowering(f.anchor, e));
            }
            let name = f.key.name(db).to_string();
            let declared = fn_decorators(db, f.key).schedule.clone().unwrap_or_default();
            let symbols = fn_signature(db, f.key).symbols.clone();
            let mut rejected = Vec::new();
            let mut schedule = base.cloned().unwrap_or_else(|| crate::queries::default_schedule(db, f.key));
            for (key, value) in &overrides.schedule {
                match overrides::schedule_rejection(&name, &declared, key, value) {
                    Some(r) => rejected.push(r),
                    None => schedule.set(key, value.clone()),
                }
            }
            let mut dims = BTreeMap::new();
            for (symbol, &value) in &overrides.dims {
                match overrides::dim_rejection(&name, Some(&declared), &symbols, symbol, value) {
                    Some(r) => rejected.push(r),
                    None => {
                        dims.insert(symbol.clone(), value);
                    }
                }
            }
            // An int parameter used as a size takes its declared default, as a call would.
            let symbol_defaults = crate::config::symbol_defaults(db, f.key);
            for (symbol, &value) in &symbol_defaults {
                dims.entry(symbol.clone()).or_insert(value);
            }
            let graph =
                crate::queries::graph_ir(db, f.key).clone().map_err(|e| SessionError::lowering(f.anchor, &e))?;
            let (mut config, assumed) = crate::config::config_for(&graph, schedule, &dims);
            // A graph function specializes no tile dims; the dims given still size its
            // collectives and buffers.
            if graph.kind == crate::ir::FuncKind::Graph {
                config.shapes.extend(dims);
            }
            let written = declared.fixed.values.keys().cloned().collect();
            let read = tessera_frontend::check::infer_function(db, f.key).ctx_reads.clone();
            let (space, auto) = (declared.space.clone(), declared.auto);
            Ok(Configured { config, assumed, space, written, read, symbol_defaults, auto, symbols, rejected })
        });
        computed?
    }

    /// The IR text of one stage (what `tessera lower` prints).
    pub fn lower(&self, f: Function<'db>, stage: Stage, config: &Config, target: Target) -> Cancellable<LoweredText> {
        let name = f.key.name(self.db).to_string();
        let what = format!("lowering `{name}` to {} IR", stage.name());
        catch(&what, || crate::stages::lowering_text(self.db, f.key, stage, target, config))?
            .map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// The memoized Tile IR itself (what the interpreter and the code generators read).
    pub fn tile_ir(&self, f: Function<'db>, config: &Config, target: Target) -> Cancellable<Arc<Func>> {
        catch("lowering to Tile IR", || crate::queries::tile_ir(self.db, f.key, config.clone(), target).clone())?
            .map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// Every pass from Graph IR to Tile IR: (pass, stage, printed IR, whether it changed
    /// anything), the data behind `--print-after-all`.
    pub fn pipeline(
        &self,
        f: Function<'db>,
        config: &Config,
        target: Target,
    ) -> Cancellable<Vec<(String, Stage, LoweredText, bool)>> {
        use crate::ir::Level;
        let db = self.db;
        let computed = catch("running the pass pipeline", || {
            let snapshots = crate::queries::pipeline(db, f.key, config.clone(), target).clone()?;
            Ok(snapshots
                .iter()
                .map(|s| {
                    let stage = match s.level {
                        Level::Graph => Stage::Graph,
                        Level::Schedule => Stage::Sched,
                        Level::Tile => Stage::Tile,
                    };
                    (s.pass.to_string(), stage, crate::stages::print_ir(db, self.file, &s.func), s.changed)
                })
                .collect())
        })?;
        computed.map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// Registers, shared memory and occupancy of one configuration on a GPU target.
    pub fn resources(&self, f: Function<'db>, config: &Config, target: Target) -> Cancellable<Arc<Resources>> {
        catch("estimating resources", || {
            crate::analysis::kernel_resources(self.db, f.key, config.clone(), target).clone()
        })?
        .map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// The worst bank conflict of each shared buffer (W0601's analysis).
    pub fn bank_conflicts(
        &self,
        f: Function<'db>,
        config: &Config,
        target: Target,
    ) -> Cancellable<Arc<Vec<BankConflict>>> {
        catch("finding bank conflicts", || {
            crate::analysis::kernel_bank_conflicts(self.db, f.key, config.clone(), target).clone()
        })?
        .map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// Live registers per source line.
    pub fn register_profile(&self, f: Function<'db>, config: &Config, target: Target) -> Cancellable<RegisterProfile> {
        catch("estimating registers", || crate::analysis::register_profile(self.db, f.key, config.clone(), target))?
            .map_err(|e| SessionError::lowering(f.anchor, &e))
    }

    /// Every diagnostic of the file for `target` (`tessera check`'s list).
    pub fn diagnostics(&self, target: Target) -> Cancellable<Vec<Diagnostic>> {
        catch("checking the file", || crate::diagnostics::file_diagnostics(self.db, self.file, target))
    }

    /// The absolute range of an IR location in this file.
    pub fn absolute(&self, loc: &Loc) -> Option<TextRange> {
        crate::locs::FileLocs::new(self.db, self.file).absolute(loc)
    }

    /// `(path, 1-based line, 1-based column)` of an IR location (stdlib locations name
    /// their stdlib file).
    pub fn position(&self, loc: &Loc) -> Option<(String, u32, u32)> {
        use crate::ir::print::LocResolver;
        crate::locs::FileLocs::new(self.db, self.file).resolve(loc)
    }
}

#[cfg(test)]
mod tests;
