//! W0607: a store whose tile window runs past its loop's bound while staying inside its
//! tensor.
//!
//! `for h0 in tile.range(0, H, BN): Y[t0:t0 + BM, h0:h0 + BN] = ...` reaches `H + BN - 1`
//! on its last iteration when `BN` does not divide `H`. Bounds are masked at the
//! tensor's edge, not at the loop's bound, so when the axis goes on past `H` (RoPE's two
//! halves of one `D = 2H` row, a packed QKV output) the last tile overwrites elements
//! that belong to something else: what the kernel computes then depends on the order of
//! its stores, and on the order of its programs once the loop is a grid axis. The
//! kernel and its f64 reference share those semantics, so `tessera run` says `correct`
//! either way: the lint says it.
//!
//! On Graph IR: a store's window `iv + o : iv + o + step` of a loop `for iv in (lo, hi,
//! step)`, with the extent the loop's step and `o` loop-invariant, whose end `hi + o`
//! is provably inside the tensor's axis: the dim minus the end is a positive polynomial
//! (`H` of a `2*H` axis), or another window (load or store) of the same tensor in the
//! same loop starts at or past the end (RoPE's second half at `H + h0`), or the offset is
//! a multiple of the bound by an outer loop's variable (`h*D + d0` over the heads of a
//! packed `[T, H*D]` row: the last tile of every head but the last reaches into the next
//! head). Ends and dims are polynomials of the shape symbols, the schedule's keys, the
//! int parameters and the outer loops' variables; an end the analysis cannot express (a
//! `min`) is not reported, nor an access under a mask (its `mask=`, a masked `if`), nor
//! a constant step that divides a constant trip, nor an end that merely differs from the
//! dim (a loop to `H` over an axis `D`: nothing says the axis is longer). A load is
//! reported where a reduction over the overrunning axis takes in what it read past the
//! bound (a norm over one head of a packed row sums the next head's first columns): its
//! value followed through elementwise arithmetic, casts, transposes and new axes to a
//! `tile.reduce` along that axis or a `tile.dot`'s K, stopping at a `tile.where`
//! (a mask). What a load reads past the bound otherwise reaches the positions a store
//! clips (`Y[.., f0:f0 + BN]` of a `[T, F]` output).

use tessera_frontend::check::Dim;
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::text::TextRange;

use super::{range_in, KernelLints, Lint};
use crate::ir::{Attr, Func, Loc, OpId, OpKind, Type, ValueId};

/// A window whose last tile runs past its loop's bound.
#[derive(Clone, Debug)]
pub struct Overrun {
    /// The `tile.store` of the window, or the `tile.load` whose value a reduction takes in.
    pub at: Loc,
    /// For a load, the reduction over the overrunning axis (`sum`, `max`, `dot`) and where.
    pub reduced_by: Option<(String, Loc)>,
    /// The tensor, as written, and the axis the window runs along.
    pub tensor: String,
    pub axis: usize,
    /// The tensor's dim there.
    pub dim: Dim,
    /// Where the window's last tile should stop (`hi + o`), and how far it reaches
    /// (`hi + o + step - 1` when the step does not divide the trip).
    pub bound: Dim,
    pub step: Dim,
    /// The loop's trip, `hi - lo`.
    pub trip: Dim,
    /// The loop and its variable.
    pub loop_at: Loc,
    pub variable: String,
    /// A mask of the window's positions inside the loop's bound, as source
    /// (`(h0 + tile.arange(ctx.BN))[None, :] < H`).
    pub mask: String,
    /// The window's loop-invariant offset (`H`, `h*D`).
    pub offset: Dim,
}

