//! The Tensor Memory Accelerator and mbarriers (sm_90): `mbarrier.init`,
//! `mbarrier.expect_tx`, `mbarrier.arrive`, `mbarrier.try_wait.parity`,
//! `fence.mbarrier_init`, and `cp.async.bulk.tensor.Nd...mbarrier::complete_tx::bytes`
//! through tensor maps; and TMA stores, `cp.async.bulk.tensor.Nd.global.shared::cta
//! ...bulk_group` with `cp.async.bulk.commit_group` and `cp.async.bulk.wait_group.read`.
//!
//! Written from the PTX ISA and the CUDA driver's tensor-map description, not from
//! `passes::tma` or `passes::ptx::tma` (they share no code):
//! - An mbarrier has an expected arrival count, the arrivals pending in its current
//!   phase and a transaction count; the phase completes when both reach zero, and the
//!   pending count resets. `try_wait.parity p` is true once the phase of parity `p`
//!   has completed, i.e. while the current phase's parity differs from `p`.
//! - A tensor map here is the launcher's description of the tensor (base address, dims
//!   and byte strides, innermost first), a box and a swizzle mode; the emulator encodes
//!   it from the kernel's `KernelAbi::tensor_maps` and the tensor argument, as the driver
//!   does from `cuTensorMapEncodeTiled`'s arguments.
//! - A box copy writes the box's elements densely, innermost dim first, from the
//!   destination address, through the swizzle (16-byte chunk bits 4.. XOR-ed with
//!   address bits 7.., as many as the span has chunks); elements outside the tensor
//!   (negative or past-the-end coordinates) are zeros.
//! - Asynchrony: a copy lands, and completes its bytes on the barrier, only when some
//!   thread waits on that barrier for the phase still open (a wait that is already
//!   satisfied, such as one on the wrong parity, lands nothing); until then its destination bytes may not be read
//!   (`Cta::chunks_of_copies_in_flight`), and a kernel that ends with copies in flight
//!   fails.
//! - A TMA store reads its shared box lazily: when its issuing thread's
//!   `wait_group.read` covers its bulk group, so a shared write in between shows in the
//!   output. It reads through the swizzle and writes only the elements inside the tensor.
//!   Its shared bytes must have been fenced for the async proxy (`fence.proxy.async`)
//!   by whoever wrote them, and a kernel that ends with stores not waited for fails.

use super::decode::Opd;
use super::execute::Cta;

/// The launcher's tensor map, as the emulator's parameter memory holds it.
#[derive(Clone, Debug)]
pub(crate) struct TensorMap {
    pub(crate) base: u64,
    /// Global dims, innermost first.
    pub(crate) dims: Vec<u64>,
    /// Byte strides of dims 1.. (innermost first).
    pub(crate) strides: Vec<u64>,
    pub(crate) box_dims: Vec<u32>,
    pub(crate) elem_bytes: u64,
    /// Swizzle span in bytes (32, 64, 128), 0 for none.
    pub(crate) swizzle: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Mbarrier {
    count: u32,
    pending: u32,
    tx: i64,
    /// Completed phases.
    phase: u64,
}

impl Mbarrier {
    fn settle(&mut self) {
        if self.pending == 0 && self.tx == 0 {
            self.phase += 1;
            self.pending = self.count;
        }
    }
}

/// An issued box copy that has not landed.
#[derive(Clone, Debug)]
pub(crate) struct BoxCopy {
    pub(crate) dst: u64,
    pub(crate) bytes: u64,
    barrier: u64,
    map: TensorMap,
    coords: Vec<i64>,
}

/// An issued TMA store, read from shared memory at the `wait_group.read` that covers it.
#[derive(Clone, Debug)]
pub(crate) struct BoxStore {
    src: u64,
    map: TensorMap,
    coords: Vec<i64>,
}

/// A thread's TMA stores: those not committed yet, then its committed bulk groups.
#[derive(Clone, Debug, Default)]
pub(crate) struct BulkStores {
    pub(crate) open: Vec<BoxStore>,
    pub(crate) groups: std::collections::VecDeque<Vec<BoxStore>>,
}

impl BulkStores {
    pub(crate) fn pending(&self) -> bool {
        !self.open.is_empty() || !self.groups.is_empty()
    }
}

impl TensorMap {
    /// The byte offset from `base` of box element `linear` (innermost dim fastest) of
    /// the box at `coords`, or None when the element is outside the tensor.
    fn element_offset(&self, coords: &[i64], linear: u64) -> Option<u64> {
        let mut rest = linear;
        let mut offset = 0u64;
        let mut inside = true;
        for (k, &start) in coords.iter().enumerate() {
            let i = rest % self.box_dims[k] as u64;
            rest /= self.box_dims[k] as u64;
            let g = start + i as i64;
            if g < 0 || g as u64 >= self.dims[k] {
                inside = false;
            } else {
                offset += g as u64 * if k == 0 { self.elem_bytes } else { self.strides[k - 1] };
            }
        }
        inside.then_some(offset)
    }

