//! Tile shapes and memory: broadcasts, transposes, views, shared loads, materializing tiles
//! into buffers, stores, offsets and the masked and plain vector accesses.

use super::*;

impl<'f> Lowerer<'f> {
    pub(super) fn broadcast(&mut self, a: &Tile, shape: &[i64]) -> R<Tile> {
        if a.shape == shape {
            return Ok(a.clone());
        }
        if let Some(m) = a.mem() {
            let strides = a
                .shape
                .iter()
                .zip(&m.strides)
                .zip(shape)
                .map(|((&from, s), &to)| if from == 1 && to != 1 { Stride::C(0) } else { s.clone() })
                .collect();
            return Ok(Tile::new(shape, a.dtype, Node::Mem(Mem { strides, whole: None, ..m.clone() })));
        }
        // A costly operand would be recomputed for every copy: compute it once.
        let a = if a.is_costly() {
            let pos = self.cur.map_or(0, |c| self.plan.pos[c.0 as usize]);
            let m = self.materialize_at(a, pos, pos)?;
            a.with_node(Node::Mem(m))
        } else {
            a.clone()
        };
        Ok(broadcast_to(&a, shape))
    }

    pub(super) fn transpose(&mut self, a: &Tile) -> R<Tile> {
        let r = a.shape.len();
        if r < 2 || a.rank0 {
            return Err(self.err("tile.transpose needs a tile of rank 2 or more"));
        }
        let m = match a.mem() {
            Some(m) => m.clone(),
            None => self.materialize(a)?,
        };
        let mut shape = a.shape.clone();
        shape.swap(r - 2, r - 1);
        let mut strides = m.strides.clone();
        strides.swap(r - 2, r - 1);
        Ok(Tile::new(&shape, a.dtype, Node::Mem(Mem { strides, whole: None, ..m })))
    }

    /// The same elements in another shape (row-major order), through a copy.
    pub(super) fn reshape_copy(&mut self, a: &Tile, shape: &[i64]) -> R<Tile> {
        let m = match a.mem() {
            Some(m) if m.strides == contiguous(&a.shape) => m.clone(),
            _ => self.materialize_fresh(a)?,
        };
        Ok(Tile::new(shape, a.dtype, Node::Mem(Mem { strides: contiguous(shape), whole: None, ..m })))
    }

    // ----- views and memory --------------------------------------------------------------

    pub(super) fn view(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        let tensor = self.tensor_param(op.operands[0])?;
        let rank = tensor.dims.len();
        let offsets: Vec<String> = op.operands[1..].iter().map(|&v| self.scalar(v)).collect::<R<_>>()?;
        if offsets.len() != rank {
            return Err(self.err(format!("tile.view of a rank-{rank} tensor with {} offsets", offsets.len())));
        }
        let sizes: Vec<i64> = match op.attr("sizes") {
            Some(Attr::Dims(d)) => d.iter().map(|d| d.as_const()).collect::<Option<_>>(),
            Some(Attr::Ints(v)) => Some(v.clone()),
            _ => None,
        }
        .filter(|s: &Vec<i64>| s.len() == rank && s.iter().all(|&x| x >= 0))
        .ok_or_else(|| self.err(format!("tile.view needs {rank} constant `sizes`")))?;
        let squeeze: Vec<usize> = match op.attr("squeeze") {
            Some(Attr::Ints(v)) => v.iter().map(|&x| x as usize).collect(),
            _ => Vec::new(),
        };
        if let Some(&d) = squeeze.iter().find(|&&d| d >= rank || sizes[d] != 1) {
            return Err(self.err(format!("tile.view squeezes dim {d}, which is not a size-1 dim")));
        }
        let kept: Vec<usize> = (0..rank).filter(|d| !squeeze.contains(d)).collect();
        // The window is inside the tensor when 0 <= off and off + size <= dim per dim.
        let mut inb = "true".to_string();
        for d in 0..rank {
            let lo_ok = self.b.sle("0", &offsets[d]);
            let end = self.b.add(&offsets[d], &sizes[d].to_string());
            let hi_ok = self.b.sle(&end, &tensor.dims[d]);
            let ok = self.b.and1(&lo_ok, &hi_ok);
            inb = self.b.and1(&inb, &ok);
        }
        let v = ViewV { tensor, offsets, sizes, kept, inb };
        self.set(op.results[0], Val::View(Rc::new(v)));
        Ok(())
    }

