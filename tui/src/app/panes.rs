//! The source and IR panes, which three tabs share (explore, schedule, lints): their
//! cursors, the stage shown, and how each cursor leads the other.

use tessera_frontend::text::TextRange;
use tessera_passes::Stage;

use super::App;
use crate::keymap::Action;
use crate::state::{Pane, Scroll, Tab};
use crate::workspace::stage_index;

impl App {
    /// Lines of the IR pane: the stage's IR, or its diff in diff mode.
    pub fn ir_len(&self) -> usize {
        if self.diff_mode {
            if let Some(d) = self.view.stage_diff(self.stage) {
                return d.len();
            }
        }
        self.view.doc(self.stage).map_or(0, |d| d.len())
    }

    /// The source range behind IR pane line `i`.
    pub fn ir_source(&self, i: usize) -> Option<TextRange> {
        if self.diff_mode {
            if let Some(d) = self.view.stage_diff(self.stage) {
                let (doc, line) = d.doc_line(i)?;
                return doc.source(line);
            }
        }
        self.view.doc(self.stage)?.source(i)
    }

    /// The source range the source pane highlights: behind the IR cursor when the IR
    /// leads, or a lint's range in the lints tab.
    pub fn linked_source(&self) -> Option<TextRange> {
        match self.focus {
            Pane::Ir => self.ir_source(self.ir.cursor).or_else(|| self.stage_error_range()),
            Pane::PassDiff => {
                let i = *self.visible_passes().get(self.passes_tab.list.cursor)?;
                let d = self.pass_diff(i)?;
                let (doc, line) = d.doc_line(self.passes_tab.diff.cursor)?;
                doc.source(line)
            }
            Pane::Lints => self.selected_diagnostic().map(|d| d.range),
            _ => None,
        }
    }

    /// Where the current stage's failure points, when it failed.
    pub fn stage_error_range(&self) -> Option<TextRange> {
        match self.view.stage(self.stage) {
            Some(Err(e)) => e.range,
            Some(Ok(_)) => None,
            None => self.view.config.as_ref().err().and_then(|e| e.range),
        }
    }

    pub(super) fn source_action(&mut self, action: Action) {
        let len = self.ws.line_index().line_count();
        let h = self.geometry.height(Pane::Source);
        if self.src.nav(action, len, h) {
            self.sync_from_source();
            return;
        }
        match action {
            Action::Enter => {
                if self.linked_ir.is_empty() {
                    self.info(format!("no {} IR op comes from this line", self.stage.name()));
                } else {
                    self.set_focus(Pane::Ir);
                }
            }
            Action::NextMatch | Action::PrevMatch => self.cycle_linked(action == Action::NextMatch),
            _ => {}
        }
    }

    pub(super) fn ir_action(&mut self, action: Action) {
        let len = self.ir_len();
        let h = self.geometry.height(Pane::Ir);
        if self.ir.nav(action, len, h) {
            self.sync_from_ir();
            return;
        }
        match action {
            Action::Enter => match self.ir_source(self.ir.cursor) {
                Some(_) => {
                    self.sync_from_ir();
                    if self.tab == Tab::Explore {
                        self.set_focus(Pane::Source);
                    }
                }
                None => self.info("this line has no source location".into()),
            },
            Action::NextMatch | Action::PrevMatch => {
                let forward = action == Action::NextMatch;
                if self.diff_mode {
                    if let Some(d) = self.view.stage_diff(self.stage) {
                        if let Some(h) = d.next_hunk(self.ir.cursor, forward) {
                            self.ir.jump(h, len, self.geometry.height(Pane::Ir));
                            self.sync_from_ir();
                        } else {
                            self.info("no changes between these stages".into());
                        }
                    }
                } else {
                    self.cycle_linked(forward);
                }
            }
            _ => {}
        }
    }

    pub(super) fn step_stage(&mut self, forward: bool) {
        let i = stage_index(self.stage);
        let next = if forward { (i + 1).min(3) } else { i.saturating_sub(1) };
        if next == i {
            self.info(if forward { "Target is the last stage".into() } else { "Graph is the first stage".into() });
            return;
        }
        // At the top of a listing (the function's header) the next listing opens at its
        // top too: the header's location is the whole function, which the last ops of
        // target code also carry.
        let place =
            if self.focus == Pane::Source || self.ir.cursor == 0 { None } else { self.ir_source(self.ir.cursor) };
        self.stage = Stage::ALL[next];
        self.ir.left = 0;
        if self.focus == Pane::Source {
            self.sync_from_source();
        } else {
            self.place_ir_cursor(place);
        }
    }

