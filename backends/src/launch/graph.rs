//! Running a graph function (`@jit`): its launch plan — the generated kernels in order,
//! with their buffers and views — runs on the CPU backend or the interpreter, and every
//! returned value is checked against the f64 reference: the Graph IR interpreter
//! evaluating the function op by op on whole tensors in f64, rounding each value to its
//! declared dtype (an independent path: it shares no kernel code with the plan). The
//! layer `tessera run` and the explorer share for graph functions, as [`super::execute`]
//! is for kernels.
//!
//! 1. [`GraphSession::open`] lowers the function to Graph IR and plans it.
//! 2. [`GraphSession::seed`] gives every shape symbol a value and seeds the arguments.
//! 3. [`GraphSession::run`] runs the f64 reference and the plan (timed, `repeat` times)
//!    and checks every returned value.
//!
//! [`run_graph_function`] does all three.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_frontend::check::{fn_signature, DType, Dim};
use tessera_frontend::{Db, FnKey};
use tessera_passes::graph_plan::{GraphPlan, PlannedKernel};
use tessera_passes::ir::{Func, Loc, OpKind, Type};
use tessera_passes::session::overrides::dim_rejection;
use tessera_passes::{LowerError, Target};

use super::{allows_nonfinite, numerics_violations, Device, DeviceRequest, ErrorKind, NumericsViolation, Verdict};
use crate::interp::compare::{compare_with, Comparison, Tolerance};
use crate::interp::graph::{
    run_graph_f64_unrounded, run_graph_f64_with_kernels, run_plan_with_dims, InterpExecutor, KernelExecutor,
};
use crate::interp::InterpError;
use crate::tensor::{round_to, Arg, HostTensor};

mod mesh;
pub use mesh::{run_on_mesh, CollectiveInfo, MeshCheck, PipelineSchedule};

/// Shape symbols get this value when the request does not give one: small enough for
/// the interpreter that checks the run.
pub const DEFAULT_GRAPH_DIM: i64 = 64;

/// Why a graph function could not be run. Each variant keeps its structure (the lowering
/// error with its item-relative range, the interpreter error with its op and location);
/// `Display` is the message without a file prefix.
#[derive(Clone, PartialEq, Debug)]
pub enum GraphRunError {
    /// The function has no Graph IR.
    NoGraphIr(LowerError),
    /// The function has Graph IR but no launch plan.
    NoPlan { function: String, error: LowerError },
    /// A dim or argument value is wrong (or a tensor was given a value).
    Input(String),
    /// A GPU was asked for and there is none (or this build has no NVIDIA backend): why.
    NoGpu(String),
    /// The CPU backend was asked for and this build has none.
    NoCpuBackend,
    /// The f64 reference failed.
    Reference(InterpError),
    /// The launch plan failed while running.
    Plan(InterpError),
}

impl GraphRunError {
    /// The kind of failure, as kernels' [`super::LaunchError`]s have.
    pub fn kind(&self) -> ErrorKind {
        match self {
            GraphRunError::NoGraphIr(_) | GraphRunError::NoPlan { .. } => ErrorKind::NotRunnable,
            GraphRunError::Input(_) => ErrorKind::Input,
            GraphRunError::NoGpu(_) | GraphRunError::NoCpuBackend => ErrorKind::Unavailable,
            GraphRunError::Reference(_) => ErrorKind::NotRunnable,
            GraphRunError::Plan(_) => ErrorKind::Fault,
        }
    }

    /// Where in the source, relative to its function (`tessera_passes::FileLocs` resolves
    /// it), when the failure has a position.
    pub fn loc(&self, function: &str) -> Option<Loc> {
        match self {
            GraphRunError::NoGraphIr(e) => Some(Loc::new(function, e.range)),
            GraphRunError::Reference(e) | GraphRunError::Plan(e) => e.site.as_ref().map(|s| s.loc.clone()),
            _ => None,
        }
    }
}

