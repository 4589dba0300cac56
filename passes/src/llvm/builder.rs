//! A small builder for LLVM IR text: basic blocks of lines, each line tagged with the
//! Tile IR location it comes from; fresh local names; constant folding of `i64` index
//! arithmetic so the IR stays readable; counted loops.

use std::collections::{BTreeMap, BTreeSet};

use crate::ir::Loc;

/// An element type of registers or memory.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum Elem {
    F32,
    F64,
    I1,
    I8,
    I16,
    I32,
    I64,
}

impl Elem {
    pub(super) fn ir(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::F64 => "double",
            Elem::I1 => "i1",
            Elem::I8 => "i8",
            Elem::I16 => "i16",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
        }
    }

    /// The suffix of overloaded intrinsic names (`f32`, `i64`).
    pub(super) fn mangle(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::I1 => "i1",
            Elem::I8 => "i8",
            Elem::I16 => "i16",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
        }
    }

    pub(super) fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F64)
    }

    pub(super) fn bytes(self) -> u32 {
        match self {
            Elem::F64 | Elem::I64 => 8,
            Elem::F32 | Elem::I32 => 4,
            Elem::I16 => 2,
            Elem::I1 | Elem::I8 => 1,
        }
    }

    pub(super) fn bits(self) -> u32 {
        match self {
            Elem::I1 => 1,
            e => e.bytes() * 8,
        }
    }
}

/// A scalar (`w == 0`) or a vector of `w` elements.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(super) struct VTy {
    pub elem: Elem,
    pub w: u32,
}

impl VTy {
    pub(super) fn new(elem: Elem, w: u32) -> VTy {
        VTy { elem, w }
    }

    pub(super) fn scalar(elem: Elem) -> VTy {
        VTy { elem, w: 0 }
    }

    pub(super) fn with(self, elem: Elem) -> VTy {
        VTy { elem, w: self.w }
    }

    pub(super) fn ir(self) -> String {
        if self.w == 0 {
            self.elem.ir().to_string()
        } else {
            format!("<{} x {}>", self.w, self.elem.ir())
        }
    }

    pub(super) fn mangle(self) -> String {
        if self.w == 0 {
            self.elem.mangle().to_string()
        } else {
            format!("v{}{}", self.w, self.elem.mangle())
        }
    }

    /// Pointer-to-this type's mangling in typed-pointer intrinsic names (`p0v16f32`).
    pub(super) fn mangle_ptr(self) -> String {
        format!("p0{}", self.mangle())
    }
}

/// An LLVM float literal (the hex form of the double holding the value).
pub(super) fn float_lit(elem: Elem, v: f64) -> String {
    let v = if elem == Elem::F32 { v as f32 as f64 } else { v };
    format!("0x{:016X}", v.to_bits())
}

/// A constant of an element type, as an operand value (no type).
pub(super) fn elem_lit(elem: Elem, v: f64) -> String {
    match elem {
        Elem::F32 | Elem::F64 => float_lit(elem, v),
        Elem::I1 => (if v != 0.0 { "true" } else { "false" }).to_string(),
        // Two's complement of the width: LLVM reads integer literals as signed.
        Elem::I8 => format!("{}", v as i64 as i8),
        Elem::I16 => format!("{}", v as i64 as i16),
        Elem::I32 => format!("{}", v as i64 as i32),
        Elem::I64 => format!("{}", v as i64),
    }
}

/// A constant of `ty` (splatted for vectors), as an operand value.
pub(super) fn lit(ty: VTy, v: f64) -> String {
    let e = elem_lit(ty.elem, v);
    if ty.w == 0 {
        return e;
    }
    if v == 0.0 && !(ty.elem.is_float() && v.is_sign_negative()) {
        return "zeroinitializer".to_string();
    }
    let one = format!("{} {}", ty.elem.ir(), e);
    format!("<{}>", vec![one; ty.w as usize].join(", "))
}

/// `<0, 1, ..., w-1>` of an integer element type.
pub(super) fn iota(elem: Elem, w: u32) -> String {
    let parts: Vec<String> = (0..w).map(|i| format!("{} {i}", elem.ir())).collect();
    format!("<{}>", parts.join(", "))
}

fn is_const(v: &str) -> Option<i64> {
    v.parse().ok()
}

#[derive(Clone, Debug)]
pub(super) struct Line {
    pub text: String,
    pub loc: Option<Loc>,
}

#[derive(Clone, Debug)]
pub(super) struct Block {
    pub label: String,
    pub lines: Vec<Line>,
    pub terminated: bool,
}

