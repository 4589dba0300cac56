//! `name = stdlib_kernel.with_schedule(S)`: a standard-library kernel under a schedule of
//! the user's, through the real binary. It checks, lowers under `S`, runs (checked
//! against its f64 reference, and against NumPy from `--save`), is callable from `@jit`
//! as itself (the plan launches the derived kernel, not the library's), and everything
//! it reports points into the user's file, never at stdlib text.

mod graph_oracles;

use std::process::Command;

use graph_oracles::{devices, numpy, tessera, text};

const PROGRAM: &str = "from tessera import *
from tessera.stdlib import matmul, stable_softmax as ssm

small_mm = matmul.with_schedule(Schedule(block=(32, 16), k=16, warps=2, stages=2))
soft = ssm.with_schedule(Schedule(block=(4, 256), warps=4))

@jit
def mm(a: Tensor[\"M\", \"K\", f32], b: Tensor[\"K\", \"N\", f32], c: Tensor[\"M\", \"N\", f32]) -> Tensor[\"M\", \"N\", f32]:
    return small_mm(a, b, c)

@jit
def sm(x: Tensor[\"R\", \"C\", f32]) -> Tensor[\"R\", \"C\", f32]:
    return soft(x, x) * 2.0
";

fn write(dir: &std::path::Path, name: &str, src: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, src).unwrap();
    path
}

fn python(script: &str, dir: &std::path::Path) -> std::process::Output {
    Command::new("python3").args(["-c", script, dir.to_str().unwrap()]).output().expect("python3 runs")
}

#[test]
fn a_derived_stdlib_kernel_checks_and_lowers_under_its_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "d.tsr", PROGRAM);
    let o = tessera().args(["check", file.to_str().unwrap(), "--target", "cpu"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o =
        tessera().args(["lower", file.to_str().unwrap(), "--kernel", "small_mm", "--stage", "sched"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("func.func @small_mm("), "{out}");
    assert!(
        out.contains("config = \"BD=64, BK=16, BM=32, BN=16, stages=2, swizzle=none, vector=4, warps=2\""),
        "{out}"
    );
    // Every location is in the user's file: the assignment's name (line 4).
    assert!(out.contains("loc(\"") && !out.contains("stdlib"), "{out}");
    for loc in out.split("loc(\"").skip(1) {
        let loc = &loc[..loc.find(')').unwrap()];
        assert!(loc.ends_with("d.tsr\":4:1"), "a location outside the assignment: {loc}");
    }
    // The @jit function launches the derived kernel itself.
    let o = tessera().args(["lower", file.to_str().unwrap(), "--kernel", "mm", "--stage", "sched"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("{callee = \"small_mm\", source = \"file\"}"), "{out}");
    assert!(!out.contains("callee = \"matmul\""), "{out}");
}

/// The derived kernel run alone and from `@jit`, on every device, against NumPy.
#[test]
fn a_derived_stdlib_kernel_runs_and_matches_numpy() {
    let has_numpy = numpy();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "d.tsr", PROGRAM);
    for device in devices() {
        for (function, dims, oracle) in [
            (
                "small_mm",
                "M=40,N=24,K=20",
                "want = np.load(o + '/A.npy').astype(np.float64) @ np.load(o + '/B.npy').astype(np.float64)\n\
                 got = np.load(o + '/C.out.npy')",
            ),
            (
                "mm",
                "M=33,N=17,K=9",
                "want = np.load(o + '/a.npy').astype(np.float64) @ np.load(o + '/b.npy').astype(np.float64)\n\
                 got = np.load(o + '/return.out.npy')",
            ),
            (
                "sm",
                "R=5,C=300",
                "x = np.load(o + '/x.npy').astype(np.float64)\n\
                 e = np.exp(x - x.max(axis=1, keepdims=True))\n\
                 want = 2 * e / e.sum(axis=1, keepdims=True)\n\
                 got = np.load(o + '/return.out.npy')",
            ),
        ] {
            let out = dir.path().join(format!("{function}_{device}"));
            let o = tessera()
                .args(["run", file.to_str().unwrap(), "--kernel", function, "--dims", dims, "--device", device])
                .args(["--repeat", "1", "--json", "--save", out.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "{function} on {device}: {}", text(&o));
            let report = std::fs::read_to_string(out.join("run.json")).unwrap();
            assert!(report.contains("\"correct\""), "{function} on {device}: {report}");
            if has_numpy {
                let script = format!(
                    "import sys, os, numpy as np\no = sys.argv[1]\n{oracle}\n\
                     assert got.shape == want.shape, (got.shape, want.shape)\n\
                     assert np.allclose(got, want, rtol=1e-4, atol=1e-5), np.max(np.abs(got - want))\n"
                );
                let p = python(&script, &out);
                assert!(p.status.success(), "NumPy oracle of {function} on {device}: {}", text(&p));
                // The oracle can fail: a wrong result is refused.
                let wrong = format!("{}\nwant = want + 1e-2\n{}", &script[..script.find("assert").unwrap()], {
                    let tail = &script[script.find("assert").unwrap()..];
                    tail.to_string()
                });
                assert!(!python(&wrong, &out).status.success(), "the oracle of {function} accepts a wrong result");
            }
        }
    }
}

/// What a schedule breaks in a stdlib body is reported at the derived name, in the user's
/// file; a bad schedule value at the value; the derived kernel then has no IR.
#[test]
fn a_derived_stdlib_kernel_reports_in_the_users_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = "from tessera import *\nfrom tessera.stdlib import matmul\n\n\
               huge = matmul.with_schedule(Schedule(block=(256, 256), k=256, stages=4))\n\
               bad = matmul.with_schedule(Schedule(warps=3))\n";
    let file = write(dir.path(), "e.tsr", src);
    let o =
        tessera().args(["check", file.to_str().unwrap(), "--target", "sm_90", "--format", "json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let lines: Vec<&str> = src.lines().collect();
    let mut codes = Vec::new();
    for d in v["diagnostics"].as_array().unwrap() {
        let code = d["code"].as_str().unwrap();
        codes.push(code.to_string());
        let (line, start, end) = (
            d["range"]["start"]["line"].as_u64().unwrap() as usize,
            d["range"]["start"]["column"].as_u64().unwrap() as usize,
            d["range"]["end"]["column"].as_u64().unwrap() as usize,
        );
        assert_eq!(d["range"]["end"]["line"].as_u64().unwrap() as usize, line, "{d}");
        // 1-based lines and columns of this file (ASCII).
        let at = &lines[line - 1][start - 1..end - 1];
        match code {
            "E0500" | "W0600" => assert_eq!(at, "huge", "{d}"),
            "E0701" => assert_eq!(at, "3", "{d}"),
            _ => panic!("unexpected {d}"),
        }
    }
    assert!(codes.contains(&"E0500".to_string()), "{out}");
    assert!(codes.contains(&"E0701".to_string()), "{out}");
    assert!(out.contains("in the standard-library kernel `matmul`"), "{out}");
    let o = tessera().args(["lower", file.to_str().unwrap(), "--kernel", "bad"]).output().unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("E0701"), "{}", text(&o));
}
