//! Resource bounds: schedules and dims up to `u64`'s extremes never make a tool allocate
//! per tile element, run away, or die. Every case runs the real binary under an address
//! space limit (`prlimit --as`), with a time limit, and must end with a diagnostic or a
//! clear error: exit 0, 1 or 2, never a panic, an abort or an allocation failure.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// 4 GiB of address space: enough for the debug binary and a real check, far below what
/// one element per tile of a huge tile would take.
const ADDRESS_SPACE: &str = "4294967296";
const TIME_LIMIT: Duration = Duration::from_secs(60);

struct Ran {
    code: Option<i32>,
    stderr: String,
    elapsed: Duration,
}

fn run_bounded(args: &[&str], dir: &std::path::Path) -> Ran {
    let start = Instant::now();
    let mut child = Command::new("prlimit")
        .arg(format!("--as={ADDRESS_SPACE}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) runs the binary");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
            return Ran { code: status.code(), stderr, elapsed: start.elapsed() };
        }
        if start.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            panic!("`tessera {}` ran past {TIME_LIMIT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_bounded(r: &Ran, what: &str) {
    assert!(
        matches!(r.code, Some(0..=2)),
        "{what}: exit {:?} (a crash or abort) after {:?}:\n{}",
        r.code,
        r.elapsed,
        r.stderr
    );
    for bad in ["panicked", "memory allocation", "internal error"] {
        assert!(!r.stderr.contains(bad), "{what}: {bad}:\n{}", r.stderr);
    }
}

/// Extreme values: powers of two up to 2^63, their neighbours, and `u64`'s edges.
fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u32..64).prop_map(|k| 1u64 << k),
        (0u32..64).prop_map(|k| (1u64 << k).wrapping_sub(1)),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

/// `tessera check FILE --format concise` in `dir`: its stdout.
fn check_concise(file: &str, dir: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["check", file, "--format", "concise"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tessera run` of an example on `device` with one timed launch, bounded.
fn run_example(file: &str, kernel: &str, device: &str, more: &[&str]) -> Ran {
    let mut args = vec!["run", file, "--kernel", kernel, "--device", device, "--repeat", "1"];
    args.extend_from_slice(more);
    run_bounded(&args, std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
}

const VECTOR_ADD: &str = include_str!("../examples/vector_add.tsr");
const GEMM: &str = include_str!("../examples/gemm.tsr");

#[test]
fn extreme_schedules_and_dims_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut runner = TestRunner::new(Config { cases: 32, failure_persistence: None, ..Config::default() });
    runner
        .run(&(extreme(), extreme(), 0usize..5), |(a, b, route)| {
            match route {
                // A schedule value in the source: every lint, every candidate.
                0 => {
                    let text = VECTOR_ADD.replace("BLOCK=[512, 1024, 4096]", &format!("BLOCK=[{a}, {b}]"));
                    std::fs::write(dir.path().join("v.tsr"), text).unwrap();
                    let r = run_bounded(&["check", "v.tsr", "--format", "json"], dir.path());
                    assert_bounded(&r, &format!("check with BLOCK=[{a}, {b}]"));
                }
                1 => {
                    let text =
                        GEMM.replace("BM=[64, 128]", &format!("BM=[{a}]")).replace("BK=[32, 64]", &format!("BK=[{b}]"));
                    std::fs::write(dir.path().join("g.tsr"), text).unwrap();
                    for target in ["sm_80", "cpu"] {
                        let r = run_bounded(&["check", "g.tsr", "--target", target], dir.path());
                        assert_bounded(&r, &format!("check --target {target} with BM={a}, BK={b}"));
                    }
                }
                // A schedule on the command line, on the CPU backend and the interpreter.
                2 | 3 => {
                    let device = if route == 2 { "cpu" } else { "interp" };
                    let schedule = format!("BLOCK={a}");
                    let dims = format!("N={}", b % 100_000 + 1);
                    let r = run_example(
                        "examples/vector_add.tsr",
                        "vector_add",
                        device,
                        &["--schedule", &schedule, "--dims", &dims],
                    );
                    assert_bounded(&r, &format!("run --device {device} --schedule {schedule} --dims {dims}"));
                }
                // Dims from the command line.
                _ => {
                    let dims = format!("M={a},N={b},K=64");
                    let r = run_example("examples/gemm.tsr", "gemm", "cpu", &["--dims", &dims]);
                    assert_bounded(&r, &format!("run --dims {dims}"));
                }
            }
            Ok(())
        })
        .unwrap();
}

/// The reproducers, each pinned.
#[test]
fn the_reported_extremes_are_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let text = VECTOR_ADD.replace("BLOCK=[512, 1024, 4096]", "BLOCK=[9223372036854775807]");
    std::fs::write(dir.path().join("v.tsr"), text).unwrap();
    let r = run_bounded(&["check", "v.tsr", "--format", "concise"], dir.path());
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let out = check_concise("v.tsr", dir.path());
    assert!(out.contains("E0703") && out.contains("no configuration of the autotune space fits sm_90"), "{out}");
    // A candidate beyond 64 bits is one error, not an error plus "unknown schedule key"
    // at every `ctx.BLOCK`.
    let text = VECTOR_ADD.replace("BLOCK=[512, 1024, 4096]", "BLOCK=[18446744073709551615]");
    std::fs::write(dir.path().join("u.tsr"), text).unwrap();
    let out = check_concise("u.tsr", dir.path());
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("error[E0100] integer literal does not fit in 64 bits"), "{out}");
    // A fixed schedule whose tile no block can hold: E0701 at the tile, naming the limit.
    let fixed = "from tessera import *\n\n@kernel.schedule(Schedule(vector=4))\ndef k(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32]):\n    for i0 in tile.parallel(0, N, 1099511627776):\n        y[i0:i0 + 1099511627776] = tile.load(x[i0:i0 + 1099511627776])\n";
    std::fs::write(dir.path().join("f.tsr"), fixed).unwrap();
    let out = check_concise("f.tsr", dir.path());
    assert!(out.contains("error[E0701]") && out.contains("1044480 bytes of tiles in registers"), "{out}");
    // The CPU backend refuses a tile beyond its budget instead of running for minutes.
    let r = run_example("examples/vector_add.tsr", "vector_add", "cpu", &["--schedule", "BLOCK=1073741824"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("a tile program on the CPU holds at most 64 MiB per tile"), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(30), "{:?}", r.elapsed);
}
