//! Tile IR → the body of the program function: scalars become SSA values, tiles become
//! `Mem` or lazy `Node`s (see `tiles`), structured control flow becomes loops and
//! branches.

use std::rc::Rc;

use tessera_frontend::check::DType;

use super::builder::{iota, lit, Elem, FnBuilder, VTy};
use super::numerics::{self, ErrSink, Storage};
use super::plan::{Plan, Root};
use super::tiles::{contiguous, Mem, Node, SmemV, Stride, TensorV, Tile, ViewV};
use crate::ir::{policy, Attr, Func, Loc, OpId, OpKind, Region, Type, ValueId};
use crate::LowerError;

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
                self.store_view(&view, &value, mask.as_ref())?;
            }
            OpKind::Gather => {
                let r = op.results[0];
                let tensor = self.tensor_param(op.operands[0])?;
                if tensor.dims.len() != 1 {
                    return Err(self.err("tile.gather reads a 1-D tensor"));
                }
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
                if tensor.dims.len() != 1 {
                    return Err(self.err("tile.scatter writes a 1-D tensor"));
                }
                let idx = self.tile(op.operands[1])?;
                let values = self.tile(op.operands[2])?;
                let mask = match op.operands.get(3) {
                    Some(&m) => Some(self.tile(m)?),
                    None => None,
                };
                self.scatter(&tensor, &idx, &values, mask.as_ref())?;
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
                    Elem::F32 | Elem::F64 => matches!(*op, "and" | "or"),
                    Elem::I1 => !matches!(*op, "and" | "or" | "min" | "max" | "mul"),
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

    fn broadcast(&mut self, a: &Tile, shape: &[i64]) -> R<Tile> {
        if a.shape == shape {
            return Ok(a.clone());
        }
        if let Some(m) = a.mem() {
            let strides = a
                .shape
                .iter()
                .zip(&m.strides)
                .zip(shape)
                .map(|((&from, s), &to)| if from == 1 && to != 1 { Stride::C(0) } else { s.clone() })
                .collect();
            return Ok(Tile::new(shape, a.dtype, Node::Mem(Mem { strides, whole: None, ..m.clone() })));
        }
        // A costly operand would be recomputed for every copy: compute it once.
        let a = if a.is_costly() {
            let pos = self.cur.map_or(0, |c| self.plan.pos[c.0 as usize]);
            let m = self.materialize_at(a, pos, pos)?;
            a.with_node(Node::Mem(m))
        } else {
            a.clone()
        };
        Ok(broadcast_to(&a, shape))
    }

    fn transpose(&mut self, a: &Tile) -> R<Tile> {
        let r = a.shape.len();
        if r < 2 || a.rank0 {
            return Err(self.err("tile.transpose needs a tile of rank 2 or more"));
        }
        let m = match a.mem() {
            Some(m) => m.clone(),
            None => self.materialize(a)?,
        };
        let mut shape = a.shape.clone();
        shape.swap(r - 2, r - 1);
        let mut strides = m.strides.clone();
        strides.swap(r - 2, r - 1);
        Ok(Tile::new(&shape, a.dtype, Node::Mem(Mem { strides, whole: None, ..m })))
    }

    /// The same elements in another shape (row-major order), through a copy.
    fn reshape_copy(&mut self, a: &Tile, shape: &[i64]) -> R<Tile> {
        let m = match a.mem() {
            Some(m) if m.strides == contiguous(&a.shape) => m.clone(),
            _ => self.materialize_fresh(a)?,
        };
        Ok(Tile::new(shape, a.dtype, Node::Mem(Mem { strides: contiguous(shape), whole: None, ..m })))
    }

    // ----- views and memory --------------------------------------------------------------

    fn view(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        let tensor = self.tensor_param(op.operands[0])?;
        let rank = tensor.dims.len();
        let offsets: Vec<String> = op.operands[1..].iter().map(|&v| self.scalar(v)).collect::<R<_>>()?;
        if offsets.len() != rank {
            return Err(self.err(format!("tile.view of a rank-{rank} tensor with {} offsets", offsets.len())));
        }
        let sizes: Vec<i64> = match op.attr("sizes") {
            Some(Attr::Dims(d)) => d.iter().map(|d| d.as_const()).collect::<Option<_>>(),
            Some(Attr::Ints(v)) => Some(v.clone()),
            _ => None,
        }
        .filter(|s: &Vec<i64>| s.len() == rank && s.iter().all(|&x| x >= 0))
        .ok_or_else(|| self.err(format!("tile.view needs {rank} constant `sizes`")))?;
        let squeeze: Vec<usize> = match op.attr("squeeze") {
            Some(Attr::Ints(v)) => v.iter().map(|&x| x as usize).collect(),
            _ => Vec::new(),
        };
        if let Some(&d) = squeeze.iter().find(|&&d| d >= rank || sizes[d] != 1) {
            return Err(self.err(format!("tile.view squeezes dim {d}, which is not a size-1 dim")));
        }
        let kept: Vec<usize> = (0..rank).filter(|d| !squeeze.contains(d)).collect();
        // The window is inside the tensor when 0 <= off and off + size <= dim per dim.
        let mut inb = "true".to_string();
        for d in 0..rank {
            let lo_ok = self.b.sle("0", &offsets[d]);
            let end = self.b.add(&offsets[d], &sizes[d].to_string());
            let hi_ok = self.b.sle(&end, &tensor.dims[d]);
            let ok = self.b.and1(&lo_ok, &hi_ok);
            inb = self.b.and1(&inb, &ok);
        }
        let v = ViewV { tensor, offsets, sizes, kept, inb };
        self.set(op.results[0], Val::View(Rc::new(v)));
        Ok(())
    }

    fn load_shared(&mut self, id: OpId) -> R<()> {
        let op = self.f.op(id);
        let r = op.results[0];
        let src = self.smem(op.operands[0])?;
        let shape = self.tile_shape(r)?;
        let dtype = self.f.ty(r).dtype().unwrap_or(DType::F32);
        let transpose = matches!(op.attr("transpose"), Some(Attr::Bool(true)));
        let stored: Vec<i64> = if transpose && src.dims.len() >= 2 {
            let mut s = src.dims.clone();
            let n = s.len();
            s.swap(n - 2, n - 1);
            s
        } else {
            src.dims.clone()
        };
        let mut m = smem_mem(&src);
        if transpose {
            let n = m.strides.len();
            if n < 2 {
                return Err(self.err("tile.load_shared transpose of a 1-D buffer"));
            }
            m.strides.swap(n - 2, n - 1);
        }
        let m = if stored != shape {
            if stored.iter().product::<i64>() != shape.iter().product::<i64>() || transpose {
                return Err(self.err(format!("tile.load_shared of {} as {}", self.f.ty(op.operands[0]), self.f.ty(r))));
            }
            Mem { strides: contiguous(&shape), ..m }
        } else {
            m
        };
        let t = Tile::new(&shape, dtype, Node::Mem(m));
        // Reading in place is right only while no copy or store overwrites the buffer.
        let pos = self.plan.pos[id.0 as usize];
        let last = self.plan.last_use[r.0 as usize];
        if self.plan.written_between(src.root, pos, last) {
            let m = self.materialize_fresh(&t)?;
            self.set(r, Val::Tile(t.with_node(Node::Mem(m))));
        } else {
            self.set(r, Val::Tile(t));
        }
        Ok(())
    }

    /// A fresh private buffer for a tile of `shape`.
    pub(super) fn alloc_tile(&mut self, shape: &[i64], dtype: DType) -> Mem {
        let st = Storage::private(dtype);
        let n: i64 = shape.iter().product::<i64>().max(1);
        let ptr = self.b.alloca("buf", st.elem(), n as u64);
        let root = Root::Buf(self.next_buf);
        self.next_buf += 1;
        Mem { ptr, strides: contiguous(shape), st, roots: vec![root], whole: Some(root) }
    }

    /// The tile in memory: itself if it is, else computed into a fresh buffer.
    pub(super) fn materialize(&mut self, t: &Tile) -> R<Mem> {
        match t.mem() {
            Some(m) => Ok(m.clone()),
            None => self.materialize_fresh(t),
        }
    }

    /// Materializes a tile defined at `pos` and read until `last`. A plain load of a
    /// read-only region is read in place when the window is inside the tensor.
    pub(super) fn materialize_at(&mut self, t: &Tile, pos: u32, last: u32) -> R<Mem> {
        if let Node::Load { view, mask: None, .. } = &*t.node {
            let root = Root::Tensor(view.tensor.param);
            let same_type = Storage::of_tensor(t.dtype) == view.tensor.st && t.dtype == view.tensor.dtype;
            if same_type && !self.plan.written_between(root, pos, last) {
                return self.alias_load(t, view);
            }
        }
        self.materialize(t)
    }

    /// A load read in place when its window is inside the tensor, else copied (with the
    /// fill value outside) into a buffer of the tensor's storage.
    fn alias_load(&mut self, t: &Tile, view: &Rc<ViewV>) -> R<Mem> {
        let tensor = view.tensor.clone();
        let st = tensor.st;
        let shape = t.shape.clone();
        let inb = view.inb.clone();
        if inb == "true" {
            let (ptr, strides) = self.view_window(view, &shape);
            return Ok(Mem { ptr, strides, st, roots: vec![Root::Tensor(tensor.param)], whole: None });
        }
        let n: i64 = t.numel().max(1);
        let buf = self.b.alloca("ld", st.elem(), n as u64);
        let broot = Root::Buf(self.next_buf);
        self.next_buf += 1;
        let cont = contiguous(&shape);
        let fast_l = self.b.label("inplace");
        let slow_l = self.b.label("copy");
        let join = self.b.label("loaded");
        self.b.cond_br(&inb, &fast_l, &slow_l);
        self.b.start(&fast_l);
        let (fptr, fstrides) = self.view_window(view, &shape);
        let fast_end = self.b.cur_label();
        self.b.br(&join);
        self.b.start(&slow_l);
        let bm = Mem { ptr: buf.clone(), strides: cont.clone(), st, roots: vec![broot], whole: None };
        self.fill(t, &bm, Some(false))?;
        let slow_end = self.b.cur_label();
        self.b.br(&join);
        self.b.start(&join);
        let ety = format!("{}*", st.elem().ir());
        let ptr = self.b.val("win", format!("phi {ety} [ {fptr}, {fast_end} ], [ {buf}, {slow_end} ]"));
        let mut strides = Vec::new();
        for (fs, cs) in fstrides.iter().zip(&cont) {
            if fs == cs {
                strides.push(fs.clone());
            } else {
                let v = self.b.val("st", format!("phi i64 [ {}, {fast_end} ], [ {}, {slow_end} ]", fs.val(), cs.val()));
                strides.push(Stride::D(v));
            }
        }
        Ok(Mem { ptr, strides, st, roots: vec![Root::Tensor(tensor.param), broot], whole: None })
    }

    /// The address of a view's first element and the strides of its kept dims.
    fn view_window(&mut self, view: &ViewV, shape: &[i64]) -> (String, Vec<Stride>) {
        let t = &view.tensor;
        let mut off = "0".to_string();
        for (d, o) in view.offsets.iter().enumerate() {
            let term = self.b.mul(o, &t.strides[d]);
            off = self.b.add(&off, &term);
        }
        let ptr = self.b.gep(t.st.elem(), &t.ptr, &off);
        let mut strides: Vec<Stride> = view
            .kept
            .iter()
            .map(|&d| match t.strides[d].parse::<i64>() {
                Ok(c) => Stride::C(c),
                Err(_) => Stride::D(t.strides[d].clone()),
            })
            .collect();
        if strides.is_empty() {
            strides = vec![Stride::C(1); shape.len()];
        }
        (ptr, strides)
    }

    pub(super) fn materialize_fresh(&mut self, t: &Tile) -> R<Mem> {
        let m = self.alloc_tile(&t.shape, t.dtype);
        self.materialize_into(t, &m)?;
        Ok(m)
    }

    /// Computes every element of `t` into `dst` (of the same shape).
    pub(super) fn materialize_into(&mut self, t: &Tile, dst: &Mem) -> R<()> {
        self.fill(t, dst, None)
    }

    /// `fill` with the fast/slow versions chosen at run time, or one of them forced.
    fn fill(&mut self, t: &Tile, dst: &Mem, force: Option<bool>) -> R<()> {
        let inbs = match force {
            Some(_) => Vec::new(),
            None => t.inbounds_flags(),
        };
        let forced = force.unwrap_or(true);
        let t = t.clone();
        let dst = dst.clone();
        self.fused(&t.shape.clone(), &inbs, &mut |l, idx, w, fast| {
            let fast = fast && forced;
            let v = l.eval(&t, idx, w, fast)?;
            l.store_mem(&dst, t.dtype, idx, w, &v);
            Ok(())
        })
    }

    /// Stores registers `v` (`w` lanes of `dtype`) at `idx` of a tile in memory.
    pub(super) fn store_mem(&mut self, m: &Mem, dtype: DType, idx: &[String], w: u32, v: &str) {
        let rt = VTy::new(numerics::reg(dtype), w);
        let s = numerics::to_storage(&mut self.b, m.st, rt, v);
        let se = m.st.elem();
        let st = VTy::new(se, w);
        let n = idx.len();
        let off = self.outer_offset(idx, &m.strides);
        match &m.strides[n - 1] {
            Stride::C(1) => {
                let off = self.b.add(&off, &idx[n - 1]);
                let p = self.b.gep(se, &m.ptr, &off);
                let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", se.ir(), st.ir()));
                self.b.emit(format!("store {} {s}, {}* {vp}, align {}", st.ir(), st.ir(), se.bytes()));
            }
            last => {
                let ptrs = self.lane_ptrs(se, &m.ptr, &off, &idx[n - 1], &last.val(), w);
                let mask = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_scatter(st, &s, &ptrs, &mask);
            }
        }
    }

    /// `sum(idx[d] * strides[d])` over all dims but the last (the chunk's own).
    fn outer_offset(&mut self, idx: &[String], strides: &[Stride]) -> String {
        let mut off = "0".to_string();
        for (i, s) in idx.iter().zip(strides).take(idx.len().saturating_sub(1)) {
            let term = self.b.mul(i, &s.val());
            off = self.b.add(&off, &term);
        }
        off
    }

    /// The element offset of tensor coordinates.
    fn tensor_offset(&mut self, tensor: &TensorV, coords: &[String]) -> String {
        let mut off = "0".to_string();
        for (c, s) in coords.iter().zip(&tensor.strides) {
            let term = self.b.mul(c, s);
            off = self.b.add(&off, &term);
        }
        off
    }

    /// Whether every coordinate but the lane dim's is inside the tensor.
    fn outer_inside(&mut self, tensor: &TensorV, coords: &[String], lane_dim: Option<usize>) -> String {
        let mut ok = "true".to_string();
        for (d, (c, dim)) in coords.iter().zip(&tensor.dims).enumerate() {
            if Some(d) != lane_dim {
                let inside = self.b.val("in", format!("icmp ult i64 {c}, {dim}"));
                ok = self.b.and1(&ok, &inside);
            }
        }
        ok
    }

    /// Pointers `base + off + (j + lane) * stride` for `w` lanes.
    fn lane_ptrs(&mut self, e: Elem, base: &str, off: &str, j: &str, stride: &str, w: u32) -> String {
        let i64v = VTy::new(Elem::I64, w);
        let js = self.b.splat(i64v, j);
        let lanes = self.b.val("lane", format!("add {} {js}, {}", i64v.ir(), iota(Elem::I64, w)));
        let ss = self.b.splat(i64v, stride);
        let scaled = self.b.val("lo", format!("mul {} {lanes}, {ss}", i64v.ir()));
        let os = self.b.splat(i64v, off);
        let offs = self.b.val("lo", format!("add {} {scaled}, {os}", i64v.ir()));
        self.b.val("ptrs", format!("getelementptr {t}, {t}* {base}, {} {offs}", i64v.ir(), t = e.ir()))
    }

    fn masked_scatter(&mut self, st: VTy, v: &str, ptrs: &str, mask: &str) {
        let pt = format!("<{} x {}*>", st.w, st.elem.ir());
        let name = format!("llvm.masked.scatter.{}.v{}p0{}", st.mangle(), st.w, st.elem.mangle());
        self.b.call(
            "",
            &name,
            "void",
            &[
                (st.ir(), v.to_string()),
                (pt, ptrs.to_string()),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
            ],
        );
    }

    fn masked_gather(&mut self, st: VTy, ptrs: &str, mask: &str) -> String {
        let pt = format!("<{} x {}*>", st.w, st.elem.ir());
        let name = format!("llvm.masked.gather.{}.v{}p0{}", st.mangle(), st.w, st.elem.mangle());
        self.b.call(
            "g",
            &name,
            &st.ir(),
            &[
                (pt, ptrs.to_string()),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
                (st.ir(), "undef".into()),
            ],
        )
    }

    fn masked_load(&mut self, st: VTy, p: &str, mask: &str) -> String {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        let name = format!("llvm.masked.load.{}.{}", st.mangle(), st.mangle_ptr());
        self.b.call(
            "ml",
            &name,
            &st.ir(),
            &[
                (format!("{}*", st.ir()), vp),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
                (st.ir(), "undef".into()),
            ],
        )
    }

    fn masked_store(&mut self, st: VTy, v: &str, p: &str, mask: &str) {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        let name = format!("llvm.masked.store.{}.{}", st.mangle(), st.mangle_ptr());
        self.b.call(
            "",
            &name,
            "void",
            &[
                (st.ir(), v.to_string()),
                (format!("{}*", st.ir()), vp),
                ("i32".into(), st.elem.bytes().to_string()),
                (st.with(Elem::I1).ir(), mask.to_string()),
            ],
        );
    }

    fn plain_load(&mut self, st: VTy, p: &str) -> String {
        let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", st.elem.ir(), st.ir()));
        self.b.val("ld", format!("load {}, {}* {vp}, align {}", st.ir(), st.ir(), st.elem.bytes()))
    }

    // ----- fused loops -----------------------------------------------------------------

    /// Runs `body(idx, w, fast)` over every vector chunk of `shape`: one loop per dim,
    /// the last dim in chunks of `VL` lanes (and one narrower chunk for the rest). With
    /// load bounds flags, a fast version (every window inside its tensor: plain vector
    /// loads) and a masked version are emitted and chosen at run time, once per tile.
    pub(super) fn fused(&mut self, shape: &[i64], inbs: &[String], body: &mut ChunkBody<'_, 'f>) -> R<()> {
        self.fused_lanes(shape, inbs, VL, body)
    }

    /// `fused` with chunks of at most `lanes` lanes (1: element by element).
    pub(super) fn fused_lanes(
        &mut self,
        shape: &[i64],
        inbs: &[String],
        lanes: u32,
        body: &mut ChunkBody<'_, 'f>,
    ) -> R<()> {
        let mut all = "true".to_string();
        for f in inbs {
            all = self.b.and1(&all, f);
        }
        if all == "true" {
            return self.nest(shape, &mut Vec::new(), true, lanes, body);
        }
        let fast = self.b.label("fast");
        let slow = self.b.label("masked");
        let join = self.b.label("done");
        self.b.cond_br(&all, &fast, &slow);
        self.b.start(&fast);
        self.nest(shape, &mut Vec::new(), true, lanes, body)?;
        self.b.br(&join);
        self.b.start(&slow);
        self.nest(shape, &mut Vec::new(), false, lanes, body)?;
        self.b.br(&join);
        self.b.start(&join);
        Ok(())
    }

    fn nest(
        &mut self,
        shape: &[i64],
        idx: &mut Vec<String>,
        fast: bool,
        lanes: u32,
        body: &mut ChunkBody<'_, 'f>,
    ) -> R<()> {
        let d = idx.len();
        if d + 1 == shape.len() {
            let n = shape[d];
            for (j, w, count) in chunks(n, lanes) {
                if count == 1 {
                    idx.push(j.to_string());
                    body(self, idx, w, fast)?;
                    idx.pop();
                } else {
                    let end = (j + count * w as i64).to_string();
                    let Some(l) = self.b.begin_loop("j", &j.to_string(), &end, &w.to_string(), &[]) else { continue };
                    idx.push(l.iv.clone());
                    body(self, idx, w, fast)?;
                    idx.pop();
                    self.b.end_loop(l, &[]);
                }
            }
            return Ok(());
        }
        if shape[d] == 1 {
            idx.push("0".into());
            self.nest(shape, idx, fast, lanes, body)?;
            idx.pop();
            return Ok(());
        }
        let Some(l) = self.b.begin_loop("i", "0", &shape[d].to_string(), "1", &[]) else { return Ok(()) };
        idx.push(l.iv.clone());
        self.nest(shape, idx, fast, lanes, body)?;
        idx.pop();
        self.b.end_loop(l, &[]);
        Ok(())
    }

    // ----- evaluation ------------------------------------------------------------------

    /// The `w` elements of `t` at `idx` (the last index is the chunk's first column) as a
    /// `<w x reg>` vector. `fast`: every load window is known to be inside its tensor.
    pub(super) fn eval(&mut self, t: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        // A lazy tile's instructions belong to the op that defined it, wherever they land.
        let own = t.loc.is_some() && t.mem().is_none();
        let saved = if own { std::mem::replace(&mut self.b.loc, t.loc.clone()) } else { None };
        let r = self.eval_node(t, idx, w, fast);
        if own {
            self.b.loc = saved;
        }
        r
    }

    fn eval_node(&mut self, t: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        let e = numerics::reg(t.dtype);
        let ty = VTy::new(e, w);
        Ok(match &*t.node {
            Node::Mem(m) => self.load_mem(m, idx, w),
            Node::Const(x) => {
                let l = lit(VTy::scalar(e), *x);
                let s = numerics::finish(&mut self.b, Some(t.dtype), VTy::scalar(e), &l);
                self.b.splat(ty, &s)
            }
            Node::Splat(s) => self.b.splat(ty, s),
            Node::Arange => {
                let i64v = VTy::new(Elem::I64, w);
                let js = self.b.splat(i64v, &idx[idx.len() - 1]);
                let lanes = self.b.val("ar", format!("add {} {js}, {}", i64v.ir(), iota(Elem::I64, w)));
                numerics::cast(&mut self.b, None, Some(t.dtype), w, &lanes)
            }
            Node::Load { view, mask, other } => {
                let view = view.clone();
                self.eval_load(t, &view, mask.as_ref(), *other, idx, w, fast)?
            }
            Node::Gather { tensor, idx: ix, mask } => {
                let tensor = tensor.clone();
                self.eval_gather(t, &tensor, ix, mask.as_ref(), idx, w, fast)?
            }
            Node::Unary { op, a } => {
                let x = self.eval(a, idx, w, fast)?;
                numerics::unary(&mut self.b, op, Some(t.dtype), w, &x).map_err(|m| self.err(m))?
            }
            Node::Binary { op, a, b, code } => {
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                let slot = self.err_slot.clone();
                let sink = ErrSink { slot: &slot, code: *code };
                numerics::binary(&mut self.b, op, Some(t.dtype), w, &x, &y, &sink).map_err(|m| self.err(m))?
            }
            Node::Cmp { pred, a, b } => {
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                numerics::compare(&mut self.b, pred, Some(a.dtype), w, &x, &y).map_err(|m| self.err(m))?
            }
            Node::Select { c, a, b } => {
                let cv = self.eval(c, idx, w, fast)?;
                let x = self.eval(a, idx, w, fast)?;
                let y = self.eval(b, idx, w, fast)?;
                numerics::select_vals(&mut self.b, ty, &cv, &x, &y)
            }
            Node::Cast { a, saturate, u } => {
                let x = self.eval(a, idx, w, fast)?;
                let stochastic = match u {
                    Some(u) => {
                        let uv = self.eval(u, idx, w, fast)?;
                        super::policy::stochastic(&mut self.b, a.dtype, t.dtype, w, &x, &uv, *saturate)
                    }
                    None => None,
                };
                match stochastic {
                    Some(v) => v,
                    None => numerics::cast_with(&mut self.b, Some(a.dtype), Some(t.dtype), w, &x, *saturate),
                }
            }
            Node::Broadcast { a } => {
                let n = t.shape.len();
                let sub: Vec<String> = (0..n)
                    .map(|d| if a.shape[d] == 1 && t.shape[d] != 1 { "0".to_string() } else { idx[d].clone() })
                    .collect();
                if a.shape[n - 1] == 1 && t.shape[n - 1] != 1 {
                    let one = self.eval(a, &sub, 1, fast)?;
                    let s = self.b.val("x", format!("extractelement {} {one}, i32 0", VTy::new(e, 1).ir()));
                    self.b.splat(ty, &s)
                } else {
                    self.eval(a, &sub, w, fast)?
                }
            }
            Node::Expand { a, axis } => {
                let mut sub: Vec<String> = idx.to_vec();
                sub.remove(*axis);
                if a.rank0 || sub.is_empty() {
                    sub = vec!["0".to_string()];
                }
                self.eval(a, &sub, w, fast)?
            }
            Node::Rand { seed, offsets } => {
                let v = self.rand(t, seed, offsets, idx, w);
                numerics::cast(&mut self.b, Some(DType::F32), Some(t.dtype), w, &v)
            }
            Node::Causal { s, q, k } => {
                let v = self.eval(s, idx, w, fast)?;
                let i64v = VTy::new(Elem::I64, w);
                let row = self.b.add(q, &idx[0]);
                let col0 = self.b.add(k, &idx[1]);
                let cs = self.b.splat(i64v, &col0);
                let cols = self.b.val("col", format!("add {} {cs}, {}", i64v.ir(), iota(Elem::I64, w)));
                let rs = self.b.splat(i64v, &row);
                let masked = self.b.val("fut", format!("icmp sgt {} {cols}, {rs}", i64v.ir()));
                let ninf = lit(ty, f64::NEG_INFINITY);
                numerics::select_vals(&mut self.b, ty, &masked, &ninf, &v)
            }
        })
    }

    /// `tile.rand` at `idx`: `h = mix32(seed ^ 0x9E3779B9)`, `h = mix32(h ^ c)` per
    /// coordinate (32-bit), `(h >> 8) * 2^-24` (docs/ir.md; `crate::ir::rand`).
    fn rand(&mut self, t: &Tile, seed: &str, offsets: &[String], idx: &[String], w: u32) -> String {
        let rank = if t.rank0 { 0 } else { t.shape.len() };
        let lead = offsets.len() - rank;
        let s32 = VTy::scalar(Elem::I32);
        let v32 = VTy::new(Elem::I32, w);
        let trunc = |b: &mut FnBuilder, v: &str| -> String {
            match v.parse::<i64>() {
                Ok(c) => (c as i32).to_string(),
                Err(_) => b.val("c", format!("trunc i64 {v} to i32")),
            }
        };
        let seed32 = trunc(&mut self.b, seed);
        let x = self.b.val("h", format!("xor i32 {seed32}, {}", 0x9E37_79B9u32 as i32));
        let mut h = mix32(&mut self.b, s32, &x);
        // Coordinates: fixed leading offsets, then the tile's (the last one per lane).
        let mut coords: Vec<String> = offsets[..lead].to_vec();
        for d in 0..rank.saturating_sub(1) {
            coords.push(self.b.add(&offsets[lead + d], &idx[d]));
        }
        for c in coords {
            let c32 = trunc(&mut self.b, &c);
            let x = self.b.val("h", format!("xor i32 {h}, {c32}"));
            h = mix32(&mut self.b, s32, &x);
        }
        let hv = self.b.splat(v32, &h);
        let hv = if rank > 0 {
            let first = self.b.add(&offsets[lead + rank - 1], &idx[rank - 1]);
            let f32v = trunc(&mut self.b, &first);
            let fs = self.b.splat(v32, &f32v);
            let lanes = self.b.val("lane", format!("add {} {fs}, {}", v32.ir(), iota(Elem::I32, w)));
            let x = self.b.val("h", format!("xor {} {hv}, {lanes}", v32.ir()));
            mix32(&mut self.b, v32, &x)
        } else {
            hv
        };
        let top = self.b.val("h", format!("lshr {} {hv}, {}", v32.ir(), lit(v32, 8.0)));
        let fv = VTy::new(Elem::F32, w);
        let u = self.b.val("u", format!("uitofp {} {top} to {}", v32.ir(), fv.ir()));
        self.b.val("rand", format!("fmul {} {u}, {}", fv.ir(), lit(fv, 2f64.powi(-24))))
    }

    /// Loads `w` elements of a tile in memory at `idx`.
    fn load_mem(&mut self, m: &Mem, idx: &[String], w: u32) -> String {
        let se = m.st.elem();
        let st = VTy::new(se, w);
        let n = idx.len();
        let off = self.outer_offset(idx, &m.strides);
        let raw = match &m.strides[n - 1] {
            Stride::C(1) => {
                let off = self.b.add(&off, &idx[n - 1]);
                let p = self.b.gep(se, &m.ptr, &off);
                self.plain_load(st, &p)
            }
            Stride::C(0) => {
                let p = self.b.gep(se, &m.ptr, &off);
                let s = self.b.val("ld", format!("load {}, {}* {p}, align {}", se.ir(), se.ir(), se.bytes()));
                self.b.splat(st, &s)
            }
            last => {
                let ptrs = self.lane_ptrs(se, &m.ptr, &off, &idx[n - 1], &last.val(), w);
                let mask = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_gather(st, &ptrs, &mask)
            }
        };
        numerics::from_storage(&mut self.b, m.st, st, &raw)
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_load(
        &mut self,
        t: &Tile,
        view: &ViewV,
        mask: Option<&Tile>,
        other: f64,
        idx: &[String],
        w: u32,
        fast: bool,
    ) -> R<String> {
        let tensor = view.tensor.clone();
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(t.dtype), w);
        // Tensor coordinates: view dims take the index, squeezed dims their offset.
        let mut coords = view.offsets.clone();
        let last_t = view.kept.last().copied();
        if !t.rank0 {
            for (vd, &td) in view.kept.iter().enumerate() {
                coords[td] = self.b.add(&view.offsets[td], &idx[vd]);
            }
        }
        let off = self.tensor_offset(&tensor, &coords);
        let lane_stride = last_t.map_or("1".to_string(), |d| tensor.strides[d].clone());
        let contiguous_lanes = lane_stride == "1" || w == 1;
        let other_reg = {
            let l = lit(VTy::scalar(numerics::reg(t.dtype)), other);
            let s = numerics::finish(&mut self.b, Some(t.dtype), VTy::scalar(numerics::reg(t.dtype)), &l);
            self.b.splat(rt, &s)
        };
        let user_mask = match mask {
            Some(m) => Some(self.eval(m, idx, w, fast)?),
            None => None,
        };
        let converted = |l: &mut Self, raw: &str| -> String {
            let v = numerics::from_storage(&mut l.b, tensor.st, st, raw);
            numerics::cast(&mut l.b, Some(tensor.dtype), Some(t.dtype), w, &v)
        };
        if fast {
            let raw = if contiguous_lanes {
                let p = self.b.gep(se, &tensor.ptr, &off);
                self.plain_load(st, &p)
            } else {
                let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
                let all = lit(VTy::new(Elem::I1, w), 1.0);
                self.masked_gather(st, &ptrs, &all)
            };
            let v = converted(self, &raw);
            return Ok(match user_mask {
                Some(m) => numerics::select_vals(&mut self.b, rt, &m, &v, &other_reg),
                None => v,
            });
        }
        // Masked: lanes inside the tensor (and the user's mask).
        let outer = self.outer_inside(&tensor, &coords, last_t);
        let i64v = VTy::new(Elem::I64, w);
        let b1 = VTy::new(Elem::I1, w);
        let mut lane_ok = match last_t {
            Some(d) => {
                let cs = self.b.splat(i64v, &coords[d]);
                let lanes = self.b.val("lc", format!("add {} {cs}, {}", i64v.ir(), iota(Elem::I64, w)));
                let ds = self.b.splat(i64v, &tensor.dims[d]);
                self.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()))
            }
            None => lit(b1, 1.0),
        };
        if outer != "true" {
            let os = self.b.splat(b1, &outer);
            lane_ok = self.b.val("in", format!("and {} {lane_ok}, {os}", b1.ir()));
        }
        if let Some(m) = &user_mask {
            lane_ok = self.b.val("in", format!("and {} {lane_ok}, {m}", b1.ir()));
        }
        let raw = if contiguous_lanes {
            let p = self.b.gep(se, &tensor.ptr, &off);
            self.masked_load(st, &p, &lane_ok)
        } else {
            let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
            self.masked_gather(st, &ptrs, &lane_ok)
        };
        let v = converted(self, &raw);
        Ok(numerics::select_vals(&mut self.b, rt, &lane_ok, &v, &other_reg))
    }

    /// `start` when `idx` is `splat(start) + arange` (consecutive elements).
    fn consecutive(&mut self, ix: &Tile, j: &str) -> Option<String> {
        let Node::Binary { op: "add", a, b, .. } = &*ix.node else { return None };
        let s = match (&*a.node, &*b.node) {
            (Node::Splat(s), Node::Arange) | (Node::Arange, Node::Splat(s)) => s.clone(),
            _ => return None,
        };
        if ix.dtype != DType::I32 && ix.dtype != DType::I64 || ix.shape.len() != 1 {
            return None;
        }
        let s64 = if ix.dtype == DType::I32 { self.b.val("base", format!("sext i32 {s} to i64")) } else { s };
        Some(self.b.add(&s64, j))
    }

    fn index_lanes(&mut self, ix: &Tile, idx: &[String], w: u32, fast: bool) -> R<String> {
        let v = self.eval(ix, idx, w, fast)?;
        let e = numerics::reg(ix.dtype);
        Ok(match e {
            Elem::I64 => v,
            Elem::I32 | Elem::I8 => {
                self.b.val("ix", format!("sext {} {v} to {}", VTy::new(e, w).ir(), VTy::new(Elem::I64, w).ir()))
            }
            _ => return Err(self.err(format!("gather and scatter indices must be integers, not {}", ix.dtype))),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_gather(
        &mut self,
        t: &Tile,
        tensor: &TensorV,
        ix: &Tile,
        mask: Option<&Tile>,
        idx: &[String],
        w: u32,
        fast: bool,
    ) -> R<String> {
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(t.dtype), w);
        let i64v = VTy::new(Elem::I64, w);
        let b1 = VTy::new(Elem::I1, w);
        let user = match mask {
            Some(m) => Some(self.eval(m, idx, w, fast)?),
            None => None,
        };
        let start = self.consecutive(ix, &idx[idx.len() - 1]);
        let lanes = match &start {
            Some(s) => {
                let ss = self.b.splat(i64v, s);
                self.b.val("gi", format!("add {} {ss}, {}", i64v.ir(), iota(Elem::I64, w)))
            }
            None => self.index_lanes(ix, idx, w, fast)?,
        };
        let ds = self.b.splat(i64v, &tensor.dims[0]);
        let mut ok = self.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()));
        if let Some(m) = &user {
            ok = self.b.val("in", format!("and {} {ok}, {m}", b1.ir()));
        }
        let raw = match &start {
            Some(s) => {
                let p = self.b.gep(se, &tensor.ptr, s);
                self.masked_load(st, &p, &ok)
            }
            None => {
                let ptrs = self
                    .b
                    .val("ptrs", format!("getelementptr {t}, {t}* {}, {} {lanes}", tensor.ptr, i64v.ir(), t = se.ir()));
                self.masked_gather(st, &ptrs, &ok)
            }
        };
        let v = numerics::from_storage(&mut self.b, tensor.st, st, &raw);
        let v = numerics::cast(&mut self.b, Some(tensor.dtype), Some(t.dtype), w, &v);
        Ok(numerics::select_vals(&mut self.b, rt, &ok, &v, &lit(rt, 0.0)))
    }

    // ----- stores ----------------------------------------------------------------------

    fn store_view(&mut self, view: &Rc<ViewV>, value: &Tile, mask: Option<&Tile>) -> R<()> {
        let shape: Vec<i64> =
            if view.kept.is_empty() { vec![1] } else { view.kept.iter().map(|&d| view.sizes[d]).collect() };
        if value.numel() != shape.iter().product::<i64>() {
            return Err(self.err(format!(
                "tile.store of {} elements into a window of {}",
                value.numel(),
                shape.iter().product::<i64>()
            )));
        }
        let value = if value.shape != shape { self.reshape_copy(value, &shape)? } else { value.clone() };
        let mut inbs = value.inbounds_flags();
        if let Some(m) = mask {
            inbs.extend(m.inbounds_flags());
        }
        inbs.push(view.inb.clone());
        let view = view.clone();
        let mask = mask.cloned();
        self.fused(&shape, &inbs, &mut |l, idx, w, fast| {
            let v = l.eval(&value, idx, w, fast)?;
            let user = match &mask {
                Some(m) => Some(l.eval(m, idx, w, fast)?),
                None => None,
            };
            l.store_window(&view, value.dtype, idx, w, fast, &v, user.as_deref())
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn store_window(
        &mut self,
        view: &ViewV,
        dtype: DType,
        idx: &[String],
        w: u32,
        fast: bool,
        v: &str,
        user: Option<&str>,
    ) -> R<()> {
        let tensor = view.tensor.clone();
        let se = tensor.st.elem();
        let st = VTy::new(se, w);
        let rt = VTy::new(numerics::reg(tensor.dtype), w);
        let v = numerics::cast(&mut self.b, Some(dtype), Some(tensor.dtype), w, v);
        let raw = numerics::to_storage(&mut self.b, tensor.st, rt, &v);
        let mut coords = view.offsets.clone();
        let last_t = view.kept.last().copied();
        if !view.kept.is_empty() {
            for (vd, &td) in view.kept.iter().enumerate() {
                coords[td] = self.b.add(&view.offsets[td], &idx[vd]);
            }
        }
        let off = self.tensor_offset(&tensor, &coords);
        let lane_stride = last_t.map_or("1".to_string(), |d| tensor.strides[d].clone());
        let contiguous_lanes = lane_stride == "1" || w == 1;
        let b1 = VTy::new(Elem::I1, w);
        let mut mask = user.map(str::to_string);
        if !fast {
            let outer = self.outer_inside(&tensor, &coords, last_t);
            let i64v = VTy::new(Elem::I64, w);
            let mut lane_ok = match last_t {
                Some(d) => {
                    let cs = self.b.splat(i64v, &coords[d]);
                    let lanes = self.b.val("lc", format!("add {} {cs}, {}", i64v.ir(), iota(Elem::I64, w)));
                    let ds = self.b.splat(i64v, &tensor.dims[d]);
                    self.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()))
                }
                None => lit(b1, 1.0),
            };
            if outer != "true" {
                let os = self.b.splat(b1, &outer);
                lane_ok = self.b.val("in", format!("and {} {lane_ok}, {os}", b1.ir()));
            }
            mask = Some(match mask {
                Some(m) => self.b.val("in", format!("and {} {lane_ok}, {m}", b1.ir())),
                None => lane_ok,
            });
        }
        match (contiguous_lanes, mask) {
            (true, None) => {
                let p = self.b.gep(se, &tensor.ptr, &off);
                let vp = self.b.val("vp", format!("bitcast {}* {p} to {}*", se.ir(), st.ir()));
                self.b.emit(format!("store {} {raw}, {}* {vp}, align {}", st.ir(), st.ir(), se.bytes()));
            }
            (true, Some(m)) => {
                let p = self.b.gep(se, &tensor.ptr, &off);
                self.masked_store(st, &raw, &p, &m);
            }
            (false, m) => {
                let ptrs = self.lane_ptrs(se, &tensor.ptr, &off, "0", &lane_stride, w);
                let m = m.unwrap_or_else(|| lit(b1, 1.0));
                self.masked_scatter(st, &raw, &ptrs, &m);
            }
        }
        Ok(())
    }

    fn scatter(&mut self, tensor: &Rc<TensorV>, ix: &Tile, values: &Tile, mask: Option<&Tile>) -> R<()> {
        if ix.shape != values.shape || ix.rank0 != values.rank0 {
            return Err(self.err("tile.scatter: the index and value tiles differ in shape"));
        }
        let shape = values.shape.clone();
        let mut inbs = values.inbounds_flags();
        inbs.extend(ix.inbounds_flags());
        if let Some(m) = mask {
            inbs.extend(m.inbounds_flags());
        }
        let tensor = tensor.clone();
        let (ix, values, mask) = (ix.clone(), values.clone(), mask.cloned());
        self.fused(&shape, &inbs, &mut |l, idx, w, fast| {
            let se = tensor.st.elem();
            let st = VTy::new(se, w);
            let i64v = VTy::new(Elem::I64, w);
            let b1 = VTy::new(Elem::I1, w);
            let v = l.eval(&values, idx, w, fast)?;
            let v = numerics::cast(&mut l.b, Some(values.dtype), Some(tensor.dtype), w, &v);
            let raw = numerics::to_storage(&mut l.b, tensor.st, VTy::new(numerics::reg(tensor.dtype), w), &v);
            let start = if ix.shape.len() == 1 { l.consecutive(&ix, &idx[idx.len() - 1]) } else { None };
            let lanes = match &start {
                Some(s) => {
                    let ss = l.b.splat(i64v, s);
                    l.b.val("si", format!("add {} {ss}, {}", i64v.ir(), iota(Elem::I64, w)))
                }
                None => l.index_lanes(&ix, idx, w, fast)?,
            };
            let ds = l.b.splat(i64v, &tensor.dims[0]);
            let mut ok = l.b.val("in", format!("icmp ult {} {lanes}, {ds}", i64v.ir()));
            if let Some(m) = &mask {
                let mv = l.eval(m, idx, w, fast)?;
                ok = l.b.val("in", format!("and {} {ok}, {mv}", b1.ir()));
            }
            match &start {
                Some(s) => {
                    let p = l.b.gep(se, &tensor.ptr, s);
                    l.masked_store(st, &raw, &p, &ok);
                }
                None => {
                    let ptrs = l.b.val(
                        "ptrs",
                        format!("getelementptr {t}, {t}* {}, {} {lanes}", tensor.ptr, i64v.ir(), t = se.ir()),
                    );
                    l.masked_scatter(st, &raw, &ptrs, &ok);
                }
            }
            Ok(())
        })
    }

    // ----- reductions ------------------------------------------------------------------

    fn reduce(
        &mut self,
        a: &Tile,
        kind: &str,
        axis: usize,
        out_shape: &[i64],
        out_dtype: DType,
        step: Option<DType>,
    ) -> R<Tile> {
        let rank = a.shape.len();
        if axis >= rank || a.rank0 {
            return Err(self.err(format!("tile.reduce axis {axis} of a rank-{} tile", if a.rank0 { 0 } else { rank })));
        }
        let e = numerics::reg(a.dtype);
        let (comb, identity): (&str, f64) = match (kind, e) {
            ("sum", Elem::I1) => return Err(self.err("tile.reduce sum of a bool tile")),
            ("sum", _) => ("add", 0.0),
            ("max", Elem::I1) => ("or", 0.0),
            ("min", Elem::I1) => ("and", 1.0),
            ("max", e) if e.is_float() => ("max", f64::NAN),
            ("min", e) if e.is_float() => ("min", f64::NAN),
            ("max", e) => ("max", int_min(e)),
            ("min", e) => ("min", int_max(e)),
            (k, _) => return Err(self.err(format!("tile.reduce kind `{k}` (sum, max or min)"))),
        };
        let out = Tile::new(out_shape, out_dtype, Node::Const(0.0));
        let dst = self.alloc_tile(&out.shape, out_dtype);
        let inbs = a.inbounds_flags();
        let a = a.clone();
        let dstc = dst.clone();
        let step = step.filter(|_| e == Elem::F32);
        let ctx = RedCtx { comb, identity, e, a_dtype: a.dtype, out_dtype, step };
        if axis == rank - 1 {
            // Along the last dim: one vector accumulator chain per output element.
            let outer: Vec<i64> = if rank == 1 { vec![1] } else { a.shape[..rank - 1].to_vec() };
            let n = a.shape[rank - 1];
            self.fused_lanes(&outer, &inbs, 1, &mut |l, oidx, _w, fast| {
                let idx: Vec<String> = if rank == 1 { Vec::new() } else { oidx.to_vec() };
                let s = match ctx.step {
                    Some(t) => l.reduce_row_stepped(&a, &idx, n, &ctx, t, fast)?,
                    None => l.reduce_row(&a, &idx, n, &ctx, fast)?,
                };
                let s = numerics::finish(&mut l.b, Some(ctx.out_dtype), VTy::scalar(ctx.e), &s);
                let sv = l.b.splat(VTy::new(ctx.e, 1), &s);
                let oi: Vec<String> = if rank == 1 { vec!["0".into()] } else { idx };
                l.store_mem(&dstc, ctx.out_dtype, &oi, 1, &sv);
                Ok(())
            })?;
        } else {
            // Across rows: vector accumulators over the kept last dim.
            let out_dims = out.shape.clone();
            let len = a.shape[axis];
            self.fused(&out_dims, &inbs, &mut |l, oidx, w, fast| {
                let vt = VTy::new(ctx.e, w);
                let init = lit(vt, ctx.identity);
                let lp = l.b.begin_loop("r", "0", &len.to_string(), "1", &[(vt.ir(), init.clone())]);
                let Some(lp) = lp else { return Ok(()) };
                let mut idx: Vec<String> = oidx.to_vec();
                if out.rank0 {
                    idx.clear();
                }
                idx.insert(axis, lp.iv.clone());
                let x = l.eval(&a, &idx, w, fast)?;
                let acc = lp.carried[0].clone();
                let next = l.combine(&ctx, vt, &acc, &x)?;
                let next = match ctx.step {
                    Some(t) => numerics::round_f32(&mut l.b, t, vt, &next),
                    None => next,
                };
                let r = l.b.end_loop(lp, &[next]);
                let v = numerics::finish(&mut l.b, Some(ctx.out_dtype), vt, &r[0]);
                l.store_mem(&dstc, ctx.out_dtype, oidx, w, &v);
                Ok(())
            })?;
        }
        Ok(out.with_node(Node::Mem(dst)))
    }

    /// The reduction of one row (`idx` without its last index) of `n` elements, as a
    /// scalar of the accumulation type.
    fn reduce_row(&mut self, a: &Tile, idx: &[String], n: i64, ctx: &RedCtx, fast: bool) -> R<String> {
        let vl = VL as i64;
        let full = n / vl;
        let rem = (n % vl) as u32;
        // Up to four independent accumulators hide the add latency.
        let accs = full.clamp(0, 4);
        let mut partial: Option<String> = None;
        if accs > 0 {
            let vt = VTy::new(ctx.e, VL);
            let step = accs * vl;
            let main = (full / accs) * step;
            let init = lit(vt, ctx.identity);
            let carried: Vec<(String, String)> = (0..accs).map(|_| (vt.ir(), init.clone())).collect();
            let mut vals: Vec<String> = carried.iter().map(|(_, v)| v.clone()).collect();
            if let Some(lp) = self.b.begin_loop("rj", "0", &main.to_string(), &step.to_string(), &carried) {
                let mut next = Vec::new();
                for k in 0..accs {
                    let j = self.b.add(&lp.iv, &(k * vl).to_string());
                    let mut i = idx.to_vec();
                    i.push(j);
                    let x = self.eval(a, &i, VL, fast)?;
                    let acc = lp.carried[k as usize].clone();
                    next.push(self.combine(ctx, vt, &acc, &x)?);
                }
                vals = self.b.end_loop(lp, &next);
            }
            // Leftover full vectors.
            let mut j = main;
            let mut k = 0usize;
            while j + vl <= full * vl {
                let mut i = idx.to_vec();
                i.push(j.to_string());
                let x = self.eval(a, &i, VL, fast)?;
                vals[k] = self.combine(ctx, vt, &vals[k], &x)?;
                k = (k + 1) % vals.len();
                j += vl;
            }
            let mut acc = vals[0].clone();
            for v in &vals[1..] {
                acc = self.combine(ctx, vt, &acc, v)?;
            }
            partial = Some(self.horizontal(ctx, vt, &acc));
        }
        if rem > 0 {
            let vt = VTy::new(ctx.e, rem);
            let mut i = idx.to_vec();
            i.push((full * vl).to_string());
            let x = self.eval(a, &i, rem, fast)?;
            let h = self.horizontal(ctx, vt, &x);
            partial = Some(match partial {
                Some(p) => self.combine(ctx, VTy::scalar(ctx.e), &p, &h)?,
                None => h,
            });
        }
        partial.ok_or_else(|| self.err("tile.reduce over an empty dim"))
    }

    /// A row sum in element order, rounded to `t` after every addition (`@accum(t)`).
    fn reduce_row_stepped(
        &mut self,
        a: &Tile,
        idx: &[String],
        n: i64,
        ctx: &RedCtx,
        t: DType,
        fast: bool,
    ) -> R<String> {
        let vt = VTy::new(ctx.e, 1);
        let zero = lit(vt, 0.0);
        let Some(lp) = self.b.begin_loop("rs", "0", &n.to_string(), "1", &[(vt.ir(), zero.clone())]) else {
            return Ok(lit(VTy::scalar(ctx.e), 0.0));
        };
        let mut i = idx.to_vec();
        i.push(lp.iv.clone());
        let x = self.eval(a, &i, 1, fast)?;
        let acc = lp.carried[0].clone();
        let s = self.combine(ctx, vt, &acc, &x)?;
        let s = numerics::round_f32(&mut self.b, t, vt, &s);
        let r = self.b.end_loop(lp, &[s]);
        Ok(self.b.val("rsum", format!("extractelement {} {}, i32 0", vt.ir(), r[0])))
    }

    fn combine(&mut self, ctx: &RedCtx, ty: VTy, a: &str, b: &str) -> R<String> {
        let sink = ErrSink { slot: &self.err_slot.clone(), code: 0 };
        // Sums accumulate in the register type (f32 for 16-bit floats) and are rounded
        // once at the end, so no per-step rounding: compute as f32/f64/wrapping ints.
        let dt = match ctx.e {
            Elem::F32 => Some(DType::F32),
            Elem::F64 => Some(DType::F64),
            _ => Some(ctx.a_dtype),
        };
        numerics::binary(&mut self.b, ctx.comb, dt, ty.w, a, b, &sink).map_err(|m| self.err(m))
    }

    fn horizontal(&mut self, ctx: &RedCtx, ty: VTy, v: &str) -> String {
        let e = ctx.e;
        let st = ty.ir();
        let ret = e.ir();
        match (ctx.comb, e.is_float()) {
            ("add", true) => {
                let name = format!("llvm.vector.reduce.fadd.{}", ty.mangle());
                self.b.declare(&name, format!("declare {ret} @{name}({ret}, {st})"));
                let z = super::builder::float_lit(e, -0.0);
                self.b.val("hsum", format!("call reassoc {ret} @{name}({ret} {z}, {st} {v})"))
            }
            (c, true) => {
                let which = if c == "max" { "fmax" } else { "fmin" };
                let name = format!("llvm.vector.reduce.{which}.{}", ty.mangle());
                self.b.call("h", &name, ret, &[(st.clone(), v.to_string())])
            }
            (c, false) => {
                let which = match c {
                    "add" => "add",
                    "max" => "smax",
                    "min" => "smin",
                    "and" => "and",
                    _ => "or",
                };
                let name = format!("llvm.vector.reduce.{which}.{}", ty.mangle());
                self.b.call("h", &name, ret, &[(st.clone(), v.to_string())])
            }
        }
    }

    // ----- control flow ----------------------------------------------------------------

    fn for_op(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        if op.operands.len() < 3 || op.regions.len() != 1 {
            return Err(self.err("scf.for takes lo, hi, step, inits and one region"));
        }
        let (lo, hi, step) = (self.scalar(op.operands[0])?, self.scalar(op.operands[1])?, self.scalar(op.operands[2])?);
        let region = &op.regions[0];
        let inits = &op.operands[3..];
        if region.args.len() != inits.len() + 1 || op.results.len() != inits.len() {
            return Err(self.err("scf.for: iteration values, region arguments and results disagree"));
        }
        // Scalars are loop phis; tiles live in a carried buffer each.
        let mut scalars: Vec<(usize, String, String)> = Vec::new();
        let mut carried: Vec<Option<Mem>> = Vec::new();
        for (i, &init) in inits.iter().enumerate() {
            match self.get(init)? {
                Val::Scalar(s) => {
                    let ty = VTy::scalar(numerics::reg_of(self.dtype_of(init))).ir();
                    scalars.push((i, ty, s));
                    carried.push(None);
                }
                Val::Tile(t) => {
                    let m = self.alloc_tile(&t.shape, t.dtype);
                    self.materialize_into(&t, &m)?;
                    carried.push(Some(m));
                }
                other => return Err(self.err(format!("scf.for cannot carry {other:?}"))),
            }
        }
        let phi_init: Vec<(String, String)> = scalars.iter().map(|(_, t, v)| (t.clone(), v.clone())).collect();
        let lp = self.b.begin_loop("for", &lo, &hi, &step, &phi_init);
        let tile_of = |l: &Self, i: usize, m: &Mem| -> R<Tile> {
            let shape = l.tile_shape(inits[i])?;
            let dtype = f.ty(inits[i]).dtype().unwrap_or(DType::F32);
            Ok(Tile::new(&shape, dtype, Node::Mem(m.clone())))
        };
        let Some(lp) = lp else {
            // Never runs (constant bounds): the results are the initial values.
            for (i, &r) in op.results.iter().enumerate() {
                let v = match &carried[i] {
                    Some(m) => Val::Tile(tile_of(self, i, m)?),
                    None => self.get(inits[i])?,
                };
                self.set(r, v);
            }
            return Ok(());
        };
        self.set(region.args[0], Val::Scalar(lp.iv.clone()));
        let mut k = 0;
        for (i, c) in carried.iter().enumerate() {
            let v = match c {
                Some(m) => Val::Tile(tile_of(self, i, m)?),
                None => {
                    k += 1;
                    Val::Scalar(lp.carried[k - 1].clone())
                }
            };
            self.set(region.args[1 + i], v);
        }
        let yielded = self.region(region)?;
        self.b.loc = Some(op.loc.clone());
        if yielded.len() != inits.len() {
            return Err(self.err("scf.for: the body yields a different number of values"));
        }
        let mut outs = Vec::new();
        let mut tile_yields: Vec<(Tile, Mem)> = Vec::new();
        for (i, &y) in yielded.iter().enumerate() {
            match &carried[i] {
                Some(m) => tile_yields.push((self.tile(y)?, m.clone())),
                None => outs.push(self.scalar(y)?),
            }
        }
        self.write_carried(&tile_yields)?;
        let after = self.b.end_loop(lp, &outs);
        let mut k = 0;
        for (i, &r) in op.results.iter().enumerate() {
            let v = match &carried[i] {
                Some(m) => Val::Tile(tile_of(self, i, m)?),
                None => {
                    k += 1;
                    Val::Scalar(after[k - 1].clone())
                }
            };
            self.set(r, v);
        }
        Ok(())
    }

    /// Writes the yielded tiles into the carried buffers, reading every yielded value
    /// before any buffer it depends on is overwritten.
    fn write_carried(&mut self, pairs: &[(Tile, Mem)]) -> R<()> {
        let roots: Vec<Root> = pairs
            .iter()
            .map(|(_, m)| m.whole.ok_or_else(|| self.err("internal error: a loop-carried buffer that is not whole")))
            .collect::<R<_>>()?;
        let pending: Vec<usize> =
            (0..pairs.len()).filter(|&i| pairs[i].0.mem().and_then(|m| m.whole) != Some(roots[i])).collect();
        let mut direct = vec![false; pairs.len()];
        for &i in &pending {
            let root = roots[i];
            let others_read = pending.iter().any(|&j| j != i && pairs[j].0.reads(root));
            let (_, identity) = pairs[i].0.identity_reads(root);
            direct[i] = !others_read && identity;
        }
        let mut temps: Vec<Option<Mem>> = vec![None; pairs.len()];
        for &i in &pending {
            if !direct[i] {
                temps[i] = Some(self.materialize_fresh(&pairs[i].0)?);
            }
        }
        for &i in &pending {
            let (t, dst) = &pairs[i];
            match &temps[i] {
                Some(m) => {
                    let copy = t.with_node(Node::Mem(m.clone()));
                    self.materialize_into(&copy, dst)?;
                }
                None => self.materialize_into(t, dst)?,
            }
        }
        Ok(())
    }

    fn if_op(&mut self, id: OpId) -> R<()> {
        let f = self.f;
        let op = f.op(id);
        if op.regions.len() != 2 {
            return Err(self.err("scf.if has a then and an else region"));
        }
        let cond = self.scalar(op.operands[0])?;
        let then_l = self.b.label("then");
        let else_l = self.b.label("else");
        let join = self.b.label("endif");
        // Tile results go through one buffer each unless a branch yields memory in the
        // buffer's layout already.
        let mut bufs: Vec<Option<Mem>> = Vec::new();
        for &r in &op.results {
            bufs.push(match f.ty(r) {
                Type::Tile(t) => {
                    let shape = self.tile_shape(r)?;
                    Some(self.alloc_tile(&shape, t.dtype))
                }
                _ => None,
            });
        }
        self.b.cond_br(&cond, &then_l, &else_l);
        let mut arms: Vec<(String, Vec<String>, Vec<Root>)> = Vec::new();
        for (ri, label) in [(0usize, then_l), (1, else_l)] {
            self.b.start(&label);
            let yielded = self.region(&op.regions[ri])?;
            self.b.loc = Some(op.loc.clone());
            if yielded.len() != op.results.len() {
                return Err(self.err("scf.if: a branch yields a different number of values"));
            }
            let mut vals = Vec::new();
            let mut roots = Vec::new();
            for (i, &y) in yielded.iter().enumerate() {
                match &bufs[i] {
                    Some(buf) => {
                        let t = self.tile(y)?;
                        let usable = t.mem().filter(|m| m.strides == buf.strides && m.st == buf.st).cloned();
                        let m = match usable {
                            Some(m) => m,
                            None => {
                                self.materialize_into(&t, buf)?;
                                buf.clone()
                            }
                        };
                        roots.extend(m.roots.iter().copied());
                        vals.push(m.ptr.clone());
                    }
                    None => vals.push(self.scalar(y)?),
                }
            }
            let end = self.b.cur_label();
            self.b.br(&join);
            arms.push((end, vals, roots));
        }
        self.b.start(&join);
        for (i, &r) in op.results.iter().enumerate() {
            let (a, b) = (&arms[0], &arms[1]);
            match &bufs[i] {
                Some(buf) => {
                    let ty = format!("{}*", buf.st.elem().ir());
                    let ptr = self.b.val("res", format!("phi {ty} [ {}, {} ], [ {}, {} ]", a.1[i], a.0, b.1[i], b.0));
                    let mut roots: Vec<Root> = a.2.iter().chain(&b.2).copied().collect();
                    roots.sort();
                    roots.dedup();
                    let shape = self.tile_shape(r)?;
                    let dtype = f.ty(r).dtype().unwrap_or(DType::F32);
                    let m = Mem { ptr, strides: buf.strides.clone(), st: buf.st, roots, whole: None };
                    self.set(r, Val::Tile(Tile::new(&shape, dtype, Node::Mem(m))));
                }
                None => {
                    let ty = VTy::scalar(numerics::reg_of(self.dtype_of(r))).ir();
                    let v = self.b.val("res", format!("phi {ty} [ {}, {} ], [ {}, {} ]", a.1[i], a.0, b.1[i], b.0));
                    self.set(r, Val::Scalar(v));
                }
            }
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
