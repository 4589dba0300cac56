//! Calls of `@kernel` functions from graph functions (and the helpers they inline): the
//! value of `k(args)` is the new contents of the parameters `k` writes, and `grad` does
//! not differentiate through such a call.
//!
//! A parameter is *written* when the kernel's body stores into it: `P[...] = v`,
//! `P[...] += v` or `tile.store(P[...], v)` with `P` the parameter itself or a local
//! assigned the parameter whole (`out = P`, through at most 8 locals). The rule is
//! syntactic, and the graph lowering asks the same function, so the checked type of a
//! call and its Graph IR always agree.

use std::collections::BTreeMap;

use crate::check::dims::Dim;
use crate::check::dtype::DType;
use crate::check::infer::{callee_inference, callee_signature, Infer, Mode};
use crate::check::types::*;
use crate::check::{FunctionKind, Inference, Resolution, Signature};
use crate::db::{function_def, Db, FnKey, SourceFile};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::{substitute_ty, ArgVal};

/// The stdlib file that defines `kernel` and its text.
fn stdlib_file_of(kernel: &str) -> Option<(&'static str, &'static str)> {
    crate::stdlib::file_of(kernel)
}

/// The index of the first parameter of the stdlib kernel `kernel` whose dtype is the
/// file's `T` (`X: Tensor["R", "C", T]`): the argument there chooses the instance.
pub fn stdlib_dtype_param(kernel: &str) -> Option<usize> {
    let (_, src) = stdlib_file_of(kernel)?;
    let start = src.find(&format!("\ndef {kernel}("))? + kernel.len() + 6;
    let header = &src[start..start + src[start..].find("):")?];
    let mut depth = 0;
    let mut params = vec![String::new()];
    for c in header.chars() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                params.push(String::new());
                continue;
            }
            _ => {}
        }
        params.last_mut()?.push(c);
    }
    params.iter().position(|p| p.trim_end().ends_with(", T]"))
}

/// The stdlib file defining `kernel` with its dtype `T` set to `dtype` (its `T = ...` line
/// rewritten), as a file of the database: the instance is checked, lowered and run like
/// any kernel. `None` when no stdlib file defines `kernel`.
pub fn stdlib_instance(db: &dyn Db, kernel: &str, dtype: DType) -> Option<SourceFile> {
    let (path, text) = crate::stdlib::instance(kernel, &dtype.to_string())?;
    Some(db.generated_file(std::path::Path::new(&path), &text))
}

