//! What a name at an offset denotes, and navigation over it: go to definition, find
//! references, rename.
//!
//! This module owns the per-item contexts (`FnCtx`, `ConstCtx`) and `classify`, the
//! question every other query starts from; the queries built on its answer live in
//! `goto`, `references` and `rename`.

use std::sync::Arc;

use super::lex::{self, Tok, TokKind};
use crate::check::{self, builtins, ConstValue, DType, Inference, Namespace, Policy, Resolution, Signature, Ty};
use crate::db::{self, ConstKey, Db, SourceFile};
use crate::syntax::ast::*;
use crate::text::TextRange;

mod goto;
mod references;
mod rename;

pub use goto::{goto_definition, NavTarget};
pub use references::{find_references, Reference, ReferenceKind};
pub use rename::{prepare_rename, rename, RenameError};

// ----- per-item context ------------------------------------------------------------------

/// One function of the file with its analyses (ranges in its AST are relative to `anchor`).
pub(crate) struct FnCtx<'db> {
    /// Position in `item_index(file).functions`.
    pub index: usize,
    pub anchor: u32,
    /// Absolute range of the whole definition (decorators included).
    pub range: TextRange,
    pub ast: Arc<FunctionAst>,
    pub sig: &'db Signature,
    /// Decorators: kind and the schedule with its candidate values.
    pub deco: &'db check::DecoratorInfo,
    pub inf: &'db Inference,
}

impl<'db> FnCtx<'db> {
    pub fn new(db: &'db dyn Db, file: SourceFile, index: usize) -> Option<FnCtx<'db>> {
        let entry = db::item_index(db, file).functions.get(index)?;
        // A derived kernel (`name = kernel.with_schedule(S)`) is its assignment in the
        // editor: a constant; its body is its original's.
        if db::derived_kernel(db, entry.key).is_some() {
            return None;
        }
        let ast = db::function_ast(db, entry.key).clone()?;
        Some(FnCtx {
            index,
            anchor: entry.anchor,
            range: entry.range,
            ast,
            sig: check::fn_signature(db, entry.key).as_ref(),
            deco: check::fn_decorators(db, entry.key).as_ref(),
            inf: check::infer_function(db, entry.key).as_ref(),
        })
    }

    pub fn name(&self) -> &str {
        &self.ast.name
    }

    pub fn abs(&self, range: TextRange) -> TextRange {
        range.shift(self.anchor)
    }

    /// Each `state: OptimizerState[W] ...` parameter's `W`: its name and expression.
    pub fn optimizer_state_targets(&self) -> Vec<(String, ExprId)> {
        self.ast
            .params
            .iter()
            .zip(&self.sig.params)
            .filter(|(_, info)| matches!(&info.ty, Ty::Tensor(t) if t.kind == check::TensorKind::OptimizerState))
            .filter_map(|(q, _)| q.annotation.and_then(|a| check::optimizer_target(self.body(), a)))
            .collect()
    }

    pub fn body(&self) -> &Body {
        &self.ast.arena
    }

    /// The decorators' arena; its ranges count from the item's first byte.
    pub fn deco_body(&self) -> &Body {
        &self.ast.decorators.arena
    }

    pub fn deco_abs(&self, range: TextRange) -> TextRange {
        range.shift(self.range.start)
    }

    /// Expressions of the signature (decorators, annotations, defaults, return type):
    /// they are checked by `fn_signature`, so the body's inference has no types for them.
    pub fn sig_exprs(&self) -> Vec<bool> {
        let body = self.body();
        let mut marks = vec![false; body.exprs.len()];
        // Decorators have their own arena; the signature's expressions here are the
        // annotations, defaults and the return type.
        let mut roots: Vec<ExprId> = Vec::new();
        for p in &self.ast.params {
            roots.extend(p.annotation);
            roots.extend(p.default);
        }
        roots.extend(self.ast.return_type);
        for root in roots {
            mark_descendants(body, root, &mut marks);
        }
        marks
    }

    /// The annotation subtrees only (where `@` is a policy and strings are dims).
    pub fn annotation_exprs(&self) -> Vec<bool> {
        let body = self.body();
        let mut marks = vec![false; body.exprs.len()];
        for p in &self.ast.params {
            if let Some(a) = p.annotation {
                mark_descendants(body, a, &mut marks);
            }
        }
        if let Some(r) = self.ast.return_type {
            mark_descendants(body, r, &mut marks);
        }
        marks
    }
}

pub(crate) fn mark_descendants(body: &Body, root: ExprId, marks: &mut [bool]) {
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if let Some(m) = marks.get_mut(id.0 as usize) {
            if *m {
                continue;
            }
            *m = true;
        }
        body.walk_children(id, |c| stack.push(c));
    }
}

