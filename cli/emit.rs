//! Emitters: one diagnostic model, five output formats (TOOLS.md §1).
//!
//! Paths that could not be read ([`PathError`]) are part of every format's output, after
//! the diagnostics: human and concise print `PATH: error: MESSAGE`, JSON lists them under
//! `"errors"` (and counts them in `summary.unreadable`), SARIF as error notifications of
//! the run's invocation (`executionSuccessful: false`), GitHub as `::error file=PATH::`.
//! SARIF lives in [`crate::sarif`]; `docs/json.md` documents the JSON and SARIF contracts.

use std::io::{self, Write};

use ariadne::{Color, Config, IndexType, Label, Report, ReportKind, Source};
use serde_json::{json, Value};
use tessera_frontend::diagnostics::Severity;
use tessera_frontend::text::TextRange;

use crate::files::PathError;
pub use crate::report::{FileReport, Run};

#[derive(Copy, Clone, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Format {
    Human,
    Concise,
    Json,
    Sarif,
    Github,
}

pub struct Summary {
    pub files: usize,
    pub errors: usize,
    pub warnings: usize,
}

pub fn summarize(reports: &[FileReport]) -> Summary {
    let mut s = Summary { files: reports.len(), errors: 0, warnings: 0 };
    for d in reports.iter().flat_map(|r| &r.diagnostics) {
        match d.severity {
            Severity::Error => s.errors += 1,
            Severity::Warning => s.warnings += 1,
        }
    }
    s
}

pub fn emit(format: Format, run: &Run, color: bool, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Human => human(run, color, out),
        Format::Concise => {
            concise(run.reports, out)?;
            unreadable_lines(run.unreadable, out)
        }
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &json_report(run))?;
            writeln!(out)
        }
        Format::Sarif => {
            serde_json::to_writer_pretty(&mut *out, &crate::sarif::sarif(run))?;
            writeln!(out)
        }
        Format::Github => github(run, out),
    }
}

fn unreadable_lines(unreadable: &[PathError], out: &mut dyn Write) -> io::Result<()> {
    for e in unreadable {
        writeln!(out, "{}: error: {}", e.path, e.message)?;
    }
    Ok(())
}

fn human(run: &Run, color: bool, out: &mut dyn Write) -> io::Result<()> {
    let reports = run.reports;
    let config = Config::default().with_index_type(IndexType::Byte).with_color(color);
    for report in reports {
        let source = Source::from(report.text.as_str());
        for d in &report.diagnostics {
            let (kind, accent) = match d.severity {
                Severity::Error => (ReportKind::Error, Color::Red),
                Severity::Warning => (ReportKind::Warning, Color::Yellow),
            };
            let span = |r: TextRange| (report.path.as_str(), clamp(r, report.text.len()));
            // A label on the primary range says more than the code's title, so it takes
            // the title's place under the primary span.
            let primary = d.labels.iter().find(|l| l.range == d.range);
            let primary_text = primary.map_or(d.code.title(), |l| l.message.as_str());
            let mut builder = Report::build(kind, span(d.range))
                .with_config(config)
                .with_code(d.code)
                .with_message(&d.message)
                .with_label(Label::new(span(d.range)).with_color(accent).with_order(-1).with_message(primary_text));
            for label in d.labels.iter().filter(|l| l.range != d.range) {
                builder = builder
                    .with_label(Label::new(span(label.range)).with_color(Color::Blue).with_message(&label.message));
            }
            for note in &d.notes {
                builder = builder.with_note(note);
            }
            if let Some(fix) = &d.fix {
                builder = builder.with_help(fix_help(fix, &report.text));
            }
            builder.finish().write((report.path.as_str(), &source), &mut *out)?;
        }
    }
    unreadable_lines(run.unreadable, out)?;
    let s = summarize(reports);
    let unreadable = match run.unreadable.len() {
        0 => String::new(),
        n => format!(" {n} path{} could not be read.", plural(n)),
    };
    if s.errors + s.warnings == 0 && run.unreadable.is_empty() {
        writeln!(out, "All checks passed ({} file{}).", s.files, plural(s.files))
    } else if s.errors + s.warnings == 0 {
        writeln!(out, "No problems in {} file{}.{unreadable}", s.files, plural(s.files))
    } else {
        writeln!(
            out,
            "Found {} error{} and {} warning{} in {} file{}.{unreadable}",
            s.errors,
            plural(s.errors),
            s.warnings,
            plural(s.warnings),
            s.files,
            plural(s.files)
        )
    }
}

