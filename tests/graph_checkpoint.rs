//! `checkpoint(f)` / `remat(f)` (`docs/language.md`, "Transforms"): `grad` recomputes the
//! checkpointed function's values for the backward pass. Graph IR shows the recomputed
//! copies (`remat = "f"`), the gradients are exactly those of the plain function, and
//! both match central differences of the loss written in NumPy (float64).

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def block(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    h = tanh(x @ w)
    return h * h + x

@autodiff
def loss_plain(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return sum(block(block(x, w), w))

@autodiff
def loss_ckpt(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return sum(block(checkpoint(block)(x, w), w))

@autodiff
def loss_remat(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return sum(remat(block)(remat(block)(x, w), w))

@jit
def g_plain(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return grad(loss_plain)(x, w)

@jit
def g_ckpt(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return grad(loss_ckpt)(x, w)

@jit
def g_remat(x: Tensor["M", "N", f32], w: Tensor["N", "N", f32]):
    return grad(loss_remat)(x, w)
"#;

/// Central differences of the loss in float64, at a sample of coordinates.
const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
x = np.load(d + '/x.npy').astype(np.float64)
w = np.load(d + '/w.npy').astype(np.float64)
def block(x, w):
    h = np.tanh(x @ w)
    return h * h + x
def loss(x, w):
    return block(block(x, w), w).sum()
def check():
    rng = np.random.default_rng(0)
    for out, arg in ((0, x), (1, w)):
        got = np.load(d + '/return%d.out.npy' % out).astype(np.float64)
        assert got.shape == arg.shape
        for _ in range(12):
            i = tuple(rng.integers(0, s) for s in arg.shape)
            e = 1e-6
            plus, minus = arg.copy(), arg.copy()
            plus[i] += e
            minus[i] -= e
            args_p = (plus, w) if out == 0 else (x, plus)
            args_m = (minus, w) if out == 0 else (x, minus)
            fd = (loss(*args_p) - loss(*args_m)) / (2 * e)
            assert abs(got[i] - fd) <= 1e-3 * max(1.0, abs(fd)), (out, i, got[i], fd)
check()
"#;

const CASES: &[Case] = &[
    Case { function: "g_plain", dims: "M=16,N=24", oracle: "" },
    Case { function: "g_ckpt", dims: "M=16,N=24", oracle: "" },
    Case { function: "g_remat", dims: "M=16,N=24", oracle: "" },
];

#[test]
fn checkpointed_gradients_match_central_differences() {
    run_every_case("checkpoint.tsr", PROGRAM, PRELUDE, CASES);
}

/// Recomputing gives the same numbers: the gradients are equal to the plain function's,
/// element for element, on every device.
#[test]
fn checkpointed_gradients_equal_the_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "checkpoint.tsr", PROGRAM);
    for device in devices() {
        let mut saved = Vec::new();
        for case in CASES {
            let out = dir.path().join(format!("{}_{device}", case.function));
            run_saved(&file, case, device, &out);
            let grads: Vec<_> =
                (0..2).map(|i| tessera_backends::npy::read(&out.join(format!("return{i}.out.npy"))).unwrap()).collect();
            saved.push(grads);
        }
        assert_eq!(saved[0], saved[1], "checkpoint changed the gradients on {device}");
        assert_eq!(saved[0], saved[2], "remat changed the gradients on {device}");
    }
}

/// Graph IR tags the checkpointed ops and shows their recomputed copies, which the
/// backward pass reads instead of the forward values.
#[test]
fn graph_ir_shows_the_recomputation() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "checkpoint.tsr", PROGRAM);
    let ir = |function: &str| {
        let o = tessera()
            .args(["lower", file.to_str().unwrap(), "--kernel", function, "--stage", "graph"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let plain = ir("g_plain");
    assert!(!plain.contains("remat"), "{plain}");
    let ckpt = ir("g_ckpt");
    let tagged = ckpt.lines().filter(|l| l.contains("{checkpoint = \"block\"")).count();
    let copies: Vec<&str> = ckpt.lines().filter(|l| l.contains("remat = \"block\"")).collect();
    assert_eq!(tagged, 4, "{ckpt}");
    assert_eq!(copies.len(), 4, "{ckpt}");
    assert!(copies[0].contains("graph.matmul %x, %w"), "{ckpt}");
    // The backward pass reads the copies: a copy's result is an operand further down.
    let first_copy = copies[0].split_whitespace().next().unwrap();
    let reads = ckpt
        .lines()
        .filter(|l| l.split_once(" = ").is_some_and(|(_, rhs)| rhs.split([' ', ',']).any(|w| w == first_copy)))
        .count();
    assert!(reads >= 1, "nothing reads {first_copy}: {ckpt}");
    // Both calls of the nested `remat` are recomputed (a matmul copy each); copies the
    // backward pass does not read (the outer call's last add) are removed as dead.
    let nested = ir("g_remat");
    let matmuls = nested.lines().filter(|l| l.contains("graph.matmul") && l.contains("remat = \"block\"")).count();
    assert_eq!(matmuls, 2, "{nested}");
}