impl fmt::Display for GraphRunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphRunError::NoGraphIr(e) => f.write_str(&e.message),
            GraphRunError::NoPlan { function, error } => write!(f, "cannot plan `{function}`: {}", error.message),
            GraphRunError::Input(m) => f.write_str(m),
            GraphRunError::NoGpu(why) => write!(f, "--device gpu: {why}"),
            GraphRunError::NoCpuBackend => f.write_str(crate::NO_CPU_BACKEND),
            GraphRunError::Reference(e) => write!(f, "the f64 reference (the Graph IR in f64): {e}"),
            GraphRunError::Plan(e) => write!(f, "the launch plan failed: {e}"),
        }
    }
}

impl std::error::Error for GraphRunError {}

/// A graph function with its Graph IR and launch plan.
pub struct GraphSession<'db> {
    db: &'db dyn Db,
    key: FnKey<'db>,
    pub graph: Arc<Func>,
    pub plan: Arc<GraphPlan>,
}

/// The seeded arguments of a run.
#[derive(Clone, Debug)]
pub struct GraphInputs {
    /// One per parameter, in order.
    pub args: Vec<Arg>,
    /// Every shape symbol's value.
    pub symbols: BTreeMap<String, i64>,
    /// The symbols that got [`DEFAULT_GRAPH_DIM`], in the order they were met.
    pub assumed: Vec<(String, i64)>,
    /// The scalar parameters and their values as text (`name`, `2`).
    pub scalars: Vec<(String, String)>,
    pub seed: u64,
}

/// Where and how often a plan runs.
#[derive(Clone, Debug)]
pub struct GraphRunOptions {
    /// `Auto`/`Only(Cpu)`: the CPU backend when built, else the interpreter.
    pub device: DeviceRequest,
    /// Default: `cpu` on the CPU backend, `sm_90` on the interpreter.
    pub target: Option<Target>,
    /// Runs of the whole plan (default: 5 on the CPU backend, 1 on the interpreter).
    pub repeat: Option<u32>,
    /// CPU threads (default: the available parallelism).
    pub threads: Option<usize>,
}

impl Default for GraphRunOptions {
    fn default() -> GraphRunOptions {
        GraphRunOptions { device: DeviceRequest::Auto, target: None, repeat: None, threads: None }
    }
}

/// Everything to run a graph function at once ([`run_graph_function`]).
#[derive(Clone, Debug, Default)]
pub struct GraphRunRequest {
    pub dims: BTreeMap<String, i64>,
    /// Scalar parameters' values as text.
    pub args: Vec<(String, String)>,
    pub seed: u64,
    pub options: GraphRunOptions,
}

/// One kernel of the plan and the time of its launch in the last run of the plan.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub kernel: PlannedKernel,
    /// `Duration::ZERO` when the kernel did not run.
    pub time: Duration,
}

/// One returned value checked against the reference.
#[derive(Clone, Debug)]
pub struct GraphCheck {
    /// `return`, or `return0`, `return1`, ... for a tuple.
    pub name: String,
    pub dtype: DType,
    /// The reference value's dims (empty for a scalar).
    pub dims: Vec<usize>,
    pub comparison: Comparison,
    /// Set when the value passed only within its rounding sensitivity: how far its f64
    /// reference moves when the reference keeps every value in f64 instead of rounding it
    /// to its declared dtype ([`rounding_sensitivity`]).
    pub rounding_sensitivity: Option<f64>,
}

impl GraphCheck {
    /// This value's own verdict (the run's is correct when every value's is, wrong when
    /// any is): correct when the comparison passed, wrong when an element is out of
    /// tolerance (or non-finite where the reference is finite, or the lengths differ),
    /// else non-finite (the reference itself has NaN or Inf). Front ends that list the
    /// returned values one by one (the explorer's run panel) ask this rather than
    /// re-deriving it from the comparison.
    pub fn verdict(&self) -> Verdict {
        let c = &self.comparison;
        if c.passed {
            Verdict::Correct
        } else if c.mismatches > 0 || c.length_mismatch.is_some() {
            Verdict::Wrong
        } else {
            Verdict::NonFinite
        }
    }
}

