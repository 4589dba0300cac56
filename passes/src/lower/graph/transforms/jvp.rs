//! `jvp(f, primals, tangents)`: forward-mode differentiation of `f`'s traced graph.
//!
//! Every op is emitted twice into the caller's graph: the primal op as it is, and the
//! ops of its tangent rule (the derivative of the op applied to its operands'
//! tangents). Only float tensors have tangents; a value no tangent reaches has a zero
//! tangent, kept symbolic (no op) until an output needs it. The rules are exact
//! derivatives written per op (the same formulas as the reverse-mode rules of
//! `crate::autodiff`, applied forwards); an op with no rule is refused with its name.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::syntax::ast::{Arg, ExprId};
use tessera_frontend::text::TextRange;

use super::super::{unsupported, Body, Val, R};
use super::{constant_of, with_dims};
use crate::ir::*;

struct Jvp {
    tag: SmolStr,
    range: TextRange,
    /// Traced value → (the caller's primal value, its tangent; None: zero).
    map: HashMap<ValueId, (ValueId, Option<ValueId>)>,
}

impl Body<'_, '_, '_> {
    /// `jvp(f, primals, tangents)` → `(f(*primals), J·tangents)`.
    pub(in crate::lower::graph) fn jvp_call(&mut self, args: &[Arg], range: TextRange) -> R<Val> {
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let arg = |name: &str, pos: usize| {
            args.iter()
                .find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name))
                .map(|a| a.value)
                .or_else(|| positional.get(pos).copied())
        };
        let (Some(f), Some(p), Some(t)) = (arg("f", 0), arg("primals", 1), arg("tangents", 2)) else {
            return unsupported("`jvp` needs `f`, `primals` and `tangents`", range);
        };
        let of = match self.ty_of(f) {
            tessera_frontend::check::Ty::Function(n) => n.clone(),
            other => return unsupported(format!("`jvp` of {other}"), self.range(f)),
        };
        let many = |v: Val| match v {
            Val::One(x) => vec![x],
            Val::Many(xs) => xs,
            // A KV cache is not a tangent (the checker refuses it).
            Val::None | Val::State(_) | Val::Tuple(_) => vec![],
        };
        let tangents = many(self.expr(t)?);
        // `f`'s arguments are the primals' items, by position: the tuple expression's
        // items as call arguments.
        let items = self.tuple_args(p)?;
        let traced = self.trace(&of, &items, range, &|_, _| Ok(None))?;
        if traced.inputs.len() != tangents.len() {
            return unsupported(
                format!("`jvp({of})` got {} tangents for {} primals", tangents.len(), traced.inputs.len()),
                range,
            );
        }
        let mut jv = Jvp { tag: SmolStr::new(&of), range, map: HashMap::new() };
        for (&(s, v), &t) in traced.inputs.iter().zip(&tangents) {
            if self.vty(t) != self.vty(v) {
                return unsupported(
                    format!("`jvp({of})`: a tangent is {} but its primal is {}", self.vty(t), self.vty(v)),
                    range,
                );
            }
            // A zero tangent (`zeros(...)`) stays symbolic: no ops for it, and none that
            // the plan cannot run (a matmul of a constant).
            let zero = constant_of(self.g.b.func, t) == Some(0.0);
            jv.map.insert(s, (v, if zero { None } else { Some(t) }));
        }
        jv.map.insert(traced.token, (self.g.token, None));
        for &id in &traced.func.body.ops {
            let op = traced.func.op(id).clone();
            if op.kind == OpKind::Return || op.kind == OpKind::EffectToken {
                continue;
            }
            self.jvp_op(&traced.func, &op, &mut jv)?;
            // Primal values keep their names in `f`; tangents are named `<name>_dot`.
            for &r in &op.results {
                if let (Some(name), Some(&(p, t))) = (traced.func.values[r.0 as usize].name.clone(), jv.map.get(&r)) {
                    if self.g.b.func.values[p.0 as usize].name.is_none() {
                        self.g.b.name(p, &name);
                    }
                    if let Some(t) = t.filter(|t| self.g.b.func.values[t.0 as usize].name.is_none()) {
                        self.g.b.name(t, &format!("{name}_dot"));
                    }
                }
            }
        }
        let [out] = traced.outputs[..] else {
            return unsupported(format!("`jvp({of})` needs `{of}` to return one tensor"), range);
        };
        let Some(&(y, ty)) = jv.map.get(&out) else {
            return unsupported(format!("`jvp({of})`: the output has no value"), range);
        };
        let loc = self.loc(range);
        let ty = match ty {
            Some(t) => t,
            None => {
                let t = self.vty(y);
                self.jemit(&jv, OpKind::Fill, vec![], t, vec![("value", Attr::float(0.0))], &loc)
            }
        };
        Ok(Val::Many(vec![y, ty]))
    }

    /// The items of a tuple expression as positional call arguments (a parenthesized
    /// or bracketed literal; anything else is one argument per value it lowers to).
    fn tuple_args(&mut self, e: ExprId) -> R<Vec<Arg>> {
        use tessera_frontend::syntax::ast::Expr;
        let mut e = e;
        while let Expr::Paren(inner) = self.def.arena.expr(e) {
            e = *inner;
        }
        match self.def.arena.expr(e).clone() {
            Expr::Tuple(items) | Expr::List(items) => {
                Ok(items.into_iter().map(|value| Arg { name: None, value }).collect())
            }
            _ => unsupported("`jvp`'s primals as a tuple literal `(x, y)`", self.range(e)),
        }
    }

    fn jemit(
        &mut self,
        jv: &Jvp,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> ValueId {
        let tag = jv.tag.clone();
        self.emit_tagged(kind, operands, vec![ty], attrs, ("jvp", &tag), loc)[0]
    }

    fn jbin(&mut self, jv: &Jvp, kind: OpKind, a: ValueId, b: ValueId, loc: &Loc) -> ValueId {
        let t = self.vty(a);
        self.jemit(jv, kind, vec![a, b], t, vec![], loc)
    }

    /// The scalar `value` broadcast to `like`'s type.
    fn jconst(&mut self, jv: &Jvp, value: f64, like: &Type, loc: &Loc) -> ValueId {
        let dtype = like.dtype().unwrap_or(DType::F32);
        let s = self.jemit(jv, OpKind::Constant, vec![], Type::Scalar(dtype), vec![("value", Attr::float(value))], loc);
        self.jemit(jv, OpKind::GBroadcast, vec![s], like.clone(), vec![], loc)
    }

    fn jzero(&mut self, jv: &Jvp, like: &Type, loc: &Loc) -> ValueId {
        self.jemit(jv, OpKind::Fill, vec![], like.clone(), vec![("value", Attr::float(0.0))], loc)
    }

    /// `where(a <pred> b, then, otherwise)`.
    fn jselect(
        &mut self,
        jv: &Jvp,
        (a, pred, b): (ValueId, &str, ValueId),
        then: ValueId,
        otherwise: ValueId,
        loc: &Loc,
    ) -> ValueId {
        let mask = with_dims(
            &Type::Tensor(TensorType { dims: vec![], dtype: DType::Bool, policies: vec![] }),
            self.vty(a).dims().to_vec(),
        );
        let c = self.jemit(jv, OpKind::Cmp, vec![a, b], mask, vec![("pred", Attr::Str(SmolStr::new(pred)))], loc);
        let t = self.vty(then);
        self.jemit(jv, OpKind::Select, vec![c, then, otherwise], t, vec![], loc)
    }

    /// `t * factor`, the tangent of an elementwise function with derivative `factor`.
    fn scale(&mut self, jv: &Jvp, t: ValueId, factor: ValueId, loc: &Loc) -> ValueId {
        self.jbin(jv, OpKind::Mul, t, factor, loc)
    }

    fn refuse_jvp<T>(&self, jv: &Jvp, op: &Op, why: &str) -> R<T> {
        unsupported(
            format!("`jvp({})`: `{}` (in `{}`) has no forward-mode rule{why}", jv.tag, op.kind.name(), jv.tag),
            jv.range,
        )
    }

    /// Emits the primal op and its tangent rule.
    fn jvp_op(&mut self, f: &Func, op: &Op, jv: &mut Jvp) -> R<()> {
        let loc = op.loc.clone();
        let mut prim = Vec::new();
        let mut tan = Vec::new();
        for &o in &op.operands {
            let Some(&(p, t)) = jv.map.get(&o) else { return self.refuse_jvp(jv, op, ": an operand has no value") };
            prim.push(p);
            tan.push(t);
        }
        let types: Vec<Type> = op.results.iter().map(|&r| f.ty(r).clone()).collect();
        // The primal op, unchanged (effects in order on the caller's chain).
        let results = self.g.b.op(op.kind, prim.clone(), types.clone(), op.attrs.clone(), &loc);
        for (r, t) in results.iter().zip(&types) {
            if *t == Type::Token {
                self.g.token = *r;
            }
        }
        for (&r, &nr) in op.results.iter().zip(&results) {
            jv.map.insert(r, (nr, None));
        }
        if tan.iter().all(Option::is_none) {
            return Ok(());
        }
        let x = |i: usize| prim[i];
        let r = results.first().copied();
        let set = |jv: &mut Jvp, t: Option<ValueId>| {
            if let (Some(&res), Some(t)) = (op.results.first(), t) {
                if let Some(e) = jv.map.get_mut(&res) {
                    e.1 = Some(t);
                }
            }
        };
        let rty = types.first().cloned().unwrap_or(Type::Token);
        let float = matches!(&rty, Type::Tensor(t) if t.dtype.is_float());
        let zero_or = |body: &mut Self, jv: &Jvp, t: Option<ValueId>, like: ValueId| match t {
            Some(t) => t,
            None => {
                let ty = body.vty(like);
                body.jzero(jv, &ty, &loc)
            }
        };
        match op.kind {
            OpKind::Add | OpKind::Sub => {
                let t = match (tan[0], tan[1]) {
                    (Some(a), Some(b)) => self.jbin(jv, op.kind, a, b, &loc),
                    (Some(a), None) => a,
                    (None, Some(b)) if op.kind == OpKind::Add => b,
                    (None, Some(b)) => {
                        let ty = self.vty(b);
                        self.jemit(jv, OpKind::Neg, vec![b], ty, vec![], &loc)
                    }
                    (None, None) => unreachable!("checked above"),
                };
                set(jv, Some(t));
            }
            OpKind::Mul => {
                let a = tan[0].map(|ta| self.jbin(jv, OpKind::Mul, ta, x(1), &loc));
                let b = tan[1].map(|tb| self.jbin(jv, OpKind::Mul, x(0), tb, &loc));
                let t = match (a, b) {
                    (Some(a), Some(b)) => self.jbin(jv, OpKind::Add, a, b, &loc),
                    (a, b) => a.or(b).expect("a tangent"),
                };
                set(jv, Some(t));
            }
            OpKind::Div => {
                // d(a/b) = ta/b - (r·tb)/b
                let a = tan[0].map(|ta| self.jbin(jv, OpKind::Div, ta, x(1), &loc));
                let b = match (tan[1], r) {
                    (Some(tb), Some(r)) => {
                        let rt = self.jbin(jv, OpKind::Mul, r, tb, &loc);
                        Some(self.jbin(jv, OpKind::Div, rt, x(1), &loc))
                    }
                    _ => None,
                };
                let t = match (a, b) {
                    (Some(a), Some(b)) => self.jbin(jv, OpKind::Sub, a, b, &loc),
                    (Some(a), None) => a,
                    (None, Some(b)) => {
                        let ty = self.vty(b);
                        self.jemit(jv, OpKind::Neg, vec![b], ty, vec![], &loc)
                    }
                    (None, None) => unreachable!("checked above"),
                };
                set(jv, Some(t));
            }
            OpKind::Pow => {
                let Some(c) = constant_of(f, op.operands[1]) else {
                    return self.refuse_jvp(jv, op, " for a non-constant exponent");
                };
                if tan[1].is_some() {
                    return self.refuse_jvp(jv, op, " for an exponent that depends on the primals");
                }
                let t0 = tan[0].expect("a tangent");
                let ty = self.vty(x(0));
                let p = if c == 2.0 {
                    x(0)
                } else {
                    let cm1 = self.jconst(jv, c - 1.0, &ty, &loc);
                    self.jbin(jv, OpKind::Pow, x(0), cm1, &loc)
                };
                let cc = self.jconst(jv, c, &ty, &loc);
                let d = self.jbin(jv, OpKind::Mul, p, cc, &loc);
                let t = self.scale(jv, t0, d, &loc);
                set(jv, Some(t));
            }
            OpKind::Neg => {
                let t0 = tan[0].expect("a tangent");
                let t = self.jemit(jv, OpKind::Neg, vec![t0], rty.clone(), vec![], &loc);
                set(jv, Some(t));
            }
            OpKind::Exp | OpKind::Log | OpKind::Sqrt | OpKind::Rsqrt | OpKind::Tanh | OpKind::Sigmoid => {
                let (t0, r) = (tan[0].expect("a tangent"), r.expect("a result"));
                let ty = rty.clone();
                let t = match op.kind {
                    OpKind::Exp => self.scale(jv, t0, r, &loc),
                    OpKind::Log => self.jbin(jv, OpKind::Div, t0, x(0), &loc),
                    OpKind::Sqrt => {
                        let half = self.jconst(jv, 0.5, &ty, &loc);
                        let q = self.jbin(jv, OpKind::Div, half, r, &loc);
                        self.scale(jv, t0, q, &loc)
                    }
                    OpKind::Rsqrt => {
                        let c = self.jconst(jv, -0.5, &ty, &loc);
                        let r2 = self.jbin(jv, OpKind::Mul, r, r, &loc);
                        let r3 = self.jbin(jv, OpKind::Mul, r2, r, &loc);
                        let s = self.jbin(jv, OpKind::Mul, r3, c, &loc);
                        self.scale(jv, t0, s, &loc)
                    }
                    OpKind::Tanh => {
                        let one = self.jconst(jv, 1.0, &ty, &loc);
                        let r2 = self.jbin(jv, OpKind::Mul, r, r, &loc);
                        let s = self.jbin(jv, OpKind::Sub, one, r2, &loc);
                        self.scale(jv, t0, s, &loc)
                    }
                    _ => {
                        let one = self.jconst(jv, 1.0, &ty, &loc);
                        let om = self.jbin(jv, OpKind::Sub, one, r, &loc);
                        let s = self.jbin(jv, OpKind::Mul, r, om, &loc);
                        self.scale(jv, t0, s, &loc)
                    }
                };
                set(jv, Some(t));
            }
            OpKind::Relu | OpKind::Abs => {
                let t0 = tan[0].expect("a tangent");
                let zero = self.jzero(jv, &rty, &loc);
                let t = if op.kind == OpKind::Relu {
                    self.jselect(jv, (x(0), "gt", zero), t0, zero, &loc)
                } else {
                    let n = self.jemit(jv, OpKind::Neg, vec![t0], rty.clone(), vec![], &loc);
                    self.jselect(jv, (x(0), "ge", zero), t0, n, &loc)
                };
                set(jv, Some(t));
            }
            OpKind::Silu => {
                // d/dx x·σ(x) = σ(x) (1 + x (1 − σ(x)))
                let t0 = tan[0].expect("a tangent");
                let ty = rty.clone();
                let s = self.jemit(jv, OpKind::Sigmoid, vec![x(0)], ty.clone(), vec![], &loc);
                let one = self.jconst(jv, 1.0, &ty, &loc);
                let om = self.jbin(jv, OpKind::Sub, one, s, &loc);
                let xom = self.jbin(jv, OpKind::Mul, x(0), om, &loc);
                let inner = self.jbin(jv, OpKind::Add, one, xom, &loc);
                let d = self.jbin(jv, OpKind::Mul, s, inner, &loc);
                let t = self.scale(jv, t0, d, &loc);
                set(jv, Some(t));
            }
            OpKind::Gelu => {
                // gelu'(x) = 0.5 (1 + t) + 0.5 x (1 − t²) c (1 + 3·0.044715 x²), t = tanh(u)
                let t0 = tan[0].expect("a tangent");
                let ty = rty.clone();
                let xx = self.jbin(jv, OpKind::Mul, x(0), x(0), &loc);
                let xxx = self.jbin(jv, OpKind::Mul, xx, x(0), &loc);
                let k = self.jconst(jv, 0.044715, &ty, &loc);
                let kx3 = self.jbin(jv, OpKind::Mul, k, xxx, &loc);
                let inner = self.jbin(jv, OpKind::Add, x(0), kx3, &loc);
                let c = self.jconst(jv, 0.7978845608, &ty, &loc);
                let u = self.jbin(jv, OpKind::Mul, c, inner, &loc);
                let th = self.jemit(jv, OpKind::Tanh, vec![u], ty.clone(), vec![], &loc);
                let one = self.jconst(jv, 1.0, &ty, &loc);
                let half = self.jconst(jv, 0.5, &ty, &loc);
                let one_t = self.jbin(jv, OpKind::Add, one, th, &loc);
                let left = self.jbin(jv, OpKind::Mul, half, one_t, &loc);
                let t2 = self.jbin(jv, OpKind::Mul, th, th, &loc);
                let sech2 = self.jbin(jv, OpKind::Sub, one, t2, &loc);
                let k3 = self.jconst(jv, 3.0 * 0.044715, &ty, &loc);
                let k3x2 = self.jbin(jv, OpKind::Mul, k3, xx, &loc);
                let du = self.jbin(jv, OpKind::Add, one, k3x2, &loc);
                let cdu = self.jbin(jv, OpKind::Mul, c, du, &loc);
                let hx = self.jbin(jv, OpKind::Mul, half, x(0), &loc);
                let right0 = self.jbin(jv, OpKind::Mul, hx, sech2, &loc);
                let right = self.jbin(jv, OpKind::Mul, right0, cdu, &loc);
                let d = self.jbin(jv, OpKind::Add, left, right, &loc);
                let t = self.scale(jv, t0, d, &loc);
                set(jv, Some(t));
            }
            OpKind::Max | OpKind::Min => {
                // The tangent of the operand that wins (the first on a tie, as `grad`).
                let pred = if op.kind == OpKind::Max { "ge" } else { "le" };
                let ta = zero_or(self, jv, tan[0], x(0));
                let tb = zero_or(self, jv, tan[1], x(1));
                let t = self.jselect(jv, (x(0), pred, x(1)), ta, tb, &loc);
                set(jv, Some(t));
            }
            OpKind::Select => {
                let ta = zero_or(self, jv, tan[1], x(1));
                let tb = zero_or(self, jv, tan[2], x(2));
                let t = self.jemit(jv, OpKind::Select, vec![x(0), ta, tb], rty.clone(), vec![], &loc);
                set(jv, Some(t));
            }
            OpKind::Cast | OpKind::GBroadcast | OpKind::GTranspose | OpKind::Reshape | OpKind::MergeHeads => {
                // Linear in their tensor operand: the same op on the tangent.
                if float {
                    if let Some(t0) = tan[0] {
                        let t = self.jemit(jv, op.kind, vec![t0], rty.clone(), op.attrs.clone(), &loc);
                        set(jv, Some(t));
                    }
                }
            }
            OpKind::GReduce => {
                let kind = op.str_attr("kind").unwrap_or("sum");
                let t0 = tan[0].expect("a tangent");
                if matches!(kind, "max" | "min") {
                    let t = self.extremum_tangent(jv, op, x(0), r.expect("a result"), t0, &loc);
                    set(jv, Some(t));
                    return Ok(());
                }
                if !matches!(kind, "sum" | "mean") {
                    return self.refuse_jvp(jv, op, &format!(" for `{kind}` yet"));
                }
                let t = self.jemit(jv, OpKind::GReduce, vec![t0], rty.clone(), op.attrs.clone(), &loc);
                set(jv, Some(t));
            }
            OpKind::MatMul => {
                let a = tan[0]
                    .map(|ta| self.jemit(jv, OpKind::MatMul, vec![ta, x(1)], rty.clone(), op.attrs.clone(), &loc));
                let b = tan[1]
                    .map(|tb| self.jemit(jv, OpKind::MatMul, vec![x(0), tb], rty.clone(), op.attrs.clone(), &loc));
                let t = match (a, b) {
                    (Some(a), Some(b)) => self.jbin(jv, OpKind::Add, a, b, &loc),
                    (a, b) => a.or(b).expect("a tangent"),
                };
                set(jv, Some(t));
            }
            OpKind::Concat => {
                let mut parts = Vec::new();
                for (i, t) in tan.iter().enumerate() {
                    parts.push(zero_or(self, jv, *t, x(i)));
                }
                let t = self.jemit(jv, OpKind::Concat, parts, rty.clone(), op.attrs.clone(), &loc);
                set(jv, Some(t));
            }
            OpKind::Split | OpKind::SplitQkv => {
                let t0 = tan[0].expect("a tangent");
                let mut operands = vec![t0];
                operands.extend(prim[1..].iter().copied());
                let tag = jv.tag.clone();
                let ts = self.emit_tagged(op.kind, operands, types.clone(), op.attrs.clone(), ("jvp", &tag), &loc);
                for (&res, t) in op.results.iter().zip(ts) {
                    if let Some(e) = jv.map.get_mut(&res) {
                        e.1 = Some(t);
                    }
                }
            }
            OpKind::Softmax => {
                // dy = y · (t − Σ_axis y·t)
                let (t0, y) = (tan[0].expect("a tangent"), r.expect("a result"));
                let axis = op.int_attr("axis").unwrap_or(rty.dims().len() as i64 - 1);
                let yt = self.jbin(jv, OpKind::Mul, y, t0, &loc);
                let s = self.reduce_keep(jv, yt, axis, &loc);
                let d = self.jbin(jv, OpKind::Sub, t0, s, &loc);
                let t = self.jbin(jv, OpKind::Mul, y, d, &loc);
                set(jv, Some(t));
            }
            OpKind::LogSumExp => {
                // d lse = Σ_axis softmax(x) · t
                let t0 = tan[0].expect("a tangent");
                let xt = self.vty(x(0));
                let axis = op.int_attr("axis").unwrap_or(xt.dims().len() as i64 - 1);
                let p = self.jemit(jv, OpKind::Softmax, vec![x(0)], xt.clone(), vec![("axis", Attr::Int(axis))], &loc);
                let pt = self.jbin(jv, OpKind::Mul, p, t0, &loc);
                let mut attrs = vec![
                    ("kind", Attr::Str("sum".into())),
                    ("axes", Attr::Ints(vec![axis])),
                    ("keepdim", Attr::Bool(false)),
                ];
                attrs.extend(policy::acc_attrs(&[&xt]));
                let t = self.jemit(jv, OpKind::GReduce, vec![pt], rty.clone(), attrs, &loc);
                set(jv, Some(t));
            }
            OpKind::LayerNorm | OpKind::RmsNorm => {
                let t = self.norm_tangent(jv, op, &prim, &tan, &loc);
                set(jv, Some(t));
            }
            OpKind::Dropout => {
                // The same mask scales the tangent: replay the primal's stream.
                let t0 = tan[0].expect("a tangent");
                let stream = op.int_attr("stream").unwrap_or(0);
                let attrs = vec![("stream", Attr::Int(stream)), ("replay", Attr::Bool(true))];
                let t = self.jemit(jv, OpKind::Dropout, vec![t0, x(1)], rty.clone(), attrs, &loc);
                set(jv, Some(t));
            }
            // No float tensor result, or a constant: no tangent.
            OpKind::Cmp
            | OpKind::TensorDim
            | OpKind::Fill
            | OpKind::Iota
            | OpKind::Constant
            | OpKind::Random
            | OpKind::Prefetch => {}
            _ => return self.refuse_jvp(jv, op, " yet"),
        }
        Ok(())
    }

    /// The tangent of `layernorm_safe` / `rmsnorm_safe` over the last axis: with
    /// `c = x − mean(x)` (`x` for rmsnorm), `x̂ = c · rsqrt(mean(c²) + eps)` and
    /// `dc = tx − mean(tx)` (`tx`), `dx̂ = rsqrt(mean(c²) + eps) · (dc − x̂ · mean(x̂ · dc))`,
    /// and `dy = dx̂ · w + x̂ · tw + tb`.
    fn norm_tangent(&mut self, jv: &Jvp, op: &Op, prim: &[ValueId], tan: &[Option<ValueId>], loc: &Loc) -> ValueId {
        let layer = op.kind == OpKind::LayerNorm;
        let x = prim[0];
        let ty = self.vty(x);
        let axis = ty.dims().len() as i64 - 1;
        let eps = op.attr("eps").and_then(Attr::as_float).unwrap_or(if layer { 1e-5 } else { 1e-6 });
        let c = if layer {
            let m = self.mean_keep(jv, x, axis, loc);
            self.jbin(jv, OpKind::Sub, x, m, loc)
        } else {
            x
        };
        let c2 = self.jbin(jv, OpKind::Mul, c, c, loc);
        let var = self.mean_keep(jv, c2, axis, loc);
        let e = self.jconst(jv, eps, &ty, loc);
        let ve = self.jbin(jv, OpKind::Add, var, e, loc);
        let rstd = self.jemit(jv, OpKind::Rsqrt, vec![ve], ty.clone(), vec![], loc);
        let xhat = self.jbin(jv, OpKind::Mul, c, rstd, loc);
        let role = |name: &str| op.affine_index(name);
        let mut out: Option<ValueId> = None;
        if let Some(tx) = tan[0] {
            let dc = if layer {
                let m = self.mean_keep(jv, tx, axis, loc);
                self.jbin(jv, OpKind::Sub, tx, m, loc)
            } else {
                tx
            };
            let xd = self.jbin(jv, OpKind::Mul, xhat, dc, loc);
            let mxd = self.mean_keep(jv, xd, axis, loc);
            let proj = self.jbin(jv, OpKind::Mul, xhat, mxd, loc);
            let inner = self.jbin(jv, OpKind::Sub, dc, proj, loc);
            let mut dxhat = self.jbin(jv, OpKind::Mul, rstd, inner, loc);
            if let Some(w) = role("weight") {
                let wb = self.jemit(jv, OpKind::GBroadcast, vec![prim[w]], ty.clone(), vec![], loc);
                dxhat = self.jbin(jv, OpKind::Mul, dxhat, wb, loc);
            }
            out = Some(dxhat);
        }
        for (name, scaled) in [("weight", true), ("bias", false)] {
            let Some(t) = role(name).and_then(|i| tan[i]) else { continue };
            let tb = self.jemit(jv, OpKind::GBroadcast, vec![t], ty.clone(), vec![], loc);
            let term = if scaled { self.jbin(jv, OpKind::Mul, xhat, tb, loc) } else { tb };
            out = Some(match out {
                Some(o) => self.jbin(jv, OpKind::Add, o, term, loc),
                None => term,
            });
        }
        out.unwrap_or_else(|| self.jzero(jv, &ty, loc))
    }

    /// The tangent of a `max`/`min` reduction: the mean of the tangents where `x` equals
    /// the result (one place unless there are ties; JAX's convention for ties).
    fn extremum_tangent(&mut self, jv: &Jvp, op: &Op, x: ValueId, r: ValueId, t: ValueId, loc: &Loc) -> ValueId {
        let xt = self.vty(x);
        let rt = self.vty(r);
        let rank = xt.dims().len() as i64;
        let axes: Vec<i64> = match op.attr("axes") {
            Some(Attr::Ints(a)) => a.clone(),
            _ => (0..rank).collect(),
        };
        let keep: Vec<Dim> = xt
            .dims()
            .iter()
            .enumerate()
            .map(|(i, d)| if axes.contains(&(i as i64)) { Dim::constant(1) } else { d.clone() })
            .collect();
        let rk = if rt.dims() == keep.as_slice() {
            r
        } else {
            self.jemit(jv, OpKind::Reshape, vec![r], with_dims(&rt, keep), vec![], loc)
        };
        let rb = self.jemit(jv, OpKind::GBroadcast, vec![rk], xt.clone(), vec![], loc);
        let zero = self.jzero(jv, &xt, loc);
        let one = self.jconst(jv, 1.0, &xt, loc);
        let hit = self.jselect(jv, (x, "eq", rb), t, zero, loc);
        let count = self.jselect(jv, (x, "eq", rb), one, zero, loc);
        let mut attrs: Vec<(&'static str, Attr)> =
            op.attrs.iter().filter(|(k, _)| *k != "kind" && *k != "jvp").cloned().collect();
        attrs.insert(0, ("kind", Attr::Str("sum".into())));
        attrs.extend(policy::acc_attrs(&[&xt]));
        let num = self.jemit(jv, OpKind::GReduce, vec![hit], rt.clone(), attrs.clone(), loc);
        let den = self.jemit(jv, OpKind::GReduce, vec![count], rt, attrs, loc);
        self.jbin(jv, OpKind::Div, num, den, loc)
    }

    /// `mean_axis v` with the axis kept, broadcast back to `v`'s shape.
    fn mean_keep(&mut self, jv: &Jvp, v: ValueId, axis: i64, loc: &Loc) -> ValueId {
        let t = self.vty(v);
        let mut keep: Vec<Dim> = t.dims().to_vec();
        if let Some(d) = usize::try_from(axis).ok().and_then(|a| keep.get_mut(a)) {
            *d = Dim::constant(1);
        }
        let mut attrs =
            vec![("kind", Attr::Str("mean".into())), ("axes", Attr::Ints(vec![axis])), ("keepdim", Attr::Bool(true))];
        attrs.extend(policy::acc_attrs(&[&t]));
        let s = self.jemit(jv, OpKind::GReduce, vec![v], with_dims(&t, keep), attrs, loc);
        self.jemit(jv, OpKind::GBroadcast, vec![s], t, vec![], loc)
    }

    /// `Σ_axis v` with the axis kept, broadcast back to `v`'s shape.
    fn reduce_keep(&mut self, jv: &Jvp, v: ValueId, axis: i64, loc: &Loc) -> ValueId {
        let t = self.vty(v);
        let mut keep: Vec<Dim> = t.dims().to_vec();
        if let Some(d) = usize::try_from(axis).ok().and_then(|a| keep.get_mut(a)) {
            *d = Dim::constant(1);
        }
        let mut attrs =
            vec![("kind", Attr::Str("sum".into())), ("axes", Attr::Ints(vec![axis])), ("keepdim", Attr::Bool(true))];
        attrs.extend(policy::acc_attrs(&[&t]));
        let s = self.jemit(jv, OpKind::GReduce, vec![v], with_dims(&t, keep), attrs, loc);
        self.jemit(jv, OpKind::GBroadcast, vec![s], t, vec![], loc)
    }
}
