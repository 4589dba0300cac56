//! Counting the FLOPs of `tile.dot` from Tile IR and bound dims, without running anything.

use std::collections::{HashMap, HashSet};

use tessera_passes::abi::KernelAbi;
use tessera_passes::ir::{Attr, Func, Op, OpId, OpKind, Region, Type, ValueId};

use crate::tensor::{round_to, Arg};

use super::plan::arg_value;

/// FLOPs of the `tile.dot`s a launch executes: 2·m·n·k per dot (its tile shape) times the
/// trip counts of the loops around it, over every program of the grid. Loop bounds and
/// branch conditions are evaluated from the IR's index arithmetic, the tensors' dims and
/// the scalar arguments; loops whose bounds depend on the program (or an outer loop) are
/// walked. `Ok(None)`: the kernel has no dot. `Err`: a bound depends on data.
pub fn count_dot_flops(func: &Func, abi: &KernelAbi, args: &[Arg], grid: [u64; 3]) -> Result<Option<u64>, String> {
    let mut with_dot: HashSet<OpId> = HashSet::new();
    fn mark(f: &Func, region: &Region, out: &mut HashSet<OpId>) -> bool {
        let mut any = false;
        for &id in &region.ops {
            let op = f.op(id);
            let mut inner = op.kind == OpKind::Dot;
            for r in &op.regions {
                inner |= mark(f, r, out);
            }
            if inner {
                out.insert(id);
                any = true;
            }
        }
        any
    }
    if !mark(func, &func.body, &mut with_dot) {
        return Ok(None);
    }
    let mut known: HashMap<ValueId, f64> = HashMap::new();
    let mut dims: HashMap<ValueId, Vec<i64>> = HashMap::new();
    for ((&v, p), a) in func.params.iter().zip(&abi.params).zip(args) {
        match (p, a) {
            (_, Arg::Tensor(t)) => {
                dims.insert(v, t.dims.iter().map(|&d| d as i64).collect());
            }
            (_, a) => {
                known.insert(v, arg_value(a));
            }
        }
    }
    let counter =
        FlopCounter { f: func, defs: func.definitions(), known, dims, grid, with_dot, budget: std::cell::Cell::new(0) };
    // Most kernels do the same work in every program: count once.
    let mut env = Env { values: HashMap::new(), pid: None };
    let total: u64 = grid.iter().product();
    match counter.region(&func.body, &mut env) {
        Ok(per_program) => return Ok(Some(per_program * total)),
        Err(Unknown::Program) => {}
        Err(Unknown::Data(why)) => return Err(why),
    }
    if total > 1 << 20 {
        return Err(format!("the loop bounds differ between programs, and the grid has {total} programs"));
    }
    let mut sum = 0u64;
    for l in 0..total {
        let pid = [l % grid[0], (l / grid[0]) % grid[1], l / (grid[0] * grid[1])];
        let mut env = Env { values: HashMap::new(), pid: Some(pid) };
        sum += counter.region(&func.body, &mut env).map_err(|e| match e {
            Unknown::Data(why) => why,
            Unknown::Program => "internal error: a bound depends on the program with the program known".into(),
        })?;
    }
    Ok(Some(sum))
}

enum Unknown {
    /// Depends on the program id or a loop index not bound yet: walk them.
    Program,
    /// Depends on loaded data or something the counter cannot evaluate.
    Data(String),
}

struct Env {
    values: HashMap<ValueId, f64>,
    pid: Option<[u64; 3]>,
}

struct FlopCounter<'f> {
    f: &'f Func,
    defs: Vec<Option<OpId>>,
    known: HashMap<ValueId, f64>,
    dims: HashMap<ValueId, Vec<i64>>,
    grid: [u64; 3],
    with_dot: HashSet<OpId>,
    /// Loop iterations walked (bounded).
    budget: std::cell::Cell<u64>,
}

const WALK_LIMIT: u64 = 1 << 24;

