//! The explorer's app: the state every tab shares (the file, the kernel on screen, the
//! stage, the source and IR cursors, focus, overlays, messages) and the tabs' components
//! ([`crate::components`]), and how actions change them. Drawing lives in [`crate::ui`]
//! and reads this state; nothing here draws.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossterm::event::{Event, KeyEvent, KeyEventKind};
use tessera_frontend::check::{FunctionKind, KeyValue};
use tessera_frontend::diagnostics::Diagnostic;
use tessera_passes::{Stage, Target};

mod edits;
mod mouse;
mod overlay;
mod panes;

pub use crate::components::passes::PassesTab;
pub use crate::components::run::{RunRecord, RunTab};
pub use crate::components::schedule::ScheduleRow;
use crate::components::schedule::{self, parse_value};
pub use crate::components::Outcome;
use crate::diff::Diff;
use crate::highlight::SourceHighlight;
pub use crate::kernel::KernelView;
use crate::keymap::{self, Action, Context};
use crate::options::Options;
use crate::pipeline::{PassList, RegisterGutter};
pub use crate::state::{fmt_ms, ms, Geometry, Level, Message, Overlay, Pane, Scroll, Tab};
use crate::workspace::{FunctionInfo, Overrides, StageError, Workspace};

pub struct App {
    pub ws: Workspace,
    pub functions: Vec<FunctionInfo>,
    pub kernel: Option<String>,
    pub target: Target,
    pub stage: Stage,
    pub tab: Tab,
    pub focus: Pane,
    pub overlay: Overlay,
    pub overrides: Overrides,
    /// Values typed in the schedule panel that validation rejected (key → value, E0701
    /// message): shown in their row while lowering goes on with the last valid value.
    pub rejected_edits: BTreeMap<String, (KeyValue, String)>,
    pub view: KernelView,
    pub diagnostics: Result<Vec<Diagnostic>, String>,
    pub source_hl: SourceHighlight,
    pub src: Scroll,
    pub ir: Scroll,
    pub lints: Scroll,
    pub mesh: Scroll,
    pub sched: Scroll,
    pub show_loc: bool,
    pub diff_mode: bool,
    /// IR lines generated from the source cursor's line (when the source pane leads).
    pub linked_ir: Vec<usize>,
    /// The passes tab's component.
    pub passes_tab: PassesTab,
    /// The run tab's component: devices, the running batch, the results.
    pub run: RunTab,
    pub message: Option<Message>,
    pub geometry: Geometry,
    pub quit: bool,
    pub reload_time: Option<Duration>,
    last_poll: Instant,
    pub ticks: u64,
}

impl App {
    /// Opens the file of `options` (reading it from disk) and lowers its first kernel.
    pub fn open(options: &Options) -> Result<App, String> {
        let ws = Workspace::open(&options.file)?;
        App::with_workspace(ws, options)
    }

    /// An explorer over a workspace (tests and benchmarks make one from text).
    pub fn with_workspace(ws: Workspace, options: &Options) -> Result<App, String> {
        let mut overrides = Overrides::default();
        for (k, v) in &options.schedule {
            overrides.set_schedule(k, parse_value(v));
        }
        for (k, v) in &options.dims {
            let n = v.trim().parse::<i64>().map_err(|_| format!("--dims {k}: `{v}` is not an integer"))?;
            overrides.dims.insert(k.clone(), n);
        }
        let functions = ws.functions();
        let kernel = match &options.kernel {
            Some(name) => {
                // The session's lookup, so the error lists the functions as the CLI's does.
                ws.analysis().function(name).map_err(|e| e.message)?;
                Some(name.clone())
            }
            None => functions
                .iter()
                .find(|f| f.kind == FunctionKind::Kernel)
                .or(functions.iter().find(|f| f.kind != FunctionKind::Helper))
                .or(functions.first())
                .map(|f| f.name.clone()),
        };
        let mut app = App {
            ws,
            functions,
            kernel,
            target: options.target,
            stage: Stage::Graph,
            tab: Tab::Explore,
            focus: Pane::Ir,
            overlay: Overlay::None,
            overrides,
            rejected_edits: BTreeMap::new(),
            view: KernelView::empty(),
            diagnostics: Ok(Vec::new()),
            source_hl: SourceHighlight::default(),
            src: Scroll::default(),
            ir: Scroll::default(),
            lints: Scroll::default(),
            mesh: Scroll::default(),
            sched: Scroll::default(),
            show_loc: false,
            diff_mode: false,
            linked_ir: Vec::new(),
            passes_tab: PassesTab::default(),
            run: RunTab::new(),
            message: None,
            geometry: Geometry::default(),
            quit: false,
            reload_time: None,
            last_poll: Instant::now(),
            ticks: 0,
        };
        app.refresh_file();
        app.relower();
        if let Some(f) = app.current_function() {
            let line = f.line as usize;
            let len = app.ws.line_index().line_count();
            app.src.jump(line, len, 20);
        }
        app.sync_from_ir();
        app.report_refused_overrides();
        Ok(app)
    }

