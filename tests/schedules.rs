//! Schedules end to end through the real binary (docs/language.md, "Schedules and
//! autotuning"): `with_*` values reach the lowered kernel's config, a Halide-style search
//! space is the dict space, and `@kernel.auto` is tuned over its default space.

use std::path::Path;
use std::process::{Command, Output};

fn run_in(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("NO_COLOR");
    cmd.args(args).current_dir(dir).output().expect("tessera runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

const GEMM_BODY: &str = "(A: Tensor[\"M\", \"K\", f16], B: Tensor[\"K\", \"N\", f16], C: Tensor[\"M\", \"N\", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]) @ tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc
";

fn gemm(decorator: &str, name: &str) -> String {
    format!("{decorator}\ndef {name}{GEMM_BODY}\n")
}

/// `tessera autotune FILE --kernel KERNEL --target TARGET ARGS... --device interp --json`
/// (one timed run per candidate), which must find a winner; every candidate it measured
/// matched the f64 reference.
fn autotune_json(dir: &Path, file: &str, kernel: &str, target: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["autotune", file, "--kernel", kernel, "--target", target];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--device", "interp", "--repeat", "1", "--warmup", "0", "--force", "--json"]);
    let o = run_in(dir, &all);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["correct"], true, "{r}");
    }
    v
}

/// The tuned configurations of `kernel` on `target` (sorted), the space's size and its
/// pruned count.
fn tune(dir: &Path, kernel: &str, target: &str) -> (Vec<String>, u64, u64) {
    let v = autotune_json(dir, "k.tsr", kernel, target, &["--dims", "M=64,N=64,K=64"]);
    let mut configs: Vec<String> = v["results"].as_array().unwrap().iter().map(|r| r["schedule"].to_string()).collect();
    configs.sort();
    let pruned = v["space"]["pruned"].as_array().unwrap().len() as u64;
    (configs, v["space"]["total"].as_u64().unwrap(), pruned)
}

#[test]
fn with_methods_reach_the_lowered_config() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "from tessera import *\n\nbase = Schedule(block=(128, 128), k=32, warps=8, stages=3)\n\n{}",
        gemm("@kernel.schedule(base.with_block(64, 32).with_k(k=16).with_warps(4).with_swizzle(\"xor\"))", "g")
    );
    std::fs::write(dir.path().join("k.tsr"), src).unwrap();
    let o = run_in(dir.path(), &["check", "k.tsr"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run_in(dir.path(), &["lower", "k.tsr", "--kernel", "g", "--stage", "sched"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("config = \"BD=64, BK=16, BM=64, BN=32, stages=3, swizzle=xor, vector=4, warps=4\""), "{out}");
}

#[test]
fn a_halide_chain_is_the_dict_space() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "from tessera import *\n\n{}{}",
        gemm("@kernel.autotune(space=dict(BM=[64, 128], BN=[64], BK=[32, 64], warps=[4, 8], stages=[2, 3]))", "d"),
        gemm("@kernel.autotune(space=block(m=[64, 128], n=[64], k=[32, 64]).warps([4, 8]).stages([2, 3]))", "c"),
    );
    std::fs::write(dir.path().join("k.tsr"), src).unwrap();
    let o = run_in(dir.path(), &["check", "k.tsr"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let dict = tune(dir.path(), "d", "sm_90");
    let chain = tune(dir.path(), "c", "sm_90");
    assert_eq!(dict.1, 16);
    assert_eq!(dict, chain);
}

#[test]
fn kernel_auto_is_tuned_over_its_default_space() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.tsr"), format!("from tessera import *\n\n{}", gemm("@kernel.auto", "a")))
        .unwrap();
    // sm_90 (the interpreter's target): BM, BN in {64, 128}, BK in {32, 64} for f16 dots,
    // warps {4, 8}, stages {2, 3, 4}, and the Hopper paths: 48 configurations each of
    // mma.sync, wgmma, wgmma + TMA and wgmma + TMA + producer warpgroup, and BN = 256 for
    // the three wgmma paths over 8 warps (12 each).
    let (configs, total, pruned) = tune(dir.path(), "a", "sm_90");
    assert_eq!(total, 4 * 48 + 3 * 12);
    assert_eq!(configs.len() as u64 + pruned, total);
    assert!(configs.iter().any(|c| c.contains("\"BK\":64")), "{configs:?}");
    let with = |parts: &[&str]| configs.iter().filter(|c| parts.iter().all(|p| c.contains(p))).count();
    assert_eq!(with(&["\"producer\":\"warpgroup\"", "\"copy\":\"tma\"", "\"mma\":\"wgmma\""]), 60, "{configs:?}");
    assert_eq!(with(&["\"copy\":\"tma\"", "\"mma\":\"mma.sync\""]), 0, "{configs:?}");
    assert_eq!(with(&["\"BN\":256", "\"warps\":8"]), 36, "{configs:?}");
    // sm_80 has less shared memory: stages {2, 3}.
    let (_, total, _) = tune(dir.path(), "a", "sm_80");
    assert_eq!(total, 32, "sm_80 searches stages {{2, 3}}");
}

/// Flash attention under `@kernel.auto` on sm_90: the Hopper paths its dots take are in
/// the space, the combinations its rules refuse are not (none is pruned by them: W0702
/// speaks of the budgets only), and every candidate that fits matches the reference.
#[test]
fn kernel_auto_attention_leaves_out_what_the_hopper_rules_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/flash_attention.tsr")).unwrap();
    let (decorator, def) =
        (example.find("@ts.kernel.autotune(").unwrap(), example.find("def flash_attention").unwrap());
    let source = format!("{}@ts.kernel.auto\n{}", &example[..decorator], &example[def..]);
    std::fs::write(dir.path().join("fa.tsr"), source).unwrap();
    let v = autotune_json(
        dir.path(),
        "fa.tsr",
        "flash_attention",
        "sm_90",
        &["--dims", "BH=2,S=128,D=64", "--arg", "causal=true"],
    );
    let results = v["results"].as_array().unwrap();
    // Attention's P @ V at BM=64 over 8 warps (warpgroups that split N) is refused.
    assert!(v["space"]["left_out"].as_u64().unwrap() > 0, "{}", v["space"]);
    assert_eq!(v["space"]["rules"].as_array().unwrap().len(), 3, "{}", v["space"]);
    for p in v["space"]["pruned"].as_array().unwrap() {
        let reason = p["reason"].as_str().unwrap();
        assert!(reason == "registers" || reason == "shared memory", "pruned by a rule the space should leave out: {p}");
    }
    let path = |producer: &str, copy: &str, mma: &str| {
        results.iter().any(|r| {
            r["schedule"]["producer"] == producer && r["schedule"]["copy"] == copy && r["schedule"]["mma"] == mma
        })
    };
    assert!(path("none", "cp.async", "mma.sync"), "{results:?}");
    assert!(path("none", "cp.async", "wgmma"), "{results:?}");
    assert!(path("none", "tma", "wgmma"), "{results:?}");
    assert!(path("warpgroup", "tma", "wgmma"), "{results:?}");
}