/// What a run of a graph function found.
#[derive(Clone, Debug)]
pub struct GraphRun {
    pub device: Device,
    /// The device as reports name it ("CPU backend (LLVM JIT)", the GPU's name).
    pub device_name: String,
    pub target: Target,
    pub repeat: u32,
    /// Every kernel of the plan, with its time.
    pub kernels: Vec<KernelTime>,
    /// The f64 reference's returned values.
    pub reference: Vec<Arg>,
    /// The plan's returned values, named as [`return_names`] names them (a scalar as a
    /// 0-d tensor).
    pub returned: Vec<(String, HostTensor)>,
    /// One per returned value the reference also has.
    pub checks: Vec<GraphCheck>,
    /// `Correct`, `Wrong` or `NonFinite`.
    pub verdict: Verdict,
    /// `@verify.numerics` violations of the returned values.
    pub numerics: Vec<NumericsViolation>,
    /// The times of the whole plan, sorted.
    pub times: Vec<Duration>,
}

impl GraphRun {
    pub fn correct(&self) -> bool {
        self.verdict == Verdict::Correct
    }

    pub fn median_ms(&self) -> f64 {
        self.times[self.times.len() / 2].as_secs_f64() * 1e3
    }

    pub fn min_ms(&self) -> f64 {
        self.times[0].as_secs_f64() * 1e3
    }

    pub fn max_abs_err(&self) -> f64 {
        self.checks.iter().map(|c| c.comparison.max_abs).fold(0.0, f64::max)
    }

    pub fn max_rel_err(&self) -> f64 {
        self.checks.iter().map(|c| c.comparison.max_rel).fold(0.0, f64::max)
    }
}

/// Seeds, plans and runs the graph function `key` ([`GraphSession`]'s three steps).
pub fn run_graph_function(
    db: &dyn Db,
    key: FnKey<'_>,
    request: &GraphRunRequest,
) -> Result<(GraphInputs, GraphRun), GraphRunError> {
    let session = GraphSession::open(db, key)?;
    let inputs = session.seed(&request.dims, &request.args, request.seed)?;
    let run = session.run(&inputs, &request.options)?;
    Ok((inputs, run))
}

