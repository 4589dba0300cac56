//! The guard between the client and tower-lsp: it frames the raw input itself, answers
//! or drops every malformed message, hands tower-lsp only messages it can decode, and
//! owns the end of the session.
//!
//! tower-lsp stops reading at the first message it cannot decode (its framed reader ends
//! after an error), so one bad message from a client would end the server: an id that
//! is not an `i64` or a string (`1.5`, `2^64`, `{}`), a duplicated key, a response
//! without a valid error object. Here:
//!
//! - a body that is not JSON is answered with "parse error" (-32700, id `null`), and so
//!   are bytes that are not a header where a header must be (a missing or unreadable
//!   `Content-Length`; the reader resynchronizes at the next `Content-Length`);
//! - JSON that is not a valid request is answered with "invalid request" (-32600): to
//!   its id when the id is valid, else to `null`;
//! - a `$/` request (with an id) is answered with "method not found" (-32601), as LSP
//!   requires; `$/` notifications go on (tower-lsp handles `$/cancelRequest`);
//! - a notification or response that is malformed is dropped (nothing can answer it);
//! - everything else is passed on re-serialized, so that tower-lsp decodes exactly
//!   what was checked here.
//!
//! These answers are written by the guard itself (`write_output` merges them with
//! tower-lsp's output at message boundaries), so they do not depend on the server's
//! state (before `initialize` and after `shutdown` too).
//!
//! Document texts (`didOpen`, `didChange`) do not travel through tower-lsp: the guard
//! keeps each in `Texts` and passes on a reference (`tessera-text:N`) that the server
//! trades back. tower-lsp's reader keeps a buffer as large as the largest message it
//! has read, so a 50 000-line `didOpen` would otherwise stay in memory after the
//! document is closed (and be copied twice more).
//!
//! `exit` in any form (with an id, with params) ends the input: tower-lsp gets a plain
//! `exit` notification and then the end of its input, whether or not the client keeps
//! our stdin open. The end of stdin ends it too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Larger bodies are treated as a corrupt header (and skipped).
const MAX_CONTENT_LENGTH: usize = 512 << 20;

/// Input that cannot start a header is given up in blocks of this size.
const MAX_GARBAGE: usize = 1 << 16;

/// After `exit` following a `shutdown` that tower-lsp has not run yet, how long to wait
/// for it (so that the exit code says it was received).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;

/// How a document text kept in `Texts` is referred to in the message tower-lsp decodes.
const TEXT_REF: &str = "tessera-text:";

/// The texts of `didOpen` and `didChange` notifications on their way to the server.
#[derive(Default)]
pub struct Texts {
    next: AtomicU64,
    kept: Mutex<BTreeMap<u64, String>>,
}

impl Texts {
    fn kept(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, String>> {
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `text`; returns the reference to pass on in its place.
    fn put(&self, text: String) -> String {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        self.kept().insert(id, text);
        format!("{TEXT_REF}{id}")
    }

    /// The text a reference from `put` stands for (anything else is returned as is).
    ///
    /// Notifications reach the server's handlers in the order they were received (the
    /// edits depend on it), so texts kept before this one belong to notifications that
    /// tower-lsp dropped (invalid params, not initialized): they are forgotten.
    pub fn take(&self, text: String) -> String {
        let Some(id) = text.strip_prefix(TEXT_REF).and_then(|n| n.parse::<u64>().ok()) else {
            return text;
        };
        let mut kept = self.kept();
        let later = kept.split_off(&id);
        *kept = later;
        kept.remove(&id).unwrap_or(text)
    }

    /// Replaces the document texts of a `didOpen` or `didChange` by references.
    fn stash(&self, method: &str, params: &mut Value) {
        let keep = |slot: Option<&mut Value>| {
            if let Some(Value::String(text)) = slot {
                *text = self.put(std::mem::take(text));
            }
        };
        match method {
            "textDocument/didOpen" => keep(params.get_mut("textDocument").and_then(|d| d.get_mut("text"))),
            "textDocument/didChange" => {
                if let Some(Value::Array(changes)) = params.get_mut("contentChanges") {
                    for change in changes {
                        keep(change.get_mut("text"));
                    }
                }
            }
            _ => {}
        }
    }
}

#[derive(Debug, PartialEq)]
enum Frame {
    Message(Vec<u8>),
    /// Bytes were skipped; `garbage` when they were more than whitespace between
    /// messages.
    Skipped {
        garbage: bool,
    },
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Drops `n` bytes from the front of `buf` and says whether they were garbage.
fn skip(buf: &mut Vec<u8>, n: usize) -> Frame {
    let n = n.min(buf.len());
    let garbage = buf[..n].iter().any(|b| !b.is_ascii_whitespace());
    buf.drain(..n);
    Frame::Skipped { garbage }
}

/// The `Content-Length` of a header block, if it is one.
fn content_length(header: &[u8]) -> Option<usize> {
    let header = std::str::from_utf8(header).ok()?;
    let mut lines = header.split("\r\n");
    // A header starts at its first byte (garbage before it is not part of it).
    if !lines.clone().next().is_some_and(|l| l.contains(':')) {
        return None;
    }
    lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            value.trim().parse::<usize>().ok()
        } else {
            None
        }
    })
}

