//! Tokens for the fast parser, with the layout tokens (NEWLINE, INDENT, DEDENT) at the
//! byte offsets where the tree-sitter grammar's external scanner puts them: node
//! ranges end on them, so the two parsers agree on every range.
//!
//! Anything outside the common subset (tabs, form feeds, carriage returns, line
//! continuations, non-ASCII outside strings and comments, odd indentation) gives
//! `None`: the caller then parses with tree-sitter, which reports what is wrong.

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Kw {
    Def,
    If,
    Elif,
    Else,
    For,
    In,
    While,
    With,
    As,
    Return,
    Pass,
    Break,
    Continue,
    Import,
    From,
    Not,
    And,
    Or,
    Is,
    True,
    False,
    None,
}

/// Punctuation and operators; the augmented assignments carry their operator text.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum P {
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Colon,
    Semi,
    Dot,
    Ellipsis,
    Arrow,
    At,
    Assign,
    AugAssign,
    Plus,
    Minus,
    Star,
    Slash,
    DoubleSlash,
    Percent,
    DoubleStar,
    Pipe,
    Caret,
    Amp,
    Shl,
    Shr,
    Tilde,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    NotEq,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Name,
    Int,
    Float,
    Str,
    Kw(Kw),
    P(P),
    /// Zero-width, at the end of a code line (outside brackets).
    Newline,
    /// Zero-width, instead of NEWLINE at the end of a block header.
    Indent,
    /// Zero-width, at the end of the last line (code or comment) of a block.
    Dedent,
    Eof,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) struct Tok {
    pub kind: Kind,
    pub start: u32,
    pub end: u32,
}

fn keyword(word: &[u8]) -> Option<Kw> {
    Some(match word {
        b"def" => Kw::Def,
        b"if" => Kw::If,
        b"elif" => Kw::Elif,
        b"else" => Kw::Else,
        b"for" => Kw::For,
        b"in" => Kw::In,
        b"while" => Kw::While,
        b"with" => Kw::With,
        b"as" => Kw::As,
        b"return" => Kw::Return,
        b"pass" => Kw::Pass,
        b"break" => Kw::Break,
        b"continue" => Kw::Continue,
        b"import" => Kw::Import,
        b"from" => Kw::From,
        b"not" => Kw::Not,
        b"and" => Kw::And,
        b"or" => Kw::Or,
        b"is" => Kw::Is,
        b"True" => Kw::True,
        b"False" => Kw::False,
        b"None" => Kw::None,
        _ => return None,
    })
}

/// The longest operator at the start of `rest`, with its length.
fn operator(rest: &[u8]) -> Option<(P, usize)> {
    let at = |i: usize| rest.get(i).copied().unwrap_or(0);
    let (a, b, c) = (at(0), at(1), at(2));
    Some(match (a, b, c) {
        (b'*', b'*', b'=') | (b'/', b'/', b'=') | (b'<', b'<', b'=') | (b'>', b'>', b'=') => (P::AugAssign, 3),
        (b'.', b'.', b'.') => (P::Ellipsis, 3),
        (b'*', b'*', _) => (P::DoubleStar, 2),
        (b'/', b'/', _) => (P::DoubleSlash, 2),
        (b'<', b'<', _) => (P::Shl, 2),
        (b'>', b'>', _) => (P::Shr, 2),
        (b'<', b'=', _) => (P::Le, 2),
        (b'>', b'=', _) => (P::Ge, 2),
        (b'=', b'=', _) => (P::EqEq, 2),
        (b'!', b'=', _) => (P::NotEq, 2),
        (b'-', b'>', _) => (P::Arrow, 2),
        (b'+' | b'-' | b'*' | b'/' | b'@' | b'%' | b'&' | b'|' | b'^', b'=', _) => (P::AugAssign, 2),
        (b'(', ..) => (P::LParen, 1),
        (b')', ..) => (P::RParen, 1),
        (b'[', ..) => (P::LBracket, 1),
        (b']', ..) => (P::RBracket, 1),
        (b'{', ..) => (P::LBrace, 1),
        (b'}', ..) => (P::RBrace, 1),
        (b',', ..) => (P::Comma, 1),
        (b':', ..) => (P::Colon, 1),
        (b';', ..) => (P::Semi, 1),
        (b'.', ..) => (P::Dot, 1),
        (b'@', ..) => (P::At, 1),
        (b'=', ..) => (P::Assign, 1),
        (b'+', ..) => (P::Plus, 1),
        (b'-', ..) => (P::Minus, 1),
        (b'*', ..) => (P::Star, 1),
        (b'/', ..) => (P::Slash, 1),
        (b'%', ..) => (P::Percent, 1),
        (b'|', ..) => (P::Pipe, 1),
        (b'^', ..) => (P::Caret, 1),
        (b'&', ..) => (P::Amp, 1),
        (b'~', ..) => (P::Tilde, 1),
        (b'<', ..) => (P::Lt, 1),
        (b'>', ..) => (P::Gt, 1),
        _ => return None,
    })
}

