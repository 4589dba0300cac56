//! Runs of a fixture's kernel with `--save`, for tests that compare the saved outputs
//! with an oracle they compute themselves. Included as a module
//! (`#[path = "support/saved_runs.rs"] mod saved_runs;`).

// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_backends::npy;
use tessera_backends::tensor::HostTensor;
use tessera_frontend::check::DType;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A kernel run with `--save`: its report and its saved arrays.
pub struct Saved {
    pub text: String,
    /// What the run wrote to standard error (its warnings).
    pub warnings: String,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Saved {
    /// A saved array (`A.npy`, `C.out.npy`) in f64.
    pub fn read(&self, name: &str) -> Vec<f64> {
        npy::read(&self.dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")).to_f64()
    }
}

/// Runs `kernel` of `fixture` on `device` with `args` (`--dims`, `--input`, ...), saving
/// its arrays; `None` when this build has no CPU backend (it is a feature).
pub fn run_saved(fixture: &str, kernel: &str, device: &str, args: &[&str]) -> Option<Saved> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("saved");
    let mut all = vec!["run", fixture, "--kernel", kernel, "--device", device, "--repeat", "1"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--save", dir.to_str().unwrap()]);
    let o = Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(root()).args(&all).output().expect("tessera runs");
    let (text, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr));
    if device == "cpu" && err.contains("no CPU backend") {
        return None;
    }
    assert_eq!(o.status.code(), Some(0), "{kernel} on {device} {args:?}: {text}{err}");
    Some(Saved { text, warnings: err.into_owned(), dir, _tmp: tmp })
}

/// [`run_saved`] on the interpreter and on the CPU (where this build has one), each run
/// free of warnings, handing each device's run to `check`.
pub fn on_each_device(fixture: &str, kernel: &str, args: &[&str], mut check: impl FnMut(&str, &Saved)) {
    for device in ["interp", "cpu"] {
        let Some(saved) = run_saved(fixture, kernel, device, args) else { continue };
        assert!(!saved.warnings.contains("warning"), "{}", saved.warnings);
        check(device, &saved);
    }
}

/// Writes `values` as the 1-D `.npy` of parameter `name` and returns its `--input` argument.
pub fn input(dir: &Path, name: &str, dtype: DType, values: &[f64]) -> String {
    input_shaped(dir, name, dtype, &[values.len()], values)
}

/// [`input`] of a tensor of `dims` (row-major `values`).
pub fn input_shaped(dir: &Path, name: &str, dtype: DType, dims: &[usize], values: &[f64]) -> String {
    let path = dir.join(format!("{name}.npy"));
    npy::write(&path, &HostTensor::from_f64(dtype, dims, values)).unwrap();
    format!("{name}={}", path.display())
}
