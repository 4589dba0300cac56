//! `tessera explore FILE` / `tessera-explore FILE`: the terminal IR explorer (TOOLS.md §5).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ExploreArgs {
    /// The source file.
    pub file: PathBuf,
    /// The kernel or graph function to open (default: the first kernel).
    #[arg(long, value_name = "NAME")]
    pub kernel: Option<String>,
    /// Target: sm_80, sm_90 (default) or cpu.
    #[arg(long, value_parser = crate::parsers::parse_target, default_value = "sm_90")]
    pub target: tessera_passes::Target,
    /// Schedule values, overriding the kernel's (BM=64,warps=4,...).
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
    pub schedule: Vec<String>,
    /// Values of shape symbols (D=128,S=1024,...).
    #[arg(long, value_delimiter = ',', value_name = "SYM=VALUE")]
    pub dims: Vec<String>,
}

pub fn run(args: ExploreArgs) -> ExitCode {
    let pairs = |v: &[String], what: &str| crate::options::parse_pairs(v, what);
    let (schedule, dims) = match (pairs(&args.schedule, "schedule"), pairs(&args.dims, "dims")) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // `tessera` keeps panic messages quiet for its other commands (they report internal
    // errors themselves); the explorer's hook restores the terminal and then lets the
    // standard hook print, so that a crash says why.
    drop(std::panic::take_hook());
    tessera_tui::run(tessera_tui::Options { file: args.file, kernel: args.kernel, target: args.target, schedule, dims })
}