    /// Elements in one box.
    fn box_elements(&self) -> u64 {
        self.box_dims.iter().map(|&d| d as u64).product()
    }
}

/// The shared address a swizzle mode of `span` bytes puts byte `addr` at.
fn swizzled(addr: u64, span: u64) -> u64 {
    if span < 32 {
        return addr;
    }
    let chunks = span / 16;
    addr ^ (((addr >> 7) & (chunks - 1)) << 4)
}

impl Cta<'_> {
    fn barrier_at(&mut self, t: usize, pc: usize, i: usize) -> Result<u64, String> {
        let addr = self.addr(t, pc, i)?;
        self.barrier_address(pc, addr)
    }

    /// `addr`, when an mbarrier fits there in this program's shared window.
    fn barrier_address(&self, pc: usize, addr: u64) -> Result<u64, String> {
        if !addr.is_multiple_of(8) || addr + 8 > self.smem.len() as u64 {
            return Err(self.err(pc, format!("mbarrier at shared address {addr}")));
        }
        Ok(addr)
    }

    fn mbarrier(&mut self, pc: usize, addr: u64) -> Result<&mut Mbarrier, String> {
        let msg = self.err(pc, format!("mbarrier at {addr} used before mbarrier.init"));
        self.mbarriers.get_mut(&addr).ok_or(msg)
    }

    /// `mbarrier.*` for thread `t`.
    pub(crate) fn mbarrier_op(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        match op[1] {
            "init" => {
                let addr = self.barrier_at(t, pc, 0)?;
                let count = self.src(t, pc, 1)? as u32;
                if count == 0 {
                    return Err(self.err(pc, "an mbarrier with an arrival count of 0"));
                }
                self.mbarriers.insert(addr, Mbarrier { count, pending: count, tx: 0, phase: 0 });
            }
            "expect_tx" => {
                let addr = self.barrier_at(t, pc, 0)?;
                let bytes = self.src(t, pc, 1)? as i64;
                self.mbarrier(pc, addr)?.tx += bytes;
            }
            // `mbarrier.arrive.shared::cluster.b64 _, [addr]`: on a barrier of a program of
            // the cluster (`mapa`), delivered after this round (`super::cluster`).
            "arrive" if op.contains(&"shared::cluster") => {
                let (rank, local) = super::cluster::split_cluster_address(self.addr(t, pc, 1)?);
                let rank = rank.unwrap_or(self.cluster_rank() as usize);
                self.outbox.push(super::cluster::Remote::Arrive { rank, barrier: local, pc });
            }
            "arrive" => {
                // `mbarrier.arrive... state, [addr]`: the state is opaque; write 0.
                let addr = self.addr(t, pc, 1)?;
                self.arrive_on(pc, addr)?;
                let d = self.dst(pc, 0)?;
                self.set(t, d, 0);
            }
            "try_wait" => {
                let addr = self.barrier_at(t, pc, 1)?;
                let parity = self.src(t, pc, 2)? & 1;
                // A wait that is already satisfied lands nothing: the copies of the
                // current phase may still be in flight. Otherwise they land now.
                if (self.mbarrier(pc, addr)?.phase & 1) == parity {
                    self.land_copies(pc, addr)?;
                }
                let phase = self.mbarrier(pc, addr)?.phase;
                let d = self.dst(pc, 0)?;
                self.set(t, d, ((phase & 1) != parity) as u64);
            }
            other => return Err(self.err(pc, format!("mbarrier.{other} is not emulated"))),
        }
        Ok(())
    }

    /// One arrival on this program's mbarrier at `addr` (its own threads', or a peer's
    /// through `mapa`).
    pub(crate) fn arrive_on(&mut self, pc: usize, addr: u64) -> Result<(), String> {
        let addr = self.barrier_address(pc, addr)?;
        let b = self.mbarrier(pc, addr)?;
        if b.pending == 0 {
            return Err(self.err(pc, format!("an arrival on the mbarrier at {addr} beyond its count")));
        }
        b.pending -= 1;
        b.settle();
        Ok(())
    }

    /// A box copy issued into this program (by itself, or multicast by a peer): it may
    /// not overwrite what an in-flight `wgmma` reads, whenever it lands.
    pub(crate) fn receive_copy(&mut self, pc: usize, copy: BoxCopy) -> Result<(), String> {
        self.mbarrier(pc, copy.barrier)?;
        if let Some(addr) = self.wgmma_reading(copy.dst, copy.dst + copy.bytes) {
            return Err(self.err(
                pc,
                format!("a TMA copy into shared byte {addr}, which an in-flight wgmma.mma_async still reads"),
            ));
        }
        self.box_copies.push(copy);
        Ok(())
    }

