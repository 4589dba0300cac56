//! `tessera run`, the real binary, on mutated programs: the corpus's and the examples'
//! kernels and graph functions with a number, dtype, tile op, operator, schedule string or shape symbol
//! replaced, or a line deleted or repeated (`support/mutate.rs`), on the interpreter for
//! sm_90 and sm_80 and on the CPU backend. The dims are small and ragged (80 for every
//! symbol the tiles do not use) so the interpreter is quick and the masks are exercised.
//!
//! What each run must do: answer with exit 0, 1 or 2 (never a panic or an "internal
//! error"), and say `wrong` only where the mutant's own arithmetic is: a mutant computes
//! something else than its source, but its f64 reference is its own Graph IR, so a
//! result that disagrees with it on one lowering and not on the CPU Tile IR's is a
//! miscompile, and so is the CPU backend's "code generation" cause. And a kernel that
//! `tessera check` passes for the target must compile: its run may stop at the
//! arguments (exit 2) or fault (a race the interpreter sees), not refuse its code.
//!
//! `TESSERA_FUZZ_ITERATIONS` and `TESSERA_FUZZ_SEED` run a longer or different campaign.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use proptest::test_runner::Config;
use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};

#[path = "support/kernel_sources.rs"]
mod kernel_sources;
#[path = "support/mutate.rs"]
mod mutate;
use mutate::{campaign, mutate, mutation};

/// Where a mutant runs: `tessera run` arguments, and the target `tessera check` checks.
const DEVICES: &[(&[&str], &str)] = &[
    (&["--device", "interp", "--target", "sm_90"], "sm_90"),
    (&["--device", "interp", "--target", "sm_80"], "sm_80"),
    (&["--device", "cpu"], "cpu"),
];

/// The value of every shape symbol that no tile dim uses: not a multiple of the usual
/// tile sizes, so the last tiles are partial. Graph functions get a smaller one (still
/// not a multiple of a tile, and divisible by a mesh of 8): a mixture of 80 experts of
/// 80 x 80 took minutes on the debug interpreter.
const RAGGED: u32 = 80;
const RAGGED_GRAPH: u32 = 40;

/// A run that takes longer hangs (the slowest mutants take about 20 s in debug).
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(240);

/// What one run of one mutant came to.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// The mutant does not parse, or has no kernel left.
    NoKernel,
    /// The run refused it: bad arguments (exit 2), errors in the program, a fault.
    Refused(String),
    /// It ran; the verdict (`correct`, `non-finite`, `unchecked`).
    Ran(String),
}

/// The kernels and graph functions of a program, with the symbols to pass `--dims` for.
fn kernels(path: &Path, text: &str) -> Vec<(String, Vec<String>, u32)> {
    let db = Database::default();
    let file = SourceFile::new(&db, path.to_path_buf(), text.to_string(), None);
    let mut out = Vec::new();
    for entry in item_index(&db, file).functions.iter() {
        let signature = fn_signature(&db, entry.key);
        if !matches!(signature.kind, FunctionKind::Kernel | FunctionKind::Graph) {
            continue;
        }
        // Symbols that tile dims use keep `tessera run`'s own assumption (64).
        let tile_symbols = match tessera_passes::default_config(&db, entry.key, &BTreeMap::new()) {
            Ok((_, assumed)) => assumed.into_iter().map(|s| s.to_string()).collect(),
            Err(_) => Vec::new(),
        };
        let free = signature.symbols.iter().filter(|s| !tile_symbols.contains(*s)).cloned().collect();
        let value = if signature.kind == FunctionKind::Graph { RAGGED_GRAPH } else { RAGGED };
        out.push((entry.key.name(&db).to_string(), free, value));
    }
    out
}

fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env("NO_COLOR", "1");
    cmd
}

