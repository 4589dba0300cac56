//! The f64 reference against the code under test: the verdicts it gives where the
//! same-schedule check cannot see the problem.

use std::sync::Arc;

use tessera_frontend::check::DType;
use tessera_passes::ir::{Func, OpKind};
use tessera_passes::Target;

use crate::launch::tests::{corpus, plan_of};
use crate::launch::{execute, Backend, CheckMode, Interpreter, RunOptions, Verdict};
use crate::tensor::{Arg, HostTensor};

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The backends a test can run here: the interpreter, and the CPU backend when built.
fn backends() -> Vec<Arc<dyn Backend>> {
    let mut out: Vec<Arc<dyn Backend>> = vec![Arc::new(Interpreter)];
    if let Ok(opened) = crate::launch::open(crate::launch::DeviceRequest::Only(crate::launch::Device::Cpu)) {
        out.push(opened.backend);
    }
    out
}

fn options(check: CheckMode) -> RunOptions {
    RunOptions { warmup: 0, repeat: 1, budget: None, check }
}

/// The seeds' flash attention masks every key block, and a block wholly above the
/// diagonal gives its rows exp(-inf - -inf) = NaN. Every backend writes those NaNs, and
/// the same-schedule interpreter does too; the run is "non-finite", never "correct".
#[test]
fn nan_attention_is_non_finite_not_correct() {
    let text = fixture("flash_attention_seed.tsr");
    let plan = plan_of(&text, "flash_attention_seed", &[("BH", 2), ("S", 128), ("D", 64)], Target::Cpu, &[]);
    for backend in backends() {
        let out = execute(&plan, backend.as_ref(), &options(CheckMode::Lowering)).unwrap();
        assert_eq!(out.check.verdict(), Verdict::NonFinite, "{}", backend.description());
        assert_eq!(out.check.passed(), Some(false));
        let o = &out.check.outputs[0];
        // Rows 0..63 of each head: the second key block lies above their diagonal.
        assert_eq!(o.comparison.expected_nonfinite, 2 * 64 * 64);
        assert_eq!(o.comparison.actual_nonfinite, 2 * 64 * 64);
        assert_eq!(o.comparison.mismatches, 0);
        assert_eq!(out.nonfinite[0].nan, 2 * 64 * 64);
        assert_eq!(out.nonfinite[0].first.as_ref().unwrap().0, vec![0, 0, 0]);
        // The same-schedule check sees NaN on both sides too, and says so.
        assert_eq!(out.check.lowering.as_ref().unwrap().verdict(), Verdict::NonFinite);
    }
}

/// A kernel may declare that non-finite outputs are expected.
#[test]
fn allow_nonfinite_accepts_matching_nans() {
    let text = fixture("flash_attention_seed.tsr")
        .replace("@ts.kernel.schedule(", "@ts.verify.numerics(allow_nonfinite=True)\n@ts.kernel.schedule(");
    let plan = plan_of(&text, "flash_attention_seed", &[("BH", 1), ("S", 128), ("D", 64)], Target::Cpu, &[]);
    assert!(plan.allows_nonfinite());
    let out = execute(&plan, &Interpreter, &options(CheckMode::Auto)).unwrap();
    assert_eq!(out.check.verdict(), Verdict::Correct);
    assert_eq!(out.nonfinite[0].nan, 64 * 64);
}

/// A lowering bug: every sequential loop of the Tile IR starts one step late (it skips
/// the first K block of a GEMM). Test-only, applied to the lowered Tile IR that both the
/// device and the same-schedule check run.
fn skip_first_iteration(func: &Func) -> Func {
    let mut f = func.clone();
    for id in f.walk() {
        let op = f.op_mut(id);
        if op.kind == OpKind::For && op.str_attr("kind") == Some("sequential") {
            op.operands[0] = op.operands[2];
        }
    }
    f
}

