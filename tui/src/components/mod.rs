//! The tabs' components: each owns the state of its tab and the transitions that need
//! nothing but that state and the model below it (the workspace, the kernel on screen).
//! They know nothing of the app that holds them or of the views that draw them.

pub mod passes;
pub mod run;
pub mod schedule;

use crate::state::{Message, Pane};

/// What an action in a tab asks of the app, beyond the tab's own state.
#[derive(Clone, Debug)]
pub enum Outcome {
    Nothing,
    Focus(Pane),
    Say(Message),
    /// Take the kernel, target and configuration of the run tab's result `i`.
    UseRun(usize),
}
