//! Values of the semantic reference and the tile operations on them, all in f64.

use tessera_frontend::check::DType;

/// A tile: a dense row-major block of exact f64 values.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tile {
    pub dims: Vec<usize>,
    pub data: Vec<f64>,
}

impl Tile {
    pub fn filled(dims: Vec<usize>, value: f64) -> Result<Tile, String> {
        let n = numel(&dims)?;
        Ok(Tile { dims, data: vec![value; n] })
    }

    /// `[rows, cols]` of a rank-2 tile.
    pub fn matrix(&self, what: &str) -> Result<(usize, usize), String> {
        match self.dims[..] {
            [r, c] => Ok((r, c)),
            _ => Err(format!("{what} is a rank-{} tile; the reference handles rank-2 tiles here", self.dims.len())),
        }
    }
}

/// The element count of a tile, refusing absurd sizes instead of allocating them.
pub(crate) fn numel(dims: &[usize]) -> Result<usize, String> {
    // 2^28 elements (2 GiB of f64) for one tile is far beyond any real tile.
    const LIMIT: usize = 1 << 28;
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d).filter(|&n| n <= LIMIT))
        .ok_or_else(|| format!("a tile of {dims:?} elements is beyond the reference's limit of 2^28 elements"))
}

/// A window of a tensor parameter (`tile.view`).
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub arg: usize,
    pub offsets: Vec<i64>,
    pub sizes: Vec<i64>,
    /// The tensor dims that stay in the view's shape (the others are squeezed).
    pub kept: Vec<usize>,
}

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Index(i64),
    Scalar(f64),
    Tile(Tile),
    /// A tensor parameter, by parameter index.
    Tensor(usize),
    View(View),
    /// A shared-memory buffer of this program, by allocation index.
    Smem(usize),
}

impl Value {
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Index(_) => "an index",
            Value::Scalar(_) => "a scalar",
            Value::Tile(_) => "a tile",
            Value::Tensor(_) => "a tensor",
            Value::View(_) => "a view",
            Value::Smem(_) => "a shared buffer",
        }
    }
}

/// An explicit conversion (`arith.cast`, `tile.cast(x, dtype)`) in the reference, with
/// the conversion's `saturate` policy. Integers truncate toward zero and wrap to their
/// width (clamp with `saturate`), bools test for nonzero. A conversion to a float type
/// narrower than f32 (bf16, f16, tf32, fp8) rounds by the conversion rules of docs/ir.md
/// (fp8 overflow is NaN/Inf unless `saturate`): the program asks for those numbers
/// (`tile.cast(p, bf16)` decides what the next dot sees). Conversions to f32 and f64 keep
/// the f64 value: the working precision of tiles is not part of the program's meaning,
/// so the reference computes it exactly.
pub(crate) fn convert_exact(dtype: DType, x: f64, saturate: bool) -> f64 {
    match dtype {
        DType::F32 | DType::F64 => x,
        d => crate::tensor::round_with(d, x, saturate),
    }
}

/// `acc + a @ b` for rank-2 tiles, summed in f64 in index order.
pub(crate) fn dot(a: &Tile, b: &Tile, acc: &Tile) -> Result<Tile, String> {
    let (m, k) = a.matrix("the left operand of tile.dot")?;
    let (k2, n) = b.matrix("the right operand of tile.dot")?;
    if k != k2 || acc.dims != [m, n] {
        return Err(format!("tile.dot of {:?} x {:?} into {:?}", a.dims, b.dims, acc.dims));
    }
    let mut out = acc.data.clone();
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for kk in 0..k {
            let x = a.data[i * k + kk];
            let brow = &b.data[kk * n..(kk + 1) * n];
            for (o, &y) in row.iter_mut().zip(brow) {
                *o += x * y;
            }
        }
    }
    Ok(Tile { dims: vec![m, n], data: out })
}

/// Reduces `axis` away: `sum`, `max` or `min` in f64.
pub(crate) fn reduce(t: &Tile, axis: usize, kind: &str) -> Result<Tile, String> {
    if axis >= t.dims.len() {
        return Err(format!("tile.reduce over axis {axis} of a rank-{} tile", t.dims.len()));
    }
    let outer: usize = t.dims[..axis].iter().product();
    let len = t.dims[axis];
    let inner: usize = t.dims[axis + 1..].iter().product();
    let (init, f): (f64, fn(f64, f64) -> f64) = match kind {
        "sum" => (0.0, |a, b| a + b),
        // NaN propagates (IEEE maximum would drop it and hide a non-finite row).
        "max" => (f64::NEG_INFINITY, |a: f64, b: f64| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }),
        "min" => (f64::INFINITY, |a: f64, b: f64| if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }),
        other => return Err(format!("tile.reduce of kind `{other}`")),
    };
    let mut data = vec![init; outer * inner];
    for o in 0..outer {
        for l in 0..len {
            for i in 0..inner {
                let d = &mut data[o * inner + i];
                *d = f(*d, t.data[(o * len + l) * inner + i]);
            }
        }
    }
    let mut dims = t.dims.clone();
    dims.remove(axis);
    Ok(Tile { dims, data })
}

