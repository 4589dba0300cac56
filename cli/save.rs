//! `--save DIR`: a run's tensors as `.npy` files and its report as `run.json`, each file
//! written atomically, and none left behind when one of them fails.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tessera_backends::files::FileSet;
use tessera_backends::tensor::HostTensor;

pub(crate) struct Save {
    dir: PathBuf,
    files: FileSet,
}

impl Save {
    pub fn open(dir: &Path) -> Result<Save, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("--save {}: {e}", dir.display()))?;
        Ok(Save { dir: dir.to_path_buf(), files: FileSet::new() })
    }

    /// `DIR/NAME` in NumPy's format (bf16 and fp8 widened to f32, as the note says).
    pub fn tensor(&mut self, name: &str, t: &HostTensor) -> Result<(), String> {
        let path = self.dir.join(name);
        let (bytes, note) = tessera_backends::npy::to_bytes(t);
        self.files.write(&path, &bytes).map_err(|e| format!("--save: {e}"))?;
        if let Some(note) = note {
            eprintln!("note: {}: {note}", path.display());
        }
        Ok(())
    }

    pub fn json(&mut self, name: &str, v: &Value) -> Result<(), String> {
        let mut text = serde_json::to_string_pretty(v).unwrap_or_default();
        text.push('\n');
        self.files.write(&self.dir.join(name), text.as_bytes()).map_err(|e| format!("--save: {e}"))
    }
}
