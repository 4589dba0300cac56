//! Warp specialization (`producer = "warpgroup"` or `"pingpong"`, sm_90a): a producer
//! warpgroup issues the TMA copies of the K loop while the schedule's `warps` (the
//! consumers) run its `wgmma` dots and register math, as CUTLASS 3's
//! `KernelTmaWarpSpecialized` GEMMs and FlashAttention-3's forward kernel do. Under
//! `"pingpong"` the two consumer warpgroups also take turns at the loop's first dot.
//!
//! - The rule (E0707, shared by the target lints, autotune pruning and lowering):
//!   [`producer_problem`] on Graph IR.
//! - The Tile pass `specialize-warps` ([`specialize_warps`]) checks the lowered loop,
//!   marks it `warp_specialized` (and `pingpong`), adds the producer's threads and
//!   register split to the kernel and a second ring of mbarriers, the "empty" ring.
//! - The PTX backend (`ptx::warp_spec`) emits the two roles. Tile IR keeps one program
//!   (the interpreter and the race checker read it as before); the roles are a refinement
//!   of its staged loop, which the PTX emulator checks against the interpreter.
//!
//! The protocol, with `G` commit groups per iteration and a ring of `R = G · stages`
//! slots: the producer's `g`-th group completes on full barrier `g mod R` (as without a
//! producer); the consumers arrive on empty barrier `g mod R` (an arrival count of every
//! consumer thread) once the dot of the iteration that read group `g` has returned (the
//! groups they waited for before the loop, when they start); the producer waits for
//! empty barrier `g mod R` at phase parity `(g / R − 1) mod 2` before it issues group
//! `g ≥ R`, whose slots group `g − R` used last.

use tessera_frontend::check::CopyEngine;
use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Attr, Func, OpId, OpKind, Region, Type, ValueId};
use crate::target::Target;

/// Kernel attributes of a warp-specialized kernel: the producer's threads (launched
/// after the `threads` consumers) and the `setmaxnreg` register counts of both roles.
pub const PRODUCER_THREADS: &str = "producer_threads";
pub const PRODUCER_REGS: &str = "producer_regs";
pub const CONSUMER_REGS: &str = "consumer_regs";
/// The attribute of the K loop the producer feeds.
pub const WARP_SPECIALIZED: &str = "warp_specialized";
/// The attribute of a specialized K loop whose two consumer warpgroups take turns at
/// its first dot (`producer = "pingpong"`).
pub const PINGPONG: &str = "pingpong";
/// The attribute of an mbarrier ring allocation that also holds the empty barriers
/// (its second half).
pub const EMPTY_BARRIERS: &str = "empty_barriers";

/// One warpgroup.
pub const WARPGROUP_THREADS: i64 = 128;
/// The producer's registers after `setmaxnreg.dec`: what issuing TMA copies needs.
/// FlashAttention-3's `LoadRegisterRequirement` for two consumer warpgroups; CUTLASS's
/// GEMMs keep 40, but our producer's slice (coordinates, the barrier ring) assembles
/// without spills in 24, and the 16 registers more per consumer thread halve
/// attention's spills at D = 128 (docs/targets.md).
pub const PRODUCER_REG_COUNT: i64 = 24;
/// The registers of an SM (and of one CTA at most).
const REGISTER_FILE: i64 = 65536;

/// The consumers' registers after `setmaxnreg.inc`: what the register file has left
/// after the producer, per consumer thread, in steps of 8, at most 240
/// (FlashAttention-3's `MmaRegisterRequirement` for two consumer warpgroups).
pub fn consumer_reg_count(consumer_threads: i64) -> i64 {
    let left = (REGISTER_FILE - WARPGROUP_THREADS * PRODUCER_REG_COUNT) / consumer_threads.max(1);
    (left / 8 * 8).min(240)
}

