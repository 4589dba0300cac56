//! The editor queries: `queries/*.scm` (nvim-treesitter's capture names, also what the
//! `tree-sitter` CLI reads) and `queries/helix/*.scm` (Helix's names).
//!
//! - every query file compiles against the grammar (node kinds, fields, syntax);
//! - every capture name is one the editor documents (`tests/fixtures/*-captures.txt`, copied
//!   from nvim-treesitter's and Helix's documentation, with their source);
//! - the highlights give the expected capture at the places marked in
//!   `test/highlight/*.tsr` (for both editors);
//! - textobjects, indents, folds and locals capture the expected nodes of a sample.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tree_sitter::{Language, Node, Parser, Query, QueryCursor, StreamingIterator, Tree};

fn language() -> Language {
    tree_sitter_tessera::LANGUAGE.into()
}

fn parse(source: &str) -> Tree {
    let mut parser = Parser::new();
    parser.set_language(&language()).expect("load the Tessera grammar");
    parser.parse(source, None).expect("parse")
}

fn grammar_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The two query sets: (editor, folder, capture list fixture).
fn query_sets() -> Vec<(&'static str, PathBuf, PathBuf)> {
    let g = grammar_dir();
    vec![
        ("nvim", g.join("queries"), g.join("tests/fixtures/nvim-treesitter-captures.txt")),
        ("helix", g.join("queries/helix"), g.join("tests/fixtures/helix-captures.txt")),
    ]
}

/// The query files each set must have.
fn required_files(editor: &str) -> &'static [&'static str] {
    match editor {
        "nvim" => &["highlights.scm", "locals.scm", "folds.scm", "indents.scm", "injections.scm", "textobjects.scm"],
        _ => &["highlights.scm", "locals.scm", "indents.scm", "injections.scm", "textobjects.scm"],
    }
}

fn scm_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "scm"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Compiles a query file; the error names the file, line and column.
fn compile(path: &Path) -> Result<Query, String> {
    let source = read(path);
    Query::new(&language(), &source)
        .map_err(|e| format!("{}:{}:{}: {:?}: {}", path.display(), e.row + 1, e.column + 1, e.kind, e.message))
}

fn load(editor: &str, file: &str) -> Query {
    let (_, dir, _) = query_sets().into_iter().find(|(e, _, _)| *e == editor).unwrap();
    compile(&dir.join(file)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_query_file_compiles() {
    let mut errors = Vec::new();
    for (editor, dir, _) in query_sets() {
        let files = scm_files(&dir);
        let names: Vec<String> = files.iter().map(|p| name_of(p)).collect();
        for required in required_files(editor) {
            if !names.iter().any(|n| n == required) {
                errors.push(format!("{editor}: {} is missing", dir.join(required).display()));
            }
        }
        for file in &files {
            if let Err(e) = compile(file) {
                errors.push(e);
            }
        }
    }
    assert!(errors.is_empty(), "query files that do not compile:\n{}", errors.join("\n"));
}

/// `[file.scm]` sections of a capture list fixture: file name -> documented capture names.
fn documented_captures(fixture: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (i, line) in read(fixture).lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(section.to_string());
            sections.entry(section.to_string()).or_default();
        } else {
            let section = current
                .as_ref()
                .unwrap_or_else(|| panic!("{}:{}: a name before any [section]", fixture.display(), i + 1));
            sections.get_mut(section).unwrap().insert(line.trim_start_matches('@').to_string());
        }
    }
    sections
}

/// Whether `capture` is in `allowed`; `prefix.<section>` in a list stands for `prefix.`
/// followed by any name of that section (Helix's `local.definition.<highlights>`).
fn is_documented(capture: &str, file: &str, sections: &BTreeMap<String, BTreeSet<String>>) -> bool {
    let Some(allowed) = sections.get(file) else { return false };
    if allowed.contains(capture) {
        return true;
    }
    allowed.iter().any(|entry| {
        let Some((prefix, rest)) = entry.split_once(".<") else { return false };
        let Some(section) = rest.strip_suffix('>') else { return false };
        let Some(suffix) = capture.strip_prefix(prefix).and_then(|s| s.strip_prefix('.')) else { return false };
        sections.get(&format!("{section}.scm")).is_some_and(|names| names.contains(suffix))
    })
}

