//! The salsa database: inputs and the per-file / per-item queries of the frontend.
//!
//! Invariant (rust-analyzer's): typing inside one function's body must not invalidate
//! any other function's analysis. Items are keyed by name (`FnKey`, `ConstKey`), their
//! syntax is stored relative to the item's anchor, and module-wide facts (`ModuleScope`)
//! hold no positions, so an edit re-runs only the edited item's analyses.

use std::path::PathBuf;
use std::sync::Arc;

use crate::diagnostics::Diagnostic;
use crate::syntax::{self, ast, Parse};

/// The database trait every Tessera query is written against.
#[salsa::db]
pub trait Db: salsa::Database {
    /// The input of a compiler-generated module (a graph function's kernels): one per
    /// distinct (path, text), so asking twice gives the same file and its queries are
    /// reused.
    fn generated_file(&self, path: &std::path::Path, text: &str) -> SourceFile;
}

/// One source file. `utf8_error` is the offset of the first invalid byte when the file
/// on disk was not UTF-8 (the text is then its lossy decoding).
#[salsa::input(debug)]
pub struct SourceFile {
    #[returns(ref)]
    pub path: PathBuf,
    #[returns(ref)]
    pub text: String,
    #[returns(copy)]
    pub utf8_error: Option<u32>,
}

/// A function of a file, by name; `ordinal` tells duplicates apart (E0202).
#[salsa::interned(debug, revisions = usize::MAX)]
pub struct FnKey<'db> {
    #[returns(copy)]
    pub file: SourceFile,
    #[returns(ref)]
    pub name: String,
    #[returns(copy)]
    pub ordinal: u32,
}

/// A module constant of a file, by its first target name.
#[salsa::interned(debug, revisions = usize::MAX)]
pub struct ConstKey<'db> {
    #[returns(copy)]
    pub file: SourceFile,
    #[returns(ref)]
    pub name: String,
    #[returns(copy)]
    pub ordinal: u32,
}

/// The text of one top-level statement group, interned so that equal chunks (the
/// unchanged ones after an edit) share one memoized parse.
#[salsa::interned(debug)]
pub struct Chunk<'db> {
    #[returns(ref)]
    pub text: String,
}

#[salsa::tracked(returns(ref))]
fn parse_chunk<'db>(db: &'db dyn Db, chunk: Chunk<'db>) -> syntax::ChunkParse {
    syntax::parse_chunk(chunk.text(db))
}

/// Parses a file: chunks, lexical checks, tree-sitter, lowering to the item AST.
#[salsa::tracked(returns(ref))]
pub fn parse(db: &dyn Db, file: SourceFile) -> Parse {
    let text = file.text(db);
    syntax::assemble(text, file.utf8_error(db), |chunk_text| parse_chunk(db, Chunk::new(db, chunk_text)))
}

/// The AST of one function, with item-relative ranges. Equal across edits of other
/// items, so salsa backdates it and its dependents do not re-run.
/// A derived kernel (`name = kernel.with_schedule(S)`) answers with its original's AST:
/// its ranges are relative to the original's anchor, which its index entry carries.
#[salsa::tracked]
pub fn function_ast<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<Arc<ast::FunctionAst>> {
    if let Some(f) = parse(db, key.file(db)).function(key.name(db), key.ordinal(db)) {
        return Some(f.clone());
    }
    (*derived_kernel(db, key)).and_then(|d| function_ast(db, d.original).clone())
}

/// A kernel defined by a top-level `name = kernel.with_schedule(S)`: the body and
/// signature of `original` (never itself derived: `b = a.with_schedule(T)` with a derived
/// `a` goes back to `a`'s original) under the fixed schedule `S` of `assignment`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, salsa::SalsaValue)]
pub struct DerivedKernel<'db> {
    pub original: FnKey<'db>,
    pub assignment: ConstKey<'db>,
}

/// `name = receiver.with_schedule(args...)` (parentheses around the value allowed): the
/// receiver's name, the call and its arguments. The one syntactic rule for what defines a
/// derived kernel, shared by the item index and the checker.
pub fn with_schedule_call(c: &ast::ConstantAst) -> Option<(&ast::Name, ast::ExprId, &[ast::Arg])> {
    if !matches!(c.arena.expr(c.target), ast::Expr::Name(_)) {
        return None;
    }
    let mut value = c.value;
    while let ast::Expr::Paren(inner) = c.arena.expr(value) {
        value = *inner;
    }
    let ast::Expr::Call { func, args } = c.arena.expr(value) else {
        return None;
    };
    let ast::Expr::Attribute { object, name, .. } = c.arena.expr(*func) else {
        return None;
    };
    let ast::Expr::Name(receiver) = c.arena.expr(*object) else {
        return None;
    };
    (name.as_str() == "with_schedule").then_some((receiver, value, args.as_slice()))
}

