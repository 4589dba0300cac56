//! PTX generation from GPU Tile IR (sm_80, sm_90).
//!
//! One `.entry` per kernel. Every tile value lives in registers: thread `tid` holds the
//! elements `Layout::elements(shape, tid)` says it owns, in that order (see
//! `threadmap`). Index and scalar values are uniform over the CTA (Tile IR has no
//! thread-dependent scalars), so loops and branches are `bra.uni`. Shared buffers and
//! the scratch space that moves data between threads (layout conversions, cross-warp
//! reductions) live in one dynamic shared-memory array whose size the runtime passes
//! at launch (`TargetCode::smem_bytes`).
//!
//! Register pressure shapes the code: values that depend only on the thread id are
//! computed once in the prologue, but only as few *bases* (members of a family that
//! differ by a constant become immediate offsets); per-element temporaries are made
//! where used; cold paths (misaligned copies) are loops; a dot operand read from
//! shared memory right before its dot is loaded (`ldmatrix`) next to the `mma`s of
//! each k step (`Repr::Lazy`).
//!
//! Submodules: `emit` (the `Emitter`, parameters, op dispatch and shared helpers),
//! `builder` (text and registers), `control` (`for` and `if`), `arith`
//! (constants and elementwise ops), `expr` (thread-id arithmetic that is
//! both emitted and evaluated), `threadmap` (layouts as affine maps of the thread id),
//! `numerics` (element types and conversions), `memory` (global memory), `shared`
//! (shared memory and async copies),
//! `dot` (`mma.sync` and `ldmatrix`), `wgmma` (warpgroup MMAs from shared memory
//! through matrix descriptors, sm_90a), `tma` (TMA copies and their mbarriers, sm_90a), `movement` (layout conversions, broadcasts,
//! reductions), `ptxas` (validation with NVIDIA's assembler), `nvdisasm` (the SASS it produced).
//!
//! Validation: `passes/tests/ptx.rs` assembles every corpus and example kernel, every
//! autotune configuration, for both targets with `ptxas`; `backends/tests/
//! cuda_emulator.rs` executes the PTX in an emulator and compares with the reference
//! interpreter.

mod arith;
mod builder;
mod cluster;
mod control;
mod dot;
mod emit;
mod expr;
mod f64_math;
mod memory;
mod movement;
mod numerics;
pub mod nvdisasm;
mod policy;
pub mod ptxas;
mod shared;
mod threadmap;
mod tma;
mod tools;
mod warp_spec;
pub mod wgmma;

pub use emit::emit;
pub use threadmap::ThreadMap;
