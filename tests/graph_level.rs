//! Graph-level operations end to end (`docs/language.md`, "Graph functions"): matmul and
//! the norms in f32, f16 and bf16; batched matmul whose batch dims broadcast on either
//! operand; `sum`/`mean`/`max`/`min` over any axis or tuple of axes; softmax and
//! logsumexp over any axis. Each `@jit` function runs through the real `tessera run --save` on the
//! interpreter and, where it is built, the CPU backend; the run must pass its own check
//! against the f64 reference, and a NumPy oracle recomputes every result from the saved
//! inputs in float64 with an error bound that fits the dtypes.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def mm_f32(a: Tensor["M", "K", f32], b: Tensor["K", "N", f32]):
    return a @ b

@jit
def mm_f16(a: Tensor["M", "K", f16], b: Tensor["K", "N", f16]):
    return matmul(a, b)

@jit
def mm_bf16(a: Tensor["M", "K", bf16], b: Tensor["K", "N", bf16], bias: Tensor["N", bf16]):
    return a @ b, relu(a @ b + bias)

@jit
def bmm_right(a: Tensor["M", "K", f32], b: Tensor["B", "K", "N", f32]):
    return a @ b

@jit
def bmm_both(a: Tensor["B", 1, "M", "K", bf16], b: Tensor["H", "K", "N", bf16]):
    return a @ b

@jit
def bmm_inner(a: Tensor[2, "H", "M", "K", f16], b: Tensor["H", "K", "N", f16], s: Tensor["H", "M", 1, f16]):
    return a @ b * s

@jit
def mm_scaled(a: Tensor[2, "H", "M", "K", f32], w: Tensor["K", "N", f32], s: Tensor["H", "M", 1, f32], b: Tensor["N", f32]):
    return a @ w * s + b, a @ w + b

@jit
def reductions(x: Tensor["A", "B", "C", "D", f32]):
    return sum(x, axis=0), mean(x, axis=1), max(x, axis=(0, 2)), min(x, axis=(-1, 1), keepdim=True), mean(x)

@jit
def reductions_bf16(x: Tensor["A", "B", "C", bf16]):
    return sum(x, axis=0), max(x, axis=1), mean(x, axis=(0, 2))

@jit
def reductions_rank8(x: Tensor["A", 3, 2, 3, 2, 3, 2, 3, f32]):
    return max(x, axis=(1, 3, 5, 7)), sum(x, axis=(0, 2, 4, 6)), mean(x, axis=(1, 3, 5), keepdim=True)

@jit
def softmax_axes(x: Tensor["A", "B", "C", f32]):
    return softmax_safe(x, axis=0), softmax_safe(x, axis=1), softmax_safe(x, axis=-1)

@jit
def logsumexp_axes(x: Tensor["A", "B", "C", f32], h: Tensor["A", "B", bf16]):
    return logsumexp_safe(x, axis=0), logsumexp_safe(x, axis=1), logsumexp_safe(x), logsumexp_safe(h, axis=0)

@jit
def norms_f32(x: Tensor["R", "C", f32], w: Tensor["C", f32], b: Tensor["C", f32]):
    return rmsnorm_safe(x, weight=w), layernorm_safe(x, weight=w, bias=b)

@jit
def norms_f16(x: Tensor["R", "C", f16], w: Tensor["C", f16], b: Tensor["C", f16]):
    return rmsnorm_safe(x, weight=w), layernorm_safe(x, weight=w, bias=b)

@jit
def norms_bf16(x: Tensor["R", "C", bf16], w: Tensor["C", bf16]):
    return rmsnorm_safe(x, weight=w), layernorm_safe(x)
"#;

/// Helpers every oracle script starts with: the saved inputs and outputs in float64, and
/// the bounds. `u(dtype)` is one step of the dtype's precision at 1 (twice its unit
/// roundoff): the rounding of a result to its storage dtype stays within `u * |ref|`. An
/// f32 accumulation of n terms errs by at most `n * 2^-23 * sum |terms|`.
const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + "/" + name + ".npy").astype(np.float64)
def out(name, dtype, shape):
    y = np.load(d + "/" + name + ".out.npy")
    # bf16 is saved widened to float32 (exactly): its low 16 bits are zero.
    saved = {"f32": np.float32, "f16": np.float16, "bf16": np.float32}[dtype]
    assert y.dtype == saved, (name, y.dtype, dtype)
    if dtype == "bf16":
        assert (y.view(np.uint32) & 0xFFFF == 0).all(), (name, "not bf16 values")
    assert y.shape == tuple(shape), (name, y.shape, shape)
    return y.astype(np.float64)
U = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}
def u(dtype):
    return U[dtype]
def close(name, y, ref, bound):
    err = np.abs(y - ref)
    bad = ~(err <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} beyond the bound; at {i}: got {y[i]}, want {ref[i]}, bound {bound[i] if np.ndim(bound) else bound}")
def check_matmul(name, y, a, b, dtype):
    ref = np.matmul(a, b)
    k = a.shape[-1]
    close(name, y, ref, u(dtype) * np.abs(ref) + k * 2.0 ** -23 * np.matmul(np.abs(a), np.abs(b)))
def check_reduce(name, y, x, kind, axis, dtype, keepdims=False):
    f = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind]
    ref = f(x, axis=axis, keepdims=keepdims)
    if kind in ("max", "min"):
        # One of the inputs, which are of the dtype: exact.
        close(name, y, ref, 0.0 * np.abs(ref))
        return
    n = x.size // ref.size
    scale = np.sum(np.abs(x), axis=axis, keepdims=keepdims) / (n if kind == "mean" else 1)
    close(name, y, ref, u(dtype) * np.abs(ref) + n * 2.0 ** -23 * scale)
"#;

const CASES: &[Case] = &[
    Case {
        function: "mm_f32",
        dims: "M=37,K=45,N=29",
        oracle: r#"
a, b = load("a"), load("b")
check_matmul("a @ b", out("return", "f32", (37, 29)), a, b, "f32")
"#,
    },
    Case {
        function: "mm_f16",
        dims: "M=37,K=45,N=29",
        oracle: r#"
a, b = load("a"), load("b")
assert np.load(d + "/a.npy").dtype == np.float16
check_matmul("matmul(a, b)", out("return", "f16", (37, 29)), a, b, "f16")
"#,
    },
    Case {
        function: "mm_bf16",
        dims: "M=37,K=45,N=29",
        oracle: r#"
a, b, bias = load("a"), load("b"), load("bias")
check_matmul("a @ b", out("return0", "bf16", (37, 29)), a, b, "bf16")
y = out("return1", "bf16", (37, 29))
# The matmul is rounded to bf16 before the bias is added, and the sum once more.
ref = np.maximum(np.matmul(a, b) + bias, 0)
k = a.shape[-1]
bound = u("bf16") * (np.abs(np.matmul(a, b)) + np.abs(ref)) + k * 2.0 ** -23 * np.matmul(np.abs(a), np.abs(b))
close("relu(a @ b + bias)", y, ref, bound)
"#,
    },
    Case {
        function: "bmm_right",
        dims: "M=37,K=45,N=29,B=3",
        oracle: r#"
a, b = load("a"), load("b")
check_matmul("[M, K] @ [B, K, N]", out("return", "f32", (3, 37, 29)), a, b, "f32")
"#,
    },
    Case {
        function: "bmm_both",
        dims: "B=2,H=3,M=20,K=33,N=17",
        oracle: r#"
a, b = load("a"), load("b")
check_matmul("[B, 1, M, K] @ [H, K, N]", out("return", "bf16", (2, 3, 20, 17)), a, b, "bf16")
"#,
    },
    Case {
        function: "bmm_inner",
        dims: "H=3,M=20,K=33,N=17",
        oracle: r#"
a, b, s = load("a"), load("b"), load("s")
y = out("return", "f16", (2, 3, 20, 17))
p = np.matmul(a, b)
ref = p * s
bound = u("f16") * (np.abs(p * s) + np.abs(ref)) + 33 * 2.0 ** -23 * np.matmul(np.abs(a), np.abs(b)) * np.abs(s)
close("[2, H, M, K] @ [H, K, N] * [H, M, 1]", y, ref, bound)
"#,
    },
    Case {
        // A flat matmul (all of a's leading dims are rows) whose row scale broadcasts over
        // the batch: the scale and the bias are loaded where they are used.
        function: "mm_scaled",
        dims: "H=3,M=20,K=33,N=17",
        oracle: r#"
a, w, s, b = load("a"), load("w"), load("s"), load("b")
p = np.matmul(a, w)
err = 33 * 2.0 ** -23 * np.matmul(np.abs(a), np.abs(w))
ref = p * s + b
close("a @ w * s + b", out("return0", "f32", ref.shape), ref, 4 * u("f32") * (np.abs(p * s) + np.abs(ref)) + err * np.abs(s))
ref = p + b
close("a @ w + b", out("return1", "f32", ref.shape), ref, 4 * u("f32") * (np.abs(p) + np.abs(ref)) + err)
"#,
    },
    Case {
        function: "reductions",
        dims: "A=3,B=4,C=5,D=33",
        oracle: r#"
x = load("x")
A, B, C, D = x.shape
check_reduce("sum(x, axis=0)", out("return0", "f32", (B, C, D)), x, "sum", 0, "f32")
check_reduce("mean(x, axis=1)", out("return1", "f32", (A, C, D)), x, "mean", 1, "f32")
check_reduce("max(x, axis=(0, 2))", out("return2", "f32", (B, D)), x, "max", (0, 2), "f32")
check_reduce("min(x, axis=(-1, 1), keepdim=True)", out("return3", "f32", (A, 1, C, 1)), x, "min", (3, 1), "f32", keepdims=True)
check_reduce("mean(x)", out("return4", "f32", ()), x, "mean", None, "f32")
"#,
    },
    Case {
        function: "reductions_bf16",
        dims: "A=5,B=6,C=70",
        oracle: r#"
x = load("x")
check_reduce("sum(x, axis=0)", out("return0", "bf16", (6, 70)), x, "sum", 0, "bf16")
check_reduce("max(x, axis=1)", out("return1", "bf16", (5, 70)), x, "max", 1, "bf16")
check_reduce("mean(x, axis=(0, 2))", out("return2", "bf16", (6,)), x, "mean", (0, 2), "bf16")
"#,
    },
    Case {
        // Four separate kept runs: more than one grid axis each.
        function: "reductions_rank8",
        dims: "A=5",
        oracle: r#"
x = load("x")
check_reduce("max(x, axis=(1, 3, 5, 7))", out("return0", "f32", (5, 2, 2, 2)), x, "max", (1, 3, 5, 7), "f32")
check_reduce("sum(x, axis=(0, 2, 4, 6))", out("return1", "f32", (3, 3, 3, 3)), x, "sum", (0, 2, 4, 6), "f32")
check_reduce("mean(x, axis=(1, 3, 5), keepdim=True)", out("return2", "f32", (5, 1, 2, 1, 2, 1, 2, 3)), x, "mean", (1, 3, 5), "f32", keepdims=True)
"#,
    },
    Case {
        function: "softmax_axes",
        dims: "A=3,B=40,C=33",
        oracle: r#"
x = load("x")
for i, axis in enumerate((0, 1, 2)):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    ref = e / e.sum(axis=axis, keepdims=True)
    y = out(f"return{i}", "f32", x.shape)
    # Probabilities in [0, 1], computed in f32: a few ulp of 1.
    close(f"softmax(x, axis={axis})", y, ref, 2.0 ** -20 + 0 * ref)
"#,
    },
    Case {
        function: "logsumexp_axes",
        dims: "A=3,B=40,C=33",
        oracle: r#"
x, h = load("x"), load("h")
def lse(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)
for i, axis in enumerate((0, 1, 2)):
    ref = lse(x, axis)
    # Computed in f32 (running max and sum): a few ulp of the result.
    close(f"logsumexp(x, axis={axis})", out(f"return{i}", "f32", ref.shape), ref, 2.0 ** -20 * (1 + np.abs(ref)))
ref = lse(h, 0)
close("logsumexp(h, axis=0)", out("return3", "bf16", ref.shape), ref, u("bf16") * np.abs(ref) + 2.0 ** -20)
"#,
    },
    Case { function: "norms_f32", dims: "R=7,C=300", oracle: NORMS_ORACLE_F32 },
    Case { function: "norms_f16", dims: "R=7,C=300", oracle: NORMS_ORACLE_F16 },
    Case {
        function: "norms_bf16",
        dims: "R=7,C=300",
        oracle: r#"
x, w = load("x"), load("w")
ms = (x ** 2).mean(axis=-1, keepdims=True)
rms = x / np.sqrt(ms + 1e-6) * w
mu = x.mean(axis=-1, keepdims=True)
ln = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
# Statistics in f32 (relative error ~2^-16 at C = 300), one bf16 rounding of the result.
for name, ref, y in (("rmsnorm", rms, out("return0", "bf16", x.shape)), ("layernorm", ln, out("return1", "bf16", x.shape))):
    close(name, y, ref, u("bf16") * np.abs(ref) + 2.0 ** -14 * (1 + np.abs(ref)))
"#,
    },
];

