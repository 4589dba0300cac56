//! The NVIDIA backend on a real GPU: every kernel of the contract corpus, the examples
//! and the stdlib, at two shapes each (one a multiple of the tile sizes, one not),
//! against the reference interpreter running the same GPU Tile IR on the same seeded
//! inputs. Without a GPU the test says so loudly and passes, unless
//! `TESSERA_REQUIRE_GPU` is set.

#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_backends::cuda::{GpuDevice, GpuError};
use tessera_backends::interp::inputs::{make_nonnegative, seeded, set_scalar};
use tessera_backends::interp::{compare_outputs, run_kernel};
use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::abi::{AbiParam, KernelAbi};
use tessera_passes::{default_config, tile_ir};

const SEED: u64 = 20240611;

fn sources() -> Vec<(String, PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let dirs = [root.join("examples"), root.join("tests/corpus/valid")];
    let mut out = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
            .collect();
        files.sort();
        for path in files {
            let label = format!(
                "{}/{}",
                path.parent().unwrap().file_name().unwrap().to_string_lossy(),
                path.file_name().unwrap().to_string_lossy()
            );
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((label, path, text));
        }
    }
    for (name, text) in tessera_frontend::stdlib::FILES {
        out.push((format!("stdlib/{name}"), PathBuf::from(name), text.to_string()));
    }
    out
}

fn parse_dims(spec: &str) -> BTreeMap<String, i64> {
    spec.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

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
    for (label, path, text) in sources() {
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
