//! Shared-memory bank conflicts by the phase/word algorithm of TARGETS.md.
//!
//! For every shared access the compiler emits (ldmatrix fragment loads for `tile.dot`,
//! vector loads and stores of register tiles, the 16-byte chunks of `tile.cp_async`),
//! the 32 lane addresses of one warp are computed from the buffer layout
//! ([`SmemType::byte_offset`]) and the register layout ([`Layout::elements`]), split into
//! phases by access width, and the cost is the largest number of distinct 32-bit words
//! that fall in one bank of a phase.

use crate::analysis::limits::{BANKS, BANK_BYTES, WARP_SIZE};
use crate::ir::types::gcd;
use crate::ir::{Layout, SmemType};

/// One warp-wide shared access: each participating lane's byte address, all of one width.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WarpAccess {
    pub lanes: Vec<Option<u64>>,
    /// Bytes per lane: 1, 2, 4, 8 or 16.
    pub width: u32,
}

/// Lanes served together: one phase of 32 lanes for accesses up to 4 bytes, two of 16
/// for 8 bytes, four of 8 for 16 bytes (and each 8x8 matrix of `ldmatrix`).
fn lanes_per_phase(width: u32) -> usize {
    match width {
        0..=4 => 32,
        5..=8 => 16,
        _ => 8,
    }
}

/// The n of an n-way conflict: the worst phase's largest count of distinct words in
/// one bank (1 = conflict free).
pub fn conflict_ways(access: &WarpAccess) -> u32 {
    let per_phase = lanes_per_phase(access.width);
    let mut worst = 1;
    // The distinct words of a phase, then a count per bank. The bank-conflict lint
    // simulates every shared access of every kernel of a file, and its fix search
    // re-simulates them per candidate layout, so this avoids sorting: a phase's words
    // almost always lie within a few kilobytes, which a bitset over that window
    // deduplicates; a wider phase falls back to sorting packed (bank, word) pairs.
    let mut words: Vec<u64> = Vec::new();
    for phase in access.lanes.chunks(per_phase) {
        let spans = phase.iter().flatten().map(|&addr| {
            let first = addr / BANK_BYTES as u64;
            let last = (addr + access.width.max(1) as u64 - 1) / BANK_BYTES as u64;
            (first, last)
        });
        let (Some(low), Some(high)) = (spans.clone().map(|s| s.0).min(), spans.clone().map(|s| s.1).max()) else {
            continue;
        };
        let ways =
            if high - low < WINDOW_WORDS { ways_in_window(spans, low) } else { ways_by_sorting(spans, &mut words) };
        worst = worst.max(ways);
    }
    worst
}

/// Words a phase may span for [`ways_in_window`]: 16 KiB.
const WINDOW_WORDS: u64 = 4096;

fn ways_in_window(spans: impl Iterator<Item = (u64, u64)>, low: u64) -> u32 {
    let mut seen = [0u64; (WINDOW_WORDS / 64) as usize];
    let mut per_bank = [0u32; BANKS as usize];
    for (first, last) in spans {
        for word in first..=last {
            let at = (word - low) as usize;
            let bit = 1u64 << (at % 64);
            if seen[at / 64] & bit == 0 {
                seen[at / 64] |= bit;
                per_bank[(word % BANKS as u64) as usize] += 1;
            }
        }
    }
    per_bank.into_iter().max().unwrap_or(0).max(1)
}

fn ways_by_sorting(spans: impl Iterator<Item = (u64, u64)>, words: &mut Vec<u64>) -> u32 {
    // (bank, word) packed into one integer (bank in the high bits); sorted and
    // deduplicated, the longest run of one bank is the number of distinct words that
    // bank serves. Shared memory is far below 2^58 words, so the packing is exact.
    const BANK_SHIFT: u32 = 58;
    words.clear();
    for (first, last) in spans {
        words.extend((first..=last).map(|word| ((word % BANKS as u64) << BANK_SHIFT) | word));
    }
    words.sort_unstable();
    words.dedup();
    words.chunk_by(|a, b| a >> BANK_SHIFT == b >> BANK_SHIFT).map(|bank| bank.len() as u32).max().unwrap_or(1)
}

/// The warp accesses of `ldmatrix.x4` loading the mma fragments of a `[rows, cols]`
/// region of `buffer` (rows along the buffer's rows): each 8x8 matrix (8 rows of 16
/// bytes) is one phase; lane `l` gives row `l % 8` of matrix `l / 8`. One access per
/// 16x(16 bytes) block of the region the warp reads.
pub fn ldmatrix_accesses(buffer: &SmemType, row0: i64, col0: i64, rows: i64, cols: i64) -> Vec<WarpAccess> {
    ldmatrix_rows(buffer, row0, col0, rows.max(16), cols)
}

