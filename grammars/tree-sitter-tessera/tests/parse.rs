//! Parses the repository's test corpus (`tests/corpus`), compiles the queries, checks the node contract of
//! NODES.md, and feeds mutated programs to the parser (this mostly exercises the
//! external scanner in src/scanner.c: layout, brackets, serialization).

use std::ffi::{c_char, c_uint, c_void};
use std::path::{Path, PathBuf};

use tree_sitter::{InputEdit, Language, Node, Parser, Point, Query, Tree};

fn language() -> Language {
    tree_sitter_tessera::LANGUAGE.into()
}

fn parser() -> Parser {
    let mut parser = Parser::new();
    parser.set_language(&language()).expect("load the Tessera grammar");
    parser
}

/// `tests/corpus/{valid,invalid}` of the repository.
fn corpus_dir(kind: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus").join(kind);
    assert!(dir.is_dir(), "the test corpus is missing at {}", dir.display());
    dir
}

fn tsr_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read corpus directory")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsr"))
        .collect();
    files.sort();
    files
}

/// The first ERROR or MISSING node, if any.
fn first_error(node: Node) -> Option<Node> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    if !node.has_error() {
        return None;
    }
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    children.into_iter().find_map(first_error)
}

/// Structural sanity of a tree: every node lies inside its parent and inside the text,
/// and siblings are ordered.
fn check_tree(tree: &Tree, len: usize) {
    let mut cursor = tree.walk();
    let mut visited = 0usize;
    loop {
        let node = cursor.node();
        visited += 1;
        assert!(node.start_byte() <= node.end_byte(), "inverted node {node:?}");
        assert!(node.end_byte() <= len, "node {node:?} ends past the text ({len} bytes)");
        let mut prev_end = node.start_byte();
        for i in 0..node.child_count() {
            let child = node.child(i).unwrap();
            assert!(child.start_byte() >= prev_end, "overlapping children in {node:?}");
            assert!(child.end_byte() <= node.end_byte(), "child {child:?} outside {node:?}");
            prev_end = child.end_byte();
        }
        if cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                assert!(visited > 0);
                return;
            }
        }
    }
}

#[test]
fn valid_corpus_parses_without_errors() {
    let dir = corpus_dir("valid");
    let mut parser = parser();
    let files = tsr_files(&dir);
    assert!(!files.is_empty(), "no .tsr files in {}", dir.display());
    for path in files {
        let text = std::fs::read(&path).unwrap();
        let tree = parser.parse(&text, None).expect("parse");
        check_tree(&tree, text.len());
        if let Some(err) = first_error(tree.root_node()) {
            panic!(
                "{}: syntax error at {} ({}):\n{}",
                path.display(),
                err.start_position(),
                err.kind(),
                tree.root_node().to_sexp()
            );
        }
    }
}

#[test]
fn invalid_corpus_parses_without_panicking() {
    let dir = corpus_dir("invalid");
    let mut parser = parser();
    for path in tsr_files(&dir) {
        let text = std::fs::read(&path).unwrap();
        let tree = parser.parse(&text, None).expect("parse");
        check_tree(&tree, text.len());
        let name = path.file_name().unwrap().to_string_lossy();
        // Plain syntax errors must show up in the tree; the other files are
        // syntactically valid and fail later checks. `e0100_toplevel*` files hold statements
        // the grammar accepts anywhere and the frontend refuses at the top level;
        // `e0100_deep*` an expression the grammar accepts and the frontend finds too deep.
        let grammatical = name.starts_with("e0100_toplevel") || name.starts_with("e0100_deep");
        if (name.starts_with("e0100") && !grammatical) || name.starts_with("e0102") {
            assert!(tree.root_node().has_error(), "{name}: expected a syntax error");
        }
    }
}

#[test]
fn queries_compile() {
    let language = language();
    for (name, source) in [
        ("highlights.scm", tree_sitter_tessera::HIGHLIGHTS_QUERY),
        ("locals.scm", tree_sitter_tessera::LOCALS_QUERY),
        ("folds.scm", tree_sitter_tessera::FOLDS_QUERY),
        ("indents.scm", tree_sitter_tessera::INDENTS_QUERY),
    ] {
        if let Err(err) = Query::new(&language, source) {
            panic!("queries/{name}: {err}");
        }
    }
}

