//! Thread-block clusters and TMA multicast (`cluster=(x, y)`, sm_90a).
//!
//! A cluster groups `x × y` neighbouring programs of the grid's first two axes; they run
//! at once on neighbouring SMs and can write each other's shared memory. A staged load
//! that is the same for the programs along a clustered axis (a GEMM's B tile for the
//! programs of one column of M blocks, attention's K and V for the query blocks of one
//! head) is then fetched from global memory once per cluster instead of once per program:
//! each program's producer loads one slice of the box and multicasts it into the same
//! slot of every program that shares it (`cp.async.bulk.tensor … .multicast::cluster`),
//! completing on each one's full barrier. This is CUTLASS 3's `ClusterShape` with
//! `SM90_TMA_LOAD_MULTICAST`.
//!
//! - The rule (E0708, shared by the target lints, autotune pruning and lowering):
//!   [`cluster_problem`] on Graph IR.
//! - The Tile pass `form-clusters` ([`form_clusters`]) marks the kernel `cluster` and each
//!   shared TMA copy `multicast` (the clustered axes it is the same along); the copy's
//!   tensor map then has a slice-sized box ([`multicast_ways`]).
//! - The PTX backend (`ptx::cluster`) declares the cluster shape (`.reqnctapercluster`),
//!   synchronizes the cluster after the mbarriers are initialized and before any program
//!   exits, issues the multicast slices, and has the consumers release every program's
//!   slot: a producer may refill a slot only when the consumers of every program it
//!   writes into are done with it, so each empty barrier counts the consumer warps of the
//!   whole cluster (one lane per warp arrives at each program's barrier, through `mapa`).
//!
//! Every program of a cluster must run the same K iterations (their producers fill the
//! same ring together), so the K loop's bounds may not depend on a clustered axis. The
//! grid is rounded up to whole clusters at launch: the programs past the end load zeros
//! (the TMA fills out-of-bounds boxes with them) and store nothing (their stores are
//! masked), which is why a clustered axis must tile a dim (`tile.parallel(0, N, BLOCK)`).

use tessera_frontend::text::TextRange;

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Attr, Func, Op, OpId, OpKind, Region, Type};
use crate::target::Target;

/// The kernel attribute with the cluster shape `[x, y, 1]` (absent without a cluster).
pub const CLUSTER: &str = "cluster";
/// The attribute of a TMA copy that is multicast: the clustered grid axes along which it
/// is the same for every program.
pub const MULTICAST: &str = "multicast";
/// The portable cluster size: at most 8 CTAs (`cudaFuncAttributeNonPortableClusterSizeAllowed`
/// would allow 16 on H100, which we do not ask for).
pub const MAX_CLUSTER: i64 = 8;
/// A multicast slice starts at a multiple of the swizzle's repeat of 8 rows.
const SLICE_ROWS: i64 = 8;
const AXIS_NAMES: [&str; 2] = ["x", "y"];

