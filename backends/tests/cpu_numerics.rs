//! The numerics of the CPU backend's generated code against exact references: the
//! polynomial exp/log/tanh/sigmoid/gelu/silu within a few f32 ulp over their whole
//! range (and exactly at the special values), every dtype conversion bit for bit
//! (round to nearest even, saturation, NaN), integer floor division and Euclidean
//! remainder, and runtime errors reported as messages.

#![cfg(feature = "llvm")]

use std::collections::BTreeMap;

use tessera_backends::cpu::CpuKernel;
use tessera_backends::tensor::{round_to, Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::ir::Func;
use tessera_passes::{default_config, tile_ir, Target};

/// Tile IR (CPU) of the only kernel of `src`.
fn compile(src: &str) -> (Func, CpuKernel) {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.to_string(), None);
    let entry = item_index(&db, file).functions[0].clone();
    let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap_or_else(|e| panic!("{}", e.message));
    let func =
        (*tile_ir(&db, entry.key, config, Target::Cpu).clone().unwrap_or_else(|e| panic!("{}", e.message))).clone();
    let k = CpuKernel::new(&func).unwrap_or_else(|e| panic!("{e}"));
    (func, k)
}

/// `Y = <expr of x>` elementwise over 1-D tensors.
fn unary_kernel(expr: &str, x: &str, y: &str) -> String {
    format!(
        "from tessera import *\n\n\
         @kernel.autotune(space=dict(BLOCK=[256]))\n\
         def f(X: Tensor[\"N\", {x}], Y: Tensor[\"N\", {y}]):\n    \
             ctx = tile.context()\n    \
             for i0 in tile.parallel(0, N, ctx.BLOCK):\n        \
                 x = tile.load(X[i0:i0 + ctx.BLOCK])\n        \
                 Y[i0:i0 + ctx.BLOCK] = {expr}\n"
    )
}

fn run_unary(expr: &str, x_dtype: DType, y_dtype: DType, xs: &[f64]) -> Vec<f64> {
    let src = unary_kernel(expr, x_dtype.name(), y_dtype.name());
    let (_, k) = compile(&src);
    let mut args = vec![
        Arg::Tensor(HostTensor::from_f64(x_dtype, &[xs.len()], xs)),
        Arg::Tensor(HostTensor::zeros(y_dtype, &[xs.len()])),
    ];
    k.launch(&mut args, 2).unwrap_or_else(|e| panic!("{expr}: {e}"));
    match &args[1] {
        Arg::Tensor(t) => t.to_f64(),
        _ => unreachable!(),
    }
}

/// Distance in f32 ulps (units of the spacing at the reference's magnitude); a zero of
/// the wrong sign is as far as can be (`tanh(-0.0)` is `-0.0`: `1 / tanh(x)` tells).
fn ulps(actual: f64, reference: f64) -> f64 {
    if actual == 0.0 && reference == 0.0 && actual.is_sign_negative() != reference.is_sign_negative() {
        return f64::INFINITY;
    }
    if actual == reference || (actual.is_nan() && reference.is_nan()) {
        return 0.0;
    }
    if !actual.is_finite() || !reference.is_finite() {
        return f64::INFINITY;
    }
    let r = reference as f32;
    let spacing = if r.abs() < f32::MIN_POSITIVE {
        2f64.powi(-149)
    } else {
        let e = (r.abs() as f64).log2().floor() as i32;
        2f64.powi(e - 23)
    };
    (actual - reference).abs() / spacing
}

/// Inputs over `[lo, hi]`: a dense sweep plus special values.
fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|i| (lo + (hi - lo) * i as f64 / (n - 1) as f64) as f32 as f64).collect();
    v.extend([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-30, -1e-30, 1e-40, 0.5, 1.0, -1.0]);
    v.into_iter().map(|x| x as f32 as f64).collect()
}

fn check_function(name: &str, expr: &str, reference: fn(f64) -> f64, lo: f64, hi: f64, max_ulps: f64) {
    let xs = sweep(lo, hi, 20001);
    let ys = run_unary(expr, DType::F32, DType::F32, &xs);
    let mut worst = (0.0, 0.0, 0.0);
    for (&x, &y) in xs.iter().zip(&ys) {
        let r = reference(x) as f32 as f64;
        let u = ulps(y, r);
        if u > worst.0 {
            worst = (u, x, y);
        }
    }
    assert!(
        worst.0 <= max_ulps,
        "{name}: {} ulps at x = {} (got {}, expected {})",
        worst.0,
        worst.1,
        worst.2,
        reference(worst.1)
    );
}

