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

use std::fmt;
use std::sync::Arc;

use tree_sitter::{Node, Parser, Tree};

use crate::check::dtype::{DType, Policy};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::{ast, chunks, lexical, lower};
use crate::text::{LineIndex, TextRange};

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

// ----- line structure ----------------------------------------------------------------------

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum LineKind {
    /// The first token of a statement: indented by its block level.
    Statement,
    /// A comment on its own line.
    Comment,
    /// A line inside brackets.
    Bracket,
    /// A line continued with `\`.
    Backslash,
}

#[derive(Copy, Clone, Debug)]
struct LineInfo {
    kind: LineKind,
    level: usize,
    /// Blank lines before it in the input.
    blank_before: usize,
}

/// Prints chunk after chunk. `leaves` and `lines` hold the previous chunk's tokens
/// followed by the current one's (from `current`): the blank-line rules look back one
/// statement, never further.
struct Printer<'a> {
    text: &'a str,
    nl: &'static str,
    parser: Parser,
    leaves: Vec<Leaf>,
    lines: Vec<Option<LineInfo>>,
    current: usize,
    /// Rows before the next chunk, and top-level statements numbered so far.
    row: usize,
    tops: u32,
    /// The block indentation columns open after the last statement line.
    stack: Vec<usize>,
    out: String,
    col: usize,
    line_indent: usize,
    frames: Vec<Frame>,
    statement_level: usize,
}

struct Frame {
    cont_col: usize,
    line_indent: usize,
}

