//! Access-pattern lints on a kernel's Graph IR: uncoalesced global accesses (W0603) and
//! sequential loops whose iterations could be tile programs (W0604).

use std::collections::HashSet;

use crate::ir::{Attr, Func, Loc, OpId, OpKind, Region, Type, ValueId};

/// A global access whose fastest-varying tile dim walks a non-contiguous tensor dim.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Uncoalesced {
    pub at: Loc,
    pub tensor: String,
    /// The tensor dim the tile's last dim walks.
    pub walked_dim: usize,
    pub rank: usize,
    pub store: bool,
}

/// Views that drop the tensor's last (contiguous) dim but keep a longer one: the tile's
/// fastest dim then steps by a whole row of the tensor per element.
pub fn uncoalesced_accesses(f: &Func) -> Vec<Uncoalesced> {
    let defs = f.definitions();
    let mut out = Vec::new();
    for id in f.walk() {
        let op = f.op(id);
        let store = match op.kind {
            OpKind::Load => false,
            OpKind::Store => true,
            _ => continue,
        };
        let Some(&view) = op.operands.first() else { continue };
        let Some(view_op) = defs.get(view.0 as usize).copied().flatten().map(|v| f.op(v)) else { continue };
        if view_op.kind != OpKind::View {
            continue;
        }
        let Some(&tensor) = view_op.operands.first() else { continue };
        let Type::Tensor(t) = f.ty(tensor) else { continue };
        let rank = t.dims.len();
        let squeeze: Vec<i64> = match view_op.attr("squeeze") {
            Some(Attr::Ints(s)) => s.clone(),
            _ => continue,
        };
        if rank < 2 || !squeeze.contains(&(rank as i64 - 1)) {
            continue;
        }
        // The innermost kept dim is what the tile's fastest dim walks.
        let Some(walked) = (0..rank - 1).rev().find(|d| !squeeze.contains(&(*d as i64))) else { continue };
        let sizes = match view_op.attr("sizes") {
            Some(Attr::Dims(d)) => d.clone(),
            _ => continue,
        };
        if sizes.get(walked).and_then(|d| d.as_const()) == Some(1) {
            continue;
        }
        out.push(Uncoalesced {
            at: view_op.loc.clone(),
            tensor: f.values[tensor.0 as usize].name.as_deref().unwrap_or("the tensor").to_string(),
            walked_dim: walked,
            rank,
            store,
        });
    }
    out
}

/// A sequential loop whose iterations are independent.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct IndependentLoop {
    pub at: Loc,
    pub stored: Vec<String>,
}

/// `tile.range` loops that carry nothing, touch no shared memory, use no register tile
/// computed before the loop, store to windows that move with the loop index, and read
/// the tensors they write only at the windows they write: every iteration could be its
/// own tile program.
pub fn independent_loops(f: &Func) -> Vec<IndependentLoop> {
    let defs = f.definitions();
    let mut out = Vec::new();
    // A loop can only move to the grid while the grid has an axis left (x, y, z).
    let mut grid_depth = std::collections::HashMap::new();
    fn depths(f: &Func, region: &Region, depth: usize, out: &mut std::collections::HashMap<OpId, usize>) {
        for &id in &region.ops {
            out.insert(id, depth);
            let inner = depth + usize::from(f.op(id).kind == OpKind::GridParallel);
            for r in &f.op(id).regions {
                depths(f, r, inner, out);
            }
        }
    }
    depths(f, &f.body, 0, &mut grid_depth);
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::For || op.str_attr("kind") != Some("sequential") || !op.results.is_empty() {
            continue;
        }
        if grid_depth.get(&id).copied().unwrap_or(0) >= 3 {
            continue;
        }
        let Some(body) = op.regions.first() else { continue };
        let Some(&iv) = body.args.first() else { continue };
        if let Some(stored) = independent(f, &defs, body, iv) {
            out.push(IndependentLoop { at: op.loc.clone(), stored });
        }
    }
    out
}

fn independent(f: &Func, defs: &[Option<OpId>], body: &Region, iv: ValueId) -> Option<Vec<String>> {
    let mut inside: HashSet<ValueId> = body.args.iter().copied().collect();
    let mut ops = Vec::new();
    collect(f, body, &mut ops, &mut inside);
    // Values the body depends on through the loop index.
    let mut varies: HashSet<ValueId> = HashSet::from([iv]);
    for &id in &ops {
        let op = f.op(id);
        if op.operands.iter().any(|o| varies.contains(o)) {
            varies.extend(&op.results);
        }
    }
    let mut stores: Vec<(ValueId, Vec<ValueId>)> = Vec::new();
    let mut loads: Vec<(ValueId, Vec<ValueId>)> = Vec::new();
    for &id in &ops {
        let op = f.op(id);
        match op.kind {
            OpKind::AllocShared
            | OpKind::CpAsync
            | OpKind::StoreShared
            | OpKind::LoadShared
            | OpKind::Barrier
            | OpKind::AsyncWait
            | OpKind::AsyncCommit
            | OpKind::Scatter
            | OpKind::For
            | OpKind::While => return None,
            OpKind::Store | OpKind::Load => {
                let view = *op.operands.first()?;
                let view_op = f.op(defs.get(view.0 as usize).copied().flatten()?);
                if view_op.kind != OpKind::View {
                    return None;
                }
                let entry = (view_op.operands[0], view_op.operands[1..].to_vec());
                if op.kind == OpKind::Store {
                    // The window must move with the loop index, or iterations overwrite it.
                    if !entry.1.iter().any(|o| varies.contains(o)) {
                        return None;
                    }
                    stores.push(entry);
                } else {
                    loads.push(entry);
                }
            }
            _ => {}
        }
        // A register tile from before the loop ties the iterations to this program.
        for o in &op.operands {
            if !inside.contains(o) && matches!(f.ty(*o), Type::Tile(_)) {
                return None;
            }
        }
    }
    if stores.is_empty() {
        return None;
    }
    for (tensor, offsets) in &loads {
        if stores.iter().any(|(t, o)| t == tensor && o != offsets) {
            return None;
        }
    }
    let mut names: Vec<String> =
        stores.iter().map(|(t, _)| f.values[t.0 as usize].name.as_deref().unwrap_or("a tensor").to_string()).collect();
    names.dedup();
    Some(names)
}

fn collect(f: &Func, region: &Region, ops: &mut Vec<OpId>, inside: &mut HashSet<ValueId>) {
    for &id in &region.ops {
        ops.push(id);
        let op = f.op(id);
        inside.extend(&op.results);
        for r in &op.regions {
            inside.extend(&r.args);
            collect(f, r, ops, inside);
        }
    }
}
