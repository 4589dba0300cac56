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
//!
//! An `OptimizerState[W]` is Adam's state for the parameter W: the moments `NAME.m` and
//! `NAME.v` (f32, W's dims), the count of steps taken `NAME.step` (f32), and with
//! `@fp32_master` an f32 master copy `NAME.master` of W. `state.adam(W, g, ...)` calls the
//! stdlib `fused_adam` on flattened copies (the master, or W widened to f32 without one)
//! and gives `(W', state')`, W' the updated f32 values rounded to W's dtype. The function's
//! `optimizer_states` attribute (`state=W`) tells a run which parameter a master copies.

use super::*;
use tessera_frontend::check::{
    cache_capacity, cache_view, has_fp32_master, kernel_written_params, ParamInfo, TensorKind,
    TensorType as CheckedTensor,
};

/// A state value: the tensors (and scalars) it is.
#[derive(Clone, Debug)]
pub(super) enum StateVal {
    Cache(CacheVal),
    Optimizer(OptVal),
}

/// Adam's state for one parameter.
#[derive(Clone, Debug)]
pub(super) struct OptVal {
    pub m: ValueId,
    pub v: ValueId,
    pub step: ValueId,
    pub master: Option<ValueId>,
    pub name: SmolStr,
    /// The parameter's dims and dtype.
    pub dims: Vec<Dim>,
    pub dtype: DType,
    /// Every policy of the state, comma-separated (`fp32_master,paged`).
    pub policies: SmolStr,
}

impl StateVal {
    /// The values it lowers to, in the order a function returns them.
    pub fn values(&self) -> Vec<ValueId> {
        match self {
            StateVal::Cache(c) => vec![c.k, c.v],
            StateVal::Optimizer(o) => [o.m, o.v, o.step].into_iter().chain(o.master).collect(),
        }
    }

    /// Their names (`cache.K`, `state.m`, ...).
    pub fn names(&self) -> Vec<String> {
        match self {
            StateVal::Cache(c) => vec![format!("{}.K", c.name), format!("{}.V", c.name)],
            StateVal::Optimizer(o) => {
                let mut names = vec![format!("{}.m", o.name), format!("{}.v", o.name), format!("{}.step", o.name)];
                if o.master.is_some() {
                    names.push(format!("{}.master", o.name));
                }
                names
            }
        }
    }
}

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

