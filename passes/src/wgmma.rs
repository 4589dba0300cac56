//! When a kernel's `tile.dot`s can run as Hopper warpgroup MMAs (`mma = "wgmma"`): the
//! one rule lowering (`select-dot-instructions`), the target lints (E0704) and autotune
//! pruning share, and the marks it leaves on Schedule IR for the Tile IR passes.
//!
//! What this slice supports (docs/language.md, "Schedules and autotuning"): sm_90,
//! f16, bf16 or fp8 operands with an f32 accumulator, or int8 ones with an i32 one;
//! warpgroups (4 warps each) stacked along M with `M` a multiple of 64 per warpgroup, or,
//! where M has fewer m64 tiles than there are warpgroups, the rest splitting N (A then
//! from shared memory); `N` per warpgroup a multiple of 8 up to 256 (one instruction
//! covers its columns; integers: 8, 16, 24 or a multiple of 16), `K` a multiple of 16
//! (32 for 8-bit operands). A is read from shared memory as `[M, K]` (K-major), as the
//! transpose of a `[K, M]` tile (M-major, 16-bit only: a weight gradient's `X.T @ dY`)
//! or, when the kernel computes it, from registers in the accumulator's own fragment
//! layout (attention's `P @ V`: P is the `#wgmma` result of
//! `Q @ K.T`, so it needs no shuffle). B is read from shared memory, either as `[K, N]`
//! (N-major, whose rows must be a multiple of the narrowest descriptor swizzle, 32 bytes)
//! or as the transpose of an `[N, K]` tile (K-major: `Q @ K.T`).
//!
//! 8-bit (fp8, int8) `wgmma` has no transposed B: both operands are read K-major. A
//! staged `[K, N]` 8-bit B goes through a transposing stage (CUTLASS's answer for the
//! same layout): its tile is staged as loaded, read into registers transposed, stored
//! into an `[N, K]` buffer in the descriptor's swizzle between two barriers, and the dot
//! reads that buffer K-major.

use smol_str::SmolStr;
use tessera_frontend::check::{DType, MmaFamily};
use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::ir::{policy as ir_policy, Attr, Func, Op, OpId, OpKind, SmemType, Swizzle, Type, ValueId};
use crate::target::Target;

/// Rows of one `wgmma` instruction, and of the accumulator block each warpgroup owns at
/// least.
pub const WGMMA_M: i64 = 64;
/// The widest N of one `wgmma` instruction.
pub const WGMMA_MAX_N: i64 = 256;
/// Warps per warpgroup.
pub const WARPGROUP_WARPS: u32 = 4;

/// K of one `wgmma` instruction with `dtype` operands: 32 bytes of each row (k16 for
/// f16/bf16, k32 for fp8 and int8).
pub fn k_step(dtype: DType) -> i64 {
    32 / dtype.bytes().max(1) as i64
}

/// The most K an fp8 `wgmma` sums inside the tensor cores before the sum is added to the
/// f32 accumulator in registers ("promotion"): Hopper's FP8 MMAs add their products with
/// a narrower adder than f32 (about 14 bits kept; DeepSeek-V3 §3.3.2), so a K loop left
/// to accumulate in place drifts with K. 128 elements (4 k32 instructions) is CUTLASS's
/// promotion interval and DeepSeek's `N_C`.
pub const FP8_PROMOTION_K: i64 = 128;

/// Whether `func` (Tile IR) has an fp8 `wgmma`: its sums of up to [`FP8_PROMOTION_K`]
/// products are not f32-exact, which the check's tolerance allows for.
pub fn has_fp8_wgmma(func: &Func) -> bool {
    func.walk().into_iter().any(|id| {
        let op = func.op(id);
        op.kind == OpKind::Dot
            && op.str_attr("instr") == Some("wgmma")
            && op.operands.first().is_some_and(|&a| func.ty(a).dtype().is_some_and(|d| d.is_fp8()))
    })
}

/// The attribute of a staged `tile.load` whose shared buffer a `wgmma` reads through a
/// matrix descriptor (its swizzle is then the descriptor's, chosen from the row bytes).
pub const DESCRIPTOR_LAYOUT: &str = "wgmma_operand";

/// The attribute of a `wgmma` dot: how many of its warpgroups split N (1: all along M).
pub const ACROSS_N: &str = "warpgroups_across_n";

