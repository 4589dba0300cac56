//! Tile IR → the body of the program function: scalars become SSA values, tiles become
//! `Mem` or lazy `Node`s (see `tiles`), structured control flow becomes loops and
//! branches.

mod control;
mod eval;
mod memory;

use std::rc::Rc;

use tessera_frontend::check::DType;

use super::builder::{iota, lit, Elem, FnBuilder, VTy};
use super::numerics::{self, ErrSink, Storage};
use super::plan::{Plan, Root};
use super::tiles::{contiguous, Mem, Node, SmemV, Stride, TensorV, Tile, ViewV};
use crate::error::LowerError;
use crate::ir::{policy, Attr, Func, Loc, OpId, OpKind, Region, Type, ValueId};

pub(super) type R<T> = Result<T, LowerError>;

/// The body of a fused loop: `(lowerer, index, lanes, fast)`.
pub(super) type ChunkBody<'a, 'f> = dyn FnMut(&mut Lowerer<'f>, &[String], u32, bool) -> R<()> + 'a;

/// Lanes of the vectors tiles are processed in (one zmm register of f32).
pub(super) const VL: u32 = 16;

#[derive(Clone, Debug)]
pub(super) enum Val {
    Unset,
    /// A register scalar (i64 for index).
    Scalar(String),
    Tile(Tile),
    View(Rc<ViewV>),
    Tensor(Rc<TensorV>),
    Smem(SmemV),
    Token,
}

pub(super) struct Lowerer<'f> {
    pub f: &'f Func,
    pub plan: Plan,
    pub b: FnBuilder,
    pub vals: Vec<Val>,
    /// The i32 stack slot holding the program's first error code.
    pub err_slot: String,
    /// Messages of the error codes (code = index + 1).
    pub errors: Vec<String>,
    pub pid: [String; 3],
    pub grid: [String; 3],
    next_buf: u32,
    /// The op being lowered.
    pub cur: Option<OpId>,
}

