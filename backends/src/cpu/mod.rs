//! The CPU backend: JIT-compiles the LLVM IR `tessera_passes::llvm` emits (LLVM 14 via
//! inkwell), optimized at O3 for the host CPU and its features, and runs a kernel's grid
//! split across OS threads.
//!
//! Compiled kernels are cached for the life of the process by the hash of their IR text,
//! so compiling the same Tile IR twice costs one hash. Timed launches (several runs) stage
//! tensors that are not 64-byte aligned in aligned buffers (as a GPU backend copies to
//! device memory; a vector of 16 floats then never straddles two cache lines). A launch
//! splits the grid across OS threads that take chunks of programs from a shared counter.
//! Runs are timed (wall and worker CPU time); a run can be preceded by warm-up runs and
//! repeated, and tensors the kernel both reads and writes are restored before each
//! repetition so every run computes from the same inputs.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Instant;

use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::OptimizationLevel;
use tessera_passes::abi::{scalar_slot, AbiParam, KernelAbi, Slot};
use tessera_passes::codegen::TargetCode;
use tessera_passes::ir::Func;
use tessera_passes::llvm::{error_fn_name, launcher_name, stack_fn_name};

use crate::interp::{param_access, Access};
use crate::tensor::{tensor_dims, Arg};

/// Why a kernel could not be compiled or run.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CpuError {
    pub message: String,
}

impl CpuError {
    fn new(message: impl Into<String>) -> CpuError {
        CpuError { message: message.into() }
    }
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CpuError {}

/// What a launch did.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuRun {
    /// Wall time of each timed run (warm-up runs excluded), in milliseconds.
    pub times_ms: Vec<f64>,
    /// CPU time of each timed run summed over the worker threads, in milliseconds: on a
    /// shared machine, `cpu_ms / threads` is the run time without preemption.
    pub cpu_ms: Vec<f64>,
    pub grid: [u64; 3],
    pub threads: usize,
}

impl CpuRun {
    /// The fastest timed run.
    pub fn best_ms(&self) -> f64 {
        self.times_ms.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// The median timed run.
    pub fn median_ms(&self) -> f64 {
        let mut t = self.times_ms.clone();
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// How to launch.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// OS threads the grid is split across.
    pub threads: usize,
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs (at least one).
    pub repeats: usize,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions { threads: default_threads(), warmup: 0, repeats: 1 }
    }
}

/// All the cores this process may use.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

type Launcher = unsafe extern "C" fn(*const u64, i64, i64, i64, i64, i64) -> i32;
type ErrorFn = unsafe extern "C" fn(i32) -> *const c_char;
type StackFn = unsafe extern "C" fn() -> i64;

/// Machine code of one module, alive as long as its engine.
struct Compiled {
    launcher: Launcher,
    error: ErrorFn,
    stack_bytes: u64,
    /// Owns the code the function pointers point into; never used after compilation.
    _engine: EngineHolder,
}

struct EngineHolder(#[allow(dead_code)] ExecutionEngine<'static>);

// SAFETY: the engine is only kept alive (its code is what `Compiled`'s function pointers
// point into); after construction nothing calls into it, so no LLVM object is used from
// two threads. The code itself is immutable and reentrant.
unsafe impl Send for EngineHolder {}
unsafe impl Sync for EngineHolder {}

/// A kernel compiled for the host CPU.
pub struct CpuKernel {
    abi: KernelAbi,
    compiled: Arc<Compiled>,
    /// Per parameter: read and written tensors (unknown: treated as both).
    access: Vec<Access>,
}

impl fmt::Debug for CpuKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuKernel").field("kernel", &self.abi.name).finish()
    }
}

static CACHE: OnceLock<Mutex<HashMap<u64, Arc<Compiled>>>> = OnceLock::new();

impl CpuKernel {
    /// Generates and compiles a Tile IR kernel (target `cpu`).
    pub fn new(func: &Func) -> Result<CpuKernel, CpuError> {
        let code = tessera_passes::llvm::emit(func).map_err(|e| CpuError::new(e.message))?;
        let mut k = CpuKernel::from_code(&code)?;
        k.access = param_access(func);
        Ok(k)
    }

