//! The run tab: devices, the run in progress, every result kept per configuration, and
//! the autotune chart of configurations against time. A graph function on screen gets
//! its last run and its plan's kernels instead of the table and chart
//! ([`super::graph_run`]).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Gauge;
use ratatui::Frame;
use tessera_frontend::check::FunctionKind;

use super::graph_run;
use super::widgets::{pane_block, put_row, short_config, truncate};
use crate::app::App;
use crate::components::run::RunRecord;
use crate::runner::{self, Correctness};
use crate::state::{fmt_ms, Pane};
use crate::theme;

const SPINNER: [&str; 8] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧"];

/// The devices', progress's, results' and chart's areas.
pub(super) fn areas(area: Rect) -> [Rect; 4] {
    let [top, bottom] = Layout::vertical([Constraint::Length(6), Constraint::Min(4)]).areas(area);
    let [devices, progress] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(top);
    let [results, chart] = if bottom.width >= 120 {
        Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(bottom)
    } else {
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(bottom)
    };
    [devices, progress, results, chart]
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let [devices, progress, results, chart] = areas(area);
    draw_devices(f, devices, app);
    draw_progress(f, progress, app);
    match graph_function(app) {
        Some(name) => {
            graph_run::draw_result(f, results, app, name);
            graph_run::draw_kernels(f, chart, app, name);
        }
        None => {
            draw_results(f, results, app);
            draw_chart(f, chart, app);
        }
    }
}

/// The name of the function on screen when it is a graph function (`@jit`).
fn graph_function(app: &App) -> Option<&str> {
    app.current_function().filter(|f| f.kind == FunctionKind::Graph).map(|f| f.name.as_str())
}

fn draw_devices(f: &mut Frame, area: Rect, app: &App) {
    let (block, inner) = pane_block(app, None, area, Line::raw(" Devices "));
    let block = block.title_bottom(
        Line::from(vec![Span::styled(" b ", theme::key()), Span::styled("cycles ", theme::dim())]).right_aligned(),
    );
    f.render_widget(block, area);
    let width = inner.width as usize;
    for (i, b) in app.run.backends.iter().enumerate() {
        let chosen = i == app.run.device;
        let (state, style) = match &b.runner {
            Ok(_) => ("ready".to_string(), theme::ok()),
            Err(why) => (format!("✗ {why}"), theme::dim()),
        };
        let label = format!("{} {:<22}", if chosen { "▶" } else { " " }, b.label);
        let used = label.chars().count();
        let spans = vec![
            Span::styled(label, if chosen { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() }),
            Span::styled(truncate(&state, width.saturating_sub(used)), style),
        ];
        put_row(f.buffer_mut(), inner, i as u16, spans, Style::new());
    }
    let dims: Vec<String> = app.run_dims().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let line = match graph_function(app) {
        // Graph functions do not take the device chosen above: GraphSession picks one.
        Some(_) => format!(
            "graph functions run on {}",
            runner::graph_device().map_or("the reference interpreter", graph_run::device_text)
        ),
        None => format!("dims {} (edit in 4 Schedule)", if dims.is_empty() { "—".to_string() } else { dims.join(" ") }),
    };
    put_row(
        f.buffer_mut(),
        inner,
        app.run.backends.len() as u16,
        vec![Span::styled(truncate(&line, width), theme::dim())],
        Style::new(),
    );
}

fn draw_progress(f: &mut Frame, area: Rect, app: &App) {
    let (block, inner) = pane_block(app, None, area, Line::raw(" Progress "));
    f.render_widget(block, area);
    let spin = SPINNER[(app.ticks as usize) % SPINNER.len()];
    if let Some(task) = &app.run.graph {
        put_row(
            f.buffer_mut(),
            inner,
            0,
            vec![
                Span::styled(format!("{spin} running "), theme::key()),
                Span::raw(format!(
                    "graph function {} · {:.1} s",
                    task.job.function,
                    task.started.elapsed().as_secs_f64()
                )),
            ],
            Style::new(),
        );
        put_row(
            f.buffer_mut(),
            inner,
            1,
            vec![Span::styled(
                truncate("planning, the f64 reference, then the launch plan (timed)", inner.width as usize),
                theme::dim(),
            )],
            Style::new(),
        );
        return;
    }
    let Some(batch) = &app.run.batch else {
        let text = match graph_function(app) {
            Some(name) => graph_run::idle_text(app, name),
            None => match app.run.results.iter().rev().find(|r| r.outcome.is_some()) {
                Some(r) => format!("last: {} on {}", outcome_text(r), r.device.name()),
                None => "r runs the kernel · a autotunes its space".to_string(),
            },
        };
        put_row(
            f.buffer_mut(),
            inner,
            0,
            vec![Span::styled(truncate(&text, inner.width as usize), theme::dim())],
            Style::new(),
        );
        return;
    };
    let total = batch.jobs.len();
    let what = if batch.autotune { "autotuning" } else { "running" };
    let current = batch.current.and_then(|i| batch.jobs.get(i)).map(|j| short_config(&j.config)).unwrap_or_default();
    let elapsed = batch.started.elapsed().as_secs_f64();
    put_row(
        f.buffer_mut(),
        inner,
        0,
        vec![
            Span::styled(format!("{spin} {what} "), theme::key()),
            Span::raw(format!("{} on the {} · {:.1} s", batch.jobs[0].kernel, batch.device.name(), elapsed)),
        ],
        Style::new(),
    );
    if inner.height >= 2 {
        let ratio = batch.done as f64 / total.max(1) as f64;
        let gauge = Gauge::default()
            .gauge_style(Style::new().fg(ratatui::style::Color::Cyan).bg(ratatui::style::Color::Indexed(236)))
            .ratio(ratio.clamp(0.0, 1.0))
            .label(format!("{}/{} configurations", batch.done, total));
        f.render_widget(gauge, Rect::new(inner.x, inner.y + 1, inner.width, 1));
    }
    if inner.height >= 3 {
        let text =
            if batch.cancelled() { "cancelling after this one…".to_string() } else { format!("now: {current}") };
        put_row(
            f.buffer_mut(),
            inner,
            2,
            vec![Span::styled(truncate(&text, inner.width as usize), theme::dim())],
            Style::new(),
        );
    }
}