/// Splits one frame off the front of `buf`, or `None` when more input is needed.
fn next_frame(buf: &mut Vec<u8>) -> Option<Frame> {
    if buf.is_empty() {
        return None;
    }
    let next_header = |buf: &[u8]| find(&buf[1..], b"Content-Length").map(|p| p + 1);
    let Some(header_end) = find(buf, b"\r\n\r\n") else {
        // No complete header yet. Bytes before a later `Content-Length` are dropped.
        if let Some(p) = next_header(buf) {
            return Some(skip(buf, p));
        }
        if buf.len() > MAX_GARBAGE {
            return Some(skip(buf, buf.len()));
        }
        return None;
    };
    match content_length(&buf[..header_end]) {
        Some(len) if len <= MAX_CONTENT_LENGTH => {
            let start = header_end + 4;
            if buf.len() < start + len {
                return None;
            }
            let body = buf[start..start + len].to_vec();
            buf.drain(..start + len);
            Some(Frame::Message(body))
        }
        _ => {
            // Not a usable header: resynchronize at the next `Content-Length`.
            let to = next_header(buf).unwrap_or(header_end + 4);
            Some(skip(buf, to))
        }
    }
}

/// What to do with one received body.
#[derive(Debug, PartialEq)]
enum Action {
    /// Pass this (re-serialized) message on to tower-lsp.
    Forward(Vec<u8>),
    /// A `shutdown` request, passed on like `Forward`.
    Shutdown(Vec<u8>),
    /// Answer with this error response.
    Answer(Value),
    /// Nothing can be answered.
    Drop,
    /// `exit`, in any form.
    Exit,
}

