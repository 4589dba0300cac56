//! Tests of planning, running and FLOP counting.

use std::collections::BTreeMap;
use std::time::Duration;

use tessera_frontend::check::DType;
use tessera_passes::abi::AbiParam;
use tessera_passes::{Target, DEFAULT_SHAPE};

use super::plan::parse_scalar;
use super::*;
use crate::interp;
use crate::tensor::{round_to, Arg};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};

pub(crate) fn corpus(name: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid");
    std::fs::read_to_string(root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Plans `kernel` of `text` at `dims` for `target` with its first configuration.
pub(crate) fn plan_of(text: &str, kernel: &str, dims: &[(&str, i64)], target: Target, args: &[(&str, &str)]) -> Plan {
    seeded_plan_of(text, kernel, dims, target, args, 7)
}

/// [`plan_of`] with inputs of another seed.
fn seeded_plan_of(
    text: &str,
    kernel: &str,
    dims: &[(&str, i64)],
    target: Target,
    args: &[(&str, &str)],
    seed: u64,
) -> Plan {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.to_string(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
    let info = kernel_info(&db, key).unwrap();
    let given: Vec<(String, i64)> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let resolved = resolve_dims(&db, key, &info, &given).unwrap();
    let config = config_for(&db, key, info.base_schedule.clone(), &resolved.map()).unwrap();
    let req = PlanRequest {
        target,
        config,
        dims: resolved.map(),
        args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        seed,
        code: false,
        max_memory: None,
    };
    plan(&db, key, &info, &req).unwrap()
}

#[test]
fn the_static_flop_count_is_the_interpreters() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, i64)], &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        ("gemm.tsr", "gemm", &[("M", 100), ("N", 76), ("K", 90)], &[]),
        ("fp8_gemm.tsr", "fp8_gemm", &[("M", 130), ("N", 64), ("K", 64)], &[]),
        ("linear_gelu.tsr", "linear_gelu", &[("M", 64), ("N", 200), ("K", 40)], &[]),
        ("flash_attention.tsr", "flash_attention", &[("BH", 2), ("S", 100), ("D", 64)], &[("causal", "true")]),
        ("flash_attention.tsr", "flash_attention", &[("BH", 1), ("S", 64), ("D", 64)], &[("causal", "false")]),
        ("schedules.tsr", "small_matmul", &[("M", 70), ("N", 64), ("K", 33)], &[]),
    ];
    for (file, kernel, dims, args) in cases {
        for target in [Target::Cpu, Target::Sm90] {
            let p = plan_of(&corpus(file), kernel, dims, target, args);
            let counted = count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid).unwrap().unwrap();
            let mut a = p.inputs.clone();
            let stats = interp::run_kernel(&p.tile, &mut a).unwrap();
            assert_eq!(counted, stats.dot_flops, "{kernel} {dims:?} {target}");
        }
    }
    let p = plan_of(&corpus("softmax.tsr"), "softmax", &[("R", 3), ("C", 10)], Target::Cpu, &[]);
    assert_eq!(count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid), Ok(None));
}

/// A dot inside a loop whose trip count depends on the program (a causal kernel that
/// skips the masked key blocks) is counted program by program.
#[test]
fn program_dependent_loops_are_walked() {
    let text = "from tessera import *\n\n@kernel.schedule(block(32, 32))\ndef tri(A: Tensor[\"N\", \"N\", f16], C: Tensor[\"N\", \"N\", f32]):\n    ctx = tile.context()\n    for m0 in tile.parallel(0, N, ctx.BM):\n        acc = tile.zeros((ctx.BM, ctx.BN), f32)\n        for k0 in tile.range(0, m0 + ctx.BM, ctx.BN):\n            acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BN]), tile.load(A[k0:k0 + ctx.BN, 0:ctx.BN]))\n        C[m0:m0 + ctx.BM, 0:ctx.BN] = acc\n";
    let p = plan_of(text, "tri", &[("N", 96)], Target::Cpu, &[]);
    let counted = count_dot_flops(&p.tile, &p.abi, &p.inputs, p.grid).unwrap().unwrap();
    let mut a = p.inputs.clone();
    let stats = interp::run_kernel(&p.tile, &mut a).unwrap();
    // Programs 0, 1, 2 run 1, 2, 3 iterations of a 32x32x32 dot.
    assert_eq!(counted, 6 * 2 * 32 * 32 * 32);
    assert_eq!(counted, stats.dot_flops);
}

