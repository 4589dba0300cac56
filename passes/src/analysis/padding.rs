//! W0606: the padding of a partial tile enters a reduction (and W0608: it is an integer
//! division's divisor).
//!
//! A tile loaded from a view that runs past its tensor's edge (`X[r0:r0 + BM, c0:c0 + BN]`
//! where `BN` need not divide `C`) holds the load's `other` (0 unless given) at the
//! positions past the edge. A reduction over that axis — `tile.reduce` sum, max or min,
//! or the K sum of `tile.dot` — takes those positions in, so its result is right only
//! where what they hold by then is the reduction's neutral value: 0 for a sum (so
//! `sum(x * x)` of a zero-padded `x` is right), -inf for a max, +inf for a min. A max of
//! a zero-padded row of negative values is 0; a softmax's `sum(exp(x - m))` adds
//! `exp(-m)` per padded position. The kernel and its reference share this semantics, so
//! `tessera run` cannot see it: the lint says it.
//!
//! An abstract evaluation over Graph IR, in program order, gives every tile the axes
//! along which it may be padded and what it holds there: a constant, a finite value
//! (data is assumed finite), or unknown. Arithmetic follows IEEE on constants
//! (`-inf - m = -inf`, `exp(-inf) = 0`, `0 * m = 0` for finite `m`); a coordinate tile
//! (`c0 + tile.arange(BN)`) compared `<` a tensor dim (or an int parameter, a valid
//! length) is false past the edge, so
//! `tile.where(that, x, -INF)` holds -inf there; a causal mask hides every key past the
//! last query. Values carried around loops are taken as finite and unpadded.

use tessera_frontend::check::DType;
use tessera_frontend::diagnostics::{Code, Diagnostic};

use super::{range_in, FixRequest, KernelLints, Lint};
use crate::ir::{Attr, Func, Loc, Op, OpId, OpKind, Type, ValueId};

/// What a tile holds at the positions past its tensor's edge.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Pad {
    Known(f64),
    /// Some finite value (computed from data).
    Finite,
    Unknown,
}

