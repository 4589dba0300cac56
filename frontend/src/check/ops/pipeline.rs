//! `dist.pipeline(stage, stages=S, microbatches=M, axis="pp")` (docs/language.md,
//! "Pipeline parallelism"): which stage functions it takes, and the type of a call. The
//! call `dist.pipeline(stage, ...)(x, W1, ...)` is checked as a call of `stage` on one
//! microbatch (`x` with dim 0 divided by M) and one stage's parameters (each stacked
//! tensor without its leading `stages` dim); its value is `stage`'s result with dim 0
//! back to `x`'s. Lowering it is `passes::lower::graph::pipeline`.

use crate::check::dims::Dim;
use crate::check::infer::{callee_inference, callee_signature, Infer};
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{substitute_ty, ArgVal, Bound};

type Vals = [(Option<(String, TextRange)>, ArgVal)];

impl Infer<'_> {
    pub(super) fn dist_pipeline(&mut self, a: &Bound) -> Ty {
        let f = arg!(a, "dist.pipeline" => "stage").unwrap().clone();
        let Some((name, sig, ret)) = self.transform_target(&f, "dist.pipeline") else { return Ty::Unknown };
        let count = |this: &mut Self, v: &ArgVal, what: &str| -> Option<i64> {
            match v.ty.const_int() {
                Some(n) if n >= 1 => Some(n),
                _ if v.ty.is_unknown() => None,
                _ => {
                    this.wrong_kind(v.expr, "dist.pipeline", &format!("a positive constant number of {what}"), &v.ty);
                    None
                }
            }
        };
        let stages_arg = arg!(a, "dist.pipeline" => "stages").unwrap().clone();
        let micro_arg = arg!(a, "dist.pipeline" => "microbatches").unwrap().clone();
        let stages = count(self, &stages_arg, "stages");
        let microbatches = count(self, &micro_arg, "microbatches");
        let axis_arg = arg!(a, "dist.pipeline" => "axis").unwrap().clone();
        let axis = match &axis_arg.ty {
            Ty::Str(Some(s)) => Some(s.clone()),
            Ty::Unknown => None,
            other => {
                self.wrong_kind(axis_arg.expr, "dist.pipeline", "a mesh axis name (\"pp\")", &other.clone());
                None
            }
        };
        let (Some(stages), Some(microbatches), Some(axis)) = (stages, microbatches, axis) else { return Ty::Unknown };
        // The stage: an activation in, one tensor of its shape out.
        let first_is_tensor = sig.params.first().is_some_and(|p| matches!(p.ty, Ty::Tensor(_) | Ty::Unknown));
        if !first_is_tensor {
            self.push(
                Diagnostic::new(
                    Code::E0802,
                    self.range(f.expr),
                    format!("`dist.pipeline` needs a stage whose first parameter is the activation, a tensor; `{name}`'s is not"),
                )
                .with_note("a stage takes the microbatch's activation first, then its own parameters"),
            );
            return Ty::Unknown;
        }
        if !matches!(ret, Ty::Tensor(_) | Ty::Unknown) {
            self.push(Diagnostic::new(
                Code::E0802,
                self.range(f.expr),
                format!(
                    "`dist.pipeline` needs a stage that returns one tensor (the next stage's activation); `{name}` returns {}",
                    ret.kind_name()
                ),
            ));
            return Ty::Unknown;
        }
        // The pipeline's axis: one of the mesh's, with one position per stage.
        let mesh = self.sig.and_then(|s| s.params.iter().find_map(|p| p.sharding.as_ref())).map(|s| s.mesh.clone());
        if let Some(m) = mesh {
            let Some(i) = m.axes.iter().position(|a| *a == axis) else {
                let mut d = Diagnostic::new(
                    Code::E0311,
                    self.range(axis_arg.expr),
                    format!("the function's mesh has no axis `{axis}` (its axes: {})", m.axes.join(", ")),
                );
                if let Some(s) = crate::diagnostics::suggest(&axis, m.axes.iter().map(String::as_str)) {
                    d = d.with_did_you_mean(self.range(axis_arg.expr), &format!("\"{s}\""));
                }
                self.push(d);
                return Ty::Unknown;
            };
            if m.shape[i] != stages {
                self.push(
                    Diagnostic::new(
                        Code::E0317,
                        self.range(stages_arg.expr),
                        format!(
                            "{stages} pipeline stages over mesh axis `{axis}`, which has {} devices: each stage runs \
                             at one position of the axis",
                            m.shape[i]
                        ),
                    )
                    .with_label(self.range(axis_arg.expr), format!("`{axis}` has {} positions", m.shape[i])),
                );
                return Ty::Unknown;
            }
        }
        Ty::Pipeline { of: name, stages, microbatches, axis }
    }

    /// `dist.pipeline(stage, ...)(x, W1, ...)`.
    pub(super) fn pipeline_call(&mut self, id: ExprId, of: &str, stages: i64, microbatches: i64, vals: &Vals) -> Ty {
        let Some((key, sig)) = callee_signature(self.db, self.file, of) else { return Ty::Unknown };
        let sig = sig.clone();
        let params = Self::param_of_args(&sig, vals);
        let what = format!("dist.pipeline({of})");
        let mut inner: Vec<(Option<(String, TextRange)>, ArgVal)> = Vec::new();
        let mut batch: Option<Dim> = None;
        for ((kw, val), param) in vals.iter().zip(&params) {
            let mut val = val.clone();
            let Some(p) = param.map(|i| &sig.params[i]) else {
                inner.push((kw.clone(), val));
                continue;
            };
            let t = match self.operand(val.ty.clone()) {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tensor(t) | Ty::DistTensor(t) => t,
                // Scalars and ints are every stage's.
                _ if !matches!(p.ty, Ty::Tensor(_)) => {
                    inner.push((kw.clone(), val));
                    continue;
                }
                other => return self.wrong_kind(val.expr, &what, &format!("a tensor for `{}`", p.name), &other),
            };
            if *param == Some(0) {
                // The activation: dim 0 is split into the microbatches.
                let Some(b) = t.dims.first().cloned() else {
                    self.error(
                        Code::E0300,
                        self.range(val.expr),
                        format!("`{what}` splits dim 0 of `{}` into microbatches: it has no dims", self.text(val.expr)),
                    );
                    return Ty::Unknown;
                };
                if b.as_const().is_some_and(|n| n % microbatches != 0) {
                    self.error(
                        Code::E0301,
                        self.range(val.expr),
                        format!(
                            "`{what}` splits dim 0 of `{}` ({b}) into {microbatches} microbatches, which it does not divide",
                            self.text(val.expr)
                        ),
                    );
                    return Ty::Unknown;
                }
                let Some(per) = b.floor_div(&Dim::constant(microbatches)) else { return Ty::Unknown };
                let mut dims = t.dims.clone();
                dims[0] = per;
                batch = Some(b);
                val.ty = Ty::Tensor(TensorType { kind: t.kind, dims, elem: t.elem.clone() });
            } else {
                // A stacked parameter: one slice of dim 0 per stage.
                let lead = t.dims.first().cloned();
                match lead.as_ref().and_then(Dim::as_const) {
                    Some(n) if n == stages => {}
                    Some(n) => {
                        self.error(
                            Code::E0301,
                            self.range(val.expr),
                            format!(
                                "`{what}` takes `{}` stacked for its {stages} stages (dim 0 of {stages}), but dim 0 of `{}` is {n}",
                                p.name,
                                self.text(val.expr)
                            ),
                        );
                        return Ty::Unknown;
                    }
                    None if lead.is_none() => {
                        self.error(
                            Code::E0300,
                            self.range(val.expr),
                            format!(
                                "`{what}` takes `{}` stacked for its stages, one slice of dim 0 each; `{}` has no dims",
                                p.name,
                                self.text(val.expr)
                            ),
                        );
                        return Ty::Unknown;
                    }
                    None => {}
                }
                let dims = t.dims[1..].to_vec();
                val.ty = Ty::Tensor(TensorType { kind: t.kind, dims, elem: t.elem.clone() });
            }
            inner.push((kw.clone(), val));
        }
        let Some(subst) = self.bind_user(id, of, &sig, &inner) else { return Ty::Unknown };
        let (Some(batch), Some(activation)) = (batch, inner.iter().zip(&params).find(|(_, p)| **p == Some(0))) else {
            return Ty::Unknown;
        };
        let ret = match &sig.ret {
            Some(r) => r.clone(),
            None => callee_inference(self.db, key).return_ty.clone().unwrap_or(Ty::Unknown),
        };
        let (Ty::Tensor(out), Ty::Tensor(input)) = (substitute_ty(&ret, &subst), &activation.0 .1.ty) else {
            return Ty::Unknown;
        };
        // Stage k's result is stage k+1's activation.
        if out.dims != input.dims || out.elem.dtype != input.elem.dtype {
            self.push(
                Diagnostic::new(
                    Code::E0301,
                    self.range(id),
                    format!(
                        "`{what}`: a stage's result is the next stage's activation, but `{of}` turns a {} {} microbatch \
                         into a {} {}",
                        fmt_dims(&input.dims),
                        input.elem.dtype,
                        fmt_dims(&out.dims),
                        out.elem.dtype
                    ),
                )
                .with_label(self.range(activation.0 .1.expr), "the activation"),
            );
            return Ty::Unknown;
        }
        let mut dims = out.dims.clone();
        dims[0] = batch;
        Ty::Tensor(TensorType { kind: out.kind, dims, elem: out.elem })
    }
}
