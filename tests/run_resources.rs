//! What `tessera run` says of a kernel's resources before any device measures them, the
//! arguments a resource cannot take, and the unit of its work. Registers: the estimate, and the limit it must fit. Under warp specialization that limit is the count
//! the consumers' `setmaxnreg` gives them (240 of the SM's registers, the producer keeping
//! 24), not the target's 255; an estimate past it means ptxas spills, and the report says
//! so instead of printing a per-thread count that no thread can hold.

use std::process::Command;

fn run(schedule: &str, json: bool) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "run",
        "examples/flash_attention.tsr",
        "--kernel",
        "flash_attention",
        "--device",
        "interp",
        "--target",
        "sm_90",
        "--repeat",
        "1",
        "--dims",
        "BH=1,S=128,D=128",
        "--schedule",
        schedule,
    ]);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("tessera runs")
}

fn launch_line(o: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    text.lines()
        .find(|l| l.trim_start().starts_with("launch"))
        .unwrap_or_else(|| panic!("no launch line: {text}"))
        .to_string()
}

#[test]
fn a_consumer_estimate_is_weighed_against_its_setmaxnreg_count() {
    // FA3's ping-pong at BM=128, BN=128, D=128: each consumer warpgroup holds a 64x128 f32
    // accumulator and a 64x128 score block at once, more than 240 registers (ptxas 12.9
    // spills 40 bytes for this PTX).
    let over = "mma=wgmma,copy=tma,producer=pingpong,BM=128,BN=128,warps=8,stages=2";
    let line = launch_line(&run(over, false));
    assert!(
        line.contains(
            "registers per consumer thread (estimate; over the 240 their setmaxnreg gives: ptxas will spill)"
        ),
        "{line}"
    );
    let o = run(over, true);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["registers"]["limit"], 240, "{v}");
    assert_eq!(v["registers"]["limit_from"], "setmaxnreg", "{v}");
    assert!(v["registers"]["estimate"].as_u64().unwrap() > 240, "{v}");

    // BN=64 halves the score block: it fits, and the line gives the count it fits in.
    let line = launch_line(&run("mma=wgmma,copy=tma,producer=pingpong,BM=128,BN=64,warps=8,stages=2", false));
    assert!(line.contains("registers per consumer thread (estimate; setmaxnreg gives them 240)"), "{line}");

    // Without warp specialization the limit is the target's, and a fitting estimate is
    // just the estimate.
    let line = launch_line(&run("mma=wgmma,BM=64,BN=64,warps=4,stages=2", false));
    assert!(line.contains("registers/thread (estimate),"), "{line}");
    let v: serde_json::Value =
        serde_json::from_slice(&run("mma=wgmma,BM=64,BN=64,warps=4,stages=2", true).stdout).unwrap();
    assert_eq!(v["registers"]["limit"], 255, "{v}");
    assert_eq!(v["registers"]["limit_from"], "target", "{v}");
}

/// A TMA copy's tensor map needs every row stride to be a multiple of 16 bytes. The GPU's
/// launcher refused `K = 70` bf16 rows (140 bytes) before the driver was asked, but the
/// interpreter, standing in for the same sm_90 code, ran it to `correct`. The plan now
/// refuses it for every device, naming the tensor; `K = 72` (144 bytes) runs.
#[test]
fn a_tma_kernel_refuses_rows_a_tensor_map_cannot_stride_on_every_device() {
    let run = |k: &str| {
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["run", "tests/fixtures/wgmma/gemms.tsr", "--kernel", "two_warpgroups", "--device", "interp"])
            .args(["--target", "sm_90", "--repeat", "1", "--schedule", "copy=tma", "--dims"])
            .arg(format!("M=64,N=64,K={k}"))
            .output()
            .expect("tessera runs")
    };
    let o = run("70");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "`A` (shape [64, 70]) has rows of 140 bytes; copy=\"tma\" needs every stride to be a multiple of 16 bytes"
        ),
        "{stderr}"
    );
    let o = run("72");
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("result    correct"));
}

fn tessera(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(env!("CARGO_MANIFEST_DIR")).args(args).output().unwrap()
}

/// An int8 GEMM's work is integer operations: the report counts OP and OP/s (TOP/s on
/// a GPU), as int8 GEMMs are quoted, and the JSON says `"work_unit": "OP"`; a float
/// GEMM's stays FLOP.
#[test]
fn integer_dots_are_counted_in_ops_not_flops() {
    let base =
        ["run", "tests/fixtures/wgmma/int8.tsr", "--kernel", "i8_gemm_nn", "--device", "interp", "--repeat", "1"];
    let o = tessera(&[&base[..], &["--dims", "M=128,N=128,K=64"]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    let work = text.lines().find(|l| l.trim_start().starts_with("work")).unwrap_or_default();
    assert!(work.contains("2.10 MOP in tile.dot: ") && work.contains("OP/s") && !work.contains("FLOP"), "{work}");
    let json = |o: std::process::Output| -> serde_json::Value { serde_json::from_slice(&o.stdout).unwrap() };
    let v = json(tessera(&[&base[..], &["--dims", "M=128,N=128,K=64", "--json"]].concat()));
    assert_eq!((v["flops"].as_u64(), v["work_unit"].as_str()), (Some(2 * 128 * 128 * 64), Some("OP")), "{v}");
    let v = json(tessera(&[
        "run",
        "examples/gemm.tsr",
        "--kernel",
        "gemm",
        "--device",
        "interp",
        "--repeat",
        "1",
        "--dims",
        "M=64,N=64,K=64",
        "--json",
    ]));
    assert_eq!(v["work_unit"], "FLOP", "{v}");
}

/// An int parameter with a default that the body uses as a size (a loop bound) is a shape
/// symbol: a run without a value for it takes the declared default, as a call would (it
/// was assumed 1024 and the kernel doubled its input 1024 times), and `--arg` gives it
/// like any scalar.
#[test]
fn an_int_parameter_used_as_a_size_takes_its_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("k.tsr"),
        "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 64), warps=4))\n\
         def twice(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", \"N\", f32], reps: int = 3):\n    \
         ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        \
         for n0 in tile.parallel(0, N, ctx.BN):\n            x = tile.load(X[m0:m0 + ctx.BM, n0:n0 + ctx.BN])\n            \
         for i in tile.range(0, reps, 1):\n                x = x * 2.0\n            \
         Y[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = x\n",
    )
    .unwrap();
    let factor = |extra: &[&str]| -> f64 {
        let save = dir.path().join("saved");
        let mut args =
            vec!["run", "k.tsr", "--kernel", "twice", "--device", "interp", "--repeat", "1", "--dims", "M=8,N=8"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--save", save.to_str().unwrap()]);
        let o = Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(dir.path()).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("assuming reps"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
        let (x, y) = (read("X.npy"), read("Y.out.npy"));
        y[0] / x[0]
    };
    assert_eq!(factor(&[]), 8.0);
    assert_eq!(factor(&["--arg", "reps=1"]), 2.0);
}
