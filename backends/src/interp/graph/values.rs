//! Values of the Graph IR interpreter (tensors stored as f64 of any dtype, scalars,
//! tokens), strides and broadcasting.

use tessera_frontend::check::DType;

use crate::tensor::{Arg, HostTensor};

/// A whole tensor: row-major values exactly representable in `dtype`.
#[derive(Clone, PartialEq, Debug)]
pub(super) struct Tensor {
    pub(super) dtype: DType,
    pub(super) dims: Vec<usize>,
    pub(super) data: Vec<f64>,
}

impl Tensor {
    pub(super) fn from_host(t: &HostTensor) -> Tensor {
        Tensor { dtype: t.dtype, dims: t.dims.clone(), data: t.to_f64() }
    }

    pub(super) fn to_host(&self) -> HostTensor {
        HostTensor::from_f64(self.dtype, &self.dims, &self.data)
    }
}

#[derive(Clone, PartialEq, Debug)]
pub(super) enum Val {
    Tensor(Tensor),
    Index(i64),
    /// A host scalar of a dtype (its value exactly representable in it).
    Scalar(DType, f64),
    Token,
}

impl Val {
    pub(super) fn to_arg(&self) -> Option<Arg> {
        match self {
            Val::Tensor(t) => Some(Arg::Tensor(t.to_host())),
            Val::Index(v) => Some(Arg::Index(*v)),
            Val::Scalar(d, v) => Some(Arg::Scalar(*d, *v)),
            Val::Token => None,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Val::Tensor(t) => format!("a {:?} {} tensor", t.dims, t.dtype),
            Val::Index(_) => "an index".into(),
            Val::Scalar(d, _) => format!("a {d} scalar"),
            Val::Token => "a token".into(),
        }
    }
}

pub(super) fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

pub(super) fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    strides
}

/// The offsets `Σ idx[d] * strides[d]` of every index of `dims`, in row-major order.
pub(super) struct Offsets<'a> {
    pub(super) dims: &'a [usize],
    pub(super) strides: &'a [usize],
    pub(super) idx: Vec<usize>,
    pub(super) offset: usize,
    pub(super) left: usize,
}

impl<'a> Offsets<'a> {
    pub(super) fn new(dims: &'a [usize], strides: &'a [usize]) -> Offsets<'a> {
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
pub(super) fn gather(src: &[f64], dims: &[usize], strides: &[usize]) -> Vec<f64> {
    Offsets::new(dims, strides).map(|o| src[o]).collect()
}

/// NumPy broadcasting of two shapes (trailing dims aligned), `None` when incompatible.
pub(super) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
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
pub(super) fn broadcast_strides(from: &[usize], to: &[usize]) -> Option<Vec<usize>> {
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
