//! The one diagnostic model that every front door renders (CLI emitters, LSP, explorer).

use std::fmt;

use crate::text::TextRange;

pub mod name_index;

macro_rules! codes {
    ($($code:ident $sev:ident $title:literal;)*) => {
        /// Stable diagnostic codes (LANGUAGE.md §8). Users and tests match on them.
        #[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub enum Code { $($code,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$code,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$code => stringify!($code),)* }
            }

            pub fn default_severity(self) -> Severity {
                match self { $(Code::$code => Severity::$sev,)* }
            }

            /// A short name of the rule, used as SARIF `shortDescription` and in docs.
            pub fn title(self) -> &'static str {
                match self { $(Code::$code => $title,)* }
            }
        }
    };
}

codes! {
    E0100 Error "syntax error";
    E0101 Error "inconsistent indentation";
    E0102 Error "unterminated string or bracket";
    E0104 Error "source is not valid UTF-8";
    E0200 Error "undefined name";
    E0201 Error "unknown member of a built-in namespace";
    E0202 Error "duplicate definition";
    E0203 Error "unknown decorator";
    E0300 Error "rank mismatch";
    E0301 Error "dimension mismatch";
    E0302 Error "shapes do not broadcast";
    E0303 Error "returned shape differs from the annotation";
    E0304 Error "index or slice out of bounds";
    E0305 Error "return annotation uses an unbound symbol";
    E0306 Error "KV cache capacity exceeded";
    E0310 Error "mesh shape does not match the device count";
    E0311 Error "unknown mesh axis";
    E0312 Error "sharded dimension not divisible by its mesh axis";
    E0313 Error "a mesh axis splits two dims of one tensor";
    E0314 Error "incompatible shardings";
    W0315 Warning "large all-gather on every call";
    E0316 Error "collective whose operand is not laid out for it";
    E0317 Error "pipeline stages do not match the pipeline's mesh axis";
    E0400 Error "mixed or invalid dtypes";
    E0401 Error "unknown dtype";
    E0402 Error "invalid dtype policy";
    E0403 Error "conflicting dtype policies";
    W0404 Warning "low-precision matmul without an accumulation policy";
    W0406 Warning "loss scale is not a power of two";
    W0407 Warning "numerics bound can be violated";
    E0408 Error "probability out of range";
    W0409 Warning "dtype policy without effect here";
    E0500 Error "shared memory budget exceeded";
    E0501 Error "shared-memory race";
    E0502 Error "tensor-core shape not supported";
    E0503 Error "operation used at the wrong level";
    E0504 Error "invalid kernel structure";
    W0600 Warning "register pressure";
    W0601 Warning "shared-memory bank conflict";
    W0602 Warning "low occupancy";
    W0603 Warning "uncoalesced global access";
    W0604 Warning "independent sequential loop";
    W0605 Warning "softmax over a row that may be fully masked";
    W0606 Warning "a partial tile's padding enters a reduction";
    W0607 Warning "a tile window runs past its loop's bound";
    W0608 Warning "a partial tile's padding is an integer divisor";
    W0609 Warning "a read-modify-write through ids";
    E0700 Error "unknown schedule key";
    E0701 Error "invalid schedule value";
    W0702 Warning "autotune candidates pruned";
    E0703 Error "no autotune candidate survives";
    E0704 Error "warpgroup MMA (wgmma) cannot be used here";
    E0706 Error "TMA copies cannot be used here";
    E0707 Error "a producer warpgroup cannot be used here";
    E0708 Error "a thread-block cluster cannot be used here";
    W0705 Warning "autotune key never read";
    E0800 Error "missing parameter annotation";
    E0801 Error "wrong number of arguments";
    E0802 Error "wrong kind of argument";
    E0803 Error "returned value does not match the annotation";
    E0804 Error "unknown keyword argument";
    E0806 Error "gradient of a non-scalar function";
    E0807 Error "gradient of a function that is not @autodiff";
    E0808 Error "operation the transform cannot transform";
    E0809 Error "function that cannot be lowered yet";
    E0900 Error "internal compiler error";
}

impl Code {
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str().eq_ignore_ascii_case(s))
    }

    /// Codes whose check needs a target (LANGUAGE.md §6.4, §7 pruning).
    pub fn is_target_lint(self) -> bool {
        use Code::*;
        matches!(
            self,
            E0500
                | E0501
                | W0600
                | W0601
                | W0602
                | W0603
                | W0604
                | W0605
                | W0606
                | W0607
                | W0608
                | W0609
                | W0702
                | E0703
                | E0704
                | E0706
                | E0707
                | E0708
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A secondary place that explains the diagnostic ("first defined here").
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Label {
    pub range: TextRange,
    pub message: String,
}

/// One text replacement of a fix.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Edit {
    pub range: TextRange,
    pub text: String,
}

/// A structured fix-it: applying every edit resolves the diagnostic.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Fix {
    pub message: String,
    pub edits: Vec<Edit>,
}

