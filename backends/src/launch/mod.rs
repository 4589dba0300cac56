//! Running one kernel on one device, checked against the reference interpreter: the
//! layer `tessera run`, `tessera autotune` and the explorer's run panel share.
//!
//! 1. [`kernel_info`] says what a function needs to run (its shape symbols and scalar
//!    parameters with their declared defaults), or why it cannot run.
//! 2. [`resolve_dims`] gives every shape symbol a value (the user's, else a documented
//!    default) and [`config_for`] specializes a schedule to them.
//! 3. [`plan`] lowers the kernel for the target (and the CPU Tile IR the reference runs),
//!    binds the dims and prepares seeded arguments.
//! 4. [`open`] picks a [`Device`]; its [`Backend`] loads the plan; [`execute`] launches it
//!    once for correctness, times warm-up + repeated launches, and checks the outputs
//!    against the interpreter (whole grid, or a sample of tile programs for big problems).
//!
//! # The reference
//! The oracle is the interpreter on the kernel's **CPU Tile IR** with the same schedule
//! (the plainest lowering: no pipelining, no layouts). A GPU run thus checks PTX and the
//! GPU tile passes together; `--device interp --target sm_90` checks the GPU lowering
//! (with the interpreter's async-copy and barrier hazard checks) against the CPU one.
//!
//! # Work model
//! FLOPs are counted from the Tile IR and the bound dims without running anything: each
//! `tile.dot` executed costs 2·m·n·k for its tile shape, times the trip counts of its
//! loops and the programs of the grid ([`count_dot_flops`]). That is the work the kernel
//! *executes*: edge tiles count whole (at shapes that are multiples of the tile sizes it
//! is exactly 2·M·N·K for a GEMM), and a causal kernel that visits every key block counts
//! every block. Kernels without `tile.dot` report bandwidth: every tensor the kernel
//! reads counted once, every tensor it writes counted once (an in-place tensor twice).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_frontend::check::{
    fn_decorators, fn_signature, infer_function, DType, FunctionKind, NumericsCheck, ScheduleValue, Ty,
};
use tessera_frontend::db::function_def;
use tessera_frontend::syntax::ast::{Expr, UnaryOp};
use tessera_frontend::{Db, FnKey};
use tessera_passes::abi::{AbiParam, KernelAbi};
use tessera_passes::codegen::{target_code, TargetCode};
use tessera_passes::ir::{Attr, Func, Loc, Op, OpId, OpKind, Region, Type, ValueId};
use tessera_passes::{graph_ir, sched, tile_ir, Config, LowerError, Target, DEFAULT_SHAPE};

use crate::interp::compare::{compare_with, Comparison, Tolerance};
use crate::interp::inputs::{self, Rng};
use crate::interp::{self, param_access, Access};
use crate::semantics;
use crate::tensor::{round_to, Arg, HostTensor};

/// The value a shape symbol gets when the user gives none (tile shape symbols such as
/// a head dim get [`DEFAULT_SHAPE`], the value the kernel is checked and shown with).
pub const DEFAULT_SIZE: i64 = 1024;

/// The seed of the arguments when none is given (the explorer uses the same).
pub const DEFAULT_SEED: u64 = 0;

/// Interpreter work (see [`interp_cost`]) above which `auto` checking samples programs.
pub const FULL_CHECK_LIMIT: u64 = 1 << 27;

/// Interpreter work a sampled check aims for.
pub const SAMPLE_BUDGET: u64 = 1 << 25;

/// The most interpreter work (see [`interp_cost`]) one launch on `--device interp` may
/// take: about 1.7e10 operations, tens of minutes.
pub const INTERP_WORK_LIMIT: u64 = 1 << 34;

mod check;
pub use check::*;
pub mod graph;

// ----- errors ------------------------------------------------------------------------

/// What kind of failure a [`LaunchError`] is (the CLI maps it to an exit status).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ErrorKind {
    /// A dim, argument or schedule value the user gave is wrong.
    Input,
    /// The device cannot be used here (absent, not built, cannot run the target).
    Unavailable,
    /// The function cannot be launched (a graph function, a helper).
    NotRunnable,
    /// The kernel does not compile for the target.
    Compile,
    /// The kernel failed while running (a hazard the interpreter found, a device fault).
    Fault,
    /// Not enough memory, a grid too large.
    Resources,
}

#[derive(Clone, PartialEq, Debug)]
pub struct LaunchError {
    pub kind: ErrorKind,
    pub message: String,
    /// The source of the failing op or the lowering error, relative to its function
    /// (`tessera_passes::FileLocs` resolves it to a file position).
    pub loc: Option<Loc>,
}

impl LaunchError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> LaunchError {
        LaunchError { kind, message: message.into(), loc: None }
    }

    pub fn input(message: impl Into<String>) -> LaunchError {
        LaunchError::new(ErrorKind::Input, message)
    }

    fn lowering(kernel: &str, what: &str, target: Option<Target>, e: &LowerError) -> LaunchError {
        let for_target = target.map(|t| format!(" for {t}")).unwrap_or_default();
        LaunchError {
            kind: ErrorKind::Compile,
            message: format!("cannot lower `{kernel}` to {what}{for_target}: {}", e.message),
            loc: Some(Loc::new(kernel, e.range)),
        }
    }

    /// An interpreter error: the failing op's location goes to `loc` (the message keeps
    /// the program and the op).
    fn interp(e: interp::InterpError) -> LaunchError {
        let kind = if e.message.contains("too large") { ErrorKind::Resources } else { ErrorKind::Fault };
        match &e.site {
            Some(site) => {
                let program = site.program.map(|[x, y, z]| format!("program ({x}, {y}, {z}), ")).unwrap_or_default();
                LaunchError {
                    kind,
                    message: format!("the kernel faulted in {program}{}: {}", site.op_name, e.message),
                    loc: Some(site.loc.clone()),
                }
            }
            None => LaunchError { kind, message: e.message, loc: None },
        }
    }
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LaunchError {}

// ----- devices -----------------------------------------------------------------------

/// Where a kernel runs.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Device {
    /// The reference interpreter standing in for a device (its timings are its own).
    Interpreter,
    /// The CPU backend (LLVM JIT).
    Cpu,
    /// The NVIDIA backend (PTX through the CUDA driver).
    Gpu,
}

impl Device {
    pub const ALL: [Device; 3] = [Device::Interpreter, Device::Cpu, Device::Gpu];

    pub fn name(self) -> &'static str {
        match self {
            Device::Interpreter => "interpreter",
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }

    /// Launches timed by default: many on a GPU, few where a launch is slow.
    pub fn default_repeat(self) -> u32 {
        match self {
            Device::Gpu => 100,
            Device::Cpu => 20,
            Device::Interpreter => 3,
        }
    }

