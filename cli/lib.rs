//! The `tessera` command line: `check`, `lower`, `run`, `autotune`, `lsp`, `explore`.
//!
//! Every command asks the same salsa database the same queries as the language server
//! and the explorer; this crate only parses arguments and renders results.

pub mod autotune;
pub mod check;
pub mod check_cache;
pub mod config;
pub mod emit;
pub mod explore;
pub mod files;
pub mod fmt;
pub mod lower;
pub mod options;
pub mod run;
mod run_graph;
mod sarif;
mod save;
mod verdict;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use tessera_passes::Target;

/// Parses `--target` values for clap.
pub fn parse_target(s: &str) -> Result<Target, String> {
    s.parse()
}

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
    Run(run::RunArgs),
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
}

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
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
