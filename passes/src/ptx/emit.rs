//! The PTX emitter: `Emitter` (the state of one kernel: values, registers, shared
//! buffers), parameters, the op dispatch and the helpers the other submodules share.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;

use tessera_frontend::check::DType;

use crate::abi::{scalar_slot, AbiParam, KernelAbi, Slot};
use crate::error::LowerError;
use crate::ir::{Attr, Func, Layout, Op, OpId, OpKind, Region, SmemType, Swizzle, Type, ValueId};
use crate::target::Target;
use crate::target::TargetCode;

use super::builder::{Builder, Class, Operand, Reg};
use super::expr::{Expr, ExprCache};
use super::numerics::{arith_type, float_imm, materialize, round_wide, wide_class};
use super::threadmap::ThreadMap;

/// The symbol of the dynamic shared-memory array.
pub(super) const SMEM_SYMBOL: &str = "tessera_smem";

/// PTX for one Tile IR kernel.
pub fn emit(func: &Func, target: Target) -> Result<TargetCode, LowerError> {
    if !target.is_gpu() {
        return Err(LowerError {
            message: format!("PTX is generated for GPU targets, not {target}"),
            range: func.loc.range,
        });
    }
    let abi = KernelAbi::of(func).map_err(|message| LowerError { message, range: func.loc.range })?;
    let mut e = Emitter::new(func, target, &abi)?;
    e.run()?;
    Ok(e.finish(abi))
}

pub(super) type R<T> = Result<T, LowerError>;

/// How a tile's elements sit in a thread's registers.
#[derive(Clone, Debug)]
pub(crate) enum Repr {
    /// One operand per element (`super::numerics::wide_class` of the dtype).
    Wide(Vec<Operand>),
    /// 16- or 8-bit elements packed into `b32` words, lowest index in the low bits.
    Packed(Vec<Operand>),
    /// Packed words still in shared memory: a dot operand whose `ldmatrix` loads the
    /// dot issues next to the instructions that use them (fewer live registers).
    Lazy(Rc<LazyLoad>),
}

/// One `ldmatrix` of 1, 2 or 4 8x8 matrices: the words it fills, whether it
/// transposes, and each lane's row address as a byte offset in the buffer slot.
#[derive(Clone, Debug)]
pub(crate) struct LdMatrix {
    pub words: Vec<usize>,
    pub trans: bool,
    pub offset: Expr,
}

/// A deferred `tile.load_shared` of a dot operand (see `Repr::Lazy`).
#[derive(Debug)]
pub(crate) struct LazyLoad {
    pub slot: SmemVal,
    pub plan: Vec<LdMatrix>,
    pub words: usize,
}

#[derive(Clone, Debug)]
pub(crate) struct TileVal {
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub layout: Layout,
    pub repr: Repr,
}

/// A window of a tensor: per tensor dim its offset and size; `dims` are the tensor
/// dims the view keeps (its own dims, in order).
#[derive(Clone, Debug)]
pub(crate) struct ViewVal {
    pub tensor: usize,
    pub offsets: Vec<Operand>,
    pub sizes: Vec<i64>,
    pub dims: Vec<usize>,
}

/// A shared buffer (or ring slot): its type and its shared-window address `addr + imm`.
#[derive(Clone, Debug)]
pub(crate) struct SmemVal {
    pub ty: SmemType,
    pub addr: Reg,
    pub imm: i64,
}

#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// An index (`b64`) or a scalar (wide class of its dtype); uniform over the CTA.
    Scalar(Operand),
    Tile(TileVal),
    Tensor(usize),
    View(ViewVal),
    Smem(SmemVal),
}

/// A tensor parameter: global pointer, dims and row-major strides (elements).
pub(crate) struct TensorArg {
    pub ptr: Reg,
    pub dims: Vec<Reg>,
    pub(super) strides: Vec<Option<Operand>>,
}

pub(crate) struct Emitter<'f> {
    pub(super) f: &'f Func,
    pub(super) target: Target,
    pub(super) threads: u32,
    pub(super) b: Builder,
    pub(super) exprs: ExprCache,
    pub(super) vals: Vec<Option<Val>>,
    pub(super) maps: HashMap<(Layout, Vec<i64>), Arc<ThreadMap>>,
    pub(super) tensors: Vec<TensorArg>,
    pub(super) params: Vec<String>,
    /// Offsets of the kernel's shared buffers, by the `tile.alloc_shared` result.
    pub(super) buffer_offsets: HashMap<ValueId, u32>,
    /// Bytes of the shared buffers; the scratch space starts after them.
    pub(super) buffers_bytes: u32,
    pub(super) scratch_bytes: u32,
    pub(super) smem_base: Option<Reg>,
    pub(super) special: HashMap<&'static str, Reg>,
    /// Byte strides of tensor dims (prologue), by (tensor, dim, element bytes).
    pub(super) stride_bytes: HashMap<(usize, usize, i64), Operand>,
    /// fp8 `mma` needs PTX ISA 8.4.
    pub(super) needs_isa_84: bool,
    /// The kernel has `wgmma` dots: `.target sm_90a`, operand buffers on 1024-byte
    /// boundaries (the descriptors' swizzle acts on address bits), and a proxy fence
    /// before each CTA barrier (shared writes of the generic proxy, `st.shared` and
    /// `cp.async`, become visible to the async proxy `wgmma` reads through).
    pub(super) wgmma: bool,
    /// `tile.load_shared` ops whose only use is a later dot in the same region with
    /// no shared-memory write or barrier in between: their loads may move to the dot.
    pub(super) deferrable: std::collections::HashSet<OpId>,
    /// The op being emitted.
    pub(super) current: OpId,
    /// The tensor maps and mbarrier ring of a kernel with TMA copies.
    pub(super) tma: Option<super::tma::Tma>,
    /// The producer and consumer roles of a warp-specialized kernel.
    pub(super) roles: Option<super::warp_spec::WarpRoles>,
    /// The thread-block cluster of a kernel with `cluster=(x, y)`.
    pub(super) cluster: Option<super::cluster::Cluster>,
}

