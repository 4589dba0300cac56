//! The NVIDIA backend on a real GPU: every kernel of the contract corpus, the examples
//! and the stdlib, at two shapes each (one a multiple of the tile sizes, one not),
//! against the reference interpreter running the same GPU Tile IR on the same seeded
//! inputs. Without a GPU the test says so loudly and passes, unless
//! `TESSERA_REQUIRE_GPU` is set.

#![cfg(feature = "cuda")]

use std::collections::BTreeMap;

use tessera_backends::cuda::{GpuDevice, GpuError};
use tessera_backends::interp::inputs::{make_nonnegative, seeded, set_scalar};
use tessera_backends::interp::{compare_outputs, run_kernel};
use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::abi::{AbiParam, KernelAbi};
use tessera_passes::{default_config, tile_ir};

// The Hopper cases the PTX emulator runs (`cuda_emulator.rs`).
mod hopper_cases;
#[path = "../../tests/support/kernel_sources.rs"]
mod kernel_sources;

use hopper_cases::{
    gemm_files, has_byte_tensors, lower_cases, lower_cases_for, shapes_of, Case, Staging, ATTENTION_FILES,
};
use kernel_sources::{parse_dims, Source};
use tessera_passes::Target;

const SEED: u64 = 20240611;

/// Two shapes per kernel: one a multiple of the tiles, one ragged.
fn shapes(kernel: &str, abi: &KernelAbi, shape_symbols: &BTreeMap<String, i64>) -> [String; 2] {
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
        "saxpy" => Some(["n=1024", "n=1000"]),
        "vector_add" => Some(["N=4096", "N=1001"]),
        _ => None,
    };
    if let Some(k) = known {
        return k.map(String::from);
    }
    let mut symbols = std::collections::BTreeSet::new();
    for p in &abi.params {
        if let AbiParam::Tensor { dims, .. } = p {
            symbols.extend(dims.iter().flat_map(|d| d.symbols()));
        }
    }
    [256, 100].map(|n| {
        symbols
            .iter()
            .map(|s| format!("{s}={}", shape_symbols.get(s).copied().unwrap_or(n)))
            .collect::<Vec<_>>()
            .join(",")
    })
}

#[test]
fn every_kernel_matches_the_interpreter_on_the_gpu() {
    let device = match GpuDevice::open() {
        Ok(d) => d,
        Err(GpuError::NoGpu(why)) => {
            assert!(std::env::var_os("TESSERA_REQUIRE_GPU").is_none(), "a GPU is required: {why}");
            eprintln!("\n!!!!! NO GPU: the NVIDIA backend was NOT run ({why}) !!!!!\n");
            return;
        }
        Err(e) => panic!("opening the GPU failed: {e}"),
    };
    let target = device.target().unwrap();
    eprintln!("running on {} ({target})", device.name());
    let mut failures = Vec::new();
    let mut covered = 0;
    for Source { label, path, text } in kernel_sources::every_source() {
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone(), text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let kernel = entry.key.name(&db).to_string();
            let Ok((config, _)) = default_config(&db, entry.key, &BTreeMap::new()) else { continue };
            let func = match tile_ir(&db, entry.key, config.clone(), target).clone() {
                Ok(f) => f,
                Err(e) => {
                    failures.push(format!("{label} `{kernel}`: tile IR: {}", e.message));
                    continue;
                }
            };
            let abi = KernelAbi::of(&func).unwrap();
            let code = match tessera_passes::ptx::emit(&func, target) {
                Ok(c) => c,
                Err(e) => {
                    failures.push(format!("{label} `{kernel}`: PTX: {}", e.message));
                    continue;
                }
            };
            let loaded = match device.load(&code) {
                Ok(k) => k,
                Err(e) => {
                    failures.push(format!("{label} `{kernel}`: {e}"));
                    continue;
                }
            };
            for spec in shapes(&kernel, &abi, &config.shapes) {
                let symbols = parse_dims(&spec);
                let what = format!("{label} `{kernel}` [{spec}]");
                let mut inputs = match seeded(&func, &symbols, SEED) {
                    Ok(a) => a,
                    Err(e) => {
                        failures.push(format!("{what}: inputs: {e}"));
                        continue;
                    }
                };
                for (name, v) in [("eps", 1e-5), ("causal", 1.0)] {
                    let _ = set_scalar(&abi, &mut inputs, name, v);
                }
                if kernel == "fused_adam" {
                    // A second moment is never negative (seeded normals would give NaN).
                    make_nonnegative(&abi, &mut inputs, "V").unwrap();
                }
                let mut expected = inputs.clone();
                if let Err(e) = run_kernel(&func, &mut expected) {
                    eprintln!("SKIPPED {what}: no oracle: {e}");
                    continue;
                }
                let mut actual = inputs.clone();
                match device.launch(&loaded, &mut actual, 3) {
                    Ok(run) => eprintln!(
                        "{what}: {} registers, {:.3} ms",
                        run.registers,
                        run.times_ms.iter().copied().fold(f64::INFINITY, f64::min)
                    ),
                    Err(e) => {
                        failures.push(format!("{what}: {e}"));
                        continue;
                    }
                }
                covered += 1;
                for o in compare_outputs(&func, &expected, &actual) {
                    if !o.comparison.passed {
                        failures.push(format!("{what}: output `{}`: {}", o.name, o.comparison));
                    }
                }
            }
        }
    }
    assert!(covered > 0, "no kernel ran");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Opens the GPU, or says loudly why not (and fails where `TESSERA_REQUIRE_GPU` is set).
