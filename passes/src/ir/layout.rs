//! Layouts: which thread of a CTA owns which elements of a register tile.
//!
//! This module is the one definition of the thread mapping. The PTX backend emits code
//! per owned element from it, the register estimator counts owned elements, and the
//! bank-conflict analysis derives lane addresses from it.

use std::fmt;

pub const WARP: u32 = 32;

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Layout {
    /// Row-major blocks: each thread owns `size_per_thread` contiguous elements per dim;
    /// a warp's threads and a CTA's warps tile the dims (last dim fastest). A tile larger
    /// than the coverage repeats it; a smaller one is replicated.
    Blocked { size_per_thread: Vec<u32>, threads_per_warp: Vec<u32>, warps_per_cta: Vec<u32> },
    /// The accumulator of `mma.sync.m16n8k*`: warps in a `warps[0] x warps[1]` grid, each
    /// owning a contiguous block of the tile, covered by 16x8 fragments (4 elements per
    /// thread each: rows g and g+8, columns 2t and 2t+1, g = lane/4, t = lane%4).
    Mma { warps: [u32; 2] },
    /// The f32 accumulator of `wgmma.mma_async.m64nNk16` (PTX ISA, "Register fragment
    /// layout for the wgmma accumulator D"). Warpgroups (4 consecutive warps) split the
    /// rows into contiguous blocks of M / warpgroups; a warpgroup covers its block with
    /// m64 tiles of all N columns, one instruction each. In a tile, warp `w % 4` of the
    /// warpgroup owns rows `16 (w % 4) ..+16` in the m16n8 C-fragment pattern repeated
    /// over N: lane l (g = l/4, t = l%4) holds, in registers `4j .. 4j+3`, rows g and g+8
    /// of columns `8j + 2t` and `+1` — N / 2 f32 registers per tile. With `across_n > 1`
    /// (M too short for every warpgroup to take whole m64 tiles), warpgroup `w` takes the
    /// rows of block `w / across_n` and the columns of slice `w % across_n` of N /
    /// across_n each, the same pattern within its slice.
    Wgmma { warpgroups: u32, across_n: u32 },
    /// An operand of `mma.sync`: A (`op = 0`, m16 x k) or B (`op = 1`, k x n8) fragments
    /// matching the parent accumulator layout; `k_width` elements share a 32-bit register
    /// (2 for 16-bit types, 4 for 8-bit).
    DotOperand { op: u8, parent: Box<Layout>, k_width: u32 },
    /// The layout left after reducing `dim` of a tile in the parent layout.
    Slice { dim: u32, parent: Box<Layout> },
}

