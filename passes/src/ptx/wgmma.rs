//! `tile.dot` as Hopper warpgroup MMAs (`mma = "wgmma"`, sm_90a): both operands are read
//! from shared memory through 64-bit matrix descriptors, the f32 accumulator (i32 for
//! int8 operands: `m64nNk32.s32.s8.s8`) lives in the `#wgmma` register layout
//! (`Layout::Wgmma`).
//!
//! Per dot: `wgmma.fence`, then for each k16 step and each m64 tile of the warpgroup's
//! rows one `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}` (A K-major, B
//! N-major: `imm-trans-b = 1`), then `wgmma.commit_group` and `wgmma.wait_group 0`:
//! the accumulator registers are read only after the wait, and the operand slots are
//! free for the next copies once every warpgroup passed it. (The consumers of a
//! producer warpgroup's GEMM wait with `wait_group 1` instead: `ptx::warp_spec`.)
//!
//! FP8 sums are promoted, as CUTLASS's FP8 GEMMs and DeepSeek-V3 do: the tensor cores
//! add an fp8 MMA's products with an adder narrower than f32 (measured on an H200: a
//! K = 4096 GEMM accumulated in place was off by 5% in places), so each chunk of at most
//! `wgmma::FP8_PROMOTION_K` = 128 elements of K is summed from zero into scratch
//! registers, waited for, and added to the accumulator with `add.f32`.
//!
//! Matrix descriptors (PTX ISA, "Matrix Descriptor Format" of the warpgroup-level MMA):
//! bits 0–13 the start address >> 4, 16–29 the leading-dimension byte offset (LBO) >> 4,
//! 32–45 the stride-dimension byte offset (SBO) >> 4, 49–51 the base offset (0: the
//! buffers sit on 1024-byte boundaries), 62–63 the swizzle mode (1 = 128B, 2 = 64B,
//! 3 = 32B). With a swizzle of `W` bytes the operands are the canonical layouts of
//! CUTLASS's `make_gmma_desc` in 16-byte units, `T` = 8 elements:
//!
//! - K-major A, `((8, m), (T, 2)) : ((W/16 chunks, SBO), (1, 1 chunk))`: rows of `W` bytes,
//!   8-row groups `SBO = 8 W` apart, LBO unused (1);
//! - N-major B, `((T, W/16, n), (8, k)) : ((1, 1 chunk, LBO), (W/16 chunks, SBO))`: `W`-byte
//!   column blocks `LBO` apart, K rows of `W` bytes, 8-row groups `SBO = 8 W` apart;
//!
//! which is exactly `SmemType::byte_offset` of `Swizzle::Wgmma(W)` (blocks of `W` bytes
//! stored one after another, each a column of rows): `LBO` = rows × `W`. The swizzle is
//! applied by the hardware to the shared address, so the start of each instruction's
//! operand is an offset into that layout: `+ 32 k` bytes along a K-major row, `+ 16 W` bytes
//! per k16 step of an N-major B.

use super::builder::{Class, Operand, Reg};
use super::emit::{Emitter, Repr, SmemVal, TileVal, Val, R};
use super::expr::Expr;
use super::numerics::materialize;
use crate::ir::{Layout, Op, SmemType, Swizzle};
use crate::wgmma::{WARPGROUP_WARPS, WGMMA_M};
use tessera_frontend::check::DType;

const WARP: u32 = 32;

/// The descriptor's swizzle-mode field for a swizzle of `width` bytes.
pub fn swizzle_mode(width: u32) -> Option<u64> {
    match width {
        128 => Some(1),
        64 => Some(2),
        32 => Some(3),
        _ => None,
    }
}

/// The constant fields of a matrix descriptor: LBO and SBO in bytes, the swizzle mode;
/// `start` (a byte address in the shared window) completes it.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Descriptor {
    pub lbo: u64,
    pub sbo: u64,
    pub mode: u64,
}

