//! Numerics policies at a kernel's conversions and accumulations (docs/ir.md,
//! "Numerics policies"): `acc = T` on dots and reductions, `saturate` and stochastic
//! rounding on casts, and the hidden run-seed parameter.

use smol_str::SmolStr;
use tessera_frontend::check::{DType, ElemType};
use tessera_frontend::syntax::ast::ExprId;

use super::Lower;
use crate::ir::policy;
use crate::ir::*;

impl Lower<'_, '_> {
    /// The `@accum(T)` of a dot's operands (the checker rejected conflicting ones).
    pub(super) fn accum_policy(&self, operands: &[ExprId]) -> Option<DType> {
        operands.iter().find_map(|&e| policy::elem_of(self.ty_of(e)).and_then(ElemType::accum))
    }

    /// The run's seed: the hidden index parameter, created on first use.
    pub(super) fn seed(&mut self) -> ValueId {
        if let Some(s) = self.seed {
            return s;
        }
        let s = self.b.func.new_value(Type::Index, Some(policy::SEED_PARAM));
        self.seed = Some(s);
        s
    }

    /// `arith.cast` of `v` to `to` under the policies of the destination element type:
    /// `saturate = true` for `@saturate`; for `@stochastic_round` on a tile, a uniform
    /// tile `u = tile.rand(seed, site, coords..., offsets...)` as a second operand and
    /// `rounding = "stochastic"`. `coords` are the leading coordinates and per-dim
    /// offsets of the draw (a store's tensor offsets); by default the enclosing loops'
    /// induction variables and the element's position in the tile.
    pub(super) fn convert(
        &mut self,
        v: ValueId,
        to: Type,
        elem: Option<&ElemType>,
        coords: Option<Vec<ValueId>>,
        loc: &Loc,
    ) -> ValueId {
        let mut operands = vec![v];
        let mut attrs = Vec::new();
        if let Some(elem) = elem.filter(|e| Some(e.dtype) == to.dtype()) {
            if policy::wants_saturate(elem) {
                attrs.push((policy::SATURATE, Attr::Bool(true)));
            }
            let from_float = self.vty(v).dtype().is_some_and(DType::is_float);
            if policy::wants_stochastic(elem) && matches!(to, Type::Tile(_)) && from_float {
                let dims = to.dims().to_vec();
                let seed = self.seed();
                let site = self.const_index(self.sites, loc);
                self.sites += 1;
                let mut offsets = vec![site];
                match coords {
                    Some(c) => offsets.extend(c),
                    None => {
                        offsets.extend(self.ivs.clone());
                        for _ in &dims {
                            offsets.push(self.const_index(0, loc));
                        }
                    }
                }
                let mut rand_operands = vec![seed];
                rand_operands.extend(offsets);
                let u = self.b.op1(OpKind::Rand, rand_operands, Type::tile(dims, DType::F32), vec![], loc);
                operands.push(u);
                attrs.push((policy::ROUNDING, Attr::Str(SmolStr::new(policy::STOCHASTIC))));
            }
        }
        self.b.op1(OpKind::Cast, operands, to, attrs, loc)
    }

    /// A value stored into a tensor whose element type has conversion policies: the
    /// conversion that produced it (a cast just before the store) is redone with them,
    /// its random draw at the stored elements' coordinates in the tensor.
    pub(super) fn store_conversion(&mut self, v: ValueId, view: ValueId, elem: &ElemType, loc: &Loc) -> ValueId {
        if !policy::wants_saturate(elem) && !policy::wants_stochastic(elem) {
            return v;
        }
        let find = |f: &Func, v: ValueId| f.ops.iter().rev().find(|o| o.results.first() == Some(&v)).cloned();
        let Some(cast) = find(self.b.func, v).filter(|o| o.kind == OpKind::Cast && o.attrs.is_empty()) else {
            return v;
        };
        // The draw's coordinates: squeezed dims first (fixed), then the tile's dims.
        let coords = find(self.b.func, view).filter(|o| o.kind == OpKind::View).map(|o| {
            let squeeze: Vec<i64> = match o.attr("squeeze") {
                Some(Attr::Ints(s)) => s.clone(),
                _ => Vec::new(),
            };
            let offsets = &o.operands[1..];
            let fixed = offsets.iter().enumerate().filter(|(d, _)| squeeze.contains(&(*d as i64)));
            let moving = offsets.iter().enumerate().filter(|(d, _)| !squeeze.contains(&(*d as i64)));
            fixed.chain(moving).map(|(_, &o)| o).collect::<Vec<ValueId>>()
        });
        self.convert(cast.operands[0], self.vty(v), Some(elem), coords, loc)
    }

    /// Elementwise fp8 arithmetic whose result type is `@saturate` clamps on overflow.
    pub(super) fn mark_saturating(&mut self, e: ExprId, v: ValueId) {
        let saturate = policy::elem_of(self.ty_of(e)).is_some_and(|el| el.dtype.is_fp8() && policy::wants_saturate(el));
        if saturate && self.vty(v).dtype().is_some_and(DType::is_fp8) {
            if let Some(op) = self.b.func.ops.iter_mut().rev().find(|o| o.results.first() == Some(&v)) {
                op.set_attr(policy::SATURATE, Attr::Bool(true));
            }
        }
    }
}
