//! `tile.dot` on tensor cores (`mma.sync`) and its operands from shared memory
//! (`ldmatrix`).
//!
//! Fragment layouts are those of the PTX ISA, "Matrix Fragments for mma.m16n8k16 with
//! floating point type" (§9.7.14.5.8) and "for mma.m16n8k32" (§9.7.14.5.10), with
//! `groupID = laneid / 4`, `threadID_in_group = laneid % 4`:
//!
//! - accumulator c_i (i < 4): row `g + 8 (i >= 2)`, col `2t + (i & 1)`;
//! - A, 16-bit a_i (i < 8, two per register): row `g + 8 ((i / 2) & 1)`,
//!   col `2t + (i & 1) + 8 (i >= 4)`; 8-bit a_i (i < 16, four per register): row
//!   `g + 8 ((i / 4) & 1)`, col `4t + (i & 3) + 16 (i >= 8)`;
//! - B, 16-bit b_i (i < 4): row `2t + (i & 1) + 8 (i >= 2)`, col `g`; 8-bit b_i
//!   (i < 8): row `4t + (i & 3) + 16 (i >= 4)`, col `g`.
//!
//! `ldmatrix` (§9.7.14.5.15): lanes `8m .. 8m + 7` give the row addresses of matrix
//! `m`; register `m` of lane `l` receives row `l / 4`, columns `2 (l % 4)` and `+1` of
//! matrix `m` (with `.trans`: rows `2 (l % 4)` and `+1`, column `l / 4`).
//!
//! Nothing here trusts these tables blindly against the IR: the fragments the code
//! uses are matched to `Layout::elements` for every thread, and the `ldmatrix`
//! addresses are simulated for every lane against `SmemType::byte_offset`; a mismatch
//! is an internal error, never wrong code.

use std::collections::HashMap;
use std::sync::OnceLock;

use tessera_frontend::check::DType;

use super::builder::{Class, Operand, Reg};
use super::expr::{smem_offset, Expr};
use super::numerics::{fp8x4_to_f16x2, materialize, round_wide, wide_class};
use super::threadmap::{memo, Memo, ThreadMap};
use std::rc::Rc;

use super::emit::{Emitter, LazyLoad, LdMatrix, Repr, SmemVal, TileVal, Val, R};
use crate::ir::{policy as ir_policy, Layout, Op};
use crate::target::Target;

const WARP: u32 = 32;

/// The registers of one m16 x n8 accumulator fragment and of the A/B fragments of one
/// k step, as register (C) or word (A, B) indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragments {
    /// (row, col) origin in warp 0 and the four accumulator registers.
    pub c: Vec<((i64, i64), [usize; 4])>,
    /// (row, k) origin and the four A words.
    pub a: HashMap<(i64, i64), [usize; 4]>,
    /// (k, col) origin and the two B words.
    pub b: HashMap<(i64, i64), [usize; 2]>,
    /// K of one instruction (16, or 32 for 8-bit operands).
    pub k: i64,
}

/// `fragments`, remembered across kernels.
fn fragments_cached(c: &ThreadMap, a: &ThreadMap, b: &ThreadMap, per: usize) -> Result<Fragments, String> {
    type Key = (Vec<Vec<i64>>, Vec<Vec<i64>>, Vec<Vec<i64>>, Vec<Vec<i64>>, Vec<Vec<i64>>, Vec<Vec<i64>>, usize, u32);
    static CACHE: Memo<Key, Result<Fragments, String>> = OnceLock::new();
    let key = (
        c.regs.clone(),
        c.bits.clone(),
        a.regs.clone(),
        a.bits.clone(),
        b.regs.clone(),
        b.bits.clone(),
        per,
        c.threads,
    );
    let key = (
        key.0,
        key.1,
        key.2,
        key.3,
        key.4,
        [key.5, vec![c.shape.clone(), a.shape.clone(), b.shape.clone()]].concat(),
        key.6,
        key.7,
    );
    memo(&CACHE, key, || fragments(c, a, b, per))
}

