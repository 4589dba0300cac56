//! The sources the test crates run every kernel of (the contract corpus's valid files,
//! the examples, the standard library) and the `M=70,N=40` shape specs they run them
//! at. Each test crate, of whichever package, includes this file as a module
//! (`#[path = ".../tests/support/kernel_sources.rs"] mod kernel_sources;`) and takes what
//! it needs.

// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `.tsr` text and where it is from.
pub struct Source {
    /// `valid/gemm.tsr`, `examples/gemm.tsr`, `stdlib/matmul.tsr`.
    pub label: String,
    pub path: PathBuf,
    pub text: String,
}

/// The repository's root: the including package's directory or the nearest one above it
/// that holds the corpus.
pub fn repository_root() -> PathBuf {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = package.ancestors().find(|p| p.join("tests/corpus/valid").is_dir());
    root.unwrap_or_else(|| panic!("no tests/corpus/valid at or above {}", package.display())).to_path_buf()
}

/// The `.tsr` files of `tests/corpus/valid` and `examples`, in that order, each sorted
/// by name, labelled `folder/file`.
pub fn repository_files() -> Vec<Source> {
    let root = repository_root();
    let mut out = Vec::new();
    for dir in [root.join("tests/corpus/valid"), root.join("examples")] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let label = format!(
                "{}/{}",
                path.parent().unwrap().file_name().unwrap().to_string_lossy(),
                path.file_name().unwrap().to_string_lossy()
            );
            out.push(Source { label, path, text });
        }
    }
    out
}

/// The standard library's modules, labelled `stdlib/file`.
pub fn stdlib() -> Vec<Source> {
    tessera_frontend::stdlib::FILES
        .iter()
        .map(|(name, text)| Source {
            label: format!("stdlib/{name}"),
            path: PathBuf::from(name),
            text: text.to_string(),
        })
        .collect()
}

/// [`repository_files`], then the standard library.
pub fn every_source() -> Vec<Source> {
    let mut out = repository_files();
    out.extend(stdlib());
    out
}

/// `M=70,N=40` as symbol values.
pub fn parse_dims(spec: &str) -> BTreeMap<String, i64> {
    spec.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or_else(|| panic!("`{p}` in `{spec}` is not SYMBOL=VALUE"));
            (k.to_string(), v.parse().unwrap_or_else(|e| panic!("`{p}` in `{spec}`: {e}")))
        })
        .collect()
}
