//! The autotuner (LANGUAGE.md §7): a kernel's search space, pruned with the resource
//! checks of W0702/E0703 (shared memory, registers, tensor-core shapes, lowering), each
//! survivor measured on a device and checked against one reference run, and the winner
//! kept in a persistent cache keyed by (kernel source hash, shapes, dtypes, target).
//!
//! # The cache
//! One plain JSON file per key, `<dir>/<kernel>-<16 hex digits>.json`, where `dir` is the
//! kernel's `cache=` (relative to the current directory) or `.tessera/schedules`, and the
//! digits hash the whole key. The file repeats the key (a lookup checks it field by
//! field), the winner's schedule, and every measured configuration. Files are written to
//! a temporary name in the same directory and renamed, so a reader never sees half a
//! file. The key's `source_hash` covers the kernel's text (decorators included), its
//! Graph IR (so edits to helpers it inlines count) and the toolchain version; `device`
//! is part of the key beside `target`, so timings taken by the interpreter never pick a
//! GPU's schedule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use tessera_frontend::check::{KeyValue, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Db, FnKey};
use tessera_passes::abi::AbiParam;
use tessera_passes::analysis::prune_candidates;
use tessera_passes::{graph_ir, Config, Target};

use crate::launch::{
    self, Backend, CheckMode, Device, KernelInfo, LaunchError, Outcome, Plan, PlanRequest, Reference, RunOptions,
};

/// Where a kernel's cache lives: its `cache=` directory, else `.tessera/schedules`.
pub fn cache_dir(info: &KernelInfo) -> PathBuf {
    PathBuf::from(info.schedule.cache.clone().unwrap_or_else(|| ".tessera/schedules".to_string()))
}

/// What a tuned schedule is valid for.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CacheKey {
    pub kernel: String,
    pub source_hash: String,
    /// Every shape symbol's value, in the signature's order.
    pub shapes: Vec<(String, i64)>,
    /// Every tensor parameter's dtype.
    pub dtypes: Vec<(String, String)>,
    pub target: Target,
    pub device: Device,
}

