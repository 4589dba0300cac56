//! Calling `@kernel` functions from `@jit` graph functions end to end (`docs/language.md`,
//! "Calling kernels"): the call's value is the new contents of the parameters the kernel
//! writes, each starting from the argument passed for it. Each graph function runs
//! through the real `tessera run --save` on the interpreter and, where it is built, the
//! CPU backend; the run must pass its own check against the f64 reference (which runs the
//! called kernel's own f64 reference, not the plan's code), and a NumPy oracle recomputes
//! every result from the saved inputs. The standard library's kernels are called the same
//! way, instantiated for the dtype of their arguments.

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *
from tessera.stdlib import rms_normalize, stable_softmax

@kernel
def saxpy(a: f32, x: Tensor["N", f32], y: Tensor["N", f32]):
    for i in tile.parallel(0, N, 256):
        y[i:i + 256] = a * x[i:i + 256] + y[i:i + 256]

@kernel
def row_softmax(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:C])
        e = tile.exp(x - tile.row_max(x)[:, None])
        Y[r0:r0 + ctx.BM, 0:C] = e / tile.row_sum(e)[:, None]

@kernel
def split_signs(x: Tensor["M", "N", f32], s: f32, lo: Tensor["M", "N", f32], hi: Tensor["M", "N", f32]):
    for m0 in tile.parallel(0, M, 16):
        for n0 in tile.parallel(0, N, 64):
            t = tile.load(x[m0:m0 + 16, n0:n0 + 64]) * s
            tile.store(lo[m0:m0 + 16, n0:n0 + 64], t - tile.relu(t))
            hi[m0:m0 + 16, n0:n0 + 64] = tile.relu(t)

@jit
def step(x: Tensor["N", f32], y: Tensor["N", f32]):
    z = saxpy(2.0, x, y)
    w = saxpy(0.5, z, z * 3.0)
    return z, w, y

@jit
def probs(x: Tensor["R", "C", f32]):
    p = row_softmax(x * 2.0, zeros((R, C), dtype=f32))
    return p, p + 1.0

@jit
def parts(x: Tensor["M", "N", f32]):
    lo, hi = split_signs(x, 1.5, zeros((M, N), dtype=f32), x)
    return lo + hi, hi

@jit
def normed(x: Tensor["R", "C", f16], y: Tensor["R", "C", f32]):
    n = rms_normalize(x, zeros((R, C), dtype=f16), eps=1e-5)
    return n, stable_softmax(y, y) * 2.0
"#;

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + "/" + name + ".npy").astype(np.float32)
def result(name, shape, dtype=np.float32):
    y = np.load(d + "/" + name + ".out.npy")
    assert y.dtype == dtype, (name, y.dtype)
    assert y.shape == tuple(shape), (name, y.shape, shape)
    return y.astype(np.float64)
def close(name, ref, rel=2e-6, dtype=np.float32):
    ref = np.asarray(ref, dtype=np.float64)
    y = result(name, ref.shape, dtype)
    bad = ~(np.abs(y - ref) <= rel * (np.abs(ref) + 1e-6))
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} differ; at {i}: got {y[i]}, want {ref[i]}")
def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"#;

const CASES: &[Case] = &[
    Case {
        // A kernel that reads what it writes (`y`), called twice; the caller's `y` stays.
        function: "step",
        dims: "N=1000",
        oracle: r#"
x, y = load("x"), load("y")
z = np.float32(2.0) * x + y
close("return0", z)
close("return1", np.float32(0.5) * z + z * np.float32(3.0))
close("return2", y, rel=0.0)
"#,
    },
    Case {
        // A tiled row softmax into a `zeros` output, its result read by a fused kernel.
        function: "probs",
        dims: "R=37,C=48",
        oracle: r#"
x = load("x").astype(np.float64)
p = softmax(2.0 * x)
close("return0", p, rel=1e-5)
close("return1", p + 1.0, rel=1e-5)
"#,
    },
    Case {
        // Two written parameters (a tuple) and a scalar argument; one output starts as
        // `zeros`, the other as a copy of `x`, which the kernel overwrites.
        function: "parts",
        dims: "M=40,N=100",
        oracle: r#"
x = load("x")
t = np.float32(1.5) * x
close("return0", t)
close("return1", np.maximum(t, 0))
"#,
    },
    Case {
        // Stdlib kernels: `rms_normalize` instantiated for f16 into a `zeros` output, and
        // `stable_softmax` (f32) reading and writing one argument.
        function: "normed",
        dims: "R=37,C=300",
        oracle: r#"
x = np.load(d + "/x.npy").astype(np.float64)
n = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
close("return0", n.astype(np.float16), rel=2e-3, dtype=np.float16)
close("return1", 2.0 * softmax(load("y").astype(np.float64)), rel=1e-5)
"#,
    },
];