/// Swaps the last two dims.
pub(crate) fn transpose(t: &Tile) -> Result<Tile, String> {
    let r = t.dims.len();
    if r < 2 {
        return Ok(t.clone());
    }
    let (rows, cols) = (t.dims[r - 2], t.dims[r - 1]);
    let batch: usize = t.dims[..r - 2].iter().product();
    let mut data = Vec::with_capacity(t.data.len());
    for b in 0..batch {
        let base = b * rows * cols;
        for c in 0..cols {
            for row in 0..rows {
                data.push(t.data[base + row * cols + c]);
            }
        }
    }
    let mut dims = t.dims.clone();
    dims.swap(r - 2, r - 1);
    Ok(Tile { dims, data })
}

/// Expands size-1 dims to `to` (equal ranks).
pub(crate) fn broadcast(t: &Tile, to: &[usize]) -> Result<Tile, String> {
    if t.dims.len() != to.len() || t.dims.iter().zip(to).any(|(&a, &b)| a != b && a != 1) {
        return Err(format!("tile.broadcast of {:?} to {to:?}", t.dims));
    }
    let n = numel(to)?;
    let mut strides = vec![0usize; to.len()];
    let mut s = 1;
    for d in (0..to.len()).rev() {
        strides[d] = if t.dims[d] == 1 { 0 } else { s };
        s *= t.dims[d];
    }
    let mut data = Vec::with_capacity(n);
    let mut idx = vec![0usize; to.len()];
    for _ in 0..n {
        data.push(t.data[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..to.len()).rev() {
            idx[d] += 1;
            if idx[d] < to[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(Tile { dims: to.to_vec(), data })
}

/// `s[i, j] = -inf` where `k_off + j > q_off + i`.
pub(crate) fn causal_mask(s: &Tile, q_off: i64, k_off: i64) -> Result<Tile, String> {
    let (m, n) = s.matrix("the scores of tile.causal_mask")?;
    let mut out = s.clone();
    for i in 0..m {
        for j in 0..n {
            if k_off + j as i64 > q_off + i as i64 {
                out.data[i * n + j] = f64::NEG_INFINITY;
            }
        }
    }
    Ok(out)
}

/// Row-major coordinates of flat index `i`.
pub(crate) fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        let n = dims[d].max(1);
        out[d] = i % n;
        i /= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(dims: &[usize], data: &[f64]) -> Tile {
        Tile { dims: dims.to_vec(), data: data.to_vec() }
    }

    #[test]
    fn dot_sums_in_index_order() {
        let a = tile(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = tile(&[2, 1], &[10.0, 100.0]);
        let acc = tile(&[2, 1], &[0.5, 0.25]);
        assert_eq!(dot(&a, &b, &acc).unwrap().data, vec![210.5, 430.25]);
    }

    #[test]
    fn max_reduction_keeps_nan() {
        let t = tile(&[1, 3], &[1.0, f64::NAN, 3.0]);
        assert!(reduce(&t, 1, "max").unwrap().data[0].is_nan());
        assert_eq!(reduce(&t, 0, "sum").unwrap().dims, vec![3]);
    }

    #[test]
    fn broadcast_and_transpose() {
        let col = tile(&[2, 1], &[1.0, 2.0]);
        assert_eq!(broadcast(&col, &[2, 3]).unwrap().data, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        let t = tile(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(transpose(&t).unwrap().data, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert!(numel(&[1 << 20, 1 << 20]).is_err());
    }

    #[test]
    fn integer_conversion_truncates_and_wraps() {
        assert_eq!(convert_exact(DType::Int8, 130.7, false), -126.0);
        assert_eq!(convert_exact(DType::Int8, 130.7, true), 127.0);
        assert_eq!(convert_exact(DType::I32, -2.9, false), -2.0);
        assert_eq!(convert_exact(DType::F32, 0.1, false), 0.1);
        assert_eq!(convert_exact(DType::BF16, 1.0 + 1.0 / 512.0, false), 1.0);
        assert!(convert_exact(DType::Fp8E4m3, 1000.0, false).is_nan());
        assert_eq!(convert_exact(DType::Fp8E4m3, -1000.0, true), -448.0);
        assert_eq!(convert_exact(DType::Bool, -3.0, false), 1.0);
    }
}