/// Every node kind and field that NODES.md promises exists in the grammar.
#[test]
fn node_contract() {
    let language = language();
    let kinds = [
        "module",
        "block",
        "expression_statement",
        "assignment",
        "augmented_assignment",
        "return_statement",
        "pass_statement",
        "break_statement",
        "continue_statement",
        "import_statement",
        "import_from_statement",
        "aliased_import",
        "wildcard_import",
        "dotted_name",
        "function_definition",
        "decorated_definition",
        "decorator",
        "parameters",
        "typed_parameter",
        "default_parameter",
        "typed_default_parameter",
        "keyword_separator",
        "if_statement",
        "elif_clause",
        "else_clause",
        "for_statement",
        "while_statement",
        "with_statement",
        "with_item",
        "pattern_list",
        "expression_list",
        "identifier",
        "integer",
        "float",
        "string",
        "true",
        "false",
        "none",
        "ellipsis",
        "attribute",
        "subscript",
        "slice",
        "call",
        "argument_list",
        "keyword_argument",
        "binary_operator",
        "unary_operator",
        "not_operator",
        "boolean_operator",
        "comparison_operator",
        "conditional_expression",
        "parenthesized_expression",
        "tuple",
        "list",
        "dictionary",
        "pair",
        "comment",
    ];
    for kind in kinds {
        assert_ne!(language.id_for_node_kind(kind, true), 0, "missing node kind {kind}");
    }
    let fields = [
        "left",
        "right",
        "type",
        "operator",
        "name",
        "module_name",
        "alias",
        "parameters",
        "return_type",
        "body",
        "decorator",
        "definition",
        "value",
        "condition",
        "consequence",
        "alternative",
        "object",
        "attribute",
        "subscript",
        "start",
        "stop",
        "step",
        "function",
        "arguments",
        "argument",
        "key",
    ];
    for field in fields {
        assert!(language.field_id_for_name(field).is_some(), "missing field {field}");
    }
    for op in ["not in", "is not"] {
        assert_ne!(language.id_for_node_kind(op, false), 0, "missing operator {op}");
    }
}

#[test]
fn contract_examples() {
    let mut parser = parser();
    let text = "@jit @autodiff\n\
                def f(x: Tensor[\"B\", \"D\", bf16 @accum(f32)], *, p: float = 0.1) -> Tensor[f32]:\n    \
                \"\"\"doc\"\"\"\n    \
                q, k = split(x); (g,) = grad(f)(x)\n    \
                y: int = t[:, None] if a is not b else -x ** 2\n    \
                for i, j in pairs: acc += a @ b\n    \
                with device(gpu) as d:\n        \
                return q, k\n";
    let tree = parser.parse(text, None).unwrap();
    let root = tree.root_node();
    assert!(first_error(root).is_none(), "{}", root.to_sexp());

    let def = root.named_child(0).unwrap();
    assert_eq!(def.kind(), "decorated_definition");
    let mut cursor = def.walk();
    let decorators: Vec<Node> = def.children_by_field_name("decorator", &mut cursor).collect();
    assert_eq!(decorators.len(), 2, "`@jit @autodiff` is two decorators");
    let func = def.child_by_field_name("definition").unwrap();
    assert_eq!(func.kind(), "function_definition");
    assert_eq!(func.child_by_field_name("name").unwrap().utf8_text(text.as_bytes()).unwrap(), "f");
    assert_eq!(func.child_by_field_name("return_type").unwrap().kind(), "subscript");
    let params = func.child_by_field_name("parameters").unwrap();
    let kinds: Vec<&str> =
        (0..params.named_child_count()).map(|i| params.named_child(i as u32).unwrap().kind()).collect();
    assert_eq!(kinds, ["typed_parameter", "keyword_separator", "typed_default_parameter"]);

    let body = func.child_by_field_name("body").unwrap();
    assert_eq!(body.kind(), "block");
    let stmts: Vec<&str> = (0..body.named_child_count()).map(|i| body.named_child(i as u32).unwrap().kind()).collect();
    assert_eq!(
        stmts,
        ["expression_statement", "assignment", "assignment", "assignment", "for_statement", "with_statement"]
    );
    let tuple_target = body.named_child(1).unwrap().child_by_field_name("left").unwrap();
    assert_eq!(tuple_target.kind(), "pattern_list");
    let annotated = body.named_child(3).unwrap();
    assert_eq!(annotated.child_by_field_name("type").unwrap().kind(), "identifier");
    let cond = annotated.child_by_field_name("right").unwrap();
    assert_eq!(cond.kind(), "conditional_expression");
    let comparison = cond.child_by_field_name("condition").unwrap();
    assert_eq!(comparison.child_by_field_name("operator").unwrap().kind(), "is not");
    let alt = cond.child_by_field_name("alternative").unwrap();
    assert_eq!(alt.kind(), "unary_operator", "-x ** 2 is -(x ** 2)");
    let slice = cond.child_by_field_name("consequence").unwrap();
    assert_eq!(slice.kind(), "subscript");
}