    /// Names the command-line overrides the session's override rule refused (the CLI
    /// exits with the same reasons; the explorer opens and lowers without them).
    fn report_refused_overrides(&mut self) {
        let Ok(info) = &self.view.config else { return };
        let refused: Vec<String> = info.rejected.iter().map(|r| r.as_option_error()).collect();
        if !refused.is_empty() {
            self.error(format!("refused {}", refused.join("; ")));
        }
    }

    pub fn current_function(&self) -> Option<&FunctionInfo> {
        let name = self.kernel.as_ref()?;
        self.functions.iter().find(|f| &f.name == name)
    }

    /// Re-reads what depends only on the file and the target: functions, diagnostics,
    /// source highlighting.
    fn refresh_file(&mut self) {
        self.functions = self.ws.functions();
        self.diagnostics = self.ws.diagnostics(self.target);
        let tokens = self.ws.highlights();
        self.source_hl = SourceHighlight::new(self.ws.text(), self.ws.line_index(), &tokens);
        if let Some(name) = &self.kernel {
            if !self.functions.iter().any(|f| &f.name == name) {
                self.message = Some(Message {
                    level: Level::Warning,
                    text: format!("`{name}` is no longer in the file; its last name is kept"),
                });
            }
        }
    }

    /// Lowers every stage of the current kernel with the current configuration; every
    /// stage is asked of salsa, so only what the change invalidated is recomputed.
    pub fn relower(&mut self) {
        let start = Instant::now();
        let name = self.kernel.clone().unwrap_or_default();
        let kind = self.current_function().map(|f| f.kind);
        let config = if self.kernel.is_some() {
            self.ws.config(&name, &self.overrides)
        } else {
            Err(StageError { message: "this file defines no function".into(), range: None })
        };
        let lowering = match &config {
            Ok(info) => Some(self.ws.lower_all(&name, &info.config, self.target)),
            Err(_) => None,
        };
        self.view = KernelView::new(name, kind, config, lowering, start.elapsed());
        if self.tab == Tab::Passes {
            let rows = self.visible_passes().len() + self.passes().failure.is_some() as usize;
            self.passes_tab.list.clamp(rows, self.geometry.height(Pane::PassList));
        }
    }

    // ----- a frame -----

