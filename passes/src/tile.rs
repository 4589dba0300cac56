//! Schedule IR → Tile IR.
//!
//! 1. The grid: `grid.parallel` loops become `grid.program_id` arithmetic; the grid's
//!    extents (symbolic in the tensor dims) go on the function (`grid`).
//! 2. GPU targets: loads marked for staging become asynchronous copies into shared
//!    buffers, pipelined `stages` deep in sequential loops (a ring of buffers: a
//!    prologue fills `stages - 1` slots, each iteration waits for its slot, issues the
//!    copy `stages - 1` iterations ahead and reads its slot); explicit `tile.cp_async`s
//!    get their commit groups, and `tile.barrier` waits for them first.
//! 3. GPU targets: every register tile gets a layout, propagated from the anchors
//!    (MMA accumulators and operands) through elementwise ops, reductions (slices),
//!    loop-carried values and broadcasts; mismatches get `tile.convert_layout`.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};

use crate::config::Config;
use crate::error::LowerError;
use crate::ir::*;

/// A kernel's Tile IR returns nothing (in-place outputs are parameters).
pub(crate) fn drop_return_values(f: &mut Func) {
    for id in f.walk() {
        if f.op(id).kind == OpKind::Return {
            f.op_mut(id).operands.clear();
        }
    }
}

