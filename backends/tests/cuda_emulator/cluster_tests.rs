//! `cluster = (x, y)` (thread-block clusters with TMA multicast, sm_90a) through the
//! emulator: each program of a cluster loads a slice of every box its peers share and
//! multicasts it; the consumers release every peer's slot. GEMMs under three cluster
//! shapes and attention with its query blocks clustered, against the interpreter and the
//! f64 reference at whole and ragged shapes (the grid rounded up to whole clusters), and
//! a planted bug in the protocol that must fail.

use super::wgmma_tests::{emulate_files, run_at, schedule_case};
use crate::hopper_cases::{gemm_files, Staging};

#[test]
fn clustered_gemms_multicast_what_the_interpreter_and_the_reference_compute() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    for shape in [[2, 1], [1, 2], [2, 2]] {
        let covered = emulate_files(&gemm_files(&[]), Staging::Cluster(shape), only.as_deref());
        eprintln!("{covered} GEMMs ran in clusters of {shape:?}");
        if only.is_none() {
            assert!(covered >= 10, "only {covered} GEMMs ran in clusters of {shape:?}");
        }
    }
    // With ping-pong consumers too (the fixture's GEMMs).
    let covered =
        emulate_files(&gemm_files(&[]), Staging::ClusterPingPong([2, 1]), only.as_deref().or(Some("wgmma/gemms")));
    eprintln!("{covered} GEMMs ran in clusters of [2, 1] with ping-pong consumers");
    assert!(covered >= 4, "only {covered} GEMMs ran in clusters with ping-pong consumers");
}

/// Attention's K and V are the same for every query block of a head: clustered along
/// the query blocks (the grid's second axis) they are multicast. Every candidate of the
/// corpus kernel's space, whose K loop runs over the whole sequence (the example's
/// causal loop stops at the diagonal, a bound that differs per query block, which the
/// rule refuses).
#[test]
fn clustered_attention_multicasts_k_and_v() {
    let files = [("tests/corpus/valid/flash_attention.tsr", true), ("examples/flash_attention.tsr", false)];
    let covered = emulate_files(&files, Staging::Cluster([1, 2]), None);
    eprintln!("{covered} attention configurations ran in clusters of two query blocks");
    assert!(covered >= 5, "only {covered} attention configurations ran in clusters");
    // And with ping-pong consumers (both consumer warpgroups release their peers' slots).
    let covered = emulate_files(&files[..1], Staging::ClusterPingPong([1, 2]), None);
    eprintln!("{covered} attention configurations ran in clusters with ping-pong consumers");
    assert!(covered >= 2, "only {covered} attention configurations ran in clusters with ping-pong consumers");
}

/// The consumers wait at the cluster barrier before their program exits: without that
/// wait, the program that runs ahead (the emulator runs rank 0 four times as fast) exits
/// while its peer still releases slots on its empty barriers. Attention shows it: its
/// consumers release the last iteration's slots, which no later copy waits for. (A
/// GEMM's consumers leave the last iteration's slots unreleased, and the copies prefetched
/// past the end wait for the release before it, so there the chain of waits happens to
/// keep the programs together.)
#[test]
fn a_program_that_leaves_its_cluster_early_fails() {
    let (func, code) =
        schedule_case("tests/corpus/valid/flash_attention.tsr", "flash_attention", Staging::Cluster([1, 2]));
    let run = |code| run_at(&func, code, "BH=1,S=256,D=64");
    run(&code).unwrap_or_else(|e| panic!("the unplanted attention fails: {e}"));
    let mut early = code.clone();
    early.text =
        code.text.lines().filter(|l| l.trim() != "barrier.cluster.wait.acquire;").collect::<Vec<_>>().join("\n") + "\n";
    assert_ne!(early.text, code.text, "no final cluster wait to remove");
    let err = run(&early).expect_err("a program that exits before its peers are done with it");
    assert!(err.contains("which has exited"), "{err}");
}
