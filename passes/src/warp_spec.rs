//! Warp specialization (`producer = "warpgroup"`, sm_90a): a producer warpgroup issues
//! the TMA copies of the K loop while the schedule's `warps` (the consumers) run its
//! `wgmma` dot, as CUTLASS 3's `KernelTmaWarpSpecialized` GEMMs do.
//!
//! - The rule (E0707, shared by the target lints, autotune pruning and lowering):
//!   [`producer_problem`] on Graph IR.
//! - The Tile pass `specialize-warps` ([`specialize_warps`]) checks the lowered loop,
//!   marks it `warp_specialized`, adds the producer's threads and register split to the
//!   kernel and a second ring of mbarriers, the "empty" ring.
//! - The PTX backend (`ptx::warp_spec`) emits the two roles. Tile IR keeps one program
//!   (the interpreter and the race checker read it as before); the roles are a refinement
//!   of its staged loop, which the PTX emulator checks against the interpreter.
//!
//! The protocol, per ring slot `s` of `S`: the producer's `g`-th group fills slot `g mod
//! S` and completes on full barrier `g mod S` (as without a producer); a consumer that
//! has finished the dot reading group `g` arrives on empty barrier `g mod S` (an arrival
//! count of every consumer thread); the producer waits for empty barrier `g mod S` at
//! phase parity `(g / S − 1) mod 2` before it refills the slot with group `g ≥ S`.

use tessera_frontend::check::CopyEngine;
use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Attr, Func, Op, OpId, OpKind, Region, Type, ValueId};
use crate::target::Target;

/// Kernel attributes of a warp-specialized kernel: the producer's threads (launched
/// after the `threads` consumers) and the `setmaxnreg` register counts of both roles.
pub const PRODUCER_THREADS: &str = "producer_threads";
pub const PRODUCER_REGS: &str = "producer_regs";
pub const CONSUMER_REGS: &str = "consumer_regs";
/// The attribute of the K loop the producer feeds.
pub const WARP_SPECIALIZED: &str = "warp_specialized";
/// The attribute of an mbarrier ring allocation that also holds the empty barriers
/// (its second half).
pub const EMPTY_BARRIERS: &str = "empty_barriers";

/// One warpgroup.
pub const WARPGROUP_THREADS: i64 = 128;
/// The producer's registers after `setmaxnreg.dec`: what issuing TMA copies needs
/// (CUTLASS's `LoadRegisterRequirement`).
pub const PRODUCER_REG_COUNT: i64 = 40;
/// The registers of an SM (and of one CTA at most).
const REGISTER_FILE: i64 = 65536;

/// The consumers' registers after `setmaxnreg.inc`: what the register file has left
/// after the producer, per consumer thread, in steps of 8, at most 232 (CUTLASS's
/// `MmaRegisterRequirement` for two consumer warpgroups).
pub fn consumer_reg_count(consumer_threads: i64) -> i64 {
    let left = (REGISTER_FILE - WARPGROUP_THREADS * PRODUCER_REG_COUNT) / consumer_threads.max(1);
    (left / 8 * 8).min(232)
}

