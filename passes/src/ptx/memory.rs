//! Global memory: `tile.load/store/gather/scatter` (`shared` has `tile.cp_async` and
//! `tile.load_shared/store_shared`; dot operands go to `dot::ldmatrix`).
//!
//! Global accesses check every coordinate against the tensor (`setp.lt.u64` of the
//! signed position against the dim catches both ends) and predicate the access. Runs
//! of elements that are contiguous in memory and in registers become vector accesses
//! under a uniform run-time test (pointer, offset and row length aligned); the test
//! falls back to the element-by-element code, which handles every ragged edge.

use std::collections::HashMap;

use tessera_frontend::check::DType;

use super::builder::{Class, Operand, Reg};
use super::emit::{mov, pack_bytes, Emitter, Repr, SmemVal, TileVal, Val, ViewVal, R};
use super::numerics::{from_storage, materialize, mem_access, mem_bytes, per_word, to_storage, wide_class};
use super::threadmap::ThreadMap;
use crate::ir::{Attr, Op};

/// Where each register's element is in global memory.
struct Plan {
    /// Per register: a row address (`b64`) and a byte offset.
    addr: Vec<(Reg, i64)>,
    /// Per register: how to tell that it is in bounds.
    pred: Vec<InBounds>,
    /// Elements per vector access and the uniform test that allows it.
    vector: Option<(usize, Reg)>,
}

/// One register's bounds check, made where its access is issued. Made up front (as it
/// was), the predicates of a wide tile (128 for a 64x256 `wgmma` accumulator's thread)
/// are live together across both paths of `vector_or_elements`, and ptxas holds them in
/// registers: a bias epilogue over such a tile spilled at 255 registers, and a 64x64
/// `mma.sync` GEMM took 80 on sm_90a.
#[derive(Clone)]
struct InBounds {
    /// What does not change along the tile (dims the view squeezes, dims whose
    /// coordinate is computed per register): computed once.
    fixed: Option<Reg>,
    /// Per view dim with a thread part: `position + constant < dim`.
    checks: Vec<DimCheck>,
}

#[derive(Copy, Clone)]
struct DimCheck {
    /// The dim's position as the access's addresses use it (`offset + widen(thread
    /// part)`, 64-bit, made once).
    position: Operand,
    offset: Operand,
    /// The 32-bit thread part, which the prologue computes once.
    thread_part: Operand,
    constant: i64,
    dim: Reg,
}

/// Where a bounds check takes its position from.
#[derive(Copy, Clone, PartialEq, Eq)]
enum CheckFrom {
    /// The 64-bit position the addresses share.
    Position,
    /// Offset and thread part, widened again at every check: nothing 64-bit lives from
    /// one access to the next.
    ThreadPart,
}