    /// Untimed launches before the timed ones (after the correctness launch, which
    /// warms caches and JIT state too).
    pub fn default_warmup(self) -> u32 {
        match self {
            Device::Gpu => 10,
            Device::Cpu => 2,
            Device::Interpreter => 0,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `--device` choice.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum DeviceRequest {
    /// The GPU if there is one, else the CPU backend, else the interpreter.
    Auto,
    Only(Device),
}

impl FromStr for DeviceRequest {
    type Err = String;

    fn from_str(s: &str) -> Result<DeviceRequest, String> {
        Ok(match s {
            "auto" => DeviceRequest::Auto,
            "gpu" | "cuda" => DeviceRequest::Only(Device::Gpu),
            "cpu" => DeviceRequest::Only(Device::Cpu),
            "interp" | "interpreter" => DeviceRequest::Only(Device::Interpreter),
            other => return Err(format!("unknown device `{other}` (expected cpu, gpu, auto or interp)")),
        })
    }
}

/// A device that can load kernels. Implementations: [`Interpreter`] here, the CPU and
/// NVIDIA backends through the adapters of [`open`].
pub trait Backend: Send + Sync {
    fn device(&self) -> Device;
    /// What it is, for the report ("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)").
    fn description(&self) -> String;
    /// The target whose code it runs when none is asked for.
    fn default_target(&self) -> Target;
    /// Why it cannot run code for `target`, if it cannot.
    fn check_target(&self, target: Target) -> Result<(), String>;
    /// Whether [`plan`] must generate target code (PTX, LLVM IR) for it.
    fn needs_code(&self) -> bool;
    /// Compiles or loads the plan's kernel.
    fn load(&self, plan: &Plan) -> Result<Box<dyn Loaded>, LaunchError>;
}

/// One kernel loaded on a device.
///
/// Contract: [`Loaded::run`] copies the arguments in, launches the grid once, waits, and
/// copies every tensor back into `args` (outputs and in-place tensors). [`Loaded::time`]
/// then launches on the device-resident arguments of the last `run` — `warmup` untimed
/// launches, then `repeat` timed ones, each timed alone (CUDA events around the launch on
/// a GPU; wall clock around a CPU launch) — and returns the timed durations. Repeated
/// launches of an in-place kernel change its data; only `run`'s results are checked.
pub trait Loaded: Send {
    fn run(&mut self, args: &mut [Arg]) -> Result<(), LaunchError>;
    fn time(&mut self, warmup: u32, repeat: u32) -> Result<Vec<Duration>, LaunchError>;
    /// Registers per thread the code uses, as the driver reports them (GPU).
    fn registers(&self) -> Option<u32> {
        None
    }
}

/// A device opened for a request, with what `auto` tried on the way.
pub struct Opened {
    pub backend: Arc<dyn Backend>,
    /// One line per device `auto` passed over, saying why.
    pub notes: Vec<String>,
}

/// Opens the requested device. `auto` tries the GPU, then the CPU backend, then the
/// interpreter, and says why it passed over each.
pub fn open(request: DeviceRequest) -> Result<Opened, LaunchError> {
    match request {
        DeviceRequest::Only(device) => open_device(device)
            .map(|backend| Opened { backend, notes: Vec::new() })
            .map_err(|why| LaunchError::new(ErrorKind::Unavailable, format!("--device {device}: {why}"))),
        DeviceRequest::Auto => {
            let mut notes = Vec::new();
            for device in [Device::Gpu, Device::Cpu, Device::Interpreter] {
                match open_device(device) {
                    Ok(backend) => return Ok(Opened { backend, notes }),
                    Err(why) => notes.push(format!("auto: not the {}: {why}", device_label(device))),
                }
            }
            Err(LaunchError::new(ErrorKind::Unavailable, notes.join("; ")))
        }
    }
}

fn device_label(device: Device) -> &'static str {
    match device {
        Device::Gpu => "GPU",
        Device::Cpu => "CPU backend",
        Device::Interpreter => "interpreter",
    }
}

/// Whether a device can be opened here, and why not.
pub fn availability(device: Device) -> Result<String, String> {
    open_device(device).map(|b| b.description())
}

fn open_device(device: Device) -> Result<Arc<dyn Backend>, String> {
    match device {
        Device::Interpreter => Ok(Arc::new(Interpreter)),
        Device::Cpu => open_cpu(),
        Device::Gpu => open_gpu(),
    }
}

/// The CPU backend adapter (the only code that knows `tessera_backends::cpu`).
fn open_cpu() -> Result<Arc<dyn Backend>, String> {
    #[cfg(feature = "llvm")]
    {
        Ok(Arc::new(cpu_device::CpuBackend { threads: crate::cpu::default_threads() }))
    }
    #[cfg(not(feature = "llvm"))]
    {
        Err("this build has no CPU backend: it was built without the `llvm` feature (LLVM 14). \
             Install with `cargo install --path . --locked --features llvm`, or run with \
             `--device interp` (the reference interpreter)"
            .into())
    }
}

#[cfg(feature = "llvm")]
mod cpu_device {
    use super::*;
    use crate::cpu::{CpuKernel, LaunchOptions};

    pub struct CpuBackend {
        pub threads: usize,
    }

    impl Backend for CpuBackend {
        fn device(&self) -> Device {
            Device::Cpu
        }

        fn description(&self) -> String {
            format!("CPU backend (LLVM JIT, {} threads)", self.threads)
        }

        fn default_target(&self) -> Target {
            Target::Cpu
        }

        fn check_target(&self, target: Target) -> Result<(), String> {
            if target == Target::Cpu {
                Ok(())
            } else {
                Err(format!(
                    "the CPU backend runs `cpu` code, not {target} (use --target cpu, or --device interp to interpret \
                     the {target} Tile IR)"
                ))
            }
        }

        fn needs_code(&self) -> bool {
            false
        }

        fn load(&self, plan: &Plan) -> Result<Box<dyn Loaded>, LaunchError> {
            let kernel = CpuKernel::new(&plan.tile).map_err(|e| {
                LaunchError::new(
                    ErrorKind::Compile,
                    format!("cannot compile `{}` for the CPU backend: {}", plan.kernel, e.message),
                )
            })?;
            Ok(Box::new(CpuLoaded { kernel, threads: self.threads, inputs: None }))
        }
    }

    struct CpuLoaded {
        kernel: CpuKernel,
        threads: usize,
        inputs: Option<Vec<Arg>>,
    }

    fn fault(e: crate::cpu::CpuError) -> LaunchError {
        LaunchError::new(ErrorKind::Fault, e.message)
    }

    impl Loaded for CpuLoaded {
        fn run(&mut self, args: &mut [Arg]) -> Result<(), LaunchError> {
            self.inputs = Some(args.to_vec());
            let options = LaunchOptions { threads: self.threads, warmup: 0, repeats: 1 };
            self.kernel.launch_with(args, &options).map_err(fault)?;
            Ok(())
        }

        fn time(&mut self, warmup: u32, repeat: u32) -> Result<Vec<Duration>, LaunchError> {
            let Some(inputs) = &self.inputs else {
                return Err(LaunchError::new(ErrorKind::Fault, "internal error: timed before a first run"));
            };
            let mut args = inputs.clone();
            let options = LaunchOptions { threads: self.threads, warmup: warmup as usize, repeats: repeat as usize };
            let run = self.kernel.launch_with(&mut args, &options).map_err(fault)?;
            Ok(run.times_ms.iter().map(|ms| Duration::from_secs_f64(ms / 1e3)).collect())
        }
    }
}

/// The NVIDIA backend adapter (the only code that knows `tessera_backends::cuda`).
fn open_gpu() -> Result<Arc<dyn Backend>, String> {
    #[cfg(feature = "cuda")]
    {
        gpu_device::open().map(|b| Arc::new(b) as Arc<dyn Backend>)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this build has no NVIDIA backend (the `cuda` feature is off)".into())
    }
}

#[cfg(feature = "cuda")]
mod gpu_device {
    use super::*;
    use crate::cuda::{GpuDevice, GpuError, GpuKernel, Resident};

    pub struct GpuBackend {
        device: Arc<GpuDevice>,
        target: Target,
    }

    /// The first GPU, or why there is none (`GpuError::NoGpu`'s message).
    pub fn open() -> Result<GpuBackend, String> {
        let device = GpuDevice::open().map_err(|e| e.to_string())?;
        let target = device.target().map_err(|e| e.to_string())?;
        Ok(GpuBackend { device: Arc::new(device), target })
    }

    fn error(kernel: &str, e: GpuError) -> LaunchError {
        let (kind, what) = match &e {
            GpuError::NoGpu(_) => (ErrorKind::Unavailable, "no GPU"),
            GpuError::Load(_) => (ErrorKind::Compile, "the PTX does not load"),
            GpuError::Args(_) => (ErrorKind::Input, "bad arguments"),
            GpuError::Resources(_) => (ErrorKind::Resources, "the launch does not fit the GPU"),
            GpuError::OutOfMemory(_) => (ErrorKind::Resources, "out of GPU memory"),
            GpuError::Fault(_) => (ErrorKind::Fault, "the kernel faulted"),
            GpuError::Driver(_) => (ErrorKind::Fault, "a CUDA driver call failed"),
        };
        LaunchError::new(kind, format!("`{kernel}` on the GPU: {what}: {e}"))
    }

    impl Backend for GpuBackend {
        fn device(&self) -> Device {
            Device::Gpu
        }

        fn description(&self) -> String {
            let (major, minor) = self.device.compute_capability();
            format!("{} (compute capability {major}.{minor})", self.device.name())
        }

        fn default_target(&self) -> Target {
            self.target
        }

        fn check_target(&self, target: Target) -> Result<(), String> {
            let (major, minor) = self.device.compute_capability();
            match target {
                Target::Cpu => {
                    Err("a GPU runs sm_80 or sm_90 code, not `cpu` (use --device cpu, or --device interp)".into())
                }
                Target::Sm90 if major < 9 => Err(format!(
                    "sm_90 code needs compute capability 9.0; {} is {major}.{minor} (use --target sm_80)",
                    self.device.name()
                )),
                _ => Ok(()),
            }
        }

        fn needs_code(&self) -> bool {
            true
        }

        fn load(&self, plan: &Plan) -> Result<Box<dyn Loaded>, LaunchError> {
            let Some(code) = &plan.code else {
                return Err(LaunchError::new(ErrorKind::Compile, "internal error: the plan has no PTX"));
            };
            let kernel = self.device.load(code).map_err(|e| error(&plan.kernel, e))?;
            Ok(Box::new(GpuLoaded { device: self.device.clone(), kernel, resident: None, name: plan.kernel.clone() }))
        }
    }

    struct GpuLoaded {
        device: Arc<GpuDevice>,
        kernel: GpuKernel,
        resident: Option<Resident>,
        name: String,
    }

    impl Loaded for GpuLoaded {
        fn run(&mut self, args: &mut [Arg]) -> Result<(), LaunchError> {
            self.resident = None;
            let mut resident = self.device.upload(&self.kernel, args).map_err(|e| error(&self.name, e))?;
            self.device.run_resident(&self.kernel, &mut resident).map_err(|e| error(&self.name, e))?;
            self.device.download(&resident, args).map_err(|e| error(&self.name, e))?;
            self.resident = Some(resident);
            Ok(())
        }

        fn time(&mut self, warmup: u32, repeat: u32) -> Result<Vec<Duration>, LaunchError> {
            let Some(resident) = &mut self.resident else {
                return Err(LaunchError::new(ErrorKind::Fault, "internal error: timed before a first run"));
            };
            let times = self
                .device
                .time_resident(&self.kernel, resident, warmup as usize, repeat as usize)
                .map_err(|e| error(&self.name, e))?;
            Ok(times.iter().map(|ms| Duration::from_secs_f64(ms / 1e3)).collect())
        }

        fn registers(&self) -> Option<u32> {
            Some(self.kernel.registers)
        }
    }
}

/// The reference interpreter as a device.
pub struct Interpreter;

impl Backend for Interpreter {
    fn device(&self) -> Device {
        Device::Interpreter
    }

    fn description(&self) -> String {
        format!("reference interpreter ({} threads)", rayon::current_num_threads())
    }

    /// sm_90: interpreting the GPU lowering checks it (hazards included) against the
    /// CPU lowering the reference runs.
    fn default_target(&self) -> Target {
        Target::Sm90
    }

    fn check_target(&self, _: Target) -> Result<(), String> {
        Ok(())
    }

    fn needs_code(&self) -> bool {
        false
    }

    fn load(&self, plan: &Plan) -> Result<Box<dyn Loaded>, LaunchError> {
        // A launch the interpreter would take hours over is refused, not started.
        let cost = interp_cost(plan);
        if cost > INTERP_WORK_LIMIT {
            return Err(LaunchError::new(
                ErrorKind::Resources,
                format!(
                    "the interpreter would execute about {:.1e} operations, beyond its budget of {:.1e} (hours of \
                     interpretation): choose smaller --dims, or --device cpu",
                    cost as f64, INTERP_WORK_LIMIT as f64
                ),
            ));
        }
        // Compiles the program once here so that errors surface at load time.
        interp::Kernel::new(&plan.tile).map_err(LaunchError::interp)?;
        Ok(Box::new(InterpLoaded { func: plan.tile.clone(), last: None }))
    }
}

struct InterpLoaded {
    func: Arc<Func>,
    last: Option<Vec<Arg>>,
}

impl Loaded for InterpLoaded {
    fn run(&mut self, args: &mut [Arg]) -> Result<(), LaunchError> {
        let kernel = interp::Kernel::new(&self.func).map_err(LaunchError::interp)?;
        let inputs = args.to_vec();
        kernel.run(args, &interp::Options::default()).map_err(LaunchError::interp)?;
        self.last = Some(inputs);
        Ok(())
    }

    fn time(&mut self, warmup: u32, repeat: u32) -> Result<Vec<Duration>, LaunchError> {
        let kernel = interp::Kernel::new(&self.func).map_err(LaunchError::interp)?;
        let Some(last) = &self.last else {
            return Err(LaunchError::new(ErrorKind::Fault, "internal error: timed before a first run"));
        };
        let mut args = last.clone();
        let mut times = Vec::new();
        for i in 0..warmup + repeat {
            let stats = kernel.run(&mut args, &interp::Options::default()).map_err(LaunchError::interp)?;
            if i >= warmup {
                times.push(stats.elapsed);
            }
        }
        Ok(times)
    }
}

// ----- what a kernel needs -----------------------------------------------------------

/// A scalar parameter of a kernel and the value its signature gives it.
#[derive(Clone, PartialEq, Debug)]
pub struct ScalarParam {
    pub name: String,
    /// The declared default (`eps: f32 = 1e-5`, `causal: bool = True`).
    pub default: Option<f64>,
}

/// What running a function needs, from its signature.
#[derive(Clone, PartialEq, Debug)]
pub struct KernelInfo {
    pub name: String,
    /// Every dim symbol of the signature, in order of appearance.
    pub symbols: Vec<String>,
    pub scalars: Vec<ScalarParam>,
    /// The schedule before any search: the fixed one, or the space's first configuration.
    pub base_schedule: ScheduleValue,
    pub schedule: tessera_frontend::check::KernelSchedule,
    /// Schedule keys the body reads through `ctx` (canonical names).
    pub reads: Vec<String>,
}

impl KernelInfo {
    /// The keys of `schedule` that matter to this kernel (read through `ctx`, consumed by
    /// the compiler, or searched), in the order people write them: BM, BN, BK, BD, the
    /// kernel's own keys, warps, stages, vector, swizzle.
    pub fn shown_keys(&self, schedule: &ScheduleValue) -> Vec<(String, tessera_frontend::check::KeyValue)> {
        use tessera_frontend::check::schedule::{canonical_key, consumed_by_compiler};
        let searched = |k: &str| self.schedule.space.iter().any(|s| canonical_key(&s.key) == k);
        let rank = |k: &str| match k {
            "BM" => 0,
            "BN" => 1,
            "BK" => 2,
            "BD" => 3,
            "warps" => 5,
            "stages" => 6,
            "vector" => 7,
            "swizzle" => 8,
            _ => 4,
        };
        let mut out: Vec<(String, tessera_frontend::check::KeyValue)> = schedule
            .values
            .iter()
            .filter(|(k, _)| self.reads.contains(k) || consumed_by_compiler(k) || searched(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.sort_by_key(|(k, _)| rank(k));
        out
    }
}

/// What a function needs to run, or why it cannot run.
pub fn kernel_info(db: &dyn Db, key: FnKey<'_>) -> Result<KernelInfo, LaunchError> {
    let name = key.name(db).to_string();
    let signature = fn_signature(db, key);
    match signature.kind {
        FunctionKind::Kernel => {}
        FunctionKind::Graph => {
            return Err(LaunchError::new(
                ErrorKind::NotRunnable,
                format!(
                    "`{name}` is a graph function (@jit): running graph functions (their fused kernels in \
                     sequence) is not supported yet; `tessera run` launches @kernel functions"
                ),
            ))
        }
        FunctionKind::Helper => {
            return Err(LaunchError::new(
                ErrorKind::NotRunnable,
                format!(
                    "`{name}` is a helper (no decorator): it is inlined into the kernels that call it and cannot be \
                     launched on its own"
                ),
            ))
        }
    }
    let decorators = fn_decorators(db, key);
    let schedule = decorators.schedule.clone().unwrap_or_default();
    let base_schedule = match &decorators.schedule {
        Some(s) => s.first_configuration(),
        None => ScheduleValue::default_for_kernel(),
    };
    let inference = infer_function(db, key);
    let ast = function_def(db, key).clone();
    let mut scalars = Vec::new();
    for (i, p) in signature.params.iter().enumerate() {
        if !matches!(p.ty, Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_) | Ty::Bool(_)) {
            continue;
        }
        let default = ast.as_ref().and_then(|a| a.params.get(i)).and_then(|ap| ap.default).and_then(|e| {
            literal(inference.type_of(e)).or_else(|| ast.as_ref().and_then(|a| ast_literal(&a.arena.exprs, e.0)))
        });
        scalars.push(ScalarParam { name: p.name.clone(), default });
    }
    let reads = inference.ctx_reads.clone();
    Ok(KernelInfo { name, symbols: signature.symbols.clone(), scalars, base_schedule, schedule, reads })
}

fn literal(ty: &Ty) -> Option<f64> {
    match ty {
        Ty::Float(Some(v)) => Some(v.get()),
        Ty::Int(Some(d)) => d.as_const().map(|v| v as f64),
        Ty::Bool(Some(b)) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

fn ast_literal(exprs: &[Expr], id: u32) -> Option<f64> {
    match exprs.get(id as usize)? {
        Expr::Int(v) => Some(*v as f64),
        Expr::Float(v) => Some(v.get()),
        Expr::Bool(b) => Some(f64::from(u8::from(*b))),
        Expr::Paren(inner) => ast_literal(exprs, inner.0),
        Expr::Unary { op: UnaryOp::Neg, operand } => ast_literal(exprs, operand.0).map(|v| -v),
        Expr::Unary { op: UnaryOp::Pos, operand } => ast_literal(exprs, operand.0),
        _ => None,
    }
}

/// Every shape symbol with its value.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ResolvedDims {
    /// In the signature's order.
    pub values: Vec<(String, i64)>,
    /// Symbols the user gave no value, with the value assumed.
    pub assumed: Vec<(String, i64)>,
}

impl ResolvedDims {
    pub fn map(&self) -> BTreeMap<String, i64> {
        self.values.iter().cloned().collect()
    }
}

/// Gives every shape symbol of the kernel a value: the user's (`given`), else
/// [`DEFAULT_SHAPE`] for symbols that tile dims use (a head dim: the value the kernel is
/// checked with) and [`DEFAULT_SIZE`] for the others. A given symbol the kernel does not
/// have, or a value below 1, is an error naming it.
pub fn resolve_dims(
    db: &dyn Db,
    key: FnKey<'_>,
    info: &KernelInfo,
    given: &[(String, i64)],
) -> Result<ResolvedDims, LaunchError> {
    for (sym, value) in given {
        if !info.symbols.contains(sym) {
            let canonical = tessera_frontend::check::schedule::canonical_key(sym);
            if info.schedule.has_key(sym) && canonical == sym.as_str() {
                return Err(LaunchError::input(format!(
                    "--dims {sym}={value}: {sym} is a schedule key, not a shape symbol; use --schedule {sym}={value}"
                )));
            }
            return Err(LaunchError::input(format!(
                "--dims {sym}={value}: `{}` has no shape symbol {sym} (its shape symbols are {})",
                info.name,
                if info.symbols.is_empty() { "none".to_string() } else { info.symbols.join(", ") }
            )));
        }
        if *value < 1 {
            return Err(LaunchError::input(format!("--dims {sym}={value}: a dim must be at least 1")));
        }
    }
    let graph = graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&info.name, "Graph IR", None, &e))?;
    let tile_symbols = sched::tile_shape_symbols(&graph, &info.base_schedule);
    let mut out = ResolvedDims { values: Vec::new(), assumed: Vec::new() };
    for sym in &info.symbols {
        let value = match given.iter().rev().find(|(s, _)| s == sym) {
            Some((_, v)) => *v,
            None => {
                let v = if tile_symbols.contains(sym) { DEFAULT_SHAPE } else { DEFAULT_SIZE };
                out.assumed.push((sym.clone(), v));
                v
            }
        };
        out.values.push((sym.clone(), value));
    }
    Ok(out)
}

/// The configuration of `schedule` at these dims: the shape symbols its tiles use take
/// their launch values.
pub fn config_for(
    db: &dyn Db,
    key: FnKey<'_>,
    schedule: ScheduleValue,
    dims: &BTreeMap<String, i64>,
) -> Result<Config, LaunchError> {
    let name = key.name(db).to_string();
    let graph = graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&name, "Graph IR", None, &e))?;
    let mut shapes = BTreeMap::new();
    for sym in sched::tile_shape_symbols(&graph, &schedule) {
        let v = dims.get(&sym).copied().unwrap_or(DEFAULT_SHAPE);
        shapes.insert(sym, v);
    }
    Ok(Config { schedule, shapes })
}

