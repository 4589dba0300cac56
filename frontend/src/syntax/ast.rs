//! The typed syntax tree the checker works on.
//!
//! Each top-level item owns an arena (`Body`) of expressions and statements whose
//! ranges are relative to the item's anchor (its first byte). Two parses of a file that
//! differ only outside an item therefore give equal item trees, and salsa reuses every
//! analysis of that item.

use std::sync::Arc;

use crate::text::TextRange;

pub type Name = smol_str::SmolStr;

#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ExprId(pub u32);

#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct StmtId(pub u32);

/// A float literal stored by its bits so that syntax trees can be compared with `Eq`.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct FloatLit(pub u64);

impl FloatLit {
    pub fn new(value: f64) -> FloatLit {
        FloatLit(value.to_bits())
    }
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl std::fmt::Debug for FloatLit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.get())
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    MatMul,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            FloorDiv => "//",
            Mod => "%",
            Pow => "**",
            MatMul => "@",
            BitAnd => "&",
            BitOr => "|",
            BitXor => "^",
            Shl => "<<",
            Shr => ">>",
        }
    }

    pub fn from_symbol(s: &str) -> Option<BinOp> {
        use BinOp::*;
        Some(match s.trim_end_matches('=') {
            "+" => Add,
            "-" => Sub,
            "*" => Mul,
            "/" => Div,
            "//" => FloorDiv,
            "%" => Mod,
            "**" => Pow,
            "@" => MatMul,
            "&" => BitAnd,
            "|" => BitOr,
            "^" => BitXor,
            "<<" => Shl,
            ">>" => Shr,
            _ => return None,
        })
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    Neg,
    Pos,
    Invert,
    Not,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BoolOp {
    And,
    Or,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    In,
    NotIn,
    Is,
    IsNot,
}

impl CmpOp {
    /// The predicate of an `arith.cmp` for an ordering or equality comparison (`lt`, ...);
    /// `None` for membership and identity, which compare no numbers.
    pub fn predicate(self) -> Option<&'static str> {
        use CmpOp::*;
        Some(match self {
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            Eq => "eq",
            Ne => "ne",
            In | NotIn | Is | IsNot => return None,
        })
    }

    pub fn symbol(self) -> &'static str {
        use CmpOp::*;
        match self {
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Eq => "==",
            Ne => "!=",
            In => "in",
            NotIn => "not in",
            Is => "is",
            IsNot => "is not",
        }
    }
}