#[test]
fn a_lowering_bug_both_sides_share_is_caught_by_the_f64_reference_only() {
    let mut plan = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 64), ("N", 64), ("K", 96)], Target::Cpu, &[]);
    let broken = Arc::new(skip_first_iteration(&plan.tile));
    assert_ne!(*broken, *plan.tile, "the mutation changes the Tile IR");
    plan.tile = broken.clone();
    plan.reference = broken;
    for backend in backends() {
        let out = execute(&plan, backend.as_ref(), &options(CheckMode::Lowering)).unwrap();
        let lowering = out.check.lowering.as_ref().unwrap();
        assert_eq!(lowering.verdict(), Verdict::Correct, "the same-schedule check shares the bug");
        assert_eq!(out.check.verdict(), Verdict::Wrong, "{}", backend.description());
        let c = &out.check.outputs[0].comparison;
        assert!(c.mismatches > 64 * 64 / 2, "{c}");
    }
    // Without the mutation both agree.
    let plan = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 64), ("N", 64), ("K", 96)], Target::Cpu, &[]);
    let out = execute(&plan, &Interpreter, &options(CheckMode::Lowering)).unwrap();
    assert_eq!(out.check.verdict(), Verdict::Correct);
}

/// Every valid corpus kernel runs on the f64 reference and matches the interpreter's
/// run of its CPU Tile IR (the reference does not reject correct code).
#[test]
fn corpus_kernels_match_the_f64_reference() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, i64)]);
    let cases: &[Case] = &[
        ("gemm.tsr", "gemm", &[("M", 100), ("N", 76), ("K", 90)]),
        ("fp8_gemm.tsr", "fp8_gemm", &[("M", 130), ("N", 64), ("K", 64)]),
        ("linear_gelu.tsr", "linear_gelu", &[("M", 64), ("N", 200), ("K", 40)]),
        ("flash_attention.tsr", "flash_attention", &[("BH", 2), ("S", 100), ("D", 64)]),
        ("softmax.tsr", "softmax", &[("R", 5), ("C", 700)]),
        ("layernorm.tsr", "layernorm", &[("R", 5), ("C", 300)]),
        ("saxpy.tsr", "saxpy", &[("n", 3000)]),
        ("vector_add.tsr", "vector_add", &[("N", 5000)]),
        ("schedules.tsr", "small_matmul", &[("M", 70), ("N", 64), ("K", 33)]),
    ];
    for (file, kernel, dims) in cases {
        for target in [Target::Cpu, Target::Sm90] {
            let plan = plan_of(&corpus(file), kernel, dims, target, &[]);
            let out = execute(&plan, &Interpreter, &options(CheckMode::Lowering)).unwrap();
            assert_eq!(out.check.verdict(), Verdict::Correct, "{kernel} {target}: {:?}", out.check);
            assert!(out.check.outputs.iter().all(|o| o.compared > 0), "{kernel}");
        }
    }
}

/// `@accum(f16)` against `@accum(f32)` on a K = 4096 reduction: the results differ, and
/// each matches the f64 reference within its own accumulator's tolerance.
#[test]
fn each_accumulator_matches_the_reference_and_they_differ() {
    let source = |acc: &str| {
        format!(
            "from tessera import *\n\n@kernel.autotune(space=dict(BM=[16], BN=[16], BK=[4096]))\ndef gemm(A: Tensor[\"M\", \"K\", f16 @accum({acc})], B: Tensor[\"K\", \"N\", f16 @accum({acc})], C: Tensor[\"M\", \"N\", f32]):\n    ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        for n0 in tile.parallel(0, N, ctx.BN):\n            c = tile.zeros((ctx.BM, ctx.BN), {acc})\n            for k0 in tile.range(0, K, ctx.BK):\n                c = tile.mma(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]), accumulator=c)\n            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(c, f32)\n"
        )
    };
    let dims = [("M", 16), ("N", 16), ("K", 4096)];
    let mut results = Vec::new();
    for acc in ["f16", "f32"] {
        let plan = plan_of(&source(acc), "gemm", &dims, Target::Cpu, &[]);
        assert_eq!(crate::launch::narrowest_accumulator(&plan.graph), (acc == "f16").then_some(DType::F16));
        for backend in backends() {
            let out = execute(&plan, backend.as_ref(), &options(CheckMode::Auto)).unwrap();
            assert_eq!(out.check.verdict(), Verdict::Correct, "{acc} on {}: {:?}", backend.description(), out.check);
            let Arg::Tensor(c) = &out.outputs[2] else { panic!() };
            results.push((acc, backend.description(), c.to_f64(), out.check.outputs[0].comparison.max_abs));
        }
    }
    let (f16, f32) = (&results[0], results.last().unwrap());
    let differ = f16.2.iter().zip(&f32.2).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let rms = (f32.2.iter().map(|v| v * v).sum::<f64>() / f32.2.len() as f64).sqrt();
    assert!(differ > 1e-3 * rms, "f16 and f32 accumulation agree to {differ} (rms {rms})");
    assert!(f16.3 > 100.0 * f32.3, "f16 accumulation error {} vs f32 {}", f16.3, f32.3);
}

