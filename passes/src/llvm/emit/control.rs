//! Reductions and structured control flow (`for`, `if`) with their carried values.

use super::*;

impl<'f> Lowerer<'f> {
    pub(super) fn reduce(
        &mut self,
        a: &Tile,
        kind: &str,
        axis: usize,
        out_shape: &[i64],
        out_dtype: DType,
        step: Option<DType>,
    ) -> R<Tile> {
        let rank = a.shape.len();
        if axis >= rank || a.rank0 {
            return Err(self.err(format!("tile.reduce axis {axis} of a rank-{} tile", if a.rank0 { 0 } else { rank })));
        }
        let e = numerics::reg(a.dtype);
        let (comb, identity): (&str, f64) = match (kind, e) {
            ("sum", Elem::I1) => return Err(self.err("tile.reduce sum of a bool tile")),
            ("sum", _) => ("add", 0.0),
            ("max", Elem::I1) => ("or", 0.0),
            ("min", Elem::I1) => ("and", 1.0),
            ("max", e) if e.is_float() => ("max", f64::NAN),
            ("min", e) if e.is_float() => ("min", f64::NAN),
            ("max", e) => ("max", int_min(e)),
            ("min", e) => ("min", int_max(e)),
            (k, _) => return Err(self.err(format!("tile.reduce kind `{k}` (sum, max or min)"))),
        };
        let out = Tile::new(out_shape, out_dtype, Node::Const(0.0));
        let dst = self.alloc_tile(&out.shape, out_dtype);
        let inbs = a.inbounds_flags();
        let a = a.clone();
        let dstc = dst.clone();
        let step = step.filter(|_| e == Elem::F32);
        let ctx = RedCtx { comb, identity, e, a_dtype: a.dtype, out_dtype, step };
        if axis == rank - 1 {
            // Along the last dim: one vector accumulator chain per output element.
            let outer: Vec<i64> = if rank == 1 { vec![1] } else { a.shape[..rank - 1].to_vec() };
            let n = a.shape[rank - 1];
            self.fused_lanes(&outer, &inbs, 1, &mut |l, oidx, _w, fast| {
                let idx: Vec<String> = if rank == 1 { Vec::new() } else { oidx.to_vec() };
                let s = match ctx.step {
                    Some(t) => l.reduce_row_stepped(&a, &idx, n, &ctx, t, fast)?,
                    None => l.reduce_row(&a, &idx, n, &ctx, fast)?,
                };
                let s = numerics::finish(&mut l.b, Some(ctx.out_dtype), VTy::scalar(ctx.e), &s);
                let sv = l.b.splat(VTy::new(ctx.e, 1), &s);
                let oi: Vec<String> = if rank == 1 { vec!["0".into()] } else { idx };
                l.store_mem(&dstc, ctx.out_dtype, &oi, 1, &sv);
                Ok(())
            })?;
        } else {
            // Across rows: vector accumulators over the kept last dim.
            let out_dims = out.shape.clone();
            let len = a.shape[axis];
            self.fused(&out_dims, &inbs, &mut |l, oidx, w, fast| {
                let vt = VTy::new(ctx.e, w);
                let init = lit(vt, ctx.identity);
                let lp = l.b.begin_loop("r", "0", &len.to_string(), "1", &[(vt.ir(), init.clone())]);
                let Some(lp) = lp else { return Ok(()) };
                let mut idx: Vec<String> = oidx.to_vec();
                if out.rank0 {
                    idx.clear();
                }
                idx.insert(axis, lp.iv.clone());
                let x = l.eval(&a, &idx, w, fast)?;
                let acc = lp.carried[0].clone();
                let next = l.combine(&ctx, vt, &acc, &x)?;
                let next = match ctx.step {
                    Some(t) => numerics::round_f32(&mut l.b, t, vt, &next),
                    None => next,
                };
                let r = l.b.end_loop(lp, &[next]);
                let v = numerics::finish(&mut l.b, Some(ctx.out_dtype), vt, &r[0]);
                l.store_mem(&dstc, ctx.out_dtype, oidx, w, &v);
                Ok(())
            })?;
        }
        Ok(out.with_node(Node::Mem(dst)))
    }

