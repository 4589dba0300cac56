//! Annotations to types: `Tensor[...]` and scalar annotations, dim expressions, element
//! types with their dtype policies (E0401–E0403, W0406) and dtype strings. Separate from
//! the decorators (`mod.rs`): these are per-expression and also serve annotated
//! assignments in bodies (`infer`) and dtype strings in calls (`ops`).

use super::number;
use crate::check::dims::Dim;
use crate::check::dtype::{DType, Device, ElemType, Policy};
use crate::check::infer::Infer;
use crate::check::scope::{Member, ScopeEntry};
use crate::check::types::*;
use crate::diagnostics::{suggest, Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

/// The type an annotation denotes.
pub(crate) fn annotation_type(cx: &mut Infer, ann: ExprId) -> Ty {
    let body = cx.body;
    match body.expr(ann) {
        Expr::Paren(inner) => annotation_type(cx, *inner),
        Expr::Subscript { value, indices } => {
            let Some(kind) = tensor_kind(cx, *value) else {
                // An unresolved name was already reported by `expr`.
                if !cx.expr(*value).is_unknown() {
                    cx.error(
                        Code::E0401,
                        cx.range(*value),
                        format!("`{}` is not a type that takes dims", cx.text(*value)),
                    );
                }
                return Ty::Unknown;
            };
            tensor_annotation(cx, kind, indices, &[])
        }
        Expr::Binary { op: BinOp::MatMul, .. } => {
            // `KVCache[...] @ paged @ device(gpu)` or `f32 @accum(...)` as a scalar type.
            let (base, policies) = split_policies(body, ann);
            if let Expr::Subscript { value, indices } = body.expr(body.unparen(base)) {
                if let Some(kind) = tensor_kind(cx, *value) {
                    return tensor_annotation(cx, kind, indices, &policies);
                }
            }
            if let Some(kind) = tensor_kind(cx, body.unparen(base)) {
                return missing_parameters(cx, base, kind);
            }
            match elem_type(cx, ann, true) {
                Some(e) => Ty::Scalar(e),
                None => Ty::Unknown,
            }
        }
        Expr::Str(s) => {
            let range = cx.range(ann);
            match parse_dtype_string(cx, s, range) {
                Some(e) => Ty::Scalar(e),
                None => Ty::Unknown,
            }
        }
        Expr::Name(_) | Expr::Attribute { .. } => {
            let path = cx.body.dotted_path(ann).unwrap_or_default();
            let last = path.last().copied().unwrap_or("");
            match scalar_type_name(cx, ann) {
                Some(t) => t,
                None if tensor_kind(cx, ann).is_some() => {
                    missing_parameters(cx, ann, tensor_kind(cx, ann).expect("checked by the guard"))
                }
                None => {
                    let mut d = Diagnostic::new(
                        Code::E0401,
                        cx.range(ann),
                        format!("unknown type `{}`", path.join(".")),
                    )
                    .with_note(
                        "types are Tensor[...], KTile[...], KVCache[...], a dtype (f32, bf16, ...), int, float or bool",
                    );
                    let mut candidates: Vec<&str> = DType::SPELLINGS.iter().map(|(s, _)| *s).collect();
                    candidates.extend(["int", "float", "bool", "Tensor", "KTile", "KVCache"]);
                    if let Some(s) = suggest(last, candidates) {
                        d = d.with_did_you_mean(cx.range(ann), s);
                    }
                    cx.push(d);
                    Ty::Unknown
                }
            }
        }
        Expr::NoneLit => Ty::NoneVal,
        _ => {
            cx.expr(ann);
            cx.error(Code::E0401, cx.range(ann), "this is not a type");
            Ty::Unknown
        }
    }
}

/// `f32`, `ts.bf16`, `int`, `float`, `bool` as a parameter type.
fn scalar_type_name(cx: &mut Infer, ann: ExprId) -> Option<Ty> {
    let path = cx.body.dotted_path(ann)?;
    let last = *path.last()?;
    if path.len() > 1 && !is_tessera_alias(cx, path[0]) {
        return None;
    }
    if path.len() == 1 {
        if let Some(ScopeEntry::Member(Member::DType(d))) = cx.scope.get(last) {
            return Some(Ty::Scalar(ElemType::plain(*d)));
        }
    }
    match last {
        "int" => Some(Ty::Int(None)),
        "float" => Some(Ty::Float(None)),
        "bool" => Some(Ty::Bool(None)),
        "str" => Some(Ty::Str(None)),
        _ => DType::from_name(last).map(|d| Ty::Scalar(ElemType::plain(d))),
    }
}

/// `tessera`, its imported alias, or the conventional `ts` when nothing else is bound
/// to it (an unimported `ts` is reported once per file, not at every use).
pub(super) fn is_tessera_alias(cx: &Infer, name: &str) -> bool {
    match cx.scope.get(name) {
        Some(entry) => matches!(entry, ScopeEntry::Member(Member::Namespace(Namespace::Tessera))),
        None => matches!(name, "ts" | "tessera"),
    }
}

/// A bare `KVCache` (or `Tensor`, `KTile`, `OptimizerState`) without its parameters: the
/// type exists, so the error says what it needs, with an example of the right form.
fn missing_parameters(cx: &mut Infer, at: ExprId, kind: TensorKind) -> Ty {
    let (needs, example) = match kind {
        TensorKind::Tensor => ("its dims and element type", "Tensor[\"M\", \"N\", f32]"),
        TensorKind::KTile => ("its dims and element type", "KTile[\"BM\", \"BK\", bf16]"),
        TensorKind::KVCache => (
            "its dims and element type (batch, heads, maximum sequence length, head dim)",
            "KVCache[\"B\", \"H\", \"S_max\", \"D_h\", bf16] @paged",
        ),
        TensorKind::OptimizerState => ("the parameter it holds state for", "OptimizerState[W] @fp32_master"),
    };
    let name = cx.text(at).to_string();
    cx.push(
        Diagnostic::new(Code::E0401, cx.range(at), format!("`{name}` needs {needs}"))
            .with_note(format!("for example `{example}`")),
    );
    Ty::Unknown
}

fn tensor_kind(cx: &Infer, value: ExprId) -> Option<TensorKind> {
    let path = cx.body.dotted_path(value)?;
    let last = *path.last()?;
    if path.len() > 1 && !is_tessera_alias(cx, path[0]) {
        return None;
    }
    match last {
        "Tensor" => Some(TensorKind::Tensor),
        "KTile" => Some(TensorKind::KTile),
        "KVCache" => Some(TensorKind::KVCache),
        "OptimizerState" => Some(TensorKind::OptimizerState),
        _ => None,
    }
}

/// Splits `base @ p1 @ p2` into the base and its policy expressions (in order).
fn split_policies(body: &Body, mut e: ExprId) -> (ExprId, Vec<ExprId>) {
    let mut policies = Vec::new();
    while let Expr::Binary { op: BinOp::MatMul, lhs, rhs } = body.expr(e) {
        policies.push(*rhs);
        e = *lhs;
    }
    policies.reverse();
    (e, policies)
}

fn tensor_annotation(cx: &mut Infer, kind: TensorKind, indices: &[ExprId], outer_policies: &[ExprId]) -> Ty {
    if kind == TensorKind::OptimizerState {
        // OptimizerState[param] names a parameter; its policies are still checked. The
        // signature resolves the parameter (`check::ops::optimizer_state_param_type`):
        // until then the type has no dims, and its policies are the ones written.
        let policies: Vec<(Policy, TextRange)> = outer_policies.iter().filter_map(|&p| policy(cx, p)).collect();
        let elem = validate_policies(cx, DType::F32, &policies, true);
        return match (indices, elem) {
            ([_], Some(elem)) => Ty::Tensor(TensorType { kind, dims: Vec::new(), elem }),
            _ => Ty::Unknown,
        };
    }
    let Some((&last, dims_exprs)) = indices.split_last() else {
        cx.error(Code::E0401, TextRange::default(), "a tensor type needs at least a dtype");
        return Ty::Unknown;
    };
    let mut dims = Vec::new();
    let mut ok = true;
    for &d in dims_exprs {
        match dim_annotation(cx, d) {
            Some(dim) => dims.push(dim),
            None => ok = false,
        }
    }
    let state = kind == TensorKind::KVCache;
    if state && ok && dims.len() != 4 {
        cx.push(
            Diagnostic::new(
                Code::E0300,
                cx.range(last),
                format!("a KVCache has 4 dims (batch, heads, maximum sequence length, head dim), got {}", dims.len()),
            )
            .with_note("for example `KVCache[\"B\", \"H\", \"S_max\", \"D_h\", bf16]`"),
        );
        ok = false;
    }
    let mut elem = elem_type(cx, last, state);
    if !outer_policies.is_empty() {
        let policies: Vec<(Policy, TextRange)> = outer_policies.iter().filter_map(|&p| policy(cx, p)).collect();
        if let Some(e) = &mut elem {
            let mut all: Vec<(Policy, TextRange)> = e.policies.iter().map(|p| (p.clone(), cx.range(last))).collect();
            all.extend(policies);
            if let Some(v) = validate_policies(cx, e.dtype, &all, true) {
                *e = v;
            }
        }
    }
    match (ok, elem) {
        (true, Some(elem)) => Ty::Tensor(TensorType { kind, dims, elem }),
        _ => Ty::Unknown,
    }
}

fn dim_annotation(cx: &mut Infer, d: ExprId) -> Option<Dim> {
    match cx.body.expr(d) {
        Expr::Int(v) => {
            if *v <= 0 {
                cx.error(Code::E0301, cx.range(d), format!("a dim must be positive, got {v}"));
                return None;
            }
            Some(Dim::constant(*v))
        }
        Expr::Str(s) => match Dim::parse(s) {
            Ok(dim) => Some(dim),
            Err(e) => {
                let range = cx.range(d);
                // The offset is into the string's value; without escapes (dims have
                // none) that is the literal's text after its opening quote.
                let width = s[e.offset.min(s.len())..].chars().next().map_or(1, char::len_utf8) as u32;
                let at = (range.start + 1 + e.offset as u32).min(range.end.saturating_sub(width).max(range.start));
                cx.push(Diagnostic::new(
                    Code::E0100,
                    TextRange::new(at, (at + width).min(range.end.max(at))),
                    format!("invalid dim \"{s}\": {}", e.message),
                ));
                None
            }
        },
        _ => match cx.expr(d) {
            Ty::Int(Some(dim)) => Some(dim),
            Ty::Unknown => None,
            Ty::DType(_) => {
                cx.error(Code::E0401, cx.range(d), "the dtype must be the last item of a tensor type");
                None
            }
            other => {
                cx.error(
                    Code::E0802,
                    cx.range(d),
                    format!(
                        "a dim must be an int or a string such as \"M\", but `{}` is {}",
                        cx.text(d),
                        other.kind_name()
                    ),
                );
                None
            }
        },
    }
}

/// An element type: `bf16`, `ts.bf16`, `bf16 @accum(f32) @saturate`, or a string.
fn elem_type(cx: &mut Infer, e: ExprId, state: bool) -> Option<ElemType> {
    let body = cx.body;
    match body.expr(e) {
        Expr::Str(s) => {
            let range = cx.range(e);
            parse_dtype_string(cx, s, range)
        }
        Expr::Binary { op: BinOp::MatMul, .. } => {
            let (base, policy_exprs) = split_policies(body, e);
            let dtype = elem_type(cx, base, state)?;
            let mut policies: Vec<(Policy, TextRange)> =
                dtype.policies.iter().map(|p| (p.clone(), cx.range(base))).collect();
            for p in policy_exprs {
                policies.push(policy(cx, p)?);
            }
            validate_policies(cx, dtype.dtype, &policies, state)
        }
        Expr::Name(_) | Expr::Attribute { .. } => {
            let path = body.dotted_path(e).unwrap_or_default();
            let last = *path.last().unwrap_or(&"");
            if path.len() == 1 {
                if let Some(ScopeEntry::Member(Member::DType(d))) = cx.scope.get(last) {
                    return Some(ElemType::plain(*d));
                }
                if let Some(ScopeEntry::Constant { .. }) = cx.scope.get(last) {
                    if let Ty::DType(el) = cx.expr(e) {
                        return Some(el);
                    }
                }
            }
            if (path.len() == 1 || path.first().is_some_and(|p| is_tessera_alias(cx, p)))
                && DType::from_name(last).is_some()
            {
                return DType::from_name(last).map(ElemType::plain);
            }
            let mut d = Diagnostic::new(Code::E0401, cx.range(e), format!("unknown dtype `{}`", path.join(".")))
                .with_note("dtypes: f64 f32 tf32 bf16 f16 fp8_e4m3 fp8_e5m2 int8 int4 i32 i64 bool");
            if let Some(s) = suggest(last, DType::SPELLINGS.iter().map(|(s, _)| *s)) {
                d = d.with_did_you_mean(cx.range(e), s);
            }
            cx.push(d);
            None
        }
        _ => {
            cx.error(Code::E0401, cx.range(e), format!("`{}` is not a dtype", cx.text(e)));
            None
        }
    }
}

/// One policy expression after `@`.
fn policy(cx: &mut Infer, e: ExprId) -> Option<(Policy, TextRange)> {
    let range = cx.range(e);
    let body = cx.body;
    let (name_expr, args) = match body.expr(e) {
        Expr::Call { func, args } => (*func, Some(args.clone())),
        _ => (e, None),
    };
    let path = body.dotted_path(name_expr).unwrap_or_default();
    let name = path.last().copied().unwrap_or("");
    let arg = |cx: &mut Infer, i: usize| -> Option<(ExprId, Ty)> {
        let a = args.as_ref()?.get(i)?;
        Some((a.value, cx.expr(a.value)))
    };
    let nargs = args.as_ref().map_or(0, |a| a.len());
    let p = match name {
        "accum" => {
            let Some((ae, _)) = arg(cx, 0).filter(|_| nargs == 1) else {
                cx.error(Code::E0402, range, "`@accum` takes one dtype: @accum(f32)");
                return None;
            };
            let acc = elem_type(cx, ae, false)?;
            Policy::Accum(acc.dtype)
        }
        "loss_scale" => match arg(cx, 0).filter(|_| nargs == 1) {
            Some((ae, t)) => match number(&t) {
                Some(k) if k > 0.0 => {
                    if k.log2().fract() != 0.0 {
                        cx.push(
                            Diagnostic::new(
                                Code::W0406,
                                cx.range(ae),
                                format!("loss scale {k} is not a power of two: scaling will round gradients"),
                            )
                            .with_fix(
                                format!("use {}", 2f64.powi(k.log2().round() as i32)),
                                vec![Edit {
                                    range: cx.range(ae),
                                    text: format!("{}", 2f64.powi(k.log2().round() as i32)),
                                }],
                            ),
                        );
                    }
                    Policy::LossScale(k.to_bits())
                }
                Some(k) => {
                    cx.error(Code::E0402, cx.range(ae), format!("loss scale must be > 0, got {k}"));
                    return None;
                }
                None => {
                    cx.error(Code::E0402, cx.range(ae), "loss scale must be a number");
                    return None;
                }
            },
            None => {
                cx.error(Code::E0402, range, "`@loss_scale` takes one number: @loss_scale(1024)");
                return None;
            }
        },
        "device" => match args.as_ref().and_then(|a| a.first()).and_then(|a| body.dotted_path(a.value)) {
            Some(p) if p.last() == Some(&"gpu") => Policy::Device(Device::Gpu),
            Some(p) if p.last() == Some(&"cpu") => Policy::Device(Device::Cpu),
            _ => {
                cx.error(Code::E0402, range, "`@device` takes gpu or cpu");
                return None;
            }
        },
        "stochastic_round" | "saturate" | "fp32_master" | "paged" | "checkpointable" | "rolling_window" => {
            if nargs > 0 {
                cx.error(Code::E0402, range, format!("`@{name}` takes no arguments"));
                return None;
            }
            match name {
                "stochastic_round" => Policy::StochasticRound,
                "saturate" => Policy::Saturate,
                "fp32_master" => Policy::Fp32Master,
                "paged" => Policy::Paged,
                "checkpointable" => Policy::Checkpointable,
                _ => Policy::RollingWindow,
            }
        }
        "shard" => {
            cx.error(
                Code::E0402,
                range,
                "`@shard(mesh, ...)` lays out a parameter of a @jit function: write it last in the parameter's annotation",
            );
            return None;
        }
        _ => {
            let mut d =
                Diagnostic::new(Code::E0402, cx.range(name_expr), format!("unknown policy `@{}`", path.join(".")))
                    .with_note(format!(
                        "policies: {}",
                        Policy::NAMES.iter().map(|p| format!("@{p}")).collect::<Vec<_>>().join(" ")
                    ));
            if let Some(s) = suggest(name, Policy::NAMES.iter().copied()) {
                d = d.with_fix(
                    format!("did you mean `@{s}`?"),
                    vec![Edit { range: cx.range(name_expr), text: s.to_string() }],
                );
            }
            cx.push(d);
            return None;
        }
    };
    Some((p, range))
}

/// The policy rules of LANGUAGE.md §4; returns the element type when valid.
fn validate_policies(cx: &mut Infer, dtype: DType, policies: &[(Policy, TextRange)], state: bool) -> Option<ElemType> {
    let mut ok = true;
    for (i, (p, range)) in policies.iter().enumerate() {
        // Two of the same policy with different arguments (or two @accum): E0403.
        if let Some((prev, prev_range)) = policies[..i].iter().find(|(q, _)| q.name() == p.name()) {
            if prev != p || matches!(p, Policy::Accum(_)) {
                cx.push(
                    Diagnostic::new(Code::E0403, *range, format!("conflicting policies: {prev} and {p}"))
                        .with_label(*prev_range, "first set here")
                        .with_fix("remove the second policy", vec![Edit { range: *range, text: String::new() }]),
                );
                ok = false;
                continue;
            }
        }
        let problem = match p {
            Policy::Accum(acc) => {
                if !(dtype.is_float() || dtype.is_int()) {
                    Some(format!("@accum needs a float or int storage type, not {dtype}"))
                } else if matches!(dtype, DType::Int8 | DType::Int4) && *acc != DType::I32 {
                    Some(format!("{dtype} values accumulate only in i32, not {acc}"))
                } else if !acc.at_least_as_wide_as(dtype) {
                    Some(format!("accumulating {dtype} in {acc} loses precision: the accumulator must be at least as wide as the storage"))
                } else {
                    None
                }
            }
            Policy::Saturate if !(dtype.is_fp8() || dtype.is_int()) => {
                Some(format!("@saturate applies to fp8 and integer types, not {dtype}"))
            }
            Policy::StochasticRound if !matches!(dtype, DType::BF16 | DType::F16 | DType::Fp8E4m3 | DType::Fp8E5m2) => {
                Some(format!("@stochastic_round applies to bf16, f16 and fp8, not {dtype}"))
            }
            p if p.is_state_policy() && !state => {
                Some(format!("{p} is a state policy: it applies to KVCache and OptimizerState, not to tensor elements"))
            }
            _ => None,
        };
        if let Some(problem) = problem {
            let mut d = Diagnostic::new(Code::E0402, *range, problem);
            if let Policy::Accum(_) = p {
                let suggestion = if matches!(dtype, DType::Int8 | DType::Int4) { "i32" } else { "f32" };
                d = d.with_note(format!("use @accum({suggestion})"));
            }
            cx.push(d);
            ok = false;
        }
    }
    ok.then(|| ElemType::with_policies(dtype, policies.iter().map(|(p, _)| p.clone()).collect()))
}

/// Parses a dtype string such as `"bf16 @accum(f32)"`; errors point inside the string.
pub(crate) fn parse_dtype_string(cx: &mut Infer, s: &str, literal: TextRange) -> Option<ElemType> {
    // Offsets inside the literal: skip the opening quote (and a prefix, if any).
    let base = literal.start + 1;
    let at = |start: usize, len: usize| TextRange::new(base + start as u32, base + (start + len.max(1)) as u32);
    let mut tokens: Vec<(usize, String)> = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_alphanumeric() || c == '_' || c == '.' {
            let mut w = String::new();
            while let Some(&(_, c)) = chars.peek() {
                if c.is_alphanumeric() || c == '_' || c == '.' {
                    w.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push((i, w));
        } else {
            tokens.push((i, c.to_string()));
            chars.next();
        }
    }
    let mut pos = 0;
    let Some((start, name)) = tokens.first().cloned() else {
        cx.error(Code::E0401, literal, "empty dtype string");
        return None;
    };
    let Some(dtype) = DType::from_name(&name) else {
        let mut d = Diagnostic::new(Code::E0401, at(start, name.len()), format!("unknown dtype `{name}`"));
        if let Some(sug) = suggest(&name, DType::SPELLINGS.iter().map(|(s, _)| *s)) {
            d = d.with_fix(
                format!("did you mean `{sug}`?"),
                vec![Edit { range: at(start, name.len()), text: sug.to_string() }],
            );
        }
        cx.push(d);
        return None;
    };
    pos += 1;
    let mut policies = Vec::new();
    while pos < tokens.len() {
        let (i, t) = tokens[pos].clone();
        if t != "@" {
            cx.error(Code::E0100, at(i, t.len()), format!("expected `@` before a policy, found `{t}`"));
            return None;
        }
        pos += 1;
        let Some((pi, pname)) = tokens.get(pos).cloned() else {
            cx.error(Code::E0100, at(i, 1), "expected a policy name after `@`");
            return None;
        };
        pos += 1;
        let mut arg: Option<(usize, String)> = None;
        if tokens.get(pos).is_some_and(|(_, t)| t == "(") {
            arg = tokens.get(pos + 1).cloned();
            if tokens.get(pos + 2).is_none_or(|(_, t)| t != ")") {
                cx.error(Code::E0100, at(pi, pname.len()), format!("expected `)` to close `@{pname}(`"));
                return None;
            }
            pos += 3;
        }
        let end = arg.as_ref().map_or(pi + pname.len(), |(ai, a)| ai + a.len() + 1);
        let range = TextRange::new(base + pi as u32, base + end as u32);
        let p = match (pname.as_str(), &arg) {
            ("accum", Some((ai, a))) => match DType::from_name(a) {
                Some(d) => Policy::Accum(d),
                None => {
                    cx.error(Code::E0401, at(*ai, a.len()), format!("unknown dtype `{a}`"));
                    return None;
                }
            },
            ("loss_scale", Some((ai, a))) => match a.parse::<f64>() {
                Ok(k) if k > 0.0 => Policy::LossScale(k.to_bits()),
                _ => {
                    cx.error(Code::E0402, at(*ai, a.len()), "loss scale must be a number > 0");
                    return None;
                }
            },
            ("device", Some((_, a))) if a == "gpu" => Policy::Device(Device::Gpu),
            ("device", Some((_, a))) if a == "cpu" => Policy::Device(Device::Cpu),
            ("stochastic_round", None) => Policy::StochasticRound,
            ("saturate", None) => Policy::Saturate,
            ("fp32_master", None) => Policy::Fp32Master,
            ("paged", None) => Policy::Paged,
            ("checkpointable", None) => Policy::Checkpointable,
            ("rolling_window", None) => Policy::RollingWindow,
            _ => {
                let mut d = Diagnostic::new(
                    Code::E0402,
                    at(pi, pname.len()),
                    format!("unknown or malformed policy `@{pname}`"),
                );
                if let Some(sug) = suggest(&pname, Policy::NAMES.iter().copied()) {
                    d = d.with_note(format!("did you mean `@{sug}`?"));
                }
                cx.push(d);
                return None;
            }
        };
        policies.push((p, range));
    }
    validate_policies(cx, dtype, &policies, false)
}
