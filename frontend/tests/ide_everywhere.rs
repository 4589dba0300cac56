//! The editor queries at every cursor position of real programs, whole and as they are
//! while being typed (every prefix that ends a line): hover, go to definition,
//! completion, signature help, references and rename never panic, and every range they
//! answer with lies inside the file on character boundaries. The whole-file queries
//! (highlighting, inlay hints, folding, outline) likewise. And renaming any name of a
//! valid program to a fresh one leaves it valid: a rename that missed an occurrence
//! would leave an undefined name.

use std::path::Path;

use tessera_frontend::check::file_diagnostics;
use tessera_frontend::ide;
use tessera_frontend::text::TextRange;
use tessera_frontend::{Database, SourceFile};

fn programs(dirs: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "tsr") {
                let name = format!("{dir}/{}", entry.file_name().to_string_lossy());
                out.push((name, std::fs::read_to_string(entry.path()).unwrap()));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "only {} programs: did the examples or the corpus move?", out.len());
    out
}

fn assert_range(what: &str, name: &str, text: &str, offset: u32, r: TextRange) {
    assert!(
        r.start <= r.end
            && (r.end as usize) <= text.len()
            && text.is_char_boundary(r.start as usize)
            && text.is_char_boundary(r.end as usize),
        "{name}: {what} at offset {offset} answered {r:?}, outside 0..{} or inside a character",
        text.len()
    );
}

