//! The kernel on screen: its configuration, every stage's IR, and what is derived from
//! them when a view first asks (the pass pipeline, the register profile, diffs).

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tessera_frontend::check::FunctionKind;
use tessera_passes::{Stage, Target};

use crate::diff::Diff;
use crate::irdoc::IrDoc;
pub use crate::pipeline::PassList;
use crate::pipeline::{self, RegisterGutter};
use crate::workspace::{stage_index, ConfigInfo, Lowering, StageError, Workspace};

/// Everything derived for the kernel on screen; rebuilt when the kernel, the target,
/// the overrides or the source change.
pub struct KernelView {
    pub name: String,
    pub kind: Option<FunctionKind>,
    pub config: Result<ConfigInfo, StageError>,
    pub lowering: Option<Lowering>,
    /// The pass pipeline, computed when a view first asks (`KernelView::passes`): it runs every
    /// pass again and prints each one's IR, which a schedule change need not wait for.
    pub(crate) passes: OnceCell<PassList>,
    /// The register profile, computed when first drawn (`KernelView::registers`).
    pub(crate) registers: OnceCell<Option<Result<RegisterGutter, StageError>>>,
    /// Stage `i` against stage `i - 1`, computed when first shown.
    pub(crate) stage_diffs: [OnceCell<Option<Arc<Diff>>>; 4],
    pub(crate) pass_diffs: RefCell<HashMap<usize, Arc<Diff>>>,
    /// Time to choose the configuration and lower every stage.
    pub relower: Duration,
}

impl KernelView {
    pub fn stage(&self, stage: Stage) -> Option<&Result<Arc<IrDoc>, StageError>> {
        self.lowering.as_ref().map(|l| l.stage(stage))
    }

    pub fn doc(&self, stage: Stage) -> Option<&Arc<IrDoc>> {
        self.stage(stage).and_then(|s| s.as_ref().ok())
    }

    /// The diff of `stage` against the stage before it (None for Graph, or when either
    /// side failed to lower).
    pub fn stage_diff(&self, stage: Stage) -> Option<Arc<Diff>> {
        let i = stage_index(stage);
        self.stage_diffs[i]
            .get_or_init(|| {
                let prev = Stage::ALL.get(i.checked_sub(1)?)?;
                Some(Arc::new(Diff::new(Some(self.doc(*prev)?.clone()), self.doc(stage)?.clone())))
            })
            .clone()
    }

    /// A view of no kernel (before the first lowering, or when the file defines none).
    pub fn empty() -> KernelView {
        KernelView::new(
            String::new(),
            None,
            Err(StageError { message: "no function".into(), range: None }),
            None,
            Duration::ZERO,
        )
    }

    pub fn new(
        name: String,
        kind: Option<FunctionKind>,
        config: Result<ConfigInfo, StageError>,
        lowering: Option<Lowering>,
        relower: Duration,
    ) -> KernelView {
        KernelView {
            name,
            kind,
            config,
            lowering,
            passes: OnceCell::new(),
            registers: OnceCell::new(),
            stage_diffs: Default::default(),
            pass_diffs: RefCell::default(),
            relower,
        }
    }

    /// The pass pipeline of the kernel (computed on first use).
    pub fn passes(&self, ws: &Workspace, target: Target) -> &PassList {
        self.passes.get_or_init(|| match (&self.config, &self.lowering) {
            (Ok(info), Some(l)) => pipeline::passes(ws, &self.name, &info.config, l, target),
            _ => PassList::default(),
        })
    }

    /// Pass `i`'s IR against the IR before it (computed when first shown).
    pub fn pass_diff(&self, ws: &Workspace, target: Target, i: usize) -> Option<Arc<Diff>> {
        if let Some(d) = self.pass_diffs.borrow().get(&i) {
            return Some(d.clone());
        }
        let passes = self.passes(ws, target);
        let entry = passes.passes.get(i)?;
        let d = Arc::new(Diff::new(passes.before(i), entry.doc.clone()));
        self.pass_diffs.borrow_mut().insert(i, d.clone());
        Some(d)
    }

    /// The register gutter of the kernel (GPU targets; computed on first use).
    pub fn registers(&self, ws: &Workspace, target: Target) -> Option<&Result<RegisterGutter, StageError>> {
        self.registers
            .get_or_init(|| {
                let info = self.config.as_ref().ok()?;
                pipeline::register_profile(ws, &self.name, &info.config, target)
                    .map(|r| r.map(|p| RegisterGutter::new(&p)))
            })
            .as_ref()
    }

    // What the views read: the caches as the last frame left them ([`crate::app::App::frame`]
    // fills them for the panes on screen); nothing here computes.

    /// The pass pipeline, once computed (none before).
    pub fn shown_passes(&self) -> &PassList {
        self.passes.get().unwrap_or(&NO_PASSES)
    }

    /// Pass `i`'s diff, once computed.
    pub fn shown_pass_diff(&self, i: usize) -> Option<Arc<Diff>> {
        self.pass_diffs.borrow().get(&i).cloned()
    }

    /// The register gutter, once computed.
    pub fn shown_registers(&self) -> Option<&Result<RegisterGutter, StageError>> {
        self.registers.get().and_then(Option::as_ref)
    }

    /// The diff of `stage` against the stage before it, once computed.
    pub fn shown_stage_diff(&self, stage: Stage) -> Option<Arc<Diff>> {
        self.stage_diffs[stage_index(stage)].get().cloned().flatten()
    }
}

static NO_PASSES: PassList = PassList { passes: Vec::new(), failure: None };
