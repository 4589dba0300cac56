//! Plain reference implementations in f64, for validating the interpreter (and through it
//! every backend): straightforward loops with no tiling, no online rescaling and no
//! low-precision intermediates. Inputs and outputs are row-major `f64` slices holding the
//! values of the kernels' tensors; callers compare with `interp::compare`.

/// `C[m, n] = A[m, k] @ B[k, n]`.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    assert_eq!(a.len(), m * k, "A is not {m}x{k}");
    assert_eq!(b.len(), k * n, "B is not {k}x{n}");
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk];
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j];
            }
        }
    }
    c
}

/// Softmax of each row of a `rows x cols` matrix.
pub fn softmax(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols);
    let mut y = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        for c in 0..cols {
            y[r * cols + c] = e[c] / s;
        }
    }
    y
}

/// `(x - mean) / sqrt(var + eps) * w + b` over each row (population variance).
pub fn layernorm(x: &[f64], w: &[f64], b: &[f64], rows: usize, cols: usize, eps: f64) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols);
    let mut y = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for c in 0..cols {
            y[r * cols + c] = (row[c] - mean) * rstd * w[c] + b[c];
        }
    }
    y
}

/// `x / sqrt(mean(x^2) + eps) * w` over each row.
pub fn rmsnorm(x: &[f64], w: &[f64], rows: usize, cols: usize, eps: f64) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols);
    let mut y = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (ms + eps).sqrt();
        for c in 0..cols {
            y[r * cols + c] = row[c] * rstd * w[c];
        }
    }
    y
}

/// `softmax(Q K^T / sqrt(d)) V` for each of `bh` heads of `[s, d]` matrices; with
/// `causal`, query `i` attends to keys `j <= i` only.
pub fn attention(q: &[f64], k: &[f64], v: &[f64], bh: usize, s: usize, d: usize, causal: bool) -> Vec<f64> {
    assert!(q.len() == bh * s * d && k.len() == q.len() && v.len() == q.len());
    let scale = 1.0 / (d as f64).sqrt();
    let mut o = vec![0.0; bh * s * d];
    let mut scores = vec![0.0; s];
    for h in 0..bh {
        let base = h * s * d;
        for i in 0..s {
            let keys = if causal { i + 1 } else { s };
            for (j, score) in scores.iter_mut().enumerate().take(keys) {
                *score = (0..d).map(|t| q[base + i * d + t] * k[base + j * d + t]).sum::<f64>() * scale;
            }
            let m = scores[..keys].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores[..keys].iter().map(|x| (x - m).exp()).collect();
            let l: f64 = p.iter().sum();
            for t in 0..d {
                o[base + i * d + t] = (0..keys).map(|j| p[j] * v[base + j * d + t]).sum::<f64>() / l;
            }
        }
    }
    o
}

/// The tanh approximation of GELU (docs/ir.md).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}

pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `alpha * x + y`.
pub fn saxpy(alpha: f64, x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| alpha * a + b).collect()
}

pub fn vector_add(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| a + b).collect()
}

/// `gelu(X @ W + bias)` with `bias` broadcast over rows.
pub fn linear_gelu(x: &[f64], w: &[f64], bias: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = matmul(x, w, m, k, n);
    for (i, v) in y.iter_mut().enumerate() {
        *v = gelu(*v + bias[i % n]);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_by_hand() {
        assert_eq!(matmul(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], 2, 2, 2), vec![19.0, 22.0, 43.0, 50.0]);
        let s = softmax(&[0.0, 0.0, 1.0, 1.0], 2, 2);
        assert_eq!(s, vec![0.5, 0.5, 0.5, 0.5]);
        let y = layernorm(&[1.0, 3.0], &[1.0, 1.0], &[0.0, 0.0], 1, 2, 0.0);
        assert_eq!(y, vec![-1.0, 1.0]);
        let y = rmsnorm(&[3.0, 4.0], &[1.0, 2.0], 1, 2, 0.0);
        let r = (12.5f64).sqrt();
        assert_eq!(y, vec![3.0 / r, 8.0 / r]);
        // One head, two positions: causal row 0 sees only key 0.
        let q = [1.0, 0.0, 0.0, 1.0];
        let v = [1.0, 2.0, 3.0, 4.0];
        let o = attention(&q, &q, &v, 1, 2, 2, true);
        assert_eq!(&o[..2], &[1.0, 2.0]);
        let w = (1.0f64 / 2f64.sqrt()).exp();
        assert!((o[2] - (1.0 + 3.0 * w) / (1.0 + w)).abs() < 1e-12);
        assert!((gelu(1.0) - 0.8411919906).abs() < 1e-6);
        assert!((silu(1.0) - 0.7310585786).abs() < 1e-9);
        assert_eq!(saxpy(2.0, &[1.0], &[3.0]), vec![5.0]);
        assert_eq!(vector_add(&[1.0], &[3.0]), vec![4.0]);
        assert_eq!(linear_gelu(&[1.0], &[0.0], &[0.0], 1, 1, 1), vec![0.0]);
    }
}