/// Why `cluster=(x, y)` cannot be used for the kernel `graph` (Graph IR) under `config`
/// on `target`, and where (`None`: the kernel's name); `None` when it can, or when the
/// schedule asks for no cluster. The producer's rule (E0707) comes first: a cluster
/// needs a producer warpgroup, and whatever that needs. The reasons about the kernel
/// come before the target's, so they are the same on every target.
pub fn cluster_problem(graph: &Func, config: &Config, target: Target) -> Option<(String, Option<TextRange>)> {
    let shape = config.schedule.cluster();
    let size: i64 = shape.iter().product();
    if size <= 1 || !target.is_gpu() {
        return None;
    }
    if size > MAX_CLUSTER {
        return Some((
            format!("a cluster of {} × {} = {size} CTAs; the portable limit is {MAX_CLUSTER}", shape[0], shape[1]),
            None,
        ));
    }
    if !config.schedule.producer_warpgroup() {
        return Some((
            "the CTAs of a cluster share their loads by TMA multicast, whose slots the producer warpgroup's empty \
             barriers guard: the schedule needs `producer=\"warpgroup\"` (or `\"pingpong\"`)"
                .into(),
            None,
        ));
    }
    let grid = grid_loops(graph);
    let masks = axis_dependence(graph);
    let defs = graph.definitions();
    for (axis, &extent) in shape.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        let name = AXIS_NAMES[axis];
        let Some(&lp) = grid.get(axis) else {
            return Some((
                format!(
                    "cluster_{name}={extent} clusters the grid's axis {axis}, but the kernel has {} `tile.parallel` \
                     loop{}",
                    grid.len(),
                    if grid.len() == 1 { "" } else { "s" }
                ),
                None,
            ));
        };
        let looped = graph.op(lp);
        if unit_step(graph, &defs, looped) {
            return Some((
                format!(
                    "cluster_{name}={extent} clusters a `tile.parallel` loop of step 1: the grid is rounded up to whole \
                     clusters, and only a loop that tiles a dim (`tile.parallel(0, N, BLOCK)`) masks the programs past \
                     its end"
                ),
                Some(looped.loc.range),
            ));
        }
    }
    let clustered: u8 = (0..2).filter(|&a| shape[a] > 1).fold(0, |m, a| m | 1 << a);
    let dots: Vec<OpId> = graph.walk().into_iter().filter(|&id| graph.op(id).kind == OpKind::Dot).collect();
    // The K loop (the producer's rule has put every dot in it).
    let k_loop = dots.first().and_then(|&d| crate::warp_spec::enclosing_loop(graph, &graph.body, d));
    if let Some(k_loop) = k_loop.map(|k| graph.op(k)) {
        let bounds = k_loop.operands.iter().take(3).fold(0u8, |m, v| m | masks[v.0 as usize]);
        if let Some(axis) = (0..2).find(|&a| bounds & clustered & (1 << a) != 0) {
            return Some((
                format!(
                    "the K loop's bounds depend on the program's position along the clustered axis {} (cluster_{}): \
                     the CTAs of a cluster fill their pipelines together and must run the same iterations",
                    axis, AXIS_NAMES[axis]
                ),
                Some(k_loop.loc.range),
            ));
        }
    }
    // The staged loads: the dots' operands (through transposes and casts, as staging
    // follows them), and the buffers the kernel fills itself with `tile.cp_async`: each
    // global view, its rows and the op.
    let mut staged: Vec<(crate::ir::ValueId, Option<i64>, &Op)> = Vec::new();
    let rows_of = |dims: &[tessera_frontend::check::Dim]| dims.first().and_then(|d| d.eval(&|s| config.key(s)));
    for &dot in &dots {
        for &operand in graph.op(dot).operands.iter().take(2) {
            let (_, source) = crate::sched::dot_operand_source(graph, &defs, operand);
            let Some(load) = source.map(|d| graph.op(d)).filter(|d| d.kind == OpKind::Load) else { continue };
            let rows = match graph.ty(load.results[0]) {
                Type::Tile(t) => rows_of(&t.dims),
                _ => None,
            };
            staged.push((load.operands[0], rows, load));
        }
    }
    for id in graph.walk() {
        let copy = graph.op(id);
        if copy.kind == OpKind::CpAsync && copy.operands.len() >= 2 {
            let rows = match graph.ty(copy.operands[0]) {
                Type::Smem(s) => rows_of(&s.dims),
                _ => None,
            };
            staged.push((copy.operands[1], rows, copy));
        }
    }
    let mut shared_along = 0u8;
    for (view, rows, op) in staged {
        let along = clustered & !masks[view.0 as usize];
        if along == 0 {
            continue;
        }
        shared_along |= along;
        let ways: i64 = (0..2).filter(|&a| along & (1 << a) != 0).map(|a| shape[a]).product();
        if rows.is_some_and(|rows| rows % (SLICE_ROWS * ways) != 0) {
            return Some((
                format!(
                    "this tile is multicast to {ways} CTAs, each loading a slice of its {} rows: the slices must be \
                     whole multiples of {SLICE_ROWS} rows (the swizzle's repeat)",
                    rows.unwrap_or(0)
                ),
                Some(op.loc.range),
            ));
        }
    }
    if let Some(axis) = (0..2).find(|&a| clustered & (1 << a) != 0 && shared_along & (1 << a) == 0) {
        return Some((
            format!(
                "every staged load depends on the program's position along the grid's axis {axis} (cluster_{}): the \
                 CTAs of a cluster along it share nothing to multicast",
                AXIS_NAMES[axis]
            ),
            None,
        ));
    }
    // Last: the reasons above hold on every target, this one names it.
    if target != Target::Sm90 {
        return Some((format!("thread-block clusters are a Hopper feature (sm_90); the target is {target}"), None));
    }
    None
}