    /// Puts the IR cursor on the op generated from `place` (the same range, else the
    /// same line), so stepping stages or changing the schedule keeps the op in view.
    pub(super) fn place_ir_cursor(&mut self, place: Option<TextRange>) {
        let len = self.ir_len();
        let h = self.geometry.height(Pane::Ir);
        if place.is_none() {
            self.ir = Scroll { left: self.ir.left, ..Scroll::default() };
        }
        let target = place.and_then(|range| {
            (0..len).find(|&i| self.ir_source(i) == Some(range)).or_else(|| {
                let index = self.ws.line_index();
                let line = index.line_of(range.start);
                (0..len).find(|&i| self.ir_source(i).is_some_and(|r| index.line_of(r.start) == line))
            })
        });
        match target {
            Some(line) => self.ir.jump(line, len, h),
            None => self.ir.clamp(len, h),
        }
        self.sync_from_ir();
    }

    /// The IR cursor moved: the source follows (when the IR leads).
    pub(super) fn sync_from_ir(&mut self) {
        self.linked_ir.clear();
        if let Some(range) = self.ir_source(self.ir.cursor).or_else(|| self.stage_error_range()) {
            let line = self.ws.line_index().line_of(range.start) as usize;
            let len = self.ws.line_index().line_count();
            let h = self.geometry.height(Pane::Source);
            self.src.jump(line, len, h);
        }
    }

    /// The source cursor moved: the IR follows, to the first op of the line.
    pub(super) fn sync_from_source(&mut self) {
        let line = self.src.cursor as u32;
        self.linked_ir = if self.diff_mode {
            let index = self.ws.line_index();
            (0..self.ir_len()).filter(|&i| self.ir_source(i).is_some_and(|r| index.line_of(r.start) == line)).collect()
        } else {
            self.view.doc(self.stage).map(|d| d.lines_for_source_line(self.ws.line_index(), line)).unwrap_or_default()
        };
        let mut sorted = self.linked_ir.clone();
        sorted.sort_unstable();
        if let Some(&first) = self.linked_ir.first() {
            let len = self.ir_len();
            self.ir.jump(first, len, self.geometry.height(Pane::Ir));
        }
        self.linked_ir = sorted;
    }

    pub(super) fn cycle_linked(&mut self, forward: bool) {
        if self.focus == Pane::Ir {
            // From the IR: the other ops of the same source line.
            let Some(range) = self.ir_source(self.ir.cursor) else { return };
            let index = self.ws.line_index();
            let line = index.line_of(range.start);
            let same: Vec<usize> = (0..self.ir_len())
                .filter(|&i| self.ir_source(i).is_some_and(|r| index.line_of(r.start) == line))
                .collect();
            let next = if forward {
                same.iter().copied().find(|&i| i > self.ir.cursor).or(same.first().copied())
            } else {
                same.iter().rev().copied().find(|&i| i < self.ir.cursor).or(same.last().copied())
            };
            if let Some(n) = next {
                let len = self.ir_len();
                self.ir.jump(n, len, self.geometry.height(Pane::Ir));
            }
            return;
        }
        if self.linked_ir.is_empty() {
            self.info(format!("no {} IR op comes from this line", self.stage.name()));
            return;
        }
        let next = if forward {
            self.linked_ir.iter().copied().find(|&i| i > self.ir.cursor).unwrap_or(self.linked_ir[0])
        } else {
            self.linked_ir
                .iter()
                .rev()
                .copied()
                .find(|&i| i < self.ir.cursor)
                .unwrap_or(*self.linked_ir.last().unwrap())
        };
        let len = self.ir_len();
        self.ir.jump(next, len, self.geometry.height(Pane::Ir));
    }

    /// After the kernel changes: the IR cursor on the first line with a location.
    pub(super) fn focus_first_op(&mut self) {
        let first = (0..self.ir_len()).find(|&i| self.ir_source(i).is_some()).unwrap_or(0);
        let len = self.ir_len();
        self.ir.jump(first, len, self.geometry.height(Pane::Ir));
        if self.focus == Pane::Ir {
            self.sync_from_ir();
        }
    }
}