impl Emitter<'_> {
    /// The predicate of `check`, computed here (every access its own). Loads check from
    /// the thread part and stores from the shared position: of the four combinations,
    /// the one that needed the fewest registers over the register table's 42 kernels
    /// (`passes/tests/registers.rs`), and the only one with no spill in it.
    fn in_bounds(&mut self, check: &InBounds, from: CheckFrom) -> Reg {
        let mut ok = check.fixed;
        for c in &check.checks {
            let at = match from {
                CheckFrom::Position => c.position,
                CheckFrom::ThreadPart => {
                    let wide = self.widen_u32(c.thread_part);
                    self.add64(c.offset, wide)
                }
            };
            let at = self.add64(at, Operand::Int(c.constant));
            let p = self.in_range(at, c.dim);
            ok = Some(self.and_pred(ok, p));
        }
        ok.unwrap_or_else(|| always(&mut self.b))
    }

    pub(super) fn view_of(&self, op: &Op, v: crate::ir::ValueId) -> R<ViewVal> {
        match self.val(op, v)? {
            Val::View(view) => Ok(view.clone()),
            _ => Err(self.fail(op, "the operand is not a view")),
        }
    }

    pub(super) fn smem_of(&self, op: &Op, v: crate::ir::ValueId) -> R<SmemVal> {
        match self.val(op, v)? {
            Val::Smem(s) => Ok(s.clone()),
            _ => Err(self.fail(op, "the operand is not a shared buffer")),
        }
    }

    /// A 32-bit index as a 64-bit operand: zero-extended, a constant stays one.
    pub(super) fn widen_u32(&mut self, narrow: Operand) -> Operand {
        match narrow {
            Operand::Int(v) => Operand::Int(v),
            r => {
                let w = self.b.reg(Class::B64);
                self.b.ins(format!("cvt.u64.u32 {w}, {r}"));
                Operand::Reg(w)
            }
        }
    }

    /// `a + b` for 64-bit operands (folding immediates).
    pub(super) fn add64(&mut self, a: Operand, b: Operand) -> Operand {
        match (a, b) {
            (Operand::Int(x), Operand::Int(y)) => Operand::Int(x + y),
            (x, Operand::Int(0)) | (Operand::Int(0), x) => x,
            (Operand::Int(x), y) => self.add64(y, Operand::Int(x)),
            (x, y) => {
                let r = self.b.reg(Class::B64);
                self.b.ins(format!("add.s64 {r}, {x}, {y}"));
                Operand::Reg(r)
            }
        }
    }

    /// `acc + x * y` for 64-bit operands.
    pub(super) fn mad64(&mut self, x: Operand, y: Operand, acc: Operand) -> Operand {
        match (x, y) {
            (Operand::Int(0), _) | (_, Operand::Int(0)) => acc,
            (Operand::Int(a), Operand::Int(b)) => self.add64(acc, Operand::Int(a * b)),
            (Operand::Int(a), r) | (r, Operand::Int(a)) if a == 1 => self.add64(acc, r),
            (Operand::Int(a), r) | (r, Operand::Int(a)) => {
                let out = self.b.reg(Class::B64);
                let acc = materialize(&mut self.b, Class::B64, acc);
                self.b.ins(format!("mad.lo.s64 {out}, {r}, {a}, {acc}"));
                Operand::Reg(out)
            }
            (a, b) => {
                let out = self.b.reg(Class::B64);
                let acc = materialize(&mut self.b, Class::B64, acc);
                self.b.ins(format!("mad.lo.s64 {out}, {a}, {b}, {acc}"));
                Operand::Reg(out)
            }
        }
    }

    /// `0 <= pos < dim` as one unsigned comparison.
    pub(super) fn in_range(&mut self, pos: Operand, dim: Reg) -> Reg {
        let p = self.b.reg(Class::Pred);
        let pos = materialize(&mut self.b, Class::B64, pos);
        self.b.ins(format!("setp.lt.u64 {p}, {pos}, {dim}"));
        p
    }

    pub(super) fn and_pred(&mut self, a: Option<Reg>, b: Reg) -> Reg {
        match a {
            None => b,
            Some(a) => {
                let r = self.b.reg(Class::Pred);
                self.b.ins(format!("and.pred {r}, {a}, {b}"));
                r
            }
        }
    }

    /// A byte stride of tensor dim `d`.
    pub(super) fn stride_bytes(&mut self, tensor: usize, d: usize, eb: i64) -> Operand {
        match self.stride(tensor, d) {
            Operand::Int(s) => Operand::Int(s * eb),
            s => {
                if let Some(r) = self.stride_bytes.get(&(tensor, d, eb)) {
                    return *r;
                }
                let r = self.b.in_prologue(|b| {
                    let r = b.reg(Class::B64);
                    b.ins(format!("mul.lo.s64 {r}, {s}, {eb}"));
                    Operand::Reg(r)
                });
                self.stride_bytes.insert((tensor, d, eb), r);
                r
            }
        }
    }

    /// The address of a view's first element from the tensor dims it squeezes (fixes to
    /// one index), and the uniform bounds test of those indices.
    pub(super) fn squeezed_base(&mut self, view: &ViewVal, eb: i64) -> (Operand, Option<Reg>) {
        let t = view.tensor;
        let mut base = Operand::Reg(self.tensors[t].ptr);
        let mut squeezed_ok: Option<Reg> = None;
        for j in 0..self.tensors[t].dims.len() {
            if view.dims.contains(&j) {
                continue;
            }
            let sb = self.stride_bytes(t, j, eb);
            base = self.mad64(view.offsets[j], sb, base);
            let dim = self.tensors[t].dims[j];
            let p = self.in_range(view.offsets[j], dim);
            squeezed_ok = Some(self.and_pred(squeezed_ok, p));
        }
        (base, squeezed_ok)
    }

    /// Addresses, bounds and vectorization of a tile's elements in a view.
    fn global_plan(&mut self, op: &Op, view: &ViewVal, map: &ThreadMap, dtype: DType, allow_vector: bool) -> R<Plan> {
        let t = view.tensor;
        let tensor_rank = self.tensors[t].dims.len();
        if view.dims.len() != map.rank() {
            return Err(
                self.fail(op, format!("a view of rank {} holds a tile of rank {}", view.dims.len(), map.rank()))
            );
        }
        let eb = mem_bytes(dtype) as i64;
        let ptr = self.tensors[t].ptr;
        // The view dim along the tensor's contiguous dim (byte offsets become immediates).
        let contiguous = view.dims.iter().position(|&j| j + 1 == tensor_rank).filter(|&d| !map.wraps(d));
        // Positions of each view dim: offset + thread part (non-wrapping dims).
        let mut pos: Vec<Option<Operand>> = Vec::new();
        // The 32-bit thread part of each non-wrapping dim (the prologue computes it once).
        let mut parts: Vec<Option<Operand>> = Vec::new();
        for (d, &j) in view.dims.iter().enumerate() {
            if map.wraps(d) {
                pos.push(None);
                parts.push(None);
            } else {
                let part = map.thread_part(d);
                parts.push(Some(self.exprs.emit(&mut self.b, &part)));
                let wide = self.exprs.emit_wide(&mut self.b, &part);
                let p = self.add64(view.offsets[j], wide);
                pos.push(Some(p));
            }
        }
        let (mut base, squeezed_ok) = self.squeezed_base(view, eb);
        if let Some(c) = contiguous {
            let p = pos[c].expect("the contiguous dim does not wrap");
            base = self.mad64(p, Operand::Int(eb), base);
        }
        // Per row (the position and constant of every non-contiguous dim): its address.
        type RowKey = Vec<(Operand, i64)>;
        let mut rows: HashMap<RowKey, Reg> = HashMap::new();
        let mut dim_preds: HashMap<(usize, Operand, i64), Reg> = HashMap::new();
        let mut addr = Vec::with_capacity(map.len());
        let mut pred = Vec::with_capacity(map.len());
        for i in 0..map.len() {
            // The position operand and constant of every view dim for this register.
            let mut coords: Vec<(Operand, i64)> = Vec::new();
            for (d, p) in pos.iter().enumerate() {
                let j = view.dims[d];
                match *p {
                    Some(p) => coords.push((p, map.regs[i][d])),
                    None => {
                        // A wrapping dim: this register's coordinate, computed in place.
                        let e = map.coord_expr(i, d);
                        let narrow = self.exprs.emit_inline(&mut self.b, &e);
                        let wide = self.widen_u32(narrow);
                        let p = self.add64(view.offsets[j], wide);
                        coords.push((p, 0));
                    }
                }
            }
            let key: Vec<(Operand, i64)> =
                coords.iter().enumerate().filter(|(d, _)| Some(*d) != contiguous).map(|(_, c)| *c).collect();
            let row = match rows.get(&key) {
                Some(r) => *r,
                None => {
                    let mut a = base;
                    for (d, &(p, c)) in coords.iter().enumerate() {
                        if Some(d) == contiguous {
                            continue;
                        }
                        let at = self.add64(p, Operand::Int(c));
                        let sb = self.stride_bytes(t, view.dims[d], eb);
                        a = self.mad64(at, sb, a);
                    }
                    let a = materialize(&mut self.b, Class::B64, a);
                    rows.insert(key, a);
                    a
                }
            };
            // Bounds: wrapping dims (their coordinate is this register's own) now, the
            // others where the access is issued.
            let mut check = InBounds { fixed: squeezed_ok, checks: Vec::new() };
            for (d, &(p, c)) in coords.iter().enumerate() {
                let j = view.dims[d];
                let dim = self.tensors[t].dims[j];
                match parts[d] {
                    Some(thread_part) => check.checks.push(DimCheck {
                        position: p,
                        offset: view.offsets[j],
                        thread_part,
                        constant: c,
                        dim,
                    }),
                    None => {
                        let pd = self.dim_pred(t, j, d, p, c, &mut dim_preds);
                        check.fixed = Some(self.and_pred(check.fixed, pd));
                    }
                }
            }
            let imm = match contiguous {
                Some(c) => coords[c].1 * eb,
                None => 0,
            };
            addr.push((row, imm));
            pred.push(check);
        }
        let vector = match (allow_vector, contiguous) {
            (true, Some(c)) => self.vector_width(map, c, eb, &addr).map(|v| (v, c)),
            _ => None,
        };
        let vector = match vector {
            Some((v, c)) => {
                let j = view.dims[c];
                let dim = self.tensors[t].dims[j];
                let off = view.offsets[j];
                let ok = self.alignment_test(ptr, off, dim, (v as i64) * eb, eb);
                Some((v, ok))
            }
            None => None,
        };
        Ok(Plan { addr, pred, vector })
    }

    fn dim_pred(
        &mut self,
        t: usize,
        j: usize,
        d: usize,
        p: Operand,
        c: i64,
        cache: &mut HashMap<(usize, Operand, i64), Reg>,
    ) -> Reg {
        if let Some(r) = cache.get(&(d, p, c)) {
            return *r;
        }
        let at = self.add64(p, Operand::Int(c));
        let dim = self.tensors[t].dims[j];
        let r = self.in_range(at, dim);
        cache.insert((d, p, c), r);
        r
    }

    /// The widest vector (elements) every register group allows, if any.
    fn vector_width(&self, map: &ThreadMap, c: usize, eb: i64, addr: &[(Reg, i64)]) -> Option<usize> {
        for bytes in [16, 8, 4] {
            let v = (bytes / eb) as usize;
            if v < 2 || bytes % eb != 0 || !map.len().is_multiple_of(v) {
                continue;
            }
            if map.bits.iter().any(|s| s[c] % v as i64 != 0) {
                continue;
            }
            let ok = (0..map.len()).step_by(v).all(|i| {
                map.regs[i][c] % v as i64 == 0
                    && (1..v).all(|k| addr[i + k].0 == addr[i].0 && addr[i + k].1 == addr[i].1 + k as i64 * eb)
            });
            if ok {
                return Some(v);
            }
        }
        None
    }

    /// Uniform: pointer, offset and row length are multiples of the vector.
    pub(super) fn alignment_test(&mut self, ptr: Reg, off: Operand, dim: Reg, vector_bytes: i64, eb: i64) -> Reg {
        let b = &mut self.b;
        let m = b.reg(Class::B64);
        let off_bytes = match off {
            Operand::Int(o) => Operand::Int(o * eb),
            o => {
                let r = b.reg(Class::B64);
                b.ins(format!("mul.lo.s64 {r}, {o}, {eb}"));
                Operand::Reg(r)
            }
        };
        b.ins(format!("mul.lo.s64 {m}, {dim}, {eb}"));
        b.ins(format!("or.b64 {m}, {m}, {ptr}"));
        b.ins(format!("or.b64 {m}, {m}, {off_bytes}"));
        b.ins(format!("and.b64 {m}, {m}, {}", vector_bytes - 1));
        let p = b.reg(Class::Pred);
        b.ins(format!("setp.eq.s64 {p}, {m}, 0"));
        p
    }

    /// The shape of every global access: with a vector width `v` in the plan, groups of
    /// `v` elements go through `group` (first element, `v`) when the runtime alignment
    /// check passed, and jump over the element-by-element path, which runs otherwise
    /// (and always without a vector width), one `element` call per element.
    fn vector_or_elements(
        &mut self,
        vector: Option<(usize, Reg)>,
        elements: usize,
        done_name: &str,
        mut group: impl FnMut(&mut Self, usize, usize),
        mut element: impl FnMut(&mut Self, usize),
    ) {
        let scalar_label = self.b.label("scalar");
        let done = self.b.label(done_name);
        if let Some((v, ok)) = vector {
            self.b.ins_if(ok, true, format!("bra.uni {scalar_label}"));
            for g in (0..elements).step_by(v) {
                group(self, g, v);
            }
            self.b.ins(format!("bra.uni {done}"));
            self.b.place_label(&scalar_label);
        }
        for i in 0..elements {
            element(self, i);
        }
        if vector.is_some() {
            self.b.place_label(&done);
        }
    }

    /// Optional mask operand (a bool tile in the same layout).
    fn mask_of(&mut self, op: &Op, index: usize, map_len: usize) -> R<Option<Vec<Operand>>> {
        let Some(&m) = op.operands.get(index) else { return Ok(None) };
        let t = self.tile(op, m)?;
        let w = self.wide(&t);
        if w.len() != map_len {
            return Err(self.fail(op, "the mask's layout differs from the data's"));
        }
        Ok(Some(w))
    }

    pub(super) fn load(&mut self, op: &Op) -> R<()> {
        let view = self.view_of(op, op.operands[0])?;
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        let map = self.map(op, &layout, &shape)?;
        let plan = self.global_plan(op, &view, &map, dtype, true)?;
        let other = op.attr("other").and_then(Attr::as_float).unwrap_or(0.0);
        let other_wide = super::emit::const_operand(dtype, other);
        let target = self.target;
        let other_bits = to_storage(&mut self.b, target, dtype, other_wide);
        let (ty, class) = mem_access(dtype);
        let out_class = wide_class(dtype);
        let out: Vec<Reg> = (0..map.len()).map(|_| self.b.reg(out_class)).collect();
        let eb = mem_bytes(dtype) as usize;
        self.vector_or_elements(
            plan.vector,
            map.len(),
            "loaded",
            |e, g, v| {
                let (row, imm) = plan.addr[g];
                let p = e.in_bounds(&plan.pred[g], CheckFrom::ThreadPart);
                let storage = e.vector_load(p, row, imm, v, eb, ty, class, other_bits);
                for (k, s) in storage.into_iter().enumerate() {
                    let w = from_storage(&mut e.b, target, dtype, s);
                    mov(&mut e.b, out[g + k], w);
                }
            },
            |e, i| {
                let s = e.b.reg(class);
                mov(&mut e.b, s, other_bits);
                let (row, imm) = plan.addr[i];
                let p = e.in_bounds(&plan.pred[i], CheckFrom::ThreadPart);
                e.b.ins_if(p, false, format!("ld.global.{ty} {s}, [{row}+{imm}]"));
                let w = from_storage(&mut e.b, target, dtype, s);
                mov(&mut e.b, out[i], w);
            },
        );
        let mut values: Vec<Operand> = out.iter().map(|&r| Operand::Reg(r)).collect();
        if let Some(mask) = self.mask_of(op, 1, map.len())? {
            for (x, m) in values.iter_mut().zip(mask) {
                let m = materialize(&mut self.b, Class::Pred, m);
                *x = self.select(dtype, m, *x, other_wide);
            }
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(values) }));
        Ok(())
    }

    /// `c ? a : b` for wide elements.
    pub(super) fn select(&mut self, dtype: DType, c: Reg, a: Operand, b: Operand) -> Operand {
        let class = wide_class(dtype);
        let r = self.b.reg(class);
        let ty = match class {
            Class::F32 => "f32",
            Class::F64 => "f64",
            Class::B64 => "b64",
            Class::Pred => {
                let (a, b2) = (materialize(&mut self.b, Class::Pred, a), materialize(&mut self.b, Class::Pred, b));
                return Operand::Reg(super::emit::select_pred(&mut self.b, c, a, b2));
            }
            _ => "b32",
        };
        self.b.ins(format!("selp.{ty} {r}, {a}, {b}, {c}"));
        Operand::Reg(r)
    }

    /// One predicated vector load of `v` elements; returns each element's storage.
    #[allow(clippy::too_many_arguments)]
    fn vector_load(
        &mut self,
        p: Reg,
        row: Reg,
        imm: i64,
        v: usize,
        eb: usize,
        ty: &str,
        class: Class,
        other_bits: Operand,
    ) -> Vec<Reg> {
        let b = &mut self.b;
        if eb >= 4 {
            let regs: Vec<Reg> = (0..v).map(|_| b.reg(class)).collect();
            for &r in &regs {
                mov(b, r, other_bits);
            }
            let list = regs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
            b.ins_if(p, false, format!("ld.global.v{v}.{ty} {{{list}}}, [{row}+{imm}]"));
            return regs;
        }
        // 16- and 8-bit elements travel in b32 words.
        let words = v * eb / 4;
        let per = 4 / eb;
        let other = other_bits.as_int().unwrap_or(0) & ((1 << (8 * eb)) - 1);
        let fill = (0..per).fold(0i64, |acc, k| acc | (other << (8 * eb * k)));
        let regs: Vec<Reg> = (0..words).map(|_| b.reg(Class::B32)).collect();
        for &r in &regs {
            b.ins(format!("mov.b32 {r}, {fill}"));
        }
        let list = regs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
        let vec = if words == 1 { String::new() } else { format!(".v{words}") };
        b.ins_if(p, false, format!("ld.global{vec}.b32 {{{list}}}, [{row}+{imm}]").replace(".b32 {", ".b32 {"));
        let mut out = Vec::new();
        for w in regs {
            if eb == 2 {
                let (lo, hi) = (b.reg(Class::B16), b.reg(Class::B16));
                b.ins(format!("mov.b32 {{{lo}, {hi}}}, {w}"));
                out.push(lo);
                out.push(hi);
            } else {
                for k in 0..4 {
                    let r = b.reg(Class::B32);
                    let signed = if ty == "s8" { "s32" } else { "u32" };
                    b.ins(format!("bfe.{signed} {r}, {w}, {}, 8", 8 * k));
                    out.push(r);
                }
            }
        }
        out
    }

    pub(super) fn store(&mut self, op: &Op) -> R<()> {
        if op.attr("atomic").is_some() {
            return self.atomic_add(op);
        }
        let view = self.view_of(op, op.operands[0])?;
        let tile = self.tile(op, op.operands[1])?;
        let (dtype, shape, layout) = (tile.dtype, tile.shape.clone(), tile.layout.clone());
        let map = self.map(op, &layout, &shape)?;
        let mask = self.mask_of(op, 2, map.len())?;
        let plan = self.global_plan(op, &view, &map, dtype, mask.is_none())?;
        let target = self.target;
        let packed_words = match (&tile.repr, per_word(dtype)) {
            (Repr::Packed(w), Some(_)) => Some(w.clone()),
            _ => None,
        };
        let wide = self.wide(&tile);
        let storage: Vec<Operand> = wide.iter().map(|&x| to_storage(&mut self.b, target, dtype, x)).collect();
        let (ty, class) = mem_access(dtype);
        let eb = mem_bytes(dtype) as usize;
        self.vector_or_elements(
            plan.vector,
            map.len(),
            "stored",
            |e, g, v| {
                let (row, imm) = plan.addr[g];
                let list = e.vector_words(dtype, &storage[g..g + v], packed_words.as_deref(), g, eb, class);
                let (n, wty) = if eb >= 4 { (v, ty) } else { (v * eb / 4, "b32") };
                let vec = if n == 1 { String::new() } else { format!(".v{n}") };
                let p = e.in_bounds(&plan.pred[g], CheckFrom::Position);
                e.b.ins_if(p, false, format!("st.global{vec}.{wty} [{row}+{imm}], {{{list}}}"));
            },
            |e, i| {
                let in_bounds = e.in_bounds(&plan.pred[i], CheckFrom::Position);
                let p = match &mask {
                    Some(m) => {
                        let m = materialize(&mut e.b, Class::Pred, m[i]);
                        e.and_pred(Some(in_bounds), m)
                    }
                    None => in_bounds,
                };
                let s = materialize(&mut e.b, class, storage[i]);
                let (row, imm) = plan.addr[i];
                e.b.ins_if(p, false, format!("st.global.{ty} [{row}+{imm}], {s}"));
            },
        );
        Ok(())
    }

    /// `tile.atomic_add`: a `red.global.add` per element, by one thread only where the
    /// layout replicates elements over threads (a row vector of a 2-D tile's reduction)
    /// or registers: every element is added exactly once.
    fn atomic_add(&mut self, op: &Op) -> R<()> {
        let view = self.view_of(op, op.operands[0])?;
        let tile = self.tile(op, op.operands[1])?;
        let (dtype, shape, layout) = (tile.dtype, tile.shape.clone(), tile.layout.clone());
        let ty = red_type(dtype).map_err(|m| self.fail(op, m))?;
        let map = self.map(op, &layout, &shape)?;
        let Some((replicated, first)) = map.unique_holders() else {
            return Err(self
                .fail(op, format!("tile.atomic_add from layout {layout}: its threads do not hold each element once")));
        };
        let mask = self.mask_of(op, 2, map.len())?;
        let plan = self.global_plan(op, &view, &map, dtype, false)?;
        let holder = self.holder(replicated);
        let wide = self.wide(&tile);
        let (_, class) = mem_access(dtype);
        for i in (0..map.len()).filter(|&i| first[i]) {
            let in_bounds = self.in_bounds(&plan.pred[i], CheckFrom::Position);
            let p = self.and_pred(holder, in_bounds);
            let (row, imm) = plan.addr[i];
            self.red_element(p, mask.as_ref().map(|m| m[i]), ty, &format!("{row}+{imm}"), wide[i], class);
        }
        Ok(())
    }

    /// `red.global.add.{ty} [addr], x` where `p` and the element's mask (if any) allow.
    fn red_element(&mut self, p: Reg, mask: Option<Operand>, ty: &str, addr: &str, x: Operand, class: Class) {
        let p = match mask {
            Some(m) => {
                let m = materialize(&mut self.b, Class::Pred, m);
                self.and_pred(Some(p), m)
            }
            None => p,
        };
        let x = materialize(&mut self.b, class, x);
        self.b.ins_if(p, false, format!("red.global.add.{ty} [{addr}], {x}"));
    }

    /// Whether this thread has none of the `replicated` thread-id bits set (`None`: no such
    /// bits, every thread holds its own elements).
    fn holder(&mut self, replicated: u32) -> Option<Reg> {
        (replicated != 0).then(|| {
            let tid = self.exprs.emit(&mut self.b, &super::expr::Expr::tid());
            let (bits, p) = (self.b.reg(Class::B32), self.b.reg(Class::Pred));
            self.b.ins(format!("and.b32 {bits}, {tid}, {replicated}"));
            self.b.ins(format!("setp.eq.u32 {p}, {bits}, 0"));
            p
        })
    }

    /// The register list of one vector store (words for 16- and 8-bit elements).
    fn vector_words(
        &mut self,
        dtype: DType,
        storage: &[Operand],
        packed: Option<&[Operand]>,
        first: usize,
        eb: usize,
        class: Class,
    ) -> String {
        let b = &mut self.b;
        let regs: Vec<String> = if eb >= 4 {
            storage.iter().map(|&s| materialize(b, class, s).to_string()).collect()
        } else {
            let per = 4 / eb;
            match packed {
                // Words already hold exactly these elements.
                Some(words) if first.is_multiple_of(per) && per_word(dtype) == Some(per) => words
                    [first / per..(first + storage.len()) / per]
                    .iter()
                    .map(|&w| materialize(b, Class::B32, w).to_string())
                    .collect(),
                _ => storage
                    .chunks(per)
                    .map(|c| {
                        if eb == 2 {
                            let lo = materialize(b, Class::B16, c[0]);
                            let hi = materialize(b, Class::B16, c[1]);
                            let w = b.reg(Class::B32);
                            b.ins(format!("mov.b32 {w}, {{{lo}, {hi}}}"));
                            w.to_string()
                        } else {
                            let bytes: Vec<Reg> = c.iter().map(|&x| materialize(b, Class::B32, x)).collect();
                            pack_bytes(b, &bytes).to_string()
                        }
                    })
                    .collect(),
            }
        };
        regs.join(", ")
    }

    /// Addresses and bounds of element `idx[e]` of a tensor, in row-major order.
    fn gather_plan(&mut self, op: &Op, tensor_val: crate::ir::ValueId, idx: &[Operand], eb: i64) -> R<Vec<(Reg, Reg)>> {
        let Val::Tensor(t) = self.val(op, tensor_val)?.clone() else {
            return Err(self.fail(op, "the operand is not a tensor parameter"));
        };
        // An index is a row-major element index (a k-D gather's is computed in Tile IR):
        // in bounds below the element count.
        let ptr = self.tensors[t].ptr;
        let dim = match self.stride(t, 0) {
            Operand::Int(1) => self.tensors[t].dims[0],
            stride => {
                let first = self.tensors[t].dims[0];
                self.b.in_prologue(|b| {
                    let n = b.reg(Class::B64);
                    b.ins(format!("mul.lo.s64 {n}, {first}, {stride}"));
                    n
                })
            }
        };
        let mut out = Vec::new();
        for &i in idx {
            let b = &mut self.b;
            let wide = b.reg(Class::B64);
            match i {
                Operand::Int(v) => b.ins(format!("mov.b64 {wide}, {v}")),
                // An i64 index as it is: `cvt.s64.s32` of a 64-bit register would keep its
                // low 32 bits (ptxas takes it), and a table past 2^31 elements needs them all.
                Operand::Reg(r) if r.class == Class::B64 => b.ins(format!("mov.b64 {wide}, {r}")),
                r => b.ins(format!("cvt.s64.s32 {wide}, {r}")),
            }
            let p = b.reg(Class::Pred);
            b.ins(format!("setp.lt.u64 {p}, {wide}, {dim}"));
            let a = b.reg(Class::B64);
            b.ins(format!("mad.lo.s64 {a}, {wide}, {eb}, {ptr}"));
            out.push((a, p));
        }
        Ok(out)
    }

    pub(super) fn gather(&mut self, op: &Op) -> R<()> {
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        let idx = self.tile(op, op.operands[1])?;
        let idx = self.wide(&idx);
        let eb = mem_bytes(dtype) as i64;
        let plan = self.gather_plan(op, op.operands[0], &idx, eb)?;
        let mask = self.mask_of(op, 2, idx.len())?;
        let target = self.target;
        let (ty, class) = mem_access(dtype);
        let mut values = Vec::new();
        for (i, &(a, p)) in plan.iter().enumerate() {
            let p = match &mask {
                Some(m) => {
                    let m = materialize(&mut self.b, Class::Pred, m[i]);
                    self.and_pred(Some(p), m)
                }
                None => p,
            };
            let s = self.b.reg(class);
            mov(&mut self.b, s, Operand::Int(0));
            self.b.ins_if(p, false, format!("ld.global.{ty} {s}, [{a}]"));
            values.push(from_storage(&mut self.b, target, dtype, s));
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(values) }));
        Ok(())
    }

    pub(super) fn scatter(&mut self, op: &Op) -> R<()> {
        let idx = self.tile(op, op.operands[1])?;
        let idx = self.wide(&idx);
        let values = self.tile(op, op.operands[2])?;
        let dtype = values.dtype;
        // `tile.atomic_add` by an index tile: each element once (see `atomic_add`).
        let atomic = match op.attr("atomic") {
            Some(_) => {
                let map = self.map(op, &values.layout, &values.shape)?;
                let Some((replicated, first)) = map.unique_holders() else {
                    return Err(
                        self.fail(op, "tile.atomic_add from a layout whose threads do not hold each element once")
                    );
                };
                Some((self.holder(replicated), first, red_type(dtype).map_err(|m| self.fail(op, m))?))
            }
            None => None,
        };
        let values = self.wide(&values);
        if values.len() != idx.len() {
            return Err(self.fail(op, "index and value tiles have different layouts"));
        }
        let eb = mem_bytes(dtype) as i64;
        let plan = self.gather_plan(op, op.operands[0], &idx, eb)?;
        let mask = self.mask_of(op, 3, idx.len())?;
        let target = self.target;
        let (ty, class) = mem_access(dtype);
        for (i, &(a, p)) in plan.iter().enumerate() {
            if let Some((holder, first, red)) = &atomic {
                if !first[i] {
                    continue;
                }
                let p = self.and_pred(*holder, p);
                self.red_element(p, mask.as_ref().map(|m| m[i]), red, &a.to_string(), values[i], class);
                continue;
            }
            let p = match &mask {
                Some(m) => {
                    let m = materialize(&mut self.b, Class::Pred, m[i]);
                    self.and_pred(Some(p), m)
                }
                None => p,
            };
            let s = to_storage(&mut self.b, target, dtype, values[i]);
            let s = materialize(&mut self.b, class, s);
            self.b.ins_if(p, false, format!("st.global.{ty} [{a}], {s}"));
        }
        Ok(())
    }
}