    /// Takes a frame's layout ([`crate::ui::layout`]): records it for mouse hits and page
    /// sizes, keeps each pane's cursor on screen, and computes what the panes on screen
    /// show, so that drawing ([`crate::ui::view`]) only reads.
    pub fn frame(&mut self, geometry: Geometry) {
        self.geometry = geometry;
        let height = |app: &App, pane| app.geometry.rect(pane).map(|r| r.height as usize);
        let lines = self.ws.line_index().line_count();
        if let Some(h) = height(self, Pane::Source) {
            self.src.clamp(lines, h);
        }
        if let Some(h) = height(self, Pane::Ir) {
            if self.diff_mode {
                self.view.stage_diff(self.stage);
            }
            if matches!(self.view.stage(self.stage), Some(Ok(_))) {
                self.ir.clamp(self.ir_len(), h);
            }
        }
        if let Some(h) = height(self, Pane::PassList) {
            let rows = self.passes_tab.rows(self.passes());
            self.passes_tab.list.clamp(rows, h);
            // The list shows each visible pass's counts, the diff pane the selected one.
            let visible = self.visible_passes();
            for &i in visible.iter().skip(self.passes_tab.list.top).take(h) {
                self.pass_diff(i);
            }
        }
        if let Some(h) = height(self, Pane::PassDiff) {
            let selected = self.visible_passes().get(self.passes_tab.list.cursor).copied();
            if let Some(diff) = selected.and_then(|i| self.pass_diff(i)) {
                if diff.changed() {
                    self.passes_tab.diff.clamp(diff.len(), h);
                }
            }
        }
        if let Some(h) = height(self, Pane::Lints) {
            let len = self.diagnostics.as_ref().map_or(0, Vec::len);
            if len > 0 {
                self.lints.clamp(len, h);
            }
        }
        if let Some(r) = self.geometry.source_preview {
            self.src.clamp(lines, r.height as usize);
        }
        if matches!(self.tab, Tab::Explore | Tab::Lints) {
            self.registers();
        }
        if let Some(h) = height(self, Pane::Schedule) {
            let rows = self.schedule_rows();
            if !rows.is_empty() {
                // The selected row's problem takes the pane's last two lines.
                let error = rows.get(self.sched.cursor).is_some_and(|r| r.error.is_some());
                self.sched.clamp(rows.len(), h.saturating_sub(error as usize * 2));
            }
        }
        if let Some(h) = height(self, Pane::Results) {
            // The first row of the results pane is the table header.
            if !self.run.results.is_empty() {
                self.run.scroll.clamp(self.run.results.len(), h.saturating_sub(1));
            }
        }
    }

    // ----- derived values the views read -----

    /// The Mesh tab's lines for the current function: its mesh, each parameter's
    /// layout, and the collectives with their cost at the dims given (`--dims`).
    pub fn mesh_lines(&self) -> Vec<(MeshLine, String)> {
        let Some(name) = self.kernel.as_deref() else {
            return vec![(MeshLine::Note, "no function selected".into())];
        };
        let dims: std::collections::BTreeMap<String, i64> =
            self.overrides.dims.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let Some(view) = self.ws.analysis().mesh_view(name, &dims) else {
            return vec![(
                MeshLine::Note,
                format!("`{name}` is not a sharded graph function: give a parameter @shard(mesh, ...)"),
            )];
        };
        let axes: Vec<String> = view.axes.iter().map(|(a, n)| format!("{a}={n}")).collect();
        let devices: usize = view.axes.iter().map(|(_, n)| n).product();
        let mut lines = vec![(MeshLine::Header, format!("mesh: {devices} devices ({})", axes.join(", ")))];
        lines.push((MeshLine::Header, "parameters".into()));
        for v in &view.values {
            lines.push((
                MeshLine::Row,
                format!("  {:<6} {:<16} {} → {} per device", v.name, v.layout, v.global, v.per_device),
            ));
        }
        lines.push((MeshLine::Header, format!("collectives ({})", view.collectives.len())));
        if view.collectives.is_empty() {
            lines.push((MeshLine::Note, "  none: every op runs on its own blocks".into()));
        }
        for c in &view.collectives {
            let bytes = c.bytes.map_or("? bytes (pass --dims)".to_string(), |b| format!("{b} bytes/device"));
            let cost = match (&c.algorithm, c.time_us) {
                (Some(a), Some(t)) => format!(", {a}, ~{t:.1} µs"),
                _ => String::new(),
            };
            lines.push((
                MeshLine::Row,
                format!(
                    "  {}{} over {} of {}: {bytes}{cost}",
                    c.kind,
                    if c.explicit { " (written)" } else { "" },
                    c.axis,
                    c.values.join(", ")
                ),
            ));
            if !c.overlaps.is_empty() {
                lines.push((MeshLine::Note, format!("    overlaps {}", c.overlaps.join(", "))));
            }
        }
        for c in &view.conflicts {
            lines.push((MeshLine::Error, format!("conflict: {c}")));
        }
        lines
    }

    /// The pass pipeline of the kernel on screen (computed on first use).
    pub fn passes(&self) -> &PassList {
        self.view.passes(&self.ws, self.target)
    }

    /// Pass `i`'s IR against the IR before it (computed when first shown).
    pub fn pass_diff(&self, i: usize) -> Option<Arc<Diff>> {
        self.view.pass_diff(&self.ws, self.target, i)
    }