/// The attribute of a `wgmma` dot whose A operand is in registers (`#wgmma` layout).
pub const A_IN_REGISTERS: &str = "a_registers";
/// The attribute of a `wgmma` dot whose B operand is K-major (the transpose of an
/// `[N, K]` tile in shared memory: `imm-trans-b = 0`).
pub const B_K_MAJOR: &str = "b_k_major";

/// The attribute of a `wgmma` dot whose A operand is M-major: the transpose `a.T` of a
/// `[K, M]` tile in shared memory (`imm-trans-a = 1`; 16-bit operands only), as a
/// weight gradient `X.T @ dY` reads X.
pub const A_M_MAJOR: &str = "a_m_major";

/// Whether the `wgmma` dot `op` reads its operand `i` (0: A, 1: B) transposed from its
/// shared buffer: an M-major A (`[K, M]`), a K-major B (`[N, K]`).
pub fn reads_transposed(op: &Op, i: usize) -> bool {
    op.attr(if i == 0 { A_M_MAJOR } else { B_K_MAJOR }).is_some()
}

/// Whether operand `i` of `op`, of type `ty`, is such a slot in Tile IR: a shared buffer
/// whose dims read reversed are the dot's (`[M, K]` for A, `[K, N]` for B).
pub fn is_transposed_slot(op: &Op, i: usize, ty: &Type) -> bool {
    matches!(ty, Type::Smem(_)) && reads_transposed(op, i)
}

/// The attribute of a staged `tile.load` of an 8-bit `[K, N]` B that a `wgmma` dot reads
/// through a transposing stage: `mark-staging` stages it although no dot reads it.
pub const TRANSPOSE_STAGE: &str = "wgmma_transpose_b";

/// Where a `wgmma` operand comes from in Schedule IR.
enum Source {
    /// A `tile.load` the staging pass copies into a shared buffer.
    StagedLoad(OpId),
    /// A `tile.load_shared` of a kernel's own `tile.alloc_shared` buffer.
    Buffer(ValueId),
    /// A tile the kernel computes (A only): read from registers.
    Registers,
}

/// The operands of one dot that can use `wgmma`: where each comes from, and whether B
/// is K-major.
struct Sources {
    a: Source,
    /// A is read transposed from a `[K, M]` buffer (M-major).
    a_m_major: bool,
    b: Source,
    b_k_major: bool,
    /// How many warpgroups split N (the rest stack along M).
    across_n: i64,
    /// The widest descriptor swizzle (bytes) B's buffer may take: a warpgroup's N slice
    /// of an N-major B must start on a swizzle block.
    b_max_swizzle: i64,
    /// B is a staged 8-bit `[K, N]` load that reaches the dot through a transposing stage
    /// (then read K-major).
    transpose_b: bool,
}

/// Warpgroups stacked along M as far as M's m64 tiles allow (`groups` of them in all),
/// the rest split N: `(along M, across N)`, or None when M is no multiple of 64 times a
/// divisor of `groups`.
pub fn warpgroup_grid(m: i64, groups: i64) -> Option<(i64, i64)> {
    (1..=groups).rev().find(|&g| groups % g == 0 && m % (WGMMA_M * g) == 0).map(|g| (g, groups / g))
}

/// Why the kernel's dots cannot use `wgmma` under `config` on `target`, with the range of
/// the dot it concerns; `None` when they can, or when the schedule does not ask for it.
/// `f` is Schedule IR after `specialize` and `fold-dot-accumulate` (constant tile dims).
pub fn wgmma_problem(f: &Func, config: &Config, target: Target) -> Option<(String, TextRange)> {
    if config.mma() != MmaFamily::Wgmma || !target.is_gpu() {
        return None;
    }
    for id in f.walk() {
        if f.op(id).kind != OpKind::Dot {
            continue;
        }
        if let Err(why) = dot_sources(f, id, config, target) {
            return Some((why, f.op(id).loc.range));
        }
    }
    None
}

