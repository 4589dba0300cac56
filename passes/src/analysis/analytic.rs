//! An analytic estimate of a kernel's [`Budget`] for one configuration, read from its
//! Graph IR without lowering it: autotune pruning (`prune`) takes its answer for the
//! candidates it places far from a limit, and lowers the others.
//!
//! The model is built once per kernel: the live range of every Graph IR value (the
//! liveness of `registers`, on the unspecialized IR) and the tile loads that staging puts
//! in shared memory (`sched::annotate_staging`'s rule: loads that feed a tensor-core dot,
//! a ring of `stages` slots inside a sequential loop). A candidate's estimate evaluates
//! each tile's dims under its configuration and sweeps the ranges: a tile costs its
//! elements spread over the block's threads (dot operands staged through shared memory
//! cost one k step of fragments), everything else what `registers::registers_of` says.
//!
//! It is an estimate of the lowered figure, not the figure: it knows neither layout
//! conversions nor the index arithmetic of staging. `prune` scales it by the ratio of a
//! lowered candidate's own figure to its estimate, and trusts it only outside a margin
//! around each limit; `passes/tests/pruning.rs` holds the margins to every kernel of the
//! corpus, the examples and the standard library over a grid of tile sizes.

use rustc_hash::FxHashSet as HashSet;
use tessera_frontend::check::{DType, Dim, MmaFamily};

use super::registers::{add_range, live_ranges, peak_of_deltas, registers_of};
use super::Budget;
use crate::config::{Config, SymbolValues};
use crate::ir::{Func, OpKind, SmemType, Type, ValueId};
use crate::target::Target;

/// Registers of one k step of a staged dot operand's fragments (an m16k16 A fragment).
const STREAMED_OPERAND_REGISTERS: u64 = 4;

/// A kernel's Graph IR, reduced to what the estimate of each configuration needs.
pub struct BudgetModel {
    points: usize,
    /// The distinct tile shapes of the kernel: each is evaluated once per configuration.
    shapes: Vec<Vec<Dim>>,
    /// The pressure deltas (`registers::add_range`) of the ranges whose registers no
    /// configuration changes: scalars, indices, and staged dot operands' fragments.
    fixed_in: Vec<i64>,
    fixed_out: Vec<i64>,
    /// The other tiles' ranges: (definition, last use, shape index, bits per element).
    tiles: Vec<(usize, usize, usize, u64)>,
    /// Tiles staging puts in shared memory: dims, bytes per element, and whether the
    /// buffer is a ring (inside a sequential loop).
    staged: Vec<(Vec<Dim>, u64, bool)>,
    /// The kernel's own shared buffers (`tile.alloc_shared`), and whether each becomes a
    /// ring (a `cp_async` fills it in a sequential loop it is allocated outside of).
    buffers: Vec<(SmemType, bool)>,
}

impl BudgetModel {
    pub fn new(graph: &Func) -> BudgetModel {
        // `acc + dot(a, b)` accumulates in place once lowered (a Schedule pass that needs
        // no configuration): without the fold, the model would count two accumulators.
        let mut folded = graph.clone();
        crate::sched::fold_dot_accumulate(&mut folded);
        // The zero tile the fold leaves unread is gone once lowered, too.
        crate::tile::remove_dead_ops(&mut folded);
        let graph = &folded;
        let defs = graph.definitions();
        // Values on the way from a load to a tensor-core dot's operand (through casts and
        // transposes): staged in shared memory and read fragment by fragment.
        let mut streamed: HashSet<ValueId> = HashSet::default();
        let mut staged_loads: HashSet<ValueId> = HashSet::default();
        for id in graph.walk() {
            let op = graph.op(id);
            if op.kind != OpKind::Dot || op.operands.len() < 2 {
                continue;
            }
            let tensor_core = graph.ty(op.operands[0]).dtype().is_some_and(|d| d.bits() <= 16);
            if !tensor_core {
                continue;
            }
            for &operand in &op.operands[..2] {
                let (chain, source) = crate::sched::dot_operand_source(graph, &defs, operand);
                match source.map(|d| graph.op(d).kind) {
                    Some(OpKind::Load) => {
                        staged_loads.extend(chain.last());
                        streamed.extend(chain);
                    }
                    Some(OpKind::LoadShared) => streamed.extend(chain),
                    _ => {}
                }
            }
        }
        let live = live_ranges(graph);
        let mut shapes: Vec<Vec<Dim>> = Vec::new();
        let mut shape_of = |dims: &[Dim]| match shapes.iter().position(|s| s.as_slice() == dims) {
            Some(i) => i,
            None => {
                shapes.push(dims.to_vec());
                shapes.len() - 1
            }
        };
        let mut fixed_in = vec![0i64; live.points() + 2];
        let mut fixed_out = vec![0i64; live.points() + 2];
        let mut tiles = Vec::new();
        for &(v, def, last) in &live.ranges {
            let regs = match graph.ty(v) {
                Type::Tile(_) if streamed.contains(&v) && !live.read_by_non_dot[v.0 as usize] => {
                    STREAMED_OPERAND_REGISTERS
                }
                Type::Tile(t) => {
                    tiles.push((def, last, shape_of(&t.dims), element_bits(t.dtype)));
                    continue;
                }
                ty => registers_of(ty) as u64,
            };
            if regs > 0 {
                add_range(&mut fixed_in, &mut fixed_out, def, last, regs as i64);
            }
        }
        // Staged loads and shared buffers, by the sequential loops around them.
        let mut walk = Walk { loads: &staged_loads, staged: Vec::new(), buffers: Vec::new(), ring: HashSet::default() };
        walk.visit(graph, &graph.body, 0);
        let Walk { staged, buffers, ring, .. } = walk;
        let buffers = buffers.into_iter().map(|(v, t, _)| (t, ring.contains(&v))).collect();
        BudgetModel { points: live.points(), shapes, fixed_in, fixed_out, tiles, staged, buffers }
    }

