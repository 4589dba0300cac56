//! The Hopper cases (`mma = "wgmma"`, TMA copies, a producer warpgroup, ping-pong
//! consumers, clusters with TMA multicast): which kernels, schedules and shapes, lowered
//! for sm_90a with what each staging must put in the PTX, and the f64 reference of a case
//! at a shape. The PTX emulator (`cuda_emulator.rs`) and the GPU (`cuda.rs`) run the same
//! cases, so what the emulator checks here is what a GPU session checks on hardware.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

pub mod random;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_backends::interp::compare_outputs;
use tessera_backends::tensor::Arg;
use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind, KeyValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::codegen::TargetCode;
use tessera_passes::ir::{Func, OpKind, Type};
use tessera_passes::{default_config, graph_ir, tile_ir, Config, Target};

/// Kernels written for `wgmma` (see the file's header).
pub const WGMMA_FIXTURE: &str = "tests/fixtures/wgmma/gemms.tsr";
/// Kernels with a K-major B and an A in registers.
pub const OPERANDS_FIXTURE: &str = "tests/fixtures/wgmma/operands.tsr";
/// FP8 GEMMs (m64nNk32, both operands K-major).
pub const FP8_FIXTURE: &str = "tests/fixtures/wgmma/fp8.tsr";
/// int8 GEMMs (integer `wgmma`, i32 accumulators).
pub const INT8_FIXTURE: &str = "tests/fixtures/wgmma/int8.tsr";

/// Flash attention: every candidate of the example's space, and the corpus kernel's
/// default schedule.
pub const ATTENTION_FILES: &[(&str, bool)] =
    &[("examples/flash_attention.tsr", true), ("tests/corpus/valid/flash_attention.tsr", false)];

/// The GEMMs of the examples and the corpus the slice starts from.
const GEMM_FILES: &[&str] = &[
    "examples/gemm.tsr",
    "examples/linear_gelu.tsr",
    "tests/corpus/valid/gemm.tsr",
    "tests/corpus/valid/schedules.tsr",
    "tests/corpus/valid/search_spaces.tsr",
    "tests/corpus/valid/derived_kernels.tsr",
    // fp8 with B as [K, N]: through the transposing stage (`tessera_passes::wgmma`).
    "examples/fp8_gemm.tsr",
    "tests/corpus/valid/fp8_gemm.tsr",
];

/// The fixtures and the examples' and corpus's GEMMs, then `extra`, each under its own
/// schedule only.
pub fn gemm_files<'a>(extra: &[&'a str]) -> Vec<(&'a str, bool)> {
    let fixtures = [WGMMA_FIXTURE, OPERANDS_FIXTURE, FP8_FIXTURE, INT8_FIXTURE].into_iter();
    fixtures.chain(GEMM_FILES.iter().copied()).chain(extra.iter().copied()).map(|f| (f, false)).collect()
}

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// What fills the staged operands.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Staging {
    /// The schedule's own `copy` (`cp.async` unless it says otherwise).
    Own,
    /// `copy = "tma"`.
    Tma,
    /// `copy = "tma"` and `producer = "warpgroup"`: a producer warpgroup issues them.
    Producer,
    /// `copy = "tma"`, `producer = "pingpong"`, `warps = 8` and `BM = 128`: a producer
    /// warpgroup, and two consumer warpgroups of 64 rows each that take turns at the
    /// first dot.
    PingPong,
    /// `copy = "tma"`, `producer = "warpgroup"` and `cluster = (x, y)`: the programs of a
    /// cluster multicast the loads they share.
    Cluster([i64; 2]),
    /// `Cluster` with ping-pong consumers (`PingPong`'s `warps = 8`, `BM = 128`).
    ClusterPingPong([i64; 2]),
}

/// `config` with `mma = "wgmma"`, and the staging `staging` asks for.
pub fn with_wgmma(config: &Config, staging: Staging) -> Config {
    let mut c = config.clone();
    c.schedule.set("mma", KeyValue::Str("wgmma".into()));
    if staging != Staging::Own {
        c.schedule.set("copy", KeyValue::Str("tma".into()));
    }
    if matches!(staging, Staging::Producer | Staging::Cluster(_)) {
        c.schedule.set("producer", KeyValue::Str("warpgroup".into()));
    }
    if let Staging::Cluster([x, y]) | Staging::ClusterPingPong([x, y]) = staging {
        c.schedule.set("cluster_x", KeyValue::Int(x));
        c.schedule.set("cluster_y", KeyValue::Int(y));
    }
    if matches!(staging, Staging::PingPong | Staging::ClusterPingPong(_)) {
        c.schedule.set("producer", KeyValue::Str("pingpong".into()));
        c.schedule.set("warps", KeyValue::Int(8));
        c.schedule.set("BM", KeyValue::Int(128));
    }
    c
}