/// Every unmasked window of `f` that runs past its loop's bound inside its tensor.
pub fn overrunning_windows(f: &Func) -> Vec<Overrun> {
    let defs = f.definitions();
    // The loop whose variable each region argument is, and each op's parent.
    let loop_of = f.loop_variables();
    let parent = parent_ops(f);
    // Outer loops' variables stand for themselves (`h` of `h*D + d0`).
    let loop_variable_names: Vec<String> = (0..f.values.len())
        .filter(|&v| loop_of[v].is_some())
        .filter_map(|v| f.values[v].name.as_deref().map(str::to_string))
        .collect();
    let symbolic = |v: ValueId| symbolic_value(f, &defs, &loop_of, v);
    // Who reads each value: made once, at the first load whose reductions are followed.
    let mut users: Option<Vec<Vec<OpId>>> = None;
    // Every window of a loop variable: (tensor, loop, axis, offset), and the candidates.
    let mut windows: Vec<(ValueId, OpId, usize, Dim)> = Vec::new();
    let mut candidates: Vec<(ValueId, OpId, Overrun)> = Vec::new();
    for id in f.walk() {
        let access = f.op(id);
        // Loads count as windows (a second half read at `H + h0` says the axis goes on);
        // they are reported where a reduction takes in what they read past the bound.
        let store = match access.kind {
            OpKind::Load if access.operands.len() == 1 => false,
            OpKind::Store if access.operands.len() == 2 => true,
            _ => continue,
        };
        if under_a_masked_if(f, &parent, id) {
            continue;
        }
        let Some(view) = access.operands.first().and_then(|&v| defs[v.0 as usize]).map(|d| f.op(d)) else {
            continue;
        };
        if view.kind != OpKind::View {
            continue;
        }
        let Some(Attr::Dims(sizes)) = view.attr("sizes") else { continue };
        let Some(&tensor) = view.operands.first() else { continue };
        let Type::Tensor(t) = f.ty(tensor) else { continue };
        let squeezed: Vec<i64> = match view.attr("squeeze") {
            Some(Attr::Ints(s)) => s.clone(),
            _ => Vec::new(),
        };
        let tile_axes: Vec<usize> = (0..sizes.len()).filter(|i| !squeezed.contains(&(*i as i64))).collect();
        for (axis, (&start, (size, dim))) in view.operands[1..].iter().zip(sizes.iter().zip(&t.dims)).enumerate() {
            let Some(position) = tile_axes.iter().position(|&a| a == axis) else { continue };
            let Some((iv, offset)) = variable_plus_offset(f, &defs, &loop_of, start) else { continue };
            // The access's own loop variable is not an offset.
            if offset.symbols().iter().any(|s| Some(s.as_str()) == f.values[iv.0 as usize].name.as_deref()) {
                continue;
            }
            let Some(l) = loop_of[iv.0 as usize] else { continue };
            let the_loop = f.op(l);
            // `scf.for` operands: lo, hi, step, then the carried values' initial ones.
            let [lo, hi, step] = the_loop.operands[..the_loop.operands.len().min(3)] else { continue };
            let (Some(lo), Some(hi), Some(step)) = (symbolic(lo), symbolic(hi), symbolic(step)) else { continue };
            // A window of one element per iteration never leaves the loop's range.
            if &step != size || step.as_const() == Some(1) {
                continue;
            }
            windows.push((tensor, l, axis, offset.clone()));
            let reduced_by = if store {
                None
            } else {
                let users = users.get_or_insert_with(|| f.users());
                match reduction_over(f, users, access.results[0], position) {
                    Some(r) => Some(r),
                    None => continue,
                }
            };
            let bound = hi.add(&offset);
            if &bound == dim {
                continue;
            }
            // A constant step that divides a constant trip never leaves it.
            if let (Some(trip), Some(s)) = (hi.sub(&lo).as_const(), step.as_const()) {
                if s > 0 && trip % s == 0 {
                    continue;
                }
            }
            let variable = f.values[iv.0 as usize].name.as_deref().unwrap_or("the loop variable").to_string();
            let mask = mask_text(&variable, &step, &hi, position, tile_axes.len());
            candidates.push((
                tensor,
                l,
                Overrun {
                    at: access.loc.clone(),
                    reduced_by,
                    offset: offset.clone(),
                    tensor: f.values[tensor.0 as usize].name.as_deref().unwrap_or("the tensor").to_string(),
                    axis,
                    dim: dim.clone(),
                    trip: hi.sub(&lo),
                    bound,
                    step,
                    loop_at: the_loop.loc.clone(),
                    variable,
                    mask,
                },
            ));
        }
    }
    candidates
        .into_iter()
        .filter(|(tensor, l, o)| {
            let another_window_starts_past_the_end = windows.iter().any(|(t, wl, axis, offset)| {
                t == tensor && wl == l && *axis == o.axis && offset.sub(&o.bound).as_const().is_some_and(|c| c >= 0)
            });
            // Segments of the bound's length, one per value of an outer loop's variable:
            // every segment but the last has a next one the tile reaches into.
            let trip = o.trip.clone();
            let segments = trip.as_const().is_none_or(|t| t > 0)
                && o.offset.modulo(&trip) == Some(Dim::constant(0))
                && o.offset.floor_div(&trip).is_some_and(|q| {
                    q.symbols().iter().any(|s| loop_variable_names.contains(s)) && q.as_const().is_none()
                });
            another_window_starts_past_the_end || is_positive(&o.dim.sub(&o.bound)) || segments
        })
        .map(|(_, _, o)| o)
        .collect()
}

