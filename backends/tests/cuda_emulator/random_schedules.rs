//! Random Hopper schedules through the emulator: each case draws a GEMM or attention
//! kernel, tile sizes, warps, stages and a staging (wgmma with cp.async, TMA, a producer
//! warpgroup, ping-pong consumers, a cluster), keeps it when the autotuner would (no
//! Hopper rule or budget refuses it), and runs it at a random ragged shape against the
//! f64 reference of the kernel's Graph IR. The fixed cases above pin each kernel's own
//! schedule; this reaches the combinations nobody wrote down.
//!
//! `TESSERA_RANDOM_SCHEDULES=N` runs N cases instead of the default, and
//! `TESSERA_RANDOM_SEED=S` draws from another seed (a failure prints both).

use std::collections::BTreeMap;

use tessera_backends::interp::inputs::seeded;
use tessera_frontend::check::{fn_signature, FunctionKind, KeyValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::ir::OpKind;
use tessera_passes::{default_config, graph_ir, tile_ir, Target};

use super::execute::emulate;
use crate::hopper_cases::{gemm_files, has_byte_tensors, root, with_wgmma, Case, Staging, ATTENTION_FILES};

/// SplitMix64: a small, seedable generator whose draws a failure message can replay.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    /// A value in `1..=max` rounded up to a multiple of `step`.
    fn dim(&mut self, max: i64, step: i64) -> i64 {
        let v = 1 + (self.next() % max as u64) as i64;
        (v + step - 1) / step * step
    }
}

#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Family {
    Gemm,
    Attention,
    /// No dot: elementwise, reductions, the op kernels.
    Other,
}

const STAGINGS: &[Staging] = &[
    Staging::Own,
    Staging::Tma,
    Staging::Producer,
    Staging::PingPong,
    Staging::Cluster([2, 1]),
    Staging::Cluster([1, 2]),
    Staging::ClusterPingPong([2, 1]),
];

