//! The explorer drawn on ratatui's TestBackend: a named snapshot of every view at 80×24
//! and 160×48, and key-scripted flows that assert on the screen the way a user reads it.
//! `INSTA_UPDATE=always cargo test -p tessera-tui` refreshes the snapshots.

use std::path::Path;
use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tessera_tui::app::{App, Pane, Tab};
use tessera_tui::runner::Correctness;
use tessera_tui::workspace::Workspace;
use tessera_tui::{Options, Stage, Target};

const FIXTURE: &str = include_str!("fixtures/explore.tsr");
const FIXTURE_PATH: &str = "tui/tests/fixtures/explore.tsr";

struct Ui {
    app: App,
    term: Terminal<TestBackend>,
}

impl Ui {
    fn new(kernel: Option<&str>, w: u16, h: u16) -> Ui {
        Ui::with_text(FIXTURE, kernel, w, h)
    }

    fn with_text(text: &str, kernel: Option<&str>, w: u16, h: u16) -> Ui {
        let ws = Workspace::from_text(Path::new(FIXTURE_PATH), text.to_string());
        let options = Options { kernel: kernel.map(str::to_string), target: Target::Sm90, ..Options::default() };
        let app = App::with_workspace(ws, &options).expect("the fixture opens");
        let mut ui = Ui { app, term: Terminal::new(TestBackend::new(w, h)).unwrap() };
        ui.draw();
        ui
    }

    fn draw(&mut self) {
        let app = &mut self.app;
        self.term.draw(|f| tessera_tui::ui::draw(f, app)).unwrap();
    }

    /// Presses keys the way the event loop does (a draw after each, so page sizes and
    /// mouse geometry are those of the screen).
    fn keys(&mut self, keys: &[&str]) {
        for k in keys {
            let (code, mods) = match *k {
                "Enter" => (KeyCode::Enter, KeyModifiers::NONE),
                "Esc" => (KeyCode::Esc, KeyModifiers::NONE),
                "Tab" => (KeyCode::Tab, KeyModifiers::NONE),
                "BackTab" => (KeyCode::BackTab, KeyModifiers::SHIFT),
                "Down" => (KeyCode::Down, KeyModifiers::NONE),
                "Up" => (KeyCode::Up, KeyModifiers::NONE),
                "Bksp" => (KeyCode::Backspace, KeyModifiers::NONE),
                "C-d" => (KeyCode::Char('d'), KeyModifiers::CONTROL),
                s if s.chars().count() == 1 => {
                    let c = s.chars().next().unwrap();
                    let m = if c.is_ascii_uppercase() { KeyModifiers::SHIFT } else { KeyModifiers::NONE };
                    (KeyCode::Char(c), m)
                }
                other => panic!("unknown key {other}"),
            };
            self.app.handle_event(Event::Key(KeyEvent::new(code, mods)));
            self.draw();
        }
    }