/// Why `producer = "warpgroup"` (or `"pingpong"`) cannot be used for the kernel `graph`
/// (Graph IR) under `config` on `target`, and where (`None`: the kernel's name); `None`
/// when it can, or when the schedule does not ask for it. Its reasons about the kernel
/// come first and hold on every target, so the lints check it before the TMA and WGMMA
/// rules (E0706, E0704).
///
/// The producer feeds one sequential loop (the K loop) that holds every dot of the
/// kernel: each dot's B is loaded in that loop (a `tile.load`, its `.T`, or a shared
/// buffer the loop fills with `tile.cp_async`), its A is loaded there too or is a
/// register tile (loaded before the loop, or computed: `wgmma` reads A from registers),
/// and the rest of the loop computes in registers (flash attention's online softmax).
pub fn producer_problem(graph: &Func, config: &Config, target: Target) -> Option<(String, Option<TextRange>)> {
    if !config.schedule.producer_warpgroup() || !target.is_gpu() {
        return None;
    }
    let dots: Vec<OpId> = graph.walk().into_iter().filter(|&id| graph.op(id).kind == OpKind::Dot).collect();
    let Some(&first) = dots.first() else {
        return Some(("the kernel has no `tile.dot` for a producer to feed".into(), None));
    };
    let Some(k_loop) = enclosing_loop(graph, &graph.body, first) else {
        return Some((
            "the dot is not directly in a sequential `tile.range` loop (the K loop)".into(),
            Some(graph.op(first).loc.range),
        ));
    };
    let body = &graph.op(k_loop).regions[0];
    // The split takes the K loop at the kernel's top level (inside grid loops only): a
    // persistent kernel's K loop sits in its sequential loop over tiles.
    let around = enclosing_kinds(graph, &graph.body, k_loop).unwrap_or_default();
    if around.iter().any(|&kind| kind != OpKind::GridParallel) {
        return Some((
            "the K loop is inside another loop or a branch (a persistent kernel's loop over tiles, say): a producer \
             warpgroup feeds one K loop at the top of each program"
                .into(),
            Some(graph.op(k_loop).loc.range),
        ));
    }
    if let Some(&outside) = dots.iter().find(|d| !body.ops.contains(d)) {
        return Some((
            "this dot is not in the K loop of the first one: a producer warpgroup feeds one loop".into(),
            Some(graph.op(outside).loc.range),
        ));
    }
    let defs = graph.definitions();
    // Buffers the loop fills with `tile.cp_async` (explicit staging).
    let filled: Vec<ValueId> = body
        .ops
        .iter()
        .map(|&id| graph.op(id))
        .filter(|op| op.kind == OpKind::CpAsync)
        .filter_map(|op| op.operands.first().copied())
        .collect();
    // The loads that feed the dots (through a transpose: a K-major `b.T`).
    let mut operand_loads: Vec<OpId> = Vec::new();
    for &dot in &dots {
        let dot_op = graph.op(dot);
        let at = Some(dot_op.loc.range);
        for i in [0, 1] {
            let Some(&v) = dot_op.operands.get(i) else { continue };
            let in_loop = |d: OpId| body.ops.contains(&d).then_some(d);
            let mut def = defs[v.0 as usize].and_then(in_loop);
            let transposed = def.is_some_and(|d| graph.op(d).kind == OpKind::Transpose);
            if let Some(t) = def.filter(|_| transposed) {
                def = graph.op(t).operands.first().and_then(|&x| defs[x.0 as usize]).and_then(in_loop);
            }
            let loaded = def.filter(|&d| is_load(graph, d, &filled));
            operand_loads.extend(loaded);
            // A may also be a register tile; B is read from shared memory.
            if i == 0 {
                continue;
            }
            if loaded.is_none() {
                return Some((
                    "the dot's B is not loaded in the K loop (a `tile.load`, its `.T`, or a shared buffer the loop \
                     fills with `tile.cp_async`): the producer stages B, which `wgmma` reads from shared memory"
                        .into(),
                    at,
                ));
            }
            if let Type::Tile(t) = graph.ty(v) {
                if t.dtype.bits() == 8 && !transposed {
                    return Some((
                        format!(
                            "B is {} loaded as [K, N], which takes a transposing stage that every warp runs (load \
                             it as [N, K] and pass `b.T`)",
                            t.dtype
                        ),
                        at,
                    ));
                }
            }
        }
    }
    if let Some(problem) = register_work_problem(graph, &body.ops, &operand_loads) {
        return Some(problem);
    }
    if config.schedule.pingpong() && config.schedule.warps() != 8 {
        return Some((
            format!(
                "ping-pong takes turns between two consumer warpgroups: the schedule needs `warps=8` (it has {})",
                config.schedule.warps()
            ),
            None,
        ));
    }
    // Last: the reasons above hold on every target, this one names the schedule.
    if config.copy() != CopyEngine::Tma {
        return Some((
            "the producer warpgroup issues TMA copies: the schedule needs `copy=\"tma\"` (and `mma=\"wgmma\"`)".into(),
            None,
        ));
    }
    None
}