/// A call argument; `name` is set for keyword arguments.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Arg {
    pub name: Option<(Name, TextRange)>,
    pub value: ExprId,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Expr {
    /// A piece the parser could not read; its error is already reported.
    Missing,
    Name(Name),
    Int(i64),
    Float(FloatLit),
    Str(String),
    Bool(bool),
    NoneLit,
    Ellipsis,
    Attribute {
        object: ExprId,
        name: Name,
        name_range: TextRange,
    },
    Subscript {
        value: ExprId,
        indices: Vec<ExprId>,
    },
    Slice {
        start: Option<ExprId>,
        stop: Option<ExprId>,
        step: Option<ExprId>,
    },
    Call {
        func: ExprId,
        args: Vec<Arg>,
    },
    Binary {
        op: BinOp,
        lhs: ExprId,
        rhs: ExprId,
    },
    Unary {
        op: UnaryOp,
        operand: ExprId,
    },
    BoolOp {
        op: BoolOp,
        lhs: ExprId,
        rhs: ExprId,
    },
    Compare {
        op: CmpOp,
        lhs: ExprId,
        rhs: ExprId,
    },
    IfExpr {
        cond: ExprId,
        then: ExprId,
        otherwise: ExprId,
    },
    Paren(ExprId),
    Tuple(Vec<ExprId>),
    List(Vec<ExprId>),
    Dict(Vec<(ExprId, ExprId)>),
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct IfBranch {
    pub cond: ExprId,
    pub body: Vec<StmtId>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct WithItem {
    pub value: ExprId,
    pub alias: Option<ExprId>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Stmt {
    Expr(ExprId),
    Assign {
        target: ExprId,
        annotation: Option<ExprId>,
        value: ExprId,
    },
    AugAssign {
        target: ExprId,
        op: BinOp,
        op_range: TextRange,
        value: ExprId,
    },
    Return(Option<ExprId>),
    Pass,
    Break,
    Continue,
    /// `if`/`elif` branches in order, then the optional `else` body.
    If {
        branches: Vec<IfBranch>,
        orelse: Option<Vec<StmtId>>,
    },
    For {
        target: ExprId,
        iter: ExprId,
        body: Vec<StmtId>,
        orelse: Option<Vec<StmtId>>,
    },
    While {
        cond: ExprId,
        body: Vec<StmtId>,
    },
    With {
        items: Vec<WithItem>,
        body: Vec<StmtId>,
    },
    /// A statement that is not allowed here (a nested `def`, an `import` in a body);
    /// the lowering has reported it.
    Invalid,
}

/// The expression and statement arena of one item.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Body {
    pub exprs: Vec<Expr>,
    pub expr_ranges: Vec<TextRange>,
    pub stmts: Vec<Stmt>,
    pub stmt_ranges: Vec<TextRange>,
}

impl Body {
    pub fn alloc_expr(&mut self, expr: Expr, range: TextRange) -> ExprId {
        self.exprs.push(expr);
        self.expr_ranges.push(range);
        ExprId(self.exprs.len() as u32 - 1)
    }

    pub fn alloc_stmt(&mut self, stmt: Stmt, range: TextRange) -> StmtId {
        self.stmts.push(stmt);
        self.stmt_ranges.push(range);
        StmtId(self.stmts.len() as u32 - 1)
    }

    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id.0 as usize]
    }

    pub fn stmt(&self, id: StmtId) -> &Stmt {
        &self.stmts[id.0 as usize]
    }

    pub fn expr_range(&self, id: ExprId) -> TextRange {
        self.expr_ranges[id.0 as usize]
    }

    pub fn stmt_range(&self, id: StmtId) -> TextRange {
        self.stmt_ranges[id.0 as usize]
    }

    pub fn expr_ids(&self) -> impl Iterator<Item = ExprId> {
        (0..self.exprs.len() as u32).map(ExprId)
    }

    /// Strips parentheses: `(x)` → `x`.
    pub fn unparen(&self, mut id: ExprId) -> ExprId {
        while let Expr::Paren(inner) = self.expr(id) {
            id = *inner;
        }
        id
    }

    /// The dotted path of a name or attribute chain (`ts.tile.load` → ["ts","tile","load"]).
    pub fn dotted_path(&self, id: ExprId) -> Option<Vec<&str>> {
        match self.expr(self.unparen(id)) {
            Expr::Name(n) => Some(vec![n.as_str()]),
            Expr::Attribute { object, name, .. } => {
                let mut path = self.dotted_path(*object)?;
                path.push(name.as_str());
                Some(path)
            }
            _ => None,
        }
    }

    /// Calls `f` on every direct sub-expression of `id`.
    pub fn walk_children(&self, id: ExprId, mut f: impl FnMut(ExprId)) {
        match self.expr(id) {
            Expr::Attribute { object, .. } => f(*object),
            Expr::Subscript { value, indices } => {
                f(*value);
                indices.iter().copied().for_each(f);
            }
            Expr::Slice { start, stop, step } => [start, stop, step].into_iter().flatten().copied().for_each(f),
            Expr::Call { func, args } => {
                f(*func);
                args.iter().for_each(|a| f(a.value));
            }
            Expr::Binary { lhs, rhs, .. } | Expr::BoolOp { lhs, rhs, .. } | Expr::Compare { lhs, rhs, .. } => {
                f(*lhs);
                f(*rhs);
            }
            Expr::Unary { operand, .. } => f(*operand),
            Expr::IfExpr { cond, then, otherwise } => {
                f(*then);
                f(*cond);
                f(*otherwise);
            }
            Expr::Paren(inner) => f(*inner),
            Expr::Tuple(items) | Expr::List(items) => items.iter().copied().for_each(f),
            Expr::Dict(pairs) => pairs.iter().for_each(|(k, v)| {
                f(*k);
                f(*v);
            }),
            Expr::Missing
            | Expr::Name(_)
            | Expr::Int(_)
            | Expr::Float(_)
            | Expr::Str(_)
            | Expr::Bool(_)
            | Expr::NoneLit
            | Expr::Ellipsis => {}
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Param {
    pub name: Name,
    pub name_range: TextRange,
    pub annotation: Option<ExprId>,
    pub default: Option<ExprId>,
    /// After a bare `*`: may only be passed by keyword.
    pub keyword_only: bool,
    pub range: TextRange,
}

/// The decorators of a function, with their own arena; ranges are relative to the
/// item's first byte (its first `@`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Decorators {
    pub exprs: Vec<ExprId>,
    pub arena: Body,
}

/// A function: its definition and its decorators, kept apart so that editing a
/// decorator (an autotune candidate, say) leaves the definition — and everything
/// derived from it: inference, Graph IR — equal.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FunctionAst {
    pub def: Arc<FunctionDef>,
    pub decorators: Arc<Decorators>,
    /// Bytes from the item's first byte (the first decorator) to `def`.
    pub decorator_offset: u32,
}

impl std::ops::Deref for FunctionAst {
    type Target = FunctionDef;

    fn deref(&self) -> &FunctionDef {
        &self.def
    }
}

/// One `def`; ranges relative to the `def` keyword (the item anchor).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FunctionDef {
    pub name: Name,
    pub name_range: TextRange,
    pub params: Vec<Param>,
    pub params_range: TextRange,
    pub return_type: Option<ExprId>,
    pub body: Vec<StmtId>,
    pub docstring: Option<String>,
    /// The `def ... :` header, from `def` to the colon.
    pub header_range: TextRange,
    pub arena: Body,
}

