//! E0501: a program that reads elements its neighbour along a grid axis writes, in a
//! kernel that updates a tensor in place (`x = X[i0 + 1:i0 + 1 + B]` then
//! `X[i0:i0 + B] = x`: each program's load reaches one element into the next program's
//! store). Programs run in no fixed order, so the read sees the old value or the new
//! one: the result changes from run to run (and the CPU's threads showed it: a verdict
//! that flipped, with a cause that blamed code generation on some runs).
//!
//! On Graph IR, for a tensor that a grid loop's body both loads from and stores into
//! (not atomically): a load and a store whose windows along some axis start at `iv ± o`
//! for the same grid loop variable `iv` (step `B`), with offsets a constant `δ` apart and
//! equal starts and sizes on every other axis. The programs `k` steps apart overlap
//! where `-s_store < k*B + δ < s_load` for window sizes `s`, which some `k ≠ 0` meets
//! when both windows are one step wide and `δ ≠ 0`, when together they are wider than
//! two steps, or (tried for `k = ±1`) provably for every size and step of at least 1.
//! The grid is taken to have the programs `k` needs. Accesses under a masked `if` are
//! skipped; a load's or a store's own `mask=` is not looked at (it guards the tensor's
//! edge, and rarely hides a neighbour's elements).

use tessera_frontend::check::Dim;

use super::overrun::{parent_ops, symbolic_value, under_a_masked_if, variable_plus_offset};
use crate::ir::{Attr, Func, Loc, OpId, OpKind, ValueId};

/// A load that reads elements a neighbouring program's store writes.
#[derive(Clone, Debug)]
pub struct NeighbourRace {
    /// The store and the load.
    pub store: Loc,
    pub load: Loc,
    /// The tensor, as written.
    pub tensor: String,
    /// The grid loop's variable (`i0`), and whether the program that writes what a
    /// program reads comes later along it (`i0 + BLOCK`) or earlier.
    pub variable: String,
    pub later: bool,
    /// The grid loop.
    pub grid: Loc,
}

/// One window of a tensor: per axis its start (when the analysis can express it) and
/// its size.
struct Window {
    access: OpId,
    tensor: ValueId,
    starts: Vec<Option<Dim>>,
    /// Per axis: `(grid variable, offset)` when the start is `iv + o` for a grid loop.
    grid_starts: Vec<Option<(ValueId, Dim)>>,
    sizes: Vec<Dim>,
}

pub fn neighbour_races(f: &Func) -> Vec<NeighbourRace> {
    let defs = f.definitions();
    let loop_of = f.loop_variables();
    let parent = parent_ops(f);
    let mut loads = Vec::new();
    let mut stores = Vec::new();
    for id in f.walk() {
        let access = f.op(id);
        let is_store = match access.kind {
            // Masks are not looked at: they guard a tensor's edges, and rarely hide a
            // neighbour's elements.
            OpKind::Load => false,
            OpKind::Store if access.attr("atomic").is_none() => true,
            _ => continue,
        };
        if under_a_masked_if(f, &parent, id) {
            continue;
        }
        let Some(view) = access.operands.first().and_then(|&v| defs[v.0 as usize]).map(|d| f.op(d)) else {
            continue;
        };
        let Some(Attr::Dims(sizes)) = view.attr("sizes") else { continue };
        let (OpKind::View, Some(&tensor)) = (view.kind, view.operands.first()) else { continue };
        let starts = &view.operands[1..];
        let grid_starts = starts
            .iter()
            .map(|&s| {
                variable_plus_or_minus_offset(f, &defs, &loop_of, s)
                    .filter(|(iv, _)| loop_of[iv.0 as usize].is_some_and(|l| f.op(l).kind == OpKind::GridParallel))
            })
            .collect();
        let window = Window {
            access: id,
            tensor,
            starts: starts.iter().map(|&s| symbolic_value(f, &defs, &loop_of, s)).collect(),
            grid_starts,
            sizes: sizes.clone(),
        };
        if is_store {
            stores.push(window);
        } else {
            loads.push(window);
        }
    }
    let mut out = Vec::new();
    for store in &stores {
        for load in loads.iter().filter(|l| l.tensor == store.tensor && l.starts.len() == store.starts.len()) {
            if let Some(race) = race(f, &defs, &loop_of, load, store) {
                out.push(race);
                break;
            }
        }
    }
    out
}