impl Layout {
    /// A blocked layout for `shape` over `warps` warps, `vector` elements per thread along
    /// the last dim (clamped to what the shape allows).
    pub fn blocked_for(shape: &[i64], warps: u32, vector: u32) -> Layout {
        let rank = shape.len().max(1);
        let last = *shape.last().unwrap_or(&1) as u32;
        let vec = vector.max(1).min(last.max(1));
        let mut size_per_thread = vec![1; rank];
        size_per_thread[rank - 1] = vec;
        // Threads of a warp: as many along the last dim as it has vector groups (≤ 32).
        let groups = (last / vec).max(1);
        let tc = prev_power_of_two(groups.min(WARP));
        let mut threads_per_warp = vec![1; rank];
        threads_per_warp[rank - 1] = tc;
        if rank > 1 {
            threads_per_warp[rank - 2] = WARP / tc;
        } else {
            threads_per_warp[0] = WARP;
        }
        let mut warps_per_cta = vec![1; rank];
        if rank > 1 {
            // Warps along rows first, while rows remain.
            let rows = shape[rank - 2].max(1) as u32;
            let rows_per_warp = threads_per_warp[rank - 2];
            let wr = prev_power_of_two((rows / rows_per_warp).max(1)).min(warps);
            warps_per_cta[rank - 2] = wr;
            warps_per_cta[rank - 1] = warps / wr;
        } else {
            warps_per_cta[0] = warps;
        }
        Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta }
    }

    /// An mma accumulator layout for a `[m, n]` tile over `warps` warps: warps along M
    /// while each keeps at least 16 rows, the rest along N.
    pub fn mma_for(m: i64, n: i64, warps: u32) -> Layout {
        let max_m = (m / 16).max(1) as u32;
        let wm = prev_power_of_two(warps.min(max_m)).max(1);
        let wn = (warps / wm).max(1);
        let wn = if (n / 8) < wn as i64 { prev_power_of_two((n / 8).max(1) as u32) } else { wn };
        Layout::Mma { warps: [wm, wn.max(1)] }
    }

    /// An mma accumulator layout whose warps split the tile so that each warp's operand
    /// fragments are smallest (`M/wm + N/wn` least; ties keep more warps along M): a
    /// 128x128 tile over 8 warps is 4x2, not 8x1, which halves the B fragments each warp
    /// holds. Kernels that reduce rows of the accumulator keep [`Layout::mma_for`]'s
    /// warps-along-M split, where a row never straddles warps.
    pub fn mma_balanced(m: i64, n: i64, warps: u32) -> Layout {
        let mut best: Option<(i64, u32, u32)> = None;
        let mut wm = warps.max(1);
        while wm >= 1 {
            let wn = warps.max(1) / wm;
            if wm * wn == warps.max(1) && m / wm as i64 >= 16 && n / wn as i64 >= 8 {
                let cost = m / wm as i64 + n / wn as i64;
                if best.is_none_or(|(c, _, _)| cost < c) {
                    best = Some((cost, wm, wn));
                }
            }
            wm /= 2;
        }
        match best {
            Some((_, wm, wn)) => Layout::Mma { warps: [wm, wn] },
            None => Layout::mma_for(m, n, warps),
        }
    }

    pub fn warps(&self) -> u32 {
        match self {
            Layout::Blocked { warps_per_cta, .. } => warps_per_cta.iter().product(),
            Layout::Mma { warps } => warps[0] * warps[1],
            Layout::Wgmma { warpgroups, .. } => 4 * warpgroups,
            Layout::DotOperand { parent, .. } | Layout::Slice { parent, .. } => parent.warps(),
        }
    }

    pub fn threads(&self) -> u32 {
        self.warps() * WARP
    }

    /// The coordinates of the elements thread `tid` owns, in register order.
    pub fn elements(&self, shape: &[i64], tid: u32) -> Vec<Vec<i64>> {
        match self {
            Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta } => {
                blocked_elements(shape, size_per_thread, threads_per_warp, warps_per_cta, tid)
            }
            Layout::Mma { warps } => mma_elements(shape, *warps, tid),
            Layout::Wgmma { warpgroups, across_n } => wgmma_elements(shape, *warpgroups, *across_n, tid),
            Layout::DotOperand { op, parent, k_width } => match parent.as_ref() {
                Layout::Mma { warps } => dot_operand_elements(shape, *op, *warps, *k_width, tid),
                _ => Vec::new(),
            },
            Layout::Slice { dim, parent } => {
                // Expand the reduced dim to size 1 and project the parent's elements.
                let mut parent_shape = shape.to_vec();
                parent_shape.insert(*dim as usize, 1);
                let mut out: Vec<Vec<i64>> = Vec::new();
                for mut coord in parent.elements(&parent_shape, tid) {
                    coord.remove(*dim as usize);
                    if !out.contains(&coord) {
                        out.push(coord);
                    }
                }
                out
            }
        }
    }

    /// Elements (registers of the element type) each thread holds for `shape`: the
    /// length of `self.elements(shape, 0)` (every thread owns the same number in these
    /// layouts), counted instead of enumerated. The register estimate asks it for every
    /// tile value of every autotune candidate, and a 128x128 accumulator would build 128
    /// coordinate vectors. A test checks the two agree over many layouts and shapes.
    pub fn elements_per_thread(&self, shape: &[i64]) -> u32 {
        let count = match self {
            Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta } => {
                blocked_dim_counts(shape, size_per_thread, threads_per_warp, warps_per_cta).product::<i64>()
            }
            Layout::Mma { warps } => {
                let (_, _, wm, wn, _, _) = warp_block(shape, *warps, 0);
                (wm / 16).max(0) * (wn / 8).max(0) * 4
            }
            Layout::Wgmma { warpgroups, across_n } => {
                let (block_rows, n_slice) = wgmma_block(shape, *warpgroups, *across_n);
                (block_rows / 64) * (n_slice / 8) * 4
            }
            Layout::DotOperand { op, parent, k_width } => match parent.as_ref() {
                Layout::Mma { warps } => {
                    let kw = *k_width as i64;
                    let k_steps = |k: i64| (k / (8 * kw)).max(1);
                    if *op == 0 {
                        let warp_m = (shape[0] / warps[0] as i64).max(16);
                        (warp_m / 16) * k_steps(shape[1]) * 4 * kw
                    } else {
                        let warp_n = (shape[1] / warps[1] as i64).max(8);
                        k_steps(shape[0]) * (warp_n / 8) * 2 * kw
                    }
                }
                _ => 0,
            },
            Layout::Slice { dim, parent } => {
                let mut parent_shape = shape.to_vec();
                parent_shape.insert(*dim as usize, 1);
                match parent.as_ref() {
                    // The parent's elements are the product of per-dim coordinate lists:
                    // the distinct projections are the product of the other dims'
                    // distinct coordinates.
                    Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta } => {
                        let per_dim =
                            blocked_dim_coords(&parent_shape, size_per_thread, threads_per_warp, warps_per_cta, 0);
                        if per_dim.iter().any(Vec::is_empty) {
                            0
                        } else {
                            per_dim
                                .into_iter()
                                .enumerate()
                                .filter(|&(d, _)| d != *dim as usize)
                                .map(|(_, mut c)| {
                                    c.sort_unstable();
                                    c.dedup();
                                    c.len() as i64
                                })
                                .product()
                        }
                    }
                    _ => {
                        let mut projected: Vec<Vec<i64>> = parent
                            .elements(&parent_shape, 0)
                            .into_iter()
                            .map(|mut c| {
                                c.remove(*dim as usize);
                                c
                            })
                            .collect();
                        projected.sort_unstable();
                        projected.dedup();
                        projected.len() as i64
                    }
                }
            }
        };
        count as u32
    }
}

