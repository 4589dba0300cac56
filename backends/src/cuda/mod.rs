//! The NVIDIA backend: the PTX `passes::ptx` generates, loaded and launched through
//! the CUDA driver API (`cudarc`'s raw bindings, loaded at run time: a machine
//! without a driver gets `GpuError::NoGpu`, never a crash).
//!
//! One `GpuDevice` owns a CUDA context on one GPU; it is `Send + Sync` (every call
//! takes its lock and makes the context current on the calling thread). A kernel
//! fault (illegal address, trap, ...) poisons a CUDA context for good, so the device
//! then replaces its context: the error says so, and kernels and buffers of the old
//! context report that they must be loaded again instead of touching freed handles.

pub mod args;
pub mod plan_executor;
mod tensor_map;

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys;
use tessera_passes::abi::KernelAbi;
use tessera_passes::codegen::TargetCode;
use tessera_passes::Target;

use crate::tensor::Arg;

/// Shared memory a block may use without opting in.
const DEFAULT_SMEM_LIMIT: u64 = 48 * 1024;

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum GpuError {
    /// No usable GPU: no driver library, no device, an unsupported device.
    NoGpu(String),
    /// The PTX does not load (the driver's JIT log is included).
    Load(String),
    /// The arguments do not fit the kernel's parameters.
    Args(String),
    /// The launch needs more than the device offers (shared memory, threads, grid).
    Resources(String),
    /// Device memory ran out.
    OutOfMemory(String),
    /// The kernel faulted; the context was replaced (load kernels again).
    Fault(String),
    /// A launch did not finish within the time limit ([`launch_timeout`]): the kernel
    /// may never end (a deadlock, an endless loop). It cannot be stopped from the host
    /// short of ending the process, so this device refuses every later call.
    Timeout(String),
    /// Any other driver failure, with the call that failed.
    Driver(String),
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoGpu(m)
            | GpuError::Load(m)
            | GpuError::Args(m)
            | GpuError::Resources(m)
            | GpuError::OutOfMemory(m)
            | GpuError::Fault(m)
            | GpuError::Timeout(m)
            | GpuError::Driver(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for GpuError {}

/// Whether the driver library can be loaded (cudarc panics on any call without it).
fn driver_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only tries to load the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// A driver result as a message: "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
fn describe(call: &str, code: sys::CUresult) -> String {
    if !driver_present() {
        return format!("{call}: {code:?}");
    }
    let err = cudarc::driver::result::DriverError(code);
    let name = err.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{code:?}"));
    let text = err.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if text.is_empty() {
        format!("{call}: {name}")
    } else {
        format!("{call}: {name} ({text})")
    }
}

fn check(call: &str, code: sys::CUresult) -> Result<(), GpuError> {
    if code == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let message = describe(call, code);
    Err(match code {
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => GpuError::OutOfMemory(message),
        sys::CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => GpuError::Resources(message),
        c if is_sticky(c) => GpuError::Fault(message),
        _ => GpuError::Driver(message),
    })
}

/// Errors after which the context cannot be used again (CUDA driver API, "Error
/// Handling": these leave the context in an unrecoverable state).
fn is_sticky(code: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
    )
}

struct State {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    /// Bumped when a fault replaces the context; handles of older generations are dead.
    generation: u64,
    /// Set when a launch outran the time limit: the kernel still runs, so nothing else
    /// can (and destroying the context could wait for it forever).
    stuck: Option<String>,
}

/// How long one launch may run before it is given up as stuck: `TESSERA_GPU_TIMEOUT`
/// seconds, default 120. (A flash-attention candidate at head dim 128 once ran without end
/// on an H200 and the autotuner waited for it with it.)
pub fn launch_timeout() -> std::time::Duration {
    let seconds = std::env::var("TESSERA_GPU_TIMEOUT").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(120.0);
    std::time::Duration::from_secs_f64(seconds.max(0.001))
}

/// Waits for `event` (recorded after a launch) until it completes, the driver reports an
/// error, or `limit` passes.
///
/// SAFETY: `event` is a live event of the current context.
unsafe fn wait_for(event: sys::CUevent, limit: std::time::Duration) -> Result<bool, GpuError> {
    let start = std::time::Instant::now();
    let mut nap = std::time::Duration::from_micros(20);
    loop {
        match sys::cuEventQuery(event) {
            sys::CUresult::CUDA_SUCCESS => return Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => {}
            code => check("cuEventQuery", code)?,
        };
        if start.elapsed() > limit {
            return Ok(false);
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(std::time::Duration::from_millis(2));
    }
}

// SAFETY: the context handle is only used with the mutex held, after making it current
// on the calling thread (the driver allows a context to be current on any thread).
unsafe impl Send for State {}

impl State {
    fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: `ctx` is a live context created by this state.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// Replaces a context a fault has poisoned.
    fn recreate(&mut self) -> Result<(), GpuError> {
        // SAFETY: the old context is destroyed once; every handle made in it is
        // invalidated by the generation bump and never used again.
        unsafe {
            let _ = sys::cuCtxDestroy_v2(self.ctx);
            let mut ctx = std::ptr::null_mut();
            check("cuCtxCreate", sys::cuCtxCreate_v2(&mut ctx, 0, self.device))?;
            self.ctx = ctx;
        }
        self.generation += 1;
        Ok(())
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // A stuck kernel still runs in the context, and destroying it would wait for the
        // kernel: the process's end takes the context down instead.
        if self.stuck.is_some() {
            return;
        }
        // SAFETY: the context was created by this state and is destroyed once.
        unsafe {
            let _ = sys::cuCtxDestroy_v2(self.ctx);
        }
    }
}

/// A GPU with its CUDA context (clones share it).
#[derive(Clone)]
pub struct GpuDevice {
    state: Arc<Mutex<State>>,
    name: String,
    compute_capability: (i32, i32),
    /// Shared memory per block with opt-in (bytes).
    smem_optin: u64,
}

/// A kernel loaded on a device.
pub struct GpuKernel {
    state: Arc<Mutex<State>>,
    generation: u64,
    module: sys::CUmodule,
    function: sys::CUfunction,
    pub entry: String,
    pub abi: KernelAbi,
    /// Dynamic shared memory per block (bytes).
    pub smem_bytes: u64,
    /// Registers per thread, as the driver compiled it.
    pub registers: u32,
    /// Local memory per thread (spills and stack), bytes.
    pub local_bytes: u32,
    /// The most threads per block the compiled kernel can run with.
    pub max_threads: u32,
}

// SAFETY: module and function handles are used only with the device lock held and the
// context current; they are plain handles the driver allows from any thread.
unsafe impl Send for GpuKernel {}
unsafe impl Sync for GpuKernel {}

impl Drop for GpuKernel {
    fn drop(&mut self) {
        let Ok(state) = self.state.lock() else { return };
        if state.generation == self.generation && state.bind().is_ok() {
            // SAFETY: the module is live in the current context and unloaded once.
            unsafe {
                let _ = sys::cuModuleUnload(self.module);
            }
        }
    }
}

/// Timings of one `GpuDevice::launch`.
#[derive(Clone, PartialEq, Debug)]
pub struct GpuRun {
    /// Milliseconds of each timed launch (CUDA events around each launch).
    pub times_ms: Vec<f64>,
    pub registers: u32,
}

/// Tensors in device memory for repeated launches.
pub struct Resident {
    state: Arc<Mutex<State>>,
    generation: u64,
    buffers: Vec<(sys::CUdeviceptr, usize)>,
    params: args::Params,
    /// The kernel's tensor maps (`copy = "tma"`), passed by value after the slots.
    tensor_maps: Vec<sys::CUtensorMap>,
    grid: [u32; 3],
}

// SAFETY: device pointers are plain addresses, used with the device lock held.
unsafe impl Send for Resident {}

impl Drop for Resident {
    fn drop(&mut self) {
        let Ok(state) = self.state.lock() else { return };
        if state.generation != self.generation || state.bind().is_err() {
            return;
        }
        for &(ptr, bytes) in &self.buffers {
            if bytes > 0 {
                // SAFETY: allocated by `upload` in this context, freed once.
                unsafe {
                    let _ = sys::cuMemFree_v2(ptr);
                }
            }
        }
    }
}

impl GpuDevice {
    /// The first GPU.
    pub fn open() -> Result<GpuDevice, GpuError> {
        GpuDevice::open_ordinal(0)
    }

    pub fn open_ordinal(ordinal: i32) -> Result<GpuDevice, GpuError> {
        // cudarc panics on any CUDA call when the library is missing, so nothing else
        // may run before this check.
        if !driver_present() {
            return Err(GpuError::NoGpu("no NVIDIA GPU: the CUDA driver library (libcuda.so) is not installed".into()));
        }
        let no_gpu = |e: GpuError| GpuError::NoGpu(format!("no usable NVIDIA GPU: {e}"));
        // SAFETY: plain driver queries on handles the driver returned.
        unsafe {
            check("cuInit", sys::cuInit(0)).map_err(no_gpu)?;
            let mut count = 0;
            check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count)).map_err(no_gpu)?;
            if ordinal < 0 || ordinal >= count {
                return Err(GpuError::NoGpu(format!(
                    "no NVIDIA GPU {ordinal}: the CUDA driver sees {count} device(s)"
                )));
            }
            let mut device = 0;
            check("cuDeviceGet", sys::cuDeviceGet(&mut device, ordinal)).map_err(no_gpu)?;
            let mut name = [0 as std::ffi::c_char; 256];
            check("cuDeviceGetName", sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device))
                .map_err(no_gpu)?;
            let name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let attr = |a: sys::CUdevice_attribute| -> Result<i32, GpuError> {
                let mut v = 0;
                check("cuDeviceGetAttribute", sys::cuDeviceGetAttribute(&mut v, a, device))?;
                Ok(v)
            };
            use sys::CUdevice_attribute::*;
            let major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(no_gpu)?;
            let minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(no_gpu)?;
            let smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).map_err(no_gpu)?;
            let mut ctx = std::ptr::null_mut();
            check("cuCtxCreate", sys::cuCtxCreate_v2(&mut ctx, 0, device)).map_err(no_gpu)?;
            let state = State { device, ctx, generation: 0, stuck: None };
            Ok(GpuDevice {
                state: Arc::new(Mutex::new(state)),
                name,
                compute_capability: (major, minor),
                smem_optin: smem_optin.max(0) as u64,
            })
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// The code target this device runs: sm_90 PTX on compute capability 9.0 and newer
    /// (the driver JIT-compiles PTX forward), sm_80 on 8.x.
    pub fn target(&self) -> Result<Target, GpuError> {
        match self.compute_capability.0 {
            m if m >= 9 => Ok(Target::Sm90),
            8 => Ok(Target::Sm80),
            m => Err(GpuError::NoGpu(format!(
                "{} has compute capability {m}.{}, older than sm_80 (the oldest target)",
                self.name, self.compute_capability.1
            ))),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, GpuError> {
        let state = self.state.lock().map_err(|_| GpuError::Driver("the GPU state lock is poisoned".into()))?;
        if let Some(why) = &state.stuck {
            return Err(GpuError::Timeout(format!("{why}; the GPU cannot run anything else in this process")));
        }
        state.bind()?;
        Ok(state)
    }

    /// Loads a kernel's PTX (JIT-compiled by the driver for this GPU).
    pub fn load(&self, code: &TargetCode) -> Result<GpuKernel, GpuError> {
        if !code.target.is_gpu() {
            return Err(GpuError::Load(format!("`{}` was generated for {}, not a GPU", code.entry, code.target)));
        }
        let state = self.lock()?;
        let ptx = CString::new(code.text.as_str())
            .map_err(|_| GpuError::Load(format!("the PTX of `{}` contains a NUL byte", code.entry)))?;
        let mut log = vec![0u8; 16 * 1024];
        let mut options =
            [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let mut module = std::ptr::null_mut();
        // SAFETY: `ptx` is NUL-terminated and outlives the call; the option arrays hold
        // two entries each; the log buffer has the size passed.
        let loaded = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                ptx.as_ptr() as *const c_void,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if loaded != sys::CUresult::CUDA_SUCCESS {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let jit = String::from_utf8_lossy(&log[..end]).trim().to_string();
            let mut message =
                format!("cannot load the PTX of `{}`: {}", code.entry, describe("cuModuleLoadData", loaded));
            if !jit.is_empty() {
                message.push('\n');
                message.push_str(&jit);
            }
            return Err(GpuError::Load(message));
        }
        let mut kernel = GpuKernel {
            state: self.state.clone(),
            generation: state.generation,
            module,
            function: std::ptr::null_mut(),
            entry: code.entry.clone(),
            abi: code.abi.clone(),
            smem_bytes: code.smem_bytes,
            registers: 0,
            local_bytes: 0,
            max_threads: 0,
        };
        // Any error leaves `kernel` to unload its module, which takes the state lock: so
        // the lock is released first (holding it there deadlocked `tessera run` on a
        // kernel that needed more shared memory than the GPU has, on an H200).
        let inspected = self.inspect(&mut kernel, code);
        drop(state);
        inspected?;
        Ok(kernel)
    }

    /// Finds the loaded module's entry, reads its attributes and checks that a block of it
    /// fits the GPU (shared memory, threads), raising the dynamic shared memory limit
    /// where it needs more than the default. The caller holds the state lock.
    fn inspect(&self, kernel: &mut GpuKernel, code: &TargetCode) -> Result<(), GpuError> {
        let entry = CString::new(code.entry.as_str())
            .map_err(|_| GpuError::Load(format!("the entry name `{}` contains a NUL byte", code.entry)))?;
        // SAFETY: `module` is live; the out-pointers are valid.
        unsafe {
            check(
                "cuModuleGetFunction",
                sys::cuModuleGetFunction(&mut kernel.function, kernel.module, entry.as_ptr()),
            )?;
            let attr = |a: sys::CUfunction_attribute| -> Result<i32, GpuError> {
                let mut v = 0;
                check("cuFuncGetAttribute", sys::cuFuncGetAttribute(&mut v, a, kernel.function))?;
                Ok(v)
            };
            use sys::CUfunction_attribute::*;
            kernel.registers = attr(CU_FUNC_ATTRIBUTE_NUM_REGS)?.max(0) as u32;
            kernel.local_bytes = attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?.max(0) as u32;
            kernel.max_threads = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(0) as u32;
            let static_smem = attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?.max(0) as u64;
            let total = code.smem_bytes + static_smem;
            if total > self.smem_optin {
                return Err(GpuError::Resources(format!(
                    "`{}` needs {total} bytes of shared memory per block; {} allows {}",
                    code.entry, self.name, self.smem_optin
                )));
            }
            if total > DEFAULT_SMEM_LIMIT {
                check(
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                    sys::cuFuncSetAttribute(
                        kernel.function,
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        code.smem_bytes as i32,
                    ),
                )?;
            }
        }
        if code.abi.threads > kernel.max_threads {
            return Err(GpuError::Resources(format!(
                "`{}` runs {} threads per block, but with {} registers per thread at most {} fit",
                code.entry, code.abi.threads, kernel.registers, kernel.max_threads
            )));
        }
        Ok(())
    }

    /// Copies the arguments to the device: each tensor to its own buffer.
    pub fn upload(&self, kernel: &GpuKernel, args: &[Arg]) -> Result<Resident, GpuError> {
        let tensors = args::check_args(&kernel.abi, args).map_err(GpuError::Args)?;
        let shapes: Vec<Vec<i64>> = tensors.iter().map(|(s, _)| s.clone()).collect();
        let binding = kernel.abi.bind(&shapes).map_err(GpuError::Args)?;
        let mut grid = [1u32; 3];
        let limits = [(1u64 << 31) - 1, 65535, 65535];
        // Whole clusters (`cluster=(x, y)`): the programs past the end store nothing.
        let launch_grid = kernel.abi.launch_grid(binding.grid);
        for (axis, (&g, &limit)) in launch_grid.iter().zip(&limits).enumerate() {
            if g > limit {
                return Err(GpuError::Resources(format!(
                    "`{}` needs {g} programs along grid axis {axis}; the limit is {limit}",
                    kernel.entry
                )));
            }
            grid[axis] = g as u32;
        }
        let state = self.lock_for(kernel)?;
        let mut resident = Resident {
            state: self.state.clone(),
            generation: state.generation,
            buffers: Vec::new(),
            params: args::Params { slots: Vec::new(), kinds: Vec::new() },
            tensor_maps: Vec::new(),
            grid,
        };
        // As in `load`: an error leaves `resident` to free its buffers, which takes the
        // lock, so the lock is released first.
        let filled = Self::fill(&mut resident, kernel, &tensors, args);
        drop(state);
        filled?;
        Ok(resident)
    }

    /// Allocates and copies each tensor argument, packs the parameters and encodes the
    /// tensor maps into `resident`. The caller holds the state lock.
    fn fill(
        resident: &mut Resident,
        kernel: &GpuKernel,
        tensors: &[(Vec<i64>, usize)],
        args: &[Arg],
    ) -> Result<(), GpuError> {
        let mut data = args.iter().filter_map(|a| match a {
            Arg::Tensor(t) => Some(t),
            _ => None,
        });
        for (i, (_, bytes)) in tensors.iter().enumerate() {
            let tensor = data.next().expect("check_args counted the tensors");
            if *bytes == 0 {
                resident.buffers.push((0, 0));
                continue;
            }
            let mut ptr = 0;
            // SAFETY: the out-pointer is valid; the copy reads `bytes` bytes of the
            // tensor's data into the fresh allocation of that size.
            unsafe {
                let allocated = sys::cuMemAlloc_v2(&mut ptr, *bytes);
                if allocated != sys::CUresult::CUDA_SUCCESS {
                    let name = kernel
                        .abi
                        .params
                        .iter()
                        .filter(|p| matches!(p, tessera_passes::abi::AbiParam::Tensor { .. }))
                        .nth(i)
                        .map_or("?", |p| p.name())
                        .to_string();
                    return Err(match check("cuMemAlloc", allocated) {
                        Err(GpuError::OutOfMemory(m)) => {
                            GpuError::OutOfMemory(format!("{m}: {bytes} bytes for tensor `{name}`"))
                        }
                        Err(e) => e,
                        Ok(()) => unreachable!("not a success"),
                    });
                }
                resident.buffers.push((ptr, *bytes));
                check("cuMemcpyHtoD", sys::cuMemcpyHtoD_v2(ptr, tensor.data.as_ptr() as *const c_void, *bytes))?;
            }
        }
        let pointers: Vec<u64> = resident.buffers.iter().map(|&(p, _)| p).collect();
        resident.params = args::pack(&kernel.abi, args, &pointers).map_err(GpuError::Args)?;
        for spec in &kernel.abi.tensor_maps {
            resident.tensor_maps.push(tensor_map::encode(&kernel.abi, spec, args, &pointers)?);
        }
        Ok(())
    }

    fn lock_for(&self, kernel: &GpuKernel) -> Result<MutexGuard<'_, State>, GpuError> {
        let state = self.lock()?;
        if !Arc::ptr_eq(&kernel.state, &self.state) {
            return Err(GpuError::Load(format!("`{}` was loaded on another device", kernel.entry)));
        }
        if kernel.generation != state.generation {
            return Err(GpuError::Load(format!(
                "`{}` was loaded before a kernel fault reset the GPU context; load it again",
                kernel.entry
            )));
        }
        Ok(state)
    }

    /// Launches once on resident arguments; with `timed`, returns the milliseconds
    /// between CUDA events recorded around the launch.
    fn launch_once(
        &self,
        state: &mut MutexGuard<'_, State>,
        kernel: &GpuKernel,
        resident: &mut Resident,
        timed: bool,
    ) -> Result<Option<f64>, GpuError> {
        if resident.generation != state.generation {
            return Err(GpuError::Load("the kernel's arguments belong to a GPU context a fault reset".into()));
        }
        if resident.grid.contains(&0) {
            return Ok(timed.then_some(0.0));
        }
        let mut pointers: Vec<*mut c_void> =
            resident.params.slots.iter_mut().map(|s| s as *mut u64 as *mut c_void).collect();
        // The 128-byte tensor maps follow, by value (`.param .align 64 .b8 tmapK[128]`).
        pointers.extend(resident.tensor_maps.iter_mut().map(|m| m as *mut sys::CUtensorMap as *mut c_void));
        let [gx, gy, gz] = resident.grid;
        let result = (|| -> Result<Option<f64>, GpuError> {
            // SAFETY: the function is live in the current context; `pointers` holds one
            // valid pointer per PTX parameter (the ABI's slots, checked by `pack`), each
            // to 8 bytes; the events are created and destroyed here.
            unsafe {
                // The end event is polled (a launch that never ends must not hang the
                // tool); the start event only when timed.
                let mut events = [std::ptr::null_mut(); 2];
                check("cuEventCreate", sys::cuEventCreate(&mut events[1], 0))?;
                if timed {
                    check("cuEventCreate", sys::cuEventCreate(&mut events[0], 0))?;
                    check("cuEventRecord", sys::cuEventRecord(events[0], std::ptr::null_mut()))?;
                }
                let launched = check(
                    "cuLaunchKernel",
                    sys::cuLaunchKernel(
                        kernel.function,
                        gx,
                        gy,
                        gz,
                        kernel.abi.threads,
                        1,
                        1,
                        kernel.smem_bytes as u32,
                        std::ptr::null_mut(),
                        pointers.as_mut_ptr(),
                        std::ptr::null_mut(),
                    ),
                );
                let limit = launch_timeout();
                let finished = match &launched {
                    Ok(()) => (|| -> Result<bool, GpuError> {
                        check("cuEventRecord", sys::cuEventRecord(events[1], std::ptr::null_mut()))?;
                        wait_for(events[1], limit)
                    })(),
                    Err(_) => Ok(true),
                };
                if matches!(finished, Ok(false)) {
                    // The events stay: the stream still holds the kernel before them.
                    return Err(GpuError::Timeout(format!(
                        "`{}` did not finish within {:.0} s (TESSERA_GPU_TIMEOUT): a kernel that never ends, or \
                         one far slower than expected",
                        kernel.entry,
                        limit.as_secs_f64()
                    )));
                }
                let timing = match (&launched, &finished, timed) {
                    (Ok(()), Ok(_), true) => (|| -> Result<Option<f64>, GpuError> {
                        let mut ms = 0f32;
                        check("cuEventElapsedTime", sys::cuEventElapsedTime(&mut ms, events[0], events[1]))?;
                        Ok(Some(ms as f64))
                    })(),
                    (_, Err(e), _) => Err(e.clone()),
                    _ => Ok(None),
                };
                for e in events {
                    if !e.is_null() {
                        let _ = sys::cuEventDestroy_v2(e);
                    }
                }
                launched?;
                // Faults of the kernel surface here (or at the event above).
                check("cuCtxSynchronize", sys::cuCtxSynchronize())?;
                timing
            }
        })();
        match result {
            Err(GpuError::Timeout(m)) => {
                state.stuck = Some(m.clone());
                Err(GpuError::Timeout(m))
            }
            Err(GpuError::Fault(m)) => {
                let recovered = state.recreate();
                let note = match recovered {
                    Ok(()) => "the GPU context was reset; load kernels again".to_string(),
                    Err(e) => format!("resetting the GPU context failed too: {e}"),
                };
                Err(GpuError::Fault(format!("`{}` faulted: {m}; {note}", kernel.entry)))
            }
            other => other,
        }
    }

    /// Copies every tensor back into `args` (outputs and in-place tensors alike).
    pub fn download(&self, resident: &Resident, args: &mut [Arg]) -> Result<(), GpuError> {
        let state = self.lock()?;
        if resident.generation != state.generation {
            return Err(GpuError::Load("the kernel's arguments belong to a GPU context a fault reset".into()));
        }
        let tensors = args.iter_mut().filter_map(|a| match a {
            Arg::Tensor(t) => Some(t),
            _ => None,
        });
        for (t, &(ptr, bytes)) in tensors.zip(&resident.buffers) {
            if bytes == 0 {
                continue;
            }
            if t.data.len() != bytes {
                return Err(GpuError::Args("a tensor changed size between upload and download".into()));
            }
            // SAFETY: `ptr` holds `bytes` bytes in the current context; the destination
            // has the same size.
            unsafe {
                check("cuMemcpyDtoH", sys::cuMemcpyDtoH_v2(t.data.as_mut_ptr() as *mut c_void, ptr, bytes))?;
            }
        }
        Ok(())
    }

    /// One launch on resident arguments (the results `download` returns).
    pub fn run_resident(&self, kernel: &GpuKernel, resident: &mut Resident) -> Result<(), GpuError> {
        let mut state = self.lock_for(kernel)?;
        self.launch_once(&mut state, kernel, resident, false).map(|_| ())
    }

    /// `warmup` untimed launches, then `repeat` launches each timed with CUDA events.
    pub fn time_resident(
        &self,
        kernel: &GpuKernel,
        resident: &mut Resident,
        warmup: usize,
        repeat: usize,
    ) -> Result<Vec<f64>, GpuError> {
        let mut state = self.lock_for(kernel)?;
        for _ in 0..warmup {
            self.launch_once(&mut state, kernel, resident, false)?;
        }
        let mut times = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            if let Some(ms) = self.launch_once(&mut state, kernel, resident, true)? {
                times.push(ms);
            }
        }
        Ok(times)
    }

    /// Copies the arguments in, launches once and copies every tensor back into `args`
    /// (the results of that one launch), then times `repeat` more launches after one
    /// warm-up (on the device copies: in-place kernels keep changing them there).
    pub fn launch(&self, kernel: &GpuKernel, args: &mut [Arg], repeat: usize) -> Result<GpuRun, GpuError> {
        let mut resident = self.upload(kernel, args)?;
        self.run_resident(kernel, &mut resident)?;
        self.download(&resident, args)?;
        let times_ms = if repeat > 0 { self.time_resident(kernel, &mut resident, 1, repeat)? } else { Vec::new() };
        Ok(GpuRun { times_ms, registers: kernel.registers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (this machine) opening fails with a message, not a panic; with
    /// one, the device describes itself.
    #[test]
    fn opening_without_a_gpu_is_an_error() {
        match GpuDevice::open() {
            Err(GpuError::NoGpu(message)) => assert!(message.contains("GPU"), "{message}"),
            Err(other) => panic!("expected NoGpu, got {other}"),
            Ok(device) => {
                assert!(!device.name().is_empty());
                assert!(device.compute_capability().0 >= 1);
            }
        }
    }

    #[test]
    fn sticky_errors_are_faults() {
        assert!(matches!(
            check("cuCtxSynchronize", sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
            Err(GpuError::Fault(_))
        ));
        assert!(matches!(check("cuMemAlloc", sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY), Err(GpuError::OutOfMemory(_))));
        assert!(check("cuInit", sys::CUresult::CUDA_SUCCESS).is_ok());
    }
}
