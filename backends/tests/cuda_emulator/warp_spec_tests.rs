//! `producer = "warpgroup"` (warp specialization, sm_90a) through the emulator: a
//! producer warpgroup issues the TMA copies, the consumers run the `wgmma` dots and
//! release each slot on its empty mbarrier. The GEMMs that admit it, against the
//! interpreter and the f64 reference at whole and ragged shapes; and planted bugs in the
//! protocol that must fail.

use super::wgmma_tests::{emulate_files, gemm_files, run_tma_case, schedule_case, Staging, WGMMA_FIXTURE};

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
