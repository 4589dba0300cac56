//! The independent reference of `tessera run`: a kernel's **Graph IR** — the level before
//! any schedule, tiling, layout or staging decision — interpreted with every intermediate
//! in f64. The declared storage rounding (the tensor's dtype and its policies) is applied
//! only where the program writes a tensor.
//!
//! Nothing here is shared with the code under test: not the Schedule or Tile IR passes
//! (specialization, grid lowering, staging, layouts, dot instruction selection), not the
//! Tile IR interpreter's program compiler and executor, and not the PTX or LLVM
//! generators. Schedule keys (`sched.param`) are read from the configuration as plain
//! integers: they choose the tile shapes the program is written in terms of, which do not
//! change its exact result. The element-level definitions of the operations (what `exp`
//! or integer `//` means) come from `interp::numerics`, evaluated in the f64 domain.
//!
//! The walk is direct: `grid.parallel` loops run every iteration (a sample of them for
//! large problems), `scf.for`/`scf.if`/`scf.while` are executed as written, shared
//! buffers are plain arrays (`tile.cp_async` copies at once, barriers do nothing).
//! Programs run on every core, except in a kernel with a plain scatter: its programs run
//! in order while [`writes`] finds two that leave different values in one element. In a
//! kernel that reads and writes one tensor, [`crossing`] finds a program reading an
//! element another program writes.

mod crossing;
mod programs;
#[cfg(test)]
mod tests;
mod value;
mod writes;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;
use tessera_frontend::check::{DType, Policy};
use tessera_passes::ir::{policy, Func, Op, OpId, OpKind, Region, Type, ValueId};
use tessera_passes::sched::Config;

use crate::interp::memory::GlobalTensor;
use crate::interp::numerics::{BinFn, BinOp, Domain, Pred, UnFn, UnOp};
use crate::interp::InterpError;
use crate::tensor::{round_with, Arg};
use crossing::{Access, Crossings};
use value::{Tile, Value, View};
use writes::{LaneWrites, Position, Takeover, WriteLog};

/// Which tile programs to run.
#[derive(Clone, Debug)]
pub enum Programs {
    All,
    /// Each program runs with this probability (decided by a hash of its grid position
    /// and the seed), besides the first and the last along every grid axis.
    Sample {
        fraction: f64,
        seed: u64,
    },
}

/// What a reference run did.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub programs: u64,
    pub total_programs: u64,
    /// Per parameter, which elements a program stored (sampled runs only).
    pub stored: Vec<Option<Vec<bool>>>,
}

/// Runs a kernel's Graph IR on `args` (tensors in place). `config` gives the schedule
/// keys, `dims` the shape symbols, `grid` the launch grid for kernels that index it
/// through `grid.program_id` instead of `grid.parallel` loops.
pub fn run(
    func: &Func,
    config: &Config,
    grid: [u64; 3],
    args: &mut [Arg],
    programs: &Programs,
) -> Result<RunStats, InterpError> {
    if args.len() != func.params.len() {
        return Err(InterpError::new(format!(
            "`{}` takes {} arguments, {} given",
            func.name,
            func.params.len(),
            args.len()
        )));
    }
    let track = matches!(programs, Programs::Sample { .. });
    let tensors: Vec<Option<GlobalTensor>> = args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) => Some(GlobalTensor::new(t, track)),
            _ => None,
        })
        .collect();
    let mut params = Vec::new();
    for (i, a) in args.iter().enumerate() {
        params.push(match a {
            Arg::Tensor(_) => Value::Tensor(i),
            Arg::Scalar(_, v) => Value::Scalar(*v),
            Arg::Index(v) => Value::Index(*v),
        });
    }
    let shapes = shape_symbols(func, &tensors);
    // A plain scatter's ids are data: its programs run in order, and their writes are
    // logged to find two that leave different values in one element.
    let scatters_plainly =
        func.walk().into_iter().any(|id| func.op(id).kind == OpKind::Scatter && func.op(id).attr("atomic").is_none());
    let defs = func.definitions();
    let lens: Vec<Option<usize>> = tensors.iter().map(|t| t.as_ref().map(|t| t.len())).collect();
    let crossings = Crossings::new(func, &defs, &lens);
    let machine = Machine {
        func,
        config,
        shapes,
        defs,
        tensors: &tensors,
        grid,
        programs,
        ran: AtomicU64::new(0),
        total: AtomicU64::new(0),
        writes: scatters_plainly.then(|| Mutex::new(WriteLog::new(&tensors))),
        crossings,
        next_program: AtomicU32::new(0),
    };
    let mut env = Env {
        values: vec![None; func.values.len()],
        pid: [0; 3],
        grid_pos: Vec::new(),
        smem: Vec::new(),
        program: 0,
        position: None,
        takeovers: Vec::new(),
    };
    for (&v, p) in func.params.iter().zip(params) {
        env.values[v.0 as usize] = Some(p);
    }
    let uses_grid_loops = func.walk().iter().any(|&o| func.op(o).kind == OpKind::GridParallel);
    if uses_grid_loops {
        machine.region(&func.body, &mut env, 0).map_err(|e| e.into_error(func))?;
    } else {
        // Programs told apart by `grid.program_id` alone: one walk per grid point.
        let points: Vec<[u64; 3]> =
            (0..grid[2]).flat_map(|z| (0..grid[1]).flat_map(move |y| (0..grid[0]).map(move |x| [x, y, z]))).collect();
        machine.total.store(points.len() as u64, Ordering::Relaxed);
        let chosen =
            |p: &&[u64; 3]| machine.chosen(&[p[0] as i64, p[1] as i64, p[2] as i64], &[grid[0], grid[1], grid[2]]);
        let run_one = |pid: [u64; 3]| {
            let mut env = env.clone();
            env.pid = pid;
            machine.ran.fetch_add(1, Ordering::Relaxed);
            machine.program(&mut env, |_| Position::Point(pid), |env| machine.region(&func.body, env, 0).map(|_| ()))
        };
        if machine.writes.is_some() {
            points.iter().filter(chosen).try_for_each(|&pid| run_one(pid))
        } else {
            points.par_iter().filter(chosen).try_for_each(|&pid| run_one(pid))
        }
        .map_err(|e| e.into_error(func))?;
    }
    let mut stats = RunStats {
        programs: machine.ran.load(Ordering::Relaxed),
        total_programs: machine.total.load(Ordering::Relaxed),
        stored: Vec::new(),
    };
    for (a, t) in args.iter_mut().zip(&tensors) {
        if let (Arg::Tensor(host), Some(t)) = (a, t) {
            t.write_back(host);
        }
        stats.stored.push(t.as_ref().and_then(|t| t.stored_mask()));
    }
    Ok(stats)
}