#[test]
fn capture_names_are_the_ones_the_editors_document() {
    let mut errors = Vec::new();
    for (editor, dir, fixture) in query_sets() {
        let sections = documented_captures(&fixture);
        for file in scm_files(&dir) {
            let name = name_of(&file);
            if !sections.contains_key(&name) {
                errors.push(format!("{editor}: {name}: {} has no [{name}] section", fixture.display()));
                continue;
            }
            let Ok(query) = compile(&file) else { continue };
            for capture in query.capture_names() {
                // `@_name` captures only feed predicates; no editor shows them.
                if capture.starts_with('_') {
                    continue;
                }
                if !is_documented(capture, &name, &sections) {
                    errors.push(format!("{editor}: {}: @{capture} is not a documented capture", file.display()));
                }
            }
        }
    }
    assert!(errors.is_empty(), "undocumented capture names:\n{}", errors.join("\n"));
}

#[test]
fn the_capture_check_rejects_an_unknown_name() {
    // The check above must be able to fail: a Helix name in the Neovim set, a Neovim name in
    // the Helix set, and a made-up suffix are all refused.
    let nvim = documented_captures(&grammar_dir().join("tests/fixtures/nvim-treesitter-captures.txt"));
    let helix = documented_captures(&grammar_dir().join("tests/fixtures/helix-captures.txt"));
    assert!(is_documented("number.float", "highlights.scm", &nvim));
    assert!(!is_documented("constant.numeric.float", "highlights.scm", &nvim));
    assert!(!is_documented("indent", "indents.scm", &nvim));
    assert!(!is_documented("local.definition.variable.parameter", "locals.scm", &nvim));
    assert!(is_documented("constant.numeric.float", "highlights.scm", &helix));
    assert!(!is_documented("number.float", "highlights.scm", &helix));
    assert!(!is_documented("function.method.call", "highlights.scm", &helix));
    assert!(!is_documented("indent.begin", "indents.scm", &helix));
    assert!(!is_documented("function.outer", "textobjects.scm", &helix));
    assert!(is_documented("local.definition.variable.parameter", "locals.scm", &helix));
    assert!(!is_documented("local.definition.variable.nonsense", "locals.scm", &helix));
    assert!(!is_documented("attribute", "nonexistent.scm", &helix));
}

// ------------------------------------------------------------------------------ highlights

/// A capture of a highlight query: its node's byte range, pattern index and name.
#[derive(Clone, Debug)]
struct Capture {
    node: usize,
    start: usize,
    end: usize,
    pattern: usize,
    name: String,
}

/// Captures that give a colour (not `@_private`, `@spell`, `@nospell`, `@conceal`).
fn highlight_captures(query: &Query, tree: &Tree, source: &str) -> Vec<Capture> {
    let names = query.capture_names();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), source.as_bytes());
    let mut out = Vec::new();
    while let Some(m) = matches.next() {
        for c in m.captures() {
            let name = names[c.index as usize];
            if name.starts_with('_') || matches!(name, "spell" | "nospell" | "conceal") {
                continue;
            }
            out.push(Capture {
                node: c.node.id(),
                start: c.node.start_byte(),
                end: c.node.end_byte(),
                pattern: m.pattern_index,
                name: name.to_string(),
            });
        }
    }
    out
}

/// The capture shown at `byte`: of the captures covering it, the one of the pattern that
/// comes last in the file (Neovim 0.11+ orders highlights by pattern index; Helix 25.07 lets
/// the last pattern win among captures of the same node, and the innermost node win
/// otherwise, which `no_capture_contains_another` makes the same thing).
fn shown_at(captures: &[Capture], byte: usize) -> Option<&Capture> {
    captures
        .iter()
        .filter(|c| c.start <= byte && byte < c.end)
        .max_by_key(|c| (c.pattern, std::cmp::Reverse(c.end - c.start)))
}

/// One assertion of a highlight fixture.
#[derive(Debug)]
struct Assertion {
    line: usize,           // 0-based line of the asserted text
    column: usize,         // byte column in that line
    expected: [String; 2], // for Neovim, for Helix
    fixture_line: usize,
}

