//! The fast parser (`syntax::fast`) against tree-sitter and its lowering: on every
//! chunk of every `.tsr` file in the repository, and on random mutations of them,
//! whenever the fast parser answers, its items equal the lowering's, ranges and arena
//! order included, and tree-sitter finds no error. It must also answer for every
//! clean chunk of the examples and the standard library, or `tessera check` loses
//! its speed without a test noticing.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tessera_frontend::syntax::{chunks, fast, parse_chunk_tree_sitter};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn tsr_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "node_modules" && !name.to_string_lossy().starts_with('.') {
                tsr_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "tsr") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    tsr_files(&repo_root(), &mut files);
    files.sort();
    files.into_iter().filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t))).collect()
}

/// Compares the two parsers on one chunk; returns whether the fast one answered.
fn agree(chunk: &str) -> Result<bool, String> {
    let Some(fast_items) = fast::parse_items(chunk) else { return Ok(false) };
    let slow = parse_chunk_tree_sitter(chunk);
    if !slow.diagnostics.is_empty() {
        return Err(format!("the fast parser accepted a chunk with errors: {:?}", slow.diagnostics));
    }
    if fast_items != slow.items {
        return Err(format!("different items\n--- fast\n{fast_items:#?}\n--- tree-sitter\n{:#?}", slow.items));
    }
    Ok(true)
}

fn chunks_of(text: &str) -> Vec<&str> {
    chunks::split(text).into_iter().map(|r| r.slice(text)).collect()
}

#[test]
fn agrees_with_tree_sitter_on_every_repository_source() {
    let mut answered = 0;
    let mut total = 0;
    let mut failures = Vec::new();
    for (path, text) in sources() {
        for chunk in chunks_of(&text) {
            total += 1;
            match agree(chunk) {
                Ok(true) => answered += 1,
                Ok(false) => {}
                Err(e) => failures.push(format!("{}:\n{chunk}\n{e}", path.display())),
            }
        }
    }
    eprintln!("fast parser answered {answered} of {total} chunks");
    assert!(failures.is_empty(), "{} disagreements; first:\n{}", failures.len(), failures[0]);
}

#[test]
fn answers_for_every_clean_chunk_of_the_examples_and_the_stdlib() {
    let root = repo_root();
    let mut missed = Vec::new();
    for (path, text) in sources() {
        let rel = path.strip_prefix(&root).unwrap();
        if !(rel.starts_with("examples") || rel.starts_with("frontend/stdlib")) {
            continue;
        }
        for chunk in chunks_of(&text) {
            if parse_chunk_tree_sitter(chunk).diagnostics.is_empty() && fast::parse_items(chunk).is_none() {
                missed.push(format!("{}:\n{chunk}", rel.display()));
            }
        }
    }
    assert!(missed.is_empty(), "{} clean chunks left to tree-sitter; first:\n{}", missed.len(), missed[0]);
}

