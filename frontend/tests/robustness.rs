//! Random bytes and token-level mutations of real programs through the whole check
//! pipeline: no panic, and every diagnostic span lies inside the file.

use std::path::Path;

use proptest::prelude::*;
use tessera_frontend::check::file_diagnostics;
use tessera_frontend::{Database, SourceFile};

fn corpus() -> Vec<String> {
    let mut texts = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["examples", "tests/corpus/valid", "tests/corpus/invalid", "frontend/stdlib"] {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "tsr") {
                texts.push(std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    assert!(texts.len() >= 40, "only {} programs: did the examples or the corpus move?", texts.len());
    texts
}

/// Checks one source (optionally not UTF-8) and validates every span.
fn check_spans(bytes: &[u8]) {
    let (text, utf8_error) = match String::from_utf8(bytes.to_vec()) {
        Ok(t) => (t, None),
        Err(e) => {
            let at = e.utf8_error().valid_up_to() as u32;
            (String::from_utf8_lossy(bytes).into_owned(), Some(at))
        }
    };
    let db = Database::default();
    let file = SourceFile::new(&db, "fuzz.tsr".into(), text.clone(), utf8_error);
    let diagnostics = file_diagnostics(&db, file);
    let len = text.len() as u32;
    for d in diagnostics.iter() {
        let ranges = std::iter::once(d.range)
            .chain(d.labels.iter().map(|l| l.range))
            .chain(d.fix.iter().flat_map(|f| f.edits.iter().map(|e| e.range)));
        for r in ranges {
            assert!(r.start <= r.end && r.end <= len, "{} range {r:?} outside 0..{len}: {}", d.code, d.message);
            assert!(
                text.is_char_boundary(r.start as usize) && text.is_char_boundary(r.end as usize),
                "{} range {r:?} splits a char: {} in {:?}",
                d.code,
                d.message,
                &text[(r.start as usize).saturating_sub(20).min(text.len())..]
            );
        }
        assert!(!d.message.is_empty());
    }
}

/// Splits source into tokens: words, numbers, strings, single punctuation, whitespace runs.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let class = |c: char| {
            if c.is_alphanumeric() || c == '_' {
                0
            } else if c == ' ' {
                1
            } else {
                2
            }
        };
        let mut j = i + 1;
        if class(c) != 2 {
            while j < chars.len() && class(chars[j].1) == class(c) {
                j += 1;
            }
        }
        let end = chars.get(j).map_or(text.len(), |(p, _)| *p);
        out.push(&text[at..end]);
        start = end;
        i = j;
    }
    let _ = start;
    out
}

const VOCABULARY: &[&str] = &[
    "def",
    "return",
    "if",
    "elif",
    "else",
    "for",
    "in",
    "while",
    "with",
    "as",
    ":",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    "=",
    "+=",
    "@",
    "*",
    "//",
    "\n",
    "\n    ",
    "\t",
    "\"",
    "'''",
    "#",
    "\\",
    "tile.",
    "ctx.",
    "None",
    "0",
    "1e-5",
    "Tensor[",
    "f32",
    "bf16 @accum(f32)",
    "tile.parallel(0, N, 64)",
    "import tessera as ts\n",
    "@kernel\n",
    "\u{e9}",
    "\u{1F600}",
    "\r\n",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Swap(usize),
    Insert(usize, usize),
    Truncate(usize),
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut toks: Vec<String> = tokens(text).into_iter().map(str::to_string).collect();
    for m in mutations {
        if toks.is_empty() {
            break;
        }
        let n = toks.len();
        match *m {
            Mutation::Delete(i) => {
                toks.remove(i % n);
            }
            Mutation::Duplicate(i) => {
                let t = toks[i % n].clone();
                toks.insert(i % n, t);
            }
            Mutation::Swap(i) if n > 1 => toks.swap(i % (n - 1), i % (n - 1) + 1),
            Mutation::Swap(_) => {}
            Mutation::Insert(i, v) => toks.insert(i % (n + 1), VOCABULARY[v % VOCABULARY.len()].to_string()),
            Mutation::Truncate(i) => toks.truncate(i % n),
        }
    }
    toks.concat()
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Duplicate),
        any::<usize>().prop_map(Mutation::Swap),
        (any::<usize>(), any::<usize>()).prop_map(|(i, v)| Mutation::Insert(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_spans(&bytes);
    }

    #[test]
    fn random_ascii_programs_never_panic(text in "[a-z_(),:=\\[\\] \\n@.+*#\"'0-9]{0,600}") {
        check_spans(text.as_bytes());
    }

    #[test]
    fn mutated_programs_never_panic(index in any::<usize>(), mutations in proptest::collection::vec(mutation(), 1..12)) {
        let corpus = corpus();
        let source = &corpus[index % corpus.len()];
        check_spans(mutate(source, &mutations).as_bytes());
    }
}

#[test]
fn deep_nesting_is_bounded() {
    let deep = format!("X = {}1{}\n", "(".repeat(5000), ")".repeat(5000));
    check_spans(deep.as_bytes());
    let deep_body = format!("def f():\n    y = {}1\n", "-".repeat(20_000));
    check_spans(deep_body.as_bytes());
    let many_blocks: String = (0..200).map(|i| format!("{}if x:\n", "    ".repeat(i + 1))).collect();
    check_spans(format!("def f(x: int):\n{many_blocks}").as_bytes());
}

/// An expression too deep is one E0100 however many of its operands pass the limit (the
/// node at the limit has two), and each such expression gets its own.
#[test]
fn an_expression_too_deep_is_one_diagnostic() {
    let sum = vec!["x"; 250].join(" + ");
    let count = |text: &str| {
        let db = Database::default();
        let file = SourceFile::new(&db, "deep.tsr".into(), text.to_string(), None);
        file_diagnostics(&db, file).iter().filter(|d| d.message.contains("levels deep")).count()
    };
    let one = format!(
        "from tessera import *\n\n@jit\ndef f(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:\n    return {sum}\n"
    );
    assert_eq!(count(&one), 1);
    let two = one.replace("    return", &format!("    y = {sum}\n    return"));
    assert_eq!(count(&two), 2);
}
