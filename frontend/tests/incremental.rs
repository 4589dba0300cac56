//! Incrementality is tested, not assumed: an edit inside one function's body re-runs
//! that function's inference and nothing else's (observed through salsa's events).

use std::sync::{Arc, Mutex};

use salsa::plumbing::AsId;
use salsa::{Database as _, Setter};
use tessera_frontend::check::{file_diagnostics, infer_function};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};

/// A database that records every query execution (salsa's `WillExecute` events).
fn database() -> (Database, Arc<Mutex<Vec<salsa::DatabaseKeyIndex>>>) {
    let keys: Arc<Mutex<Vec<salsa::DatabaseKeyIndex>>> = Arc::default();
    let sink = keys.clone();
    let db = Database::with_event_callback(move |event| {
        if let salsa::EventKind::WillExecute { database_key } = event.kind {
            sink.lock().unwrap().push(database_key);
        }
    });
    (db, keys)
}

/// Resolves the recorded keys to (query name, id) now that we hold the database.
fn named(db: &Database, keys: &Mutex<Vec<salsa::DatabaseKeyIndex>>) -> Vec<(String, salsa::Id)> {
    std::mem::take(&mut *keys.lock().unwrap())
        .into_iter()
        .map(|k| (db.ingredient_debug_name(k.ingredient_index()).to_string(), k.key_index()))
        .collect()
}

/// The length of a `def` header up to and including the newline after its `:`.
fn header_len(def: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in def.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ':' if depth == 0 => return i + def[i..].find('\n').expect("a newline after the header") + 1,
            _ => {}
        }
    }
    panic!("no header end in {def:?}")
}

#[test]
fn editing_one_body_reruns_only_that_functions_inference() {
    let text = tessera_frontend::synthetic::module_with_functions(50);
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "fifty.tsr".into(), text.clone(), None);
    assert!(file_diagnostics(&db, file).is_empty(), "the generated module checks clean");
    let functions: Vec<(String, salsa::Id)> =
        item_index(&db, file).functions.iter().map(|f| (f.key.name(&db).clone(), f.key.as_id())).collect();
    assert_eq!(functions.len(), 50);
    let first_run = named(&db, &keys);
    let inferred = first_run.iter().filter(|(q, _)| q == "infer_function").count();
    assert_eq!(inferred, 50, "cold: every function is inferred once");

    // Edit a statement inside the 25th function's body: insert a local binding.
    let (target_name, target_id) = functions[24].clone();
    let def = text.find(&format!("def {target_name}(")).expect("the function is in the text");
    let body_line = def + header_len(&text[def..]);
    let mut edited = text.clone();
    edited.insert_str(body_line, "    extra_local = 1 + 2\n");
    file.set_text(&mut db).to(edited);
    assert!(file_diagnostics(&db, file).is_empty(), "the edit keeps the module clean");

    let second_run = named(&db, &keys);
    let reinferred: Vec<salsa::Id> =
        second_run.iter().filter(|(q, _)| q == "infer_function").map(|(_, id)| *id).collect();
    assert_eq!(reinferred, vec![target_id], "only `{target_name}` is inferred again; executions: {second_run:?}");
    let resigned: Vec<&(String, salsa::Id)> = second_run.iter().filter(|(q, _)| q == "fn_signature").collect();
    assert!(resigned.iter().all(|(_, id)| *id == target_id), "no other signature is recomputed: {resigned:?}");
    // The other functions' inference results are the same objects as before.
    let other = item_index(&db, file).functions[0].key;
    let _ = infer_function(&db, other);
    assert!(named(&db, &keys).is_empty(), "reading an unaffected function runs nothing");
}

#[test]
fn edits_that_shift_positions_reuse_every_inference() {
    let text = tessera_frontend::synthetic::module_with_functions(10);
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "ten.tsr".into(), text.clone(), None);
    let before: Vec<_> = file_diagnostics(&db, file).to_vec();
    named(&db, &keys);
    // A comment at the top moves every item down by a line but changes no body.
    file.set_text(&mut db).to(format!("# a new first line\n{text}"));
    let after: Vec<_> = file_diagnostics(&db, file).to_vec();
    assert_eq!(before.len(), after.len());
    let runs = named(&db, &keys);
    assert!(
        !runs.iter().any(|(q, _)| q == "infer_function" || q == "fn_signature"),
        "no function is re-checked after a position-only change: {runs:?}"
    );
}

