//! PTX generation: every kernel of the examples and of the test corpus (`tests/corpus`) emits for
//! sm_80 and sm_90, for its default configuration and every configuration of its
//! autotune space, and NVIDIA's `ptxas` assembles all of it. Snapshots pin the PTX of
//! two examples; emission is deterministic.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind, KeyValue, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::ptx::{nvdisasm, ptxas};
use tessera_passes::{default_config, tile_ir, Config, Target};

mod common;
#[path = "../../tests/support/kernel_sources.rs"]
mod kernel_sources;
use common::repo;

/// Every `.tsr` file of the corpus and the examples: (label, text).
fn sources() -> Vec<(String, String)> {
    kernel_sources::repository_files().into_iter().map(|s| (s.label, s.text)).collect()
}

/// One kernel × configuration × target.
struct Case {
    file: String,
    kernel: String,
    target: Target,
    config: String,
    default: bool,
    ptx: Result<String, String>,
    /// What ptxas said, when it ran.
    report: Option<Result<ptxas::PtxasReport, String>>,
}

/// Every kernel's default configuration and each configuration of its schedule space,
/// emitted (and, with `ptxas`, assembled) on as many threads as the machine has.
fn cases(targets: &[Target], all_configs: bool, ptxas: Option<&Path>) -> Vec<Case> {
    let queue = std::sync::Mutex::new(sources());
    let out = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some((path, text)) = queue.lock().unwrap().pop() else { break };
                let cases = file_cases(&path, text, targets, all_configs, ptxas);
                out.lock().unwrap().extend(cases);
            });
        }
    });
    let mut cases = out.into_inner().unwrap();
    cases.sort_by(|a, b| (&a.file, &a.kernel, a.target, &a.config).cmp(&(&b.file, &b.kernel, b.target, &b.config)));
    cases
}

fn file_cases(path: &str, text: String, targets: &[Target], all_configs: bool, ptxas: Option<&Path>) -> Vec<Case> {
    let mut out = Vec::new();
    let db = Database::default();
    let file = SourceFile::new(&db, path.into(), text, None);
    for entry in &item_index(&db, file).functions {
        let key = entry.key;
        if fn_signature(&db, key).kind != FunctionKind::Kernel {
            continue;
        }
        let kernel = key.name(&db).to_string();
        let case = |target, config: String, default, ptx| Case {
            file: path.to_string(),
            kernel: kernel.clone(),
            target,
            config,
            default,
            ptx,
            report: None,
        };
        let (default, _) = match default_config(&db, key, &BTreeMap::new()) {
            Ok(c) => c,
            Err(e) => {
                out.extend(targets.iter().map(|&t| case(t, "default".into(), true, Err(e.message.clone()))));
                continue;
            }
        };
        let mut configs: Vec<(Config, bool)> = vec![(default.clone(), true)];
        if all_configs {
            let space: Vec<ScheduleValue> =
                fn_decorators(&db, key).schedule.as_ref().map(|s| s.configurations()).unwrap_or_default();
            for schedule in space {
                let config = Config { schedule, shapes: default.shapes.clone() };
                if config != default {
                    configs.push((config, false));
                }
            }
        }
        for &target in targets {
            for (config, is_default) in &configs {
                // A `wgmma` candidate the target cannot take is pruned (W0702), not lowered.
                if tessera_passes::analysis::wgmma_problem(&db, key, config, target).is_some() {
                    continue;
                }
                let ptx = tile_ir(&db, key, config.clone(), target)
                    .clone()
                    .map_err(|e| format!("tile IR: {}", e.message))
                    .and_then(|tile| tessera_passes::ptx::emit(&tile, target).map(|c| c.text).map_err(|e| e.message));
                let mut c = case(target, config.to_string(), *is_default, ptx);
                if let (Some(ptxas), Ok(ptx)) = (ptxas, &c.ptx) {
                    c.report = Some(ptxas::assemble_with(ptxas, ptx, target.name()));
                }
                out.push(c);
            }
        }
    }
    out
}

