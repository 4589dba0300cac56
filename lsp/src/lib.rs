//! The Tessera language server (`tessera lsp`, `tessera-lsp`): the Language Server
//! Protocol over stdio, on the same salsa database the CLI uses.
//!
//! Layers: the frontend's `ide` module computes everything as plain data (byte offsets,
//! markdown); `server` converts it to protocol types; `framing` guards the input;
//! `hooks` is where the IR passes plug in (lowering previews, resource estimates).

mod convert;
mod framing;
pub mod hooks;
mod server;
mod state;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tower_lsp::{LspService, Server};

/// Serves the Language Server Protocol on standard input/output; returns the exit code
/// (0 after `shutdown` + `exit`, 1 when the input ends without a `shutdown`).
pub fn run_stdio() -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tessera-lsp")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tessera-lsp: cannot start the runtime: {e}");
            return 2;
        }
    };
    let code = runtime.block_on(serve(tokio::io::stdin(), tokio::io::stdout()));
    // Blocking reads of stdin and in-flight analyses must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

/// Serves the protocol on `input`/`output` until `exit` or the end of the input.
pub async fn serve<I, O>(input: I, output: O) -> i32
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin,
{
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    let (service, socket) = LspService::build(move |client| server::Backend::new(client, flag))
        .custom_method("tessera/kernels", server::Backend::kernels)
        .custom_method("tessera/lowering", server::Backend::lowering)
        .custom_method(framing::INVALID_MESSAGE_METHOD, server::Backend::invalid_message)
        .finish();
    let (guarded_in, guard_out) = tokio::io::duplex(1 << 20);
    let pump = tokio::spawn(framing::pump(input, guard_out));
    // Requests wait on blocking threads; a generous limit keeps notifications (edits)
    // flowing while slow requests compute (they stay in order: tower-lsp starts handlers
    // in arrival order, and ours apply edits before their first await).
    Server::new(guarded_in, output, socket).concurrency_level(64).serve(service).await;
    pump.abort();
    if shutdown.load(Ordering::SeqCst) {
        0
    } else {
        1
    }
}
