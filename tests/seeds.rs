//! Every Tessera function among the code blocks of the design documents in
//! `../shared/seeds` gets a clean run of `tessera check`: exit 0 or 1, JSON output,
//! precise spans inside the block, never an internal error.

use std::path::PathBuf;
use std::process::Command;

/// Code blocks: fenced ```python blocks, and unfenced runs of lines that start at a
/// decorator or `def` (some seeds paste code without fences, e.g. `python@jit`).
fn code_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```python\n") {
        let body = &rest[start + 10..];
        let Some(end) = body.find("```") else { break };
        blocks.push(body[..end].to_string());
        rest = &body[end + 3..];
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].strip_prefix("python").unwrap_or(lines[i]);
        let starts = line.starts_with('@') || line.starts_with("def ");
        let fenced = lines[..i].iter().rev().take_while(|l| !l.starts_with("```")).count() < i
            && lines[..i].iter().filter(|l| l.starts_with("```")).count() % 2 == 1;
        if starts && !fenced {
            let mut block = vec![line.to_string()];
            let mut j = i + 1;
            while j < lines.len() {
                let l = lines[j];
                let continues = l.starts_with(' ')
                    || l.starts_with('@')
                    || l.starts_with("def ")
                    || l.starts_with(')')
                    || l.trim().is_empty();
                if !continues {
                    break;
                }
                block.push(l.to_string());
                j += 1;
            }
            blocks.push(block.join("\n") + "\n");
            i = j;
        } else {
            i += 1;
        }
    }
    blocks.retain(|b| b.contains("def "));
    blocks
}

#[test]
fn seed_functions_get_precise_diagnostics() {
    let seeds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/seeds");
    let entries = std::fs::read_dir(&seeds).expect("../shared/seeds exists beside the checkout");
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut undefined_tile_m = false;
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        for (n, block) in code_blocks(&text).into_iter().enumerate() {
            let name = format!("{}_{n}.tsr", path.file_stem().unwrap().to_string_lossy());
            let file = dir.path().join(&name);
            std::fs::write(&file, &block).unwrap();
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
    }
    assert!(checked >= 8, "found only {checked} code blocks");
    assert!(undefined_tile_m, "the seeds' GEMM uses the undefined `tile_m`");
}
