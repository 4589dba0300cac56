//! A checked `@kernel` → Graph IR.
//!
//! The frontend's AST has mutable locals; this builds SSA over structured control flow:
//! a local reassigned in a loop becomes an `iter_args` value, one assigned in a branch
//! an `scf.if` result. A tile-valued `if` is a masked region: its loads and stores take
//! the mask, and locals it assigns are merged with `arith.select`. Schedule keys stay
//! symbolic (`sched.param`) until Schedule IR specializes the kernel.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::dims::Atom;
use tessera_frontend::check::{DType, Dim, Inference, Resolution, Signature, Ty};
use tessera_frontend::syntax::ast::*;
use tessera_frontend::text::TextRange;

use crate::ir::policy;
use crate::ir::*;

mod calls;
mod policies;
mod values;

pub use crate::error::LowerError;

type R<T> = Result<T, LowerError>;

#[derive(Clone, Debug)]
enum Val {
    One(ValueId),
    Many(Vec<ValueId>),
}

pub fn kernel_to_graph(name: &str, ast: &FunctionDef, sig: &Signature, inf: &Inference) -> R<Func> {
    let loc = Loc::new(name, ast.name_range);
    let mut func = Func::new(name, FuncKind::Kernel, Level::Graph, loc);
    let mut params = HashMap::new();
    for p in &sig.params {
        let ty = match ir_type(&p.ty) {
            Some(t) => t,
            None => match &p.ty {
                Ty::Bool(_) => Type::Scalar(DType::Bool),
                Ty::Float(_) => Type::Scalar(DType::F32),
                other => {
                    return Err(LowerError {
                        message: format!("parameter `{}` of type {other} cannot be passed to a kernel", p.name),
                        range: p.range,
                    })
                }
            },
        };
        let v = func.new_value(ty, Some(&p.name));
        func.params.push(v);
        params.insert(SmolStr::new(&p.name), v);
    }
    if let Some(schedule) = &sig.schedule {
        func.set_attr(
            "decorator",
            Attr::Str(SmolStr::new(sig.decorators.first().map(String::as_str).unwrap_or("kernel"))),
        );
        if schedule.autotuned {
            let keys: Vec<String> = schedule.space.clone();
            func.set_attr("autotune", Attr::Str(SmolStr::new(keys.join(","))));
        }
    }
    let mut lw = Lower {
        name: SmolStr::new(name),
        body: &ast.arena,
        sig,
        inf,
        b: Builder::new(&mut func),
        env: HashMap::new(),
        params,
        symbols: HashMap::new(),
        mask: None,
        linear_extent: None,
        seed: None,
        sites: 0,
        ivs: Vec::new(),
    };
    lw.bind_symbols(ast)?;
    lw.stmts(&ast.body)?;
    let returns_value = lw.b.func.ops.last().is_some_and(|op| op.kind == OpKind::Return);
    if !returns_value {
        let loc = lw.loc(ast.name_range);
        lw.b.op(OpKind::Return, vec![], vec![], vec![], &loc);
    }
    let extent = lw.linear_extent.take();
    let seed = lw.seed.take();
    lw.b.finish();
    if let Some(extent) = extent {
        func.set_attr("linear_extent", Attr::Dims(vec![extent]));
    }
    // The run's seed, for stochastic rounding: a hidden last parameter (docs/ir.md).
    if let Some(seed) = seed {
        func.set_attr(policy::SEED_ATTR, Attr::Int(func.params.len() as i64));
        func.params.push(seed);
    }
    Ok(func)
}

/// The IR type of a checked value type (None for compile-time-only values).
pub fn ir_type(ty: &Ty) -> Option<Type> {
    Some(match ty {
        Ty::Tensor(t) | Ty::DistTensor(t) => {
            Type::Tensor(TensorType { dims: t.dims.clone(), dtype: t.elem.dtype, policies: t.elem.policies.clone() })
        }
        Ty::View(t) => Type::View(ViewType { dims: t.dims.clone(), dtype: t.elem.dtype }),
        Ty::Tile(t) => Type::tile(t.dims.clone(), t.elem.dtype),
        Ty::Shared(s) => Type::Smem(SmemType {
            dims: s.dims.clone(),
            dtype: s.dtype,
            swizzle: match s.swizzle {
                tessera_frontend::check::Swizzle::Xor => Swizzle::Xor,
                tessera_frontend::check::Swizzle::None => Swizzle::None,
            },
            pad: s.pad.max(0) as u32,
            stages: 1,
        }),
        Ty::Int(_) => Type::Index,
        Ty::Scalar(e) => Type::Scalar(e.dtype),
        Ty::Float(_) => Type::Scalar(DType::F32),
        Ty::Bool(_) => Type::Scalar(DType::Bool),
        _ => return None,
    })
}

