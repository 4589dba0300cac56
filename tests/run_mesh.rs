//! `tessera run` of a sharded graph function through the real binary: the single-device
//! run and the simulated-mesh run, each checked against the f64 reference, and the mesh
//! report (devices, collectives with their cost, bytes moved) in text and JSON.

use std::process::Command;

fn tessera(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const MLP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/megatron_mlp_sharded.tsr");

#[test]
fn a_sharded_mlp_runs_on_the_simulated_mesh_and_reports_its_all_reduce() {
    let (code, out, err) =
        tessera(&["run", "--kernel", "mlp", "--device", "interp", "--dims", "B=16,D=32,F=64", "--json", MLP]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["verdict"], "correct");
    let mesh = &report["mesh"];
    assert_eq!(mesh["devices"], 8, "{mesh}");
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    let collectives = mesh["collectives"].as_array().unwrap();
    assert_eq!(collectives.len(), 1, "{mesh}");
    assert_eq!(collectives[0]["kind"], "all_reduce");
    assert_eq!(collectives[0]["axis"], "tp");
    // [B/dp, D] on each device, a partial sum reduced in f32: 4 × 32 × 4 bytes; a
    // 2-device ring sends it once.
    assert_eq!(collectives[0]["bytes_per_device"], 512);
    assert_eq!(mesh["bytes_sent_busiest_device"], 512, "{mesh}");

    let (code, text, _) = tessera(&["run", "--kernel", "mlp", "--device", "interp", "--dims", "B=16,D=32,F=64", MLP]);
    assert_eq!(code, 0);
    assert!(text.contains("mesh      8 simulated devices (dp=4, tp=2)"), "{text}");
    assert!(text.contains("all_reduce over tp: 512 bytes/device, ring"), "{text}");
    assert!(text.contains("mesh      correct"), "{text}");
}

#[test]
fn a_dim_that_does_not_split_is_a_clean_failure_at_run_time() {
    // B = 6 does not split over the 4 devices of `dp`.
    let (code, out, err) = tessera(&["run", "--kernel", "mlp", "--device", "interp", "--dims", "B=6,D=32,F=64", MLP]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("do not split over 4 devices"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

const SEQUENCE_PARALLEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/sequence_parallel_mlp.tsr");

#[test]
fn written_collectives_run_on_one_device_and_on_the_mesh() {
    let (code, out, err) = tessera(&[
        "run",
        "--kernel",
        "mlp",
        "--device",
        "interp",
        "--dims",
        "B=4,S=8,D=16,F=32",
        "--json",
        SEQUENCE_PARALLEL,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    // On one device a collective is its operand: the plan launches nothing for it.
    assert_eq!(report["verdict"], "correct");
    let mesh = &report["mesh"];
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    let collectives: Vec<(&str, bool)> = mesh["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["explicit"].as_bool().unwrap()))
        .collect();
    assert_eq!(collectives, [("reduce_scatter", true), ("all_gather", true)], "{mesh}");
    // [B/dp, S, D] = [1, 8, 16] f32 on each device: 512 bytes reduce-scattered over 2
    // devices (256 sent), then 256-byte halves gathered back (256 sent).
    assert_eq!(mesh["bytes_sent_busiest_device"], 512, "{mesh}");
}

const MOE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/moe_expert_parallel.tsr");

#[test]
fn a_mixture_of_experts_runs_on_one_device_and_with_its_experts_over_the_mesh() {
    // `C` is an int parameter and a dim: `--dims C=3` gives both, and a disagreeing
    // `--arg` is refused rather than run with two values.
    let dims = "G=4,S=16,M=8,E=8,F=16,C=3";
    let (code, out, err) = tessera(&["run", "--kernel", "moe", "--device", "interp", "--dims", dims, "--json", MOE]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["verdict"], "correct");
    let mesh = &report["mesh"];
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    let kinds: Vec<&str> =
        mesh["collectives"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["all_to_all", "all_to_all"], "{mesh}");
    // Each device's [1, 8, 3, 8] f32 block (768 bytes), 3/4 of it sent, twice.
    assert_eq!(mesh["collectives"][0]["bytes_per_device"], 768, "{mesh}");
    assert_eq!(mesh["bytes_sent_busiest_device"], 1152, "{mesh}");
    let (code, _, err) =
        tessera(&["run", "--kernel", "moe", "--device", "interp", "--dims", dims, "--arg", "C=2", MOE]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--arg C=2 and the dim C = 3 disagree"), "{err}");
}

const PIPELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/pipeline_mlp.tsr");

/// `tessera run --json` of `kernel` of `file` at B=8, D=4, F=8 on the interpreter: the
/// `mesh` object, after both runs were checked correct.
fn correct_mesh_run(kernel: &str, file: &str) -> serde_json::Value {
    let (code, out, err) =
        tessera(&["run", "--kernel", kernel, "--device", "interp", "--dims", "B=8,D=4,F=8", "--json", file]);
    assert_eq!(code, 0, "{out}\n{err}");
    let mut report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["verdict"], "correct");
    let mesh = report["mesh"].take();
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    mesh
}

/// `tessera lower --stage graph` of `kernel` of `file`.
fn graph_ir_text(kernel: &str, file: &str) -> String {
    let (code, text, err) = tessera(&["lower", "--kernel", kernel, "--stage", "graph", file]);
    assert_eq!(code, 0, "{err}");
    text
}

#[test]
fn a_pipeline_runs_its_gpipe_schedule_on_the_mesh_and_shows_it() {
    let mesh = correct_mesh_run("mlp", PIPELINE);
    let pipeline = &mesh["pipelines"][0];
    assert_eq!((pipeline["stages"].as_u64(), pipeline["microbatches"].as_u64()), (Some(2), Some(4)), "{mesh}");
    assert_eq!(pipeline["schedule"], serde_json::json!([[0, 1, 2, 3, null], [null, 0, 1, 2, 3]]), "{mesh}");
    // Four [2, 4] f32 activations from stage 0 to stage 1.
    assert_eq!(mesh["bytes_sent_busiest_device"], 128, "{mesh}");

    // `tessera lower` shows the schedule Graph IR holds.
    let text = graph_ir_text("mlp", PIPELINE);
    assert!(text.contains("// GPipe over `pp`: 2 stages x 4 microbatches in 5 ticks"), "{text}");
    assert!(text.contains("//   stage 1     .   m0   m1   m2   m3"), "{text}");
    assert_eq!(text.matches("dist.send").count(), 4, "{text}");
}

const PIPELINE_GRAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/pipeline_grad.tsr");

#[test]
fn grad_through_a_pipeline_runs_the_backward_ticks_and_shows_them() {
    let mesh = correct_mesh_run("pipeline_step", PIPELINE_GRAD);
    let pipeline = &mesh["pipelines"][0];
    assert_eq!(pipeline["backward_from_tick"], 5, "{mesh}");
    assert_eq!(
        pipeline["schedule"],
        serde_json::json!([[0, 1, 2, 3, null, null, 3, 2, 1, 0], [null, 0, 1, 2, 3, 3, 2, 1, 0, null]]),
        "{mesh}"
    );
    // Each stage sends four [2, 4] f32 tensors: activations forward, gradients back.
    assert_eq!(mesh["bytes_sent_busiest_device"], 128, "{mesh}");

    let text = graph_ir_text("pipeline_step", PIPELINE_GRAD);
    assert!(text.contains("2 stages x 4 microbatches, forward (m) then backward (b), in 10 ticks"), "{text}");
    assert!(text.contains("//   stage 0    m0   m1   m2   m3    .    .   b3   b2   b1   b0"), "{text}");
    assert_eq!(text.matches("dist.send").count(), 8, "{text}");
}

#[test]
fn mesh_n_runs_an_unsharded_function_data_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dp.tsr");
    std::fs::write(
        &file,
        r#"from tessera import *

@jit
def loss(x: Tensor["B", "D", f32], W: Tensor["D", "E", f32], y: Tensor["B", "E", f32]):
    p = softmax_safe(matmul(x, W))
    return mean((p - y) * (p - y)), p

@kernel
def scale(x: Tensor["N", f32]):
    i = tile.linear_id()
    tile.store(x[i], tile.load(x[i]) * 2.0, mask=i < N)
"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (code, out, err) = tessera(&[
        "run",
        "--kernel",
        "loss",
        "--device",
        "interp",
        "--dims",
        "B=16,D=8,E=4",
        "--mesh",
        "8",
        "--json",
        path,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mesh = &report["mesh"];
    assert_eq!(mesh["devices"], 8, "{mesh}");
    assert_eq!(mesh["verdict"], "correct", "{mesh}");
    // The batch (dim 0 of x, and of y, which shares it) over dp; W whole everywhere.
    assert_eq!(mesh["layouts"], serde_json::json!({"x": "[dp, -]", "W": "[-, -]", "y": "[dp, -]"}), "{mesh}");
    // The mean over the batch is a partial sum on each device: one all-reduce.
    let kinds: Vec<&str> =
        mesh["collectives"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["all_reduce"], "{mesh}");

    // A batch that does not split, a sharded function and a kernel are refused cleanly.
    let (code, _, err) =
        tessera(&["run", "--kernel", "loss", "--device", "interp", "--dims", "B=6,D=8,E=4", "--mesh", "4", path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("dim 0 of `x` has 6 elements, which do not split over 4 devices"), "{err}");
    let (code, _, err) = tessera(&["run", "--kernel", "mlp", "--device", "interp", "--mesh", "4", MLP]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mesh is for unsharded functions"), "{err}");
    let (code, _, err) = tessera(&["run", "--kernel", "scale", "--device", "interp", "--mesh", "4", path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`scale` is a kernel"), "{err}");
}

#[test]
fn the_program_on_the_mesh_overlaps_a_gradient_all_reduce_with_the_backward_pass() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/data_parallel_grad_buckets.tsr");
    let (code, out, err) =
        tessera(&["lower", file, "--kernel", "dp_mlp_step", "--stage", "sched", "--dims", "B=64,D=1024,F=4096"]);
    assert_eq!(code, 0, "{err}");
    let mesh = out.split("// on the mesh").nth(1).unwrap_or_else(|| panic!("no program on the mesh:\n{out}"));
    assert_eq!(mesh.matches("sched.collective_start").count(), 2, "{mesh}");
    assert_eq!(mesh.matches("sched.collective_wait").count(), 2, "{mesh}");
    let overlapped = mesh.lines().find(|l| l.contains("overlaps = ")).unwrap_or_else(|| panic!("{mesh}"));
    // The backward pass's weight-gradient matmul runs while the bucket is reduced.
    assert!(overlapped.contains("dp_mlp_step__k") && overlapped.contains("_matmul"), "{overlapped}");
    // The one-device plan has no collectives.
    assert!(!out.split("// on the mesh").next().unwrap().contains("sched.collective"), "{out}");
    // tessera run reports each collective's overlap too (none at small sizes: one bucket).
    let (code, out, err) =
        tessera(&["run", file, "--kernel", "dp_mlp_step", "--device", "interp", "--dims", "B=8,D=32,F=64", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let collectives = report["mesh"]["collectives"].as_array().unwrap();
    assert_eq!(collectives.len(), 1, "{report}");
    assert_eq!(collectives[0]["overlaps"], serde_json::json!([]), "{report}");
}