/// A module-level `NAME = value` (or `a, b = value`); ranges relative to the item anchor.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ConstantAst {
    pub names: Vec<(Name, TextRange)>,
    pub target: ExprId,
    pub value: ExprId,
    pub arena: Body,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ImportedName {
    pub path: Vec<Name>,
    pub alias: Option<Name>,
    /// The range of the whole `name as alias` (absolute: imports are tiny and
    /// cheap to recompute).
    pub range: TextRange,
    pub binding_range: TextRange,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ImportAst {
    /// `import a.b as c, d`
    Import { names: Vec<ImportedName> },
    /// `from a.b import x as y, z` / `from a import *`
    From { module: Vec<Name>, module_range: TextRange, names: Vec<ImportedName>, wildcard: bool },
}

impl ImportAst {
    fn shifted(&self, offset: u32) -> ImportAst {
        let shift = |names: &[ImportedName]| -> Vec<ImportedName> {
            names
                .iter()
                .map(|n| ImportedName {
                    range: n.range.shift(offset),
                    binding_range: n.binding_range.shift(offset),
                    ..n.clone()
                })
                .collect()
        };
        match self {
            ImportAst::Import { names } => ImportAst::Import { names: shift(names) },
            ImportAst::From { module, module_range, names, wildcard } => ImportAst::From {
                module: module.clone(),
                module_range: module_range.shift(offset),
                names: shift(names),
                wildcard: *wildcard,
            },
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ItemKind {
    Function(Arc<FunctionAst>),
    Constant(Arc<ConstantAst>),
    Import(ImportAst),
    /// A top-level statement that is not allowed (reported by the lowering).
    Invalid,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Item {
    /// Absolute offset that the item's relative ranges count from: the `def` keyword
    /// of a function (its decorators count from `range.start`), else the item's start.
    pub anchor: u32,
    /// Absolute range of the whole item (decorators included).
    pub range: TextRange,
    pub kind: ItemKind,
}

impl Item {
    /// The same item `offset` bytes further into the file (item-relative contents stay).
    pub fn shifted(&self, offset: u32) -> Item {
        let kind = match &self.kind {
            ItemKind::Import(import) => ItemKind::Import(import.shifted(offset)),
            other => other.clone(),
        };
        Item { anchor: self.anchor + offset, range: self.range.shift(offset), kind }
    }

    pub fn name(&self) -> Option<&str> {
        match &self.kind {
            ItemKind::Function(f) => Some(&f.name),
            ItemKind::Constant(c) => c.names.first().map(|(n, _)| n.as_str()),
            _ => None,
        }
    }
}

/// The whole file after lowering.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ModuleAst {
    pub items: Vec<Item>,
}
