//! Sharding propagation over Graph IR, in the manner of GSPMD: from the shardings of a
//! graph function's parameters, the sharding of every tensor value, and the collectives
//! the program needs — no more.
//!
//! A [`Sharding`] says, per dim, which mesh axis the dim is split over, and over which
//! axes the value is only a partial result (each device holds a full-size term of a
//! sum, or of a max/min, that an all-reduce completes). Rules, op by op in program
//! order:
//! - Elementwise ops keep their operands' split dims (a replicated operand is sliced
//!   locally, for free). Partial sums pass through linear ops: `+`/`-` of equally
//!   partial operands, `*` and `/` with one partial operand (the divisor never),
//!   negation, widening casts, dropout, broadcasts, transposes and reshapes; any other
//!   use of a partial value all-reduces it first.
//! - `matmul` takes M from the left operand, N from the right, batch dims from both; a
//!   split contracting dim K (on either side: the other is sliced locally) makes the
//!   result a partial sum over that axis.
//! - `sum`/`mean` over a split dim give a partial sum; `max`/`min` a partial max/min.
//! - softmax, logsumexp and the norms need their normalized dim whole, concat and split
//!   their axis, attention its keys' sequence and head dims: those dims are all-gathered.
//! - A function's results are all-reduced where partial; the all-reduces of the
//!   results (a data-parallel step's gradients) are grouped into buckets of at most
//!   [`BUCKET_BYTES`].
//! - Two operands split differently (one dim over two axes, or one axis over two dims)
//!   cannot be reconciled without re-laying a tensor out: that is a [`Conflict`], an
//!   error for the user, never a silent all-to-all.
//! - Ops without a rule here (kernel calls, KV-cache updates, ops with regions) get
//!   their operands whole (all-gathered and all-reduced) and replicated results.
//! - Collectives the program writes (`dist.all_reduce(x, axis="tp")`) need their
//!   operand laid out for them and move only that layout: an all-reduce completes a
//!   partial result over its axis, an all-gather makes the dim split over its axis whole,
//!   a reduce-scatter turns a partial sum into a split of `dim`, an all-to-all moves the
//!   split from `concat_dim` to `split_dim`. Partial sums pass through the gather and the
//!   all-to-all (they move data, they do not combine it). An operand not laid out for its
//!   collective is [`Propagation::misplaced`] (E0316).
//! - A `dist.pipeline`'s values live at its stages ([`Propagation::located`]): the split
//!   of a parameter stacked over the pipeline's axis gives part k to stage k without
//!   moving data, an op of stage k gives stage k's values, and `dist.send` moves a
//!   value to the next stage. A stage's operands are never split over the pipeline's
//!   axis (a conflict).
//!
//! A collective of the same value over the same axis and dim is needed once, where it
//! is first needed; later uses reuse it.

use smol_str::SmolStr;

use super::cost::Collective;
use tessera_frontend::check::dims::Dim;

use crate::ir::{Attr, Func, OpId, OpKind, Type, ValueId};

/// Gradient all-reduces are grouped into buckets of at most this many bytes (PyTorch
/// DDP's default bucket is 25 MB; the seeds say 16 MB).
pub const BUCKET_BYTES: u64 = 16 << 20;

/// How partial terms combine.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Combine {
    Sum,
    Max,
    Min,
}

impl Combine {
    pub fn name(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Max => "max",
            Combine::Min => "min",
        }
    }
}

/// The layout of one tensor value on the mesh.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Sharding {
    /// Per dim, the mesh axis it is split over (`None`: whole on every device).
    pub dims: Vec<Option<SmolStr>>,
    /// Axes over which the value is a partial result.
    pub partial: Vec<(SmolStr, Combine)>,
}

impl Sharding {
    pub fn replicated(rank: usize) -> Sharding {
        Sharding { dims: vec![None; rank], partial: Vec::new() }
    }

    /// `dims` given as axis names or `None`.
    pub fn split(dims: &[Option<&str>]) -> Sharding {
        Sharding { dims: dims.iter().map(|d| d.map(SmolStr::new)).collect(), partial: Vec::new() }
    }

    pub fn is_replicated(&self) -> bool {
        self.partial.is_empty() && self.dims.iter().all(Option::is_none)
    }

    /// `[dp, -, -]`, with ` partial(sum over tp)` when partial.
    pub fn describe(&self) -> String {
        let dims: Vec<&str> = self.dims.iter().map(|d| d.as_deref().unwrap_or("-")).collect();
        let mut s = format!("[{}]", dims.join(", "));
        for (axis, combine) in &self.partial {
            s.push_str(&format!(" partial({} over {axis})", combine.name()));
        }
        s
    }
}

