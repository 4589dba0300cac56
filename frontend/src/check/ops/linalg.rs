//! Matrix products (`matmul`, `tile.dot`), reductions and attention.

use crate::check::dims::Dim;
use crate::check::dtype::{DType, ElemType};
use crate::check::infer::Infer;
use crate::check::shapes;
use crate::check::types::*;
use crate::check::MmaSite;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;

use super::{ArgVal, Bound};

impl<'a> Infer<'a> {
    // ----- matmul --------------------------------------------------------------------

    pub(crate) fn matmul(&mut self, id: ExprId, lhs: ExprId, l: Ty, rhs: ExprId, r: Ty) -> Ty {
        let (Some(a), Some(b)) = (
            self.tensor_arg(&ArgVal { expr: lhs, ty: l }, "matmul"),
            self.tensor_arg(&ArgVal { expr: rhs, ty: r }, "matmul"),
        ) else {
            return Ty::Unknown;
        };
        for (t, e) in [(&a, lhs), (&b, rhs)] {
            if t.rank() < 2 {
                self.push(
                    Diagnostic::new(
                        Code::E0300,
                        self.range(e),
                        format!(
                            "matmul needs operands of rank ≥ 2, but `{}` is {} (rank {})",
                            self.text(e),
                            fmt_dims(&t.dims),
                            t.rank()
                        ),
                    )
                    .with_note("add a dim with `x[None, :]`, or use `x * w` for elementwise products"),
                );
                return Ty::Unknown;
            }
        }
        let (m, k1) = (&a.dims[a.rank() - 2], &a.dims[a.rank() - 1]);
        let (k2, n) = (&b.dims[b.rank() - 2], &b.dims[b.rank() - 1]);
        if k1 != k2 {
            self.push(
                self.inner_dims_differ("matmul", id, (lhs, &a.dims), (rhs, &b.dims))
                    .with_label(self.range(lhs), format!("{} (inner dim {k1})", fmt_dims(&a.dims)))
                    .with_label(self.range(rhs), format!("{} (inner dim {k2})", fmt_dims(&b.dims))),
            );
            return Ty::Unknown;
        }
        let batch = match shapes::broadcast(&a.dims[..a.rank() - 2], &b.dims[..b.rank() - 2]) {
            Ok(bd) => bd,
            Err(_) => {
                self.error(
                    Code::E0302,
                    self.range(id),
                    format!("matmul: batch dims of {} and {} do not broadcast", fmt_dims(&a.dims), fmt_dims(&b.dims)),
                );
                return Ty::Unknown;
            }
        };
        let Some(elem) = self.merge_elems(id, lhs, &a.elem, rhs, &b.elem) else {
            return Ty::Unknown;
        };
        if elem.dtype.is_low_precision() && elem.accum().is_none() {
            self.push(
                Diagnostic::new(
                    Code::W0404,
                    self.range(id),
                    format!(
                        "{} matmul without an accumulation policy: partial sums may overflow or lose precision",
                        elem.dtype
                    ),
                )
                .with_note(format!(
                    "declare the accumulation type on an operand, e.g. `{} @accum({})`",
                    elem.dtype,
                    if elem.dtype.is_int() { "i32" } else { "f32" }
                )),
            );
        }
        let mut dims = batch;
        dims.push(m.clone());
        dims.push(n.clone());
        Ty::Tensor(TensorType::new(dims, elem))
    }

