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
//! # The references
//! The oracle is the kernel's Graph IR, before any schedule, interpreted in f64
//! ([`crate::semantics`]): it shares no pass with the device. The second reference is the
//! interpreter on the kernel's **CPU Tile IR** with the same schedule (`--check lowering`,
//! and after any mismatch with the first: [`diagnose_mismatch`]); agreeing with it and
//! not with the first places a difference in the Tile IR or the kernel's own arithmetic,
//! not in code generation. `--device interp --target sm_90` checks the GPU lowering (with
//! the interpreter's async-copy and barrier hazard checks).
//!
//! # Work model
//! FLOPs are counted from the Tile IR and the bound dims without running anything: each
//! `tile.dot` executed costs 2·m·n·k for its tile shape, times the trip counts of its
//! loops and the programs of the grid ([`count_dot_flops`]). That is the work the kernel
//! *executes*: edge tiles count whole (at shapes that are multiples of the tile sizes it
//! is exactly 2·M·N·K for a GEMM), and a causal kernel that visits every key block counts
//! every block. Kernels without `tile.dot` report bandwidth: every tensor the kernel
//! reads counted once, every tensor it writes counted once (an in-place tensor twice).

/// The value a shape symbol gets when the user gives none (tile shape symbols such as
/// a head dim get [`DEFAULT_SHAPE`](tessera_passes::DEFAULT_SHAPE), the value the kernel is checked and shown with).
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
mod device;
mod error;
mod execute;
mod flops;
pub mod graph;
mod info;
mod kernel_reference;
mod plan;
pub use device::*;
pub use error::*;
pub use execute::*;
pub use flops::*;
pub use info::*;
pub use plan::*;

#[cfg(test)]
pub(crate) mod tests;
