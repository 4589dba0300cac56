//! Statements of a kernel body: assignments and stores, `for` loops over ranges and tile
//! programs (locals reassigned in a loop become `iter_args`), `if` as `scf.if` or as a
//! masked region with `arith.select` merges, and the truth values conditions need.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Ty};
use tessera_frontend::syntax::ast::*;
use tessera_frontend::text::TextRange;

use super::{unsupported, Lower, Val, R};
use crate::ir::*;

/// Statements a branch runs: its own, then the rest of the enclosing loop body when
/// another branch of its `if` ends in `continue` (`Lower::loop_body`).
struct Block {
    body: Vec<StmtId>,
    tail: Vec<StmtId>,
}

impl Block {
    fn of(body: &[StmtId]) -> Block {
        Block { body: body.to_vec(), tail: vec![] }
    }
}

/// A branch of a scalar `if`: its condition and what it runs.
struct Branch {
    cond: ExprId,
    block: Block,
}

impl Lower<'_, '_> {
    pub(super) fn stmts(&mut self, stmts: &[StmtId]) -> R<()> {
        for &s in stmts {
            self.stmt(s)?;
            // What follows a `return` never runs (and a region ends at its return).
            if matches!(self.body.stmt(s), Stmt::Return(_)) {
                break;
            }
        }
        Ok(())
    }

    fn stmt(&mut self, s: StmtId) -> R<()> {
        let range = self.body.stmt_range(s);
        match self.body.stmt(s) {
            Stmt::Expr(e) => {
                if matches!(self.body.expr(*e), Expr::Str(_) | Expr::Ellipsis) {
                    return Ok(());
                }
                self.expr(*e)?;
                Ok(())
            }
            Stmt::Assign { target, value, .. } => {
                let (target, value) = (*target, *value);
                if matches!(self.body.expr(target), Expr::Subscript { .. }) {
                    let v = self.value(value)?;
                    return self.store(target, v, value, false);
                }
                let v = self.expr(value)?;
                self.bind(target, v)
            }
            Stmt::AugAssign { target, op, value, .. } => {
                let (target, value, op) = (*target, *value, *op);
                if matches!(self.body.expr(target), Expr::Subscript { .. }) {
                    // dst[...] += v: load, combine, store.
                    let current = self.value(target)?;
                    let current = self.operand(current, target)?;
                    let v = self.value(value)?;
                    let combined = self.binary(op, current, v, target, self.body.expr_range(target))?;
                    return self.store(target, combined, value, false);
                }
                let current = self.value(target)?;
                let v = self.value(value)?;
                let combined = self.binary(
                    op,
                    current,
                    v,
                    target,
                    self.body.expr_range(target).cover(self.body.expr_range(value)),
                )?;
                // `acc += ...` keeps acc's type.
                let want = self.vty(current);
                let combined = self.coerce(combined, &want, &self.eloc(value))?;
                self.bind(target, Val::One(combined))
            }
            Stmt::Return(value) => {
                if self.b.in_nested_region() || self.mask.is_some() {
                    return unsupported(
                        "a `return` inside a loop or a branch of a kernel (guard the work instead: `if i < n: ...`)",
                        range,
                    );
                }
                let loc = self.loc(range);
                let operands = match value {
                    Some(v) => match self.expr(*v)? {
                        Val::One(x) => vec![x],
                        Val::Many(xs) => xs,
                    },
                    None => vec![],
                };
                self.b.op(OpKind::Return, operands, vec![], vec![], &loc);
                Ok(())
            }
            Stmt::Pass => Ok(()),
            Stmt::Break => unsupported("`break` in a kernel loop", range),
            // `Lower::loop_body` lowers the ones that end a branch of an `if` of the body.
            Stmt::Continue => unsupported("`continue` nested deeper than a branch of an `if` of the loop body", range),
            Stmt::If { branches, orelse } => self.if_stmt(range, branches, orelse.as_deref()),
            Stmt::For { target, iter, body, orelse } => {
                if orelse.is_some() {
                    return unsupported("`for ... else` in a kernel", range);
                }
                self.for_stmt(range, *target, *iter, body)
            }
            Stmt::While { .. } => unsupported("`while` loops in kernels (use tile.range)", range),
            Stmt::With { .. } => unsupported("`with` blocks in kernels", range),
            Stmt::Invalid => unsupported("an invalid statement", range),
        }
    }