/// Mutations that keep most of a chunk's shape: deleting, duplicating or inserting a
/// piece of syntax.
fn mutate(text: &str, at: usize, len: usize, what: u8) -> String {
    const PIECES: [&str; 16] =
        ["(", ")", ",", ":", "\n", "    ", "# c\n", " if x else ", "[", "]", "=", ".", "\"s\"", "not ", "**", ";"];
    let at = (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let end = (at..=(at + len).min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(at);
    match what % 3 {
        0 => format!("{}{}", &text[..at], &text[end..]),
        1 => format!("{}{}{}", &text[..end], &text[at..end], &text[end..]),
        _ => format!("{}{}{}", &text[..at], PIECES[len % PIECES.len()], &text[at..]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn agrees_on_mutated_sources(file in any::<prop::sample::Index>(), at in 0usize..4000, len in 0usize..40, what in any::<u8>()) {
        let sources = SOURCES.with(|s| s.clone());
        let (_, text) = &sources[file.index(sources.len())];
        let mutated = mutate(text, at % (text.len() + 1), len, what);
        for chunk in chunks_of(&mutated) {
            if let Err(e) = agree(chunk) {
                prop_assert!(false, "{chunk}\n{e}");
            }
        }
    }
}

thread_local! {
    static SOURCES: std::rc::Rc<Vec<(PathBuf, String)>> = std::rc::Rc::new(sources());
}

/// Every source mutated many times over with a fixed generator: the same check as the
/// property test, with a count that shows it is not vacuous (the fast parser must
/// answer for a good share of the mutants, and tree-sitter must refuse some).
#[test]
fn agrees_on_deterministic_mutations() {
    let sources = sources();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut answered, mut refused, mut total) = (0, 0, 0);
    for (path, text) in &sources {
        for _ in 0..40 {
            let mutated = mutate(text, next() as usize % (text.len() + 1), next() as usize % 40, next() as u8);
            for chunk in chunks_of(&mutated) {
                total += 1;
                match agree(chunk) {
                    Ok(true) => answered += 1,
                    Ok(false) => refused += 1,
                    Err(e) => panic!("{}, mutated:\n{chunk}\n{e}", path.display()),
                }
            }
        }
    }
    eprintln!("mutated chunks: {total}, the fast parser answered {answered} and left {refused} to tree-sitter");
    assert!(answered * 2 > total && refused * 10 > total, "answered {answered}, refused {refused} of {total}");
}

/// Layout and precedence corners, each checked both ways: the fast parser must agree
/// and, where tree-sitter finds no error, answer.
#[test]
fn agrees_on_layout_and_precedence_corners() {
    const CORNERS: &[&str] = &[
        "",
        "# only a comment\n",
        "\n\n",
        "X = 1",
        "X = 1   \n",
        "X: int = 3\n",
        "X: int\n",
        "A, B = 1, 2,\n",
        "A, = f()\n",
        "X = 1; Y = 2\n",
        "X = 1;\n",
        "\"\"\"module doc\"\"\"\n",
        "import a.b as c, d\n",
        "from a.b import (x as y, z,)\n",
        "from a import *\n",
        "@jit @autodiff\ndef f(x): return x\n",
        "@jit\n# between\n@k.auto(a=[1, 2])\ndef f(x: T[\"N\", f32], *, p: float = 0.5) -> T:\n    \"\"\"doc\"\"\"\n    return x\n",
        "def f():\n    x = 1\n    # trailing at 4\n",
        "def f():\n    x = 1\n# trailing at 0\n",
        "def f():\n    if a:\n        b = 1\n    # at 4 after inner block\n    # another\nX = 1\n",
        "def f():\n    if a:\n        b = 1\n        # at 8\n  # at 2\n",
        "def f():\n    if a: b = 1\n    elif c: d = 2  # c\n    else:\n        e = 3   \n",
        "def f():  # header comment\n    # first line comment\n\n    x = 1\n",
        "def f():\n    for i, j in z:\n        pass\n    else:\n        continue\n    while x:\n        break\n",
        "def f():\n    with device(gpu), prefetch(a, into=\"smem\") as p:\n        y = a\n    return y, a,\n",
        "def f():\n    x += 1; y @= 2\n    z: int\n    w: int = 3\n    return\n",
        "def f():\n    a = not b and c or d if e else g if h else i\n    b = a < b <= c is not d not in e in f is g\n",
        "def f():\n    a = -x ** -y * +z // w % v @ u - t << 2 >> 1 & 3 ^ 4 | 5\n    b = ~a.b[1:2, ::3, :, 4:][0](k=1, *[])\n",
        "def f():\n    a = x[1:]\n    b = x[:, None, ...]\n    c = {1: 2, 'a': [3, 4,],}\n    d = ()\n    e = (1,)\n    g = (1)\n    h = {}\n",
        "def f():\n    a = 0x1F + 0o17 + 0b101 + 1_000 + 1.5e-3 + .5 + 5. + 1e9 + r'\\d' + u\"x\" + '''t\n'''\n",
        "def f():\n    a = f(\n        x,\n        # inside brackets\n        y,\n    )\n",
        "def f():\n    return 1\ndef g():\n    return 2\n",
        "def f():\n        deep = 1\n",
        "def f():\n    if a:\n        b\n    else:\n        c\n  # odd\n",
        "def f():\n    x = 1\n    # c1\n        # c2 deeper\n    # c3\n",
        "def f(): pass\n# tail\n",
        "def f(a, b=1, *, c: int, d: int = 2,): pass",
        "X = [\n1,\n]\n",
        "X = 1 if 2 else 3\n",
        "X = a not in b\n",
        "X = (yield)\n",
        "X = lambda: 1\n",
        "X = {1}\n",
        "X = f(a for a in b)\n",
        "X = 1 +\n",
        "def f():\nreturn 1\n",
        "def f():\n    return 1\n  x = 2\n",
        "while x:\n    pass\n",
        "def f():\n    while x:\n        pass\n    else:\n        pass\n",
        "X = 'a' 'b'\n",
        "X = f'{a}'\n",
        "X = 99999999999999999999\n",
    ];
    for corner in CORNERS {
        for text in [corner.to_string(), corner.replace('\n', "  \n")] {
            for chunk in chunks_of(&text) {
                let answered = agree(chunk).unwrap_or_else(|e| panic!("{chunk:?}\n{e}"));
                let clean = parse_chunk_tree_sitter(chunk).diagnostics.is_empty();
                assert!(answered || !clean || chunk.contains("\\\n"), "left a clean chunk to tree-sitter: {chunk:?}");
            }
        }
    }
}
