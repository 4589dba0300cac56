//! The interpreter's op semantics on small hand-built Tile IR (docs/ir.md, one rule per
//! test), and the GPU mistakes it reports on real kernels with a step removed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessera_backends::interp::{run_kernel, run_kernel_with, Options};
use tessera_backends::tensor::{round_to, Arg, HostTensor};
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::ir::{
    Attr, Builder, Func, FuncKind, Level, Loc, OpKind, SmemType, Swizzle, TensorType, Type, ValueId, ViewType,
};
use tessera_passes::{default_config, tile_ir, Target};

fn kernel(target: &str, grid: [i64; 3]) -> Func {
    let mut f = Func::new("k", FuncKind::Kernel, Level::Tile, Loc::default());
    f.set_attr("target", Attr::Str(target.into()));
    f.set_attr("grid", Attr::Dims(grid.iter().map(|&g| Dim::constant(g)).collect()));
    f
}

fn tensor(f: &mut Func, name: &str, dims: &[&str], dtype: DType) -> ValueId {
    let dims = dims.iter().map(|d| d.parse::<i64>().map(Dim::constant).unwrap_or_else(|_| Dim::sym(d))).collect();
    let v = f.new_value(Type::Tensor(TensorType { dims, dtype, policies: vec![] }), Some(name));
    f.params.push(v);
    v
}

fn tile(dims: &[i64], dtype: DType) -> Type {
    Type::tile(dims.iter().map(|&d| Dim::constant(d)).collect(), dtype)
}

fn view(dims: &[i64], dtype: DType) -> Type {
    Type::View(ViewType { dims: dims.iter().map(|&d| Dim::constant(d)).collect(), dtype })
}

fn sizes(s: &[i64]) -> Vec<(&'static str, Attr)> {
    vec![("sizes", Attr::Dims(s.iter().map(|&d| Dim::constant(d)).collect()))]
}

fn l() -> Loc {
    Loc::default()
}

fn index(b: &mut Builder, v: i64) -> ValueId {
    b.op1(OpKind::Constant, vec![], Type::Index, vec![("value", Attr::Int(v))], &l())
}

fn t(dtype: DType, dims: &[usize], values: &[f64]) -> Arg {
    Arg::Tensor(HostTensor::from_f64(dtype, dims, values))
}

fn out(args: &[Arg], i: usize) -> Vec<f64> {
    match &args[i] {
        Arg::Tensor(t) => t.to_f64(),
        _ => panic!("not a tensor"),
    }
}

