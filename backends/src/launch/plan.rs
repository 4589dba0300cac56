//! Plans: a kernel lowered for a target, its dims bound and its seeded arguments.

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_frontend::check::{fn_signature, DType, NumericsCheck};
use tessera_frontend::{Db, FnKey};
use tessera_passes::abi::{AbiParam, KernelAbi};
use tessera_passes::codegen::{target_code, TargetCode};
use tessera_passes::ir::Func;
use tessera_passes::locs::SourcePositions;
use tessera_passes::{graph_ir, tile_ir, Config, Target};

use crate::interp::inputs::{self};
use crate::interp::{param_access, Access};
use crate::tensor::{round_to, Arg, HostTensor};

use super::{ErrorKind, KernelInfo, LaunchError};

/// Where a scalar argument's value came from.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ScalarSource {
    /// `--arg name=value`.
    Given,
    /// The signature's default.
    Default,
    /// A shape symbol bound by an `int` parameter.
    Dim,
    /// Seeded like the tensors (no default in the signature).
    Seeded,
}

impl ScalarSource {
    pub fn name(self) -> &'static str {
        match self {
            ScalarSource::Given => "given",
            ScalarSource::Default => "default",
            ScalarSource::Dim => "dim",
            ScalarSource::Seeded => "seeded",
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct ScalarValue {
    pub name: String,
    pub value: f64,
    /// `f32`, `bool`, `index`...
    pub ty: String,
    pub source: ScalarSource,
}

/// What to lower and bind.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    pub target: Target,
    pub config: Config,
    /// Every shape symbol's value ([`resolve_dims`]).
    pub dims: BTreeMap<String, i64>,
    /// `--arg NAME=VALUE` pairs, parsed against the parameter's type.
    pub args: Vec<(String, String)>,
    pub seed: u64,
    /// Generate target code (the device compiles it).
    pub code: bool,
    /// The host memory the arguments may take (`--max-memory`); `None`: what is
    /// available.
    pub max_memory: Option<u64>,
}

/// A kernel lowered, bound and given arguments: everything a device needs, owned (no
/// database), so it can move to a worker thread.
#[derive(Clone, Debug)]
pub struct Plan {
    pub kernel: String,
    pub target: Target,
    pub config: Config,
    /// The device's Tile IR.
    pub tile: Arc<Func>,
    pub code: Option<Arc<TargetCode>>,
    /// The CPU Tile IR the same-schedule interpreter check (`--check lowering`) runs (the
    /// same `Arc` when the target is the CPU).
    pub reference: Arc<Func>,
    /// The kernel's Graph IR: the f64 reference ([`crate::semantics`]) interprets it.
    pub graph: Arc<Func>,
    /// `@verify.numerics(...)`: what every run checks in the outputs.
    pub numerics: Option<NumericsCheck>,
    pub abi: KernelAbi,
    pub access: Vec<Access>,
    pub dims: BTreeMap<String, i64>,
    pub grid: [u64; 3],
    /// Threads per tile program (GPU targets; 1 on the CPU).
    pub threads: u32,
    /// The arguments before any launch.
    pub inputs: Vec<Arg>,
    pub scalars: Vec<ScalarValue>,
    /// Estimated registers per thread and shared memory per program (GPU targets).
    pub registers_estimate: Option<u32>,
    /// The most registers a thread may hold (GPU targets): the target's per-thread limit,
    /// or under warp specialization the count the consumers' `setmaxnreg` gives them.
    pub registers_limit: Option<u32>,
    /// Whether `registers_limit` is the consumers' `setmaxnreg` count.
    pub registers_setmaxnreg: bool,
    pub smem_bytes: Option<u64>,
    pub seed: u64,
    /// The kernel file's source positions, so the interpreter's messages name
    /// `path:line:col` (no front door re-parses them).
    pub positions: Arc<SourcePositions>,
}

impl Plan {
    /// How the interpreter runs this plan: default settings, with the file's positions
    /// for its messages.
    pub fn interp_options(&self) -> crate::interp::Options {
        crate::interp::Options { positions: Some(self.positions.clone()), ..Default::default() }
    }

    /// The tensors in parameter order, with their names.
    pub fn tensors<'a>(&self, args: &'a [Arg]) -> Vec<(&str, &'a HostTensor)> {
        self.abi
            .params
            .iter()
            .zip(args)
            .filter_map(|(p, a)| match a {
                Arg::Tensor(t) => Some((p.name(), t)),
                _ => None,
            })
            .collect()
    }