// ----- plans -------------------------------------------------------------------------

/// Where a scalar argument's value came from.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ScalarSource {
    /// `--arg name=value`.
    Given,
    /// The signature's default.
    Default,
    /// A shape symbol bound by an `int` parameter.
    Dim,
    /// Seeded like the tensors (no default in the signature).
    Seeded,
}

impl ScalarSource {
    pub fn name(self) -> &'static str {
        match self {
            ScalarSource::Given => "given",
            ScalarSource::Default => "default",
            ScalarSource::Dim => "dim",
            ScalarSource::Seeded => "seeded",
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct ScalarValue {
    pub name: String,
    pub value: f64,
    /// `f32`, `bool`, `index`...
    pub ty: String,
    pub source: ScalarSource,
}

/// What to lower and bind.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    pub target: Target,
    pub config: Config,
    /// Every shape symbol's value ([`resolve_dims`]).
    pub dims: BTreeMap<String, i64>,
    /// `--arg NAME=VALUE` pairs, parsed against the parameter's type.
    pub args: Vec<(String, String)>,
    pub seed: u64,
    /// Generate target code (the device compiles it).
    pub code: bool,
    /// The host memory the arguments may take (`--max-memory`); `None`: what is
    /// available.
    pub max_memory: Option<u64>,
}

/// A kernel lowered, bound and given arguments: everything a device needs, owned (no
/// database), so it can move to a worker thread.
#[derive(Clone, Debug)]
pub struct Plan {
    pub kernel: String,
    pub target: Target,
    pub config: Config,
    /// The device's Tile IR.
    pub tile: Arc<Func>,
    pub code: Option<Arc<TargetCode>>,
    /// The CPU Tile IR the same-schedule interpreter check (`--check lowering`) runs (the
    /// same `Arc` when the target is the CPU).
    pub reference: Arc<Func>,
    /// The kernel's Graph IR: the f64 reference ([`crate::semantics`]) interprets it.
    pub graph: Arc<Func>,
    /// `@verify.numerics(...)`: what every run checks in the outputs.
    pub numerics: Option<NumericsCheck>,
    pub abi: KernelAbi,
    pub access: Vec<Access>,
    pub dims: BTreeMap<String, i64>,
    pub grid: [u64; 3],
    /// Threads per tile program (GPU targets; 1 on the CPU).
    pub threads: u32,
    /// The arguments before any launch.
    pub inputs: Vec<Arg>,
    pub scalars: Vec<ScalarValue>,
    /// Estimated registers per thread and shared memory per program (GPU targets).
    pub registers_estimate: Option<u32>,
    pub smem_bytes: Option<u64>,
    pub seed: u64,
}

impl Plan {
    /// The tensors in parameter order, with their names.
    pub fn tensors<'a>(&self, args: &'a [Arg]) -> Vec<(&str, &'a HostTensor)> {
        self.abi
            .params
            .iter()
            .zip(args)
            .filter_map(|(p, a)| match a {
                Arg::Tensor(t) => Some((p.name(), t)),
                _ => None,
            })
            .collect()
    }

