//! `graph.randn`: standard normal numbers (`tessera_passes::ir::rand::normal`).

use tessera_passes::ir::rand::normal;
use tessera_passes::ir::{Op, OpId};

use super::super::values::{numel, Val};
use super::{stream_seed, Machine, R};

impl Machine<'_> {
    /// `graph.randn {stream}` with an optional `seed` operand: element `(r, c)` of the
    /// result viewed as `[rows, cols]` (rows: the product of the leading dims) is
    /// `normal(s, r, c)`, with `s` the given seed, or without one the stream's seed in
    /// this run (`seed·1000003 + stream + 1`, as dropout), rounded to the dtype.
    pub(super) fn randn(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let Some(&r) = op.results.first() else { return Err(self.err(id, "needs a result".into())) };
        let seed = match self.data_operands(op)[..] {
            [] => {
                let stream = op.int_attr("stream").ok_or_else(|| self.err(id, "needs `stream`".into()))?;
                stream_seed(self.seed, stream)
            }
            [s] => self.scalar(id, s)? as i64,
            _ => return Err(self.err(id, "graph.randn takes an optional seed and a token".into())),
        };
        let dims = self.declared_dims(id, r)?;
        let cols = dims.last().copied().unwrap_or(1).max(1);
        let data = (0..numel(&dims)).map(|e| normal(seed, (e / cols) as i64, (e % cols) as i64) as f64).collect();
        let mut out = vec![self.make(id, r, dims, data)?];
        out.extend(op.results[1..].iter().map(|_| Val::Token));
        Ok(out)
    }
}
