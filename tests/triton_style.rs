//! Kernels written the way Triton's tutorials write them: `tl.cdiv` as `tile.cdiv` gets
//! E0201 with the fix (`cdiv` is a built-in function of its own); the grouped program
//! ordering, whose tile origins come from a `min(...)`, checks, lowers and runs; the fused
//! softmax pads with `other=-float("inf")`, which is -inf (it was 0, silently); the
//! matmul tutorial's `acc = tl.dot(a, b, acc)` accumulates, and its `acc.to(tl.float16)`
//! gets E0201 with a note naming `tile.cast`; the persistent matmul runs with its grid
//! a module constant, and a grid bounded by a scalar parameter says how to bound it; the
//! seeded dropout's `tl.rand(seed, offsets)` written with an offsets tile gets E0802 with
//! a note on Tessera's tile-origin offsets, and the fixed kernel draws the same mask on
//! the interpreter and the CPU; `tl.exp2`/`tl.log2` are `tile.exp2`/`tile.log2` (E0201
//! offered `tile.exp` for `tile.exp2`, a fix that changed the numbers). Outputs
//! are compared with what this file computes in f64 from the saved inputs (no Tessera
//! code in those oracles).

use std::path::Path;
use std::process::Command;

const FIXTURE: &str = "tests/fixtures/triton/grouped_gemm.tsr";

fn tessera(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(dir).args(args).output().expect("tessera runs")
}

#[test]
fn tl_cdiv_written_tile_cdiv_is_e0201_with_the_fix() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(FIXTURE)).unwrap().replace("cdiv(", "tile.cdiv(");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.tsr"), &text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let diags = v["diagnostics"].as_array().or_else(|| v.as_array()).cloned().unwrap_or_default();
    let text_out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(diags.len(), 2, "{text_out}");
    assert!(text_out.contains("`cdiv` is a built-in function of its own: write `cdiv(...)`"), "{text_out}");
}

#[test]
fn grouped_program_order_computes_a_times_b() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("saved");
    let (m, n, k) = (300usize, 136usize, 72usize);
    let dims = format!("M={m},N={n},K={k}");
    let o = tessera(
        root,
        &[
            "run",
            FIXTURE,
            "--kernel",
            "grouped_gemm",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--dims",
            &dims,
            "--save",
            save.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    // 3 x 2 tiles: three along M, which the ordering visits in one group.
    assert!(text.contains("grid 6x1x1"), "{text}");
    let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
    let (a, b, c) = (read("A.npy"), read("B.npy"), read("C.out.npy"));
    assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            let sum_abs: f64 = (0..k).map(|p| (a[i * k + p] * b[p * n + j]).abs()).sum();
            // bf16 output: half a bf16 step of the value, plus the f32 sum's rounding.
            let bound = want.abs() * 2f64.powi(-8) + sum_abs * k as f64 * 2f64.powi(-24) + 1e-30;
            let got = c[i * n + j];
            assert!((got - want).abs() <= bound, "C[{i}, {j}] = {got}, A @ B = {want} (bound {bound})");
        }
    }
}

