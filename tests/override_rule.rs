//! One override rule for every front door (issue 12): the cases of
//! `tests/fixtures/override_rule.txt` are accepted or refused, with the same reason, by
//! `tessera lower` (here), the explorer (here) and the server's `tessera/lowering`
//! request (`lsp/tests/features.rs`).

use std::process::Command;

use tessera_tui::workspace::{Overrides, Workspace};

const GEMM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gemm.tsr");

/// One line of the fixture.
struct Case {
    kind: String,
    key: String,
    value: String,
    /// `None` when the rule accepts it; else what the refusal says.
    reason: Option<String>,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/override_rule.txt"))
        .expect("the fixture");
    let cases: Vec<Case> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap().to_string();
            let (key, value) = words.next().unwrap().split_once('=').unwrap();
            let verdict = words.next().unwrap();
            let reason = words.collect::<Vec<_>>().join(" ");
            assert!(verdict == "accept" || verdict == "reject", "{line}");
            Case {
                kind,
                key: key.to_string(),
                value: value.to_string(),
                reason: (verdict == "reject").then_some(reason),
            }
        })
        .collect();
    assert!(cases.len() >= 8, "the fixture has its cases");
    cases
}

#[test]
fn the_cli_applies_the_override_rule() {
    for case in cases() {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["lower", GEMM, "--kernel", "gemm", "--stage", "sched"])
            .arg(format!("--{}", case.kind))
            .arg(format!("{}={}", case.key, case.value))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        match &case.reason {
            None => assert_eq!(out.status.code(), Some(0), "{}={} is accepted: {stderr}", case.key, case.value),
            Some(reason) => {
                assert_eq!(out.status.code(), Some(2), "{}={} is refused: {stderr}", case.key, case.value);
                let expected = format!("error: --{} {}={}: {reason}", case.kind, case.key, case.value);
                assert!(stderr.starts_with(&expected), "expected `{expected}`, got `{stderr}`");
            }
        }
    }
}

#[test]
fn the_explorer_applies_the_override_rule() {
    let ws = Workspace::open(std::path::Path::new(GEMM)).unwrap();
    for case in cases() {
        let mut overrides = Overrides::default();
        if case.kind == "schedule" {
            let value = tessera_tui::components::schedule::parse_value(&case.value);
            // The schedule panel's edit path and the command line's `--schedule` path.
            let edit = ws.schedule_rejection("gemm", &case.key, &value);
            assert_eq!(edit.is_some(), case.reason.is_some(), "edit {}={}: {edit:?}", case.key, case.value);
            overrides.set_schedule(&case.key, value);
        } else {
            overrides.dims.insert(case.key.clone(), case.value.parse().unwrap());
        }
        let info = ws.config("gemm", &overrides).unwrap();
        let refused: Vec<(String, String)> = info.rejected.iter().map(|r| (r.key.clone(), r.reason.clone())).collect();
        match &case.reason {
            None => assert!(refused.is_empty(), "{}={} is accepted: {refused:?}", case.key, case.value),
            Some(reason) => {
                assert_eq!(refused.len(), 1, "{}={}: {refused:?}", case.key, case.value);
                assert!(refused[0].1.starts_with(reason.as_str()), "expected `{reason}`, got `{}`", refused[0].1);
            }
        }
    }
}
