//! The explore tab: the source on the left, the current stage's IR on the right, each
//! cursor highlighting what it maps to in the other.

use std::ops::Range;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::Frame;
use tessera_frontend::diagnostics::Severity;
use tessera_passes::Stage;

use super::widgets::{pane_block, put_row, stage_title};
use crate::app::App;
use crate::diff::Tag;
use crate::highlight::{clip, ir_parts};
use crate::pipeline::RegisterGutter;
use crate::state::Pane;
use crate::theme;
use crate::workspace::{stage_index, StageError};

/// The source pane's area and the IR pane's.
pub(super) fn areas(area: Rect) -> [Rect; 2] {
    Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(area)
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let [left, right] = areas(area);
    draw_source_pane(f, left, app, Some(Pane::Source));
    draw_ir_pane(f, right, app, Pane::Ir);
}

/// Restyles the bytes of `range` inside the pieces of a line.
pub(crate) fn overlay(
    parts: Vec<(Range<usize>, Style)>,
    range: Range<usize>,
    style: Style,
) -> Vec<(Range<usize>, Style)> {
    if range.is_empty() {
        return parts;
    }
    let mut out = Vec::with_capacity(parts.len() + 2);
    for (r, s) in parts {
        let cut_a = range.start.clamp(r.start, r.end);
        let cut_b = range.end.clamp(r.start, r.end);
        if r.start < cut_a {
            out.push((r.start..cut_a, s));
        }
        if cut_a < cut_b {
            out.push((cut_a..cut_b, s.patch(style)));
        }
        if cut_b < r.end {
            out.push((cut_b..r.end, s));
        }
    }
    out
}

fn digits(n: usize) -> usize {
    n.max(1).ilog10() as usize + 1
}

/// The source with line numbers, lint markers, the register gutter (when the analysis
/// exists) and the lines behind the selected op highlighted.
pub fn draw_source_pane(f: &mut Frame, area: Rect, app: &App, pane: Option<Pane>) {
    draw_source_pane_from(f, area, app, pane, app.src.top);
}

/// The source pane with its first row at line `top` (0-based): the Lints tab's preview
/// scrolls to the selected diagnostic without moving the Explore tab's cursor.
pub fn draw_source_pane_from(f: &mut Frame, area: Rect, app: &App, pane: Option<Pane>, top: usize) {
    let file = app.ws.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let title = vec![Span::raw(" Source "), Span::styled(format!("{file} "), theme::dim())];
    let (block, inner) = pane_block(app, pane, area, Line::from(title));
    let block = match app.view.shown_registers() {
        Some(Ok(g)) => block.title_bottom(
            Line::from(Span::styled(g.title(area.width), theme::pressure(g.peak, g.limit))).right_aligned(),
        ),
        _ => block,
    };
    f.render_widget(block, area);
    let index = app.ws.line_index().clone();
    let text = app.ws.text();
    let len = index.line_count();
    let height = inner.height as usize;
    let linked = app.linked_source();
    let linked_lines = linked.map(|r| (index.line_of(r.start), index.line_of(r.end.saturating_sub(1).max(r.start))));
    let mapped = app.view.doc(app.stage).map(|d| d.mapped_source_lines(&index)).unwrap_or_default();
    let mut marks = vec![None::<Severity>; len];
    if let Ok(diags) = &app.diagnostics {
        for d in diags {
            if let Some(m) = marks.get_mut(index.line_of(d.range.start) as usize) {
                if m.is_none() || d.severity == Severity::Error {
                    *m = Some(d.severity);
                }
            }
        }
    }
    let gutter = match app.view.shown_registers() {
        Some(Ok(g)) => Some((g, RegisterGutter::width(inner.width))),
        _ => None,
    };
    let num_w = digits(len);
    let focused = app.focus == Pane::Source && pane.is_some();
    let buf = f.buffer_mut();
    for row in 0..height {
        let line = top + row;
        if line >= len {
            break;
        }
        let lr = index.line_range(text, line as u32);
        let line_text = lr.slice(text);
        let mut spans = Vec::new();
        spans.push(match marks[line] {
            Some(Severity::Error) => Span::styled("●", theme::error()),
            Some(_) => Span::styled("●", theme::warning()),
            None => Span::raw(" "),
        });
        let is_mapped = mapped.get(line).copied().unwrap_or(false);
        spans.push(Span::styled(format!("{:>num_w$} ", line + 1), theme::line_number(is_mapped)));
        if let Some((g, w)) = gutter {
            let (cell, style) = g.cell(line as u32, w);
            spans.push(Span::styled(cell, style));
            spans.push(Span::raw(" "));
        }
        let used: usize = spans.iter().map(Span::width).sum();
        let width = (inner.width as usize).saturating_sub(used);
        let mut parts = app.source_hl.parts(line, line_text, Style::new());
        let in_link = linked_lines.is_some_and(|(a, b)| a as usize <= line && line <= b as usize);
        if let (true, Some(r)) = (in_link, linked) {
            let s = r.start.max(lr.start).saturating_sub(lr.start) as usize;
            let e = r.end.min(lr.end).saturating_sub(lr.start) as usize;
            parts = overlay(parts, s..e.max(s), Style::new().bg(theme::EXACT_BG).add_modifier(Modifier::BOLD));
        }
        spans.extend(clip(line_text, &parts, app.src.left, width));
        let row_style = if focused && line == app.src.cursor {
            Style::new().bg(theme::CURSOR_BG)
        } else if in_link {
            Style::new().bg(theme::LINKED_BG)
        } else {
            Style::new()
        };
        put_row(buf, inner, row as u16, spans, row_style);
    }
}

