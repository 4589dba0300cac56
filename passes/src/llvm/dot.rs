//! `tile.dot` as a register-blocked micro-kernel.
//!
//! The output is computed in blocks of `MR` rows × `NV` vectors: the block's
//! accumulators (`MR * NV` vector registers) are initialized from the accumulator
//! operand (evaluated lazily, so `alpha * acc` or zeros cost nothing extra), then the
//! K loop runs innermost — per k, `NV` vector loads of a B row and, per row, one
//! broadcast A element and `NV` fused multiply-adds — and the block is stored once.
//! Operands are first brought to the compute type (f32 for every float type but f64,
//! i32 for integers): a bf16/fp8 operand is converted once per dot, not per product.

use tessera_frontend::check::DType;

use super::builder::{Elem, VTy};
use super::emit::{Lowerer, R};
use super::numerics::{self, Storage};
use super::plan::Root;
use super::tiles::{Mem, Node, Tile};
use crate::ir::{OpId, ValueId};

/// Rows of a register block.
const MR: usize = 8;
/// Vectors per row of a register block.
const NV: usize = 2;

/// The body run per column block: `(lowerer, first column, vector widths)`.
type BlockBody<'a, 'f> = dyn FnMut(&mut Lowerer<'f>, &str, &[u32]) -> R<()> + 'a;

impl<'f> Lowerer<'f> {
    /// `step`: the `@accum(T)` of a T narrower than f32 — the running sum is rounded to T
    /// after every fused multiply-add (and the accumulator before the first).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dot(
        &mut self,
        id: OpId,
        a: &Tile,
        b: &Tile,
        acc: &Tile,
        acc_v: ValueId,
        out: DType,
        step: Option<DType>,
    ) -> R<Tile> {
        if a.shape.len() != 2 || b.shape.len() != 2 || acc.shape.len() != 2 || a.rank0 || b.rank0 {
            return Err(self.err("tile.dot multiplies 2-D tiles"));
        }
        let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
        if b.shape[0] != k || acc.shape != [m, n] {
            return Err(
                self.err(format!("tile.dot shapes {:?} x {:?} + {:?} do not agree", a.shape, b.shape, acc.shape))
            );
        }
        let compute = if a.dtype.is_int() && b.dtype.is_int() {
            if out == DType::I64 {
                DType::I64
            } else {
                DType::I32
            }
        } else if a.dtype.is_int() || b.dtype.is_int() || a.dtype == DType::Bool || b.dtype == DType::Bool {
            return Err(self.err(format!("tile.dot of {} and {}", a.dtype, b.dtype)));
        } else if [a.dtype, b.dtype, out].contains(&DType::F64) {
            DType::F64
        } else {
            DType::F32
        };
        let ce = numerics::reg(compute);
        let pos = self.plan.pos[id.0 as usize];
        let am = self.operand(a, compute, pos)?;
        let vl: u32 = if ce.bytes() == 8 { 8 } else { 16 };
        let nb = NV as i64 * vl as i64;
        let full_cols = n / nb;
        let rem = n % nb;
        let mut tail: Vec<u32> = vec![vl; (rem / vl as i64) as usize];
        if rem % vl as i64 > 0 {
            tail.push((rem % vl as i64) as u32);
        }
        let bmem = match b.mem() {
            Some(m) => m.clone(),
            None => self.materialize_at(b, pos, pos)?,
        };
        let bsrc = b.with_node(Node::Mem(bmem.clone()));
        // The accumulator is read while the output is written: keep it free of loads.
        let acc = if acc.inbounds_flags().is_empty() {
            acc.clone()
        } else {
            let mm = self.materialize(acc)?;
            acc.with_node(Node::Mem(mm))
        };
        let dst = match self.in_place(id, &acc, acc_v, &[&am, &bmem], out) {
            Some(d) => d,
            None => self.alloc_tile(&[m, n], out),
        };
        self.b.emit(format!("; tile.dot {m}x{k} @ {k}x{n}: B packed in {nb}-column panels"));
        let bp = self.b.alloca("bpack", ce, (k * n).max(1) as u64);
        let pack = PackCtx { src: bsrc, bp: bp.clone(), k, compute };
        self.for_column_blocks(full_cols, nb, &[vl; NV], &tail, &mut |l, j0, widths| l.pack_panel(&pack, j0, widths))?;
        self.b.emit(format!("; tile.dot {m}x{k} @ {k}x{n}: {MR}x{NV}-vector register blocks, K innermost"));
        let step = step.filter(|_| compute == DType::F32);
        let ctx = DotCtx { a: am, bp, acc, dst, k, m, out, compute, ce, step };
        self.for_column_blocks(full_cols, nb, &[vl; NV], &tail, &mut |l, j0, widths| l.column_block(&ctx, j0, widths))?;
        Ok(Tile::new(&[m, n], out, Node::Mem(ctx.dst)))
    }

    /// Runs `body(j0, widths)` for every column block: full blocks of `nb` columns
    /// (vectors of `full`), then the narrower tail.
    fn for_column_blocks(
        &mut self,
        full_cols: i64,
        nb: i64,
        full: &[u32],
        tail: &[u32],
        body: &mut BlockBody<'_, 'f>,
    ) -> R<()> {
        if full_cols > 0 {
            let end = (full_cols * nb).to_string();
            if let Some(lp) = self.b.begin_loop("jb", "0", &end, &nb.to_string(), &[]) {
                let j0 = lp.iv.clone();
                body(self, &j0, full)?;
                self.b.end_loop(lp, &[]);
            }
        }
        if !tail.is_empty() {
            body(self, &(full_cols * nb).to_string(), tail)?;
        }
        Ok(())
    }

    /// Copies B's columns `j0..j0 + sum(widths)` into their panel: row k of the panel
    /// holds those columns contiguously, and the panel's rows follow each other, so the
    /// K loop reads B sequentially (no cache-set conflicts from a power-of-two row pitch).
    fn pack_panel(&mut self, p: &PackCtx, j0: &str, widths: &[u32]) -> R<()> {
        let bw: i64 = widths.iter().map(|&w| w as i64).sum();
        let ce = numerics::reg(p.compute);
        let base = self.b.mul(j0, &p.k.to_string());
        let Some(lp) = self.b.begin_loop("pk", "0", &p.k.to_string(), "1", &[]) else { return Ok(()) };
        let kv = lp.iv.clone();
        let row = self.b.mul(&kv, &bw.to_string());
        let row = self.b.add(&base, &row);
        let mut off = 0i64;
        for &w in widths {
            let col = self.b.add(j0, &off.to_string());
            let v = self.eval(&p.src, &[kv.clone(), col], w, true)?;
            let v = numerics::cast(&mut self.b, Some(p.src.dtype), Some(p.compute), w, &v);
            let at = self.b.add(&row, &off.to_string());
            let ptr = self.b.gep(ce, &p.bp, &at);
            let vt = VTy::new(ce, w);
            let vp = self.b.val("vp", format!("bitcast {}* {ptr} to {}*", ce.ir(), vt.ir()));
            self.b.emit(format!("store {} {v}, {}* {vp}, align {}", vt.ir(), vt.ir(), ce.bytes()));
            off += w as i64;
        }
        self.b.end_loop(lp, &[]);
        Ok(())
    }

    /// A in memory as registers of the compute type, rows contiguous: the tile itself
    /// when it already is, else a converted copy (a large power-of-two row pitch would
    /// put the rows of a register block in one cache set).
    fn operand(&mut self, t: &Tile, compute: DType, pos: u32) -> R<Mem> {
        let m = match t.mem() {
            Some(m) => m.clone(),
            None => self.materialize_at(t, pos, pos)?,
        };
        let ce = numerics::reg(compute);
        let ok = m.st == Storage::Direct(ce)
            && numerics::reg(t.dtype) == ce
            && m.strides == super::tiles::contiguous(&t.shape);
        if ok {
            return Ok(m);
        }
        let src = t.with_node(Node::Mem(m));
        let conv = Tile::new(&t.shape, compute, Node::Cast { a: src, saturate: false, u: None });
        self.materialize_fresh(&conv)
    }

    /// A private buffer the accumulator reads at the element being written, which no
    /// other live value reads: the dot can overwrite it.
    fn in_place(&mut self, id: OpId, acc: &Tile, acc_v: ValueId, operands: &[&Mem], out: DType) -> Option<Mem> {
        let x = self.plan.pos[id.0 as usize];
        'leaves: for (root, m) in acc.whole_leaves() {
            if !matches!(root, Root::Buf(_))
                || m.st != Storage::private(out)
                || m.strides != super::tiles::contiguous(&acc.shape)
            {
                continue;
            }
            let (count, identity) = acc.identity_reads(root);
            if count != 1 || !identity || operands.iter().any(|o| o.roots.contains(&root)) {
                continue;
            }
            for (i, v) in self.vals.iter().enumerate() {
                let super::emit::Val::Tile(t) = v else { continue };
                if !t.reads(root) {
                    continue;
                }
                let last = self.plan.last_use[i];
                let live = if i == acc_v.0 as usize { last > x } else { last >= x };
                if live {
                    continue 'leaves;
                }
            }
            return Some(m);
        }
        None
    }

    /// Every row block of one column block starting at `j0` with vectors of `widths`.
    fn column_block(&mut self, c: &DotCtx, j0: &str, widths: &[u32]) -> R<()> {
        let full_rows = c.m / MR as i64;
        let tail = (c.m % MR as i64) as usize;
        if full_rows > 0 {
            let end = (full_rows * MR as i64).to_string();
            if let Some(lp) = self.b.begin_loop("ib", "0", &end, &MR.to_string(), &[]) {
                let i0 = lp.iv.clone();
                self.micro(c, &i0, MR, j0, widths)?;
                self.b.end_loop(lp, &[]);
            }
        }
        if tail > 0 {
            self.micro(c, &(full_rows * MR as i64).to_string(), tail, j0, widths)?;
        }
        Ok(())
    }

    /// One register block: `rows` rows from `i0`, vectors of `widths` from column `j0`.
    fn micro(&mut self, c: &DotCtx, i0: &str, rows: usize, j0: &str, widths: &[u32]) -> R<()> {
        let ce = c.ce;
        let mut offs = Vec::new();
        let mut o = 0i64;
        for &w in widths {
            offs.push(o);
            o += w as i64;
        }
        let rows_idx: Vec<String> = (0..rows).map(|r| self.b.add(i0, &r.to_string())).collect();
        let cols_idx: Vec<String> = offs.iter().map(|off| self.b.add(j0, &off.to_string())).collect();
        // Accumulator registers.
        let mut carried = Vec::new();
        for ri in &rows_idx {
            for (ci, &w) in cols_idx.iter().zip(widths) {
                let v = self.eval(&c.acc, &[ri.clone(), ci.clone()], w, true)?;
                let v = numerics::cast(&mut self.b, Some(c.acc.dtype), Some(c.compute), w, &v);
                let v = match c.step {
                    Some(t) => numerics::round_f32(&mut self.b, t, VTy::new(ce, w), &v),
                    None => v,
                };
                carried.push((VTy::new(ce, w).ir(), v));
            }
        }
        let Some(lp) = self.b.begin_loop("k", "0", &c.k.to_string(), "1", &carried) else {
            // K = 0: the accumulator unchanged.
            let regs: Vec<String> = carried.into_iter().map(|(_, v)| v).collect();
            return self.store_block(c, &rows_idx, &cols_idx, widths, &regs);
        };
        let kv = lp.iv.clone();
        // Row k of the B panel of this column block.
        let bw: i64 = widths.iter().map(|&w| w as i64).sum();
        let base = self.b.mul(j0, &c.k.to_string());
        let brow = self.b.mul(&kv, &bw.to_string());
        let brow = self.b.add(&base, &brow);
        let mut bv = Vec::new();
        for (&off, &w) in offs.iter().zip(widths) {
            let off = self.b.add(&brow, &off.to_string());
            let p = self.b.gep(ce, &c.bp, &off);
            let vt = VTy::new(ce, w);
            let vp = self.b.val("bp", format!("bitcast {}* {p} to {}*", ce.ir(), vt.ir()));
            bv.push(self.b.val("b", format!("load {}, {}* {vp}, align {}", vt.ir(), vt.ir(), ce.bytes())));
        }
        let (sa0, sa1) = (c.a.strides[0].val(), c.a.strides[1].val());
        let acol = self.b.mul(&kv, &sa1);
        let mut next = Vec::new();
        for (r, ri) in rows_idx.iter().enumerate() {
            let arow = self.b.mul(ri, &sa0);
            let off = self.b.add(&arow, &acol);
            let p = self.b.gep(ce, &c.a.ptr, &off);
            let a = self.b.val("a", format!("load {}, {}* {p}, align {}", ce.ir(), ce.ir(), ce.bytes()));
            let mut splats: Vec<(u32, String)> = Vec::new();
            for (ci, &w) in widths.iter().enumerate() {
                let av = match splats.iter().find(|(sw, _)| *sw == w) {
                    Some((_, v)) => v.clone(),
                    None => {
                        let v = self.b.splat(VTy::new(ce, w), &a);
                        splats.push((w, v.clone()));
                        v
                    }
                };
                let acc = lp.carried[r * widths.len() + ci].clone();
                let vt = VTy::new(ce, w);
                let r = if let Some(t) = c.step {
                    // `@accum(T)`: one fused multiply-add in f32, rounded to T.
                    let r = numerics::intr(&mut self.b, "fma", vt, &[&av, &bv[ci], &acc]);
                    numerics::round_f32(&mut self.b, t, vt, &r)
                } else if ce.is_float() {
                    numerics::intr(&mut self.b, "fmuladd", vt, &[&av, &bv[ci], &acc])
                } else {
                    let p = self.b.val("p", format!("mul {} {av}, {}", vt.ir(), bv[ci]));
                    self.b.val("s", format!("add {} {acc}, {p}", vt.ir()))
                };
                next.push(r);
            }
        }
        let regs = self.b.end_loop(lp, &next);
        self.store_block(c, &rows_idx, &cols_idx, widths, &regs)
    }

    fn store_block(&mut self, c: &DotCtx, rows: &[String], cols: &[String], widths: &[u32], regs: &[String]) -> R<()> {
        for (r, ri) in rows.iter().enumerate() {
            for (ci, (cj, &w)) in cols.iter().zip(widths).enumerate() {
                let v = numerics::cast(&mut self.b, Some(c.compute), Some(c.out), w, &regs[r * widths.len() + ci]);
                self.store_mem(&c.dst, c.out, &[ri.clone(), cj.clone()], w, &v);
            }
        }
        Ok(())
    }
}

struct PackCtx {
    src: Tile,
    bp: String,
    k: i64,
    compute: DType,
}

struct DotCtx {
    a: Mem,
    bp: String,
    acc: Tile,
    dst: Mem,
    k: i64,
    m: i64,
    out: DType,
    compute: DType,
    ce: Elem,
    /// `@accum(T)` rounding after every step (T narrower than f32).
    step: Option<DType>,
}
