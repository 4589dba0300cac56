//! Random schedules: each draw takes a GEMM or attention kernel of the Hopper cases'
//! files (or a kernel of extra sources, at a resized shape of the caller's table), tile
//! sizes, warps, stages, vector width, a target and a staging (wgmma with cp.async, TMA,
//! a producer warpgroup, ping-pong consumers, a cluster; mma.sync on sm_80), keeps it
//! when the autotuner would (no Hopper rule or budget refuses it), and gives a random
//! ragged shape to run it at. The emulator (`cuda_emulator/random_schedules.rs`) and
//! the GPU (`cuda.rs`) run the same draws for a seed.

use std::collections::BTreeMap;

use tessera_frontend::check::{fn_signature, FunctionKind, KeyValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::ir::OpKind;
use tessera_passes::{default_config, graph_ir, tile_ir, Target};

use super::{gemm_files, has_byte_tensors, root, with_wgmma, Case, Staging, ATTENTION_FILES};

/// SplitMix64: a small, seedable generator whose draws a failure message can replay.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    /// A value in `1..=max` rounded up to a multiple of `step`.
    fn dim(&mut self, max: i64, step: i64) -> i64 {
        let v = 1 + (self.next() % max as u64) as i64;
        (v + step - 1) / step * step
    }
}

#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Family {
    Gemm,
    Attention,
    /// No dot: elementwise, reductions, the op kernels.
    Other,
}

const STAGINGS: &[Staging] = &[
    Staging::Own,
    Staging::Tma,
    Staging::Producer,
    Staging::PingPong,
    Staging::Cluster([2, 1]),
    Staging::Cluster([1, 2]),
    Staging::ClusterPingPong([2, 1]),
];

/// One drawn case: lowered for `target`, to run at `shape`; `what` names it with the
/// seed and its index, for a failure message.
pub struct Drawn {
    pub case: Case,
    pub target: Target,
    pub shape: String,
    pub what: String,
}

/// The cases of [`random_cases`], how many draws it took, what the autotuner's rules
/// refused (by category) and the cases that failed to lower.
pub struct Draw {
    pub cases: Vec<Drawn>,
    pub draws: usize,
    pub refused: BTreeMap<String, usize>,
    pub failures: Vec<String>,
}

/// A kernel that may be drawn: where it is, its family, and the table shape it is
/// resized from (a kernel of the extra sources).
struct Candidate {
    label: String,
    text: String,
    kernel: String,
    family: Family,
    table_shape: Option<&'static str>,
}

