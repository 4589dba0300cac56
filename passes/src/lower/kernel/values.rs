//! Tensor slices (views, gathers) and the coercions of a kernel's values: broadcasts,
//! dtype adoption and loads.

use tessera_frontend::check::{DType, Dim, Ty};
use tessera_frontend::syntax::ast::*;

use super::{unsupported, Lower, LowerError, Val, R};
use crate::ir::*;

impl Lower<'_, '_> {
    pub(super) fn subscript(&mut self, e: ExprId, base: ExprId, indices: &[ExprId]) -> R<Val> {
        let loc = self.eloc(e);
        let base_ty = self.ty_of(base).clone();
        match base_ty {
            Ty::Tensor(t) | Ty::View(t) => {
                let tensor = self.value(base)?;
                // A gather by index tiles into a tensor of rank above 1: by element index.
                if self.gathers_by_element(t.dims.len(), indices) {
                    let Type::View(v) = self.result_type(e)? else {
                        return unsupported("a gather result", loc.range);
                    };
                    let flat = self.flat_index(&t.dims, indices, &v.dims, &loc)?;
                    let mut operands = vec![tensor, flat.index];
                    operands.extend(flat.mask);
                    let tile_ty = Type::tile(v.dims.clone(), v.dtype);
                    return Ok(Val::One(self.b.op1(OpKind::Gather, operands, tile_ty, vec![], &loc)));
                }
                // A gather by an index tile (1-D tensors).
                if let [idx] = indices {
                    if let Ty::Tile(_) = self.ty_of(*idx) {
                        let i = self.value(*idx)?;
                        let result = self.result_type(e)?;
                        let Type::View(v) = result else {
                            return unsupported("a gather result", loc.range);
                        };
                        if self.linear_extent.is_none() {
                            self.linear_extent = t.dims.first().cloned();
                        }
                        let tile_ty = Type::tile(v.dims.clone(), v.dtype);
                        let mut operands = vec![tensor, i];
                        if let Some(m) = self.mask {
                            operands.push(m);
                        }
                        return Ok(Val::One(self.b.op1(OpKind::Gather, operands, tile_ty, vec![], &loc)));
                    }
                }
                let mut offsets = Vec::new();
                let mut sizes = Vec::new();
                let mut squeeze = Vec::new();
                let mut d = 0usize;
                for &idx in indices {
                    match self.body.expr(idx).clone() {
                        Expr::Slice { start, stop: _, step } => {
                            if step.is_some() {
                                return unsupported("a strided slice", self.body.expr_range(idx));
                            }
                            let off = match start {
                                Some(s) => self.value(s)?,
                                None => self.const_index(0, &loc),
                            };
                            offsets.push(off);
                            d += 1;
                        }
                        Expr::NoneLit => {
                            return unsupported(
                                "`None` in a tensor index (load first, then index the tile)",
                                self.body.expr_range(idx),
                            )
                        }
                        _ => {
                            if let Ty::Tile(_) = self.ty_of(idx) {
                                return unsupported(
                                    "an index tile beside other indices of a 1-D tensor (a gather into a 1-D tensor \
                                     takes its one index tile alone)",
                                    self.body.expr_range(idx),
                                );
                            }
                            let off = self.value(idx)?;
                            if self.vty(off) != Type::Index {
                                return unsupported("a non-integer index", self.body.expr_range(idx));
                            }
                            offsets.push(off);
                            squeeze.push(d as i64);
                            d += 1;
                        }
                    }
                }
                while offsets.len() < t.dims.len() {
                    offsets.push(self.const_index(0, &loc));
                }
                let result = self.result_type(e)?;
                let Type::View(view) = result else {
                    return unsupported("a slice of this tensor", loc.range);
                };
                // Sizes per tensor dim: 1 for integer indices, the view's dims otherwise.
                let mut vd = view.dims.iter();
                for k in 0..t.dims.len() {
                    if squeeze.contains(&(k as i64)) {
                        sizes.push(Dim::constant(1));
                    } else {
                        sizes.push(vd.next().cloned().unwrap_or_else(|| t.dims[k].clone()));
                    }
                }
                let mut operands = vec![tensor];
                operands.extend(offsets);
                let mut attrs = vec![("sizes", Attr::Dims(sizes))];
                if !squeeze.is_empty() {
                    attrs.push(("squeeze", Attr::Ints(squeeze)));
                }
                Ok(Val::One(self.b.op1(OpKind::View, operands, Type::View(view), attrs, &loc)))
            }
            Ty::Tile(_) | Ty::Shared(_) => {
                let v = self.value(base)?;
                let mut v = self.operand(v, base)?;
                // Only `None` (new axes) and full slices are supported on tiles.
                for (axis, &idx) in indices.iter().enumerate() {
                    match self.body.expr(idx) {
                        Expr::NoneLit => {
                            let mut dims = self.vty(v).dims().to_vec();
                            dims.insert(axis, Dim::constant(1));
                            let dtype = self.vty(v).dtype().unwrap();
                            v = self.b.op1(
                                OpKind::ExpandDims,
                                vec![v],
                                Type::tile(dims, dtype),
                                vec![("axis", Attr::Int(axis as i64))],
                                &loc,
                            );
                        }
                        Expr::Slice { start: None, stop: None, step: None } => {}
                        _ => {
                            return unsupported(
                                "indexing a tile (only `:` and `None` are supported)",
                                self.body.expr_range(idx),
                            )
                        }
                    }
                }
                Ok(Val::One(v))
            }
            Ty::Tuple(_) => match (self.expr(base)?, self.body.expr(indices[0])) {
                (Val::Many(vs), Expr::Int(i)) => vs
                    .get(*i as usize)
                    .map(|v| Val::One(*v))
                    .ok_or_else(|| LowerError { message: "tuple index".into(), range: loc.range }),
                _ => unsupported("indexing a tuple by a non-constant", loc.range),
            },
            other => unsupported(format!("indexing {other}"), loc.range),
        }
    }