    /// `@verify.numerics(allow_nonfinite=True)`: NaN/Inf outputs that the reference also
    /// produces are accepted.
    pub fn allows_nonfinite(&self) -> bool {
        self.numerics.as_ref().is_some_and(|n| n.allow_nonfinite)
    }

    /// Whether parameter `i` is an output (the kernel writes it).
    pub fn is_output(&self, i: usize) -> bool {
        self.access.get(i).is_some_and(|a| a.written)
    }
}

/// Lowers the kernel for `req.target` (and the CPU Tile IR of the reference), binds the
/// dims, and prepares the arguments: tensors seeded by `req.seed` (outputs zero), scalars
/// from `--arg`, else the signature's default, else seeded.
pub fn plan(db: &dyn Db, key: FnKey<'_>, info: &KernelInfo, req: &PlanRequest) -> Result<Plan, LaunchError> {
    let name = info.name.clone();
    // Shape symbols a tile dim uses are compiled into the code; running it with another
    // value would read and write the wrong elements without any error.
    for (sym, &compiled) in &req.config.shapes {
        if let Some(&given) = req.dims.get(sym) {
            if given != compiled {
                return Err(LaunchError::input(format!(
                    "`{name}` was compiled for {sym} = {compiled} (a tile dimension uses it), but the run has \
                     {sym} = {given}; lower it for {sym} = {given}"
                )));
            }
        }
    }
    let tile = tile_ir(db, key, req.config.clone(), req.target)
        .clone()
        .map_err(|e| LaunchError::lowering(&name, "Tile IR", Some(req.target), &e))?;
    let reference = if req.target == Target::Cpu {
        tile.clone()
    } else {
        tile_ir(db, key, req.config.clone(), Target::Cpu)
            .clone()
            .map_err(|e| LaunchError::lowering(&name, "Tile IR (the reference)", Some(Target::Cpu), &e))?
    };
    let graph =
        graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&name, "Graph IR (the reference)", None, &e))?;
    let code = if req.code {
        Some(
            target_code(db, key, req.config.clone(), req.target)
                .clone()
                .map_err(|e| LaunchError::lowering(&name, "target code", Some(req.target), &e))?,
        )
    } else {
        None
    };
    let abi = KernelAbi::of(&tile).map_err(|e| LaunchError::new(ErrorKind::Compile, e))?;
    let access = param_access(&tile);
    // The `--arg` values first: a mistake there should not wait for the inputs.
    let mut given: Vec<(String, f64)> = Vec::new();
    for (name, text) in &req.args {
        let Some(i) = abi.params.iter().position(|p| p.name() == name) else {
            let names: Vec<&str> =
                abi.params.iter().filter(|p| !matches!(p, AbiParam::Tensor { .. })).map(|p| p.name()).collect();
            return Err(LaunchError::input(format!(
                "--arg {name}={text}: `{}` has no scalar parameter `{name}` ({})",
                info.name,
                if names.is_empty() {
                    "it takes no scalars".to_string()
                } else {
                    format!("its scalar parameters: {}", names.join(", "))
                }
            )));
        };
        let value = parse_scalar(&abi.params[i], text)
            .map_err(|why| LaunchError::input(format!("--arg {name}={text}: {why}")))?;
        if let Some(&dim) = req.dims.get(name) {
            if dim as f64 != value {
                return Err(LaunchError::input(format!(
                    "--arg {name}={text}: `{name}` is also the shape symbol {name} = {dim}; give it once, with --dims"
                )));
            }
        }
        given.push((name.clone(), value));
    }
    let shapes = inputs::tensor_shapes(&abi, &req.dims).map_err(LaunchError::input)?;
    let tensor_shapes: Vec<Vec<i64>> = shapes.iter().flatten().map(|d| d.iter().map(|&x| x as i64).collect()).collect();
    let binding = abi.bind(&tensor_shapes).map_err(LaunchError::input)?;
    check_memory(&abi, &shapes, req.max_memory)?;
    let mut args = inputs::seeded_for(&abi, &access, &req.dims, req.seed).map_err(LaunchError::input)?;
    let mut scalars = Vec::new();
    for (i, p) in abi.params.iter().enumerate() {
        let ty = match p {
            AbiParam::Tensor { .. } => continue,
            AbiParam::Scalar { dtype, .. } => dtype.to_string(),
            AbiParam::Index { .. } => "index".to_string(),
        };
        let pname = p.name().to_string();
        let (value, source) = if let Some((_, v)) = given.iter().find(|(n, _)| *n == pname) {
            (*v, ScalarSource::Given)
        } else if let Some(v) = req.dims.get(&pname) {
            (*v as f64, ScalarSource::Dim)
        } else if let Some(v) = info.scalars.iter().find(|s| s.name == pname).and_then(|s| s.default) {
            (v, ScalarSource::Default)
        } else {
            (arg_value(&args[i]), ScalarSource::Seeded)
        };
        scalars.push(ScalarValue { name: pname, value, ty, source });
    }
    // Report the values the kernel receives (rounded to the parameters' dtypes).
    for s in scalars.iter_mut() {
        inputs::set_scalar(&abi, &mut args, &s.name, s.value).map_err(LaunchError::input)?;
        if let Some(i) = abi.params.iter().position(|p| p.name() == s.name) {
            s.value = arg_value(&args[i]);
        }
    }
    let (registers_estimate, smem_bytes) = if req.target.is_gpu() {
        match tessera_passes::analysis::kernel_resources(db, key, req.config.clone(), req.target) {
            Ok(r) => (Some(r.registers.peak), Some(r.smem_bytes)),
            Err(_) => (None, None),
        }
    } else {
        (None, None)
    };
    Ok(Plan {
        kernel: name,
        target: req.target,
        config: req.config.clone(),
        threads: abi.threads,
        tile,
        code,
        reference,
        graph,
        numerics: fn_signature(db, key).numerics.clone(),
        abi,
        access,
        dims: req.dims.clone(),
        grid: binding.grid,
        inputs: args,
        scalars,
        registers_estimate,
        smem_bytes,
        seed: req.seed,
    })
}

