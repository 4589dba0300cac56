//! The run tab's component: the devices, the batch running on the worker thread, and
//! every result kept per launch. It plans launches from the kernel on screen and turns
//! the worker's reports into results; the app applies what a result asks for. A graph
//! function (`@jit`) runs as one [`GraphTask`] instead, and keeps its last result per
//! function ([`GraphRecord`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tessera_backends::launch::{MismatchSource, Verdict};
use tessera_passes::{Config, Target};

use super::Outcome;
use crate::kernel::KernelView;
use crate::keymap::Action;
use crate::runner::{
    self, Backend, Batch, Correctness, Device, GraphJob, GraphOutcome, GraphTask, Report, RunJob, RunOutcome,
};
use crate::state::{fmt_ms, Geometry, Level, Message, Pane, Scroll};
use crate::workspace::{Overrides, TuneSpace, Workspace};

/// One result of the run panel.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub kernel: String,
    pub device: Device,
    pub target: Target,
    pub config: Config,
    pub dims: BTreeMap<String, i64>,
    pub revision: u64,
    pub autotune: bool,
    /// None while it waits or runs.
    pub outcome: Option<Result<RunOutcome, String>>,
    pub wall: Duration,
}

impl RunRecord {
    /// The overrides that give this run's configuration and dims: only what differs
    /// from the kernel's own configuration `base`.
    pub fn overrides(&self, base: Option<&Config>) -> Overrides {
        let schedule = self
            .config
            .schedule
            .values
            .iter()
            .filter(|(k, v)| base.and_then(|b| b.schedule.get(k)) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let dims = self
            .dims
            .iter()
            .filter(|(k, v)| base.and_then(|b| b.shapes.get(*k)) != Some(*v))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        Overrides { schedule, dims }
    }

    fn same_launch(&self, other: &RunRecord) -> bool {
        self.kernel == other.kernel
            && self.device == other.device
            && self.target == other.target
            && self.config == other.config
            && self.dims == other.dims
    }
}

/// The last run of a graph function.
#[derive(Clone, Debug)]
pub struct GraphRecord {
    pub function: String,
    /// The dims the run was asked for (the seeded inputs list every symbol's value).
    pub dims: BTreeMap<String, i64>,
    pub revision: u64,
    /// None while it runs.
    pub outcome: Option<Result<GraphOutcome, String>>,
    pub wall: Duration,
}

pub struct RunTab {
    pub backends: Vec<Backend>,
    /// The device runs go to (an index into `backends`).
    pub device: usize,
    pub batch: Option<Batch>,
    /// Which record each job of the running batch fills.
    batch_records: Vec<usize>,
    pub results: Vec<RunRecord>,
    pub scroll: Scroll,
    /// The graph function running now.
    pub graph: Option<GraphTask>,
    /// The last run of each graph function.
    pub graph_results: Vec<GraphRecord>,
}

impl Default for RunTab {
    fn default() -> RunTab {
        RunTab::new()
    }
}

impl RunTab {
    pub fn new() -> RunTab {
        RunTab {
            backends: runner::backends(),
            device: 0,
            batch: None,
            batch_records: Vec::new(),
            results: Vec::new(),
            scroll: Scroll::default(),
            graph: None,
            graph_results: Vec::new(),
        }
    }

    /// Whether a kernel batch or a graph function is running.
    pub fn busy(&self) -> bool {
        self.batch.is_some() || self.graph.is_some()
    }

    /// The last run of graph function `function`.
    pub fn graph_record(&self, function: &str) -> Option<&GraphRecord> {
        self.graph_results.iter().find(|r| r.function == function)
    }

    pub fn backend(&self) -> &Backend {
        &self.backends[self.device.min(self.backends.len() - 1)]
    }

    /// The next device; the message says which, and whether it can run.
    pub fn cycle_device(&mut self) -> Message {
        self.device = (self.device + 1) % self.backends.len();
        let b = self.backend();
        Message::info(match &b.runner {
            Ok(_) => format!("device: {}", b.label),
            Err(why) => format!("device: {} — not available: {why}", b.label),
        })
    }