fn prev_power_of_two(x: u32) -> u32 {
    if x == 0 {
        1
    } else {
        1 << (31 - x.leading_zeros())
    }
}

fn blocked_elements(shape: &[i64], spt: &[u32], tpw: &[u32], wpc: &[u32], tid: u32) -> Vec<Vec<i64>> {
    if shape.is_empty() {
        return vec![vec![]];
    }
    let mut out = vec![vec![]];
    for coords in blocked_dim_coords(shape, spt, tpw, wpc, tid) {
        let mut next = Vec::with_capacity(out.len() * coords.len());
        for prefix in &out {
            for &c in &coords {
                let mut p = prefix.clone();
                p.push(c);
                next.push(p);
            }
        }
        out = next;
    }
    out
}

/// Per dim, the coordinates thread `tid` owns in a blocked layout (its elements are
/// their product, last dim fastest).
/// How many coordinates each thread owns per dim ([`blocked_dim_coords`]' lengths,
/// duplicates of a replicated dim included), without listing them: the register
/// estimate asks this for every live value of every autotune candidate it lowers.
fn blocked_dim_counts<'a>(
    shape: &'a [i64],
    spt: &'a [u32],
    tpw: &'a [u32],
    wpc: &'a [u32],
) -> impl Iterator<Item = i64> + 'a {
    (0..shape.len()).map(move |d| {
        let cover = (spt[d] * tpw[d] * wpc[d]) as i64;
        let n = shape[d].max(1);
        let repeats = if cover >= n { 1 } else { (n + cover - 1) / cover.max(1) };
        repeats * spt[d] as i64
    })
}

