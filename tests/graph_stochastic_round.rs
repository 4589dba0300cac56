//! `cast(x, "bf16 @stochastic_round")` in graph functions, through the real binary: the
//! run must pass its own check (the f64 reference draws the same counter-based stream),
//! and NumPy, from the saved inputs and outputs, checks what stochastic rounding
//! promises: every value is one of its two bf16 neighbours, the mean error is about 0
//! where round-to-nearest is biased, the round-up rate is the fractional distance, and a
//! seed gives the same numbers again (another seed other numbers).

mod graph_oracles;

use std::path::Path;
use std::process::Command;

use graph_oracles::{devices, numpy, tessera, text};

const PROGRAM: &str = "from tessera import *

@jit
def sr(x: Tensor[\"M\", \"N\", f32]) -> Tensor[\"M\", \"N\", bf16]:
    return cast(x, \"bf16 @stochastic_round\")

@jit
def rn(x: Tensor[\"M\", \"N\", f32]) -> Tensor[\"M\", \"N\", bf16]:
    return cast(x, bf16)

@jit
def two(x: Tensor[\"M\", \"N\", f32]) -> Tensor[\"M\", \"N\", f32]:
    y = cast(x * 1.0, \"bf16 @stochastic_round\")
    z = cast(x * 1.0, \"bf16 @stochastic_round\")
    return cast(y, f32) - cast(z, f32)
";

/// Inputs: every element 1 + 0.3 q (q = 2^-7, bf16's spacing in [1, 2)) plus noise far
/// below q, so round-to-nearest always rounds down (bias -0.3 q).
const INPUTS: &str = r#"
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(5)
q = 2.0 ** -7
x = 1.0 + 0.3 * q + rng.uniform(-0.05, 0.05, (64, 512)) * q
np.save(d + '/x.npy', x.astype(np.float32))
"#;

/// The bf16 neighbours of positive f32 values, from their bits (NumPy has no bf16).
const NEIGHBOURS: &str = r#"
import sys, numpy as np
def neighbours(x):
    b = x.astype(np.float32).view(np.uint32)
    lo = (b & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)
    hi = ((b & np.uint32(0xFFFF0000)) + np.uint32(0x10000)).view(np.float32).astype(np.float64)
    return lo, hi
"#;

const ORACLE: &str = r#"
o = sys.argv[1]
x = np.load(o + '/x.npy').astype(np.float64)
y = np.load(o + '/return.out.npy').astype(np.float64)
lo, hi = neighbours(x)
assert y.shape == x.shape
assert np.all((y == lo) | (y == hi)), 'a value is not one of its two bf16 neighbours'
frac = (x - lo) / (hi - lo)
n = x.size
# Up with probability frac: the count of round-ups is binomial around sum(frac).
ups = np.sum(y == hi)
sd = np.sqrt(np.sum(frac * (1 - frac)))
assert abs(ups - frac.sum()) < 5 * sd, (ups, frac.sum(), sd)
# Unbiased: the mean error is within 5 standard errors of 0.
err = y - x
se = np.sqrt(np.sum(frac * (1 - frac) * (hi - lo) ** 2)) / n
assert abs(err.mean()) < 5 * se, (err.mean(), se)
# Round to nearest of the same inputs is biased by about -0.3 q, hundreds of se away.
rn = np.where(frac < 0.5, lo, hi)
assert abs((rn - x).mean()) > 100 * se, ((rn - x).mean(), se)
"#;

fn python(script: &str, dir: &Path) -> std::process::Output {
    Command::new("python3").args(["-c", script, dir.to_str().unwrap()]).output().expect("python3 runs")
}

fn run(file: &Path, function: &str, input: &Path, device: &str, seed: &str, out: &Path) {
    let o = tessera()
        .args(["run", file.to_str().unwrap(), "--kernel", function, "--device", device, "--repeat", "1"])
        .args(["--input", &format!("x={}", input.display()), "--seed", seed, "--save", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{function} on {device}: {}", text(&o));
    let report = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(report.contains("\"verdict\": \"correct\"") || report.contains("\"verdict\":\"correct\""), "{report}");
}

#[test]
fn stochastic_rounding_in_graph_functions_is_unbiased_and_reproducible() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sr.tsr");
    std::fs::write(&file, PROGRAM).unwrap();
    let p = python(INPUTS, dir.path());
    assert!(p.status.success(), "{}", text(&p));
    let input = dir.path().join("x.npy");
    let oracle = format!("{NEIGHBOURS}{ORACLE}");
    let mut saved = Vec::new();
    for device in devices() {
        let out = dir.path().join(format!("sr_{device}"));
        run(&file, "sr", &input, device, "0", &out);
        let p = python(&oracle, &out);
        assert!(p.status.success(), "the NumPy oracle on {device}: {}", text(&p));
        saved.push(std::fs::read(out.join("return.out.npy")).unwrap());
        // Round to nearest fails the same oracle: it is biased.
        let out = dir.path().join(format!("rn_{device}"));
        run(&file, "rn", &input, device, "0", &out);
        let p = python(&oracle, &out);
        assert!(!p.status.success(), "round to nearest passes the unbiasedness oracle on {device}");
    }
    // The same seed gives the same numbers on every device; another seed others.
    assert!(saved.windows(2).all(|w| w[0] == w[1]), "devices disagree");
    let again = dir.path().join("sr_again");
    run(&file, "sr", &input, "interp", "0", &again);
    assert_eq!(std::fs::read(again.join("return.out.npy")).unwrap(), saved[0]);
    let other = dir.path().join("sr_seed7");
    run(&file, "sr", &input, "interp", "7", &other);
    let p = python(&oracle, &other);
    assert!(p.status.success(), "seed 7: {}", text(&p));
    assert_ne!(std::fs::read(other.join("return.out.npy")).unwrap(), saved[0], "the seed changes nothing");
}

/// Two casts of one value draw from two streams: their results differ somewhere.
#[test]
fn two_stochastic_casts_draw_apart() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sr.tsr");
    std::fs::write(&file, PROGRAM).unwrap();
    assert!(python(INPUTS, dir.path()).status.success());
    let input = dir.path().join("x.npy");
    for device in devices() {
        let out = dir.path().join(format!("two_{device}"));
        run(&file, "two", &input, device, "3", &out);
        let p = python(
            "import sys, numpy as np\nd = np.load(sys.argv[1] + '/return.out.npy')\n\
             q = 2.0 ** -7\nassert np.all(np.isin(d, [-q, 0.0, q])), np.unique(d)\n\
             assert 0.2 < np.mean(d != 0) < 0.6, np.mean(d != 0)\n",
            &out,
        );
        assert!(p.status.success(), "{device}: {}", text(&p));
    }
}

/// The graph IR shows where it acts; a function's undeclared result is W0409.
#[test]
fn the_ir_shows_the_stream_and_an_undeclared_result_is_w0409() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sr.tsr");
    std::fs::write(&file, PROGRAM).unwrap();
    let o = tessera().args(["lower", file.to_str().unwrap(), "--kernel", "two"]).output().unwrap();
    let out = text(&o);
    assert!(out.contains("{rounding = \"stochastic\", stream = 0}"), "{out}");
    assert!(out.contains("{rounding = \"stochastic\", stream = 1}"), "{out}");
    let o = tessera().args(["check", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("W0409"), "{}", text(&o));
    let undeclared = dir.path().join("u.tsr");
    std::fs::write(
        &undeclared,
        "from tessera import *\n\n@jit\ndef f(x: Tensor[\"N\", f32]):\n    return cast(x, \"bf16 @stochastic_round\")\n",
    )
    .unwrap();
    let o = tessera().args(["check", undeclared.to_str().unwrap()]).output().unwrap();
    assert!(text(&o).contains("W0409"), "{}", text(&o));
    let o = tessera().args(["lower", undeclared.to_str().unwrap(), "--kernel", "f"]).output().unwrap();
    assert!(!text(&o).contains("stochastic\""), "{}", text(&o));
    // `tile.cast(..., uniform=)` on a conversion that rounds to nearest is W0409 too.
    let kernel = dir.path().join("k.tsr");
    std::fs::write(
        &kernel,
        "from tessera import *\n\n@kernel\ndef k(X: Tensor[\"N\", f32], Y: Tensor[\"N\", bf16]):\n    \
         ctx = tile.context()\n    for i in tile.parallel(0, N, ctx.BM):\n        \
         x = tile.load(X[i:i + ctx.BM])\n        \
         Y[i:i + ctx.BM] = tile.cast(x, bf16, uniform=tile.rand((ctx.BM,), 3, (i,)))\n",
    )
    .unwrap();
    let o = tessera().args(["check", kernel.to_str().unwrap(), "--format", "concise"]).output().unwrap();
    assert!(text(&o).contains(":8:54: warning[W0409] `uniform=` has no effect"), "{}", text(&o));
}