impl<'db> GraphSession<'db> {
    /// The function's Graph IR and launch plan.
    pub fn open(db: &'db dyn Db, key: FnKey<'db>) -> Result<GraphSession<'db>, GraphRunError> {
        let graph = tessera_passes::graph_ir(db, key).clone().map_err(GraphRunError::NoGraphIr)?;
        let (plan, _) = tessera_passes::plan_module(db, key)
            .map_err(|error| GraphRunError::NoPlan { function: key.name(db).to_string(), error })?;
        Ok(GraphSession { db, key, graph, plan })
    }

    /// Seeded arguments: every shape symbol `dims` does not give is [`DEFAULT_GRAPH_DIM`],
    /// tensors are seeded normal(0, 1) numbers (weights scaled, see below), scalars take
    /// `given`'s value, else 2 (index) or 0.0.
    pub fn seed(
        &self,
        dims: &BTreeMap<String, i64>,
        given: &[(String, String)],
        seed: u64,
    ) -> Result<GraphInputs, GraphRunError> {
        // The session's override rule, as for kernels: a dim names a shape symbol of the
        // signature (`B` and `H` of a `"B*H"` dim are ones) and is at least 1.
        // A graph function has no schedule.
        let name = self.key.name(self.db);
        let symbols = &fn_signature(self.db, self.key).symbols;
        for (symbol, &value) in dims {
            if let Some(rejected) = dim_rejection(name, None, symbols, symbol, value) {
                return Err(GraphRunError::Input(rejected.as_option_error()));
            }
        }
        seed_inputs(&self.graph, dims, given, seed).map_err(GraphRunError::Input)
    }

    /// The device a request gets.
    pub fn device(request: DeviceRequest) -> Result<Device, GraphRunError> {
        Ok(match request {
            DeviceRequest::Only(Device::Interpreter) => Device::Interpreter,
            DeviceRequest::Only(Device::Gpu) => Device::Gpu,
            _ if crate::HAS_CPU_BACKEND => Device::Cpu,
            _ => Device::Interpreter,
        })
    }

    /// Runs the f64 reference once and the plan `repeat` times, and checks the last run's
    /// returned values.
    pub fn run(&self, inputs: &GraphInputs, options: &GraphRunOptions) -> Result<GraphRun, GraphRunError> {
        let (db, key) = (self.db, self.key);
        let device = Self::device(options.device)?;
        // On the GPU the plan's kernels are launched through one executor for the whole
        // run (its loaded modules serve every repetition).
        let mut gpu = match device {
            Device::Gpu => Some(crate::gpu_plan_executor().map_err(GraphRunError::NoGpu)?),
            _ => None,
        };
        let target = match (&gpu, options.target) {
            (Some((_, gpu_target, _)), Some(t)) if t != *gpu_target => {
                return Err(GraphRunError::Input(format!(
                    "--target {t}: the GPU here runs {gpu_target} code; omit --target or give {gpu_target}"
                )))
            }
            (Some((_, gpu_target, _)), _) => *gpu_target,
            (None, Some(t)) => t,
            (None, None) if device == Device::Cpu => Target::Cpu,
            (None, None) => Target::Sm90,
        };
        let repeat = options.repeat.unwrap_or(if device == Device::Cpu { 5 } else { 1 }).max(1);
        let seed = inputs.seed as i64;
        // A kernel the function calls is run by its own f64 reference (`kernel_reference`).
        let called = super::kernel_reference::FileKernels { db, file: key.file(db) };
        let reference = run_graph_f64_with_kernels(&self.graph, &inputs.args, &inputs.symbols, seed, &called)
            .map_err(GraphRunError::Reference)?;
        let allow_nonfinite = allows_nonfinite(db, key);
        let mut times = Vec::new();
        let mut measured = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..repeat {
            let t = Instant::now();
            // A fresh executor per repetition on the CPU and the interpreter; the GPU's
            // serves every repetition.
            let mut fresh: Box<dyn KernelExecutor>;
            let inner: &mut dyn KernelExecutor = match device {
                Device::Cpu => {
                    let threads =
                        options.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
                    fresh = crate::cpu_plan_executor(threads).ok_or(GraphRunError::NoCpuBackend)?;
                    fresh.as_mut()
                }
                Device::Gpu => gpu.as_mut().expect("opened above for a GPU run").0.as_mut(),
                Device::Interpreter => {
                    fresh = Box::new(InterpExecutor::default());
                    fresh.as_mut()
                }
            };
            let mut exec = Timed { inner, kernels: Vec::new() };
            let got = run_plan_with_dims(db, key, target, &inputs.args, &inputs.symbols, seed, &mut exec);
            let per_kernel = exec.kernels;
            times.push(t.elapsed());
            outputs = got.map_err(GraphRunError::Plan)?;
            measured = per_kernel;
        }
        let kernels = self
            .plan
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| KernelTime { kernel: k.clone(), time: measured.get(i).map_or(Duration::ZERO, |m| m.1) })
            .collect();
        let names = graph_return_names(&self.graph, outputs.len());
        // `@accum(T)` narrower than f32 rounds the running sums to T at every step, where
        // the reference sums in f64: the budget widens with the accumulator's precision
        // and the longest input dim (an upper bound on a sum's length), as for kernels.
        let narrow = super::narrowest_accumulator(&self.graph);
        let longest = crate::interp::compare::longest_dim(&inputs.args);
        let checks: Vec<GraphCheck> = reference
            .iter()
            .zip(&outputs)
            .zip(&names)
            .map(|((want, got), name)| {
                let d = dtype(want);
                let mut tol = graph_tolerance(d, self.plan.kernels.len()).allowing_nonfinite(allow_nonfinite);
                if let Some(acc) = narrow {
                    tol = tol.with_accumulator(acc, longest);
                }
                GraphCheck {
                    name: name.clone(),
                    dtype: d,
                    dims: arg_dims(want),
                    comparison: compare_with(&values(want), &values(got), &tol),
                    rounding_sensitivity: None,
                }
            })
            .collect();
        let mut checks = checks;
        if checks.iter().any(|c| c.comparison.mismatches > 0) {
            let unrounded =
                run_graph_f64_unrounded(&self.graph, &inputs.args, &inputs.symbols, seed, Some(&called)).ok();
            for (i, check) in checks.iter_mut().enumerate() {
                let (Some(unrounded), Some(got)) = (unrounded.as_ref().and_then(|u| u.get(i)), outputs.get(i)) else {
                    continue;
                };
                if check.comparison.mismatches > 0 {
                    let want = values(&reference[i]);
                    rounding_sensitivity(check, &want, &values(unrounded), &values(got));
                }
            }
        }
        let same_len = reference.len() == outputs.len();
        // One rule for each value and the run: a value whose length differs from the
        // reference's is wrong, never "non-finite".
        let correct = checks.iter().all(|c| c.verdict() == Verdict::Correct) && same_len;
        let wrong = checks.iter().any(|c| c.verdict() == Verdict::Wrong) || !same_len;
        let verdict = if correct {
            Verdict::Correct
        } else if wrong {
            Verdict::Wrong
        } else {
            Verdict::NonFinite
        };
        let returned: Vec<(String, HostTensor)> =
            names.iter().zip(&outputs).map(|(n, a)| (n.clone(), as_tensor(a))).collect();
        let numerics = match &fn_signature(db, key).numerics {
            Some(spec) => {
                let refs: Vec<(String, &HostTensor)> = returned.iter().map(|(n, t)| (n.clone(), t)).collect();
                numerics_violations(spec, &refs)
            }
            None => Vec::new(),
        };
        times.sort();
        let device_name = match (&gpu, device) {
            (Some((_, _, name)), _) => format!("{name}: each kernel's tensors copied in and out"),
            (None, Device::Cpu) => "CPU backend (LLVM JIT)".to_string(),
            (None, _) => "the reference interpreter".to_string(),
        };
        Ok(GraphRun {
            device,
            device_name,
            target,
            repeat,
            kernels,
            reference,
            returned,
            checks,
            verdict,
            numerics,
            times,
        })
    }
}

