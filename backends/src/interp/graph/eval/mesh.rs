//! A graph function on the simulated mesh: each device runs the Graph IR on its own
//! shards (values of their local shapes), op by op in lock-step with the others, and
//! the collectives that sharding propagation inserted move real data between the
//! devices through `crate::mesh` (ring or tree, as the op's cost estimate chose).
//!
//! What each device does differently from a single-device run:
//! - its parameters are its blocks of the arguments (a split dim holds the device's
//!   block along its mesh axis);
//! - an operand whose dim is whole where the op's result is split is sliced to the
//!   device's block first (free: no data moves, as in GSPMD);
//! - `tile.dim` gives the global size, and `mean` over a split dim divides by the global
//!   count (its result is a partial sum);
//! - the collectives (`dist.all_gather`, `dist.all_reduce`, `dist.reduce_scatter`,
//!   `dist.all_to_all`, inserted by propagation or written by the program) run across
//!   the devices of each group.
//!
//! The results are assembled from the devices' blocks into global tensors.

use std::collections::BTreeMap;

use tessera_frontend::check::{DType, Dim};
use tessera_passes::dist::cost::{self, Algorithm, Collective};
use tessera_passes::dist::insert::MeshAxes;
use tessera_passes::dist::propagate::{Combine, Sharding};
use tessera_passes::ir::{Func, Op, OpId, OpKind, Type, ValueId};

use super::super::values::{numel, row_major_strides, Tensor, Val};
use super::super::{GraphArg, R};
use super::{bind_params, eval_dims, Machine};
use crate::interp::InterpError;
use crate::mesh::fabric::Parcel;
use crate::mesh::{all_gather, all_reduce_with, all_to_all, reduce_scatter, Fabric, Mesh, Network};

/// What a mesh run gives: the global results and what moved between the devices.
pub struct MeshRun {
    pub results: Vec<GraphArg>,
    pub network: Network,
}

/// Runs `func` (Graph IR with its collectives, `shardings` for each of its values) on
/// the devices of `mesh`, with global `args`; `exact` as the f64 reference.
///
/// With a fabric this is one process of a mesh of processes: it runs the device of the
/// fabric's rank, the collectives' messages to other ranks cross the fabric, and the
/// results are gathered from every rank, so every process returns the global results.
/// `network` then counts this rank's sends only.
#[allow(clippy::too_many_arguments)]
pub fn run_graph_on_mesh(
    func: &Func,
    shardings: &[Option<Sharding>],
    mesh: &MeshAxes,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    exact: bool,
    fabric: Option<&Fabric>,
) -> Result<MeshRun, InterpError> {
    let devices =
        Mesh::new(&mesh.0.iter().map(|(a, s)| (a.as_str(), *s)).collect::<Vec<_>>()).map_err(InterpError::new)?;
    if let Some(f) = fabric.filter(|f| f.world() != devices.devices()) {
        return Err(InterpError::new(format!(
            "the mesh has {} devices and the fabric {} processes: start one process per device",
            devices.devices(),
            f.world()
        )));
    }
    let (params, symbols) = bind_params(func, args, dims)?;
    let layout = Layout { func, shardings, devices: &devices, symbols: &symbols, fabric };
    let local = layout.local_func()?;
    let n = devices.devices();
    let mut machines: Vec<Machine> = (0..n)
        .map(|_| Machine {
            func: &local,
            vals: vec![None; local.values.len()],
            symbols: symbols.clone(),
            seed,
            exact,
            unrounded: false,
            kernels: None,
        })
        .collect();
    for (&p, v) in func.params.iter().zip(&params) {
        for (rank, m) in machines.iter_mut().enumerate() {
            if layout.held(rank) {
                m.vals[p.0 as usize] = Some(layout.block_of(p, v, rank)?);
            }
        }
    }
    let mut network = Network::over(n, fabric.cloned());
    for &id in &func.body.ops {
        let op = func.op(id);
        match op.kind {
            OpKind::Return => {
                if fabric.is_some() {
                    for &v in &op.operands {
                        layout.gather(id, v, &mut machines)?;
                    }
                }
                let results =
                    op.operands.iter().map(|&v| layout.assemble(id, v, &machines)).collect::<Result<Vec<_>, _>>()?;
                return Ok(MeshRun { results, network });
            }
            OpKind::Send => layout.send(id, op, &mut machines, &mut network)?,
            k if k.is_collective() => layout.collective(id, op, &mut machines, &mut network)?,
            OpKind::Split if layout.stage_slices(op) => layout.split_stages(id, op, &mut machines)?,
            OpKind::Concat if op.str_attr("role") == Some("stages") => layout.concat_stages(id, op, &mut machines)?,
            OpKind::Random | OpKind::Dropout | OpKind::CallKernel | OpKind::CacheAppend | OpKind::CachePrune => {
                return Err(InterpError::at_op(func, id, format!("`{}` does not run on a mesh yet", op.kind.name())))
            }
            _ if !op.regions.is_empty() => {
                return Err(InterpError::at_op(func, id, "ops with regions do not run on a mesh yet".into()))
            }
            _ => {
                let here = layout.runs_on(id, op, &machines)?;
                for (rank, m) in machines.iter_mut().enumerate() {
                    if !layout.held(rank) {
                        continue;
                    }
                    if !here[rank] {
                        // Not this device's stage: no value, but the token chain goes on.
                        for &r in &op.results {
                            m.vals[r.0 as usize] = matches!(func.ty(r), Type::Token).then_some(Val::Token);
                        }
                        continue;
                    }
                    let results = layout.device_op(id, op, m, rank)?;
                    for (&r, v) in op.results.iter().zip(results) {
                        m.vals[r.0 as usize] = Some(v);
                    }
                }
            }
        }
    }
    Err(InterpError::new(format!("`{}` has no func.return", func.name)))
}

