//! The backward rule of `flash_attention(q, k, v, causal, scale)` without dropout, as the
//! plain attention backward: the probabilities are recomputed from q and k (`P =
//! softmax(q kᵀ · scale)`, the causal mask as `where`), then
//!
//! ```text
//! dV = Pᵀ · g          dP = g · Vᵀ          dS = P · (dP − Σ_rows dP·P) · scale
//! dQ = dS · K          dK = dSᵀ · Q
//! ```
//!
//! written with primitive ops, so it is planned like any backward graph. Unlike the
//! forward kernel it materializes the `[.., Sq, Sk]` scores and probabilities (FlashAttention-2's
//! backward kernel, which recomputes them per tile, is not written yet), and it computes
//! them in the inputs' storage dtype, as the other graph ops do.

use tessera_frontend::check::{DType, Dim};

use super::{tensor_type, Ad, R};
use crate::ir::*;

impl Ad<'_, '_> {
    pub(super) fn attention_rule(&mut self, f_op: &Op, g: ValueId) -> R<()> {
        let (q, k, v) = (f_op.operands[0], f_op.operands[1], f_op.operands[2]);
        if f_op.operands.get(3).is_some_and(|&p| matches!(self.ty(p), Type::Scalar(d) if d.is_float())) {
            return self.err("grad through `flash_attention` with dropout is not supported yet".into());
        }
        let qt = tensor_type(&self.ty(q)).cloned().expect("a tensor");
        let kt = tensor_type(&self.ty(k)).cloned().expect("a tensor");
        let rank = qt.dims.len();
        if rank < 2 {
            return self.err(format!("grad through `flash_attention` of rank-{rank} tensors"));
        }
        let (sq, sk) = (qt.dims[rank - 2].clone(), kt.dims[rank - 2].clone());
        let acc = policy::acc_attrs(&[&self.ty(q), &self.ty(k)]);
        let batch = qt.dims[..rank - 2].to_vec();
        let scores_t =
            Type::Tensor(TensorType { dims: [batch.clone(), vec![sq.clone(), sk.clone()]].concat(), ..qt.clone() });

        // P, recomputed.
        let k_t = self.transpose_last2(k);
        let raw = self.op(OpKind::MatMul, vec![q, k_t], scores_t.clone(), acc.clone());
        let scale = self.attention_scale(f_op, q, &scores_t);
        let mut scores = self.bin(OpKind::Mul, raw, scale);
        if f_op.attr("causal").is_some_and(|a| *a == Attr::Bool(true)) {
            scores = self.causal_mask(scores, q, k, &scores_t, (sq, sk))?;
        }
        let last = rank as i64 - 1;
        let p = self.op(OpKind::Softmax, vec![scores], scores_t.clone(), vec![("axis", Attr::Int(last))]);

        // dV = Pᵀ g
        if self.is_float_tensor(v) {
            let vt = tensor_type(&self.ty(v)).cloned().expect("a tensor");
            let p_t = self.transpose_last2(p);
            let dv = self.op(OpKind::MatMul, vec![p_t, g], Type::Tensor(vt), acc.clone());
            self.accumulate(v, dv);
        }
        // dS = P (dP − Σ dP·P) · scale, dP = g Vᵀ
        let v_t = self.transpose_last2(v);
        let dp = self.op(OpKind::MatMul, vec![g, v_t], scores_t.clone(), acc.clone());
        let dpp = self.bin(OpKind::Mul, dp, p);
        let rows = self.line_sum(dpp, rank - 1);
        let centered = self.bin(OpKind::Sub, dp, rows);
        let ds = self.bin(OpKind::Mul, p, centered);
        let ds = self.bin(OpKind::Mul, ds, scale);
        if self.is_float_tensor(q) {
            let dq = self.op(OpKind::MatMul, vec![ds, k], Type::Tensor(qt.clone()), acc.clone());
            self.accumulate(q, dq);
        }
        if self.is_float_tensor(k) {
            let ds_t = self.transpose_last2(ds);
            let dk = self.op(OpKind::MatMul, vec![ds_t, q], Type::Tensor(kt), acc);
            self.accumulate(k, dk);
        }
        Ok(())
    }