/// Assertions of a fixture (`test/highlight/*.tsr`). A comment line made of `#`, carets
/// (`^`, under the asserted columns) or `<-` (the column of the `#`), and one or two capture
/// names asserts the capture shown on the nearest line above that is not an assertion:
/// `# ^^^ @variable` for both editors, `# ^ @number @constant.numeric.integer` for Neovim,
/// then Helix. `@none`: nothing is shown.
fn assertions(source: &str) -> Vec<Assertion> {
    let mut out = Vec::new();
    let mut target: Option<usize> = None;
    for (i, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        let hash = line.len() - trimmed.len();
        let parsed = trimmed.strip_prefix('#').and_then(|rest| {
            let body = rest.trim_start();
            let offset = hash + 1 + (rest.len() - body.len());
            let (columns, names) = if let Some(names) = body.strip_prefix("<-") {
                (vec![hash], names)
            } else {
                let carets = body.len() - body.trim_start_matches('^').len();
                (((offset..offset + carets).collect::<Vec<_>>()), &body[carets..])
            };
            let names: Vec<&str> = names.split_whitespace().collect();
            let all_captures = names.iter().all(|n| n.len() > 1 && n.starts_with('@'));
            if columns.is_empty() || names.is_empty() || names.len() > 2 || !all_captures {
                return None;
            }
            let nvim = names[0][1..].to_string();
            let helix = names.get(1).unwrap_or(&names[0])[1..].to_string();
            Some((columns, [nvim, helix]))
        });
        match parsed {
            Some((columns, expected)) => {
                let line_no = target.unwrap_or_else(|| panic!("line {}: an assertion before any code", i + 1));
                for column in columns {
                    out.push(Assertion { line: line_no, column, expected: expected.clone(), fixture_line: i + 1 });
                }
            }
            None => target = Some(i),
        }
    }
    out
}

fn line_starts(source: &str) -> Vec<usize> {
    std::iter::once(0).chain(source.match_indices('\n').map(|(i, _)| i + 1)).collect()
}

fn fixtures() -> Vec<PathBuf> {
    let dir = grammar_dir().join("test/highlight");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsr"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no highlight fixtures in {}", dir.display());
    files
}

/// Failures of the assertions of one fixture for one editor (0: Neovim, 1: Helix).
fn check_highlights(query: &Query, editor: usize, path: &Path) -> Vec<String> {
    let source = read(path);
    let tree = parse(&source);
    let mut failures = Vec::new();
    if tree.root_node().has_error() {
        failures.push(format!("{}: the fixture does not parse cleanly", path.display()));
    }
    let captures = highlight_captures(query, &tree, &source);
    let starts = line_starts(&source);
    let list = assertions(&source);
    if list.is_empty() {
        failures.push(format!("{}: no assertions", path.display()));
    }
    for a in list {
        let byte = starts[a.line] + a.column;
        let shown = shown_at(&captures, byte).map(|c| c.name.as_str()).unwrap_or("none");
        if shown != a.expected[editor] {
            let text = source.lines().nth(a.line).unwrap_or("");
            failures.push(format!(
                "{}:{}: at line {} column {} ({:?}): expected @{}, shown @{}",
                path.display(),
                a.fixture_line,
                a.line + 1,
                a.column + 1,
                text.get(a.column..).unwrap_or("").chars().take(12).collect::<String>(),
                a.expected[editor],
                shown
            ));
        }
    }
    failures
}

