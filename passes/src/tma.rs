//! Hopper's Tensor Memory Accelerator for staged copies (`copy = "tma"`): the rule the
//! target lints (E0706), autotune pruning and lowering share, the Tile pass that marks
//! the copies (`select-copy-engine`), and the tensor maps a kernel's launch encodes.
//!
//! What this slice supports (docs/language.md, "Schedules and autotuning"): the staged
//! shared buffers that `wgmma` reads through matrix descriptors (`mma = "wgmma"`) on
//! sm_90. Their layout is already the descriptor's swizzle (`Swizzle::Wgmma(W)`: column
//! blocks of `W` bytes, each `rows × W` bytes, 16-byte chunks XOR-ed by the row), which
//! is exactly what a TMA box of `W` bytes by `rows` writes with `CU_TENSOR_MAP_SWIZZLE_W`
//! at an address aligned to the swizzle's repeat: so one copy is one box per column
//! block. Out-of-bounds box elements (ragged edges, prefetches past the end) are written
//! as zeros by the hardware, as `cp.async`'s zero fill does.
//!
//! Completion uses `mbarrier`s instead of `cp.async` groups: the kernel's commit groups
//! stay as they are in Tile IR, and the PTX backend (`ptx::tma`) gives the `g`-th group
//! barrier `g mod R` of a ring of `R = G · S` (`S` the deepest ring of staged slots, `G`
//! the commit groups per iteration of the loop) at phase parity `(g / R) mod 2`; a wait
//! for all but `n` groups waits on every group up to there.

use smol_str::SmolStr;
use tessera_frontend::check::{CopyEngine, DType, Dim, MmaFamily};
use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Attr, Func, Op, OpId, OpKind, SmemType, Swizzle, Type, ValueId};
use crate::target::Target;

/// The attribute of a `tile.cp_async` the TMA performs: `via = "tma"`.
pub const VIA: &str = "via";
pub const VIA_TMA: &str = "tma";
/// The attribute of the `tile.alloc_shared` holding the kernel's ring of mbarriers.
pub const MBARRIERS: &str = "mbarriers";
/// Bytes of one `mbarrier` object.
pub const MBARRIER_BYTES: i64 = 8;
/// The attribute of a TMA store's buffer that shares the staging rings' memory: it is
/// placed at the start of the run of staging buffers allocated right after it (they are
/// dead by the store: nothing reads them after it, and a barrier precedes it).
pub const REUSES_STAGING: &str = "reuses_staging";
/// The most elements of one box dimension (`cuTensorMapEncodeTiled`).
pub const MAX_BOX: i64 = 256;
/// Global strides of a tensor map must be multiples of this many bytes.
pub const STRIDE_ALIGN: i64 = 16;

/// Why a tensor of `shape` (outermost first) with `elem_bytes`-byte elements cannot have a
/// tensor map: a global stride that is not a multiple of [`STRIDE_ALIGN`] bytes. The
/// launcher refuses such an argument before the driver is asked, on the GPU and on the
/// interpreter standing in for it alike.
pub fn stride_problem(name: &str, shape: &[u64], elem_bytes: u64) -> Option<String> {
    // Every outer stride is a multiple of a row's, so the rows decide.
    let (&last, outer) = shape.split_last()?;
    let row = last * elem_bytes;
    (!outer.is_empty() && !row.is_multiple_of(STRIDE_ALIGN as u64)).then(|| {
        format!(
            "`{name}` (shape {shape:?}) has rows of {row} bytes; copy=\"tma\" needs every stride to be a multiple \
             of {STRIDE_ALIGN} bytes (pad the tensor, or use copy=\"cp.async\")"
        )
    })
}

#[cfg(test)]
mod stride_tests {
    use super::stride_problem;