/// Runs one launch of each kernel and times it (the executor of the plan).
struct Timed<E> {
    inner: E,
    kernels: Vec<(String, Duration)>,
}

impl<E: KernelExecutor> KernelExecutor for Timed<E> {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        let t = Instant::now();
        self.inner.launch(tile_ir, args)?;
        self.kernels.push((tile_ir.name.to_string(), t.elapsed()));
        Ok(())
    }
}

/// Seeded normal(0, 1) numbers (splitmix64 and Box-Muller), one stream per parameter.
fn normals(seed: u64, stream: u64, n: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next().max(1e-300), next());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        })
        .collect()
}

fn seed_inputs(
    graph: &Func,
    dims: &BTreeMap<String, i64>,
    given: &[(String, String)],
    seed: u64,
) -> Result<GraphInputs, String> {
    let mut symbols = dims.clone();
    let mut assumed = Vec::new();
    // A KV cache's length (`cache.len`) is 0, an empty cache, unless `--arg cache.len=N`
    // gives it; its capacity (`S_max`) is a shape symbol as any other.
    let caches = cache_lengths(graph);
    let mut given_rest = Vec::new();
    for (name, value) in given {
        if caches.contains(name) {
            let n = value
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| format!("--arg {name}={value}: a KV cache's length is a non-negative integer"))?;
            if dims.contains_key(name) {
                return Err(format!("--arg {name} and --dims {name} both give the cache's length"));
            }
            symbols.insert(name.clone(), n);
        } else {
            given_rest.push((name.clone(), value.clone()));
        }
    }
    let given = &given_rest[..];
    for len in &caches {
        symbols.entry(len.clone()).or_insert(0);
    }
    for capacity in cache_capacities(graph) {
        for s in capacity.symbols() {
            if !symbols.contains_key(&s) {
                symbols.insert(s.clone(), DEFAULT_GRAPH_DIM);
                assumed.push((s.clone(), DEFAULT_GRAPH_DIM));
            }
        }
    }
    for &p in &graph.params {
        for d in graph.ty(p).dims() {
            for s in d.symbols() {
                if !symbols.contains_key(&s) {
                    symbols.insert(s.clone(), DEFAULT_GRAPH_DIM);
                    assumed.push((s.clone(), DEFAULT_GRAPH_DIM));
                }
            }
        }
    }
    // An int parameter is a dim symbol (`C: int` in `arange(C)`): `--dims C=3` gives it
    // as well as `--arg C=3`, and both must agree, so that the run and what is derived
    // from the dims (the collectives' bytes on a mesh) see one value.
    let mut index_args: BTreeMap<String, i64> = BTreeMap::new();
    for &p in &graph.params {
        if *graph.ty(p) != Type::Index {
            continue;
        }
        let name = graph.values[p.0 as usize].name.clone().unwrap_or_default().to_string();
        let given = given.iter().find(|(k, _)| *k == name).map(|(_, v)| v);
        let v = match (given, symbols.get(&name).copied()) {
            (Some(v), known) => {
                let v = v.parse::<i64>().map_err(|_| format!("--arg {name}={v}: not an integer"))?;
                if let Some(d) = known.filter(|&d| d != v) {
                    return Err(format!("--arg {name}={v} and the dim {name} = {d} disagree"));
                }
                v
            }
            (None, Some(d)) => d,
            (None, None) => 2,
        };
        symbols.insert(name.clone(), v);
        index_args.insert(name, v);
    }
    let lookup = |d: &Dim| d.eval(&|s| symbols.get(s).copied());
    // Weights (right operands of matmuls) are scaled by 1/sqrt(K), as LeCun
    // initialization does, so activations stay O(1) through a stack of layers instead of
    // growing by sqrt(K) per matmul (where bf16 rounding then dominates the check).
    let weights: Vec<_> = graph
        .walk()
        .into_iter()
        .filter(|&id| graph.op(id).kind == OpKind::MatMul)
        .filter_map(|id| graph.op(id).operands.get(1).copied())
        .collect();
    let mut args = Vec::new();
    let mut scalars = Vec::new();
    for (i, &p) in graph.params.iter().enumerate() {
        let name = graph.values[p.0 as usize].name.clone().unwrap_or_default().to_string();
        let value = given.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
        match graph.ty(p) {
            Type::Tensor(t) => {
                if value.is_some() {
                    return Err(format!("--arg {name}: `{name}` is a tensor; tensors are seeded"));
                }
                let shape: Vec<usize> = t
                    .dims
                    .iter()
                    .map(|d| {
                        lookup(d)
                            .filter(|v| *v >= 0)
                            .map(|v| v as usize)
                            .ok_or_else(|| format!("`{name}` dim {d} has no value"))
                    })
                    .collect::<Result<_, _>>()?;
                let n = shape.iter().product();
                let scale = match (weights.contains(&p), shape.len()) {
                    (true, rank) if rank >= 2 => 1.0 / (shape[rank - 2].max(1) as f64).sqrt(),
                    _ => 1.0,
                };
                let values: Vec<f64> =
                    normals(seed, i as u64, n).into_iter().map(|x| round_to(t.dtype, x * scale)).collect();
                args.push(Arg::Tensor(HostTensor::from_f64(t.dtype, &shape, &values)));
            }
            Type::Index => {
                let v = index_args[&name];
                scalars.push((name.clone(), v.to_string()));
                args.push(Arg::Index(v));
            }
            Type::Scalar(d) => {
                let v = match &value {
                    Some(v) => v.parse::<f64>().map_err(|_| format!("--arg {name}={v}: not a number"))?,
                    None => 0.0,
                };
                scalars.push((name.clone(), v.to_string()));
                args.push(Arg::Scalar(*d, round_to(*d, v)));
            }
            other => return Err(format!("parameter `{name}` of type {other} cannot be given")),
        }
    }
    optimizer_states(graph, &mut args)?;
    Ok(GraphInputs { args, symbols, assumed, scalars, seed })
}