impl<'a> Printer<'a> {
    fn new(text: &'a str) -> Printer<'a> {
        let crlf = text.matches("\r\n").count();
        let lf = text.matches('\n').count();
        let mut parser = Parser::new();
        parser.set_language(&lower::language()).expect("the bundled grammar matches the tree-sitter runtime");
        Printer {
            text,
            nl: if crlf * 2 > lf { "\r\n" } else { "\n" },
            parser,
            leaves: Vec::new(),
            lines: Vec::new(),
            current: 0,
            row: 0,
            tops: 0,
            stack: vec![0],
            out: String::with_capacity(text.len() + text.len() / 8),
            col: 0,
            line_indent: 0,
            frames: Vec::new(),
            statement_level: 0,
        }
    }

    fn finish(mut self) -> String {
        if !self.out.is_empty() {
            self.out.push_str(self.nl);
        }
        self.out
    }

    /// Formats one chunk and verifies what it printed; false when it has no tokens.
    fn chunk(&mut self, range: TextRange) -> Result<bool, FormatError> {
        let src = range.slice(self.text);
        let parsed =
            parse_chunk(&mut self.parser, src).ok_or_else(|| FormatError::Syntax("the parser gave up".into()))?;
        if let Some(d) = parsed.diagnostics.iter().filter(|d| is_syntax_code(d.code)).min_by_key(|d| d.range.start) {
            let index = LineIndex::new(self.text);
            let lc = index.line_col(self.text, range.start + d.range.start);
            return Err(FormatError::Syntax(format!(
                "{}:{}: {}[{}] {}",
                lc.line + 1,
                lc.col + 1,
                d.severity.as_str(),
                d.code,
                d.message
            )));
        }
        if parsed.tree.root_node().has_error() {
            return Err(FormatError::Syntax("the file does not parse".into()));
        }
        // Keep the previous chunk's tokens only.
        self.leaves.drain(..self.current);
        self.lines.drain(..self.current);
        self.current = self.leaves.len();
        let (offset, row) = (range.start as usize, self.row);
        collect_leaves(&parsed.tree, src, offset, row, &mut self.tops, &mut self.leaves);
        self.row += src.matches('\n').count();
        drop(parsed.tree);
        if self.leaves.len() == self.current {
            // Nothing but blank lines: the previous chunk stays the one to look back at.
            self.current = 0;
            return Ok(false);
        }
        self.adopt_leading_comments();
        self.line_structure()?;
        let piece_start = self.print();
        self.verify(&parsed.items, piece_start)?;
        Ok(true)
    }

    /// Comment lines that open a chunk but, in the whole file, end the previous
    /// statement's block: the grammar's scanner keeps a comment in a block while it is
    /// indented at least as deep as the block (`scanner.c`), while chunk by chunk it
    /// starts the next statement's tree. They count as part of the previous statement,
    /// as they would in one tree of the whole file.
    fn adopt_leading_comments(&mut self) {
        let Some(prev) = self.current.checked_sub(1).map(|p| self.leaves[p]) else {
            return;
        };
        let mut open = self.stack.clone();
        for i in self.current..self.leaves.len() {
            if self.leaves[i].kind != "comment" {
                break;
            }
            let col = col_of(self.text, self.leaves[i].start);
            while open.len() > 1 && open.last().is_some_and(|&c| c > col) {
                open.pop();
            }
            if open.len() == 1 {
                break;
            }
            self.leaves[i].top = prev.top;
            self.leaves[i].top_is_def = prev.top_is_def;
        }
    }

    /// Line kinds, levels and blank counts of the current chunk's leaves that start a
    /// line (a bracket never stays open across chunks).
    fn line_structure(&mut self) -> Result<(), FormatError> {
        let leaves = &self.leaves;
        let mut depth = 0i32;
        let mut pending_comments: Vec<usize> = Vec::new();
        self.lines.resize(leaves.len(), None);
        for i in self.current..leaves.len() {
            let l = &leaves[i];
            let starts_line = i == 0 || l.row > leaves[i - 1].end_row;
            if starts_line {
                let gap = if i == 0 { "" } else { &self.text[leaves[i - 1].end..l.start] };
                let blank_before = if i == 0 { 0 } else { blank_lines(gap) };
                let kind = if depth > 0 {
                    LineKind::Bracket
                } else if has_backslash(gap) {
                    LineKind::Backslash
                } else if l.kind == "comment" {
                    LineKind::Comment
                } else {
                    LineKind::Statement
                };
                let mut level = 0;
                if kind == LineKind::Statement {
                    let col = col_of(self.text, l.start);
                    let candidates = with_indent(&self.stack, col);
                    for &c in &pending_comments {
                        let ccol = col_of(self.text, leaves[c].start);
                        let lvl = candidates.iter().rposition(|&x| x <= ccol).unwrap_or(0);
                        if let Some(Some(inf)) = self.lines.get_mut(c) {
                            inf.level = lvl;
                        }
                    }
                    pending_comments.clear();
                    let stack = &mut self.stack;
                    if col > *stack.last().unwrap_or(&0) {
                        stack.push(col);
                    } else {
                        while stack.len() > 1 && col < *stack.last().unwrap_or(&0) {
                            stack.pop();
                        }
                        if col != *stack.last().unwrap_or(&0) {
                            return Err(FormatError::Syntax(format!(
                                "line {}: the indentation matches no open block",
                                l.row + 1
                            )));
                        }
                    }
                    level = stack.len() - 1;
                } else if kind == LineKind::Comment {
                    pending_comments.push(i);
                }
                self.lines[i] = Some(LineInfo { kind, level, blank_before });
            }
            depth += bracket_delta(l.kind);
        }
        // Comments after the last statement of the file.
        for &c in &pending_comments {
            let ccol = col_of(self.text, leaves[c].start);
            let lvl = self.stack.iter().rposition(|&x| x <= ccol).unwrap_or(0);
            if let Some(Some(inf)) = self.lines.get_mut(c) {
                inf.level = lvl;
            }
        }
        Ok(())
    }

    /// Prints the current chunk; returns where in the output its first line starts.
    fn print(&mut self) -> usize {
        let statement_lines: Vec<usize> =
            (0..self.leaves.len()).filter(|&i| self.lines[i].is_some_and(|l| l.kind == LineKind::Statement)).collect();
        let mut piece_start = self.out.len();
        for i in self.current..self.leaves.len() {
            let l = self.leaves[i];
            let text = leaf_text(self.text, &l);
            if let Some(info) = self.lines[i] {
                if !self.out.is_empty() {
                    let blanks = self.blank_lines_before(i, info, &statement_lines);
                    if info.kind == LineKind::Backslash
                        || (info.kind == LineKind::Bracket
                            && has_backslash(&self.text[self.leaves[i - 1].end..l.start]))
                    {
                        self.out.push_str(" \\");
                    }
                    self.out.push_str(self.nl);
                    for _ in 0..blanks {
                        self.out.push_str(self.nl);
                    }
                }
                if i == self.current {
                    piece_start = self.out.len();
                }
                let indent = match info.kind {
                    LineKind::Statement => {
                        self.statement_level = info.level;
                        4 * info.level
                    }
                    LineKind::Comment => 4 * info.level,
                    LineKind::Backslash => 4 * self.statement_level + 4,
                    LineKind::Bracket => match self.frames.last() {
                        Some(f) if matches!(l.kind, ")" | "]" | "}") => f.line_indent,
                        Some(f) => f.cont_col,
                        None => 4 * self.statement_level + 4,
                    },
                };
                for _ in 0..indent {
                    self.out.push(' ');
                }
                self.col = indent;
                self.line_indent = indent;
            } else {
                let sep = self.space_between(&self.leaves[i - 1], &l);
                self.out.push_str(sep);
                self.col += sep.len();
            }
            self.out.push_str(text);
            match text.rfind('\n') {
                Some(p) => self.col = text[p + 1..].chars().count(),
                None => self.col += text.chars().count(),
            }
            match l.kind {
                "(" | "[" | "{" => {
                    let hanging = match self.leaves.get(i + 1) {
                        Some(next) => next.row > l.end_row || next.kind == "comment",
                        None => true,
                    };
                    let cont_col = if hanging { self.line_indent + 4 } else { self.col };
                    self.frames.push(Frame { cont_col, line_indent: self.line_indent });
                }
                ")" | "]" | "}" => {
                    self.frames.pop();
                }
                _ => {}
            }
        }
        piece_start
    }

    fn blank_lines_before(&self, i: usize, info: LineInfo, statements: &[usize]) -> usize {
        let lines = &self.lines;
        let orig = info.blank_before;
        match info.kind {
            LineKind::Bracket | LineKind::Backslash => return 0,
            LineKind::Statement | LineKind::Comment => {}
        }
        // The next statement line at or after this one, and the previous one.
        let at = statements.partition_point(|&s| s < i);
        let next = statements.get(at).copied();
        let prev = at.checked_sub(1).map(|p| statements[p]);
        let next_level = next.and_then(|n| lines[n]).map(|l| l.level);
        let top_level = next_level.is_none_or(|lvl| lvl == 0) && info.level == 0;
        if !top_level {
            // Inside a block: at most one blank line, none right after the block opener.
            let Some(p) = prev else { return orig.min(1) };
            let opener_end = self.statement_last_leaf(p, i);
            if self.opens_block(opener_end) && self.only_comments_between(opener_end, i) {
                return 0;
            }
            return orig.min(1);
        }
        let Some(p) = prev else {
            return orig.min(2);
        };
        let prev_top = self.leaves[p].top;
        let prev_is_def = self.leaves[p].top_is_def;
        // The first line after the previous top-level statement.
        let prev_line = (0..i).rev().find(|&k| lines[k].is_some()).unwrap_or(p);
        let first_after_prev = self.leaves[prev_line].top == prev_top;
        let same_statement = self.leaves[i].top == prev_top;
        if same_statement {
            return orig.min(1);
        }
        if first_after_prev && prev_is_def {
            return 2;
        }
        if let Some(n) = next {
            let next_top = self.leaves[n].top;
            if next_top == prev_top {
                return orig.min(2);
            }
            // First line of the group (comments then the statement) with no blank line inside.
            let group_start = self.group_start(n);
            if group_start == i && (self.leaves[n].top_is_def || prev_is_def) {
                return 2;
            }
        }
        orig.min(2)
    }

    /// The first line of the run of comment lines directly above statement line `n`.
    fn group_start(&self, n: usize) -> usize {
        let lines = &self.lines;
        let mut start = n;
        loop {
            if lines[start].is_some_and(|l| l.blank_before > 0) {
                return start;
            }
            let prev_line = (0..start).rev().find(|&k| lines[k].is_some());
            match prev_line {
                Some(k) if lines[k].is_some_and(|l| l.kind == LineKind::Comment) => start = k,
                _ => return start,
            }
        }
    }

    /// The last leaf of the logical line that starts at `start` (before leaf `limit`).
    fn statement_last_leaf(&self, start: usize, limit: usize) -> usize {
        let mut last = start;
        // Bracket depth of the leaves start..k (comments are never brackets).
        let mut depth = 0i32;
        for k in start..limit {
            if self.leaves[k].kind == "comment" && k > start {
                // A comment line after the statement ends it.
                if self.leaves[k].row > self.leaves[last].end_row {
                    break;
                }
                continue;
            }
            if k > start && self.leaves[k].row > self.leaves[last].end_row {
                // A new physical line: part of the statement only inside brackets or after `\`.
                let gap = &self.text[self.leaves[last].end..self.leaves[k].start];
                if !has_backslash(gap) && depth == 0 {
                    break;
                }
            }
            last = k;
            depth += bracket_delta(self.leaves[k].kind);
        }
        last
    }

    fn opens_block(&self, leaf: usize) -> bool {
        let l = &self.leaves[leaf];
        l.kind == ":"
            && matches!(
                l.parent,
                "function_definition"
                    | "if_statement"
                    | "elif_clause"
                    | "else_clause"
                    | "for_statement"
                    | "while_statement"
                    | "with_statement"
            )
    }

    fn only_comments_between(&self, from: usize, to: usize) -> bool {
        self.leaves[from + 1..to].iter().all(|l| l.kind == "comment")
    }

    /// The separator between two tokens on one line.
    fn space_between(&self, a: &Leaf, b: &Leaf) -> &'static str {
        let (at, bt) = (a.kind, b.kind);
        if bt == "comment" {
            return "  ";
        }
        if at == "@" && a.parent == "decorator" {
            return "";
        }
        if is_open(at) || is_close(bt) || bt == "," || bt == ";" {
            return "";
        }
        if at == "," || at == ";" {
            return " ";
        }
        if bt == ":" {
            return "";
        }
        if at == ":" {
            return if a.parent == "slice" { "" } else { " " };
        }
        if at == "." || bt == "." {
            return "";
        }
        if at == "=" || bt == "=" {
            let eq = if at == "=" { a } else { b };
            return if matches!(eq.parent, "keyword_argument" | "default_parameter") { "" } else { " " };
        }
        if is_unary(a) {
            return "";
        }
        if is_open(bt) {
            return if matches!(at, "identifier" | "string") || is_close(at) { "" } else { " " };
        }
        if bt == "@" && b.policy_at {
            return " ";
        }
        if at == "@" && a.policy_at {
            return "";
        }
        if is_operator(at) || is_operator(bt) {
            return " ";
        }
        if is_wordlike(at) && is_wordlike(bt) {
            return " ";
        }
        if a.end < b.start {
            " "
        } else {
            ""
        }
    }

