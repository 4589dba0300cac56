//! The reference interpreter: runs Tile IR of any target (cpu, sm_80, sm_90) with exactly
//! the semantics of docs/ir.md. Every backend is compared with it.
//!
//! - One tile program per grid point; programs run on rayon threads unless the kernel
//!   scatters (then in grid order, so aliasing scatters are deterministic) or
//!   [`Options::parallel`] is off. Two programs storing the same element is reported as a
//!   race (a GPU would give either value).
//! - Values are dense row-major arrays of f64 holding values exactly representable in
//!   their dtype: every op computes in its result dtype's arithmetic (f32 for 16/8-bit
//!   floats, then rounded to the dtype; wrapping integers; exact `index`) and rounds once,
//!   so the results are those of docs/ir.md bit for bit wherever it fixes the order.
//! - Layouts and `tile.convert_layout` are value-preserving and ignored; barriers and
//!   async groups have no effect on values, but on GPU targets the interpreter checks what
//!   a GPU would expose: reading a shared slot whose `tile.cp_async` is not complete
//!   (committed and covered by a `tile.async_wait`) or not yet visible (no barrier since),
//!   reading a slot `tile.store_shared` wrote with no barrier since, and overwriting a slot
//!   that was read in the same barrier interval or whose earlier copy is still in flight.
//!   On the CPU target `tile.cp_async` is an immediate copy.
//!
//! Known limits: integer values beyond 2^53 (i64 tensors, index arithmetic is exact)
//! lose precision.

pub mod compare;
mod exec;
pub mod graph;
pub mod inputs;
pub(crate) mod memory;
pub(crate) mod numerics;
pub mod precision;
pub(crate) mod program;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tessera_frontend::check::DType;
use tessera_passes::abi::{AbiParam, Binding, KernelAbi};
use tessera_passes::ir::print::LocResolver;
use tessera_passes::ir::{Func, Loc, OpId, OpKind, Origin, Type};
use tessera_passes::locs::SourcePositions;

use crate::tensor::{round_to, Arg};
use exec::{Counters, Runner, Shared, Value};
use memory::GlobalTensor;
use program::Program;

pub use compare::{compare, compare_outputs, compare_with, Comparison, Mismatch, OutputComparison, Tolerance};

/// Why a kernel could not be run, or what went wrong while running it.
#[derive(Clone, PartialEq, Debug)]
pub struct InterpError {
    pub message: String,
    /// Where: the op, its source and the program (boxed: errors travel in `Result`s).
    pub site: Option<Box<ErrorSite>>,
}

#[derive(Clone, PartialEq, Debug)]
pub struct ErrorSite {
    pub op: OpId,
    pub op_name: &'static str,
    /// Relative to its function (see `Loc`); `tessera_passes::FileLocs` resolves it.
    pub loc: Loc,
    /// The grid point of the failing program (`None` before any program ran).
    pub program: Option<[u64; 3]>,
}

impl InterpError {
    pub fn new(message: impl Into<String>) -> InterpError {
        InterpError { message: message.into(), site: None }
    }

    pub(crate) fn at_op(func: &Func, op: OpId, message: String) -> InterpError {
        let o = func.op(op);
        // An atomic store or scatter is what the source calls `tile.atomic_add`.
        let atomic = matches!(o.kind, OpKind::Store | OpKind::Scatter) && o.attr("atomic").is_some();
        let op_name = if atomic { "tile.atomic_add" } else { o.kind.name() };
        let site = ErrorSite { op, op_name, loc: o.loc.clone(), program: None };
        InterpError { message, site: Some(Box::new(site)) }
    }

    pub(crate) fn in_program(mut self, pid: [u64; 3]) -> InterpError {
        if let Some(site) = &mut self.site {
            site.program = Some(pid);
        }
        self
    }