/// The `grid.parallel` loops of a Graph IR kernel from the outermost in (the grid axes
/// they become, in order).
fn grid_loops(f: &Func) -> Vec<OpId> {
    let mut out = Vec::new();
    let mut region = &f.body;
    while let Some(&id) = region.ops.iter().find(|&&id| f.op(id).kind == OpKind::GridParallel) {
        out.push(id);
        region = &f.op(id).regions[0];
    }
    out
}

/// The schedule's cluster as written in a diagnostic: `cluster=(x, y)`.
pub fn asked(config: &Config) -> String {
    let [x, y] = config.schedule.cluster();
    format!("cluster=({x}, {y})")
}

/// Whether a `grid.parallel` loop steps by the constant 1 (it indexes, it does not tile).
fn unit_step(f: &Func, defs: &[Option<OpId>], op: &Op) -> bool {
    let Some(&step) = op.operands.get(2) else { return true };
    defs[step.0 as usize].map(|d| f.op(d)).is_some_and(|d| d.kind == OpKind::Constant && d.int_attr("value") == Some(1))
}

/// For each value, the grid axes it depends on (bit `a`: the program's position along
/// axis `a`): `grid.program_id` in Tile IR, the induction variables of the nested
/// `grid.parallel` loops in Graph IR. Loop-carried values are followed to a fixed point.
pub fn axis_dependence(f: &Func) -> Vec<u8> {
    fn visit(f: &Func, region: &Region, depth: usize, masks: &mut [u8]) {
        for &id in &region.ops {
            let op = f.op(id);
            let mut m = op.operands.iter().fold(0u8, |m, v| m | masks[v.0 as usize]);
            if op.kind == OpKind::ProgramId {
                m |= 1 << op.int_attr("axis").unwrap_or(0).clamp(0, 7);
            }
            let inner = if op.kind == OpKind::GridParallel { depth + 1 } else { depth };
            let loops = matches!(op.kind, OpKind::For | OpKind::GridParallel);
            for r in &op.regions {
                for (i, &arg) in r.args.iter().enumerate() {
                    masks[arg.0 as usize] |= match (loops, i) {
                        // The induction variable: the bounds (and the grid axis it is).
                        (true, 0) => {
                            let bounds = op.operands.iter().take(3).fold(0u8, |c, v| c | masks[v.0 as usize]);
                            let own = if op.kind == OpKind::GridParallel { 1u8 << depth.min(7) } else { 0 };
                            bounds | own
                        }
                        // A carried value: its initial value and what the loop yields for
                        // it (the result of the same position).
                        (true, i) => {
                            op.operands.get(i + 2).map_or(0, |v| masks[v.0 as usize])
                                | op.results.get(i - 1).map_or(0, |v| masks[v.0 as usize])
                        }
                        _ => m,
                    };
                }
                visit(f, r, inner, masks);
                if let Some(&last) = r.ops.last() {
                    let y = f.op(last);
                    if y.kind == OpKind::Yield {
                        m |= y.operands.iter().fold(0u8, |c, v| c | masks[v.0 as usize]);
                    }
                }
            }
            for &r in &op.results {
                masks[r.0 as usize] |= m;
            }
        }
    }
    let mut masks = vec![0u8; f.values.len()];
    loop {
        let before = masks.clone();
        visit(f, &f.body, 0, &mut masks);
        if masks == before {
            return masks;
        }
    }
}

