//! Graph functions → kernels. Like TorchInductor emitting Triton, the plan of a `@jit`
//! function is *Tessera source*: a generated module of kernels (elementwise chains fused
//! into one kernel or into a matmul's epilogue; matmul, norms, softmax and attention
//! instantiated from the standard library's `.tsr` kernels; copy kernels for head
//! splits and transposes) plus the Schedule IR of the function: its temporary buffers,
//! zero-copy views and kernel launches in order. The generated module is checked and
//! lowered like any file, so every kernel has Graph, Schedule, Tile and Target IR.

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
    let graph = crate::graph_ir(db, key).clone()?;
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
    Matmul { op: OpId, a: ValueId, b: ValueId, result: ValueId },
    Single(OpId),
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
            k if k.is_elementwise() || k == OpKind::Dropout || k == OpKind::GBroadcast => self.elementwise(id, &op),
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

    fn elementwise(&mut self, id: OpId, op: &Op) -> R<()> {
        let dims = self.ty(op.results[0]).dims().to_vec();
        let tensors: Vec<ValueId> = op.operands.iter().copied().filter(|&o| !self.is_host(o)).collect();
        // Join the latest open group of the same shape that produced an operand.
        let candidate = tensors
            .iter()
            .filter_map(|o| self.produced.get(o).copied())
            .filter(|&g| self.groups[g].dims == dims && !matches!(self.groups[g].kind, Kind::Single(_)))
            .max();
        let fits = |p: &Self, g: usize| {
            tensors.iter().all(|&o| {
                p.splat.contains_key(&o)
                    || p.produced.get(&o) == Some(&g)
                    || p.available_before(o, g)
                    // A broadcast input is loaded from memory at its own shape.
                    || (op.kind == OpKind::GBroadcast && p.host.contains_key(&o))
            })
        };
        let g = match candidate {
            Some(g) if fits(self, g) => g,
            _ => {
                let g = self.groups.len();
                self.groups.push(Group { kind: Kind::Elementwise, dims, ops: vec![], outputs: vec![] });
                g
            }
        };
        for &o in &tensors {
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

/// Plans a graph function (Graph IR) into generated kernels and launches.
pub fn plan(graph: &Func) -> R<GraphPlan> {
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
        produced: HashMap::new(),
        stored_by,
        groups: Vec::new(),
        prologue: Vec::new(),
        returns: None,
        known: HashMap::new(),
        seed: None,
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

impl Planner<'_> {
    fn seed(&mut self, loc: &Loc) -> ValueId {
        if let Some(s) = self.seed {
            return s;
        }
        let s =
            self.emit(OpKind::SchedParam, vec![], vec![Type::Index], vec![("key", Attr::Str("seed".into()))], loc)[0];
        self.s.values[s.0 as usize].name = Some("seed".into());
        self.seed = Some(s);
        s
    }

    /// The seed of one dropout stream: `seed * 1000003 + stream + 1`.
    fn stream_seed(&mut self, stream: i64, loc: &Loc) -> ValueId {
        let seed = self.seed(loc);
        let k = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(1_000_003))], loc)[0];
        let c = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(stream + 1))], loc)[0];
        let m = self.emit(OpKind::Mul, vec![seed, k], vec![Type::Index], vec![], loc)[0];
        self.emit(OpKind::Add, vec![m, c], vec![Type::Index], vec![], loc)[0]
    }

    /// A zero-copy view of a stored tensor with other dims.
    fn view(&mut self, v: ValueId, dims: Vec<Dim>, loc: &Loc) -> ValueId {
        let ty = tensor_with_dims(self.s.ty(v), dims);
        if *self.s.ty(v) == ty {
            return v;
        }
        self.emit(OpKind::Reshape, vec![v], vec![ty], vec![], loc)[0]
    }

    fn scalar_param(&mut self, sig: &mut Signature, cache: &mut HashMap<ValueId, String>, h: ValueId) -> String {
        if let Some(n) = cache.get(&h) {
            return n.clone();
        }
        let name = format!("s{}", cache.len());
        let decl = match self.s.ty(h) {
            Type::Index => format!("{name}: int"),
            Type::Scalar(DType::Bool) => format!("{name}: bool"),
            _ => format!("{name}: f32"),
        };
        sig.push(decl, h);
        cache.insert(h, name.clone());
        name
    }

    /// The fused body of an elementwise group (or a matmul's epilogue): one statement
    /// per op, then the stores of the group's outputs. `seeded`: the value (already in
    /// `vars`) computed before the body, e.g. the matmul result.
    fn fused_body(
        &mut self,
        g: usize,
        w: &Window,
        sig: &mut Signature,
        vars: &mut HashMap<ValueId, String>,
    ) -> R<String> {
        let group = self.groups[g].clone();
        let (rows, cols) = as_rows_cols(&group.dims);
        let mut out = String::new();
        let mut scalars: HashMap<ValueId, String> = HashMap::new();
        let mut inputs = 0;
        let tile_shape = "(ctx.BM, ctx.BN)";
        let window = format!("{r}:{r} + ctx.BM, {c}:{c} + ctx.BN", r = w.row, c = w.col);
        for &id in &group.ops {
            let op = self.g.op(id).clone();
            let loc = op.loc.clone();
            let result = op.results[0];
            let dt = self.ty(result).dtype().unwrap_or(DType::F32);
            // Operand expressions.
            let mut args = Vec::new();
            for &o in &op.operands {
                if matches!(self.ty(o), Type::Token) {
                    continue;
                }
                let expr = if let Some(v) = vars.get(&o) {
                    v.clone()
                } else if let Some(s) = self.splat.get(&o).cloned() {
                    let odt = self.ty(o).dtype().unwrap_or(DType::F32);
                    match s {
                        Splat::Const(c) => format!("tile.full({tile_shape}, {}, {odt})", float_literal(c)),
                        Splat::Host(h) => {
                            let n = self.scalar_param(sig, &mut scalars, h);
                            format!("tile.full({tile_shape}, {n}, {odt})")
                        }
                    }
                } else if self.is_host(o) {
                    let h = self.host[&o];
                    self.scalar_param(sig, &mut scalars, h)
                } else if op.kind == OpKind::GBroadcast {
                    // A smaller stored tensor broadcast over the window.
                    let stored = self.store(o, &loc)?;
                    let d = self.ty(o).dims().to_vec();
                    let odt = self.ty(o).dtype().unwrap_or(DType::F32);
                    let trimmed: Vec<Dim> = d.iter().skip_while(|x| x.as_const() == Some(1)).cloned().collect();
                    let name = format!("I{inputs}");
                    inputs += 1;
                    if trimmed.is_empty() {
                        let view = self.view(stored, vec![Dim::constant(1)], &loc);
                        sig.push(format!("{name}: Tensor[1, {odt}]"), view);
                        format!("tile.load({name}[0:1])[None, :]")
                    } else if trimmed.len() == 1 && trimmed[0] == cols {
                        let view = self.view(stored, vec![cols.clone()], &loc);
                        sig.push(format!("{name}: Tensor[\"{}\", {odt}]", w.cols), view);
                        format!("tile.load({name}[{c}:{c} + ctx.BN])[None, :]", c = w.col)
                    } else if d.len() == group.dims.len()
                        && d.last().and_then(Dim::as_const) == Some(1)
                        && d[..d.len() - 1] == group.dims[..group.dims.len() - 1]
                    {
                        let view = self.view(stored, vec![rows.clone()], &loc);
                        sig.push(format!("{name}: Tensor[\"{}\", {odt}]", w.rows), view);
                        format!("tile.load({name}[{r}:{r} + ctx.BM])[:, None]", r = w.row)
                    } else {
                        return unsupported(
                            format!("broadcasting a {} tensor over {:?} in a fused kernel", self.ty(o), group.dims),
                            &loc,
                        );
                    }
                } else {
                    let stored = self.store(o, &loc)?;
                    let odt = self.ty(o).dtype().unwrap_or(DType::F32);
                    let name = format!("I{inputs}");
                    inputs += 1;
                    let view = self.view(stored, vec![rows.clone(), cols.clone()], &loc);
                    sig.push(format!("{name}: Tensor[\"{}\", \"{}\", {odt}]", w.rows, w.cols), view);
                    let v = format!("x{}", vars.len());
                    let _ = writeln!(out, "{}{v} = tile.load({name}[{window}])", w.indent);
                    vars.insert(o, v.clone());
                    v
                };
                args.push(expr);
            }
            let literal = |o: ValueId, this: &Self| match this.splat.get(&o) {
                Some(Splat::Const(c)) if !vars.contains_key(&o) => Some(float_literal(*c)),
                _ => None,
            };
            let a = |i: usize| args.get(i).cloned().unwrap_or_default();
            // Constants go in as literals where an operator allows it (`x * 2.0`).
            let bin = |i: usize, this: &Self| literal(op.operands[i], this).unwrap_or_else(|| a(i));
            let expr = match op.kind {
                OpKind::Add => format!("{} + {}", bin(0, self), bin(1, self)),
                OpKind::Sub => format!("{} - {}", bin(0, self), bin(1, self)),
                OpKind::Mul => format!("{} * {}", bin(0, self), bin(1, self)),
                OpKind::Div => format!("{} / {}", bin(0, self), bin(1, self)),
                OpKind::Pow => format!("{} ** {}", bin(0, self), bin(1, self)),
                OpKind::Max => format!("tile.maximum({}, {})", a(0), a(1)),
                OpKind::Min => format!("tile.minimum({}, {})", a(0), a(1)),
                OpKind::Neg => format!("-{}", a(0)),
                OpKind::Cast if crate::ir::policy::saturates(&op) => format!("tile.cast({}, \"{dt} @saturate\")", a(0)),
                OpKind::Cast => format!("tile.cast({}, {dt})", a(0)),
                OpKind::Select => format!("tile.where({}, {}, {})", a(0), a(1), a(2)),
                OpKind::Cmp => {
                    let pred = match op.str_attr("pred").unwrap_or("eq") {
                        "lt" => "<",
                        "le" => "<=",
                        "gt" => ">",
                        "ge" => ">=",
                        "ne" => "!=",
                        _ => "==",
                    };
                    format!("{} {pred} {}", bin(0, self), bin(1, self))
                }
                OpKind::GBroadcast => a(0),
                OpKind::Dropout => {
                    let stream = op.int_attr("stream").unwrap_or(0);
                    let seed = self.stream_seed(stream, &loc);
                    let seed_name = self.scalar_param(sig, &mut scalars, seed);
                    format!(
                        "tile.cast(tile.where(tile.rand({tile_shape}, {seed_name}, ({}, {})) >= {p}, tile.cast({x}, f32) / (1.0 - {p}), 0.0), {dt})",
                        w.row,
                        w.col,
                        p = a(1),
                        x = a(0),
                    )
                }
                k if k.is_unary_math() => {
                    let name = k.name().rsplit('.').next().unwrap_or("");
                    format!("tile.{name}({})", a(0))
                }
                k => return unsupported(format!("`{}` in a fused elementwise kernel", k.name()), &loc),
            };
            let v = format!("v{}", vars.len());
            let _ = writeln!(out, "{}{v} = {expr}", w.indent);
            vars.insert(result, v);
        }
        for (k, &o) in group.outputs.iter().enumerate() {
            let loc = self.g.loc.clone();
            let buffer = self.host[&o];
            let odt = self.ty(o).dtype().unwrap_or(DType::F32);
            let value = match vars.get(&o) {
                Some(v) => v.clone(),
                None => match self.splat.get(&o).cloned() {
                    Some(Splat::Const(c)) => format!("tile.full({tile_shape}, {}, {odt})", float_literal(c)),
                    Some(Splat::Host(h)) => {
                        let n = self.scalar_param(sig, &mut scalars, h);
                        format!("tile.full({tile_shape}, {n}, {odt})")
                    }
                    None => return Err(internal(format!("output %{} of group {g} has no value", o.0))),
                },
            };
            let view = self.view(buffer, vec![rows.clone(), cols.clone()], &loc);
            sig.push(format!("O{k}: Tensor[\"{}\", \"{}\", {odt}]", w.rows, w.cols), view);
            let _ = writeln!(out, "{}O{k}[{window}] = {value}", w.indent);
        }
        Ok(out)
    }

    fn elementwise_kernel(&mut self, g: usize, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let mut sig = Signature::default();
        let mut vars = HashMap::new();
        let w = Window { row: "r0", col: "c0", rows: "R", cols: "C", indent: "            " };
        let body = self.fused_body(g, &w, &mut sig, &mut vars)?;
        let (rows, _) = as_rows_cols(&self.groups[g].dims);
        let block = if rows.as_const() == Some(1) { "(1, 1024)" } else { "(16, 128)" };
        let text = format!(
            "@kernel.schedule(Schedule(block={block}, warps=4))\ndef {name}({}):\n    ctx = tile.context()\n    for r0 in tile.parallel(0, R, ctx.BM):\n        for c0 in tile.parallel(0, C, ctx.BN):\n{body}",
            sig.params.join(", ")
        );
        let summary = self.describe(g);
        Ok((text, sig.args, format!("fused elementwise: {summary}")))
    }

    fn describe(&self, g: usize) -> String {
        let names: Vec<&str> =
            self.groups[g].ops.iter().map(|&id| self.g.op(id).kind.name().rsplit('.').next().unwrap_or("")).collect();
        if names.is_empty() {
            "fill".into()
        } else {
            names.join(", ")
        }
    }

    fn matmul_kernel(
        &mut self,
        g: usize,
        name: &str,
        a: ValueId,
        b: ValueId,
        result: ValueId,
    ) -> R<(String, Vec<ValueId>, String)> {
        let loc = self.g.loc.clone();
        let (at, bt) = (self.ty(a).clone(), self.ty(b).clone());
        let (adt, bdt) = (at.dtype().unwrap_or(DType::F32), bt.dtype().unwrap_or(DType::F32));
        if adt != DType::BF16 || bdt != DType::BF16 {
            return unsupported(
                format!("a matmul of {adt} x {bdt} tensors: the stdlib matmul kernel takes bf16 operands"),
                &loc,
            );
        }
        if bt.dims().len() != 2 {
            return unsupported("a matmul whose right operand has batch dims", &loc);
        }
        let a_dims = at.dims().to_vec();
        let (m, k) = as_rows_cols(&a_dims);
        let n = bt.dims()[1].clone();
        let mut sig = Signature::default();
        let a_view = self.view(self.host[&a], vec![m.clone(), k.clone()], &loc);
        let b_stored = self.host[&b];
        // `@accum(T)` narrower than f32: a kernel that sums in T (the stdlib one sums in f32).
        let narrow = match crate::ir::policy::acc_attrs(&[&at, &bt]).first() {
            Some((_, Attr::DType(t))) if crate::ir::policy::rounds_each_step(*t) => Some(*t),
            _ => None,
        };
        let operand = narrow.map_or("bf16".to_string(), |t| format!("bf16 @accum({t})"));
        sig.push(format!("A: Tensor[\"M\", \"K\", {operand}]"), a_view);
        sig.push(format!("B: Tensor[\"K\", \"N\", {operand}]"), b_stored);
        let template = match narrow {
            Some(t) => format!(
                "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))\ndef matmul(A, B):\n    \
                 ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        \
                 for n0 in tile.parallel(0, N, ctx.BN):\n            acc = tile.zeros((ctx.BM, ctx.BN), {t})\n            \
                 for k0 in tile.range(0, K, ctx.BK):\n                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])\n                \
                 b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])\n                \
                 acc = tile.mma(a, b, accumulator=acc)\n            C = acc"
            ),
            None => stdlib_kernel("matmul.tsr", "matmul").ok_or_else(|| internal("no stdlib matmul".into()))?,
        };
        let acc_dtype = narrow.unwrap_or(DType::F32);
        let rdt = self.ty(result).dtype().unwrap_or(DType::F32);
        let mut vars = HashMap::new();
        vars.insert(result, if rdt == acc_dtype { "acc".to_string() } else { format!("tile.cast(acc, {rdt})") });
        let w = Window { row: "m0", col: "n0", rows: "M", cols: "N", indent: "            " };
        let _ = n;
        let epilogue = self.fused_body(g, &w, &mut sig, &mut vars)?;
        // The template: its header becomes ours, its store of `acc` our epilogue.
        let header_end = template.find("):").ok_or_else(|| internal("stdlib matmul header".into()))? + 2;
        let def_at = template.find("def matmul(").ok_or_else(|| internal("stdlib matmul def".into()))?;
        let store_at = template.rfind("\n").map(|i| i + 1).unwrap_or(0);
        if !template[store_at..].contains("= acc") {
            return Err(internal("the stdlib matmul no longer ends with its store of `acc`".into()));
        }
        let text = format!(
            "{}def {name}({}):{}\n{}",
            &template[..def_at],
            sig.params.join(", "),
            &template[header_end..store_at].trim_end_matches('\n'),
            epilogue.trim_end_matches('\n')
        );
        let summary = self.describe(g);
        Ok((
            text,
            sig.args,
            if summary == "fill" { "stdlib matmul".into() } else { format!("stdlib matmul + epilogue: {summary}") },
        ))
    }

    /// Drops the ops of a group that no output needs (values only read for their dims).
    fn prune(&mut self, g: usize) {
        let group = &self.groups[g];
        let mut needed: std::collections::HashSet<ValueId> = group.outputs.iter().copied().collect();
        let mut keep = Vec::new();
        for &id in group.ops.iter().rev() {
            let op = self.g.op(id);
            if op.results.iter().any(|r| needed.contains(r)) {
                needed.extend(op.operands.iter().copied());
                keep.push(id);
            }
        }
        keep.reverse();
        self.groups[g].ops = keep;
    }

    fn finish(mut self) -> R<GraphPlan> {
        let fname = self.g.name.to_string();
        let mut source = format!(
            "# Generated by tessera: the kernels of the graph function `{fname}`.\n# Do not edit: change `{fname}` and these are generated again.\nfrom tessera import *\n"
        );
        let mut kernels = Vec::new();
        let mut launches = Vec::new();
        for g in 0..self.groups.len() {
            if self.groups[g].outputs.is_empty() {
                continue;
            }
            self.prune(g);
            let label = match &self.groups[g].kind {
                Kind::Elementwise => "elementwise".to_string(),
                Kind::Matmul { .. } => "matmul".to_string(),
                Kind::Single(id) => self.g.op(*id).kind.name().rsplit('.').next().unwrap_or("op").to_string(),
            };
            let name = format!("{fname}__k{}_{label}", kernels.len());
            let (text, args, summary) = match self.groups[g].kind.clone() {
                Kind::Elementwise => self.elementwise_kernel(g, &name)?,
                Kind::Matmul { a, b, result, .. } => self.matmul_kernel(g, &name, a, b, result)?,
                Kind::Single(id) => self.library_kernel(g, id, &name)?,
            };
            let _ = write!(source, "\n\n{}\n", text.trim_end());
            let loc = match &self.groups[g].kind {
                Kind::Single(id) => self.g.op(*id).loc.clone(),
                Kind::Matmul { op, .. } => self.g.op(*op).loc.clone(),
                Kind::Elementwise => self.groups[g]
                    .ops
                    .first()
                    .map(|&id| self.g.op(id).loc.clone())
                    .unwrap_or_else(|| self.g.loc.clone()),
            };
            self.s.ops.push(Op {
                kind: OpKind::Kernel,
                operands: args,
                results: vec![],
                attrs: vec![("callee", Attr::Str(SmolStr::new(&name)))],
                regions: vec![],
                loc,
            });
            launches.push(OpId(self.s.ops.len() as u32 - 1));
            kernels.push(PlannedKernel { name, summary });
        }
        let (operands, loc) = self.returns.take().unwrap_or((vec![], self.g.loc.clone()));
        self.s.ops.push(Op { kind: OpKind::Return, operands, results: vec![], attrs: vec![], regions: vec![], loc });
        let ret = OpId(self.s.ops.len() as u32 - 1);
        let mut ops = self.prologue.clone();
        ops.extend(launches);
        ops.push(ret);
        self.s.body = Region { args: vec![], ops };
        if let Err(e) = crate::ir::verify::verify(&self.s) {
            return Err(internal(format!("the launch plan does not verify: {e}")));
        }
        Ok(GraphPlan { source, kernels, schedule: Arc::new(self.s) })
    }
}

