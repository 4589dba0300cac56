//! `custom_vjp(f, backward)(args)` in a graph function: `f` inlined, each of its ops tagged
//! `custom_vjp = k` (the k-th such call), and `backward`'s graph traced on its own with
//! `f`'s arguments and `f`'s result standing for the gradient `g`. `grad`
//! (`autodiff::backward`) emits that traced graph in place of the rules of `f`'s ops.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::Ty;
use tessera_frontend::syntax::ast::Arg;
use tessera_frontend::text::TextRange;

use super::{unsupported, Body, Val, R};
use crate::autodiff::{CustomVjp, CUSTOM_VJP};
use crate::ir::*;

impl Body<'_, '_, '_> {
    pub(super) fn custom_vjp_call(&mut self, of: &str, backward: &str, args: &[Arg], range: TextRange) -> R<Val> {
        if self.g.tracing {
            return unsupported(
                format!("`custom_vjp({of}, {backward})` inside `vmap` or `jvp` is not supported yet"),
                range,
            );
        }
        let callee = self.callee(of, range)?;
        let env = self.bind_arguments(&callee, args, range)?;
        // `f`'s arguments in parameter order (for `backward`), and its float tensors (the
        // values `backward`'s gradients are for).
        let mut arguments = Vec::new();
        let mut grads_for = Vec::new();
        for p in &callee.sig.params {
            let v = env.get(p.name.as_str()).cloned().unwrap_or(Val::None);
            if matches!(&p.ty, Ty::Tensor(t) if t.elem.dtype.is_float()) {
                match v {
                    Val::One(x) => grads_for.push(x),
                    _ => return unsupported(format!("`custom_vjp({of}, ...)`: `{}` is not one tensor", p.name), range),
                }
            }
            arguments.push(v);
        }
        let start = self.g.b.func.ops.len();
        let mut output = match self.inline_body(&callee, env, range)? {
            Val::One(v) => v,
            _ => return unsupported(format!("`custom_vjp` needs `{of}` to return one tensor"), range),
        };
        // A result `f` did not compute (it returns an argument) gets a value of its own, so
        // that its gradient and the argument's stay apart.
        if !self.g.b.func.ops[start..].iter().any(|op| op.results.contains(&output)) {
            let ty = self.vty(output);
            let loc = self.loc(range);
            output = self.op1(OpKind::Cast, vec![output], ty, vec![], &loc);
        }
        let index = self.g.custom_vjps.len() as i64;
        for op in &mut self.g.b.func.ops[start..] {
            op.attrs.push((CUSTOM_VJP, Attr::Int(index)));
        }
        let bcallee = self.callee(backward, range)?;
        if bcallee.sig.params.len() != arguments.len() + 1 {
            return unsupported(format!("`{backward}` must take `{of}`'s parameters and then the gradient"), range);
        }
        let mut benv = HashMap::new();
        for (p, v) in bcallee.sig.params.iter().zip(arguments.into_iter().chain([Val::One(output)])) {
            benv.insert(SmolStr::new(&p.name), v);
        }
        let traced = self.trace_env(backward, &bcallee, benv, range, &|_, _| Ok(None))?;
        if traced.outputs.len() != grads_for.len() {
            return unsupported(
                format!(
                    "`{backward}` returns {} values, but `{of}` has {} float tensor parameters",
                    traced.outputs.len(),
                    grads_for.len()
                ),
                range,
            );
        }
        self.g.custom_vjps.push(CustomVjp {
            name: SmolStr::new(of),
            func: traced.func,
            inputs: traced.inputs,
            outputs: traced.outputs,
            output,
            grads_for,
            start,
        });
        Ok(Val::One(output))
    }
}