/// A diagnostic. Inside per-item analyses its ranges are relative to the item's anchor;
/// `shift` makes them absolute when the file's diagnostics are collected.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub range: TextRange,
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
    pub fix: Option<Fix>,
}

impl Diagnostic {
    pub fn new(code: Code, range: TextRange, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: code.default_severity(),
            message: message.into(),
            range,
            labels: Vec::new(),
            notes: Vec::new(),
            fix: None,
        }
    }

    pub fn with_label(mut self, range: TextRange, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { range, message: message.into() });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn with_fix(mut self, message: impl Into<String>, edits: Vec<Edit>) -> Diagnostic {
        self.fix = Some(Fix { message: message.into(), edits });
        self
    }

    /// The fix "did you mean `suggestion`?": it replaces the text at `range` (the
    /// misspelt name) with `suggestion`.
    pub fn with_did_you_mean(self, range: TextRange, suggestion: &str) -> Diagnostic {
        self.with_fix(format!("did you mean `{suggestion}`?"), vec![Edit { range, text: suggestion.to_string() }])
    }

    pub fn shift(mut self, offset: u32) -> Diagnostic {
        self.range = self.range.shift(offset);
        for label in &mut self.labels {
            label.range = label.range.shift(offset);
        }
        if let Some(fix) = &mut self.fix {
            for edit in &mut fix.edits {
                edit.range = edit.range.shift(offset);
            }
        }
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// A collector that keeps "one root cause, one diagnostic": it refuses a second
/// diagnostic with the same code and range.
#[derive(Default, Clone, PartialEq, Eq, Debug)]
pub struct DiagnosticSink {
    diagnostics: Vec<Diagnostic>,
    /// (code, range) of every diagnostic pushed: a second one at the same place with the
    /// same code is dropped in O(1), so a body with n errors costs O(n), not O(n²).
    seen: std::collections::HashSet<(Code, TextRange)>,
}

impl DiagnosticSink {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        if self.seen.insert((diagnostic.code, diagnostic.range)) {
            self.diagnostics.push(diagnostic);
        }
    }

    pub fn extend(&mut self, diagnostics: impl IntoIterator<Item = Diagnostic>) {
        for d in diagnostics {
            self.push(d);
        }
    }

    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    pub fn len(&self) -> usize {
        self.diagnostics.len()
    }

    pub fn is_empty(&self) -> bool {
        self.diagnostics.is_empty()
    }

    pub fn finish(self) -> Vec<Diagnostic> {
        self.diagnostics
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The closest candidate within a distance that scales with the name's length.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = suggestion_limit(name);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&name.to_ascii_lowercase(), &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= limit.max(usize::from(name.eq_ignore_ascii_case(c))) && *c != name)
        .min_by_key(|(d, c)| (*d, !is_subsequence(name, c), !same_first_char(name, c), c.len()))
        .map(|(_, c)| c)
}

/// How many edits away a suggestion for `name` may be.
fn suggestion_limit(name: &str) -> usize {
    match name.chars().count() {
        // Any two short names are close: `a` → `i` is noise, not a suggestion.
        0..=2 => 0,
        3..=5 => 2,
        _ => 3,
    }
}

/// Typos usually drop letters: `lod` is a subsequence of `load`, not of `log`.
fn is_subsequence(short: &str, long: &str) -> bool {
    let mut it = long.chars().map(|c| c.to_ascii_lowercase());
    short.chars().map(|c| c.to_ascii_lowercase()).all(|c| it.any(|l| l == c))
}

fn same_first_char(a: &str, b: &str) -> bool {
    a.chars().next().map(|c| c.to_ascii_lowercase()) == b.chars().next().map(|c| c.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_prefer_close_names() {
        assert_eq!(suggest("lod", ["load", "store", "dot"]), Some("load"));
        assert_eq!(suggest("lod", ["log", "load"]), Some("load"));
        assert_eq!(suggest("bf32", ["bf16", "f32", "f16"]), Some("f32"));
        assert_eq!(suggest("autotuned", ["autotune", "schedule", "auto"]), Some("autotune"));
        assert_eq!(suggest("zzz", ["load"]), None);
    }

    #[test]
    fn codes_round_trip() {
        for &code in Code::ALL {
            assert_eq!(Code::parse(code.as_str()), Some(code));
        }
    }
}
