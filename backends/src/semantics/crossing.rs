//! Tensors a kernel both reads and writes (an update in place): an element one program
//! writes and another reads is a race, whatever order the reference happens to run them
//! in: on a GPU, and between the CPU backend's threads, the read sees the old value or
//! the new one. A normalization that sums all of `X` in every program and then writes
//! its own block of `X` is one; E0501 finds the shifted windows statically
//! (`tessera_passes::analysis::neighbours`), this finds the rest on the data.
//!
//! Each tracked element records the program that wrote it last and the program that
//! read it (or that several did). A read checks the writer and a write checks the
//! readers, each after recording its own access, all sequentially consistent: of two
//! programs touching an element at once, one of them sees the other.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use tessera_passes::ir::{Func, OpId, OpKind};

/// Several programs have read the element.
const SEVERAL: u32 = u32::MAX;

struct Tracks {
    writer: Vec<AtomicU32>,
    reader: Vec<AtomicU32>,
}

pub(super) struct Crossings {
    /// Per parameter: the tracks of a tensor the kernel both reads and writes.
    tensors: Vec<Option<Tracks>>,
}

impl Crossings {
    /// `None` when no parameter is both read and written. `defs` is
    /// [`Func::definitions`]; `lens[p]`: parameter `p`'s element count (`None` for scalars).
    pub fn new(func: &Func, defs: &[Option<OpId>], lens: &[Option<usize>]) -> Option<Crossings> {
        let param = |v| func.params.iter().position(|&p| p == v);
        // The tensor behind a view, or the tensor itself.
        let tensor = |v: tessera_passes::ir::ValueId| match defs[v.0 as usize].map(|d| func.op(d)) {
            Some(view) if view.kind == OpKind::View => view.operands.first().and_then(|&t| param(t)),
            _ => param(v),
        };
        let (mut read, mut written) = (vec![false; lens.len()], vec![false; lens.len()]);
        for id in func.walk() {
            let op = func.op(id);
            let (operand, marks) = match op.kind {
                OpKind::Load | OpKind::Gather => (op.operands.first(), &mut read),
                OpKind::CpAsync | OpKind::StoreShared => (op.operands.get(1), &mut read),
                OpKind::Store | OpKind::Scatter => (op.operands.first(), &mut written),
                _ => continue,
            };
            if let Some(p) = operand.and_then(|&v| tensor(v)) {
                marks[p] = true;
            }
        }
        let tensors: Vec<Option<Tracks>> = lens
            .iter()
            .enumerate()
            .map(|(p, len)| match (len, read[p] && written[p]) {
                (Some(n), true) => Some(Tracks {
                    writer: (0..*n).map(|_| AtomicU32::new(0)).collect(),
                    reader: (0..*n).map(|_| AtomicU32::new(0)).collect(),
                }),
                _ => None,
            })
            .collect();
        tensors.iter().any(Option::is_some).then_some(Crossings { tensors })
    }

    /// Program `me` reads element `i` of parameter `arg`: whether another program wrote it.
    pub fn read(&self, arg: usize, i: usize, me: u32) -> bool {
        let Some(t) = &self.tensors[arg] else { return false };
        let _ = t.reader[i].fetch_update(SeqCst, SeqCst, |r| match r {
            0 => Some(me),
            r if r == me || r == SEVERAL => None,
            _ => Some(SEVERAL),
        });
        let w = t.writer[i].load(SeqCst);
        w != 0 && w != me
    }

    /// Program `me` writes element `i` of parameter `arg`: whether another program read it.
    pub fn write(&self, arg: usize, i: usize, me: u32) -> bool {
        let Some(t) = &self.tensors[arg] else { return false };
        t.writer[i].store(me, SeqCst);
        let r = t.reader[i].load(SeqCst);
        r != 0 && r != me
    }
}

/// The fault's message: `program` reads (or writes) `element`, which another program
/// writes (or reads).
pub(super) fn crossing_message(program: &str, reads: bool, element: &str) -> String {
    let (does, other) = if reads { ("reads", "writes") } else { ("writes", "reads") };
    format!(
        "{program} {does} `{element}`, which another program {other}: programs run in no fixed order (on a GPU, \
         and between the CPU backend's threads), so the read sees the old value or the new one and the kernel has \
         no single result to check; add into the element with `tile.atomic_add` if the programs accumulate there \
         (a histogram), else write the result to another tensor, or read what the programs need before any of \
         them writes (a second kernel)"
    )
}
