//! Kernels written the way Triton's tutorials write them (`tests/fixtures/triton/`), and
//! what a Triton user's first spellings get:
//! - `tl.cdiv` written `tile.cdiv`: E0201 with the fix (`cdiv` is a built-in function);
//! - the grouped program ordering, whose tile origins come from a `min(...)`, runs;
//! - the fused softmax pads with `other=-float("inf")`, which is -inf (it was 0, silently);
//! - `acc = tl.dot(a, b, acc)` accumulates; `acc.to(tl.float16)` names `tile.cast`;
//! - the persistent matmul runs with its grid a module constant, and a grid bounded by a
//!   scalar parameter says how to bound it;
//! - `tl.rand(seed, offsets)` with an offsets tile gets a note on tile-origin offsets, and
//!   the seeded dropout draws one mask on the interpreter and the CPU;
//! - `tl.exp2`/`tl.log2` are `tile.exp2`/`tile.log2` (E0201 offered `tile.exp`, a fix that
//!   changed the numbers);
//! - rotary embeddings over the two halves of a row, the loop running to the half: the
//!   first half's last tile overwrote the second half where the tile does not divide it,
//!   and the run said `correct`; it now warns (W0607), and the masked store is right;
//! - `x // w` with `w` loaded from a partial last tile: the padding (0) divides, and the
//!   interpreter's fault in those lanes is explained first (W0608); `other=1` is right;
//! - a row argmax, `tl.where(x == m[:, None], cols, C)` and a min: the condition's shape
//!   broadcasts with the branches' (it was cut to `cols`'s, and `where(x > 0, 1.0, -1.0)`
//!   to a scalar: neither lowered), and the padding is not reported (W0606 was).
//!
//! Outputs are compared with what this file computes in f64 from the saved inputs (no
//! Tessera code in those oracles).

use std::path::Path;
use std::process::Command;

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{on_each_device, root, run_saved, Saved};

fn tessera(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).current_dir(dir).args(args).output().expect("tessera runs")
}

/// `tessera check` of `text` (a fixture changed the way a user would write it): the exit
/// code and the report.
fn check_text(text: &str, format: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.tsr"), text).unwrap();
    let o = tessera(dir.path(), &["check", "k.tsr", "--format", format]);
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

fn fixture_text(fixture: &str) -> String {
    std::fs::read_to_string(root().join(fixture)).unwrap()
}

/// `c` against `epilogue(A @ B)` in f64 (row-major `[M, K]`, `[K, N]`, `[M, N]`): within
/// `rounding` of the value (half a step of the output dtype) plus an f32 sum's error.
fn assert_matmul(s: &Saved, c_name: &str, (m, n, k): (usize, usize, usize), rounding: f64, epilogue: fn(f64) -> f64) {
    let (a, b, c) = (s.read("A.npy"), s.read("B.npy"), s.read(c_name));
    assert_eq!((a.len(), b.len(), c.len()), (m * k, k * n, m * n));
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            let sum_abs: f64 = (0..k).map(|p| (a[i * k + p] * b[p * n + j]).abs()).sum();
            let want = epilogue(dot);
            let bound = want.abs() * rounding + sum_abs * k as f64 * 2f64.powi(-24) + 1e-30;
            let got = c[i * n + j];
            assert!((got - want).abs() <= bound, "{c_name}[{i}, {j}] = {got}, want {want} (bound {bound})");
        }
    }
}

const GROUPED: &str = "tests/fixtures/triton/grouped_gemm.tsr";
const SOFTMAX: &str = "tests/fixtures/triton/softmax.tsr";
const MATMUL: &str = "tests/fixtures/triton/matmul_leaky_relu.tsr";
const PERSISTENT: &str = "tests/fixtures/triton/persistent_matmul.tsr";
const DROPOUT: &str = "tests/fixtures/triton/dropout.tsr";