    /// `tile.dot` / `tile.mma` / `@` on tiles.
    pub(crate) fn tile_dot(&mut self, id: ExprId, lhs: ExprId, l: Ty, rhs: ExprId, r: Ty, acc: Option<&ArgVal>) -> Ty {
        let tile_of = |this: &mut Self, e: ExprId, t: Ty| -> Option<TileType> {
            match this.operand(t) {
                Ty::Tile(t) => Some(t),
                Ty::Unknown => None,
                other => {
                    this.wrong_kind(e, "tile.dot", "a tile or a shared buffer", &other);
                    None
                }
            }
        };
        let (Some(a), Some(b)) = (tile_of(self, lhs, l), tile_of(self, rhs, r)) else {
            return Ty::Unknown;
        };
        for (t, e) in [(&a, lhs), (&b, rhs)] {
            if t.dims.len() != 2 {
                self.error(
                    Code::E0300,
                    self.range(e),
                    format!("tile.dot needs 2-D tiles, but `{}` is {}", self.text(e), fmt_dims(&t.dims)),
                );
                return Ty::Unknown;
            }
        }
        let (m, k1, k2, n) = (a.dims[0].clone(), a.dims[1].clone(), b.dims[0].clone(), b.dims[1].clone());
        if k1 != k2 {
            self.push(
                self.inner_dims_differ("tile.dot", id, (lhs, &a.dims), (rhs, &b.dims))
                    .with_label(self.range(lhs), fmt_dims(&a.dims))
                    .with_label(self.range(rhs), fmt_dims(&b.dims)),
            );
            return Ty::Unknown;
        }
        if a.elem.dtype != b.elem.dtype {
            self.merge_elems(id, lhs, &a.elem, rhs, &b.elem);
            return Ty::Unknown;
        }
        // Conflicting `@accum`s are E0403 (the merge reports them).
        let Some(merged) = self.merge_elems(id, lhs, &a.elem, rhs, &b.elem) else {
            return Ty::Unknown;
        };
        let dtype = a.elem.dtype;
        if let Some(multiple) = dtype.mma_multiple() {
            let dims = [("M", &m), ("N", &n), ("K", &k1)];
            if dims.iter().all(|(_, d)| d.is_const()) {
                let bad: Vec<String> = dims
                    .iter()
                    .filter(|(_, d)| d.as_const().unwrap() % multiple as i64 != 0)
                    .map(|(n, d)| format!("{n} = {d}"))
                    .collect();
                if !bad.is_empty() {
                    self.push(
                        Diagnostic::new(
                            Code::E0502,
                            self.range(id),
                            format!(
                                "tensor-core shape not supported: {} (M, N and K must be multiples of {multiple} for {dtype})",
                                bad.join(", ")
                            ),
                        )
                        .with_label(self.range(lhs), fmt_dims(&a.dims))
                        .with_label(self.range(rhs), fmt_dims(&b.dims)),
                    );
                    return Ty::Unknown;
                }
            } else {
                self.out.mma_sites.push(MmaSite {
                    range: self.range(id),
                    m: m.clone(),
                    n: n.clone(),
                    k: k1.clone(),
                    dtype,
                });
            }
        }
        // `@accum(T)` on the operands: the products are summed in T and the result is a
        // T tile; without a policy, f32 (i32 for integer operands, f64 for f64 ones: an
        // f64 GEMM summed in f32 would lose what f64 is for).
        let out_dtype = merged.accum().unwrap_or(match dtype {
            d if d.is_int() => DType::I32,
            DType::F64 => DType::F64,
            _ => DType::F32,
        });
        let result = TileType { dims: vec![m, n], elem: ElemType::plain(out_dtype) };
        if let Some(acc) = acc {
            match self.operand(acc.ty.clone()) {
                Ty::DType(e) => return Ty::Tile(TileType { dims: result.dims, elem: ElemType::plain(e.dtype) }),
                Ty::Tile(t) => {
                    if t.dims != result.dims {
                        self.push(Diagnostic::new(
                            Code::E0301,
                            self.range(acc.expr),
                            format!(
                                "tile.mma: the accumulator is {} but a @ b is {}",
                                fmt_dims(&t.dims),
                                fmt_dims(&result.dims)
                            ),
                        ));
                        return Ty::Unknown;
                    }
                    return Ty::Tile(t);
                }
                Ty::Unknown => return Ty::Unknown,
                other => return self.wrong_kind(acc.expr, "tile.mma", "a dtype or an accumulator tile", &other),
            }
        }
        Ty::Tile(result)
    }

    pub(super) fn reduce(&mut self, _id: ExprId, a: &Bound) -> Ty {
        let x = arg!(a, "sum" | "mean" | "max" | "min" => "x").unwrap().clone();
        let Some(t) = self.tensor_arg(&x, "reduction") else {
            return Ty::Unknown;
        };
        let keepdim = matches!(arg!(a, "sum" | "mean" | "max" | "min" => ty "keepdim"), Ty::Bool(Some(true)));
        let axes: Vec<usize> = match arg!(a, "sum" | "mean" | "max" | "min" => "axis").map(|v| v.ty.clone()) {
            None | Some(Ty::NoneVal) => (0..t.rank()).collect(),
            Some(Ty::Int(Some(d))) => match d.as_const() {
                Some(ax) => match self.axis_arg(arg!(a, "sum" | "mean" | "max" | "min" => "axis"), t.rank(), ax) {
                    Some(ax) => vec![ax],
                    None => return Ty::Unknown,
                },
                None => return Ty::Unknown,
            },
            Some(Ty::Tuple(items)) => {
                let mut out = Vec::new();
                for i in items {
                    let Some(ax) = i.const_int() else {
                        return Ty::Unknown;
                    };
                    match shapes::normalize_axis(ax, t.rank()) {
                        // NumPy refuses an axis named twice (`axis=(1, -1)` of a rank-2 tensor).
                        Some(n) if out.contains(&n) => {
                            self.error(
                                Code::E0300,
                                self.range(arg!(a, "sum" | "mean" | "max" | "min" => "axis").unwrap().expr),
                                format!("axis {ax} names dim {n} a second time (each axis may be reduced once)"),
                            );
                            return Ty::Unknown;
                        }
                        Some(n) => out.push(n),
                        None => {
                            self.error(
                                Code::E0300,
                                self.range(arg!(a, "sum" | "mean" | "max" | "min" => "axis").unwrap().expr),
                                format!("axis {ax} is out of range for rank {}", t.rank()),
                            );
                            return Ty::Unknown;
                        }
                    }
                }
                out
            }
            Some(other) => {
                return self.wrong_kind(
                    arg!(a, "sum" | "mean" | "max" | "min" => "axis").unwrap().expr,
                    "axis",
                    "an int or a tuple of ints",
                    &other,
                )
            }
        };
        let dims: Vec<Dim> = t
            .dims
            .iter()
            .enumerate()
            .filter_map(|(i, d)| if axes.contains(&i) { keepdim.then(|| Dim::constant(1)) } else { Some(d.clone()) })
            .collect();
        Ty::Tensor(TensorType::new(dims, t.elem))
    }

