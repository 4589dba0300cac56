//! The generated PTX, executed by a small emulator of the PTX subset `passes::ptx`
//! emits, against the reference interpreter on the same GPU Tile IR and inputs.
//!
//! No GPU is needed: this checks what the code computes — register use across
//! loops and branches, predicates and bounds, address and swizzle arithmetic (the
//! `cp.async` writer and the `ldmatrix` reader of each buffer must agree), vector
//! paths and their fallbacks, shuffles, barriers and asynchronous-copy ordering
//! (copies land only at `cp.async.wait_group`). Warp-collective instructions follow
//! the PTX ISA (`mma` fragments §9.7.14.5.8/10, `ldmatrix` §9.7.14.5.15, `shfl.sync`),
//! so this cannot find a misreading of those tables — `passes::ptx` checks its use of
//! them against the layouts separately. Every global and shared access is bounds- and
//! alignment-checked; reading a register never written is an error.

#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_backends::interp::inputs::{seeded, set_scalar};
use tessera_backends::interp::{compare_outputs, run_kernel};
use tessera_backends::tensor::Arg;
use tessera_frontend::check::{fn_signature, DType, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::codegen::TargetCode;
use tessera_passes::{default_config, tile_ir, Target};

// The emulator, in `cuda_emulator/` (a test crate's root looks for its modules beside
// itself, hence the paths).
#[path = "cuda_emulator/cluster.rs"]
mod cluster;
#[path = "cuda_emulator/cluster_tests.rs"]
mod cluster_tests;
#[path = "cuda_emulator/decode.rs"]
mod decode;
#[path = "cuda_emulator/execute.rs"]
mod execute;
#[path = "cuda_emulator/f64_math_tests.rs"]
mod f64_math_tests;
#[path = "cuda_emulator/instructions.rs"]
mod instructions;
#[path = "cuda_emulator/random_schedules.rs"]
mod random_schedules;
#[path = "cuda_emulator/tma.rs"]
mod tma;
#[path = "cuda_emulator/warp_spec_tests.rs"]
mod warp_spec_tests;
#[path = "cuda_emulator/wgmma.rs"]
mod wgmma;
#[path = "cuda_emulator/wgmma_tests.rs"]
mod wgmma_tests;
// The Hopper cases, shared with the GPU test (`cuda.rs`).
mod hopper_cases;
#[path = "../../tests/support/kernel_sources.rs"]
mod kernel_sources;

use execute::emulate;
use kernel_sources::Source;

const SEED: u64 = 7;

// ----- the kernels -------------------------------------------------------------------

/// Kernels for the ops and types the corpus does not reach: every float function, 16-
/// and 8-bit floats, casts to fp8 and integers, integer arithmetic, reductions across
/// warps, register transposes through shared memory, FMA dots, int8 and f16 tensor-core
/// dots (with a transposed B), shared buffers read in a blocked layout.
const OPS: &str = r#"from tessera import *

# Python's `%` (the divisor's sign) and `//` (floor) for negative operands and divisors,
# by constants and by a tile (odd, so never zero).
@kernel.schedule(Schedule(block=(64, 64), warps=4))
def remainders(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32], A: Tensor["R", "C", f32], I: Tensor["R", "C", i32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN]) * 8.0
            y = tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            A[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = x % -2.5 + (x % 1.75) * 10.0
            i = tile.cast(x, i32)
            j = tile.cast(y * 4.0, i32) * 2 + 1
            I[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = i % -3 + (i // -3) * 10 + (i % 5) * 1000 + (i % j) * 100000 + (i // j) * 10000000

# Integer rounding of floats (`cvt.rmi`, `.rpi`, `.rni`): `h` is a multiple of 1/2, so
# half of its values are ties, which `tile.round` takes to the even neighbour.
@kernel.schedule(Schedule(block=(64, 64), warps=4))
def rounding(X: Tensor["R", "C", f32], F: Tensor["R", "C", f32], G: Tensor["R", "C", f16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN]) * 8.0
            h = tile.floor(x) / 2.0
            F[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.round(h) * 100.0 + tile.ceil(x) + tile.floor(x) * 0.5
            G[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.round(tile.cast(h, f16))

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def dropout_mask(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32], p: f32, seed: int):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            u = tile.rand((ctx.BM, ctx.BN), seed, (7, r0, c0))
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.where(u >= p, x / (1.0 - p), u)

@kernel.schedule(Schedule(block=(64, 64), warps=4))
def float_math(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32], Z: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            y = tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN], other=1.0)
            a = tile.exp(x) + tile.log(tile.abs(y) + 1.0) + tile.sqrt(tile.abs(x)) + tile.rsqrt(tile.abs(y) + 1.0)
            b = tile.tanh(x) * tile.sigmoid(y) - tile.relu(x) + tile.gelu(y) + tile.silu(x)
            c = tile.maximum(a, b) / tile.minimum(a + 2.0, b + 3.0) - x ** 2
            d = tile.where(x > y, c, -c)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = d

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def narrow_math(X: Tensor["R", "C", bf16], Y: Tensor["R", "C", f16], Z: Tensor["R", "C", bf16], W: Tensor["R", "C", f16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            y = tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            z = tile.exp(x) * x + tile.cast(y, bf16)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = z
            W[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(tile.cast(z, f32) * 0.5, f16)

@kernel.schedule(Schedule(block=(16, 128), warps=4))
def casts(X: Tensor["R", "C", f32], A: Tensor["R", "C", fp8_e4m3], B: Tensor["R", "C", fp8_e5m2], I: Tensor["R", "C", int8], J: Tensor["R", "C", i32], Y: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            a = tile.cast(x, fp8_e4m3)
            b = tile.cast(x, fp8_e5m2)
            i = tile.cast(x, int8)
            j = tile.cast(x * 100.0, i32)
            A[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = a
            B[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = b
            I[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = i
            J[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = j // 3 + j % 7
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(a, f32) + tile.cast(b, f32) + tile.cast(i, f32) + tile.cast(j, f32)

@kernel.schedule(Schedule(block=(64, 128), warps=4))
def row_sums(X: Tensor["R", "C", f32], S: Tensor["R", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:ctx.BN])
        S[r0:r0 + ctx.BM] = tile.sum(x, 1)

@kernel.schedule(Schedule(block=(64, 32), warps=4))
def col_stats(X: Tensor["R", "C", f32], M: Tensor["C", f32]):
    ctx = tile.context()
    for c0 in tile.parallel(0, C, ctx.BN):
        x = tile.load(X[0:ctx.BM, c0:c0 + ctx.BN], other=0.5)
        M[c0:c0 + ctx.BN] = tile.max(x, 0) + tile.min(x, 0)

@kernel.schedule(Schedule(block=(64, 32), warps=4))
def transpose(X: Tensor["R", "C", f32], T: Tensor["C", "R", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            T[c0:c0 + ctx.BN, r0:r0 + ctx.BM] = x.T

@kernel.schedule(Schedule(block=(32, 48), k=16, warps=4))
def odd_dot(A: Tensor["M", "K", f32], B: Tensor["K", "N", f32], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@kernel.schedule(Schedule(block=(64, 64), k=64, warps=4, stages=2))
def int8_gemm(A: Tensor["M", "K", int8], B: Tensor["K", "N", int8], C: Tensor["M", "N", i32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), i32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, stages=3))
def f16_gemm_bt(A: Tensor["M", "K", f16], B: Tensor["N", "K", f16], C: Tensor["M", "N", f16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[n0:n0 + ctx.BN, k0:k0 + ctx.BK]).T)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(acc, f16)

@kernel.schedule(Schedule(block=(64, 64), warps=4))
def shared_roundtrip(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BM):
            s = tile.alloc_shared((ctx.BM, ctx.BM), f32, pad=4)
            tile.cp_async(s, X[r0:r0 + ctx.BM, c0:c0 + ctx.BM])
            tile.barrier()
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BM] = tile.load(s).T

# Shift amounts from [-8, 8) * 5 and * 9: negative and past the width, where every bit
# is shifted out (PTX clamps; the 64-bit amount is clamped before it is narrowed, so
# s * 2^32 + 1 does not shift by 1).
@kernel.schedule(Schedule(block=(32, 64), warps=4))
def bitwise(X: Tensor["R", "C", i32], S: Tensor["R", "C", i32], Y: Tensor["R", "C", i32], W: Tensor["R", "C", i64], B: Tensor["R", "C", int8]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN]) * 123457 + 7
            s = tile.load(S[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = ((x >> 3) ^ (x << (s * 5))) & 0xFFFF | (~x >> (s * 5)) ^ (x << 33)
            w = tile.cast(x, i64) * 1000003
            W[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = (w << (tile.cast(s, i64) * 9)) ^ (w >> (tile.cast(s, i64) * 9 + 10)) ^ (w << (tile.cast(s, i64) * 4294967296 + 1))
            b = tile.cast(x, int8)
            B[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = ((b << 3) >> 1) ^ -b

# A sum of squares in f64 from f32 data: the widening `cvt.f64.f32` takes no rounding
# modifier (ptxas refused `cvt.rn.f64.f32`), and the f64 atomic add.
@kernel.schedule(Schedule(block=(1, 1024), warps=4))
def sum_of_squares_f64(X: Tensor["N", f32], Out: Tensor["ONE", f64]):
    ctx = tile.context()
    for n0 in tile.parallel(0, N, ctx.BN):
        x = tile.cast(tile.load(X[n0:n0 + ctx.BN]), f64)
        tile.atomic_add(Out[0:1], tile.sum((x * x)[None, :], 1))

@kernel.schedule(Schedule(block=(16, 128), warps=4))
def cross_entropy(X: Tensor["T", "V", f32], Labels: Tensor["T", i32], Loss: Tensor["T", f32]):
    ctx = tile.context()
    for t0 in tile.parallel(0, T, ctx.BM):
        labels = tile.load(Labels[t0:t0 + ctx.BM])
        m = tile.full((ctx.BM,), -float("inf"), f32)
        l = tile.zeros((ctx.BM,), f32)
        picked = tile.zeros((ctx.BM,), f32)
        for v0 in tile.range(0, V, ctx.BN):
            x = tile.load(X[t0:t0 + ctx.BM, v0:v0 + ctx.BN], other=-float("inf"))
            m_new = tile.maximum(m, tile.row_max(x))
            l = l * tile.exp(m - m_new) + tile.row_sum(tile.exp(x - m_new[:, None]))
            m = m_new
            cols = v0 + tile.arange(ctx.BN)
            picked += tile.row_sum(tile.where(cols[None, :] == labels[:, None], x, 0.0))
        Loss[t0:t0 + ctx.BM] = m + tile.log(l) - picked

# Reductions of booleans: a max is an "any", a min an "all", across lanes and warps (the
# 8 warps split the reduced axis) and within threads; padding past the edge is False.
@kernel.schedule(Schedule(block=(8, 256), warps=8))
def any_all(X: Tensor["R", "C", f32], Any: Tensor["R", i32], All: Tensor["R", i32], AnyCol: Tensor["C", i32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:ctx.BN], other=-1.0)
        Any[r0:r0 + ctx.BM] = tile.cast(tile.max(x > 2.0, 1), i32)
        cols = tile.arange(ctx.BN)
        All[r0:r0 + ctx.BM] = tile.cast(tile.min((x > -2.5) | (cols[None, :] >= C), 1), i32)
        tile.atomic_add(AnyCol[0:ctx.BN], tile.cast(tile.max(x > 1.5, 0), i32))

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def bias_grad(DY: Tensor["T", "N", f32], DB: Tensor["N", f32]):
    ctx = tile.context()
    for n0 in tile.parallel(0, N, ctx.BN):
        acc = tile.zeros((ctx.BN,), f32)
        for t0 in tile.range(0, T, ctx.BM):
            acc += tile.sum(tile.load(DY[t0:t0 + ctx.BM, n0:n0 + ctx.BN]), 0)
        DB[n0:n0 + ctx.BN] = acc
"#;

fn sources() -> Vec<Source> {
    let mut out = vec![Source { label: "ops.tsr".into(), path: PathBuf::from("ops.tsr"), text: OPS.to_string() }];
    out.extend(kernel_sources::repository_files());
    // The bitwise operators and the int4 weight GEMM they make (tests/python_numerics.rs
    // checks the same kernels on the interpreter and the CPU against Rust).
    // And `tile.atomic_add` (tests/atomics.rs): split-K GEMM, column sums whose row
    // vectors the threads hold replicated (each element must be added once).
    // The f64 kernels (an f64 GEMM sums in f64: `fma.rn.f64` through 8-byte scratch).
    // And gathers and scatters by index tiles into 2-D and 3-D tensors.
    // And a row argmax by `where(x == max[:, None], cols, C)` (the condition as wide as
    // the values), and `where` of numbers.
    for fixture in
        ["numerics/bitwise.tsr", "atomics/atomics.tsr", "numerics/f64.tsr", "gathers/gathers.tsr", "triton/argmax.tsr"]
    {
        let path = kernel_sources::repository_root().join("tests/fixtures").join(fixture);
        let text = std::fs::read_to_string(&path).unwrap();
        out.push(Source { label: fixture.into(), path, text });
    }
    out
}

/// Small shapes (the emulator is slow): one a multiple of the tiles, one ragged and
/// misaligned (odd row lengths take the element-by-element copy and access paths).
fn shapes(kernel: &str) -> &'static [&'static str] {
    match kernel {
        "gemm" | "small_matmul" | "narrow_matmul" | "linear_gelu" => {
            &["M=64,N=64,K=64", "M=70,N=36,K=40", "M=33,N=17,K=9"]
        }
        "fp8_gemm" => &["M=128,N=128,K=128", "M=40,N=72,K=80"],
        "softmax" | "layernorm" => &["R=2,C=512", "R=3,C=300", "R=2,C=77"],
        "flash_attention" => &["BH=1,S=64,D=64", "BH=1,S=100,D=64"],
        "saxpy" => &["n=1000"],
        "vector_add" => &["N=4096", "N=1001"],
        "float_math" | "narrow_math" | "casts" | "transpose" | "shared_roundtrip" | "dropout_mask" | "rounding"
        | "remainders" => &["R=64,C=128", "R=33,C=70"],
        "row_sums" => &["R=128,C=128", "R=70,C=100"],
        "col_stats" => &["R=64,C=96", "R=50,C=45"],
        "cross_entropy" => &["T=16,V=256", "T=20,V=300"],
        "bitwise" => &["R=64,C=128", "R=33,C=70"],
        "bit_ops" => &["N=1000"],
        "split_k_gemm" => &["M=64,N=64,K=192", "M=40,N=50,K=100"],
        "column_sums" => &["R=64,C=64", "R=70,C=100"],
        "histogram" => &["N=1000,NB=16"],
        "sum_of_squares_f64" => &["N=5000,ONE=1"],
        "f64_gemm" => &["M=64,N=64,K=32", "M=40,N=50,K=30"],
        "scale_f64" | "named_scale_f64" => &["N=1000"],
        "f32_sum_to_f64" => &["R=8,C=300"],
        "embedding_backward" => &["T=37,D=96,VD=1056"],
        "w4a16_gemm" => &["M=64,N=64,K=64,KN8=512", "M=40,N=50,K=48,KN8=300"],
        "bias_grad" => &["T=64,N=64", "T=70,N=100"],
        "any_all" => &["R=64,C=256", "R=37,C=200"],
        "embedding" | "embedding_grad" | "embedding_i64" => &["T=37,V=11,D=100"],
        "paged_gather" => &["NB=5,P=16,D=80,S=70,NS=5"],
        "permute_rows" => &["R=21,C=40"],
        "pick" => &["A=4,B=50,C=5,N=23"],
        "odd_dot" | "int8_gemm" => &["M=64,N=96,K=64", "M=40,N=50,K=36"],
        "row_argmax" | "signs" => &["R=32,C=128", "R=37,C=200"],
        // Three stages: K=200 goes around the ring twice (its slot is a remainder by 3).
        "f16_gemm_bt" => &["M=64,N=96,K=64", "M=40,N=50,K=36", "M=40,N=24,K=200"],
        _ => &[],
    }
}

fn check_kernel(
    label: &str,
    kernel: &str,
    func: &tessera_passes::ir::Func,
    code: &TargetCode,
    spec: &str,
) -> Vec<String> {
    let symbols: BTreeMap<String, i64> = spec
        .split(',')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let what = format!("{label} `{kernel}` {} [{spec}]", code.target);
    let abi = code.abi.clone();
    let mut inputs = match seeded(func, &symbols, SEED) {
        Ok(a) => a,
        Err(e) => return vec![format!("{what}: inputs: {e}")],
    };
    for (name, v) in [("eps", 1e-5), ("causal", 1.0), ("alpha", 1.5), ("scale", 0.5)] {
        let _ = set_scalar(&abi, &mut inputs, name, v);
    }
    let mut expected = inputs.clone();
    if let Err(e) = run_kernel(func, &mut expected) {
        eprintln!("SKIPPED {what}: no oracle: {e}");
        return Vec::new();
    }
    let mut actual = inputs.clone();
    match emulate(code, &mut actual) {
        Ok(steps) => eprintln!("{what}: {steps} warp steps"),
        Err(e) => return vec![format!("{what}: {e}")],
    }
    compare_outputs(func, &expected, &actual)
        .into_iter()
        .filter(|o| !o.comparison.passed)
        .map(|o| format!("{what}: output `{}`: {}", o.name, o.comparison))
        .collect()
}

#[test]
fn generated_ptx_computes_what_the_interpreter_computes() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    let ptxas = tessera_passes::ptx::ptxas::locate();
    let mut failures = Vec::new();
    let mut covered = 0;
    for Source { label, path, text } in sources() {
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone(), text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let kernel = entry.key.name(&db).to_string();
            if only.as_deref().is_some_and(|o| o != kernel) {
                continue;
            }
            let Ok((default, _)) = default_config(&db, entry.key, &BTreeMap::new()) else { continue };
            // The default and the last candidate of an autotune space (the largest tiles,
            // most warps and stages): both code shapes of every kernel.
            let mut configs = vec![default.clone()];
            let space = tessera_frontend::check::fn_decorators(&db, entry.key)
                .schedule
                .as_ref()
                .map(|s| s.configurations())
                .unwrap_or_default();
            if let Some(last) = space.last() {
                let last = tessera_passes::Config { schedule: last.clone(), shapes: default.shapes.clone() };
                if last != default {
                    configs.push(last);
                }
            }
            for config in configs {
                for target in [Target::Sm80, Target::Sm90] {
                    // A `wgmma` candidate the target cannot take is pruned, not lowered.
                    if tessera_passes::analysis::wgmma_problem(&db, entry.key, &config, target).is_some() {
                        continue;
                    }
                    let func = match tile_ir(&db, entry.key, config.clone(), target).clone() {
                        Ok(f) => f,
                        Err(e) => {
                            failures.push(format!("{label} `{kernel}`: tile IR: {}", e.message));
                            continue;
                        }
                    };
                    let code = match tessera_passes::ptx::emit(&func, target) {
                        Ok(c) => c,
                        Err(e) => {
                            failures.push(format!("{label} `{kernel}`: PTX: {}", e.message));
                            continue;
                        }
                    };
                    // The kernels only this test has (its own and the fixtures') are
                    // assembled here too; `passes/tests/ptx.rs` assembles the corpus's.
                    let own = !label.starts_with("valid/") && !label.starts_with("examples/");
                    if let (true, Some(ptxas)) = (own, &ptxas) {
                        if let Err(e) = tessera_passes::ptx::ptxas::assemble_with(ptxas, &code.text, target.name()) {
                            failures.push(format!("{label} `{kernel}` {target}: ptxas: {e}"));
                        }
                    }
                    for spec in shapes(&kernel) {
                        failures.extend(check_kernel(&label, &kernel, &func, &code, spec));
                        covered += 1;
                    }
                }
            }
        }
    }
    assert!(covered > 0);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

// ----- numerics policies -------------------------------------------------------------------

/// Kernels of every numerics policy (docs/ir.md, "Numerics policies"): conversions with
/// and without `@saturate` (overflow: NaN for e4m3, Inf for e5m2, wrapping integers),
/// stochastic rounding from the run's seed, and f16 accumulation in tensor-core and FMA
/// dots and in reductions.
const POLICIES: &str = r#"from tessera import *

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def policy_casts(X: Tensor["R", "C", f32], S: Tensor["R", "C", fp8_e4m3 @saturate], P: Tensor["R", "C", fp8_e4m3],
                 Q: Tensor["R", "C", fp8_e5m2], T: Tensor["R", "C", fp8_e5m2 @saturate], I: Tensor["R", "C", int8],
                 J: Tensor["R", "C", int8 @saturate], Z: Tensor["R", "C", bf16 @stochastic_round],
                 E: Tensor["R", "C", fp8_e4m3 @stochastic_round]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            big = x * 300.0
            huge = x * 40000.0
            S[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, fp8_e4m3)
            P[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, fp8_e4m3)
            Q[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(huge, fp8_e5m2)
            T[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(huge, fp8_e5m2)
            I[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, int8)
            J[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, int8)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x, bf16)
            E[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x * 8.0, fp8_e4m3)

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))
def f16_acc_gemm(A: Tensor["M", "K", f16 @accum(f16)], B: Tensor["K", "N", f16 @accum(f16)], C: Tensor["M", "N", f16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            c = tile.zeros((ctx.BM, ctx.BN), f16)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                c = tile.mma(a, b, accumulator=c)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = c

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))
def bf16_acc_gemm(A: Tensor["M", "K", bf16 @accum(bf16)], B: Tensor["K", "N", bf16 @accum(bf16)], C: Tensor["M", "N", bf16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            c = tile.zeros((ctx.BM, ctx.BN), bf16)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                c = tile.mma(a, b, accumulator=c)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = c

@kernel.schedule(Schedule(block=(4, 128), warps=4))
def f16_acc_rows(X: Tensor["R", "C", f16 @accum(f16)], Y: Tensor["R", f16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        s = tile.zeros((ctx.BM,), f16)
        for c0 in tile.range(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            s = s + tile.row_sum(x)
        Y[r0:r0 + ctx.BM] = s
"#;

fn same_bits(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// The PTX of every policy computes what the interpreter computes: conversions and
/// stochastic rounding bit for bit (NaN = NaN), f16 and bf16 accumulation within a few
/// ulp of the accumulator (the order of the additions differs: `mma` rounds once per k16
/// step, reductions combine per thread, then across lanes and warps).
#[test]
fn policies_in_ptx_compute_what_the_interpreter_computes() {
    let db = Database::default();
    let file = SourceFile::new(&db, PathBuf::from("policies.tsr"), POLICIES.to_string(), None);
    let mut failures = Vec::new();
    for entry in &item_index(&db, file).functions {
        let kernel = entry.key.name(&db).to_string();
        let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
        for target in [Target::Sm80, Target::Sm90] {
            let func =
                tile_ir(&db, entry.key, config.clone(), target).clone().unwrap_or_else(|e| panic!("{}", e.message));
            let code = tessera_passes::ptx::emit(&func, target).unwrap_or_else(|e| panic!("{kernel}: {}", e.message));
            let specs: &[&str] = match kernel.as_str() {
                "policy_casts" => &["R=64,C=128", "R=33,C=70"],
                "f16_acc_rows" => &["R=8,C=512"],
                _ => &["M=64,N=64,K=128"],
            };
            for spec in specs {
                let symbols: BTreeMap<String, i64> = spec
                    .split(',')
                    .map(|p| {
                        let (k, v) = p.split_once('=').unwrap();
                        (k.to_string(), v.parse().unwrap())
                    })
                    .collect();
                let inputs = seeded(&func, &symbols, SEED).unwrap();
                if let Some(slot) = code.abi.seed_slot() {
                    assert_eq!(inputs[slot], Arg::Index(SEED as i64), "the run's seed in the hidden parameter");
                }
                let mut expected = inputs.clone();
                run_kernel(&func, &mut expected).unwrap_or_else(|e| panic!("{kernel}: {e}"));
                let mut actual = inputs.clone();
                if let Err(e) = emulate(&code, &mut actual) {
                    failures.push(format!("{kernel} {target} [{spec}]: {e}"));
                    continue;
                }
                for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
                    let (Arg::Tensor(e), Arg::Tensor(a)) = (e, a) else { continue };
                    let (ev, av) = (e.to_f64(), a.to_f64());
                    let exact = kernel == "policy_casts";
                    // Rounding every step in a different order: within 2·√n ulp of the
                    // f16/bf16 accumulator (n additions) at the results' magnitude.
                    let n = symbols.get("K").or(symbols.get("C")).copied().unwrap_or(1) as f64;
                    let mbits = if e.dtype == DType::BF16 { 7 } else { 10 };
                    let top = ev.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
                    let tol = 2.0 * n.sqrt() * 2f64.powi(top.log2().floor() as i32 - mbits);
                    let bad = ev
                        .iter()
                        .zip(&av)
                        .position(|(&x, &y)| if exact { !same_bits(x, y) } else { (x - y).abs() > tol });
                    if let Some(at) = bad {
                        failures.push(format!(
                            "{kernel} {target} [{spec}] parameter {i}: element {at}: interpreter {:e}, PTX {:e}",
                            ev[at], av[at]
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

// ----- every candidate of an autotune space -------------------------------------------

/// Every configuration of the example flash attention's autotune space at head dim 128
/// (the benchmark's), at one ragged sequence length with several key blocks: on an H200
/// one candidate (BM=64, BN=128, 8 warps, 3 stages) never finished at D = 128, while
/// `cuda.rs` runs every candidate at D = 64 only.
#[test]
fn every_flash_attention_candidate_at_head_dim_128() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let path = root.join("examples/flash_attention.tsr");
    let text = std::fs::read_to_string(&path).unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, path.clone(), text, None);
    let entry = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "flash_attention").cloned().unwrap();
    let dims: BTreeMap<String, i64> = [("D".to_string(), 128)].into();
    let (default, _) = default_config(&db, entry.key, &dims).unwrap();
    let space = tessera_frontend::check::fn_decorators(&db, entry.key).schedule.as_ref().unwrap().configurations();
    // TESSERA_EMULATE_SCHEDULE='"BN": Int(128)' keeps the candidates whose schedule's
    // debug text contains it; TESSERA_EMULATE_SHAPE=BH=1,S=700,D=128 runs longer sequences
    // (more trips around the copy pipeline's stages).
    let only = std::env::var("TESSERA_EMULATE_SCHEDULE").ok();
    let shape = std::env::var("TESSERA_EMULATE_SHAPE").unwrap_or_else(|_| "BH=1,S=200,D=128".into());
    let mut failures = Vec::new();
    let mut covered = 0;
    for schedule in space {
        let config = tessera_passes::Config { schedule, shapes: default.shapes.clone() };
        let label = format!("{:?}", config.schedule);
        if only.as_deref().is_some_and(|o| !label.contains(o)) {
            continue;
        }
        let func = match tile_ir(&db, entry.key, config.clone(), Target::Sm90).clone() {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{label}: tile IR: {}", e.message));
                continue;
            }
        };
        let code = match tessera_passes::ptx::emit(&func, Target::Sm90) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{label}: PTX: {}", e.message));
                continue;
            }
        };
        failures.extend(check_kernel("examples/flash_attention.tsr", "flash_attention", &func, &code, &shape));
        covered += 1;
    }
    assert!(covered > 0);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

// ----- graph functions' launch plans ---------------------------------------------------

/// The GPU's launch-plan executor with the emulator in the GPU's place: the same PTX
/// (`kernel_code`) for every planned kernel.
struct EmulatedGpu {
    launches: usize,
}

impl tessera_backends::interp::graph::KernelExecutor for EmulatedGpu {
    fn launch(&mut self, tile_ir: &tessera_passes::ir::Func, args: &mut [Arg]) -> Result<(), String> {
        let code = tessera_backends::cuda::plan_executor::kernel_code(tile_ir, Target::Sm90)?;
        self.launches += 1;
        emulate(&code, args).map(|_| ()).map_err(|e| format!("`{}`: {e}", tile_ir.name))
    }
}

/// Graph functions of the examples and the corpus run through their launch plans with
/// every kernel's PTX emulated (what `tessera run --device gpu` launches), against the
/// plan on the Tile IR interpreter and against the f64 reference of the Graph IR.
#[test]
fn graph_plans_emulated_as_ptx_match_the_interpreter_and_the_reference() {
    use tessera_backends::interp::graph::{run_plan_with_dims, InterpExecutor};
    use tessera_backends::launch::graph::{graph_tolerance, GraphSession};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let cases = [
        ("examples/train_step.tsr", "mse_loss", "B=8,D=32,N=16", ""),
        ("examples/train_step.tsr", "sgd_step", "B=8,D=32,N=16", ""),
        ("examples/transformer_block.tsr", "transformer_block", "B=1,S=16,D=32,F=32", "heads=2,p=0.0"),
        ("tests/corpus/valid/transforms_vmap_jvp.tsr", "smooth", "M=16,K=16,N=16", ""),
        ("tests/corpus/valid/checkpoint_remat.tsr", "step", "M=16,N=16", ""),
    ];
    let mut failures = Vec::new();
    let mut launches = 0;
    for (file, function, dims, scalars) in cases {
        let path = root.join(file);
        let db = Database::default();
        let file_id = SourceFile::new(&db, path.clone(), std::fs::read_to_string(&path).unwrap(), None);
        let key = item_index(&db, file_id).functions.iter().find(|f| f.key.name(&db) == function).unwrap().key;
        let session = GraphSession::open(&db, key).unwrap_or_else(|e| panic!("{file} `{function}`: {e}"));
        let dims: BTreeMap<String, i64> = dims
            .split(',')
            .map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.parse().unwrap())).unwrap())
            .collect();
        let scalars: Vec<(String, String)> = scalars
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
            .collect();
        let inputs = session.seed(&dims, &scalars, 3).unwrap_or_else(|e| panic!("{file} `{function}`: {e}"));
        let seed = inputs.seed as i64;
        let mut gpu = EmulatedGpu { launches: 0 };
        let emulated = run_plan_with_dims(&db, key, Target::Sm90, &inputs.args, &inputs.symbols, seed, &mut gpu);
        let mut interp = InterpExecutor::default();
        let interpreted = run_plan_with_dims(&db, key, Target::Sm90, &inputs.args, &inputs.symbols, seed, &mut interp);
        launches += gpu.launches;
        let (emulated, interpreted) = match (emulated, interpreted) {
            (Ok(e), Ok(i)) => (e, i),
            (e, i) => {
                failures.push(format!("{file} `{function}`: emulated {:?}, interpreted {:?}", e.err(), i.err()));
                continue;
            }
        };
        // The f64 reference, through the session's own run on the interpreter.
        let reference =
            session.run(&inputs, &Default::default()).unwrap_or_else(|e| panic!("{file} `{function}`: {e}")).reference;
        for (i, ((e, t), r)) in emulated.iter().zip(&interpreted).zip(&reference).enumerate() {
            let (Arg::Tensor(e), Arg::Tensor(t), Arg::Tensor(r)) = (e, t, r) else { continue };
            if e.to_f64()
                .iter()
                .zip(t.to_f64())
                .any(|(a, b)| a.to_bits() != b.to_bits() && (a - b).abs() > 1e-6 * b.abs().max(1.0))
            {
                failures.push(format!("{file} `{function}`: value {i}: the emulated PTX and the interpreter differ"));
            }
            let tol = graph_tolerance(r.dtype, session.plan.kernels.len());
            let c = tessera_backends::interp::compare::compare_with(&r.to_f64(), &e.to_f64(), &tol);
            if !c.passed {
                failures.push(format!("{file} `{function}`: value {i} against the f64 reference: {c}"));
            }
        }
        assert_eq!(emulated.len(), reference.len(), "{file} `{function}`");
    }
    assert!(launches >= 10, "{launches} kernel launches emulated");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
