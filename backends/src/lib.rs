//! Running Tessera kernels: host tensors, the reference interpreter (the oracle every
//! backend is compared with), the CPU backend (LLVM JIT, feature `llvm`) and the NVIDIA
//! backend (PTX through the CUDA driver, feature `cuda`).

pub mod autotune;
pub mod files;
pub mod interp;
pub mod launch;
pub mod mesh;
pub mod nccl;
pub mod npy;
pub mod reference;
pub mod semantics;
pub mod session;
pub mod tensor;

#[cfg(feature = "llvm")]
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

pub use tensor::{Arg, HostTensor};

/// Whether this build has the CPU backend (the `llvm` feature). Crates that depend on
/// this one ask here instead of testing a feature of their own, so that the answer is
/// the one this crate was built with.
pub const HAS_CPU_BACKEND: bool = cfg!(feature = "llvm");

/// What a run that needs the CPU backend says in a build without it.
pub const NO_CPU_BACKEND: &str = "this build has no CPU backend: it was built without the `llvm` feature \
     (LLVM 14). Install with `cargo install --path . --locked --features llvm`, or run with \
     `--device interp` (the reference interpreter)";

/// Why a build without the `cuda` feature runs nothing on a GPU.
pub const NO_GPU_BACKEND: &str = "this build has no NVIDIA backend (the `cuda` feature is off)";

/// A launch-plan executor with the target its kernels are lowered for and the device's
/// description.
pub type PlanExecutorOn = (Box<dyn interp::graph::KernelExecutor>, tessera_passes::Target, String);

/// The first NVIDIA GPU as a launch-plan executor, or why there is none.
pub fn gpu_plan_executor() -> Result<PlanExecutorOn, String> {
    #[cfg(feature = "cuda")]
    {
        let executor = cuda::plan_executor::GpuPlanExecutor::open()?;
        let (target, name) = (executor.target(), executor.description());
        Ok((Box::new(executor), target, name))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(NO_GPU_BACKEND.into())
    }
}

/// The CPU backend as a launch-plan executor using `threads` threads, when this build
/// has it: each kernel's Tile IR is compiled (and cached by its IR) and launched across
/// the threads.
pub fn cpu_plan_executor(threads: usize) -> Option<Box<dyn interp::graph::KernelExecutor>> {
    #[cfg(feature = "llvm")]
    {
        Some(Box::new(cpu::PlanExecutor { threads }))
    }
    #[cfg(not(feature = "llvm"))]
    {
        let _ = threads;
        None
    }
}
