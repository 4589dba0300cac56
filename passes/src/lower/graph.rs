//! Graph functions (`@jit`) → Graph IR: whole-tensor ops, explicit broadcasts and
//! casts, effects (dropout, randn, `with prefetch(...)`) ordered by a token chain, ops
//! inside `with device(...)` tagged with their `device`, helpers and other graph functions
//! inlined, and `grad(f, wrt=...)(args)` expanded into `f`'s forward graph followed by
//! its backward graph (`crate::autodiff`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim, Inference, Resolution, Signature, Ty};
use tessera_frontend::syntax::ast::*;
use tessera_frontend::text::TextRange;

use super::kernel::{ir_type, LowerError};
use crate::ir::*;

mod kernel_call;
pub use kernel_call::{stdlib_callee, stdlib_callee_name};
mod custom_vjp;
mod dist;
mod inline;
mod losses;
mod pipeline;
mod scan;
mod state;
mod transforms;

type R<T> = Result<T, LowerError>;

fn unsupported<T>(what: impl Into<String>, range: TextRange) -> R<T> {
    Err(LowerError { message: what.into(), range })
}

/// A function a graph function calls, with what checking it produced.
#[derive(Clone)]
pub struct Callee {
    pub def: Arc<FunctionDef>,
    pub sig: Arc<Signature>,
    pub inf: Arc<Inference>,
    pub is_kernel: bool,
}

/// Finds a function of the same file by name.
pub type Resolver<'r> = dyn Fn(&str) -> Option<Callee> + 'r;

#[derive(Clone, Debug)]
enum Val {
    One(ValueId),
    Many(Vec<ValueId>),
    /// Compile-time values (`heads=` literal ints, `causal=True`) stay as constants too,
    /// but a Python `None` has no IR value.
    None,
    /// A `KVCache` or an `OptimizerState` (`state`): the tensors it is.
    State(state::StateVal),
    /// A tuple with a cache among its items (other tuples are `Many`).
    Tuple(Vec<Val>),
}

/// The shared state of one graph function's lowering (inlined callees included).
struct Graph<'f> {
    b: Builder<'f>,
    /// The current effect token.
    token: ValueId,
    /// Dropout streams handed out so far (each dropout site draws its own mask).
    streams: i64,
    /// Inlining depth, to stop recursion.
    depth: u32,
    /// The `custom_vjp(f, backward)` calls lowered so far (`grad` reads them).
    custom_vjps: Vec<crate::autodiff::CustomVjp>,
    /// Lowering a transform's scratch copy of a function (`transforms::trace`).
    tracing: bool,
    /// Module-level `dist.tensor`s the function reads, each an implicit parameter.
    globals: HashMap<SmolStr, ValueId>,
}

pub fn graph_function_to_ir(
    name: &str,
    def: &FunctionDef,
    sig: &Signature,
    inf: &Inference,
    resolve: &Resolver<'_>,
) -> R<Func> {
    let loc = Loc::new(name, def.name_range);
    let mut func = Func::new(name, FuncKind::Graph, Level::Graph, loc.clone());
    let mut params = Vec::new();
    let mut states = HashMap::new();
    for (i, p) in sig.params.iter().enumerate() {
        // A KV cache or optimizer state parameter is the tensors it holds (`state`).
        if let Some(s) = state::state_param(&mut func, p, def, i) {
            states.insert(SmolStr::new(&p.name), s);
            params.push(None);
            continue;
        }
        let ty = param_type(&p.ty).ok_or_else(|| LowerError {
            message: format!("parameter `{}` of type {} cannot be passed to a graph function", p.name, p.ty),
            range: p.name_range,
        })?;
        let v = func.new_value(ty, Some(&p.name));
        func.params.push(v);
        params.push(Some(v));
    }
    func.set_attr("decorator", Attr::Str(SmolStr::new(sig.decorators.join(","))));
    let mut b = Builder::new(&mut func);
    let token = b.op1(OpKind::EffectToken, vec![], Type::Token, vec![], &loc);
    let mut g =
        Graph { b, token, streams: 0, depth: 0, custom_vjps: Vec::new(), tracing: false, globals: HashMap::new() };
    let ret = {
        let mut body = Body {
            g: &mut g,
            name: SmolStr::new(name),
            def,
            sig,
            inf,
            resolve,
            env: HashMap::new(),
            dims: BTreeMap::new(),
        };
        for (p, v) in sig.params.iter().zip(&params) {
            let val = match v {
                Some(v) => Val::One(*v),
                None => Val::State(states[p.name.as_str()].clone()),
            };
            body.env.insert(SmolStr::new(&p.name), val);
        }
        body.stmts(&def.body)?
    };
    let operands = match ret {
        Some(Val::One(v)) => vec![v],
        Some(Val::Many(vs)) => vs,
        Some(Val::State(c)) => {
            func_returns(&mut g, &[Val::State(c.clone())]);
            c.values()
        }
        Some(Val::Tuple(vals)) => {
            func_returns(&mut g, &vals);
            let mut out = Vec::new();
            for v in vals {
                match v {
                    Val::One(v) => out.push(v),
                    Val::State(c) => out.extend(c.values()),
                    _ => return unsupported("a nested tuple or `None` in a returned tuple", def.name_range),
                }
            }
            out
        }
        _ => vec![],
    };
    g.b.op(OpKind::Return, operands, vec![], vec![], &loc);
    g.b.finish();
    // The backward graph computes adjoints of every input; keep the ones used.
    crate::tile::remove_dead_ops(&mut func);
    Ok(func)
}

/// Records the names of returned values when a cache is among them (`state::return_names`).
fn func_returns(g: &mut Graph<'_>, vals: &[Val]) {
    if let Some(names) = state::return_names(vals) {
        g.b.func.set_attr("returns", Attr::Str(SmolStr::new(names.join(","))));
    }
}