    /// `@verify.numerics(allow_nonfinite=True)`: NaN/Inf outputs that the reference also
    /// produces are accepted.
    pub fn allows_nonfinite(&self) -> bool {
        self.numerics.as_ref().is_some_and(|n| n.allow_nonfinite)
    }

    /// Whether parameter `i` is an output (the kernel writes it).
    pub fn is_output(&self, i: usize) -> bool {
        self.access.get(i).is_some_and(|a| a.written)
    }
}

/// Lowers the kernel for `req.target` (and the CPU Tile IR of the reference), binds the
/// dims, and prepares the arguments: tensors seeded by `req.seed` (outputs zero), scalars
/// from `--arg`, else the signature's default, else seeded.
pub fn plan(db: &dyn Db, key: FnKey<'_>, info: &KernelInfo, req: &PlanRequest) -> Result<Plan, LaunchError> {
    let name = info.name.clone();
    // Shape symbols a tile dim uses are compiled into the code; running it with another
    // value would read and write the wrong elements without any error.
    for (sym, &compiled) in &req.config.shapes {
        if let Some(&given) = req.dims.get(sym) {
            if given != compiled {
                return Err(LaunchError::input(format!(
                    "`{name}` was compiled for {sym} = {compiled} (a tile dimension uses it), but the run has \
                     {sym} = {given}; lower it for {sym} = {given}"
                )));
            }
        }
    }
    let tile = tile_ir(db, key, req.config.clone(), req.target)
        .clone()
        .map_err(|e| LaunchError::lowering(&name, "Tile IR", Some(req.target), &e))?;
    let reference = if req.target == Target::Cpu {
        tile.clone()
    } else {
        tile_ir(db, key, req.config.clone(), Target::Cpu)
            .clone()
            .map_err(|e| LaunchError::lowering(&name, "Tile IR (the reference)", Some(Target::Cpu), &e))?
    };
    let graph =
        graph_ir(db, key).clone().map_err(|e| LaunchError::lowering(&name, "Graph IR (the reference)", None, &e))?;
    // A race or an unwritten shared read is in the code whatever the schedule: refused
    // as `tessera check` reports it, not run on the interpreter to a `correct` verdict.
    if let Some((loc, message)) = tessera_passes::analysis::code_error(&graph, key.name(db)) {
        let mut e = LaunchError::new(
            ErrorKind::Compile,
            format!("cannot run `{name}`: {message} (`tessera check` shows its errors)"),
        );
        e.loc = Some(loc);
        return Err(e);
    }
    let code = if req.code {
        Some(
            target_code(db, key, req.config.clone(), req.target)
                .clone()
                .map_err(|e| LaunchError::lowering(&name, "target code", Some(req.target), &e))?,
        )
    } else {
        None
    };
    // A schedule whose buffers do not fit a block of the target is refused here, before
    // any input is made (`tessera check` reports it as E0500 with the buffers; a
    // `--schedule` given to `run` is not linted first).
    let limits = tessera_passes::analysis::limits::GpuLimits::of(req.target);
    let resources = if req.target.is_gpu() {
        tessera_passes::analysis::kernel_resources(db, key, req.config.clone(), req.target).as_ref().ok()
    } else {
        None
    };
    let registers_estimate = resources.map(|r| r.registers.peak);
    let smem_bytes = resources.map(|r| r.smem_bytes);
    let registers_limit = resources.zip(limits).map(|(r, l)| r.register_limit(l));
    let registers_setmaxnreg = resources.is_some_and(|r| r.consumer_registers.is_some());
    if let (Some(bytes), Some(limits)) = (smem_bytes, limits) {
        if bytes > limits.smem_per_block as u64 {
            let show = tessera_passes::units::bytes;
            return Err(LaunchError::new(
                ErrorKind::Resources,
                format!(
                    "`{name}` needs {} of shared memory per block under this schedule, more than the {} a block \
                     can have on {} (E0500; `tessera check` lists the buffers): fewer stages or smaller tiles \
                     shrink it",
                    show(bytes),
                    show(limits.smem_per_block as u64),
                    limits.arch
                ),
            ));
        }
    }
    let abi = KernelAbi::of(&tile).map_err(|e| LaunchError::new(ErrorKind::Compile, e))?;
    let access = param_access(&tile);
    // The `--arg` values first: a mistake there should not wait for the inputs.
    let mut given: Vec<(String, f64)> = Vec::new();
    for (name, text) in &req.args {
        let Some(i) = abi.params.iter().position(|p| p.name() == name) else {
            let names: Vec<&str> =
                abi.params.iter().filter(|p| !matches!(p, AbiParam::Tensor { .. })).map(|p| p.name()).collect();
            return Err(LaunchError::input(format!(
                "--arg {name}={text}: `{}` has no scalar parameter `{name}` ({})",
                info.name,
                if names.is_empty() {
                    "it takes no scalars".to_string()
                } else {
                    format!("its scalar parameters: {}", names.join(", "))
                }
            )));
        };
        let value = parse_scalar(&abi.params[i], text)
            .map_err(|why| LaunchError::input(format!("--arg {name}={text}: {why}")))?;
        if let Some(&dim) = req.dims.get(name) {
            if dim as f64 != value {
                return Err(LaunchError::input(format!(
                    "--arg {name}={text}: `{name}` is also the shape symbol {name} = {dim}; give it once, with --dims"
                )));
            }
        }
        given.push((name.clone(), value));
    }
    let shapes = inputs::tensor_shapes(&abi, &req.dims).map_err(LaunchError::input)?;
    let tensor_shapes: Vec<Vec<i64>> = shapes.iter().flatten().map(|d| d.iter().map(|&x| x as i64).collect()).collect();
    let binding = abi.bind(&tensor_shapes).map_err(LaunchError::input)?;
    check_memory(&abi, &shapes, req.max_memory)?;
    // A TMA copy's tensor map needs 16-byte strides: refused here for every device, so the
    // interpreter does not run to `correct` what the GPU's launcher refuses.
    for spec in &abi.tensor_maps {
        let (Some(Some(shape)), Some(p)) = (shapes.get(spec.param), abi.params.get(spec.param)) else { continue };
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        if let Some(why) = tessera_passes::tma::stride_problem(p.name(), &shape, spec.dtype.bytes() as u64) {
            return Err(LaunchError::input(why));
        }
    }
    let mut args = inputs::seeded_for_cached(&abi, &access, &req.dims, req.seed).map_err(LaunchError::input)?;
    let mut scalars = Vec::new();
    for (i, p) in abi.params.iter().enumerate() {
        let ty = match p {
            AbiParam::Tensor { .. } => continue,
            AbiParam::Scalar { dtype, .. } => dtype.to_string(),
            AbiParam::Index { .. } => "index".to_string(),
        };
        let pname = p.name().to_string();
        let (value, source) = if let Some((_, v)) = given.iter().find(|(n, _)| *n == pname) {
            (*v, ScalarSource::Given)
        } else if let Some(v) = req.dims.get(&pname) {
            (*v as f64, ScalarSource::Dim)
        } else if let Some(v) = info.scalars.iter().find(|s| s.name == pname).and_then(|s| s.default) {
            (v, ScalarSource::Default)
        } else {
            (arg_value(&args[i]), ScalarSource::Seeded)
        };
        scalars.push(ScalarValue { name: pname, value, ty, source });
    }
    // Report the values the kernel receives (rounded to the parameters' dtypes).
    for s in scalars.iter_mut() {
        inputs::set_scalar(&abi, &mut args, &s.name, s.value).map_err(LaunchError::input)?;
        if let Some(i) = abi.params.iter().position(|p| p.name() == s.name) {
            s.value = arg_value(&args[i]);
        }
    }
    Ok(Plan {
        kernel: name,
        target: req.target,
        config: req.config.clone(),
        threads: abi.threads,
        tile,
        code,
        reference,
        graph,
        numerics: fn_signature(db, key).numerics.clone(),
        abi,
        access,
        dims: req.dims.clone(),
        grid: binding.grid,
        inputs: args,
        scalars,
        registers_estimate,
        registers_limit,
        registers_setmaxnreg,
        smem_bytes,
        seed: req.seed,
        positions: Arc::new(SourcePositions::of(db, key.file(db))),
    })
}

