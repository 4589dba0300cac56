//! `tessera autotune FILE --kernel NAME --dims ...` (TOOLS.md §3, LANGUAGE.md §7): the
//! kernel's space pruned as W0702/E0703 prune it, every survivor measured on the device
//! (a progress bar on a terminal), a table sorted by time, and the winner cached for
//! `tessera run`. A second search with the same key is a cache hit unless `--force`.
//!
//! Exit status: 0 a winner (found or cached); 1 no configuration survives or none is
//! correct; 2 the tool could not do its job.

use std::io::IsTerminal;
use std::path::PathBuf;

use serde_json::{json, Value};
use tessera_backends::autotune::{self, schedule_json, CacheEntry, Measured, Progress, Space, TuneOptions, Tuned};
use tessera_backends::launch::{self, CheckKind, CheckMode, Device, DeviceRequest, MismatchSource, RunOptions};
use tessera_frontend::check::{KeyValue, ScheduleValue};
use tessera_passes::Target;

use crate::failure::{refuse_errors, Failure};
use crate::launch_setup::{self, Setup};
use crate::number_text::sig;
use crate::options::Source;
use crate::parsers::{parse_check, parse_device};
use crate::verdict::cause_explanation;

#[derive(clap::Args, Debug)]
pub struct AutotuneArgs {
    /// The source file.
    pub file: PathBuf,
    /// The kernel to tune (it must have an autotune space).
    #[arg(long, value_name = "NAME")]
    pub kernel: String,
    /// Values of the shape symbols (M=4096,N=4096,K=4096): the cache key's shapes.
    #[arg(long, value_delimiter = ',', value_name = "SYM=VALUE")]
    pub dims: Vec<String>,
    /// Scalar arguments (alpha=2.0,...), as for `tessera run`.
    #[arg(long = "arg", value_delimiter = ',', value_name = "NAME=VALUE")]
    pub args: Vec<String>,
    /// Where to measure: gpu, cpu, interp, or auto (GPU, else CPU, else the interpreter).
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    pub device: DeviceRequest,
    /// Target: sm_80, sm_90 or cpu (default: the device's; sm_90 for the interpreter).
    #[arg(long, value_parser = crate::parsers::parse_target)]
    pub target: Option<Target>,
    /// Timed launches per configuration (default: as many as the kernel's budget_ms allows,
    /// up to 100 on a GPU, 20 on the CPU, 3 on the interpreter).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Untimed launches before them (default: the device's).
    #[arg(long)]
    pub warmup: Option<u32>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = launch::DEFAULT_SEED)]
    pub seed: u64,
    /// How each configuration's output is checked: full, sampled, none, or auto.
    #[arg(long, default_value = "auto", value_parser = parse_check)]
    pub check: CheckMode,
    /// Print one JSON object instead of the table (and no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Search again even when the cache has a winner for this key.
    #[arg(long)]
    pub force: bool,
    /// The host memory the arguments may take (`8G`, `512M`, bytes); default: what is
    /// available.
    #[arg(long, value_name = "SIZE", value_parser = crate::options::parse_size)]
    pub max_memory: Option<u64>,
}

pub fn run(args: AutotuneArgs) -> Result<i32, String> {
    let src = Source::load(&args.file)?;
    match tune(&src, &args) {
        Ok(code) => Ok(code),
        Err(f) => f.finish(),
    }
}

/// A row of the table.
struct Row {
    schedule: ScheduleValue,
    median_ms: Option<f64>,
    min_ms: Option<f64>,
    /// FLOP/s or bytes/s (see `Rate`).
    rate: Option<f64>,
    correct: Option<bool>,
    /// A wrong configuration: whether the device computes what its Tile IR computes.
    cause: Option<MismatchSource>,
    error: Option<String>,
}

