//! What a kernel needs to run: its shape symbols and scalar parameters, the dims it gets and its configuration.

use std::collections::BTreeMap;

use tessera_frontend::check::{fn_decorators, fn_signature, infer_function, FunctionKind, ScheduleValue, Ty};
use tessera_frontend::db::function_def;
use tessera_frontend::syntax::ast::{Expr, UnaryOp};
use tessera_frontend::{Db, FnKey};
use tessera_passes::session::overrides::dim_rejection;
use tessera_passes::{graph_ir, sched, Config, DEFAULT_SHAPE};

use super::{ErrorKind, LaunchError, DEFAULT_SIZE};

/// A scalar parameter of a kernel and the value its signature gives it.
#[derive(Clone, PartialEq, Debug)]
pub struct ScalarParam {
    pub name: String,
    /// The declared default (`eps: f32 = 1e-5`, `causal: bool = True`).
    pub default: Option<f64>,
}

/// What running a function needs, from its signature.
#[derive(Clone, PartialEq, Debug)]
pub struct KernelInfo {
    pub name: String,
    /// Every dim symbol of the signature, in order of appearance.
    pub symbols: Vec<String>,
    pub scalars: Vec<ScalarParam>,
    /// The schedule before any search: the fixed one, or the space's first configuration.
    pub base_schedule: ScheduleValue,
    pub schedule: tessera_frontend::check::KernelSchedule,
    /// Schedule keys the body reads through `ctx` (canonical names).
    pub reads: Vec<String>,
}

