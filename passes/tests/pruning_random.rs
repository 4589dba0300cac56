//! The property autotune pruning rests on (`analysis::prune`: budgets never shrink when
//! BM, BN, BK or stages grow) on generated kernels, not only the corpus's: GEMM-shaped
//! kernels with random operand dtypes, transposed operands, explicit shared buffers or
//! staged loads, a chained second dot, and random epilogues. And on the same kernels
//! under random Hopper schedules (TMA, producer, ping-pong, clusters): what the rules
//! admit lowers, with a clean staging protocol.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tessera_frontend::check::{fn_signature, FunctionKind, KeyValue, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::diagnostics::Severity;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::analysis::kernel_budget;
use tessera_passes::{graph_ir, Target};

#[derive(Clone, Debug)]
struct Shape {
    dtype: &'static str,
    a_transposed: bool,
    explicit_shared: Option<&'static str>,
    scale_a: bool,
    chained: bool,
    epilogue: Vec<u8>,
    row_sums: bool,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![Just("bf16"), Just("f16"), Just("f32")],
        any::<bool>(),
        prop_oneof![Just(None), Just(Some("none")), Just(Some("xor"))],
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(0u8..5, 0..4),
        any::<bool>(),
    )
        .prop_map(|(dtype, a_transposed, explicit_shared, scale_a, chained, epilogue, row_sums)| Shape {
            dtype,
            a_transposed,
            explicit_shared,
            scale_a,
            chained,
            epilogue,
            row_sums,
        })
}

/// The kernel's source: C = epilogue(A @ B) (then @ V when chained), optionally with
/// row sums of the accumulator.
fn kernel(s: &Shape) -> String {
    let t = s.dtype;
    let a_param =
        if s.a_transposed { format!("A: Tensor[\"K\", \"M\", {t}]") } else { format!("A: Tensor[\"M\", \"K\", {t}]") };
    let mut params = vec![a_param, format!("B: Tensor[\"K\", \"N\", {t}]"), "bias: Tensor[\"N\", f32]".to_string()];
    if s.chained {
        params.push(format!("V: Tensor[\"N\", \"N\", {t}]"));
    }
    params.push("C: Tensor[\"M\", \"N\", f32]".to_string());
    if s.row_sums {
        // One row of partial sums per column block: every program stores its own.
        params.push("S: Tensor[\"NB\", \"M\", f32]".to_string());
    }
    let a_window =
        if s.a_transposed { "A[k0:k0 + ctx.BK, m0:m0 + ctx.BM]" } else { "A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]" };
    let b_window = "B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]";
    let mut body = String::new();
    let mut line = |indent: usize, text: &str| {
        body.push_str(&" ".repeat(indent * 4));
        body.push_str(text);
        body.push('\n');
    };
    line(1, "ctx = tile.context()");
    line(1, "for m0 in tile.parallel(0, M, ctx.BM):");
    line(2, "for n0 in tile.parallel(0, N, ctx.BN):");
    line(3, "acc = tile.zeros((ctx.BM, ctx.BN), f32)");
    match (s.explicit_shared, s.a_transposed) {
        (Some(swizzle), false) => {
            line(3, &format!("a_s = tile.alloc_shared((ctx.BM, ctx.BK), {t}, swizzle=\"{swizzle}\")"));
            line(3, &format!("b_s = tile.alloc_shared((ctx.BK, ctx.BN), {t}, swizzle=\"{swizzle}\")"));
            line(3, "for k0 in tile.range(0, K, ctx.BK):");
            line(4, &format!("tile.cp_async(a_s, {a_window})"));
            line(4, &format!("tile.cp_async(b_s, {b_window})"));
            line(4, "tile.barrier()");
            line(4, "acc = tile.mma(a_s, b_s, accumulator=acc)");
            line(4, "tile.barrier()");
        }
        _ => {
            line(3, "for k0 in tile.range(0, K, ctx.BK):");
            let a = if s.a_transposed { format!("tile.load({a_window}).T") } else { format!("tile.load({a_window})") };
            line(4, &format!("a = {a}"));
            if s.scale_a {
                line(4, &format!("a = tile.cast(a * 2.0, {t})"));
            }
            line(4, &format!("b = tile.load({b_window})"));
            line(4, "acc += tile.dot(a, b)");
        }
    }
    for op in &s.epilogue {
        match op {
            0 => line(3, "acc = tile.maximum(acc, 0.0)"),
            1 => line(3, "acc = acc * 0.5"),
            2 => line(3, "acc = tile.exp(acc - tile.row_max(acc)[:, None])"),
            3 => {
                line(3, "bb = tile.load(bias[n0:n0 + ctx.BN])");
                line(3, "acc = acc + bb[None, :]");
            }
            _ => line(3, "acc = tile.gelu(acc)"),
        }
    }
    if s.chained {
        line(3, "v = tile.load(V[n0:n0 + ctx.BN, n0:n0 + ctx.BN])");
        line(3, &format!("acc = tile.dot(tile.cast(acc, {t}), v)"));
    }
    if s.row_sums {
        line(3, "S[n0 // ctx.BN, m0:m0 + ctx.BM] = tile.row_sum(acc)");
    }
    line(3, "C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc");
    format!(
        "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, stages=2))\ndef k({}):\n{body}",
        params.join(", ")
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn budgets_of_generated_kernels_grow_with_the_tile_keys(s in shape()) {
        let text = kernel(&s);
        let db = Database::default();
        let file = SourceFile::new(&db, "k.tsr".into(), text.clone(), None);
        let errors: Vec<String> = tessera_passes::file_diagnostics(&db, file, Target::Sm90)
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.message.clone())
            .collect();
        prop_assert!(errors.is_empty(), "the generator wrote a kernel with errors:\n{text}\n{errors:#?}");
        let key = item_index(&db, file).functions.iter().find(|f| fn_signature(&db, f.key).kind == FunctionKind::Kernel).unwrap().key;
        let graph = graph_ir(&db, key).clone().unwrap();
        for target in [Target::Sm80, Target::Sm90] {
            let mut points = Vec::new();
            for bm in [32, 64, 128] {
                for bn in [32, 64, 128] {
                    for bk in [32, 64] {
                        for stages in [1, 2, 3] {
                            let mut sched = ScheduleValue::default_for_kernel();
                            for (k, v) in [("BM", bm), ("BN", bn), ("BK", bk), ("stages", stages), ("warps", 4)] {
                                sched.set(k, KeyValue::Int(v));
                            }
                            let config = tessera_passes::config::config_for(&graph, sched, &BTreeMap::new()).0;
                            let budget = kernel_budget(&db, key, config, target).as_ref().ok().copied();
                            points.push(([bm, bn, bk, stages], budget));
                        }
                    }
                }
            }
            // Most of the grid lowers (a tile the target cannot hold does not).
            let lowered = points.iter().filter(|(_, b)| b.is_some()).count();
            prop_assert!(lowered * 2 > points.len(), "{target}: {lowered} of {} configurations lower:\n{text}", points.len());
            for (a, ba) in &points {
                for (b, bb) in &points {
                    if a == b || !a.iter().zip(b).all(|(x, y)| x <= y) {
                        continue;
                    }
                    match (ba, bb) {
                        (Some(x), Some(y)) => prop_assert!(
                            x.smem_bytes <= y.smem_bytes && x.register_peak <= y.register_peak,
                            "{target}: {a:?} {x:?} > {b:?} {y:?} for\n{text}"
                        ),
                        (None, None) => {}
                        _ => prop_assert!(false, "{target}: only one of {a:?} and {b:?} lowers:\n{text}"),
                    }
                }
            }
        }
    }
}

