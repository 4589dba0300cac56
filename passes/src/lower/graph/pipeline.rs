//! `dist.pipeline(stage, stages=S, microbatches=M, axis="pp")(x, W1, ...)`
//! (docs/language.md, "Pipeline parallelism"): the GPipe schedule, written out in Graph
//! IR. `x` is split along dim 0 into M microbatches (`graph.split {pipeline, role =
//! "microbatches"}`), each stacked parameter along dim 0 into its S stage slices (`role =
//! "stages"`, then a reshape dropping the slice's dim); then, tick by tick (tick t runs
//! stage k on microbatch t − k), each stage's microbatch arrives through a `dist.send`
//! from the previous stage and `stage` is inlined with its slices, every op tagged
//! `{pipeline, stage, microbatch, tick}`; the last stage's outputs are concatenated.
//! On one device this is `stage` applied S times to each microbatch; on a mesh each
//! stage's ops run on the devices at its position of `axis` (`dist::propagate` places
//! the values, `interp::graph::run_graph_on_mesh` runs them).

use super::*;

/// The tags of one stage's ops.
fn stage_tags(axis: &str, stage: usize, microbatch: usize, tick: usize) -> [(&'static str, Attr); 4] {
    [
        ("pipeline", Attr::Str(SmolStr::new(axis))),
        ("stage", Attr::Int(stage as i64)),
        ("microbatch", Attr::Int(microbatch as i64)),
        ("tick", Attr::Int(tick as i64)),
    ]
}

impl Body<'_, '_, '_> {
    pub(super) fn pipeline_call(
        &mut self,
        e: ExprId,
        of: &str,
        (stages, microbatches): (i64, i64),
        axis: &str,
        args: &[Arg],
    ) -> R<Val> {
        let range = self.range(e);
        let loc = self.loc(range);
        let callee = self.callee(of, range)?;
        let env = self.bind_arguments(&callee, args, range)?;
        let (s, m) = (stages as usize, microbatches as usize);
        let first = SmolStr::new(&callee.sig.params[0].name);
        let Some(Val::One(x)) = env.get(&first).cloned() else {
            return unsupported(format!("`dist.pipeline({of})` needs a tensor activation"), range);
        };
        let Type::Tensor(xt) = self.vty(x) else {
            return unsupported(format!("`dist.pipeline({of})` needs a tensor activation"), range);
        };
        let per = xt.dims[0].floor_div(&Dim::constant(microbatches)).ok_or_else(|| LowerError {
            message: format!("`dist.pipeline` cannot split {} into {m} microbatches", xt.dims[0]),
            range,
        })?;
        let mut mb_dims = xt.dims.clone();
        mb_dims[0] = per;
        let pipeline = ("pipeline", Attr::Str(SmolStr::new(axis)));
        let split =
            |role: &str| vec![("axis", Attr::Int(0)), pipeline.clone(), ("role", Attr::Str(SmolStr::new(role)))];
        let mb_t = Type::Tensor(TensorType { dims: mb_dims, ..xt.clone() });
        let mut act = self.g.b.op(OpKind::Split, vec![x], vec![mb_t; m], split("microbatches"), &loc);
        // Each stage's parameters: its slice of every stacked tensor; scalars are shared.
        let mut per_stage: Vec<HashMap<SmolStr, Val>> = vec![HashMap::new(); s];
        for p in callee.sig.params.iter().skip(1) {
            let name = SmolStr::new(&p.name);
            let Some(val) = env.get(&name).cloned() else { continue };
            let stacked = match &val {
                Val::One(v) => match self.vty(*v) {
                    Type::Tensor(t) => Some((*v, t)),
                    _ => None,
                },
                _ => None,
            };
            let Some((v, t)) = stacked else {
                per_stage.iter_mut().for_each(|env| {
                    env.insert(name.clone(), val.clone());
                });
                continue;
            };
            let mut slice = t.dims.clone();
            slice[0] = Dim::constant(1);
            let slice_t = Type::Tensor(TensorType { dims: slice, ..t.clone() });
            let parts = self.g.b.op(OpKind::Split, vec![v], vec![slice_t; s], split("stages"), &loc);
            let one_t = Type::Tensor(TensorType { dims: t.dims[1..].to_vec(), ..t.clone() });
            for (k, &part) in parts.iter().enumerate() {
                let attrs = stage_tags(axis, k, 0, 0)[..2].to_vec();
                let r = self.op1(OpKind::Reshape, vec![part], one_t.clone(), attrs, &loc);
                per_stage[k].insert(name.clone(), Val::One(r));
            }
        }
        // GPipe: at tick t, stage k runs microbatch t − k.
        for tick in 0..m + s - 1 {
            for (k, stage_env) in per_stage.iter().enumerate() {
                let Some(mb) = tick.checked_sub(k).filter(|&mb| mb < m) else { continue };
                let mut input = act[mb];
                if k > 0 {
                    let attrs = vec![
                        ("axis", Attr::Str(SmolStr::new(axis))),
                        ("from", Attr::Int(k as i64 - 1)),
                        ("to", Attr::Int(k as i64)),
                        pipeline.clone(),
                        ("microbatch", Attr::Int(mb as i64)),
                        ("tick", Attr::Int(tick as i64)),
                    ];
                    let t = self.vty(input);
                    input = self.effect(OpKind::Send, vec![input], t, attrs, &loc);
                }
                let mut env = stage_env.clone();
                env.insert(first.clone(), Val::One(input));
                let start = self.g.b.func.ops.len();
                let out = self.inline_body(&callee, env, range)?;
                for op in &mut self.g.b.func.ops[start..] {
                    if op.attr("pipeline").is_some() {
                        return unsupported(format!("a `dist.pipeline` inside the stage `{of}` of another"), range);
                    }
                    op.attrs.extend(stage_tags(axis, k, mb, tick));
                }
                match out {
                    Val::One(v) => act[mb] = v,
                    _ => return unsupported(format!("the stage `{of}` must return one tensor"), range),
                }
            }
        }
        let t = self.result_type(e)?;
        let mut attrs = vec![("axis", Attr::Int(0))];
        attrs.extend(stage_tags(axis, s - 1, m - 1, m + s - 2)[..2].iter().cloned());
        Ok(Val::One(self.op1(OpKind::Concat, act, t, attrs, &loc)))
    }
}