/// The name `OptimizerState[W]` refers to (its annotation, policies stripped).
fn optimizer_target(def: &FunctionDef, ann: ExprId) -> Option<SmolStr> {
    let arena = &def.arena;
    let mut e = arena.unparen(ann);
    while let Expr::Binary { op: BinOp::MatMul, lhs, .. } = arena.expr(e) {
        e = arena.unparen(*lhs);
    }
    match arena.expr(e) {
        Expr::Subscript { indices, .. } => match indices[..] {
            [i] => match arena.expr(i) {
                Expr::Name(n) => Some(SmolStr::new(n.as_str())),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// The Graph IR parameters of a state parameter (`cache.K`, `cache.V`; `state.m`, ...),
/// added to `func`; `None` for other parameters.
pub(super) fn state_param(func: &mut Func, p: &ParamInfo, def: &FunctionDef, index: usize) -> Option<StateVal> {
    let name = SmolStr::new(&p.name);
    if let Some((ty, capacity, policies)) = cache_parts(&p.ty) {
        let k = func.new_value(ty.clone(), Some(&format!("{name}.K")));
        let v = func.new_value(ty, Some(&format!("{name}.V")));
        func.params.extend([k, v]);
        return Some(StateVal::Cache(CacheVal { k, v, name, capacity, policies }));
    }
    let Ty::Tensor(t) = &p.ty else { return None };
    if t.kind != TensorKind::OptimizerState {
        return None;
    }
    let f32_ty = Type::Tensor(TensorType { dims: t.dims.clone(), dtype: DType::F32, policies: vec![] });
    let m = func.new_value(f32_ty.clone(), Some(&format!("{name}.m")));
    let v = func.new_value(f32_ty.clone(), Some(&format!("{name}.v")));
    let step = func.new_value(Type::Scalar(DType::F32), Some(&format!("{name}.step")));
    func.params.extend([m, v, step]);
    let master = has_fp32_master(t).then(|| {
        let master = func.new_value(f32_ty, Some(&format!("{name}.master")));
        func.params.push(master);
        master
    });
    let policies = SmolStr::new(t.elem.policies.iter().map(|p| p.name()).collect::<Vec<_>>().join(","));
    // Which parameter the state is for: a run copies it into the master.
    if let Some(target) = def.params.get(index).and_then(|a| a.annotation).and_then(|a| optimizer_target(def, a)) {
        let entry = format!("{name}={target}");
        let all = match func.attr("optimizer_states").and_then(Attr::as_str) {
            Some(before) => format!("{before},{entry}"),
            None => entry,
        };
        func.set_attr("optimizer_states", Attr::Str(SmolStr::new(all)));
    }
    Some(StateVal::Optimizer(OptVal { m, v, step, master, name, dims: t.dims.clone(), dtype: t.elem.dtype, policies }))
}

impl Body<'_, '_, '_> {
    /// Whether `e` is a KV cache or an optimizer state.
    pub(super) fn is_state(&self, e: ExprId) -> bool {
        matches!(self.ty_of(e), Ty::Tensor(t) if matches!(t.kind, TensorKind::KVCache | TensorKind::OptimizerState))
    }

    /// `.K`, `.V` of a cache; `.m`, `.v`, `.step`, `.master` of an optimizer state.
    pub(super) fn state_attribute(&mut self, object: ExprId, name: &str) -> R<Val> {
        let range = self.range(object);
        let v = match (self.expr(object)?, name) {
            (Val::State(StateVal::Cache(c)), "K") => c.k,
            (Val::State(StateVal::Cache(c)), "V") => c.v,
            (Val::State(StateVal::Optimizer(o)), "m") => o.m,
            (Val::State(StateVal::Optimizer(o)), "v") => o.v,
            (Val::State(StateVal::Optimizer(o)), "step") => o.step,
            (Val::State(StateVal::Optimizer(o)), "master") if o.master.is_some() => o.master.unwrap_or(o.m),
            _ => return unsupported(format!("`.{name}` of this state"), range),
        };
        Ok(Val::One(v))
    }

    /// A method of a state: `append`/`prune` of a cache, `adam` of an optimizer state.
    pub(super) fn state_method(&mut self, e: ExprId, object: ExprId, method: &str, args: &[Arg]) -> R<Val> {
        match self.expr(object)? {
            Val::State(StateVal::Optimizer(o)) if method == "adam" => self.adam(e, o, args),
            _ => self.cache_method(e, object, method, args),
        }
    }

    /// `state.adam(W, g, lr=, beta1=, beta2=, eps=, weight_decay=)` → `(W', state')`:
    /// the stdlib `fused_adam` on `[N]` views (N: every element), step `state.step + 1`.
    fn adam(&mut self, e: ExprId, o: OptVal, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let [w, g] = positional[..] else { return unsupported("`adam` takes W and g", range) };
        let (w, g) = (self.value(w)?, self.value(g)?);
        let g_dtype = self.vty(g).dtype().unwrap_or(DType::F32);
        let n = o.dims.iter().fold(Dim::constant(1), |acc, d| acc.mul_plain(d));
        let flat = |dtype: DType| Type::Tensor(TensorType { dims: vec![n.clone()], dtype, policies: vec![] });
        let full = |dtype: DType| Type::Tensor(TensorType { dims: o.dims.clone(), dtype, policies: vec![] });
        // The f32 values the update applies to: the master copy, or W widened.
        let p = match o.master {
            Some(master) => master,
            None => self.op1(OpKind::Cast, vec![w], full(DType::F32), vec![], &loc),
        };
        let p = self.op1(OpKind::Reshape, vec![p], flat(DType::F32), vec![], &loc);
        let g = self.op1(OpKind::Reshape, vec![g], flat(g_dtype), vec![], &loc);
        let m = self.op1(OpKind::Reshape, vec![o.m], flat(DType::F32), vec![], &loc);
        let v = self.op1(OpKind::Reshape, vec![o.v], flat(DType::F32), vec![], &loc);
        let mut operands = vec![p, g, m, v];
        for (key, default) in [("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("weight_decay", 0.0)] {
            let given = args.iter().find(|a| a.name.as_ref().is_some_and(|(k, _)| k == key));
            let x = match given {
                Some(a) => self.value(a.value)?,
                None => self.op1(
                    OpKind::Constant,
                    vec![],
                    Type::Scalar(DType::F32),
                    vec![("value", Attr::float(default))],
                    &loc,
                ),
            };
            operands.push(self.coerce(x, &Type::Scalar(DType::F32), &loc)?);
        }
        let one = self.op1(OpKind::Constant, vec![], Type::Scalar(DType::F32), vec![("value", Attr::float(1.0))], &loc);
        let step = self.op1(OpKind::Add, vec![o.step, one], Type::Scalar(DType::F32), vec![], &loc);
        operands.push(step);
        let name = "fused_adam";
        let callee = (self.resolve)(&stdlib_callee_name(name, g_dtype))
            .ok_or_else(|| LowerError { message: format!("the stdlib has no `{name}` for {g_dtype}"), range })?;
        let written = kernel_written_params(&callee.def, &callee.inf);
        if written != [0, 2, 3] {
            return unsupported(
                format!("the stdlib `{name}` writes the parameters {written:?}, not P, M and V"),
                range,
            );
        }
        let attrs = vec![
            ("callee", Attr::Str(SmolStr::new(name))),
            ("written", Attr::Ints(vec![0, 2, 3])),
            ("stdlib", Attr::Str(SmolStr::new(g_dtype.to_string()))),
            ("optimizer_state", Attr::Str(o.name.clone())),
            ("policies", Attr::Str(o.policies.clone())),
        ];
        let types = vec![flat(DType::F32), flat(DType::F32), flat(DType::F32)];
        let r = self.g.b.op(OpKind::CallKernel, operands, types, attrs, &loc);
        let p_new = self.op1(OpKind::Reshape, vec![r[0]], full(DType::F32), vec![], &loc);
        let m_new = self.op1(OpKind::Reshape, vec![r[1]], full(DType::F32), vec![], &loc);
        let v_new = self.op1(OpKind::Reshape, vec![r[2]], full(DType::F32), vec![], &loc);
        let w_new = self.op1(OpKind::Cast, vec![p_new], full(o.dtype), vec![], &loc);
        let master = o.master.map(|_| p_new);
        let state = OptVal { m: m_new, v: v_new, step, master, ..o };
        Ok(Val::Tuple(vec![Val::One(w_new), Val::State(StateVal::Optimizer(state))]))
    }

    /// The cache an expression gives.
    pub(super) fn cache(&mut self, e: ExprId) -> R<CacheVal> {
        match self.expr(e)? {
            Val::State(StateVal::Cache(c)) => Ok(c),
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
        Ok(Val::State(StateVal::Cache(CacheVal { k: results[0], v: results[1], ..c })))
    }
}

/// The names of a function's returned values when a state is among them (`y`,
/// `cache.K`, `cache.V`); `None` when none is returned (the usual `return0`, ...).
pub(super) fn return_names(vals: &[Val]) -> Option<Vec<SmolStr>> {
    if !vals.iter().any(|v| matches!(v, Val::State(_))) {
        return None;
    }
    let mut names = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        match v {
            Val::State(s) => names.extend(s.names().into_iter().map(SmolStr::new)),
            _ => names.push(SmolStr::new(format!("return{i}"))),
        }
    }
    Some(names)
}
