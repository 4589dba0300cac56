//! Register pressure by liveness over GPU Tile IR (TARGETS.md, "Register pressure").
//!
//! Ops are numbered in program order (an op before the ops of its regions). A value
//! lives from its definition to its last use; a use inside a loop that the value's
//! definition is outside of extends the value to the end of that loop (it is needed
//! again on the next iteration). The pressure at an op is the sum over live values of
//! `ceil(bits × elements per thread / 32)` registers, plus a fixed overhead for the
//! thread's own indices and the kernel parameters, plus, at a reduction across warps,
//! the partials it reads back from shared memory (one per warp).

use rustc_hash::FxHashMap as HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::DType;

use crate::ir::{Func, Loc, OpId, OpKind, Type, ValueId};

/// Registers every kernel spends before its values: thread and warp indices, lane
/// arithmetic, the stack of loop bounds ptxas keeps. Calibrated against `ptxas -v`.
pub const BASE_REGISTERS: u32 = 12;

/// A value that is live at the peak.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LiveValue {
    pub name: SmolStr,
    pub registers: u32,
    pub ty: String,
    /// Where it is defined.
    pub loc: Loc,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RegisterEstimate {
    /// The kernel maximum, registers per thread.
    pub peak: u32,
    /// Where the peak is reached.
    pub peak_loc: Loc,
    /// The largest values live at the peak, largest first.
    pub largest: Vec<LiveValue>,
    /// The highest pressure at each source location, in program order of first use.
    /// One entry per location, not per op: a statement lowers to many ops, and these
    /// figures are memoized for every autotune candidate of every kernel.
    pub per_loc: Vec<(Loc, u32)>,
}

/// Registers one value of `ty` occupies in each thread.
pub fn registers_of(ty: &Type) -> u32 {
    match ty {
        Type::Index => 1,
        Type::Scalar(d) => bits(*d).div_ceil(32),
        // A kernel parameter lives in the constant bank, and ptxas reads it as an
        // operand there; the address arithmetic built on it keeps about one register.
        Type::Tensor(_) => 1,
        // A 64-bit base address; offsets fold into it.
        Type::View(_) => 2,
        Type::Smem(_) => 1,
        Type::Token => 0,
        Type::Tile(t) => {
            let Some(shape) = t.dims.iter().map(|d| d.as_const()).collect::<Option<Vec<i64>>>() else {
                return 0;
            };
            let elements = match &t.layout {
                Some(l) => l.elements_per_thread(&shape) as u64,
                // Unlaid-out tiles (CPU) are not register resident on a GPU thread.
                None => 0,
            };
            (elements * bits(t.dtype) as u64).div_ceil(32) as u32
        }
    }
}

/// Registers of one k step of mma fragments of a dot operand tile (per thread).
fn streamed_fragment_registers(ty: &Type) -> Option<u32> {
    let Type::Tile(t) = ty else { return None };
    let Some(crate::ir::Layout::DotOperand { op, parent, .. }) = &t.layout else { return None };
    let crate::ir::Layout::Mma { warps } = parent.as_ref() else { return None };
    let dims = ty.const_dims()?;
    if dims.len() != 2 || t.dtype.bits() > 16 {
        return None;
    }
    Some(if *op == 0 {
        // A: 16 rows per fragment, 4 registers (8 16-bit or 16 8-bit elements) each.
        let rows = (dims[0] / warps[0] as i64).max(16);
        (rows / 16) as u32 * 4
    } else {
        // B: 8 columns per fragment, 2 registers each.
        let cols = (dims[1] / warps[1] as i64).max(8);
        (cols / 8) as u32 * 2
    })
}

fn bits(dtype: DType) -> u32 {
    // Predicates live in their own register file; a bool costs a byte when materialized.
    if dtype == DType::Bool {
        8
    } else {
        dtype.bits()
    }
}

/// Program-order numbering of a function's ops, in tables indexed by op and value id.
struct Numbering {
    /// Ops in program order.
    order: Vec<OpId>,
    /// Each op's position in `order` (`NONE` for ops not in the body).
    index: Vec<usize>,
    /// The position of the last op inside each op's regions (its own position if none).
    end: Vec<usize>,
    /// The op whose region holds each op (None at the top level).
    parent: Vec<Option<OpId>>,
    /// The op that defines each value, or owns the region that binds it (None for
    /// parameters and values no op defines).
    owner: Vec<Option<OpId>>,
}

const NONE: usize = usize::MAX;

impl Numbering {
    fn index(&self, op: OpId) -> usize {
        self.index[op.0 as usize]
    }

    fn end(&self, op: OpId) -> usize {
        self.end[op.0 as usize]
    }

    fn parent(&self, op: OpId) -> Option<OpId> {
        self.parent[op.0 as usize]
    }

