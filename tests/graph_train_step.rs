//! A training step at the graph level, as the seeds write it: the loss of a linear model
//! with `mse`, its gradient with `grad`, and an AdamW update with the stdlib `fused_adam`
//! called from the `@jit` function. Runs through the real `tessera run --save` on the
//! interpreter and, where it is built, the CPU backend; the NumPy oracle writes the
//! gradient (`2/(B·N) · xᵀ(xW − y)`) and the update out in float64.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *
from tessera.stdlib import fused_adam

@autodiff
def loss(x: Tensor["B", "K", f32], y: Tensor["B", "N", f32], W: Tensor["K", "N", f32]):
    pred = x @ W
    return mse(pred, y)

@jit
def first_step(x: Tensor["B", "K", f32], y: Tensor["B", "N", f32], W: Tensor["K", "N", f32]):
    (g,) = grad(loss, wrt=("W",))(x, y, W)
    zero = zeros((K * N,), dtype=f32)
    p, m, v = fused_adam(reshape(W, (K * N,)), reshape(g, (K * N,)), zero, zero, lr=0.01, step=1.0)
    return loss(x, y, W), reshape(p, (K, N)), reshape(m, (K, N)), reshape(v, (K, N))

@jit
def later_step(x: Tensor["B", "K", f32], y: Tensor["B", "N", f32], W: Tensor["K", "N", f32]):
    (g,) = grad(loss, wrt=("W",))(x, y, W)
    m0 = reshape(W * 0.1, (K * N,))
    v0 = reshape(W * W * 0.01, (K * N,))
    flat_w, flat_g = reshape(W, (K * N,)), reshape(g, (K * N,))
    p, m, v = fused_adam(flat_w, flat_g, m0, v0, lr=0.005, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1, step=7.0)
    return reshape(p, (K, N)), reshape(m, (K, N)), reshape(v, (K, N))
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
x, y, W = load('x.npy'), load('y.npy'), load('W.npy')
B, N = y.shape
g = 2.0 / (B * N) * x.T @ (x @ W - y)
def adam(m0, v0, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, step=1.0):
    m = b1 * m0 + (1 - b1) * g
    v = b2 * v0 + (1 - b2) * g * g
    p = W - lr * (m / (1 - b1 ** step) / (np.sqrt(v / (1 - b2 ** step)) + eps) + wd * W)
    return p, m, v
def close(name, want, rtol=1e-4, atol=1e-6):
    got = load(name + '.out.npy')
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.allclose(got, want, rtol=rtol, atol=atol), (name, np.max(np.abs(got - want)))
"#;

const CASES: &[Case] = &[
    Case {
        function: "first_step",
        dims: "B=12,K=8,N=5",
        oracle: "close('return0', np.asarray(np.mean((x @ W - y) ** 2)))\n\
                 p, m, v = adam(np.zeros_like(W), np.zeros_like(W), 0.01)\n\
                 close('return1', p); close('return2', m); close('return3', v)",
    },
    Case {
        function: "later_step",
        dims: "B=20,K=6,N=7",
        oracle: "p, m, v = adam(0.1 * W, 0.01 * W * W, 0.005, 0.8, 0.99, 1e-6, 0.1, 7.0)\n\
                 close('return0', p); close('return1', m); close('return2', v)",
    },
];

#[test]
fn an_adam_training_step_matches_numpy() {
    run_every_case("train_step.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracle is not vacuous: it refuses an update one element of which is off.
#[test]
fn the_training_step_oracle_refuses_a_wrong_update() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "train_step.tsr", PROGRAM);
    let out = dir.path().join("wrong");
    let wrong = "np.where(np.arange(y.size).reshape(y.shape) == 2, y - 1e-3, y)";
    assert_oracle_refuses(&file, PRELUDE, &CASES[1], &out, "return0", "", wrong);
}
