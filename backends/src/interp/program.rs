//! Tile IR compiled into the interpreter's instruction form: one instruction per op with
//! operands resolved to registers and every attribute, shape, stride and numeric choice
//! decided up front, so that the executor never looks at attributes or types again.

use tessera_frontend::check::DType;
use tessera_passes::ir::{policy, Attr, Func, Op, OpId, OpKind, Region, Type, ValueId};

use super::numerics::{BinFn, BinOp, Domain, Pred, UnFn, UnOp};
use super::InterpError;

pub(crate) type Reg = u32;

/// A value carried out of a region by `scf.yield`/`scf.condition`: moved when it is
/// defined inside the region (dead after the terminator), copied otherwise.
#[derive(Clone, Debug)]
pub(crate) struct Carry {
    pub reg: Reg,
    pub take: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) enum Term {
    #[default]
    None,
    Yield(Vec<Carry>),
    Condition {
        cond: Reg,
        values: Vec<Carry>,
    },
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Block {
    pub args: Vec<Reg>,
    pub insts: Vec<Inst>,
    pub term: Term,
}

#[derive(Clone, Debug)]
pub(crate) struct Inst {
    pub op: OpId,
    pub kind: I,
}

/// How a tile is rearranged: output element `e` (row-major over `dims`) reads source
/// element `sum(e_d * strides[d])`.
#[derive(Clone, Debug)]
pub(crate) struct Strided {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum ReduceKind {
    Sum,
    Max,
    Min,
}

/// How `tile.dot` multiplies and accumulates.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum DotMode {
    /// Products exact in f32 (both operands have at most 24 significant bits together):
    /// multiply and add in f32.
    F32Exact,
    /// f32 operands: the product is exact only inside a fused multiply-add.
    F32Fma,
    F64,
    /// Integer operands: exact products, i32 (wrapping) accumulation.
    Int,
}

#[derive(Clone, Debug)]
pub(crate) enum I {
    ProgramId {
        dst: Reg,
        axis: usize,
    },
    NumPrograms {
        dst: Reg,
        axis: usize,
    },
    ConstIndex {
        dst: Reg,
        value: i64,
    },
    ConstScalar {
        dst: Reg,
        value: f64,
    },
    TensorDim {
        dst: Reg,
        arg: u32,
        axis: usize,
    },
    /// Scalar or index operands (`a`, `b` may mix index and scalar).
    BinaryScalar {
        dst: Reg,
        a: Reg,
        b: Reg,
        f: BinFn,
        index: bool,
    },
    BinaryTile {
        dst: Reg,
        a: Reg,
        b: Reg,
        f: BinFn,
    },
    UnaryScalar {
        dst: Reg,
        src: Reg,
        f: UnFn,
        index: bool,
    },
    UnaryTile {
        dst: Reg,
        src: Reg,
        f: UnFn,
    },
    /// `index`: both operands are indices (compared as exact integers).
    Cmp {
        dst: Reg,
        a: Reg,
        b: Reg,
        pred: Pred,
        tile: bool,
        index: bool,
    },
    Select {
        dst: Reg,
        cond: Reg,
        a: Reg,
        b: Reg,
        n: usize,
    },
    /// `to` of `Domain::Index` makes an index; `tile` casts elementwise. `saturate`:
    /// `@saturate`; `u`: the uniform tile of `@stochastic_round`.
    Cast {
        dst: Reg,
        src: Reg,
        to: Domain,
        tile: bool,
        saturate: bool,
        u: Option<Reg>,
    },
    Splat {
        dst: Reg,
        src: Reg,
        to: Domain,
        n: usize,
    },
    Fill {
        dst: Reg,
        value: f64,
        n: usize,
    },
    Arange {
        dst: Reg,
        n: usize,
    },
    /// `tile.rand`: leading offsets are fixed coordinates, the last `dims.len()` are
    /// added to the element's coordinates.
    Rand {
        dst: Reg,
        seed: Reg,
        offsets: Vec<Reg>,
        dims: Vec<usize>,
    },
    Copy {
        dst: Reg,
        src: Reg,
    },
    Rearrange {
        dst: Reg,
        src: Reg,
        plan: Strided,
    },
    /// `step`: `@accum(T)` of T narrower than f32 rounds the running sum to T after
    /// every addition.
    Reduce {
        dst: Reg,
        src: Reg,
        kind: ReduceKind,
        outer: usize,
        len: usize,
        inner: usize,
        dom: Domain,
        step: Option<DType>,
    },
    Dot {
        dst: Reg,
        a: Reg,
        b: Reg,
        acc: Reg,
        m: usize,
        n: usize,
        k: usize,
        mode: DotMode,
        dom: Domain,
        step: Option<DType>,
        /// A is a `wgmma` M-major shared slot, `[K, M]` row-major.
        a_m_major: bool,
        /// B is a `wgmma` K-major shared slot, `[N, K]` row-major.
        b_k_major: bool,
    },
    CausalMask {
        dst: Reg,
        src: Reg,
        q: Reg,
        k: Reg,
        m: usize,
        n: usize,
    },
    View {
        dst: Reg,
        arg: u32,
        offsets: Vec<Reg>,
        sizes: Vec<i64>,
        kept: Vec<usize>,
    },
    Load {
        dst: Reg,
        view: Reg,
        mask: Option<Reg>,
        other: f64,
        n: usize,
    },
    /// `round`: the view's dtype when the tile's differs.
    Store {
        view: Reg,
        src: Reg,
        mask: Option<Reg>,
        round: Option<DType>,
        /// `tile.atomic_add`: each element is added to the tensor's, rounded to its dtype.
        atomic: Option<DType>,
    },
    Gather {
        dst: Reg,
        arg: u32,
        idx: Reg,
        mask: Option<Reg>,
        n: usize,
    },
    Scatter {
        arg: u32,
        idx: Reg,
        values: Reg,
        mask: Option<Reg>,
        round: Option<DType>,
        /// `tile.atomic_add` by an index tile: the tensor's dtype, as for `Store`.
        atomic: Option<DType>,
    },
    AllocShared {
        dst: Reg,
        buf: u32,
    },
    SmemSlot {
        dst: Reg,
        ring: Reg,
        index: Reg,
    },
    LoadShared {
        dst: Reg,
        src: Reg,
        transpose: Option<Strided>,
    },
    StoreShared {
        dst: Reg,
        src: Reg,
    },
    CpAsync {
        dst: Reg,
        view: Reg,
    },
    /// The TMA's copy of a shared slot to a global view (`tile.tma_store`).
    TmaStore {
        view: Reg,
        src: Reg,
    },
    Commit,
    Wait {
        pending: u64,
    },
    Barrier,
    For {
        lo: Reg,
        hi: Reg,
        step: Reg,
        inits: Vec<Reg>,
        results: Vec<Reg>,
        body: Block,
    },
    If {
        cond: Reg,
        results: Vec<Reg>,
        then: Block,
        otherwise: Block,
    },
    While {
        inits: Vec<Reg>,
        results: Vec<Reg>,
        before: Block,
        after: Block,
    },
    Return,
}

/// A shared buffer's shape: `stages` slots of `dims`.
#[derive(Clone, Debug)]
pub(crate) struct SmemDecl {
    pub dims: Vec<usize>,
    pub stages: usize,
    pub dtype: DType,
    /// The op that allocates it (for messages).
    pub op: OpId,
}

/// A parameter's register.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub reg: Reg,
}