#[test]
fn sampled_checks_cover_the_edges_and_catch_wrong_elements() {
    let p = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 300), ("N", 200), ("K", 40)], Target::Cpu, &[]);
    assert_eq!(p.grid, [5, 4, 1]);
    let programs = sample_programs(&p, u64::MAX / 2, 1);
    for corner in [[0, 0, 0], [4, 0, 0], [0, 3, 0], [4, 3, 0]] {
        assert!(programs.contains(&corner), "{corner:?} not in {programs:?}");
    }
    let full = Reference::compute(&p, CheckMode::Full).unwrap();
    let mut device = p.inputs.clone();
    interp::run_kernel(&p.tile, &mut device).unwrap();
    let sampled = Reference::compute(&p, CheckMode::Sampled).unwrap();
    let CheckKind::Sampled { programs: n, total } = sampled.kind else { panic!("{:?}", sampled.kind) };
    assert_eq!(total, 20);
    assert!((8..=20).contains(&n), "{n}");
    assert_eq!(full.compare(&p, &device).passed(), Some(true));
    let ok = sampled.compare(&p, &device);
    assert_eq!(ok.passed(), Some(true));
    assert!(ok.outputs[0].compared < 300 * 200 || n == 20);
    // The last element of C belongs to the corner program (4, 3): always sampled.
    let Arg::Tensor(c) = &mut device[2] else { panic!() };
    let last = c.numel() - 1;
    c.set(last, c.get(last) + 10.0);
    let bad = sampled.compare(&p, &device);
    assert_eq!(bad.passed(), Some(false));
    assert_eq!(bad.outputs[0].first_mismatch.as_ref().unwrap().0, vec![299, 199]);
    assert_eq!(full.compare(&p, &device).outputs[0].comparison.mismatches, 1);
}

#[test]
fn a_subset_run_reports_what_it_stored() {
    let p = plan_of(&corpus("vector_add.tsr"), "vector_add", &[("N", 1000)], Target::Cpu, &[]);
    let kernel = interp::Kernel::new(&p.tile).unwrap();
    let mut args = p.inputs.clone();
    let block = p.config.schedule.int("BLOCK").unwrap() as usize;
    let (stats, masks) = kernel.run_programs(&mut args, &interp::Options::default(), &[[1, 0, 0]]).unwrap();
    assert_eq!(stats.programs, 1);
    let out = masks[2].as_ref().unwrap();
    assert!(masks[0].is_none() && masks[1].is_none());
    let stored: Vec<usize> = (0..out.len()).filter(|&i| out[i]).collect();
    assert_eq!(stored, (block..(2 * block).min(1000)).collect::<Vec<_>>());
    let e = kernel.run_programs(&mut args, &interp::Options::default(), &[[9, 0, 0]]).unwrap_err();
    assert!(e.message.contains("outside the grid"), "{e}");
}

#[test]
fn scalars_take_given_default_or_seeded_values() {
    let p = plan_of(&corpus("layernorm.tsr"), "layernorm", &[("R", 2), ("C", 8)], Target::Cpu, &[]);
    let eps = p.scalars.iter().find(|s| s.name == "eps").unwrap();
    assert_eq!((eps.value, eps.source), (round_to(DType::F32, 1e-5), ScalarSource::Default));
    let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 8)], Target::Cpu, &[("alpha", "2.5")]);
    assert_eq!(p.scalars[0].value, 2.5);
    assert_eq!(p.scalars[0].source, ScalarSource::Given);
    let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 8)], Target::Cpu, &[]);
    assert_eq!(p.scalars[0].source, ScalarSource::Seeded);
    let alpha = AbiParam::Scalar { name: "alpha".into(), dtype: DType::F32 };
    assert_eq!(parse_scalar(&alpha, "abc").unwrap_err(), "`abc` is not a number (`alpha` is f32)");
    assert!(parse_scalar(&alpha, "1e39").unwrap_err().contains("overflows f32"));
    let flag = AbiParam::Scalar { name: "causal".into(), dtype: DType::Bool };
    assert_eq!(parse_scalar(&flag, "False"), Ok(0.0));
    assert!(parse_scalar(&flag, "2").is_err());
}

