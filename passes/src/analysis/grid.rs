//! Facts of a kernel's grid — the programs its `tile.parallel` loops make — checked on
//! its Graph IR, under any schedule: a global store that every program of an axis makes
//! to the same elements (a race, E0501), and a `tile.program_id` read where the program
//! along its axis is not defined (E0503).
//!
//! The grid loops of a kernel are a chain (one per axis, nested; E0503 otherwise): axis
//! 0 is the outermost, as Tile IR numbers them. Every program runs every op of the
//! body, inside the loops or not, with the loops' indices of its own trips.

use crate::ir::{Func, Loc, Op, OpId, OpKind, Region, ValueId};

/// A store every program along a grid axis makes to the same elements: its place in
/// the tensor (and its mask, and any branch around it) does not depend on the axis's
/// index, or the store is outside that axis's loop, so the programs race for them (a
/// GPU keeps one of their values).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GridStoreRace {
    /// The store.
    pub at: Loc,
    /// The grid loop's index, as written (`m0`).
    pub axis: String,
    /// The grid loop.
    pub grid: Loc,
    /// The store is outside that loop (before it, or around it), not inside it.
    pub outside: bool,
}

/// The grid loops a value depends on, one bit per `grid.parallel` (in walk order).
type GridDeps = u64;

/// The grid loops of `f`, in walk order (the outermost first), at most 64.
fn grid_loops(f: &Func, ops: &[OpId]) -> Vec<OpId> {
    ops.iter().copied().filter(|&id| f.op(id).kind == OpKind::GridParallel).take(64).collect()
}

fn index_name(f: &Func, grid: &Op) -> String {
    let name = grid.regions.first().and_then(|r| r.args.first()).and_then(|v| f.values[v.0 as usize].name.clone());
    name.map_or("the grid index".to_string(), |n| n.to_string())
}

/// Every global store (`tile.store`, `tile.scatter`) of `f`'s Graph IR that every
/// program along some axis makes to the same elements: the axis's loop may have more
/// than one program, and the store is outside it, or inside it with an address, mask,
/// enclosing branch conditions and loop bounds that do not depend on its index. A grid
/// loop whose bounds are constants with one trip is one program; `tile.program_id`
/// counts as depending on every axis.
///
/// And with them, from the same walk of the stores, the [`AtomicWriteRace`]s.
pub fn store_races(f: &Func) -> (Vec<GridStoreRace>, Vec<AtomicWriteRace>) {
    let walk = walk_stores(f);
    let atomic = atomic_write_races_of(f, &walk);
    (walk.out, atomic)
}

/// A plain store into the elements that every program along a grid axis adds into with
/// `tile.atomic_add`: a total zeroed by program 0 in the kernel that sums into it. The
/// write lands before some of the additions and after others.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AtomicWriteRace {
    /// The plain store.
    pub store: Loc,
    /// The atomic add.
    pub add: Loc,
    /// The tensor, as written.
    pub tensor: String,
    /// The axis every program of which adds, as written (`i0`).
    pub axis: String,
}

/// Every plain `tile.store` of `f` whose window (the same tensor, sizes and starts) an
/// atomic add of `f` writes too, where that add's place and the branches and loops
/// around it do not depend on a grid axis of several programs: every program along it
/// adds, so some program adds beside the one that writes, whichever that is.
fn atomic_write_races_of(f: &Func, walk: &StoreWalk<'_>) -> Vec<AtomicWriteRace> {
    let defs = &walk.defs;
    let mut out = Vec::new();
    for &(add, axis) in &walk.everyone_adds {
        let add = f.op(add);
        for &store in &walk.plain {
            let store = f.op(store);
            if same_window(f, defs, add.operands[0], store.operands[0]) {
                let tensor =
                    defs[add.operands[0].0 as usize].map(|v| f.op(v)).and_then(|v| v.operands.first().copied());
                out.push(AtomicWriteRace {
                    store: store.loc.clone(),
                    add: add.loc.clone(),
                    tensor: tensor
                        .and_then(|t| f.values[t.0 as usize].name.as_deref())
                        .unwrap_or("the tensor")
                        .to_string(),
                    axis: index_name(f, f.op(axis)),
                });
            }
        }
    }
    out
}

/// Whether two views are the same window: one tensor, equal sizes, starts that are the
/// same values or equal constants.
fn same_window(f: &Func, defs: &[Option<OpId>], a: ValueId, b: ValueId) -> bool {
    let view =
        |v: ValueId| defs.get(v.0 as usize).copied().flatten().map(|id| f.op(id)).filter(|o| o.kind == OpKind::View);
    let (Some(a), Some(b)) = (view(a), view(b)) else { return false };
    let constant = |v| int_constant(f, defs, v);
    a.operands.len() == b.operands.len()
        && a.attr("sizes") == b.attr("sizes")
        && a.attr("squeeze") == b.attr("squeeze")
        && a.operands.first() == b.operands.first()
        && a.operands
            .iter()
            .zip(&b.operands)
            .skip(1)
            .all(|(&x, &y)| x == y || constant(x).is_some_and(|c| constant(y) == Some(c)))
}