#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub n_regs: usize,
    pub params: Vec<Param>,
    pub body: Block,
    pub smem: Vec<SmemDecl>,
    /// `tile.cp_async` completes only at `tile.async_wait` (GPU targets); on the CPU
    /// target it is an immediate copy.
    pub async_copies: bool,
    /// The kernel scatters: programs may write the same elements (runs sequentially).
    pub scatters: bool,
}

pub(crate) fn compile(func: &Func) -> Result<Program, InterpError> {
    let mut c = Compiler { func, smem: Vec::new(), scatters: false };
    let params = func.params.iter().map(|&p| Param { reg: p.0 }).collect();
    let body = c.block(&func.body)?;
    let target = func.attr("target").and_then(Attr::as_str).unwrap_or("cpu");
    Ok(Program {
        n_regs: func.values.len(),
        params,
        body,
        smem: c.smem,
        async_copies: target != "cpu",
        scatters: c.scatters,
    })
}

struct Compiler<'f> {
    func: &'f Func,
    smem: Vec<SmemDecl>,
    scatters: bool,
}

/// A tile's constant dims.
fn tile_dims(ty: &Type) -> Option<Vec<usize>> {
    match ty {
        Type::Tile(t) => t.dims.iter().map(|d| d.as_const().map(|c| c.max(0) as usize)).collect(),
        _ => None,
    }
}

fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    strides
}

impl Compiler<'_> {
    fn err(&self, id: OpId, message: impl Into<String>) -> InterpError {
        InterpError::at_op(self.func, id, message.into())
    }

    fn ty(&self, v: ValueId) -> &Type {
        self.func.ty(v)
    }

    fn block(&mut self, region: &Region) -> Result<Block, InterpError> {
        let mut block = Block { args: region.args.iter().map(|a| a.0).collect(), insts: Vec::new(), term: Term::None };
        // Values this region defines: a terminator moves them out instead of copying.
        let mut local: Vec<ValueId> = region.args.clone();
        for &id in &region.ops {
            let op = self.func.op(id);
            match op.kind {
                OpKind::Yield | OpKind::Condition => {
                    let carry = |v: &ValueId, skip: usize| Carry {
                        reg: v.0,
                        take: local.contains(v) && op.operands.iter().skip(skip).filter(|o| *o == v).count() == 1,
                    };
                    block.term = if op.kind == OpKind::Yield {
                        Term::Yield(op.operands.iter().map(|v| carry(v, 0)).collect())
                    } else {
                        let Some((&cond, values)) = op.operands.split_first() else {
                            return Err(self.err(id, "scf.condition needs a condition"));
                        };
                        Term::Condition { cond: cond.0, values: values.iter().map(|v| carry(v, 1)).collect() }
                    };
                }
                _ => {
                    let kind = self.op(id, op)?;
                    block.insts.push(Inst { op: id, kind });
                    local.extend(&op.results);
                }
            }
        }
        Ok(block)
    }

    fn result(&self, id: OpId, op: &Op) -> Result<Reg, InterpError> {
        match op.results.as_slice() {
            [r] => Ok(r.0),
            _ => Err(self.err(id, format!("{} has {} results, expected 1", op.kind.name(), op.results.len()))),
        }
    }

    fn reg(&self, id: OpId, op: &Op, i: usize) -> Result<Reg, InterpError> {
        self.operand(id, op, i).map(|v| v.0)
    }

    fn operand(&self, id: OpId, op: &Op, i: usize) -> Result<ValueId, InterpError> {
        op.operands.get(i).copied().ok_or_else(|| {
            self.err(id, format!("{} has {} operands, needs at least {}", op.kind.name(), op.operands.len(), i + 1))
        })
    }

    fn tile_dims_of(&self, id: OpId, v: ValueId) -> Result<Vec<usize>, InterpError> {
        tile_dims(self.ty(v)).ok_or_else(|| {
            self.err(id, format!("expected a tile with constant dims, got {} (not Tile IR?)", self.ty(v)))
        })
    }

    fn numel(&self, id: OpId, v: ValueId) -> Result<usize, InterpError> {
        Ok(self.tile_dims_of(id, v)?.iter().product())
    }

    fn domain(&self, id: OpId, v: ValueId) -> Result<Domain, InterpError> {
        match self.ty(v) {
            Type::Index => Ok(Domain::Index),
            t => t
                .dtype()
                .map(Domain::of_dtype)
                .ok_or_else(|| self.err(id, format!("a value of type {t} has no arithmetic"))),
        }
    }

    /// The parameter index of a tensor operand (tensors are always parameters).
    fn tensor_arg(&self, id: OpId, v: ValueId) -> Result<u32, InterpError> {
        match self.func.params.iter().position(|&p| p == v) {
            Some(i) if matches!(self.ty(v), Type::Tensor(_)) => Ok(i as u32),
            _ => Err(self.err(id, format!("operand of type {} is not a tensor parameter", self.ty(v)))),
        }
    }

    fn optional(&self, op: &Op, i: usize) -> Option<Reg> {
        op.operands.get(i).map(|v| v.0)
    }

    fn is_tile(&self, v: ValueId) -> bool {
        matches!(self.ty(v), Type::Tile(_))
    }

    fn op(&mut self, id: OpId, op: &Op) -> Result<I, InterpError> {
        let name = op.kind.name();
        let axis = |c: &Self| -> Result<usize, InterpError> {
            op.int_attr("axis")
                .filter(|a| *a >= 0)
                .map(|a| a as usize)
                .ok_or_else(|| c.err(id, format!("{name} needs a non-negative `axis`")))
        };
        Ok(match op.kind {
            OpKind::ProgramId | OpKind::NumPrograms => {
                let a = axis(self)?;
                if a > 2 {
                    return Err(self.err(id, format!("grid axis {a} does not exist (0, 1 or 2)")));
                }
                let dst = self.result(id, op)?;
                if op.kind == OpKind::ProgramId {
                    I::ProgramId { dst, axis: a }
                } else {
                    I::NumPrograms { dst, axis: a }
                }
            }
            OpKind::Constant => {
                let dst = self.result(id, op)?;
                let attr = op.attr("value").ok_or_else(|| self.err(id, "arith.constant has no `value`"))?;
                let value = match attr {
                    Attr::Bool(b) => f64::from(u8::from(*b)),
                    a => a.as_float().ok_or_else(|| self.err(id, format!("constant value {a:?} is not a number")))?,
                };
                match self.ty(op.results[0]) {
                    Type::Index => I::ConstIndex {
                        dst,
                        value: match attr {
                            Attr::Int(v) => *v,
                            _ => value as i64,
                        },
                    },
                    Type::Scalar(d) => I::ConstScalar { dst, value: Domain::of_dtype(*d).convert(value) },
                    Type::Tile(t) => I::Fill {
                        dst,
                        value: Domain::of_dtype(t.dtype).convert(value),
                        n: self.numel(id, op.results[0])?,
                    },
                    t => return Err(self.err(id, format!("a constant of type {t}"))),
                }
            }
            OpKind::SchedParam => {
                return Err(self.err(id, "sched.param is Graph IR: the kernel was not specialized to a schedule"))
            }
            OpKind::TensorDim => {
                let arg = self.tensor_arg(id, self.operand(id, op, 0)?)?;
                let a = axis(self)?;
                let rank = self.ty(self.operand(id, op, 0)?).dims().len();
                if a >= rank {
                    return Err(self.err(id, format!("axis {a} of a rank-{rank} tensor")));
                }
                I::TensorDim { dst: self.result(id, op)?, arg, axis: a }
            }
            k if k.is_binary() => {
                let bop = BinOp::of(k).expect("every binary op kind has an interpreter operation");
                let dst = self.result(id, op)?;
                let (a, b) = (self.operand(id, op, 0)?, self.operand(id, op, 1)?);
                let dom = self.domain(id, op.results[0])?;
                let f = BinFn::new(bop, dom)
                    .ok_or_else(|| self.err(id, format!("{name} is not defined on {}", self.ty(op.results[0]))))?;
                let f = if policy::saturates(op) { f.saturating() } else { f };
                if self.is_tile(op.results[0]) {
                    if !self.is_tile(a) || !self.is_tile(b) || self.numel(id, a)? != self.numel(id, b)? {
                        return Err(self.err(id, format!("{name} on {} and {}", self.ty(a), self.ty(b))));
                    }
                    I::BinaryTile { dst, a: a.0, b: b.0, f }
                } else {
                    I::BinaryScalar { dst, a: a.0, b: b.0, f, index: dom == Domain::Index }
                }
            }
            k if k.is_unary_math() => {
                let uop = UnOp::of(k).ok_or_else(|| self.err(id, format!("{name} is not a unary op")))?;
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                let dom = self.domain(id, op.results[0])?;
                let f = UnFn::new(uop, dom)
                    .ok_or_else(|| self.err(id, format!("{name} is not defined on {}", self.ty(op.results[0]))))?;
                let f = if policy::saturates(op) { f.saturating() } else { f };
                if self.is_tile(op.results[0]) {
                    I::UnaryTile { dst, src: src.0, f }
                } else {
                    I::UnaryScalar { dst, src: src.0, f, index: dom == Domain::Index }
                }
            }
            OpKind::Cmp => {
                let pred = op
                    .str_attr("pred")
                    .and_then(Pred::parse)
                    .ok_or_else(|| self.err(id, "arith.cmp needs `pred` = lt|le|gt|ge|eq|ne"))?;
                let (a, b) = (self.operand(id, op, 0)?, self.operand(id, op, 1)?);
                let tile = self.is_tile(op.results[0]);
                if tile && (!self.is_tile(a) || !self.is_tile(b)) {
                    return Err(self.err(id, format!("arith.cmp on {} and {}", self.ty(a), self.ty(b))));
                }
                let index = matches!(self.ty(a), Type::Index) && matches!(self.ty(b), Type::Index);
                I::Cmp { dst: self.result(id, op)?, a: a.0, b: b.0, pred, tile, index }
            }
            OpKind::Select => {
                let dst = self.result(id, op)?;
                let n = if self.is_tile(op.results[0]) { self.numel(id, op.results[0])? } else { 0 };
                I::Select { dst, cond: self.reg(id, op, 0)?, a: self.reg(id, op, 1)?, b: self.reg(id, op, 2)?, n }
            }
            OpKind::Cast => {
                let dst = self.result(id, op)?;
                let to = self.domain(id, op.results[0])?;
                let u = if policy::stochastic(op) { Some(self.reg(id, op, 1)?) } else { None };
                I::Cast {
                    dst,
                    src: self.reg(id, op, 0)?,
                    to,
                    tile: self.is_tile(op.results[0]),
                    saturate: policy::saturates(op),
                    u,
                }
            }
            OpKind::Splat => {
                let dst = self.result(id, op)?;
                I::Splat {
                    dst,
                    src: self.reg(id, op, 0)?,
                    to: self.domain(id, op.results[0])?,
                    n: self.numel(id, op.results[0])?,
                }
            }
            OpKind::Full => {
                let dst = self.result(id, op)?;
                let value = op
                    .attr("value")
                    .and_then(Attr::as_float)
                    .ok_or_else(|| self.err(id, "tile.full needs a numeric `value`"))?;
                I::Fill {
                    dst,
                    value: self.domain(id, op.results[0])?.convert(value),
                    n: self.numel(id, op.results[0])?,
                }
            }
            OpKind::Arange => {
                let dst = self.result(id, op)?;
                I::Arange { dst, n: self.numel(id, op.results[0])? }
            }
            OpKind::ExpandDims | OpKind::ConvertLayout => {
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                if self.numel(id, src)? != self.numel(id, op.results[0])? {
                    return Err(self.err(id, format!("{name}: {} → {}", self.ty(src), self.ty(op.results[0]))));
                }
                I::Copy { dst, src: src.0 }
            }
            OpKind::Broadcast => {
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                let (from, to) = (self.tile_dims_of(id, src)?, self.tile_dims_of(id, op.results[0])?);
                if from.len() != to.len() || from.iter().zip(&to).any(|(f, t)| f != t && *f != 1) {
                    return Err(self.err(id, format!("tile.broadcast: {} → {}", self.ty(src), self.ty(op.results[0]))));
                }
                let src_strides = row_major_strides(&from);
                let strides = from.iter().zip(&src_strides).map(|(&f, &s)| if f == 1 { 0 } else { s }).collect();
                I::Rearrange { dst, src: src.0, plan: Strided { dims: to, strides } }
            }
            OpKind::Transpose => {
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                let from = self.tile_dims_of(id, src)?;
                let plan = transposed(&from)
                    .ok_or_else(|| self.err(id, format!("tile.transpose of {}: needs rank 2 or more", self.ty(src))))?;
                I::Rearrange { dst, src: src.0, plan }
            }
            OpKind::Reduce => {
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                let dims = self.tile_dims_of(id, src)?;
                let a = axis(self)?;
                if a >= dims.len() {
                    return Err(self.err(id, format!("axis {a} of {}", self.ty(src))));
                }
                let kind = match op.str_attr("kind") {
                    Some("sum") => ReduceKind::Sum,
                    Some("max") => ReduceKind::Max,
                    Some("min") => ReduceKind::Min,
                    other => return Err(self.err(id, format!("tile.reduce kind {other:?} (sum, max or min)"))),
                };
                let dom = self.domain(id, op.results[0])?;
                if dom == Domain::Bool && kind == ReduceKind::Sum {
                    return Err(self.err(id, "tile.reduce sum of a bool tile"));
                }
                I::Reduce {
                    dst,
                    src: src.0,
                    kind,
                    outer: dims[..a].iter().product(),
                    len: dims[a],
                    inner: dims[a + 1..].iter().product(),
                    dom,
                    step: policy::acc(op).filter(|&t| policy::rounds_each_step(t)),
                }
            }
            OpKind::Dot => {
                let dst = self.result(id, op)?;
                let (a, b, acc) = (self.operand(id, op, 0)?, self.operand(id, op, 1)?, self.operand(id, op, 2)?);
                // `wgmma` dots read their operands from shared buffers (slots) directly.
                let operand_dims = |v: ValueId| match self.ty(v) {
                    Type::Smem(_) => self.smem_dims(id, v),
                    _ => self.tile_dims_of(id, v),
                };
                // A `wgmma` slot read transposed (an M-major A's [K, M], a K-major B's
                // [N, K]) has the dot's dims reversed.
                let transposed = |i: usize, v: ValueId| tessera_passes::wgmma::is_transposed_slot(op, i, self.ty(v));
                let (a_m_major, b_k_major) = (transposed(0, a), transposed(1, b));
                let dot_dims = |v: ValueId, reversed: bool| {
                    operand_dims(v).map(|mut d| {
                        if reversed {
                            d.reverse();
                        }
                        d
                    })
                };
                let (ad, bd, cd) = (dot_dims(a, a_m_major)?, dot_dims(b, b_k_major)?, self.tile_dims_of(id, acc)?);
                if ad.len() != 2 || bd.len() != 2 || cd.len() != 2 || ad[1] != bd[0] || cd != [ad[0], bd[1]] {
                    return Err(
                        self.err(id, format!("tile.dot shapes {} x {} + {}", self.ty(a), self.ty(b), self.ty(acc)))
                    );
                }
                let (at, bt) = (self.ty(a).dtype().unwrap_or(DType::F32), self.ty(b).dtype().unwrap_or(DType::F32));
                let mode = if at.is_int() && bt.is_int() {
                    DotMode::Int
                } else if at == DType::F64 || bt == DType::F64 || self.ty(acc).dtype() == Some(DType::F64) {
                    DotMode::F64
                } else if significant_bits(at) + significant_bits(bt) <= 24 {
                    DotMode::F32Exact
                } else {
                    DotMode::F32Fma
                };
                let dom = self.domain(id, acc)?;
                let step = policy::acc(op).filter(|&t| policy::rounds_each_step(t));
                I::Dot {
                    dst,
                    a: a.0,
                    b: b.0,
                    acc: acc.0,
                    m: ad[0],
                    n: bd[1],
                    k: ad[1],
                    mode,
                    dom,
                    step,
                    a_m_major,
                    b_k_major,
                }
            }
            OpKind::Rand => {
                let dst = self.result(id, op)?;
                let dims = self.tile_dims_of(id, op.results[0])?;
                if op.operands.len() < 1 + dims.len() {
                    return Err(self.err(
                        id,
                        format!("tile.rand of a rank-{} tile needs a seed and {} offsets", dims.len(), dims.len()),
                    ));
                }
                I::Rand {
                    dst,
                    seed: self.reg(id, op, 0)?,
                    offsets: op.operands[1..].iter().map(|v| v.0).collect(),
                    dims,
                }
            }
            OpKind::CausalMask => {
                let dst = self.result(id, op)?;
                let s = self.operand(id, op, 0)?;
                let dims = self.tile_dims_of(id, s)?;
                if dims.len() != 2 {
                    return Err(self.err(id, format!("tile.causal_mask of {}: needs a 2-D tile", self.ty(s))));
                }
                I::CausalMask {
                    dst,
                    src: s.0,
                    q: self.reg(id, op, 1)?,
                    k: self.reg(id, op, 2)?,
                    m: dims[0],
                    n: dims[1],
                }
            }
            OpKind::View => {
                let dst = self.result(id, op)?;
                let tensor = self.operand(id, op, 0)?;
                let arg = self.tensor_arg(id, tensor)?;
                let rank = self.ty(tensor).dims().len();
                let offsets: Vec<Reg> = op.operands[1..].iter().map(|v| v.0).collect();
                if offsets.len() != rank {
                    return Err(
                        self.err(id, format!("tile.view of a rank-{rank} tensor with {} offsets", offsets.len()))
                    );
                }
                let sizes: Vec<i64> = match op.attr("sizes") {
                    Some(Attr::Dims(d)) => d.iter().map(|d| d.as_const()).collect::<Option<_>>(),
                    Some(Attr::Ints(v)) => Some(v.clone()),
                    _ => None,
                }
                .filter(|s: &Vec<i64>| s.len() == rank && s.iter().all(|&x| x >= 0))
                .ok_or_else(|| self.err(id, format!("tile.view needs {rank} constant `sizes`")))?;
                let squeeze: Vec<usize> = match op.attr("squeeze") {
                    Some(Attr::Ints(v)) => v.iter().map(|&x| x as usize).collect(),
                    _ => Vec::new(),
                };
                if let Some(&d) = squeeze.iter().find(|&&d| d >= rank || sizes[d] != 1) {
                    return Err(self.err(id, format!("tile.view squeezes dim {d}, which is not a size-1 dim")));
                }
                let kept = (0..rank).filter(|d| !squeeze.contains(d)).collect();
                I::View { dst, arg, offsets, sizes, kept }
            }
            OpKind::Load => {
                let dst = self.result(id, op)?;
                let other = op.attr("other").and_then(Attr::as_float).unwrap_or(0.0);
                let dom = self.domain(id, op.results[0])?;
                I::Load {
                    dst,
                    view: self.reg(id, op, 0)?,
                    mask: self.optional(op, 1),
                    other: dom.convert(other),
                    n: self.numel(id, op.results[0])?,
                }
            }
            OpKind::Store => {
                let (view, src) = (self.operand(id, op, 0)?, self.operand(id, op, 1)?);
                let (vd, td) = (self.ty(view).dtype(), self.ty(src).dtype());
                if self.numel(id, src)? as i64 != self.ty(view).const_dims().map(|d| d.iter().product()).unwrap_or(-1) {
                    return Err(self.err(id, format!("tile.store of {} into {}", self.ty(src), self.ty(view))));
                }
                I::Store {
                    view: view.0,
                    src: src.0,
                    mask: self.optional(op, 2),
                    round: (vd != td).then_some(vd).flatten(),
                    atomic: if op.attr("atomic").is_some() { vd } else { None },
                }
            }
            OpKind::Gather => {
                let dst = self.result(id, op)?;
                let tensor = self.operand(id, op, 0)?;
                I::Gather {
                    dst,
                    arg: self.tensor_arg(id, tensor)?,
                    idx: self.reg(id, op, 1)?,
                    mask: self.optional(op, 2),
                    n: self.numel(id, op.results[0])?,
                }
            }
            OpKind::Scatter => {
                self.scatters = true;
                let tensor = self.operand(id, op, 0)?;
                let values = self.operand(id, op, 2)?;
                let (vd, td) = (self.ty(tensor).dtype(), self.ty(values).dtype());
                I::Scatter {
                    arg: self.tensor_arg(id, tensor)?,
                    idx: self.reg(id, op, 1)?,
                    values: values.0,
                    mask: self.optional(op, 3),
                    round: (vd != td).then_some(vd).flatten(),
                    atomic: if op.attr("atomic").is_some() { vd } else { None },
                }
            }
            OpKind::AllocShared => {
                let dst = self.result(id, op)?;
                let Type::Smem(s) = self.ty(op.results[0]) else {
                    return Err(self.err(id, "tile.alloc_shared makes a shared buffer"));
                };
                let dims = s
                    .dims
                    .iter()
                    .map(|d| d.as_const().map(|c| c.max(0) as usize))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| self.err(id, "a shared buffer with a symbolic dim"))?;
                self.smem.push(SmemDecl { dims, stages: s.stages.max(1) as usize, dtype: s.dtype, op: id });
                I::AllocShared { dst, buf: self.smem.len() as u32 - 1 }
            }
            OpKind::SmemSlot => {
                I::SmemSlot { dst: self.result(id, op)?, ring: self.reg(id, op, 0)?, index: self.reg(id, op, 1)? }
            }
            OpKind::LoadShared => {
                let dst = self.result(id, op)?;
                let src = self.operand(id, op, 0)?;
                let transpose = match op.attr("transpose") {
                    Some(Attr::Bool(true)) => {
                        let from = self.smem_dims(id, src)?;
                        Some(transposed(&from).ok_or_else(|| self.err(id, "a transposed read of a 1-D buffer"))?)
                    }
                    _ => None,
                };
                I::LoadShared { dst, src: src.0, transpose }
            }
            OpKind::StoreShared => I::StoreShared { dst: self.reg(id, op, 0)?, src: self.reg(id, op, 1)? },
            OpKind::CpAsync => I::CpAsync { dst: self.reg(id, op, 0)?, view: self.reg(id, op, 1)? },
            OpKind::TmaStore => I::TmaStore { view: self.reg(id, op, 0)?, src: self.reg(id, op, 1)? },
            OpKind::AsyncCommit => I::Commit,
            OpKind::AsyncWait => I::Wait { pending: op.int_attr("pending").unwrap_or(0).max(0) as u64 },
            OpKind::Barrier => I::Barrier,
            OpKind::For => {
                if op.operands.len() < 3 || op.regions.len() != 1 {
                    return Err(self.err(id, "scf.for takes lo, hi, step, inits and one region"));
                }
                let body = self.block(&op.regions[0])?;
                self.check_carried(id, &body, op.results.len(), body.args.len().saturating_sub(1))?;
                I::For {
                    lo: self.reg(id, op, 0)?,
                    hi: self.reg(id, op, 1)?,
                    step: self.reg(id, op, 2)?,
                    inits: op.operands[3..].iter().map(|v| v.0).collect(),
                    results: op.results.iter().map(|v| v.0).collect(),
                    body,
                }
            }
            OpKind::If => {
                if op.regions.len() != 2 {
                    return Err(self.err(id, "scf.if has a then and an else region"));
                }
                let then = self.block(&op.regions[0])?;
                let otherwise = self.block(&op.regions[1])?;
                for b in [&then, &otherwise] {
                    self.check_carried(id, b, op.results.len(), op.results.len())?;
                }
                I::If { cond: self.reg(id, op, 0)?, results: op.results.iter().map(|v| v.0).collect(), then, otherwise }
            }
            OpKind::While => {
                if op.regions.len() != 2 {
                    return Err(self.err(id, "scf.while has a before and an after region"));
                }
                let before = self.block(&op.regions[0])?;
                let after = self.block(&op.regions[1])?;
                let inits: Vec<Reg> = op.operands.iter().map(|v| v.0).collect();
                let ok = match &before.term {
                    Term::Condition { values, .. } => {
                        values.len() == op.results.len() && values.len() == after.args.len()
                    }
                    _ => false,
                } && before.args.len() == inits.len();
                if !ok {
                    return Err(self.err(
                        id,
                        "scf.while: the before region takes the iteration values and ends in scf.condition \
                         (passing the after region's arguments and the results)",
                    ));
                }
                self.check_carried(id, &after, inits.len(), inits.len())?;
                I::While { inits, results: op.results.iter().map(|v| v.0).collect(), before, after }
            }
            OpKind::Return => I::Return,
            OpKind::GridParallel => {
                return Err(self.err(id, "grid.parallel is Schedule IR: lower the kernel to Tile IR first"))
            }
            _ => return Err(self.err(id, format!("`{name}` is not supported by the interpreter yet"))),
        })
    }

    fn smem_dims(&self, id: OpId, v: ValueId) -> Result<Vec<usize>, InterpError> {
        match self.ty(v) {
            Type::Smem(s) => s.dims.iter().map(|d| d.as_const().map(|c| c.max(0) as usize)).collect::<Option<_>>(),
            _ => None,
        }
        .ok_or_else(|| self.err(id, format!("expected a shared buffer with constant dims, got {}", self.ty(v))))
    }

    /// A region with results ends in a terminator carrying exactly that many values.
    fn check_carried(&self, id: OpId, block: &Block, results: usize, args: usize) -> Result<(), InterpError> {
        let yielded = match &block.term {
            Term::Yield(v) => v.len(),
            Term::None => 0,
            Term::Condition { .. } => usize::MAX,
        };
        if yielded != results || args != results {
            return Err(self.err(
                id,
                format!("a region yields {yielded} values for {results} results and {args} iteration arguments"),
            ));
        }
        Ok(())
    }
}

/// Significant bits (with the implicit one) of a dtype's values.
pub(crate) fn significant_bits(d: DType) -> u32 {
    match d {
        DType::F64 => 53,
        DType::F32 => 24,
        DType::TF32 | DType::F16 => 11,
        DType::BF16 => 8,
        DType::Fp8E4m3 => 4,
        DType::Fp8E5m2 => 3,
        DType::Int8 => 7,
        DType::Int4 => 3,
        DType::I32 => 31,
        DType::I64 => 63,
        DType::Bool => 1,
    }
}

/// The plan that swaps the last two dims of a row-major tile of `dims`.
pub(crate) fn transposed(dims: &[usize]) -> Option<Strided> {
    let r = dims.len();
    if r < 2 {
        return None;
    }
    let src_strides = row_major_strides(dims);
    let mut out_dims = dims.to_vec();
    out_dims.swap(r - 2, r - 1);
    let mut strides = src_strides;
    strides.swap(r - 2, r - 1);
    Some(Strided { dims: out_dims, strides })
}