fn blocked_dim_coords(shape: &[i64], spt: &[u32], tpw: &[u32], wpc: &[u32], tid: u32) -> Vec<Vec<i64>> {
    let rank = shape.len();
    let lane = tid % WARP;
    let warp = tid / WARP;
    // Decompose lane and warp ids row-major (last dim fastest).
    let mut lane_idx = vec![0u32; rank];
    let mut warp_idx = vec![0u32; rank];
    let (mut l, mut w) = (lane, warp);
    for d in (0..rank).rev() {
        lane_idx[d] = l % tpw[d];
        l /= tpw[d];
        warp_idx[d] = w % wpc[d];
        w /= wpc[d];
    }
    // Per dim: the coordinates this thread owns (repeating the coverage over the dim).
    (0..rank)
        .map(|d| {
            let cover = (spt[d] * tpw[d] * wpc[d]) as i64;
            let base = ((warp_idx[d] * tpw[d] + lane_idx[d]) * spt[d]) as i64;
            let n = shape[d].max(1);
            let mut coords = Vec::new();
            let mut rep = 0;
            loop {
                let start = rep * cover;
                if start >= n && rep > 0 {
                    break;
                }
                for e in 0..spt[d] as i64 {
                    // Smaller tiles than the coverage are replicated (modulo the dim).
                    coords.push((start + base + e) % n);
                }
                rep += 1;
                if cover >= n {
                    break;
                }
            }
            coords
        })
        .collect()
}

/// The warp's block and the lane's (group, thread-in-group) for mma layouts.
fn warp_block(shape: &[i64], warps: [u32; 2], tid: u32) -> (i64, i64, i64, i64, i64, i64) {
    let (m, n) = (shape[0].max(16), shape.get(1).copied().unwrap_or(8).max(8));
    let warp = tid / WARP;
    let lane = (tid % WARP) as i64;
    let (wm, wn) = ((warp % warps[0]) as i64, (warp / warps[0]) as i64 % warps[1] as i64);
    let warp_m = (m / warps[0] as i64).max(16);
    let warp_n = (n / warps[1] as i64).max(8);
    (wm * warp_m, wn * warp_n, warp_m, warp_n, lane / 4, lane % 4)
}

fn mma_elements(shape: &[i64], warps: [u32; 2], tid: u32) -> Vec<Vec<i64>> {
    let (row0, col0, wm, wn, g, t) = warp_block(shape, warps, tid);
    // A tile smaller than a fragment (`[64, 1]` after expand_dims) is replicated:
    // coordinates wrap modulo its dims, as in blocked layouts.
    let (rows, cols) = (shape[0].max(1), shape.get(1).copied().unwrap_or(1).max(1));
    let mut out = Vec::new();
    for rm in 0..wm / 16 {
        for rn in 0..wn / 8 {
            let (r, c) = (row0 + rm * 16 + g, col0 + rn * 8 + 2 * t);
            for (dr, dc) in [(0, 0), (0, 1), (8, 0), (8, 1)] {
                out.push(vec![(r + dr) % rows, (c + dc) % cols]);
            }
        }
    }
    out
}

/// Rows of one warpgroup's block and the columns a `wgmma` accumulator layout covers
/// (a smaller tile is replicated, as in `mma` layouts).
/// The rows of a warpgroup's block and the columns of its N slice.
fn wgmma_block(shape: &[i64], warpgroups: u32, across_n: u32) -> (i64, i64) {
    let across_n = across_n.clamp(1, warpgroups.max(1)) as i64;
    let along_m = (warpgroups.max(1) as i64 / across_n).max(1);
    let m = shape[0].max(64 * along_m);
    let n = shape.get(1).copied().unwrap_or(8).max(8);
    (((m / along_m) / 64).max(1) * 64, (n / across_n).max(8))
}

