//! The module scope: what each top-level name refers to, without positions, plus the
//! module-level diagnostics (duplicates, imports).

use std::collections::BTreeMap;

use super::builtins;
use super::dtype::DType;
use super::types::Namespace;
use crate::db::{self, Db, SourceFile};
use crate::diagnostics::name_index::NameIndex;
use crate::diagnostics::{suggest, Code, Diagnostic, Edit};
use crate::syntax::ast::{ImportAst, ImportedName, ItemKind};
use crate::text::TextRange;

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ScopeEntry {
    /// A function (the first of that name); `position` is its item index (a constant,
    /// evaluated in order like Python, sees only earlier functions).
    Function { position: u32 },
    /// A module constant: `key` is the first name its assignment binds (its
    /// `ConstKey` name), `position` its item index (constants see only earlier ones).
    Constant { key: String, position: u32, ordinal: u32 },
    /// A name bound by an import to something of tessera.
    Member(Member),
    /// A name bound by an import that could not be resolved (already reported).
    Unresolved,
}

/// Something `tessera` exports.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Member {
    Namespace(Namespace),
    Builtin(&'static str),
    DType(DType),
    StdlibKernel(&'static str),
}

/// Resolves `tessera.NAME` (and therefore `ts.NAME` and `from tessera import NAME`).
pub fn tessera_member(name: &str) -> Option<Member> {
    Some(match name {
        "tile" => Member::Namespace(Namespace::Tile),
        "dist" => Member::Namespace(Namespace::Dist),
        "verify" => Member::Namespace(Namespace::Verify),
        "stdlib" => Member::Namespace(Namespace::Stdlib),
        _ => {
            if let Some(d) = DType::from_name(name) {
                Member::DType(d)
            } else if let Some(b) = builtins::lookup(name) {
                Member::Builtin(b.path)
            } else {
                return None;
            }
        }
    })
}

/// Every name `tessera` exports (for suggestions and completion).
pub fn tessera_member_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = vec!["tile", "dist", "verify", "stdlib"];
    names.extend(builtins::prelude_names());
    names.extend(DType::SPELLINGS.iter().map(|(s, _)| *s));
    names
}

pub fn stdlib_member(name: &str) -> Option<Member> {
    crate::stdlib::kernel_names().into_iter().find(|n| *n == name).map(Member::StdlibKernel)
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ModuleScope {
    pub entries: BTreeMap<String, ScopeEntry>,
    /// Item index of every constant by (key name, ordinal), duplicates included.
    pub constant_positions: BTreeMap<(String, u32), u32>,
}

impl ModuleScope {
    pub fn get(&self, name: &str) -> Option<&ScopeEntry> {
        self.entries.get(name)
    }
}

/// What the top-level names of a file refer to. Holds no positions, so it stays equal
/// (and is backdated) while only function bodies change.
#[salsa::tracked(returns(ref))]
pub fn module_scope(db: &dyn Db, file: SourceFile) -> ModuleScope {
    let parse = db::parse(db, file);
    let mut scope = ModuleScope::default();
    let mut const_counts = BTreeMap::<&str, u32>::new();
    for (position, item) in parse.module.items.iter().enumerate() {
        match &item.kind {
            ItemKind::Function(f) => {
                scope.entries.entry(f.name.to_string()).or_insert(ScopeEntry::Function { position: position as u32 });
            }
            ItemKind::Constant(c) => {
                let Some((first, _)) = c.names.first() else {
                    continue;
                };
                let ordinal = const_counts.entry(first.as_str()).or_insert(0);
                for (name, _) in &c.names {
                    scope.entries.entry(name.to_string()).or_insert(ScopeEntry::Constant {
                        key: first.to_string(),
                        position: position as u32,
                        ordinal: *ordinal,
                    });
                }
                scope.constant_positions.insert((first.to_string(), *ordinal), position as u32);
                *ordinal += 1;
            }
            ItemKind::Import(import) => {
                for (name, entry, _) in import_bindings(import) {
                    scope.entries.entry(name).or_insert(entry);
                }
            }
            ItemKind::Invalid => {}
        }
    }
    scope
}

/// The module's names indexed for "did you mean" on an undefined name. Built the first
/// time a function or constant of the file has one, then shared by all of them: a file
/// with n undefined names among n definitions costs O(n), not n² edit distances.
#[salsa::tracked(returns(ref))]
pub fn module_name_index(db: &dyn Db, file: SourceFile) -> NameIndex {
    NameIndex::from_names(module_scope(db, file).entries.keys().map(String::as_str))
}

/// The names an import binds, what they refer to, and the error for each that fails.
fn import_bindings(import: &ImportAst) -> Vec<(String, ScopeEntry, Option<Diagnostic>)> {
    let mut out = Vec::new();
    match import {
        ImportAst::Import { names } => {
            for name in names {
                let path: Vec<&str> = name.path.iter().map(|p| p.as_str()).collect();
                let binding = name
                    .alias
                    .as_ref()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| name.path.first().map(|p| p.to_string()).unwrap_or_default());
                let resolved = resolve_module_path(&path);
                match (resolved, name.alias.is_some()) {
                    (Some(member), true) => out.push((binding, ScopeEntry::Member(member), None)),
                    // `import tessera.stdlib` binds `tessera`.
                    (Some(_), false) => {
                        out.push((binding, ScopeEntry::Member(Member::Namespace(Namespace::Tessera)), None))
                    }
                    (None, _) => out.push((binding, ScopeEntry::Unresolved, Some(unknown_module(name, &path)))),
                }
            }
        }
        ImportAst::From { module, module_range, names, wildcard } => {
            let path: Vec<&str> = module.iter().map(|p| p.as_str()).collect();
            let Some(Member::Namespace(ns)) = resolve_module_path(&path) else {
                let diagnostic = Diagnostic::new(
                    Code::E0200,
                    *module_range,
                    format!("unknown module `{}`: only `tessera` and its submodules can be imported", path.join(".")),
                );
                let mut first = Some(diagnostic);
                for name in names {
                    let binding = name.alias.as_ref().map(|a| a.to_string()).unwrap_or_else(|| name.path.join("."));
                    out.push((binding, ScopeEntry::Unresolved, first.take()));
                }
                if let Some(d) = first {
                    out.push((String::new(), ScopeEntry::Unresolved, Some(d)));
                }
                return out;
            };
            let _ = wildcard; // `from tessera import *` binds what is in scope anyway.
            for name in names {
                let member_name = name.path.join(".");
                let binding = name.alias.as_ref().map(|a| a.to_string()).unwrap_or_else(|| member_name.clone());
                let member = match ns {
                    Namespace::Tessera => tessera_member(&member_name),
                    Namespace::Stdlib => stdlib_member(&member_name),
                    Namespace::Tile | Namespace::Dist | Namespace::Verify => {
                        builtins::lookup(&format!("{}.{member_name}", ns.name())).map(|b| Member::Builtin(b.path))
                    }
                    Namespace::Kernel => None,
                };
                match member {
                    Some(m) => out.push((binding, ScopeEntry::Member(m), None)),
                    None => {
                        let candidates: Vec<&str> = match ns {
                            Namespace::Tessera => tessera_member_names(),
                            Namespace::Stdlib => crate::stdlib::kernel_names(),
                            _ => builtins::members(ns.name()).map(|b| b.name()).collect(),
                        };
                        let mut d = Diagnostic::new(
                            Code::E0201,
                            name.range,
                            format!("`{}` has no member `{member_name}`", path.join(".")),
                        );
                        if let Some(s) = suggest(&member_name, candidates.iter().copied()) {
                            d = d.with_did_you_mean(name_path_range(name), s);
                        }
                        out.push((binding, ScopeEntry::Unresolved, Some(d)));
                    }
                }
            }
        }
    }
    out
}

