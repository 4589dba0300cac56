//! Runs one tile program: the instructions of `program.rs` over a register file.

use std::sync::atomic::Ordering;

use tessera_frontend::check::DType;
use tessera_passes::ir::{Func, OpId};
use tessera_passes::locs::SourcePositions;

use super::memory::{AsyncGroups, GlobalTensor, SlotState, SmemBuf, Window};
use super::numerics::{saturate_index, Domain, Rounder};
use super::program::{Block, Carry, DotMode, Program, ReduceKind, Reg, Strided, Term, I};
use super::InterpError;
use crate::tensor::round_to;

#[derive(Clone, Debug, Default)]
pub(crate) enum Value {
    #[default]
    Unset,
    Index(i64),
    Scalar(f64),
    Tile(Vec<f64>),
    /// A tensor parameter (ops name tensors by parameter index).
    Tensor,
    View(Box<ViewVal>),
    Smem {
        buf: u32,
        slot: Option<u32>,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct ViewVal {
    pub arg: u32,
    pub offsets: Vec<i64>,
    pub sizes: Vec<i64>,
    pub kept: Vec<usize>,
}

/// Counters of one or more programs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub ops: u64,
    pub loaded: u64,
    pub stored: u64,
    pub dot_flops: u64,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.ops += o.ops;
        self.loaded += o.loaded;
        self.stored += o.stored;
        self.dot_flops += o.dot_flops;
    }
}

/// What every program of a run shares.
pub(crate) struct Shared<'a> {
    pub func: &'a Func,
    pub prog: &'a Program,
    pub tensors: &'a [Option<GlobalTensor>],
    /// Scalar and index arguments by parameter (tensors: `Value::Tensor`).
    pub params: &'a [Value],
    pub grid: [u64; 3],
    pub check_races: bool,
    pub positions: Option<&'a SourcePositions>,
}

enum Flow {
    Next,
    Return,
}

type R<T> = Result<T, String>;

/// One tile program's state: registers, shared memory, async groups and barrier epoch.
/// A worker thread reuses one `Runner` for many grid points.
pub(crate) struct Runner<'a> {
    sh: &'a Shared<'a>,
    pid: [u64; 3],
    linear: u32,
    regs: Vec<Value>,
    smem: Vec<Option<SmemBuf>>,
    groups: AsyncGroups,
    epoch: u64,
    pub counters: Counters,
}

