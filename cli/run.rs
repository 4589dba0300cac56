//! `tessera run FILE --kernel NAME` (TOOLS.md §3): seeded inputs, one launch on the
//! device checked against the reference interpreter, then timed launches; a report in
//! text or JSON, and optionally every tensor as `.npy`. docs/run.md is the user's page.
//!
//! Exit status: 0 the run matches the reference (or was not checked); 1 the kernel is
//! wrong (a mismatch, a fault, a compile error); 2 the tool could not do its job (bad
//! options or values, no such device, a function that cannot be launched).

use std::path::PathBuf;

use serde_json::{json, Map, Value};
use tessera_backends::autotune::{self, schedule_json};
use tessera_backends::launch::{
    self, CheckKind, CheckMode, Device, KernelInfo, Outcome, Plan, PlanRequest, RunOptions,
};
use tessera_backends::tensor::Arg;
use tessera_frontend::check::{KeyValue, ScheduleValue};
use tessera_passes::abi::AbiParam;

use crate::failure::{refuse_errors, Failure};
use crate::launch_setup::{cache_key, print_notes, setup, Setup};
use crate::number_text::sig;
use crate::options::{self, Source};
use crate::run_inputs;
use crate::verdict::{self, num};

pub use crate::parsers::{parse_check, parse_device};
pub use crate::run_args::RunArgs;

/// Where the schedule of a run came from.
pub(crate) enum ScheduleSource {
    Given,
    Cached(PathBuf),
    /// The kernel's fixed schedule, or the first configuration of its space (`true`).
    Default {
        autotuned: bool,
    },
}

impl ScheduleSource {
    fn name(&self) -> &'static str {
        match self {
            ScheduleSource::Given => "given",
            ScheduleSource::Cached(_) => "autotune cache",
            ScheduleSource::Default { .. } => "default",
        }
    }

    fn describe(&self) -> String {
        match self {
            ScheduleSource::Given => "--schedule over the kernel's".to_string(),
            ScheduleSource::Cached(path) => format!("autotuned, from {}", path.display()),
            ScheduleSource::Default { autotuned: true } => {
                "the space's first configuration: not tuned for these shapes; `tessera autotune` tunes it".to_string()
            }
            ScheduleSource::Default { autotuned: false } => "the kernel's".to_string(),
        }
    }
}

