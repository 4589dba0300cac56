//! Numerics policies change the numbers (docs/ir.md, "Numerics policies"), the same on
//! the Tile IR interpreter and the CPU backend (LLVM JIT): `@saturate` clamps where the
//! default conversion overflows to NaN/Inf or wraps, `@accum(f16)` sums in f16 where
//! `@accum(f32)` sums in f32, `@stochastic_round` is unbiased and reproducible from the
//! run's seed, and `@loss_scale(k)` keeps bf16 gradients from underflowing.

use std::collections::BTreeMap;

#[cfg(feature = "llvm")]
use tessera_backends::interp::graph::KernelExecutor;
use tessera_backends::interp::graph::{run_graph, run_plan, InterpExecutor};
use tessera_backends::interp::run_kernel;
use tessera_backends::tensor::{round_stochastic, round_to, round_to_saturating, Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::abi::KernelAbi;
use tessera_passes::ir::Func;
use tessera_passes::{default_config, tile_ir, Target};

fn key<'db>(db: &'db Database, file: SourceFile, name: &str) -> FnKey<'db> {
    item_index(db, file).functions.iter().find(|f| f.key.name(db) == name).expect("the function").key
}

/// CPU Tile IR of kernel `name` of `src` in its default configuration.
fn compile(src: &str, name: &str) -> Func {
    let db = Database::default();
    let file = SourceFile::new(&db, "policies.tsr".into(), src.to_string(), None);
    let k = key(&db, file, name);
    let (config, _) = default_config(&db, k, &BTreeMap::new()).unwrap_or_else(|e| panic!("{}", e.message));
    (*tile_ir(&db, k, config, Target::Cpu).clone().unwrap_or_else(|e| panic!("{name}: {}", e.message))).clone()
}

fn tensor(a: &Arg) -> Vec<f64> {
    match a {
        Arg::Tensor(t) => t.to_f64(),
        other => panic!("not a tensor: {other:?}"),
    }
}

/// Runs `func` on the interpreter and, with the `llvm` feature, on the CPU backend;
/// the arguments after each run.
fn both(func: &Func, args: &[Arg]) -> Vec<Vec<Arg>> {
    let mut interp = args.to_vec();
    run_kernel(func, &mut interp).unwrap_or_else(|e| panic!("interpreter: {e}"));
    #[allow(unused_mut)]
    let mut out = vec![interp];
    #[cfg(feature = "llvm")]
    {
        let mut cpu = args.to_vec();
        let k = tessera_backends::cpu::CpuKernel::new(func).unwrap_or_else(|e| panic!("{e}"));
        k.launch(&mut cpu, 2).unwrap_or_else(|e| panic!("cpu: {e}"));
        out.push(cpu);
    }
    out
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

fn assert_same(what: &str, got: &[f64], want: &[f64], inputs: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(same(g, w), "{what}: input {:e}: got {g:e}, expected {w:e}", inputs[i]);
    }
}

// ----- @saturate ---------------------------------------------------------------------------

const SATURATE: &str = r#"from tessera import *

@kernel.autotune(space=dict(BLOCK=[64]))
def sat(X: Tensor["N", f32], S: Tensor["N", fp8_e4m3 @saturate], P: Tensor["N", fp8_e4m3],
        S5: Tensor["N", fp8_e5m2 @saturate], P5: Tensor["N", fp8_e5m2],
        I: Tensor["N", int8 @saturate], W: Tensor["N", int8]):
    ctx = tile.context()
    for i0 in tile.parallel(0, N, ctx.BLOCK):
        x = tile.load(X[i0:i0 + ctx.BLOCK])
        S[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e4m3)
        P[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e4m3)
        S5[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e5m2)
        P5[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e5m2)
        I[i0:i0 + ctx.BLOCK] = tile.cast(x, int8)
        W[i0:i0 + ctx.BLOCK] = tile.cast(x, int8)
"#;

