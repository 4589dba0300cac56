//! The function transforms of graph functions end to end (`docs/language.md`,
//! "Transforms"): `vmap` and `jvp`. Each `@jit` function runs through the real `tessera
//! run --save` on the interpreter and, where it is built, the CPU backend; the run must
//! pass its own check against the f64 reference, and a NumPy oracle recomputes every
//! result from the saved inputs: `vmap(f)` as a Python loop over the mapped axis of a
//! NumPy `f`, `grad` of a sum of a vmapped loss by its gradient written out in NumPy and
//! by central differences, and `jvp` against central finite differences in f64 of a
//! NumPy `f` (and its primal output against that `f`). The transforms compose: `grad`
//! inside `vmap` (per-example gradients), `vmap` of a vmapped function, `jvp` through
//! both.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def layer(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32], b: Tensor["H", f32]):
    h = gelu(x @ W + b)
    return softmax_safe(h, axis=-1), sum(h, axis=0)

@jit
def batched_layer(xs: Tensor["B", "S", "D", f32], W: Tensor["D", "H", f32], b: Tensor["H", f32]):
    return vmap(layer, in_axes=(0, None, None))(xs, W, b)

@jit
def mix(a: Tensor["M", "K", f32], w: Tensor["K", "N", f32]):
    return a @ w * 2.0 - mean(a)

@jit
def mapped_mid(a: Tensor["M", "B", "K", f32], ws: Tensor["K", "N", "B", f32]):
    return vmap(mix, in_axes=(1, 2), out_axes=1)(a, ws)

@jit
def proj(W: Tensor["H", "D", f32], x: Tensor["D", "S", f32]):
    return relu(W @ x), logsumexp_safe(W @ x, axis=0)

@jit
def mapped_right(W: Tensor["H", "D", f32], xs: Tensor["D", "S", "B", f32]):
    return vmap(proj, in_axes=(None, -1), out_axes=-1)(W, xs)

@jit
def shuffle(x: Tensor["N", "D", f32]):
    p, q = split(x, 2, axis=1)
    return concat([q, p * p], axis=1).T

@jit
def shuffled(xs: Tensor["B", "N", "D", f32]):
    g = vmap(shuffle)
    return g(xs)

@jit
def example_loss(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32]):
    return mean(tanh(x @ W) ** 2)

@autodiff
@jit
def batch_loss(xs: Tensor["B", "S", "D", f32], W: Tensor["D", "H", f32]):
    return sum(vmap(example_loss, in_axes=(0, None))(xs, W))

@jit
def batch_grad(xs: Tensor["B", "S", "D", f32], W: Tensor["D", "H", f32]):
    return grad(batch_loss)(xs, W)

@jit
def smooth(x: Tensor["M", "K", f32], W: Tensor["K", "N", f32]):
    h = x @ W
    g = gelu(h) + silu(h) - sqrt(1.0 + h * h) / (2.0 + relu(h))
    return softmax_safe(tanh(h), axis=-1) * sigmoid(h) + g * g * 0.1 + reshape(logsumexp_safe(h, axis=-1), (M, 1)) + mean(exp(x)) + maximum(h, 0.5 * h)

@jit
def smooth_jvp(x: Tensor["M", "K", f32], W: Tensor["K", "N", f32], tx: Tensor["M", "K", f32], tW: Tensor["K", "N", f32]):
    return jvp(smooth, (x, W), (tx, tW))

@autodiff
@jit
def loss_ad(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32]):
    return example_loss(x, W)

@jit
def example_grad(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32]):
    dx, dW = grad(loss_ad)(x, W)
    return dW

@jit
def per_example_grads(xs: Tensor["B", "S", "D", f32], W: Tensor["D", "H", f32]):
    return vmap(example_grad, in_axes=(0, None))(xs, W)

@jit
def row_norm(x: Tensor["D", f32], w: Tensor["D", f32]):
    return sqrt(sum(x * x)) * w, w * 2.0

@jit
def rows(x: Tensor["N", "D", f32], w: Tensor["D", f32]):
    return vmap(row_norm, in_axes=(0, None))(x, w)

@jit
def grid(x: Tensor["M", "N", "D", f32], w: Tensor["D", f32]):
    return vmap(rows, in_axes=(1, None), out_axes=(0, 1))(x, w)