    fn type_text(&mut self, text: &str) {
        for c in text.chars() {
            self.app.handle_event(Event::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)));
        }
        self.draw();
    }

    fn click(&mut self, col: u16, row: u16) {
        let m = MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column: col,
            row,
            modifiers: KeyModifiers::NONE,
        };
        self.app.handle_event(Event::Mouse(m));
        self.draw();
    }

    fn screen(&self) -> String {
        let buf = self.term.backend().buffer();
        let mut out = String::new();
        for y in 0..buf.area.height {
            let mut line = String::new();
            for x in 0..buf.area.width {
                line.push_str(buf[(x, y)].symbol());
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    fn row_of(&self, needle: &str) -> Option<u16> {
        self.screen().lines().position(|l| l.contains(needle)).map(|r| r as u16)
    }

    /// Waits for the run in progress, ticking like the event loop.
    fn wait_for_run(&mut self) {
        for _ in 0..6000 {
            self.app.tick();
            if self.app.run.batch.is_none() {
                self.draw();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the run did not finish in 60 s");
    }
}

/// Timings change from run to run; snapshots show where they are, not their value.
fn snapshot(name: &str, screen: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r" +\d+(\.\d+)? m?s\b", " [t]");
    settings.add_filter(r"\d+(\.\d+)? m?s\b", "[t]");
    settings.add_filter(r"[⠋⠙⠹⠸⠼⠴⠦⠧]", "⠿");
    settings.bind(|| insta::assert_snapshot!(name, screen));
}

fn both_sizes(name: &str, setup: impl Fn(&mut Ui)) {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut ui = Ui::new(Some("gemm"), w, h);
        setup(&mut ui);
        ui.draw();
        snapshot(&format!("{name}_{w}x{h}"), &ui.screen());
    }
}

// ----- snapshots of each view -----

#[test]
fn view_explore() {
    both_sizes("explore", |ui| ui.keys(&["]", "]"]));
}

#[test]
fn view_explore_diff() {
    both_sizes("explore_diff", |ui| ui.keys(&["]", "d"]));
}

#[test]
fn view_target_stage() {
    both_sizes("target_stage", |ui| ui.keys(&["]", "]", "]"]));
}

#[test]
fn view_passes() {
    both_sizes("passes", |ui| ui.keys(&["2", "Down"]));
}

#[test]
fn view_lints() {
    both_sizes("lints", |ui| ui.keys(&["3"]));
}

#[test]
fn view_schedule() {
    both_sizes("schedule", |ui| ui.keys(&["4", "]"]));
}

#[test]
fn view_run() {
    both_sizes("run", |ui| {
        ui.keys(&["5", "r"]);
        ui.wait_for_run();
    });
}

#[test]
fn view_help() {
    both_sizes("help", |ui| ui.keys(&["?"]));
}

#[test]
fn view_picker() {
    both_sizes("picker", |ui| ui.keys(&["p"]));
}

#[test]
fn view_graph_function() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut ui = Ui::new(Some("mlp"), w, h);
        ui.draw();
        snapshot(&format!("graph_function_{w}x{h}"), &ui.screen());
    }
}

/// The Mesh tab of a sharded graph function (the corpus's Megatron MLP): its mesh, each
/// parameter's layout with its global and per-device shapes, and the one all-reduce with
/// its bytes and estimated time at the dims given.
#[test]
fn view_mesh() {
    const SHARDED: &str = include_str!("../../tests/corpus/valid/megatron_mlp_sharded.tsr");
    for (w, h) in [(80, 24), (160, 48)] {
        let ws = Workspace::from_text(Path::new("megatron_mlp_sharded.tsr"), SHARDED.to_string());
        let mut options = Options { kernel: Some("mlp".into()), target: Target::Sm90, ..Options::default() };
        options.dims = vec![("B".into(), "16".into()), ("D".into(), "32".into()), ("F".into(), "64".into())];
        let app = App::with_workspace(ws, &options).expect("the file opens");
        let mut ui = Ui { app, term: Terminal::new(TestBackend::new(w, h)).unwrap() };
        ui.keys(&["6"]);
        let screen = ui.screen();
        assert!(screen.contains("mesh: 8 devices (dp=4, tp=2)"), "{screen}");
        assert!(screen.contains("all_reduce over tp"), "{screen}");
        snapshot(&format!("mesh_{w}x{h}"), &screen);
    }
    // Not sharded: the tab says why it is empty.
    let mut ui = Ui::new(Some("mlp"), 80, 24);
    ui.keys(&["6"]);
    assert!(ui.screen().contains("is not a sharded graph function"), "{}", ui.screen());
}

// ----- key-scripted flows -----

