//! Every Tessera function among the code blocks of the design documents the language was
//! distilled from gets a clean run of `tessera check`: exit 0 or 1, JSON output, precise
//! spans inside the block, never an internal error. The blocks are fixtures, one per
//! block and exactly as the documents wrote them: `tests/fixtures/seeds/<doc>_<n>.tsr`.

use std::path::PathBuf;
use std::process::Command;

/// How many code blocks the documents hold; a lost or added fixture changes it.
const BLOCKS: usize = 8;

#[test]
fn seed_functions_get_precise_diagnostics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seeds");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut checked = 0;
    let mut undefined_tile_m = false;
    let mut paths: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "tsr")).collect();
    paths.sort();
    for file in paths {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let block = std::fs::read_to_string(&file).unwrap();
        assert!(block.contains("def "), "{name}: not a code block with a function");
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["check", "--format", "json"])
            .arg(&file)
            .output()
            .unwrap();
        let code = out.status.code();
        assert!(matches!(code, Some(0 | 1)), "{name}: exit {code:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        let lines = block.lines().count() as u64;
        for d in v["diagnostics"].as_array().unwrap() {
            let start = &d["range"]["start"];
            let end = &d["range"]["end"];
            let (sl, el) = (start["line"].as_u64().unwrap(), end["line"].as_u64().unwrap());
            assert!(
                sl >= 1 && el <= lines + 1 && (sl, start["column"].as_u64()) <= (el, end["column"].as_u64()),
                "{name}: span outside the block: {d}"
            );
            assert!(!(sl == 1 && el == lines + 1), "{name}: a whole-file span is not precise: {d}");
            assert_ne!(d["code"], "E0900", "{name}: internal error: {d}");
            if d["code"] == "E0200" && d["message"].as_str().unwrap().contains("`tile_m`") {
                undefined_tile_m = true;
            }
        }
        checked += 1;
    }
    assert_eq!(checked, BLOCKS, "expected {BLOCKS} code blocks in {}", dir.display());
    assert!(undefined_tile_m, "the seeds' GEMM uses the undefined `tile_m`");
}
