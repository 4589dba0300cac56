//! A sharded graph function on the simulated mesh, checked against the same f64
//! reference as the single-device run: `tessera run` of a function whose parameters
//! have `@shard` also runs it on the mesh its program declares, and reports the mesh,
//! its collectives (with the bytes they moved) and a verdict of their own.
//!
//! With a [`Fabric`], the mesh spans processes, one per device (`tessera run --fabric
//! tcp` under `torchrun`): each runs its own device, the collectives' messages cross the
//! fabric, and every process gathers the results and checks them.

use tessera_frontend::{Db, FnKey};
use tessera_passes::dist::function::{data_parallel_program, sharded_program};
use tessera_passes::dist::schedule::pipeline_schedules;
pub use tessera_passes::dist::schedule::PipelineSchedule;

use super::{arg_dims, dtype, graph_tolerance, values, GraphCheck, GraphInputs, GraphRun};
use crate::interp::compare::compare_with;
use crate::interp::graph::run_graph_on_mesh;
use crate::launch::Verdict;
use crate::mesh::Fabric;

/// One collective of the program, as Graph IR describes it.
pub use tessera_passes::dist::insert::CollectiveOp as CollectiveInfo;

/// What the mesh run found.
#[derive(Clone, Debug)]
pub struct MeshCheck {
    pub axes: Vec<(String, usize)>,
    pub collectives: Vec<CollectiveInfo>,
    /// Per collective: the kernels each device launches while it is in flight, in the
    /// program on the mesh (`graph_plan::plan_on_mesh`).
    pub overlaps: Vec<Vec<String>>,
    /// Across processes: what carried the messages, this process's rank and the number
    /// of processes; `None` on the simulated mesh.
    pub fabric: Option<(String, usize, usize)>,
    /// Bytes the busiest device sent, counted by the simulated network (across
    /// processes: by each process for its own rank, then the largest).
    pub bytes_sent: u64,
    pub steps: u32,
    /// Each tensor parameter's name and layout (`[dp, -]`).
    pub layouts: Vec<(String, String)>,
    /// The function's pipelines, as Graph IR schedules them.
    pub pipelines: Vec<PipelineSchedule>,
    /// One per returned value, against the f64 reference.
    pub checks: Vec<GraphCheck>,
    pub verdict: Verdict,
}

impl MeshCheck {
    pub fn devices(&self) -> usize {
        self.axes.iter().map(|(_, s)| s).product()
    }

    pub fn estimated_us(&self) -> f64 {
        self.collectives.iter().filter_map(|c| c.time_us).sum()
    }
}

/// Runs `key` on its mesh when a parameter is sharded (`Ok(None)` otherwise), or, with
/// `data_parallel = Some(n)` (`tessera run --mesh N`), an unsharded `key` data-parallel
/// over `n` devices (`dist::function::data_parallel_program`).
pub fn run_on_mesh(
    db: &dyn Db,
    key: FnKey<'_>,
    inputs: &GraphInputs,
    run: &GraphRun,
    data_parallel: Option<usize>,
    fabric: Option<&Fabric>,
) -> Result<Option<MeshCheck>, String> {
    let program = match data_parallel {
        Some(n) => Some(data_parallel_program(db, key, &inputs.symbols, n).map_err(|e| e.message)?),
        None => sharded_program(db, key, &inputs.symbols).map_err(|e| e.message)?,
    };
    let Some(program) = program else { return Ok(None) };
    if let Some(c) = program.propagation.conflicts.first() {
        return Err(format!("the shardings conflict: {}", c.message));
    }
    let func = &program.inserted.func;
    let (shardings, mesh, args, dims, seed) =
        (&program.inserted.shardings, &program.mesh, &inputs.args, &inputs.symbols, inputs.seed as i64);
    let (mesh_run, bytes_sent, steps) = match fabric {
        None => {
            let run = run_graph_on_mesh(func, shardings, mesh, args, dims, seed, true, None)
                .map_err(|e| format!("on the simulated mesh: {e}"))?;
            let (bytes, steps) = (run.network.busiest(), run.network.steps);
            (run, bytes, steps)
        }
        Some(f) => {
            let on = |e: String| format!("rank {} of {} over {}: {e}", f.rank(), f.world(), f.name());
            let run = run_graph_on_mesh(func, shardings, mesh, args, dims, seed, true, Some(f))
                .map_err(|e| on(e.to_string()))?;
            // Each process counted its own rank: the busiest device and the most steps.
            let counts = f.all_gather(vec![run.network.busiest() as f64, f64::from(run.network.steps)]).map_err(on)?;
            let most = |i: usize| counts.iter().map(|c| c.get(i).copied().unwrap_or(0.0)).fold(0.0, f64::max);
            (run, most(0) as u64, most(1) as u32)
        }
    };
    let names: Vec<String> = run.checks.iter().map(|c| c.name.clone()).collect();
    let checks: Vec<GraphCheck> = run
        .reference
        .iter()
        .zip(&mesh_run.results)
        .enumerate()
        .map(|(i, (want, got))| {
            let d = dtype(want);
            GraphCheck {
                name: names.get(i).cloned().unwrap_or_else(|| format!("return{i}")),
                dtype: d,
                dims: arg_dims(want),
                comparison: compare_with(&values(want), &values(got), &graph_tolerance(d, 1)),
                rounding_sensitivity: None,
            }
        })
        .collect();
    let same = run.reference.len() == mesh_run.results.len();
    let verdict = if same && checks.iter().all(|c| c.verdict() == Verdict::Correct) {
        Verdict::Correct
    } else if !same || checks.iter().any(|c| c.verdict() == Verdict::Wrong) {
        Verdict::Wrong
    } else {
        Verdict::NonFinite
    };
    let collectives = program.inserted.collectives();
    let overlaps = tessera_passes::graph_plan::mesh_overlaps(func);
    let pipelines = pipeline_schedules(func);
    let layouts = func
        .params
        .iter()
        .filter_map(|&p| {
            let s = program.propagation.sharding(p)?;
            Some((func.values[p.0 as usize].name.as_deref().unwrap_or("?").to_string(), s.describe()))
        })
        .collect();
    Ok(Some(MeshCheck {
        axes: program.mesh.0.iter().map(|(a, s)| (a.to_string(), *s)).collect(),
        collectives,
        overlaps,
        fabric: fabric.map(|f| (f.name().to_string(), f.rank(), f.world())),
        bytes_sent,
        steps,
        layouts,
        pipelines,
        checks,
        verdict,
    }))
}