    /// Parses what the current chunk printed (from `piece_start`) and compares it with
    /// the input chunk: the same items modulo positions and the same tokens.
    fn verify(&mut self, items: &[ast::Item], piece_start: usize) -> Result<(), FormatError> {
        let mut piece = self.out[piece_start..].to_string();
        piece.push_str(self.nl);
        let parsed = parse_chunk(&mut self.parser, &piece)
            .ok_or_else(|| FormatError::Unsafe("the output does not parse".into()))?;
        if let Some(d) = parsed.diagnostics.iter().find(|d| is_syntax_code(d.code)) {
            return Err(FormatError::Unsafe(format!("the output does not parse: {}", d.message)));
        }
        let strip = |items: &[ast::Item]| items.iter().map(strip_item).collect::<Vec<_>>();
        if strip(items) != strip(&parsed.items) {
            return Err(FormatError::Unsafe("the syntax tree changed".into()));
        }
        let mut out_leaves = Vec::new();
        collect_leaves(&parsed.tree, &piece, 0, 0, &mut 0, &mut out_leaves);
        let leaves = &self.leaves[self.current..];
        let same_tokens = leaves.len() == out_leaves.len()
            && leaves
                .iter()
                .zip(&out_leaves)
                .all(|(a, b)| a.kind == b.kind && leaf_text(self.text, a) == leaf_text(&piece, b));
        if !same_tokens {
            return Err(FormatError::Unsafe("the tokens or comments changed".into()));
        }
        Ok(())
    }
}

