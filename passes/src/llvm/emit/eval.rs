//! Fused loops and evaluation of lazy tiles at an index: elementwise nodes, random
//! numbers, loads, gathers; stores of views and windows and scatters.

use super::*;

impl<'f> Lowerer<'f> {
    /// Runs `body(idx, w, fast)` over every vector chunk of `shape`: one loop per dim,
    /// the last dim in chunks of `VL` lanes (and one narrower chunk for the rest). With
    /// load bounds flags, a fast version (every window inside its tensor: plain vector
    /// loads) and a masked version are emitted and chosen at run time, once per tile.
    pub(in crate::llvm) fn fused(&mut self, shape: &[i64], inbs: &[String], body: &mut ChunkBody<'_, 'f>) -> R<()> {
        self.fused_lanes(shape, inbs, VL, body)
    }

    /// `fused` with chunks of at most `lanes` lanes (1: element by element).
    pub(in crate::llvm) fn fused_lanes(
        &mut self,
        shape: &[i64],
        inbs: &[String],
        lanes: u32,
        body: &mut ChunkBody<'_, 'f>,
    ) -> R<()> {
        let mut all = "true".to_string();
        for f in inbs {
            all = self.b.and1(&all, f);
        }
        if all == "true" {
            return self.nest(shape, &mut Vec::new(), true, lanes, body);
        }
        let fast = self.b.label("fast");
        let slow = self.b.label("masked");
        let join = self.b.label("done");
        self.b.cond_br(&all, &fast, &slow);
        self.b.start(&fast);
        self.nest(shape, &mut Vec::new(), true, lanes, body)?;
        self.b.br(&join);
        self.b.start(&slow);
        self.nest(shape, &mut Vec::new(), false, lanes, body)?;
        self.b.br(&join);
        self.b.start(&join);
        Ok(())
    }

    pub(super) fn nest(
        &mut self,
        shape: &[i64],
        idx: &mut Vec<String>,
        fast: bool,
        lanes: u32,
        body: &mut ChunkBody<'_, 'f>,
    ) -> R<()> {
        let d = idx.len();
        if d + 1 == shape.len() {
            let n = shape[d];
            for (j, w, count) in chunks(n, lanes) {
                if count == 1 {
                    idx.push(j.to_string());
                    body(self, idx, w, fast)?;
                    idx.pop();
                } else {
                    let end = (j + count * w as i64).to_string();
                    let Some(l) = self.b.begin_loop("j", &j.to_string(), &end, &w.to_string(), &[]) else { continue };
                    idx.push(l.iv.clone());
                    body(self, idx, w, fast)?;
                    idx.pop();
                    self.b.end_loop(l, &[]);
                }
            }
            return Ok(());
        }
        if shape[d] == 1 {
            idx.push("0".into());
            self.nest(shape, idx, fast, lanes, body)?;
            idx.pop();
            return Ok(());
        }
        let Some(l) = self.b.begin_loop("i", "0", &shape[d].to_string(), "1", &[]) else { return Ok(()) };
        idx.push(l.iv.clone());
        self.nest(shape, idx, fast, lanes, body)?;
        idx.pop();
        self.b.end_loop(l, &[]);
        Ok(())
    }

    // ----- evaluation ------------------------------------------------------------------

    /// The `w` elements of `t` at `idx` (the last index is the chunk's first column) as a
    /// `<w x reg>` vector. `fast`: every load window is known to be inside its tensor.
    pub(in crate::llvm) fn eval(&mut self, t: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        // A lazy tile's instructions belong to the op that defined it, wherever they land.
        let own = t.loc.is_some() && t.mem().is_none();
        let saved = if own { std::mem::replace(&mut self.b.loc, t.loc.clone()) } else { None };
        let r = self.eval_node(t, idx, w, fast);
        if own {
            self.b.loc = saved;
        }
        r
    }

