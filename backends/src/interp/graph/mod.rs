//! The reference interpreter of Graph IR: runs a `@jit` graph function (its Graph IR, with
//! `grad` expanded into the backward graph) on whole tensors, as the oracle the launch
//! plan and every backend are compared with. [`run_plan`] runs the plan itself: the
//! Schedule IR of the function launching the generated kernels through a
//! [`KernelExecutor`] (the Tile IR interpreter by default).
//!
//! Numerics (docs/ir.md, "Numerics" and "Graph level"):
//!
//! - Tensors hold values exactly representable in their dtype (stored as f64). Elementwise
//!   ops compute in their result dtype's arithmetic and round once per op, with the Tile
//!   IR interpreter's element functions: 16- and 8-bit floats compute in f32 and round to
//!   the dtype, f32 in f32, f64 in f64, integers wrap.
//! - `graph.matmul`: exact products (f32 fused multiply-add), accumulation in f32 over
//!   `k` in order (f64 when an operand is f64, wrapping i64 for integer operands), one
//!   rounding to the result dtype.
//! - `graph.reduce`: f32 accumulation (f64 for f64, exact for integers) in row-major
//!   order, `mean` divides the f32 sum by the count in f32; one rounding.
//! - `graph.softmax/logsumexp`, `graph.rmsnorm/layernorm` and `graph.flash_attention`
//!   compute in f32 (f64 for f64 tensors) and round once to the result dtype. Norm
//!   statistics are two-pass (mean, then the mean of squared deviations). Transcendental
//!   functions are evaluated in f64 from the f32 operand and rounded to f32, as in the
//!   Tile IR interpreter.
//! - `graph.flash_attention` is the exact `softmax(Q Kᵀ · scale) V` (scale `1/sqrt(Dh)`
//!   in f32 unless the op has `scale`): `s = q·k` accumulated in f32 and multiplied by the
//!   scale, keys after the query masked when `causal` (key index > query index), `e =
//!   exp(s - max)`, `l = Σ e`, dropout on `e` (below), `o = (Σ e·v) / l` in f32, rounded
//!   once. Unlike the stdlib kernel it does not round the probabilities to bf16 before
//!   `P·V`. Dropout keeps `e[bh, i, j]` where `uniform(seed·1000003 + stream + 1, (bh, i,
//!   j)) >= p` (`bh` = the flattened leading index, `b·H + h`) and scales it by `/(1 - p)`.
//! - `graph.dropout {stream}` keeps element `(r, c)` of the tensor viewed as
//!   `[rows = product of the leading dims, cols = last dim]` where
//!   `uniform(seed·1000003 + stream + 1, (r, c)) >= p`; a kept value is `x / (1 - p)`
//!   computed in f32 (f64 for f64 tensors) and rounded to the dtype, a dropped one is 0.
//!   `replay = true` (the backward graph) draws the same mask. This is exactly the
//!   generated kernels' `tile.where(tile.rand(...) >= p, tile.cast(x, f32) / (1.0 - p),
//!   0.0)`.
//!
//! Tokens only order effects: a `!token` value carries nothing.

use tessera_passes::ir::rand::uniform;

use super::InterpError;
use crate::tensor::Arg;

/// An argument of a graph function (in parameter order) or one of its results: a tensor,
/// a float or bool scalar (`lr: float`), or an index (`heads: int`).
pub type GraphArg = Arg;

type R<T> = Result<T, InterpError>;

/// The multiplier of a run's seed in each dropout stream's seed:
/// `seed * STREAM_SEED_MULTIPLIER + stream + 1` (docs/ir.md, the launch plan).
pub const STREAM_SEED_MULTIPLIER: i64 = 1_000_003;

/// The seed of dropout stream `stream` in a run seeded with `seed` (index arithmetic,
/// wrapping like the launch plan's `arith.mul`/`arith.add` on `index`).
pub fn stream_seed(seed: i64, stream: i64) -> i64 {
    seed.wrapping_mul(STREAM_SEED_MULTIPLIER).wrapping_add(stream).wrapping_add(1)
}

/// Whether `graph.dropout {stream}` keeps element `(row, col)` of its input viewed as
/// `[rows, cols]` (see the module doc).
pub fn dropout_keeps(seed: i64, stream: i64, row: i64, col: i64, p: f32) -> bool {
    uniform(stream_seed(seed, stream), &[row, col]) >= p
}

mod arith;
mod eval;
mod plan;
mod values;
pub use eval::{
    run_graph, run_graph_f64, run_graph_f64_unrounded, run_graph_f64_with_dims, run_graph_f64_with_kernels,
    run_graph_on_mesh, run_graph_traced, GraphTrace, KernelReference, MeshRun,
};
pub(crate) use plan::kernel_symbols;
pub use plan::{run_plan, run_plan_with_dims, InterpExecutor, KernelExecutor};
