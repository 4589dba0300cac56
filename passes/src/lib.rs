//! The IR stack (Graph → Schedule → Tile → Target), its passes and the target-aware
//! analyses, all as salsa queries over the frontend's database.
//!
//! Every pass is a query keyed by what it depends on: Graph IR by the function, Schedule
//! and Tile IR by (function, schedule configuration, target). Changing one autotune
//! candidate re-runs only the Schedule/Tile/Target queries of that kernel.

pub mod abi;
pub mod analysis;
pub mod autodiff;
pub mod bounds;
pub mod codegen;
pub mod config;
pub mod error;
pub mod errors;
pub mod graph_plan;
pub mod ir;
pub mod llvm;
pub mod lower;
pub mod pipeline;
pub mod ptx;
pub mod sched;
pub mod session;
pub mod target;
pub mod tile;
pub mod units;

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_frontend::check::{fn_decorators, fn_signature, infer_function, FunctionKind};
use tessera_frontend::db::{function_def, item_index};
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::text::{LineIndex, TextRange};
use tessera_frontend::{Db, FnKey, SourceFile};

pub use config::{default_config, Config, DEFAULT_SHAPE};
pub use error::LowerError;
pub use target::Target;

use ir::print::{LocResolver, Printed};
use ir::{Func, Loc, Origin};

/// Computes the target lints of every function of `file` on `threads` threads, each with
/// its own database handle, so that a following [`file_diagnostics`] finds them memoized.
/// Target lints dominate a file's check (every autotune candidate of every kernel is
/// lowered), and `file_diagnostics` alone keeps one core busy. A failure (a panic, or
/// salsa cancelling the work after a newer edit) ends that thread quietly: whoever asks
/// `file_diagnostics` next meets it again and reports it.
pub fn prefetch_lints(db: &tessera_frontend::Database, file: SourceFile, target: Target, threads: usize) {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    if threads < 2 {
        return;
    }
    let Ok(functions) = catch_unwind(AssertUnwindSafe(|| {
        item_index(db, file)
            .functions
            .iter()
            .map(|f| (f.key.name(db).to_string(), f.key.ordinal(db)))
            .collect::<Vec<_>>()
    })) else {
        return;
    };
    let threads = threads.min(functions.len());
    if threads < 2 {
        return;
    }
    std::thread::scope(|scope| {
        for t in 0..threads {
            let db = db.clone();
            let mine: Vec<&(String, u32)> = functions.iter().skip(t).step_by(threads).collect();
            scope.spawn(move || {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    for (name, ordinal) in mine {
                        let key = FnKey::new(&db, file, name.clone(), *ordinal);
                        analysis::kernel_lints(&db, key, target);
                    }
                }));
            });
        }
    });
}

/// Every diagnostic of a file for a target: the frontend's checks plus the target
/// lints. The CLI, the language server and the explorer all call this one function.
pub fn file_diagnostics(db: &dyn Db, file: SourceFile, target: Target) -> Vec<Diagnostic> {
    let mut out = tessera_frontend::check::file_diagnostics(db, file).clone();
    let text = file.text(db);
    let index = item_index(db, file);
    let before = out.len();
    for entry in &index.functions {
        let lints = analysis::kernel_lints(db, entry.key, target);
        for (lints, offset) in [(&lints.body, entry.anchor), (&lints.decorators, entry.range.start)] {
            for lint in lints {
                let mut d = lint.diagnostic.clone().shift(offset);
                if let Some((message, request)) = &lint.fix {
                    if let Some(edits) = resolve_fix(text, request, offset) {
                        d = d.with_fix(message.clone(), edits);
                    }
                }
                out.push(d);
            }
        }
    }
    if out.len() > before {
        tessera_frontend::check::sort_diagnostics(&mut out);
    }
    out
}

/// Turns a fix request (relative to `offset`) into edits of the source text, or None
/// when the text is not what the request expects.
fn resolve_fix(
    text: &str,
    request: &analysis::FixRequest,
    offset: u32,
) -> Option<Vec<tessera_frontend::diagnostics::Edit>> {
    use tessera_frontend::diagnostics::Edit;
    match request {
        analysis::FixRequest::BarrierBefore(range) => {
            let at = (range.start + offset) as usize;
            let line_start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
            let indent: String = text[line_start..].chars().take_while(|c| *c == ' ').collect();
            Some(vec![Edit { range: TextRange::empty(line_start as u32), text: format!("{indent}tile.barrier()\n") }])
        }
        analysis::FixRequest::AddKeyword { call, keyword, value } => {
            let range = call.shift(offset);
            let call_text = range.slice(text);
            if !call_text.ends_with(')') || call_text.contains(&format!("{keyword}=")) {
                return None;
            }
            let close = range.end - 1;
            Some(vec![Edit { range: TextRange::empty(close), text: format!(", {keyword}={value}") }])
        }
        analysis::FixRequest::Replace { within, from, to } => {
            let range = within.shift(offset);
            let found = range.slice(text).find(from.as_str())? as u32 + range.start;
            Some(vec![Edit { range: TextRange::new(found, found + from.len() as u32), text: to.clone() }])
        }
    }
}

