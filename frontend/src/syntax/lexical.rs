//! Lexical checks that tree-sitter's error recovery cannot explain precisely:
//! tabs and inconsistent dedents (E0101), unterminated strings and brackets (E0102),
//! unmatched closing brackets (E0100) and invalid UTF-8 (E0104).
//!
//! Each error also yields a "shadow": the byte range in which the parser's own errors
//! are consequences of this one, so that one root cause gives one diagnostic.

use crate::diagnostics::{Code, Diagnostic, Edit};
use crate::text::TextRange;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LexicalReport {
    pub diagnostics: Vec<Diagnostic>,
    /// Ranges in which parser errors are suppressed.
    pub shadows: Vec<TextRange>,
}

impl LexicalReport {
    pub fn shadows(&self, range: TextRange) -> bool {
        self.shadows.iter().any(|s| s.intersects(range) || (range.is_empty() && s.touches(range.start)))
    }
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    report: LexicalReport,
    brackets: Vec<(u8, u32)>,
    indents: Vec<u32>,
}

/// Scans `text`; `utf8_error` is the offset of the first invalid byte of the original
/// file, if it was not valid UTF-8 (the text is then its lossy decoding).
pub fn scan(text: &str, utf8_error: Option<u32>) -> LexicalReport {
    let mut scanner = Scanner {
        text,
        bytes: text.as_bytes(),
        report: LexicalReport::default(),
        brackets: Vec::new(),
        indents: vec![0],
    };
    if let Some(at) = utf8_error {
        scanner.report.diagnostics.push(utf8_diagnostic(text, at));
    }
    scanner.run();
    scanner.report
}

/// E0104 at the first invalid byte (`at`) of a file that is not UTF-8.
pub fn utf8_diagnostic(text: &str, at: u32) -> Diagnostic {
    let end = crate::text::clamp_to_char_boundary(text, (at + 3).min(text.len() as u32)).max(at);
    Diagnostic::new(Code::E0104, TextRange::new(at, end), "this file is not valid UTF-8")
        .with_note("Tessera sources must be UTF-8; the invalid bytes were read as U+FFFD")
}

impl<'a> Scanner<'a> {
    fn error(&mut self, diagnostic: Diagnostic, shadow: TextRange) {
        self.report.diagnostics.push(diagnostic);
        self.report.shadows.push(shadow);
    }

    /// The offset just after the char at `i`.
    fn char_end(&self, i: usize) -> u32 {
        (i + self.text[i..].chars().next().map_or(1, char::len_utf8)) as u32
    }

    fn line_end(&self, from: usize) -> usize {
        self.bytes[from..].iter().position(|&b| b == b'\n').map_or(self.bytes.len(), |p| from + p)
    }

