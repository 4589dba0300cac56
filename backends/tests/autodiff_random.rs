//! `grad` of random differentiable programs against central finite differences. Each
//! case is an `@autodiff` loss of four f64 parameters built from random graph operations
//! (elementwise functions, matmuls, broadcasts, reductions with `keepdim`, softmax,
//! logsumexp, layernorm, transposes, reshapes, concat/split, the losses), compiled by the
//! real compiler; its backward graph, evaluated in f64, must match the finite differences
//! of the forward graph at random elements of every parameter. Only smooth operations are
//! drawn (no `relu`, `abs`, `maximum`: a kink within the step would make the difference
//! quotient wrong, not the gradient), and `where`, `max` and `min`, whose switch a step of
//! 1e-5 crosses with negligible probability at these fixed seeds.
//!
//! `TESSERA_FUZZ_ITERATIONS` and `TESSERA_FUZZ_SEED` run a longer or different campaign.

use std::collections::BTreeMap;
use std::fmt::Write;

use tessera_backends::interp::graph::run_graph_f64_with_dims;
use tessera_backends::interp::inputs::Rng;
use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::{file_diagnostics, DType};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};

const M: usize = 3;
const K: usize = 4;
const N: usize = 5;

/// `n` choices: a uniform index below `n` from the interpreter's seeded generator.
fn below(d: &mut Rng, n: usize) -> usize {
    d.int(0, n as i64 - 1) as usize
}

/// The body of a random loss: statements `tI = ...` of shape [M, N] over the parameters
/// x [M, K], W [K, N], v [M, N], b [N], then `return <loss>`.
fn random_body(d: &mut Rng) -> String {
    let mut body = String::new();
    let mut names: Vec<String> = Vec::new();
    let steps = 2 + below(d, 5);
    for i in 0..steps {
        let pick = |d: &mut Rng, names: &[String]| -> String {
            let leaves = ["(x @ W)", "v", "(x @ W + b)", "(v * b)"];
            if names.is_empty() || below(d, 4) == 0 {
                leaves[below(d, leaves.len())].to_string()
            } else {
                names[below(d, names.len())].clone()
            }
        };
        let a = pick(d, &names);
        let c = pick(d, &names);
        let expr = match below(d, 30) {
            0 => format!("tanh({a})"),
            1 => format!("sigmoid({a})"),
            2 => format!("gelu({a})"),
            3 => format!("silu({a})"),
            4 => format!("exp({a} * 0.3)"),
            5 => format!("log({a} * {a} + 1.0)"),
            6 => format!("sqrt({a} * {a} + 1.0)"),
            7 => format!("rsqrt({a} * {a} + 1.0)"),
            8 => format!("-{a} + {c}"),
            9 => format!("{a} ** 2 * 0.5"),
            10 => format!("softmax_safe({a}, axis=-1)"),
            11 => format!("softmax_safe({a}, axis=0)"),
            12 => format!("layernorm_safe({a})"),
            13 => format!("{a} - mean({a}, axis=-1, keepdim=True)"),
            14 => format!("{a} * sum({c}, axis=0, keepdim=True) * 0.1"),
            15 => format!("transpose(reshape({a}, (N, M)))"),
            16 => format!("({a} @ transpose({c})) @ {a} * 0.1"),
            17 => format!("{a} - reshape(logsumexp_safe({a}, axis=-1), (M, 1))"),
            18 => {
                let _ = writeln!(body, "    p{i}, q{i} = split(concat([{a}, {c}], axis=0), 2, axis=0)");
                format!("p{i} * q{i}")
            }
            19 => format!("{a} / ({c} * {c} + 1.0)"),
            20 => format!("{a} * {c}"),
            21 => format!("{a} - {c} * 0.5"),
            22 => format!("{a} + b"),
            23 => format!("rmsnorm_safe({a}, weight=b)"),
            24 => format!("layernorm_safe({a}, weight=b, bias=b * 0.5)"),
            25 => format!("rmsnorm_safe({a})"),
            26 => format!("where({a} > {c}, {a} * 2.0, {c})"),
            27 => format!("{a} - max({a}, axis=-1, keepdim=True)"),
            28 => format!("{a} * min({c}, axis=(0, 1), keepdim=True)"),
            _ => format!("mean({a} * {c}, axis=(0, 1), keepdim=True) + {a}"),
        };
        let _ = writeln!(body, "    t{i} = {expr}");
        names.push(format!("t{i}"));
    }
    let last = names.last().unwrap();
    let loss = match below(d, 4) {
        0 => format!("mean({last} * {last})"),
        1 => format!("sum({last}) * 0.1"),
        2 => format!("mse({last}, v)"),
        _ => format!("cross_entropy({last}, softmax_safe(v, axis=-1))"),
    };
    let _ = writeln!(body, "    return {loss}");
    body
}