#[test]
fn pick_kernel_step_stages_diff_change_bm_and_run() {
    let mut ui = Ui::new(None, 120, 36);
    // The first kernel of the file opens; the picker lists every function.
    assert_eq!(ui.app.kernel.as_deref(), Some("gemm"));
    ui.keys(&["p"]);
    let s = ui.screen();
    for name in ["gemm", "vector_add", "twice", "mlp"] {
        assert!(s.contains(name), "picker lists {name}:\n{s}");
    }
    ui.type_text("vec");
    assert!(!ui.screen().contains("gemm  "), "filtering hides gemm");
    ui.keys(&["Enter"]);
    assert_eq!(ui.app.kernel.as_deref(), Some("vector_add"));
    ui.keys(&["p"]);
    ui.type_text("gemm");
    ui.keys(&["Enter"]);
    assert_eq!(ui.app.kernel.as_deref(), Some("gemm"));

    // Graph IR keeps the schedule symbolic; Schedule IR specializes it.
    let s = ui.screen();
    assert!(s.contains("Graph IR"), "{s}");
    assert!(s.contains("sched.param"), "Graph IR reads schedule keys through sched.param:\n{s}");
    ui.keys(&["]"]);
    let s = ui.screen();
    assert!(s.contains("Schedule IR"), "{s}");
    assert!(s.contains("64x32xbf16"), "Schedule IR has BMxBK = 64x32 tiles:\n{s}");
    ui.keys(&["]"]);
    assert!(ui.screen().contains("Tile IR"));
    assert_eq!(ui.app.stage, Stage::Tile);

    // The diff between Schedule and Tile IR: counts in the title, +/- lines.
    ui.keys(&["d"]);
    let s = ui.screen();
    assert!(s.contains("diff vs Schedule: +"), "{s}");
    assert!(s.lines().any(|l| l.contains("│") && l.contains(" +")), "inserted lines are marked:\n{s}");
    ui.keys(&["d"]);

    // Change BM from the schedule panel: every stage re-lowers at once.
    ui.keys(&["4"]);
    let rows = ui.app.schedule_rows();
    let bm = rows.iter().position(|r| r.key == "BM").expect("a BM row");
    for _ in 0..bm {
        ui.keys(&["j"]);
    }
    ui.keys(&["l"]);
    let s = ui.screen();
    assert!(s.contains("BM=128"), "status bar shows the new BM:\n{s}");
    assert!(s.contains("128x32xbf16") || s.contains("128x"), "Tile IR re-lowered with BM=128:\n{s}");
    let tile = ui.app.view.doc(Stage::Tile).expect("tile IR").text().to_string();
    assert!(tile.contains("128x"), "{tile}");
    let sched = ui.app.view.doc(Stage::Sched).expect("sched IR").text().to_string();
    assert!(sched.contains("BM=128"), "the Schedule IR's config attribute has BM=128");

    // An invalid value shows E0701 and the kernel keeps its last valid BM.
    ui.keys(&["e", "Bksp", "Bksp", "Bksp"]);
    ui.type_text("100");
    assert!(ui.screen().contains("E0701"), "typing an invalid value shows the diagnostic:\n{}", ui.screen());
    ui.keys(&["Enter"]);
    let s = ui.screen();
    assert!(s.contains("100✗"), "{s}");
    assert!(s.contains("neither a power of two nor a multiple of 16"), "{s}");
    assert!(s.contains("BM=128"), "lowering keeps BM=128:\n{s}");
    ui.keys(&["Bksp"]);
    assert!(ui.screen().contains("BM=64"), "Backspace returns to the kernel's BM");

    // Run on the reference interpreter: a progress indicator, then the result.
    ui.keys(&["5", "r"]);
    let s = ui.screen();
    assert!(s.contains("running") || ui.app.run.batch.is_none(), "{s}");
    ui.wait_for_run();
    let s = ui.screen();
    // The interpreter on sm_90 runs the GPU lowering and checks it against the CPU
    // lowering (the reference).
    assert!(s.contains("matches the reference"), "{s}");
    assert!(s.contains(" ms") || s.contains(" s "), "a time is shown:\n{s}");
    assert_eq!(ui.app.run.results.len(), 1);
    match &ui.app.run.results[0].outcome {
        Some(Ok(o)) => assert!(matches!(o.correctness, Correctness::Checked { passed: true, .. }), "{o:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn autotune_runs_every_configuration_and_charts_them() {
    let mut ui = Ui::new(Some("vector_add"), 100, 30);
    ui.keys(&["5", "a"]);
    assert!(ui.app.run.batch.is_some());
    ui.wait_for_run();
    assert_eq!(ui.app.run.results.len(), 2, "BLOCK=[512, 1024] gives two configurations");
    let s = ui.screen();
    assert!(s.contains("BLOCK512") && s.contains("BLOCK1024"), "the chart labels both:\n{s}");
    assert!(s.contains('★'), "the best is starred:\n{s}");
    assert!(s.contains("autotune done: 2 configurations; best"), "{s}");
    // Results are kept per configuration: Enter adopts a row's configuration.
    ui.keys(&["j", "Enter"]);
    assert!(ui.screen().contains("using"), "{}", ui.screen());
}

#[test]
fn autotune_shows_pruned_configurations() {
    // small_dot's space has BK=8, not a multiple of 16 for bf16 tensor cores: the tuner
    // prunes it (W0702's rule) and the table says why.
    let mut ui = Ui::new(Some("small_dot"), 120, 40);
    ui.keys(&["5", "a"]);
    let pruned: Vec<String> = ui
        .app
        .run
        .results
        .iter()
        .filter_map(|r| match &r.outcome {
            Some(Err(e)) if e.starts_with("pruned") => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    assert!(pruned[0].contains("tensor-core shape") && pruned[0].contains("multiple of 16"), "{pruned:?}");
    assert_eq!(ui.app.run.batch.as_ref().expect("the survivor runs").jobs.len(), 1);
    ui.wait_for_run();
    let s = ui.screen();
    assert!(s.contains("✗ pruned"), "the pruned configuration has a row:\n{s}");
    assert!(s.contains("autotune done: 1 configurations; best"), "{s}");
}

#[test]
fn kernel_auto_is_tuned_over_its_default_space() {
    // An f32 copy reading only ctx.BM: the default space on sm_90 is BM {64, 128} x
    // warps {4, 8} x stages {2, 3, 4}.
    let text = "from tessera import *\n\n@kernel.auto\ndef copy(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32]):\n    \
                ctx = tile.context()\n    for i0 in tile.parallel(0, N, ctx.BM):\n        \
                y[i0:i0 + ctx.BM] = tile.load(x[i0:i0 + ctx.BM])\n";
    let mut ui = Ui::with_text(text, Some("copy"), 120, 40);
    ui.keys(&["5", "a"]);
    assert_eq!(ui.app.run.batch.as_ref().expect("the default space runs").jobs.len(), 12);
    ui.keys(&["x"]);
    ui.wait_for_run();
}

#[test]
fn autotune_can_be_cancelled() {
    let mut ui = Ui::new(Some("gemm"), 120, 40);
    ui.keys(&["5", "a"]);
    let total = ui.app.run.batch.as_ref().expect("the survivors run").jobs.len();
    assert!(total > 2, "gemm's space has 32 configurations");
    ui.keys(&["x"]);
    ui.wait_for_run();
    let ran = ui.app.run.results.iter().filter(|r| matches!(r.outcome, Some(Ok(_)))).count();
    assert!(ran < total, "cancelling stops before every survivor ran ({ran} of {total})");
    assert!(ui.screen().contains("autotune cancelled"), "{}", ui.screen());
}

#[test]
fn source_and_ir_cursors_follow_each_other() {
    let mut ui = Ui::new(Some("gemm"), 120, 40);
    ui.keys(&["]"]);
    // Put the IR cursor on the first tile.mma op: the source cursor jumps to its line.
    let doc = ui.app.view.doc(Stage::Sched).unwrap().clone();
    let dot = (0..doc.len()).find(|&i| doc.code(i).contains("tile.dot")).expect("a dot in Schedule IR");
    ui.keys(&["g"]);
    for _ in 0..dot {
        ui.keys(&["j"]);
    }
    assert_eq!(ui.app.ir.cursor, dot);
    let mma_line = FIXTURE.lines().position(|l| l.contains("tile.mma")).unwrap();
    assert_eq!(ui.app.src.cursor, mma_line, "the source follows the IR cursor");
    // Step to Tile IR: the cursor stays on the op from the same source.
    ui.keys(&["]"]);
    let tile = ui.app.view.doc(Stage::Tile).unwrap().clone();
    let range = tile.source(ui.app.ir.cursor).expect("the op keeps a location");
    assert_eq!(ui.app.ws.line_index().line_of(range.start) as usize, mma_line);
    // From the source: Tab to it, move up to the cp_async line, the IR follows.
    ui.keys(&["BackTab"]);
    assert_eq!(ui.app.focus, Pane::Source);
    let cp_line = FIXTURE.lines().position(|l| l.contains("tile.cp_async(a_s")).unwrap();
    while ui.app.src.cursor > cp_line {
        ui.keys(&["k"]);
    }
    assert!(!ui.app.linked_ir.is_empty(), "cp_async produces Tile IR");
    let first = ui.app.linked_ir[0];
    let r = tile.source(ui.app.ir.cursor).unwrap();
    assert_eq!(ui.app.ws.line_index().line_of(r.start) as usize, cp_line, "IR cursor on line {first}");
    // n cycles through the ops of that line.
    let before = ui.app.ir.cursor;
    ui.keys(&["n"]);
    if ui.app.linked_ir.len() > 1 {
        assert_ne!(ui.app.ir.cursor, before);
    }
}

#[test]
fn passes_hide_those_that_change_nothing() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["2"]);
    let total = ui.app.passes().passes.len();
    assert!(total >= 4, "graph lowering, schedule and tile passes, then codegen");
    let s = ui.screen();
    let first = ui.app.passes().passes[0].pass.clone();
    let second = ui.app.passes().passes[1].pass.clone();
    assert!(s.contains(&first) && s.contains(&second), "{s}");
    ui.keys(&["Down", "Tab"]);
    assert!(ui.screen().contains(&format!("{second} after {first}")), "{}", ui.screen());
    ui.keys(&["n"]);
    ui.keys(&["H"]);
    let changed = ui.app.passes().passes.iter().filter(|p| p.changed).count();
    assert_eq!(ui.app.visible_passes().len(), changed);
    assert!(ui.screen().contains(&format!("{changed}/{total} changed")), "{}", ui.screen());
}

#[test]
fn graph_functions_and_helpers_show_why_they_have_no_ir() {
    let mut ui = Ui::new(Some("twice"), 100, 30);
    assert!(ui.screen().contains("is a helper"), "{}", ui.screen());
    ui.keys(&["p"]);
    ui.type_text("mlp");
    ui.keys(&["Enter"]);
    let s = ui.screen();
    // Whatever the graph lowering does today, the pane says it: IR or the reason.
    assert!(s.contains("func.func") || s.contains('✗'), "{s}");
    assert!(!s.contains("panicked"), "{s}");
}

#[test]
fn target_switch_relowers_and_lints_follow() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["]", "t"]);
    assert_eq!(ui.app.target, Target::Sm80);
    assert!(ui.screen().contains("sm_80"));
    let sched = ui.app.view.doc(Stage::Sched).unwrap().text().to_string();
    assert!(sched.contains("target = \"sm_80\""), "Schedule IR is for sm_80");
    ui.keys(&["t"]);
    assert_eq!(ui.app.target, Target::Cpu);
    ui.keys(&["3"]);
    assert!(ui.screen().contains("Lints · cpu"), "{}", ui.screen());
    ui.keys(&["t"]);
    assert_eq!(ui.app.target, Target::Sm90);
}

