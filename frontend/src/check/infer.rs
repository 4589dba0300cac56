//! The inference engine: types every expression of one item, resolves names, and
//! reports shape, dtype, level and schedule errors. Ranges are item-relative.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::builtins;
use super::dims::Dim;
use super::dtype::{DType, ElemType};
use super::schedule::{self, canonical_key};
use super::scope::{module_name_index, tessera_member, Member, ModuleScope, ScopeEntry};
use super::types::*;
use super::{
    const_value, fn_signature, infer_function, BindingInfo, FunctionKind, Inference, LocalInfo, Resolution, Signature,
};
use crate::db::{ConstKey, Db, FnKey, SourceFile};
use crate::diagnostics::name_index::{Best, NameIndex, Query};
use crate::diagnostics::{suggest, Code, Diagnostic, DiagnosticSink, Edit};
use crate::syntax::ast::*;
use crate::syntax::render::render;
use crate::text::TextRange;

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

pub(crate) struct Infer<'a> {
    pub db: &'a dyn Db,
    pub file: SourceFile,
    pub body: &'a Body,
    pub mode: Mode,
    pub scope: &'a ModuleScope,
    pub sig: Option<&'a Signature>,
    pub out: Inference,
    pub sink: DiagnosticSink,
    locals_by_name: HashMap<String, u32>,
    ctx_reads: BTreeSet<String>,
    /// `Some(depth)` while every enclosing statement is a `tile.parallel` loop (the
    /// region where grid axes may be declared), `None` elsewhere.
    grid: Option<u32>,
    /// A `tile.parallel` loop already appeared at the current grid level.
    grid_level_used: bool,
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
            out: Inference { expr_types: vec![Ty::Unknown; n], resolutions: vec![None; n], ..Default::default() },
            sink: DiagnosticSink::default(),
            locals_by_name: HashMap::new(),
            ctx_reads: BTreeSet::new(),
            grid: Some(0),
            grid_level_used: false,
            masked_depth: 0,
            returns: Vec::new(),
            fn_name: String::new(),
            last_substitution: None,
            current_stmt: None,
            reported_undefined: BTreeSet::new(),
            local_names: NameIndex::default(),
            locals_indexed: 0,
            signature_names: None,
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
        self.out
    }

    // ----- names ---------------------------------------------------------------------

    fn resolve_name(&mut self, id: ExprId, name: &str) -> Ty {
        if let Some(&local) = self.locals_by_name.get(name) {
            self.out.resolutions[id.0 as usize] = Some(Resolution::Local(local));
            return self.out.locals[local as usize].ty.clone();
        }
        if let Some(sig) = self.sig {
            if self.mode != Mode::Decl {
                if let Some((i, p)) = sig.params.iter().enumerate().find(|(_, p)| p.name == name) {
                    self.out.resolutions[id.0 as usize] = Some(Resolution::Param(i as u32));
                    return p.ty.clone();
                }
                if sig.symbols.iter().any(|s| s == name) {
                    self.out.resolutions[id.0 as usize] = Some(Resolution::Symbol(name.to_string()));
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
            self.out.resolutions[id.0 as usize] = Some(res);
            return ty;
        }
        if let Some(member) = prelude(name) {
            if let Member::Builtin(path) = member {
                self.out.resolutions[id.0 as usize] = Some(Resolution::Builtin(path));
            }
            return member_ty(member);
        }
        if matches!(name, "ts" | "tessera") {
            // Reported once per file (with an import fix); checking goes on as if imported.
            self.out.unimported_alias_uses.push(self.range(id));
            self.out.resolutions[id.0 as usize] = Some(Resolution::Import(name.to_string()));
            return Ty::Namespace(Namespace::Tessera);
        }
        self.out.resolutions[id.0 as usize] = Some(Resolution::Unresolved);
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
            d = d.with_fix(format!("did you mean `{s}`?"), vec![Edit { range: self.range(id), text: s.to_string() }]);
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
            self.out.resolutions[id.0 as usize] = Some(Resolution::Local(local));
            self.out.expr_types[id.0 as usize] = ty.clone();
        }
        self.out.bindings.push(BindingInfo { local, range, ty });
        local
    }

    // ----- expressions ---------------------------------------------------------------

    pub fn expr(&mut self, id: ExprId) -> Ty {
        let ty = self.expr_inner(id);
        self.out.expr_types[id.0 as usize] = ty.clone();
        ty
    }

    fn expr_inner(&mut self, id: ExprId) -> Ty {
        let body = self.body;
        match body.expr(id) {
            Expr::Missing => Ty::Unknown,
            Expr::Name(name) => self.resolve_name(id, name),
            Expr::Int(v) => Ty::Int(Some(Dim::constant(*v))),
            Expr::Float(f) => Ty::Float(Some(*f)),
            Expr::Str(s) => Ty::Str(Some(s.clone())),
            Expr::Bool(b) => Ty::Bool(Some(*b)),
            Expr::NoneLit => Ty::NoneVal,
            Expr::Ellipsis => Ty::Unknown,
            Expr::Paren(inner) => self.expr(*inner),
            Expr::Tuple(items) => Ty::Tuple(items.iter().map(|&i| self.expr(i)).collect()),
            Expr::List(items) => Ty::List(items.iter().map(|&i| self.expr(i)).collect()),
            Expr::Dict(pairs) => {
                let mut entries = Vec::new();
                for (k, v) in pairs {
                    let key = self.expr(*k);
                    let value = self.expr(*v);
                    if let Ty::Str(Some(s)) = key {
                        entries.push((s, value));
                    }
                }
                Ty::Dict(entries)
            }
            Expr::Slice { start, stop, step } => {
                for e in [start, stop, step].into_iter().flatten() {
                    self.expr(*e);
                }
                Ty::Slice
            }
            Expr::Attribute { object, name, name_range } => {
                let obj = self.expr(*object);
                self.attribute(*object, obj, name, *name_range)
            }
            Expr::Subscript { value, indices } => self.subscript(id, *value, indices),
            Expr::Call { func, args } => self.call(id, *func, args),
            Expr::Binary { op, lhs, rhs } => {
                let l = self.expr(*lhs);
                let r = self.expr(*rhs);
                self.binary(id, *op, *lhs, l, *rhs, r)
            }
            Expr::Unary { op, operand } => {
                let t = self.expr(*operand);
                self.unary(id, *op, t)
            }
            Expr::BoolOp { lhs, rhs, .. } => {
                let l = self.expr(*lhs);
                let r = self.expr(*rhs);
                match (l, r) {
                    (Ty::Tile(t), _) | (_, Ty::Tile(t)) => {
                        Ty::Tile(TileType { dims: t.dims, elem: ElemType::plain(DType::Bool) })
                    }
                    _ => Ty::Bool(None),
                }
            }
            Expr::Compare { op, lhs, rhs } => {
                let l = self.expr(*lhs);
                let r = self.expr(*rhs);
                self.compare(id, *op, *lhs, l, *rhs, r)
            }
            Expr::IfExpr { cond, then, otherwise } => {
                self.expr(*cond);
                let a = self.expr(*then);
                let b = self.expr(*otherwise);
                if a == b {
                    a
                } else {
                    match (&a, &b) {
                        (Ty::Int(_), Ty::Int(_)) => Ty::Int(None),
                        (Ty::Float(_), Ty::Float(_) | Ty::Int(_)) | (Ty::Int(_), Ty::Float(_)) => Ty::Float(None),
                        _ => Ty::Unknown,
                    }
                }
            }
        }
    }

    fn attribute(&mut self, object: ExprId, obj: Ty, name: &str, name_range: TextRange) -> Ty {
        match obj {
            Ty::Unknown => Ty::Unknown,
            Ty::Namespace(Namespace::Tessera) => match tessera_member(name) {
                Some(m) => member_ty(m),
                None => self.unknown_member(&self.text(object), name, name_range, super::scope::tessera_member_names()),
            },
            Ty::Namespace(Namespace::Stdlib) => match super::scope::stdlib_member(name) {
                Some(m) => member_ty(m),
                None => self.unknown_member("tessera.stdlib", name, name_range, crate::stdlib::kernel_names()),
            },
            Ty::Namespace(ns) => self.builtin_member(ns.name(), name, name_range),
            Ty::Builtin(path) if builtins::members(path).next().is_some() => {
                self.builtin_member(path, name, name_range)
            }
            Ty::Context => self.ctx_key(name, name_range),
            Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => self.tensor_attribute(t, name, name_range, false),
            Ty::Tile(t) => {
                let as_tensor = TensorType::new(t.dims, t.elem);
                self.tensor_attribute(as_tensor, name, name_range, true)
            }
            Ty::Shared(s) => match name {
                "T" => Ty::Shared(SharedType { dims: transpose_dims(&s.dims), ..s }),
                "shape" => Ty::Tuple(s.dims.iter().map(|d| Ty::Int(Some(d.clone()))).collect()),
                "dtype" => Ty::DType(ElemType::plain(s.dtype)),
                _ => self.no_attribute("a shared-memory buffer", name, name_range, &["T", "shape", "dtype"]),
            },
            Ty::Schedule(_) => {
                const METHODS: &[&str] = &[
                    "with_block",
                    "with_k",
                    "with_warps",
                    "with_stages",
                    "with_vector",
                    "with_swizzle",
                    "block",
                    "k",
                    "d",
                    "warps",
                    "stages",
                    "vector",
                    "swizzle",
                ];
                if METHODS.contains(&name) {
                    Ty::Method { recv: Box::new(obj), name: name.to_string() }
                } else {
                    self.no_attribute("a schedule", name, name_range, METHODS)
                }
            }
            Ty::Tuple(_) | Ty::List(_) | Ty::Int(_) | Ty::Float(_) | Ty::Scalar(_) | Ty::Str(_) | Ty::Bool(_) => {
                self.no_attribute(obj.kind_name(), name, name_range, &[])
            }
            Ty::Mesh(_) => self.no_attribute("a mesh", name, name_range, &[]),
            _ => {
                self.error(Code::E0201, name_range, format!("{} has no attribute `{name}`", obj.kind_name()));
                Ty::Unknown
            }
        }
    }

    fn tensor_attribute(&mut self, t: TensorType, name: &str, name_range: TextRange, tile: bool) -> Ty {
        let wrap = |this: &Self, t: TensorType| -> Ty {
            if tile {
                Ty::Tile(TileType { dims: t.dims, elem: t.elem })
            } else if this.in_kernel() {
                Ty::View(t)
            } else {
                Ty::Tensor(t)
            }
        };
        match name {
            "T" => {
                if t.dims.len() < 2 {
                    return wrap(self, t);
                }
                let dims = transpose_dims(&t.dims);
                wrap(self, TensorType { dims, ..t })
            }
            "shape" => Ty::Tuple(t.dims.iter().map(|d| Ty::Int(Some(d.clone()))).collect()),
            "ndim" => Ty::Int(Some(Dim::constant(t.dims.len() as i64))),
            "dtype" => Ty::DType(t.elem),
            "K" | "V" if t.kind == TensorKind::KVCache => {
                Ty::Tensor(TensorType { kind: TensorKind::Tensor, dims: t.dims, elem: t.elem })
            }
            "append" | "prune" if t.kind == TensorKind::KVCache => {
                Ty::Method { recv: Box::new(Ty::Tensor(t)), name: name.to_string() }
            }
            _ => {
                let what = if tile { "a tile" } else { "a tensor" };
                let mut known = vec!["T", "shape", "ndim", "dtype"];
                if t.kind == TensorKind::KVCache {
                    known.extend(["K", "V", "append", "prune"]);
                }
                self.no_attribute(what, name, name_range, &known)
            }
        }
    }

    fn no_attribute(&mut self, what: &str, name: &str, range: TextRange, known: &[&str]) -> Ty {
        let mut d = Diagnostic::new(Code::E0201, range, format!("{what} has no attribute `{name}`"));
        if let Some(s) = suggest(name, known.iter().copied()) {
            d = d.with_fix(format!("did you mean `{s}`?"), vec![Edit { range, text: s.to_string() }]);
        } else if !known.is_empty() {
            d = d.with_note(format!("available: {}", known.join(", ")));
        }
        self.push(d);
        Ty::Unknown
    }

    fn builtin_member(&mut self, prefix: &str, name: &str, range: TextRange) -> Ty {
        let path = format!("{prefix}.{name}");
        match builtins::lookup(&path) {
            Some(b) => Ty::Builtin(b.path),
            None => {
                let candidates: Vec<&str> = builtins::members(prefix).map(|b| b.name()).collect();
                self.unknown_member(prefix, name, range, candidates)
            }
        }
    }

    fn unknown_member(&mut self, ns: &str, name: &str, range: TextRange, candidates: Vec<&str>) -> Ty {
        let mut d = Diagnostic::new(Code::E0201, range, format!("`{ns}` has no member `{name}`"));
        if let Some(s) = suggest(name, candidates.iter().copied()) {
            d = d.with_fix(format!("did you mean `{ns}.{s}`?"), vec![Edit { range, text: s.to_string() }]);
        }
        self.push(d);
        Ty::Unknown
    }

    fn ctx_key(&mut self, name: &str, range: TextRange) -> Ty {
        let Some(sig) = self.sig else {
            return Ty::Unknown;
        };
        if sig.symbols.iter().any(|s| s == name) {
            return Ty::Int(Some(Dim::sym(name)));
        }
        let Some(sched) = &sig.schedule else {
            return Ty::Unknown;
        };
        if sched.has_key(name) {
            let key = canonical_key(name).to_string();
            self.ctx_reads.insert(key.clone());
            return match key.as_str() {
                "swizzle" => Ty::Str(None),
                _ => Ty::Int(Some(Dim::sym(&key))),
            };
        }
        let keys = sched.key_names();
        let mut d = Diagnostic::new(Code::E0700, range, format!("unknown schedule key `{name}`"));
        let autotune_keys: Vec<&str> = sched.space.iter().map(String::as_str).collect();
        let mut note = format!("`ctx` of `{}` has the schedule keys {}", self.fn_name, keys.join(", "));
        if !autotune_keys.is_empty() {
            note += &format!(" (autotuned: {})", autotune_keys.join(", "));
        }
        if !sig.symbols.is_empty() {
            note += &format!(" and the signature symbols {}", sig.symbols.join(", "));
        }
        d = d.with_note(note);
        let mut known = keys;
        known.extend(sig.symbols.iter().cloned());
        if let Some(s) = suggest(name, known.iter().map(String::as_str)) {
            d = d.with_fix(format!("did you mean `ctx.{s}`?"), vec![Edit { range, text: s.to_string() }]);
        } else if !sched.space.is_empty() {
            d = d.with_note(format!("add `{name}=[...]` to the autotune space to make it a key"));
        }
        self.push(d);
        Ty::Unknown
    }

    // ----- subscripts ----------------------------------------------------------------

    fn subscript(&mut self, id: ExprId, value: ExprId, indices: &[ExprId]) -> Ty {
        let base = self.expr(value);
        // Types in value position: `Tensor[...]` is only meaningful as an annotation.
        if let Ty::Builtin("Tensor" | "KTile" | "KVCache" | "OptimizerState") = base {
            let ann = self.eval_annotation(id);
            return ann;
        }
        let index_tys: Vec<Ty> = indices.iter().map(|&i| self.expr(i)).collect();
        match base {
            Ty::Unknown => Ty::Unknown,
            Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => {
                let Some(dims) = self.index_dims(value, &t.dims, indices, &index_tys) else {
                    return Ty::Unknown;
                };
                let sliced = TensorType { kind: TensorKind::Tensor, dims, elem: t.elem };
                if self.in_kernel() {
                    Ty::View(sliced)
                } else {
                    Ty::Tensor(sliced)
                }
            }
            Ty::Tile(t) => {
                let Some(dims) = self.index_dims(value, &t.dims, indices, &index_tys) else {
                    return Ty::Unknown;
                };
                Ty::Tile(TileType { dims, elem: t.elem })
            }
            Ty::Shared(s) => {
                let Some(dims) = self.index_dims(value, &s.dims, indices, &index_tys) else {
                    return Ty::Unknown;
                };
                Ty::Tile(TileType { dims, elem: ElemType::plain(s.dtype) })
            }
            Ty::Tuple(items) | Ty::List(items) => {
                if let [Ty::Int(Some(i))] = index_tys.as_slice() {
                    if let Some(i) = i.as_const() {
                        let len = items.len() as i64;
                        let idx = if i < 0 { i + len } else { i };
                        if (0..len).contains(&idx) {
                            return items[idx as usize].clone();
                        }
                        self.error(
                            Code::E0304,
                            self.range(indices[0]),
                            format!("index {i} is out of range for a tuple of length {len}"),
                        );
                    }
                }
                Ty::Unknown
            }
            Ty::Dict(entries) => match index_tys.as_slice() {
                [Ty::Str(Some(k))] => entries.into_iter().find(|(n, _)| n == k).map(|(_, t)| t).unwrap_or(Ty::Unknown),
                _ => Ty::Unknown,
            },
            other => {
                self.error(Code::E0802, self.range(value), format!("{} cannot be indexed", other.kind_name()));
                Ty::Unknown
            }
        }
    }

    /// The dims that remain after indexing `dims` with `indices`.
    fn index_dims(&mut self, value: ExprId, dims: &[Dim], indices: &[ExprId], tys: &[Ty]) -> Option<Vec<Dim>> {
        let consumed = tys.iter().filter(|t| !matches!(t, Ty::NoneVal)).count();
        let gather = tys.iter().any(|t| matches!(t, Ty::Tile(_)));
        if consumed > dims.len() && !gather {
            self.error(
                Code::E0300,
                self.range(indices[dims.len().min(indices.len() - 1)]),
                format!(
                    "too many indices: `{}` has rank {} ({}) but {} indices are given",
                    self.text(value),
                    dims.len(),
                    fmt_dims(dims),
                    consumed
                ),
            );
            return None;
        }
        let mut out = Vec::new();
        let mut d = 0usize;
        for (k, (&idx, ty)) in indices.iter().zip(tys).enumerate() {
            match ty {
                Ty::NoneVal => out.push(Dim::constant(1)),
                Ty::Slice => {
                    let dim = dims.get(d).cloned().unwrap_or_else(|| Dim::constant(1));
                    out.push(self.slice_extent(idx, &dim)?);
                    d += 1;
                }
                Ty::Int(v) => {
                    if let (Some(i), Some(n)) =
                        (v.as_ref().and_then(Dim::as_const), dims.get(d).and_then(Dim::as_const))
                    {
                        if i >= n || i < -n {
                            self.error(
                                Code::E0304,
                                self.range(idx),
                                format!("index {i} is out of bounds for dim {d} of size {n}"),
                            );
                            return None;
                        }
                    }
                    d += 1;
                }
                Ty::Tile(t) => {
                    // A gather by an index tile: the result has the index tile's dims.
                    out.extend(t.dims.iter().cloned());
                    d += 1;
                }
                Ty::Scalar(e) if e.dtype.is_int() => d += 1,
                Ty::Unknown => return None,
                other => {
                    self.error(
                        Code::E0802,
                        self.range(idx),
                        format!("index {k} is {}, expected an int, a slice, None or an index tile", other.kind_name()),
                    );
                    return None;
                }
            }
        }
        out.extend(dims.iter().skip(d).cloned());
        Some(out)
    }

    fn slice_extent(&mut self, slice: ExprId, dim: &Dim) -> Option<Dim> {
        let Expr::Slice { start, stop, step } = self.body.expr(self.body.unparen(slice)) else {
            return Some(dim.clone());
        };
        let value = |this: &Self, e: &Option<ExprId>| -> Option<Option<Dim>> {
            match e {
                None => Some(None),
                Some(e) => match this.out.expr_types[e.0 as usize].clone() {
                    Ty::Int(Some(d)) => Some(Some(d)),
                    Ty::NoneVal => Some(None),
                    _ => None,
                },
            }
        };
        let start_v = value(self, start)?.unwrap_or_else(|| Dim::constant(0));
        let stop_v = value(self, stop)?.unwrap_or_else(|| dim.clone());
        let mut extent = stop_v.sub(&start_v);
        if let Some(step_v) = value(self, step)?.and_then(|s| s.as_const()) {
            if step_v <= 0 {
                self.error(Code::E0802, self.range(step.unwrap()), "slice step must be positive");
                return None;
            }
            extent = extent.add(&Dim::constant(step_v - 1)).floor_div(&Dim::constant(step_v))?;
        }
        if let (Some(e), Some(n)) = (extent.as_const(), dim.as_const()) {
            if let (Some(s), Some(t)) = (start_v.as_const(), stop_v.as_const()) {
                if s < 0 || t > n || e < 0 {
                    self.error(
                        Code::E0304,
                        self.range(slice),
                        format!("slice {s}:{t} is out of bounds for a dim of size {n}"),
                    );
                    return None;
                }
            }
            let _ = e;
        }
        Some(extent)
    }

    // ----- operators -----------------------------------------------------------------

    /// Converts a value used as an operand: inside kernels a tensor slice or a shared
    /// buffer is loaded into a tile.
    pub fn operand(&self, ty: Ty) -> Ty {
        match ty {
            Ty::View(t) if self.in_kernel() => Ty::Tile(TileType { dims: t.dims, elem: t.elem }),
            Ty::Shared(s) => Ty::Tile(TileType { dims: s.dims, elem: ElemType::plain(s.dtype) }),
            other => other,
        }
    }

    pub fn binary(&mut self, id: ExprId, op: BinOp, lhs: ExprId, l: Ty, rhs: ExprId, r: Ty) -> Ty {
        if l.is_unknown() || r.is_unknown() {
            return Ty::Unknown;
        }
        let (l, r) = (self.operand(l), self.operand(r));
        if op == BinOp::MatMul {
            if self.in_kernel() || matches!(l, Ty::Tile(_)) {
                return self.tile_dot(id, lhs, l, rhs, r, None);
            }
            return self.matmul(id, lhs, l, rhs, r);
        }
        match (&l, &r) {
            (Ty::Int(a), Ty::Int(b)) => Ty::Int(int_op(op, a.as_ref(), b.as_ref())),
            (Ty::Int(_) | Ty::Float(_), Ty::Int(_) | Ty::Float(_)) => Ty::Float(float_op(op, &l, &r)),
            (Ty::Str(_), Ty::Str(_)) if op == BinOp::Add => Ty::Str(None),
            (Ty::Scalar(a), Ty::Scalar(b)) => match self.merge_elems(id, lhs, a, rhs, b) {
                Some(e) => Ty::Scalar(e),
                None => Ty::Unknown,
            },
            (Ty::Scalar(e), Ty::Int(_) | Ty::Float(_) | Ty::Bool(_))
            | (Ty::Int(_) | Ty::Float(_) | Ty::Bool(_), Ty::Scalar(e)) => Ty::Scalar(e.clone()),
            (Ty::Tensor(_) | Ty::Tile(_) | Ty::View(_) | Ty::DistTensor(_), _)
            | (_, Ty::Tensor(_) | Ty::Tile(_) | Ty::View(_) | Ty::DistTensor(_)) => {
                self.elementwise(id, &format!("`{}`", op.symbol()), &[(lhs, l.clone()), (rhs, r.clone())])
            }
            _ => {
                self.error(
                    Code::E0802,
                    self.range(id),
                    format!("`{}` is not defined for {} and {}", op.symbol(), l.kind_name(), r.kind_name()),
                );
                Ty::Unknown
            }
        }
    }

    /// Broadcasting elementwise op over tensors/tiles and scalars; checks dtypes.
    pub fn elementwise(&mut self, id: ExprId, what: &str, operands: &[(ExprId, Ty)]) -> Ty {
        let mut shape: Option<(Vec<Dim>, ExprId)> = None;
        let mut elem: Option<(ElemType, ExprId)> = None;
        let mut tile = false;
        for (e, ty) in operands {
            let ty = self.operand(ty.clone());
            let (dims, el) = match &ty {
                Ty::Unknown => return Ty::Unknown,
                Ty::Tensor(t) | Ty::DistTensor(t) | Ty::View(t) => (Some(t.dims.clone()), Some(t.elem.clone())),
                Ty::Tile(t) => {
                    tile = true;
                    (Some(t.dims.clone()), Some(t.elem.clone()))
                }
                Ty::Scalar(el) => (None, Some(el.clone())),
                Ty::Int(_) | Ty::Float(_) | Ty::Bool(_) => (None, None),
                other => {
                    self.error(
                        Code::E0802,
                        self.range(*e),
                        format!("{what} needs tensors or numbers, but `{}` is {}", self.text(*e), other.kind_name()),
                    );
                    return Ty::Unknown;
                }
            };
            if let Some(dims) = dims {
                shape = match shape {
                    None => Some((dims, *e)),
                    Some((prev, prev_e)) => match super::shapes::broadcast(&prev, &dims) {
                        Ok(b) => Some((b, prev_e)),
                        Err((ia, ib)) => {
                            let msg = format!(
                                "{what}: shapes do not broadcast: `{}` is {} but `{}` is {} ({} ≠ {})",
                                self.text(prev_e),
                                fmt_dims(&prev),
                                self.text(*e),
                                fmt_dims(&dims),
                                prev[ia],
                                dims[ib]
                            );
                            self.push(
                                Diagnostic::new(Code::E0302, self.range(id), msg)
                                    .with_label(self.range(prev_e), format!("this is {}", fmt_dims(&prev)))
                                    .with_label(self.range(*e), format!("this is {}", fmt_dims(&dims)))
                                    .with_note(
                                        "dims are aligned from the right; each pair must be equal or one of them 1",
                                    ),
                            );
                            return Ty::Unknown;
                        }
                    },
                };
            }
            if let Some(el) = el {
                elem = match elem {
                    None => Some((el, *e)),
                    Some((prev, prev_e)) => {
                        let prev_expr = prev_e;
                        match self.merge_elems(id, prev_expr, &prev, *e, &el) {
                            Some(m) => Some((m, prev_e)),
                            None => return Ty::Unknown,
                        }
                    }
                };
            }
        }
        let elem = elem.map(|(e, _)| e);
        match shape {
            Some((dims, _)) => {
                let elem = elem.unwrap_or_else(|| ElemType::plain(DType::F32));
                if tile {
                    Ty::Tile(TileType { dims, elem })
                } else {
                    Ty::Tensor(TensorType::new(dims, elem))
                }
            }
            None => match elem {
                Some(e) => Ty::Scalar(e),
                None => Ty::Float(None),
            },
        }
    }

    /// Same storage dtype required; policies merge; conflicting `@accum` is E0403.
    pub fn merge_elems(
        &mut self,
        id: ExprId,
        a_expr: ExprId,
        a: &ElemType,
        b_expr: ExprId,
        b: &ElemType,
    ) -> Option<ElemType> {
        if a.dtype != b.dtype {
            let (wide, narrow_expr, narrow) = if a.dtype.at_least_as_wide_as(b.dtype) {
                (a.dtype, b_expr, b.dtype)
            } else {
                (b.dtype, a_expr, a.dtype)
            };
            let cast = if self.in_kernel() { "tile.cast" } else { "cast" };
            let narrow_range = self.range(narrow_expr);
            self.push(
                Diagnostic::new(
                    Code::E0400,
                    self.range(id),
                    format!(
                        "mixed dtypes: `{}` is {} but `{}` is {}",
                        self.text(a_expr),
                        a.dtype,
                        self.text(b_expr),
                        b.dtype
                    ),
                )
                .with_label(self.range(a_expr), format!("{}", a))
                .with_label(self.range(b_expr), format!("{}", b))
                .with_note("operands must have the same storage dtype; conversions are explicit")
                .with_fix(
                    format!("convert `{}` to {wide} with {cast}", self.text(narrow_expr)),
                    vec![
                        Edit { range: TextRange::empty(narrow_range.start), text: format!("{cast}(") },
                        Edit { range: TextRange::empty(narrow_range.end), text: format!(", {wide})") },
                    ],
                ),
            );
            let _ = narrow;
            return None;
        }
        match a.merge(b) {
            Ok(m) => Some(m),
            Err((x, y)) => {
                self.push(
                    Diagnostic::new(
                        Code::E0403,
                        self.range(id),
                        format!("conflicting accumulation policies: @accum({x}) and @accum({y})"),
                    )
                    .with_label(self.range(a_expr), format!("{a}"))
                    .with_label(self.range(b_expr), format!("{b}")),
                );
                None
            }
        }
    }

    fn unary(&mut self, id: ExprId, op: UnaryOp, t: Ty) -> Ty {
        let t = self.operand(t);
        match (op, t) {
            (_, Ty::Unknown) => Ty::Unknown,
            (UnaryOp::Not, Ty::Tile(t)) => Ty::Tile(TileType { dims: t.dims, elem: ElemType::plain(DType::Bool) }),
            (UnaryOp::Not, _) => Ty::Bool(None),
            (UnaryOp::Neg, Ty::Int(v)) => Ty::Int(v.map(|d| d.neg())),
            (UnaryOp::Neg, Ty::Float(v)) => Ty::Float(v.map(|f| FloatLit::new(-f.get()))),
            (UnaryOp::Pos, t @ (Ty::Int(_) | Ty::Float(_))) => t,
            (UnaryOp::Invert, Ty::Int(_)) => Ty::Int(None),
            (_, t @ (Ty::Tensor(_) | Ty::Tile(_) | Ty::Scalar(_) | Ty::DistTensor(_))) => t,
            (_, other) => {
                self.error(Code::E0802, self.range(id), format!("unary operator on {}", other.kind_name()));
                Ty::Unknown
            }
        }
    }

    fn compare(&mut self, id: ExprId, op: CmpOp, lhs: ExprId, l: Ty, rhs: ExprId, r: Ty) -> Ty {
        if matches!(op, CmpOp::Is | CmpOp::IsNot | CmpOp::In | CmpOp::NotIn) {
            return Ty::Bool(None);
        }
        let (l, r) = (self.operand(l), self.operand(r));
        match (&l, &r) {
            (Ty::Unknown, _) | (_, Ty::Unknown) => Ty::Unknown,
            (Ty::Tile(_) | Ty::Tensor(_), _) | (_, Ty::Tile(_) | Ty::Tensor(_)) => {
                match self.elementwise(id, &format!("`{}`", op.symbol()), &[(lhs, l.clone()), (rhs, r.clone())]) {
                    Ty::Tile(t) => Ty::Tile(TileType { dims: t.dims, elem: ElemType::plain(DType::Bool) }),
                    Ty::Tensor(t) => Ty::Tensor(TensorType::new(t.dims, ElemType::plain(DType::Bool))),
                    _ => Ty::Unknown,
                }
            }
            (Ty::Int(Some(a)), Ty::Int(Some(b))) => match (a.as_const(), b.as_const()) {
                (Some(x), Some(y)) => Ty::Bool(Some(match op {
                    CmpOp::Lt => x < y,
                    CmpOp::Le => x <= y,
                    CmpOp::Gt => x > y,
                    CmpOp::Ge => x >= y,
                    CmpOp::Eq => x == y,
                    _ => x != y,
                })),
                _ => Ty::Bool(None),
            },
            _ => Ty::Bool(None),
        }
    }

    // ----- statements ----------------------------------------------------------------

    pub fn stmts(&mut self, stmts: &[StmtId]) {
        for &s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, id: StmtId) {
        let saved_stmt = self.current_stmt.replace(id);
        self.stmt_inner(id);
        self.current_stmt = saved_stmt;
    }

    fn stmt_inner(&mut self, id: StmtId) {
        let body = self.body;
        let range = body.stmt_range(id);
        match body.stmt(id) {
            Stmt::Expr(e) => {
                let e = *e;
                let ty = self.expr(e);
                if matches!(ty, Ty::Range(_)) {
                    self.error(
                        Code::E0503,
                        self.range(e),
                        "a range is only meaningful as the iterable of a `for` loop",
                    );
                }
                if !matches!(body.expr(e), Expr::Str(_) | Expr::Call { .. } | Expr::Ellipsis | Expr::Missing) {
                    // A bare expression statement other than a call or docstring has no effect,
                    // except in kernels where a tile op may be intended; no diagnostic.
                }
            }
            Stmt::Assign { target, annotation, value } => {
                let (target, value) = (*target, *value);
                let ty = self.expr(value);
                if let Some(a) = annotation {
                    let expected = self.eval_annotation(*a);
                    self.check_annotated_value(value, &ty, &expected, *a);
                }
                self.assign(target, ty, Some(value));
            }
            Stmt::AugAssign { target, op, op_range, value } => {
                let (target, value) = (*target, *value);
                let current = self.expr(target);
                let v = self.expr(value);
                let result = self.binary(target, *op, target, current.clone(), value, v.clone());
                self.assign_aug(target, *op_range, current, result, value);
            }
            Stmt::Return(value) => {
                let ty = match value {
                    Some(v) => self.expr(*v),
                    None => Ty::NoneVal,
                };
                let r = value.map(|v| self.range(v)).unwrap_or(range);
                self.returns.push((r, ty));
            }
            Stmt::Pass | Stmt::Invalid => {}
            Stmt::Break | Stmt::Continue => {
                if self.in_masked_region() {
                    self.error(
                        Code::E0503,
                        range,
                        "`break`/`continue` inside a masked region: the condition is a tile, so lanes disagree",
                    );
                }
            }
            Stmt::If { branches, orelse } => {
                let saved_grid = self.grid.take();
                let mut masked = false;
                for b in branches {
                    let cond = self.expr(b.cond);
                    let cond = self.operand(cond);
                    if let Ty::Tile(t) = &cond {
                        if t.elem.dtype != DType::Bool {
                            self.error(
                                Code::E0400,
                                self.range(b.cond),
                                format!("a mask must be a bool tile, but `{}` is {}", self.text(b.cond), t),
                            );
                        }
                        masked = true;
                    } else if matches!(cond, Ty::Tensor(_)) && !self.in_kernel() {
                        self.error(
                            Code::E0802,
                            self.range(b.cond),
                            "a tensor has no truth value in a graph function: use `where(cond, a, b)`",
                        );
                    }
                }
                if masked {
                    self.masked_depth += 1;
                }
                for b in branches {
                    self.stmts(&b.body);
                }
                if let Some(e) = orelse {
                    self.stmts(e);
                }
                if masked {
                    self.masked_depth -= 1;
                }
                self.grid = saved_grid;
            }
            Stmt::For { target, iter, body: loop_body, orelse } => {
                self.for_loop(*target, *iter, loop_body, orelse.as_deref())
            }
            Stmt::While { cond, body: loop_body } => {
                let saved_grid = self.grid.take();
                let c = self.expr(*cond);
                if matches!(self.operand(c), Ty::Tile(_)) {
                    self.error(
                        Code::E0503,
                        self.range(*cond),
                        "`while` needs a scalar condition; a tile condition differs between lanes",
                    );
                }
                self.stmts(loop_body);
                self.grid = saved_grid;
            }
            Stmt::With { items, body: with_body } => {
                let saved_grid = self.grid.take();
                for item in items {
                    let ty = self.expr(item.value);
                    if let Some(alias) = item.alias {
                        self.assign(alias, ty, None);
                    }
                }
                self.stmts(with_body);
                self.grid = saved_grid;
            }
        }
    }

    fn in_masked_region(&self) -> bool {
        self.masked_depth > 0
    }

    fn for_loop(&mut self, target: ExprId, iter: ExprId, loop_body: &[StmtId], orelse: Option<&[StmtId]>) {
        let iter_ty = self.expr(iter);
        let kind = match &iter_ty {
            Ty::Range(kind) => *kind,
            Ty::Unknown => LoopKind::Unrolled,
            Ty::Tuple(_) | Ty::List(_) => LoopKind::Unrolled,
            other => {
                self.error(Code::E0802, self.range(iter), format!("cannot iterate over {}", other.kind_name()));
                LoopKind::Unrolled
            }
        };
        if kind == LoopKind::Parallel && self.mode == Mode::Kernel {
            let problem = match self.grid {
                None => Some("`tile.parallel` must be at the top of the kernel body"),
                Some(_) if self.grid_level_used => {
                    Some("a second `tile.parallel` loop at the same level: the kernel already has this grid axis")
                }
                Some(depth) if depth >= 3 => Some("at most 3 nested `tile.parallel` loops: the launch grid has 3 axes"),
                Some(_) => None,
            };
            if let Some(message) = problem {
                let mut d = Diagnostic::new(Code::E0503, self.range(iter), message).with_note(
                    "grid axes are declared by `for ... in tile.parallel(...)` loops that enclose the body; \
                     inside a sequential loop or a branch use `tile.range`",
                );
                if let Expr::Call { func, .. } = self.body.expr(iter) {
                    if let Expr::Attribute { name_range, .. } = self.body.expr(*func) {
                        d = d.with_fix(
                            "use a sequential `tile.range` loop",
                            vec![Edit { range: *name_range, text: "range".into() }],
                        );
                    }
                }
                self.push(d);
            }
        }
        // The loop variable is a symbol: slices like `A[k0:k0 + BK]` have extent BK.
        let var_ty = match (kind, self.body.expr(target)) {
            (LoopKind::Parallel | LoopKind::Sequential, Expr::Name(n)) => Ty::Int(Some(Dim::sym(n))),
            (_, Expr::Name(n)) => match &iter_ty {
                Ty::Tuple(items) | Ty::List(items) => items.first().cloned().unwrap_or(Ty::Unknown),
                _ => Ty::Int(Some(Dim::sym(n))),
            },
            _ => Ty::Unknown,
        };
        self.assign(target, var_ty, None);
        if kind == LoopKind::Parallel {
            let saved = (self.grid, self.grid_level_used);
            self.grid = self.grid.map(|d| d + 1);
            self.grid_level_used = false;
            self.stmts(loop_body);
            self.grid = saved.0;
            self.grid_level_used = true;
        } else {
            let saved = self.grid.take();
            self.stmts(loop_body);
            self.grid = saved;
        }
        if let Some(e) = orelse {
            self.stmts(e);
        }
    }

    /// Binds an assignment target (name, tuple, subscript store).
    pub fn assign(&mut self, target: ExprId, ty: Ty, value: Option<ExprId>) {
        let body = self.body;
        match body.expr(target) {
            Expr::Name(n) => {
                let r = self.range(target);
                self.bind_local(n, r, ty, Some(target));
            }
            Expr::Paren(inner) => self.assign(*inner, ty, value),
            Expr::Tuple(items) | Expr::List(items) => {
                let elems: Option<Vec<Ty>> = match &ty {
                    Ty::Tuple(t) | Ty::List(t) => Some(t.clone()),
                    Ty::Unknown => None,
                    other => {
                        self.error(
                            Code::E0802,
                            self.range(target),
                            format!("cannot unpack {} into {} names", other.kind_name(), items.len()),
                        );
                        None
                    }
                };
                if let Some(elems) = &elems {
                    if elems.len() != items.len() {
                        let r = value.map(|v| self.range(v)).unwrap_or(self.range(target));
                        self.error(
                            Code::E0802,
                            r,
                            format!("cannot unpack {} values into {} names", elems.len(), items.len()),
                        );
                    }
                }
                for (i, &item) in items.iter().enumerate() {
                    let t = elems.as_ref().and_then(|e| e.get(i).cloned()).unwrap_or(Ty::Unknown);
                    self.assign(item, t, None);
                }
            }
            Expr::Subscript { .. } => {
                let dst = self.expr(target);
                if let Some(v) = value {
                    self.store(target, dst, v, ty);
                }
            }
            Expr::Attribute { .. } => {
                self.error(Code::E0802, self.range(target), "attributes cannot be assigned");
            }
            Expr::Missing => {}
            _ => self.error(Code::E0100, self.range(target), "cannot assign to this expression"),
        }
    }

    fn assign_aug(&mut self, target: ExprId, op_range: TextRange, current: Ty, result: Ty, value: ExprId) {
        match self.body.expr(target) {
            Expr::Name(n) => {
                // Keep the variable's type stable: `acc += ...` must not change its shape.
                if let (Some(cur), Some(new)) = (current.shape(), result.shape()) {
                    if cur.0 != new.0 {
                        self.error(
                            Code::E0301,
                            self.range(value),
                            format!(
                                "`{}` changes the shape of `{n}` from {} to {}",
                                op_range_text(self.body, target, op_range),
                                fmt_dims(cur.0),
                                fmt_dims(new.0)
                            ),
                        );
                    }
                }
                let r = self.range(target);
                let keep = if current.is_unknown() || result.is_unknown() { current } else { result };
                let n = n.clone();
                self.bind_local(&n, r, keep, Some(target));
            }
            Expr::Subscript { .. } => self.store(target, current, value, result),
            _ => {}
        }
    }

    /// A store into a tensor slice: the value must broadcast to the slice and have its
    /// storage dtype.
    fn store(&mut self, target: ExprId, dst: Ty, value: ExprId, ty: Ty) {
        let ty = self.operand(ty);
        let (dims, elem) = match &dst {
            Ty::View(t) | Ty::Tensor(t) => (t.dims.clone(), t.elem.clone()),
            Ty::Unknown => return,
            Ty::Tile(_) => {
                self.error(Code::E0802, self.range(target), "tiles are values: store into a tensor parameter instead");
                return;
            }
            other => {
                self.error(Code::E0802, self.range(target), format!("cannot store into {}", other.kind_name()));
                return;
            }
        };
        let (vdims, velem) = match &ty {
            Ty::Tile(t) => (t.dims.clone(), t.elem.clone()),
            Ty::Tensor(t) => (t.dims.clone(), t.elem.clone()),
            Ty::Scalar(e) => (Vec::new(), e.clone()),
            Ty::Int(_) | Ty::Float(_) | Ty::Bool(_) => return,
            Ty::Unknown => return,
            other => {
                self.error(Code::E0802, self.range(value), format!("cannot store {} into a tensor", other.kind_name()));
                return;
            }
        };
        if !super::shapes::broadcasts_to(&vdims, &dims) {
            let code = if vdims.len() == dims.len() { Code::E0301 } else { Code::E0302 };
            self.push(
                Diagnostic::new(
                    code,
                    self.range(value),
                    format!(
                        "stored value has shape {} but the destination `{}` is {}",
                        fmt_dims(&vdims),
                        self.text(target),
                        fmt_dims(&dims)
                    ),
                )
                .with_label(self.range(target), format!("destination is {}", fmt_dims(&dims))),
            );
            return;
        }
        if velem.dtype != elem.dtype {
            let cast = if self.in_kernel() { "tile.cast" } else { "cast" };
            let r = self.range(value);
            self.push(
                Diagnostic::new(
                    Code::E0400,
                    r,
                    format!("stored value is {} but `{}` holds {}", velem.dtype, self.text(target), elem.dtype),
                )
                .with_label(self.range(target), format!("{}", elem))
                .with_fix(
                    format!("convert with {cast}(..., {})", elem.dtype),
                    vec![
                        Edit { range: TextRange::empty(r.start), text: format!("{cast}(") },
                        Edit { range: TextRange::empty(r.end), text: format!(", {})", elem.dtype) },
                    ],
                ),
            );
        }
    }

    fn check_annotated_value(&mut self, value: ExprId, ty: &Ty, expected: &Ty, ann: ExprId) {
        if ty.is_unknown() || expected.is_unknown() {
            return;
        }
        if let (Some((vd, ve)), Some((ed, ee))) = (ty.shape(), expected.shape()) {
            if vd != ed {
                self.push(
                    Diagnostic::new(
                        Code::E0303,
                        self.range(value),
                        format!("value has shape {} but the annotation says {}", fmt_dims(vd), fmt_dims(ed)),
                    )
                    .with_label(self.range(ann), "annotation"),
                );
            } else if ve.dtype != ee.dtype {
                self.error(
                    Code::E0803,
                    self.range(value),
                    format!("value is {} but the annotation says {}", ve.dtype, ee.dtype),
                );
            }
        }
    }

    pub fn eval_annotation(&mut self, ann: ExprId) -> Ty {
        super::annot::annotation_type(self, ann)
    }

    /// Checks the returned values against the annotation and the kernel rules.
    fn check_returns(&mut self, sig: &Signature, ret_ann: Option<ExprId>) {
        let returns = std::mem::take(&mut self.returns);
        let mut combined: Option<Ty> = None;
        for (range, ty) in &returns {
            if sig.kind == FunctionKind::Kernel {
                let ok = match ty {
                    Ty::NoneVal | Ty::Unknown => true,
                    Ty::Tensor(t) | Ty::View(t) => {
                        sig.params.iter().any(|p| matches!(&p.ty, Ty::Tensor(pt) if pt == t))
                    }
                    _ => false,
                };
                if !ok {
                    self.push(
                        Diagnostic::new(
                            Code::E0803,
                            *range,
                            format!("a kernel can only return one of its tensor parameters, not {}", ty.kind_name()),
                        )
                        .with_note("store the result into an output parameter (`out[...] = value`) and return nothing or that parameter"),
                    );
                    continue;
                }
            }
            if let (Some(expected), Some(ann)) = (&sig.ret, ret_ann) {
                self.check_return_value(*range, ty, expected, ann);
            }
            combined = Some(match combined {
                None => ty.clone(),
                Some(prev) if prev == *ty => prev,
                Some(_) => Ty::Unknown,
            });
        }
        self.out.return_ty = Some(combined.unwrap_or(Ty::NoneVal));
    }

    fn check_return_value(&mut self, range: TextRange, ty: &Ty, expected: &Ty, ann: ExprId) {
        if ty.is_unknown() || expected.is_unknown() {
            return;
        }
        let ann_range = self.range(ann);
        match (ty.shape(), expected.shape()) {
            (Some((vd, ve)), Some((ed, ee))) => {
                if vd != ed {
                    let detail = if vd.len() != ed.len() {
                        format!("rank {} vs {}", vd.len(), ed.len())
                    } else {
                        vd.iter().zip(ed).find(|(a, b)| a != b).map(|(a, b)| format!("{a} ≠ {b}")).unwrap_or_default()
                    };
                    self.push(
                        Diagnostic::new(
                            Code::E0303,
                            range,
                            format!(
                                "returned shape {} differs from the annotation {} ({detail})",
                                fmt_dims(vd),
                                fmt_dims(ed)
                            ),
                        )
                        .with_label(ann_range, format!("declared {}", fmt_dims(ed))),
                    );
                } else if ve.dtype != ee.dtype {
                    let cast = if self.in_kernel() { "tile.cast" } else { "cast" };
                    self.push(
                        Diagnostic::new(
                            Code::E0803,
                            range,
                            format!("returned dtype {} differs from the annotation {}", ve.dtype, ee.dtype),
                        )
                        .with_label(ann_range, format!("declared {ee}"))
                        .with_fix(
                            format!("convert with {cast}(..., {})", ee.dtype),
                            vec![
                                Edit { range: TextRange::empty(range.start), text: format!("{cast}(") },
                                Edit { range: TextRange::empty(range.end), text: format!(", {})", ee.dtype) },
                            ],
                        ),
                    );
                } else if let Some(missing) = ee.policies.iter().find(|p| !ve.policies.contains(p)) {
                    self.push(
                        Diagnostic::new(
                            Code::E0803,
                            range,
                            format!("the annotation requires {missing}, but the returned value is {ve}"),
                        )
                        .with_label(ann_range, format!("declared {ee}")),
                    );
                }
            }
            (None, Some((ed, _))) => {
                if !matches!(ty, Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_)) || !ed.is_empty() {
                    self.push(
                        Diagnostic::new(
                            Code::E0803,
                            range,
                            format!("returns {} but the annotation declares a tensor {}", ty.kind_name(), fmt_dims(ed)),
                        )
                        .with_label(ann_range, "declared here"),
                    );
                }
            }
            (Some(_), None) => {
                if !matches!(expected, Ty::Unknown) {
                    self.push(
                        Diagnostic::new(
                            Code::E0803,
                            range,
                            format!("returns {} but the annotation declares {}", ty.kind_name(), expected),
                        )
                        .with_label(ann_range, "declared here"),
                    );
                }
            }
            (None, None) => {}
        }
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
        BinOp::Mod => x.rem_euclid(y),
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

pub(crate) fn eval_constant(db: &dyn Db, key: ConstKey<'_>, ast: &ConstantAst) -> super::ConstValue {
    let file = key.file(db);
    // From the module scope, not the parse: the parse changes on every edit.
    let position = super::module_scope(db, file)
        .constant_positions
        .get(&(key.name(db).clone(), key.ordinal(db)))
        .copied()
        .unwrap_or(0);
    let mut cx = Infer::new(db, file, &ast.arena, Mode::Constant { position }, None);
    let ty = cx.expr(ast.value);
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