/// The column (in characters) of byte `offset` in its line.
fn col_of(text: &str, offset: usize) -> usize {
    let line_start = text[..offset].rfind('\n').map_or(0, |p| p + 1);
    text[line_start..offset].chars().count()
}

fn bracket_delta(kind: &str) -> i32 {
    match kind {
        "(" | "[" | "{" => 1,
        ")" | "]" | "}" => -1,
        _ => 0,
    }
}

fn is_open(kind: &str) -> bool {
    matches!(kind, "(" | "[" | "{")
}

fn is_close(kind: &str) -> bool {
    matches!(kind, ")" | "]" | "}")
}

fn is_unary(l: &Leaf) -> bool {
    l.parent == "unary_operator" && matches!(l.kind, "-" | "+" | "~")
}

fn is_operator(kind: &str) -> bool {
    !kind.is_empty()
        && kind
            .chars()
            .all(|c| c.is_ascii_punctuation() && !matches!(c, '(' | ')' | '[' | ']' | '{' | '}' | '_' | '"' | '\''))
}

fn is_wordlike(kind: &str) -> bool {
    kind.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_')
}

fn blank_lines(gap: &str) -> usize {
    gap.matches('\n').count().saturating_sub(1)
}

fn has_backslash(gap: &str) -> bool {
    gap.contains('\\')
}