fn saturate_args(xs: &[f64]) -> Vec<Arg> {
    let n = xs.len();
    let mut args = vec![Arg::Tensor(HostTensor::from_f64(DType::F32, &[n], xs))];
    for d in [DType::Fp8E4m3, DType::Fp8E4m3, DType::Fp8E5m2, DType::Fp8E5m2, DType::Int8, DType::Int8] {
        args.push(Arg::Tensor(HostTensor::zeros(d, &[n])));
    }
    args
}

/// The acceptance case: ±1000 stored to an e4m3 `@saturate` tensor is ±448, to a plain
/// e4m3 tensor NaN (e4m3 has no Inf); int8 clamps or wraps.
#[test]
fn saturate_clamps_where_the_default_overflows() {
    let func = compile(SATURATE, "sat");
    let xs = [1000.0, -1000.0, 1003.5, -998.25, 0.3, f64::NAN, 200.0, -129.0];
    for (backend, out) in ["interpreter", "cpu"].iter().zip(both(&func, &saturate_args(&xs))) {
        let s = tensor(&out[1]);
        assert_eq!(&s[..4], &[448.0, -448.0, 448.0, -448.0], "{backend}");
        let p = tensor(&out[2]);
        assert!(p[..4].iter().all(|v| v.is_nan()), "{backend}: {p:?}");
        assert_eq!(p[4], 0.3125);
        assert!(s[5].is_nan() && p[5].is_nan());
        let s5 = tensor(&out[3]);
        assert_eq!(&s5[..2], &[1024.0, -1024.0], "{backend}: in range of e5m2");
        assert_eq!(tensor(&out[5]), vec![127.0, -128.0, 127.0, -128.0, 0.0, 0.0, 127.0, -128.0], "{backend}");
        assert_eq!(tensor(&out[6]), vec![-24.0, 24.0, -21.0, 26.0, 0.0, 0.0, -56.0, 127.0], "{backend}");
    }
}

/// Every conversion of the acceptance kernel, bit for bit against the host rules, over
/// values around every overflow threshold.
#[test]
fn conversions_follow_the_host_rules_bit_for_bit() {
    let mut xs = Vec::new();
    for base in [448.0, 464.0, 480.0, 57344.0, 61440.0, 65536.0, 127.0, 128.0, 255.0, 256.0, 3e9] {
        for d in [-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0] {
            xs.push(base + d);
            xs.push(-(base + d));
        }
    }
    xs.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-3, -7.5, 1e30, -1e30]);
    let xs: Vec<f64> = xs.into_iter().map(|x| x as f32 as f64).collect();
    let func = compile(SATURATE, "sat");
    let rules: [(usize, DType, bool); 6] = [
        (1, DType::Fp8E4m3, true),
        (2, DType::Fp8E4m3, false),
        (3, DType::Fp8E5m2, true),
        (4, DType::Fp8E5m2, false),
        (5, DType::Int8, true),
        (6, DType::Int8, false),
    ];
    for (backend, out) in ["interpreter", "cpu"].iter().zip(both(&func, &saturate_args(&xs))) {
        for (i, dtype, saturate) in rules {
            let want: Vec<f64> =
                xs.iter().map(|&x| if saturate { round_to_saturating(dtype, x) } else { round_to(dtype, x) }).collect();
            assert_same(&format!("{backend} {dtype} saturate={saturate}"), &tensor(&out[i]), &want, &xs);
        }
    }
}

// ----- @accum ------------------------------------------------------------------------------

