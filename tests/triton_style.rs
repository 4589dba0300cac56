//! Kernels written the way Triton's tutorials write them: `tl.cdiv` as `tile.cdiv` gets
//! E0201 with the fix (`cdiv` is a built-in function of its own), and the grouped program
//! ordering, whose tile origins come from a `min(...)`, checks, lowers and runs; its
//! output is compared with A @ B computed here in f64 from the saved inputs (no Tessera
//! code in that oracle).

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