// ------------------------------------------------------------------ mutation smoke test

/// xorshift64*: a tiny deterministic generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const SEEDS: &[&str] = &[
    "import tessera as ts\nfrom tessera import *\n\n@ts.kernel\ndef saxpy(x: ts.Tensor[\"n\", ts.f32], alpha: ts.f32):\n    \"\"\"doc\"\"\"\n    i = ts.tile.linear_id()\n    if i < n:\n        y[i] = alpha * x[i] + y[i]\n    return y\n",
    "@jit @autodiff\ndef f(x, *, heads: int):\n    acc = tile.zeros((T.m,T.d), f32); m = 1\n    if causal: tile.mask_causal(S)\n    elif a: pass\n    else:\n        while b:\n            break\n    with device(gpu) as d, other:\n        q, k = (1,\n  # comment\n\n            2)\n    return q \\\n        + k\n",
    "x = {\"a\": [1, 2,], 'b': (3,)}\ny = a if b else c\nz = not a and b or c in d\nw = a not in b is not c\nv = t[1:2:3, ::, None]\n",
];

const FRAGMENTS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\r",
    b" ",
    b"    ",
    b"\t",
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\\",
    b"\\\n",
    b"#",
    b"# c\n",
    b"\"",
    b"'",
    b"\"\"\"",
    b"'''",
    b":",
    b"@",
    b";",
    b",",
    b"def ",
    b"if x:",
    b"\n    ",
    b"\n        ",
    b"\n\n",
    b"else:",
    b"return",
    b"@jit\n",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xef\xbb\xbf",
    b"...",
    b"**",
    b"->",
    b"x = ",
    b"\n@a\n",
    b"\nfrom x import (",
];