fn race(
    f: &Func,
    defs: &[Option<OpId>],
    loop_of: &[Option<OpId>],
    load: &Window,
    store: &Window,
) -> Option<NeighbourRace> {
    let rank = load.starts.len();
    let axis = (0..rank)
        .find(|&a| matches!((&load.grid_starts[a], &store.grid_starts[a]), (Some((l, _)), Some((s, _))) if l == s))?;
    // Programs that differ only along this loop meet on every other axis.
    let others_equal = (0..rank).filter(|&a| a != axis).all(|a| match (&load.starts[a], &store.starts[a]) {
        (Some(l), Some(s)) => l == s && load.sizes[a] == store.sizes[a],
        _ => false,
    });
    if !others_equal {
        return None;
    }
    let (Some((iv, load_offset)), Some((_, store_offset))) = (&load.grid_starts[axis], &store.grid_starts[axis]) else {
        return None;
    };
    let delta = store_offset.sub(load_offset).as_const()?;
    let grid = f.op(loop_of[iv.0 as usize]?);
    let step = symbolic_value(f, defs, loop_of, *grid.operands.get(2)?)?;
    let (load_size, store_size) = (&load.sizes[axis], &store.sizes[axis]);
    // The store of the program `k` steps on starts `k*B + δ` after this program's load:
    // they overlap where `-s_store < k*B + δ < s_load`, an open interval of length
    // `s_load + s_store` that must hold a nonzero multiple of `B`.
    let later = if load_size == &step && store_size == &step {
        // Length 2B: it holds `-δ` when `B` divides `δ`, else two multiples, one nonzero.
        (delta != 0).then_some(delta < 0)?
    } else if positive(&load_size.add(store_size).sub(&step.mul_plain(&Dim::constant(2)))) {
        // Longer than 2B (a halo): two multiples at least, one of them nonzero.
        delta <= 0
    } else {
        [1i64, -1].into_iter().find(|&k| {
            let shift = step.mul_plain(&Dim::constant(k)).add(&Dim::constant(delta));
            positive(&load_size.sub(&shift)) && positive(&shift.add(store_size))
        })? > 0
    };
    let name = |v: ValueId| f.values[v.0 as usize].name.as_deref().map(str::to_string);
    Some(NeighbourRace {
        store: f.op(store.access).loc.clone(),
        load: f.op(load.access).loc.clone(),
        tensor: name(store.tensor).unwrap_or_else(|| "the tensor".into()),
        variable: name(*iv).unwrap_or_else(|| "the grid index".into()),
        later,
        grid: grid.loc.clone(),
    })
}

/// `v` as `iv + o` or `iv - o`, for a loop variable `iv` (a halo's `i0 - 1`).
fn variable_plus_or_minus_offset(
    f: &Func,
    defs: &[Option<OpId>],
    loop_of: &[Option<OpId>],
    v: ValueId,
) -> Option<(ValueId, Dim)> {
    if let Some(found) = variable_plus_offset(f, defs, loop_of, v) {
        return Some(found);
    }
    let op = f.op(defs[v.0 as usize]?);
    let (OpKind::Sub, &[iv, other]) = (op.kind, &op.operands[..]) else { return None };
    loop_of[iv.0 as usize]?;
    Some((iv, Dim::constant(0).sub(&symbolic_value(f, defs, loop_of, other)?)))
}

/// Positive for every value of at least 1 of its symbols: positive where they are all 1,
/// and no term that shrinks as one grows.
fn positive(d: &Dim) -> bool {
    let at_one = d.eval(&|_| Some(1));
    at_one.is_some_and(|v| v > 0) && d.monomials().iter().all(|(mono, c)| mono.is_empty() || *c >= 0)
}