fn fix_help(fix: &tessera_frontend::diagnostics::Fix, text: &str) -> String {
    // Show a single-edit replacement inline: "did you mean `load`? (replace `lod`)".
    match fix.edits.as_slice() {
        [edit] if !edit.range.is_empty() && !edit.text.is_empty() => {
            format!("{} (replace `{}` with `{}`)", fix.message, edit.range.slice(text), edit.text)
        }
        _ => fix.message.clone(),
    }
}

fn clamp(r: TextRange, len: usize) -> std::ops::Range<usize> {
    let start = (r.start as usize).min(len);
    let end = (r.end as usize).clamp(start, len);
    start..end
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn concise(reports: &[FileReport], out: &mut dyn Write) -> io::Result<()> {
    for r in reports {
        for d in &r.diagnostics {
            let (line, col) = r.position(d.range.start);
            writeln!(out, "{}:{line}:{col}: {}[{}] {}", r.path, d.severity.as_str(), d.code, d.message)?;
        }
    }
    Ok(())
}

pub fn json_report(run: &Run) -> Value {
    let reports = run.reports;
    let mut diagnostics = Vec::new();
    for r in reports {
        for d in &r.diagnostics {
            let mut obj = json!({
                "file": r.path,
                "severity": d.severity.as_str(),
                "code": d.code.as_str(),
                "message": d.message,
                "range": r.range_json(d.range),
            });
            if !d.labels.is_empty() {
                obj["labels"] = Value::Array(
                    d.labels
                        .iter()
                        .map(|l| json!({"file": r.path, "range": r.range_json(l.range), "message": l.message}))
                        .collect(),
                );
            }
            if !d.notes.is_empty() {
                obj["notes"] = json!(d.notes);
            }
            if let Some(fix) = &d.fix {
                obj["fix"] = json!({
                    "message": fix.message,
                    "edits": fix.edits.iter().map(|e| json!({"range": r.range_json(e.range), "text": e.text})).collect::<Vec<_>>(),
                });
            }
            diagnostics.push(obj);
        }
    }
    let s = summarize(reports);
    let errors: Vec<Value> = run.unreadable.iter().map(|e| json!({"path": e.path, "message": e.message})).collect();
    json!({
        "version": 1,
        "diagnostics": diagnostics,
        "errors": errors,
        "summary": {"files": s.files, "errors": s.errors, "warnings": s.warnings, "unreadable": errors.len()},
    })
}

fn github(run: &Run, out: &mut dyn Write) -> io::Result<()> {
    let reports = run.reports;
    // GitHub workflow commands: values escape %, CR, LF; properties also `:` and `,`.
    let esc = |s: &str| s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A");
    let prop = |s: &str| esc(s).replace(':', "%3A").replace(',', "%2C");
    for r in reports {
        for d in &r.diagnostics {
            let (line, col) = r.position(d.range.start);
            let (end_line, end_col) = r.position(d.range.end);
            let level = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            writeln!(
                out,
                "::{level} title={},file={},line={line},col={col},endLine={end_line},endColumn={end_col}::{}",
                prop(&format!("{} {}", d.code, d.code.title())),
                prop(&r.path),
                esc(&format!("{} {}", d.code, d.message))
            )?;
        }
    }
    for e in run.unreadable {
        writeln!(out, "::error title=unreadable path,file={}::{}", prop(&e.path), esc(&e.message))?;
    }
    Ok(())
}