#[test]
fn tl_cdiv_written_tile_cdiv_is_e0201_with_the_fix() {
    let (code, out) = check_text(&fixture_text(GROUPED).replace("cdiv(", "tile.cdiv("), "concise");
    assert_eq!(code, Some(1));
    assert_eq!(out.lines().filter(|l| l.contains("error[E0201]")).count(), 2, "{out}");
    let (_, json) = check_text(&fixture_text(GROUPED).replace("cdiv(", "tile.cdiv("), "json");
    assert!(json.contains("`cdiv` is a built-in function of its own: write `cdiv(...)`"), "{json}");
}

#[test]
fn grouped_program_order_computes_a_times_b() {
    let s = run_saved(GROUPED, "grouped_gemm", "interp", &["--dims", "M=300,N=136,K=72"]).unwrap();
    // 3 x 2 tiles: three along M, which the ordering visits in one group.
    assert!(s.text.contains("grid 6x1x1"), "{}", s.text);
    // A bf16 output: half a bf16 step.
    assert_matmul(&s, "C.out.npy", (300, 136, 72), 2f64.powi(-8), |x| x);
}

#[test]
fn a_load_padded_with_minus_float_inf_pads_with_minus_infinity() {
    let o = tessera(root(), &["check", SOFTMAX]);
    assert_eq!(o.status.code(), Some(0), "no W0606 either: {}", String::from_utf8_lossy(&o.stdout));
    let (r, c) = (6usize, 781usize);
    let s = run_saved(SOFTMAX, "softmax_rows", "interp", &["--dims", &format!("R={r},C={c}")]).unwrap();
    let (x, y) = (s.read("X.npy"), s.read("Y.out.npy"));
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
    let with_pad = fixture_text(SOFTMAX)
        .replace("Y: Tensor[\"R\", \"C\", f16]):", "Y: Tensor[\"R\", \"C\", f16], pad: float):")
        .replace("other=-float(\"inf\")", "other=pad");
    let (_, out) = check_text(&with_pad, "concise");
    assert!(out.contains("error[E0809]") && out.contains("a load's `other=` that is not a constant number"), "{out}");
    let (_, out) = check_text(&with_pad.replace("other=pad", "other=float(\"-infinite\")"), "concise");
    assert!(out.contains("error[E0802]") && out.contains("not a number Python's float() reads"), "{out}");
}

#[test]
fn float_constants_lower_in_graph_functions() {
    let s = run_saved(SOFTMAX, "shifted", "interp", &["--dims", "N=9"]).unwrap();
    let (x, y) = (s.read("x.npy"), s.read("return.out.npy"));
    for (a, b) in x.iter().zip(&y) {
        assert_eq!(*b, (*a as f32 + 1.5) as f64, "{x:?} -> {y:?}");
    }
}

#[test]
fn three_argument_dot_accumulates_and_dot_to_names_tile_cast() {
    // Also under Hopper's warpgroup MMAs fed by a producer warpgroup.
    for schedule in ["warps=4", "mma=wgmma,copy=tma,producer=warpgroup"] {
        let s =
            run_saved(MATMUL, "matmul_leaky_relu", "interp", &["--dims", "M=100,N=72,K=200", "--schedule", schedule])
                .unwrap();
        // An f16 output: half an f16 step.
        assert_matmul(&s, "C.out.npy", (100, 72, 200), 2f64.powi(-11), |x| if x >= 0.0 { x } else { 0.01 * x });
    }
    let (_, out) = check_text(&fixture_text(MATMUL).replace("tile.cast(acc, f16)", "acc.to(f16)"), "human");
    assert!(
        out.contains("a tile has no attribute `to`") && out.contains("`x.to(dtype)` is `tile.cast(x, dtype)`"),
        "{out}"
    );
}

