//! `cargo bench --bench explore`: the explorer's three latency budgets (issue 6), measured
//! on ratatui's TestBackend at 160×48 with the real queries behind every frame.
//!
//! - time to first frame for examples/flash_attention.tsr: read the file, a fresh salsa
//!   database, every stage lowered, diagnostics, highlighting, one frame (≤ 200 ms);
//! - re-lower after a schedule change: one BM step in the schedule panel, every stage
//!   through salsa, plus the frame that shows it (≤ 50 ms);
//! - frame time with a 5 000-line PTX listing on screen, scrolling (≤ 16 ms).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_tui::app::{App, Tab};
use tessera_tui::irdoc::{Dialect, IrDoc};
use tessera_tui::keymap::Action;
use tessera_tui::ratatui::backend::TestBackend;
use tessera_tui::ratatui::Terminal;
use tessera_tui::{Options, Stage, Target};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FILE: &str = "examples/flash_attention.tsr";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(what: &str, mut samples: Vec<Duration>, target_ms: f64) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[((samples.len() - 1) as f64 * 0.95).round() as usize];
    let verdict = if ms(p95) <= target_ms { "ok" } else { "OVER" };
    println!(
        "{what:<44} median {:8.2} ms  p95 {:8.2} ms  max {:8.2} ms  (target ≤ {target_ms} ms: {verdict})",
        ms(median),
        ms(p95),
        ms(*samples.last().unwrap())
    );
}

fn draw(term: &mut Terminal<TestBackend>, app: &mut App) {
    term.draw(|f| tessera_tui::ui::draw(f, app)).unwrap();
}

fn options() -> Options {
    Options { file: FILE.into(), kernel: Some("flash_attention".into()), target: Target::Sm90, ..Options::default() }
}

/// A PTX listing of `lines` lines, each mapped to a source line of the kernel: the real
/// target code repeated when the PTX emitter produces it, else text shaped like it.
fn ptx_listing(app: &App, lines: usize) -> IrDoc {
    let real = app.view.doc(Stage::Target).filter(|d| d.dialect == Dialect::Ptx && !d.is_empty());
    let sources: Vec<_> = {
        let tile = app.view.doc(Stage::Tile).expect("flash attention lowers to Tile IR");
        (0..tile.len()).filter_map(|i| tile.source(i)).collect()
    };
    let mut text = String::new();
    let mut map = Vec::new();
    let mut n = 0;
    while n < lines {
        match real {
            Some(doc) => {
                for i in 0..doc.len() {
                    if n == lines {
                        break;
                    }
                    text.push_str(doc.line(i));
                    text.push('\n');
                    if let Some(r) = doc.source(i) {
                        map.push((n as u32, r));
                    }
                    n += 1;
                }
            }
            None => {
                let body = [
                    "\tld.shared.v4.b32 {%r12, %r13, %r14, %r15}, [%r211+1024];",
                    "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r12, %r13, %r14, %r15}, {%r16, %r17}, {%f1, %f2, %f3, %f4};",
                    "\tfma.rn.f32 %f45, %f44, %f12, %f45;",
                    "\tcp.async.cg.shared.global [%r88], [%rd19], 16, %r90;",
                    "\tbar.sync 0;",
                    "\tex2.approx.ftz.f32 %f60, %f59;",
                    "\t@%p3 bra $L__BB0_4;",
                    "$L__BB0_3:",
                ];
                text.push_str(body[n % body.len()]);
                text.push('\n');
                map.push((n as u32, sources[n % sources.len()]));
                n += 1;
            }
        }
    }
    IrDoc::from_parts(text, &map, Dialect::Ptx)
}

fn main() {
    tessera_cli::use_mimalloc_for_tree_sitter();
    if !Path::new(FILE).is_file() {
        eprintln!("run from the repository root ({FILE} not found)");
        std::process::exit(2);
    }

    // 1. Time to first frame, cold: a new database and workspace each sample.
    let mut first = Vec::new();
    for _ in 0..25 {
        let t = Instant::now();
        let mut app = App::open(&options()).expect("opens");
        let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
        draw(&mut term, &mut app);
        first.push(t.elapsed());
    }
    report("time to first frame (flash attention)", first, 200.0);

    // 2. Re-lower after a schedule change. Cold: the first time a configuration is
    // seen (a fresh app per sample, the change timed); warm: a configuration salsa has
    // memoized already (stepping back and forth).
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..25 {
        let mut app = App::open(&options()).expect("opens");
        let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
        app.set_tab(Tab::Schedule);
        draw(&mut term, &mut app);
        let bm = app.schedule_rows().iter().position(|r| r.key == "BM").expect("BM row");
        app.sched.cursor = bm;
        let t = Instant::now();
        app.apply(Action::ValueNext);
        draw(&mut term, &mut app);
        cold.push(t.elapsed());
        assert!(app.view.lowering.is_some());
        for _ in 0..4 {
            let t = Instant::now();
            app.apply(Action::ValuePrev);
            draw(&mut term, &mut app);
            warm.push(t.elapsed());
            app.apply(Action::ValueNext);
            draw(&mut term, &mut app);
        }
    }
    report("re-lower after a BM change (new config)", cold, 50.0);
    report("re-lower after a BM change (memoized config)", warm, 50.0);

    // 3. Frames with a 5 000-line PTX listing on screen.
    let mut app = App::open(&options()).expect("opens");
    let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
    draw(&mut term, &mut app);
    let doc = Arc::new(ptx_listing(&app, 5000));
    let real = app.view.doc(Stage::Target).is_some_and(|d| d.dialect == Dialect::Ptx);
    println!(
        "PTX listing: {} lines ({})",
        doc.len(),
        if real { "the emitter's, repeated" } else { "synthetic: no PTX emitter yet" }
    );
    if let Some(l) = app.view.lowering.as_mut() {
        l.stages[3] = Ok(doc);
    }
    while app.stage != Stage::Target {
        app.apply(Action::StageNext);
    }
    let mut frames = Vec::new();
    for i in 0..300 {
        // Page down through the listing, then jump back: every frame shows new lines.
        app.apply(if i % 60 == 59 { Action::Top } else { Action::PageDown });
        let t = Instant::now();
        draw(&mut term, &mut app);
        frames.push(t.elapsed());
    }
    report("frame, 5 000-line PTX, paging", frames, 16.0);
    let t = Instant::now();
    app.apply(Action::ToggleDiff);
    draw(&mut term, &mut app);
    println!("{:<44} {:8.2} ms (once; cached after)", "first diff Tile → 5 000-line PTX", ms(t.elapsed()));
    let mut diff_frames = Vec::new();
    for _ in 0..100 {
        app.apply(Action::PageDown);
        let t = Instant::now();
        draw(&mut term, &mut app);
        diff_frames.push(t.elapsed());
    }
    report("frame, diff view of it, paging", diff_frames, 16.0);
}
