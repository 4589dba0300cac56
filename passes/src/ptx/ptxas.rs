//! NVIDIA's PTX assembler as an oracle: does the PTX assemble, and what does the
//! kernel cost (registers, spills, shared memory, stack)? The register-pressure lint
//! is calibrated against these numbers.
//!
//! `ptxas` is found through `TESSERA_PTXAS`, then `PATH`, then `CUDA_HOME` /
//! `/usr/local/cuda`, then the `nvidia-cuda-nvcc-cu12` Python wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What `ptxas -v` reports for the (single) entry of a module.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PtxasReport {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of local memory written and read for spills, per thread.
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// Static shared memory (dynamic shared memory is not known to ptxas).
    pub smem_bytes: u32,
    /// Stack frame bytes per thread.
    pub stack_bytes: u32,
}

/// The `ptxas` executable, if one can be found (the wheel's is `nvidia/cuda_nvcc/bin/ptxas`).
pub fn locate() -> Option<PathBuf> {
    super::tools::locate("ptxas", "TESSERA_PTXAS", Some(&["cuda_nvcc"]))
}

/// Assembles `ptx` for `arch` (`sm_80`, `sm_90`) with `ptxas -v`; an error carries
/// ptxas's messages.
pub fn assemble(ptx: &str, arch: &str) -> Result<PtxasReport, String> {
    let ptxas = locate().ok_or("ptxas was not found (set TESSERA_PTXAS, or put it on PATH)")?;
    assemble_with(&ptxas, ptx, arch)
}

/// `assemble` with a given `ptxas`.
pub fn assemble_with(ptxas: &Path, ptx: &str, arch: &str) -> Result<PtxasReport, String> {
    assemble_to_cubin(ptxas, ptx, arch).map(|(report, _)| report)
}

/// The architecture to assemble a module for: `arch`, or its architecture-specific
/// variant (`sm_90a`) when the module's `.target` asks for that (`wgmma` is sm_90a only).
pub fn module_arch(ptx: &str, arch: &str) -> String {
    let declared = ptx.lines().find_map(|l| l.trim().strip_prefix(".target ")).map(str::trim);
    match declared {
        Some(t) if t == format!("{arch}a") => t.to_string(),
        _ => arch.to_string(),
    }
}

/// `assemble_with`, also returning the cubin ptxas wrote (for `nvdisasm`).
pub fn assemble_to_cubin(ptxas: &Path, ptx: &str, arch: &str) -> Result<(PtxasReport, Vec<u8>), String> {
    let arch = module_arch(ptx, arch);
    let stem = super::tools::scratch_stem();
    let (input, output) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
    std::fs::write(&input, ptx).map_err(|e| format!("cannot write {}: {e}", input.display()))?;
    let result = Command::new(ptxas).arg(format!("-arch={arch}")).arg("-v").arg(&input).arg("-o").arg(&output).output();
    let cubin = std::fs::read(&output);
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let out = result.map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        let name = input.display().to_string();
        return Err(text.replace(&name, "<ptx>").trim().to_string());
    }
    let report = parse_report(&text).ok_or_else(|| format!("unrecognized ptxas output:\n{text}"))?;
    let cubin = cubin.map_err(|e| format!("ptxas wrote no cubin at {}: {e}", output.display()))?;
    Ok((report, cubin))
}

/// The fewest registers a thread of the module's entry needs: the fewest `ptxas -v`
/// reports for it without spilling or a stack frame, free or under a `.maxnreg` bound
/// (a binary search below what it takes when free). `None` when it spills even at 255.
///
/// Left free, ptxas spends registers the occupancy does not need on scheduling (loads
/// hoisted ahead of their uses): the same PTX takes 40 registers for sm_90a and 62 for
/// sm_80, and assembles for sm_80 under `.maxnreg 42` without a spill. This figure is
/// the kernel's demand; the unbounded one is ptxas's appetite. ptxas is not monotone in
/// the bound (a kernel that takes 135 free may spill under 135 and fit under 138), so
/// the search is a good upper estimate of the least, not a proof of it.
pub fn spill_free_registers(ptxas: &Path, ptx: &str, arch: &str) -> Result<Option<u32>, String> {
    let fits = |r: &PtxasReport| r.spill_stores == 0 && r.spill_loads == 0 && r.stack_bytes == 0;
    // A bound below what one instruction takes at once (a `wgmma` with its whole
    // accumulator) is refused outright ("Insufficient registers"): nothing fits.
    let bounded = |n: u32| -> Result<Option<PtxasReport>, String> {
        // `.maxnreg` goes with the entry's other performance directives, before its body.
        let Some(at) = ptx.find(".maxntid") else {
            return Err("the module has no `.maxntid` to place `.maxnreg` beside".into());
        };
        match assemble_with(ptxas, &format!("{}.maxnreg {n}\n{}", &ptx[..at], &ptx[at..]), arch) {
            Ok(r) => Ok(fits(&r).then_some(r)),
            Err(e) if e.contains("Insufficient registers") => Ok(None),
            Err(e) => Err(e),
        }
    };
    let free = assemble_with(ptxas, ptx, arch)?;
    let mut best = if fits(&free) {
        free.registers
    } else {
        // Free, ptxas may have aimed at more programs per SM than one: the whole file.
        match bounded(255)? {
            Some(r) => r.registers,
            None => return Ok(None),
        }
    };
    let (mut lo, mut hi) = (8u32, best);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match bounded(mid)? {
            Some(r) => {
                best = best.min(r.registers);
                hi = mid;
            }
            None => lo = mid + 1,
        }
    }
    Ok(Some(best))
}

/// Reads the `-v` lines: "N bytes stack frame, N bytes spill stores, N bytes spill
/// loads" and "Used N registers, ... N bytes smem ...".
pub fn parse_report(text: &str) -> Option<PtxasReport> {
    let mut report = PtxasReport::default();
    let mut saw_registers = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split([',', ':']).map(str::trim).collect();
        for f in fields {
            let words: Vec<&str> = f.split_whitespace().collect();
            match words.as_slice() {
                ["Used", n, "registers"] => {
                    report.registers = n.parse().ok()?;
                    saw_registers = true;
                }
                [n, "bytes", "stack", "frame"] => report.stack_bytes = n.parse().ok()?,
                [n, "bytes", "spill", "stores"] => report.spill_stores = n.parse().ok()?,
                [n, "bytes", "spill", "loads"] => report.spill_loads = n.parse().ok()?,
                [n, "bytes", "smem"] => report.smem_bytes = n.parse().ok()?,
                _ => {}
            }
        }
    }
    saw_registers.then_some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        let text = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'k' for 'sm_80'\n\
            ptxas info    : Function properties for k\n    \
            16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 368 bytes cmem[0]\n";
        let r = parse_report(text).unwrap();
        assert_eq!(
            r,
            PtxasReport { registers: 168, spill_stores: 8, spill_loads: 12, smem_bytes: 1024, stack_bytes: 16 }
        );
        assert_eq!(parse_report("ptxas fatal   : Unresolved extern function"), None);
    }

    #[test]
    fn modules_for_sm_90a_are_assembled_for_it() {
        assert_eq!(module_arch(".version 8.0\n.target sm_90a\n", "sm_90"), "sm_90a");
        assert_eq!(module_arch(".version 8.0\n.target sm_90\n", "sm_90"), "sm_90");
        assert_eq!(module_arch(".target sm_80\n", "sm_90"), "sm_90");
    }
}
