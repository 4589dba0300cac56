//! The on-disk cache of `tessera check`: a file whose text, tool build and target are
//! unchanged gets its diagnostics back without being checked again, as ruff's cache does.
//!
//! - Where: `--cache-dir`, else `$TESSERA_CACHE_DIR`, else `.tessera_cache` in the
//!   directory of the nearest `tessera.toml` above the working directory, else in the
//!   working directory. `--no-cache` turns it off. The directory holds a `.gitignore`
//!   (`*`) and a `CACHEDIR.TAG`, so neither git nor backup tools pick it up.
//! - Key: SHA-256 of the cache format, the tool build (version, and the size and
//!   modification time of the running executable, so a rebuilt binary never reads the
//!   old one's answers), the target, and the file's bytes. The path is not in the key:
//!   diagnostics are positions in the text, so a copied or renamed file hits too. A
//!   file's diagnostics depend on nothing but its own text (imports name only `tessera`).
//! - Value: the diagnostics before `--select`/`--ignore`, which filter at output time.
//! - Entries are written atomically; a missing, unreadable or malformed entry is a miss,
//!   and a cache that cannot be written is skipped: the cache can make a check faster,
//!   never different.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tessera_frontend::diagnostics::{Code, Diagnostic, Edit, Fix, Label, Severity};
use tessera_frontend::text::TextRange;
use tessera_passes::Target;

/// Bumped whenever the stored form changes.
const FORMAT: &str = "tessera-check-cache-1";

pub const DEFAULT_DIR_NAME: &str = ".tessera_cache";

pub struct CheckCache {
    dir: PathBuf,
    /// The format and the tool build, hashed once.
    build: [u8; 32],
}

impl CheckCache {
    pub fn new(dir: PathBuf) -> CheckCache {
        let mut hasher = Sha256::new();
        hasher.update(FORMAT);
        hasher.update(env!("CARGO_PKG_VERSION"));
        if let Some((len, modified)) = std::env::current_exe().ok().and_then(|exe| {
            let meta = std::fs::metadata(exe).ok()?;
            Some((meta.len(), meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos()))
        }) {
            hasher.update(len.to_le_bytes());
            hasher.update(modified.to_le_bytes());
        }
        CheckCache { dir, build: hasher.finalize().into() }
    }

    /// The default place: `.tessera_cache` beside the project's `tessera.toml`, else in
    /// `cwd`.
    pub fn default_dir(cwd: &Path) -> PathBuf {
        let project = crate::config::ProjectConfig::nearest(cwd);
        project.as_deref().and_then(Path::parent).unwrap_or(cwd).join(DEFAULT_DIR_NAME)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn key(&self, target: Target, text: &str, utf8_error: Option<u32>) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.build);
        hasher.update(target.to_string());
        hasher.update([0]);
        hasher.update(utf8_error.map_or(u64::MAX, u64::from).to_le_bytes());
        hasher.update(text);
        hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join("check").join(&key[..2]).join(&key[2..])
    }

    /// The stored diagnostics of `key`, or None on a miss (absent or unusable entry).
    /// `text_len` guards against an entry whose ranges do not fit the text.
    pub fn get(&self, key: &str, text_len: usize) -> Option<Vec<Diagnostic>> {
        let bytes = std::fs::read(self.entry(key)).ok()?;
        let value: Value = serde_json::from_slice(&bytes).ok()?;
        let diagnostics = value.as_array()?.iter().map(decode).collect::<Option<Vec<_>>>()?;
        let fits = |r: &TextRange| r.start <= r.end && r.end as usize <= text_len;
        diagnostics
            .iter()
            .all(|d| {
                fits(&d.range)
                    && d.labels.iter().all(|l| fits(&l.range))
                    && d.fix.iter().flat_map(|f| &f.edits).all(|e| fits(&e.range))
            })
            .then_some(diagnostics)
    }

    /// Stores the diagnostics of `key`; failures (a read-only tree, a full disk) only
    /// mean the next run checks again.
    pub fn put(&self, key: &str, diagnostics: &[Diagnostic]) {
        let entry = self.entry(key);
        let Some(parent) = entry.parent() else { return };
        if !self.dir.is_dir() {
            if std::fs::create_dir_all(&self.dir).is_err() {
                return;
            }
            let _ = std::fs::write(self.dir.join(".gitignore"), "# Created by tessera check.\n*\n");
            let _ = std::fs::write(
                self.dir.join("CACHEDIR.TAG"),
                "Signature: 8a477f597d28d172789f06886806bc55\n# The cache of tessera check: safe to delete.\n",
            );
        }
        if std::fs::create_dir_all(parent).is_err() {
            return;
        }
        let value = Value::Array(diagnostics.iter().map(encode).collect());
        let _ = tessera_backends::files::write_atomic(&entry, value.to_string().as_bytes());
    }
}

