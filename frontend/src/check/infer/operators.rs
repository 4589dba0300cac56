//! Operators: arithmetic and elementwise broadcasting, unary operators, comparisons.

use crate::check::dims::Dim;
use crate::check::dtype::{DType, ElemType};
use crate::check::types::*;
use crate::diagnostics::{Code, Diagnostic, Edit};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{float_op, int_op, Infer};

impl<'a> Infer<'a> {
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
        let result = self.arithmetic(id, op, lhs, &l, rhs, &r);
        if is_bitwise(op) {
            self.check_bitwise(id, op, &[(lhs, &l), (rhs, &r)], &result);
        }
        result
    }

    /// `a op b` for every operator but `@`.
    fn arithmetic(&mut self, id: ExprId, op: BinOp, lhs: ExprId, l: &Ty, rhs: ExprId, r: &Ty) -> Ty {
        match (l, r) {
            (Ty::Int(a), Ty::Int(b)) => Ty::Int(int_op(op, a.as_ref(), b.as_ref())),
            (Ty::Int(_) | Ty::Float(_), Ty::Int(_) | Ty::Float(_)) => Ty::Float(float_op(op, l, r)),
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

    /// `&`, `|`, `^`, `<<`, `>>` take integers (and the first three bools, as masks): a
    /// float operand is E0400, since the bits of a float are not what these act on.
    fn check_bitwise(&mut self, id: ExprId, op: BinOp, operands: &[(ExprId, &Ty)], result: &Ty) {
        let shift = matches!(op, BinOp::Shl | BinOp::Shr);
        let wrong = |t: &Ty| match t {
            Ty::Float(_) => Some("a float".to_string()),
            Ty::Bool(_) if shift => Some("a bool".to_string()),
            _ => elem_dtype(t).filter(|d| d.is_float() || (shift && *d == DType::Bool)).map(|d| format!("{d}")),
        };
        let culprit = operands.iter().find_map(|(e, t)| wrong(t).map(|what| (*e, what)));
        let Some((e, what)) = culprit.or_else(|| wrong(result).map(|what| (id, what))) else { return };
        let takes = if shift { "integers" } else { "integers or bools" };
        let message = if e == id {
            format!("`{}` takes {takes}, but its result here is {what}", op.symbol())
        } else {
            format!("`{}` takes {takes}, but `{}` is {what}", op.symbol(), self.text(e))
        };
        self.push(
            Diagnostic::new(Code::E0400, self.range(id), message)
                .with_label(self.range(e), format!("this is {what}"))
                .with_note("bitwise operators act on the two's-complement bits of integer values; `tile.cast` converts values, not bits"),
        );
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
                    Some((prev, prev_e)) => match crate::check::shapes::broadcast(&prev, &dims) {
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

    /// The result of `where(cond, a, b)` given `values`, the broadcast of `a` and `b`:
    /// the condition's shape takes part in the broadcast too, so `where(x > 0, 1.0, -1.0)`
    /// on a tile is a tile of its shape, and `where(x == m[:, None], cols[None, :], C)`
    /// is as wide as `x`, not as `cols`.
    pub fn selected(&mut self, cond: ExprId, cond_ty: Ty, operands: [&Ty; 2], values: Ty) -> Ty {
        let cond_ty = self.operand(cond_ty);
        let Some(cond_dims) = cond_ty.shape().map(|(d, _)| d.to_vec()) else { return values };
        let value_dims = values.shape().map_or_else(Vec::new, |(d, _)| d.to_vec());
        let dims = match crate::check::shapes::broadcast(&cond_dims, &value_dims) {
            Ok(dims) => dims,
            Err(_) => {
                self.error(
                    Code::E0302,
                    self.range(cond),
                    format!(
                        "the condition {} does not broadcast with the values {}",
                        fmt_dims(&cond_dims),
                        fmt_dims(&value_dims)
                    ),
                );
                return Ty::Unknown;
            }
        };
        // Numbers on both sides take the dtype Python's would: an int, a float or a bool.
        let elem = match &values {
            Ty::Unknown => return Ty::Unknown,
            Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => t.elem.clone(),
            Ty::Tile(t) => t.elem.clone(),
            Ty::Scalar(e) => e.clone(),
            _ if operands.iter().all(|t| matches!(t, Ty::Int(_))) => ElemType::plain(DType::I32),
            _ if operands.iter().all(|t| matches!(t, Ty::Bool(_))) => ElemType::plain(DType::Bool),
            _ => ElemType::plain(DType::F32),
        };
        let tile = matches!(cond_ty, Ty::Tile(_)) || matches!(values, Ty::Tile(_));
        if tile {
            Ty::Tile(TileType { dims, elem })
        } else {
            Ty::Tensor(TensorType::new(dims, elem))
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

    pub(super) fn unary(&mut self, id: ExprId, op: UnaryOp, t: Ty) -> Ty {
        let t = self.operand(t);
        match (op, t) {
            (_, Ty::Unknown) => Ty::Unknown,
            (UnaryOp::Not, Ty::Tile(t)) => Ty::Tile(TileType { dims: t.dims, elem: ElemType::plain(DType::Bool) }),
            (UnaryOp::Not, _) => Ty::Bool(None),
            (UnaryOp::Neg, Ty::Int(v)) => Ty::Int(v.map(|d| d.neg())),
            (UnaryOp::Neg, Ty::Float(v)) => Ty::Float(v.map(|f| FloatLit::new(-f.get()))),
            (UnaryOp::Pos, t @ (Ty::Int(_) | Ty::Float(_))) => t,
            (UnaryOp::Invert, Ty::Int(v)) => Ty::Int(v.and_then(|d| d.as_const()).map(|c| Dim::constant(!c))),
            (UnaryOp::Invert, t) if elem_dtype(&t).is_some_and(DType::is_float) || matches!(t, Ty::Float(_)) => {
                let what = elem_dtype(&t).map_or("a float".to_string(), |d| d.to_string());
                self.error(Code::E0400, self.range(id), format!("`~` takes integers or bools, but this is {what}"));
                Ty::Unknown
            }
            (_, t @ (Ty::Tensor(_) | Ty::Tile(_) | Ty::Scalar(_) | Ty::DistTensor(_))) => t,
            (_, other) => {
                self.error(Code::E0802, self.range(id), format!("unary operator on {}", other.kind_name()));
                Ty::Unknown
            }
        }
    }

    pub(super) fn compare(&mut self, id: ExprId, op: CmpOp, lhs: ExprId, l: Ty, rhs: ExprId, r: Ty) -> Ty {
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
}

fn is_bitwise(op: BinOp) -> bool {
    matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr)
}

/// The element dtype of a tensor, tile or typed scalar.
fn elem_dtype(t: &Ty) -> Option<DType> {
    match t {
        Ty::Tile(t) => Some(t.elem.dtype),
        Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => Some(t.elem.dtype),
        Ty::Scalar(e) => Some(e.dtype),
        _ => None,
    }
}