    fn bind(&mut self, target: ExprId, v: Val) -> R<()> {
        match (self.body.expr(target), v) {
            (Expr::Name(n), v) => {
                if let Val::One(x) = &v {
                    if self.b.func.values[x.0 as usize].name.is_none() {
                        self.b.name(*x, n);
                    }
                }
                self.env.insert(n.clone(), v);
                Ok(())
            }
            (Expr::Paren(inner), v) => self.bind(*inner, v),
            (Expr::Tuple(items) | Expr::List(items), Val::Many(vs)) if items.len() == vs.len() => {
                for (&item, v) in items.clone().iter().zip(vs) {
                    self.bind(item, Val::One(v))?;
                }
                Ok(())
            }
            _ => unsupported("this assignment target", self.body.expr_range(target)),
        }
    }

    /// Names assigned anywhere in `stmts` (in first-assignment order).
    fn assigned(&self, stmts: &[StmtId], out: &mut Vec<SmolStr>) {
        for &s in stmts {
            match self.body.stmt(s) {
                Stmt::Assign { target, .. } | Stmt::AugAssign { target, .. } => self.target_names(*target, out),
                Stmt::If { branches, orelse } => {
                    for b in branches {
                        self.assigned(&b.body, out);
                    }
                    if let Some(e) = orelse {
                        self.assigned(e, out);
                    }
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::With { body, .. } => self.assigned(body, out),
                _ => {}
            }
        }
    }

    fn target_names(&self, t: ExprId, out: &mut Vec<SmolStr>) {
        match self.body.expr(t) {
            Expr::Name(n) if !out.contains(n) => out.push(n.clone()),
            Expr::Paren(i) => self.target_names(*i, out),
            Expr::Tuple(items) | Expr::List(items) => items.iter().for_each(|&i| self.target_names(i, out)),
            _ => {}
        }
    }

    fn for_stmt(&mut self, range: TextRange, target: ExprId, iter: ExprId, body: &[StmtId]) -> R<()> {
        let Expr::Call { func, args } = self.body.expr(iter) else {
            return unsupported(
                "a loop over something other than tile.parallel, tile.range or range",
                self.body.expr_range(iter),
            );
        };
        let (func, args) = (*func, args.clone());
        let path = match self.ty_of(func) {
            Ty::Builtin(p) => *p,
            _ => return unsupported("this loop", self.body.expr_range(iter)),
        };
        let loc = self.loc(range);
        let arg = |name: &str, pos: usize| -> Option<ExprId> {
            args.iter()
                .find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name))
                .map(|a| a.value)
                .or_else(|| args.iter().filter(|a| a.name.is_none()).nth(pos).map(|a| a.value))
        };
        let (lo, hi, step) = match path {
            "tile.range_n" => {
                let lo = self.const_index(0, &loc);
                let hi = self.index_arg(arg("extent", 0), &loc)?;
                let step = self.index_arg(arg("step", 1), &loc)?;
                (lo, hi, step)
            }
            "range" if args.iter().filter(|a| a.name.is_none()).count() == 1 => {
                let lo = self.const_index(0, &loc);
                let hi = self.index_arg(arg("start", 0), &loc)?;
                let step = self.const_index(1, &loc);
                (lo, hi, step)
            }
            "tile.parallel" | "tile.range" | "range" => {
                let lo = self.index_arg(arg("start", 0), &loc)?;
                let hi = self.index_arg(arg("stop", 1), &loc)?;
                let step = match arg("step", 2) {
                    Some(e) => self.index_arg(Some(e), &loc)?,
                    None => self.const_index(1, &loc),
                };
                (lo, hi, step)
            }
            other => return unsupported(format!("a loop over `{other}`"), self.body.expr_range(iter)),
        };
        let Expr::Name(var) = self.body.expr(target) else {
            return unsupported("a loop variable that is not a name", self.body.expr_range(target));
        };
        let var = var.clone();
        let iv = self.b.value(Type::Index, Some(&var));
        if path == "tile.parallel" {
            let saved = self.env.clone();
            self.b.open_region(vec![iv]);
            self.env.insert(var, Val::One(iv));
            self.ivs.push(iv);
            let lowered = self.loop_body(body);
            self.ivs.pop();
            lowered?;
            self.b.op(OpKind::Yield, vec![], vec![], vec![], &loc);
            let region = self.b.close_region();
            self.b.op_with_regions(OpKind::GridParallel, vec![lo, hi, step], vec![], vec![], vec![region], &loc);
            self.env = saved;
            return Ok(());
        }
        // Sequential: carry the locals the body reassigns.
        let mut assigned = Vec::new();
        self.assigned(body, &mut assigned);
        let carried: Vec<SmolStr> =
            assigned.into_iter().filter(|n| matches!(self.env.get(n), Some(Val::One(_)))).collect();
        let inits: Vec<ValueId> = carried
            .iter()
            .map(|n| match &self.env[n] {
                Val::One(v) => *v,
                Val::Many(_) => unreachable!("filtered above"),
            })
            .collect();
        let mut region_args = vec![iv];
        for (n, &init) in carried.iter().zip(&inits) {
            let a = self.b.value(self.vty(init), Some(n));
            region_args.push(a);
        }
        let saved = self.env.clone();
        self.b.open_region(region_args.clone());
        self.env.insert(var, Val::One(iv));
        for (n, &a) in carried.iter().zip(&region_args[1..]) {
            self.env.insert(n.clone(), Val::One(a));
        }
        self.ivs.push(iv);
        let lowered = self.loop_body(body);
        self.ivs.pop();
        lowered?;
        let mut yields = Vec::new();
        for (n, &init) in carried.iter().zip(&inits) {
            let Some(Val::One(v)) = self.env.get(n).cloned() else {
                return unsupported(format!("`{n}` changes kind inside the loop"), range);
            };
            let want = self.vty(init);
            let v = self.coerce(v, &want, &loc)?;
            if self.vty(v) != want {
                return unsupported(format!("`{n}` changes type inside the loop ({} → {})", want, self.vty(v)), range);
            }
            yields.push(v);
        }
        self.b.op(OpKind::Yield, yields, vec![], vec![], &loc);
        let region = self.b.close_region();
        let mut operands = vec![lo, hi, step];
        operands.extend(&inits);
        let result_types: Vec<Type> = inits.iter().map(|&i| self.vty(i)).collect();
        let mut attrs =
            vec![("kind", Attr::Str(SmolStr::new(if path == "range" { "unrolled" } else { "sequential" })))];
        if let Some(p) = arg("prefetch", 3).and_then(|e| match self.body.expr(e) {
            Expr::Int(v) => Some(*v),
            _ => None,
        }) {
            attrs.push(("prefetch", Attr::Int(p)));
        }
        let results = self.b.op_with_regions(OpKind::For, operands, result_types, attrs, vec![region], &loc);
        self.env = saved;
        for (n, &r) in carried.iter().zip(&results) {
            self.b.name(r, n);
            self.env.insert(n.clone(), Val::One(r));
        }
        Ok(())
    }

    fn index_arg(&mut self, e: Option<ExprId>, loc: &Loc) -> R<ValueId> {
        let Some(e) = e else {
            return unsupported("a missing loop bound", loc.range);
        };
        let v = self.value(e)?;
        match self.vty(v) {
            Type::Index => Ok(v),
            other => unsupported(format!("a loop bound of type {other}"), self.body.expr_range(e)),
        }
    }

    fn if_stmt(&mut self, range: TextRange, branches: &[IfBranch], orelse: Option<&[StmtId]>) -> R<()> {
        let loc = self.loc(range);
        let cond = self.value(branches[0].cond)?;
        if let Type::Tile(_) = self.vty(cond) {
            if branches.len() > 1 || orelse.is_some() {
                return unsupported("`elif`/`else` of a masked region", range);
            }
            // A masked region.
            let mask = match self.mask {
                Some(outer) => {
                    let t = self.vty(cond);
                    let outer = self.coerce(outer, &t, &loc)?;
                    self.b.op1(OpKind::And, vec![outer, cond], t, vec![], &loc)
                }
                None => cond,
            };
            let before = self.env.clone();
            let saved_mask = self.mask.replace(mask);
            self.stmts(&branches[0].body)?;
            self.mask = saved_mask;
            // Locals assigned in the region keep their old value where the mask is off.
            let changed: Vec<(SmolStr, ValueId, ValueId)> = self
                .env
                .iter()
                .filter_map(|(n, v)| match (v, before.get(n)) {
                    (Val::One(new), Some(Val::One(old))) if new != old => Some((n.clone(), *new, *old)),
                    _ => None,
                })
                .collect();
            for (n, new, old) in changed {
                let t = self.vty(new);
                let m = self.coerce(mask, &Type::tile(t.dims().to_vec(), DType::Bool), &loc)?;
                let merged = self.b.op1(OpKind::Select, vec![m, new, old], t, vec![], &loc);
                self.env.insert(n, Val::One(merged));
            }
            return Ok(());
        }
        // A scalar branch: `if c1: ... elif c2: ... else: ...` as nested scf.if.
        let branches: Vec<Branch> =
            branches.iter().map(|b| Branch { cond: b.cond, block: Block::of(&b.body) }).collect();
        let orelse = orelse.map(Block::of);
        self.scalar_if(range, cond, &branches, orelse.as_ref())
    }

    /// A loop body, with `continue` lowered. A `continue` that ends a branch of a scalar
    /// `if` standing in the body makes that branch skip the rest of the body, and the
    /// other branches run it (after their own statements); a bare `continue` drops the
    /// rest. The rest is lowered the same way, so guards may follow one another. A
    /// `continue` anywhere else (deeper in a branch) is not lowered yet.
    fn loop_body(&mut self, body: &[StmtId]) -> R<()> {
        let ends_in_continue =
            |me: &Self, b: &[StmtId]| b.last().is_some_and(|&l| matches!(me.body.stmt(l), Stmt::Continue));
        for (i, &s) in body.iter().enumerate() {
            let Stmt::If { branches, orelse } = self.body.stmt(s) else {
                if matches!(self.body.stmt(s), Stmt::Continue) {
                    return Ok(());
                }
                self.stmt(s)?;
                continue;
            };
            let (branches, orelse) = (branches.clone(), orelse.clone());
            let skips = branches.iter().any(|b| ends_in_continue(self, &b.body))
                || orelse.as_deref().is_some_and(|e| ends_in_continue(self, e));
            if !skips {
                self.stmt(s)?;
                continue;
            }
            let range = self.body.stmt_range(s);
            let rest = &body[i + 1..];
            let block = |me: &Self, b: &[StmtId]| {
                if ends_in_continue(me, b) {
                    Block { body: b[..b.len() - 1].to_vec(), tail: vec![] }
                } else {
                    Block { body: b.to_vec(), tail: rest.to_vec() }
                }
            };
            let lowered: Vec<Branch> =
                branches.iter().map(|b| Branch { cond: b.cond, block: block(self, &b.body) }).collect();
            let orelse = match &orelse {
                Some(e) => block(self, e),
                None => Block { body: vec![], tail: rest.to_vec() },
            };
            let cond = self.value(lowered[0].cond)?;
            if let Type::Tile(_) = self.vty(cond) {
                return unsupported("`continue` in a masked region", range);
            }
            return self.scalar_if(range, cond, &lowered, Some(&orelse));
        }
        Ok(())
    }

    /// A branch's statements, then the loop body's rest it runs (see [`Self::loop_body`]).
    fn block(&mut self, b: &Block) -> R<()> {
        self.stmts(&b.body)?;
        self.loop_body(&b.tail)
    }

    fn scalar_if(&mut self, range: TextRange, cond: ValueId, branches: &[Branch], orelse: Option<&Block>) -> R<()> {
        let loc = self.loc(range);
        let mut assigned = Vec::new();
        for b in branches.iter().map(|b| &b.block).chain(orelse) {
            self.assigned(&b.body, &mut assigned);
            self.assigned(&b.tail, &mut assigned);
        }
        let carried: Vec<SmolStr> =
            assigned.into_iter().filter(|n| matches!(self.env.get(n), Some(Val::One(_)))).collect();
        let before = self.env.clone();
        // then
        self.b.open_region(vec![]);
        self.block(&branches[0].block)?;
        let then_vals = self.carried_values(&carried, &before, &loc)?;
        self.b.op(OpKind::Yield, then_vals, vec![], vec![], &loc);
        let then_region = self.b.close_region();
        self.env = before.clone();
        // else: the remaining elif chain, or the else body
        self.b.open_region(vec![]);
        if branches.len() > 1 {
            let c = self.value(branches[1].cond)?;
            self.scalar_if(range, c, &branches[1..], orelse)?;
        } else if let Some(e) = orelse {
            self.block(e)?;
        }
        let else_vals = self.carried_values(&carried, &before, &loc)?;
        self.b.op(OpKind::Yield, else_vals, vec![], vec![], &loc);
        let else_region = self.b.close_region();
        self.env = before.clone();
        let result_types: Vec<Type> = carried
            .iter()
            .map(|n| match &before[n] {
                Val::One(v) => self.vty(*v),
                Val::Many(_) => unreachable!(),
            })
            .collect();
        let cond = self.truth_value(cond, &loc)?;
        let results =
            self.b.op_with_regions(OpKind::If, vec![cond], result_types, vec![], vec![then_region, else_region], &loc);
        for (n, &r) in carried.iter().zip(&results) {
            self.b.name(r, n);
            self.env.insert(n.clone(), Val::One(r));
        }
        Ok(())
    }

    fn carried_values(&mut self, carried: &[SmolStr], before: &HashMap<SmolStr, Val>, loc: &Loc) -> R<Vec<ValueId>> {
        let mut out = Vec::new();
        for n in carried {
            let Some(Val::One(v)) = self.env.get(n).cloned() else {
                return unsupported(format!("`{n}` changes kind in a branch"), loc.range);
            };
            let Val::One(old) = before[n] else { unreachable!() };
            let want = self.vty(old);
            let v = self.coerce(v, &want, loc)?;
            if self.vty(v) != want {
                return unsupported(format!("`{n}` changes type in a branch ({} → {})", want, self.vty(v)), loc.range);
            }
            out.push(v);
        }
        Ok(out)
    }

    pub(super) fn truth_value(&mut self, v: ValueId, loc: &Loc) -> R<ValueId> {
        match self.vty(v) {
            Type::Scalar(DType::Bool) => Ok(v),
            Type::Scalar(_) | Type::Index => {
                let zero = match self.vty(v) {
                    Type::Index => self.const_index(0, loc),
                    Type::Scalar(d) => self.const_scalar(0.0, d, loc),
                    _ => unreachable!(),
                };
                Ok(self.b.op1(
                    OpKind::Cmp,
                    vec![v, zero],
                    Type::Scalar(DType::Bool),
                    vec![("pred", Attr::Str("ne".into()))],
                    loc,
                ))
            }
            other => unsupported(format!("a branch condition of type {other}"), loc.range),
        }
    }

    // ----- stores ----------------------------------------------------------------------

    /// A store of `value` into `target`, or with `atomic` (`tile.atomic_add`) an addition
    /// into its elements: the store or scatter carries `{atomic = "add"}`.
    pub(super) fn store(&mut self, target: ExprId, value: ValueId, value_expr: ExprId, atomic: bool) -> R<()> {
        let attrs = || if atomic { vec![("atomic", Attr::Str("add".into()))] } else { vec![] };
        let loc = self.eloc(target);
        let Expr::Subscript { value: base, indices } = self.body.expr(target).clone() else { unreachable!() };
        // A scatter by index tiles into a tensor of rank above 1: by element index.
        if let Ty::Tensor(t) | Ty::View(t) = self.ty_of(base).clone() {
            if self.gathers_by_element(t.dims.len(), &indices) {
                let tensor = self.value(base)?;
                let Type::Tensor(tt) = self.vty(tensor) else {
                    return unsupported("a scatter into a non-tensor", loc.range);
                };
                let shape = match self.ty_of(target) {
                    Ty::View(v) | Ty::Tensor(v) => v.dims.clone(),
                    other => return unsupported(format!("a scatter into {other}"), loc.range),
                };
                let flat = self.flat_index(&t.dims, &indices, &shape, &loc)?;
                let v = self.coerce(value, &Type::tile(shape, tt.dtype), &loc)?;
                let mut operands = vec![tensor, flat.index, v];
                operands.extend(flat.mask);
                self.b.op(OpKind::Scatter, operands, vec![], attrs(), &loc);
                return Ok(());
            }
        }
        // A gather-style store: y[i] = v with an index tile.
        if indices.len() == 1 {
            if let Ty::Tile(_) = self.ty_of(indices[0]) {
                let tensor = self.value(base)?;
                let idx = self.value(indices[0])?;
                let idx_t = self.vty(idx);
                let Type::Tensor(t) = self.vty(tensor) else {
                    return unsupported("a scatter into a non-tensor", loc.range);
                };
                let want = Type::tile(idx_t.dims().to_vec(), t.dtype);
                let v = self.coerce(value, &want, &loc)?;
                let mut operands = vec![tensor, idx, v];
                if let Some(m) = self.mask {
                    operands.push(m);
                }
                self.b.op(OpKind::Scatter, operands, vec![], attrs(), &loc);
                return Ok(());
            }
        }
        let view = self.value(target)?;
        let Type::View(vt) = self.vty(view) else {
            return unsupported("a store into something other than a tensor slice", loc.range);
        };
        let want = Type::tile(vt.dims.clone(), vt.dtype);
        let v = self.operand(value, value_expr)?;
        let v = self.coerce(v, &want, &loc)?;
        let v = match policy::elem_of(self.ty_of(base)).cloned() {
            Some(elem) => self.store_conversion(v, view, &elem, &loc),
            None => v,
        };
        let mut operands = vec![view, v];
        if let Some(m) = self.mask {
            let m = self.coerce(m, &Type::tile(vt.dims.clone(), DType::Bool), &loc)?;
            operands.push(m);
        }
        self.b.op(OpKind::Store, operands, vec![], attrs(), &loc);
        Ok(())
    }
}
