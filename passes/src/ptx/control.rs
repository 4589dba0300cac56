//! Structured control flow: `scf.for` and `scf.if` with their carried values (fresh
//! registers for loop-carried values, assignments at the end of each iteration or branch).

use crate::ir::{Op, Type, ValueId};

use super::builder::{Class, Operand, Reg};
use super::emit::*;
use super::numerics::{materialize, wide_class};

impl Emitter<'_> {
    /// Fresh registers holding a copy of `val` (loop-carried and branch results are
    /// written in place; other values' registers never are).
    pub(super) fn fresh_copy(&mut self, op: &Op, val: &Val) -> R<Val> {
        Ok(match val {
            Val::Scalar(s) => Val::Scalar(self.copy_operand(*s, class_of_operand_hint(*s))),
            Val::Tile(t) => {
                let repr = match &t.repr {
                    Repr::Wide(v) => {
                        let class = wide_class(t.dtype);
                        Repr::Wide(v.iter().map(|&x| self.copy_operand(x, Some(class))).collect())
                    }
                    Repr::Packed(_) | Repr::Lazy(_) => {
                        let words = match &t.repr {
                            Repr::Lazy(lazy) => self.load_all(lazy),
                            Repr::Packed(w) => w.clone(),
                            Repr::Wide(_) => unreachable!("matched above"),
                        };
                        Repr::Packed(words.iter().map(|&x| self.copy_operand(x, Some(Class::B32))).collect())
                    }
                };
                Val::Tile(TileVal { repr, ..t.clone() })
            }
            other => return Err(self.fail(op, format!("a loop or branch carries {}", kind_name(other)))),
        })
    }

    pub(super) fn copy_operand(&mut self, x: Operand, class: Option<Class>) -> Operand {
        let class = match (x, class) {
            (Operand::Reg(r), _) => r.class,
            (_, Some(c)) => c,
            (Operand::F32(_), None) => Class::F32,
            (Operand::F64(_), None) => Class::F64,
            _ => Class::B64,
        };
        let r = self.b.reg(class);
        mov(&mut self.b, r, x);
        Operand::Reg(r)
    }

    /// The carried value for a scalar of the given IR type (index/scalar class known).
    pub(super) fn fresh_for(&mut self, op: &Op, v: ValueId, init: &Val) -> R<Val> {
        match (self.f.ty(v), init) {
            (Type::Index, Val::Scalar(s)) => Ok(Val::Scalar(self.copy_operand(*s, Some(Class::B64)))),
            (Type::Scalar(d), Val::Scalar(s)) => Ok(Val::Scalar(self.copy_operand(*s, Some(wide_class(*d))))),
            _ => self.fresh_copy(op, init),
        }
    }

    /// Copies `sources` into `dests` as one parallel assignment.
    pub(super) fn assign(&mut self, op: &Op, dests: &[Val], sources: &[ValueId]) -> R<()> {
        let mut pairs: Vec<(Reg, Operand)> = Vec::new();
        for (dest, &src) in dests.iter().zip(sources) {
            let src_val = self.val(op, src)?.clone();
            match (dest, &src_val) {
                (Val::Scalar(Operand::Reg(d)), Val::Scalar(s)) => pairs.push((*d, *s)),
                (Val::Tile(d), Val::Tile(s)) => {
                    let (dregs, sops) = match &d.repr {
                        Repr::Wide(dv) => (dv.clone(), self.wide(s)),
                        Repr::Packed(dv) => (dv.clone(), self.packed(op, s)?),
                        Repr::Lazy(_) => return Err(self.fail(op, "internal error: a carried value in shared memory")),
                    };
                    if dregs.len() != sops.len() {
                        return Err(self.fail(op, "a carried tile changes its register count"));
                    }
                    for (d, s) in dregs.iter().zip(sops) {
                        let Operand::Reg(d) = d else { unreachable!("carried operands are registers") };
                        pairs.push((*d, s));
                    }
                }
                _ => return Err(self.fail(op, "a carried value changes kind")),
            }
        }
        // A source that is also a destination must be read before it is overwritten.
        let dest_set: std::collections::HashSet<Reg> = pairs.iter().map(|(d, _)| *d).collect();
        let staged: Vec<(Reg, Operand)> = pairs
            .iter()
            .map(|&(d, s)| match s {
                Operand::Reg(r) if dest_set.contains(&r) && r != d => {
                    let t = self.b.reg(r.class);
                    mov(&mut self.b, t, s);
                    (d, Operand::Reg(t))
                }
                _ => (d, s),
            })
            .collect();
        for (d, s) in staged {
            if s != Operand::Reg(d) {
                mov(&mut self.b, d, s);
            }
        }
        Ok(())
    }

    pub(super) fn for_loop(&mut self, op: &Op) -> R<()> {
        let lo = self.scalar(op, op.operands[0])?;
        let hi = self.scalar(op, op.operands[1])?;
        let step = self.scalar(op, op.operands[2])?;
        let region = &op.regions[0];
        let iv = self.b.reg(Class::B64);
        mov(&mut self.b, iv, lo);
        let mut carried = Vec::new();
        for (i, &init) in op.operands[3..].iter().enumerate() {
            let v = self.val(op, init)?.clone();
            carried.push(self.fresh_for(op, op.results[i], &v)?);
        }
        let head = self.b.label("loop");
        let end = self.b.label("done");
        self.b.place_label(&head);
        let p = self.b.reg(Class::Pred);
        self.b.ins(format!("setp.ge.s64 {p}, {iv}, {}", hi));
        self.b.ins_if(p, false, format!("bra.uni {end}"));
        self.set(region.args[0], Val::Scalar(Operand::Reg(iv)));
        for (i, c) in carried.iter().enumerate() {
            self.set(region.args[1 + i], c.clone());
        }
        let yielded = self.region(region)?;
        self.b.loc = Some(op.loc.clone());
        self.assign(op, &carried, &yielded)?;
        self.b.ins(format!("add.s64 {iv}, {iv}, {}", step));
        self.b.ins(format!("bra.uni {head}"));
        self.b.place_label(&end);
        for (i, c) in carried.into_iter().enumerate() {
            self.set(op.results[i], c);
        }
        Ok(())
    }

    pub(super) fn if_op(&mut self, op: &Op) -> R<()> {
        let cond = self.scalar(op, op.operands[0])?;
        let else_label = self.b.label("else");
        let end = self.b.label("endif");
        let cond = materialize(&mut self.b, Class::Pred, cond);
        self.b.ins_if(cond, true, format!("bra.uni {else_label}"));
        let then_yield = self.region(&op.regions[0])?;
        self.b.loc = Some(op.loc.clone());
        let mut results = Vec::new();
        for (i, &v) in then_yield.iter().enumerate().take(op.results.len()) {
            let val = self.val(op, v)?.clone();
            results.push(self.fresh_for(op, op.results[i], &val)?);
        }
        self.b.ins(format!("bra.uni {end}"));
        self.b.place_label(&else_label);
        if let Some(else_region) = op.regions.get(1) {
            let else_yield = self.region(else_region)?;
            self.b.loc = Some(op.loc.clone());
            if !results.is_empty() {
                self.assign(op, &results, &else_yield)?;
            }
        }
        self.b.place_label(&end);
        for (i, r) in results.into_iter().enumerate() {
            self.set(op.results[i], r);
        }
        Ok(())
    }

    // ----- scalars and elementwise ops -------------------------------------------------
}