fn mutate(rng: &mut Rng, text: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = text.len();
    match rng.below(8) {
        0 | 1 => {
            let at = rng.below(len + 1);
            let frag = FRAGMENTS[rng.below(FRAGMENTS.len())];
            text.splice(at..at, frag.iter().copied());
        }
        2 => {
            if len > 0 {
                let at = rng.below(len);
                let n = 1 + rng.below(16.min(len - at));
                text.drain(at..at + n);
            }
        }
        3 => {
            if len > 0 {
                let at = rng.below(len);
                text[at] = (rng.next() & 0xff) as u8;
            }
        }
        4 => {
            // Duplicate a line somewhere else.
            if len > 0 {
                let at = rng.below(len);
                let start = text[..at].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                let end = text[at..].iter().position(|&b| b == b'\n').map_or(len, |p| at + p + 1);
                let line: Vec<u8> = text[start..end].to_vec();
                let to = rng.below(len + 1);
                text.splice(to..to, line);
            }
        }
        5 => {
            let at = rng.below(len + 1);
            text.truncate(at);
        }
        6 => {
            // Splice in a chunk of another program.
            let other = &others[rng.below(others.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(200));
                let at = rng.below(len + 1);
                text.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        _ => {
            // Deep nesting: brackets or indentation.
            let at = rng.below(len + 1);
            let depth = 1 + rng.below(300);
            let piece: Vec<u8> = match rng.below(3) {
                0 => std::iter::repeat_n(b'(', depth).collect(),
                1 => std::iter::repeat_n(b')', depth).collect(),
                _ => {
                    let mut v = Vec::new();
                    for d in 0..depth.min(200) {
                        v.extend_from_slice(b"\n");
                        v.extend(std::iter::repeat_n(b' ', d + 1));
                        v.extend_from_slice(b"if a:");
                    }
                    v
                }
            };
            text.splice(at..at, piece);
        }
    }
}

/// `(UNEXPECTED 'x')`, `(UNEXPECTED 65279)`, `(UNEXPECTED INVALID)` -> `(UNEXPECTED)`.
fn normalize_unexpected(sexp: &str) -> String {
    const TAG: &str = "(UNEXPECTED ";
    let mut out = String::with_capacity(sexp.len());
    let mut rest = sexp;
    while let Some(at) = rest.find(TAG) {
        out.push_str(&rest[..at]);
        out.push_str("(UNEXPECTED)");
        let after = &rest[at + TAG.len()..];
        let skip = if let Some(quoted) = after.strip_prefix('\'') {
            // A quoted character, possibly escaped, then `')`.
            quoted.find("')").map_or(after.len(), |p| p + 3)
        } else {
            after.find(')').map_or(after.len(), |p| p + 1)
        };
        rest = &after[skip.min(after.len())..];
    }
    out.push_str(rest);
    out
}

fn point_at(text: &[u8], byte: usize) -> Point {
    let before = &text[..byte];
    let row = before.iter().filter(|&&b| b == b'\n').count();
    let column = byte - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    Point::new(row, column)
}

#[test]
fn mutated_programs_never_crash_the_parser() {
    let mut seeds: Vec<Vec<u8>> = SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    for kind in ["valid", "invalid"] {
        for path in tsr_files(&corpus_dir(kind)) {
            seeds.push(std::fs::read(path).unwrap());
        }
    }
    // TESSERA_FUZZ_ITERATIONS / TESSERA_FUZZ_SEED run a longer or different campaign.
    let iterations: usize = std::env::var("TESSERA_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 =
        std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x9E37_79B9_7F4A_7C15);
    let mut parser = parser();
    let mut rng = Rng(seed | 1);
    for iteration in 0..iterations {
        let mut text = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(8) {
            mutate(&mut rng, &mut text, &seeds);
        }
        let tree = parser.parse(&text, None).unwrap_or_else(|| panic!("iteration {iteration}: no tree"));
        check_tree(&tree, text.len());

        if iteration % 5 == 0 {
            // Incremental reparse after one more edit must give the fresh parse's tree
            // whenever the fresh parse has no error (exercises scanner state reuse).
            let mut edited = text.clone();
            let (start, old_end, new_end) = {
                let at = rng.below(edited.len() + 1);
                let frag = FRAGMENTS[rng.below(FRAGMENTS.len())];
                let remove = rng.below(4.min(edited.len() - at) + 1);
                edited.splice(at..at + remove, frag.iter().copied());
                (at, at + remove, at + frag.len())
            };
            let mut old = tree.clone();
            old.edit(&InputEdit {
                start_byte: start,
                old_end_byte: old_end,
                new_end_byte: new_end,
                start_position: point_at(&text, start),
                old_end_position: point_at(&text, old_end),
                new_end_position: point_at(&edited, new_end),
            });
            let incremental = parser.parse(&edited, Some(&old)).expect("incremental parse");
            check_tree(&incremental, edited.len());
            let fresh = parser.parse(&edited, None).expect("fresh parse");
            if !fresh.root_node().has_error() {
                assert_eq!(
                    incremental.root_node().to_sexp(),
                    fresh.root_node().to_sexp(),
                    "iteration {iteration}: incremental and fresh parses differ for {:?}",
                    String::from_utf8_lossy(&edited)
                );
            }
        }

        if iteration % 7 == 0 {
            // Feed the text in tiny chunks.
            let step = 1 + rng.below(5);
            let chunked = parser
                .parse_with_options(
                    &mut |offset: usize, _: Point| -> &[u8] {
                        if offset >= text.len() {
                            &[]
                        } else {
                            &text[offset..(offset + step).min(text.len())]
                        }
                    },
                    None,
                    None,
                )
                .expect("chunked parse");
            // (The character an error token reports may differ when a multi-byte
            // character straddles two chunks; nothing else may.)
            assert_eq!(
                normalize_unexpected(&chunked.root_node().to_sexp()),
                normalize_unexpected(&tree.root_node().to_sexp()),
                "iteration {iteration}: chunked parse differs"
            );
        }
    }
}

#[test]
fn pathological_nesting() {
    let mut parser = parser();
    let mut deep_blocks = String::new();
    for depth in 0..300 {
        deep_blocks.push_str(&" ".repeat(depth));
        deep_blocks.push_str("if a:\n");
    }
    deep_blocks.push_str(&" ".repeat(300));
    deep_blocks.push_str("pass\nx = 1\n");
    let wide_indent = format!("if a:\n{}b\n{}c\nd\n", " ".repeat(70_000), "\t".repeat(9_000));
    let brackets = format!("x = {}1{}\ny = 2\n", "(".repeat(20_000), ")".repeat(20_000));
    let unclosed = format!("x = {}\ndef f():\n    pass\n", "[".repeat(5_000));
    let comments = format!("def f():\n    x = 1\n{}    y = 2\n", "# c\n".repeat(20_000));
    for text in [deep_blocks, wide_indent, brackets, unclosed, comments] {
        let tree = parser.parse(&text, None).expect("parse");
        check_tree(&tree, text.len());
    }
}

// ------------------------------------------------------------------ scanner state

unsafe extern "C" {
    fn tree_sitter_tessera_external_scanner_create() -> *mut c_void;
    fn tree_sitter_tessera_external_scanner_destroy(payload: *mut c_void);
    fn tree_sitter_tessera_external_scanner_serialize(payload: *mut c_void, buffer: *mut c_char) -> c_uint;
    fn tree_sitter_tessera_external_scanner_deserialize(payload: *mut c_void, buffer: *const c_char, length: c_uint);
}

/// Deserializing arbitrary bytes (not only our own output) never reads out of bounds,
/// and serializing always fits the buffer and round-trips.
#[test]
fn scanner_state_round_trips() {
    const BUFFER: usize = 1024; // TREE_SITTER_SERIALIZATION_BUFFER_SIZE
    let mut rng = Rng(42);
    unsafe {
        let scanner = tree_sitter_tessera_external_scanner_create();
        assert!(!scanner.is_null());
        for _ in 0..2000 {
            let len = rng.below(BUFFER + 1);
            let input: Vec<u8> =
                (0..len).map(|_| if rng.below(3) == 0 { 255 } else { (rng.next() & 0xff) as u8 }).collect();
            tree_sitter_tessera_external_scanner_deserialize(scanner, input.as_ptr().cast(), len as c_uint);
            let mut first = vec![0u8; BUFFER];
            let n = tree_sitter_tessera_external_scanner_serialize(scanner, first.as_mut_ptr().cast()) as usize;
            assert!(n <= BUFFER);
            tree_sitter_tessera_external_scanner_deserialize(scanner, first.as_ptr().cast(), n as c_uint);
            let mut second = vec![0u8; BUFFER];
            let m = tree_sitter_tessera_external_scanner_serialize(scanner, second.as_mut_ptr().cast()) as usize;
            assert_eq!(&first[..n], &second[..m], "state does not round-trip");
        }
        tree_sitter_tessera_external_scanner_deserialize(scanner, std::ptr::null(), 0);
        tree_sitter_tessera_external_scanner_destroy(scanner);
    }
}
