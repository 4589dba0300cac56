//! The test corpus (`tests/corpus`) through the real binary: every file meets the
//! expectations written in it on both GPU targets, and every function of the valid corpus
//! lowers through all four stages.
//!
//! Expectations, in the files themselves:
//! - a trailing comment `# <- CODE [CODE...]`: a diagnostic CODE starts on that line;
//! - a header comment `# expect: CODE@LINE [CODE@LINE...]`: the same, by line number;
//! - `# <-? CODE`: CODE may start on that line (allowed, not required).
//!
//! A file with no expectation must produce no error. For the others, the set of
//! (error code, line) equals the expected errors and every expected warning is present;
//! other warnings are reported, not failed. `tessera check` must exit 1 exactly when it
//! reports an error, 0 otherwise, and print JSON.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The corpus holds at least this many files (it only grows).
const MIN_FILES: usize = 41;

fn corpus() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    assert!(
        dir.join("valid").is_dir() && dir.join("invalid").is_dir(),
        "the test corpus is missing at {}",
        dir.display()
    );
    dir
}

/// Every `.tsr` file under `dir`, recursively, sorted.
fn tsr_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tsr_files(&path));
        } else if path.extension().is_some_and(|e| e == "tsr") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// (code, 1-based line).
type Expect = BTreeSet<(String, u64)>;

/// A diagnostic code: `E` or `W` and four digits.
fn code_at(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    (b.len() >= 5 && matches!(b[0], b'E' | b'W') && b[1..5].iter().all(u8::is_ascii_digit)).then(|| &s[..5])
}

/// The codes of a `# <- CODE...` or `# <-? CODE...` marker in `line`: (optional, codes).
fn marker(line: &str) -> Option<(bool, Vec<&str>)> {
    for (at, _) in line.match_indices('#') {
        let Some(rest) = line[at + 1..].trim_start().strip_prefix("<-") else { continue };
        let (optional, rest) = match rest.strip_prefix('?') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let mut rest = rest.trim_start();
        let mut codes = Vec::new();
        while let Some(code) = code_at(rest) {
            codes.push(code);
            rest = rest[5..].trim_start();
        }
        if !codes.is_empty() {
            return Some((optional, codes));
        }
    }
    None
}

/// The (required, optional) diagnostics a file's comments expect.
fn expectations(text: &str) -> (Expect, Expect) {
    let (mut required, mut optional) = (Expect::new(), Expect::new());
    for (n, line) in text.lines().enumerate() {
        let n = n as u64 + 1;
        if let Some((is_optional, codes)) = marker(line) {
            let set = if is_optional { &mut optional } else { &mut required };
            set.extend(codes.into_iter().map(|c| (c.to_string(), n)));
        }
        let header = line.trim().strip_prefix('#').map(str::trim_start).and_then(|h| h.strip_prefix("expect:"));
        for token in header.into_iter().flat_map(str::split_whitespace) {
            if let Some((code, at)) = token.split_once('@') {
                let at = at.parse().unwrap_or_else(|_| panic!("bad `# expect:` token `{token}`"));
                required.insert((code.to_string(), at));
            }
        }
    }
    (required, optional)
}

/// `tessera check --format json --target TARGET FILE` with a one-minute limit: the
/// (errors, warnings) it reports, or why the run itself is wrong.
fn check(target: &str, file: &Path) -> Result<(Expect, Expect), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["check", "--format", "json", "--target", target])
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tessera runs");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            pipe.read_to_string(&mut s).map(|_| s).unwrap_or_default()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            return Err("no answer within 60 s".to_string());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let code = status.code();
    if !matches!(code, Some(0 | 1)) {
        let out = if stderr.trim().is_empty() { &stdout } else { &stderr };
        return Err(format!("exit {code:?}: {}", out.trim().chars().take(300).collect::<String>()));
    }
    let data: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|e| format!("output is not JSON ({e}): {:?}", stdout.chars().take(200).collect::<String>()))?;
    let diagnostics = data["diagnostics"].as_array().ok_or("the JSON has no `diagnostics` array")?;
    let (mut errors, mut warnings) = (Expect::new(), Expect::new());
    for d in diagnostics {
        let (Some(code), Some(line)) = (d["code"].as_str(), d["range"]["start"]["line"].as_u64()) else {
            return Err(format!("a diagnostic without code or start line: {d}"));
        };
        let set = if d["severity"] == "error" { &mut errors } else { &mut warnings };
        set.insert((code.to_string(), line));
    }
    let want = if errors.is_empty() { 0 } else { 1 };
    if code != Some(want) {
        return Err(format!("exit {code:?} but errors present={}", want == 1));
    }
    Ok((errors, warnings))
}

