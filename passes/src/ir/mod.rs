//! The IR shared by all four levels: SSA values, ops with attributes and nested
//! single-block regions (structured control flow), and source locations.
//!
//! One op enum spans every level so that each pass and backend matches exhaustively;
//! `verify` checks which ops and types a level allows.

pub mod layout;
pub mod policy;
pub mod print;
pub mod rand;
pub mod types;
pub mod verify;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};
use tessera_frontend::text::TextRange;

pub use layout::Layout;
pub use types::{SmemType, Swizzle, TensorType, TileType, Type, ViewType};

/// The four IR levels (Target IR is text: PTX or LLVM IR).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Level {
    Graph,
    Schedule,
    Tile,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Graph => "graph",
            Level::Schedule => "sched",
            Level::Tile => "tile",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ValueId(pub u32);

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct OpId(pub u32);

/// Where an op comes from. Ranges are relative to the origin function's anchor, so IR
/// built from a function stays equal when code above the function moves.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Loc {
    pub origin: Origin,
    pub range: TextRange,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum Origin {
    /// No source (compiler-introduced with nothing better to point at).
    #[default]
    None,
    /// A function of the file being compiled.
    Function(SmolStr),
    /// A function of a standard-library file.
    Stdlib { file: SmolStr, function: SmolStr },
}

