//! The Tessera language server (`tessera lsp`, `tessera-lsp`): the Language Server
//! Protocol over stdio, on the same salsa database the CLI uses.
//!
//! Layers: the frontend's `ide` module computes everything as plain data (byte offsets,
//! markdown); `server` converts it to protocol types; `framing` guards the input;
//! `hooks` is where the IR passes plug in (lowering previews, resource estimates).

mod convert;
mod framing;
pub mod hooks;
pub mod launch;
mod memory;
mod server;
mod state;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tower_lsp::{LspService, Server};

/// Serves the Language Server Protocol on standard input/output; returns the exit code
/// (0 after `shutdown` + `exit`, 1 when the input ends without a `shutdown`).
pub fn run_stdio() -> i32 {
    run_stdio_for(None)
}

/// `tessera-lsp ARGS` and `tessera lsp ARGS` (the arguments after those): `--stdio`,
/// `--clientProcessId N`, `--help`, `--version`. Returns the exit code.
pub fn main(args: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    launch::main(args)
}

/// Routes tree-sitter's C allocations to mimalloc, like the Rust allocations of the
/// binaries: parsing allocates a node per token, and glibc's free lists showed up as a
/// fifth of `tessera check`'s time. Must run before any tree-sitter call. It lives in
/// the lowest crate that has both dependencies, so that the CLI's binaries and this
/// crate's server can share it.
pub fn use_mimalloc_for_tree_sitter() {
    unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut std::ffi::c_void {
        match count.checked_mul(size) {
            // SAFETY: mi_zalloc returns zeroed memory of `total` bytes, as calloc does.
            Some(total) => unsafe { libmimalloc_sys::mi_zalloc(total) },
            None => std::ptr::null_mut(),
        }
    }
    // SAFETY: the four functions are one allocator family (mimalloc), they return
    // malloc-aligned memory, and this runs at start-up before any tree-sitter object
    // exists, on the main thread.
    unsafe {
        tree_sitter::set_allocator(Some(tree_sitter::Allocator {
            malloc: libmimalloc_sys::mi_malloc,
            calloc,
            realloc: libmimalloc_sys::mi_realloc,
            free: libmimalloc_sys::mi_free,
        }));
    }
}

/// Like `run_stdio`, and ends when process `client_pid` (the editor) is gone.
pub fn run_stdio_for(client_pid: Option<u32>) -> i32 {
    memory::disable_huge_pages();
    // The protocol on this thread, analyses on blocking threads: see `memory` for why.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .thread_name("tessera-lsp")
        .thread_keep_alive(memory::BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tessera-lsp: cannot start the runtime: {e}");
            return 2;
        }
    };
    let code = runtime.block_on(serve_for(tokio::io::stdin(), tokio::io::stdout(), client_pid));
    // Blocking reads of stdin and in-flight analyses must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

/// After the input ends (`exit` or end of file), how long tower-lsp may take to finish
/// (answer what it still can, flush): then the server stops regardless, so that a
/// handler that does not return or a client that stopped reading cannot keep it alive.
const GRACE: Duration = Duration::from_secs(3);

/// How often the editor's process is checked for.
const CLIENT_POLL: Duration = Duration::from_secs(2);

/// Serves the protocol on `input`/`output` until `exit` or the end of the input; returns
/// the exit code (0 when a `shutdown` was received, else 1).
pub async fn serve<I, O>(input: I, output: O) -> i32
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin,
{
    serve_for(input, output, None).await
}

/// `serve`, which also ends when process `client_pid` is gone (or the one `initialize`
/// names; a process that does not exist when it is named, as from another PID
/// namespace, is not watched).
pub async fn serve_for<I, O>(input: I, output: O, client_pid: Option<u32>) -> i32
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin,
{
    let shutdown = Arc::new(AtomicBool::new(false));
    let client = Arc::new(AtomicU32::new(0));
    if let Some(pid) = client_pid {
        if launch::process_alive(pid) {
            client.store(pid, Ordering::SeqCst);
        } else {
            eprintln!("tessera-lsp: process {pid} (--clientProcessId) does not exist here; not watching it");
        }
    }
    let texts = Arc::new(framing::Texts::default());
    let (flag, watched, kept) = (shutdown.clone(), client.clone(), texts.clone());
    let (service, socket) = LspService::build(move |c| server::Backend::new(c, flag, watched, kept))
        .custom_method("tessera/kernels", server::Backend::kernels)
        .custom_method("tessera/lowering", server::Backend::lowering)
        .finish();
    let (to_server, server_in) = tokio::io::duplex(1 << 20);
    let (server_out, from_server) = tokio::io::duplex(1 << 20);
    let (answers, answers_rx) = tokio::sync::mpsc::channel(64);
    let pump = tokio::spawn(framing::pump(input, to_server, answers, shutdown.clone(), texts));
    let pump_abort = pump.abort_handle();
    // Requests wait on blocking threads; a generous limit keeps notifications (edits)
    // flowing while slow requests compute (they stay in order: tower-lsp starts handlers
    // in arrival order, and ours apply edits before their first await).
    let server = Server::new(server_in, server_out, socket).concurrency_level(64).serve(service);
    let served = async { tokio::join!(server, framing::write_output(from_server, answers_rx, output)) };
    let input_ended = async {
        let _ = pump.await;
        tokio::time::sleep(GRACE).await;
    };
    let client_gone = async {
        loop {
            tokio::time::sleep(CLIENT_POLL).await;
            let pid = client.load(Ordering::SeqCst);
            if pid != 0 && !launch::process_alive(pid) {
                break;
            }
        }
    };
    tokio::select! {
        _ = served => {}
        _ = input_ended => {}
        _ = client_gone => {}
    }
    pump_abort.abort();
    if shutdown.load(Ordering::SeqCst) {
        0
    } else {
        1
    }
}
