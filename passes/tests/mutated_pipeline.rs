//! Mutated real programs through the whole compiler, not only the checker: every
//! diagnostic for sm_80 and sm_90 (the target lints lower every autotune candidate),
//! then every function lowered to each stage for each target, with its resources. The
//! mutations keep programs close to valid (a number, a dtype, a tile op, an operator, a
//! schedule string or a shape symbol replaced by another of its kind; a line deleted or
//! repeated), so they reach the passes. Any answer may be an error with a span; none
//! may be an internal error (a caught panic, or IR that fails verification after a pass:
//! E0900).
//!
//! `TESSERA_FUZZ_ITERATIONS` and `TESSERA_FUZZ_SEED` run a longer or different campaign;
//! `TESSERA_FUZZ_TRACE=1` prints each mutant before it runs.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::Config;
use tessera_frontend::check::FunctionKind;
use tessera_passes::session::capture::{Cancellable, ErrorKind};
use tessera_passes::session::{AnalysisHost, Overrides};
use tessera_passes::stages::Stage;
use tessera_passes::Target;

#[path = "../../tests/support/mutate.rs"]
mod mutate;
use mutate::{campaign, mutate, mutation, tokens, Mutation};

fn programs() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in ["examples", "tests/corpus/valid", "tests/fixtures/wgmma"] {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "tsr") {
                out.push((entry.path(), std::fs::read_to_string(entry.path()).unwrap()));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "only {} programs: did the examples or the corpus move?", out.len());
    out
}

/// An internal error in an answer fails the case, with the program that caused it.
fn no_internal<T>(what: &str, answer: Cancellable<T>, program: &str) -> Option<T> {
    match answer {
        Ok(v) => Some(v),
        Err(e) if e.kind == ErrorKind::Internal || e.message.contains("internal error") => {
            panic!("{what}: {}\n--- program ---\n{program}", e.message)
        }
        Err(_) => None,
    }
}

/// Runs everything on one program; returns how many function × target pairs reached
/// target code.
fn run_whole_pipeline(path: &Path, text: &str) -> usize {
    let mut reached = 0;
    let host = AnalysisHost::new(path.to_path_buf(), text.to_string(), None);
    let analysis = host.analysis();
    // Whether `tessera check` passes the file for each GPU target.
    let mut clean = Vec::new();
    for target in [Target::Sm90, Target::Sm80] {
        if let Some(diagnostics) = no_internal("diagnostics", analysis.diagnostics(target), text) {
            for d in &diagnostics {
                assert!(d.range.end as usize <= text.len(), "{} {:?} outside the file: {}", d.code, d.range, d.message);
                // An IR that fails verification after a pass is reported, not a panic;
                // it is a compiler bug all the same.
                assert!(
                    d.code.as_str() != "E0900",
                    "internal compiler error on {}: {}\n--- program ---\n{text}",
                    target.name(),
                    d.message
                );
            }
            if !diagnostics.iter().any(|d| d.is_error()) {
                clean.push(target);
            }
        }
    }
    let Some(functions) = no_internal("functions", analysis.functions(), text) else { return 0 };
    for summary in functions {
        let Some(f) = no_internal("function", analysis.function(&summary.name), text) else { continue };
        let what = |w: &str| format!("{w} `{}` of {}", summary.name, path.display());
        let Some(configured) =
            no_internal(&what("configuring"), analysis.configure(f, None, &Overrides::default()), text)
        else {
            continue;
        };
        let config = configured.config;
        // What `tessera check` passes, `tessera run` compiles: a graph function's Graph
        // IR, and a kernel with a fixed schedule down to the target's code.
        let fixed_kernel =
            summary.kind == FunctionKind::Kernel && analysis.schedule(f).is_ok_and(|s| !s.is_autotuned() && !s.auto);
        let must_lower = |stage: Stage, target: Target| {
            clean.contains(&target)
                && ((summary.kind == FunctionKind::Graph && stage == Stage::Graph)
                    || (fixed_kernel && stage == Stage::Target))
        };
        for target in Target::ALL {
            for stage in Stage::ALL {
                let answer = analysis.lower(f, stage, &config, target);
                if must_lower(stage, target) {
                    if let Err(e) = &answer {
                        panic!(
                            "`tessera check` passes for {} but `{}` does not lower to {} IR: {}\n--- program ---\n{text}",
                            target.name(),
                            summary.name,
                            stage.name(),
                            e.message
                        );
                    }
                }
                let lowered =
                    no_internal(&what(&format!("lowering to {} for {}", stage.name(), target.name())), answer, text);
                reached += usize::from(stage == Stage::Target && lowered.is_some());
            }
            if target != Target::Cpu {
                no_internal(&what("estimating resources"), analysis.resources(f, &config, target), text);
                no_internal(&what("finding bank conflicts"), analysis.bank_conflicts(f, &config, target), text);
            }
        }
    }
    reached
}

#[test]
fn mutated_programs_lower_without_internal_errors() {
    let programs = programs();
    let mut runner = campaign(48, 0x7E55_E4A0, Config::default());
    let cases = runner.config().cases;
    // Panics are caught and reported as internal errors; keep the hook from printing each.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let reached = std::cell::Cell::new(0usize);
    let result = runner.run(&(any::<usize>(), proptest::collection::vec(mutation(), 1..4)), |(index, mutations)| {
        let (path, source) = &programs[index % programs.len()];
        let mutated = mutate(source, &mutations);
        // A mutant that aborts the process (a stack overflow) cannot be reported by the
        // runner: `TESSERA_FUZZ_TRACE=1` prints each one first.
        if std::env::var_os("TESSERA_FUZZ_TRACE").is_some() {
            eprintln!("--- mutant of {} ---\n{mutated}", path.display());
        }
        let r = run_whole_pipeline(path, &mutated);
        reached.set(reached.get() + usize::from(r > 0));
        Ok(())
    });
    std::panic::set_hook(previous);
    if let Err(e) = result {
        panic!("{e}");
    }
    // Mutants that no longer lower test only the checker; a good share must still reach PTX
    // or LLVM IR for the campaign to test the passes.
    eprintln!("{} of {cases} mutants lowered to target code", reached.get());
    assert!(reached.get() * 4 >= cases as usize, "only {} of {cases} mutants reached target code", reached.get());
}

#[test]
fn mutations_keep_programs_close_to_their_source() {
    let source = "def k(A: Tensor[\"M\", f16]):\n    x = tile.load(A[0:64]) + 1\n";
    assert_eq!(tokens(source).concat(), source);
    let once = mutate(source, &[Mutation::Replace(0, 0)]);
    assert_ne!(once, source);
    assert_eq!(once.lines().count(), source.lines().count());
    assert_eq!(mutate(source, &[Mutation::DeleteLine(1)]).lines().count(), 1);
}

#[test]
#[should_panic(expected = "internal error while lowering")]
fn an_internal_error_fails_the_case() {
    use tessera_passes::session::SessionError;
    let caught: Cancellable<()> =
        Err(SessionError::new(ErrorKind::Internal, "internal error while lowering `k`: index out of bounds"));
    no_internal("lowering", caught, "def k(): pass");
}
