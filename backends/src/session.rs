//! Launches, as the session layer's extension: the analysis session lives in the pass
//! core (`tessera_passes::session`) so the language server needs no backend, and this
//! trait adds what only the backends can answer — a launch plan and the pruned
//! autotune space — to the same [`Analysis`], with the same errors.

use std::collections::BTreeMap;

use tessera_passes::session::{catch, Analysis, Cancellable, ErrorKind, Function, SessionError};
use tessera_passes::{Config, Target};

use crate::autotune;
use crate::launch::{self, LaunchError, Plan, PlanRequest};

/// An autotune space after pruning.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TuneSpace {
    pub candidates: Vec<Config>,
    /// Each pruned configuration with the reason (`pruned (registers): ...`).
    pub pruned: Vec<(Config, String)>,
}

/// What the backends add to an analysis session.
pub trait Launches<'db> {
    /// Plans one launch with default arguments and the default seed (`tessera run`'s
    /// planning: Tile IR for the target and the reference, target code when `code`).
    fn plan(
        &self,
        f: Function<'db>,
        config: &Config,
        target: Target,
        dims: &BTreeMap<String, i64>,
        code: bool,
    ) -> Cancellable<Plan>;

    /// The autotune space at these dims, pruned as `tessera autotune` and W0702 prune it.
    fn tune_space(&self, f: Function<'db>, dims: &BTreeMap<String, i64>, target: Target) -> Cancellable<TuneSpace>;
}

fn launch_error(e: LaunchError) -> SessionError {
    SessionError::new(ErrorKind::Lowering, e.message)
}

impl<'db> Launches<'db> for Analysis<'db> {
    fn plan(
        &self,
        f: Function<'db>,
        config: &Config,
        target: Target,
        dims: &BTreeMap<String, i64>,
        code: bool,
    ) -> Cancellable<Plan> {
        let db = self.db();
        catch("planning the launch", || {
            let info = launch::kernel_info(db, f.key).map_err(launch_error)?;
            let request = PlanRequest {
                target,
                config: config.clone(),
                dims: dims.clone(),
                args: Vec::new(),
                seed: launch::DEFAULT_SEED,
                code,
                max_memory: None,
            };
            launch::plan(db, f.key, &info, &request).map_err(launch_error)
        })?
    }

    fn tune_space(&self, f: Function<'db>, dims: &BTreeMap<String, i64>, target: Target) -> Cancellable<TuneSpace> {
        let db = self.db();
        catch("pruning the autotune space", || {
            let info = launch::kernel_info(db, f.key).map_err(launch_error)?;
            let space = autotune::space(db, f.key, &info, dims, target).map_err(launch_error)?;
            let candidates = space.candidates.into_iter().map(|c| c.config).collect();
            let mut pruned = Vec::new();
            for p in space.pruned {
                let config = launch::config_for(db, f.key, p.schedule, dims).map_err(launch_error)?;
                pruned.push((config, format!("pruned ({}): {}", p.reason.category(), p.reason.detail())));
            }
            Ok(TuneSpace { candidates, pruned })
        })?
    }
}