@jit
def first_of_grid(x: Tensor["M", "N", "D", f32], w: Tensor["D", f32]):
    a, b = grid(x, w)
    return a + 1.0

@jit
def grid_jvp(x: Tensor["M", "N", "D", f32], w: Tensor["D", f32], tx: Tensor["M", "N", "D", f32], tw: Tensor["D", f32]):
    return jvp(first_of_grid, (x, w), (tx, tw))

@jit
def attend(qkv: Tensor["B", "S", "E", bf16]):
    q, k, v = split_qkv(qkv, heads=2)
    return merge_heads(flash_attention(q, k, v, causal=True))

@jit
def attend_all(qkv: Tensor["V", "B", "S", "E", bf16]):
    return vmap(attend)(qkv)

@jit
def normed(x: Tensor["M", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32]):
    return layernorm_safe(x, weight=w, bias=b) * 2.0 + rmsnorm_safe(x * 3.0, weight=w) + layernorm_safe(x)

@jit
def normed_jvp(x: Tensor["M", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32], tx: Tensor["M", "D", f32], tw: Tensor["D", f32], tb: Tensor["D", f32]):
    return jvp(normed, (x, w, b), (tx, tw, tb))

@jit
def heads_mm(a: Tensor["M", "K", f32], b: Tensor["H", "K", "N", f32]):
    return sum((a @ b) ** 2)

@autodiff
@jit
def mapped_loss(a: Tensor["B", "M", "K", f32], b: Tensor["B", "H", "K", "N", f32]):
    return sum(vmap(heads_mm)(a, b))

@jit
def mapped_grad(a: Tensor["B", "M", "K", f32], b: Tensor["B", "H", "K", "N", f32]):
    return grad(mapped_loss)(a, b)

@jit
def peaks(x: Tensor["M", "N", f32]):
    return reshape(max(x, axis=1), (M, 1)) * 2.0 + min(x, axis=0, keepdim=True) + max(x * x)

@jit
def peaks_jvp(x: Tensor["M", "N", f32], t: Tensor["M", "N", f32]):
    return jvp(peaks, (x,), (t,))

@jit
def layer_sum(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32], b: Tensor["H", f32]):
    y, s = layer(x, W, b)
    return y * 3.0 + s

@jit
def layer_jvp(x: Tensor["S", "D", f32], W: Tensor["D", "H", f32], b: Tensor["H", f32], tW: Tensor["D", "H", f32]):
    return jvp(layer_sum, (x, W, b), (zeros((S, D)), tW, zeros((H,))))
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + "/" + name + ".npy").astype(np.float64)
def result(name, shape):
    y = np.load(d + "/" + name + ".out.npy")
    assert y.dtype == np.float32, (name, y.dtype)
    assert y.shape == tuple(shape), (name, y.shape, shape)
    return y.astype(np.float64)
def close(name, y, ref, bound):
    assert y.shape == ref.shape, (name, y.shape, ref.shape)
    bad = ~(np.abs(y - ref) <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} beyond the bound; at {i}: got {y[i]}, want {ref[i]}")
# f32 results of short computations against f64: a relative bound with an absolute floor.
def near(name, shape, ref, rel=2e-5):
    close(name, result(name, shape), ref, rel * (1 + np.abs(ref)))
def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
def silu(x):
    return x / (1 + np.exp(-x))
def sigmoid(x):
    return 1 / (1 + np.exp(-x))
def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
def logsumexp(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)
# The NumPy versions of the program's functions, one example at a time.
def layer(x, W, b):
    h = gelu(x @ W + b)
    return softmax(h, -1), h.sum(axis=0)
def mix(a, w):
    return a @ w * 2.0 - a.mean()
def proj(W, x):
    return np.maximum(W @ x, 0), logsumexp(W @ x, 0)
def shuffle(x):
    p, q = np.split(x, 2, axis=1)
    return np.concatenate([q, p * p], axis=1).T
def example_loss(x, W):
    return (np.tanh(x @ W) ** 2).mean()
def smooth(x, W):
    h = x @ W
    g = gelu(h) + silu(h) - np.sqrt(1 + h * h) / (2 + np.maximum(h, 0))
    return softmax(np.tanh(h), -1) * sigmoid(h) + g * g * 0.1 + logsumexp(h, -1)[:, None] + np.exp(x).mean() + np.maximum(h, 0.5 * h)