/// An optimizer state starts fresh: its moments `NAME.m`, `NAME.v` zero (`NAME.step` is
/// a scalar, 0 unless given), and its master copy `NAME.master` the f32 values of the
/// parameter it is for (the function's `optimizer_states` attribute: `state=W`).
fn optimizer_states(graph: &Func, args: &mut [Arg]) -> Result<(), String> {
    let Some(states) = graph.attr("optimizer_states").and_then(|a| a.as_str()) else { return Ok(()) };
    let index =
        |name: &str| graph.params.iter().position(|&p| graph.values[p.0 as usize].name.as_deref() == Some(name));
    for entry in states.split(',') {
        let Some((state, target)) = entry.split_once('=') else { continue };
        for moment in ["m", "v"] {
            if let Some(i) = index(&format!("{state}.{moment}")) {
                if let Arg::Tensor(t) = &args[i] {
                    let zeros = vec![0.0; t.numel()];
                    args[i] = Arg::Tensor(HostTensor::from_f64(t.dtype, &t.dims.clone(), &zeros));
                }
            }
        }
        if let (Some(i), Some(w)) = (index(&format!("{state}.master")), index(target)) {
            let Arg::Tensor(w) = &args[w] else { return Err(format!("`{target}` of `{state}` is not a tensor")) };
            args[i] = Arg::Tensor(HostTensor::from_f64(DType::F32, &w.dims.clone(), &w.to_f64()));
        }
    }
    Ok(())
}