    fn owner(&self, v: ValueId) -> Option<OpId> {
        self.owner.get(v.0 as usize).copied().flatten()
    }
}

fn number(f: &Func) -> Numbering {
    let ops = f.ops.len();
    let mut n = Numbering {
        order: Vec::with_capacity(ops),
        index: vec![NONE; ops],
        end: vec![NONE; ops],
        parent: vec![None; ops],
        owner: vec![None; f.values.len()],
    };
    fn visit(f: &Func, ops: &[OpId], parent: Option<OpId>, n: &mut Numbering) {
        for &id in ops {
            let op = f.op(id);
            n.index[id.0 as usize] = n.order.len();
            n.order.push(id);
            n.parent[id.0 as usize] = parent;
            for &r in &op.results {
                n.owner[r.0 as usize] = Some(id);
            }
            for region in &op.regions {
                for &a in &region.args {
                    n.owner[a.0 as usize] = Some(id);
                }
                visit(f, &region.ops, Some(id), n);
            }
            n.end[id.0 as usize] = n.order.len() - 1;
        }
    }
    visit(f, &f.body.ops, None, &mut n);
    n
}

fn is_loop(kind: OpKind) -> bool {
    matches!(kind, OpKind::For | OpKind::While)
}

/// The live intervals of a function's register-resident values.
struct Liveness {
    n: Numbering,
    /// (value, first point, last point, registers) of every value that takes registers.
    intervals: Vec<(ValueId, usize, usize, u32)>,
    /// Registers live into and out of each point, as deltas (see [`liveness`]).
    live_in: Vec<i64>,
    live_out: Vec<i64>,
}

/// The live range of every value of a function that may take registers, before any
/// register count: `(value, definition point, last point)`. Point p + 1 is op p; point
/// 0 is the kernel's entry. Scalar constants (immediates in PTX) are left out.
pub(crate) struct LiveRanges {
    n: Numbering,
    pub(crate) ranges: Vec<(ValueId, usize, usize)>,
    /// Values some op other than a `Dot` reads.
    pub(crate) read_by_non_dot: Vec<bool>,
}

impl LiveRanges {
    /// The number of points (ops) of the function.
    pub(crate) fn points(&self) -> usize {
        self.n.order.len()
    }
}

pub(crate) fn live_ranges(f: &Func) -> LiveRanges {
    let n = number(f);
    let values = f.values.len();
    // A broadcast or an inserted unit dim holds no values of its own: codegen reads the
    // source's registers, so a use of the result is a use of the source.
    let mut alias: Vec<Option<ValueId>> = vec![None; values];
    for &id in &n.order {
        let op = f.op(id);
        if matches!(op.kind, OpKind::Broadcast | OpKind::ExpandDims) {
            if let (Some(&src), Some(&r)) = (op.operands.first(), op.results.first()) {
                alias[r.0 as usize] = Some(alias[src.0 as usize].unwrap_or(src));
            }
        }
    }
    let resolve = |v: ValueId| alias[v.0 as usize].unwrap_or(v);
    // Live interval of every value: [definition, last use], loops extended.
    let mut last_use: Vec<Option<usize>> = vec![None; values];
    // Each value's readers other than `Dot`s, to find dot operands that stream.
    let mut read_by_non_dot = vec![false; values];
    for (i, &id) in n.order.iter().enumerate() {
        let op = f.op(id);
        for &v in &op.operands {
            if op.kind != OpKind::Dot {
                read_by_non_dot[v.0 as usize] = true;
            }
            let v = resolve(v);
            let def_owner = n.owner(v);
            let mut at = i;
            // Walk out of the loops that do not contain the definition.
            let mut cursor = n.parent(id);
            while let Some(p) = cursor {
                if Some(p) == def_owner || encloses(&n, p, def_owner) {
                    break;
                }
                if is_loop(f.op(p).kind) {
                    at = at.max(n.end(p));
                }
                cursor = n.parent(p);
            }
            let entry = last_use[v.0 as usize].get_or_insert(at);
            *entry = (*entry).max(at);
        }
    }
    // Results of an op with regions (a loop's final values) appear when it ends;
    // region arguments and other results at the op itself.
    let defined_at = |v: ValueId| match n.owner(v) {
        Some(op) if f.op(op).results.contains(&v) => n.end(op) + 1,
        Some(op) => n.index(op) + 1,
        None => 0,
    };
    // Values in id order (the order intervals are reported in does not change figures).
    let mut live: Vec<(ValueId, usize)> = Vec::new();
    for (v, last) in last_use.iter().enumerate() {
        if let Some(l) = last {
            live.push((ValueId(v as u32), l + 1));
        }
    }
    // Results nobody reads still occupy registers at their op.
    for &id in &n.order {
        for &r in &f.op(id).results {
            if last_use[r.0 as usize].is_none() && alias[r.0 as usize].is_none() {
                live.push((r, n.end(id) + 1));
            }
        }
    }
    // Scalar constants are immediates in PTX: they take no register.
    let immediate = |v: ValueId| {
        n.owner(v)
            .is_some_and(|op| f.op(op).kind == OpKind::Constant && matches!(f.ty(v), Type::Index | Type::Scalar(_)))
    };
    let ranges = live
        .into_iter()
        .filter(|&(v, _)| !immediate(v))
        .map(|(v, last)| {
            let def = defined_at(v);
            (v, def, last.max(def))
        })
        .collect();
    LiveRanges { n, ranges, read_by_non_dot }
}