/// The most axes a tile's padding is followed on.
const AXES: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Abs {
    /// Per axis, when the tile may run past its tensor's edge along it: what the
    /// positions past the edge hold, and the load whose padding that is.
    axes: [Option<(Pad, OpId)>; AXES],
    /// What the tile holds elsewhere: a constant, or finite data.
    value: Pad,
    /// A coordinate tile: its value grows by one along this axis.
    coord: Option<usize>,
    /// A bool tile that is false where this axis's coordinate is past a tensor dim.
    in_bounds: Option<usize>,
    /// A tensor dim (`tile.dim`), or an int parameter (a valid length: a KV cache's
    /// `idx < L`), cast or splat: a coordinate below it is inside the tensor. A length
    /// past the dim would read past the edge with whole tiles, which is not padding.
    dim: bool,
    /// Integers loaded from a tensor: indices, taken to lie inside the dims they index
    /// (`cols == target` selects one column of the vocabulary, never one past its edge).
    index_data: bool,
    /// The tile's values inside the tensor are never negative (`abs(x)`, `x * x`,
    /// `exp(x)`): a max over them ignores padding that is at most 0, as an int8
    /// quantizer's `row_max(abs(x))` of a zero-padded row does.
    nonneg: bool,
    /// The max or min of a tile over an axis: a row's extreme, which one of its lanes
    /// inside the tensor attains when the data is finite.
    extreme: Option<Extreme>,
    /// A bool tile true at some lane inside the tensor of every row along this axis:
    /// `x == row_max(x)`.
    attained: Option<usize>,
    /// `where(hit, coord, sentinel)` with `hit` attained along the axis and false past
    /// the edge: the lanes past the edge hold the sentinel, which the valid lanes hold
    /// too where they miss.
    pick: Option<Pick>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
struct Extreme {
    /// The tile reduced.
    of: ValueId,
    axis: usize,
    /// `tile.expand_dims` put the axis back, so it lines up with `of` again.
    expanded: bool,
}

/// The argmax idiom: `min(where(x == row_max(x)[:, None], cols, C))` is the first index
/// of a row's max. Past the edge `x` holds `-inf` (`other=-INF`), which is never the max
/// of finite data, so those lanes hold the sentinel `C`; the min is right whenever the
/// sentinel is above every index it competes with (below, for a max: the last index).
#[derive(Clone, Copy, PartialEq, Debug)]
struct Pick {
    axis: usize,
    /// The sentinel lies above every coordinate inside the tensor (a dim, or a constant
    /// at least a bare `arange`'s last value): a min takes no harm from it.
    above: bool,
    /// The sentinel is at most 0, below every coordinate: a max takes no harm from it.
    below: bool,
}

const PLAIN: Abs = Abs {
    axes: [None; AXES],
    value: Pad::Finite,
    coord: None,
    in_bounds: None,
    dim: false,
    index_data: false,
    nonneg: false,
    extreme: None,
    attained: None,
    pick: None,
};

impl Abs {
    /// What the tile holds past the edge along `axis` (its value there if not padded).
    fn at(&self, axis: usize) -> Pad {
        self.axes[axis].map_or(self.value, |(p, _)| p)
    }
}

/// One reduction the padding enters.
#[derive(Clone, Debug)]
pub struct PaddedReduction {
    /// The reduction (`tile.reduce` or `tile.dot`).
    pub at: Loc,
    /// `sum`, `max`, `min`, or `dot` (its K sum).
    pub kind: String,
    /// The load whose partial tile pads.
    pub load: Loc,
    /// The tensor it loads, as written.
    pub tensor: String,
    /// What the padded positions hold when they reach the reduction (`None`: values
    /// computed from the padding).
    pub holds: Option<f64>,
    /// An `other=` for the load (it has none) that makes every reduction of its padding
    /// right: `"-INF"` or `"INF"`.
    pub other_fix: Option<&'static str>,
}

/// What a partial tile's padding reaches in a function: W0606's reductions and W0608's
/// divisors, from one evaluation.
pub struct Padded {
    pub reductions: Vec<PaddedReduction>,
    pub divisors: Vec<PaddedDivisor>,
}

/// Evaluates `f`'s padding once, and again per finding only to try a fix.
pub fn padded(f: &Func) -> Padded {
    let defs = f.definitions();
    let findings = evaluate(f, &defs, None);
    Padded {
        reductions: padded_reductions(f, &defs, &findings.reductions),
        divisors: padded_divisors(f, &defs, &findings.divisors),
    }
}

/// Every reduction of `f` whose input may hold a partial tile's padding there, with a
/// value that is not the reduction's neutral one.
fn padded_reductions(f: &Func, defs: &[Option<OpId>], findings: &[(OpId, OpId, String, Pad)]) -> Vec<PaddedReduction> {
    let mut out = Vec::new();
    for (reduction, origin, kind, holds) in findings {
        let load = f.op(*origin);
        // An `other=` to suggest: the one under which no reduction of this load's padding
        // is wrong any more.
        let other_fix = if load.attr("other").is_none() {
            [(-f64::INFINITY, "-INF"), (f64::INFINITY, "INF")].into_iter().find_map(|(value, text)| {
                let again = evaluate(f, defs, Some((*origin, value)));
                (!again.reductions.iter().any(|(_, o, _, _)| o == origin)).then_some(text)
            })
        } else {
            None
        };
        let tensor = loaded_tensor(f, defs, load);
        out.push(PaddedReduction {
            at: f.op(*reduction).loc.clone(),
            kind: kind.clone(),
            load: load.loc.clone(),
            tensor,
            holds: match holds {
                Pad::Known(v) => Some(*v),
                _ => None,
            },
            other_fix,
        });
    }
    out
}

/// An integer division (`//`, `%`, `/`) whose divisor holds a partial tile's zero
/// padding: those lanes divide by zero, which the interpreter reports as a fault though
/// no result of theirs is ever stored.
#[derive(Clone, Debug)]
pub struct PaddedDivisor {
    /// The division.
    pub at: Loc,
    /// The load whose partial tile pads the divisor.
    pub load: Loc,
    /// The tensor it loads, as written.
    pub tensor: String,
    /// Whether `other=1` on the load (it has none) clears every such division.
    pub other_one_fixes: bool,
}

/// Every integer division of `f` whose divisor may hold a partial tile's zero padding.
fn padded_divisors(f: &Func, defs: &[Option<OpId>], findings: &[(OpId, OpId)]) -> Vec<PaddedDivisor> {
    let mut out = Vec::new();
    for (division, origin) in findings {
        let load = f.op(*origin);
        let other_one_fixes = load.attr("other").is_none()
            && !evaluate(f, defs, Some((*origin, 1.0))).divisors.iter().any(|(_, o)| o == origin);
        out.push(PaddedDivisor {
            at: f.op(*division).loc.clone(),
            load: load.loc.clone(),
            tensor: loaded_tensor(f, defs, load),
            other_one_fixes,
        });
    }
    out
}

/// The name of the tensor a load reads, as written.
fn loaded_tensor(f: &Func, defs: &[Option<OpId>], load: &Op) -> String {
    let view = load.operands.first().and_then(|&v| defining(f, defs, v));
    view.and_then(|v| v.operands.first())
        .and_then(|&t| f.values[t.0 as usize].name.as_deref())
        .unwrap_or("the tensor")
        .to_string()
}

/// The op that defines `v`, from `Func::definitions`.
fn defining<'f>(f: &'f Func, defs: &[Option<OpId>], v: ValueId) -> Option<&'f Op> {
    defs.get(v.0 as usize).copied().flatten().map(|id| f.op(id))
}