#[test]
fn a_persistent_matmul_walks_every_tile_once() {
    // 3 x 3 = 9 tiles over 4 programs: two or three each.
    let s = run_saved(PERSISTENT, "persistent_matmul", "interp", &["--dims", "M=300,N=264,K=72"]).unwrap();
    assert!(s.text.contains("grid 4x1x1"), "{}", s.text);
    assert_matmul(&s, "C.out.npy", (300, 264, 72), 2f64.powi(-24), |x| x);
    // Bounded by a scalar parameter instead: the error says how to bound it.
    let with_param = fixture_text(PERSISTENT)
        .replace("C: Tensor[\"M\", \"N\", f32]):", "C: Tensor[\"M\", \"N\", f32], num_sms: int = 4):")
        .replace("tile.parallel(0, NUM_SMS, 1)", "tile.parallel(0, num_sms, 1)");
    let (_, out) = check_text(&with_param, "concise");
    assert!(out.contains("`num_sms` is a scalar parameter") && out.contains("`NUM_SMS = 132`"), "{out}");
    // A producer warpgroup feeds one K loop at the top of a program, not one inside the
    // loop over tiles: E0707 at the K loop (it was an internal error at lowering).
    let producer = fixture_text(PERSISTENT).replace("copy=\"tma\"))", "copy=\"tma\", producer=\"warpgroup\"))");
    let (code, out) = check_text(&producer, "concise");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("error[E0707]") && out.contains("the K loop is inside another loop or a branch"), "{out}");
}