/// Why `producer = "warpgroup"` cannot be used for the kernel `graph` (Graph IR) under
/// `config` on `target`, and where (`None`: the kernel's name); `None` when it can, or
/// when the schedule does not ask for it. Its reasons about the kernel come first and hold
/// on every target, so the lints check it before the TMA and WGMMA rules (E0706, E0704).
pub fn producer_problem(graph: &Func, config: &Config, target: Target) -> Option<(String, Option<TextRange>)> {
    if !config.schedule.producer_warpgroup() || !target.is_gpu() {
        return None;
    }
    let dots: Vec<OpId> = graph.walk().into_iter().filter(|&id| graph.op(id).kind == OpKind::Dot).collect();
    let Some(&dot) = dots.first() else {
        return Some(("the kernel has no `tile.dot` for a producer to feed".into(), None));
    };
    if let Some(&second) = dots.get(1) {
        return Some((
            format!("the kernel has {} dots; a producer warpgroup feeds the K loop of one", dots.len()),
            Some(graph.op(second).loc.range),
        ));
    }
    let at = Some(graph.op(dot).loc.range);
    let Some(body) = enclosing_loop_body(graph, &graph.body, dot) else {
        return Some(("the dot is not directly in a sequential `tile.range` loop (the K loop)".into(), at));
    };
    let defs = graph.definitions();
    let dot_op = graph.op(dot);
    // Buffers the loop fills with `tile.cp_async` (explicit staging).
    let filled: Vec<ValueId> = body
        .ops
        .iter()
        .map(|&id| graph.op(id))
        .filter(|op| op.kind == OpKind::CpAsync)
        .filter_map(|op| op.operands.first().copied())
        .collect();
    // The loads (and transposes of loads: a K-major `b.T`) that feed the dot.
    let mut operand_ops: Vec<OpId> = Vec::new();
    for (i, name) in [(0, "A"), (1, "B")] {
        let Some(&v) = dot_op.operands.get(i) else { continue };
        let in_loop = |d: OpId| body.ops.contains(&d).then_some(d);
        let mut def = defs[v.0 as usize].and_then(in_loop);
        let transposed = def.is_some_and(|d| graph.op(d).kind == OpKind::Transpose);
        if let Some(t) = def.filter(|_| transposed) {
            operand_ops.push(t);
            def = graph.op(t).operands.first().and_then(|&x| defs[x.0 as usize]).and_then(in_loop);
        }
        let loaded = def.is_some_and(|d| {
            let op = graph.op(d);
            match op.kind {
                OpKind::Load => true,
                OpKind::LoadShared => op.operands.first().is_some_and(|b| filled.contains(b)),
                _ => false,
            }
        });
        if !loaded {
            return Some((
                format!(
                    "the dot's {name} is not loaded in the K loop (a `tile.load`, its `.T`, or a shared buffer the \
                     loop fills with `tile.cp_async`): only loaded operands are staged for the producer"
                ),
                at,
            ));
        }
        operand_ops.extend(def);
        if let Type::Tile(t) = graph.ty(v) {
            if t.dtype.bits() == 8 && i == 1 && !transposed {
                return Some((
                    "an fp8 B loaded as [K, N] takes a transposing stage that every warp runs (load it as [N, K] \
                     and pass `b.T`)"
                        .into(),
                    at,
                ));
            }
        }
    }
    for &id in &body.ops {
        let op = graph.op(id);
        let fine = match op.kind {
            OpKind::Load | OpKind::LoadShared | OpKind::Transpose => operand_ops.contains(&id),
            OpKind::CpAsync | OpKind::Barrier | OpKind::AsyncCommit | OpKind::AsyncWait => true,
            OpKind::Constant
            | OpKind::SchedParam
            | OpKind::View
            | OpKind::Full
            | OpKind::Dot
            | OpKind::Yield
            | OpKind::TensorDim => true,
            k if k.is_binary() && op.regions.is_empty() => {
                let tile = op.results.iter().any(|&r| matches!(graph.ty(r), Type::Tile(_)));
                !tile || accumulates(op, dot_op)
            }
            _ => false,
        };
        if !fine {
            return Some((
                format!(
                    "the K loop also has `{}`: a producer feeds a loop that only loads (or copies) the dot's operands and \
                     accumulates",
                    op.kind.name()
                ),
                Some(op.loc.range),
            ));
        }
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

/// `acc + dot(...)`: the loop's accumulation of the dot's result.
fn accumulates(op: &Op, dot: &Op) -> bool {
    op.kind == OpKind::Add && op.operands.iter().any(|v| dot.results.contains(v))
}

/// The body of the `scf.for {kind = "sequential"}` whose body holds `target` directly.
fn enclosing_loop_body<'a>(f: &'a Func, region: &'a Region, target: OpId) -> Option<&'a Region> {
    for &id in &region.ops {
        let op = f.op(id);
        for r in &op.regions {
            if op.kind == OpKind::For && op.str_attr("kind") == Some("sequential") && r.ops.contains(&target) {
                return Some(r);
            }
            if let Some(found) = enclosing_loop_body(f, r, target) {
                return Some(found);
            }
        }
    }
    None
}

/// The Tile pass: marks the staged K loop for a producer warpgroup (see the module).
pub(crate) fn specialize_warps(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    if !config.schedule.producer_warpgroup() || !target.is_gpu() {
        return Ok(());
    }
    let internal = |f: &Func, why: String| LowerError {
        message: format!("internal error: producer=\"warpgroup\": {why}"),
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
    for &id in &f.op(k_loop).regions[0].ops {
        let op = f.op(id);
        let scalar = op.results.iter().all(|&r| matches!(f.ty(r), Type::Index | Type::Scalar(_)));
        // Every `tile.cp_async` is a TMA copy (checked above).
        let fine = match op.kind {
            OpKind::Dot => op.str_attr("instr") == Some("wgmma"),
            OpKind::CpAsync
            | OpKind::View
            | OpKind::SmemSlot
            | OpKind::AsyncCommit
            | OpKind::AsyncWait
            | OpKind::Barrier
            | OpKind::Yield
            | OpKind::Constant => true,
            k => k.is_binary() && scalar && op.regions.is_empty(),
        };
        if !fine {
            return Err(internal(f, format!("the K loop has `{}`", op.kind.name())));
        }
    }
    let Some((ring, stages)) = crate::tma::mbarrier_ring(f) else {
        return Err(internal(f, "the kernel has no mbarrier ring".into()));
    };
    // The empty barriers: a second ring after the full one, in the same allocation.
    if let Type::Smem(s) = &mut f.values[ring.0 as usize].ty {
        s.dims = vec![tessera_frontend::check::Dim::constant(2 * stages)];
    }
    let alloc = f.walk().into_iter().find(|&id| f.op(id).results.first() == Some(&ring));
    if let Some(alloc) = alloc {
        f.op_mut(alloc).set_attr(EMPTY_BARRIERS, Attr::Bool(true));
    }
    f.op_mut(k_loop).set_attr(WARP_SPECIALIZED, Attr::Bool(true));
    f.set_attr(PRODUCER_THREADS, Attr::Int(WARPGROUP_THREADS));
    f.set_attr(PRODUCER_REGS, Attr::Int(PRODUCER_REG_COUNT));
    f.set_attr(CONSUMER_REGS, Attr::Int(consumer_reg_count(threads)));
    Ok(())
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
