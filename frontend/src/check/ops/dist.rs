//! Schedule constructors and `dist` (meshes, distributed tensors).

use crate::check::dims::Dim;
use crate::check::dtype::{DType, ElemType};
use crate::check::infer::Infer;
use crate::check::schedule::{self, KeyValue, ScheduleValue};
use crate::check::types::*;
use crate::diagnostics::{suggest, Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{ArgVal, Bound};

impl<'a> Infer<'a> {
    // ----- schedules -----------------------------------------------------------------

    pub(super) fn schedule_ctor(&mut self, a: &Bound) -> Ty {
        let mut s = ScheduleValue::default();
        for (param, keys, shape) in
            [("block", ["BM", "BN"], "block=(BM, BN)"), ("cluster", ["cluster_x", "cluster_y"], "cluster=(x, y)")]
        {
            let Some(pair) = a.get(param) else { continue };
            match &pair.ty {
                Ty::Tuple(items) if items.len() == 2 => {
                    let exprs = match self.body.expr(self.body.unparen(pair.expr)) {
                        Expr::Tuple(e) => e.clone(),
                        _ => vec![pair.expr, pair.expr],
                    };
                    for ((key, item), e) in keys.iter().zip(items).zip(exprs) {
                        self.schedule_int(&mut s, key, Some(&ArgVal { expr: e, ty: item.clone() }));
                    }
                }
                Ty::NoneVal | Ty::Unknown => {}
                other => {
                    self.wrong_kind(pair.expr, "Schedule", shape, &other.clone());
                }
            }
        }
        for &(param, key) in schedule::KEYWORD_KEYS {
            if let Some(v) = a.get(param) {
                if !matches!(v.ty, Ty::NoneVal) {
                    self.schedule_int(&mut s, key, Some(v));
                }
            }
        }
        Ty::Schedule(Box::new(s))
    }

    /// Validates and stores one schedule value (E0701 at the value); false when the
    /// value was refused (and reported).
    pub(crate) fn schedule_int(&mut self, s: &mut ScheduleValue, key: &str, v: Option<&ArgVal>) -> bool {
        let Some(v) = v else { return true };
        let value = match &v.ty {
            Ty::Int(Some(d)) => match d.as_const() {
                Some(i) => KeyValue::Int(i),
                None => {
                    self.error(
                        Code::E0802,
                        self.range(v.expr),
                        format!("`{key}` must be a compile-time constant, but `{}` is {d}", self.text(v.expr)),
                    );
                    return false;
                }
            },
            Ty::Str(Some(st)) => KeyValue::Str(st.clone()),
            Ty::Unknown => return false,
            other => {
                self.wrong_kind(v.expr, key, "a constant", &other.clone());
                return false;
            }
        };
        if let Some(problem) = schedule::validate(key, &value) {
            self.error(Code::E0701, self.range(v.expr), format!("invalid schedule: {problem}"));
            return false;
        }
        s.set(key, value);
        true
    }

    // ----- distribution --------------------------------------------------------------

    pub(super) fn dist_mesh(&mut self, id: ExprId, a: &Bound) -> Ty {
        let devices = arg!(a, "dist.mesh" => "devices").unwrap().clone();
        let axes = self.string_list(arg!(a, "dist.mesh" => "axes"));
        let shape_arg = arg!(a, "dist.mesh" => "shape").unwrap().clone();
        let count = match &devices.ty {
            Ty::List(items) | Ty::Tuple(items) => Some(items.len() as i64),
            Ty::Int(Some(d)) => d.as_const(),
            _ => None,
        };
        let shape: Option<Vec<i64>> = match &shape_arg.ty {
            Ty::Tuple(items) | Ty::List(items) => items.iter().map(|i| i.const_int()).collect(),
            _ => None,
        };
        let Some(shape) = shape else {
            return Ty::Unknown;
        };
        if axes.len() != shape.len() {
            self.push(
                Diagnostic::new(
                    Code::E0310,
                    self.range(shape_arg.expr),
                    format!(
                        "the mesh has {} axes ({}) but its shape has {} dims",
                        axes.len(),
                        axes.join(", "),
                        shape.len()
                    ),
                )
                .with_label(self.range(arg!(a, "dist.mesh" => "axes").unwrap().expr), "axes declared here"),
            );
            return Ty::Unknown;
        }
        let product: i64 = shape.iter().product();
        if let Some(count) = count {
            if product != count {
                self.push(
                    Diagnostic::new(
                        Code::E0310,
                        self.range(shape_arg.expr),
                        format!(
                            "mesh shape {} has {product} positions but {count} device{} given",
                            shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("×"),
                            if count == 1 { " is" } else { "s are" }
                        ),
                    )
                    .with_label(self.range(devices.expr), format!("{count} devices")),
                );
                return Ty::Unknown;
            }
        }
        let _ = id;
        Ty::Mesh(MeshValue { axes, shape })
    }

    pub(super) fn dist_tensor(&mut self, a: &Bound) -> Ty {
        let shape = arg!(a, "dist.tensor" => "shape").unwrap().clone();
        let Some(dims) = self.shape_arg(&shape) else {
            return Ty::Unknown;
        };
        let elem = match arg!(a, "dist.tensor" => "dtype") {
            Some(d) => match self.dtype_arg(d) {
                Some(e) => e,
                None => return Ty::Unknown,
            },
            None => ElemType::plain(DType::F32),
        };
        let layout = arg!(a, "dist.tensor" => "layout").unwrap().clone();
        let mesh = arg!(a, "dist.tensor" => "mesh").unwrap().clone();
        if let (Ty::ShardSpec { partition, mesh_axes }, Ty::Mesh(m)) = (&layout.ty, &mesh.ty) {
            for (i, axis) in mesh_axes.iter().enumerate() {
                let Some(pos) = m.axes.iter().position(|x| x == axis) else {
                    let range = self.mesh_axis_range(layout.expr, axis).unwrap_or_else(|| self.range(layout.expr));
                    let mut d = Diagnostic::new(
                        Code::E0311,
                        range,
                        format!(
                            "unknown mesh axis \"{axis}\": the mesh has axes {}",
                            m.axes.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ")
                        ),
                    )
                    .with_label(self.range(mesh.expr), "this mesh");
                    if let Some(s) = suggest(axis, m.axes.iter().map(String::as_str)) {
                        d = d.with_fix(
                            format!("did you mean \"{s}\"?"),
                            vec![Edit {
                                range: TextRange::new(range.start + 1, range.end.saturating_sub(1)),
                                text: s.to_string(),
                            }],
                        );
                    }
                    self.push(d);
                    return Ty::Unknown;
                };
                let size = m.shape[pos];
                let dim_index = match partition.get(i).map(String::as_str) {
                    Some("row") => Some(0),
                    Some("col") => dims.len().checked_sub(1),
                    Some(other) => other.parse::<usize>().ok(),
                    None => None,
                };
                if let Some(di) = dim_index {
                    if let Some(v) = dims.get(di).and_then(Dim::as_const) {
                        if v % size != 0 {
                            self.error(
                                Code::E0312,
                                self.range(layout.expr),
                                format!("dim {di} of size {v} is not divisible by mesh axis \"{axis}\" of size {size}"),
                            );
                            return Ty::Unknown;
                        }
                    }
                }
            }
        }
        Ty::DistTensor(TensorType::new(dims, elem))
    }

    /// `dist.all_reduce(x, axis)`, `dist.all_gather(x, axis)`, `dist.reduce_scatter(x,
    /// axis, dim=)` and `dist.all_to_all(x, axis, split_dim=, concat_dim=)`: x's value,
    /// laid out differently (docs/language.md, "Explicit collectives"). Here: the
    /// arguments, the axis against the mesh of the function's `@shard` parameters, and the
    /// dims. Whether x is partial or split over the axis as the collective needs is known
    /// only after sharding propagation, which reports it (E0316, `passes::dist`).
    pub(super) fn dist_collective(&mut self, path: &'static str, a: &Bound) -> Ty {
        let x = arg!(a, "dist.all_reduce" | "dist.all_gather" | "dist.reduce_scatter" | "dist.all_to_all" => "x")
            .unwrap()
            .clone();
        let axis = arg!(a, "dist.all_reduce" | "dist.all_gather" | "dist.reduce_scatter" | "dist.all_to_all" => "axis")
            .unwrap()
            .clone();
        let Some(t) = self.tensor_arg(&x, path) else { return Ty::Unknown };
        let name = match &axis.ty {
            Ty::Str(Some(s)) => s.clone(),
            Ty::Unknown => return Ty::Unknown,
            other => return self.wrong_kind(axis.expr, path, "a mesh axis name (\"tp\")", &other.clone()),
        };
        // The function's mesh, where a parameter's `@shard` gives it (a function that
        // only reads module-level `dist.tensor`s has its axes checked by propagation).
        let mesh = self.sig.and_then(|s| s.params.iter().find_map(|p| p.sharding.as_ref())).map(|s| s.mesh.clone());
        let mut size = None;
        if let Some(m) = &mesh {
            let Some(i) = m.axes.iter().position(|a| *a == name) else {
                let mut d = Diagnostic::new(
                    Code::E0311,
                    self.range(axis.expr),
                    format!("the function's mesh has no axis `{name}` (its axes: {})", m.axes.join(", ")),
                );
                if let Some(s) = suggest(&name, m.axes.iter().map(String::as_str)) {
                    d = d.with_did_you_mean(self.range(axis.expr), &format!("\"{s}\""));
                }
                self.push(d);
                return Ty::Unknown;
            };
            size = Some(m.shape[i]);
        }
        let rank = t.rank();
        let split_dim = match path {
            "dist.reduce_scatter" => {
                let Some(d) = self.axis_arg(arg!(a, "dist.reduce_scatter" => "dim"), rank, 0) else {
                    return Ty::Unknown;
                };
                Some((d, arg!(a, "dist.reduce_scatter" => "dim").unwrap().expr))
            }
            "dist.all_to_all" => {
                let split = self.axis_arg(arg!(a, "dist.all_to_all" => "split_dim"), rank, 0);
                let concat = self.axis_arg(arg!(a, "dist.all_to_all" => "concat_dim"), rank, 0);
                let (Some(split), Some(concat)) = (split, concat) else { return Ty::Unknown };
                let split_expr = arg!(a, "dist.all_to_all" => "split_dim").unwrap().expr;
                if split == concat {
                    let concat_expr = arg!(a, "dist.all_to_all" => "concat_dim").unwrap().expr;
                    self.push(
                        Diagnostic::new(
                            Code::E0802,
                            self.range(split_expr),
                            format!("`dist.all_to_all` moves a split from one dim to another: split_dim and concat_dim are both {split}"),
                        )
                        .with_label(self.range(concat_expr), "concat_dim"),
                    );
                    return Ty::Unknown;
                }
                Some((split, split_expr))
            }
            _ => None,
        };
        // The dim that becomes split must divide over the axis, where both are static.
        if let (Some((d, expr)), Some(p)) = (split_dim, size) {
            if let Some(n) = t.dims[d].as_const() {
                if p > 0 && n % p != 0 {
                    self.error(
                        Code::E0312,
                        self.range(expr),
                        format!("dim {d} has {n} elements, which do not split evenly over the {p} devices of `{name}`"),
                    );
                    return Ty::Unknown;
                }
            }
        }
        Ty::Tensor(t)
    }

    /// The range of the string literal `"axis"` inside a ShardSpec(... mesh_axes=(...)).
    pub(super) fn mesh_axis_range(&self, layout: ExprId, axis: &str) -> Option<TextRange> {
        let Expr::Call { args, .. } = self.body.expr(self.body.unparen(layout)) else {
            return None;
        };
        let arg =
            args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == "mesh_axes")).or_else(|| args.get(1))?;
        let items = match self.body.expr(self.body.unparen(arg.value)) {
            Expr::Tuple(items) | Expr::List(items) => items.clone(),
            _ => vec![arg.value],
        };
        items.into_iter().find(|&i| matches!(self.body.expr(i), Expr::Str(s) if s == axis)).map(|i| self.range(i))
    }
}