impl<'f> Emitter<'f> {
    pub(super) fn new(f: &'f Func, target: Target, abi: &KernelAbi) -> R<Emitter<'f>> {
        let threads = match f.attr("threads").and_then(Attr::as_int) {
            Some(t) if t > 0 && (t as u32).is_power_of_two() && t <= 1024 => t as u32,
            other => {
                return Err(LowerError {
                    message: format!(
                        "`{}` has {} threads per program; the PTX backend needs a power of two up to 1024",
                        f.name,
                        other.map_or("no count of".to_string(), |t| t.to_string())
                    ),
                    range: f.loc.range,
                })
            }
        };
        let mut e = Emitter {
            f,
            target,
            threads,
            b: Builder::new(),
            exprs: ExprCache::default(),
            vals: vec![None; f.values.len()],
            maps: HashMap::new(),
            tensors: Vec::new(),
            params: Vec::new(),
            buffer_offsets: HashMap::new(),
            buffers_bytes: 0,
            scratch_bytes: 0,
            smem_base: None,
            special: HashMap::new(),
            stride_bytes: HashMap::new(),
            needs_isa_84: false,
            wgmma: f.walk().into_iter().any(|id| f.op(id).str_attr("instr") == Some("wgmma")),
            deferrable: deferrable_loads(f),
            current: OpId(0),
            tma: None,
            roles: None,
            cluster: super::cluster::Cluster::of(f),
        };
        e.bind_params(abi)?;
        e.place_buffers()?;
        e.setup_tma(abi)?;
        e.roles = super::warp_spec::WarpRoles::of(f, &mut e.b);
        Ok(e)
    }

    // ----- errors ----------------------------------------------------------------------

    pub(super) fn fail(&self, op: &Op, message: impl std::fmt::Display) -> LowerError {
        LowerError { message: format!("`{}`: {message}", op.kind.name()), range: op.loc.range }
    }

    pub(super) fn unsupported(&self, op: &Op, what: impl std::fmt::Display) -> LowerError {
        LowerError {
            message: format!("`{}` {what} is not supported by the PTX backend yet", op.kind.name()),
            range: op.loc.range,
        }
    }

    // ----- parameters and buffers ------------------------------------------------------

    pub(super) fn bind_params(&mut self, abi: &KernelAbi) -> R<()> {
        let f = self.f;
        for (index, (param, &value)) in abi.params.iter().zip(&f.params).enumerate() {
            let base = format!("p{index}_{}", sanitize(param.name()));
            let val = self.b.in_prologue(|b| -> Result<Val, String> {
                Ok(match param {
                    AbiParam::Tensor { dims, .. } => {
                        let raw = b.reg(Class::B64);
                        let ptr = b.reg(Class::B64);
                        b.ins(format!("ld.param.u64 {raw}, [{base}]"));
                        b.ins(format!("cvta.to.global.u64 {ptr}, {raw}"));
                        let mut dim_regs = Vec::new();
                        for d in 0..dims.len() {
                            let r = b.reg(Class::B64);
                            b.ins(format!("ld.param.u64 {r}, [{base}_dim{d}]"));
                            dim_regs.push(r);
                        }
                        self.params.push(format!(".param .u64 {base}"));
                        self.params.extend((0..dims.len()).map(|d| format!(".param .u64 {base}_dim{d}")));
                        self.tensors.push(TensorArg { ptr, strides: vec![None; dim_regs.len()], dims: dim_regs });
                        Val::Tensor(self.tensors.len() - 1)
                    }
                    AbiParam::Scalar { dtype, .. } => {
                        let slot = scalar_slot(*dtype);
                        let (decl, class) = match slot {
                            Slot::F32 => (".f32", Class::F32),
                            Slot::F64 => (".f64", Class::F64),
                            Slot::I32 => (".u32", Class::B32),
                            Slot::I64 | Slot::Pointer => (".u64", Class::B64),
                        };
                        self.params.push(format!(".param {decl} {base}"));
                        let r = b.reg(class);
                        b.ins(format!("ld.param{decl} {r}, [{base}]"));
                        let v = match (*dtype, class) {
                            (DType::Bool, _) => {
                                let p = b.reg(Class::Pred);
                                b.ins(format!("setp.ne.u32 {p}, {r}, 0"));
                                Operand::Reg(p)
                            }
                            (DType::I64, _) | (_, Class::F32) | (_, Class::F64) => {
                                if dtype.is_float() && *dtype != DType::F32 && *dtype != DType::F64 {
                                    round_wide(b, self.target, *dtype, Operand::Reg(r))
                                } else {
                                    Operand::Reg(r)
                                }
                            }
                            _ => {
                                // Narrower integers arrive as i64: keep the low bits.
                                let n = b.reg(Class::B32);
                                b.ins(format!("cvt.u32.u64 {n}, {r}"));
                                Operand::Reg(n)
                            }
                        };
                        Val::Scalar(v)
                    }
                    AbiParam::Index { .. } => {
                        self.params.push(format!(".param .u64 {base}"));
                        let r = b.reg(Class::B64);
                        b.ins(format!("ld.param.u64 {r}, [{base}]"));
                        Val::Scalar(Operand::Reg(r))
                    }
                })
            });
            let val = val.map_err(|message| LowerError { message, range: f.loc.range })?;
            self.vals[value.0 as usize] = Some(val);
        }
        Ok(())
    }

    /// Every `tile.alloc_shared` gets a fixed offset (128-byte aligned: the swizzle's
    /// bank pattern repeats every 128 bytes).
    /// A buffer that reuses the staging rings (`crate::tma::REUSES_STAGING`) starts where
    /// the run of staging buffers after it starts, and the next other buffer comes after
    /// whichever of the two ends last.
    pub(super) fn place_buffers(&mut self) -> R<()> {
        let mut offset: u32 = 0;
        // The end of an open union of a reusing buffer with the staging run.
        let mut union_end: Option<u32> = None;
        for id in self.f.walk() {
            let op = self.f.op(id);
            if op.kind != OpKind::AllocShared {
                continue;
            }
            let Type::Smem(s) = self.f.ty(op.results[0]) else {
                return Err(self.fail(op, "the result is not a shared buffer"));
            };
            let bytes = s.bytes().ok_or_else(|| self.fail(op, "a shared buffer with a symbolic dim"))? as u32;
            if op.attr("staging").is_none() {
                if let Some(end) = union_end.take() {
                    offset = offset.max(end);
                }
            }
            // A `wgmma` descriptor's swizzle repeats every 1024 bytes of the address.
            offset = offset.next_multiple_of(if matches!(s.swizzle, Swizzle::Wgmma(_)) { 1024 } else { 128 });
            self.buffer_offsets.insert(op.results[0], offset);
            if crate::tma::reuses_staging(op) {
                union_end = Some(offset + bytes);
            } else {
                offset += bytes;
            }
        }
        if let Some(end) = union_end {
            offset = offset.max(end);
        }
        self.buffers_bytes = offset.next_multiple_of(16);
        Ok(())
    }

    /// The shared-window address of the dynamic shared memory (computed once).
    pub(super) fn smem_base(&mut self) -> Reg {
        if let Some(r) = self.smem_base {
            return r;
        }
        let wgmma = self.wgmma;
        let r = self.b.in_prologue(|b| {
            let r = b.reg(Class::B32);
            b.ins(format!("mov.u32 {r}, {SMEM_SYMBOL}"));
            if wgmma {
                // The descriptors assume the 1024-byte alignment `.align` asks for; a
                // driver that placed the array elsewhere would swizzle other bytes.
                let (low, misaligned) = (b.reg(Class::B32), b.reg(Class::Pred));
                b.ins(format!("and.b32 {low}, {r}, 1023"));
                b.ins(format!("setp.ne.u32 {misaligned}, {low}, 0"));
                b.ins_if(misaligned, false, "trap");
            }
            r
        });
        self.smem_base = Some(r);
        r
    }

    /// Reserves `bytes` of scratch shared memory; returns its offset.
    pub(super) fn scratch(&mut self, bytes: u32) -> u32 {
        self.scratch_bytes = self.scratch_bytes.max(bytes.next_multiple_of(16));
        self.buffers_bytes
    }

    pub(super) fn special_reg(&mut self, name: &'static str) -> Reg {
        if let Some(r) = self.special.get(name) {
            return *r;
        }
        let r = self.b.in_prologue(|b| {
            let narrow = b.reg(Class::B32);
            b.ins(format!("mov.u32 {narrow}, {name}"));
            let wide = b.reg(Class::B64);
            b.ins(format!("cvt.u64.u32 {wide}, {narrow}"));
            wide
        });
        self.special.insert(name, r);
        r
    }

    /// Row-major stride of tensor dim `d`, in elements (prologue).
    pub(super) fn stride(&mut self, tensor: usize, d: usize) -> Operand {
        if let Some(s) = self.tensors[tensor].strides[d] {
            return s;
        }
        let rank = self.tensors[tensor].dims.len();
        let s = if d + 1 == rank {
            Operand::Int(1)
        } else {
            let inner = self.stride(tensor, d + 1);
            let dim = self.tensors[tensor].dims[d + 1];
            self.b.in_prologue(|b| {
                let r = b.reg(Class::B64);
                match inner {
                    Operand::Int(1) => b.ins(format!("mov.b64 {r}, {dim}")),
                    _ => b.ins(format!("mul.lo.s64 {r}, {dim}, {inner}")),
                }
                Operand::Reg(r)
            })
        };
        self.tensors[tensor].strides[d] = Some(s);
        s
    }

    // ----- values ----------------------------------------------------------------------

    pub(super) fn val(&self, op: &Op, v: ValueId) -> R<&Val> {
        self.vals[v.0 as usize].as_ref().ok_or_else(|| self.fail(op, format!("operand %{} has no value yet", v.0)))
    }

    pub(super) fn set(&mut self, v: ValueId, val: Val) {
        self.vals[v.0 as usize] = Some(val);
    }

    pub(super) fn scalar(&self, op: &Op, v: ValueId) -> R<Operand> {
        match self.val(op, v)? {
            Val::Scalar(s) => Ok(*s),
            other => Err(self.fail(op, format!("operand %{} is {}, not a scalar", v.0, kind_name(other)))),
        }
    }

    pub(super) fn tile(&self, op: &Op, v: ValueId) -> R<TileVal> {
        match self.val(op, v)? {
            Val::Tile(t) => Ok(t.clone()),
            other => Err(self.fail(op, format!("operand %{} is {}, not a tile", v.0, kind_name(other)))),
        }
    }

    /// The dtype, shape and layout a tile-typed value must have.
    pub(super) fn tile_type(&self, op: &Op, v: ValueId) -> R<(DType, Vec<i64>, Layout)> {
        let Type::Tile(t) = self.f.ty(v) else {
            return Err(self.fail(op, format!("%{} is not a tile", v.0)));
        };
        let shape = self.f.ty(v).const_dims().ok_or_else(|| self.fail(op, "a tile with a symbolic dim"))?;
        let layout = t.layout.clone().ok_or_else(|| self.fail(op, format!("tile %{} has no layout", v.0)))?;
        Ok((t.dtype, shape, layout))
    }

    pub(super) fn map(&mut self, op: &Op, layout: &Layout, shape: &[i64]) -> R<Arc<ThreadMap>> {
        let key = (layout.clone(), shape.to_vec());
        if let Some(m) = self.maps.get(&key) {
            return Ok(m.clone());
        }
        let m = ThreadMap::cached(layout, shape, self.threads)
            .map_err(|e| self.fail(op, format!("internal error: {e}")))?;
        self.maps.insert(key, m.clone());
        Ok(m)
    }

    /// A tile's elements in wide form.
    pub(super) fn wide(&mut self, t: &TileVal) -> Vec<Operand> {
        match &t.repr {
            Repr::Wide(v) => v.clone(),
            Repr::Packed(_) | Repr::Lazy(_) => {
                let words = match &t.repr {
                    Repr::Lazy(lazy) => self.load_all(lazy),
                    Repr::Packed(w) => w.clone(),
                    Repr::Wide(_) => unreachable!("matched above"),
                };
                let mut out = Vec::new();
                for w in words {
                    out.extend(self.unpack_word(t.dtype, w));
                }
                out
            }
        }
    }

    /// A tile's elements packed into `b32` words (16- and 8-bit types).
    pub(super) fn packed(&mut self, op: &Op, t: &TileVal) -> R<Vec<Operand>> {
        match &t.repr {
            Repr::Packed(w) => Ok(w.clone()),
            Repr::Lazy(lazy) => Ok(self.load_all(lazy)),
            Repr::Wide(v) => {
                let per = super::numerics::per_word(t.dtype)
                    .ok_or_else(|| self.fail(op, format!("{} elements do not pack into words", t.dtype)))?;
                if v.len() % per != 0 {
                    return Err(self.fail(op, format!("{} elements do not fill {per}-element words", v.len())));
                }
                let v = v.clone();
                Ok(v.chunks(per).map(|c| self.pack_word(t.dtype, c)).collect())
            }
        }
    }

    pub(super) fn unpack_word(&mut self, dtype: DType, w: Operand) -> Vec<Operand> {
        let b = &mut self.b;
        let w = materialize(b, Class::B32, w);
        match dtype {
            DType::BF16 => {
                let lo = b.reg(Class::F32);
                let hi = b.reg(Class::F32);
                b.ins(format!("shl.b32 {lo}, {w}, 16"));
                b.ins(format!("and.b32 {hi}, {w}, -65536"));
                vec![Operand::Reg(lo), Operand::Reg(hi)]
            }
            DType::F16 => {
                let (l, h) = (b.reg(Class::B16), b.reg(Class::B16));
                b.ins(format!("mov.b32 {{{l}, {h}}}, {w}"));
                [l, h]
                    .iter()
                    .map(|x| {
                        let f = b.reg(Class::F32);
                        b.ins(format!("cvt.f32.f16 {f}, {x}"));
                        Operand::Reg(f)
                    })
                    .collect()
            }
            DType::Int8 => (0..4)
                .map(|k| {
                    let r = b.reg(Class::B32);
                    b.ins(format!("bfe.s32 {r}, {w}, {}, 8", 8 * k));
                    Operand::Reg(r)
                })
                .collect(),
            _ => {
                // fp8: each byte through the element conversion.
                let target = self.target;
                (0..4)
                    .map(|k| {
                        let r = b.reg(Class::B32);
                        b.ins(format!("bfe.u32 {r}, {w}, {}, 8", 8 * k));
                        super::numerics::fp8_to_f32(b, target, dtype, Operand::Reg(r))
                    })
                    .collect()
            }
        }
    }

    pub(super) fn pack_word(&mut self, dtype: DType, elems: &[Operand]) -> Operand {
        let target = self.target;
        let b = &mut self.b;
        match dtype {
            DType::BF16 | DType::F16 => {
                let ty = if dtype == DType::BF16 { "bf16x2" } else { "f16x2" };
                if let (Operand::F32(lo), Operand::F32(hi)) = (elems[0], elems[1]) {
                    let bits = |v: u32| {
                        super::numerics::to_storage(&mut Builder::new(), target, dtype, Operand::F32(v))
                            .as_int()
                            .unwrap_or(0)
                    };
                    return Operand::Int(bits(lo) | (bits(hi) << 16));
                }
                let lo = materialize(b, Class::F32, elems[0]);
                let hi = materialize(b, Class::F32, elems[1]);
                let w = b.reg(Class::B32);
                b.ins(format!("cvt.rn.{ty}.f32 {w}, {hi}, {lo}"));
                Operand::Reg(w)
            }
            _ => {
                let bytes: Vec<Reg> = elems
                    .iter()
                    .map(|&e| {
                        let s = super::numerics::to_storage(b, target, dtype, e);
                        materialize(b, Class::B32, s)
                    })
                    .collect();
                Operand::Reg(pack_bytes(b, &bytes))
            }
        }
    }

    // ----- the body --------------------------------------------------------------------

    pub(super) fn run(&mut self) -> R<()> {
        let body = self.f.body.clone();
        self.region(&body)?;
        Ok(())
    }

    /// Emits a region's ops; its `scf.yield` operands are returned (not emitted).
    pub(super) fn region(&mut self, region: &Region) -> R<Vec<ValueId>> {
        for &id in &region.ops {
            let op = self.f.op(id);
            self.b.loc = Some(op.loc.clone());
            if op.kind == OpKind::Yield {
                return Ok(op.operands.clone());
            }
            if self.role_skips(id) {
                continue;
            }
            self.op(id)?;
        }
        Ok(Vec::new())
    }

    pub(super) fn op(&mut self, id: OpId) -> R<()> {
        self.current = id;
        let op = self.f.op(id);
        match op.kind {
            OpKind::Return => {
                self.leave_cluster(true);
                self.b.ins("ret")
            }
            OpKind::For if op.attr(crate::warp_spec::WARP_SPECIALIZED).is_some() => self.specialized_loop(op)?,
            OpKind::For => self.for_loop(op)?,
            OpKind::If => self.if_op(op)?,
            OpKind::ProgramId | OpKind::NumPrograms => {
                let axis = op.int_attr("axis").unwrap_or(0);
                let name = match (op.kind, axis) {
                    (OpKind::ProgramId, 0) => "%ctaid.x",
                    (OpKind::ProgramId, 1) => "%ctaid.y",
                    (OpKind::ProgramId, 2) => "%ctaid.z",
                    (OpKind::NumPrograms, 0) => "%nctaid.x",
                    (OpKind::NumPrograms, 1) => "%nctaid.y",
                    (OpKind::NumPrograms, 2) => "%nctaid.z",
                    _ => return Err(self.fail(op, format!("grid axis {axis} does not exist (0, 1 or 2)"))),
                };
                let r = self.special_reg(name);
                self.set(op.results[0], Val::Scalar(Operand::Reg(r)));
            }
            OpKind::Constant => self.constant(op)?,
            OpKind::TensorDim => {
                let axis = op.int_attr("axis").unwrap_or(0) as usize;
                let Val::Tensor(t) = self.val(op, op.operands[0])?.clone() else {
                    return Err(self.fail(op, "the operand is not a tensor parameter"));
                };
                let dim = *self.tensors[t]
                    .dims
                    .get(axis)
                    .ok_or_else(|| self.fail(op, format!("the tensor has no dim {axis}")))?;
                self.set(op.results[0], Val::Scalar(Operand::Reg(dim)));
            }
            k if k.is_binary() => self.elementwise(op)?,
            k if k.is_unary_math() => self.elementwise(op)?,
            OpKind::Cmp | OpKind::Select | OpKind::Cast => self.elementwise(op)?,
            OpKind::Splat => {
                let s = self.scalar(op, op.operands[0])?;
                let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
                let n = self.map(op, &layout, &shape)?.len();
                let repr = Repr::Wide(vec![s; n]);
                self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr }));
            }
            OpKind::Full => {
                let (dtype, shape, layout) = self.tile_type(op, op.results[0])?;
                let value = op.attr("value").and_then(Attr::as_float).unwrap_or(0.0);
                let imm = const_operand(dtype, value);
                let n = self.map(op, &layout, &shape)?.len();
                let repr = Repr::Wide(vec![imm; n]);
                self.set(op.results[0], Val::Tile(TileVal { dtype, shape, layout, repr }));
            }
            OpKind::Arange => self.arange(op)?,
            OpKind::Rand => self.rand(op)?,
            OpKind::Broadcast | OpKind::ExpandDims | OpKind::Transpose | OpKind::ConvertLayout => {
                self.reshape_op(op)?
            }
            OpKind::Reduce => self.reduce(op)?,
            OpKind::CausalMask => self.causal_mask(op)?,
            OpKind::Dot if op.str_attr("instr") == Some("wgmma") => {
                self.take_turn_before(id);
                self.wgmma_dot(op)?;
                self.release_after(id);
            }
            OpKind::Dot => self.dot(op)?,
            OpKind::View => self.view(op)?,
            OpKind::Load => self.load(op)?,
            OpKind::Store => self.store(op)?,
            OpKind::Gather => self.gather(op)?,
            OpKind::Scatter => self.scatter(op)?,
            OpKind::AllocShared => {
                let Type::Smem(ty) = self.f.ty(op.results[0]).clone() else {
                    return Err(self.fail(op, "the result is not a shared buffer"));
                };
                let offset = self.buffer_offsets[&op.results[0]];
                let addr = self.smem_base();
                self.set(op.results[0], Val::Smem(SmemVal { ty, addr, imm: offset as i64 }));
            }
            OpKind::SmemSlot => self.smem_slot(op)?,
            OpKind::LoadShared => self.load_shared(op)?,
            OpKind::StoreShared => self.store_shared(op)?,
            OpKind::CpAsync if crate::tma::is_tma_copy(op) => self.tma_copy(op)?,
            OpKind::CpAsync => self.cp_async(op)?,
            OpKind::TmaStore => self.tma_store(op)?,
            // With TMA copies, a group is also an mbarrier phase (`super::tma`).
            OpKind::AsyncCommit => {
                self.b.ins("cp.async.commit_group");
                self.tma_commit();
            }
            OpKind::AsyncWait => {
                let pending = op.int_attr("pending").unwrap_or(0).clamp(0, 7);
                self.b.ins(format!("cp.async.wait_group {pending}"));
                self.tma_wait(pending);
            }
            OpKind::Barrier => {
                if self.wgmma {
                    self.b.ins("fence.proxy.async.shared::cta");
                }
                self.sync_threads()
            }
            _ => return Err(self.unsupported(op, "")),
        }
        Ok(())
    }

    // ----- control flow ----------------------------------------------------------------

    pub(super) fn view(&mut self, op: &Op) -> R<()> {
        let Val::Tensor(t) = self.val(op, op.operands[0])?.clone() else {
            return Err(self.fail(op, "the operand is not a tensor parameter"));
        };
        let rank = self.tensors[t].dims.len();
        let offsets: Vec<Operand> = op.operands[1..].iter().map(|&v| self.scalar(op, v)).collect::<R<_>>()?;
        if offsets.len() != rank {
            return Err(self.fail(op, format!("{} offsets for a tensor of rank {rank}", offsets.len())));
        }
        let sizes: Vec<i64> = match op.attr("sizes") {
            Some(Attr::Dims(d)) => {
                d.iter().map(|d| d.as_const()).collect::<Option<_>>().ok_or_else(|| self.fail(op, "symbolic sizes"))?
            }
            Some(Attr::Ints(v)) => v.clone(),
            _ => return Err(self.fail(op, "no `sizes`")),
        };
        let squeeze: Vec<i64> = match op.attr("squeeze") {
            Some(Attr::Ints(v)) => v.clone(),
            _ => Vec::new(),
        };
        let dims = (0..rank).filter(|d| !squeeze.contains(&(*d as i64))).collect();
        self.set(op.results[0], Val::View(ViewVal { tensor: t, offsets, sizes, dims }));
        Ok(())
    }

    pub(super) fn smem_slot(&mut self, op: &Op) -> R<()> {
        let Val::Smem(ring) = self.val(op, op.operands[0])?.clone() else {
            return Err(self.fail(op, "the operand is not a shared buffer"));
        };
        let index = self.scalar(op, op.operands[1])?;
        let slot_bytes = ring.ty.slot_bytes().ok_or_else(|| self.fail(op, "a shared buffer with a symbolic dim"))?;
        let ty = SmemType { stages: 1, ..ring.ty.clone() };
        let val = match index {
            Operand::Int(i) => SmemVal { ty, addr: ring.addr, imm: ring.imm + i * slot_bytes as i64 },
            idx => {
                let narrow = self.b.reg(Class::B32);
                self.b.ins(format!("cvt.u32.u64 {narrow}, {idx}"));
                let addr = self.b.reg(Class::B32);
                self.b.ins(format!("mad.lo.u32 {addr}, {narrow}, {slot_bytes}, {}", ring.addr));
                SmemVal { ty, addr, imm: ring.imm }
            }
        };
        self.set(op.results[0], Val::Smem(val));
        Ok(())
    }

    // ----- the module ------------------------------------------------------------------

    pub(super) fn finish(mut self, abi: KernelAbi) -> TargetCode {
        let smem_bytes = if self.scratch_bytes > 0 || self.smem_base.is_some() {
            (self.buffers_bytes + self.scratch_bytes) as u64
        } else {
            0
        };
        let version = if self.needs_isa_84 { "8.4" } else { "8.0" };
        let mut lines: Vec<(String, Option<crate::ir::Loc>)> = Vec::new();
        let mut header = String::new();
        let _ = writeln!(header, "//");
        let _ = writeln!(header, "// Generated by Tessera: kernel `{}` for {}", self.f.name, self.target);
        if let Some(config) = self.f.attr("config").and_then(Attr::as_str) {
            let _ = writeln!(header, "// configuration: {config}");
        }
        let _ = writeln!(header, "//");
        let _ = writeln!(header);
        let _ = writeln!(header, ".version {version}");
        // `wgmma` exists only in the architecture-specific sm_90a (PTX ISA 8.0).
        let target = if self.wgmma { "sm_90a" } else { self.target.name() };
        let _ = writeln!(header, ".target {target}");
        let _ = writeln!(header, ".address_size 64");
        let _ = writeln!(header);
        if smem_bytes > 0 {
            let align = if self.wgmma { 1024 } else { 128 };
            let _ = writeln!(header, ".extern .shared .align {align} .b8 {SMEM_SYMBOL}[];");
            let _ = writeln!(header);
        }
        let _ = writeln!(header, ".visible .entry {}(", self.f.name);
        for (i, p) in self.params.iter().enumerate() {
            let comma = if i + 1 < self.params.len() { "," } else { "" };
            let _ = writeln!(header, "\t{p}{comma}");
        }
        let _ = writeln!(header, ")");
        let launched = self.threads + crate::warp_spec::producer_threads(self.f) as u32;
        let _ = writeln!(header, ".maxntid {launched}, 1, 1");
        // Under `setmaxnreg` one program holds the SM's registers: ptxas allocates for one
        // CTA per SM at entry (65536 / threads) and keeps the `setmaxnreg` instructions;
        // without the bound it allocates what the code needs and drops them.
        if crate::warp_spec::producer_threads(self.f) > 0 {
            let _ = writeln!(header, ".minnctapersm 1");
        }
        if let Some(c) = &self.cluster {
            let _ = writeln!(header, "{}", c.directive());
        }
        let _ = write!(header, "{{");
        for l in header.lines() {
            lines.push((l.to_string(), None));
        }
        for d in self.b.declarations() {
            lines.push((d, None));
        }
        let (prologue, body) = self.b.take_lines();
        lines.extend(prologue);
        lines.extend(body);
        lines.push(("}".to_string(), None));
        let mut text = String::new();
        let mut line_locs = Vec::with_capacity(lines.len());
        for (l, loc) in lines {
            text.push_str(&l);
            text.push('\n');
            line_locs.push(loc);
        }
        TargetCode { target: self.target, entry: self.f.name.to_string(), text, line_locs, abi, smem_bytes }
    }
}

