//! Autotune pruning without lowering every candidate (`analysis::prune`): the property
//! it rests on (budgets grow with the tile keys), and that it prunes exactly what
//! lowering every candidate prunes, on every kernel of the corpus, the examples and the
//! standard library.

use std::collections::BTreeMap;
use std::path::Path;

use tessera_frontend::check::{fn_signature, FunctionKind, KeyValue, ScheduleValue};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::analysis::limits::GpuLimits;
use tessera_passes::analysis::prune::{prune_space, Basis, Evaluated};
use tessera_passes::analysis::{kernel_budget, prune_candidates, prune_reason, PruneReason};
use tessera_passes::{graph_ir, Config, Target};

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut out = Vec::new();
    for dir in [root.join("examples"), root.join("tests/corpus/valid")] {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
            .collect();
        files.sort();
        for p in files {
            out.push((p.display().to_string(), std::fs::read_to_string(&p).unwrap()));
        }
    }
    for (name, text) in tessera_frontend::stdlib::FILES {
        out.push((name.to_string(), text.to_string()));
    }
    out
}

/// Every kernel of every source, with a database that holds it.
fn each_kernel(mut f: impl FnMut(&str, &Database, FnKey<'_>)) {
    for (label, text) in sources() {
        let db = Database::default();
        let file = SourceFile::new(&db, label.clone().into(), text, None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind == FunctionKind::Kernel && graph_ir(&db, entry.key).is_ok() {
                f(&format!("{label} `{}`", entry.key.name(&db)), &db, entry.key);
            }
        }
    }
}

/// A grid of tile sizes over the kernel's own schedule: 3·3·2·3 tile points × 2 warps.
fn grid(db: &Database, key: FnKey<'_>, target: Target) -> Vec<Config> {
    let graph = graph_ir(db, key).clone().unwrap();
    let base = tessera_passes::auto_space::kernel_schedule(db, key, target)
        .fixed
        .layered_on(&ScheduleValue::default_for_kernel());
    let mut out = Vec::new();
    for warps in [4, 8] {
        for bm in [32, 64, 128] {
            for bn in [32, 64, 128] {
                for bk in [32, 64] {
                    for stages in [1, 2, 3] {
                        let mut s = base.clone();
                        for (k, v) in [("BM", bm), ("BN", bn), ("BK", bk), ("stages", stages), ("warps", warps)] {
                            s.set(k, KeyValue::Int(v));
                        }
                        out.push(tessera_passes::config::config_for(&graph, s, &BTreeMap::new()).0);
                    }
                }
            }
        }
    }
    out
}

fn tile_key(s: &ScheduleValue, k: &str) -> i64 {
    s.int(k).unwrap_or(0)
}

#[test]
fn budgets_grow_with_the_tile_keys() {
    let mut pairs = 0;
    let mut failures = Vec::new();
    each_kernel(|label, db, key| {
        for target in [Target::Sm80, Target::Sm90] {
            let configs = grid(db, key, target);
            let budgets: Vec<_> =
                configs.iter().map(|c| kernel_budget(db, key, c.clone(), target).as_ref().ok().copied()).collect();
            for (i, a) in configs.iter().enumerate() {
                for (j, b) in configs.iter().enumerate() {
                    let (sa, sb) = (&a.schedule, &b.schedule);
                    let below = i != j
                        && tile_key(sa, "warps") == tile_key(sb, "warps")
                        && ["BM", "BN", "BK", "stages"].iter().all(|k| tile_key(sa, k) <= tile_key(sb, k));
                    if !below {
                        continue;
                    }
                    pairs += 1;
                    match (budgets[i], budgets[j]) {
                        (Some(x), Some(y)) if x.smem_bytes > y.smem_bytes || x.register_peak > y.register_peak => {
                            failures.push(format!("{label} {target}: {sa} {x:?} > {sb} {y:?}"))
                        }
                        (Some(_), None) | (None, Some(_)) => {
                            failures.push(format!("{label} {target}: only one of {sa} and {sb} lowers"))
                        }
                        _ => {}
                    }
                }
            }
        }
    });
    assert!(pairs > 10_000, "{pairs}");
    assert!(failures.is_empty(), "{} of {pairs} ordered pairs:\n{}", failures.len(), failures.join("\n"));
}

/// The search's verdicts against lowering every candidate: the same candidates pruned,
/// for the same reason, with the candidate's own figures where it was lowered.
fn same_as_exhaustive(label: &str, db: &Database, key: FnKey<'_>, configs: &[Config], target: Target) -> Vec<String> {
    let searched = prune_candidates(db, key, configs, target, Vec::new());
    let mut failures = Vec::new();
    for (config, got) in configs.iter().zip(searched) {
        let want = prune_reason(db, key, config, target);
        let same = match (&want, &got) {
            (None, None) => true,
            (Some(w), Some(g)) if w.category() == g.category() => match (w, g) {
                (
                    PruneReason::Registers { estimate: w, .. },
                    PruneReason::Registers { estimate: g, basis: Basis::AtLeast, .. },
                ) => g <= w,
                (
                    PruneReason::SharedMemory { bytes: w, .. },
                    PruneReason::SharedMemory { bytes: g, basis: Basis::AtLeast, .. },
                ) => g <= w,
                // An estimate's figure is an estimate; the verdict is what must agree.
                (
                    PruneReason::Registers { .. } | PruneReason::SharedMemory { .. },
                    PruneReason::Registers { basis: Basis::Analytic, .. }
                    | PruneReason::SharedMemory { basis: Basis::Analytic, .. },
                ) => true,
                _ => w == g,
            },
            _ => false,
        };
        if !same {
            failures.push(format!(
                "{label} {target} {}: search {got:?}, every candidate lowered {want:?}",
                config.schedule
            ));
        }
    }
    failures
}

#[test]
fn the_search_prunes_what_lowering_every_candidate_prunes() {
    let mut failures = Vec::new();
    let mut spaces = 0;
    each_kernel(|label, db, key| {
        let graph = graph_ir(db, key).clone().unwrap();
        for target in [Target::Sm80, Target::Sm90] {
            // The kernel's own space, when it has one, and the grid.
            let schedule = tessera_passes::auto_space::kernel_schedule(db, key, target);
            if schedule.is_autotuned() {
                let own: Vec<Config> = schedule
                    .configurations()
                    .into_iter()
                    .map(|s| tessera_passes::config::config_for(&graph, s, &BTreeMap::new()).0)
                    .collect();
                failures.extend(same_as_exhaustive(label, db, key, &own, target));
                spaces += 1;
            }
            failures.extend(same_as_exhaustive(label, db, key, &grid(db, key, target), target));
        }
    });
    assert!(spaces >= 10, "{spaces}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_space_that_fits_needs_one_lowering_per_class_and_one_over_the_limit_few() {
    let limits = GpuLimits::of(Target::Sm90).unwrap();
    let space = |f: &dyn Fn(i64, i64, i64) -> (u64, u32)| {
        let mut schedules = Vec::new();
        let mut budgets = Vec::new();
        for warps in [4, 8] {
            for bm in [64, 128] {
                for bn in [64, 128] {
                    for stages in [2, 3] {
                        let mut s = ScheduleValue::default_for_kernel();
                        for (k, v) in [("BM", bm), ("BN", bn), ("stages", stages), ("warps", warps)] {
                            s.set(k, KeyValue::Int(v));
                        }
                        schedules.push(s);
                        budgets.push(f(bm, bn, stages));
                    }
                }
            }
        }
        let mut lowered = 0;
        let reasons = prune_space(
            &schedules,
            limits,
            |_| None,
            |i| {
                lowered += 1;
                let (smem_bytes, register_peak) = budgets[i];
                Evaluated::Budget(tessera_passes::analysis::Budget { smem_bytes, register_peak })
            },
            |_| None,
            Vec::new(),
        );
        (reasons, lowered)
    };
    // Everything fits: the largest candidate of each warps class answers for its class.
    let (reasons, lowered) = space(&|bm, bn, stages| ((bm * bn * stages) as u64, (bm * bn / 128) as u32));
    assert!(reasons.iter().all(Option::is_none));
    assert_eq!(lowered, 2);
    // Registers over the limit from BM·BN = 128·128 on: pruned ones found by their smaller
    // neighbours; the first shown is lowered for its own figure.
    let (reasons, lowered) = space(&|bm, bn, stages| ((bm * bn * stages) as u64, (bm * bn / 64 + stages) as u32));
    let pruned: Vec<_> = reasons.iter().flatten().collect();
    assert_eq!(pruned.len(), 4, "{reasons:?}");
    assert!(pruned.iter().all(|r| r.category() == "registers"));
    assert!(matches!(pruned[0], PruneReason::Registers { estimate: 258, basis: Basis::Own, .. }), "{pruned:?}");
    assert!(lowered < 16, "{lowered}");
}

/// One budget question: the figure it reads, the target's limit, the estimate's margins.
type Question = (fn(&tessera_passes::analysis::Budget) -> u64, u64, (f64, f64));

/// The analytic estimate's verdicts (`analysis::analytic`, `prune::analytic_verdict`)
/// against lowering: scaled by any lowered candidate of the grid, whatever it places
/// beyond a margin of a target's limit is on that side of it once lowered.
#[test]
fn the_estimate_is_sure_only_where_lowering_agrees() {
    use tessera_passes::analysis::analytic::BudgetModel;
    use tessera_passes::analysis::prune::{analytic_verdict, scale, REGISTER_MARGINS, SMEM_MARGINS};
    let (mut decided, mut checked, mut failures) = (0usize, 0usize, Vec::new());
    let mut estimated_kernels = 0;
    each_kernel(|label, db, key| {
        let graph = graph_ir(db, key).clone().unwrap();
        let model = BudgetModel::new(&graph);
        for target in [Target::Sm80, Target::Sm90] {
            let limits = GpuLimits::of(target).unwrap();
            let pairs: Vec<(Config, tessera_passes::analysis::Budget, tessera_passes::analysis::Budget)> =
                grid(db, key, target)
                    .into_iter()
                    .filter_map(|c| {
                        let exact = *kernel_budget(db, key, c.clone(), target).as_ref().ok()?;
                        let estimate = model.estimate(&c, target)?;
                        Some((c, exact, estimate))
                    })
                    .collect();
            if !pairs.is_empty() {
                estimated_kernels += 1;
            }
            // Shared memory is sized exactly: the model stages what staging stages.
            for (c, exact, estimate) in &pairs {
                if exact.smem_bytes != estimate.smem_bytes && failures.len() < 20 {
                    failures.push(format!(
                        "{label} {target} {}: shared memory estimated {} B, lowered {} B",
                        c.schedule, estimate.smem_bytes, exact.smem_bytes
                    ));
                }
            }
            let questions: [Question; 2] = [
                (|b| b.smem_bytes, limits.smem_per_block as u64, SMEM_MARGINS),
                (|b| b.register_peak as u64, limits.max_registers_per_thread as u64, REGISTER_MARGINS),
            ];
            for (figure, limit, margins) in questions {
                for (_, seed_exact, seed_estimate) in &pairs {
                    let Some(scale) = scale(figure(seed_exact), figure(seed_estimate)) else { continue };
                    for (c, exact, estimate) in &pairs {
                        checked += 1;
                        let scaled = figure(estimate) as f64 * scale;
                        let Some(over) = analytic_verdict(scaled, limit, margins) else { continue };
                        decided += 1;
                        if over != (figure(exact) > limit) && failures.len() < 20 {
                            failures.push(format!(
                                "{label} {target} {}: estimate {scaled:.0} says {} the limit {limit}, lowered {}",
                                c.schedule,
                                if over { "over" } else { "under" },
                                figure(exact)
                            ));
                        }
                    }
                }
            }
        }
    });
    eprintln!("{decided} of {checked} (seed, candidate) questions decided by the estimate; {estimated_kernels} kernel-targets");
    assert!(estimated_kernels >= 40, "{estimated_kernels}");
    assert!(decided > checked / 2, "{decided} of {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// How many candidates `tessera check` lowers for the examples' spaces on sm_90: the
/// first that fits (whose Tile IR the lints report on), then what the search asks for.
/// Flash attention's BM=128, BN=64 candidates are estimated at exactly the 255 limit
/// (tensor parameters count one register each), so both of their stages are lowered.
#[test]
fn the_examples_spaces_lower_only_the_candidates_near_a_limit() {
    use tessera_passes::analysis::analytic::BudgetModel;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    for (file, kernel, most) in [("gemm.tsr", "gemm", 1), ("flash_attention.tsr", "flash_attention", 5)] {
        let db = Database::default();
        let text = std::fs::read_to_string(root.join("examples").join(file)).unwrap();
        let source = SourceFile::new(&db, file.into(), text, None);
        let key = item_index(&db, source).functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
        let target = Target::Sm90;
        let limits = GpuLimits::of(target).unwrap();
        let graph = graph_ir(&db, key).clone().unwrap();
        let configs: Vec<Config> = tessera_passes::auto_space::kernel_schedule(&db, key, target)
            .configurations()
            .into_iter()
            .map(|s| tessera_passes::config::config_for(&graph, s, &BTreeMap::new()).0)
            .collect();
        let budget = |i: usize| *kernel_budget(&db, key, configs[i].clone(), target).as_ref().unwrap();
        let fits = |b: &tessera_passes::analysis::Budget| {
            b.smem_bytes <= limits.smem_per_block as u64 && b.register_peak <= limits.max_registers_per_thread
        };
        let mut lowered = 0;
        let mut seed = Vec::new();
        for i in 0..configs.len() {
            lowered += 1;
            let b = budget(i);
            seed.push((i, Evaluated::Budget(b)));
            if fits(&b) {
                break;
            }
        }
        let model = BudgetModel::new(&graph);
        let schedules: Vec<&ScheduleValue> = configs.iter().map(|c| &c.schedule).collect();
        prune_space(
            &schedules,
            limits,
            |_| None,
            |i| {
                lowered += 1;
                Evaluated::Budget(budget(i))
            },
            |i| model.estimate(&configs[i], target),
            seed,
        );
        assert!(lowered <= most, "{kernel}: {lowered} of {} candidates lowered", configs.len());
    }
}