    /// The reduction of one row (`idx` without its last index) of `n` elements, as a
    /// scalar of the accumulation type.
    pub(super) fn reduce_row(&mut self, a: &Tile, idx: &[String], n: i64, ctx: &RedCtx, fast: bool) -> R<String> {
        let vl = VL as i64;
        let full = n / vl;
        let rem = (n % vl) as u32;
        // Up to four independent accumulators hide the add latency.
        let accs = full.clamp(0, 4);
        let mut partial: Option<String> = None;
        if accs > 0 {
            let vt = VTy::new(ctx.e, VL);
            let step = accs * vl;
            let main = (full / accs) * step;
            let init = lit(vt, ctx.identity);
            let carried: Vec<(String, String)> = (0..accs).map(|_| (vt.ir(), init.clone())).collect();
            let mut vals: Vec<String> = carried.iter().map(|(_, v)| v.clone()).collect();
            if let Some(lp) = self.b.begin_loop("rj", "0", &main.to_string(), &step.to_string(), &carried) {
                let mut next = Vec::new();
                for k in 0..accs {
                    let j = self.b.add(&lp.iv, &(k * vl).to_string());
                    let mut i = idx.to_vec();
                    i.push(j);
                    let x = self.eval(a, &i, VL, fast)?;
                    let acc = lp.carried[k as usize].clone();
                    next.push(self.combine(ctx, vt, &acc, &x)?);
                }
                vals = self.b.end_loop(lp, &next);
            }
            // Leftover full vectors.
            let mut j = main;
            let mut k = 0usize;
            while j + vl <= full * vl {
                let mut i = idx.to_vec();
                i.push(j.to_string());
                let x = self.eval(a, &i, VL, fast)?;
                vals[k] = self.combine(ctx, vt, &vals[k], &x)?;
                k = (k + 1) % vals.len();
                j += vl;
            }
            let mut acc = vals[0].clone();
            for v in &vals[1..] {
                acc = self.combine(ctx, vt, &acc, v)?;
            }
            partial = Some(self.horizontal(ctx, vt, &acc));
        }
        if rem > 0 {
            let vt = VTy::new(ctx.e, rem);
            let mut i = idx.to_vec();
            i.push((full * vl).to_string());
            let x = self.eval(a, &i, rem, fast)?;
            let h = self.horizontal(ctx, vt, &x);
            partial = Some(match partial {
                Some(p) => self.combine(ctx, VTy::scalar(ctx.e), &p, &h)?,
                None => h,
            });
        }
        partial.ok_or_else(|| self.err("tile.reduce over an empty dim"))
    }

    /// A row sum in element order, rounded to `t` after every addition (`@accum(t)`).
    pub(super) fn reduce_row_stepped(
        &mut self,
        a: &Tile,
        idx: &[String],
        n: i64,
        ctx: &RedCtx,
        t: DType,
        fast: bool,
    ) -> R<String> {
        let vt = VTy::new(ctx.e, 1);
        let zero = lit(vt, 0.0);
        let Some(lp) = self.b.begin_loop("rs", "0", &n.to_string(), "1", &[(vt.ir(), zero.clone())]) else {
            return Ok(lit(VTy::scalar(ctx.e), 0.0));
        };
        let mut i = idx.to_vec();
        i.push(lp.iv.clone());
        let x = self.eval(a, &i, 1, fast)?;
        let acc = lp.carried[0].clone();
        let s = self.combine(ctx, vt, &acc, &x)?;
        let s = numerics::round_f32(&mut self.b, t, vt, &s);
        let r = self.b.end_loop(lp, &[s]);
        Ok(self.b.val("rsum", format!("extractelement {} {}, i32 0", vt.ir(), r[0])))
    }

    pub(super) fn combine(&mut self, ctx: &RedCtx, ty: VTy, a: &str, b: &str) -> R<String> {
        let sink = ErrSink { slot: &self.err_slot.clone(), code: 0 };
        // Sums accumulate in the register type (f32 for 16-bit floats) and are rounded
        // once at the end, so no per-step rounding: compute as f32/f64/wrapping ints.
        let dt = match ctx.e {
            Elem::F32 => Some(DType::F32),
            Elem::F64 => Some(DType::F64),
            _ => Some(ctx.a_dtype),
        };
        numerics::binary(&mut self.b, ctx.comb, dt, ty.w, a, b, &sink).map_err(|m| self.err(m))
    }

