//! Graph IR → Schedule IR for one configuration.
//!
//! Specialization: every schedule key (and every shape symbol a tile dim uses) becomes
//! a constant; `sched.param` ops become `arith.constant`s. Annotation: grid axes,
//! pipelining stages of sequential loops, implicit shared-memory staging of the loads
//! that feed tensor-core dots (GPU targets), the MMA warp arrangement of each dot, and
//! the epilogue ops fused after an accumulator loop.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};

use crate::error::LowerError;
use crate::ir::*;
use crate::target::Target;

use crate::config::SymbolValues;
pub use crate::config::{specialized_symbols, Config};

fn specialize_dims(dims: &[Dim], values: &SymbolValues) -> Vec<Dim> {
    dims.iter()
        .map(|d| match d.eval_numeric(&|s| values.get(s)) {
            Some(v) => Dim::Const(v),
            None => d.substitute(&|s| values.get(s).map(Dim::constant)),
        })
        .collect()
}

/// Substitutes the configuration into a type's dims, in place; dims that are already
/// constants (most of them) are left alone instead of rebuilt.
fn specialize_type(ty: &mut Type, values: &SymbolValues) {
    let dims = match ty {
        Type::Tile(TileType { dims, .. }) | Type::View(ViewType { dims, .. }) | Type::Smem(SmemType { dims, .. }) => {
            dims
        }
        _ => return,
    };
    if !dims.iter().all(Dim::is_const) {
        *dims = specialize_dims(dims, values);
    }
}

/// Types, view sizes and schedule keys take the configuration's values.
pub(crate) fn specialize(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    // Before anything is built per tile element.
    crate::bounds::check_tiles(f, config, target)?;
    let values = SymbolValues::new(config);
    for v in &mut f.values {
        specialize_type(&mut v.ty, &values);
    }
    // Attributes that carry dims (view sizes).
    for op in &mut f.ops {
        for (_, a) in &mut op.attrs {
            if let Attr::Dims(d) = a {
                if !d.iter().all(Dim::is_const) {
                    *d = specialize_dims(d, &values);
                }
            }
        }
    }
    for (_, a) in &mut f.attrs {
        if let Attr::Dims(d) = a {
            if !d.iter().all(Dim::is_const) {
                *d = specialize_dims(d, &values);
            }
        }
    }
    // Schedule keys become constants.
    for id in f.walk() {
        let op = f.op(id);
        if op.kind != OpKind::SchedParam {
            continue;
        }
        let key = op.str_attr("key").unwrap_or("").to_string();
        let value = config.key(&key);
        let Some(value) = value else {
            return Err(LowerError {
                message: format!("the configuration gives no value for `{key}`"),
                range: op.loc.range,
            });
        };
        let op = f.op_mut(id);
        op.kind = OpKind::Constant;
        op.attrs = vec![("value", Attr::Int(value)), ("key", Attr::Str(SmolStr::new(&key)))];
    }
    // Tile dims must all be known now.
    for (i, v) in f.values.iter().enumerate() {
        if let Type::Tile(t) = &v.ty {
            if let Some(d) = t.dims.iter().find(|d| !d.is_const()) {
                let at = f.walk().into_iter().find(|&o| f.op(o).results.contains(&ValueId(i as u32)));
                let range = at.map(|o| f.op(o).loc.range).unwrap_or(f.loc.range);
                return Err(LowerError {
                    message: format!(
                        "tile dim `{d}` is not known for this configuration: give its value (e.g. --dims {d}=64)"
                    ),
                    range,
                });
            }
        }
    }
    f.set_attr("config", Attr::Str(SmolStr::new(config.to_string())));
    f.set_attr("target", Attr::Str(SmolStr::new(target.name())));
    if target.is_gpu() {
        f.set_attr("warps", Attr::Int(config.warps() as i64));
        f.set_attr("threads", Attr::Int(config.warps() as i64 * 32));
    }
    Ok(())
}

/// `grid.parallel` loops get their axis (outermost = 0).
pub(crate) fn annotate_grid(f: &mut Func) {
    fn visit(f: &mut Func, region: Region, depth: i64) {
        for id in region.ops {
            let (kind, regions) = (f.op(id).kind, f.op(id).regions.clone());
            let next = if kind == OpKind::GridParallel {
                f.op_mut(id).set_attr("axis", Attr::Int(depth));
                depth + 1
            } else {
                depth
            };
            for r in regions {
                visit(f, r, next);
            }
        }
    }
    let body = f.body.clone();
    visit(f, body, 0);
}

