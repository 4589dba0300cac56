//! Runs of a fixture's kernel on the interpreter and on the CPU with `--save`, for tests
//! that compare the saved outputs with an oracle they compute themselves. Included as a
//! module (`#[path = "support/saved_runs.rs"] mod saved_runs;`).

use std::path::Path;
use std::process::Command;

use tessera_backends::npy;
use tessera_backends::tensor::HostTensor;
use tessera_frontend::check::DType;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kernel` of `fixture` with `args` on the interpreter and on the CPU (when this
/// build has a CPU backend: it is a feature), saving its arrays into `dir`, and hands each
/// device's arrays to `check` (`read("Q.out.npy")`).
pub fn on_each_device(
    fixture: &str,
    kernel: &str,
    dir: &Path,
    args: &[&str],
    mut check: impl FnMut(&str, &dyn Fn(&str) -> Vec<f64>),
) {
    for device in ["interp", "cpu"] {
        let saved = dir.join(format!("{kernel}_{device}"));
        let mut all = vec!["run", fixture, "--kernel", kernel, "--device", device, "--repeat", "1"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--save", saved.to_str().unwrap()]);
        let o = Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(root()).args(&all).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        if device == "cpu" && err.contains("no CPU backend") {
            continue;
        }
        assert_eq!(o.status.code(), Some(0), "{kernel} on {device}: {out}{err}");
        assert!(!err.contains("warning"), "{err}");
        let read = |name: &str| npy::read(&saved.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")).to_f64();
        check(device, &read);
    }
}

/// Writes `values` as the `.npy` of parameter `name` and returns its `--input` argument.
pub fn input(dir: &Path, name: &str, dtype: DType, values: &[f64]) -> String {
    let path = dir.join(format!("{name}.npy"));
    npy::write(&path, &HostTensor::from_f64(dtype, &[values.len()], values)).unwrap();
    format!("{name}={}", path.display())
}