    pub(super) fn eval_node(&mut self, t: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        let e = numerics::reg(t.dtype);
        let ty = VTy::new(e, w);
        Ok(match &*t.node {
            Node::Mem(m) => self.load_mem(m, idx, w),
            Node::Const(x) => {
                let l = lit(VTy::scalar(e), *x);
                let s = numerics::finish(&mut self.b, Some(t.dtype), VTy::scalar(e), &l);
                self.b.splat(ty, &s)
            }
            Node::Splat(s) => self.b.splat(ty, s),
            Node::Arange => {
                let i64v = VTy::new(Elem::I64, w);
                let js = self.b.splat(i64v, &idx[idx.len() - 1]);
                let lanes = self.b.val("ar", format!("add {} {js}, {}", i64v.ir(), iota(Elem::I64, w)));
                numerics::cast(&mut self.b, None, Some(t.dtype), w, &lanes)
            }
            Node::Load { view, mask, other } => {
                let view = view.clone();
                self.eval_load(t, &view, mask.as_ref(), *other, idx, w, fast)?
            }
            Node::Gather { tensor, idx: ix, mask } => {
                let tensor = tensor.clone();
                self.eval_gather(t, &tensor, ix, mask.as_ref(), idx, w, fast)?
            }
            Node::Unary { op, a } => {
                let x = self.eval(a, idx, w, fast)?;
                numerics::unary(&mut self.b, op, Some(t.dtype), w, &x).map_err(|m| self.err(m))?
            }
            Node::Binary { op, a, b, code } => {
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                let slot = self.err_slot.clone();
                let sink = ErrSink { slot: &slot, code: *code };
                numerics::binary(&mut self.b, op, Some(t.dtype), w, &x, &y, &sink).map_err(|m| self.err(m))?
            }
            Node::Cmp { pred, a, b } => {
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                numerics::compare(&mut self.b, pred, Some(a.dtype), w, &x, &y).map_err(|m| self.err(m))?
            }
            Node::Select { c, a, b } => {
                let cv = self.eval(c, idx, w, fast)?;
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                numerics::select_vals(&mut self.b, ty, &cv, &x, &y)
            }
            Node::Cast { a, saturate, u } => {
                let x = self.eval(a, idx, w, fast)?;
                let stochastic = match u {
                    Some(u) => {
                        let uv = self.eval(u, idx, w, fast)?;
                        crate::llvm::policy::stochastic(&mut self.b, a.dtype, t.dtype, w, &x, &uv, *saturate)
                    }
                    None => None,
                };
                match stochastic {
                    Some(v) => v,
                    None => numerics::cast_with(&mut self.b, Some(a.dtype), Some(t.dtype), w, &x, *saturate),
                }
            }
            Node::Broadcast { a } => {
                let n = t.shape.len();
                let sub: Vec<String> = (0..n)
                    .map(|d| if a.shape[d] == 1 && t.shape[d] != 1 { "0".to_string() } else { idx[d].clone() })
                    .collect();
                if a.shape[n - 1] == 1 && t.shape[n - 1] != 1 {
                    let one = self.eval(a, &sub, 1, fast)?;
                    let s = self.b.val("x", format!("extractelement {} {one}, i32 0", VTy::new(e, 1).ir()));
                    self.b.splat(ty, &s)
                } else {
                    self.eval(a, &sub, w, fast)?
                }
            }
            Node::Expand { a, axis } => {
                let mut sub: Vec<String> = idx.to_vec();
                sub.remove(*axis);
                if a.rank0 || sub.is_empty() {
                    sub = vec!["0".to_string()];
                }
                self.eval(a, &sub, w, fast)?
            }
            Node::Rand { seed, offsets } => {
                let v = self.rand(t, seed, offsets, idx, w);
                numerics::cast(&mut self.b, Some(DType::F32), Some(t.dtype), w, &v)
            }
            Node::Causal { s, q, k } => {
                let v = self.eval(s, idx, w, fast)?;
                let i64v = VTy::new(Elem::I64, w);
                let row = self.b.add(q, &idx[0]);
                let col0 = self.b.add(k, &idx[1]);
                let cs = self.b.splat(i64v, &col0);
                let cols = self.b.val("col", format!("add {} {cs}, {}", i64v.ir(), iota(Elem::I64, w)));
                let rs = self.b.splat(i64v, &row);
                let masked = self.b.val("fut", format!("icmp sgt {} {cols}, {rs}", i64v.ir()));
                let ninf = lit(ty, f64::NEG_INFINITY);
                numerics::select_vals(&mut self.b, ty, &masked, &ninf, &v)
            }
        })
    }

