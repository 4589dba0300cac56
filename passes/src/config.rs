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

    /// What fills the staged shared buffers on GPU targets (`copy` key).
    pub fn copy(&self) -> tessera_frontend::check::CopyEngine {
        self.schedule.copy()
    }

    /// Whether a producer warpgroup issues the staged TMA copies (`producer` key).
    pub fn producer_warpgroup(&self) -> bool {
        self.schedule.producer_warpgroup()
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

/// The values a configuration gives symbols ([`Config::lookup`]), each looked up once:
/// specialization and the analytic budget estimate evaluate every dim of a kernel per
/// autotune candidate, and a kernel names only a handful of symbols.
pub(crate) struct SymbolValues<'a> {
    config: &'a Config,
    seen: std::cell::RefCell<Vec<(smol_str::SmolStr, Option<i64>)>>,
}

impl<'a> SymbolValues<'a> {
    pub(crate) fn new(config: &'a Config) -> SymbolValues<'a> {
        SymbolValues { config, seen: std::cell::RefCell::new(Vec::new()) }
    }

    pub(crate) fn get(&self, sym: &str) -> Option<i64> {
        if let Some((_, v)) = self.seen.borrow().iter().find(|(s, _)| s == sym) {
            return *v;
        }
        let v = self.config.lookup(sym);
        self.seen.borrow_mut().push((smol_str::SmolStr::new(sym), v));
        v
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
    SymbolSites::of(func).specialized(schedule)
}

/// Where a function's dims and schedule parameters name symbols: what
/// [`specialized_symbols`] reads of it, gathered once so that the configurations of
/// every autotune candidate of a kernel ([`SymbolSites::config`]) do not walk it again.
pub struct SymbolSites {
    /// The distinct dims that are not constants.
    dims: Vec<Dim>,
    /// The keys of its `sched.param` ops.
    params: Vec<String>,
}

impl SymbolSites {
    pub fn of(func: &Func) -> SymbolSites {
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
        // In hash order: the symbols come out sorted.
        let dims: Vec<Dim> = distinct.into_iter().cloned().collect();
        let mut params = Vec::new();
        for id in func.walk() {
            let op = func.op(id);
            if op.kind == OpKind::SchedParam {
                if let Some(key) = op.str_attr("key") {
                    params.push(key.to_string());
                }
            }
        }
        SymbolSites { dims, params }
    }

    /// [`specialized_symbols`] for `schedule`.
    pub fn specialized(&self, schedule: &ScheduleValue) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let known = |s: &str| s == "BLOCK" || schedule.int(s).is_some();
        for d in &self.dims {
            // Most dims are one symbol: a schedule key (substituted away) or a shape
            // symbol (kept), which is what the substitution below would conclude.
            if let Dim::Sym(s) = d {
                if !known(s) && !out.iter().any(|o| o == s.as_str()) {
                    out.push(s.to_string());
                }
                continue;
            }
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
        for key in &self.params {
            if !known(key) && !out.iter().any(|s| s == key) {
                out.push(key.clone());
            }
        }
        out.sort();
        out
    }

    /// [`config_for`] with these sites.
    pub fn config(&self, schedule: ScheduleValue, dims: &BTreeMap<String, i64>) -> (Config, Vec<String>) {
        let mut shapes = BTreeMap::new();
        let mut assumed = Vec::new();
        for sym in self.specialized(&schedule) {
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
}

/// Head dims and other shape symbols get this value when nothing gives one.
pub const DEFAULT_SHAPE: i64 = 64;

/// The one builder of configurations: `schedule` plus a value for every shape symbol
/// `graph` specializes ([`specialized_symbols`]), from `dims` or [`DEFAULT_SHAPE`]. Also returns the symbols
/// assumed. [`default_config`] picks the schedule; the lints and the autotuner
/// (`analysis`) call it with each candidate schedule and no `dims`.
pub fn config_for(graph: &Func, schedule: ScheduleValue, dims: &BTreeMap<String, i64>) -> (Config, Vec<String>) {
    SymbolSites::of(graph).config(schedule, dims)
}

/// The declared defaults of a function's int parameters that its body uses as sizes
/// (shape symbols: `reps: int = 3` as a loop bound): a launch that gives no value takes
/// the default, as a call would, not an assumed size.
pub fn symbol_defaults(db: &dyn tessera_frontend::db::Db, key: tessera_frontend::FnKey<'_>) -> BTreeMap<String, i64> {
    use tessera_frontend::check::{fn_signature, infer_function, Ty};
    let signature = fn_signature(db, key);
    let inference = infer_function(db, key);
    let Some(ast) = tessera_frontend::db::function_def(db, key).clone() else { return BTreeMap::new() };
    signature
        .params
        .iter()
        .zip(&ast.params)
        .filter(|(p, _)| signature.symbols.contains(&p.name))
        .filter_map(|(p, a)| {
            let default = a.default?;
            // The literal as written (a default is not an expression of the body), else
            // what inference made of it (a module constant).
            let value = match ast.arena.expr(default) {
                tessera_frontend::syntax::ast::Expr::Int(v) => Some(*v),
                _ => match inference.type_of(default) {
                    Ty::Int(Some(d)) => d.as_const(),
                    _ => None,
                },
            };
            value.filter(|&v| v >= 1).map(|v| (p.name.clone(), v))
        })
        .collect()
}