fn error_response(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A request id tower-lsp accepts (an `i64`, a string or `null`).
fn valid_id(id: &Value) -> bool {
    match id {
        Value::Number(n) => n.as_i64().is_some(),
        Value::String(_) | Value::Null => true,
        _ => false,
    }
}

/// An error object tower-lsp accepts in a response.
fn valid_error(error: &Value) -> bool {
    error.get("code").is_some_and(|c| c.as_i64().is_some()) && error.get("message").is_some_and(Value::is_string)
}

fn to_bytes(map: Map<String, Value>) -> Vec<u8> {
    Value::Object(map).to_string().into_bytes()
}

fn classify(body: &[u8], texts: &Texts) -> Action {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Action::Answer(error_response(Value::Null, PARSE_ERROR, format!("parse error: {e}"))),
    };
    let Value::Object(mut map) = value else {
        return Action::Answer(error_response(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: a message must be a JSON object",
        ));
    };
    let method = map.remove("method");
    if matches!(&method, Some(Value::String(m)) if m == "exit") {
        return Action::Exit;
    }
    let id = map.remove("id");
    let id_ok = id.as_ref().is_none_or(valid_id);
    let jsonrpc_ok = map.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let params = map.remove("params");
    let Some(method) = method else {
        let (result, error) = (map.remove("result"), map.remove("error"));
        if result.is_none() && error.is_none() {
            // Neither a request nor a response.
            let id = id.filter(|_| id_ok).unwrap_or(Value::Null);
            return Action::Answer(error_response(id, INVALID_REQUEST, "invalid request: no `method`"));
        }
        // A response to one of our requests: never answered, dropped when malformed.
        let Some(id) = id.filter(|_| id_ok && jsonrpc_ok) else {
            return Action::Drop;
        };
        let mut out = Map::new();
        out.insert("jsonrpc".into(), "2.0".into());
        out.insert("id".into(), id);
        match (result, error) {
            (Some(result), None) => out.insert("result".into(), result),
            (None, Some(error)) if valid_error(&error) => out.insert("error".into(), error),
            _ => return Action::Drop,
        };
        return Action::Forward(to_bytes(out));
    };
    // A request (with an id) or a notification.
    let Some(id) = id else {
        let well_formed = jsonrpc_ok && method.is_string() && params.as_ref().is_none_or(|p| !is_scalar(p));
        if !well_formed || method == "shutdown" {
            // Nothing can be answered. (A `shutdown` notification would put tower-lsp
            // in its shut-down state without anyone being told.)
            return Action::Drop;
        }
        let mut params = params;
        if let (Value::String(name), Some(params)) = (&method, params.as_mut()) {
            texts.stash(name, params);
        }
        return Action::Forward(to_bytes(message(None, method, params)));
    };
    if !id_ok {
        return Action::Answer(error_response(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: `id` must be a string or an integer in the signed 64-bit range",
        ));
    }
    let invalid =
        |what: &str| Action::Answer(error_response(id.clone(), INVALID_REQUEST, format!("invalid request: {what}")));
    if !jsonrpc_ok {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let Value::String(name) = &method else {
        return invalid("`method` must be a string");
    };
    if params.as_ref().is_some_and(is_scalar) {
        return invalid("`params` must be an object or an array");
    }
    if name.starts_with("$/") {
        // Protocol-implementation-dependent messages: a server that does not implement
        // one as a request answers MethodNotFound.
        let mut answer = error_response(id, METHOD_NOT_FOUND, format!("method not found: {name}"));
        answer["error"]["data"] = method;
        return Action::Answer(answer);
    }
    if name == "shutdown" {
        // It takes no params; clients send `null`, `{}` or `[]`, which tower-lsp rejects.
        return Action::Shutdown(to_bytes(message(Some(id), method, None)));
    }
    Action::Forward(to_bytes(message(Some(id), method, params)))
}

fn is_scalar(v: &Value) -> bool {
    !(v.is_object() || v.is_array() || v.is_null())
}

fn message(id: Option<Value>, method: Value, params: Option<Value>) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("jsonrpc".into(), "2.0".into());
    if let Some(id) = id {
        out.insert("id".into(), id);
    }
    out.insert("method".into(), method);
    if let Some(params) = params {
        out.insert("params".into(), params);
    }
    out
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

const EXIT: &[u8] = br#"{"jsonrpc":"2.0","method":"exit"}"#;

/// Copies framed messages from `input` to `server` (tower-lsp's input), sending the
/// answers to malformed ones to `answers`. Returns at `exit` or at the end of the input,
/// having closed `server`. `shutdown` is set once the server has run a `shutdown`.
pub async fn pump<R, W>(
    mut input: R,
    mut server: W,
    answers: mpsc::Sender<Vec<u8>>,
    shutdown: Arc<AtomicBool>,
    texts: Arc<Texts>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let mut shutdown_sent = false;
    'read: loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(frame) = next_frame(&mut buf) {
            let action = match frame {
                Frame::Message(body) => classify(&body, &texts),
                Frame::Skipped { garbage: false } => continue,
                Frame::Skipped { garbage: true } => Action::Answer(error_response(
                    Value::Null,
                    PARSE_ERROR,
                    "parse error: bytes that are not a message header (a `Content-Length` header is required) were skipped",
                )),
            };
            let body = match action {
                Action::Forward(body) => body,
                Action::Shutdown(body) => {
                    shutdown_sent = true;
                    body
                }
                Action::Answer(response) => {
                    // Fails only once the output is gone; then nobody reads answers.
                    let _ = answers.send(framed(response.to_string().as_bytes())).await;
                    continue;
                }
                Action::Drop => continue,
                Action::Exit => {
                    // Let a `shutdown` sent just before run (tower-lsp starts it only
                    // when it reads it), so that it counts for the exit code.
                    let deadline = Instant::now() + SHUTDOWN_WAIT;
                    while shutdown_sent && !shutdown.load(Ordering::SeqCst) && Instant::now() < deadline {
                        let _ = server.flush().await;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    // tower-lsp cancels what is pending and stops at the end of its input.
                    let _ = server.write_all(&framed(EXIT)).await;
                    break 'read;
                }
            };
            if server.write_all(&framed(&body)).await.is_err() {
                break 'read;
            }
        }
        if server.flush().await.is_err() {
            break;
        }
        shrink(&mut buf);
    }
    let _ = server.flush().await;
    let _ = server.shutdown().await;
}

