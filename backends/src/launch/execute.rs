//! Running a plan: correctness launch, timed launches, the work model.

use std::time::Duration;

use crate::tensor::{Arg, HostTensor};

use super::{
    count_dot_flops, diagnose_mismatch, numerics_violations, scan_nonfinite, Backend, CheckMode, CheckReport, Device,
    LaunchError, Loaded, NonFiniteCount, NumericsViolation, Plan, Reference,
};

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub warmup: u32,
    pub repeat: u32,
    /// Stop timing once the timed launches pass this (at least one is timed).
    pub budget: Option<Duration>,
    pub check: CheckMode,
}

impl RunOptions {
    pub fn for_device(device: Device) -> RunOptions {
        RunOptions {
            warmup: device.default_warmup(),
            repeat: device.default_repeat(),
            budget: None,
            check: CheckMode::Auto,
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub struct Timing {
    /// Each timed launch, in milliseconds.
    pub times_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub warmup: u32,
}

impl Timing {
    pub fn of(times: &[Duration], warmup: u32) -> Timing {
        let times_ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        let mut sorted = times_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let median_ms = match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Timing { min_ms: sorted.first().copied().unwrap_or(f64::NAN), median_ms, times_ms, warmup }
    }
}

/// What a launch does, for throughput.
#[derive(Clone, PartialEq, Debug)]
pub struct Work {
    /// FLOPs of the `tile.dot`s executed ([`count_dot_flops`]); `None` without dots.
    pub flops: Option<u64>,
    /// Why the FLOPs could not be counted, when the kernel has dots but no count.
    pub flops_unknown: Option<String>,
    /// Bytes of every tensor read once plus every tensor written once.
    pub bytes: u64,
    /// Every dot has integer operands (int8): the work is integer operations, quoted in
    /// OP and TOP/s as int8 GEMMs are, not FLOP.
    pub integer: bool,
}

impl Work {
    /// The unit of `flops`: "FLOP", or "OP" when the dots are integer ones.
    pub fn op_unit(&self) -> &'static str {
        if self.integer {
            "OP"
        } else {
            "FLOP"
        }
    }

    /// TFLOP/s at `ms` for kernels with dots.
    pub fn tflops(&self, ms: f64) -> Option<f64> {
        self.flops.filter(|_| ms > 0.0).map(|f| f as f64 / (ms * 1e-3) / 1e12)
    }

    /// GB/s at `ms` for kernels without dots.
    pub fn gbps(&self, ms: f64) -> Option<f64> {
        (self.flops.is_none() && self.flops_unknown.is_none() && ms > 0.0)
            .then(|| self.bytes as f64 / (ms * 1e-3) / 1e9)
    }
}

/// Everything one run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub device: Device,
    pub device_name: String,
    pub check: CheckReport,
    pub timing: Timing,
    pub work: Work,
    /// Registers per thread the device's compiler allocated (GPU).
    pub registers: Option<u32>,
    /// The arguments after the correctness launch (outputs included).
    pub outputs: Vec<Arg>,
    /// NaN/Inf in each output the device wrote, whether or not it was checked.
    pub nonfinite: Vec<NonFiniteCount>,
    /// What the outputs break of the kernel's `@verify.numerics(...)`.
    pub numerics: Vec<NumericsViolation>,
}

/// Launches the plan once, checks it, and times it (see the module doc).
pub fn execute(plan: &Plan, backend: &dyn Backend, options: &RunOptions) -> Result<Outcome, LaunchError> {
    let mut loaded = backend.load(plan)?;
    execute_loaded(plan, backend, loaded.as_mut(), options, None)
}

/// [`execute`] with a kernel already loaded, and optionally the reference's outputs of an
/// earlier check of the same inputs (autotune checks every configuration against one).
pub fn execute_loaded(
    plan: &Plan,
    backend: &dyn Backend,
    loaded: &mut dyn Loaded,
    options: &RunOptions,
    reference: Option<&Reference>,
) -> Result<Outcome, LaunchError> {
    let mut outputs = plan.inputs.clone();
    loaded.run(&mut outputs)?;
    let timing = time_launches(loaded, options)?;
    let computed;
    let reference = match reference {
        Some(r) => r,
        None => {
            computed = Reference::compute(plan, options.check)?;
            &computed
        }
    };
    let mut check = reference.compare(plan, &outputs);
    // Every mismatch says where it comes from, an autotune candidate's too: the search
    // table and the explorer show the same cause as `tessera run`.
    diagnose_mismatch(plan, backend.device(), options.check, reference, &outputs, &mut check);
    let nonfinite = scan_nonfinite(plan, &outputs);
    let numerics = match &plan.numerics {
        Some(spec) => {
            let written: Vec<(String, &HostTensor)> = plan
                .abi
                .params
                .iter()
                .zip(&outputs)
                .enumerate()
                .filter_map(|(i, (p, a))| match a {
                    Arg::Tensor(t) if plan.is_output(i) => Some((p.name().to_string(), t)),
                    _ => None,
                })
                .collect();
            numerics_violations(spec, &written)
        }
        None => Vec::new(),
    };
    Ok(Outcome {
        device: backend.device(),
        device_name: backend.description(),
        check,
        timing,
        work: work(plan),
        registers: loaded.registers(),
        outputs,
        nonfinite,
        numerics,
    })
}

fn time_launches(loaded: &mut dyn Loaded, options: &RunOptions) -> Result<Timing, LaunchError> {
    let repeat = options.repeat.max(1);
    let times = match options.budget {
        None => loaded.time(options.warmup, repeat)?,
        Some(budget) => {
            let mut times = loaded.time(options.warmup, 1)?;
            let first = times.first().copied().unwrap_or_default().max(Duration::from_micros(1));
            let more = (budget.as_secs_f64() / first.as_secs_f64()).floor() as u64;
            let more = more.min(repeat as u64 - 1) as u32;
            if more > 0 {
                times.extend(loaded.time(0, more)?);
            }
            times
        }
    };
    Ok(Timing::of(&times, options.warmup))
}

/// The work model of a plan (see the module doc).
pub fn work(plan: &Plan) -> Work {
    let bytes: u64 = plan
        .abi
        .params
        .iter()
        .enumerate()
        .zip(&plan.inputs)
        .filter_map(|((i, _), a)| match a {
            Arg::Tensor(t) => {
                let acc = plan.access.get(i).copied().unwrap_or_default();
                let times = u64::from(acc.read) + u64::from(acc.written);
                Some(t.numel() as u64 * t.dtype.bits() as u64 / 8 * times)
            }
            _ => None,
        })
        .sum();
    let f = &plan.tile;
    let mut dots = f.walk().into_iter().filter(|&id| f.op(id).kind == tessera_passes::ir::OpKind::Dot).peekable();
    let integer =
        dots.peek().is_some() && dots.all(|id| f.ty(f.op(id).operands[0]).dtype().is_some_and(|d| d.is_int()));
    match count_dot_flops(&plan.tile, &plan.abi, &plan.inputs, plan.grid) {
        Ok(flops) => Work { flops, flops_unknown: None, bytes, integer },
        Err(why) => Work { flops: None, flops_unknown: Some(why), bytes, integer },
    }
}
