//! The tile intrinsics of kernels (`tile.load`, `tile.store`, `tile.alloc`, ...).

use crate::check::dims::Dim;
use crate::check::dtype::{DType, ElemType};
use crate::check::infer::Infer;
use crate::check::shapes;
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic, Edit};
use crate::syntax::ast::*;

use super::{ArgVal, Bound};

impl<'a> Infer<'a> {
    // ----- tile intrinsics -----------------------------------------------------------

    pub(super) fn tile_intrinsic(&mut self, id: ExprId, _func: ExprId, name: &str, a: &Bound) -> Ty {
        match name {
            "parallel" | "range" | "range_n" => {
                // Loop bounds are ints (a float bound would pass here and stop lowering).
                let what = format!("tile.{name}");
                for p in ["start", "stop", "step", "extent"] {
                    if let Some(v) = a.get(p) {
                        if !matches!(v.ty, Ty::Int(_) | Ty::Unknown | Ty::NoneVal) {
                            self.wrong_kind(v.expr, &what, "an int", &v.ty.clone());
                        }
                    }
                }
                // A step of 0 never ends, a negative one is not a tile loop.
                if let Some(step) = a.get("step") {
                    if let Ty::Int(Some(d)) = &step.ty {
                        if let Some(v) = d.as_const().filter(|v| *v <= 0) {
                            let message = format!("the step of `{what}` must be positive, but it is {v}");
                            self.error(Code::E0802, self.range(step.expr), message);
                        }
                    }
                }
                Ty::Range(if name == "parallel" { LoopKind::Parallel } else { LoopKind::Sequential })
            }
            "program_id" | "num_programs" => {
                // The grid has three axes, and the lowering reads the axis as written.
                let given = if name == "program_id" {
                    arg!(a, "tile.program_id" => "axis")
                } else {
                    arg!(a, "tile.num_programs" => "axis")
                };
                let axis = match given.map(|g| (g.expr, self.body.expr(g.expr).clone())) {
                    None => Some(0),
                    Some((_, Expr::Int(v))) if (0..=2).contains(&v) => Some(v),
                    Some((e, _)) => {
                        let message = format!(
                            "the grid axis of `tile.{name}` must be the literal 0, 1 or 2, but it is `{}`",
                            self.text(e)
                        );
                        self.error(Code::E0802, self.range(e), message);
                        None
                    }
                };
                match (name, axis) {
                    ("program_id", Some(axis)) => Ty::Int(Some(Dim::sym(&format!("pid{axis}")))),
                    _ => Ty::Int(None),
                }
            }
            "context" => Ty::Context,
            "linear_id" => {
                // BLOCK is the schedule's `BLOCK` key when it has one, else 1024; it is a
                // symbol here and fixed when the kernel is specialized.
                if self.sig.and_then(|s| s.schedule.as_ref()).is_some_and(|s| s.has_key("BLOCK")) {
                    self.ctx_reads_insert("BLOCK");
                }
                Ty::Tile(TileType { dims: vec![Dim::sym("BLOCK")], elem: ElemType::plain(DType::I32) })
            }
            "load" => {
                let src = arg!(a, "tile.load" => "src").unwrap().clone();
                if let (Some(rows), Some(cols)) = (arg!(a, "tile.load" => "rows"), arg!(a, "tile.load" => "cols")) {
                    let (Ty::Int(Some(r)), Ty::Int(Some(c))) = (&rows.ty, &cols.ty) else {
                        return Ty::Unknown;
                    };
                    let elem = match self.operand(src.ty.clone()) {
                        Ty::Tile(t) => t.elem,
                        Ty::Tensor(t) => t.elem,
                        _ => return Ty::Unknown,
                    };
                    return Ty::Tile(TileType { dims: vec![r.clone(), c.clone()], elem });
                }
                match &src.ty {
                    Ty::View(t) => Ty::Tile(TileType { dims: t.dims.clone(), elem: t.elem.clone() }),
                    Ty::Shared(s) => Ty::Tile(TileType { dims: s.dims.clone(), elem: ElemType::plain(s.dtype) }),
                    Ty::Tile(t) => Ty::Tile(t.clone()),
                    Ty::Tensor(t) => {
                        // A whole tensor: fine when its dims are tile dims.
                        Ty::Tile(TileType { dims: t.dims.clone(), elem: t.elem.clone() })
                    }
                    other => {
                        self.wrong_kind(src.expr, "tile.load", "a tensor slice or a shared buffer", &other.clone())
                    }
                }
            }
            "store" => {
                let dst = arg!(a, "tile.store" => "dst").unwrap().clone();
                let value = arg!(a, "tile.store" => "value").unwrap().clone();
                self.store_call("tile.store", dst, value);
                Ty::NoneVal
            }
            "atomic_add" => {
                let dst = arg!(a, "tile.atomic_add" => "dst").unwrap().clone();
                let value = arg!(a, "tile.atomic_add" => "value").unwrap().clone();
                if let Ty::View(t) = &dst.ty {
                    // What `red.global.add` and LLVM's `atomicrmw` take on every target.
                    let dtype = t.elem.dtype;
                    if !matches!(dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64) {
                        self.push(
                            Diagnostic::new(
                                Code::E0400,
                                self.range(dst.expr),
                                format!("tile.atomic_add adds into f32, f64, i32 or i64 tensors, but this one holds {dtype}"),
                            )
                            .with_note("accumulate in an f32 output (or a scratch tensor) and convert it afterwards"),
                        );
                        return Ty::NoneVal;
                    }
                }
                self.store_call("tile.atomic_add", dst, value);
                Ty::NoneVal
            }
            "alloc_shared" => {
                let shape = arg!(a, "tile.alloc_shared" => "shape").unwrap().clone();
                let Some(dims) = self.shape_arg(&shape) else {
                    return Ty::Unknown;
                };
                let d = arg!(a, "tile.alloc_shared" => "dtype").unwrap().clone();
                let Some(elem) = self.dtype_arg(&d) else {
                    return Ty::Unknown;
                };
                let swizzle = match arg!(a, "tile.alloc_shared" => "swizzle").map(|s| (s.expr, s.ty.clone())) {
                    None => Swizzle::None,
                    Some((_, Ty::Str(Some(s)))) if s == "none" => Swizzle::None,
                    Some((_, Ty::Str(Some(s)))) if s == "xor" => Swizzle::Xor,
                    Some((e, Ty::Str(Some(s)))) => {
                        self.push(
                            Diagnostic::new(
                                Code::E0802,
                                self.range(e),
                                format!("swizzle=\"{s}\": expected \"xor\" or \"none\""),
                            )
                            .with_fix(
                                "use the XOR swizzle",
                                vec![Edit { range: self.range(e), text: "\"xor\"".into() }],
                            ),
                        );
                        return Ty::Unknown;
                    }
                    Some((e, other)) => {
                        return self.wrong_kind(e, "tile.alloc_shared", "swizzle=\"xor\" or \"none\"", &other)
                    }
                };
                let pad = match arg!(a, "tile.alloc_shared" => "pad").map(|p| (p.expr, p.ty.clone())) {
                    None => 0,
                    Some((e, Ty::Int(Some(d)))) => match d.as_const() {
                        Some(p) if p >= 0 => p,
                        _ => {
                            self.error(Code::E0802, self.range(e), "pad must be a non-negative constant");
                            return Ty::Unknown;
                        }
                    },
                    Some((e, other)) => return self.wrong_kind(e, "tile.alloc_shared", "an int pad", &other),
                };
                Ty::Shared(SharedType { dims, dtype: elem.dtype, swizzle, pad })
            }
            "cp_async" => {
                let dst = arg!(a, "tile.cp_async" => "dst").unwrap().clone();
                let src = arg!(a, "tile.cp_async" => "src").unwrap().clone();
                let shared = match &dst.ty {
                    Ty::Shared(s) => s.clone(),
                    Ty::Unknown => return Ty::NoneVal,
                    other => {
                        self.wrong_kind(
                            dst.expr,
                            "tile.cp_async",
                            "a shared buffer (from tile.alloc_shared) as destination",
                            &other.clone(),
                        );
                        return Ty::NoneVal;
                    }
                };
                let view = match &src.ty {
                    Ty::View(t) => t.clone(),
                    Ty::Unknown => return Ty::NoneVal,
                    other => {
                        self.wrong_kind(
                            src.expr,
                            "tile.cp_async",
                            "a slice of a global tensor as source",
                            &other.clone(),
                        );
                        return Ty::NoneVal;
                    }
                };
                if view.dims != shared.dims {
                    self.push(
                        Diagnostic::new(
                            Code::E0301,
                            self.range(src.expr),
                            format!(
                                "tile.cp_async: the source `{}` is {} but the shared buffer `{}` is {}",
                                self.text(src.expr),
                                fmt_dims(&view.dims),
                                self.text(dst.expr),
                                fmt_dims(&shared.dims)
                            ),
                        )
                        .with_label(self.range(dst.expr), fmt_dims(&shared.dims)),
                    );
                } else if view.elem.dtype != shared.dtype {
                    self.error(
                        Code::E0400,
                        self.range(src.expr),
                        format!(
                            "tile.cp_async copies bytes: the source is {} but the shared buffer holds {}",
                            view.elem.dtype, shared.dtype
                        ),
                    );
                }
                Ty::NoneVal
            }
            "barrier" => Ty::NoneVal,
            "dot" => {
                let x = arg!(a, "tile.dot" => "a").unwrap().clone();
                let y = arg!(a, "tile.dot" => "b").unwrap().clone();
                // Triton's `tl.dot(a, b, acc)`: the accumulating form of `tile.mma`.
                let acc = arg!(a, "tile.dot" => "acc").filter(|v| !matches!(v.ty, Ty::NoneVal)).cloned();
                self.tile_dot(id, x.expr, x.ty, y.expr, y.ty, acc.as_ref())
            }
            "mma" => {
                let x = arg!(a, "tile.mma" => "a").unwrap().clone();
                let y = arg!(a, "tile.mma" => "b").unwrap().clone();
                let acc = arg!(a, "tile.mma" => "accumulator").cloned();
                let default_acc = ArgVal { expr: id, ty: Ty::DType(ElemType::plain(DType::F32)) };
                self.tile_dot(id, x.expr, x.ty, y.expr, y.ty, Some(acc.as_ref().unwrap_or(&default_acc)))
            }
            "transpose" => match self.operand(arg!(a, "tile.transpose" => ty "t")) {
                Ty::Tile(t) => {
                    let mut dims = t.dims.clone();
                    let n = dims.len();
                    if n >= 2 {
                        dims.swap(n - 1, n - 2);
                    }
                    Ty::Tile(TileType { dims, elem: t.elem })
                }
                other => {
                    self.wrong_kind(arg!(a, "tile.transpose" => "t").unwrap().expr, "tile.transpose", "a tile", &other)
                }
            },
            "broadcast" => {
                let t = arg!(a, "tile.broadcast" => "t").unwrap().clone();
                let s = arg!(a, "tile.broadcast" => "shape").unwrap().clone();
                let Some(dims) = self.shape_arg(&s) else {
                    return Ty::Unknown;
                };
                match self.operand(t.ty.clone()) {
                    Ty::Tile(tt) => {
                        if !shapes::broadcasts_to(&tt.dims, &dims) {
                            self.error(
                                Code::E0302,
                                self.range(id),
                                format!(
                                    "tile.broadcast: {} does not broadcast to {}",
                                    fmt_dims(&tt.dims),
                                    fmt_dims(&dims)
                                ),
                            );
                            return Ty::Unknown;
                        }
                        Ty::Tile(TileType { dims, elem: tt.elem })
                    }
                    other => self.wrong_kind(t.expr, "tile.broadcast", "a tile", &other),
                }
            }
            "cast" => {
                let t = arg!(a, "tile.cast" => "t").unwrap().clone();
                let d = arg!(a, "tile.cast" => "dtype").unwrap().clone();
                let Some(elem) = self.dtype_arg(&d) else {
                    return Ty::Unknown;
                };
                if let Some(u) = arg!(a, "tile.cast" => "uniform").cloned() {
                    // The draws of a stochastic conversion: an f32 tile of `t`'s shape.
                    let same = match (self.operand(u.ty.clone()), self.operand(t.ty.clone())) {
                        (Ty::Tile(ut), Ty::Tile(tt)) => ut.dims == tt.dims,
                        (Ty::Unknown, _) | (_, Ty::Unknown) => true,
                        _ => false,
                    };
                    if !same {
                        let ty = u.ty.clone();
                        return self.wrong_kind(u.expr, "tile.cast", "an f32 tile of `t`'s shape", &ty);
                    }
                    if !elem.policies.contains(&crate::check::dtype::Policy::StochasticRound) {
                        self.push(
                            Diagnostic::new(
                                Code::W0409,
                                self.range(u.expr),
                                "`uniform=` has no effect: this conversion rounds to nearest",
                            )
                            .with_note(
                                "the draws are for a `@stochastic_round` conversion (`\"bf16 @stochastic_round\"`)",
                            ),
                        );
                    }
                }
                match self.operand(t.ty.clone()) {
                    Ty::Tile(tt) => Ty::Tile(TileType { dims: tt.dims, elem }),
                    Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_) => Ty::Scalar(elem),
                    other => self.wrong_kind(t.expr, "tile.cast", "a tile", &other),
                }
            }
            "row_max" | "row_sum" | "sum" | "max" | "min" => {
                let t = arg!(a, "tile.row_max" | "tile.row_sum" | "tile.sum" | "tile.max" | "tile.min" => "t")
                    .unwrap()
                    .clone();
                let tt = match self.operand(t.ty.clone()) {
                    Ty::Tile(tt) => tt,
                    other => return self.wrong_kind(t.expr, &format!("tile.{name}"), "a tile", &other),
                };
                if tt.dims.is_empty() {
                    self.error(Code::E0300, self.range(t.expr), format!("tile.{name} needs a tile of rank ≥ 1"));
                    return Ty::Unknown;
                }
                // A count is an integer sum: the bools are cast first (a max is an "any", a
                // min an "all", and stay bools).
                if tt.elem.dtype == DType::Bool && name.ends_with("sum") {
                    let text = self.text(t.expr).to_string();
                    self.push(
                        Diagnostic::new(
                            Code::E0400,
                            self.range(t.expr),
                            format!("tile.{name} of booleans: cast them to an integer to count them"),
                        )
                        .with_fix(
                            "count them as i32",
                            vec![Edit { range: self.range(t.expr), text: format!("tile.cast({text}, i32)") }],
                        ),
                    );
                    return Ty::Unknown;
                }
                let axis = if name.starts_with("row_") {
                    tt.dims.len() - 1
                } else {
                    match self.axis_arg(arg!(a, "tile.sum" | "tile.max" | "tile.min" => "axis"), tt.dims.len(), -1) {
                        Some(ax) => ax,
                        None => return Ty::Unknown,
                    }
                };
                let mut dims = tt.dims.clone();
                dims.remove(axis);
                Ty::Tile(TileType { dims, elem: tt.elem })
            }
            "causal_mask" | "mask_causal" => {
                let s = arg!(a, "tile.causal_mask" | "tile.mask_causal" => "s").unwrap().clone();
                match self.operand(s.ty.clone()) {
                    // Masked scores are -inf, which only floats hold.
                    Ty::Tile(t) if !t.elem.dtype.is_float() => {
                        self.error(
                            Code::E0400,
                            self.range(s.expr),
                            format!(
                                "tile.causal_mask sets the masked scores to -inf, which {} tiles cannot hold: mask \
                                 float scores (or use `tile.where` with a value of its own)",
                                t.elem.dtype
                            ),
                        );
                        Ty::Unknown
                    }
                    Ty::Tile(t) if t.dims.len() == 2 => Ty::Tile(t),
                    Ty::Tile(t) => {
                        self.error(
                            Code::E0300,
                            self.range(s.expr),
                            format!("tile.causal_mask needs a 2-D score tile, got {}", fmt_dims(&t.dims)),
                        );
                        Ty::Unknown
                    }
                    other => self.wrong_kind(s.expr, "tile.causal_mask", "a tile", &other),
                }
            }
            "softmax_online" => {
                let s = arg!(a, "tile.softmax_online" => "s").unwrap().clone();
                match self.operand(s.ty.clone()) {
                    Ty::Tile(t) if t.dims.len() == 2 => {
                        let row = TileType { dims: vec![t.dims[0].clone()], elem: ElemType::plain(DType::F32) };
                        Ty::Tuple(vec![Ty::Tile(t.clone()), Ty::Tile(row.clone()), Ty::Tile(row)])
                    }
                    other => self.wrong_kind(s.expr, "tile.softmax_online", "a 2-D tile", &other),
                }
            }
            "softmax_accumulate" => {
                let acc = self.operand(arg!(a, "tile.softmax_accumulate" => ty "acc"));
                let m = self.operand(arg!(a, "tile.softmax_accumulate" => ty "m"));
                let l = self.operand(arg!(a, "tile.softmax_accumulate" => ty "l"));
                let p = arg!(a, "tile.softmax_accumulate" => "p").unwrap().clone();
                let v = arg!(a, "tile.softmax_accumulate" => "v").unwrap().clone();
                let pv = self.tile_dot(id, p.expr, p.ty.clone(), v.expr, v.ty.clone(), None);
                if let (Ty::Tile(acc_t), Ty::Tile(pv_t)) = (&acc, &pv) {
                    if acc_t.dims != pv_t.dims {
                        self.error(
                            Code::E0301,
                            self.range(arg!(a, "tile.softmax_accumulate" => "acc").unwrap().expr),
                            format!(
                                "softmax_accumulate: acc is {} but p @ v is {}",
                                fmt_dims(&acc_t.dims),
                                fmt_dims(&pv_t.dims)
                            ),
                        );
                        return Ty::Unknown;
                    }
                }
                Ty::Tuple(vec![acc, m, l])
            }
            "row_index" => {
                Ty::Tile(TileType { dims: vec![Dim::sym("BM"), Dim::constant(1)], elem: ElemType::plain(DType::I32) })
            }
            "col_index" => {
                Ty::Tile(TileType { dims: vec![Dim::constant(1), Dim::sym("BN")], elem: ElemType::plain(DType::I32) })
            }
            _ => Ty::Unknown,
        }
    }

    pub(super) fn store_call(&mut self, what: &str, dst: ArgVal, value: ArgVal) {
        let body = self.body;
        let _ = body;
        // Reuse the subscript-store rules through a synthetic check.
        match (&dst.ty, self.operand(value.ty.clone())) {
            (Ty::View(t), Ty::Tile(v)) => {
                if !shapes::broadcasts_to(&v.dims, &t.dims) {
                    self.error(
                        Code::E0301,
                        self.range(value.expr),
                        format!(
                            "{what}: the value is {} but the destination is {}",
                            fmt_dims(&v.dims),
                            fmt_dims(&t.dims)
                        ),
                    );
                } else if v.elem.dtype != t.elem.dtype {
                    self.error(
                        Code::E0400,
                        self.range(value.expr),
                        format!("{what}: the value is {} but the destination holds {}", v.elem.dtype, t.elem.dtype),
                    );
                }
            }
            (Ty::View(_) | Ty::Unknown, _) => {}
            (other, _) => {
                self.wrong_kind(dst.expr, what, "a slice of a global tensor", &other.clone());
            }
        }
    }
}
