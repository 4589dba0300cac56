//! Every diagnostic of a file for a target — the frontend's checks plus the target lints
//! with their fix-its resolved against the text — and the parallel pre-pass that computes
//! the lints first. The one entry point `tessera check`, the server and the explorer use.

use tessera_frontend::check::at_derived_name;
use tessera_frontend::db::{derived_kernel, function_def, item_index, stdlib_derived};
use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey, SourceFile};

use crate::analysis;
use crate::target::Target;

/// Computes the target lints of every function of `file` on `threads` threads, each with
/// its own database handle, so that a following [`file_diagnostics`] finds them memoized.
/// Target lints dominate a file's check (every autotune candidate of every kernel is
/// lowered), and `file_diagnostics` alone keeps one core busy. A failure (a panic, or
/// salsa cancelling the work after a newer edit) ends that thread quietly: whoever asks
/// `file_diagnostics` next meets it again and reports it.
pub fn prefetch_lints(db: &tessera_frontend::Database, file: SourceFile, target: Target, threads: usize) {
    if threads < 2 {
        return;
    }
    let Ok(functions) = crate::session::capture::catch("listing the functions", || {
        item_index(db, file)
            .functions
            .iter()
            .map(|f| (f.key.name(db).to_string(), f.key.ordinal(db)))
            .collect::<Vec<_>>()
    }) else {
        return;
    };
    let threads = threads.min(functions.len());
    if threads < 2 {
        return;
    }
    std::thread::scope(|scope| {
        for t in 0..threads {
            let db = db.clone();
            let mine: Vec<&(String, u32)> = functions.iter().skip(t).step_by(threads).collect();
            scope.spawn(move || {
                let _ = crate::session::capture::catch("computing target lints", || {
                    for (name, ordinal) in mine {
                        let key = FnKey::new(&db, file, name.clone(), *ordinal);
                        analysis::kernel_lints(&db, key, target);
                    }
                });
            });
        }
    });
}

/// Every diagnostic of a file for a target: the frontend's checks plus the target
/// lints. The CLI, the language server and the explorer all call this one function.
pub fn file_diagnostics(db: &dyn Db, file: SourceFile, target: Target) -> Vec<Diagnostic> {
    let mut out = tessera_frontend::check::file_diagnostics(db, file).clone();
    let text = file.text(db);
    let index = item_index(db, file);
    let before = out.len();
    for entry in &index.functions {
        // A graph function lowering refuses (E0809), unless an error the checker reported
        // is in it or points into it (the transform a refused E0808 op is under): that
        // error is the reason, and says it better.
        if let Some(d) = crate::errors::lowering_diagnostic(db, entry.key) {
            let inside = |r: TextRange| r.start >= entry.range.start && r.start < entry.range.end;
            let reported = out[..before]
                .iter()
                .any(|d| d.is_error() && (inside(d.range) || d.labels.iter().any(|l| inside(l.range))));
            if !reported {
                out.push(d.shift(entry.anchor));
            }
        }
        // A sharded graph function's layouts that no collective reconciles (E0314).
        for d in crate::dist::function::sharding_diagnostics(db, entry.key) {
            out.push(d.shift(entry.anchor));
        }
        let lints = analysis::kernel_lints(db, entry.key, target);
        // A derived kernel's lints are its schedule's: those at the kernel's name go to
        // the assignment's name, those in the body stay there with a label at it.
        let derived = derived_kernel(db, entry.key).and_then(|d| {
            let def = function_def(db, d.original).clone()?;
            Some((def.name_range.shift(entry.anchor), def.name.to_string()))
        });
        if let Some(d) = stdlib_derived(db, entry.key) {
            // A standard-library body: every lint goes to the assignment's name.
            let (name, original) = (entry.key.name(db), d.original.name(db));
            for lint in lints.body.iter().chain(&lints.decorators) {
                out.push(at_derived_name(lint.diagnostic.clone(), entry.name_range, name, original));
            }
            continue;
        }
        for (lints, offset) in [(&lints.body, entry.anchor), (&lints.decorators, entry.range.start)] {
            for lint in lints {
                let mut d = lint.diagnostic.clone().shift(offset);
                if let Some((def_name, original)) = &derived {
                    d = for_derived(d, entry.key.name(db), entry.name_range, *def_name, original);
                }
                if let Some((message, request)) = &lint.fix {
                    if let Some(edits) = resolve_fix(text, request, offset) {
                        d = d.with_fix(message.clone(), edits);
                    }
                }
                out.push(d);
            }
        }
    }
    if out.len() > before {
        tessera_frontend::check::sort_diagnostics(&mut out);
    }
    out
}

/// A lint of the derived kernel `name = original.with_schedule(S)` (at `name_range`),
/// computed on `original`'s body (whose name is at `def_name`).
fn for_derived(
    mut d: Diagnostic,
    name: &str,
    name_range: TextRange,
    def_name: TextRange,
    original: &str,
) -> Diagnostic {
    d.message = format!("{} (in `{name} = {original}.with_schedule(...)`)", d.message);
    if d.range == def_name {
        d.range = name_range;
        for label in &mut d.labels {
            if label.range == def_name {
                label.range = name_range;
            }
        }
        d
    } else {
        d.with_label(name_range, format!("`{name}`'s schedule"))
    }
}

/// Turns a fix request (relative to `offset`) into edits of the source text, or None
/// when the text is not what the request expects.
fn resolve_fix(
    text: &str,
    request: &analysis::FixRequest,
    offset: u32,
) -> Option<Vec<tessera_frontend::diagnostics::Edit>> {
    use tessera_frontend::diagnostics::Edit;
    match request {
        analysis::FixRequest::BarrierBefore(range) => {
            let at = (range.start + offset) as usize;
            let line_start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
            let indent: String = text[line_start..].chars().take_while(|c| *c == ' ').collect();
            Some(vec![Edit { range: TextRange::empty(line_start as u32), text: format!("{indent}tile.barrier()\n") }])
        }
        analysis::FixRequest::AddKeyword { call, keyword, value } => {
            let range = call.shift(offset);
            let call_text = range.slice(text);
            if !call_text.ends_with(')') || call_text.contains(&format!("{keyword}=")) {
                return None;
            }
            let close = range.end - 1;
            Some(vec![Edit { range: TextRange::empty(close), text: format!(", {keyword}={value}") }])
        }
        analysis::FixRequest::Replace { within, from, to } => {
            let range = within.shift(offset);
            let found = range.slice(text).find(from.as_str())? as u32 + range.start;
            Some(vec![Edit { range: TextRange::new(found, found + from.len() as u32), text: to.clone() }])
        }
    }
}
