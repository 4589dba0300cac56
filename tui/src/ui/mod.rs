//! Drawing, in three steps: [`layout`] says where every pane goes (a pure function of
//! the screen's size and the state), [`App::frame`] takes that layout into the state
//! (mouse hits, page sizes, scroll positions kept on screen, what the panes show computed
//! and cached), and [`view`] draws from `&App` alone: it changes nothing.
//! Text panes draw only their visible lines, so a 5 000-line listing costs what a
//! screenful does.

mod explore;
mod graph_run;
mod lints;
mod mesh;
mod passes;
mod run;
mod schedule;
mod widgets;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::app::App;
use crate::keymap::{self, Context};
use crate::state::{Geometry, Level, Overlay, Pane, Tab};
use crate::theme;

pub use explore::{draw_ir_pane, draw_source_pane};
use widgets::{centered, inner, kernel_config, popup, put_row, stage_title, truncate};

/// One frame: the layout, taken into the state, then the view of that state.
pub fn draw(f: &mut Frame, app: &mut App) {
    let geometry = layout(f.area(), app);
    app.frame(geometry);
    view(f, app);
}

fn too_small(area: Rect) -> bool {
    area.width < 40 || area.height < 10
}

/// The tab bar, the tab's panes, the status line and the key hints.
fn screen(area: Rect) -> [Rect; 4] {
    Layout::vertical([Constraint::Length(1), Constraint::Min(1), Constraint::Length(1), Constraint::Length(1)])
        .areas(area)
}

/// Where every pane goes on a screen of `area`: the inner area of each pane that takes
/// the focus, each tab label's and stage label's cells, the lints tab's source preview.
pub fn layout(area: Rect, app: &App) -> Geometry {
    let mut g = Geometry::default();
    if too_small(area) {
        return g;
    }
    let [top, main, _, _] = screen(area);
    g.tabs = tab_labels(top, app).into_iter().map(|(tab, _, rect)| (tab, rect)).collect();
    let ir_pane = |g: &mut Geometry, area: Rect| {
        g.stages = explore::stage_strip(app, area).1;
        g.panes.push((Pane::Ir, inner(area)));
    };
    match app.tab {
        Tab::Explore => {
            let [source, ir] = explore::areas(main);
            g.panes.push((Pane::Source, inner(source)));
            ir_pane(&mut g, ir);
        }
        Tab::Passes => {
            let [list, diff] = passes::areas(main);
            g.panes.push((Pane::PassList, inner(list)));
            g.panes.push((Pane::PassDiff, inner(diff)));
        }
        Tab::Lints => {
            // The detail shows the diagnostic under the cursor once it is kept in the list.
            let selected =
                app.diagnostics.as_ref().ok().and_then(|d| d.get(app.lints.cursor.min(d.len().saturating_sub(1))));
            let a = lints::areas(main, app, selected);
            g.panes.push((Pane::Lints, inner(a.list)));
            g.source_preview = a.text_and_source.map(|(_, source)| inner(source));
        }
        Tab::Schedule => {
            let [table, _, ir] = schedule::areas(main);
            g.panes.push((Pane::Schedule, inner(table)));
            ir_pane(&mut g, ir);
        }
        Tab::Run => {
            let [_, _, results, _] = run::areas(main);
            g.panes.push((Pane::Results, inner(results)));
        }
        Tab::Mesh => g.panes.push((Pane::Mesh, inner(main))),
    }
    g
}

/// Draws the state: reads `app`, writes cells, and changes nothing.
pub fn view(f: &mut Frame, app: &App) {
    let area = f.area();
    if too_small(area) {
        let p = Paragraph::new("tessera-explore needs at least 40×10 cells")
            .style(theme::warning())
            .wrap(Wrap { trim: true });
        f.render_widget(p, area);
        return;
    }
    let [top, main, status, hints] = screen(area);
    draw_tab_bar(f.buffer_mut(), top, app);
    match app.tab {
        Tab::Explore => explore::draw(f, main, app),
        Tab::Passes => passes::draw(f, main, app),
        Tab::Lints => lints::draw(f, main, app),
        Tab::Schedule => schedule::draw(f, main, app),
        Tab::Run => run::draw(f, main, app),
        Tab::Mesh => mesh::draw(f, main, app),
    }
    draw_status(f.buffer_mut(), status, app);
    draw_hints(f.buffer_mut(), hints, app);
    match app.overlay.clone() {
        Overlay::None => {}
        Overlay::Help { scroll } => draw_help(f, area, app, scroll),
        Overlay::Picker { filter, cursor } => draw_picker(f, area, app, &filter, cursor),
        Overlay::Edit { row, input, error } => schedule::draw_edit(f, area, app, row, &input, error.as_deref()),
    }
}

