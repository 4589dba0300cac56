//! Races around async copies and shared stores (E0501), a dataflow over a kernel's
//! explicit shared-memory ops in Graph IR (TARGETS.md, "Races around async copies").
//!
//! Per shared buffer the state since the last `tile.barrier()` is kept: a write (async
//! copy or plain store) not yet visible to the block, and a read other threads may still
//! be doing. Reported: (1) a read of a buffer whose write is not yet visible, (2) a write
//! into a buffer other threads may still read (write after read without a barrier, also
//! across a loop's back edge), (3) two async writes into one buffer with no barrier
//! between. Loop back edges and branches join conservatively. The compiler's own
//! pipelining (Tile IR) is correct by construction and is not analyzed here.

use std::collections::BTreeMap;

use crate::ir::{Func, Loc, OpId, OpKind, Region, ValueId};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum RaceKind {
    /// A read of a buffer whose write is not yet visible to every thread.
    ReadBeforeVisible,
    /// A write into a buffer that other threads may still be reading.
    WriteWhileRead,
    /// Two async copies into one buffer with no barrier between them.
    DoubleWrite,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Race {
    pub kind: RaceKind,
    /// The racing op (the read, or the second write).
    pub at: Loc,
    /// The buffer's name as written.
    pub buffer: String,
    /// The other side: the write that is not visible, or the read not yet past a barrier.
    pub other: Loc,
    /// Whether `other` is reached through the loop's back edge (a previous iteration).
    pub across_iterations: bool,
    /// Races in one barrier-free stretch of code share a segment: one barrier fixes them.
    pub segment: u32,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct BufferState {
    /// A write not yet visible to the block, and whether it is an async copy.
    write: Option<(OpId, bool)>,
    read: Option<OpId>,
    /// Set when the state came around a loop's back edge.
    from_back_edge: bool,
}

type State = BTreeMap<ValueId, BufferState>;

fn join(a: &State, b: &State) -> State {
    let mut out = a.clone();
    for (buf, s) in b {
        let e = out.entry(*buf).or_default();
        if e.write.is_none() {
            e.write = s.write;
        }
        if e.read.is_none() {
            e.read = s.read;
        }
        e.from_back_edge |= s.from_back_edge;
    }
    out
}

struct Analysis<'f> {
    f: &'f Func,
    races: BTreeMap<(OpId, ValueId), Race>,
    segment: u32,
}

impl Analysis<'_> {
    fn name(&self, buf: ValueId) -> String {
        self.f.values[buf.0 as usize].name.as_deref().unwrap_or("the shared buffer").to_string()
    }

    fn report(&mut self, kind: RaceKind, at: OpId, buf: ValueId, other: OpId, across_iterations: bool) {
        let race = Race {
            kind,
            at: self.f.op(at).loc.clone(),
            buffer: self.name(buf),
            other: self.f.op(other).loc.clone(),
            across_iterations,
            segment: self.segment,
        };
        self.races.entry((at, buf)).or_insert(race);
    }

    fn region(&mut self, region: &Region, mut state: State) -> State {
        for &id in &region.ops {
            let op = self.f.op(id);
            match op.kind {
                OpKind::CpAsync | OpKind::StoreShared => {
                    let Some(&buf) = op.operands.first() else { continue };
                    let is_async = op.kind == OpKind::CpAsync;
                    let s = state.entry(buf).or_default().clone();
                    if let Some(read) = s.read {
                        self.report(RaceKind::WriteWhileRead, id, buf, read, s.from_back_edge);
                    } else if let (Some((write, true)), true) = (s.write, is_async) {
                        self.report(RaceKind::DoubleWrite, id, buf, write, s.from_back_edge);
                    }
                    state.insert(buf, BufferState { write: Some((id, is_async)), read: None, from_back_edge: false });
                }
                OpKind::LoadShared => {
                    let Some(&buf) = op.operands.first() else { continue };
                    let s = state.entry(buf).or_default();
                    if let Some((write, _)) = s.write {
                        let across = s.from_back_edge;
                        self.report(RaceKind::ReadBeforeVisible, id, buf, write, across);
                    }
                    let s = state.entry(buf).or_default();
                    if s.read.is_none() {
                        s.read = Some(id);
                    }
                }
                OpKind::Barrier => {
                    state.clear();
                    self.segment += 1;
                }
                // Each grid point is its own tile program: no back edge to join.
                OpKind::GridParallel => {
                    self.segment += 1;
                    if let Some(body) = op.regions.first() {
                        let end = self.region(body, state.clone());
                        state = join(&state, &end);
                    }
                }
                OpKind::For | OpKind::While => {
                    self.segment += 1;
                    let Some(body) = op.regions.first() else { continue };
                    // Iterate to a fixpoint: the state at the loop head joins the entry
                    // with the end of the body (the back edge).
                    let mut head = state.clone();
                    for _ in 0..4 {
                        let end = self.region(body, head.clone());
                        let mut back: State = end;
                        for s in back.values_mut() {
                            s.from_back_edge = true;
                        }
                        let next = join(&state, &back);
                        if next == head {
                            break;
                        }
                        head = next;
                    }
                    // After the loop: zero iterations or the end of the last one.
                    let end = self.region(body, head.clone());
                    state = join(&state, &end);
                }
                OpKind::If => {
                    let mut out: Option<State> = None;
                    for r in &op.regions {
                        let end = self.region(r, state.clone());
                        out = Some(match out {
                            Some(o) => join(&o, &end),
                            None => end,
                        });
                    }
                    if op.regions.len() < 2 {
                        out = Some(join(&out.unwrap_or_default(), &state));
                    }
                    state = out.unwrap_or(state);
                }
                _ => {}
            }
        }
        state
    }
}

/// The races of a kernel's Graph IR, in program order.
pub fn find_races(f: &Func) -> Vec<Race> {
    let mut a = Analysis { f, races: BTreeMap::new(), segment: 0 };
    a.region(&f.body, State::new());
    let mut races: Vec<Race> = a.races.into_values().collect();
    races.sort_by_key(|r| (r.at.range.start, r.at.range.end));
    races
}

/// A shared buffer the kernel reads but never writes: what it reads is whatever the
/// previous kernel left in shared memory.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UnwrittenRead {
    /// The first read.
    pub at: Loc,
    pub buffer: String,
    /// The allocation.
    pub allocated: Loc,
}

/// Every shared buffer of `f` that some op reads (`tile.load_shared`, the operand reads
/// of `tile.mma`) and no `tile.cp_async` or shared store writes.
pub fn unwritten_reads(f: &Func) -> Vec<UnwrittenRead> {
    let ops = f.walk();
    let writes = |buf: ValueId| {
        ops.iter().any(|&id| {
            let op = f.op(id);
            matches!(op.kind, OpKind::CpAsync | OpKind::StoreShared) && op.operands.first() == Some(&buf)
        })
    };
    let mut out = Vec::new();
    for &alloc in &ops {
        let op = f.op(alloc);
        if op.kind != OpKind::AllocShared {
            continue;
        }
        let Some(&buf) = op.results.first() else { continue };
        if writes(buf) {
            continue;
        }
        let first_read =
            ops.iter().map(|&id| f.op(id)).find(|r| r.kind == OpKind::LoadShared && r.operands.first() == Some(&buf));
        if let Some(read) = first_read {
            let buffer = f.values[buf.0 as usize].name.as_deref().unwrap_or("the shared buffer").to_string();
            out.push(UnwrittenRead { at: read.loc.clone(), buffer, allocated: op.loc.clone() });
        }
    }
    out
}