struct Lower<'a, 'f> {
    name: SmolStr,
    body: &'a Body,
    sig: &'a Signature,
    inf: &'a Inference,
    b: Builder<'f>,
    env: HashMap<SmolStr, Val>,
    params: HashMap<SmolStr, ValueId>,
    /// Dim symbols as index values (`tile.dim` of the first tensor that has them).
    symbols: HashMap<String, ValueId>,
    /// The mask of the enclosing masked region.
    mask: Option<ValueId>,
    /// The extent a `tile.linear_id()` grid covers (the gathered tensor's length).
    linear_extent: Option<Dim>,
    /// The hidden run-seed parameter, once a stochastic conversion needs it.
    seed: Option<ValueId>,
    /// Stochastic conversions so far: each draws from its own stream (`site`).
    sites: i64,
    /// Induction variables of the enclosing loops, outermost first.
    ivs: Vec<ValueId>,
}

fn unsupported<T>(what: impl Into<String>, range: TextRange) -> R<T> {
    Err(LowerError { message: what.into(), range })
}

impl Lower<'_, '_> {
    fn loc(&self, range: TextRange) -> Loc {
        Loc::new(&self.name, range)
    }

    fn eloc(&self, e: ExprId) -> Loc {
        self.loc(self.body.expr_range(e))
    }

    fn ty_of(&self, e: ExprId) -> &Ty {
        self.inf.type_of(e)
    }

    fn vty(&self, v: ValueId) -> Type {
        self.b.func.ty(v).clone()
    }

    /// `%M = tile.dim %A {axis = 0}` for each symbol of the signature (and `int`
    /// parameters are their own values).
    fn bind_symbols(&mut self, ast: &FunctionDef) -> R<()> {
        for p in &self.sig.params {
            let v = self.params[p.name.as_str()];
            match &p.ty {
                Ty::Tensor(t) => {
                    for (axis, d) in t.dims.iter().enumerate() {
                        if let Some(s) = d.as_sym() {
                            if !self.symbols.contains_key(s) {
                                let loc = self.loc(p.name_range);
                                let dv = self.b.op1(
                                    OpKind::TensorDim,
                                    vec![v],
                                    Type::Index,
                                    vec![("axis", Attr::Int(axis as i64))],
                                    &loc,
                                );
                                self.b.name(dv, s);
                                self.symbols.insert(s.to_string(), dv);
                            }
                        }
                    }
                }
                Ty::Int(_) => {
                    self.symbols.insert(p.name.clone(), v);
                }
                _ => {}
            }
        }
        let _ = ast;
        Ok(())
    }

    fn const_index(&mut self, v: i64, loc: &Loc) -> ValueId {
        let c = self.b.op1(OpKind::Constant, vec![], Type::Index, vec![("value", Attr::Int(v))], loc);
        self.b.name(c, &format!("c{}", v.unsigned_abs()));
        c
    }

    fn const_scalar(&mut self, v: f64, dtype: DType, loc: &Loc) -> ValueId {
        let value = if dtype.is_float() { Attr::float(v) } else { Attr::Int(v as i64) };
        self.b.op1(OpKind::Constant, vec![], Type::Scalar(dtype), vec![("value", value)], loc)
    }