impl<'f> Lowerer<'f> {
    pub(super) fn new(f: &'f Func, b: FnBuilder, pid: [String; 3], grid: [String; 3]) -> Lowerer<'f> {
        Lowerer {
            f,
            plan: Plan::new(f),
            b,
            vals: vec![Val::Unset; f.values.len()],
            err_slot: "%err.slot".into(),
            errors: Vec::new(),
            pid,
            grid,
            next_buf: 0,
            cur: None,
        }
    }

    pub(super) fn err(&self, message: impl Into<String>) -> LowerError {
        let range = self.cur.map_or(self.f.loc.range, |id| self.f.op(id).loc.range);
        LowerError { message: message.into(), range }
    }

    fn unsupported(&self, what: &str) -> LowerError {
        self.err(format!("`{what}` is not supported by the LLVM backend yet"))
    }

    pub(super) fn set(&mut self, v: ValueId, val: Val) {
        let val = match val {
            Val::Tile(mut t) if t.loc.is_none() => {
                t.loc = self.cur.map(|id| self.f.op(id).loc.clone());
                Val::Tile(t)
            }
            other => other,
        };
        self.vals[v.0 as usize] = val;
    }

    pub(super) fn get(&self, v: ValueId) -> R<Val> {
        match &self.vals[v.0 as usize] {
            Val::Unset => Err(self.err(format!("internal error: value %{} is used before it is defined", v.0))),
            other => Ok(other.clone()),
        }
    }

    pub(super) fn scalar(&self, v: ValueId) -> R<String> {
        match self.get(v)? {
            Val::Scalar(s) => Ok(s),
            other => Err(self.err(format!("internal error: expected a scalar, got {other:?}"))),
        }
    }

    pub(super) fn tile(&self, v: ValueId) -> R<Tile> {
        match self.get(v)? {
            Val::Tile(t) => Ok(t),
            Val::Scalar(s) => {
                // A scalar where a tile is expected (a bool condition): one element.
                let dtype = self.f.ty(v).dtype().unwrap_or(DType::I64);
                Ok(Tile::new(&[], dtype, Node::Splat(s)))
            }
            other => Err(self.err(format!("internal error: expected a tile, got {other:?}"))),
        }
    }

    fn dtype_of(&self, v: ValueId) -> Option<DType> {
        match self.f.ty(v) {
            Type::Index => None,
            t => t.dtype(),
        }
    }

    fn tile_shape(&self, v: ValueId) -> R<Vec<i64>> {
        self.f.ty(v).const_dims().ok_or_else(|| self.err(format!("tile dims of {} are not constants", self.f.ty(v))))
    }

    fn error_code(&mut self, message: String) -> u32 {
        if let Some(i) = self.errors.iter().position(|m| *m == message) {
            return i as u32 + 1;
        }
        self.errors.push(message);
        self.errors.len() as u32
    }

    fn sink_for(&mut self, what: &str) -> (String, u32) {
        let (name, loc) = match self.cur {
            Some(id) => (self.f.op(id).kind.name(), describe_loc(&self.f.op(id).loc)),
            None => ("?", String::new()),
        };
        let code = self.error_code(format!("{what} in `{name}`{loc}"));
        (self.err_slot.clone(), code)
    }

    // ----- regions ---------------------------------------------------------------------

    /// Lowers a region's ops but its terminator; returns the terminator's operands.
    pub(super) fn region(&mut self, region: &Region) -> R<Vec<ValueId>> {
        let mut yielded = Vec::new();
        for &id in &region.ops {
            let op = self.f.op(id);
            if op.kind == OpKind::Yield {
                yielded = op.operands.clone();
                continue;
            }
            self.op(id)?;
        }
        Ok(yielded)
    }

    fn op(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        let saved = self.cur;
        self.cur = Some(id);
        self.b.loc = Some(op.loc.clone());
        let (block, line, blocks) = (self.b.cur, self.b.blocks[self.b.cur].lines.len(), self.b.blocks.len());
        let r = self.op_inner(id);
        // A comment heads the code an op emits (lazy ops emit theirs at their use).
        let own_comment =
            self.b.blocks[block].lines.get(line).is_some_and(|l| l.text.starts_with(&format!("; {}", op.kind.name())));
        if r.is_ok() && !own_comment && (self.b.blocks.len() != blocks || self.b.blocks[block].lines.len() != line) {
            let names: Vec<String> = op
                .results
                .iter()
                .filter_map(|r| f.values[r.0 as usize].name.as_ref().map(|n| format!("%{n}")))
                .collect();
            let text = if names.is_empty() {
                format!("; {}", op.kind.name())
            } else {
                format!("; {} = {}", names.join(", "), op.kind.name())
            };
            let at = line.min(self.b.blocks[block].lines.len());
            self.b.blocks[block].lines.insert(at, super::builder::Line { text, loc: Some(op.loc.clone()) });
        }
        self.cur = saved;
        if let Some(s) = saved {
            self.b.loc = Some(f.op(s).loc.clone());
        }
        r
    }

    fn op_inner(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        let res = op.results.first().copied();
        let is_tile = res.is_some_and(|r| matches!(f.ty(r), Type::Tile(_)));
        match op.kind {
            OpKind::Constant => {
                let r = res.ok_or_else(|| self.err("arith.constant has no result"))?;
                let v = match (f.ty(r), op.attr("value")) {
                    (Type::Index, Some(a)) => {
                        let x = a.as_int().or_else(|| a.as_float().map(|x| x as i64)).unwrap_or(0);
                        x.to_string()
                    }
                    (Type::Scalar(d), Some(a)) => {
                        let x = match a {
                            Attr::Bool(b) => f64::from(u8::from(*b)),
                            a => a.as_float().ok_or_else(|| self.err("arith.constant needs a numeric value"))?,
                        };
                        let e = numerics::reg(*d);
                        let l = lit(VTy::scalar(e), x);
                        numerics::finish(&mut self.b, Some(*d), VTy::scalar(e), &l)
                    }
                    (Type::Tile(_), Some(a)) => {
                        let x = a.as_float().ok_or_else(|| self.err("arith.constant needs a numeric value"))?;
                        let shape = self.tile_shape(r)?;
                        let t = Tile::new(&shape, f.ty(r).dtype().unwrap_or(DType::F32), Node::Const(x));
                        self.set(r, Val::Tile(t));
                        return Ok(());
                    }
                    (t, _) => return Err(self.err(format!("arith.constant of type {t}"))),
                };
                self.set(r, Val::Scalar(v));
            }
            OpKind::ProgramId | OpKind::NumPrograms => {
                let axis = op.int_attr("axis").unwrap_or(0);
                if !(0..3).contains(&axis) {
                    return Err(self.err(format!("grid axis {axis} (0, 1 or 2)")));
                }
                let v = if op.kind == OpKind::ProgramId {
                    self.pid[axis as usize].clone()
                } else {
                    self.grid[axis as usize].clone()
                };
                self.set(op.results[0], Val::Scalar(v));
            }
            k if k.is_binary() => {
                let r = op.results[0];
                let name = &k.name()["arith.".len()..];
                let opname: &'static str = binary_name(name).ok_or_else(|| self.unsupported(k.name()))?;
                if is_tile {
                    let (a, b) = (self.tile(op.operands[0])?, self.tile(op.operands[1])?);
                    let dtype = f.ty(r).dtype().unwrap_or(DType::F32);
                    let int = !numerics::reg(dtype).is_float();
                    let code = if int && matches!(opname, "div" | "floordiv" | "rem" | "pow") {
                        self.sink_for(if opname == "pow" {
                            "integer power with a negative exponent"
                        } else {
                            "integer division by zero"
                        })
                        .1
                    } else {
                        0
                    };
                    let t = Tile::new(&self.tile_shape(r)?, dtype, Node::Binary { op: opname, a, b, code });
                    self.check_numeric(&t)?;
                    self.bind(id, r, saturating(op, t))?;
                } else {
                    let (a, b) = (self.scalar(op.operands[0])?, self.scalar(op.operands[1])?);
                    let dt = self.dtype_of(r);
                    let int = !numerics::reg_of(dt).is_float();
                    let (slot, code) = if int && matches!(opname, "div" | "floordiv" | "rem" | "pow") {
                        self.sink_for(if opname == "pow" {
                            "integer power with a negative exponent"
                        } else {
                            "integer division by zero"
                        })
                    } else {
                        (self.err_slot.clone(), 0)
                    };
                    let sink = ErrSink { slot: &slot, code };
                    let sat = policy::saturates(op) && dt.is_some_and(DType::is_fp8);
                    let compute = if sat { Some(DType::F32) } else { dt };
                    let v =
                        numerics::binary(&mut self.b, opname, compute, 0, &a, &b, &sink).map_err(|m| self.err(m))?;
                    let v = if sat { numerics::cast_with(&mut self.b, compute, dt, 0, &v, true) } else { v };
                    self.set(r, Val::Scalar(v));
                }
            }
            k if k.is_unary_math() => {
                let r = op.results[0];
                let name = k.name().split('.').nth(1).unwrap_or("");
                let opname: &'static str = unary_name(name).ok_or_else(|| self.unsupported(k.name()))?;
                if is_tile {
                    let a = self.tile(op.operands[0])?;
                    let t = Tile::new(
                        &self.tile_shape(r)?,
                        f.ty(r).dtype().unwrap_or(DType::F32),
                        Node::Unary { op: opname, a },
                    );
                    self.check_numeric(&t)?;
                    self.bind(id, r, saturating(op, t))?;
                } else {
                    let a = self.scalar(op.operands[0])?;
                    let dt = self.dtype_of(r);
                    let sat = policy::saturates(op) && dt.is_some_and(DType::is_fp8);
                    let compute = if sat { Some(DType::F32) } else { dt };
                    let v = numerics::unary(&mut self.b, opname, compute, 0, &a).map_err(|m| self.err(m))?;
                    let v = if sat { numerics::cast_with(&mut self.b, compute, dt, 0, &v, true) } else { v };
                    self.set(r, Val::Scalar(v));
                }
            }
            OpKind::Cmp => {
                let r = op.results[0];
                let pred = op.str_attr("pred").unwrap_or("").to_string();
                let dt = self.dtype_of(op.operands[0]);
                if is_tile {
                    let (a, b) = (self.tile(op.operands[0])?, self.tile(op.operands[1])?);
                    let t = Tile::new(&self.tile_shape(r)?, DType::Bool, Node::Cmp { pred, a, b });
                    self.check_numeric(&t)?;
                    self.bind(id, r, t)?;
                } else {
                    let (a, b) = (self.scalar(op.operands[0])?, self.scalar(op.operands[1])?);
                    let v = numerics::compare(&mut self.b, &pred, dt, 0, &a, &b).map_err(|m| self.err(m))?;
                    self.set(r, Val::Scalar(v));
                }
            }
            OpKind::Select => {
                let r = op.results[0];
                if is_tile {
                    let shape = self.tile_shape(r)?;
                    let c = self.tile(op.operands[0])?;
                    let c = if c.shape != shape { broadcast_to(&c, &shape) } else { c };
                    let (a, b) = (self.tile(op.operands[1])?, self.tile(op.operands[2])?);
                    let t = Tile::new(&shape, f.ty(r).dtype().unwrap_or(DType::F32), Node::Select { c, a, b });
                    self.bind(id, r, t)?;
                } else {
                    let (c, a, b) =
                        (self.scalar(op.operands[0])?, self.scalar(op.operands[1])?, self.scalar(op.operands[2])?);
                    let ty = VTy::scalar(numerics::reg_of(self.dtype_of(r)));
                    let v = numerics::select_vals(&mut self.b, ty, &c, &a, &b);
                    self.set(r, Val::Scalar(v));
                }
            }
            OpKind::Cast => {
                let r = op.results[0];
                let saturate = policy::saturates(op);
                if is_tile {
                    let a = self.tile(op.operands[0])?;
                    let u = if policy::stochastic(op) { Some(self.tile(op.operands[1])?) } else { None };
                    let node = Node::Cast { a, saturate, u };
                    let t = Tile::new(&self.tile_shape(r)?, f.ty(r).dtype().unwrap_or(DType::F32), node);
                    self.bind(id, r, t)?;
                } else {
                    let a = self.scalar(op.operands[0])?;
                    let (from, to) = (self.dtype_of(op.operands[0]), self.dtype_of(r));
                    let v = numerics::cast_with(&mut self.b, from, to, 0, &a, saturate);
                    self.set(r, Val::Scalar(v));
                }
            }
            OpKind::Splat => {
                let r = op.results[0];
                let s = self.scalar(op.operands[0])?;
                let to = f.ty(r).dtype().unwrap_or(DType::F32);
                let from = self.dtype_of(op.operands[0]);
                let v = numerics::cast(&mut self.b, from, Some(to), 0, &s);
                let t = Tile::new(&self.tile_shape(r)?, to, Node::Splat(v));
                self.set(r, Val::Tile(t));
            }
            OpKind::Full => {
                let r = op.results[0];
                let x = op.attr("value").and_then(Attr::as_float).ok_or_else(|| self.err("tile.full needs a value"))?;
                let t = Tile::new(&self.tile_shape(r)?, f.ty(r).dtype().unwrap_or(DType::F32), Node::Const(x));
                self.set(r, Val::Tile(t));
            }
            OpKind::Arange => {
                let r = op.results[0];
                let shape = self.tile_shape(r)?;
                if shape.len() != 1 {
                    return Err(self.err("tile.arange makes a 1-D tile"));
                }
                let t = Tile::new(&shape, f.ty(r).dtype().unwrap_or(DType::I32), Node::Arange);
                self.set(r, Val::Tile(t));
            }
            OpKind::Broadcast => {
                let r = op.results[0];
                let a = self.tile(op.operands[0])?;
                let shape = self.tile_shape(r)?;
                if a.shape.len() != shape.len() || a.shape.iter().zip(&shape).any(|(x, y)| x != y && *x != 1) {
                    return Err(self.err(format!("tile.broadcast: {} → {}", f.ty(op.operands[0]), f.ty(r))));
                }
                let t = self.broadcast(&a, &shape)?;
                self.set(r, Val::Tile(t));
            }
            OpKind::ExpandDims => {
                let r = op.results[0];
                let a = self.tile(op.operands[0])?;
                let axis = op.int_attr("axis").unwrap_or(0).max(0) as usize;
                let shape = self.tile_shape(r)?;
                let rank = if a.rank0 { 0 } else { a.shape.len() };
                if axis > rank || shape.len() != rank + 1 {
                    return Err(self.err(format!("tile.expand_dims axis {axis} of {}", f.ty(op.operands[0]))));
                }
                let t = match a.mem() {
                    Some(m) => {
                        let mut strides = if a.rank0 { Vec::new() } else { m.strides.clone() };
                        strides.insert(axis, Stride::C(0));
                        Tile::new(&shape, a.dtype, Node::Mem(Mem { strides, whole: None, ..m.clone() }))
                    }
                    None => Tile::new(&shape, a.dtype, Node::Expand { a, axis }),
                };
                self.set(r, Val::Tile(t));
            }
            OpKind::Transpose => {
                let r = op.results[0];
                let a = self.tile(op.operands[0])?;
                let t = self.transpose(&a)?;
                self.set(r, Val::Tile(t));
            }
            OpKind::ConvertLayout => {
                let a = self.get(op.operands[0])?;
                self.set(op.results[0], a);
            }
            OpKind::Rand => {
                let r = op.results[0];
                let shape = self.tile_shape(r)?;
                if op.operands.len() < 1 + shape.len() {
                    return Err(self.err(format!(
                        "tile.rand of a rank-{} tile needs a seed and {} offsets",
                        shape.len(),
                        shape.len()
                    )));
                }
                let seed = self.scalar(op.operands[0])?;
                let offsets: Vec<String> = op.operands[1..].iter().map(|&v| self.scalar(v)).collect::<R<_>>()?;
                let t = Tile::new(&shape, f.ty(r).dtype().unwrap_or(DType::F32), Node::Rand { seed, offsets });
                self.set(r, Val::Tile(t));
            }
            OpKind::CausalMask => {
                let r = op.results[0];
                let s = self.tile(op.operands[0])?;
                if s.shape.len() != 2 || s.rank0 {
                    return Err(self.err("tile.causal_mask needs a 2-D tile"));
                }
                let (q, k) = (self.scalar(op.operands[1])?, self.scalar(op.operands[2])?);
                let t = s.with_node(Node::Causal { s: s.clone(), q, k });
                self.bind(id, r, t)?;
            }
            OpKind::Reduce => {
                let r = op.results[0];
                let a = self.tile(op.operands[0])?;
                let axis = op.int_attr("axis").unwrap_or(0).max(0) as usize;
                let kind = op.str_attr("kind").unwrap_or("").to_string();
                let shape = self.tile_shape(r)?;
                let step = policy::acc(op).filter(|&t| policy::rounds_each_step(t) && kind == "sum");
                let t = self.reduce(&a, &kind, axis, &shape, f.ty(r).dtype().unwrap_or(a.dtype), step)?;
                self.set(r, Val::Tile(t));
            }
            OpKind::Dot => {
                let r = op.results[0];
                let (a, b, acc) = (self.tile(op.operands[0])?, self.tile(op.operands[1])?, self.tile(op.operands[2])?);
                let out = f.ty(r).dtype().unwrap_or(DType::F32);
                let step = policy::acc(op).filter(|&t| policy::rounds_each_step(t));
                let t = self.dot(id, &a, &b, &acc, op.operands[2], out, step)?;
                self.set(r, Val::Tile(t));
            }
            OpKind::TensorDim => {
                let axis = op.int_attr("axis").unwrap_or(0).max(0) as usize;
                let t = match self.get(op.operands[0])? {
                    Val::Tensor(t) => t,
                    _ => return Err(self.err("tile.dim of a value that is not a tensor parameter")),
                };
                let d = t.dims.get(axis).cloned().ok_or_else(|| self.err(format!("tile.dim axis {axis}")))?;
                self.set(op.results[0], Val::Scalar(d));
            }
            OpKind::View => self.view(id)?,
            OpKind::Load => {
                let r = op.results[0];
                let view = match self.get(op.operands[0])? {
                    Val::View(v) => v,
                    _ => return Err(self.err("tile.load of a value that is not a view")),
                };
                let mask = match op.operands.get(1) {
                    Some(&m) => Some(self.tile(m)?),
                    None => None,
                };
                let other = op.attr("other").and_then(Attr::as_float).unwrap_or(0.0);
                let shape = self.tile_shape(r)?;
                let dtype = f.ty(r).dtype().unwrap_or(view.tensor.dtype);
                let t = Tile::new(&shape, dtype, Node::Load { view, mask, other });
                self.bind(id, r, t)?;
            }
            OpKind::Store => {
                let view = match self.get(op.operands[0])? {
                    Val::View(v) => v,
                    _ => return Err(self.err("tile.store into a value that is not a view")),
                };
                let value = self.tile(op.operands[1])?;
                let mask = match op.operands.get(2) {
                    Some(&m) => Some(self.tile(m)?),
                    None => None,
                };
                self.store_view(&view, &value, mask.as_ref(), op.attr("atomic").is_some())?;
            }
            OpKind::Gather => {
                let r = op.results[0];
                let tensor = self.tensor_param(op.operands[0])?;
                let idx = self.tile(op.operands[1])?;
                let mask = match op.operands.get(2) {
                    Some(&m) => Some(self.tile(m)?),
                    None => None,
                };
                let shape = self.tile_shape(r)?;
                let t = Tile::new(&shape, f.ty(r).dtype().unwrap_or(tensor.dtype), Node::Gather { tensor, idx, mask });
                self.bind(id, r, t)?;
            }
            OpKind::Scatter => {
                let tensor = self.tensor_param(op.operands[0])?;
                let idx = self.tile(op.operands[1])?;
                let values = self.tile(op.operands[2])?;
                let mask = match op.operands.get(3) {
                    Some(&m) => Some(self.tile(m)?),
                    None => None,
                };
                self.scatter(&tensor, &idx, &values, mask.as_ref(), op.attr("atomic").is_some())?;
            }
            OpKind::AllocShared => {
                let r = op.results[0];
                let Type::Smem(s) = f.ty(r) else { return Err(self.err("tile.alloc_shared makes a shared buffer")) };
                let dims: Vec<i64> = s
                    .dims
                    .iter()
                    .map(|d| d.as_const())
                    .collect::<Option<_>>()
                    .ok_or_else(|| self.err("shared buffer dims are not constants"))?;
                let slot: i64 = dims.iter().product::<i64>().max(1);
                let st = Storage::private(s.dtype);
                let ptr = self.b.alloca("smem", st.elem(), (slot * s.stages.max(1) as i64) as u64);
                self.set(r, Val::Smem(SmemV { ptr, dims, slot, st, root: Root::Smem(id.0) }));
            }
            OpKind::SmemSlot => {
                let ring = self.smem(op.operands[0])?;
                let i = self.scalar(op.operands[1])?;
                let off = self.b.mul(&i, &ring.slot.to_string());
                let ptr = self.b.gep(ring.st.elem(), &ring.ptr, &off);
                self.set(op.results[0], Val::Smem(SmemV { ptr, ..ring }));
            }
            OpKind::CpAsync => {
                let dst = self.smem(op.operands[0])?;
                let view = match self.get(op.operands[1])? {
                    Val::View(v) => v,
                    _ => return Err(self.err("tile.cp_async copies a view")),
                };
                let shape: Vec<i64> = view.kept.iter().map(|&d| view.sizes[d]).collect();
                if shape.iter().product::<i64>() != dst.dims.iter().product::<i64>() {
                    return Err(self.err("tile.cp_async: the view and the buffer have different sizes"));
                }
                let dtype = self.f.ty(op.operands[0]).dtype().unwrap_or(view.tensor.dtype);
                let t = Tile::new(&dst.dims, dtype, Node::Load { view, mask: None, other: 0.0 });
                let m = smem_mem(&dst);
                self.b.emit("; tile.cp_async: an immediate copy on the CPU");
                self.materialize_into(&t, &m)?;
            }
            OpKind::LoadShared => self.load_shared(id)?,
            OpKind::StoreShared => {
                let dst = self.smem(op.operands[0])?;
                let value = self.tile(op.operands[1])?;
                if value.numel() != dst.dims.iter().product::<i64>() {
                    return Err(self.err("tile.store_shared: the tile and the buffer have different sizes"));
                }
                let value = if value.shape != dst.dims { self.reshape_copy(&value, &dst.dims)? } else { value };
                let m = smem_mem(&dst);
                self.materialize_into(&value, &m)?;
            }
            OpKind::AsyncCommit | OpKind::AsyncWait | OpKind::Barrier => {
                // One thread per tile program and copies complete at once: nothing to wait for.
                self.b.emit(format!("; {}: nothing to do on the CPU", op.kind.name()));
                for &r in &op.results {
                    self.set(r, Val::Token);
                }
            }
            OpKind::For => self.for_op(id)?,
            OpKind::If => self.if_op(id)?,
            OpKind::Return => {
                if self.plan.parent[id.0 as usize].is_some() {
                    return Err(self.err("func.return inside a loop or branch"));
                }
                let e = self.b.val("err", format!("load i32, i32* {}", self.err_slot));
                self.b.terminate(format!("ret i32 {e}"));
            }
            other => return Err(self.unsupported(other.name())),
        }
        Ok(())
    }

    fn check_numeric(&self, t: &Tile) -> R<()> {
        let (dt, bad) = match &*t.node {
            Node::Binary { op, a, .. } => {
                let e = numerics::reg(a.dtype);
                let bad = match e {
                    Elem::F32 | Elem::F64 => matches!(*op, "and" | "or" | "xor" | "shl" | "shr"),
                    Elem::I1 => !matches!(*op, "and" | "or" | "xor" | "min" | "max" | "mul"),
                    _ => false,
                };
                (a.dtype, bad.then(|| format!("arith.{op}")))
            }
            Node::Unary { op, a } => {
                let e = numerics::reg(a.dtype);
                let bad = match e {
                    Elem::F32 | Elem::F64 => *op == "not",
                    Elem::I1 => !matches!(*op, "not" | "abs" | "relu"),
                    _ => !matches!(*op, "neg" | "not" | "abs" | "relu"),
                };
                (a.dtype, bad.then(|| op.to_string()))
            }
            Node::Cmp { pred, a, .. } => {
                let ok = matches!(pred.as_str(), "lt" | "le" | "gt" | "ge" | "eq" | "ne");
                (a.dtype, (!ok).then(|| format!("arith.cmp with predicate `{pred}`")))
            }
            _ => return Ok(()),
        };
        match bad {
            Some(what) => Err(self.err(format!("`{what}` is not defined on {dt}"))),
            None => Ok(()),
        }
    }

    fn tensor_param(&self, v: ValueId) -> R<Rc<TensorV>> {
        match self.get(v)? {
            Val::Tensor(t) => Ok(t),
            _ => Err(self.err("expected a tensor parameter")),
        }
    }

    fn smem(&self, v: ValueId) -> R<SmemV> {
        match self.get(v)? {
            Val::Smem(s) => Ok(s),
            _ => Err(self.err("expected a shared buffer")),
        }
    }

    /// Binds a tile result: lazily where that is safe and cheap, else materialized now.
    pub(super) fn bind(&mut self, id: OpId, r: ValueId, t: Tile) -> R<()> {
        if t.mem().is_some() {
            self.set(r, Val::Tile(t));
            return Ok(());
        }
        let pos = self.plan.pos[id.0 as usize];
        let last = self.plan.last_use[r.0 as usize];
        let pure = t.is_pure() && t.size() <= 16;
        let hazard = t
            .roots()
            .into_iter()
            .any(|root| matches!(root, Root::Tensor(_) | Root::Smem(_)) && self.plan.written_between(root, pos, last));
        let lazy = pure || (self.plan.single_local_use(r) && !hazard);
        if lazy {
            self.set(r, Val::Tile(t));
        } else {
            let m = self.materialize_at(&t, pos, last)?;
            self.set(r, Val::Tile(t.with_node(Node::Mem(m))));
        }
        Ok(())
    }
}

/// Elementwise fp8 arithmetic under `saturate = true`: the op computed as f32, then
/// converted to fp8 with the clamp (the same single rounding as without the policy).
fn saturating(op: &crate::ir::Op, t: Tile) -> Tile {
    if !(policy::saturates(op) && t.dtype.is_fp8()) {
        return t;
    }
    let dtype = t.dtype;
    let inner = Tile { dtype: DType::F32, ..t };
    let mut outer = inner.with_node(Node::Cast { a: inner.clone(), saturate: true, u: None });
    outer.dtype = dtype;
    outer
}

pub(super) struct RedCtx {
    pub comb: &'static str,
    pub identity: f64,
    pub e: Elem,
    pub a_dtype: DType,
    pub out_dtype: DType,
    /// `@accum(T)` of a T narrower than f32: the sum runs in element order and is
    /// rounded to T after every addition.
    pub step: Option<DType>,
}

fn int_min(e: Elem) -> f64 {
    match e {
        Elem::I8 => -128.0,
        Elem::I32 => f64::from(i32::MIN),
        _ => i64::MIN as f64,
    }
}

fn int_max(e: Elem) -> f64 {
    match e {
        Elem::I8 => 127.0,
        Elem::I32 => f64::from(i32::MAX),
        _ => i64::MAX as f64,
    }
}

/// Chunks of the last dim: (first column, lanes, how many chunks of that width).
fn chunks(n: i64, lanes: u32) -> Vec<(i64, u32, i64)> {
    let vl = lanes as i64;
    let mut out = Vec::new();
    if n >= vl {
        out.push((0, lanes, n / vl));
    }
    let rem = n % vl;
    if rem > 0 {
        out.push((n - rem, rem as u32, 1));
    }
    out
}

fn broadcast_to(a: &Tile, shape: &[i64]) -> Tile {
    if a.shape == shape {
        return a.clone();
    }
    if a.rank0 || a.shape.len() != shape.len() {
        // A one-element tile (a scalar condition) against any shape.
        let mut t = a.clone();
        t.rank0 = false;
        t.shape = vec![1; shape.len()];
        return Tile::new(shape, a.dtype, Node::Broadcast { a: t });
    }
    Tile::new(shape, a.dtype, Node::Broadcast { a: a.clone() })
}

fn smem_mem(s: &SmemV) -> Mem {
    Mem { ptr: s.ptr.clone(), strides: contiguous(&s.dims), st: s.st, roots: vec![s.root], whole: None }
}

fn binary_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "add" => "add",
        "sub" => "sub",
        "mul" => "mul",
        "div" => "div",
        "floordiv" => "floordiv",
        "rem" => "rem",
        "pow" => "pow",
        "max" => "max",
        "min" => "min",
        "and" => "and",
        "or" => "or",
        "xor" => "xor",
        "shl" => "shl",
        "shr" => "shr",
        _ => return None,
    })
}