    /// `cp.async.bulk.*` for thread `t`: a TMA load or store, or a store's bulk-group
    /// commit or wait.
    pub(crate) fn bulk(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        match op.get(3).copied() {
            Some("tensor") if op.get(5) == Some(&"global") => self.bulk_store(t, pc, op),
            Some("tensor") => self.bulk_tensor(t, pc, op),
            Some("commit_group") => {
                let s = self.bulk_stores.entry(t).or_default();
                let group = std::mem::take(&mut s.open);
                s.groups.push_back(group);
                Ok(())
            }
            Some("wait_group") if op.get(4) == Some(&"read") => {
                let pending = self.src(t, pc, 0)? as usize;
                loop {
                    let s = self.bulk_stores.entry(t).or_default();
                    if s.groups.len() <= pending {
                        return Ok(());
                    }
                    let group = s.groups.pop_front().expect("more groups than pending");
                    for store in group {
                        self.perform_store(pc, store)?;
                    }
                }
            }
            _ => Err(self.err(pc, format!("{} is not emulated", op.join(".")))),
        }
    }

    /// The `[map, {coords}]` operand `i` of instruction `pc`: the map and the coordinates.
    fn map_and_coords(&mut self, t: usize, pc: usize, i: usize, rank: usize) -> Result<(TensorMap, Vec<i64>), String> {
        let (map_src, coord_srcs) = match &self.m.code[pc].args[i] {
            Opd::Tensor { map, coords } => (map.clone(), coords.clone()),
            other => return Err(self.err(pc, format!("operand {i} is {other:?}, not [map, {{coords}}]"))),
        };
        let map_addr = self.read(t, &map_src, pc)?;
        let map = self.tensor_maps.get(&map_addr).cloned().ok_or_else(|| {
            self.err(pc, format!("{map_addr:#x} is not the generic address of a tensor-map parameter"))
        })?;
        if coord_srcs.len() != rank || map.dims.len() != rank {
            return Err(self.err(
                pc,
                format!("{} coordinates for a {rank}-d box of a {}-d map", coord_srcs.len(), map.dims.len()),
            ));
        }
        let mut coords = Vec::new();
        for s in &coord_srcs {
            coords.push(self.read(t, s, pc)? as u32 as i32 as i64);
        }
        Ok((map, coords))
    }

    /// `cp.async.bulk.tensor.Nd.global.shared::cta[.tile].bulk_group [map, {coords}],
    /// [src]` for thread `t`: queued in its open bulk group.
    fn bulk_store(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let rank: usize = op[4].trim_end_matches('d').parse().map_err(|_| self.err(pc, "the rank of a TMA store"))?;
        if !op.contains(&"bulk_group") || !op.contains(&"shared::cta") {
            return Err(self.err(pc, "only shared::cta → global TMA stores completing on a bulk group are emulated"));
        }
        let (map, coords) = self.map_and_coords(t, pc, 0, rank)?;
        let src = self.addr(t, pc, 1)?;
        self.box_in_smem(pc, src, &map)?;
        self.bulk_stores.entry(t).or_default().open.push(BoxStore { src, map, coords });
        Ok(())
    }

    /// The bytes of a box of `map` at shared address `at`, or why the hardware would not
    /// take it there: a swizzled box row wider than its span or not on a 128-byte
    /// boundary, an address not 16-byte aligned, a box past the shared memory.
    fn box_in_smem(&self, pc: usize, at: u64, map: &TensorMap) -> Result<u64, String> {
        let inner_bytes = map.box_dims[0] as u64 * map.elem_bytes;
        if map.swizzle > 0 && (inner_bytes > map.swizzle || !at.is_multiple_of(128)) {
            return Err(
                self.err(pc, format!("a {inner_bytes}-byte box row at {at} with a {}-byte swizzle", map.swizzle))
            );
        }
        if !at.is_multiple_of(16) {
            return Err(self.err(pc, format!("a TMA box at shared address {at} is not 16-byte aligned")));
        }
        let bytes = map.box_elements() * map.elem_bytes;
        if at + bytes > self.smem.len() as u64 {
            return Err(self.err(pc, format!("a {bytes}-byte box at {at} past the shared memory")));
        }
        Ok(bytes)
    }

