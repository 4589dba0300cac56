//! Mutated real programs through the whole compiler, not only the checker: every
//! diagnostic for sm_80 and sm_90 (the target lints lower every autotune candidate),
//! then every function lowered to each stage for each target, with its resources. The
//! mutations keep programs close to valid (a number, a dtype, a tile op, an operator, a
//! schedule string or a shape symbol replaced by another of its kind; a line deleted or
//! repeated), so they reach the passes. Any answer may be an error with a span; none
//! may be an internal error (a caught panic).
//!
//! `TESSERA_FUZZ_ITERATIONS` and `TESSERA_FUZZ_SEED` run a longer or different campaign.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tessera_frontend::check::FunctionKind;
use tessera_passes::session::capture::{Cancellable, ErrorKind};
use tessera_passes::session::{AnalysisHost, Overrides};
use tessera_passes::stages::Stage;
use tessera_passes::Target;

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

/// Replacements by kind: a token of one of these lists is replaced by another of it.
const FAMILIES: &[&[&str]] = &[
    &["f64", "f32", "tf32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "i32", "i64", "bool"],
    &["exp", "rsqrt", "gelu", "sqrt", "abs", "neg", "log", "tanh", "sigmoid", "relu"],
    &["row_sum", "row_max", "row_min", "col_sum", "sum", "max"],
    &["maximum", "minimum"],
    &["zeros", "full", "ones", "arange"],
    &["load", "cp_async", "store"],
    &["parallel", "range"],
    &["+", "-", "*", "/", "@", "//", "%"],
    &["+=", "-=", "*=", "="],
    &["\"wgmma\"", "\"mma.sync\"", "\"tma\"", "\"cp.async\"", "\"xor\"", "\"none\"", "\"pingpong\""],
    &["M", "N", "K", "C", "R", "D", "S", "B", "H"],
    &["BM", "BN", "BK", "warps", "stages"],
];

const NUMBERS: &[&str] = &[
    "0", "1", "2", "3", "4", "7", "8", "16", "17", "31", "32", "48", "64", "96", "128", "256", "1024", "-1", "0.5",
    "1e-5",
];

/// Splits source into tokens: words (with dots inside numbers), strings, operators
/// (`+=`, `//`, `->`, `**` kept whole), single other characters.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_alphanumeric() || c == '_' {
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || (chars[i] == '.' && c.is_ascii_digit()))
            {
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' && chars[i] != '\n' {
                i += 1;
            }
            i = (i + 1).min(chars.len());
        } else if i + 1 < chars.len()
            && ["+=", "-=", "*=", "//", "->", "**", "==", "<=", ">="].contains(&&*format!("{c}{}", chars[i + 1]))
        {
            i += 2;
        } else {
            i += 1;
        }
        out.push(chars[start..i].iter().collect());
    }
    out
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the n-th replaceable token by the r-th other member of its kind.
    Replace(usize, usize),
    /// Delete the n-th line.
    DeleteLine(usize),
    /// Repeat the n-th line.
    RepeatLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => (any::<usize>(), any::<usize>()).prop_map(|(n, r)| Mutation::Replace(n, r)),
        1 => any::<usize>().prop_map(Mutation::DeleteLine),
        1 => any::<usize>().prop_map(Mutation::RepeatLine),
    ]
}

fn is_number(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_digit())
}

fn replacements(t: &str) -> Option<&'static [&'static str]> {
    if is_number(t) {
        return Some(NUMBERS);
    }
    FAMILIES.iter().copied().find(|f| f.contains(&t))
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_string();
    for m in mutations {
        match *m {
            Mutation::Replace(n, r) => {
                let mut toks = tokens(&text);
                let candidates: Vec<usize> = (0..toks.len()).filter(|&i| replacements(&toks[i]).is_some()).collect();
                if candidates.is_empty() {
                    continue;
                }
                let at = candidates[n % candidates.len()];
                let family = replacements(&toks[at]).unwrap();
                let others: Vec<&str> = family.iter().copied().filter(|&o| o != toks[at]).collect();
                toks[at] = others[r % others.len()].to_string();
                text = toks.concat();
            }
            Mutation::DeleteLine(n) | Mutation::RepeatLine(n) => {
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if lines.is_empty() {
                    continue;
                }
                let at = n % lines.len();
                if matches!(m, Mutation::DeleteLine(_)) {
                    lines.remove(at);
                } else {
                    lines.insert(at, lines[at]);
                }
                text = lines.concat();
            }
        }
    }
    text
}

/// An internal error in an answer fails the case, with the program that caused it.
fn no_internal<T>(what: &str, answer: Cancellable<T>, program: &str) -> Option<T> {
    match answer {
        Ok(v) => Some(v),
        Err(e) if e.kind == ErrorKind::Internal => {
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
    let cases: u32 = std::env::var("TESSERA_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let seed: u64 = std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x7E55_E4A0);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config { cases, failure_persistence: None, ..Config::default() },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    // Panics are caught and reported as internal errors; keep the hook from printing each.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let reached = std::cell::Cell::new(0usize);
    let result = runner.run(&(any::<usize>(), proptest::collection::vec(mutation(), 1..4)), |(index, mutations)| {
        let (path, source) = &programs[index % programs.len()];
        let mutated = mutate(source, &mutations);
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
