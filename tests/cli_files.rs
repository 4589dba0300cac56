//! `tessera fmt` and `tessera check` against the file system's failures (issue 10): a
//! write that fails or is killed half-way leaves the original file, one bad path does
//! not hide the others, and special files, unreadable paths and symlink loops are named.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tessera")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tessera ARGS` in `dir` with a deadline: a FIFO that is opened hangs, and that
/// must be a failure here rather than a stuck test run.
fn output(mut cmd: Command, dir: &Path) -> Output {
    let mut child = cmd
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tessera runs");
    // Drained while waiting: output larger than a pipe's buffer must not block the child.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("tessera did not finish within 60 s: {}", String::from_utf8_lossy(&stderr.join().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

fn tessera(args: &[&str], dir: &Path) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    output(cmd, dir)
}

/// `tessera ARGS` under `bash`, after `setup` (`ulimit`, `trap`).
fn tessera_in_shell(setup: &str, args: &[&str], dir: &Path) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("{setup}; exec \"$0\" \"$@\"")).arg(bin()).args(args);
    output(cmd, dir)
}

/// `tessera ARGS` as an unprivileged user (permission bits mean nothing to root): as
/// `nobody` through `setpriv` when this test runs as root.
fn tessera_unprivileged(args: &[&str], dir: &Path) -> Output {
    let uid = Command::new("id").arg("-u").output().expect("id runs");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return tessera(args, dir);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", bin()]).args(args);
    output(cmd, dir)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o.stdout)))
}

/// A directory anyone may enter (the unprivileged runs need to).
fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// An unformatted source of over 16 KiB: examples with trailing blanks, repeated.
fn unformatted() -> String {
    let mut src = String::new();
    for name in ["gemm", "flash_attention", "layernorm", "softmax"].repeat(4) {
        let example = std::fs::read_to_string(root().join(format!("examples/{name}.tsr"))).unwrap();
        for line in example.lines() {
            src.push_str(line);
            src.push_str("   \n");
        }
    }
    assert!(src.len() > 16 * 1024, "{}", src.len());
    src
}

fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    names.sort();
    names
}

// ----- fmt ----------------------------------------------------------------------------

