//! Finding NVIDIA's command-line tools (`ptxas`, `nvdisasm`), in one order: the tool's
//! own environment variable, then `PATH`, then `CUDA_HOME` / `CUDA_PATH` /
//! `/usr/local/cuda`, then the `bin/` folders of the `nvidia` Python packages (the PyPI
//! wheels `cargo xtask install` installs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The executable `name`, if one can be found. `env_var` names it outright (and is the
/// only place looked at when set). `wheel_packages`: the `nvidia.<package>` folders whose
/// `bin/` may hold it, or every package of the `nvidia` namespace (in name order) for None.
pub(crate) fn locate(name: &str, env_var: &str, wheel_packages: Option<&[&str]>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        return is_executable(&p).then_some(p);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        if let Some(p) = std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| is_executable(p)) {
            return Some(p);
        }
    }
    let cuda_homes = ["CUDA_HOME", "CUDA_PATH"].into_iter().filter_map(std::env::var_os).map(PathBuf::from);
    for home in cuda_homes.chain([PathBuf::from("/usr/local/cuda")]) {
        let p = home.join("bin").join(name);
        if is_executable(&p) {
            return Some(p);
        }
    }
    // The wheels put their tools in `nvidia/<package>/bin` (`nvidia/cuda_nvcc/bin` for
    // ptxas, `nvidia/cu13/bin` for CUDA 13's nvdisasm).
    for python in ["python3", "python"] {
        let Ok(out) =
            Command::new(python).args(["-c", "import nvidia; print('\\n'.join(list(nvidia.__path__)))"]).output()
        else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        for root in String::from_utf8_lossy(&out.stdout).lines().map(|r| Path::new(r.trim())) {
            let packages: Vec<PathBuf> = match wheel_packages {
                Some(names) => names.iter().map(|n| root.join(n)).collect(),
                None => {
                    let Ok(entries) = std::fs::read_dir(root) else { continue };
                    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
                    dirs.sort();
                    dirs
                }
            };
            if let Some(p) = packages.into_iter().map(|d| d.join("bin").join(name)).find(|p| is_executable(p)) {
                return Some(p);
            }
        }
    }
    None
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// A path in the temporary directory, without extension, that no other call of this
/// process, and no other process, gets: the files a tool reads and writes are named by it.
pub(crate) fn scratch_stem() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "tessera-{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    ))
}