/// The type of `red.global.add` for a `tile.atomic_add` into `dtype`.
fn red_type(dtype: DType) -> Result<&'static str, String> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I32 => "s32",
        // Two's complement: the unsigned add is the signed one.
        DType::I64 => "u64",
        other => return Err(format!("tile.atomic_add into {other}")),
    })
}

/// The PTX type of a one-element store.
pub(super) fn store_type(dtype: DType) -> &'static str {
    match mem_access(dtype).0 {
        "s8" => "u8",
        other => other,
    }
}

fn always(b: &mut super::builder::Builder) -> Reg {
    let p = b.reg(Class::Pred);
    b.ins(format!("setp.eq.u32 {p}, 0, 0"));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{SmemType, Swizzle};
    use crate::ptx::expr::{smem_offset, Expr};
    use tessera_frontend::check::Dim;

    /// The emitted swizzle arithmetic is `SmemType::byte_offset`, for every buffer
    /// shape, element type, swizzle and pad the Tile IR produces.
    #[test]
    fn shared_offsets_match_the_buffer_layout() {
        for (rows, cols) in [(64, 32), (64, 64), (32, 128), (128, 64), (64, 128), (128, 8), (16, 16), (8, 24)] {
            for dtype in [DType::BF16, DType::F32, DType::Fp8E4m3] {
                let wgmma = Swizzle::wgmma_for_row(cols * dtype.bytes() as i64);
                let layouts = [(Swizzle::None, 0), (Swizzle::Xor, 0), (Swizzle::None, 8)].into_iter();
                for (swizzle, pad) in layouts.chain(wgmma.map(|w| (w, 0))) {
                    let ty = SmemType {
                        dims: vec![Dim::constant(rows), Dim::constant(cols)],
                        dtype,
                        swizzle,
                        pad,
                        stages: 1,
                    };
                    // Thread-dependent coordinates: thread t reads element (t / cols, t % cols).
                    let threads = (rows * cols) as u32;
                    let threads = threads.next_power_of_two();
                    let row = Expr::tid().div(cols, threads);
                    let col = Expr::tid().rem(cols, threads);
                    let e = smem_offset(&ty, row, col, threads).unwrap();
                    for t in 0..(rows * cols) as u32 {
                        let (r, c) = (t as i64 / cols, t as i64 % cols);
                        assert_eq!(Some(e.eval(t)), ty.byte_offset(r, c), "{ty:?} ({r}, {c})");
                    }
                }
            }
        }
    }
}