/// The indices (in signature order) of the parameters a kernel's body stores into.
pub fn kernel_written_params(def: &FunctionDef, inf: &Inference) -> Vec<usize> {
    let arena = &def.arena;
    // What each local is assigned (`o = Y[m0:m0 + BM]`): a store through it stores into
    // the parameter its value names.
    let mut assigned: Vec<(u32, ExprId)> = Vec::new();
    for stmt in &arena.stmts {
        if let Stmt::Assign { target, value, .. } = stmt {
            if let (Expr::Name(_), Some(Resolution::Local(l))) = (arena.expr(*target), inf.resolution(*target)) {
                assigned.push((*l, *value));
            }
        }
    }
    // The parameter a store target names: `P`, `P[...]`, `(P[...])`, with `P` the
    // parameter or a local assigned it whole (`out = P`, through at most 8 locals; a
    // local holding a slice is a view the kernel references do not store through).
    let param_of = |e: ExprId| -> Option<usize> {
        let mut todo = vec![(e, 0u32)];
        while let Some((mut e, depth)) = todo.pop() {
            loop {
                match arena.expr(e) {
                    Expr::Subscript { value, .. } if depth == 0 => e = *value,
                    Expr::Paren(inner) => e = *inner,
                    Expr::Name(_) => {
                        match inf.resolution(e) {
                            Some(Resolution::Param(i)) => return Some(*i as usize),
                            Some(Resolution::Local(l)) if depth < 8 => {
                                todo.extend(assigned.iter().filter(|(a, _)| a == l).map(|(_, v)| (*v, depth + 1)));
                            }
                            _ => {}
                        }
                        break;
                    }
                    _ => break,
                }
            }
        }
        None
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
            if matches!(inf.type_of(*func), Ty::Builtin("tile.store" | "tile.atomic_add")) {
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
            let name = match inf.type_of(*func) {
                Ty::Function(name) => name,
                Ty::Builtin(path) if crate::check::builtins::lookup(path).is_none() => {
                    // A stdlib kernel (`from tessera.stdlib import ...`).
                    return Some((path.to_string(), key.name(db).clone()));
                }
                _ => continue,
            };
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

/// The argument a call passes for parameter `i` of `sig`: by keyword, else by position
/// among the parameters that are not keyword-only.
fn argument_for<'v>(
    sig: &Signature,
    i: usize,
    vals: &'v [(Option<(String, TextRange)>, ArgVal)],
) -> Option<&'v ArgVal> {
    let p = &sig.params[i];
    if let Some((_, v)) = vals.iter().find(|(k, _)| k.as_ref().is_some_and(|(k, _)| *k == p.name)) {
        return Some(v);
    }
    if p.keyword_only {
        return None;
    }
    let position = sig.params[..i].iter().filter(|q| !q.keyword_only).count();
    vals.iter().filter(|(k, _)| k.is_none()).nth(position).map(|(_, v)| v)
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
        vals: &[(Option<(String, TextRange)>, ArgVal)],
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
        // A written parameter starts as its argument, so its value has the argument's dims
        // (also where the parameter's dims are compound, `"B*H"`, and bind no symbol).
        let mut tys: Vec<Ty> = written
            .iter()
            .map(|&i| {
                let declared = substitute_ty(&sig.params[i].ty, subst);
                match (argument_for(sig, i, vals).map(|a| self.operand(a.ty.clone())), &declared) {
                    (Some(Ty::Tensor(a)), Ty::Tensor(p)) => Ty::Tensor(TensorType { dims: a.dims, ..p.clone() }),
                    _ => declared,
                }
            })
            .collect();
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

    /// A call of a stdlib kernel (`from tessera.stdlib import stable_softmax`) in a graph
    /// function: checked as a call of the kernel instantiated for the dtype of the argument
    /// of its first `T` parameter ([`stdlib_instance`]).
    pub(super) fn stdlib_kernel_call(
        &mut self,
        id: ExprId,
        func: ExprId,
        name: &str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        if self.mode == Mode::Kernel {
            self.error(
                Code::E0503,
                self.range(func),
                format!("`{name}` is a kernel: a kernel cannot launch another kernel"),
            );
            return Ty::Unknown;
        }
        let Some(first) = stdlib_instance(self.db, name, DType::F32) else { return Ty::Unknown };
        let generic = crate::check::fn_signature(self.db, FnKey::new(self.db, first, name.to_string(), 0)).clone();
        let dtype = stdlib_dtype_param(name)
            .and_then(|i| {
                let p = &generic.params.get(i)?.name;
                let positional = vals.iter().filter(|(k, _)| k.is_none()).nth(i);
                let by_name = vals.iter().find(|(k, _)| k.as_ref().is_some_and(|(k, _)| k == p));
                match &by_name.or(positional)?.1.ty {
                    Ty::Tensor(t) => Some(t.elem.dtype),
                    _ => None,
                }
            })
            .unwrap_or(DType::F32);
        let Some(file) = stdlib_instance(self.db, name, dtype) else { return Ty::Unknown };
        let key = FnKey::new(self.db, file, name.to_string(), 0);
        let sig = crate::check::fn_signature(self.db, key).clone();
        let Some(subst) = self.bind_user(id, name, &sig, vals) else { return Ty::Unknown };
        self.kernel_call_result(func, name, key, &sig, &subst, vals)
    }
}