# Central differences in f64 of f along the tangents.
def fd(f, primals, tangents, eps=1e-6):
    up = f(*[p + eps * t for p, t in zip(primals, tangents)])
    down = f(*[p - eps * t for p, t in zip(primals, tangents)])
    return (up - down) / (2 * eps)
"#;

const CASES: &[Case] = &[
    Case {
        // in_axes (0, None, None): the weights are the same for every example.
        function: "batched_layer",
        dims: "B=3,S=5,D=8,H=6",
        oracle: r#"
xs, W, b = load("xs"), load("W"), load("b")
loop = [layer(xs[i], W, b) for i in range(xs.shape[0])]
near("return0", (3, 5, 6), np.stack([y for y, _ in loop]))
near("return1", (3, 6), np.stack([s for _, s in loop]), rel=1e-4)
"#,
    },
    Case {
        // A middle and a last mapped axis, and the output's mapped axis in the middle.
        function: "mapped_mid",
        dims: "B=3,M=5,K=7,N=6",
        oracle: r#"
a, ws = load("a"), load("ws")
ref = np.stack([mix(a[:, i, :], ws[:, :, i]) for i in range(a.shape[1])], axis=1)
near("return", (5, 3, 6), ref, rel=1e-4)
"#,
    },
    Case {
        // An unmapped left operand (the matmul of a mapped right one), a negative in_axes
        // and out_axes=-1.
        function: "mapped_right",
        dims: "B=4,H=5,D=7,S=6",
        oracle: r#"
W, xs = load("W"), load("xs")
loop = [proj(W, xs[:, :, i]) for i in range(xs.shape[-1])]
near("return0", (5, 6, 4), np.stack([r for r, _ in loop], axis=-1), rel=1e-4)
near("return1", (6, 4), np.stack([l for _, l in loop], axis=-1), rel=1e-4)
"#,
    },
    Case {
        // split, concat and .T per example; vmap(f) bound to a name first.
        function: "shuffled",
        dims: "B=3,N=4,D=6",
        oracle: r#"
xs = load("xs")
near("return", (3, 6, 4), np.stack([shuffle(x) for x in xs]), rel=1e-6)
"#,
    },
    Case {
        // grad of the sum of a vmapped loss: the gradient written out, and central
        // differences of the NumPy loss along random directions.
        function: "batch_grad",
        dims: "B=3,S=4,D=6,H=5",
        oracle: r#"
xs, W = load("xs"), load("W")
B, S, D = xs.shape
H = W.shape[1]
t = np.tanh(xs @ W)
g = 2 * t * (1 - t * t) / (S * H)
dxs, dW = g @ W.T, np.einsum("bsd,bsh->dh", xs, g)
near("return0", (B, S, D), dxs, rel=1e-4)
near("return1", (D, H), dW, rel=1e-4)
loss = lambda xs, W: sum(example_loss(xs[i], W) for i in range(B))
rng = np.random.default_rng(0)
for _ in range(3):
    u, v = rng.standard_normal(xs.shape), rng.standard_normal(W.shape)
    want = fd(loss, (xs, W), (u, v))
    got = (result("return0", (B, S, D)) * u).sum() + (result("return1", (D, H)) * v).sum()
    assert abs(got - want) <= 1e-4 * (1 + abs(want)), (got, want)
"#,
    },
    Case {
        // jvp: the primal output against NumPy, the tangent against central differences.
        function: "smooth_jvp",
        dims: "M=4,K=6,N=5",
        oracle: r#"
x, W, tx, tW = load("x"), load("W"), load("tx"), load("tW")
near("return0", (4, 5), smooth(x, W), rel=1e-5)
near("return1", (4, 5), fd(smooth, (x, W), (tx, tW)), rel=1e-4)
"#,
    },
    Case {
        // jvp along W alone (zero tangents for x and b) of a function that calls another.
        function: "layer_jvp",
        dims: "S=4,D=6,H=5",
        oracle: r#"
x, W, b, tW = load("x"), load("W"), load("b"), load("tW")
def f(x, W, b):
    y, s = layer(x, W, b)
    return y * 3.0 + s
near("return0", (4, 5), f(x, W, b), rel=1e-5)
near("return1", (4, 5), fd(f, (x, W, b), (0 * x, tW, 0 * b)), rel=1e-4)
"#,
    },
    Case {
        // grad inside vmap: per-example gradients.
        function: "per_example_grads",
        dims: "B=3,S=4,D=6,H=5",
        oracle: r#"
xs, W = load("xs"), load("W")
B, S, D = xs.shape
H = W.shape[1]
def example_grad(x):
    t = np.tanh(x @ W)
    return x.T @ (2 * t * (1 - t * t) / (S * H))
near("return", (B, D, H), np.stack([example_grad(x) for x in xs]), rel=1e-4)
"#,
    },
    Case {
        // vmap of a vmapped function, an output no mapped argument reaches (broadcast),
        // and a tuple of out_axes.
        function: "grid",
        dims: "M=3,N=4,D=5",
        oracle: r#"
x, w = load("x"), load("w")
M, N, D = x.shape
row_norm = lambda r: (np.sqrt((r * r).sum()) * w, w * 2.0)
rows = lambda m: [row_norm(r) for r in m]
loop = [rows(x[:, n, :]) for n in range(N)]
near("return0", (N, M, D), np.stack([np.stack([a for a, _ in r]) for r in loop]))
near("return1", (M, N, D), np.stack([np.stack([b for _, b in r]) for r in loop], axis=1), rel=0)
"#,
    },
    Case {
        // jvp through the nested vmaps.
        function: "grid_jvp",
        dims: "M=3,N=4,D=5",
        oracle: r#"
x, w, tx, tw = load("x"), load("w"), load("tx"), load("tw")
f = lambda x, w: np.sqrt((x * x).sum(-1))[..., None].transpose(1, 0, 2) * w + 1.0
near("return0", (4, 3, 5), f(x, w))
near("return1", (4, 3, 5), fd(f, (x, w), (tx, tw)), rel=1e-4)
"#,
    },
    Case {
        // Attention per example: split_qkv, flash_attention and merge_heads fold the
        // mapped axis into their own batch dim. bf16 (the stdlib attention kernel's).
        function: "attend_all",
        dims: "V=2,B=2,S=16,E=96",
        oracle: r#"
qkv = load("qkv")
V, B, S, E = qkv.shape
h, Dh = 2, E // 6
def attend(x):
    q, k, v = x.reshape(B, S, 3, h, Dh).transpose(2, 0, 3, 1, 4)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(Dh) + np.triu(np.full((S, S), -np.inf), 1)
    p = softmax(s, -1)
    return (p @ v).transpose(0, 2, 1, 3).reshape(B, S, -1)
ref = np.stack([attend(x) for x in qkv])
y = np.load(d + "/return.out.npy").astype(np.float64)
close("return", y, ref, 2.0 ** -7 * (1 + np.abs(ref)))
"#,
    },
    Case {
        // The norms' tangents, along the input and the affine weight and bias.
        function: "normed_jvp",
        dims: "M=5,D=8",
        oracle: r#"
x, w, b, tx, tw, tb = (load(n) for n in ("x", "w", "b", "tx", "tw", "tb"))
def ln(x, eps=1e-5):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
rms = lambda x, eps=1e-6: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
f = lambda x, w, b: (ln(x) * w + b) * 2.0 + rms(x * 3.0) * w + ln(x)
near("return0", (5, 8), f(x, w, b))
near("return1", (5, 8), fd(f, (x, w, b), (tx, tw, tb)), rel=1e-4)
"#,
    },
    Case {
        // grad of a vmapped matmul whose operands have different batch ranks per example.
        function: "mapped_grad",
        dims: "B=2,M=3,K=4,H=2,N=5",
        oracle: r#"
a, b = load("a"), load("b")
y = np.einsum("bmk,bhkn->bhmn", a, b)
near("return0", a.shape, np.einsum("bhmn,bhkn->bmk", 2 * y, b), rel=1e-4)
near("return1", b.shape, np.einsum("bmk,bhmn->bhkn", a, 2 * y), rel=1e-4)
"#,
    },
    Case {
        // max and min reductions: the tangent where the input is the extremum.
        function: "peaks_jvp",
        dims: "M=4,N=5",
        oracle: r#"
x, t = load("x"), load("t")
f = lambda x: x.max(1)[:, None] * 2.0 + x.min(0, keepdims=True) + (x * x).max()
near("return0", (4, 5), f(x))
near("return1", (4, 5), fd(f, (x,), (t,)), rel=1e-4)
"#,
    },
];