    /// Compiles generated code (e.g. from the `target_code` query).
    pub fn from_code(code: &TargetCode) -> Result<CpuKernel, CpuError> {
        let mut h = DefaultHasher::new();
        code.text.hash(&mut h);
        let key = h.finish();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let hit = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        let compiled = match hit {
            Some(c) => c,
            None => {
                let c = Arc::new(compile(code)?);
                cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, c.clone());
                c
            }
        };
        let access = vec![Access { read: true, written: true }; code.abi.params.len()];
        Ok(CpuKernel { abi: code.abi.clone(), compiled, access })
    }

    pub fn abi(&self) -> &KernelAbi {
        &self.abi
    }

    /// Whether both run the same compiled code (the cache found the IR compiled).
    pub fn shares_code_with(&self, other: &CpuKernel) -> bool {
        Arc::ptr_eq(&self.compiled, &other.compiled)
    }

    /// Stack bytes one program needs for its tile buffers.
    pub fn stack_bytes(&self) -> u64 {
        self.compiled.stack_bytes
    }

    /// Runs the kernel once over its grid on `threads` threads; output tensors in
    /// `args` are updated.
    pub fn launch(&self, args: &mut [Arg], threads: usize) -> Result<CpuRun, CpuError> {
        self.launch_with(args, &LaunchOptions { threads, warmup: 0, repeats: 1 })
    }

    pub fn launch_with(&self, args: &mut [Arg], options: &LaunchOptions) -> Result<CpuRun, CpuError> {
        let threads = options.threads.max(1);
        let grid = self.bind(args)?;
        let total = grid.iter().try_fold(1u64, |acc, &g| acc.checked_mul(g));
        let total = total.ok_or_else(|| CpuError::new(format!("a grid of {grid:?} programs overflows")))?;
        let runs = options.warmup + options.repeats.max(1);
        // Repeated runs keep tensors in 64-byte aligned buffers (a cache line, and a zmm
        // vector: unaligned vectors straddle lines), like device memory on a GPU; written
        // ones are copied back after the last run. A single run would spend more on the
        // copies than alignment saves.
        let mut staged: Vec<Option<Staged>> = args
            .iter()
            .map(|a| match a {
                Arg::Tensor(t) if runs > 1 && !(t.data.as_ptr() as usize).is_multiple_of(ALIGN) => {
                    Some(Staged::of(&t.data))
                }
                _ => None,
            })
            .collect();
        // In-place tensors (read and written) restart from their inputs on every run.
        let restore: Vec<(usize, Vec<u8>)> = if runs > 1 {
            args.iter()
                .enumerate()
                .filter_map(|(i, a)| match a {
                    Arg::Tensor(t) if self.access[i].read && self.access[i].written => Some((i, t.data.clone())),
                    _ => None,
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        for run in 0..runs {
            if run > 0 {
                for (i, data) in &restore {
                    match (&mut staged[*i], &mut args[*i]) {
                        (Some(s), _) => s.bytes_mut().copy_from_slice(data),
                        (None, Arg::Tensor(t)) => t.data.copy_from_slice(data),
                        _ => {}
                    }
                }
            }
            let slots = self.slots(args, &mut staged)?;
            let start = Instant::now();
            let cpu_ms = self.run_grid(&slots, grid, total, threads)?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            if run >= options.warmup {
                times.push(ms);
                cpu.push(cpu_ms);
            }
        }
        for (i, s) in staged.iter().enumerate() {
            if let (Some(s), Arg::Tensor(t)) = (s, &mut args[i]) {
                if self.access[i].written {
                    t.data.copy_from_slice(s.bytes());
                }
            }
        }
        Ok(CpuRun { times_ms: times, cpu_ms: cpu, grid, threads })
    }

    /// Checks the arguments against the signature and evaluates the grid.
    fn bind(&self, args: &[Arg]) -> Result<[u64; 3], CpuError> {
        let shapes = tensor_dims(&self.abi, args, |p, a| match (p, a) {
            (AbiParam::Scalar { .. } | AbiParam::Index { .. }, Arg::Scalar(..) | Arg::Index(_)) => Ok(()),
            (p, a) => {
                let got = match a {
                    Arg::Tensor(_) => "a tensor",
                    Arg::Scalar(..) => "a scalar",
                    Arg::Index(_) => "an index",
                };
                Err(format!("`{}` expects a {}, got {got}", p.name(), kind(p)))
            }
        })
        .map_err(CpuError::new)?;
        let binding = self.abi.bind(&shapes).map_err(CpuError::new)?;
        Ok(binding.grid)
    }

    /// One 8-byte word per ABI slot (see `tessera_passes::llvm`).
    fn slots(&self, args: &mut [Arg], staged: &mut [Option<Staged>]) -> Result<Vec<u64>, CpuError> {
        let mut words = Vec::new();
        for ((p, a), s) in self.abi.params.iter().zip(args.iter_mut()).zip(staged.iter_mut()) {
            match (p, a) {
                (AbiParam::Tensor { .. }, Arg::Tensor(t)) => {
                    let ptr = match s {
                        Some(s) => s.bytes_mut().as_mut_ptr(),
                        None => t.data.as_mut_ptr(),
                    };
                    words.push(ptr as u64);
                    words.extend(t.dims.iter().map(|&d| d as u64));
                }
                (AbiParam::Scalar { dtype, .. }, Arg::Scalar(_, v)) => words.push(scalar_word(*dtype, *v)),
                (AbiParam::Scalar { dtype, .. }, Arg::Index(i)) => words.push(match scalar_slot(*dtype) {
                    Slot::I64 => *i as u64,
                    _ => scalar_word(*dtype, *i as f64),
                }),
                (AbiParam::Index { .. }, Arg::Index(i)) => words.push(*i as u64),
                (AbiParam::Index { .. }, Arg::Scalar(_, v)) => words.push(saturate_i64(*v) as u64),
                (p, _) => return Err(CpuError::new(format!("`{}` expects a {}", p.name(), kind(p)))),
            }
        }
        if words.len() != self.abi.slots().len() {
            return Err(CpuError::new("internal error: the packed slots disagree with the ABI"));
        }
        Ok(words)
    }

    /// Runs every program; returns the CPU time the workers used (ms).
    fn run_grid(&self, slots: &[u64], grid: [u64; 3], total: u64, threads: usize) -> Result<f64, CpuError> {
        if total == 0 {
            return Ok(0.0);
        }
        let threads = (threads as u64).min(total).max(1) as usize;
        // Programs are handed out in chunks from a shared counter: uneven programs
        // (causal attention) still balance.
        let chunk = (total / (threads as u64 * 8)).max(1);
        let next = AtomicU64::new(0);
        let failure: Mutex<Option<(i32, u64, u64)>> = Mutex::new(None);
        let stack = (self.compiled.stack_bytes as usize).saturating_mul(2).saturating_add(16 << 20);
        let launcher = self.compiled.launcher;
        let slots_ptr = slots.as_ptr() as usize;
        let work = || loop {
            if failure.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                return;
            }
            let begin = next.fetch_add(chunk, Ordering::Relaxed);
            if begin >= total {
                return;
            }
            let end = (begin + chunk).min(total);
            // SAFETY: the launcher follows the calling convention of
            // `tessera_passes::llvm`; `slots` holds one word per ABI slot, bound and
            // checked against the tensors, whose buffers outlive the scope; programs write
            // disjoint elements, as on a GPU.
            let rc = unsafe {
                launcher(
                    slots_ptr as *const u64,
                    grid[0] as i64,
                    grid[1] as i64,
                    grid[2] as i64,
                    begin as i64,
                    end as i64,
                )
            };
            if rc != 0 {
                failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert((rc, begin, end));
                return;
            }
        };
        let cpu_ns = AtomicU64::new(0);
        let worker = || {
            let start = thread_cpu_ns();
            work();
            cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(start), Ordering::Relaxed);
        };
        let spawned: Result<(), std::io::Error> = std::thread::scope(|s| {
            let mut handles = Vec::new();
            for i in 0..threads {
                let h = std::thread::Builder::new()
                    .name(format!("tessera-cpu-{i}"))
                    .stack_size(stack)
                    .spawn_scoped(s, worker)?;
                handles.push(h);
            }
            for h in handles {
                if h.join().is_err() {
                    return Err(std::io::Error::other("a worker thread panicked"));
                }
            }
            Ok(())
        });
        spawned.map_err(|e| CpuError::new(format!("could not run the worker threads: {e}")))?;
        if let Some((code, begin, end)) = *failure.lock().unwrap_or_else(|e| e.into_inner()) {
            // SAFETY: the error function takes any code and returns null or a C string
            // of the module's constant table.
            let msg = unsafe { (self.compiled.error)(code) };
            let text = if msg.is_null() {
                format!("error code {code}")
            } else {
                // SAFETY: non-null results point to NUL-terminated constants.
                unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
            };
            return Err(CpuError::new(format!(
                "`{}`: {text} (in one of the programs {begin}..{end} of the linear grid)",
                self.abi.name
            )));
        }
        Ok(cpu_ns.load(Ordering::Relaxed) as f64 / 1e6)
    }
}