/// The padded axes of the tile a view reads: the axes whose extent may not divide the
/// tensor's (a view as wide as its dim, or a constant extent dividing a constant dim,
/// never runs past it).
fn partial_axes(f: &Func, view: &Op) -> u8 {
    let Some(Attr::Dims(sizes)) = view.attr("sizes") else { return 0 };
    let Some(Type::Tensor(t)) = view.operands.first().map(|&v| f.ty(v)) else { return 0 };
    let squeezed: Vec<i64> = match view.attr("squeeze") {
        Some(Attr::Ints(s)) => s.clone(),
        _ => Vec::new(),
    };
    let mut bits = 0u8;
    let mut axis = 0u32;
    for (i, (size, dim)) in sizes.iter().zip(&t.dims).enumerate() {
        if squeezed.contains(&(i as i64)) {
            continue;
        }
        let whole =
            size == dim || matches!((size.as_const(), dim.as_const()), (Some(s), Some(d)) if s > 0 && d % s == 0);
        if !whole && axis < 8 {
            bits |= 1 << axis;
        }
        axis += 1;
    }
    bits
}

fn neutral(kind: &str) -> Option<f64> {
    match kind {
        "sum" | "dot" => Some(0.0),
        "max" => Some(f64::NEG_INFINITY),
        "min" => Some(f64::INFINITY),
        _ => None,
    }
}

/// `op` applied to pads (IEEE on constants; finite data otherwise).
fn apply(kind: OpKind, pads: &[Pad]) -> Pad {
    use Pad::*;
    // Data is finite: 0 times anything the padding became is 0.
    if kind == OpKind::Mul
        && pads.contains(&Known(0.0))
        && !pads.iter().any(|p| matches!(p, Known(v) if !v.is_finite()))
    {
        return Known(0.0);
    }
    if pads.contains(&Unknown) {
        return Unknown;
    }
    if let Some(values) =
        pads.iter().map(|p| if let Known(v) = p { Some(*v) } else { None }).collect::<Option<Vec<f64>>>()
    {
        let (a, b) = (values.first().copied().unwrap_or(0.0), values.get(1).copied().unwrap_or(0.0));
        let v = match kind {
            OpKind::Add => a + b,
            OpKind::Sub => a - b,
            OpKind::Mul => a * b,
            OpKind::Div => a / b,
            OpKind::Max => a.max(b),
            OpKind::Min => a.min(b),
            OpKind::Neg => -a,
            OpKind::Abs => a.abs(),
            OpKind::Floor => a.floor(),
            OpKind::Ceil => a.ceil(),
            OpKind::Round => a.round_ties_even(),
            OpKind::Exp => a.exp(),
            OpKind::Log => a.ln(),
            OpKind::Sqrt => a.sqrt(),
            OpKind::Rsqrt => 1.0 / a.sqrt(),
            OpKind::Tanh => a.tanh(),
            OpKind::Relu => a.max(0.0),
            OpKind::Sigmoid => 1.0 / (1.0 + (-a).exp()),
            OpKind::Cast => a,
            _ => return Finite,
        };
        return if v.is_nan() { Unknown } else { Known(v) };
    }
    // One constant and finite data.
    let known = pads.iter().find_map(|p| if let Known(v) = p { Some(*v) } else { None });
    match (kind, known) {
        (OpKind::Add | OpKind::Sub, Some(v)) if v.is_infinite() => {
            // `inf - m` is inf; `m - inf` is -inf.
            let first_is_known = matches!(pads.first(), Some(Known(_)));
            Known(if kind == OpKind::Sub && !first_is_known { -v } else { v })
        }
        (OpKind::Div, Some(v)) if v == 0.0 && matches!(pads.first(), Some(Known(_))) => Known(0.0),
        (OpKind::Max, Some(v)) if v == f64::NEG_INFINITY => Finite,
        (OpKind::Min, Some(v)) if v == f64::INFINITY => Finite,
        (OpKind::Max | OpKind::Min | OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div, Some(v))
            if v.is_finite() =>
        {
            Finite
        }
        (k, None) if k.is_elementwise() => Finite,
        _ => Unknown,
    }
}

