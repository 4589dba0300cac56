//! End-to-end tests of the `tessera` binary: exit codes, inputs, configuration and
//! every output format (snapshots).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("NO_COLOR").env_remove("TESSERA_TEST_PANIC_ON");
    cmd
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str], dir: &Path) -> Output {
    tessera().args(args).current_dir(dir).output().expect("tessera runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

fn codes(v: &serde_json::Value) -> Vec<String> {
    v["diagnostics"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap().to_string()).collect()
}

#[test]
fn examples_have_no_errors_and_their_warnings_are_pinned() {
    // The examples are tuned kernels; what the target lints say about them (pruned
    // autotune candidates, low occupancy of large GEMM tiles) is reviewed, not noise.
    let o = run(&["check", "--format", "concise", "examples"], &root());
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains("error["), "{}", stdout(&o));
    insta::assert_snapshot!("examples_warnings", stdout(&o));
}

#[test]
fn the_repository_checks_clean_with_its_excludes() {
    let o = run(&["check"], &root());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn every_format_is_pinned() {
    for format in ["human", "concise", "json", "sarif", "github"] {
        let o = run(&["check", "--format", format, "tests/fixtures/invalid/mixed.tsr"], &root());
        assert_eq!(o.status.code(), Some(1), "{format}: {}", stderr(&o));
        insta::assert_snapshot!(format!("format_{format}"), stdout(&o));
    }
}

#[test]
fn json_follows_the_contract() {
    let o = run(&["check", "--format", "json", "tests/fixtures/invalid/mixed.tsr"], &root());
    let v = json(&o);
    assert_eq!(v["version"], 1);
    assert_eq!(v["summary"]["files"], 1);
    assert_eq!(v["summary"]["errors"], 3);
    assert_eq!(v["summary"]["warnings"], 1);
    let first = &v["diagnostics"][0];
    assert_eq!(first["file"], "tests/fixtures/invalid/mixed.tsr");
    assert_eq!(first["code"], "E0301");
    assert_eq!(first["range"]["start"], serde_json::json!({"line": 7, "column": 12}));
    assert!(first["labels"].as_array().is_some_and(|l| l.len() == 2));
    let member = v["diagnostics"].as_array().unwrap().iter().find(|d| d["code"] == "E0201").unwrap();
    assert_eq!(member["fix"]["edits"][0]["text"], "load");
    // Sorted by position.
    let lines: Vec<u64> =
        v["diagnostics"].as_array().unwrap().iter().map(|d| d["range"]["start"]["line"].as_u64().unwrap()).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
}

#[test]
fn exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(&["check", "no/such/path"], dir.path()).status.code(), Some(2));
    assert_eq!(run(&["check", "--format", "yaml", "."], dir.path()).status.code(), Some(2));
    let o = run(&["check", "--select", "E9999", "."], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown code"), "{}", stderr(&o));
    // An empty directory is fine.
    assert_eq!(run(&["check", "."], dir.path()).status.code(), Some(0));
}

#[test]
fn warnings_pass_unless_denied() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("q.tsr"),
        // fp8 (not int8: no stdlib matmul takes int8, and check says so, E0809).
        "from tessera import *\n\n@jit\ndef f(x: Tensor[\"M\", \"K\", fp8_e4m3], w: Tensor[\"K\", \"N\", fp8_e4m3]):\n    return x @ w\n",
    )
    .unwrap();
    let o = run(&["check", "--format", "concise", "."], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("warning[W0404]"), "{}", stdout(&o));
    assert_eq!(run(&["check", "--deny", "warnings", "."], dir.path()).status.code(), Some(1));
}

#[test]
fn select_and_ignore_filter_codes() {
    let fixture = root().join("tests/fixtures/invalid/mixed.tsr");
    let f = fixture.to_str().unwrap();
    let only = json(&run(&["check", "--format", "json", "--select", "E04", f], &root()));
    assert_eq!(codes(&only), vec!["E0400"]);
    let without = json(&run(&["check", "--format", "json", "--ignore", "E0301,W", f], &root()));
    assert_eq!(codes(&without), vec!["E0400", "E0201"]);
    let o = run(&["check", "--select", "W0404", f], &root());
    assert_eq!(o.status.code(), Some(0), "only a warning is left");
}

