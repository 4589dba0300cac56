//! Launch errors: what kind of failure, the message and the source location.

use std::fmt;

use tessera_passes::ir::Loc;
use tessera_passes::{LowerError, Target};

use crate::interp::{self};

/// What kind of failure a [`LaunchError`] is (the CLI maps it to an exit status).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ErrorKind {
    /// A dim, argument or schedule value the user gave is wrong.
    Input,
    /// The device cannot be used here (absent, not built, cannot run the target).
    Unavailable,
    /// The function cannot be launched (a graph function, a helper).
    NotRunnable,
    /// The kernel does not compile for the target.
    Compile,
    /// The kernel failed while running (a hazard the interpreter found, a device fault).
    Fault,
    /// Not enough memory, a grid too large.
    Resources,
}

#[derive(Clone, PartialEq, Debug)]
pub struct LaunchError {
    pub kind: ErrorKind,
    pub message: String,
    /// The source of the failing op or the lowering error, relative to its function
    /// (`tessera_passes::FileLocs` resolves it to a file position).
    pub loc: Option<Loc>,
}

impl LaunchError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> LaunchError {
        LaunchError { kind, message: message.into(), loc: None }
    }

    pub fn input(message: impl Into<String>) -> LaunchError {
        LaunchError::new(ErrorKind::Input, message)
    }

    pub(super) fn lowering(kernel: &str, what: &str, target: Option<Target>, e: &LowerError) -> LaunchError {
        let for_target = target.map(|t| format!(" for {t}")).unwrap_or_default();
        LaunchError {
            kind: ErrorKind::Compile,
            message: format!("cannot lower `{kernel}` to {what}{for_target}: {}", e.message),
            loc: Some(Loc::new(kernel, e.range)),
        }
    }

    /// An interpreter error: the failing op's location goes to `loc` (the message keeps
    /// the program and the op).
    pub(super) fn interp(e: interp::InterpError) -> LaunchError {
        let kind = if e.message.contains("too large") { ErrorKind::Resources } else { ErrorKind::Fault };
        match &e.site {
            Some(site) => {
                let program = site.program.map(|[x, y, z]| format!("program ({x}, {y}, {z}), ")).unwrap_or_default();
                LaunchError {
                    kind,
                    message: format!("the kernel faulted in {program}{}: {}", site.op_name, e.message),
                    loc: Some(site.loc.clone()),
                }
            }
            None => LaunchError { kind, message: e.message, loc: None },
        }
    }
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LaunchError {}