#[test]
fn transcendental_functions_are_within_a_few_ulps() {
    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }
    // 0.5 x (1 + tanh(u)) = x sigmoid(2u): the same function, without the f64
    // cancellation of 1 + tanh(u) that zeroes the tail the f32 code still resolves.
    fn gelu(x: f64) -> f64 {
        let u = 0.7978845608 * (x + 0.044715 * x * x * x);
        x / (1.0 + (-2.0 * u).exp())
    }
    check_function("exp", "tile.exp(x)", f64::exp, -110.0, 90.0, 2.0);
    check_function("log", "tile.log(x)", f64::ln, 0.0, 1e6, 2.0);
    check_function("log near 1", "tile.log(x)", f64::ln, 0.5, 2.0, 2.0);
    check_function("log of tiny", "tile.log(x)", f64::ln, 1e-44, 1e-36, 2.0);
    check_function("tanh", "tile.tanh(x)", f64::tanh, -12.0, 12.0, 3.0);
    check_function("tanh near 0", "tile.tanh(x)", f64::tanh, -1.0, 1.0, 3.0);
    check_function("sigmoid", "tile.sigmoid(x)", sigmoid, -100.0, 100.0, 3.0);
    check_function("silu", "tile.silu(x)", |x| x * (1.0 / (1.0 + (-x).exp())), -80.0, 80.0, 4.0);
    check_function("gelu", "tile.gelu(x)", gelu, -1.0, 12.0, 4.0);
    // Further left gelu is about x e^{2u} with 2u = O(x^3) rounded in f32: any f32
    // evaluation carries the relative error of that argument times its size (~1e-5 at
    // x = -10), far more than an ulp of the (tiny) result.
    let xs = sweep(-12.0, -1.0, 5001);
    let ys = run_unary("tile.gelu(x)", DType::F32, DType::F32, &xs);
    for (&x, &y) in xs.iter().zip(&ys).filter(|(x, _)| x.is_finite() && **x < -1.0) {
        let r = gelu(x);
        let tiny = r.abs() < f32::MIN_POSITIVE as f64 * 16.0;
        assert!(tiny && (y - r).abs() < 1e-43 || ((y - r) / r).abs() < 3e-5, "gelu({x}) = {y}, expected {r}");
    }
    check_function("sqrt", "tile.sqrt(x)", f64::sqrt, 0.0, 1e6, 0.5);
    check_function("rsqrt", "tile.rsqrt(x)", |x| 1.0 / x.sqrt(), 1e-6, 1e6, 1.0);
}

/// f32 inputs covering every class: random bit patterns, halfway cases of the narrower
/// formats, their limits, subnormals, infinities and NaN.
fn conversion_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..20000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let f = f32::from_bits(s as u32);
        if !f.is_nan() {
            v.push(f as f64);
        }
        // Values near 1 with every low-bit pattern.
        v.push(f32::from_bits(0x3f80_0000 | (s as u32 & 0x007f_ffff)) as f64 * if s & 1 == 0 { 1.0 } else { -3.5 });
    }
    for e in -30..20 {
        for m in 0..64 {
            v.push((1.0 + m as f64 / 64.0 + 1.0 / 512.0) * 2f64.powi(e));
            v.push(-(1.0 + m as f64 / 128.0) * 2f64.powi(e));
        }
    }
    v.extend([
        0.0,
        -0.0,
        448.0,
        464.0,
        480.0,
        1e6,
        -1e6,
        57344.0,
        61440.0,
        65504.0,
        65520.0,
        65536.0,
        1e-8,
        2f64.powi(-9),
        2f64.powi(-10),
        2f64.powi(-17),
        2f64.powi(-25),
        127.5,
        -128.5,
        300.0,
        -300.0,
        2147483520.0,
        -3e9,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e-40,
        -1e-45,
    ]);
    v.into_iter().map(|x| x as f32 as f64).collect()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

