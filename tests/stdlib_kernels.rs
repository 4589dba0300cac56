//! The stdlib's optimizer and position-embedding kernels (`fused_adam`,
//! `rotary_embedding`) against NumPy, through the real binary: the inputs are NumPy files
//! given with `tessera run --input`, the run must pass its own f64 check, and a NumPy
//! oracle recomputes every output from the saved inputs. Also `--input` itself: dims
//! from the files' shapes, and every kind of bad file named.

mod graph_oracles;

use std::path::Path;
use std::process::Command;

use graph_oracles::{devices, numpy, tessera, text};

fn stdlib_file(dir: &Path, name: &str) -> std::path::PathBuf {
    let (_, source) = tessera_frontend::stdlib::FILES.iter().find(|(n, _)| *n == name).expect("a stdlib file");
    let path = dir.join(name);
    std::fs::write(&path, source).unwrap();
    path
}

fn python(script: &str, dir: &Path) -> std::process::Output {
    Command::new("python3").args(["-c", script, dir.to_str().unwrap()]).output().expect("python3 runs")
}

const ADAM_INPUTS: &str = r#"
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
n = 3001
np.save(d + '/p.npy', rng.standard_normal(n).astype(np.float32))
np.save(d + '/g.npy', rng.standard_normal(n).astype(np.float32))
np.save(d + '/m.npy', (0.1 * rng.standard_normal(n)).astype(np.float32))
np.save(d + '/v.npy', (0.01 * rng.random(n)).astype(np.float32))
"#;

