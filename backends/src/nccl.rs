//! NCCL for collectives on NVIDIA GPUs, through cudarc's bindings, loaded at run time
//! like the CUDA driver: build with the `nccl` feature; a machine without the library
//! gets a clean "no NCCL" from [`probe`], never a crash (cudarc panics on a call into a
//! library it cannot load, so nothing calls into NCCL before the probe has found it).
//!
//! Launching across processes follows torchrun's environment: `RANK` and `WORLD_SIZE`
//! name this process's place, and every rank reads the same NCCL unique id from
//! `TESSERA_NCCL_ID` (rank 0 creates it with [`unique_id_hex`] and shares it, over a
//! shared file or the job launcher, before the others start). See `docs/mesh.md`.

/// What the probe found.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NcclInfo {
    /// `major.minor.patch`.
    pub version: String,
}

/// Whether NCCL can be used here, and which version.
pub fn probe() -> Result<NcclInfo, String> {
    imp::probe()
}

#[cfg(not(feature = "nccl"))]
mod imp {
    pub fn probe() -> Result<super::NcclInfo, String> {
        Err("no NCCL: this build has no NCCL support (build with `--features nccl`)".into())
    }
}

#[cfg(feature = "nccl")]
pub use imp::{comm_from_env, one_rank_all_reduce, unique_id_hex};

#[cfg(feature = "nccl")]
mod imp {
    use std::sync::Arc;

    use cudarc::driver::{CudaContext, CudaStream};
    use cudarc::nccl::{result, safe, sys};

    use super::NcclInfo;

    pub fn probe() -> Result<NcclInfo, String> {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            // NCCL's soname is libnccl.so.2, which cudarc's loader does not look for.
            let versioned = c"libnccl.so.2";
            // SAFETY: dlopen of a library name; closed right after.
            let handle = unsafe { libc::dlopen(versioned.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
            if !handle.is_null() {
                // SAFETY: the handle dlopen just returned.
                unsafe { libc::dlclose(handle) };
                return Err("no NCCL: libnccl.so.2 is installed but no libnccl.so is on the library path \
                     (link libnccl.so to it in a directory of LD_LIBRARY_PATH)"
                    .into());
            }
            return Err("no NCCL: the NCCL library (libnccl.so) is not installed".into());
        }
        let code = result::get_nccl_version().map_err(|e| format!("no NCCL: ncclGetVersion failed: {e:?}"))?;
        // NCCL ≥ 2.9 encodes major*10000 + minor*100 + patch.
        let version = format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
        Ok(NcclInfo { version })
    }

    fn stream(ordinal: usize) -> Result<Arc<CudaStream>, String> {
        if crate::cuda::GpuDevice::open_ordinal(ordinal as i32).is_err() {
            return Err(format!("no NVIDIA GPU {ordinal} for NCCL"));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("CUDA context on GPU {ordinal}: {e:?}"))?;
        Ok(ctx.default_stream())
    }

    /// A new NCCL unique id, as the hex that `TESSERA_NCCL_ID` carries.
    pub fn unique_id_hex() -> Result<String, String> {
        probe()?;
        let id = safe::Id::new().map_err(|e| format!("ncclGetUniqueId failed: {e:?}"))?;
        Ok(id.internal().iter().map(|&c| format!("{:02x}", c as u8)).collect())
    }

    /// This process's communicator, from `RANK`, `WORLD_SIZE`, `TESSERA_NCCL_ID` and
    /// `LOCAL_RANK` (the GPU; `RANK` when unset).
    pub fn comm_from_env() -> Result<safe::Comm, String> {
        probe()?;
        let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
        let number = |name: &str| -> Result<usize, String> {
            var(name)?.parse().map_err(|_| format!("{name} is not a non-negative integer"))
        };
        let (rank, world) = (number("RANK")?, number("WORLD_SIZE")?);
        if rank >= world {
            return Err(format!("RANK {rank} is not below WORLD_SIZE {world}"));
        }
        let local = number("LOCAL_RANK").unwrap_or(rank);
        let hex = var("TESSERA_NCCL_ID")?;
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
            .collect::<Option<_>>()
            .ok_or("TESSERA_NCCL_ID is not hex")?;
        let internal: [std::ffi::c_char; 128] = bytes
            .iter()
            .map(|&b| b as std::ffi::c_char)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| format!("TESSERA_NCCL_ID has {} bytes, NCCL ids have 128", bytes.len()))?;
        let id = safe::Id::uninit(internal);
        safe::Comm::from_rank(stream(local)?, rank, world, id).map_err(|e| format!("ncclCommInitRank failed: {e:?}"))
    }

    /// A one-rank all-reduce on GPU 0: the smallest check that NCCL runs here.
    pub fn one_rank_all_reduce() -> Result<Vec<f32>, String> {
        probe()?;
        let stream = stream(0)?;
        let comms = safe::Comm::from_devices(vec![stream.clone()]).map_err(|e| format!("ncclCommInitAll: {e:?}"))?;
        let input = [1.0f32, 2.0, 3.0, 4.0];
        let send = stream.memcpy_stod(&input).map_err(|e| format!("copy to the GPU: {e:?}"))?;
        let mut recv = stream.alloc_zeros::<f32>(input.len()).map_err(|e| format!("GPU allocation: {e:?}"))?;
        comms[0].all_reduce(&send, &mut recv, &safe::ReduceOp::Sum).map_err(|e| format!("ncclAllReduce: {e:?}"))?;
        stream.memcpy_dtov(&recv).map_err(|e| format!("copy from the GPU: {e:?}"))
    }
}
