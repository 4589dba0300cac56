//! Puts the collectives a [`Propagation`] found into Graph IR, as effects on the token
//! chain: `%x', %tok' = dist.all_gather %x, %tok {axis, dim, ...}`,
//! `%a', %b', %tok' = dist.all_reduce %a, %b, %tok {axis, combine, bucket, ...}` (a
//! bucket is one op). Each carries its cost on the mesh (`bytes` per device, the
//! `algorithm` and `time_us` of `cost::estimate`), so `tessera lower` shows what the
//! layout costs. The values keep their global types: Graph IR stays the global view.

use std::collections::HashMap;

use smol_str::SmolStr;

use super::cost::{self, Collective, Link, DEVICES_PER_NODE};
use super::propagate::{Propagation, Sharding};
use crate::ir::{Attr, Func, Op, OpId, OpKind, Region, Type, ValueId};

/// A mesh's axes and sizes, row-major (the last axis varies fastest).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MeshAxes(pub Vec<(SmolStr, usize)>);

impl MeshAxes {
    pub fn size(&self, axis: &str) -> usize {
        self.0.iter().find(|(a, _)| a == axis).map_or(1, |(_, s)| *s)
    }

    /// NVLink when every group of `axis` stays inside one node of
    /// [`DEVICES_PER_NODE`] consecutive devices, InfiniBand otherwise.
    pub fn link(&self, axis: &str) -> Link {
        let Some(i) = self.0.iter().position(|(a, _)| a == axis) else { return cost::LINKS[0] };
        let span: usize = self.0[i..].iter().map(|(_, s)| s).product();
        let within = span <= DEVICES_PER_NODE && DEVICES_PER_NODE.is_multiple_of(span);
        let name = if within { "nvlink4" } else { "ib-ndr" };
        cost::link(name).unwrap_or(cost::LINKS[0])
    }
}

impl MeshAxes {
    /// `[B, D]` and what each device holds of it under `s`, `[B/4, D]`.
    pub fn shapes(&self, dims: &[tessera_frontend::check::dims::Dim], s: &Sharding) -> (String, String) {
        let global: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        let local: Vec<String> = dims
            .iter()
            .zip(&s.dims)
            .map(|(d, axis)| axis.as_ref().map_or(d.to_string(), |a| format!("{d}/{}", self.size(a))))
            .collect();
        (format!("[{}]", global.join(", ")), format!("[{}]", local.join(", ")))
    }
}

/// One collective of [`Inserted::func`], as its op describes it.
#[derive(Clone, PartialEq, Debug)]
pub struct CollectiveOp {
    /// `all_reduce`, `all_gather`, `reduce_scatter` or `all_to_all`.
    pub kind: String,
    /// Written by the user (`dist.all_reduce(...)`), not implied by the layouts.
    pub explicit: bool,
    pub axis: String,
    /// The tensors it makes whole or complete.
    pub operands: Vec<ValueId>,
    /// Bytes one device holds of the operand(s), where the dims are known.
    pub bytes: Option<i64>,
    pub algorithm: Option<String>,
    pub time_us: Option<f64>,
}

/// Graph IR with its collectives, and the sharding of each of its values (the
/// collectives' results included).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Inserted {
    pub func: Func,
    pub shardings: Vec<Option<Sharding>>,
}

impl Inserted {
    /// The collectives, in program order.
    pub fn collectives(&self) -> Vec<CollectiveOp> {
        let f = &self.func;
        f.body
            .ops
            .iter()
            .map(|&id| f.op(id))
            .filter(|op| op.kind.is_collective())
            .map(|op| CollectiveOp {
                kind: op.kind.name().trim_start_matches("dist.").to_string(),
                explicit: op.attr("explicit") == Some(&Attr::Bool(true)),
                axis: op.str_attr("axis").unwrap_or("").to_string(),
                operands: op.operands.iter().copied().filter(|&v| !matches!(f.ty(v), Type::Token)).collect(),
                bytes: op.int_attr("bytes"),
                algorithm: op.str_attr("algorithm").map(str::to_string),
                time_us: op.attr("time_us").and_then(Attr::as_float),
            })
            .collect()
    }
}