/// CPU time of the calling thread in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes the timespec it is given; the clock id is valid.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The alignment tensors run at.
const ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// A tensor's bytes in a 64-byte aligned buffer.
struct Staged {
    lines: Vec<Line>,
    len: usize,
}

impl Staged {
    fn of(data: &[u8]) -> Staged {
        let mut s = Staged { lines: vec![Line([0; ALIGN]); data.len().div_ceil(ALIGN)], len: data.len() };
        s.bytes_mut().copy_from_slice(data);
        s
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialized bytes (plain `u8` arrays).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

fn kind(p: &AbiParam) -> String {
    match p {
        AbiParam::Tensor { dtype, dims, .. } => format!("rank-{} {dtype} tensor", dims.len()),
        AbiParam::Scalar { dtype, .. } => format!("{dtype} scalar"),
        AbiParam::Index { .. } => "index".to_string(),
    }
}

/// A scalar argument's slot word: f32 bits, f64 bits, a bool as 0/1, integers saturated.
fn scalar_word(dtype: tessera_frontend::check::DType, v: f64) -> u64 {
    match scalar_slot(dtype) {
        Slot::F32 => u64::from((v as f32).to_bits()),
        Slot::F64 => v.to_bits(),
        Slot::I32 => u64::from(v != 0.0),
        _ => saturate_i64(v) as u64,
    }
}

fn saturate_i64(v: f64) -> i64 {
    if v.is_nan() {
        0
    } else {
        v as i64
    }
}

/// The host machine as LLVM names it.
struct Host {
    machine: TargetMachine,
    cpu: String,
    features: String,
}

fn host() -> Result<Host, CpuError> {
    static INIT: Once = Once::new();
    static INIT_ERR: OnceLock<Option<String>> = OnceLock::new();
    INIT.call_once(|| {
        let r = Target::initialize_native(&InitializationConfig::default()).err();
        let _ = INIT_ERR.set(r);
    });
    if let Some(Some(e)) = INIT_ERR.get() {
        return Err(CpuError::new(format!("LLVM cannot target this machine: {e}")));
    }
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| CpuError::new(format!("LLVM target {triple}: {e}")))?;
    let cpu = TargetMachine::get_host_cpu_name().to_string();
    let features = TargetMachine::get_host_cpu_features().to_string();
    let machine = target
        .create_target_machine(
            &triple,
            &cpu,
            &features,
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| CpuError::new(format!("LLVM could not create a target machine for {triple} ({cpu})")))?;
    Ok(Host { machine, cpu, features })
}

fn compile(code: &TargetCode) -> Result<Compiled, CpuError> {
    let name = code.abi.name.to_string();
    let fail = |what: &str, e: &dyn fmt::Display| CpuError::new(format!("LLVM {what} `{name}`: {e}"));
    let host = host()?;
    // The context lives as long as the cached code.
    let context: &'static Context = Box::leak(Box::new(Context::create()));
    let buffer = MemoryBuffer::create_from_memory_range_copy(code.text.as_bytes(), &name);
    let module = context.create_module_from_ir(buffer).map_err(|e| fail("could not parse the IR of", &e))?;
    module.set_triple(&host.machine.get_triple());
    module.set_data_layout(&host.machine.get_target_data().get_data_layout());
    // Code generation picks the subtarget per function from these attributes.
    let cpu_attr = context.create_string_attribute("target-cpu", &host.cpu);
    let features_attr = context.create_string_attribute("target-features", &host.features);
    for f in module.get_functions() {
        if f.count_basic_blocks() > 0 {
            f.add_attribute(AttributeLoc::Function, cpu_attr);
            f.add_attribute(AttributeLoc::Function, features_attr);
        }
    }
    module.verify().map_err(|e| fail("rejected the IR of", &e))?;
    module
        .run_passes("default<O3>", &host.machine, PassBuilderOptions::create())
        .map_err(|e| fail("could not optimize", &e))?;
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| fail("could not create a JIT for", &e))?;
    let address = |f: &str| {
        engine.get_function_address(f).map_err(|e| CpuError::new(format!("LLVM JIT: no function `{f}`: {e:?}")))
    };
    let (l, e, s) = (address(&launcher_name(&name))?, address(&error_fn_name(&name))?, address(&stack_fn_name(&name))?);
    // SAFETY: the addresses are of functions with exactly these signatures (the calling
    // convention of `tessera_passes::llvm`), compiled for this machine.
    let (launcher, error, stack): (Launcher, ErrorFn, StackFn) = unsafe {
        (
            std::mem::transmute::<usize, Launcher>(l),
            std::mem::transmute::<usize, ErrorFn>(e),
            std::mem::transmute::<usize, StackFn>(s),
        )
    };
    // SAFETY: the stack function takes nothing and returns a constant.
    let stack_bytes = unsafe { stack() }.max(0) as u64;
    Ok(Compiled { launcher, error, stack_bytes, _engine: EngineHolder(engine) })
}

/// The CPU backend as a [`crate::interp::graph::KernelExecutor`] (see
/// [`crate::cpu_plan_executor`]).
pub(crate) struct PlanExecutor {
    pub threads: usize,
}

impl crate::interp::graph::KernelExecutor for PlanExecutor {
    fn launch(&mut self, tile_ir: &tessera_passes::ir::Func, args: &mut [crate::Arg]) -> Result<(), String> {
        let kernel = CpuKernel::new(tile_ir).map_err(|e| e.to_string())?;
        kernel.launch(args, self.threads).map(|_| ()).map_err(|e| e.to_string())
    }
}
