//! JSON-RPC and LSP conformance of the real server binary over stdio: every malformed
//! message is answered where an answer is possible (and dropped otherwise) and the
//! server keeps serving; `$/` requests get MethodNotFound; `exit` in any form and the
//! end of the input end the process, with 0 after `shutdown` and 1 otherwise.
//!
//! Every read has a time limit (`support::TIMEOUT`, or the one given), so a hang fails
//! the test instead of blocking it.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const URI: &str = "file:///tmp/tessera-lsp-tests/conformance.tsr";

/// How long a process may take to exit after `exit` or the end of its input.
const EXIT_LIMIT: Duration = Duration::from_secs(10);

fn frame(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn ready() -> Server {
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, &example("vector_add.tsr"));
    s
}

/// A hover on the open document is answered (the server is alive and serving).
fn serving(s: &mut Server) {
    let r =
        s.request("textDocument/hover", json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}));
    assert!(r.get("result").is_some(), "{r}");
    assert!(s.is_alive());
}

fn error_code(r: &Value) -> i64 {
    r["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error response: {r}"))
}

/// Sends `raw` and returns the error response with a null id that it causes.
fn null_id_error(s: &mut Server, raw: &[u8]) -> i64 {
    s.send_raw(raw);
    error_code(&s.response_to(Value::Null))
}

/// Issue 10, reproducer 3: `"id": 1.5` or an id above `i64::MAX` made the server exit
/// (1), and the next `shutdown` was never answered.
#[test]
fn unparseable_ids_get_invalid_request_and_the_server_goes_on() {
    let mut s = ready();
    for id in ["1.5", "18446744073709551616", "9223372036854775808", "1e3", "{\"a\": 1}", "[1]", "true"] {
        let body = format!(r#"{{"jsonrpc": "2.0", "id": {id}, "method": "shutdown"}}"#);
        assert_eq!(null_id_error(&mut s, &frame(&body)), -32600, "id {id}");
        let body = format!(
            r#"{{"jsonrpc": "2.0", "id": {id}, "method": "textDocument/hover", "params": {{"textDocument": {{"uri": "{URI}"}}, "position": {{"line": 0, "character": 0}}}}}}"#
        );
        assert_eq!(null_id_error(&mut s, &frame(&body)), -32600, "id {id}");
        serving(&mut s);
    }
    // Ids at the ends of the range, and strings, are fine.
    for id in [json!("req-1"), json!(""), json!(i64::MAX), json!(i64::MIN), json!(-1)] {
        let position = json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}});
        s.send(&json!({"jsonrpc": "2.0", "id": id, "method": "textDocument/hover", "params": position}));
        let r = s.response_to(id.clone());
        assert!(r.get("result").is_some(), "id {id}: {r}");
    }
    // The `shutdown` after them is answered, and `exit` then exits with 0.
    assert_eq!(s.shutdown().code(), Some(0));
}

/// Sends `raw`, then a request that is answered (so the server has read past `raw`);
/// returns the codes of the errors with a null id that came back meanwhile.
fn null_id_errors(s: &mut Server, raw: &[u8]) -> Vec<i64> {
    s.send_raw(raw);
    serving(s);
    let errors = s.take_responses_to(&Value::Null, Duration::from_millis(100));
    errors.iter().map(error_code).collect()
}

fn assert_parse_errors(codes: Vec<i64>) {
    assert!(!codes.is_empty() && codes.iter().all(|&c| c == -32700), "{codes:?}");
}

