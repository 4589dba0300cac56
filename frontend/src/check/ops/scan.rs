//! `scan(f, init, xs)` (docs/language.md, "Transforms"): `f(carry, x)` over the first axis
//! of `xs`, returning `(carry, ys)`. Lowering unrolls it (`passes::lower::graph`), so the
//! scanned axis must be a constant.

use crate::check::infer::Infer;
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic};

use super::{substitute_ty, Bound};

/// The longest axis `scan` unrolls: Graph IR holds one copy of `f` per step.
pub const MAX_SCAN_LENGTH: i64 = 256;

impl<'a> Infer<'a> {
    pub(super) fn scan(&mut self, id: crate::syntax::ast::ExprId, a: &Bound) -> Ty {
        let f = arg!(a, "scan" => "f").unwrap().clone();
        let init = arg!(a, "scan" => "init").unwrap().clone();
        let xs = arg!(a, "scan" => "xs").unwrap().clone();
        let Some((name, sig, ret)) = self.transform_target(&f, "scan") else {
            return Ty::Unknown;
        };
        if sig.params.len() != 2 {
            self.error(
                Code::E0801,
                self.range(f.expr),
                format!(
                    "`scan` calls `{name}(carry, x)`, but `{name}` takes {} parameter{}",
                    sig.params.len(),
                    if sig.params.len() == 1 { "" } else { "s" }
                ),
            );
            return Ty::Unknown;
        }
        let xt = match self.operand(xs.ty.clone()) {
            Ty::Unknown => return Ty::Unknown,
            Ty::Tensor(t) if t.rank() >= 1 => t,
            other => return self.wrong_kind(xs.expr, "scan", "a tensor of rank 1 or more for `xs`", &other),
        };
        let length = match xt.dims[0].as_const() {
            Some(n) if (1..=MAX_SCAN_LENGTH).contains(&n) => n,
            _ => {
                self.push(
                    Diagnostic::new(
                        Code::E0802,
                        self.range(xs.expr),
                        format!(
                            "`scan` unrolls over the first axis of `xs`, which must be a constant from 1 to \
                             {MAX_SCAN_LENGTH}, but `{}` is {}",
                            self.text(xs.expr),
                            fmt_dims(&xt.dims)
                        ),
                    )
                    .with_note("give the scanned axis a constant size in the annotation (`Tensor[16, \"D\", f32]`)"),
                );
                return Ty::Unknown;
            }
        };
        let mut x = xs.clone();
        x.ty = Ty::Tensor(TensorType { kind: xt.kind, dims: xt.dims[1..].to_vec(), elem: xt.elem.clone() });
        let inner = vec![(None, init.clone()), (None, x)];
        let Some(subst) = self.bind_user(id, &name, &sig, &inner) else {
            return Ty::Unknown;
        };
        let (carry, y) = match substitute_ty(&ret, &subst) {
            Ty::Tuple(items) if items.len() == 2 => (items[0].clone(), items[1].clone()),
            Ty::Unknown => return Ty::Unknown,
            other => {
                self.error(
                    Code::E0802,
                    self.range(f.expr),
                    format!("`scan` needs `{name}` to return (carry, y), but it returns {other}"),
                );
                return Ty::Unknown;
            }
        };
        let same_carry = match (&carry, &self.operand(init.ty.clone())) {
            (Ty::Tensor(c), Ty::Tensor(i)) => c.dims == i.dims && c.elem.dtype == i.elem.dtype,
            _ => false,
        };
        if !same_carry {
            self.error(
                Code::E0301,
                self.range(init.expr),
                format!(
                    "`scan`: `{name}` returns a carry of type {carry}, but `init` (`{}`) is {}",
                    self.text(init.expr),
                    init.ty
                ),
            );
            return Ty::Unknown;
        }
        let Ty::Tensor(yt) = y else {
            self.error(Code::E0802, self.range(f.expr), format!("`scan` needs `{name}`'s y to be a tensor, not {y}"));
            return Ty::Unknown;
        };
        let mut dims = vec![crate::check::dims::Dim::constant(length)];
        dims.extend(yt.dims.iter().cloned());
        Ty::Tuple(vec![carry, Ty::Tensor(TensorType { kind: yt.kind, dims, elem: yt.elem })])
    }
}
