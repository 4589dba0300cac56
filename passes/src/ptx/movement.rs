//! Ops that move elements between registers or threads: layout conversions,
//! broadcasts, `expand_dims`, register transposes, reductions; and the ops that need
//! an element's coordinates (`tile.arange`, `tile.causal_mask`).
//!
//! Data stays in registers when every thread already holds what it needs (the
//! register map is checked for every thread); otherwise it goes through the shared
//! scratch space between two barriers. Reductions combine within a thread, then
//! across lanes with `shfl.sync.bfly`, then across warps through shared memory.

use tessera_frontend::check::DType;

use super::builder::{Builder, Class, Operand, Reg};
use super::emit::{Emitter, Repr, TileVal, Val, R};
use super::expr::{share_bases, Expr};
use super::numerics::{add_u32, materialize, round_wide, wide_class};
use super::threadmap::{local_map, ThreadMap};
use crate::ir::{policy as ir_policy, Op, OpKind, Type};

/// How a result coordinate picks its source coordinate.
#[derive(Clone, Debug)]
enum Source {
    Same,
    /// Swap the last two dims.
    Swap,
    /// Drop dim `axis` (`expand_dims` inserted it).
    Drop(usize),
    /// These dims have size 1 in the source (broadcast).
    Zero(Vec<usize>),
}

impl Source {
    fn apply<T: Clone>(&self, c: &[T], zero: T) -> Vec<T> {
        let mut v = c.to_vec();
        match self {
            Source::Same => {}
            Source::Swap => {
                let n = v.len();
                if n >= 2 {
                    v.swap(n - 1, n - 2);
                }
            }
            Source::Drop(axis) => {
                v.remove(*axis);
            }
            Source::Zero(dims) => {
                for &d in dims {
                    v[d] = zero.clone();
                }
            }
        }
        v
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Combine {
    Sum,
    Max,
    Min,
}

impl Emitter<'_> {
    pub(super) fn smem_addresses_at(&mut self, addr: Reg, imm: i64, exprs: &[Expr]) -> Vec<(Reg, i64)> {
        let slot = super::emit::SmemVal {
            ty: crate::ir::SmemType {
                dims: Vec::new(),
                dtype: DType::F32,
                swizzle: crate::ir::Swizzle::None,
                pad: 0,
                stages: 1,
            },
            addr,
            imm,
        };
        self.smem_addresses(&slot, exprs)
    }

    pub(super) fn reshape_op(&mut self, op: &Op) -> R<()> {
        let src = self.tile(op, op.operands[0])?;
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        let source = match op.kind {
            OpKind::ConvertLayout => Source::Same,
            OpKind::Transpose => Source::Swap,
            OpKind::ExpandDims => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                if src.shape.len() + 1 != shape.len() || axis >= shape.len() {
                    return Err(self.fail(op, "the result does not have one more dim"));
                }
                Source::Drop(axis)
            }
            _ => {
                if src.shape.len() != shape.len() {
                    return Err(self.unsupported(op, "across ranks"));
                }
                let dims: Vec<usize> = (0..shape.len()).filter(|&d| src.shape[d] == 1 && shape[d] != 1).collect();
                if (0..shape.len()).any(|d| src.shape[d] != 1 && src.shape[d] != shape[d]) {
                    return Err(self.fail(op, format!("cannot broadcast {:?} to {:?}", src.shape, shape)));
                }
                Source::Zero(dims)
            }
        };
        if op.kind == OpKind::Transpose && shape.len() < 2 {
            return Err(self.fail(op, "a transpose of a tile with fewer than two dims"));
        }
        let out = self.remap(op, &src, dtype, &shape, &layout, &source)?;
        self.set(op.results[0], Val::Tile(out));
        Ok(())
    }