impl<'a> Runner<'a> {
    pub fn new(sh: &'a Shared<'a>) -> Runner<'a> {
        Runner {
            sh,
            pid: [0; 3],
            linear: 0,
            regs: vec![Value::Unset; sh.prog.n_regs],
            smem: (0..sh.prog.smem.len()).map(|_| None).collect(),
            groups: AsyncGroups::default(),
            epoch: 0,
            counters: Counters::default(),
        }
    }

    /// Runs the program at grid point `pid` (registers and shared memory start afresh).
    pub fn run(&mut self, pid: [u64; 3]) -> Result<(), InterpError> {
        self.pid = pid;
        let g = self.sh.grid;
        self.linear = (pid[0] + g[0] * (pid[1] + g[1] * pid[2])) as u32;
        for r in self.regs.iter_mut() {
            *r = Value::Unset;
        }
        for s in self.smem.iter_mut() {
            *s = None;
        }
        self.groups = AsyncGroups::default();
        self.epoch = 0;
        for (p, v) in self.sh.prog.params.iter().zip(self.sh.params) {
            self.regs[p.reg as usize] = v.clone();
        }
        let body = &self.sh.prog.body;
        self.block(body).map(|_| ())
    }

    fn fail(&self, op: OpId, message: String) -> InterpError {
        InterpError::at_op(self.sh.func, op, message).in_program(self.pid)
    }

    // ----- registers -------------------------------------------------------------------

    fn get(&self, r: Reg) -> R<&Value> {
        match &self.regs[r as usize] {
            Value::Unset => Err(format!("internal error: value #{r} is read before it is defined")),
            v => Ok(v),
        }
    }

    fn set(&mut self, r: Reg, v: Value) {
        self.regs[r as usize] = v;
    }

    fn index(&self, r: Reg) -> R<i64> {
        match self.get(r)? {
            Value::Index(i) => Ok(*i),
            Value::Scalar(x) => Ok(saturate_index(*x)),
            v => Err(format!("expected an index, got {}", kind(v))),
        }
    }

    fn number(&self, r: Reg) -> R<f64> {
        match self.get(r)? {
            Value::Index(i) => Ok(*i as f64),
            Value::Scalar(x) => Ok(*x),
            v => Err(format!("expected a scalar, got {}", kind(v))),
        }
    }

    fn tile(&self, r: Reg) -> R<&[f64]> {
        match self.get(r)? {
            Value::Tile(t) => Ok(t),
            v => Err(format!("expected a tile, got {}", kind(v))),
        }
    }

    /// The tile buffer a result overwrites, reused for the new value.
    fn out_buf(&mut self, dst: Reg) -> Vec<f64> {
        match std::mem::take(&mut self.regs[dst as usize]) {
            Value::Tile(mut v) => {
                v.clear();
                v
            }
            _ => Vec::new(),
        }
    }

    fn tensor(&self, arg: u32) -> R<&'a GlobalTensor> {
        self.sh.tensors[arg as usize].as_ref().ok_or_else(|| format!("internal error: parameter {arg} is not a tensor"))
    }

    fn operand(&self, r: Reg) -> R<Operand<'_>> {
        Ok(match self.get(r)? {
            Value::Tile(t) => Operand::Tile(t),
            Value::Index(i) => Operand::Scalar(*i as f64),
            Value::Scalar(x) => Operand::Scalar(*x),
            v => return Err(format!("expected a tile or scalar, got {}", kind(v))),
        })
    }

    // ----- control ---------------------------------------------------------------------

    fn block(&mut self, block: &Block) -> Result<Flow, InterpError> {
        for inst in &block.insts {
            self.counters.ops += 1;
            match self.step(inst.op, &inst.kind) {
                Ok(Flow::Next) => {}
                Ok(Flow::Return) => return Ok(Flow::Return),
                Err(Failure::Here(m)) => return Err(self.fail(inst.op, m)),
                Err(Failure::Nested(e)) => return Err(e),
            }
        }
        Ok(Flow::Next)
    }

    fn carried(&mut self, values: &[Carry]) -> Vec<Value> {
        values
            .iter()
            .map(|c| {
                if c.take {
                    std::mem::take(&mut self.regs[c.reg as usize])
                } else {
                    self.regs[c.reg as usize].clone()
                }
            })
            .collect()
    }

    fn assign(&mut self, regs: &[Reg], values: Vec<Value>) {
        for (&r, v) in regs.iter().zip(values) {
            self.regs[r as usize] = v;
        }
    }

    fn yielded(&mut self, block: &Block) -> Vec<Value> {
        match &block.term {
            Term::Yield(v) => self.carried(v),
            _ => Vec::new(),
        }
    }

    fn step(&mut self, op: OpId, inst: &I) -> Result<Flow, Failure> {
        match inst {
            I::For { lo, hi, step, inits, results, body } => {
                let (lo, hi, step) = (self.index(*lo)?, self.index(*hi)?, self.index(*step)?);
                if step <= 0 {
                    return Err(Failure::Here(format!("scf.for step must be positive, got {step}")));
                }
                let init: Vec<Value> = inits.iter().map(|&r| self.regs[r as usize].clone()).collect();
                self.assign(&body.args[1..], init);
                let mut iv = lo;
                while iv < hi {
                    self.set(body.args[0], Value::Index(iv));
                    if let Flow::Return = self.block(body).map_err(Failure::Nested)? {
                        return Ok(Flow::Return);
                    }
                    let next = self.yielded(body);
                    self.assign(&body.args[1..], next);
                    iv = match iv.checked_add(step) {
                        Some(v) => v,
                        None => break,
                    };
                }
                let out: Vec<Value> =
                    body.args[1..].iter().map(|&a| std::mem::take(&mut self.regs[a as usize])).collect();
                self.assign(results, out);
                Ok(Flow::Next)
            }
            I::If { cond, results, then, otherwise } => {
                let c = self.number(*cond)? != 0.0;
                let block = if c { then } else { otherwise };
                if let Flow::Return = self.block(block).map_err(Failure::Nested)? {
                    return Ok(Flow::Return);
                }
                let out = self.yielded(block);
                self.assign(results, out);
                Ok(Flow::Next)
            }
            I::While { inits, results, before, after } => {
                let init: Vec<Value> = inits.iter().map(|&r| self.regs[r as usize].clone()).collect();
                self.assign(&before.args, init);
                loop {
                    if let Flow::Return = self.block(before).map_err(Failure::Nested)? {
                        return Ok(Flow::Return);
                    }
                    let Term::Condition { cond, values } = &before.term else {
                        return Err(Failure::Here("scf.while: the before region must end in scf.condition".into()));
                    };
                    let go = self.number(*cond)? != 0.0;
                    let vals = self.carried(values);
                    if !go {
                        self.assign(results, vals);
                        return Ok(Flow::Next);
                    }
                    self.assign(&after.args, vals);
                    if let Flow::Return = self.block(after).map_err(Failure::Nested)? {
                        return Ok(Flow::Return);
                    }
                    let next = self.yielded(after);
                    self.assign(&before.args, next);
                }
            }
            I::Return => Ok(Flow::Return),
            other => {
                self.simple(op, other)?;
                Ok(Flow::Next)
            }
        }
    }

    fn simple(&mut self, op: OpId, inst: &I) -> R<()> {
        match inst {
            I::ProgramId { dst, axis } => self.set(*dst, Value::Index(self.pid[*axis] as i64)),
            I::NumPrograms { dst, axis } => self.set(*dst, Value::Index(self.sh.grid[*axis] as i64)),
            I::ConstIndex { dst, value } => self.set(*dst, Value::Index(*value)),
            I::ConstScalar { dst, value } => self.set(*dst, Value::Scalar(*value)),
            I::TensorDim { dst, arg, axis } => {
                let t = self.tensor(*arg)?;
                self.set(*dst, Value::Index(t.dims[*axis]));
            }
            I::BinaryScalar { dst, a, b, f, index } => {
                let v = if *index {
                    Value::Index(f.eval_index(self.index(*a)?, self.index(*b)?).map_err(String::from)?)
                } else {
                    Value::Scalar(f.eval(self.number(*a)?, self.number(*b)?).map_err(String::from)?)
                };
                self.set(*dst, v);
            }
            I::BinaryTile { dst, a, b, f } => {
                let mut out = self.out_buf(*dst);
                f.tile(self.tile(*a)?, self.tile(*b)?, &mut out).map_err(String::from)?;
                self.set(*dst, Value::Tile(out));
            }
            I::UnaryScalar { dst, src, f, index } => {
                let v = if *index {
                    Value::Index(f.eval_index(self.index(*src)?).ok_or("not an integer operation")?)
                } else {
                    Value::Scalar(f.eval(self.number(*src)?))
                };
                self.set(*dst, v);
            }
            I::UnaryTile { dst, src, f } => {
                let mut out = self.out_buf(*dst);
                f.tile(self.tile(*src)?, &mut out);
                self.set(*dst, Value::Tile(out));
            }
            I::Cmp { dst, a, b, pred, tile, index } => {
                if *tile {
                    let mut out = self.out_buf(*dst);
                    let (x, y) = (self.tile(*a)?, self.tile(*b)?);
                    out.extend(x.iter().zip(y).map(|(&p, &q)| f64::from(u8::from(pred.eval_f64(p, q)))));
                    self.set(*dst, Value::Tile(out));
                } else {
                    let c = if *index {
                        pred.eval_i64(self.index(*a)?, self.index(*b)?)
                    } else {
                        pred.eval_f64(self.number(*a)?, self.number(*b)?)
                    };
                    self.set(*dst, Value::Scalar(f64::from(u8::from(c))));
                }
            }
            I::Select { dst, cond, a, b, n } => {
                let v = if *n > 0 {
                    let mut out = self.out_buf(*dst);
                    let (c, x, y) = (self.operand(*cond)?, self.operand(*a)?, self.operand(*b)?);
                    for e in 0..*n {
                        out.push(if c.at(e) != 0.0 { x.at(e) } else { y.at(e) });
                    }
                    Value::Tile(out)
                } else {
                    let c = self.number(*cond)? != 0.0;
                    self.get(if c { *a } else { *b })?.clone()
                };
                self.set(*dst, v);
            }
            I::Cast { dst, src, to, tile, saturate, u } => {
                let v = if *tile {
                    let mut out = self.out_buf(*dst);
                    match u {
                        Some(u) => {
                            let us = self.tile(*u)?;
                            out.extend(
                                self.tile(*src)?.iter().zip(us).map(|(&x, &r)| to.convert_stochastic(x, r, *saturate)),
                            )
                        }
                        None => out.extend(self.tile(*src)?.iter().map(|&x| to.convert_with(x, *saturate))),
                    }
                    Value::Tile(out)
                } else if *to == Domain::Index {
                    Value::Index(self.index(*src)?)
                } else {
                    Value::Scalar(to.convert_with(self.number(*src)?, *saturate))
                };
                self.set(*dst, v);
            }
            I::Splat { dst, src, to, n } => {
                let x = to.convert(self.number(*src)?);
                let mut out = self.out_buf(*dst);
                out.resize(*n, x);
                self.set(*dst, Value::Tile(out));
            }
            I::Fill { dst, value, n } => {
                let mut out = self.out_buf(*dst);
                out.resize(*n, *value);
                self.set(*dst, Value::Tile(out));
            }
            I::Arange { dst, n } => {
                let mut out = self.out_buf(*dst);
                out.extend((0..*n).map(|i| i as f64));
                self.set(*dst, Value::Tile(out));
            }
            I::Rand { dst, seed, offsets, dims } => {
                let seed = self.index(*seed)?;
                let offs: Vec<i64> = offsets.iter().map(|&o| self.index(o)).collect::<R<_>>()?;
                let lead = offs.len() - dims.len();
                let n: usize = dims.iter().product();
                let mut out = self.out_buf(*dst);
                let mut coords = offs.clone();
                for e in 0..n {
                    let mut rest = e;
                    for d in (0..dims.len()).rev() {
                        coords[lead + d] = offs[lead + d] + (rest % dims[d]) as i64;
                        rest /= dims[d];
                    }
                    out.push(tessera_passes::ir::rand::uniform(seed, &coords) as f64);
                }
                self.set(*dst, Value::Tile(out));
            }
            I::Copy { dst, src } => {
                let mut out = self.out_buf(*dst);
                out.extend_from_slice(self.tile(*src)?);
                self.set(*dst, Value::Tile(out));
            }
            I::Rearrange { dst, src, plan } => {
                let mut out = self.out_buf(*dst);
                rearrange(self.tile(*src)?, plan, &mut out);
                self.set(*dst, Value::Tile(out));
            }
            I::Reduce { dst, src, kind, outer, len, inner, dom, step } => {
                let mut out = self.out_buf(*dst);
                reduce(self.tile(*src)?, *kind, (*outer, *len, *inner), *dom, *step, &mut out);
                self.set(*dst, Value::Tile(out));
            }
            I::Dot { dst, a, b, acc, m, n, k, mode, dom, step, a_m_major, b_k_major } => {
                let mut out = self.out_buf(*dst);
                let how = (*mode, *dom, *step);
                self.check_dot_operand(*a, op)?;
                self.check_dot_operand(*b, op)?;
                // An [R, C] row-major operand read as its transpose [C, R].
                let transposed = |rc: &[f64], rows: usize, cols: usize| -> Vec<f64> {
                    (0..rows * cols).map(|i| rc[(i % rows) * cols + i / rows]).collect()
                };
                let b_rows: std::borrow::Cow<[f64]> = if *b_k_major {
                    // [N, K] row-major to [K, N].
                    transposed(self.dot_operand(*b)?, *n, *k).into()
                } else {
                    self.dot_operand(*b)?.into()
                };
                let a_rows: std::borrow::Cow<[f64]> = if *a_m_major {
                    // [K, M] row-major to [M, K].
                    transposed(self.dot_operand(*a)?, *k, *m).into()
                } else {
                    self.dot_operand(*a)?.into()
                };
                dot(&a_rows, &b_rows, self.tile(*acc)?, (*m, *n, *k), how, &mut out);
                self.counters.dot_flops += 2 * (*m * *n * *k) as u64;
                self.set(*dst, Value::Tile(out));
            }
            I::CausalMask { dst, src, q, k, m, n } => {
                let (q, k) = (self.index(*q)?, self.index(*k)?);
                let mut out = self.out_buf(*dst);
                out.extend_from_slice(self.tile(*src)?);
                for i in 0..*m {
                    for j in 0..*n {
                        if k + j as i64 > q + i as i64 {
                            out[i * n + j] = f64::NEG_INFINITY;
                        }
                    }
                }
                self.set(*dst, Value::Tile(out));
            }
            I::View { dst, arg, offsets, sizes, kept } => {
                let offsets = offsets.iter().map(|&r| self.index(r)).collect::<R<Vec<i64>>>()?;
                let v = ViewVal { arg: *arg, offsets, sizes: sizes.clone(), kept: kept.clone() };
                self.set(*dst, Value::View(Box::new(v)));
            }
            I::Load { dst, view, mask, other, n } => {
                let mut out = self.out_buf(*dst);
                out.resize(*n, *other);
                let loaded = self.read_view(*view, &mut out)?;
                if let Some(m) = mask {
                    for (o, &keep) in out.iter_mut().zip(self.tile(*m)?) {
                        if keep == 0.0 {
                            *o = *other;
                        }
                    }
                }
                self.counters.loaded += loaded;
                self.set(*dst, Value::Tile(out));
            }
            I::Store { view, src, mask, round, atomic } => self.store(*view, *src, *mask, *round, *atomic)?,
            I::Gather { dst, arg, idx, mask, n } => {
                let t = self.tensor(*arg)?;
                let mut out = self.out_buf(*dst);
                let ids = self.tile(*idx)?;
                let mask = match mask {
                    Some(m) => Some(self.tile(*m)?),
                    None => None,
                };
                for e in 0..*n {
                    let i = ids[e];
                    let on = mask.is_none_or(|m| m[e] != 0.0);
                    out.push(if on && i >= 0.0 && (i as usize) < t.len() { t.get(i as usize) } else { 0.0 });
                }
                self.counters.loaded += *n as u64;
                self.set(*dst, Value::Tile(out));
            }
            I::Scatter { arg, idx, values, mask, round, atomic } => {
                let t = self.tensor(*arg)?;
                let (ids, vals) = (self.tile(*idx)?, self.tile(*values)?);
                let mask = match mask {
                    Some(m) => Some(self.tile(*m)?),
                    None => None,
                };
                let mut stored = 0;
                for (e, (&i, &v)) in ids.iter().zip(vals).enumerate() {
                    if mask.is_none_or(|m| m[e] != 0.0) && i >= 0.0 && (i as usize) < t.len() {
                        let v = round.map_or(v, |d| round_to(d, v));
                        match atomic {
                            Some(d) => t.add(i as usize, |old| round_to(*d, old + v)),
                            None => t.set(i as usize, v),
                        }
                        stored += 1;
                    }
                }
                self.counters.stored += stored;
            }
            I::AllocShared { dst, buf } => {
                let decl = &self.sh.prog.smem[*buf as usize];
                let slot_len: usize = decl.dims.iter().product();
                self.smem[*buf as usize] = Some(SmemBuf {
                    slot_len,
                    data: vec![0.0; slot_len * decl.stages],
                    slots: vec![SlotState::default(); decl.stages],
                });
                self.set(*dst, Value::Smem { buf: *buf, slot: None });
            }
            I::SmemSlot { dst, ring, index } => {
                let (buf, slot) = match self.get(*ring)? {
                    Value::Smem { buf, slot } => (*buf, *slot),
                    v => return Err(format!("expected a shared buffer, got {}", kind(v))),
                };
                if slot.is_some() {
                    return Err(format!("{} is already one slot of its ring", self.smem_name(buf)));
                }
                let stages = self.sh.prog.smem[buf as usize].stages;
                let i = self.index(*index)?;
                if i < 0 || i as usize >= stages {
                    return Err(format!("slot {i} of {}, a ring of {stages} stages", self.smem_name(buf)));
                }
                self.set(*dst, Value::Smem { buf, slot: Some(i as u32) });
            }
            I::LoadShared { dst, src, transpose } => {
                let (buf, slot) = self.slot(*src)?;
                self.check_read(buf, slot, op)?;
                let mut out = self.out_buf(*dst);
                let b = self.smem[buf as usize].as_ref().expect("checked by slot()");
                let data = &b.data[slot * b.slot_len..(slot + 1) * b.slot_len];
                match transpose {
                    Some(plan) => rearrange(data, plan, &mut out),
                    None => out.extend_from_slice(data),
                }
                self.set(*dst, Value::Tile(out));
            }
            I::StoreShared { dst, src } => {
                let (buf, slot) = self.slot(*dst)?;
                self.check_overwrite(buf, slot)?;
                let dtype = self.sh.prog.smem[buf as usize].dtype;
                let epoch = self.epoch;
                let values = self.tile(*src)?.to_vec();
                let b = self.smem[buf as usize].as_mut().expect("checked by slot()");
                if values.len() != b.slot_len {
                    return Err(format!("a tile of {} elements into a slot of {}", values.len(), b.slot_len));
                }
                for (d, v) in b.data[slot * b.slot_len..(slot + 1) * b.slot_len].iter_mut().zip(values) {
                    *d = round_to(dtype, v);
                }
                let s = &mut b.slots[slot];
                s.written = true;
                s.copy = None;
                s.store_epoch = Some(epoch);
            }
            I::CpAsync { dst, view } => {
                let (buf, slot) = self.slot(*dst)?;
                self.check_overwrite(buf, slot)?;
                let dtype = self.sh.prog.smem[buf as usize].dtype;
                let slot_len = self.smem[buf as usize].as_ref().expect("checked by slot()").slot_len;
                // Outside the tensor the copy writes zeros (cp.async's zero fill).
                let mut staged = vec![0.0; slot_len];
                let loaded = self.read_view(*view, &mut staged)?;
                self.counters.loaded += loaded;
                let group = self.groups.committed;
                let b = self.smem[buf as usize].as_mut().expect("checked by slot()");
                for (d, v) in b.data[slot * slot_len..(slot + 1) * slot_len].iter_mut().zip(staged) {
                    *d = round_to(dtype, v);
                }
                let s = &mut b.slots[slot];
                s.written = true;
                s.store_epoch = None;
                s.copy = Some((group, op));
            }
            I::TmaStore { view, src } => {
                let (buf, slot) = self.slot(*src)?;
                self.check_read(buf, slot, op)?;
                let b = self.smem[buf as usize].as_ref().expect("checked by slot()");
                let data = &b.data[slot * b.slot_len..(slot + 1) * b.slot_len];
                // The slot holds the view's dtype already: no rounding on the way out.
                let stored = self.write_view(*view, data, None, None, None)?;
                self.counters.stored += stored;
            }
            I::Commit => self.groups.commit(),
            I::Wait { pending } => self.groups.wait(*pending, self.epoch),
            I::Barrier => self.epoch += 1,
            I::For { .. } | I::If { .. } | I::While { .. } | I::Return => {
                unreachable!("control instructions are handled by step()")
            }
        }
        Ok(())
    }

    // ----- global memory ---------------------------------------------------------------

    fn view(&self, r: Reg) -> R<&ViewVal> {
        match self.get(r)? {
            Value::View(v) => Ok(v),
            v => Err(format!("expected a view, got {}", kind(v))),
        }
    }

    /// Fills the in-tensor elements of a view into `out` (others keep their value).
    fn read_view(&self, view: Reg, out: &mut [f64]) -> R<u64> {
        let v = self.view(view)?;
        let t = self.tensor(v.arg)?;
        let window = Window { dims: &t.dims, strides: &t.strides, offsets: &v.offsets, sizes: &v.sizes, kept: &v.kept };
        let n_view: i64 = v.kept.iter().map(|&d| v.sizes[d]).product();
        if n_view as usize != out.len() {
            return Err(format!("a view of {n_view} elements read into {} elements", out.len()));
        }
        let mut loaded = 0u64;
        let mut rows = Vec::new();
        let (_, cs) = window.rows(|o, start, lo, hi| rows.push((o, start, lo, hi)));
        for (o, start, lo, hi) in rows {
            for c in lo..hi {
                out[o + c] = t.get((start + c as i64 * cs) as usize);
            }
            loaded += (hi - lo) as u64;
        }
        Ok(loaded)
    }

    fn store(
        &mut self,
        view: Reg,
        src: Reg,
        mask: Option<Reg>,
        round: Option<tessera_frontend::check::DType>,
        atomic: Option<tessera_frontend::check::DType>,
    ) -> R<()> {
        let values = self.tile(src)?;
        let mask = match mask {
            Some(m) => Some(self.tile(m)?),
            None => None,
        };
        let stored = self.write_view(view, values, mask, round, atomic)?;
        self.counters.stored += stored;
        Ok(())
    }

    /// Writes `values` (row-major over the view) to the view's elements inside the
    /// tensor, where `mask` allows; returns how many were written. With `atomic` (the
    /// tensor's dtype), each value is added to the element's, rounded to that dtype, in
    /// one atomic step: programs on other threads add into the same elements.
    fn write_view(
        &self,
        view: Reg,
        values: &[f64],
        mask: Option<&[f64]>,
        round: Option<tessera_frontend::check::DType>,
        atomic: Option<tessera_frontend::check::DType>,
    ) -> R<u64> {
        let v = self.view(view)?;
        let t = self.tensor(v.arg)?;
        let window = Window { dims: &t.dims, strides: &t.strides, offsets: &v.offsets, sizes: &v.sizes, kept: &v.kept };
        let mut rows = Vec::new();
        let (_, cs) = window.rows(|o, start, lo, hi| rows.push((o, start, lo, hi)));
        let me = self.linear + 1;
        let mut stored = 0u64;
        for (o, start, lo, hi) in rows {
            for c in lo..hi {
                let e = o + c;
                if mask.is_some_and(|m| m[e] == 0.0) {
                    continue;
                }
                let i = (start + c as i64 * cs) as usize;
                let x = round.map_or(values[e], |d| round_to(d, values[e]));
                stored += 1;
                if let Some(d) = atomic {
                    t.add(i, |old| round_to(d, old + x));
                    // Marked stored, never a race with another program's addition.
                    if let Some(owner) = &t.owner {
                        owner[i].store(me, Ordering::Relaxed);
                    }
                    continue;
                }
                t.set(i, x);
                if let (true, Some(owner)) = (self.sh.check_races, &t.owner) {
                    let prev = owner[i].swap(me, Ordering::Relaxed);
                    if prev != 0 && prev != me {
                        return Err(format!(
                            "programs {} and {} both store element {} of `{}`: a race on a GPU",
                            self.describe_program(prev - 1),
                            self.describe_program(me - 1),
                            describe_index(i as i64, &t.dims),
                            self.param_name(v.arg)
                        ));
                    }
                }
            }
        }
        Ok(stored)
    }

    fn describe_program(&self, linear: u32) -> String {
        let g = self.sh.grid;
        let l = linear as u64;
        format!("({}, {}, {})", l % g[0], (l / g[0]) % g[1].max(1), l / (g[0] * g[1]).max(1))
    }

    fn param_name(&self, arg: u32) -> String {
        let v = self.sh.func.params[arg as usize];
        self.sh.func.values[v.0 as usize].name.as_ref().map_or_else(|| format!("arg{arg}"), |n| n.to_string())
    }

    // ----- shared memory ---------------------------------------------------------------

    fn smem_name(&self, buf: u32) -> String {
        let op = self.sh.func.op(self.sh.prog.smem[buf as usize].op);
        match op.results.first().and_then(|r| self.sh.func.values[r.0 as usize].name.as_ref()) {
            Some(n) => format!("`{n}`"),
            None => format!("the shared buffer of {}", super::describe_loc(&op.loc, self.sh.positions)),
        }
    }

    /// The (buffer, slot) a shared-memory operand designates.
    /// A dot operand read in place from a shared slot (a `wgmma` operand) must hold
    /// completed copies, like any shared read.
    fn check_dot_operand(&mut self, r: Reg, op: OpId) -> R<()> {
        if matches!(self.get(r)?, Value::Smem { .. }) {
            let (buf, slot) = self.slot(r)?;
            self.check_read(buf, slot, op)?;
        }
        Ok(())
    }

    /// A dot operand's elements: a register tile, or a shared slot's (row-major).
    fn dot_operand(&self, r: Reg) -> R<&[f64]> {
        if !matches!(self.get(r)?, Value::Smem { .. }) {
            return self.tile(r);
        }
        let (buf, slot) = self.slot(r)?;
        let b = self.smem[buf as usize].as_ref().expect("checked by slot()");
        Ok(&b.data[slot * b.slot_len..(slot + 1) * b.slot_len])
    }

    fn slot(&self, r: Reg) -> R<(u32, usize)> {
        let (buf, slot) = match self.get(r)? {
            Value::Smem { buf, slot } => (*buf, *slot),
            v => return Err(format!("expected a shared buffer, got {}", kind(v))),
        };
        if self.smem[buf as usize].is_none() {
            return Err(format!("{} is used before its tile.alloc_shared ran", self.smem_name(buf)));
        }
        let stages = self.sh.prog.smem[buf as usize].stages;
        match slot {
            Some(s) => Ok((buf, s as usize)),
            None if stages == 1 => Ok((buf, 0)),
            None => Err(format!("{} is a ring of {stages} stages: pick one with tile.smem_slot", self.smem_name(buf))),
        }
    }

    fn check_read(&mut self, buf: u32, slot: usize, op: OpId) -> R<()> {
        let name = self.smem_name(buf);
        let epoch = self.epoch;
        let asynchronous = self.sh.prog.async_copies;
        let (committed, completed) = (self.groups.committed, self.groups.completed);
        let done_epoch = |g: u64| self.groups.done_epoch.get(g as usize).copied();
        let s = &self.smem[buf as usize].as_ref().expect("checked by slot()").slots[slot];
        if !s.written {
            return Err(format!("reads slot {slot} of {name} before anything was written to it"));
        }
        if asynchronous {
            let func = self.sh.func;
            if let Some((g, copy)) = s.copy {
                let at = super::describe_op(func, copy, self.sh.positions);
                if g >= committed {
                    return Err(format!(
                        "reads slot {slot} of {name} while its {at} is in a group that was never committed \
                         (tile.async_commit) and waited for (tile.async_wait)"
                    ));
                }
                if g >= completed {
                    return Err(format!(
                        "reads slot {slot} of {name} while its {at} may still be in flight: group {g} of \
                         {committed} committed is not covered by a tile.async_wait (groups 0..{completed} are)"
                    ));
                }
                if done_epoch(g) == Some(epoch) {
                    return Err(format!(
                        "reads slot {slot} of {name} with no tile.barrier after the tile.async_wait that \
                         completed its {at}: other threads' copies are not visible yet"
                    ));
                }
            }
            if s.store_epoch == Some(epoch) {
                return Err(format!(
                    "reads slot {slot} of {name} with no tile.barrier after the tile.store_shared that wrote it"
                ));
            }
        }
        let s = &mut self.smem[buf as usize].as_mut().expect("checked by slot()").slots[slot];
        s.read = Some((epoch, op));
        Ok(())
    }

    fn check_overwrite(&self, buf: u32, slot: usize) -> R<()> {
        if !self.sh.prog.async_copies {
            return Ok(());
        }
        let name = self.smem_name(buf);
        let s = &self.smem[buf as usize].as_ref().expect("checked by slot()").slots[slot];
        if let Some((e, read)) = s.read {
            if e == self.epoch {
                return Err(format!(
                    "overwrites slot {slot} of {name}, which {} reads in the same stage: a tile.barrier must \
                     separate the last read from the next write",
                    super::describe_op(self.sh.func, read, self.sh.positions)
                ));
            }
        }
        if let Some((g, copy)) = s.copy {
            if g >= self.groups.completed {
                return Err(format!(
                    "overwrites slot {slot} of {name} while an earlier {} into it may still be in flight",
                    super::describe_op(self.sh.func, copy, self.sh.positions)
                ));
            }
        }
        Ok(())
    }
}