    pub(super) fn load_shared(&mut self, id: OpId) -> R<()> {
        let op = self.f.op(id);
        let r = op.results[0];
        let src = self.smem(op.operands[0])?;
        let shape = self.tile_shape(r)?;
        let dtype = self.f.ty(r).dtype().unwrap_or(DType::F32);
        let transpose = matches!(op.attr("transpose"), Some(Attr::Bool(true)));
        let stored: Vec<i64> = if transpose && src.dims.len() >= 2 {
            let mut s = src.dims.clone();
            let n = s.len();
            s.swap(n - 2, n - 1);
            s
        } else {
            src.dims.clone()
        };
        let mut m = smem_mem(&src);
        if transpose {
            let n = m.strides.len();
            if n < 2 {
                return Err(self.err("tile.load_shared transpose of a 1-D buffer"));
            }
            m.strides.swap(n - 2, n - 1);
        }
        let m = if stored != shape {
            if stored.iter().product::<i64>() != shape.iter().product::<i64>() || transpose {
                return Err(self.err(format!("tile.load_shared of {} as {}", self.f.ty(op.operands[0]), self.f.ty(r))));
            }
            Mem { strides: contiguous(&shape), ..m }
        } else {
            m
        };
        let t = Tile::new(&shape, dtype, Node::Mem(m));
        // Reading in place is right only while no copy or store overwrites the buffer.
        let pos = self.plan.pos[id.0 as usize];
        let last = self.plan.last_use[r.0 as usize];
        if self.plan.written_between(src.root, pos, last) {
            let m = self.materialize_fresh(&t)?;
            self.set(r, Val::Tile(t.with_node(Node::Mem(m))));
        } else {
            self.set(r, Val::Tile(t));
        }
        Ok(())
    }

    /// A fresh private buffer for a tile of `shape`.
    pub(in crate::llvm) fn alloc_tile(&mut self, shape: &[i64], dtype: DType) -> Mem {
        let st = Storage::private(dtype);
        let n: i64 = shape.iter().product::<i64>().max(1);
        let ptr = self.b.alloca("buf", st.elem(), n as u64);
        let root = Root::Buf(self.next_buf);
        self.next_buf += 1;
        Mem { ptr, strides: contiguous(shape), st, roots: vec![root], whole: Some(root) }
    }

    /// The tile in memory: itself if it is, else computed into a fresh buffer.
    pub(in crate::llvm) fn materialize(&mut self, t: &Tile) -> R<Mem> {
        match t.mem() {
            Some(m) => Ok(m.clone()),
            None => self.materialize_fresh(t),
        }
    }

    /// Materializes a tile defined at `pos` and read until `last`. A plain load of a
    /// read-only region is read in place when the window is inside the tensor.
    pub(in crate::llvm) fn materialize_at(&mut self, t: &Tile, pos: u32, last: u32) -> R<Mem> {
        if let Node::Load { view, mask: None, .. } = &*t.node {
            let root = Root::Tensor(view.tensor.param);
            let same_type = Storage::of_tensor(t.dtype) == view.tensor.st && t.dtype == view.tensor.dtype;
            if same_type && !self.plan.written_between(root, pos, last) {
                return self.alias_load(t, view);
            }
        }
        self.materialize(t)
    }

