//! Every colour of the explorer in one place. Named ANSI colours follow the user's terminal
//! theme; the few backgrounds use the 256-colour cube's greys and blues, which every
//! terminal kernel engineers use (tmux, kitty, iTerm2, Windows Terminal) renders.

use ratatui::style::{Color, Modifier, Style};
use tessera_frontend::ide::{HlMods, HlTag};

pub const CURSOR_BG: Color = Color::Indexed(237);
/// Lines linked to the other pane's cursor (the source behind an op, the ops of a line).
pub const LINKED_BG: Color = Color::Indexed(17);
/// The exact source range of the selected op, inside its linked lines.
pub const EXACT_BG: Color = Color::Indexed(25);
pub const INSERT_BG: Color = Color::Indexed(22);
pub const DELETE_BG: Color = Color::Indexed(52);

pub fn border(focused: bool) -> Style {
    if focused {
        Style::new().fg(Color::Cyan)
    } else {
        Style::new().fg(Color::DarkGray)
    }
}

pub fn title(focused: bool) -> Style {
    if focused {
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::Gray)
    }
}

pub fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn key() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

pub fn error() -> Style {
    Style::new().fg(Color::LightRed)
}

pub fn warning() -> Style {
    Style::new().fg(Color::Yellow)
}

pub fn ok() -> Style {
    Style::new().fg(Color::Green)
}

pub fn selected_tab() -> Style {
    Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD)
}

pub fn status_bar() -> Style {
    Style::new().fg(Color::White).bg(Color::Indexed(236))
}

pub fn line_number(mapped: bool) -> Style {
    if mapped {
        Style::new().fg(Color::Gray)
    } else {
        Style::new().fg(Color::DarkGray)
    }
}

/// The class of an IR token (the highlighter in [`crate::highlight`] classifies).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Class {
    Plain,
    /// Compute ops: `tile.dot`, `arith.add`, `mma.sync...`.
    Op,
    /// Structure: `scf.for`, `grid.parallel`, `func.func`, `bra`, `ret`.
    ControlOp,
    /// Data movement: loads, stores, async copies, barriers.
    MemoryOp,
    Value,
    Symbol,
    Type,
    Layout,
    Number,
    String,
    AttrKey,
    Keyword,
    Loc,
    Comment,
    Directive,
    Label,
}

pub fn ir(class: Class) -> Style {
    let s = Style::new();
    match class {
        Class::Plain => s,
        Class::Op => s.fg(Color::LightBlue).add_modifier(Modifier::BOLD),
        Class::ControlOp => s.fg(Color::Magenta).add_modifier(Modifier::BOLD),
        Class::MemoryOp => s.fg(Color::LightCyan).add_modifier(Modifier::BOLD),
        Class::Value => s.fg(Color::Yellow),
        Class::Symbol => s.fg(Color::LightMagenta).add_modifier(Modifier::BOLD),
        Class::Type => s.fg(Color::Green),
        Class::Layout => s.fg(Color::LightGreen).add_modifier(Modifier::ITALIC),
        Class::Number => s.fg(Color::LightRed),
        Class::String => s.fg(Color::LightYellow),
        Class::AttrKey => s.fg(Color::Cyan),
        Class::Keyword => s.fg(Color::Magenta),
        Class::Loc => s.fg(Color::DarkGray),
        Class::Comment => s.fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
        Class::Directive => s.fg(Color::Magenta),
        Class::Label => s.fg(Color::LightMagenta),
    }
}

pub fn source(tag: HlTag, mods: HlMods) -> Style {
    let s = Style::new();
    let s = match tag {
        HlTag::Keyword => s.fg(Color::Magenta).add_modifier(Modifier::BOLD),
        HlTag::Function | HlTag::Method => s.fg(Color::LightBlue),
        HlTag::Parameter => s.fg(Color::Yellow),
        HlTag::Variable => s,
        HlTag::Namespace => s.fg(Color::Cyan),
        HlTag::Type => s.fg(Color::Green),
        HlTag::TypeParameter => s.fg(Color::LightGreen).add_modifier(Modifier::ITALIC),
        HlTag::Property => s.fg(Color::Cyan),
        HlTag::Decorator => s.fg(Color::LightMagenta),
        HlTag::Number => s.fg(Color::LightRed),
        HlTag::String => s.fg(Color::LightYellow),
        HlTag::Comment => s.fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
    };
    if mods.has(HlMods::DECLARATION) {
        s.add_modifier(Modifier::BOLD)
    } else {
        s
    }
}

pub fn diff_insert() -> Style {
    Style::new().fg(Color::LightGreen).bg(INSERT_BG)
}

pub fn diff_delete() -> Style {
    Style::new().fg(Color::LightRed).bg(DELETE_BG)
}

/// Register pressure relative to the per-thread limit: green, yellow above 3/4, red over.
pub fn pressure(live: u32, limit: u32) -> Style {
    let limit = limit.max(1);
    if live > limit {
        Style::new().fg(Color::LightRed)
    } else if live * 4 > limit * 3 {
        Style::new().fg(Color::Yellow)
    } else {
        Style::new().fg(Color::Green)
    }
}
