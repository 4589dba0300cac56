//! Language-server latency and memory, measured on the real server binary over stdio:
//!
//! - keystroke → diagnostics: a 5 000-line file; 200 one-character edits inside one
//!   function body (a digit inserted into, then removed from, a literal), each timed from
//!   sending `didChange` until the `publishDiagnostics` of that version arrives;
//! - resident memory (VmRSS) after opening a 50 000-line file and receiving its
//!   diagnostics.
//!
//! `cargo bench -p tessera-lsp --bench lsp_latency` (release build of the crate's
//! `tessera-lsp-server`; set `TESSERA_LSP` to measure another binary, e.g.
//! `target/release/tessera-lsp`). Targets: p95 ≤ 50 ms, RSS ≤ 300 MB.

#[path = "../lsp/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Server;

const EDITS: usize = 200;
const WARMUP: usize = 10;
const P95_TARGET_MS: f64 = 50.0;
const RSS_TARGET_MB: f64 = 300.0;

fn server_binary() -> String {
    std::env::var("TESSERA_LSP").unwrap_or_else(|_| support::server_path().to_string())
}

fn start(target_lints: bool) -> Server {
    Server::initialize(Server::start_at(&server_binary(), &[]), json!({"target": "sm_90", "targetLints": target_lints}))
}

fn vm_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn keystroke_latency(target_lints: bool) -> (f64, f64, f64) {
    let text = tessera_frontend::synthetic::module_with_lines(5000);
    let lines: Vec<&str> = text.lines().collect();
    // A literal inside a kernel body near the middle of the file.
    let middle = lines.len() / 2;
    let (line, col) = (middle..lines.len())
        .chain(0..middle)
        .find_map(|i| lines[i].find("tile.parallel(0,").map(|c| (i, c + "tile.parallel(".len())))
        .expect("a tile.parallel loop in the synthetic module");
    let uri = "file:///tmp/tessera-bench/latency.tsr";
    let mut s = start(target_lints);
    let t = Instant::now();
    s.open_and_wait(uri, &text);
    eprintln!(
        "opened {} lines ({} KiB) with diagnostics in {:.0} ms",
        lines.len(),
        text.len() / 1024,
        t.elapsed().as_secs_f64() * 1e3
    );
    let pos = json!({"line": line, "character": col});
    let after = json!({"line": line, "character": col + 1});
    let mut times = Vec::with_capacity(EDITS);
    for i in 0..WARMUP + EDITS {
        let version = 2 + i as i64;
        let change = if i % 2 == 0 {
            json!({"range": {"start": pos, "end": pos}, "text": "1"})
        } else {
            json!({"range": {"start": pos, "end": after}, "text": ""})
        };
        let t = Instant::now();
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}),
        );
        s.diagnostics_for(uri, version);
        if i >= WARMUP {
            times.push(t.elapsed());
        }
    }
    times.sort();
    let result = (percentile(&times, 0.5), percentile(&times, 0.95), times.last().unwrap().as_secs_f64() * 1e3);
    s.shutdown();
    result
}

fn memory_after_large_file(target_lints: bool) -> (f64, f64, usize) {
    let text = tessera_frontend::synthetic::module_with_lines(50_000);
    let n = text.lines().count();
    let mut s = start(target_lints);
    let before = vm_rss_mb(s.pid()).unwrap_or(0.0);
    let t = Instant::now();
    s.open_and_wait("file:///tmp/tessera-bench/large.tsr", &text);
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    // Let the allocator settle, then read the resident set.
    std::thread::sleep(Duration::from_millis(200));
    let rss = vm_rss_mb(s.pid()).expect("VmRSS of the server (Linux /proc)");
    eprintln!("server RSS before opening: {before:.1} MB");
    s.shutdown();
    (rss, open_ms, n)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that is not ours skips the run.
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && !"lsp_latency".contains(&a)) {
        return;
    }
    println!("server: {}", server_binary());
    for (target_lints, mode) in [(true, "all diagnostics"), (false, "frontend diagnostics only (targetLints: false)")] {
        println!("-- {mode}");
        let (p50, p95, max) = keystroke_latency(target_lints);
        println!(
            "keystroke -> diagnostics, 5000-line file, {EDITS} edits: p50 {p50:.2} ms, p95 {p95:.2} ms, max {max:.2} ms (target p95 <= {P95_TARGET_MS} ms: {})",
            if p95 <= P95_TARGET_MS { "ok" } else { "MISSED" }
        );
        let (rss, open_ms, n) = memory_after_large_file(target_lints);
        println!(
            "memory after opening a {n}-line file: VmRSS {rss:.1} MB, first diagnostics after {open_ms:.0} ms (target <= {RSS_TARGET_MB} MB: {})",
            if rss <= RSS_TARGET_MB { "ok" } else { "MISSED" }
        );
    }
}
