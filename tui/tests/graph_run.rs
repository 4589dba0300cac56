//! The run tab runs graph functions (`@jit`) through `tessera_backends::launch::graph`,
//! the layer `tessera run` drives: `r` on a graph function runs its launch plan on a
//! worker thread and the panel shows the verdict `GraphRun` gave, each returned value's
//! check, the plan's kernels and the times; a run that cannot be made shows why.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tessera_backends::launch::graph::{run_graph_function, GraphRunRequest};
use tessera_backends::launch::Verdict;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_tui::app::App;
use tessera_tui::runner::GraphOutcome;
use tessera_tui::workspace::Workspace;
use tessera_tui::{Options, Target};

const TRAIN_STEP: &str = include_str!("../../examples/train_step.tsr");
const TRAIN_STEP_PATH: &str = "examples/train_step.tsr";
const FIXTURE: &str = include_str!("fixtures/explore.tsr");
const FIXTURE_PATH: &str = "tui/tests/fixtures/explore.tsr";

struct Ui {
    app: App,
    term: Terminal<TestBackend>,
}

impl Ui {
    fn open(path: &str, text: &str, function: &str, dims: &[(&str, &str)], w: u16, h: u16) -> Ui {
        let ws = Workspace::from_text(Path::new(path), text.to_string());
        let options = Options {
            kernel: Some(function.to_string()),
            target: Target::Sm90,
            dims: dims.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Options::default()
        };
        let app = App::with_workspace(ws, &options).expect("the file opens");
        let mut ui = Ui { app, term: Terminal::new(TestBackend::new(w, h)).unwrap() };
        ui.draw();
        ui
    }

    fn draw(&mut self) {
        let app = &mut self.app;
        self.term.draw(|f| tessera_tui::ui::draw(f, app)).unwrap();
    }