    /// A load read in place when its window is inside the tensor, else copied (with the
    /// fill value outside) into a buffer of the tensor's storage.
    pub(super) fn alias_load(&mut self, t: &Tile, view: &Rc<ViewV>) -> R<Mem> {
        let tensor = view.tensor.clone();
        let st = tensor.st;
        let shape = t.shape.clone();
        let inb = view.inb.clone();
        if inb == "true" {
            let (ptr, strides) = self.view_window(view, &shape);
            return Ok(Mem { ptr, strides, st, roots: vec![Root::Tensor(tensor.param)], whole: None });
        }
        let n: i64 = t.numel().max(1);
        let buf = self.b.alloca("ld", st.elem(), n as u64);
        let broot = Root::Buf(self.next_buf);
        self.next_buf += 1;
        let cont = contiguous(&shape);
        let fast_l = self.b.label("inplace");
        let slow_l = self.b.label("copy");
        let join = self.b.label("loaded");
        self.b.cond_br(&inb, &fast_l, &slow_l);
        self.b.start(&fast_l);
        let (fptr, fstrides) = self.view_window(view, &shape);
        let fast_end = self.b.cur_label();
        self.b.br(&join);
        self.b.start(&slow_l);
        let bm = Mem { ptr: buf.clone(), strides: cont.clone(), st, roots: vec![broot], whole: None };
        self.fill(t, &bm, Some(false))?;
        let slow_end = self.b.cur_label();
        self.b.br(&join);
        self.b.start(&join);
        let ety = format!("{}*", st.elem().ir());
        let ptr = self.b.val("win", format!("phi {ety} [ {fptr}, {fast_end} ], [ {buf}, {slow_end} ]"));
        let mut strides = Vec::new();
        for (fs, cs) in fstrides.iter().zip(&cont) {
            if fs == cs {
                strides.push(fs.clone());
            } else {
                let v = self.b.val("st", format!("phi i64 [ {}, {fast_end} ], [ {}, {slow_end} ]", fs.val(), cs.val()));
                strides.push(Stride::D(v));
            }
        }
        Ok(Mem { ptr, strides, st, roots: vec![Root::Tensor(tensor.param), broot], whole: None })
    }

    /// The address of a view's first element and the strides of its kept dims.
    pub(super) fn view_window(&mut self, view: &ViewV, shape: &[i64]) -> (String, Vec<Stride>) {
        let t = &view.tensor;
        let mut off = "0".to_string();
        for (d, o) in view.offsets.iter().enumerate() {
            let term = self.b.mul(o, &t.strides[d]);
            off = self.b.add(&off, &term);
        }
        let ptr = self.b.gep(t.st.elem(), &t.ptr, &off);
        let mut strides: Vec<Stride> = view
            .kept
            .iter()
            .map(|&d| match t.strides[d].parse::<i64>() {
                Ok(c) => Stride::C(c),
                Err(_) => Stride::D(t.strides[d].clone()),
            })
            .collect();
        if strides.is_empty() {
            strides = vec![Stride::C(1); shape.len()];
        }
        (ptr, strides)
    }

    pub(in crate::llvm) fn materialize_fresh(&mut self, t: &Tile) -> R<Mem> {
        let m = self.alloc_tile(&t.shape, t.dtype);
        self.materialize_into(t, &m)?;
        Ok(m)
    }

    /// Computes every element of `t` into `dst` (of the same shape).
    pub(in crate::llvm) fn materialize_into(&mut self, t: &Tile, dst: &Mem) -> R<()> {
        self.fill(t, dst, None)
    }

    /// `fill` with the fast/slow versions chosen at run time, or one of them forced.
    pub(super) fn fill(&mut self, t: &Tile, dst: &Mem, force: Option<bool>) -> R<()> {
        let inbs = match force {
            Some(_) => Vec::new(),
            None => t.inbounds_flags(),
        };
        let forced = force.unwrap_or(true);
        let t = t.clone();
        let dst = dst.clone();
        self.fused(&t.shape.clone(), &inbs, &mut |l, idx, w, fast| {
            let fast = fast && forced;
            let v = l.eval(&t, idx, w, fast)?;
            l.store_mem(&dst, t.dtype, idx, w, &v);
            Ok(())
        })
    }

