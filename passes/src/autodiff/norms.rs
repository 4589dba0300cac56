//! The backward rules of the normalizations along one axis: `softmax_safe`,
//! `layernorm_safe` and `rmsnorm_safe` (with their optional weight and bias). Each is
//! written with the primitive ops the rest of the backward graph uses (elementwise ops,
//! sums along the axis broadcast back over it), so it is planned into kernels like them.
//! The statistics are recomputed from the forward op's input, in its dtype, as the
//! forward op computes them.
//!
//! With `y = softmax(x)`: `dx = y · (g − Σ g·y)`, the sum along the axis.
//! With `x̂ = (x − μ)·r`, `r = 1/√(var + eps)` (layernorm; rmsnorm has no `μ` and uses the
//! mean square for `var`) and `h = g·w` (`g` without a weight):
//! `dx = r · (h − mean(h) − x̂ · mean(h·x̂))` (rmsnorm: without `mean(h)`),
//! `dw = Σ_rows g·x̂`, `db = Σ_rows g`.

use tessera_frontend::check::{DType, Dim};

use super::{tensor_type, Ad, R};
use crate::ir::*;

impl Ad<'_, '_> {
    /// `sum(v, axes, keepdim=True)` broadcast back to `v`'s shape.
    pub(super) fn sum_back(&mut self, v: ValueId, axes: &[usize]) -> ValueId {
        let t = tensor_type(&self.ty(v)).cloned().expect("a tensor");
        let kept: Vec<Dim> =
            t.dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect();
        let summed = self.op(
            OpKind::GReduce,
            vec![v],
            Type::Tensor(TensorType { dims: kept, ..t.clone() }),
            [
                vec![
                    ("kind", Attr::Str("sum".into())),
                    ("axes", Attr::Ints(axes.iter().map(|&a| a as i64).collect())),
                    ("keepdim", Attr::Bool(false)),
                ],
                policy::acc_attrs(&[&Type::Tensor(t.clone())]),
            ]
            .concat(),
        );
        let keep: Vec<Dim> = t
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&i) { Dim::constant(1) } else { d.clone() })
            .collect();
        let k = self.reshape(summed, keep);
        self.op(OpKind::GBroadcast, vec![k], Type::Tensor(t), vec![])
    }

    /// `sum(v, axis, keepdim=True)` broadcast back to `v`'s shape.
    pub(super) fn line_sum(&mut self, v: ValueId, axis: usize) -> ValueId {
        self.sum_back(v, &[axis])
    }

    /// `mean(v, axis, keepdim=True)` broadcast back to `v`'s shape.
    fn line_mean(&mut self, v: ValueId, axis: usize) -> ValueId {
        let s = self.line_sum(v, axis);
        let t = self.ty(v);
        let n = self.count(v, &[axis as i64], t.dtype().unwrap_or(DType::F32));
        let nb = self.op(OpKind::GBroadcast, vec![n], t, vec![]);
        self.bin(OpKind::Div, s, nb)
    }

    /// The forward op's axis, counted from the front.
    fn axis_of(&self, f_op: &Op, rank: usize) -> R<usize> {
        let axis = f_op.int_attr("axis").unwrap_or(-1);
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        usize::try_from(a).ok().filter(|&a| a < rank).map_or_else(
            || self.err(format!("grad through `{}` along axis {axis} of a rank-{rank} tensor", f_op.kind.name())),
            Ok,
        )
    }

    /// `y = softmax(x, axis)`: `dx = y · (g − Σ g·y)`.
    pub(super) fn softmax_rule(&mut self, f_op: &Op, g: ValueId) -> R<()> {
        let (x, y) = (f_op.operands[0], f_op.results[0]);
        let rank = self.ty(x).dims().len();
        let axis = self.axis_of(f_op, rank)?;
        let gy = self.bin(OpKind::Mul, g, y);
        let s = self.line_sum(gy, axis);
        let centered = self.bin(OpKind::Sub, g, s);
        let d = self.bin(OpKind::Mul, y, centered);
        self.accumulate(x, d);
        Ok(())
    }

    /// `layernorm_safe` and `rmsnorm_safe` over the last axis, with the weight and bias
    /// the op's `affine` attribute names.
    pub(super) fn norm_rule(&mut self, f_op: &Op, g: ValueId) -> R<()> {
        let layer = f_op.kind == OpKind::LayerNorm;
        let x = f_op.operands[0];
        let xt = self.ty(x);
        let rank = xt.dims().len();
        if rank == 0 {
            return self.err(format!("grad through `{}` of a rank-0 tensor", f_op.kind.name()));
        }
        let last = rank - 1;
        let role = |name: &str| f_op.affine_index(name).map(|i| f_op.operands[i]);
        let (weight, bias) = (role("weight"), role("bias"));
        let eps = f_op.attr("eps").and_then(Attr::as_float).unwrap_or(if layer { 1e-5 } else { 1e-6 });

        // The forward statistics, again.
        let centered = if layer {
            let mu = self.line_mean(x, last);
            self.bin(OpKind::Sub, x, mu)
        } else {
            x
        };
        let sq = self.bin(OpKind::Mul, centered, centered);
        let var = self.line_mean(sq, last);
        let eps = self.constant(eps, &xt);
        let var_eps = self.bin(OpKind::Add, var, eps);
        let rstd = self.op(OpKind::Rsqrt, vec![var_eps], xt.clone(), vec![]);
        let xhat = self.bin(OpKind::Mul, centered, rstd);

        // dx
        let h = match weight {
            Some(w) => {
                let wb = self.op(OpKind::GBroadcast, vec![w], xt.clone(), vec![]);
                self.bin(OpKind::Mul, g, wb)
            }
            None => g,
        };
        let hx = self.bin(OpKind::Mul, h, xhat);
        let mean_hx = self.line_mean(hx, last);
        let along = self.bin(OpKind::Mul, xhat, mean_hx);
        let mut inner = self.bin(OpKind::Sub, h, along);
        if layer {
            let mean_h = self.line_mean(h, last);
            inner = self.bin(OpKind::Sub, inner, mean_h);
        }
        let dx = self.bin(OpKind::Mul, rstd, inner);
        self.accumulate(x, dx);

        // dw and db: summed over every row.
        for (param, grad_of) in [(weight, Some(xhat)), (bias, None)] {
            let Some(p) = param.filter(|&p| self.is_float_tensor(p)) else {
                continue;
            };
            let per_row = match grad_of {
                Some(xhat) => self.bin(OpKind::Mul, g, xhat),
                None => g,
            };
            let to = tensor_type(&self.ty(p)).cloned().expect("a tensor");
            let d = self.unbroadcast(per_row, &to);
            self.accumulate(p, d);
        }
        Ok(())
    }
}
