//! What the code generator needs to know about a Tile IR function before emitting it:
//! op positions (pre-order) and region extents, how often and where each value is used,
//! the last position each value is read at, and where each tensor and shared buffer is
//! written. Lazy evaluation and in-place updates are only done when these say it is safe.

use crate::ir::{Func, OpId, OpKind, ValueId};

/// A piece of memory a tile may read.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(super) enum Root {
    /// A tensor parameter (by parameter index).
    Tensor(usize),
    /// A shared buffer (by its `tile.alloc_shared` op).
    Smem(u32),
    /// A private stack buffer of the program.
    Buf(u32),
}

pub(super) struct Plan {
    /// Pre-order position of each op.
    pub pos: Vec<u32>,
    /// The last position inside each op (its own position when it has no regions).
    pub end: Vec<u32>,
    pub parent: Vec<Option<OpId>>,
    /// The op whose region defines each value (`None`: the function body).
    pub owner: Vec<Option<OpId>>,
    /// Operand occurrences of each value.
    pub uses: Vec<u32>,
    /// Whether every use is by an op of the region that defines the value.
    pub local: Vec<bool>,
    /// The last position the value is read at (uses inside a nested region count at the
    /// end of the op holding that region).
    pub last_use: Vec<u32>,
    /// Position of each value's definition.
    pub def_pos: Vec<u32>,
    /// Positions of the ops writing each root.
    pub writes: Vec<(Root, u32)>,
    /// Tensor parameters some op writes.
    pub written: Vec<bool>,
}

impl Plan {
    pub(super) fn new(f: &Func) -> Plan {
        let n_ops = f.ops.len();
        let n_vals = f.values.len();
        let mut plan = Plan {
            pos: vec![0; n_ops],
            end: vec![0; n_ops],
            parent: vec![None; n_ops],
            owner: vec![None; n_vals],
            uses: vec![0; n_vals],
            local: vec![true; n_vals],
            last_use: vec![0; n_vals],
            def_pos: vec![0; n_vals],
            writes: Vec::new(),
            written: vec![false; f.params.len()],
        };
        let mut counter = 0u32;
        number(f, &f.body, None, &mut plan, &mut counter);
        let order = f.walk();
        for &id in &order {
            let op = f.op(id);
            for &v in &op.operands {
                let v_owner = plan.owner[v.0 as usize];
                plan.uses[v.0 as usize] += 1;
                // Climb to the op of the defining region.
                let mut at = id;
                let mut nested = false;
                while plan.parent[at.0 as usize] != v_owner {
                    match plan.parent[at.0 as usize] {
                        Some(p) => {
                            at = p;
                            nested = true;
                        }
                        None => break,
                    }
                }
                if nested {
                    plan.local[v.0 as usize] = false;
                }
                let eff = if nested { plan.end[at.0 as usize] } else { plan.pos[id.0 as usize] };
                let lu = &mut plan.last_use[v.0 as usize];
                *lu = (*lu).max(eff);
            }
        }
        for v in 0..n_vals {
            plan.last_use[v] = plan.last_use[v].max(plan.def_pos[v]);
        }
        // Writes to tensors and shared buffers.
        let param_index = |v: ValueId| f.params.iter().position(|&p| p == v);
        let defs = f.definitions();
        let smem_root = |mut v: ValueId| -> Option<u32> {
            loop {
                let d = defs[v.0 as usize]?;
                let op = f.op(d);
                match op.kind {
                    OpKind::AllocShared => return Some(d.0),
                    OpKind::SmemSlot => v = op.operands[0],
                    _ => return None,
                }
            }
        };
        let view_tensor = |v: ValueId| -> Option<usize> {
            let d = defs[v.0 as usize]?;
            let op = f.op(d);
            (op.kind == OpKind::View).then(|| param_index(op.operands[0])).flatten()
        };
        for &id in &order {
            let op = f.op(id);
            let p = plan.pos[id.0 as usize];
            let root = match op.kind {
                OpKind::Store => op.operands.first().and_then(|&v| view_tensor(v)).map(Root::Tensor),
                OpKind::Scatter => op.operands.first().and_then(|&v| param_index(v)).map(Root::Tensor),
                OpKind::CpAsync | OpKind::StoreShared => {
                    op.operands.first().and_then(|&v| smem_root(v)).map(Root::Smem)
                }
                _ => None,
            };
            if let Some(r) = root {
                if let Root::Tensor(i) = r {
                    plan.written[i] = true;
                }
                plan.writes.push((r, p));
            }
        }
        plan
    }

    /// Whether `root` is written at a position in `(from, to]`.
    pub(super) fn written_between(&self, root: Root, from: u32, to: u32) -> bool {
        self.writes.iter().any(|&(r, p)| r == root && p > from && p <= to)
    }

    /// Whether the value is used exactly once, by an op of its own region.
    pub(super) fn single_local_use(&self, v: ValueId) -> bool {
        self.uses[v.0 as usize] == 1 && self.local[v.0 as usize]
    }
}

fn number(f: &Func, region: &crate::ir::Region, owner: Option<OpId>, plan: &mut Plan, counter: &mut u32) {
    for &a in &region.args {
        plan.owner[a.0 as usize] = owner;
        plan.def_pos[a.0 as usize] = owner.map_or(0, |o| plan.pos[o.0 as usize]);
    }
    for &id in &region.ops {
        *counter += 1;
        let p = *counter;
        plan.pos[id.0 as usize] = p;
        plan.parent[id.0 as usize] = owner;
        let op = f.op(id);
        for &r in &op.results {
            plan.owner[r.0 as usize] = owner;
            plan.def_pos[r.0 as usize] = p;
        }
        for r in &op.regions {
            number(f, r, Some(id), plan, counter);
        }
        plan.end[id.0 as usize] = *counter;
    }
}
