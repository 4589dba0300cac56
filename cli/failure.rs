//! How `run`, `autotune` and `lower` fail: a message with its exit status (`Failure`),
//! and the refusal of code with errors (`refusal`, `refuse_errors`).

use tessera_backends::launch::{ErrorKind, LaunchError};
use tessera_frontend::FnKey;

use crate::options::Source;

/// A failure with its exit status: 2 for the tool (options, devices), 1 for the kernel.
pub(crate) struct Failure {
    pub code: i32,
    pub message: String,
    /// For `--json`: what kind of failure (`compile`, `fault`).
    pub kind: Option<&'static str>,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: 2, message: message.into(), kind: None }
    }

    pub fn launch(src: &Source, e: LaunchError) -> Failure {
        let (code, kind) = match e.kind {
            ErrorKind::Compile => (1, Some("compile")),
            ErrorKind::Fault => (1, Some("fault")),
            ErrorKind::Input | ErrorKind::Unavailable | ErrorKind::NotRunnable | ErrorKind::Resources => (2, None),
        };
        // The message names other ops by position already (the plan carries the file's
        // positions); only the failing op's own location is structured.
        let message = format!("{}{}", src.position(e.loc.as_ref()), e.message);
        Failure { code, message, kind }
    }

    /// Reports the failure: exit 2 through the caller's `Err` (printed as `error: ...`),
    /// exit 1 printed here.
    pub fn finish(self) -> Result<i32, String> {
        if self.code == 2 {
            Err(self.message)
        } else {
            eprintln!("error: {}", self.message);
            Ok(self.code)
        }
    }
}

/// Code with errors never runs: the first error of the function, or of a function it
/// calls, refuses it (exit 1).
pub(crate) fn refuse_errors(src: &Source, key: FnKey<'_>, verb: &str) -> Result<(), Failure> {
    if let Some(message) = refusal(src.db(), src.file(), key, verb).or_else(|| code_refusal(src, key, verb)) {
        return Err(Failure { code: 1, kind: Some("compile"), message });
    }
    Ok(())
}

/// A kernel with a race or grid error `tessera check` reports (E0501, E0503, E0504: facts of its code under
/// any schedule) is not run or tuned: the launch plan refuses it too, and this says so
/// before the search of `autotune` finds every candidate refused.
fn code_refusal(src: &Source, key: FnKey<'_>, verb: &str) -> Option<String> {
    use tessera_passes::ir::print::LocResolver;
    let db = src.db();
    let graph = tessera_passes::graph_ir(db, key).clone().ok()?;
    let name = key.name(db);
    let (loc, message) = tessera_passes::analysis::code_error(&graph, name)?;
    let at = tessera_passes::FileLocs::new(db, src.file())
        .resolve(&loc)
        .map(|(path, line, col)| format!("{path}:{line}:{col}: "))
        .unwrap_or_default();
    Some(format!("{at}cannot {verb} `{name}`: {message} (`tessera check` shows its errors)"))
}

/// `FILE:LINE:COL: cannot VERB `k`: ...` naming the first error of `key` or of a function
/// it calls (the one message of `run`, `autotune` and `lower`), `None` without errors.
pub(crate) fn refusal(
    db: &tessera_frontend::Database,
    file: tessera_frontend::SourceFile,
    key: FnKey<'_>,
    verb: &str,
) -> Option<String> {
    use tessera_passes::ir::print::LocResolver;
    let (function, e) = tessera_passes::errors::reachable_error(db, key)?;
    let name = key.name(db);
    let at = tessera_passes::FileLocs::new(db, file)
        .resolve(&tessera_passes::ir::Loc::new(&function, e.range))
        .map(|(path, line, col)| format!("{path}:{line}:{col}: "))
        .unwrap_or_default();
    let why = if function == *name {
        "it has errors".to_string()
    } else {
        format!("it calls `{function}`, which has errors")
    };
    Some(format!(
        "{at}cannot {verb} `{name}`: {why}; the first: {} {} (`tessera check` shows them all)",
        e.code, e.message
    ))
}
