//! The pieces every view draws with: bordered panes, rows, truncation, the compact
//! configuration text.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear};
use ratatui::Frame;

use crate::app::App;
use crate::state::Pane;
use crate::theme;

/// A bordered pane (focused when it is `pane` and has the focus) and its inner area.
pub(crate) fn pane_block<'a>(app: &App, pane: Option<Pane>, area: Rect, title: Line<'a>) -> (Block<'a>, Rect) {
    let focused = pane.is_some_and(|p| p == app.focus);
    let block = Block::bordered().border_style(theme::border(focused)).title(title.style(theme::title(focused)));
    let inner = block.inner(area);
    (block, inner)
}

/// Writes one row: `row_style` across the whole width, then the spans over it.
pub(crate) fn put_row(buf: &mut Buffer, area: Rect, row: u16, spans: Vec<Span<'_>>, row_style: Style) {
    if row >= area.height {
        return;
    }
    let y = area.y + row;
    buf.set_style(Rect::new(area.x, y, area.width, 1), row_style);
    buf.set_line(area.x, y, &Line::from(spans), area.width);
}

pub(crate) fn stage_title(stage: tessera_passes::Stage) -> &'static str {
    match stage {
        tessera_passes::Stage::Graph => "Graph",
        tessera_passes::Stage::Sched => "Schedule",
        tessera_passes::Stage::Tile => "Tile",
        tessera_passes::Stage::Target => "Target",
    }
}

/// `BM=64 BN=64 BK=32 w4 s2 xor D=64`: the keys a kernel engineer scans for, compactly.
pub(crate) fn short_config(config: &tessera_passes::Config) -> String {
    short_config_of(config, |_| true)
}

/// [`short_config`] of a kernel's configuration, with only the tile keys (`BM BN BK BD`)
/// its decorator writes or its body reads: an elementwise kernel's status bar does not
/// show the `BK=32 BD=64` it never uses.
pub(crate) fn kernel_config(info: &tessera_passes::session::Configured) -> String {
    let used = |k: &str| {
        info.written.iter().any(|w| w == k)
            || info.read.iter().any(|r| r == k)
            || info.space.iter().any(|s| tessera_frontend::check::schedule::canonical_key(&s.key) == k)
    };
    short_config_of(&info.config, used)
}

fn short_config_of(config: &tessera_passes::Config, show_tile_key: impl Fn(&str) -> bool) -> String {
    use tessera_frontend::check::KeyValue;
    let mut parts = Vec::new();
    for k in ["BM", "BN", "BK", "BD"] {
        if let Some(v) = config.schedule.int(k).filter(|_| show_tile_key(k)) {
            parts.push(format!("{k}={v}"));
        }
    }
    parts.push(format!("warps={}", config.schedule.warps()));
    parts.push(format!("stages={}", config.schedule.stages()));
    for (k, v) in &config.schedule.values {
        if ["BM", "BN", "BK", "BD", "warps", "stages", "vector"].contains(&k.as_str()) {
            continue;
        }
        match v {
            KeyValue::Str(s) if k == "swizzle" => {
                if s != "none" {
                    parts.push(format!("swizzle={s}"));
                }
            }
            // The instruction family: shown when it is not the default `mma.sync`.
            KeyValue::Str(s) if k == "mma" => {
                if s != "mma.sync" {
                    parts.push(s.clone());
                }
            }
            // The copy engine: shown when it is not the default `cp.async`.
            KeyValue::Str(s) if k == "copy" => {
                if s != "cp.async" {
                    parts.push(s.clone());
                }
            }
            // A producer warpgroup: shown when there is one.
            KeyValue::Str(s) if k == "producer" => {
                if s != "none" {
                    parts.push(format!("producer={s}"));
                }
            }
            // The cluster: shown once, as `cluster=2x1`, when there is one.
            _ if k == "cluster_x" || k == "cluster_y" => {
                let [x, y] = config.schedule.cluster();
                if k == "cluster_x" && x * y > 1 {
                    parts.push(format!("cluster={x}x{y}"));
                }
            }
            v => parts.push(format!("{k}={}", v.to_string().trim_matches('"'))),
        }
    }
    for (k, v) in &config.shapes {
        parts.push(format!("{k}={v}"));
    }
    parts.join(" ")
}

pub(crate) fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

pub(crate) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width.saturating_sub(2));
    let h = height.min(area.height.saturating_sub(2));
    Rect::new(area.x + (area.width - w) / 2, area.y + (area.height - h) / 2, w, h)
}

/// A bordered popup of `width` x `height` centred in `area`, drawn over what is there,
/// with its title and the keys it takes along the bottom. Returns its inner area.
pub(crate) fn popup(f: &mut Frame, area: Rect, width: u16, height: u16, title: Line<'_>, keys: &str) -> Rect {
    let rect = centered(area, width, height);
    let block = Block::bordered()
        .border_style(theme::border(true))
        .title(title.style(theme::title(true)))
        .title_bottom(Line::from(keys.to_string()).style(theme::dim()));
    let inner = block.inner(rect);
    f.render_widget(Clear, rect);
    f.render_widget(block, rect);
    inner
}

/// The inner area of a bordered pane drawn over `area` (what the layout records).
pub(crate) fn inner(area: Rect) -> Rect {
    Block::bordered().inner(area)
}