    /// Reads a TMA store's box out of shared memory and writes its elements inside the
    /// tensor.
    fn perform_store(&mut self, pc: usize, c: BoxStore) -> Result<(), String> {
        let m = &c.map;
        for linear in 0..m.box_elements() {
            let at = swizzled(c.src + linear * m.elem_bytes, m.swizzle);
            if let Some(&writer) = self.unfenced.get(&(at / 16)) {
                return Err(self.err(
                    pc,
                    format!(
                        "a TMA store reads shared byte {at}, which thread {writer} wrote without a later \
                         fence.proxy.async"
                    ),
                ));
            }
            let value = self.smem(at, m.elem_bytes as usize, 1, pc)?.to_vec();
            if let Some(offset) = m.element_offset(&c.coords, linear) {
                match self.global.find(m.base + offset, value.len()) {
                    Ok(dst) => dst.copy_from_slice(&value),
                    Err(e) => return Err(self.err(pc, e)),
                }
            }
        }
        Ok(())
    }

    /// `cp.async.bulk.tensor.Nd.shared::cluster.global[.tile].mbarrier::complete_tx::bytes
    /// [dst], [map, {coords}], [barrier]` for thread `t`, and its `.multicast::cluster`
    /// form with a mask of programs.
    fn bulk_tensor(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let rank: usize = op[4].trim_end_matches('d').parse().map_err(|_| self.err(pc, "the rank of a TMA copy"))?;
        if !op.contains(&"global") || !op.contains(&"mbarrier::complete_tx::bytes") {
            return Err(self.err(pc, "only global → shared TMA loads completing on an mbarrier are emulated"));
        }
        let dst = self.addr(t, pc, 0)?;
        let (map, coords) = self.map_and_coords(t, pc, 1, rank)?;
        let barrier = self.barrier_at(t, pc, 2)?;
        self.mbarrier(pc, barrier)?;
        let bytes = self.box_in_smem(pc, dst, &map)?;
        let copy = BoxCopy { dst, bytes, barrier, map, coords };
        if !op.contains(&"multicast::cluster") {
            return self.receive_copy(pc, copy);
        }
        // `.multicast::cluster ..., mask`: the same box, slot and barrier offsets in every
        // program whose rank is set in the 16-bit mask.
        let mask = self.src(t, pc, 3)? & 0xffff;
        if mask == 0 || mask >> self.cluster_size() != 0 {
            return Err(self.err(pc, format!("a multicast mask {mask:#x} for a cluster of {}", self.cluster_size())));
        }
        for rank in (0..16).filter(|r| mask & (1 << r) != 0) {
            self.outbox.push(super::cluster::Remote::Copy { rank, copy: copy.clone(), pc });
        }
        Ok(())
    }

    /// Lands every copy that completes on the barrier at `barrier`.
    fn land_copies(&mut self, pc: usize, barrier: u64) -> Result<(), String> {
        let (landing, rest): (Vec<BoxCopy>, Vec<BoxCopy>) =
            std::mem::take(&mut self.box_copies).into_iter().partition(|c| c.barrier == barrier);
        self.box_copies = rest;
        for c in landing {
            let m = &c.map;
            for linear in 0..m.box_elements() {
                let mut value = vec![0u8; m.elem_bytes as usize];
                if let Some(offset) = m.element_offset(&c.coords, linear) {
                    match self.global.find(m.base + offset, m.elem_bytes as usize) {
                        Ok(src) => value.copy_from_slice(src),
                        Err(e) => return Err(self.err(pc, e)),
                    }
                }
                let at = swizzled(c.dst + linear * m.elem_bytes, m.swizzle);
                self.smem(at, value.len(), 1, pc)?.copy_from_slice(&value);
            }
            let b = self.mbarrier(pc, barrier)?;
            b.tx -= c.bytes as i64;
            b.settle();
        }
        Ok(())
    }
}

/// The tensor map the launcher encodes for `spec` from the tensor at `base` of `dims`
/// (outermost first, row-major), refused as `cuTensorMapEncodeTiled` refuses it: a
/// global address or a byte stride not a multiple of 16.
pub(crate) fn encode(
    spec: &tessera_passes::tma::TensorMapSpec,
    base: u64,
    dims: &[usize],
) -> Result<TensorMap, String> {
    let eb = spec.dtype.bytes() as u64;
    let inner_first: Vec<u64> = dims.iter().rev().map(|&d| d as u64).collect();
    let mut strides = Vec::new();
    let mut s = eb;
    for d in &inner_first[..inner_first.len() - 1] {
        s *= d;
        strides.push(s);
    }
    if !base.is_multiple_of(16) || strides.iter().any(|s| !s.is_multiple_of(16)) {
        return Err(format!("cuTensorMapEncodeTiled refuses the map: address {base:#x}, byte strides {strides:?}"));
    }
    Ok(TensorMap {
        base,
        dims: inner_first,
        strides,
        box_dims: spec.box_dims.clone(),
        elem_bytes: eb,
        swizzle: spec.swizzle_bytes as u64,
    })
}