#[test]
fn casts_round_to_nearest_even_and_saturate_bit_for_bit() {
    let xs = conversion_inputs();
    for to in [
        DType::BF16,
        DType::F16,
        DType::Fp8E4m3,
        DType::Fp8E5m2,
        DType::TF32,
        DType::Int8,
        DType::Int4,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F64,
    ] {
        let ys = run_unary(&format!("tile.cast(x, {})", to.name()), DType::F32, to, &xs);
        for (&x, &y) in xs.iter().zip(&ys) {
            let expected = round_to(to, x);
            let exact_int = (to.is_int() || to == DType::Bool) && y == expected;
            assert!(
                same(y, expected) || exact_int,
                "f32 {x:e} ({:#010x}) → {to}: got {y:e}, expected {expected:e}",
                (x as f32).to_bits()
            );
        }
    }
    // Back to f32 from every code of the 8- and 16-bit formats: exact.
    for from in [DType::BF16, DType::F16, DType::Fp8E4m3, DType::Fp8E5m2, DType::Int8, DType::Int4] {
        let bits = if from.bits() == 16 { 0..=0xffffu32 } else { 0..=0xffu32 };
        let mut t = HostTensor::zeros(from, &[bits.clone().count()]);
        for (i, b) in bits.enumerate() {
            let bytes = (b as u16).to_le_bytes();
            let n = from.bytes() as usize;
            t.data[i * n..(i + 1) * n].copy_from_slice(&bytes[..n]);
        }
        let xs = t.to_f64();
        let src = unary_kernel("tile.cast(x, f32)", from.name(), "f32");
        let (_, k) = compile(&src);
        let mut args = vec![Arg::Tensor(t), Arg::Tensor(HostTensor::zeros(DType::F32, &[xs.len()]))];
        k.launch(&mut args, 2).unwrap();
        let Arg::Tensor(y) = &args[1] else { unreachable!() };
        for (i, (&x, &v)) in xs.iter().zip(&y.to_f64()).enumerate() {
            assert!(same(x, v), "{from} code {i:#x}: expected {x}, got {v}");
        }
    }
}

#[test]
fn low_precision_arithmetic_rounds_each_result() {
    // bf16 sums computed in f32 then rounded once, as the interpreter does.
    let xs = conversion_inputs()
        .into_iter()
        .filter(|x| x.abs() < 1e30)
        .map(|x| round_to(DType::BF16, x))
        .collect::<Vec<_>>();
    let ys = run_unary("x * x + x", DType::BF16, DType::BF16, &xs);
    for (&x, &y) in xs.iter().zip(&ys) {
        let xf = x as f32;
        let square = round_to(DType::BF16, (xf * xf) as f64) as f32;
        let expected = round_to(DType::BF16, (square + xf) as f64);
        assert!(same(y, expected), "bf16 {x}: got {y}, expected {expected}");
    }
}

fn int_kernel(expr: &str) -> String {
    format!(
        "from tessera import *\n\n\
         @kernel.autotune(space=dict(BLOCK=[64]))\n\
         def f(A: Tensor[\"N\", i32], B: Tensor[\"N\", i32], Y: Tensor[\"N\", i32]):\n    \
             ctx = tile.context()\n    \
             for i0 in tile.parallel(0, N, ctx.BLOCK):\n        \
                 a = tile.load(A[i0:i0 + ctx.BLOCK])\n        \
                 b = tile.load(B[i0:i0 + ctx.BLOCK])\n        \
                 Y[i0:i0 + ctx.BLOCK] = {expr}\n"
    )
}

fn run_int(expr: &str, a: &[i64], b: &[i64]) -> Result<Vec<i64>, String> {
    let (_, k) = compile(&int_kernel(expr));
    let f = |v: &[i64]| HostTensor::from_f64(DType::I32, &[v.len()], &v.iter().map(|&x| x as f64).collect::<Vec<_>>());
    let mut args = vec![Arg::Tensor(f(a)), Arg::Tensor(f(b)), Arg::Tensor(HostTensor::zeros(DType::I32, &[a.len()]))];
    k.launch(&mut args, 1).map_err(|e| e.message)?;
    let Arg::Tensor(y) = &args[2] else { unreachable!() };
    Ok(y.to_f64().iter().map(|&v| v as i64).collect())
}

