//! `grad` through the normalizations, `where` and the attention layout moves
//! (`docs/language.md`, "Autodiff"): `softmax_safe` along either axis, `layernorm_safe`
//! with a weight and a bias and with only one of them (E0809 before), `rmsnorm_safe` with
//! and without a weight, `where`,
//! `split_qkv`, `merge_heads` and `flash_attention`. Each `@jit` function runs through
//! the real `tessera run --save` on the interpreter and, where it is built, the CPU
//! backend (the backward graph planned into kernels); the run must pass its own check
//! against the f64 reference, and a NumPy oracle recomputes every gradient by central
//! differences in float64 of a NumPy forward function written from the documented
//! formulas.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@autodiff
def normed(x: Tensor["B", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32], t: Tensor["B", "D", f32]) -> Tensor[f32]:
    h = layernorm_safe(x, weight=w, bias=b)
    p = softmax_safe(h * 2.0, axis=-1) + softmax_safe(x, axis=0)
    q = rmsnorm_safe(p + x, weight=w) + rmsnorm_safe(t * x)
    return mse(where(q > 0.0, q, q * 0.1), t)

@autodiff
def heads_loss(qkv: Tensor["B", "S", "E", f32], r: Tensor["B", "S", "E // 3", f32]) -> Tensor[f32]:
    q, k, v = split_qkv(qkv, heads=2)
    return mean(merge_heads(tanh(q) * k + v * v) * r)

@jit
def heads_grads(qkv: Tensor["B", "S", "E", f32], r: Tensor["B", "S", "E // 3", f32]):
    return grad(heads_loss)(qkv, r)

@autodiff
def attention_loss(q: Tensor["B", "H", "S", "E", bf16], k: Tensor["B", "H", "T", "E", bf16], v: Tensor["B", "H", "T", "E", bf16]) -> Tensor[bf16]:
    return mean(flash_attention(q, k, v) * q) + mean(flash_attention(q, k, v, causal=True) ** 2)

@jit
def attention_grads(q: Tensor["B", "H", "S", "E", bf16], k: Tensor["B", "H", "T", "E", bf16], v: Tensor["B", "H", "T", "E", bf16]):
    return grad(attention_loss)(q, k, v)

@jit
def normed_grads(x: Tensor["B", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32], t: Tensor["B", "D", f32]):
    return grad(normed)(x, w, b, t)

@autodiff
def normalized_energy(x: Tensor["B", "D", f32], w: Tensor["D", "H", f32]) -> Tensor[f32]:
    y = layernorm_safe(x @ w)
    return sum(y * y) / 8.0

@autodiff
def half_affine(x: Tensor["B", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32]) -> Tensor[f32]:
    return mean(layernorm_safe(x, weight=w) ** 3) + mean(tanh(layernorm_safe(x, bias=b)) * x)

@jit
def half_affine_grads(x: Tensor["B", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32]):
    return grad(half_affine)(x, w, b)

@jit
def offset_rows(x: Tensor["B", "D", f32], w: Tensor["D", f32], b: Tensor["D", f32]) -> Tensor["B", "D", f32]:
    return layernorm_safe(x * 0.05 + 10.0, weight=w, bias=b)

@jit
def normalized_energy_grads(x: Tensor["B", "D", f32], w: Tensor["D", "H", f32]):
    return grad(normalized_energy)(x, w)
"#;

/// After [`NUMPY_HELPERS`] (`prelude`).
const PRELUDE: &str = r#"
def fd(f, v, h=1e-5):
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        a, b = v.copy(), v.copy()
        a[i] += h
        b[i] -= h
        g[i] = (f(a) - f(b)) / (2 * h)
    return g
def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
def layernorm(x, w, b, eps=1e-5):
    m = x.mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(axis=-1, keepdims=True) + eps) * w + b
