//! Checking a run: the references (the f64 reference of `crate::semantics`, and the
//! same-schedule Tile IR interpreter of `--check lowering`), the comparison of every
//! output, non-finite values on both sides, the verdicts, and the runtime checks of
//! `@verify.numerics`.

use std::str::FromStr;
use std::time::{Duration, Instant};

use tessera_frontend::check::{fn_signature, DType, NumericsCheck};
use tessera_frontend::{Db, FnKey};
use tessera_passes::ir::{Func, OpKind};

use crate::interp::compare::{compare_with, elements_within, Comparison, Tolerance};
use crate::interp::inputs::Rng;
use crate::interp::{self};
use crate::semantics;
use crate::tensor::{Arg, HostTensor};

use super::*;

/// Whether the function's `@verify.numerics(...)` says `allow_nonfinite=True`.
pub fn allows_nonfinite(db: &dyn Db, key: FnKey<'_>) -> bool {
    fn_signature(db, key).numerics.as_ref().is_some_and(|n| n.allow_nonfinite)
}

/// One output that breaks its function's `@verify.numerics(...)`.
#[derive(Clone, PartialEq, Debug)]
pub struct NumericsViolation {
    pub output: String,
    /// `stable` (a NaN or Inf) or `bounded` (outside `[lo, hi]`).
    pub check: &'static str,
    pub count: usize,
    /// The first violating element: its index and value.
    pub first: (Vec<usize>, f64),
    /// `[lo, hi]` for `bounded`.
    pub bounds: Option<(f64, f64)>,
}

/// The runtime checks of `@verify.numerics`: with `stable=True` every output element is
/// finite, with `bounded=[lo, hi]` every one lies in `[lo, hi]` (a NaN does not).
pub fn numerics_violations(spec: &NumericsCheck, outputs: &[(String, &HostTensor)]) -> Vec<NumericsViolation> {
    let mut out = Vec::new();
    for (name, t) in outputs {
        let values = t.to_f64();
        let mut scan = |check: &'static str, bad: &dyn Fn(f64) -> bool, bounds: Option<(f64, f64)>| {
            let mut count = 0;
            let mut first = None;
            for (i, &v) in values.iter().enumerate() {
                if bad(v) {
                    count += 1;
                    first.get_or_insert((unravel(i, &t.dims), v));
                }
            }
            if let Some(first) = first {
                out.push(NumericsViolation { output: name.clone(), check, count, first, bounds });
            }
        };
        if spec.stable {
            scan("stable", &|v: f64| !v.is_finite(), None);
        }
        if let Some((lo, hi)) = spec.bounded() {
            scan("bounded", &|v: f64| !(lo..=hi).contains(&v), Some((lo, hi)));
        }
    }
    out
}

/// How to check a run against the reference interpreter.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum CheckMode {
    /// Full below [`FULL_CHECK_LIMIT`] of interpreter work, sampled above.
    Auto,
    /// Interpret the whole grid; compare every output element.
    Full,
    /// Interpret a sample of tile programs (corners, the last along each axis, and
    /// seeded random ones); compare the elements they write.
    Sampled,
    /// No reference run.
    None,
    /// `auto` against the f64 reference, plus the same-schedule Tile IR interpreter: it
    /// shares the schedule and the Tile IR passes with the device, so it pinpoints
    /// whether a difference comes from the lowering or from the backend.
    Lowering,
}

impl FromStr for CheckMode {
    type Err = String;

    fn from_str(s: &str) -> Result<CheckMode, String> {
        Ok(match s {
            "auto" => CheckMode::Auto,
            "full" => CheckMode::Full,
            "sampled" => CheckMode::Sampled,
            "none" => CheckMode::None,
            "lowering" => CheckMode::Lowering,
            other => return Err(format!("unknown check `{other}` (expected auto, full, sampled, lowering or none)")),
        })
    }
}

/// One output compared with the reference.
#[derive(Clone, PartialEq, Debug)]
pub struct OutputCheck {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<usize>,
    /// Elements compared (all of them, or those the sampled programs wrote).
    pub compared: usize,
    pub comparison: Comparison,
    /// The first element out of tolerance: its index in the tensor, expected, actual.
    pub first_mismatch: Option<(Vec<usize>, f64, f64)>,
    /// The first NaN/Inf of the reference and of the result: index and value.
    pub first_expected_nonfinite: Option<(Vec<usize>, f64)>,
    pub first_actual_nonfinite: Option<(Vec<usize>, f64)>,
}