/// One collective the program needs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Needed {
    /// The first op that needs it (the collective goes right before it).
    pub before: OpId,
    pub value: ValueId,
    pub kind: Collective,
    pub axis: SmolStr,
    /// The dim an all-gather makes whole.
    pub dim: Option<usize>,
    pub combine: Combine,
    /// For the all-reduces of the function's results: the bucket they share.
    pub bucket: Option<usize>,
    pub reason: String,
}

/// Operands split in ways no collective short of a re-layout reconciles.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Conflict {
    pub op: OpId,
    pub message: String,
}

/// What propagation decided for a collective the program writes (`dist.all_gather(x,
/// axis="tp")`): the dim an all-gather makes whole, the combine an all-reduce completes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Written {
    pub op: OpId,
    pub dim: Option<usize>,
    pub combine: Option<Combine>,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Propagation {
    /// Per value; `None` for values that are not tensors.
    pub shardings: Vec<Option<Sharding>>,
    pub collectives: Vec<Needed>,
    pub conflicts: Vec<Conflict>,
    /// The collectives the program writes, as their operands' layouts complete them.
    pub written: Vec<Written>,
    /// Written collectives whose operand is not laid out for them (an all-gather of a
    /// tensor not split over its axis, an all-reduce of one that is not partial): E0316.
    pub misplaced: Vec<Conflict>,
    /// Per value, the pipeline stage it lives at (the pipeline's mesh axis and the
    /// stage's position on it), for the values of a `dist.pipeline`; `None`: wherever
    /// its layout says.
    pub located: Vec<Option<(SmolStr, usize)>>,
    /// Which collectives (indices into `collectives`, in the order they apply) each
    /// (op, operand index) reads through.
    pub uses: Vec<(OpId, usize, usize)>,
}

impl Propagation {
    pub fn sharding(&self, v: ValueId) -> Option<&Sharding> {
        self.shardings.get(v.0 as usize).and_then(Option::as_ref)
    }

    /// How many collective ops the program runs: one per bucket for bucketed
    /// all-reduces, one per entry otherwise.
    pub fn collective_count(&self, kind: Collective) -> usize {
        let mut buckets = std::collections::BTreeSet::new();
        let mut count = 0;
        for n in self.collectives.iter().filter(|n| n.kind == kind) {
            match n.bucket {
                Some(b) => {
                    buckets.insert(b);
                }
                None => count += 1,
            }
        }
        count + buckets.len()
    }
}

/// Propagates `params` (one per parameter of `f`; `None` is replicated) through `f`.
/// `value_bytes` gives a value's global size in bytes where the dims are known (for
/// bucketing).
pub fn propagate(f: &Func, params: &[Option<Sharding>], value_bytes: &dyn Fn(ValueId) -> Option<u64>) -> Propagation {
    let mut p = Propagator {
        f,
        out: Propagation {
            shardings: vec![None; f.values.len()],
            located: vec![None; f.values.len()],
            ..Default::default()
        },
    };
    for (i, &v) in f.params.iter().enumerate() {
        if let Type::Tensor(t) = f.ty(v) {
            let s = params.get(i).cloned().flatten().unwrap_or_else(|| Sharding::replicated(t.dims.len()));
            p.out.shardings[v.0 as usize] = Some(s);
        }
    }
    for &id in &f.body.ops {
        p.op(id);
    }
    bucketize(&mut p.out, f, value_bytes);
    p.out
}

struct Propagator<'f> {
    f: &'f Func,
    out: Propagation,
}

/// The operand shardings one op sees, after the collectives it needs.
type Operands = Vec<Option<Sharding>>;

