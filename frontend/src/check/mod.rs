//! Names, types, shapes and policies: the checker of LANGUAGE.md §§1–7 (non-target parts).

pub mod builtins;
pub mod dims;
pub mod dtype;
pub mod schedule;
pub mod types;

mod annot;
mod infer;
mod numerics;
mod ops;
mod scope;
mod shapes;
mod transform_ops;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::db::{self, ConstKey, Db, FnKey, SourceFile};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::ExprId;
use crate::text::TextRange;

pub use dims::{Dim, Obligation};
pub use dtype::{DType, ElemType, Policy};
pub use numerics::numerics_lints;
pub(crate) use ops::optimizer_target;
pub use ops::{
    cache_capacity, cache_len, cache_len_symbol, cache_param_type, cache_view, has_fp32_master, kernel_written_params,
    stdlib_dtype_param, stdlib_instance,
};
pub use schedule::{CopyEngine, KernelSchedule, KeyValue, MmaFamily, ScheduleKeys, ScheduleValue, SpaceRule};
pub use scope::{module_scope, ModuleScope, ScopeEntry};
pub use types::{LoopKind, Namespace, SharedType, Swizzle, TensorKind, TensorType, TileType, Ty};

/// What a function is, from its decorators.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FunctionKind {
    /// `@kernel` (any form).
    Kernel,
    /// `@jit` and/or `@autodiff`.
    Graph,
    /// Undecorated: inlined at each call site.
    Helper,
}

impl FunctionKind {
    pub fn name(self) -> &'static str {
        match self {
            FunctionKind::Kernel => "kernel",
            FunctionKind::Graph => "graph function",
            FunctionKind::Helper => "helper",
        }
    }
}

/// A parameter as the signature declares it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ParamInfo {
    pub name: String,
    pub ty: Ty,
    pub has_default: bool,
    pub keyword_only: bool,
    /// Item-relative.
    pub range: TextRange,
    pub name_range: TextRange,
    /// `@shard(mesh, ...)` on a graph function's tensor parameter.
    pub sharding: Option<ParamSharding>,
}

/// A parameter's layout on a device mesh: per dim, the mesh axis that splits it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ParamSharding {
    pub mesh: types::MeshValue,
    pub dims: Vec<Option<String>>,
}

/// The arguments of `@verify.numerics(stable=..., bounded=[lo, hi], allow_nonfinite=...)`,
/// for the static check (W0407) and for `tessera run`, which checks the outputs. Floats
/// are kept by their bits so that signatures stay `Eq`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct NumericsCheck {
    /// `stable=True`: no overflow to inf/NaN from an unguarded `exp` (W0407).
    pub stable: bool,
    /// `bounded=[lo, hi]` by the bits of `lo` and `hi` (see [`NumericsCheck::bounded`]).
    pub bounded_bits: Option<(u64, u64)>,
    /// `allow_nonfinite=True`: NaN and Inf in the outputs are expected, not a failure.
    pub allow_nonfinite: bool,
}

impl NumericsCheck {
    /// `bounded=[lo, hi]`: every output element must lie in `[lo, hi]`.
    pub fn bounded(&self) -> Option<(f64, f64)> {
        self.bounded_bits.map(|(lo, hi)| (f64::from_bits(lo), f64::from_bits(hi)))
    }
}

/// What a function's decorators say; diagnostics and ranges are relative to the item's
/// first byte (its first decorator).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct DecoratorInfo {
    pub kind: FunctionKind,
    /// The decorators as written, for display (`kernel.autotune`, `jit`, ...).
    pub decorators: Vec<String>,
    pub autodiff: bool,
    pub jit: bool,
    /// `@kernel` together with `@jit`/`@autodiff` (reported by the signature).
    pub kernel_and_graph: bool,
    /// Set for kernels: the fixed schedule and the autotune space with every candidate.
    pub schedule: Option<KernelSchedule>,
    /// `@verify.numerics(...)`, when present.
    pub numerics: Option<NumericsCheck>,
    pub diagnostics: Vec<Diagnostic>,
    pub unimported_alias_uses: Vec<TextRange>,
}

/// A function's signature: kind, parameter types, return type; the schedule only as
/// key names (values are in `fn_decorators`). Ranges are relative to `def`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Signature {
    pub kind: FunctionKind,
    /// The decorators as written, for display (`kernel.autotune`, `jit`, ...).
    pub decorators: Vec<String>,
    pub autodiff: bool,
    pub jit: bool,
    /// Set for kernels: the schedule's key names.
    pub schedule: Option<ScheduleKeys>,
    /// `@verify.numerics(...)`, when present: what `tessera run` checks in the outputs.
    pub numerics: Option<NumericsCheck>,
    pub params: Vec<ParamInfo>,
    pub ret: Option<Ty>,
    /// Dim symbols bound by the parameters (including `int` parameters).
    pub symbols: Vec<String>,
    /// Item-relative diagnostics of the decorators, parameters and return annotation.
    pub diagnostics: Vec<Diagnostic>,
    /// Uses of `ts`/`tessera` with no import in decorators and annotations.
    pub unimported_alias_uses: Vec<TextRange>,
}

