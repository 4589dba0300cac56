//! Numerics a kernel author brings from Python and PyTorch, each compared with Rust's own
//! arithmetic on the saved inputs, on the interpreter and on the CPU (the PTX is checked
//! by the emulator, `backends/tests/cuda_emulator.rs`, kernels `rounding`, `remainders`,
//! `bitwise` and this file's `w4a16_gemm`):
//! - `tile.floor`, `tile.ceil` and `tile.round` (halves to even), and the per-row int8
//!   quantizer they make possible (`tile.cast` to an integer truncates toward zero, which
//!   biases a quantizer);
//! - `//` floors and `%` takes the divisor's sign, as in Python, for every sign (`%` was
//!   Euclidean, never negative: `7 % -3` was 1, and `a != (a // b) * b + a % b`);
//! - `<<`, `>>`, `&`, `|`, `^`, `~` on integer tiles (two's complement, wrapping to the
//!   dtype, amounts outside 0..width shifting every bit out), and the int4 weight GEMM
//!   they make possible;
//! - a number written in an f64 kernel is exact (`x * 0.1` multiplied by 0.1 rounded to
//!   f32, and `run` called it correct: f64 outputs were allowed f32 sum errors).

use tessera_frontend::check::DType;

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{input, input_shaped, on_each_device};

const ROUNDING: &str = "tests/fixtures/numerics/rounding.tsr";
const REMAINDERS: &str = "tests/fixtures/numerics/remainders.tsr";
const BITWISE: &str = "tests/fixtures/numerics/bitwise.tsr";
const F64: &str = "tests/fixtures/numerics/f64.tsr";

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
    let arg = input(tmp.path(), "X", DType::F32, &x.iter().map(|&v| v as f64).collect::<Vec<_>>());
    on_each_device(ROUNDING, "rounding", &["--input", &arg], |device, saved| {
        for (name, want) in
            [("F.out.npy", f32::floor as fn(f32) -> f32), ("C.out.npy", f32::ceil), ("R.out.npy", f32::round_ties_even)]
        {
            let got = saved.read(name);
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                assert!(same(g, want(v)), "{device} {name}[{i}]: f({v}) = {g}, want {}", want(v));
            }
        }
        // Halves go to the even neighbour: 2.5 to 2, -0.5 to -0.
        let r = saved.read("R.out.npy");
        let at = |v: f32| r[x.iter().position(|&y| y == v && y.is_sign_negative() == v.is_sign_negative()).unwrap()];
        assert_eq!((at(2.5), at(3.5), at(-2.5)), (2.0, 4.0, -2.0), "{device}");
        assert!(at(-0.5) == 0.0 && at(-0.5).is_sign_negative(), "{device}");
    });
}

#[test]
fn the_int8_quantizer_rounds_each_row_to_nearest_even_steps_of_its_scale() {
    let (t, d) = (37usize, 256usize);
    let dims = format!("T={t},D={d}");
    on_each_device(ROUNDING, "quantize_rows", &["--dims", &dims], |device, saved| {
        let (x, q, s) = (saved.read("X.npy"), saved.read("Q.out.npy"), saved.read("S.out.npy"));
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
    });
}

/// Every sign of dividend and divisor, the edges of i32, and divisors of both signs.
fn dividends_and_divisors() -> (Vec<f64>, Vec<f64>) {
    let mut x: Vec<i64> = (-20..=20).collect();
    x.extend([i32::MAX as i64, i32::MIN as i64 + 1, 1 << 30, -(1 << 30)]);
    let d: Vec<i64> = x.iter().enumerate().map(|(i, _)| [3, -3, 7, -7, 1, -1, 2, -2][i % 8]).collect();
    (x.into_iter().map(|v| v as f64).collect(), d.into_iter().map(|v| v as f64).collect())
}

#[test]
fn integer_floor_division_and_remainder_are_pythons() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, d) = dividends_and_divisors();
    let (xa, da) = (input(tmp.path(), "X", DType::I32, &x), input(tmp.path(), "D", DType::I32, &d));
    on_each_device(REMAINDERS, "int_remainders", &["--input", &xa, "--input", &da], |device, saved| {
        let (q, r, qc, rc) =
            (saved.read("Q.out.npy"), saved.read("R.out.npy"), saved.read("Qc.out.npy"), saved.read("Rc.out.npy"));
        for i in 0..x.len() {
            let (a, b) = (x[i] as i64, d[i] as i64);
            // Python: the quotient floors, the remainder has the divisor's sign.
            let floor = |a: i64, b: i64| (a as f64 / b as f64).floor() as i64;
            let python_rem = |a: i64, b: i64| a - b * floor(a, b);
            assert_eq!((q[i] as i64, r[i] as i64), (floor(a, b), python_rem(a, b)), "{device}: {a} // {b}, {a} % {b}");
            assert_eq!(
                (qc[i] as i64, rc[i] as i64),
                (floor(a, -3), python_rem(a, -3)),
                "{device}: {a} // -3, {a} % -3"
            );
            assert_eq!(q[i] as i64 * b + r[i] as i64, a, "{device}: {a} == ({a} // {b}) * {b} + {a} % {b}");
        }
    });
}

