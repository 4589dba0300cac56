//! The CPU backend (LLVM JIT) on every kernel of the contract corpus, the examples and
//! the stdlib, at two shapes each (one a multiple of the tile sizes, one not), against
//! the reference interpreter on the same seeded inputs; plus the numerics of the
//! generated code (conversions, transcendental functions) against exact references.

#![cfg(feature = "llvm")]

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_backends::cpu::{CpuKernel, LaunchOptions};
use tessera_backends::interp::inputs::{make_nonnegative, seeded, set_scalar};
use tessera_backends::interp::{compare_outputs, run_kernel};
use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::abi::{AbiParam, KernelAbi};
use tessera_passes::ir::Func;
use tessera_passes::{default_config, tile_ir, Config, Target};

#[path = "../../tests/support/kernel_sources.rs"]
mod kernel_sources;

use kernel_sources::{parse_dims, Source};

const SEED: u64 = 20240611;

fn sources() -> Vec<Source> {
    let mut out = kernel_sources::every_source();
    // The kernels graph functions are planned into (generated modules).
    let mut generated = Vec::new();
    for src in &out {
        let db = Database::default();
        let file = SourceFile::new(&db, src.path.clone(), src.text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Graph {
                continue;
            }
            match tessera_passes::plan_module(&db, entry.key) {
                Ok((_, module)) => generated.push(Source {
                    label: format!("{} (kernels of `{}`)", src.label, entry.key.name(&db)),
                    path: module.path(&db).clone(),
                    text: module.text(&db).clone(),
                }),
                Err(e) => eprintln!("skipping the graph function `{}`: {}", entry.key.name(&db), e.message),
            }
        }
    }
    out.extend(generated);
    out
}

fn kernels(src: &Source) -> Vec<String> {
    let db = Database::default();
    let file = SourceFile::new(&db, src.path.clone(), src.text.clone(), None);
    item_index(&db, file)
        .functions
        .iter()
        .filter(|f| fn_signature(&db, f.key).kind == FunctionKind::Kernel)
        .map(|f| f.key.name(&db).to_string())
        .collect()
}

/// Tile IR for the CPU: the default configuration, or each autotune candidate.
fn lower(src: &Source, kernel: &str, symbols: &BTreeMap<String, i64>, all_configs: bool) -> Vec<(Config, Arc<Func>)> {
    let db = Database::default();
    let file = SourceFile::new(&db, src.path.clone(), src.text.clone(), None);
    let entry = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel).cloned().unwrap();
    let (config, _) = default_config(&db, entry.key, symbols)
        .unwrap_or_else(|e| panic!("{} `{kernel}`: no configuration: {}", src.label, e.message));
    let mut configs = vec![config.clone()];
    if all_configs {
        if let Some(s) = &tessera_frontend::check::fn_decorators(&db, entry.key).schedule {
            configs = s
                .configurations()
                .into_iter()
                .map(|schedule| Config { schedule, shapes: config.shapes.clone() })
                .collect();
        }
    }
    configs
        .into_iter()
        .map(|c| {
            let f = tile_ir(&db, entry.key, c.clone(), Target::Cpu)
                .clone()
                .unwrap_or_else(|e| panic!("{} `{kernel}`: {}", src.label, e.message));
            (c, f)
        })
        .collect()
}

