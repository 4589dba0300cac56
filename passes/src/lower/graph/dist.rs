//! The collectives a graph function writes (`dist.all_reduce(x, axis="tp")`, docs/language.md,
//! "Explicit collectives"): effects on the token chain with x's type, `{axis, explicit =
//! true}` and the dims the call names (`dim` of a reduce-scatter, `split_dim` and
//! `concat_dim` of an all-to-all). Graph IR is the global view, so each is x's value;
//! sharding propagation checks that x is laid out for it (E0316) and fills in what the
//! layout decides (the `dim` an all-gather makes whole, the `combine` of an all-reduce),
//! and `dist::insert` prices it.

use super::*;

impl Body<'_, '_, '_> {
    pub(super) fn collective_call(&mut self, e: ExprId, path: &str, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let kind = match path {
            "dist.all_reduce" => OpKind::AllReduce,
            "dist.all_gather" => OpKind::AllGather,
            "dist.reduce_scatter" => OpKind::ReduceScatter,
            "dist.all_to_all" => OpKind::AllToAll,
            _ => return unsupported(format!("`{path}` in a graph function is not lowered yet"), range),
        };
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let arg = |name: &str, pos: Option<usize>| {
            args.iter()
                .find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name))
                .map(|a| a.value)
                .or_else(|| pos.and_then(|p| positional.get(p).copied()))
                .ok_or_else(|| LowerError { message: format!("`{path}` needs `{name}`"), range })
        };
        let x = self.value(arg("x", Some(0))?)?;
        let axis_expr = arg("axis", Some(1))?;
        let Ty::Str(Some(axis)) = self.ty_of(axis_expr).clone() else {
            return unsupported(format!("`{path}` needs a constant mesh axis name"), self.range(axis_expr));
        };
        let rank = self.vty(x).dims().len() as i64;
        let mut attrs = vec![("axis", Attr::Str(SmolStr::new(axis))), ("explicit", Attr::Bool(true))];
        let dims: &[&'static str] = match kind {
            OpKind::ReduceScatter => &["dim"],
            OpKind::AllToAll => &["split_dim", "concat_dim"],
            _ => &[],
        };
        for &name in dims {
            let e = arg(name, None)?;
            let d = self.int_list(e)?.first().copied().unwrap_or(0);
            attrs.push((name, Attr::Int(if d < 0 { d + rank } else { d })));
        }
        let t = self.vty(x);
        Ok(Val::One(self.effect(kind, vec![x], t, attrs, &loc)))
    }
}