/// Gives back the memory a large message left in `buf` (a 50 000-line `didOpen` grows it
/// to the size of the file, and a `Vec` keeps its capacity).
fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > 1 << 18 && buf.len() < 1 << 16 {
        buf.shrink_to(1 << 16);
    }
}

/// The length of the first complete frame of tower-lsp's output in `buf`.
fn output_frame_len(buf: &[u8]) -> Option<usize> {
    let header_end = find(buf, b"\r\n\r\n")?;
    let total = header_end + 4 + content_length(&buf[..header_end]).unwrap_or(0);
    (buf.len() >= total).then_some(total)
}

/// Writes tower-lsp's output (`server`) and the guard's answers to `output`, whole
/// messages at a time. Returns when both have ended. After `output` fails (the client
/// is gone) both are still drained, so that nothing waits on a full pipe.
pub async fn write_output<R, W>(mut server: R, mut answers: mpsc::Receiver<Vec<u8>>, mut output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let (mut server_open, mut answers_open, mut broken) = (true, true, false);
    while server_open || answers_open {
        let mut out: Vec<u8> = Vec::new();
        tokio::select! {
            n = server.read(&mut chunk), if server_open => match n {
                Ok(0) | Err(_) => server_open = false,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(len) = output_frame_len(&buf) {
                        out.extend(buf.drain(..len));
                    }
                }
            },
            answer = answers.recv(), if answers_open => match answer {
                Some(frame) => out = frame,
                None => answers_open = false,
            },
        }
        if !out.is_empty() && !broken {
            broken = output.write_all(&out).await.is_err() || output.flush().await.is_err();
        }
        shrink(&mut buf);
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<Frame> {
        let mut buf = input.to_vec();
        let mut out = Vec::new();
        while let Some(f) = next_frame(&mut buf) {
            out.push(f);
        }
        out
    }

    fn msg(s: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{s}", s.len())
    }

    fn body(s: &str) -> Frame {
        Frame::Message(s.as_bytes().to_vec())
    }

    const GARBAGE: Frame = Frame::Skipped { garbage: true };
    const SPACE: Frame = Frame::Skipped { garbage: false };

    #[test]
    fn frames_and_resyncs() {
        let input = format!("{}garbage\r\n{}", msg("{\"a\":1}"), msg("{}"));
        assert_eq!(frames(input.as_bytes()), [body("{\"a\":1}"), GARBAGE, body("{}")]);
        let input = format!("Content-Length: x\r\n\r\n{}", msg("{}"));
        assert_eq!(frames(input.as_bytes()), [GARBAGE, body("{}")]);
        let input = format!("Content-Type: foo\r\n\r\n{}", msg("{}"));
        assert_eq!(frames(input.as_bytes()), [GARBAGE, body("{}")]);
        // Whitespace between messages is not an error.
        let input = format!("{}\r\n{}", msg("{}"), msg("[]"));
        assert_eq!(frames(input.as_bytes()), [body("{}"), SPACE, body("[]")]);
        // Incomplete: waits.
        assert!(frames(b"Content-Length: 10\r\n\r\n{}").is_empty());
        // Endless garbage is given up in blocks.
        assert_eq!(frames(&vec![b'x'; MAX_GARBAGE + 1]), [GARBAGE]);
    }

    fn classify_str(b: &str) -> Action {
        classify(b.as_bytes(), &Texts::default())
    }

    fn answer_code(a: &Action) -> (Value, i64) {
        match a {
            Action::Answer(v) => (v["id"].clone(), v["error"]["code"].as_i64().unwrap()),
            other => panic!("not an answer: {other:?}"),
        }
    }

    #[test]
    fn malformed_bodies_are_answered_or_dropped() {
        assert_eq!(answer_code(&classify_str("{nope")), (Value::Null, PARSE_ERROR));
        assert_eq!(answer_code(&classify_str("[1,2]")), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer_code(&classify_str(r#"{"id": 7, "method": "x"}"#)), (json!(7), INVALID_REQUEST));
        // Ids tower-lsp cannot decode.
        for id in ["1.5", "18446744073709551616", "9223372036854775808", "{}", "[1]", "true"] {
            let a = classify_str(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"shutdown"}}"#));
            assert_eq!(answer_code(&a), (Value::Null, INVALID_REQUEST), "{id}");
        }
        let a = classify_str(r#"{"jsonrpc":"2.0","id":1,"method":"hover","params":3}"#);
        assert_eq!(answer_code(&a), (json!(1), INVALID_REQUEST));
        let a = classify_str(r#"{"jsonrpc":"2.0","id":"s","method":"$/unknown"}"#);
        assert_eq!(answer_code(&a), (json!("s"), METHOD_NOT_FOUND));
        // Notifications and responses are never answered.
        assert_eq!(classify_str(r#"{"jsonrpc":"2.0","method":5}"#), Action::Drop);
        assert_eq!(classify_str(r#"{"jsonrpc":"1.0","method":"x"}"#), Action::Drop);
        assert_eq!(classify_str(r#"{"jsonrpc":"2.0","method":"shutdown"}"#), Action::Drop);
        assert_eq!(classify_str(r#"{"jsonrpc":"2.0","id":1.5,"result":1}"#), Action::Drop);
        assert_eq!(classify_str(r#"{"jsonrpc":"2.0","id":1,"error":"no"}"#), Action::Drop);
        assert_eq!(answer_code(&classify_str(r#"{"jsonrpc":"2.0","id":1.5}"#)), (Value::Null, INVALID_REQUEST));
        assert_eq!(answer_code(&classify_str(r#"{"jsonrpc":"2.0","id":"x"}"#)), (json!("x"), INVALID_REQUEST));
    }

    #[test]
    fn exit_in_any_form() {
        for m in [
            r#"{"jsonrpc":"2.0","method":"exit"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"exit"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"exit","params":7}"#,
            r#"{"method":"exit"}"#,
        ] {
            assert_eq!(classify_str(m), Action::Exit, "{m}");
        }
    }

    #[test]
    fn valid_messages_are_passed_on_canonically() {
        let ok = r#"{"jsonrpc":"2.0","id":1,"method":"hover","params":{}}"#;
        assert_eq!(classify_str(ok), Action::Forward(ok.as_bytes().to_vec()));
        // A duplicated key (which tower-lsp rejects) keeps one value.
        let dup = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"hover"}"#;
        assert_eq!(classify_str(dup), Action::Forward(br#"{"jsonrpc":"2.0","id":2,"method":"hover"}"#.to_vec()));
        let shutdown = classify_str(r#"{"jsonrpc":"2.0","id":"a","method":"shutdown","params":null}"#);
        assert_eq!(shutdown, Action::Shutdown(br#"{"jsonrpc":"2.0","id":"a","method":"shutdown"}"#.to_vec()));
        let cancel = r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#;
        assert_eq!(classify_str(cancel), Action::Forward(cancel.as_bytes().to_vec()));
        let response = r#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"m"}}"#;
        assert_eq!(classify_str(response), Action::Forward(response.as_bytes().to_vec()));
    }

    #[test]
    fn output_frames_are_whole() {
        let a = msg("{\"x\":1}");
        assert_eq!(output_frame_len(a.as_bytes()), Some(a.len()));
        assert_eq!(output_frame_len(&a.as_bytes()[..a.len() - 1]), None);
        let two = format!("{a}{a}");
        assert_eq!(output_frame_len(two.as_bytes()), Some(a.len()));
    }

    #[test]
    fn document_texts_go_around_tower_lsp() {
        let texts = Texts::default();
        let open = r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.tsr","text":"x = 1"}}}"#;
        let Action::Forward(body) = classify(open.as_bytes(), &texts) else { panic!() };
        let v: Value = serde_json::from_slice(&body).unwrap();
        let reference = v["params"]["textDocument"]["text"].as_str().unwrap().to_string();
        assert_eq!(reference, "tessera-text:0");
        let change = r#"{"jsonrpc":"2.0","method":"textDocument/didChange","params":{"contentChanges":[{"text":"a"},{"text":"tessera-text:0"}]}}"#;
        let Action::Forward(body) = classify(change.as_bytes(), &texts) else { panic!() };
        let v: Value = serde_json::from_slice(&body).unwrap();
        let refs: Vec<String> = v["params"]["contentChanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["text"].as_str().unwrap().into())
            .collect();
        assert_eq!(refs, ["tessera-text:1", "tessera-text:2"]);
        // Taken in order; a text that looks like a reference was kept like any other.
        assert_eq!(texts.take(refs[0].clone()), "a");
        assert_eq!(texts.take(refs[1].clone()), "tessera-text:0");
        // The open's text was never taken (a dropped notification): forgotten.
        assert_eq!(texts.take(reference.clone()), reference);
        assert!(texts.kept().is_empty());
        assert_eq!(texts.take("plain".into()), "plain");
    }
}
