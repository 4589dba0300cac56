//! The text around a cursor, read with the tolerant lexer: works on the unfinished code
//! that completion and signature help see (`tile.` at the end of a line, an unclosed
//! call).

use super::lex::{self, Tok, TokKind};
use crate::db::{self, Db, SourceFile};
use crate::text::TextRange;

/// Where to start lexing for a cursor: the start of the last top-level item that
/// starts at or before it (the parser's items cover every finished statement).
pub(crate) fn context_start(db: &dyn Db, file: SourceFile, offset: u32) -> u32 {
    db::parse(db, file)
        .module
        .items
        .iter()
        .filter(|it| it.range.start <= offset)
        .map(|it| it.range.start)
        .next_back()
        .unwrap_or(0)
}

/// The tokens from the context start up to (not including) the cursor, plus the token
/// the cursor is inside (a comment or string), if any.
pub(crate) struct Before {
    pub toks: Vec<Tok>,
    /// The comment or string containing the cursor.
    pub inside: Option<Tok>,
}

pub(crate) fn tokens_before(db: &dyn Db, file: SourceFile, offset: u32) -> Before {
    let text = file.text(db);
    let offset = offset.min(text.len() as u32);
    let start = context_start(db, file, offset);
    // Lex to the end of the cursor's line so that a string or comment around the
    // cursor is seen whole.
    let line_end = text[offset as usize..].find('\n').map_or(text.len(), |p| offset as usize + p);
    let all = lex::lex(&text[start as usize..line_end], start);
    let mut toks = Vec::new();
    let mut inside = None;
    for t in all {
        if t.range.end <= offset {
            toks.push(t);
        } else if t.range.start < offset {
            match t.kind {
                TokKind::Comment | TokKind::Str => inside = Some(t),
                // The cursor is inside an identifier or number: keep what precedes it.
                _ => toks.push(Tok { kind: t.kind, range: TextRange::new(t.range.start, offset) }),
            }
        }
    }
    // An unterminated string that runs to the cursor contains it too.
    if inside.is_none() {
        if let Some(last) = toks.last() {
            if last.kind == TokKind::Str && last.range.end == offset {
                let s = last.text(text);
                let body = s.trim_start_matches(|c: char| c.is_ascii_alphabetic());
                let q = body.chars().next().unwrap_or('"');
                let closed = body.len() >= 2 && body.ends_with(q);
                if !closed {
                    inside = toks.pop();
                }
            }
        }
    }
    Before { toks, inside }
}

/// An open `(` around the cursor.
pub(crate) struct OpenCall {
    /// The dotted path of the callee (`["tile", "load"]`), empty when it is not a name.
    pub callee: Vec<String>,
    /// The index of the argument the cursor is in (commas at depth 0 before it).
    pub arg_index: usize,
    /// `name` when the cursor's argument starts with `name=`.
    pub keyword: Option<String>,
    /// Keywords already given in this call.
    pub used_keywords: Vec<String>,
    /// The cursor is at the start of an argument (right after `(` or `,`).
    pub at_arg_start: bool,
    /// The call is a decorator's (`@kernel.autotune(`).
    pub in_decorator: bool,
}

/// The open brackets before the cursor, innermost last: (opening token index, char).
pub(crate) fn open_brackets(text: &str, toks: &[Tok]) -> Vec<(usize, char)> {
    let mut stack: Vec<(usize, char)> = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t.kind {
            TokKind::Open => stack.push((i, t.text(text).chars().next().unwrap_or('('))),
            TokKind::Close => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack
}

/// The dotted name that ends just before token `end` (exclusive): `a.b.c` → ["a","b","c"].
pub(crate) fn dotted_before(text: &str, toks: &[Tok], end: usize) -> (Vec<String>, TextRange) {
    let mut path = Vec::new();
    let mut i = end;
    let mut range = TextRange::empty(toks.get(end).map_or(0, |t| t.range.start));
    loop {
        if i == 0 || toks[i - 1].kind != TokKind::Ident {
            break;
        }
        path.push(toks[i - 1].text(text).to_string());
        range = TextRange::new(toks[i - 1].range.start, range.end.max(toks[i - 1].range.end));
        i -= 1;
        if i >= 2 && toks[i - 1].kind == TokKind::Op && toks[i - 1].text(text) == "." {
            i -= 1;
        } else {
            break;
        }
    }
    path.reverse();
    (path, range)
}

/// The innermost unclosed call around the cursor.
pub(crate) fn open_call(text: &str, toks: &[Tok]) -> Option<OpenCall> {
    let stack = open_brackets(text, toks);
    let &(open, ch) = stack.last()?;
    if ch != '(' {
        return None;
    }
    let (callee, callee_range) = dotted_before(text, toks, open);
    // Commas and keywords at depth 0 inside the call.
    let mut depth = 0i32;
    let mut arg_index = 0;
    let mut used_keywords = Vec::new();
    let mut arg_start = open + 1;
    for (i, t) in toks.iter().enumerate().skip(open + 1) {
        match t.kind {
            TokKind::Open => depth += 1,
            TokKind::Close => depth -= 1,
            TokKind::Op if depth == 0 && t.text(text) == "," => {
                arg_index += 1;
                arg_start = i + 1;
            }
            TokKind::Op if depth == 0 && t.text(text) == "=" && i > arg_start && toks[i - 1].kind == TokKind::Ident => {
                used_keywords.push(toks[i - 1].text(text).to_string());
            }
            _ => {}
        }
    }
    let significant: Vec<&Tok> = toks[arg_start..]
        .iter()
        .filter(|t| !matches!(t.kind, TokKind::Newline | TokKind::Comment | TokKind::Continuation))
        .collect();
    let keyword = match significant.as_slice() {
        [name, eq, ..] if name.kind == TokKind::Ident && eq.text(text) == "=" => Some(name.text(text).to_string()),
        _ => None,
    };
    if keyword.is_some() {
        // The current argument's keyword is not "already used".
        used_keywords.pop();
    }
    let at_arg_start = significant.is_empty() || (significant.len() == 1 && significant[0].kind == TokKind::Ident);
    // A decorator: the line of the callee starts with `@`.
    let callee_tok = toks.iter().position(|t| t.range.start == callee_range.start).unwrap_or(open);
    let in_decorator =
        line_first_token(toks, callee_tok).is_some_and(|i| toks[i].kind == TokKind::Op && toks[i].text(text) == "@");
    Some(OpenCall { callee, arg_index, keyword, used_keywords, at_arg_start, in_decorator })
}

/// The index of the first token on the (physical) line of token `i`.
pub(crate) fn line_first_token(toks: &[Tok], i: usize) -> Option<usize> {
    let mut j = i.min(toks.len().checked_sub(1)?);
    while j > 0 && toks[j - 1].kind != TokKind::Newline {
        j -= 1;
    }
    Some(j)
}
