//! The inference engine: types every expression of one item, resolves names, and
//! reports shape, dtype, level and schedule errors. Ranges are item-relative.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;

use super::dims::Dim;
use super::dtype::ElemType;
use super::schedule::{self, canonical_key};
use super::scope::{module_name_index, tessera_member, Member, ModuleScope, ScopeEntry};
use super::types::*;
use super::{
    const_value, fn_signature, infer_function, BindingInfo, FunctionKind, Inference, LocalInfo, Resolution, Signature,
};
use crate::db::{ConstKey, Db, FnKey, SourceFile};
use crate::diagnostics::name_index::{Best, NameIndex, Query};
use crate::diagnostics::{Code, Diagnostic, DiagnosticSink, Edit};
use crate::syntax::ast::*;
use crate::syntax::render::render;
use crate::text::TextRange;

mod exprs;
mod operators;
mod stmts;

/// Where the code being checked lives; decides which operations are allowed.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Kernel,
    Graph,
    Helper,
    /// A module constant at item `position` (sees only earlier constants).
    Constant {
        position: u32,
    },
    /// Decorators and annotations of a function.
    Decl,
}

/// One `tile.parallel` loop being checked: the locals bound before it, those its body
/// read before assigning them (their value from before the loop, the same in every
/// program), and those it assigned, with the first assignment.
#[derive(Default)]
pub(crate) struct GridScope {
    pub bound_before: Vec<u32>,
    pub read_first: Vec<u32>,
    pub assigned: Vec<(u32, TextRange)>,
}

pub(crate) struct Infer<'a> {
    pub db: &'a dyn Db,
    pub file: SourceFile,
    pub body: &'a Body,
    pub mode: Mode,
    pub scope: &'a ModuleScope,
    pub sig: Option<&'a Signature>,
    pub out: Inference,
    /// How each name expression resolved while the body is checked; [`Infer::finish`]
    /// keeps the names'.
    pub resolutions: Vec<Option<Resolution>>,
    pub sink: DiagnosticSink,
    locals_by_name: HashMap<String, u32>,
    ctx_reads: BTreeSet<String>,
    /// `Some(depth)` while every enclosing statement is a `tile.parallel` loop (the
    /// region where grid axes may be declared), `None` elsewhere.
    grid: Option<u32>,
    /// A `tile.parallel` loop already appeared at the current grid level.
    grid_level_used: bool,
    /// The `tile.parallel` loops around the statement being checked (see
    /// [`GridScope`]).
    pub(super) grid_scopes: Vec<GridScope>,
    /// Locals a `tile.parallel` loop assigned (each program its own copy) and nothing
    /// assigned since: after the loop they hold their value from before it. With the
    /// loop variable and the assignment.
    pub(super) stale: Vec<(u32, String, TextRange)>,
    /// The variables of the enclosing `tile.parallel` and `tile.range` loops: a tile's
    /// extent may not depend on them.
    pub(super) loop_vars: Vec<String>,
    masked_depth: u32,
    returns: Vec<(TextRange, Ty)>,
    /// The function's name (for messages), empty for constants.
    pub fn_name: String,
    /// The dim substitution of the last user-function call (for `grad` results).
    pub last_substitution: Option<BTreeMap<String, Dim>>,
    /// The statement being checked, and the undefined names already reported in it
    /// (one report per name per statement).
    current_stmt: Option<StmtId>,
    reported_undefined: BTreeSet<(Option<StmtId>, String)>,
    /// "Did you mean" candidates: the locals (indexed up to `locals_indexed`, as they
    /// are bound) and the signature's parameters and symbols, built on the first
    /// undefined name; the module's names are the file's `module_name_index`.
    local_names: NameIndex,
    locals_indexed: usize,
    signature_names: Option<NameIndex>,
    /// The call that is the whole value of a `name = kernel.with_schedule(S)` constant:
    /// the one place `with_schedule` defines a kernel.
    pub with_schedule_root: Option<ExprId>,
    /// The value of the `return` being checked, in a function that declares no return
    /// type: a `@stochastic_round` cast there does not act (W0409).
    pub undeclared_result: Option<ExprId>,
}

