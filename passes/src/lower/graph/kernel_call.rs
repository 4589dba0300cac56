//! `k(args)` of a `@kernel` `k` in a graph function: one `graph.call_kernel {callee,
//! written}` op whose operands are the arguments in `k`'s parameter order (scalars
//! converted to the parameters' types) and whose results are the new values of the
//! parameters `k` writes (`written`: their indices), as the checker typed the call. The
//! kernel runs on copies of its arguments: a written parameter starts from the value
//! passed for it, and the caller's tensors never change.

use tessera_frontend::check::kernel_written_params;

use super::*;

impl Body<'_, '_, '_> {
    /// The kernel of this file named `name`, when `name` is one.
    pub(super) fn kernel_callee(&self, name: &str) -> Option<Callee> {
        (self.resolve)(name).filter(|c| c.is_kernel)
    }

    pub(super) fn kernel_call(&mut self, e: ExprId, callee: &Callee, name: &str, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let env = self.bind_arguments(callee, args, range)?;
        let mut operands = Vec::new();
        for p in &callee.sig.params {
            let v = match env.get(p.name.as_str()) {
                Some(Val::One(v)) => *v,
                _ => return unsupported(format!("the argument for `{}` of the kernel `{name}`", p.name), range),
            };
            let v = match param_type(&p.ty) {
                Some(want @ (Type::Scalar(_) | Type::Index)) if self.vty(v) != want => match (self.vty(v), &want) {
                    (Type::Index, Type::Index) => v,
                    (Type::Index | Type::Scalar(_), _) => self.op1(OpKind::Cast, vec![v], want, vec![], &loc),
                    (have, _) => {
                        return unsupported(format!("passing {have} for the scalar `{}` of `{name}`", p.name), range)
                    }
                },
                _ => v,
            };
            operands.push(v);
        }
        let written = kernel_written_params(&callee.def, &callee.inf);
        let result_tys: Vec<Ty> = match self.ty_of(e) {
            Ty::Tuple(items) => items.clone(),
            one => vec![one.clone()],
        };
        if result_tys.len() != written.len() || written.is_empty() {
            return unsupported(
                format!(
                    "the kernel `{name}` writes {} parameters, its call was typed with {}",
                    written.len(),
                    result_tys.len()
                ),
                range,
            );
        }
        let mut types = Vec::new();
        for t in &result_tys {
            types.push(param_type(t).ok_or_else(|| LowerError {
                message: format!("a kernel result of type {t} in a graph function"),
                range,
            })?);
        }
        let attrs = vec![
            ("callee", Attr::Str(SmolStr::new(name))),
            ("written", Attr::Ints(written.iter().map(|&i| i as i64).collect())),
        ];
        let results = self.g.b.op(OpKind::CallKernel, operands, types, attrs, &loc);
        Ok(match results.as_slice() {
            [one] => Val::One(*one),
            _ => Val::Many(results),
        })
    }
}