/// The shape symbols the tensor arguments bind (`tensor<MxK>` with dims 64, 32).
fn shape_symbols(func: &Func, tensors: &[Option<GlobalTensor>]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (&p, t) in func.params.iter().zip(tensors) {
        if let (Type::Tensor(tt), Some(t)) = (func.ty(p), t) {
            for (d, &n) in tt.dims.iter().zip(&t.dims) {
                if let Some(s) = d.as_sym() {
                    out.entry(s.to_string()).or_insert(n);
                }
            }
        }
    }
    out
}

/// A failure at an op (resolved to an [`InterpError`] with its location at the end).
struct Fault {
    op: Option<OpId>,
    message: String,
}

impl Fault {
    fn into_error(self, func: &Func) -> InterpError {
        match self.op {
            Some(op) => InterpError::at_op(func, op, format!("the f64 reference: {}", self.message)),
            None => InterpError::new(format!("the f64 reference: {}", self.message)),
        }
    }
}

type R<T> = Result<T, Fault>;

fn fault<T>(message: impl Into<String>) -> R<T> {
    Err(Fault { op: None, message: message.into() })
}

#[derive(Clone)]
struct Env {
    values: Vec<Option<Value>>,
    /// The grid point for `grid.program_id` (kernels without `grid.parallel`).
    pid: [u64; 3],
    /// The iteration of each enclosing `grid.parallel` loop: (index, extent, induction
    /// variable).
    grid_pos: Vec<(i64, u64, ValueId)>,
    smem: Vec<Tile>,
    /// With a [`WriteLog`] or [`Crossings`]: the running program's number (from 1) and
    /// place, and the elements it took over from other programs.
    program: u32,
    position: Option<Position>,
    takeovers: Vec<Takeover>,
}

struct Machine<'a> {
    func: &'a Func,
    config: &'a Config,
    /// Shape symbols bound by the tensor arguments.
    shapes: BTreeMap<String, i64>,
    /// The op defining each value (`Func::definitions`, computed once per run).
    defs: Vec<Option<OpId>>,
    tensors: &'a [Option<GlobalTensor>],
    grid: [u64; 3],
    programs: &'a Programs,
    ran: AtomicU64,
    total: AtomicU64,
    /// Kernels that scatter plainly: who wrote each element (their programs run in order).
    writes: Option<Mutex<WriteLog>>,
    /// Kernels that read and write one tensor: who read and wrote each of its elements.
    crossings: Option<Crossings>,
    next_program: AtomicU32,
}

enum Flow {
    Next,
    /// A region's terminator: `scf.yield` / `scf.condition` values.
    Yield(Vec<Value>),
    Return,
}