#[test]
fn kernel_calls_match_numpy_on_every_device() {
    run_every_case("graph_kernel_calls.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracles can fail: SAXPY's result with `a` and `y` swapped, and a softmax over the
/// wrong axis, are refused.
#[test]
fn the_oracles_refuse_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_kernel_calls.tsr", PROGRAM);
    let setup = "x = np.load(d + '/x.npy').astype(np.float64)";
    for (function, name, wrong) in [
        ("step", "return0", "y + 1e-3 * np.abs(y) + 1e-3"),
        ("probs", "return0", "np.exp(2 * x) / np.exp(2 * x).sum(axis=0, keepdims=True)"),
        ("parts", "return1", "np.minimum(1.5 * x, 0)"),
        ("normed", "return0", "x / np.sqrt((x * x).mean(axis=0, keepdims=True) + 1e-5)"),
    ] {
        let case = CASES.iter().find(|c| c.function == function).unwrap();
        assert_oracle_refuses(&file, PRELUDE, case, &dir.path().join(function), name, setup, wrong);
    }
}

/// Graph IR shows each call as `graph.call_kernel` with its callee and written
/// parameters; the plan launches the file's own kernel (not a generated copy of it) after
/// copying or filling its written arguments.
#[test]
fn graph_ir_and_plan_show_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "graph_kernel_calls.tsr", PROGRAM);
    let lower = |function: &str, args: &[&str]| {
        let o = tessera()
            .args(["lower", file.to_str().unwrap(), "--kernel", function])
            .args(args)
            .output()
            .expect("tessera runs");
        assert_eq!(o.status.code(), Some(0), "{function}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let graph = lower("step", &["--stage", "graph"]);
    assert_eq!(graph.matches("graph.call_kernel").count(), 2, "{graph}");
    assert!(graph.contains("{callee = \"saxpy\", written = [2]}"), "{graph}");
    let graph = lower("parts", &["--stage", "graph"]);
    assert!(graph.contains("{callee = \"split_signs\", written = [2, 3]}"), "{graph}");
    let sched = lower("step", &["--stage", "sched"]);
    assert_eq!(sched.matches("{callee = \"saxpy\", source = \"file\"}").count(), 2, "{sched}");
    assert_eq!(sched.matches("copy: a kernel's written argument").count(), 2, "{sched}");
    assert!(sched.contains("saxpy: user kernel `saxpy`"), "{sched}");
    // A `zeros` output is filled in place: no copy.
    let sched = lower("probs", &["--stage", "sched"]);
    assert!(!sched.contains("copy:"), "{sched}");
    assert!(sched.contains("row_softmax: user kernel `row_softmax`"), "{sched}");
    let generated = lower("step", &["--generated"]);
    assert!(!generated.contains("def saxpy("), "{generated}");
    // Tile IR of the plan includes the user's kernel, lowered from the user's file.
    let tile = lower("probs", &["--stage", "tile", "--dims", "R=37,C=48"]);
    assert!(tile.contains("// ===== row_softmax: user kernel `row_softmax` ====="), "{tile}");
    // A stdlib kernel is its instance for the argument's dtype.
    let graph = lower("normed", &["--stage", "graph"]);
    assert!(graph.contains("{callee = \"rms_normalize\", written = [1], stdlib = \"f16\"}"), "{graph}");
    assert!(graph.contains("{callee = \"stable_softmax\", written = [1], stdlib = \"f32\"}"), "{graph}");
    let sched = lower("normed", &["--stage", "sched"]);
    assert!(sched.contains("{callee = \"rms_normalize\", source = \"stdlib f16\"}"), "{sched}");
    assert!(sched.contains("rms_normalize: stdlib kernel `rms_normalize` (f16)"), "{sched}");
}

/// A kernel whose symbol only a compound dim names (`B` of `"B*H"`) gets no value from
/// the call's arguments: the run is refused, naming the symbol, instead of assuming one.
#[test]
fn a_symbol_no_argument_binds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compound.tsr");
    let source = "from tessera import *\n\n\n@kernel\ndef flat(x: Tensor[\"B*H\", \"N\", f32], y: Tensor[\"B*H\", \"N\", f32]):\n    for r in tile.parallel(0, B * H):\n        for c in tile.parallel(0, N, 64):\n            y[r, c:c + 64] = x[r, c:c + 64] * 2.0\n\n\n@jit\ndef f(x: Tensor[\"M\", \"N\", f32]):\n    return flat(x, x)\n";
    std::fs::write(&file, source).unwrap();
    let o = tessera().args(["check", file.to_str().unwrap()]).output().expect("tessera runs");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", "f", "--dims", "M=4,N=64", "--device", "interp"])
        .output()
        .expect("tessera runs");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("no argument binds `B` (it occurs only in the compound dim B*H)"), "{}", text(&o));
}

