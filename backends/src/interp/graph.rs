//! The reference interpreter of Graph IR: runs a `@jit` graph function (its Graph IR, with
//! `grad` expanded into the backward graph) on whole tensors, as the oracle the launch
//! plan and every backend are compared with. [`run_plan`] runs the plan itself: the
//! Schedule IR of the function launching the generated kernels through a
//! [`KernelExecutor`] (the Tile IR interpreter by default).
//!
//! Numerics (docs/ir.md, "Numerics" and "Graph level"):
//!
//! - Tensors hold values exactly representable in their dtype (stored as f64). Elementwise
//!   ops compute in their result dtype's arithmetic and round once per op, with the Tile
//!   IR interpreter's element functions: 16- and 8-bit floats compute in f32 and round to
//!   the dtype, f32 in f32, f64 in f64, integers wrap.
//! - `graph.matmul`: exact products (f32 fused multiply-add), accumulation in f32 over
//!   `k` in order (f64 when an operand is f64, wrapping i64 for integer operands), one
//!   rounding to the result dtype.
//! - `graph.reduce`: f32 accumulation (f64 for f64, exact for integers) in row-major
//!   order, `mean` divides the f32 sum by the count in f32; one rounding.
//! - `graph.softmax/logsumexp`, `graph.rmsnorm/layernorm` and `graph.flash_attention`
//!   compute in f32 (f64 for f64 tensors) and round once to the result dtype. Norm
//!   statistics are two-pass (mean, then the mean of squared deviations). Transcendental
//!   functions are evaluated in f64 from the f32 operand and rounded to f32, as in the
//!   Tile IR interpreter.
//! - `graph.flash_attention` is the exact `softmax(Q Kᵀ · scale) V` (scale `1/sqrt(Dh)`
//!   in f32 unless the op has `scale`): `s = q·k` accumulated in f32 and multiplied by the
//!   scale, keys after the query masked when `causal` (key index > query index), `e =
//!   exp(s - max)`, `l = Σ e`, dropout on `e` (below), `o = (Σ e·v) / l` in f32, rounded
//!   once. Unlike the stdlib kernel it does not round the probabilities to bf16 before
//!   `P·V`. Dropout keeps `e[bh, i, j]` where `uniform(seed·1000003 + stream + 1, (bh, i,
//!   j)) >= p` (`bh` = the flattened leading index, `b·H + h`) and scales it by `/(1 - p)`.
//! - `graph.dropout {stream}` keeps element `(r, c)` of the tensor viewed as
//!   `[rows = product of the leading dims, cols = last dim]` where
//!   `uniform(seed·1000003 + stream + 1, (r, c)) >= p`; a kept value is `x / (1 - p)`
//!   computed in f32 (f64 for f64 tensors) and rounded to the dtype, a dropped one is 0.
//!   `replay = true` (the backward graph) draws the same mask. This is exactly the
//!   generated kernels' `tile.where(tile.rand(...) >= p, tile.cast(x, f32) / (1.0 - p),
//!   0.0)`.
//!
//! Tokens only order effects: a `!token` value carries nothing.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Add, Div, Mul, Sub};
use std::sync::Arc;

use tessera_frontend::check::{DType, Dim};
use tessera_frontend::{Db, FnKey};
use tessera_passes::ir::rand::uniform;
use tessera_passes::ir::{policy, Attr, Func, Op, OpId, OpKind, Type, ValueId};
use tessera_passes::Target;

use super::numerics::{saturate_index, wrap_int, BinFn, BinOp, Domain, Pred, Rounder, UnFn, UnOp};
use super::{param_access, InterpError, Options};
use crate::tensor::{elem_bytes, Arg, HostTensor};

/// An argument of a graph function (in parameter order) or one of its results: a tensor,
/// a float or bool scalar (`lr: float`), or an index (`heads: int`).
pub type GraphArg = Arg;

type R<T> = Result<T, InterpError>;

/// The multiplier of a run's seed in each dropout stream's seed:
/// `seed * STREAM_SEED_MULTIPLIER + stream + 1` (docs/ir.md, the launch plan).
pub const STREAM_SEED_MULTIPLIER: i64 = 1_000_003;

/// The seed of dropout stream `stream` in a run seeded with `seed` (index arithmetic,
/// wrapping like the launch plan's `arith.mul`/`arith.add` on `index`).
pub fn stream_seed(seed: i64, stream: i64) -> i64 {
    seed.wrapping_mul(STREAM_SEED_MULTIPLIER).wrapping_add(stream).wrapping_add(1)
}

/// Whether `graph.dropout {stream}` keeps element `(row, col)` of its input viewed as
/// `[rows, cols]` (see the module doc).
pub fn dropout_keeps(seed: i64, stream: i64, row: i64, col: i64, p: f32) -> bool {
    uniform(stream_seed(seed, stream), &[row, col]) >= p
}

// ----- values ------------------------------------------------------------------------

/// A whole tensor: row-major values exactly representable in `dtype`.
#[derive(Clone, PartialEq, Debug)]
struct Tensor {
    dtype: DType,
    dims: Vec<usize>,
    data: Vec<f64>,
}

impl Tensor {
    fn from_host(t: &HostTensor) -> Tensor {
        Tensor { dtype: t.dtype, dims: t.dims.clone(), data: t.to_f64() }
    }

    fn to_host(&self) -> HostTensor {
        HostTensor::from_f64(self.dtype, &self.dims, &self.data)
    }
}

#[derive(Clone, PartialEq, Debug)]
enum Val {
    Tensor(Tensor),
    Index(i64),
    /// A host scalar of a dtype (its value exactly representable in it).
    Scalar(DType, f64),
    Token,
}

impl Val {
    fn to_arg(&self) -> Option<Arg> {
        match self {
            Val::Tensor(t) => Some(Arg::Tensor(t.to_host())),
            Val::Index(v) => Some(Arg::Index(*v)),
            Val::Scalar(d, v) => Some(Arg::Scalar(*d, *v)),
            Val::Token => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Val::Tensor(t) => format!("a {:?} {} tensor", t.dims, t.dtype),
            Val::Index(_) => "an index".into(),
            Val::Scalar(d, _) => format!("a {d} scalar"),
            Val::Token => "a token".into(),
        }
    }
}

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    strides
}

/// The offsets `Σ idx[d] * strides[d]` of every index of `dims`, in row-major order.
struct Offsets<'a> {
    dims: &'a [usize],
    strides: &'a [usize],
    idx: Vec<usize>,
    offset: usize,
    left: usize,
}

impl<'a> Offsets<'a> {
    fn new(dims: &'a [usize], strides: &'a [usize]) -> Offsets<'a> {
        Offsets { dims, strides, idx: vec![0; dims.len()], offset: 0, left: numel(dims) }
    }
}

impl Iterator for Offsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let current = self.offset;
        let mut d = self.dims.len();
        while d > 0 {
            d -= 1;
            self.idx[d] += 1;
            self.offset += self.strides[d];
            if self.idx[d] < self.dims[d] {
                break;
            }
            self.offset -= self.strides[d] * self.dims[d];
            self.idx[d] = 0;
        }
        Some(current)
    }
}

/// `src` read at `Σ idx[d] * strides[d]` for every index of `dims` (broadcasts, transposes).
fn gather(src: &[f64], dims: &[usize], strides: &[usize]) -> Vec<f64> {
    Offsets::new(dims, strides).map(|o| src[o]).collect()
}