/// Why a function has no IR.
fn precondition(db: &dyn Db, key: FnKey<'_>) -> Result<(), LowerError> {
    let Some(ast) = function_def(db, key) else {
        return Err(LowerError { message: "no such function".into(), range: TextRange::default() });
    };
    let signature = fn_signature(db, key);
    if let Some((function, e)) = errors::reachable_error(db, key) {
        let (message, range) = if function == ast.name.as_str() {
            (format!("`{}` has errors; the first: {} {}", ast.name, e.code, e.message), e.range)
        } else {
            (
                format!("`{}` calls `{function}`, which has errors; the first: {} {}", ast.name, e.code, e.message),
                ast.name_range,
            )
        };
        return Err(LowerError { message, range });
    }
    if signature.kind == FunctionKind::Helper {
        return Err(LowerError {
            message: format!("`{}` is a helper: it is inlined where it is called and has no IR of its own", ast.name),
            range: ast.name_range,
        });
    }
    Ok(())
}

/// Graph IR of a kernel or graph function.
#[salsa::tracked(returns(ref))]
pub fn graph_ir<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Result<Arc<Func>, LowerError> {
    precondition(db, key)?;
    // The decorator-free definition: an edited autotune candidate keeps Graph IR.
    let ast = function_def(db, key).clone().expect("checked by precondition");
    let signature = fn_signature(db, key);
    let inference = infer_function(db, key);
    let func = match signature.kind {
        FunctionKind::Kernel => lower::kernel::kernel_to_graph(&ast.name, &ast, signature, inference)?,
        FunctionKind::Graph => {
            let file = key.file(db);
            let resolve = |name: &str| -> Option<lower::graph::Callee> {
                let index = item_index(db, file);
                let entry = index.function(db, name)?;
                Some(lower::graph::Callee {
                    def: function_def(db, entry.key).clone()?,
                    sig: fn_signature(db, entry.key).clone(),
                    inf: infer_function(db, entry.key).clone(),
                    is_kernel: fn_signature(db, entry.key).kind == FunctionKind::Kernel,
                })
            };
            lower::graph::graph_function_to_ir(&ast.name, &ast, signature, inference, &resolve)?
        }
        FunctionKind::Helper => unreachable!("rejected by precondition"),
    };
    verified("graph lowering", func)
}

/// Schedule IR of a kernel for one configuration and target.
// Per-configuration IR is large: keep the most recently used.
#[salsa::tracked(returns(ref), lru = 128)]
pub fn sched_ir<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Arc<Func>, LowerError> {
    if let Some(e) = decorator_error(db, key) {
        return Err(e.clone());
    }
    let graph = graph_ir(db, key).clone()?;
    // The pipeline verifies after every pass.
    Ok(Arc::new(pipeline::schedule_kernel(&graph, &config, target)?))
}

/// The first error in a kernel's decorators (a malformed schedule or autotune space):
/// scheduling with a half-read schedule would silently use defaults. A query of its
/// own so that decorator edits that keep it `None` do not re-run scheduling.
#[salsa::tracked(returns(ref))]
pub fn decorator_error<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<LowerError> {
    let decorators = fn_decorators(db, key);
    let error = decorators.diagnostics.iter().find(|d| d.is_error())?;
    Some(LowerError {
        message: format!("the decorators have errors (`tessera check` shows them): {}", error.message),
        // Decorator ranges are not relative to the `def` anchor; point at `def`.
        range: TextRange::default(),
    })
}

/// Tile IR of a kernel for one configuration and target.
// Per-configuration IR is large: keep the most recently used.
#[salsa::tracked(returns(ref), lru = 128)]
pub fn tile_ir<'db>(db: &'db dyn Db, key: FnKey<'db>, config: Config, target: Target) -> Result<Arc<Func>, LowerError> {
    let sched = sched_ir(db, key, config.clone(), target).clone()?;
    Ok(Arc::new(pipeline::tile_kernel(&sched, &config, target)?))
}

/// Runs the verifier after a pass; a failure is an internal error naming the pass.
fn verified(pass: &str, func: Func) -> Result<Arc<Func>, LowerError> {
    match ir::verify::verify(&func) {
        Ok(()) => Ok(Arc::new(func)),
        Err(e) => Err(LowerError {
            message: format!("internal error: the IR after `{pass}` does not verify: {e}"),
            range: func.loc.range,
        }),
    }
}

/// The stages `tessera lower` prints.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Stage {
    Graph,
    Sched,
    Tile,
    Target,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Graph, Stage::Sched, Stage::Tile, Stage::Target];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Graph => "graph",
            Stage::Sched => "sched",
            Stage::Tile => "tile",
            Stage::Target => "target",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.name() == s)
    }
}