    pub(super) fn horizontal(&mut self, ctx: &RedCtx, ty: VTy, v: &str) -> String {
        let e = ctx.e;
        let st = ty.ir();
        let ret = e.ir();
        match (ctx.comb, e.is_float()) {
            ("add", true) => {
                let name = format!("llvm.vector.reduce.fadd.{}", ty.mangle());
                self.b.declare(&name, format!("declare {ret} @{name}({ret}, {st})"));
                let z = crate::llvm::builder::float_lit(e, -0.0);
                self.b.val("hsum", format!("call reassoc {ret} @{name}({ret} {z}, {st} {v})"))
            }
            (c, true) => {
                let which = if c == "max" { "fmax" } else { "fmin" };
                let name = format!("llvm.vector.reduce.{which}.{}", ty.mangle());
                self.b.call("h", &name, ret, &[(st.clone(), v.to_string())])
            }
            (c, false) => {
                let which = match c {
                    "add" => "add",
                    "max" => "smax",
                    "min" => "smin",
                    "and" => "and",
                    _ => "or",
                };
                let name = format!("llvm.vector.reduce.{which}.{}", ty.mangle());
                self.b.call("h", &name, ret, &[(st.clone(), v.to_string())])
            }
        }
    }

    // ----- control flow ----------------------------------------------------------------

    pub(super) fn for_op(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        if op.operands.len() < 3 || op.regions.len() != 1 {
            return Err(self.err("scf.for takes lo, hi, step, inits and one region"));
        }
        let (lo, hi, step) = (self.scalar(op.operands[0])?, self.scalar(op.operands[1])?, self.scalar(op.operands[2])?);
        let region = &op.regions[0];
        let inits = &op.operands[3..];
        if region.args.len() != inits.len() + 1 || op.results.len() != inits.len() {
            return Err(self.err("scf.for: iteration values, region arguments and results disagree"));
        }
        // Scalars are loop phis; tiles live in a carried buffer each.
        let mut scalars: Vec<(usize, String, String)> = Vec::new();
        let mut carried: Vec<Option<Mem>> = Vec::new();
        for (i, &init) in inits.iter().enumerate() {
            match self.get(init)? {
                Val::Scalar(s) => {
                    let ty = VTy::scalar(numerics::reg_of(self.dtype_of(init))).ir();
                    scalars.push((i, ty, s));
                    carried.push(None);
                }
                Val::Tile(t) => {
                    let m = self.alloc_tile(&t.shape, t.dtype);
                    self.materialize_into(&t, &m)?;
                    carried.push(Some(m));
                }
                other => return Err(self.err(format!("scf.for cannot carry {other:?}"))),
            }
        }
        let phi_init: Vec<(String, String)> = scalars.iter().map(|(_, t, v)| (t.clone(), v.clone())).collect();
        let lp = self.b.begin_loop("for", &lo, &hi, &step, &phi_init);
        let tile_of = |l: &Self, i: usize, m: &Mem| -> R<Tile> {
            let shape = l.tile_shape(inits[i])?;
            let dtype = f.ty(inits[i]).dtype().unwrap_or(DType::F32);
            Ok(Tile::new(&shape, dtype, Node::Mem(m.clone())))
        };
        let Some(lp) = lp else {
            // Never runs (constant bounds): the results are the initial values.
            for (i, &r) in op.results.iter().enumerate() {
                let v = match &carried[i] {
                    Some(m) => Val::Tile(tile_of(self, i, m)?),
                    None => self.get(inits[i])?,
                };
                self.set(r, v);
            }
            return Ok(());
        };
        self.set(region.args[0], Val::Scalar(lp.iv.clone()));
        let mut k = 0;
        for (i, c) in carried.iter().enumerate() {
            let v = match c {
                Some(m) => Val::Tile(tile_of(self, i, m)?),
                None => {
                    k += 1;
                    Val::Scalar(lp.carried[k - 1].clone())
                }
            };
            self.set(region.args[1 + i], v);
        }
        let yielded = self.region(region)?;
        self.b.loc = Some(op.loc.clone());
        if yielded.len() != inits.len() {
            return Err(self.err("scf.for: the body yields a different number of values"));
        }
        let mut outs = Vec::new();
        let mut tile_yields: Vec<(Tile, Mem)> = Vec::new();
        for (i, &y) in yielded.iter().enumerate() {
            match &carried[i] {
                Some(m) => tile_yields.push((self.tile(y)?, m.clone())),
                None => outs.push(self.scalar(y)?),
            }
        }
        self.write_carried(&tile_yields)?;
        let after = self.b.end_loop(lp, &outs);
        let mut k = 0;
        for (i, &r) in op.results.iter().enumerate() {
            let v = match &carried[i] {
                Some(m) => Val::Tile(tile_of(self, i, m)?),
                None => {
                    k += 1;
                    Val::Scalar(after[k - 1].clone())
                }
            };
            self.set(r, v);
        }
        Ok(())
    }