#[test]
fn a_load_padded_with_minus_float_inf_pads_with_minus_infinity() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = "tests/fixtures/triton/softmax.tsr";
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("saved");
    let (r, c) = (6usize, 781usize);
    let dims = format!("R={r},C={c}");
    let o = tessera(root, &["check", fixture]);
    assert_eq!(o.status.code(), Some(0), "no W0606 either: {}", String::from_utf8_lossy(&o.stdout));
    let o = tessera(
        root,
        &[
            "run",
            fixture,
            "--kernel",
            "softmax_rows",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--dims",
            &dims,
            "--save",
            save.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
    let (x, y) = (read("X.npy"), read("Y.out.npy"));
    for i in 0..r {
        let row = &x[i * c..(i + 1) * c];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for j in 0..c {
            let want = (row[j] - max).exp() / sum;
            // An f16 result: half an f16 step, plus f32 exp and sum rounding.
            let bound = want * (2f64.powi(-11) + 1e-5) + 2f64.powi(-25);
            assert!((y[i * c + j] - want).abs() <= bound, "Y[{i}, {j}] = {}, softmax = {want}", y[i * c + j]);
        }
    }
    // A padding known only at run time is refused, not taken as 0.
    let text = std::fs::read_to_string(root.join(fixture))
        .unwrap()
        .replace("Y: Tensor[\"R\", \"C\", f16]):", "Y: Tensor[\"R\", \"C\", f16], pad: float):")
        .replace("other=-float(\"inf\")", "other=pad");
    std::fs::write(dir.path().join("k.tsr"), &text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr", "--format", "concise"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("error[E0809]") && out.contains("a load's `other=` that is not a constant number"), "{out}");
    std::fs::write(dir.path().join("k.tsr"), text.replace("other=pad", "other=float(\"-infinite\")")).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr", "--format", "concise"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("error[E0802]") && out.contains("not a number Python's float() reads"), "{out}");
}

#[test]
fn float_constants_lower_in_graph_functions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("saved");
    let o = tessera(
        root,
        &[
            "run",
            "tests/fixtures/triton/softmax.tsr",
            "--kernel",
            "shifted",
            "--device",
            "interp",
            "--dims",
            "N=9",
            "--save",
            save.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
    let (x, y) = (read("x.npy"), read("return.out.npy"));
    for (a, b) in x.iter().zip(&y) {
        assert_eq!(*b, (*a as f32 + 1.5) as f64, "{x:?} -> {y:?}");
    }
}

#[test]
fn three_argument_dot_accumulates_and_dot_to_names_tile_cast() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = "tests/fixtures/triton/matmul_leaky_relu.tsr";
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("saved");
    let (m, n, k) = (100usize, 72usize, 200usize);
    let dims = format!("M={m},N={n},K={k}");
    // Also under Hopper's warpgroup MMAs fed by a producer warpgroup.
    for schedule in ["warps=4", "mma=wgmma,copy=tma,producer=warpgroup"] {
        let o = tessera(
            root,
            &[
                "run",
                fixture,
                "--kernel",
                "matmul_leaky_relu",
                "--device",
                "interp",
                "--repeat",
                "1",
                "--dims",
                &dims,
                "--schedule",
                schedule,
                "--save",
                save.to_str().unwrap(),
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{schedule}: {text}{}", String::from_utf8_lossy(&o.stderr));
        let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
        let (a, b, c) = (read("A.npy"), read("B.npy"), read("C.out.npy"));
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                let sum_abs: f64 = (0..k).map(|p| (a[i * k + p] * b[p * n + j]).abs()).sum();
                let want = if dot >= 0.0 { dot } else { 0.01 * dot };
                let bound = want.abs() * 2f64.powi(-11) + sum_abs * k as f64 * 2f64.powi(-24) + 1e-30;
                let got = c[i * n + j];
                assert!((got - want).abs() <= bound, "{schedule}: C[{i}, {j}] = {got}, want {want}");
            }
        }
    }
    let text = std::fs::read_to_string(root.join(fixture)).unwrap().replace("tile.cast(acc, f16)", "acc.to(f16)");
    std::fs::write(dir.path().join("k.tsr"), &text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("a tile has no attribute `to`") && out.contains("`x.to(dtype)` is `tile.cast(x, dtype)`"),
        "{out}"
    );
}

#[test]
fn a_persistent_matmul_walks_every_tile_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = "tests/fixtures/triton/persistent_matmul.tsr";
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("saved");
    // 3 x 3 = 9 tiles over 4 programs: two or three each.
    let (m, n, k) = (300usize, 264usize, 72usize);
    let dims = format!("M={m},N={n},K={k}");
    let o = tessera(
        root,
        &[
            "run",
            fixture,
            "--kernel",
            "persistent_matmul",
            "--device",
            "interp",
            "--repeat",
            "1",
            "--dims",
            &dims,
            "--save",
            save.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("grid 4x1x1"), "{text}");
    let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
    let (a, b, c) = (read("A.npy"), read("B.npy"), read("C.out.npy"));
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            let sum_abs: f64 = (0..k).map(|p| (a[i * k + p] * b[p * n + j]).abs()).sum();
            let bound = sum_abs * k as f64 * 2f64.powi(-24) + 1e-30;
            assert!((c[i * n + j] - want).abs() <= bound, "C[{i}, {j}] = {}, A @ B = {want}", c[i * n + j]);
        }
    }
    // Bounded by a scalar parameter instead: the error says how to bound it.
    let text = std::fs::read_to_string(root.join(fixture))
        .unwrap()
        .replace("C: Tensor[\"M\", \"N\", f32]):", "C: Tensor[\"M\", \"N\", f32], num_sms: int = 4):")
        .replace("tile.parallel(0, NUM_SMS, 1)", "tile.parallel(0, num_sms, 1)");
    std::fs::write(dir.path().join("k.tsr"), &text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr", "--format", "concise"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("`num_sms` is a scalar parameter") && out.contains("`NUM_SMS = 132`"), "{out}");
}

#[test]
fn seeded_dropout_draws_one_mask_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = "tests/fixtures/triton/dropout.tsr";
    let dir = tempfile::tempdir().unwrap();
    let mut masks = Vec::new();
    for device in ["interp", "cpu"] {
        let save = dir.path().join(device);
        let o = tessera(
            root,
            &[
                "run",
                fixture,
                "--kernel",
                "seeded_dropout",
                "--device",
                device,
                "--repeat",
                "1",
                "--dims",
                "N=3000",
                "--save",
                save.to_str().unwrap(),
            ],
        );
        if device == "cpu" && String::from_utf8_lossy(&o.stderr).contains("no CPU backend") {
            continue;
        }
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
        let (x, y) = (read("X.npy"), read("Y.out.npy"));
        let kept: Vec<bool> = y.iter().map(|&v| v != 0.0).collect();
        let fraction = kept.iter().filter(|&&k| k).count() as f64 / kept.len() as f64;
        // p = 0.5 over 3000 draws: within four standard deviations (0.009 each).
        assert!((fraction - 0.5).abs() < 0.04, "{device}: kept {fraction}");
        for (i, &k) in kept.iter().enumerate() {
            if k {
                assert_eq!(y[i], (x[i] as f32 / 0.5) as f64, "{device}: Y[{i}]");
            }
        }
        masks.push(kept);
    }
    assert!(masks.windows(2).all(|w| w[0] == w[1]), "the devices drew different masks");
    let text = std::fs::read_to_string(root.join(fixture))
        .unwrap()
        .replace("tile.rand((ctx.BM,), seed, (n0,))", "tile.rand((ctx.BM,), seed, offsets)");
    std::fs::write(dir.path().join("k.tsr"), &text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("unlike Triton's `tl.rand(seed, offsets)`, the offsets are the tile's origin"), "{out}");
}

