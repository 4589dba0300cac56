//! `mma = "wgmma"` (sm_90a) through the emulator: the GEMMs of the examples and the corpus
//! and kernels written for it, against the Tile IR interpreter and the f64 reference of
//! their Graph IR, at tile-multiple and ragged shapes; and planted bugs (a wrong swizzle
//! mode or SBO in a descriptor, a missing wait, fence or proxy fence) that must fail.

use std::collections::BTreeMap;

use tessera_backends::interp::inputs::seeded;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::codegen::TargetCode;
use tessera_passes::ir::{Func, OpKind, Type};
use tessera_passes::{default_config, tile_ir, Target};

use super::execute::emulate;
use super::{check_kernel, SEED};
use crate::hopper_cases::{
    gemm_files, lower_cases, root, shapes_of, with_wgmma, Case, Staging, ATTENTION_FILES, FP8_FIXTURE, INT8_FIXTURE,
    OPERANDS_FIXTURE, WGMMA_FIXTURE,
};

/// Emulates a case at each of its shapes against the interpreter (through
/// `check_kernel`) and the Graph IR's f64 reference; returns the failures.
fn check_against_both(case: &Case) -> Vec<String> {
    let mut failures = Vec::new();
    for spec in shapes_of(&case.kernel, &case.config, &case.func) {
        failures.extend(check_kernel(&case.label, &case.kernel, &case.func, &case.code, spec));
        let what = format!("{} `{}` [{spec}]", case.label, case.kernel);
        let inputs = seeded(&case.func, &crate::kernel_sources::parse_dims(spec), SEED).unwrap();
        failures.extend(case.check(&what, &inputs, |actual| emulate(&case.code, actual).map(|_| ())));
    }
    failures
}

#[test]
fn wgmma_gemms_compute_what_the_interpreter_and_the_reference_compute() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    let covered = emulate_files(&gemm_files(&[]), Staging::Own, only.as_deref());
    if only.is_none() {
        // Six kernels of the fixture (the derived one too), two FP8 ones, and the
        // examples' and corpus's GEMMs whose default schedules admit wgmma: gemm (x2),
        // linear_gelu, small/narrow/square_matmul, chained_gemm, auto_gemm.
        assert!(covered >= 16, "only {covered} kernels ran with wgmma");
    }
}

/// Flash attention with `mma = "wgmma"`: `Q @ K.T` reads K K-major from shared memory
/// (`imm-trans-b = 0`), `P @ V` takes P from registers in the accumulator's fragment
/// layout; every candidate of the example's space that admits wgmma, the corpus kernel's
/// default, at a whole and a ragged sequence length.
#[test]
fn wgmma_attention_computes_what_the_interpreter_and_the_reference_compute() {
    let covered = emulate_files(ATTENTION_FILES, Staging::Own, None);
    assert!(covered >= 2, "only {covered} attention kernels ran with wgmma");
}

/// Emulates the cases of each `(file, every candidate)` staged as `staging` says (only
/// the files whose name contains `only`), prints what the rules skipped, fails on any
/// failure, and returns how many kernels ran.
pub(crate) fn emulate_files(files: &[(&str, bool)], staging: Staging, only: Option<&str>) -> usize {
    let (cases, skipped, mut failures) = lower_cases(files, staging, only);
    for s in &skipped {
        eprintln!("not {staging:?}: {s}");
    }
    for case in &cases {
        failures.extend(check_against_both(case));
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    cases.len()
}

/// `copy = "tma"`: the staged operands arrive by TMA boxes through tensor maps, completed
/// on a ring of mbarriers. The same GEMMs, attention kernels and shapes (ragged ones
/// too: the boxes' out-of-bounds parts are zeros) against the interpreter and the f64
/// reference.
#[test]
fn tma_copies_feed_wgmma_what_the_interpreter_and_the_reference_compute() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    let covered = emulate_files(&gemm_files(&["examples/flash_attention.tsr"]), Staging::Tma, only.as_deref());
    if only.is_none() {
        assert!(covered >= 12, "only {covered} kernels ran with TMA copies");
    }
}

/// Flash attention with TMA copies and no producer, every candidate of the example's
/// space: two commit groups per iteration (K and V), so the mbarrier ring holds two per
/// stage. (With one per stage, three stages reused a barrier in the prologue, before any
/// thread had waited for its first phase; `analysis::phases` found it.)
#[test]
fn tma_attention_every_candidate_computes_what_the_interpreter_and_the_reference_compute() {
    let covered = emulate_files(ATTENTION_FILES, Staging::Tma, None);
    assert!(covered >= 10, "only {covered} attention configurations ran with TMA copies");
}

