//! `tessera-explore FILE [--kernel NAME]`: the terminal IR explorer (TOOLS.md §5); the
//! same as `tessera explore`.

use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "tessera-explore", version, about = "Step through a kernel's lowering, tune its schedule and run it")]
struct Cli {
    #[command(flatten)]
    args: tessera_cli::explore::ExploreArgs,
}

fn main() -> ExitCode {
    tessera_cli::use_mimalloc_for_tree_sitter();
    match Cli::try_parse() {
        Ok(cli) => tessera_cli::explore::run(cli.args),
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            ExitCode::from(code)
        }
    }
}
