//! Where the analysis session plugs into the language server. Everything else the server
//! shows comes from the frontend's `ide` layer; the lowering request and the target hovers
//! need the target-aware passes, through `tessera_passes::session`.
//!
//! Each returns plain data (byte offsets into the file's text); the server turns it
//! into protocol types.

use tessera_frontend::TextRange;
use tessera_passes::session::{Analysis, ErrorKind, Overrides, SessionError};
use tessera_passes::{Stage, Target};

/// The IR of one kernel at one stage, for `tessera/lowering`.
pub struct Lowering {
    /// The IR text, deterministic, one op per line.
    pub text: String,
    /// For IR lines that came from source: (0-based line in `text`, source byte range).
    pub source_map: Vec<(u32, TextRange)>,
}

/// Lowers `kernel` of `file` to `stage` (`graph`, `sched`, `tile`, `target` or `all`)
/// for `target`, through the analysis session: the kernel's own configuration with the
/// request's `overrides` under the session's one override rule. A refused override, an
/// unknown kernel or a lowering error is the request's error.
pub fn lower(
    analysis: &Analysis<'_>,
    kernel: &str,
    stage: &str,
    target: Target,
    overrides: &Overrides,
) -> Result<Lowering, SessionError> {
    let stages: Vec<Stage> =
        match stage {
            "all" => Stage::ALL.to_vec(),
            s => vec![Stage::parse(s)
                .ok_or_else(|| SessionError::new(ErrorKind::Rejected, format!("unknown stage `{s}`")))?],
        };
    let f = analysis.function(kernel)?;
    let config = analysis.configure(f, None, overrides)?.strict()?.config;
    let mut out = Lowering { text: String::new(), source_map: Vec::new() };
    for s in stages {
        let lowered = analysis.lower(f, s, &config, target)?;
        if stage == "all" {
            out.text.push_str(&format!("// ===== {} IR: {kernel} ({target}) =====\n", s.name()));
        }
        let first = out.text.lines().count() as u32;
        out.source_map.extend(lowered.source_map.iter().map(|&(line, range)| (first + line, range)));
        out.text.push_str(&lowered.text);
        if !out.text.ends_with('\n') {
            out.text.push('\n');
        }
    }
    Ok(out)
}
