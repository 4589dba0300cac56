//! Launching kernels off the UI thread. A [`Runner`] runs one planned launch on one
//! device; a [`Batch`] runs a list of them (one run, or every configuration of an
//! autotune space) on a worker thread and reports through a channel that the event loop
//! drains. The UI thread plans each launch through salsa before the batch starts
//! (`tessera_backends::launch::plan`: lowering, dims, seeded inputs), so the worker never
//! holds the database and a reload never waits for it.
//!
//! Runners are adapters over the launch layer `tessera run` uses, so the explorer's
//! numbers are the CLI's: the same seeded inputs, the same check against the reference
//! interpreter, the same timing.
//!
//! A graph function (`@jit`) runs as a [`GraphTask`] through
//! `tessera_backends::launch::graph::GraphSession`, the layer `tessera run` drives for
//! graph functions: open (Graph IR and launch plan), seed, run (the plan, timed, checked
//! against the f64 reference).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_backends::launch::graph::{GraphInputs, GraphRun, GraphRunOptions, GraphSession};
use tessera_backends::launch::{
    self, CheckKind, CheckMode, DeviceRequest, MismatchSource, Plan, Reference, RunOptions,
};
use tessera_passes::session::{catch, AnalysisHost};
use tessera_passes::{Config, Target};

pub use tessera_backends::launch::Device;

/// One launch to make: the plan (lowered IR, bound dims, seeded inputs) of one
/// configuration.
#[derive(Clone)]
pub struct RunJob {
    pub kernel: String,
    pub config: Config,
    pub target: Target,
    /// Values of every dim symbol of the signature.
    pub dims: BTreeMap<String, i64>,
    pub plan: Arc<Plan>,
    /// The source revision the job was planned from.
    pub revision: u64,
}

/// How a run's outputs compare with the reference interpreter's.
#[derive(Clone, PartialEq, Debug)]
pub enum Correctness {
    Checked {
        passed: bool,
        max_abs: f64,
        max_rel: f64,
        sampled: bool,
        /// The reference itself is NaN/Inf somewhere: the run is "non-finite", not wrong.
        nonfinite: bool,
        /// A wrong run: whether the device computes what its Tile IR computes on the
        /// interpreter (`launch::diagnose_mismatch`).
        cause: Option<MismatchSource>,
    },
    /// Not checked, and why (the interpreter on the CPU target is the reference itself).
    Unchecked(String),
}

#[derive(Clone, PartialEq, Debug)]
pub struct RunOutcome {
    pub correctness: Correctness,
    pub median_ms: f64,
    pub min_ms: f64,
    pub runs: u32,
    /// TFLOP/s or GB/s at the median, for devices whose timings mean something.
    pub throughput: Option<String>,
    /// The device, as the backend describes it.
    pub device_name: String,
}

/// A device that runs planned kernels.
pub trait Runner: Send + Sync {
    fn device(&self) -> Device;
    fn description(&self) -> String;
    /// The target to plan for when the user has `wanted` selected.
    fn target_for(&self, wanted: Target) -> Target;
    /// Whether plans must carry target code (PTX, LLVM IR).
    fn needs_code(&self) -> bool;
    /// Runs one job. `reference` carries the reference interpreter's outputs from one
    /// job of a batch to the next: every configuration computes the same function of
    /// the same seeded inputs, so one reference run checks them all (as the tuner does).
    fn run(&self, job: &RunJob, reference: &mut Option<Reference>) -> Result<RunOutcome, String>;
}

/// A device of the launch layer (the interpreter, the CPU backend, a GPU).
pub struct LaunchRunner(pub Arc<dyn launch::Backend>);

impl Runner for LaunchRunner {
    fn device(&self) -> Device {
        self.0.device()
    }

    fn description(&self) -> String {
        self.0.description()
    }

    fn target_for(&self, wanted: Target) -> Target {
        match self.0.check_target(wanted) {
            Ok(()) => wanted,
            Err(_) => self.0.default_target(),
        }
    }

    fn needs_code(&self) -> bool {
        self.0.needs_code()
    }

