//! The f64 reference against the code under test: the verdicts it gives where the
//! same-schedule check cannot see the problem.

use std::sync::Arc;

use tessera_passes::ir::{Func, OpKind};
use tessera_passes::Target;

use crate::launch::tests::{corpus, plan_of};
use crate::launch::{execute, Backend, CheckMode, Interpreter, RunOptions, Verdict};

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
    let text = fixture("flash_attention_seed.tsr").replace(
        "@ts.kernel.schedule(",
        "@ts.verify.numerics(allow_nonfinite=True)\n@ts.kernel.schedule(",
    );
    let plan = plan_of(&text, "flash_attention_seed", &[("BH", 1), ("S", 128), ("D", 64)], Target::Cpu, &[]);
    assert!(plan.allow_nonfinite);
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