    /// `tile.rand` at `idx`: `h = mix32(seed ^ 0x9E3779B9)`, `h = mix32(h ^ c)` per
    /// coordinate (32-bit), `(h >> 8) * 2^-24` (docs/ir.md; `crate::ir::rand`).
    pub(super) fn rand(&mut self, t: &Tile, seed: &str, offsets: &[String], idx: &[String], w: u32) -> String {
        let rank = if t.rank0 { 0 } else { t.shape.len() };
        let lead = offsets.len() - rank;
        let s32 = VTy::scalar(Elem::I32);
        let v32 = VTy::new(Elem::I32, w);
        let trunc = |b: &mut FnBuilder, v: &str| -> String {
            match v.parse::<i64>() {
                Ok(c) => (c as i32).to_string(),
                Err(_) => b.val("c", format!("trunc i64 {v} to i32")),
            }
        };
        let seed32 = trunc(&mut self.b, seed);
        let x = self.b.val("h", format!("xor i32 {seed32}, {}", 0x9E37_79B9u32 as i32));
        let mut h = mix32(&mut self.b, s32, &x);
        // Coordinates: fixed leading offsets, then the tile's (the last one per lane).
        let mut coords: Vec<String> = offsets[..lead].to_vec();
        for d in 0..rank.saturating_sub(1) {
            coords.push(self.b.add(&offsets[lead + d], &idx[d]));
        }
        for c in coords {
            let c32 = trunc(&mut self.b, &c);
            let x = self.b.val("h", format!("xor i32 {h}, {c32}"));
            h = mix32(&mut self.b, s32, &x);
        }
        let hv = self.b.splat(v32, &h);
        let hv = if rank > 0 {
            let first = self.b.add(&offsets[lead + rank - 1], &idx[rank - 1]);
            let f32v = trunc(&mut self.b, &first);
            let fs = self.b.splat(v32, &f32v);
            let lanes = self.b.val("lane", format!("add {} {fs}, {}", v32.ir(), iota(Elem::I32, w)));
            let x = self.b.val("h", format!("xor {} {hv}, {lanes}", v32.ir()));
            mix32(&mut self.b, v32, &x)
        } else {
            hv
        };
        let top = self.b.val("h", format!("lshr {} {hv}, {}", v32.ir(), lit(v32, 8.0)));
        let fv = VTy::new(Elem::F32, w);
        let u = self.b.val("u", format!("uitofp {} {top} to {}", v32.ir(), fv.ir()));
        self.b.val("rand", format!("fmul {} {u}, {}", fv.ir(), lit(fv, 2f64.powi(-24))))
    }