    fn run(&self, job: &RunJob, reference: &mut Option<Reference>) -> Result<RunOutcome, String> {
        let device = self.0.device();
        let options = RunOptions::for_device(device);
        let mut loaded = self.0.load(&job.plan).map_err(|e| e.message)?;
        if reference.is_none() {
            *reference = Some(Reference::compute(&job.plan, CheckMode::Auto).map_err(|e| e.message)?);
        }
        let out = launch::execute_loaded(&job.plan, &*self.0, loaded.as_mut(), &options, reference.as_ref())
            .map_err(|e| e.message)?;
        let correctness = match &out.check.kind {
            CheckKind::Skipped(why) => Correctness::Unchecked(why.clone()),
            kind => Correctness::Checked {
                passed: out.check.passed().unwrap_or(false),
                max_abs: out.check.max_abs().unwrap_or(0.0),
                max_rel: out.check.max_rel().unwrap_or(0.0),
                sampled: matches!(kind, CheckKind::Sampled { .. }),
                nonfinite: out.check.verdict() == launch::Verdict::NonFinite,
                cause: out.check.mismatch_source(),
            },
        };
        let median = out.timing.median_ms;
        // The interpreter's speed says nothing about the kernel's.
        let throughput = (device != Device::Interpreter)
            .then(|| match (out.work.tflops(median), out.work.gbps(median)) {
                (Some(t), _) => Some(format!("{t:.2} T{}/s", out.work.op_unit())),
                (None, Some(g)) => Some(format!("{g:.1} GB/s")),
                _ => None,
            })
            .flatten();
        Ok(RunOutcome {
            correctness,
            median_ms: median,
            min_ms: out.timing.min_ms,
            runs: out.timing.times_ms.len() as u32,
            throughput,
            device_name: out.device_name,
        })
    }
}

/// A device the run panel lists: ready, or why not.
#[derive(Clone)]
pub struct Backend {
    pub device: Device,
    pub label: &'static str,
    pub runner: Result<Arc<dyn Runner>, String>,
}

/// Every device of the launch layer, in the order the run panel lists them, each opened
/// or with the reason it cannot be.
pub fn backends() -> Vec<Backend> {
    [Device::Interpreter, Device::Cpu, Device::Gpu]
        .into_iter()
        .map(|device| {
            let label = match device {
                Device::Interpreter => "reference interpreter",
                Device::Cpu => "CPU (LLVM JIT)",
                Device::Gpu => "GPU (CUDA)",
            };
            let runner = match launch::open(DeviceRequest::Only(device)) {
                Ok(opened) => Ok(Arc::new(LaunchRunner(opened.backend)) as Arc<dyn Runner>),
                Err(e) => Err(e.message.trim_start_matches(&format!("--device {device}: ")).to_string()),
            };
            Backend { device, label, runner }
        })
        .collect()
}

/// What a batch reports to the UI.
#[derive(Clone, Debug)]
pub enum Report {
    Started { index: usize },
    Finished { index: usize, outcome: Result<RunOutcome, String>, wall: Duration },
}

/// A list of jobs running on a worker thread.
pub struct Batch {
    pub device: Device,
    pub jobs: Vec<RunJob>,
    pub autotune: bool,
    pub started: Instant,
    /// Index of the job running now.
    pub current: Option<usize>,
    pub done: usize,
    cancel: Arc<AtomicBool>,
    rx: Receiver<Report>,
    handle: Option<JoinHandle<()>>,
}