/// Each `tile.dot` gets its MMA instruction shape and warp arrangement; under
/// `mma = "wgmma"` its warpgroups instead, or the reason it cannot (`crate::wgmma`).
pub(crate) fn annotate_dots(f: &mut Func, config: &Config, target: Target) -> Result<(), LowerError> {
    if !f.has_op_of(&[OpKind::Dot]) {
        return Ok(());
    }
    if config.mma() == tessera_frontend::check::MmaFamily::Wgmma {
        return crate::wgmma::select_wgmma(f, config, target);
    }
    // Row reductions and chained dots (attention's P @ V) want whole rows per warp.
    let rows_per_warp = f.walk().into_iter().any(|id| f.op(id).kind == OpKind::Reduce)
        || f.walk().into_iter().filter(|&id| f.op(id).kind == OpKind::Dot).count() > 1;
    for id in f.walk() {
        if f.op(id).kind != OpKind::Dot {
            continue;
        }
        let op = f.op(id).clone();
        let a = f.ty(op.operands[0]).clone();
        let c = f.ty(op.operands[2]).clone();
        let (Some(ad), Some(cd)) = (a.const_dims(), c.const_dims()) else { continue };
        let dtype = a.dtype().unwrap_or(DType::BF16);
        let k_instr = mma_sync_k(dtype);
        let (m, n, k) = (cd[0], cd[1], ad[1]);
        let instr = format!("m16n8k{k_instr}");
        let layout = if rows_per_warp {
            Layout::mma_for(m, n, config.warps())
        } else {
            Layout::mma_balanced(m, n, config.warps())
        };
        let warps = match layout {
            Layout::Mma { warps } => warps,
            _ => unreachable!(),
        };
        let op = f.op_mut(id);
        op.set_attr("instr", Attr::Str(SmolStr::new(&instr)));
        op.set_attr("warps", Attr::Ints(vec![warps[0] as i64, warps[1] as i64]));
        // Tensor cores take 16- and 8-bit operands; f32 (and wider) dots use FMAs.
        if m % 16 != 0 || n % 8 != 0 || k % k_instr != 0 || dtype.bits() > 16 {
            op.set_attr("instr", Attr::Str(SmolStr::new("fma")));
        }
    }
    Ok(())
}

/// Loads feeding a dot operand are staged through shared memory (GPU): inside a
/// sequential loop they are pipelined `stages` deep.
/// Where a dot operand comes from: the values from `operand` back through casts and
/// transposes (`operand` first), and the op that defines the last of them (a load is
/// what staging puts in shared memory). The one rule of [`annotate_staging`] and of the
/// analytic budget estimate (`analysis::analytic`).
pub(crate) fn dot_operand_source(f: &Func, defs: &[Option<OpId>], operand: ValueId) -> (Vec<ValueId>, Option<OpId>) {
    let mut chain = vec![operand];
    let mut v = operand;
    while let Some(d) = defs[v.0 as usize] {
        let def = f.op(d);
        match def.kind {
            OpKind::Transpose | OpKind::Cast => {
                v = def.operands[0];
                chain.push(v);
            }
            _ => return (chain, Some(d)),
        }
    }
    (chain, None)
}

/// K of the `mma.sync` instruction (m16n8kK) a dot of `dtype` operands takes: 32 for
/// 8-bit operands, 16 otherwise.
pub(crate) fn mma_sync_k(dtype: DType) -> i64 {
    if dtype.bits() == 8 {
        32
    } else {
        16
    }
}

pub(crate) fn annotate_staging(f: &mut Func, config: &Config) {
    // Staging comes from dot operands (and the loads of their transposing stages) and
    // explicit copies only.
    if !f.has_op_of(&[OpKind::Dot, OpKind::CpAsync]) {
        return;
    }
    let defs = f.definitions();
    // Values that flow into a dot operand (through casts and transposes).
    let mut staged: HashSet<ValueId> = HashSet::default();
    for id in f.walk() {
        let op = f.op(id);
        // An 8-bit B on its way to a `wgmma` dot through a transposing stage.
        if op.kind == OpKind::Load && op.attr(crate::wgmma::TRANSPOSE_STAGE).is_some() {
            staged.extend(op.results.first());
            continue;
        }
        if op.kind != OpKind::Dot || op.str_attr("instr") == Some("fma") {
            continue;
        }
        for &operand in &op.operands[..2] {
            let (chain, source) = dot_operand_source(f, &defs, operand);
            if source.is_some_and(|d| f.op(d).kind == OpKind::Load) {
                staged.extend(chain.last());
            }
        }
    }
    let mut loops_with_staging: HashSet<OpId> = HashSet::default();
    fn visit(
        f: &Func,
        region: &Region,
        enclosing: Option<OpId>,
        staged: &HashSet<ValueId>,
        out: &mut HashSet<OpId>,
        marks: &mut Vec<(OpId, Option<OpId>)>,
    ) {
        for &id in &region.ops {
            let op = f.op(id);
            if op.kind == OpKind::Load && op.results.iter().any(|r| staged.contains(r)) {
                marks.push((id, enclosing));
                if let Some(l) = enclosing {
                    out.insert(l);
                }
            }
            if op.kind == OpKind::CpAsync {
                if let Some(l) = enclosing {
                    out.insert(l);
                }
            }
            let inner = match op.kind {
                OpKind::For if op.str_attr("kind") == Some("sequential") => Some(id),
                OpKind::GridParallel => enclosing,
                _ => enclosing,
            };
            for r in &op.regions {
                visit(f, r, inner, staged, out, marks);
            }
        }
    }
    let mut marks = Vec::new();
    let body = f.body.clone();
    visit(f, &body, None, &staged, &mut loops_with_staging, &mut marks);
    let stages = config.stages();
    for (load, enclosing) in marks {
        let op = f.op_mut(load);
        op.set_attr("staging", Attr::Str("smem".into()));
        op.set_attr("stages", Attr::Int(if enclosing.is_some() { stages as i64 } else { 1 }));
    }
    for l in loops_with_staging {
        f.op_mut(l).set_attr("stages", Attr::Int(stages as i64));
    }
}

