//! LLVM IR generation (`tessera_passes::llvm`): every kernel of the examples, the
//! test corpus (`tests/corpus`) and the stdlib, under its default configuration and every autotune
//! candidate, gives IR that LLVM's verifier (`opt-14 -verify`) accepts; the text is
//! deterministic and carries a location per line; vector_add and gemm are pinned by
//! snapshots; unsupported input is a precise error.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::codegen::{target_code, TargetCode};
use tessera_passes::ir::{Func, FuncKind, Level, Loc, OpKind, Type};
use tessera_passes::{default_config, lowering_text, tile_ir, Config, Stage, Target};

#[path = "../../tests/support/kernel_sources.rs"]
mod kernel_sources;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.tsr` file of the corpus and the examples, and the standard library: (label, text).
fn sources() -> Vec<(String, String)> {
    kernel_sources::every_source().into_iter().map(|s| (s.label, s.text)).collect()
}

/// The `opt` to verify with: `TESSERA_OPT`, else `opt-14` from PATH. Missing: a failure
/// under CI, else `None` (the caller skips, saying so).
fn opt() -> Option<String> {
    let candidate = std::env::var("TESSERA_OPT").unwrap_or_else(|_| "opt-14".to_string());
    let ok = Command::new(&candidate).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if ok {
        return Some(candidate);
    }
    assert!(std::env::var_os("CI").is_none(), "`{candidate}` is not available (set TESSERA_OPT to LLVM 14's opt)");
    eprintln!("SKIPPING LLVM verification: `{candidate}` is not available (set TESSERA_OPT to LLVM 14's opt)");
    None
}

/// Runs `opt -verify` on the text; the verifier's complaint on failure.
fn verify(opt: &str, text: &str) -> Result<(), String> {
    let mut child = Command::new(opt)
        .args(["-verify", "-disable-output", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {opt}: {e}"))?;
    child.stdin.take().unwrap().write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).lines().take(6).collect::<Vec<_>>().join("\n"))
    }
}

/// Every configuration of a kernel: its autotune candidates, or its one schedule.
fn configurations(db: &Database, key: tessera_frontend::FnKey<'_>) -> Vec<Config> {
    let (base, _) = default_config(db, key, &BTreeMap::new()).expect("a configuration");
    let mut out = vec![base.clone()];
    if let Some(s) = &fn_decorators(db, key).schedule {
        for schedule in s.configurations() {
            let c = Config { schedule, shapes: base.shapes.clone() };
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

#[test]
fn every_kernel_and_configuration_gives_ir_the_verifier_accepts() {
    let opt = opt();
    let mut failures = Vec::new();
    let mut verified = 0;
    let mut unsupported = Vec::new();
    for (path, text) in sources() {
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone().into(), text, None);
        // Kernels of the file, and those the graph functions are planned into.
        let mut keys = Vec::new();
        for entry in &item_index(&db, file).functions {
            match fn_signature(&db, entry.key).kind {
                FunctionKind::Kernel => keys.push((path.clone(), entry.key)),
                FunctionKind::Graph => match tessera_passes::plan_module(&db, entry.key) {
                    Ok((_, module)) => {
                        let shown = format!("{path} (kernels of `{}`)", entry.key.name(&db));
                        for k in &item_index(&db, module).functions {
                            if fn_signature(&db, k.key).kind == FunctionKind::Kernel {
                                keys.push((shown.clone(), k.key));
                            }
                        }
                    }
                    Err(e) => eprintln!("skipping the graph function `{}`: {}", entry.key.name(&db), e.message),
                },
                FunctionKind::Helper => {}
            }
        }
        for (path, key) in keys {
            let name = key.name(&db).to_string();
            for config in configurations(&db, key) {
                let what = format!("{path} `{name}` [{config}]");
                let code = match target_code(&db, key, config.clone(), Target::Cpu) {
                    Ok(c) => c.clone(),
                    Err(e) if e.message.contains("is not supported by the LLVM backend yet") => {
                        unsupported.push(format!("{what}: {}", e.message));
                        continue;
                    }
                    Err(e) => {
                        failures.push(format!("{what}: {}", e.message));
                        continue;
                    }
                };
                check_shape(&code, &what, &mut failures);
                if let Some(opt) = &opt {
                    if let Err(e) = verify(opt, &code.text) {
                        failures.push(format!("{what}: opt -verify rejects the IR:\n{e}"));
                    }
                    verified += 1;
                }
            }
        }
    }
    for u in &unsupported {
        eprintln!("not supported yet: {u}");
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(opt.is_none() || verified >= 60, "only {verified} modules verified");
    assert!(unsupported.is_empty(), "ops the backend does not know: {unsupported:#?}");
}

/// One location per line; the entry and the helper functions exist.
fn check_shape(code: &TargetCode, what: &str, failures: &mut Vec<String>) {
    let lines = code.text.lines().count();
    if code.line_locs.len() != lines {
        failures.push(format!("{what}: {} line locations for {lines} lines", code.line_locs.len()));
    }
    let name = &code.abi.name;
    for sym in [
        format!("@\"{name}\"("),
        format!("@\"{name}.grid\"("),
        format!("@\"{name}.error\"("),
        format!("@\"{name}.stack\"("),
    ] {
        if !code.text.contains(&format!("define i32 {sym}"))
            && !code.text.contains(&format!("define i8* {sym}"))
            && !code.text.contains(&format!("define i64 {sym}"))
        {
            failures.push(format!("{what}: no definition of {sym}"));
        }
    }
    if code.entry != format!("{name}.grid") {
        failures.push(format!("{what}: entry `{}`", code.entry));
    }
    // Every instruction of the program function comes from some op.
    let body: Vec<(&str, &Option<Loc>)> = code
        .text
        .lines()
        .zip(&code.line_locs)
        .skip_while(|(l, _)| !l.starts_with(&format!("define i32 @\"{name}\"(")))
        .skip(1)
        .take_while(|(l, _)| *l != "}")
        .filter(|(l, _)| l.starts_with("  "))
        .collect();
    if let Some((l, _)) = body.iter().find(|(_, loc)| loc.is_none()) {
        failures.push(format!("{what}: an instruction without a location: {l}"));
    }
}

fn example(name: &str) -> (String, String) {
    let path = format!("examples/{name}.tsr");
    (path.clone(), std::fs::read_to_string(repo().join(&path)).unwrap())
}

fn target_text(path: &str, text: &str, kernel: &str) -> (String, TargetCode) {
    let db = Database::default();
    let file = SourceFile::new(&db, path.into(), text.to_string(), None);
    let entry = item_index(&db, file).functions.iter().find(|f| *f.key.name(&db) == kernel).cloned().unwrap();
    let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
    let shown = lowering_text(&db, entry.key, Stage::Target, Target::Cpu, &config).unwrap();
    let code = target_code(&db, entry.key, config, Target::Cpu).clone().unwrap();
    assert_eq!(shown.text, code.text, "`tessera lower --stage target` shows the target code");
    (shown.text, (*code).clone())
}

#[test]
fn vector_add_and_gemm_ir_are_pinned() {
    for kernel in ["vector_add", "gemm"] {
        let (path, text) = example(kernel);
        let (ir, _) = target_text(&path, &text, kernel);
        insta::assert_snapshot!(format!("llvm_{kernel}"), ir);
    }
}

#[test]
fn generation_is_deterministic_and_independent_of_code_above() {
    for kernel in ["vector_add", "gemm", "softmax", "layernorm", "flash_attention", "linear_gelu"] {
        let (path, text) = example(kernel);
        let (a, ca) = target_text(&path, &text, kernel);
        let (b, cb) = target_text(&path, &text, kernel);
        assert_eq!(a, b, "{kernel}: two runs differ");
        assert_eq!(ca.line_locs, cb.line_locs, "{kernel}: locations differ");
        // Locations are relative to the function: a comment above changes nothing.
        let shifted = format!("# a comment\n# and another\n{text}");
        let (c, cc) = target_text(&path, &shifted, kernel);
        assert_eq!(a, c, "{kernel}: code above the kernel changed its IR");
        assert_eq!(ca.line_locs, cc.line_locs, "{kernel}: code above the kernel changed its locations");
    }
}

#[test]
fn the_source_map_points_at_the_ops() {
    let (path, text) = example("vector_add");
    let db = Database::default();
    let file = SourceFile::new(&db, path.into(), text.clone(), None);
    let entry = item_index(&db, file).functions.iter().find(|f| *f.key.name(&db) == "vector_add").cloned().unwrap();
    let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
    let shown = lowering_text(&db, entry.key, Stage::Target, Target::Cpu, &config).unwrap();
    let lines: Vec<&str> = shown.text.lines().collect();
    // The fadd of the two loads maps to the `a + b` expression.
    let (line, range) = shown
        .source_map
        .iter()
        .find(|(l, _)| lines[*l as usize].contains(" = fadd <16 x float>"))
        .copied()
        .expect("an fadd with a location");
    let src = &text[range.start as usize..range.end as usize];
    assert_eq!(src, "a + b", "line {line}");
    // The vector loads fused into the store's loop map to the loads.
    let loads: Vec<&str> = shown
        .source_map
        .iter()
        .filter(|(l, _)| lines[*l as usize].contains(" = load <16 x float>"))
        .map(|(_, r)| &text[r.start as usize..r.end as usize])
        .collect();
    assert_eq!(loads.len(), 2, "{loads:?}");
    assert!(loads.iter().all(|s| s.starts_with("tile.load(")), "{loads:?}");
}

fn tile(kernel_src: &str, kernel: &str) -> Func {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), kernel_src.to_string(), None);
    let entry = item_index(&db, file).functions.iter().find(|f| *f.key.name(&db) == kernel).cloned().unwrap();
    let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
    (*tile_ir(&db, entry.key, config, Target::Cpu).clone().unwrap()).clone()
}

#[test]
fn unsupported_input_is_a_precise_error() {
    let (_, text) = example("vector_add");
    let mut f = tile(&text, "vector_add");
    // Not Tile IR.
    let mut g = f.clone();
    g.level = Level::Graph;
    let e = tessera_passes::llvm::emit(&g).unwrap_err();
    assert!(e.message.contains("is graph IR: LLVM IR is generated from Tile IR"), "{}", e.message);
    // An op the backend does not know.
    let add = f
        .walk()
        .into_iter()
        .find(|&id| f.op(id).kind == OpKind::Add && matches!(f.ty(f.op(id).results[0]), Type::Tile(_)));
    let add = add.expect("a tile add");
    f.op_mut(add).kind = OpKind::Softmax;
    let e = tessera_passes::llvm::emit(&f).unwrap_err();
    assert_eq!(e.message, "`graph.softmax` is not supported by the LLVM backend yet");
    assert_eq!(e.range, f.op(add).loc.range, "the error points at the op");
    assert_eq!(f.kind, FuncKind::Kernel);
}
