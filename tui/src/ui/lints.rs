//! The lints tab: every diagnostic of the file for the target (`tessera check`'s list,
//! target lints included), the selected one in full with its source.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use tessera_frontend::diagnostics::{Diagnostic, Severity};

use super::explore::draw_source_pane_from;
use super::widgets::{pane_block, put_row, truncate};
use crate::app::App;
use crate::state::Pane;
use crate::theme;

/// The list's area, the detail's, and (with a diagnostic selected) the detail's split
/// into its text and the source preview.
pub(super) struct Areas {
    pub list: Rect,
    pub detail: Rect,
    pub text_and_source: Option<(Rect, Rect)>,
}

/// Where the tab's panes go; `selected` is the diagnostic the detail shows.
pub(super) fn areas(area: Rect, app: &App, selected: Option<&Diagnostic>) -> Areas {
    let [list, detail] = if area.width >= 120 {
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area)
    } else {
        Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(area)
    };
    let text_and_source = selected.map(|d| {
        // The rows the text takes once wrapped to the pane (a note is often wider than the
        // pane): counting its lines instead cut the end of long notes off. The source
        // below keeps at least 6 rows, or half the pane when that is more.
        let wrapped = Paragraph::new(detail_lines(app, d))
            .wrap(Wrap { trim: false })
            .line_count(detail.width.saturating_sub(2)) as u16;
        let room = detail.height.saturating_sub(6).max(detail.height / 2);
        let [text, source] =
            Layout::vertical([Constraint::Length((wrapped + 2).min(room)), Constraint::Min(3)]).areas(detail);
        (text, source)
    });
    Areas { list, detail, text_and_source }
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let selected = app.selected_diagnostic().cloned();
    let Areas { list, detail, text_and_source } = areas(area, app, selected.as_ref());
    draw_list(f, list, app);
    match (selected, text_and_source) {
        (Some(d), Some((text, source))) => {
            let rows = detail_lines(app, &d);
            let (block, _) = pane_block(app, None, text, Line::raw(format!(" {} ", d.code.as_str())));
            f.render_widget(Paragraph::new(rows).block(block).wrap(Wrap { trim: false }), text);
            // The source pane highlights the selected diagnostic's range (focus is on
            // the list, whose linked range is the diagnostic's).
            // It scrolls to the diagnostic's first line as a jump does (a third of the way
            // down when off screen), on a copy: the Explore tab's cursor stays where it is.
            let index = app.ws.line_index();
            let mut preview = app.src;
            preview.jump(
                index.line_of(d.range.start) as usize,
                index.line_count(),
                source.height.saturating_sub(2) as usize,
            );
            draw_source_pane_from(f, source, app, None, preview.top);
        }
        _ => {
            let (block, inner) = pane_block(app, None, detail, Line::raw(" Source "));
            f.render_widget(block, detail);
            draw_source_preview_hint(f, inner, app);
        }
    }
}

fn draw_source_preview_hint(f: &mut Frame, inner: Rect, app: &App) {
    let text = match &app.diagnostics {
        Ok(d) if d.is_empty() => format!("`tessera check --target {}` is clean for this file.", app.target),
        Ok(_) => "select a diagnostic".to_string(),
        Err(e) => e.clone(),
    };
    put_row(f.buffer_mut(), inner, 0, vec![Span::styled(text, theme::dim())], Style::new());
}

fn severity_style(s: Severity) -> Style {
    match s {
        Severity::Error => theme::error(),
        _ => theme::warning(),
    }
}