/// How the run was checked.
#[derive(Clone, PartialEq, Debug)]
pub enum CheckKind {
    Full,
    Sampled {
        programs: u64,
        total: u64,
    },
    /// Not checked, and why.
    Skipped(String),
}

impl CheckKind {
    pub fn name(&self) -> &'static str {
        match self {
            CheckKind::Full => "full",
            CheckKind::Sampled { .. } => "sampled",
            CheckKind::Skipped(_) => "none",
        }
    }
}

/// What a run was checked against.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ReferenceSource {
    /// The kernel's Graph IR interpreted in f64 ([`crate::semantics`]).
    GraphF64,
    /// The Tile IR of the same schedule on the interpreter (`--check lowering`).
    TileInterpreter,
}

impl ReferenceSource {
    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ReferenceSource::GraphF64 => "graph-f64",
            ReferenceSource::TileInterpreter => "tile-interpreter",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ReferenceSource::GraphF64 => "the f64 reference (the kernel's Graph IR, before any schedule, in f64)",
            ReferenceSource::TileInterpreter => "the same-schedule Tile IR on the interpreter",
        }
    }
}

/// The outcome of a check.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Verdict {
    Correct,
    /// Some element is out of tolerance, or non-finite where the reference is finite.
    Wrong,
    /// The outputs match where the reference is finite, but the reference itself has
    /// NaN or Inf (and the kernel does not allow it).
    NonFinite,
    Unchecked,
}

#[derive(Clone, PartialEq, Debug)]
pub struct CheckReport {
    pub kind: CheckKind,
    /// Why `auto` chose this kind, when it chose.
    pub reason: Option<String>,
    pub outputs: Vec<OutputCheck>,
    pub elapsed: Duration,
    pub source: ReferenceSource,
    /// `--check lowering`: the same-schedule Tile IR interpreter's check as well.
    pub lowering: Option<Box<CheckReport>>,
    /// With a `lowering` check that failed, the Tile IR departs from this check's
    /// reference too (both having run the same programs), and the device departs from its
    /// Tile IR only where the Tile IR is wrong, or the Tile IR is wrong at most elements:
    /// the kernel's arithmetic is unstable at these inputs, and another order of its
    /// operations gives another error.
    pub unstable_arithmetic: bool,
}

impl CheckReport {
    /// `None` when nothing was checked.
    pub fn passed(&self) -> Option<bool> {
        match self.verdict() {
            Verdict::Correct => Some(true),
            Verdict::Unchecked => None,
            Verdict::Wrong | Verdict::NonFinite => Some(false),
        }
    }

    /// This check's verdict, and the lowering check's when it is worse.
    pub fn verdict(&self) -> Verdict {
        let own = match self.kind {
            CheckKind::Skipped(_) => Verdict::Unchecked,
            _ if self.mismatched() => Verdict::Wrong,
            _ if self.outputs.iter().all(|o| o.comparison.passed) => Verdict::Correct,
            _ => Verdict::NonFinite,
        };
        match (own, self.lowering.as_ref().map(|l| l.verdict())) {
            (Verdict::Correct, Some(v @ (Verdict::Wrong | Verdict::NonFinite))) => v,
            (v, _) => v,
        }
    }

    /// Whether some output of this check (not the lowering check's) has an element out
    /// of tolerance or the wrong length.
    fn mismatched(&self) -> bool {
        self.outputs.iter().any(|o| o.comparison.mismatches > 0 || o.comparison.length_mismatch.is_some())
    }

    pub fn max_abs(&self) -> Option<f64> {
        self.passed().map(|_| self.outputs.iter().map(|o| o.comparison.max_abs).fold(0.0, f64::max))
    }

    pub fn max_rel(&self) -> Option<f64> {
        self.passed().map(|_| self.outputs.iter().map(|o| o.comparison.max_rel).fold(0.0, f64::max))
    }
}

/// The NaN and infinite elements of one output.
#[derive(Clone, PartialEq, Debug)]
pub struct NonFiniteCount {
    pub name: String,
    pub nan: usize,
    pub inf: usize,
    /// The first of them: its index and value.
    pub first: Option<(Vec<usize>, f64)>,
}

impl NonFiniteCount {
    pub fn total(&self) -> usize {
        self.nan + self.inf
    }
}