/// One module constant with its value.
pub(crate) struct ConstCtx<'db> {
    pub anchor: u32,
    pub range: TextRange,
    pub ast: Arc<ConstantAst>,
    pub value: &'db ConstValue,
}

impl<'db> ConstCtx<'db> {
    pub fn new(db: &'db dyn Db, file: SourceFile, index: usize) -> Option<ConstCtx<'db>> {
        let entry = db::item_index(db, file).constants.get(index)?;
        let key: ConstKey<'db> = entry.key;
        let ast = db::constant_ast(db, key).clone()?;
        Some(ConstCtx { anchor: entry.anchor, range: entry.range, ast, value: check::const_value(db, key).as_ref() })
    }
}

pub(crate) fn all_functions(db: &dyn Db, file: SourceFile) -> Vec<FnCtx<'_>> {
    let n = db::item_index(db, file).functions.len();
    (0..n).filter_map(|i| FnCtx::new(db, file, i)).collect()
}

pub(crate) fn all_constants(db: &dyn Db, file: SourceFile) -> Vec<ConstCtx<'_>> {
    let n = db::item_index(db, file).constants.len();
    (0..n).filter_map(|i| ConstCtx::new(db, file, i)).collect()
}

/// The function whose definition contains `offset` (a cursor at its very end counts).
pub(crate) fn function_at(db: &dyn Db, file: SourceFile, offset: u32) -> Option<FnCtx<'_>> {
    let index = db::item_index(db, file);
    let i = index
        .functions
        .iter()
        .position(|f| f.range.contains(offset))
        .or_else(|| index.functions.iter().position(|f| f.range.touches(offset)))?;
    FnCtx::new(db, file, i)
}

/// The function a cursor belongs to even when the parser could not attach the text
/// (for example an unfinished line at the end of a body): the last function that
/// starts before `offset`, if no top-level item lies between them.
pub(crate) fn enclosing_function(db: &dyn Db, file: SourceFile, offset: u32) -> Option<FnCtx<'_>> {
    if let Some(f) = function_at(db, file, offset) {
        return Some(f);
    }
    let parse = db::parse(db, file);
    let last = parse.module.items.iter().rfind(|it| it.range.start <= offset)?;
    if !matches!(last.kind, ItemKind::Function(_)) {
        return None;
    }
    // Only when the text between the function's end and the cursor is indented.
    let text = file.text(db);
    let between = TextRange::new(last.range.end.min(offset), offset).slice(text);
    let indented = between.split('\n').skip(1).all(|l| l.is_empty() || l.starts_with([' ', '\t']));
    if !indented {
        return None;
    }
    let index = db::item_index(db, file);
    let i = index.functions.iter().position(|f| f.anchor == last.anchor)?;
    FnCtx::new(db, file, i)
}

// ----- what a name denotes -------------------------------------------------------------