fn wgmma_elements(shape: &[i64], warpgroups: u32, across_n: u32, tid: u32) -> Vec<Vec<i64>> {
    let (block_rows, n_slice) = wgmma_block(shape, warpgroups, across_n);
    let warp = tid / WARP;
    let across_n = across_n.clamp(1, warpgroups.max(1)) as i64;
    let (group, warp_in_group) = ((warp / 4 % warpgroups.max(1)) as i64, (warp % 4) as i64);
    let (block, slice) = (group / across_n, group % across_n);
    let lane = (tid % WARP) as i64;
    let (g, t) = (lane / 4, lane % 4);
    let (rows, cols) = (shape[0].max(1), shape.get(1).copied().unwrap_or(1).max(1));
    let mut out = Vec::new();
    for tile in 0..block_rows / 64 {
        let r = block * block_rows + tile * 64 + 16 * warp_in_group + g;
        for j in 0..n_slice / 8 {
            let c = slice * n_slice + 8 * j + 2 * t;
            for (dr, dc) in [(0, 0), (0, 1), (8, 0), (8, 1)] {
                out.push(vec![(r + dr) % rows, (c + dc) % cols]);
            }
        }
    }
    out
}

fn dot_operand_elements(shape: &[i64], op: u8, warps: [u32; 2], k_width: u32, tid: u32) -> Vec<Vec<i64>> {
    let lane = (tid % WARP) as i64;
    let (g, t) = (lane / 4, lane % 4);
    let warp = tid / WARP;
    let (wm, wn) = ((warp % warps[0]) as i64, (warp / warps[0]) as i64 % warps[1] as i64);
    let kw = k_width as i64;
    // k extent of one mma: 16 for 16-bit (k_width 2), 32 for 8-bit (k_width 4).
    let kstep = 8 * kw;
    let mut out = Vec::new();
    if op == 0 {
        // A: [M, K]; this warp's rows.
        let (m, k) = (shape[0], shape[1]);
        let warp_m = (m / warps[0] as i64).max(16);
        let row0 = wm * warp_m;
        for rm in 0..warp_m / 16 {
            for kk in 0..(k / kstep).max(1) {
                let r = row0 + rm * 16 + g;
                let c = kk * kstep + t * kw;
                // a0..: (g, t*kw..), (g+8, ..), (g, +kstep/2), (g+8, +kstep/2)
                for (dr, dc) in [(0, 0), (8, 0), (0, kstep / 2), (8, kstep / 2)] {
                    for e in 0..kw {
                        out.push(vec![r + dr, c + dc + e]);
                    }
                }
            }
        }
    } else {
        // B: [K, N]; this warp's columns.
        let (k, n) = (shape[0], shape[1]);
        let warp_n = (n / warps[1] as i64).max(8);
        let col0 = wn * warp_n;
        for kk in 0..(k / kstep).max(1) {
            for rn in 0..warp_n / 8 {
                let c = col0 + rn * 8 + g;
                let r = kk * kstep + t * kw;
                for dr in [0, kstep / 2] {
                    for e in 0..kw {
                        out.push(vec![r + dr + e, c]);
                    }
                }
            }
        }
    }
    out
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[u32]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        match self {
            Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta } => write!(
                f,
                "#blocked<[{}],[{}],[{}]>",
                list(size_per_thread),
                list(threads_per_warp),
                list(warps_per_cta)
            ),
            Layout::Mma { warps } => write!(f, "#mma<{}x{}>", warps[0], warps[1]),
            Layout::Wgmma { warpgroups, across_n: 1 } => write!(f, "#wgmma<{warpgroups}>"),
            Layout::Wgmma { warpgroups, across_n } => write!(f, "#wgmma<{warpgroups}, across_n={across_n}>"),
            Layout::DotOperand { op, parent, .. } => {
                write!(f, "#dot<{}, {}>", if *op == 0 { "A" } else { "B" }, parent)
            }
            Layout::Slice { dim, parent } => write!(f, "#slice<{dim}, {parent}>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn coverage(layout: &Layout, shape: &[i64]) -> HashSet<Vec<i64>> {
        (0..layout.threads()).flat_map(|t| layout.elements(shape, t)).collect()
    }

    #[test]
    fn blocked_counts_are_the_lengths_of_the_coordinate_lists() {
        for shape in [vec![1], vec![7], vec![128], vec![3, 5], vec![64, 128], vec![1, 1024], vec![4, 2, 8]] {
            for warps in [1, 4, 8] {
                for vector in [1, 2, 4, 8] {
                    let Layout::Blocked { size_per_thread, threads_per_warp, warps_per_cta } =
                        Layout::blocked_for(&shape, warps, vector)
                    else {
                        unreachable!()
                    };
                    let lengths: Vec<i64> =
                        blocked_dim_coords(&shape, &size_per_thread, &threads_per_warp, &warps_per_cta, 0)
                            .iter()
                            .map(|c| c.len() as i64)
                            .collect();
                    let counts: Vec<i64> =
                        blocked_dim_counts(&shape, &size_per_thread, &threads_per_warp, &warps_per_cta).collect();
                    assert_eq!(counts, lengths, "{shape:?} warps={warps} vector={vector}");
                }
            }
        }
    }

    #[test]
    fn mma_accumulator_covers_the_tile_once() {
        let layout = Layout::Mma { warps: [2, 2] };
        let shape = [64, 64];
        let mut seen = HashSet::new();
        for t in 0..layout.threads() {
            for e in layout.elements(&shape, t) {
                assert!(seen.insert(e.clone()), "{e:?} owned twice");
            }
        }
        assert_eq!(seen.len(), 64 * 64);
        // 64x64 f32 over 128 threads: 32 registers each.
        assert_eq!(layout.elements_per_thread(&shape), 32);
        // Lane 5 of warp 0: group 1, thread-in-group 1.
        assert_eq!(&layout.elements(&shape, 5)[..4], &[vec![1, 2], vec![1, 3], vec![9, 2], vec![9, 3]]);
    }

    #[test]
    fn wgmma_accumulators_cover_the_tile_once_in_instruction_order() {
        for (shape, warpgroups, across_n) in [
            ([64, 64], 1, 1),
            ([128, 256], 1, 1),
            ([128, 64], 2, 1),
            ([256, 8], 2, 1),
            ([64, 64], 2, 2),
            ([64, 128], 4, 4),
            ([128, 64], 4, 2),
        ] {
            let layout = Layout::Wgmma { warpgroups, across_n };
            let mut seen = HashSet::new();
            for t in 0..layout.threads() {
                for e in layout.elements(&shape, t) {
                    assert!(seen.insert(e.clone()), "{e:?} owned twice in {shape:?}");
                }
            }
            assert_eq!(seen.len() as i64, shape[0] * shape[1]);
            // N / 2 f32 registers per m64 tile of a warpgroup's block and N slice.
            let tiles = shape[0] / 64 / (warpgroups / across_n) as i64;
            assert_eq!(layout.elements_per_thread(&shape) as i64, tiles * shape[1] / across_n as i64 / 2);
        }
        // 128 rows over one warpgroup: two m64 tiles; warp 1's lane 5 (g = 1, t = 1) holds
        // d0..d3 = (17, 2), (17, 3), (25, 2), (25, 3), and the second tile 64 rows lower.
        let layout = Layout::Wgmma { warpgroups: 1, across_n: 1 };
        let e = layout.elements(&[128, 16], 32 + 5);
        assert_eq!(&e[..4], &[vec![17, 2], vec![17, 3], vec![25, 2], vec![25, 3]]);
        assert_eq!(&e[4..6], &[vec![17, 10], vec![17, 11]]);
        assert_eq!(e[8], vec![81, 2]);
        // Two warpgroups across N of a 64 x 64 tile: warpgroup 1 (warp 5, lane 5) holds
        // the same rows as warp 1 of warpgroup 0, 32 columns to the right.
        let layout = Layout::Wgmma { warpgroups: 2, across_n: 2 };
        let e = layout.elements(&[64, 64], 5 * 32 + 5);
        assert_eq!(&e[..4], &[vec![17, 34], vec![17, 35], vec![25, 34], vec![25, 35]]);
        assert_eq!(e.len(), 16);
    }

    #[test]
    fn blocked_layouts_cover_their_tiles() {
        for (shape, warps, vec) in
            [(vec![128, 64], 4, 4), (vec![4, 1024], 8, 4), (vec![1024], 4, 4), (vec![1, 256], 4, 8)]
        {
            let layout = Layout::blocked_for(&shape, warps, vec);
            let all: i64 = shape.iter().product();
            assert_eq!(coverage(&layout, &shape).len() as i64, all, "{layout} on {shape:?}");
        }
    }

    #[test]
    fn operand_fragments_match_mma_shapes() {
        let parent = Box::new(Layout::Mma { warps: [2, 2] });
        let a = Layout::DotOperand { op: 0, parent: parent.clone(), k_width: 2 };
        let b = Layout::DotOperand { op: 1, parent, k_width: 2 };
        // A [64, 32] bf16: per warp 32 rows = 2 m16 tiles x 2 k16 steps x 8 elements.
        assert_eq!(a.elements_per_thread(&[64, 32]), 32);
        // B [32, 64] bf16: per warp 32 cols = 4 n8 tiles x 2 k16 steps x 4 elements.
        assert_eq!(b.elements_per_thread(&[32, 64]), 32);
        assert_eq!(coverage(&a, &[64, 32]).len(), 64 * 32);
        assert_eq!(coverage(&b, &[32, 64]).len(), 32 * 64);
    }

    #[test]
    fn counted_elements_per_thread_equal_the_enumerated_ones() {
        let mut checked = 0;
        let shapes: Vec<Vec<i64>> = vec![
            vec![],
            vec![1],
            vec![7],
            vec![64],
            vec![1024],
            vec![1, 1],
            vec![1, 256],
            vec![4, 1024],
            vec![16, 16],
            vec![16, 8],
            vec![32, 64],
            vec![64, 1],
            vec![64, 32],
            vec![128, 64],
            vec![128, 128],
            vec![3, 5],
            vec![2, 4, 8],
        ];
        for shape in &shapes {
            let mut layouts = Vec::new();
            for warps in [1, 2, 4, 8] {
                for vector in [1, 2, 4, 8] {
                    layouts.push(Layout::blocked_for(shape, warps, vector));
                }
                if shape.len() == 2 {
                    let mma = Layout::mma_for(shape[0], shape[1], warps);
                    for op in [0, 1] {
                        for k_width in [2, 4] {
                            layouts.push(Layout::DotOperand { op, parent: Box::new(mma.clone()), k_width });
                        }
                    }
                    layouts.push(mma);
                    if warps % 4 == 0 {
                        layouts.push(Layout::Wgmma { warpgroups: warps / 4, across_n: 1 });
                        if warps == 8 {
                            layouts.push(Layout::Wgmma { warpgroups: 2, across_n: 2 });
                        }
                    }
                }
            }
            // Slices: the layouts of this shape with one more dim, reduced over it.
            for dim in 0..=shape.len() {
                let mut parent_shape = shape.clone();
                parent_shape.insert(dim, 16);
                for warps in [1, 4] {
                    let mut parents = vec![Layout::blocked_for(&parent_shape, warps, 4)];
                    if parent_shape.len() == 2 {
                        parents.push(Layout::mma_for(parent_shape[0], parent_shape[1], warps));
                    }
                    for parent in parents {
                        layouts.push(Layout::Slice { dim: dim as u32, parent: Box::new(parent) });
                    }
                }
            }
            for layout in layouts {
                let enumerated = layout.elements(shape, 0).len() as u32;
                assert_eq!(layout.elements_per_thread(shape), enumerated, "{layout} on {shape:?}");
                checked += 1;
            }
        }
        assert!(checked > 300, "{checked}");
    }

    #[test]
    fn slices_project_the_parent() {
        let row = Layout::Slice { dim: 1, parent: Box::new(Layout::Mma { warps: [4, 1] }) };
        // One row vector of 64: each thread holds rows g and g+8 of its warp block.
        assert_eq!(row.elements(&[64], 0), vec![vec![0], vec![8]]);
        assert_eq!(row.elements(&[64], 37), vec![vec![17], vec![25]]);
    }
}
