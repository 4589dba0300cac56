//! `OptimizerState[W]` at the graph level: three Adam steps of a bf16 parameter, with and
//! without `@fp32_master`, through the real `tessera run --save` on the interpreter and,
//! where it is built, the CPU backend. The NumPy oracle replays the steps in float64
//! with the rounding the policy asks for: with a master copy the update accumulates in
//! f32 and W is the master rounded to bf16; without one each step starts from the bf16 W
//! of the step before. The two runs get the same W and g (`--input`), their W differ,
//! and each oracle refuses the other's W: the policy changes numbers, and the test can
//! fail.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def three_steps_master(W: Tensor["K", "N", bf16], state: OptimizerState[W] @fp32_master @checkpointable,
                       g: Tensor["K", "N", f32]):
    W1, s1 = state.adam(W, g, lr=0.001)
    W2, s2 = s1.adam(W1, g * 0.5, lr=0.001)
    W3, s3 = s2.adam(W2, g * 0.25, lr=0.001)
    return W3, s3

@jit
def three_steps(W: Tensor["K", "N", bf16], state: OptimizerState[W] @paged, g: Tensor["K", "N", f32]):
    W1, s1 = state.adam(W, g, lr=0.001)
    W2, s2 = s1.adam(W1, g * 0.5, lr=0.001)
    W3, s3 = s2.adam(W2, g * 0.25, lr=0.001)
    return W3, s3
"#;

/// `sys.argv[1]`: the saved run; `sys.argv[2]`: `master` or `plain`, the policy replayed.
const ORACLE: &str = r#"
import sys, numpy as np
d, master = sys.argv[1], sys.argv[2] == "master"
load = lambda n: np.load(d + '/' + n).astype(np.float64)
def bf16(a):  # round to nearest even in bf16
    b = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)
f32 = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64)
W, g = load('W.npy'), load('g.npy')
# The hyperparameters are f32 scalars of the kernel (1 - f32(0.999) is not 0.001).
def adam(p, g, m, v, step, lr=f32(0.001), b1=f32(0.9), b2=f32(0.999), eps=f32(1e-8)):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return f32(p - lr * (m / (1 - b1 ** step) / (np.sqrt(v / (1 - b2 ** step)) + eps))), f32(m), f32(v)
m = v = np.zeros_like(W)
p, w = W.copy(), W.copy()
for t, scale in enumerate([1.0, 0.5, 0.25], start=1):
    p, m, v = adam(p if master else w, g * scale, m, v, t)
    w = bf16(p)
def close(name, want, rtol, atol=0.0):
    got = load(name + '.out.npy')
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert (np.abs(got - want) <= rtol * np.abs(want) + atol).all(), (name, np.abs(got - want).max())
# bf16 W: exactly the oracle's rounding of its f32 values.
close('return0', w, 0.0)
close('state.m', m, 1e-5, 1e-9)
close('state.v', v, 1e-5, 1e-12)
assert float(load('state.step.out.npy')) == 3.0
if master:
    close('state.master', p, 1e-6, 1e-8)
"#;

fn run(file: &std::path::Path, function: &str, device: &str, out: &std::path::Path, inputs: &[String]) {
    let mut cmd = tessera();
    cmd.args(["run", file.to_str().unwrap(), "--kernel", function, "--dims", "K=8,N=12"]).args([
        "--device",
        device,
        "--repeat",
        "1",
        "--save",
        out.to_str().unwrap(),
    ]);
    for i in inputs {
        cmd.args(["--input", i]);
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{function} on {device}: {}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(report["verdict"], "correct", "{report}");
}

fn oracle(out: &std::path::Path, policy: &str) -> std::process::Output {
    std::process::Command::new("python3").args(["-c", ORACLE, out.to_str().unwrap(), policy]).output().unwrap()
}

#[test]
fn adam_with_and_without_an_fp32_master_matches_numpy_and_differs() {
    let has_numpy = numpy();
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "adam.tsr", PROGRAM);
    for device in devices() {
        let with = dir.path().join(format!("master_{device}"));
        run(&file, "three_steps_master", device, &with, &[]);
        // The same W and g for the run without a master copy.
        let same: Vec<String> =
            ["W", "g"].iter().map(|n| format!("{n}={}", with.join(format!("{n}.npy")).display())).collect();
        let without = dir.path().join(format!("plain_{device}"));
        run(&file, "three_steps", device, &without, &same);
        if !has_numpy {
            continue;
        }
        for (out, policy) in [(&with, "master"), (&without, "plain")] {
            let o = oracle(out, policy);
            assert!(o.status.success(), "{policy} oracle on {device}: {}", text(&o));
        }
        // The policy changes numbers: the oracle of one refuses the other's W.
        let o = oracle(&without, "master");
        assert!(!o.status.success() && text(&o).contains("return0"), "{}", text(&o));
        let o = oracle(&with, "plain");
        assert!(!o.status.success() && text(&o).contains("return0"), "{}", text(&o));
    }
}

#[test]
fn the_state_and_its_policies_are_in_graph_ir() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "adam.tsr", PROGRAM);
    let o = tessera()
        .args(["lower", file.to_str().unwrap(), "--kernel", "three_steps_master", "--stage", "graph"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ir = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        ir.contains(
            "%state_m: tensor<KxNxf32>, %state_v: tensor<KxNxf32>, %state_step: f32, %state_master: tensor<KxNxf32>"
        ),
        "{ir}"
    );
    assert!(ir.contains("optimizer_states = \"state=W\""), "{ir}");
    assert!(ir.contains("returns = \"return0,state.m,state.v,state.step,state.master\""), "{ir}");
    let call = ir.lines().find(|l| l.contains("graph.call_kernel")).unwrap();
    assert!(call.contains("callee = \"fused_adam\""), "{call}");
    assert!(call.contains("optimizer_state = \"state\", policies = \"fp32_master,checkpointable\""), "{call}");
    // With the master the update applies to it, not to W widened.
    let first = ir.lines().find(|l| l.contains("graph.reshape")).unwrap();
    assert!(first.contains("graph.reshape %state_master"), "{first}");
    assert!(!ir.contains("arith.cast %W"), "{ir}");
}