fn values(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        Arg::Scalar(_, v) => vec![*v],
        Arg::Index(v) => vec![*v as f64],
    }
}

fn dtype(a: &Arg) -> DType {
    match a {
        Arg::Tensor(t) => t.dtype,
        Arg::Scalar(d, _) => *d,
        Arg::Index(_) => DType::I64,
    }
}

/// The error budget of a plan against the graph: the kernels re-associate sums (matmul K
/// blocks, attention's online softmax, whose probabilities are rounded to bf16 before
/// P·V) where the graph sums in order, and every kernel boundary rounds to the storage
/// dtype, so a rounding that flips early is carried through the later layers. The
/// budget is one step of the output's precision per kernel, relative to the output's
/// magnitude (its RMS), on top of the dtype's own tolerance.
pub fn graph_tolerance(d: DType, kernels: usize) -> Tolerance {
    let base = Tolerance::for_dtype(d);
    if base.rtol == 0.0 {
        return base;
    }
    let k = (kernels.max(1)) as f64;
    Tolerance { rtol: base.rtol * k, atol: base.atol * k, ..base }
}

/// How many times the reference's own rounding shift a result may be off. The plan
/// rounds at other places than the reference (at kernel boundaries, not per op) and
/// computes some values by other formulas (a fused one-pass layernorm backward), so its
/// rounding error is not the same draw, nor always as small: on the gradients of a
/// loss a layernorm makes nearly constant (`tests/graph_norm_grads.rs`) it was 1.2 to
/// 8.5 times the shift.
pub const SENSITIVITY_FACTOR: f64 = 16.0;

/// The shift that marks a cancellation: this many roundings of the output's largest
/// value. A well-conditioned output moves by a few of its own roundings and keeps its
/// dtype's tolerance.
const CANCELLATION_ROUNDINGS: f64 = 64.0;

/// Re-judges a value that mismatched. When the f64 reference itself moves by `moved` (its
/// largest change over finite elements) between rounding every value to its declared
/// dtype and keeping it in f64, and that is more than [`CANCELLATION_ROUNDINGS`]
/// roundings of the value's largest element, the value is a cancellation of larger terms
/// — a gradient through a layernorm of a loss the normalization makes nearly constant —
/// and depends on where it is rounded; the plan, which rounds elsewhere, is held to
/// [`SENSITIVITY_FACTOR`] times that shift on top of the dtype's tolerance. A value
/// within it passes, and the check says so; one outside stays wrong.
fn rounding_sensitivity(check: &mut GraphCheck, want: &[f64], unrounded: &[f64], got: &[f64]) {
    if !check.dtype.is_float() || want.len() != unrounded.len() {
        return;
    }
    let finite = || want.iter().zip(unrounded).filter(|(w, r)| w.is_finite() && r.is_finite());
    let moved = finite().map(|(w, r)| (w - r).abs()).fold(0.0, f64::max);
    let largest = finite().map(|(w, _)| w.abs()).fold(0.0, f64::max);
    // The unit roundoff: half an ulp at 1.
    let u = 2f64.powi(-(crate::interp::program::significant_bits(check.dtype) as i32));
    let tol = check.comparison.tolerance;
    if moved <= CANCELLATION_ROUNDINGS * u * largest || tol.rtol == 0.0 {
        return;
    }
    let scale = check.comparison.scale;
    let widened = Tolerance { atol: tol.atol + SENSITIVITY_FACTOR * moved / scale, scale: Some(scale), ..tol };
    let again = compare_with(want, got, &widened);
    if again.passed {
        check.comparison = again;
        check.rounding_sensitivity = Some(moved);
    }
}

