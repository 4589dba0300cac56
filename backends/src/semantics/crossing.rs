//! Tensors a kernel both reads and writes (an update in place): an element one program
//! writes and another reads is a race, whatever order the reference happens to run them
//! in: on a GPU, and between the CPU backend's threads, the read sees the old value or
//! the new one. A normalization that sums all of `X` in every program and then writes
//! its own block of `X` is one; E0501 finds the shifted windows statically
//! (`tessera_passes::analysis::neighbours`), this finds the rest on the data.
//!
//! The same holds between a plain write and `tile.atomic_add`: a program that zeroes
//! an output (`if i0 == 0: Out[0:1] = 0`) while the others add into it loses the adds
//! that land before its write, and the reference, running program 0 first, would call
//! the result correct. A plain read of an element other programs add into sees some of
//! the adds. Atomic adds among themselves commute, and are not tracked against each other.
//!
//! Each tracked element records the program that wrote it last, and the program that
//! read it and the one that added into it (or that several did). Each access records
//! itself and then checks the other two kinds, all sequentially consistent: of two
//! programs touching an element at once, one of them sees the other.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use tessera_passes::ir::{Func, OpId, OpKind};

/// Several programs have read (added into) the element.
const SEVERAL: u32 = u32::MAX;

/// How a program touches an element of global memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Access {
    Read,
    Write,
    /// `tile.atomic_add` (or an atomic scatter).
    Add,
}

struct Tracks {
    writer: Vec<AtomicU32>,
    reader: Vec<AtomicU32>,
    adder: Vec<AtomicU32>,
}

pub(super) struct Crossings {
    /// Per parameter: the tracks of a tensor the kernel touches in two ways of the three.
    tensors: Vec<Option<Tracks>>,
}

/// Records `me` among the programs of a read or add track.
fn join(track: &AtomicU32, me: u32) {
    let _ = track.fetch_update(SeqCst, SeqCst, |r| match r {
        0 => Some(me),
        r if r == me || r == SEVERAL => None,
        _ => Some(SEVERAL),
    });
}

/// Whether a program other than `me` is on the track.
fn another(track: &AtomicU32, me: u32) -> bool {
    let other = track.load(SeqCst);
    other != 0 && other != me
}

impl Crossings {
    /// `None` when no parameter is touched in two ways (read, plain write, atomic add).
    /// `defs` is [`Func::definitions`]; `lens[p]`: parameter `p`'s element count (`None`
    /// for scalars).
    pub fn new(func: &Func, defs: &[Option<OpId>], lens: &[Option<usize>]) -> Option<Crossings> {
        let param = |v| func.params.iter().position(|&p| p == v);
        // The tensor behind a view, or the tensor itself.
        let tensor = |v: tessera_passes::ir::ValueId| match defs[v.0 as usize].map(|d| func.op(d)) {
            Some(view) if view.kind == OpKind::View => view.operands.first().and_then(|&t| param(t)),
            _ => param(v),
        };
        let mut ways = vec![[false; 3]; lens.len()];
        for id in func.walk() {
            let op = func.op(id);
            let atomic = op.attr("atomic").is_some();
            let (operand, access) = match op.kind {
                OpKind::Load | OpKind::Gather => (op.operands.first(), Access::Read),
                OpKind::CpAsync | OpKind::StoreShared => (op.operands.get(1), Access::Read),
                OpKind::Store | OpKind::Scatter if atomic => (op.operands.first(), Access::Add),
                OpKind::Store | OpKind::Scatter => (op.operands.first(), Access::Write),
                _ => continue,
            };
            if let Some(p) = operand.and_then(|&v| tensor(v)) {
                ways[p][access as usize] = true;
            }
        }
        let tracked = |n: usize| (0..n).map(|_| AtomicU32::new(0)).collect::<Vec<_>>();
        let tensors: Vec<Option<Tracks>> = lens
            .iter()
            .zip(&ways)
            .map(|(len, ways)| match (len, ways.iter().filter(|&&w| w).count() >= 2) {
                (Some(n), true) => Some(Tracks { writer: tracked(*n), reader: tracked(*n), adder: tracked(*n) }),
                _ => None,
            })
            .collect();
        tensors.iter().any(Option::is_some).then_some(Crossings { tensors })
    }

    /// Program `me` touches element `i` of parameter `arg`: the kind of access of another
    /// program that it crosses, if any (a write before a read, an add before a write, ...).
    pub fn access(&self, arg: usize, i: usize, me: u32, access: Access) -> Option<Access> {
        let t = self.tensors[arg].as_ref()?;
        match access {
            Access::Read => join(&t.reader[i], me),
            Access::Write => t.writer[i].store(me, SeqCst),
            Access::Add => join(&t.adder[i], me),
        }
        let crossed = |other: Access| {
            let track = match other {
                Access::Read => &t.reader[i],
                Access::Write => &t.writer[i],
                Access::Add => &t.adder[i],
            };
            (other != access && another(track, me)).then_some(other)
        };
        crossed(Access::Write).or_else(|| crossed(Access::Read)).or_else(|| crossed(Access::Add))
    }
}

/// The fault's message: `program` touches `element` one way (`mine`), which another
/// program touches another way (`theirs`).
pub(super) fn crossing_message(program: &str, mine: Access, theirs: Access, element: &str) -> String {
    let verb = |a: Access| match a {
        Access::Read => "reads",
        Access::Write => "writes",
        Access::Add => "adds into",
    };
    let head = match (mine, theirs) {
        (Access::Add, _) => {
            format!("{program} adds into `{element}` with `tile.atomic_add`, which another program {}", verb(theirs))
        }
        (_, Access::Add) => {
            format!("{program} {} `{element}`, which another program adds into with `tile.atomic_add`", verb(mine))
        }
        _ => format!("{program} {} `{element}`, which another program {}", verb(mine), verb(theirs)),
    };
    if mine == Access::Add || theirs == Access::Add {
        let reads = mine == Access::Read || theirs == Access::Read;
        return if reads {
            format!(
                "{head}: programs run in no fixed order (on a GPU, and between the CPU \
                 backend's threads), so the read sees some of the additions and not others, and the kernel has no \
                 single result to check; read the sums in a second kernel, after every program has added"
            )
        } else {
            format!(
                "{head}: programs run in no fixed order (on a GPU, and between the CPU backend's threads), so the \
                 write can land after some of the additions and lose them (or they add onto it), and the kernel has \
                 no single result to check; set the tensor before the launch (on the host, or in a kernel of its \
                 own) and only add into it here"
            )
        };
    }
    format!(
        "{head}: programs run in no fixed order (on a GPU, and between the CPU backend's threads), so the read sees \
         the old value or the new one and the kernel has no single result to check; add into the element with \
         `tile.atomic_add` if the programs accumulate there (a histogram), else write the result to another tensor, \
         or read what the programs need before any of them writes (a second kernel)"
    )
}
