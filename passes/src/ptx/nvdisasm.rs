//! NVIDIA's disassembler as an oracle for what ptxas made of the PTX: the SASS of a
//! cubin (`HGMMA` for `wgmma.mma_async`, `HMMA` for `mma.sync`).
//!
//! `nvdisasm` is found through `TESSERA_NVDISASM`, then `PATH`, then `CUDA_HOME` /
//! `/usr/local/cuda`, then the `bin/` folders of the `nvidia` Python packages (the
//! `nvidia-cuda-nvdisasm` wheel that `cargo xtask install` installs).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `nvdisasm` executable, if one can be found (in any `nvidia` wheel's `bin/`).
pub fn locate() -> Option<PathBuf> {
    super::tools::locate("nvdisasm", "TESSERA_NVDISASM", None)
}

/// The SASS of `cubin`, as `nvdisasm -c` prints it (code sections only).
pub fn disassemble(nvdisasm: &Path, cubin: &[u8]) -> Result<String, String> {
    let path = super::tools::scratch_stem().with_extension("cubin");
    std::fs::write(&path, cubin).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let result = Command::new(nvdisasm).arg("-c").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = result.map_err(|e| format!("cannot run {}: {e}", nvdisasm.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
