//! The pass pipeline: every pass by name, run in order with the verifier after each,
//! and the IR after every pass for `--print-after-all` and the explorer's pipeline view.

use std::sync::Arc;

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Func, Level, OpKind};
use crate::target::Target;
use crate::{sched, tile};
use tessera_frontend::check::MmaFamily;
use tessera_frontend::text::TextRange;

type PassFn = fn(&mut Func, &Config, Target) -> Result<(), LowerError>;

/// One pass of the pipeline.
pub struct Pass {
    pub name: &'static str,
    /// The level of the IR the pass produces.
    pub level: Level,
    /// Passes that only make sense for GPU targets (layouts, staging, async copies).
    pub gpu_only: bool,
    run: PassFn,
}

impl Pass {
    pub fn applies_to(&self, target: Target) -> bool {
        !self.gpu_only || target.is_gpu()
    }
}

const fn pass(name: &'static str, level: Level, gpu_only: bool, run: PassFn) -> Pass {
    Pass { name, level, gpu_only, run }
}

pub const SCHEDULE_PASSES: &[Pass] = &[
    pass("specialize", Level::Schedule, false, |f, c, t| {
        // The producer warpgroup's rule (E0707) reads the kernel as written.
        if let Some((why, at)) = crate::warp_spec::producer_problem(f, c, t) {
            return Err(LowerError {
                message: format!("{} cannot be used: {why}", crate::warp_spec::asked(c)),
                range: at.unwrap_or(f.loc.range),
            });
        }
        if let Some((why, at)) = crate::cluster::cluster_problem(f, c, t) {
            return Err(LowerError {
                message: format!("{} cannot be used: {why}", crate::cluster::asked(c)),
                range: at.unwrap_or(f.loc.range),
            });
        }
        sched::specialize(f, c, t)
    }),
    pass("fold-dot-accumulate", Level::Schedule, false, |f, _, _| {
        sched::fold_dot_accumulate(f);
        Ok(())
    }),
    pass("annotate-grid", Level::Schedule, false, |f, _, _| {
        sched::annotate_grid(f);
        Ok(())
    }),
    pass("select-dot-instructions", Level::Schedule, true, sched::annotate_dots),
    pass("mark-staging", Level::Schedule, true, |f, c, _| {
        sched::annotate_staging(f, c);
        Ok(())
    }),
    pass("mark-epilogues", Level::Schedule, false, |f, _, _| {
        sched::annotate_epilogues(f);
        Ok(())
    }),
];

pub const TILE_PASSES: &[Pass] = &[
    // One tile program per grid point: `grid.parallel` becomes program ids and the
    // kernel returns nothing (both are Tile IR rules, so they go together).
    pass("lower-grid", Level::Tile, false, |f, _, _| {
        tile::drop_return_values(f);
        tile::lower_grid(f)
    }),
    pass("stage-and-pipeline-copies", Level::Tile, true, |f, c, _| tile::stage_copies(f, c)),
    pass("commit-explicit-copies", Level::Tile, true, |f, _, _| {
        tile::commit_explicit_copies(f);
        Ok(())
    }),
    pass("fold-transposed-loads", Level::Tile, true, |f, _, _| {
        tile::fold_transposed_loads(f);
        Ok(())
    }),
    pass("keep-wgmma-operands-in-shared", Level::Tile, true, |f, _, _| tile::keep_wgmma_operands_in_shared(f)),
    pass("select-copy-engine", Level::Tile, true, crate::tma::select_copy_engine),
    pass("assign-layouts", Level::Tile, true, |f, c, _| {
        tile::assign_layouts(f, c);
        Ok(())
    }),
    pass("insert-layout-conversions", Level::Tile, true, |f, _, _| {
        tile::insert_conversions(f);
        Ok(())
    }),
    pass("remove-dead-ops", Level::Tile, false, |f, _, _| {
        tile::remove_dead_ops(f);
        Ok(())
    }),
    pass("specialize-warps", Level::Tile, true, crate::warp_spec::specialize_warps),
    pass("form-clusters", Level::Tile, true, crate::cluster::form_clusters),
];

/// Runs `passes` on a copy of `input` moved to `level`, verifying after each pass (a
/// verifier failure is an internal error naming the pass). `after` sees the IR after
/// every pass that applies to the target.
pub fn run_passes(
    input: &Func,
    level: Level,
    passes: &[Pass],
    config: &Config,
    target: Target,
    after: &mut dyn FnMut(&Pass, &Func),
) -> Result<Func, LowerError> {
    let mut f = input.clone();
    f.level = level;
    for pass in passes.iter().filter(|p| p.applies_to(target)) {
        (pass.run)(&mut f, config, target)?;
        verified(&f, pass.name)?;
        after(pass, &f);
    }
    Ok(f)
}