#[test]
fn work_counts_each_tensor_once_per_direction() {
    let p = plan_of(&corpus("saxpy.tsr"), "saxpy", &[("n", 1000)], Target::Cpu, &[]);
    let w = work(&p);
    // x read, y read and written: 3 x 1000 f32.
    assert_eq!((w.flops, w.bytes), (None, 12000));
    assert_eq!(w.gbps(1.0), Some(0.012));
    let p = plan_of(&corpus("gemm.tsr"), "gemm", &[("M", 128), ("N", 128), ("K", 128)], Target::Cpu, &[]);
    assert_eq!(work(&p).flops, Some(2 * 128 * 128 * 128));
}

#[test]
fn timings_and_indices() {
    let t = Timing::of(&[Duration::from_millis(3), Duration::from_millis(1), Duration::from_millis(2)], 0);
    assert_eq!((t.median_ms, t.min_ms), (2.0, 1.0));
    let t = Timing::of(&[Duration::from_millis(4), Duration::from_millis(2)], 1);
    assert_eq!(t.median_ms, 3.0);
    assert_eq!(unravel(7, &[2, 3, 4]), vec![0, 1, 3]);
    assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
    assert_eq!("interp".parse::<DeviceRequest>(), Ok(DeviceRequest::Only(Device::Interpreter)));
    assert!("tpu".parse::<DeviceRequest>().unwrap_err().contains("expected cpu, gpu, auto or interp"));
}

#[test]
fn dims_are_resolved_with_defaults_and_checked() {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), corpus("flash_attention.tsr"), None);
    let key = item_index(&db, file).functions[0].key;
    let info = kernel_info(&db, key).unwrap();
    let r = resolve_dims(&db, key, &info, &[("S".into(), 100)]).unwrap();
    assert_eq!(r.map()["D"], DEFAULT_SHAPE, "a head dim takes the value the kernel is checked with");
    assert_eq!(r.map()["BH"], DEFAULT_SIZE);
    assert_eq!(r.assumed.len(), 2);
    let e = resolve_dims(&db, key, &info, &[("Q".into(), 1)]).unwrap_err();
    assert_eq!(e.message, "--dims Q=1: `flash_attention` has no shape symbol Q (its shape symbols are BH, S, D)");
    let e = resolve_dims(&db, key, &info, &[("BM".into(), 64)]).unwrap_err();
    assert!(e.message.contains("use --schedule BM=64"), "{}", e.message);
    let e = resolve_dims(&db, key, &info, &[("S".into(), 0)]).unwrap_err();
    assert_eq!(e.message, "--dims S=0: a dim must be at least 1");
}

#[test]
fn code_compiled_for_one_head_dim_refuses_another() {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), corpus("flash_attention.tsr"), None);
    let key = item_index(&db, file).functions[0].key;
    let info = kernel_info(&db, key).unwrap();
    let compiled_for: BTreeMap<String, i64> = [("D".to_string(), 64)].into();
    let config = config_for(&db, key, info.base_schedule.clone(), &compiled_for).unwrap();
    let dims = resolve_dims(&db, key, &info, &[("D".into(), 128), ("S".into(), 128)]).unwrap().map();
    let req =
        PlanRequest { target: Target::Cpu, config, dims, args: Vec::new(), seed: 7, code: false, max_memory: None };
    let e = plan(&db, key, &info, &req).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Input);
    assert!(e.message.contains("compiled for D = 64") && e.message.contains("D = 128"), "{}", e.message);
}

