//! The passes tab's component: the pass list's and the diff's positions, and whether
//! passes that change nothing are hidden.

use crate::kernel::PassList;
use crate::state::Scroll;

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
}
