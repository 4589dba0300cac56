//! Graph-level data movement end to end (`docs/language.md`, "Graph functions"):
//! `concat`, `split`, `split_qkv` and `merge_heads`, `where`, `randn`, and the losses `mse` and
//! `cross_entropy` with their gradients. Each `@jit` function runs through the
//! real `tessera run --save` on the interpreter and, where it is built, the CPU backend;
//! the run must pass its own check against the f64 reference, and a NumPy oracle
//! recomputes every result from the saved inputs. The data movement ops only move
//! values, so their oracles ask for equality; `randn`'s oracle recomputes the documented
//! generator (the hash of `tile.rand`, Box–Muller with NumPy's `cos` in float64).

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def cat(a: Tensor["B", "M", "N", f32], b: Tensor["B", "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return concat([a, b, c], axis=1), concat([a, c], axis=-1), concat((a, c), axis=0)

@jit
def cat_computed(a: Tensor["M", "N", f16], b: Tensor["M", "N", f16]):
    y = concat([relu(a), a * b, b], axis=0)
    return y + 1.0

@jit
def halves(x: Tensor["B", "M", "N", bf16]):
    p, q = split(x, 2, axis=-1)
    r, s, t = split(x, 3, axis=0)
    u, v = split(x, 2, axis=1)
    return p, q, r, s, t, u, v * 2.0

@jit
def round_trip(x: Tensor["M", "N", f32]):
    p, q, r = split(x, 3, axis=1)
    return concat([r, p, q], axis=1)

@jit
def noise(x: Tensor["M", "N", f32]):
    a = randn((M, N), seed=7)
    b = randn((M, N), dtype=f16, seed=7)
    return x + a, b, randn((M, N)), randn((2, M, N), seed=7)

@jit
def noise_epilogue(a: Tensor["B", "M", "K", f32], b: Tensor["B", "K", "N", f32], w: Tensor["K", "N", f32]):
    return a @ b + randn((B, M, N), seed=3), a @ w * randn((B, M, N), seed=4), concat([randn((1, M, N), seed=3), a @ w], axis=0)

@autodiff
def mixloss(x: Tensor["M", 6, f32], y: Tensor["M", 4, f32]):
    a, b, c, d, e = split(concat([x * x, y], axis=1), 5, axis=1)
    return sum(a * randn((M, 2), seed=5)) + sum(c * e) + mean(concat([d, b], axis=0))

@jit
def mixgrad(x: Tensor["M", 6, f32], y: Tensor["M", 4, f32]):
    return grad(mixloss)(x, y)

@autodiff
def ce(logits: Tensor["B", "S", "C", f32], target: Tensor["B", "S", "C", f32]):
    return cross_entropy(logits, target)

@autodiff
def sq(pred: Tensor["N", "D", f32], target: Tensor["N", "D", f32]):
    return mse(pred, target)

@jit
def losses(logits: Tensor["B", "S", "C", f32], target: Tensor["B", "S", "C", f32], pred: Tensor["N", "D", bf16], y: Tensor["N", "D", bf16], v: Tensor["C", f16], w: Tensor["C", f16]):
    return cross_entropy(logits, target), mse(pred, y), cross_entropy(v, w)

@jit
def loss_grads(logits: Tensor["B", "S", "C", f32], target: Tensor["B", "S", "C", f32], pred: Tensor["N", "D", f32], y: Tensor["N", "D", f32]):
    dl, dt = grad(ce)(logits, target)
    dp, dy = grad(sq)(pred, y)
    return dl, dt, dp, dy

@jit
def choose(a: Tensor["M", "N", f32], b: Tensor["N", f32], c: Tensor["M", "N", f16]):
    return where(a > b, a, b), where(b > 0.5, 1.0, a * 2.0), where(c < 0.0, c, 0.0)

@autodiff
def wrapped(x: Tensor["M", "N", f32], s: Tensor["M", "N", f32]):
    return sum(x % 0.75 * x + x // 0.25 + x % s)

@jit
def wrap(x: Tensor["M", "N", f32], y: Tensor["M", "N", i32], s: Tensor["M", "N", f32]):
    dx, ds = grad(wrapped)(x, s)
    return x // 0.25, x % 0.75, y // 3, y % 5, dx, ds

@jit
def heads(qkv: Tensor["B", "S", "E", f16], h: Tensor["B", "H", "S", "Dh", f32]):
    q, k, v = split_qkv(qkv, heads=4)
    return q, k, v, merge_heads(h)
"#;

/// After [`NUMPY_HELPERS`] (`prelude`).
const PRELUDE: &str = r#"
def same(name, dtype, ref):
    y = np.load(d + "/" + name + ".out.npy")
    # bf16 is saved widened to float32 (exactly).
    saved = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i32": np.int32}[dtype]
    assert y.dtype == saved, (name, y.dtype, dtype)
    assert y.shape == ref.shape, (name, y.shape, ref.shape)
    bad = y.astype(np.float64) != ref
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} differ; at {i}: got {y[i]}, want {ref[i]}")
# randn's generator (docs/language.md): tile.rand's hash, then Box-Muller.
def mix32(h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))
def uniform(seed, coords):
    h = mix32(np.full(coords[0].shape, (seed ^ 0x9E3779B9) & 0xFFFFFFFF, dtype=np.uint32))
    for c in coords:
        h = mix32(h ^ (c.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32))
    return (h >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
def randn(seed, shape):
    rows = int(np.prod(shape[:-1]))
    r, c = np.meshgrid(np.arange(rows), np.arange(shape[-1]), indexing="ij")
    u1, u2 = uniform(seed, (0 * r, r, c)), uniform(seed, (0 * r + 1, r, c))
    return (np.sqrt(-2 * np.log(1 - u1)) * np.cos(2 * np.pi * u2)).reshape(shape)
"#;

const CASES: &[Case] = &[
    Case {
        // Along a middle axis, the last axis (a flat copy) and the first.
        function: "cat",
        dims: "B=3,M=5,K=70,N=66",
        oracle: r#"
a, b, c = load("a"), load("b"), load("c")
same("return0", "f32", np.concatenate([a, b, c], axis=1))
same("return1", "f32", np.concatenate([a, c], axis=-1))
same("return2", "f32", np.concatenate([a, c], axis=0))
"#,
    },
    Case {
        // Parts computed by a fused kernel, the result read by another.
        function: "cat_computed",
        dims: "M=33,N=40",
        oracle: r#"
a, b = load("a"), load("b")
h = lambda x: x.astype(np.float16).astype(np.float64)
same("return", "f16", h(np.concatenate([np.maximum(a, 0), h(a * b), b], axis=0) + 1.0))
"#,
    },
    Case {
        function: "halves",
        dims: "B=3,M=10,N=130",
        oracle: r#"
x = load("x")
parts = np.split(x, 2, axis=-1) + np.split(x, 3, axis=0) + np.split(x, 2, axis=1)
parts[-1] = parts[-1] * 2.0
for i, ref in enumerate(parts):
    same(f"return{i}", "bf16", ref)
"#,
    },
    Case {
        function: "round_trip",
        dims: "M=7,N=99",
        oracle: r#"
x = load("x")
p, q, r = np.split(x, 3, axis=1)
same("return", "f32", np.concatenate([r, p, q], axis=1))
"#,
    },
    Case {
        // The run's seed is 0: the unseeded randn (the third random site, stream 2) uses
        // 0 * 1000003 + 2 + 1.
        function: "noise",
        dims: "M=33,N=130",
        oracle: r#"
x = load("x")
M, N = x.shape
ref = randn(7, (M, N))
# Computed in f32 (about 20 roundings, |z| < 5.8), with a polynomial cos.
f32 = 2.0 ** -19 * (1 + np.abs(ref))
close("x + randn(seed=7)", result("return0", (M, N)), x + ref, f32 + 2.0 ** -23 * np.abs(x + ref))
close("randn(dtype=f16, seed=7)", result("return1", (M, N)), ref, f32 + 2.0 ** -11 * np.abs(ref))
z = result("return2", (M, N))
close("randn() with the run's seed", z, randn(3, (M, N)), 2.0 ** -19 * (1 + np.abs(z)))
w = result("return3", (2, M, N))
close("randn((2, M, N), seed=7)", w, randn(7, (2, M, N)), 2.0 ** -19 * (1 + np.abs(w)))
# The same seed gives the same numbers: the first matrix is randn((M, N), seed=7),
# whose f16 rounding is b.
assert (w[0].astype(np.float16).astype(np.float64) == result("return1", (M, N))).all()
# And they are standard normal.
all = np.concatenate([w.ravel(), z.ravel()])
assert abs(all.mean()) < 0.05 and abs(all.std() - 1) < 0.05, (all.mean(), all.std())
assert abs((np.abs(all) < 1).mean() - 0.6827) < 0.02
"#,
    },
    Case {
        // randn in a batched and a flat matmul's epilogue: element (r, c) of the
        // [B*M, N] view, as everywhere.
        function: "noise_epilogue",
        dims: "B=2,M=20,K=8,N=33",
        oracle: r#"
a, b, w = load("a"), load("b"), load("w")
mm = lambda x, y: (np.matmul(x, y), 8 * 2.0 ** -23 * np.matmul(np.abs(x), np.abs(y)))
z3, z4 = randn(3, (2, 20, 33)), randn(4, (2, 20, 33))
p, e = mm(a, b)
close("a @ b + randn", result("return0", p.shape), p + z3, e + 2.0 ** -19 * (1 + np.abs(p) + np.abs(z3)))
p, e = mm(a, w)
close("a @ w * randn", result("return1", p.shape), p * z4, (e + 2.0 ** -19 * (1 + np.abs(p))) * (1 + np.abs(z4)))
ref = np.concatenate([z3[:1], p], axis=0)
close("concat([randn, a @ w])", result("return2", ref.shape), ref, 2.0 ** -19 * (1 + np.abs(ref)) + np.concatenate([0 * z3[:1], e]))
"#,
    },
    Case {
        // grad through concat (parts of sizes 6 and 4: pieces of 2; parts of size M),
        // split (a part nobody reads) and randn, against central differences in float64.
        function: "mixgrad",
        dims: "M=3",
        oracle: r#"
x, y = load("x"), load("y")
M = x.shape[0]
n = randn(5, (M, 2))
def f(x, y):
    a, b, c, dd, e = np.split(np.concatenate([x * x, y], axis=1), 5, axis=1)
    return (a * n).sum() + (c * e).sum() + np.concatenate([dd, b], axis=0).mean()
def fd(f, v, h=1e-3):
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        p, m = v.copy(), v.copy()
        p[i] += h
        m[i] -= h
        g[i] = (f(p) - f(m)) / (2 * h)
    return g
# The loss is quadratic: central differences are exact but for float64 rounding.
for name, got, want in (("dx", result("return0", x.shape), fd(lambda v: f(v, y), x)), ("dy", result("return1", y.shape), fd(lambda v: f(x, v), y))):
    close(name, got, want, 2.0 ** -20 * (1 + np.abs(want)))
"#,
    },
    Case {
        function: "losses",
        dims: "B=2,S=3,C=37,N=5,D=70",
        oracle: r#"
x, t, p, y, v, w = (load(n) for n in ("logits", "target", "pred", "y", "v", "w"))
def ce(x, t):
    m = x.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return -(t * (x - lse)).sum(axis=-1).mean()
def scale(x, t):
    return (np.abs(t) * (np.abs(x) + 1)).sum(axis=-1).mean()
ref = ce(x, t)
# f32 throughout: logsumexp, products and sums of |t| * |x - lse| terms.
close("cross_entropy (f32)", result("return0", ()), ref, 2.0 ** -18 * scale(x, t))
ref = ((p - y) ** 2).mean()
# pred - y and its square are bf16 ops (each rounds by 2^-9 relative), the mean rounds once more.
close("mse (bf16)", result("return1", ()), ref, 2.0 ** -6 * abs(ref))
ref = ce(v, w)
# logits - lse and the products are f16 ops (2^-11 relative each), the sum rounds to f16.
close("cross_entropy (f16, one row)", result("return2", ()), ref, 2.0 ** -10 * abs(ref) + 2.0 ** -9 * scale(v, w))
"#,
    },
    Case {
        // The gradients against central differences in float64 (h = 1e-4 on every element).
        function: "loss_grads",
        dims: "B=2,S=3,C=7,N=3,D=4",
        oracle: r#"
x, t, p, y = (load(n) for n in ("logits", "target", "pred", "y"))
def ce(x, t):
    m = x.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return -(t * (x - lse)).sum(axis=-1).mean()
def mse(p, y):
    return ((p - y) ** 2).mean()
def fd(f, v, h=1e-4):
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        a, b = v.copy(), v.copy()
        a[i] += h
        b[i] -= h
        g[i] = (f(a) - f(b)) / (2 * h)
    return g
for name, i, f, v in (
    ("d cross_entropy / d logits", 0, lambda a: ce(a, t), x),
    ("d cross_entropy / d target", 1, lambda a: ce(x, a), t),
    ("d mse / d pred", 2, lambda a: mse(a, y), p),
    ("d mse / d target", 3, lambda a: mse(p, a), y),
):
    want = fd(f, v)
    # f32 gradients; the central difference errs by O(h^2) (the losses are smooth).
    close(name, result(f"return{i}", v.shape), want, 2.0 ** -16 * (1 + np.abs(want)) + 1e-7 * np.abs(v).max())
"#,
    },
    Case {
        // `where` broadcasts its condition and both sides (a row, a Python number).
        function: "choose",
        dims: "M=33,N=70",
        oracle: r#"
a, b, c = load("a"), load("b"), load("c")
same("return0", "f32", np.where(a > b, a, b))
same("return1", "f32", np.where(b > 0.5, 1.0, a * 2.0))
same("return2", "f16", np.where(c < 0.0, c, 0.0))
"#,
    },
    Case {
        // Floor division and remainder as Python's (the remainder takes the divisor's
        // sign); they were refused when planned ("in a fused elementwise kernel"). Their
        // gradients: 1 and -floor(x / s) for `%`, none for `//`.
        function: "wrap",
        dims: "M=33,N=70",
        oracle: r#"
x, y = load("x"), load("y")
same("return0", "f32", np.floor_divide(x.astype(np.float32), np.float32(0.25)).astype(np.float64))
same("return1", "f32", np.mod(x.astype(np.float32), np.float32(0.75)).astype(np.float64))
same("return2", "i32", np.floor_divide(y, 3))
same("return3", "i32", np.mod(y, 5))
# d/dx (x % 0.75 * x + x // 0.25 + x % s) = x % 0.75 + x + 1 (floor division is flat);
# d/ds (x % s) = -floor(x / s).
s = load("s")
x32, s32 = x.astype(np.float32), s.astype(np.float32)
want_dx = np.mod(x32, np.float32(0.75)).astype(np.float64) + x + 1.0
close("return4", result("return4", x.shape), want_dx, 1e-6 * (1 + np.abs(want_dx)))
same("return5", "f32", -np.floor_divide(x32, s32).astype(np.float64))
"#,
    },
    Case {
        function: "heads",
        dims: "B=2,S=70,E=96,H=3,Dh=20",
        oracle: r#"
qkv, h = load("qkv"), load("h")
B, S, E = qkv.shape
parts = qkv.reshape(B, S, 3, 4, E // 12).transpose(2, 0, 3, 1, 4)
for i in range(3):
    same(f"return{i}", "f16", parts[i])
same("return3", "f32", h.transpose(0, 2, 1, 3).reshape(B, S, -1))
"#,
    },
];

#[test]
fn data_movement_matches_numpy_on_every_device() {
    run_every_case("graph_level_ops.tsr", PROGRAM, &prelude(PRELUDE), CASES);
}

/// The oracles can fail: the parts of a concat in another order, or one part of a split
/// for another, are refused.
#[test]
fn the_oracles_refuse_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_level_ops.tsr", PROGRAM);
    for (function, name, wrong) in [
        ("cat", "return0", "np.concatenate([a, c, b], axis=1)"),
        ("halves", "return1", "np.split(x, 2, axis=-1)[0]"),
        ("round_trip", "return", "x"),
        ("noise", "return1", "y[::-1]"),
        ("mixgrad", "return0", "y * 1.001"),
        ("loss_grads", "return0", "-y"),
    ] {
        let case = CASES.iter().find(|c| c.function == function).unwrap();
        let setup = format!(
            "load = lambda n: np.load(d + '/' + n + '.npy').astype(np.float64)\n\
             a, b, c = (load(n) if '{function}' == 'cat' else None for n in 'abc')\n\
             x = None if '{function}' in ('cat', 'noise', 'mixgrad', 'loss_grads') else load('x')"
        );
        assert_oracle_refuses(&file, &prelude(PRELUDE), case, &dir.path().join(function), name, &setup, wrong);
    }
}

/// Graph IR shows `graph.concat` / `graph.split` with their axis, and the plan one copy
/// kernel for each.
#[test]
fn graph_ir_and_plan_show_the_copies() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_level_ops.tsr", PROGRAM);
    let lower = |function: &str, stage: &str| {
        let o = tessera()
            .args(["lower", file.to_str().unwrap(), "--kernel", function, "--stage", stage])
            .output()
            .expect("tessera runs");
        assert_eq!(o.status.code(), Some(0), "{function}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let graph = lower("cat", "graph");
    assert_eq!(graph.matches("graph.concat").count(), 3, "{graph}");
    assert!(graph.contains("axis = 2"), "{graph}");
    let sched = lower("cat", "sched");
    assert!(sched.contains("copy: concat 3 tensors along axis 1"), "{sched}");
    assert_eq!(sched.matches("sched.kernel").count(), 3, "{sched}");
    let graph = lower("round_trip", "graph");
    assert!(graph.contains("graph.split"), "{graph}");
    let sched = lower("round_trip", "sched");
    assert!(sched.contains("copy: split into 3 along axis 1"), "{sched}");
    assert_eq!(sched.matches("sched.kernel").count(), 2, "{sched}");
}

/// The losses take two float tensors of one shape; `concat` one dtype; `randn` an int
/// seed and a float dtype.
#[test]
fn arguments_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad_losses.tsr");
    let bad = "from tessera import *\n\n\n@jit\ndef f(a: Tensor[\"N\", \"C\", f32], b: Tensor[\"N\", 3, f32]):\n    return mse(a, b)\n\n\n@jit\ndef g(a: Tensor[\"N\", \"C\", i32], b: Tensor[\"N\", \"C\", i32]):\n    return cross_entropy(a, b)\n\n\n@jit\ndef h(a: Tensor[\"N\", \"C\", f32], b: Tensor[\"C\", f32]):\n    return cross_entropy(a, b)\n\n\n@jit\ndef k(a: Tensor[\"N\", f32], b: Tensor[\"N\", f16]):\n    return concat([a, b]), randn((3, 4), seed=1.5), randn((2,), dtype=i32)\n";
    std::fs::write(&file, bad).unwrap();
    let o = tessera().args(["check", file.to_str().unwrap()]).output().expect("tessera runs");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("E0301") && out.contains("mse: `a` is [N, C] but `b` is [N, 3]"), "{out}");
    assert!(out.contains("E0400"), "{out}");
    assert!(out.contains("E0300") && out.contains("cross_entropy does not broadcast"), "{out}");
    assert!(out.contains("concat: tensor 1 is f16 but tensor 0 is f32"), "{out}");
    assert!(out.contains("E0802") && out.contains("an int seed or None"), "{out}");
    assert!(out.contains("`randn` draws floats, not i32"), "{out}");
}
