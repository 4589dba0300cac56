//! Byte offsets ↔ LSP positions (UTF-16), and the frontend's plain data → LSP types.

use tessera_frontend::diagnostics::{Diagnostic, Severity};
use tessera_frontend::ide;
use tessera_frontend::text::LineCol;
use tessera_frontend::{LineIndex, TextRange};
use tower_lsp::lsp_types::{self as lsp, NumberOrString, Position, Range, Url};

/// The byte offset of an LSP position; out-of-range positions are clamped.
pub fn offset(text: &str, index: &LineIndex, pos: Position) -> u32 {
    index.offset_utf16(text, LineCol { line: pos.line, col: pos.character })
}

pub fn position(text: &str, index: &LineIndex, offset: u32) -> Position {
    let lc = index.line_col_utf16(text, offset);
    Position::new(lc.line, lc.col)
}

pub fn range(text: &str, index: &LineIndex, range: TextRange) -> Range {
    Range::new(position(text, index, range.start), position(text, index, range.end))
}

pub fn text_range(text: &str, index: &LineIndex, range: Range) -> TextRange {
    let a = offset(text, index, range.start);
    let b = offset(text, index, range.end);
    TextRange::new(a.min(b), a.max(b))
}

/// UTF-16 length of a string (for offsets inside labels).
pub fn utf16_len(s: &str) -> u32 {
    s.encode_utf16().count() as u32
}

pub fn diagnostic(d: &Diagnostic, uri: &Url, text: &str, index: &LineIndex) -> lsp::Diagnostic {
    let mut message = d.message.clone();
    for note in &d.notes {
        message.push_str("\nnote: ");
        message.push_str(note);
    }
    if let Some(fix) = &d.fix {
        message.push_str("\nhelp: ");
        message.push_str(&fix.message);
    }
    let related: Vec<lsp::DiagnosticRelatedInformation> = d
        .labels
        .iter()
        .map(|l| lsp::DiagnosticRelatedInformation {
            location: lsp::Location::new(uri.clone(), range(text, index, l.range)),
            message: l.message.clone(),
        })
        .collect();
    lsp::Diagnostic {
        range: range(text, index, d.range),
        severity: Some(match d.severity {
            Severity::Error => lsp::DiagnosticSeverity::ERROR,
            Severity::Warning => lsp::DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.code.as_str().to_string())),
        code_description: None,
        source: Some("tessera".to_string()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        tags: None,
        data: None,
    }
}

pub fn markdown(value: String) -> lsp::MarkupContent {
    lsp::MarkupContent { kind: lsp::MarkupKind::Markdown, value }
}

pub fn completion_kind(kind: ide::CompletionKind) -> lsp::CompletionItemKind {
    use ide::CompletionKind as K;
    match kind {
        K::Function | K::Decorator => lsp::CompletionItemKind::FUNCTION,
        K::Method => lsp::CompletionItemKind::METHOD,
        K::Property => lsp::CompletionItemKind::FIELD,
        K::Variable | K::Parameter | K::Argument => lsp::CompletionItemKind::VARIABLE,
        K::Constant => lsp::CompletionItemKind::CONSTANT,
        K::Module => lsp::CompletionItemKind::MODULE,
        K::Type => lsp::CompletionItemKind::STRUCT,
        K::Policy => lsp::CompletionItemKind::ENUM_MEMBER,
        K::Keyword => lsp::CompletionItemKind::KEYWORD,
        K::TypeParameter => lsp::CompletionItemKind::TYPE_PARAMETER,
    }
}

/// The semantic token legend: the order of these arrays is the protocol's encoding.
pub const TOKEN_TYPES: &[ide::HlTag] = &[
    ide::HlTag::Namespace,
    ide::HlTag::Type,
    ide::HlTag::TypeParameter,
    ide::HlTag::Parameter,
    ide::HlTag::Variable,
    ide::HlTag::Property,
    ide::HlTag::Function,
    ide::HlTag::Method,
    ide::HlTag::Keyword,
    ide::HlTag::Comment,
    ide::HlTag::String,
    ide::HlTag::Number,
    ide::HlTag::Decorator,
];

pub fn legend() -> lsp::SemanticTokensLegend {
    use lsp::SemanticTokenType as T;
    let types = TOKEN_TYPES
        .iter()
        .map(|t| match t {
            ide::HlTag::Namespace => T::NAMESPACE,
            ide::HlTag::Type => T::TYPE,
            ide::HlTag::TypeParameter => T::TYPE_PARAMETER,
            ide::HlTag::Parameter => T::PARAMETER,
            ide::HlTag::Variable => T::VARIABLE,
            ide::HlTag::Property => T::PROPERTY,
            ide::HlTag::Function => T::FUNCTION,
            ide::HlTag::Method => T::METHOD,
            ide::HlTag::Keyword => T::KEYWORD,
            ide::HlTag::Comment => T::COMMENT,
            ide::HlTag::String => T::STRING,
            ide::HlTag::Number => T::NUMBER,
            ide::HlTag::Decorator => T::DECORATOR,
        })
        .collect();
    lsp::SemanticTokensLegend {
        token_types: types,
        token_modifiers: vec![
            lsp::SemanticTokenModifier::DECLARATION,
            lsp::SemanticTokenModifier::READONLY,
            lsp::SemanticTokenModifier::DEFAULT_LIBRARY,
            lsp::SemanticTokenModifier::new("policy"),
        ],
    }
}

fn modifier_bits(mods: ide::HlMods) -> u32 {
    // The frontend's bits are in the legend's order.
    let mut bits = 0;
    for (i, bit) in [ide::HlMods::DECLARATION, ide::HlMods::READONLY, ide::HlMods::DEFAULT_LIBRARY, ide::HlMods::POLICY]
        .into_iter()
        .enumerate()
    {
        if mods.has(bit) {
            bits |= 1 << i;
        }
    }
    bits
}

/// Encodes highlight ranges as LSP semantic tokens (relative, UTF-16, one line each).
pub fn semantic_tokens(text: &str, index: &LineIndex, ranges: &[ide::HlRange]) -> Vec<lsp::SemanticToken> {
    let mut out = Vec::with_capacity(ranges.len());
    let (mut prev_line, mut prev_col) = (0u32, 0u32);
    for r in ranges {
        let Some(type_index) = TOKEN_TYPES.iter().position(|t| *t == r.tag) else {
            continue;
        };
        let mods = modifier_bits(r.mods);
        // Split tokens that span lines (triple-quoted strings).
        let mut start = r.range.start;
        while start < r.range.end {
            let line = index.line_of(start);
            let line_end = index.line_range(text, line).end.min(r.range.end);
            if line_end > start {
                let pos = position(text, index, start);
                let len = utf16_len(&text[start as usize..line_end as usize]);
                let delta_line = pos.line - prev_line;
                let delta_start = if delta_line == 0 { pos.character - prev_col } else { pos.character };
                out.push(lsp::SemanticToken {
                    delta_line,
                    delta_start,
                    length: len,
                    token_type: type_index as u32,
                    token_modifiers_bitset: mods,
                });
                prev_line = pos.line;
                prev_col = pos.character;
            }
            let next = index.line_start(line + 1);
            if next <= start {
                break;
            }
            start = next;
        }
    }
    out
}
