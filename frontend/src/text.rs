//! Byte ranges and the line index that turns them into positions.

use std::fmt;

/// A half-open byte range `[start, end)` into a source text.
///
/// Ranges inside a top-level item are stored relative to the item's start (see
/// `items::ItemAnchor`), so that edits above an item do not change its syntax or
/// its analysis results; they are made absolute only when reported.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TextRange {
    pub start: u32,
    pub end: u32,
}

impl TextRange {
    pub fn new(start: u32, end: u32) -> TextRange {
        debug_assert!(start <= end, "{start} > {end}");
        TextRange { start, end: end.max(start) }
    }

    pub fn empty(at: u32) -> TextRange {
        TextRange { start: at, end: at }
    }

    pub fn len(self) -> u32 {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn contains(self, offset: u32) -> bool {
        self.start <= offset && offset < self.end
    }

    /// Like `contains`, but also true at the end: a cursor just after a name is "on" it.
    pub fn touches(self, offset: u32) -> bool {
        self.start <= offset && offset <= self.end
    }

    pub fn contains_range(self, other: TextRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    pub fn cover(self, other: TextRange) -> TextRange {
        TextRange::new(self.start.min(other.start), self.end.max(other.end))
    }

    pub fn intersects(self, other: TextRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Moves a range by `offset` bytes (relative → absolute).
    pub fn shift(self, offset: u32) -> TextRange {
        TextRange::new(self.start + offset, self.end + offset)
    }

    /// Moves a range back by `offset` bytes (absolute → relative), saturating at zero.
    pub fn unshift(self, offset: u32) -> TextRange {
        TextRange::new(self.start.saturating_sub(offset), self.end.saturating_sub(offset))
    }

    pub fn slice(self, text: &str) -> &str {
        text.get(self.start as usize..self.end as usize).unwrap_or("")
    }
}

impl fmt::Debug for TextRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// A 0-based line and a 0-based column counted in Unicode scalar values.
#[derive(Copy, Clone, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub struct LineCol {
    pub line: u32,
    pub col: u32,
}

/// Maps byte offsets to lines and columns (chars or UTF-16 units) and back.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LineIndex {
    line_starts: Vec<u32>,
    len: u32,
    ascii: bool,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut line_starts = Vec::with_capacity(text.len() / 32 + 1);
        line_starts.push(0);
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        LineIndex { line_starts, len: text.len() as u32, ascii: text.is_ascii() }
    }

    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    pub fn line_start(&self, line: u32) -> u32 {
        self.line_starts.get(line as usize).copied().unwrap_or(self.len)
    }

    /// The byte range of a line without its line terminator.
    pub fn line_range(&self, text: &str, line: u32) -> TextRange {
        let start = self.line_start(line);
        let mut end = self.line_starts.get(line as usize + 1).copied().unwrap_or(self.len);
        let bytes = text.as_bytes();
        while end > start && matches!(bytes.get(end as usize - 1), Some(b'\n' | b'\r')) {
            end -= 1;
        }
        TextRange::new(start, end)
    }

    pub fn line_of(&self, offset: u32) -> u32 {
        let offset = offset.min(self.len);
        (self.line_starts.partition_point(|&s| s <= offset) - 1) as u32
    }

    /// Line and column in Unicode scalar values (the CLI's and the JSON contract's unit).
    pub fn line_col(&self, text: &str, offset: u32) -> LineCol {
        let offset = clamp_to_char_boundary(text, offset.min(self.len));
        let line = self.line_of(offset);
        let start = self.line_starts[line as usize];
        let col =
            if self.ascii { offset - start } else { text[start as usize..offset as usize].chars().count() as u32 };
        LineCol { line, col }
    }

    /// Line and column in UTF-16 code units (the LSP's default unit).
    pub fn line_col_utf16(&self, text: &str, offset: u32) -> LineCol {
        let offset = clamp_to_char_boundary(text, offset.min(self.len));
        let line = self.line_of(offset);
        let start = self.line_starts[line as usize];
        let col = if self.ascii {
            offset - start
        } else {
            text[start as usize..offset as usize].encode_utf16().count() as u32
        };
        LineCol { line, col }
    }

    /// The byte offset of a UTF-16 position; positions past the end of a line or the
    /// file are clamped (editors send them, and they must not be errors).
    pub fn offset_utf16(&self, text: &str, pos: LineCol) -> u32 {
        if pos.line as usize >= self.line_starts.len() {
            return self.len;
        }
        let range = self.line_range(text, pos.line);
        let line_text = range.slice(text);
        let mut units = 0u32;
        for (i, ch) in line_text.char_indices() {
            if units >= pos.col {
                return range.start + i as u32;
            }
            units += ch.len_utf16() as u32;
        }
        range.end
    }

    /// The byte offset of a position counted in chars; clamped like `offset_utf16`.
    pub fn offset_chars(&self, text: &str, pos: LineCol) -> u32 {
        if pos.line as usize >= self.line_starts.len() {
            return self.len;
        }
        let range = self.line_range(text, pos.line);
        match range.slice(text).char_indices().nth(pos.col as usize) {
            Some((i, _)) => range.start + i as u32,
            None => range.end,
        }
    }
}

pub fn clamp_to_char_boundary(text: &str, mut offset: u32) -> u32 {
    while offset > 0 && !text.is_char_boundary(offset as usize) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_chars_and_utf16_units() {
        let text = "ab\nx = \"é😀\" + y\n";
        let index = LineIndex::new(text);
        let y = text.find('y').unwrap() as u32;
        assert_eq!(index.line_col(text, y), LineCol { line: 1, col: 11 });
        assert_eq!(index.line_col_utf16(text, y), LineCol { line: 1, col: 12 });
        assert_eq!(index.offset_utf16(text, LineCol { line: 1, col: 12 }), y);
        assert_eq!(index.offset_chars(text, LineCol { line: 1, col: 11 }), y);
        assert_eq!(index.offset_utf16(text, LineCol { line: 9, col: 0 }), text.len() as u32);
        assert_eq!(index.offset_utf16(text, LineCol { line: 0, col: 99 }), 2);
    }

    #[test]
    fn line_of_handles_end_of_file() {
        let text = "a\nb";
        let index = LineIndex::new(text);
        assert_eq!(index.line_of(3), 1);
        assert_eq!(index.line_of(99), 1);
        assert_eq!(index.line_range(text, 0), TextRange::new(0, 1));
    }
}
