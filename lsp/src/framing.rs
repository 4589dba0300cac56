//! A guard in front of tower-lsp's reader: it frames the raw input itself and passes on
//! only well-formed JSON-RPC messages.
//!
//! tower-lsp stops serving at the first message it cannot decode (its framed reader
//! ends after a decode error), so a client that sends one malformed message would kill
//! the server. Here, a body that is not JSON becomes a request to
//! `tessera/$invalidMessage` with a `null` id, which the server answers with the JSON-RPC
//! "parse error" (-32700) response; valid JSON that is not a JSON-RPC message is
//! answered with "invalid request" (-32600), to its id when it has one. Headers without a
//! usable `Content-Length` are skipped up to the next `Content-Length`.

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The method the guard turns malformed messages into.
pub const INVALID_MESSAGE_METHOD: &str = "tessera/$invalidMessage";

/// Larger bodies are treated as a corrupt header (and skipped).
const MAX_CONTENT_LENGTH: usize = 512 << 20;

enum Frame {
    Message(Vec<u8>),
    /// Bytes were skipped; keep scanning.
    Skipped,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits one frame off the front of `buf`, or `None` when more input is needed.
fn next_frame(buf: &mut Vec<u8>) -> Option<Frame> {
    if buf.is_empty() {
        return None;
    }
    let Some(header_end) = find(buf, b"\r\n\r\n") else {
        // No complete header yet. Garbage before a later `Content-Length` is dropped.
        if let Some(p) = find(&buf[1..], b"Content-Length").map(|p| p + 1) {
            buf.drain(..p);
            return Some(Frame::Skipped);
        }
        if buf.len() > 1 << 16 {
            buf.clear();
        }
        return None;
    };
    let header = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let length = header.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            value.trim().parse::<usize>().ok()
        } else {
            None
        }
    });
    let starts_with_header = header.split("\r\n").next().is_some_and(|l| l.contains(':'));
    match length {
        Some(len) if len <= MAX_CONTENT_LENGTH && starts_with_header => {
            let start = header_end + 4;
            if buf.len() < start + len {
                return None;
            }
            let body = buf[start..start + len].to_vec();
            buf.drain(..start + len);
            Some(Frame::Message(body))
        }
        _ => {
            // A corrupt header: resynchronize at the next `Content-Length` after it.
            let skip_to = find(&buf[1..], b"Content-Length").map(|p| p + 1).unwrap_or(header_end + 4);
            buf.drain(..skip_to.min(buf.len()));
            Some(Frame::Skipped)
        }
    }
}

/// The body to hand to tower-lsp for a received body (`None`: drop it silently).
fn sanitize(body: &[u8]) -> Option<Vec<u8>> {
    let invalid = |id: Value, code: i64, message: String| {
        let msg = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": INVALID_MESSAGE_METHOD,
            "params": {"code": code, "message": message},
        });
        Some(msg.to_string().into_bytes())
    };
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return invalid(Value::Null, -32700, format!("parse error: {e}")),
    };
    let Value::Object(map) = &value else {
        return invalid(Value::Null, -32600, "invalid request: a message must be a JSON object".into());
    };
    let id = map.get("id").cloned();
    let id_ok = matches!(&id, None | Some(Value::Number(_) | Value::String(_) | Value::Null));
    let id_for_error = match &id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    };
    if map.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid(id_for_error, -32600, "invalid request: `jsonrpc` must be \"2.0\"".into());
    }
    if !id_ok {
        return invalid(Value::Null, -32600, "invalid request: `id` must be a number or a string".into());
    }
    match map.get("method") {
        Some(Value::String(method)) if matches!(method.as_str(), "shutdown" | "exit") => {
            // These take no params; clients send `null`, `{}` or `[]`, which tower-lsp
            // would reject.
            let mut map = map.clone();
            map.remove("params");
            Some(Value::Object(map).to_string().into_bytes())
        }
        Some(Value::String(_)) => {
            // A request or notification; tower-lsp checks the params itself.
            if matches!(map.get("params"), Some(p) if !p.is_object() && !p.is_array() && !p.is_null()) {
                // A notification gets no answer: drop it.
                id.as_ref()?;
                return invalid(id_for_error, -32600, "invalid request: `params` must be an object or an array".into());
            }
            Some(body.to_vec())
        }
        Some(_) => {
            if id.is_none() {
                None
            } else {
                invalid(id_for_error, -32600, "invalid request: `method` must be a string".into())
            }
        }
        None => {
            // A response to one of our requests.
            if id.is_some() && (map.contains_key("result") || map.contains_key("error")) {
                Some(body.to_vec())
            } else if id.is_some() {
                invalid(id_for_error, -32600, "invalid request: no `method`".into())
            } else {
                None
            }
        }
    }
}

fn is_exit(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .is_some_and(|v| v.get("method").and_then(Value::as_str) == Some("exit") && v.get("id").is_none())
}

/// Copies framed messages from `input` to `output`, repairing or answering malformed
/// ones. Returns at the end of the input (closing `output`).
pub async fn pump<R, W>(mut input: R, mut output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(frame) = next_frame(&mut buf) {
            let Frame::Message(body) = frame else {
                continue;
            };
            let Some(body) = sanitize(&body) else {
                continue;
            };
            let header = format!("Content-Length: {}\r\n\r\n", body.len());
            if output.write_all(header.as_bytes()).await.is_err() || output.write_all(&body).await.is_err() {
                return;
            }
            // After `exit` nothing more is read: end the input so that tower-lsp (which
            // only notices the exit when it reads the next message) stops at once, even
            // when the client keeps our stdin open.
            if is_exit(&body) {
                let _ = output.flush().await;
                let _ = output.shutdown().await;
                return;
            }
        }
        if output.flush().await.is_err() {
            return;
        }
    }
    let _ = output.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<String> {
        let mut buf = input.to_vec();
        let mut out = Vec::new();
        while let Some(f) = next_frame(&mut buf) {
            if let Frame::Message(b) = f {
                out.push(String::from_utf8_lossy(&b).to_string());
            }
        }
        out
    }

    #[test]
    fn frames_and_resyncs() {
        let msg = |s: &str| format!("Content-Length: {}\r\n\r\n{s}", s.len());
        let input = format!("{}garbage\r\n{}", msg("{\"a\":1}"), msg("{}"));
        assert_eq!(frames(input.as_bytes()), ["{\"a\":1}", "{}"]);
        let input = format!("Content-Length: x\r\n\r\n{}", msg("{}"));
        assert_eq!(frames(input.as_bytes()), ["{}"]);
        let input = format!("Content-Type: foo\r\n\r\n{}", msg("{}"));
        assert_eq!(frames(input.as_bytes()), ["{}"]);
        // Incomplete: waits.
        assert!(frames(b"Content-Length: 10\r\n\r\n{}").is_empty());
    }

    #[test]
    fn malformed_bodies_become_error_requests() {
        let out = |b: &str| sanitize(b.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert!(out("{nope").unwrap().contains("-32700"));
        assert!(out("[1,2]").unwrap().contains("-32600"));
        let missing = out("{\"id\": 7, \"method\": \"x\"}").unwrap();
        assert!(missing.contains("\"id\":7") && missing.contains("-32600"), "{missing}");
        assert_eq!(out("{\"jsonrpc\":\"2.0\",\"method\":5}"), None);
        let ok = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hover\"}";
        assert_eq!(out(ok).as_deref(), Some(ok));
        let shutdown = out("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"shutdown\",\"params\":null}").unwrap();
        assert!(!shutdown.contains("params"), "{shutdown}");
    }
}
