//! Target-aware analyses of a kernel's IR and their diagnostics (LANGUAGE.md §6.4):
//! shared-memory budget (E0500), races around async copies and between the programs of
//! the grid (E0501), program ids outside their grid loop (E0503), register pressure
//! (W0600), bank conflicts (W0601), occupancy (W0602), coalescing (W0603), independent
//! loops (W0604), and autotune pruning (W0702/E0703).
//!
//! Resource figures are per (kernel, configuration, target) — [`kernel_resources`] —
//! so pruning an autotune space asks one cheap query per candidate, and the explorer
//! and the language server show the same numbers the lints use. The lints of one kernel
//! are [`kernel_lints`]; ranges stay relative (body to `def`, decorators to the item)
//! and fix-its that need the source text are resolved by [`crate::diagnostics::file_diagnostics`].

pub mod analytic;
pub mod banks;
pub mod grid;
pub mod id_updates;
pub mod limits;
pub mod masked_rows;
pub mod neighbours;
pub mod overrun;
pub mod padding;
pub mod patterns;
pub mod phases;
pub mod prune;
pub mod races;
pub mod registers;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tessera_frontend::check::{fn_signature, infer_function, FunctionKind, MmaSite, ScheduleValue};
use tessera_frontend::db::function_def;
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey};

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Func, Layout, Loc, Op, OpKind, Origin, SmemType, Swizzle, Type, ValueId};
use crate::queries::graph_ir;
use crate::target::Target;
use limits::{GpuLimits, Occupancy};
use registers::RegisterEstimate;

/// A shared buffer of a kernel.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BufferUse {
    pub name: String,
    pub loc: Loc,
    /// Bytes of every stage of the ring.
    pub bytes: u64,
    /// A buffer the compiler introduced to stage a load (its loc is the loop).
    pub staging: bool,
}

/// How to remove a bank conflict.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BankFix {
    Swizzle,
    Pad(u32),
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct BankConflict {
    pub buffer: String,
    pub alloc: Loc,
    pub staging: bool,
    pub ways: u32,
    /// What the access is ("ldmatrix loads of the A operand of `tile.dot`").
    pub access: String,
    pub at: Loc,
    /// The first layout change that makes every access of the buffer conflict free.
    pub fix: Option<BankFix>,
    /// The buffer is read by `wgmma` through a matrix descriptor: its layout is the
    /// descriptor's swizzle of this many bytes, which no `swizzle=`/`pad=` changes.
    pub descriptor_swizzle: Option<u32>,
    /// The access is the compiler's transposing stage of an fp8 `[K, N]` B for `wgmma`
    /// (`crate::wgmma::TRANSPOSE_STAGE`): the kernel's layout of B, not a buffer
    /// option, decides it.
    pub transposing_stage: bool,
}

/// What one configuration of a kernel costs on a GPU.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Resources {
    pub smem_bytes: u64,
    pub buffers: Vec<BufferUse>,
    pub registers: RegisterEstimate,
    /// Threads a program launches: with a producer warpgroup, its 128 too.
    pub threads: u32,
    pub occupancy: Option<Occupancy>,
    /// With a producer warpgroup: the consumers' registers after `setmaxnreg.inc`, the
    /// limit their estimate is held to.
    pub consumer_registers: Option<u32>,
}

impl Resources {
    /// The registers a thread whose figures these are may hold: the consumers'
    /// `setmaxnreg` count under warp specialization, else the target's per-thread limit.
    pub fn register_limit(&self, limits: &GpuLimits) -> u32 {
        self.consumer_registers.unwrap_or(limits.max_registers_per_thread)
    }
}

/// Resource figures of a kernel's Tile IR for one configuration and target.
#[salsa::tracked(returns(ref))]
pub fn kernel_resources<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Arc<Resources>, LowerError> {
    let tile = transient_tile_ir(db, key, &config, target)?;
    Ok(Arc::new(resources_of(&tile, target, registers::estimate)))
}

/// Tile IR built for an analysis and dropped, not memoized like [`crate::queries::tile_ir`]: the
/// lints of a file ask for every kernel (and every autotune candidate), and only their
/// small results should stay cached — a language server holding every kernel's Tile IR
/// of a 50 000-line file would need hundreds of megabytes.
fn transient_tile_ir(db: &dyn Db, key: FnKey<'_>, config: &Config, target: Target) -> Result<Func, LowerError> {
    let graph = graph_ir(db, key).clone()?;
    crate::pipeline::graph_to_tile(&graph, config, target)
}

/// What autotune pruning compares with a target's limits: the figures of [`Resources`]
/// without the buffer list, the register profile and the named live values, which only
/// the chosen configuration's lints and the editors show.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Budget {
    pub smem_bytes: u64,
    pub register_peak: u32,
}

/// The [`Budget`] of one configuration of a kernel. Pruning asks it for every candidate
/// of every autotuned kernel of a file, so it keeps only two numbers per candidate.
#[salsa::tracked(returns(ref))]
pub fn kernel_budget<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Budget, LowerError> {
    let graph = graph_ir(db, key).clone()?;
    let tile = crate::pipeline::graph_to_tile_for_budget(&graph, &config, target)?;
    Ok(budget_of(&tile))
}

fn budget_of(f: &Func) -> Budget {
    Budget { smem_bytes: shared_bytes(f), register_peak: registers::peak(f) }
}

/// The shared memory a kernel's buffers take, in bytes (GPU Tile IR).
pub(crate) fn shared_bytes(f: &Func) -> u64 {
    f.walk().into_iter().map(|id| added_bytes(f, f.op(id))).sum()
}

/// The bytes the `tile.alloc_shared` `op` adds to its kernel's shared memory (0 for any
/// other op): a TMA store's buffer in the staging rings' memory adds none.
pub(crate) fn added_bytes(f: &Func, op: &Op) -> u64 {
    match op.results.first().map(|&r| f.ty(r)) {
        Some(Type::Smem(s)) if op.kind == OpKind::AllocShared && !crate::tma::reuses_staging(op) => {
            s.bytes().unwrap_or(0)
        }
        _ => 0,
    }
}

