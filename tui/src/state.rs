//! The explorer's state types, at the bottom of the crate's layers: tabs and panes, cursor
//! positions, the last layout, overlays and messages. They hold data and small
//! transitions of their own; the tabs' components and the app build on them, and the
//! views read them.

use std::time::Duration;

use ratatui::layout::Rect;
use tessera_passes::Stage;

use crate::keymap::{Action, Context};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Tab {
    Explore,
    Passes,
    Lints,
    Schedule,
    Run,
    Mesh,
}

impl Tab {
    pub const ALL: [Tab; 6] = [Tab::Explore, Tab::Passes, Tab::Lints, Tab::Schedule, Tab::Run, Tab::Mesh];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Explore => "Explore",
            Tab::Passes => "Passes",
            Tab::Lints => "Lints",
            Tab::Schedule => "Schedule",
            Tab::Run => "Run",
            Tab::Mesh => "Mesh",
        }
    }

    /// The panes of the tab, in focus order.
    pub fn panes(self) -> &'static [Pane] {
        match self {
            Tab::Explore => &[Pane::Source, Pane::Ir],
            Tab::Passes => &[Pane::PassList, Pane::PassDiff],
            Tab::Lints => &[Pane::Lints],
            Tab::Schedule => &[Pane::Schedule, Pane::Ir],
            Tab::Run => &[Pane::Results],
            Tab::Mesh => &[Pane::Mesh],
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Pane {
    Source,
    Ir,
    PassList,
    PassDiff,
    Lints,
    Schedule,
    Results,
    Mesh,
}

impl Pane {
    pub fn context(self) -> Context {
        match self {
            Pane::Source => Context::Source,
            Pane::Ir => Context::Ir,
            Pane::PassList | Pane::PassDiff => Context::Passes,
            Pane::Lints => Context::Lints,
            Pane::Schedule => Context::Schedule,
            Pane::Results => Context::Run,
            Pane::Mesh => Context::Nav,
        }
    }
}

/// Cursor and scroll position of a list or text pane.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Scroll {
    pub cursor: usize,
    pub top: usize,
    pub left: usize,
}

impl Scroll {
    /// Keeps the cursor inside `len` lines and visible in `height` rows.
    pub fn clamp(&mut self, len: usize, height: usize) {
        self.cursor = self.cursor.min(len.saturating_sub(1));
        let height = height.max(1);
        if self.cursor < self.top {
            self.top = self.cursor;
        } else if self.cursor >= self.top + height {
            self.top = self.cursor + 1 - height;
        }
        self.top = self.top.min(len.saturating_sub(height));
    }

    /// Moves the cursor to `line` and puts it a third of the way down the pane when it
    /// was off screen (so the context above a jump target shows).
    pub fn jump(&mut self, line: usize, len: usize, height: usize) {
        let height = height.max(1);
        self.cursor = line.min(len.saturating_sub(1));
        if self.cursor < self.top || self.cursor >= self.top + height {
            self.top = self.cursor.saturating_sub(height / 3);
        }
        self.clamp(len, height);
    }

    /// Common list movement; returns false for actions that are not movement.
    pub fn nav(&mut self, action: Action, len: usize, height: usize) -> bool {
        let half = (height / 2).max(1);
        match action {
            Action::Down => self.cursor = (self.cursor + 1).min(len.saturating_sub(1)),
            Action::Up => self.cursor = self.cursor.saturating_sub(1),
            Action::PageDown => self.cursor = (self.cursor + half).min(len.saturating_sub(1)),
            Action::PageUp => self.cursor = self.cursor.saturating_sub(half),
            Action::Top => self.cursor = 0,
            Action::Bottom => self.cursor = len.saturating_sub(1),
            Action::Left => self.left = self.left.saturating_sub(8),
            Action::Right => self.left += 8,
            _ => return false,
        }
        self.clamp(len, height);
        true
    }
}

/// Where each pane was drawn last: mouse clicks and page sizes use it.
#[derive(Clone, Debug, Default)]
pub struct Geometry {
    pub panes: Vec<(Pane, Rect)>,
    pub tabs: Vec<(Tab, Rect)>,
    pub stages: Vec<(Stage, Rect)>,
    /// The lints tab's source preview (it shows the source's lines but takes no focus).
    pub source_preview: Option<Rect>,
}

impl Geometry {
    pub fn rect(&self, pane: Pane) -> Option<Rect> {
        self.panes.iter().find(|(p, _)| *p == pane).map(|(_, r)| *r)
    }

    /// Rows of text a pane shows (its inner height).
    pub fn height(&self, pane: Pane) -> usize {
        self.rect(pane).map_or(20, |r| r.height as usize)
    }
}

#[derive(Clone, Debug)]
pub enum Overlay {
    None,
    Help { scroll: usize },
    Picker { filter: String, cursor: usize },
    Edit { row: usize, input: String, error: Option<String> },
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Level {
    Info,
    Warning,
    Error,
}

#[derive(Clone, Debug)]
pub struct Message {
    pub level: Level,
    pub text: String,
}

impl Message {
    pub fn info(text: String) -> Message {
        Message { level: Level::Info, text }
    }

    pub fn warn(text: String) -> Message {
        Message { level: Level::Warning, text }
    }

    pub fn error(text: String) -> Message {
        Message { level: Level::Error, text }
    }
}

pub fn ms(d: Duration) -> String {
    fmt_ms(d.as_secs_f64() * 1e3)
}

/// A duration in 7 columns (`0.59 ms`, `12.3 ms`, ` 123 ms`, `1.234 s`), so that
/// tables and titles keep their layout as numbers change.
pub fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "      —".to_string()
    } else if ms < 9.995 {
        // Thresholds sit where rounding would add a digit (9.996 prints as 10.00).
        format!("{ms:.2} ms")
    } else if ms < 99.95 {
        format!("{ms:.1} ms")
    } else if ms < 999.5 {
        format!("{ms:>4.0} ms")
    } else if ms < 9_999.5 {
        format!("{:.3} s", ms / 1e3)
    } else if ms < 99_995.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{:>5.0} s", ms / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seven_columns() {
        for ms in [0.0, 0.591, 9.996, 12.34, 99.96, 123.0, 999.7, 1234.0, 9_999.7, 12_345.0, 99_996.0, 123_456.0] {
            assert_eq!(fmt_ms(ms).chars().count(), 7, "{ms} -> {:?}", fmt_ms(ms));
        }
    }

    #[test]
    fn scroll_keeps_the_cursor_visible() {
        let mut s = Scroll::default();
        s.jump(50, 100, 10);
        assert!(s.top <= 50 && 50 < s.top + 10);
        assert_eq!(s.top, 47);
        s.cursor = 99;
        s.clamp(100, 10);
        assert_eq!(s.top, 90);
        s.clamp(5, 10);
        assert_eq!((s.cursor, s.top), (4, 0));
    }
}