/// Shapes per kernel: one a multiple of the tiles, one not; symbols tile dims use (a
/// head dim) keep their configuration value.
fn shapes(kernel: &str, func: &Func, config: &Config) -> [String; 2] {
    let known: Option<[&str; 2]> = match kernel {
        "gemm" | "matmul" | "small_matmul" | "narrow_matmul" | "fp8_gemm" | "linear_gelu" => {
            Some(["M=256,N=256,K=256", "M=100,N=76,K=90"])
        }
        "softmax" | "stable_softmax" | "layernorm" | "efficient_layernorm" | "rmsnorm" => {
            Some(["R=8,C=2048", "R=5,C=300"])
        }
        "flash_attention" => Some(["BH=2,S=128,D=64", "BH=2,S=100,D=64"]),
        // Fewer queries than keys: the causal mask is bottom-right aligned.
        "flash_attention_2" => Some(["BH=2,S=128,SK=128,D=64", "BH=2,S=36,SK=100,D=64"]),
        "saxpy" => Some(["n=4096", "n=5000"]),
        "vector_add" => Some(["N=4096", "N=1000"]),
        _ => None,
    };
    if let Some(k) = known {
        return k.map(String::from);
    }
    let mut symbols = std::collections::BTreeSet::new();
    for p in KernelAbi::of(func).unwrap().params {
        if let AbiParam::Tensor { dims, .. } = p {
            symbols.extend(dims.iter().flat_map(|d| d.symbols()));
        }
    }
    // Generated kernels have many dims (batch, heads, sequence): keep them small.
    let sizes = if func.name.contains("__k") { [16, 11] } else { [256, 100] };
    sizes.map(|n| {
        let pairs: Vec<String> =
            symbols.iter().map(|s| format!("{s}={}", config.shapes.get(s).copied().unwrap_or(n))).collect();
        pairs.join(",")
    })
}

fn scalars(kernel: &str) -> &'static [(&'static str, f64)] {
    match kernel {
        "layernorm" | "efficient_layernorm" => &[("eps", 1e-5)],
        "rmsnorm" => &[("eps", 1e-6)],
        "flash_attention" => &[("causal", 1.0)],
        "flash_attention_2" => &[("causal", 1.0), ("dropout", 0.1), ("seed", 42.0)],
        _ => &[],
    }
}

/// Runs one kernel on the interpreter and the CPU backend; returns the failures.
fn check(label: &str, kernel: &str, func: &Func, symbols: &BTreeMap<String, i64>, threads: usize) -> Vec<String> {
    let what = format!("{label} `{kernel}` [{}]", func.attr("config").and_then(|a| a.as_str()).unwrap_or(""));
    let mut inputs = match seeded(func, symbols, SEED) {
        Ok(a) => a,
        Err(e) => return vec![format!("{what}: inputs: {e}")],
    };
    let abi = KernelAbi::of(func).unwrap();
    for (name, v) in scalars(kernel) {
        set_scalar(&abi, &mut inputs, name, *v).unwrap();
    }
    if kernel == "fused_adam" {
        // A second moment is never negative; seeded normals would give NaN in both runs.
        make_nonnegative(&abi, &mut inputs, "V").unwrap();
    }
    let kernel_cpu = match CpuKernel::new(func) {
        Ok(k) => k,
        // Ops the backend does not know yet must be named, not crash.
        Err(e) if e.message.contains("is not supported by the LLVM backend yet") => {
            eprintln!("SKIPPED {what}: {e}");
            return Vec::new();
        }
        Err(e) => return vec![format!("{what}: {e}")],
    };
    let mut expected = inputs.clone();
    if let Err(e) = run_kernel(func, &mut expected) {
        if e.message.contains("is not supported by the interpreter yet") {
            eprintln!("SKIPPED {what}: no oracle: {e}");
            return Vec::new();
        }
        return vec![format!("{what}: the interpreter failed: {e}")];
    }
    let mut actual = inputs.clone();
    if let Err(e) = kernel_cpu.launch(&mut actual, threads) {
        return vec![format!("{what}: {e}")];
    }
    let outputs = compare_outputs(func, &expected, &actual);
    if outputs.is_empty() {
        return vec![format!("{what}: writes nothing")];
    }
    outputs
        .iter()
        .filter(|o| !o.comparison.passed)
        .map(|o| format!("{what} {symbols:?}: output `{}`: {}", o.name, o.comparison))
        .collect()
}