/// Loads that may be deferred to their dot (see `Emitter::deferrable`).
pub(super) fn deferrable_loads(f: &Func) -> std::collections::HashSet<OpId> {
    let mut uses = vec![0u32; f.values.len()];
    for id in f.walk() {
        for &o in &f.op(id).operands {
            uses[o.0 as usize] += 1;
        }
    }
    pub(super) fn touches_shared(f: &Func, id: OpId) -> bool {
        let op = f.op(id);
        matches!(
            op.kind,
            OpKind::Barrier | OpKind::CpAsync | OpKind::StoreShared | OpKind::AsyncWait | OpKind::TmaStore
        ) || op.regions.iter().any(|r| r.ops.iter().any(|&i| touches_shared(f, i)))
    }
    let mut out = std::collections::HashSet::new();
    let mut visit = vec![f.body.clone()];
    while let Some(region) = visit.pop() {
        for (pos, &id) in region.ops.iter().enumerate() {
            let op = f.op(id);
            visit.extend(op.regions.iter().cloned());
            if op.kind != OpKind::LoadShared || uses[op.results[0].0 as usize] != 1 {
                continue;
            }
            let result = op.results[0];
            for &later in &region.ops[pos + 1..] {
                let l = f.op(later);
                if l.operands.contains(&result) {
                    if l.kind == OpKind::Dot && l.operands[..2].contains(&result) {
                        out.insert(id);
                    }
                    break;
                }
                if touches_shared(f, later) {
                    break;
                }
            }
        }
    }
    out
}

