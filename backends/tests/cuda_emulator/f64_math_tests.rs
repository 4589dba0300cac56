//! The f64 transcendental functions of the PTX backend (`passes::ptx::f64_math`: PTX has
//! no f64 `ex2`/`lg2`/`tanh`), run by the emulator on inputs chosen to reach every path
//! (subnormal arguments and results, the overflow and underflow edges, ±0, ±inf, NaN,
//! arguments near 1 and near 0) and on a spread of magnitudes, against Rust's libm: within
//! a few ulp, NaN where NaN and the same infinity where one. `pow` is held to its
//! documented bound, which grows with `|y ln x|`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessera_backends::interp::inputs::seeded;
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{default_config, tile_ir, Target};

use super::execute::emulate;

const SOURCE: &str = r#"from tessera import *

@kernel.schedule(Schedule(block=(1, 128), warps=4))
def f64_math(X: Tensor["N", f64], Y: Tensor["N", f64], E: Tensor["N", f64], L: Tensor["N", f64],
             T: Tensor["N", f64], R: Tensor["N", f64], P: Tensor["N", f64], S: Tensor["N", f64],
             G: Tensor["N", f64], U: Tensor["N", f64]):
    ctx = tile.context()
    for i in tile.parallel(0, N, ctx.BN):
        x = tile.load(X[i:i + ctx.BN])
        y = tile.load(Y[i:i + ctx.BN])
        E[i:i + ctx.BN] = tile.exp(x)
        L[i:i + ctx.BN] = tile.log(x)
        T[i:i + ctx.BN] = tile.tanh(x)
        R[i:i + ctx.BN] = tile.rsqrt(x)
        P[i:i + ctx.BN] = x ** y
        S[i:i + ctx.BN] = tile.sigmoid(x)
        G[i:i + ctx.BN] = tile.gelu(x)
        U[i:i + ctx.BN] = tile.silu(x)
"#;

/// Arguments that reach every path, each also negated.
fn edge_inputs() -> Vec<f64> {
    let edges = [
        0.0,
        f64::from_bits(1),
        1e-310,
        f64::MIN_POSITIVE,
        1e-300,
        1e-20,
        1e-8,
        0.3,
        0.5,
        1.0 - f64::EPSILON / 2.0,
        1.0,
        1.0 + f64::EPSILON,
        std::f64::consts::SQRT_2,
        std::f64::consts::LN_2 / 2.0,
        std::f64::consts::LN_2,
        0.625,
        2.0,
        10.0,
        19.0,
        20.0,
        21.0,
        700.0,
        708.39,
        709.78,
        709.79,
        710.0,
        744.44,
        745.13,
        745.14,
        746.0,
        1e300,
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
    ];
    edges.iter().flat_map(|&x| [x, -x]).collect()
}

/// A deterministic spread: every magnitude from 2^-1074 to 2^1023 and every argument
/// from -750 to 750, with both signs.
fn spread() -> Vec<f64> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for _ in 0..600 {
        let bits = next() & !(1u64 << 63);
        let x = f64::from_bits(bits);
        if x.is_finite() {
            out.push(x);
        }
        let unit = (next() >> 11) as f64 / (1u64 << 53) as f64;
        out.push((unit - 0.5) * 1500.0);
        out.push((unit - 0.5) * 8.0);
    }
    out.iter().flat_map(|&x| [x, -x]).collect()
}

/// The distance in ulp between two finite f64 of any signs.
fn ulps(a: f64, b: f64) -> u64 {
    let ordered = |x: f64| {
        let bits = x.to_bits() as i64;
        if bits < 0 {
            i64::MIN - bits
        } else {
            bits
        }
    };
    ordered(a).abs_diff(ordered(b))
}

/// Whether `actual` is `expected` within `ulp` (NaN only for NaN, an infinity only for
/// the same infinity).
fn close(actual: f64, expected: f64, ulp: u64) -> bool {
    if expected.is_nan() || actual.is_nan() {
        return expected.is_nan() && actual.is_nan();
    }
    if expected.is_infinite() || actual.is_infinite() {
        return actual == expected;
    }
    ulps(actual, expected) <= ulp
}