impl KernelInfo {
    /// The keys of `schedule` that matter to this kernel (read through `ctx`, consumed by
    /// the compiler, or searched), in the order people write them: BM, BN, BK, BD, the
    /// kernel's own keys, warps, stages, vector, swizzle.
    pub fn shown_keys(&self, schedule: &ScheduleValue) -> Vec<(String, tessera_frontend::check::KeyValue)> {
        use tessera_frontend::check::schedule::{canonical_key, consumed_by_compiler};
        let searched = |k: &str| self.schedule.space.iter().any(|s| canonical_key(&s.key) == k);
        let rank = |k: &str| match k {
            "BM" => 0,
            "BN" => 1,
            "BK" => 2,
            "BD" => 3,
            "warps" => 5,
            "stages" => 6,
            "vector" => 7,
            "swizzle" => 8,
            "mma" => 9,
            _ => 4,
        };
        let mut out: Vec<(String, tessera_frontend::check::KeyValue)> = schedule
            .values
            .iter()
            .filter(|(k, _)| self.reads.contains(k) || consumed_by_compiler(k) || searched(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.sort_by_key(|(k, _)| rank(k));
        out
    }
}

/// What a function needs to run, or why it cannot run.
pub fn kernel_info(db: &dyn Db, key: FnKey<'_>) -> Result<KernelInfo, LaunchError> {
    let name = key.name(db).to_string();
    let signature = fn_signature(db, key);
    match signature.kind {
        FunctionKind::Kernel => {}
        FunctionKind::Graph => {
            return Err(LaunchError::new(
                ErrorKind::NotRunnable,
                format!(
                    "`{name}` is a graph function (@jit): running graph functions (their fused kernels in \
                     sequence) is not supported yet; `tessera run` launches @kernel functions"
                ),
            ))
        }
        FunctionKind::Helper => {
            return Err(LaunchError::new(
                ErrorKind::NotRunnable,
                format!(
                    "`{name}` is a helper (no decorator): it is inlined into the kernels that call it and cannot be \
                     launched on its own"
                ),
            ))
        }
    }
    let decorators = fn_decorators(db, key);
    let schedule = decorators.schedule.clone().unwrap_or_default();
    let base_schedule = tessera_passes::queries::default_schedule(db, key);
    let inference = infer_function(db, key);
    let ast = function_def(db, key).clone();
    let mut scalars = Vec::new();
    for (i, p) in signature.params.iter().enumerate() {
        if !matches!(p.ty, Ty::Scalar(_) | Ty::Int(_) | Ty::Float(_) | Ty::Bool(_)) {
            continue;
        }
        let default = ast.as_ref().and_then(|a| a.params.get(i)).and_then(|ap| ap.default).and_then(|e| {
            literal(inference.type_of(e)).or_else(|| ast.as_ref().and_then(|a| ast_literal(&a.arena.exprs, e.0)))
        });
        scalars.push(ScalarParam { name: p.name.clone(), default });
    }
    let reads = inference.ctx_reads.clone();
    Ok(KernelInfo { name, symbols: signature.symbols.clone(), scalars, base_schedule, schedule, reads })
}

fn literal(ty: &Ty) -> Option<f64> {
    match ty {
        Ty::Float(Some(v)) => Some(v.get()),
        Ty::Int(Some(d)) => d.as_const().map(|v| v as f64),
        Ty::Bool(Some(b)) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

fn ast_literal(exprs: &[Expr], id: u32) -> Option<f64> {
    match exprs.get(id as usize)? {
        Expr::Int(v) => Some(*v as f64),
        Expr::Float(v) => Some(v.get()),
        Expr::Bool(b) => Some(f64::from(u8::from(*b))),
        Expr::Paren(inner) => ast_literal(exprs, inner.0),
        Expr::Unary { op: UnaryOp::Neg, operand } => ast_literal(exprs, operand.0).map(|v| -v),
        Expr::Unary { op: UnaryOp::Pos, operand } => ast_literal(exprs, operand.0),
        _ => None,
    }
}

/// Every shape symbol with its value.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ResolvedDims {
    /// In the signature's order.
    pub values: Vec<(String, i64)>,
    /// Symbols the user gave no value, with the value assumed.
    pub assumed: Vec<(String, i64)>,
}

impl ResolvedDims {
    pub fn map(&self) -> BTreeMap<String, i64> {
        self.values.iter().cloned().collect()
    }
}

/// Gives every shape symbol of the kernel a value: the user's (`given`), else
/// [`DEFAULT_SHAPE`] for symbols the configuration specializes (a head dim that tile dims
/// use: the value the kernel is checked with; `B` of a `"B*H"` dim read as a value) and
/// [`DEFAULT_SIZE`] for the others. A given symbol the kernel does not
/// have, or a value below 1, is an error naming it.
pub fn resolve_dims(
    db: &dyn Db,
    key: FnKey<'_>,
    info: &KernelInfo,
    given: &[(String, i64)],
) -> Result<ResolvedDims, LaunchError> {
    for (sym, value) in given {
        // The session's override rule, so `run` refuses what `lower` and the explorer do.
        if let Some(rejected) = dim_rejection(&info.name, Some(&info.schedule), &info.symbols, sym, *value) {
            return Err(LaunchError::input(rejected.as_option_error()));
        }
    }
    let graph = graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&info.name, "Graph IR", None, &e))?;
    let specialized = sched::specialized_symbols(&graph, &info.base_schedule);
    let mut out = ResolvedDims { values: Vec::new(), assumed: Vec::new() };
    let declared = tessera_passes::config::symbol_defaults(db, key);
    for sym in &info.symbols {
        // An int parameter the body uses as a size (`reps: int = 3` as a loop bound) is a
        // shape symbol too: its declared default is its value, not an assumed size.
        let value = match given.iter().rev().find(|(s, _)| s == sym) {
            Some((_, v)) => *v,
            None if declared.contains_key(sym) => declared[sym],
            None => {
                let v = if specialized.contains(sym) { DEFAULT_SHAPE } else { DEFAULT_SIZE };
                out.assumed.push((sym.clone(), v));
                v
            }
        };
        out.values.push((sym.clone(), value));
    }
    Ok(out)
}

/// The configuration of `schedule` at these dims: the shape symbols its tiles use take
/// their launch values.
pub fn config_for(
    db: &dyn Db,
    key: FnKey<'_>,
    schedule: ScheduleValue,
    dims: &BTreeMap<String, i64>,
) -> Result<Config, LaunchError> {
    let name = key.name(db).to_string();
    let graph = graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&name, "Graph IR", None, &e))?;
    Ok(tessera_passes::config::config_for(&graph, schedule, dims).0)
}