    /// Stores registers `v` (`w` lanes of `dtype`) at `idx` of a tile in memory.
    pub(in crate::llvm) fn store_mem(&mut self, m: &Mem, dtype: DType, idx: &[String], w: u32, v: &str) {
        let rt = VTy::new(numerics::reg(dtype), w);
        let s = numerics::to_storage(&mut self.b, m.st, rt, v);
        let se = m.st.elem();
        let st = VTy::new(se, w);
        let n = idx.len();
        let off = self.outer_offset(idx, &m.strides);
        match &m.strides[n - 1] {
            Stride::C(1) => {
                let off = self.b.add(&off, &idx[n - 1]);
                let p = self.b.gep(se, &m.ptr, &off);
                let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", se.ir(), st.ir()));
                self.b.emit(format!("store {} {s}, {}* {vp}, align {}", st.ir(), st.ir(), se.bytes()));
            }
            last => {
                let ptrs = self.lane_ptrs(se, &m.ptr, &off, &idx[n - 1], &last.val(), w);
                let mask = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_scatter(st, &s, &ptrs, &mask);
            }
        }
    }

    /// `sum(idx[d] * strides[d])` over all dims but the last (the chunk's own).
    pub(super) fn outer_offset(&mut self, idx: &[String], strides: &[Stride]) -> String {
        let mut off = "0".to_string();
        for (i, s) in idx.iter().zip(strides).take(idx.len().saturating_sub(1)) {
            let term = self.b.mul(i, &s.val());
            off = self.b.add(&off, &term);
        }
        off
    }

    /// The element offset of tensor coordinates.
    pub(super) fn tensor_offset(&mut self, tensor: &TensorV, coords: &[String]) -> String {
        let mut off = "0".to_string();
        for (c, s) in coords.iter().zip(&tensor.strides) {
            let term = self.b.mul(c, s);
            off = self.b.add(&off, &term);
        }
        off
    }

    /// Whether every coordinate but the lane dim's is inside the tensor.
    pub(super) fn outer_inside(&mut self, tensor: &TensorV, coords: &[String], lane_dim: Option<usize>) -> String {
        let mut ok = "true".to_string();
        for (d, (c, dim)) in coords.iter().zip(&tensor.dims).enumerate() {
            if Some(d) != lane_dim {
                let inside = self.b.val("in", format!("icmp ult i64 {c}, {dim}"));
                ok = self.b.and1(&ok, &inside);
            }
        }
        ok
    }