/// What the checker says about calls: the value's type, a kernel that writes nothing, and
/// `grad` through a call.
#[test]
fn calls_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad_calls.tsr");
    let bad = "from tessera import *\n\n\n@kernel\ndef peek(x: Tensor[\"N\", f32]):\n    for i in tile.parallel(0, N, 256):\n        v = tile.load(x[i:i + 256])\n\n\n@kernel\ndef twice(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32]):\n    for i in tile.parallel(0, N, 256):\n        y[i:i + 256] = x[i:i + 256] * 2.0\n\n\n@jit\ndef f(a: Tensor[\"N\", f32]):\n    peek(a)\n    return a\n\n\n@jit\ndef g(a: Tensor[\"N\", f32], b: Tensor[\"M\", f32]) -> Tensor[\"M\", f32]:\n    return twice(a, b)\n\n\n@autodiff\ndef loss(a: Tensor[\"N\", f32]):\n    return sum(twice(a, a))\n\n\n@jit\ndef h(a: Tensor[\"N\", f32]):\n    return grad(loss)(a)\n";
    std::fs::write(&file, bad).unwrap();
    let o = tessera().args(["check", file.to_str().unwrap()]).output().expect("tessera runs");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("E0504") && out.contains("`peek` stores into none of its parameters"), "{out}");
    assert!(out.contains("E0301") && out.contains("symbol N is bound to N by `a` and to M by `b`"), "{out}");
    assert!(out.contains("E0807") && out.contains("differentiate through the kernel `twice`"), "{out}");
}

/// The f64 reference does not run the plan's code for a called kernel: a plan whose launch
/// of `saxpy` is corrupted (an executor that adds 1 to the first element `saxpy` writes)
/// disagrees with the reference, which keeps the right value.
#[test]
fn the_reference_does_not_run_the_plans_kernel() {
    use std::collections::BTreeMap;
    use tessera_backends::interp::graph::{run_plan_with_dims, InterpExecutor, KernelExecutor};
    use tessera_backends::launch::graph::{GraphRunOptions, GraphSession};
    use tessera_backends::launch::{Device, DeviceRequest};
    use tessera_backends::tensor::{Arg, HostTensor};

    struct Corrupt(InterpExecutor);
    impl KernelExecutor for Corrupt {
        fn launch(&mut self, tile_ir: &tessera_passes::ir::Func, args: &mut [Arg]) -> Result<(), String> {
            self.0.launch(tile_ir, args)?;
            if tile_ir.name == "saxpy" {
                if let Arg::Tensor(t) = &mut args[2] {
                    let mut v = t.to_f64();
                    v[0] += 1.0;
                    *t = HostTensor::from_f64(t.dtype, &t.dims, &v);
                }
            }
            Ok(())
        }
    }
    let first = |a: &Arg| match a {
        Arg::Tensor(t) => t.to_f64()[0],
        other => panic!("a tensor, not {other:?}"),
    };

    let db = tessera_frontend::Database::default();
    let file = tessera_frontend::SourceFile::new(&db, "calls.tsr".into(), PROGRAM.to_string(), None);
    let key = tessera_frontend::db::item_index(&db, file).function(&db, "step").expect("step").key;
    let session = GraphSession::open(&db, key).expect("step plans");
    let dims = BTreeMap::from([("N".to_string(), 300)]);
    let inputs = session.seed(&dims, &[], 0).expect("seeded");
    let options = GraphRunOptions { device: DeviceRequest::Only(Device::Interpreter), ..Default::default() };
    let run = session.run(&inputs, &options).expect("step runs");
    assert!(run.correct(), "{:?}", run.checks);
    let corrupted = run_plan_with_dims(
        &db,
        key,
        tessera_passes::Target::Sm90,
        &inputs.args,
        &inputs.symbols,
        inputs.seed as i64,
        &mut Corrupt(InterpExecutor::default()),
    )
    .expect("the corrupted plan runs");
    let (want, got) = (first(&run.reference[0]), first(&corrupted[0]));
    assert_eq!(run.returned[0].1.to_f64()[0], want);
    assert!((got - want - 1.0).abs() < 1e-3, "the corrupted plan gave {got}, the reference {want}");
}
