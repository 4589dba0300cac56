//! The losses `mse(pred, target)` and `cross_entropy(logits, target)`: two float tensors
//! of one shape give a rank-0 tensor.

use crate::check::infer::Infer;
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;

use super::Bound;

impl Infer<'_> {
    pub(super) fn loss(&mut self, id: ExprId, path: &'static str, a: &Bound) -> Ty {
        let (x, t) = if path == "mse" {
            (arg!(a, "mse" => "pred"), arg!(a, "mse" => "target"))
        } else {
            (arg!(a, "cross_entropy" => "logits"), arg!(a, "cross_entropy" => "target"))
        };
        let (Some(x), Some(t)) = (x.cloned(), t.cloned()) else { return Ty::Unknown };
        let (Some(tx), Some(tt)) = (self.tensor_arg(&x, path), self.tensor_arg(&t, path)) else {
            return Ty::Unknown;
        };
        for (v, ty) in [(&x, &tx), (&t, &tt)] {
            if !ty.elem.dtype.is_float() {
                self.float_only(path, v.expr, ty.elem.dtype);
                return Ty::Unknown;
            }
        }
        if path == "cross_entropy" && tx.rank() == 0 {
            self.error(Code::E0300, self.range(x.expr), "cross_entropy needs logits of rank ≥ 1 (classes last)");
            return Ty::Unknown;
        }
        if tx.dims != tt.dims {
            let code = if tx.rank() == tt.rank() { Code::E0301 } else { Code::E0300 };
            self.push(
                Diagnostic::new(
                    code,
                    self.range(id),
                    format!(
                        "{path}: `{}` is {} but `{}` is {} ({path} does not broadcast)",
                        self.text(x.expr),
                        fmt_dims(&tx.dims),
                        self.text(t.expr),
                        fmt_dims(&tt.dims)
                    ),
                )
                .with_label(self.range(x.expr), fmt_dims(&tx.dims))
                .with_label(self.range(t.expr), fmt_dims(&tt.dims)),
            );
            return Ty::Unknown;
        }
        match self.merge_elems(id, x.expr, &tx.elem, t.expr, &tt.elem) {
            Some(e) => Ty::Tensor(TensorType::new(vec![], e)),
            None => Ty::Unknown,
        }
    }
}