/// Resource figures of GPU Tile IR, the registers by `estimate` ([`registers::estimate`],
/// or [`registers::estimate_without_profile`] where no editor shows the profile).
pub fn resources_of(f: &Func, target: Target, estimate: fn(&Func) -> RegisterEstimate) -> Resources {
    let threads = f.attr("threads").and_then(|a| a.as_int()).unwrap_or(128).max(1) as u32;
    let mut buffers = Vec::new();
    let mut smem_bytes = 0;
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::AllocShared {
            continue;
        }
        let Some(&result) = op.results.first() else { continue };
        let Type::Smem(s) = f.ty(result) else { continue };
        buffers.push(BufferUse {
            name: value_name(f, result),
            loc: op.loc.clone(),
            bytes: s.bytes().unwrap_or(0),
            staging: op.attr("staging").is_some(),
        });
        smem_bytes += added_bytes(f, op);
    }
    let registers = estimate(f);
    let split = crate::warp_spec::register_split(f);
    let producer = split.map_or(0, |s| s.producer_threads);
    let occupancy = GpuLimits::of(target).map(|l| match split {
        // Under `setmaxnreg` a program holds the producer's and the consumers' registers.
        Some(s) => {
            let total = threads + producer;
            let held = producer * s.producer_regs + threads * s.consumer_regs;
            limits::occupancy(l, total, held.div_ceil(total), smem_bytes)
        }
        None => limits::occupancy(l, threads, registers.peak, smem_bytes),
    });
    let consumer_registers = split.map(|s| s.consumer_regs);
    Resources { smem_bytes, buffers, registers, threads: threads + producer, occupancy, consumer_registers }
}

/// The worst bank conflict of each shared buffer of a kernel for one configuration and
/// target (GPU). Separate from [`kernel_resources`]: pruning an autotune space needs
/// only the budgets, so the per-lane address simulation runs for one configuration.
#[salsa::tracked(returns(ref))]
pub fn kernel_bank_conflicts<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Arc<Vec<BankConflict>>, LowerError> {
    if !target.is_gpu() {
        return Ok(Arc::new(Vec::new()));
    }
    let tile = transient_tile_ir(db, key, &config, target)?;
    Ok(Arc::new(bank_conflicts_of(&tile)))
}

fn bank_conflicts_of(tile: &Func) -> Vec<BankConflict> {
    let threads = tile.attr("threads").and_then(|a| a.as_int()).unwrap_or(128).max(1) as u32;
    bank_conflicts(tile, threads)
}

fn value_name(f: &Func, v: ValueId) -> String {
    f.values[v.0 as usize].name.as_deref().map(str::to_string).unwrap_or_else(|| format!("%{}", v.0))
}

/// One shared access of a buffer, ready to be costed under another buffer layout.
struct SharedAccess {
    op: crate::ir::OpId,
    description: String,
    kind: AccessKind,
}

#[derive(PartialEq)]
enum AccessKind {
    Ldmatrix,
    RegisterTile { layout: Layout, shape: Vec<i64>, transposed: bool },
    CpAsync,
}

fn access_ways(buffer: &SmemType, access: &SharedAccess, threads: u32) -> u32 {
    match &access.kind {
        AccessKind::Ldmatrix => match buffer.rows_and_row_len() {
            Some((rows, cols)) => banks::ldmatrix_ways(buffer, rows, cols),
            None => 1,
        },
        AccessKind::RegisterTile { layout, shape, transposed } => {
            banks::register_tile_accesses(buffer, layout, shape, *transposed)
                .iter()
                .map(banks::conflict_ways)
                .max()
                .unwrap_or(1)
        }
        AccessKind::CpAsync => banks::cp_async_ways(buffer, threads),
    }
}

/// The worst bank conflict of every shared buffer of GPU Tile IR that has one.
fn bank_conflicts(f: &Func, threads: u32) -> Vec<BankConflict> {
    let defs = f.definitions();
    // Each smem value → the buffer (alloc result) it is a slot of.
    let root = |mut v: ValueId| -> ValueId {
        while let Some(op) = defs.get(v.0 as usize).copied().flatten().map(|o| f.op(o)) {
            if op.kind == OpKind::SmemSlot {
                v = op.operands[0];
            } else {
                break;
            }
        }
        v
    };
    let mut per_buffer: BTreeMap<ValueId, (SmemType, Vec<SharedAccess>)> = BTreeMap::new();
    for id in f.walk() {
        let op = f.op(id);
        let (smem, access) = match op.kind {
            OpKind::LoadShared => {
                let (Some(&smem), Some(&result)) = (op.operands.first(), op.results.first()) else { continue };
                let Type::Tile(t) = f.ty(result) else { continue };
                let (Some(layout), Some(shape)) = (t.layout.clone(), f.ty(result).const_dims()) else { continue };
                let transposed = op.attr("transpose").is_some_and(|a| matches!(a, crate::ir::Attr::Bool(true)));
                let kind = match &layout {
                    Layout::DotOperand { .. } if t.dtype.bits() <= 16 => AccessKind::Ldmatrix,
                    _ => AccessKind::RegisterTile { layout: layout.clone(), shape, transposed },
                };
                let description = match &layout {
                    Layout::DotOperand { op: 0, .. } => "ldmatrix loads of the A operand of `tile.dot`".to_string(),
                    Layout::DotOperand { .. } => "ldmatrix loads of the B operand of `tile.dot`".to_string(),
                    _ if op.attr(crate::wgmma::TRANSPOSE_STAGE).is_some() => {
                        "transposed reads of B into registers (8-bit `wgmma`'s transposing stage)".to_string()
                    }
                    _ if transposed => "transposed reads into registers".to_string(),
                    _ => "reads into registers".to_string(),
                };
                (smem, SharedAccess { op: id, description, kind })
            }
            OpKind::StoreShared => {
                let (Some(&smem), Some(&tile)) = (op.operands.first(), op.operands.get(1)) else { continue };
                let Type::Tile(t) = f.ty(tile) else { continue };
                let (Some(layout), Some(shape)) = (t.layout.clone(), f.ty(tile).const_dims()) else { continue };
                let kind = AccessKind::RegisterTile { layout, shape, transposed: false };
                (smem, SharedAccess { op: id, description: "stores from registers".into(), kind })
            }
            // The TMA writes a box through the buffer's swizzle, not lanes through banks.
            OpKind::CpAsync if crate::tma::is_tma_copy(op) => continue,
            OpKind::CpAsync => {
                let Some(&smem) = op.operands.first() else { continue };
                (smem, SharedAccess { op: id, description: "`cp.async` writes".into(), kind: AccessKind::CpAsync })
            }
            _ => continue,
        };
        let Type::Smem(slot) = f.ty(smem) else { continue };
        let mut slot = slot.clone();
        slot.stages = 1;
        per_buffer.entry(root(smem)).or_insert_with(|| (slot, Vec::new())).1.push(access);
    }
    let mut out = Vec::new();
    for (buffer, (slot, accesses)) in per_buffer {
        let Some(alloc) = defs.get(buffer.0 as usize).copied().flatten().map(|o| f.op(o)) else { continue };
        // A buffer's accesses repeat (a ring's copies, one per stage; a loop's reads in
        // its prologue and body): each distinct kind is simulated once per layout.
        let mut kinds: Vec<&SharedAccess> = Vec::new();
        for a in &accesses {
            if !kinds.iter().any(|k| k.kind == a.kind) {
                kinds.push(a);
            }
        }
        let ways_of: Vec<u32> = kinds.iter().map(|k| access_ways(&slot, k, threads)).collect();
        let worst = accesses
            .iter()
            .map(|a| (ways_of[kinds.iter().position(|k| k.kind == a.kind).expect("every kind was collected")], a))
            .max_by_key(|(ways, a)| (*ways, std::cmp::Reverse(a.op)));
        let Some((ways, access)) = worst else { continue };
        if ways < 2 {
            continue;
        }
        let conflict_free = |candidate: &SmemType| kinds.iter().all(|a| access_ways(candidate, a, threads) < 2);
        let bytes = slot.dtype.bytes().max(1);
        let mut fix = None;
        let descriptor_swizzle = match slot.swizzle {
            Swizzle::Wgmma(width) => Some(width),
            _ => None,
        };
        if slot.swizzle == Swizzle::None {
            let swizzled = SmemType { swizzle: Swizzle::Xor, pad: 0, ..slot.clone() };
            if conflict_free(&swizzled) {
                fix = Some(BankFix::Swizzle);
            }
        }
        if fix.is_none() && descriptor_swizzle.is_none() {
            for pad in [1, 2, 4, 8, 16].into_iter().filter(|p| (p * bytes) % 4 == 0 || *p * bytes >= 4) {
                let padded = SmemType { swizzle: Swizzle::None, pad, ..slot.clone() };
                if conflict_free(&padded) {
                    fix = Some(BankFix::Pad(pad));
                    break;
                }
            }
        }
        out.push(BankConflict {
            buffer: value_name(f, buffer),
            alloc: alloc.loc.clone(),
            staging: alloc.attr("staging").is_some(),
            ways,
            access: access.description.clone(),
            at: f.op(access.op).loc.clone(),
            fix,
            descriptor_swizzle,
            transposing_stage: f.op(access.op).attr(crate::wgmma::TRANSPOSE_STAGE).is_some(),
        });
    }
    out
}

