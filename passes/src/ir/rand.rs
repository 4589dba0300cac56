//! The counter-based hash behind `tile.rand`: every backend computes exactly this, so a
//! dropout mask is the same on the interpreter, the CPU and the GPU, and the same in a
//! forward kernel and the backward kernel that replays it.

/// MurmurHash3's 32-bit finalizer.
pub fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The uniform number in [0, 1) of `seed` at `coordinates`:
/// `h = mix32(seed ^ 0x9E3779B9)`, then `h = mix32(h ^ c)` for each coordinate (as
/// 32-bit integers), and `(h >> 8) * 2^-24`.
pub fn uniform(seed: i64, coordinates: &[i64]) -> f32 {
    let mut h = mix32((seed as u32) ^ 0x9E37_79B9);
    for &c in coordinates {
        h = mix32(h ^ c as u32);
    }
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// The Taylor coefficients of `cos(y)` after the constant term, in powers of `y²`
/// (`-1/2!, 1/4!, .., -1/14!`): `normal` evaluates them in f32 by Horner's rule. Generated
/// kernels write the same numbers as literals (which round to the same f32 values).
pub const COS_TAYLOR: [f64; 7] = [
    -1.0 / 2.0,
    1.0 / 24.0,
    -1.0 / 720.0,
    1.0 / 40_320.0,
    -1.0 / 3_628_800.0,
    1.0 / 479_001_600.0,
    -1.0 / 87_178_291_200.0,
];

/// `π` as the f32 literal generated kernels use.
pub const PI_F32: f32 = std::f32::consts::PI;

/// `randn`'s standard normal number of `seed` at `(row, col)`, computed in f32 by the
/// Box–Muller transform of two `uniform` numbers, `u1 = uniform(seed, (0, row, col))`
/// and `u2 = uniform(seed, (1, row, col))`:
///
/// - `r = sqrt(-2 · log(1 - u1))` (`1 - u1` is in (0, 1], so `r` is in [0, 5.77]: the
///   tails beyond 5.77 are never drawn);
/// - `cos(2π·u2) = 1 - 2·c²` with `c = cos(y)`, `y = (u2 - 0.5) · π` in [-π/2, π/2],
///   by the Taylor polynomial of `COS_TAYLOR` (its truncation error is below 1e-10);
/// - the number is `r · (1 - 2·c²)`.
///
/// Every operation rounds to f32; the logarithm is computed in f64 from the f32 operand
/// and rounded, as the Tile IR interpreter does. A backend whose `log` differs in the last
/// place gives numbers that differ in the last places.
pub fn normal(seed: i64, row: i64, col: i64) -> f32 {
    let u1 = uniform(seed, &[0, row, col]);
    let u2 = uniform(seed, &[1, row, col]);
    let log = ((1.0f32 - u1) as f64).ln() as f32;
    let r = (-2.0f32 * log).sqrt();
    let y = (u2 - 0.5f32) * PI_F32;
    let s = y * y;
    let mut acc = COS_TAYLOR[6] as f32;
    for &k in COS_TAYLOR[..6].iter().rev() {
        acc = k as f32 + s * acc;
    }
    let c = 1.0f32 + s * acc;
    r * (1.0f32 - 2.0f32 * (c * c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_numbers_are_in_range_and_spread() {
        let xs: Vec<f32> = (0..10_000).map(|i| uniform(7, &[0, i])).collect();
        assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = xs.iter().sum::<f32>() / xs.len() as f32;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        let below = xs.iter().filter(|&&x| x < 0.1).count();
        assert!((800..1200).contains(&below), "{below} of 10000 below 0.1");
        assert_ne!(uniform(0, &[0, 1]), uniform(0, &[1, 0]));
        assert_ne!(uniform(1, &[0, 0]), uniform(0, &[0, 0]));
    }

    /// Values every backend must reproduce bit for bit (computed independently).
    pub const PINNED: &[(i64, &[i64], f32)] = &[
        (0, &[0, 0], 0.391_345_02),
        (1, &[2, 3], 0.768_119_34),
        (1_000_004, &[5, 64, 128], 0.922_783_43),
        (-1, &[7, -3], 0.126_207_59),
    ];

    #[test]
    fn normal_numbers_are_standard_normal() {
        let n = 40_000;
        let xs: Vec<f64> = (0..n).map(|i| normal(11, i / 200, i % 200) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "variance {var}");
        // P(|z| < 1) = 0.6827 for a standard normal.
        let inside = xs.iter().filter(|x| x.abs() < 1.0).count() as f64 / n as f64;
        assert!((inside - 0.6827).abs() < 0.01, "{inside} within one sigma");
        // The polynomial is cos(y) on [-pi/2, pi/2].
        for i in 0..=100 {
            let y = (i as f64 / 100.0 - 0.5) * std::f64::consts::PI;
            let c = 1.0 + COS_TAYLOR.iter().rev().fold(0.0, |acc, k| k + y * y * acc) * y * y;
            assert!((c - y.cos()).abs() < 1e-10, "cos({y})");
        }
        assert_eq!(normal(3, 4, 5), normal(3, 4, 5));
        assert_ne!(normal(3, 4, 5), normal(4, 4, 5));
    }

    #[test]
    fn pinned_values() {
        for &(seed, coords, want) in PINNED {
            assert_eq!(uniform(seed, coords), want, "seed {seed} at {coords:?}");
        }
    }
}
