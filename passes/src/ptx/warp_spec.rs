//! The two roles of a warp-specialized kernel (`producer = "warpgroup"` or
//! `"pingpong"`; the rule and the protocol are `crate::warp_spec`'s).
//!
//! Threads `0 .. threads` are the consumers (the schedule's warps, so every layout and
//! thread map is the one the kernel has without a producer); the producer warpgroup is
//! the 128 threads after them. Everything before the K loop runs on every thread (the
//! prologue's TMA copies are issued by the producer's first thread, the `leader`). At
//! the loop:
//!
//! ```text
//!     setp.ge.u32 %p, %tid, threads;  @!%p bra.uni CONSUMERS
//!     setmaxnreg.dec.sync.aligned.u32 24      // the producer warpgroup gives registers back
//!     @!leader exit
//!     loop: [wait empty barrier of the slot] TMA copies, commit     (the loop's producer slice)
//!     exit
//! CONSUMERS:
//!     setmaxnreg.inc.sync.aligned.u32 240
//!     release the groups waited for before the loop
//!     [ping-pong: warpgroup 1 gives warpgroup 0 the first turn]
//!     loop: wait full barriers, [take the turn] dots [pass it] and register math,
//!           arrive on the iteration's empty barriers                (no CTA barrier)
//!           (a GEMM: its dot stays in flight, `wait_group 1`, and the previous
//!           iteration's barriers are the ones released)
//!     [wgmma.wait_group 0] [ping-pong: warpgroup 0 takes the last turn]
//!     epilogue                                 // its CTA barriers: bar.sync 1, threads
//! ```
//!
//! Both roles count the commit groups (the consumers' count drives their waits, as
//! without a producer).

use std::collections::HashSet;

use super::builder::{Class, Operand, Reg};
use super::emit::{Emitter, R};
use super::expr::Expr;
use crate::ir::{Func, Op, OpId, OpKind};

/// Which part of the kernel is being emitted.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// Before the K loop: every thread.
    All,
    Producer,
    Consumer,
}

/// Ping-pong turns: warpgroup `w` waits at named barrier `TURN_BARRIER + w` and passes
/// the turn on with an arrival at the other's. The ids are immediates, one instruction
/// per warpgroup under `second` (a register id would make ptxas reserve all 16).
#[derive(Copy, Clone)]
struct Turns {
    /// This is the second consumer warpgroup.
    second: Reg,
}

/// Named barrier 0 is the CTA's, 1 the consumers'.
const TURN_BARRIER: u32 = 2;
/// A turn barrier counts both consumer warpgroups.
const TURN_THREADS: i64 = 2 * crate::warp_spec::WARPGROUP_THREADS;

pub(crate) struct WarpRoles {
    pub role: Role,
    split: crate::warp_spec::RegisterSplit,
    /// The specialized loop's body ops the producer runs, and those the consumers skip.
    producer_keep: HashSet<OpId>,
    consumer_skip: HashSet<OpId>,
    /// The loop's last dot, after which the consumers release the iteration's groups.
    last_dot: OpId,
    /// The loop's first dot, and with `producer = "pingpong"` the named barriers of the
    /// consumer warpgroups' turns at it (this warpgroup's, the other's) and whether this
    /// is the second warpgroup.
    first_dot: OpId,
    turns: Option<Turns>,
    /// The producer's commit groups per iteration.
    groups: i64,
    /// The loop's one dot may stay in flight while the next iteration's is issued
    /// (CUTLASS's mainloop): it only accumulates, and the ring has at least two stages,
    /// so the producer never waits for the slot the dot in flight reads.
    overlap: bool,
    /// Under `overlap`, from the consumers' start: whether a previous iteration's dot
    /// waits for the release of its groups (after the next dot's wait; the last
    /// iteration's are never released).
    lagging: Option<Reg>,
    /// Groups the consumers have released (their arrivals on empty barriers).
    released: Reg,
    /// A TMA copy has been emitted since the last commit (the producer waits for the
    /// slot's empty barrier before the first copy of a group).
    group_open: bool,
}

