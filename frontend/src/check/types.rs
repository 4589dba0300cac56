//! The types the checker gives to expressions.

use std::fmt;

use super::dims::Dim;
use super::dtype::{DType, ElemType};
use super::schedule::ScheduleValue;
use crate::syntax::ast::FloatLit;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum TensorKind {
    Tensor,
    KTile,
    KVCache,
    OptimizerState,
}

impl TensorKind {
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Tensor => "Tensor",
            TensorKind::KTile => "KTile",
            TensorKind::KVCache => "KVCache",
            TensorKind::OptimizerState => "OptimizerState",
        }
    }
}

/// A device tensor: rank, symbolic dims, element type.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorType {
    pub kind: TensorKind,
    pub dims: Vec<Dim>,
    pub elem: ElemType,
}

impl TensorType {
    pub fn new(dims: Vec<Dim>, elem: ElemType) -> TensorType {
        TensorType { kind: TensorKind::Tensor, dims, elem }
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }
}

pub fn fmt_dims(dims: &[Dim]) -> String {
    format!("[{}]", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.kind.name())?;
        // A KV cache's fifth dim is its current length, shown after the annotation's form.
        let cache_len = (self.kind == TensorKind::KVCache && self.dims.len() == 5).then(|| &self.dims[4]);
        let shown = if cache_len.is_some() { &self.dims[..4] } else { &self.dims[..] };
        for d in shown {
            if d.as_const().is_some() {
                write!(f, "{d}, ")?;
            } else {
                write!(f, "\"{d}\", ")?;
            }
        }
        write!(f, "{}]", self.elem)?;
        if let Some(len) = cache_len {
            write!(f, " (length {len})")?;
        }
        Ok(())
    }
}

/// A register tile inside a kernel.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TileType {
    pub dims: Vec<Dim>,
    pub elem: ElemType,
}

impl fmt::Display for TileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        if dims.is_empty() {
            write!(f, "tile<{}>", self.elem)
        } else {
            write!(f, "tile<{}x{}>", dims.join("x"), self.elem)
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Swizzle {
    None,
    Xor,
}

impl Swizzle {
    pub fn name(self) -> &'static str {
        match self {
            Swizzle::None => "none",
            Swizzle::Xor => "xor",
        }
    }
}

/// A shared-memory buffer from `tile.alloc_shared`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SharedType {
    pub dims: Vec<Dim>,
    pub dtype: DType,
    pub swizzle: Swizzle,
    pub pad: i64,
}

impl fmt::Display for SharedType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        write!(f, "smem<{}x{}", dims.join("x"), self.dtype)?;
        if self.swizzle == Swizzle::Xor {
            f.write_str(", swizzle=xor")?;
        }
        if self.pad != 0 {
            write!(f, ", pad={}", self.pad)?;
        }
        f.write_str(">")
    }
}

/// The builtin namespaces reachable by name (`tile`, `ts`, `dist`, ...).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Namespace {
    /// `tessera` (or its alias): every built-in name.
    Tessera,
    Tile,
    Dist,
    Verify,
    Stdlib,
    /// `kernel` as a decorator namespace (`kernel.autotune`).
    Kernel,
}

impl Namespace {
    pub fn name(self) -> &'static str {
        match self {
            Namespace::Tessera => "tessera",
            Namespace::Tile => "tile",
            Namespace::Dist => "dist",
            Namespace::Verify => "verify",
            Namespace::Stdlib => "tessera.stdlib",
            Namespace::Kernel => "kernel",
        }
    }
}

