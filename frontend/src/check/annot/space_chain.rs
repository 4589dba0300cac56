//! The Halide-style search space of `@kernel.autotune(space=...)`:
//! `block(m=[64, 128], n=[64, 128], k=[64]).warps([4, 8]).stages([2, 3]).vector([4, 8])`
//! is the space `dict(BM=[64, 128], BN=[64, 128], BK=[64], warps=[4, 8], stages=[2, 3],
//! vector=[4, 8])`: the same keys in the same order, so the same candidates.

use crate::check::infer::Infer;
use crate::diagnostics::{suggest, Code, Diagnostic};
use crate::syntax::ast::*;
use crate::text::TextRange;

use super::annotation::is_tessera_alias;

/// The keyword parameters of `block(...)` and the keys they set.
const BLOCK_PARAMS: &[(&str, &str)] = &[("m", "BM"), ("n", "BN"), ("k", "BK"), ("d", "BD")];

/// The chain's methods (each takes one list of candidates) and their keys.
const METHODS: &[(&str, &str)] = crate::check::schedule::KEYWORD_KEYS;

/// One key: its canonical name, the range that names it, and its candidates' expression.
type Entry = (String, TextRange, ExprId);

/// `None` when `space` is not a chain rooted at `block(...)`; `Some(Err(()))` when it is
/// one with an error (reported here); else the keys in the order written.
pub(super) fn entries(cx: &mut Infer, space: ExprId) -> Option<Result<Vec<Entry>, ()>> {
    // Walk down the chain: outermost call first.
    let mut links: Vec<(Name, TextRange, Vec<Arg>, ExprId)> = Vec::new();
    let mut at = cx.body.unparen(space);
    let root_args = loop {
        let Expr::Call { func, args } = cx.body.expr(at).clone() else { return None };
        match cx.body.expr(func).clone() {
            Expr::Attribute { object, name, name_range } => {
                // `ts.block(...)` is the root too.
                if name == "block" && is_alias_name(cx, object) {
                    break args;
                }
                links.push((name, name_range, args, at));
                at = cx.body.unparen(object);
            }
            Expr::Name(n) if n == "block" => break args,
            _ => return None,
        }
    };
    let mut out: Vec<Entry> = Vec::new();
    let mut failed = false;
    // block(m=[...], n=[...], k=[...], d=[...]): keywords, or m and n by position.
    let mut positional = 0;
    for a in &root_args {
        match &a.name {
            None => {
                if positional < 2 {
                    let (_, key) = BLOCK_PARAMS[positional];
                    out.push((key.to_string(), cx.range(a.value), a.value));
                } else {
                    cx.error(
                        Code::E0801,
                        cx.range(a.value),
                        "`block` takes m and n by position; give k= and d= by name",
                    );
                    failed = true;
                }
                positional += 1;
            }
            Some((kw, range)) => match BLOCK_PARAMS.iter().find(|(p, _)| p == kw) {
                Some((_, key)) if out.iter().any(|(k, _, _)| k == key) => {
                    cx.error(Code::E0801, *range, format!("`block` got `{kw}` twice"));
                    failed = true;
                }
                Some((_, key)) => out.push((key.to_string(), *range, a.value)),
                None => {
                    let mut d = Diagnostic::new(
                        Code::E0804,
                        *range,
                        format!("`block` has no parameter `{kw}`; it takes m=, n=, k= and d="),
                    );
                    if let Some(s) = suggest(kw, BLOCK_PARAMS.iter().map(|(p, _)| *p)) {
                        d = d.with_did_you_mean(*range, s);
                    }
                    cx.push(d);
                    failed = true;
                }
            },
        }
    }
    for (name, name_range, args, call) in links.into_iter().rev() {
        let Some((_, key)) = METHODS.iter().find(|(m, _)| *m == name.as_str()) else {
            let mut d = Diagnostic::new(
                Code::E0201,
                name_range,
                format!(
                    "a search space has no method `{name}`; it has {}",
                    METHODS.iter().map(|(m, _)| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                ),
            );
            if let Some(s) = suggest(&name, METHODS.iter().map(|(m, _)| *m)) {
                d = d.with_did_you_mean(name_range, s);
            }
            cx.push(d);
            failed = true;
            continue;
        };
        match args.as_slice() {
            [a] if a.name.is_none() => {
                if out.iter().any(|(k, _, _)| k == key) {
                    cx.error(Code::E0802, name_range, format!("the search space gives `{key}` twice"));
                    failed = true;
                } else {
                    out.push((key.to_string(), name_range, a.value));
                }
            }
            _ => {
                cx.error(
                    Code::E0801,
                    cx.range(call),
                    format!("`{name}` takes one list of candidates, e.g. `{name}([{}])`", example(key)),
                );
                failed = true;
            }
        }
    }
    Some(if failed { Err(()) } else { Ok(out) })
}

fn example(key: &str) -> &'static str {
    match key {
        "warps" => "4, 8",
        "stages" => "2, 3",
        "vector" => "4, 8",
        "swizzle" => "\"none\", \"xor\"",
        "mma" => "\"mma.sync\", \"wgmma\"",
        "copy" => "\"cp.async\", \"tma\"",
        "producer" => "\"none\", \"warpgroup\", \"pingpong\"",
        "cluster_x" | "cluster_y" => "1, 2",
        _ => "32, 64",
    }
}

fn is_alias_name(cx: &Infer, object: ExprId) -> bool {
    match cx.body.expr(object) {
        Expr::Name(n) => is_tessera_alias(cx, n),
        _ => false,
    }
}
