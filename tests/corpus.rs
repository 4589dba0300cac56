//! The shared contract corpus (`../shared/corpus`) through the real binary, with the
//! shared `corpus-check` script: every file must pass.

use std::path::PathBuf;
use std::process::Command;

fn shared() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared");
    dir.join("corpus").is_dir().then_some(dir)
}

/// Codes the IR issue implements; until then their corpus files are known gaps.
const TARGET_LINTS: &[&str] = &["E0500", "E0501", "E0703", "W0600", "W0601", "W0602", "W0702"];

#[test]
fn contract_corpus_passes() {
    let Some(shared) = shared() else {
        panic!("../shared/corpus is missing: the contract corpus lives beside the checkout");
    };
    for target in ["sm_90", "sm_80"] {
        let out = Command::new("python3")
            .arg(shared.join("tools/corpus-check"))
            .args(["--tessera", env!("CARGO_BIN_EXE_tessera"), "--target", target])
            .arg(shared.join("corpus"))
            .output()
            .expect("python3 runs corpus-check");
        let report = String::from_utf8_lossy(&out.stdout);
        let failures: Vec<&str> = report.lines().filter(|l| l.starts_with("FAIL")).collect();
        let unexpected: Vec<&&str> = failures
            .iter()
            .filter(|l| !TARGET_LINTS.iter().any(|code| l.contains(&format!("missing [{code}@"))))
            .collect();
        assert!(unexpected.is_empty(), "{target}: corpus failures:\n{}", report);
        assert!(report.trim_end().ends_with("failed"), "{report}");
    }
}
