//! Reductions (`sum`, `mean`, `max`, `min`) over any axes, and softmax over any axis.
//!
//! A reduction views its input with adjacent dims of the same kind merged: alternating
//! runs of kept and reduced dims, `[K0, R0, K1, R1, ..]`. One kernel reduces it in one
//! pass: every kept run but the last is a grid axis with a scalar index (more than two
//! share one grid axis, their indices computed from it), every reduced
//! run but the last a `tile.range` loop with a scalar index, and the last two runs are
//! the tile: `[kept, reduced]` reduced along its rows (`tile.row_sum`), `[reduced, kept]`
//! along its columns (`tile.sum(x, axis=0)`).

use super::*;

/// At most this many grid axes in a reduction kernel: one per kept run, or, with more
/// kept runs, one for all but the tile's.
const MAX_GRID_AXES: usize = 3;

/// `dims` with adjacent dims of the same kind (reduced or kept) multiplied together, as
/// (reduced, extent) runs; the result always ends in a kept and a reduced run (in either
/// order), padded with runs of extent 1 where the reduction has none of one kind.
pub(super) fn runs(dims: &[Dim], axes: &[usize]) -> Vec<(bool, Dim)> {
    let mut out: Vec<(bool, Dim)> = Vec::new();
    for (i, d) in dims.iter().enumerate() {
        let reduced = axes.contains(&i);
        match out.last_mut() {
            Some((r, ext)) if *r == reduced => *ext = ext.mul_plain(d),
            _ => out.push((reduced, d.clone())),
        }
    }
    if !out.iter().any(|(r, _)| *r) {
        out.push((true, Dim::constant(1)));
    }
    if out.len() == 1 {
        out.insert(0, (false, Dim::constant(1)));
    }
    out
}

