//! The launch plan: Schedule IR launching generated kernels through a [`KernelExecutor`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tessera_frontend::{Db, FnKey};
use tessera_passes::ir::{Attr, Func, OpId, OpKind, Type, ValueId};
use tessera_passes::Target;

use crate::interp::{param_access, InterpError, Options};
use crate::tensor::{Arg, HostTensor};

use super::eval::{bind_params, eval_dims, host_op};
use super::values::{numel, Val};
use super::{GraphArg, R};

/// Runs one Tile IR kernel of a launch plan: the interpreter, the CPU JIT or a GPU.
pub trait KernelExecutor {
    /// Runs `tile_ir` over its whole grid on `args` (one per parameter); the tensors it
    /// writes are updated in `args`.
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String>;
}

impl KernelExecutor for Box<dyn KernelExecutor> {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        (**self).launch(tile_ir, args)
    }
}

impl<E: KernelExecutor + ?Sized> KernelExecutor for &mut E {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        (**self).launch(tile_ir, args)
    }
}

/// The Tile IR interpreter as a [`KernelExecutor`].
#[derive(Clone, Debug, Default)]
pub struct InterpExecutor {
    pub options: Options,
    /// Kernels launched so far.
    pub launches: usize,
}

impl KernelExecutor for InterpExecutor {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        self.launches += 1;
        crate::interp::run_kernel_with(tile_ir, args, &self.options).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// A value of the launch plan: a host scalar, or a view (dims) of a stored tensor.
#[derive(Clone, Debug)]
enum PlanVal {
    Host(Val),
    View { storage: usize, dims: Vec<usize> },
}

/// Runs the launch plan of the graph function `key` (its Schedule IR and generated
/// kernels, `tessera_passes::plan_module`) on `args`: host scalar math, buffers, views and
/// each `sched.kernel` launched through `executor` with the kernel's Tile IR for
/// `target` in its default configuration for the launch's shapes. Returns the returned
/// values in order. A kernel gets copies of its tensors; the ones it writes are copied
/// back into their storage after the launch.
pub fn run_plan(
    db: &dyn Db,
    key: FnKey<'_>,
    target: Target,
    args: &[GraphArg],
    seed: i64,
    executor: &mut dyn KernelExecutor,
) -> Result<Vec<GraphArg>, InterpError> {
    run_plan_with_dims(db, key, target, args, &BTreeMap::new(), seed, executor)
}

/// [`run_plan`] with `dims`: the values of symbols no argument binds on its own (`B` and
/// `H` of a `"B*H"` dim), as [`super::run_graph_f64_with_dims`] takes them, for the
/// plan's buffers and views (the generated kernels' own dims are plain symbols their
/// arguments bind).
pub fn run_plan_with_dims(
    db: &dyn Db,
    key: FnKey<'_>,
    target: Target,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    executor: &mut dyn KernelExecutor,
) -> Result<Vec<GraphArg>, InterpError> {
    let lower = |what: &str, e: tessera_passes::LowerError| InterpError::new(format!("{what}: {}", e.message));
    let (plan, module) = tessera_passes::plan_module(db, key).map_err(|e| lower("no launch plan", e))?;
    let func: &Func = &plan.schedule;
    let (params, symbols) = bind_params(func, args, dims)?;
    let mut storage: Vec<HostTensor> = Vec::new();
    let mut vals: Vec<Option<PlanVal>> = vec![None; func.values.len()];
    for ((&p, v), a) in func.params.iter().zip(params).zip(args) {
        vals[p.0 as usize] = Some(match (v, a) {
            (Val::Tensor(_), Arg::Tensor(h)) => {
                storage.push(h.clone());
                PlanVal::View { storage: storage.len() - 1, dims: h.dims.clone() }
            }
            (v, _) => PlanVal::Host(v),
        });
    }
    let mut kernels: HashMap<(String, BTreeMap<String, i64>), Arc<Func>> = HashMap::new();
    let err = |id: OpId, m: String| InterpError::at_op(func, id, m);
    for &id in &func.body.ops {
        let op = func.op(id);
        let get = |v: ValueId| -> R<&PlanVal> {
            vals.get(v.0 as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| err(id, format!("%{} is used before it is defined", v.0)))
        };
        let host = |i: usize| -> R<Val> {
            let v = *op.operands.get(i).ok_or_else(|| err(id, format!("has no operand {i}")))?;
            match get(v)? {
                PlanVal::Host(h) => Ok(h.clone()),
                PlanVal::View { .. } => Err(err(id, format!("expects a host scalar, %{} is a tensor", v.0))),
            }
        };
        let result = || -> R<usize> {
            match op.results[..] {
                [r] => Ok(r.0 as usize),
                _ => Err(err(id, format!("has {} results, not one", op.results.len()))),
            }
        };
        if let Some(v) = host_op(func, id, op, &host) {
            vals[result()?] = Some(PlanVal::Host(v?));
            continue;
        }
        match op.kind {
            OpKind::SchedDim => {
                let dims = match op.attr("dims") {
                    Some(Attr::Dims(d)) if d.len() == 1 => d,
                    _ => return Err(err(id, "sched.dim needs one dim in `dims`".into())),
                };
                let v = dims[0].eval(&|s| symbols.get(s).copied()).ok_or_else(|| {
                    err(id, format!("no value for {} (bound by the arguments: {symbols:?})", dims[0]))
                })?;
                vals[result()?] = Some(PlanVal::Host(Val::Index(v)));
            }
            OpKind::SchedParam => match op.str_attr("key") {
                Some("seed") => vals[result()?] = Some(PlanVal::Host(Val::Index(seed))),
                other => {
                    return Err(err(id, format!("sched.param {other:?}: only the run's `seed` is a plan parameter")))
                }
            },
            OpKind::Buffer => {
                let r = ValueId(result()? as u32);
                let (Type::Tensor(t), Some(dims)) = (func.ty(r), eval_dims(func.ty(r).dims(), &symbols)) else {
                    return Err(err(id, format!("a buffer of {} with unknown dims", func.ty(r))));
                };
                storage.push(HostTensor::zeros(t.dtype, &dims));
                vals[r.0 as usize] = Some(PlanVal::View { storage: storage.len() - 1, dims });
            }
            OpKind::Reshape => {
                let r = ValueId(result()? as u32);
                let src = *op.operands.first().ok_or_else(|| err(id, "graph.reshape needs an operand".into()))?;
                let PlanVal::View { storage: s, dims: from } = get(src)?.clone() else {
                    return Err(err(id, "graph.reshape of a host scalar".into()));
                };
                let dims = eval_dims(func.ty(r).dims(), &symbols)
                    .ok_or_else(|| err(id, format!("a view of {} with unknown dims", func.ty(r))))?;
                if numel(&dims) != numel(&from) {
                    return Err(err(id, format!("a view of {from:?} as {dims:?}")));
                }
                vals[r.0 as usize] = Some(PlanVal::View { storage: s, dims });
            }
            OpKind::Kernel => {
                let callee = op.str_attr("callee").ok_or_else(|| err(id, "sched.kernel needs `callee`".into()))?;
                let mut kargs = Vec::new();
                let mut views = Vec::new();
                for &o in &op.operands {
                    match get(o)? {
                        PlanVal::View { storage: s, dims } => {
                            let t = &storage[*s];
                            kargs.push(Arg::Tensor(HostTensor {
                                dtype: t.dtype,
                                dims: dims.clone(),
                                data: t.data.clone(),
                            }));
                            views.push(Some(*s));
                        }
                        PlanVal::Host(h) => {
                            kargs.push(h.to_arg().ok_or_else(|| err(id, "passes a token to a kernel".into()))?);
                            views.push(None);
                        }
                    }
                }
                // A kernel the function calls: its own file's or a stdlib instance (`source`).
                let kkey = tessera_passes::planned_kernel(db, key, module, callee, op.str_attr("source"))
                    .ok_or_else(|| err(id, format!("the generated module has no kernel `{callee}`")))?;
                let ksymbols = kernel_symbols(db, kkey, &kargs).map_err(|m| err(id, format!("`{callee}`: {m}")))?;
                let cache_key = (callee.to_string(), ksymbols.clone());
                let tile = match kernels.get(&cache_key) {
                    Some(t) => t.clone(),
                    None => {
                        let (config, _) = tessera_passes::default_config(db, kkey, &ksymbols)
                            .map_err(|e| err(id, format!("`{callee}` has no configuration: {}", e.message)))?;
                        let t = tessera_passes::tile_ir(db, kkey, config, target)
                            .clone()
                            .map_err(|e| err(id, format!("`{callee}` for {}: {}", target.name(), e.message)))?;
                        kernels.insert(cache_key, t.clone());
                        t
                    }
                };
                executor.launch(&tile, &mut kargs).map_err(|m| err(id, format!("launching `{callee}`: {m}")))?;
                for ((a, view), access) in kargs.into_iter().zip(views).zip(param_access(&tile)) {
                    if let (Arg::Tensor(t), Some(s), true) = (a, view, access.written) {
                        if t.data.len() != storage[s].data.len() {
                            return Err(err(id, format!("`{callee}` resized a tensor argument")));
                        }
                        storage[s].data = t.data;
                    }
                }
            }
            OpKind::Return => {
                let mut out = Vec::new();
                for &o in &op.operands {
                    out.push(match get(o)? {
                        PlanVal::View { storage: s, dims } => {
                            let t = &storage[*s];
                            Arg::Tensor(HostTensor { dtype: t.dtype, dims: dims.clone(), data: t.data.clone() })
                        }
                        PlanVal::Host(h) => h.to_arg().ok_or_else(|| err(id, "returns a token".into()))?,
                    });
                }
                return Ok(out);
            }
            other => return Err(err(id, format!("`{}` is not an op of a launch plan", other.name()))),
        }
    }
    Err(InterpError::new(format!("the launch plan of `{}` has no func.return", func.name)))
}

/// The dim symbols of a generated kernel's parameters bound by the launch's arguments.
pub(crate) fn kernel_symbols(db: &dyn Db, kkey: FnKey<'_>, args: &[Arg]) -> Result<BTreeMap<String, i64>, String> {
    let graph = tessera_passes::graph_ir(db, kkey).clone().map_err(|e| e.message)?;
    if graph.params.len() != args.len() {
        return Err(format!("takes {} arguments, the plan passes {}", graph.params.len(), args.len()));
    }
    let mut symbols = BTreeMap::new();
    for (&p, a) in graph.params.iter().zip(args) {
        if let (Type::Tensor(t), Arg::Tensor(h)) = (graph.ty(p), a) {
            if t.dims.len() != h.dims.len() {
                return Err(format!("a rank-{} parameter gets a {:?} tensor", t.dims.len(), h.dims));
            }
            for (d, &size) in t.dims.iter().zip(&h.dims) {
                if let Some(s) = d.as_sym() {
                    if let Some(old) = symbols.insert(s.to_string(), size as i64) {
                        if old != size as i64 {
                            return Err(format!("`{s}` is both {old} and {size}"));
                        }
                    }
                }
            }
        }
    }
    Ok(symbols)
}