/// Each tab's label and cells in the tab bar (after the explorer's name).
fn tab_labels(area: Rect, app: &App) -> Vec<(Tab, String, Rect)> {
    let mut x = area.x + NAME.chars().count() as u16;
    let lints = app.diagnostics.as_ref().map_or(0, Vec::len);
    let mut labels = Vec::new();
    for (i, tab) in Tab::ALL.iter().enumerate() {
        let label = match tab {
            Tab::Lints if lints > 0 => format!(" {} {} ({lints}) ", i + 1, tab.title()),
            _ => format!(" {} {} ", i + 1, tab.title()),
        };
        let w = (label.chars().count() as u16).min(area.right().saturating_sub(x));
        if w == 0 {
            break;
        }
        labels.push((*tab, label, Rect::new(x, area.y, w, 1)));
        x += w;
    }
    labels
}

const NAME: &str = " tessera-explore ";

fn draw_tab_bar(buf: &mut Buffer, area: Rect, app: &App) {
    buf.set_style(area, theme::status_bar());
    let name = Span::styled(NAME, theme::status_bar().add_modifier(Modifier::BOLD));
    buf.set_span(area.x, area.y, &name, name.width() as u16);
    let mut x = area.x + name.width() as u16;
    for (tab, label, rect) in tab_labels(area, app) {
        let style = if tab == app.tab { theme::selected_tab() } else { theme::status_bar() };
        buf.set_span(rect.x, rect.y, &Span::styled(label, style), rect.width);
        x = rect.right();
    }
    // The kernel and target on the right, when they fit.
    let right = format!(" {} · {} ", app.kernel.as_deref().unwrap_or("no kernel"), app.target);
    let rw = right.chars().count() as u16;
    if x + rw < area.right() {
        buf.set_span(
            area.right() - rw,
            area.y,
            &Span::styled(right, theme::status_bar().add_modifier(Modifier::BOLD)),
            rw,
        );
    }
}

/// One line with what a screenshot must tell: file, kernel, stage, target, the
/// configuration in effect, and how long the last re-lower took.
fn draw_status(buf: &mut Buffer, area: Rect, app: &App) {
    buf.set_style(area, theme::status_bar());
    let sep = || Span::styled(" │ ", theme::status_bar().fg(ratatui::style::Color::DarkGray));
    let timing = match &app.view.lowering {
        Some(_) => format!("lowered in {}", crate::state::ms(app.view.relower)),
        None => "not lowered".to_string(),
    };
    let config = match &app.view.config {
        Ok(info) => kernel_config(info),
        Err(_) => "no configuration".into(),
    };
    let kernel = app.kernel.clone().unwrap_or_else(|| "—".into());
    let stage = format!("{} IR", stage_title(app.stage));
    let target = app.target.to_string();
    let full = app.ws.path().display().to_string();
    let short = app.ws.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| full.clone());
    let fixed = |path: &str| {
        1 + path.chars().count() + kernel.chars().count() + stage.len() + target.len() + timing.chars().count() + 5 * 3
    };
    // The configuration is what a kernel engineer reads the status bar for: the path
    // shrinks to the file name before the configuration shrinks.
    let path =
        if (area.width as usize).saturating_sub(fixed(&full)) >= config.chars().count().min(40) { full } else { short };
    let room = (area.width as usize).saturating_sub(fixed(&path));
    let spans = vec![
        Span::styled(format!(" {path}"), theme::status_bar()),
        sep(),
        Span::styled(kernel, theme::status_bar().add_modifier(Modifier::BOLD)),
        sep(),
        Span::styled(stage, theme::status_bar()),
        sep(),
        Span::styled(target, theme::status_bar()),
        sep(),
        Span::styled(truncate(&config, room), theme::status_bar()),
        sep(),
        Span::styled(timing, theme::status_bar()),
    ];
    buf.set_line(area.x, area.y, &Line::from(spans), area.width);
}