pub(super) fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

pub(super) fn kind_name(v: &Val) -> &'static str {
    match v {
        Val::Scalar(_) => "a scalar",
        Val::Tile(_) => "a tile",
        Val::Tensor(_) => "a tensor",
        Val::View(_) => "a view",
        Val::Smem(_) => "a shared buffer",
    }
}

pub(super) fn class_of_operand_hint(x: Operand) -> Option<Class> {
    match x {
        Operand::Reg(r) => Some(r.class),
        Operand::F32(_) => Some(Class::F32),
        Operand::F64(_) => Some(Class::F64),
        Operand::Int(_) => None,
    }
}

/// A constant of `dtype` as an immediate operand of its wide class.
pub(super) fn const_operand(dtype: DType, v: f64) -> Operand {
    match wide_class(dtype) {
        Class::F32 | Class::F64 => float_imm(dtype, v),
        Class::Pred => Operand::Int((v != 0.0) as i64),
        _ => Operand::Int(dtype.wrap_int(v as i64)),
    }
}

pub(super) fn fold_int(kind: OpKind, x: i64, y: i64) -> Option<i64> {
    Some(match kind {
        OpKind::Add => x.wrapping_add(y),
        OpKind::Sub => x.wrapping_sub(y),
        OpKind::Mul => x.wrapping_mul(y),
        OpKind::Div if y != 0 => x.wrapping_div(y),
        OpKind::FloorDiv if y != 0 => tessera_frontend::arith::floor_div_i64(x, y),
        OpKind::Rem if y != 0 => tessera_frontend::arith::floor_rem_i64(x, y),
        OpKind::Max => x.max(y),
        OpKind::Min => x.min(y),
        OpKind::And => x & y,
        OpKind::Or => x | y,
        OpKind::Xor => x ^ y,
        OpKind::Shl => tessera_frontend::arith::shl_i64(x, y),
        OpKind::Shr => tessera_frontend::arith::shr_i64(x, y),
        _ => return None,
    })
}

