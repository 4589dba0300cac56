//! The two roles of a warp-specialized kernel (`producer = "warpgroup"`, the rule and
//! the protocol are `crate::warp_spec`'s).
//!
//! Threads `0 .. threads` are the consumers (the schedule's warps, so every layout and
//! thread map is the one the kernel has without a producer); the producer warpgroup is
//! the 128 threads after them. Everything before the K loop runs on every thread (the
//! prologue's TMA copies are issued by the producer's first thread, the `leader`). At
//! the loop:
//!
//! ```text
//!     setp.ge.u32 %p, %tid, threads;  @!%p bra.uni CONSUMERS
//!     setmaxnreg.dec.sync.aligned.u32 40      // the producer warpgroup gives registers back
//!     @!leader exit
//!     loop: [wait empty barrier of the slot] TMA copies, commit     (the loop's producer slice)
//!     exit
//! CONSUMERS:
//!     setmaxnreg.inc.sync.aligned.u32 232
//!     loop: wait full barrier, wgmma dot, arrive on the slot's empty barrier   (no CTA barrier)
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

pub(crate) struct WarpRoles {
    pub role: Role,
    split: crate::warp_spec::RegisterSplit,
    /// The specialized loop's body ops the producer runs, and those the consumers skip.
    producer_keep: HashSet<OpId>,
    consumer_skip: HashSet<OpId>,
    /// The dot of the loop, after which the consumers release the group they read.
    dot: OpId,
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
        let dot = body.ops.iter().copied().find(|&id| f.op(id).kind == OpKind::Dot)?;
        let released = b.in_prologue(|b| {
            let r = b.reg(Class::B32);
            b.ins(format!("mov.u32 {r}, 0"));
            r
        });
        Some(WarpRoles { role: Role::All, split, producer_keep, consumer_skip, dot, released, group_open: false })
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
        self.b.ins_if(leader, true, "exit");
        self.set_role(Role::Producer);
        self.producer_loop(op)?;
        self.b.ins("exit");
        self.b.place_label(&consumers);
        self.b.ins(format!("setmaxnreg.inc.sync.aligned.u32 {consumer_regs}"));
        self.set_role(Role::Consumer);
        self.for_loop(op)
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

    /// After the specialized loop's dot, on the consumers: the group it read is done
    /// (its `wgmma.wait_group 0` has returned), so its slot may be refilled.
    pub(super) fn release_after(&mut self, id: OpId) {
        let Some(roles) = self.roles.as_ref().filter(|r| r.role == Role::Consumer && r.dot == id) else { return };
        let released = roles.released;
        let Some(ring) = self.tma.as_ref().map(|t| t.ring) else { return };
        let full = self.barrier_of(released);
        let state = self.b.reg(Class::B64);
        self.b.ins(format!(
            "mbarrier.arrive.release.cta.shared::cta.b64 {state}, [{full}+{}]",
            ring * crate::tma::MBARRIER_BYTES
        ));
        self.b.ins(format!("add.u32 {released}, {released}, 1"));
    }

    /// Before the first TMA copy of a group, on the producer: group `g ≥ S` refills slot
    /// `g mod S`, so it waits until the consumers have released group `g − S`, the
    /// `(g / S − 1)`-th phase of that slot's empty barrier.
    pub(super) fn wait_for_empty_slot(&mut self) {
        let Some(roles) = self.roles.as_mut() else { return };
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
