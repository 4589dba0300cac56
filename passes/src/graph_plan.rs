//! Graph functions → kernels. Like TorchInductor emitting Triton, the plan of a `@jit`
//! function is *Tessera source*: a generated module of kernels (elementwise chains fused
//! into one kernel or into a matmul's epilogue; matmul, norms, softmax and attention
//! instantiated from the standard library's `.tsr` kernels; copy kernels for head
//! splits and transposes) plus the Schedule IR of the function: its temporary buffers,
//! zero-copy views and kernel launches in order. The generated module is checked and
//! lowered like any file, so every kernel has Graph, Schedule, Tile and Target IR.
//!
//! This file plans; `codegen` writes the generated kernels and the Schedule IR,
//! `library` instantiates the standard-library kernels, `matmul` the (batched) matmuls
//! with their epilogues and `reduce` reductions over any axes and `copy` the copies of `concat` and `split`;
//! `state` copies a KV cache's keys and values for `cache_append` and `cache_prune`.

mod codegen;
mod copy;
mod kernel_call;
mod library;
mod matmul;
mod reduce;
mod state;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::{Db, FnKey};

use crate::error::LowerError;
use crate::ir::*;

type R<T> = Result<T, LowerError>;

/// One kernel of a plan.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PlannedKernel {
    pub name: String,
    /// What it computes, for listings ("stdlib matmul + epilogue: cast, sub").
    pub summary: String,
    /// Where the kernel is when it is not a generated one (the `source` of its launch,
    /// `queries::planned_kernel`): `"file"` for a `@kernel` of the function's own file,
    /// `"stdlib f16"` for a stdlib kernel instantiated for f16.
    pub source: Option<String>,
}

/// The kernels of a graph function and the Schedule IR that launches them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GraphPlan {
    /// The generated module (`<function>.kernels.tsr`).
    pub source: String,
    pub kernels: Vec<PlannedKernel>,
    /// Schedule IR: `sched.buffer`s, `graph.reshape` views, `sched.kernel` launches.
    pub schedule: Arc<Func>,
}

/// The plan of a graph function.
#[salsa::tracked(returns(ref))]
pub fn graph_plan<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Result<Arc<GraphPlan>, LowerError> {
    let graph = crate::queries::graph_ir(db, key).clone()?;
    if graph.kind != FuncKind::Graph {
        return Err(LowerError {
            message: format!("`{}` is a kernel: it has no launch plan of its own", graph.name),
            range: graph.loc.range,
        });
    }
    Ok(Arc::new(plan(&graph)?))
}

/// The path of a plan's generated module, for display and for its `SourceFile`.
pub fn module_path(source_path: &std::path::Path, function: &str) -> std::path::PathBuf {
    let stem = source_path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    source_path.with_file_name(format!("{stem}.{function}.kernels.tsr"))
}

// ----- stdlib templates ------------------------------------------------------------

fn stdlib_source(file: &str) -> &'static str {
    tessera_frontend::stdlib::FILES.iter().find(|(f, _)| *f == file).map(|(_, s)| *s).unwrap_or("")
}

/// The text of one stdlib kernel (decorators through the end of its body).
fn stdlib_kernel(file: &str, name: &str) -> Option<String> {
    let src = stdlib_source(file);
    let lines: Vec<&str> = src.lines().collect();
    let def = lines.iter().position(|l| l.starts_with(&format!("def {name}(")))?;
    // Decorators (possibly spanning lines) sit right above `def`, up to a blank line.
    let mut first = def;
    for i in (0..def).rev() {
        if lines[i].trim().is_empty() || lines[i].starts_with('#') || lines[i].starts_with("from ") {
            break;
        }
        first = i;
    }
    let mut end = def + 1;
    while end < lines.len() && (lines[end].trim().is_empty() || lines[end].starts_with(' ')) {
        end += 1;
    }
    while end > def + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    Some(lines[first..end].join("\n"))
}

