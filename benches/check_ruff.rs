//! `cargo bench -p tessera --bench check_ruff`: the `tessera check` binary against ruff,
//! in one run, on the same number of lines, both pinned to one core (`taskset -c 0`).
//!
//! `-p tessera` builds the binary as `cargo install --path .` does: without the CPU
//! backend, so without libLLVM. Without `-p`, the workspace's feature unification links
//! libLLVM into it, whose loading adds some 20 ms to every start (most of a cached run);
//! the bench says which binary it timed.
//!
//! - Tessera: one generated file (the examples repeated with unique names, the
//!   `check` bench's workload), checked with the default sm_90 lints.
//! - ruff: the top-level modules of this machine's Python standard library, in name
//!   order, until the line count is reached; `ruff check` with its default rules.
//!
//! Each tool runs cold (no cache) and again on the unchanged files from its own cache.
//! Environment: `TESSERA_BENCH_LINES` (default 20000), `TESSERA_BENCH_RUNS` (7),
//! `TESSERA_BENCH_KEEP=DIR` writes the workloads there and keeps them, `RUFF` names the
//! ruff binary (default: the one the ruff wheel installed, else `ruff` on PATH; never a
//! launcher script such as a pyenv shim, whose start-up would be timed as ruff's). Without
//! ruff the Tessera side still runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let lines: usize = env_number("TESSERA_BENCH_LINES", 20_000);
    let runs: usize = env_number("TESSERA_BENCH_RUNS", 7).max(1);
    let (_guard, root) = match std::env::var_os("TESSERA_BENCH_KEEP") {
        Some(dir) => (None, PathBuf::from(dir)),
        None => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().to_path_buf();
            (Some(dir), path)
        }
    };
    let tsr_dir = root.join("tsr");
    std::fs::create_dir_all(&tsr_dir).unwrap();
    let text = tessera_frontend::synthetic::module_with_lines(lines);
    let tsr_lines = text.lines().count();
    std::fs::write(tsr_dir.join("bench.tsr"), &text).unwrap();

    let pin = pin_prefix();
    println!(
        "one core: {}",
        if pin.is_empty() {
            "NOT pinned (taskset not found): figures use every core".to_string()
        } else {
            pin.join(" ")
        }
    );
    let tessera = PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    println!("tessera binary: {} ({})", tessera.display(), llvm_linkage(&tessera));
    let cache = root.join("tessera-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let cold_args = ["check", "--no-cache", "--format", "concise"];
    let tessera_cold = time_runs(runs, &pin, &tessera, &cold_args, &[&tsr_dir]);
    let warm_args = ["check", "--format", "concise", "--cache-dir"];
    let cache_arg = cache.to_string_lossy().into_owned();
    // The first run fills the cache; the timed runs read it.
    time_runs(1, &pin, &tessera, &warm_args, &[Path::new(&cache_arg), &tsr_dir]);
    let tessera_warm = time_runs(runs, &pin, &tessera, &warm_args, &[Path::new(&cache_arg), &tsr_dir]);
    println!("tessera check: {tsr_lines} lines in 1 file, target sm_90 (the default lints)");
    report("  cold (--no-cache)", tessera_cold, tsr_lines);
    report("  unchanged, from the cache", tessera_warm, tsr_lines);
    println!(
        "  cached / cold: {:.1}% (target <= 10%)",
        100.0 * tessera_warm.as_secs_f64() / tessera_cold.as_secs_f64()
    );

    let ruff = std::env::var_os("RUFF").map(PathBuf::from).unwrap_or_else(ruff_binary);
    let Some(version) = output_of(&ruff, &["--version"]) else {
        println!("ruff: not found (pip install ruff, or RUFF=/path/to/ruff): no ratio");
        return;
    };
    println!("ruff binary: {}", ruff.display());
    let py_dir = root.join("py");
    let py_lines = python_corpus(&py_dir, tsr_lines);
    let ruff_cache = root.join("ruff-cache");
    let _ = std::fs::remove_dir_all(&ruff_cache);
    let ruff_cold =
        time_runs(runs, &pin, &ruff, &["check", "--isolated", "--no-cache", "--exit-zero", "--quiet"], &[&py_dir]);
    let ruff_cache_arg = ruff_cache.to_string_lossy().into_owned();
    let ruff_warm_args = ["check", "--isolated", "--exit-zero", "--quiet", "--cache-dir"];
    time_runs(1, &pin, &ruff, &ruff_warm_args, &[Path::new(&ruff_cache_arg), &py_dir]);
    let ruff_warm = time_runs(runs, &pin, &ruff, &ruff_warm_args, &[Path::new(&ruff_cache_arg), &py_dir]);
    println!("{} (default rules): {py_lines} lines of the Python standard library", version.trim());
    report("  cold (--no-cache)", ruff_cold, py_lines);
    report("  unchanged, from the cache", ruff_warm, py_lines);
    let per_line = |d: Duration, n: usize| d.as_secs_f64() / n as f64;
    println!(
        "ratio, time per line, tessera / ruff: cold {:.2}x, cached {:.2}x (1.00x: as fast as ruff)",
        per_line(tessera_cold, tsr_lines) / per_line(ruff_cold, py_lines),
        per_line(tessera_warm, tsr_lines) / per_line(ruff_warm, py_lines),
    );
}

