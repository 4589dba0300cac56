//! The pass pipeline and the register profile as the views read them.
//!
//! - passes: `tessera_passes::pipeline` (every pass from Graph to Tile IR, the IR after
//!   each), then the target code stage as the last pass. When the pipeline fails, the
//!   stages stand in, so the passes that did run still show with the failure after them.
//! - registers: `tessera_passes::analysis::register_profile` per source line, drawn as a
//!   gutter beside the source on GPU targets (the CPU has no register budget to show).

use std::collections::HashMap;
use std::sync::Arc;

use ratatui::style::Style;
use tessera_passes::analysis::RegisterProfile;
use tessera_passes::{Config, LoweredText, Stage, Target};

use crate::irdoc::IrDoc;
use crate::workspace::{Lowering, StageError, Workspace};

/// One pass and the IR after it.
#[derive(Clone, Debug)]
pub struct PassEntry {
    pub pass: String,
    pub level: Stage,
    pub doc: Arc<IrDoc>,
    /// Whether the IR differs from the previous pass's.
    pub changed: bool,
}

/// The pipeline of one kernel: the passes that ran and, when one failed, which and why.
#[derive(Clone, Debug, Default)]
pub struct PassList {
    pub passes: Vec<PassEntry>,
    pub failure: Option<(String, StageError)>,
}

impl PassList {
    /// Indices of the passes shown: all, or only those that changed the IR.
    pub fn visible(&self, hide_unchanged: bool) -> Vec<usize> {
        (0..self.passes.len()).filter(|&i| !hide_unchanged || self.passes[i].changed).collect()
    }

    /// The IR before pass `i` (none before the first).
    pub fn before(&self, i: usize) -> Option<Arc<IrDoc>> {
        i.checked_sub(1).and_then(|p| self.passes.get(p)).map(|p| p.doc.clone())
    }
}

/// What produces each stage, named the way the passes crate names its queries.
pub fn stage_pass_name(stage: Stage, target: Target) -> &'static str {
    match (stage, target) {
        (Stage::Graph, _) => "graph lowering",
        (Stage::Sched, _) => "schedule",
        (Stage::Tile, _) => "tile",
        (Stage::Target, Target::Cpu) => "codegen (LLVM IR)",
        (Stage::Target, _) => "codegen (PTX)",
    }
}

/// The pass pipeline of the kernel being viewed: every pass, then target code.
pub fn passes(ws: &Workspace, name: &str, config: &Config, lowering: &Lowering, target: Target) -> PassList {
    let Ok(snapshots) = ws.pipeline(name, config, target) else {
        return from_stages(lowering, target);
    };
    let mut list = from_snapshots(snapshots, target);
    match lowering.stage(Stage::Target) {
        Ok(doc) => list.passes.push(PassEntry {
            pass: stage_pass_name(Stage::Target, target).to_string(),
            level: Stage::Target,
            doc: doc.clone(),
            changed: true,
        }),
        Err(e) => list.failure = Some((stage_pass_name(Stage::Target, target).to_string(), e.clone())),
    }
    list
}

/// The stages as passes: each stage is the IR after the query that produces it.
pub fn from_stages(lowering: &Lowering, target: Target) -> PassList {
    let mut list = PassList::default();
    for stage in Stage::ALL {
        match lowering.stage(stage) {
            Ok(doc) => {
                let changed = list.passes.last().is_none_or(|p| p.doc.text() != doc.text());
                list.passes.push(PassEntry {
                    pass: stage_pass_name(stage, target).to_string(),
                    level: stage,
                    doc: doc.clone(),
                    changed,
                });
            }
            Err(e) => {
                list.failure = Some((stage_pass_name(stage, target).to_string(), e.clone()));
                break;
            }
        }
    }
    list
}