impl Batch {
    pub fn start(runner: Arc<dyn Runner>, jobs: Vec<RunJob>, autotune: bool) -> Batch {
        let (tx, rx) = channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let device = runner.device();
        let work = jobs.clone();
        let flag = cancel.clone();
        let handle = std::thread::Builder::new()
            .name("tessera-explore runner".into())
            .spawn(move || {
                let mut reference = None;
                for (index, job) in work.iter().enumerate() {
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    if tx.send(Report::Started { index }).is_err() {
                        break;
                    }
                    let t = Instant::now();
                    let outcome =
                        crate::panics::catching(|| catch("running the kernel", || runner.run(job, &mut reference)))
                            .unwrap_or_else(|e| Err(e.message));
                    if tx.send(Report::Finished { index, outcome, wall: t.elapsed() }).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Batch { device, jobs, autotune, started: Instant::now(), current: None, done: 0, cancel, rx, handle }
    }

    /// Reports that arrived since the last call, and whether the worker is finished.
    pub fn drain(&mut self) -> (Vec<Report>, bool) {
        let mut out = Vec::new();
        loop {
            match self.rx.try_recv() {
                Ok(r) => {
                    match &r {
                        Report::Started { index } => self.current = Some(*index),
                        Report::Finished { .. } => {
                            self.done += 1;
                            self.current = None;
                        }
                    }
                    out.push(r);
                }
                Err(TryRecvError::Empty) => return (out, self.handle.is_none()),
                Err(TryRecvError::Disconnected) => {
                    if let Some(h) = self.handle.take() {
                        let _ = h.join();
                    }
                    return (out, true);
                }
            }
        }
    }

    /// Asks the worker to stop after the job running now.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Waits for the worker (tests and benchmarks; the UI polls instead).
    pub fn wait(&mut self, timeout: Duration) -> Vec<Report> {
        let deadline = Instant::now() + timeout;
        let mut all = Vec::new();
        loop {
            let (reports, finished) = self.drain();
            all.extend(reports);
            if finished || Instant::now() >= deadline {
                return all;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A graph function (`@jit`) to run, with the source text it is run from.
///
/// Unlike a kernel's [`RunJob`] it cannot be planned on the UI thread: a launch plan's
/// kernels are lowered while the plan runs (each for the shapes its launch gets), so the
/// run asks a database throughout. The worker builds its own database from the text
/// rather than sharing the explorer's, so an edit or a reload never waits for a run
/// (a salsa write waits for every other handle of the database to be dropped).
#[derive(Clone, Debug)]
pub struct GraphJob {
    pub function: String,
    /// The file's path, as the workspace shows it (locations in errors name it).
    pub path: PathBuf,
    pub text: String,
    /// Shape symbols' values; the others get `launch::graph::DEFAULT_GRAPH_DIM`.
    pub dims: BTreeMap<String, i64>,
    pub seed: u64,
    pub options: GraphRunOptions,
    /// The source revision the job was made from.
    pub revision: u64,
}

impl GraphJob {
    /// A run as `tessera run FILE --kernel FUNCTION` makes it: seed 0, the device, target
    /// and repeat count `GraphSession` picks.
    pub fn new(function: &str, path: PathBuf, text: String, dims: BTreeMap<String, i64>, revision: u64) -> GraphJob {
        GraphJob {
            function: function.to_string(),
            path,
            text,
            dims,
            seed: 0,
            options: GraphRunOptions::default(),
            revision,
        }
    }
}

/// What a graph run found, as `GraphSession` returned it: the seeded inputs' shape
/// symbols and scalars, and the checked run (its verdict, each returned value's check,
/// the plan's kernels with their times, the times of the whole plan). The tensors are
/// dropped: the panel shows none of them and a record lives as long as the explorer.
#[derive(Clone, Debug)]
pub struct GraphOutcome {
    pub inputs: GraphInputs,
    pub run: GraphRun,
}

/// The device a graph run gets when nothing asks for one (the CPU backend when this
/// build has it, else the interpreter), as `GraphSession` decides it.
pub fn graph_device() -> Option<Device> {
    GraphSession::device(DeviceRequest::Auto).ok()
}

/// Runs a graph function: `GraphSession::open`, `seed`, `run`, on a database of its own.
/// Errors are `GraphRunError`'s message, with the source position when it has one.
pub fn run_graph(job: &GraphJob) -> Result<GraphOutcome, String> {
    let host = AnalysisHost::new(job.path.clone(), job.text.clone(), None);
    let analysis = host.analysis();
    let (db, key) = (host.db(), analysis.function(&job.function).map_err(|e| e.message)?.key);
    let failed = |e: launch::graph::GraphRunError| match e.loc(&job.function).and_then(|loc| analysis.position(&loc)) {
        Some((path, line, col)) => format!("{e} (at {path}:{line}:{col})"),
        None => e.to_string(),
    };
    let session = GraphSession::open(db, key).map_err(failed)?;
    let mut inputs = session.seed(&job.dims, &[], job.seed).map_err(failed)?;
    let mut run = session.run(&inputs, &job.options).map_err(failed)?;
    inputs.args.clear();
    run.reference.clear();
    run.returned.clear();
    Ok(GraphOutcome { inputs, run })
}

/// A graph function running on a worker thread.
pub struct GraphTask {
    pub job: GraphJob,
    pub started: Instant,
    rx: Receiver<(Result<GraphOutcome, String>, Duration)>,
}

impl GraphTask {
    pub fn start(job: GraphJob) -> GraphTask {
        let (tx, rx) = channel();
        let work = job.clone();
        // A thread that cannot be spawned drops `tx`: `poll` then reports the failure.
        let _ = std::thread::Builder::new().name("tessera-explore graph runner".into()).spawn(move || {
            let t = Instant::now();
            let outcome = crate::panics::catching(|| catch("running the graph function", || run_graph(&work)))
                .unwrap_or_else(|e| Err(e.message));
            // The receiver is gone when the run was cancelled: nobody wants the result.
            let _ = tx.send((outcome, t.elapsed()));
        });
        GraphTask { job, started: Instant::now(), rx }
    }

    /// The result and the run's wall time once the worker is done; None while it runs.
    pub fn poll(&mut self) -> Option<(Result<GraphOutcome, String>, Duration)> {
        match self.rx.try_recv() {
            Ok(done) => Some(done),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                Some((Err("the runner thread stopped without a result".into()), self.started.elapsed()))
            }
        }
    }
}
