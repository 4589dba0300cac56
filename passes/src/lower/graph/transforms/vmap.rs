//! `vmap(f, in_axes=..., out_axes=...)(args)`: `f`'s graph for one example, batched op
//! by op.
//!
//! Each mapped argument is moved so that its mapped axis is first; every value of the
//! traced graph is then either *batched* (the caller's value has the batch dim in front
//! of the example's dims) or *unbatched* (it does not depend on a mapped argument, and
//! the caller's value is the example's). An op with no batched operand is copied as it
//! is; otherwise its batching rule emits the same op on the batched shapes (axes shift
//! by one, unbatched operands are broadcast or left to the op's own broadcasting). Ops
//! with no rule are refused with a message that names them, never computed wrongly.
//! Outputs get the batch dim at `out_axes`. Axis moves are reshapes and transposes of
//! the last two dims, which every backend plans and `grad` differentiates.

use tessera_frontend::check::Dim;

use super::super::{unsupported, Body, Val, R};
use super::{product, with_dims};
use crate::ir::*;
use smol_str::SmolStr;
use std::collections::HashMap;
use tessera_frontend::syntax::ast::Arg;
use tessera_frontend::text::TextRange;

#[derive(Copy, Clone, Debug)]
enum B {
    /// The same value for every example.
    Same(ValueId),
    /// The batch dim in front.
    Batched(ValueId),
}

struct Vmap {
    tag: SmolStr,
    /// The size of the mapped axis.
    size: Dim,
    range: TextRange,
    map: HashMap<ValueId, B>,
}

