//! How `tessera run` and `tessera autotune` show a check: the reference it used, each
//! output's comparison, non-finite values on either side, and the verdict.

use std::fmt::Write;

use serde_json::{json, Map, Value};
use tessera_backends::launch::{
    CheckKind, CheckReport, MismatchSource, NonFiniteCount, NumericsViolation, OutputCheck, Verdict,
};

use crate::number_text::sig;

pub(crate) fn index_text(name: &str, index: &[usize]) -> String {
    format!("{name}[{}]", index.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "))
}

/// `8192 NaN` / `3 NaN and 2 Inf`.
fn nonfinite_text(c: &NonFiniteCount) -> String {
    match (c.nan, c.inf) {
        (n, 0) => format!("{n} NaN"),
        (0, i) => format!("{i} Inf"),
        (n, i) => format!("{n} NaN and {i} Inf"),
    }
}

/// The `check` lines of the text report.
pub(crate) fn check_lines(s: &mut String, check: &CheckReport, label: &str) {
    match &check.kind {
        CheckKind::Skipped(why) => {
            let _ = writeln!(s, "  {label:<9} none: {why}");
        }
        kind => {
            let how = match kind {
                CheckKind::Sampled { programs, total } => format!("sampled ({programs} of {total} programs run)"),
                _ => "full".to_string(),
            };
            let why = check.reason.as_ref().map(|r| format!(", because {r}")).unwrap_or_default();
            let _ = writeln!(s, "  {label:<9} {how} against {}{why}", check.source.describe());
            for o in &check.outputs {
                output_lines(s, o);
            }
        }
    }
    if let Some(lowering) = &check.lowering {
        check_lines(s, lowering, "lowering");
    }
}

fn output_lines(s: &mut String, o: &OutputCheck) {
    let c = &o.comparison;
    let total = o.dims.iter().product::<usize>();
    let compared =
        if o.compared == total { format!("{total} elements") } else { format!("{} of {total} elements", o.compared) };
    let errors = format!("max abs err {}, max rel err {}", sig(c.max_abs, 3), sig(c.max_rel, 3));
    if let Some((e, a)) = c.length_mismatch {
        let _ = writeln!(s, "            {}: MISMATCH: expected {e} elements, got {a}", o.name);
        return;
    }
    if c.mismatches > 0 {
        let _ = writeln!(
            s,
            "            {}: MISMATCH in {} of {compared} compared, {errors} (tolerance: rtol {} + atol {} x rms {})",
            o.name,
            c.mismatches,
            sig(c.tolerance.rtol, 2),
            sig(c.tolerance.atol, 2),
            sig(c.scale, 3)
        );
    } else if c.expected_nonfinite > 0 && !c.passed {
        let _ = writeln!(
            s,
            "            {}: the reference itself is non-finite in {} of {compared}",
            o.name, c.expected_nonfinite
        );
    } else {
        let _ = writeln!(s, "            {}: ok, {compared} compared, {errors}", o.name);
    }
    if let Some((index, expected, actual)) = &o.first_mismatch {
        let _ = writeln!(
            s,
            "            first mismatch at {}: expected {expected}, got {actual}",
            index_text(&o.name, index)
        );
    }
    if let Some((index, v)) = &o.first_expected_nonfinite {
        let _ = writeln!(
            s,
            "            reference: {} non-finite, first at {} = {v}",
            c.expected_nonfinite,
            index_text(&o.name, index)
        );
    }
    if let Some((index, v)) = &o.first_actual_nonfinite {
        let _ = writeln!(
            s,
            "            result: {} non-finite, first at {} = {v}",
            c.actual_nonfinite,
            index_text(&o.name, index)
        );
    }
}

/// The `numerics` lines: each output that breaks `@verify.numerics(...)`.
pub(crate) fn numerics_lines(s: &mut String, violations: &[NumericsViolation]) {
    for (i, v) in violations.iter().enumerate() {
        let label = if i == 0 { "numerics" } else { "" };
        let (index, value) = &v.first;
        let what = match (v.check, v.bounds) {
            ("bounded", Some((lo, hi))) => format!("{} elements outside bounded=[{lo}, {hi}]", v.count),
            _ => format!("{} NaN/Inf elements under stable=True", v.count),
        };
        let _ = writeln!(
            s,
            "  {label:<9} VIOLATED: {}: {what}, first at {} = {value}",
            v.output,
            index_text(&v.output, index)
        );
    }
}

/// `"numerics"` of the JSON report: the violations, empty when there are none.
pub(crate) fn numerics_json(violations: &[NumericsViolation]) -> Value {
    Value::Array(
        violations
            .iter()
            .map(|v| {
                json!({
                    "output": v.output,
                    "check": v.check,
                    "count": v.count,
                    "bounds": v.bounds.map(|(lo, hi)| json!([num(lo), num(hi)])),
                    "first": {"index": v.first.0, "value": num_or_text(v.first.1)},
                })
            })
            .collect(),
    )
}

/// The `result` line's text.
pub(crate) fn verdict_text(check: &CheckReport, nonfinite: &[NonFiniteCount]) -> String {
    let found: Vec<String> = nonfinite
        .iter()
        .filter(|c| c.total() > 0)
        .map(|c| {
            let first =
                c.first.as_ref().map(|(i, _)| format!(", first at {}", index_text(&c.name, i))).unwrap_or_default();
            format!("{} in {}{first}", nonfinite_text(c), c.name)
        })
        .collect();
    match check.verdict() {
        Verdict::Correct if found.is_empty() => "correct".to_string(),
        Verdict::Correct => format!("correct (non-finite values allowed: {})", found.join("; ")),
        Verdict::Wrong => {
            let against = match (&check.lowering, check.outputs.iter().any(|o| !o.comparison.passed)) {
                (Some(_), false) => "the same-schedule Tile IR interpreter",
                _ => "the reference",
            };
            let mut t = format!("WRONG: the outputs differ from {against}");
            if !found.is_empty() {
                let _ = write!(t, " ({})", found.join("; "));
            }
            t
        }
        Verdict::NonFinite => format!("non-finite ({})", found.join("; ")),
        Verdict::Unchecked if found.is_empty() => "not checked".to_string(),
        Verdict::Unchecked => format!("not checked ({})", found.join("; ")),
    }
}

/// The `cause` line under a WRONG result that carries the same-schedule Tile IR check.
pub(crate) fn cause_text(check: &CheckReport) -> Option<&'static str> {
    check.mismatch_source().map(cause_explanation)
}