    /// Writes the yielded tiles into the carried buffers, reading every yielded value
    /// before any buffer it depends on is overwritten.
    pub(super) fn write_carried(&mut self, pairs: &[(Tile, Mem)]) -> R<()> {
        let roots: Vec<Root> = pairs
            .iter()
            .map(|(_, m)| m.whole.ok_or_else(|| self.err("internal error: a loop-carried buffer that is not whole")))
            .collect::<R<_>>()?;
        let pending: Vec<usize> =
            (0..pairs.len()).filter(|&i| pairs[i].0.mem().and_then(|m| m.whole) != Some(roots[i])).collect();
        let mut direct = vec![false; pairs.len()];
        for &i in &pending {
            let root = roots[i];
            let others_read = pending.iter().any(|&j| j != i && pairs[j].0.reads(root));
            let (_, identity) = pairs[i].0.identity_reads(root);
            direct[i] = !others_read && identity;
        }
        let mut temps: Vec<Option<Mem>> = vec![None; pairs.len()];
        for &i in &pending {
            if !direct[i] {
                temps[i] = Some(self.materialize_fresh(&pairs[i].0)?);
            }
        }
        for &i in &pending {
            let (t, dst) = &pairs[i];
            match &temps[i] {
                Some(m) => {
                    let copy = t.with_node(Node::Mem(m.clone()));
                    self.materialize_into(&copy, dst)?;
                }
                None => self.materialize_into(t, dst)?,
            }
        }
        Ok(())
    }

    pub(super) fn if_op(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        if op.regions.len() != 2 {
            return Err(self.err("scf.if has a then and an else region"));
        }
        let cond = self.scalar(op.operands[0])?;
        let then_l = self.b.label("then");
        let else_l = self.b.label("else");
        let join = self.b.label("endif");
        // Tile results go through one buffer each unless a branch yields memory in the
        // buffer's layout already.
        let mut bufs: Vec<Option<Mem>> = Vec::new();
        for &r in &op.results {
            bufs.push(match f.ty(r) {
                Type::Tile(t) => {
                    let shape = self.tile_shape(r)?;
                    Some(self.alloc_tile(&shape, t.dtype))
                }
                _ => None,
            });
        }
        self.b.cond_br(&cond, &then_l, &else_l);
        let mut arms: Vec<(String, Vec<String>, Vec<Root>)> = Vec::new();
        for (ri, label) in [(0usize, then_l), (1, else_l)] {
            self.b.start(&label);
            let yielded = self.region(&op.regions[ri])?;
            self.b.loc = Some(op.loc.clone());
            if yielded.len() != op.results.len() {
                return Err(self.err("scf.if: a branch yields a different number of values"));
            }
            let mut vals = Vec::new();
            let mut roots = Vec::new();
            for (i, &y) in yielded.iter().enumerate() {
                match &bufs[i] {
                    Some(buf) => {
                        let t = self.tile(y)?;
                        let usable = t.mem().filter(|m| m.strides == buf.strides && m.st == buf.st).cloned();
                        let m = match usable {
                            Some(m) => m,
                            None => {
                                self.materialize_into(&t, buf)?;
                                buf.clone()
                            }
                        };
                        roots.extend(m.roots.iter().copied());
                        vals.push(m.ptr.clone());
                    }
                    None => vals.push(self.scalar(y)?),
                }
            }
            let end = self.b.cur_label();
            self.b.br(&join);
            arms.push((end, vals, roots));
        }
        self.b.start(&join);
        for (i, &r) in op.results.iter().enumerate() {
            let (a, b) = (&arms[0], &arms[1]);
            match &bufs[i] {
                Some(buf) => {
                    let ty = format!("{}*", buf.st.elem().ir());
                    let ptr = self.b.val("res", format!("phi {ty} [ {}, {} ], [ {}, {} ]", a.1[i], a.0, b.1[i], b.0));
                    let mut roots: Vec<Root> = a.2.iter().chain(&b.2).copied().collect();
                    roots.sort();
                    roots.dedup();
                    let shape = self.tile_shape(r)?;
                    let dtype = f.ty(r).dtype().unwrap_or(DType::F32);
                    let m = Mem { ptr, strides: buf.strides.clone(), st: buf.st, roots, whole: None };
                    self.set(r, Val::Tile(Tile::new(&shape, dtype, Node::Mem(m))));
                }
                None => {
                    let ty = VTy::scalar(numerics::reg_of(self.dtype_of(r))).ir();
                    let v = self.b.val("res", format!("phi {ty} [ {}, {} ], [ {}, {} ]", a.1[i], a.0, b.1[i], b.0));
                    self.set(r, Val::Scalar(v));
                }
            }
        }
        Ok(())
    }
}