impl Loc {
    pub fn new(function: &str, range: TextRange) -> Loc {
        Loc { origin: Origin::Function(SmolStr::new(function)), range }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Attr {
    Int(i64),
    /// A float by its bits (IR stays `Eq`).
    Float(u64),
    Bool(bool),
    Str(SmolStr),
    DType(DType),
    Ints(Vec<i64>),
    Dims(Vec<Dim>),
    Layout(Layout),
}

impl Attr {
    pub fn float(v: f64) -> Attr {
        Attr::Float(v.to_bits())
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Attr::Float(b) => Some(f64::from_bits(*b)),
            Attr::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }
}

macro_rules! ops {
    ($($variant:ident = $name:literal,)*) => {
        /// Every op of every level. `docs/ir.md` describes operands, results and attributes.
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
        pub enum OpKind { $($variant,)* }

        impl OpKind {
            pub const ALL: &'static [OpKind] = &[$(OpKind::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(OpKind::$variant => $name,)* }
            }
        }
    };
}

ops! {
    // functions and control flow
    Return = "func.return",
    For = "scf.for",
    If = "scf.if",
    While = "scf.while",
    Condition = "scf.condition",
    Yield = "scf.yield",
    GridParallel = "grid.parallel",
    ProgramId = "grid.program_id",
    NumPrograms = "grid.num_programs",
    // scalar, tile and tensor arithmetic (elementwise; operands of one type)
    Constant = "arith.constant",
    Add = "arith.add",
    Sub = "arith.sub",
    Mul = "arith.mul",
    Div = "arith.div",
    FloorDiv = "arith.floordiv",
    Rem = "arith.rem",
    Pow = "arith.pow",
    Max = "arith.max",
    Min = "arith.min",
    Neg = "arith.neg",
    Not = "arith.not",
    And = "arith.and",
    Or = "arith.or",
    Xor = "arith.xor",
    Shl = "arith.shl",
    Shr = "arith.shr",
    Cmp = "arith.cmp",
    Select = "arith.select",
    Cast = "arith.cast",
    Exp = "math.exp",
    Log = "math.log",
    Sqrt = "math.sqrt",
    Rsqrt = "math.rsqrt",
    Tanh = "math.tanh",
    Sigmoid = "math.sigmoid",
    Relu = "math.relu",
    Gelu = "math.gelu",
    Silu = "math.silu",
    Abs = "math.abs",
    Floor = "math.floor",
    Ceil = "math.ceil",
    Round = "math.round",
    // tiles (register values)
    Splat = "tile.splat",
    Full = "tile.full",
    Arange = "tile.arange",
    Broadcast = "tile.broadcast",
    ExpandDims = "tile.expand_dims",
    Transpose = "tile.transpose",
    Reduce = "tile.reduce",
    Dot = "tile.dot",
    CausalMask = "tile.causal_mask",
    Rand = "tile.rand",
    ConvertLayout = "tile.convert_layout",
    // global memory
    TensorDim = "tile.dim",
    View = "tile.view",
    Load = "tile.load",
    Store = "tile.store",
    Gather = "tile.gather",
    Scatter = "tile.scatter",
    // shared memory and asynchrony
    AllocShared = "tile.alloc_shared",
    SmemSlot = "tile.smem_slot",
    LoadShared = "tile.load_shared",
    StoreShared = "tile.store_shared",
    CpAsync = "tile.cp_async",
    // `tile.tma_store %view, %slot`: the TMA writes a shared slot to a global view
    // (sm_90a, `copy = "tma"`); box parts outside the tensor are not written.
    TmaStore = "tile.tma_store",
    AsyncCommit = "tile.async_commit",
    AsyncWait = "tile.async_wait",
    Barrier = "tile.barrier",
    // graph level (whole tensors)
    MatMul = "graph.matmul",
    GReduce = "graph.reduce",
    Softmax = "graph.softmax",
    LogSumExp = "graph.logsumexp",
    LayerNorm = "graph.layernorm",
    RmsNorm = "graph.rmsnorm",
    GTranspose = "graph.transpose",
    Reshape = "graph.reshape",
    Concat = "graph.concat",
    Split = "graph.split",
    GBroadcast = "graph.broadcast",
    GExpandDims = "graph.expand_dims",
    Slice = "graph.slice",
    FlashAttention = "graph.flash_attention",
    Dropout = "graph.dropout",
    Random = "graph.randn",
    // `with prefetch(obj, into=..., overlap=...)`: a placement effect, computes nothing
    Prefetch = "graph.prefetch",
    // a KV cache's state update: `%K', %V', %tok' = graph.cache_append %K, %V, %k, %v, %tok`
    CacheAppend = "graph.cache_append",
    // `%K', %V', %tok' = graph.cache_prune %K, %V, %tok {keep}`: the last `keep` positions
    CachePrune = "graph.cache_prune",
    Fill = "graph.full",
    Iota = "graph.arange",
    Launch = "graph.launch",
    // `k(args)` of a `@kernel` in a graph function: the new values of the parameters `k` writes
    CallKernel = "graph.call_kernel",
    SplitQkv = "graph.split_qkv",
    MergeHeads = "graph.merge_heads",
    // the first ordering token of a graph function's effects
    EffectToken = "graph.token",
    // schedule level: a schedule key's value (symbolic in Graph IR, a constant after
    // specialization), and for graph functions the kernels and their buffers
    SchedParam = "sched.param",
    // a dim of the graph function's tensors, from the sizes bound at launch
    SchedDim = "sched.dim",
    Kernel = "sched.kernel",
    Buffer = "sched.buffer",
    // a sharded function's program on its mesh: a collective started on buffers
    // (`%pending = sched.collective_start %buf {kind, axis, ...} -> !token`), and the
    // wait before the first launch that touches them (`sched.collective_wait %pending
    // {overlaps}`); the launches in between overlap it
    CollectiveStart = "sched.collective_start",
    CollectiveWait = "sched.collective_wait",
    // collectives: implied by sharding (inserted by `dist::insert`), or written by the
    // user (`dist.all_reduce(x, axis="tp")`, `{explicit = true}`)
    AllGather = "dist.all_gather",
    ReduceScatter = "dist.reduce_scatter",
    AllReduce = "dist.all_reduce",
    AllToAll = "dist.all_to_all",
    // a pipeline's activation from the devices of one stage to those of the next:
    // `%y, %tok' = dist.send %x, %tok {axis, from, to}`
    Send = "dist.send",
}

/// Whether `a pred b` holds for an `arith.cmp` predicate (`lt le gt ge eq ne`; None for
/// another): on floats, the IEEE comparisons.
pub fn compare_holds<T: PartialOrd>(pred: &str, a: T, b: T) -> Option<bool> {
    Some(match pred {
        "lt" => a < b,
        "le" => a <= b,
        "gt" => a > b,
        "ge" => a >= b,
        "eq" => a == b,
        "ne" => a != b,
        _ => return None,
    })
}

impl OpKind {
    pub fn is_terminator(self) -> bool {
        matches!(self, OpKind::Return | OpKind::Yield | OpKind::Condition)
    }

