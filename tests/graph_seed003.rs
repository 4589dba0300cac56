//! Seed 003, Example 3 (tests/fixtures/dist): a module-level `dist.tensor` W (columns
//! split over `tp`) passed to `grad(train_step)` from a `@jit` function whose `x`/`y`
//! are split over `dp`, on the seed's 4×2 mesh.
//!
//! - The seed's own sizes (8192) check clean, and Graph IR shows the collectives: the
//!   gradient's all-reduce over `dp` (64 MiB of `W`'s columns per device) and the
//!   loss's all-reduces.
//! - At 64 instead of 8192, `tessera run --save` runs it on one device and on the
//!   simulated 8-device mesh; both match the f64 reference (the run's verdicts), and
//!   the saved loss and gradient match a NumPy oracle.

mod graph_oracles;

use graph_oracles::*;

const FULL: &str = include_str!("fixtures/dist/seed003_example3.tsr");
const SMALL: &str = include_str!("fixtures/dist/seed003_example3_small.tsr");

#[test]
fn the_seed_program_checks_clean_and_its_graph_ir_shows_the_collectives() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "seed003.tsr", FULL);
    let o = tessera().args(["check", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = tessera()
        .args(["lower", "--kernel", "step", "--stage", "graph", "--dims", "B=32", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let ir = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(ir.contains("globals = \"W\""), "W is an implicit parameter: {ir}");
    let reduces: Vec<&str> = ir.lines().filter(|l| l.contains("dist.all_reduce")).collect();
    let gathers = ir.lines().filter(|l| l.contains("dist.all_gather")).count();
    assert_eq!(gathers, 0, "{ir}");
    // The gradient: W's [8192, 4096] bf16 columns per device, reduced in f32.
    let grad: Vec<&&str> = reduces.iter().filter(|l| l.contains("bytes = 134217728")).collect();
    assert_eq!(grad.len(), 1, "{ir}");
    assert!(grad[0].contains("axis = \"dp\""), "{ir}");
    // The loss: a mean over dims split over dp and tp.
    assert!(reduces.iter().any(|l| l.contains("axis = \"tp\"")), "{ir}");
}

const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
x, y, W = load('x.npy'), load('y.npy'), load('W.npy')
r = x @ W - y
def close(name, want):
    got = load(name + '.out.npy')
    assert got.shape == want.shape, (name, got.shape, want.shape)
    # bf16 results: half a bf16 ulp of the largest value, twice over.
    tol = 2 ** -8 * max(np.max(np.abs(want)), 1e-30)
    assert np.allclose(got, want, rtol=2 ** -7, atol=tol), (name, np.max(np.abs(got - want)), tol)
"#;

const CASES: &[Case] = &[Case {
    function: "step",
    dims: "B=16",
    oracle: "close('return0', np.asarray(np.mean(r ** 2)))\nclose('return1', 2.0 / r.size * x.T @ r)",
}];

#[test]
fn the_seed_step_runs_on_the_mesh_and_matches_numpy() {
    run_every_case("seed003_small.tsr", SMALL, PRELUDE, CASES);
    // The mesh part of the run: its own verdict, and the collectives it ran.
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "seed003_small.tsr", SMALL);
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", "step", "--dims", "B=16", "--device", "interp", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mesh = &report["mesh"];
    assert_eq!(mesh["devices"], 8, "{mesh}");
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    let axes: Vec<&str> = mesh["collectives"].as_array().unwrap().iter().map(|c| c["axis"].as_str().unwrap()).collect();
    assert!(axes.contains(&"dp") && axes.contains(&"tp"), "{mesh}");
}