/// What a name in the source denotes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Definition {
    /// A local variable of function number `function` (`item_index(file).functions`).
    Local {
        function: usize,
        local: u32,
    },
    Param {
        function: usize,
        index: u32,
    },
    /// A dim symbol of a signature (`M` in `Tensor["M", "K", f32]`).
    DimSymbol {
        function: usize,
        name: String,
    },
    /// A top-level function.
    Function {
        name: String,
    },
    /// A module constant.
    Constant {
        name: String,
    },
    /// A name bound by an import.
    Import {
        name: String,
    },
    Builtin {
        path: &'static str,
    },
    /// A keyword parameter of a built-in (`swizzle` in `tile.alloc_shared(.., swizzle=..)`).
    BuiltinParam {
        path: &'static str,
        name: String,
    },
    DType(DType),
    /// A policy name after `@` (`accum`, `saturate`, ...).
    Policy(&'static str),
    Namespace(Namespace),
    /// A schedule key read through `ctx.` or written in an autotune space.
    ScheduleKey {
        function: usize,
        key: String,
    },
    /// An attribute of a value (`x.shape`, `k.T`, `cache.append`): its type here.
    Member {
        name: String,
        ty: Ty,
    },
    Keyword(&'static str),
}

/// The name at an offset: its range (absolute) and what it denotes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NameAt {
    pub range: TextRange,
    pub def: Definition,
    /// The name is the defining occurrence (a `def` name, a parameter, an assignment
    /// target, a constant, an import binding).
    pub is_definition: bool,
    /// The function the name occurs in, and its expression there (for types).
    pub(crate) site: Option<(usize, ExprId)>,
}

/// The identifier-like token at `offset` (identifiers, keywords, strings), preferring
/// the one that starts at or contains the cursor over one that ends there.
pub(crate) fn token_at(text: &str, range: TextRange, offset: u32) -> Option<Tok> {
    let toks = lex::lex(range.slice(text), range.start);
    let wanted = |t: &Tok| matches!(t.kind, TokKind::Ident | TokKind::Keyword | TokKind::Str);
    toks.iter()
        .copied()
        .find(|t| wanted(t) && t.range.contains(offset))
        .or_else(|| toks.iter().copied().find(|t| wanted(t) && t.range.touches(offset)))
}

/// The top-level item containing `offset` (a cursor at its very end counts).
pub(crate) fn item_at(parse: &crate::syntax::Parse, offset: u32) -> Option<&Item> {
    let items = &parse.module.items;
    items.iter().find(|it| it.range.contains(offset)).or_else(|| items.iter().find(|it| it.range.touches(offset)))
}

/// What the name at `offset` denotes.
pub fn classify(db: &dyn Db, file: SourceFile, offset: u32) -> Option<NameAt> {
    let text = file.text(db);
    let parse = db::parse(db, file);
    let item = item_at(parse, offset)?;
    let tok = token_at(text, item.range, offset)?;
    let word = tok.text(text);
    if tok.kind == TokKind::Keyword {
        let kw = lex::KEYWORDS.iter().copied().find(|k| *k == word)?;
        return Some(NameAt { range: tok.range, def: Definition::Keyword(kw), is_definition: false, site: None });
    }
    match &item.kind {
        ItemKind::Function(_) => {
            let index = db::item_index(db, file);
            let i = index.functions.iter().position(|f| f.anchor == item.anchor)?;
            let f = FnCtx::new(db, file, i)?;
            classify_in_function(db, file, &f, tok)
        }
        ItemKind::Constant(_) => {
            let index = db::item_index(db, file);
            let i = index.constants.iter().position(|c| c.anchor == item.anchor)?;
            let c = ConstCtx::new(db, file, i)?;
            classify_in_constant(db, file, &c, tok)
        }
        ItemKind::Import(import) => classify_in_import(import, tok, text),
        ItemKind::Invalid => None,
    }
}

