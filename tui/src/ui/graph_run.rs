//! The run tab when the function on screen is a graph function (`@jit`): its last run
//! (the verdict of the run and of each returned value against the f64 reference, the
//! device, the times, the dims) in the results pane, and the launch plan's kernels with
//! their times in the chart's place. Every verdict shown is the one `GraphSession`
//! returned; nothing here compares numbers.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use tessera_backends::launch::graph::{GraphCheck, KernelTime};
use tessera_backends::launch::Verdict;

use super::widgets::{pane_block, put_row, truncate};
use crate::app::App;
use crate::components::run::GraphRecord;
use crate::runner::{self, Device, GraphOutcome};
use crate::state::{fmt_ms, Pane};
use crate::theme;

/// How a device runs a launch plan, in the words of `tessera run`.
pub(super) fn device_text(device: Device) -> &'static str {
    match device {
        Device::Cpu => "the CPU backend (LLVM JIT)",
        _ => "the reference interpreter",
    }
}

/// The progress pane's idle line for a graph function.
pub(super) fn idle_text(app: &App, function: &str) -> String {
    match app.run.graph_record(function).and_then(|r| r.outcome.as_ref()) {
        Some(Ok(o)) => format!("last: `{function}` {} in {}", verdict_word(o.run.verdict), median(o)),
        Some(Err(e)) => format!("last: `{function}` failed: {e}"),
        None => format!("r runs graph function `{function}` · a autotunes kernels only"),
    }
}

fn median(o: &GraphOutcome) -> String {
    fmt_ms(o.run.median_ms()).trim_start().to_string()
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Correct => "correct",
        Verdict::Wrong => "WRONG",
        Verdict::NonFinite => "NON-FINITE",
        Verdict::Unchecked => "unchecked",
    }
}

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Correct => theme::ok(),
        _ => theme::error(),
    }
}

/// A labelled row (`label` padded to one column width).
fn row(label: &str, spans: Vec<Span<'static>>) -> Line<'static> {
    let mut all = vec![Span::styled(format!(" {label:<9}"), theme::dim())];
    all.extend(spans);
    Line::from(all)
}

/// The last run of graph function `function`, in the results pane's place.
pub(super) fn draw_result(f: &mut Frame, area: Rect, app: &App, function: &str) {
    let title = Line::from(vec![Span::raw(" Graph run "), Span::styled(format!("{function} "), theme::dim())]);
    let (block, inner) = pane_block(app, Some(Pane::Results), area, title);
    let block = block.title_bottom(
        Line::from(vec![Span::styled(" r ", theme::key()), Span::styled("runs it again ", theme::dim())])
            .right_aligned(),
    );
    f.render_widget(block, area);
    let record = app.run.graph_record(function);
    let lines = match record {
        None => {
            let device = runner::graph_device().map_or("the reference interpreter", device_text);
            vec![Line::styled(
                format!(
                    " r runs `{function}`: its launch plan on {device}, each returned value checked against the \
                     f64 reference (the Graph IR in f64)"
                ),
                theme::dim(),
            )]
        }
        Some(r) => record_lines(app, r),
    };
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

fn record_lines(app: &App, r: &GraphRecord) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if r.revision != app.ws.revision() {
        lines.push(Line::styled(" (older source: the file changed since this run)", theme::warning()));
    }
    let o = match &r.outcome {
        None => {
            lines.push(row("result", vec![Span::styled("running…", theme::key())]));
            return lines;
        }
        Some(Err(e)) => {
            lines.push(row("result", vec![Span::styled(format!("✗ {e}"), theme::error())]));
            return lines;
        }
        Some(Ok(o)) => o,
    };
    let run = &o.run;
    let summary = match run.verdict {
        Verdict::Correct => "correct: every returned value matches the f64 reference".to_string(),
        Verdict::Wrong => "WRONG: the results differ from the f64 reference".to_string(),
        Verdict::NonFinite => "NON-FINITE: the reference itself has NaN or Inf".to_string(),
        Verdict::Unchecked => "unchecked".to_string(),
    };
    lines.push(row("result", vec![Span::styled(summary, verdict_style(run.verdict).add_modifier(Modifier::BOLD))]));
    for check in &run.checks {
        lines.push(row(&check.name, check_spans(check)));
    }
    for v in &run.numerics {
        lines.push(row(
            "numerics",
            vec![Span::styled(
                format!("@verify.numerics VIOLATED: {} {} in {} elements", v.output, v.check, v.count),
                theme::error(),
            )],
        ));
    }
    lines.push(row("device", vec![Span::raw(format!("{}, target {}", device_text(run.device), run.target.name()))]));
    lines.push(row(
        "time",
        vec![Span::raw(format!(
            "median {} · min {} over {} run{} of the whole plan ({} with lowering)",
            median(o),
            fmt_ms(run.min_ms()).trim_start(),
            run.repeat,
            if run.repeat == 1 { "" } else { "s" },
            fmt_ms(r.wall.as_secs_f64() * 1e3).trim_start()
        ))],
    ));
    let dims: Vec<String> = o.inputs.symbols.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let assumed = if o.inputs.assumed.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = o.inputs.assumed.iter().map(|(k, _)| k.as_str()).collect();
        format!(" (default for {})", names.join(", "))
    };
    lines.push(row("dims", vec![Span::raw(format!("{}{assumed}", dims.join(" ")))]));
    if !o.inputs.scalars.is_empty() {
        let args: Vec<String> = o.inputs.scalars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        lines.push(row("args", vec![Span::raw(args.join(" "))]));
    }
    lines
}

