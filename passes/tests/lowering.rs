//! Every function of the examples and of the test corpus (`tests/corpus`) lowers through the
//! pipeline; each stage's output is pinned by snapshots and printing is deterministic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::queries::pipeline;
use tessera_passes::{default_config, lowering_text, print_ir, Stage, Target};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `.tsr` files of a directory, sorted, with their display path.
fn sources(dir: &Path, shown_prefix: &str) -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (format!("{shown_prefix}/{name}"), std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

fn corpus_sources() -> Vec<(String, String)> {
    sources(&repo().join("tests/corpus/valid"), "corpus/valid")
}

/// Lowers every function of a file to every stage on `target`; returns the printed
/// stages per function (or the error).
fn lower_file(path: &str, text: &str, target: Target) -> Vec<(String, FunctionKind, Result<String, String>)> {
    let db = Database::default();
    let file = SourceFile::new(&db, path.into(), text.to_string(), None);
    let index = item_index(&db, file);
    let mut out = Vec::new();
    for entry in &index.functions {
        let name = entry.key.name(&db).to_string();
        let kind = fn_signature(&db, entry.key).kind;
        if kind == FunctionKind::Helper {
            continue;
        }
        let lowered = (|| {
            let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).map_err(|e| e.message)?;
            let mut text = String::new();
            for stage in [Stage::Graph, Stage::Sched, Stage::Tile] {
                let lowered = lowering_text(&db, entry.key, stage, target, &config).map_err(|e| e.message)?;
                text.push_str(&format!("// ===== {} IR =====\n{}", stage.name(), lowered.text));
            }
            Ok(text)
        })();
        out.push((name, kind, lowered));
    }
    out
}

#[test]
fn every_kernel_lowers_to_tile_ir_on_every_target() {
    let mut files = sources(&repo().join("examples"), "examples");
    files.extend(corpus_sources());
    let mut failures = Vec::new();
    let mut kernels = 0;
    for (path, text) in &files {
        for target in Target::ALL {
            for (name, _, result) in lower_file(path, text, target) {
                kernels += 1;
                if let Err(e) = result {
                    failures.push(format!("{path} {name} ({target}): {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(kernels >= 3 * 20, "only {kernels} lowerings: did the sources move?");
}

#[test]
fn graph_functions_plan_into_checked_kernels() {
    let text = std::fs::read_to_string(repo().join("examples/transformer_block.tsr")).unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, "examples/transformer_block.tsr".into(), text, None);
    let key = item_index(&db, file).functions[0].key;
    let (plan, module) = tessera_passes::plan_module(&db, key).unwrap();
    let summaries: Vec<String> = plan.kernels.iter().map(|k| format!("{}: {}", k.name, k.summary)).collect();
    insta::assert_snapshot!("plan__transformer_block", summaries.join("\n"));
    insta::assert_snapshot!("plan__transformer_block__module", plan.source);
    // Every generated kernel is an ordinary kernel of the generated module.
    for k in &plan.kernels {
        let kkey = tessera_passes::module_function(&db, module, &k.name).unwrap();
        assert_eq!(fn_signature(&db, kkey).kind, FunctionKind::Kernel, "{}", k.name);
    }
    let sched = lowering_text(&db, key, Stage::Sched, Target::Sm90, &Default::default()).unwrap();
    insta::assert_snapshot!("plan__transformer_block__sched", sched.text);
}

#[test]
fn grad_appends_the_backward_graph() {
    let text = std::fs::read_to_string(repo().join("examples/train_step.tsr")).unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, "examples/train_step.tsr".into(), text, None);
    let index = item_index(&db, file);
    let key = index.functions.iter().find(|f| f.key.name(&db) == "sgd_step").unwrap().key;
    let graph = lowering_text(&db, key, Stage::Graph, Target::Sm90, &Default::default()).unwrap();
    insta::assert_snapshot!("graph__sgd_step", graph.text);
    let (plan, _) = tessera_passes::plan_module(&db, key).unwrap();
    insta::assert_snapshot!("plan__sgd_step__module", plan.source);
}

/// A helper inlined with arguments of other dims than its own symbols (`b` bound to a
/// `B//2` half): Graph IR speaks of the graph function's dims only, so that a run can
/// evaluate every type (it used to keep the helper's `b`, which no argument binds).
/// A kernel's `return` ends what is lowered: code after it never runs (it made the IR
/// fail verification: "func.return must be the last op"), and a `return` inside a branch
/// or loop is E0809's "not lowered yet", not an internal error.
#[test]
fn a_kernel_stops_at_its_return_and_refuses_an_early_one() {
    let text = r#"import tessera as ts

@ts.kernel
def after(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]) -> ts.Tensor["n", ts.f32]:
    i = ts.tile.linear_id()
    if i < n:
        y[i] = x[i] * 2.0
    return y
    y[i] = x[i]

@ts.kernel
def early(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]) -> ts.Tensor["n", ts.f32]:
    i = ts.tile.linear_id()
    if i < n:
        y[i] = x[i] * 2.0
        return y
    return y
"#;
    let lowered: BTreeMap<String, Result<String, String>> =
        lower_file("returns.tsr", text, Target::Sm90).into_iter().map(|(name, _, r)| (name, r)).collect();
    let after = lowered["after"].as_ref().unwrap();
    let graph = after.split("// ===== sched").next().unwrap();
    assert_eq!(graph.matches("tile.scatter").count(), 1, "{graph}");
    let early = lowered["early"].as_ref().unwrap_err();
    assert!(early.contains("a `return` inside a loop or a branch") && !early.contains("internal"), "{early}");
}

/// A grid axis may start at a negative constant (`tile.parallel(-64, N, 64)`): the
/// extent counts from it, on every target (it was "bounds are not tensor dims or
/// constants", since `-64` is a negation).
#[test]
fn a_grid_axis_may_start_at_a_negative_constant() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(64, 64), warps=4))
def shifted(X: Tensor["N", f32], Y: Tensor["N", f32]):
    for i0 in tile.parallel(-64, N, 64):
        Y[i0:i0 + 64] = tile.load(X[i0:i0 + 64], other=0.0) * 2.0