/// FNV-1a, 64 bits: stable across runs, platforms and Rust versions.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl CacheKey {
    pub fn of(
        db: &dyn Db,
        key: FnKey<'_>,
        plan: &Plan,
        shapes: &[(String, i64)],
        target: Target,
        device: Device,
    ) -> CacheKey {
        let file = key.file(db);
        let text = file.text(db);
        let item = item_index(db, file)
            .functions
            .iter()
            .find(|f| f.key == key)
            .map(|f| f.range.slice(text).to_string())
            .unwrap_or_default();
        let graph = match graph_ir(db, key) {
            Ok(g) => format!("{g:?}"),
            Err(e) => e.message.clone(),
        };
        let mut bytes = Vec::new();
        bytes.extend_from_slice(item.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(graph.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
        let dtypes = plan
            .abi
            .params
            .iter()
            .filter_map(|p| match p {
                AbiParam::Tensor { name, dtype, .. } => Some((name.to_string(), dtype.to_string())),
                _ => None,
            })
            .collect();
        CacheKey {
            kernel: key.name(db).to_string(),
            source_hash: format!("{:016x}", fnv1a(&bytes)),
            shapes: shapes.to_vec(),
            dtypes,
            target,
            device,
        }
    }

    pub fn to_json(&self) -> Value {
        let shapes: Map<String, Value> = self.shapes.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let dtypes: Map<String, Value> = self.dtypes.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({
            "kernel": self.kernel,
            "source_hash": self.source_hash,
            "shapes": shapes,
            "dtypes": dtypes,
            "target": self.target.name(),
            "device": self.device.name(),
        })
    }

    /// The cache file's name: the kernel and a hash of the whole key.
    pub fn file_name(&self) -> String {
        let safe: String =
            self.kernel.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        format!("{safe}-{:016x}.json", fnv1a(self.to_json().to_string().as_bytes()))
    }
}

/// A cached winner.
#[derive(Clone, PartialEq, Debug)]
pub struct CacheEntry {
    pub key: CacheKey,
    pub winner: ScheduleValue,
    pub metric: String,
    pub median_ms: f64,
    pub min_ms: f64,
    /// Seconds since the Unix epoch.
    pub tuned_at: u64,
    pub device_name: String,
    /// Every measured configuration (schedule, median ms or the error), for reports.
    pub results: Vec<Value>,
}

pub fn schedule_json(s: &ScheduleValue) -> Value {
    let map: Map<String, Value> = s
        .values
        .iter()
        .map(|(k, v)| {
            let v = match v {
                KeyValue::Int(i) => json!(i),
                KeyValue::Str(s) => json!(s),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// A schedule from its JSON object (every value validated as E0701 does).
pub fn schedule_from_json(v: &Value) -> Result<ScheduleValue, String> {
    let obj = v.as_object().ok_or("`winner` is not an object")?;
    let mut s = ScheduleValue::default();
    for (k, v) in obj {
        let value = match v {
            Value::Number(n) => KeyValue::Int(n.as_i64().ok_or_else(|| format!("`{k}` is not an integer"))?),
            Value::String(t) => KeyValue::Str(t.clone()),
            _ => return Err(format!("`{k}` is neither an integer nor a string")),
        };
        if let Some(problem) = tessera_frontend::check::schedule::validate(k, &value) {
            return Err(format!("`{k}`: {problem}"));
        }
        s.set(k, value);
    }
    Ok(s)
}

impl CacheEntry {
    pub fn to_json(&self) -> Value {
        json!({
            "version": 1,
            "key": self.key.to_json(),
            "winner": schedule_json(&self.winner),
            "metric": self.metric,
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "tuned_at": self.tuned_at,
            "device_name": self.device_name,
            "results": self.results,
        })
    }
}

/// The cache file for `key`, if there is one whose key matches; a file that cannot be
/// read or does not match is an error naming it (callers warn and tune again).
pub fn lookup(dir: &Path, key: &CacheKey) -> Result<Option<(PathBuf, CacheEntry)>, String> {
    let path = dir.join(key.file_name());
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let bad = |why: String| format!("ignoring {}: {why}", path.display());
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
    if v.get("version").and_then(Value::as_u64) != Some(1) {
        return Err(bad("unknown version".into()));
    }
    if v.get("key") != Some(&key.to_json()) {
        // A hash collision or a hand-edited file: not this key.
        return Ok(None);
    }
    let winner = schedule_from_json(v.get("winner").unwrap_or(&Value::Null)).map_err(bad)?;
    let num = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let entry = CacheEntry {
        key: key.clone(),
        winner,
        metric: v.get("metric").and_then(Value::as_str).unwrap_or("latency_ms").to_string(),
        median_ms: num("median_ms"),
        min_ms: num("min_ms"),
        tuned_at: v.get("tuned_at").and_then(Value::as_u64).unwrap_or(0),
        device_name: v.get("device_name").and_then(Value::as_str).unwrap_or("").to_string(),
        results: v.get("results").and_then(Value::as_array).cloned().unwrap_or_default(),
    };
    Ok(Some((path, entry)))
}

/// Writes the entry atomically (a temporary file in the same directory, then a rename).
pub fn store(dir: &Path, entry: &CacheEntry) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(entry.key.file_name());
    let mut text = serde_json::to_string_pretty(&entry.to_json()).map_err(std::io::Error::other)?;
    text.push('\n');
    let result = crate::files::write_atomic(&path, text.as_bytes());
    result.map(|_| path)
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

// ----- the space ---------------------------------------------------------------------

pub use tessera_passes::analysis::PruneReason;

#[derive(Clone, PartialEq, Debug)]
pub struct Candidate {
    pub schedule: ScheduleValue,
    pub config: Config,
}

#[derive(Clone, PartialEq, Debug)]
pub struct Pruned {
    pub schedule: ScheduleValue,
    pub reason: PruneReason,
}

/// A kernel's search space at some dims, for a target.
#[derive(Clone, PartialEq, Debug)]
pub struct Space {
    /// The keys the space varies (canonical names, in the decorator's order).
    pub keys: Vec<String>,
    pub total: usize,
    pub candidates: Vec<Candidate>,
    pub pruned: Vec<Pruned>,
}

impl Space {
    /// "3 of 32 pruned on sm_90 (2 by shared memory, 1 by registers)".
    pub fn pruning_summary(&self, target: Target) -> Option<String> {
        if self.pruned.is_empty() {
            return None;
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &self.pruned {
            *counts.entry(p.reason.category()).or_default() += 1;
        }
        let by: Vec<String> = counts.iter().map(|(what, n)| format!("{n} by {what}")).collect();
        Some(format!("{} of {} configurations pruned on {target} ({})", self.pruned.len(), self.total, by.join(", ")))
    }
}

/// Every configuration of the kernel's space (`KernelSchedule::configurations()`) at these
/// dims, pruned with the checks of W0702/E0703: tensor-core shape multiples, lowering
/// errors, and on GPU targets the shared-memory and register budgets of
/// `kernel_budget` (the same search over the space the lints use, here with the
/// launch's tile shape values: `tessera_passes::analysis::prune_candidates`).
pub fn space(
    db: &dyn Db,
    key: FnKey<'_>,
    info: &KernelInfo,
    dims: &BTreeMap<String, i64>,
    target: Target,
) -> Result<Space, LaunchError> {
    // `@kernel.auto` searches its default space on this target (`tessera_passes::auto_space`).
    let mut schedule = info.schedule.clone();
    tessera_passes::auto_space::fill_auto_space(db, key, &mut schedule, target);
    let keys: Vec<String> = schedule.canonical_space_keys();
    let configurations = schedule.configurations();
    let total = configurations.len();
    let mut out = Space { keys, total, candidates: Vec::new(), pruned: Vec::new() };
    let configs = configurations
        .iter()
        .map(|schedule| launch::config_for(db, key, schedule.clone(), dims))
        .collect::<Result<Vec<_>, _>>()?;
    let reasons = prune_candidates(db, key, &configs, target, Vec::new());
    for ((schedule, config), reason) in configurations.into_iter().zip(configs).zip(reasons) {
        match reason {
            Some(reason) => out.pruned.push(Pruned { schedule, reason }),
            None => out.candidates.push(Candidate { schedule, config }),
        }
    }
    Ok(out)
}

// ----- measuring ---------------------------------------------------------------------

/// One measured configuration.
#[derive(Clone, Debug)]
pub struct Measured {
    pub schedule: ScheduleValue,
    pub outcome: Result<Outcome, LaunchError>,
}

impl Measured {
    /// Correct and timed: eligible to win.
    pub fn eligible(&self) -> bool {
        matches!(&self.outcome, Ok(o) if o.check.passed() != Some(false) && o.timing.median_ms.is_finite())
    }

    pub fn median_ms(&self) -> f64 {
        self.outcome.as_ref().map_or(f64::INFINITY, |o| o.timing.median_ms)
    }
}

/// What the tuner reports as it goes.
#[derive(Clone, Debug)]
pub enum Progress {
    /// The reference interpreter is running (once, before the candidates).
    Reference,
    Started {
        index: usize,
        total: usize,
        schedule: ScheduleValue,
    },
    Finished {
        index: usize,
        total: usize,
        median_ms: Option<f64>,
    },
}

/// How to measure.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub run: RunOptions,
    pub target: Target,
    pub dims: BTreeMap<String, i64>,
    pub args: Vec<(String, String)>,
    pub seed: u64,
    /// `--max-memory` (see `PlanRequest::max_memory`).
    pub max_memory: Option<u64>,
}

/// Everything a search found.
#[derive(Clone, Debug)]
pub struct Tuned {
    /// Sorted: eligible configurations by median time, then the incorrect, then failures.
    pub measured: Vec<Measured>,
    /// Index into `measured` of the winner, if any configuration was correct.
    pub winner: Option<usize>,
    /// The plan of the first candidate (its inputs and work are every candidate's).
    pub plan: Option<Plan>,
    pub reference: Option<Reference>,
}

/// Measures every candidate of `space` on `backend` (see the module doc). Each candidate
/// is checked against one reference run (the first candidate's CPU Tile IR, whole or
/// sampled as `options.run.check` says): every configuration computes the same function.
pub fn tune(
    db: &dyn Db,
    key: FnKey<'_>,
    info: &KernelInfo,
    space: &Space,
    backend: &dyn Backend,
    options: &TuneOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Tuned, LaunchError> {
    let total = space.candidates.len();
    let mut measured = Vec::new();
    let mut reference: Option<Reference> = None;
    let mut first_plan: Option<Plan> = None;
    for (index, candidate) in space.candidates.iter().enumerate() {
        progress(Progress::Started { index, total, schedule: candidate.schedule.clone() });
        let request = PlanRequest {
            target: options.target,
            config: candidate.config.clone(),
            dims: options.dims.clone(),
            args: options.args.clone(),
            seed: options.seed,
            code: backend.needs_code(),
            max_memory: options.max_memory,
        };
        let outcome: Result<Outcome, LaunchError> = (|| {
            let plan = launch::plan(db, key, info, &request)?;
            if reference.is_none() && options.run.check != CheckMode::None {
                progress(Progress::Reference);
                reference = Some(Reference::compute(&plan, options.run.check)?);
            }
            let mut loaded = backend.load(&plan)?;
            let outcome = launch::execute_loaded(&plan, backend, loaded.as_mut(), &options.run, reference.as_ref())?;
            if first_plan.is_none() {
                first_plan = Some(plan);
            }
            Ok(outcome)
        })();
        // Input errors (a bad --arg) are the same for every candidate: stop at once.
        if let Err(e) = &outcome {
            if e.kind == launch::ErrorKind::Input {
                return Err(e.clone());
            }
        }
        let median = outcome.as_ref().ok().map(|o| o.timing.median_ms);
        progress(Progress::Finished { index, total, median_ms: median });
        measured.push(Measured { schedule: candidate.schedule.clone(), outcome });
    }
    let class = |m: &Measured| match &m.outcome {
        Ok(_) if m.eligible() => 0,
        Ok(_) => 1,
        Err(_) => 2,
    };
    measured.sort_by(|a, b| class(a).cmp(&class(b)).then(a.median_ms().total_cmp(&b.median_ms())));
    let winner = measured.first().filter(|m| m.eligible()).map(|_| 0);
    Ok(Tuned { measured, winner, plan: first_plan, reference })
}

/// The cache entry for a search's winner.
pub fn entry_for(key: CacheKey, info: &KernelInfo, tuned: &Tuned, device_name: &str) -> Option<CacheEntry> {
    let w = &tuned.measured[tuned.winner?];
    let o = w.outcome.as_ref().ok()?;
    let work = tuned.plan.as_ref().map(launch::work);
    let results = tuned
        .measured
        .iter()
        .map(|m| match &m.outcome {
            Ok(o) => json!({
                "schedule": schedule_json(&m.schedule),
                "median_ms": o.timing.median_ms,
                "min_ms": o.timing.min_ms,
                "tflops": work.as_ref().and_then(|w| w.tflops(o.timing.median_ms)),
                "gbps": work.as_ref().and_then(|w| w.gbps(o.timing.median_ms)),
                "work_unit": work.as_ref().map(|w| w.op_unit()),
                "correct": o.check.passed(),
                "mismatch_source": o.check.mismatch_source().map(|c| c.name()),
            }),
            Err(e) => json!({ "schedule": schedule_json(&m.schedule), "error": e.message }),
        })
        .collect();
    Some(CacheEntry {
        key,
        winner: w.schedule.clone(),
        metric: info.schedule.metric.clone().unwrap_or_else(|| "latency_ms".to_string()),
        median_ms: o.timing.median_ms,
        min_ms: o.timing.min_ms,
        tuned_at: now_secs(),
        device_name: device_name.to_string(),
        results,
    })
}

/// The per-configuration time budget of a kernel's `budget_ms=`.
pub fn budget(info: &KernelInfo) -> Option<Duration> {
    info.schedule.budget_ms.filter(|&ms| ms > 0).map(|ms| Duration::from_millis(ms as u64))
}