impl Signature {
    pub fn param(&self, name: &str) -> Option<&ParamInfo> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// How a name in a body resolved.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Resolution {
    Local(u32),
    Param(u32),
    /// A dim symbol of the signature (`N` in `Tensor["N", f32]`).
    Symbol(String),
    Function(String),
    Constant(String),
    /// A name bound by an import (`ts`, or `g` in `from tessera import gelu as g`).
    Import(String),
    Builtin(&'static str),
    Unresolved,
}

/// A local variable of a function body.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LocalInfo {
    pub name: String,
    /// Item-relative ranges of every assignment target that binds it.
    pub defs: Vec<TextRange>,
    /// The type of its last assignment.
    pub ty: Ty,
}

/// One `name = value` binding, for inlay hints.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct BindingInfo {
    pub local: u32,
    pub range: TextRange,
    pub ty: Ty,
}

/// A tensor-core operation whose dims the schedule fixes (E0502 per configuration).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MmaSite {
    pub range: TextRange,
    pub m: Dim,
    pub n: Dim,
    pub k: Dim,
    pub dtype: DType,
}

/// The result of checking one function body.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Inference {
    /// The type of every expression, by `ExprId`.
    pub expr_types: Vec<Ty>,
    /// How each name expression resolved, by `ExprId`, for the expressions that are
    /// names (sorted by id: [`Inference::resolution`]).
    pub resolutions: Vec<(u32, Resolution)>,
    pub locals: Vec<LocalInfo>,
    pub bindings: Vec<BindingInfo>,
    /// The type of the returned value (`NoneVal` when nothing is returned).
    pub return_ty: Option<Ty>,
    pub obligations: Vec<Obligation>,
    /// Schedule keys read through `ctx.` (canonical names).
    pub ctx_reads: Vec<String>,
    pub mma_sites: Vec<MmaSite>,
    /// Uses of `ts`/`tessera` with no import (item-relative): reported once per file.
    pub unimported_alias_uses: Vec<TextRange>,
    /// Item-relative.
    pub diagnostics: Vec<Diagnostic>,
}

impl Inference {
    pub fn type_of(&self, expr: ExprId) -> &Ty {
        self.expr_types.get(expr.0 as usize).unwrap_or(&Ty::Unknown)
    }

    pub fn resolution(&self, expr: ExprId) -> Option<&Resolution> {
        let at = self.resolutions.binary_search_by_key(&expr.0, |(id, _)| *id).ok()?;
        Some(&self.resolutions[at].1)
    }
}

/// A function's decorators or annotations that read a module constant whose value needs
/// that same function (`N = grad(f)` with `N` in `f`'s annotations): reported at the
/// function's name (item-relative `range`), and the function is checked as a helper.
fn self_reference(range: TextRange, name: &str) -> Diagnostic {
    Diagnostic::new(
        Code::E0200,
        range,
        format!("the signature of `{name}` depends on itself through a module constant"),
    )
    .with_label(range, "its decorators or annotations need a constant that needs it")
    .with_note(format!(
        "a constant used in `{name}`'s decorators or annotations refers back to `{name}`; \
         compute it from names that do not need `{name}`"
    ))
}

fn decorators_cycle(db: &dyn Db, _id: salsa::Id, key: FnKey<'_>) -> Arc<DecoratorInfo> {
    let diagnostics = db::function_ast(db, key)
        .as_ref()
        .map(|f| {
            let shift = f.decorator_offset;
            let range = TextRange::new(f.name_range.start + shift, f.name_range.end + shift);
            vec![self_reference(range, key.name(db))]
        })
        .unwrap_or_default();
    Arc::new(DecoratorInfo {
        kind: FunctionKind::Helper,
        decorators: Vec::new(),
        autodiff: false,
        jit: false,
        kernel_and_graph: false,
        schedule: None,
        numerics: None,
        diagnostics,
        unimported_alias_uses: Vec::new(),
    })
}

fn signature_cycle(db: &dyn Db, _id: salsa::Id, key: FnKey<'_>) -> Arc<Signature> {
    let def = db::function_def(db, key);
    // The parameters stay declared (their types unknown) so the body does not report
    // every use of them as undefined.
    let params = def
        .iter()
        .flat_map(|d| &d.params)
        .map(|p| ParamInfo {
            name: p.name.to_string(),
            ty: Ty::Unknown,
            has_default: p.default.is_some(),
            keyword_only: p.keyword_only,
            range: p.range,
            name_range: p.name_range,
            sharding: None,
        })
        .collect();
    let diagnostics = def.iter().map(|d| self_reference(d.name_range, key.name(db))).collect();
    Arc::new(untyped_helper(params, diagnostics))
}

