//! W0609: a read-modify-write through ids, `Hist[b] = Hist[b] + 1`. The scatter writes
//! back a value computed from a gather of the same tensor at the same ids, so programs
//! (or lanes of one program) whose ids repeat all read the same old value, and only one
//! of their updates survives: a histogram that undercounts. `tile.atomic_add` adds each
//! one. With unique ids (a permutation) it is right, hence a warning; `tessera run` stops
//! at a repeated id of two programs.
//!
//! On Graph IR: a `tile.scatter` without `atomic`, whose ids are read from memory (ids
//! computed from the program's place never repeat), and whose values depend, through any
//! ops but loads and other gathers, on a `tile.gather` of the same tensor whose index
//! tile is the scatter's (the same value, or the same computation of the same values).

use crate::ir::{Func, Loc, OpId, OpKind, ValueId};

/// A scatter that writes back what a gather of the same ids read.
#[derive(Clone, Debug)]
pub struct IdUpdate {
    pub scatter: Loc,
    pub gather: Loc,
    /// The tensor, as written.
    pub tensor: String,
}

pub fn id_read_modify_writes(f: &Func) -> Vec<IdUpdate> {
    let defs = f.definitions();
    let mut out = Vec::new();
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::Scatter || op.attr("atomic").is_some() {
            continue;
        }
        let (Some(&tensor), Some(&ids), Some(&values)) = (op.operands.first(), op.operands.get(1), op.operands.get(2))
        else {
            continue;
        };
        // Ids computed from the program's place (`tile.linear_id()`, `i0 + tile.arange(B)`)
        // never repeat: only ids read from memory may.
        if !read_from_memory(f, &defs, ids, 0) {
            continue;
        }
        if let Some(gather) = gather_of(f, &defs, values, tensor, ids, 0) {
            out.push(IdUpdate {
                scatter: op.loc.clone(),
                gather: f.op(gather).loc.clone(),
                tensor: f.values[tensor.0 as usize].name.as_deref().unwrap_or("the tensor").to_string(),
            });
        }
    }
    out
}

/// The gather of `tensor` at `ids` that `v` is computed from, looking back `depth` ops.
fn gather_of(f: &Func, defs: &[Option<OpId>], v: ValueId, tensor: ValueId, ids: ValueId, depth: usize) -> Option<OpId> {
    let id = defs[v.0 as usize]?;
    let op = f.op(id);
    match op.kind {
        OpKind::Gather => (op.operands.first() == Some(&tensor)
            && op.operands.get(1).is_some_and(|&g| same_value(f, defs, g, ids, 0)))
        .then_some(id),
        OpKind::Load => None,
        _ if depth < 16 && op.regions.is_empty() => {
            op.operands.iter().find_map(|&o| gather_of(f, defs, o, tensor, ids, depth + 1))
        }
        _ => None,
    }
}

/// Whether `v` is computed from a load or a gather, looking back `depth` ops.
fn read_from_memory(f: &Func, defs: &[Option<OpId>], v: ValueId, depth: usize) -> bool {
    let Some(id) = defs[v.0 as usize] else { return false };
    let op = f.op(id);
    matches!(op.kind, OpKind::Load | OpKind::Gather)
        || (depth < 16 && op.operands.iter().any(|&o| read_from_memory(f, defs, o, depth + 1)))
}

/// `a` and `b` are one value, or the same ops with the same attributes over the same
/// values (the flat index a gather and a scatter each compute from `ids[:, None]`).
fn same_value(f: &Func, defs: &[Option<OpId>], a: ValueId, b: ValueId, depth: usize) -> bool {
    if a == b {
        return true;
    }
    let (Some(x), Some(y)) = (defs[a.0 as usize], defs[b.0 as usize]) else { return false };
    let (x, y) = (f.op(x), f.op(y));
    depth < 16
        && x.kind == y.kind
        && x.regions.is_empty()
        && !matches!(x.kind, OpKind::Load | OpKind::Gather)
        && x.attrs == y.attrs
        && x.operands.len() == y.operands.len()
        && x.operands.iter().zip(&y.operands).all(|(&p, &q)| same_value(f, defs, p, q, depth + 1))
}