/// `name = kernel.with_schedule(S)`: a kernel of its own, found by name by `lower`, `run`
/// and the lints, with `S` as its fixed schedule (the original's space dropped).
#[test]
fn with_schedule_defines_a_kernel_found_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "from tessera import *\n\nbase = Schedule(block=(128, 128), k=32, warps=8, stages=3)\n\n{}\n\
         small = g.with_schedule(base.with_block(32, 16).with_warps(2))\n\
         inline = g.with_schedule(Schedule(block=(16, 16), k=16, warps=1))\n",
        gemm("@kernel.autotune(space=dict(BM=[64, 128], BN=[64], BK=[32]))", "g")
    );
    std::fs::write(dir.path().join("k.tsr"), src).unwrap();
    let o = run_in(dir.path(), &["check", "k.tsr", "--target", "cpu"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run_in(dir.path(), &["lower", "k.tsr", "--kernel", "small", "--stage", "sched"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("func.func @small("), "{out}");
    assert!(
        out.contains("config = \"BD=64, BK=32, BM=32, BN=16, stages=3, swizzle=none, vector=4, warps=2\""),
        "{out}"
    );
    let o = run_in(dir.path(), &["lower", "k.tsr", "--kernel", "inline", "--stage", "sched"]);
    let out = text(&o);
    assert!(
        out.contains("config = \"BD=64, BK=16, BM=16, BN=16, stages=2, swizzle=none, vector=4, warps=1\""),
        "{out}"
    );
    let o = run_in(
        dir.path(),
        &[
            "run",
            "k.tsr",
            "--kernel",
            "small",
            "--dims",
            "M=64,N=48,K=40",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["correct"], true, "{v}");
    assert_eq!(v["check"], "full", "{v}");
    // A name that is neither a function nor a derived kernel is still refused.
    let o = run_in(dir.path(), &["lower", "k.tsr", "--kernel", "base"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("it defines g, small, inline"), "{}", text(&o));
}

/// A derived kernel's errors are its assignment's: it is not lowered, and its target
/// lints point at the assignment.
#[test]
fn a_derived_kernel_reports_at_its_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "from tessera import *\n\n{}\nbad = g.with_schedule(Schedule(warps=3))\nwide = g.with_schedule(Schedule(block=(128, 128), warps=4))\n",
        gemm("@kernel", "g")
    );
    std::fs::write(dir.path().join("k.tsr"), &src).unwrap();
    let line = |prefix: &str| src.lines().position(|l| l.starts_with(prefix)).unwrap() + 1;
    let o = run_in(dir.path(), &["check", "k.tsr", "--format", "concise"]);
    let out = text(&o);
    assert!(out.contains(&format!("k.tsr:{}:", line("bad ="))) && out.contains("error[E0701]"), "{out}");
    let o = run_in(dir.path(), &["lower", "k.tsr", "--kernel", "bad"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("cannot lower `bad`"), "{}", text(&o));
    // `g`'s own occupancy warning stays at `g`; `wide`'s (the same 128×128 block and 4
    // warps) is at the assignment, naming it.
    let wide = format!(
        "k.tsr:{}:1: warning[W0602] occupancy 12.5% on sm_90: 2 resident blocks of 4 warps per SM \
         (in `wide = g.with_schedule(...)`)",
        line("wide =")
    );
    assert!(out.lines().any(|l| l == wide), "{out}");
    assert!(out.lines().any(|l| l.starts_with(&format!("k.tsr:{}:5: warning[W0602]", line("def g")))), "{out}");
}
