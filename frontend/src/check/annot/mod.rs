//! Signatures: decorators (kind, schedule, autotune space), parameter and return
//! annotations, dtype policies (E0401–E0403, W0406) and dtype strings.
//!
//! This file owns the decorators and the `Signature` built from them; `annotation`
//! turns annotation expressions into types (tensor and scalar annotations, dims,
//! element types, policies and dtype strings).

use super::dims::Dim;
use super::dtype::DType;
use super::infer::{Infer, Mode};
use super::schedule::{self, KernelSchedule, KeyValue, SpaceKey};
use super::types::*;
use super::{DecoratorInfo, FunctionKind, NumericsCheck, ParamInfo, Signature};
use crate::db::{Db, SourceFile};
use crate::diagnostics::{suggest, Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

mod annotation;
mod shard;
mod space_chain;

use annotation::is_tessera_alias;
pub(crate) use annotation::{annotation_type, parse_dtype_string};

const DECORATORS: &[&str] =
    &["kernel", "kernel.autotune", "kernel.schedule", "kernel.auto", "jit", "autodiff", "verify.numerics"];

/// What the decorators say: kind, schedule with every candidate, and their
/// diagnostics (relative to the item's first byte).
pub(crate) fn decorator_info(db: &dyn Db, file: SourceFile, name: &str, decos: &Decorators) -> DecoratorInfo {
    let mut cx = Infer::new(db, file, &decos.arena, Mode::Decl, None);
    cx.fn_name = name.to_string();
    let mut decorators = Vec::new();
    let (mut kernel, mut jit, mut autodiff) = (false, false, false);
    let mut schedule = KernelSchedule::default();
    let mut numerics = None;
    for &d in &decos.exprs {
        let (func, args) = match decos.arena.expr(d) {
            Expr::Call { func, args } => (*func, Some(args.clone())),
            _ => (d, None),
        };
        let Some(path) = decorator_path(&cx, func) else {
            cx.error(Code::E0203, cx.range(d), "a decorator must be a name such as `kernel` or `jit`");
            continue;
        };
        let name = path.join(".");
        if !DECORATORS.contains(&name.as_str()) {
            let written = render_path(&cx, func);
            let mut diag = Diagnostic::new(Code::E0203, cx.range(func), format!("unknown decorator `@{written}`"))
                .with_note(format!(
                    "known decorators: {}",
                    DECORATORS.iter().map(|d| format!("@{d}")).collect::<Vec<_>>().join(", ")
                ));
            if let Some(s) = suggest(&name, DECORATORS.iter().copied()) {
                let prefix = written.strip_suffix(&name).unwrap_or("");
                diag = diag.with_fix(
                    format!("did you mean `@{prefix}{s}`?"),
                    vec![Edit { range: cx.range(func), text: format!("{prefix}{s}") }],
                );
            }
            cx.push(diag);
            // Keep checking the body as what the decorator most likely meant.
            if path.first().map(String::as_str) == Some("kernel") {
                kernel = true;
            }
            continue;
        }
        decorators.push(name.clone());
        match name.as_str() {
            "kernel" => kernel = true,
            "kernel.auto" => {
                kernel = true;
                schedule.auto = true;
                // The default space's pruning (W0702/E0703) is reported at the decorator
                // unless an explicit `space=` is given.
                schedule.space_range.get_or_insert(cx.range(d));
            }
            "kernel.schedule" => {
                kernel = true;
                match args.as_deref() {
                    Some([arg]) if arg.name.is_none() => match cx.expr(arg.value) {
                        Ty::Schedule(s) => schedule.fixed = s.layered_on(&schedule.fixed),
                        Ty::Unknown => {}
                        other => {
                            cx.wrong_kind(arg.value, "@kernel.schedule", "a Schedule", &other);
                        }
                    },
                    _ => cx.error(Code::E0801, cx.range(d), "`@kernel.schedule` takes one Schedule argument"),
                }
            }
            "kernel.autotune" => {
                kernel = true;
                autotune(&mut cx, d, args.as_deref().unwrap_or(&[]), &mut schedule);
            }
            "jit" => jit = true,
            "autodiff" => autodiff = true,
            "verify.numerics" => numerics = Some(verify_numerics(&mut cx, args.as_deref().unwrap_or(&[]))),
            _ => {}
        }
    }
    let kind = if kernel {
        FunctionKind::Kernel
    } else if jit || autodiff {
        FunctionKind::Graph
    } else {
        FunctionKind::Helper
    };
    let mut unimported_alias_uses = unimported_alias_names(&cx, &decos.arena, &decos.exprs);
    let inference = cx.finish();
    unimported_alias_uses.extend(inference.unimported_alias_uses.iter().copied());
    unimported_alias_uses.sort_by_key(|r| (r.start, r.end));
    unimported_alias_uses.dedup();
    DecoratorInfo {
        kind,
        decorators,
        autodiff,
        jit,
        kernel_and_graph: kernel && (jit || autodiff),
        schedule: kernel.then_some(schedule),
        numerics,
        diagnostics: inference.diagnostics,
        unimported_alias_uses,
    }
}

/// Parameters, return type and dim symbols (relative to `def`); the schedule appears
/// only as its key names, so candidate values can change without invalidating it.
pub(crate) fn signature(db: &dyn Db, file: SourceFile, ast: &FunctionDef, info: &DecoratorInfo) -> Signature {
    let mut cx = Infer::new(db, file, &ast.arena, Mode::Decl, None);
    cx.fn_name = ast.name.to_string();
    let kind = info.kind;
    if info.kernel_and_graph {
        cx.error(
            Code::E0203,
            ast.name_range,
            format!("`{}` cannot be both a @kernel and a graph function (@jit/@autodiff)", ast.name),
        );
    }
    let mut params = Vec::new();
    let mut symbols: Vec<String> = Vec::new();
    for (i, p) in ast.params.iter().enumerate() {
        // `def f(V, V)`: Python refuses it; here the second would shadow the first in the
        // body while callers and `tessera run` bind both.
        if let Some(first) = ast.params[..i].iter().find(|q| q.name == p.name && !p.name.is_empty()) {
            cx.push(
                Diagnostic::new(Code::E0202, p.name_range, format!("parameter `{}` is defined more than once", p.name))
                    .with_label(first.name_range, "first defined here")
                    .with_note("rename this parameter or remove one of them"),
            );
        }
        let mut sharding = None;
        let ty = match p.annotation {
            Some(a) => {
                let (ty, s) = shard::param_annotation(&mut cx, a, kind == FunctionKind::Graph);
                sharding = s;
                ty
            }
            None => {
                if kind != FunctionKind::Helper {
                    cx.push(
                        Diagnostic::new(
                            Code::E0800,
                            p.name_range,
                            format!(
                                "parameter `{}` of the {} `{}` needs a type annotation",
                                p.name,
                                kind.name(),
                                ast.name
                            ),
                        )
                        .with_note("e.g. `x: Tensor[\"N\", f32]` for a tensor or `alpha: f32` for a scalar"),
                    );
                }
                Ty::Unknown
            }
        };
        let ty = match ty {
            // An `int` parameter is a dim symbol.
            Ty::Int(None) => {
                symbols.push(p.name.to_string());
                Ty::Int(Some(Dim::sym(&p.name)))
            }
            other => other,
        };
        // A KV cache parameter carries its current length, the symbol `NAME.len`.
        let ty = crate::check::ops::cache_param_type(&p.name, ty);
        // `OptimizerState[W]` takes W's dims and dtype.
        let ty = crate::check::ops::optimizer_state_param_type(&mut cx, p.annotation, ty, &params);
        if let Ty::Tensor(t) = &ty {
            for d in &t.dims {
                for s in d.symbols() {
                    if !symbols.contains(&s) {
                        symbols.push(s);
                    }
                }
            }
        }
        if let Some(default) = p.default {
            let dt = cx.expr(default);
            let compatible = match (&ty, &dt) {
                (Ty::Unknown, _) | (_, Ty::Unknown) => true,
                (Ty::Scalar(e), Ty::Float(_)) => e.dtype.is_float(),
                (Ty::Scalar(_) | Ty::Float(_), Ty::Int(_) | Ty::Float(_)) => true,
                (Ty::Scalar(e), Ty::Bool(_)) => e.dtype == DType::Bool,
                (Ty::Int(_), Ty::Int(_)) | (Ty::Bool(_), Ty::Bool(_)) | (Ty::Str(_), Ty::Str(_)) => true,
                (Ty::Tensor(_), Ty::NoneVal) => true,
                _ => false,
            };
            if !compatible {
                cx.error(
                    Code::E0802,
                    cx.range(default),
                    format!(
                        "the default of `{}` is {} but the parameter is {}",
                        p.name,
                        dt.kind_name(),
                        ty.kind_name()
                    ),
                );
            }
        }
        params.push(ParamInfo {
            name: p.name.to_string(),
            ty,
            has_default: p.default.is_some(),
            keyword_only: p.keyword_only,
            range: p.range,
            name_range: p.name_range,
            sharding,
        });
    }
    let ret = ast.return_type.map(|r| {
        let ty = annotation_type(&mut cx, r);
        if let Ty::Tensor(t) = &ty {
            let unbound: Vec<String> = t
                .dims
                .iter()
                .flat_map(|d| d.symbols())
                .filter(|s| !symbols.contains(s))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !unbound.is_empty() {
                cx.push(
                    Diagnostic::new(
                        Code::E0305,
                        cx.range(r),
                        format!(
                            "the return annotation uses {} that no parameter binds",
                            unbound.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                        ),
                    )
                    .with_note("a returned dim must be derived from the parameters' dims"),
                );
            }
        }
        match ty {
            Ty::Int(None) => Ty::Int(None),
            other => other,
        }
    });
    let mut roots: Vec<ExprId> = ast.params.iter().flat_map(|p| p.annotation.into_iter().chain(p.default)).collect();
    roots.extend(ast.return_type);
    let mut unimported_alias_uses = unimported_alias_names(&cx, &ast.arena, &roots);
    let inference = cx.finish();
    unimported_alias_uses.extend(inference.unimported_alias_uses.iter().copied());
    unimported_alias_uses.sort_by_key(|r| (r.start, r.end));
    unimported_alias_uses.dedup();
    Signature {
        unimported_alias_uses,
        kind,
        decorators: info.decorators.clone(),
        autodiff: info.autodiff,
        jit: info.jit,
        schedule: info.schedule.as_ref().map(KernelSchedule::keys),
        numerics: info.numerics.clone(),
        params,
        ret,
        symbols,
        diagnostics: inference.diagnostics,
    }
}

/// The keywords of `@verify.numerics`.
const NUMERICS_KEYWORDS: &[&str] = &["stable", "bounded", "allow_nonfinite"];

/// `@verify.numerics(stable=True, bounded=[lo, hi], allow_nonfinite=True)`: every argument
/// is a keyword; `bounded` is two numbers with lo < hi, the flags are bools (E0802);
/// another keyword is E0804.
fn verify_numerics(cx: &mut Infer, args: &[Arg]) -> NumericsCheck {
    let mut out = NumericsCheck::default();
    for a in args {
        let ty = cx.expr(a.value);
        let Some((name, name_range)) = a.name.clone() else {
            cx.error(
                Code::E0802,
                cx.range(a.value),
                "@verify.numerics takes keyword arguments: stable=, bounded=, allow_nonfinite=",
            );
            continue;
        };
        match name.as_str() {
            "bounded" => match &ty {
                Ty::List(items) | Ty::Tuple(items) => {
                    let nums: Vec<Option<f64>> = items.iter().map(number).collect();
                    match nums.as_slice() {
                        [Some(lo), Some(hi)] if lo < hi => out.bounded_bits = Some((lo.to_bits(), hi.to_bits())),
                        _ => cx.error(Code::E0802, cx.range(a.value), "bounded must be [lo, hi] with lo < hi"),
                    }
                }
                Ty::Unknown => {}
                _ => cx.error(Code::E0802, cx.range(a.value), "bounded must be [lo, hi] with lo < hi"),
            },
            "stable" | "allow_nonfinite" => {
                let flag = match ty {
                    Ty::Bool(Some(b)) => b,
                    Ty::Unknown => false,
                    _ => {
                        cx.error(Code::E0802, cx.range(a.value), format!("`{name}` must be True or False"));
                        false
                    }
                };
                if name == "stable" {
                    out.stable = flag;
                } else {
                    out.allow_nonfinite = flag;
                }
            }
            other => {
                let mut diag =
                    Diagnostic::new(Code::E0804, name_range, format!("@verify.numerics has no argument `{other}`"))
                        .with_note(format!("its arguments: {}", NUMERICS_KEYWORDS.join(", ")));
                if let Some(s) = suggest(other, NUMERICS_KEYWORDS.iter().copied()) {
                    diag = diag.with_did_you_mean(name_range, s);
                }
                cx.push(diag);
            }
        }
    }
    out
}

/// `ts`/`tessera` names under `roots` that no import binds.
fn unimported_alias_names(cx: &Infer, arena: &Body, roots: &[ExprId]) -> Vec<TextRange> {
    let mut out = Vec::new();
    let mut stack = roots.to_vec();
    while let Some(e) = stack.pop() {
        if let Expr::Name(n) = arena.expr(e) {
            if matches!(n.as_str(), "ts" | "tessera") && cx.scope.get(n).is_none() {
                out.push(arena.expr_range(e));
            }
        }
        arena.walk_children(e, |c| stack.push(c));
    }
    out
}

fn number(t: &Ty) -> Option<f64> {
    match t {
        Ty::Float(Some(f)) => Some(f.get()),
        Ty::Int(Some(d)) => d.as_const().map(|v| v as f64),
        _ => None,
    }
}

/// The decorator's path with a leading `tessera` alias removed: `ts.kernel.autotune`
/// → ["kernel", "autotune"].
fn decorator_path(cx: &Infer, func: ExprId) -> Option<Vec<String>> {
    let path: Vec<String> = cx.body.dotted_path(func)?.into_iter().map(String::from).collect();
    let first = path.first()?;
    let is_alias = is_tessera_alias(cx, first);
    Some(if is_alias && path.len() > 1 { path[1..].to_vec() } else { path })
}

fn render_path(cx: &Infer, func: ExprId) -> String {
    cx.body.dotted_path(func).map(|p| p.join(".")).unwrap_or_default()
}

fn autotune(cx: &mut Infer, decorator: ExprId, args: &[Arg], schedule: &mut KernelSchedule) {
    let mut space_arg = None;
    for (i, a) in args.iter().enumerate() {
        let name = a.name.as_ref().map(|(n, _)| n.as_str()).unwrap_or(if i == 0 { "space" } else { "" });
        match name {
            "space" => space_arg = Some(a.value),
            "metric" => match cx.expr(a.value) {
                Ty::Str(Some(m)) if matches!(m.as_str(), "latency_ms" | "tflops" | "gbps") => schedule.metric = Some(m),
                Ty::Str(Some(m)) => cx.push(
                    Diagnostic::new(Code::E0802, cx.range(a.value), format!("unknown metric \"{m}\"")).with_note(
                        "metrics: \"latency_ms\" (lower is better), \"tflops\", \"gbps\" (higher is better)",
                    ),
                ),
                other => {
                    cx.wrong_kind(a.value, "metric", "a string", &other);
                }
            },
            "budget_ms" => match cx.expr(a.value) {
                Ty::Int(Some(d)) if d.as_const().is_some_and(|v| v > 0) => schedule.budget_ms = d.as_const(),
                Ty::Float(Some(f)) if f.get() > 0.0 => schedule.budget_ms = Some(f.get().ceil() as i64),
                other => {
                    if !other.is_unknown() {
                        cx.error(Code::E0802, cx.range(a.value), "budget_ms must be a positive number");
                    }
                }
            },
            "cache" => match cx.expr(a.value) {
                Ty::Str(Some(c)) => schedule.cache = Some(c),
                other => {
                    cx.wrong_kind(a.value, "cache", "a directory path string", &other);
                }
            },
            _ => {
                let range = a.name.as_ref().map(|(_, r)| *r).unwrap_or_else(|| cx.range(a.value));
                let mut d = Diagnostic::new(
                    Code::E0804,
                    range,
                    "`@kernel.autotune` takes space=, metric=, budget_ms= and cache=",
                );
                if let Some((n, r)) = &a.name {
                    if let Some(s) = suggest(n, ["space", "metric", "budget_ms", "cache"]) {
                        d = d.with_did_you_mean(*r, s);
                    }
                }
                cx.push(d);
            }
        }
    }
    let Some(space) = space_arg else {
        cx.error(Code::E0801, cx.range(decorator), "`@kernel.autotune` needs a `space=dict(KEY=[candidates, ...])`");
        return;
    };
    schedule.space_range = Some(cx.range(space));
    let entries: Vec<(String, TextRange, ExprId)> = match space_chain::entries(cx, space) {
        Some(Ok(entries)) => entries,
        Some(Err(())) => return,
        None => match cx.body.expr(cx.body.unparen(space)) {
            Expr::Call { func, args } if cx.body.dotted_path(*func).is_some_and(|p| p.last() == Some(&"dict")) => {
                args.iter().filter_map(|a| a.name.as_ref().map(|(n, r)| (n.to_string(), *r, a.value))).collect()
            }
            Expr::Dict(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| match cx.body.expr(*k) {
                    Expr::Str(s) => Some((s.clone(), cx.range(*k), *v)),
                    _ => None,
                })
                .collect(),
            _ => {
                let ty = cx.expr(space);
                if !ty.is_unknown() {
                    cx.error(
                        Code::E0802,
                        cx.range(space),
                        "space must be written as dict(KEY=[...], ...) or {\"KEY\": [...]}",
                    );
                }
                return;
            }
        },
    };
    for (key, key_range, values) in entries {
        let items: Vec<ExprId> = match cx.body.expr(cx.body.unparen(values)) {
            Expr::List(items) | Expr::Tuple(items) => items.clone(),
            _ => {
                cx.expr(values);
                cx.push(
                    Diagnostic::new(Code::E0802, cx.range(values), format!("the candidates of `{key}` must be a list"))
                        .with_fix(
                            "wrap it in a list",
                            vec![
                                Edit { range: TextRange::empty(cx.range(values).start), text: "[".into() },
                                Edit { range: TextRange::empty(cx.range(values).end), text: "]".into() },
                            ],
                        ),
                );
                continue;
            }
        };
        let mut candidates = Vec::new();
        let mut reported = false;
        for item in items {
            let value = match cx.expr(item) {
                Ty::Int(Some(d)) if d.is_const() => KeyValue::Int(d.as_const().unwrap()),
                Ty::Str(Some(s)) => KeyValue::Str(s),
                Ty::Unknown => {
                    reported = true;
                    continue;
                }
                other => {
                    cx.wrong_kind(item, &key, "a constant int or string", &other);
                    reported = true;
                    continue;
                }
            };
            if let Some(problem) = schedule::validate(&key, &value) {
                cx.error(Code::E0701, cx.range(item), format!("invalid schedule: {problem}"));
                reported = true;
                continue;
            }
            candidates.push((value, cx.range(item)));
        }
        // A key whose every candidate is in error is still a key: `ctx.KEY` in the body
        // must not add an "unknown schedule key" to the one root cause.
        if candidates.is_empty() && !reported {
            continue;
        }
        schedule.space.push(SpaceKey { key, key_range, candidates });
    }
}
