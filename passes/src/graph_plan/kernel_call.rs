//! Calls of the file's own kernels (`graph.call_kernel {callee, written}`): each written
//! parameter's argument is copied into a fresh buffer by a generated copy kernel (a call
//! never changes the caller's tensors, and a kernel that reads what it writes, as SAXPY's
//! `y`, starts from the argument; a constant argument such as `zeros(...)` is filled into
//! the buffer instead), then the user's kernel itself is launched on the
//! arguments with those buffers in place of its written parameters. The launch names the
//! kernel of the function's own file (`source = "file"` on `sched.kernel`), so it goes
//! through the same queries and backends as `tessera run` of that kernel.

use super::*;

impl Planner<'_> {
    fn written(op: &Op) -> R<Vec<usize>> {
        match op.attr("written") {
            Some(Attr::Ints(w)) if w.len() == op.results.len() => {
                w.iter().map(|&i| usize::try_from(i).ok().filter(|&i| i < op.operands.len())).collect::<Option<_>>()
            }
            _ => None,
        }
        .ok_or_else(|| internal("graph.call_kernel needs `written`: one parameter index per result".into()))
    }

    /// Plans `graph.call_kernel`: the copies of the written arguments, then the launch. A
    /// constant written argument (`zeros(...)`) is filled straight into the result's
    /// buffer instead of being filled and copied.
    pub(super) fn call_kernel(&mut self, id: OpId, op: &Op) -> R<()> {
        let loc = op.loc.clone();
        let written = Self::written(op)?;
        let filled = |p: &Self, i: usize| written.contains(&i) && p.splat.contains_key(&op.operands[i]);
        for (i, &o) in op.operands.iter().enumerate() {
            if !self.is_host(o) && !filled(self, i) {
                self.store(o, &loc)?;
            }
        }
        for (&i, &r) in written.iter().zip(&op.results) {
            let src = op.operands[i];
            if self.is_host(src) {
                return unsupported("a kernel that writes a scalar parameter", &loc);
            }
            if let Some(s) = self.splat.get(&src).cloned() {
                // A fill group of its own stores the constant into the result's buffer.
                self.splat.insert(r, s.clone());
                self.store(r, &loc)?;
                self.splat.remove(&r);
                self.produced.remove(&r);
                self.fills.insert(r, s);
                continue;
            }
            let ty = self.ty(r).clone();
            let buffer = self.emit(OpKind::Buffer, vec![], vec![ty], vec![], &loc)[0];
            if let Some(name) = &self.g.values[r.0 as usize].name {
                self.s.values[buffer.0 as usize].name = Some(name.clone());
            }
            self.host.insert(r, buffer);
            let dims = self.ty(r).dims().to_vec();
            self.groups.push(Group { kind: Kind::Copy { call: id, src, dst: r }, dims, ops: vec![], outputs: vec![r] });
        }
        // Readers of a result wait for the launch, not for its copy or fill.
        let launch = self.groups.len();
        for &r in &op.results {
            self.stored_by.insert(r, Some(launch));
        }
        self.groups.push(Group { kind: Kind::Single(id), dims: vec![], ops: vec![], outputs: op.results.clone() });
        Ok(())
    }

    /// The kernel of the function's own file that group `g` launches, if it is a call.
    pub(super) fn user_kernel(&self, g: usize) -> Option<String> {
        match &self.groups[g].kind {
            Kind::Single(id) if self.g.op(*id).kind == OpKind::CallKernel => {
                self.g.op(*id).str_attr("callee").map(str::to_string)
            }
            _ => None,
        }
    }

    /// The `source` of group `g`'s launch when it calls a kernel: `"file"`, or
    /// `"stdlib T"` for a stdlib kernel instantiated for `T`.
    pub(super) fn kernel_source(&self, g: usize) -> Option<String> {
        self.user_kernel(g)?;
        let Kind::Single(id) = &self.groups[g].kind else { return None };
        Some(match self.g.op(*id).str_attr("stdlib") {
            Some(dtype) => format!("stdlib {dtype}"),
            None => "file".to_string(),
        })
    }

    /// The launch of a called kernel: no generated text, its arguments in parameter order.
    pub(super) fn user_kernel_launch(&mut self, op: &Op) -> R<(String, Vec<ValueId>, String)> {
        let written = Self::written(op)?;
        let callee = op.str_attr("callee").unwrap_or("?").to_string();
        let mut args = Vec::new();
        for (i, &o) in op.operands.iter().enumerate() {
            let v = match written.iter().position(|&w| w == i) {
                Some(k) => op.results[k],
                None => o,
            };
            args.push(
                *self.host.get(&v).ok_or_else(|| internal(format!("`{callee}`'s argument %{} is not stored", v.0)))?,
            );
        }
        let summary = match op.str_attr("stdlib") {
            Some(dtype) => format!("stdlib kernel `{callee}` ({dtype})"),
            None => format!("user kernel `{callee}`"),
        };
        Ok((String::new(), args, summary))
    }

    /// `Y = X` over `[rows, cols]` views: the written argument `src` copied into `dst`.
    pub(super) fn copy_kernel(&mut self, name: &str, src: ValueId, dst: ValueId) -> R<(String, Vec<ValueId>, String)> {
        let loc = self.g.loc.clone();
        let dims = self.ty(dst).dims().to_vec();
        let (rows, cols) = as_rows_cols(&dims);
        let dt = self.ty(dst).dtype().unwrap_or(DType::F32);
        let (from, to) = (self.host[&src], self.host[&dst]);
        let x = self.view(from, vec![rows.clone(), cols.clone()], &loc);
        let y = self.view(to, vec![rows, cols], &loc);
        let text = format!(
            "@kernel.schedule(Schedule(block=(16, 128), warps=4))\ndef {name}(X: Tensor[\"R\", \"C\", {dt}], Y: Tensor[\"R\", \"C\", {dt}]):\n    \"\"\"Y = X: the argument of a kernel's written parameter, copied.\"\"\"\n    ctx = tile.context()\n    for r0 in tile.parallel(0, R, ctx.BM):\n        for c0 in tile.parallel(0, C, ctx.BN):\n            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])\n"
        );
        Ok((text, vec![x, y], "copy: a kernel's written argument".into()))
    }
}