/// An int parameter with a default that the body uses as a size launches with its
/// default (it was the assumed 64).
#[test]
fn an_int_parameter_used_as_a_size_launches_with_its_default() {
    let text = "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 64), warps=4))\n\
        def twice(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", \"N\", f32], reps: int = 3):\n    \
        ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        \
        for n0 in tile.parallel(0, N, ctx.BN):\n            x = tile.load(X[m0:m0 + ctx.BM, n0:n0 + ctx.BN])\n            \
        for i in tile.range(0, reps, 1):\n                x = x * 2.0\n            \
        Y[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = x\n";
    let ui = Ui::with_text(text, Some("twice"), 120, 36);
    assert_eq!(ui.app.run_dims().get("reps"), Some(&3), "{:?}", ui.app.run_dims());
}

/// A key is "schedule" only where the kernel's `Schedule(...)` writes it; the keys it
/// leaves to the plain-kernel defaults (BD, vector, swizzle) say "default".
#[test]
fn only_the_keys_a_schedule_writes_are_its_own() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/wgmma/warp_specialized.tsr"),
    )
    .unwrap();
    let mut ui = Ui::with_text(&text, Some("ws_gemm"), 120, 36);
    ui.keys(&["4"]);
    let origin = |key: &str| {
        let rows = ui.app.schedule_rows();
        let row = rows.iter().find(|r| r.key == key).unwrap_or_else(|| panic!("no {key} row"));
        (row.value.clone(), row.origin)
    };
    for key in ["BM", "BK", "warps", "stages", "mma", "copy", "producer"] {
        assert_eq!(origin(key).1, "schedule", "{key}");
    }
    assert_eq!(origin("BD"), ("64".to_string(), "default"));
    assert_eq!(origin("vector"), ("4".to_string(), "default"));
    assert_eq!(origin("swizzle"), ("none".to_string(), "default"));
    assert_eq!(origin("cluster_x"), ("1".to_string(), "default"));
}

