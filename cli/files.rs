//! Finding, reading and rewriting `.tsr` files.
//!
//! A path that cannot be read never hides the others: [`collect`] returns every file it
//! found together with a [`PathError`] for each path it could not read (missing,
//! unreadable, a symlink loop, a FIFO or device named on the command line), and the
//! commands report those after doing everything else.

use std::io;
use std::path::{Path, PathBuf};

/// A path that could not be read, as shown to the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError {
    pub path: String,
    pub message: String,
}

impl PathError {
    pub fn new(path: &Path, message: impl Into<String>) -> PathError {
        PathError { path: display_path(path), message: message.into() }
    }
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The files found, sorted, and the paths that could not be read.
#[derive(Debug, Default)]
pub struct Collected {
    pub files: Vec<PathBuf>,
    pub errors: Vec<PathError>,
}

/// Every `.tsr` file under `paths` (files are taken as given), honouring `.gitignore`
/// and `tessera.toml`'s `exclude`. Paths that cannot be read are collected as errors;
/// only a malformed `tessera.toml` stops the search.
pub fn collect(paths: &[PathBuf]) -> Result<Collected, String> {
    let mut out = Collected::default();
    for path in paths {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => {
                out.errors.push(PathError::new(path, describe_error(path, &e)));
                continue;
            }
        };
        if meta.is_file() {
            out.files.push(path.clone());
            continue;
        }
        if !meta.is_dir() {
            out.errors.push(PathError::new(path, format!("not a regular file ({})", file_kind(&meta))));
            continue;
        }
        // Walk the canonical path so that `exclude` patterns (anchored at the config's
        // directory) match; paths are shown relative to the current directory again.
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(e) => {
                out.errors.push(PathError::new(path, describe_error(path, &e)));
                continue;
            }
        };
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
        for entry in builder.build() {
            match entry {
                Ok(entry) => {
                    let tsr = entry.path().extension().is_some_and(|e| e == "tsr");
                    if tsr && entry.file_type().is_some_and(|t| t.is_file()) {
                        out.files.push(entry.into_path());
                    }
                }
                Err(e) => out.errors.push(walk_error(path, &e)),
            }
        }
    }
    out.files.sort();
    out.files.dedup();
    out.errors.dedup();
    Ok(out)
}

/// A directory walk's error, named by the path it happened at.
fn walk_error(root: &Path, e: &ignore::Error) -> PathError {
    let mut err = e;
    let mut at: Option<&Path> = None;
    loop {
        match err {
            ignore::Error::WithPath { path, err: inner } => {
                at = Some(path);
                err = inner;
            }
            ignore::Error::WithDepth { err: inner, .. } | ignore::Error::WithLineNumber { err: inner, .. } => {
                err = inner
            }
            ignore::Error::Loop { child, .. } => return PathError::new(child, "symlink loop"),
            ignore::Error::Io(io) => {
                let path = at.unwrap_or(root);
                return PathError::new(path, describe_error(path, io));
            }
            other => return PathError::new(at.unwrap_or(root), other.to_string()),
        }
    }
}

/// What kind of file a non-regular, non-directory path is.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    let _ = meta;
    "not a file or directory"
}

/// An I/O error on `path` in words: a symlink loop and a dangling symlink are named as
/// such rather than "no such file".
pub fn describe_error(path: &Path, e: &io::Error) -> String {
    #[cfg(target_os = "linux")]
    const ELOOP: i32 = 40;
    #[cfg(not(target_os = "linux"))]
    const ELOOP: i32 = 62;
    if cfg!(unix) && e.raw_os_error() == Some(ELOOP) {
        return "symlink loop (too many levels of symbolic links)".to_string();
    }
    match e.kind() {
        io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => format!("dangling symlink (to {})", target.display()),
            Err(_) => "no such file or directory".to_string(),
        },
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    }
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
    load(path).map_err(|e| format!("{}: {}", path.display(), e.message))
}

/// [`read`], with the error as a [`PathError`] ("cannot read: ...").
pub fn load(path: &Path) -> Result<Loaded, PathError> {
    std::fs::read(path)
        .map(decode)
        .map_err(|e| PathError::new(path, format!("cannot read: {}", describe_error(path, &e))))
}

/// Replaces the file at `path` with `bytes` atomically: a temporary file in the same
/// directory gets the bytes and the original's permissions, is flushed to disk and then
/// renamed over the original, and the directory is synced. A full disk, an error or a
/// kill at any moment leaves either the old text or the new one, never a mix; on an
/// error the temporary file is removed. A symlink is followed: the file it points to is
/// replaced and the link stays a link (`tessera_backends::files::write_atomic`, which
/// every file the tools write goes through).
pub fn replace_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    tessera_backends::files::write_atomic(path, bytes)
}

/// How a path is shown in output: relative to the current directory when possible.
pub fn display_path(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let shown = cwd.as_deref().and_then(|c| path.strip_prefix(c).ok()).unwrap_or(path);
    let s = shown.to_string_lossy().into_owned();
    s.strip_prefix("./").map(str::to_string).unwrap_or(s)
}
