//! `tessera run` of a graph function (`@jit`): its launch plan — the generated kernels in
//! order, with their buffers and views — runs on the device, and every returned value is
//! checked against the f64 reference: the Graph IR interpreter evaluating the function op
//! by op on whole tensors in f64, rounding each value to its declared dtype (an
//! independent path: it shares no kernel code with the plan).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tessera_backends::interp::compare::{compare_with, Comparison, Tolerance};
use tessera_backends::interp::graph::{run_graph_f64, run_plan, InterpExecutor, KernelExecutor};
use tessera_backends::launch::{self, Device, DeviceRequest};
use tessera_backends::tensor::{round_to, Arg, HostTensor};
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::FnKey;
use tessera_passes::ir::{Func, OpKind, Type};
use tessera_passes::Target;

use crate::options::{self, Source};
use crate::run::{Failure, RunArgs};

/// Shape symbols get this value when `--dims` does not give one: small enough for the
/// interpreter that checks the run.
const DEFAULT_DIM: i64 = 64;

/// Runs one launch of each kernel and times it (the executor of the plan).
struct Timed<E> {
    inner: E,
    kernels: Vec<(String, Duration)>,
}

impl<E: KernelExecutor> KernelExecutor for Timed<E> {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        let t = Instant::now();
        self.inner.launch(tile_ir, args)?;
        self.kernels.push((tile_ir.name.to_string(), t.elapsed()));
        Ok(())
    }
}

/// Seeded normal(0, 1) numbers (splitmix64 and Box-Muller), one stream per parameter.
fn normals(seed: u64, stream: u64, n: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next().max(1e-300), next());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        })
        .collect()
}

struct Inputs {
    args: Vec<Arg>,
    symbols: BTreeMap<String, i64>,
    assumed: Vec<String>,
    scalars: Vec<(String, String)>,
}

fn inputs(graph: &Func, dims: &BTreeMap<String, i64>, given: &[(String, String)], seed: u64) -> Result<Inputs, String> {
    let mut symbols = dims.clone();
    let mut assumed = Vec::new();
    for &p in &graph.params {
        for d in graph.ty(p).dims() {
            for s in d.symbols() {
                if !symbols.contains_key(&s) {
                    symbols.insert(s.clone(), DEFAULT_DIM);
                    assumed.push(format!("{s}={DEFAULT_DIM}"));
                }
            }
        }
    }
    let lookup = |d: &Dim| d.eval(&|s| symbols.get(s).copied());
    // Weights (right operands of matmuls) are scaled by 1/sqrt(K), as LeCun
    // initialization does, so activations stay O(1) through a stack of layers instead of
    // growing by sqrt(K) per matmul (where bf16 rounding then dominates the check).
    let weights: Vec<_> = graph
        .walk()
        .into_iter()
        .filter(|&id| graph.op(id).kind == OpKind::MatMul)
        .filter_map(|id| graph.op(id).operands.get(1).copied())
        .collect();
    let mut args = Vec::new();
    let mut scalars = Vec::new();
    for (i, &p) in graph.params.iter().enumerate() {
        let name = graph.values[p.0 as usize].name.clone().unwrap_or_default().to_string();
        let value = given.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
        match graph.ty(p) {
            Type::Tensor(t) => {
                if value.is_some() {
                    return Err(format!("--arg {name}: `{name}` is a tensor; tensors are seeded"));
                }
                let shape: Vec<usize> = t
                    .dims
                    .iter()
                    .map(|d| {
                        lookup(d)
                            .filter(|v| *v >= 0)
                            .map(|v| v as usize)
                            .ok_or_else(|| format!("`{name}` dim {d} has no value"))
                    })
                    .collect::<Result<_, _>>()?;
                let n = shape.iter().product();
                let scale = match (weights.contains(&p), shape.len()) {
                    (true, rank) if rank >= 2 => 1.0 / (shape[rank - 2].max(1) as f64).sqrt(),
                    _ => 1.0,
                };
                let values: Vec<f64> =
                    normals(seed, i as u64, n).into_iter().map(|x| round_to(t.dtype, x * scale)).collect();
                args.push(Arg::Tensor(HostTensor::from_f64(t.dtype, &shape, &values)));
            }
            Type::Index => {
                let v = match &value {
                    Some(v) => v.parse::<i64>().map_err(|_| format!("--arg {name}={v}: not an integer"))?,
                    None => 2,
                };
                scalars.push((name.clone(), v.to_string()));
                args.push(Arg::Index(v));
            }
            Type::Scalar(d) => {
                let v = match &value {
                    Some(v) => v.parse::<f64>().map_err(|_| format!("--arg {name}={v}: not a number"))?,
                    None => 0.0,
                };
                scalars.push((name.clone(), v.to_string()));
                args.push(Arg::Scalar(*d, round_to(*d, v)));
            }
            other => return Err(format!("parameter `{name}` of type {other} cannot be given")),
        }
    }
    Ok(Inputs { args, symbols, assumed, scalars })
}

