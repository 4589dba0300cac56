//! Go to definition: where each kind of `Definition` is bound in the file. Separate
//! from `classify` (the parent module), which says what a name denotes; the binding
//! helpers here (`import_binding`, `symbol_occurrences`) are shared with `references`.

use super::{classify, Definition, FnCtx};
use crate::check::schedule::canonical_key;
use crate::db::{self, Db, SourceFile};
use crate::syntax::ast::*;
use crate::text::TextRange;

/// A place to navigate to: `range` is the whole definition, `focus` its name.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct NavTarget {
    pub range: TextRange,
    pub focus: TextRange,
}

impl NavTarget {
    fn at(range: TextRange) -> NavTarget {
        NavTarget { range, focus: range }
    }
}

/// Where the name at `offset` is defined (empty for built-ins).
pub fn goto_definition(db: &dyn Db, file: SourceFile, offset: u32) -> Vec<NavTarget> {
    let Some(at) = classify(db, file, offset) else {
        return Vec::new();
    };
    definition_targets(db, file, &at.def, offset)
}

pub(crate) fn definition_targets(db: &dyn Db, file: SourceFile, def: &Definition, offset: u32) -> Vec<NavTarget> {
    let text = file.text(db);
    match def {
        Definition::Local { function, local } => {
            let Some(f) = FnCtx::new(db, file, *function) else {
                return Vec::new();
            };
            let Some(info) = f.inf.locals.get(*local as usize) else {
                return Vec::new();
            };
            let defs: Vec<TextRange> = info.defs.iter().map(|r| f.abs(*r)).collect();
            // The binding that reaches the cursor textually: the last one before it.
            let best = defs.iter().rev().find(|r| r.start <= offset).or(defs.first());
            best.map(|r| vec![NavTarget::at(*r)]).unwrap_or_default()
        }
        Definition::Param { function, index } => FnCtx::new(db, file, *function)
            .and_then(|f| {
                let p = f.ast.params.get(*index as usize)?;
                Some(vec![NavTarget { range: f.abs(p.range), focus: f.abs(p.name_range) }])
            })
            .unwrap_or_default(),
        Definition::DimSymbol { function, name } => FnCtx::new(db, file, *function)
            .and_then(|f| symbol_binding(&f, name, text))
            .map(|r| vec![NavTarget::at(r)])
            .unwrap_or_default(),
        Definition::Function { name } => db::item_index(db, file)
            .function(db, name)
            .map(|e| vec![NavTarget { range: e.range, focus: e.name_range }])
            .unwrap_or_default(),
        Definition::Constant { name } => db::item_index(db, file)
            .constants
            .iter()
            .find_map(|c| {
                let (_, r) = c.names.iter().find(|(n, _)| n == name)?;
                Some(NavTarget { range: c.range, focus: *r })
            })
            .into_iter()
            .collect(),
        Definition::Import { name } => import_binding(db, file, name)
            .map(|(item, r)| vec![NavTarget { range: item, focus: r }])
            .unwrap_or_default(),
        Definition::ScheduleKey { function, key } => FnCtx::new(db, file, *function)
            .and_then(|f| {
                let sched = f.deco.schedule.as_ref()?;
                let k = sched.space.iter().find(|k| canonical_key(&k.key) == canonical_key(key))?;
                Some(vec![NavTarget::at(f.deco_abs(k.key_range))])
            })
            .unwrap_or_default(),
        Definition::Builtin { .. }
        | Definition::BuiltinParam { .. }
        | Definition::DType(_)
        | Definition::Policy(_)
        | Definition::Namespace(_)
        | Definition::Member { .. }
        | Definition::Keyword(_) => Vec::new(),
    }
}

/// The import statement and the binding range of an imported name.
pub(super) fn import_binding(db: &dyn Db, file: SourceFile, binding: &str) -> Option<(TextRange, TextRange)> {
    for item in &db::parse(db, file).module.items {
        let ItemKind::Import(import) = &item.kind else {
            continue;
        };
        let names = match import {
            ImportAst::Import { names } | ImportAst::From { names, .. } => names,
        };
        for n in names {
            let bound = match (&n.alias, import) {
                (Some(a), _) => a.to_string(),
                (None, ImportAst::Import { .. }) => n.path.first().map(|p| p.to_string()).unwrap_or_default(),
                (None, ImportAst::From { .. }) => n.path.join("."),
            };
            if bound == binding {
                return Some((item.range, n.binding_range));
            }
        }
    }
    None
}

/// The first place a signature binds a dim symbol: inside an annotation string, or an
/// `int` parameter of that name.
fn symbol_binding(f: &FnCtx<'_>, name: &str, text: &str) -> Option<TextRange> {
    symbol_occurrences(f, name, text)
        .into_iter()
        .next()
        .or_else(|| f.ast.params.iter().find(|p| p.name == name).map(|p| f.abs(p.name_range)))
}

/// Every occurrence of a dim symbol inside the annotation strings of a signature
/// (absolute ranges of the word inside the string).
pub(super) fn symbol_occurrences(f: &FnCtx<'_>, name: &str, text: &str) -> Vec<TextRange> {
    let body = f.body();
    let marks = f.annotation_exprs();
    let mut out = Vec::new();
    for id in body.expr_ids() {
        if !marks[id.0 as usize] || !matches!(body.expr(id), Expr::Str(_)) {
            continue;
        }
        let range = f.abs(body.expr_range(id));
        let src = range.slice(text);
        let bytes = src.as_bytes();
        let mut from = 0;
        while let Some(pos) = src[from..].find(name) {
            let start = from + pos;
            let end = start + name.len();
            let before_ok = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
            let after_ok = end >= bytes.len() || !(bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_');
            if before_ok && after_ok {
                out.push(TextRange::new(range.start + start as u32, range.start + end as u32));
            }
            from = end;
        }
    }
    out
}
