//! Running Tessera kernels: host tensors, the reference interpreter (the oracle every
//! backend is compared with), the CPU backend (LLVM JIT, feature `llvm`) and the NVIDIA
//! backend (PTX through the CUDA driver, feature `cuda`).

pub mod autotune;
pub mod files;
pub mod interp;
pub mod launch;
pub mod npy;
pub mod reference;
pub mod semantics;
pub mod tensor;

#[cfg(feature = "llvm")]
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

pub use tensor::{Arg, HostTensor};