/// Runs one mutant's kernel on one device; panics with the program on a broken promise.
fn run_mutant(
    dir: &Path,
    text: &str,
    kernel: &str,
    symbols: &[String],
    value: u32,
    device: usize,
    seed: u64,
) -> Outcome {
    let path = dir.join("mutant.tsr");
    std::fs::write(&path, text).unwrap();
    let (device_args, target) = DEVICES[device];
    let broken = |why: &str, output: &str| -> ! {
        panic!(
            "`tessera run --kernel {kernel} {}` {why}\n--- output ---\n{output}\n--- program ---\n{text}",
            device_args.join(" ")
        )
    };
    let check = tessera().args(["check", "--target", target]).arg(&path).output().unwrap();
    let check_text = format!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    if check_text.contains("internal error") || check.status.code().is_none_or(|c| c > 2) {
        broken("made `tessera check` fail inside", &check_text);
    }
    let dims: Vec<String> = symbols.iter().map(|s| format!("{s}={value}")).collect();
    let run = |device_args: &[&str]| {
        let mut cmd = tessera();
        cmd.args(["run", "--kernel", kernel, "--repeat", "1", "--json", "--seed", &seed.to_string()]).args(device_args);
        if !dims.is_empty() {
            cmd.args(["--dims", &dims.join(",")]);
        }
        let (out, err) = (dir.join("stdout"), dir.join("stderr"));
        cmd.arg(&path).current_dir(dir);
        cmd.stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
        let mut child = cmd.spawn().unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > RUN_TIMEOUT {
                child.kill().unwrap();
                child.wait().unwrap();
                broken(&format!("did not finish within {} s", RUN_TIMEOUT.as_secs()), "");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        std::process::Output { status, stdout: std::fs::read(&out).unwrap(), stderr: std::fs::read(&err).unwrap() }
    };
    let run_output = run(device_args);
    let stdout = String::from_utf8_lossy(&run_output.stdout).into_owned();
    let output = format!("{stdout}{}", String::from_utf8_lossy(&run_output.stderr));
    if output.contains("internal error") || output.contains("panicked") {
        broken("reported an internal error", &output);
    }
    let report: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
    let failure = report.as_ref().and_then(|r| r.get("error"));
    match (run_output.status.code(), failure) {
        // Refused with a diagnostic: bad arguments (exit 2), or errors in the program.
        (Some(2), _) => Outcome::Refused(first_line(&output)),
        (Some(1), Some(error)) => {
            let kind = error["kind"].as_str().unwrap_or("error");
            let message = error["message"].as_str().unwrap_or_default();
            // What check passes, run compiles: a refusal of the program itself ("compile"),
            // or a construct lowering or planning does not support, is a check that
            // missed it (E0809 is for those).
            let unsupported = ["not supported yet", "cannot plan", "cannot be lowered", "cannot lower"];
            if check.status.success() && (kind == "compile" || unsupported.iter().any(|u| message.contains(u))) {
                broken("refuses a kernel `tessera check` passes", &output);
            }
            Outcome::Refused(format!("{kind}: {message}"))
        }
        (Some(0 | 1), None) => {
            let Some(report) = report else { broken("printed no JSON report", &output) };
            let verdict = report["verdict"].as_str().unwrap_or_else(|| broken("has no verdict", &output)).to_string();
            if verdict == "wrong" {
                // The CPU backend diagnoses its own mismatch: code generation departs from
                // the kernel's Tile IR, which itself matches the f64 reference. (Where
                // the Tile IR is wrong too, the arithmetic cancels: `rsqrt(s % m * m +
                // eps)` near 0 turns one-ulp differences into 0.1%.)
                if report["mismatch_source"] == "code-generation" && report["lowering"]["verdict"] == "correct" {
                    broken("computes something else than its own Tile IR", &output);
                }
                // Else the kernel's f32 (or narrower) arithmetic is off from the f64
                // reference: a mutant that cancels (`ss - C` for `ss / C` in layernorm)
                // is as wrong on every lowering, the CPU Tile IR's (no layouts, no
                // pipelining) too. Wrong on one lowering only is a miscompile.
                let cpu_ir = run(&["--device", "interp", "--target", "cpu"]);
                let cpu_report: serde_json::Value = serde_json::from_slice(&cpu_ir.stdout).unwrap_or_default();
                if cpu_report["verdict"] != "wrong" {
                    broken(
                        &format!(
                            "disagrees with the f64 reference, while the CPU Tile IR's verdict is {}",
                            cpu_report["verdict"]
                        ),
                        &output,
                    );
                }
                return Outcome::Ran("wrong on every lowering (its own arithmetic)".into());
            }
            Outcome::Ran(verdict)
        }
        (other, _) => broken(&format!("exited with {other:?}"), &output),
    }
}

fn first_line(text: &str) -> String {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().to_string()
}

#[test]
fn mutated_kernels_run_correct_or_refused() {
    let programs: Vec<(PathBuf, String)> = kernel_sources::repository_files()
        .into_iter()
        .filter(|s| !kernels(&s.path, &s.text).is_empty())
        .map(|s| (s.path, s.text))
        .collect();
    assert!(programs.len() >= 10, "only {} programs with kernels", programs.len());
    let mut runner = campaign(40, 0x5EED_4E55, Config { max_shrink_iters: 0, ..Config::default() });
    let cases = runner.config().cases;
    let dir = tempfile::tempdir().unwrap();
    let outcomes = std::cell::RefCell::new(Vec::new());
    let strategy =
        (any::<usize>(), proptest::collection::vec(mutation(), 1..2), any::<usize>(), 0..DEVICES.len(), 0u64..100);
    let result = runner.run(&strategy, |(index, mutations, pick, device, input_seed)| {
        let (path, source) = &programs[index % programs.len()];
        let mutated = mutate(source, &mutations);
        let kernels = kernels(path, &mutated);
        let outcome = match kernels.get(pick % kernels.len().max(1)) {
            Some((kernel, symbols, value)) => {
                run_mutant(dir.path(), &mutated, kernel, symbols, *value, device, input_seed)
            }
            None => Outcome::NoKernel,
        };
        outcomes.borrow_mut().push(outcome);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let outcomes = outcomes.into_inner();
    let mut counts: BTreeMap<&Outcome, usize> = BTreeMap::new();
    for o in &outcomes {
        *counts.entry(o).or_default() += 1;
    }
    eprintln!("outcomes of {cases} mutants:");
    for (outcome, count) in &counts {
        eprintln!("{count:>5}  {outcome:?}");
    }
    // Mutants that never run test only the diagnostics; the campaign is for the backends.
    let ran = outcomes.iter().filter(|o| matches!(o, Outcome::Ran(_))).count();
    assert!(ran * 4 >= outcomes.len(), "only {ran} of {} mutants ran", outcomes.len());
}