pub(crate) fn push_op(
    f: &mut Func,
    kind: OpKind,
    operands: Vec<ValueId>,
    results: Vec<ValueId>,
    attrs: Vec<(&'static str, Attr)>,
    loc: &Loc,
) -> OpId {
    f.ops.push(Op { kind, operands, results, attrs, regions: Vec::new(), loc: loc.clone() });
    OpId(f.ops.len() as u32 - 1)
}

pub(crate) fn new_op(
    f: &mut Func,
    kind: OpKind,
    operands: Vec<ValueId>,
    ty: Type,
    attrs: Vec<(&'static str, Attr)>,
    loc: &Loc,
) -> (OpId, ValueId) {
    let v = f.new_value(ty, None);
    (push_op(f, kind, operands, vec![v], attrs, loc), v)
}

fn const_index(f: &mut Func, value: i64, loc: &Loc) -> (OpId, ValueId) {
    let (op, v) = new_op(f, OpKind::Constant, vec![], Type::Index, vec![("value", Attr::Int(value))], loc);
    f.values[v.0 as usize].name = Some(SmolStr::new(format!("c{}", value.unsigned_abs())));
    (op, v)
}

// ----- the grid ------------------------------------------------------------------------

pub(crate) fn lower_grid(f: &mut Func) -> Result<(), LowerError> {
    let defs = f.definitions();
    let mut extents: Vec<Dim> = Vec::new();
    let body = f.body.clone();
    f.body = lower_grid_region(f, &defs, body, &mut extents)?;
    if let Some(Attr::Dims(extent)) = f.attr("linear_extent").cloned() {
        // `tile.linear_id()`: a 1-D grid over the indexed tensor in blocks of BLOCK.
        let block = f
            .walk()
            .into_iter()
            .find_map(|id| (f.op(id).str_attr("key") == Some("BLOCK")).then(|| f.op(id).int_attr("value")).flatten())
            .unwrap_or(1024);
        let e = extent[0]
            .add(&Dim::constant(block - 1))
            .floor_div(&Dim::constant(block))
            .unwrap_or_else(|| extent[0].clone());
        extents.push(e);
    }
    while extents.len() < 3 {
        extents.push(Dim::constant(1));
    }
    f.set_attr("grid", Attr::Dims(extents));
    Ok(())
}

fn lower_grid_region(
    f: &mut Func,
    defs: &[Option<OpId>],
    region: Region,
    extents: &mut Vec<Dim>,
) -> Result<Region, LowerError> {
    let mut ops = Vec::new();
    for id in region.ops {
        // Most ops are not grid loops: they keep their attributes and operands, and only
        // their regions are walked (taken out and put back, not cloned).
        if f.op(id).kind != OpKind::GridParallel {
            let mut new_regions = Vec::new();
            for r in std::mem::take(&mut f.op_mut(id).regions) {
                new_regions.push(lower_grid_region(f, defs, r, extents)?);
            }
            f.op_mut(id).regions = new_regions;
            ops.push(id);
            continue;
        }
        let op = f.op(id).clone();
        let axis = op.int_attr("axis").unwrap_or(extents.len() as i64);
        let (lo, hi, step) = (op.operands[0], op.operands[1], op.operands[2]);
        let extent = match (
            f.index_dim(defs, lo, &|_| None),
            f.index_dim(defs, hi, &|_| None),
            f.index_dim(defs, step, &|_| None),
        ) {
            (Some(l), Some(h), Some(s)) => h.sub(&l).add(&s).sub(&Dim::constant(1)).floor_div(&s),
            _ => None,
        };
        let Some(extent) = extent else {
            // A scalar parameter (Triton's persistent kernels size their grid by NUM_SMS):
            // the grid is computed from the tensors' dims before the launch.
            let param = [lo, hi, step]
                .into_iter()
                .find(|v| f.params.contains(v))
                .and_then(|v| f.values[v.0 as usize].name.clone());
            let hint = match param {
                Some(name) => format!(
                    " (`{name}` is a scalar parameter; the grid is sized from the tensors' dims before the launch: \
                     bound it by a module constant, `NUM_SMS = 132`, or a dim)"
                ),
                None => String::new(),
            };
            return Err(LowerError {
                message: format!("a grid axis whose bounds are not tensor dims or constants{hint}"),
                range: op.loc.range,
            });
        };
        if extents.len() <= axis as usize {
            extents.resize(axis as usize + 1, Dim::constant(1));
        }
        extents[axis as usize] = extent;
        let region = op.regions[0].clone();
        let iv = region.args[0];
        let (pid_op, pid) = new_op(f, OpKind::ProgramId, vec![], Type::Index, vec![("axis", Attr::Int(axis))], &op.loc);
        let (mul_op, off) = new_op(f, OpKind::Mul, vec![pid, step], Type::Index, vec![], &op.loc);
        // The loop variable is now defined by the arithmetic (same value id).
        let add_op = push_op(f, OpKind::Add, vec![lo, off], vec![iv], vec![], &op.loc);
        ops.extend([pid_op, mul_op, add_op]);
        let inner = lower_grid_region(f, defs, region, extents)?;
        ops.extend(inner.ops.into_iter().filter(|&o| f.op(o).kind != OpKind::Yield));
    }
    Ok(Region { args: region.args, ops })
}

// ----- staging and pipelining ----------------------------------------------------------

/// One copy into shared memory a loop performs each iteration.
struct Staged {
    /// The staging buffer (a ring of `stages` slots).
    buffer: ValueId,
    /// The view copied in (defined in the loop body from the induction variable).
    view: ValueId,
    /// The load it replaces (implicit staging), whose result is read from the slot.
    load: Option<OpId>,
    /// The explicit `tile.cp_async` it replaces.
    copy: Option<OpId>,
}

pub(crate) fn stage_copies(f: &mut Func, config: &Config) -> Result<(), LowerError> {
    let mut allocs: Vec<OpId> = Vec::new();
    let body = f.body.clone();
    f.body = stage_region(f, config, body, &mut allocs, false)?;
    // Staging buffers are allocated once, at the top of the kernel.
    let mut ops = allocs;
    ops.extend(std::mem::take(&mut f.body.ops));
    f.body.ops = ops;
    Ok(())
}

/// The staging buffer of a load: `load` marked by `crate::wgmma` is read by a `wgmma`
/// matrix descriptor, and takes its swizzle.
fn smem_for(dims: &[Dim], dtype: DType, stages: u32, load: &Op) -> SmemType {
    // XOR-swizzle rows of at least 64 bytes (ldmatrix reads 16-byte rows of 8 lanes).
    let row_bytes = dims.last().and_then(Dim::as_const).unwrap_or(0) * dtype.bytes() as i64;
    let swizzle = if row_bytes >= 64 && dtype.bits() <= 16 { Swizzle::Xor } else { Swizzle::None };
    let smem = SmemType { dims: dims.to_vec(), dtype, swizzle, pad: 0, stages };
    if let Some(attr) = load.attr(crate::wgmma::DESCRIPTOR_LAYOUT) {
        crate::wgmma::descriptor_layout(&smem, attr.as_int().unwrap_or(128))
    } else {
        smem
    }
}

fn stage_region(
    f: &mut Func,
    config: &Config,
    region: Region,
    allocs: &mut Vec<OpId>,
    in_loop: bool,
) -> Result<Region, LowerError> {
    let mut ops = Vec::new();
    for id in region.ops {
        let op = f.op(id);
        let kind = op.kind;
        let staged_loop =
            kind == OpKind::For && op.str_attr("kind") == Some("sequential") && op.int_attr("stages").is_some();
        // A staged load inside a loop is the loop's pipelining to do, not this walk's.
        let staged_load_here = kind == OpKind::Load && op.str_attr("staging") == Some("smem") && !in_loop;
        if !staged_loop && !staged_load_here {
            // Not rewritten here: only its regions are walked (taken out and put back).
            let mut new_regions = Vec::new();
            for r in std::mem::take(&mut f.op_mut(id).regions) {
                new_regions.push(stage_region(f, config, r, allocs, in_loop || kind == OpKind::For)?);
            }
            f.op_mut(id).regions = new_regions;
            ops.push(id);
            continue;
        }
        if staged_loop {
            ops.extend(pipeline_loop(f, config, id, allocs, in_loop)?);
            continue;
        }
        // A staged load outside a loop: one copy, waited for at once.
        let op = f.op(id).clone();
        let Type::View(view) = f.ty(op.operands[0]).clone() else { unreachable!() };
        let (alloc, buf) = new_op(
            f,
            OpKind::AllocShared,
            vec![],
            Type::Smem(smem_for(&view.dims, view.dtype, 1, &op)),
            vec![("staging", Attr::Bool(true))],
            &op.loc,
        );
        allocs.push(alloc);
        ops.push(push_op(f, OpKind::CpAsync, vec![buf, op.operands[0]], vec![], vec![], &op.loc));
        ops.push(push_op(f, OpKind::AsyncCommit, vec![], vec![], vec![], &op.loc));
        ops.push(push_op(f, OpKind::AsyncWait, vec![], vec![], vec![("pending", Attr::Int(0))], &op.loc));
        ops.push(push_op(f, OpKind::Barrier, vec![], vec![], vec![], &op.loc));
        let load = f.op_mut(id);
        load.kind = OpKind::LoadShared;
        load.operands = vec![buf];
        load.attrs.retain(|(k, _)| !matches!(*k, "staging" | "stages" | crate::wgmma::DESCRIPTOR_LAYOUT));
        ops.push(id);
    }
    Ok(Region { args: region.args, ops })
}

/// Pipelines the copies of one sequential loop; returns the ops replacing it.
fn pipeline_loop(
    f: &mut Func,
    config: &Config,
    loop_id: OpId,
    allocs: &mut Vec<OpId>,
    in_loop: bool,
) -> Result<Vec<OpId>, LowerError> {
    let lp = f.op(loop_id);
    let stages = lp.int_attr("stages").unwrap_or(1).max(1) as u32;
    let loc = lp.loc.clone();
    let (lo, step) = (lp.operands[0], lp.operands[2]);
    let iv = lp.regions[0].args[0];
    let body_ops: Vec<OpId> = lp.regions[0].ops.clone();
    let in_body: HashSet<OpId> = body_ops.iter().copied().collect();
    // The defining op of each value the body's own ops define: all that the copies
    // recompute. Not `f.definitions()`: while `stage_region` walks an enclosing loop
    // (`for n0 in tile.range` around this one), that loop's region is taken out of the
    // function, and this body with it.
    let mut defs: Vec<Option<OpId>> = vec![None; f.values.len()];
    for &id in &body_ops {
        for &r in &f.op(id).results {
            defs[r.0 as usize] = Some(id);
        }
    }
    // The copies this loop performs: implicit (staged loads) and explicit (cp_async
    // into buffers allocated outside the loop).
    let mut staged: Vec<Staged> = Vec::new();
    for &id in &body_ops {
        let op = f.op(id);
        match op.kind {
            OpKind::Load if op.str_attr("staging") == Some("smem") => {
                let Type::View(view) = f.ty(op.operands[0]) else { continue };
                let (smem, view_value) = (smem_for(&view.dims, view.dtype, stages, op), op.operands[0]);
                let (alloc, buf) =
                    new_op(f, OpKind::AllocShared, vec![], Type::Smem(smem), vec![("staging", Attr::Bool(true))], &loc);
                allocs.push(alloc);
                staged.push(Staged { buffer: buf, view: view_value, load: Some(id), copy: None });
            }
            OpKind::CpAsync => {
                let buf = op.operands[0];
                let outside = defs[buf.0 as usize].is_none_or(|d| !in_body.contains(&d));
                if outside {
                    staged.push(Staged { buffer: buf, view: op.operands[1], load: None, copy: Some(id) });
                }
            }
            _ => {}
        }
    }
    if staged.is_empty() {
        return Ok(vec![loop_id]);
    }
    // Explicit buffers become rings too.
    for s in &staged {
        if s.copy.is_some() {
            if let Type::Smem(t) = f.ty(s.buffer).clone() {
                f.values[s.buffer.0 as usize].ty = Type::Smem(SmemType { stages, ..t });
            }
        }
    }
    // The copies of one iteration: every staged view, recomputed for the induction
    // value `iv_at`, copied asynchronously into slot `slot` of its ring; then a commit.
    let copies = |f: &mut Func, iv_at: ValueId, slot: ValueId| -> Vec<OpId> {
        let mut ops = Vec::new();
        for st in &staged {
            let (chain, view) = clone_chain(f, &defs, &in_body, st.view, iv, iv_at);
            ops.extend(chain);
            let (slot_op, slot_view) = slot_of(f, st.buffer, slot, &loc);
            ops.push(slot_op);
            ops.push(push_op(f, OpKind::CpAsync, vec![slot_view, view], vec![], vec![], &loc));
        }
        ops.push(push_op(f, OpKind::AsyncCommit, vec![], vec![], vec![], &loc));
        ops
    };
    let mut out = Vec::new();
    // Prologue: iterations 0 .. stages-2 into slots 0 .. stages-2.
    for s in 0..stages.saturating_sub(1) {
        let (c_op, c) = const_index(f, s as i64, &loc);
        let (m_op, off) = new_op(f, OpKind::Mul, vec![c, step], Type::Index, vec![], &loc);
        let (a_op, iv_s) = new_op(f, OpKind::Add, vec![lo, off], Type::Index, vec![], &loc);
        out.extend([c_op, m_op, a_op]);
        out.extend(copies(f, iv_s, c));
    }
    // The body: wait for this iteration's slot, barrier, issue the copy `stages-1`
    // iterations ahead into the slot freed by the previous iteration, read this slot.
    let mut new_body = Vec::new();
    let (ds_op, dist) = const_index(f, stages as i64 - 1, &loc);
    let (sub_op, rel) = new_op(f, OpKind::Sub, vec![iv, lo], Type::Index, vec![], &loc);
    let (it_op, iter) = new_op(f, OpKind::FloorDiv, vec![rel, step], Type::Index, vec![], &loc);
    let (ns_op, nstages) = const_index(f, stages as i64, &loc);
    let (slot_op, slot_idx) = new_op(f, OpKind::Rem, vec![iter, nstages], Type::Index, vec![], &loc);
    new_body.extend([ds_op, sub_op, it_op, ns_op, slot_op]);
    new_body.push(push_op(
        f,
        OpKind::AsyncWait,
        vec![],
        vec![],
        vec![("pending", Attr::Int((stages as i64 - 2).max(0)))],
        &loc,
    ));
    new_body.push(push_op(f, OpKind::Barrier, vec![], vec![], vec![], &loc));
    if stages > 1 {
        let (m_op, ahead) = new_op(f, OpKind::Mul, vec![dist, step], Type::Index, vec![], &loc);
        let (a_op, iv_next) = new_op(f, OpKind::Add, vec![iv, ahead], Type::Index, vec![], &loc);
        let (ia_op, iter_next) = new_op(f, OpKind::Add, vec![iter, dist], Type::Index, vec![], &loc);
        let (r_op, slot_next) = new_op(f, OpKind::Rem, vec![iter_next, nstages], Type::Index, vec![], &loc);
        new_body.extend([m_op, a_op, ia_op, r_op]);
        new_body.extend(copies(f, iv_next, slot_next));
    } else {
        // One stage: copy this iteration's data (views recomputed from the induction
        // variable), then wait for it. The barrier at the end of the previous iteration
        // (below) makes the overwrite safe.
        let wait_at = new_body.len() - 2;
        let mut head: Vec<OpId> = new_body[..wait_at].to_vec();
        head.extend(copies(f, iv, slot_idx));
        head.extend(new_body[wait_at..].iter().copied());
        new_body = head;
    }
    // This iteration's slot of each buffer, read by the loads (and the ops that read
    // explicit buffers).
    let mut slot_of_buffer: HashMap<ValueId, ValueId> = HashMap::default();
    for st in &staged {
        let (so, slot) = slot_of(f, st.buffer, slot_idx, &loc);
        new_body.push(so);
        slot_of_buffer.insert(st.buffer, slot);
    }
    let skip: HashSet<OpId> = staged.iter().filter_map(|s| s.copy).collect();
    let already: HashSet<OpId> = new_body.iter().copied().collect();
    for &id in &body_ops {
        if skip.contains(&id) || already.contains(&id) {
            continue;
        }
        if let Some(st) = staged.iter().find(|s| s.load == Some(id)) {
            let slot = slot_of_buffer[&st.buffer];
            let load = f.op_mut(id);
            load.kind = OpKind::LoadShared;
            load.operands = vec![slot];
            load.attrs.retain(|(k, _)| !matches!(*k, "staging" | "stages" | crate::wgmma::DESCRIPTOR_LAYOUT));
        } else {
            // Reads of explicit buffers use this iteration's slot; the user's first
            // barrier is subsumed by the wait + barrier above.
            if !slot_of_buffer.is_empty() {
                for v in &mut f.op_mut(id).operands {
                    if let Some(&slot) = slot_of_buffer.get(v) {
                        *v = slot;
                    }
                }
            }
        }
        new_body.push(id);
    }
    if stages == 1 {
        // Before the next iteration overwrites the buffers, every thread is done reading.
        let at = new_body.len() - 1;
        let barrier = push_op(f, OpKind::Barrier, vec![], vec![], vec![("pipeline", Attr::Bool(true))], &loc);
        new_body.insert(at, barrier);
    }
    let _ = config;
    f.op_mut(loop_id).regions[0].ops = new_body;
    f.op_mut(loop_id).set_attr("pipelined", Attr::Int(stages as i64));
    out.push(loop_id);
    // Drain the copies issued for iterations past the end.
    out.push(push_op(f, OpKind::AsyncWait, vec![], vec![], vec![("pending", Attr::Int(0))], &loc));
    if in_loop {
        // An enclosing loop runs this one again, and its prologue overwrites the ring:
        // every thread must be done reading the last iterations' slots first.
        out.push(push_op(f, OpKind::Barrier, vec![], vec![], vec![("pipeline", Attr::Bool(true))], &loc));
    }
    Ok(out)
}

/// `tile.smem_slot %buf, %index` (a ring buffer's slot; the buffer itself for one stage).
fn slot_of(f: &mut Func, buffer: ValueId, index: ValueId, loc: &Loc) -> (OpId, ValueId) {
    let ty = match f.ty(buffer).clone() {
        Type::Smem(s) => Type::Smem(SmemType { stages: 1, ..s }),
        other => other,
    };
    new_op(f, OpKind::SmemSlot, vec![buffer, index], ty, vec![], loc)
}

/// Clones the ops (inside the loop body) that compute `root` from the induction
/// variable `iv`, with `iv` replaced by `replacement`; returns them and the new root.
fn clone_chain(
    f: &mut Func,
    defs: &[Option<OpId>],
    in_body: &HashSet<OpId>,
    root: ValueId,
    iv: ValueId,
    replacement: ValueId,
) -> (Vec<OpId>, ValueId) {
    let mut map: HashMap<ValueId, ValueId> = std::iter::once((iv, replacement)).collect();
    let mut out = Vec::new();
    fn visit(
        f: &mut Func,
        defs: &[Option<OpId>],
        in_body: &HashSet<OpId>,
        v: ValueId,
        map: &mut HashMap<ValueId, ValueId>,
        out: &mut Vec<OpId>,
    ) -> ValueId {
        if let Some(&m) = map.get(&v) {
            return m;
        }
        let Some(d) = defs[v.0 as usize].filter(|d| in_body.contains(d)) else { return v };
        let (kind, old_operands, old_results) = {
            let op = f.op(d);
            (op.kind, op.operands.clone(), op.results.clone())
        };
        let operands: Vec<ValueId> = old_operands.iter().map(|&o| visit(f, defs, in_body, o, map, out)).collect();
        let results: Vec<ValueId> = old_results.iter().map(|&r| f.new_value(f.ty(r).clone(), None)).collect();
        for (&old, &new) in old_results.iter().zip(&results) {
            map.insert(old, new);
        }
        let (attrs, loc) = (f.op(d).attrs.clone(), f.op(d).loc.clone());
        out.push(push_op(f, kind, operands, results, attrs, &loc));
        map[&v]
    }
    let new_root = visit(f, defs, in_body, root, &mut map, &mut out);
    (out, new_root)
}

/// Explicit copies outside pipelined loops: a commit after each run of copies, and a
/// wait before each barrier (the barrier's contract is "copies visible to the block").
pub(crate) fn commit_explicit_copies(f: &mut Func) {
    // It commits copies and waits for them before barriers: nothing to do without either.
    if !f.has_op_of(&[OpKind::CpAsync, OpKind::Barrier]) {
        return;
    }
    // Inside a pipelined loop the copies are waited for per stage; a full wait before
    // the user's barriers would serialize the ring.
    fn visit(f: &mut Func, region: Region, in_pipeline: bool) -> Region {
        let mut ops = Vec::new();
        let mut pending_copy = false;
        for id in region.ops {
            let kind = f.op(id).kind;
            if pending_copy && kind != OpKind::CpAsync && kind != OpKind::SmemSlot && kind != OpKind::View {
                let loc = f.op(id).loc.clone();
                if kind != OpKind::AsyncCommit {
                    ops.push(push_op(f, OpKind::AsyncCommit, vec![], vec![], vec![], &loc));
                }
                pending_copy = false;
            }
            if kind == OpKind::Barrier {
                let prev_is_wait = ops.last().is_some_and(|&p| f.op(p).kind == OpKind::AsyncWait);
                if !prev_is_wait && !in_pipeline {
                    let loc = f.op(id).loc.clone();
                    ops.push(push_op(f, OpKind::AsyncWait, vec![], vec![], vec![("pending", Attr::Int(0))], &loc));
                }
            }
            if kind == OpKind::CpAsync {
                pending_copy = true;
            }
            let pipelined = in_pipeline || f.op(id).int_attr("pipelined").is_some();
            let regions = f.op(id).regions.clone();
            let new_regions: Vec<Region> = regions.into_iter().map(|r| visit(f, r, pipelined)).collect();
            f.op_mut(id).regions = new_regions;
            ops.push(id);
        }
        Region { args: region.args, ops }
    }
    let body = f.body.clone();
    f.body = visit(f, body, false);
}

/// `tile.transpose(tile.load_shared %buf)` reads the buffer transposed: one load with
/// `transpose = true` (for a dot operand, `ldmatrix` without a register shuffle).
pub(crate) fn fold_transposed_loads(f: &mut Func) {
    if !f.has_op_of(&[OpKind::Transpose]) {
        return;
    }
    let defs = f.definitions();
    // Uses of each value, and how many of them are transposes: a load that only
    // transposes read (one, or one per dot that reads `b.T`) folds into each of them.
    let mut uses = vec![0u32; f.values.len()];
    let mut transposed_uses = vec![0u32; f.values.len()];
    for id in f.walk() {
        for &o in &f.op(id).operands {
            uses[o.0 as usize] += 1;
            if f.op(id).kind == OpKind::Transpose {
                transposed_uses[o.0 as usize] += 1;
            }
        }
    }
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::Transpose {
            continue;
        }
        let src = op.operands[0];
        let Some(load) = defs[src.0 as usize] else { continue };
        if f.op(load).kind != OpKind::LoadShared || uses[src.0 as usize] != transposed_uses[src.0 as usize] {
            continue;
        }
        // The transpose becomes the load (same result); the old load is dead.
        let buffer = f.op(load).operands[0];
        let t = f.op_mut(id);
        t.kind = OpKind::LoadShared;
        t.operands = vec![buffer];
        t.set_attr("transpose", Attr::Bool(true));
    }
}

/// A `wgmma` dot reads its operands where they are, in shared memory: its operands
/// become the slots the `tile.load_shared`s read (which `remove-dead-ops` then drops
/// unless something else uses their tiles). `crate::wgmma` admitted only operands that
/// are staged loads or reads of the kernel's own buffers, so anything else here is an
/// internal error.
pub(crate) fn keep_wgmma_operands_in_shared(f: &mut Func) -> Result<(), LowerError> {
    if !f.has_op_of(&[OpKind::Dot]) {
        return Ok(());
    }
    let defs = f.definitions();
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::Dot || op.str_attr("instr") != Some("wgmma") {
            continue;
        }
        let mut operands = op.operands.clone();
        // A in registers stays a tile; B is K-major (A M-major) exactly when it is read
        // transposed.
        let first_in_shared = if op.attr(crate::wgmma::A_IN_REGISTERS).is_some() { 1 } else { 0 };
        for (i, operand) in operands.iter_mut().enumerate().take(2).skip(first_in_shared) {
            let load = defs[operand.0 as usize].map(|d| f.op(d));
            let transposed = crate::wgmma::reads_transposed(op, i);
            match load {
                Some(l) if l.kind == OpKind::LoadShared && l.attr("transpose").is_some() == transposed => {
                    *operand = l.operands[0]
                }
                _ => {
                    return Err(LowerError {
                        message: "internal error: a `wgmma` operand is not a read of a shared buffer in Tile IR".into(),
                        range: op.loc.range,
                    })
                }
            }
        }
        f.op_mut(id).operands = operands;
    }
    Ok(())
}

