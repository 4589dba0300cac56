//! Signature help: the signature of the built-in or user function whose call the cursor
//! is in, with the active parameter.

use super::context;
use super::nav::{self, Definition, FnCtx};
use crate::check::builtins;
use crate::db::{self, Db, SourceFile};

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SignatureHelp {
    /// `tile.load(src, mask=None, other=0) -> tile`
    pub label: String,
    /// Byte ranges of each parameter inside `label`.
    pub params: Vec<(u32, u32)>,
    pub active_param: Option<u32>,
    /// Markdown.
    pub documentation: Option<String>,
}

struct Param {
    text: String,
    name: String,
    keyword_only: bool,
    var_keyword: bool,
}

/// Signature help at `offset`.
pub fn signature_help(db: &dyn Db, file: SourceFile, offset: u32) -> Option<SignatureHelp> {
    let text = file.text(db);
    let offset = crate::text::clamp_to_char_boundary(text, offset.min(text.len() as u32));
    let before = context::tokens_before(db, file, offset);
    if before.inside.is_some_and(|t| t.kind == super::lex::TokKind::Comment) {
        return None;
    }
    let call = context::open_call(text, &before.toks)?;
    if call.callee.is_empty() {
        return None;
    }
    let segs: Vec<&str> = call.callee.iter().map(String::as_str).collect();
    // A local of the same name shadows module names.
    if segs.len() == 1 {
        if let Some(f) = nav::enclosing_function(db, file, offset) {
            if f.inf.locals.iter().any(|l| l.name == segs[0]) {
                return None;
            }
        }
    }
    let (name, params, ret, doc) = match nav::resolve_through_imports(db, file, &segs)? {
        Definition::Builtin { path } | Definition::Policy(path) => {
            let b = builtins::lookup(path)?;
            b.params?;
            let params = b
                .param_specs()
                .iter()
                .map(|p| Param {
                    text: if p.var_keyword {
                        format!("**{}", p.name)
                    } else {
                        match p.default {
                            Some(d) => format!("{}={d}", p.name),
                            None => p.name.to_string(),
                        }
                    },
                    name: p.name.to_string(),
                    keyword_only: p.keyword_only,
                    var_keyword: p.var_keyword,
                })
                .collect::<Vec<_>>();
            let ret = (!b.returns.is_empty()).then(|| b.returns.to_string());
            (b.path.to_string(), params, ret, Some(b.doc.to_string()))
        }
        Definition::Function { name } => {
            let index = db::item_index(db, file);
            let i = index.function_position(db, &name)?;
            let f = FnCtx::new(db, file, i)?;
            let params = f
                .sig
                .params
                .iter()
                .zip(&f.ast.params)
                .map(|(p, a)| Param {
                    text: match a.default {
                        Some(d) => format!("{}: {} = {}", p.name, p.ty, crate::syntax::render::render(f.body(), d, 24)),
                        None => format!("{}: {}", p.name, p.ty),
                    },
                    name: p.name.clone(),
                    keyword_only: p.keyword_only,
                    var_keyword: false,
                })
                .collect::<Vec<_>>();
            let ret = f.sig.ret.as_ref().map(|r| r.to_string());
            (name, params, ret, f.ast.docstring.clone())
        }
        _ => return None,
    };
    let mut label = format!("{name}(");
    let mut ranges = Vec::new();
    let mut star = false;
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            label += ", ";
        }
        if p.keyword_only && !p.var_keyword && !star {
            label += "*, ";
            star = true;
        }
        let start = label.len() as u32;
        label += &p.text;
        ranges.push((start, label.len() as u32));
    }
    label += ")";
    if let Some(r) = ret {
        label += &format!(" -> {r}");
    }
    let active = match &call.keyword {
        Some(k) => params.iter().position(|p| &p.name == k).or_else(|| params.iter().position(|p| p.var_keyword)),
        None => {
            // Positional: the n-th parameter that can be passed by position.
            let positional: Vec<usize> =
                params.iter().enumerate().filter(|(_, p)| !p.keyword_only).map(|(i, _)| i).collect();
            positional.get(call.arg_index).copied()
        }
    };
    Some(SignatureHelp { label, params: ranges, active_param: active.map(|a| a as u32), documentation: doc })
}