/// Scans every output of a run for NaN and infinities.
pub fn scan_nonfinite(plan: &Plan, args: &[Arg]) -> Vec<NonFiniteCount> {
    let mut out = Vec::new();
    for (i, (p, a)) in plan.abi.params.iter().zip(args).enumerate() {
        let Arg::Tensor(t) = a else { continue };
        if !plan.is_output(i) {
            continue;
        }
        let mut c = NonFiniteCount { name: p.name().to_string(), nan: 0, inf: 0, first: None };
        for j in 0..t.numel() {
            let v = t.get(j);
            if v.is_finite() {
                continue;
            }
            if v.is_nan() {
                c.nan += 1;
            } else {
                c.inf += 1;
            }
            c.first.get_or_insert_with(|| (unravel(j, &t.dims), v));
        }
        out.push(c);
    }
    out
}

/// The reference's outputs for a plan's inputs: whole, or for a sample of tile programs
/// with the elements they wrote.
#[derive(Clone, Debug)]
pub struct Reference {
    pub kind: CheckKind,
    pub reason: Option<String>,
    pub source: ReferenceSource,
    /// The arguments after the reference run (`None` when nothing was run).
    args: Option<Vec<Arg>>,
    /// Per parameter: the elements to compare (`None`: all of them).
    masks: Vec<Option<Vec<bool>>>,
    pub elapsed: Duration,
    /// FLOPs of dots the interpreter executed (whole Tile IR runs only).
    pub dot_flops: Option<u64>,
    /// `--check lowering`: the same-schedule Tile IR interpreter's run as well.
    pub lowering: Option<Box<Reference>>,
}

/// Interpreter work of a run: multiply-adds of the dots plus 16 per tensor element.
pub fn interp_cost(plan: &Plan) -> u64 {
    let flops = count_dot_flops(&plan.reference, &plan.abi, &plan.inputs, plan.grid).ok().flatten().unwrap_or(0);
    let elements: u64 = plan.tensors(&plan.inputs).iter().map(|(_, t)| t.numel() as u64).sum();
    flops / 2 + elements * 16
}

/// Why a kernel's reference must run every program (sampling cannot check it), if it must.
fn must_run_every_program(plan: &Plan) -> Option<&'static str> {
    let f = &plan.reference;
    if f.walk().into_iter().any(|id| f.op(id).attr("atomic").is_some()) {
        // An element's value is the sum of every program's additions.
        Some("the kernel adds atomically")
    } else if f.walk().into_iter().any(|id| f.op(id).kind == OpKind::Scatter) {
        // Its ids are data: a program outside a sample may write an element a sampled
        // one writes, and only a whole run finds two that leave different values.
        Some("the kernel scatters")
    } else {
        None
    }
}

/// Whether `auto` checks in full or samples, and why.
fn choose_mode(plan: &Plan, mode: CheckMode, whole: Option<&str>) -> (CheckMode, Option<String>) {
    let total = plan.grid.iter().product::<u64>();
    match mode {
        CheckMode::Auto | CheckMode::Lowering => {
            let cost = interp_cost(plan);
            if cost <= FULL_CHECK_LIMIT || total <= 16 {
                (CheckMode::Full, None)
            } else if let Some(why) = whole {
                (CheckMode::Full, Some(format!("{why}, so every program is interpreted")))
            } else {
                (
                    CheckMode::Sampled,
                    Some(format!(
                        "the problem is large (about {:.1e} interpreter operations; --check full interprets it all)",
                        cost as f64
                    )),
                )
            }
        }
        CheckMode::Sampled => match whole {
            Some(why) => (CheckMode::Full, Some(format!("{why}: sampled checking cannot check its writes"))),
            None => (CheckMode::Sampled, None),
        },
        m => (m, None),
    }
}

impl Reference {
    /// `--check none`: nothing was run.
    fn unchecked(reason: Option<String>, source: ReferenceSource) -> Reference {
        Reference {
            kind: CheckKind::Skipped("--check none".into()),
            reason,
            source,
            args: None,
            masks: Vec::new(),
            elapsed: Duration::ZERO,
            dot_flops: None,
            lowering: None,
        }
    }