fn join(a: Pad, b: Pad) -> Pad {
    match (a, b) {
        (Pad::Known(x), Pad::Known(y)) if x == y => a,
        (Pad::Finite, Pad::Finite) => Pad::Finite,
        _ => Pad::Unknown,
    }
}

/// The axes with `axis` removed (higher ones move down).
fn drop_axis(axes: [Option<(Pad, OpId)>; AXES], axis: usize) -> [Option<(Pad, OpId)>; AXES] {
    let mut out = [None; AXES];
    let kept = axes.iter().enumerate().filter(|(i, _)| *i != axis).map(|(_, a)| *a);
    for (slot, a) in out.iter_mut().zip(kept) {
        *slot = a;
    }
    out
}

/// The axes with an unpadded one inserted at `axis`.
fn insert_axis(axes: [Option<(Pad, OpId)>; AXES], axis: usize) -> [Option<(Pad, OpId)>; AXES] {
    let mut out = [None; AXES];
    for (i, a) in axes.iter().enumerate() {
        let to = if i >= axis { i + 1 } else { i };
        if to < AXES {
            out[to] = *a;
        }
    }
    out
}

/// What the padding reaches, by load.
#[derive(Default)]
struct Findings {
    /// The reductions it enters: (reduction, load, kind, what it holds there).
    reductions: Vec<(OpId, OpId, String, Pad)>,
    /// The integer divisions that take its 0 as their divisor: (division, load).
    divisors: Vec<(OpId, OpId)>,
}