impl Machine<'_> {
    fn chosen(&self, pos: &[i64], extents: &[u64]) -> bool {
        match self.programs {
            Programs::All => true,
            Programs::Sample { fraction, seed } => {
                if pos.iter().zip(extents).any(|(&p, &n)| p == 0 || p as u64 + 1 == n) {
                    return true;
                }
                let coords: Vec<i64> = pos.to_vec();
                (tessera_passes::ir::rand::uniform(*seed as i64, &coords) as f64) < *fraction
            }
        }
    }

    fn region(&self, region: &Region, env: &mut Env, depth: usize) -> R<Flow> {
        for &id in &region.ops {
            match self.op(id, env, depth).map_err(|mut f| {
                f.op.get_or_insert(id);
                f
            })? {
                Flow::Next => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Next)
    }

    fn get(&self, env: &Env, v: ValueId) -> R<Value> {
        match &env.values[v.0 as usize] {
            Some(x) => Ok(x.clone()),
            None => fault(format!("value %{} is read before it is defined", v.0)),
        }
    }

    fn index(&self, env: &Env, v: ValueId) -> R<i64> {
        match self.get(env, v)? {
            Value::Index(i) => Ok(i),
            Value::Scalar(x) if x.is_finite() => Ok(x.trunc() as i64),
            other => fault(format!("expected an index, found {}", other.kind())),
        }
    }

    fn tile(&self, env: &Env, v: ValueId) -> R<Tile> {
        match self.get(env, v)? {
            Value::Tile(t) => Ok(t),
            other => fault(format!("expected a tile, found {}", other.kind())),
        }
    }

    /// A dim of a type, from the shape symbols and the schedule keys.
    fn dims(&self, ty: &Type) -> R<Vec<usize>> {
        let dims = match ty {
            Type::Tile(t) => &t.dims,
            Type::Tensor(t) => &t.dims,
            Type::View(t) => &t.dims,
            Type::Smem(t) => &t.dims,
            _ => return Ok(Vec::new()),
        };
        dims.iter()
            .map(|d| {
                d.eval(&|s| self.lookup(s))
                    .and_then(|v| usize::try_from(v).ok())
                    .ok_or_else(|| Fault { op: None, message: format!("the dim `{d}` has no value") })
            })
            .collect()
    }

    /// A symbol's value: a shape symbol bound by the tensor arguments, else a schedule key.
    fn lookup(&self, s: &str) -> Option<i64> {
        self.shapes.get(s).copied().or_else(|| self.config.key(s))
    }

    fn elem_dtype(&self, v: ValueId) -> Option<DType> {
        match self.func.ty(v) {
            Type::Scalar(d) => Some(*d),
            Type::Tile(t) => Some(t.dtype),
            _ => None,
        }
    }

    fn domain(&self, v: ValueId) -> Domain {
        match self.func.ty(v) {
            Type::Index => Domain::Index,
            _ => match self.elem_dtype(v) {
                Some(DType::Bool) => Domain::Bool,
                Some(d) if d.is_int() => Domain::Int(d),
                _ => Domain::F64,
            },
        }
    }

    fn set(env: &mut Env, v: ValueId, x: Value) {
        env.values[v.0 as usize] = Some(x);
    }

    fn op(&self, id: OpId, env: &mut Env, depth: usize) -> R<Flow> {
        let op = self.func.op(id);
        let arg =
            |i: usize| op.operands.get(i).copied().ok_or_else(|| Fault { op: None, message: "missing operand".into() });
        let result = op.results.first().copied();
        let kind = op.kind;
        let out: Value = match kind {
            OpKind::Return => return Ok(Flow::Return),
            OpKind::Yield | OpKind::Condition => {
                let vals = op.operands.iter().map(|&v| self.get(env, v)).collect::<R<Vec<_>>>()?;
                return Ok(Flow::Yield(vals));
            }
            OpKind::GridParallel => return self.grid_parallel(id, env, depth),
            OpKind::For => return self.for_loop(id, env, depth),
            OpKind::If => {
                let cond = match self.get(env, arg(0)?)? {
                    Value::Scalar(x) => x != 0.0,
                    Value::Index(i) => i != 0,
                    other => return fault(format!("scf.if on {}", other.kind())),
                };
                let region = &op.regions[if cond { 0 } else { 1 }.min(op.regions.len().saturating_sub(1))];
                let flow = if !cond && op.regions.len() < 2 { Flow::Next } else { self.region(region, env, depth)? };
                match flow {
                    Flow::Return => return Ok(Flow::Return),
                    Flow::Yield(vals) => {
                        for (&r, v) in op.results.iter().zip(vals) {
                            Self::set(env, r, v);
                        }
                    }
                    Flow::Next => {}
                }
                return Ok(Flow::Next);
            }
            OpKind::While => return self.while_loop(id, env, depth),
            OpKind::ProgramId | OpKind::NumPrograms => {
                let axis = op.int_attr("axis").unwrap_or(0).clamp(0, 2) as usize;
                // Inside `tile.parallel` loops the program is the loops' trip: axis 0 is
                // the outermost loop, as Tile IR numbers them.
                let (pid, programs) = match env.grid_pos.get(axis) {
                    Some(&(trip, extent, _)) => (trip, extent as i64),
                    None => (env.pid[axis] as i64, self.grid[axis] as i64),
                };
                Value::Index(if kind == OpKind::ProgramId { pid } else { programs })
            }
            OpKind::SchedParam => {
                let key = op.str_attr("key").unwrap_or("");
                match self.config.key(key) {
                    Some(v) => Value::Index(v),
                    None => return fault(format!("the schedule has no value for `{key}`")),
                }
            }
            OpKind::Constant => {
                let r = result.expect("constants have a result");
                let v = op.attr("value").and_then(|a| a.as_float()).unwrap_or(0.0);
                match self.func.ty(r) {
                    Type::Index => Value::Index(op.attr("value").and_then(|a| a.as_int()).unwrap_or(v as i64)),
                    _ => Value::Scalar(v),
                }
            }
            OpKind::TensorDim => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                match self.get(env, arg(0)?)? {
                    Value::Tensor(i) => Value::Index(self.tensor(i)?.dims.get(axis).copied().unwrap_or(1)),
                    other => return fault(format!("tile.dim of {}", other.kind())),
                }
            }
            k if BinOp::of(k).is_some() => {
                let r = result.expect("binary ops have a result");
                let f = BinFn::new(BinOp::of(k).expect("checked"), self.domain(r))
                    .ok_or_else(|| Fault { op: None, message: format!("{} on this type", k.name()) })?;
                self.elementwise2(env, arg(0)?, arg(1)?, |a, b| f.eval(a, b).map_err(str::to_string), &f)?
            }
            k if UnOp::of(k).is_some() => {
                let r = result.expect("unary ops have a result");
                let f = UnFn::new(UnOp::of(k).expect("checked"), self.domain(r))
                    .ok_or_else(|| Fault { op: None, message: format!("{} on this type", k.name()) })?;
                self.map(env, arg(0)?, |x| f.eval(x))?
            }
            OpKind::Cmp => {
                let pred = Pred::parse(op.str_attr("pred").unwrap_or(""))
                    .ok_or_else(|| Fault { op: None, message: "arith.cmp without a predicate".into() })?;
                let (a, b) = (self.get(env, arg(0)?)?, self.get(env, arg(1)?)?);
                match (a, b) {
                    (Value::Index(x), Value::Index(y)) => Value::Scalar(f64::from(u8::from(pred.eval_i64(x, y)))),
                    (a, b) => zip(&a, &b, |x, y| Ok(f64::from(u8::from(pred.eval_f64(x, y)))))?,
                }
            }
            OpKind::Select => {
                let c = self.get(env, arg(0)?)?;
                let (a, b) = (self.get(env, arg(1)?)?, self.get(env, arg(2)?)?);
                match (c, a, b) {
                    (Value::Scalar(c), a, b) => {
                        if c != 0.0 {
                            a
                        } else {
                            b
                        }
                    }
                    (Value::Tile(c), Value::Tile(a), Value::Tile(b)) if c.dims == a.dims && a.dims == b.dims => {
                        let data = c
                            .data
                            .iter()
                            .zip(a.data.iter().zip(&b.data))
                            .map(|(&c, (&x, &y))| if c != 0.0 { x } else { y });
                        Value::Tile(Tile { dims: a.dims.clone(), data: data.collect() })
                    }
                    _ => return fault("arith.select of mismatched operands"),
                }
            }
            OpKind::Cast => {
                let r = result.expect("casts have a result");
                let saturate = policy::saturates(op);
                let d = self.elem_dtype(r).unwrap_or(DType::F64);
                match (self.get(env, arg(0)?)?, self.func.ty(r)) {
                    (Value::Index(i), Type::Index) => Value::Index(i),
                    (Value::Index(i), _) => Value::Scalar(value::convert_exact(d, i as f64, saturate)),
                    (Value::Scalar(x), Type::Index) => Value::Index(if x.is_nan() { 0 } else { x.trunc() as i64 }),
                    // `@stochastic_round`: the program's own random tile decides, so the
                    // reference rounds the f64 value the same way.
                    (v, _) if policy::stochastic(op) => {
                        let u = self.get(env, arg(1)?)?;
                        zip(&v, &u, |x, u| Ok(crate::tensor::round_stochastic(d, x, u, saturate)))?
                    }
                    (v, _) => map_value(&v, |x| value::convert_exact(d, x, saturate))?,
                }
            }
            OpKind::Splat => {
                let r = result.expect("splat has a result");
                let dims = self.dims(self.func.ty(r))?;
                let x = match self.get(env, arg(0)?)? {
                    Value::Scalar(x) => x,
                    Value::Index(i) => i as f64,
                    other => return fault(format!("tile.splat of {}", other.kind())),
                };
                Value::Tile(Tile::filled(dims, x).map_err(msg)?)
            }
            OpKind::Full => {
                let r = result.expect("full has a result");
                let dims = self.dims(self.func.ty(r))?;
                let x = op.attr("value").and_then(|a| a.as_float()).unwrap_or(0.0);
                Value::Tile(Tile::filled(dims, x).map_err(msg)?)
            }
            OpKind::Arange => {
                let r = result.expect("arange has a result");
                let dims = self.dims(self.func.ty(r))?;
                let n = dims.first().copied().unwrap_or(0);
                value::numel(&dims).map_err(msg)?;
                Value::Tile(Tile { dims, data: (0..n).map(|i| i as f64).collect() })
            }
            OpKind::ExpandDims => {
                let mut t = self.tile(env, arg(0)?)?;
                let axis = (op.int_attr("axis").unwrap_or(0).max(0) as usize).min(t.dims.len());
                t.dims.insert(axis, 1);
                Value::Tile(t)
            }
            OpKind::Broadcast => {
                let r = result.expect("broadcast has a result");
                let dims = self.dims(self.func.ty(r))?;
                Value::Tile(value::broadcast(&self.tile(env, arg(0)?)?, &dims).map_err(msg)?)
            }
            OpKind::Transpose => Value::Tile(value::transpose(&self.tile(env, arg(0)?)?).map_err(msg)?),
            OpKind::Reduce => {
                let t = self.tile(env, arg(0)?)?;
                let axis = op.int_attr("axis").unwrap_or(0);
                let axis = if axis < 0 { axis + t.dims.len() as i64 } else { axis } as usize;
                Value::Tile(value::reduce(&t, axis, op.str_attr("kind").unwrap_or("sum")).map_err(msg)?)
            }
            OpKind::Dot => {
                let (a, b, acc) = (self.tile(env, arg(0)?)?, self.tile(env, arg(1)?)?, self.tile(env, arg(2)?)?);
                Value::Tile(value::dot(&a, &b, &acc).map_err(msg)?)
            }
            OpKind::CausalMask => {
                let s = self.tile(env, arg(0)?)?;
                Value::Tile(value::causal_mask(&s, self.index(env, arg(1)?)?, self.index(env, arg(2)?)?).map_err(msg)?)
            }
            OpKind::Rand => {
                let r = result.expect("rand has a result");
                let dims = self.dims(self.func.ty(r))?;
                let seed = self.index(env, arg(0)?)?;
                let offsets: Vec<i64> = op.operands[1..].iter().map(|&v| self.index(env, v)).collect::<R<_>>()?;
                let n = value::numel(&dims).map_err(msg)?;
                let fixed = offsets.len().saturating_sub(dims.len());
                let mut coord = vec![0usize; dims.len()];
                let mut data = Vec::with_capacity(n);
                let mut c = offsets.clone();
                for e in 0..n {
                    value::unravel(e, &dims, &mut coord);
                    for (d, &x) in coord.iter().enumerate() {
                        c[fixed + d] = offsets[fixed + d] + x as i64;
                    }
                    data.push(tessera_passes::ir::rand::uniform(seed, &c) as f64);
                }
                Value::Tile(Tile { dims, data })
            }
            OpKind::ConvertLayout => self.get(env, arg(0)?)?,
            OpKind::View => {
                let Value::Tensor(t) = self.get(env, arg(0)?)? else { return fault("tile.view of a non-tensor") };
                let offsets: Vec<i64> = op.operands[1..].iter().map(|&v| self.index(env, v)).collect::<R<_>>()?;
                let sizes: Vec<i64> = match op.attr("sizes") {
                    Some(tessera_passes::ir::Attr::Dims(d)) => d
                        .iter()
                        .map(|d| {
                            d.eval(&|s| self.lookup(s))
                                .ok_or_else(|| Fault { op: None, message: format!("the view size `{d}` has no value") })
                        })
                        .collect::<R<_>>()?,
                    Some(tessera_passes::ir::Attr::Ints(v)) => v.clone(),
                    _ => return fault("tile.view without sizes"),
                };
                let squeeze: Vec<i64> = match op.attr("squeeze") {
                    Some(tessera_passes::ir::Attr::Ints(v)) => v.clone(),
                    _ => Vec::new(),
                };
                let kept = (0..sizes.len()).filter(|d| !squeeze.contains(&(*d as i64))).collect();
                Value::View(View { arg: t, offsets, sizes, kept })
            }
            OpKind::Load => {
                let Value::View(v) = self.get(env, arg(0)?)? else { return fault("tile.load of a non-view") };
                let mask = match op.operands.get(1) {
                    Some(&m) => Some(self.tile(env, m)?),
                    None => None,
                };
                let other = op.attr("other").and_then(|a| a.as_float()).unwrap_or(0.0);
                Value::Tile(self.load(env, &v, mask.as_ref(), other)?)
            }
            OpKind::Store => {
                let Value::View(v) = self.get(env, arg(0)?)? else { return fault("tile.store to a non-view") };
                let t = self.tile(env, arg(1)?)?;
                let mask = match op.operands.get(2) {
                    Some(&m) => Some(self.tile(env, m)?),
                    None => None,
                };
                self.store(env, id, &v, &t, mask.as_ref(), op.operands[0], op.attr("atomic").is_some())?;
                return Ok(Flow::Next);
            }
            OpKind::Gather | OpKind::Scatter => {
                let Value::Tensor(ti) = self.get(env, arg(0)?)? else { return fault("gather/scatter of a non-tensor") };
                let idx = self.tile(env, arg(1)?)?;
                let t = self.tensor(ti)?;
                let len = t.len() as i64;
                if kind == OpKind::Gather {
                    let mask = match op.operands.get(2) {
                        Some(&m) => Some(self.tile(env, m)?),
                        None => None,
                    };
                    let mut data = Vec::with_capacity(idx.data.len());
                    for (e, &i) in idx.data.iter().enumerate() {
                        let on = mask.as_ref().is_none_or(|m| m.data[e] != 0.0);
                        let i = i as i64;
                        if on && (0..len).contains(&i) {
                            if let Some(crossed) = self.crosses(env, ti, i as usize, Access::Read) {
                                return Err(self.crossing(env, crossed, ti, i as usize));
                            }
                            data.push(t.get(i as usize));
                        } else {
                            data.push(0.0);
                        }
                    }
                    Value::Tile(Tile { dims: idx.dims.clone(), data })
                } else {
                    let vals = self.tile(env, arg(2)?)?;
                    let mask = match op.operands.get(3) {
                        Some(&m) => Some(self.tile(env, m)?),
                        None => None,
                    };
                    let store = self.storage(arg(0)?);
                    let atomic = op.attr("atomic").is_some();
                    let mut lanes = (self.writes.is_some() && !atomic).then(LaneWrites::default);
                    for (e, (&i, &x)) in idx.data.iter().zip(&vals.data).enumerate() {
                        let on = mask.as_ref().is_none_or(|m| m.data[e] != 0.0);
                        let i = i as i64;
                        if on && (0..len).contains(&i) && atomic {
                            if let Some(crossed) = self.crosses(env, ti, i as usize, Access::Add) {
                                return Err(self.crossing(env, crossed, ti, i as usize));
                            }
                            t.add(i as usize, |old| store(old + x));
                            if let Some(owner) = &t.owner {
                                owner[i as usize].store(1, Ordering::Relaxed);
                            }
                        } else if on && (0..len).contains(&i) {
                            let x = store(x);
                            if let Some((lane, earlier)) = lanes.as_mut().and_then(|l| l.write(i as usize, e, x)) {
                                return fault(self.lanes_conflict(
                                    env,
                                    ti,
                                    i as usize,
                                    &idx.dims,
                                    [lane, e],
                                    [earlier, x],
                                ));
                            }
                            if let Some(crossed) = self.write(env, id, ti, t, i as usize, x) {
                                return Err(self.crossing(env, crossed, ti, i as usize));
                            }
                        }
                    }
                    return Ok(Flow::Next);
                }
            }
            OpKind::AllocShared => {
                let r = result.expect("alloc_shared has a result");
                let dims = self.dims(self.func.ty(r))?;
                env.smem.push(Tile::filled(dims, 0.0).map_err(msg)?);
                Value::Smem(env.smem.len() - 1)
            }
            OpKind::CpAsync | OpKind::StoreShared => {
                let Value::Smem(b) = self.get(env, arg(0)?)? else { return fault("a shared copy into a non-buffer") };
                let src = match self.get(env, arg(1)?)? {
                    Value::View(v) => self.load(env, &v, None, 0.0)?,
                    Value::Tile(t) => t,
                    other => return fault(format!("a shared copy of {}", other.kind())),
                };
                if src.data.len() != env.smem[b].data.len() {
                    return fault(format!("a copy of {:?} into a shared buffer of {:?}", src.dims, env.smem[b].dims));
                }
                env.smem[b].data = src.data;
                return Ok(Flow::Next);
            }
            OpKind::LoadShared => {
                let Value::Smem(b) = self.get(env, arg(0)?)? else { return fault("tile.load_shared of a non-buffer") };
                let t = env.smem[b].clone();
                if op.attr("transpose").is_some_and(|a| matches!(a, tessera_passes::ir::Attr::Bool(true))) {
                    Value::Tile(value::transpose(&t).map_err(msg)?)
                } else {
                    Value::Tile(t)
                }
            }
            OpKind::AsyncCommit | OpKind::AsyncWait | OpKind::Barrier => return Ok(Flow::Next),
            other => return fault(format!("`{}` is not an op of a kernel's Graph IR", other.name())),
        };
        if let Some(r) = result {
            Self::set(env, r, out);
        }
        Ok(Flow::Next)
    }

    fn tensor(&self, i: usize) -> R<&GlobalTensor> {
        self.tensors.get(i).and_then(|t| t.as_ref()).ok_or_else(|| Fault { op: None, message: "not a tensor".into() })
    }

    /// How a value is rounded when it is written to the tensor behind `view_or_tensor`:
    /// its dtype, and `@saturate` clamping to the largest finite value.
    fn storage(&self, view_or_tensor: ValueId) -> impl Fn(f64) -> f64 {
        let (dtype, saturate) = match self.func.ty(view_or_tensor) {
            Type::Tensor(t) => (t.dtype, t.policies.contains(&Policy::Saturate)),
            Type::View(v) => (v.dtype, self.view_saturates(view_or_tensor)),
            _ => (DType::F64, false),
        };
        move |x| round_with(dtype, x, saturate)
    }

    /// Whether the tensor a view was taken of declares `@saturate`.
    fn view_saturates(&self, view: ValueId) -> bool {
        self.defs[view.0 as usize]
            .map(|op| self.func.op(op))
            .and_then(|op| op.operands.first())
            .is_some_and(|&t| matches!(self.func.ty(t), Type::Tensor(tt) if tt.policies.contains(&Policy::Saturate)))
    }

    /// Walks the window of a view: for each view element (row-major), the tensor index
    /// when it is inside the tensor.
    fn window(&self, v: &View, mut f: impl FnMut(usize, Option<usize>)) -> R<Vec<usize>> {
        let t = self.tensor(v.arg)?;
        let dims: Vec<usize> = v.kept.iter().map(|&d| v.sizes[d].max(0) as usize).collect();
        let n = value::numel(&dims).map_err(msg)?;
        let mut coord = vec![0usize; dims.len()];
        for e in 0..n {
            value::unravel(e, &dims, &mut coord);
            let mut flat: i64 = 0;
            let mut inside = true;
            let mut k = 0;
            for d in 0..v.sizes.len() {
                let c = v.offsets[d]
                    + if v.kept.contains(&d) {
                        let x = coord[k] as i64;
                        k += 1;
                        x
                    } else {
                        0
                    };
                if c < 0 || c >= t.dims[d] {
                    inside = false;
                }
                flat += c * t.strides[d];
            }
            f(e, inside.then_some(flat as usize));
        }
        Ok(dims)
    }

    fn load(&self, env: &Env, v: &View, mask: Option<&Tile>, other: f64) -> R<Tile> {
        let t = self.tensor(v.arg)?;
        let mut data = Vec::new();
        let mut crossed = None;
        let dims = self.window(v, |e, at| {
            let on = mask.is_none_or(|m| m.data.get(e).is_some_and(|&x| x != 0.0));
            data.push(match (on, at) {
                (true, Some(i)) => {
                    if crossed.is_none() {
                        crossed = self.crosses(env, v.arg, i, Access::Read).map(|c| (c, i));
                    }
                    t.get(i)
                }
                _ => other,
            });
        })?;
        match crossed {
            Some((c, i)) => Err(self.crossing(env, c, v.arg, i)),
            None => Ok(Tile { dims, data }),
        }
    }

    /// A store, or with `atomic`, an addition into the tensor's elements (`tile.atomic_add`:
    /// the sum in f64, rounded to the storage dtype, in one atomic step).
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        env: &mut Env,
        op: OpId,
        v: &View,
        tile: &Tile,
        mask: Option<&Tile>,
        view: ValueId,
        atomic: bool,
    ) -> R<()> {
        let t = self.tensor(v.arg)?;
        let round = self.storage(view);
        let mut bad = false;
        let mut crossed = None;
        let dims = self.window(v, |e, at| {
            let on = mask.is_none_or(|m| m.data.get(e).is_some_and(|&x| x != 0.0));
            match (on, at, tile.data.get(e)) {
                (true, Some(i), Some(&x)) if atomic => {
                    if crossed.is_none() {
                        crossed = self.crosses(env, v.arg, i, Access::Add).map(|c| (c, i));
                    }
                    t.add(i, |old| round(old + x));
                    if let Some(owner) = &t.owner {
                        owner[i].store(1, Ordering::Relaxed);
                    }
                }
                (true, Some(i), Some(&x)) => {
                    let crossing = self.write(env, op, v.arg, t, i, round(x));
                    crossed = crossed.or(crossing.map(|c| (c, i)));
                }
                (_, _, None) => bad = true,
                _ => {}
            }
        })?;
        if bad || value::numel(&dims).map_err(msg)? != tile.data.len() {
            return fault(format!("a store of a {:?} tile into a {:?} window", tile.dims, dims));
        }
        match crossed {
            Some((c, i)) => Err(self.crossing(env, c, v.arg, i)),
            None => Ok(()),
        }
    }

    fn elementwise2(
        &self,
        env: &Env,
        a: ValueId,
        b: ValueId,
        f: impl Fn(f64, f64) -> Result<f64, String>,
        bf: &BinFn,
    ) -> R<Value> {
        match (self.get(env, a)?, self.get(env, b)?) {
            (Value::Index(x), Value::Index(y)) => Ok(Value::Index(bf.eval_index(x, y).map_err(msg)?)),
            (x, y) => zip(&x, &y, f),
        }
    }

    fn map(&self, env: &Env, a: ValueId, f: impl Fn(f64) -> f64) -> R<Value> {
        match self.get(env, a)? {
            Value::Index(i) => Ok(Value::Index(f(i as f64) as i64)),
            v => map_value(&v, f),
        }
    }

    fn grid_parallel(&self, id: OpId, env: &mut Env, depth: usize) -> R<Flow> {
        let op = self.func.op(id);
        let (lo, hi, step) = self.loop_bounds(env, op, "grid.parallel")?;
        let extent = if hi > lo { ((hi - lo) + step - 1) / step } else { 0 } as u64;
        let region = &op.regions[0];
        let iv = region.args[0];
        let innermost = !region.ops.iter().any(|&o| self.contains_grid(o));
        let run_one = |k: u64, env: &mut Env| -> R<()> {
            Self::set(env, iv, Value::Index(lo + k as i64 * step));
            env.grid_pos.push((k as i64, extent, iv));
            let go = if innermost {
                let pos: Vec<i64> = env.grid_pos.iter().map(|p| p.0).collect();
                let ext: Vec<u64> = env.grid_pos.iter().map(|p| p.1).collect();
                let chosen = self.chosen(&pos, &ext);
                self.total.fetch_add(1, Ordering::Relaxed);
                if chosen {
                    self.ran.fetch_add(1, Ordering::Relaxed);
                }
                chosen
            } else {
                true
            };
            let r = match (go, innermost) {
                (false, _) => Ok(()),
                (true, false) => self.region(region, env, depth + 1).map(|_| ()),
                (true, true) => {
                    let at = |env: &Env| {
                        Position::Loops(
                            env.grid_pos.iter().map(|&(_, _, v)| (v, self.index(env, v).unwrap_or(0))).collect(),
                        )
                    };
                    self.program(env, at, |env| self.region(region, env, depth + 1).map(|_| ()))
                }
            };
            env.grid_pos.pop();
            r
        };
        if depth == 0 && self.writes.is_none() {
            // Programs are independent: the outermost grid axis runs on every core.
            (0..extent).into_par_iter().try_for_each(|k| {
                let mut env = env.clone();
                run_one(k, &mut env)
            })?;
        } else {
            for k in 0..extent {
                run_one(k, env)?;
            }
        }
        Ok(Flow::Next)
    }

    /// `(lo, hi, step)` of a loop (its first three operands); a step below 1 is a fault.
    fn loop_bounds(&self, env: &Env, op: &Op, what: &str) -> R<(i64, i64, i64)> {
        let (lo, hi, step) =
            (self.index(env, op.operands[0])?, self.index(env, op.operands[1])?, self.index(env, op.operands[2])?);
        if step <= 0 {
            return fault(format!("{what} with step {step}"));
        }
        Ok((lo, hi, step))
    }

    fn contains_grid(&self, id: OpId) -> bool {
        let op = self.func.op(id);
        op.kind == OpKind::GridParallel || op.regions.iter().any(|r| r.ops.iter().any(|&o| self.contains_grid(o)))
    }

    fn for_loop(&self, id: OpId, env: &mut Env, depth: usize) -> R<Flow> {
        let op = self.func.op(id);
        let (lo, hi, step) = self.loop_bounds(env, op, "scf.for")?;
        let region = &op.regions[0];
        let mut carried: Vec<Value> = op.operands[3..].iter().map(|&v| self.get(env, v)).collect::<R<_>>()?;
        let mut i = lo;
        while i < hi {
            Self::set(env, region.args[0], Value::Index(i));
            for (&a, v) in region.args[1..].iter().zip(carried.iter()) {
                Self::set(env, a, v.clone());
            }
            match self.region(region, env, depth)? {
                Flow::Return => return Ok(Flow::Return),
                Flow::Yield(vals) => carried = vals,
                Flow::Next => {}
            }
            i = i.saturating_add(step);
        }
        for (&r, v) in op.results.iter().zip(carried) {
            Self::set(env, r, v);
        }
        Ok(Flow::Next)
    }

    fn while_loop(&self, id: OpId, env: &mut Env, depth: usize) -> R<Flow> {
        let op = self.func.op(id);
        let (before, after) = (&op.regions[0], &op.regions[1]);
        let mut carried: Vec<Value> = op.operands.iter().map(|&v| self.get(env, v)).collect::<R<_>>()?;
        loop {
            for (&a, v) in before.args.iter().zip(carried.iter()) {
                Self::set(env, a, v.clone());
            }
            let Flow::Yield(mut vals) = self.region(before, env, depth)? else {
                return fault("scf.while without scf.condition");
            };
            if vals.is_empty() {
                return fault("scf.condition without a condition");
            }
            let cond = match vals.remove(0) {
                Value::Scalar(x) => x != 0.0,
                Value::Index(i) => i != 0,
                other => return fault(format!("scf.condition on {}", other.kind())),
            };
            if !cond {
                for (&r, v) in op.results.iter().zip(vals) {
                    Self::set(env, r, v);
                }
                return Ok(Flow::Next);
            }
            for (&a, v) in after.args.iter().zip(vals) {
                Self::set(env, a, v);
            }
            match self.region(after, env, depth)? {
                Flow::Return => return Ok(Flow::Return),
                Flow::Yield(vals) => carried = vals,
                Flow::Next => {}
            }
        }
    }
}