#[test]
fn seeded_dropout_draws_one_mask_everywhere() {
    let mut masks = Vec::new();
    for device in ["interp", "cpu"] {
        let Some(s) = run_saved(DROPOUT, "seeded_dropout", device, &["--dims", "N=3000"]) else { continue };
        let (x, y) = (s.read("X.npy"), s.read("Y.out.npy"));
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
    let with_tile =
        fixture_text(DROPOUT).replace("tile.rand((ctx.BM,), seed, (n0,))", "tile.rand((ctx.BM,), seed, offsets)");
    let (_, out) = check_text(&with_tile, "human");
    assert!(out.contains("unlike Triton's `tl.rand(seed, offsets)`, the offsets are the tile's origin"), "{out}");
}

#[test]
fn exp2_and_log2_are_base_two() {
    for device in ["interp", "cpu"] {
        let Some(s) = run_saved("tests/fixtures/triton/exp2.tsr", "exp2_log2", device, &["--dims", "N=1000"]) else {
            continue;
        };
        let (x, e, l) = (s.read("X.npy"), s.read("E.out.npy"), s.read("L.out.npy"));
        for i in 0..x.len() {
            let (want_e, want_l) = ((x[i] * 8.0).exp2(), (x[i].abs() + 0.5).log2());
            // f32 results through e^(x ln 2) and ln(x) / ln 2: a few ulps, times |x ln 2|.
            let bound_e = want_e * 1e-5 * (1.0 + (x[i] * 8.0).abs());
            assert!((e[i] - want_e).abs() <= bound_e, "{device}: 2^{} = {}", x[i] * 8.0, e[i]);
            assert!(
                (l[i] - want_l).abs() <= 1e-6 * (1.0 + want_l.abs()),
                "{device}: log2 {} = {}",
                x[i].abs() + 0.5,
                l[i]
            );
        }
    }
}

/// RoPE over the two halves of a `D = 2H` row with the loop running to `H`: where `BN`
/// does not divide `H`, the first half's last tile writes columns `H..BN` of the second
/// half (W0607). Its f64 reference stores the same way, so the run's verdict is
/// `correct`; the run says it cannot tell, and the oracle here sees the overwritten
/// columns. Masked at the loop's bound, the store is right.
#[test]
fn a_store_past_its_loops_bound_warns_and_the_masked_store_is_right() {
    const ROPE: &str = "tests/corpus/invalid/w0607_store_past_loop_bound.tsr";
    let (t, h, bn) = (40, 48, 64);
    let dims = format!("T={t},H={h},D={}", 2 * h);
    // The columns whose value is off by more than f16 rounding.
    let wrong_columns = |s: &Saved| -> std::collections::BTreeSet<usize> {
        let (x, c, sn, y) = (s.read("X.npy"), s.read("Cos.npy"), s.read("Sin.npy"), s.read("Y.out.npy"));
        let mut wrong = std::collections::BTreeSet::new();
        for r in 0..t {
            for j in 0..h {
                let (x1, x2, c, sn) = (x[r * 2 * h + j], x[r * 2 * h + h + j], c[r * h + j], sn[r * h + j]);
                for (col, want) in [(j, x1 * c - x2 * sn), (h + j, x2 * c + x1 * sn)] {
                    if (y[r * 2 * h + col] - want).abs() > want.abs() * 2f64.powi(-10) + 1e-6 {
                        wrong.insert(col);
                    }
                }
            }
        }
        wrong
    };
    let s = run_saved(ROPE, "rope", "interp", &["--dims", &dims]).unwrap();
    assert!(s.text.contains("correct"), "{}", s.text);
    assert!(
        s.warnings.contains("W0607 where `BN` does not divide `H`, this store's last tile writes `Y` past `H`"),
        "{}",
        s.warnings
    );
    assert_eq!(wrong_columns(&s), (h..bn).collect(), "the first half's last tile overwrites columns H..BN");
    // Masked at the bound: no warning, and every column right.
    let tmp = tempfile::tempdir().unwrap();
    let masked = tmp.path().join("rope_masked.tsr");
    let store = "Y[t0:t0 + ctx.BM, h0:h0 + ctx.BN] = tile.cast(x1 * c - x2 * s, f16)  # <- W0607";
    let text = fixture_text(ROPE);
    assert!(text.contains(store));
    let fixed = text.replace(
        store,
        "tile.store(Y[t0:t0 + ctx.BM, h0:h0 + ctx.BN], tile.cast(x1 * c - x2 * s, f16), \
         mask=(h0 + tile.arange(ctx.BN))[None, :] < H)",
    );
    std::fs::write(&masked, fixed).unwrap();
    let s = run_saved(masked.to_str().unwrap(), "rope", "interp", &["--dims", &dims]).unwrap();
    assert!(!s.warnings.contains("W0607"), "{}", s.warnings);
    assert_eq!(wrong_columns(&s), Default::default());
}

/// QK-norm over a packed `[T, H*D]` projection with `D = 96` summed in 64-wide tiles: the
/// last tile of each head reads the next head's first 32 columns into its sum, so every
/// head but the last is wrong while `run` says correct; W0607 says it, at the load.
/// Masked at the head's bound (`other=0.0`), every head is right and nothing is said.
#[test]
fn a_load_past_its_loops_bound_into_a_sum_warns_and_the_masked_load_is_right() {
    const QK_NORM: &str = "tests/corpus/invalid/w0607_load_past_loop_bound_into_reduction.tsr";
    let (t, heads, d) = (20usize, 4usize, 96usize);
    let dims = format!("T={t},H={heads},HD={}", heads * d);
    // The heads whose RMS is off (f32 sums of 96 squares: 1e-5 relative is plenty).
    let wrong_heads = |s: &Saved| -> Vec<usize> {
        let (q, rms) = (s.read("Q.npy"), s.read("Rms.out.npy"));
        let mut wrong = std::collections::BTreeSet::new();
        for r in 0..t {
            for h in 0..heads {
                let ss: f64 = (0..d).map(|c| q[r * heads * d + h * d + c].powi(2)).sum();
                let want = (ss / d as f64).sqrt();
                if (rms[r * heads + h] - want).abs() > 1e-5 * want {
                    wrong.insert(h);
                }
            }
        }
        wrong.into_iter().collect()
    };
    let s = run_saved(QK_NORM, "head_rms", "interp", &["--dims", &dims]).unwrap();
    assert!(s.text.contains("correct"), "{}", s.text);
    assert!(
        s.warnings
            .contains("W0607 where `BN` does not divide `D`, this load's last tile, which a sum takes in, reads `Q`"),
        "{}",
        s.warnings
    );
    assert_eq!(wrong_heads(&s), vec![0, 1, 2], "every head but the last sums the next head's columns");
    let tmp = tempfile::tempdir().unwrap();
    let masked = tmp.path().join("qk_norm_masked.tsr");
    let load = "q = tile.load(Q[t0:t0 + ctx.BM, h * D + d0:h * D + d0 + ctx.BN])  # <- W0607";
    let text = fixture_text(QK_NORM);
    assert!(text.contains(load));
    let fixed = text.replace(
        load,
        "q = tile.load(Q[t0:t0 + ctx.BM, h * D + d0:h * D + d0 + ctx.BN], \
         mask=(d0 + tile.arange(ctx.BN))[None, :] < D, other=0.0)",
    );
    std::fs::write(&masked, fixed).unwrap();
    let s = run_saved(masked.to_str().unwrap(), "head_rms", "interp", &["--dims", &dims]).unwrap();
    assert!(!s.warnings.contains("W0607"), "{}", s.warnings);
    assert_eq!(wrong_heads(&s), Vec::<usize>::new());
}

/// Triton's `tl.load(w_ptr + offs, mask=offs < n)` leaves the lanes past the end
/// undefined, and `x // w` there is the GPU's business. Here they hold the load's `other`
/// (0), so the reference interpreter divides by zero in lanes whose results are never
/// stored and the run stops with a fault: the run says why first (W0608), and with
/// `other=1`, the fix, both devices match floor division computed here.
#[test]
fn a_padded_divisor_warns_before_the_fault_and_other_one_is_right() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300usize;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 * 37.0) % 1001.0 - 500.0).collect();
    // Never 0 inside the tensor: every fault is the padding's.
    let w: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { (i % 13 + 1) as f64 } else { -((i % 7 + 1) as f64) }).collect();
    let inputs = [
        saved_runs::input(dir.path(), "X", tessera_frontend::check::DType::I32, &x),
        saved_runs::input(dir.path(), "W", tessera_frontend::check::DType::I32, &w),
    ];
    let input_args: Vec<&str> = inputs.iter().flat_map(|i| ["--input", i.as_str()]).collect();
    let corpus = root().join("tests/corpus/invalid/w0608_padded_divisor.tsr");
    let mut args = vec!["run", corpus.to_str().unwrap(), "--kernel", "bucket", "--device", "interp"];
    args.extend_from_slice(&input_args);
    let o = tessera(root(), &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let warning = err.find("w0608_padded_divisor.tsr:13:28: W0608 this integer division's divisor is the zero padding");
    let fault = err.find("integer division by zero");
    assert!(warning.is_some() && fault.is_some() && warning < fault, "{err}");

    let fixed = std::fs::read_to_string(&corpus).unwrap().replace("W[i0:i0 + BLOCK])", "W[i0:i0 + BLOCK], other=1)");
    let path = dir.path().join("bucket.tsr");
    std::fs::write(&path, fixed).unwrap();
    for device in ["interp", "cpu"] {
        let Some(saved) = run_saved(path.to_str().unwrap(), "bucket", device, &input_args) else { continue };
        assert!(!saved.warnings.contains("W0608"), "{}", saved.warnings);
        let got = saved.read("B.out.npy");
        for i in 0..n {
            assert_eq!(got[i], (x[i] / w[i]).floor(), "{device}: {} // {}", x[i], w[i]);
        }
    }
}

