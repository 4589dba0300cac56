//! Where the IR passes plug into the language server. Everything else the server shows
//! comes from the frontend's `ide` layer; these three need the target-aware passes.
//!
//! Each returns plain data (byte offsets into the file's text); the server turns it
//! into protocol types. Until the passes provide the data, each says so explicitly
//! (no estimates are made up here).

use tessera_frontend::{Database, SourceFile, TextRange};
use tessera_passes::Target;

/// The IR of one kernel at one stage, for `tessera/lowering`.
pub struct Lowering {
    /// The IR text, deterministic, one op per line.
    pub text: String,
    /// For IR lines that came from source: (0-based line in `text`, source byte range).
    pub source_map: Vec<(u32, TextRange)>,
}

/// Lowers `kernel` of `file` to `stage` (`graph`, `sched`, `tile`, `target` or `all`)
/// for `target`. The server has already checked that the kernel exists; an `Err` is
/// sent to the client as the request's error message.
///
/// To wire it: call the passes' lowering query on `db` (e.g.
/// `tessera_passes::lower(db, file, kernel, stage, target)`), render the stage's IR
/// text, and map each op's `loc(...)` back to a byte range of the source.
pub fn lower(db: &Database, file: SourceFile, kernel: &str, stage: &str, target: Target) -> Result<Lowering, String> {
    let _ = (db, file, kernel, stage, target);
    Err("lowering is not available in this build".to_string())
}

/// Extra markdown for the hover of a kernel: estimated registers per thread, shared
/// memory per block and occupancy for `target`, with what limits them. `None` adds
/// nothing to the hover.
///
/// To wire it: ask the target-aware analyses (the ones behind W0600/W0602/E0500) for
/// the kernel's estimates under its first schedule configuration.
pub fn kernel_resources(db: &Database, file: SourceFile, kernel: &str, target: Target) -> Option<String> {
    let _ = (db, file, kernel, target);
    None
}

/// Extra markdown for the hover of a shared-memory buffer (`buffer`, a local of
/// `kernel`): its bank-conflict verdict per access on `target` (W0601's analysis).
pub fn shared_buffer_notes(
    db: &Database,
    file: SourceFile,
    kernel: &str,
    buffer: &str,
    target: Target,
) -> Option<String> {
    let _ = (db, file, kernel, buffer, target);
    None
}
