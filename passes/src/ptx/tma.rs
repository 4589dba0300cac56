//! TMA copies and their mbarrier ring (`copy = "tma"`, sm_90a; the rule is `crate::tma`).
//!
//! - Parameters: each of the kernel's tensor maps (`KernelAbi::tensor_maps`) is a
//!   `.param .align 64 .b8 tmapK[128]` after the kernel's own parameters, read through
//!   its generic address (`cvta.param`), as a `const __grid_constant__ CUtensorMap` is.
//! - Prologue: thread 0 initializes the ring's `S` mbarriers (arrival count 1), fences
//!   the initialization and the CTA synchronizes.
//! - A copy (`tile.cp_async` marked `via = "tma"`): thread 0 adds the box bytes to the
//!   transaction count of the open group's barrier (`mbarrier.expect_tx`) and issues one
//!   `cp.async.bulk.tensor` box per swizzle column block, completing on that barrier.
//! - A commit: thread 0 arrives on the open group's barrier (the phase completes when
//!   the bytes have landed too); every thread counts the group.
//! - A wait for all but `n` groups: every thread waits, in order, on each group it has
//!   not waited for up to there (`mbarrier.try_wait.parity` on the group's barrier and
//!   phase parity).
//!
//! Group `g` uses barrier `g mod S` at phase parity `(g / S) mod 2`. Reusing a barrier is
//! safe because the pipeline refills a slot only after a CTA barrier that follows every
//! thread's wait for the group that last filled it (the same order that makes refilling
//! the slot itself safe).

use std::collections::HashMap;

use super::builder::{Class, Operand, Reg};
use super::emit::{Emitter, R};
use super::numerics::add_u32;
use crate::abi::KernelAbi;
use crate::ir::{Op, OpId};
use crate::tma::TensorMapSpec;

/// The TMA state of a kernel with TMA copies.
pub(crate) struct Tma {
    /// Each tensor map with the register holding its generic address.
    maps: Vec<(TensorMapSpec, Reg)>,
    /// Each TMA copy's position in `maps`.
    copies: HashMap<OpId, usize>,
    /// Barriers in the ring.
    pub(super) ring: i64,
    /// Shared-window address of the first barrier (a producer warpgroup's empty
    /// barriers follow the ring).
    barriers: Reg,
    /// Commit groups this thread has counted, and groups it has waited for.
    pub(super) commits: Reg,
    pub(super) waited: Reg,
    /// The thread that issues copies and arrives: `tid == 0`, or the producer
    /// warpgroup's first thread.
    pub(super) leader: Reg,
    /// `tid == 0`: the thread that issues TMA stores (a consumer under warp
    /// specialization: the epilogue is theirs).
    store_leader: Reg,
}