"#;
    for target in Target::ALL {
        let lowered = lower_file("shifted.tsr", text, target);
        let tile = lowered[0].2.as_ref().unwrap_or_else(|e| panic!("{target}: {e}"));
        assert!(tile.contains("grid = [(N + 127)//64, 1, 1]"), "{target}: {tile}");
    }
}

/// Two `wgmma` dots that read one staged `[N, K]` tile as `b.T` (here the fp8 GEMM's dot
/// written twice): each transpose folds into its own K-major read of the staging slot.
/// A load with two transposes reading it did not fold, and lowering stopped with "a
/// `wgmma` operand is not a read of a shared buffer".
#[test]
fn two_wgmma_dots_may_read_one_loaded_tile_transposed() {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/wgmma/fp8.tsr")).unwrap();
    let dot = "                acc += tile.dot(a, b.T)\n";
    assert!(text.contains(dot));
    let text = text.replace(dot, &format!("{dot}{dot}"));
    let lowered = lower_file("fp8_twice.tsr", &text, Target::Sm90);
    let (_, _, tile) = lowered.iter().find(|(name, _, _)| name == "fp8_gemm_tn").unwrap();
    let tile = tile.as_ref().unwrap();
    let tile_ir = tile.split("// ===== tile IR =====").nth(1).unwrap();
    assert_eq!(tile_ir.matches("tile.dot").count(), 2, "{tile_ir}");
}

#[test]
fn inlined_helpers_take_the_callers_dims() {
    let text = r#"from tessera import *

def twice(h: Tensor["b", "D", f32]) -> Tensor["b", "D", f32]:
    return h * 2.0 + h

@jit
def f(x: Tensor["B", "D", f32]):
    first, second = split(x, 2, axis=0)
    return twice(first), twice(second)
"#;
    let db = Database::default();
    let file = SourceFile::new(&db, "inline.tsr".into(), text.into(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "f").unwrap().key;
    let graph = lowering_text(&db, key, Stage::Graph, Target::Sm90, &Default::default()).unwrap().text;
    assert!(!graph.contains("bxD"), "{graph}");
    assert!(graph.contains("arith.mul") && graph.contains("tensor<(B//2)xDxf32>"), "{graph}");
}

#[test]
fn example_stages_are_pinned() {
    for (path, text) in sources(&repo().join("examples"), "examples") {
        for target in [Target::Sm90, Target::Cpu] {
            for (name, kind, result) in lower_file(&path, &text, target) {
                if kind != FunctionKind::Kernel {
                    continue;
                }
                let text = result.unwrap_or_else(|e| panic!("{path} {name}: {e}"));
                let stem = Path::new(&path).file_stem().unwrap().to_string_lossy().into_owned();
                insta::assert_snapshot!(format!("stages__{stem}__{name}__{target}"), text);
            }
        }
    }
}

#[test]
fn every_pass_of_gemm_and_flash_attention_is_pinned() {
    for (file, kernel) in [("gemm.tsr", "gemm"), ("flash_attention.tsr", "flash_attention")] {
        let text = std::fs::read_to_string(repo().join("examples").join(file)).unwrap();
        let db = Database::default();
        let source = SourceFile::new(&db, format!("examples/{file}").into(), text, None);
        let index = item_index(&db, source);
        let key = index.functions.iter().find(|f| f.key.name(&db) == kernel).unwrap().key;
        let (config, _) = default_config(&db, key, &BTreeMap::new()).unwrap();
        let snapshots = pipeline(&db, key, config, Target::Sm90).clone().unwrap();
        let mut out = String::new();
        for snap in snapshots.iter() {
            out.push_str(&format!(
                "// ----- IR after {} ({} IR){} -----\n",
                snap.pass,
                snap.func.level.name(),
                if snap.changed { "" } else { ", unchanged" }
            ));
            if snap.changed {
                out.push_str(&print_ir(&db, source, &snap.func).text);
            }
        }
        insta::assert_snapshot!(format!("passes__{kernel}__sm_90"), out);
    }
}

#[test]
fn printing_is_deterministic_across_databases() {
    let mut files = sources(&repo().join("examples"), "examples");
    files.extend(corpus_sources());
    for (path, text) in &files {
        let first = lower_file(path, text, Target::Sm90);
        let second = lower_file(path, text, Target::Sm90);
        assert_eq!(first, second, "{path}: lowering twice printed different IR");
    }
}