    /// E0301 for a matrix product whose inner dims (the last of `a`, the second last of
    /// `b`) differ; the caller labels the operands.
    fn inner_dims_differ(
        &self,
        op: &str,
        id: ExprId,
        (lhs, a): (ExprId, &[Dim]),
        (rhs, b): (ExprId, &[Dim]),
    ) -> Diagnostic {
        let (k1, k2) = (&a[a.len() - 1], &b[b.len() - 2]);
        Diagnostic::new(
            Code::E0301,
            self.range(id),
            format!(
                "{op}: inner dimensions differ: `{}` is {} but `{}` is {} ({k1} ≠ {k2})",
                self.text(lhs),
                fmt_dims(a),
                self.text(rhs),
                fmt_dims(b)
            ),
        )
    }

    pub(super) fn flash_attention(&mut self, a: &Bound) -> Ty {
        let q = arg!(a, "flash_attention" => "q").unwrap().clone();
        let k = arg!(a, "flash_attention" => "k").unwrap().clone();
        self.probability(arg!(a, "flash_attention" => "dropout"));
        let Some(qt) = self.tensor_of_rank(&q, "flash_attention", 4, "flash_attention: q must be [B, H, Sq, Dh]")
        else {
            return Ty::Unknown;
        };
        let kv_cache = matches!(&k.ty, Ty::Tensor(t) if t.kind == TensorKind::KVCache);
        // A cache as `k` is its `.K` (and `.V`): `[B, H, len, D_h]`.
        let k_view = match &k.ty {
            Ty::Tensor(t) if kv_cache => match super::cache_view(t) {
                Some(view) => ArgVal { expr: k.expr, ty: Ty::Tensor(view) },
                None => return Ty::Unknown,
            },
            _ => k.clone(),
        };
        if kv_cache {
            if let Some(v) = arg!(a, "flash_attention" => "v").filter(|v| !matches!(v.ty, Ty::NoneVal)) {
                self.error(
                    Code::E0801,
                    self.range(v.expr),
                    "flash_attention: `v` comes from the KVCache given as `k`; pass only q and the cache",
                );
                return Ty::Unknown;
            }
        }
        let mut others = vec![("k", k_view)];
        if !kv_cache {
            match arg!(a, "flash_attention" => "v") {
                Some(v) if !matches!(v.ty, Ty::NoneVal) => others.push(("v", v.clone())),
                _ => {
                    self.error(Code::E0801, self.range(k.expr), "flash_attention needs `v` unless `k` is a KVCache");
                    return Ty::Unknown;
                }
            }
        }
        for (name, arg) in others {
            let layout = format!("flash_attention: {name} must be [B, H, Sk, Dh]");
            let Some(t) = self.tensor_of_rank(&arg, "flash_attention", 4, &layout) else {
                return Ty::Unknown;
            };
            for (i, what) in [(0, "batch"), (1, "heads"), (3, "head dim")] {
                if t.dims[i] != qt.dims[i] {
                    self.push(
                        Diagnostic::new(
                            Code::E0301,
                            self.range(arg.expr),
                            format!(
                                "flash_attention: {what} of {name} is {} but q has {} (q is {}, {name} is {})",
                                t.dims[i],
                                qt.dims[i],
                                fmt_dims(&qt.dims),
                                fmt_dims(&t.dims)
                            ),
                        )
                        .with_label(self.range(q.expr), fmt_dims(&qt.dims)),
                    );
                    return Ty::Unknown;
                }
            }
        }
        Ty::Tensor(TensorType::new(qt.dims, qt.elem))
    }
}
