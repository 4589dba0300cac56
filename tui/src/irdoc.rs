//! One printed IR (or target code) as the panes read it: lines by index, the source range
//! behind each line, and where each line's `loc(...)` suffix starts so it can be hidden.
//! Built once per lowering; drawing touches only the visible lines.

use tessera_frontend::text::{LineIndex, TextRange};
use tessera_passes::{LoweredText, Stage, Target};

/// Which syntax the text is in, for highlighting.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Dialect {
    /// The MLIR-flavoured printer of Graph, Schedule and Tile IR.
    Mlir,
    Ptx,
    Llvm,
}

impl Dialect {
    pub fn of(stage: Stage, target: Target) -> Dialect {
        match (stage, target) {
            (Stage::Target, Target::Cpu) => Dialect::Llvm,
            (Stage::Target, _) => Dialect::Ptx,
            _ => Dialect::Mlir,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct IrDoc {
    text: String,
    /// Start of every line, plus the end of the text.
    starts: Vec<u32>,
    /// End of each line's code, before a trailing `loc(...)`.
    code_ends: Vec<u32>,
    src: Vec<Option<TextRange>>,
    pub dialect: Dialect,
}

impl IrDoc {
    pub fn new(lowered: LoweredText, stage: Stage, target: Target) -> IrDoc {
        IrDoc::from_parts(lowered.text, &lowered.source_map, Dialect::of(stage, target))
    }

    pub fn from_parts(text: String, source_map: &[(u32, TextRange)], dialect: Dialect) -> IrDoc {
        let mut starts = vec![0u32];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                starts.push(i as u32 + 1);
            }
        }
        // A final line without a newline still counts; a trailing newline adds no line.
        if *starts.last().unwrap_or(&0) as usize != text.len() {
            starts.push(text.len() as u32);
        }
        let lines = starts.len() - 1;
        let mut src = vec![None; lines];
        for &(line, range) in source_map {
            if let Some(slot) = src.get_mut(line as usize) {
                *slot = Some(range);
            }
        }
        let code_ends = (0..lines)
            .map(|i| {
                let (s, e) = (starts[i] as usize, starts[i + 1] as usize);
                let line = text[s..e].trim_end_matches(['\n', '\r']);
                s as u32 + code_len(line, dialect) as u32
            })
            .collect();
        IrDoc { text, starts, code_ends, src, dialect }
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Line `i` without its line break ("" past the end).
    pub fn line(&self, i: usize) -> &str {
        if i >= self.len() {
            return "";
        }
        self.text[self.starts[i] as usize..self.starts[i + 1] as usize].trim_end_matches(['\n', '\r'])
    }

    /// Line `i` without its `loc(...)` suffix.
    pub fn code(&self, i: usize) -> &str {
        if i >= self.len() {
            return "";
        }
        &self.text[self.starts[i] as usize..self.code_ends[i] as usize]
    }

    /// The absolute source range line `i` was generated from.
    pub fn source(&self, i: usize) -> Option<TextRange> {
        self.src.get(i).copied().flatten()
    }

    /// The lines generated from source line `line`, best first: lines whose range starts
    /// on it, narrowest first, then lines whose range covers it.
    pub fn lines_for_source_line(&self, index: &LineIndex, line: u32) -> Vec<usize> {
        let mut starting = Vec::new();
        let mut covering = Vec::new();
        for (i, r) in self.src.iter().enumerate() {
            let Some(r) = r else { continue };
            let first = index.line_of(r.start);
            let last = index.line_of(r.end.saturating_sub(1).max(r.start));
            if first == line {
                starting.push((r.len(), i));
            } else if first < line && line <= last {
                covering.push((r.len(), i));
            }
        }
        // In document order within equal widths, so repeated jumps walk downwards.
        starting.sort();
        covering.sort();
        starting.into_iter().chain(covering).map(|(_, i)| i).collect()
    }

    /// Source lines that have at least one IR line.
    pub fn mapped_source_lines(&self, index: &LineIndex) -> Vec<bool> {
        let mut out = vec![false; index.line_count()];
        for r in self.src.iter().flatten() {
            if let Some(slot) = out.get_mut(index.line_of(r.start) as usize) {
                *slot = true;
            }
        }
        out
    }

    /// The longest line's width in chars (for horizontal scrolling limits).
    pub fn max_width(&self, with_loc: bool) -> usize {
        (0..self.len()).map(|i| if with_loc { self.line(i) } else { self.code(i) }.chars().count()).max().unwrap_or(0)
    }
}

/// Length of `line` without a trailing `loc(...)` (and the `//` the printer puts before
/// a block opener's location). Target code keeps its lines whole.
fn code_len(line: &str, dialect: Dialect) -> usize {
    if dialect != Dialect::Mlir || !line.ends_with(')') {
        return line.len();
    }
    let Some(at) = line.rfind("loc(") else {
        return line.len();
    };
    let head = line[..at].trim_end();
    let head = head.strip_suffix("//").map(str::trim_end).unwrap_or(head);
    head.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_cut_and_lines_counted() {
        let text = "func.func @k() { // loc(\"a.tsr\":1:5)\n  %0 = arith.constant 1 : index loc(\"a.tsr\":2:3)\n}\n";
        let map = vec![(0, TextRange::new(0, 4)), (1, TextRange::new(10, 12))];
        let doc = IrDoc::from_parts(text.to_string(), &map, Dialect::Mlir);
        assert_eq!(doc.len(), 3);
        assert_eq!(doc.code(0), "func.func @k() {");
        assert_eq!(doc.code(1), "  %0 = arith.constant 1 : index");
        assert_eq!(doc.code(2), "}");
        assert_eq!(doc.line(1), "  %0 = arith.constant 1 : index loc(\"a.tsr\":2:3)");
        assert_eq!(doc.source(1), Some(TextRange::new(10, 12)));
        assert_eq!(doc.source(2), None);
    }

    #[test]
    fn source_lines_map_back_narrowest_first() {
        let src = "def k():\n    x = a + b\n    y = x\n";
        let index = LineIndex::new(src);
        let line1 = src.find("x = a + b").unwrap() as u32;
        let map = vec![
            (0, TextRange::new(0, src.len() as u32)),
            (1, TextRange::new(line1 + 4, line1 + 9)),
            (2, TextRange::new(line1 + 4, line1 + 5)),
        ];
        let text = "f\nadd\nload\n".to_string();
        let doc = IrDoc::from_parts(text, &map, Dialect::Mlir);
        assert_eq!(doc.lines_for_source_line(&index, 1), vec![2, 1, 0]);
        assert_eq!(doc.lines_for_source_line(&index, 0), vec![0]);
        assert_eq!(doc.mapped_source_lines(&index), vec![true, true, false, false]);
    }
}
