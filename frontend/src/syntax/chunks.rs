//! Splits a file into top-level statements ("chunks") so that each can be parsed on
//! its own: a chunk's tree is small (cache-resident, memory reused), and after an edit
//! only the edited chunk is parsed again (chunks are memoized by their text).

use crate::text::TextRange;

/// The chunks of `text`, covering it exactly and in order. A chunk starts at a line
/// that begins in column 0 outside any bracket, string or continuation, and that
/// does not continue the previous statement (decorators stay with their `def`;
/// `elif`/`else` stay with their `if`). Blank and comment lines go with what follows.
pub fn split(text: &str) -> Vec<TextRange> {
    let bytes = text.as_bytes();
    let mut starts = vec![0usize];
    let mut depth = 0i32;
    let mut pos = 0usize;
    let mut continuation = false;
    // Start of the pending run of blank/comment lines (they join the next chunk).
    let mut blank_run: Option<usize> = None;
    let mut prev_decorator = false;
    let mut first_statement = true;
    while pos < bytes.len() {
        let line_start = pos;
        let at_top = depth == 0 && !continuation;
        continuation = false;
        // One pass over the line: the first significant byte, brackets, strings,
        // comments and a trailing backslash.
        let mut first_significant: Option<usize> = None;
        let mut i = pos;
        while i < bytes.len() {
            // Most bytes are ordinary (names, digits, operators): skip them with one
            // table lookup each; only the first of a line needs noting.
            if !SPECIAL[bytes[i] as usize] {
                first_significant.get_or_insert(i);
                i += 1;
                while i < bytes.len() && !SPECIAL[bytes[i] as usize] {
                    i += 1;
                }
                continue;
            }
            match bytes[i] {
                b'\n' => break,
                b' ' | b'\t' | b'\r' | b'\x0c' => {}
                b'#' => {
                    i = bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| i + p);
                    break;
                }
                q @ (b'\'' | b'"') => {
                    first_significant.get_or_insert(i);
                    i = skip_string(bytes, i, q);
                    continue;
                }
                b'(' | b'[' | b'{' => {
                    first_significant.get_or_insert(i);
                    depth += 1;
                }
                b')' | b']' | b'}' => {
                    first_significant.get_or_insert(i);
                    depth = (depth - 1).max(0);
                }
                b'\\' => {
                    let rest = &bytes[i + 1..];
                    if rest.first().is_none_or(|&b| b == b'\n') || rest.starts_with(b"\r\n") || rest == b"\r" {
                        continuation = true;
                    } else {
                        first_significant.get_or_insert(i);
                    }
                }
                _ => {
                    first_significant.get_or_insert(i);
                }
            }
            i += 1;
        }
        if at_top {
            match first_significant {
                // Blank or comment-only.
                None => {
                    blank_run.get_or_insert(line_start);
                }
                // A statement in column 0.
                Some(s) if s == line_start => {
                    let rest = &bytes[s..];
                    let keeps_previous =
                        prev_decorator || starts_with_word(rest, b"elif") || starts_with_word(rest, b"else");
                    if !keeps_previous && !first_statement {
                        starts.push(blank_run.unwrap_or(line_start));
                    }
                    first_statement = false;
                    prev_decorator = bytes[s] == b'@';
                    blank_run = None;
                }
                // An indented line belongs to the statement above.
                Some(_) => blank_run = None,
            }
        }
        pos = i + 1;
    }
    let mut out = Vec::with_capacity(starts.len());
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(bytes.len());
        if e > s || out.is_empty() {
            out.push(TextRange::new(s as u32, e as u32));
        }
    }
    out
}

/// Bytes the splitter must look at: line ends, whitespace, comments, strings, brackets
/// and backslashes. Everything else only marks a line as significant.
static SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let special = b"\n \t\r\x0c#'\"()[]{}\\";
    let mut i = 0;
    while i < special.len() {
        table[special[i] as usize] = true;
        i += 1;
    }
    table
};

fn starts_with_word(rest: &[u8], word: &[u8]) -> bool {
    rest.starts_with(word) && !rest.get(word.len()).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Returns the offset just after the string starting at `start` (or where an
/// unterminated one gives up: the end of the line, or of the file for `"""`).
fn skip_string(bytes: &[u8], start: usize, quote: u8) -> usize {
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' if !triple => return i,
            q if q == quote => {
                if !triple {
                    return i + 1;
                }
                if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                    return i + 3;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<&str> {
        split(text).into_iter().map(|r| r.slice(text)).collect()
    }

    #[test]
    fn splits_at_top_level_statements() {
        let text = "import x\n\n# about f\n@jit\n@autodiff\ndef f(a,\n b):\n    return (a +\nb)\nX = \"\"\"\ndef not_a_split\n\"\"\"\ndef g():\n    pass\n";
        assert_eq!(
            pieces(text),
            vec![
                "import x\n",
                "\n# about f\n@jit\n@autodiff\ndef f(a,\n b):\n    return (a +\nb)\n",
                "X = \"\"\"\ndef not_a_split\n\"\"\"\n",
                "def g():\n    pass\n",
            ]
        );
    }

    #[test]
    fn chunks_cover_the_text() {
        for text in ["", "x", "\n\n", "def f(:\n", "if x:\n    y\nelse:\n    z\nw = 1", "a = (\n", "s = 'abc\nt = 1\n"]
        {
            let ranges = split(text);
            assert_eq!(ranges.first().map(|r| r.start), Some(0), "{text:?}");
            assert_eq!(ranges.last().map(|r| r.end), Some(text.len() as u32), "{text:?}");
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
        assert_eq!(pieces("if x:\n    y\nelse:\n    z\nw = 1").len(), 2);
        assert_eq!(pieces("s = 'abc\nt = 1\n").len(), 2);
    }
}