    /// Runs the f64 reference (the kernel's Graph IR) on the plan's inputs, and with
    /// `--check lowering` the same-schedule Tile IR interpreter too.
    pub fn compute(plan: &Plan, mode: CheckMode) -> Result<Reference, LaunchError> {
        let start = Instant::now();
        let (chosen, reason) = choose_mode(plan, mode, must_run_every_program(plan));
        let mut args = plan.inputs.clone();
        let programs = match chosen {
            CheckMode::None => return Ok(Reference::unchecked(reason, ReferenceSource::GraphF64)),
            CheckMode::Sampled => {
                // The budget of `sample_programs`: about SAMPLE_BUDGET operations, at most
                // 4096 programs, besides the edges.
                let total = plan.grid.iter().product::<u64>().max(1) as f64;
                let cost = interp_cost(plan).max(1) as f64;
                let fraction = (SAMPLE_BUDGET as f64 / cost).min(4096.0 / total);
                semantics::Programs::Sample { fraction, seed: plan.seed }
            }
            _ => semantics::Programs::All,
        };
        let stats =
            semantics::run(&plan.graph, &plan.config, plan.grid, &mut args, &programs).map_err(LaunchError::interp)?;
        let (kind, masks) = match programs {
            semantics::Programs::All => (CheckKind::Full, vec![None; plan.abi.params.len()]),
            semantics::Programs::Sample { .. } => (
                CheckKind::Sampled { programs: stats.programs, total: stats.total_programs },
                stats.stored.into_iter().map(|m| m.or(Some(Vec::new()))).collect(),
            ),
        };
        let lowering = if mode == CheckMode::Lowering {
            Some(Box::new(Self::tile_interpreter(plan, CheckMode::Auto)?))
        } else {
            None
        };
        Ok(Reference {
            kind,
            reason,
            source: ReferenceSource::GraphF64,
            args: Some(args),
            masks,
            elapsed: start.elapsed(),
            dot_flops: None,
            lowering,
        })
    }

    /// Runs the interpreter on the plan's CPU Tile IR: the same schedule and the same
    /// Tile IR passes as the device.
    pub fn tile_interpreter(plan: &Plan, mode: CheckMode) -> Result<Reference, LaunchError> {
        let start = Instant::now();
        let kernel = interp::Kernel::new(&plan.reference).map_err(LaunchError::interp)?;
        let total = plan.grid.iter().product::<u64>();
        let (mode, reason) = choose_mode(plan, mode, must_run_every_program(plan));
        let mut args = plan.inputs.clone();
        let source = ReferenceSource::TileInterpreter;
        match mode {
            CheckMode::None => Ok(Reference::unchecked(reason, source)),
            CheckMode::Sampled => {
                let programs = sample_programs(plan, interp_cost(plan), plan.seed);
                let (stats, masks) =
                    kernel.run_programs(&mut args, &plan.interp_options(), &programs).map_err(LaunchError::interp)?;
                Ok(Reference {
                    kind: CheckKind::Sampled { programs: stats.programs, total },
                    reason,
                    source,
                    args: Some(args),
                    masks: masks.into_iter().map(|m| m.or(Some(Vec::new()))).collect(),
                    elapsed: start.elapsed(),
                    dot_flops: None,
                    lowering: None,
                })
            }
            _ => {
                let stats = kernel.run(&mut args, &plan.interp_options()).map_err(LaunchError::interp)?;
                Ok(Reference {
                    kind: CheckKind::Full,
                    reason,
                    source,
                    args: Some(args),
                    masks: vec![None; plan.abi.params.len()],
                    elapsed: start.elapsed(),
                    dot_flops: Some(stats.dot_flops),
                    lowering: None,
                })
            }
        }
    }

    /// Compares a device's arguments after its run with the reference, and with the
    /// same-schedule Tile IR's run where this reference carries one.
    pub fn compare(&self, plan: &Plan, actual: &[Arg]) -> CheckReport {
        let mut report = self.compare_outputs(plan, actual);
        if let Some(tile) = &self.lowering {
            self.add_lowering(plan, tile, actual, &mut report);
        }
        report
    }

