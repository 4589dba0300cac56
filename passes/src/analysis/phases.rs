//! The compiler's own staging, checked on Tile IR (E0501): the pipelined loops' rings of
//! shared slots, their commit groups and, under `copy = "tma"`, the mbarrier phases the
//! groups become (`ptx::tma`: group `g` completes phase `g / R` of barrier `g mod R`).
//!
//! `races` checks the buffers a kernel stages itself, on Graph IR; the pipeline the
//! compiler builds (`tile::stage_copies`) is checked here by running the kernel's
//! staging ops in order, with the loops unrolled for [`ITERATIONS`] iterations and every
//! index (slot numbers, loop bounds) evaluated: tensor dims are large, program ids 5.
//! Reported:
//! - a read of a slot (a dot's operand, `load_shared`, a TMA store's source) before the
//!   copy into it has landed for the reading thread: for a TMA copy, the thread has
//!   waited for its group, i.e. for its barrier's phase; for a `cp.async`, a CTA barrier
//!   also followed that wait (each thread waits for its own chunks only);
//! - a write into a slot (a copy or `store_shared`) that other threads may still be
//!   reading (no CTA barrier since the read), or a copy into a slot whose previous copy
//!   may still land;
//! - an mbarrier reused for group `h` while some thread may not have waited for its
//!   previous phase, group `h − R` (that thread's parity wait would see the wrong phase).
//!
//! The warp-specialized split of the same loop (`ptx::warp_spec`: empty barriers instead
//! of CTA barriers) is a refinement of this program that the PTX emulator checks.

use std::collections::{HashMap, HashSet};

use crate::ir::{Func, Loc, Op, OpId, OpKind, Region, Type, ValueId};
use tessera_frontend::arith::{floor_div_i64, floor_rem_i64};

/// A violation of the staging protocol: where, and what.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PhaseRace {
    pub at: Loc,
    pub message: String,
}

/// Iterations of each loop the check runs: enough for every slot and barrier of the
/// deepest ring (8 stages, two groups per iteration) to be reused.
const ITERATIONS: i64 = 40;
/// The value of every tensor dim and program id in the check.
const DIM: i64 = 1 << 16;
const PROGRAM: i64 = 5;

/// A shared slot: the buffer and the ring index (0 for a buffer without stages).
type Slot = (ValueId, i64);

#[derive(Default)]
struct Pipeline {
    /// Groups committed, groups every thread has waited for, and of those the ones a CTA
    /// barrier has followed.
    commits: i64,
    waited: i64,
    synced: i64,
    /// Each slot's last copy: its group, and whether the TMA made it.
    copies: HashMap<Slot, (i64, bool)>,
    /// Slots written by `store_shared` and not yet past a CTA barrier.
    stored: HashSet<Slot>,
    /// Slots read since the last CTA barrier, by the op that read them.
    reads: HashMap<Slot, OpId>,
    /// The depth of the mbarrier ring (TMA kernels).
    ring: Option<i64>,
    /// The last group whose copies used a barrier, per barrier.
    barrier_groups: HashMap<i64, i64>,
    values: HashMap<ValueId, i64>,
    slots: HashMap<ValueId, Slot>,
    races: Vec<(OpId, String)>,
}

/// The staging protocol's violations in a Tile IR kernel (none when it stages nothing).
pub fn check_pipeline(f: &Func) -> Vec<PhaseRace> {
    if !f.has_op_of(&[OpKind::CpAsync]) {
        return Vec::new();
    }
    let mut p = Pipeline { ring: crate::tma::mbarrier_ring(f).map(|(_, ring)| ring), ..Default::default() };
    p.region(f, &f.body);
    let mut seen = HashSet::new();
    p.races
        .into_iter()
        .filter(|r| seen.insert(r.clone()))
        .map(|(id, message)| PhaseRace { at: f.op(id).loc.clone(), message })
        .collect()
}

impl Pipeline {
    fn region(&mut self, f: &Func, region: &Region) {
        for &id in &region.ops {
            self.op(f, id);
        }
    }

    fn int(&self, v: ValueId) -> Option<i64> {
        self.values.get(&v).copied()
    }

    fn op(&mut self, f: &Func, id: OpId) {
        let op = f.op(id);
        match op.kind {
            OpKind::For => self.for_loop(f, op),
            OpKind::If => {
                // The branch taken where the condition is known, else the first.
                let taken = match op.operands.first().and_then(|&c| self.int(c)) {
                    Some(0) => op.regions.get(1),
                    _ => op.regions.first(),
                };
                if let Some(r) = taken {
                    self.region(f, r);
                }
            }
            OpKind::SmemSlot => {
                let index = op.operands.get(1).and_then(|&i| self.int(i)).unwrap_or(0);
                self.slots.insert(op.results[0], (op.operands[0], index));
            }
            OpKind::AllocShared => {
                self.slots.insert(op.results[0], (op.results[0], 0));
            }
            OpKind::CpAsync => self.copy(f, id, op),
            OpKind::AsyncCommit => self.commits += 1,
            OpKind::AsyncWait => {
                let pending = op.int_attr("pending").unwrap_or(0);
                self.waited = self.waited.max(self.commits - pending);
            }
            OpKind::Barrier => {
                self.synced = self.waited;
                self.reads.clear();
                self.stored.clear();
            }
            OpKind::StoreShared => {
                if let Some(&slot) = self.slots.get(&op.operands[0]) {
                    self.write_after_read(f, id, slot);
                    self.stored.insert(slot);
                }
            }
            OpKind::LoadShared => self.read(f, id, op.operands[0]),
            OpKind::TmaStore => self.read(f, id, op.operands[1]),
            OpKind::Dot => {
                for &v in op.operands.iter().take(2) {
                    if matches!(f.ty(v), Type::Smem(_)) {
                        self.read(f, id, v);
                    }
                }
            }
            _ => self.scalar(op),
        }
    }