    #[test]
    fn a_tensor_map_needs_rows_of_a_multiple_of_16_bytes() {
        assert_eq!(stride_problem("A", &[64, 72], 2), None);
        let rows = stride_problem("A", &[64, 70], 2).unwrap();
        assert!(rows.starts_with("`A` (shape [64, 70]) has rows of 140 bytes"), "{rows}");
        assert_eq!(stride_problem("Q", &[2, 3, 8], 2), None);
        assert!(stride_problem("Q", &[2, 3, 4], 2).unwrap().contains("rows of 8 bytes"));
        // fp8 rows of 16 bytes, whatever the outer dims.
        assert_eq!(stride_problem("K", &[4, 3, 16], 1), None);
        // A vector has no stride.
        assert_eq!(stride_problem("b", &[70], 2), None);
    }
}

/// One tensor map a kernel reads through: encoded by the launcher from the tensor
/// argument (`cuTensorMapEncodeTiled`) and passed as a 128-byte `__grid_constant__`
/// parameter after the kernel's own parameters, in the order of `KernelAbi::tensor_maps`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorMapSpec {
    /// The tensor's position among the kernel's parameters.
    pub param: usize,
    pub dtype: DType,
    /// Box extents, innermost (contiguous) dim first, one per tensor dim.
    pub box_dims: Vec<u32>,
    /// The swizzle span in bytes (32, 64 or 128).
    pub swizzle_bytes: u32,
}

impl TensorMapSpec {
    /// Bytes one box holds (what a copy signals on its mbarrier).
    pub fn box_bytes(&self) -> i64 {
        self.box_dims.iter().map(|&d| d as i64).product::<i64>() * self.dtype.bytes() as i64
    }
}

/// Why `copy = "tma"` cannot be used for the kernel `graph` (Graph IR) under `config` on
/// `target`, and where (`None`: the kernel's name); `None` when it can, or when the
/// schedule does not ask for it.
pub fn tma_problem(graph: &Func, config: &Config, target: Target) -> Option<(String, Option<TextRange>)> {
    if config.copy() != CopyEngine::Tma || !target.is_gpu() {
        return None;
    }
    // The dot operands staging copies: each tensor's rows must be a multiple of 16 bytes
    // (a tensor map's global strides), provably so when its last dim is a constant.
    let defs = graph.definitions();
    for id in graph.walk() {
        let op = graph.op(id);
        if op.kind != OpKind::Dot || op.operands.len() < 2 {
            continue;
        }
        for &operand in &op.operands[..2] {
            let (_, source) = crate::sched::dot_operand_source(graph, &defs, operand);
            let Some(load) = source.map(|d| graph.op(d)).filter(|l| l.kind == OpKind::Load) else { continue };
            let Some(view) = defs[load.operands[0].0 as usize].map(|d| graph.op(d)) else { continue };
            if view.kind != OpKind::View {
                continue;
            }
            let Some(Type::Tensor(t)) = view.operands.first().map(|&v| graph.ty(v)) else { continue };
            let Some(last) = t.dims.last().and_then(Dim::as_const) else { continue };
            let row_bytes = last * t.dtype.bytes() as i64;
            if row_bytes % STRIDE_ALIGN != 0 {
                let name = graph.values[view.operands[0].0 as usize].name.clone().unwrap_or_else(|| SmolStr::new("?"));
                return Some((
                    format!(
                        "the rows of `{name}` are {last} × {} = {row_bytes} bytes; a tensor map's row stride must be \
                         a multiple of {STRIDE_ALIGN} bytes",
                        t.dtype.bytes()
                    ),
                    Some(load.loc.range),
                ));
            }
        }
    }
    // Then what the target and the schedule allow (after the rows: a stride no target
    // can take is the same reason everywhere).
    if target != Target::Sm90 {
        return Some((format!("the Tensor Memory Accelerator is a Hopper unit (sm_90); the target is {target}"), None));
    }
    if config.mma() != MmaFamily::Wgmma {
        return Some((
            "TMA copies fill only the shared buffers that warpgroup MMAs read: it needs mma=\"wgmma\"".into(),
            None,
        ));
    }
    None
}

