//! W0407: a `@verify.numerics(stable=True)` or `bounded=[lo, hi]` promise that the code
//! can provably break.
//!
//! The rule is deliberately small and sound (it never warns about code that keeps the
//! promise): `exp(x)` overflows to `inf` and `log(x)` gives NaN or `-inf` for *some*
//! input when `x` is **unbounded** — it takes every real value as the function's inputs
//! vary. Unbounded are:
//!
//! - a float parameter, a tensor parameter, a slice of one, and a load of such a slice;
//! - `-u`, `cast(u)`, `u + c`, `u - c`, `c + u`, `c - u` for a constant or scalar `c`,
//!   and `u * c`, `u / c`, `c * u` for a nonzero constant `c`;
//! - `u @ v`, `tile.dot(u, v)` of two unbounded operands;
//! - a local variable every assignment of which is unbounded.
//!
//! Anything else is assumed bounded: in particular `x - m` where `m` is a maximum
//! (`x - tile.row_max(x)[:, None]`, the max-subtraction of a stable softmax) is never
//! unbounded, and neither is anything that passes through `max`/`min`/`where`, a
//! reduction, `sigmoid`, `tanh` or a branch.

use std::collections::{HashMap, HashSet};

use super::types::Ty;
use super::{fn_signature, infer_function, Inference, Resolution};
use crate::db::{self, Db, FnKey};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;

/// W0407 of one function, relative to its `def` (like the inference's diagnostics).
#[salsa::tracked(returns(ref))]
pub fn numerics_lints<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Vec<Diagnostic> {
    let signature = fn_signature(db, key);
    let Some(check) = &signature.numerics else {
        return Vec::new();
    };
    let promise = match (check.stable, check.bounded()) {
        (_, Some((lo, hi))) => format!("bounded=[{lo}, {hi}]"),
        (true, None) => "stable=True".to_string(),
        (false, None) => return Vec::new(),
    };
    let Some(def) = db::function_def(db, key) else {
        return Vec::new();
    };
    let inference = infer_function(db, key);
    let mut cx = Cx { body: &def.arena, inf: inference, defs: HashMap::new(), active: HashSet::new() };
    cx.collect(&def.body);
    let mut out = Vec::new();
    for e in def.arena.expr_ids() {
        let Expr::Call { func, args } = def.arena.expr(e) else { continue };
        let Some(name) = cx.builtin(*func) else { continue };
        let what = match name {
            "exp" => "overflows to inf",
            "log" => "is NaN or -inf for inputs ≤ 0",
            _ => continue,
        };
        let Some(x) = args.iter().find(|a| a.name.as_ref().is_none_or(|(n, _)| n == "x")).map(|a| a.value) else {
            continue;
        };
        if !cx.unbounded(x) {
            continue;
        }
        let mut d = Diagnostic::new(
            Code::W0407,
            def.arena.expr_range(e),
            format!("`{name}` of an unbounded input {what}: @verify.numerics({promise}) can be violated"),
        )
        .with_label(def.arena.expr_range(x), "takes every real value as the inputs vary");
        if name == "exp" {
            d = d.with_note("subtract the maximum first, e.g. `tile.exp(x - tile.row_max(x)[:, None])`");
        }
        out.push(d);
    }
    out
}

struct Cx<'a> {
    body: &'a Body,
    inf: &'a Inference,
    /// Every value assigned to each local name (`None`: assigned in a way not followed).
    defs: HashMap<Name, Vec<Option<ExprId>>>,
    /// Locals being examined (a loop-carried local refers to itself).
    active: HashSet<Name>,
}