const PRODUCT_DIMS: &str = "from tessera import *\n\n@kernel\ndef scale(x: Tensor[\"B*H\", \"N\", f32], y: Tensor[\"B*H\", \"N\", f32]):\n    ctx = tile.context()\n    for r in tile.parallel(0, B*H):\n        for c0 in tile.range(0, N, ctx.BN):\n            t = tile.load(x[r:r + 1, c0:c0 + ctx.BN])\n            tile.store(y[r:r + 1, c0:c0 + ctx.BN], t * 2.0)\n";

#[test]
fn product_dims_take_their_symbols_from_the_dims() {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), PRODUCT_DIMS.to_string(), None);
    let key = item_index(&db, file).functions[0].key;
    let info = kernel_info(&db, key).unwrap();
    assert_eq!(info.symbols, ["B", "H", "N"]);
    // B and H are read as values and specialized: by default the value the kernel is
    // checked with, as a head dim; N is bound by x's extent.
    let r = resolve_dims(&db, key, &info, &[]).unwrap();
    assert_eq!(r.map()["B"], DEFAULT_SHAPE);
    assert_eq!(r.map()["H"], DEFAULT_SHAPE);
    assert_eq!(r.map()["N"], DEFAULT_SIZE);
    let e = resolve_dims(&db, key, &info, &[("Q".into(), 1)]).unwrap_err();
    assert_eq!(e.message, "--dims Q=1: `scale` has no shape symbol Q (its shape symbols are B, H, N)");
    // The configuration holds the given B and H; the kernel covers all B*H rows.
    let p = plan_of(PRODUCT_DIMS, "scale", &[("B", 2), ("H", 3), ("N", 64)], Target::Cpu, &[]);
    assert_eq!(p.dims["B"], 2);
    let mut a = p.inputs.clone();
    interp::run_kernel(&p.tile, &mut a).unwrap();
    let (Arg::Tensor(x), Arg::Tensor(y)) = (&a[0], &a[1]) else { panic!("two tensors") };
    assert_eq!(y.dims, [6, 64]);
    let want: Vec<f64> = x.to_f64().iter().map(|v| v * 2.0).collect();
    assert_eq!(y.to_f64(), want);
}

