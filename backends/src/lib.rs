//! Running Tessera kernels: host tensors, the reference interpreter (the oracle every
//! backend is compared with), the CPU backend (LLVM JIT, feature `llvm`) and the NVIDIA
//! backend (PTX through the CUDA driver, feature `cuda`).

pub mod tensor;

pub use tensor::{Arg, HostTensor};