/// The operand sources of one dot when it can use `wgmma`, or why it cannot.
fn dot_sources(f: &Func, dot: OpId, config: &Config, target: Target) -> Result<Sources, String> {
    if target != Target::Sm90 {
        return Err(format!("`wgmma` is a Hopper (sm_90a) instruction; the target is {target}"));
    }
    let op = f.op(dot);
    let (a, b, c) = (f.ty(op.operands[0]), f.ty(op.operands[1]), f.ty(op.operands[2]));
    let (Some(ad), Some(_), Some(cd)) = (a.const_dims(), b.const_dims(), c.const_dims()) else {
        return Err("the dot's tile dims are not constants".into());
    };
    let (m, n, k) = (cd[0], cd[1], ad[1]);
    let dtype = a.dtype().unwrap_or(DType::F32);
    let bt = b.dtype().unwrap_or(DType::F32);
    let sixteen = matches!(dtype, DType::F16 | DType::BF16) && bt == dtype;
    let fp8 = dtype.is_fp8() && bt.is_fp8();
    let int8 = dtype == DType::Int8 && bt == DType::Int8;
    // 8-bit operands (fp8, int8): k32 per instruction, both operands K-major.
    let eight_bit = fp8 || int8;
    if !sixteen && !eight_bit {
        let why = if matches!(dtype, DType::F32 | DType::TF32) && bt == dtype {
            // The hardware's `.tf32` form exists, but f32 dots are exact f32 FMAs here;
            // a tensor-core dot would change their numbers without the kernel saying so.
            "`wgmma` reads 32-bit floats as tf32 (10 mantissa bits), which is not lowered: f32 and tf32 dots run as \
             f32 FMAs on the CUDA cores"
        } else {
            "`wgmma` takes f16 x f16, bf16 x bf16, fp8 (e4m3/e5m2) x fp8 or int8 x int8 operands"
        };
        return Err(format!("the operands are {dtype} x {bt}; {why}"));
    }
    let accumulator = if int8 { DType::I32 } else { DType::F32 };
    if c.dtype() != Some(accumulator) {
        let ct = c.dtype().map_or("?".to_string(), |d| d.to_string());
        return Err(format!("the accumulator is {ct}; `wgmma` with {dtype} operands accumulates in {accumulator}"));
    }
    if let Some(t) = ir_policy::acc(op).filter(|&t| ir_policy::rounds_each_step(t)) {
        return Err(format!("`@accum({t})` sums in {t}; `wgmma` here accumulates in {accumulator}"));
    }
    let warps = config.warps();
    if !warps.is_multiple_of(WARPGROUP_WARPS) {
        return Err(format!("warps = {warps} is not a multiple of 4: `wgmma` runs on warpgroups of 4 warps"));
    }
    let groups = (warps / WARPGROUP_WARPS) as i64;
    let Some((along_m, across_n)) = warpgroup_grid(m, groups) else {
        return Err(format!("M = {m} is not a multiple of 64: each warpgroup takes whole m64 tiles of rows"));
    };
    let n_slice = n / across_n;
    if n % (8 * across_n) != 0 || n_slice > WGMMA_MAX_N {
        let split = if across_n > 1 {
            format!(
                " ({groups} warpgroups are {along_m} along M and {across_n} across N: N / {across_n} per warpgroup)"
            )
        } else {
            String::new()
        };
        return Err(format!("N = {n}: one `wgmma` covers a multiple of 8 columns up to 256{split}"));
    }
    // The integer shapes are fewer: m64nNk32 for N = 8, 16, 24 and multiples of 16.
    if int8 && n_slice > 24 && n_slice % 16 != 0 {
        let per = if across_n > 1 { format!(" ({n_slice} per warpgroup)") } else { String::new() };
        return Err(format!("N = {n}{per}: an integer `wgmma` covers 8, 16, 24 or a multiple of 16 columns up to 256"));
    }
    let step = k_step(dtype);
    if k % step != 0 {
        return Err(format!("K = {k} is not a multiple of {step}, the K of `wgmma` with {dtype} operands"));
    }
    let defs = f.definitions();
    if across_n > 1 && f.walk().into_iter().any(|id| f.op(id).kind == OpKind::Dot && a_is_computed(f, &defs, id)) {
        return Err(format!(
            "M = {m}: {warps} warps split N across {across_n} warpgroups, but a dot here takes A from registers, which \
             needs each warpgroup to hold whole rows (M a multiple of {})",
            WGMMA_M * groups
        ));
    }
    let (a, a_m_major) = match source(f, &defs, op.operands[0], "A")? {
        Some((a, transposed)) => (a, transposed),
        // A tile the kernel computes goes in as registers.
        None => (Source::Registers, false),
    };
    // 16-bit A may be M-major (`imm-trans-a`): the transpose of a [K, M] tile, whose
    // rows (M of them) are whole 128-byte swizzle blocks per m64 tile.
    if a_m_major && eight_bit {
        return Err(format!(
            "A is read transposed; {dtype} `wgmma` reads A K-major only: store A as [M, K] (8-bit WGMMA has no \
             transpose)"
        ));
    }
    let Some((b, b_k_major)) = source(f, &defs, op.operands[1], "B")? else {
        return Err(computed_b(f, &defs, op.operands[1]));
    };
    // 8-bit WGMMA has no transpose: both operands are read K-major.
    if eight_bit && matches!(a, Source::Registers) {
        return Err(format!("A is computed in registers; {dtype} `wgmma` here reads A from shared memory"));
    }
    // A staged [K, N] load is transposed on its way (the module's doc); a buffer the
    // kernel fills itself is the kernel's layout to choose.
    let transpose_b = eight_bit && !b_k_major;
    if transpose_b && !matches!(b, Source::StagedLoad(_)) {
        return Err(format!(
            "B is read from a [K, N] shared buffer (N-major); {dtype} `wgmma` reads both operands K-major: fill the \
             buffer as [N, K] and pass it transposed (K = {k} a multiple of 32)"
        ));
    }
    let b_row_bytes = n * dtype.bytes() as i64;
    if !b_k_major && !transpose_b && Swizzle::wgmma_for_row(b_row_bytes).is_none() {
        return Err(format!(
            "N = {n}: a row of the [K, N] B operand is {b_row_bytes} bytes, not a multiple of 32, the narrowest \
             swizzle of `wgmma`'s matrix descriptors (N a multiple of 16 is)"
        ));
    }
    // Each warpgroup's slice of an N-major B starts on a swizzle block of its buffer.
    let slice_bytes = n_slice * dtype.bytes() as i64;
    let b_max_swizzle = if b_k_major || transpose_b || across_n == 1 {
        128
    } else {
        let Some(Swizzle::Wgmma(w)) = Swizzle::wgmma_for_row(slice_bytes) else {
            return Err(format!(
                "N = {n} across {across_n} warpgroups: each warpgroup's {slice_bytes}-byte slice of a B row is not a \
                 multiple of 32, the narrowest descriptor swizzle"
            ));
        };
        w as i64
    };
    Ok(Sources { a, a_m_major, b, b_k_major, across_n, b_max_swizzle, transpose_b })
}