fn liveness(f: &Func) -> Liveness {
    let LiveRanges { n, ranges, read_by_non_dot } = live_ranges(f);
    let len = n.order.len();
    // Point p + 1 is op p; point 0 is the kernel's entry, where parameters are defined.
    // A value defined at point d and last used at point l is live into the points
    // (d, l] and out of [d, l); the pressure of a point is the larger of the two, so an
    // operand that dies at an op can hand its registers to the op's result (mma
    // accumulates in place).
    let mut live_in = vec![0i64; len + 2];
    let mut live_out = vec![0i64; len + 2];
    let mut intervals: Vec<(ValueId, usize, usize, u32)> = Vec::new();
    // Dot operands read from shared memory are loaded fragment by fragment as the mma
    // loop reaches them (the PTX backend's lazy ldmatrix): one k step of fragments is
    // live at a time, not the whole tile.
    let streamed = |v: ValueId| -> Option<u32> {
        let op = f.op(n.owner(v)?);
        if op.kind != OpKind::LoadShared || op.results.first() != Some(&v) || read_by_non_dot[v.0 as usize] {
            return None;
        }
        streamed_fragment_registers(f.ty(v))
    };
    // A reduction across warps reads the warps' partials of an element it owns back from
    // shared memory and combines them: one register per warp, at the op only.
    for (i, &id) in n.order.iter().enumerate() {
        let op = f.op(id);
        if op.kind != OpKind::Reduce {
            continue;
        }
        let Some(&src) = op.operands.first() else { continue };
        let Type::Tile(t) = f.ty(src) else { continue };
        let axis = op.int_attr("axis").unwrap_or(0) as usize;
        let slots = t.layout.as_ref().map_or(1, |l| warps_along(l, axis));
        if slots > 1 {
            let read_back = slots as i64;
            live_in[i + 1] += read_back;
            live_in[i + 2] -= read_back;
        }
    }
    // Many values share a type (a kernel's row vectors, its accumulators): count each
    // tile layout's elements once.
    let mut registers_of_type: HashMap<&Type, u32> = HashMap::default();
    for (v, def, last) in ranges {
        let regs = streamed(v).unwrap_or_else(|| {
            let ty = f.ty(v);
            match ty {
                Type::Tile(_) => *registers_of_type.entry(ty).or_insert_with(|| registers_of(ty)),
                _ => registers_of(ty),
            }
        }) as i64;
        if regs == 0 {
            continue;
        }
        add_range(&mut live_in, &mut live_out, def, last, regs);
        intervals.push((v, def, last, regs as u32));
    }
    Liveness { n, intervals, live_in, live_out }
}

/// The warps a tile of `layout` spreads along `axis` (a reduction along it crosses them).
fn warps_along(layout: &crate::ir::Layout, axis: usize) -> u32 {
    use crate::ir::Layout;
    match layout {
        Layout::Blocked { warps_per_cta, .. } => warps_per_cta.get(axis).copied().unwrap_or(1),
        Layout::Mma { warps } => warps.get(axis).copied().unwrap_or(1),
        // A warpgroup's four warps split its rows; `across_n` warpgroups split the columns.
        Layout::Wgmma { warpgroups, across_n } => match axis {
            0 => 4 * (warpgroups / across_n).max(1),
            _ => *across_n,
        },
        Layout::DotOperand { .. } | Layout::Slice { .. } => 1,
    }
}

/// Adds a value of `regs` registers defined at point `def` and last used at `last` to
/// the pressure deltas of [`liveness`].
pub(crate) fn add_range(live_in: &mut [i64], live_out: &mut [i64], def: usize, last: usize, regs: i64) {
    live_in[def + 1] += regs;
    live_in[last + 1] -= regs;
    live_out[def] += regs;
    live_out[last.max(def + 1)] -= regs;
}

/// The pressure at each of the first `points` points of [`add_range`]'s deltas, in
/// program order (registers per thread, with [`BASE_REGISTERS`]).
fn pressures<'a>(live_in: &'a [i64], live_out: &'a [i64], points: usize) -> impl Iterator<Item = (usize, u32)> + 'a {
    let (mut into, mut out_of) = (live_in[0], live_out[0]);
    (0..points).map(move |i| {
        into += live_in[i + 1];
        out_of += live_out[i + 1];
        (i, into.max(out_of).max(0) as u32 + BASE_REGISTERS)
    })
}