fn classify_in_function(db: &dyn Db, file: SourceFile, f: &FnCtx<'_>, tok: Tok) -> Option<NameAt> {
    let rel = tok.range.unshift(f.anchor);
    let at = |def, is_definition| Some(NameAt { range: tok.range, def, is_definition, site: None });
    if f.ast.name_range == rel {
        return at(Definition::Function { name: f.name().to_string() }, true);
    }
    if let Some(i) = f.ast.params.iter().position(|p| p.name_range == rel) {
        return at(Definition::Param { function: f.index, index: i as u32 }, true);
    }
    if let Some(at) = classify_in_decorators(db, file, f, tok) {
        return Some(at);
    }
    let body = f.body();
    let sig_exprs = f.sig_exprs();
    for id in body.expr_ids() {
        let site = Some((f.index, id));
        match body.expr(id) {
            Expr::Name(name) if body.expr_range(id) == rel => {
                let in_sig = sig_exprs[id.0 as usize];
                // `state: OptimizerState[W]`: W is the parameter of that name.
                let holds_state_of = f.optimizer_state_targets().iter().any(|&(_, at)| at == id);
                if let Some(i) = f.ast.params.iter().position(|p| holds_state_of && p.name == *name) {
                    let def = Definition::Param { function: f.index, index: i as u32 };
                    return Some(NameAt { range: tok.range, def, is_definition: false, site });
                }
                let def = if in_sig {
                    resolve_syntactic(db, file, &[name.as_str()])?
                } else {
                    match f.inf.resolution(id) {
                        Some(r) => resolution_def(f, r)?,
                        None => resolve_syntactic(db, file, &[name.as_str()])?,
                    }
                };
                let is_definition = match &def {
                    Definition::Local { local, .. } => f.inf.locals[*local as usize].defs.contains(&rel),
                    _ => false,
                };
                return Some(NameAt { range: tok.range, def, is_definition, site });
            }
            Expr::Attribute { object, name, name_range } if *name_range == rel => {
                let def = if sig_exprs[id.0 as usize] {
                    let path = body.dotted_path(id)?;
                    resolve_syntactic(db, file, &path)?
                } else {
                    attribute_def(f, id, *object, name)?
                };
                return Some(NameAt { range: tok.range, def, is_definition: false, site });
            }
            Expr::Str(_) if body.expr_range(id) == rel && !sig_exprs[id.0 as usize] => {
                // `grad(f, wrt=("W",))`: the string names f's parameter W.
                let w = references::grad_wrt_strings(f, file.text(db)).into_iter().find(|w| w.expr == id)?;
                let callee = all_functions(db, file).into_iter().find(|g| g.name() == w.callee)?;
                let index = callee.ast.params.iter().position(|p| p.name == w.param.as_str())?;
                let def = Definition::Param { function: callee.index, index: index as u32 };
                return Some(NameAt { range: w.range, def, is_definition: false, site });
            }
            Expr::Str(s) if body.expr_range(id) == rel && sig_exprs[id.0 as usize] => {
                // A dim string: `"M"` names the symbol M.
                let name = s.trim();
                if f.sig.symbols.iter().any(|sym| sym == name) {
                    return Some(NameAt {
                        range: tok.range,
                        def: Definition::DimSymbol { function: f.index, name: name.to_string() },
                        is_definition: false,
                        site,
                    });
                }
                return None;
            }
            Expr::Call { func, args } => {
                if let Some(arg) = args.iter().find(|a| a.name.as_ref().is_some_and(|(_, r)| *r == rel)) {
                    let (arg_name, _) = arg.name.as_ref()?;
                    return keyword_arg_def(db, file, f, id, *func, arg_name, &sig_exprs)
                        .map(|(def, is_definition)| NameAt { range: tok.range, def, is_definition, site: None });
                }
            }
            _ => {}
        }
    }
    None
}

/// Names in the decorators (their own arena, resolved at module level).
fn classify_in_decorators(db: &dyn Db, file: SourceFile, f: &FnCtx<'_>, tok: Tok) -> Option<NameAt> {
    if tok.range.start < f.range.start {
        return None;
    }
    let rel = tok.range.unshift(f.range.start);
    let body = f.deco_body();
    let at = |def, is_definition| NameAt { range: tok.range, def, is_definition, site: None };
    for id in body.expr_ids() {
        match body.expr(id) {
            Expr::Name(name) if body.expr_range(id) == rel => {
                return resolve_syntactic(db, file, &[name.as_str()]).map(|d| at(d, false));
            }
            Expr::Attribute { name_range, .. } if *name_range == rel => {
                let path = body.dotted_path(id)?;
                return resolve_syntactic(db, file, &path).map(|d| at(d, false));
            }
            Expr::Call { func, args } => {
                let Some((name, _)) = args.iter().filter_map(|a| a.name.as_ref()).find(|(_, r)| *r == rel) else {
                    continue;
                };
                let path = body.dotted_path(*func)?;
                // `space=dict(BM=[..])` inside `@kernel.autotune(...)`: a schedule key.
                if path == ["dict"] {
                    let in_space = f.deco.schedule.as_ref().is_some_and(|s| s.space.iter().any(|k| k.key == *name));
                    return in_space
                        .then(|| at(Definition::ScheduleKey { function: f.index, key: name.to_string() }, true));
                }
                return match resolve_syntactic(db, file, &path)? {
                    Definition::Builtin { path } => {
                        Some(at(Definition::BuiltinParam { path, name: name.to_string() }, false))
                    }
                    _ => None,
                };
            }
            _ => {}
        }
    }
    None
}