    /// The lowering check of `actual` against `tile`, this reference's Tile IR run, and
    /// whether the device departs from the Tile IR only where the Tile IR departs from
    /// this reference.
    fn add_lowering(&self, plan: &Plan, tile: &Reference, actual: &[Arg], report: &mut CheckReport) {
        let lowering = tile.compare_outputs(plan, actual);
        // Only where both ran the same programs (sampled runs may not have).
        let same_programs = tile.kind == self.kind && tile.masks == self.masks;
        if let (Some(tile_args), true, Verdict::Wrong) = (&tile.args, same_programs, lowering.verdict()) {
            let tile_ir = self.compare_outputs(plan, tile_args);
            if tile_ir.verdict() == Verdict::Wrong {
                // The device against its Tile IR where the Tile IR is within tolerance.
                let stable = self.masks_within(plan, tile_args);
                let where_stable = tile.compare_masked(plan, tile_args, &stable, actual);
                // A Tile IR wrong at most elements agrees with the reference elsewhere by
                // chance: those agreements say nothing about the device.
                let compared: usize = tile_ir.outputs.iter().map(|o| o.compared).sum();
                let right: usize = where_stable.outputs.iter().map(|o| o.compared).sum();
                report.unstable_arithmetic = where_stable.verdict() == Verdict::Correct || 2 * right < compared;
            }
        }
        report.lowering = Some(Box::new(lowering));
    }

    /// Per output: the elements this reference compares at which `args` are within its
    /// tolerance.
    fn masks_within(&self, plan: &Plan, args: &[Arg]) -> Vec<Option<Vec<bool>>> {
        let Some(expected) = &self.args else { return self.masks.clone() };
        let tolerances = self.tolerances(plan, expected);
        (0..plan.abi.params.len())
            .map(|i| {
                let (Some(Arg::Tensor(e)), Some(Arg::Tensor(a)), Some(Some(tol))) =
                    (expected.get(i), args.get(i), tolerances.get(i))
                else {
                    return self.masks.get(i).cloned().flatten();
                };
                if a.numel() != e.numel() {
                    return Some(vec![false; e.numel()]);
                }
                let chosen = chosen_elements(self.masks.get(i).and_then(|m| m.as_ref()), e.numel());
                let ev: Vec<f64> = chosen.iter().map(|&j| e.get(j)).collect();
                let av: Vec<f64> = chosen.iter().map(|&j| a.get(j)).collect();
                let mut within = vec![false; e.numel()];
                for (&j, ok) in chosen.iter().zip(elements_within(&ev, &av, tol)) {
                    within[j] = ok;
                }
                Some(within)
            })
            .collect()
    }

    /// Per parameter: an output's tolerance.
    fn tolerances(&self, plan: &Plan, expected: &[Arg]) -> Vec<Option<Tolerance>> {
        // Outputs that sum: the tolerance widens with the longest tensor dim (an upper
        // bound on any reduction's length), as `interp::compare_outputs` does.
        let longest = plan.tensors(expected).iter().flat_map(|(_, t)| t.dims.iter().copied()).max().unwrap_or(1);
        let fp8_tensor_cores = tessera_passes::wgmma::has_fp8_wgmma(&plan.tile);
        let intermediates = crate::interp::precision::narrow_intermediates(&plan.tile);
        let accumulator = narrowest_accumulator(&plan.graph);
        (0..plan.abi.params.len())
            .map(|i| match expected.get(i) {
                Some(Arg::Tensor(e)) if plan.is_output(i) => {
                    let intermediate = intermediates.get(i).copied().flatten();
                    Some(
                        Tolerance::for_output(e.dtype, longest, intermediate, accumulator, fp8_tensor_cores)
                            .allowing_nonfinite(plan.allows_nonfinite()),
                    )
                }
                _ => None,
            })
            .collect()
    }

    /// [`Reference::compare`] without the lowering check.
    fn compare_outputs(&self, plan: &Plan, actual: &[Arg]) -> CheckReport {
        match &self.args {
            Some(expected) => self.compare_masked(plan, expected, &self.masks, actual),
            None => self.report(Vec::new()),
        }
    }

    /// A report of this reference's kind with `outputs`.
    fn report(&self, outputs: Vec<OutputCheck>) -> CheckReport {
        CheckReport {
            kind: self.kind.clone(),
            reason: self.reason.clone(),
            outputs,
            elapsed: self.elapsed,
            source: self.source,
            lowering: None,
            unstable_arithmetic: false,
        }
    }

