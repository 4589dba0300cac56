//! Mutations of real programs that keep them close to valid: a number, a dtype, a tile
//! op, an operator, a schedule string or a shape symbol replaced by another of its kind;
//! a line deleted or repeated. Shared by the compiler's mutation test
//! (`passes/tests/mutated_pipeline.rs`) and `tessera run`'s (`tests/mutated_runs.rs`).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// A seeded campaign: `TESSERA_FUZZ_ITERATIONS` cases (else `default_cases`) drawn from
/// `TESSERA_FUZZ_SEED` (else `default_seed`), with `config`'s other settings and no
/// failure file.
pub fn campaign(default_cases: u32, default_seed: u64, config: Config) -> TestRunner {
    let cases = std::env::var("TESSERA_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_cases);
    let seed: u64 = std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(default_seed);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config { cases, failure_persistence: None, ..config },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    )
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
    &["+", "-", "*", "/", "@", "//", "%", "&", "|", "^", "<<", ">>"],
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
/// (`+=`, `//`, `->`, `**`, `<<`, ... kept whole), single other characters.
pub fn tokens(text: &str) -> Vec<String> {
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
            && ["+=", "-=", "*=", "//", "->", "**", "==", "<=", ">=", "<<", ">>"]
                .contains(&&*format!("{c}{}", chars[i + 1]))
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
pub enum Mutation {
    /// Replace the n-th replaceable token by the r-th other member of its kind.
    Replace(usize, usize),
    /// Delete the n-th line.
    DeleteLine(usize),
    /// Repeat the n-th line.
    RepeatLine(usize),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
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

pub fn mutate(text: &str, mutations: &[Mutation]) -> String {
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