/// Instantiates a stdlib kernel under a new name with its dtype `T` set.
fn instantiate(file: &str, name: &str, new_name: &str, dtype: DType) -> R<String> {
    let text = stdlib_kernel(file, name).ok_or_else(|| internal(format!("the stdlib has no kernel `{name}`")))?;
    let text = text.replacen(&format!("def {name}("), &format!("def {new_name}("), 1);
    Ok(replace_word(&text, "T", &dtype.to_string()))
}

fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < text.len() {
        let c = bytes[i];
        if c == b'"' {
            in_str = !in_str;
        }
        // Not part of a longer name, and not an attribute (`k.T`).
        let boundary_before =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b'.');
        let after = i + word.len();
        let boundary_after = after >= text.len() || !(bytes[after].is_ascii_alphanumeric() || bytes[after] == b'_');
        if !in_str && boundary_before && text[i..].starts_with(word) && boundary_after {
            out.push_str(with);
            i = after;
            continue;
        }
        out.push(c as char);
        i += 1;
    }
    out
}

fn internal(message: String) -> LowerError {
    LowerError { message: format!("internal error while planning kernels: {message}"), range: Default::default() }
}

fn unsupported<T>(message: impl Into<String>, loc: &Loc) -> R<T> {
    Err(LowerError { message: message.into(), range: loc.range })
}

// ----- planning ----------------------------------------------------------------------

/// A tensor every element of which is one value.
#[derive(Clone, Debug)]
enum Splat {
    Const(f64),
    /// A host scalar of the Schedule IR.
    Host(ValueId),
}

#[derive(Clone, Debug)]
enum Kind {
    Elementwise,
    Matmul {
        op: OpId,
        a: ValueId,
        b: ValueId,
        result: ValueId,
    },
    Single(OpId),
    /// The argument `src` of a kernel call's written parameter copied into the buffer of
    /// the call's result `dst` (`kernel_call`).
    Copy {
        call: OpId,
        src: ValueId,
        dst: ValueId,
    },
    /// A collective of the program on its mesh ([`plan_on_mesh`]): started on its
    /// operands' buffers, its results those same buffers.
    Collective(OpId),
}

#[derive(Clone, Debug)]
struct Group {
    kind: Kind,
    /// Output dims of elementwise and matmul groups.
    dims: Vec<Dim>,
    ops: Vec<OpId>,
    outputs: Vec<ValueId>,
}

struct Planner<'g> {
    g: &'g Func,
    s: Func,
    /// Graph value → Schedule IR value: host scalars and stored tensors.
    host: HashMap<ValueId, ValueId>,
    splat: HashMap<ValueId, Splat>,
    /// Broadcasts of tensors in memory (a bias, a scale): not materialized, but loaded at
    /// their own shape by each group that reads them (`fused_body`), unless a consumer
    /// needs them in memory.
    lazy: HashMap<ValueId, OpId>,
    /// Tensors computed inside a group and not stored (yet).
    produced: HashMap<ValueId, usize>,
    /// The group whose launch stores a tensor (None: a parameter or a view of one).
    stored_by: HashMap<ValueId, Option<usize>>,
    groups: Vec<Group>,
    /// Schedule IR ops emitted before the launches (host math, buffers, views).
    prologue: Vec<OpId>,
    returns: Option<(Vec<ValueId>, Loc)>,
    /// Host scalars whose value is known (constants and their casts).
    known: HashMap<ValueId, f64>,
    /// The run's base seed (`sched.param {key = "seed"}`), made on first use.
    seed: Option<ValueId>,
    /// Prefetched graph values (`graph.prefetch`) and their hint text.
    prefetch: Vec<(ValueId, String)>,
    /// Kernel results whose buffers start as a constant (`kernel_call`): their fill.
    fills: HashMap<ValueId, Splat>,
    /// Planning the program on its mesh ([`plan_on_mesh`]): collectives are launched,
    /// not the identity they are on one device.
    on_mesh: bool,
}

fn sched_value(s: &mut Func, ty: Type, name: Option<&str>) -> ValueId {
    s.new_value(ty, name)
}

