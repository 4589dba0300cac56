//! The losses, lowered to the Graph IR ops they are made of (so the reference, the plan
//! and `grad` need nothing of their own):
//!
//! - `mse(pred, target)` = `mean((pred - target) * (pred - target))` over every element;
//! - `cross_entropy(logits, target)` = `-mean(sum(target * (logits - lse), axis=-1))`
//!   with `lse = logsumexp_safe(logits, axis=-1)` broadcast back over the last axis (the
//!   mean over the leading dims; a rank-1 `logits` is one row).

use super::*;

impl Body<'_, '_, '_> {
    /// `v` converted to a tensor of its own dims and the dtype (and policies) of `t`.
    fn as_elem_of(&mut self, v: ValueId, t: &Type, loc: &Loc) -> R<ValueId> {
        let dims = self.vty(v).dims().to_vec();
        let want = match t {
            Type::Tensor(tt) => Type::Tensor(TensorType { dims, dtype: tt.dtype, policies: tt.policies.clone() }),
            other => return unsupported(format!("a loss of type {other}"), loc.range),
        };
        self.coerce(v, &want, loc)
    }

    fn reduce(&mut self, x: ValueId, kind: &str, axes: Vec<i64>, ty: Type, loc: &Loc) -> ValueId {
        let mut attrs =
            vec![("kind", Attr::Str(SmolStr::new(kind))), ("axes", Attr::Ints(axes)), ("keepdim", Attr::Bool(false))];
        attrs.extend(crate::ir::policy::acc_attrs(&[&self.vty(x)]));
        self.op1(OpKind::GReduce, vec![x], ty, attrs, loc)
    }

    pub(super) fn loss(&mut self, name: &str, x: ValueId, target: ValueId, t: Type, loc: &Loc) -> R<ValueId> {
        let x = self.as_elem_of(x, &t, loc)?;
        let y = self.as_elem_of(target, &t, loc)?;
        let full = self.vty(x);
        if full != self.vty(y) {
            return unsupported(format!("{name} of {full} and {}", self.vty(y)), loc.range);
        }
        let rank = full.dims().len() as i64;
        if name == "mse" {
            let d = self.op1(OpKind::Sub, vec![x, y], full.clone(), vec![], loc);
            let sq = self.op1(OpKind::Mul, vec![d, d], full, vec![], loc);
            return Ok(self.reduce(sq, "mean", (0..rank).collect(), t, loc));
        }
        let Type::Tensor(ft) = &full else { return unsupported("cross_entropy of a non-tensor", loc.range) };
        if rank == 0 {
            return unsupported("cross_entropy of a rank-0 tensor", loc.range);
        }
        let with_last = |last: Option<Dim>| {
            let mut dims = ft.dims.clone();
            dims.pop();
            dims.extend(last);
            Type::Tensor(TensorType { dims, dtype: ft.dtype, policies: ft.policies.clone() })
        };
        let rows = with_last(None);
        let lse = self.op1(OpKind::LogSumExp, vec![x], rows.clone(), vec![("axis", Attr::Int(rank - 1))], loc);
        let lse = self.op1(OpKind::Reshape, vec![lse], with_last(Some(Dim::constant(1))), vec![], loc);
        let lse = self.op1(OpKind::GBroadcast, vec![lse], full.clone(), vec![], loc);
        let log_p = self.op1(OpKind::Sub, vec![x, lse], full.clone(), vec![], loc);
        let prod = self.op1(OpKind::Mul, vec![y, log_p], full, vec![], loc);
        let per_row = self.reduce(prod, "sum", vec![rank - 1], rows, loc);
        let mean =
            if rank == 1 { per_row } else { self.reduce(per_row, "mean", (0..rank - 1).collect(), t.clone(), loc) };
        Ok(self.op1(OpKind::Neg, vec![mean], t, vec![], loc))
    }
}
