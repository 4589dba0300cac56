//! Graph-level state: `KVCache[B, H, S_max, D_h, dtype]` values and their methods.
//!
//! A cache's type is a [`TensorType`] of kind `KVCache` with five dims: the four of its
//! annotation, `[B, H, S_max, D_h]` (`S_max` is the capacity), and its current length
//! last. A cache parameter `cache` starts with the length symbol `cache.len` (a shape
//! symbol of the function, bound at run time: `tessera run --arg cache.len=N`);
//! `.append(k, v)` adds `k`'s sequence dim to it and `.prune(n)` sets it to `n`, so the
//! views `.K` and `.V` (`[B, H, len, D_h]`) and `flash_attention(q, cache)` see the
//! length as a dim like any other.

use super::*;
use crate::check::ParamInfo;

/// The capacity's position in a cache's dims.
const CAPACITY: usize = 2;
/// The length's position (after the annotation's four dims).
const LENGTH: usize = 4;

/// The length symbol of the cache parameter `param`.
pub fn cache_len_symbol(param: &str) -> String {
    format!("{param}.len")
}

/// A cache parameter's type: its annotation's `[B, H, S_max, D_h]` plus the length
/// symbol of `param`. Other types are returned as they are.
pub fn cache_param_type(param: &str, ty: Ty) -> Ty {
    match ty {
        Ty::Tensor(mut t) if t.kind == TensorKind::KVCache && t.dims.len() == LENGTH => {
            t.dims.push(Dim::sym(&cache_len_symbol(param)));
            Ty::Tensor(t)
        }
        other => other,
    }
}

/// The current length of a cache type.
pub fn cache_len(t: &TensorType) -> Option<&Dim> {
    (t.kind == TensorKind::KVCache).then(|| t.dims.get(LENGTH)).flatten()
}

/// The capacity (`S_max`) of a cache type.
pub fn cache_capacity(t: &TensorType) -> Option<&Dim> {
    (t.kind == TensorKind::KVCache && t.dims.len() > LENGTH).then(|| &t.dims[CAPACITY])
}

/// The tensor type of a cache's `.K` / `.V`: `[B, H, len, D_h]`.
pub fn cache_view(t: &TensorType) -> Option<TensorType> {
    let len = cache_len(t)?;
    let dims = vec![t.dims[0].clone(), t.dims[1].clone(), len.clone(), t.dims[3].clone()];
    Some(TensorType { kind: TensorKind::Tensor, dims, elem: t.elem.clone() })
}

fn with_len(t: &TensorType, len: Dim) -> TensorType {
    let mut out = t.clone();
    out.dims[LENGTH] = len;
    out
}

/// A polynomial that is a sum of symbols with non-negative coefficients plus a constant:
/// its smallest value when every symbol is at least 0 (lengths can be 0) is that constant.
fn lower_bound(d: &Dim) -> Option<i64> {
    let mut constant = 0;
    for (mono, coef) in d.monomials() {
        if mono.is_empty() {
            constant = coef;
        } else if coef < 0 {
            return None;
        }
    }
    Some(constant)
}

