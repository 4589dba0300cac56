//! `grad`, calls of user functions (symbol unification) and method calls.

use std::collections::BTreeMap;

use crate::check::dims::Dim;
use crate::check::infer::{callee_inference, callee_signature, Infer, Mode};
use crate::check::types::*;
use crate::check::{FunctionKind, Signature};
use crate::diagnostics::{suggest, Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{signature_params, substitute_ty, ArgVal, Bound};

impl<'a> Infer<'a> {
    // ----- grad ----------------------------------------------------------------------

    pub(super) fn grad(&mut self, a: &Bound) -> Ty {
        let f = arg!(a, "grad" => "f").unwrap().clone();
        let name = match &f.ty {
            Ty::Function(n) => n.clone(),
            Ty::Unknown => return Ty::Unknown,
            other => return self.wrong_kind(f.expr, "grad", "an @autodiff function", other),
        };
        let Some((key, sig)) = callee_signature(self.db, self.file, &name) else {
            return Ty::Unknown;
        };
        if sig.autodiff && self.grad_through_kernel(f.expr, &name, key) {
            return Ty::Unknown;
        }
        if !sig.autodiff {
            self.push(
                Diagnostic::new(
                    Code::E0807,
                    self.range(f.expr),
                    format!("`{name}` is not differentiable: it is not decorated with @autodiff"),
                )
                .with_note(format!("add `@autodiff` to `{name}`")),
            );
            return Ty::Unknown;
        }
        let ret = match &sig.ret {
            Some(r) => r.clone(),
            None => callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        let scalar_float = match &ret {
            Ty::Tensor(t) => t.rank() == 0 && t.elem.dtype.is_float(),
            Ty::Scalar(e) => e.dtype.is_float(),
            Ty::Float(_) | Ty::Unknown => true,
            _ => false,
        };
        if !scalar_float {
            self.push(
                Diagnostic::new(
                    Code::E0806,
                    self.range(f.expr),
                    format!("`grad({name})` needs `{name}` to return a rank-0 float tensor, but it returns {ret}"),
                )
                .with_note("reduce the result to a scalar loss first, e.g. with `sum(...)` or `mean(...)`"),
            );
            return Ty::Unknown;
        }
        let wrt = match arg!(a, "grad" => "wrt") {
            None => Vec::new(),
            Some(w) => match &w.ty {
                Ty::NoneVal => Vec::new(),
                Ty::Str(Some(s)) => vec![s.clone()],
                Ty::Tuple(items) | Ty::List(items) => {
                    let names: Vec<String> = items
                        .iter()
                        .filter_map(|i| match i {
                            Ty::Str(Some(s)) => Some(s.clone()),
                            _ => None,
                        })
                        .collect();
                    names
                }
                other => return self.wrong_kind(w.expr, "grad", "a tuple of parameter names", &other.clone()),
            },
        };
        for w in &wrt {
            match sig.param(w) {
                Some(p) if matches!(&p.ty, Ty::Tensor(t) if t.elem.dtype.is_float()) => {}
                Some(_) => {
                    let r = self.range(arg!(a, "grad" => "wrt").unwrap().expr);
                    self.error(Code::E0802, r, format!("`{w}` is not a floating-point tensor parameter of `{name}`"));
                    return Ty::Unknown;
                }
                None => {
                    let r = self.range(arg!(a, "grad" => "wrt").unwrap().expr);
                    let mut d = Diagnostic::new(Code::E0802, r, format!("`{name}` has no parameter `{w}`"));
                    if let Some(s) = suggest(w, sig.params.iter().map(|p| p.name.as_str())) {
                        d = d.with_note(format!("did you mean `{s}`?"));
                    }
                    self.push(d);
                    return Ty::Unknown;
                }
            }
        }
        Ty::Grad { of: name, wrt }
    }

    pub(super) fn grad_call(
        &mut self,
        id: ExprId,
        of: &str,
        wrt: &[String],
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        let Some((_, sig)) = callee_signature(self.db, self.file, of) else {
            return Ty::Unknown;
        };
        let sig = sig.clone();
        if self.bind_user(id, of, &sig, vals).is_none() {
            return Ty::Unknown;
        }
        let selected: Vec<Ty> = sig
            .params
            .iter()
            .filter(|p| {
                if wrt.is_empty() {
                    matches!(&p.ty, Ty::Tensor(t) if t.elem.dtype.is_float())
                } else {
                    wrt.contains(&p.name)
                }
            })
            .map(|p| p.ty.clone())
            .collect();
        // Gradients have the parameters' shapes as seen by this call.
        let subst = self.last_substitution.take().unwrap_or_default();
        Ty::Tuple(selected.into_iter().map(|t| substitute_ty(&t, &subst)).collect())
    }

    // ----- user functions ------------------------------------------------------------

    pub(super) fn user_call(
        &mut self,
        id: ExprId,
        func: ExprId,
        name: &str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        let Some((key, sig)) = callee_signature(self.db, self.file, name) else {
            return Ty::Unknown;
        };
        let sig = sig.clone();
        if sig.kind == FunctionKind::Kernel && self.mode == Mode::Kernel {
            self.error(
                Code::E0503,
                self.range(func),
                format!("`{name}` is a kernel: a kernel cannot launch another kernel"),
            );
            return Ty::Unknown;
        }
        let Some(subst) = self.bind_user(id, name, &sig, vals) else {
            return Ty::Unknown;
        };
        match &sig.ret {
            _ if sig.kind == FunctionKind::Kernel => self.kernel_call_result(func, name, key, &sig, &subst, vals),
            Some(r) => substitute_ty(r, &subst),
            None => {
                let ret = callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown);
                substitute_ty(&ret, &subst)
            }
        }
    }

    /// Binds arguments to a user function's parameters and unifies dim symbols
    /// (E0301 with a label at each binding).
    pub(super) fn bind_user(
        &mut self,
        id: ExprId,
        name: &str,
        sig: &Signature,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Option<BTreeMap<String, Dim>> {
        let mut assigned: Vec<Option<ArgVal>> = vec![None; sig.params.len()];
        let positional: Vec<usize> =
            sig.params.iter().enumerate().filter(|(_, p)| !p.keyword_only).map(|(i, _)| i).collect();
        let mut next = 0usize;
        let mut ok = true;
        for (kw, val) in vals {
            match kw {
                None => {
                    if next >= positional.len() {
                        self.error(
                            Code::E0801,
                            self.range(val.expr),
                            format!(
                                "`{name}` takes {} positional argument{} but more were given",
                                positional.len(),
                                if positional.len() == 1 { "" } else { "s" }
                            ),
                        );
                        ok = false;
                        continue;
                    }
                    assigned[positional[next]] = Some(val.clone());
                    next += 1;
                }
                Some((k, r)) => match sig.params.iter().position(|p| &p.name == k) {
                    Some(i) if assigned[i].is_none() => assigned[i] = Some(val.clone()),
                    Some(_) => {
                        self.error(Code::E0801, *r, format!("`{name}` got multiple values for `{k}`"));
                        ok = false;
                    }
                    None => {
                        let mut d = Diagnostic::new(Code::E0804, *r, format!("`{name}` has no parameter `{k}`"));
                        if let Some(s) = suggest(k, sig.params.iter().map(|p| p.name.as_str())) {
                            d = d.with_did_you_mean(*r, s);
                        }
                        self.push(d);
                        ok = false;
                    }
                },
            }
        }
        let missing: Vec<&str> = sig
            .params
            .iter()
            .zip(&assigned)
            .filter(|(p, a)| a.is_none() && !p.has_default)
            .map(|(p, _)| p.name.as_str())
            .collect();
        if ok && !missing.is_empty() {
            self.error(
                Code::E0801,
                self.range(id),
                format!(
                    "`{name}` is missing argument{} {}",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                ),
            );
            ok = false;
        }
        if !ok {
            return None;
        }
        // Unify: bind simple symbols first, then compare composite dims.
        let mut subst: BTreeMap<String, (Dim, ExprId)> = BTreeMap::new();
        let mut deferred: Vec<(Dim, Dim, ExprId, String)> = Vec::new();
        for (p, arg) in sig.params.iter().zip(&assigned) {
            let Some(arg) = arg else { continue };
            let arg_ty = self.operand(arg.ty.clone());
            match (&p.ty, &arg_ty) {
                (_, Ty::Unknown) | (Ty::Unknown, _) => {}
                (Ty::Tensor(pt), Ty::Tensor(at) | Ty::DistTensor(at)) => {
                    if pt.rank() != at.rank() {
                        self.push(Diagnostic::new(
                            Code::E0300,
                            self.range(arg.expr),
                            format!(
                                "`{name}` expects `{}` of rank {} ({}), but `{}` is {} (rank {})",
                                p.name,
                                pt.rank(),
                                fmt_dims(&pt.dims),
                                self.text(arg.expr),
                                fmt_dims(&at.dims),
                                at.rank()
                            ),
                        ));
                        return None;
                    }
                    if pt.elem.dtype != at.elem.dtype {
                        self.push(Diagnostic::new(
                            Code::E0400,
                            self.range(arg.expr),
                            format!(
                                "`{name}` expects `{}` of dtype {}, but `{}` is {}",
                                p.name,
                                pt.elem.dtype,
                                self.text(arg.expr),
                                at.elem.dtype
                            ),
                        ));
                        return None;
                    }
                    for (pd, ad) in pt.dims.iter().zip(&at.dims) {
                        if let Some(sym) = pd.as_sym() {
                            match subst.get(sym) {
                                None => {
                                    subst.insert(sym.to_string(), (ad.clone(), arg.expr));
                                }
                                Some((prev, prev_expr)) if prev != ad => {
                                    let prev_expr = *prev_expr;
                                    let prev = prev.clone();
                                    self.push(
                                        Diagnostic::new(
                                            Code::E0301,
                                            self.range(arg.expr),
                                            format!(
                                                "`{name}`: symbol {sym} is bound to {prev} by `{}` and to {ad} by `{}`",
                                                self.text(prev_expr),
                                                self.text(arg.expr)
                                            ),
                                        )
                                        .with_label(self.range(prev_expr), format!("{sym} = {prev} here"))
                                        .with_label(self.range(arg.expr), format!("{sym} = {ad} here"))
                                        .with_note(format!("`{name}` declares {}", signature_params(sig))),
                                    );
                                    return None;
                                }
                                Some(_) => {}
                            }
                        } else {
                            deferred.push((pd.clone(), ad.clone(), arg.expr, p.name.clone()));
                        }
                    }
                }
                (Ty::Int(Some(pd)), Ty::Int(Some(ad))) => {
                    if let Some(sym) = pd.as_sym() {
                        subst.entry(sym.to_string()).or_insert((ad.clone(), arg.expr));
                    }
                }
                (Ty::Tensor(_), other) => {
                    self.wrong_kind(arg.expr, name, &format!("a tensor for `{}`", p.name), &other.clone());
                    return None;
                }
                (Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_) | Ty::Bool(_), other @ (Ty::Tensor(_) | Ty::Tile(_))) => {
                    self.wrong_kind(arg.expr, name, &format!("a scalar for `{}`", p.name), &other.clone());
                    return None;
                }
                _ => {}
            }
        }
        let plain: BTreeMap<String, Dim> = subst.iter().map(|(k, (d, _))| (k.clone(), d.clone())).collect();
        for (pd, ad, expr, pname) in deferred {
            let expected = pd.substitute(&|s| plain.get(s).cloned());
            if expected.symbols().iter().all(|s| plain.contains_key(s) || !pd.symbols().contains(s)) && expected != ad {
                self.push(Diagnostic::new(
                    Code::E0301,
                    self.range(expr),
                    format!(
                        "`{name}` expects `{pname}` to have a dim {pd} = {expected}, but `{}` has {ad}",
                        self.text(expr)
                    ),
                ));
                return None;
            }
        }
        self.last_substitution = Some(plain.clone());
        Some(plain)
    }

    // ----- methods -------------------------------------------------------------------

    pub(super) fn method_call(
        &mut self,
        id: ExprId,
        func: ExprId,
        recv: Ty,
        name: &str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        match recv {
            Ty::Schedule(s) => self.schedule_method(id, *s, name, vals),
            Ty::Function(kernel) if name == "with_schedule" => self.with_schedule(id, kernel, vals),
            Ty::Builtin(kernel) if name == "with_schedule" => self.with_schedule(id, kernel.to_string(), vals),
            Ty::Tensor(cache) if cache.kind == TensorKind::KVCache => self.cache_method(id, cache, name, vals),
            Ty::Tensor(state) if state.kind == TensorKind::OptimizerState => self.optimizer_method(id, state, vals),
            _ => {
                let _ = func;
                Ty::Unknown
            }
        }
    }
}