fn arg_value(a: &Arg) -> f64 {
    match a {
        Arg::Scalar(_, v) => *v,
        Arg::Index(v) => *v as f64,
        Arg::Tensor(_) => f64::NAN,
    }
}

/// Parses `--arg` text for a parameter: `true`/`false` (or 1/0) for bools, integers for
/// integer and index parameters, numbers (`inf`, `-inf`, `nan` too) for floats.
fn parse_scalar(p: &AbiParam, text: &str) -> Result<f64, String> {
    let t = text.trim();
    match p {
        AbiParam::Tensor { name, .. } => Err(format!("`{name}` is a tensor; --arg sets scalar parameters")),
        AbiParam::Scalar { dtype: DType::Bool, name } => match t {
            "true" | "True" | "1" => Ok(1.0),
            "false" | "False" | "0" => Ok(0.0),
            _ => Err(format!("`{t}` is not a bool (`{name}` is bool: true or false)")),
        },
        AbiParam::Scalar { dtype, name } if dtype.is_int() => {
            t.parse::<i64>().map(|v| v as f64).map_err(|_| format!("`{t}` is not an integer (`{name}` is {dtype})"))
        }
        AbiParam::Index { name } => {
            t.parse::<i64>().map(|v| v as f64).map_err(|_| format!("`{t}` is not an integer (`{name}` is an int)"))
        }
        AbiParam::Scalar { dtype, name } => {
            let v: f64 = t.parse().map_err(|_| format!("`{t}` is not a number (`{name}` is {dtype})"))?;
            let r = round_to(*dtype, v);
            if v.is_finite() && !r.is_finite() {
                return Err(format!("{t} overflows {dtype} (`{name}`)"));
            }
            Ok(v)
        }
    }
}

/// Refuses problems whose arguments would not fit in memory (inputs, the device's copy
/// and the reference's copy), with the numbers. The budget is `max_memory` when given
/// (`--max-memory`), else the memory available.
fn check_memory(abi: &KernelAbi, shapes: &[Option<Vec<usize>>], max_memory: Option<u64>) -> Result<(), LaunchError> {
    let mut bytes: u128 = 0;
    for (p, s) in abi.params.iter().zip(shapes) {
        if let (AbiParam::Tensor { dtype, .. }, Some(dims)) = (p, s) {
            let n: u128 = dims.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128));
            bytes = bytes.saturating_add(n.saturating_mul(crate::tensor::elem_bytes(*dtype) as u128));
        }
    }
    // The interpreter holds each tensor as f64 atomics (8 bytes per element) besides the
    // host copies; count a generous 4 copies of 8 bytes per element.
    let elements: u128 = abi
        .params
        .iter()
        .zip(shapes)
        .filter_map(|(_, s)| s.as_ref().map(|d| d.iter().fold(1u128, |n, &x| n.saturating_mul(x as u128))))
        .fold(0u128, u128::saturating_add);
    let need = bytes.saturating_mul(3).saturating_add(elements.saturating_mul(8));
    let (budget, what) = match max_memory {
        Some(m) => (Some(m), "the --max-memory budget"),
        None => (available_memory(), "available (--max-memory sets another budget)"),
    };
    if let Some(avail) = budget {
        if need > avail as u128 {
            return Err(LaunchError::new(
                ErrorKind::Resources,
                format!(
                    "the arguments need about {} of host memory (tensors of {} in three copies, plus the \
                     interpreter's), and {} is {what}: choose smaller --dims",
                    human_bytes(need as f64),
                    human_bytes(bytes as f64),
                    human_bytes(avail as f64)
                ),
            ));
        }
    }
    Ok(())
}

fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

// ----- running -----------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub warmup: u32,
    pub repeat: u32,
    /// Stop timing once the timed launches pass this (at least one is timed).
    pub budget: Option<Duration>,
    pub check: CheckMode,
}