impl<'a> Infer<'a> {
    pub fn new(db: &'a dyn Db, file: SourceFile, body: &'a Body, mode: Mode, sig: Option<&'a Signature>) -> Infer<'a> {
        let n = body.exprs.len();
        Infer {
            db,
            file,
            body,
            mode,
            scope: super::module_scope(db, file),
            sig,
            // Built element by element: `vec![Ty::Unknown; n]` clones through `Ty`'s deep
            // `Clone` once per expression, about 1% of a cold check.
            out: Inference {
                expr_types: std::iter::repeat_with(|| Ty::Unknown).take(n).collect(),
                ..Default::default()
            },
            resolutions: vec![None; n],
            sink: DiagnosticSink::default(),
            locals_by_name: HashMap::default(),
            ctx_reads: BTreeSet::new(),
            grid: Some(0),
            grid_level_used: false,
            grid_scopes: Vec::new(),
            stale: Vec::new(),
            loop_vars: Vec::new(),
            masked_depth: 0,
            returns: Vec::new(),
            fn_name: String::new(),
            last_substitution: None,
            current_stmt: None,
            reported_undefined: BTreeSet::new(),
            local_names: NameIndex::default(),
            locals_indexed: 0,
            signature_names: None,
            with_schedule_root: None,
            undeclared_result: None,
        }
    }

    pub fn range(&self, id: ExprId) -> TextRange {
        self.body.expr_range(id)
    }

    pub fn text(&self, id: ExprId) -> String {
        render(self.body, id, 48)
    }

    pub fn error(&mut self, code: Code, range: TextRange, message: impl Into<String>) {
        self.sink.push(Diagnostic::new(code, range, message));
    }

    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.sink.push(diagnostic);
    }

    pub fn ctx_reads_insert(&mut self, key: &str) {
        self.ctx_reads.insert(key.to_string());
    }

    pub fn in_kernel(&self) -> bool {
        self.mode == Mode::Kernel
    }

    pub fn finish(mut self) -> Inference {
        self.out.diagnostics = self.sink.finish();
        self.out.ctx_reads = self.ctx_reads.into_iter().collect();
        self.out.resolutions =
            self.resolutions.into_iter().enumerate().filter_map(|(id, r)| Some((id as u32, r?))).collect();
        self.out
    }

    // ----- names ---------------------------------------------------------------------

    fn resolve_name(&mut self, id: ExprId, name: &str) -> Ty {
        if let Some(&local) = self.locals_by_name.get(name) {
            self.resolutions[id.0 as usize] = Some(Resolution::Local(local));
            self.grid_read(id, local);
            return self.out.locals[local as usize].ty.clone();
        }
        if let Some(sig) = self.sig {
            if self.mode != Mode::Decl {
                if let Some((i, p)) = sig.params.iter().enumerate().find(|(_, p)| p.name == name) {
                    self.resolutions[id.0 as usize] = Some(Resolution::Param(i as u32));
                    return p.ty.clone();
                }
                if sig.symbols.iter().any(|s| s == name) {
                    self.resolutions[id.0 as usize] = Some(Resolution::Symbol(name.to_string()));
                    return Ty::Int(Some(Dim::sym(name)));
                }
            }
        }
        if let Some(entry) = self.scope.get(name).cloned() {
            // A module constant runs top to bottom, like Python: it sees only the
            // functions and constants above it.
            let defined_at = match &entry {
                ScopeEntry::Function { position } | ScopeEntry::Constant { position, .. } => Some(*position),
                ScopeEntry::Member(_) | ScopeEntry::Unresolved => None,
            };
            if let (Mode::Constant { position: here }, Some(there)) = (self.mode, defined_at) {
                if there >= here {
                    self.error(Code::E0200, self.range(id), format!("`{name}` is used before its definition"));
                    return Ty::Unknown;
                }
            }
            let (ty, res) = match entry {
                ScopeEntry::Function { .. } => (Ty::Function(name.to_string()), Resolution::Function(name.to_string())),
                ScopeEntry::Constant { key, ordinal, .. } => {
                    let key = ConstKey::new(self.db, self.file, key.as_str(), ordinal);
                    let value = const_value(self.db, key);
                    let ty = value.names.get(name).cloned().unwrap_or(Ty::Unknown);
                    (ty, Resolution::Constant(name.to_string()))
                }
                ScopeEntry::Member(member) => (member_ty(member), Resolution::Import(name.to_string())),
                ScopeEntry::Unresolved => (Ty::Unknown, Resolution::Import(name.to_string())),
            };
            self.resolutions[id.0 as usize] = Some(res);
            return ty;
        }
        if let Some(member) = prelude(name) {
            if let Member::Builtin(path) = member {
                self.resolutions[id.0 as usize] = Some(Resolution::Builtin(path));
            }
            return member_ty(member);
        }
        if matches!(name, "ts" | "tessera") {
            // Reported once per file (with an import fix); checking goes on as if imported.
            self.out.unimported_alias_uses.push(self.range(id));
            self.resolutions[id.0 as usize] = Some(Resolution::Import(name.to_string()));
            return Ty::Namespace(Namespace::Tessera);
        }
        self.resolutions[id.0 as usize] = Some(Resolution::Unresolved);
        self.undefined(id, name);
        Ty::Unknown
    }