/// NumPy broadcasting of two shapes (trailing dims aligned), `None` when incompatible.
fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Strides that read a tensor of `from` dims at every index of `to` dims (NumPy rules:
/// trailing dims aligned, size-1 and missing dims repeat), `None` when `from` does not
/// broadcast to `to`.
fn broadcast_strides(from: &[usize], to: &[usize]) -> Option<Vec<usize>> {
    if from.len() > to.len() {
        return None;
    }
    let lead = to.len() - from.len();
    let src = row_major_strides(from);
    (0..to.len())
        .map(|i| {
            if i < lead {
                return Some(0);
            }
            let f = from[i - lead];
            if f == to[i] {
                Some(if f == 1 { 0 } else { src[i - lead] })
            } else if f == 1 {
                Some(0)
            } else {
                None
            }
        })
        .collect()
}

// ----- f32/f64 arithmetic --------------------------------------------------------------

/// The arithmetic of the composite ops: f32 (every float dtype but f64) or f64.
trait Real: Copy + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> {
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
fn matmul_float<T: Real>(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize), dom: Domain, out: &mut Vec<f64>) {
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
fn matmul_stepped(
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

fn matmul_int(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize), dom: Domain, out: &mut Vec<f64>) {
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
            Domain::Int(d) => wrap_int(d, s) as f64,
            other => other.convert(s as f64),
        }));
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// Reduces `x` into `out_len` elements: element `i` of `x` goes to `targets[i]`.
fn reduce_float<T: Real>(x: &[f64], targets: &[usize], out_len: usize, count: usize, kind: ReduceKind) -> Vec<f64> {
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

fn reduce_int(x: &[f64], targets: &[usize], out_len: usize, count: usize, kind: ReduceKind) -> Vec<f64> {
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
fn softmax_lines<T: Real>(x: &[f64], (outer, len, inner): (usize, usize, usize), lse: bool) -> Vec<f64> {
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
fn norm_rows<T: Real>(
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
struct AttnShape {
    bh: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
}

/// Dropout inside attention: `(seed of the stream, p)`.
type AttnDropout = Option<(i64, f32)>;

fn attention<T: Real>(
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
                *ej = if causal && j > i {
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

// ----- the interpreter ------------------------------------------------------------------

/// Binds a graph function's parameters (Graph or Schedule IR of a graph function) to
/// arguments: checks dtypes, ranks and constant dims, and gives each dim symbol (and each
/// index parameter, by name: `heads` in `D//heads`) its value.
fn bind_params(func: &Func, args: &[Arg]) -> R<(Vec<Val>, BTreeMap<String, i64>)> {
    if args.len() != func.params.len() {
        return Err(InterpError::new(format!(
            "`{}` takes {} arguments, got {}",
            func.name,
            func.params.len(),
            args.len()
        )));
    }
    let name = |i: usize| -> String {
        func.values[func.params[i].0 as usize].name.as_ref().map_or_else(|| format!("arg{i}"), |n| n.to_string())
    };
    let mut symbols: BTreeMap<String, i64> = BTreeMap::new();
    let bind = |symbols: &mut BTreeMap<String, i64>, sym: &str, v: i64, what: &str| -> R<()> {
        match symbols.get(sym) {
            Some(&old) if old != v => {
                Err(InterpError::new(format!("{what} gives `{sym}` = {v}, but it is {old} already")))
            }
            _ => {
                symbols.insert(sym.to_string(), v);
                Ok(())
            }
        }
    };
    let mut vals = Vec::new();
    for (i, (&p, a)) in func.params.iter().zip(args).enumerate() {
        let n = name(i);
        let v = match (func.ty(p), a) {
            (Type::Tensor(t), Arg::Tensor(h)) => {
                if h.dtype != t.dtype {
                    return Err(InterpError::new(format!("`{n}` is {}, got a {} tensor", t.dtype, h.dtype)));
                }
                if h.dims.len() != t.dims.len() {
                    return Err(InterpError::new(format!(
                        "`{n}` has rank {}, got a rank-{} tensor",
                        t.dims.len(),
                        h.dims.len()
                    )));
                }
                if h.data.len() != h.numel() * elem_bytes(h.dtype) {
                    return Err(InterpError::new(format!("`{n}`: data size does not match its dims {:?}", h.dims)));
                }
                for (axis, (d, &size)) in t.dims.iter().zip(&h.dims).enumerate() {
                    if let Some(c) = d.as_const() {
                        if c != size as i64 {
                            return Err(InterpError::new(format!("`{n}` dim {axis} is {c}, got {size}")));
                        }
                    } else if let Some(s) = d.as_sym() {
                        bind(&mut symbols, s, size as i64, &format!("`{n}` dim {axis}"))?;
                    }
                }
                Val::Tensor(Tensor::from_host(h))
            }
            (Type::Index, Arg::Index(v)) => {
                bind(&mut symbols, &n, *v, &format!("the argument `{n}`"))?;
                Val::Index(*v)
            }
            (Type::Index, Arg::Scalar(d, v)) if d.is_int() => {
                bind(&mut symbols, &n, *v as i64, &format!("the argument `{n}`"))?;
                Val::Index(*v as i64)
            }
            (Type::Scalar(d), Arg::Scalar(_, v)) => Val::Scalar(*d, Domain::of_dtype(*d).convert(*v)),
            (Type::Scalar(d), Arg::Index(v)) => Val::Scalar(*d, Domain::of_dtype(*d).convert(*v as f64)),
            (t, a) => {
                let got = match a {
                    Arg::Tensor(h) => format!("a rank-{} {} tensor", h.dims.len(), h.dtype),
                    Arg::Scalar(d, _) => format!("a {d} scalar"),
                    Arg::Index(_) => "an index".into(),
                };
                return Err(InterpError::new(format!("`{n}` is {t}, got {got}")));
            }
        };
        vals.push(v);
    }
    // Compound dims (`3*D`) once every plain symbol is known.
    for (i, (&p, a)) in func.params.iter().zip(args).enumerate() {
        if let (Type::Tensor(t), Arg::Tensor(h)) = (func.ty(p), a) {
            for (axis, (d, &size)) in t.dims.iter().zip(&h.dims).enumerate() {
                if d.is_const() || d.as_sym().is_some() {
                    continue;
                }
                match d.eval(&|s| symbols.get(s).copied()) {
                    Some(v) if v == size as i64 => {}
                    Some(v) => {
                        return Err(InterpError::new(format!("`{}` dim {axis} is {d} = {v}, got {size}", name(i))))
                    }
                    None => {
                        return Err(InterpError::new(format!(
                            "`{}` dim {axis} is {d}: no value for {}",
                            name(i),
                            d.symbols().into_iter().filter(|s| !symbols.contains_key(s)).collect::<Vec<_>>().join(", ")
                        )))
                    }
                }
            }
        }
    }
    Ok((vals, symbols))
}

fn eval_dims(dims: &[Dim], symbols: &BTreeMap<String, i64>) -> Option<Vec<usize>> {
    dims.iter().map(|d| d.eval(&|s| symbols.get(s).copied()).and_then(|v| usize::try_from(v).ok())).collect()
}

/// The values of one run of a graph function: every SSA value it computed.
#[derive(Clone, Debug)]
pub struct GraphTrace {
    values: Vec<Option<Val>>,
    /// The dim symbols bound by the arguments.
    pub symbols: BTreeMap<String, i64>,
}

impl GraphTrace {
    /// The value of `v` (`None` for tokens and values the run did not reach).
    pub fn value(&self, v: ValueId) -> Option<Arg> {
        self.values.get(v.0 as usize)?.as_ref()?.to_arg()
    }
}

/// Evaluates the Graph IR of a graph function on `args` (one per parameter, in order);
/// `seed` is the run's seed for dropout. Returns the returned values in order.
pub fn run_graph(func: &Func, args: &[GraphArg], seed: i64) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_traced(func, args, seed).map(|(out, _)| out)
}

/// The f64 reference of a graph function: every op computes in f64 and rounds once to
/// its result's dtype (each graph value is a tensor of its declared dtype), where
/// [`run_graph`] computes 16- and 8-bit floats in f32 as the kernels do.
pub fn run_graph_f64(func: &Func, args: &[GraphArg], seed: i64) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_with(func, args, seed, true).map(|(out, _)| out)
}

/// [`run_graph`], also returning every intermediate value.
pub fn run_graph_traced(func: &Func, args: &[GraphArg], seed: i64) -> Result<(Vec<GraphArg>, GraphTrace), InterpError> {
    run_graph_with(func, args, seed, false)
}

fn run_graph_with(
    func: &Func,
    args: &[GraphArg],
    seed: i64,
    exact: bool,
) -> Result<(Vec<GraphArg>, GraphTrace), InterpError> {
    let (params, symbols) = bind_params(func, args)?;
    let mut m = Machine { func, vals: vec![None; func.values.len()], symbols, seed, exact };
    for (&p, v) in func.params.iter().zip(params) {
        m.vals[p.0 as usize] = Some(v);
    }
    let mut returned = None;
    for &id in &func.body.ops {
        let op = func.op(id);
        if op.kind == OpKind::Return {
            let mut out = Vec::new();
            for &o in &op.operands {
                let v = m.get(id, o)?;
                out.push(v.to_arg().ok_or_else(|| m.err(id, "a graph function cannot return a token".into()))?);
            }
            returned = Some(out);
            break;
        }
        let results = m.op(id, op)?;
        if results.len() != op.results.len() {
            return Err(m.err(id, format!("gave {} results, the op has {}", results.len(), op.results.len())));
        }
        for (&r, v) in op.results.iter().zip(results) {
            m.vals[r.0 as usize] = Some(v);
        }
    }
    let out = returned.ok_or_else(|| InterpError::new(format!("`{}` has no func.return", func.name)))?;
    Ok((out, GraphTrace { values: m.vals, symbols: m.symbols }))
}

struct Machine<'f> {
    func: &'f Func,
    vals: Vec<Option<Val>>,
    symbols: BTreeMap<String, i64>,
    seed: i64,
    /// Compute in f64 ([`run_graph_f64`]).
    exact: bool,
}

pub(crate) fn bin_op(kind: OpKind) -> Option<BinOp> {
    Some(match kind {
        OpKind::Add => BinOp::Add,
        OpKind::Sub => BinOp::Sub,
        OpKind::Mul => BinOp::Mul,
        OpKind::Div => BinOp::Div,
        OpKind::FloorDiv => BinOp::FloorDiv,
        OpKind::Rem => BinOp::Rem,
        OpKind::Pow => BinOp::Pow,
        OpKind::Max => BinOp::Max,
        OpKind::Min => BinOp::Min,
        OpKind::And => BinOp::And,
        OpKind::Or => BinOp::Or,
        _ => return None,
    })
}

fn float_attr(op: &Op, key: &str) -> Option<f64> {
    op.attr(key).and_then(Attr::as_float)
}

fn bool_attr(op: &Op, key: &str) -> bool {
    op.attr(key) == Some(&Attr::Bool(true))
}

/// Host scalar ops (index and scalar arithmetic, casts, constants) shared by Graph IR and
/// the launch plan; `None` when `op` is not one.
fn host_op(func: &Func, id: OpId, op: &Op, operand: &dyn Fn(usize) -> R<Val>) -> Option<R<Val>> {
    let host_kind = matches!(op.kind, OpKind::Constant | OpKind::Cast | OpKind::Cmp | OpKind::Select)
        || op.kind.is_binary()
        || op.kind.is_unary_math();
    if !host_kind {
        return None;
    }
    let err = |m: String| InterpError::at_op(func, id, m);
    let [r] = op.results[..] else { return None };
    let rty = func.ty(r).clone();
    if !matches!(rty, Type::Index | Type::Scalar(_)) {
        return None;
    }
    let number = |v: &Val| -> R<f64> {
        match v {
            Val::Index(i) => Ok(*i as f64),
            Val::Scalar(_, x) => Ok(*x),
            other => Err(err(format!("expects a scalar operand, got {}", other.describe()))),
        }
    };
    let index = |v: &Val| -> R<i64> {
        match v {
            Val::Index(i) => Ok(*i),
            Val::Scalar(d, x) if d.is_int() || *d == DType::Bool => Ok(*x as i64),
            other => Err(err(format!("expects an index operand, got {}", other.describe()))),
        }
    };
    let to = |x: f64| -> Val {
        match &rty {
            Type::Scalar(d) => Val::Scalar(*d, Domain::of_dtype(*d).convert(x)),
            _ => Val::Index(saturate_index(x)),
        }
    };
    let arity = |n: usize| -> R<()> {
        if op.operands.len() == n {
            Ok(())
        } else {
            Err(err(format!("takes {n} operands, has {}", op.operands.len())))
        }
    };
    let result = || -> R<Val> {
        match op.kind {
            OpKind::Constant => {
                let attr = op.attr("value").ok_or_else(|| err("arith.constant has no `value`".into()))?;
                Ok(match (attr, &rty) {
                    (Attr::Int(v), Type::Index) => Val::Index(*v),
                    (Attr::Bool(b), _) => to(f64::from(u8::from(*b))),
                    (a, _) => to(a.as_float().ok_or_else(|| err(format!("constant value {a:?} is not a number")))?),
                })
            }
            OpKind::Cast => {
                arity(1)?;
                let x = operand(0)?;
                Ok(match (&x, &rty) {
                    (Val::Index(i), Type::Index) => Val::Index(*i),
                    (Val::Scalar(..), Type::Index) => Val::Index(saturate_index(number(&x)?)),
                    _ => to(number(&x)?),
                })
            }
            k if k.is_binary() => {
                arity(2)?;
                let bop = bin_op(k).ok_or_else(|| err("not a binary op".into()))?;
                let (a, b) = (operand(0)?, operand(1)?);
                match &rty {
                    Type::Index => {
                        let f = BinFn::new(bop, Domain::Index).ok_or_else(|| err(format!("{} on index", k.name())))?;
                        f.eval_index(index(&a)?, index(&b)?).map(Val::Index).map_err(|e| err(e.into()))
                    }
                    Type::Scalar(d) => {
                        let f = BinFn::new(bop, Domain::of_dtype(*d))
                            .ok_or_else(|| err(format!("{} is not defined on {d}", k.name())))?;
                        f.eval(number(&a)?, number(&b)?).map(|v| Val::Scalar(*d, v)).map_err(|e| err(e.into()))
                    }
                    _ => Err(err("unreachable result type".into())),
                }
            }
            k if k.is_unary_math() => {
                arity(1)?;
                let uop = UnOp::of(k).ok_or_else(|| err("not a unary op".into()))?;
                let x = operand(0)?;
                match &rty {
                    Type::Index => {
                        let f = UnFn::new(uop, Domain::Index).ok_or_else(|| err(format!("{} on index", k.name())))?;
                        f.eval_index(index(&x)?).map(Val::Index).ok_or_else(|| err(format!("{} on index", k.name())))
                    }
                    Type::Scalar(d) => {
                        let f = UnFn::new(uop, Domain::of_dtype(*d))
                            .ok_or_else(|| err(format!("{} is not defined on {d}", k.name())))?;
                        Ok(Val::Scalar(*d, f.eval(number(&x)?)))
                    }
                    _ => Err(err("unreachable result type".into())),
                }
            }
            OpKind::Cmp => {
                arity(2)?;
                let pred = op
                    .str_attr("pred")
                    .and_then(Pred::parse)
                    .ok_or_else(|| err("arith.cmp needs `pred` = lt|le|gt|ge|eq|ne".into()))?;
                let (a, b) = (operand(0)?, operand(1)?);
                let c = match (&a, &b) {
                    (Val::Index(x), Val::Index(y)) => pred.eval_i64(*x, *y),
                    _ => pred.eval_f64(number(&a)?, number(&b)?),
                };
                Ok(to(f64::from(u8::from(c))))
            }
            OpKind::Select => {
                arity(3)?;
                let c = number(&operand(0)?)? != 0.0;
                let picked = operand(if c { 1 } else { 2 })?;
                Ok(match (&picked, &rty) {
                    (Val::Index(i), Type::Index) => Val::Index(*i),
                    _ => to(number(&picked)?),
                })
            }
            _ => Err(err(format!("`{}` does not give a host scalar", op.kind.name()))),
        }
    };
    Some(result())
}

impl Machine<'_> {
    fn err(&self, id: OpId, message: String) -> InterpError {
        InterpError::at_op(self.func, id, message)
    }

    fn get(&self, id: OpId, v: ValueId) -> R<&Val> {
        self.vals
            .get(v.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.err(id, format!("%{} is used before it is defined", v.0)))
    }

    /// Operand `i` of `op`.
    fn operand(&self, id: OpId, op: &Op, i: usize) -> R<ValueId> {
        op.operands.get(i).copied().ok_or_else(|| self.err(id, format!("has no operand {i}")))
    }

    fn tensor(&self, id: OpId, v: ValueId) -> R<&Tensor> {
        match self.get(id, v)? {
            Val::Tensor(t) => Ok(t),
            other => Err(self.err(id, format!("expects a tensor, %{} is {}", v.0, other.describe()))),
        }
    }

    fn scalar(&self, id: OpId, v: ValueId) -> R<f64> {
        match self.get(id, v)? {
            Val::Scalar(_, x) => Ok(*x),
            Val::Index(i) => Ok(*i as f64),
            other => Err(self.err(id, format!("expects a scalar, %{} is {}", v.0, other.describe()))),
        }
    }

    fn result_dtype(&self, id: OpId, r: ValueId) -> R<DType> {
        match self.func.ty(r) {
            Type::Tensor(t) => Ok(t.dtype),
            other => Err(self.err(id, format!("expects a tensor result, not {other}"))),
        }
    }

    /// The result's dims from its type (every symbol must be bound).
    fn declared_dims(&self, id: OpId, r: ValueId) -> R<Vec<usize>> {
        let ty = self.func.ty(r);
        eval_dims(ty.dims(), &self.symbols).ok_or_else(|| {
            let missing: Vec<String> =
                ty.dims().iter().flat_map(|d| d.symbols()).filter(|s| !self.symbols.contains_key(s)).collect();
            self.err(id, format!("the dims of {ty} are not known (no value for {})", missing.join(", ")))
        })
    }

    /// Checks computed dims against the result type where its dims are known.
    fn check_dims(&self, id: OpId, r: ValueId, dims: &[usize]) -> R<()> {
        let ty = self.func.ty(r);
        match eval_dims(ty.dims(), &self.symbols) {
            Some(d) if d != dims => Err(self.err(id, format!("computes a {dims:?} tensor, its type {ty} is {d:?}"))),
            _ => Ok(()),
        }
    }

    /// A tensor result of `data` with computed `dims` and the result type's dtype; the
    /// values are rounded to the dtype.
    /// Whether composite ops on these dtypes compute in f64: any operand is f64, or the
    /// run is the f64 reference.
    fn wide(&self, dtypes: &[DType]) -> bool {
        self.exact || dtypes.contains(&DType::F64)
    }

    /// The arithmetic of an elementwise op whose result is in `dom`: f64 in the f64
    /// reference (the result is rounded to its dtype afterwards).
    fn compute_domain(&self, dom: Domain) -> Domain {
        match dom {
            Domain::F32(_) if self.exact => Domain::F64,
            d => d,
        }
    }

    fn make(&self, id: OpId, r: ValueId, dims: Vec<usize>, data: Vec<f64>) -> R<Val> {
        if data.len() != numel(&dims) {
            return Err(self.err(id, format!("internal error: {} values for a {dims:?} tensor", data.len())));
        }
        self.check_dims(id, r, &dims)?;
        let dtype = self.result_dtype(id, r)?;
        let dom = Domain::of_dtype(dtype);
        Ok(Val::Tensor(Tensor { dtype, dims, data: data.into_iter().map(|x| dom.convert(x)).collect() }))
    }

    fn op(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let func = self.func;
        let operand = |i: usize| -> R<Val> {
            let v = *op.operands.get(i).ok_or_else(|| self.err(id, format!("has no operand {i}")))?;
            self.get(id, v).cloned()
        };
        if !op.regions.is_empty() {
            return Err(self.err(id, "ops with regions do not occur in graph functions".into()));
        }
        if let Some(v) = host_op(func, id, op, &operand) {
            return Ok(vec![v?]);
        }
        let one = |v: R<Val>| v.map(|v| vec![v]);
        match op.kind {
            OpKind::EffectToken => Ok(vec![Val::Token]),
            OpKind::TensorDim => {
                let t = self.tensor(id, self.operand(id, op, 0)?)?;
                let axis = op.int_attr("axis").ok_or_else(|| self.err(id, "tile.dim needs `axis`".into()))?;
                let d = usize::try_from(axis)
                    .ok()
                    .and_then(|a| t.dims.get(a))
                    .ok_or_else(|| self.err(id, format!("axis {axis} of a rank-{} tensor", t.dims.len())))?;
                Ok(vec![Val::Index(*d as i64)])
            }
            OpKind::Constant => {
                // A tensor constant (host constants are handled above).
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let value = match op.attr("value") {
                    Some(Attr::Bool(b)) => f64::from(u8::from(*b)),
                    Some(a) => a.as_float().ok_or_else(|| self.err(id, format!("constant value {a:?}")))?,
                    None => return Err(self.err(id, "arith.constant has no `value`".into())),
                };
                let dims = self.declared_dims(id, r)?;
                let n = numel(&dims);
                one(self.make(id, r, dims, vec![value; n]))
            }
            OpKind::Fill => {
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let value = float_attr(op, "value").ok_or_else(|| self.err(id, "graph.full needs `value`".into()))?;
                let dims = self.declared_dims(id, r)?;
                let n = numel(&dims);
                one(self.make(id, r, dims, vec![value; n]))
            }
            k if k.is_elementwise() => one(self.elementwise(id, op)),
            OpKind::GBroadcast => one(self.broadcast(id, op)),
            OpKind::Reshape => {
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let x = self.tensor(id, self.operand(id, op, 0)?)?;
                let dims = self.declared_dims(id, r)?;
                if numel(&dims) != x.data.len() {
                    return Err(self.err(id, format!("reshapes {:?} ({} elements) to {dims:?}", x.dims, x.data.len())));
                }
                let data = x.data.clone();
                one(self.make(id, r, dims, data))
            }
            OpKind::GTranspose => one(self.transpose(id, op)),
            OpKind::MatMul => one(self.matmul(id, op)),
            OpKind::GReduce => one(self.reduce(id, op)),
            OpKind::Softmax | OpKind::LogSumExp => one(self.softmax(id, op)),
            OpKind::RmsNorm | OpKind::LayerNorm => one(self.norm(id, op)),
            OpKind::SplitQkv => self.split_qkv(id, op),
            OpKind::MergeHeads => one(self.merge_heads(id, op)),
            OpKind::Dropout => self.dropout(id, op),
            OpKind::FlashAttention => self.flash_attention(id, op),
            OpKind::SchedParam => Err(self.err(
                id,
                "sched.param in Graph IR: a graph function's schedule keys are only bound by its launch plan".into(),
            )),
            other => Err(self.err(id, format!("`{}` is not evaluated by the Graph IR interpreter", other.name()))),
        }
    }

    /// Operands that are not tokens.
    fn data_operands(&self, op: &Op) -> Vec<ValueId> {
        op.operands.iter().copied().filter(|&o| !matches!(self.func.ty(o), Type::Token)).collect()
    }

    fn elementwise(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let name = op.kind.name();
        let dtype = self.result_dtype(id, r)?;
        let dom = Domain::of_dtype(dtype);
        let mut xs = Vec::new();
        for &o in &op.operands {
            let t = self.tensor(id, o).map_err(|_| {
                let got = self.get(id, o).map(Val::describe).unwrap_or_default();
                self.err(
                    id,
                    format!(
                        "{name} on tensors takes tensor operands of one shape (broadcasts are explicit), got {got}"
                    ),
                )
            })?;
            xs.push(t);
        }
        let want = match op.kind {
            OpKind::Select => 3,
            k if k.is_binary() || k == OpKind::Cmp => 2,
            _ => 1,
        };
        if xs.len() != want {
            return Err(self.err(id, format!("takes {want} operands, has {}", xs.len())));
        }
        let dims = xs[0].dims.clone();
        if let Some(t) = xs.iter().find(|t| t.dims != dims) {
            return Err(self.err(id, format!("operands of shapes {dims:?} and {:?} (broadcasts are explicit)", t.dims)));
        }
        let err = |e: &str| self.err(id, e.to_string());
        let mut out = Vec::with_capacity(xs[0].data.len());
        match op.kind {
            k if k.is_binary() => {
                let bop = bin_op(k).ok_or_else(|| err("not a binary op"))?;
                let f = BinFn::new(bop, self.compute_domain(dom))
                    .ok_or_else(|| err(&format!("{name} is not defined on {dtype}")))?;
                f.tile(&xs[0].data, &xs[1].data, &mut out).map_err(err)?;
            }
            k if k.is_unary_math() => {
                let uop = UnOp::of(k).ok_or_else(|| err("not a unary op"))?;
                let f = UnFn::new(uop, self.compute_domain(dom))
                    .ok_or_else(|| err(&format!("{name} is not defined on {dtype}")))?;
                f.tile(&xs[0].data, &mut out);
            }
            OpKind::Cmp => {
                let pred = op
                    .str_attr("pred")
                    .and_then(Pred::parse)
                    .ok_or_else(|| err("arith.cmp needs `pred` = lt|le|gt|ge|eq|ne"))?;
                out.extend(xs[0].data.iter().zip(&xs[1].data).map(|(&a, &b)| f64::from(u8::from(pred.eval_f64(a, b)))));
            }
            OpKind::Select => {
                out.extend(
                    (0..xs[0].data.len()).map(|e| if xs[0].data[e] != 0.0 { xs[1].data[e] } else { xs[2].data[e] }),
                );
            }
            OpKind::Cast => {
                let saturate = policy::saturates(op);
                out.extend(xs[0].data.iter().map(|&x| dom.convert_with(x, saturate)))
            }
            other => return Err(err(&format!("`{}` is not elementwise", other.name()))),
        }
        self.make(id, r, dims, out)
    }

    fn broadcast(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let dims = self.declared_dims(id, r)?;
        match self.get(id, self.operand(id, op, 0)?)? {
            Val::Tensor(x) => {
                let strides = broadcast_strides(&x.dims, &dims)
                    .ok_or_else(|| self.err(id, format!("cannot broadcast {:?} to {dims:?}", x.dims)))?;
                let data = gather(&x.data, &dims, &strides);
                self.make(id, r, dims, data)
            }
            Val::Scalar(_, v) => {
                let n = numel(&dims);
                self.make(id, r, dims, vec![*v; n])
            }
            Val::Index(v) => {
                let n = numel(&dims);
                self.make(id, r, dims, vec![*v as f64; n])
            }
            Val::Token => Err(self.err(id, "cannot broadcast a token".into())),
        }
    }

    fn transpose(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let rank = x.dims.len();
        let perm: Vec<usize> = match op.attr("perm") {
            Some(Attr::Ints(p)) => p.iter().map(|&a| usize::try_from(a).unwrap_or(usize::MAX)).collect(),
            _ => return Err(self.err(id, "graph.transpose needs `perm`".into())),
        };
        let mut seen = vec![false; rank];
        let valid = perm.len() == rank && perm.iter().all(|&a| a < rank && !std::mem::replace(&mut seen[a], true));
        if !valid {
            return Err(self.err(id, format!("{perm:?} is not a permutation of the {rank} dims")));
        }
        let src = row_major_strides(&x.dims);
        let dims: Vec<usize> = perm.iter().map(|&a| x.dims[a]).collect();
        let strides: Vec<usize> = perm.iter().map(|&a| src[a]).collect();
        let data = gather(&x.data, &dims, &strides);
        self.make(id, r, dims, data)
    }

    fn matmul(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let (a, b) = (self.tensor(id, self.operand(id, op, 0)?)?, self.tensor(id, self.operand(id, op, 1)?)?);
        let (ra, rb) = (a.dims.len(), b.dims.len());
        if ra < 2 || rb < 2 {
            return Err(
                self.err(id, format!("graph.matmul of {:?} and {:?}: both need rank 2 or more", a.dims, b.dims))
            );
        }
        let (m, k, k2, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 2], b.dims[rb - 1]);
        if k != k2 {
            return Err(self.err(id, format!("graph.matmul of {:?} and {:?}: inner dims differ", a.dims, b.dims)));
        }
        let (ab, bb) = (&a.dims[..ra - 2], &b.dims[..rb - 2]);
        let batch = broadcast_shapes(ab, bb).ok_or_else(|| {
            self.err(id, format!("graph.matmul of {:?} and {:?}: batch dims do not broadcast", a.dims, b.dims))
        })?;
        let dtype = self.result_dtype(id, r)?;
        let dom = Domain::of_dtype(dtype);
        // Batch offsets (in matrices) of each operand for every batch index.
        let strides = |x: &[usize]| {
            broadcast_strides(x, &batch).ok_or_else(|| self.err(id, format!("batch dims {x:?} vs {batch:?}")))
        };
        let (sa, sb) = (strides(ab)?, strides(bb)?);
        let a_off: Vec<usize> = Offsets::new(&batch, &sa).collect();
        let b_off: Vec<usize> = Offsets::new(&batch, &sb).collect();
        let mut out = Vec::with_capacity(numel(&batch) * m * n);
        let int = a.dtype.is_int() && b.dtype.is_int();
        for (&ao, &bo) in a_off.iter().zip(&b_off) {
            let am = &a.data[ao * m * k..(ao + 1) * m * k];
            let bm = &b.data[bo * k * n..(bo + 1) * k * n];
            if int {
                matmul_int(am, bm, (m, k, n), dom, &mut out);
            } else if let Some(step) = self.step(op) {
                matmul_stepped(am, bm, (m, k, n), dom, step, &mut out);
            } else if self.wide(&[a.dtype, b.dtype]) {
                matmul_float::<f64>(am, bm, (m, k, n), dom, &mut out);
            } else {
                matmul_float::<f32>(am, bm, (m, k, n), dom, &mut out);
            }
        }
        let mut dims = batch;
        dims.extend([m, n]);
        self.make(id, r, dims, out)
    }

    fn reduce(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let rank = x.dims.len();
        let kind = match op.str_attr("kind") {
            Some("sum") => ReduceKind::Sum,
            Some("mean") => ReduceKind::Mean,
            Some("max") => ReduceKind::Max,
            Some("min") => ReduceKind::Min,
            other => return Err(self.err(id, format!("graph.reduce kind {other:?} (sum, mean, max or min)"))),
        };
        let mut axes: Vec<usize> = match op.attr("axes") {
            Some(Attr::Ints(a)) => a
                .iter()
                .map(|&ax| {
                    let ax = if ax < 0 { ax + rank as i64 } else { ax };
                    usize::try_from(ax)
                        .ok()
                        .filter(|&a| a < rank)
                        .ok_or_else(|| self.err(id, format!("axis {ax} of a rank-{rank} tensor")))
                })
                .collect::<R<_>>()?,
            None => (0..rank).collect(),
            Some(other) => return Err(self.err(id, format!("graph.reduce `axes` is {other:?}"))),
        };
        axes.sort_unstable();
        axes.dedup();
        let keepdim = bool_attr(op, "keepdim");
        let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).map(|a| x.dims[a]).collect();
        let kept_strides = row_major_strides(&kept);
        let mut out_strides = vec![0; rank];
        let mut next = 0;
        for (a, s) in out_strides.iter_mut().enumerate() {
            if !axes.contains(&a) {
                *s = kept_strides[next];
                next += 1;
            }
        }
        let targets: Vec<usize> = Offsets::new(&x.dims, &out_strides).collect();
        let count: usize = axes.iter().map(|&a| x.dims[a]).product();
        let out_len = numel(&kept);
        let data = if x.dtype.is_int() || x.dtype == DType::Bool {
            reduce_int(&x.data, &targets, out_len, count, kind)
        } else if let Some(step) = self.step(op).filter(|_| matches!(kind, ReduceKind::Sum | ReduceKind::Mean)) {
            // `@accum(T)`: the sums in element order, rounded to T at every step.
            let mut acc = vec![0f32; out_len];
            for (&v, &o) in x.data.iter().zip(&targets) {
                acc[o] = step.round(acc[o] + v as f32) as f32;
            }
            let mean = kind == ReduceKind::Mean;
            acc.into_iter().map(|s| if mean { (s / count as f32) as f64 } else { s as f64 }).collect()
        } else if self.wide(&[x.dtype]) {
            reduce_float::<f64>(&x.data, &targets, out_len, count, kind)
        } else {
            reduce_float::<f32>(&x.data, &targets, out_len, count, kind)
        };
        let dims =
            if keepdim { (0..rank).map(|a| if axes.contains(&a) { 1 } else { x.dims[a] }).collect() } else { kept };
        self.make(id, r, dims, data)
    }

    /// The rounding after every accumulation step of `@accum(T)` (`acc = T`, T narrower
    /// than f32) in the kernels' arithmetic; none in the f64 reference.
    fn step(&self, op: &Op) -> Option<Rounder> {
        policy::acc(op).filter(|&t| !self.exact && policy::rounds_each_step(t)).map(Rounder::new)
    }

    fn axis(&self, id: OpId, op: &Op, rank: usize) -> R<usize> {
        let axis = op.int_attr("axis").unwrap_or(-1);
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        usize::try_from(a)
            .ok()
            .filter(|&a| a < rank)
            .ok_or_else(|| self.err(id, format!("axis {axis} of a rank-{rank} tensor")))
    }

    fn float_tensor(&self, id: OpId, v: ValueId) -> R<&Tensor> {
        let t = self.tensor(id, v)?;
        if !t.dtype.is_float() {
            return Err(self.err(id, format!("{} takes float tensors, not {}", self.func.op(id).kind.name(), t.dtype)));
        }
        Ok(t)
    }

    fn softmax(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.float_tensor(id, self.operand(id, op, 0)?)?;
        let axis = self.axis(id, op, x.dims.len())?;
        let shape = (numel(&x.dims[..axis]), x.dims[axis], numel(&x.dims[axis + 1..]));
        let lse = op.kind == OpKind::LogSumExp;
        let data = if self.wide(&[x.dtype]) {
            softmax_lines::<f64>(&x.data, shape, lse)
        } else {
            softmax_lines::<f32>(&x.data, shape, lse)
        };
        let dims = if lse {
            let removed: Vec<usize> = x.dims.iter().enumerate().filter(|(a, _)| *a != axis).map(|(_, &d)| d).collect();
            // The result type may keep the axis as size 1.
            match eval_dims(self.func.ty(r).dims(), &self.symbols) {
                Some(d) if numel(&d) == numel(&removed) && d.len() == x.dims.len() => d,
                _ => removed,
            }
        } else {
            x.dims.clone()
        };
        self.make(id, r, dims, data)
    }

    fn norm(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let layer = op.kind == OpKind::LayerNorm;
        let x = self.float_tensor(id, self.operand(id, op, 0)?)?;
        let cols = *x.dims.last().ok_or_else(|| self.err(id, "a norm of a rank-0 tensor".into()))?;
        let rows = numel(&x.dims) / cols.max(1);
        let affine: Vec<&str> =
            op.str_attr("affine").map(|s| s.split(',').map(str::trim).collect()).unwrap_or_default();
        if affine.len() + 1 != op.operands.len() {
            return Err(
                self.err(id, format!("has {} operands, its `affine` names {:?} besides x", op.operands.len(), affine))
            );
        }
        let (mut weight, mut bias) = (None, None);
        let mut dtypes = vec![x.dtype];
        for (role, &v) in affine.iter().zip(&op.operands[1..]) {
            let t = self.float_tensor(id, v)?;
            if t.dims != [cols] {
                return Err(self.err(id, format!("the {role} is {:?}, the last dim of x is {cols}", t.dims)));
            }
            dtypes.push(t.dtype);
            match *role {
                "weight" if !layer || weight.is_none() => weight = Some(&t.data[..]),
                "bias" if layer => bias = Some(&t.data[..]),
                other => {
                    return Err(
                        self.err(id, format!("`affine` names `{other}`, which {} does not take here", op.kind.name()))
                    )
                }
            }
        }
        let eps = float_attr(op, "eps").unwrap_or(if layer { 1e-5 } else { 1e-6 });
        let data = if self.wide(&dtypes) {
            norm_rows::<f64>(&x.data, (rows, cols), layer, eps, weight, bias)
        } else {
            norm_rows::<f32>(&x.data, (rows, cols), layer, eps, weight, bias)
        };
        let dims = x.dims.clone();
        self.make(id, r, dims, data)
    }

    fn heads(&self, id: OpId, v: ValueId) -> R<usize> {
        let h = match self.get(id, v)? {
            Val::Index(h) => *h,
            Val::Scalar(d, h) if d.is_int() => *h as i64,
            other => return Err(self.err(id, format!("the number of heads is {}", other.describe()))),
        };
        usize::try_from(h).ok().filter(|&h| h > 0).ok_or_else(|| self.err(id, format!("{h} heads")))
    }

    fn split_qkv(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        if op.results.len() != 3 || op.operands.len() != 2 {
            return Err(self.err(id, "graph.split_qkv takes qkv and heads and gives q, k, v".into()));
        }
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let h = self.heads(id, self.operand(id, op, 1)?)?;
        let [b, s, e] = x.dims[..] else {
            return Err(self.err(id, format!("splits a {:?} tensor, not [B, S, 3*H*Dh]", x.dims)));
        };
        if e % (3 * h) != 0 {
            return Err(self.err(id, format!("the last dim {e} is not a multiple of 3 x {h} heads")));
        }
        let dh = e / (3 * h);
        let mut out = Vec::new();
        for (part, &r) in op.results.iter().enumerate() {
            let mut data = Vec::with_capacity(b * h * s * dh);
            for bi in 0..b {
                for hi in 0..h {
                    for si in 0..s {
                        let base = (bi * s + si) * e + part * h * dh + hi * dh;
                        data.extend_from_slice(&x.data[base..base + dh]);
                    }
                }
            }
            out.push(self.make(id, r, vec![b, h, s, dh], data)?);
        }
        Ok(out)
    }

    fn merge_heads(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let [b, h, s, dh] = x.dims[..] else {
            return Err(self.err(id, format!("merges a {:?} tensor, not [B, H, S, Dh]", x.dims)));
        };
        let mut data = Vec::with_capacity(x.data.len());
        for bi in 0..b {
            for si in 0..s {
                for hi in 0..h {
                    let base = ((bi * h + hi) * s + si) * dh;
                    data.extend_from_slice(&x.data[base..base + dh]);
                }
            }
        }
        self.make(id, r, vec![b, s, h * dh], data)
    }

    /// The dropout probability operand: an f32 in [0, 1].
    fn probability(&self, id: OpId, v: ValueId) -> R<f32> {
        let p = self.scalar(id, v)? as f32;
        if !(0.0..=1.0).contains(&p) {
            return Err(self.err(id, format!("the dropout probability {p} is outside [0, 1]")));
        }
        Ok(p)
    }

    fn stream(&self, id: OpId, op: &Op) -> R<i64> {
        op.int_attr("stream").ok_or_else(|| self.err(id, format!("{} with dropout needs `stream`", op.kind.name())))
    }

    fn dropout(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data_ops = self.data_operands(op);
        let [xv, pv] = data_ops[..] else {
            return Err(self.err(id, "graph.dropout takes x, p and an optional token".into()));
        };
        let Some(&r) = op.results.first() else { return Err(self.err(id, "needs a result".into())) };
        let x = self.tensor(id, xv)?;
        let p = self.probability(id, pv)?;
        let seed = stream_seed(self.seed, self.stream(id, op)?);
        let cols = x.dims.last().copied().unwrap_or(1).max(1);
        let mut data = Vec::with_capacity(x.data.len());
        let f64_math = self.wide(&[x.dtype]);
        let keep_scale = 1.0f32 - p;
        for (e, &v) in x.data.iter().enumerate() {
            let keep = uniform(seed, &[(e / cols) as i64, (e % cols) as i64]) >= p;
            data.push(match (keep, f64_math) {
                (false, _) => 0.0,
                (true, true) => v / (1.0 - p as f64),
                (true, false) => (v as f32 / keep_scale) as f64,
            });
        }
        let dims = x.dims.clone();
        let mut out = vec![self.make(id, r, dims, data)?];
        out.extend(op.results[1..].iter().map(|_| Val::Token));
        Ok(out)
    }

    fn flash_attention(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data_ops = self.data_operands(op);
        if !(3..=4).contains(&data_ops.len()) {
            return Err(self.err(id, "graph.flash_attention takes q, k, v, an optional p and token".into()));
        }
        let Some(&r) = op.results.first() else { return Err(self.err(id, "needs a result".into())) };
        let (q, k, v) = (
            self.float_tensor(id, data_ops[0])?,
            self.float_tensor(id, data_ops[1])?,
            self.float_tensor(id, data_ops[2])?,
        );
        let rank = q.dims.len();
        if rank < 2 || k.dims.len() != rank || v.dims.len() != rank {
            return Err(self.err(id, format!("attention of {:?}, {:?}, {:?}", q.dims, k.dims, v.dims)));
        }
        let lead = &q.dims[..rank - 2];
        let shape = AttnShape {
            bh: numel(lead),
            sq: q.dims[rank - 2],
            sk: k.dims[rank - 2],
            d: q.dims[rank - 1],
            dv: v.dims[rank - 1],
        };
        if &k.dims[..rank - 2] != lead
            || &v.dims[..rank - 2] != lead
            || k.dims[rank - 1] != shape.d
            || v.dims[rank - 2] != shape.sk
        {
            return Err(self.err(
                id,
                format!("q {:?}, k {:?}, v {:?}: need [.., Sq, D], [.., Sk, D], [.., Sk, Dv]", q.dims, k.dims, v.dims),
            ));
        }
        let causal = bool_attr(op, "causal");
        let scale = match float_attr(op, "scale") {
            Some(s) => s,
            None if self.wide(&[q.dtype, k.dtype, v.dtype]) => 1.0 / (shape.d as f64).sqrt(),
            // The stdlib kernel's `1.0 / sqrt(float(D))` in f32.
            None => (1.0f32 / (shape.d as f32).sqrt()) as f64,
        };
        let dropout = match data_ops.get(3) {
            Some(&pv) => Some((stream_seed(self.seed, self.stream(id, op)?), self.probability(id, pv)?)),
            None => None,
        };
        let data = if self.wide(&[q.dtype, k.dtype, v.dtype]) {
            attention::<f64>((&q.data, &k.data, &v.data), shape, causal, scale, dropout)
        } else {
            attention::<f32>((&q.data, &k.data, &v.data), shape, causal, scale, dropout)
        };
        let mut dims = q.dims.clone();
        dims[rank - 1] = shape.dv;
        let mut out = vec![self.make(id, r, dims, data)?];
        out.extend(op.results[1..].iter().map(|_| Val::Token));
        Ok(out)
    }
}

