//! Matmul kernels: the stdlib `matmul` (operands `[M, K] x [K, N]`, every leading dim of
//! the left operand folded into M) or `batched_matmul` (the right operand has batch dims:
//! NumPy's broadcasting of the leading dims), instantiated for the operand dtype, with
//! the group's elementwise ops fused into the epilogue.

use super::*;

/// The operand dtypes the stdlib matmul kernels are instantiated for; they accumulate in
/// f32 (or in a narrower `@accum(T)`). fp8 operands take K in steps of 32, which every
/// `BK` of the stdlib space is.
const MATMUL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::Fp8E4m3, DType::Fp8E5m2];

impl Planner<'_> {
    pub(super) fn matmul_kernel(
        &mut self,
        g: usize,
        name: &str,
        a: ValueId,
        b: ValueId,
        result: ValueId,
    ) -> R<(String, Vec<ValueId>, String)> {
        let loc = match &self.groups[g].kind {
            Kind::Matmul { op, .. } => self.g.op(*op).loc.clone(),
            _ => self.g.loc.clone(),
        };
        let (at, bt) = (self.ty(a).clone(), self.ty(b).clone());
        let (adt, bdt) = (at.dtype().unwrap_or(DType::F32), bt.dtype().unwrap_or(DType::F32));
        if adt != bdt || !MATMUL_DTYPES.contains(&adt) {
            return unsupported(
                format!(
                    "a matmul of {adt} x {bdt} tensors: the stdlib matmul kernels take two operands of one dtype \
                     (f32, f16, bf16, fp8_e4m3 or fp8_e5m2)"
                ),
                &loc,
            );
        }
        let (ad, bd, rd) = (at.dims().to_vec(), bt.dims().to_vec(), self.ty(result).dims().to_vec());
        if ad.len() < 2 || bd.len() < 2 || rd.len() < 2 {
            return Err(internal(format!("a matmul of ranks {} and {}", ad.len(), bd.len())));
        }
        // `@accum(T)` narrower than f32: a kernel that sums in T (the stdlib one sums in f32).
        let narrow = match crate::ir::policy::acc_attrs(&[&at, &bt]).first() {
            Some((_, Attr::DType(t))) if crate::ir::policy::rounds_each_step(*t) => Some(*t),
            _ => None,
        };
        // fp8 operands say how they accumulate, as the stdlib kernel does (W0404 otherwise).
        let operand = match narrow {
            Some(t) => format!("{adt} @accum({t})"),
            None if adt.bits() == 8 => format!("{adt} @accum(f32)"),
            None => adt.to_string(),
        };
        // `@saturate` operands: the kernel's rounding of the sum to fp8 clamps.
        let saturate = self.elem_text(a).ends_with("@saturate") || self.elem_text(b).ends_with("@saturate");
        let operand = if saturate { format!("{operand} @saturate") } else { operand };
        let batched = bd.len() > 2;
        let mut sig = Signature::default();
        // Batch indices of the operands other than the stdlib's `c % BX`, as
        // (stdlib line, its replacement).
        let mut index_lines = Vec::new();
        if batched {
            let out_batch = rd[..rd.len() - 2].to_vec();
            let operands = [(a, &ad, "A", "ia", "BA", "M", "K"), (b, &bd, "B", "ib", "BB", "K", "N")];
            for (x, dims, param, var, sym, rows, cols) in operands {
                let n = dims.len();
                let view_dims = vec![dims_product(&dims[..n - 2]), dims[n - 2].clone(), dims[n - 1].clone()];
                let view = self.view(self.host[&x], view_dims, &loc);
                sig.push(format!("{param}: Tensor[\"{sym}\", \"{rows}\", \"{cols}\", {operand}]"), view);
                if let Some(expr) = self.batch_index(&dims[..n - 2], &out_batch, var, &mut sig, &loc)? {
                    index_lines.push((format!("{var} = c % {sym}"), format!("{var} = {expr}")));
                }
            }
        } else {
            let (m, k) = as_rows_cols(&ad);
            let a_view = self.view(self.host[&a], vec![m, k], &loc);
            sig.push(format!("A: Tensor[\"M\", \"K\", {operand}]"), a_view);
            sig.push(format!("B: Tensor[\"K\", \"N\", {operand}]"), self.host[&b]);
        }
        let (stdlib, indent) =
            if batched { ("batched_matmul", "                ") } else { ("matmul", "            ") };
        let template = match narrow {
            Some(t) => narrow_template(batched, t),
            None => stdlib_kernel("matmul.tsr", stdlib).ok_or_else(|| internal(format!("no stdlib {stdlib}")))?,
        };
        let mut template = replace_word(&template, "T", &adt.to_string());
        // 4-byte operands stage twice the bytes: k blocks of 64 would not fit in shared
        // memory at 128 x 128 blocks and 3 stages (192 KiB), so the space keeps BK at 32.
        if adt.bits() == 32 && narrow.is_none() {
            let space = "BK=[32, 64]";
            if !template.contains(space) {
                return Err(internal(format!("the stdlib {stdlib} no longer searches `{space}`")));
            }
            template = template.replacen(space, "BK=[32]", 1);
        }
        for (line, with) in &index_lines {
            if !template.contains(line.as_str()) {
                return Err(internal(format!("the stdlib {stdlib} no longer computes `{line}`")));
            }
            template = template.replacen(line.as_str(), with, 1);
        }
        let acc_dtype = narrow.unwrap_or(DType::F32);
        let rdt = self.ty(result).dtype().unwrap_or(DType::F32);
        let mut vars = HashMap::new();
        let cast = match self.elem_text(result) {
            t if t.contains('@') => format!("tile.cast(acc, \"{t}\")"),
            t => format!("tile.cast(acc, {t})"),
        };
        vars.insert(result, if rdt == acc_dtype { "acc".to_string() } else { cast });
        let w = Window {
            row: "m0",
            col: "n0",
            rows: "M",
            cols: "N",
            indent,
            batch: if batched { Some(("c", "BC")) } else { None },
        };
        let epilogue = self.fused_body(g, &w, &mut sig, &mut vars)?;
        // The template: its header becomes ours, its store of `acc` our epilogue.
        let def_at =
            template.find(&format!("def {stdlib}(")).ok_or_else(|| internal(format!("stdlib {stdlib} def")))?;
        let header_end =
            template[def_at..].find("):").ok_or_else(|| internal(format!("stdlib {stdlib} header")))? + def_at + 2;
        let store_at = template.rfind('\n').map(|i| i + 1).unwrap_or(0);
        if !template[store_at..].contains("= acc") {
            return Err(internal(format!("the stdlib {stdlib} no longer ends with its store of `acc`")));
        }
        let text = format!(
            "{}def {name}({}):{}\n{}",
            &template[..def_at],
            sig.params.join(", "),
            &template[header_end..store_at].trim_end_matches('\n'),
            epilogue.trim_end_matches('\n')
        );
        let summary = self.describe(g);
        let what = if batched { format!("stdlib batched_matmul ({adt})") } else { format!("stdlib matmul ({adt})") };
        Ok((text, sig.args, if summary == "fill" { what } else { format!("{what} + epilogue: {summary}") }))
    }

    /// A tensor broadcast over a batched matmul's epilogue `[.., M, N]` (NumPy rules: its
    /// batch dims indexed as a matmul operand's, its last two each M (N) or 1): declares
    /// it as `name` and returns the expression of its tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn batch_broadcast(
        &mut self,
        o: ValueId,
        stored: ValueId,
        out: &[Dim],
        (name, var): (&str, &str),
        w: &Window,
        sig: &mut Signature,
        loc: &Loc,
    ) -> R<String> {
        let one = Dim::constant(1);
        let dims = self.ty(o).dims().to_vec();
        let dt = self.ty(o).dtype().unwrap_or(DType::F32);
        let refuse =
            || unsupported(format!("broadcasting a {} tensor over {out:?} in a fused kernel", self.ty(o)), loc);
        if dims.len() > out.len() || out.len() < 2 {
            return refuse();
        }
        let mut padded = vec![one.clone(); out.len() - dims.len()];
        padded.extend(dims);
        let n = out.len();
        let (rows, cols) = (&padded[n - 2], &padded[n - 1]);
        if (*rows != one && *rows != out[n - 2]) || (*cols != one && *cols != out[n - 1]) {
            return refuse();
        }
        let batch = &padded[..n - 2];
        let index = match self.batch_index(batch, &out[..n - 2], &format!("{name}b"), sig, loc)? {
            Some(expr) => expr,
            None if batch.iter().all(|d| *d == one) => "0".to_string(),
            None => var.to_string(),
        };
        let mut view = vec![dims_product(batch)];
        // Each input has its own batch extent, named after it.
        let mut decl = vec![format!("\"{name}_B\"")];
        let mut window = vec![index.clone()];
        if *rows != one {
            view.push(rows.clone());
            decl.push(format!("\"{}\"", w.rows));
            window.push(format!("{r}:{r} + ctx.BM", r = w.row));
        }
        if *cols != one {
            view.push(cols.clone());
            decl.push(format!("\"{}\"", w.cols));
            window.push(format!("{c}:{c} + ctx.BN", c = w.col));
        }
        let v = self.view(stored, view, loc);
        sig.push(format!("{name}: Tensor[{}, {dt}]", decl.join(", ")), v);
        Ok(match (*rows != one, *cols != one) {
            (true, true) => format!("tile.load({name}[{}])", window.join(", ")),
            (true, false) => format!("tile.load({name}[{}])[:, None]", window.join(", ")),
            (false, true) => format!("tile.load({name}[{}])[None, :]", window.join(", ")),
            (false, false) => format!("tile.load({name}[{index}:{index} + 1])[None, :]"),
        })
    }

    /// The batch index of an operand with batch dims `dims` for the flattened output batch
    /// index `c` over `out` (NumPy broadcasting: `dims` is right-aligned with `out`, and a
    /// dim of 1 or a missing one is broadcast). None where the stdlib's `c % BX` is it:
    /// the operand's batch is the output's, or it has a single matrix.
    pub(super) fn batch_index(
        &mut self,
        dims: &[Dim],
        out: &[Dim],
        var: &str,
        sig: &mut Signature,
        loc: &Loc,
    ) -> R<Option<String>> {
        if dims.len() > out.len() {
            return Err(internal(format!("batch dims {dims:?} outside the result's {out:?}")));
        }
        let one = Dim::constant(1);
        let mut padded = vec![one.clone(); out.len() - dims.len()];
        padded.extend(dims.iter().cloned());
        if padded == out || padded.iter().all(|d| *d == one) {
            return Ok(None);
        }
        let mut ints = 0;
        let mut int = |p: &mut Self, d: Dim, sig: &mut Signature| -> String {
            if let Some(c) = d.as_const() {
                return c.to_string();
            }
            let h = p.emit(OpKind::SchedDim, vec![], vec![Type::Index], vec![("dims", Attr::Dims(vec![d]))], loc)[0];
            let name = format!("{var}_{ints}");
            ints += 1;
            sig.push(format!("{name}: int"), h);
            name
        };
        let mut terms = Vec::new();
        for i in 0..out.len() {
            if padded[i] == one {
                continue;
            }
            if padded[i] != out[i] {
                return Err(internal(format!("batch dims {dims:?} do not broadcast to {out:?}")));
            }
            // The coordinate along dim i, times the operand's stride of dim i.
            let outer = dims_product(&out[i + 1..]);
            let mut coord = if outer == one { "c".to_string() } else { format!("c // {}", int(self, outer, sig)) };
            if i > 0 {
                coord = format!("{coord} % {}", int(self, out[i].clone(), sig));
            }
            let stride = dims_product(&padded[i + 1..]);
            terms.push(if stride == one {
                format!("({coord})")
            } else {
                format!("({coord}) * {}", int(self, stride, sig))
            });
        }
        Ok(Some(terms.join(" + ")))
    }
}