/// A fix-it that needs the source text to become edits (see [`crate::diagnostics::file_diagnostics`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FixRequest {
    /// Insert `tile.barrier()` on its own line before the statement at this range.
    BarrierBefore(TextRange),
    /// Add a keyword argument to the call at this range (`swizzle="xor"`).
    AddKeyword { call: TextRange, keyword: String, value: String },
    /// Replace the first `from` inside this range with `to`.
    Replace { within: TextRange, from: String, to: String },
}

/// A lint with its pending fix-it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Lint {
    pub diagnostic: Diagnostic,
    pub fix: Option<(String, FixRequest)>,
}

/// The target lints of one kernel.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct KernelLints {
    /// Ranges relative to the `def` keyword.
    pub body: Vec<Lint>,
    /// Ranges relative to the item's first byte (its first decorator).
    pub decorators: Vec<Lint>,
}

/// The range of a location in function `name`, if it is there.
fn range_in(loc: &Loc, name: &str) -> Option<TextRange> {
    match &loc.origin {
        Origin::Function(f) if f == name => Some(loc.range),
        _ => None,
    }
}

/// The configuration a schedule gives, with shape symbols at [`crate::config::DEFAULT_SHAPE`].
fn config_of(graph: &Func, schedule: ScheduleValue) -> Config {
    crate::config::config_for(graph, schedule, &BTreeMap::new()).0
}

/// Why a configuration cannot be used on a target: the checks behind W0702/E0703, shared
/// by the lints and the autotuner.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PruneReason {
    /// `basis`: where the figure comes from, when the candidate was not lowered: a
    /// smaller candidate's figure (a lower bound of its own) or the analytic estimate
    /// ([`prune`]).
    SharedMemory {
        bytes: u64,
        limit: u64,
        basis: prune::Basis,
    },
    Registers {
        estimate: u32,
        limit: u32,
        basis: prune::Basis,
    },
    MmaShape(String),
    /// `mma = "wgmma"` cannot be used (`crate::wgmma`): the reason.
    Wgmma(String),
    /// `copy = "tma"` cannot be used (`crate::tma`): the reason.
    Tma(String),
    /// `producer = "warpgroup"` cannot be used (`crate::warp_spec`): the reason.
    Producer(String),
    /// `cluster=(x, y)` cannot be used (`crate::cluster`): the reason.
    Cluster(String),
    Lowering(String),
}

impl PruneReason {
    /// The category, as W0702 names it.
    pub fn category(&self) -> &'static str {
        match self {
            PruneReason::SharedMemory { .. } => "shared memory",
            PruneReason::Registers { .. } => "registers",
            PruneReason::MmaShape(_) => "tensor-core shape",
            PruneReason::Wgmma(_) => "WGMMA",
            PruneReason::Tma(_) => "TMA",
            PruneReason::Producer(_) => "producer warpgroup",
            PruneReason::Cluster(_) => "cluster",
            PruneReason::Lowering(_) => "does not lower",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            PruneReason::SharedMemory { bytes, limit, basis } => format!(
                "{}{} of shared memory > {} per block{}",
                basis_prefix(*basis),
                crate::units::bytes(*bytes),
                crate::units::bytes(*limit),
                basis_note(*basis)
            ),
            PruneReason::Registers { estimate, limit, basis } => format!(
                "{}~{estimate} registers per thread > {limit} (spills){}",
                // `~` already says it is an estimate.
                if *basis == prune::Basis::AtLeast { "at least " } else { "" },
                basis_note(*basis)
            ),
            PruneReason::MmaShape(why)
            | PruneReason::Wgmma(why)
            | PruneReason::Tma(why)
            | PruneReason::Producer(why)
            | PruneReason::Cluster(why)
            | PruneReason::Lowering(why) => why.clone(),
        }
    }
}

/// How a figure of a prune reason is qualified by where it comes from ([`prune`]).
fn basis_prefix(basis: prune::Basis) -> &'static str {
    match basis {
        prune::Basis::Own => "",
        prune::Basis::AtLeast => "at least ",
        prune::Basis::Analytic => "about ",
    }
}

fn basis_note(basis: prune::Basis) -> &'static str {
    match basis {
        prune::Basis::Own => "",
        prune::Basis::AtLeast => {
            " (the figure of a configuration of the space no larger in any tile key; this one was not lowered)"
        }
        prune::Basis::Analytic => {
            " (the analytic estimate, scaled to a lowered configuration's figure; this one was not lowered)"
        }
    }
}