/// What [`DerivedKernel`] `key` is, when its name is bound by a `with_schedule`
/// assignment (the first binding of the name, and no `def` of it) whose receiver leads,
/// through at most 16 such assignments, to a function of the same file or to a
/// standard-library kernel the file imports (`from tessera.stdlib import matmul`): then
/// `original` is that kernel in its f32 instance (`stdlib::instance`), a file of its own.
#[salsa::tracked]
pub fn derived_kernel<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<DerivedKernel<'db>> {
    let file = key.file(db);
    let parse = parse(db, file);
    if key.ordinal(db) != 0 || parse.function(key.name(db), 0).is_some() {
        return None;
    }
    let assignment = ConstKey::new(db, file, key.name(db).as_str(), 0);
    let mut name = key.name(db).to_string();
    for _ in 0..16 {
        let (receiver, _, _) = with_schedule_call(parse.constant(&name, 0)?)?;
        if parse.function(receiver.as_str(), 0).is_some() {
            let original = FnKey::new(db, file, receiver.as_str(), 0);
            return Some(DerivedKernel { original, assignment });
        }
        if parse.constant(receiver.as_str(), 0).is_none() {
            let kernel = stdlib_import(parse, receiver.as_str())?;
            let (path, text) = crate::stdlib::instance(&kernel, "f32")?;
            let instance = db.generated_file(std::path::Path::new(&path), &text);
            let original = FnKey::new(db, instance, kernel.as_str(), 0);
            return Some(DerivedKernel { original, assignment });
        }
        name = receiver.to_string();
    }
    None
}

/// The standard-library kernel `name` is bound to by a `from tessera.stdlib import
/// kernel [as name]` of the file.
fn stdlib_import(parse: &Parse, name: &str) -> Option<String> {
    for item in &parse.module.items {
        let ast::ItemKind::Import(ast::ImportAst::From { module, names, .. }) = &item.kind else {
            continue;
        };
        if !module.iter().map(|m| m.as_str()).eq(["tessera", "stdlib"]) {
            continue;
        }
        for n in names {
            let member = n.path.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(".");
            let binding = n.alias.as_ref().map_or(member.as_str(), |a| a.as_str());
            if binding == name && crate::stdlib::file_of(&member).is_some() {
                return Some(member);
            }
        }
    }
    None
}

/// The derived kernel `key` when its original is a standard-library kernel (another
/// file): its body's ranges count from nothing in the user's file, so its index entry
/// is anchored at the assignment and what it reports goes to the assignment's name.
pub fn stdlib_derived<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<DerivedKernel<'db>> {
    (*derived_kernel(db, key)).filter(|d| d.original.file(db) != key.file(db))
}

/// The file whose module scope resolves the names of `key`'s body and signature: the
/// original's for a derived standard-library kernel, else `key`'s own.
pub fn home_file(db: &dyn Db, key: FnKey<'_>) -> SourceFile {
    stdlib_derived(db, key).map_or(key.file(db), |d| d.original.file(db))
}

/// A function's definition alone: equal (and backdated) when only its decorators
/// change, so inference and Graph IR survive an edited autotune candidate.
#[salsa::tracked]
pub fn function_def<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<Arc<ast::FunctionDef>> {
    function_ast(db, key).as_ref().map(|f| f.def.clone())
}

/// A function's decorators alone.
#[salsa::tracked]
pub fn function_decorators<'db>(db: &'db dyn Db, key: FnKey<'db>) -> Option<Arc<ast::Decorators>> {
    function_ast(db, key).as_ref().map(|f| f.decorators.clone())
}

/// The AST of one module constant, with item-relative ranges.
#[salsa::tracked]
pub fn constant_ast<'db>(db: &'db dyn Db, key: ConstKey<'db>) -> Option<Arc<ast::ConstantAst>> {
    parse(db, key.file(db)).constant(key.name(db), key.ordinal(db)).cloned()
}

/// The absolute anchor of a function (where its relative ranges count from).
pub fn function_anchor(db: &dyn Db, key: FnKey<'_>) -> Option<u32> {
    item_index(db, key.file(db)).functions.iter().find(|f| f.key == key).map(|f| f.anchor)
}

/// The absolute anchor of a constant.
pub fn constant_anchor(db: &dyn Db, key: ConstKey<'_>) -> Option<u32> {
    item_index(db, key.file(db)).constants.iter().find(|c| c.key == key).map(|c| c.anchor)
}

/// A function's place in the file.
#[derive(Clone, PartialEq, Eq, Debug, salsa::SalsaValue)]
pub struct FunctionEntry<'db> {
    pub key: FnKey<'db>,
    pub anchor: u32,
    pub range: crate::text::TextRange,
    pub name_range: crate::text::TextRange,
}

