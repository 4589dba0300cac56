//! Shared memory: addresses of shared buffers, `tile.cp_async` (global → shared copies,
//! in 16-byte chunks where aligned, element by element otherwise) and
//! `tile.load_shared/store_shared`.
use std::collections::HashMap;

use super::builder::{Class, Operand, Reg};
use super::emit::{mov, pack_bytes, Emitter, Repr, SmemVal, TileVal, Val, ViewVal, R};
use super::expr::{share_bases, smem_offset, Expr};
use super::memory::store_type;
use super::numerics::{from_storage, materialize, mem_access, mem_bytes, per_word, to_storage};
use super::threadmap::ThreadMap;
use crate::ir::{Attr, Op, SmemType};

impl Emitter<'_> {
    /// Shared addresses `buffer + exprs[i]` as (register, immediate) pairs, reusing one
    /// register for expressions that differ by a constant.
    pub(super) fn smem_addresses(&mut self, s: &SmemVal, exprs: &[Expr]) -> Vec<(Reg, i64)> {
        let shared = share_bases(exprs, self.threads);
        let mut base_regs: HashMap<usize, (Reg, i64)> = HashMap::new();
        let static_base = Some(s.addr) == self.smem_base;
        let mut out = Vec::with_capacity(exprs.len());
        for (i, &(base, delta)) in shared.iter().enumerate() {
            if base == i {
                let (var, c) = exprs[i].split_const();
                let reg = if var.as_const() == Some(0) {
                    s.addr
                } else {
                    let e = self.exprs.emit(&mut self.b, &var);
                    let addr = s.addr;
                    let emit = |b: &mut super::builder::Builder| {
                        let r = b.reg(Class::B32);
                        b.ins(format!("add.u32 {r}, {addr}, {e}"));
                        r
                    };
                    if static_base {
                        self.b.in_prologue(emit)
                    } else {
                        emit(&mut self.b)
                    }
                };
                base_regs.insert(i, (reg, c + s.imm));
            }
            let (reg, c) = base_regs[&base];
            out.push((reg, c + delta));
        }
        out
    }

    pub(super) fn cp_async(&mut self, op: &Op) -> R<()> {
        let slot = self.smem_of(op, op.operands[0])?;
        let view = self.view_of(op, op.operands[1])?;
        let ty = slot.ty.clone();
        let dtype = ty.dtype;
        let (rows, row_len) = ty.rows_and_row_len().ok_or_else(|| self.fail(op, "a symbolic buffer shape"))?;
        let eb = mem_bytes(dtype) as i64;
        let t = view.tensor;
        let tensor_rank = self.tensors[t].dims.len();
        let view_dims: Vec<i64> = view.dims.iter().map(|&j| view.sizes[j]).collect();
        if view_dims.iter().product::<i64>() != rows * row_len {
            return Err(self.fail(op, "the buffer and the view hold different element counts"));
        }
        let contiguous = view.dims.last() == Some(&(tensor_rank - 1));
        let row_bytes = row_len * eb;
        let chunk = [16i64, 8, 4].into_iter().find(|c| row_bytes % c == 0 && *c >= eb && contiguous);
        let ptr = self.tensors[t].ptr;
        let (base, squeezed_ok) = self.squeezed_base(&view, eb);
        let slow = self.b.label("copy");
        let done = self.b.label("copied");
        if let Some(cb) = chunk {
            let last = *view.dims.last().expect("a contiguous view has a dim");
            let dim = self.tensors[t].dims[last];
            let ok = self.alignment_test(ptr, view.offsets[last], dim, cb, eb);
            self.b.ins_if(ok, true, format!("bra.uni {slow}"));
            self.copy_chunks(op, &slot, &view, base, squeezed_ok, cb, eb)?;
            self.b.ins(format!("bra.uni {done}"));
            self.b.place_label(&slow);
        }
        self.copy_elements(op, &slot, &view, base, squeezed_ok, eb)?;
        if chunk.is_some() {
            self.b.place_label(&done);
        }
        Ok(())
    }

    /// The view coordinate of flat element `flat` (row-major over the view's dims).
    pub(super) fn unflatten(view_dims: &[i64], flat: Expr, threads: u32) -> Vec<Expr> {
        let mut out = vec![Expr::c(0); view_dims.len()];
        let mut rest = flat;
        for d in (0..view_dims.len()).rev() {
            out[d] = rest.clone().rem(view_dims[d], threads);
            rest = rest.div(view_dims[d], threads);
        }
        out
    }

    /// Global address and bounds of a view position (per view dim: offset +
    /// coordinate); returns the address, whether the leading dims are inside, and the
    /// position along the last dim.
    pub(super) fn view_address(
        &mut self,
        view: &ViewVal,
        pos: &[Operand],
        base: Operand,
        squeezed_ok: Option<Reg>,
        eb: i64,
    ) -> (Operand, Option<Reg>, Operand) {
        let t = view.tensor;
        let mut a = base;
        let mut ok = squeezed_ok;
        let mut last_pos = Operand::Int(0);
        for (d, &j) in view.dims.iter().enumerate() {
            let p = pos[d];
            let sb = self.stride_bytes(t, j, eb);
            a = self.mad64(p, sb, a);
            if d + 1 < view.dims.len() {
                let dim = self.tensors[t].dims[j];
                let pd = self.in_range(p, dim);
                ok = Some(self.and_pred(ok, pd));
            } else {
                last_pos = p;
            }
        }
        (a, ok, last_pos)
    }

    /// Positions (offset + coordinate, per view dim) of a family of coordinates:
    /// coordinates that differ from an earlier one by a constant reuse its register.
    pub(super) fn view_positions(&mut self, view: &ViewVal, coords: &[Vec<Expr>]) -> Vec<Vec<Operand>> {
        let rank = view.dims.len();
        let mut out = vec![Vec::with_capacity(rank); coords.len()];
        for d in 0..rank {
            let column: Vec<Expr> = coords.iter().map(|c| c[d].clone()).collect();
            let shared = share_bases(&column, self.threads);
            let mut bases: HashMap<usize, Operand> = HashMap::new();
            for (k, &(base, delta)) in shared.iter().enumerate() {
                if base == k {
                    let wide = self.exprs.emit_wide(&mut self.b, &column[k]);
                    let p = self.add64(view.offsets[view.dims[d]], wide);
                    bases.insert(k, p);
                }
                let p = self.add64(bases[&base], Operand::Int(delta));
                out[k].push(p);
            }
        }
        out
    }

    /// 16/8/4-byte `cp.async` chunks, zero-filled past the tensor's edges.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_chunks(
        &mut self,
        op: &Op,
        slot: &SmemVal,
        view: &ViewVal,
        base: Operand,
        squeezed_ok: Option<Reg>,
        cb: i64,
        eb: i64,
    ) -> R<()> {
        let threads = self.threads;
        let ty = &slot.ty;
        let (rows, row_len) = ty.rows_and_row_len().unwrap_or((1, 1));
        let per_chunk = cb / eb;
        let chunks_per_row = row_len / per_chunk;
        let total = rows * chunks_per_row;
        let iterations = (total + threads as i64 - 1) / threads as i64;
        let view_dims: Vec<i64> = view.dims.iter().map(|&j| view.sizes[j]).collect();
        let t = view.tensor;
        let last = *view.dims.last().expect("a view dim");
        let dim_last = self.tensors[t].dims[last];
        let mut smem = Vec::new();
        let mut coords = Vec::new();
        let mut ids = Vec::new();
        for k in 0..iterations {
            let id = Expr::tid().addc(k * threads as i64);
            let row = id.clone().div(chunks_per_row, threads);
            let col = id.clone().rem(chunks_per_row, threads).mul(per_chunk);
            smem.push(
                smem_offset(ty, row.clone(), col.clone(), threads)
                    .ok_or_else(|| self.fail(op, "a symbolic buffer shape"))?,
            );
            let mut c = Self::unflatten(&view_dims[..view_dims.len() - 1], row, threads);
            c.push(col);
            coords.push(c);
            ids.push(id);
        }
        let addrs = self.smem_addresses(slot, &smem);
        let positions = self.view_positions(view, &coords);
        let kind = if cb == 16 { "cg" } else { "ca" };
        let ptr = self.tensors[t].ptr;
        for (k, id) in ids.into_iter().enumerate() {
            let (src, ok, col_pos) = self.view_address(view, &positions[k], base, squeezed_ok, eb);
            // Valid bytes: the part of the chunk left of the tensor's end (0 when the
            // row is outside or the chunk starts left of column 0).
            let b = &mut self.b;
            let avail = b.reg(Class::B64);
            let col_pos = materialize(b, Class::B64, col_pos);
            b.ins(format!("sub.s64 {avail}, {dim_last}, {col_pos}"));
            b.ins(format!("min.s64 {avail}, {avail}, {per_chunk}"));
            let inside = b.reg(Class::Pred);
            b.ins(format!("setp.lt.u64 {inside}, {col_pos}, {dim_last}"));
            let ok = match ok {
                Some(ok) => {
                    let both = b.reg(Class::Pred);
                    b.ins(format!("and.pred {both}, {inside}, {ok}"));
                    both
                }
                None => inside,
            };
            let bytes = b.reg(Class::B32);
            b.ins(format!("cvt.u32.u64 {bytes}, {avail}"));
            if eb > 1 {
                b.ins(format!("shl.b32 {bytes}, {bytes}, {}", eb.trailing_zeros()));
            }
            b.ins(format!("selp.b32 {bytes}, {bytes}, 0, {ok}"));
            // No byte is read when the size is 0; the tensor's base keeps the address valid.
            let src = materialize(b, Class::B64, src);
            let safe = b.reg(Class::B64);
            b.ins(format!("selp.b64 {safe}, {src}, {ptr}, {ok}"));
            let (reg, imm) = addrs[k];
            let line = format!("cp.async.{kind}.shared.global [{reg}+{imm}], [{safe}], {cb}, {bytes}");
            if id.max(threads) >= total {
                let live = self.thread_below(&id, total);
                self.b.ins_if(live, false, line);
            } else {
                self.b.ins(line);
            }
        }
        Ok(())
    }

    /// `expr < bound` (a thread predicate, computed once).
    pub(super) fn thread_below(&mut self, e: &Expr, bound: i64) -> Reg {
        let v = self.exprs.emit(&mut self.b, e);
        let p = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.lt.u32 {p}, {v}, {bound}"));
        p
    }

    /// Element-by-element synchronous copy (misaligned or non-contiguous views): a cold
    /// path, so it is a loop (each thread takes elements `tid, tid + threads, ...`)
    /// whose few registers live only inside it.
    pub(super) fn copy_elements(
        &mut self,
        op: &Op,
        slot: &SmemVal,
        view: &ViewVal,
        base: Operand,
        squeezed_ok: Option<Reg>,
        eb: i64,
    ) -> R<()> {
        let threads = self.threads;
        let ty = slot.ty.clone();
        let (rows, row_len) = ty.rows_and_row_len().unwrap_or((1, 1));
        let total = rows * row_len;
        // Expressions of the element index (written as `Tid`, bound to the counter).
        let span = (total.max(1) as u32).next_power_of_two();
        let view_dims: Vec<i64> = view.dims.iter().map(|&j| view.sizes[j]).collect();
        let row = Expr::tid().div(row_len, span);
        let col = Expr::tid().rem(row_len, span);
        let offset =
            smem_offset(&ty, row.clone(), col.clone(), span).ok_or_else(|| self.fail(op, "a symbolic buffer shape"))?;
        let mut coord = Self::unflatten(&view_dims[..view_dims.len() - 1], row, span);
        coord.push(col);
        let t = view.tensor;
        let last = *view.dims.last().expect("a view dim");
        let dim_last = self.tensors[t].dims[last];
        let (ldty, class) = mem_access(ty.dtype);
        let st = store_type(ty.dtype);
        let tid = self.exprs.emit(&mut self.b, &Expr::tid());
        let index = self.b.reg(Class::B32);
        self.b.ins(format!("mov.u32 {index}, {tid}"));
        let head = self.b.label("element");
        let end = self.b.label("elements_done");
        self.b.place_label(&head);
        let done = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.ge.u32 {done}, {index}, {total}"));
        self.b.ins_if(done, false, format!("bra {end}"));
        let mut pos = Vec::new();
        for (d, c) in coord.iter().enumerate() {
            let narrow = self.exprs.emit_at(&mut self.b, c, index);
            let wide = self.widen_u32(narrow);
            pos.push(self.add64(view.offsets[view.dims[d]], wide));
        }
        let (src, ok, col_pos) = self.view_address(view, &pos, base, squeezed_ok, eb);
        let col_ok = self.in_range(col_pos, dim_last);
        let p = self.and_pred(ok, col_ok);
        let off = self.exprs.emit_at(&mut self.b, &offset, index);
        let b = &mut self.b;
        let addr = b.reg(Class::B32);
        b.ins(format!("add.u32 {addr}, {}, {off}", slot.addr));
        let v = b.reg(class);
        mov(b, v, Operand::Int(0));
        let src = materialize(b, Class::B64, src);
        b.ins_if(p, false, format!("ld.global.{ldty} {v}, [{src}]"));
        b.ins(format!("st.shared.{st} [{addr}+{}], {v}", slot.imm));
        b.ins(format!("add.u32 {index}, {index}, {threads}"));
        b.ins(format!("bra {head}"));
        b.place_label(&end);
        Ok(())
    }

    pub(super) fn load_shared(&mut self, op: &Op) -> R<()> {
        let slot = self.smem_of(op, op.operands[0])?;
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        let transpose = matches!(op.attr("transpose"), Some(Attr::Bool(true)));
        let map = self.map(op, &layout, &shape)?;
        if let crate::ir::Layout::DotOperand { .. } = layout {
            if self.deferrable.contains(&self.current) {
                let plan = super::dot::plan_ldmatrix_cached(&slot.ty, &map, dtype, transpose)
                    .map_err(|e| self.fail(op, format!("internal error: {e}")))?;
                if let Some(plan) = plan {
                    let per = if dtype.bits() == 16 { 2 } else { 4 };
                    let lazy = super::emit::LazyLoad { slot, plan, words: map.len() / per };
                    let repr = Repr::Lazy(std::rc::Rc::new(lazy));
                    self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr }));
                    return Ok(());
                }
            }
            if let Some(words) = self.ldmatrix(op, &slot, &map, dtype, transpose)? {
                self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Packed(words) }));
                return Ok(());
            }
        }
        let exprs = self.element_offsets(op, &slot.ty, &map, transpose)?;
        let addrs = self.smem_addresses(&slot, &exprs);
        let (ldty, class) = mem_access(dtype);
        let target = self.target;
        let mut storage = Vec::new();
        for &(reg, imm) in &addrs {
            let r = self.b.reg(class);
            self.b.ins(format!("ld.shared.{ldty} {r}, [{reg}+{imm}]"));
            storage.push(r);
        }
        let repr = match per_word(dtype) {
            Some(per) if storage.len() % per == 0 => {
                let mut words = Vec::new();
                for c in storage.chunks(per) {
                    let b = &mut self.b;
                    let w = if per == 2 {
                        let w = b.reg(Class::B32);
                        b.ins(format!("mov.b32 {w}, {{{}, {}}}", c[0], c[1]));
                        w
                    } else {
                        pack_bytes(b, c)
                    };
                    words.push(Operand::Reg(w));
                }
                Repr::Packed(words)
            }
            _ => Repr::Wide(storage.into_iter().map(|s| from_storage(&mut self.b, target, dtype, s)).collect()),
        };
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr }));
        Ok(())
    }

    /// Byte offsets (in a slot) of every register's element.
    pub(super) fn element_offsets(&self, op: &Op, ty: &SmemType, map: &ThreadMap, transpose: bool) -> R<Vec<Expr>> {
        let (rows, row_len) = ty.rows_and_row_len().ok_or_else(|| self.fail(op, "a symbolic buffer shape"))?;
        let numel: i64 = map.shape.iter().product();
        if numel != rows * row_len {
            return Err(self.fail(op, "the tile and the buffer hold different element counts"));
        }
        if transpose && map.rank() != 2 {
            return Err(self.unsupported(op, "transposed, on a tile of rank other than 2"));
        }
        let mut out = Vec::with_capacity(map.len());
        for i in 0..map.len() {
            let coord: Vec<Expr> = (0..map.rank()).map(|d| map.coord_expr(i, d)).collect();
            let (row, col) = if transpose {
                (coord[1].clone(), coord[0].clone())
            } else {
                // Leading dims flatten into rows.
                let mut row = Expr::c(0);
                for (d, c) in coord.iter().enumerate().take(map.rank().saturating_sub(1)) {
                    row = row.mul(map.shape[d]).add(c.clone());
                }
                (row, coord.last().cloned().unwrap_or(Expr::c(0)))
            };
            out.push(smem_offset(ty, row, col, self.threads).ok_or_else(|| self.fail(op, "a symbolic buffer shape"))?);
        }
        Ok(out)
    }

    pub(super) fn store_shared(&mut self, op: &Op) -> R<()> {
        let slot = self.smem_of(op, op.operands[0])?;
        let tile = self.tile(op, op.operands[1])?;
        let map = self.map(op, &tile.layout, &tile.shape)?;
        let exprs = self.element_offsets(op, &slot.ty, &map, false)?;
        let addrs = self.smem_addresses(&slot, &exprs);
        let target = self.target;
        let dtype = tile.dtype;
        let wide = self.wide(&tile);
        let (_, class) = mem_access(dtype);
        let st = store_type(dtype);
        for (i, &(reg, imm)) in addrs.iter().enumerate() {
            let s = to_storage(&mut self.b, target, dtype, wide[i]);
            let s = materialize(&mut self.b, class, s);
            self.b.ins(format!("st.shared.{st} [{reg}+{imm}], {s}"));
        }
        Ok(())
    }
}