    fn run(&mut self) {
        let len = self.bytes.len();
        let mut pos = 0usize;
        // Whether the previous logical line opened a block (ended with `:`).
        let mut expect_indent: Option<u32> = None;
        // Where the `:` of the last line that opened a block ends.
        let mut opener_end = 0u32;
        let mut continuation = false;
        while pos < len {
            let line_start = pos;
            let mut line_end = self.line_end(pos);
            let logical_start = self.brackets.is_empty() && !continuation;
            let mut i = line_start;
            if logical_start {
                // Measure the indentation of a logical line.
                let mut width = 0u32;
                let mut tab_at = None;
                while i < line_end && matches!(self.bytes[i], b' ' | b'\t' | b'\x0c') {
                    if self.bytes[i] == b'\t' {
                        tab_at.get_or_insert(i);
                        width = (width / 8 + 1) * 8;
                    } else if self.bytes[i] == b' ' {
                        width += 1;
                    }
                    i += 1;
                }
                let blank = i >= line_end || self.bytes[i] == b'#' || (self.bytes[i] == b'\r' && i + 1 >= line_end);
                if !blank {
                    let indent_range = TextRange::new(line_start as u32, i as u32);
                    let top = *self.indents.last().unwrap_or(&0);
                    let line_range = TextRange::new(line_start as u32, line_end as u32);
                    if let Some(at) = tab_at {
                        // A tab: report it once, then read the line as if it had the
                        // indentation its block expects so nothing else cascades.
                        let expected = match expect_indent {
                            Some(_) => top + 4,
                            None => top,
                        };
                        let fix_text = " ".repeat(expected as usize);
                        self.error(
                            Diagnostic::new(
                                Code::E0101,
                                TextRange::new(at as u32, at as u32 + 1),
                                "tab in indentation",
                            )
                            .with_note("indentation must use spaces")
                            .with_fix(
                                format!("indent with {expected} spaces"),
                                vec![Edit { range: indent_range, text: fix_text }],
                            ),
                            line_range,
                        );
                        width = expected;
                    }
                    if let Some(block_line) = expect_indent.take() {
                        if width > top {
                            self.indents.push(width);
                        } else if tab_at.is_none() {
                            let unindented = TextRange::new(i as u32, self.char_end(i)).cover(indent_range);
                            self.error(
                                Diagnostic::new(Code::E0101, unindented, "expected an indented block")
                                    .with_label(unindented, "not indented")
                                    .with_label(TextRange::empty(block_line), "the block opened by this line is empty"),
                                // The parser's error for the same mistake is at the end of
                                // the opening line: this explains it.
                                TextRange::new(block_line, line_end as u32),
                            );
                        }
                    } else if width > top {
                        self.error(
                            Diagnostic::new(Code::E0101, indent_range, "unexpected indent").with_fix(
                                format!("indent with {top} spaces"),
                                vec![Edit { range: indent_range, text: " ".repeat(top as usize) }],
                            ),
                            line_range,
                        );
                    } else if width < top {
                        while self.indents.len() > 1 && width < *self.indents.last().unwrap() {
                            self.indents.pop();
                        }
                        let outer = *self.indents.last().unwrap_or(&0);
                        if width != outer {
                            self.error(
                                Diagnostic::new(
                                    Code::E0101,
                                    indent_range,
                                    format!(
                                        "dedent to column {width} matches no enclosing block \
                                         (open blocks are indented by {})",
                                        self.indents.iter().map(|w| w.to_string()).collect::<Vec<_>>().join(", ")
                                    ),
                                )
                                .with_fix(
                                    format!("indent with {outer} spaces"),
                                    vec![Edit { range: indent_range, text: " ".repeat(outer as usize) }],
                                ),
                                line_range,
                            );
                        }
                    }
                }
            }
            continuation = false;
            // Tokens of the rest of the line: strings, comments, brackets.
            let mut last_significant: Option<u8> = None;
            let mut significant_end = i;
            while i < line_end {
                let b = self.bytes[i];
                match b {
                    b'#' => break,
                    b'\'' | b'"' => {
                        i = self.string(i, line_end);
                        if i > line_end {
                            // A triple-quoted string ended on a later line: go on
                            // scanning the rest of that line.
                            line_end = self.line_end(i.min(self.bytes.len()));
                        }
                        last_significant = Some(b'"');
                        continue;
                    }
                    b'(' | b'[' | b'{' => self.brackets.push((b, i as u32)),
                    b')' | b']' | b'}' => self.close_bracket(b, i),
                    b'\\' => {
                        let rest = &self.text[i + 1..line_end];
                        if rest.trim_end_matches('\r').is_empty() {
                            continuation = true;
                            i = line_end;
                            continue;
                        }
                    }
                    b' ' | b'\t' | b'\r' | b'\x0c' => {
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
                last_significant = Some(b);
                i += 1;
                significant_end = i;
            }
            if self.brackets.is_empty() && !continuation && last_significant == Some(b':') {
                expect_indent = Some(line_start as u32);
                opener_end = significant_end as u32;
            }
            pos = line_end + 1;
        }
        // The text ends right after a line that opens a block (`def f():` as the last
        // line, or a chunk's only line).
        if let Some(block_line) = expect_indent {
            let text_start =
                block_line + self.bytes[block_line as usize..].iter().take_while(|b| **b == b' ').count() as u32;
            let opener = TextRange::new(text_start, opener_end);
            self.error(
                Diagnostic::new(Code::E0101, opener, "expected an indented block")
                    .with_label(opener, "this line opens a block with no body")
                    .with_note("write the body on the next lines, indented, or `pass`"),
                TextRange::new(block_line, len as u32),
            );
        }
        for (bracket, at) in std::mem::take(&mut self.brackets).into_iter().rev() {
            let close = match bracket {
                b'(' => ')',
                b'[' => ']',
                _ => '}',
            };
            self.error(
                Diagnostic::new(
                    Code::E0102,
                    TextRange::new(at, at + 1),
                    format!("`{}` is never closed", bracket as char),
                )
                .with_note(format!("expected a matching `{close}` before the end of the file")),
                TextRange::new(at, len as u32),
            );
        }
    }

    fn close_bracket(&mut self, b: u8, i: usize) {
        let at = TextRange::new(i as u32, i as u32 + 1);
        let expected_open = match b {
            b')' => b'(',
            b']' => b'[',
            _ => b'{',
        };
        match self.brackets.last().copied() {
            Some((open, _)) if open == expected_open => {
                self.brackets.pop();
            }
            Some((open, open_at)) => {
                self.brackets.pop();
                self.error(
                    Diagnostic::new(
                        Code::E0100,
                        at,
                        format!("closing `{}` does not match `{}`", b as char, open as char),
                    )
                    .with_label(TextRange::new(open_at, open_at + 1), "opened here"),
                    at,
                );
            }
            None => self.error(Diagnostic::new(Code::E0100, at, format!("unmatched `{}`", b as char)), at),
        }
    }

    /// Skips a string starting at `start`; returns the offset after it.
    fn string(&mut self, start: usize, line_end: usize) -> usize {
        let quote = self.bytes[start];
        let triple = self.bytes.get(start + 1) == Some(&quote) && self.bytes.get(start + 2) == Some(&quote);
        if triple {
            let mut i = start + 3;
            while i < self.bytes.len() {
                match self.bytes[i] {
                    b'\\' => i += 2,
                    q if q == quote
                        && self.bytes.get(i + 1) == Some(&quote)
                        && self.bytes.get(i + 2) == Some(&quote) =>
                    {
                        return i + 3;
                    }
                    _ => i += 1,
                }
            }
            let end = self.bytes.len() as u32;
            self.error(
                Diagnostic::new(
                    Code::E0102,
                    TextRange::new(start as u32, start as u32 + 3),
                    "unterminated triple-quoted string",
                )
                .with_note(format!("expected a closing `{0}{0}{0}` before the end of the file", quote as char)),
                TextRange::new(start as u32, end),
            );
            return self.bytes.len();
        }
        let mut i = start + 1;
        while i < line_end {
            match self.bytes[i] {
                b'\\' => i += 2,
                q if q == quote => return i + 1,
                _ => i += 1,
            }
        }
        let mut end = line_end;
        while end > start && matches!(self.bytes[end - 1], b'\r' | b' ' | b'\t') {
            end -= 1;
        }
        let range = TextRange::new(start as u32, end as u32);
        let line_start = self.bytes[..start].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        self.error(
            Diagnostic::new(Code::E0102, range, "unterminated string")
                .with_note(format!("a `{}` string must end on the line it starts", quote as char))
                .with_fix(
                    format!("close the string with `{}`", quote as char),
                    vec![Edit { range: TextRange::empty(end as u32), text: (quote as char).to_string() }],
                ),
            // The whole line: whatever the parser makes of it follows from this.
            TextRange::new(line_start as u32, line_end as u32),
        );
        line_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(text: &str) -> Vec<(Code, String)> {
        scan(text, None).diagnostics.into_iter().map(|d| (d.code, d.range.slice(text).to_string())).collect()
    }

    #[test]
    fn clean_code_has_no_lexical_errors() {
        let text =
            "def f(x):\n    y = (1 +\n\t2)  # tab inside brackets is fine\n    s = \"\"\"a\n  b\"\"\"\n    return y\n";
        assert_eq!(codes(text), vec![]);
    }

    #[test]
    fn tab_in_indentation() {
        let text = "def f(x):\n    y = 1\n\treturn y\n";
        assert_eq!(codes(text), vec![(Code::E0101, "\t".to_string())]);
    }

    #[test]
    fn unterminated_string_and_bracket() {
        assert_eq!(codes("X = \"abc\nY = 1\n"), vec![(Code::E0102, "\"abc".to_string())]);
        assert_eq!(codes("X = f(1,\n  2\n"), vec![(Code::E0102, "(".to_string())]);
        assert_eq!(codes("X = '''abc\n"), vec![(Code::E0102, "'''".to_string())]);
    }

    #[test]
    fn bad_dedent_and_unexpected_indent() {
        let text = "def f():\n    if x:\n        y = 1\n      z = 2\n";
        assert_eq!(codes(text), vec![(Code::E0101, "      ".to_string())]);
        assert_eq!(codes("x = 1\n    y = 2\n"), vec![(Code::E0101, "    ".to_string())]);
        assert_eq!(codes("def f():\nreturn 1\n")[0].0, Code::E0101);
    }

    #[test]
    fn unmatched_closers() {
        assert_eq!(codes("x = (1]\n")[0].0, Code::E0100);
        assert_eq!(codes("x = 1)\n")[0].0, Code::E0100);
    }
}