impl Planner<'_> {
    pub(super) fn reduce_kernel(&mut self, op: &Op, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let x = op.operands[0];
        let dims = self.ty(x).dims().to_vec();
        let rank = dims.len();
        let mut axes: Vec<usize> = match op.attr("axes") {
            Some(Attr::Ints(a)) => {
                let mut axes = Vec::new();
                for &ax in a {
                    let ax = if ax < 0 { ax + rank as i64 } else { ax };
                    match usize::try_from(ax).ok().filter(|&a| a < rank) {
                        Some(a) => axes.push(a),
                        None => return Err(internal(format!("axis {ax} of a rank-{rank} tensor"))),
                    }
                }
                axes
            }
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        axes.dedup();
        let kind = op.str_attr("kind").unwrap_or("sum").to_string();
        let runs = runs(&dims, &axes);
        let k = runs.len();
        let dt = self.ty(x).dtype().unwrap_or(DType::F32);
        let rdt = self.ty(op.results[0]).dtype().unwrap_or(DType::F32);
        let mut sig = Signature::default();
        let xv = self.view(self.host[&x], runs.iter().map(|(_, d)| d.clone()).collect(), &loc);
        let syms: Vec<String> = (0..k).map(|i| format!("D{i}")).collect();
        let quoted = |idx: &mut dyn Iterator<Item = usize>| idx.map(|i| format!("\"{}\"", syms[i])).collect::<Vec<_>>();
        sig.push(format!("X: Tensor[{}, {dt}]", quoted(&mut (0..k)).join(", ")), xv);
        let y = match self.host.get(&op.results[0]) {
            Some(&y) => y,
            None => self.store(op.results[0], &loc)?,
        };
        let kept: Vec<usize> = (0..k).filter(|&i| !runs[i].0).collect();
        let outer_kept: Vec<usize> = kept.iter().copied().filter(|&i| i < k - 2).collect();
        // More kept runs than grid axes: the outer ones share one grid axis `g` (they are
        // adjacent in Y), each index recovered from it.
        let flatten = outer_kept.len() + 1 > MAX_GRID_AXES;
        let yv = if flatten {
            let g = dims_product(&outer_kept.iter().map(|&i| runs[i].1.clone()).collect::<Vec<_>>());
            let tile = kept.last().map(|&i| runs[i].1.clone()).unwrap_or(Dim::constant(1));
            self.view(y, vec![g, tile], &loc)
        } else {
            self.view(y, kept.iter().map(|&i| runs[i].1.clone()).collect(), &loc)
        };
        let y_decl = if flatten {
            format!("\"G\", {}", quoted(&mut kept.last().copied().into_iter()).join(", "))
        } else {
            quoted(&mut kept.iter().copied()).join(", ")
        };
        sig.push(format!("Y: Tensor[{y_decl}, {rdt}]"), yv);
        // `@accum(T)` narrower than f32: the elements are read as `T @accum(T)`, so the
        // partial sums and the running sum are rounded to T at every step.
        let acc_t = match crate::ir::policy::acc(op) {
            Some(t) if crate::ir::policy::rounds_each_step(t) => t,
            _ => DType::F32,
        };
        let read = if acc_t == DType::F32 { "f32".to_string() } else { format!("\"{acc_t} @accum({acc_t})\"") };
        // The tile: `[kept, reduced]` (rows) or `[reduced, kept]` (columns).
        let rows = runs[k - 1].0;
        let (acc_shape, tile_kept, tile_red, axis) = if rows {
            ("(ctx.BM,)", ("t0", "ctx.BM"), ("r0", "ctx.BN"), "1")
        } else {
            ("(ctx.BN,)", ("t0", "ctx.BN"), ("r0", "ctx.BM"), "0")
        };
        let reduce = |f: &str| format!("tile.{f}(x, axis={axis})");
        let count = (0..k).filter(|&i| runs[i].0).map(|i| syms[i].clone()).collect::<Vec<_>>().join(" * ");
        let (init, other, step, finish) = match kind.as_str() {
            "sum" => {
                (format!("tile.zeros({acc_shape}, {acc_t})"), "", format!("acc + {}", reduce("sum")), "acc".to_string())
            }
            "mean" => (
                format!("tile.zeros({acc_shape}, {acc_t})"),
                "",
                format!("acc + {}", reduce("sum")),
                format!("acc / ({count})"),
            ),
            "max" => (
                format!("tile.full({acc_shape}, -INF, f32)"),
                ", other=-INF",
                format!("tile.maximum(acc, {})", reduce("max")),
                "acc".to_string(),
            ),
            "min" => (
                format!("tile.full({acc_shape}, INF, f32)"),
                ", other=INF",
                format!("tile.minimum(acc, {})", reduce("min")),
                "acc".to_string(),
            ),
            other => return unsupported(format!("a `{other}` reduction"), &loc),
        };
        // Loops: kept runs outside (the grid), then the accumulator, then reduced runs.
        let mut text = String::new();
        let _ = write!(
            text,
            "@kernel.schedule(Schedule(block={}, warps=4))\ndef {name}({}):\n    \"\"\"Y = {kind} of X over its reduced runs, accumulated in {acc_t}.\"\"\"\n    ctx = tile.context()\n",
            if rows { "(4, 256)" } else { "(32, 64)" },
            sig.params.join(", ")
        );
        let mut indent = "    ".to_string();
        let index = |i: usize| -> String {
            if i == k - 1 || i == k - 2 {
                let (var, ext) = if runs[i].0 { tile_red } else { tile_kept };
                format!("{var}:{var} + {ext}")
            } else {
                format!("i{i}")
            }
        };
        if flatten {
            let _ = writeln!(text, "{indent}for g in tile.parallel(0, G):");
            indent.push_str("    ");
        } else {
            for &i in &outer_kept {
                let _ = writeln!(text, "{indent}for i{i} in tile.parallel(0, {}):", syms[i]);
                indent.push_str("    ");
            }
        }
        let kept_tile = if rows { k - 2 } else { k - 1 };
        let _ = writeln!(text, "{indent}for t0 in tile.parallel(0, {}, {}):", syms[kept_tile], tile_kept.1);
        indent.push_str("    ");
        if flatten {
            for (j, &i) in outer_kept.iter().enumerate() {
                let inner: Vec<&str> = outer_kept[j + 1..].iter().map(|&l| syms[l].as_str()).collect();
                let mut e = if inner.is_empty() { "g".to_string() } else { format!("g // ({})", inner.join(" * ")) };
                if j > 0 {
                    e = format!("{e} % {}", syms[i]);
                }
                let _ = writeln!(text, "{indent}i{i} = {e}");
            }
        }
        let _ = writeln!(text, "{indent}acc = {init}");
        let body_indent = indent.clone();
        for i in (0..k - 2).filter(|&i| runs[i].0) {
            let _ = writeln!(text, "{indent}for i{i} in tile.range(0, {}):", syms[i]);
            indent.push_str("    ");
        }
        let red_tile = if rows { k - 1 } else { k - 2 };
        let _ = writeln!(text, "{indent}for r0 in tile.range(0, {}, {}):", syms[red_tile], tile_red.1);
        indent.push_str("    ");
        let window = (0..k).map(index).collect::<Vec<_>>().join(", ");
        let _ = writeln!(text, "{indent}x = tile.cast(tile.load(X[{window}]{other}), {read})");
        let _ = writeln!(text, "{indent}acc = {step}");
        let out_window = if flatten {
            format!("g, {}", index(kept_tile))
        } else {
            kept.iter().map(|&i| index(i)).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(text, "{body_indent}Y[{out_window}] = tile.cast({finish}, {rdt})");
        let what = if axes.len() == rank { "every axis".to_string() } else { format!("axes {axes:?}") };
        Ok((text, sig.args, format!("{kind} over {what}")))
    }

    /// Softmax along an axis other than the last: the stdlib column softmax over the view
    /// `[P, L, Q]` (L the axis).
    pub(super) fn softmax_columns(&mut self, op: &Op, name: &str, axis: usize) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let x = op.operands[0];
        let dims = self.ty(x).dims().to_vec();
        let dt = self.ty(x).dtype().unwrap_or(DType::F32);
        let view = vec![dims_product(&dims[..axis]), dims[axis].clone(), dims_product(&dims[axis + 1..])];
        let text = instantiate("softmax.tsr", "stable_softmax_columns", name, dt)?;
        let xv = self.view(self.host[&x], view.clone(), &loc);
        let y = match self.host.get(&op.results[0]) {
            Some(&y) => y,
            None => self.store(op.results[0], &loc)?,
        };
        let yv = self.view(y, view, &loc);
        Ok((text, vec![xv, yv], format!("stdlib stable_softmax_columns ({dt}, axis {axis})")))
    }
}

