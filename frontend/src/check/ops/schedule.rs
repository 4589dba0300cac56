//! The methods of a `Schedule` value: `with_block(m, n)`, `with_k(k)`, ... and the
//! Halide-style chain `block(m, n).k(k).warps(w)` (docs/language.md, "Schedules and
//! autotuning"). Each returns a new schedule; the receiver is never changed.

use crate::check::infer::Infer;
use crate::check::schedule::ScheduleValue;
use crate::check::types::*;
use crate::diagnostics::{suggest, Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::ArgVal;

/// The parameters of a schedule method with the schedule key each one sets.
pub(crate) fn method_params(name: &str) -> Option<&'static [(&'static str, &'static str)]> {
    Some(match name {
        "with_block" | "block" => &[("m", "BM"), ("n", "BN")],
        "with_k" | "k" => &[("k", "BK")],
        "d" => &[("d", "BD")],
        "with_warps" | "warps" => &[("warps", "warps")],
        "with_stages" | "stages" => &[("stages", "stages")],
        "with_vector" | "vector" => &[("vector", "vector")],
        "with_swizzle" | "swizzle" => &[("swizzle", "swizzle")],
        "with_mma" | "mma" => &[("mma", "mma")],
        "with_copy" | "copy" => &[("copy", "copy")],
        "with_producer" | "producer" => &[("producer", "producer")],
        "with_cluster" | "cluster" => &[("x", "cluster_x"), ("y", "cluster_y")],
        _ => return None,
    })
}

fn params_text(params: &[(&str, &str)]) -> String {
    params.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
}

impl Infer<'_> {
    /// `recv.name(args)` on a schedule: binds the arguments (positional or by the
    /// parameter's name), validates each value (E0701 at the value) and returns the
    /// receiver with those keys replaced.
    pub(super) fn schedule_method(
        &mut self,
        id: ExprId,
        mut s: ScheduleValue,
        name: &str,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        let Some(params) = method_params(name) else {
            // An unknown member was reported where it was looked up (E0201).
            return Ty::Unknown;
        };
        let mut bound: Vec<Option<&ArgVal>> = vec![None; params.len()];
        let mut positional = 0;
        let mut ok = true;
        for (kw, v) in vals {
            match kw {
                None => {
                    if positional < params.len() {
                        bound[positional] = Some(v);
                    } else {
                        ok = false;
                    }
                    positional += 1;
                }
                Some((kw, range)) => match params.iter().position(|(p, _)| p == kw) {
                    Some(i) if bound[i].is_none() => bound[i] = Some(v),
                    Some(_) => {
                        self.error(Code::E0801, *range, format!("`{name}` got `{kw}` twice"));
                        return Ty::Unknown;
                    }
                    None => {
                        let mut d = Diagnostic::new(
                            Code::E0804,
                            *range,
                            format!("`{name}` has no parameter `{kw}`; it takes ({})", params_text(params)),
                        );
                        if let Some(sug) = suggest(kw, params.iter().map(|(p, _)| *p)) {
                            d = d.with_did_you_mean(*range, sug);
                        }
                        self.push(d);
                        return Ty::Unknown;
                    }
                },
            }
        }
        if !ok || bound.iter().any(Option::is_none) {
            let n = params.len();
            self.error(
                Code::E0801,
                self.range(id),
                format!(
                    "`{name}` takes {n} argument{} ({}), got {}",
                    if n == 1 { "" } else { "s" },
                    params_text(params),
                    vals.len()
                ),
            );
            return Ty::Unknown;
        }
        let mut valid = true;
        for ((_, key), arg) in params.iter().zip(bound) {
            valid &= self.schedule_int(&mut s, key, arg);
        }
        if valid {
            Ty::Schedule(Box::new(s))
        } else {
            Ty::Unknown
        }
    }

    /// `f.with_schedule` looked up on a function: only a kernel has it (E0201 at the
    /// member otherwise); a kernel gives the method that [`Infer::with_schedule`] checks.
    pub(crate) fn with_schedule_member(&mut self, function: &str, name_range: TextRange) -> Ty {
        let key = crate::db::FnKey::new(self.db, self.file, function, 0);
        let kind = crate::check::fn_decorators(self.db, key).kind;
        if kind != crate::check::FunctionKind::Kernel {
            let d = Diagnostic::new(
                Code::E0201,
                name_range,
                format!("`{function}` is a {} and has no attribute `with_schedule`", kind.name()),
            )
            .with_note("only a kernel (`@kernel`) can be given a new schedule");
            self.push(d);
            return Ty::Unknown;
        }
        Ty::Method { recv: Box::new(Ty::Function(function.to_string())), name: "with_schedule".into() }
    }

    /// `name = kernel.with_schedule(S)`: a new kernel with `kernel`'s body and the fixed
    /// schedule `S`. Only the whole value of a top-level assignment to one name defines
    /// one (E0503 elsewhere); one argument, `S` or `schedule=S`, that is a Schedule.
    /// The value is the original kernel, so `b = a.with_schedule(T)` derives from it too.
    pub(super) fn with_schedule(
        &mut self,
        id: ExprId,
        kernel: String,
        vals: &[(Option<(String, TextRange)>, ArgVal)],
    ) -> Ty {
        if self.with_schedule_root != Some(id) {
            self.error(
                Code::E0503,
                self.range(id),
                format!(
                    "`{kernel}.with_schedule(...)` defines a new kernel: write it as a top-level \
                     assignment `name = {kernel}.with_schedule(S)`"
                ),
            );
            return Ty::Unknown;
        }
        let arg = match vals {
            [(None, v)] => v,
            [(Some((kw, _)), v)] if kw == "schedule" => v,
            [(Some((kw, range)), _)] => {
                let mut d = Diagnostic::new(
                    Code::E0804,
                    *range,
                    format!("`with_schedule` has no parameter `{kw}`; it takes (schedule)"),
                );
                if let Some(sug) = suggest(kw, ["schedule"]) {
                    d = d.with_did_you_mean(*range, sug);
                }
                self.push(d);
                return Ty::Unknown;
            }
            _ => {
                self.error(
                    Code::E0801,
                    self.range(id),
                    format!("`with_schedule` takes 1 argument (schedule), got {}", vals.len()),
                );
                return Ty::Unknown;
            }
        };
        match &arg.ty {
            Ty::Schedule(_) => Ty::Function(kernel),
            other => {
                let other = other.clone();
                self.wrong_kind(arg.expr, "with_schedule", "a Schedule", &other)
            }
        }
    }
}