const NORMS_ORACLE_F32: &str = r#"
x, w, b = load("x"), load("w"), load("b")
ms = (x ** 2).mean(axis=-1, keepdims=True)
rms = x / np.sqrt(ms + 1e-6) * w
mu = x.mean(axis=-1, keepdims=True)
ln = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * w + b
for name, ref, y in (("rmsnorm", rms, out("return0", "f32", x.shape)), ("layernorm", ln, out("return1", "f32", x.shape))):
    close(name, y, ref, 2.0 ** -14 * (1 + np.abs(ref)))
"#;

const NORMS_ORACLE_F16: &str = r#"
x, w, b = load("x"), load("w"), load("b")
assert np.load(d + "/x.npy").dtype == np.float16
ms = (x ** 2).mean(axis=-1, keepdims=True)
rms = x / np.sqrt(ms + 1e-6) * w
mu = x.mean(axis=-1, keepdims=True)
ln = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * w + b
for name, ref, y in (("rmsnorm", rms, out("return0", "f16", x.shape)), ("layernorm", ln, out("return1", "f16", x.shape))):
    close(name, y, ref, u("f16") * np.abs(ref) + 2.0 ** -14 * (1 + np.abs(ref)))
"#;

#[test]
fn graph_level_operations_match_numpy_on_every_device() {
    run_every_case("graph_level.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracles can fail: a result of the right shape and dtype but of another
/// computation (the matmul's operands swapped in batch, a reduction over another axis)
/// is refused.
#[test]
fn the_oracles_refuse_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_level.tsr", PROGRAM);
    // `y`: the saved result (in its saved dtype), `x`: the saved input of `reductions`.
    for (function, name, wrong) in [
        // The batch order reversed: each matrix of the result belongs to another batch.
        ("bmm_both", "return", "y[::-1, ::-1]"),
        // A sum over axis 1 where axis 0 was asked for (the same shape: A == B).
        ("reductions", "return0", "x.sum(axis=1)"),
        // Four bf16 steps off in the largest element.
        ("mm_bf16", "return0", "bump(y, 4 << 16)"),
    ] {
        let case = CASES.iter().find(|c| c.function == function).unwrap();
        let dims = if function == "reductions" { "A=4,B=4,C=5,D=33" } else { case.dims };
        let case = Case { function: case.function, dims, oracle: case.oracle };
        let setup = format!(
            "def bump(y, bits):\n    w = y.copy()\n    w.view(np.uint32)[np.unravel_index(np.abs(w).argmax(), w.shape)] += bits\n    return w\n\
             x = np.load(d + '/x.npy').astype(np.float64) if '{function}' == 'reductions' else None"
        );
        assert_oracle_refuses(&file, PRELUDE, &case, &dir.path().join(function), name, &setup, wrong);
    }
}

/// The Graph IR shows the operations as written (a batched matmul of both operands'
/// batch dims, reductions with their axes) and the plan names the kernels they map to.
#[test]
fn graph_ir_and_plan_show_the_operations() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_level.tsr", PROGRAM);
    let lower = |function: &str, stage: &str| {
        let o = tessera()
            .args(["lower", file.to_str().unwrap(), "--kernel", function, "--stage", stage])
            .output()
            .expect("tessera runs");
        assert_eq!(o.status.code(), Some(0), "{function}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let graph = lower("bmm_both", "graph");
    assert!(graph.contains("graph.matmul"), "{graph}");
    assert!(graph.contains("tensor<Bx1xMxKxbf16>, tensor<HxKxNxbf16> -> tensor<BxHxMxNxbf16>"), "{graph}");
    let sched = lower("bmm_both", "sched");
    assert!(sched.contains("stdlib batched_matmul (bf16)"), "{sched}");
    let graph = lower("reductions", "graph");
    for axes in
        ["kind = \"sum\", axes = [0]", "kind = \"max\", axes = [0, 2]", "kind = \"min\", axes = [3, 1], keepdim = true"]
    {
        assert!(graph.contains(axes), "{axes}: {graph}");
    }
    let sched = lower("reductions", "sched");
    assert!(sched.contains("max over axes [0, 2]"), "{sched}");
    for (function, kernel) in [("mm_f32", "stdlib matmul (f32)"), ("mm_f16", "stdlib matmul (f16)")] {
        let sched = lower(function, "sched");
        assert!(sched.contains(kernel), "{function}: {sched}");
    }
    // The bias is loaded in the matmul's epilogue, not copied to [M, N] by a kernel of its own.
    let sched = lower("mm_bf16", "sched");
    assert!(sched.contains("stdlib matmul (bf16) + epilogue: broadcast, add, relu"), "{sched}");
    assert_eq!(sched.matches("sched.kernel").count(), 2, "{sched}");
    let sched = lower("softmax_axes", "sched");
    assert!(sched.contains("stdlib stable_softmax_columns (f32, axis 0)"), "{sched}");
}