/// The shared-memory source of operand `v` (`name` is "A" or "B"; `defs` from
/// `Func::definitions`) and whether it is read transposed (K-major for B); `None` when
/// the kernel computes it (it is no read of memory, transposed or not); an error when
/// it is a read no matrix descriptor can describe.
fn source(f: &Func, defs: &[Option<OpId>], v: ValueId, name: &str) -> Result<Option<(Source, bool)>, String> {
    let Some(def) = defs[v.0 as usize] else { return Ok(None) };
    let op = f.op(def);
    match op.kind {
        OpKind::Load if op.operands.len() == 1 && f.ty(v).dims().len() == 2 => {
            Ok(Some((Source::StagedLoad(def), false)))
        }
        OpKind::Load => Err(format!("{name} is a masked or higher-rank `tile.load`; `wgmma` reads a whole 2-D tile")),
        OpKind::LoadShared => match f.ty(op.operands[0]) {
            Type::Smem(s) if s.dims.len() == 2 => {
                Ok(Some((Source::Buffer(op.operands[0]), op.attr("transpose").is_some())))
            }
            _ => Err(format!("{name} is read from a shared buffer that is not 2-D")),
        },
        // `k.T` of a loaded [N, K] tile: the staged buffer, read K-major.
        OpKind::Transpose => match source(f, defs, op.operands[0], name)? {
            Some((s, false)) => Ok(Some((s, true))),
            Some((_, true)) => Err(format!("{name} is transposed twice before the dot")),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// Whether dot `dot`'s A is computed by the kernel (it would go in from registers).
fn a_is_computed(f: &Func, defs: &[Option<OpId>], dot: OpId) -> bool {
    matches!(source(f, defs, f.op(dot).operands[0], "A"), Ok(None))
}

/// Why a B the kernel computes cannot go to `wgmma`.
fn computed_b(f: &Func, defs: &[Option<OpId>], v: ValueId) -> String {
    match defs[v.0 as usize].map(|d| f.op(d).kind) {
        Some(OpKind::Cast) => {
            "B is converted (`tile.cast`) before the dot; `wgmma` reads B from shared memory as loaded".into()
        }
        Some(OpKind::Transpose) => "B is the transpose (`.T`) of a tile computed in registers; `wgmma` reads a \
                                    transposed operand only from shared memory"
            .into(),
        _ => "B is computed in registers; `wgmma` reads B from shared memory (a `tile.load` or a shared buffer, \
              passed to the dot as read or transposed)"
            .into(),
    }
}

/// `select-dot-instructions` under `mma = "wgmma"`: every dot gets `instr = "wgmma"` and
/// its warpgroups; the loads it reads are marked so their staging buffers take the
/// descriptor swizzle, and its own shared buffers are given that swizzle (a buffer's
/// `swizzle=`/`pad=` are the layout for `mma.sync`'s `ldmatrix`; under `wgmma` the
/// descriptor decides). An error names the reason and the dot.
pub(crate) fn select_wgmma(f: &mut Func, config: &Config, target: Target) -> Result<(), crate::error::LowerError> {
    let dots: Vec<OpId> = f.walk().into_iter().filter(|&id| f.op(id).kind == OpKind::Dot).collect();
    let groups = (config.warps() / WARPGROUP_WARPS) as i64;
    for dot in dots {
        let sources = dot_sources(f, dot, config, target).map_err(|why| crate::error::LowerError {
            message: format!("mma=\"wgmma\" cannot be used: {why}"),
            range: f.op(dot).loc.range,
        })?;
        let mut b = sources.b;
        if sources.transpose_b {
            if let Source::StagedLoad(load) = b {
                // Under TMA the staged [K, N] tile takes a swizzle a tensor map can write
                // (the transposing read goes through any swizzle).
                if config.copy() == tessera_frontend::check::CopyEngine::Tma {
                    f.op_mut(load).set_attr(DESCRIPTOR_LAYOUT, Attr::Int(128));
                }
                b = Source::Buffer(insert_transposing_stage(f, dot, load));
            }
        }
        let a_in_registers = matches!(sources.a, Source::Registers);
        let a_m_major = sources.a_m_major;
        let b_k_major = sources.b_k_major || sources.transpose_b;
        for (s, widest) in [(sources.a, 128), (b, sources.b_max_swizzle)] {
            match s {
                Source::StagedLoad(load) => f.op_mut(load).set_attr(DESCRIPTOR_LAYOUT, Attr::Int(widest)),
                Source::Buffer(buffer) => {
                    if let Type::Smem(s) = f.ty(buffer).clone() {
                        f.values[buffer.0 as usize].ty = Type::Smem(descriptor_layout(&s, widest));
                    }
                }
                Source::Registers => {}
            }
        }
        let op = f.op_mut(dot);
        op.set_attr("instr", Attr::Str(SmolStr::new("wgmma")));
        op.set_attr("warpgroups", Attr::Int(groups));
        op.set_attr(ACROSS_N, Attr::Int(sources.across_n));
        op.attrs.retain(|(k, _)| *k != "warps");
        if a_in_registers {
            op.set_attr(A_IN_REGISTERS, Attr::Bool(true));
        }
        if b_k_major {
            op.set_attr(B_K_MAJOR, Attr::Bool(true));
        }
        if a_m_major {
            op.set_attr(A_M_MAJOR, Attr::Bool(true));
        }
    }
    Ok(())
}

/// `s` laid out for a matrix descriptor: the widest swizzle up to `widest` bytes its rows
/// allow, no padding (the rule above guarantees a 32-byte multiple).
pub fn descriptor_layout(s: &SmemType, widest: i64) -> SmemType {
    let row_bytes = s.rows_and_row_len().map_or(0, |(_, len)| len * s.dtype.bytes() as i64);
    let swizzle = Swizzle::wgmma_for_row_up_to(row_bytes, widest).unwrap_or(s.swizzle);
    SmemType { swizzle, pad: 0, ..s.clone() }
}

/// The transposing stage of an 8-bit `[K, N]` B (the module's doc), in Schedule IR: the
/// load is marked for staging, and before `dot`:
///
/// ```text
/// tile.barrier                  // every warpgroup's wgmma read the previous tile
/// %t = tile.transpose %b        // [N, K] in registers (a transposed shared read)
/// tile.store_shared %bt, %t
/// tile.barrier                  // (with fence.proxy.async: wgmma reads through the async proxy)
/// %x = tile.load_shared %bt
/// %xt = tile.transpose %x       // the dot's B: %bt read K-major
/// ```
///
/// `%bt` is one `[N, K]` buffer allocated before the outermost sequential loop around the
/// dot (it is rewritten each iteration, so it needs no ring). Returns `%bt`.
fn insert_transposing_stage(f: &mut Func, dot: OpId, load: OpId) -> ValueId {
    use crate::ir::{Loc, Region, TileType};
    let b = f.op(dot).operands[1];
    let loc: Loc = f.op(dot).loc.clone();
    let Type::Tile(TileType { dims, dtype, .. }) = f.ty(b).clone() else { return b };
    let transposed = vec![dims[1].clone(), dims[0].clone()];
    f.op_mut(load).set_attr(TRANSPOSE_STAGE, Attr::Bool(true));
    let buffer = SmemType { dims: transposed.clone(), dtype, swizzle: Swizzle::None, pad: 0, stages: 1 };
    let (alloc, bt) = crate::tile::new_op(f, OpKind::AllocShared, vec![], Type::Smem(buffer), vec![], &loc);
    f.values[bt.0 as usize].name = Some(SmolStr::new("b_t"));
    let effect = |f: &mut Func, kind: OpKind, operands: Vec<ValueId>| {
        crate::tile::push_op(f, kind, operands, Vec::new(), Vec::new(), &loc)
    };
    let before = effect(f, OpKind::Barrier, vec![]);
    // Both accesses of the stage say what they are (the bank-conflict lint names it).
    let mark = vec![(TRANSPOSE_STAGE, Attr::Bool(true))];
    let (transpose, t) =
        crate::tile::new_op(f, OpKind::Transpose, vec![b], Type::tile(transposed.clone(), dtype), mark.clone(), &loc);
    let store = effect(f, OpKind::StoreShared, vec![bt, t]);
    f.op_mut(store).attrs = mark;
    let after = effect(f, OpKind::Barrier, vec![]);
    let (read, x) = crate::tile::new_op(f, OpKind::LoadShared, vec![bt], Type::tile(transposed, dtype), vec![], &loc);
    let (back, xt) = crate::tile::new_op(f, OpKind::Transpose, vec![x], Type::tile(dims, dtype), vec![], &loc);
    f.op_mut(dot).operands[1] = xt;
    let prelude = [before, transpose, store, after, read, back];

    fn contains(f: &Func, region: &Region, target: OpId) -> bool {
        region.ops.iter().any(|&id| id == target || f.op(id).regions.iter().any(|r| contains(f, r, target)))
    }
    // The allocation goes before the outermost sequential loop that holds the dot (or
    // just before the stage, outside any loop); the stage goes just before the dot.
    fn place(f: &mut Func, region: Region, dot: OpId, alloc: OpId, prelude: &[OpId], placed: &mut bool) -> Region {
        let mut ops = Vec::with_capacity(region.ops.len() + prelude.len() + 1);
        for id in region.ops {
            if id == dot {
                if !std::mem::replace(placed, true) {
                    ops.push(alloc);
                }
                ops.extend_from_slice(prelude);
            } else if f.op(id).regions.iter().any(|r| contains(f, r, dot)) {
                let sequential = f.op(id).kind == OpKind::For && f.op(id).str_attr("kind") == Some("sequential");
                if sequential && !std::mem::replace(placed, true) {
                    ops.push(alloc);
                }
                let regions = std::mem::take(&mut f.op_mut(id).regions);
                let regions = regions.into_iter().map(|r| place(f, r, dot, alloc, prelude, placed)).collect();
                f.op_mut(id).regions = regions;
            }
            ops.push(id);
        }
        Region { args: region.args, ops }
    }
    let body = std::mem::take(&mut f.body);
    let mut placed = false;
    f.body = place(f, body, dot, alloc, &prelude, &mut placed);
    bt
}
