//! f32/f64 arithmetic and the composite ops on whole tensors: matmul, reductions,
//! softmax, norms, attention.

use std::ops::{Add, Div, Mul, Sub};

use tessera_passes::ir::rand::uniform;

use crate::interp::numerics::{Domain, Rounder};

/// The arithmetic of the composite ops: f32 (every float dtype but f64) or f64.
pub(super) trait Real:
    Copy + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    fn of(x: f64) -> Self;
    fn get(self) -> f64;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn rsqrt(self) -> Self;
    /// `self * b + c` with one rounding (the product is exact).
    fn fma(self, b: Self, c: Self) -> Self;
    /// The larger, ignoring NaN (`f32::max`).
    fn maximum(self, other: Self) -> Self;
    fn minimum(self, other: Self) -> Self;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NEG_INFINITY: f32 = f32::NEG_INFINITY;
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn get(self) -> f64 {
        self as f64
    }
    // Evaluated in f64 and rounded once, like the Tile IR interpreter's `math.*`.
    fn exp(self) -> f32 {
        (self as f64).exp() as f32
    }
    fn ln(self) -> f32 {
        (self as f64).ln() as f32
    }
    fn rsqrt(self) -> f32 {
        (1.0 / (self as f64).sqrt()) as f32
    }
    fn fma(self, b: f32, c: f32) -> f32 {
        self.mul_add(b, c)
    }
    fn maximum(self, other: f32) -> f32 {
        self.max(other)
    }
    fn minimum(self, other: f32) -> f32 {
        self.min(other)
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NEG_INFINITY: f64 = f64::NEG_INFINITY;
    fn of(x: f64) -> f64 {
        x
    }
    fn get(self) -> f64 {
        self
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    fn rsqrt(self) -> f64 {
        1.0 / f64::sqrt(self)
    }
    fn fma(self, b: f64, c: f64) -> f64 {
        self.mul_add(b, c)
    }
    fn maximum(self, other: f64) -> f64 {
        self.max(other)
    }
    fn minimum(self, other: f64) -> f64 {
        self.min(other)
    }
}

// ----- composite ops -------------------------------------------------------------------

/// `[m, k] x [k, n]` for one batch element, appended to `out` rounded into `dom`.
pub(super) fn matmul_float<T: Real>(
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    dom: Domain,
    out: &mut Vec<f64>,
) {
    let a: Vec<T> = a.iter().map(|&x| T::of(x)).collect();
    let b: Vec<T> = b.iter().map(|&x| T::of(x)).collect();
    let mut row = vec![T::ZERO; n];
    for i in 0..m {
        row.fill(T::ZERO);
        for (kk, &aik) in a[i * k..(i + 1) * k].iter().enumerate() {
            for (r, &bv) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *r = aik.fma(bv, *r);
            }
        }
        out.extend(row.iter().map(|r| dom.convert(r.get())));
    }
}

/// [`matmul_float`] in f32 with the running sums rounded by `step` after every fused
/// multiply-add (`@accum(T)`, T narrower than f32), over `k` in order.
pub(super) fn matmul_stepped(
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    dom: Domain,
    step: Rounder,
    out: &mut Vec<f64>,
) {
    for i in 0..m {
        for j in 0..n {
            let s =
                (0..k).fold(0f32, |s, kk| step.round((a[i * k + kk] as f32).mul_add(b[kk * n + j] as f32, s)) as f32);
            out.push(dom.convert(s as f64));
        }
    }
}

pub(super) fn matmul_int(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize), dom: Domain, out: &mut Vec<f64>) {
    let mut row = vec![0i64; n];
    for i in 0..m {
        row.fill(0);
        for kk in 0..k {
            let aik = a[i * k + kk] as i64;
            for (r, &bv) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *r = r.wrapping_add(aik.wrapping_mul(bv as i64));
            }
        }
        out.extend(row.iter().map(|&s| match dom {
            Domain::Int(d) => d.wrap_int(s) as f64,
            other => other.convert(s as f64),
        }));
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// Reduces `x` into `out_len` elements: element `i` of `x` goes to `targets[i]`.
pub(super) fn reduce_float<T: Real>(
    x: &[f64],
    targets: &[usize],
    out_len: usize,
    count: usize,
    kind: ReduceKind,
) -> Vec<f64> {
    let init = match kind {
        ReduceKind::Sum | ReduceKind::Mean => T::ZERO,
        // NaN start: the first element wins (max/min ignore NaN).
        ReduceKind::Max | ReduceKind::Min => T::of(f64::NAN),
    };
    let mut acc = vec![init; out_len];
    for (&v, &o) in x.iter().zip(targets) {
        let v = T::of(v);
        acc[o] = match kind {
            ReduceKind::Sum | ReduceKind::Mean => acc[o] + v,
            ReduceKind::Max => acc[o].maximum(v),
            ReduceKind::Min => acc[o].minimum(v),
        };
    }
    acc.into_iter()
        .map(|a| match kind {
            ReduceKind::Mean => (a / T::of(count as f64)).get(),
            ReduceKind::Max if count == 0 => f64::NEG_INFINITY,
            ReduceKind::Min if count == 0 => f64::INFINITY,
            _ => a.get(),
        })
        .collect()
}

pub(super) fn reduce_int(x: &[f64], targets: &[usize], out_len: usize, count: usize, kind: ReduceKind) -> Vec<f64> {
    let init = match kind {
        ReduceKind::Sum | ReduceKind::Mean => 0i64,
        ReduceKind::Max => i64::MIN,
        ReduceKind::Min => i64::MAX,
    };
    let mut acc = vec![init; out_len];
    for (&v, &o) in x.iter().zip(targets) {
        let v = v as i64;
        acc[o] = match kind {
            ReduceKind::Sum | ReduceKind::Mean => acc[o].wrapping_add(v),
            ReduceKind::Max => acc[o].max(v),
            ReduceKind::Min => acc[o].min(v),
        };
    }
    acc.into_iter()
        .map(|a| match kind {
            ReduceKind::Mean => a as f64 / count as f64,
            _ => a as f64,
        })
        .collect()
}

/// Softmax (`lse = false`) or logsumexp of every line along the middle dim of
/// `[outer, len, inner]`; logsumexp gives one value per line (`[outer, inner]`).
pub(super) fn softmax_lines<T: Real>(x: &[f64], (outer, len, inner): (usize, usize, usize), lse: bool) -> Vec<f64> {
    let mut out = vec![0.0; if lse { outer * inner } else { x.len() }];
    let mut e = vec![T::ZERO; len];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            let m = (0..len).fold(T::NEG_INFINITY, |m, j| m.maximum(T::of(x[at(j)])));
            let mut l = T::ZERO;
            for (j, ej) in e.iter_mut().enumerate() {
                *ej = (T::of(x[at(j)]) - m).exp();
                l = l + *ej;
            }
            if lse {
                out[o * inner + i] = if m.get() == f64::NEG_INFINITY { f64::NEG_INFINITY } else { (m + l.ln()).get() };
            } else {
                for (j, &ej) in e.iter().enumerate() {
                    out[at(j)] = (ej / l).get();
                }
            }
        }
    }
    out
}

