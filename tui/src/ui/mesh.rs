//! The Mesh tab: a sharded graph function's mesh, parameter layouts (global and
//! per-device shapes) and collectives with their bytes and estimated time.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::Frame;

use super::widgets::{pane_block, put_row, truncate};
use crate::app::{App, MeshLine};
use crate::state::Pane;
use crate::theme;

pub(super) fn draw(f: &mut Frame, area: Rect, app: &App) {
    let lines = app.mesh_lines();
    let (block, inner) = pane_block(app, Some(Pane::Mesh), area, Line::from(" Mesh "));
    f.render_widget(block, area);
    let width = inner.width as usize;
    let rows = inner.height as usize;
    for (row, (kind, text)) in lines.iter().skip(app.mesh.top).take(rows).enumerate() {
        let style = match kind {
            MeshLine::Header => theme::title(false),
            MeshLine::Row => Style::new(),
            MeshLine::Note => theme::dim(),
            MeshLine::Error => theme::error(),
        };
        put_row(f.buffer_mut(), inner, row as u16, vec![Span::styled(truncate(text, width), style)], Style::new());
    }
}