fn program(body: &str) -> String {
    format!(
        r#"from tessera import *

@jit
@autodiff
def loss(x: Tensor["M", "K", f64], W: Tensor["K", "N", f64], v: Tensor["M", "N", f64], b: Tensor["N", f64]) -> Tensor[f64]:
{body}
@jit
def gradients(x: Tensor["M", "K", f64], W: Tensor["K", "N", f64], v: Tensor["M", "N", f64], b: Tensor["N", f64]):
    return grad(loss)(x, W, v, b)
"#
    )
}

fn values(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        Arg::Scalar(_, v) => vec![*v],
        other => panic!("not a tensor: {other:?}"),
    }
}

enum Outcome {
    Checked,
    /// Lowering refused the program (an operation without a backward rule, say).
    Refused,
}

/// Compiles one random program and compares its gradients with finite differences.
fn check_case(seed: u64) -> Result<Outcome, String> {
    let mut d = Rng::new(seed);
    let text = program(&random_body(&mut d));
    let dims = [("M", M), ("K", K), ("N", N)];
    check_gradients(&text, &[&[M, K], &[K, N], &[M, N], &[N]], &dims, &mut d, seed)
        .map_err(|why| format!("{why}\n--- program (seed {seed}) ---\n{text}"))
}

/// `text`'s `loss` (f64 parameters of `shapes`) and `gradients` (its `grad`) at seeded
/// normal inputs: three random elements of every gradient against central differences.
fn check_gradients(
    text: &str,
    shapes: &[&[usize]],
    dims: &[(&str, usize)],
    d: &mut Rng,
    seed: u64,
) -> Result<Outcome, String> {
    let db = Database::default();
    let file = SourceFile::new(&db, "autodiff_random.tsr".into(), text.to_string(), None);
    let errors: Vec<String> = file_diagnostics(&db, file)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("{} {} at {:?}", d.code, d.message, &text[d.range.start as usize..d.range.end as usize]))
        .collect();
    if !errors.is_empty() {
        return Err(format!("the program does not check: {errors:?}"));
    }
    let ir = |name: &str| {
        let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == name).unwrap().key;
        tessera_passes::graph_ir(&db, key).clone()
    };
    let (forward, backward) = match (ir("loss"), ir("gradients")) {
        (Ok(f), Ok(b)) => (f, b),
        (Err(e), _) => return Err(format!("the loss does not lower: {}", e.message)),
        (_, Err(e)) if e.message.contains("not supported") => return Ok(Outcome::Refused),
        (_, Err(e)) => return Err(format!("the gradient does not lower: {}", e.message)),
    };
    let mut rng = Rng::stream(seed, 1);
    let inputs: Vec<Vec<f64>> =
        shapes.iter().map(|s| (0..s.iter().product::<usize>()).map(|_| rng.normal()).collect()).collect();
    let args = |inputs: &[Vec<f64>]| -> Vec<Arg> {
        inputs.iter().zip(shapes).map(|(v, s)| Arg::Tensor(HostTensor::from_f64(DType::F64, s, v))).collect()
    };
    let dims: BTreeMap<String, i64> = dims.iter().map(|(k, v)| (k.to_string(), *v as i64)).collect();
    let loss_at = |inputs: &[Vec<f64>]| -> Result<f64, String> {
        let out = run_graph_f64_with_dims(&forward, &args(inputs), &dims, 0).map_err(|e| e.to_string())?;
        Ok(values(&out[0])[0])
    };
    let grads = run_graph_f64_with_dims(&backward, &args(&inputs), &dims, 0)
        .map_err(|e| format!("the gradient does not run: {e}"))?;
    if grads.len() != shapes.len() {
        return Err(format!("{} gradients for {} parameters", grads.len(), shapes.len()));
    }
    let base = match loss_at(&inputs) {
        Ok(l) if l.is_finite() => l,
        Ok(l) => return Err(format!("the loss is {l}")),
        Err(e) => return Err(format!("the loss does not run: {e}")),
    };
    for (p, (g, shape)) in grads.iter().zip(shapes).enumerate() {
        let g = values(g);
        if g.len() != shape.iter().product::<usize>() {
            return Err(format!("gradient {p} has {} elements for shape {shape:?}", g.len()));
        }
        let scale = (g.iter().map(|x| x * x).sum::<f64>() / g.len() as f64).sqrt();
        for _ in 0..3 {
            let i = below(d, g.len());
            let h = 1e-5 * inputs[p][i].abs().max(1.0);
            let quotient = |h: f64| -> Result<f64, String> {
                let mut plus = inputs.clone();
                let mut minus = inputs.clone();
                plus[p][i] += h;
                minus[p][i] -= h;
                Ok((loss_at(&plus)? - loss_at(&minus)?) / (2.0 * h))
            };
            let fd = quotient(h)?;
            // The difference quotient's own error: O(h²) of the gradient, and the
            // rounding of two losses of size |base| divided by 2h (a floor of 1e-7 for a
            // loss that cancels to about zero from intermediates of size ~100).
            let rounding = 8.0 * f64::EPSILON * base.abs() / h;
            let tolerance = 1e-5 * (fd.abs() + scale) + rounding + 1e-7;
            // An ill-conditioned loss (a norm of a row whose values are equal up to
            // rounding) makes the quotient noise: it then disagrees with itself at 4h,
            // and says nothing about the gradient.
            if (fd - quotient(4.0 * h)?).abs() > tolerance {
                continue;
            }
            if (g[i] - fd).abs() > tolerance {
                return Err(format!(
                    "d loss / d parameter {p}[{i}] = {} but the finite difference is {fd} (gradient scale {scale})",
                    g[i]
                ));
            }
        }
    }
    Ok(Outcome::Checked)
}