fn tune(src: &Source, args: &AutotuneArgs) -> Result<i32, Failure> {
    let key = src.function(&args.kernel).map_err(Failure::usage)?;
    refuse_errors(src, key, "tune")?;
    let mut setup = launch_setup::setup(src, &args.kernel, args.device, args.target, &args.dims, &args.args)?;
    // `@kernel.auto` searches the target's default space (docs/language.md).
    tessera_passes::auto_space::fill_auto_space(src.db(), setup.key, &mut setup.info.schedule, setup.target);
    let info = &setup.info;
    if !info.schedule.is_autotuned() {
        return Err(Failure::usage(format!(
            "`{}` has a fixed schedule, so there is nothing to search; `tessera run` times it (give it a space with \
             @kernel.autotune(space=dict(...)))",
            info.name
        )));
    }
    launch_setup::print_notes(&setup);
    let dims = setup.dims.map();
    let device = setup.opened.backend.device();
    let key = launch_setup::cache_key(src, &setup, &dims).ok_or_else(|| {
        Failure::usage(format!(
            "`{}` does not lower for {} at these dims: `tessera run` says why",
            info.name, setup.target
        ))
    })?;
    let dir = autotune::cache_dir(info);
    if !args.force {
        match autotune::lookup(&dir, &key) {
            Ok(Some((path, entry))) => {
                print_hit(src, &setup, &path, &entry, args.json);
                return Ok(0);
            }
            Ok(None) => {}
            Err(warning) => eprintln!("warning: {warning}; searching again"),
        }
    }
    let space = autotune::space(src.db(), setup.key, info, &dims, setup.target).map_err(|e| Failure::launch(src, e))?;
    if let Some(summary) = space.pruning_summary(setup.target) {
        eprintln!("note: {summary}");
        let mut seen = Vec::new();
        for p in &space.pruned {
            if !seen.contains(&p.reason.category()) {
                seen.push(p.reason.category());
                eprintln!(
                    "note:   {}: e.g. {}: {}",
                    p.reason.category(),
                    schedule_keys(&p.schedule, &space.keys),
                    p.reason.detail()
                );
            }
        }
    }
    if space.candidates.is_empty() {
        return Err(Failure {
            code: 1,
            message: format!(
                "no configuration of `{}`'s autotune space fits {}: all {} are pruned",
                info.name, setup.target, space.total
            ),
            kind: Some("pruned"),
        });
    }
    let mut options = RunOptions::for_device(device);
    options.check = args.check;
    match args.repeat {
        Some(r) => options.repeat = r,
        None => options.budget = autotune::budget(info),
    }
    if let Some(w) = args.warmup {
        options.warmup = w;
    }
    let tune_options = TuneOptions {
        run: options,
        target: setup.target,
        dims: dims.clone(),
        args: setup.args.clone(),
        seed: args.seed,
        max_memory: args.max_memory,
    };
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(space.candidates.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    });
    let keys = space.keys.clone();
    let mut on_progress = |p: Progress| {
        let Some(bar) = &bar else { return };
        match p {
            Progress::Reference => bar.set_message("running the reference interpreter"),
            Progress::Started { schedule, .. } => bar.set_message(schedule_keys(&schedule, &keys)),
            Progress::Finished { .. } => bar.inc(1),
        }
    };
    let tuned = autotune::tune(
        src.db(),
        setup.key,
        info,
        &space,
        setup.opened.backend.as_ref(),
        &tune_options,
        &mut on_progress,
    )
    .map_err(|e| Failure::launch(src, e));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let tuned = tuned?;
    let stored = match autotune::entry_for(key, info, &tuned, &setup.opened.backend.description()) {
        Some(entry) => match autotune::store(&dir, &entry) {
            Ok(path) => Some(Ok(path)),
            Err(e) => Some(Err(format!("cannot write the autotune cache in {}: {e}", dir.display()))),
        },
        None => None,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&tuned_json(src, &setup, &space, &tuned, &stored)).unwrap_or_default()
        );
    } else {
        print!("{}", tuned_text(src, &setup, &space, &tuned, &stored));
    }
    if let Some(Err(e)) = &stored {
        eprintln!("error: {e}");
        return Ok(2);
    }
    Ok(if tuned.winner.is_some() { 0 } else { 1 })
}

/// `BM=64, BN=128, warps=4`: the space's keys only.
fn schedule_keys(s: &ScheduleValue, keys: &[String]) -> String {
    keys.iter().filter_map(|k| s.get(k).map(|v| format!("{k}={}", value_text(v)))).collect::<Vec<_>>().join(", ")
}

fn value_text(v: &KeyValue) -> String {
    match v {
        KeyValue::Int(i) => i.to_string(),
        KeyValue::Str(s) => s.clone(),
    }
}

