//! End-to-end tests of `tessera autotune` (TOOLS.md §3, LANGUAGE.md §7) through the real
//! binary, each in a temporary directory so the cache (`.tessera/schedules`, relative to
//! the current directory) starts empty: the table, the cache file, the cache hit of a
//! second search, `--force`, `tessera run` picking the winner up, pruning, and refusals.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("NO_COLOR");
    cmd
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name).display().to_string()
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    tessera().args(args).current_dir(dir).output().expect("tessera runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(o), stderr(o)))
}

fn cache_files(dir: &Path) -> Vec<PathBuf> {
    let d = dir.join(".tessera/schedules");
    let mut out: Vec<PathBuf> = match std::fs::read_dir(&d) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// The report with what changes from run to run masked: times and rates, the rank
/// (configurations that take about as long swap places), the winner, the cache file's
/// hash, the repository's path and the thread count. Table rows are sorted and their
/// spacing collapsed (column widths follow the numbers).
fn stable(text: &str) -> String {
    let repo = env!("CARGO_MANIFEST_DIR");
    let mut out = Vec::new();
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.replace(repo, "<repo>").replace(&format!("({} threads)", threads()), "(N threads)");
        if line.starts_with("rank") {
            in_table = true;
            let header = line.split_whitespace().collect::<Vec<_>>().join(" ");
            let header = ["kB/s", "MB/s", "GB/s", "TB/s"].iter().fold(header, |h, u| h.replace(u, "B/s"));
            out.push(header);
            continue;
        }
        if in_table && line.trim().is_empty() {
            rows.sort();
            out.append(&mut rows);
            in_table = false;
        }
        if in_table {
            let cells: Vec<String> = line
                .split_whitespace()
                .enumerate()
                .map(|(i, w)| {
                    if i == 0 || (w.contains('.') && w.starts_with(|c: char| c.is_ascii_digit())) {
                        "#".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            rows.push(cells.join(" "));
        } else if let Some(rest) = line.strip_prefix("cached    ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            let masked = name.rsplit_once('-').map(|(k, _)| format!("{k}-#.json")).unwrap_or(name.to_string());
            out.push(format!("cached    {}", rest.replace(name, &masked)));
        } else if line.starts_with("winner") {
            out.push("winner    #".to_string());
        } else {
            out.push(line.to_string());
        }
    }
    rows.sort();
    out.append(&mut rows);
    out.join("\n")
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn a_search_is_cached_then_hit_then_forced_and_used_by_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("vector_add.tsr");
    let args = ["autotune", &file, "--kernel", "vector_add", "--dims", "N=3000", "--device", "interp", "--repeat", "1"];
    let o = run_in(dir.path(), &args);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("space     3 configurations of BLOCK: 0 pruned, 3 measured"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("rank") && l.contains("BLOCK") && l.contains("median ms")), "{text}");
    assert!(text.contains("winner    BLOCK="), "{text}");
    let files = cache_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(name.starts_with("vector_add-") && name.ends_with(".json"), "{name}");
    assert!(text.contains(&format!("cached    .tessera/schedules/{name}")), "{text}");
    let cached: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(cached["key"]["shapes"], serde_json::json!({"N": 3000}));
    assert_eq!(cached["key"]["dtypes"], serde_json::json!({"x": "f32", "y": "f32", "out": "f32"}));
    assert_eq!(
        (cached["key"]["target"].as_str(), cached["key"]["device"].as_str()),
        (Some("sm_90"), Some("interpreter"))
    );
    assert_eq!(cached["results"].as_array().unwrap().len(), 3);
    let winner = cached["winner"]["BLOCK"].as_i64().unwrap();
    insta::assert_snapshot!("search", stable(&text));

    // The same key again: a cache hit, nothing measured.
    let o = run_in(dir.path(), &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let hit = stdout(&o);
    assert!(hit.contains(&format!("cache hit .tessera/schedules/{name}")), "{hit}");
    assert!(hit.contains("--force searches again"), "{hit}");
    assert!(hit.contains(&format!("winner    BLOCK={winner}")), "{hit}");
    let o = run_in(dir.path(), &[&args[..], &["--json"]].concat());
    let v = json(&o);
    assert_eq!(v["cache"]["hit"], true);
    assert_eq!(v["winner"]["BLOCK"], winner);

    // Other shapes: another key, another search.
    let o = run_in(
        dir.path(),
        &[
            "autotune",
            &file,
            "--kernel",
            "vector_add",
            "--dims",
            "N=5000",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--json",
        ],
    );
    assert_eq!(json(&o)["cache"]["hit"], false);
    assert_eq!(cache_files(dir.path()).len(), 2);

    // --force searches again and rewrites the entry.
    let before = cached["tuned_at"].as_u64().unwrap();
    let o = run_in(dir.path(), &[&args[..], &["--force", "--json"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["cache"]["hit"], false);
    assert_eq!(v["results"].as_array().unwrap().len(), 3);
    assert_eq!(v["results"][0]["rank"], 1);
    assert!(v["results"][0]["median_ms"].as_f64().unwrap() <= v["results"][2]["median_ms"].as_f64().unwrap());
    assert!(v["results"].as_array().unwrap().iter().all(|r| r["correct"] == true && r["gbps"].as_f64().unwrap() > 0.0));
    let again: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert!(again["tuned_at"].as_u64().unwrap() >= before);
    let forced_winner = again["winner"]["BLOCK"].as_i64().unwrap();

    // `tessera run` with no --schedule uses the cached winner and says where it came from.
    let o = run_in(
        dir.path(),
        &["run", &file, "--kernel", "vector_add", "--dims", "N=3000", "--device", "interp", "--repeat", "1", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["schedule_source"], "autotune cache");
    assert_eq!(v["schedule"]["BLOCK"], forced_winner);
    assert_eq!(v["schedule_cache"], format!(".tessera/schedules/{name}"));
    let o = run_in(
        dir.path(),
        &["run", &file, "--kernel", "vector_add", "--dims", "N=3000", "--device", "interp", "--repeat", "1"],
    );
    assert!(stdout(&o).contains(&format!("(autotuned, from .tessera/schedules/{name})")), "{}", stdout(&o));
    // At other dims, or on another target, the cache has nothing.
    let o = run_in(
        dir.path(),
        &["run", &file, "--kernel", "vector_add", "--dims", "N=3001", "--device", "interp", "--repeat", "1", "--json"],
    );
    assert_eq!(json(&o)["schedule_source"], "default");
    let o = run_in(
        dir.path(),
        &[
            "run",
            &file,
            "--kernel",
            "vector_add",
            "--dims",
            "N=3000",
            "--device",
            "interp",
            "--target",
            "sm_80",
            "--repeat",
            "1",
            "--json",
        ],
    );
    assert_eq!(json(&o)["schedule_source"], "default");
}

#[test]
fn a_damaged_cache_file_is_reported_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("vector_add.tsr");
    let args = ["autotune", &file, "--kernel", "vector_add", "--dims", "N=100", "--device", "interp", "--repeat", "1"];
    assert_eq!(run_in(dir.path(), &args).status.code(), Some(0));
    let path = cache_files(dir.path()).remove(0);
    std::fs::write(&path, "{ not json").unwrap();
    let o = run_in(dir.path(), &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: ignoring .tessera/schedules/"), "{}", stderr(&o));
    assert!(stdout(&o).contains("winner"), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["version"], 1);
    // No temporary files are left behind.
    assert_eq!(cache_files(dir.path()).len(), 1);
}

#[test]
fn pruned_configurations_are_counted_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = example("flash_attention.tsr");
    let o = run_in(
        dir.path(),
        &[
            "autotune",
            &file,
            "--kernel",
            "flash_attention",
            "--dims",
            "BH=1,S=64,D=64",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    let total = v["space"]["total"].as_u64().unwrap();
    let pruned = v["space"]["pruned"].as_array().unwrap();
    assert_eq!(total, 16);
    assert!(!pruned.is_empty(), "{v}");
    assert!(pruned
        .iter()
        .all(|p| p["reason"] == "registers" && p["detail"].as_str().unwrap().contains("registers per thread")));
    assert_eq!(v["space"]["measured"].as_u64().unwrap() + pruned.len() as u64, total);
    assert_eq!(v["results"].as_array().unwrap().len() as u64, v["space"]["measured"].as_u64().unwrap());
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "note: {} of 16 configurations pruned on sm_90 ({} by registers)",
            pruned.len(),
            pruned.len()
        )),
        "{e}"
    );
    assert!(v["results"][0]["tflops"].as_f64().unwrap() > 0.0);
}

#[test]
fn kernels_without_a_space_and_empty_spaces_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "autotune",
            &example("linear_gelu.tsr"),
            "--kernel",
            "linear_gelu",
            "--dims",
            "M=64,N=64,K=64",
            "--device",
            "interp",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "error: `linear_gelu` has a fixed schedule, so there is nothing to search; `tessera run` times it (give it a space with @kernel.autotune(space=dict(...)))"
    );
    // Every candidate needs more registers than a thread can have: nothing to measure.
    let source = "from tessera import *\n\n@kernel.autotune(space=dict(BM=[256], BN=[256]))\ndef huge(A: Tensor[\"M\", \"K\", bf16], B: Tensor[\"K\", \"N\", bf16], C: Tensor[\"M\", \"N\", f32]):\n    ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        for n0 in tile.parallel(0, N, ctx.BN):\n            acc = tile.zeros((ctx.BM, ctx.BN), f32)\n            for k0 in tile.range(0, K, ctx.BK):\n                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))\n            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc\n";
    std::fs::write(dir.path().join("huge.tsr"), source).unwrap();
    let o = run_in(
        dir.path(),
        &["autotune", "huge.tsr", "--kernel", "huge", "--dims", "M=256,N=256,K=64", "--device", "interp"],
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("note: 1 of 1 configurations pruned on sm_90 (1 by registers)"), "{e}");
    assert!(e.contains("error: no configuration of `huge`'s autotune space fits sm_90: all 1 are pruned"), "{e}");
    assert!(cache_files(dir.path()).is_empty());
}

/// The autotuner searches the Hopper choices: the GPU acceptance bench's space over
/// `mma`, `copy`, `producer`, `cluster_x`, tiles and stages (benches/gpu/gemm_hopper.tsr)
/// on the interpreter for sm_90, every admitted configuration checked against the f64
/// reference, what the rules cannot fit pruned with its reason. Ragged dims: the last
/// row block and cluster are partial.
#[test]
fn the_hopper_choices_are_searched_and_every_admitted_one_is_correct() {
    let dir = tempfile::tempdir().unwrap();
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/gpu/gemm_hopper.tsr").display().to_string();
    let args = [
        "autotune",
        &file,
        "--kernel",
        "gemm_hopper",
        "--dims",
        "M=200,N=264,K=136",
        "--device",
        "interp",
        "--target",
        "sm_90",
        "--repeat",
        "1",
        "--check",
        "full",
        "--json",
    ];
    let o = run_in(dir.path(), &args);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    let results = v["results"].as_array().unwrap();
    assert!(results.len() >= 16, "only {} configurations measured", results.len());
    assert!(results.iter().all(|r| r["correct"] == true), "{results:?}");
    let producers: std::collections::BTreeSet<&str> =
        results.iter().filter_map(|r| r["schedule"]["producer"].as_str()).collect();
    let clusters: std::collections::BTreeSet<i64> =
        results.iter().filter_map(|r| r["schedule"]["cluster_x"].as_i64()).collect();
    assert_eq!(producers.into_iter().collect::<Vec<_>>(), ["pingpong", "warpgroup"], "{results:?}");
    assert_eq!(clusters.into_iter().collect::<Vec<_>>(), [1, 2], "{results:?}");
    let pruned = v["space"]["pruned"].as_array().unwrap();
    assert!(!pruned.is_empty() && pruned.iter().all(|p| p["reason"].is_string() || p["reason"].is_object()), "{v}");
    assert_eq!(v["winner"]["mma"], "wgmma", "{v}");
}

/// A wrong configuration says where its error comes from, as `tessera run` does: the
/// one-pass LayerNorm variance (`E[x²] - mean²`) cancels in f32 for two columns of these
/// inputs, so the CPU computes what its Tile IR computes and every configuration is
/// wrong against the f64 reference for the same reason.
#[test]
fn wrong_configurations_say_whether_the_device_computes_its_tile_ir() {
    let dir = tempfile::tempdir().unwrap();
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/valid/layernorm.tsr").display().to_string();
    let args = [
        "autotune",
        &file,
        "--kernel",
        "layernorm",
        "--dims",
        "C=2,R=64",
        "--seed",
        "3",
        "--device",
        "cpu",
        "--repeat",
        "1",
    ];
    let o = run_in(dir.path(), &args);
    if o.status.code() == Some(2) && stderr(&o).contains("--device cpu:") {
        eprintln!("skipping: {}", stderr(&o).trim());
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("- ")).collect();
    assert_eq!(rows.len(), 12, "{text}");
    assert!(rows.iter().all(|l| l.ends_with("NO (tile-ir)")), "{text}");
    assert!(text.contains("\nNO (tile-ir): the device computes what its Tile IR computes"), "{text}");
    assert!(text.contains("no winner"), "{text}");

    let o = run_in(dir.path(), &[&args[..], &["--json"]].concat());
    let v = json(&o);
    let results = v["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["correct"] == false && r["mismatch_source"] == "tile-ir"), "{v}");
}