impl Emitter<'_> {
    /// Declares the tensor-map parameters and sets up the ring (prologue), when the
    /// kernel has TMA copies.
    pub(super) fn setup_tma(&mut self, abi: &KernelAbi) -> R<()> {
        if abi.tensor_maps.is_empty() {
            return Ok(());
        }
        let f = self.f;
        let Some((ring_buffer, ring)) = crate::tma::mbarrier_ring(f) else {
            return Err(crate::error::LowerError {
                message: "internal error: a kernel with TMA copies has no mbarrier ring".into(),
                range: f.loc.range,
            });
        };
        let crate::tma::CopyMaps { maps: specs, copies } = crate::tma::copy_maps(f).map_err(|why| {
            crate::error::LowerError { message: format!("internal error: {why}"), range: f.loc.range }
        })?;
        if specs != abi.tensor_maps {
            return Err(crate::error::LowerError {
                message: "internal error: the kernel's TMA copies and its ABI's tensor maps disagree".into(),
                range: f.loc.range,
            });
        }
        let copies: HashMap<OpId, usize> = copies.into_iter().collect();
        let offset = self.buffer_offsets[&ring_buffer];
        let base = self.smem_base();
        let mut maps = Vec::new();
        for (k, spec) in specs.into_iter().enumerate() {
            let name = format!("tmap{k}");
            self.params.push(format!(".param .align 64 .b8 {name}[128]"));
            let generic = self.b.in_prologue(|b| {
                let (param, generic) = (b.reg(Class::B64), b.reg(Class::B64));
                b.ins(format!("mov.u64 {param}, {name}"));
                b.ins(format!("cvta.param.u64 {generic}, {param}"));
                generic
            });
            maps.push((spec, generic));
        }
        // With a producer warpgroup (threads `threads..`), its first thread issues the
        // copies, and every consumer thread arrives on an empty barrier.
        let producer = crate::warp_spec::producer_threads(f) > 0;
        let consumers = self.threads;
        // Under a cluster, an empty barrier counts one arrival per consumer warp of each
        // program (`ptx::cluster`); otherwise one per consumer thread.
        let cluster = self.cluster_size();
        let releases = if cluster > 1 { consumers as i64 / 32 * cluster } else { consumers as i64 };
        let tma = self.b.in_prologue(|b| {
            let (tid, leader, store_leader) = (b.reg(Class::B32), b.reg(Class::Pred), b.reg(Class::Pred));
            b.ins(format!("mov.u32 {tid}, %tid.x"));
            b.ins(format!("setp.eq.u32 {store_leader}, {tid}, 0"));
            if producer {
                b.ins(format!("setp.eq.u32 {leader}, {tid}, {consumers}"));
            } else {
                b.ins(format!("mov.pred {leader}, {store_leader}"));
            }
            let barriers = b.reg(Class::B32);
            b.ins(format!("add.u32 {barriers}, {base}, {offset}"));
            for i in 0..ring {
                b.ins_if(
                    leader,
                    false,
                    format!("mbarrier.init.shared::cta.b64 [{barriers}+{}], 1", i * crate::tma::MBARRIER_BYTES),
                );
            }
            for i in (ring..2 * ring).filter(|_| producer) {
                b.ins_if(
                    leader,
                    false,
                    format!(
                        "mbarrier.init.shared::cta.b64 [{barriers}+{}], {releases}",
                        i * crate::tma::MBARRIER_BYTES
                    ),
                );
            }
            // The initialization is visible to the async proxy (the TMA's complete_tx)
            // and to every thread before anyone uses a barrier.
            b.ins_if(leader, false, "fence.mbarrier_init.release.cluster");
            if cluster > 1 {
                // The peers multicast into this program's slots and signal its barriers.
                super::cluster::cluster_sync(b);
            } else {
                b.ins("bar.sync 0");
            }
            let (commits, waited) = (b.reg(Class::B32), b.reg(Class::B32));
            b.ins(format!("mov.u32 {commits}, 0"));
            b.ins(format!("mov.u32 {waited}, 0"));
            Tma { maps, copies, ring, barriers, commits, waited, leader, store_leader }
        });
        self.tma = Some(tma);
        Ok(())
    }

    /// The shared address of the barrier of group `group` (a register); a producer
    /// warpgroup's empty barrier of the same slot is `ring` barriers further.
    pub(super) fn barrier_of(&mut self, group: Reg) -> Reg {
        let tma = self.tma.as_ref().expect("a TMA kernel");
        let (ring, barriers) = (tma.ring, tma.barriers);
        let b = &mut self.b;
        let (slot, addr) = (b.reg(Class::B32), b.reg(Class::B32));
        b.ins(format!("rem.u32 {slot}, {group}, {ring}"));
        b.ins(format!("mad.lo.u32 {addr}, {slot}, {}, {barriers}", crate::tma::MBARRIER_BYTES));
        addr
    }

    /// A `tile.cp_async` performed by the TMA.
    pub(super) fn tma_copy(&mut self, op: &Op) -> R<()> {
        let map = self.tma.as_ref().and_then(|t| t.copies.get(&self.current).map(|&i| t.maps[i].clone()));
        let Some((spec, map)) = map else {
            return Err(self.fail(op, "internal error: a TMA copy without its tensor map"));
        };
        let slot = self.smem_of(op, op.operands[0])?;
        let view = self.view_of(op, op.operands[1])?;
        let geometry @ (_, blocks, _) = self.box_geometry(op, &slot)?;
        let (commits, leader) = {
            let tma = self.tma.as_ref().ok_or_else(|| self.fail(op, "internal error: no TMA state"))?;
            (tma.commits, tma.leader)
        };
        self.wait_for_empty_slot();
        let barrier = self.barrier_of(commits);
        // A negative or past-the-end box part is zero-filled by the hardware.
        let mut coords = self.box_coords(&view.offsets);
        let rank = coords.len();
        // A multicast copy: this program loads its slice of the rows into every program
        // that shares the copy, and receives theirs, so each barrier still expects the
        // whole box.
        let axes = crate::cluster::multicast_axes(op);
        let ways = crate::cluster::multicast_ways(self.f, op);
        let box_bytes = spec.box_bytes() * ways;
        self.b.ins_if(
            leader,
            false,
            format!("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [{barrier}], {}", box_bytes * blocks),
        );
        let multicast = if ways > 1 { self.multicast_of(&axes) } else { None };
        let Some((slice, mask)) = multicast else {
            self.for_each_box(&slot, &coords, geometry, leader, |dst, c| {
                format!(
                    "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{dst}], \
                     [{map}, {{{c}}}], [{barrier}]"
                )
            });
            return Ok(());
        };
        let (width, _, rows) = geometry;
        let slice_rows = rows / ways;
        let row =
            crate::tma::row_coordinate(&spec).ok_or_else(|| self.fail(op, "internal error: a box without rows"))?;
        let (first_row, offset) = (self.b.reg(Class::B32), self.b.reg(Class::B32));
        self.b.ins(format!("mul.lo.u32 {first_row}, {slice}, {slice_rows}"));
        self.b.ins(format!("mad.lo.u32 {offset}, {slice}, {}, {}", slice_rows * width, slot.addr));
        coords[row] = {
            let r = self.b.reg(Class::B32);
            self.b.ins(format!("add.u32 {r}, {}, {first_row}", coords[row]));
            Operand::Reg(r)
        };
        let shifted = super::emit::SmemVal { addr: offset, ..slot.clone() };
        self.for_each_box(&shifted, &coords, geometry, leader, |dst_addr, c| {
            format!(
                "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster \
                 [{dst_addr}], [{map}, {{{c}}}], [{barrier}], {mask}"
            )
        });
        Ok(())
    }

    /// Issues, from thread `leader`, what `instruction` makes for each swizzle column
    /// block of `slot` (its shared address and its coordinates: the block's elements
    /// further along the innermost dim than `coords`).
    fn for_each_box(
        &mut self,
        slot: &super::emit::SmemVal,
        coords: &[Operand],
        (width, blocks, rows): (i64, i64, i64),
        leader: Reg,
        instruction: impl Fn(Reg, &str) -> String,
    ) {
        let per_block = width / slot.ty.dtype.bytes() as i64;
        for block in 0..blocks {
            let c = self.block_coords(coords, block * per_block);
            let addr = self.b.reg(Class::B32);
            self.b.ins(format!("add.u32 {addr}, {}, {}", slot.addr, slot.imm + block * rows * width));
            self.b.ins_if(leader, false, instruction(addr, &c));
        }
    }

    /// The swizzle span, column blocks and rows of a TMA slot ([`crate::tma::blocks`]).
    /// Each box sits where its swizzle (which acts on address bits) matches the buffer's
    /// layout: at a multiple of the swizzle's repeat of 8 rows.
    fn box_geometry(&self, op: &Op, slot: &super::emit::SmemVal) -> R<(i64, i64, i64)> {
        let (width, blocks, rows) =
            crate::tma::blocks(&slot.ty).ok_or_else(|| self.fail(op, "the slot is not in a descriptor swizzle"))?;
        let repeat = 8 * width;
        let slot_bytes = slot.ty.slot_bytes().unwrap_or(0) as i64;
        if slot.imm % repeat != 0 || (rows * width) % repeat != 0 || slot_bytes % repeat != 0 {
            return Err(
                self.fail(op, format!("internal error: a TMA box not aligned to its {repeat}-byte swizzle repeat"))
            );
        }
        Ok((width, blocks, rows))
    }

    /// A box's coordinates from a view's offsets: innermost dim first, as `s32`.
    fn box_coords(&mut self, offsets: &[Operand]) -> Vec<Operand> {
        let mut coords = Vec::with_capacity(offsets.len());
        for o in offsets.iter().rev() {
            coords.push(match *o {
                Operand::Int(v) => Operand::Int(v),
                o => {
                    let r = self.b.reg(Class::B32);
                    self.b.ins(format!("cvt.u32.u64 {r}, {o}"));
                    Operand::Reg(r)
                }
            });
        }
        coords
    }

    /// The coordinates of the box `inner_offset` elements further along the innermost
    /// dim, as a PTX vector's elements.
    fn block_coords(&mut self, coords: &[Operand], inner_offset: i64) -> String {
        let inner = add_u32(&mut self.b, coords[0], inner_offset);
        let mut c = vec![inner.to_string()];
        c.extend(coords[1..].iter().map(|o| o.to_string()));
        c.join(", ")
    }

    /// A `tile.tma_store`: thread 0 writes the slot to the view, a box per swizzle column
    /// block (the hardware leaves out-of-bounds parts unwritten), and waits until the
    /// boxes have been read out of shared memory. Every thread's writes to the slot were
    /// fenced for the async proxy and synchronized by the barrier before it.
    pub(super) fn tma_store(&mut self, op: &Op) -> R<()> {
        let map = self.tma.as_ref().and_then(|t| t.copies.get(&self.current).map(|&i| t.maps[i].1));
        let Some(map) = map else {
            return Err(self.fail(op, "internal error: a TMA store without its tensor map"));
        };
        let slot = self.smem_of(op, op.operands[1])?;
        let view = self.view_of(op, op.operands[0])?;
        let geometry = self.box_geometry(op, &slot)?;
        let leader =
            self.tma.as_ref().map(|t| t.store_leader).ok_or_else(|| self.fail(op, "internal error: no TMA state"))?;
        let coords = self.box_coords(&view.offsets);
        let rank = coords.len();
        self.for_each_box(&slot, &coords, geometry, leader, |src, c| {
            format!("cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [{map}, {{{c}}}], [{src}]")
        });
        self.b.ins_if(leader, false, "cp.async.bulk.commit_group");
        self.b.ins_if(leader, false, "cp.async.bulk.wait_group.read 0");
        Ok(())
    }

    /// `tile.async_commit` in a kernel with TMA copies: closes the open group's phase.
    pub(super) fn tma_commit(&mut self) {
        let Some(tma) = self.tma.as_ref() else { return };
        let (commits, leader) = (tma.commits, tma.leader);
        let barrier = self.barrier_of(commits);
        let state = self.b.reg(Class::B64);
        self.b.ins_if(leader, false, format!("mbarrier.arrive.release.cta.shared::cta.b64 {state}, [{barrier}]"));
        self.b.ins(format!("add.u32 {commits}, {commits}, 1"));
        self.close_group();
    }

    /// `tile.async_wait pending=n` in a kernel with TMA copies: waits for every group
    /// but the `n` most recent.
    pub(super) fn tma_wait(&mut self, pending: i64) {
        let Some(tma) = self.tma.as_ref() else { return };
        let (commits, waited, ring) = (tma.commits, tma.waited, tma.ring);
        let (next, done, retry) = (self.b.label("tma_wait"), self.b.label("tma_waited"), self.b.label("tma_try"));
        self.b.place_label(&next);
        let (upto, finished) = (self.b.reg(Class::B32), self.b.reg(Class::Pred));
        self.b.ins(format!("add.u32 {upto}, {waited}, {pending}"));
        self.b.ins(format!("setp.ge.u32 {finished}, {upto}, {commits}"));
        self.b.ins_if(finished, false, format!("bra.uni {done}"));
        let barrier = self.barrier_of(waited);
        let parity = self.b.reg(Class::B32);
        self.b.ins(format!("div.u32 {parity}, {waited}, {ring}"));
        self.b.ins(format!("and.b32 {parity}, {parity}, 1"));
        self.b.place_label(&retry);
        let landed = self.b.reg(Class::Pred);
        self.b.ins(format!("mbarrier.try_wait.parity.shared::cta.b64 {landed}, [{barrier}], {parity}"));
        // Not `.uni`: threads of a warp may see the phase complete at different tries.
        self.b.ins_if(landed, true, format!("bra {retry}"));
        self.b.ins(format!("add.u32 {waited}, {waited}, 1"));
        self.b.ins(format!("bra.uni {next}"));
        self.b.place_label(&done);
    }
}
