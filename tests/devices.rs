//! `tessera devices` through the real binary: one line per device kind, each saying yes
//! (with what it found) or no (with why), and exit 0 either way.

use std::process::Command;

#[test]
fn devices_lists_every_backend_and_nccl_with_a_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).arg("devices").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let names: Vec<&str> = lines.iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(names, ["gpu", "cpu", "interpreter", "nccl"], "{text}");
    for line in &lines {
        let answer = line.split_once(' ').map(|(_, rest)| rest.trim_start()).unwrap_or("");
        assert!(answer.starts_with("yes: ") || answer.starts_with("no: "), "{line}");
        assert!(answer.len() > 6, "no reason given: {line}");
    }
    // The interpreter needs nothing, so it is always there.
    assert!(lines[2].contains("yes: reference interpreter"), "{text}");
}
