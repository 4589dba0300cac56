//! `tessera check`'s on-disk cache through the real binary: the same answers with and
//! without it, answers really read from it, and every change that must invalidate an
//! entry does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env_remove("TESSERA_CACHE_DIR")
        .output()
        .expect("tessera runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The cache's entries (files under `check/`).
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![cache.join("check")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// A copy of the invalid and valid corpus in a scratch directory.
fn corpus_copy(into: &Path) {
    for part in ["valid", "invalid"] {
        let dst = into.join(part);
        std::fs::create_dir_all(&dst).unwrap();
        for e in std::fs::read_dir(root().join("tests/corpus").join(part)).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "tsr") {
                std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
            }
        }
    }
}

#[test]
fn cached_answers_are_the_uncached_answers() {
    let dir = tempfile::tempdir().unwrap();
    corpus_copy(dir.path());
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    for format in ["json", "concise", "sarif"] {
        let uncached = check(dir.path(), &["--no-cache", "--format", format, "."]);
        let filling = check(dir.path(), &["--cache-dir", cache_arg, "--format", format, "."]);
        let from_cache = check(dir.path(), &["--cache-dir", cache_arg, "--format", format, "."]);
        assert_eq!(uncached.status.code(), Some(1), "the invalid corpus has errors");
        for run in [&filling, &from_cache] {
            assert_eq!(run.status.code(), uncached.status.code(), "{format}");
            assert_eq!(stdout(run), stdout(&uncached), "{format}: output with the cache differs");
        }
    }
    let files = std::fs::read_dir(dir.path().join("valid")).unwrap().count()
        + std::fs::read_dir(dir.path().join("invalid")).unwrap().count();
    assert!(entries(&cache).len() >= files * 9 / 10, "about one entry per distinct file");
    assert_eq!(std::fs::read_to_string(cache.join(".gitignore")).unwrap().lines().last(), Some("*"));
    assert!(cache.join("CACHEDIR.TAG").is_file());
}

#[test]
fn an_unchanged_file_is_answered_from_the_cache_and_a_change_misses() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k.tsr");
    std::fs::copy(root().join("tests/corpus/invalid/e0200_undefined.tsr"), &file).unwrap();
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    let first = check(dir.path(), &["--cache-dir", cache_arg, "--format", "concise", "k.tsr"]);
    assert!(stdout(&first).contains("E0200"), "{}", stdout(&first));
    let [entry] = entries(&cache).try_into().expect("one entry for one file");

    // An entry planted under the file's key is what the next run reports: the answer
    // comes from the cache, not from checking the file again.
    let planted = r#"[{"code":"W0702","severity":"warning","message":"planted in the cache","range":[0,4],"labels":[],"notes":[],"fix":null}]"#;
    std::fs::write(&entry, planted).unwrap();
    let hit = check(dir.path(), &["--cache-dir", cache_arg, "--format", "concise", "k.tsr"]);
    assert!(stdout(&hit).contains("planted in the cache"), "{}", stdout(&hit));
    assert_eq!(hit.status.code(), Some(0), "a warning alone exits 0");

    // --no-cache neither reads it ...
    let fresh = check(dir.path(), &["--no-cache", "--format", "concise", "k.tsr"]);
    assert_eq!(stdout(&fresh), stdout(&first));
    // ... nor does another target (a different key) ...
    let cpu = check(dir.path(), &["--cache-dir", cache_arg, "--target", "cpu", "--format", "concise", "k.tsr"]);
    assert!(stdout(&cpu).contains("E0200") && !stdout(&cpu).contains("planted"), "{}", stdout(&cpu));
    // ... nor an edited file.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\n# edited\n");
    std::fs::write(&file, text).unwrap();
    let edited = check(dir.path(), &["--cache-dir", cache_arg, "--format", "concise", "k.tsr"]);
    assert!(stdout(&edited).contains("E0200") && !stdout(&edited).contains("planted"), "{}", stdout(&edited));

    // A malformed entry is a miss, not a failure.
    for e in entries(&cache) {
        std::fs::write(e, "{ not json").unwrap();
    }
    let repaired = check(dir.path(), &["--cache-dir", cache_arg, "--format", "concise", "k.tsr"]);
    assert_eq!(stdout(&repaired), stdout(&edited));
}

#[test]
fn the_default_cache_sits_beside_tessera_toml_and_an_unwritable_one_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tessera.toml"), "target = \"sm_90\"\n").unwrap();
    let sub = dir.path().join("kernels");
    std::fs::create_dir(&sub).unwrap();
    std::fs::copy(root().join("tests/corpus/invalid/e0200_undefined.tsr"), sub.join("k.tsr")).unwrap();
    let first = check(&sub, &["--format", "concise", "k.tsr"]);
    assert_eq!(first.status.code(), Some(1));
    assert_eq!(entries(&dir.path().join(".tessera_cache")).len(), 1, "the cache is at the project root");
    assert!(!sub.join(".tessera_cache").exists());

    // A cache path that cannot be a directory: the check still runs and answers.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, "a file, not a directory").unwrap();
    let run = check(&sub, &["--cache-dir", blocked.to_str().unwrap(), "--format", "concise", "k.tsr"]);
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(stdout(&run), stdout(&first));
    assert!(String::from_utf8_lossy(&run.stderr).is_empty(), "no noise: {}", String::from_utf8_lossy(&run.stderr));

    // --no-cache creates nothing.
    let clean = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("tests/corpus/invalid/e0200_undefined.tsr"), clean.path().join("k.tsr")).unwrap();
    check(clean.path(), &["--no-cache", "k.tsr"]);
    assert!(!clean.path().join(".tessera_cache").exists());
}