/// An error raised by an instruction itself, or one already located in a nested region.
enum Failure {
    Here(String),
    Nested(InterpError),
}

impl From<String> for Failure {
    fn from(m: String) -> Failure {
        Failure::Here(m)
    }
}

enum Operand<'v> {
    Scalar(f64),
    Tile(&'v [f64]),
}

impl Operand<'_> {
    #[inline]
    fn at(&self, e: usize) -> f64 {
        match self {
            Operand::Scalar(x) => *x,
            Operand::Tile(t) => t[e],
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Unset => "nothing",
        Value::Index(_) => "an index",
        Value::Scalar(_) => "a scalar",
        Value::Tile(_) => "a tile",
        Value::Tensor => "a tensor",
        Value::View(_) => "a view",
        Value::Smem { .. } => "a shared buffer",
    }
}

fn describe_index(mut i: i64, dims: &[i64]) -> String {
    let mut coords = vec![0i64; dims.len()];
    for d in (0..dims.len()).rev() {
        let n = dims[d].max(1);
        coords[d] = i % n;
        i /= n;
    }
    format!("{coords:?}")
}

fn rearrange(src: &[f64], plan: &Strided, out: &mut Vec<f64>) {
    let rank = plan.dims.len();
    let n: usize = plan.dims.iter().product();
    out.reserve(n);
    if rank == 0 || n == 0 {
        out.extend_from_slice(&src[..n.min(src.len())]);
        return;
    }
    let (last, inner_stride) = (plan.dims[rank - 1], plan.strides[rank - 1]);
    let mut coord = vec![0usize; rank - 1];
    for _ in 0..n / last {
        let base: usize = coord.iter().zip(&plan.strides).map(|(c, s)| c * s).sum();
        out.extend((0..last).map(|j| src[base + j * inner_stride]));
        for p in (0..rank - 1).rev() {
            coord[p] += 1;
            if coord[p] < plan.dims[p] {
                break;
            }
            coord[p] = 0;
        }
    }
}

