//! Finding and reading `.tsr` files.

use std::path::{Path, PathBuf};

/// Every `.tsr` file under `paths` (files are taken as given), honouring `.gitignore`,
/// sorted. Errors name the path that could not be read.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_file() {
            out.push(path.clone());
            continue;
        }
        if !path.exists() {
            return Err(format!("{}: no such file or directory", path.display()));
        }
        // Walk the canonical path so that `exclude` patterns (anchored at the config's
        // directory) match; paths are shown relative to the current directory again.
        let canonical = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut builder = ignore::WalkBuilder::new(&canonical);
        builder.hidden(true).git_ignore(true).require_git(false);
        if let Some((config_path, config)) = crate::config::ProjectConfig::find(&canonical)? {
            let root = config_path.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut overrides = ignore::overrides::OverrideBuilder::new(&root);
            for pattern in config.exclude.iter().flatten() {
                overrides
                    .add(&format!("!{pattern}"))
                    .map_err(|e| format!("{}: bad exclude pattern `{pattern}`: {e}", config_path.display()))?;
            }
            let overrides = overrides.build().map_err(|e| format!("{}: {e}", config_path.display()))?;
            builder.overrides(overrides);
        }
        let walker = builder.build();
        for entry in walker {
            let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
            if entry.file_type().is_some_and(|t| t.is_file()) && entry.path().extension().is_some_and(|e| e == "tsr") {
                out.push(entry.into_path());
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A source read from disk: its text (lossily decoded) and the offset of the first
/// invalid UTF-8 byte, if any.
pub struct Loaded {
    pub text: String,
    pub utf8_error: Option<u32>,
}

pub fn decode(bytes: Vec<u8>) -> Loaded {
    match String::from_utf8(bytes) {
        Ok(text) => Loaded { text, utf8_error: None },
        Err(e) => {
            let at = e.utf8_error().valid_up_to() as u32;
            Loaded { text: String::from_utf8_lossy(e.as_bytes()).into_owned(), utf8_error: Some(at) }
        }
    }
}

pub fn read(path: &Path) -> Result<Loaded, String> {
    std::fs::read(path).map(decode).map_err(|e| format!("{}: {e}", path.display()))
}

/// How a path is shown in output: relative to the current directory when possible.
pub fn display_path(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let shown = cwd.as_deref().and_then(|c| path.strip_prefix(c).ok()).unwrap_or(path);
    let s = shown.to_string_lossy().into_owned();
    s.strip_prefix("./").map(str::to_string).unwrap_or(s)
}
