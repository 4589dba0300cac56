//! The `tessera` command line: `check`, `lower`, `run`, `autotune`, `lsp`, `explore`.
//!
//! Every command asks the same salsa database the same queries as the language server
//! and the explorer; this crate only parses arguments and renders results.

pub mod autotune;
pub mod check;
pub mod check_cache;
pub mod config;
mod devices;
pub mod emit;
pub mod explore;
mod failure;
pub mod files;
pub mod fmt;
mod launch_setup;
pub mod lower;
mod number_text;
pub mod options;
mod parsers;
mod report;
pub mod run;
mod run_args;
mod run_graph;
mod run_inputs;
mod run_mesh;
mod sarif;
mod save;
mod startup;
mod verdict;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use parsers::parse_target;
pub use startup::{install_panic_hook, use_mimalloc_for_tree_sitter};
pub use tessera_passes::Target;

#[derive(Parser, Debug)]
#[command(name = "tessera", version, about = "The Tessera toolchain: check, lower, run and explore tile kernels")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report diagnostics for .tsr files (exit 0: clean, 1: errors, 2: tool failure).
    Check(check::CheckArgs),
    /// Format .tsr files in place (--check: only report).
    Fmt(fmt::FmtArgs),
    /// Print a function's IR at one stage or all of them.
    Lower(lower::LowerArgs),
    /// Run a kernel on a device, check it against the reference interpreter, and time it.
    Run(run_args::RunArgs),
    /// Search a kernel's autotune space on a device and cache the fastest configuration.
    Autotune(autotune::AutotuneArgs),
    /// Run the language server on standard input/output (same as `tessera-lsp`).
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Lsp {
        /// What editors pass: `--stdio`, `--clientProcessId <PID>`; also `--help`, `--version`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Open the terminal explorer (same as `tessera-explore`).
    Explore(explore::ExploreArgs),
    /// Say what this machine can run on: the GPU, the CPU backend, the interpreter, NCCL.
    Devices,
}

pub fn main() -> ExitCode {
    install_panic_hook();
    use_mimalloc_for_tree_sitter();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Check(args) => check::run(args),
        Command::Fmt(args) => fmt::run(args),
        Command::Lower(args) => lower::run(args),
        Command::Run(args) => run::run(args),
        Command::Autotune(args) => autotune::run(args),
        Command::Lsp { args } => Ok(tessera_lsp::main(args)),
        Command::Explore(args) => return explore::run(args),
        Command::Devices => devices::run(),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
