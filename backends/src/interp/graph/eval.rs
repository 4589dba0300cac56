//! The interpreter: binding parameters, running a function op by op, every op's rule.

use std::collections::BTreeMap;

use tessera_frontend::check::{DType, Dim, ElemType};
use tessera_passes::ir::rand::uniform;
use tessera_passes::ir::{policy, Attr, Func, Op, OpId, OpKind, Type, ValueId};

use crate::interp::numerics::{saturate_index, BinFn, BinOp, Domain, Pred, Rounder, UnFn, UnOp};
use crate::interp::InterpError;
use crate::tensor::{elem_bytes, Arg};

use super::arith::{
    attention, matmul_float, matmul_int, matmul_stepped, norm_rows, reduce_float, reduce_int, softmax_lines, AttnShape,
    ReduceKind,
};
use super::values::{broadcast_shapes, broadcast_strides, gather, numel, row_major_strides, Offsets, Tensor, Val};
use super::{stream_seed, GraphArg, R};

mod kernel_call;
mod layout;
mod mesh;
pub use mesh::{run_graph_on_mesh, MeshRun};

pub use kernel_call::{run_graph_f64_with_kernels, KernelReference};
mod random;
mod state;
mod stochastic;

/// Binds a graph function's parameters (Graph or Schedule IR of a graph function) to
/// arguments: checks dtypes, ranks and constant dims, and gives each dim symbol (and each
/// index parameter, by name: `heads` in `D//heads`) its value. A symbol no argument binds
/// on its own (`B` and `H` of a `"B*H"` dim) takes its value from `dims`; compound dims
/// (`"B*H"`, `"N//2"`) are then evaluated and checked against the arguments' extents.
pub(super) fn bind_params(
    func: &Func,
    args: &[Arg],
    dims: &BTreeMap<String, i64>,
) -> R<(Vec<Val>, BTreeMap<String, i64>)> {
    if args.len() != func.params.len() {
        return Err(InterpError::new(format!(
            "`{}` takes {} arguments, got {}",
            func.name,
            func.params.len(),
            args.len()
        )));
    }
    let name = |i: usize| -> String {
        func.values[func.params[i].0 as usize].name.as_ref().map_or_else(|| format!("arg{i}"), |n| n.to_string())
    };
    let mut symbols: BTreeMap<String, i64> = BTreeMap::new();
    let bind = |symbols: &mut BTreeMap<String, i64>, sym: &str, v: i64, what: &str| -> R<()> {
        match symbols.get(sym) {
            Some(&old) if old != v => {
                Err(InterpError::new(format!("{what} gives `{sym}` = {v}, but it is {old} already")))
            }
            _ => {
                symbols.insert(sym.to_string(), v);
                Ok(())
            }
        }
    };
    let mut vals = Vec::new();
    for (i, (&p, a)) in func.params.iter().zip(args).enumerate() {
        let n = name(i);
        let v = match (func.ty(p), a) {
            (Type::Tensor(t), Arg::Tensor(h)) => {
                if h.dtype != t.dtype {
                    return Err(InterpError::new(format!("`{n}` is {}, got a {} tensor", t.dtype, h.dtype)));
                }
                if h.dims.len() != t.dims.len() {
                    return Err(InterpError::new(format!(
                        "`{n}` has rank {}, got a rank-{} tensor",
                        t.dims.len(),
                        h.dims.len()
                    )));
                }
                if h.data.len() != h.numel() * elem_bytes(h.dtype) {
                    return Err(InterpError::new(format!("`{n}`: data size does not match its dims {:?}", h.dims)));
                }
                for (axis, (d, &size)) in t.dims.iter().zip(&h.dims).enumerate() {
                    if let Some(c) = d.as_const() {
                        if c != size as i64 {
                            return Err(InterpError::new(format!("`{n}` dim {axis} is {c}, got {size}")));
                        }
                    } else if let Some(s) = d.as_sym() {
                        bind(&mut symbols, s, size as i64, &format!("`{n}` dim {axis}"))?;
                    }
                }
                Val::Tensor(Tensor::from_host(h))
            }
            (Type::Index, Arg::Index(v)) => {
                bind(&mut symbols, &n, *v, &format!("the argument `{n}`"))?;
                Val::Index(*v)
            }
            (Type::Index, Arg::Scalar(d, v)) if d.is_int() => {
                bind(&mut symbols, &n, *v as i64, &format!("the argument `{n}`"))?;
                Val::Index(*v as i64)
            }
            (Type::Scalar(d), Arg::Scalar(_, v)) => Val::Scalar(*d, Domain::of_dtype(*d).convert(*v)),
            (Type::Scalar(d), Arg::Index(v)) => Val::Scalar(*d, Domain::of_dtype(*d).convert(*v as f64)),
            (t, a) => {
                let got = match a {
                    Arg::Tensor(h) => format!("a rank-{} {} tensor", h.dims.len(), h.dtype),
                    Arg::Scalar(d, _) => format!("a {d} scalar"),
                    Arg::Index(_) => "an index".into(),
                };
                return Err(InterpError::new(format!("`{n}` is {t}, got {got}")));
            }
        };
        vals.push(v);
    }
    // Symbols only compound dims use come from `dims`.
    for (s, &v) in dims {
        symbols.entry(s.clone()).or_insert(v);
    }
    // Compound dims (`3*D`) once every plain symbol is known.
    for (i, (&p, a)) in func.params.iter().zip(args).enumerate() {
        if let (Type::Tensor(t), Arg::Tensor(h)) = (func.ty(p), a) {
            for (axis, (d, &size)) in t.dims.iter().zip(&h.dims).enumerate() {
                if d.is_const() || d.as_sym().is_some() {
                    continue;
                }
                match d.eval(&|s| symbols.get(s).copied()) {
                    Some(v) if v == size as i64 => {}
                    Some(v) => {
                        return Err(InterpError::new(format!("`{}` dim {axis} is {d} = {v}, got {size}", name(i))))
                    }
                    None => {
                        return Err(InterpError::new(format!(
                            "`{}` dim {axis} is {d}: no value for {}",
                            name(i),
                            d.symbols().into_iter().filter(|s| !symbols.contains_key(s)).collect::<Vec<_>>().join(", ")
                        )))
                    }
                }
            }
        }
    }
    Ok((vals, symbols))
}

