//! Copy kernels for `concat` and `split`: each tensor is viewed as `[O, D, I]` around the
//! axis (`O` the product of the dims before it, `I` of those after), and one kernel moves
//! every part. Values are copied, never rounded.

use super::*;

/// `[O, D, I]` of `dims` around `axis`.
fn around(dims: &[Dim], axis: usize) -> Vec<Dim> {
    vec![dims_product(&dims[..axis]), dims[axis].clone(), dims_product(&dims[axis + 1..])]
}

impl Planner<'_> {
    fn copy_axis(&self, op: &Op, rank: usize) -> R<usize> {
        let axis = op.int_attr("axis").unwrap_or(0);
        usize::try_from(axis)
            .ok()
            .filter(|&a| a < rank)
            .ok_or_else(|| internal(format!("axis {axis} of a rank-{rank} tensor")))
    }

    /// The result of `op` in memory (a result nobody reads is still written somewhere).
    pub(super) fn stored_result(&mut self, op: &Op, i: usize) -> R<ValueId> {
        let r = op.results[i];
        if !self.host.contains_key(&r) {
            self.store(r, &op.loc)?;
        }
        Ok(self.host[&r])
    }

    /// `concat(xs, axis)`: part `k` (`[O, Dk, I]`) lands at rows `D0 + .. + D(k-1)` of the
    /// result (`[O, E, I]`). The grid runs over `O` and blocks of `I` (over blocks of
    /// `O` when `I` is 1), each program copying its window of every part in turn.
    pub(super) fn concat_kernel(&mut self, op: &Op, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let out_ty = self.ty(op.results[0]).clone();
        let dt = out_ty.dtype().unwrap_or(DType::F32);
        let rank = out_ty.dims().len();
        let axis = self.copy_axis(op, rank)?;
        if let Some(&x) = op.operands.iter().find(|&&x| self.ty(x).dtype() != Some(dt)) {
            return unsupported(format!("concat of {} and {out_ty} (one dtype)", self.ty(x)), &loc);
        }
        let flat = dims_product(&out_ty.dims()[axis + 1..]).as_const() == Some(1);
        let mut sig = Signature::default();
        let mut body = String::new();
        let mut offset = String::new();
        // Parts of one size (a pipeline's microbatches) share one symbol and land at
        // `k * D`: the sum of every earlier part's size made the source quadratic in the
        // parts and the offset expressions as deep as there are parts (1024 microbatches
        // nested past the checker's limit).
        let sizes: Vec<_> = op.operands.iter().map(|&x| self.ty(x).dims().get(axis).cloned()).collect();
        let equal = sizes.windows(2).all(|w| w[0] == w[1]);
        for (k, &x) in op.operands.clone().iter().enumerate() {
            let d = around(self.ty(x).dims(), axis);
            let dk = if equal { "D".to_string() } else { format!("D{k}") };
            let stored = self.host[&x];
            let (decl, view) = if flat {
                (
                    format!("X{k}: Tensor[\"O\", \"{dk}\", {dt}]"),
                    self.view(stored, vec![d[0].clone(), d[1].clone()], &loc),
                )
            } else {
                (format!("X{k}: Tensor[\"O\", \"{dk}\", \"I\", {dt}]"), self.view(stored, d, &loc))
            };
            sig.push(decl, view);
            let at = if offset.is_empty() { "d0".to_string() } else { format!("{offset} + d0") };
            let _ = if flat {
                write!(
                    body,
                    "        for d0 in tile.range(0, {dk}, ctx.BN):\n            t = tile.load(X{k}[o0:o0 + ctx.BM, d0:d0 + ctx.BN])\n            inside = (d0 + tile.arange(ctx.BN))[None, :] < {dk}\n            tile.store(Y[o0:o0 + ctx.BM, {at}:{at} + ctx.BN], t, mask=inside)\n"
                )
            } else {
                write!(
                    body,
                    "            for d0 in tile.range(0, {dk}, ctx.BM):\n                t = tile.load(X{k}[o, d0:d0 + ctx.BM, i0:i0 + ctx.BN])\n                inside = (d0 + tile.arange(ctx.BM))[:, None] < {dk}\n                tile.store(Y[o, {at}:{at} + ctx.BM, i0:i0 + ctx.BN], t, mask=inside)\n"
                )
            };
            offset = if equal {
                format!("{} * D", k + 1)
            } else if offset.is_empty() {
                format!("D{k}")
            } else {
                format!("{offset} + D{k}")
            };
        }
        let y = self.stored_result(op, 0)?;
        let yd = around(out_ty.dims(), axis);
        let text = if flat {
            let yv = self.view(y, vec![yd[0].clone(), yd[1].clone()], &loc);
            sig.push(format!("Y: Tensor[\"O\", \"E\", {dt}]"), yv);
            format!(
                "@kernel.schedule(Schedule(block=(32, 64), warps=4))\ndef {name}({}):\n    \"\"\"Y = concat(X0, X1, ..., axis=1)\"\"\"\n    ctx = tile.context()\n    for o0 in tile.parallel(0, O, ctx.BM):\n{body}",
                sig.params.join(", ")
            )
        } else {
            let yv = self.view(y, yd, &loc);
            sig.push(format!("Y: Tensor[\"O\", \"E\", \"I\", {dt}]"), yv);
            format!(
                "@kernel.schedule(Schedule(block=(32, 64), warps=4))\ndef {name}({}):\n    \"\"\"Y = concat(X0, X1, ..., axis=1)\"\"\"\n    ctx = tile.context()\n    for o in tile.parallel(0, O):\n        for i0 in tile.parallel(0, I, ctx.BN):\n{body}",
                sig.params.join(", ")
            )
        };
        let n = op.operands.len();
        Ok((text, sig.args, format!("copy: concat {n} tensors along axis {axis}")))
    }

    /// `split(x, n, axis)`: part `k` (`[O, P, I]`) is rows `k*P ..` of `x` (`[O, D, I]`).
    pub(super) fn split_kernel(&mut self, op: &Op, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let x = op.operands[0];
        let x_ty = self.ty(x).clone();
        let dt = x_ty.dtype().unwrap_or(DType::F32);
        let axis = self.copy_axis(op, x_ty.dims().len())?;
        let flat = dims_product(&x_ty.dims()[axis + 1..]).as_const() == Some(1);
        let xd = around(x_ty.dims(), axis);
        let mut sig = Signature::default();
        let stored = self.host[&x];
        if flat {
            let xv = self.view(stored, vec![xd[0].clone(), xd[1].clone()], &loc);
            sig.push(format!("X: Tensor[\"O\", \"D\", {dt}]"), xv);
        } else {
            let xv = self.view(stored, xd, &loc);
            sig.push(format!("X: Tensor[\"O\", \"D\", \"I\", {dt}]"), xv);
        }
        let mut body = String::new();
        for k in 0..op.results.len() {
            let d = around(self.ty(op.results[k]).dims(), axis);
            let y = self.stored_result(op, k)?;
            let at = if k == 0 { "d0".to_string() } else { format!("{k} * P + d0") };
            let _ = if flat {
                let yv = self.view(y, vec![d[0].clone(), d[1].clone()], &loc);
                sig.push(format!("Y{k}: Tensor[\"O\", \"P\", {dt}]"), yv);
                write!(
                    body,
                    "        for d0 in tile.range(0, P, ctx.BN):\n            Y{k}[o0:o0 + ctx.BM, d0:d0 + ctx.BN] = tile.load(X[o0:o0 + ctx.BM, {at}:{at} + ctx.BN])\n"
                )
            } else {
                let yv = self.view(y, d, &loc);
                sig.push(format!("Y{k}: Tensor[\"O\", \"P\", \"I\", {dt}]"), yv);
                write!(
                    body,
                    "            for d0 in tile.range(0, P, ctx.BM):\n                Y{k}[o, d0:d0 + ctx.BM, i0:i0 + ctx.BN] = tile.load(X[o, {at}:{at} + ctx.BM, i0:i0 + ctx.BN])\n"
                )
            };
        }
        let text = if flat {
            format!(
                "@kernel.schedule(Schedule(block=(32, 64), warps=4))\ndef {name}({}):\n    \"\"\"Y0, Y1, ... = split(X, n, axis=1)\"\"\"\n    ctx = tile.context()\n    for o0 in tile.parallel(0, O, ctx.BM):\n{body}",
                sig.params.join(", ")
            )
        } else {
            format!(
                "@kernel.schedule(Schedule(block=(32, 64), warps=4))\ndef {name}({}):\n    \"\"\"Y0, Y1, ... = split(X, n, axis=1)\"\"\"\n    ctx = tile.context()\n    for o in tile.parallel(0, O):\n        for i0 in tile.parallel(0, I, ctx.BN):\n{body}",
                sig.params.join(", ")
            )
        };
        let n = op.results.len();
        Ok((text, sig.args, format!("copy: split into {n} along axis {axis}")))
    }
}