/// The worst conflict of [`ldmatrix_accesses`] over a whole `[rows, cols]` buffer,
/// simulating only the row blocks that differ: a block and the block a bank period
/// ([`SmemType::bank_period_rows`]) below it conflict alike. A buffer of 128 rows with
/// an 8-row period needs one block of 16 rows instead of eight.
pub fn ldmatrix_ways(buffer: &SmemType, rows: i64, cols: i64) -> u32 {
    let rows = rows.max(16);
    let distinct = match buffer.bank_period_rows() {
        // Blocks are 16 rows apart: they repeat every lcm(16, period) rows, both powers of two.
        Some(period) => rows.min(period.max(16)),
        None => rows,
    };
    ldmatrix_rows(buffer, 0, 0, distinct, cols).iter().map(conflict_ways).max().unwrap_or(1)
}

fn ldmatrix_rows(buffer: &SmemType, row0: i64, col0: i64, rows: i64, cols: i64) -> Vec<WarpAccess> {
    let bytes = buffer.dtype.bytes().max(1) as i64;
    let cols_per_matrix = 16 / bytes;
    let mut out = Vec::new();
    let mut r = row0;
    while r < row0 + rows {
        let mut c = col0;
        while c < col0 + cols.max(2 * cols_per_matrix) {
            let lanes = (0..WARP_SIZE as i64)
                .map(|l| {
                    let (matrix, row) = (l / 8, l % 8);
                    let rr = r + row + 8 * (matrix % 2);
                    let cc = c + cols_per_matrix * (matrix / 2);
                    buffer.byte_offset(rr, cc).map(|o| o as u64)
                })
                .collect();
            out.push(WarpAccess { lanes, width: 16 });
            c += 2 * cols_per_matrix;
        }
        r += 16;
    }
    out
}

/// The warp accesses of reading or writing a register tile of `shape` in `layout` from
/// or to `buffer` (warp 0): each lane's elements in register order, grouped into runs
/// that are contiguous in the buffer (up to 16 bytes, a power of two); access `k` is
/// every lane's `k`-th run. `transposed`: tile element `(r, c)` is buffer `(c, r)`.
pub fn register_tile_accesses(buffer: &SmemType, layout: &Layout, shape: &[i64], transposed: bool) -> Vec<WarpAccess> {
    let bytes = buffer.dtype.bytes().max(1) as u64;
    let coord = |e: &[i64]| -> (i64, i64) {
        let (r, c) = match e {
            [] => (0, 0),
            [c] => (0, *c),
            [.., r, c] => (*r, *c),
        };
        if transposed {
            (c, r)
        } else {
            (r, c)
        }
    };
    let mut runs_per_lane: Vec<Vec<(u64, u64)>> = Vec::new();
    for lane in 0..WARP_SIZE {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for e in layout.elements(shape, lane) {
            let (r, c) = coord(&e);
            let Some(addr) = buffer.byte_offset(r, c) else { continue };
            let addr = addr as u64;
            match runs.last_mut() {
                Some((start, len)) if *start + *len == addr && *len + bytes <= 16 => *len += bytes,
                _ => runs.push((addr, bytes)),
            }
        }
        // Vector accesses are 1, 2, 4, 8 or 16 bytes: a 12-byte run is an 8 and a 4.
        let runs = runs
            .into_iter()
            .flat_map(|(start, len)| {
                let mut pieces = Vec::new();
                let mut at = start;
                let mut left = len;
                while left > 0 {
                    let piece = 1u64 << (63 - left.leading_zeros());
                    pieces.push((at, piece));
                    at += piece;
                    left -= piece;
                }
                pieces
            })
            .collect();
        runs_per_lane.push(runs);
    }
    let count = runs_per_lane.iter().map(Vec::len).max().unwrap_or(0);
    (0..count)
        .map(|k| {
            let width = runs_per_lane.iter().filter_map(|r| r.get(k)).map(|r| r.1).max().unwrap_or(bytes) as u32;
            WarpAccess { lanes: runs_per_lane.iter().map(|r| r.get(k).map(|x| x.0)).collect(), width }
        })
        .collect()
}

/// The compiler's `cp.async` mapping: the slot is cut into chunks of up to 16 bytes in
/// row-major order and thread `t` copies chunks `t, t + threads, ...`. Returns warp 0's
/// accesses.
pub fn cp_async_accesses(buffer: &SmemType, threads: u32) -> Vec<WarpAccess> {
    cp_async_first_accesses(buffer, threads, i64::MAX)
}

