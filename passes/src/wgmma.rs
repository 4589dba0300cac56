//! When a kernel's `tile.dot`s can run as Hopper warpgroup MMAs (`mma = "wgmma"`): the
//! one rule lowering (`select-dot-instructions`), the target lints (E0704) and autotune
//! pruning share, and the marks it leaves on Schedule IR for the Tile IR passes.
//!
//! What this slice supports (docs/language.md, "Schedules and autotuning"): sm_90,
//! f16 or bf16 operands, an f32 accumulator, warpgroups (4 warps each) stacked along M
//! with `M` a multiple of 64 per warpgroup, `N` a multiple of 8 up to 256 (one
//! instruction covers every column), `K` a multiple of 16, and both operands read
//! untransposed from shared memory: A `[M, K]` (K-major) and B `[K, N]` (N-major, whose
//! rows must be a multiple of the narrowest descriptor swizzle, 32 bytes).

use smol_str::SmolStr;
use tessera_frontend::check::{DType, MmaFamily};
use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::ir::{policy as ir_policy, Attr, Func, OpId, OpKind, SmemType, Swizzle, Type, ValueId};
use crate::target::Target;

/// Rows of one `wgmma` instruction, and of the accumulator block each warpgroup owns at
/// least.
pub const WGMMA_M: i64 = 64;
/// K of one `wgmma` instruction with 16-bit operands.
pub const WGMMA_K: i64 = 16;
/// The widest N of one `wgmma` instruction.
pub const WGMMA_MAX_N: i64 = 256;
/// Warps per warpgroup.
pub const WARPGROUP_WARPS: u32 = 4;

/// The attribute of a staged `tile.load` whose shared buffer a `wgmma` reads through a
/// matrix descriptor (its swizzle is then the descriptor's, chosen from the row bytes).
pub const DESCRIPTOR_LAYOUT: &str = "wgmma_operand";

/// Where a `wgmma` operand comes from in Schedule IR.
enum Source {
    /// A `tile.load` the staging pass copies into a shared buffer.
    StagedLoad(OpId),
    /// A `tile.load_shared` of a kernel's own `tile.alloc_shared` buffer.
    Buffer(ValueId),
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
fn dot_sources(f: &Func, dot: OpId, config: &Config, target: Target) -> Result<[Source; 2], String> {
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
    if !matches!(dtype, DType::F16 | DType::BF16) || b.dtype() != Some(dtype) {
        let bt = b.dtype().map_or("?".to_string(), |d| d.to_string());
        return Err(format!("the operands are {dtype} x {bt}; `wgmma` here takes f16 or bf16 operands"));
    }
    if c.dtype() != Some(DType::F32) {
        let ct = c.dtype().map_or("?".to_string(), |d| d.to_string());
        return Err(format!("the accumulator is {ct}; `wgmma` here accumulates in f32"));
    }
    if let Some(t) = ir_policy::acc(op).filter(|&t| ir_policy::rounds_each_step(t)) {
        return Err(format!("`@accum({t})` sums in {t}; `wgmma` here accumulates in f32"));
    }
    let warps = config.warps();
    if !warps.is_multiple_of(WARPGROUP_WARPS) {
        return Err(format!("warps = {warps} is not a multiple of 4: `wgmma` runs on warpgroups of 4 warps"));
    }
    let groups = (warps / WARPGROUP_WARPS) as i64;
    if m % (WGMMA_M * groups) != 0 {
        return Err(format!(
            "M = {m}: {warps} warps are {groups} warpgroup{} and each takes whole m64 tiles of rows, so M must be a \
             multiple of {}",
            if groups == 1 { "" } else { "s" },
            WGMMA_M * groups
        ));
    }
    if n % 8 != 0 || n > WGMMA_MAX_N {
        return Err(format!("N = {n}: one `wgmma` covers a multiple of 8 columns up to 256"));
    }
    if k % WGMMA_K != 0 {
        return Err(format!("K = {k} is not a multiple of 16, the K of `wgmma` with {dtype} operands"));
    }
    let b_row_bytes = n * dtype.bytes() as i64;
    if Swizzle::wgmma_for_row(b_row_bytes).is_none() {
        return Err(format!(
            "N = {n}: a row of the [K, N] B operand is {b_row_bytes} bytes, not a multiple of 32, the narrowest \
             swizzle of `wgmma`'s matrix descriptors (N a multiple of 16 is)"
        ));
    }
    let defs = f.definitions();
    let a = source(f, &defs, op.operands[0], "A")?;
    let b = source(f, &defs, op.operands[1], "B")?;
    Ok([a, b])
}

/// The shared-memory source of operand `v` (`name` is "A" or "B"; `defs` from
/// `Func::definitions`), or why it has none that a matrix descriptor can describe.
fn source(f: &Func, defs: &[Option<OpId>], v: ValueId, name: &str) -> Result<Source, String> {
    let def = defs[v.0 as usize];
    let not_shared = format!(
        "{name} is computed in registers; `wgmma` here reads both operands from shared memory (a `tile.load` or a \
         shared buffer, passed to the dot unchanged)"
    );
    let Some(def) = def else { return Err(not_shared) };
    let op = f.op(def);
    match op.kind {
        OpKind::Load if op.operands.len() == 1 && f.ty(v).dims().len() == 2 => Ok(Source::StagedLoad(def)),
        OpKind::Load => Err(format!("{name} is a masked or higher-rank `tile.load`; `wgmma` reads a whole 2-D tile")),
        OpKind::LoadShared if op.attr("transpose").is_some() => {
            Err(format!("{name} is read transposed; `wgmma` here reads an untransposed shared buffer"))
        }
        OpKind::LoadShared => match f.ty(op.operands[0]) {
            Type::Smem(s) if s.dims.len() == 2 => Ok(Source::Buffer(op.operands[0])),
            _ => Err(format!("{name} is read from a shared buffer that is not 2-D")),
        },
        OpKind::Transpose => Err(format!(
            "{name} is transposed (`.T`) before the dot; `wgmma` here reads A as [M, K] and B as [K, N] from shared \
             memory as loaded"
        )),
        OpKind::Cast => Err(format!(
            "{name} is converted (`tile.cast`) before the dot; `wgmma` reads its operands from shared memory as loaded"
        )),
        _ => Err(not_shared),
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
        for s in sources {
            match s {
                Source::StagedLoad(load) => f.op_mut(load).set_attr(DESCRIPTOR_LAYOUT, Attr::Bool(true)),
                Source::Buffer(buffer) => {
                    if let Type::Smem(s) = f.ty(buffer).clone() {
                        f.values[buffer.0 as usize].ty = Type::Smem(descriptor_layout(&s));
                    }
                }
            }
        }
        let op = f.op_mut(dot);
        op.set_attr("instr", Attr::Str(SmolStr::new("wgmma")));
        op.set_attr("warpgroups", Attr::Int(groups));
        op.attrs.retain(|(k, _)| *k != "warps");
    }
    Ok(())
}

/// `s` laid out for a matrix descriptor: the widest swizzle its rows allow, no padding
/// (the rule above guarantees a 32-byte multiple).
pub fn descriptor_layout(s: &SmemType) -> SmemType {
    let row_bytes = s.rows_and_row_len().map_or(0, |(_, len)| len * s.dtype.bytes() as i64);
    let swizzle = Swizzle::wgmma_for_row(row_bytes).unwrap_or(s.swizzle);
    SmemType { swizzle, pad: 0, ..s.clone() }
}