    /// `actual` against `expected` at the elements `masks` choose (all where `None`).
    fn compare_masked(
        &self,
        plan: &Plan,
        expected: &[Arg],
        masks: &[Option<Vec<bool>>],
        actual: &[Arg],
    ) -> CheckReport {
        let tolerances = self.tolerances(plan, expected);
        let mut outputs = Vec::new();
        for (i, p) in plan.abi.params.iter().enumerate() {
            let (Some(Arg::Tensor(e)), Some(Arg::Tensor(a)), Some(Some(tol))) =
                (expected.get(i), actual.get(i), tolerances.get(i))
            else {
                continue;
            };
            let chosen = chosen_elements(masks.get(i).and_then(|m| m.as_ref()), e.numel());
            let ev: Vec<f64> = chosen.iter().map(|&j| e.get(j)).collect();
            let av: Vec<f64> = if a.numel() == e.numel() && a.dtype == e.dtype {
                chosen.iter().map(|&j| a.get(j)).collect()
            } else {
                Vec::new()
            };
            let comparison = compare_with(&ev, &av, tol);
            let first_mismatch =
                comparison.first_mismatch.map(|m| (unravel(chosen[m.index], &e.dims), m.expected, m.actual));
            let first_expected_nonfinite =
                comparison.first_expected_nonfinite.map(|j| (unravel(chosen[j], &e.dims), ev[j]));
            let first_actual_nonfinite =
                comparison.first_actual_nonfinite.map(|j| (unravel(chosen[j], &e.dims), av[j]));
            outputs.push(OutputCheck {
                name: p.name().to_string(),
                dtype: e.dtype,
                dims: e.dims.clone(),
                compared: chosen.len(),
                comparison,
                first_mismatch,
                first_expected_nonfinite,
                first_actual_nonfinite,
            });
        }
        self.report(outputs)
    }
}

/// The elements of an `n`-element output that `mask` chooses (all of them without one).
fn chosen_elements(mask: Option<&Vec<bool>>, n: usize) -> Vec<usize> {
    match mask {
        None => (0..n).collect(),
        Some(m) => (0..n).filter(|&j| m.get(j).copied().unwrap_or(false)).collect(),
    }
}

/// When a device's outputs differ from the f64 reference, whether the same-schedule Tile
/// IR on the interpreter computes what the device computed: the check `--check lowering`
/// runs, run here only after a mismatch (it costs a second interpreter run). It tells a
/// kernel's own arithmetic in its dtypes (a cancelling formula in f32: the interpreter
/// reproduces it) and the Tile IR passes, which the interpreter shares, from the code
/// generator and the device, which it does not. Nothing is added for the interpreter
/// device (it would compare a run with itself), for checks that already carry it, or
/// when the interpreter cannot run the plan: the verdict stands without the diagnosis.
pub fn diagnose_mismatch(
    plan: &Plan,
    device: Device,
    mode: CheckMode,
    reference: &Reference,
    actual: &[Arg],
    report: &mut CheckReport,
) {
    let wrong = report.verdict() == Verdict::Wrong;
    if !wrong
        || device == Device::Interpreter
        || report.lowering.is_some()
        || report.source != ReferenceSource::GraphF64
    {
        return;
    }
    // A wrong verdict means the check ran: `mode` is not `None`, and `Lowering` would
    // already carry this check.
    if let Ok(tile) = Reference::tile_interpreter(plan, mode) {
        reference.add_lowering(plan, &tile, actual, report);
    }
}

/// Where a mismatch with the f64 reference comes from, by the same-schedule Tile IR check
/// beside it ([`diagnose_mismatch`], `--check lowering`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MismatchSource {
    /// The device computes what its Tile IR computes: the difference is the kernel's
    /// arithmetic in its dtypes, or a Tile IR pass.
    TileIr,
    /// The device differs from its Tile IR, and the Tile IR itself from the f64 reference,
    /// wherever the device departs or at most elements: the kernel's arithmetic loses
    /// precision at these inputs (a variance by `E[x²] - mean²` of values far from 0), so
    /// each order of its sums gives another error (or a Tile IR pass departs; whether
    /// code generation does too cannot be told at these inputs).
    UnstableArithmetic,
    /// The Tile IR is itself NaN or Inf where the f64 reference is finite, and the device
    /// matches it wherever it is finite: the kernel's arithmetic overflows or cancels below
    /// zero in its dtypes (or a Tile IR pass departs), in elements that may differ between
    /// the two (layernorm's `E[x²] - mean²` below zero, depending on the order of the sums).
    NonFiniteTileIr,
    /// The device differs from its own Tile IR: the code generator or the device.
    CodeGeneration,
}