/// Ops between an accumulator loop's result and its store are the loop's epilogue:
/// they run once per tile program on the accumulator in registers.
pub(crate) fn annotate_epilogues(f: &mut Func) {
    let sequential = |op: &crate::ir::Op| op.kind == OpKind::For && op.str_attr("kind") == Some("sequential");
    if !f.ops.iter().any(sequential) {
        return;
    }
    let chains = |kind: OpKind| kind.is_elementwise() || matches!(kind, OpKind::Broadcast | OpKind::ExpandDims);
    // Whether each value reaches back to a sequential loop's result through elementwise
    // ops only; program order defines every value before its uses, so one pass does.
    let mut from_loop = vec![false; f.values.len()];
    let mut epilogue: Vec<OpId> = Vec::new();
    for id in f.walk() {
        let op = f.op(id);
        if sequential(op) {
            for &r in &op.results {
                from_loop[r.0 as usize] = true;
            }
            continue;
        }
        if !chains(op.kind) || !op.operands.iter().any(|v| from_loop[v.0 as usize]) {
            continue;
        }
        for &r in &op.results {
            from_loop[r.0 as usize] = true;
        }
        if matches!(f.ty(op.results[0]), Type::Tile(_)) {
            epilogue.push(id);
        }
    }
    for id in epilogue {
        f.op_mut(id).set_attr("fusion", Attr::Str("epilogue".into()));
    }
}

/// `acc + tile.dot(a, b)` becomes `tile.dot(a, b, acc)`: the product accumulates into
/// the accumulator's registers instead of a zeroed temporary of the same size.
pub(crate) fn fold_dot_accumulate(f: &mut Func) {
    if !f.has_op_of(&[OpKind::Dot]) {
        return;
    }
    let defs = f.definitions();
    let mut uses: HashMap<ValueId, usize> = HashMap::default();
    for id in f.walk() {
        for &o in &f.op(id).operands {
            *uses.entry(o).or_default() += 1;
        }
    }
    let is_zero = |v: ValueId| {
        defs[v.0 as usize].is_some_and(|d| {
            let op = f.op(d);
            op.kind == OpKind::Full && op.attr("value").and_then(Attr::as_float) == Some(0.0)
        })
    };
    // (add op, dot op, accumulator operand)
    let mut folds: Vec<(OpId, OpId, ValueId)> = Vec::new();
    for region_ops in regions_of(f) {
        for (i, &id) in region_ops.iter().enumerate() {
            let op = f.op(id);
            if op.kind != OpKind::Add || op.operands.len() != 2 {
                continue;
            }
            for (dot_side, acc_side) in [(1, 0), (0, 1)] {
                let (product, acc) = (op.operands[dot_side], op.operands[acc_side]);
                let Some(dot) = defs[product.0 as usize] else { continue };
                let dot_op = f.op(dot);
                let Some(pos) = region_ops[..i].iter().position(|&o| o == dot) else { continue };
                if dot_op.kind != OpKind::Dot
                    || uses.get(&product) != Some(&1)
                    || !dot_op.operands.get(2).is_some_and(|&z| is_zero(z))
                    || f.ty(acc) != f.ty(product)
                    || f.ty(op.results[0]) != f.ty(product)
                {
                    continue;
                }
                // The accumulator must exist when the dot runs.
                if region_ops[pos..].iter().any(|&o| f.op(o).results.contains(&acc)) {
                    continue;
                }
                folds.push((id, dot, acc));
                break;
            }
        }
    }
    if folds.is_empty() {
        return;
    }
    let mut removed = HashSet::default();
    for (add, dot, acc) in folds {
        let result = f.op(add).results[0];
        let dot_op = f.op_mut(dot);
        dot_op.operands[2] = acc;
        dot_op.results = vec![result];
        removed.insert(add);
    }
    fn strip(f: &mut Func, region: Region, removed: &HashSet<OpId>) -> Region {
        let mut ops = Vec::with_capacity(region.ops.len());
        for id in region.ops {
            if removed.contains(&id) {
                continue;
            }
            let regions = std::mem::take(&mut f.op_mut(id).regions);
            let regions = regions.into_iter().map(|r| strip(f, r, removed)).collect();
            f.op_mut(id).regions = regions;
            ops.push(id);
        }
        Region { args: region.args, ops }
    }
    let body = std::mem::take(&mut f.body);
    f.body = strip(f, body, &removed);
}

/// The op lists of every region, outermost first.
fn regions_of(f: &Func) -> Vec<Vec<OpId>> {
    let mut out = vec![f.body.ops.clone()];
    for id in f.walk() {
        for r in &f.op(id).regions {
            out.push(r.ops.clone());
        }
    }
    out
}