#[test]
fn float_remainder_takes_the_divisors_sign() {
    let tmp = tempfile::tempdir().unwrap();
    let x: Vec<f64> = [-7.5, 7.5, -7.0, 7.0, 0.25, -0.25, 100.125, -100.125].repeat(3);
    let d: Vec<f64> = x.iter().enumerate().map(|(i, _)| [2.0, -2.0, 3.5, -3.5][i % 4]).collect();
    let (xa, da) = (input(tmp.path(), "X", DType::F32, &x), input(tmp.path(), "D", DType::F32, &d));
    on_each_device(REMAINDERS, "float_remainders", &["--input", &xa, "--input", &da], |device, saved| {
        let (r, rc) = (saved.read("R.out.npy"), saved.read("Rc.out.npy"));
        for i in 0..x.len() {
            // These operands are exact in f32: x - b * floor(x / b) is the exact remainder.
            let want = |b: f64| x[i] - b * (x[i] / b).floor();
            assert_eq!(r[i], want(d[i]), "{device}: {} % {}", x[i], d[i]);
            assert_eq!(rc[i], want(-2.5), "{device}: {} % -2.5", x[i]);
            assert!(r[i] == 0.0 || (r[i] < 0.0) == (d[i] < 0.0), "{device}: sign of {} % {}", x[i], d[i]);
        }
    });
}

/// i32 values with every bit pattern class (signs, edges, alternating bits) and shift
/// amounts below 0, inside 0..32 and past it.
fn bit_inputs() -> (Vec<f64>, Vec<f64>) {
    let mut x: Vec<i32> = vec![0, 1, -1, i32::MAX, i32::MIN, 0x5555_5555, 0xAAAA_AAAAu32 as i32, 0x0F0F_00FF, -12345];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..400 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        x.push((state >> 32) as u32 as i32);
    }
    let s: Vec<i32> = (0..x.len() as i32).map(|i| i % 75 - 5).collect();
    (x.iter().map(|&v| v as f64).collect(), s.iter().map(|&v| v as f64).collect())
}

#[test]
fn shifts_and_bitwise_operators_are_twos_complement_with_amounts_past_the_width_shifting_all_out() {
    let tmp = tempfile::tempdir().unwrap();
    let (x, s) = bit_inputs();
    let (xa, sa) = (input(tmp.path(), "X", DType::I32, &x), input(tmp.path(), "S", DType::I32, &s));
    on_each_device(BITWISE, "bit_ops", &["--input", &xa, "--input", &sa], |device, saved| {
        let read = |name: &str| saved.read(name).into_iter().map(|v| v as i64).collect::<Vec<_>>();
        let (shl, shr, mix, b) = (read("Shl.out.npy"), read("Shr.out.npy"), read("Mix.out.npy"), read("B.out.npy"));
        let (p, p8) = (read("P.out.npy"), read("P8.out.npy"));
        for i in 0..x.len() {
            let (v, n) = (x[i] as i32, s[i] as i32);
            // Rust's i32 operators within 0..32; outside, every bit shifted out.
            let want_shl = if (0..32).contains(&n) { v.wrapping_shl(n as u32) } else { 0 };
            let want_shr = if (0..32).contains(&n) { v >> n } else { v >> 31 };
            assert_eq!(shl[i], want_shl as i64, "{device}: {v} << {n}");
            assert_eq!(shr[i], want_shr as i64, "{device}: {v} >> {n}");
            assert_eq!(mix[i], ((v & 0xFF0F) ^ (!v | 0x30) ^ (v >> 28)) as i64, "{device}: bit mix of {v}");
            // int8: the cast wraps, and so does every operation on the narrow value.
            let narrow = v as i8;
            assert_eq!(b[i], (narrow.wrapping_shl(3) >> 1) as i64, "{device}: ({narrow} << 3) >> 1 in int8");
            assert_eq!(p[i], v.wrapping_pow((n & 31) as u32) as i64, "{device}: {v} ** {}", n & 31);
            assert_eq!(p8[i], narrow.wrapping_pow((n & 7) as u32) as i64, "{device}: {narrow} ** {} in int8", n & 7);
        }
    });
}

