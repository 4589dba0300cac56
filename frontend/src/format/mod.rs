//! The source formatter shared by `tessera fmt` and the language server.
//!
//! It is conservative: it keeps the line structure (where the author broke a line, the
//! output breaks it too) and normalizes everything else:
//! - statements indented by 4 spaces per block; continuation lines inside brackets
//!   aligned with the opening bracket (`def f(a,` / `      b)`), or indented 4 more than
//!   the opening line when the bracket ends its line (a hanging indent);
//! - one space around binary operators, `=` of assignments, `->`, comparisons and
//!   keywords; none around `=` of keyword arguments and unannotated defaults (PEP 8);
//!   one space after `,` and `:`, none before; no spaces inside brackets or around `.`;
//!   `:` of slices unspaced; the policy `@` inside types written `bf16 @accum(f32)`;
//! - two spaces before a trailing comment; comments otherwise kept verbatim;
//! - two blank lines around top-level definitions, at most two blank lines elsewhere
//!   at top level and one inside bodies, none at the start of a block;
//! - no trailing whitespace (outside string literals), one newline at the end.
//!
//! It never changes meaning: each printed top-level statement is parsed again and its
//! item AST compared with the input's modulo positions, and its token sequence (comments
//! included) with the input's; any difference is an error, not an output. Files with
//! syntax errors are refused.
//!
//! It works one top-level statement at a time (the chunks of `syntax::chunks`, which the
//! compiler parses the same way), keeping only the previous statement's tokens for the
//! blank-line rules: time and memory are linear in the file's size, and memory beyond
//! the input and the output is bounded by the largest statement (a 50 MB file used to
//! take minutes and gigabytes with one tree for the whole file).
//!
//! This file owns the entry point, the chunk parse and the token stream (`Leaf`) with
//! the node predicates it is built from; `printer` lays the tokens out, and `verify`
//! zeroes the positions of an AST so that input and output can be compared.

use std::fmt;

use tree_sitter::{Node, Parser, Tree};

use crate::check::dtype::{DType, Policy};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::{ast, chunks, lexical, lower};

mod printer;
mod verify;

use printer::Printer;
pub use verify::strip_module;

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FormatError {
    /// The source has syntax errors (the first one's message, with its position).
    Syntax(String),
    /// Formatting would have changed the program (a formatter bug); nothing is returned.
    Unsafe(String),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Syntax(m) => write!(f, "cannot format a file with syntax errors: {m}"),
            FormatError::Unsafe(m) => {
                write!(f, "formatting would change the program ({m}); the file was left unchanged")
            }
        }
    }
}

impl std::error::Error for FormatError {}

/// Formats a whole file (see the module documentation for the rules).
pub fn format_source(text: &str) -> Result<String, FormatError> {
    let mut printer = Printer::new(text);
    let mut pieces = 0usize;
    for range in chunks::split(text) {
        if printer.chunk(range)? {
            pieces += 1;
        }
    }
    let out = printer.finish();
    // Each statement was verified on its own; the output must also cut into the same
    // statements, so that together they are the same program.
    let out_pieces = chunks::split(&out).iter().filter(|r| !r.slice(&out).trim().is_empty()).count();
    if out_pieces != pieces {
        return Err(FormatError::Unsafe(format!("{pieces} top-level statements became {out_pieces}")));
    }
    Ok(out)
}

fn is_syntax_code(code: Code) -> bool {
    matches!(code, Code::E0100 | Code::E0101 | Code::E0102 | Code::E0104)
}

/// One chunk parsed: its tree, its item AST (chunk-relative) and its diagnostics.
struct ParsedChunk {
    tree: Tree,
    items: Vec<ast::Item>,
    diagnostics: Vec<Diagnostic>,
}

/// Parses a chunk once for both the token stream and the item AST (what
/// `syntax::parse_chunk` does, keeping the tree).
fn parse_chunk(parser: &mut Parser, text: &str) -> Option<ParsedChunk> {
    let lexical = lexical::scan(text, None);
    let tree = parser.parse(text, None)?;
    let lowered = lower::lower(text, &tree, &lexical);
    let mut diagnostics = lexical.diagnostics;
    diagnostics.extend(lowered.diagnostics);
    Some(ParsedChunk { tree, items: lowered.module.items, diagnostics })
}

/// A token of the concrete tree, with what the printer needs of its ancestors (so that
/// no tree is kept, and no `Node::parent` walk from the root is ever made).
#[derive(Clone, Copy)]
struct Leaf {
    /// Absolute byte offsets.
    start: usize,
    end: usize,
    /// 0-based absolute rows of its first and last character.
    row: usize,
    end_row: usize,
    kind: &'static str,
    parent: &'static str,
    /// The top-level statement it belongs to (a counter over the file), and whether
    /// that statement is a definition.
    top: u32,
    top_is_def: bool,
    /// An `@` that attaches a policy to a type (`bf16 @accum(f32)`).
    policy_at: bool,
}