/// One returned value: its type, its own verdict and its errors against the reference.
fn check_spans(check: &GraphCheck) -> Vec<Span<'static>> {
    let c = &check.comparison;
    let dims: Vec<String> = check.dims.iter().map(usize::to_string).collect();
    let ty = if dims.is_empty() { check.dtype.to_string() } else { format!("{}[{}]", check.dtype, dims.join("×")) };
    let verdict = check.verdict();
    let mut detail = format!(" · max abs err {:.2e} · max rel err {:.2e}", c.max_abs, c.max_rel);
    match verdict {
        Verdict::Wrong if c.length_mismatch.is_some() => detail = format!(" · {c}"),
        Verdict::Wrong => detail.push_str(&format!(" · {} of {} elements out of tolerance", c.mismatches, c.len)),
        Verdict::NonFinite => detail.push_str(&format!(" · the reference has {} NaN/Inf", c.expected_nonfinite)),
        _ => {}
    }
    if c.actual_nonfinite > 0 {
        detail.push_str(&format!(" · {} non-finite results", c.actual_nonfinite));
    }
    if let Some(moved) = check.rounding_sensitivity {
        detail.push_str(&format!(
            " · within its rounding sensitivity: the reference moves {moved:.2e} unrounded (a cancellation)"
        ));
    }
    vec![Span::raw(format!("{ty}  ")), Span::styled(verdict_word(verdict), verdict_style(verdict)), Span::raw(detail)]
}

/// The launch plan's kernels against their time in the last run (longer is slower).
pub(super) fn draw_kernels(f: &mut Frame, area: Rect, app: &App, function: &str) {
    let outcome = match app.run.graph_record(function).and_then(|r| r.outcome.as_ref()) {
        Some(Ok(o)) => Some(o),
        _ => None,
    };
    let count = outcome.map_or(String::new(), |o| format!("{} ", o.run.kernels.len()));
    let title = Line::from(vec![Span::raw(" Plan kernels vs time "), Span::styled(count, theme::dim())]);
    let (block, inner) = pane_block(app, None, area, title);
    f.render_widget(block, area);
    let Some(o) = outcome else {
        put_row(
            f.buffer_mut(),
            inner,
            0,
            vec![Span::styled("r runs the plan: each of its kernels gets a bar", theme::dim())],
            Style::new(),
        );
        return;
    };
    // Generated kernels are named `<function>__k<i>_<what>`: the prefix is the same on
    // every row, and only the rest tells them apart in a narrow label.
    let prefix = format!("{function}__");
    let name = |k: &KernelTime| -> String { k.kernel.name.strip_prefix(&prefix).unwrap_or(&k.kernel.name).to_string() };
    let kernels = &o.run.kernels;
    let max = kernels.iter().map(|k| k.time.as_secs_f64()).fold(0.0f64, f64::max).max(1e-12);
    let width = inner.width as usize;
    let label_w = kernels.iter().map(|k| name(k).chars().count()).max().unwrap_or(8).min(width / 3).max(1);
    let value_w = 10;
    let bar_w = width.saturating_sub(label_w + value_w + 2).clamp(1, 24);
    for (i, k) in kernels.iter().take(inner.height as usize).enumerate() {
        let secs = k.time.as_secs_f64();
        // A kernel the plan did not reach has no time (Duration::ZERO), not a short one.
        let (bar, time) = if secs == 0.0 {
            (String::new(), "not run".to_string())
        } else {
            let eighths = ((secs / max) * (bar_w * 8) as f64).round().max(1.0) as usize;
            let mut bar = "█".repeat(eighths / 8);
            if !eighths.is_multiple_of(8) {
                bar.push(['▏', '▎', '▍', '▌', '▋', '▊', '▉'][eighths % 8 - 1]);
            }
            (bar, fmt_ms(secs * 1e3))
        };
        let used = label_w + 1 + bar_w + value_w + 2;
        let spans = vec![
            Span::raw(format!("{:<label_w$} ", truncate(&name(k), label_w))),
            Span::styled(format!("{bar:<bar_w$}"), Style::new().fg(ratatui::style::Color::Cyan)),
            Span::raw(format!(" {time:>9} ")),
            Span::styled(truncate(&k.kernel.summary, width.saturating_sub(used)), theme::dim()),
        ];
        put_row(f.buffer_mut(), inner, i as u16, spans, Style::new());
    }
}