/// The schedule's `producer` value as written in a diagnostic: `producer="warpgroup"`
/// or `producer="pingpong"`.
pub fn asked(config: &Config) -> &'static str {
    if config.schedule.pingpong() {
        "producer=\"pingpong\""
    } else {
        "producer=\"warpgroup\""
    }
}

/// A `tile.load`, or a read of a buffer the loop fills with `tile.cp_async`.
fn is_load(graph: &Func, id: OpId, filled: &[ValueId]) -> bool {
    let op = graph.op(id);
    match op.kind {
        OpKind::Load => true,
        OpKind::LoadShared => op.operands.first().is_some_and(|b| filled.contains(b)),
        _ => false,
    }
}

/// The first op of `ops` (or of a branch in them) that is neither a load feeding a dot,
/// the loop's own staging, nor work in registers: the consumers run the loop without the
/// producer's copies, so memory traffic of their own would go unstaged.
fn register_work_problem(graph: &Func, ops: &[OpId], operand_loads: &[OpId]) -> Option<(String, Option<TextRange>)> {
    for &id in ops {
        let op = graph.op(id);
        let fine = match op.kind {
            OpKind::Load | OpKind::LoadShared => operand_loads.contains(&id),
            OpKind::If => {
                if let Some(problem) =
                    op.regions.iter().find_map(|r| register_work_problem(graph, &r.ops, operand_loads))
                {
                    return Some(problem);
                }
                true
            }
            OpKind::CpAsync
            | OpKind::Barrier
            | OpKind::AsyncCommit
            | OpKind::AsyncWait
            | OpKind::SchedParam
            | OpKind::TensorDim
            | OpKind::Dot => true,
            _ => is_register_work(op),
        };
        if !fine {
            return Some((
                format!(
                    "the K loop also has `{}`: a producer feeds a loop that loads the dots' operands and otherwise \
                     computes in registers",
                    op.kind.name()
                ),
                Some(op.loc.range),
            ));
        }
    }
    None
}

/// The `scf.for {kind = "sequential"}` whose body holds `target` directly (for a dot:
/// the K loop).
pub(crate) fn enclosing_loop(f: &Func, region: &Region, target: OpId) -> Option<OpId> {
    for &id in &region.ops {
        let op = f.op(id);
        for r in &op.regions {
            if op.kind == OpKind::For && op.str_attr("kind") == Some("sequential") && r.ops.contains(&target) {
                return Some(id);
            }
            if let Some(found) = enclosing_loop(f, r, target) {
                return Some(found);
            }
        }
    }
    None
}

/// The kinds of the ops whose regions hold `target`, outermost first (None when `region`
/// does not hold it).
fn enclosing_kinds(f: &Func, region: &Region, target: OpId) -> Option<Vec<OpKind>> {
    if region.ops.contains(&target) {
        return Some(Vec::new());
    }
    region.ops.iter().find_map(|&id| {
        let op = f.op(id);
        op.regions.iter().find_map(|r| enclosing_kinds(f, r, target)).map(|mut kinds| {
            kinds.insert(0, op.kind);
            kinds
        })
    })
}