/// The `select-copy-engine` Tile pass: under `copy = "tma"`, marks each `tile.cp_async`
/// into a `wgmma` descriptor buffer `via = "tma"` and allocates the kernel's ring of
/// mbarriers (one per slot of the deepest staged ring).
pub(crate) fn select_copy_engine(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    if config.copy() != CopyEngine::Tma || !target.is_gpu() || !f.has_op_of(&[OpKind::CpAsync]) {
        return Ok(());
    }
    if let Some((why, at)) = tma_problem(f, config, target) {
        return Err(LowerError {
            message: format!("copy=\"tma\" cannot be used: {why}"),
            range: at.unwrap_or(f.loc.range),
        });
    }
    let defs = f.definitions();
    let mut ring = 0i64;
    let mut marked = Vec::new();
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::CpAsync {
            continue;
        }
        let Type::Smem(slot) = f.ty(op.operands[0]) else { continue };
        if !matches!(slot.swizzle, Swizzle::Wgmma(_)) {
            continue;
        }
        copy_spec(f, &defs, op).map_err(|why| LowerError {
            message: format!("copy=\"tma\" cannot be used for this copy: {why}"),
            range: op.loc.range,
        })?;
        let stages = match defs[op.operands[0].0 as usize].map(|d| f.op(d)) {
            Some(d) if d.kind == OpKind::SmemSlot => match f.ty(d.operands[0]) {
                Type::Smem(buffer) => buffer.stages.max(1) as i64,
                _ => 1,
            },
            _ => 1,
        };
        ring = ring.max(stages);
        marked.push(id);
    }
    if marked.is_empty() {
        return Ok(());
    }
    // A ring of `G · stages` barriers, `G` the commit groups per iteration of the deepest
    // pipelined loop: group `g` reuses the barrier of group `g − G · stages`, which every
    // thread has waited for (and passed a CTA barrier after) by then. With `stages`
    // barriers, a loop of two groups (attention's K and V) reuses a barrier in its
    // prologue, before anyone has waited for its first phase (`analysis::phases`).
    let groups = f
        .walk()
        .into_iter()
        .map(|id| f.op(id))
        .filter(|op| op.kind == OpKind::For)
        .map(|op| op.regions[0].ops.iter().filter(|&&o| f.op(o).kind == OpKind::AsyncCommit).count() as i64)
        .max()
        .unwrap_or(1)
        .max(1);
    ring *= groups;
    for id in marked {
        f.op_mut(id).set_attr(VIA, Attr::Str(SmolStr::new(VIA_TMA)));
    }
    let ty = Type::Smem(SmemType {
        dims: vec![Dim::constant(ring)],
        dtype: DType::I64,
        swizzle: Swizzle::None,
        pad: 0,
        stages: 1,
    });
    let loc = f.loc.clone();
    let (alloc, v) = crate::tile::new_op(f, OpKind::AllocShared, vec![], ty, vec![(MBARRIERS, Attr::Bool(true))], &loc);
    f.values[v.0 as usize].name = Some(SmolStr::new("mbarriers"));
    f.body.ops.insert(0, alloc);
    store_through_shared(f, target);
    Ok(())
}