impl Descriptor {
    /// The high word: SBO >> 4 in bits 32–45, the mode in bits 62–63.
    pub fn high_word(self) -> u32 {
        (((self.sbo >> 4) & 0x3fff) | (self.mode << 30)) as u32
    }

    /// The low word for a start address: start >> 4 in bits 0–13, LBO >> 4 in 16–29.
    pub fn low_word(self, start: u64) -> u32 {
        (((start >> 4) & 0x3fff) | (((self.lbo >> 4) & 0x3fff) << 16)) as u32
    }

    pub fn encode(self, start: u64) -> u64 {
        (self.high_word() as u64) << 32 | self.low_word(start) as u64
    }
}

/// The descriptor of a K-major operand (A `[M, K]`, or B stored `[N, K]`): a shared slot
/// in its `Swizzle::Wgmma` layout (None when it is laid out otherwise).
pub fn k_major_descriptor(s: &SmemType) -> Option<Descriptor> {
    let Swizzle::Wgmma(w) = s.swizzle else { return None };
    Some(Descriptor { lbo: 16, sbo: 8 * w as u64, mode: swizzle_mode(w)? })
}

/// The descriptor of an N-major B `[K, N]`.
pub fn n_major_descriptor(b: &SmemType) -> Option<Descriptor> {
    let Swizzle::Wgmma(w) = b.swizzle else { return None };
    let (k_rows, _) = b.rows_and_row_len()?;
    Some(Descriptor { lbo: k_rows as u64 * w as u64, sbo: 8 * w as u64, mode: swizzle_mode(w)? })
}

/// The descriptors of a dot's operands: A `[M, K]` K-major and B `[K, N]` N-major, each a
/// shared slot in its `Swizzle::Wgmma` layout (None when a slot is laid out otherwise).
pub fn operand_descriptors(a: &SmemType, b: &SmemType) -> Option<(Descriptor, Descriptor)> {
    Some((k_major_descriptor(a)?, n_major_descriptor(b)?))
}

/// Byte offset, in A's slot, of the first element of the A operand of the m64 tile whose
/// first row is `row0`, at k step `k0`: the K block, then the row, then the 32-byte
/// column within the block's rows (the hardware adds the rows and swizzles).
pub fn a_start(a: &SmemType, row0: i64, k0: i64) -> Option<i64> {
    let Swizzle::Wgmma(w) = a.swizzle else { return None };
    let (rows, _) = a.rows_and_row_len()?;
    let (w, x) = (w as i64, k0 * a.dtype.bytes() as i64);
    Some((x / w) * rows * w + row0 * w + x % w)
}

/// Byte offset, in an M-major A's slot (`[K, M]`, read transposed), of the A operand of
/// the m64 tile whose first row (of the dot's M) is `row0`, at k step `k0`: the column
/// block of `row0`, then row `k0` (the same canonical layout as an N-major B).
pub fn a_start_m_major(a: &SmemType, row0: i64, k0: i64) -> Option<i64> {
    let Swizzle::Wgmma(w) = a.swizzle else { return None };
    let (k_rows, _) = a.rows_and_row_len()?;
    let (w, x) = (w as i64, row0 * a.dtype.bytes() as i64);
    Some((x / w) * k_rows * w + k0 * w + x % w)
}

/// The PTX type of a `wgmma` operand of `dtype` (`.bf16`, `.e4m3`, `.s8`, ...), or None
/// for a dtype `wgmma` does not take.
pub fn operand_type(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::Fp8E4m3 => "e4m3",
        DType::Fp8E5m2 => "e5m2",
        DType::Int8 => "s8",
        _ => return None,
    })
}

/// Byte offset, in B's slot, of the B operand of k step `k0`: row `k0` of block 0.
pub fn b_start(b: &SmemType, k0: i64) -> Option<i64> {
    let Swizzle::Wgmma(w) = b.swizzle else { return None };
    Some(k0 * w as i64)
}