    pub fn op_name(&self) -> Option<&'static str> {
        self.site.as_ref().map(|s| s.op_name)
    }

    pub fn program(&self) -> Option<[u64; 3]> {
        self.site.as_ref().and_then(|s| s.program)
    }
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(site) = &self.site {
            if let Some([x, y, z]) = site.program {
                write!(f, "program ({x}, {y}, {z}): ")?;
            }
            write!(f, "{} {}: ", site.op_name, describe_loc(&site.loc, None))?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for InterpError {}

/// Where an op is, for a message: `at gemm.tsr:12:9` when the run knows the file's
/// positions (`Options::positions`, set by every launch), else `at `kernel`+12` (the byte
/// offset from the function's `def`; unit tests of bare IR).
pub(crate) fn describe_loc(loc: &Loc, positions: Option<&SourcePositions>) -> String {
    if let Some((path, line, col)) = positions.and_then(|p| p.resolve(loc)) {
        return format!("at {path}:{line}:{col}");
    }
    let start = loc.range.start;
    match &loc.origin {
        Origin::Function(name) => format!("at `{name}`+{start}"),
        Origin::Stdlib { file, function } => format!("at `{function}`+{start} (stdlib {file})"),
        Origin::None => "(no source)".to_string(),
    }
}

pub(crate) fn describe_op(func: &Func, op: OpId, positions: Option<&SourcePositions>) -> String {
    let o = func.op(op);
    format!("{} {}", o.kind.name(), describe_loc(&o.loc, positions))
}

/// How to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run programs on rayon threads when the kernel does not scatter.
    pub parallel: bool,
    /// Report two programs storing the same tensor element.
    pub check_races: bool,
    /// The source positions of the kernel's file: messages that name another op (the
    /// copy a read races with) give its `path:line:col`.
    pub positions: Option<Arc<SourcePositions>>,
}

