//! The mouse: a click picks a tab, a stage or a line, the wheel scrolls the pane under
//! it; each turns into the same transitions as the keys.

use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Position;

use super::App;
use crate::keymap::Action;
use crate::state::{Overlay, Pane, Scroll};
use crate::workspace::stage_index;

impl App {
    pub(super) fn handle_mouse(&mut self, m: MouseEvent) {
        if !matches!(self.overlay, Overlay::None) {
            return;
        }
        let at = Position::new(m.column, m.row);
        match m.kind {
            MouseEventKind::Down(MouseButton::Left) => {
                if let Some((tab, _)) = self.geometry.tabs.iter().find(|(_, r)| r.contains(at)).copied() {
                    self.set_tab(tab);
                    return;
                }
                if let Some((stage, _)) = self.geometry.stages.iter().find(|(_, r)| r.contains(at)).copied() {
                    while self.stage != stage {
                        let forward = stage_index(stage) > stage_index(self.stage);
                        self.step_stage(forward);
                    }
                    return;
                }
                let Some((pane, rect)) = self.geometry.panes.iter().find(|(_, r)| r.contains(at)).copied() else {
                    return;
                };
                let row = (m.row - rect.y) as usize;
                self.focus = pane;
                match pane {
                    Pane::Source => {
                        self.src.cursor = self.src.top + row;
                        let len = self.ws.line_index().line_count();
                        self.src.clamp(len, rect.height as usize);
                        self.sync_from_source();
                    }
                    Pane::Ir => {
                        self.ir.cursor = self.ir.top + row;
                        self.ir.clamp(self.ir_len(), rect.height as usize);
                        self.sync_from_ir();
                    }
                    Pane::PassList => {
                        let before = self.passes_tab.list.cursor;
                        self.passes_tab.list.cursor = self.passes_tab.list.top + row;
                        let rows = self.visible_passes().len() + self.passes().failure.is_some() as usize;
                        self.passes_tab.list.clamp(rows, rect.height as usize);
                        if before != self.passes_tab.list.cursor {
                            self.passes_tab.diff = Scroll::default();
                        }
                    }
                    Pane::PassDiff => self.passes_tab.diff.cursor = self.passes_tab.diff.top + row,
                    Pane::Lints => {
                        self.lints.cursor = self.lints.top + row;
                        let len = self.diagnostics.as_ref().map_or(0, Vec::len);
                        self.lints.clamp(len, rect.height as usize);
                    }
                    Pane::Schedule => {
                        self.sched.cursor = self.sched.top + row;
                        self.sched.clamp(self.schedule_rows().len(), rect.height as usize);
                    }
                    Pane::Mesh => {
                        self.mesh.cursor = self.mesh.top + row;
                        self.mesh.clamp(self.mesh_lines().len(), rect.height as usize);
                    }
                    Pane::Results => {
                        // The first row of the results pane is the table header.
                        self.run.scroll.cursor = (self.run.scroll.top + row).saturating_sub(1);
                        self.run.scroll.clamp(self.run.results.len(), rect.height as usize);
                    }
                }
            }
            MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
                let Some((pane, _)) = self.geometry.panes.iter().find(|(_, r)| r.contains(at)).copied() else {
                    return;
                };
                let saved = self.focus;
                self.focus = pane;
                let action = if m.kind == MouseEventKind::ScrollDown { Action::Down } else { Action::Up };
                for _ in 0..3 {
                    self.apply_in_pane(action);
                }
                self.focus = saved;
                if saved != pane && matches!(pane, Pane::Source | Pane::Ir) {
                    self.focus = pane;
                }
            }
            _ => {}
        }
    }
}
