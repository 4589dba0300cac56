//! The program of a sharded function on its mesh (`graph_plan::plan_on_mesh`): every
//! collective waited for once, after its start, with no launch in between touching its
//! buffers, and started as early as they allow, so that the independent launches overlap
//! it; checked on every sharded function of the corpus, and the overlap of a
//! data-parallel step's gradient all-reduces counted.

use std::collections::BTreeMap;
use std::path::Path;

use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::dist::function::mesh_plan;
use tessera_passes::graph_plan::collective_overlaps;
use tessera_passes::ir::{Func, OpKind, ValueId};

fn corpus(name: &str) -> (Database, SourceFile) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid").join(name);
    let db = Database::default();
    let file = SourceFile::new(&db, path.clone(), std::fs::read_to_string(&path).unwrap(), None);
    (db, file)
}

/// A buffer and the views (`graph.reshape`) of it.
fn with_views(s: &Func, buffers: &[ValueId]) -> Vec<ValueId> {
    let mut all = buffers.to_vec();
    for op in &s.ops {
        if op.kind == OpKind::Reshape && op.operands.first().is_some_and(|o| all.contains(o)) {
            all.extend(op.results.iter().copied());
        }
    }
    all
}

/// The invariants of a schedule on the mesh; returns the number of collectives.
fn check(label: &str, s: &Func) -> usize {
    let order = &s.body.ops;
    let starts: Vec<usize> = (0..order.len()).filter(|&i| s.op(order[i]).kind == OpKind::CollectiveStart).collect();
    for &i in &starts {
        let start = s.op(order[i]);
        let token = start.results[0];
        let waits: Vec<usize> = (0..order.len())
            .filter(|&j| s.op(order[j]).kind == OpKind::CollectiveWait && s.op(order[j]).operands[0] == token)
            .collect();
        assert_eq!(waits.len(), 1, "{label}: {} waits for one start", waits.len());
        let w = waits[0];
        assert!(w > i, "{label}: a wait before its start");
        let buffers = with_views(s, &start.operands);
        let touches = |j: usize| s.op(order[j]).operands.iter().any(|o| buffers.contains(o));
        for (j, &id) in order.iter().enumerate().take(w).skip(i + 1) {
            let op = s.op(id);
            assert!(
                op.kind == OpKind::CollectiveWait || !touches(j),
                "{label}: {} touches the buffers of a collective in flight",
                op.str_attr("callee").unwrap_or(op.kind.name())
            );
        }
        // As early as the buffers allow: the launch right before the start touches them
        // (or it is the first launch, or a collective on them completed there).
        let previous_kernel = (0..i).rev().find(|&j| s.op(order[j]).kind == OpKind::Kernel);
        if let Some(p) = previous_kernel {
            let waited_here = (p + 1..i).any(|j| s.op(order[j]).kind == OpKind::CollectiveWait);
            assert!(
                touches(p) || waited_here,
                "{label}: a collective could have started before {:?}",
                s.op(order[p]).str_attr("callee")
            );
        }
    }
    starts.len()
}

#[test]
fn every_sharded_program_of_the_corpus_waits_for_its_collectives_where_it_must() {
    let mut collectives = 0;
    for name in [
        "megatron_mlp_sharded.tsr",
        "moe_expert_parallel.tsr",
        "pipeline_mlp.tsr",
        "sequence_parallel_mlp.tsr",
        "data_parallel_grad_buckets.tsr",
    ] {
        let (db, file) = corpus(name);
        for f in &item_index(&db, file).functions {
            let Ok(Some(plan)) = mesh_plan(&db, f.key, &BTreeMap::new()) else { continue };
            tessera_passes::ir::verify::verify(&plan.schedule).unwrap();
            collectives += check(&format!("{name} `{}`", f.key.name(&db)), &plan.schedule);
        }
    }
    assert!(collectives >= 5, "{collectives}");
}

#[test]
fn a_data_parallel_step_reduces_one_gradient_while_it_computes_the_other() {
    let (db, file) = corpus("data_parallel_grad_buckets.tsr");
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "dp_mlp_step").unwrap().key;
    // Two 16 MiB gradients: two buckets, two all-reduces.
    let dims = BTreeMap::from([("B".to_string(), 64), ("D".to_string(), 1024), ("F".to_string(), 4096)]);
    let plan = mesh_plan(&db, key, &dims).unwrap().unwrap();
    assert_eq!(check("dp_mlp_step", &plan.schedule), 2);
    let overlaps = collective_overlaps(&plan.schedule);
    // In Graph IR's order: W1's gradient (computed last, overlaps nothing), then W2's
    // (computed first in the backward pass, reduced while W1's is computed).
    assert_eq!(overlaps.len(), 2, "{overlaps:?}");
    assert!(overlaps[0].is_empty(), "{overlaps:?}");
    assert!(overlaps[1].iter().any(|k| k.ends_with("_matmul")), "{overlaps:?}");
    // At small sizes one bucket holds both gradients: it can only start when both are done.
    let small = BTreeMap::from([("B".to_string(), 8), ("D".to_string(), 32), ("F".to_string(), 64)]);
    let plan = mesh_plan(&db, key, &small).unwrap().unwrap();
    assert_eq!(check("dp_mlp_step (one bucket)", &plan.schedule), 1);
    assert_eq!(collective_overlaps(&plan.schedule), vec![Vec::<String>::new()]);
}

/// Two collectives on one buffer with nothing between them (a reduce-scatter written
/// twice): both start and complete before the kernel that reads the buffer, each wait
/// after its own start. The waits were put before every start of their slot, the first
/// collective's before its own start, and the plan did not verify.
#[test]
fn two_collectives_on_one_buffer_in_a_row_start_and_complete_in_order() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/valid/sequence_parallel_mlp.tsr"),
    )
    .unwrap();
    let line = "    y = dist.reduce_scatter(y, axis=\"tp\", dim=1)\n";
    assert!(text.contains(line));
    let text = text.replace(line, &format!("{line}{line}"));
    let db = Database::default();
    let file = SourceFile::new(&db, "twice.tsr".into(), text, None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "mlp").unwrap().key;
    let plan = mesh_plan(&db, key, &BTreeMap::new()).unwrap().unwrap();
    tessera_passes::ir::verify::verify(&plan.schedule).unwrap();
    assert_eq!(check("mlp with two reduce-scatters", &plan.schedule), 3);
    let kinds: Vec<OpKind> = plan
        .schedule
        .body
        .ops
        .iter()
        .map(|&id| plan.schedule.op(id).kind)
        .filter(|k| matches!(k, OpKind::CollectiveStart | OpKind::CollectiveWait))
        .collect();
    use OpKind::{CollectiveStart as Start, CollectiveWait as Wait};
    assert_eq!(kinds, [Start, Wait, Start, Wait, Start, Wait]);
}
