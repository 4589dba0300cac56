//! Every built-in name: its signature, where it may be used, and its documentation.
//! The checker binds call arguments with these signatures; completion, signature help
//! and hover show the same text.

use rustc_hash::FxHashMap as HashMap;
use std::sync::OnceLock;

/// Where a built-in may be used.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Level {
    /// Graph functions and helpers (`@jit`, `@autodiff`, undecorated).
    Graph,
    /// Inside `@kernel`s only.
    Kernel,
    /// Anywhere (scalars, elementwise math, declarations).
    Any,
    /// Only in a type annotation (`Tensor[...]`, policies).
    Type,
    /// Only as a decorator.
    Decorator,
}

#[derive(Clone, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub default: Option<&'static str>,
    pub keyword_only: bool,
    /// `**kwargs`: any keyword accepted.
    pub var_keyword: bool,
}

#[derive(Debug)]
pub struct Builtin {
    /// Canonical path: `tile.load`, `gelu`, `dist.mesh`, `kernel.autotune`.
    pub path: &'static str,
    /// `None` for values that are not callable (constants, namespaces, types).
    pub params: Option<&'static str>,
    pub level: Level,
    pub returns: &'static str,
    pub doc: &'static str,
}

impl Builtin {
    pub fn name(&self) -> &'static str {
        self.path.rsplit('.').next().unwrap_or(self.path)
    }

    /// The parsed parameter list.
    pub fn param_specs(&self) -> &'static [ParamSpec] {
        static CACHE: OnceLock<HashMap<&'static str, Vec<ParamSpec>>> = OnceLock::new();
        let cache =
            CACHE.get_or_init(|| BUILTINS.iter().filter_map(|b| b.params.map(|p| (b.path, parse_params(p)))).collect());
        cache.get(self.path).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// `tile.load(src, mask=None, ...) -> tile`
    pub fn signature(&self) -> String {
        match self.params {
            Some(p) if self.returns.is_empty() => format!("{}{}", self.path, p),
            Some(p) => format!("{}{} -> {}", self.path, p, self.returns),
            None => format!("{}: {}", self.path, self.returns),
        }
    }
}

fn parse_params(src: &'static str) -> Vec<ParamSpec> {
    let inner = src.trim().trim_start_matches('(').trim_end_matches(')');
    let mut out = Vec::new();
    let mut keyword_only = false;
    for part in split_top_level(inner) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        if part == "*" {
            keyword_only = true;
            continue;
        }
        if let Some(name) = part.strip_prefix("**") {
            out.push(ParamSpec { name, default: None, keyword_only: true, var_keyword: true });
            continue;
        }
        let (name, default) = match part.split_once('=') {
            Some((n, d)) => (n.trim(), Some(d.trim())),
            None => (part, None),
        };
        out.push(ParamSpec { name, default, keyword_only, var_keyword: false });
    }
    out
}

