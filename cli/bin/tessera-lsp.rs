#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tessera_cli::install_panic_hook();
    tessera_cli::use_mimalloc_for_tree_sitter();
    // `--stdio`, `--clientProcessId N`, `--help`, `--version`: as editors launch it.
    std::process::ExitCode::from(tessera_lsp::main(std::env::args_os().skip(1)) as u8)
}