/// The worst conflict of [`cp_async_accesses`], simulating only the accesses that differ:
/// warp 0's access `k` starts at chunk `k * threads`, and two accesses whose starts are a
/// whole number of bank periods of rows apart ([`SmemType::bank_period_rows`]) conflict
/// alike; the last, partial access reads a subset of the lanes of one such translate,
/// so it cannot conflict more.
pub fn cp_async_ways(buffer: &SmemType, threads: u32) -> u32 {
    let limit = match (buffer.rows_and_row_len(), buffer.bank_period_rows()) {
        (Some((_, row_len)), Some(period)) => {
            let chunks_per_row = row_len * buffer.dtype.bytes().max(1) as i64 / cp_async_chunk(buffer, row_len);
            let cycle = chunks_per_row.max(1) * period;
            let threads = threads.max(1) as i64;
            // lcm(threads, cycle) chunks.
            threads / gcd(threads, cycle) * cycle
        }
        _ => i64::MAX,
    };
    cp_async_first_accesses(buffer, threads, limit).iter().map(conflict_ways).max().unwrap_or(1)
}

/// The chunk size of `cp.async` for rows of `row_len` elements.
fn cp_async_chunk(buffer: &SmemType, row_len: i64) -> i64 {
    let bytes = buffer.dtype.bytes().max(1) as i64;
    let row_bytes = row_len * bytes;
    [16, 8, 4, 2, 1].into_iter().find(|c| row_bytes % c == 0 && *c >= bytes).unwrap_or(bytes)
}

/// Warp 0's `cp.async` accesses whose first chunk is below `limit`.
fn cp_async_first_accesses(buffer: &SmemType, threads: u32, limit: i64) -> Vec<WarpAccess> {
    let Some((rows, row_len)) = buffer.rows_and_row_len() else { return Vec::new() };
    let bytes = buffer.dtype.bytes().max(1) as i64;
    let row_bytes = row_len * bytes;
    let chunk = cp_async_chunk(buffer, row_len);
    let per_row = row_bytes / chunk;
    let total = rows * per_row;
    let mut out = Vec::new();
    let mut first = 0;
    while first < total && first < limit {
        let lanes = (0..WARP_SIZE as i64)
            .map(|l| {
                let q = first + l;
                (q < total).then(|| buffer.byte_offset(q / per_row, (q % per_row) * chunk / bytes)).flatten()
            })
            .map(|o| o.map(|o| o as u64))
            .collect();
        out.push(WarpAccess { lanes, width: chunk as u32 });
        first += threads.max(1) as i64;
    }
    out
}

#[cfg(test)]
mod tests {
    use tessera_frontend::check::{DType, Dim};

    use super::*;
    use crate::ir::Swizzle;

    fn smem(rows: i64, cols: i64, dtype: DType, swizzle: Swizzle, pad: u32) -> SmemType {
        SmemType { dims: vec![Dim::constant(rows), Dim::constant(cols)], dtype, swizzle, pad, stages: 1 }
    }

    fn worst(accesses: &[WarpAccess]) -> u32 {
        accesses.iter().map(conflict_ways).max().unwrap_or(1)
    }

    /// Lane l reads word (l, c) of a 32x32 f32 buffer: one column per access.
    fn column_read(buffer: &SmemType) -> u32 {
        (0..32)
            .map(|c| {
                let lanes = (0..32).map(|l| buffer.byte_offset(l, c).map(|o| o as u64)).collect();
                conflict_ways(&WarpAccess { lanes, width: 4 })
            })
            .max()
            .unwrap()
    }

    fn any_swizzle() -> impl proptest::strategy::Strategy<Value = Swizzle> {
        proptest::sample::select(vec![
            Swizzle::None,
            Swizzle::Xor,
            Swizzle::Wgmma(32),
            Swizzle::Wgmma(64),
            Swizzle::Wgmma(128),
        ])
    }

