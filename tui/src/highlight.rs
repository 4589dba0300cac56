//! Syntax highlighting: a small classifier for printed IR, PTX and LLVM IR (one line at a
//! time, so only visible lines are ever classified), and the source's semantic tokens
//! from the frontend's `ide::highlight`, split per line once per revision.

use std::ops::Range;

use ratatui::style::Style;
use ratatui::text::Span;
use tessera_frontend::ide::HlRange;
use tessera_frontend::text::LineIndex;

use crate::irdoc::Dialect;
/// The classes of IR tokens; the palette that colours them is in [`crate::theme`].
pub use crate::theme::Class;

const MLIR_TYPES: &[&str] =
    &["index", "f64", "f32", "tf32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "i32", "i64", "bool", "i1"];
const MLIR_KEYWORDS: &[&str] = &["to", "step", "iter_args", "attributes", "else"];
const LLVM_TYPES: &[&str] =
    &["void", "i1", "i8", "i16", "i32", "i64", "i128", "half", "bfloat", "float", "double", "ptr", "label", "x"];
const LLVM_KEYWORDS: &[&str] = &[
    "define",
    "declare",
    "global",
    "constant",
    "private",
    "internal",
    "external",
    "dso_local",
    "align",
    "nuw",
    "nsw",
    "inbounds",
    "to",
    "tail",
    "fast",
    "contract",
    "reassoc",
    "noalias",
    "nocapture",
    "readonly",
    "writeonly",
    "true",
    "false",
    "undef",
    "poison",
    "null",
    "zeroinitializer",
    "target",
    "datalayout",
    "triple",
    "source_filename",
];

fn mlir_op_class(word: &str) -> Class {
    let dialect = word.split('.').next().unwrap_or("");
    match dialect {
        "scf" | "grid" | "func" => Class::ControlOp,
        _ if is_memory_op(word) => Class::MemoryOp,
        _ => Class::Op,
    }
}

fn is_memory_op(word: &str) -> bool {
    [
        "load",
        "store",
        "cp_async",
        "cp.async",
        "barrier",
        "bar.",
        "async_",
        "ldmatrix",
        "smem",
        "gather",
        "scatter",
        "alloc_shared",
        "st.",
        "ld.",
        "view",
    ]
    .iter()
    .any(|m| word.contains(m))
}

fn ptx_op_class(word: &str) -> Class {
    if matches!(word.split('.').next(), Some("bra" | "ret" | "exit" | "call" | "setp" | "selp")) {
        Class::ControlOp
    } else if is_memory_op(word) {
        Class::MemoryOp
    } else {
        Class::Op
    }
}

fn llvm_op_class(word: &str) -> Class {
    match word {
        "br" | "ret" | "switch" | "phi" | "call" | "icmp" | "fcmp" | "select" | "unreachable" => Class::ControlOp,
        "load" | "store" | "getelementptr" | "alloca" | "memcpy" => Class::MemoryOp,
        _ => Class::Op,
    }
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'$'
}

/// Where the bracket opened at `open` closes (or the end of the line).
fn matching(bytes: &[u8], open: usize, o: u8, c: u8) -> usize {
    let mut depth = 0i32;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    bytes.len()
}

/// Classifies one line; the ranges cover the line, in order.
pub fn classify(line: &str, dialect: Dialect) -> Vec<(Range<usize>, Class)> {
    let bytes = line.as_bytes();
    let mut out: Vec<(Range<usize>, Class)> = Vec::new();
    let push = |out: &mut Vec<(Range<usize>, Class)>, r: Range<usize>, c: Class| {
        if r.is_empty() {
            return;
        }
        match out.last_mut() {
            Some((last, lc)) if *lc == c && last.end == r.start => last.end = r.end,
            _ => out.push((r, c)),
        }
    };
    let comment = match dialect {
        Dialect::Llvm => ";",
        _ => "//",
    };
    let mut i = 0;
    let mut brace_depth = 0;
    // The first word of a PTX/LLVM statement is its instruction.
    let mut seen_word = false;
    let mut after_eq = false;
    while i < bytes.len() {
        let b = bytes[i];
        let rest = &line[i..];
        if rest.starts_with(comment) {
            push(&mut out, i..bytes.len(), Class::Comment);
            break;
        }
        if dialect == Dialect::Mlir && rest.starts_with("loc(") {
            let end = matching(bytes, i + 3, b'(', b')');
            push(&mut out, i..end, Class::Loc);
            i = end;
            continue;
        }
        match b {
            b' ' | b'\t' => {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                    i += 1;
                }
                push(&mut out, start..i, Class::Plain);
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                push(&mut out, start..i, Class::String);
            }
            b'%' => {
                let start = i;
                i += 1;
                while i < bytes.len() && is_ident_char(bytes[i]) {
                    i += 1;
                }
                push(&mut out, start..i, Class::Value);
            }
            b'@' => {
                let start = i;
                i += 1;
                // PTX predicates (`@%p1`, `@!%p1`) guard the instruction that follows.
                if dialect == Dialect::Ptx {
                    push(&mut out, start..i, Class::ControlOp);
                    continue;
                }
                while i < bytes.len() && (is_ident_char(bytes[i]) || bytes[i] == b'"') {
                    i += 1;
                }
                push(&mut out, start..i, Class::Symbol);
            }
            b'#' if dialect == Dialect::Mlir => {
                let start = i;
                i += 1;
                while i < bytes.len() && is_ident_char(bytes[i]) {
                    i += 1;
                }
                if i < bytes.len() && bytes[i] == b'<' {
                    i = matching(bytes, i, b'<', b'>');
                }
                push(&mut out, start..i, Class::Layout);
            }
            b'!' => {
                let start = i;
                i += 1;
                while i < bytes.len() && is_ident_char(bytes[i]) {
                    i += 1;
                }
                let class = if dialect == Dialect::Llvm { Class::Loc } else { Class::Type };
                push(&mut out, start..i, class);
            }
            b'{' => {
                brace_depth += 1;
                push(&mut out, i..i + 1, Class::Plain);
                i += 1;
            }
            b'}' => {
                brace_depth -= 1;
                push(&mut out, i..i + 1, Class::Plain);
                i += 1;
            }
            b'=' => {
                after_eq = true;
                push(&mut out, i..i + 1, Class::Plain);
                i += 1;
            }
            b'-' | b'0'..=b'9'
                if (b != b'-' || bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
                    && (i == 0 || !is_ident_char(bytes[i - 1])) =>
            {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
                // `64x64xbf16` is a shape, not a number.
                let class = if line[start..i].contains('x') && !line[start..i].starts_with("0x") {
                    Class::Type
                } else {
                    Class::Number
                };
                push(&mut out, start..i, class);
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'.' || c == b'$' => {
                let start = i;
                while i < bytes.len() && is_ident_char(bytes[i]) {
                    i += 1;
                }
                let word = &line[start..i];
                let next = line[i..].trim_start();
                let class = classify_word(dialect, word, next, brace_depth, seen_word, after_eq);
                if class == Class::Type && bytes.get(i) == Some(&b'<') {
                    i = matching(bytes, i, b'<', b'>');
                }
                if class != Class::Label {
                    seen_word = true;
                }
                push(&mut out, start..i, class);
            }
            _ => {
                let start = i;
                i += line[i..].chars().next().map_or(1, char::len_utf8);
                if b == b';' || b == b'{' {
                    seen_word = false;
                    after_eq = false;
                }
                push(&mut out, start..i, Class::Plain);
            }
        }
    }
    out
}

fn classify_word(dialect: Dialect, word: &str, next: &str, braces: i32, seen_word: bool, after_eq: bool) -> Class {
    match dialect {
        Dialect::Mlir => {
            if next.starts_with('<') && matches!(word, "tile" | "tensor" | "view" | "smem") {
                Class::Type
            } else if braces > 0 && next.starts_with('=') && !next.starts_with("==") && !after_eq_op(word) {
                Class::AttrKey
            } else if word.contains('.') && word.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                mlir_op_class(word)
            } else if MLIR_TYPES.contains(&word) {
                Class::Type
            } else if MLIR_KEYWORDS.contains(&word) {
                Class::Keyword
            } else if word == "true" || word == "false" {
                Class::Number
            } else {
                Class::Plain
            }
        }
        Dialect::Ptx => {
            if (next.starts_with(':') && !word.starts_with('.')) || word.starts_with('$') {
                Class::Label
            } else if word.starts_with('.') {
                if seen_word {
                    Class::Type
                } else {
                    Class::Directive
                }
            } else if !seen_word {
                ptx_op_class(word)
            } else {
                Class::Plain
            }
        }
        Dialect::Llvm => {
            if LLVM_TYPES.contains(&word) {
                Class::Type
            } else if LLVM_KEYWORDS.contains(&word) {
                Class::Keyword
            } else if next.starts_with(':') {
                Class::Label
            } else if after_eq || !seen_word {
                llvm_op_class(word)
            } else {
                Class::Plain
            }
        }
    }
}

fn after_eq_op(word: &str) -> bool {
    word.contains('.')
}

/// A line cut to the columns `[skip, skip + width)` (in chars), as styled spans.
pub fn clip<'a>(line: &'a str, parts: &[(Range<usize>, Style)], skip: usize, width: usize) -> Vec<Span<'a>> {
    let mut out = Vec::new();
    let mut col = 0usize;
    let end_col = skip.saturating_add(width);
    for (range, style) in parts {
        if col >= end_col {
            break;
        }
        let text = &line[range.clone()];
        let n = text.chars().count();
        if col + n <= skip {
            col += n;
            continue;
        }
        let from = skip.saturating_sub(col);
        let to = (end_col - col).min(n);
        let s = char_slice(text, from, to);
        if !s.is_empty() {
            out.push(Span::styled(s, *style));
        }
        col += n;
    }
    out
}