fn draw_hints(buf: &mut Buffer, area: Rect, app: &App) {
    if let Some(m) = &app.message {
        let style = match m.level {
            Level::Info => Style::new(),
            Level::Warning => theme::warning(),
            Level::Error => theme::error(),
        };
        let icon = match m.level {
            Level::Info => "",
            Level::Warning => "! ",
            Level::Error => "✗ ",
        };
        buf.set_line(area.x, area.y, &Line::from(Span::styled(format!(" {icon}{}", m.text), style)), area.width);
        return;
    }
    let pane_hints: &[(&str, &str)] = match app.focus {
        Pane::Source => &[("Enter", "to IR"), ("n/N", "ops of line")],
        Pane::Ir => &[("Enter", "to source"), ("d", "diff"), ("L", "loc")],
        Pane::PassList | Pane::PassDiff => &[("H", "hide unchanged"), ("n/N", "changes")],
        Pane::Lints => &[("Enter", "jump to source")],
        Pane::Schedule => &[("h/l", "value"), ("e", "edit"), ("Bksp", "reset")],
        Pane::Results => &[("b", "device"), ("Enter", "use config")],
        Pane::Mesh => &[("j/k", "scroll")],
    };
    let common: &[(&str, &str)] = &[
        ("[/]", "stage"),
        ("?", "help"),
        ("q", "quit"),
        ("p", "kernel"),
        ("t", "target"),
        ("r", "run"),
        ("Tab", "focus"),
    ];
    let mut spans = vec![Span::raw(" ")];
    for (k, what) in pane_hints.iter().chain(common) {
        spans.push(Span::styled(*k, theme::key()));
        spans.push(Span::styled(format!(" {what}  "), theme::dim()));
    }
    buf.set_line(area.x, area.y, &Line::from(spans), area.width);
}

fn draw_help(f: &mut Frame, area: Rect, _app: &App, scroll: usize) {
    let sections: [(&str, Context); 9] = [
        ("Everywhere", Context::Global),
        ("Moving (any pane)", Context::Nav),
        ("Source pane", Context::Source),
        ("IR pane", Context::Ir),
        ("Passes", Context::Passes),
        ("Schedule", Context::Schedule),
        ("Lints", Context::Lints),
        ("Run", Context::Run),
        ("Kernel picker", Context::Picker),
    ];
    let mut lines: Vec<Line> = Vec::new();
    for (title, ctx) in sections {
        lines.push(Line::from(Span::styled(title, Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))));
        for b in keymap::help_rows(ctx) {
            lines.push(Line::from(vec![
                Span::styled(format!("  {:<18}", b.keys), theme::key()),
                Span::raw(b.help.to_string()),
            ]));
        }
        lines.push(Line::raw(""));
    }
    lines.push(Line::from(Span::styled(
        "Mouse: click a tab, a stage or a line; the wheel scrolls the pane under it.",
        theme::dim(),
    )));
    let rect = centered(area, 78, area.height.saturating_sub(2));
    let block = Block::bordered()
        .border_style(theme::border(true))
        .title(Line::from(" Keys ").style(theme::title(true)))
        .title_bottom(Line::from(" Esc closes · j/k scroll ").style(theme::dim()));
    let inner = block.inner(rect);
    let max_scroll = lines.len().saturating_sub(inner.height as usize);
    let p = Paragraph::new(lines).block(block).scroll((scroll.min(max_scroll) as u16, 0));
    f.render_widget(Clear, rect);
    f.render_widget(p, rect);
}

fn draw_picker(f: &mut Frame, area: Rect, app: &App, filter: &str, cursor: usize) {
    let matches = app.picker_matches(filter);
    let height = (matches.len() as u16 + 4).clamp(6, area.height.saturating_sub(4));
    let inner =
        popup(f, area, 64, height, Line::from(" Kernels and graph functions "), " type to filter · Enter opens · Esc ");
    let buf = f.buffer_mut();
    put_row(
        buf,
        inner,
        0,
        vec![Span::styled("> ", theme::key()), Span::raw(filter.to_string()), Span::styled("▏", theme::key())],
        Style::new(),
    );
    let rows = inner.height.saturating_sub(1) as usize;
    let top = cursor.saturating_sub(rows.saturating_sub(1));
    if matches.is_empty() {
        put_row(buf, inner, 1, vec![Span::styled("  no function matches", theme::dim())], Style::new());
    }
    let name_w = matches.iter().map(|&i| app.functions[i].name.chars().count()).max().unwrap_or(0);
    for (row, &i) in matches.iter().enumerate().skip(top).take(rows) {
        let func = &app.functions[i];
        let current = Some(&func.name) == app.kernel.as_ref();
        let kind_style = match func.kind {
            tessera_frontend::check::FunctionKind::Kernel => theme::ok(),
            tessera_frontend::check::FunctionKind::Graph => theme::warning(),
            tessera_frontend::check::FunctionKind::Helper => theme::dim(),
        };
        let spans = vec![
            Span::raw(if current { "● " } else { "  " }),
            Span::styled(format!("{:<15}", func.kind.name()), kind_style),
            Span::styled(format!("{:<name_w$}", func.name), Style::new().add_modifier(Modifier::BOLD)),
            Span::styled(format!("  line {}", func.line + 1), theme::dim()),
        ];
        let style = if row == cursor { Style::new().bg(theme::CURSOR_BG) } else { Style::new() };
        put_row(buf, inner, (row - top + 1) as u16, spans, style);
    }
}