const ARGMAX: &str = "tests/fixtures/triton/argmax.tsr";

#[test]
fn a_row_argmax_finds_the_first_column_of_each_rows_max() {
    let (rows, cols) = (40, 200);
    on_each_device(ARGMAX, "row_argmax", &["--dims", "R=40,C=200"], |device, s| {
        let (x, got) = (s.read("X.npy"), s.read("Out.out.npy"));
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let first = row.iter().position(|&v| v == max).unwrap();
            assert_eq!(got[r], first as f64, "{device}: row {r}");
        }
    });
    // E0201's note for `tile.argmax` gives the fixture's expression.
    let (code, out) = check_text(
        &fixture_text(ARGMAX)
            .replace("tile.min(tile.where(x == m[:, None], cols[None, :], C), 1)", "tile.argmax(x, 1)"),
        "json",
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("tile.min(tile.where(x == tile.max(x, 1)[:, None], cols[None, :], N), 1)"), "{out}");
    // Number branches take the condition's shape.
    on_each_device(ARGMAX, "signs", &["--dims", "R=40,C=200"], |device, s| {
        let (x, got) = (s.read("X.npy"), s.read("Out.out.npy"));
        assert_eq!(got.len(), rows * cols);
        for (i, (&x, &y)) in x.iter().zip(&got).enumerate() {
            assert_eq!(y, if x > 0.0 { 1.0 } else { -1.0 }, "{device}: element {i}");
        }
    });
}