pub(super) fn arg_value(a: &Arg) -> f64 {
    match a {
        Arg::Scalar(_, v) => *v,
        Arg::Index(v) => *v as f64,
        Arg::Tensor(_) => f64::NAN,
    }
}

/// Parses `--arg` text for a parameter: `true`/`false` (or 1/0) for bools, integers for
/// integer and index parameters, numbers (`inf`, `-inf`, `nan` too) for floats.
pub(super) fn parse_scalar(p: &AbiParam, text: &str) -> Result<f64, String> {
    let t = text.trim();
    match p {
        AbiParam::Tensor { name, .. } => Err(format!("`{name}` is a tensor; --arg sets scalar parameters")),
        AbiParam::Scalar { dtype: DType::Bool, name } => match t {
            "true" | "True" | "1" => Ok(1.0),
            "false" | "False" | "0" => Ok(0.0),
            _ => Err(format!("`{t}` is not a bool (`{name}` is bool: true or false)")),
        },
        AbiParam::Scalar { dtype, name } if dtype.is_int() => {
            t.parse::<i64>().map(|v| v as f64).map_err(|_| format!("`{t}` is not an integer (`{name}` is {dtype})"))
        }
        AbiParam::Index { name } => {
            t.parse::<i64>().map(|v| v as f64).map_err(|_| format!("`{t}` is not an integer (`{name}` is an int)"))
        }
        AbiParam::Scalar { dtype, name } => {
            let v: f64 = t.parse().map_err(|_| format!("`{t}` is not a number (`{name}` is {dtype})"))?;
            let r = round_to(*dtype, v);
            if v.is_finite() && !r.is_finite() {
                return Err(format!("{t} overflows {dtype} (`{name}`)"));
            }
            Ok(v)
        }
    }
}

