//! The formatter on a large file (issue 10: 50 MB took 258 s and 8 GB). It formats one
//! top-level statement at a time, so a file of many copies of the examples formats to
//! the same copies, each formatted as it would be alone. `cargo bench --bench check`
//! prints its throughput; the figure for 50 MB is in the closing note.

use std::time::{Duration, Instant};

use tessera_frontend::format::format_source;

fn examples() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "tsr"));
    paths.sort();
    paths.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect::<Vec<_>>().join("\n\n")
}

/// The peak resident memory of this process (this file holds one test, so it is the
/// test's), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

#[test]
fn a_large_file_formats_like_its_parts() {
    // The examples with trailing blanks and tight operators: every line changes.
    let unit: String = examples().lines().map(|l| format!("{}  \n", l.replace(" = ", "="))).collect();
    let once = format_source(&unit).expect("the examples format");
    assert_eq!(format_source(&once).as_deref(), Ok(once.as_str()), "idempotent");
    let copies = (8 << 20) / unit.len() + 1;
    let big = unit.repeat(copies);
    let t = Instant::now();
    let formatted = format_source(&big).expect("the large file formats");
    let elapsed = t.elapsed();
    // Between copies: the two blank lines around a top-level definition.
    let expected = vec![once.as_str(); copies].join("\n\n");
    assert!(formatted == expected, "{} MB: not the copies of the formatted unit", big.len() >> 20);
    // It used to be quadratic (about 5 minutes and 1.5 GB for these 8 MB in a debug
    // build); now about 10 s, and memory beyond the input and output stays small.
    let mb = big.len() >> 20;
    eprintln!("formatted {mb} MB in {elapsed:?}, peak RSS {:?} MB", peak_rss().map(|b| b >> 20));
    assert!(elapsed < Duration::from_secs(90), "{mb} MB took {elapsed:?}");
    if let Some(peak) = peak_rss() {
        assert!(peak < 40 * big.len() as u64, "{mb} MB peaked at {} MB", peak >> 20);
    }
}
