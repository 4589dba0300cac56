//! Integer expressions of the thread id: element coordinates, shared-memory byte
//! offsets (swizzle included: `smem_offset`, used by the shared loads and stores and by
//! `ldmatrix`), copy-chunk assignments.
//!
//! The same expression is both emitted as PTX and evaluated here, so the compiler can
//! check its own address arithmetic against the IR's definitions (`Layout::elements`,
//! `SmemType::byte_offset`) for every thread, and can find expressions that differ
//! from an already computed one by a constant (an immediate address offset).

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::builder::{Builder, Class, Operand, Reg};
use crate::ir::{SmemType, Swizzle};

/// A non-negative integer function of `%tid.x` (values stay below 2^31).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Expr {
    Const(i64),
    Tid,
    Add(Arc<Expr>, Arc<Expr>),
    Mul(Arc<Expr>, i64),
    Div(Arc<Expr>, i64),
    Rem(Arc<Expr>, i64),
    Xor(Arc<Expr>, Arc<Expr>),
}

impl Expr {
    pub fn c(v: i64) -> Expr {
        Expr::Const(v)
    }

    pub fn tid() -> Expr {
        Expr::Tid
    }

    pub fn as_const(&self) -> Option<i64> {
        match self {
            Expr::Const(v) => Some(*v),
            _ => None,
        }
    }

    /// The largest value the expression takes for thread ids below `threads`.
    pub fn max(&self, threads: u32) -> i64 {
        match self {
            Expr::Const(v) => *v,
            Expr::Tid => threads as i64 - 1,
            Expr::Add(a, b) => a.max(threads) + b.max(threads),
            Expr::Mul(a, k) => a.max(threads) * k,
            Expr::Div(a, k) => a.max(threads) / k,
            Expr::Rem(a, k) => a.max(threads).min(k - 1),
            Expr::Xor(a, b) => {
                let bits = 64 - (a.max(threads) | b.max(threads)).leading_zeros();
                (1i64 << bits) - 1
            }
        }
    }

    pub fn eval(&self, tid: u32) -> i64 {
        match self {
            Expr::Const(v) => *v,
            Expr::Tid => tid as i64,
            Expr::Add(a, b) => a.eval(tid) + b.eval(tid),
            Expr::Mul(a, k) => a.eval(tid) * k,
            Expr::Div(a, k) => a.eval(tid) / k,
            Expr::Rem(a, k) => a.eval(tid) % k,
            Expr::Xor(a, b) => a.eval(tid) ^ b.eval(tid),
        }
    }

    /// The values for thread ids `0..out.len()`, in order (`eval` for each, with one walk
    /// of the expression), into `out`; `spare` holds buffers of `out`'s length for the
    /// second operand of a binary node, reused so that a family of expressions is
    /// evaluated without allocating per node.
    fn eval_into(&self, out: &mut [i64], spare: &mut Vec<Vec<i64>>) {
        match self {
            Expr::Const(v) => out.fill(*v),
            Expr::Tid => out.iter_mut().enumerate().for_each(|(t, x)| *x = t as i64),
            Expr::Mul(a, k) => {
                a.eval_into(out, spare);
                out.iter_mut().for_each(|x| *x *= k);
            }
            Expr::Div(a, k) => {
                a.eval_into(out, spare);
                out.iter_mut().for_each(|x| *x /= k);
            }
            Expr::Rem(a, k) => {
                a.eval_into(out, spare);
                out.iter_mut().for_each(|x| *x %= k);
            }
            Expr::Add(a, b) | Expr::Xor(a, b) => {
                a.eval_into(out, spare);
                let add = matches!(self, Expr::Add(..));
                if let Some(c) = b.as_const() {
                    out.iter_mut().for_each(|x| *x = if add { *x + c } else { *x ^ c });
                    return;
                }
                let mut other = spare.pop().unwrap_or_else(|| vec![0; out.len()]);
                other.resize(out.len(), 0);
                b.eval_into(&mut other, spare);
                for (x, y) in out.iter_mut().zip(&other) {
                    *x = if add { *x + y } else { *x ^ y };
                }
                spare.push(other);
            }
        }
    }

