//! Semantic highlighting: every token classified by what it denotes (a parameter, a
//! dim symbol, a built-in, a dtype, a policy, a schedule key, ...).

use std::collections::HashMap;

use super::lex::{self, TokKind};
use super::nav::{self, Definition};
use crate::check::{
    builtins::{self, Level},
    Resolution, Ty,
};
use crate::db::{self, Db, SourceFile};
use crate::syntax::ast::{Body, Expr, ImportAst, ItemKind};
use crate::text::TextRange;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum HlTag {
    Keyword,
    Function,
    Method,
    Parameter,
    Variable,
    Namespace,
    /// dtypes and type constructors (`Tensor`).
    Type,
    /// Dim symbols: the generic parameters of a signature.
    TypeParameter,
    /// Schedule keys (`ctx.BM`) and attributes.
    Property,
    /// Decorators, and policies (with the `POLICY` modifier).
    Decorator,
    Number,
    String,
    Comment,
}

/// Modifier bits.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct HlMods(pub u32);

impl HlMods {
    pub const DECLARATION: u32 = 1;
    pub const READONLY: u32 = 2;
    pub const DEFAULT_LIBRARY: u32 = 4;
    /// A dtype policy after `@`.
    pub const POLICY: u32 = 8;

    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct HlRange {
    pub range: TextRange,
    pub tag: HlTag,
    pub mods: HlMods,
}

type Class = (HlTag, u32);

/// Every classified token of the file in source order (tokens may span lines).
pub fn highlight(db: &dyn Db, file: SourceFile) -> Vec<HlRange> {
    let text = file.text(db);
    let names = classify_names(db, file);
    let toks = lex::lex(text, 0);
    let mut out = Vec::with_capacity(toks.len() / 2);
    let mut decorator_line = false;
    let mut line_start = true;
    for (i, t) in toks.iter().enumerate() {
        let push = |out: &mut Vec<HlRange>, tag, mods| out.push(HlRange { range: t.range, tag, mods: HlMods(mods) });
        let s = t.text(text);
        match t.kind {
            TokKind::Newline => {
                line_start = true;
                decorator_line = false;
                continue;
            }
            TokKind::Comment => push(&mut out, HlTag::Comment, 0),
            TokKind::Str => push(&mut out, HlTag::String, 0),
            TokKind::Number => push(&mut out, HlTag::Number, 0),
            TokKind::Keyword => push(&mut out, HlTag::Keyword, 0),
            TokKind::Op if s == "@" => {
                if line_start {
                    decorator_line = true;
                    push(&mut out, HlTag::Decorator, 0);
                } else {
                    // `@` before a policy name in a type.
                    let next = toks.get(i + 1);
                    if let Some(n) = next {
                        if let Some((HlTag::Decorator, m)) = names.get(&n.range.start) {
                            if m & HlMods::POLICY != 0 {
                                push(&mut out, HlTag::Decorator, HlMods::POLICY);
                            }
                        }
                    }
                }
            }
            TokKind::Ident => {
                if let Some(&(tag, mods)) = names.get(&t.range.start) {
                    // Names in a decorator's path are decorators (not their arguments).
                    let in_decorator_path = decorator_line
                        && matches!(tag, HlTag::Function | HlTag::Decorator)
                        && mods & HlMods::DEFAULT_LIBRARY != 0
                        && is_decorator_path(text, &toks, i);
                    if in_decorator_path {
                        push(&mut out, HlTag::Decorator, HlMods::DEFAULT_LIBRARY);
                    } else {
                        push(&mut out, tag, mods);
                    }
                }
            }
            _ => {}
        }
        line_start = false;
    }
    out
}

/// Whether identifier `i` is part of the dotted path right after a line-initial `@`.
fn is_decorator_path(text: &str, toks: &[lex::Tok], i: usize) -> bool {
    let mut j = i;
    loop {
        if j == 0 {
            return false;
        }
        let prev = toks[j - 1];
        match (prev.kind, prev.text(text)) {
            (TokKind::Op, "@") => return true,
            (TokKind::Op, ".") if j >= 2 && toks[j - 2].kind == TokKind::Ident => j -= 2,
            _ => return false,
        }
    }
}

fn def_class(def: &Definition) -> Option<Class> {
    Some(match def {
        Definition::Local { .. } => (HlTag::Variable, 0),
        Definition::Param { .. } => (HlTag::Parameter, 0),
        Definition::DimSymbol { .. } => (HlTag::TypeParameter, 0),
        Definition::Function { .. } => (HlTag::Function, 0),
        Definition::Constant { .. } => (HlTag::Variable, HlMods::READONLY),
        Definition::Import { .. } => (HlTag::Namespace, 0),
        Definition::Builtin { path } => builtin_class(path),
        Definition::BuiltinParam { .. } => (HlTag::Parameter, HlMods::DEFAULT_LIBRARY),
        Definition::DType(_) => (HlTag::Type, HlMods::DEFAULT_LIBRARY),
        Definition::Policy(_) => (HlTag::Decorator, HlMods::POLICY | HlMods::DEFAULT_LIBRARY),
        Definition::Namespace(_) => (HlTag::Namespace, HlMods::DEFAULT_LIBRARY),
        Definition::ScheduleKey { .. } => (HlTag::Property, HlMods::READONLY),
        Definition::Member { ty, .. } => match ty {
            Ty::Method { .. } => (HlTag::Method, 0),
            _ => (HlTag::Property, 0),
        },
        Definition::Keyword(_) => return None,
    })
}

fn builtin_class(path: &str) -> Class {
    match builtins::lookup(path).map(|b| (b.level, b.returns)) {
        Some((Level::Type, "policy")) => (HlTag::Decorator, HlMods::POLICY | HlMods::DEFAULT_LIBRARY),
        Some((Level::Type, _)) => (HlTag::Type, HlMods::DEFAULT_LIBRARY),
        Some((Level::Decorator, _)) => (HlTag::Decorator, HlMods::DEFAULT_LIBRARY),
        Some((_, _)) if builtins::lookup(path).is_some_and(|b| b.params.is_none()) => {
            (HlTag::Variable, HlMods::READONLY | HlMods::DEFAULT_LIBRARY)
        }
        _ => (HlTag::Function, HlMods::DEFAULT_LIBRARY),
    }
}

/// Start offset of each name token → its class.
fn classify_names(db: &dyn Db, file: SourceFile) -> HashMap<u32, Class> {
    let mut map: HashMap<u32, Class> = HashMap::new();
    let import_class = |name: &str| -> Class {
        nav::import_target(db, file, name).as_ref().and_then(def_class).unwrap_or((HlTag::Namespace, 0))
    };
    for f in nav::all_functions(db, file) {
        map.insert(f.abs(f.ast.name_range).start, (HlTag::Function, HlMods::DECLARATION));
        for p in &f.ast.params {
            map.insert(f.abs(p.name_range).start, (HlTag::Parameter, HlMods::DECLARATION));
        }
        let body = f.body();
        let sig = f.sig_exprs();
        let defs: Vec<TextRange> = f.inf.locals.iter().flat_map(|l| l.defs.clone()).collect();
        for id in body.expr_ids() {
            let range = body.expr_range(id);
            let class = match body.expr(id) {
                Expr::Name(name) => {
                    if sig[id.0 as usize] {
                        syntactic_class(db, file, &[name.as_str()])
                    } else {
                        match f.inf.resolution(id) {
                            Some(Resolution::Local(_)) => {
                                Some((HlTag::Variable, if defs.contains(&range) { HlMods::DECLARATION } else { 0 }))
                            }
                            Some(Resolution::Param(_)) => Some((HlTag::Parameter, 0)),
                            Some(Resolution::Symbol(_)) => Some((HlTag::TypeParameter, 0)),
                            Some(Resolution::Function(_)) => Some((HlTag::Function, 0)),
                            Some(Resolution::Constant(_)) => Some((HlTag::Variable, HlMods::READONLY)),
                            Some(Resolution::Import(n)) => Some(import_class(n)),
                            Some(Resolution::Builtin(p)) => Some(builtin_class(p)),
                            Some(Resolution::Unresolved) => None,
                            None => syntactic_class(db, file, &[name.as_str()]),
                        }
                    }
                }
                Expr::Attribute { object, name, name_range } => {
                    let class = if sig[id.0 as usize] {
                        body.dotted_path(id).and_then(|p| syntactic_class(db, file, &p))
                    } else if matches!(f.inf.type_of(*object), Ty::Context) {
                        Some(if f.sig.symbols.iter().any(|s| s == name) {
                            (HlTag::TypeParameter, 0)
                        } else {
                            (HlTag::Property, HlMods::READONLY)
                        })
                    } else {
                        match f.inf.type_of(id) {
                            Ty::Builtin(p) => Some(builtin_class(p)),
                            Ty::Namespace(_) => Some((HlTag::Namespace, HlMods::DEFAULT_LIBRARY)),
                            Ty::DType(_) => Some((HlTag::Type, HlMods::DEFAULT_LIBRARY)),
                            Ty::Method { .. } => Some((HlTag::Method, 0)),
                            Ty::Unknown => None,
                            _ => Some((HlTag::Property, 0)),
                        }
                    };
                    if let Some(c) = class {
                        map.insert(f.abs(*name_range).start, c);
                    }
                    None
                }
                Expr::Call { args, .. } => {
                    for a in args {
                        if let Some((_, r)) = &a.name {
                            map.entry(f.abs(*r).start).or_insert((HlTag::Parameter, 0));
                        }
                    }
                    None
                }
                _ => None,
            };
            if let Some(c) = class {
                map.insert(f.abs(range).start, c);
            }
        }
        // Decorators: their own arena, resolved at module level.
        let deco = f.deco_body();
        for id in deco.expr_ids() {
            match deco.expr(id) {
                Expr::Name(name) => {
                    if let Some(c) = syntactic_class(db, file, &[name.as_str()]) {
                        map.insert(f.deco_abs(deco.expr_range(id)).start, c);
                    }
                }
                Expr::Attribute { name_range, .. } => {
                    if let Some(c) = deco.dotted_path(id).and_then(|p| syntactic_class(db, file, &p)) {
                        map.insert(f.deco_abs(*name_range).start, c);
                    }
                }
                Expr::Call { args, .. } => {
                    for a in args {
                        if let Some((_, r)) = &a.name {
                            map.entry(f.deco_abs(*r).start).or_insert((HlTag::Parameter, 0));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    for c in nav::all_constants(db, file) {
        for (_, r) in &c.ast.names {
            map.insert(r.shift(c.anchor).start, (HlTag::Variable, HlMods::READONLY | HlMods::DECLARATION));
        }
        constant_names(db, file, &c.ast.arena, &c.value.inference, c.anchor, &mut map);
    }
    for item in &db::parse(db, file).module.items {
        let ItemKind::Import(import) = &item.kind else {
            continue;
        };
        let (names, module_range) = match import {
            ImportAst::Import { names } => (names, None),
            ImportAst::From { names, module_range, .. } => (names, Some(*module_range)),
        };
        let text = file.text(db);
        let mark_path = |range: TextRange, map: &mut HashMap<u32, Class>| {
            for t in lex::lex(range.slice(text), range.start) {
                if t.kind == TokKind::Ident {
                    map.insert(t.range.start, (HlTag::Namespace, HlMods::DEFAULT_LIBRARY));
                }
            }
        };
        if let Some(r) = module_range {
            mark_path(r, &mut map);
        }
        for n in names {
            let binding = n.alias.as_ref().map(|a| a.to_string()).unwrap_or_else(|| match import {
                ImportAst::Import { .. } => n.path.first().map(|p| p.to_string()).unwrap_or_default(),
                ImportAst::From { .. } => n.path.join("."),
            });
            match import {
                ImportAst::Import { .. } => mark_path(n.range, &mut map),
                ImportAst::From { .. } => {
                    map.insert(n.range.start, import_class(&binding));
                }
            }
            let (tag, mods) = import_class(&binding);
            map.insert(n.binding_range.start, (tag, mods | HlMods::DECLARATION));
        }
    }
    map
}

fn constant_names(
    db: &dyn Db,
    file: SourceFile,
    body: &Body,
    inf: &crate::check::Inference,
    anchor: u32,
    map: &mut HashMap<u32, Class>,
) {
    for id in body.expr_ids() {
        match body.expr(id) {
            Expr::Name(name) => {
                let class = match inf.resolution(id) {
                    Some(Resolution::Function(_)) => Some((HlTag::Function, 0)),
                    Some(Resolution::Constant(_)) => Some((HlTag::Variable, HlMods::READONLY)),
                    Some(Resolution::Import(n)) => {
                        nav::import_target(db, file, n).as_ref().and_then(def_class).or(Some((HlTag::Namespace, 0)))
                    }
                    Some(Resolution::Builtin(p)) => Some(builtin_class(p)),
                    Some(_) => None,
                    None => syntactic_class(db, file, &[name.as_str()]),
                };
                if let Some(c) = class {
                    map.entry(body.expr_range(id).shift(anchor).start).or_insert(c);
                }
            }
            Expr::Attribute { name_range, .. } => {
                let class = match inf.type_of(id) {
                    Ty::Builtin(p) => Some(builtin_class(p)),
                    Ty::Namespace(_) => Some((HlTag::Namespace, HlMods::DEFAULT_LIBRARY)),
                    Ty::DType(_) => Some((HlTag::Type, HlMods::DEFAULT_LIBRARY)),
                    Ty::Unknown => None,
                    _ => Some((HlTag::Method, 0)),
                };
                if let Some(c) = class {
                    map.insert(name_range.shift(anchor).start, c);
                }
            }
            Expr::Call { args, .. } => {
                for a in args {
                    if let Some((_, r)) = &a.name {
                        map.entry(r.shift(anchor).start).or_insert((HlTag::Parameter, 0));
                    }
                }
            }
            _ => {}
        }
    }
}

fn syntactic_class(db: &dyn Db, file: SourceFile, path: &[&str]) -> Option<Class> {
    match nav::resolve_syntactic(db, file, path)? {
        Definition::Import { name } => {
            Some(nav::import_target(db, file, &name).as_ref().and_then(def_class).unwrap_or((HlTag::Namespace, 0)))
        }
        def => def_class(&def),
    }
}