pub fn has_wgmma_dot(tile: &Func) -> bool {
    tile.walk().into_iter().any(|id| tile.op(id).kind == OpKind::Dot && tile.op(id).str_attr("instr") == Some("wgmma"))
}

/// Shapes for a kernel's dims: a multiple of every tile the configurations use, a ragged
/// one (M, N, K cut inside a tile and misaligned rows), and a one-tile-short K.
const GEMM_SHAPES: &[&str] = &["M=128,N=256,K=128", "M=70,N=36,K=40", "M=33,N=17,K=9"];

/// Attention: one whole key block and a ragged sequence (a partial query and key block).
const ATTENTION_SHAPES: &[&str] = &["BH=1,S=64,D=64", "BH=2,S=100,D=64"];

/// Under `copy = "tma"`: ragged tiles whose rows stay multiples of 16 bytes (a tensor
/// map's strides must be) whichever dim is a tensor's last (an M-major A is `[K, M]`),
/// and a K shorter than one k step.
const TMA_GEMM_SHAPES: &[&str] = &["M=128,N=256,K=128", "M=72,N=40,K=48", "M=40,N=24,K=16"];

/// The same for 8-bit operands, whose rows are a byte per element: `N` too a multiple of
/// 16 where B is `[K, N]`.
const TMA_FP8_GEMM_SHAPES: &[&str] = &["M=128,N=256,K=128", "M=80,N=48,K=48", "M=48,N=32,K=16"];

/// Whether a tensor of `func` has 8-bit elements (its rows are then a byte per element,
/// which the 16-byte strides of a tensor map constrain further).
pub fn has_byte_tensors(func: &Func) -> bool {
    func.values.iter().any(|v| matches!(&v.ty, Type::Tensor(t) if t.dtype.bytes() == 1))
}

/// The shapes a case runs at.
pub fn shapes_of(kernel: &str, config: &Config, func: &Func) -> &'static [&'static str] {
    if kernel.contains("attention") {
        ATTENTION_SHAPES
    } else if config.copy() == tessera_frontend::check::CopyEngine::Tma && has_byte_tensors(func) {
        TMA_FP8_GEMM_SHAPES
    } else if config.copy() == tessera_frontend::check::CopyEngine::Tma {
        TMA_GEMM_SHAPES
    } else {
        GEMM_SHAPES
    }
}

/// One kernel under one configuration, lowered for sm_90a.
pub struct Case {
    pub label: String,
    pub kernel: String,
    /// The kernel's Graph IR, whose f64 semantics are the reference.
    pub graph: Func,
    pub config: Config,
    pub func: Func,
    pub code: TargetCode,
}

impl Case {
    pub fn name(&self) -> String {
        format!("{} `{}` [{}]", self.label, self.kernel, self.config)
    }

    /// The f64 reference of the Graph IR on `inputs` (no Tile IR pass, interpreter or
    /// generator in it): the outputs it computes.
    pub fn reference(&self, inputs: &[Arg]) -> Result<Vec<Arg>, String> {
        let shapes: Vec<Vec<i64>> = inputs
            .iter()
            .filter_map(|a| match a {
                Arg::Tensor(t) => Some(t.dims.iter().map(|&d| d as i64).collect()),
                _ => None,
            })
            .collect();
        let grid = self.code.abi.bind(&shapes).map_err(|e| e.to_string())?.grid;
        let mut reference = inputs.to_vec();
        let programs = tessera_backends::semantics::Programs::All;
        tessera_backends::semantics::run(&self.graph, &self.config, grid, &mut reference, &programs)
            .map_err(|e| format!("reference: {e}"))?;
        Ok(reference)
    }

    /// Runs the case on `inputs` with `execute` (the emulator, a GPU) and compares what
    /// it wrote with the f64 reference; the failures, each starting with `what`.
    pub fn check(
        &self,
        what: &str,
        inputs: &[Arg],
        execute: impl FnOnce(&mut [Arg]) -> Result<(), String>,
    ) -> Vec<String> {
        let reference = match self.reference(inputs) {
            Ok(r) => r,
            Err(e) => return vec![format!("{what}: {e}")],
        };
        let mut actual = inputs.to_vec();
        if let Err(e) = execute(&mut actual) {
            return vec![format!("{what}: {e}")];
        }
        compare_outputs(&self.func, &reference, &actual)
            .into_iter()
            .filter(|o| !o.comparison.passed)
            .map(|o| format!("{what}: output `{}` against the f64 reference: {}", o.name, o.comparison))
            .collect()
    }
}

