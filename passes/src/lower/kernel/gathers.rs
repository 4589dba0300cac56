//! Gathers and scatters of a rank-r tensor by r index tiles (`E[ids[:, None],
//! cols[None, :]]`, NumPy's advanced indexing): the index tiles broadcast together, and the
//! `Gather`/`Scatter` reads or writes the tensor's row-major element
//! `((i_0 d_1 + i_1) d_2 + ...) + i_{r-1}`, under a mask that keeps every index but the
//! first inside its dim (a column index past `D` would otherwise read the next row; the
//! first is bounded by the op itself, which touches only elements `0..numel`).

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim, Ty};
use tessera_frontend::syntax::ast::*;

use super::{unsupported, Lower, R};
use crate::ir::*;

/// A gather's row-major element index tile and the mask of its elements.
pub(super) struct FlatIndex {
    pub(super) index: ValueId,
    pub(super) mask: Option<ValueId>,
}

impl Lower<'_, '_> {
    /// Whether `tensor[indices]` gathers through [`Self::flat_index`]: an index tile into a
    /// tensor of rank above 1, or several index tiles.
    pub(super) fn gathers_by_element(&self, rank: usize, indices: &[ExprId]) -> bool {
        let tiles = indices.iter().filter(|&&i| matches!(self.ty_of(i), Ty::Tile(_))).count();
        tiles > 1 || (tiles == 1 && rank > 1)
    }

    /// The element index of `tensor[indices]` (a tensor of `dims`) as a tile of `shape`
    /// (the checker's, NumPy's: the index tiles and ints broadcast together into a block
    /// of axes, in place when they are adjacent, else first; a slice `a:a + n` is the
    /// tile `a + arange(n)` along its own axis; `None` is an axis of 1), with the bounds
    /// mask and the kernel's own (`tile.load(..., mask=m)`) combined.
    pub(super) fn flat_index(&mut self, dims: &[Dim], indices: &[ExprId], shape: &[Dim], loc: &Loc) -> R<FlatIndex> {
        let is_none = |s: &Self, i: ExprId| matches!(s.body.expr(i), Expr::NoneLit);
        let is_slice = |s: &Self, i: ExprId| matches!(s.body.expr(i), Expr::Slice { .. });
        let indexed = indices.iter().filter(|&&i| !is_none(self, i)).count();
        if indexed != dims.len() {
            let at = self.body.expr_range(indices[0]).cover(self.body.expr_range(*indices.last().unwrap()));
            return unsupported(
                format!(
                    "a gather that indexes {indexed} of the tensor's {} dims: index every dim (`:` for a whole one)",
                    dims.len()
                ),
                at,
            );
        }
        // The index arithmetic in the index tiles' widest dtype.
        let dtype = if indices.iter().any(|&i| matches!(self.ty_of(i), Ty::Tile(t) if t.elem.dtype == DType::I64)) {
            DType::I64
        } else {
            DType::I32
        };
        // The output axes: the block of the broadcast advanced indices, and one per slice.
        let advanced: Vec<usize> =
            (0..indices.len()).filter(|&k| !is_none(self, indices[k]) && !is_slice(self, indices[k])).collect();
        let block = advanced
            .iter()
            .filter_map(|&k| if let Ty::Tile(t) = self.ty_of(indices[k]) { Some(t.dims.len()) } else { None })
            .max()
            .unwrap_or(0);
        let adjacent = advanced.windows(2).all(|w| w[1] == w[0] + 1);
        let mut axis = if adjacent { 0 } else { block };
        let mut block_start = 0;
        let mut own_axis = vec![None; indices.len()];
        for (k, own) in own_axis.iter_mut().enumerate() {
            if advanced.contains(&k) {
                if adjacent && k == advanced[0] {
                    block_start = axis;
                    axis += block;
                }
            } else {
                *own = Some(axis);
                axis += 1;
            }
        }
        let rank = shape.len();
        let ty = Type::tile(shape.to_vec(), dtype);
        let bools = Type::tile(shape.to_vec(), DType::Bool);
        let mut flat: Option<ValueId> = None;
        let mut mask: Option<ValueId> = None;
        let mut dim_of = dims.iter();
        for (k, &idx) in indices.iter().enumerate() {
            if is_none(self, idx) {
                continue;
            }
            let dim = dim_of.next().expect("as many indices as dims");
            // The index along this dim, with the dims after its axes added, so that
            // broadcasting (which prepends) puts it on its axes.
            let (v, last_axis) = match self.body.expr(idx).clone() {
                Expr::Slice { start, step, .. } => {
                    if step.is_some() {
                        return unsupported("a strided slice", self.body.expr_range(idx));
                    }
                    let a = own_axis[k].expect("a slice has its own axis");
                    let origin = match start {
                        Some(s) => self.value(s)?,
                        None => self.const_index(0, loc),
                    };
                    let line = Type::tile(vec![shape[a].clone()], dtype);
                    let range = self.b.op1(OpKind::Arange, vec![], line.clone(), vec![], loc);
                    let origin = self.coerce(origin, &line, loc)?;
                    (self.b.op1(OpKind::Add, vec![origin, range], line, vec![], loc), a)
                }
                _ => (self.value(idx)?, block_start + block.max(1) - 1),
            };
            let v = self.trailing_axes(v, rank - 1 - last_axis.min(rank - 1), loc);
            let v = self.coerce(v, &ty, loc)?;
            let Some(before) = flat else {
                flat = Some(v);
                continue;
            };
            let d = self.dim_value(dim, loc)?;
            let d = self.coerce(d, &ty, loc)?;
            let scaled = self.b.op1(OpKind::Mul, vec![before, d], ty.clone(), vec![], loc);
            flat = Some(self.b.op1(OpKind::Add, vec![scaled, v], ty.clone(), vec![], loc));
            let zero = self.const_index(0, loc);
            let zero = self.coerce(zero, &ty, loc)?;
            let cmp = |s: &mut Self, pred: &str, a, b| {
                s.b.op1(OpKind::Cmp, vec![a, b], bools.clone(), vec![("pred", Attr::Str(SmolStr::new(pred)))], loc)
            };
            let (above, below) = (cmp(self, "ge", v, zero), cmp(self, "lt", v, d));
            let inside = self.b.op1(OpKind::And, vec![above, below], bools.clone(), vec![], loc);
            mask = Some(self.and_mask(mask, inside, &bools, loc));
        }
        if let Some(m) = self.mask {
            let m = self.coerce(m, &bools, loc)?;
            mask = Some(self.and_mask(mask, m, &bools, loc));
        }
        Ok(FlatIndex { index: flat.expect("a gather has an index"), mask })
    }

    /// `mask & m`, or `m` alone.
    fn and_mask(&mut self, mask: Option<ValueId>, m: ValueId, bools: &Type, loc: &Loc) -> ValueId {
        match mask {
            Some(b) => self.b.op1(OpKind::And, vec![b, m], bools.clone(), vec![], loc),
            None => m,
        }
    }

    /// A tile `v` with `n` axes of 1 appended (a scalar, which broadcasts to any axes, as it is).
    fn trailing_axes(&mut self, v: ValueId, n: usize, loc: &Loc) -> ValueId {
        let Type::Tile(t) = self.vty(v) else { return v };
        let mut dims = t.dims.clone();
        let mut cur = v;
        for _ in 0..n {
            let axis = dims.len() as i64;
            dims.push(Dim::constant(1));
            cur = self.b.op1(
                OpKind::ExpandDims,
                vec![cur],
                Type::tile(dims.clone(), t.dtype),
                vec![("axis", Attr::Int(axis))],
                loc,
            );
        }
        cur
    }
}