fn split_top_level(s: &'static str) -> Vec<&'static str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

macro_rules! builtins {
    ($($path:literal $params:tt $level:ident $ret:literal $doc:literal;)*) => {
        pub static BUILTINS: &[Builtin] = &[
            $(Builtin { path: $path, params: builtins!(@p $params), level: Level::$level, returns: $ret, doc: $doc },)*
        ];
    };
    (@p -) => { None };
    (@p $p:literal) => { Some($p) };
}

builtins! {
    // ---- elementwise math (graph level, and on tiles and scalars inside kernels) ----
    "exp" "(x)" Any "same shape" "Elementwise e^x.";
    "log" "(x)" Any "same shape" "Elementwise natural logarithm.";
    "tanh" "(x)" Any "same shape" "Elementwise hyperbolic tangent.";
    "sqrt" "(x)" Any "same shape" "Elementwise square root.";
    "rsqrt" "(x)" Any "same shape" "Elementwise 1/sqrt(x).";
    "sigmoid" "(x)" Any "same shape" "Elementwise logistic sigmoid 1/(1+e^-x).";
    "relu" "(x)" Any "same shape" "Elementwise max(x, 0).";
    "gelu" "(x)" Any "same shape" "Elementwise GELU (tanh approximation).";
    "silu" "(x)" Any "same shape" "Elementwise x*sigmoid(x).";
    "abs" "(x)" Any "same shape" "Elementwise absolute value.";
    "neg" "(x)" Any "same shape" "Elementwise negation.";
    "maximum" "(a, b)" Any "broadcast shape" "Elementwise maximum with NumPy broadcasting.";
    "minimum" "(a, b)" Any "broadcast shape" "Elementwise minimum with NumPy broadcasting.";
    "pow" "(a, b)" Any "broadcast shape" "Elementwise a**b with NumPy broadcasting.";
    "where" "(cond, a, b)" Any "broadcast shape" "Selects a where cond is true, else b.";
    // ---- graph-level operators ----
    "matmul" "(a, b)" Graph "[..., M, N]" "Matrix product [..,M,K] x [..,K,N] -> [..,M,N]; batch dims broadcast; keeps the storage dtype and carries the accumulation policy.";
    "gemm" "(a, b)" Graph "[..., M, N]" "Same as matmul.";
    "sum" "(x, axis=None, keepdim=False)" Graph "reduced" "Sum over `axis` (an int or a tuple; all axes when None).";
    "mean" "(x, axis=None, keepdim=False)" Graph "reduced" "Mean over `axis` (an int or a tuple; all axes when None).";
    "max" "(x, axis=None, keepdim=False)" Any "reduced" "Maximum over `axis` of a tensor; with two scalars, the larger one.";
    "min" "(x, axis=None, keepdim=False)" Any "reduced" "Minimum over `axis` of a tensor; with two scalars, the smaller one.";
    "softmax_safe" "(x, axis=-1)" Graph "same shape" "Numerically stable softmax (subtracts the row max).";
    "logsumexp_safe" "(x, axis=-1)" Graph "axis removed" "Numerically stable log(sum(exp(x))) over `axis`.";
    "layernorm_safe" "(x, eps=1e-5, weight=None, bias=None)" Graph "same shape" "LayerNorm over the last dim; weight and bias have the last dim's shape.";
    "rmsnorm_safe" "(x, eps=1e-6, weight=None)" Graph "same shape" "RMSNorm over the last dim; weight has the last dim's shape.";
    "transpose" "(x, axes=None)" Graph "permuted" "Permutes dims (reverses them when axes is None).";
    "reshape" "(x, shape)" Graph "shape" "Reshape; the element counts must be equal as polynomials.";
    "concat" "(xs, axis=0)" Graph "concatenated" "Concatenates a list of tensors along `axis`.";
    "split" "(x, n, axis=0)" Graph "tuple" "Splits `x` into `n` equal parts along `axis`.";
    "split_qkv" "(qkv, heads)" Graph "(q, k, v)" "[B,S,3*D] -> three [B,heads,S,D//heads] tensors.";
    "merge_heads" "(x)" Graph "[B, S, h*Dh]" "[B,h,S,Dh] -> [B,S,h*Dh].";
    "flash_attention" "(q, k, v=None, causal=False, dropout=0.0, scale=None)" Graph "[B, H, Sq, Dh]" "Fused attention: q [B,H,Sq,Dh], k/v [B,H,Sk,Dh] (or a KVCache as k) -> [B,H,Sq,Dh]; causal is bottom-right aligned (query i sees keys j <= i + Sk - Sq).";
    "dropout" "(x, p)" Graph "same shape" "Zeroes elements with probability p and rescales the rest (an effect: uses randomness).";
    "mse" "(pred, target)" Graph "rank-0 tensor" "Mean squared error: mean((pred - target) ** 2) over every element; equal shapes.";
    "cross_entropy" "(logits, target)" Graph "rank-0 tensor" "Cross entropy with class probabilities (or one-hot rows) along the last axis: the mean over rows of -sum(target * log_softmax(logits)); equal shapes.";
    "residual" "(x, y, dropout=0.0)" Graph "same shape" "x + dropout(y); x and y must have equal shapes (no broadcasting).";
    "cast" "(x, dtype)" Graph "same shape" "Converts to another dtype (policies of the target dtype apply).";
    "cast_like" "(x, ref)" Graph "same shape" "Converts x to ref's dtype.";
    "zeros" "(shape, dtype=f32)" Graph "tensor" "A new tensor of zeros.";
    "ones" "(shape, dtype=f32)" Graph "tensor" "A new tensor of ones.";
    "full" "(shape, value, dtype=f32)" Graph "tensor" "A new tensor filled with `value`.";
    "randn" "(shape, dtype=f32, seed=None)" Graph "tensor" "Standard normal samples (an effect: uses randomness).";
    "arange" "(n, dtype=i32)" Graph "tensor" "0, 1, ..., n-1.";
    "grad" "(f, wrt=None)" Graph "function" "For an @autodiff function returning a rank-0 float tensor: a function that returns one gradient per selected floating parameter.";
    "checkpoint" "(f)" Graph "function" "f, whose intermediate values grad recomputes in the backward pass instead of keeping them (rematerialization); the same values and gradients.";
    "remat" "(f)" Graph "function" "Another name for checkpoint(f).";
    "custom_vjp" "(f, backward)" Graph "function" "f, whose gradients grad takes from backward(*args, g) (f's arguments, then the gradient of f's result), one per float tensor parameter of f, instead of differentiating f.";
    "scan" "(f, init, xs)" Graph "(carry, ys)" "f(carry, x) over the first axis of xs (a constant, unrolled): returns the last carry and the ys stacked along a new first axis.";
    "vmap" "(f, in_axes=0, out_axes=0)" Graph "function" "f mapped over an axis of its arguments: in_axes is an axis (every parameter) or a tuple of an axis or None per parameter; each output gets the mapped axis at out_axes.";
    "jvp" "(f, primals, tangents)" Graph "(output, tangent)" "Forward mode: f(*primals) and its derivative along tangents (a tuple of one tensor per parameter, each of its primal's shape and dtype).";
    // ---- scalars and helpers ----
    "INF" - Any "float" "Positive infinity.";
    "NAN" - Any "float" "Not a number.";
    "float" "(x)" Any "float" "Converts to a Python float (also a parameter annotation); `float(\"inf\")`, `float(\"-inf\")` and `float(\"nan\")` are constants, as in Python.";
    "int" "(x)" Any "int" "Converts to a Python int (also a parameter annotation; an int parameter is a dim symbol).";
    "bool" "(x)" Any "bool" "Converts to a bool (also a parameter annotation).";
    "cdiv" "(a, b)" Any "int" "Ceiling division: (a + b - 1) // b.";
    "len" "(t)" Any "int" "The first dim of a tensor, or the length of a tuple or list.";
    "range" "(start, stop=None, step=1)" Any "range" "A compile-time loop (unrolled).";
    "dict" "(**items)" Any "dict" "A dict of compile-time values (autotune spaces).";
    // ---- types ----
    "Tensor" - Type "type" "A device tensor: Tensor[dims..., dtype @policies]. Dims are ints or strings (\"M\", \"B*H\").";
    "KTile" - Type "type" "A tensor seen from inside a kernel: KTile[dims..., dtype]. Checked like Tensor.";
    "KVCache" - Type "type" "A key/value cache: KVCache[B, H, S_max, D_h, dtype] @policies, of length NAME.len. Has .append(k, v) (a new cache), .K, .V ([B, H, len, D_h]), .prune(n) (the last n positions).";
    "OptimizerState" - Type "type" "Adam's state for a parameter: OptimizerState[W] @policies. Has .m, .v, .step, .master (@fp32_master) and .adam(W, g, lr=...) -> (W', state').";
    // ---- decorators ----
    "kernel" - Decorator "decorator" "A tile kernel: the body runs once per tile program of the launch grid.";
    "kernel.autotune" "(space, metric=\"latency_ms\", budget_ms=None, cache=None)" Decorator "decorator" "A kernel with a schedule search space: space=dict(KEY=[candidates, ...]).";
    "kernel.schedule" "(schedule)" Decorator "decorator" "A kernel with an explicit schedule.";
    "kernel.auto" - Decorator "decorator" "A kernel with the target's default search space.";
    "jit" - Decorator "decorator" "A graph function, compiled as a whole (fusion, memory planning).";
    "autodiff" - Decorator "decorator" "A differentiable graph function: grad(f) is defined for it.";
    "verify.numerics" "(stable=False, bounded=None, allow_nonfinite=False)" Decorator "decorator" "Runtime numerics checks (NaN/Inf, bounds; allow_nonfinite=True expects NaN/Inf); static warnings where provable (W0407).";
    // ---- schedules and distribution ----
    "Schedule" "(block=None, k=None, warps=None, stages=None, vector=None, swizzle=None, d=None, mma=None, copy=None, producer=None, cluster=None)" Any "Schedule" "A schedule value: block=(BM, BN), k=BK, warps, stages, vector, swizzle=\"xor\"|\"none\", mma=\"mma.sync\"|\"wgmma\", copy=\"cp.async\"|\"tma\", producer=\"none\"|\"warpgroup\"|\"pingpong\", cluster=(x, y) (a thread-block cluster over the grid's first two axes; TMA multicast, sm_90). Methods with_block/with_k/with_warps/with_stages/with_vector/with_swizzle/with_mma/with_copy/with_producer/with_cluster return a new schedule.";
    "block" "(m, n)" Any "Schedule" "Starts a Halide-style schedule chain: block(128, 128).k(64).warps(8).stages(3).";
    "ShardSpec" "(partition, mesh_axes)" Any "ShardSpec" "How a distributed tensor is split across mesh axes.";
    "dist.mesh" "(devices, axes, shape)" Any "mesh" "A device mesh: the product of shape must equal the number of devices.";
    "dist.tensor" "(shape, layout, mesh, dtype=\"f32\")" Any "distributed tensor" "A tensor sharded over a mesh by a ShardSpec.";
    "dist.pipeline" "(stage, *, stages, microbatches, axis)" Graph "function" "Pipeline parallelism: a function called like `stage`, with each tensor parameter after the first stacked per stage ([stages, ...]); it splits the first argument's dim 0 into `microbatches` and runs stage k (with slice k of the stacked parameters) on the devices at position k of mesh axis `axis`, a GPipe schedule. The value is `stage` applied `stages` times to each microbatch.";
    "dist.all_reduce" "(x, axis)" Graph "same value" "Completes x, a partial sum (or max, min) over mesh axis `axis`: afterwards every device of the axis holds the total. The value is x's (Graph IR is the global view); x must be partial over `axis`.";
    "dist.all_gather" "(x, axis)" Graph "same value" "Makes the dim of x that is split over mesh axis `axis` whole on every device of the axis. The value is x's; x must be split over `axis`.";
    "dist.reduce_scatter" "(x, axis, *, dim)" Graph "same value" "Completes x, a partial sum over mesh axis `axis`, and leaves each device of the axis its block of dim `dim`. The value is x's.";
    "dist.all_to_all" "(x, axis, *, split_dim, concat_dim)" Graph "same value" "Moves x's split over mesh axis `axis` from dim `concat_dim` to dim `split_dim`: each device sends block j of its split_dim to device j of the axis and concatenates what it receives along concat_dim. The value is x's.";
    "device" "(kind)" Graph "placement" "`with device(gpu):` places the block's values (an effect recorded in Graph IR).";
    "gpu" - Any "device" "The GPU device kind.";
    "cpu" - Any "device" "The CPU device kind.";
    "prefetch" "(obj, into=\"smem\", overlap=\"compute\")" Graph "placement" "`with prefetch(x, into=\"smem\"):` moves data ahead of use; into is \"smem\", \"l2\" or \"hbm\".";
    // ---- policies (type position, after `@`) ----
    "accum" "(dtype)" Type "policy" "Accumulate products and sums in `dtype` (at least as wide as the storage). fp8 dots on Hopper tensor cores (`mma=\"wgmma\"`) sum each chunk of up to 128 products at about 14 bits, then add it in `dtype`.";
    "stochastic_round" - Type "policy" "Round stochastically when storing (bf16/f16/fp8 only).";
    "loss_scale" "(k)" Type "policy" "Scale gradients by k > 0 (a power of two keeps it exact).";
    "saturate" - Type "policy" "Clamp out-of-range values to the largest finite value (fp8/int only).";
    "fp32_master" - Type "policy" "Keep an f32 master copy (state objects only).";
    "paged" - Type "policy" "Allocate in pages (state objects only).";
    "checkpointable" - Type "policy" "Save with checkpoints (state objects only).";
    "rolling_window" - Type "policy" "Evict the oldest entries when full (state objects only).";
    // ---- tile intrinsics ----
    "tile.parallel" "(start, stop, step=1)" Kernel "grid axis" "A grid axis: each tile program gets one value. Only at the top of a kernel body (nested up to 3 deep).";
    "tile.range" "(start, stop, step=1, prefetch=None)" Kernel "sequential range" "A sequential loop inside one tile program; loads in it are pipelined `stages` deep.";
    "tile.range_n" "(extent, step, prefetch=None)" Kernel "sequential range" "Iterates block offsets 0, step, 2*step, ... below extent.";
    "tile.program_id" "(axis=0)" Kernel "int" "This tile program's index along a grid axis.";
    "tile.num_programs" "(axis=0)" Kernel "int" "The number of tile programs along a grid axis.";
    "tile.linear_id" "()" Kernel "tile<BLOCKxi32>" "Element indices pid*BLOCK + arange(BLOCK); makes the grid 1-D over the tensors it indexes. `i < n` is then a mask.";
    "tile.context" "()" Kernel "context" "The schedule: ctx.BM, ctx.BN, ctx.BK, ctx.BD, ctx.warps, ctx.stages, ctx.vector, every autotune key, and every signature symbol.";
    "tile.load" "(src, mask=None, other=0, vector=None, prefetch=None, rows=None, cols=None)" Kernel "tile" "Loads a slice of a global tensor or a shared buffer into a register tile; out-of-bounds elements read `other`.";
    "tile.store" "(dst, value, mask=None)" Kernel "" "Stores a tile into a slice of a global tensor; out-of-bounds elements are dropped.";
    "tile.atomic_add" "(dst, value, mask=None)" Kernel "" "Adds a tile into a slice of a global tensor (or, by an index tile, its elements: a histogram), element by element atomically: programs may add into the same elements (split-K, column sums). f32, f64, i32 and i64; out-of-bounds elements are dropped.";
    "tile.alloc_shared" "(shape, dtype, swizzle=\"none\", pad=0)" Kernel "shared buffer" "A shared-memory buffer; `pad` adds elements to each row, swizzle=\"xor\" permutes 16-byte chunks to avoid bank conflicts.";
    "tile.cp_async" "(dst, src)" Kernel "" "Asynchronous global -> shared copy; the data is visible to the block after tile.barrier().";
    "tile.barrier" "()" Kernel "" "Waits for this thread's async copies, then synchronizes the block (bar.sync).";
    "tile.zeros" "(shape, dtype=f32)" Kernel "tile" "A new tile of zeros.";
    "tile.full" "(shape, value, dtype=f32)" Kernel "tile" "A new tile filled with `value`.";
    "tile.arange" "(n)" Kernel "tile<nxi32>" "The tile 0, 1, ..., n-1.";
    "tile.rand" "(shape, seed, offsets)" Kernel "tile<f32>" "Uniform numbers in [0, 1), one per element, from a counter-based hash of (seed, offsets + element coordinates): the same seed and coordinates give the same number in every kernel and on every backend.";
    "tile.dot" "(a, b, acc=None)" Kernel "tile" "Tile matmul: [M,K] x [K,N] -> [M,N] f32 (i32 for int8/int4, f64 for f64); with `acc` (Triton's `tl.dot(a, b, acc)`), acc + a@b in acc's dtype. On GPUs, f16, bf16, fp8 and int8 operands run on tensor cores when M is a multiple of 16, N of 8 and K of 16 (32 for 8-bit); other dims, and f32/tf32/f64 operands, run as FMAs.";
    "tile.mma" "(a, b, accumulator=f32)" Kernel "tile" "Like tile.dot; with an accumulator tile, returns acc + a@b.";
    "tile.transpose" "(t)" Kernel "tile" "Swaps the two dims of a 2-D tile (same as t.T).";
    "tile.broadcast" "(t, shape)" Kernel "tile" "Broadcasts a tile to `shape`.";
    "tile.cast" "(t, dtype, uniform=None)" Kernel "tile" "Converts a tile to another dtype (round to nearest even). `uniform=`: an f32 tile of `t`'s shape with numbers in [0, 1), the draws a `@stochastic_round` conversion uses instead of its own.";
    "tile.exp" "(x)" Kernel "tile" "Elementwise e^x.";
    "tile.log" "(x)" Kernel "tile" "Elementwise natural logarithm.";
    "tile.exp2" "(x)" Kernel "tile" "Elementwise 2^x (Triton's `tl.exp2`; attention kernels fold log2(e) into their scale). Computed as e^(x ln 2).";
    "tile.log2" "(x)" Kernel "tile" "Elementwise base-2 logarithm (Triton's `tl.log2`). Computed as ln(x) / ln 2.";
    "tile.sqrt" "(x)" Kernel "tile" "Elementwise square root.";
    "tile.floor" "(x)" Kernel "tile" "Elementwise floor: the largest integer not above x, as a float of x's dtype (`torch.floor`).";
    "tile.ceil" "(x)" Kernel "tile" "Elementwise ceiling: the smallest integer not below x, as a float of x's dtype (`torch.ceil`).";
    "tile.round" "(x)" Kernel "tile" "Elementwise rounding to the nearest integer, halves to even (`torch.round`, CUDA's `rintf`): 2.5 is 2.0, -0.5 is -0.0. What an int8 quantizer needs before `tile.cast`, which truncates toward zero.";
    "tile.rsqrt" "(x)" Kernel "tile" "Elementwise 1/sqrt(x).";
    "tile.tanh" "(x)" Kernel "tile" "Elementwise tanh.";
    "tile.sigmoid" "(x)" Kernel "tile" "Elementwise sigmoid.";
    "tile.relu" "(x)" Kernel "tile" "Elementwise max(x, 0).";
    "tile.gelu" "(x)" Kernel "tile" "Elementwise GELU (tanh approximation).";
    "tile.silu" "(x)" Kernel "tile" "Elementwise x*sigmoid(x).";
    "tile.abs" "(x)" Kernel "tile" "Elementwise absolute value.";
    "tile.maximum" "(a, b)" Kernel "tile" "Elementwise maximum with broadcasting.";
    "tile.minimum" "(a, b)" Kernel "tile" "Elementwise minimum with broadcasting.";
    "tile.where" "(cond, a, b)" Kernel "tile" "Selects a where cond is true, else b.";
    "tile.row_max" "(t)" Kernel "tile" "Maximum of each row: [M, N] -> [M].";
    "tile.row_sum" "(t)" Kernel "tile" "Sum of each row: [M, N] -> [M].";
    "tile.sum" "(t, axis=-1)" Kernel "tile" "Sum over one axis.";
    "tile.max" "(t, axis=-1)" Kernel "tile" "Maximum over one axis.";
    "tile.min" "(t, axis=-1)" Kernel "tile" "Minimum over one axis.";
    "tile.causal_mask" "(s, q_off, k_off)" Kernel "tile" "Sets s[i, j] = -inf where k_off + j > q_off + i.";
    "tile.mask_causal" "(s, q_off, k_off)" Kernel "tile" "Alias of tile.causal_mask.";
    "tile.softmax_online" "(s)" Kernel "(p, m_c, l_c)" "One online-softmax step: p = exp(s - rowmax), with the row max m_c and row sum l_c.";
    "tile.softmax_accumulate" "(acc, m, l, p, v, m_c, l_c)" Kernel "(acc, m, l)" "Rescales acc and l to the new running max and adds p @ v (flash attention).";
    "tile.row_index" "()" Kernel "tile" "Row indices of the current tile (for masks).";
    "tile.col_index" "(off=0)" Kernel "tile" "Column indices of the current tile plus `off` (for masks).";
}

/// The Tessera built-in for a name kernel engineers bring from PyTorch, JAX or NumPy
/// (`softmax` is `softmax_safe`), for E0200's fix where no defined name is close.
pub fn familiar_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "softmax" => "softmax_safe",
        "logsumexp" => "logsumexp_safe",
        "layernorm" | "layer_norm" | "LayerNorm" => "layernorm_safe",
        "rmsnorm" | "rms_norm" | "RMSNorm" => "rmsnorm_safe",
        "swish" | "SiLU" => "silu",
        "mm" | "bmm" | "dot" => "matmul",
        "mse_loss" => "mse",
        "scaled_dot_product_attention" | "sdpa" => "flash_attention",
        "transpose_" | "permute" => "transpose",
        "clamp_max" => "minimum",
        "clamp_min" => "maximum",
        _ => return None,
    })
}