/// A keyword argument's name: a parameter of the callee, or a key of an autotune space.
fn keyword_arg_def(
    db: &dyn Db,
    file: SourceFile,
    f: &FnCtx<'_>,
    call: ExprId,
    func: ExprId,
    name: &str,
    sig_exprs: &[bool],
) -> Option<(Definition, bool)> {
    let body = f.body();
    if sig_exprs[call.0 as usize] {
        // `space=dict(BM=[..])` inside `@kernel.autotune(...)`: a schedule key.
        if body.dotted_path(func).as_deref() == Some(&["dict"][..]) {
            let in_space = f.sig.schedule.as_ref().is_some_and(|s| s.space.iter().any(|k| k == name));
            if in_space {
                return Some((Definition::ScheduleKey { function: f.index, key: name.to_string() }, true));
            }
        }
        let path = body.dotted_path(func)?;
        return match resolve_syntactic(db, file, &path)? {
            Definition::Builtin { path } => Some((Definition::BuiltinParam { path, name: name.to_string() }, false)),
            _ => None,
        };
    }
    match f.inf.type_of(func) {
        Ty::Builtin(path) => Some((Definition::BuiltinParam { path, name: name.to_string() }, false)),
        Ty::Function(callee) => {
            let index = db::item_index(db, file);
            let i = index.function_position(db, callee)?;
            let callee_sig = check::fn_signature(db, index.functions[i].key);
            let p = callee_sig.params.iter().position(|p| p.name == name)?;
            Some((Definition::Param { function: i, index: p as u32 }, false))
        }
        _ => None,
    }
}

fn resolution_def(f: &FnCtx<'_>, r: &Resolution) -> Option<Definition> {
    Some(match r {
        Resolution::Local(l) => Definition::Local { function: f.index, local: *l },
        Resolution::Param(i) => Definition::Param { function: f.index, index: *i },
        Resolution::Symbol(s) => Definition::DimSymbol { function: f.index, name: s.clone() },
        Resolution::Function(n) => Definition::Function { name: n.clone() },
        Resolution::Constant(n) => Definition::Constant { name: n.clone() },
        Resolution::Import(n) => Definition::Import { name: n.clone() },
        Resolution::Builtin(path) => builtin_def(path),
        Resolution::Unresolved => return None,
    })
}

fn builtin_def(path: &'static str) -> Definition {
    match Policy::NAMES.iter().copied().find(|p| *p == path) {
        Some(p) => Definition::Policy(p),
        None => Definition::Builtin { path },
    }
}

fn attribute_def(f: &FnCtx<'_>, id: ExprId, object: ExprId, name: &str) -> Option<Definition> {
    if matches!(f.inf.type_of(object), Ty::Context) {
        if f.sig.symbols.iter().any(|s| s == name) {
            return Some(Definition::DimSymbol { function: f.index, name: name.to_string() });
        }
        return Some(Definition::ScheduleKey { function: f.index, key: name.to_string() });
    }
    Some(match f.inf.type_of(id) {
        Ty::Builtin(path) => builtin_def(path),
        Ty::Namespace(ns) => Definition::Namespace(*ns),
        Ty::DType(e) if e.policies.is_empty() && DType::from_name(name).is_some() => Definition::DType(e.dtype),
        ty => Definition::Member { name: name.to_string(), ty: ty.clone() },
    })
}