/// Schedule IR of a kernel: its Graph IR specialized to the configuration and annotated.
pub fn schedule_kernel(graph: &Func, config: &Config, target: Target) -> Result<Func, LowerError> {
    run_passes(graph, Level::Schedule, SCHEDULE_PASSES, config, target, &mut |_, _| {})
}

/// Tile IR of a kernel from its Schedule IR.
pub fn tile_kernel(sched: &Func, config: &Config, target: Target) -> Result<Func, LowerError> {
    run_passes(sched, Level::Tile, TILE_PASSES, config, target, &mut |_, _| {})
}

/// Like [`run_passes`] over the Schedule and then the Tile passes, for analyses that
/// only read the resulting Tile IR (lints, autotune pruning: every candidate of every
/// kernel of a file). Release builds verify once, after the last pass, instead of after
/// each: the IR is the same, a verifier failure is still an internal error, it only
/// names the whole pipeline instead of the pass. Debug builds (the tests) verify after
/// every pass as [`run_passes`] does.
pub fn graph_to_tile(graph: &Func, config: &Config, target: Target) -> Result<Func, LowerError> {
    let f = graph_to_tile_for_budget(graph, config, target)?;
    verified(&f, "lowering to Tile IR")?;
    Ok(f)
}

/// [`graph_to_tile`] without the release build's final verification, for a lowering
/// that only yields figures and is then dropped: autotune pruning's budget of each
/// candidate (`analysis::kernel_budget`), which `tessera check` asks for many candidates
/// of every kernel. Whatever is shown or compiled goes through [`graph_to_tile`]; debug
/// builds (the tests) still verify after every pass.
pub fn graph_to_tile_for_budget(graph: &Func, config: &Config, target: Target) -> Result<Func, LowerError> {
    if cfg!(debug_assertions) {
        let sched = run_passes(graph, Level::Schedule, SCHEDULE_PASSES, config, target, &mut |_, _| {})?;
        return run_passes(&sched, Level::Tile, TILE_PASSES, config, target, &mut |_, _| {});
    }
    let mut f = graph.clone();
    // Tile lowering about triples the ops and values: growing them once, not by doubling
    // through every pass, saves copying the op list several times per kernel.
    f.ops.reserve(2 * f.ops.len());
    f.values.reserve(2 * f.values.len());
    for (level, passes) in [(Level::Schedule, SCHEDULE_PASSES), (Level::Tile, TILE_PASSES)] {
        f.level = level;
        for pass in passes.iter().filter(|p| p.applies_to(target)) {
            (pass.run)(&mut f, config, target)?;
        }
    }
    Ok(f)
}

/// Why `graph` cannot use `mma = "wgmma"` under `config` on `target` (`crate::wgmma`), and
/// the range of the dot it concerns; `None` when it can, or when the schedule does not
/// ask for it. Runs the Schedule passes before `select-dot-instructions` on a copy of the
/// Graph IR: the lints (E0704) and pruning ask this without lowering. A failure of those
/// passes is `None` here: lowering reports it.
pub fn wgmma_problem(graph: &Func, config: &Config, target: Target) -> Option<(String, TextRange)> {
    if config.mma() != MmaFamily::Wgmma || !target.is_gpu() || !graph.has_op_of(&[OpKind::Dot]) {
        return None;
    }
    let mut f = graph.clone();
    f.level = Level::Schedule;
    for pass in SCHEDULE_PASSES.iter().take_while(|p| p.name != "select-dot-instructions") {
        if pass.applies_to(target) {
            (pass.run)(&mut f, config, target).ok()?;
        }
    }
    crate::wgmma::wgmma_problem(&f, config, target)
}

fn verified(f: &Func, after: &str) -> Result<(), LowerError> {
    crate::ir::verify::verify(f).map_err(|e| {
        if std::env::var_os("TESSERA_DUMP_BAD_IR").is_some() {
            eprintln!("{}", crate::ir::print::print_func(f, &crate::ir::print::NoLocs).text);
        }
        LowerError {
            message: format!("internal error: the IR after the `{after}` pass does not verify: {e}"),
            range: f.loc.range,
        }
    })
}

/// The IR after one pass.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PassSnapshot {
    pub pass: &'static str,
    pub level: Level,
    pub func: Arc<Func>,
    /// Whether the pass changed the IR.
    pub changed: bool,
}