fn values(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        Arg::Scalar(_, v) => vec![*v],
        Arg::Index(v) => vec![*v as f64],
    }
}

fn dtype(a: &Arg) -> DType {
    match a {
        Arg::Tensor(t) => t.dtype,
        Arg::Scalar(d, _) => *d,
        Arg::Index(_) => DType::I64,
    }
}

/// The error budget of a plan against the graph: the kernels re-associate sums (matmul K
/// blocks, attention's online softmax, whose probabilities are rounded to bf16 before
/// P·V) where the graph sums in order, and every kernel boundary rounds to the storage
/// dtype, so a rounding that flips early is carried through the later layers. The
/// budget is one step of the output's precision per kernel, relative to the output's
/// magnitude (its RMS), on top of the dtype's own tolerance.
fn tolerance(d: DType, kernels: usize) -> Tolerance {
    let base = Tolerance::for_dtype(d);
    if base.rtol == 0.0 {
        return base;
    }
    let k = (kernels.max(1)) as f64;
    Tolerance { rtol: base.rtol * k, atol: base.atol * k, ..base }
}

pub(crate) fn run(src: &Source, args: &RunArgs, key: FnKey<'_>) -> Result<i32, Failure> {
    let db = &src.db;
    let graph = tessera_passes::graph_ir(db, key)
        .clone()
        .map_err(|e| Failure::usage(format!("{}: {}", src.shown, e.message)))?;
    let (plan, _) = tessera_passes::plan_module(db, key)
        .map_err(|e| Failure::usage(format!("{}: cannot plan `{}`: {}", src.shown, args.kernel, e.message)))?;
    let dims: BTreeMap<String, i64> = options::parse_dims(&args.dims).map_err(Failure::usage)?.into_iter().collect();
    let given = options::parse_args(&args.args).map_err(Failure::usage)?;
    let input = inputs(&graph, &dims, &given, args.seed).map_err(Failure::usage)?;
    if !input.assumed.is_empty() {
        eprintln!("note: assuming {} (no --dims value)", input.assumed.join(", "));
    }
    let seed = args.seed as i64;
    // The device: the interpreter, the CPU backend, or (absent here) a GPU.
    let device = match args.device {
        DeviceRequest::Only(Device::Interpreter) => Device::Interpreter,
        DeviceRequest::Only(Device::Gpu) => {
            return Err(Failure::usage(
                "--device gpu for a graph function: its launch plan runs on the CPU backend or the interpreter (--device cpu|interp)",
            ))
        }
        _ if tessera_backends::HAS_CPU_BACKEND => Device::Cpu,
        _ => Device::Interpreter,
    };
    let target = args.target.unwrap_or(if device == Device::Cpu { Target::Cpu } else { Target::Sm90 });
    let repeat = args.repeat.unwrap_or(if device == Device::Cpu { 5 } else { 1 }).max(1);

    let reference = run_graph_f64(&graph, &input.args, seed)
        .map_err(|e| Failure::usage(format!("the f64 reference (the Graph IR in f64): {e}")))?;
    let allow_nonfinite = launch::allows_nonfinite(db, key);
    let mut times = Vec::new();
    let mut kernels = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        let (got, per_kernel) = match device {
            Device::Cpu => {
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                let cpu = tessera_backends::cpu_plan_executor(threads)
                    .ok_or_else(|| Failure::usage("this build has no CPU backend (the `llvm` feature)"))?;
                let mut exec = Timed { inner: cpu, kernels: Vec::new() };
                let got = run_plan(db, key, target, &input.args, seed, &mut exec);
                (got, exec.kernels)
            }
            _ => {
                let mut exec = Timed { inner: InterpExecutor::default(), kernels: Vec::new() };
                let got = run_plan(db, key, target, &input.args, seed, &mut exec);
                (got, exec.kernels)
            }
        };
        times.push(t.elapsed());
        outputs =
            got.map_err(|e| Failure { code: 1, message: format!("the launch plan failed: {e}"), kind: Some("fault") })?;
        kernels = per_kernel;
    }
    let checks: Vec<(Comparison, DType)> = reference
        .iter()
        .zip(&outputs)
        .map(|(want, got)| {
            let d = dtype(want);
            let tol = tolerance(d, plan.kernels.len()).allowing_nonfinite(allow_nonfinite);
            (compare_with(&values(want), &values(got), &tol), d)
        })
        .collect();
    let correct = checks.iter().all(|(c, _)| c.passed) && reference.len() == outputs.len();
    let wrong = checks.iter().any(|(c, _)| c.mismatches > 0) || reference.len() != outputs.len();
    let verdict = if correct {
        "correct"
    } else if wrong {
        "wrong"
    } else {
        "non-finite"
    };
    let names = return_names(outputs.len());
    let returned: Vec<(String, HostTensor)> =
        names.iter().zip(&outputs).map(|(n, a)| (n.clone(), as_tensor(a))).collect();
    let numerics = match &tessera_frontend::check::fn_signature(db, key).numerics {
        Some(spec) => {
            let refs: Vec<(String, &HostTensor)> = returned.iter().map(|(n, t)| (n.clone(), t)).collect();
            launch::numerics_violations(spec, &refs)
        }
        None => Vec::new(),
    };
    times.sort();
    let median = times[times.len() / 2].as_secs_f64() * 1e3;
    let min = times[0].as_secs_f64() * 1e3;
    let report = json!({
        "kernel": args.kernel,
        "kind": "graph",
        "device": if device == Device::Cpu { "cpu" } else { "interp" },
        "target": target.name(),
        "dims": input.symbols,
        "args": input.scalars.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
        "schedule": {},
        "kernels": plan.kernels.iter().map(|k| json!({"name": k.name, "summary": k.summary})).collect::<Vec<_>>(),
        "correct": correct,
        "verdict": verdict,
        "numerics": crate::verdict::numerics_json(&numerics),
        "reference": "graph-f64",
        "nonfinite": names.iter().zip(&checks).map(|(n, (c, _))| (n.clone(), json!(c.actual_nonfinite))).collect::<serde_json::Map<_, _>>(),
        "max_abs_err": checks.iter().map(|(c, _)| c.max_abs).fold(0.0, f64::max),
        "max_rel_err": checks.iter().map(|(c, _)| c.max_rel).fold(0.0, f64::max),
        "time_ms": {"median": median, "min": min},
        "tflops": Value::Null,
        "gbps": Value::Null,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        let device_text = match device {
            Device::Cpu => "CPU backend (LLVM JIT)",
            _ => "the reference interpreter",
        };
        println!("{} ({}) on {device_text}, target {}", args.kernel, src.shown, target.name());
        let dims: Vec<String> = input.symbols.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  dims      {}", dims.join(", "));
        if !input.scalars.is_empty() {
            let s: Vec<String> = input.scalars.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("  args      {}", s.join(", "));
        }
        println!(
            "  plan      {} kernels (tessera lower --kernel {} --generated shows them)",
            plan.kernels.len(),
            args.kernel
        );
        for (k, (name, t)) in
            plan.kernels.iter().zip(kernels.iter().chain(std::iter::repeat(&(String::new(), Duration::ZERO))))
        {
            let _ = name;
            println!("            {:<42} {:>9.3} ms  {}", k.name, t.as_secs_f64() * 1e3, k.summary);
        }
        for ((name, (c, d)), want) in names.iter().zip(&checks).zip(&reference) {
            let state = if c.mismatches > 0 {
                format!("{} MISMATCHES", c.mismatches)
            } else if c.passed {
                "ok".to_string()
            } else {
                format!("the reference itself is non-finite in {} elements", c.expected_nonfinite)
            };
            println!(
                "  check     {name} ({d}): {} elements against the f64 reference (the Graph IR in f64), max abs err {:.3e}, max rel err {:.3e}: {state}",
                c.len, c.max_abs, c.max_rel,
            );
            let dims = arg_dims(want);
            if let Some(m) = &c.first_mismatch {
                println!(
                    "            first mismatch at {}: expected {}, got {}",
                    crate::verdict::index_text(name, &launch::unravel(m.index, &dims)),
                    m.expected,
                    m.actual
                );
            }
            if let Some(i) = c.first_actual_nonfinite {
                println!(
                    "            result: {} non-finite, first at {}",
                    c.actual_nonfinite,
                    crate::verdict::index_text(name, &launch::unravel(i, &dims))
                );
            }
        }
        println!("  time      median {median:.3} ms, min {min:.3} ms over {repeat} runs of the whole plan");
        let mut lines = String::new();
        crate::verdict::numerics_lines(&mut lines, &numerics);
        print!("{lines}");
        println!(
            "  result    {}{}",
            match verdict {
                "correct" => "correct",
                "wrong" => "WRONG: the results differ from the f64 reference",
                _ => "non-finite: the reference itself has NaN or Inf",
            },
            if numerics.is_empty() { "" } else { "; @verify.numerics VIOLATED" }
        );
    }
    if let Some(dir) = &args.save {
        save(dir, &graph, &input.args, &returned, &report).map_err(Failure::usage)?;
    }
    Ok(if correct && numerics.is_empty() { 0 } else { 1 })
}

/// `return.out.npy` for one returned value, `return0.out.npy`, `return1.out.npy`, ... for
/// a tuple (without the `.out.npy`).
fn return_names(n: usize) -> Vec<String> {
    if n == 1 {
        vec!["return".to_string()]
    } else {
        (0..n).map(|i| format!("return{i}")).collect()
    }
}

/// A returned value as a tensor (a scalar as a 0-d one).
fn as_tensor(a: &Arg) -> HostTensor {
    match a {
        Arg::Tensor(t) => t.clone(),
        Arg::Scalar(d, v) => HostTensor::from_f64(*d, &[], &[*v]),
        Arg::Index(v) => HostTensor::from_f64(DType::I64, &[], &[*v as f64]),
    }
}

fn arg_dims(a: &Arg) -> Vec<usize> {
    match a {
        Arg::Tensor(t) => t.dims.clone(),
        _ => Vec::new(),
    }
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