/// The cluster shape of a Tile IR kernel, `[x, y, 1]` (`[1, 1, 1]` without a cluster).
pub fn cluster_shape(f: &Func) -> [i64; 3] {
    match f.attr(CLUSTER) {
        Some(Attr::Ints(v)) if v.len() == 3 => [v[0], v[1], v[2]],
        _ => [1, 1, 1],
    }
}

/// The clustered axes a TMA copy is multicast along (empty: it is not).
pub fn multicast_axes(op: &Op) -> Vec<usize> {
    match op.attr(MULTICAST) {
        Some(Attr::Ints(v)) => v.iter().map(|&a| a as usize).collect(),
        _ => Vec::new(),
    }
}

/// How many CTAs receive a TMA copy (1: only its own): each loads `1 / ways` of the box.
pub fn multicast_ways(f: &Func, op: &Op) -> i64 {
    let shape = cluster_shape(f);
    multicast_axes(op).iter().map(|&a| shape[a]).product()
}

/// The Tile pass `form-clusters`: marks the kernel with its cluster shape and each TMA
/// copy that is the same along a clustered axis `multicast`.
pub(crate) fn form_clusters(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    let [x, y] = config.schedule.cluster();
    if x * y <= 1 || !target.is_gpu() {
        return Ok(());
    }
    let internal = |f: &Func, why: String| LowerError {
        message: format!("internal error: cluster=({x}, {y}): {why}"),
        range: f.loc.range,
    };
    if crate::warp_spec::producer_threads(f) == 0 {
        return Err(internal(f, "the kernel has no producer warpgroup".into()));
    }
    let masks = axis_dependence(f);
    let clustered: Vec<usize> = [x, y].iter().enumerate().filter(|&(_, &n)| n > 1).map(|(a, _)| a).collect();
    let mut marked = Vec::new();
    for id in f.walk() {
        let op = f.op(id);
        if op.kind == OpKind::For && op.attr(crate::warp_spec::WARP_SPECIALIZED).is_some() {
            let bounds = op.operands.iter().take(3).fold(0u8, |m, v| m | masks[v.0 as usize]);
            if clustered.iter().any(|&a| bounds & (1 << a) != 0) {
                return Err(internal(f, "the K loop's bounds depend on a clustered axis".into()));
            }
        }
        if !crate::tma::is_tma_copy(op) {
            continue;
        }
        let view = op.operands[1];
        let axes: Vec<usize> = clustered.iter().copied().filter(|&a| masks[view.0 as usize] & (1 << a) == 0).collect();
        if axes.is_empty() {
            continue;
        }
        let ways: i64 = axes.iter().map(|&a| [x, y][a]).product();
        let Type::Smem(slot) = f.ty(op.operands[0]) else { continue };
        let rows = crate::tma::blocks(slot).map_or(0, |(_, _, rows)| rows);
        if rows % (SLICE_ROWS * ways) != 0 {
            return Err(internal(
                f,
                format!("a box of {rows} rows does not split into {ways} slices of 8-row multiples"),
            ));
        }
        marked.push((id, axes));
    }
    for (id, axes) in marked {
        f.op_mut(id).set_attr(MULTICAST, Attr::Ints(axes.into_iter().map(|a| a as i64).collect()));
    }
    f.set_attr(CLUSTER, Attr::Ints(vec![x, y, 1]));
    Ok(())
}
