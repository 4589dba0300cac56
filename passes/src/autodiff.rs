//! Reverse-mode automatic differentiation of straight-line Graph IR.
//!
//! `backward` walks the forward ops in reverse, keeping the adjoint (gradient) of every
//! value, and appends the backward graph with the same builder: the Graph IR of a
//! function that calls `grad(f)` shows `f`'s forward graph followed by its backward
//! graph. Adjoints have their primal value's type (a bf16 weight gets a bf16 gradient).
//!
//! `@loss_scale(k)` on a tensor of the differentiated graph (a parameter, the loss): the
//! backward pass starts from `k` instead of 1 (`graph.full {value = k, loss_scale = k}`),
//! so small adjoints stay representable in low precision, and each returned gradient is
//! divided by `k` (`arith.div {loss_scale = k}`), rounded once to its dtype.

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};

use crate::error::LowerError;
use crate::ir::*;

mod attention;
mod heads;
mod norms;
mod pipeline;
pub use pipeline::BACKWARD;

type R<T> = Result<T, LowerError>;

/// The attribute `checkpoint(f)` puts on each op of `f`'s forward graph: `grad` computes
/// those ops again for the backward pass (a copy tagged [`REMAT`]) instead of reading the
/// forward pass's values.
pub const CHECKPOINT: &str = "checkpoint";
/// The attribute on the backward pass's recomputed copy of a checkpointed op.
pub const REMAT: &str = "remat";
/// The attribute `custom_vjp(f, backward)` puts on each op of `f` (the call's index in
/// the lowering's list of [`CustomVjp`]s): `grad` skips their rules.
pub const CUSTOM_VJP: &str = "custom_vjp";
/// The attribute on the ops of a custom backward, naming `f`.
pub const CUSTOM_BACKWARD: &str = "custom_backward";

/// One `custom_vjp(f, backward)(args)` call: `backward`'s graph traced alone, its
/// parameters standing for `f`'s arguments and then for the gradient of `f`'s result.
#[derive(Clone, Debug)]
pub struct CustomVjp {
    pub name: SmolStr,
    pub func: Func,
    /// (scratch parameter, the caller's value) in `backward`'s parameter order; the last
    /// stands for the gradient.
    pub inputs: Vec<(ValueId, ValueId)>,
    /// `backward`'s results: one gradient per value of `grads_for`.
    pub outputs: Vec<ValueId>,
    /// `f`'s result.
    pub output: ValueId,
    pub grads_for: Vec<ValueId>,
    /// The index of the first op `f` emitted.
    pub start: usize,
}

struct Ad<'b, 'f> {
    b: &'b mut Builder<'f>,
    loc: Loc,
    adjoint: HashMap<ValueId, ValueId>,
    /// The effect chain, for the sends of a pipeline's backward ticks.
    token: ValueId,
}

fn tensor_type(t: &Type) -> Option<&TensorType> {
    match t {
        Type::Tensor(t) => Some(t),
        _ => None,
    }
}

impl Ad<'_, '_> {
    fn ty(&self, v: ValueId) -> Type {
        self.b.func.ty(v).clone()
    }