/// An open loop (see `FnBuilder::begin_loop`).
pub(super) struct Loop {
    /// The induction variable.
    pub iv: String,
    /// The loop-carried values inside the body.
    pub carried: Vec<String>,
    kind: LoopKind,
    inits: Vec<(String, String)>,
    hi: String,
    step: String,
}

enum LoopKind {
    Once,
    Real { pre: String, head: String, exit: String, head_index: usize, bottom: bool, lo: String },
}

/// One function under construction.
pub(super) struct FnBuilder {
    pub blocks: Vec<Block>,
    pub cur: usize,
    names: BTreeMap<String, u32>,
    taken: BTreeSet<String>,
    pub allocas: Vec<Line>,
    /// Bytes of stack the allocas take.
    pub stack_bytes: u64,
    /// The Tile IR location of the op being lowered (tags every line).
    pub loc: Option<Loc>,
    /// Intrinsic and library declarations the function needs, by name.
    pub decls: BTreeMap<String, String>,
}

impl FnBuilder {
    pub(super) fn new() -> FnBuilder {
        FnBuilder {
            blocks: vec![Block { label: "entry".into(), lines: Vec::new(), terminated: false }],
            cur: 0,
            names: BTreeMap::new(),
            taken: BTreeSet::new(),
            allocas: Vec::new(),
            stack_bytes: 0,
            loc: None,
            decls: BTreeMap::new(),
        }
    }

    /// A fresh name from a hint: `%hint` the first time, then `%hint.1`, `%hint.2`.
    pub(super) fn fresh(&mut self, hint: &str) -> String {
        format!("%{}", self.unique(hint))
    }

    fn unique(&mut self, hint: &str) -> String {
        let mut clean: String =
            hint.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
        if clean.is_empty() || clean.starts_with(|c: char| c.is_ascii_digit()) {
            clean.insert(0, 'v');
        }
        loop {
            let n = self.names.entry(clean.clone()).or_insert(0);
            *n += 1;
            let candidate = if *n == 1 { clean.clone() } else { format!("{clean}.{}", *n - 1) };
            // A suffixed name may equal another hint's plain name: take each name once.
            if self.taken.insert(candidate.clone()) {
                return candidate;
            }
        }
    }

    /// A fresh block label (without `%`).
    pub(super) fn label(&mut self, hint: &str) -> String {
        self.unique(hint)
    }

    pub(super) fn emit(&mut self, text: impl Into<String>) {
        let loc = self.loc.clone();
        let b = &mut self.blocks[self.cur];
        debug_assert!(!b.terminated, "emitting into a terminated block");
        b.lines.push(Line { text: text.into(), loc });
    }

    /// `%name = text`; returns `%name`.
    pub(super) fn val(&mut self, hint: &str, text: impl AsRef<str>) -> String {
        let name = self.fresh(hint);
        self.emit(format!("{name} = {}", text.as_ref()));
        name
    }

    pub(super) fn cur_label(&self) -> String {
        format!("%{}", self.blocks[self.cur].label)
    }

    /// Starts block `label`; the current block must end in a branch.
    pub(super) fn start(&mut self, label: &str) {
        debug_assert!(self.blocks[self.cur].terminated, "the previous block has no terminator");
        self.blocks.push(Block { label: label.to_string(), lines: Vec::new(), terminated: false });
        self.cur = self.blocks.len() - 1;
    }

    pub(super) fn terminate(&mut self, text: impl Into<String>) {
        self.emit(text);
        self.blocks[self.cur].terminated = true;
    }

    pub(super) fn br(&mut self, label: &str) {
        self.terminate(format!("br label %{label}"));
    }

    pub(super) fn cond_br(&mut self, cond: &str, then: &str, otherwise: &str) {
        if cond == "true" {
            return self.br(then);
        }
        if cond == "false" {
            return self.br(otherwise);
        }
        self.terminate(format!("br i1 {cond}, label %{then}, label %{otherwise}"));
    }

    /// Inserts a phi at the top of block `index` (phis must lead their block).
    pub(super) fn insert_phi(&mut self, index: usize, text: String) {
        let loc = self.loc.clone();
        let b = &mut self.blocks[index];
        let at = b.lines.iter().take_while(|l| l.text.contains(" = phi ")).count();
        b.lines.insert(at, Line { text, loc });
    }

    /// A stack buffer of `count` elements (64-byte aligned, in the entry block).
    pub(super) fn alloca(&mut self, hint: &str, elem: Elem, count: u64) -> String {
        let name = self.fresh(hint);
        let loc = self.loc.clone();
        self.allocas.push(Line {
            text: format!("{name}.arr = alloca [{count} x {ty}], align 64", ty = elem.ir()),
            loc: loc.clone(),
        });
        self.allocas.push(Line {
            text: format!(
                "{name} = getelementptr inbounds [{count} x {ty}], [{count} x {ty}]* {name}.arr, i64 0, i64 0",
                ty = elem.ir()
            ),
            loc,
        });
        self.stack_bytes += count * elem.bytes() as u64;
        name
    }

