//! `tessera run` of a graph function (`@jit`): the arguments go to
//! `tessera_backends::launch::graph`, which runs the launch plan and checks every
//! returned value against the f64 reference; this file renders what it found.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tessera_backends::launch::graph::{GraphInputs, GraphRun, GraphRunError, GraphRunOptions, GraphSession};
use tessera_backends::launch::{self, Device, Verdict};
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::FnKey;
use tessera_passes::ir::Func;

use crate::failure::Failure;
use crate::options::{self, Source};
use crate::run_args::RunArgs;

fn failure(src: &Source, e: GraphRunError) -> Failure {
    match &e {
        GraphRunError::Plan(_) => Failure { code: 1, message: e.to_string(), kind: Some("fault") },
        // A KV cache that overflows its capacity (or a prune past its length) is the
        // program's fault at these dims, shown at the `append`/`prune` that does it.
        GraphRunError::Reference(r) if matches!(r.op_name(), Some("graph.cache_append" | "graph.cache_prune")) => {
            use tessera_passes::ir::print::LocResolver;
            let at = r
                .site
                .as_ref()
                .and_then(|site| tessera_passes::FileLocs::new(src.db(), src.file()).resolve(&site.loc))
                .map(|(path, line, col)| format!("{path}:{line}:{col}: "))
                .unwrap_or_default();
            Failure { code: 1, message: format!("{at}{}", r.message), kind: Some("fault") }
        }
        GraphRunError::NoGraphIr(_) | GraphRunError::NoPlan { .. } => Failure::usage(format!("{}: {}", src.shown, e)),
        _ => Failure::usage(e.to_string()),
    }
}

