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
    /// The layout Hopper's matrix descriptors read (`wgmma` operands): the swizzle mode
    /// of that many bytes (32, 64 or 128). Each row is cut into blocks of that width;
    /// the blocks are stored one after another (all rows of block 0, then all rows of
    /// block 1, ...), and inside a block 16-byte chunk `c` of row `r` sits at chunk
    /// `c ^ ((r * width / 128) % (width / 16))` — CUTLASS `Swizzle<log2(width / 16), 4, 3>`
    /// on the address, as the hardware applies it to the shared address of a buffer
    /// placed on a multiple of 1024 bytes.
    Wgmma(u32),
}

impl Swizzle {
    /// The `wgmma` swizzle width for rows of `row_bytes` bytes: the widest of 128, 64 and
    /// 32 bytes that divides the row (None when 32 does not).
    pub fn wgmma_for_row(row_bytes: i64) -> Option<Swizzle> {
        Swizzle::wgmma_for_row_up_to(row_bytes, 128)
    }

    /// [`Swizzle::wgmma_for_row`] with no swizzle wider than `widest` bytes.
    pub fn wgmma_for_row_up_to(row_bytes: i64, widest: i64) -> Option<Swizzle> {
        [128, 64, 32]
            .into_iter()
            .filter(|&w| w <= widest)
            .find(|w| row_bytes > 0 && row_bytes % w == 0)
            .map(|w| Swizzle::Wgmma(w as u32))
    }
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
    /// Rows and elements per row of one slot, leading dims flattened into rows.
    pub fn rows_and_row_len(&self) -> Option<(i64, i64)> {
        match self.dims.as_slice() {
            [] => Some((1, 1)),
            [n] => Some((1, n.as_const()?)),
            dims => {
                let row_len = dims.last()?.as_const()?;
                let rows = dims[..dims.len() - 1].iter().map(|d| d.as_const()).product::<Option<i64>>()?;
                Some((rows, row_len))
            }
        }
    }

    /// Bytes of one slot of the ring.
    pub fn slot_bytes(&self) -> Option<u64> {
        let (rows, row_len) = self.rows_and_row_len()?;
        Some(rows as u64 * (row_len as u64 + self.pad as u64) * self.dtype.bytes() as u64)
    }

    /// The byte offset of element `(row, col)` within a slot: THE buffer layout every
    /// backend and analysis uses (docs/ir.md, "Buffer layout").
    ///
    /// Unswizzled: `(row * (row_len + pad) + col) * bytes`. With `swizzle = xor` the
    /// 16-byte chunk index is XOR-ed with a phase of 8: rows of a multiple of 128 bytes
    /// XOR their chunk index with `row % 8`; shorter rows (16, 32 or 64 bytes) are packed
    /// into 128-byte lines whose chunk index is XOR-ed with `line % 8` (CUTLASS
    /// `Swizzle<3,4,3>` on the linear offset). Other row sizes are not swizzled.
    pub fn byte_offset(&self, row: i64, col: i64) -> Option<i64> {
        let (rows, row_len) = self.rows_and_row_len()?;
        let bytes = self.dtype.bytes() as i64;
        let row_bytes = row_len * bytes;
        let (chunk, within) = ((col * bytes) / 16, (col * bytes) % 16);
        if let Swizzle::Wgmma(width) = self.swizzle {
            let width = width as i64;
            let x = col * bytes;
            let (block, in_block) = (x / width, x % width);
            let phase = (row * width / 128) % (width / 16);
            return Some(block * rows * width + row * width + ((in_block / 16) ^ phase) * 16 + x % 16);
        }
        let plain = (row * (row_len + self.pad as i64) + col) * bytes;
        if self.swizzle == Swizzle::None || self.pad != 0 || self.dtype.bits() < 8 {
            return Some(plain);
        }
        if row_bytes >= 128 && row_bytes % 128 == 0 {
            Some(row * row_bytes + (chunk ^ (row % 8)) * 16 + within)
        } else if row_bytes >= 16 && 128 % row_bytes == 0 {
            let rows_per_line = 128 / row_bytes;
            let (line, row_in_line) = (row / rows_per_line, row % rows_per_line);
            let line_chunk = row_in_line * (row_bytes / 16) + chunk;
            Some(line * 128 + (line_chunk ^ (line % 8)) * 16 + within)
        } else {
            Some(plain)
        }
    }

