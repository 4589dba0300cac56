//! What the graph-level oracle suites share (`tests/graph_level.rs`,
//! `tests/graph_level_ops.rs`): running a `@jit` function through the real `tessera`
//! binary with `--save`, and a NumPy script that recomputes its results from the saved
//! inputs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One graph function of a suite's program, the dims it runs at and its NumPy oracle
/// (run after the suite's prelude, with the `--save` directory as `sys.argv[1]`).
pub struct Case {
    pub function: &'static str,
    pub dims: &'static str,
    pub oracle: &'static str,
}

/// The helpers every oracle prelude may start with ([`prelude`]): the saved inputs as
/// float64 (`load`), a saved result of a given shape (`result`), and an elementwise bound
/// check that names the first element outside it (`close`).
pub const NUMPY_HELPERS: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def load(name):
    return np.load(d + "/" + name + ".npy").astype(np.float64)
def result(name, shape):
    y = np.load(d + "/" + name + ".out.npy")
    assert y.shape == tuple(shape), (name, y.shape, shape)
    return y.astype(np.float64)
def close(name, y, ref, bound):
    bad = ~(np.abs(y - ref) <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} beyond the bound; at {i}: got {y[i]}, want {ref[i]}")
"#;

/// A suite's prelude: [`NUMPY_HELPERS`], then its own definitions.
pub fn prelude(own: &str) -> String {
    format!("{NUMPY_HELPERS}{own}")
}

pub fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("NO_COLOR");
    cmd
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Whether python3 with numpy is here; CI must have it.
pub fn numpy() -> bool {
    let ok = Command::new("python3").args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI needs python3 with numpy for the graph-level oracles");
        eprintln!("skipping the NumPy oracles: python3 with numpy is not installed");
    }
    ok
}

/// The devices to run on: the interpreter, and the CPU backend where this build has it.
pub fn devices() -> Vec<&'static str> {
    let mut d = vec!["interp"];
    if tessera_backends::HAS_CPU_BACKEND {
        d.push("cpu");
    }
    d
}

/// Writes a suite's program into `dir` as `name`.
pub fn program(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs one case with `--save`: it must exit 0 with the verdict `correct` on `device`.
pub fn run_saved(file: &Path, case: &Case, device: &str, out: &Path) {
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", case.function, "--dims", case.dims])
        .args(["--device", device, "--repeat", "1", "--save", out.to_str().unwrap()])
        .output()
        .expect("tessera runs");
    assert_eq!(o.status.code(), Some(0), "{} on {device}: {}", case.function, text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(report["kind"], "graph", "{}", case.function);
    assert_eq!(report["device"], device, "{}: {report}", case.function);
    assert_eq!(report["reference"], "graph-f64", "{}", case.function);
    assert_eq!(report["verdict"], "correct", "{} on {device}: {report}", case.function);
}

/// Runs a case's oracle after `prelude` on the results saved in `out`.
pub fn oracle(prelude: &str, case: &Case, out: &Path) -> Output {
    let script = format!("{prelude}\n{}", case.oracle);
    Command::new("python3").args(["-c", &script, out.to_str().unwrap()]).output().expect("python3 runs")
}

/// Writes `program` as `file_name` and runs every case on every device with `--save`,
/// checking each against its oracle (after `prelude`) where NumPy is here.
pub fn run_every_case(file_name: &str, program_text: &str, prelude: &str, cases: &[Case]) {
    let has_numpy = numpy();
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), file_name, program_text);
    for device in devices() {
        for case in cases {
            let out = dir.path().join(format!("{}_{device}", case.function));
            run_saved(&file, case, device, &out);
            if has_numpy {
                let o = oracle(prelude, case, &out);
                assert!(o.status.success(), "NumPy oracle of {} on {device}: {}", case.function, text(&o));
            }
        }
    }
}

/// The oracle of `case` accepts its results run on the interpreter into `out`, and refuses
/// them once result `name` is overwritten with `wrong`: a NumPy expression over `y` (the
/// saved result), `d` (the directory) and what `setup` defines.
pub fn assert_oracle_refuses(
    file: &Path,
    prelude: &str,
    case: &Case,
    out: &Path,
    name: &str,
    setup: &str,
    wrong: &str,
) {
    let function = case.function;
    run_saved(file, case, "interp", out);
    let o = oracle(prelude, case, out);
    assert!(o.status.success(), "NumPy oracle of {function}: {}", text(&o));
    let replace = format!(
        "import numpy as np\nd = '{dir}'\np = d + '/{name}.out.npy'\ny = np.load(p)\n{setup}\n\
         np.save(p, np.asarray({wrong}).astype(y.dtype))\n",
        dir = out.display(),
    );
    let o = Command::new("python3").args(["-c", &replace]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = oracle(prelude, case, out);
    assert!(!o.status.success(), "the oracle of {function} accepted `{wrong}`");
    assert!(text(&o).contains("AssertionError"), "{function}: {}", text(&o));
}