pub(crate) fn run(src: &Source, args: &RunArgs, key: FnKey<'_>) -> Result<i32, Failure> {
    let db = src.db();
    let session = GraphSession::open(db, key).map_err(|e| failure(src, e))?;
    let sharded = tessera_passes::dist::function::parameter_shardings(db, key, &session.graph).ok().flatten().is_some();
    if args.mesh.is_some() && sharded {
        return Err(Failure::usage(format!(
            "--mesh is for unsharded functions: `{}` lays out its parameters with @shard and runs on its own mesh",
            args.kernel
        )));
    }
    if args.fabric.is_some() && !sharded && args.mesh.is_none() {
        return Err(Failure::usage(format!(
            "--fabric runs a mesh across processes, and `{}` has no @shard parameters: give --mesh N to run it data-parallel",
            args.kernel
        )));
    }
    let files = crate::run_inputs::read(&args.inputs).map_err(Failure::usage)?;
    let mut dims_given = options::parse_dims(&args.dims).map_err(Failure::usage)?;
    let implied = crate::run_inputs::implied_dims(&session.graph, &files, &dims_given).map_err(Failure::usage)?;
    dims_given.extend(implied);
    let dims: BTreeMap<String, i64> = dims_given.into_iter().collect();
    let given = options::parse_args(&args.args).map_err(Failure::usage)?;
    let mut input = session.seed(&dims, &given, args.seed).map_err(|e| failure(src, e))?;
    let names: Vec<Option<String>> = session
        .graph
        .params
        .iter()
        .map(|p| session.graph.values[p.0 as usize].name.as_ref().map(|n| n.to_string()))
        .collect();
    crate::run_inputs::apply(&names, &files, &mut input.args).map_err(Failure::usage)?;
    if let Some(why) = crate::run_inputs::inexact_integers(&names, &input.args) {
        eprintln!("warning: {why}: the check compares values rounded to 53 bits");
    }
    if !input.assumed.is_empty() {
        let assumed: Vec<String> = input.assumed.iter().map(|(s, v)| format!("{s}={v}")).collect();
        eprintln!("note: assuming {} (no --dims value)", assumed.join(", "));
    }
    // Across processes, the ranks meet before anything runs, so that one started with
    // another program or other inputs is refused at once.
    let fabric = match args.fabric.as_deref() {
        None => None,
        Some(link) => Some(crate::run_mesh::connect(link, &fingerprint(src, args, &input)).map_err(Failure::usage)?),
    };
    let options = GraphRunOptions { device: args.device, target: args.target, repeat: args.repeat, threads: None };
    let run = session.run(&input, &options).map_err(|e| failure(src, e))?;
    // A function with `@shard` parameters also runs on its simulated mesh, and with
    // `--mesh N` an unsharded one data-parallel on N simulated devices.
    let mesh = launch::graph::run_on_mesh(db, key, &input, &run, args.mesh.map(|n| n as usize), fabric.as_ref())
        .map_err(|message| Failure { code: 1, message, kind: Some("fault") })?;
    let plan = &session.plan;
    let verdict = crate::verdict::verdict_name(run.verdict);
    let report = json!({
        "kernel": args.kernel,
        "kind": "graph",
        "device": match run.device {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
            Device::Interpreter => "interp",
        },
        "device_name": run.device_name,
        "target": run.target.name(),
        "dims": input.symbols,
        "args": input.scalars.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
        "inputs_from_files": crate::run_inputs::to_json(&files),
        "schedule": {},
        "kernels": plan.kernels.iter().map(|k| json!({"name": k.name, "summary": k.summary})).collect::<Vec<_>>(),
        "correct": run.correct(),
        "verdict": verdict,
        "numerics": crate::verdict::numerics_json(&run.numerics),
        "reference": "graph-f64",
        "nonfinite": run.checks.iter().map(|c| (c.name.clone(), json!(c.comparison.actual_nonfinite))).collect::<serde_json::Map<_, _>>(),
        "rounding_sensitivity": run.checks.iter().filter_map(|c| Some((c.name.clone(), json!(c.rounding_sensitivity?)))).collect::<serde_json::Map<_, _>>(),
        "max_abs_err": run.max_abs_err(),
        "max_rel_err": run.max_rel_err(),
        "time_ms": {"median": run.median_ms(), "min": run.min_ms()},
        "tflops": Value::Null,
        "gbps": Value::Null,
        "mesh": mesh.as_ref().map_or(Value::Null, crate::run_mesh::json),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let files_line = crate::run_inputs::describe(&files);
        print!("{}", report_text(src, args, &input, files_line, plan.kernels.len(), &run));
        if let Some(m) = &mesh {
            print!("{}", crate::run_mesh::text(m));
        }
    }
    // Every rank computes the same global results: only rank 0 writes them.
    if let Some(dir) = args.save.as_ref().filter(|_| fabric.as_ref().is_none_or(|f| f.rank() == 0)) {
        save(dir, &session.graph, &input.args, &run.returned, &report).map_err(Failure::usage)?;
    }
    let mesh_correct = mesh.as_ref().is_none_or(|m| m.verdict == Verdict::Correct);
    Ok(if run.correct() && run.numerics.is_empty() && mesh_correct { 0 } else { 1 })
}

/// What every rank must agree on: the source, the function, the dims, the scalar
/// arguments, the input files' names and the seed (FNV-1a, the same in every build).
fn fingerprint(src: &Source, args: &RunArgs, input: &GraphInputs) -> Vec<u8> {
    let mut text = src.file().text(src.db()).as_bytes().to_vec();
    let parts = [
        args.kernel.clone(),
        format!("{:?}", input.symbols),
        format!("{:?}", input.scalars),
        format!("{:?}", args.inputs),
        input.seed.to_string(),
    ];
    for part in parts {
        text.push(0);
        text.extend(part.as_bytes());
    }
    text
}

fn report_text(
    src: &Source,
    args: &RunArgs,
    input: &GraphInputs,
    files_line: Option<String>,
    planned: usize,
    run: &GraphRun,
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{} ({}) on {}, target {}", args.kernel, src.shown, run.device_name, run.target.name());
    let dims: Vec<String> = input.symbols.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(s, "  dims      {}", dims.join(", "));
    if !input.scalars.is_empty() {
        let list: Vec<String> = input.scalars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "  args      {}", list.join(", "));
    }
    if let Some(line) = files_line {
        let _ = writeln!(s, "  inputs    {line}");
    }
    let _ =
        writeln!(s, "  plan      {planned} kernels (tessera lower --kernel {} --generated shows them)", args.kernel);
    for k in &run.kernels {
        let _ = writeln!(
            s,
            "            {:<42} {:>9.3} ms  {}",
            k.kernel.name,
            k.time.as_secs_f64() * 1e3,
            k.kernel.summary
        );
    }
    for check in &run.checks {
        let (name, c) = (&check.name, &check.comparison);
        let state = if c.mismatches > 0 {
            format!("{} MISMATCHES", c.mismatches)
        } else if let (true, Some(moved)) = (c.passed, check.rounding_sensitivity) {
            format!(
                "ok within its rounding sensitivity (the f64 reference itself moves by up to {moved:.2e} when its values \
                 stay f64 instead of rounding to their dtypes: the result cancels larger terms; allowed {:.0}x that)",
                launch::graph::SENSITIVITY_FACTOR
            )
        } else if c.passed {
            "ok".to_string()
        } else {
            format!("the reference itself is non-finite in {} elements", c.expected_nonfinite)
        };
        let _ = writeln!(
            s,
            "  check     {name} ({}): {} elements against the f64 reference (the Graph IR in f64), max abs err {:.3e}, max rel err {:.3e}: {state}",
            check.dtype, c.len, c.max_abs, c.max_rel,
        );
        if let Some(m) = &c.first_mismatch {
            let _ = writeln!(
                s,
                "            first mismatch at {}: expected {}, got {}",
                crate::verdict::index_text(name, &launch::unravel(m.index, &check.dims)),
                m.expected,
                m.actual
            );
        }
        if let Some(i) = c.first_actual_nonfinite {
            let _ = writeln!(
                s,
                "            result: {} non-finite, first at {}",
                c.actual_nonfinite,
                crate::verdict::index_text(name, &launch::unravel(i, &check.dims))
            );
        }
    }
    let _ = writeln!(
        s,
        "  time      median {:.3} ms, min {:.3} ms over {} runs of the whole plan",
        run.median_ms(),
        run.min_ms(),
        run.repeat
    );
    crate::verdict::numerics_lines(&mut s, &run.numerics);
    let _ = writeln!(
        s,
        "  result    {}{}",
        match run.verdict {
            Verdict::Correct => "correct",
            Verdict::Wrong => "WRONG: the results differ from the f64 reference",
            _ => "non-finite: the reference itself has NaN or Inf",
        },
        if run.numerics.is_empty() { "" } else { "; @verify.numerics VIOLATED" }
    );
    s
}

/// `--save DIR` of a graph function: every tensor argument as `NAME.npy`, the returned
/// values as `return.out.npy` (tuples: `return0.out.npy`, ...), the report as `run.json`.
fn save(
    dir: &std::path::Path,
    graph: &Func,
    inputs: &[Arg],
    returned: &[(String, HostTensor)],
    report: &Value,
) -> Result<(), String> {
    let mut save = crate::save::Save::open(dir)?;
    for (&p, a) in graph.params.iter().zip(inputs) {
        if let Arg::Tensor(t) = a {
            let name =
                graph.values[p.0 as usize].name.as_ref().map_or_else(|| format!("arg{}", p.0), |n| n.to_string());
            save.tensor(&format!("{name}.npy"), t)?;
        }
    }
    for (name, t) in returned {
        save.tensor(&format!("{name}.out.npy"), t)?;
    }
    save.json("run.json", report)
}