    /// The tile `dst[c] = src[source(c)]` in the result layout.
    fn remap(
        &mut self,
        op: &Op,
        src: &TileVal,
        dtype: DType,
        shape: &[i64],
        layout: &crate::ir::Layout,
        source: &Source,
    ) -> R<TileVal> {
        let smap = self.map(op, &src.layout, &src.shape)?;
        let dmap = self.map(op, layout, shape)?;
        let result = |repr| TileVal { dtype, shape: shape.to_vec(), layout: layout.clone(), repr };
        if let Some(idx) = local_map(&smap, &dmap, &|c| source.apply(c, 0)) {
            // Packed words move whole when each result word is one source word.
            if let (Repr::Packed(words), Some(per)) = (&src.repr, super::numerics::per_word(dtype)) {
                let whole = idx.len() % per == 0
                    && idx.chunks(per).all(|c| c[0] % per == 0 && c.iter().enumerate().all(|(k, &i)| i == c[0] + k));
                if whole {
                    let w = idx.chunks(per).map(|c| words[c[0] / per]).collect();
                    return Ok(result(Repr::Packed(w)));
                }
            }
            let wide = self.wide(src);
            return Ok(result(Repr::Wide(idx.iter().map(|&i| wide[i]).collect())));
        }
        // Through shared memory: every thread writes what it holds, then reads what it needs.
        let wide = self.wide(src);
        let class = wide_class(dtype);
        let eb: i64 = if matches!(class, Class::B64 | Class::F64) { 8 } else { 4 };
        let numel: i64 = src.shape.iter().product();
        let offset = self.scratch((numel * eb) as u32) as i64;
        let base = self.smem_base();
        let strides = row_major(&src.shape);
        let write: Vec<Expr> = (0..smap.len()).map(|i| linear(&smap, i, &strides).mul(eb)).collect();
        let read: Vec<Expr> = (0..dmap.len())
            .map(|j| {
                let c: Vec<Expr> = (0..dmap.rank()).map(|d| dmap.coord_expr(j, d)).collect();
                let sc = source.apply(&c, Expr::c(0));
                sc.iter().zip(&strides).fold(Expr::c(0), |acc, (x, s)| acc.add(x.clone().mul(*s))).mul(eb)
            })
            .collect();
        let out = self.exchange(base, offset, class, &wide, &write, &read);
        Ok(result(Repr::Wide(out)))
    }

    /// Barrier, each thread stores `values` at `write`, barrier, loads at `read`.
    fn exchange(
        &mut self,
        base: Reg,
        offset: i64,
        class: Class,
        values: &[Operand],
        write: &[Expr],
        read: &[Expr],
    ) -> Vec<Operand> {
        let waddr = self.smem_addresses_at(base, offset, write);
        let raddr = self.smem_addresses_at(base, offset, read);
        let ty = match class {
            Class::F32 => "f32",
            Class::F64 => "f64",
            Class::B64 => "b64",
            _ => "b32",
        };
        self.sync_threads();
        for (i, &(reg, imm)) in waddr.iter().enumerate() {
            let v = if class == Class::Pred {
                let p = materialize(&mut self.b, Class::Pred, values[i]);
                let r = self.b.reg(Class::B32);
                self.b.ins(format!("selp.u32 {r}, 1, 0, {p}"));
                r
            } else {
                materialize(&mut self.b, class, values[i])
            };
            self.b.ins(format!("st.shared.{ty} [{reg}+{imm}], {v}"));
        }
        self.sync_threads();
        let mut out = Vec::with_capacity(raddr.len());
        for &(reg, imm) in &raddr {
            if class == Class::Pred {
                let r = self.b.reg(Class::B32);
                self.b.ins(format!("ld.shared.b32 {r}, [{reg}+{imm}]"));
                let p = self.b.reg(Class::Pred);
                self.b.ins(format!("setp.ne.u32 {p}, {r}, 0"));
                out.push(Operand::Reg(p));
            } else {
                let r = self.b.reg(class);
                self.b.ins(format!("ld.shared.{ty} {r}, [{reg}+{imm}]"));
                out.push(Operand::Reg(r));
            }
        }
        out
    }

    /// [`Self::combine`] of a sum under `@accum(T)` (`step`, T narrower than f32): the
    /// partial sum is rounded to T after every addition.
    fn combine_step(&mut self, how: Combine, dtype: DType, step: Option<DType>, a: Operand, b: Operand) -> Operand {
        let r = self.combine(how, dtype, a, b);
        match step {
            Some(t) if how == Combine::Sum => {
                let target = self.target;
                round_wide(&mut self.b, target, t, r)
            }
            _ => r,
        }
    }

    fn combine(&mut self, how: Combine, dtype: DType, a: Operand, b: Operand) -> Operand {
        let class = wide_class(dtype);
        let ty = super::numerics::arith_type(dtype);
        let x = materialize(&mut self.b, class, a);
        let r = self.b.reg(class);
        let ins = match how {
            Combine::Sum => "add",
            Combine::Max => "max",
            Combine::Min => "min",
        };
        self.b.ins(format!("{ins}.{ty} {r}, {x}, {b}"));
        Operand::Reg(r)
    }