/// The signature of a function nothing is known about but its parameters' names.
fn untyped_helper(params: Vec<ParamInfo>, diagnostics: Vec<Diagnostic>) -> Signature {
    Signature {
        kind: FunctionKind::Helper,
        decorators: Vec::new(),
        autodiff: false,
        jit: false,
        schedule: None,
        numerics: None,
        params,
        ret: None,
        symbols: Vec::new(),
        diagnostics,
        unimported_alias_uses: Vec::new(),
    }
}

/// What a function's decorators say (kind, schedule with its candidates).
#[salsa::tracked(returns(ref), cycle_result = decorators_cycle)]
pub fn fn_decorators<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Arc<DecoratorInfo> {
    if let Some(derived) = *db::derived_kernel(db, key) {
        return Arc::new(derived_decorators(db, derived));
    }
    let decorators = db::function_decorators(db, key).clone().unwrap_or_default();
    Arc::new(annot::decorator_info(db, key.file(db), key.name(db), &decorators))
}

/// A derived kernel's decorators: its original's, with the schedule of its
/// `with_schedule` argument as the fixed schedule and no search space (an autotuned
/// original's space is dropped). The original's decorator diagnostics stay the
/// original's; the argument's are the assignment's (`const_value`).
fn derived_decorators(db: &dyn Db, derived: db::DerivedKernel<'_>) -> DecoratorInfo {
    let mut info = (**fn_decorators(db, derived.original)).clone();
    info.diagnostics.clear();
    info.unimported_alias_uses.clear();
    if info.kind != FunctionKind::Kernel {
        return info;
    }
    let fixed = db::constant_ast(db, derived.assignment)
        .as_ref()
        .and_then(|c| {
            let (_, _, args) = db::with_schedule_call(c)?;
            match const_value(db, derived.assignment).inference.type_of(args.first()?.value) {
                Ty::Schedule(s) => Some((**s).clone()),
                _ => None,
            }
        })
        .unwrap_or_default();
    info.schedule = Some(KernelSchedule { fixed, ..KernelSchedule::default() });
    let kept = info.decorators.iter().filter(|d| !d.starts_with("kernel")).cloned();
    info.decorators = std::iter::once("kernel.schedule".to_string()).chain(kept).collect();
    info
}

/// The signature of a function.
#[salsa::tracked(returns(ref), cycle_result = signature_cycle)]
pub fn fn_signature<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Arc<Signature> {
    let info = fn_decorators(db, key);
    match db::function_def(db, key) {
        Some(def) => Arc::new(annot::signature(db, db::home_file(db, key), def, info)),
        None => Arc::new(untyped_helper(Vec::new(), Vec::new())),
    }
}

fn infer_cycle(_db: &dyn Db, _id: salsa::Id, _key: FnKey<'_>) -> Arc<Inference> {
    Arc::new(Inference::default())
}

/// Checks one function body. Depends only on this function's AST and signature, the
/// module scope, and the signatures (or return types) of what it calls.
#[salsa::tracked(returns(ref), cycle_result = infer_cycle)]
pub fn infer_function<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Arc<Inference> {
    let Some(ast) = db::function_def(db, key) else {
        return Arc::new(Inference::default());
    };
    let signature = fn_signature(db, key);
    Arc::new(infer::infer_body(db, db::home_file(db, key), ast, signature))
}

/// The value of a module constant and its item-relative diagnostics.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConstValue {
    pub ty: Ty,
    /// Values of every name the target binds (`a, b = 1, 2`).
    pub names: BTreeMap<String, Ty>,
    pub diagnostics: Vec<Diagnostic>,
    pub inference: Inference,
}

fn const_cycle(_db: &dyn Db, _id: salsa::Id, _key: ConstKey<'_>) -> Arc<ConstValue> {
    Arc::new(ConstValue {
        ty: Ty::Unknown,
        names: BTreeMap::new(),
        diagnostics: Vec::new(),
        inference: Inference::default(),
    })
}

#[salsa::tracked(returns(ref), cycle_result = const_cycle)]
pub fn const_value<'db>(db: &'db dyn Db, key: ConstKey<'db>) -> Arc<ConstValue> {
    match db::constant_ast(db, key) {
        Some(ast) => Arc::new(infer::eval_constant(db, key, ast)),
        None => const_cycle(db, salsa::plumbing::AsId::as_id(&key), key),
    }
}

