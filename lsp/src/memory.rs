//! Giving memory back to the operating system after a document is closed.
//!
//! The binaries allocate with mimalloc (Rust and tree-sitter's C allocations). Freed
//! memory stays with the thread heap that allocated it, and the arenas decommit freed
//! pages only after a delay; `mi_collect(true)` frees the calling thread's empty pages
//! and purges the arenas at once. Threads that computed the closed document's analyses
//! exit shortly after (see `BLOCKING_KEEP_ALIVE`), which hands their pages back too.

use std::time::Duration;

/// How long an idle blocking thread (where requests and diagnostics run) is kept:
/// short, so that the heaps of the threads that analyzed a closed document go back to
/// the allocator soon after it is closed.
pub const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// After a close that rebuilt the database: when the threads that held the old one have
/// exited. Analyses started earlier would fill the pages the old data left half empty
/// (mimalloc reuses a thread's partly free pages first), and a little new data spread
/// over many pages keeps them all.
pub const SETTLE: Duration = Duration::from_millis(1500);

extern "C" {
    // Part of mimalloc's stable API (`mimalloc.h`); `libmimalloc-sys` links the library
    // but declares it only with its `extended` feature.
    fn mi_collect(force: bool);
}

/// Returns the memory freed on this thread, and what the arenas hold free, to the OS.
pub fn release() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any
    // time; with another global allocator it only tidies mimalloc's own (unused) heap.
    unsafe { mi_collect(true) }
}
