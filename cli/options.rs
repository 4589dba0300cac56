//! Options that `tessera lower`, `run` and `autotune` share: finding the function, and
//! the `KEY=VALUE` lists of `--dims`, `--schedule` and `--arg`. Every error names the
//! option and the offending value (the commands exit 2 with it).

use std::path::PathBuf;

use tessera_frontend::check::schedule::canonical_key;
use tessera_frontend::check::{KernelSchedule, KeyValue, ScheduleValue};
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::session::overrides::schedule_rejection;
use tessera_passes::session::{Analysis, AnalysisHost, Overrides};

/// Parses a size: bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("`{t}` is not a size (bytes, or a number with K, M, G or T)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 =
        digits.trim().parse().map_err(|_| format!("`{t}` is not a size (bytes, or a number with K, M, G or T)"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("`{t}` is too large"))
}

/// Parses `KEY=VALUE` pairs (empty items are skipped: `--dims M=1,,N=2`).
pub fn parse_pairs(pairs: &[String], what: &str) -> Result<Vec<(String, String)>, String> {
    pairs
        .iter()
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("--{what} expects KEY=VALUE, got `{p}`"))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(format!("--{what} expects KEY=VALUE, got `{p}` (no key)"));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn no_duplicates<T>(pairs: &[(String, T)], what: &str) -> Result<(), String> {
    for (i, (k, _)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(j, _)| j == k) {
            return Err(format!("--{what} gives {k} twice"));
        }
    }
    Ok(())
}

/// `--dims M=1024,N=512`: integer values, each symbol once.
pub fn parse_dims(pairs: &[String]) -> Result<Vec<(String, i64)>, String> {
    let mut out = Vec::new();
    for (k, v) in parse_pairs(pairs, "dims")? {
        let value = v.parse::<i64>().map_err(|_| format!("--dims {k}={v}: `{v}` is not an integer"))?;
        out.push((k, value));
    }
    no_duplicates(&out, "dims")?;
    Ok(out)
}

/// `--schedule BM=64,warps=4,swizzle=xor`: parsed only (each key once, aliases
/// included); whether a value may override the kernel's schedule is the session's
/// override rule, applied by [`apply_schedule`] and `Analysis::configure`.
pub fn parse_schedule(pairs: &[String]) -> Result<Vec<(String, KeyValue)>, String> {
    let mut out = Vec::new();
    for (k, v) in parse_pairs(pairs, "schedule")? {
        let value = match v.parse::<i64>() {
            Ok(i) => KeyValue::Int(i),
            Err(_) => KeyValue::Str(v.trim_matches('"').to_string()),
        };
        out.push((k, value));
    }
    let canonical: Vec<(String, ())> = out.iter().map(|(k, _)| (canonical_key(k).to_string(), ())).collect();
    no_duplicates(&canonical, "schedule")?;
    Ok(out)
}

/// The overrides of `--schedule` and `--dims`, for the session.
pub fn overrides(schedule: &[(String, KeyValue)], dims: &[(String, i64)]) -> Overrides {
    let mut out = Overrides::default();
    for (k, v) in schedule {
        out.set_schedule(k, v.clone());
    }
    out.dims = dims.iter().cloned().collect();
    out
}

/// `base` with the `--schedule` values, each checked by the session's override rule
/// (the first refusal is the error, as `--schedule KEY=VALUE: why`).
pub fn apply_schedule(
    base: &ScheduleValue,
    overrides: &[(String, KeyValue)],
    schedule: &KernelSchedule,
    kernel: &str,
) -> Result<ScheduleValue, String> {
    let mut out = base.clone();
    for (k, v) in overrides {
        if let Some(rejected) = schedule_rejection(kernel, schedule, k, v) {
            return Err(rejected.as_option_error());
        }
        out.set(k, v.clone());
    }
    Ok(out)
}

/// `--arg alpha=2.0,eps=1e-6`: the values stay text until the parameter's type is known.
pub fn parse_args(pairs: &[String]) -> Result<Vec<(String, String)>, String> {
    let out = parse_pairs(pairs, "arg")?;
    no_duplicates(&out, "arg")?;
    Ok(out)
}

/// A source file loaded into a fresh analysis session.
pub struct Source {
    pub host: AnalysisHost,
    /// The path as shown in messages.
    pub shown: String,
}

impl Source {
    pub fn load(path: &std::path::Path) -> Result<Source, String> {
        let loaded = crate::files::read(path)?;
        let shown = crate::files::display_path(path);
        let host = AnalysisHost::new(PathBuf::from(&shown), loaded.text, loaded.utf8_error);
        Ok(Source { host, shown })
    }

    pub fn db(&self) -> &Database {
        self.host.db()
    }

    pub fn file(&self) -> SourceFile {
        self.host.file()
    }

    pub fn analysis(&self) -> Analysis<'_> {
        self.host.analysis()
    }

    /// The function named `name` (the session's lookup), or an error listing the
    /// file's functions.
    pub fn function(&self, name: &str) -> Result<FnKey<'_>, String> {
        self.analysis().function(name).map(|f| f.key).map_err(|e| e.message)
    }

    /// `path:line:col: ` for a location in this file's functions (empty when unknown).
    pub fn position(&self, loc: Option<&tessera_passes::ir::Loc>) -> String {
        let Some(loc) = loc else { return String::new() };
        match self.analysis().position(loc) {
            Some((path, line, col)) => format!("{path}:{line}:{col}: "),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn dims_are_integers_given_once() {
        assert_eq!(parse_dims(&strings(&["M=4", " N = 5 ", ""])).unwrap(), vec![("M".into(), 4), ("N".into(), 5)]);
        assert_eq!(parse_dims(&strings(&["M=x"])).unwrap_err(), "--dims M=x: `x` is not an integer");
        assert_eq!(parse_dims(&strings(&["M"])).unwrap_err(), "--dims expects KEY=VALUE, got `M`");
        assert_eq!(parse_dims(&strings(&["M=1", "M=2"])).unwrap_err(), "--dims gives M twice");
        assert!(parse_dims(&strings(&["=3"])).unwrap_err().contains("no key"));
    }

    #[test]
    fn schedule_values_are_validated_and_keys_known() {
        assert!(parse_schedule(&strings(&["m=64", "BM=128"])).unwrap_err().contains("BM twice"));
        let base = ScheduleValue::default_for_kernel();
        let bad = parse_schedule(&strings(&["BM=100"])).unwrap();
        assert_eq!(
            apply_schedule(&base, &bad, &KernelSchedule::default(), "k").unwrap_err(),
            "--schedule BM=100: BM = 100 is neither a power of two nor a multiple of 16"
        );
        let parsed = parse_schedule(&strings(&["BM=64", "swizzle=xor"])).unwrap();
        let s = apply_schedule(&base, &parsed, &KernelSchedule::default(), "k").unwrap();
        assert_eq!(s.int("BM"), Some(64));
        assert_eq!(s.get("swizzle"), Some(&KeyValue::Str("xor".into())));
        let unknown = parse_schedule(&strings(&["BLOCK=256"])).unwrap();
        let e = apply_schedule(&base, &unknown, &KernelSchedule::default(), "k").unwrap_err();
        assert!(e.starts_with("--schedule BLOCK=256: `k` has no schedule key BLOCK (its keys are BM, BN"), "{e}");
    }
}