/// The grammar's node kinds by id, as `'static` strings (a leaf outlives its tree).
fn kind_name(n: Node<'_>) -> &'static str {
    static KINDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let kinds = KINDS.get_or_init(|| {
        let language = lower::language();
        (0..language.node_kind_count() as u16)
            .map(|id| &*Box::leak(language.node_kind_for_id(id).unwrap_or("").to_string().into_boxed_str()))
            .collect()
    });
    kinds.get(n.kind_id() as usize).copied().unwrap_or("")
}

/// The tokens of a chunk's tree; `offset` and `row` are where the chunk starts, `tops`
/// numbers the top-level statements.
fn collect_leaves(tree: &Tree, text: &str, offset: usize, row: usize, tops: &mut u32, out: &mut Vec<Leaf>) {
    let mut cursor = tree.walk();
    // The ancestors of the cursor's node (the root first).
    let mut ancestors: Vec<Node<'_>> = Vec::new();
    let (mut top, mut top_is_def) = (0u32, false);
    loop {
        let n = cursor.node();
        if ancestors.len() == 1 {
            *tops += 1;
            top = *tops;
            top_is_def = is_def(n);
        }
        if n.child_count() == 0 && n.end_byte() > n.start_byte() {
            let slice = &text[n.start_byte()..n.end_byte()];
            if !slice.trim().is_empty() {
                let policy_at = n.kind() == "@"
                    && ancestors.last().is_some_and(|&bin| {
                        bin.kind() == "binary_operator" && policy_binary(bin, text, in_annotation(&ancestors))
                    });
                debug_assert_eq!(kind_name(n), n.kind());
                out.push(Leaf {
                    start: offset + n.start_byte(),
                    end: offset + n.end_byte(),
                    row: row + n.start_position().row,
                    end_row: row + n.end_position().row,
                    kind: kind_name(n),
                    parent: ancestors.last().map_or("", |&p| kind_name(p)),
                    top,
                    top_is_def,
                    policy_at,
                });
            }
        }
        if cursor.goto_first_child() {
            ancestors.push(n);
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
            ancestors.pop();
        }
    }
}

fn leaf_text<'a>(text: &'a str, l: &Leaf) -> &'a str {
    let s = &text[l.start..l.end];
    if l.kind == "comment" {
        s.trim_end()
    } else {
        s
    }
}

fn is_def(node: Node<'_>) -> bool {
    matches!(node.kind(), "function_definition" | "decorated_definition")
}

/// Whether the binary operator `bin` (`left @ right`) attaches a policy to a type:
/// `bf16 @accum(f32)`, `KVCache[...] @paged`. `annotated`: `bin` is inside an annotation.
fn policy_binary(bin: Node<'_>, text: &str, annotated: bool) -> bool {
    let src = |n: Node<'_>| &text[n.start_byte()..n.end_byte()];
    let is_policy_name = |n: Node<'_>| match n.kind() {
        "identifier" => Policy::NAMES.contains(&src(n)),
        "call" => n
            .child_by_field_name("function")
            .is_some_and(|f| f.kind() == "identifier" && Policy::NAMES.contains(&src(f))),
        _ => false,
    };
    let Some(right) = bin.child_by_field_name("right") else {
        return false;
    };
    if !is_policy_name(right) {
        return false;
    }
    annotated || bin.child_by_field_name("left").is_some_and(|l| typeish(l, text, annotated))
}

fn typeish(n: Node<'_>, text: &str, annotated: bool) -> bool {
    let src = &text[n.start_byte()..n.end_byte()];
    match n.kind() {
        "identifier" => DType::from_name(src).is_some(),
        "attribute" => n
            .child_by_field_name("attribute")
            .is_some_and(|a| DType::from_name(&text[a.start_byte()..a.end_byte()]).is_some()),
        "subscript" => true,
        // A left operand is inside an annotation exactly when its operator is.
        "binary_operator" => {
            n.child_by_field_name("operator").is_some_and(|op| op.kind() == "@" && policy_binary(n, text, annotated))
        }
        _ => false,
    }
}