pub fn run(args: RunArgs) -> Result<i32, String> {
    let src = Source::load(&args.file)?;
    match run_loaded(&src, &args) {
        Ok(code) => Ok(code),
        Err(f) => {
            if args.json && f.code == 1 {
                let v = json!({
                    "kernel": args.kernel,
                    "file": src.shown,
                    "correct": false,
                    "error": {"kind": f.kind.unwrap_or("error"), "message": f.message},
                });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            f.finish()
        }
    }
}

fn run_loaded(src: &Source, args: &RunArgs) -> Result<i32, Failure> {
    let key = src.function(&args.kernel).map_err(Failure::usage)?;
    refuse_errors(src, key, "run")?;
    if tessera_frontend::check::fn_signature(src.db(), key).kind == tessera_frontend::check::FunctionKind::Graph {
        return crate::run_graph::run(src, args, key);
    }
    if args.mesh.is_some() || args.fabric.is_some() {
        let flag = if args.mesh.is_some() { "--mesh" } else { "--fabric" };
        return Err(Failure::usage(format!(
            "{flag} runs a graph function (@jit) on a mesh of devices; `{}` is a kernel",
            args.kernel
        )));
    }
    let overrides = options::parse_schedule(&args.schedule).map_err(Failure::usage)?;
    let inputs = run_inputs::read(&args.inputs).map_err(Failure::usage)?;
    let mut dims_given = args.dims.clone();
    if !inputs.is_empty() {
        let given = options::parse_dims(&args.dims).map_err(Failure::usage)?;
        let graph = tessera_passes::graph_ir(src.db(), key)
            .clone()
            .map_err(|e| Failure::usage(format!("{}: {}", args.kernel, e.message)))?;
        let implied = run_inputs::implied_dims(&graph, &inputs, &given).map_err(Failure::usage)?;
        // `setup` takes the `--dims` text.
        dims_given.extend(implied.into_iter().map(|(s, v)| format!("{s}={v}")));
    }
    let setup = setup(src, &args.kernel, args.device, args.target, &dims_given, &args.args)?;
    print_notes(&setup);
    warn_reference_blind(src, key);
    warn_padded_divisors(src, key);
    let backend = setup.opened.backend.clone();
    let dims = setup.dims.map();
    let info = &setup.info;
    // The schedule: given, else the cache's winner, else the kernel's.
    let (schedule, source) = if !overrides.is_empty() {
        let s = options::apply_schedule(&info.base_schedule, &overrides, &info.schedule, &info.name)
            .map_err(Failure::usage)?;
        (s, ScheduleSource::Given)
    } else if info.schedule.is_autotuned() {
        match cached_winner(src, &setup, &dims) {
            Some((path, winner)) => (winner, ScheduleSource::Cached(path)),
            None => (info.base_schedule.clone(), ScheduleSource::Default { autotuned: true }),
        }
    } else {
        (info.base_schedule.clone(), ScheduleSource::Default { autotuned: false })
    };
    let config = launch::config_for(src.db(), setup.key, schedule, &dims).map_err(|e| Failure::launch(src, e))?;
    let request = PlanRequest {
        target: setup.target,
        config,
        dims: dims.clone(),
        args: setup.args.clone(),
        seed: args.seed,
        code: backend.needs_code(),
        max_memory: args.max_memory,
    };
    let mut plan = launch::plan(src.db(), setup.key, info, &request).map_err(|e| Failure::launch(src, e))?;
    let names: Vec<Option<String>> =
        plan.abi.params.iter().map(|p| matches!(p, AbiParam::Tensor { .. }).then(|| p.name().to_string())).collect();
    run_inputs::apply(&names, &inputs, &mut plan.inputs).map_err(Failure::usage)?;
    let inexact = run_inputs::inexact_integers(&names, &plan.inputs);
    let device = backend.device();
    let mut options = RunOptions::for_device(device);
    if let Some(r) = args.repeat {
        options.repeat = r;
    }
    if let Some(w) = args.warmup {
        options.warmup = w;
    }
    options.check = args.check;
    // A check the reference cannot do exactly gives no verdict, unless one was asked for.
    let unchecked = match &inexact {
        Some(why) if args.check == CheckMode::Auto => {
            eprintln!("warning: {why}: the run is not checked (`--check full` checks it with rounded values)");
            options.check = CheckMode::None;
            Some(why.clone())
        }
        Some(why) => {
            eprintln!("warning: {why}: the check compares values rounded to 53 bits");
            None
        }
        None => None,
    };
    let mut outcome = launch::execute(&plan, backend.as_ref(), &options).map_err(|e| Failure::launch(src, e))?;
    if let Some(why) = unchecked {
        outcome.check.kind = CheckKind::Skipped(why);
    }
    let mut report = report_json(src, &setup, &plan, &outcome, &source);
    if !inputs.is_empty() {
        report["inputs_from_files"] = run_inputs::to_json(&inputs);
    }
    if let Some(dir) = &args.save {
        save(dir, &plan, &outcome, &report).map_err(Failure::usage)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", report_text(src, &setup, &plan, &outcome, &source, &inputs));
    }
    Ok(if outcome.check.passed() == Some(false) || !outcome.numerics.is_empty() { 1 } else { 0 })
}

/// The autotune cache's winner for this run's key, if any (a bad file is a warning).
fn cached_winner(
    src: &Source,
    setup: &Setup<'_>,
    dims: &std::collections::BTreeMap<String, i64>,
) -> Option<(PathBuf, ScheduleValue)> {
    let key = cache_key(src, setup, dims)?;
    match autotune::lookup(&autotune::cache_dir(&setup.info), &key) {
        Ok(Some((path, entry))) => Some((path, entry.winner)),
        Ok(None) => None,
        Err(warning) => {
            eprintln!("warning: {warning}");
            None
        }
    }
}

// ----- the report --------------------------------------------------------------------

/// The keys that matter to the kernel, in the usual order.
pub(crate) fn schedule_text(info: &KernelInfo, s: &ScheduleValue) -> String {
    info.shown_keys(s)
        .iter()
        .map(|(k, v)| match v {
            KeyValue::Int(i) => format!("{k}={i}"),
            KeyValue::Str(t) => format!("{k}={t}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `1.23 TFLOP/s`, `45.6 GFLOP/s`, `789 MFLOP/s`.
/// `41.1 GFLOP/s`; `op` is the unit of the work ("FLOP", or "OP" for integer dots).
pub(crate) fn flops_rate(tflops: f64, op: &str) -> String {
    let flops = tflops * 1e12;
    for (prefix, scale) in [("T", 1e12), ("G", 1e9), ("M", 1e6)] {
        if flops >= scale {
            return format!("{} {prefix}{op}/s", sig(flops / scale, 3));
        }
    }
    format!("{} k{op}/s", sig(flops / 1e3, 3))
}

/// `812 GB/s`, `1.20 TB/s`, `3.4 MB/s`.
pub(crate) fn bandwidth(gbps: f64) -> String {
    let b = gbps * 1e9;
    for (unit, scale) in [("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)] {
        if b >= scale {
            return format!("{} {unit}", sig(b / scale, 3));
        }
    }
    format!("{} kB/s", sig(b / 1e3, 3))
}

fn flop_count(f: u64, op: &str) -> String {
    let f = f as f64;
    for (prefix, scale) in [("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)] {
        if f >= scale {
            return format!("{} {prefix}{op}", sig(f / scale, 3));
        }
    }
    format!("{f} {op}")
}

/// A scalar as its dtype prints it (`1e-5` as an f32 is `0.00001`, not f64's digits).
fn scalar_text(v: f64, ty: &str) -> String {
    match ty {
        "bool" => (if v != 0.0 { "true" } else { "false" }).to_string(),
        "index" => format!("{}", v as i64),
        t if t.starts_with('i') || t.starts_with("int") => format!("{}", v as i64),
        "f64" => format!("{v}"),
        _ => format!("{}", v as f32),
    }
}

pub(crate) fn report_text(
    src: &Source,
    setup: &Setup<'_>,
    plan: &Plan,
    outcome: &Outcome,
    source: &ScheduleSource,
    inputs: &[run_inputs::GivenInput],
) -> String {
    use std::fmt::Write;
    let interp = outcome.device == Device::Interpreter;
    let mut s = String::new();
    let _ = writeln!(s, "{} ({}) on {}, target {}", plan.kernel, src.shown, outcome.device_name, plan.target);
    let dims: Vec<String> = setup
        .dims
        .values
        .iter()
        .map(|(k, v)| {
            let assumed = setup.dims.assumed.iter().any(|(a, _)| a == k);
            format!("{k}={v}{}", if assumed { " (assumed)" } else { "" })
        })
        .collect();
    let _ = writeln!(s, "  dims      {}", if dims.is_empty() { "(none)".to_string() } else { dims.join(", ") });
    let _ = writeln!(s, "  schedule  {} ({})", schedule_text(&setup.info, &plan.config.schedule), source.describe());
    if !plan.scalars.is_empty() {
        let list: Vec<String> = plan
            .scalars
            .iter()
            .map(|a| format!("{}={} ({})", a.name, scalar_text(a.value, &a.ty), a.source.name()))
            .collect();
        let _ = writeln!(s, "  args      {}", list.join(", "));
    }
    if let Some(line) = run_inputs::describe(inputs) {
        let _ = writeln!(s, "  inputs    {line}");
    }
    let [gx, gy, gz] = plan.grid;
    let programs = gx * gy * gz;
    let mut launch_line = format!("grid {gx}x{gy}x{gz} = {programs} program{}", if programs == 1 { "" } else { "s" });
    if plan.target.is_gpu() {
        let _ = write!(launch_line, " x {} threads", plan.threads);
        match (outcome.registers, plan.registers_estimate) {
            (Some(r), Some(e)) if plan.registers_setmaxnreg => {
                // The driver reports the allocation at entry; setmaxnreg then moves registers
                // from the producer to the consumers.
                let limit = plan.registers_limit.unwrap_or(r);
                let _ = write!(
                    launch_line,
                    ", {r} registers/thread at launch, {limit} per consumer after setmaxnreg (estimate {e})"
                );
            }
            (Some(r), Some(e)) => {
                let _ = write!(launch_line, ", {r} registers/thread (estimate {e})");
            }
            (Some(r), None) => {
                let _ = write!(launch_line, ", {r} registers/thread");
            }
            (None, Some(e)) => {
                let _ = write!(launch_line, ", {}", estimate_text(e, plan.registers_limit, plan.registers_setmaxnreg));
            }
            (None, None) => {}
        }
        if let Some(b) = plan.smem_bytes {
            let _ = write!(launch_line, ", {} shared", tessera_passes::units::bytes(b));
        }
    }
    let _ = writeln!(s, "  launch    {launch_line}");
    // Correctness.
    let check = &outcome.check;
    verdict::check_lines(&mut s, check, "check");
    let t = &outcome.timing;
    let _ = writeln!(
        s,
        "  time      median {} ms, min {} ms over {} launch{}{}{}",
        sig(t.median_ms, 4),
        sig(t.min_ms, 4),
        t.times_ms.len(),
        if t.times_ms.len() == 1 { "" } else { "es" },
        if t.warmup > 0 { format!(" after {} warm-up", t.warmup) } else { String::new() },
        if interp { " (the interpreter's times, not a device's)" } else { "" }
    );
    let w = &outcome.work;
    let tag = if interp { " (interpreter)" } else { "" };
    let work = match (w.flops, &w.flops_unknown, w.tflops(t.median_ms), w.gbps(t.median_ms)) {
        (Some(f), _, Some(tf), _) => {
            let op = w.op_unit();
            format!("{} in tile.dot: {}{tag}", flop_count(f, op), flops_rate(tf, op))
        }
        (_, Some(why), _, _) => format!("tile.dot FLOPs not counted ({why})"),
        (_, _, _, Some(gb)) => {
            format!(
                "{} moved (inputs read once, outputs written once): {}{tag}",
                tessera_passes::units::bytes(w.bytes),
                bandwidth(gb)
            )
        }
        _ => "no time to divide by".to_string(),
    };
    let _ = writeln!(s, "  work      {work}");
    verdict::numerics_lines(&mut s, &outcome.numerics);
    let mut result = verdict::verdict_text(check, &outcome.nonfinite);
    if !outcome.numerics.is_empty() {
        result.push_str("; @verify.numerics VIOLATED");
    }
    let _ = writeln!(s, "  result    {result}");
    if let Some(cause) = verdict::cause_text(check) {
        let _ = writeln!(s, "  cause     {cause}");
    }
    s
}

pub(crate) fn report_json(
    src: &Source,
    setup: &Setup<'_>,
    plan: &Plan,
    outcome: &Outcome,
    source: &ScheduleSource,
) -> Value {
    let dims: Map<String, Value> = setup.dims.values.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let args: Map<String, Value> = plan
        .scalars
        .iter()
        .map(|a| {
            let v = match a.ty.as_str() {
                "bool" => json!(a.value != 0.0),
                t if t == "index" || t.starts_with('i') => json!(a.value as i64),
                _ => num(a.value),
            };
            (a.name.clone(), v)
        })
        .collect();
    let check = &outcome.check;
    let outputs = verdict::outputs_json(check);
    let t = &outcome.timing;
    let w = &outcome.work;
    let mut v = json!({
        "kernel": plan.kernel,
        "file": src.shown,
        "device": outcome.device.name(),
        "device_name": outcome.device_name,
        "target": plan.target.name(),
        "dims": dims,
        "assumed_dims": setup.dims.assumed.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        "schedule": schedule_json(&plan.config.schedule),
        "schedule_source": source.name(),
        "args": args,
        "seed": plan.seed,
        "grid": plan.grid,
        "threads": plan.threads,
        "check": check.kind.name(),
        "correct": check.passed(),
        "max_abs_err": check.max_abs().map_or(Value::Null, num),
        "max_rel_err": check.max_rel().map_or(Value::Null, num),
        "outputs": outputs,
        "time_ms": {"median": num(t.median_ms), "min": num(t.min_ms), "runs": t.times_ms.len(), "warmup": t.warmup},
        "flops": w.flops,
        "bytes": w.bytes,
        "tflops": w.tflops(t.median_ms).map_or(Value::Null, num),
        "work_unit": w.op_unit(),
        "gbps": w.gbps(t.median_ms).map_or(Value::Null, num),
    });
    let obj = v.as_object_mut().expect("an object");
    if let ScheduleSource::Cached(path) = source {
        obj.insert("schedule_cache".into(), json!(path.display().to_string()));
    }
    verdict::insert_verdict_json(obj, check, &outcome.nonfinite);
    obj.insert("numerics".into(), verdict::numerics_json(&outcome.numerics));
    if let CheckKind::Sampled { programs, total } = &check.kind {
        obj.insert("checked_programs".into(), json!({"sampled": programs, "total": total}));
    }
    if let CheckKind::Skipped(why) = &check.kind {
        obj.insert("check_skipped".into(), json!(why));
    }
    if plan.target.is_gpu() {
        obj.insert(
            "registers".into(),
            json!({
                "estimate": plan.registers_estimate,
                "allocated": outcome.registers,
                "limit": plan.registers_limit,
                "limit_from": if plan.registers_setmaxnreg { "setmaxnreg" } else { "target" },
            }),
        );
        obj.insert("smem_bytes".into(), json!(plan.smem_bytes));
    }
    if let Some(why) = &w.flops_unknown {
        obj.insert("flops_unknown".into(), json!(why));
    }
    v
}

/// `--save DIR`: inputs as NAME.npy, outputs as NAME.out.npy, the report as run.json.
fn save(dir: &std::path::Path, plan: &Plan, outcome: &Outcome, report: &Value) -> Result<(), String> {
    let mut save = crate::save::Save::open(dir)?;
    // Every tensor as it was before the launch (outputs start as zeros).
    for (p, a) in plan.abi.params.iter().zip(&plan.inputs) {
        if let Arg::Tensor(t) = a {
            save.tensor(&format!("{}.npy", p.name()), t)?;
        }
    }
    for (i, (p, a)) in plan.abi.params.iter().zip(&outcome.outputs).enumerate() {
        if let (Arg::Tensor(t), true) = (a, plan.is_output(i)) {
            save.tensor(&format!("{}.out.npy", p.name()), t)?;
        }
    }
    save.json("run.json", report)
}

/// The launch line's register estimate where no device measured the allocation. Under warp
/// specialization the figure is a consumer thread's, whose `setmaxnreg` count is the limit
/// (a producer thread keeps few); past the limit, ptxas spills, which the line says rather
/// than showing a count no thread can hold.
fn estimate_text(estimate: u32, limit: Option<u32>, setmaxnreg: bool) -> String {
    let over = limit.filter(|&l| estimate > l);
    match (setmaxnreg, over) {
        (true, Some(l)) => format!(
            "~{estimate} registers per consumer thread (estimate; over the {l} their setmaxnreg gives: ptxas will spill)"
        ),
        (true, None) => format!("~{estimate} registers per consumer thread (estimate; setmaxnreg gives them {})", limit.unwrap_or(estimate)),
        (false, Some(l)) => format!("~{estimate} registers/thread (estimate; over the {l} a thread can hold: ptxas will spill)"),
        (false, None) => format!("~{estimate} registers/thread (estimate)"),
    }
}

/// An integer division whose divisor is a partial tile's zero padding (W0608): the
/// interpreter stops at the first such lane with a division-by-zero fault, although no
/// result of those lanes is stored. Said before the run, so that the fault is explained.
fn warn_padded_divisors(src: &Source, key: tessera_frontend::FnKey<'_>) {
    let Ok(graph) = tessera_passes::graph_ir(src.db(), key).clone() else { return };
    for p in tessera_passes::analysis::padding::padded(&graph).divisors {
        eprintln!(
            "warning: {}W0608 this integer division's divisor is the zero padding of a partial tile of `{}`: \
             those lanes divide by zero, and the reference interpreter stops there with a fault although no \
             result of theirs is stored; load it with `other=1` (`tessera check` says more)",
            src.position(Some(&p.at)),
            p.tensor
        );
    }
}

/// A reduction that takes in a partial tile's padding (W0606), or a store (or a load a
/// reduction takes in) past its loop's bound (W0607), is where the kernel and its
/// reference agree by construction: both pad
/// and store the same way, so the verdict cannot see a result that depends on it. Said
/// before the run, as `tessera check` says it.
fn warn_reference_blind(src: &Source, key: tessera_frontend::FnKey<'_>) {
    let Ok(graph) = tessera_passes::graph_ir(src.db(), key).clone() else { return };
    for p in tessera_passes::analysis::padding::padded(&graph).reductions {
        eprintln!(
            "warning: {}W0606 this {} takes in the padding of a partial tile of `{}`: the f64 reference pads the \
             same way, so the verdict holds for the padded semantics, not for the tensor without it (`tessera \
             check` says more)",
            src.position(Some(&p.at)),
            if p.kind == "dot" { "tile.dot's K sum".to_string() } else { p.kind.clone() },
            p.tensor
        );
    }
    // An access past its loop's bound (W0607): the reference overwrites (or, for a load a
    // reduction takes in, reads) the same elements.
    for o in tessera_passes::analysis::overrun::overrunning_windows(&graph) {
        let (access, verb) = match &o.reduced_by {
            Some((kind, _)) if kind == "dot" => ("load's last tile, which tile.dot sums,".to_string(), "reads"),
            Some((kind, _)) => (format!("load's last tile, which a {kind} takes in,"), "reads"),
            None => ("store's last tile".to_string(), "writes"),
        };
        eprintln!(
            "warning: {}W0607 where `{}` does not divide `{}`, this {access} {verb} `{}` past `{}`, where its loop's \
             bound ends it: the f64 reference {verb} the same elements, so the verdict cannot tell (`tessera check` \
             says more)",
            src.position(Some(&o.at)),
            o.step,
            o.trip,
            o.tensor,
            o.bound
        );
    }
}
