//! Hover: the type of a name with its full shape and what each dtype policy does, the
//! signature and documentation of built-ins, and a kernel's schedule.

use super::nav::{self, ConstCtx, Definition, FnCtx};
use crate::check::{
    builtins::{self, Level},
    schedule::canonical_key,
    DType, ElemType, FunctionKind, Namespace, Ty,
};
use crate::db::{self, Db, SourceFile};
use crate::syntax::ast::Expr;
use crate::syntax::render::render;
use crate::text::TextRange;

/// What a hover is about, for front ends that add target-specific sections (register,
/// shared-memory and occupancy estimates of a kernel; bank conflicts of a buffer).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum HoverSubject {
    /// A kernel (its name or a reference to it).
    Kernel {
        name: String,
    },
    /// A shared-memory buffer: the local `buffer` of kernel `kernel`.
    SharedBuffer {
        kernel: String,
        buffer: String,
    },
    /// A tensor parameter or local `value` of the graph function `function` (its layout
    /// on a mesh, when the function is sharded).
    GraphValue {
        function: String,
        value: String,
    },
    /// A `tile.dot` (or `tile.mma`) call of kernel `kernel`, `at` an absolute offset in
    /// it (the instructions it runs as on a GPU target).
    Dot {
        kernel: String,
        at: u32,
    },
    Other,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct HoverResult {
    /// The hovered name (absolute).
    pub range: TextRange,
    /// Markdown.
    pub markdown: String,
    pub subject: HoverSubject,
}

fn code(s: &str) -> String {
    format!("```tessera\n{s}\n```")
}

/// The hover of the name at `offset`.
pub fn hover(db: &dyn Db, file: SourceFile, offset: u32) -> Option<HoverResult> {
    let at = nav::classify(db, file, offset)?;
    let mut subject = HoverSubject::Other;
    let markdown = match &at.def {
        Definition::Local { function, local } => {
            let f = FnCtx::new(db, file, *function)?;
            let info = f.inf.locals.get(*local as usize)?;
            let ty = at.site.map(|(_, id)| f.inf.type_of(id)).filter(|t| !t.is_unknown()).unwrap_or(&info.ty);
            if let Ty::Shared(_) = ty {
                if f.sig.kind == FunctionKind::Kernel {
                    subject = HoverSubject::SharedBuffer { kernel: f.name().to_string(), buffer: info.name.clone() };
                }
            }
            if let (Ty::Tensor(_), FunctionKind::Graph) = (ty, f.sig.kind) {
                subject = HoverSubject::GraphValue { function: f.name().to_string(), value: info.name.clone() };
            }
            let mut out = code(&format!("{}: {}", info.name, ty));
            out += &format!("\n\nlocal of {} `{}`", f.sig.kind.name(), f.name());
            out += &explain_ty(ty);
            out
        }
        Definition::Param { function, index } => {
            let f = FnCtx::new(db, file, *function)?;
            let p = f.sig.params.get(*index as usize)?;
            let ast_p = f.ast.params.get(*index as usize)?;
            let mut line = format!("{}: {}", p.name, p.ty);
            if let Some(d) = ast_p.default {
                line += &format!(" = {}", render(f.body(), d, 40));
            }
            let mut out = code(&line);
            out += &format!(
                "\n\n{}parameter of {} `{}`",
                if p.keyword_only { "keyword-only " } else { "" },
                f.sig.kind.name(),
                f.name()
            );
            out += &explain_ty(&p.ty);
            if let (Ty::Tensor(_), FunctionKind::Graph) = (&p.ty, f.sig.kind) {
                subject = HoverSubject::GraphValue { function: f.name().to_string(), value: p.name.clone() };
            }
            out
        }
        Definition::DimSymbol { function, name } => {
            let f = FnCtx::new(db, file, *function)?;
            symbol_hover(&f, name)
        }
        Definition::Function { name } => {
            let index = db::item_index(db, file);
            let i = index.function_position(db, name)?;
            let f = FnCtx::new(db, file, i)?;
            if f.sig.kind == FunctionKind::Kernel {
                subject = HoverSubject::Kernel { name: name.to_string() };
            }
            function_hover(&f)
        }
        Definition::Constant { name } => {
            let constants = nav::all_constants(db, file);
            let c: &ConstCtx<'_> = constants.iter().find(|c| c.ast.names.iter().any(|(n, _)| n == name))?;
            if let Some(derived) = *db::derived_kernel(db, db::FnKey::new(db, file, name.as_str(), 0)) {
                let info = crate::check::fn_decorators(db, db::FnKey::new(db, file, name.as_str(), 0));
                // With an error in the assignment it is shown as the constant it is.
                let clean = !c.value.diagnostics.iter().any(|d| d.is_error());
                if let (FunctionKind::Kernel, Some(schedule), true) = (info.kind, &info.schedule, clean) {
                    subject = HoverSubject::Kernel { name: name.to_string() };
                    let original = derived.original.name(db);
                    return Some(HoverResult {
                        range: at.range,
                        markdown: format!(
                            "{}\n\nkernel: `{original}`'s body under the fixed schedule `{}`",
                            code(&format!("{name} = {original}.with_schedule(...)")),
                            schedule.fixed.layered_on(&crate::check::ScheduleValue::default_for_kernel())
                        ),
                        subject,
                    });
                }
            }
            let ty = c.value.names.get(name).unwrap_or(&c.value.ty);
            let mut out = code(&format!("{name}: {ty}"));
            out += "\n\nmodule constant (a compile-time value)";
            out += &explain_ty(ty);
            out
        }
        Definition::Import { name } => match nav::import_target(db, file, name).as_ref().and_then(describe) {
            Some(doc) => format!("{doc}\n\n*imported from `tessera` as `{name}`*"),
            None => code(&format!("import {name}")),
        },
        other => {
            let mut out = describe(other)?;
            // The type this call of a built-in produces here.
            if let (Definition::Builtin { path }, Some((function, id))) = (other, at.site) {
                if let Some(ty) = call_result(db, file, function, id) {
                    out += &format!("\n\nhere: `{ty}`");
                }
                let kernel = FnCtx::new(db, file, function).filter(|f| f.sig.kind == FunctionKind::Kernel);
                if let (Some(f), "tile.dot" | "tile.mma") = (kernel, &**path) {
                    subject = HoverSubject::Dot { kernel: f.name().to_string(), at: at.range.start };
                }
            }
            if let (Definition::ScheduleKey { function, key }, _) = (other, at.site) {
                let f = FnCtx::new(db, file, *function)?;
                out = schedule_key_hover(&f, key);
            }
            out
        }
    };
    Some(HoverResult { range: at.range, markdown, subject })
}