/// A comment line between two code lines: its indentation and where its line ends.
struct CommentLine {
    indent: u32,
    end: u32,
}

struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
    indents: Vec<u32>,
    toks: Vec<Tok>,
}

pub(super) fn lex(text: &str) -> Option<Vec<Tok>> {
    let bytes = text.as_bytes();
    let mut lx = Lexer { bytes, pos: 0, depth: 0, indents: vec![0], toks: Vec::with_capacity(bytes.len() / 3) };
    // Leading blank and comment lines; the first code line must start a block at 0.
    let (comments, first) = lx.skip_to_code_line()?;
    drop(comments);
    if first.is_some_and(|indent| indent != 0) {
        return None;
    }
    while lx.pos < bytes.len() {
        lx.code_line()?;
    }
    let end = bytes.len() as u32;
    lx.toks.push(Tok { kind: Kind::Eof, start: end, end });
    Some(lx.toks)
}

impl Lexer<'_> {
    fn at(&self, i: usize) -> u8 {
        self.bytes.get(i).copied().unwrap_or(0)
    }

    fn push(&mut self, kind: Kind, start: usize, end: usize) {
        self.toks.push(Tok { kind, start: start as u32, end: end as u32 });
    }

    /// From the start of a line: skips blank and comment lines, stopping at the first
    /// character of the next code line. Returns the comment lines passed and the code
    /// line's indentation (`None` at the end of the text).
    fn skip_to_code_line(&mut self) -> Option<(Vec<CommentLine>, Option<u32>)> {
        let mut comments = Vec::new();
        loop {
            let mut col = 0u32;
            while self.at(self.pos) == b' ' {
                col += 1;
                self.pos += 1;
            }
            match self.at(self.pos) {
                0 if self.pos >= self.bytes.len() => return Some((comments, None)),
                b'\n' => self.pos += 1,
                b'#' => {
                    let end = self.line_end(self.pos);
                    comments.push(CommentLine { indent: col, end: end as u32 });
                    self.pos = (end + 1).min(self.bytes.len());
                }
                b'\t' | b'\x0c' | b'\r' => return None,
                _ => return Some((comments, Some(col))),
            }
        }
    }

    fn line_end(&self, from: usize) -> usize {
        self.bytes[from..].iter().position(|&b| b == b'\n').map_or(self.bytes.len(), |p| from + p)
    }

    /// One code line (and the lines its brackets and strings continue over), then
    /// the layout tokens at its end and the blank and comment lines after it.
    fn code_line(&mut self) -> Option<()> {
        loop {
            let b = self.at(self.pos);
            if self.pos >= self.bytes.len() {
                break;
            }
            match b {
                b' ' => self.pos += 1,
                b'\n' if self.depth == 0 => break,
                b'\n' => {
                    self.pos += 1;
                    // At column 0 inside brackets, tree-sitter's scanner ends the
                    // statement before `def `, `from `, `import ` and `@name`.
                    if matches!(self.at(self.pos), b'@' | b'd' | b'f' | b'i') {
                        return None;
                    }
                }
                b'#' => self.pos = self.line_end(self.pos),
                b'"' | b'\'' => self.string(self.pos, self.pos)?,
                b'0'..=b'9' => self.number()?,
                b'.' if self.at(self.pos + 1).is_ascii_digit() => self.number()?,
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => self.word()?,
                _ => {
                    let (p, len) = operator(&self.bytes[self.pos..])?;
                    match p {
                        P::LParen | P::LBracket | P::LBrace => self.depth += 1,
                        P::RParen | P::RBracket | P::RBrace => self.depth = self.depth.checked_sub(1)?,
                        _ => {}
                    }
                    self.push(Kind::P(p), self.pos, self.pos + len);
                    self.pos += len;
                }
            }
        }
        self.line_break()
    }

    /// At the end of a code line (on its `\n`, or at the end of the text).
    fn line_break(&mut self) -> Option<()> {
        let line_end = self.pos;
        let header = matches!(self.toks.last(), Some(Tok { kind: Kind::P(P::Colon), .. }));
        self.pos = (self.pos + 1).min(self.bytes.len());
        let (comments, next) = self.skip_to_code_line()?;
        let next_indent = next.unwrap_or(0);
        let top = *self.indents.last()?;
        if header && next_indent > top {
            self.push(Kind::Indent, line_end, line_end);
            self.indents.push(next_indent);
            return Some(());
        }
        self.push(Kind::Newline, line_end, line_end);
        if next_indent > top {
            // An unexpected indent (or an empty block): let tree-sitter report it.
            return None;
        }
        // The scanner closes a block at the end of the last line, code or comment,
        // before the first line whose indentation is below the block's; a comment
        // line counts as indented to max(its own column, the next code line's).
        let mut line = 0usize;
        while *self.indents.last()? > next_indent {
            let level = *self.indents.last()?;
            while line < comments.len() && comments[line].indent.max(next_indent) >= level {
                line += 1;
            }
            let at = if line == 0 { line_end as u32 } else { comments[line - 1].end };
            self.toks.push(Tok { kind: Kind::Dedent, start: at, end: at });
            self.indents.pop();
        }
        (*self.indents.last()? == next_indent).then_some(())
    }

    fn word(&mut self) -> Option<()> {
        let start = self.pos;
        let mut end = start;
        while matches!(self.at(end), b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_') {
            end += 1;
        }
        let next = self.at(end);
        if next >= 0x80 {
            return None;
        }
        if next == b'"' || next == b'\'' {
            // A string prefix (`r"..."`, `u'...'`); f- and b-strings are errors.
            let prefix = &self.bytes[start..end];
            if prefix.len() <= 2 && prefix.iter().all(|c| matches!(c, b'r' | b'R' | b'u' | b'U')) {
                return self.string(start, end);
            }
            return None;
        }
        let kind = match keyword(&self.bytes[start..end]) {
            Some(k) => Kind::Kw(k),
            None => Kind::Name,
        };
        self.push(kind, start, end);
        self.pos = end;
        Some(())
    }

    /// A string literal whose prefix starts at `start` and whose quote is at `quote_at`.
    fn string(&mut self, start: usize, quote_at: usize) -> Option<()> {
        let q = self.at(quote_at);
        let triple = self.at(quote_at + 1) == q && self.at(quote_at + 2) == q;
        let mut i = quote_at + if triple { 3 } else { 1 };
        loop {
            let b = *self.bytes.get(i)?;
            match b {
                b'\\' => {
                    if self.bytes.get(i + 1)? == &b'\r' {
                        return None;
                    }
                    i += 2;
                }
                b'\n' if !triple => return None,
                _ if b == q => {
                    if !triple {
                        i += 1;
                        break;
                    }
                    if self.at(i + 1) == q && self.at(i + 2) == q {
                        i += 3;
                        break;
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
        // A quote right after the closing one would be read differently by the
        // grammar's string regexes: leave such text to tree-sitter.
        if self.at(i) == b'"' || self.at(i) == b'\'' || i > self.bytes.len() {
            return None;
        }
        self.push(Kind::Str, start, i);
        self.pos = i;
        Some(())
    }

    /// Integer and float tokens, longest match as the grammar's token rules.
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        let b = &self.bytes;
        let digits_from = |mut i: usize, ok: fn(u8) -> bool| {
            while i < b.len() && (ok(b[i]) || b[i] == b'_') {
                i += 1;
            }
            i
        };
        let radix = match (self.at(start), self.at(start + 1) | 0x20) {
            (b'0', b'x') => Some(u8::is_ascii_hexdigit as fn(&u8) -> bool),
            (b'0', b'o') => Some((|c: &u8| (b'0'..=b'7').contains(c)) as fn(&u8) -> bool),
            (b'0', b'b') => Some((|c: &u8| *c == b'0' || *c == b'1') as fn(&u8) -> bool),
            _ => None,
        };
        let (kind, end) = if let Some(ok) = radix {
            let mut i = start + 2;
            while i < b.len() && (ok(&b[i]) || b[i] == b'_') {
                i += 1;
            }
            if i == start + 2 {
                return None;
            }
            (Kind::Int, i)
        } else {
            let is_digit: fn(u8) -> bool = |c| c.is_ascii_digit();
            let mut i = start;
            let mut float = false;
            if b[i] != b'.' {
                i = digits_from(i + 1, is_digit);
            }
            if self.at(i) == b'.' {
                float = true;
                i += 1;
                if self.at(i).is_ascii_digit() {
                    i = digits_from(i + 1, is_digit);
                }
            }
            if self.at(i) | 0x20 == b'e' {
                let mut j = i + 1;
                if matches!(self.at(j), b'+' | b'-') {
                    j += 1;
                }
                if self.at(j).is_ascii_digit() {
                    i = digits_from(j + 1, is_digit);
                    float = true;
                }
            }
            (if float { Kind::Float } else { Kind::Int }, i)
        };
        // `1abc`, `1.2.3`: two tokens in a row; the parser would refuse them anyway.
        if matches!(self.at(end), b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'.' | b'0'..=b'9') || self.at(end) >= 0x80 {
            return None;
        }
        self.push(kind, start, end);
        self.pos = end;
        Some(())
    }
}