/// Stepping a key away from its default sets it in the configuration; its row stays
/// where it was, under the cursor, so a second step steps the same key.
#[test]
fn a_stepped_key_keeps_its_row_under_the_cursor() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["4"]);
    let at = ui.app.schedule_rows().iter().position(|r| r.key == "cluster_x").expect("a cluster_x row on sm_90");
    let order: Vec<String> = ui.app.schedule_rows().iter().map(|r| r.key.clone()).collect();
    for _ in 0..at {
        ui.keys(&["j"]);
    }
    assert_eq!(ui.app.sched.cursor, at);
    ui.keys(&["l"]);
    let rows = ui.app.schedule_rows();
    assert_eq!((rows[at].key.as_str(), rows[at].value.as_str(), rows[at].origin), ("cluster_x", "2", "edited"));
    assert_eq!(rows.iter().map(|r| r.key.clone()).collect::<Vec<_>>(), order);
    ui.keys(&["l"]);
    let rows = ui.app.schedule_rows();
    assert_eq!((rows[at].key.as_str(), rows[at].value.as_str()), ("cluster_x", "4"));
}

#[test]
fn hopper_keys_are_listed_at_their_defaults_and_can_be_stepped() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["4"]);
    let rows = ui.app.schedule_rows();
    let mma = rows.iter().position(|r| r.key == "mma").expect("an mma row on sm_90");
    assert_eq!((rows[mma].value.as_str(), rows[mma].origin), ("mma.sync", "default"));
    let copy = rows.iter().find(|r| r.key == "copy").expect("a copy row on sm_90");
    assert_eq!((copy.value.as_str(), copy.origin), ("cp.async", "default"));
    let producer = rows.iter().find(|r| r.key == "producer").expect("a producer row on sm_90");
    assert_eq!((producer.value.as_str(), producer.origin), ("none", "default"));
    for _ in 0..mma {
        ui.keys(&["j"]);
    }
    // Stepping from the default asks for warpgroup MMA: the Tile IR's dot takes it.
    ui.keys(&["l"]);
    let rows = ui.app.schedule_rows();
    let row = rows.iter().find(|r| r.key == "mma").unwrap();
    assert_eq!((row.value.as_str(), row.origin), ("wgmma", "edited"));
    let tile = ui.app.view.doc(Stage::Tile).expect("tile IR").text().to_string();
    assert!(tile.contains("wgmma"), "{tile}");
    // The CPU has neither key.
    ui.keys(&["t", "t"]);
    assert_eq!(ui.app.target, Target::Cpu);
    assert!(!ui.app.schedule_rows().iter().any(|r| r.key == "copy" || r.key == "producer"));
}