/// `@saturate` clamps ±1000 to ±448 in e4m3 on every backend and in the reference; the
/// same store without it is NaN on both sides, which is the verdict "non-finite".
#[test]
fn saturate_and_overflow_in_the_verdict() {
    let text = "from tessera import *\n\n@kernel.autotune(space=dict(BLOCK=[64]))\ndef sat(X: Tensor[\"N\", f32], S: Tensor[\"N\", fp8_e4m3 @saturate], P: Tensor[\"N\", fp8_e4m3]):\n    ctx = tile.context()\n    for i0 in tile.parallel(0, N, ctx.BLOCK):\n        x = tile.load(X[i0:i0 + ctx.BLOCK])\n        S[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e4m3)\n        P[i0:i0 + ctx.BLOCK] = tile.cast(x, fp8_e4m3)\n";
    let mut plan = plan_of(text, "sat", &[("N", 4)], Target::Cpu, &[]);
    plan.inputs[0] = Arg::Tensor(HostTensor::from_f64(DType::F32, &[4], &[1000.0, -1000.0, 1.5, -3.0]));
    for backend in backends() {
        let out = execute(&plan, backend.as_ref(), &options(CheckMode::Auto)).unwrap();
        let Arg::Tensor(s) = &out.outputs[1] else { panic!() };
        assert_eq!(s.to_f64(), vec![448.0, -448.0, 1.5, -3.0], "{}", backend.description());
        let Arg::Tensor(p) = &out.outputs[2] else { panic!() };
        assert!(p.get(0).is_nan() && p.get(1).is_nan() && p.get(2) == 1.5, "{:?}", p.to_f64());
        assert_eq!(out.check.verdict(), Verdict::NonFinite, "{}", backend.description());
        let by_name = |n: &str| out.check.outputs.iter().find(|o| o.name == n).unwrap();
        assert!(by_name("S").comparison.passed, "{:?}", by_name("S"));
        assert_eq!(by_name("P").comparison.expected_nonfinite, 2);
    }
}

/// `@stochastic_round` in the reference uses the program's own random numbers, so a
/// stochastic store matches it; it differs from round-to-nearest on some elements.
#[test]
fn stochastic_rounding_matches_the_reference() {
    let text = "from tessera import *\n\n@kernel.autotune(space=dict(BLOCK=[1024]))\ndef sr(X: Tensor[\"N\", f32], Z: Tensor[\"N\", bf16 @stochastic_round], R: Tensor[\"N\", bf16]):\n    ctx = tile.context()\n    for i0 in tile.parallel(0, N, ctx.BLOCK):\n        x = tile.load(X[i0:i0 + ctx.BLOCK])\n        Z[i0:i0 + ctx.BLOCK] = tile.cast(x, bf16)\n        R[i0:i0 + ctx.BLOCK] = tile.cast(x, bf16)\n";
    let plan = plan_of(text, "sr", &[("N", 4096)], Target::Cpu, &[]);
    for backend in backends() {
        let out = execute(&plan, backend.as_ref(), &options(CheckMode::Auto)).unwrap();
        assert_eq!(out.check.verdict(), Verdict::Correct, "{}: {:?}", backend.description(), out.check);
        let (Arg::Tensor(z), Arg::Tensor(r)) = (&out.outputs[1], &out.outputs[2]) else { panic!() };
        let differ = (0..4096).filter(|&i| z.get(i) != r.get(i)).count();
        assert!(differ > 100, "stochastic and nearest rounding differ in {differ} of 4096");
    }
}