fn outcome_text(r: &RunRecord) -> String {
    match &r.outcome {
        None => "waiting".into(),
        Some(Err(e)) => format!("failed: {e}"),
        Some(Ok(o)) => format!("{} ({})", fmt_ms(o.median_ms), correctness_text(&o.correctness)),
    }
}

fn correctness_text(c: &Correctness) -> String {
    match c {
        Correctness::Unchecked(_) => "unchecked".into(),
        Correctness::Checked { passed: true, max_abs, sampled, .. } => {
            // `~`: a sample of the tile programs was checked, not the whole grid.
            let err = if *max_abs == 0.0 { "exact".to_string() } else { format!("{max_abs:.0e}") };
            format!("ok {err}{}", if *sampled { " ~" } else { "" })
        }
        Correctness::Checked { passed: false, nonfinite: true, .. } => "NON-FINITE".into(),
        // Whether the device computes its Tile IR: the kernel's arithmetic or a Tile IR
        // pass, or code generation (the status line says it in words).
        Correctness::Checked { passed: false, cause: Some(cause), .. } => format!("WRONG {}", cause.short_name()),
        Correctness::Checked { passed: false, .. } => "WRONG".into(),
    }
}

fn draw_results(f: &mut Frame, area: Rect, app: &App) {
    let title =
        Line::from(vec![Span::raw(" Results "), Span::styled(format!("{} ", app.run.results.len()), theme::dim())]);
    let (block, inner) = pane_block(app, Some(Pane::Results), area, title);
    let block = block.title_bottom(
        Line::from(vec![
            Span::styled(" Enter ", theme::key()),
            Span::styled("uses a row's configuration ", theme::dim()),
        ])
        .right_aligned(),
    );
    f.render_widget(block, area);
    let width = inner.width as usize;
    let header = format!(" {:<10} {:>10} {:>10} {:<13} configuration", "device", "median", "min", "result");
    put_row(
        f.buffer_mut(),
        inner,
        0,
        vec![Span::styled(truncate(&header, width), theme::dim().add_modifier(Modifier::UNDERLINED))],
        Style::new(),
    );
    if app.run.results.is_empty() {
        put_row(f.buffer_mut(), inner, 1, vec![Span::styled("no runs yet", theme::dim())], Style::new());
        return;
    }
    let rows = inner.height.saturating_sub(1) as usize;
    let best = best_index(&app.run.results);
    let focused = app.focus == Pane::Results;
    let revision = app.ws.revision();
    for (row, (i, r)) in app.run.results.iter().enumerate().skip(app.run.scroll.top).take(rows).enumerate() {
        let (median, min, result, style) = match &r.outcome {
            None => ("…".to_string(), "…".to_string(), "waiting".to_string(), theme::dim()),
            Some(Err(e)) => ("—".into(), "—".into(), truncate(&format!("✗ {e}"), 13), theme::error()),
            Some(Ok(o)) => {
                let style = match o.correctness {
                    Correctness::Checked { passed: false, .. } => theme::error(),
                    _ => theme::ok(),
                };
                (fmt_ms(o.median_ms), fmt_ms(o.min_ms), correctness_text(&o.correctness), style)
            }
        };
        let mut config = short_config(&r.config);
        if r.kernel != app.kernel.clone().unwrap_or_default() {
            config = format!("{} {config}", r.kernel);
        }
        if r.revision != revision {
            config = format!("(older source) {config}");
        }
        let star = if Some(i) == best { "★" } else { " " };
        let head = format!("{star}{:<10} {:>10} {:>10} ", r.device.name(), median, min);
        let used = head.chars().count() + 14;
        let spans = vec![
            Span::raw(head),
            Span::styled(format!("{result:<13} "), style),
            Span::raw(truncate(&config, width.saturating_sub(used))),
        ];
        let bg = if i == app.run.scroll.cursor && focused { Style::new().bg(theme::CURSOR_BG) } else { Style::new() };
        put_row(f.buffer_mut(), inner, row as u16 + 1, spans, bg);
    }
}