/// The reductions and integer divisions the padding reaches, with `override_pad`
/// giving one load another `other`.
fn evaluate(f: &Func, defs: &[Option<OpId>], override_pad: Option<(OpId, f64)>) -> Findings {
    let mut abs = vec![PLAIN; f.values.len()];
    for &p in &f.params {
        if matches!(f.ty(p), Type::Index) || matches!(f.ty(p), Type::Scalar(d) if d.is_int()) {
            abs[p.0 as usize].dim = true;
        }
    }
    let mut findings = Findings::default();
    for id in post_order(f) {
        let op = f.op(id);
        let operands: Vec<Abs> = op.operands.iter().map(|&v| abs[v.0 as usize]).collect();
        let operand = |i: usize| operands.get(i).copied().unwrap_or(PLAIN);
        let result = match op.kind {
            OpKind::Constant | OpKind::Full => {
                // `False`/`True` are 0 and 1 (a masked count's `where(inside, x > 0, False)`).
                let v = op.attr("value").and_then(|a| match a {
                    Attr::Bool(b) => Some(f64::from(u8::from(*b))),
                    a => a.as_float(),
                });
                Abs { value: v.map_or(Pad::Finite, Pad::Known), nonneg: v.is_some_and(|v| v >= 0.0), ..PLAIN }
            }
            OpKind::TensorDim => Abs { dim: true, ..PLAIN },
            OpKind::Splat | OpKind::Broadcast | OpKind::ConvertLayout => operand(0),
            // A conversion to an integer may wrap (200.0 is -56 in int8).
            OpKind::Cast => {
                let to_float = op.results.first().is_some_and(|&r| f.ty(r).dtype().is_some_and(|d| d.is_float()));
                Abs { nonneg: operand(0).nonneg && to_float, ..operand(0) }
            }
            OpKind::ExpandDims => {
                let a = operand(0);
                let axis = op.int_attr("axis").unwrap_or(0).clamp(0, AXES as i64) as usize;
                let shift = |x: usize| if x >= axis { x + 1 } else { x };
                // A row's extreme lines up with its tile again once its axis is back.
                let extreme =
                    a.extreme.filter(|e| !e.expanded && e.axis == axis).map(|e| Extreme { expanded: true, ..e });
                Abs {
                    axes: insert_axis(a.axes, axis),
                    in_bounds: a.in_bounds.map(shift),
                    coord: a.coord.map(shift),
                    extreme,
                    attained: a.attained.map(shift),
                    pick: a.pick.map(|p| Pick { axis: shift(p.axis), ..p }),
                    ..a
                }
            }
            OpKind::Transpose => {
                let a = operand(0);
                let flip = |x: usize| if x < 2 { 1 - x } else { x };
                let mut axes = a.axes;
                axes.swap(0, 1);
                Abs {
                    axes,
                    in_bounds: a.in_bounds.map(flip),
                    coord: a.coord.map(flip),
                    extreme: None,
                    attained: None,
                    pick: None,
                    ..a
                }
            }
            OpKind::Arange => Abs { coord: Some(0), ..PLAIN },
            OpKind::Load => {
                let view = op.operands.first().and_then(|&v| defining(f, defs, v));
                let partial = view.map_or(0, |v| partial_axes(f, v));
                let other = match override_pad {
                    Some((load, value)) if load == id => value,
                    _ => op.attr("other").and_then(Attr::as_float).unwrap_or(0.0),
                };
                let mut axes = [None; AXES];
                for (axis, slot) in axes.iter_mut().enumerate() {
                    if partial & (1 << axis) != 0 {
                        *slot = Some((Pad::Known(other), id));
                    }
                }
                let index_data = op.results.first().is_some_and(|&r| match f.ty(r) {
                    Type::Tile(t) => t.dtype.is_int(),
                    Type::Scalar(d) => d.is_int(),
                    _ => false,
                });
                Abs { axes, index_data, ..PLAIN }
            }
            OpKind::Select => {
                let (c, x, y) = (operand(0), operand(1), operand(2));
                let mut axes = [None; AXES];
                for (axis, slot) in axes.iter_mut().enumerate() {
                    let origin = x.axes[axis].or(y.axes[axis]).or(c.axes[axis]).map(|(_, o)| o);
                    *slot = origin.map(|o| {
                        // Past the edge along the axis `c` bounds, the select takes `y`.
                        let pad = match c.at(axis) {
                            _ if c.in_bounds == Some(axis) => y.at(axis),
                            Pad::Known(0.0) => y.at(axis),
                            Pad::Known(1.0) => x.at(axis),
                            _ => join(x.at(axis), y.at(axis)),
                        };
                        (pad, o)
                    });
                }
                let pick =
                    c.attained.filter(|&axis| x.coord == Some(axis) && c.at(axis) == Pad::Known(0.0)).map(|axis| {
                        let (coords, sentinel) = (op.operands[1], op.operands[2]);
                        Pick {
                            axis,
                            above: y.dim || sentinel_tops_arange(f, defs, sentinel, coords),
                            below: matches!(y.value, Pad::Known(v) if v <= 0.0),
                        }
                    });
                Abs { axes, value: join(x.value, y.value), pick, ..PLAIN }
            }
            // A causal mask hides every key past the last query.
            OpKind::CausalMask => {
                let mut s = operand(0);
                if let Some((_, origin)) = s.axes[1] {
                    s.axes[1] = Some((Pad::Known(f64::NEG_INFINITY), origin));
                }
                s
            }
            OpKind::Reduce => {
                let a = operand(0);
                let kind = op.str_attr("kind").unwrap_or("sum");
                let axis = op.int_attr("axis").unwrap_or(0).clamp(0, AXES as i64 - 1) as usize;
                if let Some((pad, origin)) = a.axes[axis] {
                    // A max of values that are never negative ignores padding at most 0.
                    let below_the_data = kind == "max" && a.nonneg && matches!(pad, Pad::Known(p) if p <= 0.0);
                    // On booleans False (0) is the neutral value of a max (an "any"), True of a min.
                    let boolean = op.operands.first().is_some_and(|&v| f.ty(v).dtype() == Some(DType::Bool));
                    let neutral = match (boolean, kind) {
                        (true, "max") => Some(0.0),
                        (true, "min") => Some(1.0),
                        _ => neutral(kind),
                    };
                    // The argmax idiom's sentinel competes with an index some lane holds.
                    let harmless_sentinel = a
                        .pick
                        .is_some_and(|p| p.axis == axis && ((kind == "min" && p.above) || (kind == "max" && p.below)));
                    if !neutral.is_some_and(|n| pad == Pad::Known(n)) && !below_the_data && !harmless_sentinel {
                        findings.reductions.push((id, origin, kind.to_string(), pad));
                    }
                }
                // A reduction of a row past the edge of another axis: some finite value.
                let mut axes = drop_axis(a.axes, axis);
                for slot in axes.iter_mut().flatten() {
                    slot.0 = Pad::Finite;
                }
                let extreme = (kind == "max" || kind == "min")
                    .then(|| op.operands.first().map(|&of| Extreme { of, axis, expanded: false }))
                    .flatten();
                Abs { axes, extreme, ..PLAIN }
            }
            OpKind::Dot => {
                let (a, b) = (operand(0), operand(1));
                if let Some((_, origin)) = a.axes[1].or(b.axes[0]) {
                    // At a padded k: A's value there times B's.
                    let product = apply(OpKind::Mul, &[a.at(1), b.at(0)]);
                    if product != Pad::Known(0.0) {
                        findings.reductions.push((id, origin, "dot".to_string(), product));
                    }
                }
                // A row of A past the edge holding 0 makes a row of 0 (and B's columns).
                let row = |side: Option<(Pad, OpId)>| {
                    side.map(|(p, o)| (if p == Pad::Known(0.0) { Pad::Known(0.0) } else { Pad::Finite }, o))
                };
                let mut axes = [None; AXES];
                axes[0] = row(a.axes[0]);
                axes[1] = row(b.axes[1]);
                Abs { axes, ..PLAIN }
            }
            OpKind::If => {
                for (i, &r) in op.results.iter().enumerate() {
                    let yielded: Vec<Abs> = op
                        .regions
                        .iter()
                        .filter_map(|region| region.ops.last().map(|&y| f.op(y)))
                        .filter(|y| y.kind == OpKind::Yield)
                        .filter_map(|y| y.operands.get(i).map(|&v| abs[v.0 as usize]))
                        .collect();
                    let joined = yielded.into_iter().reduce(|x, y| {
                        let mut axes = [None; AXES];
                        for (axis, slot) in axes.iter_mut().enumerate() {
                            let origin = x.axes[axis].or(y.axes[axis]).map(|(_, o)| o);
                            *slot = origin.map(|o| (join(x.at(axis), y.at(axis)), o));
                        }
                        Abs { axes, value: join(x.value, y.value), ..PLAIN }
                    });
                    abs[r.0 as usize] = joined.unwrap_or(PLAIN);
                }
                continue;
            }
            OpKind::Cmp => {
                let (a, b) = (operand(0), operand(1));
                // `coord < dim` (or `dim > coord`) is false past the edge.
                let bound = match op.str_attr("pred").unwrap_or("") {
                    "lt" | "le" if b.dim => a.coord,
                    "gt" | "ge" if a.dim => b.coord,
                    // `coord == index` past the edge: only for an index out of its range.
                    "eq" if b.index_data => a.coord,
                    "eq" if a.index_data => b.coord,
                    _ => None,
                };
                let mut abs = elementwise(op.kind, &operands);
                // A comparison of two known pads is a known bool (`other=-1.0` then `x > 0`: False).
                // So is one of an infinite pad and finite data (`-inf == row_max(x)`: False).
                let pred = op.str_attr("pred").unwrap_or("");
                let number = |p: Pad, other: Pad| match (p, other) {
                    (Pad::Known(v), _) => Some(v),
                    (Pad::Finite, Pad::Known(o)) if o.is_infinite() => Some(0.0),
                    _ => None,
                };
                for (axis, slot) in abs.axes.iter_mut().enumerate() {
                    let (pa, pb) = (a.at(axis), b.at(axis));
                    if let (Some((pad, _)), Some(x), Some(y)) = (slot.as_mut(), number(pa, pb), number(pb, pa)) {
                        if let Some(holds) = crate::ir::compare_holds(pred, x, y) {
                            *pad = Pad::Known(f64::from(u8::from(holds)));
                        }
                    }
                }
                // `x == row_max(x)[:, None]` holds at the lane that attains the max.
                let extreme_of = |e: Abs, of: Option<&ValueId>| {
                    e.extreme.filter(|e| e.expanded && Some(&e.of) == of).map(|e| e.axis)
                };
                let attained = (pred == "eq")
                    .then(|| extreme_of(b, op.operands.first()).or_else(|| extreme_of(a, op.operands.get(1))))
                    .flatten();
                Abs { in_bounds: bound, attained, ..abs }
            }
            k if k.is_elementwise() => {
                // An integer `//`, `%` or `/` whose divisor is 0 past the edge divides by
                // zero there: the interpreter (and the CPU code) stop with an error.
                let int_division = matches!(k, OpKind::FloorDiv | OpKind::Rem | OpKind::Div)
                    && op.results.first().is_some_and(|&r| f.ty(r).dtype().is_some_and(|d| d.is_int()));
                if int_division {
                    let divisor = operand(1);
                    let zero = (0..AXES).find_map(|axis| match divisor.axes[axis] {
                        Some((Pad::Known(0.0), origin)) => Some(origin),
                        _ => None,
                    });
                    if let Some(origin) = zero {
                        findings.divisors.push((id, origin));
                    }
                }
                // `c0 + arange(BN)` stays a coordinate.
                let coord = match (k, operands.as_slice()) {
                    (OpKind::Add, [x, y]) if y.coord.is_none() && y.axes == [None; AXES] => x.coord,
                    (OpKind::Add, [x, y]) if x.coord.is_none() && x.axes == [None; AXES] => y.coord,
                    _ => None,
                };
                // Never negative: `abs`, `relu`, `exp`, `sqrt`, `sigmoid`, `x * x`, and sums,
                // products, quotients and maxima of such values.
                let square = k == OpKind::Mul && op.operands.first() == op.operands.get(1);
                let nonneg = match k {
                    OpKind::Abs | OpKind::Relu | OpKind::Exp | OpKind::Sqrt | OpKind::Sigmoid => true,
                    OpKind::Mul if square => true,
                    OpKind::Add | OpKind::Mul | OpKind::Div | OpKind::Min => operands.iter().all(|a| a.nonneg),
                    OpKind::Max => operands.iter().any(|a| a.nonneg),
                    _ => false,
                };
                Abs { coord, nonneg, ..elementwise(k, &operands) }
            }
            _ => PLAIN,
        };
        for &r in &op.results {
            abs[r.0 as usize] = result;
        }
    }
    findings
}

