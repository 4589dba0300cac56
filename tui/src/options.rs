//! What the command line asks the explorer for.

use std::path::PathBuf;

use tessera_passes::Target;

/// What the command line asked for.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub file: PathBuf,
    /// The kernel or graph function to open; the first kernel of the file when absent.
    pub kernel: Option<String>,
    pub target: Target,
    /// `KEY=VALUE` schedule overrides, as `tessera lower --schedule` takes them.
    pub schedule: Vec<(String, String)>,
    /// Values of shape symbols (`D=128`), as `tessera lower --dims` takes them.
    pub dims: Vec<(String, String)>,
}
