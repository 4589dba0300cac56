//! `tessera run --fabric tcp`: a sharded program on one process per device, started as
//! `torchrun` starts them (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`). Every
//! rank must report what the simulated mesh reports in one process (the same results,
//! errors, collectives, bytes and steps), and a rank that runs something else, or a
//! world of the wrong size, is refused by name.

use std::process::{Command, Output};

use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/valid/");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `world` processes of `tessera run ARGS --fabric tcp` (rank r's arguments from
/// `args(r)`) and waits for all of them.
fn launch(world: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<Output> {
    let port = free_port().to_string();
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(env!("CARGO_BIN_EXE_tessera"))
                .arg("run")
                .args(args(rank))
                .args(["--fabric", "tcp"])
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("TESSERA_FABRIC_TIMEOUT", "60")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The simulated mesh's report and every rank's, which must be the same but for the
/// fabric they name.
fn same_as_simulated(world: usize, kernel: &str, file: &str, dims: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = strings(&["--kernel", kernel, "--device", "interp", "--dims", dims, "--json", file]);
    args.extend(strings(extra));
    let simulated = Command::new(env!("CARGO_BIN_EXE_tessera")).arg("run").args(&args).output().unwrap();
    assert!(simulated.status.success(), "{}", text(&simulated.stderr));
    let simulated: Value = serde_json::from_slice(&simulated.stdout).unwrap();
    assert_eq!(simulated["mesh"]["fabric"], Value::Null);
    let outputs = launch(world, |_| args.clone());
    let mut reports = Vec::new();
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}\n{}", text(&out.stdout), text(&out.stderr));
        let mut report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let fabric = report["mesh"]["fabric"].take();
        assert_eq!(fabric, serde_json::json!({"link": "TCP", "rank": rank, "processes": world}));
        report["mesh"]["fabric"] = Value::Null;
        // The whole mesh object: verdict, errors, collectives, bytes and steps.
        assert_eq!(report["mesh"], simulated["mesh"], "rank {rank}");
        assert_eq!(report["mesh"]["verdict"], "correct", "rank {rank}");
        reports.push(report);
    }
    reports
}

#[test]
fn a_megatron_mlp_on_eight_processes_matches_the_simulated_mesh() {
    let file = format!("{CORPUS}megatron_mlp_sharded.tsr");
    same_as_simulated(8, "mlp", &file, "B=16,D=32,F=64", &[]);
    // The text report says where this process sits.
    let outputs = launch(8, |_| strings(&["--kernel", "mlp", "--device", "interp", "--dims", "B=16,D=32,F=64", &file]));
    let out = text(&outputs[3].stdout);
    assert!(
        out.contains("mesh      8 devices (dp=4, tp=2), one process each: this is rank 3 of 8, messages over TCP"),
        "{out}"
    );
    assert!(out.contains("counted by each rank for its own sends"), "{out}");
    assert!(out.contains("mesh      correct"), "{out}");
}

#[test]
fn all_to_all_pipelines_and_tree_all_reduces_match_across_processes() {
    same_as_simulated(4, "moe", &format!("{CORPUS}moe_expert_parallel.tsr"), "G=4,S=16,M=8,E=8,F=16,C=3", &[]);
    same_as_simulated(2, "pipeline_step", &format!("{CORPUS}pipeline_grad.tsr"), "B=8,D=4,F=8", &[]);
    let reports =
        same_as_simulated(4, "dp_mlp_step", &format!("{CORPUS}data_parallel_grad_buckets.tsr"), "B=8,D=32,F=64", &[]);
    assert_eq!(reports[0]["mesh"]["collectives"][0]["algorithm"], "tree");
}

#[test]
fn mesh_n_runs_data_parallel_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dp.tsr");
    std::fs::write(
        &file,
        "from tessera import *\n\n@jit\ndef loss(x: Tensor[\"B\", \"D\", f32], W: Tensor[\"D\", \"E\", f32], y: Tensor[\"B\", \"E\", f32]):\n    p = softmax_safe(matmul(x, W))\n    return mean((p - y) * (p - y)), p\n",
    )
    .unwrap();
    same_as_simulated(4, "loss", file.to_str().unwrap(), "B=8,D=8,E=4", &["--mesh", "4"]);
}

#[test]
fn a_rank_with_other_inputs_or_a_world_of_the_wrong_size_is_refused() {
    let file = format!("{CORPUS}megatron_mlp_sharded.tsr");
    // Rank 2 was given other dims: every rank is told which one differs.
    let outputs = launch(4, |rank| {
        let dims = if rank == 2 { "B=32,D=32,F=64" } else { "B=16,D=32,F=64" };
        strings(&["--kernel", "mlp", "--device", "interp", "--dims", dims, &file])
    });
    for (rank, out) in outputs.iter().enumerate() {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "rank {rank}: {err}");
        assert!(err.contains("rank 2 runs another program or other inputs than rank 0"), "rank {rank}: {err}");
    }
    // Four processes for a mesh of eight devices.
    let outputs = launch(4, |_| strings(&["--kernel", "mlp", "--device", "interp", "--dims", "B=16,D=32,F=64", &file]));
    for out in &outputs {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("the mesh has 8 devices and the fabric 4 processes: start one process per device"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // No launcher environment at all.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "--kernel", "mlp", "--device", "interp", "--fabric", "tcp", &file])
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--fabric tcp: RANK is not set"), "{}", text(&out.stderr));
}