pub(super) fn cvt_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        DType::I64 => "s64",
        DType::I32 | DType::Int8 | DType::Int4 => "s32",
        _ => "f32",
    }
}

pub(crate) fn mov(b: &mut Builder, dst: Reg, src: Operand) {
    match dst.class {
        Class::Pred => {
            let s = materialize(b, Class::Pred, src);
            b.ins(format!("mov.pred {dst}, {s}"));
        }
        Class::B16 => b.ins(format!("mov.b16 {dst}, {src}")),
        Class::B32 => b.ins(format!("mov.b32 {dst}, {src}")),
        Class::F32 => {
            let src = match src {
                Operand::Int(v) => Operand::f32(v as f32),
                other => other,
            };
            b.ins(format!("mov.f32 {dst}, {src}"))
        }
        Class::B64 => b.ins(format!("mov.b64 {dst}, {src}")),
        Class::F64 => {
            let src = match src {
                Operand::Int(v) => Operand::F64((v as f64).to_bits()),
                other => other,
            };
            b.ins(format!("mov.f64 {dst}, {src}"))
        }
    }
}

pub(super) fn select_pred(b: &mut Builder, c: Reg, x: Reg, y: Reg) -> Reg {
    let (t, e, r) = (b.reg(Class::Pred), b.reg(Class::Pred), b.reg(Class::Pred));
    b.ins(format!("and.pred {t}, {c}, {x}"));
    b.ins(format!("and.pred {e}, !{c}, {y}"));
    b.ins(format!("or.pred {r}, {t}, {e}"));
    r
}