/// Whether the last of `ancestors` (root first) is inside a type annotation.
fn in_annotation(ancestors: &[Node<'_>]) -> bool {
    for k in (1..ancestors.len()).rev() {
        let (parent, child) = (ancestors[k - 1], ancestors[k]);
        match parent.kind() {
            "typed_parameter" | "typed_default_parameter" | "assignment" => {
                return parent.child_by_field_name("type") == Some(child);
            }
            "function_definition" => {
                return parent.child_by_field_name("return_type") == Some(child);
            }
            "module" | "block" => return false,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax;

    fn fmt(src: &str) -> String {
        match format_source(src) {
            Ok(s) => s,
            Err(e) => panic!("{e}\n--- input ---\n{src}"),
        }
    }

    #[test]
    fn normalizes_spacing() {
        let src = "import tessera as ts\nfrom tessera import *\n@kernel\ndef f(a:Tensor[\"M\",bf16@accum(f32)],b :f32=1.0,*,c=2)->Tensor[\"M\",f32]:\n  x=a[0:1,:]+b*-c  # note   \n  y = f(x , mask = x<1)\n  return x\n";
        expect_test::expect![[r#"
            import tessera as ts
            from tessera import *


            @kernel
            def f(a: Tensor["M", bf16 @accum(f32)], b: f32 = 1.0, *, c=2) -> Tensor["M", f32]:
                x = a[0:1, :] + b * -c  # note
                y = f(x, mask=x < 1)
                return x
        "#]]
        .assert_eq(&fmt(src));
    }

    #[test]
    fn keeps_continuations_and_comments() {
        let src = "# header\n\nX = 1\n# about f\n@jit\ndef f(a: Tensor[\"M\", f32],\n   b: Tensor[\"M\", f32]) -> Tensor[\"M\", f32]:\n    \"\"\"Doc.\n\n    more\"\"\"\n\n\n\n    # inside\n    y = foo(\n      a,\n          b,\n    )\n    if y:\n\n        return a @ b\n    # trailing\n    return y\n# end\n";
        expect_test::expect![[r#"
            # header

            X = 1


            # about f
            @jit
            def f(a: Tensor["M", f32],
                  b: Tensor["M", f32]) -> Tensor["M", f32]:
                """Doc.

                more"""

                # inside
                y = foo(
                    a,
                    b,
                )
                if y:
                    return a @ b
                # trailing
                return y


            # end
        "#]]
        .assert_eq(&fmt(src));
    }

    #[test]
    fn policies_outside_annotations() {
        let src =
            "@kernel\ndef k(x: Tensor[\"N\", f32]):\n    a = tile.zeros((16,), bf16@accum(f32))\n    b = x @ accum\n";
        let out = fmt(src);
        assert!(out.contains("bf16 @accum(f32)"), "{out}");
        assert!(out.contains("x @ accum"), "{out}");
    }

    #[test]
    fn refuses_syntax_errors() {
        assert!(matches!(format_source("def f(:\n    pass\n"), Err(FormatError::Syntax(_))));
        assert!(matches!(format_source("def f():\n\tpass\n"), Err(FormatError::Syntax(_))));
    }

    #[test]
    fn idempotent_on_small_inputs() {
        for src in [
            "",
            "\n\n",
            "# only a comment",
            "X = (1,\n     2)\nY = [\n    1, 2,\n]\n",
            "@kernel\ndef k(x: Tensor[\"N\", f32]):\n    if x: pass\n    else:\n        pass\n",
        ] {
            let once = fmt(src);
            assert_eq!(fmt(&once), once, "not idempotent on {src:?}");
        }
    }

    fn tsr_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
            .collect();
        out.sort();
        out
    }

    /// Every example, every valid corpus file and the stdlib: formatting succeeds, keeps
    /// the AST (checked inside `format_source`), keeps comments, and is idempotent.
    #[test]
    fn corpus_is_idempotent_and_ast_preserving() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dirs = [root.join("../examples"), root.join("stdlib"), root.join("../tests/corpus/valid")];
        let mut count = 0;
        for dir in &dirs {
            for path in tsr_files(dir) {
                let src = std::fs::read_to_string(&path).unwrap();
                let once = format_source(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let twice = format_source(&once).unwrap_or_else(|e| panic!("{} (second pass): {e}", path.display()));
                assert_eq!(once, twice, "{}: formatting is not idempotent", path.display());
                let a = syntax::parse(&src, None);
                let b = syntax::parse(&once, None);
                assert_eq!(strip_module(&a.module), strip_module(&b.module), "{}", path.display());
                let comments = |s: &str| -> Vec<String> {
                    crate::ide::lex::lex(s, 0)
                        .into_iter()
                        .filter(|t| t.kind == crate::ide::lex::TokKind::Comment)
                        .map(|t| t.text(s).trim_end().to_string())
                        .collect()
                };
                assert_eq!(comments(&src), comments(&once), "{}", path.display());
                assert!(once.lines().all(|l| l == l.trim_end()), "{}: trailing whitespace", path.display());
                count += 1;
            }
        }
        assert!(count >= 20, "only {count} files found");
    }

    /// Invalid corpus files are refused (syntax errors) or formatted safely; never `Unsafe`.
    #[test]
    fn invalid_corpus_never_unsafe() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join("../tests/corpus/invalid");
        for path in tsr_files(&dir) {
            let src = std::fs::read_to_string(&path).unwrap();
            match format_source(&src) {
                Ok(once) => assert_eq!(format_source(&once).as_ref(), Ok(&once), "{}", path.display()),
                Err(FormatError::Syntax(_)) => {}
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
    }

    /// A meaning change is detected: the verifier compares ASTs modulo ranges.
    #[test]
    fn verifier_detects_changes() {
        let a = syntax::parse("X = 1 + 2 * 3\n", None);
        let b = syntax::parse("X = (1 + 2) * 3\n", None);
        assert_ne!(strip_module(&a.module), strip_module(&b.module));
        let c = syntax::parse("X  =  1+2*3\n", None);
        assert_eq!(strip_module(&a.module), strip_module(&c.module));
    }
}