/// Diagnostics that need the schedule's values but not a target.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ScheduleChecks {
    /// E0502 on tensor-core shapes a fixed schedule determines (relative to `def`).
    pub body: Vec<Diagnostic>,
    /// W0705 on autotune keys the body never reads (relative to the item's start).
    pub decorators: Vec<Diagnostic>,
}

#[salsa::tracked(returns(ref))]
pub fn schedule_checks<'db>(db: &'db dyn Db, key: FnKey<'db>) -> ScheduleChecks {
    let info = fn_decorators(db, key);
    let inference = infer_function(db, key);
    infer::schedule_diagnostics(info, inference)
}

/// Every diagnostic of a file that the frontend produces, absolute and sorted.
#[salsa::tracked(returns(ref))]
pub fn file_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = db::syntax_diagnostics(db, file).to_vec();
    out.extend(scope::module_diagnostics(db, file));
    let index = db::item_index(db, file);
    let mut unimported: Vec<TextRange> = Vec::new();
    for entry in &index.functions {
        if let Some(derived) = *db::derived_kernel(db, entry.key) {
            let found = derived_diagnostics(db, entry.key, derived.original);
            if derived.original.file(db) == file {
                out.extend(found.map(|d| d.shift(entry.anchor)));
            } else {
                // A standard-library body: what the schedule breaks in it is reported at
                // the name the assignment defines, never at stdlib text.
                let name = entry.key.name(db);
                let original = derived.original.name(db);
                out.extend(found.map(|d| at_derived_name(d, entry.name_range, name, original)));
            }
            continue;
        }
        let info = fn_decorators(db, entry.key);
        let signature = fn_signature(db, entry.key);
        let inference = infer_function(db, entry.key);
        let checks = schedule_checks(db, entry.key);
        // Decorators count from the item's first byte, the rest from `def`.
        for d in info.diagnostics.iter().chain(&checks.decorators) {
            out.push(d.clone().shift(entry.range.start));
        }
        unimported.extend(info.unimported_alias_uses.iter().map(|r| r.shift(entry.range.start)));
        unimported.extend(
            signature
                .unimported_alias_uses
                .iter()
                .chain(&inference.unimported_alias_uses)
                .map(|r| r.shift(entry.anchor)),
        );
        let numerics = numerics_lints(db, entry.key);
        for d in signature.diagnostics.iter().chain(&inference.diagnostics).chain(&checks.body).chain(numerics) {
            out.push(d.clone().shift(entry.anchor));
        }
    }
    // Operations `vmap`/`jvp` cannot transform, at the operation (E0808).
    out.extend(transform_ops::transform_refusals(db, file));
    for entry in &index.constants {
        let value = const_value(db, entry.key);
        for d in &value.diagnostics {
            out.push(d.clone().shift(entry.anchor));
        }
        unimported.extend(value.inference.unimported_alias_uses.iter().map(|r| r.shift(entry.anchor)));
    }
    if let Some(first) = unimported.iter().min_by_key(|r| r.start) {
        out.push(scope::unimported_alias(db, file, *first, unimported.len()));
    }
    sort_diagnostics(&mut out);
    // A cycle through a function's decorators and its signature reports the same
    // self-reference from both.
    out.dedup();
    out
}

/// A derived kernel's own diagnostics (item-relative to the original's `def`): those of
/// its signature, body and schedule checks that its original does not have too (E0502
/// under the new schedule, say). Everything else is reported once, at the original or at
/// the assignment.
fn derived_diagnostics<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    original: FnKey<'db>,
) -> impl Iterator<Item = Diagnostic> {
    let of = |k: FnKey<'db>| -> Vec<Diagnostic> {
        fn_signature(db, k)
            .diagnostics
            .iter()
            .chain(&infer_function(db, k).diagnostics)
            .chain(&schedule_checks(db, k).body)
            .cloned()
            .collect()
    };
    let theirs = of(original);
    of(key).into_iter().filter(move |d| !theirs.contains(d))
}

/// A diagnostic found in a standard-library kernel's body under a derived kernel's
/// schedule, moved to the derived name (`name_range`, absolute): labels and fixes in the
/// stdlib text are dropped, and the message names the kernel it is in.
pub fn at_derived_name(mut d: Diagnostic, name_range: TextRange, name: &str, original: &str) -> Diagnostic {
    d.message = format!(
        "{} (in the standard-library kernel `{original}` under `{name} = {original}.with_schedule(...)`)",
        d.message
    );
    d.range = name_range;
    d.labels.clear();
    d.fix = None;
    d
}

pub fn sort_diagnostics(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (a.range.start, a.range.end, a.code, &a.message).cmp(&(b.range.start, b.range.end, b.code, &b.message))
    });
}
