//! Devices: the `--device` choice, the [`Backend`] and [`Loaded`] traits, and the CPU, GPU and interpreter backends.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tessera_passes::ir::Func;
use tessera_passes::Target;

use crate::interp::{self};
use crate::tensor::Arg;

use super::{interp_cost, ErrorKind, LaunchError, Plan, INTERP_WORK_LIMIT};

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
        Err(crate::NO_CPU_BACKEND.into())
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
        Err(crate::NO_GPU_BACKEND.into())
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
            GpuError::Timeout(_) => (ErrorKind::Fault, "the kernel did not finish"),
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
        Ok(Box::new(InterpLoaded { func: plan.tile.clone(), options: plan.interp_options(), last: None }))
    }
}

struct InterpLoaded {
    func: Arc<Func>,
    options: interp::Options,
    last: Option<Vec<Arg>>,
}

impl Loaded for InterpLoaded {
    fn run(&mut self, args: &mut [Arg]) -> Result<(), LaunchError> {
        let kernel = interp::Kernel::new(&self.func).map_err(LaunchError::interp)?;
        let inputs = args.to_vec();
        kernel.run(args, &self.options).map_err(LaunchError::interp)?;
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
            let stats = kernel.run(&mut args, &self.options).map_err(LaunchError::interp)?;
            if i >= warmup {
                times.push(stats.elapsed);
            }
        }
        Ok(times)
    }
}