impl RunOptions {
    pub fn for_device(device: Device) -> RunOptions {
        RunOptions {
            warmup: device.default_warmup(),
            repeat: device.default_repeat(),
            budget: None,
            check: CheckMode::Auto,
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Timing {
    /// Each timed launch, in milliseconds.
    pub times_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub warmup: u32,
}

impl Timing {
    pub fn of(times: &[Duration], warmup: u32) -> Timing {
        let times_ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        let mut sorted = times_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let median_ms = match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Timing { min_ms: sorted.first().copied().unwrap_or(f64::NAN), median_ms, times_ms, warmup }
    }
}

/// What a launch does, for throughput.
#[derive(Clone, PartialEq, Debug)]
pub struct Work {
    /// FLOPs of the `tile.dot`s executed ([`count_dot_flops`]); `None` without dots.
    pub flops: Option<u64>,
    /// Why the FLOPs could not be counted, when the kernel has dots but no count.
    pub flops_unknown: Option<String>,
    /// Bytes of every tensor read once plus every tensor written once.
    pub bytes: u64,
}

impl Work {
    /// TFLOP/s at `ms` for kernels with dots.
    pub fn tflops(&self, ms: f64) -> Option<f64> {
        self.flops.filter(|_| ms > 0.0).map(|f| f as f64 / (ms * 1e-3) / 1e12)
    }

    /// GB/s at `ms` for kernels without dots.
    pub fn gbps(&self, ms: f64) -> Option<f64> {
        (self.flops.is_none() && self.flops_unknown.is_none() && ms > 0.0)
            .then(|| self.bytes as f64 / (ms * 1e-3) / 1e9)
    }
}

/// Everything one run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub device: Device,
    pub device_name: String,
    pub check: CheckReport,
    pub timing: Timing,
    pub work: Work,
    /// Registers per thread the device's compiler allocated (GPU).
    pub registers: Option<u32>,
    /// The arguments after the correctness launch (outputs included).
    pub outputs: Vec<Arg>,
    /// NaN/Inf in each output the device wrote, whether or not it was checked.
    pub nonfinite: Vec<NonFiniteCount>,
    /// What the outputs break of the kernel's `@verify.numerics(...)`.
    pub numerics: Vec<NumericsViolation>,
}

/// Launches the plan once, checks it, and times it (see the module doc).
pub fn execute(plan: &Plan, backend: &dyn Backend, options: &RunOptions) -> Result<Outcome, LaunchError> {
    let mut loaded = backend.load(plan)?;
    execute_loaded(plan, backend, loaded.as_mut(), options, None)
}

/// [`execute`] with a kernel already loaded, and optionally the reference's outputs of an
/// earlier check of the same inputs (autotune checks every configuration against one).
pub fn execute_loaded(
    plan: &Plan,
    backend: &dyn Backend,
    loaded: &mut dyn Loaded,
    options: &RunOptions,
    reference: Option<&Reference>,
) -> Result<Outcome, LaunchError> {
    let mut outputs = plan.inputs.clone();
    loaded.run(&mut outputs)?;
    let timing = time_launches(loaded, options)?;
    let check = match reference {
        Some(r) => r.compare(plan, &outputs),
        None => Reference::compute(plan, options.check)?.compare(plan, &outputs),
    };
    let nonfinite = scan_nonfinite(plan, &outputs);
    let numerics = match &plan.numerics {
        Some(spec) => {
            let written: Vec<(String, &HostTensor)> = plan
                .abi
                .params
                .iter()
                .zip(&outputs)
                .enumerate()
                .filter_map(|(i, (p, a))| match a {
                    Arg::Tensor(t) if plan.is_output(i) => Some((p.name().to_string(), t)),
                    _ => None,
                })
                .collect();
            numerics_violations(spec, &written)
        }
        None => Vec::new(),
    };
    Ok(Outcome {
        device: backend.device(),
        device_name: backend.description(),
        check,
        timing,
        work: work(plan),
        registers: loaded.registers(),
        outputs,
        nonfinite,
        numerics,
    })
}

fn time_launches(loaded: &mut dyn Loaded, options: &RunOptions) -> Result<Timing, LaunchError> {
    let repeat = options.repeat.max(1);
    let times = match options.budget {
        None => loaded.time(options.warmup, repeat)?,
        Some(budget) => {
            let mut times = loaded.time(options.warmup, 1)?;
            let first = times.first().copied().unwrap_or_default().max(Duration::from_micros(1));
            let more = (budget.as_secs_f64() / first.as_secs_f64()).floor() as u64;
            let more = more.min(repeat as u64 - 1) as u32;
            if more > 0 {
                times.extend(loaded.time(0, more)?);
            }
            times
        }
    };
    Ok(Timing::of(&times, options.warmup))
}

/// The work model of a plan (see the module doc).
pub fn work(plan: &Plan) -> Work {
    let bytes: u64 = plan
        .abi
        .params
        .iter()
        .enumerate()
        .zip(&plan.inputs)
        .filter_map(|((i, _), a)| match a {
            Arg::Tensor(t) => {
                let acc = plan.access.get(i).copied().unwrap_or_default();
                let times = u64::from(acc.read) + u64::from(acc.written);
                Some(t.numel() as u64 * t.dtype.bits() as u64 / 8 * times)
            }
            _ => None,
        })
        .sum();
    match count_dot_flops(&plan.tile, &plan.abi, &plan.inputs, plan.grid) {
        Ok(flops) => Work { flops, flops_unknown: None, bytes },
        Err(why) => Work { flops: None, flops_unknown: Some(why), bytes },
    }
}

// ----- counting FLOPs ----------------------------------------------------------------

/// FLOPs of the `tile.dot`s a launch executes: 2·m·n·k per dot (its tile shape) times the
/// trip counts of the loops around it, over every program of the grid. Loop bounds and
/// branch conditions are evaluated from the IR's index arithmetic, the tensors' dims and
/// the scalar arguments; loops whose bounds depend on the program (or an outer loop) are
/// walked. `Ok(None)`: the kernel has no dot. `Err`: a bound depends on data.
pub fn count_dot_flops(func: &Func, abi: &KernelAbi, args: &[Arg], grid: [u64; 3]) -> Result<Option<u64>, String> {
    let mut with_dot: HashSet<OpId> = HashSet::new();
    fn mark(f: &Func, region: &Region, out: &mut HashSet<OpId>) -> bool {
        let mut any = false;
        for &id in &region.ops {
            let op = f.op(id);
            let mut inner = op.kind == OpKind::Dot;
            for r in &op.regions {
                inner |= mark(f, r, out);
            }
            if inner {
                out.insert(id);
                any = true;
            }
        }
        any
    }
    if !mark(func, &func.body, &mut with_dot) {
        return Ok(None);
    }
    let mut known: HashMap<ValueId, f64> = HashMap::new();
    let mut dims: HashMap<ValueId, Vec<i64>> = HashMap::new();
    for ((&v, p), a) in func.params.iter().zip(&abi.params).zip(args) {
        match (p, a) {
            (_, Arg::Tensor(t)) => {
                dims.insert(v, t.dims.iter().map(|&d| d as i64).collect());
            }
            (_, a) => {
                known.insert(v, arg_value(a));
            }
        }
    }
    let counter =
        FlopCounter { f: func, defs: func.definitions(), known, dims, grid, with_dot, budget: std::cell::Cell::new(0) };
    // Most kernels do the same work in every program: count once.
    let mut env = Env { values: HashMap::new(), pid: None };
    let total: u64 = grid.iter().product();
    match counter.region(&func.body, &mut env) {
        Ok(per_program) => return Ok(Some(per_program * total)),
        Err(Unknown::Program) => {}
        Err(Unknown::Data(why)) => return Err(why),
    }
    if total > 1 << 20 {
        return Err(format!("the loop bounds differ between programs, and the grid has {total} programs"));
    }
    let mut sum = 0u64;
    for l in 0..total {
        let pid = [l % grid[0], (l / grid[0]) % grid[1], l / (grid[0] * grid[1])];
        let mut env = Env { values: HashMap::new(), pid: Some(pid) };
        sum += counter.region(&func.body, &mut env).map_err(|e| match e {
            Unknown::Data(why) => why,
            Unknown::Program => "internal error: a bound depends on the program with the program known".into(),
        })?;
    }
    Ok(Some(sum))
}

enum Unknown {
    /// Depends on the program id or a loop index not bound yet: walk them.
    Program,
    /// Depends on loaded data or something the counter cannot evaluate.
    Data(String),
}

struct Env {
    values: HashMap<ValueId, f64>,
    pid: Option<[u64; 3]>,
}

struct FlopCounter<'f> {
    f: &'f Func,
    defs: Vec<Option<OpId>>,
    known: HashMap<ValueId, f64>,
    dims: HashMap<ValueId, Vec<i64>>,
    grid: [u64; 3],
    with_dot: HashSet<OpId>,
    /// Loop iterations walked (bounded).
    budget: std::cell::Cell<u64>,
}

const WALK_LIMIT: u64 = 1 << 24;

impl FlopCounter<'_> {
    fn region(&self, region: &Region, env: &mut Env) -> Result<u64, Unknown> {
        let mut flops = 0u64;
        for &id in &region.ops {
            if !self.with_dot.contains(&id) {
                continue;
            }
            let op = self.f.op(id);
            flops += match op.kind {
                OpKind::Dot => self.dot(op),
                OpKind::For => self.for_loop(op, env)?,
                OpKind::If => {
                    let cond = self.value(op.operands[0], env, 0)?;
                    let branch = if cond != 0.0 { op.regions.first() } else { op.regions.get(1) };
                    match branch {
                        Some(r) => self.region(r, env)?,
                        None => 0,
                    }
                }
                other => {
                    return Err(Unknown::Data(format!("`tile.dot` inside {} (its trip count is data)", other.name())))
                }
            };
        }
        Ok(flops)
    }

    fn dot(&self, op: &Op) -> u64 {
        let a = self.f.ty(op.operands[0]).const_dims().unwrap_or_default();
        let out = op.results.first().and_then(|&r| self.f.ty(r).const_dims()).unwrap_or_default();
        let k = a.last().copied().unwrap_or(0).max(0) as u64;
        let mn: u64 = out.iter().map(|&d| d.max(0) as u64).product();
        2 * mn * k
    }