impl Default for Options {
    fn default() -> Options {
        Options { parallel: true, check_races: true, positions: None }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct InterpStats {
    pub grid: [u64; 3],
    pub programs: u64,
    /// Instructions executed (ops, over all programs and loop iterations).
    pub ops: u64,
    /// Elements read from and written to global memory.
    pub loaded: u64,
    pub stored: u64,
    /// 2·M·N·K summed over `tile.dot`s.
    pub dot_flops: u64,
    pub parallel: bool,
    pub elapsed: Duration,
}

/// For each parameter of a kernel, which elements a run stored (`None` for parameters
/// the kernel does not write).
pub type StoredMasks = Vec<Option<Vec<bool>>>;

/// A kernel compiled for the interpreter once, to run on many argument sets.
pub struct Kernel<'f> {
    func: &'f Func,
    abi: KernelAbi,
    program: Program,
}

impl<'f> Kernel<'f> {
    pub fn new(func: &'f Func) -> Result<Kernel<'f>, InterpError> {
        let abi = KernelAbi::of(func).map_err(InterpError::new)?;
        let program = program::compile(func)?;
        Ok(Kernel { func, abi, program })
    }

    pub fn abi(&self) -> &KernelAbi {
        &self.abi
    }

    /// Binds the dims of the argument tensors (checking them against the signature).
    pub fn bind(&self, args: &[Arg]) -> Result<Binding, InterpError> {
        let shapes = crate::tensor::tensor_dims(&self.abi, args, |p, a| match (p, a) {
            (AbiParam::Scalar { .. }, Arg::Scalar(..)) | (AbiParam::Index { .. }, Arg::Index(_)) => Ok(()),
            // An index parameter given as an integer scalar, or a scalar as an index.
            (AbiParam::Index { .. }, Arg::Scalar(d, _)) if d.is_int() => Ok(()),
            (AbiParam::Scalar { .. }, Arg::Index(_)) => Ok(()),
            (p, a) => Err(format!("`{}` expects {}, got {}", p.name(), describe_param(p), describe_arg(a))),
        })
        .map_err(InterpError::new)?;
        self.abi.bind(&shapes).map_err(InterpError::new)
    }

    /// Runs every program of the grid; output tensors in `args` are updated.
    pub fn run(&self, args: &mut [Arg], options: &Options) -> Result<InterpStats, InterpError> {
        self.execute(args, options, None).map(|(stats, _)| stats)
    }

    /// Runs only the tile programs at the grid points `programs` (for checking a sample
    /// of a large launch) and says which elements of each tensor they stored: for every
    /// parameter, `Some(mask)` (one flag per element, row-major) for the tensors the
    /// kernel writes, `None` for the others. Elements no selected program stored keep
    /// their values in `args`. Races between the selected programs are still reported.
    /// Kernels that scatter are refused (scattered elements are not tracked).
    pub fn run_programs(
        &self,
        args: &mut [Arg],
        options: &Options,
        programs: &[[u64; 3]],
    ) -> Result<(InterpStats, StoredMasks), InterpError> {
        if self.program.scatters {
            return Err(InterpError::new(format!(
                "`{}` scatters: the elements a subset of its programs writes are not tracked; run the whole grid",
                self.abi.name
            )));
        }
        let (stats, written) = self.execute(args, options, Some(programs))?;
        Ok((stats, written.unwrap_or_default()))
    }

    /// Runs the whole grid, or the grid points `only`; with `only`, also returns which
    /// elements of each written tensor were stored.
    fn execute(
        &self,
        args: &mut [Arg],
        options: &Options,
        only: Option<&[[u64; 3]]>,
    ) -> Result<(InterpStats, Option<StoredMasks>), InterpError> {
        let start = Instant::now();
        let binding = self.bind(args)?;
        let stored = stored_params(self.func);
        // A subset run tracks the storing program of every element: that is the mask.
        let check_races = options.check_races || only.is_some();
        let tensors: Vec<Option<GlobalTensor>> = args
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                Arg::Tensor(t) => Some(GlobalTensor::new(t, check_races && stored[i])),
                _ => None,
            })
            .collect();
        let params: Vec<Value> = self
            .abi
            .params
            .iter()
            .zip(args.iter())
            .map(|(p, a)| match (p, a) {
                (_, Arg::Tensor(_)) => Value::Tensor,
                (AbiParam::Index { .. }, Arg::Index(v)) => Value::Index(*v),
                (AbiParam::Index { .. }, Arg::Scalar(_, v)) => Value::Index(*v as i64),
                (AbiParam::Scalar { dtype, .. }, Arg::Scalar(_, v)) => Value::Scalar(scalar_arg(*dtype, *v)),
                (AbiParam::Scalar { dtype, .. }, Arg::Index(v)) => Value::Scalar(scalar_arg(*dtype, *v as f64)),
                _ => Value::Unset,
            })
            .collect();
        let grid = binding.grid;
        let shared = Shared {
            func: self.func,
            prog: &self.program,
            tensors: &tensors,
            params: &params,
            grid,
            check_races,
            positions: options.positions.as_deref(),
        };
        let total = grid[0] * grid[1] * grid[2];
        if total > u32::MAX as u64 - 1 {
            return Err(InterpError::new(format!("a grid of {total} programs is too large to interpret")));
        }
        let linear = |p: &[u64; 3]| p[0] + grid[0] * (p[1] + grid[1] * p[2]);
        let selected: Vec<u64> = match only {
            None => (0..total).collect(),
            Some(points) => {
                let mut ids = Vec::with_capacity(points.len());
                for p in points {
                    if (0..3).any(|a| p[a] >= grid[a]) {
                        return Err(InterpError::new(format!(
                            "program ({}, {}, {}) is outside the grid {}x{}x{}",
                            p[0], p[1], p[2], grid[0], grid[1], grid[2]
                        )));
                    }
                    ids.push(linear(p));
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        };
        let point = |l: u64| [l % grid[0], (l / grid[0]) % grid[1], l / (grid[0] * grid[1])];
        let parallel = options.parallel && !self.program.scatters && selected.len() > 1;
        let counters = if parallel {
            // Each worker reuses one register file; the first error in grid order wins.
            let results: Vec<Result<Counters, (u64, InterpError)>> = selected
                .par_iter()
                .map_init(
                    || Runner::new(&shared),
                    |p, &l| {
                        p.counters = Counters::default();
                        p.run(point(l)).map(|_| p.counters).map_err(|e| (l, e))
                    },
                )
                .collect();
            let mut sum = Counters::default();
            let mut first: Option<(u64, InterpError)> = None;
            for r in results {
                match r {
                    Ok(c) => sum.add(&c),
                    Err((l, e)) => {
                        if first.as_ref().is_none_or(|(f, _)| l < *f) {
                            first = Some((l, e));
                        }
                    }
                }
            }
            if let Some((_, e)) = first {
                return Err(e);
            }
            sum
        } else {
            let mut p = Runner::new(&shared);
            for &l in &selected {
                p.run(point(l))?;
            }
            p.counters
        };
        for (i, a) in args.iter_mut().enumerate() {
            if let (Arg::Tensor(t), Some(g), true) = (a, &tensors[i], stored[i]) {
                g.write_back(t);
            }
        }
        let written = only.map(|_| {
            tensors
                .iter()
                .enumerate()
                .map(|(i, g)| match (g, stored[i]) {
                    (Some(g), true) => g.stored_mask(),
                    _ => None,
                })
                .collect()
        });
        let stats = InterpStats {
            grid,
            programs: selected.len() as u64,
            ops: counters.ops,
            loaded: counters.loaded,
            stored: counters.stored,
            dot_flops: counters.dot_flops,
            parallel,
            elapsed: start.elapsed(),
        };
        Ok((stats, written))
    }
}

/// A float scalar argument arrives as f32 (f64 for f64, docs: the kernel ABI) and has its
/// parameter's dtype inside the kernel.
fn scalar_arg(dtype: DType, v: f64) -> f64 {
    if dtype.is_float() && dtype != DType::F64 {
        round_to(dtype, v as f32 as f64)
    } else {
        round_to(dtype, v)
    }
}

fn describe_param(p: &AbiParam) -> String {
    match p {
        AbiParam::Tensor { dtype, dims, .. } => format!("a rank-{} {dtype} tensor", dims.len()),
        AbiParam::Scalar { dtype, .. } => format!("a {dtype} scalar"),
        AbiParam::Index { .. } => "an index".to_string(),
    }
}

fn describe_arg(a: &Arg) -> String {
    match a {
        Arg::Tensor(t) => format!("a rank-{} {} tensor", t.dims.len(), t.dtype),
        Arg::Scalar(d, _) => format!("a {d} scalar"),
        Arg::Index(_) => "an index".to_string(),
    }
}

/// Executes Tile IR `func` over its whole grid with `args` (one per parameter, in order);
/// output tensors are written back into `args`.
pub fn run_kernel(func: &Func, args: &mut [Arg]) -> Result<InterpStats, InterpError> {
    Kernel::new(func)?.run(args, &Options::default())
}

pub fn run_kernel_with(func: &Func, args: &mut [Arg], options: &Options) -> Result<InterpStats, InterpError> {
    Kernel::new(func)?.run(args, options)
}

/// How a kernel uses each parameter's memory.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Access {
    pub read: bool,
    pub written: bool,
}

/// For each parameter: whether the kernel reads its elements (loads, gathers, async
/// copies) and writes them (stores, scatters). Write-only tensors are the outputs.
pub fn param_access(func: &Func) -> Vec<Access> {
    let mut access = vec![Access::default(); func.params.len()];
    let param_of = |v| func.params.iter().position(|&p| p == v);
    // Views are made from tensors; the op using the view says how.
    let defs = func.definitions();
    let tensor_of_view = |v: tessera_passes::ir::ValueId| -> Option<usize> {
        let d = defs.get(v.0 as usize).copied().flatten()?;
        let op = func.op(d);
        (op.kind == OpKind::View).then(|| param_of(op.operands[0])).flatten()
    };
    for id in func.walk() {
        let op = func.op(id);
        let (target, write) = match op.kind {
            OpKind::Load | OpKind::CpAsync => {
                let v = if op.kind == OpKind::Load { op.operands.first() } else { op.operands.get(1) };
                (v.and_then(|&v| tensor_of_view(v)), false)
            }
            OpKind::Store | OpKind::TmaStore => (op.operands.first().and_then(|&v| tensor_of_view(v)), true),
            OpKind::Gather => (op.operands.first().and_then(|&v| param_of(v)), false),
            OpKind::Scatter => (op.operands.first().and_then(|&v| param_of(v)), true),
            _ => (None, false),
        };
        if let Some(p) = target {
            if write {
                access[p].written = true;
            } else {
                access[p].read = true;
            }
        }
    }
    access
}

fn stored_params(func: &Func) -> Vec<bool> {
    param_access(func).iter().map(|a| a.written).collect()
}

/// Whether a parameter is a tensor (for callers matching `param_access` to the ABI).
pub fn is_tensor_param(func: &Func, i: usize) -> bool {
    func.params.get(i).is_some_and(|&p| matches!(func.ty(p), Type::Tensor(_)))
}
