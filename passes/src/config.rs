//! A configuration (`Config`): the schedule keys and shape-symbol values one kernel is
//! specialized with, and the one place configurations are built with defaults.

use std::collections::BTreeMap;

use tessera_frontend::check::{Dim, ScheduleValue};

use crate::ir::{Func, Type};

/// A full specialization: schedule keys plus the values of the shape symbols that tile
/// dims use (`D` in flash attention's `[BM, D]` accumulator).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Config {
    pub schedule: ScheduleValue,
    pub shapes: BTreeMap<String, i64>,
}

impl Config {
    pub fn int(&self, key: &str) -> Option<i64> {
        self.schedule.int(key).or_else(|| self.shapes.get(key).copied())
    }

    /// The value of `sched.param {key}`: `BLOCK` defaults to [`Config::block`].
    pub fn key(&self, key: &str) -> Option<i64> {
        if key == "BLOCK" {
            Some(self.block())
        } else {
            self.int(key)
        }
    }

    pub fn warps(&self) -> u32 {
        self.schedule.warps().clamp(1, 32) as u32
    }

    pub fn stages(&self) -> u32 {
        self.schedule.stages().clamp(1, 8) as u32
    }

    pub fn vector(&self) -> u32 {
        self.schedule.int("vector").unwrap_or(4).clamp(1, 16) as u32
    }

    /// `BLOCK` of `tile.linear_id()`: the schedule's `BLOCK` key, else 1024.
    pub fn block(&self) -> i64 {
        self.schedule.int("BLOCK").unwrap_or(1024)
    }

    /// The value of a symbol in a dim: a schedule key spelled as one (`BM`, not the
    /// alias `m`, which is a shape symbol like saxpy's `n`) or a shape symbol.
    pub(crate) fn lookup(&self, sym: &str) -> Option<i64> {
        match sym {
            "BLOCK" => Some(self.block()),
            s if tessera_frontend::check::schedule::canonical_key(s) == s => self.int(s),
            s => self.shapes.get(s).copied(),
        }
    }
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .schedule
            .values
            .iter()
            .map(|(k, v)| match v {
                tessera_frontend::check::KeyValue::Int(i) => format!("{k}={i}"),
                tessera_frontend::check::KeyValue::Str(s) => format!("{k}={s}"),
            })
            .collect();
        parts.extend(self.shapes.iter().map(|(k, v)| format!("{k}={v}")));
        f.write_str(&parts.join(", "))
    }
}

/// Shape symbols that tile or shared-buffer dims use after the schedule's keys are
/// substituted: they must be given values (per launch shape) to specialize.
pub fn tile_shape_symbols(func: &Func, schedule: &ScheduleValue) -> Vec<String> {
    let mut out = Vec::new();
    for v in &func.values {
        let dims: &[Dim] = match &v.ty {
            Type::Tile(t) => &t.dims,
            Type::Smem(s) => &s.dims,
            Type::View(view) => &view.dims,
            _ => continue,
        };
        for d in dims {
            let d = d.substitute(&|s| match s {
                "BLOCK" => Some(Dim::constant(schedule.int("BLOCK").unwrap_or(1024))),
                s => schedule.int(s).map(Dim::constant),
            });
            for s in d.symbols() {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out.sort();
    out
}

/// Head dims and other shape symbols get this value when nothing gives one.
pub const DEFAULT_SHAPE: i64 = 64;

/// The one builder of configurations: `schedule` plus a value for every shape symbol the
/// tiles of `graph` use, from `dims` or [`DEFAULT_SHAPE`]. Also returns the symbols
/// assumed. [`default_config`] picks the schedule; the lints and the autotuner
/// (`analysis`) call it with each candidate schedule and no `dims`.
pub fn config_for(graph: &Func, schedule: ScheduleValue, dims: &BTreeMap<String, i64>) -> (Config, Vec<String>) {
    let mut shapes = BTreeMap::new();
    let mut assumed = Vec::new();
    for sym in tile_shape_symbols(graph, &schedule) {
        let value = match dims.get(&sym) {
            Some(v) => *v,
            None => {
                assumed.push(sym.clone());
                DEFAULT_SHAPE
            }
        };
        shapes.insert(sym, value);
    }
    (Config { schedule, shapes }, assumed)
}