impl FlopCounter<'_> {
    fn region(&self, region: &Region, env: &mut Env) -> Result<u64, Unknown> {
        let mut flops = 0u64;
        for &id in &region.ops {
            if !self.with_dot.contains(&id) {
                continue;
            }
            let op = self.f.op(id);
            flops += match op.kind {
                OpKind::Dot => self.dot(op),
                OpKind::For => self.for_loop(op, env)?,
                OpKind::If => {
                    let cond = self.value(op.operands[0], env, 0)?;
                    let branch = if cond != 0.0 { op.regions.first() } else { op.regions.get(1) };
                    match branch {
                        Some(r) => self.region(r, env)?,
                        None => 0,
                    }
                }
                other => {
                    return Err(Unknown::Data(format!("`tile.dot` inside {} (its trip count is data)", other.name())))
                }
            };
        }
        Ok(flops)
    }

    fn dot(&self, op: &Op) -> u64 {
        let a = self.f.ty(op.operands[0]).const_dims().unwrap_or_default();
        let out = op.results.first().and_then(|&r| self.f.ty(r).const_dims()).unwrap_or_default();
        let k = a.last().copied().unwrap_or(0).max(0) as u64;
        let mn: u64 = out.iter().map(|&d| d.max(0) as u64).product();
        2 * mn * k
    }

    fn for_loop(&self, op: &Op, env: &mut Env) -> Result<u64, Unknown> {
        let lo = self.value(op.operands[0], env, 0)? as i64;
        let hi = self.value(op.operands[1], env, 0)? as i64;
        let step = self.value(op.operands[2], env, 0)? as i64;
        if step <= 0 {
            return Err(Unknown::Data(format!("a loop with step {step}")));
        }
        let trips = if hi > lo { ((hi - lo) + step - 1) / step } else { 0 } as u64;
        let Some(body) = op.regions.first() else { return Ok(0) };
        if trips == 0 {
            return Ok(0);
        }
        match self.region(body, env) {
            Ok(per_trip) => return Ok(per_trip * trips),
            Err(Unknown::Program) if env.pid.is_none() => return Err(Unknown::Program),
            Err(Unknown::Program) => {}
            Err(e) => return Err(e),
        }
        // The body depends on the loop index: walk it.
        let Some(&iv) = body.args.first() else { return Err(Unknown::Data("a loop without an index".into())) };
        let mut sum = 0;
        let mut i = lo;
        while i < hi {
            self.budget.set(self.budget.get() + 1);
            if self.budget.get() > WALK_LIMIT {
                return Err(Unknown::Data("too many loop iterations to walk".into()));
            }
            env.values.insert(iv, i as f64);
            let r = self.region(body, env);
            env.values.remove(&iv);
            sum += r.map_err(|e| match e {
                Unknown::Program => Unknown::Data("a loop bound depends on values the counter cannot follow".into()),
                d => d,
            })?;
            i += step;
        }
        Ok(sum)
    }

    fn value(&self, v: ValueId, env: &Env, depth: u32) -> Result<f64, Unknown> {
        if let Some(x) = env.values.get(&v).or_else(|| self.known.get(&v)) {
            return Ok(*x);
        }
        if depth > 256 {
            return Err(Unknown::Data("index arithmetic nested too deeply".into()));
        }
        let Some(def) = self.defs.get(v.0 as usize).copied().flatten() else {
            // A region argument not bound yet: a loop index (or a loop-carried value).
            return Err(Unknown::Program);
        };
        let op = self.f.op(def);
        let arg = |i: usize| -> Result<f64, Unknown> {
            let id = *op.operands.get(i).ok_or_else(|| Unknown::Data(format!("{} lacks operands", op.kind.name())))?;
            self.value(id, env, depth + 1)
        };
        if matches!(self.f.ty(v), Type::Tile(_) | Type::View(_) | Type::Smem(_) | Type::Tensor(_)) {
            return Err(Unknown::Data(format!("a loop bound computed by {} on tiles", op.kind.name())));
        }
        let int = matches!(self.f.ty(v), Type::Index) || matches!(self.f.ty(v), Type::Scalar(d) if d.is_int());
        Ok(match op.kind {
            OpKind::Constant => match op.attr("value") {
                Some(Attr::Bool(b)) => f64::from(u8::from(*b)),
                Some(a) => a.as_float().ok_or_else(|| Unknown::Data("a non-numeric constant".into()))?,
                None => return Err(Unknown::Data("a constant without a value".into())),
            },
            OpKind::TensorDim => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                let d = self.dims.get(&op.operands[0]).and_then(|d| d.get(axis));
                *d.ok_or_else(|| Unknown::Data("tile.dim of an unknown tensor".into()))? as f64
            }
            OpKind::ProgramId => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                match env.pid {
                    Some(p) => p[axis.min(2)] as f64,
                    None => return Err(Unknown::Program),
                }
            }
            OpKind::NumPrograms => self.grid[(op.int_attr("axis").unwrap_or(0) as usize).min(2)] as f64,
            OpKind::Add => arg(0)? + arg(1)?,
            OpKind::Sub => arg(0)? - arg(1)?,
            OpKind::Mul => arg(0)? * arg(1)?,
            OpKind::Div if int => {
                let b = arg(1)?;
                if b == 0.0 {
                    return Err(Unknown::Data("a division by zero in index arithmetic".into()));
                }
                (arg(0)? / b).trunc()
            }
            OpKind::Div => arg(0)? / arg(1)?,
            OpKind::FloorDiv => {
                let b = arg(1)?;
                if b == 0.0 {
                    return Err(Unknown::Data("a division by zero in index arithmetic".into()));
                }
                (arg(0)? / b).floor()
            }
            OpKind::Rem => {
                let (a, b) = (arg(0)?, arg(1)?);
                if b == 0.0 {
                    return Err(Unknown::Data("a remainder by zero in index arithmetic".into()));
                }
                tessera_frontend::arith::floor_rem_f64(a, b)
            }
            OpKind::Max => arg(0)?.max(arg(1)?),
            OpKind::Min => arg(0)?.min(arg(1)?),
            OpKind::Neg => -arg(0)?,
            // Bitwise on integers (`pid & 7` in a program ordering), logical on bools.
            OpKind::And if int => (arg(0)? as i64 & arg(1)? as i64) as f64,
            OpKind::Or if int => (arg(0)? as i64 | arg(1)? as i64) as f64,
            OpKind::Xor if int => (arg(0)? as i64 ^ arg(1)? as i64) as f64,
            OpKind::Shl if int => tessera_frontend::arith::shl_i64(arg(0)? as i64, arg(1)? as i64) as f64,
            OpKind::Shr if int => tessera_frontend::arith::shr_i64(arg(0)? as i64, arg(1)? as i64) as f64,
            OpKind::Not if int => !(arg(0)? as i64) as f64,
            OpKind::Not => f64::from(u8::from(arg(0)? == 0.0)),
            OpKind::And => f64::from(u8::from(arg(0)? != 0.0 && arg(1)? != 0.0)),
            OpKind::Or => f64::from(u8::from(arg(0)? != 0.0 || arg(1)? != 0.0)),
            OpKind::Xor => f64::from(u8::from((arg(0)? != 0.0) != (arg(1)? != 0.0))),
            OpKind::Cmp => {
                let (a, b) = (arg(0)?, arg(1)?);
                let pred = op.str_attr("pred").unwrap_or("");
                let Some(r) = tessera_passes::ir::compare_holds(pred, a, b) else {
                    return Err(Unknown::Data(format!("comparison `{pred}`")));
                };
                f64::from(u8::from(r))
            }
            OpKind::Select => {
                if arg(0)? != 0.0 {
                    arg(1)?
                } else {
                    arg(2)?
                }
            }
            OpKind::Cast => {
                let x = arg(0)?;
                match self.f.ty(v) {
                    Type::Scalar(d) => round_to(*d, x),
                    Type::Index => x.trunc(),
                    _ => x,
                }
            }
            other => return Err(Unknown::Data(format!("a loop bound computed by {}", other.name()))),
        })
    }
}