impl Planner<'_> {
    fn ty(&self, v: ValueId) -> &Type {
        self.g.ty(v)
    }

    fn emit(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        results: Vec<Type>,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> Vec<ValueId> {
        let results: Vec<ValueId> = results.into_iter().map(|t| sched_value(&mut self.s, t, None)).collect();
        self.s.ops.push(Op { kind, operands, results: results.clone(), attrs, regions: vec![], loc: loc.clone() });
        self.prologue.push(OpId(self.s.ops.len() as u32 - 1));
        results
    }

    /// A splat's value as a host scalar of the splat's dtype.
    fn splat_scalar(&mut self, v: ValueId, loc: &Loc) -> ValueId {
        let dtype = self.ty(v).dtype().unwrap_or(DType::F32);
        match self.splat[&v].clone() {
            Splat::Const(c) => {
                self.emit(OpKind::Constant, vec![], vec![Type::Scalar(dtype)], vec![("value", Attr::float(c))], loc)[0]
            }
            Splat::Host(h) if *self.s.ty(h) == Type::Scalar(dtype) => h,
            Splat::Host(h) => self.emit(OpKind::Cast, vec![h], vec![Type::Scalar(dtype)], vec![], loc)[0],
        }
    }

    fn is_host(&self, v: ValueId) -> bool {
        matches!(self.ty(v), Type::Index | Type::Scalar(_) | Type::Token)
    }

    /// Makes a tensor available in memory; returns its Schedule IR value.
    fn store(&mut self, v: ValueId, loc: &Loc) -> R<ValueId> {
        if let Some(&h) = self.host.get(&v) {
            return Ok(h);
        }
        if let Some(b) = self.lazy.remove(&v) {
            // A broadcast someone needs in memory: an elementwise group of its own.
            let dims = self.ty(v).dims().to_vec();
            let g = self.groups.len();
            self.groups.push(Group { kind: Kind::Elementwise, dims, ops: vec![b], outputs: vec![] });
            self.produced.insert(v, g);
        }
        if let Some(&g) = self.produced.get(&v) {
            let ty = self.ty(v).clone();
            let buffer = self.emit(OpKind::Buffer, vec![], vec![ty], vec![], loc)[0];
            if let Some(name) = &self.g.values[v.0 as usize].name {
                self.s.values[buffer.0 as usize].name = Some(name.clone());
            }
            self.groups[g].outputs.push(v);
            self.host.insert(v, buffer);
            self.stored_by.insert(v, Some(g));
            return Ok(buffer);
        }
        if self.splat.contains_key(&v) {
            // A constant tensor someone needs in memory: an elementwise group fills it.
            let dims = self.ty(v).dims().to_vec();
            let g = self.groups.len();
            self.groups.push(Group { kind: Kind::Elementwise, dims, ops: vec![], outputs: vec![] });
            self.produced.insert(v, g);
            return self.store(v, loc);
        }
        Err(internal(format!("value %{} has no producer", v.0)))
    }

    /// The group that stores `v` before (or at) group `g` launches, if any.
    fn available_before(&self, v: ValueId, g: usize) -> bool {
        match self.stored_by.get(&v) {
            Some(None) => true,
            Some(Some(h)) => *h < g,
            None => false,
        }
    }

    fn op(&mut self, id: OpId) -> R<()> {
        let op = self.g.op(id).clone();
        let loc = op.loc.clone();
        if op.kind == OpKind::Prefetch {
            // A staging hint: each launch that reads a prefetched tensor in memory carries
            // it (`prefetch` on `sched.kernel`); the kernels' schedules still decide how
            // they stage their operands.
            let into = op.str_attr("into").unwrap_or("smem");
            let overlap = op.str_attr("overlap").unwrap_or("compute");
            for &o in &op.operands {
                if !matches!(self.ty(o), Type::Token) {
                    self.prefetch.push((o, format!("into {into}, overlap {overlap}")));
                }
            }
            return Ok(());
        }
        // Host scalars: index math, scalar constants and casts, dims.
        let host_op = !op.results.is_empty() && op.results.iter().all(|&r| self.is_host(r));
        if host_op && op.kind != OpKind::EffectToken {
            match op.kind {
                OpKind::TensorDim => {
                    let axis = op.int_attr("axis").unwrap_or(0) as usize;
                    let dim = self.ty(op.operands[0]).dims().get(axis).cloned().unwrap_or(Dim::constant(1));
                    let r = self.emit(
                        OpKind::SchedDim,
                        vec![],
                        vec![Type::Index],
                        vec![("dims", Attr::Dims(vec![dim]))],
                        &loc,
                    )[0];
                    self.host.insert(op.results[0], r);
                }
                OpKind::Return => {}
                _ => {
                    match op.kind {
                        OpKind::Constant => {
                            if let Some(v) = op.attr("value").and_then(Attr::as_float) {
                                self.known.insert(op.results[0], v);
                            }
                        }
                        // Casts of integers to floats keep the value; narrowing casts
                        // round, so only exactly representable constants stay known.
                        OpKind::Cast => {
                            if let Some(&v) = self.known.get(&op.operands[0]) {
                                let dtype = self.ty(op.results[0]).dtype().unwrap_or(DType::F32);
                                if v.fract() == 0.0 && v.abs() <= 256.0 || dtype == DType::F32 && (v as f32) as f64 == v
                                {
                                    self.known.insert(op.results[0], v);
                                }
                            }
                        }
                        _ => {}
                    }
                    let mut operands = Vec::new();
                    for &o in &op.operands {
                        operands.push(*self.host.get(&o).ok_or_else(|| internal(format!("host operand %{}", o.0)))?);
                    }
                    let types = op.results.iter().map(|&r| self.ty(r).clone()).collect();
                    let results = self.emit(op.kind, operands, types, op.attrs.clone(), &loc);
                    for (&r, s) in op.results.iter().zip(results) {
                        self.host.insert(r, s);
                    }
                }
            }
            return Ok(());
        }
        match op.kind {
            OpKind::EffectToken => Ok(()),
            OpKind::Return => {
                let mut operands = Vec::new();
                for &o in &op.operands {
                    operands.push(if self.is_host(o) { self.host[&o] } else { self.store(o, &loc)? });
                }
                // Emitted after the launches, in `finish`.
                self.returns = Some((operands, loc));
                Ok(())
            }
            OpKind::Fill => {
                let value = op.attr("value").and_then(Attr::as_float).unwrap_or(0.0);
                self.splat.insert(op.results[0], Splat::Const(value));
                Ok(())
            }
            OpKind::GBroadcast | OpKind::Reshape | OpKind::Cast if self.splat.contains_key(&op.operands[0]) => {
                let s = self.splat[&op.operands[0]].clone();
                self.splat.insert(op.results[0], s);
                Ok(())
            }
            OpKind::GBroadcast if self.is_host(op.operands[0]) => {
                let splat = match self.known.get(&op.operands[0]) {
                    Some(&v) => Splat::Const(v),
                    None => Splat::Host(self.host[&op.operands[0]]),
                };
                self.splat.insert(op.results[0], splat);
                Ok(())
            }
            OpKind::Reshape => {
                let src = self.store(op.operands[0], &loc)?;
                let ty = self.ty(op.results[0]).clone();
                let view = self.emit(OpKind::Reshape, vec![src], vec![ty], vec![], &loc)[0];
                self.host.insert(op.results[0], view);
                let by = self.stored_by.get(&op.operands[0]).copied().unwrap_or(None);
                self.stored_by.insert(op.results[0], by);
                Ok(())
            }
            // On the mesh a collective is a step of its own, between the launch that
            // writes its operands and those that read its results (no fusion across it);
            // in Graph IR's global view its results are its operands' buffers.
            k if k.is_collective() && self.on_mesh => {
                let g = self.groups.len();
                for &o in &op.operands {
                    if !self.is_host(o) {
                        self.store(o, &loc)?;
                    }
                }
                self.groups.push(Group { kind: Kind::Collective(id), dims: vec![], ops: vec![], outputs: vec![] });
                for (&o, &r) in op.operands.iter().zip(&op.results) {
                    if self.is_host(o) {
                        continue;
                    }
                    self.host.insert(r, self.host[&o]);
                    self.stored_by.insert(r, Some(g));
                }
                Ok(())
            }
            // On one device a collective is its operands' values (Graph IR is the global
            // view): each result is its operand's buffer, nothing is launched.
            k if k.is_collective() => {
                for (&o, &r) in op.operands.iter().zip(&op.results) {
                    if self.is_host(o) {
                        continue;
                    }
                    let src = self.store(o, &loc)?;
                    self.host.insert(r, src);
                    let by = self.stored_by.get(&o).copied().unwrap_or(None);
                    self.stored_by.insert(r, by);
                }
                Ok(())
            }
            k if k.is_elementwise() && op.operands.iter().all(|o| self.splat.contains_key(o)) => {
                // Arithmetic on constants is host arithmetic on scalars.
                let mut scalars = Vec::new();
                for &o in &op.operands {
                    scalars.push(self.splat_scalar(o, &loc));
                }
                let dtype = self.ty(op.results[0]).dtype().unwrap_or(DType::F32);
                let r = self.emit(k, scalars, vec![Type::Scalar(dtype)], op.attrs.clone(), &loc)[0];
                self.splat.insert(op.results[0], Splat::Host(r));
                Ok(())
            }
            OpKind::GBroadcast if self.host.contains_key(&op.operands[0]) => {
                self.lazy.insert(op.results[0], id);
                Ok(())
            }
            k if k.is_elementwise()
                || matches!(k, OpKind::Dropout | OpKind::Random | OpKind::GBroadcast | OpKind::Iota) =>
            {
                self.elementwise(id, &op)
            }
            OpKind::CallKernel => self.call_kernel(id, &op),
            OpKind::MatMul => {
                for &o in &op.operands {
                    if self.splat.contains_key(&o) {
                        return unsupported("a matmul of a constant tensor", &loc);
                    }
                    self.store(o, &loc)?;
                }
                let g = self.groups.len();
                self.groups.push(Group {
                    kind: Kind::Matmul { op: id, a: op.operands[0], b: op.operands[1], result: op.results[0] },
                    dims: self.ty(op.results[0]).dims().to_vec(),
                    ops: vec![],
                    outputs: vec![],
                });
                self.produced.insert(op.results[0], g);
                Ok(())
            }
            _ => {
                for &o in &op.operands {
                    if !self.is_host(o) {
                        self.store(o, &loc)?;
                    }
                }
                let g = self.groups.len();
                self.groups.push(Group { kind: Kind::Single(id), dims: vec![], ops: vec![], outputs: vec![] });
                for &r in &op.results {
                    if !self.is_host(r) {
                        self.produced.insert(r, g);
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether group `g` can load the lazy broadcast `v` itself: its source is in memory
    /// before `g` runs, and `g`'s window can load it (a flat matmul's epilogue loads only
    /// a scalar, a row of the last dim or a column of the leading dims; elementwise
    /// groups and batched matmuls load any broadcast per matrix).
    fn lazy_fits(&self, v: ValueId, g: usize) -> bool {
        let Some(&b) = self.lazy.get(&v) else { return false };
        let src = self.g.op(b).operands[0];
        if !self.available_before(src, g) {
            return false;
        }
        match &self.groups[g].kind {
            Kind::Matmul { b: rhs, .. } if self.ty(*rhs).dims().len() == 2 => {
                let (d, out) = (self.ty(src).dims(), &self.groups[g].dims);
                let n = out.len();
                let trimmed: Vec<&Dim> = d.iter().skip_while(|x| x.as_const() == Some(1)).collect();
                trimmed.is_empty()
                    || (trimmed.len() == 1 && n >= 1 && *trimmed[0] == out[n - 1])
                    || (d.len() == n && n >= 1 && d[n - 1].as_const() == Some(1) && d[..n - 1] == out[..n - 1])
            }
            Kind::Single(_) | Kind::Copy { .. } => false,
            _ => true,
        }
    }

    fn elementwise(&mut self, id: OpId, op: &Op) -> R<()> {
        let dims = self.ty(op.results[0]).dims().to_vec();
        let tensors: Vec<ValueId> = op.operands.iter().copied().filter(|&o| !self.is_host(o)).collect();
        // Join the latest open group of the same shape that produced an operand; with none
        // (every operand is in memory or a constant), the last group of the plan when it is
        // an elementwise group of that shape: no group after it can have written an operand.
        let last_elementwise = self
            .groups
            .len()
            .checked_sub(1)
            .filter(|&g| self.groups[g].dims == dims && matches!(self.groups[g].kind, Kind::Elementwise));
        let candidate = tensors
            .iter()
            .filter_map(|o| self.produced.get(o).copied())
            .filter(|&g| self.groups[g].dims == dims && !matches!(self.groups[g].kind, Kind::Single(_)))
            .max()
            .or(last_elementwise.filter(|_| tensors.iter().all(|o| !self.produced.contains_key(o))));
        let fits = |p: &Self, g: usize| {
            tensors.iter().all(|&o| {
                p.splat.contains_key(&o)
                    || p.produced.get(&o) == Some(&g)
                    || p.available_before(o, g)
                    // Produced by an earlier group: it stores the value for this one.
                    || p.produced.get(&o).is_some_and(|&h| h < g)
                    || p.lazy_fits(o, g)
                    // A broadcast input is loaded from memory at its own shape.
                    || (op.kind == OpKind::GBroadcast && p.host.contains_key(&o))
            })
        };
        let g = match candidate {
            Some(g) if fits(self, g) && self.groups[g].ops.len() < MAX_FUSED_OPS => g,
            _ => {
                let g = self.groups.len();
                self.groups.push(Group { kind: Kind::Elementwise, dims, ops: vec![], outputs: vec![] });
                g
            }
        };
        for &o in &tensors {
            if let Some(&b) = self.lazy.get(&o).filter(|_| self.lazy_fits(o, g)) {
                if !self.groups[g].ops.contains(&b) {
                    self.groups[g].ops.push(b);
                }
                continue;
            }
            let ok = self.splat.contains_key(&o) || self.produced.get(&o) == Some(&g);
            if !ok {
                self.store(o, &op.loc)?;
            }
        }
        self.groups[g].ops.push(id);
        self.produced.insert(op.results[0], g);
        Ok(())
    }
}

/// The most ops one fused elementwise kernel takes; the next starts a new kernel (and the
/// values it reads from this one are stored). Unbounded, the gradient sum of a pipeline
/// over 1024 microbatches became one kernel of thousands of ops, whose generated source
/// nested deeper than the checker recurses and took gigabytes to plan.
const MAX_FUSED_OPS: usize = 64;

/// Plans a graph function (Graph IR) into generated kernels and launches.
pub fn plan(graph: &Func) -> R<GraphPlan> {
    plan_with(graph, false)
}

/// The program of a sharded graph function on its mesh: `graph` is its Graph IR with the
/// collectives (`dist::function::graph_with_collectives`). Each collective starts after
/// the launch that writes its operands and is waited for right before the first launch
/// that touches its buffers, so the launches in between overlap it (`sched.collective_wait
/// {overlaps}` names them). Shapes stay global, as in Graph IR.
pub fn plan_on_mesh(graph: &Func) -> R<GraphPlan> {
    plan_with(graph, true)
}

/// For each collective of a [`plan_on_mesh`] schedule, in Graph IR's order: the kernels
/// launched while it is in flight (its wait's `overlaps`).
pub fn collective_overlaps(schedule: &Func) -> Vec<Vec<String>> {
    // Starts were created in Graph IR's order, so their op ids are in that order.
    let mut starts: Vec<(OpId, ValueId)> = schedule
        .body
        .ops
        .iter()
        .filter(|&&id| schedule.op(id).kind == OpKind::CollectiveStart)
        .map(|&id| (id, schedule.op(id).results[0]))
        .collect();
    starts.sort_by_key(|(id, _)| id.0);
    starts
        .iter()
        .map(|(_, token)| {
            schedule
                .body
                .ops
                .iter()
                .map(|&id| schedule.op(id))
                .find(|op| op.kind == OpKind::CollectiveWait && op.operands.first() == Some(token))
                .and_then(|op| op.str_attr("overlaps"))
                .map(|o| o.split(", ").map(str::to_string).collect())
                .unwrap_or_default()
        })
        .collect()
}

/// [`collective_overlaps`] of `graph`'s program on its mesh, what the mesh reports show;
/// nothing when it cannot be planned.
pub fn mesh_overlaps(graph: &Func) -> Vec<Vec<String>> {
    plan_on_mesh(graph).map(|p| collective_overlaps(&p.schedule)).unwrap_or_default()
}

fn plan_with(graph: &Func, on_mesh: bool) -> R<GraphPlan> {
    let mut s = Func::new(&graph.name, FuncKind::Graph, Level::Schedule, graph.loc.clone());
    s.attrs = graph.attrs.clone();
    let mut host = HashMap::new();
    let mut stored_by = HashMap::new();
    for &p in &graph.params {
        let v = s.new_value(graph.ty(p).clone(), graph.values[p.0 as usize].name.as_deref());
        s.params.push(v);
        host.insert(p, v);
        stored_by.insert(p, None);
    }
    let mut p = Planner {
        g: graph,
        s,
        host,
        splat: HashMap::new(),
        lazy: HashMap::new(),
        produced: HashMap::new(),
        stored_by,
        groups: Vec::new(),
        prologue: Vec::new(),
        returns: None,
        known: HashMap::new(),
        seed: None,
        prefetch: Vec::new(),
        fills: HashMap::new(),
        on_mesh,
    };
    for &id in &graph.body.ops {
        p.op(id)?;
    }
    p.finish()
}

// ----- code generation ---------------------------------------------------------------

/// A generated kernel's parameters and the Schedule IR values passed for them.
#[derive(Default)]
struct Signature {
    params: Vec<String>,
    args: Vec<ValueId>,
}

impl Signature {
    fn push(&mut self, decl: String, arg: ValueId) {
        self.params.push(decl);
        self.args.push(arg);
    }
}

/// Names the rows/columns of a fused elementwise body: `r0`/`R` in an elementwise
/// kernel, `m0`/`M` in a matmul epilogue.
struct Window {
    row: &'static str,
    col: &'static str,
    rows: &'static str,
    cols: &'static str,
    indent: &'static str,
    /// A batched matmul's epilogue: the loop variable and the symbol of the flattened
    /// batch (`c`, `BC`). Every tensor is then viewed as `[BC, M, N]` (not `[BC*M, N]`,
    /// whose row blocks would cross from one matrix into the next).
    batch: Option<(&'static str, &'static str)>,
}

fn dims_product(dims: &[Dim]) -> Dim {
    dims.iter().fold(Dim::constant(1), |acc, d| acc.mul_plain(d))
}

/// `[R, C]`: every leading dim folded into rows (a rank-0 tensor is 1x1).
fn as_rows_cols(dims: &[Dim]) -> (Dim, Dim) {
    match dims {
        [] => (Dim::constant(1), Dim::constant(1)),
        [.., last] => (dims_product(&dims[..dims.len() - 1]), last.clone()),
    }
}

fn tensor_with_dims(t: &Type, dims: Vec<Dim>) -> Type {
    match t {
        Type::Tensor(tt) => Type::Tensor(TensorType { dims, dtype: tt.dtype, policies: tt.policies.clone() }),
        other => other.clone(),
    }
}

fn float_literal(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "INF".into()
        } else {
            "-INF".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v:?}")
    }
}