impl Planner<'_> {
    /// An op mapped onto one kernel: a stdlib kernel (norms, softmax, attention), a copy
    /// kernel (head splits, transposes) or a reduction.
    fn library_kernel(&mut self, g: usize, id: OpId, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let op = self.g.op(id).clone();
        let loc = op.loc.clone();
        let mut sig = Signature::default();
        let stored = |p: &Self, v: ValueId| p.host[&v];
        let dtype_of = |p: &Self, v: ValueId| p.ty(v).dtype().unwrap_or(DType::F32);
        let out = |p: &mut Self, i: usize| -> R<ValueId> {
            let r = op.results[i];
            if !p.host.contains_key(&r) {
                // Results nobody reads are still written somewhere.
                p.store(r, &loc)?;
            }
            Ok(p.host[&r])
        };
        match op.kind {
            OpKind::RmsNorm | OpKind::LayerNorm | OpKind::Softmax => {
                let x = op.operands[0];
                let dims = self.ty(x).dims().to_vec();
                let (rows, cols) = as_rows_cols(&dims);
                let dt = dtype_of(self, x);
                if op.kind == OpKind::Softmax && op.int_attr("axis") != Some(dims.len() as i64 - 1) {
                    return unsupported("softmax over an axis other than the last", &loc);
                }
                let affine = op.operands.len() > 1;
                let (file, kernel) = match (op.kind, affine) {
                    (OpKind::RmsNorm, true) => ("norms.tsr", "rmsnorm"),
                    (OpKind::RmsNorm, false) => ("norms.tsr", "rms_normalize"),
                    (OpKind::LayerNorm, true) => ("norms.tsr", "efficient_layernorm"),
                    (OpKind::LayerNorm, false) => ("norms.tsr", "layer_normalize"),
                    _ => ("softmax.tsr", "stable_softmax"),
                };
                if op.kind == OpKind::LayerNorm && affine && op.operands.len() != 3 {
                    return unsupported("layernorm_safe with a weight but no bias (or the reverse)", &loc);
                }
                let text = instantiate(file, kernel, name, dt)?;
                let xv = self.view(stored(self, x), vec![rows.clone(), cols.clone()], &loc);
                sig.args.push(xv);
                for &w in &op.operands[1..] {
                    sig.args.push(self.view(stored(self, w), vec![cols.clone()], &loc));
                }
                let y = out(self, 0)?;
                let yv = self.view(y, vec![rows, cols], &loc);
                sig.args.push(yv);
                if op.kind != OpKind::Softmax {
                    let eps = op.attr("eps").and_then(Attr::as_float).unwrap_or(1e-6);
                    let e = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::F32)], vec![("value", Attr::float(eps))], &loc)[0];
                    sig.args.push(e);
                }
                Ok((text, sig.args, format!("stdlib {kernel} ({dt})")))
            }
            OpKind::FlashAttention => {
                let (q, k, v) = (op.operands[0], op.operands[1], op.operands[2]);
                for x in [q, k, v] {
                    if dtype_of(self, x) != DType::BF16 {
                        return unsupported("flash_attention of non-bf16 tensors: the stdlib kernel takes bf16", &loc);
                    }
                }
                if op.attr("scale").is_some() {
                    return unsupported("flash_attention with an explicit scale (the stdlib kernel uses 1/sqrt(D))", &loc);
                }
                let dims = self.ty(q).dims().to_vec();
                if dims.len() != 4 {
                    return unsupported("flash_attention of tensors that are not [B, H, S, D]", &loc);
                }
                let bh = dims[0].mul_plain(&dims[1]);
                let view3 = |p: &mut Self, x: ValueId| {
                    let d = p.ty(x).dims().to_vec();
                    let st = p.host[&x];
                    p.view(st, vec![bh.clone(), d[2].clone(), d[3].clone()], &loc)
                };
                let text = instantiate("attention.tsr", "flash_attention_2", name, DType::BF16)?;
                sig.args.push(view3(self, q));
                sig.args.push(view3(self, k));
                sig.args.push(view3(self, v));
                let o = out(self, 0)?;
                sig.args.push(self.view(o, vec![bh.clone(), dims[2].clone(), dims[3].clone()], &loc));
                let causal = op.attr("causal").is_some_and(|a| *a == Attr::Bool(true));
                let c = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::Bool)], vec![("value", Attr::Bool(causal))], &loc)[0];
                sig.args.push(c);
                let (p, seed) = match op.operands.get(3) {
                    Some(&p) if self.is_host(p) => {
                        let stream = op.int_attr("stream").unwrap_or(0);
                        (self.host[&p], self.stream_seed(stream, &loc))
                    }
                    _ => {
                        let zero = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::F32)], vec![("value", Attr::float(0.0))], &loc)[0];
                        let s = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(0))], &loc)[0];
                        (zero, s)
                    }
                };
                sig.args.push(p);
                sig.args.push(seed);
                let what = if causal { "causal" } else { "non-causal" };
                Ok((text, sig.args, format!("stdlib flash_attention_2 ({what}, dropout)")))
            }
            OpKind::SplitQkv => {
                let x = op.operands[0];
                let dt = dtype_of(self, x);
                sig.push(format!("QKV: Tensor[\"B\", \"S\", \"E\", {dt}]"), stored(self, x));
                for (i, part) in ["Q", "K", "V"].iter().enumerate() {
                    let o = out(self, i)?;
                    sig.push(format!("{part}: Tensor[\"B\", \"H\", \"S\", \"Dh\", {dt}]"), o);
                }
                let mut body = String::new();
                for (i, part) in ["Q", "K", "V"].iter().enumerate() {
                    let _ = writeln!(
                        body,
                        "                {part}[b, h, s0:s0 + ctx.BM, d0:d0 + ctx.BN] = tile.load(QKV[b, s0:s0 + ctx.BM, {i} * H * Dh + h * Dh + d0:{i} * H * Dh + h * Dh + d0 + ctx.BN])"
                    );
                }
                let text = format!(
                    "@kernel.schedule(Schedule(block=(64, 64), warps=4))\ndef {name}({}):\n    \"\"\"[B, S, 3*H*Dh] -> three [B, H, S, Dh] tensors.\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, B):\n        for h in tile.parallel(0, H):\n            for s0 in tile.parallel(0, S, ctx.BM):\n                for d0 in tile.range(0, Dh, ctx.BN):\n{body}",
                    sig.params.join(", ")
                )
                .replace("                for d0 in tile.range(0, Dh, ctx.BN):\n                ", "                for d0 in tile.range(0, Dh, ctx.BN):\n                    ")
                .replace("\n                K[", "\n                    K[")
                .replace("\n                V[", "\n                    V[");
                Ok((text, sig.args, "copy: split q, k, v heads".into()))
            }
            OpKind::MergeHeads => {
                let x = op.operands[0];
                let dt = dtype_of(self, x);
                sig.push(format!("X: Tensor[\"B\", \"H\", \"S\", \"Dh\", {dt}]"), stored(self, x));
                let o = out(self, 0)?;
                sig.push(format!("Y: Tensor[\"B\", \"S\", \"E\", {dt}]"), o);
                let text = format!(
                    "@kernel.schedule(Schedule(block=(64, 64), warps=4))\ndef {name}({}):\n    \"\"\"[B, H, S, Dh] -> [B, S, H*Dh].\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, B):\n        for h in tile.parallel(0, H):\n            for s0 in tile.parallel(0, S, ctx.BM):\n                for d0 in tile.range(0, Dh, ctx.BN):\n                    t = tile.load(X[b, h, s0:s0 + ctx.BM, d0:d0 + ctx.BN])\n                    inside = (d0 + tile.arange(ctx.BN))[None, :] < Dh\n                    tile.store(Y[b, s0:s0 + ctx.BM, h * Dh + d0:h * Dh + d0 + ctx.BN], t, mask=inside)\n",
                    sig.params.join(", ")
                );
                Ok((text, sig.args, "copy: merge heads".into()))
            }
            OpKind::GTranspose => {
                let x = op.operands[0];
                let dims = self.ty(x).dims().to_vec();
                let rank = dims.len();
                let perm = match op.attr("perm") {
                    Some(Attr::Ints(p)) => p.clone(),
                    _ => vec![],
                };
                let mut swap_last: Vec<i64> = (0..rank as i64).collect();
                if rank >= 2 {
                    swap_last.swap(rank - 1, rank - 2);
                }
                if rank < 2 || perm != swap_last {
                    return unsupported(format!("a transpose with permutation {perm:?} (only the last two dims swap)"), &loc);
                }
                let dt = dtype_of(self, x);
                let batch = dims_product(&dims[..rank - 2]);
                let xv = self.view(stored(self, x), vec![batch.clone(), dims[rank - 2].clone(), dims[rank - 1].clone()], &loc);
                let o = out(self, 0)?;
                let ov = self.view(o, vec![batch, dims[rank - 1].clone(), dims[rank - 2].clone()], &loc);
                sig.push(format!("X: Tensor[\"Bt\", \"R\", \"C\", {dt}]"), xv);
                sig.push(format!("Y: Tensor[\"Bt\", \"C\", \"R\", {dt}]"), ov);
                let text = format!(
                    "@kernel.schedule(Schedule(block=(32, 32), warps=4))\ndef {name}({}):\n    \"\"\"Y[b] = X[b].T\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, Bt):\n        for r0 in tile.parallel(0, R, ctx.BM):\n            for c0 in tile.parallel(0, C, ctx.BN):\n                Y[b, c0:c0 + ctx.BN, r0:r0 + ctx.BM] = tile.transpose(tile.load(X[b, r0:r0 + ctx.BM, c0:c0 + ctx.BN]))\n",
                    sig.params.join(", ")
                );
                Ok((text, sig.args, "copy: transpose".into()))
            }
            OpKind::GReduce => {
                let x = op.operands[0];
                let dims = self.ty(x).dims().to_vec();
                let rank = dims.len() as i64;
                let axes = match op.attr("axes") {
                    Some(Attr::Ints(a)) => a.clone(),
                    _ => (0..rank).collect(),
                };
                let first = rank - axes.len() as i64;
                if axes != (first..rank).collect::<Vec<_>>() {
                    return unsupported("a reduction over leading axes (only trailing axes are mapped)", &loc);
                }
                let kind = op.str_attr("kind").unwrap_or("sum").to_string();
                let rows = dims_product(&dims[..first as usize]);
                let cols = dims_product(&dims[first as usize..]);
                let dt = dtype_of(self, x);
                let rdt = self.ty(op.results[0]).dtype().unwrap_or(DType::F32);
                let xv = self.view(stored(self, x), vec![rows.clone(), cols], &loc);
                let o = out(self, 0)?;
                let ov = self.view(o, vec![rows], &loc);
                sig.push(format!("X: Tensor[\"R\", \"C\", {dt}]"), xv);
                sig.push(format!("Y: Tensor[\"R\", {rdt}]"), ov);
                // `@accum(T)` narrower than f32: the elements are read as `T @accum(T)`, so
                // the row sums and the running sum are rounded to T at every step.
                let acc_t = match crate::ir::policy::acc(&op) {
                    Some(t) if crate::ir::policy::rounds_each_step(t) => t,
                    _ => DType::F32,
                };
                let (zeros, read) = if acc_t == DType::F32 {
                    ("tile.zeros((ctx.BM,), f32)".to_string(), "f32".to_string())
                } else {
                    (format!("tile.zeros((ctx.BM,), {acc_t})"), format!("\"{acc_t} @accum({acc_t})\""))
                };
                let (init, other, step, finish) = match kind.as_str() {
                    "sum" => (zeros.as_str(), "", "acc + tile.row_sum(x)", "acc"),
                    "mean" => (zeros.as_str(), "", "acc + tile.row_sum(x)", "acc / C"),
                    "max" => ("tile.full((ctx.BM,), -INF, f32)", ", other=-INF", "tile.maximum(acc, tile.row_max(x))", "acc"),
                    "min" => ("tile.full((ctx.BM,), INF, f32)", ", other=INF", "tile.minimum(acc, tile.row_min(x))", "acc"),
                    other => return unsupported(format!("a `{other}` reduction"), &loc),
                };
                let text = format!(
                    "@kernel.schedule(Schedule(block=(4, 1024), warps=4))\ndef {name}({}):\n    \"\"\"Y[r] = {kind}(X[r, :]), accumulated in {acc_t}.\"\"\"\n    ctx = tile.context()\n    for r0 in tile.parallel(0, R, ctx.BM):\n        acc = {init}\n        for c0 in tile.range(0, C, ctx.BN):\n            x = tile.cast(tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN]{other}), {read})\n            acc = {step}\n        Y[r0:r0 + ctx.BM] = tile.cast({finish}, {rdt})\n",
                    sig.params.join(", ")
                );
                Ok((text, sig.args, format!("{kind} over the last {} dims", axes.len())))
            }
            other => unsupported(format!("`{}` is not mapped to a kernel yet", other.name()), &loc),
        }
        .map(|(text, args, summary)| {
            let _ = g;
            (text, args, summary)
        })
    }
}