    /// The register gutter of the kernel on screen (GPU targets; computed when drawn).
    pub fn registers(&self) -> Option<&Result<RegisterGutter, StageError>> {
        self.view.registers(&self.ws, self.target)
    }

    pub fn visible_passes(&self) -> Vec<usize> {
        self.passes_tab.visible(self.passes())
    }

    pub fn selected_diagnostic(&self) -> Option<&Diagnostic> {
        self.diagnostics.as_ref().ok()?.get(self.lints.cursor)
    }

    /// The values a launch binds: every dim symbol of the signature, from the dims
    /// overrides, the configuration's shapes, or the default shape.
    pub fn run_dims(&self) -> BTreeMap<String, i64> {
        schedule::run_dims(&self.view.config, &self.overrides)
    }

    /// The schedule panel's rows: the autotune space's keys first, then the other
    /// schedule keys, then the shape symbols (those tiles use, then launch-only ones).
    pub fn schedule_rows(&self) -> Vec<ScheduleRow> {
        schedule::rows(&self.view.config, &self.overrides, &self.rejected_edits, self.target.is_gpu())
    }

    // ----- events -----

    /// How long the event loop may wait for input before it must tick again.
    pub fn poll_interval(&self) -> Duration {
        if self.run.busy() {
            Duration::from_millis(80)
        } else {
            Duration::from_millis(250)
        }
    }