/// `x^y` in f32: small integer exponents multiply exactly; otherwise
/// `2^(y log2 |x|)` with the sign of a negative base for odd integer `y`, NaN for a
/// negative base and a fractional `y`, and `x^0 = 1`.
pub(super) fn pow_f32(b: &mut Builder, r: Reg, x: Reg, y: Operand) {
    if let Operand::F32(bits) = y {
        let e = f32::from_bits(bits);
        match e {
            0.0 => return b.ins(format!("mov.f32 {r}, 0f3F800000")),
            1.0 => return b.ins(format!("mov.f32 {r}, {x}")),
            2.0 => return b.ins(format!("mul.f32 {r}, {x}, {x}")),
            3.0 => {
                b.ins(format!("mul.f32 {r}, {x}, {x}"));
                return b.ins(format!("mul.f32 {r}, {r}, {x}"));
            }
            0.5 => return b.ins(format!("sqrt.rn.f32 {r}, {x}")),
            -1.0 => return b.ins(format!("rcp.rn.f32 {r}, {x}")),
            _ => {}
        }
    }
    let y = materialize(b, Class::F32, y);
    let magnitude = b.reg(Class::F32);
    b.ins(format!("abs.f32 {magnitude}, {x}"));
    b.ins(format!("lg2.approx.f32 {r}, {magnitude}"));
    b.ins(format!("mul.f32 {r}, {r}, {y}"));
    b.ins(format!("ex2.approx.f32 {r}, {r}"));
    pow_signs(b, DType::F32, r, x, y);
}