/// The TMA stores of a kernel with TMA copies: each `tile.store` of a whole 2-D tile at
/// the kernel's top level (its epilogue, run once per program) whose rows take a
/// descriptor swizzle and whose staging buffer still fits the target's shared memory
/// becomes
///
/// ```text
/// tile.store_shared %out_s, %t    // every thread its elements, in the swizzle
/// tile.barrier                    // (with fence.proxy.async: the TMA reads through the async proxy)
/// tile.tma_store %view, %out_s    // thread 0: a box per swizzle column block, then waits for its reads
/// ```
///
/// A store inside a loop or a branch keeps `st.global` (the buffer would need its own
/// protection against the next iteration's writes); so does a masked store.
fn store_through_shared(f: &mut Func, target: Target) {
    let Some(limit) = crate::analysis::limits::GpuLimits::of(target).map(|l| l.smem_per_block as u64) else { return };
    let defs = f.definitions();
    let mut used = crate::analysis::shared_bytes(f);
    // The staging buffers: a run of top-level allocations, and where they are last used.
    let staging_run: Vec<usize> = f
        .body
        .ops
        .iter()
        .enumerate()
        .filter(|&(_, &id)| f.op(id).kind == OpKind::AllocShared && f.op(id).attr("staging").is_some())
        .map(|(pos, _)| pos)
        .collect();
    let contiguous = staging_run.windows(2).all(|w| w[1] == w[0] + 1);
    let staging_bytes: u64 =
        staging_run.iter().map(|&pos| crate::analysis::added_bytes(f, f.op(f.body.ops[pos]))).sum();
    let mut staging_values: Vec<bool> = vec![false; f.values.len()];
    for &pos in &staging_run {
        staging_values[f.op(f.body.ops[pos]).results[0].0 as usize] = true;
    }
    for id in f.walk() {
        let op = f.op(id);
        if op.kind == OpKind::SmemSlot && staging_values[op.operands[0].0 as usize] {
            staging_values[op.results[0].0 as usize] = true;
        }
    }
    fn touches(f: &Func, id: OpId, staging: &[bool]) -> bool {
        let op = f.op(id);
        (op.kind != OpKind::AllocShared && op.operands.iter().any(|v| staging[v.0 as usize]))
            || op.regions.iter().any(|r| r.ops.iter().any(|&i| touches(f, i, staging)))
    }
    let last_staging_use = f.body.ops.iter().rposition(|&id| touches(f, id, &staging_values));
    let mut aliased = false;
    let mut rewrites = Vec::new();
    for (pos, &id) in f.body.ops.iter().enumerate() {
        let op = f.op(id);
        if op.kind != OpKind::Store || op.operands.len() != 2 || op.attr("atomic").is_some() {
            continue;
        }
        let Type::View(v) = f.ty(op.operands[0]) else { continue };
        let Some(dims) = f.ty(op.operands[0]).const_dims() else { continue };
        let [rows, cols] = dims[..] else { continue };
        let row_bytes = cols * v.dtype.bytes() as i64;
        // The swizzle the fragments' stores write without bank conflicts (the W0601
        // simulation of the `#wgmma` layout): 32 bytes for 4-byte elements, where a
        // warp's row segments are 32 bytes; the widest the rows allow otherwise.
        let widest = if v.dtype.bytes() >= 4 { 32 } else { 128 };
        let Some(swizzle) = Swizzle::wgmma_for_row_up_to(row_bytes, widest) else { continue };
        let slot = SmemType { dims: v.dims.clone(), dtype: v.dtype, swizzle, pad: 0, stages: 1 };
        let Some(bytes) = slot.bytes() else { continue };
        if rows > MAX_BOX || slot_spec(f, &defs, &slot, op.operands[0]).is_err() {
            continue;
        }
        // The first such store after the staging buffers' last use takes their memory.
        let alias = !aliased
            && !staging_run.is_empty()
            && contiguous
            && bytes <= staging_bytes
            && last_staging_use.is_some_and(|last| pos > last);
        if !alias && used + bytes > limit {
            continue;
        }
        if alias {
            aliased = true;
        } else {
            used += bytes;
        }
        rewrites.push((pos, id, slot, alias));
    }
    // Back to front: each rewrite replaces one op of the body by three. The buffers are
    // allocated first thing, after the positions are used.
    let mut allocs = Vec::new();
    let mut shared_alloc = None;
    for (pos, id, slot, alias) in rewrites.into_iter().rev() {
        let (view, tile, loc) = (f.op(id).operands[0], f.op(id).operands[1], f.op(id).loc.clone());
        let attrs = if alias { vec![(REUSES_STAGING, Attr::Bool(true))] } else { Vec::new() };
        let (alloc, buffer) = crate::tile::new_op(f, OpKind::AllocShared, vec![], Type::Smem(slot), attrs, &loc);
        f.values[buffer.0 as usize].name = Some(SmolStr::new("out_s"));
        let op = |f: &mut Func, kind: OpKind, operands: Vec<ValueId>| {
            crate::tile::push_op(f, kind, operands, Vec::new(), Vec::new(), &loc)
        };
        let mut ops = Vec::new();
        if alias {
            // Every warp is done with the staging buffers before any overwrites them.
            ops.push(op(f, OpKind::Barrier, vec![]));
        }
        ops.push(op(f, OpKind::StoreShared, vec![buffer, tile]));
        ops.push(op(f, OpKind::Barrier, vec![]));
        ops.push(op(f, OpKind::TmaStore, vec![view, buffer]));
        f.body.ops.splice(pos..=pos, ops);
        if alias {
            shared_alloc = Some(alloc);
        } else {
            allocs.push(alloc);
        }
    }
    // Right before the staging run (which the rewrites above did not move: it precedes
    // every use of the staging buffers, and so every aliased store).
    if let (Some(alloc), Some(&first)) = (shared_alloc, staging_run.first()) {
        f.body.ops.insert(first, alloc);
    }
    f.body.ops.splice(0..0, allocs);
}

