//! The server's front door to the one override rule (issue 12): `tessera/lowering` with
//! `schedule`/`dims` accepts or refuses each case of `tests/fixtures/override_rule.txt`
//! as `tessera lower` and the explorer do (`tests/override_rule.rs`), with the same reason.

mod support;

use serde_json::{json, Value};
use support::*;

const URI: &str = "file:///tmp/tessera-lsp-tests/override_rule/gemm.tsr";

#[test]
fn the_lowering_request_applies_the_override_rule() {
    let fixture = include_str!("../../tests/fixtures/override_rule.txt");
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, include_str!("../../examples/gemm.tsr"));
    let mut seen = 0;
    for line in fixture.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap();
        let (key, value) = words.next().unwrap().split_once('=').unwrap();
        let verdict = words.next().unwrap();
        let reason = words.collect::<Vec<_>>().join(" ");
        // Integers as JSON numbers, anything else as a string, as a client sends them.
        let json_value: Value = value.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(value));
        let params =
            json!({"uri": URI, "kernel": "gemm", "stage": "sched", "target": "sm_90", kind: {key: json_value}});
        let r = s.request("tessera/lowering", params);
        if verdict == "accept" {
            assert!(r["result"]["text"].as_str().is_some_and(|t| !t.is_empty()), "{line}: {r}");
        } else {
            assert_eq!(r["error"]["code"], -32602, "{line}: refused as invalid params: {r}");
            let message = r["error"]["message"].as_str().unwrap();
            let expected = format!("{key}={value}: {reason}");
            assert!(message.starts_with(&expected), "{line}: expected `{expected}`, got `{message}`");
        }
        seen += 1;
    }
    assert!(seen >= 8, "the fixture has its cases");
    s.shutdown();
}
