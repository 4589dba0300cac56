//! The passes tab: every pass of the pipeline, and the diff of the IR it produced
//! against the IR before it.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::Frame;

use super::widgets::{pane_block, put_row, truncate};
use crate::app::App;
use crate::diff::Tag;
use crate::highlight::{clip, ir_parts};
use crate::state::Pane;
use crate::theme;

/// The pass list's area and the diff's.
pub(super) fn areas(area: Rect) -> [Rect; 2] {
    let list_w = if area.width >= 120 { 36 } else { 28 };
    Layout::horizontal([Constraint::Length(list_w), Constraint::Min(20)]).areas(area)
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let [left, right] = areas(area);
    draw_list(f, left, app);
    draw_diff(f, right, app);
}

fn draw_list(f: &mut Frame, area: Rect, app: &App) {
    let visible = app.passes_tab.visible(app.view.shown_passes());
    let total = app.view.shown_passes().passes.len();
    let title = Line::from(vec![
        Span::raw(" Passes "),
        Span::styled(
            if app.passes_tab.hide_unchanged {
                format!("{}/{total} changed ", visible.len())
            } else {
                format!("{total} ")
            },
            theme::dim(),
        ),
    ]);
    let (block, inner) = pane_block(app, Some(Pane::PassList), area, title);
    let block = block.title_bottom(
        Line::from(vec![
            Span::styled(" H ", theme::key()),
            Span::styled(if app.passes_tab.hide_unchanged { "show all " } else { "hide unchanged " }, theme::dim()),
        ])
        .right_aligned(),
    );
    f.render_widget(block, area);
    let focused = app.focus == Pane::PassList;
    let width = inner.width as usize;
    let mut row = 0u16;
    for (pos, &i) in visible.iter().enumerate().skip(app.passes_tab.list.top) {
        if row >= inner.height {
            break;
        }
        let p = &app.view.shown_passes().passes[i];
        let stats = app.view.shown_pass_diff(i).map(|d| format!("+{} −{}", d.inserted, d.deleted)).unwrap_or_default();
        let marker = if p.changed { Span::styled("● ", theme::ok()) } else { Span::styled("○ ", theme::dim()) };
        let name_w = width.saturating_sub(3 + stats.chars().count() + 1);
        let spans = vec![
            marker,
            Span::styled(format!("{:<name_w$}", truncate(&p.pass, name_w)), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(" "),
            Span::styled(stats, theme::dim()),
        ];
        let style = if pos == app.passes_tab.list.cursor {
            Style::new().bg(if focused { theme::CURSOR_BG } else { theme::LINKED_BG })
        } else {
            Style::new()
        };
        put_row(f.buffer_mut(), inner, row, spans, style);
        row += 1;
    }
    if let Some((pass, _)) = &app.view.shown_passes().failure {
        if row < inner.height && visible.len() >= app.passes_tab.list.top {
            let style = if app.passes_tab.list.cursor == visible.len() {
                Style::new().bg(if focused { theme::CURSOR_BG } else { theme::LINKED_BG })
            } else {
                Style::new()
            };
            let spans =
                vec![Span::styled("✗ ", theme::error()), Span::styled(format!("{pass} failed"), theme::error())];
            put_row(f.buffer_mut(), inner, row, spans, style);
        }
    }
    if total == 0 && app.view.shown_passes().failure.is_none() {
        put_row(f.buffer_mut(), inner, 0, vec![Span::styled("no passes ran", theme::dim())], Style::new());
    }
}

fn draw_diff(f: &mut Frame, area: Rect, app: &App) {
    let visible = app.passes_tab.visible(app.view.shown_passes());
    let selected = visible.get(app.passes_tab.list.cursor).copied();
    let diff = selected.and_then(|i| app.view.shown_pass_diff(i));
    let title = match (selected, &diff) {
        (Some(i), Some(d)) => {
            let p = &app.view.shown_passes().passes[i];
            let before = match i.checked_sub(1).and_then(|b| app.view.shown_passes().passes.get(b)) {
                Some(b) => format!("after {}", b.pass),
                None => "from the source".to_string(),
            };
            Line::from(vec![
                Span::raw(format!(" {} ", p.pass)),
                Span::styled(format!("{before}: "), theme::dim()),
                Span::styled(format!("+{}", d.inserted), theme::ok()),
                Span::raw(" "),
                Span::styled(format!("−{} ", d.deleted), theme::error()),
            ])
        }
        _ => Line::raw(" Diff "),
    };
    let (block, inner) = pane_block(app, Some(Pane::PassDiff), area, title);
    f.render_widget(block, area);
    let Some(diff) = diff else {
        let (text, style) = match &app.view.shown_passes().failure {
            Some((pass, e)) if selected.is_none() => {
                let at = e.range.map(|r| {
                    let lc = app.ws.line_index().line_col(app.ws.text(), r.start);
                    format!(" (at {}:{})", lc.line + 1, lc.col + 1)
                });
                (format!("✗ {pass} failed: {}{}", e.message, at.unwrap_or_default()), theme::error())
            }
            _ if app.passes_tab.hide_unchanged && !app.view.shown_passes().passes.is_empty() => {
                ("every pass is hidden: none changed the IR (H shows them)".into(), theme::dim())
            }
            _ => ("nothing to show".into(), theme::dim()),
        };
        let p = ratatui::widgets::Paragraph::new(Line::from(Span::styled(text, style)))
            .wrap(ratatui::widgets::Wrap { trim: false });
        f.render_widget(p, inner);
        return;
    };
    if !diff.changed() {
        put_row(f.buffer_mut(), inner, 0, vec![Span::styled("this pass changes nothing", theme::dim())], Style::new());
        return;
    }
    let height = inner.height as usize;
    let focused = app.focus == Pane::PassDiff;
    let width = (inner.width as usize).saturating_sub(2);
    let show_loc = app.show_loc;
    let buf = f.buffer_mut();
    for row in 0..height {
        let i = app.passes_tab.diff.top + row;
        let Some((doc, line)) = diff.doc_line(i) else { break };
        let tag = diff.lines[i].tag;
        let text = if show_loc { doc.line(line) } else { doc.code(line) };
        let (sign, base) = match tag {
            Tag::Insert => ("+ ", theme::diff_insert()),
            Tag::Delete => ("- ", theme::diff_delete()),
            Tag::Equal => ("  ", Style::new()),
        };
        let mut spans = vec![Span::styled(sign, base)];
        spans.extend(clip(text, &ir_parts(text, doc.dialect, base), app.passes_tab.diff.left, width));
        let style = if focused && i == app.passes_tab.diff.cursor {
            Style::new().bg(theme::CURSOR_BG)
        } else {
            match tag {
                Tag::Insert => Style::new().bg(theme::INSERT_BG),
                Tag::Delete => Style::new().bg(theme::DELETE_BG),
                Tag::Equal => Style::new(),
            }
        };
        put_row(buf, inner, row as u16, spans, style);
    }
}