fn name_path_range(name: &ImportedName) -> TextRange {
    match name.alias {
        // `x as y`: the path is the first part of the range.
        Some(_) => {
            let len: usize = name.path.iter().map(|p| p.len()).sum::<usize>() + name.path.len().saturating_sub(1);
            TextRange::new(name.range.start, name.range.start + len as u32)
        }
        None => name.range,
    }
}

fn unknown_module(name: &ImportedName, path: &[&str]) -> Diagnostic {
    Diagnostic::new(
        Code::E0200,
        name.range,
        format!("unknown module `{}`: only `tessera` and its submodules can be imported", path.join(".")),
    )
}

fn resolve_module_path(path: &[&str]) -> Option<Member> {
    match path {
        ["tessera"] => Some(Member::Namespace(Namespace::Tessera)),
        ["tessera", rest] => match tessera_member(rest)? {
            m @ Member::Namespace(_) => Some(m),
            _ => None,
        },
        _ => None,
    }
}

/// The one diagnostic for `ts.`/`tessera.` used without an import (at its first use).
pub fn unimported_alias(db: &dyn Db, file: SourceFile, first: TextRange, uses: usize) -> Diagnostic {
    let text = file.text(db);
    let name = first.slice(text).to_string();
    // Insert the import before the first item, after any leading comments/docstring.
    let at = db::parse(db, file).module.items.first().map_or(0, |i| i.anchor);
    let import = if name == "tessera" { "import tessera\n".to_string() } else { format!("import tessera as {name}\n") };
    Diagnostic::new(Code::E0200, first, format!("`{name}` is used but never imported"))
        .with_note(if uses > 1 {
            format!("{uses} uses of `{name}` in this file depend on it; they are checked as if it were imported")
        } else {
            format!("`{name}.X` names the built-in X once tessera is imported")
        })
        .with_fix(format!("add `{}`", import.trim_end()), vec![Edit { range: TextRange::empty(at), text: import }])
}

/// E0202 for duplicate top-level names (label at the first), and import errors.
pub fn module_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let parse = db::parse(db, file);
    let mut out = Vec::new();
    let mut first: BTreeMap<String, TextRange> = BTreeMap::new();
    let mut define = |name: &str, range: TextRange, kind: &str, out: &mut Vec<Diagnostic>| {
        if name.is_empty() {
            return;
        }
        match first.get(name) {
            Some(&prev) => out.push(
                Diagnostic::new(Code::E0202, range, format!("`{name}` is defined more than once"))
                    .with_label(prev, "first defined here")
                    .with_note(format!("rename this {kind} or remove one of the definitions")),
            ),
            None => {
                first.insert(name.to_string(), range);
            }
        }
    };
    for item in &parse.module.items {
        match &item.kind {
            ItemKind::Function(f) => define(&f.name, f.name_range.shift(item.anchor), "function", &mut out),
            ItemKind::Constant(c) => {
                for (name, range) in &c.names {
                    define(name, range.shift(item.anchor), "constant", &mut out);
                }
            }
            ItemKind::Import(import) => {
                let ranges: Vec<TextRange> = match import {
                    ImportAst::Import { names } | ImportAst::From { names, .. } => {
                        names.iter().map(|n| n.binding_range).collect()
                    }
                };
                for (i, (name, _, diagnostic)) in import_bindings(import).into_iter().enumerate() {
                    if let Some(d) = diagnostic {
                        out.push(d);
                    }
                    if let Some(&range) = ranges.get(i) {
                        define(&name, range, "import", &mut out);
                    }
                }
            }
            ItemKind::Invalid => {}
        }
    }
    out
}