    /// The key name of the constant that binds `name` (a tuple target binds several).
    fn undefined(&mut self, id: ExprId, name: &str) {
        if !self.reported_undefined.insert((self.current_stmt, name.to_string())) {
            return;
        }
        let mut d = Diagnostic::new(Code::E0200, self.range(id), format!("undefined name `{name}`"));
        if let Some(s) = self.closest_name(name) {
            d = d.with_did_you_mean(self.range(id), &s);
        } else if let Some(builtin) = super::builtins::familiar_name(name).and_then(super::builtins::lookup) {
            d = d
                .with_fix(
                    format!("use `{}`", builtin.path),
                    vec![Edit { range: self.range(id), text: builtin.path.into() }],
                )
                .with_note(format!("Tessera's is `{}`: {}", builtin.signature(), builtin.doc));
        } else if name == "ts" || name == "tessera" {
            d = d.with_fix(
                "import tessera as ts",
                vec![Edit { range: TextRange::empty(0), text: format!("import tessera as {name}\n") }],
            );
        } else if self.in_kernel() {
            d = d.with_note(
                "kernel values come from parameters, dim symbols of the signature, `tile.context()` keys and loop variables",
            );
        }
        self.push(d);
    }

    /// The local, parameter, symbol or module name closest to `name` (locals win ties,
    /// then parameters, then module names), looked up in indexes so that many undefined
    /// names cost linear time.
    fn closest_name(&mut self, name: &str) -> Option<String> {
        for local in &self.out.locals[self.locals_indexed..] {
            self.local_names.insert(&local.name);
        }
        self.locals_indexed = self.out.locals.len();
        let sig = self.sig;
        let signature_names = self.signature_names.get_or_insert_with(|| {
            let params = sig.into_iter().flat_map(|s| s.params.iter().map(|p| p.name.as_str()));
            NameIndex::from_names(params.chain(sig.into_iter().flat_map(|s| s.symbols.iter().map(String::as_str))))
        });
        let query = Query::new(name);
        let mut best = Best::default();
        self.local_names.offer(&query, 0, &mut best);
        signature_names.offer(&query, 1, &mut best);
        module_name_index(self.db, self.file).offer(&query, 2, &mut best);
        best.name().map(str::to_string)
    }

    /// A read of `local` inside `tile.parallel` loops (their bodies' reads of values from
    /// before them), or after one that assigned it (E0503: the value from before).
    fn grid_read(&mut self, id: ExprId, local: u32) {
        for scope in &mut self.grid_scopes {
            let assigned = scope.assigned.iter().any(|(l, _)| *l == local);
            if scope.bound_before.contains(&local) && !assigned && !scope.read_first.contains(&local) {
                scope.read_first.push(local);
            }
        }
        if let Some(at) = self.stale.iter().position(|(l, ..)| *l == local) {
            let (_, loop_var, assigned) = self.stale.remove(at);
            let name = self.out.locals[local as usize].name.clone();
            let d = Diagnostic::new(
                Code::E0503,
                self.range(id),
                format!(
                    "`{name}` here is its value from before the `tile.parallel` loop over `{loop_var}`: the \
                     assignment inside that loop is each program's own copy, and ends with the program"
                ),
            )
            .with_label(self.range(id), "the value from before the loop")
            .with_label(assigned, format!("each program of `{loop_var}` assigns its own `{name}`"))
            .with_note(format!("use `{name}` inside the loop, or give the loop's value a new name"));
            self.push(d);
        }
    }

    pub fn bind_local(&mut self, name: &str, range: TextRange, ty: Ty, id: Option<ExprId>) -> u32 {
        let local = match self.locals_by_name.get(name) {
            Some(&l) => {
                let info = &mut self.out.locals[l as usize];
                info.defs.push(range);
                info.ty = ty.clone();
                l
            }
            None => {
                self.out.locals.push(LocalInfo { name: name.to_string(), defs: vec![range], ty: ty.clone() });
                let l = self.out.locals.len() as u32 - 1;
                self.locals_by_name.insert(name.to_string(), l);
                l
            }
        };
        if let Some(id) = id {
            self.resolutions[id.0 as usize] = Some(Resolution::Local(local));
            self.out.expr_types[id.0 as usize] = ty.clone();
        }
        for scope in &mut self.grid_scopes {
            if scope.bound_before.contains(&local) && !scope.assigned.iter().any(|(l, _)| *l == local) {
                scope.assigned.push((local, range));
            }
        }
        self.stale.retain(|(l, ..)| *l != local);
        self.out.bindings.push(BindingInfo { local, range, ty });
        local
    }
}