pub(super) fn eval_dims(dims: &[Dim], symbols: &BTreeMap<String, i64>) -> Option<Vec<usize>> {
    dims.iter().map(|d| d.eval(&|s| symbols.get(s).copied()).and_then(|v| usize::try_from(v).ok())).collect()
}

/// The values of one run of a graph function: every SSA value it computed.
#[derive(Clone, Debug)]
pub struct GraphTrace {
    values: Vec<Option<Val>>,
    /// The dim symbols bound by the arguments.
    pub symbols: BTreeMap<String, i64>,
}

impl GraphTrace {
    /// The value of `v` (`None` for tokens and values the run did not reach).
    pub fn value(&self, v: ValueId) -> Option<Arg> {
        self.values.get(v.0 as usize)?.as_ref()?.to_arg()
    }
}

/// Evaluates the Graph IR of a graph function on `args` (one per parameter, in order);
/// `seed` is the run's seed for dropout. Returns the returned values in order.
pub fn run_graph(func: &Func, args: &[GraphArg], seed: i64) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_traced(func, args, seed).map(|(out, _)| out)
}

/// [`run_graph_f64`] with `dims`: a symbol of a compound dim that no argument binds on
/// its own (`B` of `"B*H"`) has no value in [`run_graph`] and [`run_graph_f64`]; this
/// takes such values from `dims` (a symbol an argument binds keeps the argument's
/// extent, and every compound dim must equal its argument's extent).
pub fn run_graph_f64_with_dims(
    func: &Func,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_with(func, args, dims, seed, true, None).map(|(out, _)| out)
}

/// The f64 reference of a graph function: every op computes in f64 and rounds once to
/// its result's dtype (each graph value is a tensor of its declared dtype), where
/// [`run_graph`] computes 16- and 8-bit floats in f32 as the kernels do.
pub fn run_graph_f64(func: &Func, args: &[GraphArg], seed: i64) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_with(func, args, &BTreeMap::new(), seed, true, None).map(|(out, _)| out)
}

/// [`run_graph`], also returning every intermediate value.
pub fn run_graph_traced(func: &Func, args: &[GraphArg], seed: i64) -> Result<(Vec<GraphArg>, GraphTrace), InterpError> {
    run_graph_with(func, args, &BTreeMap::new(), seed, false, None)
}

fn run_graph_with(
    func: &Func,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    exact: bool,
    kernels: Option<&dyn KernelReference>,
) -> Result<(Vec<GraphArg>, GraphTrace), InterpError> {
    run_graph_rounding(func, args, dims, seed, exact, false, kernels)
}

/// [`run_graph_f64_with_dims`] (with the kernels' references) with every float value
/// kept in f64 instead of rounded to its declared dtype: how far the f64 reference
/// moves without its own roundings measures how much the function's result depends on
/// where it rounds (a result that is a cancellation of larger values depends a lot).
pub fn run_graph_f64_unrounded(
    func: &Func,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    kernels: Option<&dyn KernelReference>,
) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_rounding(func, args, dims, seed, true, true, kernels).map(|(out, _)| out)
}

fn run_graph_rounding(
    func: &Func,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    exact: bool,
    unrounded: bool,
    kernels: Option<&dyn KernelReference>,
) -> Result<(Vec<GraphArg>, GraphTrace), InterpError> {
    let (params, symbols) = bind_params(func, args, dims)?;
    let mut m = Machine { func, vals: vec![None; func.values.len()], symbols, seed, exact, unrounded, kernels };
    for (&p, v) in func.params.iter().zip(params) {
        m.vals[p.0 as usize] = Some(v);
    }
    let mut returned = None;
    for &id in &func.body.ops {
        let op = func.op(id);
        if op.kind == OpKind::Return {
            let mut out = Vec::new();
            for &o in &op.operands {
                let v = m.get(id, o)?;
                out.push(v.to_arg().ok_or_else(|| m.err(id, "a graph function cannot return a token".into()))?);
            }
            returned = Some(out);
            break;
        }
        let results = m.op(id, op)?;
        if results.len() != op.results.len() {
            return Err(m.err(id, format!("gave {} results, the op has {}", results.len(), op.results.len())));
        }
        for (&r, v) in op.results.iter().zip(results) {
            m.vals[r.0 as usize] = Some(v);
        }
    }
    let out = returned.ok_or_else(|| InterpError::new(format!("`{}` has no func.return", func.name)))?;
    Ok((out, GraphTrace { values: m.vals, symbols: m.symbols }))
}

struct Machine<'f> {
    func: &'f Func,
    vals: Vec<Option<Val>>,
    symbols: BTreeMap<String, i64>,
    seed: i64,
    /// Compute in f64 ([`run_graph_f64`]).
    exact: bool,
    /// Keep float results in f64, not rounded to their dtype ([`run_graph_f64_unrounded`]).
    unrounded: bool,
    /// The references of called kernels ([`run_graph_f64_with_kernels`]).
    kernels: Option<&'f dyn KernelReference>,
}

fn float_attr(op: &Op, key: &str) -> Option<f64> {
    op.attr(key).and_then(Attr::as_float)
}

fn bool_attr(op: &Op, key: &str) -> bool {
    op.attr(key) == Some(&Attr::Bool(true))
}

