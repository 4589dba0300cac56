//! `scan(f, init, xs)` (`docs/language.md`, "Transforms"): `f(carry, x)` over the first
//! axis of `xs`, returning the last carry and the stacked `y`s, and `grad` through it.
//! Runs through the real `tessera run --save` on the interpreter and, where it is built,
//! the CPU backend; the NumPy oracles are a Python loop and central differences of the
//! loss in float64.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def cell(h: Tensor["B", "D", f32], x: Tensor["B", "D", f32]):
    h2 = tanh(h * 0.5 + x)
    return h2, h2 * 2.0

@jit
def rnn(h0: Tensor["B", "D", f32], xs: Tensor[6, "B", "D", f32]):
    return scan(cell, h0, xs)

@jit
def step(c: Tensor["D", f32], x: Tensor["D", f32]):
    return c + x, c

@jit
def accumulate(s: Tensor["D", f32], xs: Tensor[4, "D", f32], w: Tensor["D", f32]):
    return scan(step, s, xs * w)

@autodiff
def loss(h0: Tensor["B", "D", f32], xs: Tensor[6, "B", "D", f32]):
    h, ys = scan(cell, h0, xs)
    return sum(ys * ys) + sum(h)

@jit
def grads(h0: Tensor["B", "D", f32], xs: Tensor[6, "B", "D", f32]):
    return grad(loss)(h0, xs)
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
def rnn(h, xs):
    ys = []
    for x in xs:
        h = np.tanh(h * 0.5 + x)
        ys.append(h * 2.0)
    return h, np.stack(ys)
def close(name, want, tol=1e-5):
    got = load(name + '.out.npy')
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.allclose(got, want, rtol=tol, atol=tol), (name, np.max(np.abs(got - want)))
def loss(h0, xs):
    h, ys = rnn(h0, xs)
    return (ys * ys).sum() + h.sum()
def central(args, which, i, e=1e-6):
    plus = [a.copy() for a in args]; minus = [a.copy() for a in args]
    plus[which][i] += e; minus[which][i] -= e
    return (loss(*plus) - loss(*minus)) / (2 * e)
"#;

const CASES: &[Case] = &[
    Case {
        function: "rnn",
        dims: "B=3,D=5",
        oracle: "h, ys = rnn(load('h0.npy'), load('xs.npy'))\nclose('return0', h); close('return1', ys)",
    },
    Case {
        function: "accumulate",
        dims: "D=7",
        oracle: "c, w, ys = load('s.npy'), load('w.npy'), []\n\
                 for x in load('xs.npy'):\n    ys.append(c); c = c + x * w\n\
                 close('return0', c); close('return1', np.stack(ys))",
    },
    Case {
        function: "grads",
        dims: "B=2,D=3",
        oracle: "args = [load('h0.npy'), load('xs.npy')]\n\
                 rng = np.random.default_rng(0)\n\
                 for which in (0, 1):\n    got = load('return%d.out.npy' % which)\n    \
                 for _ in range(10):\n        i = tuple(rng.integers(0, s) for s in args[which].shape)\n        \
                 fd = central(args, which, i)\n        \
                 assert abs(got[i] - fd) <= 1e-3 * max(1.0, abs(fd)), (which, i, got[i], fd)",
    },
];

#[test]
fn scan_matches_a_loop_and_its_gradient_central_differences() {
    run_every_case("scan.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracle is not vacuous: it refuses a stacked output one element of which is off.
#[test]
fn the_scan_oracle_refuses_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "scan.tsr", PROGRAM);
    let out = dir.path().join("wrong");
    let wrong = "np.where(np.arange(y.size).reshape(y.shape) == 17, y + 0.01, y)";
    assert_oracle_refuses(&file, PRELUDE, &CASES[0], &out, "return1", "", wrong);
}

/// Graph IR shows the unrolled steps: one copy of `cell`'s ops per element of the axis.
#[test]
fn graph_ir_shows_one_step_per_element() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "scan.tsr", PROGRAM);
    let o = tessera().args(["lower", file.to_str().unwrap(), "--kernel", "rnn", "--stage", "graph"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let ir = String::from_utf8_lossy(&o.stdout);
    assert_eq!(ir.lines().filter(|l| l.contains("math.tanh")).count(), 6, "{ir}");
    assert_eq!(ir.lines().filter(|l| l.contains("graph.split")).count(), 1, "{ir}");
    assert_eq!(ir.lines().filter(|l| l.contains("graph.concat")).count(), 1, "{ir}");
}
