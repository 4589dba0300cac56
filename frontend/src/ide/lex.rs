//! A small, error-tolerant Python-style tokenizer for editor features that must work on
//! text the parser cannot read yet (completion right after `tile.`, signature help in an
//! unclosed call) and for classifying every token (semantic highlighting, folding).
//! It never fails: unterminated strings end at the end of their line, unknown
//! characters become `Unknown` tokens.

use crate::text::TextRange;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum TokKind {
    Ident,
    Keyword,
    Number,
    Str,
    Comment,
    /// An operator or punctuation other than brackets (`+`, `,`, `:`, `->`, `@`, `.`).
    Op,
    Open,
    Close,
    Newline,
    /// `\` before a line break.
    Continuation,
    Unknown,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Tok {
    pub kind: TokKind,
    pub range: TextRange,
}

impl Tok {
    pub fn text(self, src: &str) -> &str {
        self.range.slice(src)
    }
}

pub const KEYWORDS: &[&str] = &[
    "def", "return", "if", "elif", "else", "for", "in", "while", "break", "continue", "with", "as", "import", "from",
    "pass", "and", "or", "not", "is", "True", "False", "None",
];

pub fn is_keyword(word: &str) -> bool {
    KEYWORDS.contains(&word)
}

pub fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

pub fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Whether `s` is a valid identifier (and not a keyword).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if is_ident_start(c)) && chars.all(is_ident_continue) && !is_keyword(s)
}

const THREE_CHAR_OPS: &[&str] = &["**=", "//=", ">>=", "<<=", "..."];
const TWO_CHAR_OPS: &[&str] =
    &["**", "//", "==", "!=", "<=", ">=", "->", "+=", "-=", "*=", "/=", "@=", "%=", "&=", "|=", "^=", "<<", ">>"];

/// Tokenizes `text`; ranges are offsets into `text` plus `base`.
pub fn lex(text: &str, base: u32) -> Vec<Tok> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(text.len() / 4);
    let mut i = 0usize;
    let push = |out: &mut Vec<Tok>, kind, start: usize, end: usize| {
        out.push(Tok { kind, range: TextRange::new(base + start as u32, base + end as u32) })
    };
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\x0c' | b'\r' => i += 1,
            b'\n' => {
                push(&mut out, TokKind::Newline, i, i + 1);
                i += 1;
            }
            b'#' => {
                let end = memchr_newline(bytes, i);
                let mut e = end;
                while e > i && bytes[e - 1] == b'\r' {
                    e -= 1;
                }
                push(&mut out, TokKind::Comment, i, e);
                i = end;
            }
            b'\\' => {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] == b'\r' {
                    j += 1;
                }
                if j >= bytes.len() || bytes[j] == b'\n' {
                    push(&mut out, TokKind::Continuation, i, i + 1);
                    i = (j + 1).min(bytes.len());
                } else {
                    push(&mut out, TokKind::Unknown, i, i + 1);
                    i += 1;
                }
            }
            b'"' | b'\'' => {
                let end = string_end(bytes, i);
                push(&mut out, TokKind::Str, i, end);
                i = end;
            }
            b'(' | b'[' | b'{' => {
                push(&mut out, TokKind::Open, i, i + 1);
                i += 1;
            }
            b')' | b']' | b'}' => {
                push(&mut out, TokKind::Close, i, i + 1);
                i += 1;
            }
            b'0'..=b'9' => {
                let end = number_end(bytes, i);
                push(&mut out, TokKind::Number, i, end);
                i = end;
            }
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let end = number_end(bytes, i);
                push(&mut out, TokKind::Number, i, end);
                i = end;
            }
            _ => {
                let c = text[i..].chars().next().unwrap_or('\u{fffd}');
                if is_ident_start(c) {
                    let mut j = i + c.len_utf8();
                    for c in text[j..].chars() {
                        if !is_ident_continue(c) {
                            break;
                        }
                        j += c.len_utf8();
                    }
                    // A string prefix: r"..", b'..', rb"..", f"..".
                    if j - i <= 2
                        && matches!(bytes.get(j), Some(b'"' | b'\''))
                        && text[i..j].chars().all(|c| matches!(c, 'r' | 'R' | 'b' | 'B' | 'u' | 'U' | 'f' | 'F'))
                    {
                        let end = string_end(bytes, j);
                        push(&mut out, TokKind::Str, i, end);
                        i = end;
                        continue;
                    }
                    let kind = if is_keyword(&text[i..j]) { TokKind::Keyword } else { TokKind::Ident };
                    push(&mut out, kind, i, j);
                    i = j;
                    continue;
                }
                let rest = &text[i..];
                let len = THREE_CHAR_OPS.iter().chain(TWO_CHAR_OPS).find(|op| rest.starts_with(*op)).map(|op| op.len());
                match len {
                    Some(len) => {
                        push(&mut out, TokKind::Op, i, i + len);
                        i += len;
                    }
                    None if b.is_ascii_punctuation() => {
                        push(&mut out, TokKind::Op, i, i + 1);
                        i += 1;
                    }
                    None => {
                        let len = c.len_utf8();
                        push(&mut out, TokKind::Unknown, i, i + len);
                        i += len;
                    }
                }
            }
        }
    }
    out
}