/// The stores of `f` seen from its grid: racing plain stores, atomic adds every program
/// of an axis makes, and the plain stores.
fn walk_stores(f: &Func) -> StoreWalk<'_> {
    let ops = f.walk();
    let grids = grid_loops(f, &ops);
    let every_axis: GridDeps = if grids.len() == 64 { u64::MAX } else { (1u64 << grids.len()) - 1 };
    let deps = value_grid_deps(f, &ops, &grids, every_axis);
    let defs = f.definitions();
    let several: Vec<OpId> = grids.iter().copied().filter(|&g| !single_program(f, &defs, f.op(g))).collect();
    let mut walk = StoreWalk {
        f,
        grids,
        several,
        deps,
        enclosing: Vec::new(),
        out: Vec::new(),
        everyone_adds: Vec::new(),
        plain: Vec::new(),
        defs,
    };
    walk.region(&f.body, 0);
    walk
}

/// What each value depends on, to a fixpoint over loop-carried values.
fn value_grid_deps(f: &Func, ops: &[OpId], grids: &[OpId], every_axis: GridDeps) -> Vec<GridDeps> {
    let mut deps = vec![0 as GridDeps; f.values.len()];
    for (bit, &g) in grids.iter().enumerate() {
        if let Some(&index) = f.op(g).regions.first().and_then(|r| r.args.first()) {
            deps[index.0 as usize] = 1 << bit;
        }
    }
    let union = |deps: &[GridDeps], values: &[ValueId]| values.iter().fold(0, |d, v| d | deps[v.0 as usize]);
    let yielded = |region: &Region, i: usize, deps: &[GridDeps]| {
        region
            .ops
            .last()
            .map(|&y| f.op(y))
            .filter(|y| y.kind == OpKind::Yield)
            .and_then(|y| y.operands.get(i))
            .map_or(0, |v| deps[v.0 as usize])
    };
    // Each round can carry a dependency one loop further around; the bits only grow.
    for _ in 0..8 {
        let mut changed = false;
        let mut set = |deps: &mut Vec<GridDeps>, v: ValueId, d: GridDeps| {
            let slot = &mut deps[v.0 as usize];
            if *slot | d != *slot {
                *slot |= d;
                changed = true;
            }
        };
        for &id in ops {
            let op = f.op(id);
            match op.kind {
                OpKind::ProgramId | OpKind::NumPrograms => {
                    for &r in &op.results {
                        set(&mut deps, r, every_axis);
                    }
                }
                OpKind::For | OpKind::GridParallel => {
                    let Some(body) = op.regions.first() else { continue };
                    if op.kind == OpKind::For {
                        let bounds = union(&deps, &op.operands[..op.operands.len().min(3)]);
                        if let Some(&index) = body.args.first() {
                            set(&mut deps, index, bounds);
                        }
                    }
                    for (i, &init) in op.operands.iter().skip(3).enumerate() {
                        let d = deps[init.0 as usize] | yielded(body, i, &deps);
                        if let Some(&arg) = body.args.get(1 + i) {
                            set(&mut deps, arg, d);
                        }
                        if let Some(&r) = op.results.get(i) {
                            set(&mut deps, r, d);
                        }
                    }
                }
                OpKind::If => {
                    let condition = union(&deps, &op.operands);
                    for (i, &r) in op.results.iter().enumerate() {
                        let d = op.regions.iter().fold(condition, |d, region| d | yielded(region, i, &deps));
                        set(&mut deps, r, d);
                    }
                }
                // A `while` loop's carried values: every axis (never a false report).
                OpKind::While => {
                    for &v in op.results.iter().chain(op.regions.iter().flat_map(|r| r.args.iter())) {
                        set(&mut deps, v, every_axis);
                    }
                }
                _ => {
                    let d = union(&deps, &op.operands);
                    for &r in &op.results {
                        set(&mut deps, r, d);
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    deps
}

/// Whether a grid loop certainly has one program: constant bounds and step, one trip.
fn single_program(f: &Func, defs: &[Option<OpId>], grid: &Op) -> bool {
    let constant = |v| int_constant(f, defs, v);
    match (constant(grid.operands[0]), constant(grid.operands[1]), constant(grid.operands[2])) {
        (Some(start), Some(end), Some(step)) if step > 0 => end - start <= step,
        _ => false,
    }
}

/// The value of `v` where an integer `arith.constant` defines it.
fn int_constant(f: &Func, defs: &[Option<OpId>], v: ValueId) -> Option<i64> {
    let op = f.op(defs.get(v.0 as usize).copied().flatten()?);
    (op.kind == OpKind::Constant).then(|| op.int_attr("value")).flatten()
}

struct StoreWalk<'a> {
    f: &'a Func,
    grids: Vec<OpId>,
    /// The grid loops that may have more than one program.
    several: Vec<OpId>,
    deps: Vec<GridDeps>,
    /// The grid loops of `several` around the walk, with their bits.
    enclosing: Vec<(usize, OpId)>,
    out: Vec<GridStoreRace>,
    /// Atomic adds (`tile.store` with `atomic`) that every program along an enclosing
    /// grid loop makes to the same place, with that loop.
    everyone_adds: Vec<(OpId, OpId)>,
    /// The plain `tile.store`s.
    plain: Vec<OpId>,
    /// [`Func::definitions`] of `f`.
    defs: Vec<Option<OpId>>,
}

impl StoreWalk<'_> {
    fn of(&self, values: &[ValueId]) -> GridDeps {
        values.iter().fold(0, |d, v| d | self.deps[v.0 as usize])
    }

    /// Walks `region`, with `control` the conditions of the branches and the bounds of
    /// the loops around it (whether a store happens at all).
    fn region(&mut self, region: &Region, control: GridDeps) {
        let f = self.f;
        for &id in &region.ops {
            let op = f.op(id);
            match op.kind {
                // Atomic adds from many programs into one element are what they are for.
                OpKind::Store if op.attr("atomic").is_some() => {
                    let d = control | self.of(&self.placed(op));
                    if let Some(&(_, grid)) = self.enclosing.iter().rev().find(|(bit, _)| d & (1 << bit) == 0) {
                        self.everyone_adds.push((id, grid));
                    }
                }
                OpKind::Scatter if op.attr("atomic").is_some() => {}
                OpKind::Store | OpKind::Scatter => {
                    if op.kind == OpKind::Store {
                        self.plain.push(id);
                    }
                    self.store(op, control)
                }
                OpKind::GridParallel => {
                    let bit = self.grids.iter().position(|&g| g == id);
                    let counted = bit.filter(|_| self.several.contains(&id));
                    if let Some(bit) = counted {
                        self.enclosing.push((bit, id));
                    }
                    for r in &op.regions {
                        self.region(r, control);
                    }
                    if counted.is_some() {
                        self.enclosing.pop();
                    }
                }
                OpKind::If | OpKind::For => {
                    let decided =
                        if op.kind == OpKind::If { &op.operands[..] } else { &op.operands[..op.operands.len().min(3)] };
                    let condition = control | self.of(decided);
                    for r in &op.regions {
                        self.region(r, condition);
                    }
                }
                OpKind::While => {
                    for r in &op.regions {
                        self.region(r, GridDeps::MAX);
                    }
                }
                _ => {
                    for r in &op.regions {
                        self.region(r, control);
                    }
                }
            }
        }
    }

    /// A store's address and mask; a scatter's every operand (its indices are data, and
    /// its values may be what tells the programs apart).
    fn placed(&self, op: &Op) -> Vec<ValueId> {
        if op.kind == OpKind::Store {
            op.operands.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, &v)| v).collect()
        } else {
            op.operands.clone()
        }
    }

    fn store(&mut self, op: &Op, control: GridDeps) {
        let d = control | self.of(&self.placed(op));
        // The innermost enclosing axis it ignores: the one its fix most likely names.
        let ignored = self.enclosing.iter().rev().find(|(bit, _)| d & (1 << bit) == 0).map(|&(_, g)| (g, false));
        // Else the first axis whose loop it is outside of: every program of it runs the store.
        let outside = || self.several.iter().find(|g| !self.enclosing.iter().any(|(_, e)| e == *g)).map(|&g| (g, true));
        if let Some((grid, outside)) = ignored.or_else(outside) {
            let g = self.f.op(grid);
            self.out.push(GridStoreRace {
                at: op.loc.clone(),
                axis: index_name(self.f, g),
                grid: g.loc.clone(),
                outside,
            });
        }
    }
}

/// A `tile.program_id(axis)` read outside the grid loop of its axis in a kernel whose
/// grid its `tile.parallel` loops make: every program runs that code, but which trip of
/// the axis's loop is its own is only defined inside the loop.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProgramIdOutside {
    pub at: Loc,
    pub axis: i64,
    /// The axis's loop index, as written (`n0`).
    pub index: String,
    pub grid: Loc,
}

