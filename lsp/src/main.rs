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
    tessera_lsp::use_mimalloc_for_tree_sitter();
    std::process::ExitCode::from(tessera_lsp::main(std::env::args_os().skip(1)) as u8)
}