    /// Elementwise unary math on floats.
    pub fn is_unary_math(self) -> bool {
        matches!(
            self,
            OpKind::Exp
                | OpKind::Log
                | OpKind::Sqrt
                | OpKind::Rsqrt
                | OpKind::Tanh
                | OpKind::Sigmoid
                | OpKind::Relu
                | OpKind::Gelu
                | OpKind::Silu
                | OpKind::Abs
                | OpKind::Floor
                | OpKind::Ceil
                | OpKind::Round
                | OpKind::Neg
                | OpKind::Not
        )
    }

    /// Elementwise binary arithmetic.
    pub fn is_binary(self) -> bool {
        matches!(
            self,
            OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::FloorDiv
                | OpKind::Rem
                | OpKind::Pow
                | OpKind::Max
                | OpKind::Min
                | OpKind::And
                | OpKind::Or
                | OpKind::Xor
                | OpKind::Shl
                | OpKind::Shr
        )
    }

    pub fn is_elementwise(self) -> bool {
        self.is_unary_math() || self.is_binary() || matches!(self, OpKind::Cmp | OpKind::Select | OpKind::Cast)
    }

    /// Ops with effects on memory or ordering (not removable, not reorderable freely).
    pub fn has_effect(self) -> bool {
        matches!(
            self,
            OpKind::Store
                | OpKind::Scatter
                | OpKind::StoreShared
                | OpKind::CpAsync
                | OpKind::TmaStore
                | OpKind::AsyncCommit
                | OpKind::AsyncWait
                | OpKind::Barrier
                | OpKind::Return
                | OpKind::Yield
                | OpKind::Condition
                | OpKind::Launch
                | OpKind::Dropout
                | OpKind::Random
                | OpKind::Prefetch
                | OpKind::CacheAppend
                | OpKind::CachePrune
                | OpKind::EffectToken
                | OpKind::Kernel
                | OpKind::AllGather
                | OpKind::ReduceScatter
                | OpKind::AllReduce
                | OpKind::AllToAll
                | OpKind::Send
        )
    }