/// Whether `sentinel` is at least the last value of `coords`, a bare `tile.arange(n)`
/// (lined up and broadcast): a constant at least `n - 1`, or `n`'s own schedule
/// parameter (`tile.arange(ctx.BN)` against `ctx.BN`).
fn sentinel_tops_arange(f: &Func, defs: &[Option<OpId>], sentinel: ValueId, coords: ValueId) -> bool {
    let source = |mut v: ValueId, through: &[OpKind]| loop {
        match defining(f, defs, v) {
            Some(op) if through.contains(&op.kind) && !op.operands.is_empty() => v = op.operands[0],
            other => return other,
        }
    };
    let Some(arange) = source(coords, &[OpKind::Broadcast, OpKind::ExpandDims, OpKind::ConvertLayout])
        .filter(|op| op.kind == OpKind::Arange)
    else {
        return false;
    };
    let Some(extent) = arange.results.first().and_then(|&r| f.ty(r).dims().first().cloned()) else { return false };
    match source(sentinel, &[OpKind::Splat, OpKind::Broadcast, OpKind::Cast]) {
        Some(op) if matches!(op.kind, OpKind::Constant | OpKind::Full) => {
            let value = op.attr("value").and_then(Attr::as_float);
            value.zip(extent.as_const()).is_some_and(|(v, n)| v >= (n - 1) as f64)
        }
        Some(op) if op.kind == OpKind::SchedParam => op.str_attr("key").is_some_and(|key| extent.as_sym() == Some(key)),
        _ => false,
    }
}