/// The generated kernels a producer can feed: 16-bit operands, A not transposed, no
/// second dot after the loop (the rest stays random).
fn hopper_shape() -> impl Strategy<Value = Shape> {
    shape().prop_map(|s| Shape {
        dtype: if s.dtype == "f16" { "f16" } else { "bf16" },
        a_transposed: false,
        chained: false,
        ..s
    })
}

/// A random Hopper schedule: tile keys, the staging (TMA, a producer, ping-pong) and a
/// cluster shape.
fn hopper_schedule() -> impl Strategy<Value = Vec<(&'static str, KeyValue)>> {
    (
        prop_oneof![Just(64i64), Just(128)],
        prop_oneof![Just(64i64), Just(128)],
        prop_oneof![Just(32i64), Just(64)],
        prop_oneof![Just(4i64), Just(8)],
        1i64..5,
        prop_oneof![1 => Just("none"), 3 => Just("warpgroup"), 2 => Just("pingpong")],
        prop_oneof![Just(1i64), Just(2), Just(4)],
        prop_oneof![Just(1i64), Just(2)],
    )
        .prop_map(|(bm, bn, bk, warps, stages, producer, x, y)| {
            vec![
                ("BM", KeyValue::Int(bm)),
                ("BN", KeyValue::Int(bn)),
                ("BK", KeyValue::Int(bk)),
                ("warps", KeyValue::Int(warps)),
                ("stages", KeyValue::Int(stages)),
                ("mma", KeyValue::Str("wgmma".into())),
                ("copy", KeyValue::Str("tma".into())),
                ("producer", KeyValue::Str(producer.into())),
                ("cluster_x", KeyValue::Int(x)),
                ("cluster_y", KeyValue::Int(y)),
            ]
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The rules and the lowering agree on generated kernels under random Hopper
    /// schedules: a schedule every rule admits (WGMMA, TMA, producer, cluster) lowers to
    /// PTX with a clean staging protocol (`analysis::phases`), and multicasts when it
    /// asks for a cluster.
    #[test]
    fn admitted_hopper_schedules_lower_with_a_clean_pipeline(s in hopper_shape(), keys in hopper_schedule()) {
        let text = kernel(&s);
        let db = Database::default();
        let file = SourceFile::new(&db, "k.tsr".into(), text.clone(), None);
        let key = item_index(&db, file).functions.iter().find(|f| fn_signature(&db, f.key).kind == FunctionKind::Kernel).unwrap().key;
        let graph = graph_ir(&db, key).clone().unwrap();
        let mut sched = ScheduleValue::default_for_kernel();
        for (k, v) in &keys {
            sched.set(k, v.clone());
        }
        let config = tessera_passes::config::config_for(&graph, sched, &BTreeMap::new()).0;
        let t = Target::Sm90;
        if tessera_passes::analysis::hopper_reason(&db, key, &config, t).is_some() {
            return Ok(());
        }
        let tile = match tessera_passes::tile_ir(&db, key, config.clone(), t).as_ref() {
            Ok(tile) => (**tile).clone(),
            // A tile or buffer too large for the target is the budget's reason, not a rule's.
            Err(e) if e.message.contains("bytes") => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("[{config}] admitted but does not lower: {}\n{text}", e.message))),
        };
        let races = tessera_passes::analysis::phases::check_pipeline(&tile);
        prop_assert!(races.is_empty(), "[{config}] {races:?}\n{text}");
        let code = tessera_passes::ptx::emit(&tile, t);
        prop_assert!(code.is_ok(), "[{config}] PTX: {:?}\n{text}", code.err().map(|e| e.message));
        if config.schedule.cluster_size() > 1 {
            prop_assert!(code.unwrap().text.contains(".multicast::cluster"), "[{config}] a cluster without multicast\n{text}");
        }
    }
}