    pub fn add(self, other: Expr) -> Expr {
        match (&self, &other) {
            (Expr::Const(a), Expr::Const(b)) => Expr::Const(a + b),
            (Expr::Const(0), _) => other,
            (_, Expr::Const(0)) => self,
            // Keep constants outermost so that `x + c` offsets are visible.
            (Expr::Add(a, b), Expr::Const(c)) if b.as_const().is_some() => {
                Expr::Add(a.clone(), Arc::new(Expr::Const(b.as_const().unwrap() + c)))
            }
            (Expr::Const(_), _) => Expr::Add(Arc::new(other), Arc::new(self)),
            _ => Expr::Add(Arc::new(self), Arc::new(other)),
        }
    }

    pub fn addc(self, c: i64) -> Expr {
        self.add(Expr::Const(c))
    }

    pub fn mul(self, k: i64) -> Expr {
        match self {
            _ if k == 0 => Expr::Const(0),
            _ if k == 1 => self,
            Expr::Const(v) => Expr::Const(v * k),
            Expr::Mul(a, j) => Expr::Mul(a, j * k),
            other => Expr::Mul(Arc::new(other), k),
        }
    }

    /// Division by a positive constant (values are non-negative: floor = truncation).
    pub fn div(self, k: i64, threads: u32) -> Expr {
        assert!(k > 0, "division by a non-positive constant");
        match self {
            _ if k == 1 => self,
            Expr::Const(v) => Expr::Const(v / k),
            _ if self.max(threads) < k => Expr::Const(0),
            Expr::Div(a, j) => Expr::Div(a, j * k),
            other => Expr::Div(Arc::new(other), k),
        }
    }

    pub fn rem(self, k: i64, threads: u32) -> Expr {
        assert!(k > 0, "remainder by a non-positive constant");
        match self {
            _ if k == 1 => Expr::Const(0),
            Expr::Const(v) => Expr::Const(v % k),
            _ if self.max(threads) < k => self,
            other => Expr::Rem(Arc::new(other), k),
        }
    }

    pub fn xor(self, other: Expr) -> Expr {
        match (&self, &other) {
            (Expr::Const(a), Expr::Const(b)) => Expr::Const(a ^ b),
            (Expr::Const(0), _) => other,
            (_, Expr::Const(0)) => self,
            _ => Expr::Xor(Arc::new(self), Arc::new(other)),
        }
    }

    /// Splits `x + c` into `(x, c)`.
    pub fn split_const(&self) -> (Expr, i64) {
        match self {
            Expr::Const(v) => (Expr::Const(0), *v),
            Expr::Add(a, b) => match b.as_const() {
                Some(c) => (a.as_ref().clone(), c),
                None => (self.clone(), 0),
            },
            _ => (self.clone(), 0),
        }
    }
}

/// Thread-id expressions already computed in the prologue, by expression.
#[derive(Default)]
pub struct ExprCache {
    tid: Option<Reg>,
    regs: HashMap<Expr, Reg>,
}

impl ExprCache {
    /// The expression as a 32-bit operand; its computation goes to the prologue once.
    pub fn emit(&mut self, b: &mut Builder, e: &Expr) -> Operand {
        if let Expr::Const(v) = e {
            return Operand::Int(*v);
        }
        if let Some(r) = self.regs.get(e) {
            return Operand::Reg(*r);
        }
        let r = b.in_prologue(|b| self.compute(b, e));
        self.regs.insert(e.clone(), r);
        Operand::Reg(r)
    }

    /// The expression as a 64-bit operand (zero-extended): the 32-bit value comes from
    /// the prologue, the widening is emitted here (64-bit values stay short-lived).
    pub fn emit_wide(&mut self, b: &mut Builder, e: &Expr) -> Operand {
        if let Expr::Const(v) = e {
            return Operand::Int(*v);
        }
        let narrow = self.emit(b, e);
        let r = b.reg(Class::B64);
        b.ins(format!("cvt.u64.u32 {r}, {narrow}"));
        Operand::Reg(r)
    }