impl Cx<'_> {
    fn collect(&mut self, stmts: &[StmtId]) {
        for &s in stmts {
            match self.body.stmt(s) {
                Stmt::Assign { target, value, .. } => self.bind(*target, Some(*value)),
                Stmt::AugAssign { target, .. } => self.bind(*target, None),
                Stmt::If { branches, orelse } => {
                    for b in branches {
                        self.collect(&b.body);
                    }
                    if let Some(o) = orelse {
                        self.collect(o);
                    }
                }
                Stmt::For { target, body, orelse, .. } => {
                    self.bind(*target, None);
                    self.collect(body);
                    if let Some(o) = orelse {
                        self.collect(o);
                    }
                }
                Stmt::While { body, .. } | Stmt::With { body, .. } => self.collect(body),
                _ => {}
            }
        }
    }

    fn bind(&mut self, target: ExprId, value: Option<ExprId>) {
        match self.body.expr(self.body.unparen(target)) {
            Expr::Name(n) => self.defs.entry(n.clone()).or_default().push(value),
            Expr::Tuple(items) | Expr::List(items) => {
                for &t in items.clone().iter() {
                    self.bind(t, None);
                }
            }
            _ => {}
        }
    }

    /// The built-in a callee names, without a `tile.`/`math.` prefix.
    fn builtin(&self, func: ExprId) -> Option<&'static str> {
        match self.inf.type_of(func) {
            Ty::Builtin(p) => Some(p.strip_prefix("tile.").or_else(|| p.strip_prefix("math.")).unwrap_or(p)),
            _ => None,
        }
    }

    /// A number known at compile time (a literal, a constant).
    fn constant(&self, e: ExprId) -> Option<f64> {
        match self.inf.type_of(e) {
            Ty::Float(Some(f)) => Some(f.get()),
            Ty::Int(Some(d)) => d.as_const().map(|v| v as f64),
            _ => None,
        }
    }

    /// A value that does not vary with the tensors' elements: a constant or a scalar.
    fn scalar(&self, e: ExprId) -> bool {
        matches!(self.inf.type_of(e), Ty::Float(_) | Ty::Int(_) | Ty::Scalar(_))
    }

    fn unbounded(&mut self, e: ExprId) -> bool {
        let e = self.body.unparen(e);
        match self.body.expr(e).clone() {
            Expr::Name(n) => match self.inf.resolution(e) {
                Some(Resolution::Param(_)) => {
                    matches!(self.inf.type_of(e), Ty::Tensor(_) | Ty::View(_) | Ty::Float(_))
                        || matches!(self.inf.type_of(e), Ty::Scalar(s) if s.dtype.is_float())
                }
                Some(Resolution::Local(_)) => {
                    let Some(defs) = self.defs.get(&n).cloned() else { return false };
                    if defs.is_empty() || !self.active.insert(n.clone()) {
                        return false;
                    }
                    let all = defs.iter().all(|d| d.is_some_and(|v| self.unbounded(v)));
                    self.active.remove(&n);
                    all
                }
                _ => false,
            },
            // A slice of a parameter tensor.
            Expr::Subscript { value, .. } => {
                matches!(self.inf.type_of(e), Ty::View(_) | Ty::Tensor(_) | Ty::Tile(_)) && self.unbounded(value)
            }
            Expr::Unary { op: UnaryOp::Neg, operand } => self.unbounded(operand),
            Expr::Binary { op, lhs, rhs } => match op {
                BinOp::Add => (self.unbounded(lhs) && self.scalar(rhs)) || (self.scalar(lhs) && self.unbounded(rhs)),
                // `x - m` with a maximum `m` is bounded: only constants and scalars.
                BinOp::Sub => (self.unbounded(lhs) && self.scalar(rhs)) || (self.scalar(lhs) && self.unbounded(rhs)),
                BinOp::Mul => {
                    let nonzero = |this: &Self, x| this.constant(x).is_some_and(|c| c != 0.0 && c.is_finite());
                    (self.unbounded(lhs) && nonzero(self, rhs)) || (nonzero(self, lhs) && self.unbounded(rhs))
                }
                BinOp::Div => self.unbounded(lhs) && self.constant(rhs).is_some_and(|c| c != 0.0 && c.is_finite()),
                BinOp::MatMul => self.unbounded(lhs) && self.unbounded(rhs),
                _ => false,
            },
            Expr::Call { func, args } => {
                let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
                match self.builtin(func) {
                    Some("load" | "cast") => positional.first().is_some_and(|&x| self.unbounded(x)),
                    // Without an accumulator argument (which could cancel the product).
                    Some("dot" | "mma" | "matmul") => {
                        args.len() == 2
                            && positional.len() == 2
                            && self.unbounded(positional[0])
                            && self.unbounded(positional[1])
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::check::{file_diagnostics, fn_signature};
    use crate::db::item_index;
    use crate::diagnostics::Code;
    use crate::{Database, SourceFile};

    fn kernel(decorator: &str, body: &str) -> String {
        format!(
            "from tessera import *\n\n{decorator}\n@kernel.autotune(space=dict(BM=[4], BN=[64]))\n\
             def k(X: Tensor[\"R\", \"C\", f32], Y: Tensor[\"R\", \"C\", f32], scale: f32):\n    \
             ctx = tile.context()\n    \
             for r0 in tile.parallel(0, R, ctx.BM):\n        \
             for c0 in tile.range(0, C, ctx.BN):\n            \
             x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])\n            \
             Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = {body}\n"
        )
    }

    fn w0407(src: &str) -> Vec<String> {
        let db = Database::default();
        let file = SourceFile::new(&db, "t.tsr".into(), src.to_string(), None);
        let diags = file_diagnostics(&db, file);
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        diags.iter().filter(|d| d.code == Code::W0407).map(|d| d.message.clone()).collect()
    }

    #[test]
    fn exp_of_an_unbounded_input_breaks_a_bound() {
        let stable = "@verify.numerics(stable=True)";
        for body in ["tile.exp(x)", "tile.exp(x * 2.0 + 1.0)", "tile.exp(-x / 4.0)", "tile.log(x)"] {
            let got = w0407(&kernel(stable, body));
            assert_eq!(got.len(), 1, "{body}: {got:?}");
            assert!(got[0].contains("stable=True"), "{}", got[0]);
        }
        let bounded = w0407(&kernel("@verify.numerics(bounded=[-100, 100])", "tile.exp(x * scale)"));
        assert!(bounded.is_empty(), "a scalar parameter may be 0: not provable");
        let bounded = w0407(&kernel("@verify.numerics(bounded=[-100, 100])", "tile.exp(x)"));
        assert!(bounded[0].contains("bounded=[-100, 100]"), "{bounded:?}");
    }

    #[test]
    fn guarded_exp_and_unpromised_functions_are_quiet() {
        let stable = "@verify.numerics(stable=True)";
        for body in
            ["tile.exp(x - tile.row_max(x)[:, None])", "tile.sigmoid(x)", "tile.exp(tile.minimum(x, 0.0))", "x * 2.0"]
        {
            assert!(w0407(&kernel(stable, body)).is_empty(), "{body}");
        }
        // No promise, no warning; `allow_nonfinite` alone promises nothing either.
        assert!(w0407(&kernel("", "tile.exp(x)")).is_empty());
        assert!(w0407(&kernel("@verify.numerics(allow_nonfinite=True)", "tile.exp(x)")).is_empty());
    }

    #[test]
    fn the_signature_carries_the_decorator_arguments() {
        let src = kernel("@verify.numerics(stable=True, bounded=[-1.5, 2], allow_nonfinite=True)", "x");
        let db = Database::default();
        let file = SourceFile::new(&db, "t.tsr".into(), src, None);
        let key = item_index(&db, file).functions[0].key;
        let check = fn_signature(&db, key).numerics.clone().expect("@verify.numerics");
        assert!(check.stable && check.allow_nonfinite);
        assert_eq!(check.bounded(), Some((-1.5, 2.0)));
        let plain = kernel("", "x");
        let file = SourceFile::new(&db, "u.tsr".into(), plain, None);
        assert!(fn_signature(&db, item_index(&db, file).functions[0].key).numerics.is_none());
        // A misspelled keyword is E0804 with a fix; a wrong kind E0802.
        for (deco, code) in
            [("@verify.numerics(allow_nonfinte=True)", Code::E0804), ("@verify.numerics(stable=3)", Code::E0802)]
        {
            let file = SourceFile::new(&db, "v.tsr".into(), kernel(deco, "x"), None);
            let diags = file_diagnostics(&db, file);
            assert!(diags.iter().any(|d| d.code == code), "{deco}: {diags:?}");
        }
    }
}