/// What iterating a `for` loop gives.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum LoopKind {
    /// `tile.parallel`: a grid axis.
    Parallel,
    /// `tile.range` / `tile.range_n`: sequential, pipelined.
    Sequential,
    /// `range(...)`: a compile-time unrolled loop.
    Unrolled,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MeshValue {
    pub axes: Vec<String>,
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Ty {
    /// Unknown because an error was already reported (or not inferable): never
    /// the cause of another diagnostic.
    Unknown,
    Tensor(TensorType),
    /// A slice of a global tensor inside a kernel; loaded when used as a value.
    View(TensorType),
    Tile(TileType),
    Shared(SharedType),
    /// A Python-style integer with its symbolic value when known.
    Int(Option<Dim>),
    Float(Option<FloatLit>),
    Bool(Option<bool>),
    /// A typed scalar (a parameter `alpha: f32`, or a scalar derived from one).
    Scalar(ElemType),
    Str(Option<String>),
    NoneVal,
    Tuple(Vec<Ty>),
    List(Vec<Ty>),
    Dict(Vec<(String, Ty)>),
    /// A dtype (with policies) used as a value: `f32`, `bf16 @accum(f32)`.
    DType(ElemType),
    Namespace(Namespace),
    /// A built-in function or object, by its path (`tile.load`, `gelu`, `Tensor`).
    Builtin(&'static str),
    /// A user function by name.
    Function(String),
    /// `grad(f, wrt=...)`: a function returning one gradient per selected parameter.
    Grad {
        of: String,
        wrt: Vec<String>,
    },
    /// `vmap(f, in_axes=..., out_axes=...)`: `f` mapped over one axis of its arguments
    /// (`check::ops::transforms`): an axis or None per parameter, an axis per output
    /// (one entry: every output).
    Vmap {
        of: String,
        in_axes: Vec<Option<i64>>,
        out_axes: Vec<i64>,
    },
    /// `checkpoint(f)` / `remat(f)`: `f`, whose values `grad` recomputes in the backward
    /// pass instead of keeping them from the forward one.
    Checkpoint {
        of: String,
    },
    /// `custom_vjp(f, backward)`: `f`, whose gradients `grad` takes from
    /// `backward(*args, g)` instead of differentiating `f`'s body.
    CustomVjp {
        of: String,
        backward: String,
    },
    /// `dist.pipeline(stage, stages=S, microbatches=M, axis="pp")`: `stage` applied
    /// `stages` times, stage k with the k-th slice of each stacked parameter, to each
    /// of `microbatches` slices of the first argument's dim 0 (`check::ops::pipeline`).
    Pipeline {
        of: String,
        stages: i64,
        microbatches: i64,
        axis: String,
    },
    Schedule(Box<ScheduleValue>),
    /// The result of `tile.context()`.
    Context,
    Range(LoopKind),
    Slice,
    Mesh(MeshValue),
    ShardSpec {
        partition: Vec<String>,
        mesh_axes: Vec<String>,
    },
    DistTensor(TensorType),
    /// A method bound to its receiver (`base.with_block`, `cache.append`).
    Method {
        recv: Box<Ty>,
        name: String,
    },
}

impl Ty {
    pub fn is_unknown(&self) -> bool {
        matches!(self, Ty::Unknown)
    }

    /// Dims and element type of anything tensor-like.
    pub fn shape(&self) -> Option<(&[Dim], &ElemType)> {
        match self {
            Ty::Tensor(t) | Ty::View(t) | Ty::DistTensor(t) => Some((&t.dims, &t.elem)),
            Ty::Tile(t) => Some((&t.dims, &t.elem)),
            _ => None,
        }
    }

    pub fn is_scalar_number(&self) -> bool {
        matches!(self, Ty::Int(_) | Ty::Float(_) | Ty::Bool(_) | Ty::Scalar(_))
    }

    pub fn int_value(&self) -> Option<&Dim> {
        match self {
            Ty::Int(Some(d)) => Some(d),
            _ => None,
        }
    }

    pub fn const_int(&self) -> Option<i64> {
        self.int_value().and_then(Dim::as_const)
    }

    /// A short description for messages ("a tile", "an int").
    pub fn kind_name(&self) -> &'static str {
        match self {
            Ty::Unknown => "a value",
            Ty::Tensor(_) | Ty::DistTensor(_) => "a tensor",
            Ty::View(_) => "a tensor slice",
            Ty::Tile(_) => "a tile",
            Ty::Shared(_) => "a shared-memory buffer",
            Ty::Int(_) => "an int",
            Ty::Float(_) => "a float",
            Ty::Bool(_) => "a bool",
            Ty::Scalar(_) => "a scalar",
            Ty::Str(_) => "a string",
            Ty::NoneVal => "None",
            Ty::Tuple(_) => "a tuple",
            Ty::List(_) => "a list",
            Ty::Dict(_) => "a dict",
            Ty::DType(_) => "a dtype",
            Ty::Namespace(_) => "a namespace",
            Ty::Builtin(_)
            | Ty::Function(_)
            | Ty::Grad { .. }
            | Ty::Vmap { .. }
            | Ty::Checkpoint { .. }
            | Ty::CustomVjp { .. }
            | Ty::Pipeline { .. } => "a function",
            Ty::Schedule(_) => "a schedule",
            Ty::Context => "a schedule context",
            Ty::Range(_) => "a range",
            Ty::Slice => "a slice",
            Ty::Mesh(_) => "a device mesh",
            Ty::ShardSpec { .. } => "a shard spec",
            Ty::Method { .. } => "a method",
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Unknown => f.write_str("{unknown}"),
            Ty::Tensor(t) | Ty::View(t) => write!(f, "{t}"),
            Ty::DistTensor(t) => write!(f, "dist.{t}"),
            Ty::Tile(t) => write!(f, "{t}"),
            Ty::Shared(s) => write!(f, "{s}"),
            Ty::Int(Some(d)) if d.is_const() => write!(f, "int = {d}"),
            Ty::Int(Some(d)) => write!(f, "int ({d})"),
            Ty::Int(None) => f.write_str("int"),
            Ty::Float(Some(v)) => write!(f, "float = {:?}", v.get()),
            Ty::Float(None) => f.write_str("float"),
            Ty::Bool(Some(b)) => write!(f, "bool = {}", if *b { "True" } else { "False" }),
            Ty::Bool(None) => f.write_str("bool"),
            Ty::Scalar(e) => write!(f, "{e}"),
            Ty::Str(Some(s)) => write!(f, "str = {s:?}"),
            Ty::Str(None) => f.write_str("str"),
            Ty::NoneVal => f.write_str("None"),
            Ty::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(|t| t.to_string()).collect();
                if parts.len() == 1 {
                    write!(f, "({},)", parts[0])
                } else {
                    write!(f, "({})", parts.join(", "))
                }
            }
            Ty::List(items) => {
                let parts: Vec<String> = items.iter().map(|t| t.to_string()).collect();
                write!(f, "[{}]", parts.join(", "))
            }
            Ty::Dict(items) => {
                let parts: Vec<String> = items.iter().map(|(k, t)| format!("{k}: {t}")).collect();
                write!(f, "dict({})", parts.join(", "))
            }
            Ty::DType(e) => write!(f, "dtype {e}"),
            Ty::Namespace(ns) => write!(f, "namespace {}", ns.name()),
            Ty::Builtin(path) => write!(f, "builtin {path}"),
            Ty::Function(name) => write!(f, "function {name}"),
            Ty::Grad { of, wrt } if wrt.is_empty() => write!(f, "grad({of})"),
            Ty::Grad { of, wrt } => write!(f, "grad({of}, wrt={wrt:?})"),
            Ty::Vmap { of, in_axes, out_axes } => write!(f, "{}", super::ops::vmap_text(of, in_axes, out_axes)),
            Ty::Checkpoint { of } => write!(f, "checkpoint({of})"),
            Ty::CustomVjp { of, backward } => write!(f, "custom_vjp({of}, {backward})"),
            Ty::Pipeline { of, stages, microbatches, axis } => {
                write!(f, "dist.pipeline({of}, stages={stages}, microbatches={microbatches}, axis=\"{axis}\")")
            }
            Ty::Schedule(s) => write!(f, "{s}"),
            Ty::Context => f.write_str("schedule context"),
            Ty::Range(LoopKind::Parallel) => f.write_str("tile.parallel range"),
            Ty::Range(LoopKind::Sequential) => f.write_str("tile.range"),
            Ty::Range(LoopKind::Unrolled) => f.write_str("range"),
            Ty::Slice => f.write_str("slice"),
            Ty::Mesh(m) => write!(f, "mesh{:?} over {:?}", m.shape, m.axes),
            Ty::ShardSpec { partition, mesh_axes } => {
                write!(f, "ShardSpec(partition={partition:?}, mesh_axes={mesh_axes:?})")
            }
            Ty::Method { recv, name } => write!(f, "method {name} of {}", recv.kind_name()),
        }
    }
}
