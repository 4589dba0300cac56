//! Code generation: the Tessera source of generated kernels (fused elementwise bodies,
//! elementwise kernels, matmuls with epilogues) and the plan's Schedule IR.

use super::*;

impl Planner<'_> {
    /// The element type of `v` as a generated kernel declares it: the dtype, with
    /// `@saturate` where it applies (fp8 and integers), so the kernel's fp8 arithmetic
    /// and its stores clamp as the graph's values do.
    pub(super) fn elem_text(&self, v: ValueId) -> String {
        let Type::Tensor(t) = self.ty(v) else { return self.ty(v).dtype().unwrap_or(DType::F32).to_string() };
        let elem = tessera_frontend::check::ElemType { dtype: t.dtype, policies: t.policies.clone() };
        if crate::ir::policy::wants_saturate(&elem) {
            format!("{} @saturate", t.dtype)
        } else {
            t.dtype.to_string()
        }
    }

    pub(super) fn seed(&mut self, loc: &Loc) -> ValueId {
        if let Some(s) = self.seed {
            return s;
        }
        let s =
            self.emit(OpKind::SchedParam, vec![], vec![Type::Index], vec![("key", Attr::Str("seed".into()))], loc)[0];
        self.s.values[s.0 as usize].name = Some("seed".into());
        self.seed = Some(s);
        s
    }

    /// The seed of one dropout stream: `seed * 1000003 + stream + 1`.
    pub(super) fn stream_seed(&mut self, stream: i64, loc: &Loc) -> ValueId {
        let seed = self.seed(loc);
        let k = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(1_000_003))], loc)[0];
        let c = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(stream + 1))], loc)[0];
        let m = self.emit(OpKind::Mul, vec![seed, k], vec![Type::Index], vec![], loc)[0];
        self.emit(OpKind::Add, vec![m, c], vec![Type::Index], vec![], loc)[0]
    }

    /// A zero-copy view of a stored tensor with other dims.
    pub(super) fn view(&mut self, v: ValueId, dims: Vec<Dim>, loc: &Loc) -> ValueId {
        let ty = tensor_with_dims(self.s.ty(v), dims);
        if *self.s.ty(v) == ty {
            return v;
        }
        self.emit(OpKind::Reshape, vec![v], vec![ty], vec![], loc)[0]
    }

    pub(super) fn scalar_param(
        &mut self,
        sig: &mut Signature,
        cache: &mut HashMap<ValueId, String>,
        h: ValueId,
    ) -> String {
        if let Some(n) = cache.get(&h) {
            return n.clone();
        }
        let name = format!("s{}", cache.len());
        let decl = match self.s.ty(h) {
            Type::Index => format!("{name}: int"),
            Type::Scalar(DType::Bool) => format!("{name}: bool"),
            _ => format!("{name}: f32"),
        };
        sig.push(decl, h);
        cache.insert(h, name.clone());
        name
    }

    /// The fused body of an elementwise group (or a matmul's epilogue): one statement
    /// per op, then the stores of the group's outputs. `seeded`: the value (already in
    /// `vars`) computed before the body, e.g. the matmul result.
    pub(super) fn fused_body(
        &mut self,
        g: usize,
        w: &Window,
        sig: &mut Signature,
        vars: &mut HashMap<ValueId, String>,
    ) -> R<String> {
        let group = self.groups[g].clone();
        // `batch`: the flattened batch dims of a batched matmul's epilogue (else rows
        // include every leading dim), and the prefix of every window and signature.
        let (batch, rows, cols) = match w.batch {
            Some(_) if group.dims.len() >= 2 => {
                let n = group.dims.len();
                (Some(dims_product(&group.dims[..n - 2])), group.dims[n - 2].clone(), group.dims[n - 1].clone())
            }
            _ => {
                let (rows, cols) = as_rows_cols(&group.dims);
                (None, rows, cols)
            }
        };
        let (at, of) = match (w.batch, &batch) {
            (Some((var, sym)), Some(_)) => (format!("{var}, "), format!("\"{sym}\", ")),
            _ => (String::new(), String::new()),
        };
        // The full `[.., rows, cols]` view of a tensor of the group's shape.
        let full = |rows: &Dim, cols: &Dim| match &batch {
            Some(b) => vec![b.clone(), rows.clone(), cols.clone()],
            None => vec![rows.clone(), cols.clone()],
        };
        // Random numbers are keyed by the element's (row, col) in the flattened rows.
        let row_coord = match w.batch {
            Some((var, _)) if batch.is_some() => format!("{var} * {} + {}", w.rows, w.row),
            _ => w.row.to_string(),
        };
        let mut out = String::new();
        let mut scalars: HashMap<ValueId, String> = HashMap::new();
        let mut inputs = 0;
        let tile_shape = "(ctx.BM, ctx.BN)";
        let window = format!("{at}{r}:{r} + ctx.BM, {c}:{c} + ctx.BN", r = w.row, c = w.col);
        for &id in &group.ops {
            let op = self.g.op(id).clone();
            let loc = op.loc.clone();
            let result = op.results[0];
            let dt = self.ty(result).dtype().unwrap_or(DType::F32);
            // Operand expressions.
            let mut args = Vec::new();
            for &o in &op.operands {
                if matches!(self.ty(o), Type::Token) {
                    continue;
                }
                let expr = if let Some(v) = vars.get(&o) {
                    v.clone()
                } else if let Some(s) = self.splat.get(&o).cloned() {
                    let odt = self.ty(o).dtype().unwrap_or(DType::F32);
                    match s {
                        Splat::Const(c) => format!("tile.full({tile_shape}, {}, {odt})", float_literal(c)),
                        Splat::Host(h) => {
                            let n = self.scalar_param(sig, &mut scalars, h);
                            format!("tile.full({tile_shape}, {n}, {odt})")
                        }
                    }
                } else if self.is_host(o) {
                    let h = self.host[&o];
                    self.scalar_param(sig, &mut scalars, h)
                } else if op.kind == OpKind::GBroadcast {
                    // A smaller stored tensor broadcast over the window.
                    let stored = self.store(o, &loc)?;
                    let d = self.ty(o).dims().to_vec();
                    let odt = self.elem_text(o);
                    let trimmed: Vec<Dim> = d.iter().skip_while(|x| x.as_const() == Some(1)).cloned().collect();
                    let name = format!("I{inputs}");
                    inputs += 1;
                    if trimmed.is_empty() {
                        let view = self.view(stored, vec![Dim::constant(1)], &loc);
                        sig.push(format!("{name}: Tensor[1, {odt}]"), view);
                        format!("tile.load({name}[0:1])[None, :]")
                    } else if trimmed.len() == 1 && trimmed[0] == cols {
                        let view = self.view(stored, vec![cols.clone()], &loc);
                        sig.push(format!("{name}: Tensor[\"{}\", {odt}]", w.cols), view);
                        format!("tile.load({name}[{c}:{c} + ctx.BN])[None, :]", c = w.col)
                    } else if d.len() == group.dims.len()
                        && d.last().and_then(Dim::as_const) == Some(1)
                        && d[..d.len() - 1] == group.dims[..group.dims.len() - 1]
                    {
                        let mut dims = full(&rows, &cols);
                        dims.pop();
                        let view = self.view(stored, dims, &loc);
                        sig.push(format!("{name}: Tensor[{of}\"{}\", {odt}]", w.rows), view);
                        format!("tile.load({name}[{at}{r}:{r} + ctx.BM])[:, None]", r = w.row)
                    } else if let (Some((var, _)), Some(_)) = (w.batch, &batch) {
                        self.batch_broadcast(o, stored, &group.dims, (&name, var), w, sig, &loc)?
                    } else {
                        return unsupported(
                            format!("broadcasting a {} tensor over {:?} in a fused kernel", self.ty(o), group.dims),
                            &loc,
                        );
                    }
                } else {
                    let stored = self.store(o, &loc)?;
                    let odt = self.elem_text(o);
                    let name = format!("I{inputs}");
                    inputs += 1;
                    let view = self.view(stored, full(&rows, &cols), &loc);
                    sig.push(format!("{name}: Tensor[{of}\"{}\", \"{}\", {odt}]", w.rows, w.cols), view);
                    let v = format!("x{}", vars.len());
                    let _ = writeln!(out, "{}{v} = tile.load({name}[{window}])", w.indent);
                    vars.insert(o, v.clone());
                    v
                };
                args.push(expr);
            }
            let literal = |o: ValueId, this: &Self| match this.splat.get(&o) {
                Some(Splat::Const(c)) if !vars.contains_key(&o) => Some(float_literal(*c)),
                _ => None,
            };
            let a = |i: usize| args.get(i).cloned().unwrap_or_default();
            // Constants go in as literals where an operator allows it (`x * 2.0`).
            let bin = |i: usize, this: &Self| literal(op.operands[i], this).unwrap_or_else(|| a(i));
            let expr = match op.kind {
                OpKind::Add => format!("{} + {}", bin(0, self), bin(1, self)),
                OpKind::Sub => format!("{} - {}", bin(0, self), bin(1, self)),
                OpKind::Mul => format!("{} * {}", bin(0, self), bin(1, self)),
                OpKind::Div => format!("{} / {}", bin(0, self), bin(1, self)),
                OpKind::Pow => format!("{} ** {}", bin(0, self), bin(1, self)),
                OpKind::FloorDiv => format!("{} // {}", bin(0, self), bin(1, self)),
                OpKind::Rem => format!("{} % {}", bin(0, self), bin(1, self)),
                OpKind::Max => format!("tile.maximum({}, {})", a(0), a(1)),
                OpKind::Min => format!("tile.minimum({}, {})", a(0), a(1)),
                OpKind::Neg => format!("-{}", a(0)),
                // A graph function's stochastic cast: its stream's uniforms at the element's
                // (row, col) in the flat window, as the f64 reference draws them.
                OpKind::Cast if op.str_attr(crate::ir::policy::ROUNDING) == Some(crate::ir::policy::STOCHASTIC) => {
                    let stream = op.int_attr("stream").unwrap_or(0);
                    let seed = self.stream_seed(stream, &loc);
                    let seed_name = self.scalar_param(sig, &mut scalars, seed);
                    let saturate = if crate::ir::policy::saturates(&op) { " @saturate" } else { "" };
                    format!(
                        "tile.cast({x}, \"{dt} @stochastic_round{saturate}\", uniform=tile.rand({tile_shape}, {seed_name}, ({}, {})))",
                        row_coord,
                        w.col,
                        x = a(0),
                    )
                }
                OpKind::Cast if crate::ir::policy::saturates(&op) => format!("tile.cast({}, \"{dt} @saturate\")", a(0)),
                OpKind::Cast => format!("tile.cast({}, {dt})", a(0)),
                OpKind::Select => format!("tile.where({}, {}, {})", a(0), a(1), a(2)),
                OpKind::Cmp => {
                    let pred = match op.str_attr("pred").unwrap_or("eq") {
                        "lt" => "<",
                        "le" => "<=",
                        "gt" => ">",
                        "ge" => ">=",
                        "ne" => "!=",
                        _ => "==",
                    };
                    format!("{} {pred} {}", bin(0, self), bin(1, self))
                }
                OpKind::GBroadcast => a(0),
                // `arange(n)` (rank 1: one row): each element's column.
                OpKind::Iota => format!(
                    "tile.cast(tile.broadcast(tile.arange(ctx.BN)[None, :] + {c}, {tile_shape}), {dt})",
                    c = w.col
                ),
                OpKind::Dropout => {
                    let stream = op.int_attr("stream").unwrap_or(0);
                    let seed = self.stream_seed(stream, &loc);
                    let seed_name = self.scalar_param(sig, &mut scalars, seed);
                    format!(
                        "tile.cast(tile.where(tile.rand({tile_shape}, {seed_name}, ({}, {})) >= {p}, tile.cast({x}, f32) / (1.0 - {p}), 0.0), {dt})",
                        row_coord,
                        w.col,
                        p = a(1),
                        x = a(0),
                    )
                }
                OpKind::Random => {
                    // `ir::rand::normal`, statement for statement.
                    let seed = match args.first() {
                        Some(s) => s.clone(),
                        None => {
                            let stream = op.int_attr("stream").unwrap_or(0);
                            let seed = self.stream_seed(stream, &loc);
                            self.scalar_param(sig, &mut scalars, seed)
                        }
                    };
                    let n = format!("n{}", vars.len());
                    let i = w.indent;
                    let coords = format!("{row_coord}, {}", w.col);
                    let _ = writeln!(out, "{i}{n}_u1 = tile.rand({tile_shape}, {seed}, (0, {coords}))");
                    let _ = writeln!(out, "{i}{n}_u2 = tile.rand({tile_shape}, {seed}, (1, {coords}))");
                    let _ = writeln!(out, "{i}{n}_r = tile.sqrt(-2.0 * tile.log(1.0 - {n}_u1))");
                    let _ = writeln!(out, "{i}{n}_y = ({n}_u2 - 0.5) * {:?}", crate::ir::rand::PI_F32);
                    let _ = writeln!(out, "{i}{n}_s = {n}_y * {n}_y");
                    let taylor = crate::ir::rand::COS_TAYLOR;
                    let mut poly = format!("{:?}", taylor[6]);
                    for k in taylor[..6].iter().rev() {
                        poly = format!("{k:?} + {n}_s * ({poly})");
                    }
                    let _ = writeln!(out, "{i}{n}_c = 1.0 + {n}_s * ({poly})");
                    format!("tile.cast({n}_r * (1.0 - 2.0 * ({n}_c * {n}_c)), {dt})")
                }
                k if k.is_unary_math() => {
                    let name = k.name().rsplit('.').next().unwrap_or("");
                    format!("tile.{name}({})", a(0))
                }
                k => return unsupported(format!("`{}` in a fused elementwise kernel", k.name()), &loc),
            };
            let v = format!("v{}", vars.len());
            let _ = writeln!(out, "{}{v} = {expr}", w.indent);
            vars.insert(result, v);
        }
        for (k, &o) in group.outputs.iter().enumerate() {
            let loc = self.g.loc.clone();
            let buffer = self.host[&o];
            let odt = self.ty(o).dtype().unwrap_or(DType::F32);
            let value = match vars.get(&o) {
                Some(v) => v.clone(),
                None => match self.splat.get(&o).or_else(|| self.fills.get(&o)).cloned() {
                    Some(Splat::Const(c)) => format!("tile.full({tile_shape}, {}, {odt})", float_literal(c)),
                    Some(Splat::Host(h)) => {
                        let n = self.scalar_param(sig, &mut scalars, h);
                        format!("tile.full({tile_shape}, {n}, {odt})")
                    }
                    None => return Err(internal(format!("output %{} of group {g} has no value", o.0))),
                },
            };
            let view = self.view(buffer, full(&rows, &cols), &loc);
            let odt = self.elem_text(o);
            sig.push(format!("O{k}: Tensor[{of}\"{}\", \"{}\", {odt}]", w.rows, w.cols), view);
            let _ = writeln!(out, "{}O{k}[{window}] = {value}", w.indent);
        }
        Ok(out)
    }

    pub(super) fn elementwise_kernel(&mut self, g: usize, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let mut sig = Signature::default();
        let mut vars = HashMap::new();
        // A broadcast the flat `[rows, cols]` window cannot load (batch dims that
        // broadcast): one tile program per matrix of the leading dims, as in a batched
        // matmul's epilogue.
        let batched = self.needs_batch_window(g);
        let w = Window {
            row: "r0",
            col: "c0",
            rows: "R",
            cols: "C",
            indent: if batched { "                " } else { "            " },
            batch: if batched { Some(("c", "BC")) } else { None },
        };
        let body = self.fused_body(g, &w, &mut sig, &mut vars)?;
        let dims = &self.groups[g].dims;
        let rows = if batched { dims[dims.len() - 2].clone() } else { as_rows_cols(dims).0 };
        let block = if rows.as_const() == Some(1) { "(1, 1024)" } else { "(16, 128)" };
        let (outer, i) = if batched { ("    for c in tile.parallel(0, BC):\n", "    ") } else { ("", "") };
        let text = format!(
            "@kernel.schedule(Schedule(block={block}, warps=4))\ndef {name}({}):\n    ctx = tile.context()\n{outer}{i}    for r0 in tile.parallel(0, R, ctx.BM):\n{i}        for c0 in tile.parallel(0, C, ctx.BN):\n{body}",
            sig.params.join(", ")
        );
        let summary = self.describe(g);
        Ok((text, sig.args, format!("fused elementwise: {summary}")))
    }

    /// Whether a broadcast input of group `g` needs the batched window: its leading dims
    /// broadcast, which the flat `[rows, cols]` window (a scalar, a row of `cols`, or a
    /// column of the group's leading dims) cannot load.
    fn needs_batch_window(&self, g: usize) -> bool {
        let group = &self.groups[g];
        let n = group.dims.len();
        if n < 3 {
            return false;
        }
        let one = Some(1);
        group.ops.iter().any(|&id| {
            let op = self.g.op(id);
            if op.kind != OpKind::GBroadcast {
                return false;
            }
            let o = op.operands[0];
            if self.is_host(o) || self.splat.contains_key(&o) {
                return false;
            }
            let d = self.ty(o).dims();
            let trimmed: Vec<&Dim> = d.iter().skip_while(|x| x.as_const() == one).collect();
            let flat = trimmed.is_empty()
                || (trimmed.len() == 1 && *trimmed[0] == group.dims[n - 1])
                || (d.len() == n && d[n - 1].as_const() == one && d[..n - 1] == group.dims[..n - 1]);
            !flat
        })
    }

    pub(super) fn describe(&self, g: usize) -> String {
        let names: Vec<&str> =
            self.groups[g].ops.iter().map(|&id| self.g.op(id).kind.name().rsplit('.').next().unwrap_or("")).collect();
        if names.is_empty() {
            "fill".into()
        } else {
            names.join(", ")
        }
    }

    /// Drops the ops of a group that no output needs (values only read for their dims).
    pub(super) fn prune(&mut self, g: usize) {
        let group = &self.groups[g];
        let mut needed: std::collections::HashSet<ValueId> = group.outputs.iter().copied().collect();
        let mut keep = Vec::new();
        for &id in group.ops.iter().rev() {
            let op = self.g.op(id);
            if op.results.iter().any(|r| needed.contains(r)) {
                needed.extend(op.operands.iter().copied());
                keep.push(id);
            }
        }
        keep.reverse();
        self.groups[g].ops = keep;
    }

    /// `sched.collective_start` of the collective `id` on its operands' buffers (emitted,
    /// not yet placed): its token and the buffers.
    fn collective_start(&mut self, id: OpId) -> (ValueId, Vec<ValueId>) {
        let op = self.g.op(id).clone();
        let buffers: Vec<ValueId> =
            op.operands.iter().filter(|&&o| !self.is_host(o)).filter_map(|o| self.host.get(o).copied()).collect();
        let mut attrs = vec![("kind", Attr::Str(SmolStr::new(op.kind.name().trim_start_matches("dist."))))];
        for key in ["axis", "explicit", "bytes", "algorithm", "time_us", "from", "to"] {
            if let Some(a) = op.attr(key) {
                attrs.push((key, a.clone()));
            }
        }
        let token = self.s.new_value(Type::Token, None);
        self.s.ops.push(Op {
            kind: OpKind::CollectiveStart,
            operands: buffers.clone(),
            results: vec![token],
            attrs,
            regions: vec![],
            loc: op.loc.clone(),
        });
        (token, buffers)
    }

    /// The launch order with the collectives placed for overlap. Each collective starts as
    /// early as its buffers allow (after the last kernel before it that touches them, and
    /// after an earlier collective on the same buffers is complete) and is waited for as
    /// late as they allow (before the first kernel after it that
    /// touches them, else before the return). A buffer is touched by a launch that reads or
    /// writes it or a view of it. The wait names the kernels that run meanwhile (`overlaps`).
    fn with_waits(&mut self, launches: Vec<OpId>, started: &[(ValueId, Vec<ValueId>, usize)]) -> Vec<OpId> {
        let views_of = |s: &Func, buffers: &[ValueId]| -> Vec<ValueId> {
            let mut all = buffers.to_vec();
            for op in &s.ops {
                if op.kind == OpKind::Reshape && op.operands.first().is_some_and(|o| all.contains(o)) {
                    all.extend(op.results.iter().copied());
                }
            }
            all
        };
        // The kernel launches alone, and how many come before each collective.
        let kernels: Vec<OpId> = launches.iter().copied().filter(|&l| self.s.op(l).kind == OpKind::Kernel).collect();
        let kernels_before: Vec<usize> = (0..launches.len())
            .map(|at| launches[..at].iter().filter(|&&l| self.s.op(l).kind == OpKind::Kernel).count())
            .collect();
        // Per slot (before kernel k, or before the return): the starts and the waits
        // placed there, each with its buffers.
        let mut starts: Vec<Vec<(OpId, Vec<ValueId>)>> = vec![Vec::new(); kernels.len() + 1];
        let mut waits: Vec<Vec<(OpId, OpId, Vec<ValueId>)>> = vec![Vec::new(); kernels.len() + 1];
        // (first kernel it must precede, buffers) of each placed one.
        let mut placed: Vec<(usize, Vec<ValueId>)> = Vec::new();
        let views: Vec<Vec<ValueId>> = started.iter().map(|(_, buffers, _)| views_of(&self.s, buffers)).collect();
        for (i, (token, _, at)) in started.iter().enumerate() {
            let all = views[i].clone();
            let touches = |k: usize| self.s.op(kernels[k]).operands.iter().any(|o| all.contains(o));
            let here = kernels_before[*at];
            let mut lo = (0..here).rev().find(|&k| touches(k)).map_or(0, |k| k + 1);
            // One on the same buffers must be complete first. Others may start in another
            // order than Graph IR's token chain gives: every device runs this same
            // schedule, so they all issue the collectives in one order, as NCCL needs.
            for (phi, pbufs) in &placed {
                if pbufs.iter().any(|b| all.contains(b)) {
                    lo = lo.max(*phi);
                }
            }
            // Complete before a later collective on the same buffers starts (one that
            // reduces this one's result), at the latest where that one stands.
            let next_collective = started[i + 1..]
                .iter()
                .zip(&views[i + 1..])
                .filter(|(_, later)| later.iter().any(|b| all.contains(b)))
                .map(|((_, _, later_at), _)| kernels_before[*later_at])
                .min();
            let first_kernel = (here..kernels.len()).find(|&k| touches(k)).unwrap_or(kernels.len());
            let hi = first_kernel.min(next_collective.unwrap_or(kernels.len())).max(lo);
            let overlaps: Vec<String> =
                kernels[lo..hi].iter().filter_map(|&k| self.s.op(k).str_attr("callee").map(str::to_string)).collect();
            let start_op = launches[*at];
            let loc = self.s.op(start_op).loc.clone();
            self.s.ops.push(Op {
                kind: OpKind::CollectiveWait,
                operands: vec![*token],
                results: vec![],
                attrs: if overlaps.is_empty() {
                    vec![]
                } else {
                    vec![("overlaps", Attr::Str(SmolStr::new(overlaps.join(", "))))]
                },
                regions: vec![],
                loc,
            });
            starts[lo].push((start_op, all.clone()));
            waits[hi].push((OpId(self.s.ops.len() as u32 - 1), start_op, all.clone()));
            placed.push((hi, all));
        }
        let mut ops = Vec::new();
        let mut issued: Vec<OpId> = Vec::new();
        for k in 0..=kernels.len() {
            // In a slot, a wait goes before a start only when that start works on its
            // buffers (and after its own start: two collectives on one buffer may start
            // and complete in one slot); the others after the starts, so that more
            // collectives are in flight.
            let mut pending = std::mem::take(&mut waits[k]);
            for (start, started) in &starts[k] {
                let (before, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, own, bufs)| {
                    own != start && issued.contains(own) && started.iter().any(|b| bufs.contains(b))
                });
                ops.extend(before.into_iter().map(|(w, _, _)| w));
                pending = rest;
                ops.push(*start);
                issued.push(*start);
            }
            ops.extend(pending.into_iter().map(|(w, _, _)| w));
            if let Some(&l) = kernels.get(k) {
                ops.push(l);
            }
        }
        ops
    }

    pub(super) fn finish(mut self) -> R<GraphPlan> {
        let fname = self.g.name.to_string();
        let mut source = format!(
            "# Generated by tessera: the kernels of the graph function `{fname}`.\n# Do not edit: change `{fname}` and these are generated again.\nfrom tessera import *\n"
        );
        let mut kernels = Vec::new();
        let mut launches = Vec::new();
        // Started collectives: their token, the buffers they work on, and where they start.
        let mut started: Vec<(ValueId, Vec<ValueId>, usize)> = Vec::new();
        for g in 0..self.groups.len() {
            if let Kind::Collective(id) = self.groups[g].kind {
                let (token, buffers) = self.collective_start(id);
                launches.push(OpId(self.s.ops.len() as u32 - 1));
                started.push((token, buffers, launches.len() - 1));
                continue;
            }
            if self.groups[g].outputs.is_empty() {
                continue;
            }
            self.prune(g);
            // A kernel of the function's own file keeps its name (`kernel_call`).
            let user = self.user_kernel(g);
            let label = match &self.groups[g].kind {
                Kind::Copy { .. } => "copy".to_string(),
                Kind::Elementwise => "elementwise".to_string(),
                Kind::Matmul { .. } => "matmul".to_string(),
                Kind::Single(id) => self.g.op(*id).kind.name().rsplit('.').next().unwrap_or("op").to_string(),
                Kind::Collective(_) => unreachable!("started above"),
            };
            let name = user.clone().unwrap_or_else(|| format!("{fname}__k{}_{label}", kernels.len()));
            let (text, args, summary) = match self.groups[g].kind.clone() {
                Kind::Elementwise => self.elementwise_kernel(g, &name)?,
                Kind::Matmul { a, b, result, .. } => self.matmul_kernel(g, &name, a, b, result)?,
                Kind::Single(id) => self.library_kernel(g, id, &name)?,
                Kind::Copy { src, dst, .. } => self.copy_kernel(&name, src, dst)?,
                Kind::Collective(_) => unreachable!("started above"),
            };
            if user.is_none() {
                let _ = write!(source, "\n\n{}\n", text.trim_end());
            }
            let loc = match &self.groups[g].kind {
                Kind::Single(id) | Kind::Copy { call: id, .. } => self.g.op(*id).loc.clone(),
                Kind::Matmul { op, .. } | Kind::Collective(op) => self.g.op(*op).loc.clone(),
                Kind::Elementwise => self.groups[g]
                    .ops
                    .first()
                    .map(|&id| self.g.op(id).loc.clone())
                    .unwrap_or_else(|| self.g.loc.clone()),
            };
            let mut attrs = vec![("callee", Attr::Str(SmolStr::new(&name)))];
            let source = self.kernel_source(g);
            if let Some(s) = &source {
                attrs.push(("source", Attr::Str(SmolStr::new(s))));
            }
            // `with prefetch(...)` of a tensor this launch reads in memory.
            let hints: Vec<String> = self
                .prefetch
                .iter()
                .filter(|(v, _)| self.host.get(v).is_some_and(|h| args.contains(h)))
                .map(|(v, hint)| match &self.g.values[v.0 as usize].name {
                    Some(n) => format!("{n} {hint}"),
                    None => format!("%{} {hint}", v.0),
                })
                .collect();
            if !hints.is_empty() {
                attrs.push(("prefetch", Attr::Str(SmolStr::new(hints.join("; ")))));
            }
            self.s.ops.push(Op { kind: OpKind::Kernel, operands: args, results: vec![], attrs, regions: vec![], loc });
            launches.push(OpId(self.s.ops.len() as u32 - 1));
            kernels.push(PlannedKernel { name, summary, source });
        }
        let (operands, loc) = self.returns.take().unwrap_or((vec![], self.g.loc.clone()));
        self.s.ops.push(Op { kind: OpKind::Return, operands, results: vec![], attrs: vec![], regions: vec![], loc });
        let ret = OpId(self.s.ops.len() as u32 - 1);
        let mut ops = self.prologue.clone();
        ops.extend(self.with_waits(launches, &started));
        ops.push(ret);
        self.s.body = Region { args: vec![], ops };
        if let Err(e) = crate::ir::verify::verify(&self.s) {
            return Err(internal(format!("the launch plan does not verify: {e}")));
        }
        Ok(GraphPlan { source, kernels, schedule: Arc::new(self.s) })
    }
}