/// Host scalar ops (index and scalar arithmetic, casts, constants) shared by Graph IR and
/// the launch plan; `None` when `op` is not one.
pub(super) fn host_op(func: &Func, id: OpId, op: &Op, operand: &dyn Fn(usize) -> R<Val>) -> Option<R<Val>> {
    let host_kind = matches!(op.kind, OpKind::Constant | OpKind::Cast | OpKind::Cmp | OpKind::Select)
        || op.kind.is_binary()
        || op.kind.is_unary_math();
    if !host_kind {
        return None;
    }
    let err = |m: String| InterpError::at_op(func, id, m);
    let [r] = op.results[..] else { return None };
    let rty = func.ty(r).clone();
    if !matches!(rty, Type::Index | Type::Scalar(_)) {
        return None;
    }
    let number = |v: &Val| -> R<f64> {
        match v {
            Val::Index(i) => Ok(*i as f64),
            Val::Scalar(_, x) => Ok(*x),
            other => Err(err(format!("expects a scalar operand, got {}", other.describe()))),
        }
    };
    let index = |v: &Val| -> R<i64> {
        match v {
            Val::Index(i) => Ok(*i),
            Val::Scalar(d, x) if d.is_int() || *d == DType::Bool => Ok(*x as i64),
            other => Err(err(format!("expects an index operand, got {}", other.describe()))),
        }
    };
    let to = |x: f64| -> Val {
        match &rty {
            Type::Scalar(d) => Val::Scalar(*d, Domain::of_dtype(*d).convert(x)),
            _ => Val::Index(saturate_index(x)),
        }
    };
    let arity = |n: usize| -> R<()> {
        if op.operands.len() == n {
            Ok(())
        } else {
            Err(err(format!("takes {n} operands, has {}", op.operands.len())))
        }
    };
    let result = || -> R<Val> {
        match op.kind {
            OpKind::Constant => {
                let attr = op.attr("value").ok_or_else(|| err("arith.constant has no `value`".into()))?;
                Ok(match (attr, &rty) {
                    (Attr::Int(v), Type::Index) => Val::Index(*v),
                    (Attr::Bool(b), _) => to(f64::from(u8::from(*b))),
                    (a, _) => to(a.as_float().ok_or_else(|| err(format!("constant value {a:?} is not a number")))?),
                })
            }
            OpKind::Cast => {
                arity(1)?;
                let x = operand(0)?;
                Ok(match (&x, &rty) {
                    (Val::Index(i), Type::Index) => Val::Index(*i),
                    (Val::Scalar(..), Type::Index) => Val::Index(saturate_index(number(&x)?)),
                    _ => to(number(&x)?),
                })
            }
            k if k.is_binary() => {
                arity(2)?;
                let bop = BinOp::of(k).ok_or_else(|| err("not a binary op".into()))?;
                let (a, b) = (operand(0)?, operand(1)?);
                match &rty {
                    Type::Index => {
                        let f = BinFn::new(bop, Domain::Index).ok_or_else(|| err(format!("{} on index", k.name())))?;
                        f.eval_index(index(&a)?, index(&b)?).map(Val::Index).map_err(|e| err(e.into()))
                    }
                    Type::Scalar(d) => {
                        let f = BinFn::new(bop, Domain::of_dtype(*d))
                            .ok_or_else(|| err(format!("{} is not defined on {d}", k.name())))?;
                        f.eval(number(&a)?, number(&b)?).map(|v| Val::Scalar(*d, v)).map_err(|e| err(e.into()))
                    }
                    _ => Err(err("unreachable result type".into())),
                }
            }
            k if k.is_unary_math() => {
                arity(1)?;
                let uop = UnOp::of(k).ok_or_else(|| err("not a unary op".into()))?;
                let x = operand(0)?;
                match &rty {
                    Type::Index => {
                        let f = UnFn::new(uop, Domain::Index).ok_or_else(|| err(format!("{} on index", k.name())))?;
                        f.eval_index(index(&x)?).map(Val::Index).ok_or_else(|| err(format!("{} on index", k.name())))
                    }
                    Type::Scalar(d) => {
                        let f = UnFn::new(uop, Domain::of_dtype(*d))
                            .ok_or_else(|| err(format!("{} is not defined on {d}", k.name())))?;
                        Ok(Val::Scalar(*d, f.eval(number(&x)?)))
                    }
                    _ => Err(err("unreachable result type".into())),
                }
            }
            OpKind::Cmp => {
                arity(2)?;
                let pred = op
                    .str_attr("pred")
                    .and_then(Pred::parse)
                    .ok_or_else(|| err("arith.cmp needs `pred` = lt|le|gt|ge|eq|ne".into()))?;
                let (a, b) = (operand(0)?, operand(1)?);
                let c = match (&a, &b) {
                    (Val::Index(x), Val::Index(y)) => pred.eval_i64(*x, *y),
                    _ => pred.eval_f64(number(&a)?, number(&b)?),
                };
                Ok(to(f64::from(u8::from(c))))
            }
            OpKind::Select => {
                arity(3)?;
                let c = number(&operand(0)?)? != 0.0;
                let picked = operand(if c { 1 } else { 2 })?;
                Ok(match (&picked, &rty) {
                    (Val::Index(i), Type::Index) => Val::Index(*i),
                    _ => to(number(&picked)?),
                })
            }
            _ => Err(err(format!("`{}` does not give a host scalar", op.kind.name()))),
        }
    };
    Some(result())
}

