//! The backward rules of the attention layout moves, `split_qkv` and `merge_heads`: both
//! only permute elements, so each gradient is the inverse permutation of its adjoint,
//! written with `graph.transpose` and `graph.reshape` (and `graph.concat` of the three
//! parts of `split_qkv`, which are consecutive thirds of the last dim).

use super::{tensor_type, Ad, R};
use crate::ir::*;

impl Ad<'_, '_> {
    /// `[B, h, S, Dh] -> [B, S, h, Dh]`, then the last two dims merged (`merge_heads`).
    fn heads_to_rows(&mut self, v: ValueId) -> R<ValueId> {
        let t = tensor_type(&self.ty(v)).cloned().expect("a tensor");
        let [b, h, s, dh] = &t.dims[..] else {
            return self.err(format!("grad of an attention layout move of a rank-{} tensor", t.dims.len()));
        };
        let swapped = vec![b.clone(), s.clone(), h.clone(), dh.clone()];
        let moved = self.op(
            OpKind::GTranspose,
            vec![v],
            Type::Tensor(TensorType { dims: swapped, ..t.clone() }),
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        Ok(self.reshape(moved, vec![b.clone(), s.clone(), h.mul_plain(dh)]))
    }

    /// `merge_heads(x)`: `x`'s adjoint is `g` split back into heads.
    pub(super) fn merge_heads_rule(&mut self, f_op: &Op, g: ValueId) -> R<()> {
        let x = f_op.operands[0];
        let xt = tensor_type(&self.ty(x)).cloned().expect("a tensor");
        let [b, h, s, dh] = &xt.dims[..] else {
            return self.err(format!("grad of `merge_heads` of a rank-{} tensor", xt.dims.len()));
        };
        let rows = self.reshape(g, vec![b.clone(), s.clone(), h.clone(), dh.clone()]);
        let gt = tensor_type(&self.ty(g)).cloned().expect("a tensor");
        let d = self.op(
            OpKind::GTranspose,
            vec![rows],
            Type::Tensor(TensorType { dims: xt.dims.clone(), dtype: gt.dtype, policies: gt.policies }),
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        self.accumulate(x, d);
        Ok(())
    }

    /// `q, k, v = split_qkv(qkv, heads)`: `qkv`'s adjoint is the three adjoints merged
    /// back into rows and concatenated along the last dim (zeros for a part nothing read).
    pub(super) fn split_qkv_rule(&mut self, f_op: &Op) -> R<()> {
        if !f_op.results.iter().any(|r| self.adjoint.contains_key(r)) {
            return Ok(());
        }
        let qkv = f_op.operands[0];
        let mut parts = Vec::new();
        for &r in &f_op.results {
            let g = self.adjoint_or_zero(r);
            parts.push(self.heads_to_rows(g)?);
        }
        let t = self.ty(qkv);
        let last = t.dims().len() as i64 - 1;
        let d = self.op(OpKind::Concat, parts, t, vec![("axis", Attr::Int(last))]);
        self.accumulate(qkv, d);
        Ok(())
    }
}