/// The indent stack extended by a deeper column (a block about to open).
fn with_indent(stack: &[usize], col: usize) -> Vec<usize> {
    let mut c = stack.to_vec();
    if col > *c.last().unwrap_or(&0) {
        c.push(col);
    }
    c
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

// ----- verification ------------------------------------------------------------------------

/// The module with every position zeroed, for comparisons "modulo ranges".
pub fn strip_module(m: &ast::ModuleAst) -> ast::ModuleAst {
    ast::ModuleAst { items: m.items.iter().map(strip_item).collect() }
}

fn strip_item(item: &ast::Item) -> ast::Item {
    use ast::ItemKind;
    let kind = match &item.kind {
        ItemKind::Function(f) => ItemKind::Function(Arc::new(ast::FunctionAst {
            decorators: Arc::new(ast::Decorators {
                exprs: f.decorators.exprs.clone(),
                arena: strip_body(&f.decorators.arena),
            }),
            decorator_offset: 0,
            def: Arc::new(ast::FunctionDef {
                name: f.name.clone(),
                name_range: TextRange::default(),
                params: f
                    .params
                    .iter()
                    .map(|p| ast::Param { name_range: TextRange::default(), range: TextRange::default(), ..p.clone() })
                    .collect(),
                params_range: TextRange::default(),
                return_type: f.return_type,
                body: f.body.clone(),
                docstring: f.docstring.clone(),
                header_range: TextRange::default(),
                arena: strip_body(&f.arena),
            }),
        })),
        ItemKind::Constant(c) => ItemKind::Constant(Arc::new(ast::ConstantAst {
            names: c.names.iter().map(|(n, _)| (n.clone(), TextRange::default())).collect(),
            target: c.target,
            value: c.value,
            arena: strip_body(&c.arena),
        })),
        ItemKind::Import(import) => {
            let strip_names = |names: &[ast::ImportedName]| -> Vec<ast::ImportedName> {
                names
                    .iter()
                    .map(|n| ast::ImportedName {
                        range: TextRange::default(),
                        binding_range: TextRange::default(),
                        ..n.clone()
                    })
                    .collect()
            };
            ItemKind::Import(match import {
                ast::ImportAst::Import { names } => ast::ImportAst::Import { names: strip_names(names) },
                ast::ImportAst::From { module, names, wildcard, .. } => ast::ImportAst::From {
                    module: module.clone(),
                    module_range: TextRange::default(),
                    names: strip_names(names),
                    wildcard: *wildcard,
                },
            })
        }
        ItemKind::Invalid => ItemKind::Invalid,
    };
    ast::Item { anchor: 0, range: TextRange::default(), kind }
}

fn strip_body(body: &ast::Body) -> ast::Body {
    use ast::{Expr, Stmt};
    ast::Body {
        exprs: body
            .exprs
            .iter()
            .map(|e| match e {
                Expr::Attribute { object, name, .. } => {
                    Expr::Attribute { object: *object, name: name.clone(), name_range: TextRange::default() }
                }
                Expr::Call { func, args } => Expr::Call {
                    func: *func,
                    args: args
                        .iter()
                        .map(|a| ast::Arg {
                            name: a.name.as_ref().map(|(n, _)| (n.clone(), TextRange::default())),
                            value: a.value,
                        })
                        .collect(),
                },
                other => other.clone(),
            })
            .collect(),
        expr_ranges: vec![TextRange::default(); body.expr_ranges.len()],
        stmts: body
            .stmts
            .iter()
            .map(|s| match s {
                Stmt::AugAssign { target, op, value, .. } => {
                    Stmt::AugAssign { target: *target, op: *op, op_range: TextRange::default(), value: *value }
                }
                other => other.clone(),
            })
            .collect(),
        stmt_ranges: vec![TextRange::default(); body.stmt_ranges.len()],
    }
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