/// `sum` accumulates in f32 (f64 for f64 tiles, exact integers for integer tiles) in
/// element order and rounds once to the dtype — with `step` (`@accum(T)`, T narrower
/// than f32) the running sum is rounded to T after every addition; `max`/`min` ignore
/// NaN unless every element is NaN (PTX `max.f32`).
fn reduce(
    src: &[f64],
    kind: ReduceKind,
    (outer, len, inner): (usize, usize, usize),
    dom: Domain,
    step: Option<DType>,
    out: &mut Vec<f64>,
) {
    out.reserve(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let base = o * len * inner + i;
            let elems = (0..len).map(|l| src[base + l * inner]);
            let v = match (kind, dom) {
                (ReduceKind::Sum, Domain::F32(d)) => match step {
                    Some(t) => {
                        let r = Rounder::new(t);
                        Rounder::new(d).round(elems.fold(0f32, |s, x| r.round(s + x as f32) as f32))
                    }
                    None => Rounder::new(d).round(elems.fold(0f32, |s, x| s + x as f32)),
                },
                (ReduceKind::Sum, Domain::Int(d)) => {
                    d.wrap_int(elems.fold(0i64, |s, x| s.wrapping_add(x as i64))) as f64
                }
                (ReduceKind::Sum, _) => elems.sum(),
                (ReduceKind::Max, _) => elems.fold(f64::NAN, f64::max),
                (ReduceKind::Min, _) => elems.fold(f64::NAN, f64::min),
            };
            out.push(if len == 0 && kind != ReduceKind::Sum {
                if kind == ReduceKind::Max {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            } else {
                v
            });
        }
    }
}

