//! `graph.concat` and `graph.split`: copies along one axis (exact: values are only moved).

use tessera_passes::ir::{Op, OpId};

use super::super::values::{numel, Val};
use super::{Machine, R};

/// `[outer, axis, inner]`: the dims before `axis` folded into `outer`, after it into `inner`.
fn around(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

impl Machine<'_> {
    fn axis_attr(&self, id: OpId, op: &Op, rank: usize) -> R<usize> {
        let axis = op.int_attr("axis").unwrap_or(0);
        usize::try_from(axis)
            .ok()
            .filter(|&a| a < rank)
            .ok_or_else(|| self.err(id, format!("axis {axis} of a rank-{rank} tensor")))
    }

    /// `concat(xs, axis)`: every operand has the result's dims but along `axis`.
    pub(super) fn concat(&self, id: OpId, op: &Op) -> R<Val> {
        let [r] = op.results[..] else { return Err(self.err(id, "needs one result".into())) };
        let mut xs = Vec::new();
        for &o in &op.operands {
            xs.push(self.tensor(id, o)?);
        }
        let Some(first) = xs.first() else { return Err(self.err(id, "concat of no tensors".into())) };
        let axis = self.axis_attr(id, op, first.dims.len())?;
        let mut dims = first.dims.clone();
        dims[axis] = 0;
        for x in &xs {
            let same_rest = x.dims.len() == dims.len()
                && x.dims.iter().zip(&first.dims).enumerate().all(|(k, (a, b))| k == axis || a == b);
            if !same_rest {
                return Err(self.err(id, format!("concatenates {:?} and {:?} along axis {axis}", first.dims, x.dims)));
            }
            dims[axis] += x.dims[axis];
        }
        let (outer, _, inner) = around(&dims, axis);
        let mut data = Vec::with_capacity(numel(&dims));
        for o in 0..outer {
            for x in &xs {
                let chunk = x.dims[axis] * inner;
                data.extend_from_slice(&x.data[o * chunk..(o + 1) * chunk]);
            }
        }
        self.make(id, r, dims, data)
    }

    /// `split(x, n, axis)`: `n` equal consecutive parts along `axis`.
    pub(super) fn split(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let x = self.tensor(id, self.operand(id, op, 0)?)?;
        let n = op.results.len();
        let axis = self.axis_attr(id, op, x.dims.len())?;
        if n == 0 || x.dims[axis] % n != 0 {
            return Err(self.err(id, format!("splits dim {axis} of {:?} into {n} equal parts", x.dims)));
        }
        let (outer, d, inner) = around(&x.dims, axis);
        let part = d / n;
        let mut dims = x.dims.clone();
        dims[axis] = part;
        let mut out = Vec::with_capacity(n);
        for (i, &r) in op.results.iter().enumerate() {
            let mut data = Vec::with_capacity(outer * part * inner);
            for o in 0..outer {
                let start = (o * d + i * part) * inner;
                data.extend_from_slice(&x.data[start..start + part * inner]);
            }
            out.push(self.make(id, r, dims.clone(), data)?);
        }
        Ok(out)
    }
}