    /// The expression computed where the code is being emitted (nothing cached beyond
    /// what the prologue already has): for cold paths, whose values should not occupy
    /// registers for the whole kernel.
    pub fn emit_inline(&mut self, b: &mut Builder, e: &Expr) -> Operand {
        if let Expr::Const(v) = e {
            return Operand::Int(*v);
        }
        let tid = b.in_prologue(|b| self.tid(b));
        let mut local = HashMap::new();
        Operand::Reg(self.compute_inline(b, e, tid, true, &mut local))
    }

    /// The expression with `Tid` standing for the value of `index` (a loop counter
    /// stepping through a range the way thread ids do), computed in place.
    pub fn emit_at(&mut self, b: &mut Builder, e: &Expr, index: Reg) -> Operand {
        if let Expr::Const(v) = e {
            return Operand::Int(*v);
        }
        let mut local = HashMap::new();
        Operand::Reg(self.compute_inline(b, e, index, false, &mut local))
    }

    fn compute_inline(
        &self,
        b: &mut Builder,
        e: &Expr,
        tid: Reg,
        use_prologue: bool,
        local: &mut HashMap<Expr, Reg>,
    ) -> Reg {
        let cached = if use_prologue { self.regs.get(e) } else { None };
        if let Some(r) = cached.or_else(|| local.get(e)) {
            return *r;
        }
        let operand = |b: &mut Builder, x: &Expr, local: &mut HashMap<Expr, Reg>| match x {
            Expr::Const(v) => Operand::Int(*v),
            _ => Operand::Reg(self.compute_inline(b, x, tid, use_prologue, local)),
        };
        let r = match e {
            Expr::Tid => return tid,
            Expr::Const(v) => {
                let r = b.reg(Class::B32);
                b.ins(format!("mov.u32 {r}, {v}"));
                r
            }
            Expr::Add(x, y) => {
                let (x, y) = (operand(b, x, local), operand(b, y, local));
                let r = b.reg(Class::B32);
                b.ins(format!("add.u32 {r}, {x}, {y}"));
                r
            }
            Expr::Xor(x, y) => {
                let (x, y) = (operand(b, x, local), operand(b, y, local));
                let r = b.reg(Class::B32);
                b.ins(format!("xor.b32 {r}, {x}, {y}"));
                r
            }
            Expr::Mul(x, k) | Expr::Div(x, k) | Expr::Rem(x, k) => {
                let x = operand(b, x, local);
                let r = b.reg(Class::B32);
                b.ins(unary_by_constant(e, r, x, *k));
                r
            }
        };
        local.insert(e.clone(), r);
        r
    }

    fn tid(&mut self, b: &mut Builder) -> Reg {
        if let Some(t) = self.tid {
            return t;
        }
        let r = b.reg(Class::B32);
        b.ins(format!("mov.u32 {r}, %tid.x"));
        self.tid = Some(r);
        r
    }

    fn operand(&mut self, b: &mut Builder, e: &Expr) -> Operand {
        match e {
            Expr::Const(v) => Operand::Int(*v),
            _ => {
                if let Some(r) = self.regs.get(e) {
                    return Operand::Reg(*r);
                }
                let r = self.compute(b, e);
                self.regs.insert(e.clone(), r);
                Operand::Reg(r)
            }
        }
    }

    fn compute(&mut self, b: &mut Builder, e: &Expr) -> Reg {
        if let Some(r) = self.regs.get(e) {
            return *r;
        }
        match e {
            Expr::Tid => self.tid(b),
            Expr::Const(v) => {
                let r = b.reg(Class::B32);
                b.ins(format!("mov.u32 {r}, {v}"));
                r
            }
            Expr::Add(x, y) => {
                let (x, y) = (self.operand(b, x), self.operand(b, y));
                let r = b.reg(Class::B32);
                b.ins(format!("add.u32 {r}, {x}, {y}"));
                r
            }
            Expr::Mul(x, k) | Expr::Div(x, k) | Expr::Rem(x, k) => {
                let x = self.operand(b, x);
                let r = b.reg(Class::B32);
                b.ins(unary_by_constant(e, r, x, *k));
                r
            }
            Expr::Xor(x, y) => {
                let (x, y) = (self.operand(b, x), self.operand(b, y));
                let r = b.reg(Class::B32);
                b.ins(format!("xor.b32 {r}, {x}, {y}"));
                r
            }
        }
    }
}