impl WarpRoles {
    /// The roles of a kernel with a producer warpgroup; `None` without one.
    pub(crate) fn of(f: &Func, b: &mut super::builder::Builder) -> Option<WarpRoles> {
        let split = crate::warp_spec::register_split(f)?;
        let k_loop =
            f.body.ops.iter().copied().find(|&id| f.op(id).attr(crate::warp_spec::WARP_SPECIALIZED).is_some())?;
        let body = &f.op(k_loop).regions[0];
        let producer_keep = crate::warp_spec::producer_slice(f, body);
        let consumer_skip =
            body.ops.iter().copied().filter(|&id| matches!(f.op(id).kind, OpKind::CpAsync | OpKind::Barrier)).collect();
        let dots: Vec<OpId> = body.ops.iter().copied().filter(|&id| f.op(id).kind == OpKind::Dot).collect();
        let (first_dot, last_dot) = (*dots.first()?, *dots.last()?);
        let groups = body.ops.iter().filter(|&&id| f.op(id).kind == OpKind::AsyncCommit).count() as i64;
        let stages = crate::tma::mbarrier_ring(f).map_or(0, |(_, ring)| ring / groups.max(1));
        let only_accumulates = |dot: OpId| {
            let result = f.op(dot).results[0];
            body.ops.iter().all(|&id| {
                let op = f.op(id);
                !op.operands.contains(&result) || op.kind == OpKind::Yield
            })
        };
        let overlap = dots.len() == 1 && stages >= 2 && only_accumulates(last_dot);
        let released = b.in_prologue(|b| {
            let r = b.reg(Class::B32);
            b.ins(format!("mov.u32 {r}, 0"));
            r
        });
        Some(WarpRoles {
            role: Role::All,
            split,
            producer_keep,
            consumer_skip,
            last_dot,
            first_dot,
            turns: None,
            groups,
            overlap,
            lagging: None,
            released,
            group_open: false,
        })
    }
}