    /// Loads `w` elements of a tile in memory at `idx`.
    pub(super) fn load_mem(&mut self, m: &Mem, idx: &[String], w: u32) -> String {
        let se = m.st.elem();
        let st = VTy::new(se, w);
        let n = idx.len();
        let off = self.outer_offset(idx, &m.strides);
        let raw = match &m.strides[n - 1] {
            Stride::C(1) => {
                let off = self.b.add(&off, &idx[n - 1]);
                let p = self.b.gep(se, &m.ptr, &off);
                self.plain_load(st, &p)
            }
            Stride::C(0) => {
                let p = self.b.gep(se, &m.ptr, &off);
                let s = self.b.val("ld", format!("load {}, {}* {p}, align {}", se.ir(), se.ir(), se.bytes()));
                self.b.splat(st, &s)
            }
            last => {
                let ptrs = self.lane_ptrs(se, &m.ptr, &off, &idx[n - 1], &last.val(), w);
                let mask = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_gather(st, &ptrs, &mask)
            }
        };
        numerics::from_storage(&mut self.b, m.st, st, &raw)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn eval_load(
        &mut self,
        t: &Tile,
        view: &ViewV,
        mask: Option<&Tile>,
        other: f64,
        idx: &[String],
        w: u32,
        fast: bool,
    ) -> R<String> {
        let tensor = view.tensor.clone();
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(t.dtype), w);
        // Tensor coordinates: view dims take the index, squeezed dims their offset.
        let mut coords = view.offsets.clone();
        let last_t = view.kept.last().copied();
        if !t.rank0 {
            for (vd, &td) in view.kept.iter().enumerate() {
                coords[td] = self.b.add(&view.offsets[td], &idx[vd]);
            }
        }
        let off = self.tensor_offset(&tensor, &coords);
        let lane_stride = last_t.map_or("1".to_string(), |d| tensor.strides[d].clone());
        let contiguous_lanes = lane_stride == "1" || w == 1;
        let other_reg = {
            let l = lit(VTy::scalar(numerics::reg(t.dtype)), other);
            let s = numerics::finish(&mut self.b, Some(t.dtype), VTy::scalar(numerics::reg(t.dtype)), &l);
            self.b.splat(rt, &s)
        };
        let user_mask = match mask {
            Some(m) => Some(self.eval(m, idx, w, fast)?),
            None => None,
        };
        let converted = |l: &mut Self, raw: &str| -> String {
            let v = numerics::from_storage(&mut l.b, tensor.st, st, raw);
            numerics::cast(&mut l.b, Some(tensor.dtype), Some(t.dtype), w, &v)
        };
        if fast {
            let raw = if contiguous_lanes {
                let p = self.b.gep(se, &tensor.ptr, &off);
                self.plain_load(st, &p)
            } else {
                let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
                let all = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_gather(st, &ptrs, &all)
            };
            let v = converted(self, &raw);
            return Ok(match user_mask {
                Some(m) => numerics::select_vals(&mut self.b, rt, &m, &v, &other_reg),
                None => v,
            });
        }
        // Masked: lanes inside the tensor (and the user's mask).
        let b1 = VTy::new(Elem::I1, w);
        let mut lane_ok = self.lanes_inside(&tensor, &coords, last_t, w);
        if let Some(m) = &user_mask {
            lane_ok = self.b.val("in", format!("and {} {lane_ok}, {m}", b1.ir()));
        }
        let raw = if contiguous_lanes {
            let p = self.b.gep(se, &tensor.ptr, &off);
            self.masked_load(st, &p, &lane_ok)
        } else {
            let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
            self.masked_gather(st, &ptrs, &lane_ok)
        };
        let v = converted(self, &raw);
        Ok(numerics::select_vals(&mut self.b, rt, &lane_ok, &v, &other_reg))
    }

    /// `start` when `idx` is `splat(start) + arange` (consecutive elements).
    pub(super) fn consecutive(&mut self, ix: &Tile, j: &str) -> Option<String> {
        let Node::Binary { op: "add", a, b, .. } = &*ix.node else { return None };
        let s = match (&*a.node, &*b.node) {
            (Node::Splat(s), Node::Arange) | (Node::Arange, Node::Splat(s)) => s.clone(),
            _ => return None,
        };
        if ix.dtype != DType::I32 && ix.dtype != DType::I64 || ix.shape.len() != 1 {
            return None;
        }
        let s64 = if ix.dtype == DType::I32 { self.b.val("base", format!("sext i32 {s} to i64")) } else { s };
        Some(self.b.add(&s64, j))
    }

