//! Line diffs between two IR texts (consecutive stages or passes). The diff stores line
//! indices into its two documents, not copies of their text, so a 5 000-line listing
//! costs a few vectors of integers.

use std::sync::Arc;
use std::time::Duration;

use similar::{Algorithm, ChangeTag, TextDiff};

use crate::irdoc::IrDoc;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Tag {
    Equal,
    Delete,
    Insert,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DiffLine {
    pub tag: Tag,
    /// Line in the old document (Equal, Delete) or the new one (Insert).
    pub line: u32,
    /// For Equal lines, the line in the new document (its source mapping is the new one).
    pub new_line: u32,
}

#[derive(Clone, Debug)]
pub struct Diff {
    pub old: Option<Arc<IrDoc>>,
    pub new: Arc<IrDoc>,
    pub lines: Vec<DiffLine>,
    /// Indices into `lines` where a run of changes starts.
    pub hunks: Vec<usize>,
    pub inserted: usize,
    pub deleted: usize,
}

impl Diff {
    /// Diffs the code of each line (without `loc(...)`): what a pass changed, not where
    /// the printer says it came from. With no `old`, every line is an insertion.
    pub fn new(old: Option<Arc<IrDoc>>, new: Arc<IrDoc>) -> Diff {
        let code = |doc: &IrDoc| -> String {
            let mut s = String::with_capacity(doc.text().len());
            for i in 0..doc.len() {
                s.push_str(doc.code(i));
                s.push('\n');
            }
            s
        };
        let new_code = code(&new);
        let old_code = old.as_deref().map(code).unwrap_or_default();
        let diff = TextDiff::configure()
            .algorithm(Algorithm::Patience)
            // Whole-listing rewrites (Tile IR → PTX) must not stall a frame.
            .timeout(Duration::from_millis(200))
            .diff_lines(&old_code, &new_code);
        let mut lines = Vec::new();
        let mut hunks = Vec::new();
        let (mut inserted, mut deleted) = (0, 0);
        let mut in_change = false;
        for change in diff.iter_all_changes() {
            let tag = match change.tag() {
                ChangeTag::Equal => Tag::Equal,
                ChangeTag::Delete => Tag::Delete,
                ChangeTag::Insert => Tag::Insert,
            };
            let (line, new_line) = match tag {
                Tag::Equal => (change.old_index().unwrap_or(0), change.new_index().unwrap_or(0)),
                Tag::Delete => (change.old_index().unwrap_or(0), 0),
                Tag::Insert => (change.new_index().unwrap_or(0), change.new_index().unwrap_or(0)),
            };
            match tag {
                Tag::Equal => in_change = false,
                _ => {
                    if !in_change {
                        hunks.push(lines.len());
                    }
                    in_change = true;
                    if tag == Tag::Insert {
                        inserted += 1;
                    } else {
                        deleted += 1;
                    }
                }
            }
            lines.push(DiffLine { tag, line: line as u32, new_line: new_line as u32 });
        }
        Diff { old, new, lines, hunks, inserted, deleted }
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn changed(&self) -> bool {
        self.inserted + self.deleted > 0
    }

    /// The document and line a diff line shows.
    pub fn doc_line(&self, i: usize) -> Option<(&IrDoc, usize)> {
        let d = self.lines.get(i)?;
        match d.tag {
            Tag::Delete => self.old.as_deref().map(|o| (o, d.line as usize)),
            Tag::Equal | Tag::Insert => Some((&*self.new, d.new_line as usize)),
        }
    }

    /// The next hunk after line `from` (wrapping), or the previous one.
    pub fn next_hunk(&self, from: usize, forward: bool) -> Option<usize> {
        if self.hunks.is_empty() {
            return None;
        }
        if forward {
            self.hunks.iter().copied().find(|&h| h > from).or(self.hunks.first().copied())
        } else {
            self.hunks.iter().rev().copied().find(|&h| h < from).or(self.hunks.last().copied())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::irdoc::Dialect;

    fn doc(text: &str) -> Arc<IrDoc> {
        Arc::new(IrDoc::from_parts(text.to_string(), &[], Dialect::Mlir))
    }

    #[test]
    fn diffs_code_not_locations() {
        let old = doc("a loc(\"f\":1:1)\nb loc(\"f\":2:1)\nc\n");
        let new = doc("a loc(\"f\":9:9)\nB\nc\nd\n");
        let d = Diff::new(Some(old), new);
        let tags: Vec<Tag> = d.lines.iter().map(|l| l.tag).collect();
        assert_eq!(tags, vec![Tag::Equal, Tag::Delete, Tag::Insert, Tag::Equal, Tag::Insert]);
        assert_eq!((d.inserted, d.deleted), (2, 1));
        assert_eq!(d.hunks, vec![1, 4]);
        assert_eq!(d.next_hunk(1, true), Some(4));
        assert_eq!(d.next_hunk(4, true), Some(1));
        assert_eq!(d.next_hunk(4, false), Some(1));
        assert_eq!(d.doc_line(1).map(|(doc, l)| doc.line(l)), Some("b loc(\"f\":2:1)"));
        assert_eq!(d.doc_line(2).map(|(doc, l)| doc.line(l)), Some("B"));
    }

    #[test]
    fn no_old_document_means_everything_is_new() {
        let d = Diff::new(None, doc("x\ny\n"));
        assert_eq!(d.inserted, 2);
        assert!(d.changed());
        let unchanged = Diff::new(Some(doc("x\n")), doc("x\n"));
        assert!(!unchanged.changed());
    }
}