/// Short form of a configuration: the schedule keys that vary in the corpus.
fn short(config: &str) -> String {
    config
        .split(", ")
        .filter(|kv| {
            [
                "BM=",
                "BN=",
                "BK=",
                "BLOCK=",
                "warps=",
                "stages=",
                "copy=tma",
                "producer=warpgroup",
                "producer=pingpong",
                "cluster_x=2",
                "cluster_y=2",
            ]
            .iter()
            .any(|k| kv.starts_with(k))
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_kernel_emits_and_assembles_for_every_configuration() {
    let all = std::env::var_os("TESSERA_PTX_DEFAULT_ONLY").is_none();
    let ptxas_path = ptxas::locate();
    if ptxas_path.is_none() {
        assert!(std::env::var_os("CI").is_none(), "ptxas is required in CI (set TESSERA_PTXAS)");
        eprintln!("\n!!!!! ptxas NOT FOUND: PTX is generated but NOT assembled (set TESSERA_PTXAS) !!!!!\n");
    }
    let cases = cases(&[Target::Sm80, Target::Sm90], all, ptxas_path.as_deref());
    let mut failures = Vec::new();
    // TESSERA_PTX_DUMP=dir writes every module there, for reading.
    let dump = std::env::var_os("TESSERA_PTX_DUMP").map(PathBuf::from);
    let mut rows: BTreeSet<String> = BTreeSet::new();
    for c in &cases {
        let what = format!("{} `{}` {} [{}]", c.file, c.kernel, c.target, c.config);
        if let (Some(dir), Ok(ptx)) = (&dump, &c.ptx) {
            let name = format!("{}_{}_{}_{}.ptx", c.file.replace('/', "_"), c.kernel, c.target, short(&c.config));
            std::fs::write(dir.join(name.replace(',', "_")), ptx).unwrap();
        }
        // ptxas calls a subroutine for a 64-bit `div`/`rem` even by a constant: those
        // are multiplies by the reciprocal (`ptx/arith.rs`).
        if let Ok(ptx) = &c.ptx {
            if let Some(line) = ptx.lines().find(|l| divides_wide_by_an_immediate(l)) {
                failures.push(format!("{what}: a 64-bit division by a constant: `{}`", line.trim()));
            }
        }
        match (&c.ptx, &c.report) {
            (Err(e), _) => failures.push(format!("{what}: {e}")),
            (Ok(_), Some(Err(e))) => failures.push(format!("{what}: ptxas: {e}")),
            (Ok(_), Some(Ok(r))) => {
                rows.insert(format!(
                    "{:<16} {:<6} {:<34} {:>4} {:>6} {:>6} {:>6}{}",
                    c.kernel,
                    c.target.name(),
                    short(&c.config),
                    r.registers,
                    r.spill_stores,
                    r.spill_loads,
                    r.stack_bytes,
                    if c.default { "  (default)" } else { "" }
                ));
            }
            (Ok(_), None) => {}
        }
    }
    if !rows.is_empty() {
        eprintln!(
            "{:<16} {:<6} {:<34} {:>4} {:>6} {:>6} {:>6}",
            "kernel", "target", "config", "regs", "spillS", "spillL", "stack"
        );
        for r in &rows {
            eprintln!("{r}");
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// `div.s64 %rd1, %rd2, 3;` and the like: a 64-bit division whose divisor is an immediate.
fn divides_wide_by_an_immediate(line: &str) -> bool {
    let line = line.trim().trim_end_matches(';');
    let Some((opcode, operands)) = line.split_once(' ') else { return false };
    let wide_division = ["div.s64", "div.u64", "rem.s64", "rem.u64"].contains(&opcode);
    wide_division && operands.rsplit(',').next().is_some_and(|d| d.trim().parse::<i64>().is_ok())
}

/// PTX of one example kernel (default configuration) and the Tile IR it came from.
fn example_ptx(
    file: &str,
    kernel: &str,
    target: Target,
) -> (tessera_passes::codegen::TargetCode, tessera_passes::ir::Func) {
    let path = repo().join("examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let db = Database::default();
    let source = SourceFile::new(&db, format!("examples/{file}").into(), text, None);
    let key = item_index(&db, source)
        .functions
        .iter()
        .map(|f| f.key)
        .find(|k| k.name(&db) == kernel)
        .unwrap_or_else(|| panic!("no kernel `{kernel}` in {file}"));
    let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap_or_else(|e| panic!("{}", e.message));
    let tile = tile_ir(&db, key, config, target).clone().unwrap_or_else(|e| panic!("{}", e.message));
    let code = tessera_passes::ptx::emit(&tile, target).unwrap_or_else(|e| panic!("{}", e.message));
    (code, (*tile).clone())
}

#[test]
fn vector_add_ptx_snapshot() {
    let (code, _) = example_ptx("vector_add.tsr", "vector_add", Target::Sm90);
    insta::assert_snapshot!("vector_add_sm_90", code.text);
}

#[test]
fn gemm_ptx_snapshot() {
    let (code, _) = example_ptx("gemm.tsr", "gemm", Target::Sm90);
    insta::assert_snapshot!("gemm_sm_90", code.text);
}

#[test]
fn emission_is_deterministic() {
    for (file, kernel) in [("gemm.tsr", "gemm"), ("flash_attention.tsr", "flash_attention"), ("softmax.tsr", "softmax")]
    {
        for target in [Target::Sm80, Target::Sm90] {
            let (a, _) = example_ptx(file, kernel, target);
            let (b, _) = example_ptx(file, kernel, target);
            assert_eq!(a, b, "{kernel} on {target}");
        }
    }
}

/// Every line has a location slot; instructions map back to the Tile IR op they
/// implement (the tensor-core instructions to the `tile.dot`), declarations to none.
#[test]
fn lines_map_to_their_tile_ops() {
    let (code, tile) = example_ptx("gemm.tsr", "gemm", Target::Sm90);
    assert_eq!(code.line_locs.len(), code.text.lines().count());
    let dot_loc = tile
        .walk()
        .into_iter()
        .map(|id| tile.op(id))
        .find(|op| op.kind == tessera_passes::ir::OpKind::Dot)
        .map(|op| op.loc.clone())
        .expect("gemm has a dot");
    let mut mmas = 0;
    for (line, loc) in code.text.lines().zip(&code.line_locs) {
        if line.contains("mma.sync") {
            assert_eq!(loc.as_ref(), Some(&dot_loc), "{line}");
            mmas += 1;
        }
        if line.starts_with(".version") || line.contains(".reg ") || line.contains(".param") {
            assert!(loc.is_none(), "{line} has a location");
        }
    }
    assert!(mmas > 0);
    assert_eq!(code.entry, "gemm");
    assert!(code.smem_bytes > 0);
}

// ----- mma = "wgmma" (sm_90a) -------------------------------------------------------------

/// The `wgmma` kernels of the fixture, and the GEMMs of the examples and the corpus under
/// each of their schedules with `mma = "wgmma"` set, where the rule admits it; each also
/// with `copy = "tma"` (its configuration says so).
fn wgmma_cases() -> Vec<(String, String, Result<String, String>)> {
    let files = [
        "tests/fixtures/wgmma/gemms.tsr",
        "tests/fixtures/wgmma/operands.tsr",
        "tests/fixtures/wgmma/fp8.tsr",
        "tests/fixtures/wgmma/int8.tsr",
        "examples/flash_attention.tsr",
        "tests/corpus/valid/flash_attention.tsr",
        "examples/gemm.tsr",
        "examples/linear_gelu.tsr",
        "tests/corpus/valid/gemm.tsr",
        "tests/corpus/valid/schedules.tsr",
        "tests/corpus/valid/search_spaces.tsr",
        "tests/corpus/valid/derived_kernels.tsr",
        // B is [K, N]: through the transposing stage.
        "examples/fp8_gemm.tsr",
        "tests/corpus/valid/fp8_gemm.tsr",
    ];
    let mut out = Vec::new();
    for f in files {
        common::for_each_kernel(f, |db, key| {
            let graph = tessera_passes::graph_ir(db, key).clone().unwrap();
            if !graph.walk().into_iter().any(|id| graph.op(id).kind == tessera_passes::ir::OpKind::Dot) {
                return;
            }
            let (default, _) = default_config(db, key, &BTreeMap::new()).unwrap();
            let space: Vec<ScheduleValue> =
                fn_decorators(db, key).schedule.as_ref().map(|s| s.configurations()).unwrap_or_default();
            let mut configs = vec![default.clone()];
            configs.extend(space.into_iter().map(|schedule| Config { schedule, shapes: default.shapes.clone() }));
            let mut seen = BTreeSet::new();
            for mut config in configs {
                config.schedule.set("mma", KeyValue::Str("wgmma".into()));
                if !seen.insert(config.to_string())
                    || tessera_passes::analysis::wgmma_problem(db, key, &config, Target::Sm90).is_some()
                {
                    continue;
                }
                let mut tma = config.clone();
                tma.schedule.set("copy", KeyValue::Str("tma".into()));
                // And with a producer warpgroup, where the rule admits one.
                let mut producer = tma.clone();
                producer.schedule.set("producer", KeyValue::Str("warpgroup".into()));
                // And with ping-pong consumers: two warpgroups of 64 rows.
                let mut pingpong = producer.clone();
                pingpong.schedule.set("producer", KeyValue::Str("pingpong".into()));
                pingpong.schedule.set("warps", KeyValue::Int(8));
                pingpong.schedule.set("BM", KeyValue::Int(128));
                let mut configs = vec![config, tma];
                for specialized in [producer, pingpong] {
                    let admitted = tessera_passes::warp_spec::producer_problem(&graph, &specialized, Target::Sm90)
                        .is_none()
                        && tessera_passes::analysis::wgmma_problem(db, key, &specialized, Target::Sm90).is_none();
                    if !admitted || !seen.insert(specialized.to_string()) {
                        continue;
                    }
                    // And in a cluster of two along the first axis that shares a load
                    // (else the second), where the rule admits one.
                    let clustered = ["cluster_x", "cluster_y"].into_iter().find_map(|axis| {
                        let mut c = specialized.clone();
                        c.schedule.set(axis, KeyValue::Int(2));
                        tessera_passes::cluster::cluster_problem(&graph, &c, Target::Sm90).is_none().then_some(c)
                    });
                    configs.push(specialized);
                    configs.extend(clustered.filter(|c| seen.insert(c.to_string())));
                }
                for config in configs {
                    let ptx = tile_ir(db, key, config.clone(), Target::Sm90)
                        .clone()
                        .map_err(|e| format!("tile IR: {}", e.message))
                        .and_then(|t| {
                            tessera_passes::ptx::emit(&t, Target::Sm90).map(|c| c.text).map_err(|e| e.message)
                        });
                    out.push((format!("{f} `{}`", key.name(db)), short(&config.to_string()), ptx));
                }
            }
        });
    }
    out
}

/// Every `wgmma` kernel is an sm_90a module that NVIDIA's `ptxas -arch=sm_90a` accepts,
/// and the SASS it produced runs the dot on `HGMMA` (`QGMMA` for fp8, `IGMMA` for int8; never `HMMA`, the
/// `mma.sync` path).
/// Without ptxas or nvdisasm the test says so loudly and fails under `CI=true`.
#[test]
fn wgmma_kernels_assemble_for_sm_90a_and_run_on_hgmma() {
    let in_ci = std::env::var_os("CI").is_some();
    let ptxas_path = ptxas::locate();
    let nvdisasm_path = nvdisasm::locate();
    if ptxas_path.is_none() {
        assert!(!in_ci, "ptxas is required in CI (set TESSERA_PTXAS)");
        eprintln!("\n!!!!! ptxas NOT FOUND: wgmma PTX is generated but NOT assembled (set TESSERA_PTXAS) !!!!!\n");
    }
    if nvdisasm_path.is_none() {
        assert!(!in_ci, "nvdisasm is required in CI (`cargo xtask install`, or set TESSERA_NVDISASM)");
        eprintln!("\n!!!!! nvdisasm NOT FOUND: the SASS of the wgmma kernels is NOT checked for HGMMA !!!!!\n");
    }
    let cases = wgmma_cases();
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for (what, config, ptx) in &cases {
        let ptx = match ptx {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{what} [{config}]: {e}"));
                continue;
            }
        };
        if !ptx.contains("\n.target sm_90a\n") || !ptx.contains("wgmma.mma_async") || ptx.contains("mma.sync") {
            failures.push(format!("{what} [{config}]: not an sm_90a module of wgmma instructions"));
            continue;
        }
        // Under copy="tma" the staged operands arrive by TMA boxes, never by cp.async chunks.
        let tma = config.contains("copy=tma");
        let staged = ptx.contains("cp.async.bulk.tensor") || ptx.contains("cp.async.cg");
        if tma && staged && (!ptx.contains("cp.async.bulk.tensor") || ptx.contains("cp.async.cg")) {
            failures.push(format!("{what} [{config}]: copy=\"tma\" but not every staged copy is a TMA box"));
        }
        let Some(ptxas) = &ptxas_path else { continue };
        let (report, cubin) = match ptxas::assemble_to_cubin(ptxas, ptx, "sm_90") {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{what} [{config}]: ptxas -arch=sm_90a: {e}"));
                continue;
            }
        };
        let mut sass_note = String::from("(SASS not checked)");
        if let Some(nvdisasm) = &nvdisasm_path {
            match nvdisasm::disassemble(nvdisasm, &cubin) {
                Ok(sass) => {
                    // FP8 warpgroup MMAs are `QGMMA` in SASS, int8 ones `IGMMA`, 16-bit ones `HGMMA`.
                    let gmma = |l: &&str| ["HGMMA.", "QGMMA.", "IGMMA."].iter().any(|g| l.contains(g));
                    let hgmma = sass.lines().filter(gmma).count();
                    let hmma = sass.lines().filter(|l| l.contains("HMMA.")).count();
                    let first = sass.lines().find(gmma).map(|l| l.trim().to_string());
                    if hgmma == 0 || hmma != 0 {
                        failures
                            .push(format!("{what} [{config}]: {hgmma} HGMMA/QGMMA/IGMMA and {hmma} HMMA in the SASS"));
                    }
                    let utmaldg = sass.lines().filter(|l| l.contains("UTMALDG")).count();
                    let ldgsts = sass.lines().filter(|l| l.contains("LDGSTS")).count();
                    if tma && staged && (utmaldg == 0 || ldgsts != 0) {
                        failures.push(format!("{what} [{config}]: {utmaldg} UTMALDG and {ldgsts} LDGSTS in the SASS"));
                    }
                    // A TMA store in the PTX is a UTMASTG in the SASS.
                    let utmastg = sass.lines().filter(|l| l.contains("UTMASTG")).count();
                    if ptx.contains(".global.shared::cta") != (utmastg > 0) {
                        failures
                            .push(format!("{what} [{config}]: the PTX's TMA stores and {utmastg} UTMASTG disagree"));
                    }
                    // A producer warpgroup moves registers with `setmaxnreg`: USETMAXREG in
                    // the SASS (ptxas drops it from a kernel without `.minnctapersm 1`).
                    let setmaxreg = sass.lines().filter(|l| l.contains("USETMAXREG")).count();
                    let producer = config.contains("producer=warpgroup") || config.contains("producer=pingpong");
                    if producer != (setmaxreg == 2) {
                        failures.push(format!("{what} [{config}]: {setmaxreg} USETMAXREG in the SASS"));
                    }
                    // Ping-pong's turns: each warpgroup's wait (barriers 2 and 3) and its
                    // arrival at the other's, on named barriers of 256 threads.
                    if config.contains("producer=pingpong") {
                        for turn in [
                            "BAR.SYNC.DEFER_BLOCKING 0x2, 0x100",
                            "BAR.SYNC.DEFER_BLOCKING 0x3, 0x100",
                            "BAR.ARV 0x2, 0x100",
                            "BAR.ARV 0x3, 0x100",
                        ] {
                            if !sass.contains(turn) {
                                failures.push(format!("{what} [{config}]: no `{turn}` in the SASS"));
                            }
                        }
                    }
                    // A cluster's multicast loads and its barriers.
                    if config.contains("cluster_") {
                        for needed in ["MULTICAST", "UCGABAR_ARV", "UCGABAR_WAIT"] {
                            if !sass.contains(needed) {
                                failures.push(format!("{what} [{config}]: no `{needed}` in the SASS"));
                            }
                        }
                    }
                    sass_note = format!(
                        "{hgmma:>3} GMMA {utmaldg:>2} UTMALDG {utmastg} UTMASTG {setmaxreg} USETMAXREG  {}",
                        first.unwrap_or_default()
                    );
                }
                Err(e) => failures.push(format!("{what} [{config}]: nvdisasm: {e}")),
            }
        }
        rows.push(format!(
            "{what:<58} {config:<34} {:>4} regs {:>5} spill  {sass_note}",
            report.registers, report.spill_stores
        ));
    }
    for r in &rows {
        eprintln!("{r}");
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    // The fixture's five kernels, and the example and corpus GEMMs under their schedules.
    assert!(cases.len() >= 20, "only {} wgmma configurations", cases.len());
    let tma = cases
        .iter()
        .filter(|(_, c, ptx)| c.contains("copy=tma") && ptx.as_ref().is_ok_and(|p| p.contains("cp.async.bulk.tensor")));
    assert!(tma.count() >= 20, "too few copy=\"tma\" configurations with TMA copies");
    // Their epilogues store through the TMA where the rule allows (top level, rows in a
    // descriptor swizzle, the buffer fits).
    let stores = cases.iter().filter(|(_, c, ptx)| {
        c.contains("copy=tma") && ptx.as_ref().is_ok_and(|p| p.contains("cp.async.bulk.tensor.2d.global.shared::cta"))
    });
    assert!(stores.count() >= 10, "too few copy=\"tma\" configurations with TMA stores");
    let producers = cases.iter().filter(|(_, c, ptx)| {
        c.contains("producer=warpgroup") && ptx.as_ref().is_ok_and(|p| p.contains("setmaxnreg.dec"))
    });
    assert!(producers.count() >= 10, "too few configurations with a producer warpgroup");
    // Flash attention (FlashAttention-3's structure) with a producer, and with ping-pong.
    for producer in ["producer=warpgroup", "producer=pingpong"] {
        let attention = cases.iter().filter(|(what, c, ptx)| {
            what.contains("attention")
                && c.contains(producer)
                && ptx.as_ref().is_ok_and(|p| p.contains("setmaxnreg.dec"))
        });
        assert!(attention.count() >= 2, "too few attention configurations with {producer}");
    }
    let pingpong = cases.iter().filter(|(_, c, ptx)| {
        c.contains("producer=pingpong") && ptx.as_ref().is_ok_and(|p| p.contains("bar.arrive 2, 256"))
    });
    assert!(pingpong.count() >= 10, "too few configurations with ping-pong consumers");
    let clusters = cases
        .iter()
        .filter(|(_, c, ptx)| c.contains("cluster_") && ptx.as_ref().is_ok_and(|p| p.contains(".multicast::cluster")));
    assert!(clusters.count() >= 10, "too few configurations in clusters");
}

/// FP8 sums are promoted (`ptx::wgmma`): in a K loop each chain of fp8 `wgmma`s sums at
/// most `FP8_PROMOTION_K` elements of K from zero (`scale-d` false on its first
/// instruction) into scratch registers, waits for them (`wait_group 0`: never left in
/// flight) and adds them to the accumulator in f32. A 16-bit GEMM keeps accumulating in
/// place. Under each staging the fp8 kernels admit.
#[test]
fn fp8_wgmma_sums_are_promoted_to_f32_every_128_elements_of_k() {
    let k_per_instruction = 32;
    let limit = (tessera_passes::wgmma::FP8_PROMOTION_K / k_per_instruction) as usize;
    let mut checked = 0;
    for (what, config, ptx) in wgmma_cases() {
        let ptx = ptx.unwrap_or_else(|e| panic!("{what} [{config}]: {e}"));
        let fp8 = ptx.contains(".e4m3.") || ptx.contains(".e5m2.");
        let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
        let mut promoted_chunks = 0;
        for (i, line) in lines.iter().enumerate().filter(|(_, l)| l.starts_with("wgmma.fence")) {
            let end = i + lines[i..].iter().position(|l| l.starts_with("wgmma.commit_group")).unwrap();
            let mmas: Vec<&str> = lines[i..end].iter().copied().filter(|l| l.starts_with("wgmma.mma_async")).collect();
            let Some(first) = mmas.first() else { continue };
            // The chain's accumulator registers: `{%f1, ...}`.
            let d = |l: &str| l.split('}').next().unwrap().to_string();
            let chain = mmas.iter().filter(|l| d(l) == d(first)).count();
            let adds = lines[end..].iter().skip(2).take_while(|l| l.starts_with("add.f32")).count();
            if !fp8 {
                assert_eq!(adds, 0, "{what} [{config}]: a 16-bit wgmma is promoted");
                continue;
            }
            assert!(chain <= limit, "{what} [{config}]: {chain} fp8 wgmmas in one chain at {line}");
            if adds > 0 {
                assert_eq!(lines[end + 1], "wgmma.wait_group.sync.aligned 0;", "{what} [{config}]: promoted in flight");
                promoted_chunks += 1;
            }
        }
        if fp8 {
            // Every fp8 kernel here sums K in a loop: its chunks are promoted.
            assert!(promoted_chunks > 0, "{what} [{config}]: no fp8 chunk is added to the accumulator");
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} fp8 configurations");
}