impl Machine<'_> {
    fn err(&self, id: OpId, message: String) -> InterpError {
        InterpError::at_op(self.func, id, message)
    }

    fn get(&self, id: OpId, v: ValueId) -> R<&Val> {
        self.vals
            .get(v.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.err(id, format!("%{} is used before it is defined", v.0)))
    }

    /// Operand `i` of `op`.
    fn operand(&self, id: OpId, op: &Op, i: usize) -> R<ValueId> {
        op.operands.get(i).copied().ok_or_else(|| self.err(id, format!("has no operand {i}")))
    }

    fn tensor(&self, id: OpId, v: ValueId) -> R<&Tensor> {
        match self.get(id, v)? {
            Val::Tensor(t) => Ok(t),
            other => Err(self.err(id, format!("expects a tensor, %{} is {}", v.0, other.describe()))),
        }
    }

    fn scalar(&self, id: OpId, v: ValueId) -> R<f64> {
        match self.get(id, v)? {
            Val::Scalar(_, x) => Ok(*x),
            Val::Index(i) => Ok(*i as f64),
            other => Err(self.err(id, format!("expects a scalar, %{} is {}", v.0, other.describe()))),
        }
    }

    fn result_dtype(&self, id: OpId, r: ValueId) -> R<DType> {
        match self.func.ty(r) {
            Type::Tensor(t) => Ok(t.dtype),
            other => Err(self.err(id, format!("expects a tensor result, not {other}"))),
        }
    }

    /// The result's dims from its type (every symbol must be bound).
    fn declared_dims(&self, id: OpId, r: ValueId) -> R<Vec<usize>> {
        let ty = self.func.ty(r);
        eval_dims(ty.dims(), &self.symbols).ok_or_else(|| {
            let missing: Vec<String> =
                ty.dims().iter().flat_map(|d| d.symbols()).filter(|s| !self.symbols.contains_key(s)).collect();
            self.err(id, format!("the dims of {ty} are not known (no value for {})", missing.join(", ")))
        })
    }

    /// Checks computed dims against the result type where its dims are known.
    fn check_dims(&self, id: OpId, r: ValueId, dims: &[usize]) -> R<()> {
        let ty = self.func.ty(r);
        match eval_dims(ty.dims(), &self.symbols) {
            Some(d) if d != dims => Err(self.err(id, format!("computes a {dims:?} tensor, its type {ty} is {d:?}"))),
            _ => Ok(()),
        }
    }

    /// A tensor result of `data` with computed `dims` and the result type's dtype; the
    /// values are rounded to the dtype.
    /// Whether composite ops on these dtypes compute in f64: any operand is f64, or the
    /// run is the f64 reference.
    fn wide(&self, dtypes: &[DType]) -> bool {
        self.exact || dtypes.contains(&DType::F64)
    }

    /// The arithmetic of an elementwise op whose result is in `dom`: f64 in the f64
    /// reference (the result is rounded to its dtype afterwards).
    fn compute_domain(&self, dom: Domain) -> Domain {
        match dom {
            Domain::F32(_) if self.exact => Domain::F64,
            d => d,
        }
    }

    /// fp8 and integer arithmetic on `@saturate` values clamps its result (language.md,
    /// "Which conversion"), as the kernels do when they store it.
    fn saturates(&self, r: ValueId) -> bool {
        match self.func.ty(r) {
            Type::Tensor(t) => policy::wants_saturate(&ElemType { dtype: t.dtype, policies: t.policies.clone() }),
            _ => false,
        }
    }

    fn make(&self, id: OpId, r: ValueId, dims: Vec<usize>, data: Vec<f64>) -> R<Val> {
        if data.len() != numel(&dims) {
            return Err(self.err(id, format!("internal error: {} values for a {dims:?} tensor", data.len())));
        }
        self.check_dims(id, r, &dims)?;
        let dtype = self.result_dtype(id, r)?;
        let dom = Domain::of_dtype(dtype);
        if self.unrounded && dtype.is_float() {
            return Ok(Val::Tensor(Tensor { dtype, dims, data }));
        }
        let saturate = self.saturates(r);
        Ok(Val::Tensor(Tensor { dtype, dims, data: data.into_iter().map(|x| dom.convert_with(x, saturate)).collect() }))
    }

    fn op(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let func = self.func;
        let operand = |i: usize| -> R<Val> {
            let v = *op.operands.get(i).ok_or_else(|| self.err(id, format!("has no operand {i}")))?;
            self.get(id, v).cloned()
        };
        if !op.regions.is_empty() {
            return Err(self.err(id, "ops with regions do not occur in graph functions".into()));
        }
        if let Some(v) = host_op(func, id, op, &operand) {
            return Ok(vec![v?]);
        }
        let one = |v: R<Val>| v.map(|v| vec![v]);
        match op.kind {
            OpKind::EffectToken => Ok(vec![Val::Token]),
            OpKind::CallKernel => self.call_kernel(id, op),
            // A placement effect: moves nothing the reference can see.
            OpKind::Prefetch => Ok(op.results.iter().map(|_| Val::Token).collect()),
            // On one device a collective is its operands' values (Graph IR is the global
            // view: a collective changes where data lives, not what it is).
            k if k.is_collective() => op
                .operands
                .iter()
                .map(|&v| match self.func.ty(v) {
                    Type::Token => Ok(Val::Token),
                    _ => self.get(id, v).cloned(),
                })
                .collect(),
            OpKind::CacheAppend => self.cache_append(id, op),
            OpKind::CachePrune => self.cache_prune(id, op),
            OpKind::TensorDim => {
                let t = self.tensor(id, self.operand(id, op, 0)?)?;
                let axis = op.int_attr("axis").ok_or_else(|| self.err(id, "tile.dim needs `axis`".into()))?;
                let d = usize::try_from(axis)
                    .ok()
                    .and_then(|a| t.dims.get(a))
                    .ok_or_else(|| self.err(id, format!("axis {axis} of a rank-{} tensor", t.dims.len())))?;
                Ok(vec![Val::Index(*d as i64)])
            }
            OpKind::Constant => {
                // A tensor constant (host constants are handled above).
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let value = match op.attr("value") {
                    Some(Attr::Bool(b)) => f64::from(u8::from(*b)),
                    Some(a) => a.as_float().ok_or_else(|| self.err(id, format!("constant value {a:?}")))?,
                    None => return Err(self.err(id, "arith.constant has no `value`".into())),
                };
                let dims = self.declared_dims(id, r)?;
                let n = numel(&dims);
                one(self.make(id, r, dims, vec![value; n]))
            }
            OpKind::Fill => {
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let value = float_attr(op, "value").ok_or_else(|| self.err(id, "graph.full needs `value`".into()))?;
                let dims = self.declared_dims(id, r)?;
                let n = numel(&dims);
                one(self.make(id, r, dims, vec![value; n]))
            }
            // `arange(n)`: 0, 1, ..., n-1 along the one dim.
            OpKind::Iota => {
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let dims = self.declared_dims(id, r)?;
                let n = numel(&dims);
                one(self.make(id, r, dims, (0..n).map(|i| i as f64).collect()))
            }
            k if k.is_elementwise() => one(self.elementwise(id, op)),
            OpKind::GBroadcast => one(self.broadcast(id, op)),
            OpKind::Reshape => {
                let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
                let x = self.tensor(id, self.operand(id, op, 0)?)?;
                let dims = self.declared_dims(id, r)?;
                if numel(&dims) != x.data.len() {
                    return Err(self.err(id, format!("reshapes {:?} ({} elements) to {dims:?}", x.dims, x.data.len())));
                }
                let data = x.data.clone();
                one(self.make(id, r, dims, data))
            }
            OpKind::GTranspose => one(self.transpose(id, op)),
            OpKind::MatMul => one(self.matmul(id, op)),
            OpKind::GReduce => one(self.reduce(id, op)),
            OpKind::Softmax | OpKind::LogSumExp => one(self.softmax(id, op)),
            OpKind::RmsNorm | OpKind::LayerNorm => one(self.norm(id, op)),
            OpKind::Concat => one(self.concat(id, op)),
            OpKind::Split => self.split(id, op),
            OpKind::SplitQkv => self.split_qkv(id, op),
            OpKind::MergeHeads => one(self.merge_heads(id, op)),
            OpKind::Dropout => self.dropout(id, op),
            OpKind::Random => self.randn(id, op),
            OpKind::FlashAttention => self.flash_attention(id, op),
            OpKind::SchedParam => Err(self.err(
                id,
                "sched.param in Graph IR: a graph function's schedule keys are only bound by its launch plan".into(),
            )),
            other => Err(self.err(id, format!("`{}` is not evaluated by the Graph IR interpreter", other.name()))),
        }
    }

    /// Operands that are not tokens.
    fn data_operands(&self, op: &Op) -> Vec<ValueId> {
        op.operands.iter().copied().filter(|&o| !matches!(self.func.ty(o), Type::Token)).collect()
    }

    fn elementwise(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let name = op.kind.name();
        let dtype = self.result_dtype(id, r)?;
        let dom = Domain::of_dtype(dtype);
        let mut xs = Vec::new();
        for &o in &op.operands {
            let t = self.tensor(id, o).map_err(|_| {
                let got = self.get(id, o).map(Val::describe).unwrap_or_default();
                self.err(
                    id,
                    format!(
                        "{name} on tensors takes tensor operands of one shape (broadcasts are explicit), got {got}"
                    ),
                )
            })?;
            xs.push(t);
        }
        let want = match op.kind {
            OpKind::Select => 3,
            k if k.is_binary() || k == OpKind::Cmp => 2,
            _ => 1,
        };
        if xs.len() != want {
            return Err(self.err(id, format!("takes {want} operands, has {}", xs.len())));
        }
        let dims = xs[0].dims.clone();
        if let Some(t) = xs.iter().find(|t| t.dims != dims) {
            return Err(self.err(id, format!("operands of shapes {dims:?} and {:?} (broadcasts are explicit)", t.dims)));
        }
        let err = |e: &str| self.err(id, e.to_string());
        let mut out = Vec::with_capacity(xs[0].data.len());
        match op.kind {
            k if k.is_binary() => {
                let bop = BinOp::of(k).ok_or_else(|| err("not a binary op"))?;
                let f = BinFn::new(bop, self.compute_domain(dom))
                    .ok_or_else(|| err(&format!("{name} is not defined on {dtype}")))?;
                f.tile(&xs[0].data, &xs[1].data, &mut out).map_err(err)?;
            }
            k if k.is_unary_math() => {
                let uop = UnOp::of(k).ok_or_else(|| err("not a unary op"))?;
                let f = UnFn::new(uop, self.compute_domain(dom))
                    .ok_or_else(|| err(&format!("{name} is not defined on {dtype}")))?;
                f.tile(&xs[0].data, &mut out);
            }
            OpKind::Cmp => {
                let pred = op
                    .str_attr("pred")
                    .and_then(Pred::parse)
                    .ok_or_else(|| err("arith.cmp needs `pred` = lt|le|gt|ge|eq|ne"))?;
                out.extend(xs[0].data.iter().zip(&xs[1].data).map(|(&a, &b)| f64::from(u8::from(pred.eval_f64(a, b)))));
            }
            OpKind::Select => {
                out.extend(
                    (0..xs[0].data.len()).map(|e| if xs[0].data[e] != 0.0 { xs[1].data[e] } else { xs[2].data[e] }),
                );
            }
            OpKind::Cast if op.str_attr(policy::ROUNDING) == Some(policy::STOCHASTIC) => {
                let seed = stream_seed(self.seed, self.stream(id, op)?);
                let cols = dims.last().copied().unwrap_or(1);
                stochastic::round(dom, &xs[0].data, cols, seed, policy::saturates(op), &mut out);
            }
            OpKind::Cast => {
                let saturate = policy::saturates(op);
                out.extend(xs[0].data.iter().map(|&x| dom.convert_with(x, saturate)))
            }
            other => return Err(err(&format!("`{}` is not elementwise", other.name()))),
        }
        self.make(id, r, dims, out)
    }

    fn broadcast(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let dims = self.declared_dims(id, r)?;
        match self.get(id, self.operand(id, op, 0)?)? {
            Val::Tensor(x) => {
                let strides = broadcast_strides(&x.dims, &dims)
                    .ok_or_else(|| self.err(id, format!("cannot broadcast {:?} to {dims:?}", x.dims)))?;
                let data = gather(&x.data, &dims, &strides);
                self.make(id, r, dims, data)
            }
            Val::Scalar(_, v) => {
                let n = numel(&dims);
                self.make(id, r, dims, vec![*v; n])
            }
            Val::Index(v) => {
                let n = numel(&dims);
                self.make(id, r, dims, vec![*v as f64; n])
            }
            Val::Token => Err(self.err(id, "cannot broadcast a token".into())),
        }
    }

    fn transpose(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let rank = x.dims.len();
        let perm: Vec<usize> = match op.attr("perm") {
            Some(Attr::Ints(p)) => p.iter().map(|&a| usize::try_from(a).unwrap_or(usize::MAX)).collect(),
            _ => return Err(self.err(id, "graph.transpose needs `perm`".into())),
        };
        let mut seen = vec![false; rank];
        let valid = perm.len() == rank && perm.iter().all(|&a| a < rank && !std::mem::replace(&mut seen[a], true));
        if !valid {
            return Err(self.err(id, format!("{perm:?} is not a permutation of the {rank} dims")));
        }
        let src = row_major_strides(&x.dims);
        let dims: Vec<usize> = perm.iter().map(|&a| x.dims[a]).collect();
        let strides: Vec<usize> = perm.iter().map(|&a| src[a]).collect();
        let data = gather(&x.data, &dims, &strides);
        self.make(id, r, dims, data)
    }

    fn matmul(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let (a, b) = (self.tensor(id, self.operand(id, op, 0)?)?, self.tensor(id, self.operand(id, op, 1)?)?);
        let (ra, rb) = (a.dims.len(), b.dims.len());
        if ra < 2 || rb < 2 {
            return Err(
                self.err(id, format!("graph.matmul of {:?} and {:?}: both need rank 2 or more", a.dims, b.dims))
            );
        }
        let (m, k, k2, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 2], b.dims[rb - 1]);
        if k != k2 {
            return Err(self.err(id, format!("graph.matmul of {:?} and {:?}: inner dims differ", a.dims, b.dims)));
        }
        let (ab, bb) = (&a.dims[..ra - 2], &b.dims[..rb - 2]);
        let batch = broadcast_shapes(ab, bb).ok_or_else(|| {
            self.err(id, format!("graph.matmul of {:?} and {:?}: batch dims do not broadcast", a.dims, b.dims))
        })?;
        let dtype = self.result_dtype(id, r)?;
        // A saturating float result is rounded once, by `make`, which clamps.
        let dom = Domain::of_dtype(if self.saturates(r) && !dtype.is_int() { DType::F64 } else { dtype });
        // Batch offsets (in matrices) of each operand for every batch index.
        let strides = |x: &[usize]| {
            broadcast_strides(x, &batch).ok_or_else(|| self.err(id, format!("batch dims {x:?} vs {batch:?}")))
        };
        let (sa, sb) = (strides(ab)?, strides(bb)?);
        let a_off: Vec<usize> = Offsets::new(&batch, &sa).collect();
        let b_off: Vec<usize> = Offsets::new(&batch, &sb).collect();
        let mut out = Vec::with_capacity(numel(&batch) * m * n);
        let int = a.dtype.is_int() && b.dtype.is_int();
        for (&ao, &bo) in a_off.iter().zip(&b_off) {
            let am = &a.data[ao * m * k..(ao + 1) * m * k];
            let bm = &b.data[bo * k * n..(bo + 1) * k * n];
            if int {
                matmul_int(am, bm, (m, k, n), dom, &mut out);
            } else if let Some(step) = self.step(op) {
                matmul_stepped(am, bm, (m, k, n), dom, step, &mut out);
            } else if self.wide(&[a.dtype, b.dtype]) {
                matmul_float::<f64>(am, bm, (m, k, n), dom, &mut out);
            } else {
                matmul_float::<f32>(am, bm, (m, k, n), dom, &mut out);
            }
        }
        let mut dims = batch;
        dims.extend([m, n]);
        self.make(id, r, dims, out)
    }

    fn reduce(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let rank = x.dims.len();
        let kind = match op.str_attr("kind") {
            Some("sum") => ReduceKind::Sum,
            Some("mean") => ReduceKind::Mean,
            Some("max") => ReduceKind::Max,
            Some("min") => ReduceKind::Min,
            other => return Err(self.err(id, format!("graph.reduce kind {other:?} (sum, mean, max or min)"))),
        };
        let mut axes: Vec<usize> = match op.attr("axes") {
            Some(Attr::Ints(a)) => a
                .iter()
                .map(|&ax| {
                    let ax = if ax < 0 { ax + rank as i64 } else { ax };
                    usize::try_from(ax)
                        .ok()
                        .filter(|&a| a < rank)
                        .ok_or_else(|| self.err(id, format!("axis {ax} of a rank-{rank} tensor")))
                })
                .collect::<R<_>>()?,
            None => (0..rank).collect(),
            Some(other) => return Err(self.err(id, format!("graph.reduce `axes` is {other:?}"))),
        };
        axes.sort_unstable();
        axes.dedup();
        let keepdim = bool_attr(op, "keepdim");
        let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).map(|a| x.dims[a]).collect();
        let kept_strides = row_major_strides(&kept);
        let mut out_strides = vec![0; rank];
        let mut next = 0;
        for (a, s) in out_strides.iter_mut().enumerate() {
            if !axes.contains(&a) {
                *s = kept_strides[next];
                next += 1;
            }
        }
        let targets: Vec<usize> = Offsets::new(&x.dims, &out_strides).collect();
        let count: usize = axes.iter().map(|&a| x.dims[a]).product();
        let out_len = numel(&kept);
        let data = if x.dtype.is_int() || x.dtype == DType::Bool {
            reduce_int(&x.data, &targets, out_len, count, kind)
        } else if let Some(step) = self.step(op).filter(|_| matches!(kind, ReduceKind::Sum | ReduceKind::Mean)) {
            // `@accum(T)`: the sums in element order, rounded to T at every step.
            let mut acc = vec![0f32; out_len];
            for (&v, &o) in x.data.iter().zip(&targets) {
                acc[o] = step.round(acc[o] + v as f32) as f32;
            }
            let mean = kind == ReduceKind::Mean;
            acc.into_iter().map(|s| if mean { (s / count as f32) as f64 } else { s as f64 }).collect()
        } else if self.wide(&[x.dtype]) {
            reduce_float::<f64>(&x.data, &targets, out_len, count, kind)
        } else {
            reduce_float::<f32>(&x.data, &targets, out_len, count, kind)
        };
        let dims =
            if keepdim { (0..rank).map(|a| if axes.contains(&a) { 1 } else { x.dims[a] }).collect() } else { kept };
        self.make(id, r, dims, data)
    }

    /// The rounding after every accumulation step of `@accum(T)` (`acc = T`, T narrower
    /// than f32) in the kernels' arithmetic; none in the f64 reference.
    fn step(&self, op: &Op) -> Option<Rounder> {
        policy::acc(op).filter(|&t| !self.exact && policy::rounds_each_step(t)).map(Rounder::new)
    }

    fn axis(&self, id: OpId, op: &Op, rank: usize) -> R<usize> {
        let axis = op.int_attr("axis").unwrap_or(-1);
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        usize::try_from(a)
            .ok()
            .filter(|&a| a < rank)
            .ok_or_else(|| self.err(id, format!("axis {axis} of a rank-{rank} tensor")))
    }

    fn float_tensor(&self, id: OpId, v: ValueId) -> R<&Tensor> {
        let t = self.tensor(id, v)?;
        if !t.dtype.is_float() {
            return Err(self.err(id, format!("{} takes float tensors, not {}", self.func.op(id).kind.name(), t.dtype)));
        }
        Ok(t)
    }

    fn softmax(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.float_tensor(id, self.operand(id, op, 0)?)?;
        let axis = self.axis(id, op, x.dims.len())?;
        let shape = (numel(&x.dims[..axis]), x.dims[axis], numel(&x.dims[axis + 1..]));
        let lse = op.kind == OpKind::LogSumExp;
        let data = if self.wide(&[x.dtype]) {
            softmax_lines::<f64>(&x.data, shape, lse)
        } else {
            softmax_lines::<f32>(&x.data, shape, lse)
        };
        let dims = if lse {
            let removed: Vec<usize> = x.dims.iter().enumerate().filter(|(a, _)| *a != axis).map(|(_, &d)| d).collect();
            // The result type may keep the axis as size 1.
            match eval_dims(self.func.ty(r).dims(), &self.symbols) {
                Some(d) if numel(&d) == numel(&removed) && d.len() == x.dims.len() => d,
                _ => removed,
            }
        } else {
            x.dims.clone()
        };
        self.make(id, r, dims, data)
    }

    fn norm(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let layer = op.kind == OpKind::LayerNorm;
        let x = self.float_tensor(id, self.operand(id, op, 0)?)?;
        let cols = *x.dims.last().ok_or_else(|| self.err(id, "a norm of a rank-0 tensor".into()))?;
        let rows = numel(&x.dims) / cols.max(1);
        let affine: Vec<&str> =
            op.str_attr("affine").map(|s| s.split(',').map(str::trim).collect()).unwrap_or_default();
        if affine.len() + 1 != op.operands.len() {
            return Err(
                self.err(id, format!("has {} operands, its `affine` names {:?} besides x", op.operands.len(), affine))
            );
        }
        let (mut weight, mut bias) = (None, None);
        let mut dtypes = vec![x.dtype];
        for (role, &v) in affine.iter().zip(&op.operands[1..]) {
            let t = self.float_tensor(id, v)?;
            if t.dims != [cols] {
                return Err(self.err(id, format!("the {role} is {:?}, the last dim of x is {cols}", t.dims)));
            }
            dtypes.push(t.dtype);
            match *role {
                "weight" if !layer || weight.is_none() => weight = Some(&t.data[..]),
                "bias" if layer => bias = Some(&t.data[..]),
                other => {
                    return Err(
                        self.err(id, format!("`affine` names `{other}`, which {} does not take here", op.kind.name()))
                    )
                }
            }
        }
        let eps = float_attr(op, "eps").unwrap_or(if layer { 1e-5 } else { 1e-6 });
        let data = if self.wide(&dtypes) {
            norm_rows::<f64>(&x.data, (rows, cols), layer, eps, weight, bias)
        } else {
            norm_rows::<f32>(&x.data, (rows, cols), layer, eps, weight, bias)
        };
        let dims = x.dims.clone();
        self.make(id, r, dims, data)
    }

    fn heads(&self, id: OpId, v: ValueId) -> R<usize> {
        let h = match self.get(id, v)? {
            Val::Index(h) => *h,
            Val::Scalar(d, h) if d.is_int() => *h as i64,
            other => return Err(self.err(id, format!("the number of heads is {}", other.describe()))),
        };
        usize::try_from(h).ok().filter(|&h| h > 0).ok_or_else(|| self.err(id, format!("{h} heads")))
    }

    fn split_qkv(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        if op.results.len() != 3 || op.operands.len() != 2 {
            return Err(self.err(id, "graph.split_qkv takes qkv and heads and gives q, k, v".into()));
        }
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let h = self.heads(id, self.operand(id, op, 1)?)?;
        let [b, s, e] = x.dims[..] else {
            return Err(self.err(id, format!("splits a {:?} tensor, not [B, S, 3*H*Dh]", x.dims)));
        };
        if e % (3 * h) != 0 {
            return Err(self.err(id, format!("the last dim {e} is not a multiple of 3 x {h} heads")));
        }
        let dh = e / (3 * h);
        let mut out = Vec::new();
        for (part, &r) in op.results.iter().enumerate() {
            let mut data = Vec::with_capacity(b * h * s * dh);
            for bi in 0..b {
                for hi in 0..h {
                    for si in 0..s {
                        let base = (bi * s + si) * e + part * h * dh + hi * dh;
                        data.extend_from_slice(&x.data[base..base + dh]);
                    }
                }
            }
            out.push(self.make(id, r, vec![b, h, s, dh], data)?);
        }
        Ok(out)
    }

    fn merge_heads(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let [b, h, s, dh] = x.dims[..] else {
            return Err(self.err(id, format!("merges a {:?} tensor, not [B, H, S, Dh]", x.dims)));
        };
        let mut data = Vec::with_capacity(x.data.len());
        for bi in 0..b {
            for si in 0..s {
                for hi in 0..h {
                    let base = ((bi * h + hi) * s + si) * dh;
                    data.extend_from_slice(&x.data[base..base + dh]);
                }
            }
        }
        self.make(id, r, vec![b, s, h * dh], data)
    }

    /// The dropout probability operand: an f32 in [0, 1].
    fn probability(&self, id: OpId, v: ValueId) -> R<f32> {
        let p = self.scalar(id, v)? as f32;
        if !(0.0..=1.0).contains(&p) {
            return Err(self.err(id, format!("the dropout probability {p} is outside [0, 1]")));
        }
        Ok(p)
    }

    fn stream(&self, id: OpId, op: &Op) -> R<i64> {
        op.int_attr("stream").ok_or_else(|| self.err(id, format!("{} with dropout needs `stream`", op.kind.name())))
    }

    fn dropout(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data_ops = self.data_operands(op);
        let [xv, pv] = data_ops[..] else {
            return Err(self.err(id, "graph.dropout takes x, p and an optional token".into()));
        };
        let Some(&r) = op.results.first() else { return Err(self.err(id, "needs a result".into())) };
        let x = self.tensor(id, xv)?;
        let p = self.probability(id, pv)?;
        let seed = stream_seed(self.seed, self.stream(id, op)?);
        let cols = x.dims.last().copied().unwrap_or(1).max(1);
        let mut data = Vec::with_capacity(x.data.len());
        let f64_math = self.wide(&[x.dtype]);
        let keep_scale = 1.0f32 - p;
        for (e, &v) in x.data.iter().enumerate() {
            let keep = uniform(seed, &[(e / cols) as i64, (e % cols) as i64]) >= p;
            data.push(match (keep, f64_math) {
                (false, _) => 0.0,
                (true, true) => v / (1.0 - p as f64),
                (true, false) => (v as f32 / keep_scale) as f64,
            });
        }
        let dims = x.dims.clone();
        let mut out = vec![self.make(id, r, dims, data)?];
        out.extend(op.results[1..].iter().map(|_| Val::Token));
        Ok(out)
    }

    fn flash_attention(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data_ops = self.data_operands(op);
        if !(3..=4).contains(&data_ops.len()) {
            return Err(self.err(id, "graph.flash_attention takes q, k, v, an optional p and token".into()));
        }
        let Some(&r) = op.results.first() else { return Err(self.err(id, "needs a result".into())) };
        let (q, k, v) = (
            self.float_tensor(id, data_ops[0])?,
            self.float_tensor(id, data_ops[1])?,
            self.float_tensor(id, data_ops[2])?,
        );
        let rank = q.dims.len();
        if rank < 2 || k.dims.len() != rank || v.dims.len() != rank {
            return Err(self.err(id, format!("attention of {:?}, {:?}, {:?}", q.dims, k.dims, v.dims)));
        }
        let lead = &q.dims[..rank - 2];
        let shape = AttnShape {
            bh: numel(lead),
            sq: q.dims[rank - 2],
            sk: k.dims[rank - 2],
            d: q.dims[rank - 1],
            dv: v.dims[rank - 1],
        };
        if &k.dims[..rank - 2] != lead
            || &v.dims[..rank - 2] != lead
            || k.dims[rank - 1] != shape.d
            || v.dims[rank - 2] != shape.sk
        {
            return Err(self.err(
                id,
                format!("q {:?}, k {:?}, v {:?}: need [.., Sq, D], [.., Sk, D], [.., Sk, Dv]", q.dims, k.dims, v.dims),
            ));
        }
        let causal = bool_attr(op, "causal");
        let scale = match float_attr(op, "scale") {
            Some(s) => s,
            None if self.wide(&[q.dtype, k.dtype, v.dtype]) => 1.0 / (shape.d as f64).sqrt(),
            // The stdlib kernel's `1.0 / sqrt(float(D))` in f32.
            None => (1.0f32 / (shape.d as f32).sqrt()) as f64,
        };
        let dropout = match data_ops.get(3) {
            Some(&pv) => Some((stream_seed(self.seed, self.stream(id, op)?), self.probability(id, pv)?)),
            None => None,
        };
        let data = if self.wide(&[q.dtype, k.dtype, v.dtype]) {
            attention::<f64>((&q.data, &k.data, &v.data), shape, causal, scale, dropout)
        } else {
            attention::<f32>((&q.data, &k.data, &v.data), shape, causal, scale, dropout)
        };
        let mut dims = q.dims.clone();
        dims[rank - 1] = shape.dv;
        let mut out = vec![self.make(id, r, dims, data)?];
        out.extend(op.results[1..].iter().map(|_| Val::Token));
        Ok(out)
    }
}