#[test]
fn exp2_and_log2_are_base_two() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for device in ["interp", "cpu"] {
        let save = dir.path().join(device);
        let o = tessera(
            root,
            &[
                "run",
                "tests/fixtures/triton/exp2.tsr",
                "--kernel",
                "exp2_log2",
                "--device",
                device,
                "--repeat",
                "1",
                "--dims",
                "N=1000",
                "--save",
                save.to_str().unwrap(),
            ],
        );
        if device == "cpu" && String::from_utf8_lossy(&o.stderr).contains("no CPU backend") {
            continue;
        }
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let read = |name: &str| tessera_backends::npy::read(&save.join(name)).unwrap().to_f64();
        let (x, e, l) = (read("X.npy"), read("E.out.npy"), read("L.out.npy"));
        for i in 0..x.len() {
            let want_e = (x[i] * 8.0).exp2();
            let want_l = (x[i].abs() + 0.5).log2();
            // f32 results through e^(x ln 2) and ln(x) / ln 2: a few ulps, times |x ln 2|.
            assert!(
                (e[i] - want_e).abs() <= want_e * 1e-5 * (1.0 + (x[i] * 8.0).abs()),
                "{device}: 2^{} = {}",
                x[i] * 8.0,
                e[i]
            );
            assert!(
                (l[i] - want_l).abs() <= 1e-6 * (1.0 + want_l.abs()),
                "{device}: log2 {} = {}",
                x[i].abs() + 0.5,
                l[i]
            );
        }
    }
}