    /// An index value for a dim expression (symbols via their bindings).
    fn dim_value(&mut self, d: &Dim, loc: &Loc) -> R<ValueId> {
        if let Some(c) = d.as_const() {
            return Ok(self.const_index(c, loc));
        }
        if let Some(s) = d.as_sym() {
            if let Some(&v) = self.symbols.get(s) {
                return Ok(v);
            }
            if let Some(Val::One(v)) = self.env.get(s) {
                return Ok(*v);
            }
            let p = self.b.op1(OpKind::SchedParam, vec![], Type::Index, vec![("key", Attr::Str(SmolStr::new(s)))], loc);
            self.b.name(p, s);
            return Ok(p);
        }
        // A product, sum or quotient of symbols (`B*H`, `N//2`): computed from their values.
        let mut sum: Option<ValueId> = None;
        for (mono, coef) in d.monomials() {
            let mut term = (coef != 1 || mono.is_empty()).then(|| self.const_index(coef, loc));
            for (atom, power) in &mono {
                let factor = match atom {
                    Atom::Sym(s) => self.dim_value(&Dim::sym(s), loc)?,
                    Atom::FloorDiv(a, b) | Atom::Mod(a, b) => {
                        let kind = if matches!(atom, Atom::FloorDiv(..)) { OpKind::FloorDiv } else { OpKind::Rem };
                        let (a, b) = (self.dim_value(a, loc)?, self.dim_value(b, loc)?);
                        self.b.op1(kind, vec![a, b], Type::Index, vec![], loc)
                    }
                };
                for _ in 0..*power {
                    term = Some(match term {
                        Some(t) => self.b.op1(OpKind::Mul, vec![t, factor], Type::Index, vec![], loc),
                        None => factor,
                    });
                }
            }
            let term = term.expect("a term has a coefficient or a factor");
            sum = Some(match sum {
                Some(s) => self.b.op1(OpKind::Add, vec![s, term], Type::Index, vec![], loc),
                None => term,
            });
        }
        Ok(sum.unwrap_or_else(|| self.const_index(0, loc)))
    }

    // ----- statements ----------------------------------------------------------------