/// `f` with the collectives of `p` inserted. `value_bytes` gives a value's global size.
pub fn insert_collectives(
    f: &Func,
    p: &Propagation,
    mesh: &MeshAxes,
    value_bytes: &dyn Fn(ValueId) -> Option<u64>,
) -> Func {
    insert_with_shardings(f, p, mesh, value_bytes).func
}

/// [`insert_collectives`], with every value's sharding.
pub fn insert_with_shardings(
    f: &Func,
    p: &Propagation,
    mesh: &MeshAxes,
    value_bytes: &dyn Fn(ValueId) -> Option<u64>,
) -> Inserted {
    let mut out = f.clone();
    let mut shardings = p.shardings.clone();
    let mut uses: HashMap<(OpId, usize), Vec<usize>> = HashMap::new();
    for &(op, operand, index) in &p.uses {
        uses.entry((op, operand)).or_default().push(index);
    }
    // A collective's result has its input's global size: `origin` leads a new value
    // back to a value of `f`, which `value_bytes` knows.
    let mut origin: HashMap<ValueId, ValueId> = HashMap::new();
    // The bytes one device holds of `v`: its global size over the axes splitting it.
    let local_bytes = |v: ValueId, shardings: &[Option<Sharding>], origin: &HashMap<ValueId, ValueId>| {
        let split: usize = shardings
            .get(v.0 as usize)
            .and_then(Option::as_ref)
            .map_or(1, |s| s.dims.iter().flatten().map(|a| mesh.size(a)).product::<usize>());
        let mut source = v;
        while let Some(&o) = origin.get(&source) {
            source = o;
        }
        value_bytes(source).map(|b| b / split.max(1) as u64)
    };
    // A partial sum of a 16- or 8-bit float is reduced in f32 (it is an accumulator),
    // so its all-reduce moves 4 bytes per element.
    let reduced_bytes = |v: ValueId, bytes: Option<u64>, out: &Func| -> Option<u64> {
        let dtype = out.ty(v).dtype()?;
        let narrow = dtype.is_float() && dtype.bits() < 32;
        bytes.map(|b| if narrow { b / u64::from(dtype.bytes()) * 4 } else { b })
    };
    let mut token: Option<ValueId> = None;
    let mut renamed_token: HashMap<ValueId, ValueId> = HashMap::new();
    // (input value, collective index) → output value: each collective once.
    let mut done: HashMap<(ValueId, usize), ValueId> = HashMap::new();
    let mut body = Vec::with_capacity(f.body.ops.len() + p.collectives.len());
    for &id in &f.body.ops {
        let op = f.op(id).clone();
        let mut operands = op.operands.clone();
        // The collectives the bucket ops below already did.
        let mut bucketed: Vec<usize> = Vec::new();
        // Bucketed all-reduces before the return: one op per bucket.
        if op.kind == OpKind::Return {
            let mut buckets: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
            for (i, _) in op.operands.iter().enumerate() {
                for &c in uses.get(&(id, i)).map(Vec::as_slice).unwrap_or(&[]) {
                    if let Some(b) = p.collectives[c].bucket {
                        match buckets.iter_mut().find(|(bb, _)| *bb == b) {
                            Some((_, members)) => members.push((i, c)),
                            None => buckets.push((b, vec![(i, c)])),
                        }
                    }
                }
            }
            for (bucket, members) in buckets {
                bucketed.extend(members.iter().map(|&(_, c)| c));
                let first = &p.collectives[members[0].1];
                let inputs: Vec<ValueId> = members.iter().map(|&(i, _)| operands[i]).collect();
                let results: Vec<ValueId> = inputs
                    .iter()
                    .map(|&v| out.new_value(out.ty(v).clone(), out.values[v.0 as usize].name.clone().as_deref()))
                    .collect();
                let bytes: Option<u64> =
                    inputs.iter().map(|&v| reduced_bytes(v, local_bytes(v, &shardings, &origin), &out)).sum();
                for (&i, &r) in inputs.iter().zip(&results) {
                    origin.insert(r, i);
                }
                let mut attrs = vec![
                    ("axis", Attr::Str(first.axis.clone())),
                    ("combine", Attr::Str(SmolStr::new(first.combine.name()))),
                    ("bucket", Attr::Int(bucket as i64)),
                ];
                cost_attrs(&mut attrs, Collective::AllReduce, bytes, mesh, &first.axis);
                let old_token = token;
                let new_op =
                    collective_op(&mut out, OpKind::AllReduce, inputs, results.clone(), attrs, &op, &mut token);
                if let (Some(old), Some(new)) = (old_token, token) {
                    renamed_token.insert(old, new);
                }
                body.push(new_op);
                for (&(i, _), &r) in members.iter().zip(&results) {
                    let reduced = shardings.get(operands[i].0 as usize).cloned().flatten().map(|mut s| {
                        s.partial.retain(|(a, _)| *a != first.axis);
                        s
                    });
                    set_sharding(&mut shardings, r, reduced);
                    operands[i] = r;
                }
            }
        }
        rename_tokens(&mut operands, &renamed_token);
        for (i, slot) in operands.iter_mut().enumerate() {
            for &c in uses.get(&(id, i)).map(Vec::as_slice).unwrap_or(&[]) {
                if bucketed.contains(&c) {
                    continue;
                }
                let input = *slot;
                if let Some(&v) = done.get(&(input, c)) {
                    *slot = v;
                    continue;
                }
                let n = &p.collectives[c];
                let result = out.new_value(out.ty(input).clone(), out.values[input.0 as usize].name.clone().as_deref());
                origin.insert(result, input);
                let mut attrs = vec![("axis", Attr::Str(n.axis.clone()))];
                let (kind, bytes) = match n.kind {
                    Collective::AllGather => {
                        attrs.push(("dim", Attr::Int(n.dim.unwrap_or(0) as i64)));
                        (
                            OpKind::AllGather,
                            local_bytes(input, &shardings, &origin).map(|b| b * mesh.size(&n.axis) as u64),
                        )
                    }
                    _ => {
                        attrs.push(("combine", Attr::Str(SmolStr::new(n.combine.name()))));
                        (OpKind::AllReduce, reduced_bytes(input, local_bytes(input, &shardings, &origin), &out))
                    }
                };
                cost_attrs(&mut attrs, n.kind, bytes, mesh, &n.axis);
                let old_token = token;
                let new_op = collective_op(&mut out, kind, vec![input], vec![result], attrs, &op, &mut token);
                if let (Some(old), Some(new)) = (old_token, token) {
                    renamed_token.insert(old, new);
                }
                body.push(new_op);
                let after = shardings.get(input.0 as usize).cloned().flatten().map(|mut s| {
                    match n.kind {
                        Collective::AllGather => {
                            if let Some(d) = n.dim.and_then(|d| s.dims.get_mut(d)) {
                                *d = None;
                            }
                        }
                        _ => s.partial.retain(|(a, c)| !(*a == n.axis && *c == n.combine)),
                    }
                    s
                });
                set_sharding(&mut shardings, result, after);
                done.insert((input, c), result);
                *slot = result;
            }
        }
        rename_tokens(&mut operands, &renamed_token);
        if op.kind.is_collective() {
            // A collective the program writes: what its operand's layout decided, and
            // its cost.
            let input = operands[0];
            let mut attrs: Vec<(&'static str, Attr)> = Vec::new();
            if let Some(w) = p.written.iter().find(|w| w.op == id) {
                if let (Some(d), OpKind::AllGather) = (w.dim, op.kind) {
                    attrs.push(("dim", Attr::Int(d as i64)));
                }
                if let Some(c) = w.combine {
                    attrs.push(("combine", Attr::Str(SmolStr::new(c.name()))));
                }
            }
            let axis = op.str_attr("axis").unwrap_or("").to_string();
            let held = local_bytes(input, &shardings, &origin);
            let (collective, bytes) = match op.kind {
                // The payload each cost formula takes: the gathered tensor; the reduced
                // buffer (a 16-bit partial sum in f32); each device's whole buffer.
                OpKind::AllGather => (Collective::AllGather, held.map(|b| b * mesh.size(&axis) as u64)),
                OpKind::AllReduce => (Collective::AllReduce, reduced_bytes(input, held, &out)),
                OpKind::ReduceScatter => (Collective::ReduceScatter, reduced_bytes(input, held, &out)),
                OpKind::Send => (Collective::SendRecv, held),
                _ => (Collective::AllToAll, held),
            };
            cost_attrs(&mut attrs, collective, bytes, mesh, &axis);
            for (k, v) in attrs {
                out.op_mut(id).set_attr(k, v);
            }
        }
        out.op_mut(id).operands = operands;
        if let Some(&t) = op.results.iter().find(|&&r| matches!(f.ty(r), Type::Token)) {
            token = Some(t);
        }
        body.push(id);
    }
    out.body = Region { args: f.body.args.clone(), ops: body };
    shardings.resize(out.values.len(), None);
    Inserted { func: out, shardings }
}

fn set_sharding(shardings: &mut Vec<Option<Sharding>>, v: ValueId, s: Option<Sharding>) {
    if shardings.len() <= v.0 as usize {
        shardings.resize(v.0 as usize + 1, None);
    }
    shardings[v.0 as usize] = s;
}

/// Follows the token renames to the newest token.
fn rename_tokens(operands: &mut [ValueId], renamed: &HashMap<ValueId, ValueId>) {
    for v in operands {
        while let Some(&n) = renamed.get(v) {
            *v = n;
        }
    }
}

/// A collective op at `at`'s location, threaded on the token chain when there is one.
fn collective_op(
    out: &mut Func,
    kind: OpKind,
    mut operands: Vec<ValueId>,
    mut results: Vec<ValueId>,
    attrs: Vec<(&'static str, Attr)>,
    at: &Op,
    token: &mut Option<ValueId>,
) -> OpId {
    // A collective a pipeline stage's op needs runs on that stage's devices.
    let mut attrs = attrs;
    for key in ["pipeline", "stage", "microbatch", "tick", "pass"] {
        if let Some(v) = at.attr(key) {
            attrs.push((key, v.clone()));
        }
    }
    if let Some(t) = *token {
        operands.push(t);
        let next = out.new_value(Type::Token, None);
        results.push(next);
        *token = Some(next);
    }
    out.ops.push(Op { kind, operands, results, attrs, regions: Vec::new(), loc: at.loc.clone() });
    OpId(out.ops.len() as u32 - 1)
}

fn cost_attrs(
    attrs: &mut Vec<(&'static str, Attr)>,
    kind: Collective,
    bytes: Option<u64>,
    mesh: &MeshAxes,
    axis: &str,
) {
    let Some(bytes) = bytes else { return };
    let link = mesh.link(axis);
    let estimate = cost::estimate(kind, bytes, mesh.size(axis), link);
    attrs.push(("bytes", Attr::Int(bytes as i64)));
    attrs.push(("algorithm", Attr::Str(SmolStr::new(estimate.algorithm.name()))));
    attrs.push(("link", Attr::Str(SmolStr::new(link.name))));
    attrs.push(("time_us", Attr::float((estimate.time_us * 100.0).round() / 100.0)));
}