fn op_range_text(body: &Body, target: ExprId, _op_range: TextRange) -> String {
    format!("{} op=", render(body, target, 24))
}

fn transpose_dims(dims: &[Dim]) -> Vec<Dim> {
    let mut d = dims.to_vec();
    let n = d.len();
    if n >= 2 {
        d.swap(n - 1, n - 2);
    }
    d
}

fn int_op(op: BinOp, a: Option<&Dim>, b: Option<&Dim>) -> Option<Dim> {
    let (a, b) = (a?, b?);
    match op {
        BinOp::Add => Some(a.add(b)),
        BinOp::Sub => Some(a.sub(b)),
        BinOp::Mul => Some(a.mul_plain(b)),
        BinOp::FloorDiv => a.floor_div(b),
        BinOp::Mod => a.modulo(b),
        BinOp::Pow => {
            let e = b.as_const()?;
            if !(0..=16).contains(&e) {
                return None;
            }
            Some((0..e).fold(Dim::constant(1), |acc, _| acc.mul_plain(a)))
        }
        BinOp::Shl => Some(Dim::constant(a.as_const()?.checked_shl(b.as_const()? as u32)?)),
        BinOp::Shr => Some(Dim::constant(a.as_const()? >> b.as_const()?.clamp(0, 63))),
        BinOp::BitAnd => Some(Dim::constant(a.as_const()? & b.as_const()?)),
        BinOp::BitOr => Some(Dim::constant(a.as_const()? | b.as_const()?)),
        BinOp::BitXor => Some(Dim::constant(a.as_const()? ^ b.as_const()?)),
        BinOp::Div | BinOp::MatMul => None,
    }
}

fn float_op(op: BinOp, a: &Ty, b: &Ty) -> Option<FloatLit> {
    let value = |t: &Ty| match t {
        Ty::Float(Some(f)) => Some(f.get()),
        Ty::Int(Some(d)) => d.as_const().map(|v| v as f64),
        _ => None,
    };
    let (x, y) = (value(a)?, value(b)?);
    let r = match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Pow => x.powf(y),
        BinOp::FloorDiv => (x / y).floor(),
        BinOp::Mod => crate::arith::floor_rem_f64(x, y),
        _ => return None,
    };
    Some(FloatLit::new(r))
}

/// What a member of tessera is as a value.
pub(crate) fn member_ty(member: Member) -> Ty {
    match member {
        Member::Namespace(ns) => Ty::Namespace(ns),
        Member::Builtin("INF") => Ty::Float(Some(FloatLit::new(f64::INFINITY))),
        Member::Builtin("NAN") => Ty::Float(Some(FloatLit::new(f64::NAN))),
        Member::Builtin(path) => Ty::Builtin(path),
        Member::DType(d) => Ty::DType(ElemType::plain(d)),
        Member::StdlibKernel(name) => Ty::Builtin(name),
    }
}

/// Names visible everywhere without an import.
fn prelude(name: &str) -> Option<Member> {
    match name {
        // The namespaces are reachable bare (`tile.load`) even without an import.
        "tile" | "dist" | "verify" => tessera_member(name),
        "True" | "False" | "None" => None,
        _ => tessera_member(name).filter(|m| !matches!(m, Member::Namespace(_))),
    }
}

// ----- entry points ------------------------------------------------------------------

pub(crate) fn infer_body(db: &dyn Db, file: SourceFile, ast: &FunctionDef, sig: &Signature) -> Inference {
    let mode = match sig.kind {
        FunctionKind::Kernel => Mode::Kernel,
        FunctionKind::Graph => Mode::Graph,
        FunctionKind::Helper => Mode::Helper,
    };
    let mut cx = Infer::new(db, file, &ast.arena, mode, Some(sig));
    cx.fn_name = ast.name.to_string();
    cx.stmts(&ast.body);
    cx.check_returns(sig, ast.return_type);
    cx.finish()
}

impl Infer<'_> {
    /// `e` without the parentheses around it.
    pub(crate) fn strip_parens(&self, mut e: ExprId) -> ExprId {
        while let Expr::Paren(inner) = self.body.expr(e) {
            e = *inner;
        }
        e
    }
}

