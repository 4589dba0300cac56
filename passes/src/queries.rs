//! The IR queries: Graph IR of a function, Schedule and Tile IR of a (function,
//! configuration, target), every pass's snapshot, and the default configuration. The
//! one route through the passes is `pipeline`; these memoize its stages.

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_frontend::check::{fn_decorators, fn_signature, infer_function, FunctionKind, ScheduleValue};
use tessera_frontend::db::{function_def, item_index};
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey, SourceFile};

use crate::config::{config_for, Config};
use crate::error::LowerError;
use crate::ir::{Func, Level};
use crate::pipeline::{run_passes, Pass, PassSnapshot, SCHEDULE_PASSES, TILE_PASSES};
use crate::target::Target;
use crate::{errors, ir, lower};

/// Why a function has no IR.
fn precondition(db: &dyn Db, key: FnKey<'_>) -> Result<(), LowerError> {
    let Some(ast) = function_def(db, key) else {
        return Err(LowerError { message: "no such function".into(), range: TextRange::default() });
    };
    let signature = fn_signature(db, key);
    // A derived kernel's name is not its definition's (`name = kernel.with_schedule(S)`).
    let name = key.name(db);
    if let Some((function, e)) = errors::reachable_error(db, key) {
        let (message, range) = if function == name.as_str() {
            (format!("`{name}` has errors; the first: {} {}", e.code, e.message), e.range)
        } else {
            (
                format!("`{name}` calls `{function}`, which has errors; the first: {} {}", e.code, e.message),
                ast.name_range,
            )
        };
        return Err(LowerError { message, range });
    }
    if signature.kind == FunctionKind::Helper {
        return Err(LowerError {
            message: format!("`{name}` is a helper: it is inlined where it is called and has no IR of its own"),
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
        FunctionKind::Kernel => match stdlib_derived_name(db, key) {
            // A derived standard-library kernel: every location is the assignment's name
            // (the body's ranges count from the stdlib file, not the user's).
            Some(at) => {
                let mut func = lower::kernel::kernel_to_graph(key.name(db), &ast, signature, inference)
                    .map_err(|e| LowerError { range: at, ..e })?;
                let loc = crate::ir::Loc::new(key.name(db), at);
                func.loc = loc.clone();
                for op in &mut func.ops {
                    op.loc = loc.clone();
                }
                func
            }
            None => lower::kernel::kernel_to_graph(key.name(db), &ast, signature, inference)?,
        },
        FunctionKind::Graph => {
            let file = key.file(db);
            let resolve = |name: &str| -> Option<lower::graph::Callee> {
                // A stdlib kernel's instance for a dtype (`lower::graph::stdlib_callee_name`).
                let (file, name) = match lower::graph::stdlib_callee(name) {
                    Some((kernel, dtype)) => (tessera_frontend::check::stdlib_instance(db, kernel, dtype)?, kernel),
                    None => (file, name),
                };
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

/// The name a derived standard-library kernel's assignment defines, relative to the
/// assignment (its index entry's anchor); `None` for any other function.
fn stdlib_derived_name(db: &dyn Db, key: FnKey<'_>) -> Option<TextRange> {
    let derived = tessera_frontend::db::stdlib_derived(db, key)?;
    let assignment = tessera_frontend::db::constant_ast(db, derived.assignment).clone()?;
    assignment.names.first().map(|(_, range)| *range)
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
    Ok(Arc::new(crate::pipeline::schedule_kernel(&graph, &config, target)?))
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
    Ok(Arc::new(crate::pipeline::tile_kernel(&sched, &config, target)?))
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

/// The key of a generated kernel of a plan module.
pub fn module_function<'db>(db: &'db dyn Db, module: SourceFile, name: &str) -> Option<FnKey<'db>> {
    item_index(db, module).function(db, name).map(|f| f.key)
}

/// The kernel a launch of `function`'s plan runs, by the launch's `source` (the
/// `sched.kernel` attribute): a generated kernel of `module` (none), a `@kernel` of the
/// function's own file that it calls (`"file"`), or a stdlib kernel it calls, instantiated
/// for a dtype (`"stdlib f16"`: `tessera_frontend::check::stdlib_instance`).
pub fn planned_kernel<'db>(
    db: &'db dyn Db,
    function: FnKey<'db>,
    module: SourceFile,
    name: &str,
    source: Option<&str>,
) -> Option<FnKey<'db>> {
    let file = match source {
        None => module,
        Some("file") => function.file(db),
        Some(s) => {
            let dtype = tessera_frontend::check::DType::from_name(s.strip_prefix("stdlib ")?)?;
            tessera_frontend::check::stdlib_instance(db, name, dtype)?
        }
    };
    module_function(db, file, name)
}

/// The configuration a kernel is shown and checked with when none is chosen: the
/// fixed schedule (or each autotune key's first candidate) and the shape symbols its
/// tiles use, from `dims` or [`DEFAULT_SHAPE`]. Also returns the symbols assumed.
pub fn default_config(
    db: &dyn Db,
    key: FnKey<'_>,
    dims: &BTreeMap<String, i64>,
) -> Result<(Config, Vec<String>), LowerError> {
    if let Some(e) = decorator_error(db, key) {
        return Err(e.clone());
    }
    let graph = graph_ir(db, key).clone()?;
    Ok(config_for(&graph, default_schedule(db, key), dims))
}

/// The schedule a kernel is shown and checked with when none is chosen: its fixed
/// schedule, or each autotune key's first candidate (the session's `configure` starts
/// from it too).
pub fn default_schedule(db: &dyn Db, key: FnKey<'_>) -> ScheduleValue {
    match &fn_decorators(db, key).schedule {
        Some(s) => s.first_configuration(),
        None => ScheduleValue::default_for_kernel(),
    }
}

/// Every pass from Graph IR to Tile IR for one configuration and target, with the IR
/// after each (`lower-to-graph` first). Target code is the `target_code` query.
// Per-configuration IR is large: keep the most recently used.
#[salsa::tracked(returns(ref), lru = 128)]
pub fn pipeline<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Arc<Vec<PassSnapshot>>, LowerError> {
    let graph = graph_ir(db, key).clone()?;
    let mut snapshots =
        vec![PassSnapshot { pass: "lower-to-graph", level: Level::Graph, func: graph.clone(), changed: true }];
    let mut record = |pass: &Pass, f: &Func| {
        let changed = snapshots.last().is_none_or(|prev| *prev.func != *f);
        snapshots.push(PassSnapshot { pass: pass.name, level: pass.level, func: Arc::new(f.clone()), changed });
    };
    let sched = run_passes(&graph, Level::Schedule, SCHEDULE_PASSES, &config, target, &mut record)?;
    run_passes(&sched, Level::Tile, TILE_PASSES, &config, target, &mut record)?;
    Ok(Arc::new(snapshots))
}