/// The stage strip of the IR pane's title: every stage, the current one marked, failed
/// ones crossed; with each label's cells (the layout records them for mouse clicks).
pub(super) fn stage_strip(app: &App, area: Rect) -> (Line<'static>, Vec<(Stage, Rect)>) {
    let mut spans = vec![Span::raw(" ")];
    let mut rects = Vec::new();
    let mut x = area.x + 2;
    for stage in Stage::ALL {
        let failed = matches!(app.view.stage(stage), Some(Err(_)) | None);
        let label = if failed { format!(" {} ✗ ", stage_title(stage)) } else { format!(" {} ", stage_title(stage)) };
        let style = if stage == app.stage {
            theme::selected_tab()
        } else if failed {
            theme::error()
        } else {
            Style::new()
        };
        let w = label.chars().count() as u16;
        rects.push((stage, Rect::new(x, area.y, w, 1)));
        x += w + 1;
        spans.push(Span::styled(label, style));
        spans.push(Span::raw(if stage == Stage::Target { " " } else { "→" }));
    }
    (Line::from(spans), rects)
}

pub fn draw_ir_pane(f: &mut Frame, area: Rect, app: &App, pane: Pane) {
    let (strip, _) = stage_strip(app, area);
    let (block, inner) = pane_block(app, Some(pane), area, strip);
    let info = ir_info(app);
    let block = block.title_bottom(Line::from(info).right_aligned().style(theme::dim()));
    f.render_widget(block, area);
    let stage = app.stage;
    let outcome = app.view.stage(stage).cloned();
    let doc = match outcome {
        None => {
            let e = match &app.view.config {
                Err(e) => e.clone(),
                Ok(_) => StageError { message: "not lowered".into(), range: None },
            };
            return draw_stage_error(f, inner, app, "no configuration", &e);
        }
        Some(Err(e)) => return draw_stage_error(f, inner, app, &format!("{} IR", stage_title(stage)), &e),
        Some(Ok(doc)) => doc,
    };
    let height = inner.height as usize;
    let len = app.ir_len();
    let focused = app.focus == pane;
    let source_leads = app.focus == Pane::Source;
    let diff = if app.diff_mode { app.view.shown_stage_diff(stage) } else { None };
    let num_w = digits(diff.as_ref().map_or(len, |_| doc.len()));
    let width = (inner.width as usize).saturating_sub(num_w + 1);
    let show_loc = app.show_loc;
    let buf = f.buffer_mut();
    for row in 0..height {
        let i = app.ir.top + row;
        if i >= len {
            break;
        }
        let (line_doc, line, sign) = match &diff {
            Some(d) => {
                let Some((doc, line)) = d.doc_line(i) else { continue };
                let tag = d.lines[i].tag;
                (doc, line, Some(tag))
            }
            None => (&*doc, i, None),
        };
        let text = if show_loc { line_doc.line(line) } else { line_doc.code(line) };
        let base = match sign {
            Some(Tag::Insert) => theme::diff_insert(),
            Some(Tag::Delete) => theme::diff_delete(),
            _ => Style::new(),
        };
        let parts = ir_parts(text, line_doc.dialect, base);
        // Line numbers are those of the stage shown (deleted lines have none in it).
        let mapped = theme::line_number(line_doc.source(line).is_some());
        let mut spans = match sign {
            Some(Tag::Insert) => {
                vec![Span::styled(format!("{:>num_w$}", line + 1), mapped), Span::styled("+", theme::diff_insert())]
            }
            Some(Tag::Delete) => vec![Span::raw(" ".repeat(num_w)), Span::styled("-", theme::diff_delete())],
            Some(Tag::Equal) => vec![Span::styled(format!("{:>num_w$} ", line + 1), mapped)],
            None => vec![Span::styled(format!("{:>num_w$} ", i + 1), mapped)],
        };
        spans.extend(clip(text, &parts, app.ir.left, width));
        let row_style = if focused && i == app.ir.cursor {
            Style::new().bg(theme::CURSOR_BG)
        } else if source_leads && app.linked_ir.binary_search(&i).is_ok() {
            Style::new().bg(theme::LINKED_BG)
        } else {
            Style::new()
        };
        put_row(buf, inner, row as u16, spans, row_style);
    }
}