/// Whether (and why) one configuration of a kernel is pruned on `target`: tensor-core
/// shape multiples, lowering errors, and on GPUs the shared-memory and register budgets
/// of [`kernel_budget`].
pub fn prune_reason(db: &dyn Db, key: FnKey<'_>, config: &Config, target: Target) -> Option<PruneReason> {
    if let Some(reason) = mma_reason(db, key, &config.schedule).or_else(|| hopper_reason(db, key, config, target)) {
        return Some(reason);
    }
    let Some(limits) = GpuLimits::of(target) else {
        // Memoized, not transient: off the GPU only the autotuner asks, and it lowers
        // every survivor to this same Tile IR right after.
        return crate::queries::tile_ir(db, key, config.clone(), target)
            .as_ref()
            .err()
            .map(|e| PruneReason::Lowering(e.message.clone()));
    };
    match kernel_budget(db, key, config.clone(), target) {
        Err(e) => Some(PruneReason::Lowering(e.message.clone())),
        Ok(budget) => over_budget(budget, limits),
    }
}

/// The tensor-core shape check of [`prune_reason`].
fn mma_reason(db: &dyn Db, key: FnKey<'_>, schedule: &ScheduleValue) -> Option<PruneReason> {
    mma_violation(&infer_function(db, key).mma_sites, schedule).map(PruneReason::MmaShape)
}

/// The Hopper rules of [`prune_reason`], in their order: `mma = "wgmma"` (E0704 for a
/// fixed schedule), then TMA, the producer warpgroup and the cluster. `None` when the
/// schedule asks for none of them or every one admits it.
pub fn hopper_reason(db: &dyn Db, key: FnKey<'_>, config: &Config, target: Target) -> Option<PruneReason> {
    wgmma_problem(db, key, config, target).map(|(why, _)| PruneReason::Wgmma(why)).or_else(|| {
        let graph = graph_ir(db, key).as_ref().ok()?;
        crate::tma::tma_problem(graph, config, target).map(|(why, _)| PruneReason::Tma(why)).or_else(|| {
            crate::warp_spec::producer_problem(graph, config, target)
                .map(|(why, _)| PruneReason::Producer(why))
                .or_else(|| {
                    crate::cluster::cluster_problem(graph, config, target).map(|(why, _)| PruneReason::Cluster(why))
                })
        })
    })
}

/// Why the kernel cannot use `mma = "wgmma"` under `config` on `target`, and where (the
/// dot, item-relative): `crate::wgmma`'s rule on the kernel's Graph IR.
pub fn wgmma_problem(db: &dyn Db, key: FnKey<'_>, config: &Config, target: Target) -> Option<(String, TextRange)> {
    if config.mma() != tessera_frontend::check::MmaFamily::Wgmma {
        return None;
    }
    let graph = graph_ir(db, key).as_ref().ok()?;
    crate::pipeline::wgmma_problem(graph, config, target)
}

/// The budget check of [`prune_reason`]: shared memory first, then registers.
fn over_budget(b: &Budget, limits: &GpuLimits) -> Option<PruneReason> {
    if b.smem_bytes > limits.smem_per_block as u64 {
        Some(PruneReason::SharedMemory {
            bytes: b.smem_bytes,
            limit: limits.smem_per_block as u64,
            basis: prune::Basis::Own,
        })
    } else if b.register_peak > limits.max_registers_per_thread {
        Some(PruneReason::Registers {
            estimate: b.register_peak,
            limit: limits.max_registers_per_thread,
            basis: prune::Basis::Own,
        })
    } else {
        None
    }
}

/// The prune reason of every candidate of an autotune space (None: it fits), as
/// [`prune_reason`] gives it for each, without lowering each on a GPU target: the
/// budgets are monotone in the tile keys, so a few lowered candidates answer for the
/// rest ([`prune`]). `seed` holds candidates the caller lowered already.
pub fn prune_candidates(
    db: &dyn Db,
    key: FnKey<'_>,
    configs: &[Config],
    target: Target,
    seed: Vec<(usize, prune::Evaluated)>,
) -> Vec<Option<PruneReason>> {
    let Some(limits) = GpuLimits::of(target) else {
        return configs.iter().map(|config| prune_reason(db, key, config, target)).collect();
    };
    let schedules: Vec<&ScheduleValue> = configs.iter().map(|c| &c.schedule).collect();
    let model = graph_ir(db, key).as_ref().ok().map(|graph| analytic::BudgetModel::new(graph));
    prune::prune_space(
        &schedules,
        limits,
        |i| mma_reason(db, key, &configs[i].schedule).or_else(|| hopper_reason(db, key, &configs[i], target)),
        |i| match kernel_budget(db, key, configs[i].clone(), target) {
            Ok(b) => prune::Evaluated::Budget(*b),
            Err(e) => prune::Evaluated::Out(PruneReason::Lowering(e.message.clone())),
        },
        |i| model.as_ref()?.estimate(&configs[i], target),
        seed,
    )
}

/// Lowers one candidate on a GPU target for [`kernel_lints`]: its budget for the search,
/// and its Tile IR when it fits (the lints of the chosen configuration need no second
/// lowering).
fn lower_candidate(
    db: &dyn Db,
    key: FnKey<'_>,
    config: &Config,
    target: Target,
    limits: &GpuLimits,
) -> (prune::Evaluated, Option<Func>) {
    match transient_tile_ir(db, key, config, target) {
        Err(e) => (prune::Evaluated::Out(PruneReason::Lowering(e.message)), None),
        Ok(tile) => {
            let budget = budget_of(&tile);
            let fits = over_budget(&budget, limits).is_none();
            (prune::Evaluated::Budget(budget), fits.then_some(tile))
        }
    }
}

fn mma_violation(sites: &[MmaSite], schedule: &ScheduleValue) -> Option<String> {
    for site in sites {
        let multiple = site.dtype.mma_multiple()? as i64;
        for (name, d) in [("M", &site.m), ("N", &site.n), ("K", &site.k)] {
            if let Some(v) = d.eval(&|s| schedule.int(s)) {
                if v % multiple != 0 {
                    return Some(format!("{name} = {v} is not a multiple of {multiple} for {}", site.dtype));
                }
            }
        }
    }
    None
}

