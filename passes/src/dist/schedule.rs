//! A pipeline's schedule as Graph IR holds it: which microbatch each stage runs at each
//! tick, read back from the `{pipeline, stage, microbatch, tick}` tags the lowering of
//! `dist.pipeline` puts on every op (`lower::graph::pipeline`), so that `tessera lower`
//! and `tessera run` show the schedule the program runs, not one recomputed beside it.

use std::collections::BTreeMap;

use crate::ir::Func;

/// One pipeline of a function.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PipelineSchedule {
    /// The mesh axis its stages are on.
    pub axis: String,
    pub stages: usize,
    pub microbatches: usize,
    pub ticks: usize,
    /// `cells[stage][tick]`: the microbatch that stage runs at that tick.
    pub cells: Vec<Vec<Option<usize>>>,
    /// Under `grad`: the first tick of the backward pass, which runs once every forward
    /// tick has (`autodiff::pipeline`).
    pub backward_from: Option<usize>,
}

impl PipelineSchedule {
    /// The ticks a stage idles, over all ticks: GPipe's bubble, (S − 1) / (M + S − 1).
    pub fn bubble(&self) -> f64 {
        let busy: usize = self.cells.iter().map(|row| row.iter().flatten().count()).sum();
        let total = self.stages * self.ticks;
        if total == 0 {
            return 0.0;
        }
        1.0 - busy as f64 / total as f64
    }

    /// `GPipe over pp: 2 stages x 4 microbatches in 5 ticks, bubble 20%`.
    pub fn summary(&self) -> String {
        let passes = if self.backward_from.is_some() { ", forward (m) then backward (b)," } else { "" };
        format!(
            "GPipe over `{}`: {} stages x {} microbatches{passes} in {} ticks, each stage idle {:.0}% of them (the bubble)",
            self.axis,
            self.stages,
            self.microbatches,
            self.ticks,
            100.0 * self.bubble()
        )
    }

    /// The schedule as a table, one row per stage, one column per tick (`m2`: microbatch
    /// 2, `b2`: its backward pass, `.`: idle), each line prefixed with `prefix`.
    pub fn table(&self, prefix: &str) -> String {
        let width = format!("m{}", self.microbatches.saturating_sub(1)).len().max(4);
        let mut out = format!("{prefix}{:<9}", "tick");
        for t in 0..self.ticks {
            out.push_str(&format!("{t:>width$} "));
        }
        out = out.trim_end().to_string();
        out.push('\n');
        for (k, row) in self.cells.iter().enumerate() {
            let mut line = format!("{prefix}{:<9}", format!("stage {k}"));
            for (tick, cell) in row.iter().enumerate() {
                let pass = if self.backward_from.is_some_and(|b| tick >= b) { 'b' } else { 'm' };
                let text = cell.map_or(".".to_string(), |m| format!("{pass}{m}"));
                line.push_str(&format!("{text:>width$} "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// The pipelines of `f`, by axis, from its ops' tags.
pub fn pipeline_schedules(f: &Func) -> Vec<PipelineSchedule> {
    let mut runs: BTreeMap<String, Vec<(usize, usize, usize)>> = BTreeMap::new();
    let mut backward_from: BTreeMap<String, usize> = BTreeMap::new();
    for &id in &f.body.ops {
        let op = f.op(id);
        let (Some(axis), Some(stage), Some(mb), Some(tick)) =
            (op.str_attr("pipeline"), op.int_attr("stage"), op.int_attr("microbatch"), op.int_attr("tick"))
        else {
            continue;
        };
        runs.entry(axis.to_string()).or_default().push((stage as usize, mb as usize, tick as usize));
        if op.str_attr("pass") == Some(crate::autodiff::BACKWARD) {
            let first = backward_from.entry(axis.to_string()).or_insert(tick as usize);
            *first = (*first).min(tick as usize);
        }
    }
    runs.into_iter()
        .map(|(axis, runs)| {
            let stages = runs.iter().map(|r| r.0 + 1).max().unwrap_or(0);
            let microbatches = runs.iter().map(|r| r.1 + 1).max().unwrap_or(0);
            let ticks = runs.iter().map(|r| r.2 + 1).max().unwrap_or(0);
            let mut cells = vec![vec![None; ticks]; stages];
            for (s, m, t) in runs {
                cells[s][t] = Some(m);
            }
            let backward_from = backward_from.get(&axis).copied();
            PipelineSchedule { axis, stages, microbatches, ticks, cells, backward_from }
        })
        .collect()
}