/// Refuses problems whose arguments would not fit in memory (inputs, the device's copy
/// and the reference's copy), with the numbers. The budget is `max_memory` when given
/// (`--max-memory`), else the memory available.
fn check_memory(abi: &KernelAbi, shapes: &[Option<Vec<usize>>], max_memory: Option<u64>) -> Result<(), LaunchError> {
    let mut bytes: u128 = 0;
    for (p, s) in abi.params.iter().zip(shapes) {
        if let (AbiParam::Tensor { dtype, .. }, Some(dims)) = (p, s) {
            let n: u128 = dims.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128));
            bytes = bytes.saturating_add(n.saturating_mul(crate::tensor::elem_bytes(*dtype) as u128));
        }
    }
    // The interpreter holds each tensor as f64 atomics (8 bytes per element) besides the
    // host copies, and the f64 reference and the comparison hold more: count 4 copies of
    // 8 bytes per element (measured: a CPU run of gemm at M=128, N=65536, K=64 peaks at
    // about 30 bytes per element above the binary's own footprint), and 12 more for the
    // reference's record of who read, wrote and added into the elements of a tensor
    // touched in two of those ways.
    let elements: u128 = abi
        .params
        .iter()
        .zip(shapes)
        .filter_map(|(_, s)| s.as_ref().map(|d| d.iter().fold(1u128, |n, &x| n.saturating_mul(x as u128))))
        .fold(0u128, u128::saturating_add);
    let need = bytes.saturating_mul(3).saturating_add(elements.saturating_mul(44));
    let (budget, what) = match max_memory {
        Some(m) => (Some(m), "the --max-memory budget"),
        None => (available_memory(), "available (--max-memory sets another budget)"),
    };
    if let Some(avail) = budget {
        if need > avail as u128 {
            return Err(LaunchError::new(
                ErrorKind::Resources,
                format!(
                    "the arguments need about {} of host memory (tensors of {} in three copies, plus the \
                     interpreter's), and {} is {what}: choose smaller --dims",
                    tessera_passes::units::bytes(u64::try_from(need).unwrap_or(u64::MAX)),
                    tessera_passes::units::bytes(u64::try_from(bytes).unwrap_or(u64::MAX)),
                    tessera_passes::units::bytes(avail)
                ),
            ));
        }
    }
    Ok(())
}

/// What the arguments may take: the memory the system has available, and no more than
/// the process's address-space limit leaves (`ulimit -v`, `prlimit --as`): past that an
/// allocation aborts the process instead of failing politely.
fn available_memory() -> Option<u64> {
    let system = proc_field("/proc/meminfo", "MemAvailable:");
    match (system, address_space_headroom()) {
        (Some(a), Some(h)) => Some(a.min(h)),
        (a, h) => a.or(h),
    }
}

/// A `kB` field of a /proc file, in bytes.
fn proc_field(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The address space left under `RLIMIT_AS` (None without a limit).
#[cfg(unix)]
fn address_space_headroom() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let used = proc_field("/proc/self/status", "VmSize:").unwrap_or(0);
    Some(limit.rlim_cur.saturating_sub(used))
}

#[cfg(not(unix))]
fn address_space_headroom() -> Option<u64> {
    None
}