/// Matches the accumulator and operand maps to the ISA fragments and checks every
/// thread's elements against them. `per` is elements per operand word (2 or 4).
pub fn fragments(c: &ThreadMap, a: &ThreadMap, b: &ThreadMap, per: usize) -> Result<Fragments, String> {
    let k = if per == 2 { 16 } else { 32 };
    let half = k / 2;
    let index = |m: &ThreadMap, step: usize| -> HashMap<Vec<i64>, usize> {
        let mut out = HashMap::new();
        for i in (0..m.len()).step_by(step) {
            out.entry(m.regs[i].clone()).or_insert(i / step);
        }
        out
    };
    let (ci, ai, bi) = (index(c, 1), index(a, per), index(b, per));
    let find = |ix: &HashMap<Vec<i64>, usize>, r: i64, col: i64, what: &str| {
        ix.get(&vec![r, col]).copied().ok_or_else(|| format!("no {what} register holds ({r}, {col}) in thread 0"))
    };
    let mut frags = Fragments { c: Vec::new(), a: HashMap::new(), b: HashMap::new(), k };
    for i in 0..c.len() {
        let (r, col) = (c.regs[i][0], c.regs[i][1]);
        if r % 16 != 0 || col % 8 != 0 || frags.c.iter().any(|(o, _)| *o == (r, col)) {
            continue;
        }
        let regs = [
            find(&ci, r, col, "accumulator")?,
            find(&ci, r, col + 1, "accumulator")?,
            find(&ci, r + 8, col, "accumulator")?,
            find(&ci, r + 8, col + 1, "accumulator")?,
        ];
        if regs[0] != i {
            continue;
        }
        frags.c.push(((r, col), regs));
    }
    let kdim = a.shape[1];
    for &((r, col), _) in &frags.c {
        for k0 in (0..kdim).step_by(k as usize) {
            frags.a.entry((r, k0)).or_insert([
                find(&ai, r, k0, "A")?,
                find(&ai, r + 8, k0, "A")?,
                find(&ai, r, k0 + half, "A")?,
                find(&ai, r + 8, k0 + half, "A")?,
            ]);
            frags.b.entry((k0, col)).or_insert([find(&bi, k0, col, "B")?, find(&bi, k0 + half, col, "B")?]);
        }
    }
    if frags.c.len() * 4 != c.len() {
        return Err(format!("{} accumulator registers are not whole m16n8 fragments", c.len()));
    }
    // Every thread: the ISA's element of each fragment position is the layout's.
    for tid in 0..c.threads {
        let warp0 = tid - tid % WARP;
        let (g, t) = ((tid % WARP / 4) as i64, (tid % 4) as i64);
        for &((r0, c0), regs) in &frags.c {
            let origin = c.coord(regs[0], warp0).to_vec();
            let (wr, wc) = (origin[0] - r0, origin[1] - c0);
            for (i, &reg) in regs.iter().enumerate() {
                let i = i as i64;
                let want = vec![wr + r0 + g + 8 * (i / 2), wc + c0 + 2 * t + (i & 1)];
                if c.coord(reg, tid) != want.as_slice() {
                    return Err(format!("accumulator c{i} of thread {tid} is not at {want:?}"));
                }
            }
            for k0 in (0..kdim).step_by(k as usize) {
                let words = frags.a[&(r0, k0)];
                for i in 0..(4 * per) as i64 {
                    let (row, col) = if per == 2 {
                        (g + 8 * ((i / 2) & 1), 2 * t + (i & 1) + 8 * (i / 4))
                    } else {
                        (g + 8 * ((i / 4) & 1), 4 * t + (i & 3) + 16 * (i / 8))
                    };
                    let reg = words[i as usize / per] * per + i as usize % per;
                    let want = vec![wr + r0 + row, k0 + col];
                    if a.coord(reg, tid) != want.as_slice() {
                        return Err(format!("A element a{i} of thread {tid} is not at {want:?}"));
                    }
                }
                let words = frags.b[&(k0, c0)];
                for i in 0..(2 * per) as i64 {
                    let row = if per == 2 { 2 * t + (i & 1) + 8 * (i / 2) } else { 4 * t + (i & 3) + 16 * (i / 4) };
                    let reg = words[i as usize / per] * per + i as usize % per;
                    let want = vec![k0 + row, wc + c0 + g];
                    if b.coord(reg, tid) != want.as_slice() {
                        return Err(format!("B element b{i} of thread {tid} is not at {want:?}"));
                    }
                }
            }
        }
    }
    Ok(frags)
}

/// `plan_ldmatrix`, remembered across kernels.
pub fn plan_ldmatrix_cached(
    ty: &crate::ir::SmemType,
    map: &ThreadMap,
    dtype: DType,
    transpose: bool,
) -> Result<Option<Vec<LdMatrix>>, String> {
    type Key = (crate::ir::SmemType, Vec<Vec<i64>>, Vec<Vec<i64>>, Vec<i64>, u32, DType, bool);
    static CACHE: Memo<Key, Result<Option<Vec<LdMatrix>>, String>> = OnceLock::new();
    let key = (ty.clone(), map.regs.clone(), map.bits.clone(), map.shape.clone(), map.threads, dtype, transpose);
    memo(&CACHE, key, || plan_ldmatrix(ty, map, dtype, transpose))
}

