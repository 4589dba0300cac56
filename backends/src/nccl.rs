//! NCCL for collectives on NVIDIA GPUs, through cudarc's bindings, loaded at run time
//! like the CUDA driver: build with the `nccl` feature; a machine without the library
//! gets a clean "no NCCL" from [`probe`], never a crash (cudarc panics on a call into a
//! library it cannot load, so nothing calls into NCCL before the probe has found it).
//!
//! Launching across processes follows torchrun's environment (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`): the processes meet over TCP
//! (`mesh::fabric::tcp`), where rank 0 hands out its NCCL unique id, and the mesh's
//! messages then go GPU to GPU ([`fabric`]). See `docs/mesh.md`.

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
pub use imp::{fabric, one_rank_all_reduce};

/// Without the `nccl` feature: why there is no NCCL fabric.
#[cfg(not(feature = "nccl"))]
pub fn fabric(_: &crate::mesh::fabric::tcp::Rendezvous, _: u64) -> Result<crate::mesh::Fabric, String> {
    imp::probe().map(|_| unreachable!("the probe of a build without NCCL always fails"))
}

#[cfg(feature = "nccl")]
mod imp {
    use std::sync::Arc;

    use cudarc::driver::{CudaContext, CudaStream};
    use cudarc::nccl::{result, safe, sys};

    use super::NcclInfo;
    use crate::mesh::fabric::tcp::Rendezvous;
    use crate::mesh::fabric::{Fabric, Link};

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

    /// The mesh's fabric over NCCL: the processes meet over TCP (`Rendezvous`), rank 0
    /// sends them its NCCL unique id there, and the frames of every step then go GPU to
    /// GPU with `ncclSend`/`ncclRecv` on GPU `LOCAL_RANK` (`RANK` when unset).
    pub fn fabric(rendezvous: &Rendezvous, fingerprint: u64) -> Result<Fabric, String> {
        probe()?;
        let (rank, world) = (rendezvous.rank, rendezvous.world);
        let local = match std::env::var("LOCAL_RANK") {
            Ok(s) => s.trim().parse().map_err(|_| "LOCAL_RANK is not a non-negative integer".to_string())?,
            Err(_) => rank,
        };
        let stream = stream(local)?;
        let tcp = rendezvous.connect(fingerprint)?;
        let id = if rank == 0 {
            let id = safe::Id::new().map_err(|e| format!("ncclGetUniqueId failed: {e:?}"))?;
            let bytes: Vec<f64> = id.internal().iter().map(|&c| f64::from(c as u8)).collect();
            tcp.all_gather(bytes)?;
            id
        } else {
            let ids = tcp.all_gather(Vec::new())?;
            let internal: [std::ffi::c_char; 128] = ids[0]
                .iter()
                .map(|&b| b as u8 as std::ffi::c_char)
                .collect::<Vec<_>>()
                .try_into()
                .map_err(|_| format!("rank 0 sent an NCCL id of {} bytes, not 128", ids[0].len()))?;
            safe::Id::uninit(internal)
        };
        let comm = safe::Comm::from_rank(stream.clone(), rank, world, id)
            .map_err(|e| format!("ncclCommInitRank (rank {rank} of {world}, GPU {local}) failed: {e:?}"))?;
        Ok(Fabric::new(rank, world, "NCCL", Box::new(NcclLink { comm, stream, rank })))
    }

    /// Frames GPU to GPU: first every frame's length (one value to each peer), then the
    /// frames, each phase one NCCL group of sends and receives.
    struct NcclLink {
        comm: safe::Comm,
        stream: Arc<CudaStream>,
        rank: usize,
    }

    // SAFETY: the communicator is used by one thread at a time (the fabric's mutex), as
    // NCCL requires of a communicator.
    unsafe impl Send for NcclLink {}

    impl NcclLink {
        /// One group: `frames[peer]` to each peer, and a buffer of `lengths[peer]` from each.
        fn group(&self, frames: &[Vec<f64>], lengths: &[usize]) -> Result<Vec<Vec<f64>>, String> {
            let nccl = |what: &str, e: result::NcclError| format!("{what} on rank {}: {e:?}", self.rank);
            let cuda = |what: &str, e: cudarc::driver::DriverError| format!("{what} on rank {}: {e:?}", self.rank);
            let mut sends = Vec::new();
            for (peer, frame) in frames.iter().enumerate() {
                if peer != self.rank && !frame.is_empty() {
                    sends.push((peer, self.stream.memcpy_stod(frame).map_err(|e| cuda("copy to the GPU", e))?));
                }
            }
            let mut recvs = Vec::new();
            for (peer, &n) in lengths.iter().enumerate() {
                if peer != self.rank && n > 0 {
                    recvs.push((peer, self.stream.alloc_zeros::<f64>(n).map_err(|e| cuda("GPU allocation", e))?));
                }
            }
            safe::group_start().map_err(|e| nccl("ncclGroupStart", e))?;
            for (peer, buf) in &sends {
                self.comm.send(buf, *peer as i32).map_err(|e| nccl("ncclSend", e))?;
            }
            for (peer, buf) in &mut recvs {
                self.comm.recv(buf, *peer as i32).map_err(|e| nccl("ncclRecv", e))?;
            }
            safe::group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
            let mut out = vec![Vec::new(); frames.len()];
            for (peer, buf) in &recvs {
                out[*peer] = self.stream.memcpy_dtov(buf).map_err(|e| cuda("copy from the GPU", e))?;
            }
            self.stream.synchronize().map_err(|e| cuda("synchronize", e))?;
            Ok(out)
        }
    }

    impl Link for NcclLink {
        fn swap(&mut self, frames: Vec<Vec<f64>>) -> Result<Vec<Vec<f64>>, String> {
            let world = frames.len();
            let lengths: Vec<Vec<f64>> = frames
                .iter()
                .enumerate()
                .map(|(p, f)| if p == self.rank { vec![] } else { vec![f.len() as f64] })
                .collect();
            let ones: Vec<usize> = (0..world).map(|p| usize::from(p != self.rank)).collect();
            let theirs = self.group(&lengths, &ones)?;
            let incoming: Vec<usize> = theirs.iter().map(|l| l.first().map_or(0, |&n| n as usize)).collect();
            self.group(&frames, &incoming)
        }
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