/// The highest pressure over the points of [`add_range`]'s deltas.
pub(crate) fn peak_of_deltas(live_in: &[i64], live_out: &[i64], points: usize) -> u32 {
    pressures(live_in, live_out, points).map(|(_, p)| p).max().unwrap_or(BASE_REGISTERS)
}

impl Liveness {
    /// The pressure at every op in program order.
    fn pressures(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        pressures(&self.live_in, &self.live_out, self.n.order.len())
    }
}

/// The peak of [`estimate`] alone: what autotune pruning compares with the limit,
/// without the per-location profile and the named values.
pub fn peak(f: &Func) -> u32 {
    let live = liveness(f);
    peak_of_deltas(&live.live_in, &live.live_out, live.n.order.len())
}

/// Estimates per-thread registers of GPU Tile IR.
pub fn estimate(f: &Func) -> RegisterEstimate {
    estimate_with(f, true)
}

/// [`estimate`] without the per-location profile, which only the editors show: the
/// lints of every kernel of a file need the peak and the values live there.
pub fn estimate_without_profile(f: &Func) -> RegisterEstimate {
    estimate_with(f, false)
}

fn estimate_with(f: &Func, profile: bool) -> RegisterEstimate {
    let live = liveness(f);
    let n = &live.n;
    if n.order.is_empty() {
        return RegisterEstimate { peak: BASE_REGISTERS, ..Default::default() };
    }
    let mut per_loc: Vec<(Loc, u32)> = Vec::new();
    let mut slot_of: HashMap<&Loc, usize> = HashMap::default();
    let (mut peak, mut peak_at) = (0u32, 0usize);
    for (i, pressure) in live.pressures() {
        if pressure > peak {
            peak = pressure;
            peak_at = i;
        }
        if !profile {
            continue;
        }
        let loc = &f.op(n.order[i]).loc;
        match slot_of.get(loc) {
            Some(&slot) => per_loc[slot].1 = per_loc[slot].1.max(pressure),
            None => {
                slot_of.insert(loc, per_loc.len());
                per_loc.push((loc.clone(), pressure));
            }
        }
    }
    // The three largest values live at the peak (ties by name); only those are described.
    let mut at_peak: Vec<(u32, SmolStr, ValueId)> = live
        .intervals
        .iter()
        .filter(|(_, s, e, _)| *s <= peak_at + 1 && peak_at < *e)
        .map(|&(v, _, _, regs)| (regs, value_name(f, v), v))
        .collect();
    at_peak.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    at_peak.truncate(3);
    let largest = at_peak
        .into_iter()
        .map(|(registers, name, v)| LiveValue {
            name,
            registers,
            ty: f.ty(v).to_string(),
            loc: match n.owner(v) {
                Some(op) => f.op(op).loc.clone(),
                None => f.loc.clone(),
            },
        })
        .collect();
    RegisterEstimate { peak, peak_loc: f.op(n.order[peak_at]).loc.clone(), largest, per_loc }
}

/// Whether `outer` (an op) contains the op `inner` in one of its regions.
fn encloses(n: &Numbering, outer: OpId, inner: Option<OpId>) -> bool {
    let Some(mut cursor) = inner else { return false };
    while let Some(p) = n.parent(cursor) {
        if p == outer {
            return true;
        }
        cursor = p;
    }
    false
}

fn value_name(f: &Func, v: ValueId) -> SmolStr {
    f.values[v.0 as usize].name.clone().unwrap_or_else(|| SmolStr::new(format!("%{}", v.0)))
}

#[cfg(test)]
mod tests {
    use tessera_frontend::check::Dim;

    use super::*;
    use crate::ir::{Layout, TileType};

    #[test]
    fn an_accumulator_costs_its_elements_per_thread() {
        // 128x128 f32 over 4 warps in an mma layout: 128 registers (TARGETS.md).
        let acc = Type::Tile(TileType {
            dims: vec![Dim::constant(128), Dim::constant(128)],
            dtype: DType::F32,
            layout: Some(Layout::mma_for(128, 128, 4)),
        });
        assert_eq!(registers_of(&acc), 128);
        // An A fragment of one m16n8k16 (16x16 bf16) is 4 registers per thread.
        let a = Type::Tile(TileType {
            dims: vec![Dim::constant(16), Dim::constant(16)],
            dtype: DType::BF16,
            layout: Some(Layout::DotOperand { op: 0, parent: Box::new(Layout::mma_for(16, 8, 1)), k_width: 2 }),
        });
        assert_eq!(registers_of(&a), 4);
    }
}
