//! The schedule tab's edits: stepping, typing and resetting values, each validated and
//! re-lowered with the IR cursor kept on the same op.

use tessera_frontend::check::schedule::canonical_key;
use tessera_frontend::check::KeyValue;
use tessera_passes::DEFAULT_SHAPE;

use super::App;
use crate::components::schedule::{parse_value, show_value, step_value};
use crate::keymap::Action;
use crate::state::{ms, Overlay, Pane};
use crate::workspace::Overrides;

impl App {
    pub(super) fn schedule_action(&mut self, action: Action) {
        let rows = self.schedule_rows();
        let h = self.geometry.height(Pane::Schedule);
        if self.sched.nav(action, rows.len(), h) {
            return;
        }
        let Some(row) = rows.get(self.sched.cursor).cloned() else { return };
        match action {
            Action::ValueNext | Action::ValuePrev => {
                let forward = action == Action::ValueNext;
                if row.is_dim {
                    let v: i64 = row.value.parse().unwrap_or(DEFAULT_SHAPE);
                    let next = if forward { v.saturating_mul(2) } else { (v / 2).max(1) };
                    self.set_dim(&row.key, Some(next));
                } else {
                    let current = parse_value(row.typed.as_deref().unwrap_or(&row.value));
                    match step_value(&current, &row.candidates, forward) {
                        Some(v) => self.set_key(&row.key, Some(v)),
                        None => {
                            self.info(format!("{} has no {} value", row.key, if forward { "next" } else { "previous" }))
                        }
                    }
                }
            }
            Action::Edit => {
                let input = row.typed.clone().unwrap_or(row.value.clone());
                self.overlay = Overlay::Edit { row: self.sched.cursor, input, error: None };
            }
            Action::ResetValue => {
                if row.is_dim {
                    self.set_dim(&row.key, None);
                } else {
                    self.set_key(&row.key, None);
                }
            }
            Action::ResetAll => {
                self.overrides = Overrides::default();
                self.rejected_edits.clear();
                self.relower_keeping_place();
                self.info("every override cleared".into());
            }
            _ => {}
        }
    }

    pub(super) fn set_key(&mut self, key: &str, value: Option<KeyValue>) {
        let key = canonical_key(key).to_string();
        match value {
            // The session's override rule: the one `tessera lower --schedule` and the
            // server's lowering request apply.
            Some(v) => match self.ws.schedule_rejection(&self.view.name, &key, &v) {
                Some(problem) => {
                    let current = match &self.view.config {
                        Ok(info) => info.config.schedule.get(&key).map(show_value).unwrap_or_else(|| "—".into()),
                        Err(_) => "—".into(),
                    };
                    self.rejected_edits.insert(key.clone(), (v, problem.clone()));
                    self.error(format!("E0701: {problem} (still lowering with {key}={current})"));
                }
                None => {
                    self.rejected_edits.remove(&key);
                    self.overrides.schedule.insert(key.clone(), v.clone());
                    self.relower_keeping_place();
                    self.info(format!("{key} = {} · re-lowered in {}", show_value(&v), ms(self.view.relower)));
                }
            },
            None => {
                self.rejected_edits.remove(&key);
                self.overrides.schedule.remove(&key);
                self.relower_keeping_place();
                self.info(format!("{key} back to the kernel's value"));
            }
        }
    }

    pub(super) fn set_dim(&mut self, key: &str, value: Option<i64>) {
        match value {
            Some(v) => {
                self.overrides.dims.insert(key.to_string(), v);
            }
            None => {
                self.overrides.dims.remove(key);
            }
        }
        self.relower_keeping_place();
        self.info(format!(
            "{key} = {} · re-lowered in {}",
            self.run_dims().get(key).copied().unwrap_or(DEFAULT_SHAPE),
            ms(self.view.relower)
        ));
    }
}
