//! NVIDIA's disassembler as an oracle for what ptxas made of the PTX: the SASS of a
//! cubin (`HGMMA` for `wgmma.mma_async`, `HMMA` for `mma.sync`).
//!
//! `nvdisasm` is found through `TESSERA_NVDISASM`, then `PATH`, then `CUDA_HOME` /
//! `/usr/local/cuda`, then the `bin/` folders of the `nvidia` Python packages (the
//! `nvidia-cuda-nvdisasm` wheel that `cargo xtask install` installs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `nvdisasm` executable, if one can be found.
pub fn locate() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TESSERA_NVDISASM") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join("nvdisasm");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let cuda_homes = ["CUDA_HOME", "CUDA_PATH"].into_iter().filter_map(std::env::var_os).map(PathBuf::from);
    for home in cuda_homes.chain([PathBuf::from("/usr/local/cuda")]) {
        let p = home.join("bin").join("nvdisasm");
        if p.is_file() {
            return Some(p);
        }
    }
    // The wheels put it in `nvidia/<package>/bin` (`nvidia/cu13/bin` for CUDA 13).
    for python in ["python3", "python"] {
        let Ok(out) =
            Command::new(python).args(["-c", "import nvidia; print('\\n'.join(list(nvidia.__path__)))"]).output()
        else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        for root in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(entries) = std::fs::read_dir(root.trim()) else { continue };
            let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            dirs.sort();
            if let Some(p) = dirs.into_iter().map(|d| d.join("bin").join("nvdisasm")).find(|p| p.is_file()) {
                return Some(p);
            }
        }
    }
    None
}

/// The SASS of `cubin`, as `nvdisasm -c` prints it (code sections only).
pub fn disassemble(nvdisasm: &Path, cubin: &[u8]) -> Result<String, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "tessera-{}-{}.cubin",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, cubin).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let result = Command::new(nvdisasm).arg("-c").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = result.map_err(|e| format!("cannot run {}: {e}", nvdisasm.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