impl Emitter<'_> {
    fn role(&self) -> Role {
        self.roles.as_ref().map_or(Role::All, |r| r.role)
    }

    /// Whether the current role leaves out `id` (an op of the specialized loop's body).
    pub(super) fn role_skips(&self, id: OpId) -> bool {
        match &self.roles {
            Some(r) if r.role == Role::Producer => !r.producer_keep.contains(&id),
            Some(r) if r.role == Role::Consumer => r.consumer_skip.contains(&id),
            _ => false,
        }
    }

    /// A barrier of every thread that runs this part: the CTA before the roles split, the
    /// consumers' named barrier 1 after it (the producer has exited).
    pub(super) fn sync_threads(&mut self) {
        if self.role() == Role::Consumer {
            let threads = self.threads;
            self.b.ins(format!("bar.sync 1, {threads}"));
        } else {
            self.b.ins("bar.sync 0");
        }
    }

    /// The K loop of a kernel with a producer warpgroup: the roles split here.
    pub(super) fn specialized_loop(&mut self, op: &Op) -> R<()> {
        let Some(roles) = self.roles.as_ref() else {
            return Err(self.fail(op, "internal error: a warp-specialized loop in a kernel without roles"));
        };
        let (producer_regs, consumer_regs) = (roles.split.producer_regs, roles.split.consumer_regs);
        let leader =
            self.tma.as_ref().map(|t| t.leader).ok_or_else(|| self.fail(op, "internal error: no TMA state"))?;
        let threads = self.threads;
        let tid = self.exprs.emit(&mut self.b, &Expr::tid());
        let producer = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.ge.u32 {producer}, {tid}, {threads}"));
        let consumers = self.b.label("consumers");
        // Whole warpgroups take one side: the branch is uniform per warp.
        self.b.ins_if(producer, true, format!("bra.uni {consumers}"));
        self.b.ins(format!("setmaxnreg.dec.sync.aligned.u32 {producer_regs}"));
        // Under a cluster every producer thread arrives at the cluster barrier before it
        // exits (the leader after its loop).
        let done = self.cluster.is_some().then(|| self.b.label("produced_all"));
        match &done {
            Some(done) => self.b.ins_if(leader, true, format!("bra {done}")),
            None => self.b.ins_if(leader, true, "exit"),
        }
        self.set_role(Role::Producer);
        self.producer_loop(op)?;
        if let Some(done) = done {
            self.b.place_label(&done);
            self.leave_cluster(false);
        }
        self.b.ins("exit");
        self.b.place_label(&consumers);
        self.b.ins(format!("setmaxnreg.inc.sync.aligned.u32 {consumer_regs}"));
        self.set_role(Role::Consumer);
        self.release_waited_groups();
        let turns = op.attr(crate::warp_spec::PINGPONG).is_some().then(|| self.first_turn());
        if let Some(r) = self.roles.as_mut().filter(|r| r.overlap) {
            let lagging = self.b.reg(Class::Pred);
            self.b.ins(format!("setp.ne.u32 {lagging}, 0, 0"));
            r.lagging = Some(lagging);
        }
        self.for_loop(op)?;
        if self.roles.as_ref().is_some_and(|r| r.lagging.is_some()) {
            // The last iteration's dot. Its groups are not released: the producer has
            // issued its last group and waits for no slot any more.
            self.b.ins("wgmma.wait_group.sync.aligned 0");
        }
        if let Some(t) = turns {
            // The second warpgroup's last turn, passed on to the first.
            self.b.ins_if(t.second, true, format!("bar.sync {TURN_BARRIER}, {TURN_THREADS}"));
        }
        Ok(())
    }

    /// At the consumers' start: the groups every thread has waited for before the loop
    /// (operands loaded once, such as attention's Q) are released, in order, so that
    /// every group is released once and the empty barriers' phases count groups.
    fn release_waited_groups(&mut self) {
        let (Some(roles), Some(tma)) = (self.roles.as_ref(), self.tma.as_ref()) else { return };
        let (released, waited) = (roles.released, tma.waited);
        let (head, done) = (self.b.label("release"), self.b.label("released"));
        self.b.place_label(&head);
        let p = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.ge.u32 {p}, {released}, {waited}"));
        self.b.ins_if(p, false, format!("bra.uni {done}"));
        self.release_group();
        self.b.ins(format!("bra.uni {head}"));
        self.b.place_label(&done);
    }

    /// Ping-pong: the consumer warpgroups' barriers, and the second warpgroup lets the
    /// first take the first turn.
    fn first_turn(&mut self) -> Turns {
        let tid = self.exprs.emit(&mut self.b, &Expr::tid());
        let b = &mut self.b;
        let second = b.reg(Class::Pred);
        b.ins(format!("setp.ge.u32 {second}, {tid}, {}", crate::warp_spec::WARPGROUP_THREADS));
        b.ins_if(second, false, format!("bar.arrive {TURN_BARRIER}, {TURN_THREADS}"));
        let turns = Turns { second };
        if let Some(r) = self.roles.as_mut() {
            r.turns = Some(turns);
        }
        turns
    }

    /// Before a dot of the specialized loop, on the consumers: with ping-pong, the first
    /// dot waits for this warpgroup's turn.
    pub(super) fn take_turn_before(&mut self, id: OpId) {
        let Some(roles) = self.roles.as_ref().filter(|r| r.role == Role::Consumer && r.first_dot == id) else {
            return;
        };
        if let Some(t) = roles.turns {
            self.turn_barrier(t, "sync", true);
        }
    }

    fn set_role(&mut self, role: Role) {
        if let Some(r) = self.roles.as_mut() {
            r.role = role;
            r.group_open = false;
        }
    }

    /// The loop with only the producer's slice of its body and no carried values.
    fn producer_loop(&mut self, op: &Op) -> R<()> {
        let lo = self.scalar(op, op.operands[0])?;
        let hi = self.scalar(op, op.operands[1])?;
        let step = self.scalar(op, op.operands[2])?;
        let region = &op.regions[0];
        let iv = self.b.reg(Class::B64);
        self.b.ins(format!("mov.b64 {iv}, {lo}"));
        let (head, end) = (self.b.label("produce"), self.b.label("produced"));
        self.b.place_label(&head);
        let p = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.ge.s64 {p}, {iv}, {hi}"));
        self.b.ins_if(p, false, format!("bra.uni {end}"));
        self.set(region.args[0], super::emit::Val::Scalar(Operand::Reg(iv)));
        self.region(region)?;
        self.b.loc = Some(op.loc.clone());
        self.b.ins(format!("add.s64 {iv}, {iv}, {step}"));
        self.b.ins(format!("bra.uni {head}"));
        self.b.place_label(&end);
        Ok(())
    }

    /// After a dot of the specialized loop, on the consumers: the first dot's result is
    /// in (its `wgmma.wait_group 0` has returned), so with ping-pong the other warpgroup
    /// takes its turn; after the last dot the iteration's groups are done, so their slots
    /// may be refilled.
    pub(super) fn release_after(&mut self, id: OpId) {
        let Some(roles) = self.roles.as_ref().filter(|r| r.role == Role::Consumer) else { return };
        let (turns, groups, last) = (roles.turns.filter(|_| roles.first_dot == id), roles.groups, roles.last_dot == id);
        if let Some(t) = turns {
            self.turn_barrier(t, "arrive", false);
        }
        if !last {
            return;
        }
        let Some(lagging) = self.roles.as_ref().and_then(|r| r.lagging) else {
            for _ in 0..groups {
                self.release_group();
            }
            return;
        };
        // The dot just issued is in flight (or done, where the lowering could not
        // accumulate in place) and the previous iteration's has completed (`wait_group
        // 1`): release the previous iteration's groups, if there was one.
        let skip = self.b.label("no_lag");
        self.b.ins_if(lagging, true, format!("bra.uni {skip}"));
        for _ in 0..groups {
            self.release_group();
        }
        self.b.place_label(&skip);
        self.b.ins(format!("setp.eq.u32 {lagging}, 1, 1"));
    }

    /// Whether the dot `id` (of the specialized loop, on the consumers) may be left in
    /// flight across iterations.
    pub(super) fn keeps_dot_in_flight(&self, id: OpId) -> bool {
        self.roles.as_ref().is_some_and(|r| r.role == Role::Consumer && r.overlap && r.last_dot == id)
    }

    /// `bar.{verb}` of each consumer warpgroup at its own turn barrier (`own`) or at the
    /// other's: immediate ids, one instruction per warpgroup.
    fn turn_barrier(&mut self, t: Turns, verb: &str, own: bool) {
        let (first, second) = if own { (TURN_BARRIER, TURN_BARRIER + 1) } else { (TURN_BARRIER + 1, TURN_BARRIER) };
        self.b.ins_if(t.second, true, format!("bar.{verb} {first}, {TURN_THREADS}"));
        self.b.ins_if(t.second, false, format!("bar.{verb} {second}, {TURN_THREADS}"));
    }

    /// The consumers' arrival on the empty barrier of the next group they release.
    fn release_group(&mut self) {
        let (Some(roles), Some(ring)) = (self.roles.as_ref(), self.tma.as_ref().map(|t| t.ring)) else { return };
        let released = roles.released;
        let full = self.barrier_of(released);
        if self.cluster.is_some() {
            let empty = self.b.reg(Class::B32);
            self.b.ins(format!("add.u32 {empty}, {full}, {}", ring * crate::tma::MBARRIER_BYTES));
            self.release_in_cluster(empty);
        } else {
            let state = self.b.reg(Class::B64);
            self.b.ins(format!(
                "mbarrier.arrive.release.cta.shared::cta.b64 {state}, [{full}+{}]",
                ring * crate::tma::MBARRIER_BYTES
            ));
        }
        self.b.ins(format!("add.u32 {released}, {released}, 1"));
    }

    /// Before the first TMA copy of a group, on the producer: group `g ≥ S` refills slot
    /// `g mod S`, so it waits until the consumers have released group `g − S`, the
    /// `(g / S − 1)`-th phase of that slot's empty barrier.
    ///
    /// Before the roles split every thread runs the copies (the kernel's prologue), and a
    /// slot is refilled there only after every thread has waited for the group that last
    /// filled it and passed a CTA barrier, as without a producer.
    pub(super) fn wait_for_empty_slot(&mut self) {
        let Some(roles) = self.roles.as_mut().filter(|r| r.role == Role::Producer) else { return };
        if std::mem::replace(&mut roles.group_open, true) {
            return;
        }
        let Some((ring, commits)) = self.tma.as_ref().map(|t| (t.ring, t.commits)) else { return };
        let (fresh, skip, retry) = (self.b.reg(Class::Pred), self.b.label("slot_empty"), self.b.label("slot_try"));
        self.b.ins(format!("setp.lt.u32 {fresh}, {commits}, {ring}"));
        self.b.ins_if(fresh, false, format!("bra {skip}"));
        let addr = self.barrier_of(commits);
        let b = &mut self.b;
        let (parity, empty) = (b.reg(Class::B32), b.reg(Class::Pred));
        b.ins(format!("div.u32 {parity}, {commits}, {ring}"));
        b.ins(format!("add.u32 {parity}, {parity}, 1"));
        b.ins(format!("and.b32 {parity}, {parity}, 1"));
        b.place_label(&retry);
        b.ins(format!(
            "mbarrier.try_wait.parity.shared::cta.b64 {empty}, [{addr}+{}], {parity}",
            ring * crate::tma::MBARRIER_BYTES
        ));
        b.ins_if(empty, true, format!("bra {retry}"));
        b.place_label(&skip);
    }

    /// A commit closes the open group.
    pub(super) fn close_group(&mut self) {
        if let Some(r) = self.roles.as_mut() {
            r.group_open = false;
        }
    }
}