#[test]
fn lints_jump_to_source() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["3"]);
    let diags = ui.app.diagnostics.clone().unwrap();
    assert!(diags.iter().any(|d| d.code.as_str() == "W0702"), "small_dot's space has a pruned candidate (W0702)");
    let s = ui.screen();
    assert!(s.contains(diags[0].code.as_str()), "{s}");
    ui.keys(&["Enter"]);
    assert_eq!(ui.app.tab, Tab::Explore);
    assert_eq!(ui.app.focus, Pane::Source);
    assert_eq!(ui.app.src.cursor as u32, ui.app.ws.line_index().line_of(diags[0].range.start));
}

/// The Lints tab's detail shows a note whole, however it wraps (its height was the count
/// of its lines, so a wrapped note lost its end), and its source preview scrolls to the
/// selected diagnostic (it showed the top of the file, wherever the lint was).
#[test]
fn lints_show_whole_notes_and_the_selected_line() {
    let text = include_str!("../../tests/fixtures/wgmma/gemms.tsr");
    let mut ui = Ui::with_text(text, Some("two_warpgroups"), 100, 30);
    ui.keys(&["3"]);
    let s = ui.screen();
    assert!(s.contains("W0601") && s.contains("W0602"), "{s}");
    // W0601's note is three rows wrapped at this width; its last words show.
    let words: Vec<&str> = s.lines().map(|l| l.trim_matches(|c: char| c == '│' || c.is_whitespace())).collect();
    assert!(words.join(" ").contains("the order in which threads copy it decides the conflict"), "{s}");
    assert!(s.contains("for k0 in tile.range(0, K, ctx.BK):"), "line 25 (W0601) is on screen: {s}");
    ui.keys(&["Down"]);
    let s = ui.screen();
    let words: Vec<&str> = s.lines().map(|l| l.trim_matches(|c: char| c == '│' || c.is_whitespace())).collect();
    assert!(words.join(" ").contains("warps: 16 blocks/SM (4 warps per block)"), "{s}");
    assert!(s.contains("def wide_n_relu"), "line 30 (W0602) is on screen: {s}");
    // The Explore tab's cursor did not move.
    assert_eq!(ui.app.tab, Tab::Lints);
}