    proptest::proptest! {
        /// Simulating one bank period of row blocks finds the worst conflict of the whole
        /// buffer.
        #[test]
        fn one_bank_period_of_accesses_has_the_worst_conflict(
            rows in proptest::sample::select(vec![8i64, 16, 24, 32, 64, 128, 256]),
            cols in proptest::sample::select(vec![8i64, 16, 24, 32, 40, 64, 72, 128]),
            dtype in proptest::sample::select(vec![DType::BF16, DType::F32, DType::Fp8E4m3]),
            swizzle in any_swizzle(),
            pad in proptest::sample::select(vec![0u32, 1, 2, 4, 8]),
            threads in proptest::sample::select(vec![32u32, 64, 128, 256]),
        ) {
            let buffer = smem(rows, cols, dtype, swizzle, pad);
            proptest::prop_assert_eq!(
                ldmatrix_ways(&buffer, rows, cols),
                worst(&ldmatrix_accesses(&buffer, 0, 0, rows, cols))
            );
            proptest::prop_assert_eq!(cp_async_ways(&buffer, threads), worst(&cp_async_accesses(&buffer, threads)));
        }

        /// The bitset window and the sort count the same distinct words per bank.
        #[test]
        fn the_window_counts_what_sorting_counts(
            addrs in proptest::collection::vec(proptest::option::of(0u64..8192), 1..33),
            width in proptest::sample::select(vec![1u32, 2, 4, 8, 16]),
        ) {
            let spans: Vec<(u64, u64)> = addrs
                .iter()
                .flatten()
                .map(|&a| (a / BANK_BYTES as u64, (a + width as u64 - 1) / BANK_BYTES as u64))
                .collect();
            let Some(low) = spans.iter().map(|s| s.0).min() else { return Ok(()) };
            let mut words = Vec::new();
            proptest::prop_assert_eq!(
                ways_in_window(spans.iter().copied(), low),
                ways_by_sorting(spans.iter().copied(), &mut words)
            );
        }
    }

    #[test]
    fn f32_column_reads_are_32_way_and_pad_1_fixes_them() {
        assert_eq!(column_read(&smem(32, 32, DType::F32, Swizzle::None, 0)), 32);
        assert_eq!(column_read(&smem(32, 32, DType::F32, Swizzle::None, 1)), 1);
    }

    #[test]
    fn a_register_column_tile_reads_the_buffer_by_columns() {
        // A [32, 1] tile with one row per lane: every lane reads one word of column 0.
        let layout =
            Layout::Blocked { size_per_thread: vec![1, 1], threads_per_warp: vec![32, 1], warps_per_cta: vec![1, 1] };
        let plain = smem(32, 32, DType::F32, Swizzle::None, 0);
        assert_eq!(worst(&register_tile_accesses(&plain, &layout, &[32, 1], false)), 32);
        let padded = smem(32, 32, DType::F32, Swizzle::None, 1);
        assert_eq!(worst(&register_tile_accesses(&padded, &layout, &[32, 1], false)), 1);
    }

    #[test]
    fn f32_row_reads_are_conflict_free() {
        let layout =
            Layout::Blocked { size_per_thread: vec![1, 1], threads_per_warp: vec![1, 32], warps_per_cta: vec![1, 1] };
        let buffer = smem(32, 32, DType::F32, Swizzle::None, 0);
        assert_eq!(worst(&register_tile_accesses(&buffer, &layout, &[32, 32], false)), 1);
    }

    #[test]
    fn ldmatrix_on_64_half_rows_is_8_way_and_pad_8_or_xor_fixes_it() {
        let plain = smem(64, 64, DType::F16, Swizzle::None, 0);
        assert_eq!(worst(&ldmatrix_accesses(&plain, 0, 0, 64, 64)), 8);
        let padded = smem(64, 64, DType::F16, Swizzle::None, 8);
        assert_eq!(worst(&ldmatrix_accesses(&padded, 0, 0, 64, 64)), 1);
        let swizzled = smem(64, 64, DType::F16, Swizzle::Xor, 0);
        assert_eq!(worst(&ldmatrix_accesses(&swizzled, 0, 0, 64, 64)), 1);
    }

    #[test]
    fn narrow_swizzled_rows_are_conflict_free_under_ldmatrix() {
        // 32 halves = 64-byte rows: the line-wise XOR keeps 8 rows in 8 chunks of banks.
        let s = smem(64, 32, DType::BF16, Swizzle::Xor, 0);
        assert_eq!(worst(&ldmatrix_accesses(&s, 0, 0, 64, 32)), 1);
        let plain = smem(64, 32, DType::BF16, Swizzle::None, 0);
        assert_eq!(worst(&ldmatrix_accesses(&plain, 0, 0, 64, 32)), 4);
    }

    #[test]
    fn cp_async_row_major_chunks_are_conflict_free() {
        for swizzle in [Swizzle::None, Swizzle::Xor] {
            let s = smem(64, 64, DType::F16, swizzle, 0);
            assert_eq!(worst(&cp_async_accesses(&s, 128)), 1, "{swizzle:?}");
        }
    }

    #[test]
    fn same_word_reads_are_a_broadcast() {
        let access = WarpAccess { lanes: vec![Some(0); 32], width: 4 };
        assert_eq!(conflict_ways(&access), 1);
        let two_words =
            WarpAccess { lanes: (0..32).map(|l| Some(if l % 2 == 0 { 0 } else { 128 })).collect(), width: 4 };
        assert_eq!(conflict_ways(&two_words), 2);
    }
}