impl Planner<'_> {
    /// `logsumexp_safe` along any axis: the stdlib `stable_logsumexp` over the view
    /// `[P, L]` when nothing follows the axis, else `stable_logsumexp_columns` over
    /// `[P, L, Q]` (L the axis).
    pub(super) fn logsumexp_kernel(&mut self, op: &Op, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let x = op.operands[0];
        let dims = self.ty(x).dims().to_vec();
        let rank = dims.len() as i64;
        let axis = op.int_attr("axis").unwrap_or(-1);
        let axis = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&axis) {
            return Err(internal(format!("logsumexp over axis {axis} of a rank-{rank} tensor")));
        }
        let axis = axis as usize;
        let dt = self.ty(x).dtype().unwrap_or(DType::F32);
        let (p, l, q) = (dims_product(&dims[..axis]), dims[axis].clone(), dims_product(&dims[axis + 1..]));
        let rows = q.as_const() == Some(1);
        let kernel = if rows { "stable_logsumexp" } else { "stable_logsumexp_columns" };
        let text = instantiate("softmax.tsr", kernel, name, dt)?;
        let (x_view, y_view) =
            if rows { (vec![p.clone(), l], vec![p]) } else { (vec![p.clone(), l, q.clone()], vec![p, q]) };
        let xv = self.view(self.host[&x], x_view, &loc);
        let y = match self.host.get(&op.results[0]) {
            Some(&y) => y,
            None => self.store(op.results[0], &loc)?,
        };
        let yv = self.view(y, y_view, &loc);
        Ok((text, vec![xv, yv], format!("stdlib {kernel} ({dt}, axis {axis})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: i64) -> Dim {
        Dim::constant(n)
    }

    #[test]
    fn runs_merge_adjacent_dims_of_one_kind() {
        let dims = [c(2), c(3), c(5), c(7)];
        assert_eq!(runs(&dims, &[1, 2]), vec![(false, c(2)), (true, c(15)), (false, c(7))]);
        assert_eq!(runs(&dims, &[0, 2]), vec![(true, c(2)), (false, c(3)), (true, c(5)), (false, c(7))]);
        assert_eq!(runs(&dims, &[3]), vec![(false, c(30)), (true, c(7))]);
        // A full reduction gets a kept run of 1 before it; none gets a reduced run after.
        assert_eq!(runs(&dims, &[0, 1, 2, 3]), vec![(false, c(1)), (true, c(210))]);
        assert_eq!(runs(&dims, &[]), vec![(false, c(210)), (true, c(1))]);
        assert_eq!(runs(&[], &[]), vec![(false, c(1)), (true, c(1))]);
    }
}