impl Infer<'_> {
    /// `cache.append(k, v)` and `cache.prune(n)`.
    pub(super) fn cache_method(
        &mut self,
        id: ExprId,
        cache: TensorType,
        name: &str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        let (Some(len), Some(capacity)) = (cache_len(&cache).cloned(), cache_capacity(&cache).cloned()) else {
            return Ty::Unknown;
        };
        if let Some((Some((k, range)), _)) = vals.iter().find(|(n, _)| n.is_some()) {
            self.error(Code::E0804, *range, format!("`{name}` takes no keyword arguments (`{k}`)"));
            return Ty::Unknown;
        }
        match name {
            "append" => {
                if vals.len() != 2 {
                    self.error(Code::E0801, self.range(id), "`append` takes 2 arguments (k, v)");
                    return Ty::Unknown;
                }
                let view = cache_view(&cache).expect("a cache type");
                let mut seq: Option<Dim> = None;
                for (_, arg) in vals {
                    let t = match &arg.ty {
                        Ty::Tensor(t) if t.kind == TensorKind::Tensor => t.clone(),
                        Ty::Unknown => return Ty::Unknown,
                        other => {
                            let other = other.clone();
                            return self.wrong_kind(arg.expr, "KVCache.append", "a [B, H, s, D_h] tensor", &other);
                        }
                    };
                    let ok = t.rank() == 4 && [0, 1, 3].iter().all(|&i| t.dims[i] == view.dims[i]);
                    if !ok {
                        self.error(
                            if t.rank() == 4 { Code::E0301 } else { Code::E0300 },
                            self.range(arg.expr),
                            format!(
                                "KVCache.append: `{}` is {} but the cache holds {} (all dims but the sequence dim must match)",
                                self.text(arg.expr),
                                fmt_dims(&t.dims),
                                fmt_dims(&view.dims)
                            ),
                        );
                        return Ty::Unknown;
                    }
                    if t.elem.dtype != cache.elem.dtype {
                        self.error(
                            Code::E0400,
                            self.range(arg.expr),
                            format!(
                                "KVCache.append: `{}` is {} but the cache stores {} (cast it first)",
                                self.text(arg.expr),
                                t.elem.dtype,
                                cache.elem.dtype
                            ),
                        );
                        return Ty::Unknown;
                    }
                    match &seq {
                        Some(s) if *s != t.dims[2] => {
                            self.error(
                                Code::E0301,
                                self.range(arg.expr),
                                format!("KVCache.append: k and v append {s} and {} positions", t.dims[2]),
                            );
                            return Ty::Unknown;
                        }
                        _ => seq = Some(t.dims[2].clone()),
                    }
                }
                let seq = seq.expect("two arguments");
                let new_len = len.add(&seq);
                // Static where provable: the length is at least the constant part of it.
                if let Some(least) = lower_bound(&new_len.sub(&capacity)).filter(|&c| c > 0) {
                    self.push(
                        Diagnostic::new(
                            Code::E0306,
                            self.range(id),
                            format!(
                                "KVCache.append: the cache holds at most {capacity} positions, but this append makes it {new_len} (at least {least} too many)"
                            ),
                        )
                        .with_note("`prune(n)` first, or declare a larger S_max"),
                    );
                    return Ty::Unknown;
                }
                Ty::Tensor(with_len(&cache, new_len))
            }
            "prune" => {
                if vals.len() != 1 {
                    self.error(Code::E0801, self.range(id), "`prune` takes 1 argument (n, the positions to keep)");
                    return Ty::Unknown;
                }
                let arg = &vals[0].1;
                let n = match arg.ty.int_value() {
                    Some(n) => n.clone(),
                    None if matches!(arg.ty, Ty::Unknown) => return Ty::Unknown,
                    None => {
                        let ty = arg.ty.clone();
                        return self.wrong_kind(arg.expr, "KVCache.prune", "an int (a constant or a dim symbol)", &ty);
                    }
                };
                if let Some(c) = n.as_const().filter(|&c| c < 0) {
                    self.error(Code::E0306, self.range(arg.expr), format!("KVCache.prune keeps {c} positions"));
                    return Ty::Unknown;
                }
                if let Some(least) = lower_bound(&n.sub(&capacity)).filter(|&c| c > 0) {
                    self.error(
                        Code::E0306,
                        self.range(arg.expr),
                        format!("KVCache.prune({n}): the cache holds at most {capacity} positions ({least} too many)"),
                    );
                    return Ty::Unknown;
                }
                Ty::Tensor(with_len(&cache, n))
            }
            _ => Ty::Unknown,
        }
    }
}

// ----- optimizer state ---------------------------------------------------------------