fn memchr_newline(bytes: &[u8], from: usize) -> usize {
    bytes[from..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| from + p)
}

/// The end of a string literal whose (optional) prefix letters end at `quote`.
fn string_end(bytes: &[u8], quote: usize) -> usize {
    let q = bytes[quote];
    let triple = bytes.get(quote + 1) == Some(&q) && bytes.get(quote + 2) == Some(&q);
    let mut i = if triple { quote + 3 } else { quote + 1 };
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\\' {
            i += 2;
            continue;
        }
        if triple {
            if b == q && bytes.get(i + 1) == Some(&q) && bytes.get(i + 2) == Some(&q) {
                return i + 3;
            }
        } else if b == q {
            return i + 1;
        } else if b == b'\n' {
            // Unterminated: the string ends with its line.
            return if i > 0 && bytes[i - 1] == b'\r' { i - 1 } else { i };
        }
        i += 1;
    }
    bytes.len()
}

fn number_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start;
    if bytes[i] == b'0' && matches!(bytes.get(i + 1), Some(b'x' | b'X' | b'o' | b'O' | b'b' | b'B')) {
        i += 2;
        while i < bytes.len() && (bytes[i].is_ascii_hexdigit() || bytes[i] == b'_') {
            i += 1;
        }
        return i;
    }
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_digit() || b == b'_' || b == b'.' {
            i += 1;
        } else if matches!(b, b'e' | b'E')
            && (bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
                || (matches!(bytes.get(i + 1), Some(b'+' | b'-')) && bytes.get(i + 2).is_some_and(u8::is_ascii_digit)))
        {
            i += 2;
        } else if matches!(b, b'j' | b'J') {
            i += 1;
            break;
        } else {
            break;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokKind, &str)> {
        lex(src, 0).into_iter().map(|t| (t.kind, t.text(src))).collect()
    }

    #[test]
    fn tokens() {
        use TokKind::*;
        assert_eq!(
            kinds("x = a.b(1e-5, .5) # hi\n"),
            vec![
                (Ident, "x"),
                (Op, "="),
                (Ident, "a"),
                (Op, "."),
                (Ident, "b"),
                (Open, "("),
                (Number, "1e-5"),
                (Op, ","),
                (Number, ".5"),
                (Close, ")"),
                (Comment, "# hi"),
                (Newline, "\n"),
            ]
        );
        assert_eq!(
            kinds("r'a\\'b' \"\"\"x\ny\"\"\" 'open\nif"),
            vec![(Str, "r'a\\'b'"), (Str, "\"\"\"x\ny\"\"\""), (Str, "'open"), (Newline, "\n"), (Keyword, "if"),]
        );
        assert_eq!(
            kinds("a **= 2 // 3 -> b\\\n"),
            vec![
                (Ident, "a"),
                (Op, "**="),
                (Number, "2"),
                (Op, "//"),
                (Number, "3"),
                (Op, "->"),
                (Ident, "b"),
                (Continuation, "\\"),
            ]
        );
    }
}
