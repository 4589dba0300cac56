//! E0100 diagnostics for the parser's ERROR and MISSING nodes: where to report them and
//! how to phrase them ("expected ... in the argument list"). Separate from lowering,
//! which skips those nodes; this only reads the tree.

use tree_sitter::Node;

use super::range_of;
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::lexical::LexicalReport;
use crate::text::TextRange;

/// One E0100 per ERROR region and per MISSING token, unless a lexical error explains it.
pub(super) fn collect_syntax_errors(text: &str, root: Node, lexical: &LexicalReport, out: &mut Vec<Diagnostic>) {
    if !root.has_error() {
        return;
    }
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.is_missing() {
            let at = node.start_byte() as u32;
            let range = TextRange::empty(at);
            if !lexical.shadows(range) {
                let kind = node.kind();
                let what =
                    if kind.chars().all(|c| c.is_ascii_alphabetic() || c == '_') && kind.len() > 1 && !is_keyword(kind)
                    {
                        describe_kind(kind).to_string()
                    } else {
                        format!("`{kind}`")
                    };
                out.push(Diagnostic::new(Code::E0100, range, format!("syntax error: expected {what}")));
            }
            continue;
        }
        if node.is_error() {
            let range = error_span(text, node);
            if !lexical.shadows(range) && !lexical.shadows(range_of(node)) {
                let token = range.slice(text);
                let context = node.parent().map(|p| describe_context(p.kind())).unwrap_or("");
                let message = if let Some(hint) = python_construct(token, node) {
                    hint
                } else if token.trim().is_empty() {
                    format!("syntax error{context}")
                } else {
                    format!("syntax error: unexpected `{}`{context}", truncate(token, 30))
                };
                out.push(Diagnostic::new(Code::E0100, range, message));
            }
            continue;
        }
        let mut cursor = node.walk();
        // Push in reverse so that diagnostics come out in source order.
        let children: Vec<Node> = node.children(&mut cursor).filter(|c| c.has_error() || c.is_missing()).collect();
        stack.extend(children.into_iter().rev());
    }
}

/// Python constructs Tessera does not have, recognised from the token the parser
/// stumbled on, so the message names the construct instead of the token.
fn python_construct(token: &str, node: Node) -> Option<String> {
    let in_brackets = std::iter::successors(node.parent(), |n| n.parent()).take(4).any(|p| {
        matches!(p.kind(), "list" | "argument_list" | "parenthesized_expression" | "dictionary" | "subscript")
    });
    match token {
        "for" if in_brackets => Some(
            "comprehensions are not supported: write the values out, or build them in a compile-time `for ... in range(...)` loop"
                .to_string(),
        ),
        "lambda" => Some("lambda expressions are not supported: define a helper function".to_string()),
        "class" => Some("classes are not supported: Tessera programs are functions and constants".to_string()),
        "try" | "except" | "raise" => Some("exceptions are not supported in Tessera".to_string()),
        "yield" | "async" | "await" => Some(format!("`{token}` is not supported in Tessera")),
        _ => None,
    }
}

/// The first token of an ERROR node: a precise primary span even for large regions.
fn error_span(text: &str, node: Node) -> TextRange {
    let mut first = node;
    while let Some(child) = first.child(0) {
        first = child;
    }
    let mut range = range_of(first);
    if range.is_empty() {
        range = range_of(node);
    }
    // Never more than the first line.
    let slice = range.slice(text);
    if let Some(nl) = slice.find('\n') {
        range = TextRange::new(range.start, range.start + nl as u32);
    }
    if range.is_empty() {
        let end = (range.start as usize + 1).min(text.len()) as u32;
        range = TextRange::new(range.start, crate::text::clamp_to_char_boundary(text, end).max(range.start));
    }
    range
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn is_keyword(kind: &str) -> bool {
    matches!(
        kind,
        "def"
            | "return"
            | "if"
            | "elif"
            | "else"
            | "for"
            | "in"
            | "while"
            | "break"
            | "continue"
            | "with"
            | "as"
            | "import"
            | "from"
            | "pass"
            | "and"
            | "or"
            | "not"
    )
}

fn describe_kind(kind: &str) -> &str {
    match kind {
        "identifier" => "a name",
        "block" => "an indented block",
        "_newline" | "newline" => "the end of the line",
        "_indent" | "indent" => "an indented block",
        "expression" | "primary_expression" => "an expression",
        other => other,
    }
}

fn describe_context(parent: &str) -> &'static str {
    match parent {
        "argument_list" => " in the argument list",
        "parameters" => " in the parameter list",
        "subscript" => " in the subscript",
        "binary_operator" | "unary_operator" | "comparison_operator" | "boolean_operator" => " in this expression",
        "assignment" | "augmented_assignment" => " in this assignment",
        "decorated_definition" | "decorator" => " in the decorator",
        "function_definition" => " in the function header",
        _ => "",
    }
}
