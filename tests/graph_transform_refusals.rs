//! E0808: what `vmap` and `jvp` cannot transform is refused by `tessera check`, at the
//! operation (in the transformed function or one it calls) with a label at the
//! transform, not first at lowering. A transformed function whose calls are all
//! transformable checks clean, and still runs and matches NumPy.

mod graph_oracles;

use std::path::Path;
use std::process::Command;

use graph_oracles::{devices, numpy, tessera, text};

const REFUSED: &str = "from tessera import *

@kernel
def dbl(X: Tensor[\"N\", f32], Y: Tensor[\"N\", f32]):
    ctx = tile.context()
    for i in tile.parallel(0, N, ctx.BM):
        Y[i:i + ctx.BM] = X[i:i + ctx.BM] * 2.0

def noisy(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    return dropout(x, 0.5)

def inner(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    return dbl(x, x) + 1.0

def outer(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    return inner(x) * 2.0

@jit
def a(x: Tensor[\"B\", \"N\", f32]) -> Tensor[\"B\", \"N\", f32]:
    return vmap(noisy)(x)

@jit
def b(x: Tensor[\"N\", f32], t: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    y, dy = jvp(outer, (x,), (t,))
    return dy
";

/// (code, 1-based line, column range text) of every diagnostic of `file`.
fn diagnostics(file: &Path, src: &str) -> Vec<(String, usize, String, String)> {
    let o = tessera().args(["check", file.to_str().unwrap(), "--format", "json"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let lines: Vec<&str> = src.lines().collect();
    v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let line = d["range"]["start"]["line"].as_u64().unwrap() as usize;
            let (c0, c1) = (
                d["range"]["start"]["column"].as_u64().unwrap() as usize,
                d["range"]["end"]["column"].as_u64().unwrap() as usize,
            );
            (
                d["code"].as_str().unwrap().to_string(),
                line,
                lines[line - 1][c0 - 1..c1 - 1].to_string(),
                d["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn untransformable_operations_are_refused_at_check_time() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.tsr");
    std::fs::write(&file, REFUSED).unwrap();
    let d = diagnostics(&file, REFUSED);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1, d[0].2.as_str()), ("E0808", 10, "dropout(x, 0.5)"), "{d:?}");
    assert!(d[0].3.contains("`vmap` cannot batch `dropout` (in `noisy`)"), "{d:?}");
    // Through a helper: at the kernel call in `inner`, not at `outer` or the jvp.
    assert_eq!((d[1].0.as_str(), d[1].1, d[1].2.as_str()), ("E0808", 13, "dbl(x, x)"), "{d:?}");
    assert!(d[1].3.contains("`jvp` cannot see into the kernel `dbl` (called in `inner`)"), "{d:?}");
    // The label names the transform.
    let o = tessera().args(["check", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("transformed by `vmap` here"), "{}", text(&o));
    assert!(text(&o).contains("transformed by `jvp` here"), "{}", text(&o));
}

const CLEAN: &str = "from tessera import *

def inner(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    return tanh(x) * 3.0

def outer(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    return inner(x) + x * x

@jit
def batched(x: Tensor[\"B\", \"N\", f32]) -> Tensor[\"B\", \"N\", f32]:
    return vmap(outer)(x)

@jit
def tangent(x: Tensor[\"N\", f32], t: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    y, dy = jvp(outer, (x,), (t,))
    return dy

@jit
def tangent_of_dropout(x: Tensor[\"N\", f32], t: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    y, dy = jvp(outer, (dropout(x, 0.0),), (t,))
    return dy
";

/// No false refusal: helpers with transformable ops check clean and run, against NumPy.
#[test]
fn transformable_helpers_check_clean_and_match_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.tsr");
    std::fs::write(&file, CLEAN).unwrap();
    assert_eq!(diagnostics(&file, CLEAN), vec![]);
    if !numpy() {
        return;
    }
    for device in devices() {
        for (function, dims, oracle) in [
            ("batched", "B=3,N=40", "x = np.load(o + '/x.npy').astype(np.float64)\nwant = np.tanh(x) * 3 + x * x"),
            (
                "tangent",
                "N=40",
                "x = np.load(o + '/x.npy').astype(np.float64)\nt = np.load(o + '/t.npy').astype(np.float64)\n\
                 want = (3 * (1 - np.tanh(x) ** 2) + 2 * x) * t",
            ),
        ] {
            let out = dir.path().join(format!("{function}_{device}"));
            let o = tessera()
                .args(["run", file.to_str().unwrap(), "--kernel", function, "--dims", dims, "--device", device])
                .args(["--repeat", "1", "--save", out.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "{function} on {device}: {}", text(&o));
            let script = format!(
                "import sys, numpy as np\no = sys.argv[1]\n{oracle}\ngot = np.load(o + '/return.out.npy')\n\
                 assert got.shape == want.shape, (got.shape, want.shape)\n\
                 assert np.allclose(got, want, rtol=1e-4, atol=1e-5), np.max(np.abs(got - want))\n"
            );
            let p = Command::new("python3").args(["-c", &script, out.to_str().unwrap()]).output().unwrap();
            assert!(p.status.success(), "NumPy oracle of {function} on {device}: {}", text(&p));
            let wrong = script.replace("want = ", "want = 1.001 * ");
            let p = Command::new("python3").args(["-c", &wrong, out.to_str().unwrap()]).output().unwrap();
            assert!(!p.status.success(), "the oracle of {function} accepts a wrong result");
        }
    }
}