    /// Forgets every result (not while a batch runs).
    pub fn clear(&mut self) -> Option<Message> {
        if self.busy() {
            return Some(Message::info("a run is in progress (x cancels it)".into()));
        }
        self.results.clear();
        self.graph_results.clear();
        self.scroll = Scroll::default();
        None
    }

    /// An action with the focus on the results.
    pub fn update(&mut self, action: Action, geometry: &Geometry) -> Outcome {
        if self.scroll.nav(action, self.results.len(), geometry.height(Pane::Results)) {
            return Outcome::Nothing;
        }
        match action {
            Action::CycleDevice => Outcome::Say(self.cycle_device()),
            Action::Enter if self.scroll.cursor < self.results.len() => Outcome::UseRun(self.scroll.cursor),
            Action::ClearResults => self.clear().map_or(Outcome::Nothing, Outcome::Say),
            _ => Outcome::Nothing,
        }
    }

    pub fn cancel(&mut self) -> Message {
        if let Some(task) = self.graph.take() {
            // A plan cannot be stopped between two of its kernels from here: the worker
            // finishes on its own and its result, sent to nobody, is dropped.
            if let Some(r) = self.graph_results.iter_mut().find(|r| r.function == task.job.function) {
                r.outcome = Some(Err("cancelled".into()));
                r.wall = task.started.elapsed();
            }
            return Message::info(format!("cancelled the run of `{}`", task.job.function));
        }
        match &self.batch {
            Some(b) => {
                b.cancel();
                Message::info("cancelling after the configuration running now".into())
            }
            None => Message::info("nothing is running".into()),
        }
    }

    /// Runs graph function `function` of the workspace's text on a worker thread, through
    /// `GraphSession` as `tessera run` does; the message says what started, or why not.
    pub fn start_graph(&mut self, ws: &Workspace, function: &str, dims: BTreeMap<String, i64>) -> Message {
        if self.busy() {
            return Message::info("a run is in progress (x cancels it)".into());
        }
        let job = GraphJob::new(function, ws.path().to_path_buf(), ws.text().to_string(), dims.clone(), ws.revision());
        let record = GraphRecord {
            function: function.to_string(),
            dims,
            revision: job.revision,
            outcome: None,
            wall: Duration::ZERO,
        };
        match self.graph_results.iter_mut().find(|r| r.function == function) {
            Some(r) => *r = record,
            None => self.graph_results.push(record),
        }
        self.graph = Some(GraphTask::start(job));
        let device = match runner::graph_device() {
            Some(Device::Cpu) => "the CPU backend (LLVM JIT)",
            _ => "the reference interpreter",
        };
        Message::info(format!("running graph function `{function}`: its launch plan on {device}"))
    }

    /// Takes the graph function's result when its worker is done; the message sums it up.
    fn drain_graph(&mut self) -> Option<Message> {
        let (outcome, wall) = self.graph.as_mut()?.poll()?;
        let task = self.graph.take()?;
        let name = task.job.function;
        let message = match &outcome {
            Ok(o) => {
                let run = &o.run;
                let head = format!("`{name}` ran in {} (median)", fmt_ms(run.median_ms()).trim_start());
                let errors = format!("max abs err {:.2e}, max rel err {:.2e}", run.max_abs_err(), run.max_rel_err());
                let numerics = if run.numerics.is_empty() { "" } else { "; @verify.numerics VIOLATED" };
                match run.verdict {
                    Verdict::Correct if run.numerics.is_empty() => {
                        Message::info(format!("{head} · correct against the f64 reference ({errors})"))
                    }
                    Verdict::Correct => Message::error(format!("{head} · correct ({errors}){numerics}")),
                    Verdict::Wrong => {
                        Message::error(format!("{head} · WRONG: differs from the f64 reference ({errors}){numerics}"))
                    }
                    _ => Message::error(format!("{head} · NON-FINITE: the reference itself has NaN or Inf{numerics}")),
                }
            }
            Err(e) => Message::error(format!("`{name}` failed: {e}")),
        };
        if let Some(r) = self.graph_results.iter_mut().find(|r| r.function == name) {
            r.outcome = Some(outcome);
            r.wall = wall;
        }
        Some(message)
    }