#[test]
fn integer_division_floors_and_remainders_take_the_divisors_sign() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for x in [-7i64, 7, -8, 8, 0, 1, -1, i32::MIN as i64] {
        for y in [2i64, -2, 3, -3, 1, -1, 7, i32::MAX as i64] {
            a.push(x);
            b.push(y);
        }
    }
    // Whole tiles: the lanes past the end of a partial tile hold 0 and would divide by
    // zero (in the interpreter as well).
    assert_eq!(a.len() % 64, 0);
    let q = run_int("a // b", &a, &b).unwrap();
    let r = run_int("a % b", &a, &b).unwrap();
    for i in 0..a.len() {
        let (x, y) = (a[i] as i32, b[i] as i32);
        let fq = {
            let q = x.wrapping_div(y);
            if x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            }
        };
        assert_eq!(q[i], fq as i64, "{x} // {y}");
        // Python's `%`: x == (x // y) * y + x % y (wrapping at i32::MIN).
        assert_eq!(r[i] as i32, x.wrapping_sub((fq).wrapping_mul(y)), "{x} % {y}");
        assert!(r[i] == 0 || (r[i] < 0) == (y < 0), "{x} % {y} = {}: not in the divisor's sign", r[i]);
    }
    // Division by zero is an error with the op and place, not a crash.
    let mut ones = vec![1i64; 64];
    ones[37] = 0;
    let e = run_int("a // b", &[5; 64], &ones).unwrap_err();
    assert!(e.contains("integer division by zero in `arith.floordiv`"), "{e}");
}

#[test]
fn bad_arguments_are_errors() {
    let (_, k) = compile(&unary_kernel("tile.exp(x)", "f32", "f32"));
    let mut wrong_dtype =
        vec![Arg::Tensor(HostTensor::zeros(DType::F16, &[8])), Arg::Tensor(HostTensor::zeros(DType::F32, &[8]))];
    let e = k.launch(&mut wrong_dtype, 1).unwrap_err();
    assert!(e.message.contains("`X` is f32, got a f16 tensor"), "{e}");
    let mut mismatched =
        vec![Arg::Tensor(HostTensor::zeros(DType::F32, &[8])), Arg::Tensor(HostTensor::zeros(DType::F32, &[9]))];
    let e = k.launch(&mut mismatched, 1).unwrap_err();
    assert!(e.message.contains("N = 8 from an earlier tensor"), "{e}");
    let mut too_few = vec![Arg::Tensor(HostTensor::zeros(DType::F32, &[8]))];
    let e = k.launch(&mut too_few, 1).unwrap_err();
    assert!(e.message.contains("takes 2 arguments, got 1"), "{e}");
    // An empty grid runs nothing.
    let mut empty =
        vec![Arg::Tensor(HostTensor::zeros(DType::F32, &[0])), Arg::Tensor(HostTensor::zeros(DType::F32, &[0]))];
    let run = k.launch(&mut empty, 4).unwrap();
    assert_eq!(run.grid[0], 0);
}

/// `tile.rand` is the counter-based hash of docs/ir.md bit for bit (2-D tiles, fixed
/// leading coordinates, ragged edges).
#[test]
fn random_numbers_are_the_pinned_hash() {
    let src = "from tessera import *\n\n\
               @kernel.autotune(space=dict(BM=[8], BN=[32]))\n\
               def f(Y: Tensor[\"R\", \"C\", f32], seed: int = 0):\n    \
                   ctx = tile.context()\n    \
                   for r0 in tile.parallel(0, R, ctx.BM):\n        \
                       for c0 in tile.parallel(0, C, ctx.BN):\n            \
                           Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.rand((ctx.BM, ctx.BN), seed, (7, r0, c0))\n";
    let (_, k) = compile(src);
    for seed in [0i64, 1, -1, 1_000_004] {
        let (rows, cols) = (19usize, 45usize);
        let mut args = vec![Arg::Tensor(HostTensor::zeros(DType::F32, &[rows, cols])), Arg::Index(seed)];
        k.launch(&mut args, 2).unwrap();
        let Arg::Tensor(y) = &args[0] else { unreachable!() };
        for (i, v) in y.to_f64().iter().enumerate() {
            let (r, c) = ((i / cols) as i64, (i % cols) as i64);
            let want = tessera_passes::ir::rand::uniform(seed, &[7, r, c]);
            assert_eq!(*v as f32, want, "seed {seed} at ({r}, {c})");
        }
    }
}