/// The type of the call whose callee is `callee`, if known.
fn call_result(db: &dyn Db, file: SourceFile, function: usize, callee: crate::syntax::ast::ExprId) -> Option<String> {
    let f = FnCtx::new(db, file, function)?;
    let body = f.body();
    body.expr_ids().find_map(|id| match body.expr(id) {
        Expr::Call { func, .. } if body.unparen(*func) == callee => {
            let ty = f.inf.type_of(id);
            match ty {
                Ty::Unknown | Ty::NoneVal => None,
                t => Some(t.to_string()),
            }
        }
        _ => None,
    })
}

/// Documentation of a built-in thing (no source location).
fn describe(def: &Definition) -> Option<String> {
    Some(match def {
        Definition::Builtin { path } => match builtins::lookup(path) {
            Some(b) => {
                let mut out = code(&b.signature());
                out += "\n\n";
                out += b.doc;
                if let Some(level) = level_note(b.level) {
                    out += "\n\n";
                    out += level;
                }
                out
            }
            None => {
                // A stdlib kernel.
                format!("{}\n\nkernel from `tessera.stdlib`", code(&format!("tessera.stdlib.{path}")))
            }
        },
        Definition::BuiltinParam { path, name } => {
            let b = builtins::lookup(path)?;
            let spec = b.param_specs().iter().find(|p| p.name == name);
            let mut out = code(&b.signature());
            match spec.and_then(|s| s.default) {
                Some(d) => out += &format!("\n\nparameter `{name}` (default `{d}`)"),
                None => out += &format!("\n\nparameter `{name}`"),
            }
            out += "\n\n";
            out += b.doc;
            out
        }
        Definition::DType(d) => dtype_hover(*d),
        Definition::Policy(p) => {
            let b = builtins::lookup(p)?;
            let sig = match b.params {
                Some(params) => format!("@{p}{params}"),
                None => format!("@{p}"),
            };
            format!(
                "{}\n\ndtype policy: {}\n\nWritten after a dtype in a type: `bf16 @{p}{}`.",
                code(&sig),
                b.doc,
                if b.params.is_some() { "(...)" } else { "" }
            )
        }
        Definition::Namespace(ns) => namespace_hover(*ns),
        Definition::Member { name, ty } => code(&format!("{name}: {ty}")) + &explain_ty(ty),
        Definition::ScheduleKey { key, .. } => code(&format!("ctx.{key}")),
        Definition::Keyword(_) => return None,
        Definition::Local { .. }
        | Definition::Param { .. }
        | Definition::DimSymbol { .. }
        | Definition::Function { .. }
        | Definition::Constant { .. }
        | Definition::Import { .. } => return None,
    })
}

