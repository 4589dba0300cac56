//! Code with errors never reaches a backend. Before a function is lowered, its own
//! errors (syntax errors inside its text, signature and body errors) and those of every
//! user function it calls are looked up; the first one stops the lowering and is named.
//!
//! Ranges are item-relative, so the answer stays equal when code elsewhere in the file
//! moves, and salsa does not lower the function again after such an edit.

use tessera_frontend::check::{const_value, fn_signature, infer_function, Resolution};
use tessera_frontend::db::{derived_kernel, item_index, parse};
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::text::TextRange;
use tessera_frontend::{Db, FnKey};

/// The first error of a function.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FirstError {
    pub code: Code,
    pub message: String,
    /// Relative to the function's anchor (its first byte).
    pub range: TextRange,
}

/// The first error inside one function: a syntax or lexical error in its text, else the
/// first error of its signature or body.
#[salsa::tracked(returns(ref))]
pub fn own_first_error<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<FirstError> {
    let file = key.file(db);
    if let Some(entry) = item_index(db, file).functions.iter().find(|f| f.key == key) {
        let syntax = parse(db, file).diagnostics.iter().find(|d| {
            d.is_error()
                && d.range.start >= entry.range.start
                && d.range.start < entry.range.end.max(entry.range.start + 1)
        });
        if let Some(d) = syntax {
            // An error in the decorators lies before the `def` anchor: point at the name.
            let at = if d.range.start >= entry.anchor { d.range } else { entry.name_range };
            let range = TextRange::new(at.start - entry.anchor, at.end.max(at.start) - entry.anchor);
            return Some(FirstError { code: d.code, message: d.message.clone(), range });
        }
    }
    if let Some(derived) = *derived_kernel(db, key) {
        // A derived kernel: its assignment's errors (relative to the assignment, so
        // pointed at the kernel's name here), then its original's.
        let value = const_value(db, derived.assignment);
        if let Some(d) = value.diagnostics.iter().find(|d| d.is_error()) {
            let entry = item_index(db, file).functions.iter().find(|f| f.key == key);
            let range = entry.map_or(TextRange::new(0, 0), |e| {
                TextRange::new(e.name_range.start.saturating_sub(e.anchor), e.name_range.end.saturating_sub(e.anchor))
            });
            return Some(FirstError { code: d.code, message: d.message.clone(), range });
        }
        if let Some(e) = own_first_error(db, derived.original) {
            return Some(e.clone());
        }
    }
    let signature = fn_signature(db, key);
    let inference = infer_function(db, key);
    signature.diagnostics.iter().chain(&inference.diagnostics).find(|d| d.is_error()).map(|d: &Diagnostic| FirstError {
        code: d.code,
        message: d.message.clone(),
        range: d.range,
    })
}

/// The first error of `key` or of a user function it reaches through calls (depth
/// first, in the order of the calls), with the name of the function that has it.
pub fn reachable_error(db: &dyn Db, key: FnKey<'_>) -> Option<(String, FirstError)> {
    // A derived standard-library kernel's body calls what its own file defines.
    let file = tessera_frontend::db::home_file(db, key);
    let mut stack = vec![key];
    let mut seen = vec![key];
    while let Some(k) = stack.pop() {
        if let Some(e) = own_first_error(db, k) {
            return Some((k.name(db).to_string(), e.clone()));
        }
        let inference = infer_function(db, k);
        let mut callees = Vec::new();
        for (_, r) in &inference.resolutions {
            let Resolution::Function(name) = r else { continue };
            let Some(entry) = item_index(db, file).function(db, name) else {
                continue;
            };
            if !seen.contains(&entry.key) {
                seen.push(entry.key);
                callees.push(entry.key);
            }
        }
        // Depth first, in call order.
        stack.extend(callees.into_iter().rev());
    }
    None
}

/// E0809: a `@jit`/`@autodiff` function or a kernel whose own code is free of errors but
/// which Graph IR lowering refuses (an operation it does not support yet, such as `grad`
/// through an op with no backward rule). `tessera check` reports it where `tessera run`
/// and `tessera lower` would stop, instead of passing code nothing can compile. An
/// internal error of lowering is E0900. Relative to the function's anchor.
pub fn lowering_diagnostic(db: &dyn Db, key: FnKey<'_>) -> Option<Diagnostic> {
    use tessera_frontend::check::FunctionKind;
    let kind = fn_signature(db, key).kind;
    if !matches!(kind, FunctionKind::Graph | FunctionKind::Kernel)
        || reachable_error(db, key).is_some()
        || (kind == FunctionKind::Kernel && crate::queries::decorator_error(db, key).is_some())
    {
        return None;
    }
    let name = key.name(db);
    if let Err(e) = crate::queries::graph_ir(db, key) {
        return Some(Diagnostic::new(lowering_code(e), e.range, format!("`{name}` cannot be lowered: {}", e.message)));
    }
    // A graph function runs as the kernels it is planned into: a construct the planner
    // does not map yet (`flash_attention` of f16 tensors) stops `tessera run`, so check
    // says so here.
    if kind == FunctionKind::Graph {
        if let Err(e) = crate::graph_plan::graph_plan(db, key) {
            let name_range = tessera_frontend::db::function_def(db, key).as_ref().map(|d| d.name_range);
            let at = if e.range == Default::default() { name_range.unwrap_or_default() } else { e.range };
            return Some(Diagnostic::new(
                lowering_code(e),
                at,
                format!("`{name}` cannot be planned into kernels: {}", e.message),
            ));
        }
    }
    None
}

/// The code of a lowering refusal: E0809, or E0900 for an internal error (a bug).
pub fn lowering_code(e: &crate::error::LowerError) -> Code {
    if e.message.starts_with("internal error") {
        Code::E0900
    } else {
        Code::E0809
    }
}
