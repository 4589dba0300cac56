//! The server answers or errors properly and never exits on bad input: malformed
//! JSON-RPC, wrong Content-Length, unknown methods, out-of-range positions, unopened
//! documents, handler panics, and a storm of edits.

mod support;

use serde_json::{json, Value};
use support::*;

const URI: &str = "file:///tmp/tessera-lsp-tests/robust.tsr";

fn alive_and_answering(s: &mut Server) {
    let r =
        s.request("textDocument/hover", json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 1}}));
    assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
    assert!(s.is_alive());
}

fn frame(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn example_server() -> Server {
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, &example("gemm.tsr"));
    s
}

#[test]
fn malformed_messages_get_error_responses() {
    let mut s = example_server();
    // Not JSON: a parse error with a null id.
    s.send_raw(&frame("{this is not json"));
    let r = s.response_to(Value::Null);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    alive_and_answering(&mut s);
    // JSON but not JSON-RPC.
    s.send_raw(&frame("[1, 2, 3]"));
    let r = s.response_to(Value::Null);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    s.send_raw(&frame(r#"{"id": 77, "method": "textDocument/hover"}"#));
    let r = s.response(77);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // Missing fields in params: invalid params.
    let r = s.request("textDocument/hover", json!({"textDocument": {}}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = s.request("textDocument/hover", json!(null));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Notifications with bad params are ignored.
    s.notify("textDocument/didChange", json!({"textDocument": 5}));
    s.notify("textDocument/didOpen", json!({}));
    // Not UTF-8.
    let mut bad = b"Content-Length: 4\r\n\r\n".to_vec();
    bad.extend_from_slice(&[0xff, 0xfe, 0x7b, 0x7d]);
    s.send_raw(&bad);
    let r = s.response_to(Value::Null);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}

#[test]
fn wrong_content_length_is_survived() {
    let mut s = example_server();
    // Too short: the body is cut; the rest is garbage before the next header.
    let body = json!({"jsonrpc": "2.0", "id": 500, "method": "shutdown"}).to_string();
    s.send_raw(format!("Content-Length: 10\r\n\r\n{body}").as_bytes());
    let r = s.response_to(Value::Null);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    alive_and_answering(&mut s);
    // Not a number, and a missing Content-Length: skipped.
    s.send_raw(b"Content-Length: many\r\n\r\n{}");
    s.send_raw(b"Content-Type: application/json\r\n\r\n{}");
    alive_and_answering(&mut s);
    // Too long: the next message completes the body (both are lost as one parse error),
    // and the server then goes on.
    let body = r#"{"jsonrpc":"2.0","id":600,"method":"shutdown"}"#;
    s.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len() + 20).as_bytes());
    s.send_raw(&[b'x'; 20]);
    let r = s.response_to(Value::Null);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}

#[test]
fn unknown_methods_and_early_requests() {
    let mut s = Server::start();
    // Before initialize: ServerNotInitialized.
    let r =
        s.request("textDocument/hover", json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let mut s = Server::initialize(s, json!({"target": "not-a-target"}));
    let r = s.request("tessera/noSuchMethod", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = s.request("workspace/symbol", json!({"query": "x"}));
    assert!(r.get("error").is_some(), "{r}");
    s.notify("tessera/noSuchNotification", json!({}));
    s.notify("$/setTrace", json!({"value": "off"}));
    s.open_and_wait(URI, &example("gemm.tsr"));
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}

#[test]
fn positions_outside_the_document() {
    let mut s = example_server();
    let far = json!({"line": 10_000, "character": 10_000});
    let past_eol = json!({"line": 3, "character": 10_000});
    for pos in [far.clone(), past_eol] {
        let tdp = json!({"textDocument": {"uri": URI}, "position": pos});
        for method in [
            "textDocument/hover",
            "textDocument/definition",
            "textDocument/completion",
            "textDocument/signatureHelp",
            "textDocument/prepareRename",
        ] {
            let r = s.request(method, tdp.clone());
            assert!(r.get("result").is_some() || r.get("error").is_some(), "{method}: {r}");
        }
        let r = s.request(
            "textDocument/references",
            json!({"textDocument": {"uri": URI}, "position": pos, "context": {"includeDeclaration": true}}),
        );
        assert!(r.get("result").is_some(), "{r}");
        let r =
            s.request("textDocument/rename", json!({"textDocument": {"uri": URI}, "position": pos, "newName": "z"}));
        assert!(r.get("error").is_some(), "{r}");
    }
    let r =
        s.request("textDocument/inlayHint", json!({"textDocument": {"uri": URI}, "range": {"start": far, "end": far}}));
    assert_eq!(r["result"], json!([]), "{r}");
    let r = s.request("textDocument/codeAction", json!({"textDocument": {"uri": URI}, "range": {"start": far, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}));
    assert!(r.get("result").is_some(), "{r}");
    // An edit far outside the document appends at its end.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"range": {"start": far, "end": far}, "text": "\n# tail\n"}]}),
    );
    s.diagnostics_for(URI, 2);
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}

#[test]
fn unopened_documents() {
    let mut s = Server::initialized(json!({}));
    let other = "file:///tmp/tessera-lsp-tests/never-opened.tsr";
    for (method, params) in [
        ("textDocument/hover", json!({"textDocument": {"uri": other}, "position": {"line": 0, "character": 0}})),
        ("textDocument/documentSymbol", json!({"textDocument": {"uri": other}})),
        (
            "textDocument/formatting",
            json!({"textDocument": {"uri": other}, "options": {"tabSize": 4, "insertSpaces": true}}),
        ),
        ("textDocument/semanticTokens/full", json!({"textDocument": {"uri": other}})),
        ("tessera/kernels", json!({"uri": other})),
        ("tessera/lowering", json!({"uri": other, "kernel": "k", "stage": "tile"})),
    ] {
        let r = s.request(method, params);
        assert_eq!(r["error"]["code"], -32602, "{method}: {r}");
    }
    // Changes to an unopened document are ignored.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": other, "version": 3}, "contentChanges": [{"text": "x"}]}),
    );
    s.notify("textDocument/didClose", json!({"textDocument": {"uri": other}}));
    assert!(s.is_alive());
    assert!(s.shutdown().success());
}

#[test]
fn a_panicking_handler_answers_an_error() {
    let s = Server::start_with_env(&[("TESSERA_LSP_INJECT_PANIC", "hover")]);
    let mut s = Server::initialize(s, json!({}));
    s.open_and_wait(URI, &example("gemm.tsr"));
    let tdp = json!({"textDocument": {"uri": URI}, "position": {"line": 8, "character": 5}});
    for _ in 0..3 {
        let r = s.request("textDocument/hover", tdp.clone());
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("injected fault in hover"));
    }
    // Everything else still works.
    let r = s.result("textDocument/documentSymbol", json!({"textDocument": {"uri": URI}}));
    assert_eq!(r.as_array().unwrap().len(), 1);
    assert!(s.shutdown().success());
}

#[test]
fn a_panicking_diagnostics_run_is_reported_and_survived() {
    let s = Server::start_with_env(&[("TESSERA_LSP_INJECT_PANIC", "diagnostics")]);
    let mut s = Server::initialize(s, json!({}));
    s.open(URI, &example("gemm.tsr"));
    let m = s.wait_notification("window/showMessage", |p| p["type"] == 1);
    assert!(m["message"].as_str().unwrap().contains("injected fault in diagnostics"), "{m}");
    // No made-up diagnostic was published; requests still work.
    let published = s.drain_notifications("textDocument/publishDiagnostics", std::time::Duration::from_millis(200));
    assert!(published.is_empty(), "{published:?}");
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}

#[test]
fn a_thousand_rapid_edits_then_a_request() {
    let mut s = example_server();
    // Type 1000 characters one by one at the end of the kernel body (a comment), each
    // its own didChange with a UTF-16 range, as an editor does.
    let text = example("gemm.tsr");
    let last_line = text.lines().count() as u32; // the empty line after the final newline
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"range": {"start": {"line": last_line, "character": 0}, "end": {"line": last_line, "character": 0}}, "text": "# "}]}),
    );
    for i in 0..1000u32 {
        let ch = if i % 3 == 0 { "é" } else { "x" };
        let col = 2 + i; // é is one UTF-16 unit
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": URI, "version": 3 + i}, "contentChanges": [{"range": {"start": {"line": last_line, "character": col}, "end": {"line": last_line, "character": col}}, "text": ch}]}),
        );
    }
    let def_line = text.lines().position(|l| l.starts_with("def gemm(")).expect("the example defines gemm") as u32;
    let hover = s.result(
        "textDocument/hover",
        json!({"textDocument": {"uri": URI}, "position": {"line": def_line, "character": 5}}),
    );
    assert!(hover["contents"]["value"].as_str().unwrap().contains("def gemm("), "{hover}");
    let d = s.diagnostics_for(URI, 1002);
    assert_eq!(frontend_diagnostics(&d), json!([]));
    // The document has exactly the typed text.
    let syms = s.result("textDocument/foldingRange", json!({"textDocument": {"uri": URI}}));
    assert!(syms.is_array());
    let formatted = s.result(
        "textDocument/formatting",
        json!({"textDocument": {"uri": URI}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    let edits = formatted.as_array().unwrap();
    let new_text = edits.first().map(|e| e["newText"].as_str().unwrap().to_string());
    if let Some(t) = new_text {
        let tail = t.lines().last().unwrap().to_string();
        assert_eq!(tail.chars().count(), 1002, "{tail}");
        assert_eq!(tail.matches('é').count(), 334);
    }
    assert!(s.shutdown().success());
}

#[test]
fn end_of_input_without_shutdown_exits_with_1() {
    let s = example_server();
    let status = s.close_input();
    assert_eq!(status.code(), Some(1));
}

/// Typing zeros after `512` in an autotune space (`BLOCK=[512000...]`): every keystroke's
/// lints stay bounded by the target's limits — the server names the tile it cannot hold
/// instead of allocating one element at a time until it aborts.
#[test]
fn typing_zeros_into_a_block_size_is_survived() {
    let mut s = Server::initialized(json!({}));
    let text = example("vector_add.tsr");
    let at = text.find("BLOCK=[512").expect("the example's space") + "BLOCK=[512".len();
    let before = &text[..at];
    let line = before.matches('\n').count() as u32;
    let col = (at - before.rfind('\n').map_or(0, |i| i + 1)) as u32;
    s.open_and_wait(URI, &text);
    for i in 0..16u32 {
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": URI, "version": 2 + i}, "contentChanges": [{"range": {"start": {"line": line, "character": col + i}, "end": {"line": line, "character": col + i}}, "text": "0"}]}),
        );
    }
    // 512 followed by 16 zeros: 5.12e18 elements in one tile.
    let d = s.diagnostics_for(URI, 17);
    let all = d["diagnostics"].to_string();
    assert!(all.contains("W0702") && all.contains("1044480 bytes of tiles in registers"), "{all}");
    alive_and_answering(&mut s);
    assert!(s.shutdown().success());
}