    fn shuffle_xor(&mut self, x: Operand, class: Class, lane_mask: u32) -> Operand {
        let x = materialize(&mut self.b, class, x);
        match class {
            Class::B64 | Class::F64 => {
                let (lo, hi) = (self.b.reg(Class::B32), self.b.reg(Class::B32));
                self.b.ins(format!("mov.b64 {{{lo}, {hi}}}, {x}"));
                self.b.ins(format!("shfl.sync.bfly.b32 {lo}, {lo}, {lane_mask}, 31, -1"));
                self.b.ins(format!("shfl.sync.bfly.b32 {hi}, {hi}, {lane_mask}, 31, -1"));
                let r = self.b.reg(class);
                self.b.ins(format!("mov.b64 {r}, {{{lo}, {hi}}}"));
                Operand::Reg(r)
            }
            _ => {
                let r = self.b.reg(class);
                self.b.ins(format!("shfl.sync.bfly.b32 {r}, {x}, {lane_mask}, 31, -1"));
                Operand::Reg(r)
            }
        }
    }

    pub(super) fn reduce(&mut self, op: &Op) -> R<()> {
        let src = self.tile(op, op.operands[0])?;
        let axis = op.int_attr("axis").unwrap_or(0) as usize;
        let how = match op.str_attr("kind").unwrap_or("sum") {
            "sum" => Combine::Sum,
            "max" => Combine::Max,
            "min" => Combine::Min,
            other => return Err(self.unsupported(op, format!("of kind `{other}`"))),
        };
        // A max over booleans is an "any", a min an "all": reduced as 0/1 in 32 bits.
        let boolean = src.dtype == DType::Bool;
        if boolean && how == Combine::Sum {
            return Err(self.unsupported(op, "summing booleans (cast them to an integer first)"));
        }
        let dtype = if boolean { DType::I32 } else { src.dtype };
        // `@accum(T)`, T narrower than f32: partial sums are rounded to T at every step
        // (the order — per thread, then across lanes and warps — is not the interpreter's).
        let step = ir_policy::acc(op).filter(|&t| ir_policy::rounds_each_step(t) && wide_class(dtype) == Class::F32);
        if axis >= src.shape.len() {
            return Err(self.fail(op, format!("axis {axis} of a rank-{} tile", src.shape.len())));
        }
        let smap = self.map(op, &src.layout, &src.shape)?;
        let mut values = self.wide(&src);
        if boolean {
            values = values.into_iter().map(|v| pred_to_int(&mut self.b, v)).collect();
        }
        let groups = reduction_groups(&smap, axis).map_err(|e| self.fail(op, format!("internal error: {e}")))?;
        let along = smap.bits_along(axis).map_err(|e| self.fail(op, format!("internal error: {e}")))?;
        let class = wide_class(dtype);
        // Within the thread.
        let mut partial: Vec<Operand> = Vec::new();
        for (_, regs) in &groups {
            let mut acc = values[regs[0]];
            for &r in &regs[1..] {
                acc = self.combine_step(how, dtype, step, acc, values[r]);
            }
            partial.push(acc);
        }
        // Across the lanes of a warp.
        for &bit in along.iter().filter(|&&b| b < 5) {
            for p in partial.iter_mut() {
                let other = self.shuffle_xor(*p, class, 1 << bit);
                *p = self.combine_step(how, dtype, step, *p, other);
            }
        }
        let warp_bits: Vec<u32> = along.iter().copied().filter(|&b| b >= 5).collect();
        let out_shape: Vec<i64> = src.shape.iter().enumerate().filter(|(d, _)| *d != axis).map(|(_, &n)| n).collect();
        let result_tile = match self.f.ty(op.results[0]) {
            Type::Tile(_) => Some(self.tile_type(op, op.results[0])?),
            _ => None,
        };
        let (rdtype, rshape, rlayout) = match &result_tile {
            Some(t) => t.clone(),
            None => (src.dtype, out_shape.clone(), src.layout.clone()),
        };
        if rshape != out_shape {
            return Err(self.fail(op, format!("the result shape {rshape:?} is not {out_shape:?}")));
        }
        let rmap = match &result_tile {
            Some(_) => Some(self.map(op, &rlayout, &rshape)?),
            None => None,
        };
        let key_strides = row_major(&out_shape);
        let mut results: Vec<Operand>;
        let local = match &rmap {
            Some(rmap) if warp_bits.is_empty() => result_registers(&smap, &groups, axis, rmap),
            None if warp_bits.is_empty() => (groups.len() == 1).then(|| vec![0]),
            _ => None,
        };
        if let Some(idx) = local {
            results = idx.iter().map(|&g| partial[g]).collect();
        } else {
            // Across warps (or into another layout): partials go to shared memory, one
            // slot per combination of the reduced warp bits, and every thread combines
            // the slots of the elements it owns, in slot order.
            let slots = 1i64 << warp_bits.len();
            let eb: i64 = if matches!(class, Class::B64 | Class::F64) { 8 } else { 4 };
            let numel: i64 = out_shape.iter().product();
            let offset = self.scratch((numel * slots * eb) as u32) as i64;
            let base = self.smem_base();
            let threads = self.threads;
            let mut slot = Expr::c(0);
            for (i, &b) in warp_bits.iter().enumerate() {
                slot = slot.add(Expr::tid().div(1 << b, threads).rem(2, threads).mul(1 << i));
            }
            let write: Vec<Expr> = groups
                .iter()
                .map(|(_, regs)| {
                    let c: Vec<Expr> =
                        (0..smap.rank()).filter(|&d| d != axis).map(|d| smap.coord_expr(regs[0], d)).collect();
                    let lin = c.iter().zip(&key_strides).fold(Expr::c(0), |acc, (x, s)| acc.add(x.clone().mul(*s)));
                    lin.mul(slots).add(slot.clone()).mul(eb)
                })
                .collect();
            let owned: Vec<Expr> = match &rmap {
                Some(rmap) => (0..rmap.len())
                    .map(|j| {
                        (0..rmap.rank())
                            .map(|d| rmap.coord_expr(j, d))
                            .zip(&key_strides)
                            .fold(Expr::c(0), |acc, (x, s)| acc.add(x.mul(*s)))
                    })
                    .collect(),
                None => vec![Expr::c(0)],
            };
            let read: Vec<Expr> =
                owned.iter().flat_map(|lin| (0..slots).map(move |s| lin.clone().mul(slots).addc(s).mul(eb))).collect();
            let loaded = self.exchange(base, offset, class, &partial, &write, &read);
            results = Vec::new();
            for chunk in loaded.chunks(slots as usize) {
                let mut acc = chunk[0];
                for &x in &chunk[1..] {
                    acc = self.combine_step(how, dtype, step, acc, x);
                }
                results.push(acc);
            }
        }
        if how == Combine::Sum && dtype.is_float() {
            let target = self.target;
            for x in results.iter_mut() {
                *x = round_wide(&mut self.b, target, dtype, *x);
            }
        }
        if boolean {
            for x in results.iter_mut() {
                let word = materialize(&mut self.b, Class::B32, *x);
                let p = self.b.reg(Class::Pred);
                self.b.ins(format!("setp.ne.s32 {p}, {word}, 0"));
                *x = Operand::Reg(p);
            }
        }
        match result_tile {
            Some(_) => {
                let tile = TileVal { dtype: rdtype, shape: rshape, layout: rlayout, repr: Repr::Wide(results) };
                self.set(op.results[0], Val::Tile(tile));
            }
            None => self.set(op.results[0], Val::Scalar(results[0])),
        }
        Ok(())
    }

