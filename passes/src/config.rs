//! A configuration (`Config`): the schedule keys and shape-symbol values one kernel is
//! specialized with, and the one place configurations are built with defaults.

use std::collections::BTreeMap;

use tessera_frontend::check::{Dim, ScheduleValue};

use crate::ir::{Func, OpKind, Type};

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

    /// The tensor-core instruction family of `tile.dot` on GPU targets (`mma` key).
    pub fn mma(&self) -> tessera_frontend::check::MmaFamily {
        self.schedule.mma()
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

/// Shape symbols a configuration specializes: they must be given values (per launch
/// shape) to specialize. These are the symbols that tile, shared-buffer or view dims use
/// after the schedule's keys are substituted (`D` in flash attention's `[BM, D]`
/// accumulator), and the symbols the body reads as values that no parameter binds on
/// its own (`sched.param` ops: `B` and `H` of a `"B*H"` dim in `tile.parallel(0, B*H)`,
/// which no tensor's extent gives separately).
pub fn specialized_symbols(func: &Func, schedule: &ScheduleValue) -> Vec<String> {
    let mut out = Vec::new();
    let known = |s: &str| s == "BLOCK" || schedule.int(s).is_some();
    // Values share a handful of distinct dims: each is substituted once. The lints build
    // a configuration for every autotune candidate of every kernel, so this is on the
    // `tessera check` path.
    let mut distinct: rustc_hash::FxHashSet<&Dim> = rustc_hash::FxHashSet::default();
    for v in &func.values {
        let dims: &[Dim] = match &v.ty {
            Type::Tile(t) => &t.dims,
            Type::Smem(s) => &s.dims,
            Type::View(view) => &view.dims,
            _ => continue,
        };
        distinct.extend(dims.iter().filter(|d| d.as_const().is_none()));
    }
    for d in distinct {
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
    for id in func.walk() {
        let op = func.op(id);
        if op.kind != OpKind::SchedParam {
            continue;
        }
        if let Some(key) = op.str_attr("key") {
            if !known(key) && !out.iter().any(|s| s == key) {
                out.push(key.to_string());
            }
        }
    }
    out.sort();
    out
}

/// Head dims and other shape symbols get this value when nothing gives one.
pub const DEFAULT_SHAPE: i64 = 64;

/// The one builder of configurations: `schedule` plus a value for every shape symbol
/// `graph` specializes ([`specialized_symbols`]), from `dims` or [`DEFAULT_SHAPE`]. Also returns the symbols
/// assumed. [`default_config`] picks the schedule; the lints and the autotuner
/// (`analysis`) call it with each candidate schedule and no `dims`.
pub fn config_for(graph: &Func, schedule: ScheduleValue, dims: &BTreeMap<String, i64>) -> (Config, Vec<String>) {
    let mut shapes = BTreeMap::new();
    let mut assumed = Vec::new();
    for sym in specialized_symbols(graph, &schedule) {
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