/// What a mismatch's source says about where the error is.
pub(crate) fn cause_explanation(source: MismatchSource) -> &'static str {
    match source {
        MismatchSource::TileIr => {
            "the device computes what its Tile IR computes on the interpreter: the kernel's own arithmetic \
             in its dtypes (a formula that loses precision at these inputs) or a Tile IR pass departs from \
             the f64 reference, not code generation"
        }
        MismatchSource::NonFiniteTileIr => {
            "its Tile IR on the interpreter is itself non-finite where the f64 reference is finite, and the \
             device computes what it computes wherever it is finite: the kernel's own arithmetic in its dtypes \
             (a formula that overflows, or cancels below zero, at these inputs) or a Tile IR pass departs from \
             the f64 reference, not code generation"
        }
        MismatchSource::UnstableArithmetic => {
            "its Tile IR on the interpreter departs from the f64 reference too, wherever the device departs from \
             the Tile IR or at most elements: the kernel's own arithmetic in its dtypes loses precision at these \
             inputs (a formula that cancels), so each order of its operations gives another error, or a Tile IR \
             pass departs; whether code generation departs as well cannot be told here: run it where the \
             formula is stable"
        }
        MismatchSource::CodeGeneration => {
            "the device also differs from its Tile IR on the interpreter: code generation or the device is at fault"
        }
    }
}

pub(crate) fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Correct => "correct",
        Verdict::Wrong => "wrong",
        Verdict::NonFinite => "non-finite",
        Verdict::Unchecked => "unchecked",
    }
}

pub(crate) fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// `"outputs"` of the JSON report.
pub(crate) fn outputs_json(check: &CheckReport) -> Vec<Value> {
    check
        .outputs
        .iter()
        .map(|o| {
            let c = &o.comparison;
            json!({
                "name": o.name,
                "dtype": o.dtype.to_string(),
                "dims": o.dims,
                "compared": o.compared,
                "mismatches": c.mismatches,
                "max_abs_err": num(c.max_abs),
                "max_rel_err": num(c.max_rel),
                "rtol": num(c.tolerance.rtol),
                "atol": num(c.tolerance.atol * c.scale),
                "expected_nonfinite": c.expected_nonfinite,
                "actual_nonfinite": c.actual_nonfinite,
                "first_mismatch": o.first_mismatch.as_ref().map(|(i, e, a)| json!({"index": i, "expected": num(*e), "actual": num(*a)})),
                "first_expected_nonfinite": o.first_expected_nonfinite.as_ref().map(|(i, v)| json!({"index": i, "value": num_or_text(*v)})),
                "first_actual_nonfinite": o.first_actual_nonfinite.as_ref().map(|(i, v)| json!({"index": i, "value": num_or_text(*v)})),
            })
        })
        .collect()
}

/// JSON has no NaN or Inf: those become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
fn num_or_text(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        num(x)
    }
}

/// The verdict fields of the JSON report: `reference`, `verdict`, `nonfinite`, and
/// `lowering` for `--check lowering`.
pub(crate) fn insert_verdict_json(obj: &mut Map<String, Value>, check: &CheckReport, nonfinite: &[NonFiniteCount]) {
    obj.insert("reference".into(), json!(check.source.name()));
    obj.insert("verdict".into(), json!(verdict_name(check.verdict())));
    if let Some(source) = check.mismatch_source() {
        obj.insert("mismatch_source".into(), json!(source.name()));
    }
    let counts: Map<String, Value> = nonfinite.iter().map(|c| (c.name.clone(), json!(c.total()))).collect();
    obj.insert("nonfinite".into(), Value::Object(counts));
    if let Some(l) = &check.lowering {
        obj.insert(
            "lowering".into(),
            json!({
                "reference": l.source.name(),
                "check": l.kind.name(),
                "correct": l.passed(),
                "verdict": verdict_name(l.verdict()),
                "outputs": outputs_json(l),
            }),
        );
    }
}