pub(crate) fn eval_constant(db: &dyn Db, key: ConstKey<'_>, ast: &ConstantAst) -> super::ConstValue {
    let file = key.file(db);
    // From the module scope, not the parse: the parse changes on every edit.
    let position = super::module_scope(db, file)
        .constant_positions
        .get(&(key.name(db).clone(), key.ordinal(db)))
        .copied()
        .unwrap_or(0);
    let mut cx = Infer::new(db, file, &ast.arena, Mode::Constant { position }, None);
    cx.with_schedule_root = crate::db::with_schedule_call(ast).map(|(_, call, _)| call);
    let mut ty = cx.expr(ast.value);
    if cx.with_schedule_root.is_some() && matches!(ty, Ty::Function(_)) {
        // `name = kernel.with_schedule(S)` is the kernel `name` (`db::derived_kernel`):
        // a call of `name` runs it under `S`, not `kernel`.
        ty = Ty::Function(key.name(db).to_string());
    }
    let mut names = BTreeMap::new();
    collect_const_names(&ast.arena, ast.target, &ty, &mut names);
    let inference = cx.finish();
    super::ConstValue { ty, names, diagnostics: inference.diagnostics.clone(), inference }
}

fn collect_const_names(body: &Body, target: ExprId, ty: &Ty, out: &mut BTreeMap<String, Ty>) {
    match body.expr(target) {
        Expr::Name(n) => {
            out.insert(n.to_string(), ty.clone());
        }
        Expr::Paren(inner) => collect_const_names(body, *inner, ty, out),
        Expr::Tuple(items) | Expr::List(items) => {
            for (i, &item) in items.iter().enumerate() {
                let t = match ty {
                    Ty::Tuple(ts) | Ty::List(ts) => ts.get(i).cloned().unwrap_or(Ty::Unknown),
                    _ => Ty::Unknown,
                };
                collect_const_names(body, item, &t, out);
            }
        }
        _ => {}
    }
}

/// E0502 for tensor-core operations whose dims a fixed schedule determines.
pub(crate) fn schedule_diagnostics(info: &super::DecoratorInfo, inference: &Inference) -> super::ScheduleChecks {
    let mut out = super::ScheduleChecks::default();
    let Some(schedule) = &info.schedule else {
        return out;
    };
    // W0705: an autotune key the kernel never reads through `ctx`.
    for key in &schedule.space {
        let canon = canonical_key(&key.key);
        if !schedule::consumed_by_compiler(canon) && !inference.ctx_reads.iter().any(|r| r == canon) {
            out.decorators.push(
                Diagnostic::new(
                    Code::W0705,
                    key.key_range,
                    format!("autotune key `{}` is never read through `ctx`", key.key),
                )
                .with_note(format!(
                    "its {} candidates multiply the search space without changing the kernel",
                    key.candidates.len()
                )),
            );
        }
    }
    if schedule.is_autotuned() {
        // Candidates that break E0502 are pruned by the target passes (W0702/E0703).
        return out;
    }
    let config = schedule.fixed.layered_on(&super::ScheduleValue::default_for_kernel());
    for site in &inference.mma_sites {
        let lookup = |s: &str| config.int(s);
        let Some(multiple) = site.dtype.mma_multiple() else {
            continue;
        };
        let dims = [("M", &site.m), ("N", &site.n), ("K", &site.k)];
        let bad: Vec<String> = dims
            .iter()
            .filter_map(|(name, d)| {
                let v = d.eval(&lookup)?;
                (v % multiple as i64 != 0).then(|| format!("{name} = {v}"))
            })
            .collect();
        if !bad.is_empty() {
            out.body.push(
                Diagnostic::new(
                    Code::E0502,
                    site.range,
                    format!(
                        "tensor-core shape not supported: {} with the schedule (M, N and K must be multiples of {multiple} for {})",
                        bad.join(", "),
                        site.dtype
                    ),
                )
                .with_note(format!("the schedule is {config}")),
            );
        }
    }
    out
}

/// Looks up the signature of a function of the same file by name.
pub(crate) fn callee_signature<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    name: &str,
) -> Option<(FnKey<'db>, &'db Signature)> {
    let key = FnKey::new(db, file, name.to_string(), 0);
    crate::db::function_ast(db, key).as_ref()?;
    Some((key, fn_signature(db, key).as_ref()))
}

pub(crate) fn callee_inference<'db>(db: &'db dyn Db, key: FnKey<'db>) -> &'db Inference {
    infer_function(db, key).as_ref()
}
