//! The options of `tessera run`, shared by its two halves: kernels (`run`) and graph
//! functions (`run_graph`).

use std::path::PathBuf;

use tessera_backends::launch::{self, CheckMode, DeviceRequest};
use tessera_passes::Target;

use crate::parsers::{parse_check, parse_device};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The source file.
    pub file: PathBuf,
    /// The kernel to run.
    #[arg(long, value_name = "NAME")]
    pub kernel: String,
    /// Values of the shape symbols (M=1024,N=1024,...); missing ones are assumed (1024, or 64
    /// for symbols that tile dims use) and said so; an int parameter used as a size takes its
    /// default.
    #[arg(long, value_delimiter = ',', value_name = "SYM=VALUE")]
    pub dims: Vec<String>,
    /// Scalar arguments (alpha=2.0,causal=false); others take the signature's default, else a
    /// seeded value.
    #[arg(long = "arg", value_delimiter = ',', value_name = "NAME=VALUE")]
    pub args: Vec<String>,
    /// A tensor argument from a NumPy file instead of seeded (`--input P=p.npy`, once per
    /// tensor); its shape also gives the dims `--dims` leaves out.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub inputs: Vec<String>,
    /// Where to run: gpu, cpu, interp (the reference interpreter), or auto (GPU, else CPU,
    /// else the interpreter).
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    pub device: DeviceRequest,
    /// Schedule values over the kernel's (BM=64,warps=4,...); without it, the autotune cache's
    /// winner for these shapes, else the kernel's first configuration.
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
    pub schedule: Vec<String>,
    /// Target: sm_80, sm_90 or cpu (default: the device's; sm_90 for the interpreter).
    #[arg(long, value_parser = crate::parsers::parse_target)]
    pub target: Option<Target>,
    /// Timed launches (default: 100 on a GPU, 20 on the CPU, 3 on the interpreter).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Untimed launches before them (default: 10 on a GPU, 2 on the CPU, 0 on the interpreter).
    #[arg(long)]
    pub warmup: Option<u32>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = launch::DEFAULT_SEED)]
    pub seed: u64,
    /// Check against the reference interpreter: full, sampled (a subset of tile programs),
    /// none, or auto (full below a work threshold, sampled above).
    #[arg(long, default_value = "auto", value_parser = parse_check)]
    pub check: CheckMode,
    /// Also run an unsharded graph function data-parallel on N simulated devices (a mesh
    /// `dp` of N: dim 0 of the first tensor parameter, and of every parameter with the same
    /// dim 0, split over it), checked against the same f64 reference.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub mesh: Option<u32>,
    /// Run the mesh across processes, one per device, started by `torchrun` or a job
    /// launcher (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`): the collectives'
    /// messages go over TCP, or GPU to GPU over NCCL (builds with `--features nccl`).
    #[arg(long, value_name = "LINK", value_parser = ["tcp", "nccl"])]
    pub fabric: Option<String>,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Write every input to DIR/NAME.npy, every output to DIR/NAME.out.npy, and the JSON
    /// report to DIR/run.json.
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// The host memory the arguments may take (`8G`, `512M`, bytes); default: what is
    /// available.
    #[arg(long, value_name = "SIZE", value_parser = crate::options::parse_size)]
    pub max_memory: Option<u64>,
}
