//! Files the tools write: always whole or not at all. Each is written to a temporary
//! file in the same directory, flushed to disk, then renamed over the target, so a full
//! disk or a kill leaves either the old file or the new one, never a truncated mix.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically (see the module doc). An existing file keeps its
/// permissions; a symlink is followed (the file it points to is replaced and the link
/// stays a link); the directory is synced so that the rename itself is durable.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = match std::fs::canonicalize(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e),
    };
    let permissions = std::fs::metadata(&target).ok().map(|m| m.permissions());
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(p) = permissions {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target)?;
        // Best effort: not every platform can open a directory.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A set of files that is written whole: each file atomically, and when one fails the
/// files this set already wrote are removed again.
#[derive(Default)]
pub struct FileSet {
    written: Vec<PathBuf>,
}

impl FileSet {
    pub fn new() -> FileSet {
        FileSet::default()
    }

    /// Writes one file of the set; on failure removes the set's earlier files and says
    /// which were removed.
    pub fn write(&mut self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        match write_atomic(path, bytes) {
            Ok(()) => {
                self.written.push(path.to_path_buf());
                Ok(())
            }
            Err(e) => {
                let removed = self.remove_all();
                let mut message = format!("{}: {e}", path.display());
                if removed > 0 {
                    message.push_str(&format!(" (removed the {removed} files this run had written)"));
                }
                Err(message)
            }
        }
    }

    fn remove_all(&mut self) -> usize {
        let n = self.written.len();
        for p in self.written.drain(..) {
            let _ = std::fs::remove_file(p);
        }
        n
    }

    /// The files written, in order.
    pub fn written(&self) -> &[PathBuf] {
        &self.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_set_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("tessera-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut set = FileSet::new();
        set.write(&dir.join("a.npy"), b"one").unwrap();
        assert_eq!(std::fs::read(dir.join("a.npy")).unwrap(), b"one");
        // A directory in the way: the rename fails.
        std::fs::create_dir_all(dir.join("b.npy")).unwrap();
        let err = set.write(&dir.join("b.npy"), b"two").unwrap_err();
        assert!(err.contains("removed the 1 files"), "{err}");
        assert!(!dir.join("a.npy").exists());
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("b.npy")], "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("tessera-files-r-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.json");
        write_atomic(&p, b"old contents").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