    pub(super) fn index_lanes(&mut self, ix: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        let v = self.eval(ix, idx, w, fast)?;
        let e = numerics::reg(ix.dtype);
        Ok(match e {
            Elem::I64 => v,
            Elem::I32 | Elem::I8 => {
                self.b.val("ix", format!("sext {} {v} to {}", VTy::new(e, w).ir(), VTy::new(Elem::I64, w).ir()))
            }
            _ => return Err(self.err(format!("gather and scatter indices must be integers, not {}", ix.dtype))),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn eval_gather(
        &mut self,
        t: &Tile,
        tensor: &TensorV,
        ix: &Tile,
        mask: Option<&Tile>,
        idx: &[String],
        w: u32,
        fast: bool,
    ) -> R<String> {
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(t.dtype), w);
        let i64v = VTy::new(Elem::I64, w);
        let b1 = VTy::new(Elem::I1, w);
        let user = match mask {
            Some(m) => Some(self.eval(m, idx, w, fast)?),
            None => None,
        };
        let start = self.consecutive(ix, &idx[idx.len() - 1]);
        let lanes = match &start {
            Some(s) => {
                let ss = self.b.splat(i64v, s);
                self.b.val("gi", format!("add {} {ss}, {}", i64v.ir(), iota(Elem::I64, w)))
            }
            None => self.index_lanes(ix, idx, w, fast)?,
        };
        let numel = self.b.mul(&tensor.dims[0], &tensor.strides[0]);
        let ds = self.b.splat(i64v, &numel);
        let mut ok = self.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()));
        if let Some(m) = &user {
            ok = self.b.val("in", format!("and {} {ok}, {m}", b1.ir()));
        }
        let raw = match &start {
            Some(s) => {
                let p = self.b.gep(se, &tensor.ptr, s);
                self.masked_load(st, &p, &ok)
            }
            None => {
                let ptrs = self
                    .b
                    .val("ptrs", format!("getelementptr {t}, {t}* {}, {} {lanes}", tensor.ptr, i64v.ir(), t = se.ir()));
                self.masked_gather(st, &ptrs, &ok)
            }
        };
        let v = numerics::from_storage(&mut self.b, tensor.st, st, &raw);
        let v = numerics::cast(&mut self.b, Some(tensor.dtype), Some(t.dtype), w, &v);
        Ok(numerics::select_vals(&mut self.b, rt, &ok, &v, &lit(rt, 0.0)))
    }

    // ----- stores ----------------------------------------------------------------------

