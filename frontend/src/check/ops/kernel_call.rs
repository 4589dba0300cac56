//! Calls of `@kernel` functions from graph functions (and the helpers they inline): the
//! value of `k(args)` is the new contents of the parameters `k` writes, and `grad` does
//! not differentiate through such a call.
//!
//! A parameter is *written* when the kernel's body stores into it: `P[...] = v`,
//! `P[...] += v` or `tile.store(P[...], v)` with `P` the parameter itself. The rule is
//! syntactic (no alias analysis), and the graph lowering asks the same function, so the
//! checked type of a call and its Graph IR always agree.

use std::collections::BTreeMap;

use crate::check::dims::Dim;
use crate::check::infer::{callee_inference, callee_signature, Infer};
use crate::check::types::*;
use crate::check::{FunctionKind, Inference, Resolution, Signature};
use crate::db::{function_def, FnKey};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;

use super::substitute_ty;

/// The indices (in signature order) of the parameters a kernel's body stores into.
pub fn kernel_written_params(def: &FunctionDef, inf: &Inference) -> Vec<usize> {
    let arena = &def.arena;
    // The parameter a store target names: `P`, `P[...]`, `(P[...])`.
    let param_of = |mut e: ExprId| -> Option<usize> {
        loop {
            match arena.expr(e) {
                Expr::Subscript { value, .. } => e = *value,
                Expr::Paren(inner) => e = *inner,
                Expr::Name(_) => {
                    return match inf.resolution(e) {
                        Some(Resolution::Param(i)) => Some(*i as usize),
                        _ => None,
                    }
                }
                _ => return None,
            }
        }
    };
    let mut written = Vec::new();
    for stmt in &arena.stmts {
        let target = match stmt {
            Stmt::Assign { target, .. } | Stmt::AugAssign { target, .. } => {
                // Assigning a parameter's name rebinds it; only a subscript stores.
                matches!(arena.expr(*target), Expr::Subscript { .. }).then_some(*target)
            }
            _ => None,
        };
        if let Some(i) = target.and_then(param_of) {
            written.push(i);
        }
    }
    for e in &arena.exprs {
        if let Expr::Call { func, args } = e {
            if matches!(inf.type_of(*func), Ty::Builtin("tile.store")) {
                let dst = args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == "dst")).or(args.first());
                if let Some(i) = dst.and_then(|a| param_of(a.value)) {
                    written.push(i);
                }
            }
        }
    }
    written.sort_unstable();
    written.dedup();
    written
}

/// The first call of a kernel in the body of `key` or of a function it calls (at most
/// 16 calls deep): the kernel's name and the function whose body calls it.
pub(crate) fn kernel_called_by(db: &dyn crate::db::Db, key: FnKey<'_>) -> Option<(String, String)> {
    let mut seen = vec![key.name(db).clone()];
    let mut todo = vec![(key, 0u32)];
    while let Some((key, depth)) = todo.pop() {
        let def = function_def(db, key).clone()?;
        let inf = callee_inference(db, key);
        for e in &def.arena.exprs {
            let Expr::Call { func, .. } = e else { continue };
            let Ty::Function(name) = inf.type_of(*func) else { continue };
            let Some((callee, sig)) = callee_signature(db, key.file(db), name) else { continue };
            if sig.kind == FunctionKind::Kernel {
                return Some((name.clone(), key.name(db).clone()));
            }
            if depth < 16 && !seen.contains(name) {
                seen.push(name.clone());
                todo.push((callee, depth + 1));
            }
        }
    }
    None
}

impl Infer<'_> {
    /// The value of a kernel call in a graph function: the written parameters' types
    /// under the call's substitution (one value, or a tuple in parameter order). A kernel
    /// that writes nothing has no value to give: E0504.
    pub(super) fn kernel_call_result(
        &mut self,
        func: ExprId,
        name: &str,
        key: FnKey<'_>,
        sig: &Signature,
        subst: &BTreeMap<String, Dim>,
    ) -> Ty {
        let Some(def) = function_def(self.db, key).clone() else { return Ty::Unknown };
        let written = kernel_written_params(&def, callee_inference(self.db, key));
        if written.is_empty() {
            self.push(
                Diagnostic::new(
                    Code::E0504,
                    self.range(func),
                    format!("`{name}` stores into none of its parameters, so calling it from a graph function gives nothing"),
                )
                .with_note(
                    "called from a graph function, a kernel's results are the parameters it stores into \
                     (`O[...] = v` or `tile.store(O[...], v)`); store the result into an output parameter",
                ),
            );
            return Ty::Unknown;
        }
        let mut tys: Vec<Ty> = written.iter().map(|&i| substitute_ty(&sig.params[i].ty, subst)).collect();
        if tys.len() == 1 {
            tys.pop().unwrap_or(Ty::Unknown)
        } else {
            Ty::Tuple(tys)
        }
    }

    /// E0807 when `grad(f)` would differentiate through a kernel call: `f`, or a function
    /// it calls, calls a `@kernel`. Returns whether it reported.
    pub(super) fn grad_through_kernel(&mut self, f: ExprId, name: &str, key: FnKey<'_>) -> bool {
        let Some((kernel, caller)) = kernel_called_by(self.db, key) else { return false };
        let via = if caller == name { String::new() } else { format!(" (through `{caller}`)") };
        self.push(
            Diagnostic::new(
                Code::E0807,
                self.range(f),
                format!("`grad({name})` would differentiate through the kernel `{kernel}`{via}, and `grad` does not differentiate kernels"),
            )
            .with_note(format!(
                "write the operation of `{kernel}` with graph operations inside `{name}` to differentiate it"
            )),
        );
        true
    }
}
