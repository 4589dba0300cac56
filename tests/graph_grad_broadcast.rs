//! `grad` through matmuls whose batch dims broadcast (NumPy's `matmul` rules): each
//! operand's gradient is summed back over the dims it was broadcast along, so it has the
//! operand's shape. Runs through the real `tessera run --save` on the interpreter and,
//! where it is built, the CPU backend; the NumPy oracle writes the gradients of
//! `sum((a @ w) * c)` out (`c @ wᵀ` and `aᵀ @ c`, reduced to each operand's shape).

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@autodiff
def l_w1(a: Tensor["B", "M", "K", f32], w: Tensor[1, "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return sum((a @ w) * c)

@jit
def g_w1(a: Tensor["B", "M", "K", f32], w: Tensor[1, "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return grad(l_w1, wrt=("a", "w"))(a, w, c)

@autodiff
def l_a1(a: Tensor[1, "M", "K", f32], w: Tensor["B", "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return sum((a @ w) * c)

@jit
def g_a1(a: Tensor[1, "M", "K", f32], w: Tensor["B", "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return grad(l_a1, wrt=("a", "w"))(a, w, c)

@autodiff
def l_a2(a: Tensor["M", "K", f32], w: Tensor["B", "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return sum((a @ w) * c)

@jit
def g_a2(a: Tensor["M", "K", f32], w: Tensor["B", "K", "N", f32], c: Tensor["B", "M", "N", f32]):
    return grad(l_a2, wrt=("a", "w"))(a, w, c)

@autodiff
def l_both(a: Tensor["B", 1, "M", "K", f32], w: Tensor["C", "K", "N", f32], c: Tensor["B", "C", "M", "N", f32]):
    return sum((a @ w) * c)

@jit
def g_both(a: Tensor["B", 1, "M", "K", f32], w: Tensor["C", "K", "N", f32], c: Tensor["B", "C", "M", "N", f32]):
    return grad(l_both, wrt=("a", "w"))(a, w, c)
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
def reduce_to(x, shape):
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and x.shape[i] != 1:
            x = x.sum(axis=i, keepdims=True)
    return x
def check():
    a, w, c = load('a.npy'), load('w.npy'), load('c.npy')
    want_a = reduce_to(np.matmul(c, np.swapaxes(w, -1, -2)), a.shape)
    want_w = reduce_to(np.matmul(np.swapaxes(a, -1, -2), c), w.shape)
    for name, want in (('return0', want_a), ('return1', want_w)):
        got = load(name + '.out.npy')
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), (name, np.max(np.abs(got - want)))
check()
"#;

const CASES: &[Case] = &[
    Case { function: "g_w1", dims: "B=3,M=5,K=4,N=6", oracle: "" },
    Case { function: "g_a1", dims: "B=3,M=5,K=4,N=6", oracle: "" },
    Case { function: "g_a2", dims: "B=3,M=5,K=4,N=6", oracle: "" },
    Case { function: "g_both", dims: "B=2,C=3,M=5,K=4,N=6", oracle: "" },
];

#[test]
fn gradients_of_broadcast_matmuls_have_their_operands_shapes() {
    run_every_case("grad_broadcast.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracle is not vacuous: it refuses a gradient one element of which is off.
#[test]
fn the_broadcast_gradient_oracle_refuses_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "grad_broadcast.tsr", PROGRAM);
    let out = dir.path().join("wrong");
    let wrong = "np.where(np.arange(y.size).reshape(y.shape) == 3, y + 0.5, y)";
    assert_oracle_refuses(&file, PRELUDE, &CASES[0], &out, "return1", "", wrong);
}