/// Plans the `ldmatrix` loads of an operand tile from a buffer (`None` when its
/// words are not 8x8 matrices of 16-bit units of the buffer).
pub fn plan_ldmatrix(
    ty: &crate::ir::SmemType,
    map: &ThreadMap,
    dtype: DType,
    transpose: bool,
) -> Result<Option<Vec<LdMatrix>>, String> {
    let per = match dtype.bits() {
        16 => 2,
        8 => 4,
        _ => return Ok(None),
    };
    if map.rank() != 2 || !map.len().is_multiple_of(per) || ty.dims.len() != 2 {
        return Ok(None);
    }
    let threads = map.threads;
    let warps = threads / WARP;
    let words = map.len() / per;
    let units_per_elem = if per == 2 { 1 } else { 2 };
    // Per word: transposed or not, and per warp the origin (in 16-bit units) of its matrix.
    let mut trans = vec![None; words];
    let mut origins = vec![vec![(0i64, 0i64); warps as usize]; words];
    for (w, origin) in origins.iter_mut().enumerate() {
        for tid in 0..threads {
            let phys: Vec<(i64, i64)> = (0..per)
                .map(|e| {
                    let c = map.coord(w * per + e, tid);
                    if transpose {
                        (c[1], c[0])
                    } else {
                        (c[0], c[1])
                    }
                })
                .collect();
            let along_row = phys.iter().enumerate().all(|(e, p)| *p == (phys[0].0, phys[0].1 + e as i64));
            let along_col = per == 2 && phys[1] == (phys[0].0 + 1, phys[0].1);
            let is_trans = match (along_row, along_col) {
                (true, _) => false,
                (false, true) => true,
                _ => return Ok(None),
            };
            if per == 4 && phys[0].1 % 2 != 0 {
                return Ok(None);
            }
            if trans[w].is_some_and(|t| t != is_trans) {
                return Ok(None);
            }
            trans[w] = Some(is_trans);
            let unit = (phys[0].0, phys[0].1 / units_per_elem);
            let lane = (tid % WARP) as i64;
            let o = if is_trans {
                (unit.0 - 2 * (lane % 4), unit.1 - lane / 4)
            } else {
                (unit.0 - lane / 4, unit.1 - 2 * (lane % 4))
            };
            let warp = (tid / WARP) as usize;
            if lane == 0 {
                origin[warp] = o;
            } else if origin[warp] != o {
                return Ok(None);
            }
            if o.1 % 8 != 0 || o.0 < 0 || o.1 < 0 {
                return Ok(None);
            }
        }
    }
    // The warp part of an origin, affine in the warp-id bits.
    let warp_part = |w: usize| -> Option<(Expr, Expr)> {
        let o = &origins[w];
        let (mut er, mut ec) = (Expr::c(0), Expr::c(0));
        let bits = warps.trailing_zeros();
        for bit in 0..bits {
            let d = (o[1 << bit].0 - o[0].0, o[1 << bit].1 - o[0].1);
            if d.0 < 0 || d.1 < 0 {
                return None;
            }
            let field = Expr::tid().div(1 << (5 + bit), threads).rem(2, threads);
            er = er.add(field.clone().mul(d.0));
            ec = ec.add(field.mul(d.1));
        }
        for (warp, ow) in o.iter().enumerate() {
            let mut want = o[0];
            for bit in 0..bits {
                if warp >> bit & 1 == 1 {
                    want.0 += o[1 << bit].0 - o[0].0;
                    want.1 += o[1 << bit].1 - o[0].1;
                }
            }
            if *ow != want {
                return None;
            }
        }
        Some((er, ec))
    };
    let step = |w: usize, v: usize| -> Option<(i64, i64)> {
        let d = (origins[v][0].0 - origins[w][0].0, origins[v][0].1 - origins[w][0].1);
        origins[v].iter().zip(&origins[w]).all(|(a, b)| (a.0 - b.0, a.1 - b.1) == d).then_some(d)
    };
    let mut out = Vec::new();
    let mut w = 0;
    while w < words {
        let t = trans[w].unwrap_or(false);
        let same = |n: usize| w + n <= words && (w..w + n).all(|v| trans[v] == Some(t));
        // (matrices, step of matrix 1, step of matrix 2) in 16-bit units.
        type Group = (usize, (i64, i64), (i64, i64));
        let mut group: Option<Group> = None;
        if same(4) {
            if let (Some(d1), Some(d2), Some(d3)) = (step(w, w + 1), step(w, w + 2), step(w, w + 3)) {
                if d3 == (d1.0 + d2.0, d1.1 + d2.1) {
                    group = Some((4, d1, d2));
                }
            }
        }
        if group.is_none() && same(2) {
            if let Some(d1) = step(w, w + 1) {
                group = Some((2, d1, (0, 0)));
            }
        }
        let (n, d1, d2) = group.unwrap_or((1, (0, 0), (0, 0)));
        let Some((wr, wc)) = warp_part(w) else { return Ok(None) };
        let lane = Expr::tid().rem(WARP as i64, threads);
        let bit3 = lane.clone().div(8, threads).rem(2, threads);
        let bit4 = lane.clone().div(16, threads).rem(2, threads);
        let row_in = lane.rem(8, threads);
        let (o_r, o_c) = origins[w][0];
        let mut row = wr.add(row_in).addc(o_r);
        let mut col = wc.addc(o_c);
        if n >= 2 {
            row = row.add(bit3.clone().mul(d1.0));
            col = col.add(bit3.mul(d1.1));
        }
        if n == 4 {
            row = row.add(bit4.clone().mul(d2.0));
            col = col.add(bit4.mul(d2.1));
        }
        let offset = smem_offset(ty, row, col.mul(units_per_elem), threads).ok_or("a symbolic buffer shape")?;
        out.push(LdMatrix { words: (w..w + n).collect(), trans: t, offset });
        w += n;
    }
    simulate_ldmatrix(ty, map, per, transpose, &out)?;
    Ok(Some(out))
}