    pub fn handle_event(&mut self, event: Event) {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.handle_key(key),
            Event::Mouse(m) => self.handle_mouse(m),
            _ => {}
        }
    }

    fn context(&self) -> Context {
        match self.overlay {
            Overlay::Help { .. } => Context::Help,
            Overlay::Picker { .. } => Context::Picker,
            Overlay::Edit { .. } => Context::Edit,
            Overlay::None => self.focus.context(),
        }
    }

    pub fn handle_key(&mut self, key: KeyEvent) {
        // A message answers the last key; the next key brings the key hints back.
        self.message = None;
        let ctx = self.context();
        let action = keymap::lookup(&keymap::chain(ctx), &key);
        // Text entry: characters the overlay does not bind go into its text.
        if matches!(ctx, Context::Picker | Context::Edit) && action.is_none() {
            self.type_into_overlay(key);
            return;
        }
        if let Some(action) = action {
            self.apply(action);
        }
    }

    pub fn apply(&mut self, action: Action) {
        match &self.overlay {
            Overlay::Help { .. } => return self.apply_help(action),
            Overlay::Picker { .. } => return self.apply_picker(action),
            Overlay::Edit { .. } => return self.apply_edit(action),
            Overlay::None => {}
        }
        match action {
            Action::Quit => self.quit = true,
            Action::Help => self.overlay = Overlay::Help { scroll: 0 },
            Action::Close => {}
            Action::Tab(i) => self.set_tab(Tab::ALL[(i as usize).min(Tab::ALL.len() - 1)]),
            Action::FocusNext | Action::FocusPrev => {
                let panes = self.tab.panes();
                let at = panes.iter().position(|p| *p == self.focus).unwrap_or(0);
                let n = panes.len();
                let next = if action == Action::FocusNext { (at + 1) % n } else { (at + n - 1) % n };
                self.set_focus(panes[next]);
            }
            Action::StageNext | Action::StagePrev => self.step_stage(action == Action::StageNext),
            Action::CycleTarget => {
                let i = Target::ALL.iter().position(|t| *t == self.target).unwrap_or(0);
                // sm_90 first, as the default; then sm_80, then the CPU.
                let order = [Target::Sm90, Target::Sm80, Target::Cpu];
                let at = order.iter().position(|t| *t == Target::ALL[i]).unwrap_or(0);
                self.target = order[(at + 1) % order.len()];
                self.diagnostics = self.ws.diagnostics(self.target);
                self.relower_keeping_place();
                self.info(format!("target {}", self.target));
            }
            Action::PickKernel => {
                let cursor = self.functions.iter().position(|f| Some(&f.name) == self.kernel.as_ref()).unwrap_or(0);
                self.overlay = Overlay::Picker { filter: String::new(), cursor };
            }
            Action::ToggleLoc => {
                self.show_loc = !self.show_loc;
                self.ir.left = 0;
            }
            Action::ToggleDiff => {
                let place = self.ir_source(self.ir.cursor);
                self.diff_mode = !self.diff_mode;
                if self.diff_mode && self.stage == Stage::Graph {
                    self.info("Graph IR is the first stage: the diff shows it whole; ] steps to Schedule IR".into());
                }
                self.place_ir_cursor(place);
            }
            Action::Reload => match self.ws.reload() {
                Ok(changed) => {
                    self.after_reload(changed);
                }
                Err(e) => self.error(e),
            },
            Action::Run => self.start_run(false),
            Action::Autotune => self.start_run(true),
            Action::Cancel => self.message = Some(self.run.cancel()),
            _ => self.apply_in_pane(action),
        }
    }

    fn apply_in_pane(&mut self, action: Action) {
        match self.focus {
            Pane::Source => self.source_action(action),
            Pane::Ir => self.ir_action(action),
            Pane::PassList | Pane::PassDiff => self.passes_action(action),
            Pane::Lints => self.lints_action(action),
            Pane::Schedule => self.schedule_action(action),
            Pane::Results => self.results_action(action),
            Pane::Mesh => {
                let len = self.mesh_lines().len();
                let h = self.geometry.height(Pane::Mesh);
                self.mesh.nav(action, len, h);
            }
        }
    }

    fn passes_action(&mut self, action: Action) {
        let outcome = self.passes_tab.update(action, self.focus, &self.view, &self.ws, self.target, &self.geometry);
        self.take(outcome);
    }

    /// Does what a tab's component asked for.
    fn take(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Nothing => {}
            Outcome::Focus(pane) => self.set_focus(pane),
            Outcome::Say(m) => self.message = Some(m),
            Outcome::UseRun(i) => {
                if let Some(r) = self.run.results.get(i).cloned() {
                    self.use_record(r);
                }
            }
        }
    }

    fn lints_action(&mut self, action: Action) {
        let len = self.diagnostics.as_ref().map_or(0, Vec::len);
        let h = self.geometry.height(Pane::Lints);
        if self.lints.nav(action, len, h) {
            return;
        }
        if action == Action::Enter {
            if let Some(d) = self.selected_diagnostic() {
                let line = self.ws.line_index().line_of(d.range.start) as usize;
                self.set_tab(Tab::Explore);
                self.set_focus(Pane::Source);
                let len = self.ws.line_index().line_count();
                self.src.jump(line, len, self.geometry.height(Pane::Source));
                self.sync_from_source();
            }
        }
    }

    fn results_action(&mut self, action: Action) {
        // A graph function's pane shows its last run, not the kernels' table: Enter has
        // no row of it to take.
        if action == Action::Enter && self.current_function().is_some_and(|f| f.kind == FunctionKind::Graph) {
            return;
        }
        let outcome = self.run.update(action, &self.geometry);
        self.take(outcome);
    }

    /// Takes a result's launch for the kernel on screen: its kernel, target and
    /// configuration (as overrides of the kernel's own).
    fn use_record(&mut self, r: RunRecord) {
        if Some(&r.kernel) != self.kernel.as_ref() {
            self.select_kernel(&r.kernel);
        }
        let base = self.ws.config(&r.kernel, &Overrides::default()).ok().map(|i| i.config);
        self.overrides = r.overrides(base.as_ref());
        self.rejected_edits.clear();
        self.target = r.target;
        self.relower_keeping_place();
        self.info(format!("using {}", r.config));
    }

    // ----- state changes -----

    /// Switches tab, focusing its main pane (the explore tab keeps whichever of source
    /// and IR had the focus).
    pub fn set_tab(&mut self, tab: Tab) {
        let changed = tab != self.tab;
        self.tab = tab;
        let panes = tab.panes();
        if changed || !panes.contains(&self.focus) {
            self.focus = match tab {
                Tab::Explore if panes.contains(&self.focus) => self.focus,
                Tab::Explore => Pane::Ir,
                _ => panes[0],
            };
        }
    }

    pub fn set_focus(&mut self, pane: Pane) {
        self.focus = pane;
        match pane {
            Pane::Source => self.sync_from_source(),
            Pane::Ir => self.sync_from_ir(),
            _ => {}
        }
    }

    pub fn select_kernel(&mut self, name: &str) {
        self.kernel = Some(name.to_string());
        self.overrides = Overrides::default();
        self.rejected_edits.clear();
        self.diff_mode = false;
        self.relower();
        self.ir = Scroll::default();
        self.passes_tab.list = Scroll::default();
        self.passes_tab.diff = Scroll::default();
        self.sched = Scroll::default();
        if let Some(f) = self.current_function() {
            let line = f.line as usize;
            let len = self.ws.line_index().line_count();
            let h = self.geometry.height(Pane::Source);
            self.src.jump(line, len, h);
        }
        self.focus_first_op();
        let kind = self.current_function().map(|f| f.kind.name()).unwrap_or("function");
        self.info(format!("{kind} `{name}`"));
    }

    fn relower_keeping_place(&mut self) {
        let place = self.ir_source(self.ir.cursor);
        self.relower();
        if self.focus == Pane::Source {
            self.sync_from_source();
        } else {
            self.place_ir_cursor(place);
        }
        let rows = self.schedule_rows().len();
        self.sched.clamp(rows, self.geometry.height(Pane::Schedule));
    }

    fn after_reload(&mut self, changed: bool) {
        if !changed {
            self.info("the file has not changed".into());
            return;
        }
        self.source_changed();
    }

    /// The workspace's text changed (a reload, or a test or benchmark setting it):
    /// everything on screen is asked of salsa again.
    pub fn source_changed(&mut self) {
        let start = Instant::now();
        self.refresh_file();
        self.relower_keeping_place();
        let len = self.ws.line_index().line_count();
        self.src.clamp(len, self.geometry.height(Pane::Source));
        let lints = self.diagnostics.as_ref().map_or(0, Vec::len);
        self.lints.clamp(lints, self.geometry.height(Pane::Lints));
        self.reload_time = Some(start.elapsed());
        self.info(format!(
            "reloaded {} (revision {}) in {}",
            self.ws.path().display(),
            self.ws.revision(),
            ms(start.elapsed())
        ));
    }

    /// Periodic work: the worker's reports and the file's modification time.
    pub fn tick(&mut self) {
        self.ticks += 1;
        if let Some(m) = self.run.drain() {
            self.message = Some(m);
        }
        if self.last_poll.elapsed() >= Duration::from_millis(400) {
            self.last_poll = Instant::now();
            match self.ws.poll_disk() {
                Ok(true) => self.after_reload(true),
                Ok(false) => {}
                Err(e) => self.warn(format!("cannot read the file: {e} (showing the last version)")),
            }
        }
    }

    // ----- runs -----

    fn start_run(&mut self, autotune: bool) {
        if let Some(f) = self.current_function().filter(|f| f.kind == FunctionKind::Graph) {
            let name = f.name.clone();
            self.message = Some(if autotune {
                Message::warn(format!("`{name}` is a graph function: autotune is for kernels; r runs it"))
            } else {
                // The dims the user gave (--dims, the schedule tab) that name one of the
                // function's shape symbols, as for kernels (the others are the rows the
                // override rule refused); GraphSession checks them with the same rule and
                // gives every other shape symbol its default, as `tessera run` does.
                let mut dims = self.overrides.dims.clone();
                if let Ok(info) = &self.view.config {
                    dims.retain(|s, _| info.symbols.contains(s));
                }
                self.run.start_graph(&self.ws, &name, dims)
            });
            return;
        }
        let dims = self.run_dims();
        let message = self.run.start(&self.ws, &self.view, self.kernel.as_deref(), self.target, dims, autotune);
        if let Some(m) = message {
            self.message = Some(m);
        }
    }

    // ----- messages -----

    pub fn info(&mut self, text: String) {
        self.message = Some(Message { level: Level::Info, text });
    }

    pub fn warn(&mut self, text: String) {
        self.message = Some(Message { level: Level::Warning, text });
    }

    pub fn error(&mut self, text: String) {
        self.message = Some(Message { level: Level::Error, text });
    }
}

/// How the Mesh tab shows a line.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MeshLine {
    Header,
    Row,
    Note,
    Error,
}
