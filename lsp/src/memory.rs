//! Giving memory back to the operating system after a document is closed.
//!
//! The binaries allocate with mimalloc (Rust and tree-sitter's C allocations). Freed
//! memory stays with the heap of the thread that allocated it until that thread
//! collects or exits, and the arenas decommit freed pages only after a delay.
//! `mi_collect(true)` frees the calling thread's empty pages and purges the arenas at
//! once; on the main thread it also reclaims the heaps that exited threads left behind.
//! So the protocol runs on the main thread (a current-thread runtime, where `release`
//! is called), and the blocking threads that compute analyses exit as soon as they are
//! idle (`BLOCKING_KEEP_ALIVE`) or, when reused, collect before their next job
//! (`catch_up`). A worker or pooled thread that stays alive and idle would otherwise
//! keep what it freed: that left 10-13 MB behind in one run out of three or four.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an idle blocking thread (where requests, diagnostics and stdio run) is
/// kept: barely, so that a thread that analyzed a closed document exits and its heap
/// goes back to the allocator. Starting a thread costs tens of microseconds, nothing
/// beside an analysis.
pub const BLOCKING_KEEP_ALIVE: Duration = Duration::from_millis(1);

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

/// Turns transparent huge pages off for this process. mimalloc asks for them
/// (`MADV_HUGEPAGE` on its arenas), which spares a batch `tessera check` most of its page
/// faults; a server that lives for hours and gives pages back after every close wants
/// the opposite: a 2 MiB page stays resident while any 4 KiB of it is in use, and the
/// kernel may compact memory to build one in the middle of a keystroke.
pub fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integers only and affects only this process.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// How many times `release` has been asked for, process-wide.
static RELEASES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The `RELEASES` count this thread last collected at.
    static COLLECTED_AT: Cell<u64> = const { Cell::new(0) };
}

fn collect_this_thread() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread at any
    // time; with another global allocator it only tidies mimalloc's own (unused) heap.
    unsafe { mi_collect(true) }
}

/// Returns the memory freed on this thread, and what the arenas hold free, to the OS;
/// threads that are alive elsewhere do the same at their next `catch_up`.
pub fn release() {
    let round = RELEASES.fetch_add(1, Ordering::Relaxed) + 1;
    COLLECTED_AT.with(|c| c.set(round));
    collect_this_thread();
}

/// Called by a blocking thread before it starts a job: a thread the pool kept alive
/// since a `release` still holds the pages it freed then (a thread's free pages go back
/// only when that thread collects), so it collects first.
pub fn catch_up() {
    let round = RELEASES.load(Ordering::Relaxed);
    if COLLECTED_AT.with(|c| c.replace(round)) != round {
        collect_this_thread();
    }
}
