//! Graph-level state: `KVCache[B, H, S_max, D_h, dtype]` values.
//!
//! A cache is lowered to two tensors, its filled keys and values (`[B, H, len, D_h]`):
//! a cache parameter `cache` is the two function parameters `cache.K` and `cache.V`, and
//! a returned cache is two returned values (named `cache.K`, `cache.V` by the function's
//! `returns` attribute). `cache.append(k, v)` is a `graph.cache_append` effect whose
//! results are the new keys and values (`len + s` positions), `cache.prune(n)` a
//! `graph.cache_prune` effect keeping the last `n`; both carry the cache's `capacity`
//! (`S_max`, a dim checked when the run binds the dims) and its state policies
//! (`policies = "paged"`), which the tensors themselves do not carry.

use super::*;
use tessera_frontend::check::{cache_capacity, cache_view, TensorKind, TensorType as CheckedTensor};

/// A KV cache value: its keys and values, with what the cache ops record.
#[derive(Clone, Debug)]
pub(super) struct CacheVal {
    pub k: ValueId,
    pub v: ValueId,
    /// The parameter the cache came from (names returned caches).
    pub name: SmolStr,
    pub capacity: Dim,
    /// The state policies (`paged`, `checkpointable`, ...), comma-separated.
    pub policies: SmolStr,
}

/// The IR type of a cache's `.K` / `.V`, without the state policies (they are the
/// cache ops' attributes), and the cache's capacity and policies.
pub(super) fn cache_parts(ty: &Ty) -> Option<(Type, Dim, SmolStr)> {
    let Ty::Tensor(t) = ty else { return None };
    if t.kind != TensorKind::KVCache {
        return None;
    }
    let view: CheckedTensor = cache_view(t)?;
    let capacity = cache_capacity(t)?.clone();
    let (state, numeric): (Vec<_>, Vec<_>) = view.elem.policies.iter().cloned().partition(|p| p.is_state_policy());
    let policies = SmolStr::new(state.iter().map(|p| p.name()).collect::<Vec<_>>().join(","));
    let ty = Type::Tensor(TensorType { dims: view.dims, dtype: view.elem.dtype, policies: numeric });
    Some((ty, capacity, policies))
}

impl Body<'_, '_, '_> {
    /// Whether `e` is a KV cache.
    pub(super) fn is_cache(&self, e: ExprId) -> bool {
        matches!(self.ty_of(e), Ty::Tensor(t) if t.kind == TensorKind::KVCache)
    }

    /// The cache an expression gives.
    pub(super) fn cache(&mut self, e: ExprId) -> R<CacheVal> {
        match self.expr(e)? {
            Val::Cache(c) => Ok(c),
            _ => unsupported("a KVCache is expected here", self.range(e)),
        }
    }

    fn cache_attrs(&self, c: &CacheVal) -> Vec<(&'static str, Attr)> {
        let mut attrs = vec![("cache", Attr::Str(c.name.clone())), ("capacity", Attr::Dims(vec![c.capacity.clone()]))];
        if !c.policies.is_empty() {
            attrs.push(("policies", Attr::Str(c.policies.clone())));
        }
        attrs
    }

    /// `.K` / `.V` of a cache.
    pub(super) fn cache_view_of(&mut self, object: ExprId, name: &str) -> R<Val> {
        let c = self.cache(object)?;
        Ok(Val::One(if name == "K" { c.k } else { c.v }))
    }

    /// `cache.append(k, v)` and `cache.prune(n)`: `e` is the call, `object` the cache.
    pub(super) fn cache_method(&mut self, e: ExprId, object: ExprId, method: &str, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let c = self.cache(object)?;
        let (ty, _, _) = cache_parts(self.ty_of(e))
            .ok_or_else(|| LowerError { message: format!("`{method}` without a known cache type"), range })?;
        let positional: Vec<ExprId> = args.iter().map(|a| a.value).collect();
        let mut attrs = self.cache_attrs(&c);
        let mut operands = vec![c.k, c.v];
        let kind = match method {
            "append" => {
                let [k, v] = positional[..] else { return unsupported("`append` takes k and v", range) };
                operands.push(self.value(k)?);
                operands.push(self.value(v)?);
                OpKind::CacheAppend
            }
            "prune" => {
                let [n] = positional[..] else { return unsupported("`prune` takes n", range) };
                let keep = match self.ty_of(n) {
                    Ty::Int(Some(d)) => d.clone(),
                    _ => return unsupported("`prune`'s n must be a constant or a dim symbol", self.range(n)),
                };
                attrs.push(("keep", Attr::Dims(vec![keep])));
                OpKind::CachePrune
            }
            other => return unsupported(format!("the KVCache method `{other}`"), range),
        };
        operands.push(self.g.token);
        let results = self.g.b.op(kind, operands, vec![ty.clone(), ty, Type::Token], attrs, &loc);
        self.g.token = results[2];
        Ok(Val::Cache(CacheVal { k: results[0], v: results[1], ..c }))
    }
}

/// The names of a function's returned values when one of them is a cache (`y`,
/// `cache.K`, `cache.V`); `None` when no cache is returned (the usual `return0`, ...).
pub(super) fn return_names(vals: &[Val]) -> Option<Vec<SmolStr>> {
    if !vals.iter().any(|v| matches!(v, Val::Cache(_))) {
        return None;
    }
    let mut names = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        match v {
            Val::Cache(c) => {
                names.push(SmolStr::new(format!("{}.K", c.name)));
                names.push(SmolStr::new(format!("{}.V", c.name)));
            }
            _ => names.push(SmolStr::new(format!("return{i}"))),
        }
    }
    Some(names)
}