#[test]
fn random_hopper_schedules_compute_what_the_reference_computes() {
    let count: usize = std::env::var("TESSERA_RANDOM_SCHEDULES").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let seed: u64 = std::env::var("TESSERA_RANDOM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(2026);
    // Every kernel with a dot of the Hopper cases' files, and every kernel without one of
    // the emulator's sources (its op kernels, the corpus, the examples).
    let mut files: Vec<(String, String, bool)> = gemm_files(&[])
        .into_iter()
        .map(|(f, _)| f)
        .chain(ATTENTION_FILES.iter().map(|(f, _)| *f))
        .map(|f| (f.to_string(), std::fs::read_to_string(root().join(f)).unwrap(), true))
        .collect();
    files.extend(super::sources().into_iter().map(|s| (s.label, s.text, false)));
    let mut kernels: Vec<(String, String, String, Family)> = Vec::new();
    for (label, text, hopper_file) in &files {
        let db = Database::default();
        let file = SourceFile::new(&db, root().join(label), text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let Ok(graph) = graph_ir(&db, entry.key).clone() else { continue };
            let name = entry.key.name(&db).to_string();
            let family = if name.contains("attention") {
                Family::Attention
            } else if graph.walk().into_iter().any(|id| graph.op(id).kind == OpKind::Dot) {
                Family::Gemm
            } else {
                Family::Other
            };
            // The repository's kernels with a dot are the Hopper files' already (the op
            // kernels' are not); those without one run at a shape of the emulator's
            // table, resized.
            let wanted = if *hopper_file {
                family != Family::Other
            } else {
                (family == Family::Other || label == "ops.tsr") && !super::shapes(&name).is_empty()
            };
            if wanted {
                kernels.push((label.clone(), text.clone(), name, family));
            }
        }
    }
    kernels.sort();
    kernels.dedup();
    let mut draws = Draws(seed);
    let (mut ran, mut refused, mut failures) = (0, BTreeMap::<String, usize>::new(), Vec::new());
    let mut attempts = 0;
    while ran < count && attempts < count * 50 {
        attempts += 1;
        // Half the draws are GEMMs, a quarter attention, a quarter kernels without a dot.
        let family = draws.pick(&[Family::Gemm, Family::Gemm, Family::Attention, Family::Other]);
        let pool: Vec<_> = kernels.iter().filter(|k| k.3 == family).collect();
        let (label, text, kernel, _) = pool[(draws.next() % pool.len() as u64) as usize].clone();
        // One draw in four is Ampere: sm_80 with mma.sync and cp.async.
        let target = if draws.next().is_multiple_of(4) { Target::Sm80 } else { Target::Sm90 };
        let staging = draws.pick(STAGINGS);
        let db = Database::default();
        let file = SourceFile::new(&db, root().join(&label), text, None);
        let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel.as_str()).unwrap().key;
        // Attention's head dim is compiled in: 64 or 128.
        let dims: BTreeMap<String, i64> = if family == Family::Attention {
            [("D".to_string(), draws.pick(&[64, 128]))].into()
        } else {
            BTreeMap::new()
        };
        let Ok((default, _)) = default_config(&db, key, &dims) else { continue };
        let mut config =
            if target == Target::Sm80 || family == Family::Other { default } else { with_wgmma(&default, staging) };
        for (name, values) in [
            ("BM", &[64i64, 128][..]),
            ("BN", &[32, 64, 128, 256]),
            ("BK", &[16, 32, 64]),
            ("warps", &[4, 8]),
            ("stages", &[2, 3, 4]),
            ("vector", &[1, 2, 4, 8]),
        ] {
            // Ping-pong fixes warps and BM (two consumer warpgroups of 64 rows).
            let fixed = target == Target::Sm90
                && matches!(staging, Staging::PingPong | Staging::ClusterPingPong(_))
                && matches!(name, "BM" | "warps");
            if config.schedule.get(name).is_some() && !fixed {
                config.schedule.set(name, KeyValue::Int(draws.pick(values)));
            }
        }
        if let Some(reason) = tessera_passes::analysis::prune_reason(&db, key, &config, target) {
            *refused.entry(reason.category().to_string()).or_default() += 1;
            continue;
        }
        let what = format!("seed {seed} case {ran}: {label} `{kernel}` on {} [{config}]", target.name());
        let func = match tile_ir(&db, key, config.clone(), target).clone() {
            Ok(f) => (*f).clone(),
            Err(e) => {
                failures.push(format!("{what}: tile IR: {}", e.message));
                continue;
            }
        };
        let code = match tessera_passes::ptx::emit(&func, target) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{what}: PTX: {}", e.message));
                continue;
            }
        };
        // A ragged shape; under TMA, rows stay multiples of 16 bytes (a tensor map's strides).
        let tma = config.copy() == tessera_frontend::check::CopyEngine::Tma;
        let align = if !tma {
            1
        } else if has_byte_tensors(&func) {
            16
        } else {
            8
        };
        let shape = match family {
            Family::Attention => {
                let d = config.shapes.get("D").copied().unwrap_or(64);
                format!("BH={},S={},D={d}", draws.dim(2, 1), draws.dim(160, 1))
            }
            Family::Gemm => format!("M={},N={},K={}", draws.dim(160, 1), draws.dim(200, align), draws.dim(160, align)),
            // Each symbol of the table's first shape, anywhere up to one and a half times it.
            Family::Other => super::shapes(&kernel)[0]
                .split(',')
                .map(|p| {
                    let (symbol, value) = p.split_once('=').unwrap();
                    let value: i64 = value.parse().unwrap();
                    format!("{symbol}={}", draws.dim(value + value / 2, 1))
                })
                .collect::<Vec<_>>()
                .join(","),
        };
        let what = format!("{what} at {shape}");
        let graph = (*graph_ir(&db, key).clone().unwrap()).clone();
        let case = Case { label: label.clone(), kernel: kernel.clone(), graph, config, func, code };
        let dims = crate::kernel_sources::parse_dims(&shape);
        let inputs = match seeded(&case.func, &dims, super::SEED) {
            Ok(i) => i,
            Err(e) => {
                failures.push(format!("{what}: inputs: {e}"));
                continue;
            }
        };
        let result = case.check(&what, &inputs, |actual| emulate(&case.code, actual).map(|_| ()));
        eprintln!("{} {what}", if result.is_empty() { "ok  " } else { "FAIL" });
        failures.extend(result);
        ran += 1;
    }
    eprintln!("{ran} random schedules ran in {attempts} draws; refused: {refused:?}");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(ran, count, "only {ran} of {count} draws were admitted");
}