/// `x * k`, `x / k` or `x % k` (shifts and masks for powers of two).
fn unary_by_constant(e: &Expr, r: Reg, x: Operand, k: i64) -> String {
    let pow2 = k > 0 && k.count_ones() == 1;
    match (e, pow2) {
        (Expr::Mul(..), true) => format!("shl.b32 {r}, {x}, {}", k.trailing_zeros()),
        (Expr::Mul(..), false) => format!("mul.lo.u32 {r}, {x}, {k}"),
        (Expr::Div(..), true) => format!("shr.u32 {r}, {x}, {}", k.trailing_zeros()),
        (Expr::Div(..), false) => format!("div.u32 {r}, {x}, {k}"),
        (_, true) => format!("and.b32 {r}, {x}, {}", k - 1),
        (_, false) => format!("rem.u32 {r}, {x}, {k}"),
    }
}

/// A family of thread expressions (one per register, copy chunk, ...) emitted as few
/// base registers plus immediate offsets: each member that differs from an earlier
/// base by the same constant for every thread reuses that base.
///
/// Families are large (one member per register of a tile, times the k steps of a dot,
/// for up to 1,024 threads), so each member is evaluated for all threads in one walk
/// and finds its base by the values it takes relative to thread 0 (equal exactly when
/// two members differ by a constant), not by comparing it with every base.
pub fn share_bases(exprs: &[Expr], threads: u32) -> Vec<(usize, i64)> {
    // The first member with these relative values, and its value at thread 0.
    let mut bases: FxHashMap<Box<[i64]>, (usize, i64)> = FxHashMap::default();
    let (mut values, mut spare) = (vec![0; threads as usize], Vec::new());
    let mut out = Vec::with_capacity(exprs.len());
    for (i, e) in exprs.iter().enumerate() {
        e.eval_into(&mut values, &mut spare);
        let at_zero = values.first().copied().unwrap_or(0);
        values.iter_mut().for_each(|v| *v -= at_zero);
        match bases.get(values.as_slice()) {
            Some(&(base, base_at_zero)) => out.push((base, at_zero - base_at_zero)),
            None => {
                bases.insert(values.as_slice().into(), (i, at_zero));
                out.push((i, 0));
            }
        }
    }
    out
}