    /// The smallest row shift that moves every element's byte offset by one multiple of
    /// 128 bytes (the 32 banks of 4 bytes): two accesses that differ only by such a shift
    /// of their rows meet the same banks in the same way. A power of two (`None`: a dim
    /// is not a constant).
    pub fn bank_period_rows(&self) -> Option<i64> {
        let (_, row_len) = self.rows_and_row_len()?;
        let bytes = self.dtype.bytes() as i64;
        let row_bytes = row_len * bytes;
        let plain = || {
            let pitch = ((row_len + self.pad as i64) * bytes).max(1);
            128 / gcd(pitch, 128)
        };
        Some(match self.swizzle {
            // The phase `(row * width / 128) % (width / 16)` repeats every 8 rows, which
            // move the offset by 8 * width bytes.
            Swizzle::Wgmma(_) => 8,
            _ if self.swizzle == Swizzle::None || self.pad != 0 || self.dtype.bits() < 8 => plain(),
            _ if row_bytes >= 128 && row_bytes % 128 == 0 => 8,
            _ if row_bytes >= 16 && 128 % row_bytes == 0 => 8 * (128 / row_bytes),
            _ => plain(),
        })
    }

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
                match s.swizzle {
                    Swizzle::None => {}
                    Swizzle::Xor => f.write_str(", swizzle=xor")?,
                    Swizzle::Wgmma(width) => write!(f, ", swizzle={width}B")?,
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

/// The greatest common divisor (bank periods, `cp.async` cycles).
pub(crate) fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_frontend::check::DType;

    fn smem(rows: i64, cols: i64, dtype: DType, swizzle: Swizzle, pad: u32) -> SmemType {
        SmemType { dims: vec![Dim::constant(rows), Dim::constant(cols)], dtype, swizzle, pad, stages: 1 }
    }

    /// Every element gets its own bytes inside the slot, whatever the swizzle.
    fn assert_bijective(s: &SmemType) {
        let (rows, cols) = s.rows_and_row_len().unwrap();
        let bytes = s.dtype.bytes() as i64;
        let slot = s.slot_bytes().unwrap() as i64;
        let mut seen = std::collections::HashSet::new();
        for r in 0..rows {
            for c in 0..cols {
                let off = s.byte_offset(r, c).unwrap();
                assert!(off >= 0 && off + bytes <= slot, "{s:?}: ({r},{c}) -> {off} outside {slot}");
                assert_eq!(off % bytes, 0);
                assert!(seen.insert(off), "{s:?}: ({r},{c}) collides at {off}");
            }
        }
    }

    #[test]
    fn buffer_layouts_are_bijections() {
        for (rows, cols) in [(64, 32), (64, 64), (32, 128), (128, 8), (16, 16), (8, 24)] {
            for dtype in [DType::BF16, DType::F32, DType::Fp8E4m3] {
                for (swizzle, pad) in [(Swizzle::None, 0), (Swizzle::Xor, 0), (Swizzle::None, 8)] {
                    assert_bijective(&smem(rows, cols, dtype, swizzle, pad));
                }
            }
        }
    }

    #[test]
    fn wgmma_layouts_are_bijections_in_blocks_of_their_width() {
        for (rows, cols, width) in
            [(64, 64, 128), (64, 32, 64), (64, 16, 32), (32, 128, 128), (16, 48, 32), (8, 256, 128)]
        {
            let s = smem(rows, cols, DType::BF16, Swizzle::Wgmma(width), 0);
            assert_bijective(&s);
        }
        // 128-byte swizzle: chunk c of row r at chunk c ^ (r % 8); the second 64-column
        // block of a [16, 128] bf16 buffer starts after all 16 rows of the first.
        let s = smem(16, 128, DType::BF16, Swizzle::Wgmma(128), 0);
        assert_eq!(s.byte_offset(3, 8), Some(3 * 128 + (1 ^ 3) * 16));
        assert_eq!(s.byte_offset(0, 64), Some(16 * 128));
        // 64-byte swizzle XORs with (r / 2) % 4, 32-byte with (r / 4) % 2.
        let s = smem(16, 32, DType::BF16, Swizzle::Wgmma(64), 0);
        assert_eq!(s.byte_offset(6, 0), Some(6 * 64 + 3 * 16));
        let s = smem(16, 16, DType::BF16, Swizzle::Wgmma(32), 0);
        assert_eq!(s.byte_offset(5, 0), Some(5 * 32 + 16));
        assert_eq!(Swizzle::wgmma_for_row(96), Some(Swizzle::Wgmma(32)));
        assert_eq!(Swizzle::wgmma_for_row(16), None);
    }

    #[test]
    fn xor_swizzle_moves_chunks_by_row() {
        // 64 halves = 128-byte rows: row r's chunk 0 lands in chunk r % 8.
        let s = smem(64, 64, DType::F16, Swizzle::Xor, 0);
        for r in 0..16 {
            assert_eq!(s.byte_offset(r, 0), Some(r * 128 + (r % 8) * 16));
        }
        // 32 halves = 64-byte rows: two rows per 128-byte line, XOR by line.
        let s = smem(64, 32, DType::F16, Swizzle::Xor, 0);
        assert_eq!(s.byte_offset(0, 0), Some(0));
        assert_eq!(s.byte_offset(1, 0), Some(64));
        assert_eq!(s.byte_offset(2, 0), Some(128 + 16));
        assert_eq!(s.byte_offset(3, 0), Some(128 + (4 ^ 1) * 16));
    }
}