    fn op(&mut self, kind: OpKind, operands: Vec<ValueId>, ty: Type, attrs: Vec<(&'static str, Attr)>) -> ValueId {
        let loc = self.loc.clone();
        self.b.op1(kind, operands, ty, attrs, &loc)
    }

    /// A float tensor: a value that has a gradient.
    fn is_float_tensor(&self, v: ValueId) -> bool {
        matches!(self.ty(v), Type::Tensor(t) if t.dtype.is_float())
    }

    fn err<T>(&self, what: String) -> R<T> {
        Err(LowerError { message: what, range: self.loc.range })
    }

    /// A tensor of `like`'s type filled with `value`.
    fn filled(&mut self, value: f64, like: &Type) -> ValueId {
        self.op(OpKind::Fill, vec![], like.clone(), vec![("value", Attr::float(value))])
    }

    /// The scalar `value` broadcast to `like`'s type.
    fn constant(&mut self, value: f64, like: &Type) -> ValueId {
        let dtype = like.dtype().unwrap_or(DType::F32);
        let s = self.op(OpKind::Constant, vec![], Type::Scalar(dtype), vec![("value", Attr::float(value))]);
        self.op(OpKind::GBroadcast, vec![s], like.clone(), vec![])
    }

    fn bin(&mut self, kind: OpKind, a: ValueId, b: ValueId) -> ValueId {
        let t = self.ty(a);
        self.op(kind, vec![a, b], t, vec![])
    }

    fn neg(&mut self, a: ValueId) -> ValueId {
        let t = self.ty(a);
        self.op(OpKind::Neg, vec![a], t, vec![])
    }

    fn select(&mut self, a: ValueId, pred: &str, b: ValueId, then: ValueId, otherwise: ValueId) -> ValueId {
        let t = self.ty(a);
        let mask_t = match &t {
            Type::Tensor(tt) => {
                Type::Tensor(TensorType { dims: tt.dims.clone(), dtype: DType::Bool, policies: vec![] })
            }
            _ => Type::Scalar(DType::Bool),
        };
        let c = self.op(OpKind::Cmp, vec![a, b], mask_t, vec![("pred", Attr::Str(SmolStr::new(pred)))]);
        let t = self.ty(then);
        self.op(OpKind::Select, vec![c, then, otherwise], t, vec![])
    }

    fn accumulate(&mut self, v: ValueId, g: ValueId) {
        let g = if self.ty(g) == self.ty(v) {
            g
        } else {
            // Adjoints keep their primal's type (dtype and policies).
            let t = self.ty(v);
            self.op(OpKind::Cast, vec![g], t, vec![])
        };
        let total = match self.adjoint.get(&v) {
            Some(&prev) => self.bin(OpKind::Add, prev, g),
            None => g,
        };
        self.adjoint.insert(v, total);
    }

    /// The adjoint of one result of a multi-result op, in its type: zeros when nothing
    /// read the result.
    fn adjoint_or_zero(&mut self, r: ValueId) -> ValueId {
        let t = self.ty(r);
        match self.adjoint.get(&r) {
            Some(&g) if self.ty(g) == t => g,
            Some(&g) => self.op(OpKind::Cast, vec![g], t, vec![]),
            None => self.filled(0.0, &t),
        }
    }

    /// `split(x, n, axis)`: the adjoint of `x` is the concatenation of the parts'
    /// adjoints (zeros for a part nothing reads).
    fn split_rule(&mut self, f_op: &Op) -> R<()> {
        if !f_op.results.iter().any(|r| self.adjoint.contains_key(r)) {
            return Ok(());
        }
        let x = f_op.operands[0];
        let parts: Vec<ValueId> = f_op.results.iter().map(|&r| self.adjoint_or_zero(r)).collect();
        let axis = f_op.int_attr("axis").unwrap_or(0);
        let t = self.ty(x);
        let mut attrs = vec![("axis", Attr::Int(axis))];
        // The split of a pipeline's stacked parameter into its stages' slices: the
        // concatenation of their gradients is one slice per stage, each where its stage is.
        if let (Some(pipeline), Some(role)) = (f_op.attr("pipeline"), f_op.attr("role")) {
            attrs.extend([("pipeline", pipeline.clone()), ("role", role.clone())]);
        }
        let d = self.op(OpKind::Concat, parts, t, attrs);
        self.accumulate(x, d);
        Ok(())
    }

    /// `concat(xs, axis)`: each part's adjoint is its rows of the result's adjoint `g`,
    /// cut with `split` into pieces of the parts' greatest common size (which must be
    /// known: parts of equal sizes, or constant sizes) and concatenated again per part.
    fn concat_rule(&mut self, f_op: &Op, g: ValueId) -> R<()> {
        let axis = f_op.int_attr("axis").unwrap_or(0);
        let ax = usize::try_from(axis).unwrap_or(0);
        let sizes: Vec<Dim> =
            f_op.operands.iter().map(|&o| self.ty(o).dims().get(ax).cloned().unwrap_or(Dim::constant(1))).collect();
        // Each part's size as a number of pieces.
        let (piece, counts): (Dim, Vec<i64>) = if sizes.iter().all(|s| *s == sizes[0]) {
            (sizes[0].clone(), vec![1; sizes.len()])
        } else if let Some(consts) = sizes.iter().map(Dim::as_const).collect::<Option<Vec<i64>>>() {
            fn gcd(a: i64, b: i64) -> i64 {
                if b == 0 {
                    a
                } else {
                    gcd(b, a % b)
                }
            }
            let p = consts.iter().fold(0, |acc, &c| gcd(acc, c)).max(1);
            (Dim::constant(p), consts.iter().map(|c| c / p).collect())
        } else {
            return self.err("grad of `concat` of parts of different symbolic sizes is not supported yet".into());
        };
        let total: i64 = counts.iter().sum();
        let mut dims = self.ty(g).dims().to_vec();
        if ax >= dims.len() || total <= 0 {
            return self.err(format!("grad of `concat` along axis {axis}"));
        }
        dims[ax] = piece;
        let piece_t = tensor_type(&self.ty(g))
            .map(|t| Type::Tensor(TensorType { dims, dtype: t.dtype, policies: t.policies.clone() }))
            .ok_or_else(|| LowerError { message: "grad of `concat` of a non-tensor".into(), range: self.loc.range })?;
        let loc = self.loc.clone();
        let pieces =
            self.b.op(OpKind::Split, vec![g], vec![piece_t; total as usize], vec![("axis", Attr::Int(axis))], &loc);
        let mut at = 0;
        for (k, &o) in f_op.operands.iter().enumerate() {
            let n = counts[k] as usize;
            let mine = pieces[at..at + n].to_vec();
            at += n;
            if !self.is_float_tensor(o) {
                continue;
            }
            let d = if n == 1 {
                mine[0]
            } else {
                let t = self.ty(o);
                self.op(OpKind::Concat, mine, t, vec![("axis", Attr::Int(axis))])
            };
            self.accumulate(o, d);
        }
        Ok(())
    }

    /// The number of elements of `axes` of a tensor value, as a scalar of `dtype`.
    fn count(&mut self, x: ValueId, axes: &[i64], dtype: DType) -> ValueId {
        let mut n: Option<ValueId> = None;
        for &axis in axes {
            let d = self.op(OpKind::TensorDim, vec![x], Type::Index, vec![("axis", Attr::Int(axis))]);
            n = Some(match n {
                Some(prev) => self.op(OpKind::Mul, vec![prev, d], Type::Index, vec![]),
                None => d,
            });
        }
        let n = n.unwrap_or_else(|| self.op(OpKind::Constant, vec![], Type::Index, vec![("value", Attr::Int(1))]));
        self.op(OpKind::Cast, vec![n], Type::Scalar(dtype), vec![])
    }

    fn reshape(&mut self, x: ValueId, dims: Vec<Dim>) -> ValueId {
        let Some(t) = tensor_type(&self.ty(x)).cloned() else { return x };
        if t.dims == dims {
            return x;
        }
        self.op(OpKind::Reshape, vec![x], Type::Tensor(TensorType { dims, ..t }), vec![])
    }

    /// `backward`'s graph for one `custom_vjp` call, with the adjoint of `f`'s result as
    /// its gradient; its results accumulate into the adjoints of `f`'s arguments.
    fn custom_rule(&mut self, c: &CustomVjp) {
        let Some(&g) = self.adjoint.get(&c.output) else { return };
        let last = c.inputs.len().saturating_sub(1);
        let mut map: HashMap<ValueId, ValueId> = c
            .inputs
            .iter()
            .enumerate()
            .map(|(i, &(scratch, value))| (scratch, if i == last { g } else { value }))
            .collect();
        for &id in &c.func.body.ops {
            let op = c.func.op(id);
            if op.kind == OpKind::Return {
                continue;
            }
            let operands = op.operands.iter().map(|o| *map.get(o).unwrap_or(o)).collect();
            let types = op.results.iter().map(|&r| c.func.ty(r).clone()).collect();
            let mut attrs = op.attrs.clone();
            attrs.push((CUSTOM_BACKWARD, Attr::Str(c.name.clone())));
            let results = self.b.op(op.kind, operands, types, attrs, &op.loc);
            for (&r, new) in op.results.iter().zip(results) {
                map.insert(r, new);
            }
        }
        for (&out, &x) in c.outputs.iter().zip(&c.grads_for) {
            let grad = *map.get(&out).unwrap_or(&out);
            self.accumulate(x, grad);
        }
    }

    /// Copies of the forward ops `checkpoint(f)` tagged, in order, at the start of the
    /// backward pass (tagged `remat = "f"`); returns each forward value's copy. They
    /// compute the same numbers: random ops replay their streams.
    fn rematerialize(&mut self, forward: &[OpId]) -> HashMap<ValueId, ValueId> {
        let mut copies: HashMap<ValueId, ValueId> = HashMap::new();
        for &id in forward {
            let op = self.b.func.op(id).clone();
            let Some(of) = op.attr(CHECKPOINT).cloned() else { continue };
            let operands = op.operands.iter().map(|o| *copies.get(o).unwrap_or(o)).collect();
            let types = op.results.iter().map(|&r| self.ty(r)).collect();
            let mut attrs: Vec<(&'static str, Attr)> =
                op.attrs.iter().filter(|(k, _)| *k != CHECKPOINT).cloned().collect();
            attrs.push((REMAT, of));
            let results = self.b.op(op.kind, operands, types, attrs, &op.loc);
            for (&r, copy) in op.results.iter().zip(results) {
                copies.insert(r, copy);
            }
        }
        copies
    }

    fn transpose_last2(&mut self, x: ValueId) -> ValueId {
        let t = tensor_type(&self.ty(x)).cloned().expect("a tensor");
        let rank = t.dims.len();
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(rank - 1, rank - 2);
        let mut dims = t.dims.clone();
        dims.swap(rank - 1, rank - 2);
        self.op(OpKind::GTranspose, vec![x], Type::Tensor(TensorType { dims, ..t }), vec![("perm", Attr::Ints(perm))])
    }

    /// Sums `g` (of `from` dims) down to `to` dims: the adjoint of a broadcast.
    fn unbroadcast(&mut self, g: ValueId, to: &TensorType) -> ValueId {
        let Some(gt) = tensor_type(&self.ty(g)).cloned() else { return g };
        let lead = gt.dims.len() - to.dims.len();
        let mut axes: Vec<i64> = (0..lead as i64).collect();
        for (i, d) in to.dims.iter().enumerate() {
            if d.as_const() == Some(1) && gt.dims[lead + i].as_const() != Some(1) {
                axes.push((lead + i) as i64);
            }
        }
        if axes.is_empty() {
            return g;
        }
        let kept: Vec<Dim> =
            gt.dims.iter().enumerate().filter(|(i, _)| !axes.contains(&(*i as i64))).map(|(_, d)| d.clone()).collect();
        let summed = self.op(
            OpKind::GReduce,
            vec![g],
            Type::Tensor(TensorType { dims: kept, dtype: gt.dtype, policies: gt.policies.clone() }),
            [
                vec![("kind", Attr::Str("sum".into())), ("axes", Attr::Ints(axes)), ("keepdim", Attr::Bool(false))],
                policy::acc_attrs(&[&Type::Tensor(gt.clone())]),
            ]
            .concat(),
        );
        self.reshape(summed, to.dims.clone())
    }

    fn rule(&mut self, f_op: &Op) -> R<()> {
        if f_op.kind == OpKind::Split {
            return self.split_rule(f_op);
        }
        if f_op.kind == OpKind::SplitQkv {
            return self.split_qkv_rule(f_op);
        }
        let Some(&r) = f_op.results.first() else { return Ok(()) };
        let Some(&g) = self.adjoint.get(&r) else { return Ok(()) };
        let x = |i: usize| f_op.operands[i];
        let diff = |v: ValueId, ad: &Self| ad.is_float_tensor(v);
        match f_op.kind {
            OpKind::Add => {
                for i in 0..2 {
                    if diff(x(i), self) {
                        self.accumulate(x(i), g);
                    }
                }
            }
            OpKind::Sub => {
                if diff(x(0), self) {
                    self.accumulate(x(0), g);
                }
                if diff(x(1), self) {
                    let n = self.neg(g);
                    self.accumulate(x(1), n);
                }
            }
            OpKind::Mul => {
                if diff(x(0), self) {
                    let d = self.bin(OpKind::Mul, g, x(1));
                    self.accumulate(x(0), d);
                }
                if diff(x(1), self) {
                    let d = self.bin(OpKind::Mul, g, x(0));
                    self.accumulate(x(1), d);
                }
            }
            OpKind::Div => {
                if diff(x(0), self) {
                    let d = self.bin(OpKind::Div, g, x(1));
                    self.accumulate(x(0), d);
                }
                if diff(x(1), self) {
                    // -g * a / b^2 = -(g * r) / b
                    let gr = self.bin(OpKind::Mul, g, r);
                    let q = self.bin(OpKind::Div, gr, x(1));
                    let d = self.neg(q);
                    self.accumulate(x(1), d);
                }
            }
            // `a // b` is piecewise constant: no gradient (almost everywhere), as in JAX.
            OpKind::FloorDiv => {}
            // `a % b = a - floor(a / b) * b`: 1 for a, -floor(a / b) for b.
            OpKind::Rem => {
                if diff(x(0), self) {
                    self.accumulate(x(0), g);
                }
                if diff(x(1), self) {
                    let q = self.bin(OpKind::FloorDiv, x(0), x(1));
                    let gq = self.bin(OpKind::Mul, g, q);
                    let d = self.neg(gq);
                    self.accumulate(x(1), d);
                }
            }
            OpKind::Pow => {
                let Some(c) = self.constant_of(x(1)) else {
                    return self.err("grad of `**` with a non-constant exponent is not supported yet".into());
                };
                if diff(x(0), self) {
                    let t = self.ty(x(0));
                    let p = if c == 2.0 {
                        x(0)
                    } else {
                        let cm1 = self.constant(c - 1.0, &t);
                        self.bin(OpKind::Pow, x(0), cm1)
                    };
                    let cc = self.constant(c, &t);
                    let scaled = self.bin(OpKind::Mul, p, cc);
                    let d = self.bin(OpKind::Mul, g, scaled);
                    self.accumulate(x(0), d);
                }
            }
            OpKind::Neg => {
                let d = self.neg(g);
                self.accumulate(x(0), d);
            }
            OpKind::Max | OpKind::Min => {
                let (pa, pb) = if f_op.kind == OpKind::Max { ("ge", "lt") } else { ("le", "gt") };
                let t = self.ty(g);
                let zero = self.filled(0.0, &t);
                let da = self.select(x(0), pa, x(1), g, zero);
                let db = self.select(x(0), pb, x(1), g, zero);
                if diff(x(0), self) {
                    self.accumulate(x(0), da);
                }
                if diff(x(1), self) {
                    self.accumulate(x(1), db);
                }
            }
            OpKind::Exp => {
                let d = self.bin(OpKind::Mul, g, r);
                self.accumulate(x(0), d);
            }
            OpKind::Log => {
                let d = self.bin(OpKind::Div, g, x(0));
                self.accumulate(x(0), d);
            }
            OpKind::Sqrt => {
                let t = self.ty(r);
                let half = self.constant(0.5, &t);
                let q = self.bin(OpKind::Div, half, r);
                let d = self.bin(OpKind::Mul, g, q);
                self.accumulate(x(0), d);
            }
            OpKind::Rsqrt => {
                let t = self.ty(r);
                let c = self.constant(-0.5, &t);
                let r2 = self.bin(OpKind::Mul, r, r);
                let r3 = self.bin(OpKind::Mul, r2, r);
                let s = self.bin(OpKind::Mul, r3, c);
                let d = self.bin(OpKind::Mul, g, s);
                self.accumulate(x(0), d);
            }
            OpKind::Tanh => {
                let t = self.ty(r);
                let one = self.constant(1.0, &t);
                let r2 = self.bin(OpKind::Mul, r, r);
                let s = self.bin(OpKind::Sub, one, r2);
                let d = self.bin(OpKind::Mul, g, s);
                self.accumulate(x(0), d);
            }
            OpKind::Sigmoid => {
                let t = self.ty(r);
                let one = self.constant(1.0, &t);
                let om = self.bin(OpKind::Sub, one, r);
                let s = self.bin(OpKind::Mul, r, om);
                let d = self.bin(OpKind::Mul, g, s);
                self.accumulate(x(0), d);
            }
            OpKind::Relu => {
                let t = self.ty(g);
                let zero = self.filled(0.0, &t);
                let d = self.select(x(0), "gt", zero, g, zero);
                self.accumulate(x(0), d);
            }
            OpKind::Abs => {
                let t = self.ty(g);
                let zero = self.filled(0.0, &t);
                let ng = self.neg(g);
                let d = self.select(x(0), "ge", zero, g, ng);
                self.accumulate(x(0), d);
            }
            OpKind::Silu => {
                // d/dx x·σ(x) = σ(x) (1 + x (1 − σ(x)))
                let t = self.ty(x(0));
                let s = self.op(OpKind::Sigmoid, vec![x(0)], t.clone(), vec![]);
                let one = self.constant(1.0, &t);
                let om = self.bin(OpKind::Sub, one, s);
                let xom = self.bin(OpKind::Mul, x(0), om);
                let inner = self.bin(OpKind::Add, one, xom);
                let s2 = self.bin(OpKind::Mul, s, inner);
                let d = self.bin(OpKind::Mul, g, s2);
                self.accumulate(x(0), d);
            }
            OpKind::Gelu => {
                // gelu(x) = 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x³):
                // gelu'(x) = 0.5 (1 + t) + 0.5 x (1 − t²) c (1 + 3·0.044715 x²)
                let t = self.ty(x(0));
                let xx = self.bin(OpKind::Mul, x(0), x(0));
                let xxx = self.bin(OpKind::Mul, xx, x(0));
                let k = self.constant(0.044715, &t);
                let kx3 = self.bin(OpKind::Mul, k, xxx);
                let inner = self.bin(OpKind::Add, x(0), kx3);
                let c = self.constant(0.7978845608, &t);
                let u = self.bin(OpKind::Mul, c, inner);
                let th = self.op(OpKind::Tanh, vec![u], t.clone(), vec![]);
                let one = self.constant(1.0, &t);
                let half = self.constant(0.5, &t);
                let one_t = self.bin(OpKind::Add, one, th);
                let left = self.bin(OpKind::Mul, half, one_t);
                let t2 = self.bin(OpKind::Mul, th, th);
                let sech2 = self.bin(OpKind::Sub, one, t2);
                let k3 = self.constant(3.0 * 0.044715, &t);
                let k3x2 = self.bin(OpKind::Mul, k3, xx);
                let du = self.bin(OpKind::Add, one, k3x2);
                let cdu = self.bin(OpKind::Mul, c, du);
                let hx = self.bin(OpKind::Mul, half, x(0));
                let right0 = self.bin(OpKind::Mul, hx, sech2);
                let right = self.bin(OpKind::Mul, right0, cdu);
                let dgelu = self.bin(OpKind::Add, left, right);
                let d = self.bin(OpKind::Mul, g, dgelu);
                self.accumulate(x(0), d);
            }
            OpKind::Cast => {
                if diff(x(0), self) {
                    let t = self.ty(x(0));
                    let d = self.op(OpKind::Cast, vec![g], t, vec![]);
                    self.accumulate(x(0), d);
                }
            }
            OpKind::GBroadcast => {
                if diff(x(0), self) {
                    let to = tensor_type(&self.ty(x(0))).cloned().expect("checked by diff");
                    let d = self.unbroadcast(g, &to);
                    self.accumulate(x(0), d);
                }
            }
            OpKind::GReduce => {
                let kind = f_op.str_attr("kind").unwrap_or("sum");
                if !matches!(kind, "sum" | "mean" | "max" | "min") {
                    return self.err(format!("grad of `{kind}` is not supported yet"));
                }
                let xt = tensor_type(&self.ty(x(0))).cloned().expect("a tensor");
                let axes: Vec<i64> = match f_op.attr("axes") {
                    Some(Attr::Ints(a)) => a.clone(),
                    _ => (0..xt.dims.len() as i64).collect(),
                };
                // g with the reduced axes back as size 1, then broadcast to x.
                let keep_dims: Vec<Dim> = xt
                    .dims
                    .iter()
                    .enumerate()
                    .map(|(i, d)| if axes.contains(&(i as i64)) { Dim::constant(1) } else { d.clone() })
                    .collect();
                let gk = self.reshape(g, keep_dims);
                let gt = tensor_type(&self.ty(g)).cloned().expect("a tensor");
                let mut d = self.op(
                    OpKind::GBroadcast,
                    vec![gk],
                    Type::Tensor(TensorType { dims: xt.dims.clone(), dtype: gt.dtype, policies: gt.policies }),
                    vec![],
                );
                if matches!(kind, "max" | "min") {
                    // To the elements equal to the extremum, split evenly between ties.
                    let rk = self.reshape(r, self.ty(gk).dims().to_vec());
                    let xty = self.ty(x(0));
                    let rb = self.op(OpKind::GBroadcast, vec![rk], xty.clone(), vec![]);
                    let mask_t =
                        Type::Tensor(TensorType { dims: xt.dims.clone(), dtype: DType::Bool, policies: vec![] });
                    let mask =
                        self.op(OpKind::Cmp, vec![x(0), rb], mask_t, vec![("pred", Attr::Str(SmolStr::new("eq")))]);
                    let hit = self.op(OpKind::Cast, vec![mask], xty, vec![]);
                    let axes: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
                    let ties = self.sum_back(hit, &axes);
                    let share = self.bin(OpKind::Div, hit, ties);
                    let dt = self.ty(d);
                    let share =
                        if self.ty(share) == dt { share } else { self.op(OpKind::Cast, vec![share], dt, vec![]) };
                    d = self.bin(OpKind::Mul, d, share);
                }
                if kind == "mean" {
                    let t = self.ty(d);
                    let n = self.count(x(0), &axes, t.dtype().unwrap_or(DType::F32));
                    let nb = self.op(OpKind::GBroadcast, vec![n], t, vec![]);
                    d = self.bin(OpKind::Div, d, nb);
                }
                self.accumulate(x(0), d);
            }
            OpKind::MatMul => {
                let (a, b) = (x(0), x(1));
                let at = tensor_type(&self.ty(a)).cloned().expect("a tensor");
                let bt = tensor_type(&self.ty(b)).cloned().expect("a tensor");
                let gt = tensor_type(&self.ty(g)).cloned().expect("a tensor");
                // The backward matmuls accumulate as the forward one does (`@accum`).
                let acc = policy::acc_attrs(&[&self.ty(a), &self.ty(b), &self.ty(g)]);
                // The batch dims of the result: both operands' broadcast (NumPy's matmul).
                let out_batch = gt.dims[..gt.dims.len() - 2].to_vec();
                let last2 = |t: &TensorType| t.dims[t.dims.len() - 2..].to_vec();
                if diff(a, self) {
                    // dA = g @ Bᵀ over the result's batch dims, summed back over the dims
                    // A was broadcast along.
                    let b_t = self.transpose_last2(b);
                    let dims = [out_batch.clone(), last2(&at)].concat();
                    let full = Type::Tensor(TensorType { dims, ..at.clone() });
                    let d = self.op(OpKind::MatMul, vec![g, b_t], full, acc.clone());
                    let d = self.unbroadcast(d, &at);
                    self.accumulate(a, d);
                }
                if diff(b, self) {
                    let d = if bt.dims.len() == 2 && at.dims.len() > 2 {
                        // dB = Σ_batch Aᵀ @ g: fold the batch dims into M (one matmul).
                        let m: Dim =
                            at.dims[..at.dims.len() - 1].iter().fold(Dim::constant(1), |acc, d| acc.mul_plain(d));
                        let a2 = self.reshape(a, vec![m.clone(), at.dims[at.dims.len() - 1].clone()]);
                        let g2 = self.reshape(g, vec![m, gt.dims[gt.dims.len() - 1].clone()]);
                        let a2t = self.transpose_last2(a2);
                        self.op(OpKind::MatMul, vec![a2t, g2], Type::Tensor(bt.clone()), acc.clone())
                    } else {
                        // dB = Aᵀ @ g over the result's batch dims, summed back over the
                        // dims B was broadcast along.
                        let a_t = self.transpose_last2(a);
                        let dims = [out_batch.clone(), last2(&bt)].concat();
                        let full = Type::Tensor(TensorType { dims, ..bt.clone() });
                        let d = self.op(OpKind::MatMul, vec![a_t, g], full, acc.clone());
                        self.unbroadcast(d, &bt)
                    };
                    self.accumulate(b, d);
                }
            }
            OpKind::GTranspose => {
                let perm = match f_op.attr("perm") {
                    Some(Attr::Ints(p)) => p.clone(),
                    _ => return self.err("a transpose without a permutation".into()),
                };
                let mut inverse = vec![0i64; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p as usize] = i as i64;
                }
                let t = self.ty(x(0));
                let d = self.op(OpKind::GTranspose, vec![g], t, vec![("perm", Attr::Ints(inverse))]);
                self.accumulate(x(0), d);
            }
            OpKind::Reshape => {
                let dims = self.ty(x(0)).dims().to_vec();
                let d = self.reshape(g, dims);
                self.accumulate(x(0), d);
            }
            OpKind::Dropout => {
                // The same mask scales the gradient: replay the forward's stream.
                let t = self.ty(g);
                let stream = f_op.int_attr("stream").unwrap_or(0);
                let d = self.op(
                    OpKind::Dropout,
                    vec![g, x(1)],
                    t,
                    vec![("stream", Attr::Int(stream)), ("replay", Attr::Bool(true))],
                );
                self.accumulate(x(0), d);
            }
            OpKind::LogSumExp => {
                // d lse / dx = softmax(x) along the axis: g broadcast back over it.
                if diff(x(0), self) {
                    let xt = tensor_type(&self.ty(x(0))).cloned().expect("checked by diff");
                    let axis = f_op.int_attr("axis").unwrap_or(xt.dims.len() as i64 - 1);
                    let mut keep = xt.dims.clone();
                    if let Some(d) = usize::try_from(axis).ok().and_then(|a| keep.get_mut(a)) {
                        *d = Dim::constant(1);
                    }
                    let gk = self.reshape(g, keep);
                    let gt = tensor_type(&self.ty(g)).cloned().expect("a tensor");
                    let full =
                        Type::Tensor(TensorType { dims: xt.dims.clone(), dtype: gt.dtype, policies: gt.policies });
                    let gb = self.op(OpKind::GBroadcast, vec![gk], full, vec![]);
                    let t = self.ty(x(0));
                    let p = self.op(OpKind::Softmax, vec![x(0)], t, vec![("axis", Attr::Int(axis))]);
                    let d = self.bin(OpKind::Mul, gb, p);
                    self.accumulate(x(0), d);
                }
            }
            OpKind::Concat => self.concat_rule(f_op, g)?,
            OpKind::Select => {
                // `where(c, a, b)`: the gradient goes to the side each element took.
                let t = self.ty(g);
                let zero = self.filled(0.0, &t);
                for (i, (then, otherwise)) in [(1, (g, zero)), (2, (zero, g))] {
                    if diff(x(i), self) {
                        let d = self.op(OpKind::Select, vec![x(0), then, otherwise], t.clone(), vec![]);
                        let to = tensor_type(&self.ty(x(i))).cloned().expect("checked by diff");
                        let d = self.unbroadcast(d, &to);
                        self.accumulate(x(i), d);
                    }
                }
            }
            OpKind::Softmax => self.softmax_rule(f_op, g)?,
            OpKind::MergeHeads => self.merge_heads_rule(f_op, g)?,
            OpKind::FlashAttention => self.attention_rule(f_op, g)?,
            OpKind::LayerNorm | OpKind::RmsNorm => self.norm_rule(f_op, g)?,
            OpKind::Send => self.send_rule(f_op, g),
            // A collective is its operand's value (the global view): the gradient passes
            // through, and sharding propagation lays the backward values out.
            k if k.is_collective() => self.accumulate(x(0), g),
            // randn has no differentiable operand (its seed is an int).
            OpKind::Constant
            | OpKind::Fill
            | OpKind::TensorDim
            | OpKind::EffectToken
            | OpKind::Prefetch
            | OpKind::Cmp
            | OpKind::Random
            | OpKind::Iota => {}
            other => return self.err(format!("grad through `{}` is not supported yet", other.name())),
        }
        Ok(())
    }

    /// The constant a value is (a scalar constant, or one broadcast to a tensor).
    fn constant_of(&self, v: ValueId) -> Option<f64> {
        // The body is still being built: find the definition in the op arena.
        let f = &*self.b.func;
        let op = f.ops.iter().find(|op| op.results.contains(&v))?;
        match op.kind {
            OpKind::Constant => op.attr("value").and_then(Attr::as_float),
            OpKind::GBroadcast | OpKind::Cast => self.constant_of(op.operands[0]),
            _ => None,
        }
    }
}

/// Appends the backward graph of `forward` (ops in program order) for the rank-0
/// `loss`; returns the gradient of each `wrt` value (zeros when it does not matter).
pub fn backward(
    b: &mut Builder<'_>,
    forward: &[OpId],
    loss: ValueId,
    wrt: &[ValueId],
    custom: &[CustomVjp],
    token: &mut ValueId,
    loc: &Loc,
) -> Result<Vec<ValueId>, LowerError> {
    let ticks = pipeline::PipelineTicks::of(b.func, forward);
    let mut ad = Ad { b, loc: loc.clone(), adjoint: HashMap::new(), token: *token };
    let lt = ad.ty(loss);
    if !matches!(&lt, Type::Tensor(t) if t.dims.is_empty() && t.dtype.is_float()) {
        return ad.err(format!("grad needs a rank-0 float result, the function returns {lt}"));
    }
    // `@loss_scale(k)` anywhere in the differentiated graph scales the loss.
    let mut types: Vec<Type> = vec![lt.clone()];
    types.extend(wrt.iter().map(|&w| ad.ty(w)));
    for &id in forward {
        let op = ad.b.func.op(id);
        types.extend(op.operands.iter().chain(&op.results).map(|&v| ad.b.func.ty(v).clone()));
    }
    let scale = policy::loss_scale(&types.iter().collect::<Vec<_>>()).filter(|k| *k != 1.0);
    let seed = match scale {
        Some(k) => {
            let loc = ad.loc.clone();
            let attrs = vec![("value", Attr::float(k)), (policy::LOSS_SCALE, Attr::float(k))];
            ad.b.op1(OpKind::Fill, vec![], lt.clone(), attrs, &loc)
        }
        None => ad.filled(1.0, &lt),
    };
    ad.adjoint.insert(loss, seed);
    let recomputed = ad.rematerialize(forward);
    let first_backward = ad.b.func.ops.len();
    // Custom backwards of calls in this forward graph, the latest first: each is emitted
    // once the reverse walk has passed every op after its call.
    let first_forward = forward.first().map_or(usize::MAX, |id| id.0 as usize);
    let mut pending: Vec<&CustomVjp> = custom.iter().filter(|c| c.start >= first_forward).collect();
    pending.sort_by_key(|c| std::cmp::Reverse(c.start));
    let mut pending = pending.into_iter().peekable();
    for &id in forward.iter().rev() {
        while let Some(c) = pending.next_if(|c| c.start > id.0 as usize) {
            ad.custom_rule(c);
        }
        let op = ad.b.func.op(id).clone();
        if op.attr(CUSTOM_VJP).is_some() {
            continue;
        }
        let first = ad.b.func.ops.len();
        ad.rule(&op)?;
        // The backward ops of an op placed by `with device(X)` are placed there too.
        if let Some(device) = op.attr("device").cloned() {
            for back in &mut ad.b.func.ops[first..] {
                if back.attr("device").is_none() {
                    back.attrs.push(("device", device.clone()));
                }
            }
        }
        // Those of a pipeline stage's op run on that stage, at a backward tick.
        ticks.tag(&op, &mut ad.b.func.ops[first..]);
    }
    for c in pending {
        ad.custom_rule(c);
    }
    // The backward pass reads the recomputed values of checkpointed ops.
    if !recomputed.is_empty() {
        for op in &mut ad.b.func.ops[first_backward..] {
            for v in op.operands.iter_mut() {
                if let Some(&copy) = recomputed.get(v) {
                    *v = copy;
                }
            }
        }
    }
    let mut out = Vec::new();
    for &w in wrt {
        let g = match ad.adjoint.get(&w) {
            Some(&g) => match scale {
                // Unscale: one division by k, rounded once to the gradient's dtype.
                Some(k) => {
                    let t = ad.ty(g);
                    let kc = ad.constant(k, &t);
                    ad.op(OpKind::Div, vec![g, kc], t, vec![(policy::LOSS_SCALE, Attr::float(k))])
                }
                None => g,
            },
            None => {
                let t = ad.ty(w);
                ad.filled(0.0, &t)
            }
        };
        out.push(g);
    }
    *token = ad.token;
    Ok(out)
}