/// The matmul of a narrower `@accum(T)`: it loads the operands as tiles (no staging) and
/// sums in T, as the reference does.
fn narrow_template(batched: bool, t: DType) -> String {
    let (name, outer, i, ia, ib, c, pad) = if batched {
        (
            "batched_matmul",
            "    for c in tile.parallel(0, BC):\n",
            "    ",
            "ia, ",
            "ib, ",
            "c, ",
            "                ia = c % BA\n                ib = c % BB\n",
        )
    } else {
        ("matmul", "", "", "", "", "", "")
    };
    format!(
        "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))\ndef {name}(A, B):\n    \
         ctx = tile.context()\n{outer}{i}    for m0 in tile.parallel(0, M, ctx.BM):\n{i}        \
         for n0 in tile.parallel(0, N, ctx.BN):\n{pad}{i}            acc = tile.zeros((ctx.BM, ctx.BN), {t})\n{i}            \
         for k0 in tile.range(0, K, ctx.BK):\n{i}                a = tile.load(A[{ia}m0:m0 + ctx.BM, k0:k0 + ctx.BK])\n{i}                \
         b = tile.load(B[{ib}k0:k0 + ctx.BK, n0:n0 + ctx.BN])\n{i}                \
         acc = tile.mma(a, b, accumulator=acc)\n{i}            C[{c}m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc"
    )
}
