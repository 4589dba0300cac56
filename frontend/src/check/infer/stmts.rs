//! Statements: assignments, stores, loops, annotations and returns.

use crate::check::dims::Dim;
use crate::check::dtype::DType;
use crate::check::types::*;
use crate::check::{FunctionKind, Signature};
use crate::diagnostics::{Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{op_range_text, GridScope, Infer, Mode};

impl<'a> Infer<'a> {
    // ----- statements ----------------------------------------------------------------

    pub fn stmts(&mut self, stmts: &[StmtId]) {
        for &s in stmts {
            self.stmt(s);
        }
    }

    pub(super) fn stmt(&mut self, id: StmtId) {
        let saved_stmt = self.current_stmt.replace(id);
        self.stmt_inner(id);
        self.current_stmt = saved_stmt;
    }

    pub(super) fn stmt_inner(&mut self, id: StmtId) {
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
                // A graph function's result with no declared return type (W0409 for a
                // `@stochastic_round` cast there: `Infer::undeclared_result`).
                let undeclared = self.sig.is_some_and(|s| s.ret.is_none());
                self.undeclared_result = value.filter(|_| undeclared).map(|v| self.strip_parens(v));
                let ty = match value {
                    Some(v) => self.expr(*v),
                    None => Ty::NoneVal,
                };
                self.undeclared_result = None;
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
                    self.with_item_kind(item.value);
                    if let Some(alias) = item.alias {
                        self.assign(alias, ty, None);
                    }
                }
                self.stmts(with_body);
                self.grid = saved_grid;
            }
        }
    }

    /// A `with` item is a placement: `device(...)` or `prefetch(...)` in a graph function
    /// (what Graph IR records), nothing in a kernel, whose placement is its schedule.
    fn with_item_kind(&mut self, value: ExprId) {
        let placement = match self.body.expr(value) {
            Expr::Call { func, .. } => match &self.out.expr_types[func.0 as usize] {
                Ty::Builtin(path) => matches!(path.rsplit('.').next(), Some("device" | "prefetch")),
                _ => false,
            },
            _ => false,
        };
        match self.mode {
            // A placement call in a kernel is already E0503 as a graph-level operation.
            Mode::Kernel if !placement => self.error(
                Code::E0503,
                self.range(value),
                "`with` is graph-level placement (`device`, `prefetch`); a kernel places data with its schedule \
                 and `tile.alloc_shared` / `tile.cp_async`",
            ),
            Mode::Graph if !placement => {
                let d = Diagnostic::new(
                    Code::E0802,
                    self.range(value),
                    format!(
                        "`with {}`: a `with` item in a graph function is `device(...)` or `prefetch(...)`",
                        self.text(value)
                    ),
                )
                .with_note("`with device(gpu):` places the block's ops; `with prefetch(x, into=\"smem\"):` stages x");
                self.push(d);
            }
            _ => {}
        }
    }

    pub(super) fn in_masked_region(&self) -> bool {
        self.masked_depth > 0
    }

    pub(super) fn for_loop(&mut self, target: ExprId, iter: ExprId, loop_body: &[StmtId], orelse: Option<&[StmtId]>) {
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
                if let Some(edit) = self.parallel_to_range(iter) {
                    d = d.with_fix("use a sequential `tile.range` loop", vec![edit]);
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
        let tile_loop_var = match (kind, self.body.expr(target)) {
            (LoopKind::Parallel | LoopKind::Sequential, Expr::Name(n)) => Some(n.to_string()),
            _ => None,
        };
        self.loop_vars.extend(tile_loop_var.clone());
        if kind == LoopKind::Parallel {
            let saved = (self.grid, self.grid_level_used);
            self.grid = self.grid.map(|d| d + 1);
            self.grid_level_used = false;
            // Names bound before the loop (the loop variable is bound by now, and is new).
            let bound_before: Vec<u32> = self
                .locals_by_name
                .iter()
                .filter(|(n, _)| Some(n.as_str()) != tile_loop_var.as_deref())
                .map(|(_, &l)| l)
                .collect();
            self.grid_scopes.push(GridScope { bound_before, ..Default::default() });
            self.stmts(loop_body);
            let scope = self.grid_scopes.pop().unwrap_or_default();
            if self.mode == Mode::Kernel {
                self.assigned_in_grid_loop(scope, target, iter);
            }
            self.grid = saved.0;
            self.grid_level_used = true;
        } else {
            let saved = self.grid.take();
            self.stmts(loop_body);
            self.grid = saved;
        }
        if tile_loop_var.is_some() {
            self.loop_vars.pop();
        }
        if let Some(e) = orelse {
            self.stmts(e);
        }
    }

    /// The edit that makes a `tile.parallel(...)` loop's iterable a `tile.range(...)`.
    fn parallel_to_range(&self, iter: ExprId) -> Option<Edit> {
        let Expr::Call { func, .. } = self.body.expr(iter) else { return None };
        let Expr::Attribute { name_range, .. } = self.body.expr(*func) else { return None };
        Some(Edit { range: *name_range, text: "range".into() })
    }

    /// A `tile.parallel` loop's body assigned names bound before it: each program has its
    /// own copy. One it read before assigning (`acc += ...`) would carry a value from one
    /// iteration to the next in a sequential loop, and here does not: E0503 at the
    /// assignment. The others hold their value from before the loop after it: a later
    /// read is E0503 (`Infer::grid_read`).
    fn assigned_in_grid_loop(&mut self, scope: GridScope, target: ExprId, iter: ExprId) {
        let loop_var = self.text(target);
        for (local, range) in scope.assigned {
            if !scope.read_first.contains(&local) {
                self.stale.push((local, loop_var.clone(), range));
                continue;
            }
            let name = self.out.locals[local as usize].name.clone();
            let mut d = Diagnostic::new(
                Code::E0503,
                range,
                format!(
                    "`{name}` is carried from one iteration of the `tile.parallel` loop over `{loop_var}` to the \
                     next, but each iteration is its own program: every program starts from `{name}`'s value \
                     before the loop"
                ),
            )
            .with_label(range, format!("a new `{name}` in each program of `{loop_var}`"))
            .with_note(format!(
                "accumulate over `{loop_var}` in a `tile.range` loop inside one program, or give the value a new name"
            ));
            if let Some(edit) = self.parallel_to_range(iter) {
                d = d.with_fix("iterate sequentially with `tile.range`", vec![edit]);
            }
            self.push(d);
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

    pub(super) fn assign_aug(&mut self, target: ExprId, op_range: TextRange, current: Ty, result: Ty, value: ExprId) {
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
    pub(super) fn store(&mut self, target: ExprId, dst: Ty, value: ExprId, ty: Ty) {
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
        if !crate::check::shapes::broadcasts_to(&vdims, &dims) {
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

    pub(super) fn check_annotated_value(&mut self, value: ExprId, ty: &Ty, expected: &Ty, ann: ExprId) {
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
        crate::check::annot::annotation_type(self, ann)
    }

    /// Checks the returned values against the annotation and the kernel rules.
    pub(super) fn check_returns(&mut self, sig: &Signature, ret_ann: Option<ExprId>) {
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

    pub(super) fn check_return_value(&mut self, range: TextRange, ty: &Ty, expected: &Ty, ann: ExprId) {
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
            (Some((vd, ve)), None) => {
                if !matches!(expected, Ty::Unknown) {
                    let mut d = Diagnostic::new(
                        Code::E0803,
                        range,
                        format!("returns {} but the annotation declares {}", ty.kind_name(), expected),
                    )
                    .with_label(ann_range, "declared here");
                    // A reduction to one value is a 0-d tensor (`sum(x)`), not a scalar.
                    if vd.is_empty() && matches!(expected, Ty::Scalar(_)) {
                        let annotation = format!("Tensor[{}]", ve.dtype);
                        d = d
                            .with_fix(
                                format!("declare the 0-d tensor `{annotation}`"),
                                vec![Edit { range: ann_range, text: annotation.clone() }],
                            )
                            .with_note("a reduction over every element (`sum(x)`) is a 0-d tensor, as a loss is");
                    }
                    self.push(d);
                }
            }
            (None, None) => {}
        }
    }
}