fn range(r: TextRange) -> Value {
    json!([r.start, r.end])
}

fn encode(d: &Diagnostic) -> Value {
    json!({
        "code": d.code.as_str(),
        "severity": d.severity.as_str(),
        "message": d.message,
        "range": range(d.range),
        "labels": d.labels.iter().map(|l| json!({"range": range(l.range), "message": l.message})).collect::<Vec<_>>(),
        "notes": d.notes,
        "fix": d.fix.as_ref().map(|f| json!({
            "message": f.message,
            "edits": f.edits.iter().map(|e| json!({"range": range(e.range), "text": e.text})).collect::<Vec<_>>(),
        })),
    })
}

fn decode_range(v: &Value) -> Option<TextRange> {
    let pair = v.as_array()?;
    let [start, end] = pair.as_slice() else { return None };
    Some(TextRange { start: u32::try_from(start.as_u64()?).ok()?, end: u32::try_from(end.as_u64()?).ok()? })
}

fn decode(v: &Value) -> Option<Diagnostic> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let severity = match v.get("severity")?.as_str()? {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        _ => return None,
    };
    let labels = v
        .get("labels")?
        .as_array()?
        .iter()
        .map(|l| Some(Label { range: decode_range(l.get("range")?)?, message: text(l.get("message")?)? }))
        .collect::<Option<Vec<_>>>()?;
    let notes = v.get("notes")?.as_array()?.iter().map(text).collect::<Option<Vec<_>>>()?;
    let fix = match v.get("fix")? {
        Value::Null => None,
        f => Some(Fix {
            message: text(f.get("message")?)?,
            edits: f
                .get("edits")?
                .as_array()?
                .iter()
                .map(|e| Some(Edit { range: decode_range(e.get("range")?)?, text: text(e.get("text")?)? }))
                .collect::<Option<Vec<_>>>()?,
        }),
    };
    Some(Diagnostic {
        code: Code::parse(v.get("code")?.as_str()?)?,
        severity,
        message: text(v.get("message")?)?,
        range: decode_range(v.get("range")?)?,
        labels,
        notes,
        fix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Diagnostic> {
        let mut d = Diagnostic::new(Code::E0900, TextRange { start: 1, end: 4 }, "boom \"quoted\" é")
            .with_label(TextRange { start: 0, end: 1 }, "here");
        d.notes.push("a note".into());
        d.fix =
            Some(Fix { message: "do it".into(), edits: vec![Edit { range: TextRange::empty(2), text: "x".into() }] });
        vec![d, Diagnostic::new(Code::W0702, TextRange { start: 5, end: 9 }, "w")]
    }

    #[test]
    fn entries_round_trip_and_keys_separate_what_changes_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CheckCache::new(dir.path().join("c"));
        let key = cache.key(Target::Sm90, "0123456789", None);
        assert_eq!(cache.get(&key, 10), None, "an empty cache misses");
        cache.put(&key, &sample());
        assert_eq!(cache.get(&key, 10), Some(sample()));
        assert_ne!(key, cache.key(Target::Cpu, "0123456789", None), "the target is in the key");
        assert_ne!(key, cache.key(Target::Sm90, "0123456789 ", None), "the text is in the key");
        assert_ne!(key, cache.key(Target::Sm90, "0123456789", Some(3)), "a decoding error is in the key");
        assert!(dir.path().join("c/.gitignore").is_file() && dir.path().join("c/CACHEDIR.TAG").is_file());
    }

    #[test]
    fn malformed_or_misfitting_entries_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CheckCache::new(dir.path().to_path_buf());
        let key = cache.key(Target::Sm90, "0123456789", None);
        cache.put(&key, &sample());
        assert_eq!(cache.get(&key, 3), None, "ranges past the end of the text");
        for garbage in ["", "{", "[{\"code\": \"E9999\"}]", "[1]", "null"] {
            std::fs::write(cache.entry(&key), garbage).unwrap();
            assert_eq!(cache.get(&key, 10), None, "{garbage:?}");
        }
    }
}