#[test]
fn every_kernel_matches_the_interpreter_at_two_shapes() {
    let mut failures = Vec::new();
    let mut covered = 0;
    for src in sources() {
        for kernel in kernels(&src) {
            let (config, func) = lower(&src, &kernel, &BTreeMap::new(), false).remove(0);
            for shape in shapes(&kernel, &func, &config) {
                let symbols = parse_dims(&shape);
                for (_, func) in lower(&src, &kernel, &symbols, false) {
                    failures.extend(check(&src.label, &kernel, &func, &symbols, 2));
                    covered += 1;
                }
            }
        }
    }
    assert!(covered >= 20, "only {covered} kernel runs");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_autotune_candidate_matches_the_interpreter_at_a_ragged_shape() {
    let mut failures = Vec::new();
    let mut covered = 0;
    for src in sources().into_iter().filter(|s| !s.label.starts_with("stdlib")) {
        for kernel in kernels(&src) {
            let (config, func) = lower(&src, &kernel, &BTreeMap::new(), false).remove(0);
            let shape = shapes(&kernel, &func, &config)[1].clone();
            let symbols = parse_dims(&shape);
            for (_, func) in lower(&src, &kernel, &symbols, true) {
                failures.extend(check(&src.label, &kernel, &func, &symbols, 2));
                covered += 1;
            }
        }
    }
    assert!(covered >= 60, "only {covered} kernel runs");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Timed repeats restore in-place tensors: saxpy (`y = alpha * x + y`) run five times
/// gives the result of one run.
#[test]
fn repeated_runs_start_from_the_same_inputs() {
    let src = sources().into_iter().find(|s| s.label.ends_with("saxpy.tsr")).expect("saxpy");
    let symbols = parse_dims("n=1000");
    let (_, func) = lower(&src, "saxpy", &symbols, false).remove(0);
    let inputs = seeded(&func, &symbols, SEED).unwrap();
    let k = CpuKernel::new(&func).unwrap();
    let mut once = inputs.clone();
    k.launch(&mut once, 1).unwrap();
    let mut repeated = inputs.clone();
    let run = k.launch_with(&mut repeated, &LaunchOptions { threads: 2, warmup: 2, repeats: 3 }).unwrap();
    assert_eq!(run.times_ms.len(), 3);
    assert_eq!(once, repeated);
    assert_ne!(once, inputs, "saxpy changed nothing");
}

/// The grid is split across threads: every thread count gives the same output.
#[test]
fn thread_counts_agree() {
    let src = sources().into_iter().find(|s| s.label.ends_with("layernorm.tsr")).expect("layernorm");
    let symbols = parse_dims("R=37,C=300");
    let (_, func) = lower(&src, "layernorm", &symbols, false).remove(0);
    let mut inputs = seeded(&func, &symbols, SEED).unwrap();
    set_scalar(&KernelAbi::of(&func).unwrap(), &mut inputs, "eps", 1e-5).unwrap();
    let k = CpuKernel::new(&func).unwrap();
    let mut one = inputs.clone();
    k.launch(&mut one, 1).unwrap();
    for threads in [2, 3, 8, 64] {
        let mut many = inputs.clone();
        let run = k.launch(&mut many, threads).unwrap();
        assert_eq!(run.threads, threads);
        assert_eq!(one, many, "{threads} threads");
    }
}

/// Compiling the same IR twice hits the cache.
#[test]
fn compiled_kernels_are_cached() {
    let src = sources().into_iter().find(|s| s.label.ends_with("vector_add.tsr")).expect("vector_add");
    let symbols = parse_dims("N=1000");
    let (_, func) = lower(&src, "vector_add", &symbols, false).remove(0);
    let a = CpuKernel::new(&func).unwrap();
    let b = CpuKernel::new(&func).unwrap();
    assert!(a.shares_code_with(&b));
    let (_, other) = lower(&src, "vector_add", &parse_dims("N=1000"), true).pop().unwrap();
    let c = CpuKernel::new(&other).unwrap();
    assert!(!a.shares_code_with(&c), "another configuration is other code");
}