#[test]
fn invalid_json_and_broken_framing_get_parse_errors() {
    let mut s = ready();
    assert_eq!(null_id_errors(&mut s, &frame("{\"jsonrpc\": \"2.0\", \"id\": 3,")), [-32700]);
    assert_eq!(null_id_errors(&mut s, &frame("")), [-32700]);
    assert_eq!(null_id_errors(&mut s, b"\xff\xfe{}"), [-32700]);
    // A body shorter than its Content-Length swallows the start of the next message (a
    // parse error); the rest of that one is skipped up to the next header (another).
    // (Bytes skipped in one go get one error: how many depends on how the input is
    // read, so the counts below are "at least one".)
    let hover = json!({"jsonrpc": "2.0", "id": 900, "method": "textDocument/hover", "params": {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}}).to_string();
    let mut raw = format!("Content-Length: {}\r\n\r\n{{}}", 2 + 30).into_bytes();
    raw.extend(frame(&hover));
    assert_parse_errors(null_id_errors(&mut s, &raw));
    // A body longer than its Content-Length: the message is cut (a parse error), and
    // the bytes left before the next header are reported too.
    let shutdown = r#"{"jsonrpc":"2.0","id":901,"method":"shutdown"}"#;
    let raw = format!("Content-Length: {}\r\n\r\n{shutdown}", shutdown.len() - 5);
    assert_parse_errors(null_id_errors(&mut s, raw.as_bytes()));
    // No Content-Length, an unreadable one, an absurd one: the header and the body
    // after it are skipped, each with an error.
    for header in [
        "Content-Type: application/vscode-jsonrpc; charset=utf-8",
        "Content-Length: twelve",
        "Content-Length: 99999999999999999999999",
        "Content-Length: -5",
    ] {
        let raw = format!("{header}\r\n\r\n{{\"jsonrpc\":\"2.0\",\"id\":902,\"method\":\"shutdown\"}}");
        assert_parse_errors(null_id_errors(&mut s, raw.as_bytes()));
    }
    // Whitespace between messages is no error.
    assert_eq!(null_id_errors(&mut s, b"\r\n\r\n"), [] as [i64; 0]);
    // None of those was taken for a `shutdown`.
    let r = s.request("textDocument/documentSymbol", json!({"textDocument": {"uri": URI}}));
    assert!(r.get("result").is_some(), "{r}");
    // JSON that is no request: invalid request, to the id when there is one.
    assert_eq!(null_id_error(&mut s, &frame("\"text\"")), -32600);
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 903, "method": 7}"#));
    assert_eq!(error_code(&s.response(903)), -32600);
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 904, "method": "textDocument/hover", "params": 5}"#));
    assert_eq!(error_code(&s.response(904)), -32600);
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 905}"#));
    assert_eq!(error_code(&s.response(905)), -32600);
    // Duplicated keys (which tower-lsp alone cannot decode) are no reason to stop.
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 1, "id": 906, "method": "textDocument/documentSymbol", "params": {"textDocument": {"uri": "file:///nowhere.tsr"}}}"#));
    assert_eq!(error_code(&s.response(906)), -32602);
    // Malformed notifications and responses cannot be answered: dropped.
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "method": 7}"#));
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 1.5, "result": null}"#));
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "id": 12, "error": "nope"}"#));
    s.send_raw(&frame(r#"{"jsonrpc": "2.0", "method": "textDocument/didChange", "params": 3}"#));
    serving(&mut s);
    assert_eq!(s.shutdown().code(), Some(0));
}

/// Issue 10, reproducer 5: `$/` requests with an id were never answered.
#[test]
fn dollar_requests_get_method_not_found_and_notifications_nothing() {
    let mut s = ready();
    s.send(&json!({"jsonrpc": "2.0", "id": 41, "method": "$/unknown", "params": {}}));
    let r = s.response(41);
    assert_eq!(error_code(&r), -32601, "{r}");
    s.send(&json!({"jsonrpc": "2.0", "id": "c", "method": "$/cancelRequest", "params": {"id": 1}}));
    assert_eq!(error_code(&s.response_to(json!("c"))), -32601);
    s.send(&json!({"jsonrpc": "2.0", "id": 42, "method": "$/setTrace", "params": {"value": "off"}}));
    assert_eq!(error_code(&s.response(42)), -32601);
    // Notifications: nothing comes back, and the server goes on.
    s.notify("$/cancelRequest", json!({"id": 12345}));
    s.notify("$/unknown", json!({}));
    s.notify("$/setTrace", json!({"value": "off"}));
    serving(&mut s);
    let unexpected: Vec<Value> = s
        .messages_within(Duration::from_millis(300))
        .into_iter()
        .filter(|m| m.get("method").is_none() && m.get("error").is_some())
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert_eq!(s.shutdown().code(), Some(0));
}

/// `exit` with `params` and an id, sent with stdin left open.
fn send_odd_exit(s: &mut Server) {
    s.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "exit", "params": {"now": true}}));
}

/// Issue 10, reproducer 4: an `exit` that carries an id left the server running.
#[test]
fn exit_with_an_id_before_shutdown_exits_with_1() {
    let mut s = ready();
    send_odd_exit(&mut s);
    let status = s.wait_exit(EXIT_LIMIT).expect("the server exits after `exit` (stdin still open)");
    assert_eq!(status.code(), Some(1));
}

