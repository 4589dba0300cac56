//! The shared contract corpus (`../shared/corpus`) through the real binary: every file
//! passes the shared `corpus-check` script on both GPU targets, and every function of
//! the valid corpus lowers through all four stages.

use std::path::PathBuf;
use std::process::Command;

fn shared() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared");
    assert!(dir.join("corpus").is_dir(), "../shared/corpus is missing: the contract corpus lives beside the checkout");
    dir
}

#[test]
fn contract_corpus_passes() {
    let shared = shared();
    for target in ["sm_90", "sm_80"] {
        let out = Command::new("python3")
            .arg(shared.join("tools/corpus-check"))
            .args(["--tessera", env!("CARGO_BIN_EXE_tessera"), "--target", target])
            .arg(shared.join("corpus"))
            .output()
            .expect("python3 runs corpus-check");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.trim_end().ends_with(" 0 failed"), "{target}: corpus failures:\n{report}");
        assert!(out.status.success(), "{target}: corpus-check exited with {:?}:\n{report}", out.status);
    }
}

/// Every `def` of a file (kernels, graph functions and helpers).
fn functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("def "))
        .filter_map(|rest| rest.split('(').next())
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn every_valid_function_lowers_through_all_stages() {
    let dir = shared().join("corpus/valid");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut failures = Vec::new();
    let mut lowered = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for name in functions(&text) {
            for target in ["sm_90", "sm_80", "cpu"] {
                let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                    .args(["lower"])
                    .arg(&file)
                    .args(["--kernel", &name, "--stage", "all", "--target", target])
                    .output()
                    .expect("tessera runs");
                let stderr = String::from_utf8_lossy(&out.stderr);
                if stderr.contains("is a helper") {
                    continue;
                }
                lowered += 1;
                if !out.status.success() {
                    failures.push(format!("{} {name} ({target}): {stderr}", file.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(lowered >= 3 * 13, "only {lowered} lowerings: did the corpus move?");
}