    /// Plans the kernel's launches (one, or its autotune space) and starts them on the
    /// worker thread; the message says what started, or why nothing did.
    pub fn start(
        &mut self,
        ws: &Workspace,
        view: &KernelView,
        kernel: Option<&str>,
        target: Target,
        dims: BTreeMap<String, i64>,
        autotune: bool,
    ) -> Option<Message> {
        if self.busy() {
            return Some(Message::info("a run is in progress (x cancels it)".into()));
        }
        let backend = self.backend().clone();
        let runner = match &backend.runner {
            Ok(r) => r.clone(),
            Err(why) => {
                return Some(Message::error(format!("{} is not available: {why}", backend.label)));
            }
        };
        let name = kernel.map(str::to_string)?;
        let info = match &view.config {
            Ok(info) => info.clone(),
            Err(e) => {
                return Some(Message::error(format!("cannot run `{name}`: {}", e.message)));
            }
        };
        let target = runner.target_for(target);
        // Configurations to measure, and those the tuner prunes (shown with the reason).
        let TuneSpace { candidates: configs, pruned } = if autotune {
            if info.space.is_empty() && !info.auto {
                return Some(Message::warn(format!(
                    "`{name}` has no autotune space (@kernel.autotune(space=...)); r runs it once"
                )));
            }
            match ws.tune_space(&name, &dims, target) {
                Ok(space) => space,
                Err(e) => {
                    return Some(Message::error(format!("cannot autotune `{name}`: {e}")));
                }
            }
        } else {
            TuneSpace { candidates: vec![info.config.clone()], pruned: Vec::new() }
        };
        let mut jobs = Vec::new();
        let mut records = Vec::new();
        for config in configs {
            let record = RunRecord {
                kernel: name.clone(),
                device: backend.device,
                target,
                config: config.clone(),
                dims: dims.clone(),
                revision: ws.revision(),
                autotune,
                outcome: None,
                wall: Duration::ZERO,
            };
            match ws.plan(&name, &config, target, &dims, runner.needs_code()) {
                Ok(plan) => {
                    jobs.push(RunJob {
                        kernel: name.clone(),
                        config,
                        target,
                        dims: dims.clone(),
                        plan: Arc::new(plan),
                        revision: record.revision,
                    });
                    records.push(self.upsert(record));
                }
                Err(e) => {
                    // A configuration that cannot be planned (it does not lower, say) is
                    // a result too: the table says why.
                    let i = self.upsert(record);
                    self.results[i].outcome = Some(Err(e));
                }
            }
        }
        for (config, why) in pruned {
            let record = RunRecord {
                kernel: name.clone(),
                device: backend.device,
                target,
                config,
                dims: dims.clone(),
                revision: ws.revision(),
                autotune,
                outcome: Some(Err(why)),
                wall: Duration::ZERO,
            };
            self.upsert(record);
        }
        if jobs.is_empty() {
            return Some(Message::error("no configuration could be planned; the results table says why".into()));
        }
        let n = jobs.len();
        self.batch_records = records;
        self.batch = Some(Batch::start(runner, jobs, autotune));
        Some(Message::info(if autotune {
            format!("autotuning `{name}`: {n} configurations on the {}", backend.label)
        } else {
            format!("running `{name}` on the {}", backend.label)
        }))
    }

    /// Adds a record, replacing the earlier result of the same launch.
    fn upsert(&mut self, record: RunRecord) -> usize {
        match self.results.iter().position(|r| r.same_launch(&record)) {
            Some(i) => {
                self.results[i] = record;
                i
            }
            None => {
                self.results.push(record);
                self.results.len() - 1
            }
        }
    }