/// The sign rules of `r = x^y` (C's `pow`) on `r = |x|^y` in f32 or f64: a negative base
/// keeps its sign for odd integer `y` and drops it for even ones, a fractional `y` of a
/// finite negative base is NaN, and `x^0 = 1^y = 1` (NaN too).
pub(super) fn pow_signs(b: &mut Builder, dtype: DType, r: Reg, x: Reg, y: Reg) {
    let class = wide_class(dtype);
    let f = arith_type(dtype);
    let c = |v: f64| float_imm(dtype, v);
    let (zero, one, half_one, nan_value, minus_infinity) = (c(0.0), c(1.0), c(0.5), c(f64::NAN), c(f64::NEG_INFINITY));
    let (negative, integral, odd, unit) =
        (b.reg(Class::Pred), b.reg(Class::Pred), b.reg(Class::Pred), b.reg(Class::Pred));
    let whole = b.reg(class);
    b.ins(format!("setp.lt.{f} {negative}, {x}, {zero}"));
    b.ins(format!("cvt.rni.{f}.{f} {whole}, {y}"));
    b.ins(format!("setp.eq.{f} {integral}, {whole}, {y}"));
    let half = b.reg(class);
    b.ins(format!("mul.{f} {half}, {y}, {half_one}"));
    b.ins(format!("cvt.rni.{f}.{f} {whole}, {half}"));
    b.ins(format!("setp.neu.{f} {odd}, {whole}, {half}"));
    b.ins(format!("and.pred {odd}, {odd}, {integral}"));
    b.ins(format!("and.pred {odd}, {odd}, {negative}"));
    let flipped = b.reg(class);
    b.ins(format!("neg.{f} {flipped}, {r}"));
    b.ins(format!("selp.{f} {r}, {flipped}, {r}, {odd}"));
    let nan = b.reg(Class::Pred);
    b.ins(format!("not.pred {nan}, {integral}"));
    b.ins(format!("and.pred {nan}, {nan}, {negative}"));
    // (-inf)^y is inf or 0 for every fractional y, as |x|^y already is.
    let finite = b.reg(Class::Pred);
    b.ins(format!("setp.ne.{f} {finite}, {x}, {minus_infinity}"));
    b.ins(format!("and.pred {nan}, {nan}, {finite}"));
    b.ins(format!("selp.{f} {r}, {nan_value}, {r}, {nan}"));
    b.ins(format!("setp.eq.{f} {unit}, {y}, {zero}"));
    b.ins(format!("selp.{f} {r}, {one}, {r}, {unit}"));
    b.ins(format!("setp.eq.{f} {unit}, {x}, {one}"));
    b.ins(format!("selp.{f} {r}, {one}, {r}, {unit}"));
}

pub(super) fn sigmoid(b: &mut Builder, r: Reg, x: Reg) {
    // 1 / (1 + 2^(-x log2 e)); an overflowing exponential gives 0 as it should.
    b.ins(format!("mul.f32 {r}, {x}, {}", Operand::f32(-std::f32::consts::LOG2_E)));
    b.ins(format!("ex2.approx.ftz.f32 {r}, {r}"));
    b.ins(format!("add.f32 {r}, {r}, 0f3F800000"));
    b.ins(format!("rcp.approx.ftz.f32 {r}, {r}"));
}

/// Four bytes (low byte of each register) into one word, first in the low bits.
pub(crate) fn pack_bytes(b: &mut Builder, bytes: &[Reg]) -> Reg {
    let lo = b.reg(Class::B32);
    let hi = b.reg(Class::B32);
    let w = b.reg(Class::B32);
    b.ins(format!("prmt.b32 {lo}, {}, {}, {}", bytes[0], bytes[1], 0x0040));
    b.ins(format!("prmt.b32 {hi}, {}, {}, {}", bytes[2], bytes[3], 0x0040));
    b.ins(format!("prmt.b32 {w}, {lo}, {hi}, {}", 0x5410));
    w
}