#[test]
fn exit_with_an_id_after_shutdown_exits_with_0() {
    let mut s = ready();
    let r = s.request("shutdown", Value::Null);
    assert!(r.get("error").is_none(), "{r}");
    send_odd_exit(&mut s);
    let status = s.wait_exit(EXIT_LIMIT).expect("the server exits after `exit` (stdin still open)");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn plain_exit_with_stdin_open() {
    let mut s = ready();
    s.notify("exit", Value::Null);
    assert_eq!(s.wait_exit(EXIT_LIMIT).expect("exits").code(), Some(1));
    // `shutdown` and `exit` sent together, without waiting for the answer.
    let mut s = ready();
    let mut raw = frame(r#"{"jsonrpc":"2.0","id":5,"method":"shutdown"}"#);
    raw.extend(frame(r#"{"jsonrpc":"2.0","method":"exit"}"#));
    s.send_raw(&raw);
    assert_eq!(s.wait_exit(EXIT_LIMIT).expect("exits").code(), Some(0));
}

#[test]
fn exit_before_initialize_and_a_malformed_message_before_it() {
    let mut s = Server::start();
    // Answered by the guard, whatever the server's state.
    assert_eq!(null_id_error(&mut s, &frame("{not json")), -32700);
    s.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "$/x"}));
    assert_eq!(error_code(&s.response(1)), -32601);
    s.send(&json!({"jsonrpc": "2.0", "method": "exit"}));
    assert_eq!(s.wait_exit(EXIT_LIMIT).expect("exits").code(), Some(1));
}

#[test]
fn end_of_input_ends_the_server() {
    let s = ready();
    assert_eq!(s.close_input().code(), Some(1));
    // After `shutdown` (and no `exit`): 0.
    let mut s = ready();
    let r = s.request("shutdown", Value::Null);
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(s.close_input().code(), Some(0));
    // In the middle of a message.
    let mut s = ready();
    s.send_raw(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"");
    assert_eq!(s.close_input().code(), Some(1));
}

#[test]
fn requests_after_shutdown_are_refused_and_malformed_ones_still_answered() {
    let mut s = ready();
    let r = s.request("shutdown", Value::Null);
    assert!(r.get("error").is_none(), "{r}");
    let r =
        s.request("textDocument/hover", json!({"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}));
    assert_eq!(error_code(&r), -32600, "{r}");
    assert_eq!(null_id_error(&mut s, &frame("{")), -32700);
    s.notify("exit", Value::Null);
    assert_eq!(s.wait_exit(EXIT_LIMIT).expect("exits").code(), Some(0));
}

/// Runs the server binary with `args` and no input; its exit code and output, within a
/// time limit.
fn run_with_args(args: &[&str]) -> (Option<i32>, String, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(server_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server binary starts");
    let deadline = std::time::Instant::now() + EXIT_LIMIT;
    while child.try_wait().ok().flatten().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("`{}` did not exit", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn launch_flags_as_clients_send_them() {
    let (code, out, _) = run_with_args(&["--version"]);
    assert_eq!((code, out.trim()), (Some(0), format!("tessera-lsp {}", env!("CARGO_PKG_VERSION")).as_str()));
    let (code, out, _) = run_with_args(&["--stdio", "--help"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("--clientProcessId") && out.contains("--stdio"), "{out}");
    for bad in [&["--socket=5007"][..], &["--clientProcessId"], &["--clientProcessId=me"], &["--frobnicate"]] {
        let (code, out, err) = run_with_args(bad);
        assert_eq!(code, Some(2), "{bad:?}");
        assert!(out.is_empty() && err.contains("tessera-lsp:"), "{bad:?}: {err}");
    }
    // `--stdio` and the editor's process id, in both spellings: it serves.
    let me = std::process::id().to_string();
    let with_eq = format!("--clientProcessId={me}");
    for args in [vec!["--stdio", "--clientProcessId", me.as_str()], vec![with_eq.as_str(), "--stdio"]] {
        let s = Server::start_with_args(server_path(), &args, &[]);
        let mut s = Server::initialize(s, json!({}));
        s.open_and_wait(URI, &example("vector_add.tsr"));
        serving(&mut s);
        assert_eq!(s.shutdown().code(), Some(0));
    }
}

#[test]
fn the_server_exits_when_the_client_process_is_gone() {
    let mut editor = std::process::Command::new("sleep").arg("600").spawn().expect("`sleep` runs");
    let pid = editor.id().to_string();
    let mut s = Server::start_with_args(server_path(), &["--stdio", "--clientProcessId", &pid], &[]);
    let r = s.request("initialize", json!({"processId": null, "capabilities": {}}));
    assert!(r.get("result").is_some(), "{r}");
    editor.kill().unwrap();
    editor.wait().unwrap();
    let status = s.wait_exit(EXIT_LIMIT).expect("the server exits once its client process is gone");
    assert_eq!(status.code(), Some(1));
}