/// The `tile` member for a name kernel engineers bring from Triton's `tl` or CUDA
/// (`tl.trans` is `tile.transpose`), for E0201's fix: edit distance alone offers
/// `tile.tanh` for `tile.trans`.
pub fn familiar_tile_member(name: &str) -> Option<&'static str> {
    Some(match name {
        "trans" | "permute" => "transpose",
        "debug_barrier" | "syncthreads" | "__syncthreads" => "barrier",
        "static_range" => "range",
        "expand_dims" | "broadcast_to" => "broadcast",
        "to" | "astype" => "cast",
        "reduce_max" | "amax" => "max",
        "reduce_sum" => "sum",
        "zeros_like" => "zeros",
        "copy_async" | "async_copy" => "cp_async",
        _ => return None,
    })
}

/// For a function of Triton's `tl` (or NumPy) that `tile` lacks: what to write instead
/// (empty when there is nothing yet). E0201 then offers no edit-distance fix, which would compile
/// into another function (`tile.erf` to `tile.exp`, `tile.fma` to `tile.mma`).
pub fn missing_triton_function(name: &str) -> Option<&'static str> {
    Some(match name {
        "fma" => "write `a * b + c`",
        "clamp" => "write `tile.minimum(tile.maximum(x, lo), hi)`",
        "exp10" | "log10" => "write `tile.exp(x * 2.302585092994046)` or `tile.log(x) / 2.302585092994046`",
        // The first index of a row's max: what `tests/fixtures/triton/argmax.tsr` writes.
        "argmax" => {
            "write the first index of the max as `tile.min(tile.where(x == tile.max(x, 1)[:, None], cols[None, :], N), 1)` \
             with `cols = c0 + tile.arange(ctx.BN)` and a load padded with `other=-INF`"
        }
        "argmin" => {
            "write the first index of the min as `tile.min(tile.where(x == tile.min(x, 1)[:, None], cols[None, :], N), 1)` \
             with `cols = c0 + tile.arange(ctx.BN)` and a load padded with `other=INF`"
        }
        "cumsum" | "cumprod" | "associative_scan" | "sort" | "flip" | "histogram" | "erf"
        | "cos" | "sin" | "umulhi" | "atomic_max" | "atomic_min" | "atomic_cas" | "atomic_xchg" | "div_rn" | "fdiv"
        | "sqrt_rn" | "interleave" | "join" | "split" => "",
        _ => return None,
    })
}