#[test]
fn nvim_highlights_match_the_fixtures() {
    let query = load("nvim", "highlights.scm");
    let failures: Vec<String> = fixtures().iter().flat_map(|f| check_highlights(&query, 0, f)).collect();
    assert!(failures.is_empty(), "{} highlight assertions failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn helix_highlights_match_the_fixtures() {
    let query = load("helix", "highlights.scm");
    let failures: Vec<String> = fixtures().iter().flat_map(|f| check_highlights(&query, 1, f)).collect();
    assert!(failures.is_empty(), "{} highlight assertions failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_highlight_check_can_fail() {
    // The Neovim expectations against the Helix query disagree (different names), and the
    // assertion syntax is read as documented.
    let helix = load("helix", "highlights.scm");
    let failures: Vec<String> = fixtures().iter().flat_map(|f| check_highlights(&helix, 0, f)).collect();
    assert!(!failures.is_empty());
    let list = assertions("x = 1\n#   ^ @number @constant.numeric.integer\n# <- @variable\n# ^ not an assertion\n");
    assert_eq!(list.len(), 2);
    assert_eq!((list[0].line, list[0].column), (0, 4));
    assert_eq!(list[0].expected, ["number".to_string(), "constant.numeric.integer".to_string()]);
    assert_eq!((list[1].line, list[1].column), (0, 0));
    assert_eq!(list[1].expected, ["variable".to_string(), "variable".to_string()]);
}

/// Neovim before 0.11 and Helix let an inner node's capture win over an enclosing one
/// whatever the pattern order; Neovim 0.11+ goes by pattern order alone. The queries keep
/// every colour on leaves, so that both rules agree: no capture contains a capture of a
/// different name on another node (`(wildcard_import)` and its `"*"` token are two nodes).
#[test]
fn no_capture_contains_another() {
    let mut sources: Vec<PathBuf> = fixtures();
    let corpus = grammar_dir().join("../../tests/corpus/valid");
    if corpus.is_dir() {
        for entry in std::fs::read_dir(&corpus).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "tsr") {
                sources.push(entry.path());
            }
        }
    }
    let mut errors = Vec::new();
    for editor in ["nvim", "helix"] {
        let query = load(editor, "highlights.scm");
        for path in &sources {
            let source = read(path);
            let tree = parse(&source);
            let captures = highlight_captures(&query, &tree, &source);
            for outer in &captures {
                for inner in &captures {
                    let nested = inner.start < inner.end
                        && outer.start <= inner.start
                        && inner.end <= outer.end
                        && outer.node != inner.node;
                    if nested && outer.name != inner.name {
                        errors.push(format!(
                            "{editor}: {}: @{} ({}..{}) contains @{} ({}..{})",
                            path.display(),
                            outer.name,
                            outer.start,
                            outer.end,
                            inner.name,
                            inner.start,
                            inner.end
                        ));
                    }
                }
            }
        }
    }
    errors.dedup();
    assert!(
        errors.is_empty(),
        "nested highlight captures:\n{}",
        errors.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

// ------------------------------------------------------------------------------ other queries

const SAMPLE: &str = r#"import tessera as ts
from tessera import tile, f32

@jit
def scale(x: Tensor["n", f32], alpha: float = 2.0, *, out: Tensor["n", f32]):
    # double it
    for i in tile.range(0, 4):
        if alpha > 1.0:
            out[i] = alpha * x[i]
        else:
            pass
    return out
"#;

/// (capture name, node kind, text) of every capture of `query` on `source`.
fn captured(query: &Query, source: &str) -> Vec<(String, String, String)> {
    let tree = parse(source);
    assert!(!tree.root_node().has_error());
    let names = query.capture_names();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), source.as_bytes());
    let mut out = Vec::new();
    while let Some(m) = matches.next() {
        for c in m.captures() {
            let node: Node = c.node;
            out.push((
                names[c.index as usize].to_string(),
                node.kind().to_string(),
                source[node.byte_range()].to_string(),
            ));
        }
    }
    out
}

fn has(caps: &[(String, String, String)], name: &str, kind: &str, text_start: &str) -> bool {
    caps.iter().any(|(n, k, t)| n == name && k == kind && t.starts_with(text_start))
}