    /// Declares an intrinsic or library function once.
    pub(super) fn declare(&mut self, name: &str, decl: String) {
        self.decls.entry(name.to_string()).or_insert(decl);
    }

    /// Calls `@name` returning `ret` with typed arguments; declares it.
    pub(super) fn call(&mut self, hint: &str, name: &str, ret: &str, args: &[(String, String)]) -> String {
        let types: Vec<&str> = args.iter().map(|(t, _)| t.as_str()).collect();
        self.declare(name, format!("declare {ret} @{name}({})", types.join(", ")));
        let list: Vec<String> = args.iter().map(|(t, v)| format!("{t} {v}")).collect();
        if ret == "void" {
            self.emit(format!("call void @{name}({})", list.join(", ")));
            String::new()
        } else {
            self.val(hint, format!("call {ret} @{name}({})", list.join(", ")))
        }
    }

    // ----- i64 index arithmetic with folding ------------------------------------------

    pub(super) fn add(&mut self, a: &str, b: &str) -> String {
        match (is_const(a), is_const(b)) {
            (Some(x), Some(y)) => x.wrapping_add(y).to_string(),
            (Some(0), _) => b.to_string(),
            (_, Some(0)) => a.to_string(),
            _ => self.val("i", format!("add i64 {a}, {b}")),
        }
    }

    pub(super) fn mul(&mut self, a: &str, b: &str) -> String {
        match (is_const(a), is_const(b)) {
            (Some(x), Some(y)) => x.wrapping_mul(y).to_string(),
            (Some(0), _) | (_, Some(0)) => "0".to_string(),
            (Some(1), _) => b.to_string(),
            (_, Some(1)) => a.to_string(),
            _ => self.val("i", format!("mul i64 {a}, {b}")),
        }
    }

    /// `i1` and, folding constants.
    pub(super) fn and1(&mut self, a: &str, b: &str) -> String {
        match (a, b) {
            ("true", x) | (x, "true") => x.to_string(),
            ("false", _) | (_, "false") => "false".to_string(),
            _ => self.val("ok", format!("and i1 {a}, {b}")),
        }
    }

    pub(super) fn sle(&mut self, a: &str, b: &str) -> String {
        match (is_const(a), is_const(b)) {
            (Some(x), Some(y)) => (x <= y).to_string(),
            _ => self.val("le", format!("icmp sle i64 {a}, {b}")),
        }
    }

    /// `&ptr[off]` for a typed pointer.
    pub(super) fn gep(&mut self, elem: Elem, ptr: &str, off: &str) -> String {
        if off == "0" {
            return ptr.to_string();
        }
        let t = elem.ir();
        self.val("p", format!("getelementptr {t}, {t}* {ptr}, i64 {off}"))
    }

    /// A vector with every lane `v` (a scalar of `ty.elem`); `v` itself for scalars.
    pub(super) fn splat(&mut self, ty: VTy, v: &str) -> String {
        if ty.w == 0 {
            return v.to_string();
        }
        if let Ok(x) = v.parse::<i64>() {
            return lit(ty, x as f64);
        }
        if let Some(hex) = v.strip_prefix("0x") {
            if let Ok(bits) = u64::from_str_radix(hex, 16) {
                return lit(ty, f64::from_bits(bits));
            }
        }
        if v == "true" || v == "false" {
            return lit(ty, if v == "true" { 1.0 } else { 0.0 });
        }
        let e = ty.elem.ir();
        let one = VTy::new(ty.elem, 1).ir();
        let ins = self.val("s", format!("insertelement {one} undef, {e} {v}, i32 0"));
        self.val("splat", format!("shufflevector {one} {ins}, {one} undef, <{} x i32> zeroinitializer", ty.w))
    }

