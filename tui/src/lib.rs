//! `tessera-explore`: the terminal IR explorer (TOOLS.md §5).
//!
//! Shaped like gitui, in layers, none of which imports one above it (`tests/layers.rs`
//! checks there is no import cycle between files):
//! - the model: [`workspace::Workspace`] owns the salsa database and asks it the same
//!   queries as `tessera lower` and the language server; [`pipeline`], [`diff`], [`irdoc`],
//!   [`highlight`] derive the views' data; [`runner`] runs kernels and graph functions
//!   on worker threads that report back through channels; [`panics`], [`options`],
//!   [`theme`], [`keymap`] sit at the bottom;
//! - the state: [`state`] (tabs, panes, cursors, layout, overlays, messages) and
//!   [`kernel::KernelView`] (the kernel on screen and what is derived from it, cached);
//! - the tabs' components ([`components`]): each owns its tab's state and updates it,
//!   handing the app an [`components::Outcome`] for anything beyond it;
//! - [`app::App`]: the state every tab shares, the components, and how
//!   [`keymap::Action`]s change them;
//! - [`ui`]: [`ui::layout`] places the panes, [`app::App::frame`] takes the layout into
//!   the state (and computes what the panes show), [`ui::view`] draws from `&App`;
//! - [`term`]: the terminal and the event loop.

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