/// Whether the shared buffer `op` allocates shares the staging rings' memory
/// ([`REUSES_STAGING`]): it adds nothing to the kernel's shared memory.
pub fn reuses_staging(op: &Op) -> bool {
    op.kind == OpKind::AllocShared && op.attr(REUSES_STAGING).is_some()
}

/// Whether `op` (a `tile.cp_async`) is performed by the TMA.
pub fn is_tma_copy(op: &Op) -> bool {
    op.kind == OpKind::CpAsync && op.str_attr(VIA) == Some(VIA_TMA)
}

/// Whether `op` moves data through a tensor map: a TMA copy or a `tile.tma_store`.
fn uses_tensor_map(op: &Op) -> bool {
    is_tma_copy(op) || op.kind == OpKind::TmaStore
}

/// The swizzle span `W` in bytes of a TMA copy's slot, the number of `W`-byte column
/// blocks (one box each) and the rows of each.
pub fn blocks(slot: &SmemType) -> Option<(i64, i64, i64)> {
    let Swizzle::Wgmma(width) = slot.swizzle else { return None };
    let (rows, row_len) = slot.rows_and_row_len()?;
    let row_bytes = row_len * slot.dtype.bytes() as i64;
    let width = width as i64;
    (row_bytes % width == 0).then_some((width, row_bytes / width, rows))
}

/// The tensor map of the TMA copy `op` (`tile.cp_async %slot, %view` or `tile.tma_store
/// %view, %slot` in Tile IR), or why it cannot be one: the view must keep the tensor's
/// contiguous last dim and one other, and each box must fit the hardware's limits.
pub fn copy_spec(f: &Func, defs: &[Option<OpId>], op: &Op) -> Result<TensorMapSpec, String> {
    let (slot, view) = match op.kind {
        OpKind::TmaStore => (op.operands[1], op.operands[0]),
        _ => (op.operands[0], op.operands[1]),
    };
    let Type::Smem(slot) = f.ty(slot) else { return Err("the shared side is not a shared buffer".into()) };
    let mut spec = slot_spec(f, defs, slot, view)?;
    // A multicast copy's box is one CTA's slice of the rows (`crate::cluster`).
    let ways = crate::cluster::multicast_ways(f, op);
    if ways > 1 {
        let row = row_coordinate(&spec).ok_or("a multicast box without rows")?;
        let rows = &mut spec.box_dims[row];
        if *rows as i64 % ways != 0 {
            return Err(format!("a box of {rows} rows does not split into {ways} multicast slices"));
        }
        *rows /= ways as u32;
    }
    Ok(spec)
}

/// The position in a box's coordinates (innermost dim first) of its rows: the one dim
/// besides the innermost that is longer than 1.
pub fn row_coordinate(spec: &TensorMapSpec) -> Option<usize> {
    spec.box_dims.iter().skip(1).position(|&d| d > 1).map(|i| i + 1)
}