/// Every kernel with a dot of each `(file, every candidate)` (only the files whose name
/// contains `only`) under its configurations with `mma = "wgmma"` and `staging` (the
/// written one, and with `every candidate` each candidate of its space), lowered for
/// sm_90a where the rules admit it. Returns the cases, what the rules skipped (with
/// their reasons) and the failures to lower; panics where the PTX lacks what the
/// staging must put there.
pub fn lower_cases(
    files: &[(&str, bool)],
    staging: Staging,
    only: Option<&str>,
) -> (Vec<Case>, Vec<String>, Vec<String>) {
    lower_cases_for(files, staging, only, &BTreeMap::new())
}

/// [`lower_cases`] with the kernels compiled for the shape symbols `dims` gives (a tile
/// dimension such as attention's head dim `D` is compiled in).
pub fn lower_cases_for(
    files: &[(&str, bool)],
    staging: Staging,
    only: Option<&str>,
    dims: &BTreeMap<String, i64>,
) -> (Vec<Case>, Vec<String>, Vec<String>) {
    let (mut cases, mut skipped, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for &(label, all_candidates) in files {
        if only.is_some_and(|o| !label.contains(o)) {
            continue;
        }
        let path = root().join(label);
        let text = std::fs::read_to_string(&path).unwrap();
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone(), text, None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let kernel = entry.key.name(&db).to_string();
            let Ok((default, _)) = default_config(&db, entry.key, dims) else { continue };
            let mut configs = vec![with_wgmma(&default, staging)];
            if all_candidates {
                let space =
                    fn_decorators(&db, entry.key).schedule.as_ref().map(|s| s.configurations()).unwrap_or_default();
                for schedule in space {
                    let c = with_wgmma(&Config { schedule, shapes: default.shapes.clone() }, staging);
                    if !configs.contains(&c) {
                        configs.push(c);
                    }
                }
            }
            let graph = (*graph_ir(&db, entry.key).clone().unwrap()).clone();
            if !graph.walk().into_iter().any(|id| graph.op(id).kind == OpKind::Dot) {
                continue;
            }
            for config in configs {
                let what = format!("{label} `{kernel}` [{config}]");
                if let Some(reason) = tessera_passes::analysis::hopper_reason(&db, entry.key, &config, Target::Sm90) {
                    skipped.push(format!("{what}: {}", reason.detail()));
                    continue;
                }
                let func = match tile_ir(&db, entry.key, config.clone(), Target::Sm90).clone() {
                    Ok(f) => (*f).clone(),
                    Err(e) => {
                        failures.push(format!("{what}: tile IR: {}", e.message));
                        continue;
                    }
                };
                assert!(has_wgmma_dot(&func), "{what}: no wgmma dot");
                let code = match tessera_passes::ptx::emit(&func, Target::Sm90) {
                    Ok(c) => c,
                    Err(e) => {
                        failures.push(format!("{what}: PTX: {}", e.message));
                        continue;
                    }
                };
                assert_staged_as(&what, &func, &code, staging);
                cases.push(Case {
                    label: label.to_string(),
                    kernel: kernel.clone(),
                    graph: graph.clone(),
                    config,
                    func,
                    code,
                });
            }
        }
    }
    (cases, skipped, failures)
}

/// The PTX has what `staging` asks for: sm_90a, TMA boxes for every staged copy,
/// multicast in a cluster, `setmaxnreg` with a producer, named-barrier turns with
/// ping-pong consumers.
fn assert_staged_as(what: &str, func: &Func, code: &TargetCode, staging: Staging) {
    assert!(code.text.contains(".target sm_90a"), "{what}: not sm_90a");
    if staging != Staging::Own && func.walk().into_iter().any(|id| func.op(id).kind == OpKind::CpAsync) {
        assert!(
            code.text.contains("cp.async.bulk.tensor") && !code.text.contains("cp.async.cg"),
            "{what}: copy=\"tma\" but not every staged copy is a TMA box"
        );
    }
    if matches!(staging, Staging::Cluster(_) | Staging::ClusterPingPong(_)) {
        assert!(
            code.text.contains(".multicast::cluster") && code.text.contains(".reqnctapercluster"),
            "{what}: a cluster but no multicast"
        );
    }
    if staging != Staging::Own && staging != Staging::Tma {
        assert!(
            code.text.contains("setmaxnreg.dec") && code.text.contains("setmaxnreg.inc"),
            "{what}: a producer warpgroup but no setmaxnreg"
        );
    }
    if matches!(staging, Staging::PingPong | Staging::ClusterPingPong(_)) {
        assert!(
            code.text.contains("bar.arrive 2, 256") && code.text.contains("bar.sync 2, 256"),
            "{what}: ping-pong but no turns"
        );
    }
}
