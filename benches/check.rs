//! `cargo bench --bench check`: cold `tessera check` throughput on a generated
//! 20 000-line file (one thread), and the re-check time after a one-line edit.
//! Targets (issue 2): ≥ 200 000 lines/s cold, ≤ 5 ms incremental.

use std::time::{Duration, Instant};

use salsa::Setter;
use tessera_frontend::diagnostics::{Diagnostic, Severity};
use tessera_frontend::{Database, SourceFile};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    tessera_cli::use_mimalloc_for_tree_sitter();
    let text = tessera_frontend::synthetic::module_with_lines(20_000);
    let lines = text.lines().count();
    println!("workload: {lines} lines, {} KiB, {} functions", text.len() / 1024, text.matches("\ndef ").count());

    // Tree-sitter alone over the whole text, for reference: the floor under any
    // frontend that parses with this grammar.
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&tessera_frontend::syntax::lower::language()).unwrap();
    let mut ts_runs = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let tree = parser.parse(&text, None).unwrap();
        ts_runs.push(t.elapsed());
        drop(tree);
    }
    ts_runs.sort();

    println!(
        "tree-sitter only:    median {:7.1} ms            -> {:>8.0} lines/s (the floor of any frontend on this grammar)",
        ms(percentile(&ts_runs, 0.5)),
        lines as f64 / percentile(&ts_runs, 0.5).as_secs_f64()
    );
    measure("tessera check, frontend only", &text, lines, |db, file| {
        tessera_frontend::check::file_diagnostics(db, file).clone()
    });
    measure("tessera check, sm_90 (frontend + target lints, the default)", &text, lines, |db, file| {
        tessera_passes::file_diagnostics(db, file, tessera_passes::Target::Sm90)
    });
    scale();
}

/// Issue 10's scale cases: undefined names and the formatter on a large file. Linear
/// work shows as a 5k -> 20k (4x the input) ratio near 4; quadratic work as near 16.
fn scale() {
    println!("-- scale: undefined names (frontend diagnostics, cold)");
    type Shape = (&'static str, fn(usize) -> String);
    let shapes: [Shape; 3] = [
        ("module constants `cI = uI`", |n| (0..n).map(|i| format!("c{i} = u{i}\n")).collect()),
        ("one function, `vI = uI`", |n| {
            std::iter::once("def f():\n".to_string()).chain((0..n).map(|i| format!("    v{i} = u{i}\n"))).collect()
        }),
        ("one function, `x = uI`", |n| {
            std::iter::once("def f():\n".to_string()).chain((0..n).map(|i| format!("    x = u{i}\n"))).collect()
        }),
    ];
    for (label, make) in shapes {
        let time = |n: usize| {
            let db = Database::default();
            let file = SourceFile::new(&db, "names.tsr".into(), make(n), None);
            let t = Instant::now();
            let errors = tessera_frontend::check::file_diagnostics(&db, file).len();
            assert_eq!(errors, n, "{label}: one diagnostic per undefined name");
            t.elapsed()
        };
        let (small, large) = (time(5_000), time(20_000));
        println!(
            "{label:28} 5 000: {:8.1} ms  20 000: {:8.1} ms  ratio {:4.1}",
            ms(small),
            ms(large),
            large.as_secs_f64() / small.as_secs_f64()
        );
    }
    println!("-- scale: tessera fmt's formatter (the examples repeated)");
    let unit = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsr"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut last = None;
    for mb in [4usize, 16] {
        let text = unit.repeat((mb << 20) / unit.len() + 1);
        let t = Instant::now();
        tessera_frontend::format::format_source(&text).expect("the examples format");
        let elapsed = t.elapsed();
        let ratio = last.map_or(String::new(), |(m, d): (usize, Duration)| {
            format!("  ratio to {m} MB {:4.1} for {:.0}x the input", elapsed.as_secs_f64() / d.as_secs_f64(), mb / m)
        });
        println!(
            "{mb:3} MB: {:8.1} ms  -> {:6.1} MB/s{ratio}",
            ms(elapsed),
            text.len() as f64 / 1e6 / elapsed.as_secs_f64()
        );
        last = Some((mb, elapsed));
    }
}

fn measure(label: &str, text: &str, lines: usize, check: impl Fn(&Database, SourceFile) -> Vec<Diagnostic>) {
    println!("-- {label}");
    // Cold: a fresh database each time (what `tessera check` does per process).
    let mut cold = Vec::new();
    let mut warnings = 0;
    for _ in 0..7 {
        let db = Database::default();
        let t = Instant::now();
        let file = SourceFile::new(&db, "bench.tsr".into(), text.to_string(), None);
        let diagnostics = check(&db, file);
        cold.push(t.elapsed());
        // The examples it repeats carry their pinned warnings (pruned autotune
        // candidates, occupancy); an error would mean the workload itself is broken.
        let error = diagnostics.iter().find(|d| d.severity == Severity::Error);
        assert!(error.is_none(), "the generated module has an error: {:?}", error.map(|d| (d.code, &d.message)));
        warnings = diagnostics.len();
    }
    cold.sort();
    let median = percentile(&cold, 0.5);
    println!(
        "cold check:          median {:7.1} ms  min {:7.1} ms  -> {:>8.0} lines/s (target >= 200000)",
        ms(median),
        ms(cold[0]),
        lines as f64 / median.as_secs_f64()
    );

    // Incremental: one-line edits inside an autotuned kernel's body, re-check after each.
    let mut db = Database::default();
    let file = SourceFile::new(&db, "bench.tsr".into(), text.to_string(), None);
    check(&db, file);
    let anchor =
        text.find("    ctx = tile.context()\n").expect("a kernel body line") + "    ctx = tile.context()\n".len();
    let mut edits = Vec::new();
    for i in 0..200 {
        let mut edited = text.to_string();
        edited.insert_str(anchor, &format!("    scratch = {i} + 1\n"));
        let t = Instant::now();
        file.set_text(&mut db).to(edited);
        let diagnostics = check(&db, file);
        edits.push(t.elapsed());
        assert_eq!(diagnostics.len(), warnings, "a body edit changes no diagnostic");
    }
    edits.sort();
    println!(
        "incremental check:   median {:7.2} ms  p95 {:7.2} ms  max {:7.2} ms over {} one-line edits (target <= 5 ms)",
        ms(percentile(&edits, 0.5)),
        ms(percentile(&edits, 0.95)),
        ms(*edits.last().unwrap()),
        edits.len()
    );
}
