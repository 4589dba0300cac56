//! Completion: members of `tile.`/`ts.`/`dist.`/`kernel.`, schedule keys after `ctx.`,
//! policies after `@` in types, dtypes, decorators, keyword arguments, and the names in
//! scope (locals, parameters, dim symbols, module names, built-ins).

use super::context::{self, OpenCall};
use super::lex::{self, Tok, TokKind};
use super::nav::{self, Definition, FnCtx};
use crate::check::{
    builtins::{self, Builtin, Level},
    schedule::{canonical_key, SCHEDULE_METHODS, STANDARD_KEYS},
    DType, FunctionKind, Namespace, Policy, ScopeEntry, Ty,
};
use crate::db::{self, Db, SourceFile};
use crate::text::TextRange;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CompletionKind {
    Function,
    Method,
    /// A schedule key (`ctx.BM`) or an attribute.
    Property,
    Variable,
    Parameter,
    Constant,
    Module,
    Type,
    /// A dtype policy (after `@` in a type).
    Policy,
    Keyword,
    /// A keyword argument (`mask=`).
    Argument,
    /// A dim symbol.
    TypeParameter,
    Decorator,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CompletionItem {
    pub label: String,
    pub kind: CompletionKind,
    /// One line: a signature or a type.
    pub detail: Option<String>,
    /// Markdown.
    pub documentation: Option<String>,
    /// What to insert when it differs from the label.
    pub insert_text: Option<String>,
    /// Orders the list (lower first).
    pub sort_text: String,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Completions {
    /// The text the items replace (the identifier prefix before the cursor).
    pub replace: TextRange,
    pub items: Vec<CompletionItem>,
}

struct Acc {
    items: Vec<CompletionItem>,
}

impl Acc {
    fn add(
        &mut self,
        rank: u8,
        label: impl Into<String>,
        kind: CompletionKind,
        detail: Option<String>,
        documentation: Option<String>,
    ) {
        let label = label.into();
        if self.items.iter().any(|i| i.label == label) {
            return;
        }
        self.items.push(CompletionItem {
            sort_text: format!("{rank}_{label}"),
            label,
            kind,
            detail,
            documentation,
            insert_text: None,
        });
    }

    fn add_builtin(&mut self, rank: u8, label: &str, b: &Builtin) {
        let kind = match b.level {
            Level::Type if b.returns == "policy" => CompletionKind::Policy,
            Level::Type => CompletionKind::Type,
            Level::Decorator => CompletionKind::Decorator,
            _ if b.params.is_some() => CompletionKind::Function,
            _ => CompletionKind::Constant,
        };
        self.add(rank, label, kind, Some(b.signature()), Some(builtin_doc(b)));
    }
}

fn builtin_doc(b: &Builtin) -> String {
    format!("```tessera\n{}\n```\n\n{}", b.signature(), b.doc)
}

/// Completions at `offset`.
pub fn completions(db: &dyn Db, file: SourceFile, offset: u32) -> Completions {
    let text = file.text(db);
    let offset = crate::text::clamp_to_char_boundary(text, offset.min(text.len() as u32));
    let before = context::tokens_before(db, file, offset);
    let mut acc = Acc { items: Vec::new() };
    // The identifier being typed.
    let (prefix_start, toks): (u32, &[Tok]) = match before.toks.last() {
        Some(t) if t.range.end == offset && matches!(t.kind, TokKind::Ident | TokKind::Keyword) => {
            (t.range.start, &before.toks[..before.toks.len() - 1])
        }
        _ => (offset, &before.toks[..]),
    };
    let replace = TextRange::new(prefix_start, offset);
    if let Some(inside) = before.inside {
        if inside.kind == TokKind::Str {
            string_completions(text, inside, offset, &mut acc);
        }
        return Completions { replace: word_before(text, offset), items: acc.items };
    }
    let last = toks.last().copied();
    let last_text = last.map(|t| t.text(text)).unwrap_or("");
    let f = nav::enclosing_function(db, file, offset);
    if last_text == "." && last.is_some_and(|t| t.kind == TokKind::Op) {
        let (path, _) = context::dotted_before(text, toks, toks.len() - 1);
        member_completions(db, file, f.as_ref(), &path, &mut acc);
        return Completions { replace, items: acc.items };
    }
    if last_text == "@" {
        let first = context::line_first_token(toks, toks.len() - 1);
        if first == Some(toks.len() - 1) {
            decorator_completions(&mut acc);
        } else if policy_position(text, toks, toks.len() - 1) {
            policy_completions(&mut acc);
        } else {
            general_completions(db, file, f.as_ref(), &mut acc);
        }
        return Completions { replace, items: acc.items };
    }
    let call = context::open_call(text, toks);
    if in_type_position(text, toks) {
        type_completions(db, file, &mut acc);
        return Completions { replace, items: acc.items };
    }
    if let Some(call) = &call {
        if call.at_arg_start && call.keyword.is_none() {
            keyword_arg_completions(db, file, f.as_ref(), call, &mut acc);
        }
    }
    // Decorator arguments are evaluated at module level: no locals there.
    let in_decorator = call.as_ref().is_some_and(|c| c.in_decorator);
    let scope_fn = if in_decorator { None } else { f.as_ref() };
    general_completions(db, file, scope_fn, &mut acc);
    Completions { replace, items: acc.items }
}

fn word_before(text: &str, offset: u32) -> TextRange {
    let start = text[..offset as usize]
        .char_indices()
        .rev()
        .take_while(|(_, c)| lex::is_ident_continue(*c))
        .last()
        .map_or(offset, |(i, _)| i as u32);
    TextRange::new(start, offset)
}

/// Inside a string: `dtype="bf16 @acc` completes policies, `dtype="b` dtypes.
fn string_completions(text: &str, s: Tok, offset: u32, acc: &mut Acc) {
    let upto = &text[s.range.start as usize..offset as usize];
    let inner = upto.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let inner = inner.trim_start_matches(['"', '\'']);
    let trimmed = inner.trim_end_matches(lex::is_ident_continue).trim_end();
    if trimmed.ends_with('@') {
        policy_completions(acc);
    } else if trimmed.is_empty() {
        // The start of a dtype string; only worth offering after `dtype=`.
        let before = text[..s.range.start as usize].trim_end();
        if before.ends_with('=') {
            for (name, d) in DType::SPELLINGS {
                if *name == d.name() {
                    acc.add(1, *name, CompletionKind::Type, Some(d.describe().into()), None);
                }
            }
        }
    }
}

/// `@` right after a dtype, a policy or a `]`: a policy in a type.
fn policy_position(text: &str, toks: &[Tok], at: usize) -> bool {
    if at == 0 {
        return false;
    }
    let prev = toks[at - 1];
    let prev_text = prev.text(text);
    match prev.kind {
        TokKind::Ident => DType::from_name(prev_text).is_some() || Policy::NAMES.contains(&prev_text),
        TokKind::Close => true,
        _ => false,
    }
}

/// Inside `Tensor[...]` (and friends), after `:` of a `def` parameter, or after `->`.
fn in_type_position(text: &str, toks: &[Tok]) -> bool {
    let stack = context::open_brackets(text, toks);
    if let Some(&(open, ch)) = stack.last() {
        if ch == '[' {
            let (path, _) = context::dotted_before(text, toks, open);
            if path.last().is_some_and(|n| matches!(n.as_str(), "Tensor" | "KTile" | "KVCache" | "OptimizerState")) {
                return true;
            }
        }
        if ch == '(' && open >= 2 && toks[open - 2].text(text) == "def" {
            // In a parameter list: after the parameter's `:` (and before its `=`).
            let mut depth = 0;
            let mut seen_colon = false;
            for t in &toks[open + 1..] {
                match (t.kind, t.text(text)) {
                    (TokKind::Open, _) => depth += 1,
                    (TokKind::Close, _) => depth -= 1,
                    (TokKind::Op, ",") if depth == 0 => seen_colon = false,
                    (TokKind::Op, ":") if depth == 0 => seen_colon = true,
                    (TokKind::Op, "=") if depth == 0 => seen_colon = false,
                    _ => {}
                }
            }
            return seen_colon;
        }
    }
    // `-> ` on a def line.
    let last_line: Vec<&Tok> = toks.iter().rev().take_while(|t| t.kind != TokKind::Newline).collect();
    stack.is_empty() && last_line.first().is_some_and(|t| t.text(text) == "->")
}

fn type_completions(db: &dyn Db, file: SourceFile, acc: &mut Acc) {
    for (name, d) in DType::SPELLINGS {
        let canonical = *name == d.name();
        acc.add(
            if canonical { 0 } else { 2 },
            *name,
            CompletionKind::Type,
            Some(if canonical { d.describe().to_string() } else { format!("alias of {}", d.name()) }),
            None,
        );
    }
    for t in ["Tensor", "KTile", "KVCache", "OptimizerState", "int", "float", "bool"] {
        if let Some(b) = builtins::lookup(t) {
            acc.add_builtin(1, t, b);
        }
    }
    // Module constants can name dims.
    for c in &db::item_index(db, file).constants {
        for (n, _) in &c.names {
            acc.add(3, n.clone(), CompletionKind::Constant, None, None);
        }
    }
}

fn decorator_completions(acc: &mut Acc) {
    for path in ["kernel", "kernel.autotune", "kernel.schedule", "kernel.auto", "jit", "autodiff", "verify.numerics"] {
        if let Some(b) = builtins::lookup(path) {
            acc.add(0, path, CompletionKind::Decorator, Some(b.signature()), Some(builtin_doc(b)));
        }
    }
}

fn policy_completions(acc: &mut Acc) {
    for p in Policy::NAMES {
        let doc = builtins::lookup(p).map(|b| b.doc.to_string());
        let detail = builtins::lookup(p)
            .and_then(|b| b.params)
            .map(|params| format!("@{p}{params}"))
            .unwrap_or_else(|| format!("@{p}"));
        let (detail, doc) = if *p == "device" {
            (
                "@device(gpu|cpu)".to_string(),
                Some("Place the state on the GPU or the host (state objects only).".to_string()),
            )
        } else {
            (detail, doc)
        };
        acc.add(0, *p, CompletionKind::Policy, Some(detail), doc);
    }
}

/// `x.` completions.
fn member_completions(db: &dyn Db, file: SourceFile, f: Option<&FnCtx<'_>>, path: &[String], acc: &mut Acc) {
    if path.is_empty() {
        return;
    }
    // A value of the enclosing function: `ctx.`, `x.`, `base.`.
    if path.len() == 1 {
        if let Some(f) = f {
            let ty = f
                .inf
                .locals
                .iter()
                .find(|l| l.name == path[0])
                .map(|l| l.ty.clone())
                .or_else(|| f.sig.param(&path[0]).map(|p| p.ty.clone()));
            if let Some(ty) = ty {
                value_member_completions(f, &ty, acc);
                return;
            }
        }
    }
    let segs: Vec<&str> = path.iter().map(String::as_str).collect();
    // `ts.` where `import tessera as ts`: what the import binds.
    match nav::resolve_through_imports(db, file, &segs) {
        Some(Definition::Namespace(Namespace::Tessera)) => {
            for ns in ["tile", "dist", "verify", "stdlib", "kernel"] {
                acc.add(0, ns, CompletionKind::Module, Some(format!("namespace {ns}")), None);
            }
            for b in builtins::BUILTINS.iter().filter(|b| !b.path.contains('.')) {
                if b.level != Level::Decorator || b.path == "jit" || b.path == "autodiff" {
                    acc.add_builtin(1, b.path, b);
                }
            }
            for (name, d) in DType::SPELLINGS {
                acc.add(2, *name, CompletionKind::Type, Some(d.describe().into()), None);
            }
        }
        Some(Definition::Namespace(Namespace::Stdlib)) => {
            for k in crate::stdlib::kernel_names() {
                acc.add(0, k, CompletionKind::Function, Some("stdlib kernel".into()), None);
            }
        }
        Some(Definition::Namespace(ns)) => {
            // Inside a kernel, graph-level members (`dist.all_reduce`) are not offered,
            // as top-level graph operations are not.
            let in_kernel = f.is_some_and(|f| f.sig.kind == FunctionKind::Kernel);
            for b in builtins::members(ns.name()).filter(|b| !(in_kernel && b.level == Level::Graph)) {
                acc.add_builtin(0, b.name(), b);
            }
        }
        Some(Definition::Builtin { path: "kernel" }) => {
            for b in builtins::members("kernel") {
                acc.add_builtin(0, b.name(), b);
            }
        }
        _ => {}
    }
}

fn value_member_completions(f: &FnCtx<'_>, ty: &Ty, acc: &mut Acc) {
    match ty {
        Ty::Context => {
            let sched = f.deco.schedule.clone().unwrap_or_default();
            for key in sched.key_names() {
                let detail = if let Some(k) = sched.space.iter().find(|k| canonical_key(&k.key) == key) {
                    let c: Vec<String> = k.candidates.iter().map(|(v, _)| v.to_string()).collect();
                    format!("autotuned: {{{}}}", c.join(", "))
                } else if let Some(v) = sched.fixed.get(&key) {
                    format!("= {v}")
                } else if let Some(v) = crate::check::ScheduleValue::kernel_default(&key) {
                    format!("default {v}")
                } else {
                    "schedule key".to_string()
                };
                let rank = if STANDARD_KEYS.contains(&key.as_str()) { 1 } else { 0 };
                acc.add(rank, key, CompletionKind::Property, Some(detail), None);
            }
            // Autotune keys as written (`BLOCK_M`, `num_warps`).
            for k in &sched.space {
                acc.add(0, k.key.clone(), CompletionKind::Property, Some("autotune key".into()), None);
            }
            for s in &f.sig.symbols {
                acc.add(2, s.clone(), CompletionKind::TypeParameter, Some("dim symbol of the signature".into()), None);
            }
        }
        Ty::Tensor(_) | Ty::View(_) | Ty::Tile(_) | Ty::Shared(_) | Ty::DistTensor(_) => {
            let kvcache = matches!(ty, Ty::Tensor(t) if t.kind == crate::check::TensorKind::KVCache);
            for (name, detail) in [
                ("T", "the transpose of the last two dims"),
                ("shape", "the dims, each an int"),
                ("ndim", "the rank"),
                ("dtype", "the element type"),
            ] {
                acc.add(0, name, CompletionKind::Property, Some(detail.into()), None);
            }
            if kvcache {
                for (name, detail) in [
                    ("append", "append(k, v): the cache with k and v appended"),
                    ("prune", "prune(n): keep the newest n entries"),
                    ("K", "the keys"),
                    ("V", "the values"),
                ] {
                    let kind = if name.chars().all(|c| c.is_ascii_uppercase()) {
                        CompletionKind::Property
                    } else {
                        CompletionKind::Method
                    };
                    acc.add(0, name, kind, Some(detail.into()), None);
                }
            }
        }
        Ty::Schedule(_) => {
            // Every method but the `block` and `d` shorthands.
            for &m in SCHEDULE_METHODS.iter().filter(|m| !matches!(**m, "block" | "d")) {
                acc.add(0, m, CompletionKind::Method, Some("returns a new Schedule".into()), None);
            }
        }
        _ => {}
    }
}

fn keyword_arg_completions(db: &dyn Db, file: SourceFile, f: Option<&FnCtx<'_>>, call: &OpenCall, acc: &mut Acc) {
    let segs: Vec<&str> = call.callee.iter().map(String::as_str).collect();
    if segs.is_empty() {
        return;
    }
    // `space=dict(` inside `@kernel.autotune(...)`: schedule keys.
    if segs == ["dict"] && call.in_decorator {
        for key in STANDARD_KEYS {
            acc.add(
                0,
                format!("{key}="),
                CompletionKind::Argument,
                Some(format!("autotune candidates for {key}")),
                None,
            );
        }
        return;
    }
    // Arguments before the cursor's that were passed by position fill the first
    // parameters; those and the keywords already given are not offered again.
    let positional = call.arg_index.saturating_sub(call.used_keywords.len());
    let mut add_params = |names: Vec<(String, Option<String>)>, doc: Option<String>| {
        for (i, (name, default)) in names.into_iter().enumerate() {
            if i < positional || call.used_keywords.contains(&name) {
                continue;
            }
            let detail = match default {
                Some(d) => format!("{name}={d}"),
                None => name.clone(),
            };
            acc.add(0, format!("{name}="), CompletionKind::Argument, Some(detail), doc.clone());
        }
    };
    let def = nav::resolve_through_imports(db, file, &segs);
    // A local or parameter shadows a module name.
    let shadowed = f.is_some_and(|f| f.inf.locals.iter().any(|l| l.name == segs[0]) || f.sig.param(segs[0]).is_some());
    match def {
        Some(Definition::Builtin { path }) if !shadowed => {
            if let Some(b) = builtins::lookup(path) {
                let names = b
                    .param_specs()
                    .iter()
                    .filter(|p| !p.var_keyword)
                    .map(|p| (p.name.to_string(), p.default.map(str::to_string)))
                    .collect();
                add_params(names, Some(builtin_doc(b)));
            }
        }
        Some(Definition::Function { name }) if !shadowed => {
            let index = db::item_index(db, file);
            if let Some(e) = index.function(db, &name) {
                let sig = crate::check::fn_signature(db, e.key);
                let names = sig.params.iter().map(|p| (p.name.clone(), None)).collect();
                add_params(names, None);
            }
        }
        _ => {}
    }
}

/// Names in scope at the cursor.
fn general_completions(db: &dyn Db, file: SourceFile, f: Option<&FnCtx<'_>>, acc: &mut Acc) {
    let kind = f.map(|f| f.sig.kind);
    if let Some(f) = f {
        for l in &f.inf.locals {
            acc.add(1, l.name.clone(), CompletionKind::Variable, (!l.ty.is_unknown()).then(|| l.ty.to_string()), None);
        }
        for p in &f.sig.params {
            acc.add(1, p.name.clone(), CompletionKind::Parameter, Some(p.ty.to_string()), None);
        }
        for s in &f.sig.symbols {
            acc.add(2, s.clone(), CompletionKind::TypeParameter, Some("int (dim symbol)".into()), None);
        }
    }
    let index = db::item_index(db, file);
    // A derived kernel is completed as the constant that defines it.
    for e in index.functions.iter().filter(|e| db::derived_kernel(db, e.key).is_none()) {
        let sig = crate::check::fn_signature(db, e.key);
        let name = e.key.name(db).clone();
        let detail = format!(
            "{} {}",
            sig.decorators.iter().map(|d| format!("@{d}")).collect::<Vec<_>>().join(" "),
            sig.kind.name()
        );
        acc.add(2, name, CompletionKind::Function, Some(detail.trim().to_string()), None);
    }
    for c in &index.constants {
        for (n, _) in &c.names {
            acc.add(2, n.clone(), CompletionKind::Constant, Some("module constant".into()), None);
        }
    }
    for (name, entry) in &check_scope(db, file) {
        if let ScopeEntry::Member(_) = entry {
            let detail = match nav::import_target(db, file, name) {
                Some(Definition::Namespace(ns)) => format!("namespace {}", ns.name()),
                Some(Definition::Builtin { path }) => format!("tessera.{path}"),
                Some(Definition::DType(d)) => format!("dtype {d}"),
                Some(Definition::Policy(p)) => format!("policy @{p}"),
                _ => "import".to_string(),
            };
            acc.add(2, name.clone(), CompletionKind::Module, Some(detail), None);
        }
    }
    for ns in ["tile", "dist", "verify"] {
        acc.add(3, ns, CompletionKind::Module, Some(format!("namespace {ns}")), None);
    }
    for b in builtins::BUILTINS.iter().filter(|b| !b.path.contains('.')) {
        let fits = match (b.level, kind) {
            (Level::Decorator, _) | (Level::Type, _) => false,
            (Level::Kernel, Some(FunctionKind::Kernel)) => true,
            (Level::Kernel, _) => false,
            (Level::Graph, Some(FunctionKind::Kernel)) => false,
            _ => true,
        };
        if fits {
            acc.add_builtin(4, b.path, b);
        }
    }
    for t in ["Tensor", "KTile", "KVCache", "OptimizerState"] {
        if let Some(b) = builtins::lookup(t) {
            acc.add_builtin(5, t, b);
        }
    }
    for (name, d) in DType::SPELLINGS {
        if *name == d.name() {
            acc.add(5, *name, CompletionKind::Type, Some(d.describe().into()), None);
        }
    }
    for kw in lex::KEYWORDS {
        acc.add(6, *kw, CompletionKind::Keyword, None, None);
    }
}

fn check_scope(db: &dyn Db, file: SourceFile) -> Vec<(String, ScopeEntry)> {
    crate::check::module_scope(db, file).entries.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}