    /// Takes the worker's reports into the results; when the batch is over, the message
    /// sums it up.
    pub fn drain(&mut self) -> Option<Message> {
        if self.graph.is_some() {
            return self.drain_graph();
        }
        let batch = self.batch.as_mut()?;
        let (reports, finished) = batch.drain();
        let cancelled = batch.cancelled();
        let total = batch.jobs.len();
        let done = batch.done;
        let autotune = batch.autotune;
        for r in reports {
            if let Report::Finished { index, outcome, wall } = r {
                if let Some(&rec) = self.batch_records.get(index) {
                    if let Some(record) = self.results.get_mut(rec) {
                        record.outcome = Some(outcome);
                        record.wall = wall;
                    }
                }
            }
        }
        if finished {
            self.batch = None;
            let recs: Vec<&RunRecord> = self.batch_records.iter().filter_map(|&i| self.results.get(i)).collect();
            let ok: Vec<&RunRecord> = recs.iter().copied().filter(|r| matches!(r.outcome, Some(Ok(_)))).collect();
            let failed = recs.iter().filter(|r| matches!(r.outcome, Some(Err(_)))).count();
            let text = if autotune {
                // Only a correct configuration can win.
                let best = ok
                    .iter()
                    .filter(|r| !matches!(&r.outcome, Some(Ok(o)) if matches!(o.correctness, Correctness::Checked { passed: false, .. })))
                    .min_by(|a, b| median(a).total_cmp(&median(b)));
                let head = if cancelled {
                    format!("autotune cancelled after {done} of {total} configurations")
                } else {
                    format!("autotune done: {total} configurations")
                };
                let failed = if failed > 0 { format!(" · {failed} failed") } else { String::new() };
                match best {
                    Some(b) => format!("{head}; best {} at {}{failed}", b.config, fmt_ms(median(b)).trim_start()),
                    None => format!("{head}; none ran correctly{failed}"),
                }
            } else {
                match recs.first().and_then(|r| r.outcome.as_ref()) {
                    Some(Ok(o)) => format!(
                        "ran in {} · {}",
                        fmt_ms(o.median_ms),
                        match &o.correctness {
                            Correctness::Unchecked(why) => format!("not checked: {why}"),
                            Correctness::Checked { passed: true, max_abs, .. } => {
                                format!("matches the reference (max abs err {max_abs:.2e})")
                            }
                            Correctness::Checked { passed: false, nonfinite: true, .. } => {
                                "NON-FINITE: the reference itself has NaN or Inf".to_string()
                            }
                            Correctness::Checked { passed: false, max_abs, cause, .. } => {
                                let cause = match cause {
                                    Some(MismatchSource::TileIr) => {
                                        "; the device computes its Tile IR: the kernel's arithmetic in its dtypes \
                                         or a Tile IR pass"
                                    }
                                    Some(MismatchSource::NonFiniteTileIr) => {
                                        "; its Tile IR is itself non-finite there, and the device matches it \
                                         where it is finite: the kernel's arithmetic in its dtypes overflows or \
                                         cancels"
                                    }
                                    Some(MismatchSource::UnstableArithmetic) => {
                                        "; its Tile IR is wrong too, and the device differs from it: the \
                                         kernel's arithmetic loses precision at these inputs"
                                    }
                                    Some(MismatchSource::CodeGeneration) => {
                                        "; it differs from its Tile IR too: code generation"
                                    }
                                    None => "",
                                };
                                format!("WRONG: differs from the f64 reference (max abs err {max_abs:.2e}){cause}")
                            }
                        }
                    ),
                    Some(Err(e)) => format!("run failed: {e}"),
                    None => "run cancelled".to_string(),
                }
            };
            let level = if failed > 0 || ok.is_empty() { Level::Error } else { Level::Info };
            return Some(Message { level, text });
        }
        None
    }
}

fn median(r: &RunRecord) -> f64 {
    match &r.outcome {
        Some(Ok(o)) => o.median_ms,
        _ => f64::INFINITY,
    }
}