    /// A store of `value` into the view, or with `atomic`, an addition into its elements.
    pub(super) fn store_view(&mut self, view: &Rc<ViewV>, value: &Tile, mask: Option<&Tile>, atomic: bool) -> R<()> {
        let shape: Vec<i64> =
            if view.kept.is_empty() { vec![1] } else { view.kept.iter().map(|&d| view.sizes[d]).collect() };
        if value.numel() != shape.iter().product::<i64>() {
            return Err(self.err(format!(
                "tile.store of {} elements into a window of {}",
                value.numel(),
                shape.iter().product::<i64>()
            )));
        }
        let value = if value.shape != shape { self.reshape_copy(value, &shape)? } else { value.clone() };
        let mut inbs = value.inbounds_flags();
        if let Some(m) = mask {
            inbs.extend(m.inbounds_flags());
        }
        inbs.push(view.inb.clone());
        let view = view.clone();
        let mask = mask.cloned();
        self.fused(&shape, &inbs, &mut |l, idx, w, fast| {
            let v = l.eval(&value, idx, w, fast)?;
            let user = match &mask {
                Some(m) => Some(l.eval(m, idx, w, fast)?),
                None => None,
            };
            l.store_window(&view, value.dtype, idx, w, fast, &v, user.as_deref(), atomic)
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_window(
        &mut self,
        view: &ViewV,
        dtype: DType,
        idx: &[String],
        w: u32,
        fast: bool,
        v: &str,
        user: Option<&str>,
        atomic: bool,
    ) -> R<()> {
        let tensor = view.tensor.clone();
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(tensor.dtype), w);
        let v = numerics::cast(&mut self.b, Some(dtype), Some(tensor.dtype), w, v);
        let raw = numerics::to_storage(&mut self.b, tensor.st, rt, &v);
        let mut coords = view.offsets.clone();
        let last_t = view.kept.last().copied();
        if !view.kept.is_empty() {
            for (vd, &td) in view.kept.iter().enumerate() {
                coords[td] = self.b.add(&view.offsets[td], &idx[vd]);
            }
        }
        let off = self.tensor_offset(&tensor, &coords);
        let lane_stride = last_t.map_or("1".to_string(), |d| tensor.strides[d].clone());
        let contiguous_lanes = lane_stride == "1" || w == 1;
        let b1 = VTy::new(Elem::I1, w);
        let mut mask = user.map(str::to_string);
        if !fast {
            let lane_ok = self.lanes_inside(&tensor, &coords, last_t, w);
            mask = Some(match mask {
                Some(m) => self.b.val("in", format!("and {} {lane_ok}, {m}", b1.ir())),
                None => lane_ok,
            });
        }
        if atomic {
            let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
            self.atomic_add_lanes(st, &raw, &ptrs, mask.as_deref());
            return Ok(());
        }
        match (contiguous_lanes, mask) {
            (true, None) => {
                let p = self.b.gep(se, &tensor.ptr, &off);
                let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", se.ir(), st.ir()));
                self.b.emit(format!("store {} {raw}, {}* {vp}, align {}", st.ir(), st.ir(), se.bytes()));
            }
            (true, Some(m)) => {
                let p = self.b.gep(se, &tensor.ptr, &off);
                self.masked_store(st, &raw, &p, &m);
            }
            (false, m) => {
                let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
                let m = m.unwrap_or_else(|| lit(b1, 1.0));
                self.masked_scatter(st, &raw, &ptrs, &m);
            }
        }
        Ok(())
    }

    /// A scatter of `values` to the elements `ix` names, or with `atomic`, an addition
    /// into them (`tile.atomic_add` by an index tile: a histogram, an embedding's gradient).
    pub(super) fn scatter(
        &mut self,
        tensor: &Rc<TensorV>,
        ix: &Tile,
        values: &Tile,
        mask: Option<&Tile>,
        atomic: bool,
    ) -> R<()> {
        if ix.shape != values.shape || ix.rank0 != values.rank0 {
            return Err(self.err("tile.scatter: the index and value tiles differ in shape"));
        }
        let shape = values.shape.clone();
        let mut inbs = values.inbounds_flags();
        inbs.extend(ix.inbounds_flags());
        if let Some(m) = mask {
            inbs.extend(m.inbounds_flags());
        }
        let tensor = tensor.clone();
        let (ix, values, mask) = (ix.clone(), values.clone(), mask.cloned());
        self.fused(&shape, &inbs, &mut |l, idx, w, fast| {
            let se = tensor.st.elem();
            let st = VTy::new(se, w);
            let i64v = VTy::new(Elem::I64, w);
            let b1 = VTy::new(Elem::I1, w);
            let v = l.eval(&values, idx, w, fast)?;
            let v = numerics::cast(&mut l.b, Some(values.dtype), Some(tensor.dtype), w, &v);
            let raw = numerics::to_storage(&mut l.b, tensor.st, VTy::new(numerics::reg(tensor.dtype), w), &v);
            let start = if ix.shape.len() == 1 { l.consecutive(&ix, &idx[idx.len() - 1]) } else { None };
            let lanes = match &start {
                Some(s) => {
                    let ss = l.b.splat(i64v, s);
                    l.b.val("si", format!("add {} {ss}, {}", i64v.ir(), iota(Elem::I64, w)))
                }
                None => l.index_lanes(&ix, idx, w, fast)?,
            };
            let numel = l.b.mul(&tensor.dims[0], &tensor.strides[0]);
            let ds = l.b.splat(i64v, &numel);
            let mut ok = l.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()));
            if let Some(m) = &mask {
                let mv = l.eval(m, idx, w, fast)?;
                ok = l.b.val("in", format!("and {} {ok}, {mv}", b1.ir()));
            }
            match &start {
                Some(s) if atomic => {
                    let ptrs = l.lane_ptrs(se, &tensor.ptr, s, "0", "1", w);
                    l.atomic_add_lanes(st, &raw, &ptrs, Some(&ok));
                }
                Some(s) => {
                    let p = l.b.gep(se, &tensor.ptr, s);
                    l.masked_store(st, &raw, &p, &ok);
                }
                None => {
                    let ptrs = l.b.val(
                        "ptrs",
                        format!("getelementptr {t}, {t}* {}, {} {lanes}", tensor.ptr, i64v.ir(), t = se.ir()),
                    );
                    if atomic {
                        l.atomic_add_lanes(st, &raw, &ptrs, Some(&ok));
                    } else {
                        l.masked_scatter(st, &raw, &ptrs, &ok);
                    }
                }
            }
            Ok(())
        })
    }

    // ----- reductions ------------------------------------------------------------------
}
