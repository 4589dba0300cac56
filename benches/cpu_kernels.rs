//! The CPU backend against NumPy on the same machine and thread count:
//!
//! - f32 GEMM 2048³ (`benches/kernels/sgemm.tsr`): GFLOP/s against NumPy's sgemm
//!   (OpenBLAS with `OPENBLAS_NUM_THREADS` = our threads); target at least 50%.
//! - softmax and layernorm over 4096×4096 f32 rows (`benches/kernels/`): effective
//!   bandwidth (the bytes of the input read once plus the output written once) against
//!   a 4096×4096 f32 copy in NumPy; target at least 50%.
//!
//! Each kernel's autotune candidates are timed briefly and the fastest is measured
//! (best and median of several runs); results are spot-checked against f64 references.
//! `cargo bench --bench cpu_kernels`; `TESSERA_BENCH_THREADS` sets the threads (default:
//! all cores), `TESSERA_BENCH_QUICK=1` shortens every measurement. The machine's load
//! average is printed: on a shared machine timings of both sides move with it.
//!
//! A bench of the `tessera-backends` package (whose `llvm` feature it needs), kept with
//! the other benches at the repository's root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[cfg(feature = "llvm")]
fn main() {
    bench::main();
}

#[cfg(not(feature = "llvm"))]
fn main() {
    eprintln!("cpu_kernels: the CPU backend is not compiled in (enable the `llvm` feature)");
}

/// The repository's `benches/` (this file's directory).
fn benches_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches")
}

