//! `custom_vjp(f, backward)` (docs/language.md, "Transforms"): `f`, whose gradients
//! `grad` takes from `backward(*args, g)`. Lowering is `passes::lower::graph::custom_vjp`
//! and `passes::autodiff`.

use crate::check::infer::Infer;
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::ExprId;
use crate::text::TextRange;

use super::{ArgVal, Bound};

type Vals = [(Option<(String, TextRange)>, ArgVal)];

impl<'a> Infer<'a> {
    pub(super) fn custom_vjp(&mut self, a: &Bound) -> Ty {
        let f = arg!(a, "custom_vjp" => "f").unwrap().clone();
        let backward = arg!(a, "custom_vjp" => "backward").unwrap().clone();
        let (Some((of, sig, ret)), Some((bwd, bsig, _))) =
            (self.transform_target(&f, "custom_vjp"), self.transform_target(&backward, "custom_vjp"))
        else {
            return Ty::Unknown;
        };
        if !matches!(ret, Ty::Tensor(_) | Ty::Unknown) {
            self.error(
                Code::E0802,
                self.range(f.expr),
                format!("`custom_vjp` needs `{of}` to return one tensor, but it returns {ret}"),
            );
            return Ty::Unknown;
        }
        if bsig.params.len() != sig.params.len() + 1 {
            self.push(
                Diagnostic::new(
                    Code::E0801,
                    self.range(backward.expr),
                    format!(
                        "`{bwd}` takes {} parameters, but as `{of}`'s backward it takes {}: `{of}`'s, then the \
                         gradient of its result",
                        bsig.params.len(),
                        sig.params.len() + 1
                    ),
                )
                .with_note(format!(
                    "def {bwd}({}, g): return one gradient per float tensor parameter of `{of}`",
                    sig.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                )),
            );
            return Ty::Unknown;
        }
        Ty::CustomVjp { of, backward: bwd }
    }

    /// A call: `f`'s, and `backward` checked with the call's arguments and `f`'s result.
    pub(super) fn custom_vjp_call(&mut self, id: ExprId, func: ExprId, of: &str, backward: &str, vals: &Vals) -> Ty {
        let result = self.user_call(id, func, of, vals);
        let Ty::Tensor(_) = &result else { return result };
        let Some((_, sig)) = crate::check::infer::callee_signature(self.db, self.file, of) else { return result };
        let floats: Vec<String> = sig
            .params
            .iter()
            .filter(|p| matches!(&p.ty, Ty::Tensor(t) if t.elem.dtype.is_float()))
            .map(|p| p.name.clone())
            .collect();
        let mut inner: Vec<(Option<(String, TextRange)>, ArgVal)> = vals.to_vec();
        inner.push((None, ArgVal { expr: id, ty: result.clone() }));
        let Some((key, bsig)) = crate::check::infer::callee_signature(self.db, self.file, backward) else {
            return result;
        };
        let bsig = bsig.clone();
        let ret = match &bsig.ret {
            Some(r) => r.clone(),
            None => crate::check::infer::callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        let Some(subst) = self.bind_user(id, backward, &bsig, &inner) else {
            return result;
        };
        let grads = match super::substitute_ty(&ret, &subst) {
            Ty::Tuple(items) => items,
            Ty::Unknown => return result,
            one => vec![one],
        };
        if grads.len() != floats.len() || !grads.iter().all(|g| matches!(g, Ty::Tensor(_))) {
            self.error(
                Code::E0802,
                self.range(id),
                format!(
                    "`{backward}` returns {}, but `grad` needs one tensor per float tensor parameter of `{of}` ({})",
                    if grads.len() == 1 { grads[0].to_string() } else { format!("{} values", grads.len()) },
                    floats.join(", ")
                ),
            );
        }
        result
    }
}