/// A warp-specialized kernel's register gutter is a consumer thread's, against the count
/// the consumers' `setmaxnreg` gives them, and the pane title says so.
#[test]
fn a_warp_specialized_kernel_s_registers_are_against_setmaxnreg() {
    let text = include_str!("../../tests/fixtures/wgmma/warp_specialized.tsr");
    let ui = Ui::with_text(text, Some("ws_gemm"), 160, 30);
    let s = ui.screen();
    assert!(s.contains("consumer registers/thread: peak") && s.contains("of 240 (setmaxnreg)"), "{s}");
    let narrow = Ui::with_text(text, Some("ws_gemm"), 100, 30);
    assert!(narrow.screen().contains("consumer regs"), "{}", narrow.screen());
}

#[test]
fn an_edit_relowers_the_edited_kernel_and_reuses_the_others() {
    let mut ui = Ui::new(Some("gemm"), 100, 30);
    ui.keys(&["]"]);
    let config = ui.app.view.config.as_ref().unwrap().config.clone();
    let gemm_before = ui.app.ws.tile_func("gemm", &config, Target::Sm90).unwrap();
    // Edit vector_add's body only: gemm's Tile IR is the memoized one (same Arc).
    let edited = FIXTURE.replace("out[i0:i0 + ctx.BLOCK] = a + b", "out[i0:i0 + ctx.BLOCK] = a * b");
    ui.app.ws.set_text(edited.clone(), None);
    ui.app.source_changed();
    let gemm_after = ui.app.ws.tile_func("gemm", &config, Target::Sm90).unwrap();
    assert!(std::sync::Arc::ptr_eq(&gemm_before, &gemm_after), "salsa reused gemm's Tile IR");
    // Edit gemm's space: its Schedule IR on screen changes.
    ui.app.ws.set_text(edited.replace("BM=[64, 128]", "BM=[128, 64]"), None);
    ui.app.source_changed();
    ui.draw();
    assert!(ui.app.view.doc(Stage::Sched).unwrap().text().contains("BM=128"));
    assert!(ui.screen().contains("BM=128"), "{}", ui.screen());
}

