//! `producer = "warpgroup"` (warp specialization, sm_90a) through the emulator: a
//! producer warpgroup issues the TMA copies, the consumers run the `wgmma` dots and
//! release each slot on its empty mbarrier. The GEMMs that admit it, against the
//! interpreter and the f64 reference at whole and ragged shapes; and planted bugs in the
//! protocol that must fail.

use super::wgmma_tests::{emulate_files, run_at, run_tma_case, schedule_case};
use crate::hopper_cases::{gemm_files, Staging, ATTENTION_FILES, WGMMA_FIXTURE};

#[test]
fn a_producer_warpgroup_feeds_wgmma_what_the_interpreter_and_the_reference_compute() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    let covered = emulate_files(&gemm_files(&[]), Staging::Producer, only.as_deref());
    if only.is_none() {
        // The fixture's staged GEMMs (two_warpgroups, two_tiles_narrow_b, wide_n_relu,
        // explicit_buffers, derived_wgmma), the K-major B ones (k_major_b and the fp8
        // fixture's two), and the examples' and corpus's GEMMs the rule admits: 16.
        eprintln!("{covered} kernels ran with a producer warpgroup");
        assert!(covered >= 16, "only {covered} kernels ran with a producer warpgroup");
    }
}

/// The untouched kernel matches; without the producer's wait for an empty slot, without
/// the consumers' release, or with the epilogue's barrier waiting for the exited
/// producer too, it must fail.
#[test]
fn a_producer_that_does_not_wait_for_empty_slots_or_a_cta_barrier_after_it_exits_fails() {
    for kernel in ["two_warpgroups", "wide_n_relu"] {
        let (func, code) = schedule_case(WGMMA_FIXTURE, kernel, Staging::Producer);
        assert!(code.text.contains(".maxntid 384") || code.text.contains(".maxntid 256"), "{}", code.text);
        run_tma_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted `{kernel}` fails: {e}"));

        // The producer refills a slot without waiting for its empty barrier.
        let mut no_wait = code.clone();
        let lines: Vec<&str> = code.text.lines().collect();
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            // The retry branch after each empty-barrier try_wait.
            let after_empty_try = i > 0 && lines[i - 1].contains("mbarrier.try_wait") && lines[i - 1].contains("+");
            if after_empty_try && l.contains("bra $slot_try") {
                continue;
            }
            out.push(*l);
        }
        no_wait.text = out.join("\n") + "\n";
        assert_ne!(no_wait.text, code.text, "`{kernel}`: no empty-slot wait to remove");
        let err = run_tma_case(&func, &no_wait).expect_err("a producer that does not wait for empty slots");
        eprintln!("`{kernel}` without the empty-slot wait: {err}");

        // The epilogue's named barrier made CTA-wide: the producer has exited.
        let mut cta_wide = code.clone();
        cta_wide.text = code
            .text
            .lines()
            .map(|l| if l.trim_start().starts_with("bar.sync 1, ") { "\tbar.sync 0;" } else { l })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
        assert_ne!(cta_wide.text, code.text);
        let err = run_tma_case(&func, &cta_wide).expect_err("a CTA barrier after the producer exits");
        assert!(err.contains("after thread") && err.contains("exited"), "{err}");
    }
}

/// A GEMM's consumers keep one `wgmma` group in flight (`wait_group 1`, CUTLASS's
/// mainloop) and release an iteration's slots after the next dot's wait. Releasing them
/// right after the dot's own `wait_group 1` lets the producer refill a slot an in-flight
/// `wgmma` still reads, which must fail.
#[test]
fn consumers_keep_one_wgmma_group_in_flight_and_release_its_slot_after_the_next_wait() {
    for kernel in ["two_warpgroups", "wide_n_relu"] {
        let (func, code) = schedule_case(WGMMA_FIXTURE, kernel, Staging::Producer);
        assert!(code.text.contains("wgmma.wait_group.sync.aligned 1;"), "`{kernel}`: no group left in flight");
        run_tma_case(&func, &code).unwrap_or_else(|e| panic!("the unplanted `{kernel}` fails: {e}"));
        let mut early = code.clone();
        early.text =
            code.text.lines().filter(|l| !(l.contains("bra.uni $no_lag"))).collect::<Vec<_>>().join("\n") + "\n";
        assert_ne!(early.text, code.text, "`{kernel}`: no lagged release to remove");
        let err = run_tma_case(&func, &early).expect_err("a slot released while a wgmma reads it");
        assert!(err.contains("an in-flight wgmma.mma_async still reads"), "`{kernel}`: {err}");
    }
}

/// Flash attention with a producer warpgroup (FlashAttention-3's structure): it issues
/// Q once and K and V each iteration by TMA; the consumers run both dots and the online
/// softmax in registers and release K's and V's slots after the second dot. Every
/// candidate of the example's space and the corpus kernel's default, causal, at a whole
/// and a ragged sequence length, against the interpreter and the f64 reference.
#[test]
fn a_producer_warpgroup_feeds_flash_attention() {
    let covered = emulate_files(ATTENTION_FILES, Staging::Producer, None);
    eprintln!("{covered} attention configurations ran with a producer warpgroup");
    assert!(covered >= 5, "only {covered} attention configurations ran with a producer warpgroup");
}

/// `producer = "pingpong"`: two consumer warpgroups take turns at the first dot (named
/// barriers 2 and 3), so one's softmax overlaps the other's `Q @ K.T`. Attention and the
/// GEMMs, against the interpreter and the f64 reference.
#[test]
fn ping_pong_consumers_compute_what_the_interpreter_and_the_reference_compute() {
    let attention = emulate_files(ATTENTION_FILES, Staging::PingPong, None);
    eprintln!("{attention} attention configurations ran with ping-pong consumers");
    assert!(attention >= 3, "only {attention} attention configurations ran with ping-pong consumers");
    let only = std::env::var("TESSERA_EMULATE").ok();
    let gemms = emulate_files(&gemm_files(&[]), Staging::PingPong, only.as_deref().or(Some("wgmma/gemms")));
    eprintln!("{gemms} GEMMs ran with ping-pong consumers");
    assert!(gemms >= 4, "only {gemms} GEMMs ran with ping-pong consumers");
}

/// Ping-pong's turns must balance: without the first warpgroup's last wait the kernel
/// ends with an arrival nobody consumed. (Without the second warpgroup's first arrival
/// neither gets a turn; the emulator sees that only as the producer's endless wait for
/// an empty slot, after its 20 million steps, too slow for a test.)
#[test]
fn ping_pong_turns_that_do_not_balance_fail() {
    let (func, code) = schedule_case("examples/flash_attention.tsr", "flash_attention", Staging::PingPong);
    let run = |code: &tessera_passes::codegen::TargetCode| run_at(&func, code, "BH=2,S=100,D=64");
    run(&code).unwrap_or_else(|e| panic!("the unplanted attention fails: {e}"));
    // The first warpgroup's wait after the loop: the last `bar.sync 2` (the one in the
    // loop is its wait for its turn).
    let lines: Vec<&str> = code.text.lines().collect();
    let last = lines.iter().rposition(|l| l.trim_end().ends_with("bar.sync 2, 256;")).expect("the last turn");
    let mut no_last = code.clone();
    no_last.text =
        lines.iter().enumerate().filter(|&(i, _)| i != last).map(|(_, l)| *l).collect::<Vec<_>>().join("\n") + "\n";
    let err = run(&no_last).expect_err("a turn nobody takes");
    assert!(err.contains("arrivals at barrier 2"), "{err}");
}