/// Runs each planned `ldmatrix` for every lane and checks that every word receives
/// the buffer bytes of the elements the layout assigns it.
fn simulate_ldmatrix(
    ty: &crate::ir::SmemType,
    map: &ThreadMap,
    per: usize,
    transpose: bool,
    plan: &[LdMatrix],
) -> Result<(), String> {
    let eb = ty.dtype.bytes() as i64;
    for ld in plan {
        for tid in 0..map.threads {
            let warp0 = tid - tid % WARP;
            let lane = (tid % WARP) as i64;
            let supplied = |l: i64| ld.offset.eval(warp0 + l as u32);
            for (m, &w) in ld.words.iter().enumerate() {
                let m = m as i64;
                for e in 0..per {
                    let c = map.coord(w * per + e, tid);
                    let (r, col) = if transpose { (c[1], c[0]) } else { (c[0], c[1]) };
                    let want = ty.byte_offset(r, col).ok_or("a symbolic buffer shape")?;
                    // Which 16-bit unit of the lane's register and which byte inside it.
                    let unit = (e * eb as usize / 2) as i64;
                    let byte = (e as i64 * eb) % 2;
                    let got = if ld.trans {
                        supplied(8 * m + 2 * (lane % 4) + unit) + 2 * (lane / 4) + byte
                    } else {
                        supplied(8 * m + lane / 4) + 2 * (2 * (lane % 4) + unit) + byte
                    };
                    if got != want {
                        return Err(format!(
                            "ldmatrix for word {w} gives thread {tid} byte {got} of the buffer, not {want} (element {c:?})"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A dot operand's words: in registers, or loaded from shared memory on first use.
pub(super) struct Words {
    words: Vec<Option<Operand>>,
    /// The deferred load and the address (register, offset) of each of its `ldmatrix`.
    lazy: Option<Pending>,
}

struct Pending {
    load: Rc<LazyLoad>,
    addrs: Vec<(Reg, i64)>,
}

impl Emitter<'_> {
    /// Dot operands from shared memory with `ldmatrix`; `None` when the tile's words
    /// are not 8x8 matrices of the buffer (the caller loads element by element).
    pub(super) fn ldmatrix(
        &mut self,
        op: &Op,
        slot: &SmemVal,
        map: &ThreadMap,
        dtype: DType,
        transpose: bool,
    ) -> R<Option<Vec<Operand>>> {
        let plan = plan_ldmatrix_cached(&slot.ty, map, dtype, transpose)
            .map_err(|e| self.fail(op, format!("internal error: {e}")))?;
        let Some(plan) = plan else { return Ok(None) };
        let per = if dtype.bits() == 16 { 2 } else { 4 };
        let lazy = Rc::new(LazyLoad { slot: slot.clone(), plan, words: map.len() / per });
        Ok(Some(self.load_all(&lazy)))
    }

    /// Every `ldmatrix` of a deferred load.
    pub(super) fn load_all(&mut self, lazy: &Rc<LazyLoad>) -> Vec<Operand> {
        let mut words = self.lazy_words(lazy);
        (0..lazy.words).map(|w| self.word(&mut words, w)).collect()
    }

    fn lazy_words(&mut self, lazy: &Rc<LazyLoad>) -> Words {
        let exprs: Vec<Expr> = lazy.plan.iter().map(|l| l.offset.clone()).collect();
        let addrs = self.smem_addresses(&lazy.slot, &exprs);
        Words { words: vec![None; lazy.words], lazy: Some(Pending { load: lazy.clone(), addrs }) }
    }

    fn words_of(&mut self, op: &Op, t: &TileVal) -> R<Words> {
        match &t.repr {
            Repr::Lazy(lazy) => Ok(self.lazy_words(lazy)),
            _ => {
                let w = self.packed(op, t)?;
                Ok(Words { words: w.into_iter().map(Some).collect(), lazy: None })
            }
        }
    }

    /// Word `w`, issuing the `ldmatrix` that holds it the first time it is needed.
    fn word(&mut self, words: &mut Words, w: usize) -> Operand {
        if let Some(x) = words.words[w] {
            return x;
        }
        let pending = words.lazy.as_ref().expect("words without registers are deferred loads");
        let g = pending.load.plan.iter().position(|l| l.words.contains(&w)).expect("every word has a load");
        let ld = &pending.load.plan[g];
        let (reg, imm) = pending.addrs[g];
        let regs: Vec<Reg> = ld.words.iter().map(|_| self.b.reg(Class::B32)).collect();
        let list = regs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
        let trans = if ld.trans { ".trans" } else { "" };
        self.b
            .ins(format!("ldmatrix.sync.aligned.m8n8.x{}{trans}.shared.b16 {{{list}}}, [{reg}+{imm}]", ld.words.len()));
        for (&v, r) in ld.words.iter().zip(regs) {
            words.words[v] = Some(Operand::Reg(r));
        }
        words.words[w].expect("the load filled the word")
    }

    pub(super) fn dot(&mut self, op: &Op) -> R<()> {
        let a = self.tile(op, op.operands[0])?;
        let b = self.tile(op, op.operands[1])?;
        let c = self.tile(op, op.operands[2])?;
        let (out_dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        // Tensor cores take 16- and 8-bit operands; wider ones (f32 products must be
        // exact) take the FMA path whatever instruction the schedule picked.
        let tensor_core_types = a.dtype.bits() <= 16 && b.dtype.bits() <= 16;
        // `@accum(T)` with T narrower than f32: tensor cores accumulate in f16 (16-bit
        // f16 or fp8 operands); any other T takes the FMA path, rounding every step.
        let step = ir_policy::acc(op).filter(|&t| ir_policy::rounds_each_step(t));
        let f16_acc = step == Some(DType::F16) && (a.dtype == DType::F16 || a.dtype.is_fp8()) && a.dtype == b.dtype;
        if op.str_attr("instr") == Some("fma")
            || !matches!(c.layout, Layout::Mma { .. })
            || !tensor_core_types
            || (step.is_some() && !f16_acc)
        {
            return self.fma_dot(op, &a, &b, &c, step);
        }
        let (ad, bd) = (a.dtype, b.dtype);
        let cmap = self.map(op, &c.layout, &c.shape)?;
        let amap = self.map(op, &a.layout, &a.shape)?;
        let bmap = self.map(op, &b.layout, &b.shape)?;
        enum Kind {
            Half(&'static str),
            Fp8Native(&'static str, &'static str),
            Fp8Soft,
            Int8,
        }
        let fp8 = |d: DType| if d == DType::Fp8E4m3 { "e4m3" } else { "e5m2" };
        let kind = match (ad, bd) {
            (DType::BF16, DType::BF16) => Kind::Half("bf16"),
            (DType::F16, DType::F16) => Kind::Half("f16"),
            (x, y) if x.is_fp8() && y.is_fp8() => {
                // An f16 accumulator: fp8 → f16 pairs and the f16 `mma` (sm_80 and sm_90).
                if self.target == Target::Sm90 && !f16_acc {
                    Kind::Fp8Native(fp8(x), fp8(y))
                } else {
                    Kind::Fp8Soft
                }
            }
            (DType::Int8, DType::Int8) => Kind::Int8,
            _ => return Err(self.unsupported(op, format!("with {ad} x {bd} operands on tensor cores"))),
        };
        let per = if ad.bits() == 16 { 2 } else { 4 };
        let frags =
            fragments_cached(&cmap, &amap, &bmap, per).map_err(|e| self.fail(op, format!("internal error: {e}")))?;
        let mut a_words = self.words_of(op, &a)?;
        let mut b_words = self.words_of(op, &b)?;
        let int_acc = matches!(kind, Kind::Int8);
        let acc_class = if int_acc { Class::B32 } else { Class::F32 };
        if int_acc && wide_class(c.dtype) != Class::B32 {
            return Err(self.unsupported(op, format!("with int8 operands and a {} accumulator", c.dtype)));
        }
        let c_vals = self.wide(&c);
        // sm_80 fp8: each word of four codes becomes two f16 pairs (converted once,
        // when first needed).
        let mut soft: HashMap<(bool, usize), (Reg, Reg)> = HashMap::new();
        let mut out: Vec<Operand> = vec![Operand::Int(0); c_vals.len()];
        let mut zero_cache: HashMap<Operand, Reg> = HashMap::new();
        let mut acc: Vec<[Reg; 4]> = Vec::new();
        let kdim = a.shape[1];
        for k0 in (0..kdim).step_by(frags.k as usize) {
            for (fi, &((r0, c0), cregs)) in frags.c.iter().enumerate() {
                let cin: [String; 4] = if k0 == 0 {
                    let mut s: [String; 4] = Default::default();
                    for (j, &reg) in cregs.iter().enumerate() {
                        let v = c_vals[reg];
                        let r = match v {
                            Operand::Reg(r) if r.class == acc_class => r,
                            Operand::Reg(r) => {
                                let x = self.b.reg(acc_class);
                                self.b.ins(format!("mov.b32 {x}, {r}"));
                                x
                            }
                            imm => *zero_cache.entry(imm).or_insert_with(|| materialize(&mut self.b, acc_class, imm)),
                        };
                        s[j] = r.to_string();
                    }
                    s
                } else {
                    acc[fi].map(|r| r.to_string())
                };
                if k0 == 0 {
                    acc.push([
                        self.b.reg(acc_class),
                        self.b.reg(acc_class),
                        self.b.reg(acc_class),
                        self.b.reg(acc_class),
                    ]);
                }
                let d = acc[fi].map(|r| r.to_string()).join(", ");
                let cs = cin.join(", ");
                let aw = frags.a[&(r0, k0)];
                let bw = frags.b[&(k0, c0)];
                let al = aw.map(|w| {
                    let x = self.word(&mut a_words, w);
                    materialize(&mut self.b, Class::B32, x)
                });
                let bl = bw.map(|w| {
                    let x = self.word(&mut b_words, w);
                    materialize(&mut self.b, Class::B32, x)
                });
                let (a_regs, b_regs) = (al, bl);
                let al = a_regs.map(|r| r.to_string()).join(", ");
                let bl = b_regs.map(|r| r.to_string()).join(", ");
                match kind {
                    Kind::Half(_) if f16_acc => {
                        let (dr, cr) = (acc[fi], cin.clone());
                        mma_f16_acc(&mut self.b, dr, &cr, &al, &bl);
                    }
                    Kind::Half(ty) => {
                        self.b.ins(format!(
                            "mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 {{{d}}}, {{{al}}}, {{{bl}}}, {{{cs}}}"
                        ));
                    }
                    Kind::Fp8Native(ta, tb) => {
                        self.needs_isa_84 = true;
                        self.b.ins(format!(
                            "mma.sync.aligned.m16n8k32.row.col.f32.{ta}.{tb}.f32 {{{d}}}, {{{al}}}, {{{bl}}}, {{{cs}}}"
                        ));
                    }
                    Kind::Int8 => {
                        self.b.ins(format!(
                            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {{{d}}}, {{{al}}}, {{{bl}}}, {{{cs}}}"
                        ));
                    }
                    Kind::Fp8Soft => {
                        // k32 as two k16 steps over a permutation of k that A and B
                        // share: lane t's bytes 4t..4t+3 play k' = 2t, 2t+1, 2t+8, 2t+9.
                        let mut pair = |is_b: bool, w: usize, reg: Reg, b: &mut super::builder::Builder| {
                            *soft
                                .entry((is_b, w))
                                .or_insert_with(|| fp8x4_to_f16x2(b, if is_b { bd } else { ad }, Operand::Reg(reg)))
                        };
                        let a0 = pair(false, aw[0], a_regs[0], &mut self.b);
                        let a1 = pair(false, aw[1], a_regs[1], &mut self.b);
                        let a2 = pair(false, aw[2], a_regs[2], &mut self.b);
                        let a3 = pair(false, aw[3], a_regs[3], &mut self.b);
                        let b0 = pair(true, bw[0], b_regs[0], &mut self.b);
                        let b1 = pair(true, bw[1], b_regs[1], &mut self.b);
                        let steps =
                            [([a0.0, a1.0, a0.1, a1.1], [b0.0, b0.1]), ([a2.0, a3.0, a2.1, a3.1], [b1.0, b1.1])];
                        for (s, (al, bl)) in steps.iter().enumerate() {
                            let al = al.map(|r| r.to_string()).join(", ");
                            let bl = bl.map(|r| r.to_string()).join(", ");
                            if f16_acc {
                                let cr = if s == 0 { cin.clone() } else { acc[fi].map(|r| r.to_string()) };
                                mma_f16_acc(&mut self.b, acc[fi], &cr, &al, &bl);
                                continue;
                            }
                            let cs = if s == 0 { cs.clone() } else { d.clone() };
                            self.b.ins(format!(
                                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, {{{al}}}, {{{bl}}}, {{{cs}}}"
                            ));
                        }
                    }
                }
            }
        }
        if kdim == 0 {
            out.clone_from(&c_vals);
        } else {
            for (fi, &(_, cregs)) in frags.c.iter().enumerate() {
                for (j, &reg) in cregs.iter().enumerate() {
                    out[reg] = Operand::Reg(acc[fi][j]);
                }
            }
        }
        if out_dtype.is_float() && out_dtype != DType::F32 {
            let target = self.target;
            for x in out.iter_mut() {
                *x = round_wide(&mut self.b, target, out_dtype, *x);
            }
        }
        self.set(op.results[0], Val::Tile(TileVal { dtype: out_dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }

    /// `acc + a @ b` with FMAs: both operands go through shared scratch; each thread
    /// walks k for the accumulator elements it owns. `step` (`@accum(T)`, T narrower
    /// than f32): the accumulator is rounded to T first and after every FMA.
    fn fma_dot(&mut self, op: &Op, a: &TileVal, b: &TileVal, c: &TileVal, step: Option<DType>) -> R<()> {
        let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
        let amap = self.map(op, &a.layout, &a.shape)?;
        let bmap = self.map(op, &b.layout, &b.shape)?;
        let cmap = self.map(op, &c.layout, &c.shape)?;
        let float = c.dtype.is_float();
        if !float && !matches!(wide_class(c.dtype), Class::B32) {
            return Err(self.unsupported(op, format!("with a {} accumulator", c.dtype)));
        }
        // f64 operands sum in f64 (an f64 `tile.dot` is an f64 tile): 8-byte elements.
        let wide64 = [a.dtype, b.dtype, c.dtype].iter().filter(|&&d| wide_class(d) == Class::F64).count();
        let f64_dot = match wide64 {
            0 => false,
            3 => true,
            _ => return Err(self.unsupported(op, "mixing f64 with narrower operands or accumulators")),
        };
        let eb: i64 = if f64_dot { 8 } else { 4 };
        let a_bytes = (m * k * eb) as u32;
        let scratch = self.scratch(a_bytes + (k * n * eb) as u32);
        let base = self.smem_base();
        self.sync_threads();
        let aw = self.wide(a);
        let bw = self.wide(b);
        let (ty, conv) = match (f64_dot, float) {
            (true, _) => ("f64", ""),
            (false, true) => ("f32", "cvt.rn.f32.s32"),
            (false, false) => ("s32", "cvt.rzi.s32.f32"),
        };
        let class = match (f64_dot, float) {
            (true, _) => Class::F64,
            (false, true) => Class::F32,
            (false, false) => Class::B32,
        };
        let to_acc = |b: &mut super::builder::Builder, x: Operand, dtype: DType| -> Reg {
            let want = class;
            let r = materialize(b, wide_class(dtype), x);
            if r.class == want {
                return r;
            }
            let out = b.reg(want);
            b.ins(format!("{conv} {out}, {r}"));
            out
        };
        for (map, vals, cols, off, dtype) in [(&amap, &aw, k, 0i64, a.dtype), (&bmap, &bw, n, a_bytes as i64, b.dtype)]
        {
            let exprs: Vec<Expr> = (0..map.len())
                .map(|i| map.coord_expr(i, 0).mul(cols).add(map.coord_expr(i, 1)).mul(eb).addc(off))
                .collect();
            let addrs = self.smem_addresses_at(base, scratch as i64, &exprs);
            for (i, (reg, imm)) in addrs.into_iter().enumerate() {
                let v = to_acc(&mut self.b, vals[i], dtype);
                self.b.ins(format!("st.shared.{ty} [{reg}+{imm}], {v}"));
            }
        }
        self.sync_threads();
        let cw = self.wide(c);
        let target = self.target;
        let step = step.filter(|_| float);
        let acc: Vec<Reg> = cw
            .iter()
            .map(|&x| {
                let r = self.b.reg(class);
                let x = match step {
                    Some(t) => round_wide(&mut self.b, target, t, x),
                    None => x,
                };
                super::emit::mov(&mut self.b, r, x);
                r
            })
            .collect();
        // Row and column bases of the owned elements (k advances both by a stride).
        let row_exprs: Vec<Expr> = (0..cmap.len()).map(|i| cmap.coord_expr(i, 0).mul(k * eb)).collect();
        let col_exprs: Vec<Expr> =
            (0..cmap.len()).map(|i| cmap.coord_expr(i, 1).mul(eb).addc(a_bytes as i64)).collect();
        let rows = self.smem_addresses_at(base, scratch as i64, &row_exprs);
        let cols = self.smem_addresses_at(base, scratch as i64, &col_exprs);
        let kk = self.b.reg(Class::B32);
        self.b.ins(format!("mov.u32 {kk}, 0"));
        let head = self.b.label("fma");
        self.b.place_label(&head);
        let (ka, kb) = (self.b.reg(Class::B32), self.b.reg(Class::B32));
        self.b.ins(format!("shl.b32 {ka}, {kk}, {}", eb.trailing_zeros()));
        self.b.ins(format!("mul.lo.u32 {kb}, {kk}, {}", n * eb));
        let mut a_loaded: HashMap<(Reg, i64), Reg> = HashMap::new();
        let mut b_loaded: HashMap<(Reg, i64), Reg> = HashMap::new();
        for (i, &r) in acc.iter().enumerate() {
            let av = *a_loaded.entry(rows[i]).or_insert_with(|| {
                let addr = self.b.reg(Class::B32);
                self.b.ins(format!("add.u32 {addr}, {}, {ka}", rows[i].0));
                let v = self.b.reg(class);
                self.b.ins(format!("ld.shared.{ty} {v}, [{addr}+{}]", rows[i].1));
                v
            });
            let bv = *b_loaded.entry(cols[i]).or_insert_with(|| {
                let addr = self.b.reg(Class::B32);
                self.b.ins(format!("add.u32 {addr}, {}, {kb}", cols[i].0));
                let v = self.b.reg(class);
                self.b.ins(format!("ld.shared.{ty} {v}, [{addr}+{}]", cols[i].1));
                v
            });
            if f64_dot {
                self.b.ins(format!("fma.rn.f64 {r}, {av}, {bv}, {r}"));
            } else if let (true, Some(t)) = (float, step) {
                self.b.ins(format!("fma.rn.f32 {r}, {av}, {bv}, {r}"));
                let x = round_wide(&mut self.b, target, t, Operand::Reg(r));
                super::emit::mov(&mut self.b, r, x);
            } else if float {
                self.b.ins(format!("fma.rn.f32 {r}, {av}, {bv}, {r}"));
            } else {
                self.b.ins(format!("mad.lo.s32 {r}, {av}, {bv}, {r}"));
            }
        }
        let p = self.b.reg(Class::Pred);
        self.b.ins(format!("add.u32 {kk}, {kk}, 1"));
        self.b.ins(format!("setp.lt.u32 {p}, {kk}, {k}"));
        self.b.ins_if(p, false, format!("bra.uni {head}"));
        let out: Vec<Operand> =
            acc.iter().map(|&r| round_wide(&mut self.b, target, c.dtype, Operand::Reg(r))).collect();
        let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }
}

/// One `m16n8k16` with f16 accumulators (`@accum(f16)`): the four f32 accumulator
/// registers `c` (exact f16 values) are packed in two `f16x2` words, the `mma` sums in
/// f16 and `d` receives the unpacked results.
fn mma_f16_acc(b: &mut super::builder::Builder, d: [Reg; 4], c: &[String; 4], a: &str, bl: &str) {
    let (c01, c23, d01, d23) = (b.reg(Class::B32), b.reg(Class::B32), b.reg(Class::B32), b.reg(Class::B32));
    b.ins(format!("cvt.rn.f16x2.f32 {c01}, {}, {}", c[1], c[0]));
    b.ins(format!("cvt.rn.f16x2.f32 {c23}, {}, {}", c[3], c[2]));
    b.ins(format!(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {{{d01}, {d23}}}, {{{a}}}, {{{bl}}}, {{{c01}, {c23}}}"
    ));
    for (word, pair) in [(d01, [d[0], d[1]]), (d23, [d[2], d[3]])] {
        let (lo, hi) = (b.reg(Class::B16), b.reg(Class::B16));
        b.ins(format!("mov.b32 {{{lo}, {hi}}}, {word}"));
        b.ins(format!("cvt.f32.f16 {}, {lo}", pair[0]));
        b.ins(format!("cvt.f32.f16 {}, {hi}", pair[1]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{SmemType, Swizzle};
    use tessera_frontend::check::Dim;

    fn map(layout: Layout, shape: &[i64], threads: u32) -> ThreadMap {
        ThreadMap::of(&layout, shape, threads).unwrap()
    }

    fn operand(op: u8, warps: [u32; 2], k_width: u32) -> Layout {
        Layout::DotOperand { op, parent: Box::new(Layout::Mma { warps }), k_width }
    }

    /// The ISA fragment tables agree with `Layout::elements` for the tile shapes and
    /// warp arrangements the schedules produce (checked for every thread).
    #[test]
    fn mma_fragments_match_the_layouts() {
        for (m, n, k, warps, threads, per) in [
            (64, 64, 32, [4, 1], 128, 2),
            (128, 128, 64, [4, 2], 256, 2),
            (64, 64, 64, [2, 2], 128, 2),
            (128, 64, 32, [4, 1], 128, 2),
            (128, 128, 64, [4, 2], 256, 4),
            (64, 128, 64, [4, 1], 128, 4),
        ] {
            let kw = if per == 2 { 2 } else { 4 };
            let c = map(Layout::Mma { warps }, &[m, n], threads);
            let a = map(operand(0, warps, kw), &[m, k], threads);
            let b = map(operand(1, warps, kw), &[k, n], threads);
            let f = fragments(&c, &a, &b, per).unwrap_or_else(|e| panic!("{m}x{n}x{k} {warps:?}: {e}"));
            assert_eq!(f.c.len() * 4, c.len());
            assert_eq!(f.a.len() as i64, (m / warps[0] as i64 / 16) * (k / f.k) * warps[0] as i64 / warps[0] as i64);
        }
    }

    fn smem(rows: i64, cols: i64, dtype: DType, swizzle: Swizzle) -> SmemType {
        SmemType { dims: vec![Dim::constant(rows), Dim::constant(cols)], dtype, swizzle, pad: 0, stages: 1 }
    }

    /// `ldmatrix` plans exist for the operand tiles of the corpus's dots and their
    /// simulated loads give every lane the right bytes (checked inside the planner).
    #[test]
    fn ldmatrix_plans_cover_the_dot_operands() {
        let cases = [
            // gemm A [64, 32] and B [32, 64], bf16, swizzled.
            (operand(0, [4, 1], 2), [64, 32], smem(64, 32, DType::BF16, Swizzle::Xor), false, 128, false),
            (operand(1, [4, 1], 2), [32, 64], smem(32, 64, DType::BF16, Swizzle::Xor), false, 128, true),
            // flash attention: K loaded transposed ([BN, D] buffer as a [D, BN] B operand).
            (operand(1, [4, 1], 2), [64, 64], smem(64, 64, DType::BF16, Swizzle::Xor), true, 128, false),
            (operand(0, [4, 2], 2), [128, 64], smem(128, 64, DType::BF16, Swizzle::None), false, 256, false),
            // fp8 A rows are pairs of 16-bit units.
            (operand(0, [4, 2], 4), [128, 64], smem(128, 64, DType::Fp8E4m3, Swizzle::Xor), false, 256, false),
        ];
        for (layout, shape, ty, transpose, threads, trans) in cases {
            let m = map(layout.clone(), &shape, threads);
            let plan = plan_ldmatrix(&ty, &m, ty.dtype, transpose).unwrap().unwrap_or_else(|| panic!("{layout}"));
            assert!(plan.iter().all(|l| l.words.len() == 4), "{layout}: x4 loads");
            assert!(plan.iter().all(|l| l.trans == trans), "{layout}: trans = {trans}");
        }
        // fp8 B from a row-major [K, N] buffer has no 16-bit matrices: no plan.
        let m = map(operand(1, [4, 2], 4), &[64, 128], 256);
        assert!(plan_ldmatrix(&smem(64, 128, DType::Fp8E4m3, Swizzle::Xor), &m, DType::Fp8E4m3, false)
            .unwrap()
            .is_none());
    }
}