fn char_slice(s: &str, from: usize, to: usize) -> &str {
    if s.is_ascii() {
        return &s[from.min(s.len())..to.max(from).min(s.len())];
    }
    let byte = |n: usize| s.char_indices().nth(n).map_or(s.len(), |(i, _)| i);
    &s[byte(from)..byte(to.max(from))]
}

/// The source's semantic tokens, per line: `(byte range within the line, style)`.
#[derive(Clone, Debug, Default)]
pub struct SourceHighlight {
    lines: Vec<Vec<(Range<usize>, Style)>>,
}

impl SourceHighlight {
    pub fn new(text: &str, index: &LineIndex, tokens: &[HlRange]) -> SourceHighlight {
        let mut lines: Vec<Vec<(Range<usize>, Style)>> = vec![Vec::new(); index.line_count()];
        for t in tokens {
            let style = crate::theme::source(t.tag, t.mods);
            let first = index.line_of(t.range.start);
            let last = index.line_of(t.range.end.saturating_sub(1).max(t.range.start));
            for line in first..=last {
                let lr = index.line_range(text, line);
                let s = t.range.start.max(lr.start);
                let e = t.range.end.min(lr.end);
                if s < e {
                    lines[line as usize].push(((s - lr.start) as usize..(e - lr.start) as usize, style));
                }
            }
        }
        SourceHighlight { lines }
    }