#[test]
fn a_signature_change_rechecks_callers_only_through_the_signature() {
    let text = "from tessera import *\n\n\
@kernel\ndef add(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32], out: Tensor[\"N\", f32]):\n    for i0 in tile.parallel(0, N, 256):\n        out[i0:i0 + 256] = tile.load(x[i0:i0 + 256]) + tile.load(y[i0:i0 + 256])\n\n\
@jit\ndef caller(a: Tensor[\"P\", f32], c: Tensor[\"P\", f32]):\n    add(a, a, c)\n\n\
@jit\ndef unrelated(a: Tensor[\"P\", f32]):\n    return exp(a)\n";
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "calls.tsr".into(), text.to_string(), None);
    assert!(file_diagnostics(&db, file).is_empty());
    named(&db, &keys);
    // Make `add`'s second parameter a different symbol: the caller's binding now conflicts.
    file.set_text(&mut db).to(text.replacen(
        "y: Tensor[\"N\", f32]",
        "y: Tensor[\"M\", f32], z: Tensor[\"N\", f32]",
        1,
    ));
    let diagnostics = file_diagnostics(&db, file).to_vec();
    assert!(diagnostics.iter().any(|d| d.code == tessera_frontend::Code::E0801), "{diagnostics:?}");
    let runs = named(&db, &keys);
    let names: Vec<String> = item_index(&db, file)
        .functions
        .iter()
        .filter(|f| runs.iter().any(|(q, id)| q == "infer_function" && *id == f.key.as_id()))
        .map(|f| f.key.name(&db).clone())
        .collect();
    assert_eq!(names, vec!["add".to_string(), "caller".to_string()], "`unrelated` is not re-checked");
}

#[test]
fn editing_an_autotune_candidate_keeps_the_bodys_inference() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/gemm.tsr")).unwrap();
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "gemm.tsr".into(), text.clone(), None);
    assert!(file_diagnostics(&db, file).is_empty());
    named(&db, &keys);
    // BM=[64, 128] → BM=[64, 256]: the decorator changes length, the body does not.
    file.set_text(&mut db).to(text.replacen("BM=[64, 128]", "BM=[64, 256]", 1));
    assert!(file_diagnostics(&db, file).is_empty());
    let runs = named(&db, &keys);
    let queries: Vec<&str> = runs.iter().map(|(q, _)| q.as_str()).collect();
    assert!(queries.contains(&"fn_decorators"), "the decorators are re-analyzed: {queries:?}");
    assert!(!queries.contains(&"infer_function"), "the body is not re-inferred: {queries:?}");
    assert!(!queries.contains(&"fn_signature") || runs.iter().filter(|(q, _)| q == "fn_signature").count() == 1);
}

/// A derived kernel (`small = k.with_schedule(S)`): editing `S` re-runs the derived
/// kernel's decorators and no function's inference (its signature is equal, and `k`'s
/// decorators are untouched); its schedule follows the edit.
#[test]
fn editing_a_with_schedule_argument_reruns_no_inference() {
    let text = |bm: u32| {
        format!(
            "from tessera import *\n\n@kernel\ndef k(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32]):\n    \
             ctx = tile.context()\n    for i0 in tile.parallel(0, N, ctx.BM):\n        \
             y[i0:i0 + ctx.BM] = tile.load(x[i0:i0 + ctx.BM])\n\n\
             small = k.with_schedule(Schedule(block=({bm}, 32)))\n"
        )
    };
    let (mut db, keys) = database();
    let file = SourceFile::new(&db, "k.tsr".into(), text(32), None);
    assert!(file_diagnostics(&db, file).is_empty());
    let small = item_index(&db, file).function(&db, "small").unwrap().key.as_id();
    let bm = |db: &Database| {
        let key = item_index(db, file).function(db, "small").unwrap().key;
        let schedule = tessera_frontend::check::fn_decorators(db, key).schedule.clone().unwrap();
        schedule.fixed.int("BM")
    };
    assert_eq!(bm(&db), Some(32));
    named(&db, &keys);
    file.set_text(&mut db).to(text(64));
    assert!(file_diagnostics(&db, file).is_empty());
    assert_eq!(bm(&db), Some(64));
    let rerun = named(&db, &keys);
    let inferred: Vec<_> = rerun.iter().filter(|(q, _)| q == "infer_function").collect();
    assert!(inferred.is_empty(), "no inference re-runs: {inferred:?}");
    let decorators: Vec<_> = rerun.iter().filter(|(q, _)| q == "fn_decorators").map(|(_, id)| *id).collect();
    assert_eq!(decorators, vec![small], "only the derived kernel's decorators re-run");
}
