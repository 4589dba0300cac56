//! Calls: argument binding against signatures, and the shape/dtype rule of every
//! built-in op (LANGUAGE.md §5.1, §6.3), user functions, `grad`, schedules and `dist`.

use std::collections::BTreeMap;

use super::builtins::{self, Level, ParamSpec};
use super::dims::Dim;
use super::dtype::{DType, ElemType, Policy};
use super::infer::{Infer, Mode};
use super::schedule::ScheduleValue;
use super::shapes;
use super::types::*;
use super::Signature;
use crate::diagnostics::{suggest, Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

/// The bound argument `param` of a built-in as `Option<&ArgVal>` (`arg!(a, "grad" => "f")`),
/// or its type (`arg!(a, "len" => ty "t")`); a rule that serves several built-ins names
/// them all (`arg!(a, "exp" | "tile.exp" => "x")`). Every
/// path is checked against the table of `builtins` at compile time
/// ([`builtins::has_param`]), so a parameter renamed there is a build error here, not a
/// panic at run time.
macro_rules! arg {
    ($a:expr, $($path:literal)|+ => $param:literal) => {{
        const _: () = {
            $(assert!(
                crate::check::builtins::has_param($path, $param),
                concat!("built-in `", $path, "` declares no parameter `", $param, "`")
            );)+
        };
        $a.get($param)
    }};
    ($a:expr, $($path:literal)|+ => ty $param:literal) => {{
        const _: () = {
            $(assert!(
                crate::check::builtins::has_param($path, $param),
                concat!("built-in `", $path, "` declares no parameter `", $param, "`")
            );)+
        };
        $a.ty($param)
    }};
}

mod calls;
mod custom_vjp;
mod dist;
mod kernel_call;
mod linalg;
mod losses;
mod pipeline;
mod scan;
mod schedule;
mod state;
mod tile;

pub use kernel_call::{kernel_written_params, stdlib_dtype_param, stdlib_instance};
pub use state::{
    cache_capacity, cache_len, cache_len_symbol, cache_param_type, cache_view, has_fp32_master,
    optimizer_state_param_type,
};
mod transforms;

pub(crate) use state::optimizer_target;
pub(crate) use transforms::vmap_text;

/// An evaluated call argument.
#[derive(Clone, Debug)]
pub(crate) struct ArgVal {
    pub expr: ExprId,
    pub ty: Ty,
}

/// Arguments bound to parameter names.
pub(crate) struct Bound {
    pub values: BTreeMap<&'static str, ArgVal>,
    pub extra_keywords: Vec<(String, ArgVal)>,
}

impl Bound {
    fn get(&self, name: &str) -> Option<&ArgVal> {
        self.values.get(name)
    }
    fn ty(&self, name: &str) -> Ty {
        self.values.get(name).map(|a| a.ty.clone()).unwrap_or(Ty::Unknown)
    }
}

impl<'a> Infer<'a> {
    pub(crate) fn call(&mut self, id: ExprId, func: ExprId, args: &[Arg]) -> Ty {
        let callee = self.expr(func);
        let vals: Vec<(Option<(String, TextRange)>, ArgVal)> = args
            .iter()
            .map(|a| {
                let ty = self.expr(a.value);
                (a.name.as_ref().map(|(n, r)| (n.to_string(), *r)), ArgVal { expr: a.value, ty })
            })
            .collect();
        match callee {
            Ty::Unknown => Ty::Unknown,
            Ty::Builtin(path) => self.builtin_call(id, func, path, &vals),
            Ty::Function(name) => self.user_call(id, func, &name, &vals),
            Ty::Grad { of, wrt } => self.grad_call(id, &of, &wrt, &vals),
            Ty::Vmap { of, in_axes, out_axes } => self.vmap_call(id, &of, &in_axes, &out_axes, &vals),
            // The call is `f`'s; only `grad` sees the difference.
            Ty::Checkpoint { of } => self.user_call(id, func, &of, &vals),
            Ty::CustomVjp { of, backward } => self.custom_vjp_call(id, func, &of, &backward, &vals),
            Ty::Pipeline { of, stages, microbatches, .. } => self.pipeline_call(id, &of, stages, microbatches, &vals),
            Ty::Method { recv, name } => self.method_call(id, func, *recv, &name, &vals),
            Ty::DType(elem) if vals.len() == 1 => {
                // `f32(x)`: a scalar conversion.
                let _ = elem;
                Ty::Scalar(match &vals[0].1.ty {
                    Ty::Scalar(e) => ElemType::plain(e.dtype),
                    _ => elem,
                })
            }
            other => {
                self.error(
                    Code::E0802,
                    self.range(func),
                    format!("`{}` is {} and cannot be called", self.text(func), other.kind_name()),
                );
                Ty::Unknown
            }
        }
    }

    /// Binds call arguments to a built-in's parameters (E0801, E0804).
    fn bind(
        &mut self,
        id: ExprId,
        func: ExprId,
        what: &str,
        specs: &'static [ParamSpec],
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Option<Bound> {
        let mut bound = Bound { values: BTreeMap::new(), extra_keywords: Vec::new() };
        let positional: Vec<&ParamSpec> = specs.iter().filter(|p| !p.keyword_only && !p.var_keyword).collect();
        let var_keyword = specs.iter().any(|p| p.var_keyword);
        let mut next = 0usize;
        let mut ok = true;
        for (name, val) in vals {
            match name {
                None => {
                    if next >= positional.len() {
                        let max = positional.len();
                        self.push(
                            Diagnostic::new(
                                Code::E0801,
                                self.range(val.expr),
                                format!(
                                    "`{what}` takes {} positional argument{} but {} were given",
                                    max,
                                    if max == 1 { "" } else { "s" },
                                    vals.iter().filter(|(n, _)| n.is_none()).count()
                                ),
                            )
                            .with_label(self.range(func), format!("signature: {}", signature_text(what, specs))),
                        );
                        ok = false;
                        continue;
                    }
                    bound.values.insert(positional[next].name, val.clone());
                    next += 1;
                }
                Some((kw, kw_range)) => match specs.iter().find(|p| p.name == kw && !p.var_keyword) {
                    Some(p) => {
                        if bound.values.contains_key(p.name) {
                            self.error(Code::E0801, *kw_range, format!("`{what}` got multiple values for `{kw}`"));
                            ok = false;
                        } else {
                            bound.values.insert(p.name, val.clone());
                        }
                    }
                    None if var_keyword => bound.extra_keywords.push((kw.clone(), val.clone())),
                    None => {
                        let mut d =
                            Diagnostic::new(Code::E0804, *kw_range, format!("`{what}` has no parameter `{kw}`"))
                                .with_note(format!("signature: {}", signature_text(what, specs)));
                        let has = |name: &str| specs.iter().any(|p| p.name == name);
                        if let Some(s) = suggest(kw, specs.iter().map(|p| p.name)) {
                            d = d.with_did_you_mean(*kw_range, s);
                        } else if kw == "dim" && has("axis") {
                            // PyTorch's `dim=` is `axis=` here, as in NumPy and JAX.
                            d = d.with_did_you_mean(*kw_range, "axis");
                        } else if kw == "argnums" && has("wrt") {
                            d = d.with_note(
                                "JAX's `argnums` counts positions; `wrt` names the parameters: `grad(f, wrt=(\"W\", \"b\"))`",
                            );
                        }
                        self.push(d);
                        ok = false;
                    }
                },
            }
        }
        let missing: Vec<&str> = specs
            .iter()
            .filter(|p| p.default.is_none() && !p.var_keyword && !bound.values.contains_key(p.name))
            .map(|p| p.name)
            .collect();
        if !missing.is_empty() && ok {
            self.push(
                Diagnostic::new(
                    Code::E0801,
                    self.range(id),
                    format!(
                        "`{what}` is missing required argument{} {}",
                        if missing.len() == 1 { "" } else { "s" },
                        missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                    ),
                )
                .with_note(format!("signature: {}", signature_text(what, specs))),
            );
            ok = false;
        }
        ok.then_some(bound)
    }

    /// A graph operation's float parameter (`eps`, `dropout`: a number by default) given a
    /// tensor is E0802 at the argument, naming the tensor parameters left unset: a
    /// positional `rmsnorm_safe(h, g)` meant `weight=g`, and would otherwise only fail
    /// when lowered.
    fn numbers_are_numbers(&mut self, path: &str, specs: &'static [ParamSpec], args: &Bound) -> bool {
        for spec in specs {
            let Some(default) = spec.default.filter(|d| d.parse::<i64>().is_err() && d.parse::<f64>().is_ok()) else {
                continue;
            };
            let Some(arg) = args.get(spec.name) else { continue };
            let Ty::Tensor(t) = self.operand(arg.ty.clone()) else { continue };
            let tensor = self.text(arg.expr);
            let unset: Vec<String> = specs
                .iter()
                .filter(|p| p.default == Some("None") && args.get(p.name).is_none())
                .map(|p| format!("{}={tensor}", p.name))
                .collect();
            let mut d = Diagnostic::new(
                Code::E0802,
                self.range(arg.expr),
                format!(
                    "`{path}`: `{}` is a number (default {default}), but `{tensor}` is {}",
                    spec.name,
                    fmt_dims(&t.dims)
                ),
            );
            match unset.as_slice() {
                [] => {}
                // The only place the tensor can go: the fix writes the keyword.
                [one] => d = d.with_did_you_mean(self.range(arg.expr), one),
                many => d = d.with_note(format!("a tensor goes by keyword here: `{}`", many.join("` or `"))),
            }
            self.push(d);
            return false;
        }
        true
    }

    fn level_ok(&mut self, func: ExprId, b: &builtins::Builtin) -> bool {
        let here = self.mode;
        let (bad, message) = match (b.level, here) {
            (Level::Kernel, Mode::Graph | Mode::Constant { .. } | Mode::Decl) => {
                (true, format!("`{}` is a kernel intrinsic: it can only be used inside a @kernel", b.path))
            }
            (Level::Graph, Mode::Kernel) => {
                (true, format!("`{}` is a graph-level operation and cannot be used inside a @kernel", b.path))
            }
            (Level::Type, _) => (true, format!("`{}` is only meaningful in a type annotation", b.path)),
            (Level::Decorator, _) => (true, format!("`{}` is a decorator", b.path)),
            _ => (false, String::new()),
        };
        if bad {
            let mut d = Diagnostic::new(Code::E0503, self.range(func), message);
            if b.level == Level::Graph {
                if let Some(eq) = builtins::tile_equivalent(b.path) {
                    d = d.with_note(format!("inside a kernel use {eq}"));
                }
            }
            if b.level == Level::Kernel {
                d = d.with_note("graph functions work on whole tensors; write a @kernel for tile-level code");
            }
            self.push(d);
        }
        !bad
    }

    fn builtin_call(
        &mut self,
        id: ExprId,
        func: ExprId,
        path: &'static str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        let Some(b) = builtins::lookup(path) else {
            // A stdlib kernel (`kernel_call`).
            return self.stdlib_kernel_call(id, func, path, vals);
        };
        // `max(a, b)` / `min(a, b)` on scalars are the Python helpers, usable anywhere.
        let scalar_minmax = matches!(path, "max" | "min")
            && vals.len() == 2
            && vals.iter().all(|(n, v)| n.is_none() && self.operand(v.ty.clone()).is_scalar_number());
        if !scalar_minmax && !self.level_ok(func, b) {
            return Ty::Unknown;
        }
        if b.params.is_none() {
            self.error(Code::E0802, self.range(func), format!("`{path}` is not callable"));
            return Ty::Unknown;
        }
        if scalar_minmax {
            return match (&vals[0].1.ty, &vals[1].1.ty) {
                (Ty::Int(_), Ty::Int(_)) => Ty::Int(None),
                (Ty::Scalar(e), _) | (_, Ty::Scalar(e)) => Ty::Scalar(e.clone()),
                _ => Ty::Float(None),
            };
        }
        let Some(args) = self.bind(id, func, path, b.param_specs(), vals) else {
            return Ty::Unknown;
        };
        if b.level == Level::Graph && !self.numbers_are_numbers(path, b.param_specs(), &args) {
            return Ty::Unknown;
        }
        if args.values.values().any(|a| a.ty.is_unknown() && !matches!(self.body.expr(a.expr), Expr::NoneLit)) {
            // An argument already failed: no follow-on diagnostic, but keep going for
            // ops whose result type does not depend on it.
            if !matches!(
                path,
                "tile.parallel" | "tile.range" | "tile.range_n" | "range" | "tile.barrier" | "tile.cp_async"
            ) {
                return Ty::Unknown;
            }
        }
        self.builtin_semantics(id, func, path, &args)
    }

    fn builtin_semantics(&mut self, id: ExprId, func: ExprId, path: &'static str, a: &Bound) -> Ty {
        let name = path.strip_prefix("tile.").unwrap_or(path);
        let in_tile_ns = path.starts_with("tile.");
        match (in_tile_ns, name) {
            // ---- elementwise ----
            (_, "exp" | "log" | "tanh" | "sqrt" | "rsqrt" | "sigmoid" | "relu" | "gelu" | "silu" | "abs" | "neg")
            | (true, "exp2" | "log2" | "floor" | "ceil" | "round") => {
                let x = arg!(a, "exp" | "log" | "tanh" | "sqrt" | "rsqrt" | "sigmoid" | "relu" | "gelu" | "silu" | "abs" | "neg" | "tile.exp" | "tile.log" | "tile.tanh" | "tile.sqrt" | "tile.rsqrt" | "tile.sigmoid" | "tile.relu" | "tile.gelu" | "tile.silu" | "tile.abs" | "tile.exp2" | "tile.log2" | "tile.floor" | "tile.ceil" | "tile.round" => "x").unwrap().clone();
                let t = self.operand(x.ty.clone());
                match &t {
                    Ty::Int(_) | Ty::Float(_) => Ty::Float(None),
                    Ty::Scalar(e) if !e.dtype.is_float() && !matches!(name, "abs" | "neg" | "relu") => {
                        self.float_only(name, x.expr, e.dtype);
                        Ty::Unknown
                    }
                    Ty::Scalar(_) => t,
                    Ty::Tensor(tt) | Ty::DistTensor(tt) => {
                        if !tt.elem.dtype.is_float() && !matches!(name, "abs" | "neg" | "relu") {
                            self.float_only(name, x.expr, tt.elem.dtype);
                            return Ty::Unknown;
                        }
                        Ty::Tensor(TensorType::new(tt.dims.clone(), tt.elem.clone()))
                    }
                    Ty::Tile(tt) => {
                        if !tt.elem.dtype.is_float() && !matches!(name, "abs" | "neg" | "relu") {
                            self.float_only(name, x.expr, tt.elem.dtype);
                            return Ty::Unknown;
                        }
                        t
                    }
                    other => self.wrong_kind(x.expr, name, "a tensor, a tile or a number", other),
                }
            }
            (_, "maximum" | "minimum" | "pow") => {
                let ops = [
                    arg!(a, "maximum" | "minimum" | "pow" | "tile.maximum" | "tile.minimum" => "a").unwrap().clone(),
                    arg!(a, "maximum" | "minimum" | "pow" | "tile.maximum" | "tile.minimum" => "b").unwrap().clone(),
                ];
                self.elementwise(id, &format!("`{path}`"), &ops.map(|o| (o.expr, o.ty)))
            }
            (_, "where") => {
                let c = arg!(a, "where" | "tile.where" => "cond").unwrap().clone();
                let x = arg!(a, "where" | "tile.where" => "a").unwrap().clone();
                let y = arg!(a, "where" | "tile.where" => "b").unwrap().clone();
                let values =
                    self.elementwise(id, &format!("`{path}`"), &[(x.expr, x.ty.clone()), (y.expr, y.ty.clone())]);
                self.selected(c.expr, c.ty, [&x.ty, &y.ty], values)
            }
            // ---- graph ops ----
            (false, "matmul" | "gemm") => {
                let x = arg!(a, "matmul" | "gemm" => "a").unwrap().clone();
                let y = arg!(a, "matmul" | "gemm" => "b").unwrap().clone();
                self.matmul(id, x.expr, x.ty, y.expr, y.ty)
            }
            (false, "sum" | "mean" | "max" | "min") => self.reduce(id, a),
            (false, "softmax_safe" | "logsumexp_safe") => {
                let x = arg!(a, "softmax_safe" | "logsumexp_safe" => "x").unwrap().clone();
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                if !t.elem.dtype.is_float() {
                    self.float_only(path, x.expr, t.elem.dtype);
                    return Ty::Unknown;
                }
                let axis = self.axis_arg(arg!(a, "softmax_safe" | "logsumexp_safe" => "axis"), t.rank(), -1);
                let Some(axis) = axis else { return Ty::Unknown };
                if name == "logsumexp_safe" {
                    let mut dims = t.dims.clone();
                    dims.remove(axis);
                    Ty::Tensor(TensorType::new(dims, t.elem))
                } else {
                    Ty::Tensor(t)
                }
            }
            (false, "layernorm_safe" | "rmsnorm_safe") => {
                let x = arg!(a, "layernorm_safe" | "rmsnorm_safe" => "x").unwrap().clone();
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                let Some(last) = t.dims.last().cloned() else {
                    self.error(Code::E0300, self.range(x.expr), format!("`{path}` needs a tensor of rank ≥ 1"));
                    return Ty::Unknown;
                };
                for p in ["weight", "bias"] {
                    if let Some(w) = a.get(p) {
                        match &w.ty {
                            Ty::NoneVal => {}
                            Ty::Tensor(wt) => {
                                if wt.dims != [last.clone()] {
                                    self.push(
                                        Diagnostic::new(
                                            Code::E0301,
                                            self.range(w.expr),
                                            format!(
                                                "`{path}`: {p} must be [{last}] (the last dim of `{}`), but `{}` is {}",
                                                self.text(x.expr),
                                                self.text(w.expr),
                                                fmt_dims(&wt.dims)
                                            ),
                                        )
                                        .with_label(
                                            self.range(x.expr),
                                            format!("`{}` is {}", self.text(x.expr), fmt_dims(&t.dims)),
                                        ),
                                    );
                                    return Ty::Unknown;
                                }
                            }
                            other => return self.wrong_kind(w.expr, path, "a tensor or None", other),
                        }
                    }
                }
                Ty::Tensor(t)
            }
            (false, "transpose") => {
                let x = arg!(a, "transpose" => "x").unwrap().clone();
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                match arg!(a, "transpose" => "axes").map(|v| v.ty.clone()) {
                    None | Some(Ty::NoneVal) => {
                        let mut dims = t.dims.clone();
                        dims.reverse();
                        Ty::Tensor(TensorType::new(dims, t.elem))
                    }
                    Some(Ty::Tuple(items) | Ty::List(items)) => {
                        let axes: Option<Vec<i64>> = items.iter().map(|i| i.const_int()).collect();
                        let Some(axes) = axes else { return Ty::Unknown };
                        let mut sorted: Vec<i64> =
                            axes.iter().map(|&x| if x < 0 { x + t.rank() as i64 } else { x }).collect();
                        sorted.sort();
                        if sorted != (0..t.rank() as i64).collect::<Vec<_>>() {
                            self.error(
                                Code::E0300,
                                self.range(arg!(a, "transpose" => "axes").unwrap().expr),
                                format!(
                                    "axes {axes:?} are not a permutation of the {} dims of `{}`",
                                    t.rank(),
                                    self.text(x.expr)
                                ),
                            );
                            return Ty::Unknown;
                        }
                        let dims = axes
                            .iter()
                            .map(|&i| t.dims[shapes::normalize_axis(i, t.rank()).unwrap()].clone())
                            .collect();
                        Ty::Tensor(TensorType::new(dims, t.elem))
                    }
                    Some(other) => {
                        self.wrong_kind(arg!(a, "transpose" => "axes").unwrap().expr, path, "a tuple of ints", &other)
                    }
                }
            }
            (false, "reshape") => {
                let x = arg!(a, "reshape" => "x").unwrap().clone();
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                let s = arg!(a, "reshape" => "shape").unwrap().clone();
                let Some(dims) = self.shape_arg(&s) else {
                    return Ty::Unknown;
                };
                let (before, after) = (shapes::product(&t.dims), shapes::product(&dims));
                if before != after {
                    self.push(Diagnostic::new(
                        Code::E0301,
                        self.range(s.expr),
                        format!(
                            "reshape: `{}` has {before} elements ({}) but the new shape {} has {after}",
                            self.text(x.expr),
                            fmt_dims(&t.dims),
                            fmt_dims(&dims)
                        ),
                    ));
                    return Ty::Unknown;
                }
                Ty::Tensor(TensorType::new(dims, t.elem))
            }
            (false, "concat") => {
                let xs = arg!(a, "concat" => "xs").unwrap().clone();
                let items = match &xs.ty {
                    Ty::List(items) | Ty::Tuple(items) => items.clone(),
                    other => return self.wrong_kind(xs.expr, path, "a list of tensors", other),
                };
                let tensors: Option<Vec<TensorType>> = items
                    .iter()
                    .map(|t| match t {
                        Ty::Tensor(t) => Some(t.clone()),
                        _ => None,
                    })
                    .collect();
                let Some(tensors) = tensors else {
                    return Ty::Unknown;
                };
                let Some(first) = tensors.first().cloned() else {
                    self.error(Code::E0802, self.range(xs.expr), "concat of an empty list");
                    return Ty::Unknown;
                };
                let Some(axis) = self.axis_arg(arg!(a, "concat" => "axis"), first.rank(), 0) else {
                    return Ty::Unknown;
                };
                let mut total = first.dims[axis].clone();
                for (i, t) in tensors.iter().enumerate().skip(1) {
                    let same_rest = t.rank() == first.rank()
                        && t.dims.iter().zip(&first.dims).enumerate().all(|(k, (x, y))| k == axis || x == y);
                    if !same_rest {
                        self.error(
                            Code::E0301,
                            self.range(xs.expr),
                            format!(
                                "concat: tensor {i} is {} but tensor 0 is {} (only dim {axis} may differ)",
                                fmt_dims(&t.dims),
                                fmt_dims(&first.dims)
                            ),
                        );
                        return Ty::Unknown;
                    }
                    if t.elem.dtype != first.elem.dtype {
                        self.error(
                            Code::E0400,
                            self.range(xs.expr),
                            format!(
                                "concat: tensor {i} is {} but tensor 0 is {} (cast them to one dtype)",
                                t.elem.dtype, first.elem.dtype
                            ),
                        );
                        return Ty::Unknown;
                    }
                    total = total.add(&t.dims[axis]);
                }
                let mut dims = first.dims.clone();
                dims[axis] = total;
                Ty::Tensor(TensorType::new(dims, first.elem))
            }
            (false, "split") => {
                let x = arg!(a, "split" => "x").unwrap().clone();
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                let n = arg!(a, "split" => "n").unwrap().clone();
                let Some(count) = n.ty.const_int().filter(|c| *c > 0) else {
                    self.error(Code::E0802, self.range(n.expr), "split: `n` must be a positive constant");
                    return Ty::Unknown;
                };
                let Some(axis) = self.axis_arg(arg!(a, "split" => "axis"), t.rank(), 0) else {
                    return Ty::Unknown;
                };
                let dim = &t.dims[axis];
                if let Some(v) = dim.as_const() {
                    if v % count != 0 {
                        self.error(
                            Code::E0301,
                            self.range(n.expr),
                            format!("split: dim {axis} of size {v} is not divisible into {count} parts"),
                        );
                        return Ty::Unknown;
                    }
                }
                let part = dim.floor_div(&Dim::constant(count)).unwrap_or_else(|| dim.clone());
                let mut dims = t.dims.clone();
                dims[axis] = part;
                Ty::Tuple(vec![Ty::Tensor(TensorType::new(dims, t.elem)); count as usize])
            }
            (false, "split_qkv") => {
                let x = arg!(a, "split_qkv" => "qkv").unwrap().clone();
                let Some(t) = self.tensor_of_rank(&x, path, 3, "split_qkv needs [B, S, 3*D]") else {
                    return Ty::Unknown;
                };
                let heads = arg!(a, "split_qkv" => "heads").unwrap().clone();
                let h = match &heads.ty {
                    Ty::Int(Some(d)) => d.clone(),
                    Ty::Int(None) => return Ty::Unknown,
                    other => return self.wrong_kind(heads.expr, path, "an int", other),
                };
                let three_d = &t.dims[2];
                let d = three_d.floor_div(&Dim::constant(3)).unwrap();
                if three_d.as_const().is_some_and(|v| v % 3 != 0) {
                    self.error(
                        Code::E0301,
                        self.range(x.expr),
                        format!("split_qkv: the last dim {three_d} is not divisible by 3"),
                    );
                    return Ty::Unknown;
                }
                if let (Some(dv), Some(hv)) = (d.as_const(), h.as_const()) {
                    if hv <= 0 || dv % hv != 0 {
                        self.error(
                            Code::E0301,
                            self.range(heads.expr),
                            format!("split_qkv: D = {dv} is not divisible by heads = {hv}"),
                        );
                        return Ty::Unknown;
                    }
                }
                let dh = d.floor_div(&h).unwrap_or(d);
                let part = TensorType::new(vec![t.dims[0].clone(), h, t.dims[1].clone(), dh], t.elem);
                Ty::Tuple(vec![Ty::Tensor(part.clone()), Ty::Tensor(part.clone()), Ty::Tensor(part)])
            }
            (false, "merge_heads") => {
                let x = arg!(a, "merge_heads" => "x").unwrap().clone();
                let Some(t) = self.tensor_of_rank(&x, path, 4, "merge_heads needs [B, h, S, Dh]") else {
                    return Ty::Unknown;
                };
                let merged = t.dims[1].mul(&t.dims[3], &mut self.out.obligations);
                Ty::Tensor(TensorType::new(vec![t.dims[0].clone(), t.dims[2].clone(), merged], t.elem))
            }
            (false, "flash_attention") => self.flash_attention(a),
            (false, "dropout") => {
                let x = arg!(a, "dropout" => "x").unwrap().clone();
                self.probability(arg!(a, "dropout" => "p"));
                let Some(t) = self.tensor_arg(&x, path) else {
                    return Ty::Unknown;
                };
                Ty::Tensor(t)
            }
            (false, "mse" | "cross_entropy") => self.loss(id, path, a),
            (false, "residual") => {
                let x = arg!(a, "residual" => "x").unwrap().clone();
                let y = arg!(a, "residual" => "y").unwrap().clone();
                self.probability(arg!(a, "residual" => "dropout"));
                let (Some(tx), Some(ty)) = (self.tensor_arg(&x, path), self.tensor_arg(&y, path)) else {
                    return Ty::Unknown;
                };
                if tx.dims != ty.dims {
                    let code = if tx.rank() == ty.rank() { Code::E0301 } else { Code::E0300 };
                    self.push(
                        Diagnostic::new(
                            code,
                            self.range(id),
                            format!(
                                "residual: `{}` is {} but `{}` is {} (residual does not broadcast)",
                                self.text(x.expr),
                                fmt_dims(&tx.dims),
                                self.text(y.expr),
                                fmt_dims(&ty.dims)
                            ),
                        )
                        .with_label(self.range(x.expr), fmt_dims(&tx.dims))
                        .with_label(self.range(y.expr), fmt_dims(&ty.dims)),
                    );
                    return Ty::Unknown;
                }
                match self.merge_elems(id, x.expr, &tx.elem, y.expr, &ty.elem) {
                    Some(e) => Ty::Tensor(TensorType::new(tx.dims, e)),
                    None => Ty::Unknown,
                }
            }
            (false, "cast") => {
                let x = arg!(a, "cast" => "x").unwrap().clone();
                let d = arg!(a, "cast" => "dtype").unwrap().clone();
                let Some(mut elem) = self.dtype_arg(&d) else {
                    return Ty::Unknown;
                };
                // A graph function's casts round stochastically (docs/language.md, "Numerics
                // policies"), except the result of a function that declares no return type:
                // its type would carry the policy to every caller, so there it is W0409 and
                // dropped from the type (the lowering reads the policy from the type).
                if self.mode == Mode::Graph
                    && elem.policies.contains(&Policy::StochasticRound)
                    && self.undeclared_result == Some(id)
                {
                    self.push(
                        Diagnostic::new(
                            Code::W0409,
                            self.range(d.expr),
                            "`@stochastic_round` has no effect on the result of a graph function that declares no \
                             return type: it rounds to nearest",
                        )
                        .with_note(
                            "declare the return type (`-> Tensor[..., bf16]`) and the cast rounds stochastically",
                        ),
                    );
                    elem.policies.retain(|p| *p != Policy::StochasticRound);
                }
                match self.operand(x.ty.clone()) {
                    Ty::Tensor(t) => Ty::Tensor(TensorType::new(t.dims, elem)),
                    Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_) => Ty::Scalar(elem),
                    other => self.wrong_kind(x.expr, path, "a tensor", &other),
                }
            }
            (false, "cast_like") => {
                let x = arg!(a, "cast_like" => "x").unwrap().clone();
                let r = arg!(a, "cast_like" => "ref").unwrap().clone();
                let (Some(t), Some(rt)) = (self.tensor_arg(&x, path), self.tensor_arg(&r, path)) else {
                    return Ty::Unknown;
                };
                Ty::Tensor(TensorType::new(t.dims, rt.elem))
            }
            (_, "zeros" | "ones" | "full" | "randn") => {
                let s = arg!(a, "zeros" | "ones" | "full" | "randn" | "tile.zeros" | "tile.full" => "shape")
                    .unwrap()
                    .clone();
                let Some(dims) = self.shape_arg(&s) else {
                    return Ty::Unknown;
                };
                let elem = match arg!(a, "zeros" | "ones" | "full" | "randn" | "tile.zeros" | "tile.full" => "dtype") {
                    Some(d) => match self.dtype_arg(d) {
                        Some(e) => e,
                        None => return Ty::Unknown,
                    },
                    None => ElemType::plain(DType::F32),
                };
                if name == "randn" {
                    if let Some(seed) = arg!(a, "randn" => "seed") {
                        if !matches!(self.operand(seed.ty.clone()), Ty::Int(_) | Ty::NoneVal | Ty::Unknown) {
                            let seed = seed.clone();
                            return self.wrong_kind(seed.expr, path, "an int seed or None", &seed.ty);
                        }
                    }
                    if !elem.dtype.is_float() {
                        self.error(Code::E0400, self.range(id), format!("`randn` draws floats, not {}", elem.dtype));
                        return Ty::Unknown;
                    }
                }
                if name == "full" {
                    let v = arg!(a, "full" | "tile.full" => "value").unwrap().clone();
                    if !self.operand(v.ty.clone()).is_scalar_number() {
                        return self.wrong_kind(v.expr, path, "a number", &v.ty);
                    }
                }
                if in_tile_ns {
                    Ty::Tile(TileType { dims, elem })
                } else {
                    Ty::Tensor(TensorType::new(dims, elem))
                }
            }
            (true, "rand") => {
                let s = arg!(a, "tile.rand" => "shape").unwrap().clone();
                let Some(dims) = self.shape_arg(&s) else {
                    return Ty::Unknown;
                };
                let seed = arg!(a, "tile.rand" => "seed").unwrap().clone();
                if !matches!(self.operand(seed.ty.clone()), Ty::Int(_) | Ty::Unknown) {
                    return self.wrong_kind(seed.expr, path, "an int seed", &seed.ty);
                }
                let offsets = arg!(a, "tile.rand" => "offsets").unwrap().clone();
                let count = match &offsets.ty {
                    Ty::Tuple(items) | Ty::List(items)
                        if items.iter().all(|t| matches!(t, Ty::Int(_) | Ty::Unknown)) =>
                    {
                        items.len()
                    }
                    Ty::Int(_) => 1,
                    Ty::Unknown => return Ty::Unknown,
                    // Triton's `tl.rand(seed, offsets)` takes each element's offset as a
                    // tile; here the offsets are the tile's origin, one int per dim.
                    Ty::Tile(_) => {
                        let d = Diagnostic::new(
                            Code::E0802,
                            self.range(offsets.expr),
                            format!(
                                "`tile.rand` expects a tuple of int offsets (the tile's origin), but `{}` is a tile",
                                self.text(offsets.expr)
                            ),
                        )
                        .with_note(
                            "unlike Triton's `tl.rand(seed, offsets)`, the offsets are the tile's origin, one int per \
                             dim (`(n0,)`); each element's coordinates within the tile are added to them, so \
                             `tile.rand((BM,), seed, (n0,))` draws for offsets `n0 + tile.arange(BM)`",
                        );
                        self.push(d);
                        return Ty::Unknown;
                    }
                    other => return self.wrong_kind(offsets.expr, path, "a tuple of int offsets", &other.clone()),
                };
                if count < dims.len() {
                    return self.wrong_kind(
                        offsets.expr,
                        path,
                        &format!("at least {} offsets (one per tile dim)", dims.len()),
                        &offsets.ty,
                    );
                }
                Ty::Tile(TileType { dims, elem: ElemType::plain(DType::F32) })
            }
            (_, "arange") => {
                let n = arg!(a, "arange" | "tile.arange" => "n").unwrap().clone();
                let Ty::Int(Some(d)) = n.ty.clone() else {
                    return self.wrong_kind(n.expr, path, "an int", &n.ty);
                };
                let elem = ElemType::plain(DType::I32);
                if in_tile_ns {
                    Ty::Tile(TileType { dims: vec![d], elem })
                } else {
                    Ty::Tensor(TensorType::new(vec![d], elem))
                }
            }
            (false, "grad") => self.grad(a),
            (false, "vmap") => self.vmap(a),
            (false, "checkpoint" | "remat") => self.checkpoint(a, path),
            (false, "scan") => self.scan(id, a),
            (false, "custom_vjp") => self.custom_vjp(a),
            (false, "jvp") => self.jvp(id, a),
            // ---- scalars ----
            // A constant stays one: `float("-inf")` is the padding value Triton users
            // give a load's `other=`, and a load's `other=` must be a constant.
            (false, "float") => match arg!(a, "float" => ty "x") {
                Ty::Str(Some(text)) => match python_float(&text) {
                    Some(v) => Ty::Float(Some(crate::syntax::ast::FloatLit::new(v))),
                    None => {
                        let x = arg!(a, "float" => "x").unwrap().expr;
                        self.error(
                            Code::E0802,
                            self.range(x),
                            format!(
                                "`float({text:?})`: not a number Python's float() reads (\"inf\", \"-inf\", \"nan\", \
                                 \"1.5\", \"1e-3\")"
                            ),
                        );
                        Ty::Unknown
                    }
                },
                Ty::Float(Some(v)) => Ty::Float(Some(v)),
                Ty::Int(Some(d)) => match d.as_const() {
                    Some(c) => Ty::Float(Some(crate::syntax::ast::FloatLit::new(c as f64))),
                    None => Ty::Float(None),
                },
                _ => Ty::Float(None),
            },
            (false, "int") => match &arg!(a, "int" => ty "x") {
                Ty::Int(v) => Ty::Int(v.clone()),
                _ => Ty::Int(None),
            },
            (false, "bool") => Ty::Bool(None),
            (false, "cdiv") => match (arg!(a, "cdiv" => ty "a"), arg!(a, "cdiv" => ty "b")) {
                (Ty::Int(Some(x)), Ty::Int(Some(y))) => Ty::Int(x.add(&y).sub(&Dim::constant(1)).floor_div(&y)),
                _ => Ty::Int(None),
            },
            (false, "len") => match arg!(a, "len" => ty "t") {
                Ty::Tensor(t) | Ty::View(t) => Ty::Int(t.dims.first().cloned()),
                Ty::Tuple(items) | Ty::List(items) => Ty::Int(Some(Dim::constant(items.len() as i64))),
                _ => Ty::Int(None),
            },
            (false, "range") => {
                for p in ["start", "stop", "step"] {
                    if let Some(v) = a.get(p) {
                        if !matches!(v.ty, Ty::Int(_) | Ty::Unknown | Ty::NoneVal) {
                            self.wrong_kind(v.expr, "range", "an int", &v.ty.clone());
                        }
                    }
                }
                Ty::Range(LoopKind::Unrolled)
            }
            (false, "dict") => Ty::Dict(a.extra_keywords.iter().map(|(k, v)| (k.clone(), v.ty.clone())).collect()),
            // ---- schedules, distribution, placement ----
            (false, "Schedule") => self.schedule_ctor(a),
            (false, "block") => {
                let mut s = ScheduleValue::default();
                self.schedule_int(&mut s, "BM", arg!(a, "block" => "m"));
                self.schedule_int(&mut s, "BN", arg!(a, "block" => "n"));
                Ty::Schedule(Box::new(s))
            }
            (false, "ShardSpec") => {
                let partition = self.string_list(arg!(a, "ShardSpec" => "partition"));
                let mesh_axes = self.string_list(arg!(a, "ShardSpec" => "mesh_axes"));
                Ty::ShardSpec { partition, mesh_axes }
            }
            (false, "dist.mesh") => self.dist_mesh(id, a),
            (false, "dist.tensor") => self.dist_tensor(a),
            (false, "dist.pipeline") => self.dist_pipeline(a),
            (false, "dist.all_reduce" | "dist.all_gather" | "dist.reduce_scatter" | "dist.all_to_all") => {
                self.dist_collective(path, a)
            }
            (false, "device") => Ty::NoneVal,
            (false, "prefetch") => {
                if let Some(into) = arg!(a, "prefetch" => "into") {
                    if let Ty::Str(Some(s)) = &into.ty {
                        if !matches!(s.as_str(), "smem" | "l2" | "hbm") {
                            self.push(Diagnostic::new(
                                Code::E0802,
                                self.range(into.expr),
                                format!("prefetch into \"{s}\": expected \"smem\", \"l2\" or \"hbm\""),
                            ));
                        }
                    }
                }
                Ty::NoneVal
            }
            // ---- tile intrinsics ----
            (true, _) => self.tile_intrinsic(id, func, name, a),
            _ => Ty::Unknown,
        }
    }

    pub(crate) fn wrong_kind(&mut self, expr: ExprId, op: &str, expected: &str, got: &Ty) -> Ty {
        if !got.is_unknown() {
            self.error(
                Code::E0802,
                self.range(expr),
                format!("`{op}` expects {expected}, but `{}` is {}", self.text(expr), got.kind_name()),
            );
        }
        Ty::Unknown
    }

    fn float_only(&mut self, op: &str, expr: ExprId, dtype: DType) {
        self.error(
            Code::E0400,
            self.range(expr),
            format!("`{op}` needs a float type, but `{}` is {dtype}", self.text(expr)),
        );
    }

    fn tensor_arg(&mut self, v: &ArgVal, op: &str) -> Option<TensorType> {
        match self.operand(v.ty.clone()) {
            Ty::Tensor(t) | Ty::DistTensor(t) => Some(t),
            Ty::Unknown => None,
            other => {
                self.wrong_kind(v.expr, op, "a tensor", &other);
                None
            }
        }
    }

    /// A tensor argument with exactly `rank` dims; otherwise E0300 "{layout}, but `x` is
    /// [..]", where `layout` says which dims it wants ("merge_heads needs [B, h, S, Dh]").
    fn tensor_of_rank(&mut self, v: &ArgVal, op: &str, rank: usize, layout: &str) -> Option<TensorType> {
        let t = self.tensor_arg(v, op)?;
        if t.rank() != rank {
            self.error(
                Code::E0300,
                self.range(v.expr),
                format!("{layout}, but `{}` is {}", self.text(v.expr), fmt_dims(&t.dims)),
            );
            return None;
        }
        Some(t)
    }

    fn axis_arg(&mut self, v: Option<&ArgVal>, rank: usize, default: i64) -> Option<usize> {
        let (axis, expr) = match v {
            None => (default, None),
            Some(v) => match v.ty.const_int() {
                Some(a) => (a, Some(v.expr)),
                None => {
                    self.wrong_kind(v.expr, "axis", "a constant int", &v.ty.clone());
                    return None;
                }
            },
        };
        match shapes::normalize_axis(axis, rank) {
            Some(a) => Some(a),
            None => {
                let range = expr.map(|e| self.range(e)).unwrap_or_default();
                self.error(Code::E0300, range, format!("axis {axis} is out of range for rank {rank}"));
                None
            }
        }
    }

    fn shape_arg(&mut self, v: &ArgVal) -> Option<Vec<Dim>> {
        match &v.ty {
            Ty::Tuple(items) | Ty::List(items) => {
                let mut dims = Vec::new();
                for item in items {
                    match item {
                        Ty::Int(Some(d)) => dims.push(d.clone()),
                        Ty::Unknown => return None,
                        Ty::Int(None) => return None,
                        other => {
                            self.wrong_kind(v.expr, "shape", "a tuple of ints", other);
                            return None;
                        }
                    }
                }
                Some(dims)
            }
            Ty::Int(Some(d)) => Some(vec![d.clone()]),
            Ty::Unknown => None,
            other => {
                self.wrong_kind(v.expr, "shape", "a tuple of ints", &other.clone());
                None
            }
        }
    }

    fn dtype_arg(&mut self, v: &ArgVal) -> Option<ElemType> {
        match &v.ty {
            Ty::DType(e) => Some(e.clone()),
            Ty::Str(Some(s)) => {
                let range = self.range(v.expr);
                super::annot::parse_dtype_string(self, s, range)
            }
            Ty::Unknown => None,
            other => {
                self.wrong_kind(v.expr, "dtype", "a dtype (f32, bf16, ...)", &other.clone());
                None
            }
        }
    }

    fn probability(&mut self, v: Option<&ArgVal>) {
        let Some(v) = v else { return };
        let p = match &v.ty {
            Ty::Float(Some(f)) => f.get(),
            Ty::Int(Some(d)) => match d.as_const() {
                Some(i) => i as f64,
                None => return,
            },
            _ => return,
        };
        if !(0.0..1.0).contains(&p) {
            self.error(Code::E0408, self.range(v.expr), format!("probability {p} is outside [0, 1)"));
        }
    }

    fn string_list(&mut self, v: Option<&ArgVal>) -> Vec<String> {
        match v.map(|v| &v.ty) {
            Some(Ty::Tuple(items) | Ty::List(items)) => items
                .iter()
                .filter_map(|i| match i {
                    Ty::Str(Some(s)) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            Some(Ty::Str(Some(s))) => vec![s.clone()],
            _ => Vec::new(),
        }
    }
}

fn signature_text(what: &str, specs: &[ParamSpec]) -> String {
    let params: Vec<String> = specs
        .iter()
        .map(|p| match p.default {
            _ if p.var_keyword => format!("**{}", p.name),
            Some(d) => format!("{}={d}", p.name),
            None => p.name.to_string(),
        })
        .collect();
    format!("{what}({})", params.join(", "))
}

fn signature_params(sig: &Signature) -> String {
    sig.params.iter().map(|p| format!("{}: {}", p.name, p.ty)).collect::<Vec<_>>().join(", ")
}

/// Replaces a callee's dim symbols by the caller's dims.
pub(crate) fn substitute_ty(ty: &Ty, subst: &BTreeMap<String, Dim>) -> Ty {
    let sub = |d: &Dim| d.substitute(&|s| subst.get(s).cloned());
    match ty {
        Ty::Tensor(t) => {
            Ty::Tensor(TensorType { kind: t.kind, dims: t.dims.iter().map(sub).collect(), elem: t.elem.clone() })
        }
        Ty::Tuple(items) => Ty::Tuple(items.iter().map(|t| substitute_ty(t, subst)).collect()),
        Ty::Int(Some(d)) => Ty::Int(Some(sub(d))),
        other => other.clone(),
    }
}

/// The value of Python's `float(text)` for a string: a decimal number, or `inf`,
/// `infinity` and `nan` in any case, signed or not, with surrounding whitespace.
fn python_float(text: &str) -> Option<f64> {
    let t = text.trim();
    let (sign, body) = match t.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, t.strip_prefix('+').unwrap_or(t)),
    };
    let value = match body.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        // Digits, a point and an exponent only (Rust's parser would take "inf" forms too).
        b if !b.is_empty() && b.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-')) => {
            b.parse::<f64>().ok()?
        }
        _ => return None,
    };
    Some(sign * value)
}
