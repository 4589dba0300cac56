//! The verifier: structural SSA rules, per-op type rules, and what each level allows.

use super::*;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VerifyError {
    pub op: Option<OpId>,
    pub message: String,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op {
            Some(op) => write!(f, "op #{}: {}", op.0, self.message),
            None => f.write_str(&self.message),
        }
    }
}

pub fn verify(func: &Func) -> Result<(), VerifyError> {
    let mut v = Verifier {
        func,
        defined: vec![false; func.values.len()],
        visible: vec![false; func.values.len()],
        seen_ops: vec![false; func.ops.len()],
    };
    for &p in &func.params {
        v.define(p, None)?;
        v.visible[p.0 as usize] = true;
    }
    v.region(&func.body, None)?;
    Ok(())
}

/// Runs after every pass, so it is linear: flags per value and op, not sets.
struct Verifier<'a> {
    func: &'a Func,
    defined: Vec<bool>,
    /// Values in scope at the op being checked (dominance in structured control flow).
    visible: Vec<bool>,
    seen_ops: Vec<bool>,
}

fn err(op: OpId, message: impl Into<String>) -> VerifyError {
    VerifyError { op: Some(op), message: message.into() }
}

impl Verifier<'_> {
    fn define(&mut self, v: ValueId, op: Option<OpId>) -> Result<(), VerifyError> {
        if v.0 as usize >= self.func.values.len() {
            return Err(VerifyError { op, message: format!("value %{} has no type", v.0) });
        }
        if std::mem::replace(&mut self.defined[v.0 as usize], true) {
            return Err(VerifyError { op, message: format!("value %{} is defined twice", v.0) });
        }
        Ok(())
    }

    /// Checks a region; the values it defines go out of scope at its end.
    fn region(&mut self, region: &Region, parent: Option<OpId>) -> Result<(), VerifyError> {
        let mut scope: Vec<ValueId> = Vec::new();
        for &a in &region.args {
            self.define(a, parent)?;
            self.visible[a.0 as usize] = true;
            scope.push(a);
        }
        for (i, &id) in region.ops.iter().enumerate() {
            match self.seen_ops.get_mut(id.0 as usize) {
                Some(seen) if !*seen => *seen = true,
                Some(_) => return Err(err(id, "op appears twice in the body")),
                None => return Err(err(id, "op is not in the function")),
            }
            let op = self.func.op(id);
            for &o in &op.operands {
                if !self.visible.get(o.0 as usize).copied().unwrap_or(false) {
                    return Err(err(
                        id,
                        format!("{} uses %{} before its definition or outside its scope", op.kind.name(), o.0),
                    ));
                }
            }
            if op.kind.is_terminator() && i + 1 != region.ops.len() {
                return Err(err(id, format!("{} must be the last op of its region", op.kind.name())));
            }
            self.op(id)?;
            for r in &op.regions {
                self.region(r, Some(id))?;
            }
            for &r in &op.results {
                self.define(r, Some(id))?;
                self.visible[r.0 as usize] = true;
                scope.push(r);
            }
        }
        for v in scope {
            self.visible[v.0 as usize] = false;
        }
        Ok(())
    }

    fn ty(&self, v: ValueId) -> &Type {
        self.func.ty(v)
    }

    fn op(&self, id: OpId) -> Result<(), VerifyError> {
        let f = self.func;
        let op = f.op(id);
        let level = f.level;
        let name = op.kind.name();
        let n_ops = |n: usize| -> Result<(), VerifyError> {
            if op.operands.len() != n {
                Err(err(id, format!("{name} takes {n} operands, has {}", op.operands.len())))
            } else {
                Ok(())
            }
        };
        let n_results = |n: usize| -> Result<(), VerifyError> {
            if op.results.len() != n {
                Err(err(id, format!("{name} has {n} results, has {}", op.results.len())))
            } else {
                Ok(())
            }
        };
        // Level rules for every value an op touches.
        for &v in op.operands.iter().chain(&op.results) {
            match self.ty(v) {
                Type::Tile(t) => {
                    if level >= Level::Schedule && t.dims.iter().any(|d| !d.is_const()) {
                        return Err(err(
                            id,
                            format!("{name}: {} has a symbolic dim at {} IR", self.ty(v), level.name()),
                        ));
                    }
                    if level < Level::Tile && t.layout.is_some() {
                        return Err(err(id, format!("{name}: layouts appear only in Tile IR")));
                    }
                }
                Type::Smem(s) if level >= Level::Schedule && s.dims.iter().any(|d| !d.is_const()) => {
                    return Err(err(id, format!("{name}: shared buffer with a symbolic dim at {} IR", level.name())));
                }
                _ => {}
            }
        }
        match op.kind {
            k if k.is_binary() || k == OpKind::Cmp => {
                n_ops(2)?;
                n_results(1)?;
                let (a, b) = (self.ty(op.operands[0]), self.ty(op.operands[1]));
                if !same_shape_kind(a, b) {
                    return Err(err(id, format!("{name}: operands {a} and {b} differ")));
                }
                if k == OpKind::Cmp && op.str_attr("pred").is_none() {
                    return Err(err(id, "arith.cmp needs a `pred`"));
                }
            }
            k if k.is_unary_math() => {
                n_ops(1)?;
                n_results(1)?;
                if !same_shape_kind(self.ty(op.operands[0]), self.ty(op.results[0])) {
                    return Err(err(id, format!("{name}: result type differs from the operand")));
                }
            }
            OpKind::Select => {
                n_ops(3)?;
                n_results(1)?;
            }
            OpKind::Cast => {
                n_results(1)?;
                if super::policy::stochastic(op) {
                    // The second operand is the uniform f32 tile of the stochastic rounding.
                    let (x, u) = (self.ty(op.operands[0]), self.ty(op.operands[1]));
                    if !matches!(u, Type::Tile(t) if t.dtype == DType::F32) || x.dims() != u.dims() {
                        return Err(err(
                            id,
                            format!("arith.cast: the stochastic operand {u} must be an f32 tile like {x}"),
                        ));
                    }
                } else {
                    n_ops(1)?;
                }
            }
            OpKind::Constant => {
                n_ops(0)?;
                n_results(1)?;
                if op.attr("value").is_none() {
                    return Err(err(id, "arith.constant needs a `value`"));
                }
            }
            OpKind::For | OpKind::GridParallel => {
                if op.operands.len() < 3 {
                    return Err(err(id, format!("{name} takes lower bound, upper bound and step")));
                }
                let inits = op.operands.len() - 3;
                if op.regions.len() != 1 {
                    return Err(err(id, format!("{name} has one region")));
                }
                let region = &op.regions[0];
                if region.args.len() != 1 + inits || op.results.len() != inits {
                    return Err(err(
                        id,
                        format!(
                            "{name}: {} iteration values but {} region arguments and {} results",
                            inits,
                            region.args.len().saturating_sub(1),
                            op.results.len()
                        ),
                    ));
                }
                for k in 0..3 {
                    if *self.ty(op.operands[k]) != Type::Index {
                        return Err(err(id, format!("{name}: bounds and step are indices")));
                    }
                }
                for (i, &init) in op.operands[3..].iter().enumerate() {
                    if self.ty(init) != self.ty(op.results[i]) || self.ty(region.args[1 + i]) != self.ty(init) {
                        return Err(err(id, format!("{name}: iteration value {i} changes type")));
                    }
                }
                self.check_yield(id, region, &op.results)?;
                if op.kind == OpKind::GridParallel && level == Level::Tile {
                    return Err(err(id, "grid.parallel is replaced by program ids in Tile IR"));
                }
            }
            OpKind::If => {
                n_ops(1)?;
                if op.regions.len() != 2 {
                    return Err(err(id, "scf.if has a then and an else region"));
                }
                for r in &op.regions {
                    if !op.results.is_empty() || r.ops.last().is_some_and(|&l| f.op(l).kind == OpKind::Yield) {
                        self.check_yield(id, r, &op.results)?;
                    }
                }
            }
            OpKind::Dot => {
                if op.operands.len() != 3 {
                    return Err(err(id, "tile.dot takes a, b and the accumulator"));
                }
                n_results(1)?;
                let (a, b, c) = (self.ty(op.operands[0]), self.ty(op.operands[1]), self.ty(op.operands[2]));
                // A `wgmma` dot (Tile IR) reads A and B from shared slots in place.
                let wgmma = op.str_attr("instr") == Some("wgmma");
                // Operand `i`'s dims as the dot reads them: a `wgmma` slot read transposed
                // (an M-major A's [K, M], a K-major B's [N, K]) reversed.
                let operand_dims = |i: usize, t: &Type| {
                    let mut dims = match t {
                        Type::Tile(t) => t.dims.clone(),
                        Type::Smem(s) if wgmma && s.stages == 1 => s.dims.clone(),
                        _ => return None,
                    };
                    if wgmma && crate::wgmma::is_transposed_slot(op, i, t) {
                        dims.reverse();
                    }
                    Some(dims)
                };
                let (Some(a_dims), Some(b_dims), Type::Tile(c)) = (operand_dims(0, a), operand_dims(1, b), c) else {
                    return Err(err(
                        id,
                        "tile.dot operands are tiles (a `wgmma` dot's A and B may be shared slots, in Tile IR)",
                    ));
                };
                if a_dims.len() != 2
                    || b_dims.len() != 2
                    || c.dims.len() != 2
                    || a_dims[1] != b_dims[0]
                    || c.dims[0] != a_dims[0]
                    || c.dims[1] != b_dims[1]
                {
                    return Err(err(id, "tile.dot shapes: [M,K] x [K,N] + [M,N]"));
                }
                if self.ty(op.results[0]) != self.ty(op.operands[2]) {
                    return Err(err(id, "tile.dot result has the accumulator's type"));
                }
            }
            OpKind::Load => {
                if op.operands.is_empty() {
                    return Err(err(id, "tile.load takes a view"));
                }
                n_results(1)?;
                let (Type::View(v), Type::Tile(t)) = (self.ty(op.operands[0]), self.ty(op.results[0])) else {
                    return Err(err(id, "tile.load reads a view into a tile"));
                };
                if v.dims != t.dims || v.dtype != t.dtype {
                    return Err(err(
                        id,
                        format!(
                            "tile.load: view {} and tile {} differ",
                            self.ty(op.operands[0]),
                            self.ty(op.results[0])
                        ),
                    ));
                }
            }
            OpKind::Store => {
                if op.operands.len() < 2 {
                    return Err(err(id, "tile.store takes a view and a tile"));
                }
                let (Type::View(v), Type::Tile(t)) = (self.ty(op.operands[0]), self.ty(op.operands[1])) else {
                    return Err(err(id, "tile.store writes a tile into a view"));
                };
                if v.dims != t.dims || v.dtype != t.dtype {
                    return Err(err(
                        id,
                        format!(
                            "tile.store: view {} and tile {} differ",
                            self.ty(op.operands[0]),
                            self.ty(op.operands[1])
                        ),
                    ));
                }
            }
            OpKind::CpAsync => {
                if op.operands.len() < 2 {
                    return Err(err(id, "tile.cp_async takes a shared buffer and a view"));
                }
                let (Type::Smem(s), Type::View(v)) = (self.ty(op.operands[0]), self.ty(op.operands[1])) else {
                    return Err(err(id, "tile.cp_async copies a view into a shared buffer"));
                };
                if s.dims != v.dims {
                    return Err(err(id, "tile.cp_async: buffer and view shapes differ"));
                }
            }
            OpKind::TmaStore => {
                let (Some(Type::View(v)), Some(Type::Smem(s))) =
                    (op.operands.first().map(|&o| self.ty(o)), op.operands.get(1).map(|&o| self.ty(o)))
                else {
                    return Err(err(id, "tile.tma_store writes a shared slot to a view"));
                };
                if s.dims != v.dims || s.dtype != v.dtype {
                    return Err(err(id, "tile.tma_store: slot and view differ"));
                }
            }
            OpKind::Return if f.kind == FuncKind::Kernel && !op.operands.is_empty() && level >= Level::Tile => {
                return Err(err(id, "a kernel returns nothing in Tile IR"));
            }
            OpKind::ConvertLayout if level != Level::Tile => {
                return Err(err(id, "tile.convert_layout exists only in Tile IR"));
            }
            OpKind::Prefetch => {
                // `graph.prefetch %obj.., %token {into, overlap} -> !token`, Graph IR only.
                if level != Level::Graph {
                    return Err(err(id, "graph.prefetch exists only in Graph IR"));
                }
                n_results(1)?;
                let ordered = op.operands.len() >= 2
                    && op.operands.last().is_some_and(|&t| matches!(self.ty(t), Type::Token))
                    && matches!(self.ty(op.results[0]), Type::Token);
                if !ordered {
                    return Err(err(id, "graph.prefetch takes values and a token and gives the next token"));
                }
                if !matches!(op.str_attr("into"), Some("smem" | "l2" | "hbm")) || op.str_attr("overlap").is_none() {
                    return Err(err(id, "graph.prefetch needs `into` (smem, l2 or hbm) and `overlap`"));
                }
            }
            OpKind::CollectiveStart | OpKind::CollectiveWait if level != Level::Schedule => {
                return Err(err(id, format!("{name} exists only in Schedule IR")));
            }
            OpKind::CollectiveStart => {
                n_results(1)?;
                if !matches!(self.ty(op.results[0]), Type::Token) || op.operands.is_empty() {
                    return Err(err(id, "sched.collective_start takes buffers and gives a token"));
                }
            }
            OpKind::CollectiveWait => {
                n_results(0)?;
                if op.operands.len() != 1 || !matches!(self.ty(op.operands[0]), Type::Token) {
                    return Err(err(id, "sched.collective_wait takes the token of its start"));
                }
            }
            OpKind::Kernel | OpKind::Buffer if level == Level::Graph => {
                return Err(err(id, format!("{name} appears from Schedule IR on")));
            }
            _ => {}
        }
        Ok(())
    }

    fn check_yield(&self, id: OpId, region: &Region, results: &[ValueId]) -> Result<(), VerifyError> {
        let f = self.func;
        let last = region.ops.last().map(|&l| f.op(l));
        match last {
            Some(y) if y.kind == OpKind::Yield => {
                if y.operands.len() != results.len() {
                    return Err(err(
                        id,
                        format!("scf.yield yields {} values for {} results", y.operands.len(), results.len()),
                    ));
                }
                for (i, (&v, &r)) in y.operands.iter().zip(results).enumerate() {
                    if !same_shape_kind(f.ty(v), f.ty(r)) {
                        return Err(err(
                            id,
                            format!("scf.yield value {i} is {} but the result is {}", f.ty(v), f.ty(r)),
                        ));
                    }
                }
                Ok(())
            }
            _ if results.is_empty() => Ok(()),
            _ => Err(err(id, "a region with results must end in scf.yield")),
        }
    }
}

/// Types that an elementwise op may combine (equal, ignoring nothing).
fn same_shape_kind(a: &Type, b: &Type) -> bool {
    match (a, b) {
        (Type::Tile(x), Type::Tile(y)) => x.dims == y.dims && x.layout == y.layout,
        (Type::Tensor(x), Type::Tensor(y)) => x.dims == y.dims,
        (Type::Scalar(_), Type::Scalar(_)) => true,
        (Type::Index, Type::Index) => true,
        (Type::Scalar(_), Type::Index) | (Type::Index, Type::Scalar(_)) => true,
        _ => a == b,
    }
}