/// `count` admitted cases from `seed`. Besides the Hopper cases' GEMMs and attention,
/// the kernels of `extra` (label, text) that `table_shape` gives a shape for are drawn
/// (a quarter of the draws, when there are any), at that shape resized.
pub fn random_cases(
    seed: u64,
    count: usize,
    extra: &[(String, String)],
    table_shape: &dyn Fn(&str) -> Option<&'static str>,
) -> Draw {
    let hopper: Vec<(String, String)> = gemm_files(&[])
        .into_iter()
        .map(|(f, _)| f)
        .chain(ATTENTION_FILES.iter().map(|(f, _)| *f))
        .map(|f| (f.to_string(), std::fs::read_to_string(root().join(f)).unwrap()))
        .collect();
    let mut candidates: Vec<Candidate> = Vec::new();
    for (from_extra, (label, text)) in hopper.iter().map(|s| (false, s)).chain(extra.iter().map(|s| (true, s))) {
        let db = Database::default();
        let file = SourceFile::new(&db, root().join(label), text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let Ok(graph) = graph_ir(&db, entry.key).clone() else { continue };
            let kernel = entry.key.name(&db).to_string();
            // The same kernel of the same text is drawn once (the repository's files are
            // both Hopper files and extra sources).
            if candidates.iter().any(|c| c.kernel == kernel && c.text == *text) {
                continue;
            }
            let has_dot = graph.walk().into_iter().any(|id| graph.op(id).kind == OpKind::Dot);
            let family = match (kernel.contains("attention"), has_dot) {
                (true, _) => Family::Attention,
                (false, true) => Family::Gemm,
                (false, false) => Family::Other,
            };
            let table = if from_extra { table_shape(&kernel) } else { None };
            if (from_extra && table.is_none()) || (!from_extra && family == Family::Other) {
                continue;
            }
            candidates.push(Candidate { label: label.clone(), text: text.clone(), kernel, family, table_shape: table });
        }
    }
    let families: &[Family] = if candidates.iter().any(|c| c.family == Family::Other) {
        // Half the draws are GEMMs, a quarter attention, a quarter kernels without a dot.
        &[Family::Gemm, Family::Gemm, Family::Attention, Family::Other]
    } else {
        &[Family::Gemm, Family::Gemm, Family::Attention]
    };
    let mut draws = Draws(seed);
    let mut out = Draw { cases: Vec::new(), draws: 0, refused: BTreeMap::new(), failures: Vec::new() };
    while out.cases.len() < count && out.draws < count * 50 {
        out.draws += 1;
        let family = draws.pick(families);
        let pool: Vec<&Candidate> = candidates.iter().filter(|c| c.family == family).collect();
        let c = pool[(draws.next() % pool.len() as u64) as usize];
        // One draw in four is Ampere: sm_80 with mma.sync and cp.async.
        let target = if draws.next().is_multiple_of(4) { Target::Sm80 } else { Target::Sm90 };
        let staging = draws.pick(STAGINGS);
        let db = Database::default();
        let file = SourceFile::new(&db, root().join(&c.label), c.text.clone(), None);
        let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == c.kernel.as_str()).unwrap().key;
        // Attention's head dim is compiled in: 64 or 128.
        let dims: BTreeMap<String, i64> = if family == Family::Attention {
            [("D".to_string(), draws.pick(&[64, 128]))].into()
        } else {
            BTreeMap::new()
        };
        let Ok((default, _)) = default_config(&db, key, &dims) else { continue };
        let mut config =
            if target == Target::Sm80 || family == Family::Other { default } else { with_wgmma(&default, staging) };
        for (name, values) in [
            ("BM", &[64i64, 128][..]),
            ("BN", &[32, 64, 128, 256]),
            ("BK", &[16, 32, 64]),
            ("warps", &[4, 8]),
            ("stages", &[2, 3, 4]),
            ("vector", &[1, 2, 4, 8]),
        ] {
            // Ping-pong fixes warps and BM (two consumer warpgroups of 64 rows).
            let fixed = target == Target::Sm90
                && matches!(staging, Staging::PingPong | Staging::ClusterPingPong(_))
                && matches!(name, "BM" | "warps");
            if config.schedule.get(name).is_some() && !fixed {
                config.schedule.set(name, KeyValue::Int(draws.pick(values)));
            }
        }
        if let Some(reason) = tessera_passes::analysis::prune_reason(&db, key, &config, target) {
            *out.refused.entry(reason.category().to_string()).or_default() += 1;
            continue;
        }
        let what =
            format!("seed {seed} case {}: {} `{}` on {} [{config}]", out.cases.len(), c.label, c.kernel, target.name());
        let func = match tile_ir(&db, key, config.clone(), target).clone() {
            Ok(f) => (*f).clone(),
            Err(e) => {
                out.failures.push(format!("{what}: tile IR: {}", e.message));
                continue;
            }
        };
        let code = match tessera_passes::ptx::emit(&func, target) {
            Ok(code) => code,
            Err(e) => {
                out.failures.push(format!("{what}: PTX: {}", e.message));
                continue;
            }
        };
        // A ragged shape; under TMA, rows stay multiples of 16 bytes (a tensor map's
        // strides), whichever dim is a tensor's last (an M-major A is [K, M]).
        let tma = config.copy() == tessera_frontend::check::CopyEngine::Tma;
        let align = if !tma {
            1
        } else if has_byte_tensors(&func) {
            16
        } else {
            8
        };
        let shape = match (c.table_shape, family) {
            // Each symbol of the table's shape, anywhere up to one and a half times it.
            (Some(table), _) => table
                .split(',')
                .map(|p| {
                    let (symbol, value) = p.split_once('=').unwrap();
                    let value: i64 = value.parse().unwrap();
                    format!("{symbol}={}", draws.dim(value + value / 2, align))
                })
                .collect::<Vec<_>>()
                .join(","),
            (None, Family::Attention) => {
                let d = config.shapes.get("D").copied().unwrap_or(64);
                format!("BH={},S={},D={d}", draws.dim(2, 1), draws.dim(160, 1))
            }
            (None, _) => format!("M={},N={},K={}", draws.dim(160, align), draws.dim(200, align), draws.dim(160, align)),
        };
        let what = format!("{what} at {shape}");
        let graph = (*graph_ir(&db, key).clone().unwrap()).clone();
        let case = Case { label: c.label.clone(), kernel: c.kernel.clone(), graph, config, func, code };
        out.cases.push(Drawn { case, target, shape, what });
    }
    out
}
