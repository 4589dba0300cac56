//! The one override rule: which schedule values and dims a user may set on top of a
//! kernel's own schedule, the same for `tessera lower`/`run`/`autotune`, the language
//! server's `tessera/lowering` request and the explorer's schedule panel.
//!
//! - A schedule key must be one the kernel's schedule defines (the standard keys, its
//!   autotune keys and its fixed keys), and its value must pass the checks E0701 makes
//!   of a written schedule.
//! - A dim must name a shape symbol of the function's signature, with a value ≥ 1.
//!
//! The rule decides; each front door only presents a [`Rejection`]: the CLI as a usage
//! error, the server as an `InvalidParams` error, the explorer as a marked row.

use std::collections::BTreeMap;
use std::fmt;

use tessera_frontend::check::schedule::{canonical_key, validate};
use tessera_frontend::check::{KernelSchedule, KeyValue};

/// User overrides on top of a kernel's own schedule.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Overrides {
    /// Canonical schedule keys (`BM`, not its alias `m`).
    pub schedule: BTreeMap<String, KeyValue>,
    /// Shape symbols and their values.
    pub dims: BTreeMap<String, i64>,
}

impl Overrides {
    pub fn set_schedule(&mut self, key: &str, value: KeyValue) {
        self.schedule.insert(canonical_key(key).to_string(), value);
    }

    pub fn is_empty(&self) -> bool {
        self.schedule.is_empty() && self.dims.is_empty()
    }
}

/// What an override sets.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum OverrideKind {
    Schedule,
    Dims,
}

impl OverrideKind {
    /// The option (`--schedule`, `--dims`) and request field (`schedule`, `dims`) name.
    pub fn name(self) -> &'static str {
        match self {
            OverrideKind::Schedule => "schedule",
            OverrideKind::Dims => "dims",
        }
    }
}

/// An override the rule refused, and why.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Rejection {
    pub kind: OverrideKind,
    pub key: String,
    /// The value as the user wrote it.
    pub value: String,
    pub reason: String,
    /// A dim that names a schedule key: each front door says where to set it instead.
    pub belongs_in_schedule: bool,
}

impl fmt::Display for Rejection {
    /// `BM=100: BM = 100 is neither a power of two nor a multiple of 16`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}: {}", self.key, self.value, self.reason)?;
        if self.belongs_in_schedule {
            write!(f, "; set it as a schedule value")?;
        }
        Ok(())
    }
}

impl Rejection {
    /// As a command-line option error: `--schedule BM=100: ...`.
    pub fn as_option_error(&self) -> String {
        let mut out = format!("--{} {}={}: {}", self.kind.name(), self.key, self.value, self.reason);
        if self.belongs_in_schedule {
            out.push_str(&format!("; use --schedule {}={}", self.key, self.value));
        }
        out
    }
}

/// A schedule value as written (strings unquoted).
pub fn show_value(value: &KeyValue) -> String {
    match value {
        KeyValue::Int(i) => i.to_string(),
        KeyValue::Str(s) => s.clone(),
    }
}

/// Why `key = value` cannot override `kernel`'s schedule, if it cannot.
pub fn schedule_rejection(kernel: &str, schedule: &KernelSchedule, key: &str, value: &KeyValue) -> Option<Rejection> {
    let reason = match validate(key, value) {
        Some(problem) => problem,
        None if !schedule.has_key(key) => {
            format!("`{kernel}` has no schedule key {key} (its keys are {})", schedule.key_names().join(", "))
        }
        None => return None,
    };
    Some(Rejection {
        kind: OverrideKind::Schedule,
        key: key.to_string(),
        value: show_value(value),
        reason,
        belongs_in_schedule: false,
    })
}

/// Why `value` cannot be a dim's value, if it cannot (the value half of the dims rule,
/// which the explorer also applies as a value is typed).
pub fn dim_value_problem(value: i64) -> Option<String> {
    (value < 1).then(|| "a dim must be at least 1".to_string())
}

/// Why `symbol = value` cannot be a dim of `function` (whose signature has `symbols`,
/// every symbol of its dims: `B` and `H` of a `"B*H"` dim too), if it cannot. `schedule`
/// is the kernel's; a graph function has none (`None`), so no name is a schedule key.
pub fn dim_rejection(
    function: &str,
    schedule: Option<&KernelSchedule>,
    symbols: &[String],
    symbol: &str,
    value: i64,
) -> Option<Rejection> {
    let belongs_in_schedule = !symbols.iter().any(|s| s == symbol)
        && schedule.is_some_and(|s| s.has_key(symbol))
        && canonical_key(symbol) == symbol;
    let reason = if !symbols.iter().any(|s| s == symbol) {
        if belongs_in_schedule {
            format!("{symbol} is a schedule key, not a shape symbol")
        } else {
            format!(
                "`{function}` has no shape symbol {symbol} (its shape symbols are {})",
                if symbols.is_empty() { "none".to_string() } else { symbols.join(", ") }
            )
        }
    } else {
        dim_value_problem(value)?
    };
    Some(Rejection {
        kind: OverrideKind::Dims,
        key: symbol.to_string(),
        value: value.to_string(),
        reason,
        belongs_in_schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_checks_values_then_keys() {
        let schedule = KernelSchedule::default();
        let bad_value = schedule_rejection("k", &schedule, "BM", &KeyValue::Int(100)).unwrap();
        assert_eq!(
            bad_value.as_option_error(),
            "--schedule BM=100: BM = 100 is neither a power of two nor a multiple of 16"
        );
        let unknown = schedule_rejection("k", &schedule, "BLOCK", &KeyValue::Int(256)).unwrap();
        assert!(unknown.reason.starts_with("`k` has no schedule key BLOCK (its keys are BM, BN"), "{unknown}");
        assert_eq!(schedule_rejection("k", &schedule, "m", &KeyValue::Int(64)), None, "an alias of BM");
    }

    #[test]
    fn dims_name_signature_symbols_with_positive_values() {
        let schedule = KernelSchedule::default();
        let symbols = vec!["M".to_string(), "N".to_string()];
        assert_eq!(dim_rejection("k", Some(&schedule), &symbols, "M", 4), None);
        assert_eq!(dim_rejection("k", Some(&schedule), &symbols, "M", 0).unwrap().reason, "a dim must be at least 1");
        let unknown = dim_rejection("k", Some(&schedule), &symbols, "Q", 1).unwrap();
        assert_eq!(unknown.as_option_error(), "--dims Q=1: `k` has no shape symbol Q (its shape symbols are M, N)");
        let key = dim_rejection("k", Some(&schedule), &symbols, "BM", 64).unwrap();
        assert_eq!(key.to_string(), "BM=64: BM is a schedule key, not a shape symbol; set it as a schedule value");
        assert!(key.as_option_error().ends_with("; use --schedule BM=64"), "{}", key.as_option_error());
        // A graph function has no schedule: BM is just not one of its shape symbols.
        let graph = dim_rejection("g", None, &symbols, "BM", 64).unwrap();
        assert_eq!(graph.as_option_error(), "--dims BM=64: `g` has no shape symbol BM (its shape symbols are M, N)");
        // Symbols that occur only inside compound dims (`"B*H"`) are shape symbols too.
        let product = vec!["B".to_string(), "H".to_string()];
        assert_eq!(dim_rejection("k", Some(&schedule), &product, "H", 3), None);
        assert!(dim_rejection("k", Some(&schedule), &product, "BH", 6).is_some(), "not a symbol of B*H");
    }
}