fn msg(e: impl Into<String>) -> Fault {
    Fault { op: None, message: e.into() }
}

fn map_value(v: &Value, f: impl Fn(f64) -> f64) -> R<Value> {
    match v {
        Value::Scalar(x) => Ok(Value::Scalar(f(*x))),
        Value::Index(i) => Ok(Value::Scalar(f(*i as f64))),
        Value::Tile(t) => Ok(Value::Tile(Tile { dims: t.dims.clone(), data: t.data.iter().map(|&x| f(x)).collect() })),
        other => fault(format!("an element operation on {}", other.kind())),
    }
}

fn zip(a: &Value, b: &Value, f: impl Fn(f64, f64) -> Result<f64, String>) -> R<Value> {
    let scalar = |v: &Value| match v {
        Value::Scalar(x) => Some(*x),
        Value::Index(i) => Some(*i as f64),
        _ => None,
    };
    match (a, b) {
        (Value::Tile(x), Value::Tile(y)) => {
            if x.dims != y.dims {
                return fault(format!("an element operation on tiles of {:?} and {:?}", x.dims, y.dims));
            }
            let data = x.data.iter().zip(&y.data).map(|(&p, &q)| f(p, q)).collect::<Result<_, _>>().map_err(msg)?;
            Ok(Value::Tile(Tile { dims: x.dims.clone(), data }))
        }
        (x, y) => match (scalar(x), scalar(y)) {
            (Some(p), Some(q)) => Ok(Value::Scalar(f(p, q).map_err(msg)?)),
            _ => fault(format!("an element operation on {} and {}", x.kind(), y.kind())),
        },
    }
}