fn classify_in_constant(db: &dyn Db, file: SourceFile, c: &ConstCtx<'_>, tok: Tok) -> Option<NameAt> {
    let rel = tok.range.unshift(c.anchor);
    if let Some((name, _)) = c.ast.names.iter().find(|(_, r)| *r == rel) {
        return Some(NameAt {
            range: tok.range,
            def: Definition::Constant { name: name.to_string() },
            is_definition: true,
            site: None,
        });
    }
    let body = &c.ast.arena;
    let inf = &c.value.inference;
    for id in body.expr_ids() {
        match body.expr(id) {
            Expr::Name(name) if body.expr_range(id) == rel => {
                let def = match inf.resolution(id) {
                    Some(Resolution::Function(n)) => Definition::Function { name: n.clone() },
                    Some(Resolution::Constant(n)) => Definition::Constant { name: n.clone() },
                    Some(Resolution::Import(n)) => Definition::Import { name: n.clone() },
                    Some(Resolution::Builtin(p)) => builtin_def(p),
                    _ => resolve_syntactic(db, file, &[name.as_str()])?,
                };
                return Some(NameAt { range: tok.range, def, is_definition: false, site: None });
            }
            Expr::Attribute { name_range, .. } if *name_range == rel => {
                let def = match inf.type_of(id) {
                    Ty::Builtin(p) => builtin_def(p),
                    Ty::Namespace(ns) => Definition::Namespace(*ns),
                    _ => resolve_syntactic(db, file, &body.dotted_path(id)?)?,
                };
                return Some(NameAt { range: tok.range, def, is_definition: false, site: None });
            }
            _ => {}
        }
    }
    None
}

fn classify_in_import(import: &ImportAst, tok: Tok, text: &str) -> Option<NameAt> {
    let word = tok.text(text);
    let names = match import {
        ImportAst::Import { names } | ImportAst::From { names, .. } => names,
    };
    let binding = |name: &ImportedName| -> String {
        name.alias.as_ref().map(|a| a.to_string()).unwrap_or_else(|| name.path.join("."))
    };
    for name in names {
        if name.binding_range == tok.range && (name.alias.is_some() || name.path.len() == 1) {
            return Some(NameAt {
                range: tok.range,
                def: Definition::Import { name: binding(name) },
                is_definition: true,
                site: None,
            });
        }
    }
    // Part of a module path: `tessera`, `tile` in `tessera.tile`.
    let module: Vec<&str> = match import {
        ImportAst::From { module, module_range, .. } if module_range.contains_range(tok.range) => {
            module.iter().map(|m| m.as_str()).collect()
        }
        _ => names.iter().find(|n| n.range.contains_range(tok.range))?.path.iter().map(|m| m.as_str()).collect(),
    };
    let upto = module.iter().position(|m| *m == word)?;
    let def = match &module[..=upto] {
        ["tessera"] => Definition::Namespace(Namespace::Tessera),
        ["tessera", "stdlib"] => Definition::Namespace(Namespace::Stdlib),
        ["tessera", rest] => tessera_member(rest)?,
        _ => return None,
    };
    Some(NameAt { range: tok.range, def, is_definition: false, site: None })
}

/// What `tessera.NAME` is.
pub(crate) fn tessera_member(name: &str) -> Option<Definition> {
    Some(match name {
        "tile" => Definition::Namespace(Namespace::Tile),
        "dist" => Definition::Namespace(Namespace::Dist),
        "verify" => Definition::Namespace(Namespace::Verify),
        "stdlib" => Definition::Namespace(Namespace::Stdlib),
        _ => {
            if let Some(d) = DType::from_name(name) {
                Definition::DType(d)
            } else if let Some(b) = builtins::lookup(name) {
                builtin_def(b.path)
            } else if let Some(k) = crate::stdlib::kernel_names().into_iter().find(|k| *k == name) {
                Definition::Builtin { path: k }
            } else {
                return None;
            }
        }
    })
}

