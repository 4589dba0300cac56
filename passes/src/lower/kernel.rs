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
mod gathers;
mod policies;
mod stmts;
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
        uses_linear_id: false,
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
    let extent = lw.linear_extent.take().filter(|_| lw.uses_linear_id);
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
    /// Whether the kernel calls `tile.linear_id()`: only then does a gather size the grid
    /// (an embedding lookup `E[ids * D + cols]` inside `tile.parallel` loops has its grid).
    uses_linear_id: bool,
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
                    // Bitwise on integers, logical on bools (NumPy's `~`).
                    UnaryOp::Invert => OpKind::Not,
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
            BinOp::BitXor => OpKind::Xor,
            BinOp::Shl => OpKind::Shl,
            BinOp::Shr => OpKind::Shr,
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
        let Some(pred) = op.predicate() else {
            return unsupported(format!("`{}` in a kernel", op.symbol()), loc.range);
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

    /// `tile.store(dst, v)`, or with `atomic`, `tile.atomic_add(dst, v)`.
    fn store_to(&mut self, dst: ExprId, v: ValueId, value_expr: ExprId, atomic: bool) -> R<()> {
        if !matches!(self.body.expr(dst), Expr::Subscript { .. }) {
            return unsupported("tile.store into something other than a tensor slice", self.body.expr_range(dst));
        }
        self.store(dst, v, value_expr, atomic)
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
