//! The run tab's component: the devices, the batch running on the worker thread, and
//! every result kept per launch. It plans launches from the kernel on screen and turns
//! the worker's reports into results; the app applies what a result asks for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tessera_passes::{Config, Target};

use super::Outcome;
use crate::kernel::KernelView;
use crate::keymap::Action;
use crate::runner::{self, Backend, Batch, Correctness, Device, Report, RunJob, RunOutcome};
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

pub struct RunTab {
    pub backends: Vec<Backend>,
    /// The device runs go to (an index into `backends`).
    pub device: usize,
    pub batch: Option<Batch>,
    /// Which record each job of the running batch fills.
    batch_records: Vec<usize>,
    pub results: Vec<RunRecord>,
    pub scroll: Scroll,
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
        }
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
        if self.batch.is_some() {
            return Some(Message::info("a run is in progress (x cancels it)".into()));
        }
        self.results.clear();
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
        match &self.batch {
            Some(b) => {
                b.cancel();
                Message::info("cancelling after the configuration running now".into())
            }
            None => Message::info("nothing is running".into()),
        }
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
        if self.batch.is_some() {
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
            if info.space.is_empty() {
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
                            Correctness::Checked { passed: false, max_abs, .. } => {
                                format!("WRONG: differs from the reference (max abs err {max_abs:.2e})")
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