/// A slice of one dim: (dim, mesh axis index, parts).
type Slice = (usize, usize, usize);

struct Layout<'a> {
    func: &'a Func,
    shardings: &'a [Option<Sharding>],
    devices: &'a Mesh,
    symbols: &'a BTreeMap<String, i64>,
    /// Across processes: this one holds only the fabric's rank.
    fabric: Option<&'a Fabric>,
}

impl Layout<'_> {
    /// Whether this process runs device `rank`.
    fn held(&self, rank: usize) -> bool {
        self.fabric.is_none_or(|f| f.holds(rank))
    }

    /// The first device this process runs.
    fn first_held(&self) -> usize {
        self.fabric.map_or(0, Fabric::rank)
    }

    /// A tensor of `v`'s type on a device (`local`: the function at local dims).
    fn local_tensor(&self, local: &Func, v: ValueId, data: Option<Vec<f64>>) -> Option<Tensor> {
        let Type::Tensor(t) = local.ty(v) else { return None };
        let dims = eval_dims(&t.dims, self.symbols)?;
        let data = data.unwrap_or_else(|| vec![0.0; numel(&dims)]);
        (data.len() == numel(&dims)).then_some(Tensor { dtype: t.dtype, dims, data })
    }

    /// Across processes, before the results are assembled: every rank's block of `v`
    /// from the process that holds it (a rank that holds none sends nothing).
    fn gather(&self, id: OpId, v: ValueId, machines: &mut [Machine]) -> R<()> {
        let Some(fabric) = self.fabric else { return Ok(()) };
        let me = fabric.rank();
        let mine = match &machines[me].vals[v.0 as usize] {
            Some(Val::Tensor(t)) => t.data.clone(),
            _ => Vec::new(),
        };
        let blocks = fabric.all_gather(mine).map_err(|e| InterpError::at_op(self.func, id, e))?;
        let local = machines[me].func;
        for (rank, data) in blocks.into_iter().enumerate() {
            if rank == me || data.is_empty() {
                continue;
            }
            let t = self.local_tensor(local, v, Some(data)).ok_or_else(|| {
                InterpError::at_op(self.func, id, format!("rank {rank} sent a result of another size"))
            })?;
            machines[rank].vals[v.0 as usize] = Some(Val::Tensor(t));
        }
        Ok(())
    }

    fn sharding(&self, v: ValueId) -> Option<&Sharding> {
        self.shardings.get(v.0 as usize).and_then(Option::as_ref)
    }

    fn axis(&self, id: OpId, name: &str) -> R<usize> {
        self.devices
            .axis(name)
            .ok_or_else(|| InterpError::at_op(self.func, id, format!("the mesh has no axis `{name}`")))
    }

    fn global_dims(&self, v: ValueId) -> Option<Vec<usize>> {
        match self.func.ty(v) {
            Type::Tensor(t) => eval_dims(&t.dims, self.symbols),
            _ => None,
        }
    }

    /// The dtype `v` has on a device: its own, or f32 while it is a partial sum.
    fn local_ty(&self, v: ValueId) -> Option<DType> {
        let Type::Tensor(t) = self.func.ty(v) else { return None };
        let partial = self.sharding(v).is_some_and(|s| !s.partial.is_empty());
        Some(if partial && t.dtype.is_float() && t.dtype.bits() < 32 { DType::F32 } else { t.dtype })
    }

    /// Each split dim's (dim, mesh axis index, parts).
    fn splits(&self, s: &Sharding) -> R<Vec<(usize, usize, usize)>> {
        let mut out = Vec::new();
        for (d, axis) in s.dims.iter().enumerate() {
            if let Some(a) = axis {
                let i = self.devices.axis(a).ok_or_else(|| InterpError::new(format!("the mesh has no axis `{a}`")))?;
                out.push((d, i, self.devices.axis_size(i)));
            }
        }
        Ok(out)
    }

    /// The function with every tensor value's type at its local, concrete dims.
    fn local_func(&self) -> R<Func> {
        let mut local = self.func.clone();
        for (i, info) in local.values.iter_mut().enumerate() {
            let Type::Tensor(t) = &mut info.ty else { continue };
            let v = ValueId(i as u32);
            let Some(mut dims) = eval_dims(&t.dims, self.symbols) else { continue };
            if let Some(s) = self.sharding(v) {
                for (d, _, parts) in self.splits(s)? {
                    if !dims[d].is_multiple_of(parts) {
                        let what = match &info.name {
                            Some(n) => format!("`{n}`"),
                            None => format!("%{i}"),
                        };
                        return Err(InterpError::new(format!(
                            "dim {d} of {what} has {} elements, which do not split over {parts} devices (E0312)",
                            dims[d]
                        )));
                    }
                    dims[d] /= parts;
                }
                // A partial sum stays in f32 until its all-reduce rounds the total once,
                // as accumulation does on one device (an accumulator is never bf16).
                if !s.partial.is_empty() && t.dtype.is_float() && t.dtype.bits() < 32 {
                    t.dtype = DType::F32;
                    t.policies.clear();
                }
            }
            t.dims = dims.iter().map(|&x| Dim::constant(x as i64)).collect();
        }
        Ok(local)
    }

    /// Device `rank`'s block of a whole value `v` laid out as `v`'s sharding says.
    fn block_of(&self, v: ValueId, val: &Val, rank: usize) -> R<Val> {
        let (Val::Tensor(t), Some(s)) = (val, self.sharding(v)) else { return Ok(val.clone()) };
        let coords = self.devices.coords(rank);
        let mut t = t.clone();
        for (d, axis, parts) in self.splits(s)? {
            t = take_block(&t, d, parts, coords[axis]);
        }
        Ok(Val::Tensor(t))
    }

    /// One op on one device, its operands sliced where the op's result is split and
    /// they are whole.
    fn device_op(&self, id: OpId, op: &Op, m: &mut Machine, rank: usize) -> R<Vec<Val>> {
        if op.kind == OpKind::TensorDim {
            let global = self.global_dims(op.operands[0]).unwrap_or_default();
            let axis = op.int_attr("axis").unwrap_or(0).rem_euclid(global.len().max(1) as i64) as usize;
            return Ok(vec![Val::Index(global.get(axis).copied().unwrap_or(0) as i64)]);
        }
        if op.kind == OpKind::FlashAttention
            && op.attr("causal") == Some(&tessera_passes::ir::Attr::Bool(true))
            && op
                .results
                .first()
                .and_then(|&r| self.sharding(r))
                .is_some_and(|s| s.dims.get(2).is_some_and(Option::is_some))
        {
            return Err(InterpError::at_op(
                self.func,
                id,
                "causal attention with the queries split over the mesh does not run on a mesh yet".into(),
            ));
        }
        let coords = self.devices.coords(rank);
        let mut saved = Vec::new();
        let plan: Vec<(usize, Vec<Slice>)> = self.operand_slices(op)?.into_iter().enumerate().collect();
        // Two different slicings of one value (`matmul(x, x)` with only one side split)
        // would need two copies of it.
        for (i, slices) in &plan {
            let v = op.operands[*i];
            if plan.iter().any(|(j, other)| op.operands[*j] == v && other != slices) {
                return Err(InterpError::at_op(
                    self.func,
                    id,
                    "one value at two operands with different layouts does not run on a mesh yet".into(),
                ));
            }
        }
        for (i, slices) in plan {
            if slices.is_empty() {
                continue;
            }
            let v = op.operands[i];
            // A value at two operand positions is sliced once (checked equal above).
            if saved.iter().any(|(w, _)| *w == v) {
                continue;
            }
            let Some(Val::Tensor(t)) = m.vals[v.0 as usize].clone() else { continue };
            let mut sliced = t.clone();
            for (d, axis, parts) in slices {
                sliced = take_block(&sliced, d, parts, coords[axis]);
            }
            saved.push((v, m.vals[v.0 as usize].replace(Val::Tensor(sliced))));
        }
        let result = m.op(id, op);
        for (v, old) in saved.into_iter().rev() {
            m.vals[v.0 as usize] = old;
        }
        let mut results = result?;
        // `mean` over split dims: each device's term of the sum is its local sum over
        // the global count.
        if op.kind == OpKind::GReduce && op.str_attr("kind") == Some("mean") {
            let parts = self.reduced_split_parts(op)?;
            if parts > 1 {
                if let Some(Val::Tensor(t)) = results.first_mut() {
                    for x in &mut t.data {
                        *x /= parts as f64;
                    }
                    *t = rounded(t);
                }
            }
        }
        Ok(results)
    }

    fn reduced_split_parts(&self, op: &Op) -> R<usize> {
        let Some(s) = self.sharding(op.operands[0]) else { return Ok(1) };
        let axes: Vec<usize> = match op.attr("axes") {
            Some(tessera_passes::ir::Attr::Ints(a)) => a.iter().map(|&x| x as usize).collect(),
            _ => (0..s.dims.len()).collect(),
        };
        Ok(self.splits(s)?.iter().filter(|(d, _, _)| axes.contains(d)).map(|(_, _, p)| p).product())
    }

    /// Per operand, the (dim, axis, parts) to slice it by: where it is whole but the op
    /// computes on blocks.
    fn operand_slices(&self, op: &Op) -> R<Vec<Vec<(usize, usize, usize)>>> {
        let mut out = vec![Vec::new(); op.operands.len()];
        let Some(result) = op.results.first().and_then(|&r| self.sharding(r)) else { return Ok(out) };
        // A tensor no op gave a layout (a broadcast constant) is whole on every device.
        let operand = |i: usize| {
            let v = op.operands[i];
            self.sharding(v).cloned().or_else(|| match self.func.ty(v) {
                Type::Tensor(t) => Some(Sharding::replicated(t.dims.len())),
                _ => None,
            })
        };
        let axis_parts = |a: &str| -> R<(usize, usize)> {
            let i = self.devices.axis(a).ok_or_else(|| InterpError::new(format!("the mesh has no axis `{a}`")))?;
            Ok((i, self.devices.axis_size(i)))
        };
        let elementwise = op.kind.is_elementwise() || matches!(op.kind, OpKind::Select);
        if elementwise {
            for (i, slot) in out.iter_mut().enumerate() {
                let Some(s) = operand(i) else { continue };
                if s.dims.len() != result.dims.len() {
                    continue;
                }
                for (d, (mine, want)) in s.dims.iter().zip(&result.dims).enumerate() {
                    if let (None, Some(a)) = (mine, want) {
                        let (axis, parts) = axis_parts(a)?;
                        slot.push((d, axis, parts));
                    }
                }
            }
        } else if matches!(op.kind, OpKind::Concat | OpKind::FlashAttention) {
            // Dims that correspond one to one with the result's: every dim but a
            // concat's axis; attention's batch and head dims (q, k and v).
            let rank = result.dims.len();
            let axis = op.int_attr("axis").unwrap_or(0).rem_euclid(rank.max(1) as i64) as usize;
            for (i, slot) in out.iter_mut().enumerate() {
                let Some(s) = operand(i) else { continue };
                if s.dims.len() != rank {
                    continue;
                }
                let dims: Vec<usize> = match op.kind {
                    OpKind::Concat => (0..rank).filter(|&d| d != axis).collect(),
                    _ if i < 3 => vec![0, 1],
                    _ => Vec::new(),
                };
                for d in dims {
                    if let (None, Some(a)) = (&s.dims[d], &result.dims[d]) {
                        let (axis, parts) = axis_parts(a)?;
                        slot.push((d, axis, parts));
                    }
                }
            }
        } else if op.kind == OpKind::MatMul && op.operands.len() >= 2 {
            let (Some(a), Some(b)) = (operand(0), operand(1)) else { return Ok(out) };
            let (ra, rb, rank) = (a.dims.len(), b.dims.len(), result.dims.len());
            // Batch, M and N dims follow the result; K follows the other operand.
            for (i, s, r) in [(0, &a, ra), (1, &b, rb)] {
                for d in 0..r {
                    let want = if d + 2 >= r {
                        let is_k = (i == 0 && d == r - 1) || (i == 1 && d == r - 2);
                        if is_k {
                            let other = if i == 0 { &b.dims[rb - 2] } else { &a.dims[ra - 1] };
                            other.clone()
                        } else if i == 0 {
                            result.dims[rank - 2].clone()
                        } else {
                            result.dims[rank - 1].clone()
                        }
                    } else {
                        (d + rank).checked_sub(r).and_then(|x| result.dims[x].clone())
                    };
                    if let (None, Some(axis)) = (&s.dims[d], want) {
                        let (ax, parts) = axis_parts(&axis)?;
                        out[i].push((d, ax, parts));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The devices `op` runs on: for an op of a pipeline stage (`{pipeline, stage}`),
    /// those at that position of the pipeline's axis; for any other, those that hold all
    /// its operands (everywhere, outside pipelines; a stage's devices for an op that
    /// reads a stage's value and values every device holds, as a loss after a pipeline).
    fn runs_on(&self, id: OpId, op: &Op, machines: &[Machine]) -> R<Vec<bool>> {
        if let (Some(axis), Some(stage)) = (op.str_attr("pipeline"), op.int_attr("stage")) {
            let a = self.axis(id, axis)?;
            return Ok((0..machines.len()).map(|rank| self.devices.coords(rank)[a] as i64 == stage).collect());
        }
        let values: Vec<ValueId> =
            op.operands.iter().copied().filter(|&v| !matches!(self.func.ty(v), Type::Token)).collect();
        let here: Vec<bool> = machines.iter().map(|m| values.iter().all(|&v| m.vals[v.0 as usize].is_some())).collect();
        let somewhere = values.iter().any(|&v| machines.iter().any(|m| m.vals[v.0 as usize].is_some()));
        if somewhere && !here.contains(&true) && self.fabric.is_none() {
            return Err(InterpError::at_op(self.func, id, "an op reads values of two pipeline stages".into()));
        }
        Ok(here)
    }

    /// Under `grad`, the concatenation of a stacked parameter's stage gradients: its
    /// block on a device is the part of that device's stage (`dist::propagate` split it
    /// over the pipeline's axis along dim 0), and nothing moves.
    fn concat_stages(&self, id: OpId, op: &Op, machines: &mut [Machine]) -> R<()> {
        let axis = self.axis(id, op.str_attr("pipeline").unwrap_or(""))?;
        let r = op.results[0];
        for (rank, m) in machines.iter_mut().enumerate().filter(|(rank, _)| self.held(*rank)) {
            let mine = self.devices.coords(rank)[axis];
            let part = op.operands.get(mine).and_then(|&p| m.vals[p.0 as usize].clone());
            let Some(part) = part else {
                let message = format!("device {rank} does not hold stage {mine}'s gradient");
                return Err(InterpError::at_op(self.func, id, message));
            };
            m.vals[r.0 as usize] = Some(part);
        }
        Ok(())
    }

    /// Whether `op` is the split of a parameter stacked over a pipeline's axis whose
    /// stage dim is split over that axis: each device already holds its stage's slice.
    fn stage_slices(&self, op: &Op) -> bool {
        let (Some(axis), Some("stages")) = (op.str_attr("pipeline"), op.str_attr("role")) else { return false };
        self.sharding(op.operands[0]).is_some_and(|s| s.dims.first().and_then(|d| d.as_deref()) == Some(axis))
    }

    /// The stacked split: slice k is device k's own block (on the devices at position k
    /// of the pipeline's axis), and no other device holds it.
    fn split_stages(&self, id: OpId, op: &Op, machines: &mut [Machine]) -> R<()> {
        let axis = self.axis(id, op.str_attr("pipeline").unwrap_or(""))?;
        for (rank, m) in machines.iter_mut().enumerate() {
            let block = m.vals[op.operands[0].0 as usize].clone();
            let mine = self.devices.coords(rank)[axis];
            for (k, &r) in op.results.iter().enumerate() {
                m.vals[r.0 as usize] = if k == mine { block.clone() } else { None };
            }
        }
        Ok(())
    }

    /// A pipeline's `dist.send {axis, from, to}`: each device at position `from` of
    /// `axis` sends its value to the device at position `to` with its other coordinates,
    /// all in one step.
    fn send(&self, id: OpId, op: &Op, machines: &mut [Machine], net: &mut Network) -> R<()> {
        let err = |m: String| InterpError::at_op(self.func, id, m);
        let axis = self.axis(id, op.str_attr("axis").unwrap_or(""))?;
        let (from, to) = (op.int_attr("from").unwrap_or(-1), op.int_attr("to").unwrap_or(-1));
        let size = self.devices.axis_size(axis) as i64;
        if !(0..size).contains(&from) || !(0..size).contains(&to) || from == to {
            return Err(err(format!("a send from position {from} to {to} of an axis of {size}")));
        }
        let (v, r) = (op.operands[0], op.results[0]);
        let mut delivered: Vec<(usize, Val)> = Vec::new();
        for (rank, m) in machines.iter().enumerate() {
            let mut coords = self.devices.coords(rank);
            if coords[axis] as i64 != from || !self.held(rank) {
                continue;
            }
            let Some(Val::Tensor(t)) = &m.vals[v.0 as usize] else {
                return Err(err(format!("device {rank} has nothing to send")));
            };
            net.sent[rank] += t.data.len() as u64 * u64::from(t.dtype.bytes());
            coords[axis] = to as usize;
            delivered.push((self.devices.rank(&coords), Val::Tensor(t.clone())));
        }
        if let Some(fabric) = self.fabric {
            let parcels = delivered
                .drain(..)
                .map(|(to, val)| {
                    let Val::Tensor(t) = val else { unreachable!("only tensors are sent") };
                    Parcel { from: fabric.rank(), to, chunk: 0, data: t.data }
                })
                .collect();
            let local = machines[fabric.rank()].func;
            for p in fabric.exchange(parcels).map_err(&err)? {
                let t = self
                    .local_tensor(local, r, Some(p.data))
                    .ok_or_else(|| err(format!("rank {} sent a value of another size", p.from)))?;
                delivered.push((p.to, Val::Tensor(t)));
            }
        }
        net.steps += 1;
        for m in machines.iter_mut() {
            m.vals[r.0 as usize] = None;
            for &t in &op.results[1..] {
                m.vals[t.0 as usize] = Some(Val::Token);
            }
        }
        for (rank, val) in delivered {
            machines[rank].vals[r.0 as usize] = Some(val);
        }
        Ok(())
    }

    /// A collective across the devices of each group of its axis.
    fn collective(&self, id: OpId, op: &Op, machines: &mut [Machine], net: &mut Network) -> R<()> {
        let err = |m: String| InterpError::at_op(self.func, id, m);
        let axis_name = op.str_attr("axis").ok_or_else(|| err("a collective without `axis`".into()))?;
        let axis = self.axis(id, axis_name)?;
        let tensors: Vec<usize> =
            (0..op.operands.len()).filter(|&i| !matches!(self.func.ty(op.operands[i]), Type::Token)).collect();
        for &i in &tensors {
            let v = op.operands[i];
            // A pipeline stage's value is only on that stage's devices: the groups there
            // run the collective, the others stand in with zeros, send nothing that is
            // counted, and keep no result.
            let held: Vec<Option<Tensor>> = machines
                .iter()
                .map(|m| match &m.vals[v.0 as usize] {
                    Some(Val::Tensor(t)) => Ok(Some(t.clone())),
                    None => Ok(None),
                    Some(other) => Err(err(format!("a collective of {}", other.describe()))),
                })
                .collect::<R<_>>()?;
            // Across processes, a rank whose stage does not hold the value stands in with
            // zeros of its local type, as the simulated mesh's absent devices do.
            let template = match held.iter().flatten().next() {
                Some(t) => t.clone(),
                None if self.fabric.is_some() => self
                    .local_tensor(machines[self.first_held()].func, v, None)
                    .ok_or_else(|| err("a collective of a value of unknown size".into()))?,
                None => return Err(err("a collective of a value no device holds".into())),
            };
            for g in self.devices.groups(axis) {
                let g: Vec<usize> = g.into_iter().filter(|&r| self.held(r)).collect();
                if g.iter().any(|&r| held[r].is_some()) && g.iter().any(|&r| held[r].is_none()) {
                    return Err(err(format!("a collective over `{axis_name}` of a value only some of a group hold")));
                }
            }
            let absent: Vec<usize> = (0..held.len()).filter(|&r| self.held(r) && held[r].is_none()).collect();
            // Ranks other processes run have no buffer here.
            let mut locals: Vec<Tensor> = held
                .into_iter()
                .enumerate()
                .map(|(r, t)| {
                    let data = if self.held(r) { vec![0.0; template.data.len()] } else { Vec::new() };
                    t.unwrap_or_else(|| Tensor { data, ..template.clone() })
                })
                .collect();
            let me = self.first_held();
            let dtype = locals[me].dtype;
            // The devices hold f64 copies of `dtype` values: count what `dtype` would move.
            let mut moved = Network::over(net.sent.len(), net.fabric.clone());
            // Each buffer with dim `d` at the front; the ranks other processes run have
            // no buffer here and stay empty.
            let fronts = |ts: &[Tensor], d: usize| -> Vec<Vec<f64>> {
                ts.iter()
                    .enumerate()
                    .map(|(r, t)| if self.held(r) { move_to_front(t, d).data } else { Vec::new() })
                    .collect()
            };
            let backs = |bufs: Vec<Vec<f64>>, dtype: DType, front: &[usize], d: usize| -> Vec<Tensor> {
                bufs.into_iter()
                    .enumerate()
                    .map(|(r, data)| {
                        let t = Tensor { dtype, dims: front.to_vec(), data };
                        if self.held(r) {
                            rounded(&move_from_front(&t, d))
                        } else {
                            t
                        }
                    })
                    .collect()
            };
            let dim = |key: &str| -> R<usize> {
                let d = op.int_attr(key).ok_or_else(|| err(format!("`{}` without `{key}`", op.kind.name())))?;
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d < locals[me].dims.len())
                    .ok_or_else(|| err(format!("`{key}` = {d} of a rank-{} tensor", locals[me].dims.len())))
            };
            let parts = self.devices.axis_size(axis);
            let out: Vec<Tensor> = if op.kind == OpKind::AllGather {
                let d = dim("dim")?;
                let before = locals[me].dims.clone();
                let mut bufs = fronts(&locals, d);
                all_gather(&mut bufs, self.devices, axis, &mut moved).map_err(err)?;
                let mut front = before.clone();
                front.remove(d);
                front.insert(0, before[d] * parts);
                backs(bufs, dtype, &front, d)
            } else if op.kind == OpKind::ReduceScatter {
                // Dim `d` at the front: chunk i of the flat buffer is block i of dim `d`.
                let d = dim("dim")?;
                let before = locals[me].dims.clone();
                if !before[d].is_multiple_of(parts) {
                    return Err(err(format!("dim {d} of {} elements does not split over {parts} devices", before[d])));
                }
                let mut bufs = fronts(&locals, d);
                reduce_scatter(&mut bufs, self.devices, axis, &mut moved).map_err(err)?;
                let mut front = before.clone();
                front.remove(d);
                front.insert(0, before[d] / parts);
                backs(bufs, self.local_ty(op.results[i]).unwrap_or(dtype), &front, d)
            } else if op.kind == OpKind::AllToAll {
                self.all_to_all(&locals, dim("split_dim")?, dim("concat_dim")?, axis, &mut moved).map_err(err)?
            } else {
                let combine = match op.str_attr("combine") {
                    Some("max") => Combine::Max,
                    Some("min") => Combine::Min,
                    _ => Combine::Sum,
                };
                let algorithm = match op.str_attr("algorithm") {
                    Some("tree") => Algorithm::Tree,
                    Some("ring") => Algorithm::Ring,
                    _ => {
                        let bytes = numel(&locals[me].dims) as u64 * u64::from(dtype.bytes());
                        let link = cost::LINKS[0];
                        cost::estimate(Collective::AllReduce, bytes, self.devices.axis_size(axis), link).algorithm
                    }
                };
                let mut bufs: Vec<Vec<f64>> = locals.iter_mut().map(|t| std::mem::take(&mut t.data)).collect();
                let f = match combine {
                    Combine::Sum => |a: f64, b: f64| a + b,
                    Combine::Max => f64::max,
                    Combine::Min => f64::min,
                };
                all_reduce_with(&mut bufs, self.devices, axis, algorithm, &mut moved, f).map_err(err)?;
                // The result is rounded to its own dtype (a partial's f32 sum to bf16).
                let result_dtype = self.local_ty(op.results[i]).unwrap_or(dtype);
                locals
                    .iter()
                    .zip(bufs)
                    .enumerate()
                    .map(|(r, (t, data))| {
                        let sum = Tensor { dtype: result_dtype, dims: t.dims.clone(), data };
                        if self.held(r) {
                            rounded(&sum)
                        } else {
                            sum
                        }
                    })
                    .collect()
            };
            for &r in &absent {
                moved.sent[r] = 0;
            }
            for (total, sent) in net.sent.iter_mut().zip(&moved.sent) {
                *total += sent / 8 * u64::from(dtype.bytes());
            }
            net.steps += moved.steps;
            let r = op.results[i];
            for (rank, (m, t)) in machines.iter_mut().zip(out).enumerate() {
                m.vals[r.0 as usize] = (self.held(rank) && !absent.contains(&rank)).then_some(Val::Tensor(t));
            }
        }
        for (i, &r) in op.results.iter().enumerate() {
            if !tensors.contains(&i) {
                for m in machines.iter_mut() {
                    m.vals[r.0 as usize] = Some(Val::Token);
                }
            }
        }
        Ok(())
    }

    /// Each device's block after an all-to-all over `axis` that moves the split from
    /// `concat` to `split`: with `split` at the front, chunk j of device i's buffer (its
    /// block j of `split`) goes to device j, which puts what device i sent at block i of
    /// `concat`.
    fn all_to_all(
        &self,
        locals: &[Tensor],
        split: usize,
        concat: usize,
        axis: usize,
        net: &mut Network,
    ) -> Result<Vec<Tensor>, String> {
        let parts = self.devices.axis_size(axis);
        let me = self.first_held();
        let dims = locals[me].dims.clone();
        if !dims[split].is_multiple_of(parts) {
            return Err(format!("dim {split} of {} elements does not split over {parts} devices", dims[split]));
        }
        let mut bufs: Vec<Vec<f64>> = locals
            .iter()
            .enumerate()
            .map(|(r, t)| if self.held(r) { move_to_front(t, split).data } else { Vec::new() })
            .collect();
        all_to_all(&mut bufs, self.devices, axis, net)?;
        // What one sender's chunk is, `split` back in place: `split` a block, `concat` the
        // sender's block.
        let mut chunk_front = dims.clone();
        chunk_front.remove(split);
        chunk_front.insert(0, dims[split] / parts);
        let chunk_len: usize = chunk_front.iter().product();
        let mut out_dims = dims.clone();
        out_dims[split] /= parts;
        out_dims[concat] *= parts;
        let dtype = locals[me].dtype;
        Ok(bufs
            .into_iter()
            .map(|buf| {
                if buf.is_empty() && !out_dims.is_empty() && numel(&out_dims) > 0 {
                    // A rank another process runs.
                    return Tensor { dtype, dims: out_dims.clone(), data: Vec::new() };
                }
                let mut t = Tensor { dtype, dims: out_dims.clone(), data: vec![0.0; numel(&out_dims)] };
                for (sender, data) in buf.chunks(chunk_len.max(1)).enumerate() {
                    let block =
                        move_from_front(&Tensor { dtype, dims: chunk_front.clone(), data: data.to_vec() }, split);
                    let mut offsets = vec![0; out_dims.len()];
                    offsets[concat] = sender * block.dims[concat];
                    put_block(&mut t, &block, &offsets);
                }
                t
            })
            .collect())
    }

    /// The global value of `v` from the devices' blocks.
    fn assemble(&self, id: OpId, v: ValueId, machines: &[Machine]) -> R<GraphArg> {
        // A pipeline's result is on its last stage's devices only.
        let first = machines
            .iter()
            .find_map(|m| m.vals[v.0 as usize].as_ref())
            .ok_or_else(|| InterpError::at_op(self.func, id, "an undefined result".into()))?;
        let (Val::Tensor(t0), Some(s)) = (first, self.sharding(v)) else {
            return first.to_arg().ok_or_else(|| InterpError::at_op(self.func, id, "a token result".into()));
        };
        if !s.partial.is_empty() {
            return Err(InterpError::at_op(self.func, id, "a partial result was not all-reduced".into()));
        }
        let splits = self.splits(s)?;
        if splits.is_empty() {
            return Ok(Val::Tensor(t0.clone()).to_arg().expect("a tensor"));
        }
        let global =
            self.global_dims(v).ok_or_else(|| InterpError::at_op(self.func, id, "a result of unknown size".into()))?;
        let mut out = Tensor { dtype: t0.dtype, dims: global.clone(), data: vec![0.0; numel(&global)] };
        for (rank, m) in machines.iter().enumerate() {
            let Some(Val::Tensor(t)) = &m.vals[v.0 as usize] else { continue };
            let coords = self.devices.coords(rank);
            let mut offsets = vec![0; global.len()];
            for &(d, axis, _) in &splits {
                offsets[d] = coords[axis] * t.dims[d];
            }
            put_block(&mut out, t, &offsets);
        }
        Ok(Val::Tensor(out).to_arg().expect("a tensor"))
    }
}

/// Block `index` of `parts` equal blocks of `t` along dim `d`.
fn take_block(t: &Tensor, d: usize, parts: usize, index: usize) -> Tensor {
    let mut dims = t.dims.clone();
    let size = dims[d] / parts.max(1);
    dims[d] = size;
    let outer: usize = t.dims[..d].iter().product();
    let inner: usize = t.dims[d + 1..].iter().product();
    let mut data = Vec::with_capacity(numel(&dims));
    for o in 0..outer {
        let base = (o * t.dims[d] + index * size) * inner;
        data.extend_from_slice(&t.data[base..base + size * inner]);
    }
    Tensor { dtype: t.dtype, dims, data }
}

/// Writes `block` into `out` at `offsets` (per dim).
fn put_block(out: &mut Tensor, block: &Tensor, offsets: &[usize]) {
    let strides = row_major_strides(&out.dims);
    let mut idx = vec![0usize; block.dims.len()];
    for &x in &block.data {
        let at: usize = idx.iter().zip(offsets).zip(&strides).map(|((i, o), s)| (i + o) * s).sum();
        out.data[at] = x;
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < block.dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// `t` with dim `d` moved to the front (row-major data permuted).
fn move_to_front(t: &Tensor, d: usize) -> Tensor {
    let outer: usize = t.dims[..d].iter().product();
    let inner: usize = t.dims[d + 1..].iter().product();
    let n = t.dims[d];
    let mut data = Vec::with_capacity(t.data.len());
    for k in 0..n {
        for o in 0..outer {
            let base = (o * n + k) * inner;
            data.extend_from_slice(&t.data[base..base + inner]);
        }
    }
    let mut dims = t.dims.clone();
    dims.remove(d);
    dims.insert(0, n);
    Tensor { dtype: t.dtype, dims, data }
}

/// The inverse of [`move_to_front`]: `t`'s first dim goes back to position `d`.
fn move_from_front(t: &Tensor, d: usize) -> Tensor {
    let n = t.dims[0];
    let mut dims = t.dims[1..].to_vec();
    dims.insert(d, n);
    let outer: usize = dims[..d].iter().product();
    let inner: usize = dims[d + 1..].iter().product();
    let mut data = vec![0.0; t.data.len()];
    for k in 0..n {
        for o in 0..outer {
            let src = (k * outer + o) * inner;
            let dst = (o * n + k) * inner;
            data[dst..dst + inner].copy_from_slice(&t.data[src..src + inner]);
        }
    }
    Tensor { dtype: t.dtype, dims, data }
}

/// `t` rounded to its dtype (values stay exactly representable in it).
fn rounded(t: &Tensor) -> Tensor {
    Tensor::from_host(&t.to_host())
}