    fn for_loop(&self, op: &Op, env: &mut Env) -> Result<u64, Unknown> {
        let lo = self.value(op.operands[0], env, 0)? as i64;
        let hi = self.value(op.operands[1], env, 0)? as i64;
        let step = self.value(op.operands[2], env, 0)? as i64;
        if step <= 0 {
            return Err(Unknown::Data(format!("a loop with step {step}")));
        }
        let trips = if hi > lo { ((hi - lo) + step - 1) / step } else { 0 } as u64;
        let Some(body) = op.regions.first() else { return Ok(0) };
        if trips == 0 {
            return Ok(0);
        }
        match self.region(body, env) {
            Ok(per_trip) => return Ok(per_trip * trips),
            Err(Unknown::Program) if env.pid.is_none() => return Err(Unknown::Program),
            Err(Unknown::Program) => {}
            Err(e) => return Err(e),
        }
        // The body depends on the loop index: walk it.
        let Some(&iv) = body.args.first() else { return Err(Unknown::Data("a loop without an index".into())) };
        let mut sum = 0;
        let mut i = lo;
        while i < hi {
            self.budget.set(self.budget.get() + 1);
            if self.budget.get() > WALK_LIMIT {
                return Err(Unknown::Data("too many loop iterations to walk".into()));
            }
            env.values.insert(iv, i as f64);
            let r = self.region(body, env);
            env.values.remove(&iv);
            sum += r.map_err(|e| match e {
                Unknown::Program => Unknown::Data("a loop bound depends on values the counter cannot follow".into()),
                d => d,
            })?;
            i += step;
        }
        Ok(sum)
    }