#[test]
fn views_past_the_edges_load_other_and_clip_stores() {
    let mut f = kernel("cpu", [1, 1, 1]);
    let x = tensor(&mut f, "X", &["R", "C"], DType::F32);
    let y = tensor(&mut f, "Y", &["R", "C"], DType::F32);
    let z = tensor(&mut f, "Z", &["4"], DType::F32);
    let mut b = Builder::new(&mut f);
    let (m2, c4, c3, m1, c7) =
        (index(&mut b, -2), index(&mut b, 4), index(&mut b, 3), index(&mut b, -1), index(&mut b, 7));
    let vx = b.op1(OpKind::View, vec![x, m2, c4], view(&[4, 4], DType::F32), sizes(&[4, 4]), &l());
    let loaded = b.op1(OpKind::Load, vec![vx], tile(&[4, 4], DType::F32), vec![("other", Attr::float(-1.0))], &l());
    let vy = b.op1(OpKind::View, vec![y, c3, m1], view(&[4, 4], DType::F32), sizes(&[4, 4]), &l());
    b.op(OpKind::Store, vec![vy, loaded], vec![], vec![], &l());
    // A squeezed row past the end of X: every element is `other`.
    let mut attrs = sizes(&[1, 4]);
    attrs.push(("squeeze", Attr::Ints(vec![0])));
    let vrow = b.op1(OpKind::View, vec![x, c7, m1], view(&[4], DType::F32), attrs, &l());
    let row = b.op1(OpKind::Load, vec![vrow], tile(&[4], DType::F32), vec![("other", Attr::float(5.0))], &l());
    let c0 = index(&mut b, 0);
    let vz = b.op1(OpKind::View, vec![z, c0], view(&[4], DType::F32), sizes(&[4]), &l());
    b.op(OpKind::Store, vec![vz, row], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();

    let (rows, cols) = (5usize, 7usize);
    let xs: Vec<f64> = (0..rows * cols).map(|i| i as f64).collect();
    let mut args = vec![
        t(DType::F32, &[rows, cols], &xs),
        t(DType::F32, &[rows, cols], &vec![0.0; 35]),
        t(DType::F32, &[4], &[9.0; 4]),
    ];
    run_kernel(&f, &mut args).unwrap();
    // The window rows -2..2, cols 4..8 of X; outside X it is -1.
    let at = |r: i64, c: i64| if (0..5).contains(&r) && (0..7).contains(&c) { (r * 7 + c) as f64 } else { -1.0 };
    let mut want = vec![0.0; 35];
    for i in 0..4i64 {
        for j in 0..4i64 {
            let (r, c) = (3 + i, -1 + j);
            if (0..5).contains(&r) && (0..7).contains(&c) {
                want[(r * 7 + c) as usize] = at(-2 + i, 4 + j);
            }
        }
    }
    assert_eq!(out(&args, 1), want);
    assert_eq!(out(&args, 2), vec![5.0; 4]);
}

#[test]
fn masked_loads_and_stores() {
    let mut f = kernel("sm_90", [1, 1, 1]);
    let x = tensor(&mut f, "x", &["N"], DType::BF16);
    let y = tensor(&mut f, "y", &["N"], DType::BF16);
    let mut b = Builder::new(&mut f);
    let c0 = index(&mut b, 0);
    let vx = b.op1(OpKind::View, vec![x, c0], view(&[8], DType::BF16), sizes(&[8]), &l());
    let ar = b.op1(OpKind::Arange, vec![], tile(&[8], DType::I32), vec![], &l());
    let three = b.op1(OpKind::Full, vec![], tile(&[8], DType::I32), vec![("value", Attr::float(3.0))], &l());
    let odd_mask = b.op1(OpKind::Rem, vec![ar, three], tile(&[8], DType::I32), vec![], &l());
    let zero = b.op1(OpKind::Full, vec![], tile(&[8], DType::I32), vec![("value", Attr::float(0.0))], &l());
    let mask =
        b.op1(OpKind::Cmp, vec![odd_mask, zero], tile(&[8], DType::Bool), vec![("pred", Attr::Str("ne".into()))], &l());
    let v = b.op1(
        OpKind::Load,
        vec![vx, mask],
        tile(&[8], DType::BF16),
        vec![("other", Attr::float(f64::NEG_INFINITY))],
        &l(),
    );
    let vy = b.op1(OpKind::View, vec![y, c0], view(&[8], DType::BF16), sizes(&[8]), &l());
    let not = b.op1(OpKind::Not, vec![mask], tile(&[8], DType::Bool), vec![], &l());
    b.op(OpKind::Store, vec![vy, v, not], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let mut args = vec![t(DType::BF16, &[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), t(DType::BF16, &[6], &[7.0; 6])];
    run_kernel(&f, &mut args).unwrap();
    // Elements 0 and 3 are masked out of the load (-inf) and are the only ones stored.
    assert_eq!(out(&args, 1), vec![f64::NEG_INFINITY, 7.0, 7.0, f64::NEG_INFINITY, 7.0, 7.0]);
}

#[test]
fn gathers_and_scatters_respect_bounds_and_masks() {
    let mut f = kernel("sm_80", [1, 1, 1]);
    let x = tensor(&mut f, "x", &["N"], DType::F32);
    let y = tensor(&mut f, "y", &["N"], DType::F32);
    let g = tensor(&mut f, "g", &["4"], DType::F32);
    let mut b = Builder::new(&mut f);
    // idx = 3 * arange - 1 = [-1, 2, 5, 8]; mask = idx != 5.
    let ar = b.op1(OpKind::Arange, vec![], tile(&[4], DType::I32), vec![], &l());
    let three = b.op1(OpKind::Full, vec![], tile(&[4], DType::I32), vec![("value", Attr::float(3.0))], &l());
    let one = b.op1(OpKind::Full, vec![], tile(&[4], DType::I32), vec![("value", Attr::float(1.0))], &l());
    let five = b.op1(OpKind::Full, vec![], tile(&[4], DType::I32), vec![("value", Attr::float(5.0))], &l());
    let t3 = b.op1(OpKind::Mul, vec![ar, three], tile(&[4], DType::I32), vec![], &l());
    let idx = b.op1(OpKind::Sub, vec![t3, one], tile(&[4], DType::I32), vec![], &l());
    let mask =
        b.op1(OpKind::Cmp, vec![idx, five], tile(&[4], DType::Bool), vec![("pred", Attr::Str("ne".into()))], &l());
    let got = b.op1(OpKind::Gather, vec![x, idx, mask], tile(&[4], DType::F32), vec![], &l());
    let c0 = index(&mut b, 0);
    let vg = b.op1(OpKind::View, vec![g, c0], view(&[4], DType::F32), sizes(&[4]), &l());
    b.op(OpKind::Store, vec![vg, got], vec![], vec![], &l());
    let vals = b.op1(OpKind::Full, vec![], tile(&[4], DType::F32), vec![("value", Attr::float(-3.0))], &l());
    b.op(OpKind::Scatter, vec![y, idx, vals, mask], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let xs = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0];
    let mut args = vec![t(DType::F32, &[7], &xs), t(DType::F32, &[7], &[0.0; 7]), t(DType::F32, &[4], &[9.0; 4])];
    let stats = run_kernel(&f, &mut args).unwrap();
    assert!(!stats.parallel, "kernels that scatter run in grid order");
    assert_eq!(out(&args, 2), vec![0.0, 12.0, 0.0, 0.0]);
    assert_eq!(out(&args, 1), vec![0.0, 0.0, -3.0, 0.0, 0.0, 0.0, 0.0]);
}

/// `tile.reduce` sums in f32 and rounds once: 300 ones in a bf16 tile sum to 300, where
/// rounding every partial sum to bf16 would stop at 256 (257 is not a bf16).
#[test]
fn reductions_accumulate_in_f32_and_round_once() {
    let mut f = kernel("sm_90", [1, 1, 1]);
    let y = tensor(&mut f, "y", &["2"], DType::BF16);
    let m = tensor(&mut f, "m", &["2"], DType::BF16);
    let mut b = Builder::new(&mut f);
    let ones = b.op1(OpKind::Full, vec![], tile(&[2, 300], DType::BF16), vec![("value", Attr::float(1.0))], &l());
    let s = b.op1(
        OpKind::Reduce,
        vec![ones],
        tile(&[2], DType::BF16),
        vec![("kind", Attr::Str("sum".into())), ("axis", Attr::Int(1))],
        &l(),
    );
    let ar = b.op1(OpKind::Arange, vec![], tile(&[2], DType::I32), vec![], &l());
    let arf = b.op1(OpKind::Cast, vec![ar], tile(&[2], DType::BF16), vec![], &l());
    let e = b.op1(OpKind::ExpandDims, vec![arf], tile(&[1, 2], DType::BF16), vec![("axis", Attr::Int(0))], &l());
    let mx = b.op1(
        OpKind::Reduce,
        vec![e],
        tile(&[2], DType::BF16),
        vec![("kind", Attr::Str("max".into())), ("axis", Attr::Int(0))],
        &l(),
    );
    let c0 = index(&mut b, 0);
    let vy = b.op1(OpKind::View, vec![y, c0], view(&[2], DType::BF16), sizes(&[2]), &l());
    b.op(OpKind::Store, vec![vy, s], vec![], vec![], &l());
    let vm = b.op1(OpKind::View, vec![m, c0], view(&[2], DType::BF16), sizes(&[2]), &l());
    b.op(OpKind::Store, vec![vm, mx], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let mut args = vec![t(DType::BF16, &[2], &[0.0; 2]), t(DType::BF16, &[2], &[0.0; 2])];
    run_kernel(&f, &mut args).unwrap();
    assert_eq!(out(&args, 0), vec![300.0, 300.0]);
    assert_eq!(out(&args, 1), vec![0.0, 1.0]);
}

/// Casts round to nearest even; fp8 saturates (satfinite) and keeps NaN; float → int
/// truncates and saturates, NaN → 0. Elementwise bf16 math computes in f32.
#[test]
fn casts_round_and_saturate() {
    let mut f = kernel("cpu", [1, 1, 1]);
    let x = tensor(&mut f, "x", &["6"], DType::F32);
    let e4 = tensor(&mut f, "e4", &["6"], DType::Fp8E4m3);
    let i8t = tensor(&mut f, "i8", &["6"], DType::Int8);
    let e4s = tensor(&mut f, "e4s", &["6"], DType::Fp8E4m3);
    let i8s = tensor(&mut f, "i8s", &["6"], DType::Int8);
    let bf = tensor(&mut f, "bf", &["6"], DType::BF16);
    let mut b = Builder::new(&mut f);
    let c0 = index(&mut b, 0);
    let vx = b.op1(OpKind::View, vec![x, c0], view(&[6], DType::F32), sizes(&[6]), &l());
    let xv = b.op1(OpKind::Load, vec![vx], tile(&[6], DType::F32), vec![], &l());
    // Without a policy fp8 overflow is NaN and integers wrap; `saturate = true` clamps.
    for (dst, dt, saturate) in
        [(e4, DType::Fp8E4m3, false), (i8t, DType::Int8, false), (e4s, DType::Fp8E4m3, true), (i8s, DType::Int8, true)]
    {
        let attrs = if saturate { vec![("saturate", Attr::Bool(true))] } else { vec![] };
        let c = b.op1(OpKind::Cast, vec![xv], tile(&[6], dt), attrs, &l());
        let v = b.op1(OpKind::View, vec![dst, c0], view(&[6], dt), sizes(&[6]), &l());
        b.op(OpKind::Store, vec![v, c], vec![], vec![], &l());
    }
    // bf16: x + x*2^-8 computed in f32, rounded once.
    let xb = b.op1(OpKind::Cast, vec![xv], tile(&[6], DType::BF16), vec![], &l());
    let k = b.op1(OpKind::Full, vec![], tile(&[6], DType::BF16), vec![("value", Attr::float(1.0 / 256.0))], &l());
    let small = b.op1(OpKind::Mul, vec![xb, k], tile(&[6], DType::BF16), vec![], &l());
    let sum = b.op1(OpKind::Add, vec![xb, small], tile(&[6], DType::BF16), vec![], &l());
    let vb = b.op1(OpKind::View, vec![bf, c0], view(&[6], DType::BF16), sizes(&[6]), &l());
    b.op(OpKind::Store, vec![vb, sum], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let xs = [1000.0, -1000.0, f64::NAN, 0.3, 3.7, -3.7];
    let mut args = vec![
        t(DType::F32, &[6], &xs),
        t(DType::Fp8E4m3, &[6], &[0.0; 6]),
        t(DType::Int8, &[6], &[0.0; 6]),
        t(DType::Fp8E4m3, &[6], &[0.0; 6]),
        t(DType::Int8, &[6], &[0.0; 6]),
        t(DType::BF16, &[6], &[0.0; 6]),
    ];
    run_kernel(&f, &mut args).unwrap();
    let e4 = out(&args, 1);
    assert!(e4[..3].iter().all(|v| v.is_nan()), "{e4:?}"); // e4m3 has no Inf
    assert_eq!(&e4[3..], &[0.3125, 3.75, -3.75]);
    // 1000 = 0x3e8 wraps to 0xe8 = -24; NaN → 0.
    assert_eq!(out(&args, 2), vec![-24.0, 24.0, 0.0, 0.0, 3.0, -3.0]);
    let e4s = out(&args, 3);
    assert_eq!(&e4s[..2], &[448.0, -448.0]);
    assert!(e4s[2].is_nan());
    assert_eq!(&e4s[3..], &[0.3125, 3.75, -3.75]);
    assert_eq!(out(&args, 4), vec![127.0, -128.0, 0.0, 0.0, 3.0, -3.0]);
    let bf = out(&args, 5);
    // 1000 = 1111101000b is a bf16; 1000 * (1 + 2^-8) = 1003.9 rounds to 1004.
    assert_eq!(bf[0], 1004.0);
    assert_eq!(bf[4], round_to(DType::BF16, round_to(DType::BF16, 3.7) * (1.0 + 1.0 / 256.0)));
}

/// `arith.floordiv` floors and `arith.rem` is Euclidean on indices; `scf.while` carries
/// its values; `scf.if` picks a branch.
#[test]
fn index_arithmetic_and_structured_control() {
    let mut f = kernel("cpu", [1, 1, 1]);
    let y = tensor(&mut f, "y", &["3"], DType::F32);
    let mut b = Builder::new(&mut f);
    let (m7, c2, c0, c5, c1) =
        (index(&mut b, -7), index(&mut b, 2), index(&mut b, 0), index(&mut b, 5), index(&mut b, 1));
    let q = b.op1(OpKind::FloorDiv, vec![m7, c2], Type::Index, vec![], &l());
    let r = b.op1(OpKind::Rem, vec![m7, c2], Type::Index, vec![], &l());
    // while (i < 5) { acc += i; i += 1 }
    let (bi, bacc) = (b.value(Type::Index, Some("i")), b.value(Type::Index, Some("acc")));
    b.open_region(vec![bi, bacc]);
    let cond =
        b.op1(OpKind::Cmp, vec![bi, c5], Type::Scalar(DType::Bool), vec![("pred", Attr::Str("lt".into()))], &l());
    b.op(OpKind::Condition, vec![cond, bi, bacc], vec![], vec![], &l());
    let before = b.close_region();
    let (ai, aacc) = (b.value(Type::Index, None), b.value(Type::Index, None));
    b.open_region(vec![ai, aacc]);
    let acc2 = b.op1(OpKind::Add, vec![aacc, ai], Type::Index, vec![], &l());
    let i2 = b.op1(OpKind::Add, vec![ai, c1], Type::Index, vec![], &l());
    b.op(OpKind::Yield, vec![i2, acc2], vec![], vec![], &l());
    let after = b.close_region();
    let res = b.op_with_regions(
        OpKind::While,
        vec![c0, c0],
        vec![Type::Index, Type::Index],
        vec![],
        vec![before, after],
        &l(),
    );
    // if (q < 0) { q } else { 100 }
    let neg = b.op1(OpKind::Cmp, vec![q, c0], Type::Scalar(DType::Bool), vec![("pred", Attr::Str("lt".into()))], &l());
    b.open_region(vec![]);
    b.op(OpKind::Yield, vec![q], vec![], vec![], &l());
    let then = b.close_region();
    b.open_region(vec![]);
    let hundred = index(&mut b, 100);
    b.op(OpKind::Yield, vec![hundred], vec![], vec![], &l());
    let otherwise = b.close_region();
    let picked = b.op_with_regions(OpKind::If, vec![neg], vec![Type::Index], vec![], vec![then, otherwise], &l())[0];
    let mut vals = Vec::new();
    for v in [picked, r, res[1]] {
        let s = b.op1(OpKind::Cast, vec![v], Type::Scalar(DType::F32), vec![], &l());
        vals.push(b.op1(OpKind::Splat, vec![s], tile(&[1], DType::F32), vec![], &l()));
    }
    for (i, v) in vals.into_iter().enumerate() {
        let off = index(&mut b, i as i64);
        let vy = b.op1(OpKind::View, vec![y, off], view(&[1], DType::F32), sizes(&[1]), &l());
        b.op(OpKind::Store, vec![vy, v], vec![], vec![], &l());
    }
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let mut args = vec![t(DType::F32, &[3], &[0.0; 3])];
    run_kernel(&f, &mut args).unwrap();
    assert_eq!(out(&args, 0), vec![-4.0, 1.0, 10.0]);
}

/// `tile.dot`: products exact (bf16 here; f32 operands through a fused multiply-add),
/// accumulation in f32 from the accumulator, k in order.
#[test]
fn dot_products_are_exact_and_accumulate_in_f32() {
    for (dtype, a, bv, acc, want) in [
        // 2^24 + 1 is not an f32: f32 accumulation loses the 1 (f64 would keep it).
        (DType::BF16, [1.0, 1.0, -1.0], [16777216.0, 1.0, 16777216.0], 0.0, 0.0),
        // (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly only when fused.
        (
            DType::F32,
            [1.0 + 2f64.powi(-12), 0.0, 0.0],
            [1.0 + 2f64.powi(-12), 0.0, 0.0],
            -1.0,
            2f64.powi(-11) + 2f64.powi(-24),
        ),
        // fp8 e4m3: 448 * 448 is exact in f32.
        (DType::Fp8E4m3, [448.0, 0.5, 0.0], [448.0, 0.5, 0.0], 1.0, 200705.25),
    ] {
        let mut f = kernel("sm_90", [1, 1, 1]);
        let ta = tensor(&mut f, "a", &["1", "3"], dtype);
        let tb = tensor(&mut f, "b", &["3", "1"], dtype);
        let tc = tensor(&mut f, "c", &["1", "1"], DType::F32);
        let mut b = Builder::new(&mut f);
        let c0 = index(&mut b, 0);
        let va = b.op1(OpKind::View, vec![ta, c0, c0], view(&[1, 3], dtype), sizes(&[1, 3]), &l());
        let vb = b.op1(OpKind::View, vec![tb, c0, c0], view(&[3, 1], dtype), sizes(&[3, 1]), &l());
        let la = b.op1(OpKind::Load, vec![va], tile(&[1, 3], dtype), vec![], &l());
        let lb = b.op1(OpKind::Load, vec![vb], tile(&[3, 1], dtype), vec![], &l());
        let init = b.op1(OpKind::Full, vec![], tile(&[1, 1], DType::F32), vec![("value", Attr::float(acc))], &l());
        let d = b.op1(OpKind::Dot, vec![la, lb, init], tile(&[1, 1], DType::F32), vec![], &l());
        let vc = b.op1(OpKind::View, vec![tc, c0, c0], view(&[1, 1], DType::F32), sizes(&[1, 1]), &l());
        b.op(OpKind::Store, vec![vc, d], vec![], vec![], &l());
        b.op(OpKind::Return, vec![], vec![], vec![], &l());
        b.finish();
        let mut args = vec![t(dtype, &[1, 3], &a), t(dtype, &[3, 1], &bv), t(DType::F32, &[1, 1], &[0.0])];
        run_kernel(&f, &mut args).unwrap();
        assert_eq!(out(&args, 2), vec![want], "{dtype}");
    }
}

#[test]
fn causal_mask_and_transpose() {
    let mut f = kernel("cpu", [1, 1, 1]);
    let y = tensor(&mut f, "y", &["3", "4"], DType::F32);
    let mut b = Builder::new(&mut f);
    let row = b.op1(OpKind::Arange, vec![], tile(&[3], DType::I32), vec![], &l());
    let rowf = b.op1(OpKind::Cast, vec![row], tile(&[3], DType::F32), vec![], &l());
    let e = b.op1(OpKind::ExpandDims, vec![rowf], tile(&[1, 3], DType::F32), vec![("axis", Attr::Int(0))], &l());
    let m = b.op1(OpKind::Broadcast, vec![e], tile(&[4, 3], DType::F32), vec![], &l());
    let tr = b.op1(OpKind::Transpose, vec![m], tile(&[3, 4], DType::F32), vec![], &l());
    let (q, k) = (index(&mut b, 1), index(&mut b, 0));
    let masked = b.op1(OpKind::CausalMask, vec![tr, q, k], tile(&[3, 4], DType::F32), vec![], &l());
    let c0 = index(&mut b, 0);
    let vy = b.op1(OpKind::View, vec![y, c0, c0], view(&[3, 4], DType::F32), sizes(&[3, 4]), &l());
    b.op(OpKind::Store, vec![vy, masked], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    let mut args = vec![t(DType::F32, &[3, 4], &[0.0; 12])];
    run_kernel(&f, &mut args).unwrap();
    let ninf = f64::NEG_INFINITY;
    // Row i of the transpose is all i; keys j > i + 1 are masked.
    assert_eq!(out(&args, 0), vec![0.0, 0.0, ninf, ninf, 1.0, 1.0, 1.0, ninf, 2.0, 2.0, 2.0, 2.0]);
}

#[test]
fn two_programs_storing_one_element_is_a_race() {
    let mut f = kernel("sm_90", [2, 1, 1]);
    let y = tensor(&mut f, "y", &["4"], DType::F32);
    let mut b = Builder::new(&mut f);
    let pid = b.op1(OpKind::ProgramId, vec![], Type::Index, vec![("axis", Attr::Int(0))], &l());
    let c2 = index(&mut b, 2);
    let off = b.op1(OpKind::Mul, vec![pid, c2], Type::Index, vec![], &l());
    // Programs write [2p, 2p + 3): they overlap at element 2.
    let vy = b.op1(OpKind::View, vec![y, off], view(&[3], DType::F32), sizes(&[3]), &l());
    let one = b.op1(OpKind::Full, vec![], tile(&[3], DType::F32), vec![("value", Attr::float(1.0))], &l());
    b.op(OpKind::Store, vec![vy, one], vec![], vec![], &l());
    b.op(OpKind::Return, vec![], vec![], vec![], &l());
    b.finish();
    for parallel in [true, false] {
        let mut args = vec![t(DType::F32, &[4], &[0.0; 4])];
        let err =
            run_kernel_with(&f, &mut args, &Options { parallel, check_races: true, ..Default::default() }).unwrap_err();
        assert!(err.message.contains("both store element [2] of `y`"), "{err}");
    }
    let mut args = vec![t(DType::F32, &[4], &[0.0; 4])];
    run_kernel_with(&f, &mut args, &Options { parallel: false, check_races: false, ..Default::default() }).unwrap();
    assert_eq!(out(&args, 0), vec![1.0; 4]);
}

/// Reading a shared slot in the same barrier interval as it is overwritten.
#[test]
fn overwriting_a_slot_being_read_is_reported() {
    let build = |with_barrier: bool| {
        let mut f = kernel("sm_90", [1, 1, 1]);
        let x = tensor(&mut f, "x", &["8"], DType::F16);
        let mut b = Builder::new(&mut f);
        let smem = Type::Smem(SmemType {
            dims: vec![Dim::constant(8)],
            dtype: DType::F16,
            swizzle: Swizzle::None,
            pad: 0,
            stages: 1,
        });
        let buf = b.op1(OpKind::AllocShared, vec![], smem, vec![], &l());
        b.name(buf, "buf");
        let c0 = index(&mut b, 0);
        let vx = b.op1(OpKind::View, vec![x, c0], view(&[8], DType::F16), sizes(&[8]), &l());
        b.op(OpKind::CpAsync, vec![buf, vx], vec![], vec![], &l());
        b.op(OpKind::AsyncCommit, vec![], vec![], vec![], &l());
        b.op(OpKind::AsyncWait, vec![], vec![], vec![("pending", Attr::Int(0))], &l());
        b.op(OpKind::Barrier, vec![], vec![], vec![], &l());
        b.op1(OpKind::LoadShared, vec![buf], tile(&[8], DType::F16), vec![], &l());
        if with_barrier {
            b.op(OpKind::Barrier, vec![], vec![], vec![], &l());
        }
        b.op(OpKind::CpAsync, vec![buf, vx], vec![], vec![], &l());
        b.op(OpKind::Return, vec![], vec![], vec![], &l());
        b.finish();
        f
    };
    let mut args = vec![t(DType::F16, &[8], &[1.0; 8])];
    let err = run_kernel(&build(false), &mut args).unwrap_err();
    assert_eq!(err.op_name(), Some("tile.cp_async"));
    assert!(err.message.contains("overwrites slot 0 of `buf`, which tile.load_shared"), "{err}");
    run_kernel(&build(true), &mut args).unwrap();
}

// ----- real kernels with one synchronization step removed ---------------------------------

fn gemm_tile_ir(target: Target) -> Func {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid/gemm.tsr");
    let text = std::fs::read_to_string(&path).unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, path, text, None);
    let entry = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "gemm").cloned().unwrap();
    let symbols: BTreeMap<String, i64> = BTreeMap::new();
    let (config, _) = default_config(&db, entry.key, &symbols).unwrap();
    (*tile_ir(&db, entry.key, config, target).clone().unwrap()).clone()
}

/// Drops the first `count` ops of `kind` (all when `None`) from every region.
fn remove(f: &mut Func, kind: OpKind, count: Option<usize>) {
    let mut left = count.unwrap_or(usize::MAX);
    let ids = f.walk();
    let doomed: Vec<_> = ids
        .into_iter()
        .filter(|&id| f.op(id).kind == kind)
        .take_while(|_| {
            let keep = left > 0;
            left = left.saturating_sub(1);
            keep
        })
        .collect();
    assert!(!doomed.is_empty(), "no {} to remove", kind.name());
    f.body.ops.retain(|o| !doomed.contains(o));
    for op in &mut f.ops {
        for r in &mut op.regions {
            r.ops.retain(|o| !doomed.contains(o));
        }
    }
}

fn gemm_args() -> Vec<Arg> {
    let n = 64;
    let a: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64).collect();
    vec![t(DType::BF16, &[n, n], &a), t(DType::BF16, &[n, n], &a), t(DType::F32, &[n, n], &vec![0.0; n * n])]
}

#[test]
fn the_unmodified_pipeline_runs() {
    let mut args = gemm_args();
    run_kernel(&gemm_tile_ir(Target::Sm90), &mut args).unwrap();
}

#[test]
fn reading_before_the_wait_is_reported() {
    let mut f = gemm_tile_ir(Target::Sm90);
    remove(&mut f, OpKind::AsyncWait, None);
    let err = run_kernel(&f, &mut gemm_args()).unwrap_err();
    assert_eq!(err.op_name(), Some("tile.load_shared"), "{err}");
    assert!(err.message.contains("may still be in flight"), "{err}");
    assert_eq!(err.program(), Some([0, 0, 0]));
}

#[test]
fn reading_an_uncommitted_copy_is_reported() {
    let mut f = gemm_tile_ir(Target::Sm90);
    remove(&mut f, OpKind::AsyncCommit, None);
    let err = run_kernel(&f, &mut gemm_args()).unwrap_err();
    assert!(err.message.contains("never committed"), "{err}");
}

#[test]
fn reading_without_a_barrier_after_the_wait_is_reported() {
    let mut f = gemm_tile_ir(Target::Sm90);
    remove(&mut f, OpKind::Barrier, None);
    let err = run_kernel(&f, &mut gemm_args()).unwrap_err();
    assert!(err.message.contains("no tile.barrier after the tile.async_wait"), "{err}");
}

#[test]
fn copies_on_the_cpu_are_immediate() {
    // The CPU lowering has no commit/wait: cp_async is a plain copy there.
    let f = gemm_tile_ir(Target::Cpu);
    assert!(!f.walk().iter().any(|&id| f.op(id).kind == OpKind::AsyncWait));
    let mut args = gemm_args();
    run_kernel(&f, &mut args).unwrap();
    let a: Vec<f64> = (0..64 * 64).map(|i| (i % 7) as f64).collect();
    let want = tessera_backends::reference::matmul(&a, &a, 64, 64, 64);
    assert_eq!(out(&args, 2), want, "small integers: every f32 sum is exact");
}

#[test]
fn argument_mismatches_are_errors() {
    let f = gemm_tile_ir(Target::Cpu);
    let mut args = gemm_args();
    args[0] = t(DType::F32, &[64, 64], &vec![0.0; 64 * 64]);
    let err = run_kernel(&f, &mut args).unwrap_err();
    assert!(err.message.contains("`A` is bf16, got a f32 tensor"), "{err}");
    let mut args = gemm_args();
    args[1] = t(DType::BF16, &[32, 64], &vec![0.0; 32 * 64]);
    let err = run_kernel(&f, &mut args).unwrap_err();
    assert!(err.message.contains("K = 64"), "{err}");
    let err = run_kernel(&f, &mut gemm_args()[..2].to_vec()).unwrap_err();
    assert!(err.message.contains("takes 3 arguments, got 2"), "{err}");
}

#[test]
fn unsupported_ops_are_precise_errors() {
    let mut f = kernel("cpu", [1, 1, 1]);
    let mut b = Builder::new(&mut f);
    b.op(OpKind::AllReduce, vec![], vec![], vec![], &l());
    b.finish();
    let err = run_kernel(&f, &mut []).unwrap_err();
    assert_eq!(err.message, "`dist.all_reduce` is not supported by the interpreter yet");
}