/// The IR type of a graph parameter: tensors, and scalars (`lr: float`, `heads: int`).
fn param_type(ty: &Ty) -> Option<Type> {
    match ty {
        Ty::Float(_) => Some(Type::Scalar(DType::F32)),
        Ty::Bool(_) => Some(Type::Scalar(DType::Bool)),
        other => ir_type(other),
    }
}

/// One function body being lowered into the shared graph (the graph function itself or
/// an inlined callee).
struct Body<'a, 'g, 'f> {
    g: &'g mut Graph<'f>,
    name: SmolStr,
    def: &'a FunctionDef,
    sig: &'a Signature,
    inf: &'a Inference,
    resolve: &'a Resolver<'a>,
    env: HashMap<SmolStr, Val>,
    /// An inlined callee's dim symbols as the caller's dims (`b` of a helper's
    /// `Tensor["b", "D"]` called with a `[B//4, D]` microbatch is `B//4`): the types the
    /// callee's inference gives are rewritten with them, so Graph IR speaks only of the
    /// graph function's own symbols.
    dims: BTreeMap<String, Dim>,
}

impl Body<'_, '_, '_> {
    fn loc(&self, range: TextRange) -> Loc {
        Loc::new(&self.name, range)
    }

    fn range(&self, e: ExprId) -> TextRange {
        self.def.arena.expr_range(e)
    }

    fn ty_of(&self, e: ExprId) -> &Ty {
        self.inf.type_of(e)
    }

    fn vty(&self, v: ValueId) -> Type {
        self.g.b.func.ty(v).clone()
    }

    fn result_type(&self, e: ExprId) -> R<Type> {
        self.ir_type(self.ty_of(e)).ok_or_else(|| LowerError {
            message: match self.ty_of(e) {
                // The checker could not infer it (an unannotated helper's result, say):
                // it reported nothing, as it does for any unknown, so say what to do.
                Ty::Unknown => "the checker could not infer this value's type: annotate the parameters and result \
                                of the helper it comes from"
                    .to_string(),
                ty => format!("a value of type {ty} is not supported in a graph function yet"),
            },
            range: self.range(e),
        })
    }

    /// The IR type of a checked type, in the graph function's dims ([`Body::dims`]).
    fn ir_type(&self, ty: &Ty) -> Option<Type> {
        let t = param_type(ty)?;
        Some(match t {
            Type::Tensor(mut tt) if !self.dims.is_empty() => {
                tt.dims = tt.dims.iter().map(|d| d.substitute(&|s| self.dims.get(s).cloned())).collect();
                Type::Tensor(tt)
            }
            other => other,
        })
    }

    fn op1(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> ValueId {
        self.g.b.op1(kind, operands, ty, attrs, loc)
    }

    // ----- statements ------------------------------------------------------------

    /// Lowers statements; returns the value of a `return`.
    fn stmts(&mut self, stmts: &[StmtId]) -> R<Option<Val>> {
        for &s in stmts {
            let range = self.def.arena.stmt_range(s);
            match self.def.arena.stmt(s).clone() {
                Stmt::Expr(e) => {
                    if !matches!(self.def.arena.expr(e), Expr::Str(_) | Expr::Ellipsis) {
                        self.expr(e)?;
                    }
                }
                Stmt::Assign { target, value, .. } => {
                    let v = self.expr(value)?;
                    self.bind(target, v)?;
                }
                Stmt::AugAssign { target, op, value, .. } => {
                    let current = self.value(target)?;
                    let v = self.value(value)?;
                    let combined = self.binary(op, current, v, target, range)?;
                    self.bind(target, Val::One(combined))?;
                }
                Stmt::Return(value) => {
                    return Ok(Some(match value {
                        Some(v) => self.expr(v)?,
                        None => Val::None,
                    }))
                }
                Stmt::Pass => {}
                Stmt::With { items, body } => {
                    // Placement effects do not change what is computed; Graph IR records
                    // them: `device(X)` as a `device` attribute on every op lowered inside
                    // (the innermost `device` wins), `prefetch(obj, ...)` as a
                    // `graph.prefetch` effect on the token chain.
                    let mut devices = Vec::new();
                    for item in &items {
                        self.with_item(item, &mut devices)?;
                    }
                    let ret = self.stmts(&body)?;
                    let end = self.g.b.func.ops.len();
                    for (from, device) in devices.into_iter().rev() {
                        for op in &mut self.g.b.func.ops[from..end] {
                            if op.attr("device").is_none() {
                                op.attrs.push(("device", Attr::Str(device.clone())));
                            }
                        }
                    }
                    if let Some(v) = ret {
                        return Ok(Some(v));
                    }
                }
                _ => return unsupported("control flow in a graph function (graph functions are straight-line)", range),
            }
        }
        Ok(None)
    }

    /// One item of a `with` statement: `device(X)` pushes (the first op it covers, X)
    /// onto `devices`; `prefetch(obj, into=, overlap=)` emits a `graph.prefetch` of obj's
    /// values on the token chain (its only result is the next token).
    fn with_item(&mut self, item: &WithItem, devices: &mut Vec<(usize, SmolStr)>) -> R<()> {
        let range = self.range(item.value);
        let what = "a `with` item other than `device(...)` or `prefetch(...)`";
        let Expr::Call { func, args } = self.def.arena.expr(item.value).clone() else {
            return unsupported(what, range);
        };
        let name = match self.ty_of(func) {
            Ty::Builtin(p) => p.rsplit('.').next().unwrap_or(p),
            _ => return unsupported(what, range),
        };
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let arg = |key: &str, pos: usize| {
            args.iter()
                .find(|a| a.name.as_ref().is_some_and(|(n, _)| n == key))
                .map(|a| a.value)
                .or_else(|| positional.get(pos).copied())
        };
        match name {
            "device" => {
                let Some(kind) = arg("kind", 0) else { return unsupported("`device` needs `kind`", range) };
                let device = match (self.ty_of(kind), self.def.arena.expr(kind)) {
                    (Ty::Str(Some(s)), _) => SmolStr::new(s),
                    (_, Expr::Name(n)) => SmolStr::new(n.as_str()),
                    _ => return unsupported("a device that is not `gpu`, `cpu` or a string", self.range(kind)),
                };
                devices.push((self.g.b.func.ops.len(), device));
            }
            "prefetch" => {
                let Some(obj) = arg("obj", 0) else { return unsupported("`prefetch` needs `obj`", range) };
                let text = |slot: Option<ExprId>, key: &str, default: &str, body: &Self| -> R<SmolStr> {
                    let Some(e) = slot else { return Ok(SmolStr::new(default)) };
                    match body.ty_of(e) {
                        Ty::Str(Some(s)) => Ok(SmolStr::new(s)),
                        _ => unsupported(format!("prefetch's `{key}` must be a string constant"), body.range(e)),
                    }
                };
                let into = text(arg("into", 1), "into", "smem", self)?;
                if !matches!(into.as_str(), "smem" | "l2" | "hbm") {
                    return unsupported(format!("prefetch into \"{into}\""), range);
                }
                let overlap = text(arg("overlap", 2), "overlap", "compute", self)?;
                let mut operands = match self.expr(obj)? {
                    Val::One(v) => vec![v],
                    Val::Many(vs) => vs,
                    Val::State(c) => c.values(),
                    Val::None | Val::Tuple(_) => return unsupported("a prefetch of this value", self.range(obj)),
                };
                operands.push(self.g.token);
                let loc = self.loc(range);
                let attrs = vec![("into", Attr::Str(into)), ("overlap", Attr::Str(overlap))];
                self.g.token = self.g.b.op(OpKind::Prefetch, operands, vec![Type::Token], attrs, &loc)[0];
            }
            _ => return unsupported(what, range),
        }
        if let Some(alias) = item.alias {
            self.bind(alias, Val::None)?;
        }
        Ok(())
    }

    fn bind(&mut self, target: ExprId, v: Val) -> R<()> {
        match (self.def.arena.expr(target).clone(), v) {
            (Expr::Name(n), v) => {
                if let Val::One(x) = &v {
                    if self.g.b.func.values[x.0 as usize].name.is_none() {
                        self.g.b.name(*x, &n);
                    }
                }
                self.env.insert(n, v);
                Ok(())
            }
            (Expr::Paren(inner), v) => self.bind(inner, v),
            (Expr::Tuple(items) | Expr::List(items), Val::Many(vs)) if items.len() == vs.len() => {
                for (item, v) in items.into_iter().zip(vs) {
                    self.bind(item, Val::One(v))?;
                }
                Ok(())
            }
            (Expr::Tuple(items) | Expr::List(items), Val::Tuple(vs)) if items.len() == vs.len() => {
                for (item, v) in items.into_iter().zip(vs) {
                    self.bind(item, v)?;
                }
                Ok(())
            }
            _ => unsupported("this assignment target", self.range(target)),
        }
    }

    // ----- expressions -----------------------------------------------------------

    fn value(&mut self, e: ExprId) -> R<ValueId> {
        match self.expr(e)? {
            Val::One(v) => Ok(v),
            _ => unsupported("a tuple or `None` where one value is expected", self.range(e)),
        }
    }

    fn expr(&mut self, e: ExprId) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        match self.def.arena.expr(e).clone() {
            Expr::Name(n) => self.name(e, &n),
            Expr::Int(v) => {
                Ok(Val::One(self.op1(OpKind::Constant, vec![], Type::Index, vec![("value", Attr::Int(v))], &loc)))
            }
            Expr::Float(f) => Ok(Val::One(self.op1(
                OpKind::Constant,
                vec![],
                Type::Scalar(DType::F32),
                vec![("value", Attr::float(f.get()))],
                &loc,
            ))),
            Expr::Bool(b) => Ok(Val::One(self.op1(
                OpKind::Constant,
                vec![],
                Type::Scalar(DType::Bool),
                vec![("value", Attr::Bool(b))],
                &loc,
            ))),
            Expr::NoneLit => Ok(Val::None),
            Expr::Paren(inner) => self.expr(inner),
            Expr::Tuple(items) | Expr::List(items) => {
                let mut vals = Vec::new();
                for &i in &items {
                    vals.push(self.expr(i)?);
                }
                if vals.iter().any(|v| matches!(v, Val::State(_))) {
                    return Ok(Val::Tuple(vals));
                }
                let mut vs = Vec::new();
                for (v, &i) in vals.into_iter().zip(&items) {
                    match v {
                        Val::One(v) => vs.push(v),
                        _ => return unsupported("a tuple or `None` where one value is expected", self.range(i)),
                    }
                }
                Ok(Val::Many(vs))
            }
            Expr::Attribute { object, name, .. } if self.is_state(object) => self.state_attribute(object, &name),
            Expr::Attribute { object, name, .. } if name == "T" => {
                let x = self.value(object)?;
                let rank = self.vty(x).dims().len();
                if rank < 2 {
                    return unsupported("`.T` of a tensor with fewer than two dims", range);
                }
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                perm.swap(rank - 1, rank - 2);
                let t = self.result_type(e)?;
                Ok(Val::One(self.op1(OpKind::GTranspose, vec![x], t, vec![("perm", Attr::Ints(perm))], &loc)))
            }
            Expr::Call { func, args } => self.call(e, func, &args),
            Expr::Binary { op, lhs, rhs } => {
                let (l, r) = (self.value(lhs)?, self.value(rhs)?);
                if op == BinOp::MatMul {
                    let t = self.result_type(e)?;
                    return Ok(Val::One(self.matmul(l, r, t, &loc)?));
                }
                Ok(Val::One(self.binary(op, l, r, e, range)?))
            }
            Expr::Unary { op: UnaryOp::Neg, operand } => {
                let v = self.value(operand)?;
                let t = self.result_type(e)?;
                let v = self.coerce(v, &t, &loc)?;
                Ok(Val::One(self.op1(OpKind::Neg, vec![v], t, vec![], &loc)))
            }
            Expr::Unary { op: UnaryOp::Pos, operand } => self.expr(operand),
            Expr::Compare { op, lhs, rhs } => {
                let (l, r) = (self.value(lhs)?, self.value(rhs)?);
                Ok(Val::One(self.compare(op, l, r, e)?))
            }
            Expr::Str(_) => Ok(Val::None),
            _ => unsupported("this kind of expression is not supported in a graph function yet", range),
        }
    }

    fn name(&mut self, e: ExprId, n: &str) -> R<Val> {
        if let Some(v) = self.env.get(n) {
            return Ok(v.clone());
        }
        match self.inf.resolution(e) {
            Some(Resolution::Symbol(s)) => {
                let s = s.clone();
                self.symbol_value(&s, self.loc(self.range(e)))
            }
            Some(Resolution::Constant(_)) if matches!(self.inf.type_of(e), Ty::DistTensor(_)) => {
                let Ty::DistTensor(t) = self.inf.type_of(e).clone() else { unreachable!("matched above") };
                self.global_tensor(n, t, self.range(e))
            }
            _ => unsupported(format!("`{n}` here (only parameters and local values are lowered)"), self.range(e)),
        }
    }

    /// A module-level `dist.tensor` read by the function: an implicit parameter of the
    /// function, named after the constant (its layout comes from the constant's
    /// `ShardSpec`; `dist::function::parameter_shardings`). Graph IR lists them in the
    /// function's `globals` attribute.
    fn global_tensor(&mut self, n: &str, t: tessera_frontend::check::types::TensorType, range: TextRange) -> R<Val> {
        if let Some(&v) = self.g.globals.get(n) {
            return Ok(Val::One(v));
        }
        let ty = param_type(&Ty::Tensor(t)).ok_or_else(|| LowerError {
            message: format!("the distributed tensor `{n}` cannot be passed to a graph function"),
            range,
        })?;
        let func = &mut *self.g.b.func;
        let v = func.new_value(ty, Some(n));
        func.params.push(v);
        let mut names: Vec<String> = func
            .attr("globals")
            .and_then(|a| a.as_str())
            .map(|s| s.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        names.push(n.to_string());
        func.set_attr("globals", Attr::Str(SmolStr::new(names.join(","))));
        self.g.globals.insert(SmolStr::new(n), v);
        Ok(Val::One(v))
    }

    /// A dim symbol's value: the size of the first parameter tensor that has it.
    fn symbol_value(&mut self, sym: &str, loc: Loc) -> R<Val> {
        for p in &self.sig.params {
            if let Ty::Tensor(t) = &p.ty {
                if let Some(axis) = t.dims.iter().position(|d| d.as_sym() == Some(sym)) {
                    let Some(Val::One(tensor)) = self.env.get(p.name.as_str()).cloned() else { continue };
                    let v = self.op1(
                        OpKind::TensorDim,
                        vec![tensor],
                        Type::Index,
                        vec![("axis", Attr::Int(axis as i64))],
                        &loc,
                    );
                    return Ok(Val::One(v));
                }
            }
        }
        unsupported(format!("the dim symbol `{sym}` as a value"), loc.range)
    }

    /// Converts a value to `want` (a tensor type): scalars are broadcast, tensors cast
    /// and broadcast (NumPy rules: trailing dims align).
    fn coerce(&mut self, v: ValueId, want: &Type, loc: &Loc) -> R<ValueId> {
        let have = self.vty(v);
        if have == *want {
            return Ok(v);
        }
        let Type::Tensor(want_t) = want else {
            return match (&have, want) {
                (Type::Scalar(a), Type::Scalar(b)) if a == b => Ok(v),
                (Type::Index | Type::Scalar(_), Type::Scalar(_)) => {
                    Ok(self.op1(OpKind::Cast, vec![v], want.clone(), vec![], loc))
                }
                _ => unsupported(format!("converting {have} to {want}"), loc.range),
            };
        };
        match &have {
            Type::Scalar(_) | Type::Index => {
                let s = if have == Type::Scalar(want_t.dtype) {
                    v
                } else {
                    self.op1(OpKind::Cast, vec![v], Type::Scalar(want_t.dtype), vec![], loc)
                };
                Ok(self.op1(OpKind::GBroadcast, vec![s], want.clone(), vec![], loc))
            }
            Type::Tensor(t) => {
                let mut v = v;
                if t.dtype != want_t.dtype {
                    let cast =
                        TensorType { dims: t.dims.clone(), dtype: want_t.dtype, policies: want_t.policies.clone() };
                    v = self.op1(OpKind::Cast, vec![v], Type::Tensor(cast), vec![], loc);
                }
                if t.dims != want_t.dims {
                    if t.dims.len() > want_t.dims.len() {
                        return unsupported(format!("broadcasting {have} to {want}"), loc.range);
                    }
                    v = self.op1(OpKind::GBroadcast, vec![v], want.clone(), vec![], loc);
                } else if self.vty(v) != *want {
                    // Same dims and dtype, other policies: a no-op retype is a cast.
                    v = self.op1(OpKind::Cast, vec![v], want.clone(), vec![], loc);
                }
                Ok(v)
            }
            _ => unsupported(format!("converting {have} to {want}"), loc.range),
        }
    }

    fn binary(&mut self, op: BinOp, l: ValueId, r: ValueId, e: ExprId, range: TextRange) -> R<ValueId> {
        let loc = self.loc(range);
        let kind = match op {
            BinOp::Add => OpKind::Add,
            BinOp::Sub => OpKind::Sub,
            BinOp::Mul => OpKind::Mul,
            BinOp::Div => OpKind::Div,
            BinOp::Pow => OpKind::Pow,
            BinOp::FloorDiv => OpKind::FloorDiv,
            BinOp::Mod => OpKind::Rem,
            BinOp::MatMul => {
                let t = self.result_type(e)?;
                return self.matmul(l, r, t, &loc);
            }
            other => return unsupported(format!("`{}` on tensors", other.symbol()), range),
        };
        let t = self.result_type(e)?;
        let (l, r) = (self.coerce(l, &t, &loc)?, self.coerce(r, &t, &loc)?);
        Ok(self.op1(kind, vec![l, r], t, vec![], &loc))
    }

    /// `a < b`, `a == b`, ...: an elementwise `arith.cmp {pred}` whose operands are
    /// broadcast to the result's dims in the tensor operand's dtype (a Python number
    /// adopts it, as in arithmetic); the result is a bool tensor (or a bool scalar).
    fn compare(&mut self, op: CmpOp, l: ValueId, r: ValueId, e: ExprId) -> R<ValueId> {
        let range = self.range(e);
        let loc = self.loc(range);
        let Some(pred) = op.predicate() else {
            return unsupported(format!("`{}` in a graph function", op.symbol()), range);
        };
        let t = self.result_type(e)?;
        let attrs = vec![("pred", Attr::Str(SmolStr::new(pred)))];
        let Type::Tensor(rt) = &t else { return Ok(self.op1(OpKind::Cmp, vec![l, r], t, attrs, &loc)) };
        let operand_elem = [l, r].into_iter().find_map(|v| match self.vty(v) {
            Type::Tensor(tt) => Some((tt.dtype, tt.policies)),
            _ => None,
        });
        let Some((dtype, policies)) = operand_elem else {
            return unsupported("a tensor comparison without a tensor operand", range);
        };
        let want = Type::Tensor(TensorType { dims: rt.dims.clone(), dtype, policies });
        let (l, r) = (self.coerce(l, &want, &loc)?, self.coerce(r, &want, &loc)?);
        Ok(self.op1(OpKind::Cmp, vec![l, r], t, attrs, &loc))
    }

    fn matmul(&mut self, a: ValueId, b: ValueId, t: Type, loc: &Loc) -> R<ValueId> {
        let (Type::Tensor(ta), Type::Tensor(tb)) = (self.vty(a), self.vty(b)) else {
            return unsupported("`@` of non-tensors", loc.range);
        };
        if ta.dims.len() < 2 || tb.dims.len() < 2 {
            return unsupported("`@` needs tensors of rank 2 or more", loc.range);
        }
        let attrs = crate::ir::policy::acc_attrs(&[&Type::Tensor(ta), &Type::Tensor(tb)]);
        Ok(self.op1(OpKind::MatMul, vec![a, b], t, attrs, loc))
    }

    fn effect(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> ValueId {
        self.g.b.effect(kind, operands, ty, attrs, loc, &mut self.g.token)
    }

    /// The stream of a stochastic cast of `x` to `t`: a float tensor converted to a bf16,
    /// f16 or fp8 tensor type that carries `@stochastic_round` (the checker dropped it
    /// where it does not act, W0409).
    fn stochastic_stream(&mut self, x: ValueId, t: &Type) -> Option<i64> {
        let Type::Tensor(tt) = t else { return None };
        let narrow = matches!(tt.dtype, DType::BF16 | DType::F16) || tt.dtype.is_fp8();
        let from_float = self.vty(x).dtype().is_some_and(DType::is_float);
        if !(narrow && from_float && tt.policies.contains(&tessera_frontend::check::Policy::StochasticRound)) {
            return None;
        }
        let stream = self.g.streams;
        self.g.streams += 1;
        Some(stream)
    }

    fn dropout(&mut self, x: ValueId, p: ValueId, loc: &Loc) -> R<ValueId> {
        let p = self.coerce(p, &Type::Scalar(DType::F32), loc)?;
        let stream = self.g.streams;
        self.g.streams += 1;
        let t = self.vty(x);
        Ok(self.effect(OpKind::Dropout, vec![x, p], t, vec![("stream", Attr::Int(stream))], loc))
    }

    fn call(&mut self, e: ExprId, func: ExprId, args: &[Arg]) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let kw = |name: &str| args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name)).map(|a| a.value);
        let arg = |name: &str, pos: usize| kw(name).or_else(|| positional.get(pos).copied());
        let callee_ty = self.ty_of(func).clone();
        let path = match callee_ty {
            Ty::Builtin(p) if self.is_stdlib_kernel(p) => return self.stdlib_kernel_call(e, p, args),
            Ty::Builtin(p) => p,
            Ty::Function(name) => {
                if let Some(kernel) = self.kernel_callee(&name) {
                    return self.kernel_call(e, &kernel, &name, args, None);
                }
                return self.inline_call(&name, args, range);
            }
            Ty::Grad { of, wrt } => return self.grad_call(&of, &wrt, args, range),
            Ty::Method { name, .. } => {
                let Expr::Attribute { object, .. } = self.def.arena.expr(func).clone() else {
                    return unsupported("a method call of this form", range);
                };
                return self.state_method(e, object, &name, args);
            }
            Ty::Vmap { of, in_axes, out_axes } => return self.vmap_call(&of, &in_axes, &out_axes, args, range),
            Ty::Checkpoint { of } => return self.checkpoint_call(&of, args, range),
            Ty::CustomVjp { of, backward } => return self.custom_vjp_call(&of, &backward, args, range),
            Ty::Pipeline { of, stages, microbatches, axis } => {
                return self.pipeline_call(e, &of, (stages, microbatches), &axis, args)
            }
            other => return unsupported(format!("calling {other} in a graph function"), range),
        };
        // `p = dist.pipeline(stage, ...)`: the function value is its type; a call of `p`
        // lowers it.
        if path == "dist.pipeline" {
            return Ok(Val::None);
        }
        if path.starts_with("dist.") {
            return self.collective_call(e, path, args);
        }
        // A constant the checker folded (`float("-inf")`, `float(2)`).
        if let (Ty::Float(Some(v)), "float") = (self.ty_of(e).clone(), path) {
            return Ok(Val::One(self.op1(
                OpKind::Constant,
                vec![],
                Type::Scalar(DType::F32),
                vec![("value", Attr::float(v.get()))],
                &loc,
            )));
        }
        let name = path.rsplit('.').next().unwrap_or(path);
        let need = |slot: Option<ExprId>, what: &str| {
            slot.ok_or_else(|| LowerError { message: format!("`{name}` needs `{what}`"), range })
        };
        let unary = match name {
            "exp" => Some(OpKind::Exp),
            "log" => Some(OpKind::Log),
            "sqrt" => Some(OpKind::Sqrt),
            "rsqrt" => Some(OpKind::Rsqrt),
            "tanh" => Some(OpKind::Tanh),
            "sigmoid" => Some(OpKind::Sigmoid),
            "relu" => Some(OpKind::Relu),
            "gelu" => Some(OpKind::Gelu),
            "silu" => Some(OpKind::Silu),
            "abs" => Some(OpKind::Abs),
            "neg" => Some(OpKind::Neg),
            _ => None,
        };
        if let Some(kind) = unary {
            let x = self.value(need(arg("x", 0), "x")?)?;
            let t = self.result_type(e)?;
            let x = self.coerce(x, &t, &loc)?;
            return Ok(Val::One(self.op1(kind, vec![x], t, vec![], &loc)));
        }
        let result: R<Type> = self.result_type(e);
        match name {
            "cast" | "cast_like" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let t = result.clone()?;
                if self.vty(x) == t {
                    return Ok(Val::One(x));
                }
                // `cast(x, "fp8_e4m3 @saturate")`: the conversion clamps (docs/ir.md).
                let saturate = match &t {
                    Type::Tensor(tt) => crate::ir::policy::wants_saturate(&tessera_frontend::check::ElemType {
                        dtype: tt.dtype,
                        policies: tt.policies.clone(),
                    }),
                    _ => false,
                };
                let mut attrs = if saturate { vec![(crate::ir::policy::SATURATE, Attr::Bool(true))] } else { vec![] };
                // `cast(x, "bf16 @stochastic_round")`: rounds with the uniforms of its own
                // stream (numbered like dropout's), `{rounding = "stochastic", stream}`.
                if let Some(stream) = self.stochastic_stream(x, &t) {
                    attrs.push((crate::ir::policy::ROUNDING, Attr::Str(crate::ir::policy::STOCHASTIC.into())));
                    attrs.push(("stream", Attr::Int(stream)));
                }
                Ok(Val::One(self.op1(OpKind::Cast, vec![x], t, attrs, &loc)))
            }
            "matmul" | "gemm" => {
                let a = self.value(need(arg("a", 0), "a")?)?;
                let b = self.value(need(arg("b", 1), "b")?)?;
                let t = result.clone()?;
                Ok(Val::One(self.matmul(a, b, t, &loc)?))
            }
            "maximum" | "minimum" | "pow" => {
                let a = self.value(need(arg("a", 0), "a")?)?;
                let b = self.value(need(arg("b", 1), "b")?)?;
                let t = result.clone()?;
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let kind = match name {
                    "maximum" => OpKind::Max,
                    "minimum" => OpKind::Min,
                    _ => OpKind::Pow,
                };
                Ok(Val::One(self.op1(kind, vec![a, b], t, vec![], &loc)))
            }
            "where" => {
                // `where(cond, a, b)`: a and b broadcast to the result, the condition to
                // a bool tensor of its dims; one `arith.select`.
                let cond = self.value(need(arg("cond", 0), "cond")?)?;
                let a = self.value(need(arg("a", 1), "a")?)?;
                let b = self.value(need(arg("b", 2), "b")?)?;
                let t = result.clone()?;
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let mask = match &t {
                    Type::Tensor(tt) => {
                        Type::Tensor(TensorType { dims: tt.dims.clone(), dtype: DType::Bool, policies: vec![] })
                    }
                    _ => Type::Scalar(DType::Bool),
                };
                let cond = self.coerce(cond, &mask, &loc)?;
                Ok(Val::One(self.op1(OpKind::Select, vec![cond, a, b], t, vec![], &loc)))
            }
            "sum" | "mean" | "max" | "min" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let rank = self.vty(x).dims().len() as i64;
                let axes = match arg("axis", 1) {
                    None => (0..rank).collect(),
                    Some(a) => self.int_list(a)?.into_iter().map(|ax| if ax < 0 { ax + rank } else { ax }).collect(),
                };
                let keepdim = arg("keepdim", 2).is_some_and(|k| matches!(self.ty_of(k), Ty::Bool(Some(true))));
                let t = result.clone()?;
                let mut attrs = vec![
                    ("kind", Attr::Str(SmolStr::new(name))),
                    ("axes", Attr::Ints(axes)),
                    ("keepdim", Attr::Bool(keepdim)),
                ];
                if matches!(name, "sum" | "mean") {
                    attrs.extend(crate::ir::policy::acc_attrs(&[&self.vty(x)]));
                }
                Ok(Val::One(self.op1(OpKind::GReduce, vec![x], t, attrs, &loc)))
            }
            "softmax_safe" | "logsumexp_safe" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let rank = self.vty(x).dims().len() as i64;
                let axis = match arg("axis", 1) {
                    Some(a) => self.int_list(a)?.first().copied().unwrap_or(-1),
                    None => -1,
                };
                let axis = if axis < 0 { axis + rank } else { axis };
                let t = result.clone()?;
                let kind = if name == "softmax_safe" { OpKind::Softmax } else { OpKind::LogSumExp };
                Ok(Val::One(self.op1(kind, vec![x], t, vec![("axis", Attr::Int(axis))], &loc)))
            }
            "rmsnorm_safe" | "layernorm_safe" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let default_eps = if name == "rmsnorm_safe" { 1e-6 } else { 1e-5 };
                let eps = arg("eps", 1).map(|a| self.float_const(a)).transpose()?.unwrap_or(default_eps);
                let mut operands = vec![x];
                let mut has = vec![];
                if let Some(w) = arg("weight", 2) {
                    if let Val::One(w) = self.expr(w)? {
                        operands.push(w);
                        has.push("weight");
                    }
                }
                if name == "layernorm_safe" {
                    if let Some(bias) = arg("bias", 3) {
                        if let Val::One(bv) = self.expr(bias)? {
                            operands.push(bv);
                            has.push("bias");
                        }
                    }
                }
                let t = result.clone()?;
                let kind = if name == "rmsnorm_safe" { OpKind::RmsNorm } else { OpKind::LayerNorm };
                let mut attrs = vec![("eps", Attr::float(eps))];
                if !has.is_empty() {
                    attrs.push(("affine", Attr::Str(SmolStr::new(has.join(",")))));
                }
                Ok(Val::One(self.op1(kind, operands, t, attrs, &loc)))
            }
            "transpose" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let rank = self.vty(x).dims().len();
                let perm = match arg("axes", 1) {
                    Some(a) if !matches!(self.ty_of(a), Ty::NoneVal) => self.int_list(a)?,
                    _ => (0..rank as i64).rev().collect(),
                };
                let t = result.clone()?;
                Ok(Val::One(self.op1(OpKind::GTranspose, vec![x], t, vec![("perm", Attr::Ints(perm))], &loc)))
            }
            "reshape" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let t = result.clone()?;
                Ok(Val::One(self.op1(OpKind::Reshape, vec![x], t, vec![], &loc)))
            }
            "concat" => {
                let xs = match self.expr(need(arg("xs", 0), "xs")?)? {
                    Val::Many(vs) => vs,
                    Val::One(v) => vec![v],
                    Val::None | Val::State(_) | Val::Tuple(_) => return unsupported("concat of these values", range),
                };
                let t = result.clone()?;
                let rank = t.dims().len() as i64;
                let axis = match arg("axis", 1) {
                    Some(a) => self.int_list(a)?.first().copied().unwrap_or(0),
                    None => 0,
                };
                let axis = if axis < 0 { axis + rank } else { axis };
                Ok(Val::One(self.op1(OpKind::Concat, xs, t, vec![("axis", Attr::Int(axis))], &loc)))
            }
            "scan" => {
                let (f, init, xs) = (need(arg("f", 0), "f")?, need(arg("init", 1), "init")?, need(arg("xs", 2), "xs")?);
                self.scan_call(f, init, xs, range)
            }
            "split" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let Ty::Tuple(items) = self.ty_of(e).clone() else {
                    return unsupported("split without a known result type", range);
                };
                let types: Vec<Type> = items.iter().filter_map(|t| self.ir_type(t)).collect();
                let rank = self.vty(x).dims().len() as i64;
                let axis = match arg("axis", 2) {
                    Some(a) => self.int_list(a)?.first().copied().unwrap_or(0),
                    None => 0,
                };
                let axis = if axis < 0 { axis + rank } else { axis };
                let results = self.g.b.op(OpKind::Split, vec![x], types, vec![("axis", Attr::Int(axis))], &loc);
                Ok(Val::Many(results))
            }
            "split_qkv" => {
                let x = self.value(need(arg("qkv", 0), "qkv")?)?;
                let heads = self.value(need(arg("heads", 1), "heads")?)?;
                let Ty::Tuple(items) = self.ty_of(e).clone() else {
                    return unsupported("split_qkv without a known result type", range);
                };
                let types: Vec<Type> = items.iter().filter_map(|t| self.ir_type(t)).collect();
                let results = self.g.b.op(OpKind::SplitQkv, vec![x, heads], types, vec![], &loc);
                Ok(Val::Many(results))
            }
            "merge_heads" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let t = result.clone()?;
                Ok(Val::One(self.op1(OpKind::MergeHeads, vec![x], t, vec![], &loc)))
            }
            "flash_attention" => {
                let q = self.value(need(arg("q", 0), "q")?)?;
                // `flash_attention(q, cache)`: k and v are the cache's.
                let (k, v) = match self.expr(need(arg("k", 1), "k")?)? {
                    Val::State(state::StateVal::Cache(c)) => (c.k, c.v),
                    Val::One(k) => (k, self.value(need(arg("v", 2), "v")?)?),
                    _ => return unsupported("flash_attention's k must be a tensor or a KVCache", range),
                };
                let causal = arg("causal", 3).is_some_and(|c| matches!(self.ty_of(c), Ty::Bool(Some(true))));
                let t = result.clone()?;
                let mut attrs = vec![("causal", Attr::Bool(causal))];
                if let Some(s) = arg("scale", 5) {
                    if !matches!(self.ty_of(s), Ty::NoneVal) {
                        attrs.push(("scale", Attr::float(self.float_const(s)?)));
                    }
                }
                let p = match arg("dropout", 4) {
                    Some(p) => match self.expr(p)? {
                        Val::One(p) => Some(self.coerce(p, &Type::Scalar(DType::F32), &loc)?),
                        _ => None,
                    },
                    None => None,
                };
                match p {
                    Some(p) => {
                        let stream = self.g.streams;
                        self.g.streams += 1;
                        attrs.push(("stream", Attr::Int(stream)));
                        Ok(Val::One(self.effect(OpKind::FlashAttention, vec![q, k, v, p], t, attrs, &loc)))
                    }
                    None => Ok(Val::One(self.op1(OpKind::FlashAttention, vec![q, k, v], t, attrs, &loc))),
                }
            }
            "jvp" => self.jvp_call(args, range),
            // `g = vmap(f, ...)`: the function value is its type; a call of `g` lowers it.
            "vmap" => Ok(Val::None),
            "dropout" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let p = self.value(need(arg("p", 1), "p")?)?;
                Ok(Val::One(self.dropout(x, p, &loc)?))
            }
            "residual" => {
                let x = self.value(need(arg("x", 0), "x")?)?;
                let y = self.value(need(arg("y", 1), "y")?)?;
                let y = match arg("dropout", 2) {
                    Some(p) => match self.expr(p)? {
                        Val::One(p) => self.dropout(y, p, &loc)?,
                        _ => y,
                    },
                    None => y,
                };
                let t = result.clone()?;
                let (x, y) = (self.coerce(x, &t, &loc)?, self.coerce(y, &t, &loc)?);
                Ok(Val::One(self.op1(OpKind::Add, vec![x, y], t, vec![], &loc)))
            }
            "mse" | "cross_entropy" => {
                let (xn, tn) = if name == "mse" { ("pred", "target") } else { ("logits", "target") };
                let x = self.value(need(arg(xn, 0), xn)?)?;
                let target = self.value(need(arg(tn, 1), tn)?)?;
                let t = result.clone()?;
                Ok(Val::One(self.loss(name, x, target, t, &loc)?))
            }
            "randn" => {
                let t = result.clone()?;
                if !matches!(&t, Type::Tensor(tt) if tt.dtype.is_float()) {
                    return unsupported(format!("randn of {t}: a float tensor"), range);
                }
                let mut operands = vec![];
                if let Some(seed) = arg("seed", 2) {
                    match self.expr(seed)? {
                        Val::One(v) if self.vty(v) == Type::Index => operands.push(v),
                        Val::None => {}
                        _ => return unsupported("randn's `seed` must be an int or None", self.range(seed)),
                    }
                }
                let stream = self.g.streams;
                self.g.streams += 1;
                let attrs = vec![("stream", Attr::Int(stream))];
                Ok(Val::One(self.effect(OpKind::Random, operands, t, attrs, &loc)))
            }
            "arange" => {
                let t = result.clone()?;
                Ok(Val::One(self.op1(OpKind::Iota, vec![], t, vec![], &loc)))
            }
            "zeros" | "ones" | "full" => {
                let value = match name {
                    "zeros" => 0.0,
                    "ones" => 1.0,
                    _ => self.float_const(need(arg("value", 1), "value")?)?,
                };
                let t = result.clone()?;
                Ok(Val::One(self.op1(OpKind::Fill, vec![], t, vec![("value", Attr::float(value))], &loc)))
            }
            _ => unsupported(format!("`{path}` in a graph function is not lowered yet"), range),
        }
    }

    fn float_const(&self, e: ExprId) -> R<f64> {
        match self.ty_of(e) {
            Ty::Float(Some(f)) => Ok(f.get()),
            Ty::Int(Some(d)) if d.is_const() => Ok(d.as_const().unwrap_or(0) as f64),
            other => unsupported(format!("a constant number here, not {other}"), self.range(e)),
        }
    }

    fn int_list(&self, e: ExprId) -> R<Vec<i64>> {
        match self.ty_of(e) {
            Ty::Int(Some(d)) if d.is_const() => Ok(vec![d.as_const().unwrap_or(0)]),
            Ty::Tuple(items) | Ty::List(items) => items
                .iter()
                .map(|t| match t {
                    Ty::Int(Some(d)) if d.is_const() => Ok(d.as_const().unwrap_or(0)),
                    _ => unsupported("a constant axis", self.range(e)),
                })
                .collect(),
            _ => unsupported("constant axes", self.range(e)),
        }
    }

    /// `checkpoint(f)(args)`: `f` inlined, each of its ops tagged `checkpoint = "f"` (an
    /// inner checkpoint keeps its own name); `grad` recomputes them for the backward pass
    /// (`autodiff::backward`).
    fn checkpoint_call(&mut self, of: &str, args: &[Arg], range: TextRange) -> R<Val> {
        let first = self.g.b.func.ops.len();
        let value = self.inline_call(of, args, range)?;
        for op in &mut self.g.b.func.ops[first..] {
            if op.attr(crate::autodiff::CHECKPOINT).is_none() {
                op.attrs.push((crate::autodiff::CHECKPOINT, Attr::Str(SmolStr::new(of))));
            }
        }
        Ok(value)
    }

    /// `grad(f, wrt=...)(args)`: `f`'s forward graph, then the backward graph from its
    /// (rank-0) result to the selected parameters.
    fn grad_call(&mut self, of: &str, wrt: &[String], args: &[Arg], range: TextRange) -> R<Val> {
        let callee = self.callee(of, range)?;
        let env = self.bind_arguments(&callee, args, range)?;
        let targets: Vec<String> = if wrt.is_empty() {
            callee
                .sig
                .params
                .iter()
                .filter(|p| matches!(&p.ty, Ty::Tensor(t) if t.elem.dtype.is_float()))
                .map(|p| p.name.clone())
                .collect()
        } else {
            wrt.to_vec()
        };
        let mut wrt_values = Vec::new();
        for t in &targets {
            match env.get(t.as_str()) {
                Some(Val::One(v)) => wrt_values.push(*v),
                _ => return unsupported(format!("`{t}` is not a tensor parameter of `{of}`"), range),
            }
        }
        let first_op = self.g.b.func.ops.len();
        let loss = match self.inline_body(&callee, env, range)? {
            Val::One(v) => v,
            _ => return unsupported(format!("`{of}` must return one rank-0 tensor to be differentiated"), range),
        };
        let forward: Vec<OpId> = (first_op..self.g.b.func.ops.len()).map(|i| OpId(i as u32)).collect();
        let loc = self.loc(range);
        let custom = std::mem::take(&mut self.g.custom_vjps);
        let grads =
            crate::autodiff::backward(&mut self.g.b, &forward, loss, &wrt_values, &custom, &mut self.g.token, &loc);
        self.g.custom_vjps = custom;
        let grads = grads?;
        Ok(Val::Many(grads))
    }
}

/// Dims of a tensor value, for the autodiff and fusion passes.
pub fn tensor_dims(f: &Func, v: ValueId) -> Option<Vec<Dim>> {
    match f.ty(v) {
        Type::Tensor(t) => Some(t.dims.clone()),
        _ => None,
    }
}