    fn stmts(&mut self, stmts: &[StmtId]) -> R<()> {
        for &s in stmts {
            self.stmt(s)?;
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
                    return self.store(target, v, value);
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
                    return self.store(target, combined, value);
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
            Stmt::Break | Stmt::Continue => unsupported("`break`/`continue` in a kernel loop", range),
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
            let lowered = self.stmts(body);
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
        let lowered = self.stmts(body);
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
        self.scalar_if(range, cond, branches, orelse)
    }

    fn scalar_if(
        &mut self,
        range: TextRange,
        cond: ValueId,
        branches: &[IfBranch],
        orelse: Option<&[StmtId]>,
    ) -> R<()> {
        let loc = self.loc(range);
        let mut assigned = Vec::new();
        for b in branches {
            self.assigned(&b.body, &mut assigned);
        }
        if let Some(e) = orelse {
            self.assigned(e, &mut assigned);
        }
        let carried: Vec<SmolStr> =
            assigned.into_iter().filter(|n| matches!(self.env.get(n), Some(Val::One(_)))).collect();
        let before = self.env.clone();
        // then
        self.b.open_region(vec![]);
        self.stmts(&branches[0].body)?;
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
            self.stmts(e)?;
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

    fn truth_value(&mut self, v: ValueId, loc: &Loc) -> R<ValueId> {
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

    fn store(&mut self, target: ExprId, value: ValueId, value_expr: ExprId) -> R<()> {
        let loc = self.eloc(target);
        let Expr::Subscript { value: base, indices } = self.body.expr(target).clone() else { unreachable!() };
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
                self.b.op(OpKind::Scatter, operands, vec![], vec![], &loc);
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
        self.b.op(OpKind::Store, operands, vec![], vec![], &loc);
        Ok(())
    }

    // ----- expressions -----------------------------------------------------------------

    fn value(&mut self, e: ExprId) -> R<ValueId> {
        match self.expr(e)? {
            Val::One(v) => Ok(v),
            Val::Many(_) => unsupported("a tuple where one value is expected", self.body.expr_range(e)),
        }
    }

    /// A value used as an operand: slices are loaded, shared buffers read.
    fn operand(&mut self, v: ValueId, e: ExprId) -> R<ValueId> {
        let loc = self.eloc(e);
        match self.vty(v) {
            Type::View(view) => {
                let mut operands = vec![v];
                if let Some(m) = self.mask {
                    let m = self.coerce(m, &Type::tile(view.dims.clone(), DType::Bool), &loc)?;
                    operands.push(m);
                }
                Ok(self.b.op1(OpKind::Load, operands, Type::tile(view.dims, view.dtype), vec![], &loc))
            }
            Type::Smem(s) => Ok(self.b.op1(OpKind::LoadShared, vec![v], Type::tile(s.dims, s.dtype), vec![], &loc)),
            _ => Ok(v),
        }
    }

    fn expr(&mut self, e: ExprId) -> R<Val> {
        let range = self.body.expr_range(e);
        let loc = self.loc(range);
        match self.body.expr(e).clone() {
            Expr::Name(n) => self.name(e, &n),
            Expr::Int(v) => Ok(Val::One(self.const_index(v, &loc))),
            Expr::Float(f) => Ok(Val::One(self.const_scalar(f.get(), DType::F32, &loc))),
            Expr::Bool(b) => Ok(Val::One(self.b.op1(
                OpKind::Constant,
                vec![],
                Type::Scalar(DType::Bool),
                vec![("value", Attr::Bool(b))],
                &loc,
            ))),
            Expr::Paren(inner) => self.expr(inner),
            Expr::Tuple(items) => {
                let mut vs = Vec::new();
                for i in items {
                    vs.push(self.value(i)?);
                }
                Ok(Val::Many(vs))
            }
            Expr::Attribute { object, name, .. } => self.attribute(e, object, &name),
            Expr::Subscript { value, indices } => self.subscript(e, value, &indices),
            Expr::Call { func, args } => self.call(e, func, &args),
            Expr::Binary { op, lhs, rhs } => {
                let (l, r) = (self.value(lhs)?, self.value(rhs)?);
                if op == BinOp::MatMul {
                    let (l, r) = (self.operand(l, lhs)?, self.operand(r, rhs)?);
                    let acc = self.accum_policy(&[lhs, rhs]);
                    return Ok(Val::One(self.dot(e, l, r, None, acc)?));
                }
                let v = self.binary(op, l, r, e, range)?;
                self.mark_saturating(e, v);
                Ok(Val::One(v))
            }
            Expr::Unary { op, operand } => {
                let v = self.value(operand)?;
                let v = self.operand(v, operand)?;
                let t = self.vty(v);
                let kind = match op {
                    UnaryOp::Neg => OpKind::Neg,
                    UnaryOp::Not => OpKind::Not,
                    UnaryOp::Pos => return Ok(Val::One(v)),
                    UnaryOp::Invert => return unsupported("`~` in a kernel", range),
                };
                Ok(Val::One(self.b.op1(kind, vec![v], t, vec![], &loc)))
            }
            Expr::Compare { op, lhs, rhs } => {
                let (l, r) = (self.value(lhs)?, self.value(rhs)?);
                Ok(Val::One(self.compare(op, l, r, e)?))
            }
            Expr::BoolOp { op, lhs, rhs } => {
                let (l, r) = (self.value(lhs)?, self.value(rhs)?);
                let kind = if op == BoolOp::And { OpKind::And } else { OpKind::Or };
                let t = self.result_type(e)?;
                let (l, r) = (self.coerce(l, &t, &loc)?, self.coerce(r, &t, &loc)?);
                Ok(Val::One(self.b.op1(kind, vec![l, r], t, vec![], &loc)))
            }
            Expr::IfExpr { cond, then, otherwise } => {
                let c = self.value(cond)?;
                let t = self.result_type(e)?;
                let (a, b) = (self.value(then)?, self.value(otherwise)?);
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let c = match &t {
                    Type::Tile(tt) => self.coerce(c, &Type::tile(tt.dims.clone(), DType::Bool), &loc)?,
                    _ => self.truth_value(c, &loc)?,
                };
                Ok(Val::One(self.b.op1(OpKind::Select, vec![c, a, b], t, vec![], &loc)))
            }
            other => unsupported(format!("this expression in a kernel ({})", expr_kind(&other)), range),
        }
    }

    fn result_type(&self, e: ExprId) -> R<Type> {
        ir_type(self.ty_of(e)).ok_or_else(|| LowerError {
            message: format!("a value of type {}", self.ty_of(e)),
            range: self.body.expr_range(e),
        })
    }

    fn name(&mut self, e: ExprId, n: &str) -> R<Val> {
        if let Some(v) = self.env.get(n) {
            return Ok(v.clone());
        }
        match self.inf.resolution(e) {
            Some(Resolution::Param(_)) => Ok(Val::One(self.params[n])),
            Some(Resolution::Symbol(_)) => {
                let loc = self.eloc(e);
                Ok(Val::One(self.dim_value(&Dim::sym(n), &loc)?))
            }
            Some(Resolution::Constant(_)) | Some(Resolution::Builtin(_)) | Some(Resolution::Import(_)) => {
                // A compile-time value: materialize numbers, leave the rest to the caller.
                let loc = self.eloc(e);
                match self.ty_of(e).clone() {
                    Ty::Int(Some(d)) if d.is_const() => Ok(Val::One(self.const_index(d.as_const().unwrap(), &loc))),
                    Ty::Float(Some(f)) => Ok(Val::One(self.const_scalar(f.get(), DType::F32, &loc))),
                    Ty::Bool(Some(b)) => Ok(Val::One(self.b.op1(
                        OpKind::Constant,
                        vec![],
                        Type::Scalar(DType::Bool),
                        vec![("value", Attr::Bool(b))],
                        &loc,
                    ))),
                    other => unsupported(format!("`{n}` ({other}) as a runtime value"), self.body.expr_range(e)),
                }
            }
            _ => unsupported(format!("the name `{n}`"), self.body.expr_range(e)),
        }
    }

    fn attribute(&mut self, e: ExprId, object: ExprId, name: &str) -> R<Val> {
        let loc = self.eloc(e);
        match self.ty_of(object).clone() {
            Ty::Context => match self.ty_of(e).clone() {
                Ty::Int(Some(d)) => Ok(Val::One(self.dim_value(&d, &loc)?)),
                other => unsupported(format!("ctx.{name} of type {other}"), loc.range),
            },
            Ty::Tile(_) | Ty::View(_) | Ty::Shared(_) | Ty::Tensor(_) if name == "T" => {
                let v = self.value(object)?;
                let v = self.operand(v, object)?;
                let t = self.result_type(e)?;
                Ok(Val::One(self.b.op1(OpKind::Transpose, vec![v], t, vec![], &loc)))
            }
            _ => match self.ty_of(e).clone() {
                Ty::Int(Some(d)) => Ok(Val::One(self.dim_value(&d, &loc)?)),
                Ty::Float(Some(f)) => Ok(Val::One(self.const_scalar(f.get(), DType::F32, &loc))),
                Ty::Tuple(items) if name == "shape" => {
                    let mut vs = Vec::new();
                    for item in items {
                        let Ty::Int(Some(d)) = item else {
                            return unsupported("a shape entry", loc.range);
                        };
                        vs.push(self.dim_value(&d, &loc)?);
                    }
                    Ok(Val::Many(vs))
                }
                other => unsupported(format!("`.{name}` ({other})"), loc.range),
            },
        }
    }

    fn binary(&mut self, op: BinOp, l: ValueId, r: ValueId, e: ExprId, range: TextRange) -> R<ValueId> {
        let loc = self.loc(range);
        let (l, r) = (self.operand(l, e)?, self.operand(r, e)?);
        let kind = match op {
            BinOp::Add => OpKind::Add,
            BinOp::Sub => OpKind::Sub,
            BinOp::Mul => OpKind::Mul,
            BinOp::Div => OpKind::Div,
            BinOp::FloorDiv => OpKind::FloorDiv,
            BinOp::Mod => OpKind::Rem,
            BinOp::Pow => OpKind::Pow,
            BinOp::BitAnd => OpKind::And,
            BinOp::BitOr => OpKind::Or,
            _ => return unsupported(format!("`{}` in a kernel", op.symbol()), range),
        };
        let (lt, rt) = (self.vty(l), self.vty(r));
        let target = match (&lt, &rt) {
            (Type::Index, Type::Index) => {
                if op == BinOp::Div {
                    let f = Type::Scalar(DType::F32);
                    let (l, r) = (self.coerce(l, &f, &loc)?, self.coerce(r, &f, &loc)?);
                    return Ok(self.b.op1(kind, vec![l, r], f, vec![], &loc));
                }
                Type::Index
            }
            (Type::Tile(a), Type::Tile(b)) => {
                let dims = broadcast_dims(&a.dims, &b.dims)
                    .ok_or_else(|| LowerError { message: format!("broadcasting {lt} with {rt}"), range })?;
                let dtype = if a.dtype == b.dtype {
                    a.dtype
                } else {
                    self.result_type(e).ok().and_then(|t| t.dtype()).unwrap_or(a.dtype)
                };
                Type::tile(dims, dtype)
            }
            (Type::Tile(a), _) | (_, Type::Tile(a)) => Type::tile(a.dims.clone(), a.dtype),
            (Type::Scalar(a), _) | (_, Type::Scalar(a)) => Type::Scalar(*a),
            _ => return unsupported(format!("`{}` on {lt} and {rt}", op.symbol()), range),
        };
        let (l, r) = (self.coerce(l, &target, &loc)?, self.coerce(r, &target, &loc)?);
        Ok(self.b.op1(kind, vec![l, r], target, vec![], &loc))
    }

    fn compare(&mut self, op: CmpOp, l: ValueId, r: ValueId, e: ExprId) -> R<ValueId> {
        let loc = self.eloc(e);
        let (l, r) = (self.operand(l, e)?, self.operand(r, e)?);
        let pred = match op {
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            _ => return unsupported(format!("`{}` in a kernel", op.symbol()), loc.range),
        };
        let (lt, rt) = (self.vty(l), self.vty(r));
        let (operand_ty, result_ty) = match (&lt, &rt) {
            (Type::Tile(a), Type::Tile(b)) => {
                let dims = broadcast_dims(&a.dims, &b.dims)
                    .ok_or_else(|| LowerError { message: "comparison shapes".into(), range: loc.range })?;
                (Type::tile(dims.clone(), a.dtype), Type::tile(dims, DType::Bool))
            }
            (Type::Tile(a), _) | (_, Type::Tile(a)) => {
                (Type::tile(a.dims.clone(), a.dtype), Type::tile(a.dims.clone(), DType::Bool))
            }
            (Type::Index, Type::Index) => (Type::Index, Type::Scalar(DType::Bool)),
            (Type::Scalar(d), _) | (_, Type::Scalar(d)) => (Type::Scalar(*d), Type::Scalar(DType::Bool)),
            _ => return unsupported("this comparison", loc.range),
        };
        let (l, r) = (self.coerce(l, &operand_ty, &loc)?, self.coerce(r, &operand_ty, &loc)?);
        Ok(self.b.op1(OpKind::Cmp, vec![l, r], result_ty, vec![("pred", Attr::Str(SmolStr::new(pred)))], &loc))
    }

    /// `acc + a @ b`; `policy` is the operands' `@accum(T)` (the `acc = T` attribute).
    fn dot(&mut self, e: ExprId, a: ValueId, b: ValueId, acc: Option<ValueId>, policy: Option<DType>) -> R<ValueId> {
        let loc = self.eloc(e);
        let result = self.result_type(e)?;
        let acc = match acc {
            Some(c) => self.coerce(c, &result, &loc)?,
            None => self.b.op1(OpKind::Full, vec![], result.clone(), vec![("value", Attr::float(0.0))], &loc),
        };
        let attrs = policy.map(|t| vec![(policy::ACC, Attr::DType(t))]).unwrap_or_default();
        Ok(self.b.op1(OpKind::Dot, vec![a, b, acc], result, attrs, &loc))
    }

    /// Broadcasts a row vector `[M]` against `[M, N]` (as `v[:, None]`).
    fn coerce_row(&mut self, row: ValueId, to: &Type, loc: &Loc) -> R<ValueId> {
        let rt = self.vty(row);
        let mut dims = rt.dims().to_vec();
        dims.push(Dim::constant(1));
        let dtype = rt.dtype().unwrap();
        let col = self.b.op1(OpKind::ExpandDims, vec![row], Type::tile(dims, dtype), vec![("axis", Attr::Int(1))], loc);
        self.coerce(col, to, loc)
    }

    fn store_to(&mut self, dst: ExprId, v: ValueId, value_expr: ExprId) -> R<()> {
        if matches!(self.body.expr(dst), Expr::Subscript { .. }) {
            self.store(dst, v, value_expr)
        } else {
            unsupported("tile.store into something other than a tensor slice", self.body.expr_range(dst))
        }
    }
}

fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let x = (i + a.len()).checked_sub(rank).map(|j| &a[j]);
        let y = (i + b.len()).checked_sub(rank).map(|j| &b[j]);
        out.push(match (x, y) {
            (Some(x), None) => x.clone(),
            (None, Some(y)) => y.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) if x.as_const() == Some(1) => y.clone(),
            (Some(x), Some(y)) if y.as_const() == Some(1) => x.clone(),
            _ => return None,
        });
    }
    Some(out)
}

fn expr_kind(e: &Expr) -> &'static str {
    match e {
        Expr::List(_) => "a list",
        Expr::Dict(_) => "a dict",
        Expr::Str(_) => "a string",
        Expr::Slice { .. } => "a slice",
        Expr::NoneLit => "None",
        _ => "this expression",
    }
}