/// The byte offset of element `(row, col)` in a slot of `ty`: `SmemType::byte_offset`
/// as a thread-id expression.
pub(super) fn smem_offset(ty: &SmemType, row: Expr, col: Expr, threads: u32) -> Option<Expr> {
    let (rows, row_len) = ty.rows_and_row_len()?;
    let bytes = ty.dtype.bytes() as i64;
    let row_bytes = row_len * bytes;
    if let Swizzle::Wgmma(width) = ty.swizzle {
        let width = width as i64;
        let x = col.mul(bytes);
        let block = x.clone().div(width, threads);
        let chunk = x.clone().rem(width, threads).div(16, threads);
        let within = x.rem(16, threads);
        let phase = row.clone().div(128 / width, threads).rem(width / 16, threads);
        return Some(block.mul(rows * width).add(row.mul(width)).add(chunk.xor(phase).mul(16)).add(within));
    }
    let plain = row.clone().mul(row_len + ty.pad as i64).add(col.clone()).mul(bytes);
    if ty.swizzle == Swizzle::None || ty.pad != 0 || ty.dtype.bits() < 8 {
        return Some(plain);
    }
    let col_bytes = col.mul(bytes);
    let chunk = col_bytes.clone().div(16, threads);
    let within = col_bytes.rem(16, threads);
    if row_bytes >= 128 && row_bytes % 128 == 0 {
        let phase = row.clone().rem(8, threads);
        Some(row.mul(row_bytes).add(chunk.xor(phase).mul(16)).add(within))
    } else if row_bytes >= 16 && 128 % row_bytes == 0 {
        let rows_per_line = 128 / row_bytes;
        let line = row.clone().div(rows_per_line, threads);
        let in_line = row.rem(rows_per_line, threads);
        let line_chunk = in_line.mul(row_bytes / 16).add(chunk);
        let phase = line.clone().rem(8, threads);
        Some(line.mul(128).add(line_chunk.xor(phase).mul(16)).add(within))
    } else {
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_keeps_offsets_outermost() {
        let e = Expr::tid().rem(8, 128).mul(16).addc(32).addc(16);
        assert_eq!(e.split_const().1, 48);
        assert_eq!(e.eval(9), 16 + 48);
        assert_eq!(Expr::tid().div(128, 128), Expr::Const(0));
        assert_eq!(Expr::tid().rem(256, 128), Expr::Tid);
    }

    #[test]
    fn shared_bases_find_constant_differences() {
        let base = Expr::tid().rem(4, 64).mul(8);
        let exprs = vec![base.clone(), base.clone().addc(64), base.clone().xor(Expr::c(1)), Expr::tid()];
        let shared = share_bases(&exprs, 64);
        assert_eq!(shared[0], (0, 0));
        assert_eq!(shared[1], (0, 64));
        // x ^ 1 with x a multiple of 8 is x + 1.
        assert_eq!(shared[2], (0, 1));
        assert_eq!(shared[3], (3, 0));
    }

    /// The definition `share_bases` implements: each member against every earlier
    /// base, thread by thread.
    fn share_bases_by_definition(exprs: &[Expr], threads: u32) -> Vec<(usize, i64)> {
        let values: Vec<Vec<i64>> = exprs.iter().map(|e| (0..threads).map(|t| e.eval(t)).collect()).collect();
        let mut bases: Vec<usize> = Vec::new();
        let mut out = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let found = bases.iter().find_map(|&b| {
                let d = v[0] - values[b][0];
                v.iter().zip(&values[b]).all(|(x, y)| x - y == d).then_some((b, d))
            });
            out.push(found.unwrap_or_else(|| {
                bases.push(i);
                (i, 0)
            }));
        }
        out
    }

    #[test]
    fn shared_bases_agree_with_their_definition_on_swizzled_families() {
        // Families as the emitter builds them: swizzled shared-memory offsets of the
        // elements a thread owns, for several layouts, plus members that repeat a core.
        let mut state = 0x9e37_79b9_u64;
        let mut next = |n: i64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as i64
        };
        for threads in [32u32, 128, 256] {
            for _ in 0..20 {
                let mut exprs = Vec::new();
                let row_div = [1, 2, 4, 8][next(4) as usize];
                let col_mul = [1, 2, 8][next(3) as usize];
                for _ in 0..24 {
                    let row = Expr::tid().div(row_div, threads).addc(next(4) * 8);
                    let col = Expr::tid().rem(4, threads).mul(col_mul).addc(next(8) * 2);
                    let chunk = col.clone().mul(2).div(16, threads);
                    let phase = row.clone().rem(8, threads);
                    let swizzled = row.mul(128).add(chunk.xor(phase).mul(16)).add(col.mul(2).rem(16, threads));
                    exprs.push(if next(3) == 0 { swizzled.addc(next(64)) } else { swizzled });
                }
                assert_eq!(share_bases(&exprs, threads), share_bases_by_definition(&exprs, threads));
            }
        }
    }

    #[test]
    fn all_thread_values_are_each_threads_value() {
        let e = Expr::tid().div(4, 128).rem(8, 128).xor(Expr::tid().rem(8, 128)).mul(16).addc(3);
        let mut all = vec![0; 128];
        e.eval_into(&mut all, &mut Vec::new());
        assert_eq!(all.len(), 128);
        assert!(all.iter().enumerate().all(|(t, v)| *v == e.eval(t as u32)));
    }
}