    pub(super) fn causal_mask(&mut self, op: &Op) -> R<()> {
        let s = self.tile(op, op.operands[0])?;
        let q_off = self.scalar(op, op.operands[1])?;
        let k_off = self.scalar(op, op.operands[2])?;
        if s.shape.len() != 2 {
            return Err(self.fail(op, "a causal mask of a tile of rank other than 2"));
        }
        let map = self.map(op, &s.layout, &s.shape)?;
        let values = self.wide(&s);
        let class = wide_class(s.dtype);
        if class != Class::F32 {
            return Err(self.unsupported(op, format!("on {} tiles", s.dtype)));
        }
        // Masked where k_off + j > q_off + i, i.e. (k_off - q_off + j0 - i0) > ci - cj
        // with (i0, j0) the thread's part and (ci, cj) the register's.
        let b = &mut self.b;
        let diff = b.reg(Class::B64);
        let q = materialize(b, Class::B64, q_off);
        b.ins(format!("sub.s64 {diff}, {k_off}, {q}"));
        let wraps = map.wraps(0) || map.wraps(1);
        let mut out = Vec::with_capacity(values.len());
        if wraps {
            for (i, &v) in values.iter().enumerate() {
                let (ri, rj) = (map.coord_expr(i, 0), map.coord_expr(i, 1));
                let ri = self.exprs.emit_inline(&mut self.b, &ri);
                let rj = self.exprs.emit_inline(&mut self.b, &rj);
                let b = &mut self.b;
                let (wi, wj) = (b.reg(Class::B64), b.reg(Class::B64));
                b.ins(format!("cvt.u64.u32 {wi}, {ri}"));
                b.ins(format!("cvt.u64.u32 {wj}, {rj}"));
                let t = b.reg(Class::B64);
                b.ins(format!("add.s64 {t}, {diff}, {wj}"));
                b.ins(format!("sub.s64 {t}, {t}, {wi}"));
                let p = b.reg(Class::Pred);
                b.ins(format!("setp.gt.s64 {p}, {t}, 0"));
                let r = b.reg(Class::F32);
                b.ins(format!("selp.f32 {r}, 0fFF800000, {v}, {p}"));
                out.push(Operand::Reg(r));
            }
        } else {
            let i0 = self.exprs.emit_wide(&mut self.b, &map.thread_part(0));
            let j0 = self.exprs.emit_wide(&mut self.b, &map.thread_part(1));
            let b = &mut self.b;
            let t = b.reg(Class::B64);
            b.ins(format!("add.s64 {t}, {diff}, {j0}"));
            b.ins(format!("sub.s64 {t}, {t}, {i0}"));
            for (i, &v) in values.iter().enumerate() {
                let (ci, cj) = (map.regs[i][0], map.regs[i][1]);
                let p = b.reg(Class::Pred);
                b.ins(format!("setp.gt.s64 {p}, {t}, {}", ci - cj));
                let v = materialize(b, Class::F32, v);
                let r = b.reg(Class::F32);
                b.ins(format!("selp.f32 {r}, 0fFF800000, {v}, {p}"));
                out.push(Operand::Reg(r));
            }
        }
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        if layout != s.layout {
            return Err(self.fail(op, "internal error: the result's layout differs from the operand's"));
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }

    pub(super) fn arange(&mut self, op: &Op) -> R<()> {
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        if shape.len() != 1 {
            return Err(self.fail(op, "an arange of rank other than 1"));
        }
        let map = self.map(op, &layout, &shape)?;
        let exprs: Vec<Expr> = (0..map.len()).map(|i| map.coord_expr(i, 0)).collect();
        // One base per distinct pattern (kept for the kernel); the constant offsets are
        // added where the values are used, so they do not occupy registers throughout.
        let shared = share_bases(&exprs, self.threads);
        let mut out = Vec::with_capacity(exprs.len());
        for &(base, delta) in &shared {
            let b0 = self.exprs.emit(&mut self.b, &exprs[base]);
            let v = add_u32(&mut self.b, b0, delta);
            out.push(match wide_class(dtype) {
                Class::B32 => v,
                Class::B64 => {
                    let r = self.b.reg(Class::B64);
                    match v {
                        Operand::Int(x) => self.b.ins(format!("mov.b64 {r}, {x}")),
                        v => self.b.ins(format!("cvt.u64.u32 {r}, {v}")),
                    }
                    Operand::Reg(r)
                }
                Class::F32 => {
                    let r = self.b.reg(Class::F32);
                    let v = materialize(&mut self.b, Class::B32, v);
                    self.b.ins(format!("cvt.rn.f32.u32 {r}, {v}"));
                    Operand::Reg(r)
                }
                _ => return Err(self.unsupported(op, format!("of {dtype}"))),
            });
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }
}

fn row_major(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn linear(map: &ThreadMap, reg: usize, strides: &[i64]) -> Expr {
    (0..map.rank()).fold(Expr::c(0), |acc, d| acc.add(map.coord_expr(reg, d).mul(strides[d])))
}

/// A thread's registers grouped by their coordinates without `axis` (each element
/// once: registers holding the same element twice are dropped), checked to be the
/// same grouping in every thread.
/// Registers reduced together: the coordinates without the reduced axis (in thread 0)
/// and the registers holding them.
type Groups = Vec<(Vec<i64>, Vec<usize>)>;

fn reduction_groups(map: &ThreadMap, axis: usize) -> Result<Groups, String> {
    let key = |c: &[i64]| -> Vec<i64> { c.iter().enumerate().filter(|(d, _)| *d != axis).map(|(_, &x)| x).collect() };
    let mut groups: Groups = Vec::new();
    let mut seen: Vec<Vec<i64>> = Vec::new();
    let mut dropped: Vec<(usize, usize)> = Vec::new();
    for i in 0..map.len() {
        let c = map.coord(i, 0).to_vec();
        if let Some(first) = seen.iter().position(|s| *s == c) {
            dropped.push((i, first));
            continue;
        }
        seen.push(c.clone());
        let k = key(&c);
        match groups.iter_mut().find(|(gk, _)| *gk == k) {
            Some((_, regs)) => regs.push(i),
            None => groups.push((k, vec![i])),
        }
    }
    for tid in 0..map.threads {
        for (g, (_, regs)) in groups.iter().enumerate() {
            let k0 = key(map.coord(regs[0], tid));
            if regs.iter().any(|&r| key(map.coord(r, tid)) != k0) {
                return Err(format!("thread {tid} groups registers {regs:?} differently"));
            }
            if groups[..g].iter().any(|(_, other)| key(map.coord(other[0], tid)) == k0) {
                return Err(format!("thread {tid} holds one reduced element in two groups"));
            }
        }
        if dropped.iter().any(|&(i, first)| map.coord(i, tid) != map.coord(first, tid)) {
            return Err(format!("thread {tid} holds distinct elements where thread 0 holds one twice"));
        }
    }
    Ok(groups)
}

/// For every result register, the group whose key is its coordinate in every thread.
fn result_registers(
    smap: &ThreadMap,
    groups: &[(Vec<i64>, Vec<usize>)],
    axis: usize,
    rmap: &ThreadMap,
) -> Option<Vec<usize>> {
    let key = |c: &[i64]| -> Vec<i64> { c.iter().enumerate().filter(|(d, _)| *d != axis).map(|(_, &x)| x).collect() };
    let mut out = Vec::with_capacity(rmap.len());
    for j in 0..rmap.len() {
        let g = groups.iter().position(|(_, regs)| key(smap.coord(regs[0], 0)) == rmap.coord(j, 0))?;
        for tid in 0..smap.threads {
            if key(smap.coord(groups[g].1[0], tid)) != rmap.coord(j, tid) {
                return None;
            }
        }
        out.push(g);
    }
    Some(out)
}

impl Emitter<'_> {
    /// `tile.rand`: the counter-based hash of `crate::ir::rand` for every owned element
    /// (MurmurHash3's finalizer on 32-bit integers, bit for bit the same as the other
    /// backends).
    pub(super) fn rand(&mut self, op: &Op) -> R<()> {
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        if dtype != DType::F32 {
            return Err(self.unsupported(op, format!("producing {dtype}")));
        }
        let rank = shape.len();
        let seed = self.scalar(op, op.operands[0])?;
        let mut offsets = Vec::new();
        for &o in &op.operands[1..] {
            offsets.push(self.scalar(op, o)?);
        }
        if offsets.len() < rank {
            return Err(self.fail(op, format!("tile.rand of a rank-{rank} tile with {} offsets", offsets.len())));
        }
        let lead = offsets.len() - rank;
        let map = self.map(op, &layout, &shape)?;
        // The seed and the fixed leading coordinates hash once per thread.
        let b = &mut self.b;
        let seed64 = materialize(b, Class::B64, seed);
        let h = b.reg(Class::B32);
        b.ins(format!("cvt.u32.u64 {h}, {seed64}"));
        b.ins(format!("xor.b32 {h}, {h}, 2654435769"));
        mix32(b, h);
        let mut offs32 = Vec::new();
        for (k, &o) in offsets.iter().enumerate() {
            let o64 = materialize(b, Class::B64, o);
            let o32 = b.reg(Class::B32);
            b.ins(format!("cvt.u32.u64 {o32}, {o64}"));
            if k < lead {
                b.ins(format!("xor.b32 {h}, {h}, {o32}"));
                mix32(b, h);
            } else {
                offs32.push(o32);
            }
        }
        let mut out = Vec::with_capacity(map.len());
        for i in 0..map.len() {
            let coords: Vec<Expr> = (0..rank).map(|d| map.coord_expr(i, d)).collect();
            let mut regs = Vec::new();
            for c in &coords {
                regs.push(self.exprs.emit_inline(&mut self.b, c));
            }
            let b = &mut self.b;
            let e = b.reg(Class::B32);
            b.ins(format!("mov.b32 {e}, {h}"));
            for (d, c) in regs.into_iter().enumerate() {
                let x = b.reg(Class::B32);
                b.ins(format!("add.u32 {x}, {}, {c}", offs32[d]));
                b.ins(format!("xor.b32 {e}, {e}, {x}"));
                mix32(b, e);
            }
            b.ins(format!("shr.u32 {e}, {e}, 8"));
            let f = b.reg(Class::F32);
            b.ins(format!("cvt.rn.f32.u32 {f}, {e}"));
            // 2^-24
            b.ins(format!("mul.f32 {f}, {f}, 0f33800000"));
            out.push(Operand::Reg(f));
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }
}

/// MurmurHash3's 32-bit finalizer on register `h`, in place.
fn mix32(b: &mut crate::ptx::builder::Builder, h: Reg) {
    let t = b.reg(Class::B32);
    b.ins(format!("shr.u32 {t}, {h}, 16"));
    b.ins(format!("xor.b32 {h}, {h}, {t}"));
    b.ins(format!("mul.lo.u32 {h}, {h}, 2246822507"));
    b.ins(format!("shr.u32 {t}, {h}, 13"));
    b.ins(format!("xor.b32 {h}, {h}, {t}"));
    b.ins(format!("mul.lo.u32 {h}, {h}, 3266489909"));
    b.ins(format!("shr.u32 {t}, {h}, 16"));
    b.ins(format!("xor.b32 {h}, {h}, {t}"));
}

/// A predicate (or a bool constant) as a 32-bit 0 or 1.
fn pred_to_int(b: &mut Builder, v: Operand) -> Operand {
    match v {
        Operand::Int(c) => Operand::Int(i64::from(c != 0)),
        v => {
            let p = materialize(b, Class::Pred, v);
            let r = b.reg(Class::B32);
            b.ins(format!("selp.b32 {r}, 1, 0, {p}"));
            Operand::Reg(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Layout;
    use std::collections::HashMap;

    /// Simulates the reduction plan (in-thread groups, butterflies over the reduced lane
    /// bits, then the reduced warp bits) and checks that each thread's partial for each
    /// key sums every element of that row exactly once.
    fn check_reduction(layout: Layout, shape: &[i64], axis: usize, threads: u32) {
        let map = ThreadMap::of(&layout, shape, threads).unwrap();
        let groups = reduction_groups(&map, axis).unwrap();
        let along = map.bits_along(axis).unwrap();
        // The multiset of elements each (thread, group) has summed.
        let mut sums: HashMap<(u32, usize), Vec<Vec<i64>>> = HashMap::new();
        for t in 0..threads {
            for (g, (_, regs)) in groups.iter().enumerate() {
                sums.insert((t, g), regs.iter().map(|&r| map.coord(r, t).to_vec()).collect());
            }
        }
        for &bit in &along {
            let before = sums.clone();
            for t in 0..threads {
                for g in 0..groups.len() {
                    let mut mine = before[&(t, g)].clone();
                    mine.extend(before[&(t ^ (1 << bit), g)].clone());
                    sums.insert((t, g), mine);
                }
            }
        }
        let n = shape[axis];
        for ((t, g), mut elems) in sums {
            elems.sort();
            let mut key = map.coord(groups[g].1[0], t).to_vec();
            let want: Vec<Vec<i64>> = (0..n)
                .map(|i| {
                    key[axis] = i;
                    key.clone()
                })
                .collect();
            assert_eq!(elems, want, "{layout} {shape:?} thread {t} group {g}");
        }
    }

    #[test]
    fn reductions_count_every_element_once() {
        let mma = Layout::Mma { warps: [4, 1] };
        check_reduction(mma.clone(), &[64, 64], 1, 128);
        check_reduction(Layout::Mma { warps: [4, 2] }, &[128, 128], 1, 256);
        check_reduction(Layout::Mma { warps: [2, 2] }, &[64, 64], 0, 128);
        check_reduction(Layout::blocked_for(&[1, 512], 4, 4), &[1, 512], 1, 128);
        check_reduction(Layout::blocked_for(&[4, 1024], 8, 4), &[4, 1024], 1, 256);
        check_reduction(Layout::blocked_for(&[2, 256], 4, 4), &[2, 256], 1, 128);
    }
}