    /// The estimated budget of `config` on a GPU `target`; `None` where the model has
    /// nothing to say (a dim it cannot evaluate, explicit shared buffers, warpgroup MMA).
    pub fn estimate(&self, config: &Config, target: Target) -> Option<Budget> {
        if !target.is_gpu() || config.mma() == MmaFamily::Wgmma {
            return None;
        }
        let values = SymbolValues::new(config);
        let eval = |dims: &[Dim]| -> Option<u64> {
            dims.iter().try_fold(1u64, |acc, d| {
                let v = d.eval_numeric(&|s| values.get(s))?;
                Some(acc.saturating_mul(v.max(0) as u64))
            })
        };
        let threads = config.warps() as u64 * 32;
        let elements: Vec<Option<u64>> = self.shapes.iter().map(|dims| eval(dims)).collect();
        let mut live_in = self.fixed_in.clone();
        let mut live_out = self.fixed_out.clone();
        for &(def, last, shape, bits) in &self.tiles {
            let per_thread = elements[shape]?.div_ceil(threads).max(1);
            let regs = (per_thread * bits).div_ceil(32);
            add_range(&mut live_in, &mut live_out, def, last, regs.min(i64::MAX as u64 / 4) as i64);
        }
        let stages = config.stages() as u64;
        let mut smem_bytes = 0u64;
        for (dims, bytes, ring) in &self.staged {
            let slots = if *ring { stages } else { 1 };
            smem_bytes = smem_bytes.saturating_add(eval(dims)?.saturating_mul(*bytes).saturating_mul(slots));
        }
        for (buffer, ring) in &self.buffers {
            let dims = buffer
                .dims
                .iter()
                .map(|d| d.eval_numeric(&|s| values.get(s)).map(Dim::Const))
                .collect::<Option<Vec<Dim>>>()?;
            let slots = if *ring { config.stages() } else { 1 };
            let bytes = SmemType { dims, stages: slots, ..buffer.clone() }.bytes()?;
            smem_bytes = smem_bytes.saturating_add(bytes);
        }
        Some(Budget { smem_bytes, register_peak: peak_of_deltas(&live_in, &live_out, self.points) })
    }
}

/// The walk of [`BudgetModel::new`] over the kernel's loops.
struct Walk<'a> {
    loads: &'a HashSet<ValueId>,
    staged: Vec<(Vec<Dim>, u64, bool)>,
    /// Each buffer with the sequential-loop depth of its allocation.
    buffers: Vec<(ValueId, SmemType, usize)>,
    ring: HashSet<ValueId>,
}

impl Walk<'_> {
    fn visit(&mut self, f: &Func, region: &crate::ir::Region, depth: usize) {
        for &id in &region.ops {
            let op = f.op(id);
            match op.kind {
                OpKind::Load if op.results.iter().any(|r| self.loads.contains(r)) => {
                    if let Type::Tile(t) = f.ty(op.results[0]) {
                        self.staged.push((t.dims.clone(), t.dtype.bytes() as u64, depth > 0));
                    }
                }
                OpKind::AllocShared => {
                    if let Some(Type::Smem(t)) = op.results.first().map(|&r| f.ty(r)) {
                        self.buffers.push((op.results[0], t.clone(), depth));
                    }
                }
                // A copy in a deeper sequential loop than its buffer's allocation: the
                // loop is pipelined and the buffer becomes a ring.
                OpKind::CpAsync => {
                    let buffer = op.operands[0];
                    if self.buffers.iter().any(|&(v, _, allocated_at)| v == buffer && allocated_at < depth) {
                        self.ring.insert(buffer);
                    }
                }
                _ => {}
            }
            let inner = depth + usize::from(op.kind == OpKind::For && op.str_attr("kind") == Some("sequential"));
            for r in &op.regions {
                self.visit(f, r, inner);
            }
        }
    }
}

/// Bits a tile element takes in registers (`registers`' rule: a bool a byte).
fn element_bits(dtype: DType) -> u64 {
    if dtype == DType::Bool {
        8
    } else {
        dtype.bits() as u64
    }
}
