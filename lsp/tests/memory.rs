//! Memory returns after `didClose` (issue 10, reproducer 8: the server stayed at 688 MB
//! after a 50 000-line document was closed): the server's resident set after opening and
//! closing a 50 000-line document is within 1.5x of what it was before the document was
//! opened.
//!
//! `TESSERA_LSP=path` measures another server binary (e.g. `target/release/tessera-lsp`);
//! `TESSERA_LSP_MEMORY_LINES=n` another size.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// A field of `/proc/<pid>/status` (in kB there), in MB.
fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status (Linux)");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} line"));
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()).expect("a size in kB") / 1024.0
}

fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS:")
}

/// RSS once it has stopped changing.
fn settled_rss_mb(pid: u32) -> f64 {
    let mut last = rss_mb(pid);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = rss_mb(pid);
        if (last - now).abs() < 0.2 {
            return now;
        }
        last = now;
    }
    last
}

#[test]
fn memory_returns_after_did_close() {
    let lines: usize = std::env::var("TESSERA_LSP_MEMORY_LINES").ok().and_then(|n| n.parse().ok()).unwrap_or(50_000);
    let binary = std::env::var("TESSERA_LSP").unwrap_or_else(|_| server_path().to_string());
    let text = tessera_frontend::synthetic::module_with_lines(lines);
    let large = "file:///tmp/tessera-lsp-tests/memory-large.tsr";
    let small = "file:///tmp/tessera-lsp-tests/memory-small.tsr";
    let mut s = Server::initialize(Server::start_at(&binary, &[]), json!({"target": "sm_90"}));
    let pid = s.pid();
    // A small document of the same kind stays open throughout: the baseline is a server
    // that has analyzed code like this before.
    s.open_and_wait(small, &tessera_frontend::synthetic::module_with_lines(300));
    let before = settled_rss_mb(pid);
    let heap_before = status_mb(pid, "RssAnon:");
    let t = Instant::now();
    s.open(large, &text);
    // A debug build takes a while on 50 000 lines.
    s.try_wait_notification(
        "textDocument/publishDiagnostics",
        &|p| p["uri"] == large && p["version"] == 1,
        Duration::from_secs(900),
    )
    .expect("the large document's diagnostics");
    let open_s = t.elapsed().as_secs_f64();
    let opened = settled_rss_mb(pid);
    let heap_opened = status_mb(pid, "RssAnon:");
    s.notify("textDocument/didClose", json!({"textDocument": {"uri": large}}));
    let closed = Instant::now();
    s.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == large && p["diagnostics"] == json!([]));
    // The document still open is analyzed again (the database was rebuilt without the
    // closed one): measure with that analysis in memory, as before the open.
    s.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == small);
    let r = s.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": small}, "position": {"line": 0, "character": 0}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    // The server hands memory back when the threads that held the document have exited
    // and again after the allocator's purge delay (`memory::SETTLE`, twice).
    std::thread::sleep(Duration::from_secs(4).saturating_sub(closed.elapsed()));
    let mut after = settled_rss_mb(pid);
    // On a busy machine the re-analysis may end after the first release rounds; the
    // server releases again, so wait for the last round (6 s after the close) before
    // judging.
    // The last release round is 6 s after the close; sample until 9 s and judge the
    // lowest figure: the question is whether the memory comes back, not when a busy
    // machine's threads get to hand it back.
    while after > before * 1.5 && closed.elapsed() < Duration::from_secs(9) {
        std::thread::sleep(Duration::from_millis(500));
        after = after.min(settled_rss_mb(pid));
    }
    let heap_after = status_mb(pid, "RssAnon:");
    eprintln!(
        "{binary}: {} lines ({} KiB): RSS before open {before:.1} MB, after open {opened:.1} MB \
         ({open_s:.1} s to diagnostics), after close {after:.1} MB ({:.2}x); heap (RssAnon) \
         {heap_before:.1}, {heap_opened:.1}, {heap_after:.1} MB",
        text.lines().count(),
        text.len() / 1024,
        after / before
    );
    assert!(after <= before * 1.5, "RSS after close {after:.1} MB > 1.5 x {before:.1} MB (after open: {opened:.1} MB)");
    assert!(s.shutdown().success());
}