/// RMSNorm or LayerNorm of every row of `[rows, cols]`, statistics in `T`.
pub(super) fn norm_rows<T: Real>(
    x: &[f64],
    (rows, cols): (usize, usize),
    layer: bool,
    eps: f64,
    weight: Option<&[f64]>,
    bias: Option<&[f64]>,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    let n = T::of(cols as f64);
    let eps = T::of(eps);
    for r in 0..rows {
        let row: Vec<T> = x[r * cols..(r + 1) * cols].iter().map(|&v| T::of(v)).collect();
        let mean = if layer { row.iter().fold(T::ZERO, |s, &v| s + v) / n } else { T::ZERO };
        let ss = row.iter().fold(T::ZERO, |s, &v| {
            let d = v - mean;
            s + d * d
        });
        let rstd = (ss / n + eps).rsqrt();
        for (c, &v) in row.iter().enumerate() {
            let mut y = (v - mean) * rstd;
            if let Some(w) = weight {
                y = y * T::of(w[c]);
            }
            if let Some(b) = bias {
                y = y + T::of(b[c]);
            }
            out.push(y.get());
        }
    }
    out
}

/// The shapes of one attention: `bh` heads (flattened leading dims), `sq` queries,
/// `sk` keys, head dim `d` (of q and k) and `dv` (of v).
#[derive(Copy, Clone, Debug)]
pub(super) struct AttnShape {
    pub(super) bh: usize,
    pub(super) sq: usize,
    pub(super) sk: usize,
    pub(super) d: usize,
    pub(super) dv: usize,
}

/// Dropout inside attention: `(seed of the stream, p)`.
pub(super) type AttnDropout = Option<(i64, f32)>;

pub(super) fn attention<T: Real>(
    (q, k, v): (&[f64], &[f64], &[f64]),
    s: AttnShape,
    causal: bool,
    scale: f64,
    dropout: AttnDropout,
) -> Vec<f64> {
    let scale = T::of(scale);
    let mut out = Vec::with_capacity(s.bh * s.sq * s.dv);
    let mut e = vec![T::ZERO; s.sk];
    let mut o = vec![T::ZERO; s.dv];
    let keep_scale = dropout.map(|(_, p)| T::ONE - T::of(p as f64));
    for bh in 0..s.bh {
        let kb: Vec<T> = k[bh * s.sk * s.d..(bh + 1) * s.sk * s.d].iter().map(|&x| T::of(x)).collect();
        let vb: Vec<T> = v[bh * s.sk * s.dv..(bh + 1) * s.sk * s.dv].iter().map(|&x| T::of(x)).collect();
        for i in 0..s.sq {
            let qi: Vec<T> = q[(bh * s.sq + i) * s.d..(bh * s.sq + i + 1) * s.d].iter().map(|&x| T::of(x)).collect();
            let mut m = T::NEG_INFINITY;
            for (j, ej) in e.iter_mut().enumerate() {
                // Bottom-right aligned: the queries are the last `sq` of the `sk` positions.
                *ej = if causal && j + s.sq > i + s.sk {
                    T::NEG_INFINITY
                } else {
                    let dot = qi.iter().zip(&kb[j * s.d..(j + 1) * s.d]).fold(T::ZERO, |acc, (&a, &b)| a.fma(b, acc));
                    dot * scale
                };
                m = m.maximum(*ej);
            }
            let mut l = T::ZERO;
            for ej in e.iter_mut() {
                *ej = (*ej - m).exp();
                l = l + *ej;
            }
            if let (Some((seed, p)), Some(ks)) = (dropout, keep_scale) {
                for (j, ej) in e.iter_mut().enumerate() {
                    let keep = uniform(seed, &[bh as i64, i as i64, j as i64]) >= p;
                    *ej = if keep { *ej / ks } else { T::ZERO };
                }
            }
            o.fill(T::ZERO);
            for (j, &ej) in e.iter().enumerate() {
                for (od, &vd) in o.iter_mut().zip(&vb[j * s.dv..(j + 1) * s.dv]) {
                    *od = ej.fma(vd, *od);
                }
            }
            out.extend(o.iter().map(|&od| (od / l).get()));
        }
    }
    out
}