/// The ops of `f`, each after the ops of its regions (an `scf.if`'s results join what
/// its branches yield), in program order otherwise.
fn post_order(f: &Func) -> Vec<OpId> {
    fn visit(f: &Func, region: &crate::ir::Region, out: &mut Vec<OpId>) {
        for &id in &region.ops {
            for r in &f.op(id).regions {
                visit(f, r, out);
            }
            out.push(id);
        }
    }
    let mut out = Vec::with_capacity(f.ops.len());
    visit(f, &f.body, &mut out);
    out
}

/// An elementwise op on abstract tiles: per axis, the op on what each operand holds
/// past the edge there.
fn elementwise(kind: OpKind, operands: &[Abs]) -> Abs {
    let mut axes = [None; AXES];
    for (axis, slot) in axes.iter_mut().enumerate() {
        if let Some(origin) = operands.iter().find_map(|a| a.axes[axis].map(|(_, o)| o)) {
            let pads: Vec<Pad> = operands.iter().map(|a| a.at(axis)).collect();
            *slot = Some((apply(kind, &pads), origin));
        }
    }
    let values: Vec<Pad> = operands.iter().map(|a| a.value).collect();
    Abs { axes, value: apply(kind, &values), ..PLAIN }
}

/// W0606 for every reduction the padding of a partial tile enters (at the reduction,
/// with the load labelled and, where one `other=` fixes it, that keyword as the fix).
pub(super) fn padding_lints(reductions: &[PaddedReduction], name: &str, out: &mut KernelLints) {
    for p in reductions {
        let Some(at) = range_in(&p.at, name) else { continue };
        let what = match p.kind.as_str() {
            "dot" => "the K sum of this `tile.dot`".to_string(),
            kind => format!("this {kind}"),
        };
        let holds = match p.holds {
            Some(v) => format!("{v:?} there"),
            None => "values computed from the padding there".to_string(),
        };
        let neutral = match p.kind.as_str() {
            "max" => "-inf",
            "min" => "inf",
            _ => "0",
        };
        let mut d = Diagnostic::new(
            Code::W0606,
            at,
            format!(
                "the last tile of `{}` may run past the tensor's edge, and {what} takes in its padded positions: \
                 they hold {holds}, not {neutral}, so the result depends on the padding where a dim is not a \
                 multiple of the tile",
                p.tensor
            ),
        )
        .with_label(at, format!("takes in {holds}"))
        .with_note(
            "mask the positions past the edge (`tile.where((c0 + tile.arange(ctx.BN))[None, :] < C, x, -INF)`) or \
             give the load the reduction's neutral value as `other=`",
        );
        if let Some(load) = range_in(&p.load, name) {
            d = d.with_label(load, "a partial tile, padded with the load's `other` (0 unless given)");
        }
        let fix = p.other_fix.zip(range_in(&p.load, name)).map(|(value, call)| {
            (
                format!("pad with `other={value}`"),
                FixRequest::AddKeyword { call, keyword: "other".into(), value: value.into() },
            )
        });
        out.body.push(Lint { diagnostic: d, fix });
    }
}

