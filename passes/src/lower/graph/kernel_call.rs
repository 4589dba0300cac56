//! `k(args)` of a `@kernel` `k` in a graph function: one `graph.call_kernel {callee,
//! written}` op whose operands are the arguments in `k`'s parameter order (scalars
//! converted to the parameters' types) and whose results are the new values of the
//! parameters `k` writes (`written`: their indices), as the checker typed the call. The
//! kernel runs on copies of its arguments: a written parameter starts from the value
//! passed for it, and the caller's tensors never change.

use tessera_frontend::check::{builtins, kernel_written_params, stdlib_dtype_param};

use super::*;

/// How a graph function's lowering asks its [`Resolver`] for a stdlib kernel instantiated
/// for a dtype: `tessera.stdlib:<kernel>:<dtype>` (`stdlib_callee` reads it back).
pub fn stdlib_callee_name(kernel: &str, dtype: DType) -> String {
    format!("tessera.stdlib:{kernel}:{dtype}")
}

/// The kernel and dtype of a [`stdlib_callee_name`].
pub fn stdlib_callee(name: &str) -> Option<(&str, DType)> {
    let (kernel, dtype) = name.strip_prefix("tessera.stdlib:")?.split_once(':')?;
    Some((kernel, DType::from_name(dtype)?))
}

impl Body<'_, '_, '_> {
    /// The kernel of this file named `name`, when `name` is one.
    pub(super) fn kernel_callee(&self, name: &str) -> Option<Callee> {
        (self.resolve)(name).filter(|c| c.is_kernel)
    }

    /// Whether a built-in path names a stdlib kernel (imported from `tessera.stdlib`).
    pub(super) fn is_stdlib_kernel(&self, path: &str) -> bool {
        builtins::lookup(path).is_none() && tessera_frontend::stdlib::kernel_names().contains(&path)
    }

    /// A stdlib kernel's call: the kernel instantiated for the dtype of the argument of its
    /// first `T` parameter (as the checker chose it), then as any kernel call.
    pub(super) fn stdlib_kernel_call(&mut self, e: ExprId, name: &str, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let missing = || LowerError { message: format!("the stdlib has no kernel `{name}`"), range };
        let generic = (self.resolve)(&stdlib_callee_name(name, DType::F32)).ok_or_else(missing)?;
        let dtype = stdlib_dtype_param(name)
            .and_then(|i| {
                let p = generic.sig.params.get(i)?.name.as_str();
                let by_name = args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == p));
                let a = by_name.or_else(|| args.iter().filter(|a| a.name.is_none()).nth(i))?;
                match self.ty_of(a.value) {
                    Ty::Tensor(t) => Some(t.elem.dtype),
                    _ => None,
                }
            })
            .unwrap_or(DType::F32);
        let callee = (self.resolve)(&stdlib_callee_name(name, dtype)).ok_or_else(missing)?;
        self.kernel_call(e, &callee, name, args, Some(dtype))
    }

    pub(super) fn kernel_call(
        &mut self,
        e: ExprId,
        callee: &Callee,
        name: &str,
        args: &[Arg],
        stdlib: Option<DType>,
    ) -> R<Val> {
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
            types.push(self.ir_type(t).ok_or_else(|| LowerError {
                message: format!("a kernel result of type {t} in a graph function"),
                range,
            })?);
        }
        let mut attrs = vec![
            ("callee", Attr::Str(SmolStr::new(name))),
            ("written", Attr::Ints(written.iter().map(|&i| i as i64).collect())),
        ];
        if let Some(dtype) = stdlib {
            attrs.push(("stdlib", Attr::Str(SmolStr::new(dtype.to_string()))));
        }
        let results = self.g.b.op(OpKind::CallKernel, operands, types, attrs, &loc);
        Ok(match results.as_slice() {
            [one] => Val::One(*one),
            _ => Val::Many(results),
        })
    }
}