/// Removes ops without effects whose results nobody uses (views and index arithmetic
/// the pipeliner re-created), to a fixpoint.
pub(crate) fn remove_dead_ops(f: &mut Func) {
    // A worklist instead of repeated sweeps: removing an op can make its operands'
    // definitions dead, and a chain of n such ops would take n sweeps of the function.
    let ops = f.walk();
    let mut uses = vec![0u32; f.values.len()];
    for &id in &ops {
        for &o in &f.op(id).operands {
            uses[o.0 as usize] += 1;
        }
    }
    let removable = |f: &Func, id: OpId, uses: &[u32]| {
        let op = f.op(id);
        !op.kind.has_effect()
            && op.regions.is_empty()
            && !op.results.is_empty()
            && !matches!(op.kind, OpKind::AllocShared)
            && op.results.iter().all(|r| uses[r.0 as usize] == 0)
    };
    let defs = f.definitions();
    let mut dead = vec![false; f.ops.len()];
    let mut any_dead = false;
    let mut work: Vec<OpId> = ops.iter().copied().filter(|&id| removable(f, id, &uses)).collect();
    while let Some(id) = work.pop() {
        if std::mem::replace(&mut dead[id.0 as usize], true) {
            continue;
        }
        any_dead = true;
        for &o in &f.op(id).operands {
            uses[o.0 as usize] -= 1;
            if uses[o.0 as usize] == 0 {
                if let Some(def) = defs[o.0 as usize] {
                    if !dead[def.0 as usize] && removable(f, def, &uses) {
                        work.push(def);
                    }
                }
            }
        }
    }
    if !any_dead {
        return;
    }
    fn prune(f: &mut Func, region: Region, dead: &[bool]) -> Region {
        let mut ops = Vec::with_capacity(region.ops.len());
        for id in region.ops {
            if dead[id.0 as usize] {
                continue;
            }
            let regions = std::mem::take(&mut f.op_mut(id).regions);
            let new_regions: Vec<Region> = regions.into_iter().map(|r| prune(f, r, dead)).collect();
            f.op_mut(id).regions = new_regions;
            ops.push(id);
        }
        Region { args: region.args, ops }
    }
    let body = std::mem::take(&mut f.body);
    f.body = prune(f, body, &dead);
}