    /// Opens a counted loop `for iv in lo..hi step step` (i64 values, `step > 0`) with
    /// loop-carried values `(type, init)`. Returns `None` when the loop never runs (the
    /// caller skips the body); otherwise the body follows, using `Loop::iv` and
    /// `Loop::carried`, and `end_loop` closes it. Constant bounds that run at least once
    /// give a bottom-tested loop; exactly once, no loop at all.
    pub(super) fn begin_loop(
        &mut self,
        hint: &str,
        lo: &str,
        hi: &str,
        step: &str,
        carried: &[(String, String)],
    ) -> Option<Loop> {
        let trips = match (is_const(lo), is_const(hi), is_const(step)) {
            (Some(l), Some(h), Some(s)) if s > 0 => Some(if h <= l { 0 } else { (h - l + s - 1) / s }),
            _ => None,
        };
        if trips == Some(0) {
            return None;
        }
        let inits: Vec<(String, String)> = carried.to_vec();
        if trips == Some(1) {
            return Some(Loop {
                iv: lo.to_string(),
                carried: inits.iter().map(|(_, v)| v.clone()).collect(),
                kind: LoopKind::Once,
                inits,
                hi: hi.to_string(),
                step: step.to_string(),
            });
        }
        let pre = self.cur_label();
        let head = self.label(&format!("{hint}.head"));
        let exit = self.label(&format!("{hint}.exit"));
        let iv = self.fresh(hint);
        let phis: Vec<String> = carried.iter().map(|_| self.fresh(&format!("{hint}.c"))).collect();
        self.br(&head);
        self.start(&head);
        let head_index = self.cur;
        let bottom = trips.is_some();
        if !bottom {
            let body = self.label(&format!("{hint}.body"));
            let go = self.val("go", format!("icmp slt i64 {iv}, {hi}"));
            self.cond_br(&go, &body, &exit);
            self.start(&body);
        }
        Some(Loop {
            iv,
            carried: phis,
            kind: LoopKind::Real { pre, head, exit, head_index, bottom, lo: lo.to_string() },
            inits,
            hi: hi.to_string(),
            step: step.to_string(),
        })
    }

    /// Closes a loop with the values carried into the next iteration; returns the values
    /// after the loop.
    pub(super) fn end_loop(&mut self, l: Loop, outs: &[String]) -> Vec<String> {
        let LoopKind::Real { pre, head, exit, head_index, bottom, lo } = l.kind else {
            return outs.to_vec();
        };
        let next = self.fresh("next");
        let iv = &l.iv;
        let (hi, step) = (&l.hi, &l.step);
        self.emit(format!("{next} = add nsw i64 {iv}, {step}"));
        let latch = self.cur_label();
        if bottom {
            let more = self.val("more", format!("icmp slt i64 {next}, {hi}"));
            self.cond_br(&more, &head, &exit);
        } else {
            self.br(&head);
        }
        self.insert_phi(head_index, format!("{iv} = phi i64 [ {lo}, {pre} ], [ {next}, {latch} ]"));
        for (((ty, init), phi), out) in l.inits.iter().zip(&l.carried).zip(outs) {
            self.insert_phi(head_index, format!("{phi} = phi {ty} [ {init}, {pre} ], [ {out}, {latch} ]"));
        }
        self.start(&exit);
        if bottom {
            // Every path to the exit runs the body: its last values are the results.
            outs.to_vec()
        } else {
            l.carried.clone()
        }
    }

    /// Opens `if cond` (no values flow out); `end_if` closes it. Constant conditions
    /// emit the body unconditionally (`true`) or report that it must be skipped.
    pub(super) fn begin_if(&mut self, cond: &str, hint: &str) -> Option<Option<String>> {
        match cond {
            "false" => None,
            "true" => Some(None),
            _ => {
                let yes = self.label(&format!("{hint}.then"));
                let join = self.label(&format!("{hint}.join"));
                self.cond_br(cond, &yes, &join);
                self.start(&yes);
                Some(Some(join))
            }
        }
    }

    pub(super) fn end_if(&mut self, join: Option<String>) {
        if let Some(join) = join {
            self.br(&join);
            self.start(&join);
        }
    }

    /// Runs `then` when `cond` holds.
    pub(super) fn when(&mut self, cond: &str, hint: &str, then: &mut dyn FnMut(&mut FnBuilder)) {
        if let Some(join) = self.begin_if(cond, hint) {
            then(self);
            self.end_if(join);
        }
    }

    /// The function body: allocas first, then the blocks.
    pub(super) fn finish(mut self) -> (Vec<Line>, BTreeMap<String, String>) {
        let mut out = Vec::new();
        let allocas = std::mem::take(&mut self.allocas);
        for (i, b) in self.blocks.into_iter().enumerate() {
            out.push(Line { text: format!("{}:", b.label), loc: None });
            if i == 0 {
                out.extend(allocas.iter().cloned().map(|l| Line { text: format!("  {}", l.text), loc: l.loc }));
            }
            out.extend(b.lines.into_iter().map(|l| Line { text: format!("  {}", l.text), loc: l.loc }));
        }
        (out, self.decls)
    }
}
