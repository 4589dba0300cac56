//! `grad` through `dist.pipeline` (docs/language.md, "Pipeline parallelism"): GPipe's
//! backward ticks.
//!
//! The forward pass of a pipeline is Graph IR whose ops carry `{pipeline, stage,
//! microbatch, tick}` (`lower::graph::pipeline`). The reverse walk of `backward` visits
//! them from the last tick to the first, so the backward ops of a forward op at tick `t`
//! are tagged with the same stage and microbatch and the mirrored tick `2T − 1 − t`
//! (`T` forward ticks): stage S − 1 starts the backward pass with the last microbatch,
//! and each stage's gradient reaches the previous stage through a `dist.send` the other
//! way. The backward pass starts once the loss is known, that is after every forward
//! tick: the loss reads the concatenation of all microbatches, so 1F1B's interleaving of
//! forward and backward ticks does not apply (docs/language.md says why).

use std::collections::HashMap;

use smol_str::SmolStr;

use super::Ad;
use crate::ir::*;

/// The value of `pass` on the ops of a pipeline's backward ticks.
pub const BACKWARD: &str = "backward";

/// Each pipeline's number of forward ticks, by axis.
pub(super) struct PipelineTicks(HashMap<SmolStr, i64>);

impl PipelineTicks {
    pub(super) fn of(f: &Func, forward: &[OpId]) -> Self {
        let mut ticks: HashMap<SmolStr, i64> = HashMap::new();
        for &id in forward {
            let op = f.op(id);
            if let (Some(axis), Some(tick)) = (op.str_attr("pipeline"), op.int_attr("tick")) {
                let t = ticks.entry(SmolStr::new(axis)).or_insert(0);
                *t = (*t).max(tick + 1);
            }
        }
        PipelineTicks(ticks)
    }

    /// Tags `back`, the backward ops of the forward op `f_op`, with `f_op`'s place in
    /// its pipeline: its stage (or, for a send, its `from`/`to`, which the rule swapped)
    /// and microbatch, the mirrored tick, and `pass = "backward"`. Attributes a rule set
    /// are kept.
    pub(super) fn tag(&self, f_op: &Op, back: &mut [Op]) {
        let Some(axis) = f_op.str_attr("pipeline") else { return };
        let mirrored = f_op.int_attr("tick").zip(self.0.get(axis)).map(|(t, total)| 2 * total - 1 - t);
        let mut tags: Vec<(&'static str, Attr)> = Vec::new();
        for key in ["pipeline", "stage", "microbatch"] {
            if let Some(v) = f_op.attr(key) {
                tags.push((key, v.clone()));
            }
        }
        if let Some(t) = mirrored {
            tags.push(("tick", Attr::Int(t)));
            tags.push(("pass", Attr::Str(SmolStr::new(BACKWARD))));
        }
        for op in back {
            for (key, value) in &tags {
                if op.attr(key).is_none() {
                    op.attrs.push((key, value.clone()));
                }
            }
        }
    }
}

impl Ad<'_, '_> {
    /// `dist.send {axis, from, to}` moves a microbatch's activation to the next stage:
    /// its gradient moves back, a send from `to` to `from` on the effect chain.
    pub(super) fn send_rule(&mut self, f_op: &Op, g: ValueId) {
        let x = f_op.operands[0];
        let mut attrs = Vec::new();
        for key in ["axis", "pipeline"] {
            if let Some(v) = f_op.attr(key) {
                attrs.push((key, v.clone()));
            }
        }
        if let (Some(from), Some(to)) = (f_op.int_attr("from"), f_op.int_attr("to")) {
            attrs.push(("from", Attr::Int(to)));
            attrs.push(("to", Attr::Int(from)));
        }
        let t = self.ty(g);
        let loc = self.loc.clone();
        let sent = self.b.effect(OpKind::Send, vec![g], t, attrs, &loc, &mut self.token);
        self.accumulate(x, sent);
    }
}