/// The reduction over tile axis `axis` of `v` that takes in its values, if any: `v`
/// followed through elementwise arithmetic, casts, broadcasts, transposes and new axes to
/// a `tile.reduce` along that axis (its kind and place) or a `tile.dot` whose K it is
/// (`"dot"`). A `tile.where` stops it: a mask may hide the positions past the bound.
/// `users` is [`Func::users`].
fn reduction_over(f: &Func, users: &[Vec<OpId>], v: ValueId, axis: usize) -> Option<(String, Loc)> {
    let rank = |v: ValueId| f.ty(v).dims().len() as i64;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(v, axis)];
    while let Some((v, axis)) = stack.pop() {
        if !seen.insert((v, axis)) {
            continue;
        }
        for &u in &users[v.0 as usize] {
            let op = f.op(u);
            let Some(&result) = op.results.first() else { continue };
            match op.kind {
                OpKind::Reduce => {
                    let a = op.int_attr("axis").unwrap_or(0);
                    if a.rem_euclid(rank(v).max(1)) == axis as i64 {
                        return Some((op.str_attr("kind").unwrap_or("sum").to_string(), op.loc.clone()));
                    }
                }
                OpKind::Dot => {
                    let k_axis = if op.operands.first() == Some(&v) { 1 } else { 0 };
                    if op.operands[..2.min(op.operands.len())].contains(&v) && axis == k_axis {
                        return Some(("dot".to_string(), op.loc.clone()));
                    }
                }
                OpKind::Select => {}
                OpKind::Transpose => stack.push((result, if axis < 2 { 1 - axis } else { axis })),
                OpKind::ExpandDims => {
                    let at = op.int_attr("axis").unwrap_or(0).max(0) as usize;
                    stack.push((result, if axis >= at { axis + 1 } else { axis }));
                }
                OpKind::Cast | OpKind::ConvertLayout | OpKind::Broadcast => stack.push((result, axis)),
                k if k.is_elementwise() => stack.push((result, axis)),
                _ => {}
            }
        }
    }
    None
}

/// A non-zero polynomial with positive coefficients only: positive for every value of
/// its symbols (sizes, schedule keys), so the dim it is the excess of is longer.
fn is_positive(d: &Dim) -> bool {
    let terms = d.monomials();
    !terms.is_empty() && terms.iter().all(|(_, c)| *c > 0)
}

/// `(iv + tile.arange(ctx.BN))[None, :] < H`: the coordinates of a window's `position`
/// among `rank` tile axes that lie below the loop's bound `hi`.
fn mask_text(variable: &str, step: &Dim, hi: &Dim, position: usize, rank: usize) -> String {
    let extent = match step.as_sym() {
        Some(key) => format!("ctx.{key}"),
        None => step.to_string(),
    };
    let coordinates = format!("{variable} + tile.arange({extent})");
    let coordinates = if rank <= 1 {
        coordinates
    } else {
        let axes: Vec<&str> = (0..rank).map(|a| if a == position { ":" } else { "None" }).collect();
        format!("({coordinates})[{}]", axes.join(", "))
    };
    format!("{coordinates} < {hi}")
}

/// Whether an op is inside an `if` on a bool tile (a masked region: its stores are
/// masked, its loads read 0 where the mask is false).
/// The op whose region holds each op (`None` at the top level).
pub(super) fn parent_ops(f: &Func) -> Vec<Option<OpId>> {
    let mut parent: Vec<Option<OpId>> = vec![None; f.ops.len()];
    for id in f.walk() {
        for region in &f.op(id).regions {
            for &inner in &region.ops {
                parent[inner.0 as usize] = Some(id);
            }
        }
    }
    parent
}

pub(super) fn under_a_masked_if(f: &Func, parent: &[Option<OpId>], op: OpId) -> bool {
    let mut cursor = parent[op.0 as usize];
    while let Some(p) = cursor {
        let outer = f.op(p);
        if outer.kind == OpKind::If && outer.operands.first().is_some_and(|&c| matches!(f.ty(c), Type::Tile(_))) {
            return true;
        }
        cursor = parent[p.0 as usize];
    }
    false
}

