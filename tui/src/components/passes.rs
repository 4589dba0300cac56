//! The passes tab's component: the pass list's and the diff's positions, and whether
//! passes that change nothing are hidden.

use tessera_passes::Target;

use super::Outcome;
use crate::kernel::{KernelView, PassList};
use crate::keymap::Action;
use crate::state::{Geometry, Message, Pane, Scroll};
use crate::workspace::Workspace;

#[derive(Clone, Debug, Default)]
pub struct PassesTab {
    pub list: Scroll,
    pub diff: Scroll,
    pub hide_unchanged: bool,
}

impl PassesTab {
    /// The passes the list shows (indices into the pipeline).
    pub fn visible(&self, passes: &PassList) -> Vec<usize> {
        passes.visible(self.hide_unchanged)
    }

    /// Rows of the list: the visible passes, and a failed pass's row last.
    pub fn rows(&self, passes: &PassList) -> usize {
        self.visible(passes).len() + passes.failure.is_some() as usize
    }

    /// Back to the top of both panes (another kernel).
    pub fn reset(&mut self) {
        self.list = Scroll::default();
        self.diff = Scroll::default();
    }

    /// An action with the focus on `focus` (the list or the diff).
    pub fn update(
        &mut self,
        action: Action,
        focus: Pane,
        view: &KernelView,
        ws: &Workspace,
        target: Target,
        geometry: &Geometry,
    ) -> Outcome {
        let passes = view.passes(ws, target);
        let visible = self.visible(passes);
        if action == Action::HideUnchanged {
            let current = visible.get(self.list.cursor).copied();
            self.hide_unchanged = !self.hide_unchanged;
            let now = self.visible(passes);
            self.list.cursor = current.and_then(|c| now.iter().position(|&i| i >= c)).unwrap_or(0);
            self.list.clamp(now.len(), geometry.height(Pane::PassList));
            self.diff = Scroll::default();
            let hidden = passes.passes.len() - now.len();
            return Outcome::Say(Message::info(if self.hide_unchanged {
                format!("hiding {hidden} pass(es) that change nothing")
            } else {
                "showing every pass".into()
            }));
        }
        if focus == Pane::PassList {
            let before = self.list.cursor;
            // A failed pass is the last row: selecting it shows why it failed.
            if self.list.nav(action, self.rows(passes), geometry.height(Pane::PassList)) {
                if self.list.cursor != before {
                    self.diff = Scroll::default();
                }
                return Outcome::Nothing;
            }
            if action == Action::Enter {
                return Outcome::Focus(Pane::PassDiff);
            }
        }
        let Some(&pass) = visible.get(self.list.cursor) else { return Outcome::Nothing };
        let Some(diff) = view.pass_diff(ws, target, pass) else { return Outcome::Nothing };
        let h = geometry.height(Pane::PassDiff);
        match action {
            Action::NextMatch | Action::PrevMatch => {
                match diff.next_hunk(self.diff.cursor, action == Action::NextMatch) {
                    Some(line) => self.diff.jump(line, diff.len(), h),
                    None => return Outcome::Say(Message::info("this pass changes nothing".into())),
                }
            }
            a if focus == Pane::PassDiff => {
                self.diff.nav(a, diff.len(), h);
            }
            _ => {}
        }
        Outcome::Nothing
    }
}
