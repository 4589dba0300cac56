//! `arith.cast {rounding = "stochastic", stream}` of a graph function (`cast(x, "bf16
//! @stochastic_round")`): element `e` of the result, viewed as `[rows, cols]` (cols: the
//! last dim), rounds with `u = uniform(seed·1000003 + stream + 1, [e / cols, e % cols])`,
//! the stream's seed as dropout's. The hash is written out here again from its
//! definition (docs/ir.md, `tile.rand`) instead of calling `ir::rand`, so the reference
//! and the generated kernels (which go through `tile.rand`) compute the stream apart.

use crate::interp::numerics::Domain;

/// MurmurHash3's 32-bit finalizer.
fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The uniform number in [0, 1) of `seed` at (row, col).
fn uniform(seed: i64, row: i64, col: i64) -> f64 {
    let mut h = mix32((seed as u32) ^ 0x9E37_79B9);
    h = mix32(h ^ row as u32);
    h = mix32(h ^ col as u32);
    f64::from(h >> 8) / 16_777_216.0
}

/// Rounds `xs` (row-major, last dim `cols`) into `dom` stochastically with the stream of
/// `seed`, appending to `out`.
pub(super) fn round(dom: Domain, xs: &[f64], cols: usize, seed: i64, saturate: bool, out: &mut Vec<f64>) {
    let cols = cols.max(1);
    out.extend(xs.iter().enumerate().map(|(e, &x)| {
        let u = uniform(seed, (e / cols) as i64, (e % cols) as i64);
        dom.convert_stochastic(x, u, saturate)
    }));
}

#[cfg(test)]
mod tests {
    /// The same numbers as the pinned `tile.rand` hash every backend computes.
    #[test]
    fn the_stream_is_tile_rands_hash() {
        for (seed, r, c) in [(0, 0, 0), (7, 3, 11), (1_000_004, 123, 4567), (-5, 2, 9)] {
            let want = tessera_passes::ir::rand::uniform(seed, &[r, c]) as f64;
            assert_eq!(super::uniform(seed, r, c), want, "{seed} {r} {c}");
        }
    }
}