fn header(src: &Source, setup: &Setup<'_>) -> String {
    let dims: Vec<String> = setup.dims.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "autotune {} ({}) on {}, target {}\n  dims      {}\n",
        setup.info.name,
        src.shown,
        setup.opened.backend.description(),
        setup.target,
        if dims.is_empty() { "(none)".to_string() } else { dims.join(", ") }
    )
}

/// What the throughput column measures.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Rate {
    Flops,
    /// Integer operations of int8 dots (TOP/s).
    Ops,
    Bytes,
    None,
}

impl Rate {
    fn of(work: Option<&launch::Work>) -> Rate {
        match work {
            Some(w) if w.flops.is_some() && w.integer => Rate::Ops,
            Some(w) if w.flops.is_some() => Rate::Flops,
            Some(w) if w.flops_unknown.is_none() => Rate::Bytes,
            _ => Rate::None,
        }
    }

    /// The column's title and divisor: the unit that suits the largest value.
    fn unit(self, rows: &[Row]) -> (&'static str, f64) {
        let max = rows.iter().filter_map(|r| r.rate).fold(0.0, f64::max);
        let units: &[(&str, f64)] = match self {
            Rate::Flops => &[("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6), ("kFLOP/s", 1e3)],
            Rate::Ops => &[("TOP/s", 1e12), ("GOP/s", 1e9), ("MOP/s", 1e6), ("kOP/s", 1e3)],
            Rate::Bytes => &[("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)],
            Rate::None => &[("rate", 1.0)],
        };
        units.iter().copied().find(|(_, d)| max >= *d).unwrap_or(units[units.len() - 1])
    }
}

/// The table's rows; `work` is the plan's work model (`launch::work`), computed once by
/// the caller for the rows and the rate column.
fn rows_of(tuned: &Tuned, work: Option<&launch::Work>) -> Vec<Row> {
    tuned
        .measured
        .iter()
        .map(|m: &Measured| match &m.outcome {
            Ok(o) => {
                let t = o.timing.median_ms;
                let rate = match work {
                    Some(w) => w.tflops(t).map(|x| x * 1e12).or_else(|| w.gbps(t).map(|x| x * 1e9)),
                    None => None,
                };
                Row {
                    schedule: m.schedule.clone(),
                    median_ms: Some(t),
                    min_ms: Some(o.timing.min_ms),
                    rate,
                    correct: o.check.passed(),
                    cause: o.check.mismatch_source(),
                    error: None,
                }
            }
            Err(e) => Row {
                schedule: m.schedule.clone(),
                median_ms: None,
                min_ms: None,
                rate: None,
                correct: None,
                cause: None,
                error: Some(e.message.clone()),
            },
        })
        .collect()
}

/// The table: rank, the space's keys, times, throughput, correctness.
fn table(keys: &[String], rows: &[Row], rate: Rate, interp: bool) -> String {
    let (unit, divisor) = rate.unit(rows);
    let mut header: Vec<String> = vec!["rank".into()];
    header.extend(keys.iter().cloned());
    header.extend(["median ms".into(), "min ms".into()]);
    if rate != Rate::None {
        header.push(if interp { format!("{unit} (interp)") } else { unit.to_string() });
    }
    header.push("correct".into());
    let mut cells: Vec<Vec<String>> = Vec::new();
    let mut rank = 0;
    for r in rows {
        let mut line = Vec::new();
        let ranked = r.error.is_none() && r.correct != Some(false);
        if ranked {
            rank += 1;
            line.push(rank.to_string());
        } else {
            line.push("-".into());
        }
        for k in keys {
            line.push(r.schedule.get(k).map(value_text).unwrap_or_default());
        }
        let ms = |x: Option<f64>| x.map_or("-".to_string(), |v| sig(v, 4));
        line.push(ms(r.median_ms));
        line.push(ms(r.min_ms));
        if rate != Rate::None {
            line.push(r.rate.map_or("-".to_string(), |x| sig(x / divisor, 3)));
        }
        line.push(match (&r.error, r.correct) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(true)) => "yes".into(),
            (None, Some(false)) => match r.cause {
                Some(cause) => format!("NO ({})", cause.short_name()),
                None => "NO".into(),
            },
            (None, None) => "unchecked".into(),
        });
        cells.push(line);
    }
    let n = header.len();
    let mut width = vec![0; n];
    for line in std::iter::once(&header).chain(&cells) {
        for (i, c) in line.iter().enumerate().take(n - 1) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let mut parts = Vec::new();
        for (i, c) in line.iter().enumerate() {
            if i == n - 1 {
                parts.push(c.clone());
            } else {
                parts.push(format!("{c:>w$}", w = width[i]));
            }
        }
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn tuned_text(
    src: &Source,
    setup: &Setup<'_>,
    space: &Space,
    tuned: &Tuned,
    stored: &Option<Result<PathBuf, String>>,
) -> String {
    use std::fmt::Write;
    let mut s = header(src, setup);
    let interp = setup.opened.backend.device() == Device::Interpreter;
    let _ = writeln!(
        s,
        "  space     {} configurations of {}: {} pruned, {} measured",
        space.total,
        space.keys.join(", "),
        space.pruned.len(),
        space.candidates.len()
    );
    if let Some(derived) = derived_space_text(&setup.info.schedule) {
        let _ = writeln!(s, "  derived   {derived}");
    }
    if let Some(r) = &tuned.reference {
        let how = match &r.kind {
            CheckKind::Full => "full".to_string(),
            CheckKind::Sampled { programs, total } => format!("sampled ({programs} of {total} programs)"),
            CheckKind::Skipped(why) => format!("none ({why})"),
        };
        let _ = writeln!(s, "  check     {how}, against one run of {}", r.source.describe());
    } else {
        let _ = writeln!(s, "  check     none");
    }
    if interp {
        let _ = writeln!(s, "  times     the interpreter's, not a device's");
    }
    s.push('\n');
    let work = tuned.plan.as_ref().map(launch::work);
    let rows = rows_of(tuned, work.as_ref());
    s.push_str(&table(&space.keys, &rows, Rate::of(work.as_ref()), interp));
    s.push('\n');
    // What the causes of the wrong rows mean, once each (`tessera run` prints it as `cause`).
    let mut causes: Vec<MismatchSource> = rows.iter().filter_map(|r| r.cause).collect();
    causes.sort_by_key(|c| c.name());
    causes.dedup();
    for cause in causes {
        let _ = writeln!(s, "NO ({}): {}", cause.short_name(), cause_explanation(cause));
    }
    match tuned.winner.map(|i| &tuned.measured[i]) {
        Some(w) => {
            let _ = writeln!(
                s,
                "winner    {} (median {} ms)",
                schedule_keys(&w.schedule, &space.keys),
                sig(w.median_ms(), 4)
            );
            if let Some(Ok(path)) = stored {
                let _ = writeln!(s, "cached    {} (`tessera run` uses it at these dims)", path.display());
            }
        }
        None => {
            let _ = writeln!(s, "no winner: no configuration ran correctly; nothing was cached");
        }
    }
    s
}

/// What the derivation of an `@kernel.auto` space left out of its product: its rules,
/// and how many single configurations the kernel's Hopper rules refuse.
fn derived_space_text(schedule: &tessera_frontend::check::KernelSchedule) -> Option<String> {
    let mut parts: Vec<String> = schedule.rules.iter().map(|r| r.to_string()).collect();
    if !schedule.excluded.is_empty() {
        let n = schedule.excluded.len();
        parts.push(format!(
            "{n} more left out: the kernel's Hopper rules refuse {}",
            if n == 1 { "it" } else { "them" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn tuned_json(
    src: &Source,
    setup: &Setup<'_>,
    space: &Space,
    tuned: &Tuned,
    stored: &Option<Result<PathBuf, String>>,
) -> Value {
    let work = tuned.plan.as_ref().map(launch::work);
    let mut rank = 0;
    let results: Vec<Value> = tuned
        .measured
        .iter()
        .zip(rows_of(tuned, work.as_ref()))
        .map(|(m, row)| {
            let ranked = row.error.is_none() && row.correct != Some(false);
            let this_rank = if ranked {
                rank += 1;
                json!(rank)
            } else {
                Value::Null
            };
            let (tflops, gbps) = match (&m.outcome, &work) {
                (Ok(o), Some(w)) => (w.tflops(o.timing.median_ms), w.gbps(o.timing.median_ms)),
                _ => (None, None),
            };
            json!({
                "rank": this_rank,
                "schedule": schedule_json(&m.schedule),
                "median_ms": row.median_ms,
                "min_ms": row.min_ms,
                "tflops": tflops,
                "gbps": gbps,
                "correct": row.correct,
                "mismatch_source": row.cause.map(|c| c.name()),
                "error": row.error,
            })
        })
        .collect();
    let pruned: Vec<Value> = space
        .pruned
        .iter()
        .map(|p| {
            json!({"schedule": schedule_json(&p.schedule), "reason": p.reason.category(), "detail": p.reason.detail()})
        })
        .collect();
    let check = tuned.reference.as_ref().map_or("none", |r| r.kind.name());
    json!({
        "kernel": setup.info.name,
        "file": src.shown,
        "device": setup.opened.backend.device().name(),
        "device_name": setup.opened.backend.description(),
        "target": setup.target.name(),
        "dims": setup.dims.values.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<String, Value>>(),
        "space": {
            "keys": space.keys,
            "total": space.total,
            "measured": space.candidates.len(),
            "pruned": pruned,
            "rules": setup.info.schedule.rules.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "left_out": setup.info.schedule.excluded.len(),
        },
        "check": check,
        "results": results,
        "winner": tuned.winner.map(|i| schedule_json(&tuned.measured[i].schedule)),
        "cache": {
            "hit": false,
            "path": match stored { Some(Ok(p)) => json!(p.display().to_string()), _ => Value::Null },
        },
    })
}

fn print_hit(src: &Source, setup: &Setup<'_>, path: &std::path::Path, entry: &CacheEntry, json: bool) {
    let keys: Vec<String> = setup.info.schedule.canonical_space_keys();
    if json {
        let v = json!({
            "kernel": setup.info.name,
            "file": src.shown,
            "device": setup.opened.backend.device().name(),
            "target": setup.target.name(),
            "dims": setup.dims.values.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<String, Value>>(),
            "cache": {"hit": true, "path": path.display().to_string(), "tuned_at": entry.tuned_at, "device_name": entry.device_name},
            "results": entry.results,
            "winner": schedule_json(&entry.winner),
            "median_ms": entry.median_ms,
            "min_ms": entry.min_ms,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let mut s = header(src, setup);
    s.push_str(&format!(
        "cache hit {}\n          tuned {} on {}; --force searches again\n\n",
        path.display(),
        utc(entry.tuned_at),
        entry.device_name
    ));
    let flops = entry.results.iter().any(|r| r.get("tflops").is_some_and(Value::is_number));
    let bytes = entry.results.iter().any(|r| r.get("gbps").is_some_and(Value::is_number));
    let integer = entry.results.iter().any(|r| r.get("work_unit").and_then(Value::as_str) == Some("OP"));
    let rate = if flops && integer {
        Rate::Ops
    } else if flops {
        Rate::Flops
    } else if bytes {
        Rate::Bytes
    } else {
        Rate::None
    };
    let rows: Vec<Row> = entry
        .results
        .iter()
        .filter_map(|r| {
            let schedule = autotune::schedule_from_json(r.get("schedule")?).ok()?;
            let tflops = r.get("tflops").and_then(Value::as_f64).map(|x| x * 1e12);
            let gbps = r.get("gbps").and_then(Value::as_f64).map(|x| x * 1e9);
            Some(Row {
                schedule,
                median_ms: r.get("median_ms").and_then(Value::as_f64),
                min_ms: r.get("min_ms").and_then(Value::as_f64),
                rate: tflops.or(gbps),
                correct: r.get("correct").and_then(Value::as_bool),
                cause: r.get("mismatch_source").and_then(Value::as_str).and_then(MismatchSource::from_name),
                error: r.get("error").and_then(Value::as_str).map(str::to_string),
            })
        })
        .collect();
    if !rows.is_empty() {
        let interp = entry.key.device == Device::Interpreter;
        s.push_str(&table(&keys, &rows, rate, interp));
        s.push('\n');
    }
    s.push_str(&format!("winner    {} (median {} ms)\n", schedule_keys(&entry.winner, &keys), sig(entry.median_ms, 4)));
    print!("{s}");
}

/// `2026-11-21 09:51 UTC` from Unix seconds.
fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, (rem % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13 UTC");
    }
}