#[test]
fn fmt_leaves_the_original_when_the_disk_is_full() {
    // A file-size limit makes the write fail with EFBIG half-way, as a full disk does
    // with ENOSPC. Writing in place used to leave the first 4 KiB of the new text.
    let dir = open_tempdir();
    let src = unformatted();
    std::fs::write(dir.path().join("big.tsr"), &src).unwrap();
    std::fs::write(dir.path().join("a.tsr"), "X  =  1\n").unwrap();
    std::fs::write(dir.path().join("z.tsr"), "Y  =  2\n").unwrap();
    let o = tessera_in_shell("trap '' XFSZ; ulimit -f 4", &["fmt", "a.tsr", "big.tsr", "z.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(std::fs::read_to_string(dir.path().join("big.tsr")).unwrap(), src, "the original is intact");
    assert_eq!(leftovers(dir.path()), Vec::<String>::new(), "the temporary file is removed");
    // The files before and after it are formatted, and the summary names the failure.
    assert_eq!(std::fs::read_to_string(dir.path().join("a.tsr")).unwrap(), "X = 1\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("z.tsr")).unwrap(), "Y = 2\n");
    assert!(text(&o.stdout).contains("2 of 3 files reformatted, 1 not formatted"), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("1 path not formatted:"), "{err}");
    assert!(err.contains("big.tsr: cannot write: File too large") && err.contains("unchanged"), "{err}");
}

#[test]
fn fmt_killed_in_the_middle_of_a_write_leaves_the_original() {
    // Without the trap, SIGXFSZ kills the process in the middle of its write, like a
    // `kill -9` at the wrong moment. Writing in place used to leave a cut-off file.
    let dir = open_tempdir();
    let src = unformatted();
    std::fs::write(dir.path().join("big.tsr"), &src).unwrap();
    let o = tessera_in_shell("ulimit -f 4", &["fmt", "big.tsr"], dir.path());
    assert_eq!(o.status.code(), None, "killed by SIGXFSZ: {}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(dir.path().join("big.tsr")).unwrap(), src, "the original is intact");
    // What a kill leaves is the half-written temporary file, never the source.
    for tmp in leftovers(dir.path()) {
        assert!(tmp.starts_with(".big.tsr."), "{tmp}");
    }
}

#[test]
fn fmt_keeps_permissions_and_symlinks() {
    let dir = open_tempdir();
    let file = dir.path().join("script.tsr");
    std::fs::write(&file, "X  =  1\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink("script.tsr", dir.path().join("link.tsr")).unwrap();
    let o = tessera(&["fmt", "link.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "X = 1\n");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777, 0o751);
    let link = std::fs::symlink_metadata(dir.path().join("link.tsr")).unwrap();
    assert!(link.file_type().is_symlink(), "the link is still a link");
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
}

#[test]
fn fmt_goes_on_past_unreadable_paths_and_lists_them() {
    let dir = open_tempdir();
    std::fs::write(dir.path().join("a.tsr"), "X  =  1\n").unwrap();
    std::fs::write(dir.path().join("secret.tsr"), "Y  =  1\n").unwrap();
    std::fs::set_permissions(dir.path().join("secret.tsr"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let o = tessera_unprivileged(&["fmt", "--check", "secret.tsr", "a.tsr", "missing.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("would reformat a.tsr"), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("2 paths not formatted"), "{err}");
    assert!(err.contains("secret.tsr: cannot read: permission denied"), "{err}");
    assert!(err.contains("missing.tsr: no such file or directory"), "{err}");
}

// ----- check --------------------------------------------------------------------------

/// A directory with a file that has an error, a file and a directory nobody may read.
fn partly_unreadable() -> tempfile::TempDir {
    let dir = open_tempdir();
    std::fs::write(dir.path().join("bad.tsr"), "x = (\n").unwrap();
    std::fs::write(dir.path().join("ok.tsr"), "X = 1\n").unwrap();
    std::fs::write(dir.path().join("secret.tsr"), "X = 1\n").unwrap();
    std::fs::set_permissions(dir.path().join("secret.tsr"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::create_dir(dir.path().join("locked")).unwrap();
    std::fs::write(dir.path().join("locked/inner.tsr"), "X = 1\n").unwrap();
    std::fs::set_permissions(dir.path().join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
    dir
}

#[test]
fn check_reports_what_it_could_read_and_lists_the_rest() {
    let dir = partly_unreadable();
    let o = tessera_unprivileged(&["check", "--format", "json", "."], dir.path());
    // Errors were found (the syntax error and two unreadable paths): exit 1, not 2.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let v = json(&o);
    assert_eq!(v["summary"]["files"], 2, "bad.tsr and ok.tsr were checked: {v}");
    assert_eq!(v["diagnostics"][0]["file"], "bad.tsr");
    assert_eq!(v["summary"]["unreadable"], 2);
    assert_eq!(
        v["errors"],
        serde_json::json!([
            {"path": "locked", "message": "permission denied"},
            {"path": "secret.tsr", "message": "cannot read: permission denied"},
        ])
    );
    // Every format shows them after the diagnostics.
    let concise = tessera_unprivileged(&["check", "--format", "concise", "."], dir.path());
    assert_eq!(
        text(&concise.stdout),
        "bad.tsr:1:5: error[E0102] `(` is never closed\nlocked: error: permission denied\n\
         secret.tsr: error: cannot read: permission denied\n"
    );
    let human = text(&tessera_unprivileged(&["check", "."], dir.path()).stdout);
    assert!(human.contains("secret.tsr: error: cannot read: permission denied"), "{human}");
    assert!(human.ends_with("Found 1 error and 0 warnings in 2 files. 2 paths could not be read.\n"), "{human}");
    let github = text(&tessera_unprivileged(&["check", "--format", "github", "."], dir.path()).stdout);
    assert!(github.contains("::error title=unreadable path,file=locked::permission denied"), "{github}");
    let sarif = tessera_unprivileged(&["check", "--format", "sarif", "."], dir.path());
    let invocation = &json(&sarif)["runs"][0]["invocations"][0];
    assert_eq!(invocation["executionSuccessful"], false);
    assert_eq!(invocation["toolExecutionNotifications"].as_array().unwrap().len(), 2);
}

#[test]
fn check_exits_2_only_when_nothing_could_be_checked() {
    let dir = partly_unreadable();
    let o = tessera_unprivileged(&["check", "--format", "json", "secret.tsr", "locked"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json(&o)["summary"]["unreadable"], 2, "still reported");
    // A clean file and an unreadable one: the unreadable one is an error (exit 1).
    let o = tessera_unprivileged(&["check", "ok.tsr", "secret.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).ends_with("No problems in 1 file. 1 path could not be read.\n"), "{}", text(&o.stdout));
}

#[test]
fn check_names_special_files_instead_of_skipping_or_hanging() {
    let dir = open_tempdir();
    std::fs::write(dir.path().join("ok.tsr"), "X = 1\n").unwrap();
    let fifo = dir.path().join("pipe.tsr");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("sock.tsr")).unwrap();
    let o = tessera(&["check", "--format", "concise", "ok.tsr", "pipe.tsr", "/dev/zero", "sock.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "/dev/zero: error: not a regular file (a character device)\npipe.tsr: error: not a regular file (a FIFO)\n\
         sock.tsr: error: not a regular file (a socket)\n"
    );
    // fmt says the same and formats nothing it cannot.
    let o = tessera(&["fmt", "--check", "pipe.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("pipe.tsr: not a regular file (a FIFO)"), "{}", text(&o.stderr));
}

#[test]
fn check_names_symlink_loops_and_dangling_links() {
    let dir = open_tempdir();
    std::os::unix::fs::symlink("b.tsr", dir.path().join("a.tsr")).unwrap();
    std::os::unix::fs::symlink("a.tsr", dir.path().join("b.tsr")).unwrap();
    std::os::unix::fs::symlink("gone.tsr", dir.path().join("dangling.tsr")).unwrap();
    let o = tessera(&["check", "--format", "concise", "a.tsr", "dangling.tsr", "nothing.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stdout),
        "a.tsr: error: symlink loop (too many levels of symbolic links)\n\
         dangling.tsr: error: dangling symlink (to gone.tsr)\nnothing.tsr: error: no such file or directory\n"
    );
}