/// The target lints of a kernel (nothing for helpers, graph functions, and functions
/// with errors: one root cause, one diagnostic).
#[salsa::tracked(returns(ref))]
pub fn kernel_lints<'db>(db: &'db dyn Db, key: FnKey<'db>, target: Target) -> KernelLints {
    let mut out = KernelLints::default();
    if fn_signature(db, key).kind != FunctionKind::Kernel || crate::queries::decorator_error(db, key).is_some() {
        return out;
    }
    let Ok(graph) = graph_ir(db, key).clone() else { return out };
    let Some(def) = function_def(db, key).clone() else { return out };
    // A derived kernel (`name = kernel.with_schedule(S)`) by its own name.
    let name = key.name(db).to_string();
    race_lints(&graph, &name, &mut out);
    pattern_lints(&graph, &name, &mut out);
    // `@kernel.auto` gets its default space here (crate::auto_space).
    let schedule = crate::auto_space::kernel_schedule(db, key, target);
    let Some(limits) = GpuLimits::of(target) else {
        // The CPU backend: a fixed schedule's Tile IR must lower as on a GPU target.
        if !schedule.is_autotuned() && !schedule.auto {
            let config = config_of(&graph, schedule.fixed.layered_on(&ScheduleValue::default_for_kernel()));
            if let Err(e) = transient_tile_ir(db, key, &config, target).and_then(|tile| crate::llvm::emit(&tile)) {
                out.body.push(unlowerable(&e, &graph, def.name_range, &name, target));
            }
        }
        return out;
    };
    let chosen = if schedule.is_autotuned() {
        // Each candidate's configuration, built once: the search below asks for it per
        // precheck and per lowering.
        let sites = crate::config::SymbolSites::of(&graph);
        let configs: Vec<Config> =
            schedule.configurations().into_iter().map(|s| sites.config(s, &BTreeMap::new()).0).collect();
        let total = configs.len();
        // The candidates up to the first that fits are lowered here, in order, so the
        // chosen one's Tile IR gives its resources and bank conflicts without a second
        // lowering; they seed the search over the rest.
        let mut seed = Vec::new();
        let mut first_survivor: Option<(Config, Func)> = None;
        for (i, config) in configs.iter().enumerate() {
            if mma_reason(db, key, &config.schedule).is_some() || hopper_reason(db, key, config, target).is_some() {
                continue;
            }
            let (evaluated, tile) = lower_candidate(db, key, config, target, limits);
            seed.push((i, evaluated));
            if let Some(tile) = tile {
                first_survivor = Some((config.clone(), tile));
                break;
            }
        }
        let reasons = prune_candidates(db, key, &configs, target, seed);
        let pruned: Vec<(ScheduleValue, PruneReason)> =
            configs.into_iter().zip(reasons).filter_map(|(c, r)| r.map(|r| (c.schedule, r))).collect();
        if let (Some(range), false) = (schedule.space_range, pruned.is_empty()) {
            out.decorators.push(Lint { diagnostic: pruning_diagnostic(range, total, &pruned, limits), fix: None });
        }
        match first_survivor {
            Some((config, tile)) => (config, Some(tile)),
            None => return out,
        }
    } else {
        let config = config_of(&graph, schedule.fixed.layered_on(&ScheduleValue::default_for_kernel()));
        // `producer = "warpgroup"` where the kernel's K loop cannot be fed by one.
        if let Some((why, at)) = crate::warp_spec::producer_problem(&graph, &config, target) {
            let asked = crate::warp_spec::asked(&config);
            let d = Diagnostic::new(
                Code::E0707,
                at.unwrap_or(def.name_range),
                format!("{asked} cannot be used on {target}: {why}"),
            )
            .with_note(format!(
                "the schedule asks for `{asked}`; `producer=\"none\"` (the default) runs the loop on every warp"
            ));
            out.body.push(Lint { diagnostic: d, fix: None });
            return out;
        }
        // `cluster = (x, y)` where the kernel's loads cannot be shared by multicast.
        if let Some((why, at)) = crate::cluster::cluster_problem(&graph, &config, target) {
            let asked = crate::cluster::asked(&config);
            let d = Diagnostic::new(
                Code::E0708,
                at.unwrap_or(def.name_range),
                format!("{asked} cannot be used on {target}: {why}"),
            )
            .with_note(format!(
                "the schedule asks for `{asked}`; `cluster=(1, 1)` (the default) runs every program on its own"
            ));
            out.body.push(Lint { diagnostic: d, fix: None });
            return out;
        }
        // `copy = "tma"` where the staged copies cannot take it: the reason (before the
        // WGMMA rule: a tensor map's stride is the same reason on every target).
        if let Some((why, at)) = crate::tma::tma_problem(&graph, &config, target) {
            let d = Diagnostic::new(Code::E0706, at.unwrap_or(def.name_range), format!("copy=\"tma\" cannot be used on {target}: {why}"))
                .with_note("the schedule asks for `copy=\"tma\"`; `copy=\"cp.async\"` (the default) stages these copies on every GPU target");
            out.body.push(Lint { diagnostic: d, fix: None });
            return out;
        }
        // `mma = "wgmma"` where a dot cannot take it: the reason, at the dot.
        if let Some((why, at)) = crate::pipeline::wgmma_problem(&graph, &config, target) {
            let d = Diagnostic::new(Code::E0704, at, format!("mma=\"wgmma\" cannot be used on {target}: {why}"))
                .with_note("the schedule asks for `mma=\"wgmma\"`; `mma=\"mma.sync\"` (the default) runs this dot on every GPU target");
            out.body.push(Lint { diagnostic: d, fix: None });
            return out;
        }
        // A tile the target cannot hold is this schedule's error, named before anything
        // is built per element.
        if let Err(e) = crate::bounds::check_tiles(&graph, &config, target) {
            let at = if e.range == graph.loc.range { def.name_range } else { e.range };
            out.body.push(Lint { diagnostic: Diagnostic::new(Code::E0701, at, e.message), fix: None });
            return out;
        }
        (config, None)
    };
    let (chosen, lowered) = chosen;
    let tile = match lowered {
        Some(tile) => tile,
        None => match transient_tile_ir(db, key, &chosen, target) {
            Ok(tile) => tile,
            // The kernel's own schedule does not lower for this target: `tessera run`
            // would stop here, so `tessera check` says so (E0809; a bug is E0900).
            Err(e) => {
                out.body.push(unlowerable(&e, &graph, def.name_range, &name, target));
                return out;
            }
        },
    };
    let conflicts = bank_conflicts_of(&tile);
    let resources = resources_of(&tile, target, registers::estimate_without_profile);
    resource_lints(&resources, &conflicts, &name, def.name_range, limits, schedule.is_autotuned(), &chosen, &mut out);
    phase_lints(&tile, &name, def.name_range, &mut out);
    // What the code generator refuses (an operation the PTX backend does not emit yet)
    // stops `tessera run` and `tessera lower` too.
    if let Err(e) = crate::ptx::emit(&tile, target) {
        out.body.push(unlowerable(&e, &graph, def.name_range, &name, target));
    }
    out
}

/// E0809 (E0900 for a compiler bug) for a kernel whose Tile IR or target code does not
/// lower for `target`: `tessera run` would stop there, so `tessera check` says so.
fn unlowerable(e: &LowerError, graph: &Func, name_range: TextRange, name: &str, target: Target) -> Lint {
    let at = if e.range == graph.loc.range || e.range == TextRange::default() { name_range } else { e.range };
    let code = crate::errors::lowering_code(e);
    Lint {
        diagnostic: Diagnostic::new(code, at, format!("`{name}` cannot be lowered for {target}: {}", e.message)),
        fix: None,
    }
}

