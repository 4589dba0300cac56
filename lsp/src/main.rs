//! `tessera-lsp-server`: the language server built by this crate (the same server as
//! `tessera lsp` and `tessera-lsp`), for the crate's integration tests and bench.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Panics are answered as LSP errors; keep their default message off stderr unless
    // asked for (like the CLI).
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("TESSERA_BACKTRACE").is_some() {
            default(info);
        }
    }));
    use_mimalloc_for_tree_sitter();
    std::process::ExitCode::from(tessera_lsp::main(std::env::args_os().skip(1)) as u8)
}

/// Routes tree-sitter's C allocations to mimalloc too (as the CLI binaries do).
fn use_mimalloc_for_tree_sitter() {
    unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut std::ffi::c_void {
        match count.checked_mul(size) {
            // SAFETY: mi_zalloc returns zeroed memory of `total` bytes, as calloc does.
            Some(total) => unsafe { libmimalloc_sys::mi_zalloc(total) },
            None => std::ptr::null_mut(),
        }
    }
    // SAFETY: the four functions are one allocator family (mimalloc); this runs at
    // start-up, before any tree-sitter object exists.
    unsafe {
        tree_sitter::set_allocator(Some(tree_sitter::Allocator {
            malloc: libmimalloc_sys::mi_malloc,
            calloc,
            realloc: libmimalloc_sys::mi_realloc,
            free: libmimalloc_sys::mi_free,
        }));
    }
}