/// A K = 4096 row sum and a K = 4096 dot of f16 data, accumulated in `acc`.
fn accum_source(acc: &str) -> String {
    format!(
        r#"from tessera import *

@kernel.autotune(space=dict(BM=[4], BK=[4096]))
def rows(X: Tensor["M", "K", f16 @accum({acc})], Y: Tensor["M", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        s = tile.zeros((ctx.BM,), f32)
        for k0 in tile.range(0, K, ctx.BK):
            x = tile.load(X[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
            s = s + tile.cast(tile.row_sum(x), f32)
        Y[m0:m0 + ctx.BM] = s


@kernel.autotune(space=dict(BM=[16], BN=[16], BK=[4096]))
def gemm(A: Tensor["M", "K", f16 @accum({acc})], B: Tensor["K", "N", f16 @accum({acc})], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            c = tile.zeros((ctx.BM, ctx.BN), {acc})
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                c = tile.mma(a, b, accumulator=c)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(c, f32)
"#
    )
}

/// Uniform values in [0, 1) rounded to f16: their sums grow past where f16 can add them.
fn uniform_f16(n: usize, stream: u64) -> Vec<f64> {
    let mut r = tessera_backends::interp::inputs::Rng::stream(7, stream);
    (0..n).map(|_| round_to(DType::F16, r.uniform())).collect()
}

/// `f16 @accum(f16)` and `f16 @accum(f32)` on a long reduction give different results,
/// each the same on the interpreter and the CPU backend.
#[test]
fn accumulating_in_f16_differs_from_f32() {
    let (m, k, n) = (4usize, 4096usize, 16usize);
    let x = uniform_f16(m * k, 1);
    let exact_rows: Vec<f64> = (0..m).map(|i| x[i * k..(i + 1) * k].iter().sum()).collect();
    let a = uniform_f16(16 * k, 2);
    let b = uniform_f16(k * n, 3);
    let exact_dot: Vec<f64> = (0..16)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum())
        .collect();
    let mut results = Vec::new();
    for acc in ["f16", "f32"] {
        let src = accum_source(acc);
        let rows = compile(&src, "rows");
        let args = vec![
            Arg::Tensor(HostTensor::from_f64(DType::F16, &[m, k], &x)),
            Arg::Tensor(HostTensor::zeros(DType::F32, &[m])),
        ];
        let outs: Vec<Vec<f64>> = both(&rows, &args).iter().map(|o| tensor(&o[1])).collect();
        for o in &outs[1..] {
            assert_eq!(o, &outs[0], "@accum({acc}) row sums: CPU and interpreter");
        }
        let gemm = compile(&src, "gemm");
        let args = vec![
            Arg::Tensor(HostTensor::from_f64(DType::F16, &[16, k], &a)),
            Arg::Tensor(HostTensor::from_f64(DType::F16, &[k, n], &b)),
            Arg::Tensor(HostTensor::zeros(DType::F32, &[16, n])),
        ];
        let dots: Vec<Vec<f64>> = both(&gemm, &args).iter().map(|o| tensor(&o[2])).collect();
        for o in &dots[1..] {
            assert_eq!(o, &dots[0], "@accum({acc}) dot: CPU and interpreter");
        }
        results.push((outs[0].clone(), dots[0].clone()));
    }
    let err = |got: &[f64], want: &[f64]| got.iter().zip(want).map(|(g, w)| (g - w).abs() / w).fold(0.0, f64::max);
    let (rows16, dot16) = &results[0];
    let (rows32, dot32) = &results[1];
    // f32 sums are exact but for the final rounding; f16 sums lose the addends' low bits
    // at every step once the sum's ulp (2 at 2048) outgrows them.
    let (r16, r32, d16, d32) =
        (err(rows16, &exact_rows), err(rows32, &exact_rows), err(dot16, &exact_dot), err(dot32, &exact_dot));
    eprintln!("relative error: rows f16 {r16:.2e}, f32 {r32:.2e}; dot f16 {d16:.2e}, f32 {d32:.2e}");
    assert!(r32 < 1e-3 && d32 < 1e-3, "f32: rows {rows32:?} vs {exact_rows:?}");
    assert!(r16 > 5e-3 && r16 > 10.0 * r32, "f16 rows {rows16:?} vs {exact_rows:?}");
    assert!(d16 > 5e-3 && d16 > 10.0 * d32, "f16 dot {:?} vs {:?}", &dot16[..4], &exact_dot[..4]);
    // Each f16 result is exactly what summing in order with an f16 rounding per step gives.
    for (i, &r) in rows16.iter().enumerate() {
        let s = x[i * k..(i + 1) * k].iter().fold(0f64, |s, &v| round_to(DType::F16, (s as f32 + v as f32) as f64));
        assert_eq!(r, s, "row {i}");
    }
}

// ----- @stochastic_round -------------------------------------------------------------------

const STOCHASTIC: &str = r#"from tessera import *

@kernel.autotune(space=dict(BLOCK=[1024]))
def sr(X: Tensor["N", f32], Z: Tensor["N", bf16 @stochastic_round], R: Tensor["N", bf16],
       E: Tensor["N", fp8_e4m3 @stochastic_round @saturate]):
    ctx = tile.context()
    for i0 in tile.parallel(0, N, ctx.BLOCK):
        x = tile.load(X[i0:i0 + ctx.BLOCK])
        Z[i0:i0 + ctx.BLOCK] = tile.cast(x, bf16)
        R[i0:i0 + ctx.BLOCK] = tile.cast(x, bf16)
        E[i0:i0 + ctx.BLOCK] = tile.cast(x * 64.0, fp8_e4m3)
"#;

/// Values just above a bf16 midpoint: `(1 + j/128 + 0.6/128) · 2^e`, where rounding to
/// nearest always rounds up (a biased error of +0.4 ulp).
fn biased_inputs(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((1.0 + (i % 128) as f64 / 128.0 + 0.6 / 128.0) * 2f64.powi((i / 128 % 8) as i32 - 4)) as f32 as f64)
        .collect()
}

fn run_stochastic(func: &Func, xs: &[f64], seed: i64) -> Vec<Vec<Arg>> {
    let abi = KernelAbi::of(func).unwrap();
    let slot = abi.seed_slot().expect("a stochastic kernel takes the run's seed");
    assert_eq!(slot, 4, "the seed is the hidden last parameter");
    let n = xs.len();
    let mut args = vec![Arg::Tensor(HostTensor::from_f64(DType::F32, &[n], xs))];
    args.push(Arg::Tensor(HostTensor::zeros(DType::BF16, &[n])));
    args.push(Arg::Tensor(HostTensor::zeros(DType::BF16, &[n])));
    args.push(Arg::Tensor(HostTensor::zeros(DType::Fp8E4m3, &[n])));
    args.push(Arg::Index(seed));
    both(func, &args)
}

/// Mean rounding error in units of the bf16 spacing at each value.
fn mean_ulp_error(got: &[f64], xs: &[f64]) -> f64 {
    let ulp = |x: f64| 2f64.powi(x.abs().log2().floor() as i32 - 7);
    got.iter().zip(xs).map(|(g, x)| (g - x) / ulp(*x)).sum::<f64>() / xs.len() as f64
}

#[test]
fn stochastic_rounding_is_unbiased_and_reproducible() {
    let func = compile(STOCHASTIC, "sr");
    let n = 1 << 16;
    let xs = biased_inputs(n);
    let a = run_stochastic(&func, &xs, 7);
    // The CPU backend draws exactly the interpreter's numbers.
    for o in &a[1..] {
        for i in 1..4 {
            assert_same("stochastic, CPU vs interpreter", &tensor(&o[i]), &tensor(&a[0][i]), &xs);
        }
    }
    let z = tensor(&a[0][1]);
    let nearest = tensor(&a[0][2]);
    let (e_sr, e_rn) = (mean_ulp_error(&z, &xs), mean_ulp_error(&nearest, &xs));
    assert!((e_rn - 0.4).abs() < 0.01, "round to nearest is biased: {e_rn}");
    // σ of one error is 0.49 ulp: the mean of 65536 is within 0.002 ulp of 0.
    assert!(e_sr.abs() < 0.01, "stochastic rounding mean error {e_sr} ulp");
    let up = z.iter().zip(&xs).filter(|(z, x)| z > x).count() as f64 / n as f64;
    assert!((up - 0.6).abs() < 0.01, "rounded up {up} of the time, expected 0.6");
    // Every result is one of the two neighbours, exactly the host rule for some u.
    for (&x, &r) in xs.iter().zip(&z) {
        assert!(
            r == round_stochastic(DType::BF16, x, 0.0, false) || r == round_stochastic(DType::BF16, x, 0.999, false)
        );
    }
    // fp8 e4m3 with both policies: unbiased too, and clamped instead of NaN.
    let e = tensor(&a[0][3]);
    assert!(e.iter().all(|v| v.is_finite() && v.abs() <= 448.0));
    // Reproducible for one seed, different for another.
    let again = run_stochastic(&func, &xs, 7);
    assert_same("same seed", &tensor(&again[0][1]), &z, &xs);
    let other = tensor(&run_stochastic(&func, &xs, 8)[0][1]);
    let differ = other.iter().zip(&z).filter(|(a, b)| a != b).count();
    assert!(differ > n / 4, "another seed changes the draws ({differ} of {n} differ)");
    assert!(mean_ulp_error(&other, &xs).abs() < 0.01);
}

// ----- @loss_scale -------------------------------------------------------------------------

/// `dw` of `sum(cast(x * w, f32)) · 2^-140`: the bf16 adjoint of `x * w` is 2^-140, which
/// bf16 (smallest subnormal 2^-133) flushes to 0 — unless the loss is scaled by 2^20.
fn loss_source(policy: &str) -> String {
    format!(
        r#"from tessera import *

@jit
@autodiff
def loss(x: Tensor["B", "D", bf16{policy}], w: Tensor["B", "D", bf16{policy}]) -> Tensor[f32]:
    return sum(cast(x * w, f32)) * 7.174648137343064e-43


@jit
def step(x: Tensor["B", "D", bf16{policy}], w: Tensor["B", "D", bf16{policy}]) -> Tensor["B", "D", bf16{policy}]:
    (dw,) = grad(loss, wrt=("w",))(x, w)
    return dw
"#
    )
}

#[cfg(feature = "llvm")]
struct CpuExecutor;

#[cfg(feature = "llvm")]
impl KernelExecutor for CpuExecutor {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        let k = tessera_backends::cpu::CpuKernel::new(tile_ir).map_err(|e| e.to_string())?;
        k.launch(args, 2).map(|_| ()).map_err(|e| e.to_string())
    }
}

#[test]
fn loss_scaling_keeps_bf16_gradients_from_underflowing() {
    let (b, d) = (2usize, 8usize);
    let x: Vec<f64> = (0..b * d).map(|i| 1024.0 * (1.0 + (i % 4) as f64)).collect();
    let w = vec![1.0; b * d];
    let args = vec![
        Arg::Tensor(HostTensor::from_f64(DType::BF16, &[b, d], &x)),
        Arg::Tensor(HostTensor::from_f64(DType::BF16, &[b, d], &w)),
    ];
    for (policy, survives) in [("", false), (" @loss_scale(1048576)", true)] {
        let src = loss_source(policy);
        let db = Database::default();
        let file = SourceFile::new(&db, "loss.tsr".into(), src.clone(), None);
        let k = key(&db, file, "step");
        let graph = tessera_passes::graph_ir(&db, k).clone().unwrap_or_else(|e| panic!("{}", e.message));
        let mut outs = vec![("graph", tensor(&run_graph(&graph, &args, 1).unwrap()[0]))];
        let mut exec = InterpExecutor::default();
        let plan = run_plan(&db, k, Target::Cpu, &args, 1, &mut exec).unwrap_or_else(|e| panic!("plan: {e}"));
        outs.push(("plan on the interpreter", tensor(&plan[0])));
        #[cfg(feature = "llvm")]
        {
            let plan = run_plan(&db, k, Target::Cpu, &args, 1, &mut CpuExecutor).unwrap_or_else(|e| panic!("{e}"));
            outs.push(("plan on the CPU backend", tensor(&plan[0])));
        }
        for (what, dw) in outs {
            // dw = x · 2^-140: bf16 subnormals from 2^-130 up.
            let want: Vec<f64> =
                x.iter().map(|&v| if survives { round_to(DType::BF16, v * 2f64.powi(-140)) } else { 0.0 }).collect();
            assert_eq!(dw, want, "{what}, `{policy}`");
            assert_eq!(dw.iter().all(|&g| g != 0.0), survives, "{what}: {dw:?}");
        }
        if survives {
            let text = tessera_passes::ir::print::print_func(&graph, &tessera_passes::ir::print::NoLocs).text;
            assert!(text.contains("loss_scale = 1048576.0"), "{text}");
        }
    }
}

// ----- @accum in graph functions -----------------------------------------------------------

fn graph_accum_source(elem: &str) -> String {
    format!(
        r#"from tessera import *

@jit
def rows(x: Tensor["R", "C", {elem}]) -> Tensor["R", {elem}]:
    return sum(x, axis=1)


@jit
def mm(a: Tensor["M", "K", {elem}], b: Tensor["K", "N", {elem}]) -> Tensor["M", "N", {elem}]:
    return a @ b
"#
    )
}

/// The launch plan of a graph function with `@accum(T)` sums in T like the Graph IR
/// interpreter, on the interpreter and on the CPU backend; T = f16 (bf16 for the matmul,
/// whose stdlib kernel takes bf16) differs from T = f32.
#[test]
fn graph_functions_accumulate_as_their_policy_says() {
    let (r, c) = (4usize, 4096usize);
    let (m, k, n) = (8usize, 1024usize, 8usize);
    let mut sums = Vec::new();
    for (row_elem, mm_elem) in [("f16 @accum(f16)", "bf16 @accum(bf16)"), ("f16 @accum(f32)", "bf16 @accum(f32)")] {
        let mut got = Vec::new();
        for (name, elem, args) in [
            ("rows", row_elem, vec![Arg::Tensor(HostTensor::from_f64(DType::F16, &[r, c], &uniform_f16(r * c, 4)))]),
            (
                "mm",
                mm_elem,
                vec![
                    Arg::Tensor(HostTensor::from_f64(DType::BF16, &[m, k], &uniform_f16(m * k, 5))),
                    Arg::Tensor(HostTensor::from_f64(DType::BF16, &[k, n], &uniform_f16(k * n, 6))),
                ],
            ),
        ] {
            let db = Database::default();
            let src = graph_accum_source(elem);
            let file = SourceFile::new(&db, "g.tsr".into(), src, None);
            let key = key(&db, file, name);
            let graph = tessera_passes::graph_ir(&db, key).clone().unwrap_or_else(|e| panic!("{}", e.message));
            let want = tensor(&run_graph(&graph, &args, 1).unwrap()[0]);
            #[allow(unused_mut)]
            let mut plans =
                vec![tensor(&run_plan(&db, key, Target::Cpu, &args, 1, &mut InterpExecutor::default()).unwrap()[0])];
            #[cfg(feature = "llvm")]
            plans.push(tensor(&run_plan(&db, key, Target::Cpu, &args, 1, &mut CpuExecutor).unwrap()[0]));
            // The kernels sum per block of columns, then the blocks: the same rounding at
            // every step in another grouping, so the results agree to the accumulator's
            // error (about √n ulp of T relative), which for f16 is far above f32's.
            let rtol = if elem.contains("accum(f32)") { 1e-3 } else { 0.03 };
            for plan in &plans {
                for (p, w) in plan.iter().zip(&want) {
                    assert!((p - w).abs() <= rtol * w.abs(), "`{name}` with {elem}: plan {p} vs graph {w}");
                }
            }
            got.push(want);
        }
        sums.push(got);
    }
    for (i, what) in ["row sums", "matmul"].iter().enumerate() {
        let differ = sums[0][i].iter().zip(&sums[1][i]).filter(|(a, b)| a != b).count();
        assert!(differ > 0, "{what}: the narrow accumulator changes nothing");
    }
}

/// Elementwise fp8 arithmetic whose type is `@saturate` clamps too (30 · 30 = 900).
#[test]
fn saturating_fp8_arithmetic() {
    let src = r#"from tessera import *

@kernel.autotune(space=dict(BLOCK=[64]))
def sq(X: Tensor["N", f32], S: Tensor["N", fp8_e4m3 @saturate], P: Tensor["N", fp8_e4m3]):
    ctx = tile.context()
    for i0 in tile.parallel(0, N, ctx.BLOCK):
        x = tile.load(X[i0:i0 + ctx.BLOCK])
        s = tile.cast(x, "fp8_e4m3 @saturate")
        p = tile.cast(x, fp8_e4m3)
        S[i0:i0 + ctx.BLOCK] = s * s + 1.0
        P[i0:i0 + ctx.BLOCK] = p * p + 1.0
"#;
    let func = compile(src, "sq");
    let xs = [30.0, -30.0, 2.0, 0.5];
    let args = vec![
        Arg::Tensor(HostTensor::from_f64(DType::F32, &[4], &xs)),
        Arg::Tensor(HostTensor::zeros(DType::Fp8E4m3, &[4])),
        Arg::Tensor(HostTensor::zeros(DType::Fp8E4m3, &[4])),
    ];
    for (backend, out) in ["interpreter", "cpu"].iter().zip(both(&func, &args)) {
        assert_eq!(tensor(&out[1]), vec![448.0, 448.0, 5.0, 1.25], "{backend}");
        let p = tensor(&out[2]);
        assert!(p[0].is_nan() && p[1].is_nan(), "{backend}: {p:?}");
        assert_eq!(&p[2..], &[5.0, 1.25]);
    }
}

/// `cast(x, "fp8_e4m3 @saturate")` in a graph function clamps in the Graph IR
/// interpreter and in the planned kernel (interpreter and CPU backend); plain `cast` to
/// e4m3 overflows to NaN.
#[test]
fn graph_function_casts_saturate() {
    let src = r#"from tessera import *

@jit
def sat(x: Tensor["N", f32]) -> Tensor["N", fp8_e4m3 @saturate]:
    return cast(x * 2.0, "fp8_e4m3 @saturate")


@jit
def plain(x: Tensor["N", f32]) -> Tensor["N", fp8_e4m3]:
    return cast(x * 2.0, fp8_e4m3)
"#;
    let xs = [500.0, -500.0, 1.0, 300.0];
    let args = vec![Arg::Tensor(HostTensor::from_f64(DType::F32, &[4], &xs))];
    let db = Database::default();
    let file = SourceFile::new(&db, "g.tsr".into(), src.to_string(), None);
    for name in ["sat", "plain"] {
        let k = key(&db, file, name);
        let graph = tessera_passes::graph_ir(&db, k).clone().unwrap_or_else(|e| panic!("{}", e.message));
        let mut outs = vec![tensor(&run_graph(&graph, &args, 1).unwrap()[0])];
        outs.push(tensor(&run_plan(&db, k, Target::Cpu, &args, 1, &mut InterpExecutor::default()).unwrap()[0]));
        #[cfg(feature = "llvm")]
        outs.push(tensor(&run_plan(&db, k, Target::Cpu, &args, 1, &mut CpuExecutor).unwrap()[0]));
        for out in outs {
            if name == "sat" {
                assert_eq!(out, vec![448.0, -448.0, 2.0, 448.0]);
            } else {
                assert!(out[0].is_nan() && out[1].is_nan() && out[3].is_nan(), "{out:?}");
                assert_eq!(out[2], 2.0);
            }
        }
    }
}