fn level_note(level: Level) -> Option<&'static str> {
    match level {
        Level::Kernel => Some("*kernel intrinsic: only inside `@kernel` functions*"),
        Level::Graph => Some("*graph-level op: `@jit`/`@autodiff` functions and helpers*"),
        Level::Type => Some("*used in type annotations*"),
        Level::Decorator => Some("*decorator*"),
        Level::Any => None,
    }
}

fn dtype_hover(d: DType) -> String {
    let aliases: Vec<&str> =
        DType::SPELLINGS.iter().filter(|(s, t)| *t == d && *s != d.name()).map(|(s, _)| *s).collect();
    let mut out = code(&format!("dtype {d}"));
    out += &format!("\n\n{} — {} bits per element", d.describe(), d.bits());
    if let Some(m) = d.mma_multiple() {
        out += &format!("; tensor-core dims must be multiples of {m}");
    }
    if !aliases.is_empty() {
        out += &format!("\n\naliases: {}", aliases.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "));
    }
    out
}

fn namespace_hover(ns: Namespace) -> String {
    let members: Vec<&str> = match ns {
        Namespace::Tessera => vec![],
        Namespace::Stdlib => crate::stdlib::kernel_names(),
        other => builtins::members(other.name()).map(|b| b.name()).collect(),
    };
    let doc = match ns {
        Namespace::Tessera => "the Tessera module: every built-in name is reachable as `ts.NAME`",
        Namespace::Tile => "tile intrinsics for `@kernel` bodies",
        Namespace::Dist => "distribution: device meshes and sharded tensors",
        Namespace::Verify => "numerics verification decorators",
        Namespace::Stdlib => "kernels of the standard library",
        Namespace::Kernel => "kernel decorators",
    };
    let mut out = code(&format!("namespace {}", ns.name()));
    out += &format!("\n\n{doc}");
    if !members.is_empty() {
        out += &format!("\n\nmembers: {}", members.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "));
    }
    out
}

/// The element type of anything tensor-like (or a dtype value).
pub(crate) fn elem_of(ty: &Ty) -> Option<ElemType> {
    match ty {
        Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => Some(t.elem.clone()),
        Ty::Tile(t) => Some(t.elem.clone()),
        Ty::Scalar(e) | Ty::DType(e) => Some(e.clone()),
        Ty::Shared(s) => Some(ElemType::plain(s.dtype)),
        _ => None,
    }
}

/// One bullet per sentence of `ElemType::explain` (storage, then one per policy).
fn explain_ty(ty: &Ty) -> String {
    let Some(elem) = elem_of(ty) else {
        return String::new();
    };
    let mut out = String::from("\n\n");
    if let Some((dims, _)) = ty.shape() {
        if !dims.is_empty() {
            let rank = dims.len();
            out += &format!("rank {rank}: [{}]\n\n", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "));
        }
    }
    for sentence in elem.explain() {
        out += &format!("- {sentence}\n");
    }
    out.trim_end().to_string()
}

fn symbol_hover(f: &FnCtx<'_>, name: &str) -> String {
    let mut bound: Vec<String> = Vec::new();
    for p in &f.sig.params {
        if let Some((dims, _)) = p.ty.shape() {
            for (i, d) in dims.iter().enumerate() {
                if d.symbols().iter().any(|s| s == name) {
                    bound.push(format!("`{}` dim {i} (`{d}`)", p.name));
                }
            }
        }
        if p.name == name && matches!(p.ty, Ty::Int(_)) {
            bound.push(format!("the `int` parameter `{}`", p.name));
        }
    }
    let mut out = code(&format!("{name}: int"));
    out += &format!("\n\ndim symbol of `{}`", f.name());
    if !bound.is_empty() {
        out += &format!(", bound at each call by {}", bound.join(", "));
    }
    out
}

fn schedule_key_hover(f: &FnCtx<'_>, key: &str) -> String {
    let canon = canonical_key(key);
    let mut out =
        code(&format!("ctx.{key}: {}", if crate::check::schedule::choices(canon).is_some() { "str" } else { "int" }));
    if canon != key {
        out += &format!("\n\nalias of `ctx.{canon}`");
    }
    let Some(sched) = &f.deco.schedule else {
        return out;
    };
    if let Some(k) = sched.space.iter().find(|k| canonical_key(&k.key) == canon) {
        let cands: Vec<String> = k.candidates.iter().map(|(v, _)| v.to_string()).collect();
        out += &format!("\n\nschedule key of `{}`, autotuned over {{{}}}", f.name(), cands.join(", "));
    } else if let Some(v) = sched.fixed.get(canon) {
        out += &format!("\n\nschedule key of `{}`, fixed to {v}", f.name());
    } else if let Some(v) = crate::check::ScheduleValue::kernel_default(canon) {
        out += &format!("\n\nschedule key of `{}`, default value {v}", f.name());
    }
    out
}

/// The signature line(s) of a function as written, with resolved parameter types.
pub(crate) fn signature_text(f: &FnCtx<'_>) -> String {
    let params: Vec<String> = f
        .sig
        .params
        .iter()
        .zip(&f.ast.params)
        .map(|(p, a)| {
            let mut s = format!("{}: {}", p.name, p.ty);
            if let Some(d) = a.default {
                s += &format!(" = {}", render(f.body(), d, 30));
            }
            s
        })
        .collect();
    let ret = f.sig.ret.as_ref().map(|r| format!(" -> {r}")).unwrap_or_default();
    // Keyword-only parameters follow a bare `*`.
    let mut parts = Vec::new();
    let mut star = false;
    for (s, p) in params.iter().zip(&f.sig.params) {
        if p.keyword_only && !star {
            parts.push("*".to_string());
            star = true;
        }
        parts.push(s.clone());
    }
    let one_line = format!("def {}({}){ret}", f.name(), parts.join(", "));
    if one_line.len() <= 80 {
        one_line
    } else {
        format!(
            "def {}(\n{}\n){ret}",
            f.name(),
            parts.iter().map(|p| format!("    {p},")).collect::<Vec<_>>().join("\n")
        )
    }
}

fn function_hover(f: &FnCtx<'_>) -> String {
    let mut head = String::new();
    for d in &f.sig.decorators {
        head += &format!("@{d}\n");
    }
    head += &signature_text(f);
    let mut out = code(&head);
    if let Some(doc) = &f.ast.docstring {
        out += "\n\n";
        out += doc.trim();
    }
    out += "\n\n---\n\n";
    match f.sig.kind {
        FunctionKind::Kernel => {
            out += "**kernel** — the body runs once per tile program of the launch grid";
            if !f.sig.symbols.is_empty() {
                out += &format!(
                    "; specialized per launch on {}",
                    f.sig.symbols.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                );
            }
            if let Some(sched) = &f.deco.schedule {
                out += "\n\n";
                out += &schedule_section(sched, &f.inf.ctx_reads);
            }
        }
        FunctionKind::Graph => {
            let mut what = Vec::new();
            if f.sig.jit {
                what.push("compiled as a whole (fusion, memory planning)");
            }
            if f.sig.autodiff {
                what.push("differentiable: `grad()` is defined for it");
            }
            out += &format!("**graph function** — {}", what.join("; "));
        }
        FunctionKind::Helper => {
            out += "**helper** — inlined and checked at each call site";
        }
    }
    out
}

fn schedule_section(sched: &crate::check::KernelSchedule, reads: &[String]) -> String {
    let mut out = String::new();
    if sched.auto {
        out += "**Schedule**: the target's default search space (`@kernel.auto`)\n\n";
    }
    if !sched.space.is_empty() {
        let n = sched.configurations().len();
        let mut extra = Vec::new();
        if let Some(m) = &sched.metric {
            extra.push(format!("metric `{m}`"));
        }
        if let Some(b) = sched.budget_ms {
            extra.push(format!("budget {b} ms"));
        }
        if let Some(c) = &sched.cache {
            extra.push(format!("cache `{c}`"));
        }
        out += &format!(
            "**Schedule**: autotuned over {n} configuration{}{}\n\n",
            if n == 1 { "" } else { "s" },
            if extra.is_empty() { String::new() } else { format!(" ({})", extra.join(", ")) }
        );
        for k in &sched.space {
            let cands: Vec<String> = k.candidates.iter().map(|(v, _)| v.to_string()).collect();
            let unread = !crate::check::schedule::consumed_by_compiler(&k.key)
                && !reads.iter().any(|r| r == canonical_key(&k.key));
            out += &format!(
                "- `{}` ∈ {{{}}}{}\n",
                k.key,
                cands.join(", "),
                if unread { " (never read through `ctx`)" } else { "" }
            );
        }
        if !sched.fixed.values.is_empty() {
            out += &format!("\nstarting point: `{}`\n", sched.fixed);
        }
    } else if !sched.auto {
        let full = sched.fixed.layered_on(&crate::check::ScheduleValue::default_for_kernel());
        let label = if sched.fixed.values.is_empty() { "default schedule" } else { "schedule" };
        out += &format!("**Schedule** ({label}): `{full}`\n");
    }
    out.trim_end().to_string()
}
