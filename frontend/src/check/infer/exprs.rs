//! Expressions: names in use, attributes, members, `ctx` keys and subscripts.

use crate::check::builtins;
use crate::check::dims::Dim;
use crate::check::dtype::{DType, ElemType};
use crate::check::schedule::{canonical_key, SCHEDULE_METHODS};
use crate::check::scope::tessera_member;
use crate::check::types::*;
use crate::diagnostics::{suggest, Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{member_ty, transpose_dims, Infer};

impl<'a> Infer<'a> {
    // ----- expressions ---------------------------------------------------------------

    pub fn expr(&mut self, id: ExprId) -> Ty {
        let ty = self.expr_inner(id);
        self.out.expr_types[id.0 as usize] = ty.clone();
        ty
    }

    pub(super) fn expr_inner(&mut self, id: ExprId) -> Ty {
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

    pub(super) fn attribute(&mut self, object: ExprId, obj: Ty, name: &str, name_range: TextRange) -> Ty {
        match obj {
            Ty::Unknown => Ty::Unknown,
            Ty::Namespace(Namespace::Tessera) => match tessera_member(name) {
                Some(m) => member_ty(m),
                None => self.unknown_member(
                    &self.text(object),
                    name,
                    name_range,
                    crate::check::scope::tessera_member_names(),
                ),
            },
            Ty::Namespace(Namespace::Stdlib) => match crate::check::scope::stdlib_member(name) {
                Some(m) => member_ty(m),
                None => self.unknown_member("tessera.stdlib", name, name_range, crate::stdlib::kernel_names()),
            },
            // `tl.cdiv` written `tile.cdiv` (or `tile.INF`): a built-in of its own in Tessera.
            Ty::Namespace(ns)
                if ns.name() == "tile"
                    && builtins::lookup(&format!("tile.{name}")).is_none()
                    && builtins::lookup(name).is_some_and(|b| b.level == builtins::Level::Any) =>
            {
                let whole = TextRange::new(self.range(object).start, name_range.end);
                let (what, written) = match builtins::lookup(name).is_some_and(|b| b.params.is_some()) {
                    true => ("function", format!("{name}(...)")),
                    false => ("constant", name.to_string()),
                };
                let d = Diagnostic::new(Code::E0201, name_range, format!("`tile` has no member `{name}`")).with_fix(
                    format!("`{name}` is a built-in {what} of its own: write `{written}`"),
                    vec![Edit { range: whole, text: name.to_string() }],
                );
                self.push(d);
                Ty::Unknown
            }
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
                if SCHEDULE_METHODS.contains(&name) {
                    Ty::Method { recv: Box::new(obj), name: name.to_string() }
                } else {
                    self.no_attribute("a schedule", name, name_range, SCHEDULE_METHODS)
                }
            }
            Ty::Tuple(_) | Ty::List(_) | Ty::Int(_) | Ty::Float(_) | Ty::Scalar(_) | Ty::Str(_) | Ty::Bool(_) => {
                self.no_attribute(obj.kind_name(), name, name_range, &[])
            }
            Ty::Mesh(_) => self.no_attribute("a mesh", name, name_range, &[]),
            Ty::Function(f) if name == "with_schedule" => self.with_schedule_member(&f, name_range),
            // A standard-library kernel derives like a kernel of the file (its f32
            // instance: `db::derived_kernel`).
            Ty::Builtin(kernel) if name == "with_schedule" && crate::check::scope::stdlib_member(kernel).is_some() => {
                Ty::Method { recv: Box::new(Ty::Builtin(kernel)), name: "with_schedule".into() }
            }
            _ => {
                self.error(Code::E0201, name_range, format!("{} has no attribute `{name}`", obj.kind_name()));
                Ty::Unknown
            }
        }
    }

    pub(super) fn tensor_attribute(&mut self, t: TensorType, name: &str, name_range: TextRange, tile: bool) -> Ty {
        if t.kind == TensorKind::OptimizerState {
            return self.optimizer_attribute(t, name, name_range);
        }
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
            "K" | "V" if t.kind == TensorKind::KVCache => match crate::check::ops::cache_view(&t) {
                Some(view) => Ty::Tensor(view),
                None => Ty::Unknown,
            },
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

    pub(super) fn no_attribute(&mut self, what: &str, name: &str, range: TextRange, known: &[&str]) -> Ty {
        let mut d = Diagnostic::new(Code::E0201, range, format!("{what} has no attribute `{name}`"));
        // Triton's `x.to(dtype)`, NumPy's and PyTorch's `x.astype(dtype)` / `x.to(dtype)`.
        let cast = if what.contains("tile") { "tile.cast" } else { "cast" };
        if matches!(name, "to" | "astype") {
            d = d.with_note(format!(
                "a dtype conversion is a function in Tessera: `x.{name}(dtype)` is `{cast}(x, dtype)`"
            ));
        } else if let Some(s) = suggest(name, known.iter().copied()) {
            d = d.with_did_you_mean(range, s);
        } else if !known.is_empty() {
            d = d.with_note(format!("available: {}", known.join(", ")));
        }
        self.push(d);
        Ty::Unknown
    }

    pub(super) fn builtin_member(&mut self, prefix: &str, name: &str, range: TextRange) -> Ty {
        let path = format!("{prefix}.{name}");
        match builtins::lookup(&path) {
            Some(b) => Ty::Builtin(b.path),
            None => {
                let candidates: Vec<&str> = builtins::members(prefix).map(|b| b.name()).collect();
                self.unknown_member(prefix, name, range, candidates)
            }
        }
    }

    pub(super) fn unknown_member(&mut self, ns: &str, name: &str, range: TextRange, candidates: Vec<&str>) -> Ty {
        let mut d = Diagnostic::new(Code::E0201, range, format!("`{ns}` has no member `{name}`"));
        let familiar = (ns == "tile").then(|| builtins::familiar_tile_member(name)).flatten();
        let missing = (ns == "tile").then(|| builtins::missing_triton_function(name)).flatten();
        if let Some(instead) = missing {
            d = d.with_note(match instead {
                "" => format!("Triton's `tl.{name}` has no `tile` counterpart yet"),
                _ => format!("Triton's `tl.{name}` has no `tile` counterpart: {instead}"),
            });
        } else if let Some(s) = familiar.filter(|s| candidates.contains(s)) {
            d = d.with_fix(
                format!("did you mean `{ns}.{s}`, Tessera's name for `{name}`?"),
                vec![Edit { range, text: s.to_string() }],
            );
        } else if let Some(s) = suggest(name, candidates.iter().copied()) {
            d = d.with_fix(format!("did you mean `{ns}.{s}`?"), vec![Edit { range, text: s.to_string() }]);
        }
        self.push(d);
        Ty::Unknown
    }

    pub(super) fn ctx_key(&mut self, name: &str, range: TextRange) -> Ty {
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
            return if crate::check::schedule::choices(&key).is_some() {
                Ty::Str(None)
            } else {
                Ty::Int(Some(Dim::sym(&key)))
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

    pub(super) fn subscript(&mut self, id: ExprId, value: ExprId, indices: &[ExprId]) -> Ty {
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
    pub(super) fn index_dims(
        &mut self,
        value: ExprId,
        dims: &[Dim],
        indices: &[ExprId],
        tys: &[Ty],
    ) -> Option<Vec<Dim>> {
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
        // Index tiles gather as in NumPy: their dims broadcast together (with the ints among
        // them), in place when these advanced indices are adjacent, else first.
        let advanced: Vec<usize> = if gather {
            (0..tys.len())
                .filter(|&k| {
                    matches!(&tys[k], Ty::Tile(_) | Ty::Int(_)) || matches!(&tys[k], Ty::Scalar(e) if e.dtype.is_int())
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut gathered: Option<Vec<Dim>> = None;
        if !advanced.is_empty() {
            let mut shape: Vec<Dim> = Vec::new();
            for &k in &advanced {
                let Ty::Tile(t) = &tys[k] else { continue };
                match crate::check::shapes::broadcast(&shape, &t.dims) {
                    Ok(b) => shape = b,
                    Err(_) => {
                        // Two row vectors: the outer gather each on its own axis is the fix.
                        let first = advanced.iter().find(|&&j| matches!(&tys[j], Ty::Tile(_))).copied();
                        let outer = match first {
                            Some(j) if shape.len() == 1 && t.dims.len() == 1 => format!(
                                " (for every pair, give each its own axis: `{}[:, None], {}[None, :]`)",
                                self.text(indices[j]),
                                self.text(indices[k])
                            ),
                            _ => String::new(),
                        };
                        self.error(
                            Code::E0302,
                            self.range(indices[k]),
                            format!(
                                "the index tiles of a gather broadcast together, but `{}` is {} and the ones before it \
                                 make {}{outer}",
                                self.text(indices[k]),
                                fmt_dims(&t.dims),
                                fmt_dims(&shape)
                            ),
                        );
                        return None;
                    }
                }
            }
            gathered = Some(shape);
        }
        let adjacent = advanced.windows(2).all(|w| w[1] == w[0] + 1);
        let mut out = Vec::new();
        if let (Some(shape), false) = (&gathered, adjacent) {
            out.extend(shape.iter().cloned());
        }
        let mut d = 0usize;
        for (k, (&idx, ty)) in indices.iter().zip(tys).enumerate() {
            if advanced.contains(&k) {
                if let (Some(shape), true) = (&gathered, adjacent && k == advanced[0]) {
                    out.extend(shape.iter().cloned());
                }
                d += 1;
                continue;
            }
            match ty {
                Ty::NoneVal => out.push(Dim::constant(1)),
                Ty::Slice => {
                    let dim = dims.get(d).cloned().unwrap_or_else(|| Dim::constant(1));
                    let extent = self.slice_extent(idx, &dim)?;
                    self.check_static_extent(idx, &extent)?;
                    out.push(extent);
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

    /// E0504 when a kernel's slice has an extent that changes with a loop variable
    /// (`X[c0:c0 // BN]`): every iteration's tile must have the same shape, which the
    /// lowering fixes when the kernel is compiled.
    fn check_static_extent(&mut self, slice: ExprId, extent: &Dim) -> Option<()> {
        if !self.in_kernel() {
            return Some(());
        }
        let symbols = extent.symbols();
        let Some(var) = self.loop_vars.iter().rev().find(|v| symbols.contains(v)) else { return Some(()) };
        let message = format!(
            "the slice `{}` has extent {extent}, which changes with the loop variable `{var}`",
            self.text(slice)
        );
        self.push(
            Diagnostic::new(Code::E0504, self.range(slice), message)
                .with_note("a tile has the same shape in every iteration: slice `start:start + SIZE` with SIZE a constant, a schedule key or a shape symbol"),
        );
        None
    }

    pub(super) fn slice_extent(&mut self, slice: ExprId, dim: &Dim) -> Option<Dim> {
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
        // `x:x + n` where `x` is an int whose value the checker does not track (a
        // `min(...)`, a loaded index): the extent is still `n`, as Triton's grouped
        // program ordering computes its tile origin.
        if let (Some(s), Some(t), None) = (start, stop, step) {
            if let Expr::Binary { op: BinOp::Add, lhs, rhs } = self.body.expr(self.body.unparen(*t)) {
                let (lhs, rhs) = (*lhs, *rhs);
                let opaque = matches!(self.out.expr_types[s.0 as usize], Ty::Int(None));
                let offset = if self.text(lhs) == self.text(*s) {
                    Some(rhs)
                } else if self.text(rhs) == self.text(*s) {
                    Some(lhs)
                } else {
                    None
                };
                if let (true, Some(n)) = (opaque, offset) {
                    if let Ty::Int(Some(n)) = &self.out.expr_types[n.0 as usize] {
                        return Some(n.clone());
                    }
                }
            }
        }
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
}
