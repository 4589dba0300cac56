//! Literal decoding: integer literals (`0x2A`, `1_024`) and string literals (quotes,
//! prefixes, escapes). Pure functions of the source text, kept apart from the tree walk
//! so that they can be tested on their own.

pub(crate) fn parse_int(src: &str) -> Option<i64> {
    let s = src.replace('_', "");
    let lower = s.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()
    } else {
        s.parse().ok()
    }
}

/// Decodes a string literal; returns its value and an error for unsupported prefixes.
pub fn unquote(src: &str) -> (String, Option<String>) {
    let prefix_len = src.find(['\'', '"']).unwrap_or(0);
    let prefix = src[..prefix_len].to_ascii_lowercase();
    let body = &src[prefix_len..];
    let error = if prefix.contains('f') {
        Some("f-strings are not supported: Tessera strings are compile-time constants".to_string())
    } else if prefix.contains('b') {
        Some("byte strings are not supported".to_string())
    } else {
        None
    };
    let quote_len = if body.starts_with("\"\"\"") || body.starts_with("'''") { 3 } else { 1 };
    let inner = if body.len() >= 2 * quote_len {
        &body[quote_len..body.len() - quote_len]
    } else {
        body.get(quote_len..).unwrap_or("")
    };
    if prefix.contains('r') || !inner.contains('\\') {
        return (inner.to_string(), error);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\n') => {}
            Some(other) => {
                if !matches!(other, '\\' | '\'' | '"') {
                    out.push('\\');
                }
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    (out, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_decode() {
        assert_eq!(unquote("\"ab\"").0, "ab");
        assert_eq!(unquote("'''a\nb'''").0, "a\nb");
        assert_eq!(unquote("\"a\\nb\"").0, "a\nb");
        assert_eq!(unquote("r\"a\\nb\"").0, "a\\nb");
        assert!(unquote("f\"x{i}\"").1.is_some());
    }

    #[test]
    fn integer_literals() {
        assert_eq!(parse_int("0x2A"), Some(42));
        assert_eq!(parse_int("1_024"), Some(1024));
        assert_eq!(parse_int("99999999999999999999"), None);
    }
}