    /// The value of `v` as an f64 attribute when an `arith.constant` defines it.
    fn literal_value(&self, v: ValueId) -> Option<Attr> {
        let ops = &self.b.func.ops;
        // Asked only on the way to f64 (rare): a literal bound to a name (`c = 0.1`) may
        // have been made long before.
        let op = ops.iter().rev().find(|op| op.results.first() == Some(&v))?;
        match (op.kind, op.attr("value")?) {
            (OpKind::Constant, Attr::Float(bits)) => Some(Attr::Float(*bits)),
            (OpKind::Constant, Attr::Int(i)) => Some(Attr::float(*i as f64)),
            _ => None,
        }
    }

    /// Broadcasting, dtype adoption and loads so that `v` has type `want`.
    pub(super) fn coerce(&mut self, v: ValueId, want: &Type, loc: &Loc) -> R<ValueId> {
        let have = self.vty(v);
        if &have == want {
            return Ok(v);
        }
        match (have.clone(), want) {
            (Type::View(_) | Type::Smem(_), _) => {
                let loaded = match have {
                    Type::View(view) => {
                        let mut operands = vec![v];
                        if let Some(m) = self.mask {
                            let m = self.coerce(m, &Type::tile(view.dims.clone(), DType::Bool), loc)?;
                            operands.push(m);
                        }
                        self.b.op1(OpKind::Load, operands, Type::tile(view.dims, view.dtype), vec![], loc)
                    }
                    Type::Smem(s) => self.b.op1(OpKind::LoadShared, vec![v], Type::tile(s.dims, s.dtype), vec![], loc),
                    _ => unreachable!(),
                };
                self.coerce(loaded, want, loc)
            }
            (Type::Index, Type::Index) => Ok(v),
            (Type::Index | Type::Scalar(_), Type::Scalar(d)) => {
                // A number written in the source is exact: in an f64 computation it is an
                // f64 constant, not its f32 rounding widened (`x * 0.1` was off by 1.5e-8).
                if *d == DType::F64 {
                    if let Some(value) = self.literal_value(v) {
                        return Ok(self.b.op1(OpKind::Constant, vec![], Type::Scalar(*d), vec![("value", value)], loc));
                    }
                }
                Ok(self.b.op1(OpKind::Cast, vec![v], Type::Scalar(*d), vec![], loc))
            }
            (Type::Scalar(_), Type::Index) => Ok(self.b.op1(OpKind::Cast, vec![v], Type::Index, vec![], loc)),
            (Type::Index | Type::Scalar(_), Type::Tile(t)) => {
                let s = self.coerce(v, &Type::Scalar(t.dtype), loc)?;
                Ok(self.b.op1(OpKind::Splat, vec![s], want.clone(), vec![], loc))
            }
            (Type::Tile(h), Type::Tile(t)) => {
                let mut cur = v;
                let mut dims = h.dims.clone();
                if h.dtype != t.dtype {
                    cur = self.b.op1(OpKind::Cast, vec![cur], Type::tile(dims.clone(), t.dtype), vec![], loc);
                }
                if dims.len() > t.dims.len() {
                    return unsupported(format!("a {} where a {} is expected", have, want), loc.range);
                }
                while dims.len() < t.dims.len() {
                    dims.insert(0, Dim::constant(1));
                    cur = self.b.op1(
                        OpKind::ExpandDims,
                        vec![cur],
                        Type::tile(dims.clone(), t.dtype),
                        vec![("axis", Attr::Int(0))],
                        loc,
                    );
                }
                if dims != t.dims {
                    for (a, b) in dims.iter().zip(&t.dims) {
                        if a != b && a.as_const() != Some(1) {
                            return unsupported(format!("broadcasting {} to {}", have, want), loc.range);
                        }
                    }
                    cur = self.b.op1(OpKind::Broadcast, vec![cur], Type::tile(t.dims.clone(), t.dtype), vec![], loc);
                }
                Ok(cur)
            }
            _ => unsupported(format!("a {have} where a {want} is expected"), loc.range),
        }
    }
}
