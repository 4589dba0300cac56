//! IR types. Dims are the frontend's symbolic polynomials: at Graph IR a tile may be
//! `[BM, BN]`; from Schedule IR on, tile dims are constants (the verifier checks it).

use std::fmt;

use tessera_frontend::check::{DType, Dim, Policy};

use super::layout::Layout;

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Type {
    /// A machine integer for sizes, offsets and loop indices.
    Index,
    /// A scalar value of a dtype (`f32` parameter, a reduced value, a bool flag).
    Scalar(DType),
    /// A tensor in global memory (kernel parameter, graph value).
    Tensor(TensorType),
    /// A rectangular slice of a global tensor, with runtime offsets.
    View(ViewType),
    /// A register tile.
    Tile(TileType),
    /// A shared-memory buffer.
    Smem(SmemType),
    /// An ordering token (randomness, async copy groups).
    Token,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorType {
    pub dims: Vec<Dim>,
    pub dtype: DType,
    pub policies: Vec<Policy>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ViewType {
    pub dims: Vec<Dim>,
    pub dtype: DType,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TileType {
    pub dims: Vec<Dim>,
    pub dtype: DType,
    /// How the elements are spread over threads (set in Tile IR).
    pub layout: Option<Layout>,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Swizzle {
    None,
    /// XOR of the 16-byte chunk index with the row (CUTLASS `Swizzle<3,4,3>` for
    /// 128-byte rows of 16-bit data).
    Xor,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SmemType {
    pub dims: Vec<Dim>,
    pub dtype: DType,
    pub swizzle: Swizzle,
    /// Elements added to each row.
    pub pad: u32,
    /// Copies of the buffer for a pipelined loop (a ring indexed by iteration).
    pub stages: u32,
}

impl SmemType {
    /// Bytes of all stages (0 when a dim is not a constant).
    pub fn bytes(&self) -> Option<u64> {
        let (rows, row_len) = match self.dims.as_slice() {
            [] => (1, 1),
            [n] => (1, n.as_const()?),
            dims => {
                let row_len = dims.last()?.as_const()?;
                let rows: i64 = dims[..dims.len() - 1].iter().map(|d| d.as_const()).product::<Option<i64>>()?;
                (rows, row_len)
            }
        };
        let elements = rows as u64 * (row_len as u64 + self.pad as u64);
        Some(elements * self.dtype.bytes() as u64 * self.stages.max(1) as u64)
    }
}

impl Type {
    pub fn tile(dims: Vec<Dim>, dtype: DType) -> Type {
        Type::Tile(TileType { dims, dtype, layout: None })
    }

    pub fn dtype(&self) -> Option<DType> {
        match self {
            Type::Scalar(d) => Some(*d),
            Type::Tensor(t) => Some(t.dtype),
            Type::View(v) => Some(v.dtype),
            Type::Tile(t) => Some(t.dtype),
            Type::Smem(s) => Some(s.dtype),
            Type::Index | Type::Token => None,
        }
    }

    pub fn dims(&self) -> &[Dim] {
        match self {
            Type::Tensor(t) => &t.dims,
            Type::View(v) => &v.dims,
            Type::Tile(t) => &t.dims,
            Type::Smem(s) => &s.dims,
            _ => &[],
        }
    }

    pub fn as_tile(&self) -> Option<&TileType> {
        match self {
            Type::Tile(t) => Some(t),
            _ => None,
        }
    }

    /// Constant dims, if every dim is a constant.
    pub fn const_dims(&self) -> Option<Vec<i64>> {
        self.dims().iter().map(|d| d.as_const()).collect()
    }
}

fn write_dims(f: &mut fmt::Formatter<'_>, dims: &[Dim]) -> fmt::Result {
    for d in dims {
        match d.as_const() {
            Some(c) => write!(f, "{c}x")?,
            None if d.as_sym().is_some() => write!(f, "{d}x")?,
            None => write!(f, "({d})x")?,
        }
    }
    Ok(())
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Index => f.write_str("index"),
            Type::Scalar(d) => write!(f, "{d}"),
            Type::Tensor(t) => {
                f.write_str("tensor<")?;
                write_dims(f, &t.dims)?;
                write!(f, "{}", t.dtype)?;
                for p in &t.policies {
                    write!(f, " {p}")?;
                }
                f.write_str(">")
            }
            Type::View(v) => {
                f.write_str("view<")?;
                write_dims(f, &v.dims)?;
                write!(f, "{}>", v.dtype)
            }
            Type::Tile(t) => {
                f.write_str("tile<")?;
                write_dims(f, &t.dims)?;
                write!(f, "{}", t.dtype)?;
                if let Some(l) = &t.layout {
                    write!(f, ", {l}")?;
                }
                f.write_str(">")
            }
            Type::Smem(s) => {
                f.write_str("smem<")?;
                if s.stages > 1 {
                    write!(f, "{}x", s.stages)?;
                }
                write_dims(f, &s.dims)?;
                write!(f, "{}", s.dtype)?;
                if s.swizzle == Swizzle::Xor {
                    f.write_str(", swizzle=xor")?;
                }
                if s.pad != 0 {
                    write!(f, ", pad={}", s.pad)?;
                }
                f.write_str(">")
            }
            Type::Token => f.write_str("!token"),
        }
    }
}
