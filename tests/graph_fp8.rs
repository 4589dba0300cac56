//! fp8 matmuls in graph functions (`docs/language.md`, "Graph functions"): both OCP
//! formats through the stdlib matmul and batched matmul, accumulating in f32 and rounded
//! to the fp8 result, plain and with a fused epilogue. Each runs through the real
//! `tessera run --save` on the interpreter and, where it is built, the CPU backend, and a
//! NumPy oracle recomputes the result in float64 and rounds it to the format itself
//! (NumPy has no fp8 type).

mod graph_oracles;

use graph_oracles::*;

const PROGRAM: &str = r#"from tessera import *

@jit
def mm_e4m3(a: Tensor["M", "K", fp8_e4m3 @accum(f32)], b: Tensor["K", "N", fp8_e4m3 @accum(f32)]):
    return a @ b

@jit
def mm_e5m2_relu(a: Tensor["M", "K", fp8_e5m2 @accum(f32)], b: Tensor["K", "N", fp8_e5m2 @accum(f32)]):
    return relu(matmul(a, b))

@jit
def sat_mul(a: Tensor["M", "N", fp8_e4m3 @saturate], b: Tensor["M", "N", fp8_e4m3 @saturate]):
    return a * b * 128.0

@jit
def sat_mm(a: Tensor["M", "K", fp8_e4m3 @accum(f32) @saturate], b: Tensor["K", "N", fp8_e4m3 @accum(f32) @saturate]):
    return a @ (b * 16.0)

@jit
def bmm_e4m3(a: Tensor["B", "M", "K", fp8_e4m3 @accum(f32)], b: Tensor["B", "K", "N", fp8_e4m3 @accum(f32)]):
    return a @ b
"#;

/// Round-to-nearest-even into an OCP fp8 format: `mbits` mantissa bits, `emin` the
/// exponent of the smallest normal, `largest` the largest finite value, and what a value
/// beyond it becomes (NaN for e4m3, which has no infinity; Inf for e5m2).
const PRELUDE: &str = r#"
import sys, numpy as np
d = sys.argv[1]
def fp8(x, fmt, saturate=False):
    mbits, emin, largest, over = {'e4m3': (3, -6, 448.0, np.nan), 'e5m2': (2, -14, 57344.0, np.inf)}[fmt]
    over = largest if saturate else over
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    _, e = np.frexp(a)
    exponent = np.maximum(e - 1, emin)
    quantum = np.ldexp(1.0, exponent - mbits)
    r = np.round(a / quantum) * quantum
    r = np.where(r > largest, over, r)
    return np.copysign(r, x)
def load(name):
    return np.load(d + '/' + name).astype(np.float64)
def check(want):
    got = load('return.out.npy')
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(np.isfinite(want)), 'the inputs overflow the format: pick other dims'
    # The f32 sum and the float64 one may round to neighbouring fp8 values near a tie
    # (one step: at most 12.5% for e4m3, 25% for e5m2); almost every element is equal.
    near = np.abs(got - want) <= 0.25 * np.abs(want)
    assert near.all(), (np.argwhere(~near)[:3], np.max(np.abs(got - want)))
    assert np.mean(got == want) > 0.99, np.mean(got == want)
"#;

const CASES: &[Case] = &[
    Case { function: "mm_e4m3", dims: "M=40,K=96,N=48", oracle: "check(fp8(load('a.npy') @ load('b.npy'), 'e4m3'))" },
    Case {
        function: "mm_e5m2_relu",
        dims: "M=33,K=64,N=70",
        oracle: "check(np.maximum(fp8(load('a.npy') @ load('b.npy'), 'e5m2'), 0.0))",
    },
    // `@saturate`: every fp8 result clamps to ±448 instead of becoming NaN.
    Case {
        function: "sat_mul",
        dims: "M=24,N=40",
        oracle: "s = lambda x: fp8(x, 'e4m3', True)\n\
                 want = s(s(load('a.npy') * load('b.npy')) * 128.0)\n\
                 assert np.mean(np.abs(want) == 448.0) > 0.01\n\
                 check(want)",
    },
    Case {
        function: "sat_mm",
        dims: "M=16,K=256,N=16",
        oracle: "s = lambda x: fp8(x, 'e4m3', True)\n\
                 want = s(load('a.npy') @ s(load('b.npy') * 16.0))\n\
                 assert np.mean(np.abs(want) == 448.0) > 0.01\n\
                 check(want)",
    },
    Case {
        function: "bmm_e4m3",
        dims: "B=3,M=20,K=64,N=24",
        oracle: "check(fp8(np.matmul(load('a.npy'), load('b.npy')), 'e4m3'))",
    },
];

#[test]
fn fp8_matmuls_match_numpy_on_every_device() {
    run_every_case("fp8.tsr", PROGRAM, PRELUDE, CASES);
}

/// The oracle is not vacuous: it refuses a result one element of which is off.
#[test]
fn the_fp8_oracle_refuses_a_wrong_result() {
    if !numpy() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "fp8.tsr", PROGRAM);
    let out = dir.path().join("wrong");
    assert_oracle_refuses(
        &file,
        PRELUDE,
        &CASES[0],
        &out,
        "return",
        "",
        "np.where(np.arange(y.size).reshape(y.shape) == 7, y + 1000.0, y)",
    );
}

/// Graph IR and the plan show an fp8 matmul as the stdlib kernel for its dtype.
#[test]
fn the_plan_names_the_fp8_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let file = program(dir.path(), "fp8.tsr", PROGRAM);
    let o = tessera()
        .args(["lower", file.to_str().unwrap(), "--kernel", "mm_e5m2_relu", "--stage", "sched"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("stdlib matmul (fp8_e5m2) + epilogue: relu"), "{}", text(&o));
}