#[test]
fn transforms_match_numpy_on_every_device() {
    run_every_case("graph_transforms.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracles can fail: the examples of a vmap in another order, a gradient scaled, a
/// tangent with a sign flipped.
#[test]
fn the_oracles_refuse_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_transforms.tsr", PROGRAM);
    for (function, name, wrong) in [
        ("batched_layer", "return0", "y[::-1]"),
        ("mapped_mid", "return", "y.transpose(1, 0, 2).reshape(y.shape)"),
        ("mapped_right", "return1", "y[:, ::-1]"),
        ("batch_grad", "return1", "y * 1.001"),
        ("smooth_jvp", "return1", "-y"),
        ("smooth_jvp", "return0", "y + 1e-3"),
        ("per_example_grads", "return", "y[::-1]"),
        ("grid", "return1", "y * 0.999"),
        ("attend_all", "return", "y[::-1]"),
        ("normed_jvp", "return1", "y[:, ::-1]"),
    ] {
        let case = CASES.iter().find(|c| c.function == function).unwrap();
        let out = dir.path().join(format!("{function}_{name}"));
        assert_oracle_refuses(&file, PRELUDE, case, &out, name, "", wrong);
    }
}

fn lower(file: &std::path::Path, function: &str, stage: &str) -> std::process::Output {
    tessera()
        .args(["lower", file.to_str().unwrap(), "--kernel", function, "--stage", stage])
        .output()
        .expect("tessera runs")
}

/// Graph IR shows the transforms: every op a transform emitted carries `vmap = "f"` or
/// `jvp = "f"`, and the batched ops have the batch dim in front.
#[test]
fn graph_ir_shows_the_transforms() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_transforms.tsr", PROGRAM);
    let graph = |function: &str| {
        let o = lower(&file, function, "graph");
        assert_eq!(o.status.code(), Some(0), "{function}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let g = graph("batched_layer");
    assert!(g.contains("graph.matmul") && g.contains("vmap = \"layer\""), "{g}");
    assert!(g.contains("tensor<BxSxHxf32>"), "{g}");
    assert!(g.contains("graph.softmax") && g.contains("axis = 2"), "{g}");
    let g = graph("batch_grad");
    assert!(g.contains("vmap = \"example_loss\""), "{g}");
    let g = graph("smooth_jvp");
    assert!(g.contains("jvp = \"smooth\""), "{g}");
    assert_eq!(g.matches("func.return").count(), 1, "{g}");
}

/// An op with no batching or forward-mode rule is refused: at check time (E0808, at the op)
/// where the checker can see it, and in any case when lowering, with a message that names
/// the op and the function, at the call; never computed wrongly.
#[test]
fn ops_without_a_rule_are_refused_at_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let source = "from tessera import *\n\n@jit\ndef noisy(x: Tensor[\"N\", f32]):\n    return dropout(x, 0.5)\n\n@jit\ndef mapped_noise(xs: Tensor[\"B\", \"N\", f32]):\n    return vmap(noisy)(xs)\n\n@jit\ndef peak(x: Tensor[\"N\", f32]):\n    return x ** x\n\n@jit\ndef peak_jvp(x: Tensor[\"N\", f32], t: Tensor[\"N\", f32]):\n    return jvp(peak, (x,), (t,))\n";
    let file = program(dir.path(), "no_rule.tsr", source);
    let o = tessera().args(["check", file.to_str().unwrap(), "--format", "concise"]).output().expect("tessera runs");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // The dropout is E0808 at the op; `**` of a non-constant exponent only lowering sees.
    let out = text(&o);
    assert!(out.contains("no_rule.tsr:5:12: error[E0808] `vmap` cannot batch `dropout` (in `noisy`)"), "{out}");
    assert_eq!(out.matches("E0808").count(), 1, "{out}");
    let o = lower(&file, "mapped_noise", "graph");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("`vmap(noisy)`: `graph.dropout` (in `noisy`) cannot be batched"), "{out}");
    assert!(out.contains("no_rule.tsr:9:12"), "{out}");
    let o = lower(&file, "peak_jvp", "graph");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("`jvp(peak)`: `arith.pow` (in `peak`) has no forward-mode rule for a non-constant exponent"),
        "{out}"
    );
    assert!(out.contains("no_rule.tsr:17:12"), "{out}");
}