impl Emitter<'_> {
    pub(super) fn wgmma_dot(&mut self, op: &Op) -> R<()> {
        let b = self.smem_of(op, op.operands[1])?;
        let b_k_major = op.attr(crate::wgmma::B_K_MAJOR).is_some();
        let a_m_major = op.attr(crate::wgmma::A_M_MAJOR).is_some();
        let a = if op.attr(crate::wgmma::A_IN_REGISTERS).is_some() {
            AOperand::Registers(self.tile(op, op.operands[0])?)
        } else {
            AOperand::Shared(self.smem_of(op, op.operands[0])?)
        };
        let c = self.tile(op, op.operands[2])?;
        let (out_dtype, shape, layout) = self.tile_type(op, op.results[0])?;
        let internal = |s: &Self, what: &str| s.fail(op, format!("internal error: {what}"));
        let Layout::Wgmma { warpgroups, across_n } = layout else {
            return Err(internal(self, "a `wgmma` accumulator outside the #wgmma layout"));
        };
        let (at, bt) = match (operand_type(a.dtype()), operand_type(b.ty.dtype)) {
            (Some(x), Some(y)) if x == y || (a.dtype().is_fp8() && b.ty.dtype.is_fp8()) => (x, y),
            _ => return Err(self.unsupported(op, format!("with {} x {} operands on `wgmma`", a.dtype(), b.ty.dtype))),
        };
        // 8-bit operands: k32 per instruction and no transpose immediates (both K-major).
        let fp8 = a.dtype().is_fp8();
        let int8 = a.dtype() == DType::Int8;
        let k_step = crate::wgmma::k_step(a.dtype());
        if (fp8 || int8) && (!b_k_major || a_m_major || matches!(a, AOperand::Registers(_))) {
            return Err(internal(self, "an 8-bit `wgmma` operand that is not K-major in shared memory"));
        }
        // Integer operands accumulate in s32 (exactly, wrapping as the hardware does
        // without `.satfinite`), float ones in f32.
        let (acc_dtype, acc_class, acc_type) =
            if int8 { (DType::I32, Class::B32, "s32") } else { (DType::F32, Class::F32, "f32") };
        if out_dtype != acc_dtype || c.dtype != acc_dtype {
            return Err(self.unsupported(op, format!("with a {out_dtype} accumulator on `wgmma`")));
        }
        // B's buffer is [K, N], or [N, K] when K-major.
        let b_dims = b.ty.rows_and_row_len().map(|(r, c)| if b_k_major { (c, r) } else { (r, c) });
        // A's buffer is [M, K], or [K, M] when M-major.
        let a_dims = a.dims().map(|(r, c)| if a_m_major { (c, r) } else { (r, c) });
        let (Some((m, k)), Some((kb, n))) = (a_dims, b_dims) else {
            return Err(internal(self, "a symbolic operand buffer"));
        };
        if k != kb || shape != [m, n] || self.threads != warpgroups * WARPGROUP_WARPS * WARP {
            return Err(internal(self, "the operands, the accumulator and the warpgroups disagree"));
        }
        let no_swizzle = |s: &Self| internal(s, "a `wgmma` operand buffer without a descriptor swizzle");
        let db = if b_k_major { k_major_descriptor(&b.ty) } else { n_major_descriptor(&b.ty) };
        let Some(db) = db else { return Err(no_swizzle(self)) };
        // Warpgroup `g` computes rows block `g / across_n` and columns slice `g % across_n`.
        let (across_n, group_threads) = (across_n.max(1) as i64, (WARPGROUP_WARPS * WARP) as i64);
        let along_m = warpgroups as i64 / across_n;
        let (block_rows, n_slice) = (m / along_m, n / across_n);
        if along_m * across_n != warpgroups as i64 || n_slice * across_n != n {
            return Err(internal(self, "a warpgroup grid that does not divide the accumulator"));
        }
        let tiles = block_rows / WGMMA_M;
        let per_tile = (n_slice / 2) as usize;
        self.check_accumulator_layout(op, &layout, &shape, AccumulatorGrid { tiles, per_tile, across_n, n_slice })?;
        let a_input = match &a {
            // The fragment of k16 step s of m64 tile t is words 4s..4s+3 of the tile's K/4
            // packed words (the #wgmma layout of [M, K], register 4j + 2h + e at column
            // 8j + 2 (lane % 4) + e, row + 8h: pairs along K are the A fragment's a0..a3 =
            // (j, h) = (2s, 0), (2s, 1), (2s + 1, 0), (2s + 1, 1)).
            AOperand::Registers(t) => {
                if t.layout != layout {
                    return Err(internal(self, "the A operand in registers is not in the accumulator's #wgmma layout"));
                }
                let grid = AccumulatorGrid { tiles, per_tile: (k / 2) as usize, across_n: 1, n_slice: k };
                self.check_accumulator_layout(op, &t.layout, &t.shape, grid)?;
                let t = t.clone();
                let words = self.packed(op, &t)?;
                AInput::Fragments(words.into_iter().map(|w| materialize(&mut self.b, Class::B32, w)).collect())
            }
            // Descriptor words of this warpgroup's first A tile, from the slot address
            // (the warpgroup's rows start `block_rows * W` bytes into the slot).
            AOperand::Shared(slot) => {
                let da = if a_m_major { n_major_descriptor(&slot.ty) } else { k_major_descriptor(&slot.ty) };
                let Some(da) = da else { return Err(no_swizzle(self)) };
                // The offset of a warpgroup's first row: rows of a K-major A, whole
                // column blocks of an M-major one (m64 tiles of 16-bit elements are
                // 128 bytes, a whole block of any descriptor swizzle).
                let block_bytes =
                    if a_m_major { a_start_m_major(&slot.ty, block_rows, 0) } else { a_start(&slot.ty, block_rows, 0) };
                let Some(block_bytes) = block_bytes else { return Err(no_swizzle(self)) };
                let group_rows = Expr::tid().div(group_threads * across_n, self.threads).mul(block_bytes);
                let low = self.descriptor_base(slot, da, group_rows);
                let high = self.b.reg(Class::B32);
                self.b.ins(format!("mov.b32 {high}, {}", da.high_word()));
                AInput::Descriptor { low, high, slot: slot.ty.clone() }
            }
        };
        // This warpgroup's N slice of B: rows of a K-major B, whole swizzle blocks of an
        // N-major one (the rule gave B a swizzle no wider than a slice).
        let b_slice = if across_n == 1 {
            Expr::c(0)
        } else {
            let Swizzle::Wgmma(w) = b.ty.swizzle else { return Err(no_swizzle(self)) };
            let (w, eb) = (w as i64, b.ty.dtype.bytes() as i64);
            let slice_bytes = if b_k_major {
                n_slice * w
            } else {
                if (n_slice * eb) % w != 0 {
                    return Err(internal(self, "an N slice of B that does not start on a swizzle block"));
                }
                (n_slice * eb / w) * kb * w
            };
            Expr::tid().div(group_threads, self.threads).rem(across_n, self.threads).mul(slice_bytes)
        };
        let b_low = self.descriptor_base(&b, db, b_slice);
        let b_high = self.b.reg(Class::B32);
        self.b.ins(format!("mov.b32 {b_high}, {}", db.high_word()));
        // Fresh accumulator registers, initialized from the incoming tile (the wgmma
        // reads and writes them in place); a zero tile is not read (`scale-d` false
        // on the first k step).
        let c_vals = self.wide(&c);
        let zero_start = c_vals.iter().all(|v| matches!(v, Operand::F32(0) | Operand::Int(0)));
        let carried: Option<Vec<Reg>> =
            c_vals.iter().map(|v| if let Operand::Reg(r) = v { Some(*r) } else { None }).collect();
        // fp8 sums are promoted: the tensor cores sum at most FP8_PROMOTION_K products
        // from zero into scratch registers, which are then added to the accumulator in
        // f32 (their adder is narrower than f32, so a sum continued in place drifts with
        // K). That needs the group's result, so such a dot is never left in flight.
        let chunk = if fp8 { crate::wgmma::FP8_PROMOTION_K } else { k.max(1) };
        let promoted = fp8 && (!zero_start || k > chunk);
        // A K loop's dot that stays in flight while the next one is issued accumulates
        // in place: its registers are the carried accumulator's, which nothing else reads
        // until the wait after the loop.
        let in_flight = carried.as_ref().filter(|_| !promoted && self.keeps_dot_in_flight(self.current)).cloned();
        let acc: Vec<Reg> = match &in_flight {
            Some(regs) => regs.clone(),
            None => (0..c_vals.len()).map(|_| self.b.reg(acc_class)).collect(),
        };
        if !zero_start && in_flight.is_none() {
            for (r, &v) in acc.iter().zip(&c_vals) {
                super::emit::mov(&mut self.b, *r, v);
            }
        }
        let scratch: Vec<Reg> =
            if promoted { (0..acc.len()).map(|_| self.b.reg(Class::F32)).collect() } else { Vec::new() };
        let accumulate = materialize(&mut self.b, Class::Pred, Operand::Int(1));
        // `scale-d` false: a chain that starts from zero (a zero tile, a promoted chunk).
        let restart = (zero_start || promoted).then(|| materialize(&mut self.b, Class::Pred, Operand::Int(0)));
        // imm-trans-b: 1 for an N-major B, 0 for a K-major one.
        let trans_b = if b_k_major { 0 } else { 1 };
        for chunk0 in (0..k.max(1)).step_by(chunk as usize) {
            // Unpromoted, or the first chunk of a zero start: straight into `acc`.
            let into_scratch = promoted && !(zero_start && chunk0 == 0);
            let target = if into_scratch { &scratch } else { &acc };
            self.b.ins("wgmma.fence.sync.aligned");
            for k0 in (chunk0..(chunk0 + chunk).min(k)).step_by(k_step as usize) {
                let b_offset = if b_k_major { a_start(&b.ty, 0, k0) } else { b_start(&b.ty, k0) };
                let b_desc = self.descriptor(b_low, b_high, b_offset.unwrap_or(0));
                for tile in 0..tiles {
                    let d = target[tile as usize * per_tile..(tile as usize + 1) * per_tile]
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    let from_zero = k0 == chunk0 && (into_scratch || (k0 == 0 && zero_start));
                    let scale_d = restart.filter(|_| from_zero).unwrap_or(accumulate);
                    let (a_operand, imms) = match &a_input {
                        AInput::Fragments(words) => {
                            let at = (tile * k / 4 + k0 / 4) as usize;
                            let regs = words[at..at + 4].iter().map(|r| r.to_string()).collect::<Vec<_>>();
                            (format!("{{{}}}", regs.join(", ")), format!(", 1, 1, {trans_b}"))
                        }
                        AInput::Descriptor { low, high, slot } => {
                            let start = if a_m_major {
                                a_start_m_major(slot, tile * WGMMA_M, k0)
                            } else {
                                a_start(slot, tile * WGMMA_M, k0)
                            };
                            let start = start.unwrap_or(0);
                            // fp8 takes the scale immediates only, the integer form none.
                            let imms = match (fp8, int8) {
                                (_, true) => String::new(),
                                (true, _) => ", 1, 1".to_string(),
                                _ => format!(", 1, 1, {}, {trans_b}", u8::from(a_m_major)),
                            };
                            (self.descriptor(*low, *high, start).to_string(), imms)
                        }
                    };
                    self.b.ins(format!(
                        "wgmma.mma_async.sync.aligned.m64n{n_slice}k{k_step}.{acc_type}.{at}.{bt} {{{d}}}, {a_operand}, {b_desc}, {scale_d}{imms}"
                    ));
                }
            }
            self.b.ins("wgmma.commit_group.sync.aligned");
            // In flight: wait for the previous iteration's group only.
            let pending = u32::from(in_flight.is_some());
            self.b.ins(format!("wgmma.wait_group.sync.aligned {pending}"));
            if into_scratch {
                for (a, t) in acc.iter().zip(&scratch) {
                    self.b.ins(format!("add.f32 {a}, {a}, {t}"));
                }
            }
        }
        let out = if k == 0 { c_vals } else { acc.into_iter().map(Operand::Reg).collect() };
        self.set(op.results[0], Val::Tile(TileVal { dtype: out_dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }
}

/// A warpgroup's part of a `#wgmma` tile: its m64 tiles, registers per tile, and the
/// N slices the warpgroups split the columns into (1: none) of `n_slice` columns each.
#[derive(Clone, Copy)]
struct AccumulatorGrid {
    tiles: i64,
    per_tile: usize,
    across_n: i64,
    n_slice: i64,
}

/// Where a `wgmma`'s A operand is.
enum AOperand {
    Shared(SmemVal),
    /// In the `#wgmma` layout of `[M, K]`.
    Registers(TileVal),
}

impl AOperand {
    fn dtype(&self) -> DType {
        match self {
            AOperand::Shared(s) => s.ty.dtype,
            AOperand::Registers(t) => t.dtype,
        }
    }

    /// `[M, K]`, when constant.
    fn dims(&self) -> Option<(i64, i64)> {
        match self {
            AOperand::Shared(s) => s.ty.rows_and_row_len(),
            AOperand::Registers(t) => (t.shape.len() == 2).then(|| (t.shape[0], t.shape[1])),
        }
    }
}

/// What each `wgmma` of a dot passes as A: the fragment registers of every (m64 tile,
/// k16 step), or the descriptor words of the warpgroup's first tile and its slot type.
enum AInput {
    Fragments(Vec<Reg>),
    Descriptor { low: Reg, high: Reg, slot: SmemType },
}

impl Emitter<'_> {
    /// The low word of a descriptor for the slot's address plus the thread-dependent
    /// `offset` (bytes): computed once per dot; each instruction adds its constant part.
    fn descriptor_base(&mut self, slot: &SmemVal, d: Descriptor, offset: Expr) -> Reg {
        let off = self.exprs.emit(&mut self.b, &offset);
        let (addr, low) = (self.b.reg(Class::B32), self.b.reg(Class::B32));
        self.b.ins(format!("add.u32 {addr}, {}, {off}", slot.addr));
        if slot.imm != 0 {
            self.b.ins(format!("add.u32 {addr}, {addr}, {}", slot.imm));
        }
        self.b.ins(format!("shr.u32 {low}, {addr}, 4"));
        self.b.ins(format!("and.b32 {low}, {low}, 16383"));
        self.b.ins(format!("or.b32 {low}, {low}, {}", d.low_word(0)));
        low
    }

    /// A 64-bit descriptor: `low + offset >> 4` (the start field does not overflow: shared
    /// addresses stay below 256 KiB) and the constant high word.
    fn descriptor(&mut self, low: Reg, high: Reg, offset: i64) -> Reg {
        let word = if offset == 0 {
            low
        } else {
            let w = self.b.reg(Class::B32);
            self.b.ins(format!("add.u32 {w}, {low}, {}", offset >> 4));
            w
        };
        let desc = self.b.reg(Class::B64);
        self.b.ins(format!("mov.b64 {desc}, {{{word}, {high}}}"));
        desc
    }

    /// The ISA's accumulator fragment, register by register and thread by thread, is
    /// what `Layout::elements` says the tile holds (an internal error otherwise): tile
    /// `i`'s N/2 registers, register `4j + 2h + e` at row `16 (warp % 4) + lane / 4 + 8h`
    /// and column `8j + 2 (lane % 4) + e` of the warpgroup's m64 block `i`.
    fn check_accumulator_layout(&mut self, op: &Op, layout: &Layout, shape: &[i64], grid: AccumulatorGrid) -> R<()> {
        let AccumulatorGrid { tiles, per_tile, across_n, n_slice } = grid;
        let map = self.map(op, layout, shape)?;
        if map.len() != tiles as usize * per_tile {
            return Err(self.fail(op, "internal error: the #wgmma layout holds another register count"));
        }
        let block_rows = tiles * WGMMA_M;
        for tid in 0..self.threads {
            let (warp, lane) = ((tid / WARP) as i64, (tid % WARP) as i64);
            let group = warp / WARPGROUP_WARPS as i64;
            let (block, slice) = (group / across_n, group % across_n);
            for j in 0..map.len() {
                let (tile, i) = ((j / per_tile) as i64, (j % per_tile) as i64);
                let row = block * block_rows + tile * WGMMA_M + 16 * (warp % 4) + lane / 4 + 8 * ((i / 2) % 2);
                let col = slice * n_slice + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
                if map.coord(j, tid) != [row, col] {
                    return Err(self.fail(
                        op,
                        format!("internal error: accumulator register {j} of thread {tid} is not at ({row}, {col})"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_frontend::check::Dim;

    fn slot(rows: i64, cols: i64, width: u32) -> SmemType {
        SmemType {
            dims: vec![Dim::constant(rows), Dim::constant(cols)],
            dtype: DType::BF16,
            swizzle: Swizzle::Wgmma(width),
            pad: 0,
            stages: 1,
        }
    }

    #[test]
    fn descriptors_encode_their_fields() {
        let d = Descriptor { lbo: 16, sbo: 1024, mode: 1 };
        let bits = d.encode(0x1_2340);
        assert_eq!(bits & 0x3fff, 0x1234);
        assert_eq!((bits >> 16) & 0x3fff, 1);
        assert_eq!((bits >> 32) & 0x3fff, 64);
        assert_eq!(bits >> 62, 1);
        assert_eq!((bits >> 49) & 7, 0);
    }

    /// The canonical-layout address the descriptors describe is the buffer layout, for
    /// every element of every instruction's operands (the arithmetic the emulator does
    /// independently, by the ISA).
    #[test]
    fn descriptor_addresses_are_the_buffer_layout() {
        let width = |row_bytes: i64| match Swizzle::wgmma_for_row(row_bytes) {
            Some(Swizzle::Wgmma(w)) => w,
            other => panic!("{row_bytes}-byte rows: {other:?}"),
        };
        for (m, n, k) in [(64, 64, 64), (128, 256, 32), (64, 48, 16), (128, 128, 128)] {
            let (a, b) = (slot(m, k, width(k * 2)), slot(k, n, width(n * 2)));
            let (da, db) = operand_descriptors(&a, &b).unwrap();
            let (Swizzle::Wgmma(wa), Swizzle::Wgmma(wb)) = (a.swizzle, b.swizzle) else { unreachable!() };
            let swizzle = |addr: i64, w: i64| {
                let bits = (w / 16).trailing_zeros();
                addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)
            };
            for k0 in (0..k).step_by(16) {
                for row0 in (0..m).step_by(64) {
                    let start = a_start(&a, row0, k0).unwrap();
                    for r in 0..64 {
                        for kk in 0..16 {
                            // ((8, m), (T, 2)) : ((W/16, SBO), (1, 1)) in chunks.
                            let (q, rr) = (r / 8, r % 8);
                            let (chunk, e) = (kk / 8, kk % 8);
                            let addr = start + q * da.sbo as i64 + rr * wa as i64 + chunk * 16 + e * 2;
                            assert_eq!(swizzle(addr, wa as i64), a.byte_offset(row0 + r, k0 + kk).unwrap());
                        }
                    }
                }
                let start = b_start(&b, k0).unwrap();
                for kk in 0..16 {
                    for c in 0..n {
                        // ((T, W/16, n), (8, k)) : ((1, 1, LBO), (W/16, SBO)) in chunks.
                        let x = c * 2;
                        let (block, in_block) = (x / wb as i64, x % wb as i64);
                        let (q, rr) = (kk / 8, kk % 8);
                        let addr = start + block * db.lbo as i64 + q * db.sbo as i64 + rr * wb as i64 + in_block;
                        assert_eq!(swizzle(addr, wb as i64), b.byte_offset(k0 + kk, c).unwrap());
                    }
                }
            }
        }
    }
}
