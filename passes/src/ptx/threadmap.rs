//! Which thread holds which element, in a form code can be generated from.
//!
//! `Layout::elements` is the definition. A `ThreadMap` restates it as an affine map in
//! the bits of the thread id: register `i` of thread `tid` holds the element
//!
//! ```text
//! coord(i, tid) = (regs[i] + Σ_b bit_b(tid) · bits[b])  mod  shape
//! ```
//!
//! and `ThreadMap::of` checks this restatement against `Layout::elements` for every
//! thread and register, so every address and coordinate the backend derives from a map
//! agrees with the definition. Coordinates are taken modulo the shape: a layout whose
//! natural coverage is larger than the tile (a `[64, 1]` tile in an mma layout, a
//! small tile in a large blocked layout) replicates elements over threads.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

use crate::ir::Layout;

use super::expr::Expr;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ThreadMap {
    pub shape: Vec<i64>,
    pub threads: u32,
    /// Each register's coordinates in thread 0.
    pub regs: Vec<Vec<i64>>,
    /// The coordinate step of each thread-id bit (bit 0 first).
    pub bits: Vec<Vec<i64>>,
    /// Every thread's coordinates, thread-major then register then dim (`coord` reads it).
    table: Vec<i64>,
}

impl ThreadMap {
    /// The map of `layout` over `shape` for a CTA of `threads` threads (a power of two).
    pub fn of(layout: &Layout, shape: &[i64], threads: u32) -> Result<ThreadMap, String> {
        if !threads.is_power_of_two() {
            return Err(format!("{threads} threads per program is not a power of two"));
        }
        if shape.iter().any(|&n| n <= 0) {
            return Err(format!("a tile of shape {shape:?} has no elements"));
        }
        let reduce = |c: &[i64]| -> Vec<i64> { c.iter().zip(shape).map(|(x, n)| x.rem_euclid(*n)).collect() };
        let elements: Vec<Vec<Vec<i64>>> =
            (0..threads).map(|t| layout.elements(shape, t).iter().map(|c| reduce(c)).collect()).collect();
        let regs = elements[0].clone();
        if regs.is_empty() || regs.iter().any(|c| c.len() != shape.len()) {
            return Err(format!("layout {layout} gives no elements of rank {} for shape {shape:?}", shape.len()));
        }
        let log = threads.trailing_zeros();
        let bits: Vec<Vec<i64>> = (0..log)
            .map(|b| {
                let e = &elements[1 << b][0];
                e.iter().zip(&regs[0]).zip(shape).map(|((x, c), n)| (x - c).rem_euclid(*n)).collect()
            })
            .collect();
        let mut map = ThreadMap { shape: shape.to_vec(), threads, regs, bits, table: Vec::new() };
        let mut table = Vec::with_capacity(threads as usize * map.regs.len() * shape.len());
        for (tid, owned) in elements.iter().enumerate() {
            if owned.len() != map.regs.len() {
                return Err(format!(
                    "layout {layout} gives thread {tid} {} elements of {shape:?} but thread 0 {}",
                    owned.len(),
                    map.regs.len()
                ));
            }
            for (i, c) in owned.iter().enumerate() {
                if !map.affine_is(i, tid as u32, c) {
                    return Err(format!(
                        "layout {layout} over {shape:?} is not affine in the thread id bits (thread {tid}, register {i})"
                    ));
                }
                table.extend_from_slice(c);
            }
        }
        map.table = table;
        Ok(map)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn len(&self) -> usize {
        self.regs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }

    /// For an operation that must reach each element exactly once (an atomic add): the
    /// thread-id bits that only replicate (a step of 0 in every dim: the threads they
    /// tell apart hold the same elements), and per register whether it is the first of
    /// its thread to hold its element. Threads with none of those bits set, through their
    /// first registers, then reach every element once; `None` where they do not.
    pub fn unique_holders(&self) -> Option<(u32, Vec<bool>)> {
        let replicated: u32 =
            self.bits.iter().enumerate().filter(|(_, s)| s.iter().all(|&x| x == 0)).map(|(b, _)| 1u32 << b).sum();
        // Registers hold the same element in every thread when they do in thread 0: the
        // thread's offset is added to both.
        let first: Vec<bool> = (0..self.len()).map(|i| (0..i).all(|j| self.regs[j] != self.regs[i])).collect();
        let mut seen: HashMap<&[i64], u32> = HashMap::new();
        for tid in (0..self.threads).filter(|t| t & replicated == 0) {
            for (reg, _) in first.iter().enumerate().filter(|(_, &f)| f) {
                *seen.entry(self.coord(reg, tid)).or_default() += 1;
            }
        }
        let elements: i64 = self.shape.iter().product();
        (seen.len() as i64 == elements && seen.values().all(|&n| n == 1)).then_some((replicated, first))
    }

    /// The coordinates register `reg` of thread `tid` holds.
    pub fn coord(&self, reg: usize, tid: u32) -> &[i64] {
        let rank = self.shape.len();
        let at = (tid as usize * self.regs.len() + reg) * rank;
        &self.table[at..at + rank]
    }

    /// Whether the affine restatement gives `want` (what `of` checks against the layout).
    fn affine_is(&self, reg: usize, tid: u32, want: &[i64]) -> bool {
        (0..self.shape.len()).all(|d| {
            let mut x = self.regs[reg][d];
            for (b, step) in self.bits.iter().enumerate() {
                if tid >> b & 1 == 1 {
                    x += step[d];
                }
            }
            x.rem_euclid(self.shape[d]) == want[d]
        })
    }

    /// `of`, remembered across kernels (layouts recur in every configuration).
    pub fn cached(layout: &Layout, shape: &[i64], threads: u32) -> Result<Arc<ThreadMap>, String> {
        type Key = (Layout, Vec<i64>, u32);
        static CACHE: Memo<Key, Result<Arc<ThreadMap>, String>> = OnceLock::new();
        memo(&CACHE, (layout.clone(), shape.to_vec(), threads), || ThreadMap::of(layout, shape, threads).map(Arc::new))
    }

    /// The thread-dependent part of dim `d` (before the modulo).
    pub fn thread_part(&self, d: usize) -> Expr {
        let mut out = Expr::c(0);
        let mut b = 0;
        while b < self.bits.len() {
            let step = self.bits[b][d];
            if step == 0 {
                b += 1;
                continue;
            }
            // A run of bits whose steps double is one bit field times the first step.
            let mut width = 1;
            while b + width < self.bits.len() && self.bits[b + width][d] == step << width {
                width += 1;
            }
            let field = Expr::tid().div(1 << b, self.threads).rem(1 << width, self.threads);
            out = out.add(field.mul(step));
            b += width;
        }
        out
    }

    /// Whether dim `d` needs the modulo (the tile is smaller than the layout's reach).
    pub fn wraps(&self, d: usize) -> bool {
        let reg_max = self.regs.iter().map(|c| c[d]).max().unwrap_or(0);
        let thread_max: i64 = self.bits.iter().map(|s| s[d]).sum();
        reg_max + thread_max >= self.shape[d]
    }

    /// Coordinate `d` of register `reg` as an expression of the thread id.
    pub fn coord_expr(&self, reg: usize, d: usize) -> Expr {
        let e = self.thread_part(d).addc(self.regs[reg][d]);
        if self.wraps(d) {
            e.rem(self.shape[d], self.threads)
        } else {
            e
        }
    }

    /// Thread-id bits that only move along `dim` (combine when reducing `dim`), and
    /// whether every other bit either moves only other dims or nothing.
    pub fn bits_along(&self, dim: usize) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        for (b, step) in self.bits.iter().enumerate() {
            let along = step[dim] != 0;
            let across = step.iter().enumerate().any(|(d, s)| d != dim && *s != 0);
            match (along, across) {
                (true, false) => out.push(b as u32),
                (true, true) => return Err(format!("thread bit {b} moves along dim {dim} and across it")),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Register indices by coordinate, for thread `tid`.
    pub fn index(&self, tid: u32) -> HashMap<Vec<i64>, Vec<usize>> {
        let mut m: HashMap<Vec<i64>, Vec<usize>> = HashMap::new();
        for i in 0..self.len() {
            m.entry(self.coord(i, tid).to_vec()).or_default().push(i);
        }
        m
    }
}

/// A process-wide memo of a pure function of layouts (they recur in every
/// configuration of a kernel and in every kernel of a file).
pub type Memo<K, V> = OnceLock<Mutex<HashMap<K, V>>>;

pub fn memo<K: Hash + Eq, V: Clone>(cache: &'static Memo<K, V>, key: K, compute: impl FnOnce() -> V) -> V {
    let cache = cache.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return v;
    }
    let value = compute();
    if let Ok(mut c) = cache.lock() {
        // A bound on memory for long-lived processes (the language server).
        if c.len() >= 512 {
            c.clear();
        }
        c.insert(key, value.clone());
    }
    value
}

/// For every register of `dst`, the register of `src` that holds, in every thread,
/// the element `source_of(dst coordinate)`. `None` when some element lives in another
/// thread (data has to move through shared memory).
pub fn local_map(src: &ThreadMap, dst: &ThreadMap, source_of: &dyn Fn(&[i64]) -> Vec<i64>) -> Option<Vec<usize>> {
    if src.threads != dst.threads {
        return None;
    }
    let first = src.index(0);
    let mut out = Vec::with_capacity(dst.len());
    for j in 0..dst.len() {
        let candidates = first.get(&source_of(dst.coord(j, 0)))?;
        let found = candidates
            .iter()
            .copied()
            .find(|&i| (1..src.threads).all(|t| src.coord(i, t) == source_of(dst.coord(j, t)).as_slice()))?;
        out.push(found);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_exprs(map: &ThreadMap) {
        for i in 0..map.len() {
            for d in 0..map.rank() {
                let e = map.coord_expr(i, d);
                for t in 0..map.threads {
                    assert_eq!(e.eval(t), map.coord(i, t)[d], "register {i} dim {d} thread {t}");
                }
            }
        }
    }

    /// The per-thread ownership the backend assumes equals `Layout::elements` for every
    /// layout kind the Tile IR produces (checked inside `ThreadMap::of`), and the
    /// emitted coordinate expressions compute it.
    #[test]
    fn maps_restate_layout_elements() {
        let mma = |wm, wn| Layout::Mma { warps: [wm, wn] };
        let cases: Vec<(Layout, Vec<i64>, u32)> = vec![
            (Layout::blocked_for(&[1024], 4, 4), vec![1024], 128),
            (Layout::blocked_for(&[512], 4, 4), vec![512], 128),
            (Layout::blocked_for(&[1, 512], 4, 4), vec![1, 512], 128),
            (Layout::blocked_for(&[4, 1024], 8, 4), vec![4, 1024], 256),
            (Layout::blocked_for(&[128, 64], 4, 4), vec![128, 64], 128),
            (Layout::blocked_for(&[1], 4, 4), vec![1], 128),
            (mma(4, 1), vec![64, 64], 128),
            (mma(4, 2), vec![128, 128], 256),
            (mma(2, 2), vec![64, 64], 128),
            (mma(4, 1), vec![64, 1], 128),
            (Layout::DotOperand { op: 0, parent: Box::new(mma(4, 1)), k_width: 2 }, vec![64, 64], 128),
            (Layout::DotOperand { op: 1, parent: Box::new(mma(4, 1)), k_width: 2 }, vec![64, 64], 128),
            (Layout::DotOperand { op: 0, parent: Box::new(mma(4, 2)), k_width: 4 }, vec![128, 64], 256),
            (Layout::DotOperand { op: 1, parent: Box::new(mma(4, 2)), k_width: 4 }, vec![64, 128], 256),
            (Layout::Slice { dim: 1, parent: Box::new(mma(4, 1)) }, vec![64], 128),
            (Layout::Slice { dim: 0, parent: Box::new(Layout::blocked_for(&[1, 512], 4, 4)) }, vec![512], 128),
        ];
        for (layout, shape, threads) in cases {
            let map = ThreadMap::of(&layout, &shape, threads).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(map.len() as u32, layout.elements_per_thread(&shape));
            check_exprs(&map);
        }
    }

    #[test]
    fn slices_of_mma_keep_rows_and_replicate_over_lanes_in_a_group() {
        let map = ThreadMap::of(&Layout::Slice { dim: 1, parent: Box::new(Layout::Mma { warps: [4, 1] }) }, &[64], 128)
            .unwrap();
        // Lane bits 0-1 (thread in group) replicate; bits 2-4 step rows 1, 2, 4.
        assert_eq!(map.bits[0], vec![0]);
        assert_eq!(map.bits[2], vec![1]);
        assert_eq!(map.bits[5], vec![16]);
    }

    #[test]
    fn mma_accumulators_feed_a_operands_without_moving_data() {
        // The flash-attention identity: an m16n8 accumulator pair is an m16k16 A operand.
        let acc = ThreadMap::of(&Layout::Mma { warps: [4, 1] }, &[64, 64], 128).unwrap();
        let a = ThreadMap::of(
            &Layout::DotOperand { op: 0, parent: Box::new(Layout::Mma { warps: [4, 1] }), k_width: 2 },
            &[64, 64],
            128,
        )
        .unwrap();
        assert!(local_map(&acc, &a, &|c| c.to_vec()).is_some());
        // An accumulator cannot become a B operand in registers.
        let b = ThreadMap::of(
            &Layout::DotOperand { op: 1, parent: Box::new(Layout::Mma { warps: [4, 1] }), k_width: 2 },
            &[64, 64],
            128,
        )
        .unwrap();
        assert!(local_map(&acc, &b, &|c| c.to_vec()).is_none());
    }
}