    fn for_loop(&mut self, f: &Func, op: &Op) {
        let bound = |i: usize| op.operands.get(i).and_then(|&v| self.int(v));
        let (lo, step) = (bound(0).unwrap_or(0), bound(2).filter(|&s| s > 0).unwrap_or(1));
        let hi = bound(1).unwrap_or(lo + ITERATIONS * step);
        let body = &op.regions[0];
        let mut iv = lo;
        let mut n = 0;
        while iv < hi && n < ITERATIONS {
            if let Some(&arg) = body.args.first() {
                self.values.insert(arg, iv);
            }
            self.region(f, body);
            iv += step;
            n += 1;
        }
    }

    /// Index arithmetic: what slot numbers and loop bounds are computed from.
    fn scalar(&mut self, op: &Op) {
        let Some(&result) = op.results.first() else { return };
        let arg = |i: usize| op.operands.get(i).and_then(|v| self.values.get(v).copied());
        let value = match op.kind {
            OpKind::Constant => op.int_attr("value"),
            OpKind::TensorDim => Some(DIM),
            OpKind::ProgramId => Some(PROGRAM),
            OpKind::NumPrograms => Some(2 * PROGRAM),
            OpKind::Cast => arg(0),
            // Wrapping, as the 64-bit index registers do; `//` and `%` floor as
            // everywhere else (`frontend::arith`).
            OpKind::Add => arg(0).zip(arg(1)).map(|(a, b)| a.wrapping_add(b)),
            OpKind::Sub => arg(0).zip(arg(1)).map(|(a, b)| a.wrapping_sub(b)),
            OpKind::Mul => arg(0).zip(arg(1)).map(|(a, b)| a.wrapping_mul(b)),
            OpKind::FloorDiv | OpKind::Div => {
                arg(0).zip(arg(1)).filter(|&(_, b)| b != 0).map(|(a, b)| floor_div_i64(a, b))
            }
            OpKind::Rem => arg(0).zip(arg(1)).filter(|&(_, b)| b != 0).map(|(a, b)| floor_rem_i64(a, b)),
            OpKind::Min => arg(0).zip(arg(1)).map(|(a, b)| a.min(b)),
            OpKind::Max => arg(0).zip(arg(1)).map(|(a, b)| a.max(b)),
            _ => None,
        };
        if let Some(v) = value {
            self.values.insert(result, v);
        }
    }

    fn copy(&mut self, f: &Func, id: OpId, op: &Op) {
        let Some(&slot) = self.slots.get(&op.operands[0]) else { return };
        let tma = crate::tma::is_tma_copy(op);
        let group = self.commits;
        self.write_after_read(f, id, slot);
        if let Some(&(previous, _)) = self.copies.get(&slot).filter(|&&(g, _)| g >= self.waited && g != group) {
            self.races.push((
                id,
                format!(
                    "the staged pipeline copies into stage {} of `{}` while its previous copy (commit group \
                     {previous}) may still land",
                    slot.1,
                    name(f, slot.0)
                ),
            ));
        }
        if let Some(ring) = self.ring.filter(|_| tma) {
            let barrier = group.rem_euclid(ring);
            let last = self.barrier_groups.insert(barrier, group);
            if let Some(earlier) = last.filter(|&g| g != group && g >= self.synced) {
                self.races.push((
                    id,
                    format!(
                        "the staged pipeline reuses mbarrier {barrier} for commit group {group} before every thread \
                         has waited for its previous phase (group {earlier}): a thread still waiting would see the \
                         wrong phase"
                    ),
                ));
            }
        }
        self.copies.insert(slot, (group, tma));
    }

    fn write_after_read(&mut self, f: &Func, id: OpId, slot: Slot) {
        if self.reads.contains_key(&slot) {
            self.races.push((
                id,
                format!(
                    "the staged pipeline overwrites stage {} of `{}` while other threads may still be reading it \
                     (no CTA barrier since the read)",
                    slot.1,
                    name(f, slot.0)
                ),
            ));
        }
    }

    fn read(&mut self, f: &Func, id: OpId, v: ValueId) {
        let Some(&slot) = self.slots.get(&v) else { return };
        self.reads.insert(slot, id);
        if self.stored.contains(&slot) {
            self.races.push((
                id,
                format!(
                    "the staged pipeline reads stage {} of `{}`, which other threads stored to, with no CTA \
                     barrier since",
                    slot.1,
                    name(f, slot.0)
                ),
            ));
        }
        let Some(&(group, tma)) = self.copies.get(&slot) else { return };
        // A TMA copy has landed for every thread that waited on its barrier's phase; a
        // `cp.async` thread waits for its own chunks, so a CTA barrier must follow.
        let landed = if tma { group < self.waited } else { group < self.synced };
        if !landed {
            let phase = match self.ring.filter(|_| tma) {
                Some(ring) => format!(", mbarrier {} phase {}", group.rem_euclid(ring), group / ring),
                None => String::new(),
            };
            self.races.push((
                id,
                format!(
                    "the staged pipeline reads stage {} of `{}` before the copy into it (commit group {group}{phase}) \
                     has landed for every thread",
                    slot.1,
                    name(f, slot.0)
                ),
            ));
        }
    }
}

fn name(f: &Func, v: ValueId) -> String {
    f.values[v.0 as usize].name.as_deref().unwrap_or("a staging buffer").to_string()
}