#[test]
fn tessera_toml_is_found_upward() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tessera.toml"), "ignore = [\"E0400\"]\nexclude = [\"vendored\"]\n").unwrap();
    std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
    std::fs::create_dir_all(dir.path().join("vendored")).unwrap();
    let mix =
        "from tessera import *\n\n@jit\ndef mix(a: Tensor[\"N\", bf16], b: Tensor[\"N\", f32]):\n    return a + b\n";
    std::fs::write(dir.path().join("src/deep/mix.tsr"), mix).unwrap();
    std::fs::write(dir.path().join("vendored/bad.tsr"), "def (\n").unwrap();
    let o = run(&["check", "."], dir.path());
    assert_eq!(o.status.code(), Some(0), "E0400 is ignored and vendored/ is excluded: {}", stdout(&o));
    // The command line wins over the file.
    let o = run(&["check", "--select", "E0400", "src"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    // A malformed tessera.toml is a tool failure, not a diagnostic.
    std::fs::write(dir.path().join("tessera.toml"), "target = 5\n").unwrap();
    let o = run(&["check", "src"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("tessera.toml"), "{}", stderr(&o));
}

#[test]
fn gitignored_files_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".gitignore"), "build/\n").unwrap();
    std::fs::create_dir_all(dir.path().join("build")).unwrap();
    std::fs::write(dir.path().join("build/generated.tsr"), "x = (\n").unwrap();
    std::fs::write(dir.path().join("ok.tsr"), "X = 1\n").unwrap();
    let o = run(&["check", "--format", "json", "."], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(json(&o)["summary"]["files"], 1);
}

#[test]
fn stdin_is_reported_under_the_given_name() {
    let mut child = tessera()
        .args(["check", "--format", "concise", "--stdin-filename", "kernels/k.tsr"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"from tessera import *\n\n@jit\ndef f(x: Tensor[\"N\", f32], w: Tensor[\"M\", f32]):\n    return x + w\n",
        )
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o).trim(),
        "kernels/k.tsr:5:12: error[E0302] `+`: shapes do not broadcast: `x` is [N] but `w` is [M] (N ≠ M)"
    );
}

#[test]
fn invalid_utf8_is_a_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("latin1.tsr"), b"# caf\xe9\nX = 1\n").unwrap();
    let o = run(&["check", "--format", "json", "."], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(codes(&v), vec!["E0104"]);
    assert_eq!(v["diagnostics"][0]["range"]["start"], serde_json::json!({"line": 1, "column": 6}));
}

#[test]
fn an_internal_error_is_reported_and_other_files_are_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a_boom.tsr"), "X = 1\n").unwrap();
    std::fs::write(
        dir.path().join("b_bad.tsr"),
        "from tessera import *\n\n@jit\ndef f(x: Tensor[\"N\", bf33]):\n    return x\n",
    )
    .unwrap();
    let o = tessera()
        .args(["check", "--format", "concise", "."])
        .current_dir(dir.path())
        .env("TESSERA_TEST_PANIC_ON", "boom")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("internal error while checking a_boom.tsr: injected failure"), "{}", stderr(&o));
    assert!(stdout(&o).contains("b_bad.tsr:4:22: error[E0401]"), "the other file is still reported: {}", stdout(&o));
    assert!(!stderr(&o).contains("panicked at"), "no raw panic output: {}", stderr(&o));
}

#[test]
fn color_follows_no_color_and_terminals() {
    // Not a terminal: no escape codes.
    let o = run(&["check", "tests/fixtures/invalid/mixed.tsr"], &root());
    assert!(!stdout(&o).contains('\u{1b}'));
}

/// A race `tessera check` reports, or a program id outside its grid loop, is in the code
/// under any schedule: `run` and `autotune` refuse the kernel with it, on every device. The interpreter runs one
/// program at a time with every write visible, so it used to call these kernels correct.
#[test]
fn a_kernel_check_finds_racy_or_misplacing_program_ids_is_never_run() {
    let corpus = root().join("tests/corpus/invalid");
    for (file, line) in [("e0501_race.tsr", 14), ("e0501_grid_store_race.tsr", 15)] {
        let path = corpus.join(file);
        let path = path.to_str().unwrap();
        let check = run(&["check", path], &root());
        assert_eq!(check.status.code(), Some(1), "{file}: {}", stdout(&check));
        assert!(stdout(&check).contains("E0501"), "{file}: {}", stdout(&check));
        for device in [&["--device", "interp"][..], &["--device", "cpu"], &["--device", "interp", "--target", "sm_80"]]
        {
            let mut argv = vec!["run", path, "--kernel", "gemm", "--dims", "M=64,N=128,K=64", "--json"];
            argv.extend_from_slice(device);
            let o = run(&argv, &root());
            assert_eq!(o.status.code(), Some(1), "{file} {device:?}: {}{}", stdout(&o), stderr(&o));
            let v = json(&o);
            assert_eq!(v["correct"], false, "{v}");
            assert_eq!(v["error"]["kind"], "compile", "{v}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("{file}:{line}:")) && message.contains("E0501 race"), "{message}");
        }
    }
    // An in-place shift whose load reaches into the next program's store: the CPU's
    // threads made its verdict flip, and the cause blamed code generation on some runs.
    let path = corpus.join("e0501_neighbour_race.tsr");
    for device in ["interp", "cpu"] {
        let argv = ["run", path.to_str().unwrap(), "--kernel", "shift_left", "--dims", "N=4096", "--device", device];
        let o = run(&[&argv[..], &["--json"]].concat(), &root());
        assert_eq!(o.status.code(), Some(1), "{device}: {}{}", stdout(&o), stderr(&o));
        let v = json(&o);
        let message = v["error"]["message"].as_str().unwrap();
        assert_eq!(v["error"]["kind"], "compile", "{v}");
        assert!(message.contains("e0501_neighbour_race.tsr:12:") && message.contains("E0501 race"), "{message}");
    }
    // A program id outside its grid loop: the reference has no program there.
    let path = corpus.join("e0503_program_id_outside_grid.tsr");
    let o = run(&["run", path.to_str().unwrap(), "--kernel", "shifted", "--device", "cpu", "--dims", "N=300"], &root());
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("e0503_program_id_outside_grid.tsr:7:9: cannot run `shifted`: E0503"),
        "{}",
        stderr(&o)
    );
    // The same kernel with a space to search: refused before the search.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(corpus.join("e0501_grid_store_race.tsr")).unwrap().replace(
        "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))",
        "@kernel.autotune(space=dict(BM=[32, 64], BN=[64], BK=[32], warps=[4]))",
    );
    assert!(text.contains("@kernel.autotune"));
    std::fs::write(dir.path().join("tuned.tsr"), text).unwrap();
    let o = run(
        &["autotune", "tuned.tsr", "--kernel", "gemm", "--device", "interp", "--dims", "M=64,N=128,K=64"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("tuned.tsr:15:13: cannot tune `gemm`: E0501 race"), "{}", stderr(&o));
}