/// The Tile pass: marks the staged K loop for a producer warpgroup (see the module).
pub(crate) fn specialize_warps(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    if !config.schedule.producer_warpgroup() || !target.is_gpu() {
        return Ok(());
    }
    let internal = |f: &Func, why: String| LowerError {
        message: format!("internal error: {}: {why}", asked(config)),
        range: f.loc.range,
    };
    let threads = f.attr("threads").and_then(Attr::as_int).unwrap_or(0);
    if threads <= 0 || threads % WARPGROUP_THREADS != 0 {
        return Err(internal(f, format!("{threads} consumer threads are not whole warpgroups")));
    }
    let loops: Vec<OpId> = f
        .body
        .ops
        .iter()
        .copied()
        .filter(|&id| {
            let op = f.op(id);
            op.kind == OpKind::For
                && op.regions[0]
                    .ops
                    .iter()
                    .any(|&o| f.op(o).kind == OpKind::Dot && f.op(o).str_attr("instr") == Some("wgmma"))
        })
        .collect();
    let [k_loop] = loops[..] else {
        return Err(internal(f, format!("{} top-level loops hold a wgmma dot, not one", loops.len())));
    };
    for id in f.walk() {
        let op = f.op(id);
        if op.kind == OpKind::CpAsync && !crate::tma::is_tma_copy(op) {
            return Err(internal(f, "a staged copy is not a TMA copy".into()));
        }
        if op.kind == OpKind::CpAsync && !f.body.ops.contains(&id) && !f.op(k_loop).regions[0].ops.contains(&id) {
            return Err(internal(f, "a TMA copy outside the K loop and its prologue".into()));
        }
    }
    let body = f.op(k_loop).regions[0].ops.clone();
    if let Some(why) = loop_op_problem(f, &body, true) {
        return Err(internal(f, why));
    }
    // The producer's commit groups per iteration: the consumers release as many after
    // the iteration's last dot.
    let groups = body.iter().filter(|&&id| f.op(id).kind == OpKind::AsyncCommit).count() as i64;
    if groups == 0 {
        return Err(internal(f, "the K loop commits no copies".into()));
    }
    if config.schedule.pingpong() && threads != 2 * WARPGROUP_THREADS {
        return Err(internal(f, format!("ping-pong with {threads} consumer threads, not two warpgroups")));
    }
    let Some((ring, depth)) = crate::tma::mbarrier_ring(f) else {
        return Err(internal(f, "the kernel has no mbarrier ring".into()));
    };
    // Group `g` completes on full barrier `g mod R` and is released on empty barrier
    // `g mod R`. With R = groups × stages (`select-copy-engine`'s ring), the group that
    // last used the slot a group refills is the one R groups earlier, whose release the
    // producer waits for. A second ring after the full one, in the same allocation, holds
    // the empty barriers.
    if depth % groups != 0 {
        return Err(internal(f, format!("a ring of {depth} barriers for {groups} groups per iteration")));
    }
    if let Type::Smem(s) = &mut f.values[ring.0 as usize].ty {
        s.dims = vec![tessera_frontend::check::Dim::constant(2 * depth)];
    }
    let alloc = f.walk().into_iter().find(|&id| f.op(id).results.first() == Some(&ring));
    if let Some(alloc) = alloc {
        f.op_mut(alloc).set_attr(EMPTY_BARRIERS, Attr::Bool(true));
    }
    f.op_mut(k_loop).set_attr(WARP_SPECIALIZED, Attr::Bool(true));
    if config.schedule.pingpong() {
        f.op_mut(k_loop).set_attr(PINGPONG, Attr::Bool(true));
    }
    f.set_attr(PRODUCER_THREADS, Attr::Int(WARPGROUP_THREADS));
    f.set_attr(PRODUCER_REGS, Attr::Int(PRODUCER_REG_COUNT));
    f.set_attr(CONSUMER_REGS, Attr::Int(consumer_reg_count(threads)));
    Ok(())
}

