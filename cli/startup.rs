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

/// Routes tree-sitter's C allocations to mimalloc (the language server's crate owns it:
/// the lowest crate with both dependencies).
pub use tessera_lsp::use_mimalloc_for_tree_sitter;
