//! What every binary does before its command runs: a quiet panic hook (commands report
//! internal errors themselves) and tree-sitter's allocations routed to mimalloc.

/// Keeps the default panic message off the terminal: commands report internal errors
/// themselves (with the file they were working on), and the rest keeps working.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("TESSERA_BACKTRACE").is_some() {
            default(info);
        }
    }));
}

/// Routes tree-sitter's C allocations to mimalloc, like the Rust allocations of the
/// binaries: parsing allocates a node per token, and glibc's free lists showed up as a
/// fifth of `tessera check`'s time. Must run before any tree-sitter call.
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