/// The ruff executable itself. `ruff` on PATH may be a launcher script (a pyenv shim
/// runs a shell and Python before it execs ruff, some 50 ms per run), which would time
/// the launcher too: the ruff wheel names its binary (`ruff.__main__.find_ruff_bin`).
fn ruff_binary() -> PathBuf {
    output_of(Path::new("python3"), &["-c", "from ruff.__main__ import find_ruff_bin; print(find_ruff_bin())"])
        .map(|s| PathBuf::from(s.trim()))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("ruff"))
}

/// Whether `binary` loads libLLVM at start (`ldd`), which costs every run its loading.
fn llvm_linkage(binary: &Path) -> &'static str {
    match output_of(Path::new("ldd"), &[&binary.to_string_lossy()]) {
        Some(libs) if libs.contains("libLLVM") => {
            "links libLLVM: the CPU backend is in; add -p tessera to time the installed build"
        }
        Some(_) => "no libLLVM: as `cargo install --path .` builds it",
        None => "ldd not found: linkage unknown",
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `taskset -c N` on the first CPU this process may use, or nothing without taskset.
fn pin_prefix() -> Vec<String> {
    if output_of(Path::new("taskset"), &["--version"]).is_none() {
        return Vec::new();
    }
    let cpu = output_of(Path::new("taskset"), &["-cp", &std::process::id().to_string()])
        .and_then(|s| s.rsplit(':').next().map(str::trim).map(str::to_string))
        .and_then(|list| list.split([',', '-']).next().map(str::to_string))
        .unwrap_or_else(|| "0".into());
    vec!["taskset".into(), "-c".into(), cpu]
}

fn output_of(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The median wall time of `runs` runs of `program args paths`, each through `pin`.
fn time_runs(runs: usize, pin: &[String], program: &Path, args: &[&str], paths: &[&Path]) -> Duration {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut command = match pin.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        };
        command.args(args).args(paths);
        let t = Instant::now();
        let out = command.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        times.push(t.elapsed());
        // Exit 1 means diagnostics were found; anything else is a failed run.
        let code = out.status.code();
        assert!(
            matches!(code, Some(0) | Some(1)),
            "{} {args:?} failed ({code:?}): {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    times.sort();
    times[times.len() / 2]
}

fn report(label: &str, median: Duration, lines: usize) {
    println!(
        "{label:30} median {:8.1} ms  -> {:>9.0} lines/s",
        median.as_secs_f64() * 1e3,
        lines as f64 / median.as_secs_f64()
    );
}

/// Copies top-level standard-library modules, in name order, into `dir` until at least
/// `lines` lines; returns the line count.
fn python_corpus(dir: &Path, lines: usize) -> usize {
    std::fs::create_dir_all(dir).unwrap();
    let stdlib = output_of(Path::new("python3"), &["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .expect("python3 (for the Python corpus ruff checks)");
    let mut modules: Vec<PathBuf> = std::fs::read_dir(stdlib.trim())
        .expect("the Python standard library")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    modules.sort();
    let mut total = 0;
    for module in modules {
        if total >= lines {
            break;
        }
        let Ok(text) = std::fs::read_to_string(&module) else { continue };
        total += text.lines().count();
        std::fs::write(dir.join(module.file_name().unwrap()), text).unwrap();
    }
    assert!(total >= lines, "the Python standard library has only {total} lines of top-level modules");
    total
}