    /// Per lane, whether its element is inside the tensor: the lane's coordinate below
    /// the lane dim's size and every other coordinate inside (`outer_inside`). The
    /// guard of masked loads and stores alike.
    pub(super) fn lanes_inside(
        &mut self,
        tensor: &TensorV,
        coords: &[String],
        lane_dim: Option<usize>,
        w: u32,
    ) -> String {
        let outer = self.outer_inside(tensor, coords, lane_dim);
        let i64v = VTy::new(Elem::I64, w);
        let b1 = VTy::new(Elem::I1, w);
        let mut lane_ok = match lane_dim {
            Some(d) => {
                let cs = self.b.splat(i64v, &coords[d]);
                let lanes = self.b.val("lc", format!("add {} {cs}, {}", i64v.ir(), iota(Elem::I64, w)));
                let ds = self.b.splat(i64v, &tensor.dims[d]);
                self.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()))
            }
            None => lit(b1, 1.0),
        };
        if outer != "true" {
            let os = self.b.splat(b1, &outer);
            lane_ok = self.b.val("in", format!("and {} {lane_ok}, {os}", b1.ir()));
        }
        lane_ok
    }

    /// Pointers `base + off + (j + lane) * stride` for `w` lanes.
    pub(super) fn lane_ptrs(&mut self, e: Elem, base: &str, off: &str, j: &str, stride: &str, w: u32) -> String {
        let i64v = VTy::new(Elem::I64, w);
        let js = self.b.splat(i64v, j);
        let lanes = self.b.val("lane", format!("add {} {js}, {}", i64v.ir(), iota(Elem::I64, w)));
        let ss = self.b.splat(i64v, stride);
        let scaled = self.b.val("lo", format!("mul {} {lanes}, {ss}", i64v.ir()));
        let os = self.b.splat(i64v, off);
        let offs = self.b.val("lo", format!("add {} {scaled}, {os}", i64v.ir()));
        self.b.val("ptrs", format!("getelementptr {t}, {t}* {base}, {} {offs}", i64v.ir(), t = e.ir()))
    }

    /// `tile.atomic_add` of a chunk: per lane, an `atomicrmw` of the lane's value into its
    /// element (the programs run on several threads), behind a branch where a mask may
    /// be off (a masked lane's address may lie outside the tensor).
    pub(super) fn atomic_add_lanes(&mut self, st: VTy, v: &str, ptrs: &str, mask: Option<&str>) {
        let e = st.elem;
        let op = if e.is_float() { "fadd" } else { "add" };
        let pointers = format!("<{} x {}*>", st.w, e.ir());
        for k in 0..st.w {
            let p = self.b.val("ap", format!("extractelement {pointers} {ptrs}, i32 {k}"));
            let x = self.b.val("ax", format!("extractelement {} {v}, i32 {k}", st.ir()));
            let join = mask.map(|m| {
                let on = self.b.val("am", format!("extractelement {} {m}, i32 {k}", st.with(Elem::I1).ir()));
                let (add, join) = (self.b.label("atomic"), self.b.label("added"));
                self.b.cond_br(&on, &add, &join);
                self.b.start(&add);
                join
            });
            self.b.val("old", format!("atomicrmw {op} {t}* {p}, {t} {x} monotonic", t = e.ir()));
            if let Some(join) = join {
                self.b.br(&join);
                self.b.start(&join);
            }
        }
    }

    pub(super) fn masked_scatter(&mut self, st: VTy, v: &str, ptrs: &str, mask: &str) {
        let pt = format!("<{} x {}*>", st.w, st.elem.ir());
        let name = format!("llvm.masked.scatter.{}.v{}p0{}", st.mangle(), st.w, st.elem.mangle());
        self.b.call(
            "",
            &name,
            "void",
            &[
                (st.ir(), v.to_string()),
                (pt, ptrs.to_string()),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
            ],
        );
    }

    pub(super) fn masked_gather(&mut self, st: VTy, ptrs: &str, mask: &str) -> String {
        let pt = format!("<{} x {}*>", st.w, st.elem.ir());
        let name = format!("llvm.masked.gather.{}.v{}p0{}", st.mangle(), st.w, st.elem.mangle());
        self.b.call(
            "g",
            &name,
            &st.ir(),
            &[
                (pt, ptrs.to_string()),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
                (st.ir(), "undef".into()),
            ],
        )
    }

    pub(super) fn masked_load(&mut self, st: VTy, p: &str, mask: &str) -> String {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        let name = format!("llvm.masked.load.{}.{}", st.mangle(), st.mangle_ptr());
        self.b.call(
            "ml",
            &name,
            &st.ir(),
            &[
                (format!("{}*", st.ir()), vp),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
                (st.ir(), "undef".into()),
            ],
        )
    }

    pub(super) fn masked_store(&mut self, st: VTy, v: &str, p: &str, mask: &str) {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        let name = format!("llvm.masked.store.{}.{}", st.mangle(), st.mangle_ptr());
        self.b.call(
            "",
            &name,
            "void",
            &[
                (st.ir(), v.to_string()),
                (format!("{}*", st.ir()), vp),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
            ],
        );
    }

    pub(super) fn plain_load(&mut self, st: VTy, p: &str) -> String {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        self.b.val("ld", format!("load {}, {}* {vp}, align {}", st.ir(), st.ir(), st.elem.bytes()))
    }

    // ----- fused loops -----------------------------------------------------------------
}