def rmsnorm(x, w, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w
"#;

const CASES: &[Case] = &[
    Case {
        // E = 3·H·Dh with H = 2, Dh = 3; r is [B, S, H·Dh].
        function: "heads_grads",
        dims: "B=2,S=5,E=18",
        oracle: r#"
qkv, r = load("qkv"), load("r")
B, S, E = qkv.shape
def split_qkv(x, h=2):
    return x.reshape(B, S, 3, h, E // (3 * h)).transpose(2, 0, 3, 1, 4)
def merge_heads(x):
    return x.transpose(0, 2, 1, 3).reshape(B, S, -1)
def f(qkv, r):
    q, k, v = split_qkv(qkv)
    return (merge_heads(np.tanh(q) * k + v * v) * r).mean()
for i, (name, v) in enumerate((("qkv", qkv), ("r", r))):
    want = fd(lambda a: f(a, r) if i == 0 else f(qkv, a), v)
    close("d heads_loss / d " + name, result(f"return{i}", v.shape), want, 2.0 ** -14 * (1 + np.abs(want)))
"#,
    },
    Case {
        // The plain attention backward in bf16 (products summed in f32, every op rounded
        // to bf16) against central differences of a float64 NumPy attention: loose.
        function: "attention_grads",
        dims: "B=1,H=2,S=5,T=7,E=8",
        oracle: r#"
q, k, v = load("q"), load("k"), load("v")
def attention(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2:]
        hidden = np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)
        s = np.where(hidden, -np.inf, s)
    return softmax(s, -1) @ v
def f(q, k, v):
    return (attention(q, k, v, False) * q).mean() + (attention(q, k, v, True) ** 2).mean()
args = [q, k, v]
for i, name in enumerate(("q", "k", "v")):
    def along(x, i=i):
        a = list(args)
        a[i] = x
        return f(*a)
    want = fd(along, args[i])
    scale = np.sqrt((want ** 2).mean())
    close("d attention_loss / d " + name, result(f"return{i}", args[i].shape), want, 2.0 ** -5 * (np.abs(want) + scale))
"#,
    },
    Case {
        function: "normed_grads",
        dims: "B=3,D=5",
        oracle: r#"
x, w, b, t = (load(n) for n in ("x", "w", "b", "t"))
def f(x, w, b, t):
    h = layernorm(x, w, b)
    p = softmax(h * 2.0, -1) + softmax(x, 0)
    q = rmsnorm(p + x, w) + rmsnorm(t * x, 1.0)
    return ((np.where(q > 0.0, q, q * 0.1) - t) ** 2).mean()
args = [x, w, b, t]
for i, name in enumerate(("x", "w", "b", "t")):
    def along(v, i=i):
        a = list(args)
        a[i] = v
        return f(*a)
    want = fd(along, args[i])
    # f32 gradients of a smooth loss (no q within 1e-5 of where's switch here); the
    # central difference errs by O(h^2).
    close("d normed / d " + name, result(f"return{i}", args[i].shape), want, 2.0 ** -14 * (1 + np.abs(want)))
"#,
    },
    Case {
        function: "half_affine_grads",
        dims: "B=3,D=300",
        oracle: r#"
x, w, b = (load(n) for n in ("x", "w", "b"))
def f(x, w, b):
    return (layernorm(x, w, 0.0) ** 3).mean() + (np.tanh(layernorm(x, 1.0, b)) * x).mean()
args = [x, w, b]
for i, name in enumerate(("x", "w", "b")):
    def along(v, i=i):
        a = list(args)
        a[i] = v
        return f(*a)
    want = fd(along, args[i])
    close("d half_affine / d " + name, result(f"return{i}", args[i].shape), want, 2.0 ** -14 * (1 + np.abs(want)))
"#,
    },
    Case {
        // Rows of mean 10 and spread 0.05 (in f32, as the function computes them):
        // `E[x²] - mean²` in f32 loses 15 of 24 bits of the variance there (the stdlib
        // kernel erred by 0.15 on values of size 1); the statistics merged tile by tile
        // from deviations keep them to f32's rounding of the inputs.
        function: "offset_rows",
        dims: "B=5,D=300",
        oracle: r#"
x, w, b = (load(n) for n in ("x", "w", "b"))
shifted = (x.astype(np.float32) * np.float32(0.05) + np.float32(10.0)).astype(np.float64)
close("layernorm of offset rows", result("return", x.shape), layernorm(shifted, w, b), 2.0 ** -11 * (1 + np.abs(w)))
"#,
    },
    Case {
        // Every row of a layernorm has unit variance, so the loss is H/8 per row but for
        // eps: its gradients are a cancellation of terms thousands of times larger, and
        // f32 gets them to a few 1e-7 (the run passes within its rounding sensitivity).
        function: "normalized_energy_grads",
        dims: "B=6,D=8,H=48",
        oracle: r#"
x, w = load("x"), load("w")
def f(x, w):
    return (layernorm(x @ w, 1.0, 0.0) ** 2).sum() / 8.0
for i, name in enumerate(("x", "w")):
    want = fd(lambda a: f(a, w) if i == 0 else f(x, a), (x, w)[i])
    close("d normalized_energy / d " + name, result(f"return{i}", want.shape), want, 4e-6)
"#,
    },
];

#[test]
fn gradients_through_norms_and_where_match_numpy_on_every_device() {
    run_every_case("graph_norm_grads.tsr", PROGRAM, &prelude(PRELUDE), CASES);
}

/// The oracle can fail: a gradient with one element changed is refused.
#[test]
fn the_oracle_refuses_a_wrong_gradient() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_norm_grads.tsr", PROGRAM);
    let case = CASES.iter().find(|c| c.function == "normed_grads").unwrap();
    let out = dir.path().join("wrong");
    assert_oracle_refuses(
        &file,
        &prelude(PRELUDE),
        case,
        &out,
        "return1",
        "",
        "np.where(np.arange(y.size) == 2, y + 1e-3, y)",
    );
}

/// The gradients of `normalized_energy` differ from the f64 reference by more than f32's
/// tolerance of their RMS, on every device, because they cancel larger terms: the run
/// says they pass within their rounding sensitivity (how far the reference moves when it
/// keeps f64 instead of rounding to f32), and a well-conditioned gradient is never
/// judged that way.
#[test]
fn a_cancelling_gradient_is_judged_by_its_rounding_sensitivity() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_norm_grads.tsr", PROGRAM);
    let run = |function: &str, dims: &str, device: &str| -> serde_json::Value {
        let o = tessera()
            .args(["run", file.to_str().unwrap(), "--kernel", function, "--dims", dims, "--device", device])
            .args(["--repeat", "1", "--json"])
            .output()
            .expect("tessera runs");
        assert_eq!(o.status.code(), Some(0), "{function} on {device}: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for device in devices() {
        let v = run("normalized_energy_grads", "B=6,D=8,H=48", device);
        assert_eq!(v["verdict"], "correct", "{v}");
        let sensitivity = v["rounding_sensitivity"].as_object().unwrap();
        assert!(sensitivity.contains_key("return0") && sensitivity.contains_key("return1"), "{v}");
        // The shift is a few 1e-7 here; the errors stay within 16 times it.
        for (name, moved) in sensitivity {
            let moved = moved.as_f64().unwrap();
            assert!(moved > 1e-8 && moved < 1e-5, "{name}: {moved}");
        }
        let v = run("normed_grads", "B=3,D=5", device);
        assert_eq!(v["verdict"], "correct", "{v}");
        assert!(v["rounding_sensitivity"].as_object().unwrap().is_empty(), "{v}");
    }
}