/// E0501 for the compiler's own staging (`phases`): a bug of the pipeliner, reported at
/// the loop it staged, so that it is seen rather than run.
fn phase_lints(tile: &Func, name: &str, fallback: TextRange, out: &mut KernelLints) {
    for race in phases::check_pipeline(tile).into_iter().take(1) {
        let at = range_in(&race.at, name).unwrap_or(fallback);
        let d = Diagnostic::new(Code::E0501, at, format!("race: {}", race.message))
            .with_note("this is the compiler's pipeline, not the kernel as written: please report it");
        out.body.push(Lint { diagnostic: d, fix: None });
    }
}

fn pruning_diagnostic(
    range: TextRange,
    total: usize,
    pruned: &[(ScheduleValue, PruneReason)],
    limits: &GpuLimits,
) -> Diagnostic {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut examples: BTreeMap<&str, String> = BTreeMap::new();
    for (config, reason) in pruned {
        let (what, detail) = (reason.category(), reason.detail());
        *counts.entry(what).or_default() += 1;
        examples.entry(what).or_insert_with(|| format!("{what}: e.g. {config}: {detail}"));
    }
    let breakdown: Vec<String> = counts.iter().map(|(what, n)| format!("{n} by {what}")).collect();
    let survivors = total - pruned.len();
    let mut d = if survivors == 0 {
        Diagnostic::new(
            Code::E0703,
            range,
            format!(
                "no configuration of the autotune space fits {}: all {total} are pruned ({})",
                limits.arch,
                breakdown.join(", ")
            ),
        )
    } else {
        Diagnostic::new(
            Code::W0702,
            range,
            format!(
                "{} of {total} autotune configurations are pruned on {} ({}); {survivors} remain",
                pruned.len(),
                limits.arch,
                breakdown.join(", ")
            ),
        )
    };
    for example in examples.into_values() {
        d = d.with_note(example);
    }
    d
}

/// The first race (E0501), program id outside its grid loop (E0503) or unwritten shared
/// read (E0504) of a kernel's Graph IR, with where it is: facts of the code under every
/// schedule and target, so a launch is refused on them as `tessera check` is (the
/// interpreter, running one program at a time, would otherwise call a racy kernel
/// correct, and the reference has no program outside the grid loops).
pub fn code_error(graph: &Func, name: &str) -> Option<(Loc, String)> {
    let mut lints = KernelLints::default();
    race_lints(graph, name, &mut lints);
    let first = lints.body.into_iter().map(|l| l.diagnostic).find(|d| d.is_error())?;
    Some((Loc::new(name, first.range), format!("{} {}", first.code, first.message)))
}

