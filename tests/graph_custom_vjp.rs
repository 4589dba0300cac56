//! `custom_vjp(f, backward)` (`docs/language.md`, "Transforms"): `grad` takes `f`'s
//! gradients from `backward(*args, g)` instead of differentiating `f`. Runs through the
//! real `tessera run --save` on the interpreter and, where it is built, the CPU backend;
//! the NumPy oracle writes the expected gradients out: a clipped identity (whose custom
//! gradient differs from the true one, so the test fails if `backward` is ignored) and a
//! softplus with its exact derivative.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def ident(x: Tensor["N", f32]):
    return x

@jit
def clip_bwd(x: Tensor["N", f32], g: Tensor["N", f32]):
    return minimum(maximum(g, -0.5), 0.5)

@jit
def softplus(x: Tensor["N", f32], s: Tensor["N", f32]):
    return log(1.0 + exp(x * s))

@jit
def softplus_bwd(x: Tensor["N", f32], s: Tensor["N", f32], g: Tensor["N", f32]):
    t = sigmoid(x * s) * g
    return t * s, t * x

@autodiff
def loss(x: Tensor["N", f32], s: Tensor["N", f32]):
    y = custom_vjp(ident, clip_bwd)(x * 3.0)
    z = custom_vjp(softplus, softplus_bwd)(x, s)
    return sum(y * y) + sum(z)

@jit
def grads(x: Tensor["N", f32], s: Tensor["N", f32]):
    return grad(loss)(x, s)

@jit
def values(x: Tensor["N", f32], s: Tensor["N", f32]):
    return custom_vjp(softplus, softplus_bwd)(x, s)
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
x, s = load('x.npy'), load('s.npy')
def close(name, want):
    got = load(name + '.out.npy')
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5), (name, np.max(np.abs(got - want)))
"#;

const CASES: &[Case] = &[
    Case {
        function: "grads",
        dims: "N=300",
        oracle: "t = 1.0 / (1.0 + np.exp(-x * s))\n\
                 gx = 3.0 * np.clip(2.0 * 3.0 * x, -0.5, 0.5) + t * s\n\
                 assert np.mean(np.abs(6.0 * x) > 0.5) > 0.5  # the clip acts\n\
                 close('return0', gx); close('return1', t * x)",
    },
    Case { function: "values", dims: "N=300", oracle: "close('return', np.log1p(np.exp(x * s)))" },
];

#[test]
fn custom_backwards_give_the_gradients() {
    run_every_case("custom_vjp.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracle is not vacuous: the true gradient of the clipped identity (6x instead of the
/// clipped one) is refused.
#[test]
fn the_custom_vjp_oracle_refuses_the_uncustomized_gradient() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "custom_vjp.tsr", PROGRAM);
    let out = dir.path().join("wrong");
    let setup = "x = np.load(d + '/x.npy'); s = np.load(d + '/s.npy')";
    let wrong = "18.0 * x + s / (1.0 + np.exp(-x * s))";
    assert_oracle_refuses(&file, PRELUDE, &CASES[0], &out, "return0", setup, wrong);
}

/// Graph IR shows `f`'s ops tagged with the call and `backward`'s ops in the backward
/// pass, named by `f` (`softplus`'s forward is dead here: only the gradients are returned).
#[test]
fn graph_ir_shows_the_custom_backward() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "custom_vjp.tsr", PROGRAM);
    let o =
        tessera().args(["lower", file.to_str().unwrap(), "--kernel", "grads", "--stage", "graph"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let ir = String::from_utf8_lossy(&o.stdout);
    // `ident` returns its argument: its call is a copy of its own, tagged with the call.
    assert!(ir.lines().any(|l| l.contains("arith.cast") && l.contains("custom_vjp = 0")), "{ir}");
    assert!(ir.lines().any(|l| l.contains("math.sigmoid") && l.contains("custom_backward = \"softplus\"")), "{ir}");
    assert!(ir.lines().any(|l| l.contains("arith.min") && l.contains("custom_backward = \"ident\"")), "{ir}");
}