    /// The collectives (`dist.*` ops that move data between the devices of a mesh axis;
    /// a pipeline's `dist.send` between two positions of one).
    pub fn is_collective(self) -> bool {
        matches!(self, OpKind::AllGather | OpKind::ReduceScatter | OpKind::AllReduce | OpKind::AllToAll | OpKind::Send)
    }
}

/// A single-block region: arguments (loop index, iteration values) and ops in order.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Region {
    pub args: Vec<ValueId>,
    pub ops: Vec<OpId>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Op {
    pub kind: OpKind,
    pub operands: Vec<ValueId>,
    pub results: Vec<ValueId>,
    pub attrs: Vec<(&'static str, Attr)>,
    pub regions: Vec<Region>,
    pub loc: Loc,
}

impl Op {
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn int_attr(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(Attr::as_int)
    }

    pub fn str_attr(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(Attr::as_str)
    }

    /// The operand index of a norm's `role` (`weight`, `bias`): its `affine` attribute
    /// names the operands after `x` in order (`"weight,bias"`, `"bias"`).
    pub fn affine_index(&self, role: &str) -> Option<usize> {
        self.str_attr("affine")?.split(',').position(|r| r.trim() == role).map(|i| i + 1)
    }

    pub fn set_attr(&mut self, key: &'static str, value: Attr) {
        match self.attrs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((key, value)),
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FuncKind {
    /// A tile kernel: the body is one tile program.
    Kernel,
    /// A graph function (`@jit`): whole-tensor ops, launches at Schedule IR.
    Graph,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ValueInfo {
    pub ty: Type,
    /// The source name it came from, for readable printing (`%acc`).
    pub name: Option<SmolStr>,
}

/// A function at some IR level.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Func {
    pub name: SmolStr,
    pub kind: FuncKind,
    pub level: Level,
    pub params: Vec<ValueId>,
    pub values: Vec<ValueInfo>,
    pub ops: Vec<Op>,
    pub body: Region,
    pub attrs: Vec<(&'static str, Attr)>,
    pub loc: Loc,
}

impl Func {
    pub fn new(name: &str, kind: FuncKind, level: Level, loc: Loc) -> Func {
        Func {
            name: SmolStr::new(name),
            kind,
            level,
            params: Vec::new(),
            values: Vec::new(),
            ops: Vec::new(),
            body: Region::default(),
            attrs: Vec::new(),
            loc,
        }
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.0 as usize].ty
    }

    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id.0 as usize]
    }

    pub fn op_mut(&mut self, id: OpId) -> &mut Op {
        &mut self.ops[id.0 as usize]
    }

    pub fn new_value(&mut self, ty: Type, name: Option<&str>) -> ValueId {
        self.values.push(ValueInfo { ty, name: name.map(SmolStr::new) });
        ValueId(self.values.len() as u32 - 1)
    }

    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn set_attr(&mut self, key: &'static str, value: Attr) {
        match self.attrs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((key, value)),
        }
    }

    /// Whether any op of the function (reachable or not) is of one of `kinds`: passes
    /// that only rewrite such ops return at once without them, exactly as if they had
    /// walked the function and found nothing (autotune pruning lowers every candidate).
    pub fn has_op_of(&self, kinds: &[OpKind]) -> bool {
        self.ops.iter().any(|op| kinds.contains(&op.kind))
    }

    /// For each value, the loop (`scf.for`, `grid.parallel`) whose induction variable it
    /// is, if it is one.
    pub fn loop_variables(&self) -> Vec<Option<OpId>> {
        let mut out = vec![None; self.values.len()];
        for id in self.walk() {
            let op = self.op(id);
            if matches!(op.kind, OpKind::For | OpKind::GridParallel) {
                if let Some(&iv) = op.regions.first().and_then(|r| r.args.first()) {
                    out[iv.0 as usize] = Some(id);
                }
            }
        }
        out
    }

    /// The symbolic value of an index computation: constants and tensor dims (their
    /// symbols) under `+`, `-`, negation, `*` and `//`; any other value is `leaf`'s to
    /// name (`None`: not expressible). `defs` is [`Func::definitions`].
    pub fn index_dim(&self, defs: &[Option<OpId>], v: ValueId, leaf: &dyn Fn(ValueId) -> Option<Dim>) -> Option<Dim> {
        let Some(def) = defs[v.0 as usize].map(|d| self.op(d)) else { return leaf(v) };
        let arg = |i: usize| def.operands.get(i).and_then(|&x| self.index_dim(defs, x, leaf));
        match def.kind {
            OpKind::Constant => def.int_attr("value").map(Dim::constant),
            OpKind::TensorDim => {
                let axis = def.int_attr("axis")? as usize;
                match self.ty(*def.operands.first()?) {
                    Type::Tensor(t) => t.dims.get(axis).cloned(),
                    _ => None,
                }
            }
            OpKind::Add => Some(arg(0)?.add(&arg(1)?)),
            OpKind::Sub => Some(arg(0)?.sub(&arg(1)?)),
            OpKind::Neg => Some(Dim::constant(0).sub(&arg(0)?)),
            OpKind::Mul => Some(arg(0)?.mul_plain(&arg(1)?)),
            OpKind::FloorDiv => arg(0)?.floor_div(&arg(1)?),
            _ => leaf(v),
        }
    }

    /// Every op reachable from the body, pre-order (an op before the ops of its regions).
    pub fn walk(&self) -> Vec<OpId> {
        // Reachable ops are at most all ops: one allocation instead of a growing vector
        // (passes walk every autotune candidate's IR several times).
        let mut out = Vec::with_capacity(self.ops.len());
        self.walk_region(&self.body, &mut out);
        out
    }

    fn walk_region(&self, region: &Region, out: &mut Vec<OpId>) {
        for &op in &region.ops {
            out.push(op);
            for r in &self.op(op).regions {
                self.walk_region(r, out);
            }
        }
    }

    /// The ops that read each value (indexed by value id), in program order.
    pub fn users(&self) -> Vec<Vec<OpId>> {
        let mut out = vec![Vec::new(); self.values.len()];
        for id in self.walk() {
            for &v in &self.op(id).operands {
                out[v.0 as usize].push(id);
            }
        }
        out
    }

    /// The op defining each value (None for region arguments and parameters).
    pub fn definitions(&self) -> Vec<Option<OpId>> {
        fn visit(f: &Func, region: &Region, defs: &mut [Option<OpId>]) {
            for &id in &region.ops {
                let op = f.op(id);
                for &r in &op.results {
                    defs[r.0 as usize] = Some(id);
                }
                for r in &op.regions {
                    visit(f, r, defs);
                }
            }
        }
        let mut defs = vec![None; self.values.len()];
        visit(self, &self.body, &mut defs);
        defs
    }
}

/// Appends ops to a function, one region at a time.
pub struct Builder<'f> {
    pub func: &'f mut Func,
    stack: Vec<Region>,
}

