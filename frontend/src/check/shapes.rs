//! Shape rules shared by graph ops and tile ops.

use super::dims::Dim;

/// NumPy broadcasting of two shapes. On failure, the 0-based positions (from the left
/// of each shape) of the first pair of dims that do not broadcast.
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, (usize, usize)> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.len()).checked_sub(rank).map(|j| (j, &a[j]));
        let db = (i + b.len()).checked_sub(rank).map(|j| (j, &b[j]));
        let dim = match (da, db) {
            (Some((_, x)), None) => x.clone(),
            (None, Some((_, y))) => y.clone(),
            (Some((ja, x)), Some((jb, y))) => {
                if x == y {
                    x.clone()
                } else if x.as_const() == Some(1) {
                    y.clone()
                } else if y.as_const() == Some(1) {
                    x.clone()
                } else {
                    return Err((ja, jb));
                }
            }
            (None, None) => unreachable!("i < rank"),
        };
        out.push(dim);
    }
    Ok(out)
}

/// Whether `value` broadcasts to exactly `target` (a store into a slice).
pub fn broadcasts_to(value: &[Dim], target: &[Dim]) -> bool {
    value.len() <= target.len() && broadcast(value, target).is_ok_and(|r| r == target)
}

/// Normalizes a possibly negative axis against a rank.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let rank = rank as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    (0..rank).contains(&a).then_some(a as usize)
}

/// The product of dims (for reshape's element-count check).
pub fn product(dims: &[Dim]) -> Dim {
    dims.iter().fold(Dim::constant(1), |acc, d| acc.mul_plain(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(dims: &[&str]) -> Vec<Dim> {
        dims.iter().map(|d| Dim::parse(d).unwrap()).collect()
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast(&s(&["B", "D"]), &s(&["D"])), Ok(s(&["B", "D"])));
        assert_eq!(broadcast(&s(&["BM", "1"]), &s(&["BM", "BN"])), Ok(s(&["BM", "BN"])));
        assert_eq!(broadcast(&s(&["B", "D"]), &s(&["F"])), Err((1, 0)));
        assert!(broadcasts_to(&s(&["1", "BN"]), &s(&["BM", "BN"])));
        assert!(!broadcasts_to(&s(&["BM", "BN"]), &s(&["BN"])));
    }
}