impl MismatchSource {
    /// The name in JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            MismatchSource::TileIr => "tile-ir",
            MismatchSource::NonFiniteTileIr => "tile-ir-non-finite",
            MismatchSource::UnstableArithmetic => "unstable-arithmetic",
            MismatchSource::CodeGeneration => "code-generation",
        }
    }

    /// The short name in tables (`tessera autotune`, the explorer's results).
    pub fn short_name(self) -> &'static str {
        match self {
            MismatchSource::TileIr => "tile-ir",
            MismatchSource::NonFiniteTileIr => "tile-ir nan",
            MismatchSource::UnstableArithmetic => "unstable",
            MismatchSource::CodeGeneration => "codegen",
        }
    }

    /// The source [`MismatchSource::name`] names (an autotune cache entry reads it back).
    pub fn from_name(name: &str) -> Option<MismatchSource> {
        [
            MismatchSource::TileIr,
            MismatchSource::NonFiniteTileIr,
            MismatchSource::UnstableArithmetic,
            MismatchSource::CodeGeneration,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

impl CheckReport {
    /// Where the outputs' difference from the f64 reference comes from, when the check
    /// disagrees with it and carries the same-schedule Tile IR check.
    pub fn mismatch_source(&self) -> Option<MismatchSource> {
        if self.source != ReferenceSource::GraphF64 || !self.mismatched() {
            return None;
        }
        match self.lowering.as_ref()?.verdict() {
            Verdict::Correct => Some(MismatchSource::TileIr),
            Verdict::NonFinite => Some(MismatchSource::NonFiniteTileIr),
            // The Tile IR is wrong too: the device's departure from it is no evidence
            // against code generation where the arithmetic itself is unstable.
            Verdict::Wrong if self.unstable_arithmetic => Some(MismatchSource::UnstableArithmetic),
            Verdict::Wrong => Some(MismatchSource::CodeGeneration),
            Verdict::Unchecked => None,
        }
    }
}

/// The least precise accumulator a kernel's `@accum(T)` policies ask for (the `acc`
/// attribute on its dots and sums), when one is narrower than f32.
pub fn narrowest_accumulator(graph: &Func) -> Option<DType> {
    let unit = |d: DType| match d {
        DType::Fp8E5m2 => 5,
        DType::Fp8E4m3 => 4,
        DType::BF16 => 3,
        DType::F16 | DType::TF32 => 2,
        _ => 0,
    };
    graph
        .walk()
        .into_iter()
        .filter_map(|o| tessera_passes::ir::policy::acc(graph.op(o)))
        .filter(|&d| tessera_passes::ir::policy::rounds_each_step(d))
        .max_by_key(|&d| unit(d))
}

/// The multi-dimensional index of a row-major flat index.
pub fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    for (d, &n) in dims.iter().enumerate().rev() {
        let n = n.max(1);
        out[d] = flat % n;
        flat /= n;
    }
    out
}

/// The tile programs a sampled check interprets: every corner of the grid (the last
/// program along an axis holds the ragged edge), the last program along each axis at
/// a random position of the others, and seeded random programs until about
/// [`SAMPLE_BUDGET`] of work (at least one, at most 4096 programs in all).
pub fn sample_programs(plan: &Plan, cost: u64, seed: u64) -> Vec<[u64; 3]> {
    let g = plan.grid;
    let total: u64 = g.iter().product();
    if total == 0 {
        return Vec::new();
    }
    let mut set: std::collections::BTreeSet<[u64; 3]> = std::collections::BTreeSet::new();
    for corner in 0..8u32 {
        let p = [0, 1, 2].map(|a| if corner & (1 << a) != 0 { g[a] - 1 } else { 0 });
        set.insert(p);
    }
    let mut rng = Rng::stream(seed, 0x5A3F_11E0);
    let random_point = |rng: &mut Rng| [0, 1, 2].map(|a| rng.next_u64() % g[a]);
    for axis in 0..3 {
        if g[axis] > 1 {
            let mut p = random_point(&mut rng);
            p[axis] = g[axis] - 1;
            set.insert(p);
        }
    }
    // The edges always; random programs while the budget lasts (at least one).
    let per_program = (cost / total).max(1);
    let wanted = (SAMPLE_BUDGET / per_program).max(set.len() as u64 + 1).min(total.min(4096));
    let mut tries = 0;
    while (set.len() as u64) < wanted && tries < wanted * 8 {
        set.insert(random_point(&mut rng));
        tries += 1;
    }
    set.into_iter().collect()
}