#[test]
fn an_int4_weight_gemm_unpacks_nibbles_as_packed_and_matches_f64() {
    let (m, k, n) = (40usize, 96usize, 72usize);
    let tmp = tempfile::tempdir().unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state >> 11
    };
    // Weights -8..7 stored as nibbles 0..15, eight per int32: row k in nibble k % 8.
    let q: Vec<i64> = (0..k * n).map(|_| (next() % 16) as i64).collect();
    let mut packed = vec![0u32; k / 8 * n];
    for row in 0..k {
        for col in 0..n {
            packed[row / 8 * n + col] |= (q[row * n + col] as u32) << (4 * (row % 8));
        }
    }
    let a: Vec<f64> = (0..m * k).map(|_| (next() % 2001) as f64 / 500.0 - 2.0).collect();
    let scale: Vec<f64> = (0..n).map(|_| 0.01 + (next() % 100) as f64 / 1000.0).collect();
    let packed: Vec<f64> = packed.iter().map(|&p| p as i32 as f64).collect();
    let args = [
        input_shaped(tmp.path(), "A", DType::F16, &[m, k], &a),
        input(tmp.path(), "Wq", DType::I32, &packed),
        input(tmp.path(), "Scale", DType::F16, &scale),
    ];
    let dims = format!("M={m},K={k},N={n}");
    let mut all = vec!["--dims", &dims];
    for arg in &args {
        all.extend(["--input", arg.as_str()]);
    }
    on_each_device(BITWISE, "w4a16_gemm", &all, |device, saved| {
        // The f16 values the kernel read, and W = (nibble - 8) * scale in f64.
        let (a, scale, c) = (saved.read("A.npy"), saved.read("Scale.npy"), saved.read("C.out.npy"));
        let mut worst = 0f64;
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|l| a[i * k + l] * (q[l * n + j] - 8) as f64).sum();
                let want = dot * scale[j];
                worst = worst.max((c[i * n + j] - want).abs());
                assert!(
                    (c[i * n + j] - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{device}: C[{i}, {j}] = {}, want {want}",
                    c[i * n + j]
                );
            }
        }
        eprintln!("{device}: w4a16 max abs error {worst:.2e}");
    });
}

#[test]
fn numbers_in_an_f64_kernel_are_exact_f64_values() {
    let tmp = tempfile::tempdir().unwrap();
    let x: Vec<f64> = (0..1000).map(|i| (i as f64 - 500.0) * 0.0137 + 1.0 / 3.0).collect();
    let arg = input(tmp.path(), "X", DType::F64, &x);
    on_each_device(F64, "scale_f64", &["--input", &arg], |device, saved| {
        let y = saved.read("Y.out.npy");
        for (i, (&got, &v)) in y.iter().zip(&x).enumerate() {
            // The kernel's order of operations, in f64: equal to the last bit.
            assert_eq!(got, v * 0.1 + v / 3.0 - 0.7, "{device}: Y[{i}] of {v}");
        }
    });
    // A number bound to a name (`c = 0.1`) long before it meets f64 data.
    on_each_device(F64, "named_scale_f64", &["--input", &arg], |device, saved| {
        for (i, (&got, &v)) in saved.read("Y.out.npy").iter().zip(&x).enumerate() {
            assert_eq!(got, v * 3.0 * 0.1, "{device}: Y[{i}] of {v}");
        }
    });
}

#[test]
fn an_f64_output_computed_in_f32_is_judged_by_f32s_tolerance() {
    // Its error against the f64 reference is f32's (about 1e-7 relative): correct, not
    // WRONG; the run fails (and `on_each_device` with it) if f64's tolerance is applied.
    on_each_device(F64, "f32_sum_to_f64", &["--dims", "R=37,C=3000"], |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
    });
}

#[test]
fn an_f64_gemm_sums_in_f64() {
    let (m, k, n) = (40usize, 300usize, 50usize);
    let dims = format!("M={m},K={k},N={n}");
    on_each_device(F64, "f64_gemm", &["--dims", &dims], |device, saved| {
        let (a, b, c) = (saved.read("A.npy"), saved.read("B.npy"), saved.read("C.out.npy"));
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                // f64 sums in another order: far below f32's 1e-7 (an f32 sum was 1e-6 off).
                assert!(
                    (c[i * n + j] - want).abs() <= 1e-12 * (k as f64),
                    "{device}: C[{i}, {j}] = {}, want {want}",
                    c[i * n + j]
                );
            }
        }
    });
}