/// What an import binding refers to (`ts` → the tessera namespace, `f32` → a dtype).
pub(crate) fn import_target(db: &dyn Db, file: SourceFile, binding: &str) -> Option<Definition> {
    for item in &db::parse(db, file).module.items {
        let ItemKind::Import(import) = &item.kind else {
            continue;
        };
        match import {
            ImportAst::Import { names } => {
                for n in names {
                    let bound = n.alias.as_deref().or(n.path.first().map(|p| p.as_str()));
                    if bound != Some(binding) {
                        continue;
                    }
                    let path: Vec<&str> = n.path.iter().map(|p| p.as_str()).collect();
                    return match (&path[..], n.alias.is_some()) {
                        (["tessera"], _) | (_, false) => Some(Definition::Namespace(Namespace::Tessera)),
                        (["tessera", "stdlib"], true) => Some(Definition::Namespace(Namespace::Stdlib)),
                        (["tessera", rest], true) => tessera_member(rest),
                        _ => None,
                    };
                }
            }
            ImportAst::From { module, names, .. } => {
                for n in names {
                    let bound = n.alias.clone().unwrap_or_else(|| n.path.join(".").into());
                    if bound != binding {
                        continue;
                    }
                    let member = n.path.join(".");
                    let module: Vec<&str> = module.iter().map(|m| m.as_str()).collect();
                    return match &module[..] {
                        ["tessera"] => tessera_member(&member),
                        ["tessera", "stdlib"] => crate::stdlib::kernel_names()
                            .into_iter()
                            .find(|k| *k == member)
                            .map(|path| Definition::Builtin { path }),
                        ["tessera", ns] => builtins::lookup(&format!("{ns}.{member}")).map(|b| builtin_def(b.path)),
                        _ => None,
                    };
                }
            }
        }
    }
    None
}

/// Resolves a dotted path the way the checker does, without an inference (for names in
/// decorators and annotations, whose types the body's inference does not keep).
pub(crate) fn resolve_syntactic(db: &dyn Db, file: SourceFile, path: &[&str]) -> Option<Definition> {
    let (first, rest) = path.split_first()?;
    let scope = check::module_scope(db, file);
    let mut current = match scope.get(first) {
        Some(check::ScopeEntry::Function { .. }) => Definition::Function { name: first.to_string() },
        Some(check::ScopeEntry::Constant { .. }) => Definition::Constant { name: first.to_string() },
        Some(check::ScopeEntry::Member(_)) | Some(check::ScopeEntry::Unresolved) => {
            if rest.is_empty() {
                return Some(Definition::Import { name: first.to_string() });
            }
            import_target(db, file, first)?
        }
        None => match *first {
            "tile" => Definition::Namespace(Namespace::Tile),
            "dist" => Definition::Namespace(Namespace::Dist),
            "verify" => Definition::Namespace(Namespace::Verify),
            "kernel" => {
                if rest.is_empty() {
                    Definition::Builtin { path: "kernel" }
                } else {
                    Definition::Namespace(Namespace::Kernel)
                }
            }
            name => {
                if let Some(d) = DType::from_name(name) {
                    Definition::DType(d)
                } else if let Some(p) = Policy::NAMES.iter().copied().find(|p| *p == name) {
                    Definition::Policy(p)
                } else {
                    builtins::lookup(name).map(|b| builtin_def(b.path))?
                }
            }
        },
    };
    for seg in rest {
        current = match current {
            Definition::Namespace(Namespace::Tessera) => {
                if *seg == "kernel" {
                    Definition::Namespace(Namespace::Kernel)
                } else {
                    tessera_member(seg)?
                }
            }
            Definition::Namespace(ns @ (Namespace::Tile | Namespace::Dist | Namespace::Verify)) => {
                builtin_def(builtins::lookup(&format!("{}.{seg}", ns.name()))?.path)
            }
            Definition::Namespace(Namespace::Kernel) | Definition::Builtin { path: "kernel" } => {
                builtin_def(builtins::lookup(&format!("kernel.{seg}"))?.path)
            }
            _ => return None,
        };
    }
    // A bare `kernel` reached through an alias (`ts.kernel`) is the decorator.
    if let Definition::Namespace(Namespace::Kernel) = current {
        if path.last() == Some(&"kernel") {
            return Some(Definition::Builtin { path: "kernel" });
        }
    }
    Some(current)
}

/// Like `resolve_syntactic`, but an imported name is replaced by what it binds
/// (`ts` → the tessera namespace, `g` in `from tessera import gelu as g` → `gelu`).
pub(crate) fn resolve_through_imports(db: &dyn Db, file: SourceFile, path: &[&str]) -> Option<Definition> {
    match resolve_syntactic(db, file, path)? {
        Definition::Import { name } => import_target(db, file, &name),
        other => Some(other),
    }
}