fn kernels_dir() -> PathBuf {
    benches_dir().join("kernels")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs `benches/numpy_peer.py` with `threads` OpenBLAS threads; its JSON, or why not.
fn numpy_peer(threads: usize, quick: bool) -> Result<serde_json::Value, String> {
    let script = benches_dir().join("numpy_peer.py");
    let mut cmd = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
    cmd.arg(&script).env("OPENBLAS_NUM_THREADS", threads.to_string()).env("OMP_NUM_THREADS", threads.to_string());
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output().map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("failed").to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bad JSON from numpy_peer.py: {e}"))
}

fn symbols(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[cfg(feature = "llvm")]
mod bench {
    use super::*;

    use tessera_backends::cpu::{default_threads, CpuKernel, CpuRun, LaunchOptions};
    use tessera_backends::tensor::{Arg, HostTensor};
    use tessera_frontend::check::{fn_decorators, DType};
    use tessera_frontend::db::item_index;
    use tessera_frontend::{Database, SourceFile};
    use tessera_passes::{default_config, tile_ir, Config, Target};

    /// The fastest autotune candidate of the kernel in `file` and its measured run.
    struct Measured {
        schedule: String,
        run: CpuRun,
    }

    fn candidates(file: &str, shape: &BTreeMap<String, i64>) -> Vec<(String, CpuKernel)> {
        let path = kernels_dir().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let db = Database::default();
        let src = SourceFile::new(&db, path.clone(), text, None);
        let entry = item_index(&db, src).functions[0].clone();
        let (base, _) = default_config(&db, entry.key, shape).unwrap_or_else(|e| panic!("{file}: {}", e.message));
        let configs: Vec<Config> = match &fn_decorators(&db, entry.key).schedule {
            Some(s) => s
                .configurations()
                .into_iter()
                .map(|schedule| Config { schedule, shapes: base.shapes.clone() })
                .collect(),
            None => vec![base],
        };
        // Label candidates by the keys the autotune space varies.
        let varied: Vec<&String> = configs
            .first()
            .map(|f| {
                f.schedule
                    .values
                    .keys()
                    .filter(|k| configs.iter().any(|c| c.schedule.values.get(*k) != f.schedule.values.get(*k)))
                    .collect()
            })
            .unwrap_or_default();
        configs
            .iter()
            .map(|c| {
                let func = tile_ir(&db, entry.key, c.clone(), Target::Cpu)
                    .clone()
                    .unwrap_or_else(|e| panic!("{file}: {}", e.message));
                let k = CpuKernel::new(&func).unwrap_or_else(|e| panic!("{file} [{c}]: {e}"));
                let shown: Vec<String> = c
                    .schedule
                    .values
                    .iter()
                    .filter(|(k, _)| varied.contains(k))
                    .map(|(k, v)| match v {
                        tessera_frontend::check::KeyValue::Int(i) => format!("{k}={i}"),
                        tessera_frontend::check::KeyValue::Str(s) => format!("{k}={s}"),
                    })
                    .collect();
                (shown.join(","), k)
            })
            .collect()
    }

    fn measure(file: &str, shape: &BTreeMap<String, i64>, args: &mut [Arg], threads: usize, quick: bool) -> Measured {
        let mut best: Option<(f64, String, CpuKernel)> = None;
        for (schedule, k) in candidates(file, shape) {
            let opts = LaunchOptions { threads, warmup: 1, repeats: if quick { 1 } else { 2 } };
            let run = k.launch_with(args, &opts).unwrap_or_else(|e| panic!("{file} [{schedule}]: {e}"));
            eprintln!("  {file} [{schedule}]: {:.2} ms", run.best_ms());
            if best.as_ref().is_none_or(|(t, _, _)| run.best_ms() < *t) {
                best = Some((run.best_ms(), schedule, k));
            }
        }
        let (best_ms, schedule, k) = best.expect("at least one candidate");
        // About two seconds of timed runs (at least 5, at most 40): on a shared machine the
        // best of many runs is the one least disturbed.
        let repeats = if quick { 3 } else { ((2000.0 / best_ms.max(1.0)) as usize).clamp(5, 40) };
        let opts = LaunchOptions { threads, warmup: 1, repeats };
        let run = k.launch_with(args, &opts).unwrap_or_else(|e| panic!("{file} [{schedule}]: {e}"));
        Measured { schedule, run }
    }

    fn tensor(dtype: DType, dims: &[usize], seed: u64) -> HostTensor {
        // A cheap deterministic fill in [-1, 1): the timing does not depend on values.
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let n: usize = dims.iter().product();
        let mut t = HostTensor::zeros(dtype, dims);
        for i in 0..n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            t.data[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        t
    }

    fn values(a: &Arg) -> Vec<f32> {
        match a {
            Arg::Tensor(t) => t.to_f32(),
            _ => unreachable!(),
        }
    }

    /// Largest error relative to the reference's magnitude over the checked elements.
    fn report_check(what: &str, worst: f64, limit: f64) -> bool {
        let ok = worst <= limit;
        eprintln!("  check {what}: max relative error {worst:.2e} ({})", if ok { "ok" } else { "WRONG" });
        ok
    }

    fn check_gemm(args: &[Arg], n: usize) -> bool {
        let (a, b, c) = (values(&args[0]), values(&args[1]), values(&args[2]));
        let mut worst = 0f64;
        for t in 0..64 {
            let (i, j) = ((t * 613) % n, (t * 1619 + 7) % n);
            let mut exact = 0f64;
            let mut mag = 0f64;
            for k in 0..n {
                let p = a[i * n + k] as f64 * b[k * n + j] as f64;
                exact += p;
                mag += p.abs();
            }
            worst = worst.max((c[i * n + j] as f64 - exact).abs() / mag.max(1e-30));
        }
        report_check("sgemm (64 elements vs f64)", worst, 1e-5)
    }

    fn check_rows(args: &[Arg], out: usize, cols: usize, row: &dyn Fn(usize) -> Vec<f64>) -> bool {
        let y = values(&args[out]);
        let mut worst = 0f64;
        for r in [0usize, 1, 2047, 4095] {
            let exact = row(r);
            let scale = (exact.iter().map(|v| v * v).sum::<f64>() / cols as f64).sqrt().max(1e-30);
            for (c, e) in exact.iter().enumerate() {
                worst = worst.max((y[r * cols + c] as f64 - e).abs() / scale);
            }
        }
        report_check("rows vs f64", worst, 1e-5)
    }

    struct Row {
        name: &'static str,
        schedule: String,
        run: CpuRun,
        /// Flops or bytes moved per run.
        work: f64,
        unit: &'static str,
        /// The JSON key of the peer's measurement and what it is.
        peer_key: &'static str,
        peer_label: &'static str,
        correct: bool,
    }

    impl Row {
        fn rate(&self, ms: f64) -> f64 {
            self.work / (ms * 1e-3) / 1e9
        }

        /// The least CPU time of a run per thread: the run time without preemption.
        fn cpu_ms(&self) -> f64 {
            self.run.cpu_ms.iter().copied().fold(f64::INFINITY, f64::min) / self.run.threads as f64
        }
    }

    pub fn main() {
        let threads =
            std::env::var("TESSERA_BENCH_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or_else(default_threads);
        let quick = std::env::var_os("TESSERA_BENCH_QUICK").is_some();
        let load_before = load_average();
        eprintln!("cpu_kernels: {threads} threads, load average {load_before}");
        let peer_before = numpy_peer(threads, quick);
        if let Err(e) = &peer_before {
            eprintln!("NumPy peer unavailable: {e}");
        }
        let mut rows = Vec::new();

        let n = 2048usize;
        let shape = symbols(&[("M", n as i64), ("N", n as i64), ("K", n as i64)]);
        let mut args = vec![
            Arg::Tensor(tensor(DType::F32, &[n, n], 1)),
            Arg::Tensor(tensor(DType::F32, &[n, n], 2)),
            Arg::Tensor(HostTensor::zeros(DType::F32, &[n, n])),
        ];
        let m = measure("sgemm.tsr", &shape, &mut args, threads, quick);
        let correct = check_gemm(&args, n);
        rows.push(Row {
            name: "sgemm 2048^3 f32",
            schedule: m.schedule,
            run: m.run,
            work: 2.0 * (n as f64).powi(3),
            unit: "GFLOP/s",
            peer_key: "sgemm",
            peer_label: "NumPy sgemm",
            correct,
        });

        let (r, c) = (4096usize, 4096usize);
        let shape = symbols(&[("R", r as i64), ("C", c as i64)]);
        let moved = 2.0 * (r * c * 4) as f64;
        let mut args =
            vec![Arg::Tensor(tensor(DType::F32, &[r, c], 3)), Arg::Tensor(HostTensor::zeros(DType::F32, &[r, c]))];
        let m = measure("softmax.tsr", &shape, &mut args, threads, quick);
        let x = values(&args[0]);
        let correct = check_rows(&args, 1, c, &|row| {
            let xs: Vec<f64> = x[row * c..(row + 1) * c].iter().map(|&v| v as f64).collect();
            let mx = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = xs.iter().map(|v| (v - mx).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        });
        rows.push(Row {
            name: "softmax 4096x4096 f32",
            schedule: m.schedule,
            run: m.run,
            work: moved,
            unit: "GB/s",
            peer_key: "copy",
            peer_label: "NumPy copy",
            correct,
        });

        let mut args = vec![
            Arg::Tensor(tensor(DType::F32, &[r, c], 4)),
            Arg::Tensor(tensor(DType::F32, &[c], 5)),
            Arg::Tensor(tensor(DType::F32, &[c], 6)),
            Arg::Tensor(HostTensor::zeros(DType::F32, &[r, c])),
            Arg::Scalar(DType::F32, 1e-5),
        ];
        let m = measure("layernorm.tsr", &shape, &mut args, threads, quick);
        let (x, g, b) = (values(&args[0]), values(&args[1]), values(&args[2]));
        let correct = check_rows(&args, 3, c, &|row| {
            let xs: Vec<f64> = x[row * c..(row + 1) * c].iter().map(|&v| v as f64).collect();
            let mean = xs.iter().sum::<f64>() / c as f64;
            let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
            let rstd = 1.0 / (var + 1e-5f32 as f64).sqrt();
            xs.iter().enumerate().map(|(i, v)| (v - mean) * rstd * g[i] as f64 + b[i] as f64).collect()
        });
        rows.push(Row {
            name: "layernorm 4096x4096 f32",
            schedule: m.schedule,
            run: m.run,
            work: moved,
            unit: "GB/s",
            peer_key: "copy",
            peer_label: "NumPy copy",
            correct,
        });

        // The peer again, after: the better of the two runs (the machine may be shared).
        let peer_after = if quick { Err("quick".to_string()) } else { numpy_peer(threads, quick) };
        let pick = |key: &str, field: &str| -> Option<f64> {
            [&peer_before, &peer_after]
                .iter()
                .filter_map(|p| p.as_ref().ok().and_then(|v| v[key][field].as_f64()))
                .reduce(f64::max)
        };
        let load_after = load_average();

        println!();
        println!("CPU backend vs NumPy: {threads} threads; load average {load_before} before, {load_after} after");
        println!(
            "{:<24} {:<22} {:>9} {:>9} {:>15} {:>25} {:>6}  target >= 50%",
            "kernel", "schedule", "best ms", "median ms", "ours", "peer", "ratio"
        );
        let mut all_ok = true;
        for r in &rows {
            let peer_field = if r.unit == "GB/s" { "gbps" } else { "gflops" };
            let ours = r.rate(r.run.best_ms());
            let peer = pick(r.peer_key, peer_field);
            let ratio = peer.map(|p| ours / p);
            let verdict = match (ratio, r.correct) {
                (_, false) => "WRONG RESULT",
                (Some(x), true) if x >= 0.5 => "met",
                (Some(_), true) => "missed",
                (None, true) => "no peer",
            };
            all_ok &= r.correct;
            println!(
                "{:<24} {:<22} {:>9.2} {:>9.2} {:>7.1} {:<7} {:>25} {:>6}  {}",
                r.name,
                r.schedule,
                r.run.best_ms(),
                r.run.median_ms(),
                ours,
                r.unit,
                peer.map_or("-".to_string(), |p| format!("{} {p:.1} {}", r.peer_label, r.unit)),
                ratio.map_or("-".to_string(), |x| format!("{:.0}%", x * 100.0)),
                verdict
            );
        }
        // On a shared machine both sides are preempted: the same comparison by CPU time
        // (per thread) shows the code's speed when it has the cores to itself.
        println!();
        println!("by CPU time per thread (unaffected by preemption; memory and caches are still shared):");
        for r in &rows {
            let peer_field = if r.unit == "GB/s" { "cpu_gbps" } else { "cpu_gflops" };
            let ours = r.rate(r.cpu_ms());
            let peer = pick(r.peer_key, peer_field);
            println!(
                "{:<24} {:<22} {:>9.2} {:>9} {:>7.1} {:<7} {:>25} {:>6}",
                r.name,
                "",
                r.cpu_ms(),
                "",
                ours,
                r.unit,
                peer.map_or("-".to_string(), |p| format!("{} {p:.1} {}", r.peer_label, r.unit)),
                peer.map_or("-".to_string(), |p| format!("{:.0}%", ours / p * 100.0)),
            );
        }
        for (label, key) in [("NumPy softmax (info)", "softmax"), ("NumPy layernorm (info)", "layernorm")] {
            if let (Some(ms), Some(gbps)) = (min_ms(&peer_before, &peer_after, key), pick(key, "gbps")) {
                println!("{label:<24} {:<22} {ms:>9.2} {:>9} {gbps:>7.1} GB/s", "", "");
            }
        }
        if !all_ok {
            eprintln!("cpu_kernels: a result is wrong");
            std::process::exit(1);
        }
    }

    fn min_ms(a: &Result<serde_json::Value, String>, b: &Result<serde_json::Value, String>, key: &str) -> Option<f64> {
        [a, b].iter().filter_map(|p| p.as_ref().ok().and_then(|v| v[key]["ms"].as_f64())).reduce(f64::min)
    }
}
