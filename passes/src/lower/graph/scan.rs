//! `scan(f, init, xs)` in a graph function, unrolled: `xs` is split along its first axis
//! (a constant the checker bounds), `f(carry, x)` is inlined once per step with the
//! previous step's carry, and the steps' `y`s are stacked along a new first axis. Graph
//! IR is then ordinary ops (split, reshape, `f`'s ops, concat), so the plan, the f64
//! reference and `grad` treat it like any other graph.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::{Dim, Ty};
use tessera_frontend::syntax::ast::ExprId;
use tessera_frontend::text::TextRange;

use super::transforms::with_dims;
use super::{unsupported, Body, Val, R};
use crate::ir::*;

impl Body<'_, '_, '_> {
    pub(super) fn scan_call(&mut self, f: ExprId, init: ExprId, xs: ExprId, range: TextRange) -> R<Val> {
        let loc = self.loc(range);
        let Ty::Function(name) = self.ty_of(f).clone() else {
            return unsupported("`scan` of something that is not a graph function", range);
        };
        let callee = self.callee(&name, range)?;
        if callee.sig.params.len() != 2 {
            return unsupported(format!("`scan` needs `{name}(carry, x)`"), range);
        }
        let mut carry = self.expr(init)?;
        let xs = self.value(xs)?;
        let xt = self.vty(xs);
        let dims = xt.dims().to_vec();
        let Some(length) = dims.first().and_then(Dim::as_const).filter(|&n| n >= 1) else {
            return unsupported("`scan` over an axis that is not a constant", range);
        };
        let rest = dims[1..].to_vec();
        let parts = if length == 1 {
            vec![xs]
        } else {
            let one = with_dims(&xt, [vec![Dim::constant(1)], rest.clone()].concat());
            self.g.b.op(OpKind::Split, vec![xs], vec![one; length as usize], vec![("axis", Attr::Int(0))], &loc)
        };
        let mut ys = Vec::new();
        for part in parts {
            let x = self.op1(OpKind::Reshape, vec![part], with_dims(&xt, rest.clone()), vec![], &loc);
            let mut env = HashMap::new();
            env.insert(SmolStr::new(&callee.sig.params[0].name), carry);
            env.insert(SmolStr::new(&callee.sig.params[1].name), Val::One(x));
            let (next, y) = match self.inline_body(&callee, env, range)? {
                Val::Many(items) if items.len() == 2 => (items[0], items[1]),
                _ => return unsupported(format!("`scan` needs `{name}` to return (carry, y)"), range),
            };
            carry = Val::One(next);
            let yt = self.vty(y);
            let stacked_one = with_dims(&yt, [vec![Dim::constant(1)], yt.dims().to_vec()].concat());
            ys.push(self.op1(OpKind::Reshape, vec![y], stacked_one, vec![], &loc));
        }
        let Val::One(last) = carry else { return unsupported("`scan` with a carry that is not a tensor", range) };
        let yt = self.vty(ys[0]);
        let stacked = if ys.len() == 1 {
            ys[0]
        } else {
            let mut dims = yt.dims().to_vec();
            dims[0] = Dim::constant(length);
            self.op1(OpKind::Concat, ys, with_dims(&yt, dims), vec![("axis", Attr::Int(0))], &loc)
        };
        Ok(Val::Many(vec![last, stacked]))
    }
}