/// A kernel whose reduction takes in a partial tile's padding (W0606) runs, and its
/// verdict is against a reference that pads the same way: the run says so first.
#[test]
fn a_run_warns_that_its_verdict_cannot_see_padding_in_a_reduction() {
    let path = root().join("tests/corpus/invalid/w0606_padded_reduction.tsr");
    let o = run(
        &["run", path.to_str().unwrap(), "--kernel", "row_max", "--device", "interp", "--dims", "R=20,C=300"],
        &root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o)
            .contains("w0606_padded_reduction.tsr:12:33: W0606 this max takes in the padding of a partial tile of `X`"),
        "{}",
        stderr(&o)
    );
    // The example softmax pads with -INF: no warning.
    let o = run(
        &["run", "examples/softmax.tsr", "--kernel", "softmax", "--device", "interp", "--dims", "R=4,C=300"],
        &root(),
    );
    assert!(!stderr(&o).contains("W0606"), "{}", stderr(&o));
}

/// What the code generator refuses stops `tessera run` and `tessera lower`, so `tessera
/// check` reports it (E0809 at the op, naming the backend); and f64 `exp`/`log`, which
/// the PTX backend now computes from f64 arithmetic, pass both.
#[test]
fn check_reports_what_the_code_generator_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let source = "from tessera import *\n\n\
@kernel.schedule(Schedule(block=(32, 32), warps=4))\n\
def masked64(S: Tensor[\"R\", \"C\", f64], Y: Tensor[\"R\", \"C\", f64]):\n    \
ctx = tile.context()\n    \
for r0 in tile.parallel(0, R, ctx.BM):\n        \
s = tile.load(S[r0:r0 + ctx.BM, 0:ctx.BN])\n        \
Y[r0:r0 + ctx.BM, 0:ctx.BN] = tile.causal_mask(s, r0, 0)\n\n\
@kernel.schedule(Schedule(block=(1, 128), warps=4))\n\
def softplus64(X: Tensor[\"N\", f64], Y: Tensor[\"N\", f64]):\n    \
ctx = tile.context()\n    \
for i in tile.parallel(0, N, ctx.BN):\n        \
Y[i:i + ctx.BN] = tile.log(1.0 + tile.exp(tile.load(X[i:i + ctx.BN])))\n";
    std::fs::write(dir.path().join("k.tsr"), source).unwrap();
    let o = run(&["check", "--format", "json", "k.tsr"], dir.path());
    let v = json(&o);
    assert_eq!(codes(&v), vec!["E0809"], "{}", stdout(&o));
    let d = &v["diagnostics"][0];
    let message = d["message"].as_str().unwrap();
    assert!(message.contains("`masked64`") && message.contains("PTX backend"), "{message}");
    assert_eq!(d["range"]["start"]["line"], 8, "at the mask: {d}");
    let lower = run(&["lower", "--stage", "target", "--kernel", "masked64", "k.tsr"], dir.path());
    assert!(!lower.status.success() && stderr(&lower).contains("PTX backend"), "{}", stderr(&lower));
    let lower = run(&["lower", "--stage", "target", "--kernel", "softplus64", "k.tsr"], dir.path());
    assert!(lower.status.success(), "{}", stderr(&lower));
    assert!(stdout(&lower).contains("fma.rn.f64"), "f64 exp and log are f64 polynomials");
}
