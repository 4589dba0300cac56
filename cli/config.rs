//! `tessera.toml`: per-project settings, found upward from the checked file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub target: Option<String>,
    pub select: Option<Vec<String>>,
    pub ignore: Option<Vec<String>>,
    /// Values for dim symbols that target lints need (`M = 4096`).
    pub dims: Option<BTreeMap<String, i64>>,
    /// Gitignore-style patterns, relative to this file's directory, that directory
    /// walks skip (files named on the command line are always checked).
    pub exclude: Option<Vec<String>>,
}

impl ProjectConfig {
    /// Finds the nearest `tessera.toml` at or above `start` (a file or a directory).
    pub fn find(start: &Path) -> Result<Option<(PathBuf, ProjectConfig)>, String> {
        let Some(candidate) = ProjectConfig::nearest(start) else { return Ok(None) };
        let text =
            std::fs::read_to_string(&candidate).map_err(|e| format!("cannot read {}: {e}", candidate.display()))?;
        let config: ProjectConfig =
            toml::from_str(&text).map_err(|e| format!("invalid {}: {e}", candidate.display()))?;
        Ok(Some((candidate, config)))
    }

    /// The path of the nearest `tessera.toml` at or above `start` (a file or a
    /// directory), without reading it.
    pub fn nearest(start: &Path) -> Option<PathBuf> {
        let start = if start.is_file() || start.extension().is_some() {
            start.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            start.to_path_buf()
        };
        let mut dir = std::fs::canonicalize(&start).unwrap_or(start);
        loop {
            let candidate = dir.join("tessera.toml");
            if candidate.is_file() {
                return Some(candidate);
            }
            if !dir.pop() {
                return None;
            }
        }
    }
}
