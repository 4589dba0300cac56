//! A minimal LSP client that drives the real server binary over stdio, and fixture
//! helpers (`$0` cursor markers).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const TIMEOUT: Duration = Duration::from_secs(30);

pub fn server_path() -> &'static str {
    env!("CARGO_BIN_EXE_tessera-lsp-server")
}

pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    next_id: i64,
    /// Messages received but not yet consumed (notifications while waiting for a response).
    backlog: VecDeque<Value>,
}

fn read_message(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = vec![0u8; length?];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Server {
    pub fn start() -> Server {
        Server::start_with_env(&[])
    }

    pub fn start_with_env(env: &[(&str, &str)]) -> Server {
        Server::start_at(server_path(), env)
    }

    /// Starts the server binary at `path`.
    pub fn start_at(path: &str, env: &[(&str, &str)]) -> Server {
        Server::start_with_args(path, &[], env)
    }

    /// Starts the server binary at `path` with command-line arguments.
    ///
    /// `TESSERA_LSP_CMD` (a command line, e.g. `target/debug/tessera lsp --stdio`)
    /// replaces the crate's own binary, to run a suite against the installed commands.
    pub fn start_with_args(path: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let replacement = std::env::var("TESSERA_LSP_CMD").ok().filter(|_| path == server_path());
        let mut words: Vec<String> = match &replacement {
            Some(cmd) => cmd.split_whitespace().map(String::from).collect(),
            None => vec![path.to_string()],
        };
        words.extend(args.iter().map(|a| a.to_string()));
        let mut child = Command::new(&words[0])
            .args(&words[1..])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the server binary starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(msg) = read_message(&mut reader) {
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server { child, stdin, rx, next_id: 1, backlog: VecDeque::new() }
    }

    /// Starts a server and initializes it (with `initializationOptions`).
    pub fn initialized(options: Value) -> Server {
        Server::initialize(Server::start(), options)
    }

    pub fn initialize(mut s: Server, options: Value) -> Server {
        let caps = json!({
            "textDocument": {
                "hover": {"contentFormat": ["markdown"]},
                "publishDiagnostics": {"versionSupport": true, "relatedInformation": true},
                "completion": {"completionItem": {"documentationFormat": ["markdown"]}},
                "rename": {"prepareSupport": true},
            }
        });
        let init = s.request(
            "initialize",
            json!({"processId": null, "rootUri": null, "capabilities": caps, "initializationOptions": options}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        s.notify("initialized", json!({}));
        s
    }

    /// The exit status after the input is closed (without `shutdown`).
    pub fn close_input(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `timeout` for the process to exit, its input left open.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Messages that arrive within `wait` (kept for later `response`s too).
    pub fn messages_within(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = Instant::now() + wait;
        while let Some(msg) = self.recv(deadline) {
            self.backlog.push_back(msg);
        }
        self.backlog.iter().cloned().collect()
    }

    /// Removes and returns every response to `id` received so far (or within `wait`).
    pub fn take_responses_to(&mut self, id: &Value, wait: Duration) -> Vec<Value> {
        self.messages_within(wait);
        let (hit, keep): (Vec<Value>, Vec<Value>) =
            self.backlog.drain(..).partition(|m| m.get("id") == Some(id) && m.get("method").is_none());
        self.backlog = keep.into();
        hit
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("the server reads its input");
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        let body = msg.to_string();
        let frame = format!("Content-Length: {}\r\n\r\n{}", body.len(), body);
        self.send_raw(frame.as_bytes());
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn recv(&mut self, deadline: Instant) -> Option<Value> {
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        match self.rx.recv_timeout(deadline - now) {
            Ok(v) => Some(v),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The response (the whole message: `result` or `error`) to request `id`.
    pub fn response(&mut self, id: i64) -> Value {
        self.response_to(json!(id))
    }

    pub fn response_to(&mut self, id: Value) -> Value {
        if let Some(pos) = self.backlog.iter().position(|m| m.get("id") == Some(&id) && m.get("method").is_none()) {
            return self.backlog.remove(pos).unwrap();
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let Some(msg) = self.recv(deadline) else {
                panic!("no response to request {id} (server alive: {})", self.is_alive());
            };
            if msg.get("id") == Some(&id) && msg.get("method").is_none() {
                return msg;
            }
            self.backlog.push_back(msg);
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(id)
    }

    /// The `result` of a request; panics on an error response.
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {r}"),
        }
    }

    /// Waits for a notification `method` satisfying `pred`.
    pub fn wait_notification(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.try_wait_notification(method, &pred, TIMEOUT).unwrap_or_else(|| panic!("no {method} notification"))
    }

    pub fn try_wait_notification(
        &mut self,
        method: &str,
        pred: &dyn Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Option<Value> {
        let matches = |m: &Value| {
            m.get("method").and_then(Value::as_str) == Some(method) && pred(m.get("params").unwrap_or(&Value::Null))
        };
        if let Some(pos) = self.backlog.iter().position(matches) {
            return self.backlog.remove(pos).map(|m| m["params"].clone());
        }
        let deadline = Instant::now() + timeout;
        loop {
            let msg = self.recv(deadline)?;
            if matches(&msg) {
                return Some(msg["params"].clone());
            }
            self.backlog.push_back(msg);
        }
    }

    /// Every message received so far or within `wait`, without consuming responses.
    pub fn drain_notifications(&mut self, method: &str, wait: Duration) -> Vec<Value> {
        let deadline = Instant::now() + wait;
        while let Some(msg) = self.recv(deadline) {
            self.backlog.push_back(msg);
        }
        let (hit, keep): (Vec<Value>, Vec<Value>) =
            self.backlog.drain(..).partition(|m| m.get("method").and_then(Value::as_str) == Some(method));
        self.backlog = keep.into();
        hit.into_iter().map(|m| m["params"].clone()).collect()
    }

    pub fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "tessera", "version": 1, "text": text}}),
        );
    }

    /// Opens a document and waits for its first diagnostics.
    pub fn open_and_wait(&mut self, uri: &str, text: &str) -> Value {
        self.open(uri, text);
        self.diagnostics_for(uri, 1)
    }

    /// The `publishDiagnostics` of `uri` for `version`.
    pub fn diagnostics_for(&mut self, uri: &str, version: i64) -> Value {
        let uri = uri.to_string();
        self.wait_notification("textDocument/publishDiagnostics", move |p| {
            p["uri"] == uri.as_str() && p["version"] == version
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `shutdown` + `exit`; returns the exit status.
    pub fn shutdown(mut self) -> ExitStatus {
        let r = self.request("shutdown", Value::Null);
        assert!(r.get("error").is_none(), "shutdown failed: {r}");
        self.notify("exit", Value::Null);
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes `$0` markers; returns the text and the LSP position of each (UTF-16).
pub fn cursors(src: &str) -> (String, Vec<Value>) {
    let mut text = String::new();
    let mut positions = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("$0") {
        text.push_str(&rest[..i]);
        positions.push(position_of(&text, text.len()));
        rest = &rest[i + 2..];
    }
    text.push_str(rest);
    (text, positions)
}

pub fn position_of(text: &str, offset: usize) -> Value {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let col: usize = before.rsplit('\n').next().unwrap_or("").encode_utf16().count();
    json!({"line": line, "character": col})
}

/// The text covered by an LSP range.
pub fn slice<'a>(text: &'a str, range: &Value) -> &'a str {
    let off = |p: &Value| -> usize {
        let line = p["line"].as_u64().unwrap() as usize;
        let ch = p["character"].as_u64().unwrap() as usize;
        let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
        let line_text = text[start..].split('\n').next().unwrap_or("");
        let mut units = 0;
        for (i, c) in line_text.char_indices() {
            if units >= ch {
                return start + i;
            }
            units += c.len_utf16();
        }
        start + line_text.len()
    };
    &text[off(&range["start"])..off(&range["end"])]
}

/// `line:col-line:col` (1-based lines, 0-based UTF-16 columns) for snapshots.
pub fn fmt_range(range: &Value) -> String {
    format!(
        "{}:{}-{}:{}",
        range["start"]["line"].as_u64().unwrap() + 1,
        range["start"]["character"],
        range["end"]["line"].as_u64().unwrap() + 1,
        range["end"]["character"]
    )
}

pub fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Applies LSP text edits (non-overlapping) to `text`.
pub fn apply_edits(text: &str, edits: &[Value]) -> String {
    let mut spans: Vec<(usize, usize, String)> = edits
        .iter()
        .map(|e| {
            let s = slice(text, &e["range"]);
            let start = s.as_ptr() as usize - text.as_ptr() as usize;
            (start, start + s.len(), e["newText"].as_str().unwrap().to_string())
        })
        .collect();
    spans.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut out = text.to_string();
    for (a, b, t) in spans {
        out.replace_range(a..b, &t);
    }
    out
}

/// The diagnostics of a `publishDiagnostics` that do not come from target lints
/// (register, shared-memory, occupancy, bank-conflict estimates and autotune pruning,
/// which change as the target analyses improve).
pub fn frontend_diagnostics(params: &Value) -> Value {
    let kept: Vec<Value> = params["diagnostics"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| {
                    let code = d["code"].as_str().and_then(tessera_frontend::diagnostics::Code::parse);
                    !code.is_some_and(|c| c.is_target_lint())
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    Value::Array(kept)
}