fn gpu_or_skip() -> Option<GpuDevice> {
    match GpuDevice::open() {
        Ok(d) => Some(d),
        Err(GpuError::NoGpu(why)) => {
            assert!(std::env::var_os("TESSERA_REQUIRE_GPU").is_none(), "a GPU is required: {why}");
            eprintln!("\n!!!!! NO GPU: the NVIDIA backend was NOT run ({why}) !!!!!\n");
            None
        }
        Err(e) => panic!("opening the GPU failed: {e}"),
    }
}

/// Beside the emulator's shapes (`shapes_of`), one the GPU runs quickly and the emulator
/// would not: many programs (whole clusters and a ragged last one), many K iterations
/// (every stage of the ring reused), and for attention a causal mask. (D stays the
/// configuration's 64, which the kernel is compiled for; the test lowers attention for
/// D = 128 separately.)
fn larger_shape(case: &Case) -> &'static str {
    if case.kernel.contains("attention") {
        "BH=3,S=328,D=64"
    } else if has_byte_tensors(&case.func) {
        "M=264,N=208,K=400"
    } else {
        "M=264,N=200,K=392"
    }
}

/// The Hopper schedules on an sm_90 GPU: every case the emulator checks (`wgmma` with
/// `cp.async` or TMA copies, a producer warpgroup, ping-pong consumers, clusters of 2x1,
/// 1x2 and 2x2 with TMA multicast), at the emulator's shapes and a larger one, against
/// the Graph IR's f64 reference (no Tile IR pass, interpreter or PTX in it).
#[test]
fn hopper_schedules_match_the_f64_reference_on_the_gpu() {
    // Lowered first, so that without a GPU the test still checks that every case lowers
    // with the PTX its staging asks for.
    let only = std::env::var("TESSERA_HOPPER_ONLY").ok();
    let gemms = gemm_files(&[]);
    let corpus_attention = [("tests/corpus/valid/flash_attention.tsr", true)];
    let plan: Vec<(&[(&str, bool)], Staging)> = vec![
        (&gemms, Staging::Own),
        (&gemms, Staging::Tma),
        (&gemms, Staging::Producer),
        (&gemms, Staging::PingPong),
        (&gemms, Staging::Cluster([2, 1])),
        (&gemms, Staging::Cluster([1, 2])),
        (&gemms, Staging::Cluster([2, 2])),
        (&gemms, Staging::ClusterPingPong([2, 1])),
        (ATTENTION_FILES, Staging::Own),
        (ATTENTION_FILES, Staging::Tma),
        (ATTENTION_FILES, Staging::Producer),
        (ATTENTION_FILES, Staging::PingPong),
        (&corpus_attention, Staging::Cluster([1, 2])),
        (&corpus_attention, Staging::ClusterPingPong([1, 2])),
    ];
    let mut failures = Vec::new();
    let mut lowered = Vec::new();
    for (files, staging) in plan {
        let (cases, skipped, lowering) = lower_cases(files, staging, only.as_deref());
        eprintln!("== {staging:?}: {} cases, {} not admitted", cases.len(), skipped.len());
        failures.extend(lowering);
        lowered.push((staging, cases));
    }
    // Attention compiled for D = 128, the benchmark's head dim (twice the registers of
    // the accumulator and of P), at one causal shape.
    let d128 = BTreeMap::from([("D".to_string(), 128)]);
    let mut head_dim_128 = Vec::new();
    for staging in [Staging::Own, Staging::Tma, Staging::Producer, Staging::PingPong] {
        let (cases, skipped, lowering) = lower_cases_for(ATTENTION_FILES, staging, only.as_deref(), &d128);
        eprintln!("== {staging:?} at D = 128: {} cases, {} not admitted", cases.len(), skipped.len());
        failures.extend(lowering);
        head_dim_128.push((staging, cases));
    }
    assert!(failures.is_empty(), "{} cases failed to lower:\n{}", failures.len(), failures.join("\n"));
    let Some(device) = gpu_or_skip() else { return };
    let target = device.target().unwrap();
    if target != Target::Sm90 {
        eprintln!("\n!!!!! NOT an sm_90 GPU ({target}): the Hopper schedules were NOT run !!!!!\n");
        return;
    }
    let mut ran = 0;
    let runs = lowered
        .iter()
        .map(|(staging, cases)| (staging, cases, None))
        .chain(head_dim_128.iter().map(|(staging, cases)| (staging, cases, Some(&["BH=2,S=300,D=128"][..]))));
    for (staging, cases, shapes) in runs {
        for case in cases {
            let loaded = match device.load(&case.code) {
                Ok(k) => k,
                Err(e) => {
                    failures.push(format!("{staging:?} {}: load: {e}", case.name()));
                    continue;
                }
            };
            // (shape, causal): the emulator's shapes as it runs them, the GPU's own causal
            // (a kernel without a `causal` parameter ignores it).
            let specs: Vec<(&str, bool)> = match shapes {
                Some(given) => given.iter().map(|&s| (s, true)).collect(),
                None => shapes_of(&case.kernel, &case.config, &case.func)
                    .iter()
                    .map(|&s| (s, false))
                    .chain([(larger_shape(case), true)])
                    .collect(),
            };
            for (spec, causal) in specs {
                let what = format!("{staging:?} {} at {spec}", case.name());
                let mut inputs = seeded(&case.func, &parse_dims(spec), SEED).unwrap();
                if causal {
                    let _ = set_scalar(&case.code.abi, &mut inputs, "causal", 1.0);
                }
                failures.extend(case.check(&what, &inputs, |actual| {
                    let run = device.launch(&loaded, actual, 1).map_err(|e| e.to_string())?;
                    eprintln!("{what}: {} registers, {:.3} ms", run.registers, run.times_ms[0]);
                    Ok(())
                }));
                ran += 1;
            }
        }
    }
    eprintln!("{ran} Hopper launches, {} failures", failures.len());
    assert!(ran > 0, "no Hopper case ran");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// The emulator's random schedules (`hopper_cases::random`: GEMMs and attention under
/// random tiles, warps, stages and stagings, on sm_90a and sm_80, at random ragged
/// shapes) on the GPU against the f64 reference. On an sm_80 GPU only the sm_80 draws
/// run. `TESSERA_RANDOM_SCHEDULES` and `TESSERA_RANDOM_SEED` as for the emulator.
#[test]
fn random_schedules_match_the_f64_reference_on_the_gpu() {
    let count: usize = std::env::var("TESSERA_RANDOM_SCHEDULES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let seed: u64 = std::env::var("TESSERA_RANDOM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(2026);
    let drawn = hopper_cases::random::random_cases(seed, count, &[], &|_| None);
    assert!(
        drawn.failures.is_empty(),
        "{} draws failed to lower:\n{}",
        drawn.failures.len(),
        drawn.failures.join("\n")
    );
    let Some(device) = gpu_or_skip() else { return };
    let target = device.target().unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for d in drawn.cases.iter().filter(|d| target == Target::Sm90 || d.target == target) {
        let loaded = match device.load(&d.case.code) {
            Ok(k) => k,
            Err(e) => {
                failures.push(format!("{}: load: {e}", d.what));
                continue;
            }
        };
        let inputs = seeded(&d.case.func, &parse_dims(&d.shape), SEED).unwrap();
        let result = d
            .case
            .check(&d.what, &inputs, |actual| device.launch(&loaded, actual, 1).map(|_| ()).map_err(|e| e.to_string()));
        eprintln!("{} {}", if result.is_empty() { "ok  " } else { "FAIL" }, d.what);
        failures.extend(result);
        ran += 1;
    }
    eprintln!("{ran} random schedules on the GPU ({target}), {} failures", failures.len());
    assert!(ran > 0, "no random schedule ran");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// A kernel that needs more shared memory than a block can have is refused at load, with
/// the figures, and the device keeps working. (On an H200 this hung `tessera run`: the
/// refused kernel unloaded its module on drop, taking the lock `load` still held.)
#[test]
fn a_kernel_over_the_shared_memory_limit_is_refused_without_hanging() {
    let Some(device) = gpu_or_skip() else { return };
    let target = device.target().unwrap();
    let Source { path, text, .. } =
        kernel_sources::repository_files().into_iter().find(|s| s.label == "valid/vector_add.tsr").unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, path, text, None);
    let key = item_index(&db, file).functions[0].key;
    let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
    let func = tile_ir(&db, key, config, target).clone().unwrap();
    let code = tessera_passes::ptx::emit(&func, target).unwrap();
    let mut oversized = code.clone();
    oversized.smem_bytes = 1 << 20;
    match device.load(&oversized) {
        Err(GpuError::Resources(m)) => assert!(m.contains("shared memory"), "{m}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a kernel needing 1 MiB of shared memory per block loaded"),
    }
    device.load(&code).expect("the device no longer loads kernels after a refusal");
}
