//! Tiles in the generated code.
//!
//! A tile is either in memory (`Mem`: a pointer, per-dim strides and a storage format:
//! a private stack buffer, a shared buffer, or a window of a read-only tensor) or lazy
//! (`Node`: an expression over other tiles, evaluated a vector chunk at a time by its
//! consumer). Elementwise chains, broadcasts, masks and loads therefore fuse into the one
//! loop of the store, reduction or dot that consumes them; values used more than once
//! (or across regions) are materialized into memory once.

use std::rc::Rc;

use tessera_frontend::check::DType;

use super::numerics::Storage;
use super::plan::Root;
use crate::ir::Loc;

/// A stride in elements: a constant or an i64 value.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) enum Stride {
    C(i64),
    D(String),
}

impl Stride {
    pub(super) fn val(&self) -> String {
        match self {
            Stride::C(c) => c.to_string(),
            Stride::D(v) => v.clone(),
        }
    }
}

/// Row-major strides of a shape.
pub(super) fn contiguous(shape: &[i64]) -> Vec<Stride> {
    let mut out = vec![Stride::C(1); shape.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        out[d] = Stride::C(acc);
        acc *= shape[d].max(1);
    }
    out
}

#[derive(Clone, Debug)]
pub(super) struct Mem {
    /// Typed pointer to the storage element.
    pub ptr: String,
    pub strides: Vec<Stride>,
    pub st: Storage,
    /// Everything the pointer may point into.
    pub roots: Vec<Root>,
    /// Set when this is exactly the whole of a private buffer, laid out row-major
    /// (the condition for writing a result over it in place).
    pub whole: Option<Root>,
}

/// A tensor parameter.
#[derive(Clone, Debug)]
pub(super) struct TensorV {
    pub ptr: String,
    /// i64 values (constants where the type fixes the dim).
    pub dims: Vec<String>,
    pub strides: Vec<String>,
    pub st: Storage,
    pub dtype: DType,
    pub param: usize,
}

/// A rectangular window of a tensor (`tile.view`).
#[derive(Clone, Debug)]
pub(super) struct ViewV {
    pub tensor: Rc<TensorV>,
    pub offsets: Vec<String>,
    pub sizes: Vec<i64>,
    /// Tensor dims that are dims of the view (the others are squeezed).
    pub kept: Vec<usize>,
    /// Whether the whole window lies inside the tensor (an i1 value or constant).
    pub inb: String,
}

/// A shared buffer (a ring of `stages` slots of `dims`).
#[derive(Clone, Debug)]
pub(super) struct SmemV {
    pub ptr: String,
    pub dims: Vec<i64>,
    pub slot: i64,
    pub st: Storage,
    pub root: Root,
}

#[derive(Clone, Debug)]
pub(super) struct Tile {
    /// Dims; a rank-0 tile is `[1]` with `rank0` set.
    pub shape: Vec<i64>,
    pub rank0: bool,
    pub dtype: DType,
    pub node: Rc<Node>,
    /// The op that computes the tile: the lines evaluating a lazy tile carry it.
    pub loc: Option<Loc>,
}

#[derive(Clone, Debug)]
pub(super) enum Node {
    Mem(Mem),
    /// Every element the value (converted to the dtype).
    Const(f64),
    /// Every element a register scalar of the tile's dtype.
    Splat(String),
    Arange,
    Load {
        view: Rc<ViewV>,
        mask: Option<Tile>,
        other: f64,
    },
    Gather {
        tensor: Rc<TensorV>,
        idx: Tile,
        mask: Option<Tile>,
    },
    Unary {
        op: &'static str,
        a: Tile,
    },
    /// `code`: the error code of an integer division by zero (0 when none can occur).
    Binary {
        op: &'static str,
        a: Tile,
        b: Tile,
        code: u32,
    },
    Cmp {
        pred: String,
        a: Tile,
        b: Tile,
    },
    Select {
        c: Tile,
        a: Tile,
        b: Tile,
    },
    /// `saturate`: `@saturate`; `u`: the uniform numbers of `@stochastic_round`.
    Cast {
        a: Tile,
        saturate: bool,
        u: Option<Tile>,
    },
    Broadcast {
        a: Tile,
    },
    Expand {
        a: Tile,
        axis: usize,
    },
    Causal {
        s: Tile,
        q: String,
        k: String,
    },
    /// `tile.rand`: the counter-based hash of `crate::ir::rand` (i64 seed and offsets;
    /// the leading offsets beyond the tile's rank are fixed coordinates).
    Rand {
        seed: String,
        offsets: Vec<String>,
    },
}

impl Tile {
    pub(super) fn new(shape: &[i64], dtype: DType, node: Node) -> Tile {
        let rank0 = shape.is_empty();
        let shape = if rank0 { vec![1] } else { shape.to_vec() };
        Tile { shape, rank0, dtype, node: Rc::new(node), loc: None }
    }

    pub(super) fn with_node(&self, node: Node) -> Tile {
        Tile {
            shape: self.shape.clone(),
            rank0: self.rank0,
            dtype: self.dtype,
            node: Rc::new(node),
            loc: self.loc.clone(),
        }
    }