    /// The forward's `scale`, or `1/√D` of q's head dim, broadcast to the scores.
    fn attention_scale(&mut self, f_op: &Op, q: ValueId, scores_t: &Type) -> ValueId {
        if let Some(s) = f_op.attr("scale").and_then(Attr::as_float) {
            return self.constant(s, scores_t);
        }
        let dtype = scores_t.dtype().unwrap_or(DType::F32);
        let last = self.ty(q).dims().len() as i64 - 1;
        let d = self.op(OpKind::TensorDim, vec![q], Type::Index, vec![("axis", Attr::Int(last))]);
        let d = self.op(OpKind::Cast, vec![d], Type::Scalar(dtype), vec![]);
        let r = self.op(OpKind::Rsqrt, vec![d], Type::Scalar(dtype), vec![]);
        self.op(OpKind::GBroadcast, vec![r], scores_t.clone(), vec![])
    }

    /// The scores with the keys a query may not see (bottom-right aligned: query `i`
    /// sees key `j` when `j <= i + Sk − Sq`) replaced by -1e30, which softmax turns into 0.
    fn causal_mask(
        &mut self,
        scores: ValueId,
        q: ValueId,
        k: ValueId,
        scores_t: &Type,
        (sq, sk): (Dim, Dim),
    ) -> R<ValueId> {
        let rank = scores_t.dims().len();
        let dtype = scores_t.dtype().unwrap_or(DType::F32);
        let plane = |dims: Vec<Dim>| Type::Tensor(TensorType { dims, dtype, policies: vec![] });
        let square = plane(vec![sq.clone(), sk.clone()]);
        let i = self.op(OpKind::Iota, vec![], plane(vec![sq.clone()]), vec![]);
        let i = self.reshape(i, vec![sq.clone(), Dim::constant(1)]);
        let i = self.op(OpKind::GBroadcast, vec![i], square.clone(), vec![]);
        let j = self.op(OpKind::Iota, vec![], plane(vec![sk.clone()]), vec![]);
        let j = self.reshape(j, vec![Dim::constant(1), sk.clone()]);
        let j = self.op(OpKind::GBroadcast, vec![j], square.clone(), vec![]);
        let ahead = self.bin(OpKind::Sub, j, i);
        // Sk − Sq, from the operands' dims.
        let axis = Attr::Int(rank as i64 - 2);
        let nk = self.op(OpKind::TensorDim, vec![k], Type::Index, vec![("axis", axis.clone())]);
        let nq = self.op(OpKind::TensorDim, vec![q], Type::Index, vec![("axis", axis)]);
        let offset = self.op(OpKind::Sub, vec![nk, nq], Type::Index, vec![]);
        let offset = self.op(OpKind::Cast, vec![offset], Type::Scalar(dtype), vec![]);
        let offset = self.op(OpKind::GBroadcast, vec![offset], square.clone(), vec![]);
        let mask_t = Type::Tensor(TensorType { dims: vec![sq, sk], dtype: DType::Bool, policies: vec![] });
        let hidden = self.op(OpKind::Cmp, vec![ahead, offset], mask_t, vec![("pred", Attr::Str("gt".into()))]);
        let full_mask_t = Type::Tensor(TensorType {
            dtype: DType::Bool,
            policies: vec![],
            ..tensor_type(scores_t).cloned().expect("a tensor")
        });
        let hidden = self.op(OpKind::GBroadcast, vec![hidden], full_mask_t, vec![]);
        let floor = self.filled(-1e30, scores_t);
        Ok(self.op(OpKind::Select, vec![hidden, floor, scores], scores_t.clone(), vec![]))
    }
}