fn unary_name(name: &str) -> Option<&'static str> {
    Some(match name {
        "exp" => "exp",
        "log" => "log",
        "sqrt" => "sqrt",
        "rsqrt" => "rsqrt",
        "tanh" => "tanh",
        "sigmoid" => "sigmoid",
        "relu" => "relu",
        "gelu" => "gelu",
        "silu" => "silu",
        "abs" => "abs",
        "floor" => "floor",
        "ceil" => "ceil",
        "round" => "round",
        "neg" => "neg",
        "not" => "not",
        _ => return None,
    })
}

/// ` at `kernel`+12` for error messages.
fn describe_loc(loc: &Loc) -> String {
    match &loc.origin {
        crate::ir::Origin::Function(name) => format!(" at `{name}`+{}", loc.range.start),
        crate::ir::Origin::Stdlib { function, .. } => {
            format!(" at `{function}`+{} (stdlib)", loc.range.start)
        }
        crate::ir::Origin::None => String::new(),
    }
}

/// MurmurHash3's 32-bit finalizer on i32 lanes.
fn mix32(b: &mut FnBuilder, ty: VTy, h: &str) -> String {
    let t = ty.ir();
    let s = b.val("h", format!("lshr {t} {h}, {}", lit(ty, 16.0)));
    let h = b.val("h", format!("xor {t} {h}, {s}"));
    let h = b.val("h", format!("mul {t} {h}, {}", lit(ty, f64::from(0x85eb_ca6bu32))));
    let s = b.val("h", format!("lshr {t} {h}, {}", lit(ty, 13.0)));
    let h = b.val("h", format!("xor {t} {h}, {s}"));
    let h = b.val("h", format!("mul {t} {h}, {}", lit(ty, f64::from(0xc2b2_ae35u32))));
    let s = b.val("h", format!("lshr {t} {h}, {}", lit(ty, 16.0)));
    b.val("h", format!("xor {t} {h}, {s}"))
}