    pub(super) fn mem(&self) -> Option<&Mem> {
        match &*self.node {
            Node::Mem(m) => Some(m),
            _ => None,
        }
    }

    pub(super) fn numel(&self) -> i64 {
        self.shape.iter().product()
    }

    pub(super) fn children(&self) -> Vec<&Tile> {
        match &*self.node {
            Node::Mem(_) | Node::Const(_) | Node::Splat(_) | Node::Arange | Node::Rand { .. } => Vec::new(),
            Node::Load { mask, .. } => mask.iter().collect(),
            Node::Gather { idx, mask, .. } => std::iter::once(idx).chain(mask.iter()).collect(),
            Node::Cast { a, u: Some(u), .. } => vec![a, u],
            Node::Unary { a, .. } | Node::Cast { a, .. } | Node::Broadcast { a } | Node::Expand { a, .. } => vec![a],
            Node::Binary { a, b, .. } | Node::Cmp { a, b, .. } => vec![a, b],
            Node::Select { c, a, b } => vec![c, a, b],
            Node::Causal { s, .. } => vec![s],
        }
    }

    /// Everything the tile reads from memory.
    pub(super) fn roots(&self) -> Vec<Root> {
        let mut out = Vec::new();
        self.collect_roots(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_roots(&self, out: &mut Vec<Root>) {
        match &*self.node {
            Node::Mem(m) => out.extend(m.roots.iter().copied()),
            Node::Load { view, .. } => out.push(Root::Tensor(view.tensor.param)),
            Node::Gather { tensor, .. } => out.push(Root::Tensor(tensor.param)),
            _ => {}
        }
        for c in self.children() {
            c.collect_roots(out);
        }
    }

    pub(super) fn reads(&self, root: Root) -> bool {
        self.roots().contains(&root)
    }

    /// Nodes in the expression (a cost measure).
    pub(super) fn size(&self) -> usize {
        1 + self.children().iter().map(|c| c.size()).sum::<usize>()
    }

    /// No memory reads at all: safe and cheap to recompute at any use.
    pub(super) fn is_pure(&self) -> bool {
        !matches!(&*self.node, Node::Mem(_) | Node::Load { .. } | Node::Gather { .. })
            && self.children().iter().all(|c| c.is_pure())
    }

    /// Contains a transcendental function or a load (worth materializing before a
    /// broadcast repeats it).
    pub(super) fn is_costly(&self) -> bool {
        let own = match &*self.node {
            Node::Load { .. } | Node::Gather { .. } | Node::Rand { .. } => true,
            Node::Unary { op, .. } => !matches!(*op, "neg" | "abs" | "relu" | "not"),
            Node::Binary { op, .. } => matches!(*op, "div" | "pow" | "rem" | "floordiv"),
            _ => false,
        };
        own || self.children().iter().any(|c| c.is_costly())
    }

    /// The `inb` flags of every load in the expression.
    pub(super) fn inbounds_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_inb(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_inb(&self, out: &mut Vec<String>) {
        if let Node::Load { view, .. } = &*self.node {
            out.push(view.inb.clone());
        }
        for c in self.children() {
            c.collect_inb(out);
        }
    }

    /// Reads of `root` in the expression: (count, all of them the whole buffer at the
    /// element being computed).
    pub(super) fn identity_reads(&self, root: Root) -> (usize, bool) {
        match &*self.node {
            Node::Mem(m) if m.roots.contains(&root) => (1, m.whole == Some(root)),
            Node::Mem(_) | Node::Const(_) | Node::Splat(_) | Node::Arange | Node::Rand { .. } => (0, true),
            Node::Unary { .. } | Node::Binary { .. } | Node::Cmp { .. } | Node::Select { .. } | Node::Cast { .. } => {
                let mut n = 0;
                let mut ok = true;
                for c in self.children() {
                    let (cn, cok) = c.identity_reads(root);
                    n += cn;
                    ok &= cok;
                }
                (n, ok)
            }
            Node::Causal { s, .. } => s.identity_reads(root),
            // Index remapping or memory: any read of the root is not at the same element.
            _ => {
                let n = usize::from(self.reads(root));
                (n, n == 0)
            }
        }
    }

    /// Private buffers read as a whole at the element being computed.
    pub(super) fn whole_leaves(&self) -> Vec<(Root, Mem)> {
        let mut out = Vec::new();
        self.collect_whole(&mut out);
        out
    }

    fn collect_whole(&self, out: &mut Vec<(Root, Mem)>) {
        match &*self.node {
            Node::Mem(m) => {
                if let Some(r) = m.whole {
                    out.push((r, m.clone()));
                }
            }
            Node::Unary { .. }
            | Node::Binary { .. }
            | Node::Cmp { .. }
            | Node::Select { .. }
            | Node::Cast { .. }
            | Node::Causal { .. } => {
                for c in self.children() {
                    c.collect_whole(out);
                }
            }
            _ => {}
        }
    }
}
