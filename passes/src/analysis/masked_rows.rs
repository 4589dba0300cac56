//! W0605: a row-wise softmax that can see a fully masked row.
//!
//! `tile.causal_mask(s, q0, k0)` sets `s[i, j] = -inf` where `k0 + j > q0 + i`. A key
//! block that lies wholly above the diagonal (`k0 > q0 + i` for a row `i`) masks the whole
//! row, whose maximum is then `-inf`, and `exp(s - max)` computes `exp(-inf - -inf)`:
//! NaN. The rule, on Graph IR (before any schedule, so it holds for every configuration):
//!
//! - `exp(x - m)` where `m` (through broadcasts) is the row maximum of a causally masked
//!   tile — the block's own maximum, as the seeds' `tile.softmax_online` takes it; or
//! - `m` is a running maximum `maximum(m_prev, rowmax(masked))` whose `m_prev` starts
//!   at `-inf` in a key loop that does not start at key 0: its first block may be
//!   masked whole too.
//!
//! A running maximum whose key loop starts at 0 is safe: every row's first block holds
//! key 0, which no causal mask hides, so the maximum is finite from then on. So is a
//! block's own maximum where the mask's key offset is at most its query offset (the
//! diagonal block `causal_mask(s, q0, q0)`, or keys from 0 for queries from 0 or past).

use crate::ir::{Func, Loc, OpId, OpKind, ValueId};

/// One `exp` that can see a fully masked row.
#[derive(Clone, Debug)]
pub struct MaskedSoftmax {
    /// The `exp`.
    pub at: Loc,
    /// The causal mask whose rows may be masked whole.
    pub mask: Loc,
    /// Whether the maximum is a running one whose loop starts past key 0.
    pub running: bool,
}

pub fn masked_softmax_rows(f: &Func) -> Vec<MaskedSoftmax> {
    let defs = f.definitions();
    let def = |v: ValueId| defs.get(v.0 as usize).copied().flatten();
    // The loop and the position of each loop-carried region argument.
    let mut carried: Vec<Option<(OpId, usize)>> = vec![None; f.values.len()];
    for id in f.walk() {
        let op = f.op(id);
        if op.kind == OpKind::For {
            for (i, &a) in op.regions[0].args.iter().enumerate().skip(1) {
                carried[a.0 as usize] = Some((id, i - 1));
            }
        }
    }
    let strip = |mut v: ValueId| {
        while let Some(op) = def(v).map(|o| f.op(o)) {
            match op.kind {
                OpKind::Broadcast | OpKind::ExpandDims | OpKind::ConvertLayout => v = op.operands[0],
                _ => break,
            }
        }
        v
    };
    // The causal mask a tile derives from through elementwise ops, if any.
    let causal_source = |v: ValueId| -> Option<OpId> {
        let mut stack = vec![v];
        let mut seen = std::collections::HashSet::new();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || seen.len() > 64 {
                continue;
            }
            let Some(id) = def(v) else { continue };
            let op = f.op(id);
            match op.kind {
                OpKind::CausalMask => return Some(id),
                k if k.is_elementwise() || matches!(k, OpKind::Broadcast | OpKind::ExpandDims | OpKind::Cast) => {
                    stack.extend(op.operands.iter().copied())
                }
                _ => {}
            }
        }
        None
    };
    // The causal mask behind a row maximum `reduce max` of a masked tile.
    let masked_row_max = |m: ValueId| -> Option<OpId> {
        let op = f.op(def(m)?);
        (op.kind == OpKind::Reduce && op.str_attr("kind") == Some("max")).then_some(())?;
        causal_source(op.operands[0])
    };
    let starts_at_minus_inf = |v: ValueId| {
        def(v).map(|o| f.op(o)).is_some_and(|op| {
            op.kind == OpKind::Full && op.attr("value").and_then(|a| a.as_float()) == Some(f64::NEG_INFINITY)
        })
    };
    let is_zero = |v: ValueId| {
        def(v).map(|o| f.op(o)).is_some_and(|op| op.kind == OpKind::Constant && op.int_attr("value") == Some(0))
    };
    // The loop whose index each value is (`for`, `tile.parallel`).
    let index_of = f.loop_variables();
    let constant =
        |v: ValueId| def(v).map(|o| f.op(o)).filter(|o| o.kind == OpKind::Constant).and_then(|o| o.int_attr("value"));
    // Whether an index is certainly at least 0: a constant, the index of a loop that
    // starts at one, or a sum or product of such.
    fn non_negative(
        v: ValueId,
        depth: u32,
        index_of: &[Option<OpId>],
        f: &Func,
        def: &dyn Fn(ValueId) -> Option<OpId>,
        constant: &dyn Fn(ValueId) -> Option<i64>,
    ) -> bool {
        if depth > 8 {
            return false;
        }
        if let Some(c) = constant(v) {
            return c >= 0;
        }
        if let Some(lp) = index_of[v.0 as usize] {
            let lp = f.op(lp);
            return non_negative(lp.operands[0], depth + 1, index_of, f, def, constant)
                && constant(lp.operands[2]).is_none_or(|step| step > 0);
        }
        def(v).map(|o| f.op(o)).is_some_and(|op| {
            matches!(op.kind, OpKind::Add | OpKind::Mul)
                && op.operands.iter().all(|&x| non_negative(x, depth + 1, index_of, f, def, constant))
        })
    }
    // `causal_mask(s, q0, k0)` masks row `i` whole only where `k0 > q0 + i`: never when
    // `k0 <= q0` (the diagonal block, or key block 0 for queries at 0 or past it).
    let keeps_every_row = |mask: OpId| {
        let op = f.op(mask);
        let (Some(&q0), Some(&k0)) = (op.operands.get(1), op.operands.get(2)) else { return false };
        if q0 == k0 {
            return true;
        }
        match (constant(q0), constant(k0)) {
            (Some(q), Some(k)) => k <= q,
            (_, Some(k)) if k <= 0 => non_negative(q0, 0, &index_of, f, &def, &constant),
            _ => false,
        }
    };
    let mut out = Vec::new();
    for id in f.walk() {
        let exp = f.op(id);
        if exp.kind != OpKind::Exp {
            continue;
        }
        let Some(sub) = def(exp.operands[0]).map(|o| f.op(o)).filter(|o| o.kind == OpKind::Sub) else { continue };
        let m = strip(sub.operands[1]);
        if let Some(mask) = masked_row_max(m) {
            if keeps_every_row(mask) {
                continue;
            }
            out.push(MaskedSoftmax { at: exp.loc.clone(), mask: f.op(mask).loc.clone(), running: false });
            continue;
        }
        // A running maximum: `maximum(m_prev, rowmax(masked))`.
        let Some(max) = def(m).map(|o| f.op(o)).filter(|o| o.kind == OpKind::Max) else { continue };
        for (prev, block) in [(max.operands[0], max.operands[1]), (max.operands[1], max.operands[0])] {
            let (Some(mask), Some((lp, i))) = (masked_row_max(strip(block)), carried[prev.0 as usize]) else {
                continue;
            };
            let lp = f.op(lp);
            let init = lp.operands.get(3 + i).copied();
            if init.is_some_and(starts_at_minus_inf) && !is_zero(lp.operands[0]) {
                out.push(MaskedSoftmax { at: exp.loc.clone(), mask: f.op(mask).loc.clone(), running: true });
                break;
            }
        }
    }
    out
}
