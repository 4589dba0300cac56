//! The function transforms `vmap(f, in_axes=..., out_axes=...)` and
//! `jvp(f, primals, tangents)` (docs/language.md, "Transforms"): which functions they
//! take, and the types of their results. Lowering them is `passes::lower::graph::transforms`.

use crate::check::dims::Dim;
use crate::check::infer::{callee_inference, callee_signature, Infer};
use crate::check::types::*;
use crate::check::{FunctionKind, Signature};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{substitute_ty, ArgVal, Bound};

type Vals = [(Option<(String, TextRange)>, ArgVal)];

/// How a `vmap` value prints (hover, messages): `vmap(f, in_axes=(0, None), out_axes=0)`.
pub(crate) fn vmap_text(of: &str, in_axes: &[Option<i64>], out_axes: &[i64]) -> String {
    let axes: Vec<String> = in_axes.iter().map(|a| a.map(|a| a.to_string()).unwrap_or_else(|| "None".into())).collect();
    let ins = if axes.len() == 1 { format!("({},)", axes[0]) } else { format!("({})", axes.join(", ")) };
    let outs = match out_axes {
        [one] => one.to_string(),
        many => format!("({})", many.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")),
    };
    format!("vmap({of}, in_axes={ins}, out_axes={outs})")
}

/// The tensors a function returns: one (`Some(vec![t])`), a tuple of them, or None.
fn returned_tensors(ret: &Ty) -> Option<Vec<TensorType>> {
    match ret {
        Ty::Tensor(t) => Some(vec![t.clone()]),
        Ty::Tuple(items) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Ty::Tensor(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

impl<'a> Infer<'a> {
    /// `f` of a transform: a graph function or helper of this file, with its signature.
    pub(super) fn transform_target(&mut self, f: &ArgVal, what: &str) -> Option<(String, Signature, Ty)> {
        let name = match &f.ty {
            Ty::Function(n) => n.clone(),
            Ty::Unknown => return None,
            Ty::Grad { .. } | Ty::Vmap { .. } | Ty::Checkpoint { .. } | Ty::CustomVjp { .. } | Ty::Pipeline { .. } => {
                self.push(
                    Diagnostic::new(
                        Code::E0802,
                        self.range(f.expr),
                        format!(
                            "`{what}` takes a function by name, not the transformed function `{}`",
                            self.text(f.expr)
                        ),
                    )
                    .with_note(format!(
                        "write a @jit function that returns `{}(...)` and pass its name to `{what}`",
                        self.text(f.expr)
                    )),
                );
                return None;
            }
            other => {
                self.wrong_kind(f.expr, what, "a @jit function", &other.clone());
                return None;
            }
        };
        let (key, sig) = callee_signature(self.db, self.file, &name)?;
        let sig = sig.clone();
        if sig.kind == FunctionKind::Kernel {
            self.push(
                Diagnostic::new(
                    Code::E0802,
                    self.range(f.expr),
                    format!("`{what}` transforms a graph function, but `{name}` is a kernel"),
                )
                .with_note(format!("call `{name}` from a @jit function and transform that function")),
            );
            return None;
        }
        let ret = match &sig.ret {
            Some(r) => r.clone(),
            None => callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        Some((name, sig, ret))
    }

    /// A constant int, or None for `None`; Err(()) for anything else.
    fn axis_entry(t: &Ty) -> Result<Option<i64>, ()> {
        match t {
            Ty::NoneVal => Ok(None),
            other => other.const_int().map(Some).ok_or(()),
        }
    }

    // ----- vmap ----------------------------------------------------------------------

    /// `checkpoint(f)` / `remat(f)`: `f` itself for the checker (its calls are `f`'s).
    pub(super) fn checkpoint(&mut self, a: &Bound, path: &str) -> Ty {
        let what = path.rsplit('.').next().unwrap_or(path);
        let f = arg!(a, "checkpoint" | "remat" => "f").unwrap().clone();
        match self.transform_target(&f, what) {
            Some((name, _, _)) => Ty::Checkpoint { of: name },
            None => Ty::Unknown,
        }
    }

    pub(super) fn vmap(&mut self, a: &Bound) -> Ty {
        let f = arg!(a, "vmap" => "f").unwrap().clone();
        let Some((name, sig, ret)) = self.transform_target(&f, "vmap") else {
            return Ty::Unknown;
        };
        let n = sig.params.len();
        let in_arg = arg!(a, "vmap" => "in_axes").cloned();
        let in_axes: Vec<Option<i64>> = match &in_arg {
            None => vec![Some(0); n],
            Some(v) => match &v.ty {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tuple(items) | Ty::List(items) => {
                    let Ok(axes) = items.iter().map(Self::axis_entry).collect::<Result<Vec<_>, ()>>() else {
                        return self.wrong_kind(v.expr, "vmap", "in_axes of ints and None", &v.ty.clone());
                    };
                    if axes.len() != n {
                        self.push(
                            Diagnostic::new(
                                Code::E0801,
                                self.range(v.expr),
                                format!(
                                    "`in_axes` has {} entr{} but `{name}` takes {n} parameter{}",
                                    axes.len(),
                                    if axes.len() == 1 { "y" } else { "ies" },
                                    if n == 1 { "" } else { "s" }
                                ),
                            )
                            .with_note("give one axis (or None, for an argument that is not mapped) per parameter"),
                        );
                        return Ty::Unknown;
                    }
                    axes
                }
                other => match Self::axis_entry(other) {
                    Ok(axis) => vec![axis; n],
                    Err(()) => {
                        return self.wrong_kind(v.expr, "vmap", "an int, None or a tuple of them", &other.clone())
                    }
                },
            },
        };
        let at = in_arg.as_ref().map(|v| v.expr).unwrap_or(f.expr);
        if in_axes.iter().all(Option::is_none) {
            self.push(
                Diagnostic::new(Code::E0802, self.range(at), format!("`vmap({name})` maps no argument"))
                    .with_note("map at least one tensor argument: an axis instead of None in `in_axes`"),
            );
            return Ty::Unknown;
        }
        for (p, axis) in sig.params.iter().zip(&in_axes) {
            if axis.is_some() && !matches!(p.ty, Ty::Tensor(_) | Ty::Unknown) {
                self.push(
                    Diagnostic::new(
                        Code::E0802,
                        self.range(at),
                        format!("`in_axes` maps `{}`, but it is {} parameter of `{name}`", p.name, p.ty.kind_name()),
                    )
                    .with_note("only tensor parameters can be mapped: give None for the others"),
                );
                return Ty::Unknown;
            }
        }
        if ret.is_unknown() {
            return Ty::Unknown;
        }
        let Some(outputs) = returned_tensors(&ret) else {
            self.error(
                Code::E0802,
                self.range(f.expr),
                format!("`vmap` needs `{name}` to return a tensor or a tuple of tensors, but it returns {ret}"),
            );
            return Ty::Unknown;
        };
        let out_arg = arg!(a, "vmap" => "out_axes").cloned();
        let raw: Vec<i64> = match &out_arg {
            None => vec![0],
            Some(v) => match &v.ty {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tuple(items) | Ty::List(items) => {
                    let Some(axes) = items.iter().map(Ty::const_int).collect::<Option<Vec<i64>>>() else {
                        return self.wrong_kind(v.expr, "vmap", "out_axes of ints", &v.ty.clone());
                    };
                    if axes.len() != outputs.len() {
                        self.error(
                            Code::E0801,
                            self.range(v.expr),
                            format!(
                                "`out_axes` has {} entries but `{name}` returns {} tensor{}",
                                axes.len(),
                                outputs.len(),
                                if outputs.len() == 1 { "" } else { "s" }
                            ),
                        );
                        return Ty::Unknown;
                    }
                    axes
                }
                other => match other.const_int() {
                    Some(axis) => vec![axis],
                    None => return self.wrong_kind(v.expr, "vmap", "an int or a tuple of ints", &other.clone()),
                },
            },
        };
        let mut out_axes = Vec::new();
        for (i, t) in outputs.iter().enumerate() {
            let axis = raw.get(i).or(raw.last()).copied().unwrap_or(0);
            let rank = t.rank() as i64 + 1;
            if axis < -rank || axis >= rank {
                let range = self.range(out_arg.as_ref().map(|v| v.expr).unwrap_or(f.expr));
                self.error(
                    Code::E0300,
                    range,
                    format!(
                        "`out_axes`: axis {axis} is out of range for an output of rank {rank} (with the mapped axis)"
                    ),
                );
                return Ty::Unknown;
            }
            out_axes.push(if axis < 0 { axis + rank } else { axis });
        }
        if out_axes.iter().all(|&x| x == out_axes[0]) {
            out_axes.truncate(1);
        }
        Ty::Vmap { of: name, in_axes, out_axes }
    }

    /// The parameter each call argument binds (by position or keyword), None where the
    /// binding fails (`bind_user` reports that).
    pub(super) fn param_of_args(sig: &Signature, vals: &Vals) -> Vec<Option<usize>> {
        let positional: Vec<usize> =
            sig.params.iter().enumerate().filter(|(_, p)| !p.keyword_only).map(|(i, _)| i).collect();
        let mut next = 0;
        vals.iter()
            .map(|(kw, _)| match kw {
                None => {
                    next += 1;
                    positional.get(next - 1).copied()
                }
                Some((k, _)) => sig.params.iter().position(|p| &p.name == k),
            })
            .collect()
    }

    pub(super) fn vmap_call(
        &mut self,
        id: ExprId,
        of: &str,
        in_axes: &[Option<i64>],
        out_axes: &[i64],
        vals: &Vals,
    ) -> Ty {
        let Some((key, sig)) = callee_signature(self.db, self.file, of) else {
            return Ty::Unknown;
        };
        let sig = sig.clone();
        let params = Self::param_of_args(&sig, vals);
        let mut inner: Vec<(Option<(String, TextRange)>, ArgVal)> = Vec::new();
        let mut batch: Option<(Dim, ExprId)> = None;
        for ((kw, val), param) in vals.iter().zip(&params) {
            let mut val = val.clone();
            if let Some(Some(axis)) = param.and_then(|p| in_axes.get(p)) {
                let pname = &sig.params[param.unwrap_or(0)].name;
                let t = match self.operand(val.ty.clone()) {
                    Ty::Unknown => return Ty::Unknown,
                    Ty::Tensor(t) => t,
                    other => {
                        let what = format!("a tensor for `{pname}` (`in_axes` maps it)");
                        return self.wrong_kind(val.expr, &format!("vmap({of})"), &what, &other);
                    }
                };
                let rank = t.rank() as i64;
                if *axis < -rank || *axis >= rank {
                    self.error(
                        Code::E0300,
                        self.range(val.expr),
                        format!(
                            "`vmap({of})` maps axis {axis} of `{}`, which is {} (rank {rank})",
                            self.text(val.expr),
                            fmt_dims(&t.dims)
                        ),
                    );
                    return Ty::Unknown;
                }
                let axis = if *axis < 0 { axis + rank } else { *axis } as usize;
                let mut dims = t.dims.clone();
                let size = dims.remove(axis);
                match &batch {
                    None => batch = Some((size, val.expr)),
                    Some((first, first_expr)) if *first != size => {
                        let first_expr = *first_expr;
                        let first = first.clone();
                        self.push(
                            Diagnostic::new(
                                Code::E0301,
                                self.range(val.expr),
                                format!(
                                    "`vmap({of})`: the mapped axes differ in size: {first} in `{}` but {size} in `{}`",
                                    self.text(first_expr),
                                    self.text(val.expr)
                                ),
                            )
                            .with_label(self.range(first_expr), format!("mapped axis of size {first}"))
                            .with_label(self.range(val.expr), format!("mapped axis of size {size}")),
                        );
                        return Ty::Unknown;
                    }
                    Some(_) => {}
                }
                val.ty = Ty::Tensor(TensorType { kind: t.kind, dims, elem: t.elem.clone() });
            }
            inner.push((kw.clone(), val));
        }
        let Some(subst) = self.bind_user(id, of, &sig, &inner) else {
            return Ty::Unknown;
        };
        for (i, p) in sig.params.iter().enumerate() {
            if in_axes.get(i).is_some_and(Option::is_some) && !params.contains(&Some(i)) {
                self.error(
                    Code::E0802,
                    self.range(id),
                    format!("`vmap({of})` maps `{}`, but the call gives no argument for it", p.name),
                );
                return Ty::Unknown;
            }
        }
        let Some((size, _)) = batch else { return Ty::Unknown };
        let ret = match &sig.ret {
            Some(r) => r.clone(),
            None => callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        let add_axis = |t: &Ty, axis: i64| match t {
            Ty::Tensor(t) => {
                let mut dims = t.dims.clone();
                dims.insert((axis as usize).min(dims.len()), size.clone());
                Ty::Tensor(TensorType { kind: t.kind, dims, elem: t.elem.clone() })
            }
            other => other.clone(),
        };
        match substitute_ty(&ret, &subst) {
            Ty::Tuple(items) => Ty::Tuple(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| add_axis(t, out_axes.get(i).or(out_axes.last()).copied().unwrap_or(0)))
                    .collect(),
            ),
            one => add_axis(&one, out_axes.first().copied().unwrap_or(0)),
        }
    }

    // ----- jvp -----------------------------------------------------------------------

    /// The items of a tuple argument with the expression of each (the literal's items,
    /// or the whole argument when it is a name).
    fn tuple_items(&mut self, v: &ArgVal, what: &str) -> Option<Vec<ArgVal>> {
        let items = match &v.ty {
            Ty::Tuple(items) | Ty::List(items) => items.clone(),
            Ty::Unknown => return None,
            other => {
                let other = other.clone();
                self.wrong_kind(v.expr, "jvp", &format!("a tuple of {what}, one per parameter"), &other);
                return None;
            }
        };
        let mut e = v.expr;
        while let Expr::Paren(inner) = self.body.expr(e) {
            e = *inner;
        }
        let exprs: Vec<ExprId> = match self.body.expr(e) {
            Expr::Tuple(xs) | Expr::List(xs) if xs.len() == items.len() => xs.clone(),
            _ if what == "primal values" => {
                // The primals are `f`'s arguments, bound one by one.
                self.push(
                    Diagnostic::new(
                        Code::E0802,
                        self.range(v.expr),
                        format!("`jvp` takes its primal values as a tuple literal, not `{}`", self.text(v.expr)),
                    )
                    .with_note("write them out: `jvp(f, (x, W), tangents)`"),
                );
                return None;
            }
            _ => vec![v.expr; items.len()],
        };
        Some(items.into_iter().zip(exprs).map(|(ty, expr)| ArgVal { expr, ty }).collect())
    }

    pub(super) fn jvp(&mut self, id: ExprId, a: &Bound) -> Ty {
        let f = arg!(a, "jvp" => "f").unwrap().clone();
        let Some((name, sig, _)) = self.transform_target(&f, "jvp") else {
            return Ty::Unknown;
        };
        let primals_arg = arg!(a, "jvp" => "primals").unwrap().clone();
        let tangents_arg = arg!(a, "jvp" => "tangents").unwrap().clone();
        let Some(primals) = self.tuple_items(&primals_arg, "primal values") else { return Ty::Unknown };
        let Some(tangents) = self.tuple_items(&tangents_arg, "tangents") else { return Ty::Unknown };
        if primals.len() != tangents.len() {
            self.push(
                Diagnostic::new(
                    Code::E0801,
                    self.range(tangents_arg.expr),
                    format!(
                        "`jvp({name})` got {} primal{} but {} tangent{}",
                        primals.len(),
                        if primals.len() == 1 { "" } else { "s" },
                        tangents.len(),
                        if tangents.len() == 1 { "" } else { "s" }
                    ),
                )
                .with_label(self.range(primals_arg.expr), format!("{} primals", primals.len()))
                .with_note("give one tangent per primal, of its shape and dtype"),
            );
            return Ty::Unknown;
        }
        for (p, t) in primals.iter().zip(&tangents) {
            let (pt, tt) = (self.operand(p.ty.clone()), self.operand(t.ty.clone()));
            let pt = match pt {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tensor(pt) if pt.elem.dtype.is_float() => pt,
                Ty::Tensor(pt) => {
                    self.error(
                        Code::E0400,
                        self.range(p.expr),
                        format!(
                            "`jvp({name})` differentiates float tensors, but `{}` is {}",
                            self.text(p.expr),
                            pt.elem.dtype
                        ),
                    );
                    return Ty::Unknown;
                }
                other => return self.wrong_kind(p.expr, "jvp", "a float tensor primal", &other),
            };
            let tt = match tt {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tensor(tt) => tt,
                other => return self.wrong_kind(t.expr, "jvp", "a tensor tangent", &other),
            };
            let (code, problem) = if tt.rank() != pt.rank() {
                (Code::E0300, format!("rank {} but its primal has rank {}", tt.rank(), pt.rank()))
            } else if tt.dims != pt.dims {
                (Code::E0301, format!("{} but its primal is {}", fmt_dims(&tt.dims), fmt_dims(&pt.dims)))
            } else if tt.elem.dtype != pt.elem.dtype {
                (Code::E0400, format!("{} but its primal is {}", tt.elem.dtype, pt.elem.dtype))
            } else {
                continue;
            };
            self.push(
                Diagnostic::new(
                    code,
                    self.range(t.expr),
                    format!("`jvp({name})`: the tangent `{}` is {problem}", self.text(t.expr)),
                )
                .with_label(self.range(p.expr), format!("the primal `{}`", self.text(p.expr)))
                .with_note("a tangent has its primal's shape and dtype"),
            );
            return Ty::Unknown;
        }
        let vals: Vec<(Option<(String, TextRange)>, ArgVal)> = primals.into_iter().map(|p| (None, p)).collect();
        let Some(subst) = self.bind_user(id, &name, &sig, &vals) else {
            return Ty::Unknown;
        };
        let Some((key, _)) = callee_signature(self.db, self.file, &name) else { return Ty::Unknown };
        let ret = match &sig.ret {
            Some(r) => r.clone(),
            None => callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        match substitute_ty(&ret, &subst) {
            Ty::Unknown => Ty::Unknown,
            Ty::Tensor(t) if t.elem.dtype.is_float() => Ty::Tuple(vec![Ty::Tensor(t.clone()), Ty::Tensor(t)]),
            other => {
                self.push(
                    Diagnostic::new(
                        Code::E0802,
                        self.range(f.expr),
                        format!("`jvp` needs `{name}` to return one float tensor, but it returns {other}"),
                    )
                    .with_note("return one tensor (transform a function per output)"),
                );
                Ty::Unknown
            }
        }
    }
}