/// Looks up a built-in by its canonical path.
pub fn lookup(path: &str) -> Option<&'static Builtin> {
    static INDEX: OnceLock<HashMap<&'static str, &'static Builtin>> = OnceLock::new();
    INDEX.get_or_init(|| BUILTINS.iter().map(|b| (b.path, b)).collect()).get(path).copied()
}

/// Whether the built-in `path` (`grad`, `dist.mesh`, `tile.load`) exists and declares a
/// parameter `param`: evaluated at compile time by the checker's `arg!` macro, so that
/// renaming or removing a parameter in [`BUILTINS`] fails the build where its rule reads
/// it, instead of panicking there.
pub const fn has_param(path: &str, param: &str) -> bool {
    let (path, param) = (path.as_bytes(), param.as_bytes());
    let mut i = 0;
    while i < BUILTINS.len() {
        let b = &BUILTINS[i];
        if bytes_eq(b.path.as_bytes(), path) {
            return match b.params {
                Some(params) => params_declare(params.as_bytes(), param),
                None => false,
            };
        }
        i += 1;
    }
    false
}

const fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && tail_eq(a, 0, b)
}

/// `a[from..] == b` (the lengths are the caller's to check).
const fn tail_eq(a: &[u8], from: usize, b: &[u8]) -> bool {
    let mut i = 0;
    while i < b.len() {
        if from + i >= a.len() || a[from + i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether a parameter list `(a, b=1, *, c=(1, 2), **kw)` declares `param`.
const fn params_declare(p: &[u8], param: &[u8]) -> bool {
    let mut depth = 0;
    let mut at_name = false;
    let mut i = 0;
    while i < p.len() {
        let c = p[i];
        if at_name && depth == 1 && c != b' ' && c != b'*' {
            let end = i + param.len();
            if end <= p.len()
                && tail_eq(p, i, param)
                && (end == p.len() || !(p[end].is_ascii_alphanumeric() || p[end] == b'_'))
            {
                return true;
            }
            at_name = false;
        }
        match c {
            b'(' | b'[' | b'{' => {
                depth += 1;
                at_name = depth == 1;
            }
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 1 => at_name = true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Top-level built-in names (the prelude that is in scope everywhere).
pub fn prelude_names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().filter(|b| !b.path.contains('.')).map(|b| b.path)
}

/// Members of a namespace (`tile` → load, store, ...).
pub fn members(namespace: &str) -> impl Iterator<Item = &'static Builtin> + '_ {
    BUILTINS.iter().filter(move |b| {
        b.path.strip_prefix(namespace).and_then(|r| r.strip_prefix('.')).is_some_and(|r| !r.contains('.'))
    })
}

/// Graph-level ops that have a tile equivalent, for E0503 hints.
pub fn tile_equivalent(graph_op: &str) -> Option<&'static str> {
    Some(match graph_op {
        "softmax_safe" => "tile.softmax_online (or tile.exp / tile.row_max / tile.row_sum)",
        "matmul" | "gemm" => "tile.dot",
        "flash_attention" => "the flash-attention loop with tile.dot and tile.softmax_online",
        "sum" => "tile.sum / tile.row_sum",
        "max" => "tile.max / tile.row_max",
        "min" => "tile.min",
        "mean" => "tile.row_sum(...) / n",
        "transpose" => "tile.transpose (or t.T)",
        "cast" => "tile.cast",
        "zeros" => "tile.zeros",
        "full" => "tile.full",
        "arange" => "tile.arange",
        "layernorm_safe" | "rmsnorm_safe" => "tile.row_sum and tile.rsqrt",
        "logsumexp_safe" => "tile.row_max, tile.exp and tile.row_sum",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_param_reads_the_table() {
        assert!(has_param("grad", "f"));
        assert!(has_param("grad", "wrt"));
        assert!(!has_param("grad", "w"));
        assert!(has_param("prefetch", "into"));
        assert!(has_param("prefetch", "overlap"));
        assert!(has_param("sum", "keepdim"));
        assert!(!has_param("tile.sum", "x"));
        assert!(!has_param("no.such.builtin", "x"));
        // Defaults with brackets do not end the parameter list early.
        assert!(BUILTINS.iter().all(|b| b.param_specs().iter().all(|p| has_param(b.path, p.name))));
    }

    #[test]
    fn signatures_parse() {
        let load = lookup("tile.load").unwrap();
        let names: Vec<&str> = load.param_specs().iter().map(|p| p.name).collect();
        assert_eq!(names, ["src", "mask", "other", "vector", "prefetch", "rows", "cols"]);
        assert_eq!(load.param_specs()[2].default, Some("0"));
        let dict = lookup("dict").unwrap();
        assert!(dict.param_specs()[0].var_keyword);
        assert!(members("tile").any(|b| b.name() == "cp_async"));
        assert!(members("kernel").any(|b| b.name() == "autotune"));
        assert!(!members("tile").any(|b| b.path == "gelu"));
    }

    #[test]
    fn paths_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for b in BUILTINS {
            assert!(seen.insert(b.path), "duplicate built-in {}", b.path);
        }
    }
}