// ----- the launch plan -------------------------------------------------------------------

/// Runs one Tile IR kernel of a launch plan: the interpreter, the CPU JIT or a GPU.
pub trait KernelExecutor {
    /// Runs `tile_ir` over its whole grid on `args` (one per parameter); the tensors it
    /// writes are updated in `args`.
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String>;
}

impl KernelExecutor for Box<dyn KernelExecutor> {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        (**self).launch(tile_ir, args)
    }
}

/// The Tile IR interpreter as a [`KernelExecutor`].
#[derive(Clone, Debug, Default)]
pub struct InterpExecutor {
    pub options: Options,
    /// Kernels launched so far.
    pub launches: usize,
}

impl KernelExecutor for InterpExecutor {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        self.launches += 1;
        super::run_kernel_with(tile_ir, args, &self.options).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// A value of the launch plan: a host scalar, or a view (dims) of a stored tensor.
#[derive(Clone, Debug)]
enum PlanVal {
    Host(Val),
    View { storage: usize, dims: Vec<usize> },
}

/// Runs the launch plan of the graph function `key` (its Schedule IR and generated
/// kernels, `tessera_passes::plan_module`) on `args`: host scalar math, buffers, views and
/// each `sched.kernel` launched through `executor` with the kernel's Tile IR for
/// `target` in its default configuration for the launch's shapes. Returns the returned
/// values in order. A kernel gets copies of its tensors; the ones it writes are copied
/// back into their storage after the launch.
pub fn run_plan(
    db: &dyn Db,
    key: FnKey<'_>,
    target: Target,
    args: &[GraphArg],
    seed: i64,
    executor: &mut dyn KernelExecutor,
) -> Result<Vec<GraphArg>, InterpError> {
    let lower = |what: &str, e: tessera_passes::LowerError| InterpError::new(format!("{what}: {}", e.message));
    let (plan, module) = tessera_passes::plan_module(db, key).map_err(|e| lower("no launch plan", e))?;
    let func: &Func = &plan.schedule;
    let (params, symbols) = bind_params(func, args)?;
    let mut storage: Vec<HostTensor> = Vec::new();
    let mut vals: Vec<Option<PlanVal>> = vec![None; func.values.len()];
    for ((&p, v), a) in func.params.iter().zip(params).zip(args) {
        vals[p.0 as usize] = Some(match (v, a) {
            (Val::Tensor(_), Arg::Tensor(h)) => {
                storage.push(h.clone());
                PlanVal::View { storage: storage.len() - 1, dims: h.dims.clone() }
            }
            (v, _) => PlanVal::Host(v),
        });
    }
    let mut kernels: HashMap<(String, BTreeMap<String, i64>), Arc<Func>> = HashMap::new();
    let err = |id: OpId, m: String| InterpError::at_op(func, id, m);
    for &id in &func.body.ops {
        let op = func.op(id);
        let get = |v: ValueId| -> R<&PlanVal> {
            vals.get(v.0 as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| err(id, format!("%{} is used before it is defined", v.0)))
        };
        let host = |i: usize| -> R<Val> {
            let v = *op.operands.get(i).ok_or_else(|| err(id, format!("has no operand {i}")))?;
            match get(v)? {
                PlanVal::Host(h) => Ok(h.clone()),
                PlanVal::View { .. } => Err(err(id, format!("expects a host scalar, %{} is a tensor", v.0))),
            }
        };
        let result = || -> R<usize> {
            match op.results[..] {
                [r] => Ok(r.0 as usize),
                _ => Err(err(id, format!("has {} results, not one", op.results.len()))),
            }
        };
        if let Some(v) = host_op(func, id, op, &host) {
            vals[result()?] = Some(PlanVal::Host(v?));
            continue;
        }
        match op.kind {
            OpKind::SchedDim => {
                let dims = match op.attr("dims") {
                    Some(Attr::Dims(d)) if d.len() == 1 => d,
                    _ => return Err(err(id, "sched.dim needs one dim in `dims`".into())),
                };
                let v = dims[0].eval(&|s| symbols.get(s).copied()).ok_or_else(|| {
                    err(id, format!("no value for {} (bound by the arguments: {symbols:?})", dims[0]))
                })?;
                vals[result()?] = Some(PlanVal::Host(Val::Index(v)));
            }
            OpKind::SchedParam => match op.str_attr("key") {
                Some("seed") => vals[result()?] = Some(PlanVal::Host(Val::Index(seed))),
                other => {
                    return Err(err(id, format!("sched.param {other:?}: only the run's `seed` is a plan parameter")))
                }
            },
            OpKind::Buffer => {
                let r = ValueId(result()? as u32);
                let (Type::Tensor(t), Some(dims)) = (func.ty(r), eval_dims(func.ty(r).dims(), &symbols)) else {
                    return Err(err(id, format!("a buffer of {} with unknown dims", func.ty(r))));
                };
                storage.push(HostTensor::zeros(t.dtype, &dims));
                vals[r.0 as usize] = Some(PlanVal::View { storage: storage.len() - 1, dims });
            }
            OpKind::Reshape => {
                let r = ValueId(result()? as u32);
                let src = *op.operands.first().ok_or_else(|| err(id, "graph.reshape needs an operand".into()))?;
                let PlanVal::View { storage: s, dims: from } = get(src)?.clone() else {
                    return Err(err(id, "graph.reshape of a host scalar".into()));
                };
                let dims = eval_dims(func.ty(r).dims(), &symbols)
                    .ok_or_else(|| err(id, format!("a view of {} with unknown dims", func.ty(r))))?;
                if numel(&dims) != numel(&from) {
                    return Err(err(id, format!("a view of {from:?} as {dims:?}")));
                }
                vals[r.0 as usize] = Some(PlanVal::View { storage: s, dims });
            }
            OpKind::Kernel => {
                let callee = op.str_attr("callee").ok_or_else(|| err(id, "sched.kernel needs `callee`".into()))?;
                let mut kargs = Vec::new();
                let mut views = Vec::new();
                for &o in &op.operands {
                    match get(o)? {
                        PlanVal::View { storage: s, dims } => {
                            let t = &storage[*s];
                            kargs.push(Arg::Tensor(HostTensor {
                                dtype: t.dtype,
                                dims: dims.clone(),
                                data: t.data.clone(),
                            }));
                            views.push(Some(*s));
                        }
                        PlanVal::Host(h) => {
                            kargs.push(h.to_arg().ok_or_else(|| err(id, "passes a token to a kernel".into()))?);
                            views.push(None);
                        }
                    }
                }
                let kkey = tessera_passes::module_function(db, module, callee)
                    .ok_or_else(|| err(id, format!("the generated module has no kernel `{callee}`")))?;
                let ksymbols = kernel_symbols(db, kkey, &kargs).map_err(|m| err(id, format!("`{callee}`: {m}")))?;
                let cache_key = (callee.to_string(), ksymbols.clone());
                let tile = match kernels.get(&cache_key) {
                    Some(t) => t.clone(),
                    None => {
                        let (config, _) = tessera_passes::default_config(db, kkey, &ksymbols)
                            .map_err(|e| err(id, format!("`{callee}` has no configuration: {}", e.message)))?;
                        let t = tessera_passes::tile_ir(db, kkey, config, target)
                            .clone()
                            .map_err(|e| err(id, format!("`{callee}` for {}: {}", target.name(), e.message)))?;
                        kernels.insert(cache_key, t.clone());
                        t
                    }
                };
                executor.launch(&tile, &mut kargs).map_err(|m| err(id, format!("launching `{callee}`: {m}")))?;
                for ((a, view), access) in kargs.into_iter().zip(views).zip(param_access(&tile)) {
                    if let (Arg::Tensor(t), Some(s), true) = (a, view, access.written) {
                        if t.data.len() != storage[s].data.len() {
                            return Err(err(id, format!("`{callee}` resized a tensor argument")));
                        }
                        storage[s].data = t.data;
                    }
                }
            }
            OpKind::Return => {
                let mut out = Vec::new();
                for &o in &op.operands {
                    out.push(match get(o)? {
                        PlanVal::View { storage: s, dims } => {
                            let t = &storage[*s];
                            Arg::Tensor(HostTensor { dtype: t.dtype, dims: dims.clone(), data: t.data.clone() })
                        }
                        PlanVal::Host(h) => h.to_arg().ok_or_else(|| err(id, "returns a token".into()))?,
                    });
                }
                return Ok(out);
            }
            other => return Err(err(id, format!("`{}` is not an op of a launch plan", other.name()))),
        }
    }
    Err(InterpError::new(format!("the launch plan of `{}` has no func.return", func.name)))
}

/// The dim symbols of a generated kernel's parameters bound by the launch's arguments.
fn kernel_symbols(db: &dyn Db, kkey: FnKey<'_>, args: &[Arg]) -> Result<BTreeMap<String, i64>, String> {
    let graph = tessera_passes::graph_ir(db, kkey).clone().map_err(|e| e.message)?;
    if graph.params.len() != args.len() {
        return Err(format!("takes {} arguments, the plan passes {}", graph.params.len(), args.len()));
    }
    let mut symbols = BTreeMap::new();
    for (&p, a) in graph.params.iter().zip(args) {
        if let (Type::Tensor(t), Arg::Tensor(h)) = (graph.ty(p), a) {
            if t.dims.len() != h.dims.len() {
                return Err(format!("a rank-{} parameter gets a {:?} tensor", t.dims.len(), h.dims));
            }
            for (d, &size) in t.dims.iter().zip(&h.dims) {
                if let Some(s) = d.as_sym() {
                    if let Some(old) = symbols.insert(s.to_string(), size as i64) {
                        if old != size as i64 {
                            return Err(format!("`{s}` is both {old} and {size}"));
                        }
                    }
                }
            }
        }
    }
    Ok(symbols)
}