#[test]
fn reloads_when_the_file_changes() {
    let dir = std::env::temp_dir().join(format!("tessera-explore-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("k.tsr");
    std::fs::write(&path, FIXTURE).unwrap();
    let options = Options { file: path.clone(), kernel: Some("gemm".into()), ..Options::default() };
    let mut app = App::open(&options).unwrap();
    app.apply(tessera_tui::keymap::Action::StageNext);
    assert!(app.view.doc(Stage::Sched).unwrap().text().contains("BM=64"));
    std::fs::write(&path, FIXTURE.replace("BM=[64, 128]", "BM=[128, 64]")).unwrap();
    std::thread::sleep(Duration::from_millis(450));
    app.tick();
    assert_eq!(app.ws.revision(), 1, "the change was picked up");
    assert!(app.view.doc(Stage::Sched).unwrap().text().contains("BM=128"), "and re-lowered");
    // A file that disappears keeps the last text and says so.
    std::fs::remove_file(&path).unwrap();
    std::thread::sleep(Duration::from_millis(450));
    app.tick();
    assert!(app.message.as_ref().is_some_and(|m| m.text.contains("cannot read the file")));
    assert!(app.view.doc(Stage::Sched).is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mouse_clicks_focus_panes_switch_tabs_and_jump() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    // Click the "2 Passes" tab.
    let row = ui.row_of(" 2 Passes ").unwrap();
    let col = ui.screen().lines().nth(row as usize).unwrap().find(" 2 Passes ").unwrap() as u16;
    ui.click(col + 2, row);
    assert_eq!(ui.app.tab, Tab::Passes);
    ui.keys(&["1"]);
    // Click an IR line that has a location: the source cursor follows.
    let ir = ui.app.geometry.rect(Pane::Ir).unwrap();
    ui.click(ir.x + 5, ir.y + 3);
    assert_eq!(ui.app.focus, Pane::Ir);
    assert_eq!(ui.app.ir.cursor, ui.app.ir.top + 3);
    if let Some(r) = ui.app.ir_source(ui.app.ir.cursor) {
        assert_eq!(ui.app.src.cursor as u32, ui.app.ws.line_index().line_of(r.start));
    }
    // Click a stage label in the IR pane's title.
    let (stage, rect) = ui.app.geometry.stages[2];
    ui.click(rect.x + 1, rect.y);
    assert_eq!(ui.app.stage, stage);
}

#[test]
fn unknown_kernel_is_an_error_naming_the_functions() {
    let ws = Workspace::from_text(Path::new("k.tsr"), FIXTURE.to_string());
    let options = Options { kernel: Some("gemmm".into()), ..Options::default() };
    let err = App::with_workspace(ws, &options).err().unwrap();
    assert!(err.contains("no function `gemmm`") && err.contains("gemm, vector_add"), "{err}");
}

#[test]
fn broken_source_never_panics() {
    // Every prefix of the fixture: half-typed kernels must draw, not crash.
    let mut ui = Ui::with_text("", None, 80, 24);
    for cut in (0..FIXTURE.len()).step_by(97) {
        if !FIXTURE.is_char_boundary(cut) {
            continue;
        }
        ui.app.ws.set_text(FIXTURE[..cut].to_string(), None);
        ui.app.source_changed();
        ui.app.apply(tessera_tui::keymap::Action::StageNext);
        ui.app.apply(tessera_tui::keymap::Action::ToggleDiff);
        ui.draw();
        ui.app.apply(tessera_tui::keymap::Action::ToggleDiff);
    }
}

/// A schedule value that makes a tile no block can hold (BM = 2^36 is a valid power of
/// two) is an error on screen, not an abort: nothing is built per tile element.
#[test]
fn a_huge_block_is_an_error_not_an_abort() {
    let mut ui = Ui::new(Some("gemm"), 120, 36);
    ui.keys(&["4"]);
    let rows = ui.app.schedule_rows();
    let bm = rows.iter().position(|r| r.key == "BM").expect("a BM row");
    for _ in 0..bm {
        ui.keys(&["j"]);
    }
    ui.keys(&["e", "Bksp", "Bksp", "Bksp"]);
    ui.type_text("68719476736");
    ui.keys(&["Enter"]);
    let s = ui.screen();
    assert!(s.contains("BM=68719476736") && s.contains("Sched ✗ Tile ✗ Target ✗"), "{s}");
    // The Schedule stage says why.
    ui.keys(&["1", "]"]);
    let s = ui.screen();
    assert!(s.contains("would be [68719476736"), "the tile and the limit are named:\n{s}");
}
