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
    fn pinned_values() {
        for &(seed, coords, want) in PINNED {
            assert_eq!(uniform(seed, coords), want, "seed {seed} at {coords:?}");
        }
    }
}