/// The length symbols of the function's KV cache parameters (`cache.len` for the
/// parameters `cache.K` and `cache.V`).
fn cache_lengths(graph: &Func) -> Vec<String> {
    let mut out = Vec::new();
    for &p in &graph.params {
        let name = graph.values[p.0 as usize].name.as_deref().unwrap_or_default();
        if let Some(cache) = name.strip_suffix(".K") {
            let len = tessera_frontend::check::cache_len_symbol(cache);
            if graph.ty(p).dims().get(2).and_then(|d| d.as_sym()) == Some(len.as_str()) {
                out.push(len);
            }
        }
    }
    out
}

/// The capacities (`S_max`) of the function's KV cache ops.
fn cache_capacities(graph: &Func) -> Vec<Dim> {
    let mut out = Vec::new();
    for id in graph.walk() {
        let op = graph.op(id);
        if matches!(op.kind, OpKind::CacheAppend | OpKind::CachePrune) {
            if let Some(tessera_passes::ir::Attr::Dims(d)) = op.attr("capacity") {
                out.extend(d.iter().cloned());
            }
        }
    }
    out
}

/// The names of a graph function's returned values: a returned KV cache is its keys and
/// values, named `cache.K` and `cache.V` (the function's `returns` attribute), the other
/// values as [`return_names`] names them.
pub fn graph_return_names(graph: &Func, n: usize) -> Vec<String> {
    match graph.attr("returns").and_then(|a| a.as_str()) {
        Some(names) if names.split(',').count() == n => names.split(',').map(String::from).collect(),
        _ => return_names(n),
    }
}

/// `return` for one returned value, `return0`, `return1`, ... for a tuple (the names
/// `--save` writes as `NAME.out.npy`).
pub fn return_names(n: usize) -> Vec<String> {
    if n == 1 {
        vec!["return".to_string()]
    } else {
        (0..n).map(|i| format!("return{i}")).collect()
    }
}

/// A returned value as a tensor (a scalar as a 0-d one).
fn as_tensor(a: &Arg) -> HostTensor {
    match a {
        Arg::Tensor(t) => t.clone(),
        Arg::Scalar(d, v) => HostTensor::from_f64(*d, &[], &[*v]),
        Arg::Index(v) => HostTensor::from_f64(DType::I64, &[], &[*v as f64]),
    }
}

fn arg_dims(a: &Arg) -> Vec<usize> {
    match a {
        Arg::Tensor(t) => t.dims.clone(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(want: &[f64], got: &[f64]) -> GraphCheck {
        let tol = graph_tolerance(DType::F32, 3);
        GraphCheck {
            name: "return".into(),
            dtype: DType::F32,
            dims: vec![want.len()],
            comparison: compare_with(want, got, &tol),
            rounding_sensitivity: None,
        }
    }

    /// Values of about 1e-5 that cancel terms near 1: the reference moves by 1e-7 without
    /// its f32 roundings. An error of 1e-6 passes within 16 times that; an error of 2e-6
    /// does not, nor does 1e-6 on a value whose reference barely moves.
    #[test]
    fn only_a_cancelling_value_is_held_to_its_rounding_shift() {
        let want: Vec<f64> = (0..64).map(|i| 1e-5 * (1.0 + (i as f64).sin())).collect();
        let unrounded: Vec<f64> = want.iter().enumerate().map(|(i, w)| w + if i == 7 { 1e-7 } else { 0.0 }).collect();
        let off = |by: f64| want.iter().map(|w| w + by).collect::<Vec<_>>();
        let mut c = check(&want, &off(1e-6));
        assert!(!c.comparison.passed);
        rounding_sensitivity(&mut c, &want, &unrounded, &off(1e-6));
        assert!(c.comparison.passed && c.rounding_sensitivity.is_some_and(|m| (m - 1e-7).abs() < 1e-12), "{c:?}");
        let mut c = check(&want, &off(2e-6));
        rounding_sensitivity(&mut c, &want, &unrounded, &off(2e-6));
        assert!(!c.comparison.passed && c.rounding_sensitivity.is_none());
        // A shift of a few roundings of the largest value is no cancellation.
        let barely: Vec<f64> = want.iter().map(|w| w * (1.0 + 2f64.powi(-22))).collect();
        let mut c = check(&want, &off(1e-6));
        rounding_sensitivity(&mut c, &want, &barely, &off(1e-6));
        assert!(!c.comparison.passed && c.rounding_sensitivity.is_none());
    }
}