/// Printed IR with, per line, the absolute source range it came from.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LoweredText {
    pub text: String,
    pub source_map: Vec<(u32, TextRange)>,
}

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

/// Prints IR and maps each line back to the source.
pub fn print_ir(db: &dyn Db, file: SourceFile, func: &Func) -> LoweredText {
    let locs = FileLocs::new(db, file);
    let Printed { text, lines } = ir::print::print_func(func, &locs);
    let source_map = lines
        .iter()
        .enumerate()
        .filter_map(|(i, loc)| loc.as_ref().and_then(|l| locs.absolute(l)).map(|r| (i as u32, r)))
        .collect();
    LoweredText { text, source_map }
}

/// Target code with its per-line source map.
pub fn print_target(db: &dyn Db, file: SourceFile, code: &codegen::TargetCode) -> LoweredText {
    let locs = FileLocs::new(db, file);
    let source_map = code
        .line_locs
        .iter()
        .enumerate()
        .filter_map(|(i, loc)| loc.as_ref().and_then(|l| locs.absolute(l)).map(|r| (i as u32, r)))
        .collect();
    LoweredText { text: code.text.clone(), source_map }
}

/// The IR text of one stage of a function, for `tessera lower`, the LSP and the explorer.
pub fn lowering_text(
    db: &dyn Db,
    key: FnKey<'_>,
    stage: Stage,
    target: Target,
    config: &Config,
) -> Result<LoweredText, LowerError> {
    let file = key.file(db);
    if stage != Stage::Graph && fn_signature(db, key).kind == FunctionKind::Graph {
        return graph_lowering_text(db, key, stage, target, &config.shapes);
    }
    let func = match stage {
        Stage::Graph => graph_ir(db, key).clone()?,
        Stage::Sched => sched_ir(db, key, config.clone(), target).clone()?,
        Stage::Tile => tile_ir(db, key, config.clone(), target).clone()?,
        Stage::Target => {
            let code = codegen::target_code(db, key, config.clone(), target).clone()?;
            return Ok(print_target(db, file, &code));
        }
    };
    Ok(print_ir(db, file, &func))
}

/// A graph function's generated kernel module, checked: a diagnostic in it is an
/// internal error of the planner.
pub fn plan_module(db: &dyn Db, key: FnKey<'_>) -> Result<(Arc<graph_plan::GraphPlan>, SourceFile), LowerError> {
    let plan = graph_plan::graph_plan(db, key).clone()?;
    let path = graph_plan::module_path(key.file(db).path(db), key.name(db));
    let module = db.generated_file(&path, &plan.source);
    let diagnostics = file_diagnostics(db, module, Target::Cpu);
    if let Some(d) = diagnostics.iter().find(|d| d.is_error()) {
        let index = LineIndex::new(&plan.source);
        let at = index.line_col(&plan.source, d.range.start);
        return Err(LowerError {
            message: format!(
                "internal error: the generated kernels of `{}` do not check: {}:{}:{}: {} [{:?}]",
                key.name(db),
                path.display(),
                at.line + 1,
                at.col + 1,
                d.message,
                d.code
            ),
            range: TextRange::default(),
        });
    }
    Ok((plan, module))
}

/// The key of a generated kernel of a plan module.
pub fn module_function<'db>(db: &'db dyn Db, module: SourceFile, name: &str) -> Option<FnKey<'db>> {
    item_index(db, module).function(db, name).map(|f| f.key)
}

/// Schedule IR of a graph function is its launch plan; Tile and Target IR are those of
/// each generated kernel, in launch order.
fn graph_lowering_text(
    db: &dyn Db,
    key: FnKey<'_>,
    stage: Stage,
    target: Target,
    shapes: &BTreeMap<String, i64>,
) -> Result<LoweredText, LowerError> {
    let (plan, module) = plan_module(db, key)?;
    if stage == Stage::Sched {
        let mut out = print_ir(db, key.file(db), &plan.schedule);
        let path = module.path(db).display().to_string();
        out.text.push_str(&format!("// kernels (generated in {path}):\n"));
        for k in &plan.kernels {
            out.text.push_str(&format!("//   {}: {}\n", k.name, k.summary));
        }
        return Ok(out);
    }
    let mut out = LoweredText::default();
    for k in &plan.kernels {
        let kkey = module_function(db, module, &k.name).ok_or_else(|| LowerError {
            message: format!("internal error: no generated kernel `{}`", k.name),
            range: TextRange::default(),
        })?;
        let (config, _) = default_config(db, kkey, shapes)?;
        let text = match stage {
            Stage::Tile => print_ir(db, module, &*tile_ir(db, kkey, config, target).clone()?).text,
            _ => codegen::target_code(db, kkey, config, target).clone()?.text.clone(),
        };
        out.text.push_str(&format!("// ===== {}: {} =====\n", k.name, k.summary));
        out.text.push_str(&text);
        out.text.push('\n');
    }
    Ok(out)
}
