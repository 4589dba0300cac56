//! Kernels instantiated from the standard library's `.tsr` kernels (norms, softmax,
//! attention, copies).

use super::*;

impl Planner<'_> {
    /// An op mapped onto one kernel: a stdlib kernel (norms, softmax, attention), a copy
    /// kernel (head splits, transposes) or a reduction.
    pub(super) fn library_kernel(&mut self, g: usize, id: OpId, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let op = self.g.op(id).clone();
        let loc = op.loc.clone();
        let mut sig = Signature::default();
        let stored = |p: &Self, v: ValueId| p.host[&v];
        let dtype_of = |p: &Self, v: ValueId| p.ty(v).dtype().unwrap_or(DType::F32);
        let out = |p: &mut Self, i: usize| -> R<ValueId> {
            let r = op.results[i];
            if !p.host.contains_key(&r) {
                // Results nobody reads are still written somewhere.
                p.store(r, &loc)?;
            }
            Ok(p.host[&r])
        };
        match op.kind {
            OpKind::RmsNorm | OpKind::LayerNorm | OpKind::Softmax => {
                let x = op.operands[0];
                let dims = self.ty(x).dims().to_vec();
                let (rows, cols) = as_rows_cols(&dims);
                let dt = dtype_of(self, x);
                if op.kind == OpKind::Softmax {
                    let rank = dims.len() as i64;
                    let axis = op.int_attr("axis").unwrap_or(-1);
                    let axis = if axis < 0 { axis + rank } else { axis };
                    if !(0..rank).contains(&axis) {
                        return Err(internal(format!("softmax over axis {axis} of a rank-{rank} tensor")));
                    }
                    if axis != rank - 1 {
                        return self.softmax_columns(&op, name, axis as usize);
                    }
                }
                let affine = op.operands.len() > 1;
                let (file, kernel) = match (op.kind, affine) {
                    (OpKind::RmsNorm, true) => ("norms.tsr", "rmsnorm"),
                    (OpKind::RmsNorm, false) => ("norms.tsr", "rms_normalize"),
                    (OpKind::LayerNorm, true) => ("norms.tsr", "efficient_layernorm"),
                    (OpKind::LayerNorm, false) => ("norms.tsr", "layer_normalize"),
                    _ => ("softmax.tsr", "stable_softmax"),
                };
                let text = instantiate(file, kernel, name, dt)?;
                let xv = self.view(stored(self, x), vec![rows.clone(), cols.clone()], &loc);
                sig.args.push(xv);
                // A LayerNorm's weight and bias by role (`affine` names them in operand
                // order); one missing, the other stands in for it, unread.
                let role = |r: &str| op.affine_index(r).and_then(|i| op.operands.get(i).copied());
                let params: Vec<ValueId> = match (op.kind, role("weight"), role("bias")) {
                    (OpKind::LayerNorm, Some(w), Some(b)) => vec![w, b],
                    (OpKind::LayerNorm, Some(only), None) | (OpKind::LayerNorm, None, Some(only)) if affine => vec![only, only],
                    _ => op.operands[1..].to_vec(),
                };
                for w in params {
                    sig.args.push(self.view(stored(self, w), vec![cols.clone()], &loc));
                }
                let y = out(self, 0)?;
                let yv = self.view(y, vec![rows, cols], &loc);
                sig.args.push(yv);
                if op.kind != OpKind::Softmax {
                    let eps = op.attr("eps").and_then(Attr::as_float).unwrap_or(1e-6);
                    let e = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::F32)], vec![("value", Attr::float(eps))], &loc)[0];
                    sig.args.push(e);
                }
                if op.kind == OpKind::LayerNorm && affine {
                    for present in [role("weight").is_some(), role("bias").is_some()] {
                        let flag = Attr::Bool(present);
                        let c = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::Bool)], vec![("value", flag)], &loc)[0];
                        sig.args.push(c);
                    }
                }
                Ok((text, sig.args, format!("stdlib {kernel} ({dt})")))
            }
            OpKind::FlashAttention => {
                let (q, k, v) = (op.operands[0], op.operands[1], op.operands[2]);
                for x in [q, k, v] {
                    if dtype_of(self, x) != DType::BF16 {
                        return unsupported("flash_attention of non-bf16 tensors: the stdlib kernel takes bf16", &loc);
                    }
                }
                if op.attr("scale").is_some() {
                    return unsupported("flash_attention with an explicit scale (the stdlib kernel uses 1/sqrt(D))", &loc);
                }
                let dims = self.ty(q).dims().to_vec();
                if dims.len() != 4 {
                    return unsupported("flash_attention of tensors that are not [B, H, S, D]", &loc);
                }
                let bh = dims[0].mul_plain(&dims[1]);
                let view3 = |p: &mut Self, x: ValueId| {
                    let d = p.ty(x).dims().to_vec();
                    let st = p.host[&x];
                    p.view(st, vec![bh.clone(), d[2].clone(), d[3].clone()], &loc)
                };
                let text = instantiate("attention.tsr", "flash_attention_2", name, DType::BF16)?;
                sig.args.push(view3(self, q));
                sig.args.push(view3(self, k));
                sig.args.push(view3(self, v));
                let o = out(self, 0)?;
                sig.args.push(self.view(o, vec![bh.clone(), dims[2].clone(), dims[3].clone()], &loc));
                let causal = op.attr("causal").is_some_and(|a| *a == Attr::Bool(true));
                let c = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::Bool)], vec![("value", Attr::Bool(causal))], &loc)[0];
                sig.args.push(c);
                let (p, seed) = match op.operands.get(3) {
                    Some(&p) if self.is_host(p) => {
                        let stream = op.int_attr("stream").unwrap_or(0);
                        (self.host[&p], self.stream_seed(stream, &loc))
                    }
                    _ => {
                        let zero = self.emit(OpKind::Constant, vec![], vec![Type::Scalar(DType::F32)], vec![("value", Attr::float(0.0))], &loc)[0];
                        let s = self.emit(OpKind::Constant, vec![], vec![Type::Index], vec![("value", Attr::Int(0))], &loc)[0];
                        (zero, s)
                    }
                };
                sig.args.push(p);
                sig.args.push(seed);
                let what = if causal { "causal" } else { "non-causal" };
                Ok((text, sig.args, format!("stdlib flash_attention_2 ({what}, dropout)")))
            }
            OpKind::SplitQkv => {
                let x = op.operands[0];
                let dt = dtype_of(self, x);
                sig.push(format!("QKV: Tensor[\"B\", \"S\", \"E\", {dt}]"), stored(self, x));
                for (i, part) in ["Q", "K", "V"].iter().enumerate() {
                    let o = out(self, i)?;
                    sig.push(format!("{part}: Tensor[\"B\", \"H\", \"S\", \"Dh\", {dt}]"), o);
                }
                let mut body = String::new();
                for (i, part) in ["Q", "K", "V"].iter().enumerate() {
                    let _ = writeln!(
                        body,
                        "                {part}[b, h, s0:s0 + ctx.BM, d0:d0 + ctx.BN] = tile.load(QKV[b, s0:s0 + ctx.BM, {i} * H * Dh + h * Dh + d0:{i} * H * Dh + h * Dh + d0 + ctx.BN])"
                    );
                }
                let text = format!(
                    "@kernel.schedule(Schedule(block=(64, 64), warps=4))\ndef {name}({}):\n    \"\"\"[B, S, 3*H*Dh] -> three [B, H, S, Dh] tensors.\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, B):\n        for h in tile.parallel(0, H):\n            for s0 in tile.parallel(0, S, ctx.BM):\n                for d0 in tile.range(0, Dh, ctx.BN):\n{body}",
                    sig.params.join(", ")
                )
                .replace("                for d0 in tile.range(0, Dh, ctx.BN):\n                ", "                for d0 in tile.range(0, Dh, ctx.BN):\n                    ")
                .replace("\n                K[", "\n                    K[")
                .replace("\n                V[", "\n                    V[");
                Ok((text, sig.args, "copy: split q, k, v heads".into()))
            }
            OpKind::MergeHeads => {
                let x = op.operands[0];
                let dt = dtype_of(self, x);
                sig.push(format!("X: Tensor[\"B\", \"H\", \"S\", \"Dh\", {dt}]"), stored(self, x));
                let o = out(self, 0)?;
                sig.push(format!("Y: Tensor[\"B\", \"S\", \"E\", {dt}]"), o);
                let text = format!(
                    "@kernel.schedule(Schedule(block=(64, 64), warps=4))\ndef {name}({}):\n    \"\"\"[B, H, S, Dh] -> [B, S, H*Dh].\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, B):\n        for h in tile.parallel(0, H):\n            for s0 in tile.parallel(0, S, ctx.BM):\n                for d0 in tile.range(0, Dh, ctx.BN):\n                    t = tile.load(X[b, h, s0:s0 + ctx.BM, d0:d0 + ctx.BN])\n                    inside = (d0 + tile.arange(ctx.BN))[None, :] < Dh\n                    tile.store(Y[b, s0:s0 + ctx.BM, h * Dh + d0:h * Dh + d0 + ctx.BN], t, mask=inside)\n",
                    sig.params.join(", ")
                );
                Ok((text, sig.args, "copy: merge heads".into()))
            }
            OpKind::GTranspose => {
                let x = op.operands[0];
                let dims = self.ty(x).dims().to_vec();
                let rank = dims.len();
                let perm = match op.attr("perm") {
                    Some(Attr::Ints(p)) => p.clone(),
                    _ => vec![],
                };
                let mut swap_last: Vec<i64> = (0..rank as i64).collect();
                if rank >= 2 {
                    swap_last.swap(rank - 1, rank - 2);
                }
                // Two adjacent dims before the last swapped (`[B, S, H, Dh] -> [B, H, S, Dh]`,
                // the backward of `merge_heads`): rows of the last dim move whole.
                let middle = (0..rank.saturating_sub(2)).find(|&i| {
                    let mut p: Vec<i64> = (0..rank as i64).collect();
                    p.swap(i, i + 1);
                    p == perm
                });
                if let Some(i) = middle {
                    let dt = dtype_of(self, x);
                    let (outer, inner) = (dims_product(&dims[..i]), dims_product(&dims[i + 2..]));
                    let (p, q) = (dims[i].clone(), dims[i + 1].clone());
                    let xv = self.view(stored(self, x), vec![outer.clone(), p.clone(), q.clone(), inner.clone()], &loc);
                    let o = out(self, 0)?;
                    let ov = self.view(o, vec![outer, q, p, inner], &loc);
                    sig.push(format!("X: Tensor[\"O\", \"P\", \"Q\", \"I\", {dt}]"), xv);
                    sig.push(format!("Y: Tensor[\"O\", \"Q\", \"P\", \"I\", {dt}]"), ov);
                    let text = format!(
                        "@kernel.schedule(Schedule(block=(64, 64), warps=4))\ndef {name}({}):\n    \"\"\"Y[o, q, p] = X[o, p, q]: rows of I moved whole.\"\"\"\n    ctx = tile.context()\n    for o in tile.parallel(0, O):\n        for p in tile.parallel(0, P):\n            for q0 in tile.parallel(0, Q, ctx.BM):\n                for i0 in tile.range(0, I, ctx.BN):\n                    Y[o, q0:q0 + ctx.BM, p, i0:i0 + ctx.BN] = tile.load(X[o, p, q0:q0 + ctx.BM, i0:i0 + ctx.BN])\n",
                        sig.params.join(", ")
                    );
                    return Ok((text, sig.args, "copy: swap two dims".into()));
                }
                if rank < 2 || perm != swap_last {
                    return unsupported(format!("a transpose with permutation {perm:?} (only the last two dims swap)"), &loc);
                }
                let dt = dtype_of(self, x);
                let batch = dims_product(&dims[..rank - 2]);
                let xv = self.view(stored(self, x), vec![batch.clone(), dims[rank - 2].clone(), dims[rank - 1].clone()], &loc);
                let o = out(self, 0)?;
                let ov = self.view(o, vec![batch, dims[rank - 1].clone(), dims[rank - 2].clone()], &loc);
                sig.push(format!("X: Tensor[\"Bt\", \"R\", \"C\", {dt}]"), xv);
                sig.push(format!("Y: Tensor[\"Bt\", \"C\", \"R\", {dt}]"), ov);
                let text = format!(
                    "@kernel.schedule(Schedule(block=(32, 32), warps=4))\ndef {name}({}):\n    \"\"\"Y[b] = X[b].T\"\"\"\n    ctx = tile.context()\n    for b in tile.parallel(0, Bt):\n        for r0 in tile.parallel(0, R, ctx.BM):\n            for c0 in tile.parallel(0, C, ctx.BN):\n                Y[b, c0:c0 + ctx.BN, r0:r0 + ctx.BM] = tile.transpose(tile.load(X[b, r0:r0 + ctx.BM, c0:c0 + ctx.BN]))\n",
                    sig.params.join(", ")
                );
                Ok((text, sig.args, "copy: transpose".into()))
            }
            OpKind::CallKernel => self.user_kernel_launch(&op),
            OpKind::Concat => self.concat_kernel(&op, name),
            OpKind::CacheAppend | OpKind::CachePrune => self.cache_kernel(&op, name),
            OpKind::Split => self.split_kernel(&op, name),
            OpKind::GReduce => self.reduce_kernel(&op, name),
            OpKind::LogSumExp => self.logsumexp_kernel(&op, name),
            other => unsupported(format!("`{}` is not mapped to a kernel yet", other.name()), &loc),
        }
        .map(|(text, args, summary)| {
            let _ = g;
            (text, args, summary)
        })
    }
}