/// AdamW as PyTorch's `torch.optim.AdamW` documents it (decoupled weight decay:
/// p - lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)), in float64 from the saved inputs.
const ADAM_ORACLE: &str = r#"
import sys, numpy as np
o = sys.argv[1]
lr, b1, b2, eps, wd, step = 0.01, 0.8, 0.95, 1e-6, 0.1, 4.0
p, g, m, v = (np.load(o + '/' + n + '.npy').astype(np.float64) for n in 'PGMV')
m1 = b1 * m + (1 - b1) * g
v1 = b2 * v + (1 - b2) * g * g
mhat = m1 / (1 - b1 ** step)
vhat = v1 / (1 - b2 ** step)
p1 = p - lr * (mhat / (np.sqrt(vhat) + eps) + wd * p)
for name, want in (('M', m1), ('V', v1), ('P', p1)):
    got = np.load(o + '/' + name + '.out.npy').astype(np.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.all(np.isfinite(got)), name
    assert np.allclose(got, want, rtol=2e-5, atol=1e-6), (name, np.max(np.abs(got - want)))
"#;

const ADAM_ARGS: &str = "lr=0.01,beta1=0.8,beta2=0.95,eps=1e-6,weight_decay=0.1,step=4.0";

const ROPE_INPUTS: &str = r#"
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(11)
bh, s, h = 3, 70, 16
np.save(d + '/x.npy', rng.standard_normal((bh, s, 2 * h)).astype(np.float32))
inv = 1.0 / (10000.0 ** (np.arange(h) / h))
angles = np.outer(np.arange(s), inv)
np.save(d + '/cos.npy', np.cos(angles).astype(np.float32))
np.save(d + '/sin.npy', np.sin(angles).astype(np.float32))
"#;

/// The rotate-half form (GPT-NeoX, LLaMA): the pairs are (i, i + H).
const ROPE_ORACLE: &str = r#"
import sys, numpy as np
o = sys.argv[1]
x = np.load(o + '/X.npy').astype(np.float64)
c = np.load(o + '/cos.npy').astype(np.float64)
s = np.load(o + '/sin.npy').astype(np.float64)
h = c.shape[1]
x1, x2 = x[..., :h], x[..., h:]
rotated = np.concatenate([-x2, x1], axis=-1)
want = x * np.concatenate([c, c], axis=-1)[None] + rotated * np.concatenate([s, s], axis=-1)[None]
got = np.load(o + '/Y.out.npy').astype(np.float64)
assert got.shape == want.shape, (got.shape, want.shape)
assert np.allclose(got, want, rtol=1e-5, atol=1e-6), np.max(np.abs(got - want))
"#;

struct KernelCase {
    file: &'static str,
    kernel: &'static str,
    inputs_script: &'static str,
    /// `--input NAME=FILE` pairs, files relative to the inputs directory.
    inputs: &'static [(&'static str, &'static str)],
    args: &'static str,
    oracle: &'static str,
}

const CASES: &[KernelCase] = &[
    KernelCase {
        file: "optim.tsr",
        kernel: "fused_adam",
        inputs_script: ADAM_INPUTS,
        inputs: &[("P", "p.npy"), ("G", "g.npy"), ("M", "m.npy"), ("V", "v.npy")],
        args: ADAM_ARGS,
        oracle: ADAM_ORACLE,
    },
    KernelCase {
        file: "rotary.tsr",
        kernel: "rotary_embedding",
        inputs_script: ROPE_INPUTS,
        inputs: &[("X", "x.npy"), ("cos", "cos.npy"), ("sin", "sin.npy")],
        args: "",
        oracle: ROPE_ORACLE,
    },
];

/// Runs `case` on `device` with its NumPy inputs, saving into `out`; returns run.json.
fn run_case(dir: &Path, case: &KernelCase, device: &str, out: &Path) -> serde_json::Value {
    let file = stdlib_file(dir, case.file);
    let mut cmd = tessera();
    cmd.args(["run", file.to_str().unwrap(), "--kernel", case.kernel, "--device", device, "--repeat", "1"]);
    for (name, path) in case.inputs {
        cmd.arg("--input").arg(format!("{name}={}", dir.join(path).display()));
    }
    if !case.args.is_empty() {
        cmd.args(["--arg", case.args]);
    }
    let o = cmd.args(["--save", out.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{} on {device}: {}", case.kernel, text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(report["correct"], true, "{} on {device}: {report}", case.kernel);
    assert!(report["assumed_dims"].as_array().unwrap().is_empty(), "dims come from the files: {report}");
    report
}

#[test]
fn stdlib_optimizer_and_rotary_kernels_match_numpy() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for case in CASES {
        let o = python(case.inputs_script, dir.path());
        assert!(o.status.success(), "{}", text(&o));
        for device in devices() {
            let out = dir.path().join(format!("{}_{device}", case.kernel));
            let report = run_case(dir.path(), case, device, &out);
            assert_eq!(report["inputs_from_files"].as_object().unwrap().len(), case.inputs.len(), "{report}");
            let o = python(case.oracle, &out);
            assert!(o.status.success(), "NumPy oracle of {} on {device}: {}", case.kernel, text(&o));
        }
    }
}

/// The oracles can fail: each refuses its kernel's result once one element is off.
#[test]
fn the_stdlib_oracles_refuse_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (case, output) in CASES.iter().zip(["P", "Y"]) {
        assert!(python(case.inputs_script, dir.path()).status.success());
        let out = dir.path().join(format!("{}_wrong", case.kernel));
        run_case(dir.path(), case, "interp", &out);
        assert!(python(case.oracle, &out).status.success());
        let spoil = format!(
            "import sys, numpy as np\np = sys.argv[1] + '/{output}.out.npy'\ny = np.load(p)\n\
             y.reshape(-1)[5] += 1e-3\nnp.save(p, y)\n"
        );
        assert!(python(&spoil, &out).status.success());
        let o = python(case.oracle, &out);
        assert!(!o.status.success(), "the oracle of {} accepted a wrong result", case.kernel);
        assert!(text(&o).contains("AssertionError"), "{}", text(&o));
    }
}

/// A seeded second moment is negative half the time: the run says the result is not
/// finite instead of calling it correct.
#[test]
fn fused_adam_on_seeded_inputs_reports_the_nan() {
    let dir = tempfile::tempdir().unwrap();
    let file = stdlib_file(dir.path(), "optim.tsr");
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", "fused_adam", "--dims", "N=600"])
        .args(["--device", "interp", "--repeat", "1", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["correct"], false, "{report}");
}

fn write_npy(path: &Path, dims: &[usize]) {
    use tessera_backends::tensor::HostTensor;
    let n: usize = dims.iter().product();
    let values: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
    let t = HostTensor::from_f64(tessera_frontend::check::DType::F32, dims, &values);
    tessera_backends::npy::write(path, &t).unwrap();
}

/// Bad `--input`s exit 2 with a message naming the parameter, the file and the shapes.
#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = stdlib_file(d, "rotary.tsr");
    write_npy(&d.join("x.npy"), &[2, 5, 8]);
    write_npy(&d.join("x2.npy"), &[2, 5]);
    write_npy(&d.join("cos.npy"), &[6, 4]);
    write_npy(&d.join("cos_wide.npy"), &[5, 3]);
    write_npy(&d.join("x_odd.npy"), &[2, 5, 7]);
    std::fs::write(d.join("junk.npy"), b"not numpy").unwrap();
    let run = |extra: &[String]| {
        let o = tessera()
            .args(["run", file.to_str().unwrap(), "--kernel", "rotary_embedding", "--device", "interp"])
            .args(["--repeat", "1"])
            .args(extra)
            .output()
            .unwrap();
        (o.status.code(), text(&o))
    };
    let input = |name: &str, f: &str| vec!["--input".to_string(), format!("{name}={}", d.join(f).display())];
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (input("Z", "x.npy"), &["no tensor parameter `Z`", "X, cos, sin, Y"]),
        (input("X", "x2.npy"), &["2 dimensions (2, 5)", "[BH, S, 2*H]"]),
        ([input("X", "x.npy"), input("cos", "cos.npy")].concat(), &["S = 6", "S = 5"]),
        ([input("X", "x.npy"), input("X", "x.npy")].concat(), &["--input X is given twice"]),
        (input("X", "junk.npy"), &["--input X=", "not a NumPy file"]),
        (input("X", "missing.npy"), &["--input X=", "missing.npy"]),
        // cos gives H = 3, so X must be (2, 5, 6).
        ([input("X", "x.npy"), input("cos", "cos_wide.npy")].concat(), &["shape (2, 5, 8)", "(2, 5, 6)"]),
        // 7 is not 2*H for any H: left to the shape check, which names both shapes.
        ([input("X", "x_odd.npy"), vec!["--dims".into(), "H=4".into()]].concat(), &["shape (2, 5, 7)", "(2, 5, 8)"]),
        (vec!["--input".into(), "X".into()], &["expected NAME=FILE.npy"]),
    ];
    for (args, needles) in cases {
        let (code, out) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        for needle in needles {
            assert!(out.contains(needle), "{args:?}: `{needle}` not in: {out}");
        }
    }
    // The dims the file gives, with nothing assumed: BH=2, S=5, and H=4 from 2*H = 8.
    let (code, out) = run(&[input("X", "x.npy"), vec!["--json".into()]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("\"BH\": 2") && out.contains("\"S\": 5") && out.contains("\"H\": 4"), "{out}");
}

/// A graph function takes `--input` too: the file's values reach the function (saved
/// back unchanged) and its shape gives the dims.
#[test]
fn a_graph_function_takes_inputs_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("scale.tsr");
    std::fs::write(
        &file,
        "from tessera import *\n\n@jit\ndef scale(x: Tensor[\"M\", \"N\", f32]):\n    return x * 2.0\n",
    )
    .unwrap();
    write_npy(&d.join("x.npy"), &[3, 7]);
    let out = d.join("out");
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", "scale", "--device", "interp", "--repeat", "1"])
        .arg("--input")
        .arg(format!("x={}", d.join("x.npy").display()))
        .args(["--save", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("dims      M=3, N=7"), "{}", text(&o));
    assert!(text(&o).contains("inputs    x from "), "{}", text(&o));
    let saved = tessera_backends::npy::read(&out.join("x.npy")).unwrap();
    let given = tessera_backends::npy::read(&d.join("x.npy")).unwrap();
    assert_eq!(saved, given);
    let doubled = tessera_backends::npy::read(&out.join("return.out.npy")).unwrap();
    let want: Vec<f64> = given.to_f64().iter().map(|v| v * 2.0).collect();
    assert_eq!(doubled.to_f64(), want);
}
