//! The overlays: the help screen, the kernel picker and the schedule value editor, and
//! the text typed into the last two.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::App;
use crate::components::schedule::{edit_problem, parse_value};
use crate::keymap::Action;
use crate::state::Overlay;

impl App {
    pub(super) fn type_into_overlay(&mut self, key: KeyEvent) {
        let text_key = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
        let rows = if matches!(self.overlay, Overlay::Edit { .. }) { self.schedule_rows() } else { Vec::new() };
        match &mut self.overlay {
            Overlay::Picker { filter, cursor } => {
                match key.code {
                    KeyCode::Char(ch) if text_key => filter.push(ch),
                    KeyCode::Backspace => {
                        filter.pop();
                    }
                    _ => return,
                }
                *cursor = 0;
            }
            Overlay::Edit { row, input, error } => {
                match key.code {
                    KeyCode::Char(ch) if text_key => input.push(ch),
                    KeyCode::Backspace => {
                        input.pop();
                    }
                    _ => return,
                }
                *error = rows.get(*row).and_then(|r| edit_problem(r, input));
            }
            _ => {}
        }
    }

    pub(super) fn apply_help(&mut self, action: Action) {
        if let Overlay::Help { scroll } = &mut self.overlay {
            match action {
                Action::Close => self.overlay = Overlay::None,
                Action::Down => *scroll += 1,
                Action::Up => *scroll = scroll.saturating_sub(1),
                _ => {}
            }
        }
    }

    /// Functions the picker lists for its filter (substring, case-insensitive).
    pub fn picker_matches(&self, filter: &str) -> Vec<usize> {
        let f = filter.to_lowercase();
        (0..self.functions.len()).filter(|&i| self.functions[i].name.to_lowercase().contains(&f)).collect()
    }

    pub(super) fn apply_picker(&mut self, action: Action) {
        let Overlay::Picker { filter, cursor } = &self.overlay else { return };
        let matches = self.picker_matches(filter);
        let cursor = *cursor;
        match action {
            Action::Close => self.overlay = Overlay::None,
            Action::Up | Action::Down => {
                let n = matches.len().max(1);
                let next = if action == Action::Down { (cursor + 1) % n } else { (cursor + n - 1) % n };
                if let Overlay::Picker { cursor, .. } = &mut self.overlay {
                    *cursor = next;
                }
            }
            Action::Enter => {
                if let Some(&i) = matches.get(cursor) {
                    let name = self.functions[i].name.clone();
                    self.overlay = Overlay::None;
                    self.select_kernel(&name);
                }
            }
            _ => {}
        }
    }

    pub(super) fn apply_edit(&mut self, action: Action) {
        let Overlay::Edit { row, input, .. } = &self.overlay else { return };
        let (row, input) = (*row, input.clone());
        match action {
            Action::Close => self.overlay = Overlay::None,
            Action::Enter => {
                let rows = self.schedule_rows();
                let Some(r) = rows.get(row) else {
                    self.overlay = Overlay::None;
                    return;
                };
                if r.is_dim {
                    // The override rule's value check, as the row shows it while typing.
                    match (crate::components::schedule::edit_problem(r, &input), input.trim().parse::<i64>()) {
                        (None, Ok(v)) => {
                            self.overlay = Overlay::None;
                            self.set_dim(&r.key.clone(), Some(v));
                        }
                        (problem, _) => {
                            if let Overlay::Edit { error, .. } = &mut self.overlay {
                                *error = problem.or_else(|| Some(format!("{} must be an integer", r.key)));
                            }
                        }
                    }
                } else {
                    // An invalid value is kept and shown with its E0701 message; the
                    // kernel keeps lowering with the last valid one.
                    self.overlay = Overlay::None;
                    self.set_key(&r.key.clone(), Some(parse_value(&input)));
                }
            }
            _ => {}
        }
    }
}