// ----- planted bugs ------------------------------------------------------------------

/// Tile IR and PTX of `kernel` of `fixture` under its own schedule.
fn fixture_case(fixture: &str, kernel: &str) -> (Func, TargetCode) {
    schedule_case(fixture, kernel, Staging::Own)
}

/// Tile IR and PTX of `kernel` of `fixture` under its own schedule, staged as `staging`
/// says.
pub(crate) fn schedule_case(fixture: &str, kernel: &str, staging: Staging) -> (Func, TargetCode) {
    let db = Database::default();
    let path = root().join(fixture);
    let file = SourceFile::new(&db, path.clone(), std::fs::read_to_string(&path).unwrap(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
    let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
    let config = if staging == Staging::Own { config } else { with_wgmma(&config, staging) };
    let func = (*tile_ir(&db, key, config, Target::Sm90).clone().unwrap()).clone();
    let code = tessera_passes::ptx::emit(&func, Target::Sm90).unwrap();
    (func, code)
}

/// PTX of a kernel of the fixture, its Tile IR and the descriptors' constant words.
fn planted_case(kernel: &str) -> (Func, TargetCode, [u32; 2]) {
    let (func, code) = fixture_case(WGMMA_FIXTURE, kernel);
    let dot = func.walk().into_iter().find(|&id| func.op(id).kind == OpKind::Dot).unwrap();
    let slot = |i: usize| match func.ty(func.op(dot).operands[i]) {
        Type::Smem(s) => s.clone(),
        other => panic!("a wgmma operand of type {other}"),
    };
    let (da, db_) = tessera_passes::ptx::wgmma::operand_descriptors(&slot(0), &slot(1)).unwrap();
    (func, code, [da.high_word(), db_.high_word()])
}

/// Runs `code` on a ragged shape; Ok when it matches the interpreter, else what failed.
fn run_case(func: &Func, code: &TargetCode) -> Result<(), String> {
    run_at(func, code, "M=70,N=36,K=40")
}

/// Runs `code` at `shape`; Ok when it matches the interpreter, else what failed.
pub(crate) fn run_at(func: &Func, code: &TargetCode, shape: &str) -> Result<(), String> {
    let failures = check_kernel("planted", &func.name, func, code, shape);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// Replaces the `mov.b32 %r, WORD` of a descriptor's high word by `new` (at least once).
fn corrupt_high_word(ptx: &str, word: u32, new: u32) -> String {
    let (from, to) = (format!(", {word};"), format!(", {new};"));
    let out: Vec<String> =
        ptx.lines()
            .map(|l| {
                if l.trim_start().starts_with("mov.b32") && l.ends_with(&from) {
                    l.replace(&from, &to)
                } else {
                    l.into()
                }
            })
            .collect();
    assert_ne!(out.join("\n"), ptx.trim_end(), "no high word {word} to corrupt");
    out.join("\n") + "\n"
}

/// A descriptor with the wrong swizzle mode or the wrong SBO makes the emulated kernel
/// compute something else than the interpreter (the same kernel, untouched, matches).
#[test]
fn a_wrong_swizzle_mode_or_sbo_in_a_descriptor_fails() {
    for kernel in ["two_warpgroups", "wide_n_relu"] {
        let (func, code, [a_high, b_high]) = planted_case(kernel);
        assert_ne!(a_high, b_high, "`{kernel}`: A and B need their own descriptor words to plant each");
        run_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted `{kernel}` fails: {e}"));
        let mode = |high: u32| high >> 30;
        let with_mode = |high: u32, m: u32| (high & 0x3fff_ffff) | (m << 30);
        let sbo = |high: u32| high & 0x3fff;
        let plants = [
            ("A's swizzle mode", a_high, with_mode(a_high, if mode(a_high) == 1 { 2 } else { 1 })),
            ("B's swizzle mode", b_high, with_mode(b_high, if mode(b_high) == 1 { 3 } else { 1 })),
            ("A's SBO halved", a_high, (a_high & !0x3fff) | (sbo(a_high) / 2)),
            ("B's SBO doubled", b_high, (b_high & !0x3fff) | (sbo(b_high) * 2)),
        ];
        for (what, word, new) in plants {
            let mut bad = code.clone();
            bad.text = corrupt_high_word(&code.text, word, new);
            let result = run_case(&func, &bad);
            assert!(result.is_err(), "`{kernel}` with {what} ({word:#x} -> {new:#x}) still matches the interpreter");
            eprintln!("`{kernel}` with {what}: {}", result.unwrap_err().lines().next().unwrap_or(""));
        }
    }
}

/// The emulator holds the PTX to the ISA's ordering rules: without `wgmma.wait_group` the
/// accumulator is read while in flight, without `wgmma.fence` the wgmma follows writes
/// of its accumulator, without `fence.proxy.async` it reads shared bytes the generic
/// proxy wrote; each is an error, where the untouched kernel runs clean.
#[test]
fn missing_waits_and_fences_are_errors() {
    let (func, code, _) = planted_case("two_tiles_narrow_b");
    run_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted kernel fails: {e}"));
    let drop_lines = |pattern: &str| {
        let text: Vec<&str> = code.text.lines().filter(|l| l.trim() != pattern).collect();
        assert!(text.len() < code.text.lines().count(), "no `{pattern}` in the PTX");
        TargetCode { text: text.join("\n") + "\n", ..code.clone() }
    };
    for (pattern, expected) in [
        ("wgmma.wait_group.sync.aligned 0;", "in flight"),
        ("wgmma.fence.sync.aligned;", "wgmma.fence"),
        ("fence.proxy.async.shared::cta;", "fence.proxy.async"),
    ] {
        let err = run_case(&func, &drop_lines(pattern)).expect_err(pattern);
        assert!(err.contains(expected), "without `{pattern}`: {err}");
    }
}

/// Rewrites every `wgmma.mma_async` line with `edit`; panics if none changed.
fn edit_wgmmas(code: &TargetCode, edit: impl Fn(&str) -> String) -> TargetCode {
    let text: Vec<String> =
        code.text.lines().map(|l| if l.contains("wgmma.mma_async") { edit(l) } else { l.to_string() }).collect();
    let text = text.join("\n");
    assert_ne!(text, code.text, "nothing to plant");
    TargetCode { text, ..code.clone() }
}

/// A K-major B read as N-major (`imm-trans-b = 1`), an A fragment with its middle
/// registers swapped (rows 8.. and columns 8.. exchanged), and an M-major A read K-major
/// must not match.
#[test]
fn a_wrong_operand_major_or_a_fragment_order_fails() {
    let (func, code) = fixture_case(OPERANDS_FIXTURE, "k_major_b");
    run_case(&func, &code).unwrap();
    let wrong = edit_wgmmas(&code, |l| l.replace(", 1, 1, 0, 0;", ", 1, 1, 0, 1;"));
    assert!(run_case(&func, &wrong).is_err(), "an N-major reading of a K-major B passed");

    let (func, code) = fixture_case(OPERANDS_FIXTURE, "a_in_registers");
    run_case(&func, &code).unwrap();
    let wrong = edit_wgmmas(&code, |l| {
        let (head, rest) = l.split_once("}, {").unwrap();
        let (regs, tail) = rest.split_once('}').unwrap();
        let r: Vec<&str> = regs.split(", ").collect();
        format!("{head}}}, {{{}, {}, {}, {}}}{tail}", r[0], r[2], r[1], r[3])
    });
    assert!(run_case(&func, &wrong).is_err(), "a swapped A fragment passed");

    // An M-major A (`X.T` of a `[K, M]` tile) read K-major (`imm-trans-a = 0`): it reads
    // other elements of its slot, or bytes past it (the B slot's).
    let (func, code) = fixture_case(OPERANDS_FIXTURE, "m_major_a");
    run_case(&func, &code).unwrap();
    let wrong = edit_wgmmas(&code, |l| l.replace(", 1, 1, 1, 1;", ", 1, 1, 0, 1;"));
    assert!(run_case(&func, &wrong).is_err(), "an M-major A read K-major passed");
}

/// An int8 `wgmma` whose operands are read unsigned (`.u8`: -1 becomes 255), or whose
/// accumulator restarts from zero at every k step (`scale-d` false), must not match.
#[test]
fn an_int8_wgmma_read_unsigned_or_restarted_fails() {
    let (func, code) = fixture_case(INT8_FIXTURE, "w8a8_linear");
    run_case(&func, &code).unwrap();
    let unsigned = edit_wgmmas(&code, |l| l.replace(".s32.s8.s8", ".s32.u8.u8"));
    let err = run_case(&func, &unsigned).expect_err("int8 operands read as u8 passed");
    assert!(err.contains("elements differ"), "{err}");
    let restarted = edit_wgmmas(&code, |l| {
        let (head, scale_d) = l.trim_end_matches(';').rsplit_once(", ").unwrap();
        assert!(scale_d.starts_with("%p"), "{l}");
        format!("{head}, 0;")
    });
    let err = run_case(&func, &restarted).expect_err("a sum restarted at every k step passed");
    assert!(err.contains("elements differ"), "{err}");
}

// ----- copy = "tma": planted bugs ------------------------------------------------------

/// Tile IR and PTX of a fixture kernel under its own schedule with `copy = "tma"`.
fn tma_case(fixture: &str, kernel: &str) -> (Func, TargetCode) {
    let (func, code) = schedule_case(fixture, kernel, Staging::Tma);
    assert!(code.text.contains("cp.async.bulk.tensor"), "`{kernel}`: no TMA copy");
    (func, code)
}

/// A ragged shape whose rows are whole 16-byte multiples (a tensor map's strides).
pub(crate) fn run_tma_case(func: &Func, code: &TargetCode) -> Result<(), String> {
    run_at(func, code, "M=70,N=40,K=48")
}

/// A tensor map whose swizzle is not the descriptors', a box coordinate off by one
/// column block, and a missing or wrong-parity mbarrier wait must each fail, where the
/// untouched kernel matches the interpreter.
#[test]
fn a_wrong_tensor_map_coordinate_or_mbarrier_wait_fails() {
    let mut swizzles_planted = 0;
    for kernel in ["two_warpgroups", "two_tiles_narrow_b", "wide_n_relu"] {
        let (func, code) = tma_case(WGMMA_FIXTURE, kernel);
        run_tma_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted `{kernel}` fails: {e}"));
        // The launcher encodes a wider swizzle than the one the descriptors read (same
        // box: a narrower span could not hold its rows, which the driver refuses), one
        // map at a time: two wrong maps can undo each other (an A box and the TMA store's
        // box with the same row bytes permute C's rows alike).
        for i in 0..code.abi.tensor_maps.len() {
            let mut bad = code.clone();
            if bad.abi.tensor_maps[i].swizzle_bytes >= 128 {
                continue;
            }
            bad.abi.tensor_maps[i].swizzle_bytes *= 2;
            assert!(run_tma_case(&func, &bad).is_err(), "`{kernel}`: tensor map {i} with the wrong swizzle passed");
            swizzles_planted += 1;
        }
        // Every box one element further along the contiguous dim.
        let shifted: Vec<String> = code
            .text
            .lines()
            .map(|l| match l.split_once(", {") {
                Some((head, rest)) if l.contains("cp.async.bulk.tensor") => {
                    let (first, tail) = rest.split_once(',').unwrap();
                    format!("{head}, {{{first}+1,{tail}")
                }
                _ => l.to_string(),
            })
            .collect();
        let shifted = TargetCode { text: shifted.join("\n"), ..code.clone() };
        assert!(shifted.text != code.text);
        // `%r5+1` is not an operand the emulator reads: the shift must be a real add.
        let shifted = TargetCode {
            text: shifted
                .text
                .lines()
                .map(|l| {
                    if let Some((head, rest)) = l.split_once(", {").filter(|_| l.contains("+1,")) {
                        let (reg, tail) = rest.split_once("+1,").unwrap();
                        format!("add.u32 {reg}, {reg}, 1;\n{head}, {{{reg},{tail}")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            ..code.clone()
        };
        let result = run_tma_case(&func, &shifted);
        assert!(result.is_err(), "`{kernel}`: boxes one column off still match");
    }
    assert!(swizzles_planted > 0, "no tensor map with a swizzle below 128 bytes to plant");
    let (func, code) = tma_case(WGMMA_FIXTURE, "two_warpgroups");
    // Without the waits, wgmma reads boxes in flight (or the kernel ends with them).
    let no_wait: Vec<&str> = code.text.lines().filter(|l| !l.contains("mbarrier.try_wait")).collect();
    let no_wait = TargetCode { text: no_wait.join("\n"), ..code.clone() };
    let err = run_tma_case(&func, &no_wait).expect_err("no mbarrier wait");
    assert!(err.contains("in flight") || err.contains("TMA copies") || err.contains("before any write"), "{err}");
    // Waiting on the other parity passes at once, before the boxes land.
    let flipped: Vec<String> = code
        .text
        .lines()
        .map(|l| match l.trim().strip_prefix("mbarrier.try_wait.parity.shared::cta.b64 ") {
            Some(operands) => {
                let parity = operands.rsplit(", ").next().unwrap().trim_end_matches(';');
                format!("\txor.b32 {parity}, {parity}, 1;\n{l}")
            }
            None => l.to_string(),
        })
        .collect();
    let flipped = TargetCode { text: flipped.join("\n"), ..code.clone() };
    let err = run_tma_case(&func, &flipped).expect_err("a wait on the wrong parity");
    assert!(err.contains("in flight") || err.contains("TMA copies"), "{err}");
}

/// A tensor whose rows are not a multiple of 16 bytes cannot have a tensor map: the
/// launch is refused (as the driver refuses to encode it), not run on wrong data.
#[test]
fn a_tensor_map_of_unaligned_rows_is_refused() {
    let (func, code) = tma_case(WGMMA_FIXTURE, "two_warpgroups");
    let failures = check_kernel("planted", &func.name, &func, &code, "M=70,N=36,K=40");
    assert!(failures.iter().any(|f| f.contains("cuTensorMapEncodeTiled")), "{failures:#?}");
}

/// Under `copy = "tma"` the epilogue's store goes out through shared memory and a TMA
/// store. Without the wait for its shared reads, without the proxy fence before its
/// barrier, or with its box one row off, the kernel must fail, where the untouched one
/// matches the interpreter (ragged: the box parts outside C are not written).
#[test]
fn a_tma_store_without_its_wait_or_fence_or_one_row_off_fails() {
    let (func, code) = tma_case(WGMMA_FIXTURE, "two_warpgroups");
    assert!(func.walk().into_iter().any(|id| func.op(id).kind == OpKind::TmaStore), "no tile.tma_store");
    let store_line = |l: &str| l.contains("cp.async.bulk.tensor") && l.contains(".global.shared::cta");
    assert!(code.text.lines().any(store_line), "no TMA store in the PTX");
    run_tma_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted kernel fails: {e}"));
    let edit = |f: &dyn Fn(&[&str]) -> Vec<String>| {
        let lines: Vec<&str> = code.text.lines().collect();
        TargetCode { text: f(&lines).join("\n"), ..code.clone() }
    };
    let no_wait =
        edit(&|ls| ls.iter().filter(|l| !l.contains("cp.async.bulk.wait_group.read")).map(|l| l.to_string()).collect());
    let err = run_tma_case(&func, &no_wait).expect_err("no wait for the store's reads");
    assert!(err.contains("TMA stores"), "{err}");
    // The fence of the barrier just before the store.
    let no_fence = edit(&|ls| {
        let store = ls.iter().position(|l| store_line(l)).unwrap();
        let fence = ls[..store].iter().rposition(|l| l.contains("fence.proxy.async")).unwrap();
        ls.iter().enumerate().filter(|&(i, _)| i != fence).map(|(_, l)| l.to_string()).collect()
    });
    let err = run_tma_case(&func, &no_fence).expect_err("no proxy fence before the store");
    assert!(err.contains("fence.proxy.async"), "{err}");
    // The box's row coordinate (its second) one further.
    let shifted = edit(&|ls| {
        ls.iter()
            .map(|l| match l.split_once(", {").filter(|_| store_line(l)) {
                Some((head, rest)) => {
                    let (inner, tail) = rest.split_once(", ").unwrap();
                    let (row, tail) = tail.split_once('}').unwrap();
                    assert!(row.starts_with('%'), "the row coordinate {row} is no register to shift");
                    format!("\tadd.u32 {row}, {row}, 1;\n{head}, {{{inner}, {row}}}{tail}")
                }
                None => l.to_string(),
            })
            .collect()
    });
    assert!(shifted.text != code.text);
    assert!(run_tma_case(&func, &shifted).is_err(), "a store box one row off still matches");
}

/// A TMA store's buffer after the staging rings' last use takes their memory: the
/// kernel's shared memory is that of its other buffers, and it still computes what the
/// interpreter computes.
#[test]
fn a_tma_store_buffer_reuses_the_dead_staging_rings() {
    let (func, code) = tma_case(FP8_FIXTURE, "fp8_gemm_tn");
    let bytes = |id| match func.ty(func.op(id).results[0]) {
        Type::Smem(s) => s.bytes().unwrap(),
        _ => 0,
    };
    let allocs: Vec<_> = func.walk().into_iter().filter(|&id| func.op(id).kind == OpKind::AllocShared).collect();
    let reused: Vec<_> =
        allocs.iter().copied().filter(|&id| tessera_passes::tma::reuses_staging(func.op(id))).collect();
    assert_eq!(reused.len(), 1, "no TMA store buffer in the staging rings' memory");
    let others: u64 = allocs.iter().filter(|id| !reused.contains(id)).map(|&id| bytes(id)).sum();
    assert!(code.smem_bytes < others + bytes(reused[0]), "{} bytes: the buffer was added", code.smem_bytes);
    assert!(code.smem_bytes >= others);
    run_tma_case(&func, &code).unwrap_or_else(|e| panic!("{e}"));
}