/// `v` as `iv + o`: a loop variable plus a loop-invariant offset the analysis can express.
pub(super) fn variable_plus_offset(
    f: &Func,
    defs: &[Option<OpId>],
    loop_of: &[Option<OpId>],
    v: ValueId,
) -> Option<(ValueId, Dim)> {
    if loop_of[v.0 as usize].is_some() {
        return Some((v, Dim::constant(0)));
    }
    let op = f.op(defs[v.0 as usize]?);
    if op.kind != OpKind::Add {
        return None;
    }
    let [a, b] = op.operands[..] else { return None };
    let (iv, other) = match (loop_of[a.0 as usize], loop_of[b.0 as usize]) {
        (Some(_), None) => (a, b),
        (None, Some(_)) => (b, a),
        _ => return None,
    };
    Some((iv, symbolic_value(f, defs, loop_of, other)?))
}

/// An index value as a polynomial ([`Func::index_dim`]), with the schedule's keys (`BN`),
/// the int parameters and the loops' variables standing for themselves by name.
pub(super) fn symbolic_value(f: &Func, defs: &[Option<OpId>], loop_of: &[Option<OpId>], v: ValueId) -> Option<Dim> {
    let named = |v: ValueId| {
        if loop_of[v.0 as usize].is_some() {
            return f.values[v.0 as usize].name.as_deref().map(Dim::sym);
        }
        if let Some(op) = defs[v.0 as usize].map(|d| f.op(d)) {
            return (op.kind == OpKind::SchedParam).then(|| op.str_attr("key").map(Dim::sym)).flatten();
        }
        let is_int = match f.ty(v) {
            Type::Index => true,
            Type::Scalar(d) => d.is_int(),
            _ => false,
        };
        let is_int_param = f.params.contains(&v) && is_int;
        is_int_param.then(|| f.values[v.0 as usize].name.as_deref().map(Dim::sym)).flatten()
    };
    f.index_dim(defs, v, &named)
}

/// W0607 at each access whose window runs past its loop's bound, with the loop labelled.
pub(super) fn overrun_lints(overruns: &[Overrun], name: &str, out: &mut KernelLints) {
    for o in overruns {
        let Some(at) = range_in(&o.at, name) else { continue };
        let mut d = diagnostic(o, at, o.reduced_by.as_ref().map(|(kind, r)| (kind.as_str(), range_in(r, name))));
        if let Some(l) = range_in(&o.loop_at, name) {
            d = d.with_label(l, format!("`{}` runs to the bound", o.variable));
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
}

/// W0607 at a store whose last tile writes past its loop's bound, or (with `read_by`, the
/// reduction's kind and place) at a load whose last tile reads past it into a reduction.
fn diagnostic(o: &Overrun, at: TextRange, read_by: Option<(&str, Option<TextRange>)>) -> Diagnostic {
    let (access, verb, taken, fix) = match read_by {
        Some((kind, _)) => {
            let what = if kind == "dot" { "tile.dot's K sum".to_string() } else { format!("this {kind}") };
            let fix = format!("tile.load(..., mask={}, other=...)` with the reduction's neutral value", o.mask);
            ("load", "reads", format!(", and {what} takes those values in"), fix)
        }
        None => ("store", "writes", String::new(), format!("tile.store(..., mask={})`", o.mask)),
    };
    let mut d = Diagnostic::new(
        Code::W0607,
        at,
        format!(
            "where `{step}` does not divide `{trip}`, the last `{var}` tile of this {access} {verb} `{tensor}`'s dim \
             {axis} past the loop's bound, from `{bound}` up to `{end} - 1`{taken}: that axis is `{dim}` long, so its \
             edge does not stop the tile",
            step = o.step,
            trip = o.trip,
            var = o.variable,
            tensor = o.tensor,
            axis = o.axis,
            bound = o.bound,
            end = o.bound.add(&o.step),
            dim = o.dim,
        ),
    )
    .with_label(at, format!("{verb} past `{}`", o.bound))
    .with_note(format!(
        "mask the positions past the bound (`{fix}), or make the bound a multiple of `{step}`; the f64 reference \
         {verb} the same elements, so `tessera run` cannot tell",
        step = o.step,
    ));
    if let Some((_, Some(r))) = read_by {
        d = d.with_label(r, format!("takes in what it read past `{}`", o.bound));
    }
    d
}