/// A constant's place in the file.
#[derive(Clone, PartialEq, Eq, Debug, salsa::SalsaValue)]
pub struct ConstantEntry<'db> {
    pub key: ConstKey<'db>,
    pub anchor: u32,
    pub range: crate::text::TextRange,
    /// Every name the constant binds, with absolute ranges.
    pub names: Vec<(String, crate::text::TextRange)>,
}

/// The items of a file with their absolute positions (changes on every edit; only
/// position-dependent consumers read it).
#[derive(Clone, PartialEq, Eq, Debug, Default, salsa::SalsaValue)]
pub struct ItemIndex<'db> {
    pub functions: Vec<FunctionEntry<'db>>,
    pub constants: Vec<ConstantEntry<'db>>,
    /// Each function name with the position of its first definition, sorted by name: a
    /// generated module of thousands of kernels is looked up per kernel and per IR line.
    by_name: Vec<(String, u32)>,
}

impl<'db> ItemIndex<'db> {
    /// The function a request names: the first definition of `name` in the file (a
    /// redefinition is its own diagnostic). The one "find a function by name" every
    /// front door and pass uses.
    pub fn function(&self, db: &'db dyn Db, name: &str) -> Option<&FunctionEntry<'db>> {
        self.function_position(db, name).map(|i| &self.functions[i])
    }

    /// Where [`ItemIndex::function`]'s function is in `functions`.
    pub fn function_position(&self, _db: &'db dyn Db, name: &str) -> Option<usize> {
        let at = self.by_name.binary_search_by(|(n, _)| n.as_str().cmp(name)).ok()?;
        Some(self.by_name[at].1 as usize)
    }

    /// Every function's name, in file order (for "it defines ..." in errors).
    pub fn function_names(&self, db: &'db dyn Db) -> Vec<String> {
        self.functions.iter().map(|f| f.key.name(db).to_string()).collect()
    }
}

#[salsa::tracked(returns(ref))]
pub fn item_index(db: &dyn Db, file: SourceFile) -> ItemIndex<'_> {
    let parse = parse(db, file);
    let mut index = ItemIndex::default();
    let mut fn_counts = std::collections::HashMap::<&str, u32>::new();
    let mut const_counts = std::collections::HashMap::<&str, u32>::new();
    for item in &parse.module.items {
        match &item.kind {
            ast::ItemKind::Function(f) => {
                let ordinal = fn_counts.entry(f.name.as_str()).or_insert(0);
                let key = FnKey::new(db, file, f.name.as_str(), *ordinal);
                *ordinal += 1;
                index.functions.push(FunctionEntry {
                    key,
                    anchor: item.anchor,
                    range: item.range,
                    name_range: f.name_range.shift(item.anchor),
                });
            }
            ast::ItemKind::Constant(c) => {
                let Some((first, _)) = c.names.first() else {
                    continue;
                };
                let ordinal = const_counts.entry(first.as_str()).or_insert(0);
                let key = ConstKey::new(db, file, first.as_str(), *ordinal);
                *ordinal += 1;
                index.constants.push(ConstantEntry {
                    key,
                    anchor: item.anchor,
                    range: item.range,
                    names: c.names.iter().map(|(n, r)| (n.to_string(), r.shift(item.anchor))).collect(),
                });
            }
            _ => {}
        }
    }
    // Derived kernels: the body's ranges count from the original's anchor, the entry's
    // range and name are the assignment's.
    for c in 0..index.constants.len() {
        let entry = &index.constants[c];
        let name = entry.key.name(db);
        if entry.key.ordinal(db) != 0 || fn_counts.contains_key(name.as_str()) {
            continue;
        }
        let key = FnKey::new(db, file, name.as_str(), 0);
        let Some(derived) = *derived_kernel(db, key) else {
            continue;
        };
        let entry = &index.constants[c];
        let anchor = if derived.original.file(db) != file {
            // A standard-library original: anchored at the assignment (nothing of the
            // body is reported in this file; its IR points at the assignment's name).
            entry.anchor
        } else {
            let Some(anchor) = index.functions.iter().find(|f| f.key == derived.original).map(|f| f.anchor) else {
                continue;
            };
            anchor
        };
        let (range, name_range) = (entry.range, entry.names[0].1);
        index.functions.push(FunctionEntry { key, anchor, range, name_range });
    }
    let mut by_name: Vec<(String, u32)> =
        index.functions.iter().enumerate().map(|(i, f)| (f.key.name(db).to_string(), i as u32)).collect();
    // Sorted by name, then position: the first of each name is its first definition.
    by_name.sort();
    by_name.dedup_by(|later, first| later.0 == first.0);
    index.by_name = by_name;
    index
}

/// The syntax-level diagnostics of a file (lexical + parser + lowering), absolute.
pub fn syntax_diagnostics(db: &dyn Db, file: SourceFile) -> &[Diagnostic] {
    &parse(db, file).diagnostics
}