impl<'f> Builder<'f> {
    pub fn new(func: &'f mut Func) -> Builder<'f> {
        Builder { func, stack: vec![Region::default()] }
    }

    pub fn value(&mut self, ty: Type, name: Option<&str>) -> ValueId {
        self.func.new_value(ty, name)
    }

    /// Appends an op whose results have `result_types`; returns its results.
    pub fn op(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        result_types: Vec<Type>,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> Vec<ValueId> {
        self.op_with_regions(kind, operands, result_types, attrs, Vec::new(), loc)
    }

    pub fn op_with_regions(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        result_types: Vec<Type>,
        attrs: Vec<(&'static str, Attr)>,
        regions: Vec<Region>,
        loc: &Loc,
    ) -> Vec<ValueId> {
        let results: Vec<ValueId> = result_types.into_iter().map(|t| self.func.new_value(t, None)).collect();
        self.func.ops.push(Op { kind, operands, results: results.clone(), attrs, regions, loc: loc.clone() });
        let id = OpId(self.func.ops.len() as u32 - 1);
        self.stack.last_mut().expect("a region is open").ops.push(id);
        results
    }

    /// One result.
    pub fn op1(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
    ) -> ValueId {
        self.op(kind, operands, vec![ty], attrs, loc)[0]
    }

    /// Appends an effect: an op that also takes the effect chain's `token` and gives its
    /// next one, which replaces `token`; returns its value.
    pub fn effect(
        &mut self,
        kind: OpKind,
        mut operands: Vec<ValueId>,
        ty: Type,
        attrs: Vec<(&'static str, Attr)>,
        loc: &Loc,
        token: &mut ValueId,
    ) -> ValueId {
        operands.push(*token);
        let results = self.op(kind, operands, vec![ty, Type::Token], attrs, loc);
        *token = results[1];
        results[0]
    }

    /// Opens a nested region with `args`; ops go there until `close_region`.
    pub fn open_region(&mut self, args: Vec<ValueId>) {
        self.stack.push(Region { args, ops: Vec::new() });
    }

    /// Whether ops go to a nested region (a loop's or a branch's), not the body.
    pub fn in_nested_region(&self) -> bool {
        self.stack.len() > 1
    }

    pub fn close_region(&mut self) -> Region {
        assert!(self.stack.len() > 1, "close_region without open_region");
        self.stack.pop().unwrap()
    }

    pub fn name(&mut self, v: ValueId, name: &str) {
        self.func.values[v.0 as usize].name = Some(SmolStr::new(name));
    }

    /// Finishes the function body.
    pub fn finish(mut self) {
        assert_eq!(self.stack.len(), 1, "unclosed regions");
        self.func.body = self.stack.pop().unwrap();
    }
}