/// The right-hand title of the IR pane: size, diff counts, loc state.
fn ir_info(app: &App) -> String {
    let stage = app.stage;
    let mut parts = Vec::new();
    if app.diff_mode {
        match app.view.shown_stage_diff(stage) {
            Some(d) => {
                let prev = Stage::ALL[stage_index(stage).saturating_sub(1)];
                parts.push(format!("diff vs {}: +{} −{}", stage_title(prev), d.inserted, d.deleted));
            }
            None if stage == Stage::Graph => parts.push("diff: Graph is the first stage".into()),
            None => parts.push("diff: previous stage failed".into()),
        }
    }
    if let Some(doc) = app.view.doc(stage) {
        parts.push(format!("{} lines", doc.len()));
    }
    if let Some(l) = &app.view.lowering {
        parts.push(crate::state::ms(l.times[stage_index(stage)]));
    }
    format!(" {} ", parts.join(" · "))
}

fn draw_stage_error(f: &mut Frame, inner: Rect, app: &App, what: &str, e: &StageError) {
    let mut lines = vec![
        Line::from(vec![Span::styled(format!(" ✗ {what}: "), theme::error().add_modifier(Modifier::BOLD))]),
        Line::from(Span::styled(format!("   {}", e.message), theme::error())),
    ];
    if let Some(r) = e.range {
        let lc = app.ws.line_index().line_col(app.ws.text(), r.start);
        lines.push(Line::from(Span::styled(
            format!("   at {}:{}:{}", app.ws.path().display(), lc.line + 1, lc.col + 1),
            theme::dim(),
        )));
    }
    lines.push(Line::raw(""));
    let ok: Vec<&str> =
        Stage::ALL.iter().filter(|s| matches!(app.view.stage(**s), Some(Ok(_)))).map(|s| stage_title(*s)).collect();
    if !ok.is_empty() {
        lines.push(Line::from(Span::styled(format!("   {} IR lowered: [ steps back.", ok.join(", ")), theme::dim())));
    }
    if let Some(kind) = app.view.kind {
        if kind != tessera_frontend::check::FunctionKind::Kernel {
            lines.push(Line::from(Span::styled("   p picks another function.".to_string(), theme::dim())));
        }
    }
    let p = ratatui::widgets::Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false });
    f.render_widget(p, inner);
}