    fn keys(&mut self, keys: &[char]) {
        for &c in keys {
            self.app.handle_event(Event::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)));
            self.draw();
        }
    }

    fn screen(&self) -> String {
        let buf = self.term.backend().buffer();
        let mut out = String::new();
        for y in 0..buf.area.height {
            let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Waits for the graph run, ticking like the event loop.
    fn wait_for_graph_run(&mut self) {
        for _ in 0..30_000 {
            self.app.tick();
            if !self.app.run.busy() {
                self.draw();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the graph run did not finish in 300 s");
    }

    /// The finished run of `function`: what the worker returned.
    fn outcome(&self, function: &str) -> Result<&GraphOutcome, &String> {
        let record = self.app.run.graph_record(function).expect("a record of the run");
        record.outcome.as_ref().expect("the run finished").as_ref()
    }
}

/// The graph run's pane and the kernels' chart (not the devices or the status line,
/// which name what the build has). Timings change from run to run, and the device, the
/// repeat count and the errors' digits with the build (the CPU backend when it has LLVM,
/// else the interpreter): snapshots show where they are, not their value, and padding
/// before a right border is collapsed because their texts differ in length.
fn snapshot(name: &str, screen: &str) {
    let from = screen.find("┌ Graph run").expect("the graph run's pane");
    let to = screen.rfind('┘').expect("the chart's bottom border") + '┘'.len_utf8();
    let screen = &screen[from..to];
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d\.\d\de-?\d+", "[err]");
    settings
        .add_filter(r"the CPU backend \(LLVM JIT\), target cpu|the reference interpreter, target sm_90", "[device]");
    settings.add_filter(r"over \d+ runs?", "over [n] runs");
    settings.add_filter(r"[█▏▎▍▌▋▊▉]+", "[bar]");
    settings.add_filter(r" +\d+(\.\d+)? m?s\b", " [t]");
    settings.add_filter(r"\d+(\.\d+)? m?s\b", "[t]");
    settings.add_filter(r"[⠋⠙⠹⠸⠼⠴⠦⠧]", "⠿");
    settings.add_filter(r" {2,}│", " │");
    settings.bind(|| insta::assert_snapshot!(name, screen));
}

#[test]
fn r_runs_a_graph_function_and_shows_the_verdict_the_run_gave() {
    let mut ui = Ui::open(TRAIN_STEP_PATH, TRAIN_STEP, "sgd_step", &[], 110, 32);
    ui.keys(&['5', 'r']);
    assert!(ui.app.run.graph.is_some(), "r starts a graph run: {:?}", ui.app.message);
    assert!(ui.screen().contains("running"), "{}", ui.screen());
    ui.wait_for_graph_run();
    let s = ui.screen();
    let o = ui.outcome("sgd_step").unwrap_or_else(|e| panic!("the run failed: {e}\n{s}"));
    let run = &o.run;

    // The verdict is GraphRun's: a seeded SGD step matches the f64 reference.
    assert!(run.correct(), "{run:?}");
    assert_eq!(run.verdict, Verdict::Correct);
    assert!(s.contains("correct: every returned value matches the f64 reference"), "{s}");
    // Each returned value: its own verdict and the errors the run measured.
    assert_eq!(run.checks.len(), 1, "sgd_step returns one tensor");
    let check = &run.checks[0];
    assert_eq!(check.verdict(), Verdict::Correct);
    let line = s.lines().find(|l| l.contains(" return ")).unwrap_or_else(|| panic!("a row per returned value:\n{s}"));
    assert!(line.contains("bf16[64×64]") && line.contains("correct"), "{line}");
    assert!(line.contains(&format!("max abs err {:.2e}", check.comparison.max_abs)), "{line}");
    assert!(line.contains(&format!("max rel err {:.2e}", check.comparison.max_rel)), "{line}");
    // The device GraphSession picked, the times, and every kernel of the plan.
    let device = if run.device == tessera_tui::runner::Device::Cpu { "CPU backend" } else { "interpreter" };
    assert!(s.contains(device), "{s}");
    assert!(s.contains("median") && s.contains(&format!("over {} run", run.repeat)), "{s}");
    assert!(!run.kernels.is_empty());
    for k in &run.kernels {
        assert!(!k.time.is_zero(), "every kernel of the plan ran: {k:?}");
        // Listed without the `sgd_step__` every generated kernel's name starts with.
        let shown = k.kernel.name.strip_prefix("sgd_step__").expect("a generated kernel's name");
        assert!(s.contains(&format!("│{shown} ")), "kernel {} is listed:\n{s}", k.kernel.name);
    }
    assert!(s.contains("D=64") && s.contains("lr=0"), "dims and scalars:\n{s}");
    let message = ui.app.message.as_ref().map(|m| m.text.clone()).unwrap_or_default();
    assert!(message.contains("correct against the f64 reference"), "{message}");

    // The same run through the backends' one-call entry point (the CLI's layer) gives
    // the same verdict and plan: the panel neither re-checks nor re-plans.
    let db = Database::default();
    let file = SourceFile::new(&db, TRAIN_STEP_PATH.into(), TRAIN_STEP.to_string(), None);
    let key = item_index(&db, file).functions.iter().find(|f| f.key.name(&db) == "sgd_step").unwrap().key;
    let (_, cli) = run_graph_function(&db, key, &GraphRunRequest::default()).expect("the CLI's layer runs it");
    assert_eq!(cli.verdict, run.verdict);
    assert_eq!(cli.device, run.device);
    let names = |r: &tessera_backends::launch::graph::GraphRun| -> Vec<String> {
        r.kernels.iter().map(|k| k.kernel.name.clone()).collect()
    };
    assert_eq!(names(&cli), names(run));

    snapshot("graph_run_110x32", &ui.screen());
}

#[test]
fn a_graph_function_without_graph_ir_shows_the_error() {
    // The fixture's `mlp` calls a helper whose result has no type: no Graph IR, so no
    // plan. The run reports GraphRunError's message instead of panicking.
    let mut ui = Ui::open(FIXTURE_PATH, FIXTURE, "mlp", &[], 100, 30);
    ui.keys(&['5', 'r']);
    ui.wait_for_graph_run();
    let s = ui.screen();
    let err = ui.outcome("mlp").expect_err("mlp cannot run").clone();
    assert!(err.contains("could not infer this value's type"), "{err}");
    assert!(err.contains("explore.tsr:"), "the error names its place: {err}");
    assert!(s.contains("✗ the checker could not infer"), "{s}");
    assert!(!s.contains("panicked") && !s.contains("internal error"), "{s}");
    assert!(!s.contains("correct"), "no verdict without a run:\n{s}");
    let message = ui.app.message.as_ref().map(|m| m.text.clone()).unwrap_or_default();
    assert!(message.starts_with("`mlp` failed:"), "{message}");
}

#[test]
fn a_dim_without_a_value_is_an_input_error_not_a_panic() {
    // --dims B=-1: the override rule refuses it when the run is seeded (GraphRunError::Input).
    let mut ui = Ui::open(TRAIN_STEP_PATH, TRAIN_STEP, "sgd_step", &[("B", "-1")], 100, 30);
    assert_eq!(ui.app.overrides.dims, BTreeMap::from([("B".to_string(), -1)]));
    ui.keys(&['5', 'r']);
    ui.wait_for_graph_run();
    let err = ui.outcome("sgd_step").expect_err("a negative dim cannot be seeded").clone();
    assert!(err.contains("--dims B=-1: a dim must be at least 1"), "{err}");
    assert!(ui.screen().contains("✗"), "{}", ui.screen());
}

#[test]
fn autotune_is_for_kernels_and_the_panel_says_so() {
    let mut ui = Ui::open(TRAIN_STEP_PATH, TRAIN_STEP, "sgd_step", &[], 100, 30);
    ui.keys(&['5', 'a']);
    assert!(!ui.app.run.busy());
    let message = ui.app.message.as_ref().map(|m| m.text.clone()).unwrap_or_default();
    assert!(message.contains("autotune is for kernels"), "{message}");
    assert!(ui.screen().contains("r runs `sgd_step`"), "{}", ui.screen());
}