    /// Styled pieces covering the whole line (unclassified text in `base`).
    pub fn parts(&self, line: usize, text: &str, base: Style) -> Vec<(Range<usize>, Style)> {
        let mut out = Vec::new();
        let mut at = 0;
        for (r, style) in self.lines.get(line).map(Vec::as_slice).unwrap_or(&[]) {
            if r.start < at || r.end > text.len() || !text.is_char_boundary(r.start) || !text.is_char_boundary(r.end) {
                continue;
            }
            if r.start > at {
                out.push((at..r.start, base));
            }
            out.push((r.clone(), base.patch(*style)));
            at = r.end;
        }
        if at < text.len() {
            out.push((at..text.len(), base));
        }
        out
    }
}

/// Styled pieces of an IR line (the `Class` of each piece turned into its style).
pub fn ir_parts(line: &str, dialect: Dialect, base: Style) -> Vec<(Range<usize>, Style)> {
    classify(line, dialect).into_iter().map(|(r, c)| (r, base.patch(crate::theme::ir(c)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(line: &str, d: Dialect) -> Vec<(&str, Class)> {
        classify(line, d).into_iter().filter(|(_, c)| *c != Class::Plain).map(|(r, c)| (&line[r], c)).collect()
    }

    #[test]
    fn mlir_lines_are_classified() {
        let line = "%8 = tile.dot %q, %6, %7 {instr = \"m16n8k16\", warps = [4, 1]} : tile<64x64xbf16> -> tile<64x64xf32> loc(\"f.tsr\":25:21)";
        let got = classes(line, Dialect::Mlir);
        assert!(got.contains(&("%8", Class::Value)));
        assert!(got.contains(&("tile.dot", Class::Op)));
        assert!(got.contains(&("instr", Class::AttrKey)));
        assert!(got.contains(&("\"m16n8k16\"", Class::String)));
        assert!(got.contains(&("tile<64x64xbf16>", Class::Type)));
        assert!(got.contains(&("loc(\"f.tsr\":25:21)", Class::Loc)));
        assert!(got.contains(&("4", Class::Number)));
        let got = classes("scf.for %k0 = %c0 to %S step %BN {kind = \"sequential\"} {", Dialect::Mlir);
        assert_eq!(got[0], ("scf.for", Class::ControlOp));
        assert!(got.contains(&("step", Class::Keyword)));
        let got = classes(
            "%q = tile.load %3 : view<64x64xbf16> -> tile<64x64xbf16, #blocked<[1, 8], [4, 8], [4, 1]>>",
            Dialect::Mlir,
        );
        assert!(got.contains(&("tile.load", Class::MemoryOp)));
        assert!(got.contains(&("tile<64x64xbf16, #blocked<[1, 8], [4, 8], [4, 1]>>", Class::Type)));
    }

    #[test]
    fn ptx_and_llvm_lines_are_classified() {
        let got =
            classes("\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2}, [%rd4]; // x", Dialect::Ptx);
        assert_eq!(got[0], ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", Class::Op));
        assert!(got.contains(&("%f1", Class::Value)));
        assert!(got.contains(&("// x", Class::Comment)));
        let got = classes(".reg .f32 %f<8>;", Dialect::Ptx);
        assert_eq!(got[0], (".reg", Class::Directive));
        assert_eq!(got[1], (".f32", Class::Type));
        let got = classes("$L__BB0_2:", Dialect::Ptx);
        assert_eq!(got[0], ("$L__BB0_2", Class::Label));
        let got = classes("  %5 = fadd float %3, %4 ; sum", Dialect::Llvm);
        assert!(got.contains(&("fadd", Class::Op)));
        assert!(got.contains(&("float", Class::Type)));
        assert!(got.contains(&("; sum", Class::Comment)));
    }

    #[test]
    fn clipping_counts_chars() {
        let line = "ab→cdef";
        let parts = vec![(0..2, Style::new()), (2..line.len(), Style::new())];
        let spans = clip(line, &parts, 1, 3);
        let text: String = spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(text, "b→c");
    }
}