// ----- layouts -------------------------------------------------------------------------

pub(crate) fn assign_layouts(f: &mut Func, config: &Config) {
    let warps = config.warps();
    let n = f.values.len();
    let mut layout: Vec<Option<Layout>> = vec![None; n];
    let is_tile = |f: &Func, v: ValueId| matches!(f.ty(v), Type::Tile(_));
    let shape = |f: &Func, v: ValueId| f.ty(v).const_dims().unwrap_or_default();
    let ops = f.walk();
    // Anchors: dots.
    for &id in &ops {
        let op = f.op(id);
        if op.kind != OpKind::Dot {
            continue;
        }
        if op.str_attr("instr") == Some("wgmma") {
            // B stays in shared memory; A too, unless it is in registers, where it takes
            // the accumulator's fragment layout (which is the A fragment, per k16 step).
            let groups = op.int_attr("warpgroups").unwrap_or(1).max(1) as u32;
            let across_n = op.int_attr(crate::wgmma::ACROSS_N).unwrap_or(1).max(1) as u32;
            let acc = Layout::Wgmma { warpgroups: groups, across_n };
            if op.attr(crate::wgmma::A_IN_REGISTERS).is_some() {
                layout[op.operands[0].0 as usize].get_or_insert(acc.clone());
            }
            layout[op.operands[2].0 as usize].get_or_insert(acc.clone());
            layout[op.results[0].0 as usize] = Some(acc);
            continue;
        }
        let fma = op.str_attr("instr") == Some("fma");
        let w = match op.attr("warps") {
            Some(Attr::Ints(w)) if w.len() == 2 => [w[0] as u32, w[1] as u32],
            _ => match Layout::mma_for(shape(f, op.results[0])[0], shape(f, op.results[0])[1], warps) {
                Layout::Mma { warps } => warps,
                _ => unreachable!(),
            },
        };
        let acc = if fma {
            let s = shape(f, op.results[0]);
            Layout::blocked_for(&s, warps, 1)
        } else {
            Layout::Mma { warps: w }
        };
        let kw = f.ty(op.operands[0]).dtype().map_or(2, |d| if d.bits() == 8 { 4 } else { 2 });
        layout[op.operands[2].0 as usize].get_or_insert(acc.clone());
        layout[op.results[0].0 as usize] = Some(acc.clone());
        if !fma {
            for (i, &o) in op.operands[..2].iter().enumerate() {
                layout[o.0 as usize] =
                    Some(Layout::DotOperand { op: i as u8, parent: Box::new(acc.clone()), k_width: kw });
            }
        }
    }
    // Propagate to a fixpoint along layout-preserving edges.
    let defs = f.definitions();
    // The ops whose results join their regions' yields (loop-carried values, branches).
    let joins: Vec<OpId> = ops
        .iter()
        .copied()
        .filter(|&id| matches!(f.op(id).kind, OpKind::For | OpKind::If) && !f.op(id).results.is_empty())
        .collect();
    let yields_of = |region: &Region| -> Vec<ValueId> {
        region
            .ops
            .last()
            .map(|&l| f.op(l))
            .filter(|o| o.kind == OpKind::Yield)
            .map(|o| o.operands.clone())
            .unwrap_or_default()
    };
    let mut changed = true;
    let mut rounds = 0;
    while changed && rounds < 16 {
        changed = false;
        rounds += 1;
        let mut set = |v: ValueId, l: Layout, layout: &mut Vec<Option<Layout>>| {
            if layout[v.0 as usize].is_none() {
                layout[v.0 as usize] = Some(l);
                changed = true;
            }
        };
        for &id in &ops {
            let op = f.op(id);
            match op.kind {
                k if (k.is_elementwise() && k != OpKind::Cast) || k == OpKind::Select || k == OpKind::CausalMask => {
                    let tiles = || op.operands.iter().chain(&op.results).copied().filter(|&v| is_tile(f, v));
                    // Layouts are cloned only when a tile of the op still lacks one: this
                    // runs every round over every op of every autotune candidate.
                    if tiles().all(|v| layout[v.0 as usize].is_some()) {
                        continue;
                    }
                    if let Some(l) = tiles()
                        .find_map(|v| layout[v.0 as usize].clone())
                        .filter(|l| !matches!(l, Layout::DotOperand { .. }))
                    {
                        for v in tiles() {
                            set(v, l.clone(), &mut layout);
                        }
                    }
                }
                OpKind::Cast => {
                    let (a, r) = (op.operands[0], op.results[0]);
                    let uniform_done =
                        op.operands.get(1).is_none_or(|&u| !is_tile(f, u) || layout[u.0 as usize].is_some());
                    if layout[a.0 as usize].is_some() && layout[r.0 as usize].is_some() && uniform_done {
                        continue;
                    }
                    if let Some(l) = layout[r.0 as usize].clone().filter(|l| !matches!(l, Layout::DotOperand { .. })) {
                        set(a, l, &mut layout);
                    } else if let Some(l) = layout[a.0 as usize].clone() {
                        set(r, l, &mut layout);
                    }
                    // A stochastic rounding's uniform tile lives where its operand does.
                    if let (Some(&u), Some(l)) = (op.operands.get(1), layout[a.0 as usize].clone()) {
                        if is_tile(f, u) && !matches!(l, Layout::DotOperand { .. }) {
                            set(u, l, &mut layout);
                        }
                    }
                }
                OpKind::Reduce => {
                    let axis = op.int_attr("axis").unwrap_or(0) as u32;
                    if layout[op.results[0].0 as usize].is_some() {
                        continue;
                    }
                    if let Some(l) = layout[op.operands[0].0 as usize].clone() {
                        set(op.results[0], Layout::Slice { dim: axis, parent: Box::new(l) }, &mut layout);
                    }
                }
                OpKind::ExpandDims => {
                    let axis = op.int_attr("axis").unwrap_or(0) as u32;
                    let (a, r) = (op.operands[0], op.results[0]);
                    if layout[a.0 as usize].is_some() && layout[r.0 as usize].is_some() {
                        continue;
                    }
                    if let Some(l) = layout[r.0 as usize].clone() {
                        set(a, Layout::Slice { dim: axis, parent: Box::new(l) }, &mut layout);
                    } else if let Some(Layout::Slice { dim, parent }) = layout[a.0 as usize].clone() {
                        if dim == axis {
                            set(r, *parent, &mut layout);
                        }
                    }
                }
                OpKind::Broadcast => {
                    // The operand (with size-1 dims) lives in the same layout.
                    let (a, r) = (op.operands[0], op.results[0]);
                    if layout[a.0 as usize].is_some() && layout[r.0 as usize].is_some() {
                        continue;
                    }
                    if let Some(l) = layout[r.0 as usize].clone() {
                        set(a, l, &mut layout);
                    } else if let Some(l) = layout[a.0 as usize].clone() {
                        set(r, l, &mut layout);
                    }
                }
                OpKind::Store | OpKind::Scatter => {}
                _ => {}
            }
        }
        // Loop-carried values: init, region argument, yield and result agree.
        for &id in &joins {
            let op = f.op(id);
            if op.kind != OpKind::For {
                continue;
            }
            let regions = &op.regions;
            let yields = yields_of(&regions[0]);
            for (i, &res) in op.results.iter().enumerate() {
                let group = [op.operands[3 + i], regions[0].args[1 + i], res, *yields.get(i).unwrap_or(&res)];
                if group.iter().all(|&v| !is_tile(f, v) || layout[v.0 as usize].is_some()) {
                    continue;
                }
                if let Some(l) = group.iter().find_map(|v| layout[v.0 as usize].clone()) {
                    for v in group {
                        if is_tile(f, v) {
                            set(v, l.clone(), &mut layout);
                        }
                    }
                }
            }
        }
        for &id in &joins {
            let op = f.op(id);
            if op.kind != OpKind::If {
                continue;
            }
            let regions = &op.regions;
            let (a, b) = (yields_of(&regions[0]), yields_of(&regions[1]));
            for (i, &res) in op.results.iter().enumerate() {
                let group = [res, *a.get(i).unwrap_or(&res), *b.get(i).unwrap_or(&res)];
                if group.iter().all(|&v| !is_tile(f, v) || layout[v.0 as usize].is_some()) {
                    continue;
                }
                if let Some(l) = group.iter().find_map(|v| layout[v.0 as usize].clone()) {
                    for v in group {
                        if is_tile(f, v) {
                            set(v, l.clone(), &mut layout);
                        }
                    }
                }
            }
        }
        // Tiles still without a layout after a round: the first one defined gets the
        // default blocked layout for its shape, then propagation continues.
        if !changed {
            if let Some(v) = (0..n)
                .map(|i| ValueId(i as u32))
                .find(|&v| is_tile(f, v) && layout[v.0 as usize].is_none() && defs[v.0 as usize].is_some())
            {
                let s = shape(f, v);
                layout[v.0 as usize] = Some(Layout::blocked_for(&s, warps, config.vector().min(4)));
                changed = true;
            }
        }
    }
    // Any remaining (region arguments of unused loops, ...) get the default.
    for (i, l) in layout.iter_mut().enumerate() {
        let v = ValueId(i as u32);
        if l.is_none() && is_tile(f, v) {
            *l = Some(Layout::blocked_for(&shape(f, v), warps, config.vector().min(4)));
        }
    }
    // Casts keep their operand's layout; a consumer needing another one converts.
    for &id in &ops {
        let op = f.op(id);
        if op.kind == OpKind::Cast && is_tile(f, op.results[0]) {
            layout[op.results[0].0 as usize] = layout[op.operands[0].0 as usize].clone();
        }
    }
    for (i, l) in layout.into_iter().enumerate() {
        if let (Some(l), Type::Tile(t)) = (l, &mut f.values[i].ty) {
            t.layout = Some(l);
        }
    }
}