/// A mismatch with the f64 reference is traced by the same-schedule Tile IR check: a
/// device that computes what its Tile IR computes points at the Tile IR (layernorm's
/// `E[x²] - mean²` cancels in f32 over two columns), one that departs from it only where
/// the Tile IR is wrong too at unstable arithmetic, one that departs elsewhere at code
/// generation; a correct run and the interpreter device get no second run.
#[test]
fn mismatches_are_traced_to_the_tile_ir_or_to_code_generation() {
    let layernorm = corpus("layernorm.tsr");
    // The seed decides whether some row of two nearly equal values cancels badly enough.
    let p = (0..64u64)
        .map(|seed| seeded_plan_of(&layernorm, "layernorm", &[("R", 1024), ("C", 2)], Target::Cpu, &[], seed))
        .find(|p| {
            let mut device = p.inputs.clone();
            interp::run_kernel(&p.tile, &mut device).unwrap();
            Reference::compute(p, CheckMode::Full).unwrap().compare(p, &device).verdict() == Verdict::Wrong
        })
        .expect("some seed makes layernorm's f32 variance cancel at C=2");
    let mut device = p.inputs.clone();
    interp::run_kernel(&p.tile, &mut device).unwrap();
    let reference = Reference::compute(&p, CheckMode::Auto).unwrap();

    let mut check = reference.compare(&p, &device);
    diagnose_mismatch(&p, Device::Cpu, CheckMode::Auto, &reference, &device, &mut check);
    assert_eq!(check.verdict(), Verdict::Wrong, "the diagnosis does not change the verdict");
    assert_eq!(check.lowering.as_ref().map(|l| l.verdict()), Some(Verdict::Correct));
    assert_eq!(check.mismatch_source(), Some(MismatchSource::TileIr));

    // The interpreter device is its own Tile IR: nothing to compare.
    let mut itself = reference.compare(&p, &device);
    diagnose_mismatch(&p, Device::Interpreter, CheckMode::Auto, &reference, &device, &mut itself);
    assert!(itself.lowering.is_none() && itself.mismatch_source().is_none());

    // A device that departs from its Tile IR only where the Tile IR departs from the f64
    // reference (the cancelling row, summed in another order): unstable arithmetic.
    let Some((at, expected, got)) = check.outputs[0].first_mismatch.clone() else { panic!("a mismatch") };
    let mut reordered = device.clone();
    let Arg::Tensor(y) = &mut reordered[3] else { panic!("Y is the fourth parameter") };
    let flat = at[0] * 2 + at[1];
    y.set(flat, round_to(DType::F32, expected + (got - expected) * 3.0));
    let mut unstable = reference.compare(&p, &reordered);
    diagnose_mismatch(&p, Device::Cpu, CheckMode::Auto, &reference, &reordered, &mut unstable);
    assert_eq!(unstable.lowering.as_ref().map(|l| l.verdict()), Some(Verdict::Wrong));
    assert_eq!(unstable.mismatch_source(), Some(MismatchSource::UnstableArithmetic));

    // A device that writes something else than its Tile IR where the Tile IR is right:
    // code generation.
    let Arg::Tensor(y) = &mut device[3] else { panic!("Y is the fourth parameter") };
    for i in 0..y.numel() {
        y.set(i, y.get(i) + 1.0);
    }
    let mut miscompiled = reference.compare(&p, &device);
    diagnose_mismatch(&p, Device::Cpu, CheckMode::Auto, &reference, &device, &mut miscompiled);
    assert_eq!(miscompiled.mismatch_source(), Some(MismatchSource::CodeGeneration));

    // A device that is finite where its Tile IR takes the square root of a negative
    // variance (a mean of 1000 with a spread of 0.01 cancels in f32), and matches it
    // everywhere else: still the Tile IR's arithmetic, not code generation.
    let mut p = plan_of(&layernorm, "layernorm", &[("R", 64), ("C", 1000)], Target::Cpu, &[]);
    let Arg::Tensor(x) = &mut p.inputs[0] else { panic!("X is the first parameter") };
    for i in 0..x.numel() {
        x.set(i, round_to(DType::F32, 1000.0 + (x.get(i) - 0.5) * 0.02));
    }
    let reference = Reference::compute(&p, CheckMode::Full).unwrap();
    let mut device = p.inputs.clone();
    interp::run_kernel(&p.tile, &mut device).unwrap();
    let Arg::Tensor(y) = &mut device[3] else { panic!("Y is the fourth parameter") };
    let nan_rows: Vec<usize> = (0..64).filter(|r| y.get(r * 1000).is_nan()).collect();
    assert!(!nan_rows.is_empty() && nan_rows.len() < 64, "{nan_rows:?}");
    for i in nan_rows.iter().flat_map(|r| r * 1000..(r + 1) * 1000) {
        y.set(i, 0.0);
    }
    let mut check = reference.compare(&p, &device);
    diagnose_mismatch(&p, Device::Cpu, CheckMode::Auto, &reference, &device, &mut check);
    assert_eq!(check.verdict(), Verdict::Wrong);
    assert_eq!(check.lowering.as_ref().map(|l| l.verdict()), Some(Verdict::NonFinite));
    assert_eq!(check.mismatch_source(), Some(MismatchSource::NonFiniteTileIr));

    // A correct run is not checked twice.
    let ok = plan_of(&layernorm, "layernorm", &[("R", 64), ("C", 256)], Target::Cpu, &[]);
    let mut good = ok.inputs.clone();
    interp::run_kernel(&ok.tile, &mut good).unwrap();
    let ok_reference = Reference::compute(&ok, CheckMode::Auto).unwrap();
    let mut passed = ok_reference.compare(&ok, &good);
    diagnose_mismatch(&ok, Device::Cpu, CheckMode::Auto, &ok_reference, &good, &mut passed);
    assert_eq!(passed.verdict(), Verdict::Correct);
    assert!(passed.lowering.is_none());
}