impl Body<'_, '_, '_> {
    /// `vmap(of, in_axes, out_axes)(args)`.
    pub(in crate::lower::graph) fn vmap_call(
        &mut self,
        of: &str,
        in_axes: &[Option<i64>],
        out_axes: &[i64],
        args: &[Arg],
        range: TextRange,
    ) -> R<Val> {
        let params: Vec<String> = self.callee(of, range)?.sig.params.iter().map(|p| p.name.clone()).collect();
        let axis_of =
            |name: &str| params.iter().position(|p| p == name).and_then(|i| in_axes.get(i).copied().flatten());
        let retype = |name: &str, t: &Type| -> R<Option<Type>> {
            let Some(axis) = axis_of(name) else { return Ok(None) };
            let dims = t.dims();
            let rank = dims.len() as i64;
            let a = if axis < 0 { axis + rank } else { axis };
            if !matches!(t, Type::Tensor(_)) || a < 0 || a >= rank {
                return unsupported(format!("`vmap({of})` maps axis {axis} of `{name}`, which is {t}"), range);
            }
            let mut d = dims.to_vec();
            d.remove(a as usize);
            Ok(Some(with_dims(t, d)))
        };
        let traced = self.trace(of, args, range, &retype)?;
        let mut vm = Vmap { tag: SmolStr::new(of), size: Dim::constant(1), range, map: HashMap::new() };
        let loc = self.loc(range);
        let mut size: Option<Dim> = None;
        for &(s, v) in &traced.inputs {
            let name = traced.func.values[s.0 as usize].name.clone().unwrap_or_default();
            match axis_of(&name) {
                Some(axis) => {
                    let rank = self.vty(v).dims().len() as i64;
                    let a = (if axis < 0 { axis + rank } else { axis }) as usize;
                    let d = self.vty(v).dims()[a].clone();
                    if size.as_ref().is_some_and(|s| *s != d) {
                        return unsupported(format!("`vmap({of})`: the mapped axes differ in size"), range);
                    }
                    size = Some(d);
                    vm.size = self.vty(v).dims()[a].clone();
                    let front = self.move_to_front(v, a, &vm, &loc);
                    vm.map.insert(s, B::Batched(front));
                }
                None => {
                    vm.map.insert(s, B::Same(v));
                }
            }
        }
        if size.is_none() {
            return unsupported(format!("`vmap({of})` maps no argument"), range);
        }
        vm.map.insert(traced.token, B::Same(self.g.token));
        for &id in &traced.func.body.ops {
            let op = traced.func.op(id).clone();
            if op.kind == OpKind::Return || op.kind == OpKind::EffectToken {
                continue;
            }
            self.batch_op(&traced.func, &op, &mut vm)?;
            // The batched values keep the names they have in `f`.
            for &r in &op.results {
                if let (Some(name), Some(B::Batched(v) | B::Same(v))) =
                    (traced.func.values[r.0 as usize].name.clone(), vm.map.get(&r).copied())
                {
                    if self.g.b.func.values[v.0 as usize].name.is_none() {
                        self.g.b.name(v, &name);
                    }
                }
            }
        }
        let mut outs = Vec::new();
        for (i, &o) in traced.outputs.iter().enumerate() {
            let axis = out_axes.get(i).or(out_axes.last()).copied().unwrap_or(0).max(0) as usize;
            let b = match vm.map.get(&o) {
                Some(B::Batched(v)) => *v,
                Some(B::Same(v)) => {
                    // An output no mapped argument reaches: the same for every example.
                    let t = self.vty(*v);
                    if !matches!(t, Type::Tensor(_)) {
                        return unsupported(format!("`vmap({of})` returns {t}, not a tensor"), range);
                    }
                    self.batch_broadcast(*v, &vm, &loc)
                }
                None => return unsupported(format!("`vmap({of})`: an output has no value"), range),
            };
            outs.push(self.move_from_front(b, axis, &vm, &loc));
        }
        Ok(if outs.len() == 1 { Val::One(outs[0]) } else { Val::Many(outs) })
    }

    fn tag(&self, vm: &Vmap) -> (&'static str, SmolStr) {
        let _ = self;
        ("vmap", vm.tag.clone())
    }

    fn vemit(
        &mut self,
        vm: &Vmap,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> ValueId {
        let (k, t) = self.tag(vm);
        self.emit_tagged(kind, operands, vec![ty], attrs, (k, &t), loc)[0]
    }

    fn vreshape(&mut self, x: ValueId, dims: Vec<Dim>, vm: &Vmap, loc: &Loc) -> ValueId {
        let t = self.vty(x);
        if t.dims() == dims.as_slice() {
            return x;
        }
        self.vemit(vm, OpKind::Reshape, vec![x], with_dims(&t, dims), vec![], loc)
    }

    /// Swaps the last two dims.
    fn vswap(&mut self, x: ValueId, vm: &Vmap, loc: &Loc) -> ValueId {
        let t = self.vty(x);
        let mut dims = t.dims().to_vec();
        let n = dims.len();
        dims.swap(n - 1, n - 2);
        let mut perm: Vec<i64> = (0..n as i64).collect();
        perm.swap(n - 1, n - 2);
        self.vemit(vm, OpKind::GTranspose, vec![x], with_dims(&t, dims), vec![("perm", Attr::Ints(perm))], loc)
    }

    /// `x` with its axis `a` moved to the front: `[P, D, Q]` → `[D, P, Q]` through
    /// transposes of the last two dims.
    fn move_to_front(&mut self, x: ValueId, a: usize, vm: &Vmap, loc: &Loc) -> ValueId {
        if a == 0 {
            return x;
        }
        let dims = self.vty(x).dims().to_vec();
        let (p, d, q) = (&dims[..a], dims[a].clone(), &dims[a + 1..]);
        let mut out_dims = vec![d.clone()];
        out_dims.extend(p.iter().cloned());
        out_dims.extend(q.iter().cloned());
        let (pp, qq) = (product(p), product(q));
        let y = if q.is_empty() {
            let x2 = self.vreshape(x, vec![pp, d], vm, loc);
            self.vswap(x2, vm, loc)
        } else {
            let x2 = self.vreshape(x, vec![pp.clone(), d.mul_plain(&qq)], vm, loc);
            let t = self.vswap(x2, vm, loc);
            let t3 = self.vreshape(t, vec![d, qq, pp], vm, loc);
            self.vswap(t3, vm, loc)
        };
        self.vreshape(y, out_dims, vm, loc)
    }

    /// The batch dim of `x` (in front) moved to axis `k`.
    fn move_from_front(&mut self, x: ValueId, k: usize, vm: &Vmap, loc: &Loc) -> ValueId {
        if k == 0 {
            return x;
        }
        let dims = self.vty(x).dims().to_vec();
        let (b, rest) = (dims[0].clone(), &dims[1..]);
        let (f, q) = (&rest[..k], &rest[k..]);
        let mut out_dims: Vec<Dim> = f.to_vec();
        out_dims.push(b.clone());
        out_dims.extend(q.iter().cloned());
        let (ff, qq) = (product(f), product(q));
        let y = if q.is_empty() {
            let x2 = self.vreshape(x, vec![b, ff], vm, loc);
            self.vswap(x2, vm, loc)
        } else {
            let x3 = self.vreshape(x, vec![b.clone(), ff.clone(), qq.clone()], vm, loc);
            let t = self.vswap(x3, vm, loc);
            let t2 = self.vreshape(t, vec![b.mul_plain(&qq), ff], vm, loc);
            self.vswap(t2, vm, loc)
        };
        self.vreshape(y, out_dims, vm, loc)
    }

    /// An unbatched tensor broadcast over the batch.
    fn batch_broadcast(&mut self, v: ValueId, vm: &Vmap, loc: &Loc) -> ValueId {
        let t = self.vty(v);
        let mut dims = vec![vm.size.clone()];
        dims.extend(t.dims().iter().cloned());
        self.vemit(vm, OpKind::GBroadcast, vec![v], with_dims(&t, dims), vec![], loc)
    }

    fn batched_type(t: &Type, vm: &Vmap) -> Type {
        let mut dims = vec![vm.size.clone()];
        dims.extend(t.dims().iter().cloned());
        with_dims(t, dims)
    }

    fn refuse<T>(&self, vm: &Vmap, op: &Op, why: &str) -> R<T> {
        unsupported(
            format!("`vmap({})`: `{}` (in `{}`) cannot be batched{why}", vm.tag, op.kind.name(), vm.tag),
            vm.range,
        )
    }

    /// Emits the batched form of one op of the traced graph.
    fn batch_op(&mut self, f: &Func, op: &Op, vm: &mut Vmap) -> R<()> {
        let loc = op.loc.clone();
        let get = |v: ValueId, vm: &Vmap| vm.map.get(&v).copied();
        let mut operands = Vec::new();
        for &o in &op.operands {
            match get(o, vm) {
                Some(b) => operands.push(b),
                None => return self.refuse(vm, op, ": an operand has no value"),
            }
        }
        let batched: Vec<bool> = operands.iter().map(|b| matches!(b, B::Batched(_))).collect();
        let value = |b: &B| match b {
            B::Same(v) | B::Batched(v) => *v,
        };
        let result_types: Vec<Type> = op.results.iter().map(|&r| f.ty(r).clone()).collect();
        if !batched.iter().any(|&b| b) {
            // Nothing mapped reaches this op: copied as it is (effects in order).
            let vals = operands.iter().map(value).collect();
            let results = self.g.b.op(op.kind, vals, result_types.clone(), op.attrs.clone(), &loc);
            for ((&r, nr), t) in op.results.iter().zip(results).zip(&result_types) {
                if *t == Type::Token {
                    self.g.token = nr;
                }
                vm.map.insert(r, B::Same(nr));
            }
            return Ok(());
        }
        // Operands as batched tensors (unbatched ones broadcast over the batch).
        let all_batched = |body: &mut Self, vm: &Vmap| -> Vec<ValueId> {
            operands
                .iter()
                .map(|b| match b {
                    B::Batched(v) => *v,
                    B::Same(v) if matches!(body.vty(*v), Type::Tensor(_)) => body.batch_broadcast(*v, vm, &loc),
                    B::Same(v) => *v,
                })
                .collect()
        };
        let one = |body: &mut Self, vm: &mut Vmap, kind: OpKind, xs: Vec<ValueId>, attrs: Vec<(&'static str, Attr)>| {
            let t = Self::batched_type(&result_types[0], vm);
            let r = body.vemit(vm, kind, xs, t, attrs, &loc);
            vm.map.insert(op.results[0], B::Batched(r));
        };
        let shift = |attrs: &[(&'static str, Attr)], key: &str| -> Vec<(&'static str, Attr)> {
            attrs
                .iter()
                .map(|(k, v)| match (k, v) {
                    (k, Attr::Int(a)) if *k == key => (*k, Attr::Int(a + 1)),
                    (k, Attr::Ints(a)) if *k == key => (*k, Attr::Ints(a.iter().map(|x| x + 1).collect())),
                    _ => (*k, v.clone()),
                })
                .collect()
        };
        match op.kind {
            k if k.is_elementwise() => {
                if operands.iter().any(|b| !matches!(self.vty(value(b)), Type::Tensor(_))) {
                    return self.refuse(vm, op, ": it mixes a scalar with a mapped tensor");
                }
                let xs = all_batched(self, vm);
                one(self, vm, k, xs, op.attrs.clone());
            }
            OpKind::GBroadcast => {
                // [B, d...] → [B, 1.., d...] → [B, e...]
                let x = value(&operands[0]);
                let (rd, re) = (self.vty(x).dims().len() - 1, result_types[0].dims().len());
                let mut dims = vec![vm.size.clone()];
                dims.extend(std::iter::repeat_n(Dim::constant(1), re.saturating_sub(rd)));
                dims.extend(self.vty(x).dims()[1..].iter().cloned());
                let x = self.vreshape(x, dims, vm, &loc);
                one(self, vm, OpKind::GBroadcast, vec![x], op.attrs.clone());
            }
            OpKind::MatMul => {
                let (a, b) = (value(&operands[0]), value(&operands[1]));
                let (ra, rb) = (f.ty(op.operands[0]).dims().len(), f.ty(op.operands[1]).dims().len());
                if ra < 2 || rb < 2 {
                    return self.refuse(vm, op, ": an operand has fewer than two dims");
                }
                let r = ra.max(rb) - 2;
                // The example's batch dims, broadcast (NumPy: aligned from the right).
                let batch_of = |t: &Type| {
                    let d = t.dims();
                    let mut out = vec![Dim::constant(1); r - (d.len() - 2)];
                    out.extend(d[..d.len() - 2].iter().cloned());
                    out
                };
                let (ba, bb) = (batch_of(f.ty(op.operands[0])), batch_of(f.ty(op.operands[1])));
                let full: Vec<Dim> = ba
                    .iter()
                    .zip(&bb)
                    .map(|(x, y)| if x.as_const() == Some(1) { y.clone() } else { x.clone() })
                    .collect();
                // A mapped operand gets the batch dim, then every batch dim of the product
                // (a broadcast, which `grad` sums back), so both operands of a matmul of
                // mapped operands have equal batch dims.
                let pad = |body: &mut Self, vm: &Vmap, x: ValueId, rank: usize| {
                    let dims = body.vty(x).dims().to_vec();
                    let mut d = vec![dims[0].clone()];
                    d.extend(std::iter::repeat_n(Dim::constant(1), r - (rank - 2)));
                    d.extend(dims[1..].iter().cloned());
                    let padded = body.vreshape(x, d, vm, &loc);
                    let mut want = vec![vm.size.clone()];
                    want.extend(full.iter().cloned());
                    want.extend(dims[dims.len() - 2..].iter().cloned());
                    let t = body.vty(padded);
                    if t.dims() == want.as_slice() {
                        padded
                    } else {
                        body.vemit(vm, OpKind::GBroadcast, vec![padded], with_dims(&t, want), vec![], &loc)
                    }
                };
                match (batched[0], batched[1]) {
                    (true, false) => {
                        let a = pad(self, vm, a, ra);
                        one(self, vm, OpKind::MatMul, vec![a, b], op.attrs.clone());
                    }
                    (false, true) if ra == 2 && rb == 2 => {
                        // A @ X_b = (X_bᵀ @ Aᵀ)ᵀ: a matmul whose right operand has no
                        // batch dims (one GEMM, and `grad` differentiates it).
                        let bt = self.vswap(b, vm, &loc);
                        let at = self.vswap(a, vm, &loc);
                        let per = &result_types[0];
                        let mut dims = vec![vm.size.clone()];
                        dims.extend(per.dims().iter().rev().cloned());
                        let p =
                            self.vemit(vm, OpKind::MatMul, vec![bt, at], with_dims(per, dims), op.attrs.clone(), &loc);
                        let r = self.vswap(p, vm, &loc);
                        vm.map.insert(op.results[0], B::Batched(r));
                    }
                    (false, true) => {
                        let b = pad(self, vm, b, rb);
                        one(self, vm, OpKind::MatMul, vec![a, b], op.attrs.clone());
                    }
                    _ => {
                        let (a, b) = (pad(self, vm, a, ra), pad(self, vm, b, rb));
                        one(self, vm, OpKind::MatMul, vec![a, b], op.attrs.clone());
                    }
                }
            }
            OpKind::GReduce => {
                let attrs = shift(&op.attrs, "axes");
                one(self, vm, OpKind::GReduce, vec![value(&operands[0])], attrs);
            }
            OpKind::Softmax | OpKind::LogSumExp | OpKind::Concat => {
                let attrs = shift(&op.attrs, "axis");
                let xs = all_batched(self, vm);
                one(self, vm, op.kind, xs, attrs);
            }
            OpKind::Split => {
                let attrs = shift(&op.attrs, "axis");
                let types: Vec<Type> = result_types.iter().map(|t| Self::batched_type(t, vm)).collect();
                let (k, t) = self.tag(vm);
                let results = self.emit_tagged(OpKind::Split, vec![value(&operands[0])], types, attrs, (k, &t), &loc);
                for (&r, nr) in op.results.iter().zip(results) {
                    vm.map.insert(r, B::Batched(nr));
                }
            }
            OpKind::GTranspose => {
                let perm = match op.attr("perm") {
                    Some(Attr::Ints(p)) => p.clone(),
                    _ => return self.refuse(vm, op, ": it has no permutation"),
                };
                let mut new = vec![0];
                new.extend(perm.iter().map(|p| p + 1));
                let mut attrs = op.attrs.clone();
                attrs.retain(|(k, _)| *k != "perm");
                attrs.push(("perm", Attr::Ints(new)));
                one(self, vm, OpKind::GTranspose, vec![value(&operands[0])], attrs);
            }
            OpKind::Reshape => one(self, vm, OpKind::Reshape, vec![value(&operands[0])], op.attrs.clone()),
            OpKind::LayerNorm | OpKind::RmsNorm => {
                if !batched[0] || batched[1..].iter().any(|&b| b) {
                    return self.refuse(vm, op, " with a mapped weight or bias (only its input may be mapped)");
                }
                let xs = operands.iter().map(value).collect();
                one(self, vm, op.kind, xs, op.attrs.clone());
            }
            OpKind::TensorDim => {
                let attrs = shift(&op.attrs, "axis");
                let (k, t) = self.tag(vm);
                let r =
                    self.emit_tagged(OpKind::TensorDim, vec![value(&operands[0])], result_types, attrs, (k, &t), &loc)
                        [0];
                vm.map.insert(op.results[0], B::Same(r));
            }
            OpKind::Prefetch => {
                // A placement hint of the batched values: ordered on the token chain.
                let vals = operands.iter().map(value).collect();
                let (k, t) = self.tag(vm);
                let results = self.emit_tagged(OpKind::Prefetch, vals, result_types, op.attrs.clone(), (k, &t), &loc);
                for (&r, nr) in op.results.iter().zip(results) {
                    vm.map.insert(r, B::Same(nr));
                }
            }
            OpKind::SplitQkv | OpKind::MergeHeads | OpKind::FlashAttention => {
                // Ops of a fixed rank with a batch dim of their own in front: the mapped
                // axis is folded into it ([V, B, ...] → [V·B, ...]) and unfolded after.
                if op.kind == OpKind::FlashAttention && op.operands.len() > 3 {
                    return self.refuse(vm, op, " with dropout: its mask would be drawn over the folded batch");
                }
                let rank0 = |t: &Type| matches!(t, Type::Tensor(_)) && t.dims().is_empty();
                if result_types.iter().any(rank0) || op.operands.iter().any(|&o| rank0(f.ty(o))) {
                    return self.refuse(vm, op, ": a rank-0 operand or result");
                }
                let mut xs = Vec::new();
                for (b, &was) in operands.iter().zip(&batched) {
                    let v = value(b);
                    if !matches!(self.vty(v), Type::Tensor(_)) {
                        xs.push(v);
                        continue;
                    }
                    let v = if was { v } else { self.batch_broadcast(v, vm, &loc) };
                    let dims = self.vty(v).dims().to_vec();
                    let mut folded = vec![dims[0].mul_plain(&dims[1])];
                    folded.extend(dims[2..].iter().cloned());
                    xs.push(self.vreshape(v, folded, vm, &loc));
                }
                let folded_types: Vec<Type> = result_types
                    .iter()
                    .map(|t| {
                        let mut d = t.dims().to_vec();
                        d[0] = vm.size.mul_plain(&d[0]);
                        with_dims(t, d)
                    })
                    .collect();
                let (k, t) = self.tag(vm);
                let results = self.emit_tagged(op.kind, xs, folded_types, op.attrs.clone(), (k, &t), &loc);
                for ((&r, nr), per) in op.results.iter().zip(results).zip(&result_types) {
                    let dims = Self::batched_type(per, vm).dims().to_vec();
                    let unfolded = self.vreshape(nr, dims, vm, &loc);
                    vm.map.insert(r, B::Batched(unfolded));
                }
            }
            OpKind::Dropout => {
                return self.refuse(
                    vm,
                    op,
                    " yet: its mask is drawn per call site, and one site drawing a mask per example has no rule",
                )
            }
            _ => return self.refuse(vm, op, " yet"),
        }
        Ok(())
    }
}