/// The name `OptimizerState[W]` (with or without policies) refers to.
pub(crate) fn optimizer_target(body: &Body, ann: ExprId) -> Option<(String, ExprId)> {
    let mut e = body.unparen(ann);
    while let Expr::Binary { op: BinOp::MatMul, lhs, .. } = body.expr(e) {
        e = body.unparen(*lhs);
    }
    match body.expr(e) {
        Expr::Subscript { indices, .. } => match indices[..] {
            [i] => match body.expr(i) {
                Expr::Name(n) => Some((n.to_string(), i)),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// An `OptimizerState[W] @policies` parameter's type: W's dims and dtype (W a tensor
/// parameter declared before it) with the state's policies. Other types are returned as
/// they are; a W that is not such a parameter is E0802 (the type is then unknown).
pub fn optimizer_state_param_type(cx: &mut Infer, ann: Option<ExprId>, ty: Ty, params: &[ParamInfo]) -> Ty {
    let Ty::Tensor(t) = &ty else { return ty };
    if t.kind != TensorKind::OptimizerState || !t.dims.is_empty() {
        return ty;
    }
    let Some((name, at)) = ann.and_then(|a| optimizer_target(cx.body, a)) else {
        if let Some(a) = ann {
            cx.error(Code::E0802, cx.range(a), "OptimizerState[W] names one tensor parameter W of the function");
        }
        return Ty::Unknown;
    };
    match params.iter().find(|p| p.name == name).map(|p| &p.ty) {
        Some(Ty::Tensor(w)) if w.kind == TensorKind::Tensor && w.elem.dtype.is_float() => {
            let elem = ElemType { dtype: w.elem.dtype, policies: t.elem.policies.clone() };
            Ty::Tensor(TensorType { kind: TensorKind::OptimizerState, dims: w.dims.clone(), elem })
        }
        Some(Ty::Unknown) => Ty::Unknown,
        _ => {
            cx.push(
                Diagnostic::new(
                    Code::E0802,
                    cx.range(at),
                    format!("OptimizerState[{name}]: `{name}` is not a float tensor parameter declared before it"),
                )
                .with_note(
                    "the state belongs to a parameter: `W: Tensor[\"K\", \"N\", bf16], state: OptimizerState[W]`",
                ),
            );
            Ty::Unknown
        }
    }
}

/// Whether an optimizer state keeps an f32 master copy of its parameter.
pub fn has_fp32_master(t: &TensorType) -> bool {
    t.elem.policies.iter().any(|p| matches!(p, Policy::Fp32Master))
}

impl Infer<'_> {
    /// `.m`, `.v`, `.step`, `.master` and `.adam` of an optimizer state.
    pub(crate) fn optimizer_attribute(&mut self, t: TensorType, name: &str, range: TextRange) -> Ty {
        let f32_like = |t: &TensorType| {
            Ty::Tensor(TensorType { kind: TensorKind::Tensor, dims: t.dims.clone(), elem: ElemType::plain(DType::F32) })
        };
        match name {
            "m" | "v" => f32_like(&t),
            "master" if has_fp32_master(&t) => f32_like(&t),
            "step" => Ty::Scalar(ElemType::plain(DType::F32)),
            "adam" => Ty::Method { recv: Box::new(Ty::Tensor(t)), name: name.to_string() },
            _ => {
                let mut known = vec!["m", "v", "step", "adam"];
                if has_fp32_master(&t) {
                    known.push("master");
                }
                let d = Diagnostic::new(Code::E0201, range, format!("an optimizer state has no attribute `{name}`"));
                self.push(d.with_note(format!("available: {}", known.join(", "))));
                Ty::Unknown
            }
        }
    }

    /// `state.adam(W, g, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)`:
    /// `(W', state')`.
    pub(super) fn optimizer_method(
        &mut self,
        id: ExprId,
        state: TensorType,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        const KEYWORDS: [&str; 5] = ["lr", "beta1", "beta2", "eps", "weight_decay"];
        let positional: Vec<&ArgVal> = vals.iter().filter(|(n, _)| n.is_none()).map(|(_, v)| v).collect();
        for (n, v) in vals {
            if let Some((k, range)) = n {
                if !KEYWORDS.contains(&k.as_str()) {
                    self.error(
                        Code::E0804,
                        *range,
                        format!("`adam` has no parameter `{k}` (it takes {})", KEYWORDS.join(", ")),
                    );
                    return Ty::Unknown;
                }
                if !matches!(v.ty, Ty::Float(_) | Ty::Int(_) | Ty::Scalar(_) | Ty::Unknown) {
                    let ty = v.ty.clone();
                    return self.wrong_kind(v.expr, "adam", "a number", &ty);
                }
            }
        }
        if positional.len() != 2 {
            self.error(
                Code::E0801,
                self.range(id),
                "`adam` takes the parameter and its gradient (W, g), then keywords",
            );
            return Ty::Unknown;
        }
        for (what, arg) in [("W", positional[0]), ("g", positional[1])] {
            let t = match &arg.ty {
                Ty::Tensor(t) if t.kind == TensorKind::Tensor => t.clone(),
                Ty::Unknown => return Ty::Unknown,
                other => {
                    let other = other.clone();
                    return self.wrong_kind(arg.expr, "adam", "a tensor", &other);
                }
            };
            if t.dims != state.dims {
                self.error(
                    if t.rank() == state.rank() { Code::E0301 } else { Code::E0300 },
                    self.range(arg.expr),
                    format!("adam: {what} is {} but the state is for {}", fmt_dims(&t.dims), fmt_dims(&state.dims)),
                );
                return Ty::Unknown;
            }
            let bad = if what == "W" { t.elem.dtype != state.elem.dtype } else { !t.elem.dtype.is_float() };
            if bad {
                self.error(
                    Code::E0400,
                    self.range(arg.expr),
                    format!("adam: {what} is {} but the state is for a {} parameter", t.elem.dtype, state.elem.dtype),
                );
                return Ty::Unknown;
            }
        }
        let w =
            TensorType { kind: TensorKind::Tensor, dims: state.dims.clone(), elem: ElemType::plain(state.elem.dtype) };
        Ty::Tuple(vec![Ty::Tensor(w), Ty::Tensor(state)])
    }
}