fn race_lints(graph: &Func, name: &str, out: &mut KernelLints) {
    for read in races::unwritten_reads(graph) {
        let Some(at) = range_in(&read.at, name) else { continue };
        let mut d = Diagnostic::new(
            Code::E0504,
            at,
            format!("`{}` is read here, but nothing writes it: its contents are undefined", read.buffer),
        )
        .with_label(at, "read, but never written")
        .with_note("fill a shared buffer with `tile.cp_async(buf, src)` or a store before reading it");
        if let Some(allocated) = range_in(&read.allocated, name) {
            d = d.with_label(allocated, "allocated here");
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for race in neighbours::neighbour_races(graph) {
        let Some(at) = range_in(&race.store, name) else { continue };
        let (var, tensor) = (&race.variable, &race.tensor);
        // Seen from the store, the program that reads is the other way.
        let (reader, writer) = if race.later { ("an earlier", "a later") } else { ("a later", "an earlier") };
        let mut d = Diagnostic::new(
            Code::E0501,
            at,
            format!(
                "race: this store writes elements of `{tensor}` that {reader} program along `{var}` loads: \
                 programs run in no fixed order, so that load sees the old value or the new one"
            ),
        )
        .with_label(at, format!("writes what {reader} `{var}` program reads"))
        .with_note(
            "write the result to another tensor, or load everything the programs read before any program writes \
             (a second kernel)",
        );
        if let Some(load) = range_in(&race.load, name) {
            d = d.with_label(load, format!("reads elements {writer} program writes"));
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    let (grid_races, atomic_races) = grid::store_races(graph);
    for race in grid_races {
        let Some(at) = range_in(&race.at, name) else { continue };
        let axis = &race.axis;
        let why = if race.outside {
            format!("the store is outside the `{axis}` loop")
        } else {
            format!("the store's place does not depend on `{axis}`")
        };
        let mut d = Diagnostic::new(
            Code::E0501,
            at,
            format!("race: every program along `{axis}` stores these same elements ({why}); a GPU keeps one program's values"),
        )
        .with_label(at, format!("the same elements for every `{axis}`"));
        d = if race.outside {
            d.with_note(format!("store inside the `{axis}` loop, at a place its index decides"))
        } else {
            d.with_note(format!(
                "index the stored tensor with `{axis}` (as its loads are), or store under a condition on it"
            ))
        };
        if let Some(grid) = range_in(&race.grid, name) {
            d = d.with_label(grid, format!("one program per `{axis}`"));
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for race in atomic_races {
        let Some(at) = range_in(&race.store, name) else { continue };
        let (axis, tensor) = (&race.axis, &race.tensor);
        let mut d = Diagnostic::new(
            Code::E0501,
            at,
            format!(
                "race: this store writes elements of `{tensor}` that every program along `{axis}` adds into with \
                 `tile.atomic_add`: programs run in no fixed order, so the write lands after some of the additions \
                 (and loses them) and before others"
            ),
        )
        .with_label(at, "a plain write")
        .with_note(
            "set the tensor before the launch (on the host, or in a kernel of its own) and only add into it here",
        );
        if let Some(add) = range_in(&race.add, name) {
            d = d.with_label(add, format!("every `{axis}` program adds here"));
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for read in grid::program_ids_outside_their_loop(graph) {
        let Some(at) = range_in(&read.at, name) else { continue };
        let index = &read.index;
        let mut d = Diagnostic::new(
            Code::E0503,
            at,
            format!(
                "`tile.program_id({})` outside the `{index}` loop that makes grid axis {}: which of its programs runs \
                 this code is defined inside that loop only",
                read.axis, read.axis
            ),
        )
        .with_label(at, format!("outside the `{index}` loop"))
        .with_note(format!(
            "read it inside the `{index}` loop, or use `{index}` itself (the program's offset on the axis)"
        ));
        if let Some(grid) = range_in(&read.grid, name) {
            d = d.with_label(grid, format!("grid axis {}", read.axis));
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    // One diagnostic per kind and barrier-free stretch: one barrier fixes them all
    // (`tile.mma(a_s, b_s)` reads two buffers that were both just copied).
    let mut groups: BTreeMap<(u32, u8), Vec<races::Race>> = BTreeMap::new();
    for race in races::find_races(graph) {
        if range_in(&race.at, name).is_some() {
            groups.entry((race.segment, race.kind as u8)).or_default().push(race);
        }
    }
    let mut groups: Vec<Vec<races::Race>> = groups.into_values().collect();
    groups.sort_by_key(|g| g[0].at.range.start);
    for races in groups {
        let first = &races[0];
        let at = first.at.range;
        let mut buffers: Vec<String> = races.iter().map(|r| format!("`{}`", r.buffer)).collect();
        buffers.dedup();
        let (message, other) = match first.kind {
            races::RaceKind::ReadBeforeVisible => (
                format!(
                    "race: {} {} read here before the {} visible to every thread (no `tile.barrier()` in between{})",
                    buffers.join(" and "),
                    if buffers.len() > 1 { "are" } else { "is" },
                    if buffers.len() > 1 { "copies into them are" } else { "copy into it is" },
                    if first.across_iterations { " on the loop's next iteration" } else { "" }
                ),
                "written here",
            ),
            races::RaceKind::WriteWhileRead => (
                format!(
                    "race: {} {} overwritten while other threads may still be reading {}{} (no `tile.barrier()` in between)",
                    buffers.join(" and "),
                    if buffers.len() > 1 { "are" } else { "is" },
                    if buffers.len() > 1 { "them" } else { "it" },
                    if first.across_iterations { " from the previous iteration" } else { "" }
                ),
                "read here",
            ),
            races::RaceKind::DoubleWrite => (
                format!(
                    "race: two copies into {} with no `tile.barrier()` between them; the second may land first",
                    buffers.join(" and ")
                ),
                "first copy here",
            ),
        };
        let mut d = Diagnostic::new(Code::E0501, at, message);
        if let Some(other_range) = range_in(&first.other, name) {
            d = d.with_label(other_range, other);
        }
        out.body
            .push(Lint { diagnostic: d, fix: Some(("insert `tile.barrier()`".into(), FixRequest::BarrierBefore(at))) });
    }
}

fn pattern_lints(graph: &Func, name: &str, out: &mut KernelLints) {
    for u in patterns::uncoalesced_accesses(graph) {
        let Some(at) = range_in(&u.at, name) else { continue };
        let d = Diagnostic::new(
            Code::W0603,
            at,
            format!(
                "uncoalesced {}: the tile's fastest dim walks dim {} of `{}`, so neighbouring threads touch addresses a whole row apart",
                if u.store { "store" } else { "load" },
                u.walked_dim,
                u.tensor
            ),
        )
        .with_note(format!(
            "keep dim {} (the contiguous one) in the tile, e.g. access a `[.., 1]` column tile and transpose it in registers",
            u.rank - 1
        ));
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for m in masked_rows::masked_softmax_rows(graph) {
        let Some(at) = range_in(&m.at, name) else { continue };
        let mut d = Diagnostic::new(
            Code::W0605,
            at,
            if m.running {
                "this softmax's running maximum starts at -inf in a key loop that does not start at key 0: a first key block above the diagonal masks whole rows, and exp(-inf - -inf) is NaN".to_string()
            } else {
                "this softmax subtracts each row's maximum over a causally masked key block: a block wholly above the diagonal masks whole rows, their maximum is -inf, and exp(-inf - -inf) is NaN".to_string()
            },
        )
        .with_note("subtract a running maximum that has seen key 0 (start the key loop at 0), or skip the key blocks above the diagonal: `tile.range(0, q0 + ctx.BM, ctx.BN)`");
        if let Some(mask_at) = range_in(&m.mask, name) {
            d = d.with_label(mask_at, "the causal mask");
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for u in id_updates::id_read_modify_writes(graph) {
        let Some(at) = range_in(&u.scatter, name) else { continue };
        let tensor = &u.tensor;
        let mut d = Diagnostic::new(
            Code::W0609,
            at,
            format!(
                "this scatter writes back into `{tensor}` a value computed from a gather of `{tensor}` at the same \
                 ids: programs, or lanes, whose ids repeat read the same old value, and only one of their updates \
                 survives"
            ),
        )
        .with_label(at, "writes back through the ids")
        .with_note(format!(
            "to accumulate, add with `tile.atomic_add({tensor}[ids], delta)`; with unique ids (a permutation) it is \
             right as written"
        ));
        if let Some(gather) = range_in(&u.gather, name) {
            d = d.with_label(gather, "reads through the same ids");
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    let padded = padding::padded(graph);
    padding::padding_lints(&padded.reductions, name, out);
    padding::divisor_padding_lints(&padded.divisors, name, out);
    let overruns = overrun::overrunning_windows(graph);
    overrun::overrun_lints(&overruns, name, out);
    for l in patterns::independent_loops(graph) {
        // A store window that runs past the loop's bound overlaps another iteration's.
        if overruns.iter().any(|o| o.loop_at == l.at) {
            continue;
        }
        let Some(at) = range_in(&l.at, name) else { continue };
        let d = Diagnostic::new(
            Code::W0604,
            at,
            format!(
                "the iterations of this `tile.range` loop are independent and write disjoint windows of {}: `tile.parallel` would spread them over the grid",
                l.stored.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ),
        );
        out.body.push(Lint {
            diagnostic: d,
            fix: Some((
                "use `tile.parallel`".into(),
                FixRequest::Replace { within: at, from: "tile.range".into(), to: "tile.parallel".into() },
            )),
        });
    }
}

#[allow(clippy::too_many_arguments)]
fn resource_lints(
    r: &Resources,
    conflicts: &[BankConflict],
    name: &str,
    name_range: TextRange,
    limits: &GpuLimits,
    autotuned: bool,
    config: &Config,
    out: &mut KernelLints,
) {
    let mut over_budget = false;
    // Under autotune, budget violations are the space's (W0702/E0703).
    if !autotuned && r.smem_bytes > limits.smem_per_block as u64 {
        over_budget = true;
        let largest = r.buffers.iter().max_by_key(|b| b.bytes);
        let at = largest.and_then(|b| range_in(&b.loc, name)).unwrap_or(name_range);
        let list: Vec<String> =
            r.buffers.iter().map(|b| format!("`{}` {}", b.name, crate::units::bytes(b.bytes))).collect();
        let mut d = Diagnostic::new(
            Code::E0500,
            at,
            format!(
                "the kernel needs {} of shared memory, more than the {} a block can have on {}",
                crate::units::bytes(r.smem_bytes),
                crate::units::bytes(limits.smem_per_block as u64),
                limits.arch
            ),
        )
        .with_note(format!("buffers (all pipeline stages): {}", list.join(", ")));
        if let Some(b) = largest {
            d = d.with_note(if b.staging {
                format!("`{}` is the compiler's staging for this loop; fewer stages or smaller tiles shrink it", b.name)
            } else {
                "smaller tiles (BM, BN, BK) or fewer stages shrink it".to_string()
            });
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    let register_limit = r.register_limit(limits);
    let after_setmaxnreg = if r.consumer_registers.is_some() { " after the consumers' setmaxnreg" } else { "" };
    if !autotuned && r.registers.peak > register_limit {
        over_budget = true;
        let largest: Vec<String> =
            r.registers.largest.iter().map(|v| format!("`{}` ({} registers)", v.name, v.registers)).collect();
        let mut d = Diagnostic::new(
            Code::W0600,
            name_range,
            format!(
                "~{} registers per thread are live at once (limit {register_limit}{after_setmaxnreg}): ptxas will spill to local memory",
                r.registers.peak
            ),
        )
        .with_note(format!("largest live values: {}", largest.join(", ")))
        .with_note(format!("with {config}: smaller BM x BN tiles or more warps spread the accumulator"));
        for v in &r.registers.largest {
            if let Some(at) = range_in(&v.loc, name) {
                d = d.with_label(at, format!("`{}`: {} registers per thread", v.name, v.registers));
            }
        }
        out.body.push(Lint { diagnostic: d, fix: None });
    }
    for c in conflicts {
        let Some(at) = range_in(&c.alloc, name) else { continue };
        let fix_text = match &c.fix {
            Some(BankFix::Swizzle) => "swizzle=\"xor\" makes every access conflict free".to_string(),
            Some(BankFix::Pad(p)) => format!("pad={p} makes every access conflict free"),
            None if c.transposing_stage => {
                "this is the transposing stage `mma=\"wgmma\"` adds for an 8-bit `[K, N]` B \
                 (fp8 and int8 `wgmma` read B K-major): load B as `[N, K]` and pass `b.T`, and the stage goes away"
                    .to_string()
            }
            None => match c.descriptor_swizzle {
                Some(width) => {
                    // The two ways out that the analysis itself confirms: the TMA unit writes a
                    // box with no thread order to conflict, and the 128-byte swizzle spreads a
                    // warp's 16-byte chunks over every bank.
                    let mut ways = Vec::new();
                    if c.access.contains("cp.async") {
                        ways.push("`copy=\"tma\"` has the TMA unit write it instead".to_string());
                    }
                    if width < 128 {
                        ways.push("rows of 128 bytes (a wider tile) take the 128-byte swizzle".to_string());
                    }
                    let out = if ways.is_empty() { String::new() } else { format!(": {}", ways.join(", or ")) };
                    format!(
                        "`wgmma` reads this buffer through a matrix descriptor, so its layout is the descriptor's \
                         {width}-byte swizzle (`swizzle=` and `pad=` do not apply); the order in which threads copy \
                         it decides the conflict{out}"
                    )
                }
                None => "neither a swizzle nor a pad removes it; change the access pattern".to_string(),
            },
        };
        let mut d = Diagnostic::new(
            Code::W0601,
            at,
            format!("{}-way shared-memory bank conflict on `{}`: {}", c.ways, c.buffer, c.access),
        )
        .with_note(fix_text);
        if let Some(access) = range_in(&c.at, name) {
            d = d.with_label(access, format!("{}-way conflict here", c.ways));
        }
        let fix = match (&c.fix, c.staging) {
            (Some(BankFix::Swizzle), false) => Some((
                "add swizzle=\"xor\"".to_string(),
                FixRequest::AddKeyword { call: at, keyword: "swizzle".into(), value: "\"xor\"".into() },
            )),
            (Some(BankFix::Pad(p)), false) => Some((
                format!("add pad={p}"),
                FixRequest::AddKeyword { call: at, keyword: "pad".into(), value: p.to_string() },
            )),
            _ => None,
        };
        out.body.push(Lint { diagnostic: d, fix });
    }
    // A producer warpgroup's kernel holds the register file by design (`setmaxnreg`, one
    // program per SM): its latency is hidden by the producer running ahead, not by more
    // resident warps, so low occupancy is no finding there.
    let by_design = r.consumer_registers.is_some();
    if let (Some(o), false, false) = (&r.occupancy, over_budget, by_design) {
        if o.fraction() < 0.25 {
            let limiters: Vec<String> = [
                ("registers", o.by_registers, format!("~{} registers per thread", r.registers.peak)),
                ("shared memory", o.by_smem, format!("{} per block", crate::units::bytes(r.smem_bytes))),
                ("warps", o.by_warps, format!("{} warps per block", o.warps_per_block)),
            ]
            .into_iter()
            // A resource that would allow more blocks than the SM can hold (shared memory
            // at 0 B per block allows 228 on sm_90) is said to be no limit, not given as a
            // count no SM reaches.
            .map(|(what, blocks, why)| match blocks >= o.by_blocks {
                true => format!("{what}: not a limit ({why})"),
                false => format!("{what}: {blocks} blocks/SM ({why})"),
            })
            .collect();
            let d = Diagnostic::new(
                Code::W0602,
                name_range,
                format!(
                    "occupancy {:.1}% on {}: {} resident block{} of {} warps per SM",
                    o.fraction() * 100.0,
                    limits.arch,
                    o.blocks,
                    if o.blocks == 1 { "" } else { "s" },
                    o.warps_per_block
                ),
            )
            .with_note(format!("limits per SM — {}", limiters.join("; ")));
            out.body.push(Lint { diagnostic: d, fix: None });
        }
    }
}

/// Register pressure per source line for the explorer and the language server.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RegisterProfile {
    /// (0-based source line, the largest pressure of any op of that line).
    pub per_line: Vec<(u32, u32)>,
    pub peak: u32,
    /// What a thread may hold: the target's limit, or under warp specialization the
    /// count the consumers' `setmaxnreg` gives them (the peak is a consumer thread's).
    pub limit: u32,
    pub setmaxnreg: bool,
}

/// The register profile of a kernel for one configuration and target, by line.
pub fn register_profile(
    db: &dyn Db,
    key: FnKey<'_>,
    config: Config,
    target: Target,
) -> Result<RegisterProfile, LowerError> {
    let resources = kernel_resources(db, key, config, target).clone()?;
    let file = key.file(db);
    let locs = crate::locs::FileLocs::new(db, file);
    let text = file.text(db);
    let index = tessera_frontend::text::LineIndex::new(text);
    let mut per_line: HashMap<u32, u32> = HashMap::new();
    for (loc, pressure) in &resources.registers.per_loc {
        if let Some(range) = locs.absolute(loc) {
            let line = index.line_col(text, range.start).line;
            let e = per_line.entry(line).or_default();
            *e = (*e).max(*pressure);
        }
    }
    let mut per_line: Vec<(u32, u32)> = per_line.into_iter().collect();
    per_line.sort();
    let limit = GpuLimits::of(target).map_or(0, |l| resources.register_limit(l));
    Ok(RegisterProfile {
        per_line,
        peak: resources.registers.peak,
        limit,
        setmaxnreg: resources.consumer_registers.is_some(),
    })
}