/// The tensor map that moves a shared slot of type `slot` to or from the global `view`.
fn slot_spec(f: &Func, defs: &[Option<OpId>], slot: &SmemType, view: ValueId) -> Result<TensorMapSpec, String> {
    let (width, _, rows) = blocks(slot).ok_or("the buffer is not laid out in a WGMMA descriptor's swizzle")?;
    let view = defs[view.0 as usize].map(|d| f.op(d)).filter(|v| v.kind == OpKind::View);
    let view = view.ok_or("the global side is not a view of a tensor parameter")?;
    let tensor = view.operands[0];
    let param =
        f.params.iter().position(|&p| p == tensor).ok_or("the global side is not a view of a tensor parameter")?;
    let Type::Tensor(t) = f.ty(tensor) else { return Err("the global side is not a tensor".into()) };
    let rank = t.dims.len();
    if !(2..=5).contains(&rank) {
        return Err(format!("a tensor map has 2 to 5 dims; the tensor has {rank}"));
    }
    let squeeze: Vec<i64> = match view.attr("squeeze") {
        Some(Attr::Ints(v)) => v.clone(),
        _ => Vec::new(),
    };
    let kept: Vec<usize> = (0..rank).filter(|d| !squeeze.contains(&(*d as i64))).collect();
    let [row_dim, last] = kept[..] else {
        return Err(format!("the view keeps {} dims of the tensor; a TMA copy takes two", kept.len()));
    };
    if last != rank - 1 {
        return Err("the view does not keep the tensor's contiguous last dim".into());
    }
    let eb = slot.dtype.bytes() as i64;
    let box_inner = width / eb;
    if rows > MAX_BOX || box_inner > MAX_BOX {
        return Err(format!("a box of {rows} × {box_inner} elements; each box dim is at most {MAX_BOX}"));
    }
    let mut box_dims = vec![1u32; rank];
    box_dims[0] = box_inner as u32;
    box_dims[rank - 1 - row_dim] = rows as u32;
    Ok(TensorMapSpec { param, dtype: slot.dtype, box_dims, swizzle_bytes: width as u32 })
}

/// The distinct tensor maps of a Tile IR kernel's TMA copies and stores, in the order of
/// first use.
pub fn tensor_maps(f: &Func) -> Result<Vec<TensorMapSpec>, String> {
    Ok(copy_maps(f)?.maps)
}

/// A kernel's tensor maps ([`tensor_maps`]) and, for each TMA copy and store, its map's
/// position.
pub struct CopyMaps {
    pub maps: Vec<TensorMapSpec>,
    pub copies: Vec<(OpId, usize)>,
}

/// The [`CopyMaps`] of a Tile IR kernel.
pub fn copy_maps(f: &Func) -> Result<CopyMaps, String> {
    if !f.has_op_of(&[OpKind::CpAsync, OpKind::TmaStore]) {
        return Ok(CopyMaps { maps: Vec::new(), copies: Vec::new() });
    }
    let defs = f.definitions();
    let (mut maps, mut copies): (Vec<TensorMapSpec>, Vec<(OpId, usize)>) = (Vec::new(), Vec::new());
    for id in f.walk() {
        let op = f.op(id);
        if !uses_tensor_map(op) {
            continue;
        }
        let spec = copy_spec(f, &defs, op)?;
        let index = match maps.iter().position(|m| *m == spec) {
            Some(i) => i,
            None => {
                maps.push(spec);
                maps.len() - 1
            }
        };
        copies.push((id, index));
    }
    Ok(CopyMaps { maps, copies })
}

/// The mbarrier ring of a Tile IR kernel with TMA copies: its buffer and its depth (the
/// buffer holds twice as many barriers when a producer warpgroup adds its empty ring,
/// `warp_spec::EMPTY_BARRIERS`).
pub fn mbarrier_ring(f: &Func) -> Option<(ValueId, i64)> {
    f.body
        .ops
        .iter()
        .map(|&id| f.op(id))
        .find(|op| op.kind == OpKind::AllocShared && op.attr(MBARRIERS).is_some())
        .and_then(|op| {
            let Type::Smem(s) = f.ty(op.results[0]) else { return None };
            let barriers = s.dims.first()?.as_const()?;
            let rings = if op.attr(crate::warp_spec::EMPTY_BARRIERS).is_some() { 2 } else { 1 };
            Some((op.results[0], barriers / rings))
        })
}