    fn value(&self, v: ValueId, env: &Env, depth: u32) -> Result<f64, Unknown> {
        if let Some(x) = env.values.get(&v).or_else(|| self.known.get(&v)) {
            return Ok(*x);
        }
        if depth > 256 {
            return Err(Unknown::Data("index arithmetic nested too deeply".into()));
        }
        let Some(def) = self.defs.get(v.0 as usize).copied().flatten() else {
            // A region argument not bound yet: a loop index (or a loop-carried value).
            return Err(Unknown::Program);
        };
        let op = self.f.op(def);
        let arg = |i: usize| -> Result<f64, Unknown> {
            let id = *op.operands.get(i).ok_or_else(|| Unknown::Data(format!("{} lacks operands", op.kind.name())))?;
            self.value(id, env, depth + 1)
        };
        if matches!(self.f.ty(v), Type::Tile(_) | Type::View(_) | Type::Smem(_) | Type::Tensor(_)) {
            return Err(Unknown::Data(format!("a loop bound computed by {} on tiles", op.kind.name())));
        }
        let int = matches!(self.f.ty(v), Type::Index) || matches!(self.f.ty(v), Type::Scalar(d) if d.is_int());
        Ok(match op.kind {
            OpKind::Constant => match op.attr("value") {
                Some(Attr::Bool(b)) => f64::from(u8::from(*b)),
                Some(a) => a.as_float().ok_or_else(|| Unknown::Data("a non-numeric constant".into()))?,
                None => return Err(Unknown::Data("a constant without a value".into())),
            },
            OpKind::TensorDim => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                let d = self.dims.get(&op.operands[0]).and_then(|d| d.get(axis));
                *d.ok_or_else(|| Unknown::Data("tile.dim of an unknown tensor".into()))? as f64
            }
            OpKind::ProgramId => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                match env.pid {
                    Some(p) => p[axis.min(2)] as f64,
                    None => return Err(Unknown::Program),
                }
            }
            OpKind::NumPrograms => self.grid[(op.int_attr("axis").unwrap_or(0) as usize).min(2)] as f64,
            OpKind::Add => arg(0)? + arg(1)?,
            OpKind::Sub => arg(0)? - arg(1)?,
            OpKind::Mul => arg(0)? * arg(1)?,
            OpKind::Div if int => {
                let b = arg(1)?;
                if b == 0.0 {
                    return Err(Unknown::Data("a division by zero in index arithmetic".into()));
                }
                (arg(0)? / b).trunc()
            }
            OpKind::Div => arg(0)? / arg(1)?,
            OpKind::FloorDiv => {
                let b = arg(1)?;
                if b == 0.0 {
                    return Err(Unknown::Data("a division by zero in index arithmetic".into()));
                }
                (arg(0)? / b).floor()
            }
            OpKind::Rem => {
                let (a, b) = (arg(0)?, arg(1)?);
                if b == 0.0 {
                    return Err(Unknown::Data("a remainder by zero in index arithmetic".into()));
                }
                a.rem_euclid(b)
            }
            OpKind::Max => arg(0)?.max(arg(1)?),
            OpKind::Min => arg(0)?.min(arg(1)?),
            OpKind::Neg => -arg(0)?,
            OpKind::Not => f64::from(u8::from(arg(0)? == 0.0)),
            OpKind::And => f64::from(u8::from(arg(0)? != 0.0 && arg(1)? != 0.0)),
            OpKind::Or => f64::from(u8::from(arg(0)? != 0.0 || arg(1)? != 0.0)),
            OpKind::Cmp => {
                let (a, b) = (arg(0)?, arg(1)?);
                let r = match op.str_attr("pred").unwrap_or("") {
                    "lt" => a < b,
                    "le" => a <= b,
                    "gt" => a > b,
                    "ge" => a >= b,
                    "eq" => a == b,
                    "ne" => a != b,
                    p => return Err(Unknown::Data(format!("comparison `{p}`"))),
                };
                f64::from(u8::from(r))
            }
            OpKind::Select => {
                if arg(0)? != 0.0 {
                    arg(1)?
                } else {
                    arg(2)?
                }
            }
            OpKind::Cast => {
                let x = arg(0)?;
                match self.f.ty(v) {
                    Type::Scalar(d) => round_to(*d, x),
                    Type::Index => x.trunc(),
                    _ => x,
                }
            }
            other => return Err(Unknown::Data(format!("a loop bound computed by {}", other.name()))),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tessera_frontend::db::item_index;
    use tessera_frontend::{Database, SourceFile};

    pub(crate) fn corpus(name: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid");
        std::fs::read_to_string(root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Plans `kernel` of `text` at `dims` for `target` with its first configuration.
    pub(crate) fn plan_of(
        text: &str,
        kernel: &str,
        dims: &[(&str, i64)],
        target: Target,
        args: &[(&str, &str)],
    ) -> Plan {
        let db = Database::default();
        let file = SourceFile::new(&db, "t.tsr".into(), text.to_string(), None);
        let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
        let info = kernel_info(&db, key).unwrap();
        let given: Vec<(String, i64)> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let resolved = resolve_dims(&db, key, &info, &given).unwrap();
        let config = config_for(&db, key, info.base_schedule.clone(), &resolved.map()).unwrap();
        let req = PlanRequest {
            target,
            config,
            dims: resolved.map(),
            args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            seed: 7,
            code: false,
            max_memory: None,
        };
        plan(&db, key, &info, &req).unwrap()
    }

    #[test]
    fn the_static_flop_count_is_the_interpreters() {
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, i64)], &'a [(&'a str, &'a str)]);
        let cases: &[Case] = &[
            ("gemm.tsr", "gemm", &[("M", 100), ("N", 76), ("K", 90)], &[]),
            ("fp8_gemm.tsr", "fp8_gemm", &[("M", 130), ("N", 64), ("K", 64)], &[]),
            ("linear_gelu.tsr", "linear_gelu", &[("M", 64), ("N", 200), ("K", 40)], &[]),
            ("flash_attention.tsr", "flash_attention", &[("BH", 2), ("S", 100), ("D", 64)], &[("causal", "true")]),
            ("flash_attention.tsr", "flash_attention", &[("BH", 1), ("S", 64), ("D", 64)], &[("causal", "false")]),
            ("schedules.tsr", "small_matmul", &[("M", 70), ("N", 64), ("K", 33)], &[]),
        ];
        for (file, kernel, dims, args) in cases {
            for target in [Target::Cpu, Target::Sm90] {
                let p = plan_of(&corpus(file), kernel, dims, target, args);
                let counted = count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid).unwrap().unwrap();
                let mut a = p.inputs.clone();
                let stats = interp::run_kernel(&p.tile, &mut a).unwrap();
                assert_eq!(counted, stats.dot_flops, "{kernel} {dims:?} {target}");
            }
        }
        let p = plan_of(&corpus("softmax.tsr"), "softmax", &[("R", 3), ("C", 10)], Target::Cpu, &[]);
        assert_eq!(count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid), Ok(None));
    }

    /// A dot inside a loop whose trip count depends on the program (a causal kernel that
    /// skips the masked key blocks) is counted program by program.
    #[test]
    fn program_dependent_loops_are_walked() {
        let text = "from tessera import *\n\n@kernel.schedule(block(32, 32))\ndef tri(A: Tensor[\"N\", \"N\", f16], C: Tensor[\"N\", \"N\", f32]):\n    ctx = tile.context()\n    for m0 in tile.parallel(0, N, ctx.BM):\n        acc = tile.zeros((ctx.BM, ctx.BN), f32)\n        for k0 in tile.range(0, m0 + ctx.BM, ctx.BN):\n            acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BN]), tile.load(A[k0:k0 + ctx.BN, 0:ctx.BN]))\n        C[m0:m0 + ctx.BM, 0:ctx.BN] = acc\n";
        let p = plan_of(text, "tri", &[("N", 96)], Target::Cpu, &[]);
        let counted = count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid).unwrap().unwrap();
        let mut a = p.inputs.clone();
        let stats = interp::run_kernel(&p.tile, &mut a).unwrap();
        // Programs 0, 1, 2 run 1, 2, 3 iterations of a 32x32x32 dot.
        assert_eq!(counted, 6 * 2 * 32 * 32 * 32);
        assert_eq!(counted, stats.dot_flops);
    }

    #[test]
    fn sampled_checks_cover_the_edges_and_catch_wrong_elements() {
        let p = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 300), ("N", 200), ("K", 40)], Target::Cpu, &[]);
        assert_eq!(p.grid, [5, 4, 1]);
        let programs = sample_programs(&p, u64::MAX / 2, 1);
        for corner in [[0, 0, 0], [4, 0, 0], [0, 3, 0], [4, 3, 0]] {
            assert!(programs.contains(&corner), "{corner:?} not in {programs:?}");
        }
        let full = Reference::compute(&p, CheckMode::Full).unwrap();
        let mut device = p.inputs.clone();
        interp::run_kernel(&p.tile, &mut device).unwrap();
        let sampled = Reference::compute(&p, CheckMode::Sampled).unwrap();
        let CheckKind::Sampled { programs: n, total } = sampled.kind else { panic!("{:?}", sampled.kind) };
        assert_eq!(total, 20);
        assert!((8..=20).contains(&n), "{n}");
        assert_eq!(full.compare(&p, &device).passed(), Some(true));
        let ok = sampled.compare(&p, &device);
        assert_eq!(ok.passed(), Some(true));
        assert!(ok.outputs[0].compared < 300 * 200 || n == 20);
        // The last element of C belongs to the corner program (4, 3): always sampled.
        let Arg::Tensor(c) = &mut device[2] else { panic!() };
        let last = c.numel() - 1;
        c.set(last, c.get(last) + 10.0);
        let bad = sampled.compare(&p, &device);
        assert_eq!(bad.passed(), Some(false));
        assert_eq!(bad.outputs[0].first_mismatch.as_ref().unwrap().0, vec![299, 199]);
        assert_eq!(full.compare(&p, &device).outputs[0].comparison.mismatches, 1);
    }

    #[test]
    fn a_subset_run_reports_what_it_stored() {
        let p = plan_of(&corpus("vector_add.tsr"), "vector_add", &[("N", 1000)], Target::Cpu, &[]);
        let kernel = interp::Kernel::new(&p.tile).unwrap();
        let mut args = p.inputs.clone();
        let block = p.config.schedule.int("BLOCK").unwrap() as usize;
        let (stats, masks) = kernel.run_programs(&mut args, &interp::Options::default(), &[[1, 0, 0]]).unwrap();
        assert_eq!(stats.programs, 1);
        let out = masks[2].as_ref().unwrap();
        assert!(masks[0].is_none() && masks[1].is_none());
        let stored: Vec<usize> = (0..out.len()).filter(|&i| out[i]).collect();
        assert_eq!(stored, (block..(2 * block).min(1000)).collect::<Vec<_>>());
        let e = kernel.run_programs(&mut args, &interp::Options::default(), &[[9, 0, 0]]).unwrap_err();
        assert!(e.message.contains("outside the grid"), "{e}");
    }

    #[test]
    fn scalars_take_given_default_or_seeded_values() {
        let p = plan_of(&corpus("layernorm.tsr"), "layernorm", &[("R", 2), ("C", 8)], Target::Cpu, &[]);
        let eps = p.scalars.iter().find(|s| s.name == "eps").unwrap();
        assert_eq!((eps.value, eps.source), (round_to(DType::F32, 1e-5), ScalarSource::Default));
        let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 8)], Target::Cpu, &[("alpha", "2.5")]);
        assert_eq!(p.scalars[0].value, 2.5);
        assert_eq!(p.scalars[0].source, ScalarSource::Given);
        let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 8)], Target::Cpu, &[]);
        assert_eq!(p.scalars[0].source, ScalarSource::Seeded);
        let alpha = AbiParam::Scalar { name: "alpha".into(), dtype: DType::F32 };
        assert_eq!(parse_scalar(&alpha, "abc").unwrap_err(), "`abc` is not a number (`alpha` is f32)");
        assert!(parse_scalar(&alpha, "1e39").unwrap_err().contains("overflows f32"));
        let flag = AbiParam::Scalar { name: "causal".into(), dtype: DType::Bool };
        assert_eq!(parse_scalar(&flag, "False"), Ok(0.0));
        assert!(parse_scalar(&flag, "2").is_err());
    }

    #[test]
    fn work_counts_each_tensor_once_per_direction() {
        let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 1000)], Target::Cpu, &[]);
        let w = work(&p);
        // x read, y read and written: 3 x 1000 f32.
        assert_eq!((w.flops, w.bytes), (None, 12000));
        assert_eq!(w.gbps(1.0), Some(0.012));
        let p = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 128), ("N", 128), ("K", 128)], Target::Cpu, &[]);
        assert_eq!(work(&p).flops, Some(2 * 128 * 128 * 128));
    }

    #[test]
    fn timings_and_indices() {
        let t = Timing::of(&[Duration::from_millis(3), Duration::from_millis(1), Duration::from_millis(2)], 0);
        assert_eq!((t.median_ms, t.min_ms), (2.0, 1.0));
        let t = Timing::of(&[Duration::from_millis(4), Duration::from_millis(2)], 1);
        assert_eq!(t.median_ms, 3.0);
        assert_eq!(unravel(7, &[2, 3, 4]), vec![0, 1, 3]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!("interp".parse::<DeviceRequest>(), Ok(DeviceRequest::Only(Device::Interpreter)));
        assert!("tpu".parse::<DeviceRequest>().unwrap_err().contains("expected cpu, gpu, auto or interp"));
    }

    #[test]
    fn dims_are_resolved_with_defaults_and_checked() {
        let db = Database::default();
        let file = SourceFile::new(&db, "t.tsr".into(), corpus("flash_attention.tsr"), None);
        let key = item_index(&db, file).functions[0].key;
        let info = kernel_info(&db, key).unwrap();
        let r = resolve_dims(&db, key, &info, &[("S".into(), 100)]).unwrap();
        assert_eq!(r.map()["D"], DEFAULT_SHAPE, "a head dim takes the value the kernel is checked with");
        assert_eq!(r.map()["BH"], DEFAULT_SIZE);
        assert_eq!(r.assumed.len(), 2);
        let e = resolve_dims(&db, key, &info, &[("Q".into(), 1)]).unwrap_err();
        assert_eq!(e.message, "--dims Q=1: `flash_attention` has no shape symbol Q (its shape symbols are BH, S, D)");
        let e = resolve_dims(&db, key, &info, &[("BM".into(), 64)]).unwrap_err();
        assert!(e.message.contains("use --schedule BM=64"), "{}", e.message);
        let e = resolve_dims(&db, key, &info, &[("S".into(), 0)]).unwrap_err();
        assert_eq!(e.message, "--dims S=0: a dim must be at least 1");
    }

    #[test]
    fn code_compiled_for_one_head_dim_refuses_another() {
        let db = Database::default();
        let file = SourceFile::new(&db, "t.tsr".into(), corpus("flash_attention.tsr"), None);
        let key = item_index(&db, file).functions[0].key;
        let info = kernel_info(&db, key).unwrap();
        let compiled_for: BTreeMap<String, i64> = [("D".to_string(), 64)].into();
        let config = config_for(&db, key, info.base_schedule.clone(), &compiled_for).unwrap();
        let dims = resolve_dims(&db, key, &info, &[("D".into(), 128), ("S".into(), 128)]).unwrap().map();
        let req =
            PlanRequest { target: Target::Cpu, config, dims, args: Vec::new(), seed: 7, code: false, max_memory: None };
        let e = plan(&db, key, &info, &req).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Input);
        assert!(e.message.contains("compiled for D = 64") && e.message.contains("D = 128"), "{}", e.message);
    }
}