/// `acc + a @ b`: products exact, accumulation in f32 (f64, or wrapping i32 for integer
/// operands) over `k` in order, starting from the accumulator, then rounded to its dtype.
/// With `step` (`@accum(T)`, T narrower than f32) the running sum starts from the
/// accumulator rounded to T and each `s + a·b` (one f32 fused multiply-add) is rounded
/// to T.
fn dot(
    a: &[f64],
    b: &[f64],
    acc: &[f64],
    (m, n, k): (usize, usize, usize),
    (mode, dom, step): (DotMode, Domain, Option<DType>),
    out: &mut Vec<f64>,
) {
    out.reserve(m * n);
    match mode {
        DotMode::F32Exact | DotMode::F32Fma => {
            let a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            // b transposed so that each output reads two contiguous rows.
            let mut bt = vec![0f32; n * k];
            for kk in 0..k {
                for j in 0..n {
                    bt[j * k + kk] = b[kk * n + j] as f32;
                }
            }
            let round = match dom {
                Domain::F32(d) => Rounder::new(d),
                _ => Rounder::F32,
            };
            for i in 0..m {
                let ar = &a32[i * k..(i + 1) * k];
                for j in 0..n {
                    let bc = &bt[j * k..(j + 1) * k];
                    let mut s = acc[i * n + j] as f32;
                    if let Some(t) = step {
                        let r = Rounder::new(t);
                        s = r.round(s) as f32;
                        for (x, y) in ar.iter().zip(bc) {
                            s = r.round(x.mul_add(*y, s)) as f32;
                        }
                    } else if mode == DotMode::F32Exact {
                        for (x, y) in ar.iter().zip(bc) {
                            s += x * y;
                        }
                    } else {
                        for (x, y) in ar.iter().zip(bc) {
                            s = x.mul_add(*y, s);
                        }
                    }
                    out.push(match dom {
                        Domain::F64 => s as f64,
                        Domain::Int(_) | Domain::Index | Domain::Bool => dom.convert(s as f64),
                        Domain::F32(_) => round.round(s),
                    });
                }
            }
        }
        DotMode::F64 => {
            for i in 0..m {
                for j in 0..n {
                    let mut s = acc[i * n + j];
                    for kk in 0..k {
                        s = a[i * k + kk].mul_add(b[kk * n + j], s);
                    }
                    out.push(dom.convert(s));
                }
            }
        }
        DotMode::Int => {
            for i in 0..m {
                for j in 0..n {
                    let mut s = acc[i * n + j] as i64;
                    for kk in 0..k {
                        s = s.wrapping_add((a[i * k + kk] as i64).wrapping_mul(b[kk * n + j] as i64));
                    }
                    out.push(match dom {
                        Domain::Int(d) => d.wrap_int(s) as f64,
                        _ => dom.convert(s as i32 as f64),
                    });
                }
            }
        }
    }
}
