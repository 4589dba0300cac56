//! `tessera-explore`: the terminal IR explorer (TOOLS.md §5).
//!
//! Shaped like gitui: [`app::App`] holds the state and turns [`keymap::Action`]s into
//! state changes, [`ui`] draws from that state and nothing else, and slow work (kernel
//! runs, autotuning) happens on a worker thread ([`runner`]) that reports back through a
//! channel. The explorer keeps no compiler of its own: [`workspace::Workspace`] owns the
//! salsa database and asks it the same queries as `tessera lower` and the language server.

pub mod app;
pub mod components;
pub mod diff;
pub mod highlight;
pub mod irdoc;
pub mod kernel;
pub mod keymap;
pub mod options;
pub mod panics;
pub mod pipeline;
pub mod runner;
pub mod state;
pub mod term;
pub mod theme;
pub mod ui;
pub mod workspace;

use std::process::ExitCode;

pub use app::App;
pub use options::Options;
/// The ratatui the explorer draws with (benchmarks and tests draw on its TestBackend).
pub use ratatui;
pub use tessera_passes::{Stage, Target};

/// Runs the explorer until the user quits. Exit status 2 when the file cannot be read or
/// the terminal cannot be set up (TOOLS.md: 2 is "the tool could not do its job").
pub fn run(options: Options) -> ExitCode {
    let mut app = match App::open(&options) {
        Ok(app) => app,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match term::run(&mut app) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