fn assert_has(caps: &[(String, String, String)], name: &str, kind: &str, text_start: &str) {
    assert!(
        has(caps, name, kind, text_start),
        "no @{name} on a {kind} starting with {text_start:?}; captures:\n{}",
        caps.iter()
            .map(|(n, k, t)| format!("  @{n} {k} {:?}", t.chars().take(30).collect::<String>()))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn textobjects_capture_functions_parameters_calls_and_blocks() {
    let nvim = captured(&load("nvim", "textobjects.scm"), SAMPLE);
    assert_has(&nvim, "function.outer", "decorated_definition", "@jit");
    assert_has(&nvim, "function.inner", "block", "for i in");
    assert_has(&nvim, "parameter.inner", "typed_parameter", "x: Tensor");
    assert_has(&nvim, "parameter.inner", "typed_default_parameter", "alpha: float");
    assert_has(&nvim, "parameter.outer", ",", ",");
    assert_has(&nvim, "call.outer", "call", "tile.range(0, 4)");
    assert_has(&nvim, "call.inner", "integer", "0");
    assert_has(&nvim, "loop.outer", "for_statement", "for i in");
    assert_has(&nvim, "loop.inner", "block", "if alpha");
    assert_has(&nvim, "conditional.outer", "if_statement", "if alpha");
    assert_has(&nvim, "conditional.inner", "block", "out[i] =");
    assert_has(&nvim, "comment.outer", "comment", "# double it");
    assert_has(&nvim, "return.outer", "return_statement", "return out");
    assert_has(&nvim, "block.outer", "for_statement", "for i in");

    let helix = captured(&load("helix", "textobjects.scm"), SAMPLE);
    assert_has(&helix, "function.around", "decorated_definition", "@jit");
    assert_has(&helix, "function.inside", "block", "for i in");
    assert_has(&helix, "parameter.inside", "typed_parameter", "x: Tensor");
    assert_has(&helix, "parameter.around", "typed_default_parameter", "alpha: float");
    assert_has(&helix, "parameter.inside", "integer", "0");
    assert_has(&helix, "comment.inside", "comment", "# double it");
    assert_has(&helix, "comment.around", "comment", "# double it");
}

#[test]
fn indents_open_blocks_and_brackets() {
    let nvim = captured(&load("nvim", "indents.scm"), SAMPLE);
    assert_has(&nvim, "indent.begin", "function_definition", "def scale");
    assert_has(&nvim, "indent.begin", "for_statement", "for i");
    assert_has(&nvim, "indent.begin", "if_statement", "if alpha");
    assert_has(&nvim, "indent.branch", "else_clause", "else:");
    assert_has(&nvim, "indent.dedent", "pass_statement", "pass");
    assert_has(&nvim, "indent.branch", ")", ")");

    let helix = captured(&load("helix", "indents.scm"), SAMPLE);
    assert_has(&helix, "indent", "function_definition", "def scale");
    assert_has(&helix, "extend", "function_definition", "def scale");
    assert_has(&helix, "indent", "parameters", "(x:");
    assert_has(&helix, "outdent", "else", "else");
    assert_has(&helix, "outdent", ")", ")");
    assert_has(&helix, "extend.prevent-once", "return_statement", "return out");
}

#[test]
fn folds_and_locals() {
    let folds = captured(&load("nvim", "folds.scm"), SAMPLE);
    assert_has(&folds, "fold", "function_definition", "def scale");
    assert_has(&folds, "fold", "for_statement", "for i");

    let nvim = captured(&load("nvim", "locals.scm"), SAMPLE);
    assert_has(&nvim, "local.scope", "function_definition", "def scale");
    assert_has(&nvim, "local.definition.function", "identifier", "scale");
    assert_has(&nvim, "local.definition.parameter", "identifier", "alpha");
    assert_has(&nvim, "local.definition.var", "identifier", "i");
    assert_has(&nvim, "local.definition.namespace", "identifier", "ts");
    assert_has(&nvim, "local.reference", "identifier", "alpha");

    let helix = captured(&load("helix", "locals.scm"), SAMPLE);
    assert_has(&helix, "local.scope", "function_definition", "def scale");
    assert_has(&helix, "local.definition.variable.parameter", "identifier", "alpha");
    assert_has(&helix, "local.definition.variable", "identifier", "i");
    assert_has(&helix, "local.definition.namespace", "identifier", "ts");
    assert_has(&helix, "local.reference", "identifier", "alpha");
}

#[test]
fn comments_are_injected_with_the_comment_language() {
    for editor in ["nvim", "helix"] {
        let query = load(editor, "injections.scm");
        let caps = captured(&query, SAMPLE);
        assert_has(&caps, "injection.content", "comment", "# double it");
        let settings: Vec<String> = (0..query.pattern_count())
            .flat_map(|i| {
                query.property_settings(i).iter().map(|p| format!("{}={}", p.key, p.value.as_deref().unwrap_or("")))
            })
            .collect();
        assert!(settings.iter().any(|s| s == "injection.language=comment"), "{editor}: {settings:?}");
    }
}
