//! Rename: which names may be renamed, whether the new name is free, and the edits
//! (the references of the name). Separate because it adds policy (what refuses, what
//! conflicts) on top of `references`, which it only reads.

use std::fmt;

use super::references::references_of;
use super::{classify, Definition, FnCtx, NameAt};
use crate::check;
use crate::db::{self, Db, SourceFile};
use crate::ide::lex;
use crate::syntax::ast::*;
use crate::text::TextRange;

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RenameError {
    /// Nothing renamable at the cursor.
    NoName,
    /// The name cannot be renamed (a built-in, a keyword, ...): why.
    NotRenamable(String),
    /// The new name is not an identifier, or is a keyword.
    InvalidName(String),
    /// The new name is already taken in that scope.
    Conflict(String),
}

impl fmt::Display for RenameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenameError::NoName => f.write_str("no renamable name at the cursor"),
            RenameError::NotRenamable(m) | RenameError::InvalidName(m) | RenameError::Conflict(m) => f.write_str(m),
        }
    }
}

/// The range of the renamable name at `offset`, or why it cannot be renamed.
pub fn prepare_rename(db: &dyn Db, file: SourceFile, offset: u32) -> Result<TextRange, RenameError> {
    let at = classify(db, file, offset).ok_or(RenameError::NoName)?;
    check_renamable(db, file, &at)?;
    Ok(at.range)
}

fn check_renamable(db: &dyn Db, file: SourceFile, at: &NameAt) -> Result<(), RenameError> {
    let refuse = |m: String| Err(RenameError::NotRenamable(m));
    match &at.def {
        Definition::Local { .. }
        | Definition::Param { .. }
        | Definition::Function { .. }
        | Definition::Constant { .. } => Ok(()),
        Definition::Import { name } => {
            let aliased = db::parse(db, file).module.items.iter().any(|it| {
                matches!(&it.kind, ItemKind::Import(ImportAst::Import { names } | ImportAst::From { names, .. })
                    if names.iter().any(|n| n.alias.as_deref() == Some(name.as_str())))
            });
            if aliased {
                Ok(())
            } else {
                refuse(format!(
                    "`{name}` is the name of a tessera member; write `{name} as NEW_NAME` in the import to rename it"
                ))
            }
        }
        Definition::Keyword(k) => refuse(format!("`{k}` is a keyword and cannot be renamed")),
        Definition::Builtin { path } => refuse(format!("`{path}` is a built-in and cannot be renamed")),
        Definition::BuiltinParam { path, name } => {
            refuse(format!("`{name}` is a parameter of the built-in `{path}` and cannot be renamed"))
        }
        Definition::DType(d) => refuse(format!("`{d}` is a built-in dtype and cannot be renamed")),
        Definition::Policy(p) => refuse(format!("`@{p}` is a built-in policy and cannot be renamed")),
        Definition::Namespace(ns) => refuse(format!("`{}` is a built-in namespace and cannot be renamed", ns.name())),
        Definition::ScheduleKey { key, .. } => {
            refuse(format!("`{key}` is a schedule key; rename it in the autotune space and at its `ctx.` reads"))
        }
        Definition::DimSymbol { name, .. } => {
            refuse(format!("`{name}` is a dim symbol of the signature; rename it in the annotation strings"))
        }
        Definition::Member { name, .. } => refuse(format!("`{name}` is a built-in attribute and cannot be renamed")),
    }
}

/// The edits that rename the name at `offset` to `new_name` everywhere in the file.
pub fn rename(
    db: &dyn Db,
    file: SourceFile,
    offset: u32,
    new_name: &str,
) -> Result<Vec<crate::diagnostics::Edit>, RenameError> {
    let at = classify(db, file, offset).ok_or(RenameError::NoName)?;
    check_renamable(db, file, &at)?;
    let new_name = new_name.trim();
    if lex::is_keyword(new_name) {
        return Err(RenameError::InvalidName(format!("`{new_name}` is a keyword")));
    }
    if !lex::is_identifier(new_name) {
        return Err(RenameError::InvalidName(format!("`{new_name}` is not a valid identifier")));
    }
    let conflict = |m: String| Err(RenameError::Conflict(m));
    match &at.def {
        Definition::Local { function, .. } | Definition::Param { function, .. } => {
            if let Some(f) = FnCtx::new(db, file, *function) {
                let taken = f.inf.locals.iter().any(|l| l.name == new_name)
                    || f.ast.params.iter().any(|p| p.name == new_name)
                    || f.sig.symbols.iter().any(|s| s == new_name);
                if taken {
                    return conflict(format!("`{new_name}` is already a name in `{}`", f.name()));
                }
            }
        }
        _ => {
            if check::module_scope(db, file).get(new_name).is_some() {
                return conflict(format!("`{new_name}` is already defined in this module"));
            }
        }
    }
    let refs = references_of(db, file, &at.def);
    Ok(refs.into_iter().map(|r| crate::diagnostics::Edit { range: r.range, text: new_name.to_string() }).collect())
}