fn best_index(results: &[RunRecord]) -> Option<usize> {
    results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.outcome {
            Some(Ok(o)) if !matches!(o.correctness, Correctness::Checked { passed: false, .. }) => {
                Some((i, o.median_ms))
            }
            _ => None,
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

/// Configurations against time as horizontal bars (longer is slower), best starred: a
/// bar chart reads better than points when the x axis is a list of configurations.
fn draw_chart(f: &mut Frame, area: Rect, app: &App) {
    let kernel = app.kernel.clone().unwrap_or_default();
    let device = app.run.backend().device;
    let title = Line::from(vec![
        Span::raw(" Configurations vs time "),
        Span::styled(format!("{} ", device.name()), theme::dim()),
    ]);
    let (block, inner) = pane_block(app, None, area, title);
    f.render_widget(block, area);
    let rows: Vec<&RunRecord> = app.run.results.iter().filter(|r| r.kernel == kernel && r.device == device).collect();
    let timed: Vec<(&RunRecord, f64)> = rows
        .iter()
        .filter_map(|r| match &r.outcome {
            Some(Ok(o)) => Some((*r, o.median_ms)),
            _ => None,
        })
        .collect();
    if timed.is_empty() {
        put_row(
            f.buffer_mut(),
            inner,
            0,
            vec![Span::styled("a autotunes: each configuration gets a bar", theme::dim())],
            Style::new(),
        );
        return;
    }
    let max = timed.iter().map(|(_, t)| *t).fold(0.0f64, f64::max).max(1e-9);
    let best = timed.iter().map(|(_, t)| *t).fold(f64::INFINITY, f64::min);
    let label_w =
        timed.iter().map(|(r, _)| short_label(r).chars().count()).max().unwrap_or(8).min(inner.width as usize / 2);
    let value_w = 10;
    let bar_w = (inner.width as usize).saturating_sub(label_w + value_w + 3).max(1);
    for (row, (r, t)) in timed.iter().take(inner.height as usize).enumerate() {
        let eighths = ((t / max) * (bar_w * 8) as f64).round().max(1.0) as usize;
        let mut bar = "█".repeat(eighths / 8);
        if !eighths.is_multiple_of(8) {
            bar.push(['▏', '▎', '▍', '▌', '▋', '▊', '▉'][eighths % 8 - 1]);
        }
        let is_best = *t == best;
        let style = if is_best {
            theme::ok().add_modifier(Modifier::BOLD)
        } else {
            Style::new().fg(ratatui::style::Color::Cyan)
        };
        let spans = vec![
            Span::raw(format!("{:<label_w$} ", truncate(&short_label(r), label_w))),
            Span::styled(format!("{bar:<bar_w$}"), style),
            Span::styled(format!(" {:>9}", fmt_ms(*t)), if is_best { theme::ok() } else { Style::new() }),
            Span::raw(if is_best { "★" } else { " " }),
        ];
        put_row(f.buffer_mut(), inner, row as u16, spans, Style::new());
    }
}

/// The keys that distinguish configurations of a space, compactly (`64,128 w4 s2`).
fn short_label(r: &RunRecord) -> String {
    let s = &r.config.schedule;
    let mut parts = Vec::new();
    let bm = s.int("BM");
    let bn = s.int("BN");
    match (bm, bn) {
        (Some(m), Some(n)) => parts.push(format!("{m}×{n}")),
        (Some(m), None) => parts.push(format!("BM{m}")),
        _ => {}
    }
    if let Some(k) = s.int("BK") {
        parts.push(format!("k{k}"));
    }
    parts.push(format!("w{}", s.warps()));
    parts.push(format!("s{}", s.stages()));
    for (k, v) in &s.values {
        if k == "mma" {
            // The instruction family: shown when it is not the default `mma.sync`.
            if s.mma() == tessera_frontend::check::MmaFamily::Wgmma {
                parts.push("wgmma".into());
            }
        } else if k == "copy" {
            if s.copy() == tessera_frontend::check::CopyEngine::Tma {
                parts.push("tma".into());
            }
        } else if k == "producer" {
            if s.producer_warpgroup() {
                parts.push("producer".into());
            }
        } else if k == "cluster_x" || k == "cluster_y" {
            let [x, y] = s.cluster();
            if k == "cluster_x" && x * y > 1 {
                parts.push(format!("c{x}x{y}"));
            }
        } else if !["BM", "BN", "BK", "BD", "warps", "stages", "vector", "swizzle"].contains(&k.as_str()) {
            parts.push(format!("{k}{}", v.to_string().trim_matches('"')));
        }
    }
    parts.join(" ")
}
