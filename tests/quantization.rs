//! `tile.floor`, `tile.ceil` and `tile.round` (halves to even), and the per-row int8
//! quantizer they make possible (`tile.cast` to an integer truncates toward zero, which
//! biases a quantizer). Each output is compared with Rust's own `floor`, `ceil` and
//! `round_ties_even` on the saved inputs, on the interpreter and on the CPU; the PTX is
//! checked by the emulator (`backends/tests/cuda_emulator.rs`, kernel `rounding`).

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_backends::npy;
use tessera_backends::tensor::HostTensor;
use tessera_frontend::check::DType;

const FIXTURE: &str = "tests/fixtures/quant/rounding.tsr";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kernel` on `device` with `args`, saving its arrays into `dir`; `None` when this
/// build has no CPU backend (it is a feature).
fn run_saved(kernel: &str, device: &str, dir: &Path, args: &[&str]) -> Option<PathBuf> {
    let saved = dir.join(format!("{kernel}_{device}"));
    let mut all = vec!["run", FIXTURE, "--kernel", kernel, "--device", device, "--repeat", "1"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--save", saved.to_str().unwrap()]);
    let o = Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(root()).args(&all).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if device == "cpu" && err.contains("no CPU backend") {
        return None;
    }
    assert_eq!(o.status.code(), Some(0), "{kernel} on {device}: {out}{err}");
    assert!(!err.contains("warning"), "{err}");
    Some(saved)
}

fn read(dir: &Path, name: &str) -> Vec<f64> {
    npy::read(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")).to_f64()
}

/// Ties at every half, both signs, signed zeros, the last f32 below 0.5, halves at the
/// edge of f32's integers (2^23 - 0.5), values beyond them, and a spread of the rest.
fn rounding_inputs() -> Vec<f32> {
    let mut x: Vec<f32> = vec![0.0, -0.0, 0.49999997, -0.49999997, 8388607.5, -8388607.5, 1e30, -1e30, 1e-30];
    x.extend((-40..=40).map(|k| k as f32 / 2.0));
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        x.push(((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 200.0);
    }
    x
}

/// Equal as f32 values, signs of zero included.
fn same(a: f64, b: f32) -> bool {
    a as f32 == b && (a as f32).is_sign_negative() == b.is_sign_negative()
}

#[test]
fn floor_ceil_and_round_to_even_agree_with_rust_on_the_interpreter_and_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let x = rounding_inputs();
    let input = tmp.path().join("x.npy");
    let values: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    npy::write(&input, &HostTensor::from_f64(DType::F32, &[x.len()], &values)).unwrap();
    let arg = format!("X={}", input.display());
    for device in ["interp", "cpu"] {
        let Some(saved) = run_saved("rounding", device, tmp.path(), &["--input", &arg]) else { continue };
        for (name, want) in
            [("F.out.npy", f32::floor as fn(f32) -> f32), ("C.out.npy", f32::ceil), ("R.out.npy", f32::round_ties_even)]
        {
            let got = read(&saved, name);
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                assert!(same(g, want(v)), "{device} {name}[{i}]: f({v}) = {g}, want {}", want(v));
            }
        }
        // Halves go to the even neighbour: 2.5 to 2, -0.5 to -0.
        let r = read(&saved, "R.out.npy");
        let at = |v: f32| r[x.iter().position(|&y| y == v && y.is_sign_negative() == v.is_sign_negative()).unwrap()];
        assert_eq!((at(2.5), at(3.5), at(-2.5)), (2.0, 4.0, -2.0), "{device}");
        assert!(at(-0.5) == 0.0 && at(-0.5).is_sign_negative(), "{device}");
    }
}

#[test]
fn the_int8_quantizer_rounds_each_row_to_nearest_even_steps_of_its_scale() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, d) = (37usize, 256usize);
    for device in ["interp", "cpu"] {
        let dims = format!("T={t},D={d}");
        let Some(saved) = run_saved("quantize_rows", device, tmp.path(), &["--dims", &dims]) else { continue };
        let (x, q, s) = (read(&saved, "X.npy"), read(&saved, "Q.out.npy"), read(&saved, "S.out.npy"));
        for r in 0..t {
            let row: Vec<f32> = x[r * d..(r + 1) * d].iter().map(|&v| v as f32).collect();
            let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax.max(1e-8) / 127.0;
            assert_eq!(s[r] as f32, scale, "{device}: scale of row {r}");
            for (c, &v) in row.iter().enumerate() {
                let want = (v / scale).round_ties_even();
                assert_eq!(q[r * d + c], want as f64, "{device}: Q[{r}, {c}] of {v} / {scale}");
            }
            // The largest magnitude quantizes to ±127 exactly.
            assert!(row.iter().zip(&q[r * d..]).any(|(v, q)| v.abs() == amax && q.abs() == 127.0), "{device}: row {r}");
        }
    }
}