fn draw_list(f: &mut Frame, area: Rect, app: &App) {
    let (errors, warnings) = match &app.diagnostics {
        Ok(d) => (d.iter().filter(|d| d.is_error()).count(), d.iter().filter(|d| !d.is_error()).count()),
        Err(_) => (0, 0),
    };
    let title = Line::from(vec![
        Span::raw(format!(" Lints · {} ", app.target)),
        Span::styled(format!("{errors} error{} ", if errors == 1 { "" } else { "s" }), theme::error()),
        Span::styled(format!("{warnings} warning{} ", if warnings == 1 { "" } else { "s" }), theme::warning()),
    ]);
    let (block, inner) = pane_block(app, Some(Pane::Lints), area, title);
    let block = match app.view.shown_registers() {
        Some(Ok(g)) => block.title_bottom(
            Line::from(Span::styled(
                if g.setmaxnreg {
                    format!(" consumer registers: peak {} of {} ", g.peak, g.limit)
                } else {
                    format!(" registers: peak {} of {} ", g.peak, g.limit)
                },
                theme::pressure(g.peak, g.limit),
            ))
            .right_aligned(),
        ),
        _ => block,
    };
    f.render_widget(block, area);
    let diags: Vec<Diagnostic> = match &app.diagnostics {
        Ok(d) => d.clone(),
        Err(e) => {
            put_row(f.buffer_mut(), inner, 0, vec![Span::styled(e.clone(), theme::error())], Style::new());
            return;
        }
    };
    if diags.is_empty() {
        put_row(
            f.buffer_mut(),
            inner,
            0,
            vec![Span::styled(format!("✓ no diagnostics for {}", app.target), theme::ok())],
            Style::new(),
        );
        return;
    }
    let focused = app.focus == Pane::Lints;
    let index = app.ws.line_index().clone();
    let text = app.ws.text();
    let current = app.current_function().map(|f| f.name.clone());
    for (row, (i, d)) in diags.iter().enumerate().skip(app.lints.top).take(inner.height as usize).enumerate() {
        let lc = index.line_col(text, d.range.start);
        let at = format!("{:>4}:{:<3}", lc.line + 1, lc.col + 1);
        let used = 2 + 6 + at.len() + 1;
        let msg_w = (inner.width as usize).saturating_sub(used);
        let in_kernel = app
            .functions
            .iter()
            .find(|f| f.range.contains(d.range.start))
            .is_some_and(|f| Some(&f.name) == current.as_ref());
        let spans = vec![
            Span::styled(if d.is_error() { "✗ " } else { "! " }, severity_style(d.severity)),
            Span::styled(format!("{:<6}", d.code.as_str()), severity_style(d.severity).add_modifier(Modifier::BOLD)),
            Span::styled(at, if in_kernel { Style::new() } else { theme::dim() }),
            Span::raw(" "),
            Span::raw(truncate(&d.message, msg_w)),
        ];
        let style = if i == app.lints.cursor {
            Style::new().bg(if focused { theme::CURSOR_BG } else { theme::LINKED_BG })
        } else {
            Style::new()
        };
        put_row(f.buffer_mut(), inner, row as u16, spans, style);
    }
}

fn detail_lines(app: &App, d: &Diagnostic) -> Vec<Line<'static>> {
    let index = app.ws.line_index();
    let text = app.ws.text();
    let at = |r: tessera_frontend::text::TextRange| {
        let lc = index.line_col(text, r.start);
        format!("{}:{}", lc.line + 1, lc.col + 1)
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", d.severity.as_str()), severity_style(d.severity).add_modifier(Modifier::BOLD)),
        Span::styled(format!("{} ", d.code.title()), theme::dim()),
        Span::styled(format!("at {}", at(d.range)), theme::dim()),
    ])];
    lines.push(Line::raw(d.message.clone()));
    for l in &d.labels {
        lines.push(Line::from(vec![
            Span::styled(format!("  {} ", at(l.range)), theme::dim()),
            Span::raw(l.message.clone()),
        ]));
    }
    for n in &d.notes {
        lines.push(Line::from(vec![Span::styled("  note: ", theme::key()), Span::raw(n.clone())]));
    }
    if let Some(fix) = &d.fix {
        lines.push(Line::from(vec![Span::styled("  fix: ", theme::ok()), Span::raw(fix.message.clone())]));
    }
    lines
}