/// Positions worth asking at: every token's start, middle and end (a cursor inside a
/// name, just after it, in the whitespace between), and the file's ends.
fn cursor_offsets(text: &str) -> Vec<u32> {
    let mut out = vec![0, text.len() as u32];
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        let word = c.is_alphanumeric() || c == '_';
        match (start, word) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let mid = (s..i).find(|&m| m > s + (i - s) / 2 - 1 && text.is_char_boundary(m)).unwrap_or(s);
                out.extend([s as u32, mid as u32, i as u32]);
                start = None;
            }
            _ => {}
        }
        if !word && !c.is_whitespace() {
            out.push(i as u32);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every query at every cursor position, and the whole-file queries, of one text.
fn query_everywhere(name: &str, text: &str) {
    let db = Database::default();
    let file = SourceFile::new(&db, name.into(), text.to_string(), None);
    for h in ide::highlight(&db, file) {
        assert_range("highlight", name, text, 0, h.range);
    }
    for hint in ide::inlay_hints(&db, file, None) {
        assert_range("inlay hint", name, text, 0, TextRange::new(hint.offset, hint.offset));
    }
    for fold in ide::folding_ranges(&db, file) {
        assert_range("folding range", name, text, 0, fold.range);
    }
    for symbol in ide::file_structure(&db, file) {
        assert_range("outline", name, text, 0, symbol.range);
        assert_range("outline name", name, text, 0, symbol.name_range);
    }
    for offset in cursor_offsets(text) {
        if let Some(h) = ide::hover(&db, file, offset) {
            assert_range("hover", name, text, offset, h.range);
            assert!(!h.markdown.trim().is_empty(), "{name}: empty hover at {offset}");
        }
        for t in ide::goto_definition(&db, file, offset) {
            assert_range("definition", name, text, offset, t.range);
            assert_range("definition focus", name, text, offset, t.focus);
        }
        let completions = ide::completions(&db, file, offset);
        if !completions.items.is_empty() {
            assert_range("completion", name, text, offset, completions.replace);
        }
        if let Some(help) = ide::signature_help(&db, file, offset) {
            for &(s, e) in &help.params {
                assert!(s <= e && e as usize <= help.label.len(), "{name}: parameter {s}..{e} of `{}`", help.label);
            }
        }
        for r in ide::find_references(&db, file, offset, true) {
            assert_range("reference", name, text, offset, r.range);
        }
        if let Ok(r) = ide::prepare_rename(&db, file, offset) {
            assert_range("rename", name, text, offset, r);
        }
    }
}

#[test]
fn every_query_at_every_position_of_every_program() {
    for (name, text) in programs(&["examples", "tests/corpus/valid", "tests/corpus/invalid"]) {
        query_everywhere(&name, &text);
    }
}

#[test]
fn every_query_at_every_position_while_a_program_is_typed() {
    // Each prefix that ends a line of a few programs with kernels, schedules and graph
    // functions: unclosed brackets, half-written decorators, bodies cut mid-loop.
    for (name, text) in programs(&["tests/corpus/valid"]) {
        if !["flash_attention", "search_spaces", "train_step", "derived_kernels"].iter().any(|p| name.contains(p)) {
            continue;
        }
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        for &end in ends.iter().step_by(3) {
            query_everywhere(&format!("{name} (first {end} bytes)"), &text[..end]);
        }
    }
}

/// Applies edits (in any order, not overlapping) to `text`.
fn apply(text: &str, mut edits: Vec<tessera_frontend::diagnostics::Edit>) -> String {
    edits.sort_by_key(|e| e.range.start);
    for pair in edits.windows(2) {
        assert!(pair[0].range.end <= pair[1].range.start, "overlapping rename edits {:?} and {:?}", pair[0], pair[1]);
    }
    let mut out = text.to_string();
    for e in edits.iter().rev() {
        out.replace_range(e.range.start as usize..e.range.end as usize, &e.text);
    }
    out
}

#[test]
fn renaming_any_name_of_a_valid_program_keeps_it_valid() {
    let mut renamed = 0;
    for (name, text) in programs(&["examples", "tests/corpus/valid"]) {
        let db = Database::default();
        let file = SourceFile::new(&db, name.clone().into(), text.clone(), None);
        let errors = |t: &str| {
            let db = Database::default();
            let f = SourceFile::new(&db, name.clone().into(), t.to_string(), None);
            file_diagnostics(&db, f)
                .iter()
                .filter(|d| d.is_error())
                .map(|d| format!("{}: {}", d.code, d.message))
                .collect::<Vec<_>>()
        };
        assert!(errors(&text).is_empty(), "{name} is not valid: {:?}", errors(&text));
        // Each renamable name once, at its first occurrence.
        let mut seen = std::collections::BTreeSet::new();
        for offset in cursor_offsets(&text) {
            let Ok(range) = ide::prepare_rename(&db, file, offset) else { continue };
            let word = &text[range.start as usize..range.end as usize];
            let Some(def) = ide::goto_definition(&db, file, offset).first().copied() else { continue };
            if !seen.insert((word.to_string(), def.focus.start)) {
                continue;
            }
            let fresh = format!("{word}_renamed");
            let edits = match ide::rename(&db, file, offset, &fresh) {
                Ok(edits) => edits,
                Err(e) => panic!("{name}: `{word}` at {offset} is renamable but rename refused: {e:?}"),
            };
            let after = apply(&text, edits);
            let errs = errors(&after);
            assert!(errs.is_empty(), "{name}: renaming `{word}` (at {offset}) to `{fresh}` broke it: {errs:?}");
            renamed += 1;
        }
    }
    assert!(renamed >= 100, "only {renamed} names renamed");
}

#[test]
fn renaming_from_any_occurrence_edits_the_same_places() {
    for (name, text) in programs(&["examples", "tests/corpus/valid"]) {
        let db = Database::default();
        let file = SourceFile::new(&db, name.clone().into(), text.clone(), None);
        // (cursor, the name's range there, the ranges a rename from there edits)
        let mut renames = Vec::new();
        for offset in cursor_offsets(&text) {
            let Ok(range) = ide::prepare_rename(&db, file, offset) else { continue };
            let Ok(edits) = ide::rename(&db, file, offset, "zz") else { continue };
            let mut edited: Vec<(u32, u32)> = edits.iter().map(|e| (e.range.start, e.range.end)).collect();
            edited.sort_unstable();
            renames.push((offset, range, edited));
        }
        // A rename from an occurrence it edits (the cursor at its start) edits the same.
        for (offset, range, edited) in &renames {
            for &(start, end) in edited {
                let Some((other, _, again)) =
                    renames.iter().find(|(o, r, _)| *o == start && r.start == start && r.end == end)
                else {
                    continue;
                };
                assert_eq!(
                    edited,
                    again,
                    "{name}: renaming `{}` at {offset} and at {other} edit different places",
                    &text[range.start as usize..range.end as usize]
                );
            }
        }
    }
}
