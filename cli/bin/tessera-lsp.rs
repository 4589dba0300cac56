#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tessera_cli::install_panic_hook();
    tessera_cli::use_mimalloc_for_tree_sitter();
    std::process::ExitCode::from(tessera_lsp::run_stdio() as u8)
}
