//! The schedule tab: every schedule key and shape symbol of the kernel, editable, with the
//! current stage's IR beside it re-lowered on every change.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::Frame;
use tessera_passes::Stage;

use super::explore::draw_ir_pane;
use super::widgets::{pane_block, popup, put_row, stage_title, truncate};
use crate::app::App;
use crate::state::Pane;
use crate::theme;
use crate::workspace::stage_index;

/// The table's, the stage summary's and the IR pane's areas.
pub(super) fn areas(area: Rect) -> [Rect; 3] {
    let table_w = if area.width >= 120 { 52 } else { (area.width * 9 / 20).max(34) };
    let [left, right] = Layout::horizontal([Constraint::Length(table_w), Constraint::Min(20)]).areas(area);
    let [table, summary] = Layout::vertical([Constraint::Min(5), Constraint::Length(4)]).areas(left);
    [table, summary, right]
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let [table, summary, right] = areas(area);
    draw_table(f, table, app);
    draw_summary(f, summary, app);
    draw_ir_pane(f, right, app, Pane::Ir);
}

fn candidates_text(c: &[tessera_frontend::check::KeyValue]) -> String {
    let parts: Vec<String> = c.iter().map(|v| v.to_string().trim_matches('"').to_string()).collect();
    format!("[{}]", parts.join(","))
}

fn draw_table(f: &mut Frame, area: Rect, app: &App) {
    let title = Line::from(vec![Span::raw(" Schedule "), Span::styled(format!("{} ", app.target), theme::dim())]);
    let (block, inner) = pane_block(app, Some(Pane::Schedule), area, title);
    f.render_widget(block, area);
    let rows = app.schedule_rows();
    if rows.is_empty() {
        let text = match &app.view.config {
            Err(e) => format!("no configuration: {}", e.message),
            Ok(_) => "no schedule keys".into(),
        };
        put_row(f.buffer_mut(), inner, 0, vec![Span::styled(text, theme::error())], Style::new());
        return;
    }
    // The selected row's problem takes the last line, when there is one.
    let selected_error = rows.get(app.sched.cursor).and_then(|r| r.error.clone());
    let list_h = inner.height.saturating_sub(selected_error.is_some() as u16 * 2) as usize;
    let focused = app.focus == Pane::Schedule;
    let key_w = rows.iter().map(|r| r.key.len()).max().unwrap_or(2).max(6);
    let width = inner.width as usize;
    for (row, (i, r)) in rows.iter().enumerate().skip(app.sched.top).take(list_h).enumerate() {
        let value_style = match r.origin {
            "edited" => Style::new().fg(ratatui::style::Color::LightCyan).add_modifier(Modifier::BOLD),
            "invalid" => theme::error().add_modifier(Modifier::BOLD),
            "assumed" => theme::warning(),
            _ => Style::new().add_modifier(Modifier::BOLD),
        };
        let shown = match &r.typed {
            Some(t) => format!("{t}✗"),
            None => r.value.clone(),
        };
        let note = if r.error.is_some() {
            format!("using {}", r.value)
        } else if r.origin == "space" {
            candidates_text(&r.candidates)
        } else {
            r.origin.to_string()
        };
        // The widest standard value is 8 columns (`mma.sync`, `cp.async`).
        let used = 2 + key_w + 1 + 9 + 1;
        let spans = vec![
            Span::raw("  "),
            Span::styled(
                format!("{:<key_w$} ", r.key),
                if r.is_dim { theme::dim().add_modifier(Modifier::BOLD) } else { theme::key() },
            ),
            Span::styled(format!("{:>8} ", shown), value_style),
            Span::raw(" "),
            Span::styled(truncate(&note, width.saturating_sub(used)), theme::dim()),
        ];
        let style = if i == app.sched.cursor {
            Style::new().bg(if focused { theme::CURSOR_BG } else { theme::LINKED_BG })
        } else {
            Style::new()
        };
        put_row(f.buffer_mut(), inner, row as u16, spans, style);
    }
    if let Some(e) = selected_error {
        let y = inner.height.saturating_sub(2);
        let text = format!("✗ E0701: {e}");
        let first: String = text.chars().take(width).collect();
        let rest: String = text.chars().skip(width).take(width).collect();
        put_row(f.buffer_mut(), inner, y, vec![Span::styled(first, theme::error())], Style::new());
        put_row(f.buffer_mut(), inner, y + 1, vec![Span::styled(rest, theme::error())], Style::new());
    }
}

/// Every stage's state after the last re-lower, so a schedule change that breaks a later
/// stage shows even while another stage is on screen.
fn draw_summary(f: &mut Frame, area: Rect, app: &App) {
    let (block, inner) = pane_block(app, None, area, Line::raw(" Stages "));
    f.render_widget(block, area);
    let mut spans = Vec::new();
    for stage in Stage::ALL {
        let (mark, style) = match app.view.stage(stage) {
            Some(Ok(_)) => ("✓", theme::ok()),
            _ => ("✗", theme::error()),
        };
        let label_style =
            if stage == app.stage { style.add_modifier(Modifier::BOLD | Modifier::UNDERLINED) } else { style };
        let name = if stage == Stage::Sched { "Sched" } else { stage_title(stage) };
        spans.push(Span::styled(format!("{name} {mark}"), label_style));
        spans.push(Span::raw(" "));
    }
    put_row(f.buffer_mut(), inner, 0, spans, Style::new());
    let second = match (&app.view.lowering, app.view.stage(app.stage)) {
        (Some(l), Some(Err(e))) => {
            vec![
                Span::styled(format!("{}: {}", stage_title(app.stage), e.message), theme::error()),
                Span::raw(format!(" · {}", crate::state::ms(l.elapsed))),
            ]
        }
        (Some(l), _) => {
            let t = l.times[stage_index(app.stage)];
            vec![Span::styled(
                format!("re-lowered {} · stage {}", crate::state::ms(app.view.relower), crate::state::ms(t)),
                theme::dim(),
            )]
        }
        (None, _) => vec![Span::styled("not lowered", theme::error())],
    };
    put_row(f.buffer_mut(), inner, 1, second, Style::new());
}

pub fn draw_edit(f: &mut Frame, area: Rect, app: &App, row: usize, input: &str, error: Option<&str>) {
    let rows = app.schedule_rows();
    let Some(r) = rows.get(row) else { return };
    let inner = popup(f, area, 60, 6, Line::from(format!(" {} = ? ", r.key)), " Enter applies · Esc cancels ");
    let buf = f.buffer_mut();
    put_row(
        buf,
        inner,
        0,
        vec![
            Span::styled(format!("{} = ", r.key), theme::key()),
            Span::raw(input.to_string()),
            Span::styled("▏", theme::key()),
        ],
        Style::new(),
    );
    let (text, style) = match error {
        Some(e) => (format!("✗ {e}"), theme::error()),
        None if !r.candidates.is_empty() => (format!("candidates {}", candidates_text(&r.candidates)), theme::dim()),
        None => (String::new(), Style::new()),
    };
    put_row(buf, inner, 2, vec![Span::styled(truncate(&text, inner.width as usize), style)], Style::new());
}
