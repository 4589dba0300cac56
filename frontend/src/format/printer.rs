//! The printer: line kinds and block levels of each chunk's tokens, blank lines,
//! indentation and spacing, and the check that what it printed parses back to the same
//! items and tokens. Separate from the token stream it consumes (`mod.rs`), which knows
//! the tree; the printer only ever sees `Leaf`s.

use tree_sitter::Parser;

use super::verify::strip_item;
use super::{collect_leaves, is_syntax_code, leaf_text, parse_chunk, FormatError, Leaf};
use crate::syntax::{ast, lower};
use crate::text::{LineIndex, TextRange};

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
pub(super) struct Printer<'a> {
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
    pub(super) fn new(text: &'a str) -> Printer<'a> {
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

    pub(super) fn finish(mut self) -> String {
        if !self.out.is_empty() {
            self.out.push_str(self.nl);
        }
        self.out
    }

    /// Formats one chunk and verifies what it printed; false when it has no tokens.
    pub(super) fn chunk(&mut self, range: TextRange) -> Result<bool, FormatError> {
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