#[test]
fn gradients_of_random_programs_match_finite_differences() {
    let cases: u64 = std::env::var("TESSERA_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let seed: u64 = std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0xAD1F);
    let mut checked = 0;
    let mut refused = 0;
    let mut failures = Vec::new();
    for case in 0..cases {
        match check_case(seed.wrapping_mul(1_000_003).wrapping_add(case)) {
            Ok(Outcome::Checked) => checked += 1,
            Ok(Outcome::Refused) => refused += 1,
            Err(e) => failures.push(e),
        }
    }
    eprintln!("{checked} programs checked, {refused} refused by lowering, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {cases} failed; the first:\n{}", failures.len(), failures[0]);
    assert!(checked * 2 >= cases as usize, "only {checked} of {cases} programs were checked");
}

/// `max` and `min` give the gradient to the elements equal to the extremum, split evenly
/// between ties (as JAX and PyTorch's `amax` do).
#[test]
fn ties_share_the_gradient_of_max_and_min() {
    let text = r#"from tessera import *

@autodiff
def extremes(x: Tensor[2, 4, f64]) -> Tensor[f64]:
    return sum(max(x, axis=-1) * 3.0) + sum(min(x, axis=(0, 1)))

@jit
def g(x: Tensor[2, 4, f64]):
    return grad(extremes)(x)
"#;
    let db = Database::default();
    let file = SourceFile::new(&db, "ties.tsr".into(), text.to_string(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "g").unwrap().key;
    let ir = tessera_passes::graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{}", e.message));
    // Row 0: the maximum 3 twice; row 1: 5 once. The minimum -1 three times overall.
    let x = [1.0, 3.0, 3.0, -1.0, 5.0, -1.0, 2.0, -1.0];
    let args = [Arg::Tensor(HostTensor::from_f64(DType::F64, &[2, 4], &x))];
    let out = run_graph_f64_with_dims(&ir, &args, &BTreeMap::new(), 0).unwrap();
    let third = 1.0 / 3.0;
    assert_eq!(values(&out[0]), [0.0, 1.5, 1.5, third, 3.0, third, 0.0, third]);
}

/// `flash_attention`'s backward (the plain attention backward, `docs/language.md`,
/// "Autodiff"): with and without the causal mask, queries and keys of different lengths
/// (the mask bottom-right aligned), a given `scale` and the default `1/√D`.
#[test]
fn attention_gradients_match_finite_differences() {
    let text = r#"from tessera import *

@jit
@autodiff
def loss(q: Tensor["B", "H", "S", "E", f64], k: Tensor["B", "H", "T", "E", f64], v: Tensor["B", "H", "T", "E", f64], w: Tensor["B", "H", "S", "E", f64]) -> Tensor[f64]:
    a = flash_attention(q, k, v) * w
    c = flash_attention(q, k, v * v, causal=True, scale=0.7)
    return sum(a) + mean(c * c) + sum(flash_attention(k, k, v, causal=True))

@jit
def gradients(q: Tensor["B", "H", "S", "E", f64], k: Tensor["B", "H", "T", "E", f64], v: Tensor["B", "H", "T", "E", f64], w: Tensor["B", "H", "S", "E", f64]):
    return grad(loss)(q, k, v, w)
"#;
    let (b, h, s, t, e) = (2, 2, 3, 5, 4);
    for seed in 0..20 {
        let mut d = Rng::new(seed);
        let shapes: [&[usize]; 4] = [&[b, h, s, e], &[b, h, t, e], &[b, h, t, e], &[b, h, s, e]];
        let dims = [("B", b), ("H", h), ("S", s), ("T", t), ("E", e)];
        match check_gradients(text, &shapes, &dims, &mut d, seed) {
            Ok(Outcome::Checked) => {}
            Ok(Outcome::Refused) => panic!("grad through flash_attention was refused"),
            Err(why) => panic!("seed {seed}: {why}"),
        }
    }
}
