//! Copy kernels for KV cache state (`graph.cache_append`, `graph.cache_prune`): the
//! cache's keys and values (`[B, H, len, D_h]`) are viewed as `[O, L, I]` (`O = B·H`,
//! `I = D_h`), and one kernel moves both. Values are copied, never rounded. The
//! capacity (`S_max`) is checked by the run against the dims it binds, before any kernel.

use super::*;

/// `[B·H, len, D_h]` of a cache tensor's dims.
fn seq_view(dims: &[Dim]) -> Vec<Dim> {
    vec![dims_product(&dims[..2]), dims[2].clone(), dims_product(&dims[3..])]
}

/// One `for d0` loop copying `n` rows of `src` (from row `from`) to `dst` (from row `to`).
fn copy_rows(body: &mut String, src: &str, dst: &str, n: &str, from: &str, to: &str) {
    let at = |base: &str| if base.is_empty() { "d0".to_string() } else { format!("{base} + d0") };
    let (f, t) = (at(from), at(to));
    let _ = write!(
        body,
        "            for d0 in tile.range(0, {n}, ctx.BM):\n                t = tile.load({src}[o, {f}:{f} + ctx.BM, i0:i0 + ctx.BN])\n                inside = (d0 + tile.arange(ctx.BM))[:, None] < {n}\n                tile.store({dst}[o, {t}:{t} + ctx.BM, i0:i0 + ctx.BN], t, mask=inside)\n"
    );
}

impl Planner<'_> {
    /// `graph.cache_append` (keys and values: the cache's `L` rows, then the new `N`) and
    /// `graph.cache_prune` (the last `N` of the cache's `L` rows) as one copy kernel.
    pub(super) fn cache_kernel(&mut self, op: &Op, name: &str) -> R<(String, Vec<ValueId>, String)> {
        let loc = op.loc.clone();
        let data: Vec<ValueId> = op.operands.iter().copied().filter(|&o| !self.is_host(o)).collect();
        let append = op.kind == OpKind::CacheAppend;
        let want = if append { 4 } else { 2 };
        if data.len() != want || data.iter().any(|&x| self.ty(x).dims().len() != 4) {
            return Err(internal(format!("{} of {} tensors, not [B, H, len, D_h]", op.kind.name(), data.len())));
        }
        let dt = self.ty(data[0]).dtype().unwrap_or(DType::F32);
        if let Some(&x) = data.iter().find(|&&x| self.ty(x).dtype() != Some(dt)) {
            return unsupported(format!("a KVCache of {dt} given a {} tensor", self.ty(x)), &loc);
        }
        let mut sig = Signature::default();
        let mut push = |p: &mut Self, decl: String, x: ValueId| {
            let view = seq_view(p.ty(x).dims());
            let v = p.view(p.host[&x], view, &loc);
            sig.push(decl, v);
        };
        push(self, format!("K0: Tensor[\"O\", \"L\", \"I\", {dt}]"), data[0]);
        push(self, format!("V0: Tensor[\"O\", \"L\", \"I\", {dt}]"), data[1]);
        if append {
            push(self, format!("K1: Tensor[\"O\", \"N\", \"I\", {dt}]"), data[2]);
            push(self, format!("V1: Tensor[\"O\", \"N\", \"I\", {dt}]"), data[3]);
        }
        for (i, part) in ["K", "V"].iter().enumerate() {
            let y = self.stored_result(op, i)?;
            let view = seq_view(self.ty(op.results[i]).dims());
            let v = self.view(y, view, &loc);
            let rows = if append { "E" } else { "N" };
            sig.push(format!("{part}Y: Tensor[\"O\", \"{rows}\", \"I\", {dt}]"), v);
        }
        let mut body = String::new();
        let what = if append {
            for part in ["K", "V"] {
                copy_rows(&mut body, &format!("{part}0"), &format!("{part}Y"), "L", "", "");
                copy_rows(&mut body, &format!("{part}1"), &format!("{part}Y"), "N", "", "L");
            }
            "copy: KV cache append"
        } else {
            for part in ["K", "V"] {
                copy_rows(&mut body, &format!("{part}0"), &format!("{part}Y"), "N", "L - N", "");
            }
            "copy: KV cache prune (the last positions)"
        };
        let text = format!(
            "@kernel.schedule(Schedule(block=(32, 64), warps=4))\ndef {name}({}):\n    \"\"\"{what}\"\"\"\n    ctx = tile.context()\n    for o in tile.parallel(0, O):\n        for i0 in tile.parallel(0, I, ctx.BN):\n{body}",
            sig.params.join(", ")
        );
        Ok((text, sig.args, what.to_string()))
    }
}
