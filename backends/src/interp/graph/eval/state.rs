//! KV cache state (`graph.cache_append`, `graph.cache_prune`): a cache is its keys and
//! values, `[B, H, len, D_h]` each (`tessera_passes::lower::graph` `state`). The
//! reference concatenates and slices along the sequence axis, and checks the cache's
//! `capacity` (`S_max`) at the dims of the run: an append past it, or a prune to more
//! positions than the cache holds, is an error at the op.

use tessera_passes::ir::{Attr, Op, OpId};

use super::super::values::{Tensor, Val};
use super::{Machine, R};

/// The sequence axis of `[B, H, len, D_h]`.
const SEQ: usize = 2;

impl Machine<'_> {
    fn dim_attr(&self, id: OpId, op: &Op, key: &str) -> R<(i64, String)> {
        let Some(Attr::Dims(d)) = op.attr(key) else {
            return Err(self.err(id, format!("{} needs `{key}`", op.kind.name())));
        };
        let [d] = &d[..] else { return Err(self.err(id, format!("`{key}` is one dim"))) };
        let v = d
            .eval(&|s| self.symbols.get(s).copied())
            .ok_or_else(|| self.err(id, format!("`{key}` = {d} has no value at these dims")))?;
        let text = if d.is_const() { v.to_string() } else { format!("{d} = {v}") };
        Ok((v, text))
    }

    fn cache_name(op: &Op) -> String {
        op.str_attr("cache").unwrap_or("the cache").to_string()
    }

    /// `%K', %V', %tok = graph.cache_append %K, %V, %k, %v, %tok {capacity}`.
    pub(super) fn cache_append(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data = self.data_operands(op);
        let [kc, vc, k, v] = data[..] else { return Err(self.err(id, "takes K, V, k, v and a token".into())) };
        let (capacity, capacity_text) = self.dim_attr(id, op, "capacity")?;
        let old = self.tensor(id, kc)?.dims.get(SEQ).copied().unwrap_or(0);
        let added = self.tensor(id, k)?.dims.get(SEQ).copied().unwrap_or(0);
        if (old + added) as i64 > capacity {
            return Err(self.err(
                id,
                format!(
                    "KVCache `{}` overflows: it holds {old} positions and this append adds {added}, {} in all, more than its capacity S_max ({capacity_text})",
                    Self::cache_name(op),
                    old + added
                ),
            ));
        }
        let mut out = Vec::new();
        for (i, (cached, new)) in [(kc, k), (vc, v)].into_iter().enumerate() {
            let (a, b) = (self.tensor(id, cached)?, self.tensor(id, new)?);
            let data = concat_seq(a, b)
                .ok_or_else(|| self.err(id, format!("appends a {:?} tensor to a {:?} cache", b.dims, a.dims)))?;
            let dims = self.declared_dims(id, op.results[i])?;
            out.push(self.make(id, op.results[i], dims, data)?);
        }
        out.push(Val::Token);
        Ok(out)
    }

    /// `%K', %V', %tok = graph.cache_prune %K, %V, %tok {keep}`: the last `keep` positions.
    pub(super) fn cache_prune(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let data = self.data_operands(op);
        let [kc, vc] = data[..] else { return Err(self.err(id, "takes K, V and a token".into())) };
        let (keep, keep_text) = self.dim_attr(id, op, "keep")?;
        let len = self.tensor(id, kc)?.dims.get(SEQ).copied().unwrap_or(0);
        if keep < 0 || keep as usize > len {
            return Err(self.err(
                id,
                format!(
                    "KVCache `{}`: prune keeps the last {keep_text} positions, but the cache holds {len}",
                    Self::cache_name(op)
                ),
            ));
        }
        let mut out = Vec::new();
        for (i, cached) in [kc, vc].into_iter().enumerate() {
            let data = last_positions(self.tensor(id, cached)?, keep as usize);
            let dims = self.declared_dims(id, op.results[i])?;
            out.push(self.make(id, op.results[i], dims, data)?);
        }
        out.push(Val::Token);
        Ok(out)
    }
}

/// `[B, H, n, D]` and `[B, H, m, D]` → `[B, H, n + m, D]`.
fn concat_seq(a: &Tensor, b: &Tensor) -> Option<Vec<f64>> {
    if a.dims.len() != 4 || b.dims.len() != 4 || a.dims[..SEQ] != b.dims[..SEQ] || a.dims[3] != b.dims[3] {
        return None;
    }
    let (n, m, d) = (a.dims[SEQ], b.dims[SEQ], a.dims[3]);
    let heads = a.dims[0] * a.dims[1];
    let mut out = Vec::with_capacity(heads * (n + m) * d);
    for h in 0..heads {
        out.extend_from_slice(&a.data[h * n * d..(h + 1) * n * d]);
        out.extend_from_slice(&b.data[h * m * d..(h + 1) * m * d]);
    }
    Some(out)
}

/// The last `keep` positions of `[B, H, n, D]`.
fn last_positions(a: &Tensor, keep: usize) -> Vec<f64> {
    let (n, d) = (a.dims[SEQ], a.dims[3]);
    let heads = a.dims[0] * a.dims[1];
    let mut out = Vec::with_capacity(heads * keep * d);
    for h in 0..heads {
        out.extend_from_slice(&a.data[(h * n + n - keep) * d..(h + 1) * n * d]);
    }
    out
}