/// W0608 for every integer division whose divisor holds a partial tile's zero padding
/// (at the division, with the load labelled and `other=1` as the fix where it clears it).
pub(super) fn divisor_padding_lints(divisors: &[PaddedDivisor], name: &str, out: &mut KernelLints) {
    for p in divisors {
        let Some(at) = range_in(&p.at, name) else { continue };
        let mut d = Diagnostic::new(
            Code::W0608,
            at,
            format!(
                "the last tile of `{}` may run past the tensor's edge, where the load pads it with 0, and this \
                 integer division takes that padding as its divisor: those lanes divide by zero, and `tessera run` \
                 stops with a division-by-zero fault although no result of theirs is stored",
                p.tensor
            ),
        )
        .with_label(at, "divides by the padding (0)")
        .with_note("give the load a nonzero `other=` (`other=1`), or mask the divisor past the edge");
        if let Some(load) = range_in(&p.load, name) {
            d = d.with_label(load, "a partial tile, padded with 0");
        }
        let fix = range_in(&p.load, name).filter(|_| p.other_one_fixes).map(|call| {
            (
                "pad with `other=1`".to_string(),
                FixRequest::AddKeyword { call, keyword: "other".into(), value: "1".into() },
            )
        });
        out.body.push(Lint { diagnostic: d, fix });
    }
}