/// Where an op's tile operands disagree with what it needs, convert them.
pub(crate) fn insert_conversions(f: &mut Func) {
    fn visit(f: &mut Func, region: Region) -> Region {
        let mut ops = Vec::with_capacity(region.ops.len());
        for id in region.ops {
            // The op's regions are visited (and put back) below; nothing else of it is
            // cloned, as this runs over every op of every autotune candidate.
            let regions = std::mem::take(&mut f.op_mut(id).regions);
            let op = f.op(id);
            let wanted: Vec<Option<Layout>> = match op.kind {
                k if (k.is_elementwise() && k != OpKind::Cast) || k == OpKind::Select || k == OpKind::CausalMask => {
                    let target = op.results.first().and_then(|&r| f.ty(r).as_tile()).and_then(|t| t.layout.clone());
                    op.operands.iter().map(|&o| f.ty(o).as_tile().and(target.clone())).collect()
                }
                OpKind::Dot => {
                    let r = f.ty(op.results[0]).as_tile().and_then(|t| t.layout.clone());
                    match &r {
                        Some(acc @ Layout::Mma { .. }) => {
                            let kw = f.ty(op.operands[0]).dtype().map_or(2, |d| if d.bits() == 8 { 4 } else { 2 });
                            vec![
                                Some(Layout::DotOperand { op: 0, parent: Box::new(acc.clone()), k_width: kw }),
                                Some(Layout::DotOperand { op: 1, parent: Box::new(acc.clone()), k_width: kw }),
                                r.clone(),
                            ]
                        }
                        // A `wgmma` A operand in registers is in the accumulator's layout.
                        Some(Layout::Wgmma { .. }) if f.ty(op.operands[0]).as_tile().is_some() => {
                            vec![r.clone(), None, r.clone()]
                        }
                        _ => vec![None, None, r.clone()],
                    }
                }
                // Masks (and scatter indices) follow the data they guard.
                OpKind::Store => {
                    let data = op.operands.get(1).and_then(|&v| f.ty(v).as_tile()).and_then(|t| t.layout.clone());
                    vec![None, None, data]
                }
                OpKind::Load => {
                    let data = f.ty(op.results[0]).as_tile().and_then(|t| t.layout.clone());
                    vec![None, data]
                }
                OpKind::Scatter | OpKind::Gather => {
                    let data = match op.kind {
                        OpKind::Scatter => op.operands.get(2).and_then(|&v| f.ty(v).as_tile()),
                        _ => f.ty(op.results[0]).as_tile(),
                    }
                    .and_then(|t| t.layout.clone());
                    let mut w = vec![None, data.clone()];
                    if op.kind == OpKind::Scatter {
                        w.push(None);
                    }
                    w.push(data);
                    w
                }
                // A stochastic rounding's uniform tile: in the layout of the value it rounds.
                OpKind::Cast if op.operands.len() == 2 => {
                    let x = f.ty(op.operands[0]).as_tile().and_then(|t| t.layout.clone());
                    vec![None, x]
                }
                OpKind::Yield => Vec::new(),
                _ => Vec::new(),
            };
            let converts = wanted.iter().enumerate().any(|(i, want)| {
                want.is_some() && op.operands.get(i).and_then(|&o| f.ty(o).as_tile()).is_some_and(|t| t.layout != *want)
            });
            if converts {
                let mut operands = op.operands.clone();
                let loc = op.loc.clone();
                for (i, want) in wanted.into_iter().enumerate() {
                    let (Some(want), Some(Type::Tile(t))) = (want, operands.get(i).map(|&o| f.ty(o).clone())) else {
                        continue;
                    };
                    if t.layout.as_ref() == Some(&want) {
                        continue;
                    }
                    let ty = Type::Tile(TileType { layout: Some(want), ..t });
                    let (conv, v) = new_op(f, OpKind::ConvertLayout, vec![operands[i]], ty, vec![], &loc);
                    ops.push(conv);
                    operands[i] = v;
                }
                f.op_mut(id).operands = operands;
            }
            let new_regions: Vec<Region> = regions.into_iter().map(|r| visit(f, r)).collect();
            f.op_mut(id).regions = new_regions;
            ops.push(id);
        }
        Region { args: region.args, ops }
    }
    let body = f.body.clone();
    f.body = visit(f, body);
}