/// Every `tile.program_id(a)` of `f` not inside the loop of grid axis `a`, where the
/// kernel has that many grid loops (beyond them, the id is 0 everywhere).
pub fn program_ids_outside_their_loop(f: &Func) -> Vec<ProgramIdOutside> {
    fn visit(f: &Func, region: &Region, depth: usize, grids: &[OpId], out: &mut Vec<ProgramIdOutside>) {
        for &id in &region.ops {
            let op = f.op(id);
            if op.kind == OpKind::ProgramId {
                let axis = op.attr("axis").and_then(|a| a.as_int()).unwrap_or(0);
                if let Some(&grid) = usize::try_from(axis).ok().filter(|&a| a >= depth).and_then(|a| grids.get(a)) {
                    let g = f.op(grid);
                    out.push(ProgramIdOutside {
                        at: op.loc.clone(),
                        axis,
                        index: index_name(f, g),
                        grid: g.loc.clone(),
                    });
                }
            }
            let inner = depth + usize::from(op.kind == OpKind::GridParallel);
            for r in &op.regions {
                visit(f, r, inner, grids, out);
            }
        }
    }
    let grids = grid_loops(f, &f.walk());
    let mut out = Vec::new();
    visit(f, &f.body, 0, &grids, &mut out);
    out
}