impl Propagator<'_> {
    fn rank(&self, v: ValueId) -> Option<usize> {
        match self.f.ty(v) {
            Type::Tensor(t) => Some(t.dims.len()),
            _ => None,
        }
    }

    fn current(&self, v: ValueId) -> Option<Sharding> {
        let rank = self.rank(v)?;
        Some(self.out.shardings[v.0 as usize].clone().unwrap_or_else(|| Sharding::replicated(rank)))
    }

    #[allow(clippy::too_many_arguments)]
    fn need(
        &mut self,
        before: OpId,
        operand: usize,
        value: ValueId,
        kind: Collective,
        axis: &SmolStr,
        dim: Option<usize>,
        combine: Combine,
        reason: &str,
    ) {
        let existing = self.out.collectives.iter().position(|n| {
            n.value == value && n.kind == kind && n.axis == *axis && n.dim == dim && n.combine == combine
        });
        let index = existing.unwrap_or(self.out.collectives.len());
        self.out.uses.push((before, operand, index));
        if existing.is_none() {
            self.out.collectives.push(Needed {
                before,
                value,
                kind,
                axis: axis.clone(),
                dim,
                combine,
                bucket: None,
                reason: reason.to_string(),
            });
        }
    }

    /// All-reduces operand `i` where it is partial.
    fn reduce(&mut self, id: OpId, ops: &mut Operands, i: usize, reason: &str) {
        let v = self.f.op(id).operands[i];
        let Some(s) = ops[i].as_mut() else { return };
        for (axis, combine) in std::mem::take(&mut s.partial) {
            self.need(id, i, v, Collective::AllReduce, &axis, None, combine, reason);
        }
    }

    /// All-gathers dim `d` of operand `i` where it is split.
    fn gather(&mut self, id: OpId, ops: &mut Operands, i: usize, d: usize, reason: &str) {
        let v = self.f.op(id).operands[i];
        let Some(s) = ops[i].as_mut() else { return };
        if let Some(axis) = s.dims.get_mut(d).and_then(Option::take) {
            self.need(id, i, v, Collective::AllGather, &axis, Some(d), Combine::Sum, reason);
        }
    }

    fn whole(&mut self, id: OpId, ops: &mut Operands, i: usize, reason: &str) {
        self.reduce(id, ops, i, reason);
        for d in 0..ops[i].as_ref().map_or(0, |s| s.dims.len()) {
            self.gather(id, ops, i, d, reason);
        }
    }

    fn conflict(&mut self, id: OpId, message: String) {
        self.out.conflicts.push(Conflict { op: id, message });
    }

    fn set(&mut self, v: ValueId, s: Sharding) {
        if self.rank(v) == Some(s.dims.len()) {
            self.out.shardings[v.0 as usize] = Some(s);
        }
    }

    fn op(&mut self, id: OpId) {
        if !self.pipeline_op(id) {
            return;
        }
        self.layout_op(id);
    }

    /// Where a pipeline's values live: an op of stage k (`{pipeline, stage}`) reads
    /// values of stage k or values every stage holds, and its results are stage k's; a
    /// `dist.send` moves a value from one stage to the next; the split of a stacked
    /// parameter over the pipeline's axis gives part k to stage k, with no
    /// communication. Other ops keep the location of their operands. False when the op's
    /// layout is decided here (the stacked split).
    fn pipeline_op(&mut self, id: OpId) -> bool {
        let op = self.f.op(id);
        let stage = match (op.str_attr("pipeline"), op.int_attr("stage")) {
            (Some(axis), Some(k)) => Some((SmolStr::new(axis), k as usize)),
            _ => None,
        };
        let tensors: Vec<ValueId> = op.operands.iter().copied().filter(|&v| self.rank(v).is_some()).collect();
        if op.kind == OpKind::Split && op.str_attr("pipeline").is_some() && op.str_attr("role") == Some("stages") {
            let axis = SmolStr::new(op.str_attr("pipeline").unwrap_or(""));
            let Some(s) = self.current(op.operands[0]) else { return true };
            if s.dims.first() != Some(&Some(axis.clone())) {
                return true; // replicated over the pipeline's axis: every stage slices it
            }
            for (k, &r) in op.results.iter().enumerate() {
                let mut part = s.clone();
                part.dims[0] = None;
                self.set(r, part);
                self.out.located[r.0 as usize] = Some((axis.clone(), k));
            }
            return false;
        }
        if op.kind == OpKind::Concat && op.str_attr("role") == Some("stages") {
            return self.stage_gradients(id);
        }
        let from: Vec<(SmolStr, usize)> =
            tensors.iter().filter_map(|v| self.out.located[v.0 as usize].clone()).collect();
        let here = match (&stage, op.kind) {
            (_, OpKind::Send) => {
                let axis = SmolStr::new(op.str_attr("axis").unwrap_or(""));
                let (a, b) = (op.int_attr("from").unwrap_or(0) as usize, op.int_attr("to").unwrap_or(0) as usize);
                if from.iter().any(|l| *l != (axis.clone(), a)) {
                    self.conflict(
                        id,
                        format!("internal error: `dist.send` from stage {a} of a value that is not there"),
                    );
                }
                Some((axis, b))
            }
            (Some(st), _) => {
                if let Some(other) = from.iter().find(|l| *l != st) {
                    let message = format!(
                        "internal error: an op of pipeline stage {} reads a value of stage {} without a send",
                        st.1, other.1
                    );
                    self.conflict(id, message);
                }
                if tensors.iter().any(|&v| self.current(v).is_some_and(|s| s.dims.contains(&Some(st.0.clone())))) {
                    let message = format!(
                        "a pipeline stage's operand is split over the pipeline's axis `{}`: each stage holds its \
                         operands on its own devices",
                        st.0
                    );
                    self.conflict(id, message);
                }
                Some(st.clone())
            }
            (None, OpKind::Return) => None,
            (None, _) => {
                if from.windows(2).any(|w| w[0] != w[1]) {
                    self.conflict(id, "an op reads values of two pipeline stages".into());
                }
                from.first().cloned()
            }
        };
        for &r in &op.results {
            self.out.located[r.0 as usize] = here.clone();
        }
        true
    }

    /// Under `grad`, the concatenation of the stages' gradients of a stacked parameter
    /// (the adjoint of its split into stages): part k is stage k's, so the result is
    /// split over the pipeline's axis along dim 0, each device holding its stage's part,
    /// and nothing moves. False: the layout is decided here.
    fn stage_gradients(&mut self, id: OpId) -> bool {
        let op = self.f.op(id);
        let axis = SmolStr::new(op.str_attr("pipeline").unwrap_or(""));
        for (k, &part) in op.operands.iter().enumerate() {
            let at = self.out.located[part.0 as usize].clone();
            if at.as_ref().is_some_and(|(a, stage)| *a != axis || *stage != k) {
                let message =
                    format!("internal error: stage {k}'s gradient of a stacked parameter is not on stage {k}");
                self.conflict(id, message);
            }
        }
        let Some(mut s) = op.operands.first().and_then(|&p| self.current(p)) else { return false };
        if op.operands.iter().any(|&p| self.current(p).as_ref() != Some(&s)) {
            self.conflict(id, "the stages' gradients of a stacked parameter are laid out differently".into());
            return false;
        }
        if s.dims.iter().any(|d| d.as_ref() == Some(&axis)) {
            self.conflict(id, format!("a stage's gradient is split over the pipeline's axis `{axis}`"));
            return false;
        }
        s.dims[0] = Some(axis);
        if let Some(&r) = op.results.first() {
            self.set(r, s);
        }
        false
    }

    fn layout_op(&mut self, id: OpId) {
        let op = self.f.op(id);
        let mut ops: Operands = op.operands.iter().map(|&v| self.current(v)).collect();
        let tensors: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].is_some()).collect();
        if tensors.is_empty() && op.kind != OpKind::Return {
            return; // results replicated (the default)
        }
        let name = op_label(op.kind);
        let result = |p: &Self| op.results.first().and_then(|&r| p.rank(r));
        match op.kind {
            // A dim's size is the global one whatever the layout: nothing moves.
            OpKind::TensorDim => {}
            OpKind::Return => {
                for i in tensors {
                    self.reduce(id, &mut ops, i, "a result of the function is whole");
                }
            }
            _ if !op.regions.is_empty() => self.fallback(id, &mut ops, &tensors),
            k if k.is_elementwise() || matches!(k, OpKind::Select | OpKind::Dropout) => {
                let Some(rank) = result(self) else { return self.fallback(id, &mut ops, &tensors) };
                if tensors.iter().any(|&i| ops[i].as_ref().is_some_and(|s| s.dims.len() != rank)) {
                    return self.fallback(id, &mut ops, &tensors);
                }
                self.elementwise_partials(id, &mut ops, &tensors);
                let s = self.merge(id, &ops, &tensors, rank, name);
                let partial = tensors.iter().find_map(|&i| ops[i].as_ref().filter(|s| !s.partial.is_empty()));
                let partial = partial.map(|s| s.partial.clone()).unwrap_or_default();
                for &r in &op.results {
                    self.set(r, Sharding { dims: s.dims.clone(), partial: partial.clone() });
                }
            }
            OpKind::MatMul => self.matmul(id, &mut ops),
            OpKind::GReduce => self.reduction(id, &mut ops),
            OpKind::Softmax | OpKind::LogSumExp | OpKind::Concat | OpKind::Split => {
                let rank = ops[tensors[0]].as_ref().map_or(0, |s| s.dims.len());
                let axis = op.int_attr("axis").unwrap_or(rank as i64 - 1).rem_euclid(rank.max(1) as i64) as usize;
                for &i in &tensors {
                    self.reduce(id, &mut ops, i, &format!("`{name}` of a partial sum"));
                    self.gather(id, &mut ops, i, axis, &format!("`{name}` needs its axis {axis} whole"));
                }
                let s = self.merge(id, &ops, &tensors, rank, name);
                for &r in &op.results {
                    let mut rs = s.clone();
                    if self.rank(r) == Some(rank.saturating_sub(1)) {
                        rs.dims.remove(axis.min(rs.dims.len().saturating_sub(1)));
                    }
                    self.set(r, rs);
                }
            }
            OpKind::LayerNorm | OpKind::RmsNorm => {
                for &i in &tensors {
                    self.reduce(id, &mut ops, i, &format!("`{name}` of a partial sum"));
                    let last = ops[i].as_ref().map_or(0, |s| s.dims.len()).saturating_sub(1);
                    self.gather(id, &mut ops, i, last, &format!("`{name}` normalizes its last dim whole"));
                }
                let s = ops[0].clone().unwrap_or_default();
                self.set(op.results[0], s);
            }
            OpKind::GTranspose => {
                let Some(s) = ops[0].clone() else { return };
                let perm: Vec<usize> = match op.attr("perm") {
                    Some(Attr::Ints(p)) => p.iter().map(|&x| x as usize).collect(),
                    _ => (0..s.dims.len()).rev().collect(),
                };
                let dims = perm.iter().map(|&d| s.dims.get(d).cloned().flatten()).collect();
                self.set(op.results[0], Sharding { dims, partial: s.partial });
            }
            OpKind::GBroadcast | OpKind::GExpandDims | OpKind::Reshape => self.reshape_like(id, &mut ops),
            OpKind::FlashAttention => self.attention(id, &mut ops, &tensors),
            // A send moves a stage's value whole to the next stage (`pipeline_op` says
            // where); its layout over the other axes stays.
            OpKind::Send => {
                let s = ops[0].clone().unwrap_or_default();
                self.set(op.results[0], s);
            }
            k if k.is_collective() => self.written(id, &ops),
            _ => self.fallback(id, &mut ops, &tensors),
        }
    }

    /// A collective the program writes: it needs its operand laid out for it (split over
    /// its axis, or partial over it) and moves that layout, nothing else. A misplaced one
    /// leaves the layout as it was, so that nothing after it is reported again.
    fn written(&mut self, id: OpId, ops: &Operands) {
        let op = self.f.op(id);
        let Some(mut s) = ops.first().cloned().flatten() else { return };
        let axis = SmolStr::new(op.str_attr("axis").unwrap_or(""));
        let layout = s.describe();
        let name = op_label(op.kind);
        let split_at = |s: &Sharding| s.dims.iter().position(|d| d.as_ref() == Some(&axis));
        let mut written = Written { op: id, dim: None, combine: None };
        let problem: Option<String> = match op.kind {
            OpKind::AllReduce => match s.partial.iter().position(|(a, _)| *a == axis) {
                Some(i) => {
                    written.combine = Some(s.partial.remove(i).1);
                    None
                }
                None => Some(format!(
                    "`{name}` over `{axis}` has nothing to complete: its operand is not a partial result over \
                     `{axis}` (its layout is {layout})"
                )),
            },
            OpKind::AllGather => match split_at(&s) {
                Some(d) => {
                    s.dims[d] = None;
                    written.dim = Some(d);
                    None
                }
                None => Some(format!(
                    "`{name}` over `{axis}` has nothing to gather: its operand is not split over `{axis}` (its \
                     layout is {layout})"
                )),
            },
            OpKind::ReduceScatter => {
                let d = op.int_attr("dim").unwrap_or(0) as usize;
                match s.partial.iter().position(|(a, _)| *a == axis) {
                    None => Some(format!(
                        "`{name}` over `{axis}` has nothing to reduce: its operand is not a partial sum over \
                         `{axis}` (its layout is {layout})"
                    )),
                    Some(i) if s.partial[i].1 != Combine::Sum => Some(format!(
                        "`{name}` sums, but its operand is a partial {} over `{axis}`: complete it with \
                         `dist.all_reduce`",
                        s.partial[i].1.name()
                    )),
                    Some(_) if d >= s.dims.len() => {
                        Some(format!("`{name}` scatters dim {d} of a rank-{} tensor", s.dims.len()))
                    }
                    Some(_) if s.dims[d].is_some() => Some(format!(
                        "`{name}` would split dim {d} over `{axis}`, but it is split over `{}` already (the \
                         operand's layout is {layout})",
                        s.dims[d].as_deref().unwrap_or("?")
                    )),
                    Some(i) => {
                        s.partial.remove(i);
                        s.dims[d] = Some(axis.clone());
                        written.dim = Some(d);
                        None
                    }
                }
            }
            OpKind::AllToAll => {
                let split = op.int_attr("split_dim").unwrap_or(0) as usize;
                let concat = op.int_attr("concat_dim").unwrap_or(0) as usize;
                if split >= s.dims.len() || concat >= s.dims.len() {
                    Some(format!("`{name}` names dims {split} and {concat} of a rank-{} tensor", s.dims.len()))
                } else if s.dims[concat].as_ref() != Some(&axis) {
                    Some(format!(
                        "`{name}` over `{axis}` moves the split of dim {concat} (concat_dim), but its operand's dim \
                         {concat} is not split over `{axis}` (its layout is {layout})"
                    ))
                } else if let Some(other) = &s.dims[split] {
                    Some(format!(
                        "`{name}` would split dim {split} (split_dim) over `{axis}`, but it is split over `{other}` \
                         already (the operand's layout is {layout})"
                    ))
                } else {
                    s.dims[concat] = None;
                    s.dims[split] = Some(axis.clone());
                    None
                }
            }
            _ => None,
        };
        match problem {
            Some(message) => self.out.misplaced.push(Conflict { op: id, message }),
            None => self.out.written.push(written),
        }
        if let Some(&r) = op.results.first() {
            self.set(r, s);
        }
    }

    /// Whole operands, replicated results.
    fn fallback(&mut self, id: OpId, ops: &mut Operands, tensors: &[usize]) {
        let name = op_label(self.f.op(id).kind);
        for &i in tensors {
            self.whole(id, ops, i, &format!("`{name}` has no sharding rule: it takes whole operands"));
        }
    }

    /// Which partial operands an elementwise op may keep partial (see the module doc);
    /// the others are all-reduced.
    fn elementwise_partials(&mut self, id: OpId, ops: &mut Operands, tensors: &[usize]) {
        let op = self.f.op(id);
        let partial: Vec<usize> =
            tensors.iter().copied().filter(|&i| ops[i].as_ref().is_some_and(|s| !s.partial.is_empty())).collect();
        if partial.is_empty() {
            return;
        }
        let sums = |i: usize| ops[i].as_ref().is_some_and(|s| s.partial.iter().all(|(_, c)| *c == Combine::Sum));
        let widening = |p: &Self| {
            let bits = |v: ValueId| p.f.ty(v).dtype().map(|d| d.bits());
            matches!((bits(op.operands[0]), bits(op.results[0])), (Some(a), Some(b)) if b >= a)
        };
        let keep: Option<usize> = match op.kind {
            OpKind::Add | OpKind::Sub => {
                let first = ops[partial[0]].as_ref().map(|s| s.partial.clone());
                let equal = tensors.iter().all(|&i| ops[i].as_ref().map(|s| s.partial.clone()) == first);
                if equal && sums(partial[0]) {
                    return;
                }
                None
            }
            OpKind::Mul if sums(partial[0]) => Some(partial[0]),
            OpKind::Div if partial[0] == 0 && sums(0) => Some(0),
            OpKind::Neg | OpKind::Dropout if sums(partial[0]) => Some(partial[0]),
            OpKind::Cast if widening(self) && sums(partial[0]) => Some(partial[0]),
            _ => None,
        };
        let name = op_label(op.kind);
        for &i in &partial {
            if Some(i) != keep {
                self.reduce(id, ops, i, &format!("`{name}` is not linear in this operand"));
            }
        }
    }

    /// The split dims several operands of one rank agree on; disagreements are
    /// conflicts (the first operand's split wins).
    fn merge(&mut self, id: OpId, ops: &Operands, tensors: &[usize], rank: usize, name: &str) -> Sharding {
        let mut dims: Vec<Option<SmolStr>> = vec![None; rank];
        for &i in tensors {
            let Some(s) = &ops[i] else { continue };
            for (d, axis) in s.dims.iter().enumerate().take(rank) {
                let Some(axis) = axis else { continue };
                match &dims[d] {
                    None => {
                        if let Some(other) = dims.iter().position(|x| x.as_ref() == Some(axis)) {
                            self.conflict(
                                id,
                                format!(
                                    "operands of `{name}` split dims {other} and {d} over the same mesh axis `{axis}`"
                                ),
                            );
                            continue;
                        }
                        dims[d] = Some(axis.clone());
                    }
                    Some(existing) if existing != axis => {
                        self.conflict(
                            id,
                            format!("operands of `{name}` split dim {d} over different mesh axes, `{existing}` and `{axis}`"),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
        Sharding { dims, partial: Vec::new() }
    }

    fn matmul(&mut self, id: OpId, ops: &mut Operands) {
        let op = self.f.op(id);
        let (Some(mut a), Some(mut b)) = (ops[0].clone(), ops.get(1).cloned().flatten()) else {
            return self.fallback(id, ops, &[0, 1]);
        };
        let Some(rank) = op.results.first().and_then(|&r| self.rank(r)) else { return };
        if a.dims.len() < 2 || b.dims.len() < 2 {
            return self.fallback(id, ops, &[0, 1]);
        }
        // Linear in each operand: one partial operand stays partial.
        if !a.partial.is_empty() && !b.partial.is_empty() {
            self.reduce(id, ops, 1, "`matmul` of two partial sums");
            b.partial.clear();
        }
        for (s, i) in [(&mut a, 0), (&mut b, 1)] {
            if s.partial.iter().any(|(_, c)| *c != Combine::Sum) {
                self.reduce(id, ops, i, "`matmul` of a partial max/min");
                s.partial.clear();
            }
        }
        let (ra, rb) = (a.dims.len(), b.dims.len());
        let (m, ka) = (a.dims[ra - 2].clone(), a.dims[ra - 1].clone());
        let (kb, n) = (b.dims[rb - 2].clone(), b.dims[rb - 1].clone());
        let mut partial: Vec<(SmolStr, Combine)> = a.partial.iter().chain(&b.partial).cloned().collect();
        match (&ka, &kb) {
            (Some(x), Some(y)) if x != y => {
                self.conflict(
                    id,
                    format!("the contracting dim of `matmul` is split over `{x}` on the left and `{y}` on the right"),
                );
            }
            (Some(x), _) | (None, Some(x)) => partial.push((x.clone(), Combine::Sum)),
            (None, None) => {}
        }
        let mut dims: Vec<Option<SmolStr>> = vec![None; rank];
        // Batch dims, aligned from the right.
        let batch = rank.saturating_sub(2);
        for (d, slot) in dims.iter_mut().enumerate().take(batch) {
            let from = |s: &Sharding, r: usize| {
                (d + r).checked_sub(rank).and_then(|i| (i < r - 2).then(|| s.dims[i].clone()).flatten())
            };
            match (from(&a, ra), from(&b, rb)) {
                (Some(x), Some(y)) if x != y => {
                    self.out.conflicts.push(Conflict {
                        op: id,
                        message: format!("batch dim {d} of `matmul` is split over `{x}` and `{y}`"),
                    });
                }
                (x, y) => *slot = x.or(y),
            }
        }
        dims[rank - 2] = m;
        dims[rank - 1] = n;
        let mut seen: Vec<&SmolStr> = Vec::new();
        for axis in dims.iter().flatten().chain(partial.iter().map(|(a, _)| a)) {
            if seen.contains(&axis) {
                self.conflict(id, format!("`matmul` would split its result twice over mesh axis `{axis}`"));
            }
            seen.push(axis);
        }
        self.set(op.results[0], Sharding { dims, partial });
    }

    fn reduction(&mut self, id: OpId, ops: &mut Operands) {
        let op = self.f.op(id);
        let Some(s) = ops[0].clone() else { return };
        let kind = op.str_attr("kind").unwrap_or("sum");
        let combine = match kind {
            "max" => Combine::Max,
            "min" => Combine::Min,
            _ => Combine::Sum,
        };
        let mut s = s;
        if !s.partial.is_empty() && (combine != Combine::Sum || s.partial.iter().any(|(_, c)| *c != Combine::Sum)) {
            self.reduce(id, ops, 0, &format!("`{kind}` of a partial result"));
            s.partial.clear();
        }
        let axes: Vec<usize> = match op.attr("axes") {
            Some(Attr::Ints(a)) => a.iter().map(|&x| x as usize).collect(),
            _ => (0..s.dims.len()).collect(),
        };
        let keepdim = matches!(op.attr("keepdim"), Some(Attr::Bool(true)));
        let mut dims = Vec::new();
        for (d, axis) in s.dims.iter().enumerate() {
            if axes.contains(&d) {
                if let Some(a) = axis {
                    s.partial.push((a.clone(), combine));
                }
                if keepdim {
                    dims.push(None);
                }
            } else {
                dims.push(axis.clone());
            }
        }
        self.set(op.results[0], Sharding { dims, partial: s.partial });
    }

    /// Broadcast, expand_dims and reshape: a split dim carries over to the result dim
    /// of the same size in the same place (aligned from the right for broadcasts), or
    /// leads a merged dim; otherwise it is gathered first.
    fn reshape_like(&mut self, id: OpId, ops: &mut Operands) {
        let op = self.f.op(id);
        let Some(s) = ops[0].clone() else { return };
        let (Type::Tensor(src), Some(Type::Tensor(dst))) =
            (self.f.ty(op.operands[0]), op.results.first().map(|&r| self.f.ty(r)))
        else {
            return self.fallback(id, ops, &[0]);
        };
        let mut dims: Vec<Option<SmolStr>> = vec![None; dst.dims.len()];
        let offset = dst.dims.len() as i64 - src.dims.len() as i64;
        let name = op_label(op.kind);
        for (d, axis) in s.dims.iter().enumerate() {
            let Some(axis) = axis else { continue };
            let target = match op.kind {
                OpKind::GBroadcast => Some(d as i64 + offset),
                OpKind::GExpandDims => {
                    let at = op.int_attr("axis").unwrap_or(0).rem_euclid(dst.dims.len().max(1) as i64);
                    Some(if (d as i64) < at { d as i64 } else { d as i64 + 1 })
                }
                _ => reshape_target(&src.dims, &dst.dims, d).map(|t| t as i64),
            };
            match target.filter(|&t| t >= 0).map(|t| t as usize) {
                Some(t) if t < dims.len() && (dst.dims[t] == src.dims[d] || op.kind == OpKind::Reshape) => {
                    dims[t] = Some(axis.clone())
                }
                _ => {
                    self.gather(id, ops, 0, d, &format!("`{name}` moves dim {d}, which is split"));
                }
            }
        }
        let partial = ops[0].as_ref().map(|s| s.partial.clone()).unwrap_or_default();
        self.set(op.results[0], Sharding { dims, partial });
    }

    fn attention(&mut self, id: OpId, ops: &mut Operands, tensors: &[usize]) {
        for &i in tensors {
            self.reduce(id, ops, i, "attention of a partial sum");
        }
        // q [B, H, Sq, D]; k, v [B, H, Sk, D]: keys need their sequence whole, every
        // operand its head dim.
        for &i in tensors.iter().filter(|&&i| i < 3) {
            if i > 0 {
                self.gather(id, ops, i, 2, "attention reads the whole key/value sequence");
            }
            self.gather(id, ops, i, 3, "attention needs whole head dims");
        }
        for &i in tensors.iter().filter(|&&i| i >= 3) {
            self.whole(id, ops, i, "attention takes this operand whole");
        }
        let qkv: Vec<usize> = tensors.iter().copied().filter(|&i| i < 3).collect();
        let merged = self.merge(id, ops, &qkv, 4, "flash_attention");
        let mut dims = merged.dims;
        dims[2] = ops[0].as_ref().and_then(|s| s.dims[2].clone());
        self.set(self.f.op(id).results[0], Sharding { dims, partial: Vec::new() });
    }
}

/// Where dim `d` of a reshape's source goes: the same dim in an unchanged prefix, or
/// the result dim it leads when it and the dims after it merge into one (`[B, S, D]`
/// → `[B*S, D]` keeps a split `B`), with the rest unchanged.
fn reshape_target(src: &[Dim], dst: &[Dim], d: usize) -> Option<usize> {
    // Dims of size 1 added or dropped (`[1, D, F]` → `[D, F]`): the other dims keep their
    // order, and a split dim (never of size 1) goes to its counterpart.
    let unit = |x: &&Dim| x.as_const() == Some(1);
    let (src_rest, dst_rest): (Vec<&Dim>, Vec<&Dim>) =
        (src.iter().filter(|x| !unit(x)).collect(), dst.iter().filter(|x| !unit(x)).collect());
    if src_rest == dst_rest && !unit(&&src[d]) {
        let nth = src[..d].iter().filter(|x| !unit(x)).count();
        return dst.iter().enumerate().filter(|(_, x)| !unit(x)).nth(nth).map(|(i, _)| i);
    }
    let prefix = src.iter().zip(dst).take_while(|(a, b)| a == b).count();
    if d < prefix {
        return Some(d);
    }
    if d != prefix || prefix >= dst.len() {
        return None;
    }
    let mut product = src[d].clone();
    for k in d + 1..=src.len() {
        let rest_src = &src[k..];
        let rest_dst = &dst[prefix + 1..];
        if product == dst[prefix] && rest_src == rest_dst {
            return Some(prefix);
        }
        if k < src.len() {
            product = product.mul_plain(&src[k]);
        }
    }
    None
}

/// Groups the all-reduces of the function's results into buckets of at most
/// [`BUCKET_BYTES`], in result order, per axis; a value of unknown size gets a bucket
/// of its own.
fn bucketize(out: &mut Propagation, f: &Func, value_bytes: &dyn Fn(ValueId) -> Option<u64>) {
    let Some(&ret) = f.body.ops.last().filter(|&&r| f.op(r).kind == OpKind::Return) else { return };
    let mut next = 0usize;
    let mut open: Vec<(SmolStr, usize, u64)> = Vec::new();
    for n in out.collectives.iter_mut() {
        if n.before != ret || n.kind != Collective::AllReduce || n.combine != Combine::Sum {
            continue;
        }
        let bytes = value_bytes(n.value);
        let slot =
            open.iter_mut().find(|(axis, _, used)| *axis == n.axis && bytes.is_some_and(|b| used + b <= BUCKET_BYTES));
        match (slot, bytes) {
            (Some((_, bucket, used)), Some(b)) => {
                *used += b;
                n.bucket = Some(*bucket);
            }
            _ => {
                n.bucket = Some(next);
                if let Some(b) = bytes {
                    open.retain(|(axis, _, _)| *axis != n.axis);
                    open.push((n.axis.clone(), next, b));
                }
                next += 1;
            }
        }
    }
}

/// How diagnostics name an op: the operator or function the user wrote.
fn op_label(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Add => "+",
        OpKind::Sub => "-",
        OpKind::Mul => "*",
        OpKind::Div => "/",
        OpKind::MatMul => "matmul",
        OpKind::Select => "where",
        // The function the user wrote: `dist.all_reduce`.
        k if k.is_collective() => k.name(),
        k => k.name().split_once('.').map_or(k.name(), |(_, n)| n),
    }
}