fn show(set: &Expect) -> String {
    let mut v: Vec<_> = set.iter().collect();
    v.sort_by_key(|(c, l)| (*l, c.clone()));
    v.iter().map(|(c, l)| format!("{c}@{l}")).collect::<Vec<_>>().join(" ")
}

/// One line per file (`ok` or `FAIL` and why), then `N passed, N failed`.
fn corpus_report(target: &str, files: &[PathBuf]) -> (usize, usize, String) {
    let (mut passed, mut failed) = (0, 0);
    let mut report = String::new();
    for file in files {
        let shown = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(file).display();
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
        let (expected, optional) = expectations(&text);
        let (errors, warnings) = match check(target, file) {
            Ok(got) => got,
            Err(why) => {
                failed += 1;
                report += &format!("FAIL {shown}: {why}\n");
                continue;
            }
        };
        let (exp_e, exp_w): (Expect, Expect) = expected.into_iter().partition(|(c, _)| c.starts_with('E'));
        let missing: Expect = exp_e.difference(&errors).chain(exp_w.difference(&warnings)).cloned().collect();
        let extra: Expect = errors.difference(&exp_e).filter(|x| !optional.contains(*x)).cloned().collect();
        if !missing.is_empty() || !extra.is_empty() {
            failed += 1;
            report += &format!("FAIL {shown}: missing [{}] unexpected [{}]\n", show(&missing), show(&extra));
        } else {
            passed += 1;
            let other: Expect = warnings.difference(&exp_w).cloned().collect();
            // By code, then line (missing and unexpected ones go by line).
            let other: Vec<String> = other.iter().map(|(c, l)| format!("{c}@{l}")).collect();
            let note = if other.is_empty() { String::new() } else { format!(" (other warnings: {})", other.join(" ")) };
            report += &format!("ok   {shown}{note}\n");
        }
    }
    report += &format!("{passed} passed, {failed} failed\n");
    (passed, failed, report)
}

#[test]
fn contract_corpus_passes() {
    let files = tsr_files(&corpus());
    assert!(files.len() >= MIN_FILES, "only {} corpus files: did the corpus move?", files.len());
    let mut failures = Vec::new();
    for target in ["sm_90", "sm_80"] {
        let (passed, failed, report) = corpus_report(target, &files);
        println!("{target}:\n{report}");
        assert_eq!(passed + failed, files.len());
        if failed > 0 {
            failures.push(format!("{target}: {passed} passed, {failed} failed:\n{report}"));
        }
    }
    assert!(failures.is_empty(), "corpus failures:\n{}", failures.join("\n"));
}

#[test]
fn expectations_are_read_like_the_markers_say() {
    let text = "# expect: E0301@3 W0404@4\nx = 1  # <- E0200 E0201\ny = 2  # <-? E0400\n# a comment # <- W0600\n";
    let (required, optional) = expectations(text);
    let set = |v: &[(&str, u64)]| v.iter().map(|(c, l)| (c.to_string(), *l)).collect::<Expect>();
    assert_eq!(required, set(&[("E0301", 3), ("W0404", 4), ("E0200", 2), ("E0201", 2), ("W0600", 4)]));
    assert_eq!(optional, set(&[("E0400", 3)]));
    assert_eq!(marker("x  # <-"), None);
    assert_eq!(marker("x  # <- e0100"), None);
}

/// Every `def` of a file (kernels, graph functions and helpers).
fn functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("def "))
        .filter_map(|rest| rest.split('(').next())
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn every_valid_function_lowers_through_all_stages() {
    let files = tsr_files(&corpus().join("valid"));
    let mut failures = Vec::new();
    let mut lowered = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for name in functions(&text) {
            for target in ["sm_90", "sm_80", "cpu"] {
                let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                    .args(["lower"])
                    .arg(&file)
                    .args(["--kernel", &name, "--stage", "all", "--target", target])
                    .output()
                    .expect("tessera runs");
                let stderr = String::from_utf8_lossy(&out.stderr);
                if stderr.contains("is a helper") {
                    continue;
                }
                lowered += 1;
                if !out.status.success() {
                    failures.push(format!("{} {name} ({target}): {stderr}", file.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(lowered >= 3 * 13, "only {lowered} lowerings: did the corpus move?");
}