/// The real pipeline's snapshots `(pass, level, IR after it, changed)` as a pass list.
pub fn from_snapshots(
    snapshots: impl IntoIterator<Item = (String, Stage, LoweredText, bool)>,
    target: Target,
) -> PassList {
    PassList {
        passes: snapshots
            .into_iter()
            .map(|(pass, level, text, changed)| PassEntry {
                pass,
                level,
                doc: Arc::new(IrDoc::new(text, level, target)),
                changed,
            })
            .collect(),
        failure: None,
    }
}

/// The register profile of a kernel on a GPU target (None on the CPU).
pub fn register_profile(
    ws: &Workspace,
    name: &str,
    config: &Config,
    target: Target,
) -> Option<Result<RegisterProfile, StageError>> {
    target.is_gpu().then(|| ws.register_profile(name, config, target))
}

/// The source gutter drawn from a register profile: a number and an eighth-block bar per
/// line, coloured against the limit.
#[derive(Clone, Debug)]
pub struct RegisterGutter {
    by_line: HashMap<u32, u32>,
    pub peak: u32,
    pub limit: u32,
    /// The figures are a consumer thread's, and the limit their `setmaxnreg` count.
    pub setmaxnreg: bool,
}

impl RegisterGutter {
    /// The pane title's words for the figures (per thread, or per consumer thread), short
    /// on a narrow pane.
    pub fn title(&self, pane_width: u16) -> String {
        let wide = pane_width >= if self.setmaxnreg { 64 } else { 50 };
        match (self.setmaxnreg, wide) {
            (true, true) => format!(" consumer registers/thread: peak {} of {} (setmaxnreg) ", self.peak, self.limit),
            (true, false) => format!(" consumer regs {}/{} ", self.peak, self.limit),
            (false, true) => format!(" registers/thread: peak {} of {} ", self.peak, self.limit),
            (false, false) => format!(" regs peak {}/{} ", self.peak, self.limit),
        }
    }

    pub fn new(profile: &RegisterProfile) -> RegisterGutter {
        let mut by_line = HashMap::new();
        for &(line, live) in &profile.per_line {
            let e = by_line.entry(line).or_insert(0);
            *e = (*e).max(live);
        }
        RegisterGutter { by_line, peak: profile.peak, limit: profile.limit, setmaxnreg: profile.setmaxnreg }
    }

    /// Columns the gutter takes at a pane width.
    pub fn width(pane_width: u16) -> u16 {
        if pane_width >= 60 {
            9
        } else {
            5
        }
    }

    /// The gutter cell of a source line: text of exactly `width - 1` columns and its style.
    pub fn cell(&self, line: u32, width: u16) -> (String, Style) {
        let cols = width.saturating_sub(1) as usize;
        let Some(&live) = self.by_line.get(&line) else {
            return (" ".repeat(cols), Style::new());
        };
        let bar_cols = cols.saturating_sub(4).max(1);
        let scale = self.limit.max(self.peak).max(1) as usize;
        let eighths = (live as usize * bar_cols * 8).div_ceil(scale).min(bar_cols * 8);
        let mut bar = String::new();
        for c in 0..bar_cols {
            let e = eighths.saturating_sub(c * 8).min(8);
            bar.push([' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'][e]);
        }
        let text = if cols >= 8 { format!("{live:>3} {bar}") } else { format!("{live:>3}{bar}") };
        (text, crate::theme::pressure(live, self.limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gutter_bars_scale_with_the_limit() {
        let g = RegisterGutter::new(&RegisterProfile {
            per_line: vec![(3, 128), (3, 64), (5, 255)],
            peak: 255,
            limit: 255,
            setmaxnreg: false,
        });
        let (text, _) = g.cell(3, 9);
        assert_eq!(text, "128 ██▏ ");
        let (text, _) = g.cell(5, 9);
        assert_eq!(text, "255 ████");
        assert_eq!(g.cell(4, 9).0, "        ");
        assert_eq!(g.cell(5, 5).0.chars().count(), 4);
    }
}
