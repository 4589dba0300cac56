//! The schedule tab's model: its rows (every schedule key and shape symbol of the
//! kernel, where each value comes from), stepping a value through its candidates, and
//! checking typed values. The app applies the edits; the view draws the rows.

use std::collections::BTreeMap;

use tessera_frontend::check::schedule::{canonical_key, choices, validate, STANDARD_KEYS};
use tessera_frontend::check::{KeyValue, ScheduleValue};
use tessera_passes::DEFAULT_SHAPE;

use crate::workspace::{ConfigInfo, Overrides, StageError};
use tessera_passes::session::overrides::dim_value_problem;
use tessera_passes::session::OverrideKind;

/// One row of the schedule panel.
#[derive(Clone, PartialEq, Debug)]
pub struct ScheduleRow {
    pub key: String,
    pub is_dim: bool,
    /// The value in effect.
    pub value: String,
    /// What the user typed, when it differs from what is in effect (an invalid value).
    pub typed: Option<String>,
    pub origin: &'static str,
    pub candidates: Vec<KeyValue>,
    pub error: Option<String>,
}

pub fn parse_value(s: &str) -> KeyValue {
    let s = s.trim();
    match s.parse::<i64>() {
        Ok(i) => KeyValue::Int(i),
        Err(_) => KeyValue::Str(s.trim_matches('"').trim_matches('\'').to_string()),
    }
}

pub fn show_value(v: &KeyValue) -> String {
    match v {
        KeyValue::Int(i) => i.to_string(),
        KeyValue::Str(s) => s.clone(),
    }
}

/// The values stepped through for a key outside the autotune space.
pub fn standard_candidates(key: &str) -> Vec<KeyValue> {
    let ints = |v: &[i64]| v.iter().map(|&i| KeyValue::Int(i)).collect();
    match canonical_key(key) {
        "BM" | "BN" | "BK" | "BD" => ints(&[16, 32, 64, 128, 256]),
        "warps" | "vector" => ints(&[1, 2, 4, 8, 16]),
        "stages" => ints(&[1, 2, 3, 4, 5, 6, 7, 8]),
        "cluster_x" | "cluster_y" => ints(&[1, 2, 4, 8]),
        // Stepped from the default "none" (E0701 lists "xor" first).
        "swizzle" => vec![KeyValue::Str("none".into()), KeyValue::Str("xor".into())],
        // The values E0701 accepts, the default first.
        k @ ("mma" | "copy" | "producer") => {
            choices(k).unwrap_or_default().iter().map(|v| KeyValue::Str((*v).into())).collect()
        }
        _ => Vec::new(),
    }
}

/// The next value after `current` among `candidates` (doubling/halving for integers with
/// no list), or None at either end.
pub fn step_value(current: &KeyValue, candidates: &[KeyValue], forward: bool) -> Option<KeyValue> {
    if candidates.is_empty() {
        let v = current.as_int()?;
        let next = if forward { v.checked_mul(2)? } else { v / 2 };
        return (next >= 1 && next != v).then_some(KeyValue::Int(next));
    }
    match candidates.iter().position(|c| c == current) {
        Some(i) if forward => candidates.get(i + 1).cloned(),
        Some(i) => i.checked_sub(1).map(|j| candidates[j].clone()),
        None => {
            // Not a candidate (typed or fixed): the nearest one in that direction.
            let v = current.as_int();
            let pick = |c: &&KeyValue| match (c.as_int(), v) {
                (Some(c), Some(v)) => {
                    if forward {
                        c > v
                    } else {
                        c < v
                    }
                }
                _ => true,
            };
            if forward {
                candidates.iter().find(pick).cloned()
            } else {
                candidates.iter().rev().find(pick).cloned()
            }
        }
    }
}

/// The values a launch binds: every dim symbol of the signature, from the dims
/// overrides, the configuration's shapes, or the default shape.
pub fn run_dims(config: &Result<ConfigInfo, StageError>, overrides: &Overrides) -> BTreeMap<String, i64> {
    let Ok(info) = config else { return BTreeMap::new() };
    info.symbols
        .iter()
        .map(|s| {
            // A dim the override rule refused (a value below 1) is not launched with.
            let given = overrides.dims.get(s).filter(|_| info.rejection(OverrideKind::Dims, s).is_none());
            let declared = info.symbol_defaults.get(s);
            let v = given.or(info.config.shapes.get(s)).or(declared).copied().unwrap_or(DEFAULT_SHAPE);
            (s.clone(), v)
        })
        .collect()
}

