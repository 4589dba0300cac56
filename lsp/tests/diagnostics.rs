//! Push diagnostics through the real server: on open, on incremental edits (a shape
//! error appears, then clears), versions never go backwards, and bursts are debounced.

mod support;

use std::time::{Duration, Instant};

use expect_test::expect;
use serde_json::{json, Value};
use support::*;

const URI: &str = "file:///tmp/tessera-lsp-tests/graph.tsr";

const SRC: &str = r#"from tessera import *

@jit
def linear(x: Tensor["B", "D", bf16 @accum(f32)],
           w: Tensor["D", "N", bf16]) -> Tensor["B", "N", bf16]:
    y = x @ w
    return y
"#;

fn render(text: &str, params: &Value) -> String {
    params["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let related: Vec<String> = d["relatedInformation"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .map(|i| {
                            format!(
                                "  label {} {:?}: {}",
                                fmt_range(&i["location"]["range"]),
                                slice(text, &i["location"]["range"]),
                                i["message"].as_str().unwrap()
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut s = format!(
                "{} {} {} {:?}: {}",
                d["code"].as_str().unwrap(),
                d["severity"],
                fmt_range(&d["range"]),
                slice(text, &d["range"]),
                d["message"].as_str().unwrap()
            );
            for r in related {
                s.push('\n');
                s.push_str(&r);
            }
            s
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn change(s: &mut Server, version: i64, range: Value, text: &str) {
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": version}, "contentChanges": [{"range": range, "text": text}]}),
    );
}

fn range(l1: u32, c1: u32, l2: u32, c2: u32) -> Value {
    json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}})
}

#[test]
fn shape_error_appears_then_clears() {
    let mut s = Server::initialized(json!({}));
    let first = s.open_and_wait(URI, SRC);
    assert_eq!(frontend_diagnostics(&first), json!([]), "the example checks clean");

    // `w: Tensor["D", ...]` → `w: Tensor["K", ...]`: the matmul's inner dims differ.
    let mut text = SRC.replace("w: Tensor[\"D\"", "w: Tensor[\"K\"");
    change(&mut s, 2, range(4, 22, 4, 23), "K");
    let d = s.diagnostics_for(URI, 2);
    expect![[r#"
        E0301 1 6:8-6:13 "x @ w": matmul: inner dimensions differ: `x` is [B, D] but `w` is [K, N] (D ≠ K)
          label 6:8-6:9 "x": [B, D] (inner dim D)
          label 6:12-6:13 "w": [K, N] (inner dim K)"#]]
    .assert_eq(&render(&text, &d));

    // Undo with another range edit: the error clears.
    text = SRC.to_string();
    change(&mut s, 3, range(4, 22, 4, 23), "D");
    let d = s.diagnostics_for(URI, 3);
    assert_eq!(frontend_diagnostics(&d), json!([]), "{}", render(&text, &d));

    // A typo in a body; its fix-it is also the quick fix.
    change(&mut s, 4, range(5, 8, 5, 9), "xx");
    let text = SRC.replace("y = x @ w", "y = xx @ w");
    let d = s.diagnostics_for(URI, 4);
    expect![[r#"E0200 1 6:8-6:10 "xx": undefined name `xx`"#]].assert_eq(&render(&text, &d));
    assert!(s.shutdown().success());
}

#[test]
fn labels_become_related_information() {
    let src = "from tessera import *\n\nX = 1\nX = 2\n";
    let mut s = Server::initialized(json!({}));
    let d = s.open_and_wait(URI, src);
    expect![[r#"
        E0202 1 4:0-4:1 "X": `X` is defined more than once
        note: rename this constant or remove one of the definitions
          label 3:0-3:1 "X": first defined here"#]]
    .assert_eq(&render(src, &d));
}

#[test]
fn versions_never_go_backwards_and_bursts_coalesce() {
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, SRC);
    // 60 quick edits inside the body: insert and delete a character alternately.
    let n = 60;
    for v in 0..n {
        let version = 2 + v as i64;
        if v % 2 == 0 {
            change(&mut s, version, range(6, 4, 6, 4), "#");
        } else {
            change(&mut s, version, range(6, 4, 6, 5), "");
        }
    }
    let last = 1 + n as i64;
    let final_diags = s.diagnostics_for(URI, last);
    assert_eq!(frontend_diagnostics(&final_diags), json!([]));
    let published: Vec<i64> = s
        .drain_notifications("textDocument/publishDiagnostics", Duration::from_millis(300))
        .iter()
        .filter(|p| p["uri"] == URI)
        .map(|p| p["version"].as_i64().unwrap())
        .collect();
    // Everything published before the final version came earlier (in the backlog) and
    // nothing newer than the last version arrives after it.
    assert!(published.iter().all(|&v| v < last), "{published:?}");
    let mut sorted = published.clone();
    sorted.sort();
    assert_eq!(sorted, published, "published versions must increase");
    // The burst was coalesced: far fewer publishes than edits.
    assert!(published.len() < n / 2, "{} publishes for {n} edits", published.len());
}

#[test]
fn a_single_edit_is_checked_without_waiting_for_the_debounce() {
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, SRC);
    let mut worst = Duration::ZERO;
    for v in 0..10 {
        let version = 2 + v;
        let t = Instant::now();
        if v % 2 == 0 {
            change(&mut s, version, range(6, 4, 6, 4), "#");
        } else {
            change(&mut s, version, range(6, 4, 6, 5), "");
        }
        s.diagnostics_for(URI, version);
        worst = worst.max(t.elapsed());
    }
    // The debounce is 75 ms; a lone keystroke must not pay it (debug build: generous).
    assert!(worst < Duration::from_millis(1000), "{worst:?}");
}

#[test]
fn closing_clears_diagnostics() {
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, "from tessera import *\nX = undefined_name\n");
    s.notify("textDocument/didClose", json!({"textDocument": {"uri": URI}}));
    let d =
        s.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == URI && p["diagnostics"] == json!([]));
    assert!(d.get("version").is_none() || d["version"].is_null());
    // Requests on the closed document are errors, not crashes.
    let r =
        s.request("textDocument/hover", json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}
