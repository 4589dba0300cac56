//! Who reports a panic: the caller that catches it (compiler queries, kernel runs, the
//! event loop's steps) or the terminal's panic hook. The bottom of the crate: the
//! workspace, the runner and the terminal all use it, and it uses none of them.

use std::cell::Cell;

thread_local! {
    /// Set while a caller catches panics itself (compiler queries, runs): the hook then
    /// leaves the terminal alone and the explorer shows the error.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with panics reported by the caller rather than by the hook.
pub fn catching<T>(f: impl FnOnce() -> T) -> T {
    let before = CATCHING.with(|c| c.replace(true));
    let out = f();
    CATCHING.with(|c| c.set(before));
    out
}

/// Whether a caller on this thread catches panics itself (the hook then stays quiet).
pub fn caller_catches() -> bool {
    CATCHING.with(Cell::get)
}