/// Runs the kernel on `x` and `y` in the emulator; the outputs in `SOURCE`'s order.
fn run(x: &[f64], y: &[f64]) -> Vec<Vec<f64>> {
    let db = Database::default();
    let file = SourceFile::new(&db, PathBuf::from("f64_math.tsr"), SOURCE.to_string(), None);
    let key = item_index(&db, file).functions[0].key;
    let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
    let func = tile_ir(&db, key, config, Target::Sm90).clone().unwrap();
    let code = tessera_passes::ptx::emit(&func, Target::Sm90).unwrap();
    if let Some(ptxas) = tessera_passes::ptx::ptxas::locate() {
        tessera_passes::ptx::ptxas::assemble_with(&ptxas, &code.text, "sm_90a").unwrap();
    }
    let n = x.len();
    let symbols = BTreeMap::from([("N".to_string(), n as i64)]);
    let mut args = seeded(&func, &symbols, 1).unwrap();
    args[0] = Arg::Tensor(HostTensor::from_f64(DType::F64, &[n], x));
    args[1] = Arg::Tensor(HostTensor::from_f64(DType::F64, &[n], y));
    emulate(&code, &mut args).unwrap();
    args[2..]
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) => t.to_f64(),
            other => panic!("an output that is not a tensor: {other:?}"),
        })
        .collect()
}

#[test]
fn f64_transcendentals_are_within_a_few_ulp_of_libm() {
    let mut x = edge_inputs();
    x.extend(spread());
    // Exponents: integers (odd and even), halves, and fractions of either sign, and the
    // exceptions of C's pow (0, ±inf, NaN).
    let exponents = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 1.5, -2.5, 1.0 / 3.0, 7.0, 0.0, f64::INFINITY, f64::NAN];
    let y: Vec<f64> = (0..x.len()).map(|i| exponents[i % exponents.len()]).collect();
    let outputs = run(&x, &y);
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    let mut failures = Vec::new();
    let mut worst = [0u64; 4];
    for (i, (&v, &w)) in x.iter().zip(&y).enumerate() {
        let expected = [v.exp(), v.ln(), v.tanh(), 1.0 / v.sqrt()];
        for (k, ((name, bound), e)) in
            [("exp", 2), ("log", 2), ("tanh", 3), ("rsqrt", 2)].iter().zip(expected).enumerate()
        {
            let a = outputs[k][i];
            if !close(a, e, *bound) {
                failures.push(format!("{name}({v:e}) = {a:e}, libm {e:e}"));
            } else if a.is_finite() {
                worst[k] = worst[k].max(ulps(a, e));
            }
        }
        // pow: a few ulp, plus |y ln x| 2^-53 relative from the rounded exponent.
        let (a, e) = (outputs[4][i], v.powf(w));
        let amplified = (w * v.abs().ln()).abs();
        let bound = 4 + if amplified.is_finite() { (amplified * 2.0) as u64 } else { 0 };
        if !close(a, e, bound) {
            failures.push(format!("pow({v:e}, {w:e}) = {a:e}, libm {e:e} (bound {bound} ulp)"));
        }
        // The activations: the interpreter's formulas on libm, to a few ulp of their
        // largest intermediate (1 + tanh cancels for large negative arguments).
        let t = (0.7978845608 * (v + 0.044715 * v * v * v)).tanh();
        let activations = [(sigmoid(v), 1.0), (0.5 * v * (1.0 + t), (0.5 * v).abs()), (v * sigmoid(v), v.abs())];
        for ((name, (e, scale)), out) in ["sigmoid", "gelu", "silu"].iter().zip(activations).zip(&outputs[5..]) {
            let a = out[i];
            let within = if e.is_finite() && a.is_finite() {
                (a - e).abs() <= 8.0 * f64::EPSILON * e.abs().max(scale) + f64::from_bits(1)
            } else {
                close(a, e, 0)
            };
            if !within {
                failures.push(format!("{name}({v:e}) = {a:e}, expected {e:e}"));
            }
        }
    }
    eprintln!("{} arguments; worst ulp of exp, log, tanh, rsqrt: {worst:?}", x.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