/// Why an op of the specialized loop's body `ops` (Tile IR) is not one the two roles
/// split: the dots, the producer's staging (at the loop's top level only: the consumers
/// skip its copies and CTA barriers) and work in registers.
fn loop_op_problem(f: &Func, ops: &[OpId], top: bool) -> Option<String> {
    for &id in ops {
        let op = f.op(id);
        let fine = match op.kind {
            OpKind::Dot => op.str_attr("instr") == Some("wgmma"),
            // Every `tile.cp_async` is a TMA copy (checked before).
            OpKind::CpAsync | OpKind::SmemSlot | OpKind::AsyncCommit | OpKind::AsyncWait | OpKind::Barrier => top,
            OpKind::If => {
                if let Some(why) = op.regions.iter().find_map(|r| loop_op_problem(f, &r.ops, false)) {
                    return Some(why);
                }
                true
            }
            _ => is_register_work(op),
        };
        if !fine {
            let at = if top { "the K loop" } else { "a branch of the K loop" };
            return Some(format!("{at} has `{}`", op.kind.name()));
        }
    }
    None
}

/// An op that computes in registers (or names a view, or yields), in Graph IR and in
/// Tile IR: what the consumers may do in the K loop besides its dots.
fn is_register_work(op: &crate::ir::Op) -> bool {
    match op.kind {
        OpKind::View
        | OpKind::Yield
        | OpKind::Constant
        | OpKind::Full
        | OpKind::Splat
        | OpKind::Arange
        | OpKind::Broadcast
        | OpKind::ExpandDims
        | OpKind::Transpose
        | OpKind::ConvertLayout
        | OpKind::Reduce
        | OpKind::CausalMask
        | OpKind::Rand
        | OpKind::Select
        | OpKind::Cmp
        | OpKind::Cast => true,
        k => (k.is_binary() || k.is_unary_math()) && op.regions.is_empty(),
    }
}

/// The producer's threads of a kernel (0 without a producer warpgroup).
pub fn producer_threads(f: &Func) -> i64 {
    f.attr(PRODUCER_THREADS).and_then(Attr::as_int).unwrap_or(0)
}

/// The registers per thread of both roles after `setmaxnreg`, as `specialize-warps` set
/// them on the kernel (`None` without a producer warpgroup).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RegisterSplit {
    pub producer_threads: u32,
    pub producer_regs: u32,
    pub consumer_regs: u32,
}

pub fn register_split(f: &Func) -> Option<RegisterSplit> {
    let int = |key| f.attr(key).and_then(Attr::as_int).map(|v| v as u32);
    Some(RegisterSplit {
        producer_threads: int(PRODUCER_THREADS).filter(|&t| t > 0)?,
        producer_regs: int(PRODUCER_REGS)?,
        consumer_regs: int(CONSUMER_REGS)?,
    })
}

/// The ops of the specialized loop's body the producer runs: its TMA copies and
/// commits, and what computes their operands.
pub(crate) fn producer_slice(f: &Func, body: &Region) -> std::collections::HashSet<OpId> {
    let mut keep: std::collections::HashSet<OpId> = std::collections::HashSet::new();
    let mut needed: std::collections::HashSet<ValueId> = std::collections::HashSet::new();
    for &id in body.ops.iter().rev() {
        let op = f.op(id);
        let root =
            matches!(op.kind, OpKind::AsyncCommit) || (op.kind == OpKind::CpAsync && crate::tma::is_tma_copy(op));
        if root || op.results.iter().any(|r| needed.contains(r)) {
            keep.insert(id);
            needed.extend(op.operands.iter().copied());
        }
    }
    keep
}