/// The schedule panel's rows: the autotune space's keys first, then the other
/// schedule keys, then the shape symbols (those tiles use, then launch-only ones). On a
/// GPU target the Hopper choices (`mma`, `copy`, `producer`, the cluster shape) are
/// always listed, at their default
/// when nothing sets them, so they can be stepped without knowing they exist.
pub fn rows(
    config: &Result<ConfigInfo, StageError>,
    overrides: &Overrides,
    rejected_edits: &BTreeMap<String, (KeyValue, String)>,
    gpu: bool,
) -> Vec<ScheduleRow> {
    let Ok(info) = config else { return Vec::new() };
    let mut rows = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut push_key = |rows: &mut Vec<ScheduleRow>, key: &str, candidates: Vec<KeyValue>, in_space: bool| {
        let key = canonical_key(key).to_string();
        if seen.contains(&key) {
            return;
        }
        seen.push(key.clone());
        let set = info.config.schedule.get(&key).map(show_value);
        let default = set.is_none().then(|| ScheduleValue::kernel_default(&key).map(|v| show_value(&v))).flatten();
        let value = set.or_else(|| default.clone()).unwrap_or_else(|| "—".into());
        // A rejected edit, or a rejected `--schedule` value from the command line.
        let rejected = rejected_edits.get(&key).map(|(v, e)| (show_value(v), e.clone())).or_else(|| {
            let e = info.rejection(OverrideKind::Schedule, &key)?.reason.clone();
            Some((overrides.schedule.get(&key).map(show_value)?, e))
        });
        let origin = match (&rejected, overrides.schedule.contains_key(&key), in_space) {
            (Some(_), _, _) => "invalid",
            (None, true, _) => "edited",
            (None, false, true) => "space",
            // A key the kernel's schedule writes; the rest (a plain `@kernel`'s BD, say)
            // are the defaults, whether or not the configuration spells them out.
            (None, false, false) if info.written.contains(&key) => "schedule",
            (None, false, false) => "default",
        };
        let (typed, error) = match rejected {
            Some((t, e)) => (Some(t), Some(e)),
            None => (None, None),
        };
        rows.push(ScheduleRow { key, is_dim: false, value, typed, origin, candidates, error });
    };
    for k in &info.space {
        let candidates = k.candidates.iter().map(|(v, _)| v.clone()).collect();
        push_key(&mut rows, &k.key, candidates, true);
    }
    // The standard keys in their one order, whether the configuration sets them or not:
    // an edit that sets a key (stepping `cluster_x` from its default) must not move its
    // row away from the cursor.
    for k in STANDARD_KEYS {
        let hopper = ["mma", "copy", "producer", "cluster_x", "cluster_y"].contains(k);
        let edited = overrides.schedule.keys().any(|o| canonical_key(o) == *k);
        if info.config.schedule.get(k).is_some() || edited || (gpu && hopper) {
            push_key(&mut rows, k, standard_candidates(k), false);
        }
    }
    for k in info.config.schedule.values.keys() {
        push_key(&mut rows, k, standard_candidates(k), false);
    }
    for k in overrides.schedule.keys() {
        push_key(&mut rows, k, standard_candidates(k), false);
    }
    let dims = run_dims(config, overrides);
    let mut dim_names: Vec<&String> = info.config.shapes.keys().collect();
    for s in &info.symbols {
        if !dim_names.contains(&s) {
            dim_names.push(s);
        }
    }
    for s in dim_names {
        let tiles_use = info.config.shapes.contains_key(s);
        let rejected = info.rejection(OverrideKind::Dims, s).map(|r| r.reason.clone());
        let origin = if rejected.is_some() {
            "invalid"
        } else if overrides.dims.contains_key(s) {
            "edited"
        } else if info.assumed.contains(s) {
            "assumed"
        } else if tiles_use {
            "tile dim"
        } else {
            "launch dim"
        };
        rows.push(ScheduleRow {
            key: s.clone(),
            is_dim: true,
            value: dims.get(s).copied().unwrap_or(DEFAULT_SHAPE).to_string(),
            typed: rejected.as_ref().and_then(|_| overrides.dims.get(s)).map(|v| v.to_string()),
            origin,
            candidates: Vec::new(),
            error: rejected,
        });
    }
    rows
}

/// Why typed text is not a valid value for a schedule row (checked as it is typed).
pub fn edit_problem(row: &ScheduleRow, input: &str) -> Option<String> {
    if row.is_dim {
        return match input.trim().parse::<i64>() {
            Ok(v) => dim_value_problem(v),
            Err(_) => Some(format!("{} must be an integer", row.key)),
        };
    }
    if input.trim().is_empty() {
        return Some("type a value".into());
    }
    validate(&row.key, &parse_value(input)).map(|p| format!("E0701: {p}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_step_through_candidates_then_stop() {
        let c = standard_candidates("BM");
        assert_eq!(step_value(&KeyValue::Int(64), &c, true), Some(KeyValue::Int(128)));
        assert_eq!(step_value(&KeyValue::Int(256), &c, true), None);
        assert_eq!(step_value(&KeyValue::Int(96), &c, false), Some(KeyValue::Int(64)));
        assert_eq!(step_value(&KeyValue::Int(96), &c, true), Some(KeyValue::Int(128)));
        assert_eq!(step_value(&KeyValue::Int(8), &[], true), Some(KeyValue::Int(16)));
        assert_eq!(step_value(&KeyValue::Int(1), &[], false), None);
        let s = standard_candidates("swizzle");
        assert_eq!(step_value(&KeyValue::Str("none".into()), &s, true), Some(KeyValue::Str("xor".into())));
    }
}
