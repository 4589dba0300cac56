//! Placement effects end to end (`docs/language.md`, "State and placement"): Graph IR
//! records `with device(...)` as a `device` attribute on the ops lowered inside and
//! `with prefetch(...)` as a `graph.prefetch` effect on the token chain; the functions
//! still run through the real `tessera run --save` on the interpreter and, where it is
//! built, the CPU backend, checked against the f64 reference and a NumPy oracle.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def placed(x: Tensor["M", "K", f32], W: Tensor["K", "N", f32], b: Tensor["N", f32]):
    with device(gpu):
        with prefetch(W, into="smem", overlap="compute"):
            y = relu(x @ W + b)
        with device(cpu):
            z = y - 1.0
    return y * 2.0, z

@autodiff
def loss(x: Tensor["M", "K", f32], W: Tensor["K", "N", f32]):
    with device(gpu), prefetch(W, into="l2"):
        y = x @ W
    return sum(y * y)

@jit
def placed_grad(x: Tensor["M", "K", f32], W: Tensor["K", "N", f32]):
    return grad(loss, wrt=("W",))(x, W)
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + "/" + name + ".npy").astype(np.float64)
def close(name, ref, rel):
    y = np.load(d + "/" + name + ".out.npy").astype(np.float64)
    assert y.shape == ref.shape, (name, y.shape, ref.shape)
    bound = rel * (1 + np.abs(ref))
    bad = ~(np.abs(y - ref) <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} beyond the bound; at {i}: got {y[i]}, want {ref[i]}")
"#;

const CASES: &[Case] = &[
    Case {
        function: "placed",
        dims: "M=33,K=70,N=40",
        oracle: r#"
x, W, b = load("x"), load("W"), load("b")
y = np.maximum(x @ W + b, 0)
close("return0", 2 * y, 1e-5)
close("return1", y - 1, 1e-5)
"#,
    },
    Case {
        function: "placed_grad",
        dims: "M=17,K=24,N=20",
        oracle: r#"
x, W = load("x"), load("W")
close("return", 2 * x.T @ (x @ W), 1e-4)
"#,
    },
];

fn lower(file: &std::path::Path, function: &str, stage: &str) -> String {
    let o = tessera()
        .args(["lower", file.to_str().unwrap(), "--kernel", function, "--stage", stage])
        .output()
        .expect("tessera runs");
    assert_eq!(o.status.code(), Some(0), "{function}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn line_of<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in\n{text}"))
}

/// `tessera lower --stage graph` shows both effects: the prefetch on the token chain
/// with its `into` and `overlap`, and `device` on exactly the ops lowered inside
/// `with device(...)` (the innermost one winning).
#[test]
fn graph_ir_shows_device_and_prefetch() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "placement.tsr", PROGRAM);
    let graph = lower(&file, "placed", "graph");
    let line = |needle: &str| line_of(&graph, needle).to_string();
    let prefetch = line("graph.prefetch");
    assert!(prefetch.contains("%W"), "{prefetch}");
    assert!(prefetch.contains("into = \"smem\"") && prefetch.contains("overlap = \"compute\""), "{prefetch}");
    assert!(prefetch.contains("device = \"gpu\""), "{prefetch}");
    assert!(prefetch.contains("!token"), "{prefetch}");
    assert!(line("graph.matmul").contains("device = \"gpu\""), "{graph}");
    assert!(line("math.relu").contains("device = \"gpu\""), "{graph}");
    assert!(line("arith.sub").contains("device = \"cpu\""), "{graph}");
    // `y * 2.0` is outside every `with`.
    let mul = line("arith.mul");
    assert!(!mul.contains("device"), "{mul}");
    // `z = y - 1.0`: its constant, the broadcast and the subtraction.
    assert_eq!(graph.matches("device = \"cpu\"").count(), 3, "{graph}");
    // The prefetch is ordered before the ops of its body.
    let at = |needle: &str| graph.find(needle).unwrap();
    assert!(at("graph.prefetch") < at("graph.matmul"), "{graph}");

    // Through grad: the forward graph keeps its placement, the backward graph runs.
    let graph = lower(&file, "placed_grad", "graph");
    let prefetch = graph.lines().find(|l| l.contains("graph.prefetch")).unwrap_or_else(|| panic!("{graph}"));
    assert!(prefetch.contains("into = \"l2\"") && prefetch.contains("overlap = \"compute\""), "{prefetch}");
    // The backward graph of `y = x @ W` (placed on the gpu) is placed there too: the
    // gradient's matmul and the transpose of `x` it needs; the backward ops of `sum(y * y)`
    // (outside the `with`) are not.
    let back = graph.split_once("graph.matmul").map(|(_, rest)| rest).unwrap_or_else(|| panic!("{graph}"));
    assert!(line_of(back, "graph.transpose").contains("device = \"gpu\""), "{graph}");
    assert!(line_of(back, "graph.matmul").contains("device = \"gpu\""), "{graph}");
    assert!(!line_of(back, "arith.add").contains("device"), "{graph}");
    // The plan's launch that reads W (the matmul, `z` fused in its epilogue) carries the
    // prefetch as a hint.
    let sched = lower(&file, "placed", "sched");
    let hinted: Vec<&str> = sched.lines().filter(|l| l.contains("prefetch")).collect();
    assert_eq!(hinted.len(), 1, "{sched}");
    assert!(hinted[0].contains("sched.kernel") && hinted[0].contains("matmul"), "{sched}");
    assert!(hinted[0].contains("prefetch = \"W into smem, overlap compute\""), "{sched}");
    // In the grad, the forward matmul reads W; the backward ones (xᵀ, dW) do not.
    let sched = lower(&file, "placed_grad", "sched");
    let hinted: Vec<&str> = sched.lines().filter(|l| l.contains("prefetch")).collect();
    assert_eq!(hinted.len(), 1, "{sched}");
    assert!(hinted[0].contains("prefetch = \"W into l2, overlap compute\""), "{sched}");
    assert_eq!(sched.matches("sched.kernel").count(), 3, "{sched}");
}

#[test]
fn placed_functions_run_and_match_numpy() {
    run_every_case("placement.tsr", PROGRAM, PRELUDE, CASES);
}

/// `into` other than smem, l2 or hbm is E0802 at the argument.
#[test]
fn prefetch_into_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let bad = "from tessera import *\n\n\n@jit\ndef f(x: Tensor[\"N\", f32]):\n    with prefetch(x, into=\"vram\"):\n        y = x + 1.0\n    return y\n";
    let file = program(dir.path(), "bad_prefetch.tsr", bad);
    let o = tessera().args(["check", file.to_str().unwrap()]).output().expect("tessera runs");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("E0802") && out.contains("prefetch into \"vram\""), "{out}");
}
