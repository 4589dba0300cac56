//! The generated PTX, executed by a small emulator of the PTX subset `passes::ptx`
//! emits, against the reference interpreter on the same GPU Tile IR and inputs.
//!
//! No GPU is needed: this checks what the code computes — register use across
//! loops and branches, predicates and bounds, address and swizzle arithmetic (the
//! `cp.async` writer and the `ldmatrix` reader of each buffer must agree), vector
//! paths and their fallbacks, shuffles, barriers and asynchronous-copy ordering
//! (copies land only at `cp.async.wait_group`). Warp-collective instructions follow
//! the PTX ISA (`mma` fragments §9.7.14.5.8/10, `ldmatrix` §9.7.14.5.15, `shfl.sync`),
//! so this cannot find a misreading of those tables — `passes::ptx` checks its use of
//! them against the layouts separately. Every global and shared access is bounds- and
//! alignment-checked; reading a register never written is an error.

#![cfg(feature = "cuda")]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use tessera_backends::cuda::args::{check_args, pack};
use tessera_backends::interp::inputs::{seeded, set_scalar};
use tessera_backends::interp::{compare_outputs, run_kernel};
use tessera_backends::tensor::{round_to_saturating, Arg, HostTensor};
use tessera_frontend::check::{fn_signature, DType, FunctionKind};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::codegen::TargetCode;
use tessera_passes::{default_config, tile_ir, Target};

const SEED: u64 = 7;

// ----- decoding ----------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Src {
    Reg(usize),
    /// A negated predicate (`!%p3`).
    Not(usize),
    Imm(u64),
    Special(&'static str),
    Smem,
}

#[derive(Clone, Debug)]
enum Opd {
    Src(Src),
    Mem { base: Option<usize>, param: Option<String>, offset: i64 },
    Vec(Vec<Src>),
    Label(usize),
}

#[derive(Clone, Debug)]
struct Ins {
    line: usize,
    pred: Option<(usize, bool)>,
    op: Vec<String>,
    args: Vec<Opd>,
}

struct Module {
    code: Vec<Ins>,
    regs: usize,
    /// Register names, for messages.
    names: Vec<String>,
    params: Vec<String>,
}

fn parse_imm(t: &str) -> Option<u64> {
    if let Some(h) = t.strip_prefix("0f") {
        return u32::from_str_radix(h, 16).ok().map(|v| v as u64);
    }
    if let Some(h) = t.strip_prefix("0d") {
        return u64::from_str_radix(h, 16).ok();
    }
    t.parse::<i64>().ok().map(|v| v as u64)
}

fn parse(ptx: &str) -> Result<Module, String> {
    let mut params = Vec::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut raw: Vec<(usize, String)> = Vec::new();
    let mut in_body = false;
    for (n, line) in ptx.lines().enumerate() {
        let t = line.trim();
        if t.starts_with(".param") {
            params.push(t.trim_end_matches(',').rsplit(' ').next().unwrap().to_string());
            continue;
        }
        if t == "{" {
            in_body = true;
            continue;
        }
        if !in_body || t.is_empty() || t.starts_with("//") || t.starts_with(".reg") || t == "}" {
            continue;
        }
        if let Some(l) = t.strip_suffix(':') {
            labels.insert(l.to_string(), raw.len());
            continue;
        }
        raw.push((n + 1, t.trim_end_matches(';').to_string()));
    }
    let mut regs = Regs::default();
    let mut code = Vec::new();
    for (line, text) in raw {
        let mut rest = text.as_str();
        let mut pred = None;
        if let Some(p) = rest.strip_prefix('@') {
            let (p, r) = p.split_once(' ').ok_or(format!("line {line}: bad predicate"))?;
            let (neg, name) = match p.strip_prefix('!') {
                Some(n) => (true, n),
                None => (false, p),
            };
            pred = Some((regs.get(name), neg));
            rest = r.trim();
        }
        let (opcode, operands) = rest.split_once(' ').unwrap_or((rest, ""));
        let op: Vec<String> = opcode.split('.').map(String::from).collect();
        let mut args = Vec::new();
        let mut buf = String::new();
        let mut depth = 0;
        let mut pieces = Vec::new();
        for ch in operands.chars() {
            match ch {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    pieces.push(buf.trim().to_string());
                    buf.clear();
                    continue;
                }
                _ => {}
            }
            buf.push(ch);
        }
        if !buf.trim().is_empty() {
            pieces.push(buf.trim().to_string());
        }
        for p in pieces {
            if let Some(inner) = p.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                let (base, offset) = match inner.split_once('+') {
                    Some((b, o)) => (b.trim(), o.trim().parse::<i64>().map_err(|_| format!("line {line}: {p}"))?),
                    None => (inner.trim(), 0),
                };
                if base.starts_with('%') {
                    args.push(Opd::Mem { base: Some(regs.get(base)), param: None, offset });
                } else {
                    args.push(Opd::Mem { base: None, param: Some(base.to_string()), offset });
                }
            } else if let Some(inner) = p.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
                let v = inner.split(',').map(|x| source(x, &mut regs, line)).collect::<Result<_, _>>()?;
                args.push(Opd::Vec(v));
            } else if p.starts_with('$') {
                args.push(Opd::Label(*labels.get(&p).ok_or(format!("line {line}: no label {p}"))?));
            } else {
                args.push(Opd::Src(source(&p, &mut regs, line)?));
            }
        }
        code.push(Ins { line, pred, op, args });
    }
    Ok(Module { code, regs: regs.names.len(), names: regs.names, params })
}

#[derive(Default)]
struct Regs {
    index: HashMap<String, usize>,
    names: Vec<String>,
}

impl Regs {
    fn get(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

fn source(t: &str, regs: &mut Regs, line: usize) -> Result<Src, String> {
    let t = t.trim();
    Ok(match t {
        "%tid.x" => Src::Special("tid"),
        "%ctaid.x" => Src::Special("ctaid.x"),
        "%ctaid.y" => Src::Special("ctaid.y"),
        "%ctaid.z" => Src::Special("ctaid.z"),
        "%nctaid.x" => Src::Special("nctaid.x"),
        "%nctaid.y" => Src::Special("nctaid.y"),
        "%nctaid.z" => Src::Special("nctaid.z"),
        "tessera_smem" => Src::Smem,
        _ if t.starts_with("!%") => Src::Not(regs.get(&t[1..])),
        _ if t.starts_with('%') => Src::Reg(regs.get(t)),
        _ => Src::Imm(parse_imm(t).ok_or(format!("line {line}: operand `{t}`"))?),
    })
}

// ----- memory ------------------------------------------------------------------------

/// Global memory: one buffer per tensor at a distinct, 256-byte aligned address.
struct Global {
    buffers: Vec<(u64, Vec<u8>)>,
}

impl Global {
    fn find(&mut self, addr: u64, len: usize) -> Result<&mut [u8], String> {
        for (base, data) in &mut self.buffers {
            if addr >= *base && addr + len as u64 <= *base + data.len() as u64 {
                let at = (addr - *base) as usize;
                return Ok(&mut data[at..at + len]);
            }
        }
        Err(format!("global access of {len} bytes at {addr:#x} is outside every tensor"))
    }
}

// ----- execution ---------------------------------------------------------------------

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum State {
    Run,
    Barrier,
    Done,
}

struct Copy {
    dst: u64,
    src: u64,
    size: usize,
    valid: usize,
}

struct Thread {
    regs: Vec<Option<u64>>,
    pc: usize,
    state: State,
    open: Vec<Copy>,
    groups: Vec<Vec<Copy>>,
}

struct Cta<'a> {
    m: &'a Module,
    threads: Vec<Thread>,
    smem: Vec<u8>,
    global: &'a mut Global,
    params: &'a HashMap<String, u64>,
    ctaid: [u64; 3],
    nctaid: [u64; 3],
    steps: u64,
}

fn f32of(v: u64) -> f32 {
    f32::from_bits(v as u32)
}
fn bits32(x: f32) -> u64 {
    x.to_bits() as u64
}
fn bf16_to_f32(h: u64) -> f32 {
    f32::from_bits(((h as u32) & 0xffff) << 16)
}
fn f16_to_f32(h: u64) -> f32 {
    half::f16::from_bits(h as u16).to_f32()
}
fn fp8_to_f32(byte: u64, e4m3: bool) -> f32 {
    let dtype = if e4m3 { DType::Fp8E4m3 } else { DType::Fp8E5m2 };
    HostTensor { dtype, dims: vec![1], data: vec![byte as u8] }.get(0) as f32
}
/// `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`: round to nearest even, clamped to the largest
/// finite value (Inf too), NaN kept.
fn f32_to_fp8(x: f32, e4m3: bool) -> u64 {
    let dtype = if e4m3 { DType::Fp8E4m3 } else { DType::Fp8E5m2 };
    let mut t = HostTensor::zeros(dtype, &[1]);
    t.set(0, round_to_saturating(dtype, x as f64));
    t.data[0] as u64
}

impl Cta<'_> {
    fn err(&self, pc: usize, message: impl std::fmt::Display) -> String {
        let ins = &self.m.code[pc];
        format!("PTX line {} (`{}`): {message}", ins.line, ins.op.join("."))
    }

    fn read(&self, t: usize, s: &Src, pc: usize) -> Result<u64, String> {
        Ok(match s {
            Src::Reg(r) => self.threads[t].regs[*r]
                .ok_or_else(|| self.err(pc, format!("thread {t} reads {} before any write", self.m.names[*r])))?,
            Src::Not(r) => (self.read(t, &Src::Reg(*r), pc)? == 0) as u64,
            Src::Imm(v) => *v,
            Src::Smem => 0,
            Src::Special(name) => match *name {
                "tid" => t as u64,
                "ctaid.x" => self.ctaid[0],
                "ctaid.y" => self.ctaid[1],
                "ctaid.z" => self.ctaid[2],
                "nctaid.x" => self.nctaid[0],
                "nctaid.y" => self.nctaid[1],
                _ => self.nctaid[2],
            },
        })
    }

    fn src(&self, t: usize, pc: usize, i: usize) -> Result<u64, String> {
        match &self.m.code[pc].args[i] {
            Opd::Src(s) => self.read(t, s, pc),
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not a value"))),
        }
    }

    fn dst(&self, pc: usize, i: usize) -> Result<usize, String> {
        match &self.m.code[pc].args[i] {
            Opd::Src(Src::Reg(r)) => Ok(*r),
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not a register"))),
        }
    }

    fn addr(&self, t: usize, pc: usize, i: usize) -> Result<u64, String> {
        match &self.m.code[pc].args[i] {
            Opd::Mem { base: Some(r), offset, .. } => Ok(self.read(t, &Src::Reg(*r), pc)?.wrapping_add(*offset as u64)),
            Opd::Mem { param: Some(p), .. } => {
                self.params.get(p).copied().ok_or_else(|| self.err(pc, format!("no parameter {p}")))
            }
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not an address"))),
        }
    }

    fn set(&mut self, t: usize, r: usize, v: u64) {
        self.threads[t].regs[r] = Some(v);
    }

    fn smem(&mut self, addr: u64, len: usize, align: usize, pc: usize) -> Result<&mut [u8], String> {
        if !(addr as usize).is_multiple_of(align) {
            return Err(self.err(pc, format!("shared address {addr} is not {align}-byte aligned")));
        }
        if addr as usize + len > self.smem.len() {
            return Err(self.err(pc, format!("shared access {addr}+{len} past {} bytes", self.smem.len())));
        }
        Ok(&mut self.smem[addr as usize..addr as usize + len])
    }

    fn run(&mut self) -> Result<(), String> {
        let warps = self.threads.len().div_ceil(32);
        loop {
            let mut progressed = false;
            for w in 0..warps {
                let lanes: Vec<usize> = (w * 32..((w + 1) * 32).min(self.threads.len()))
                    .filter(|&t| self.threads[t].state == State::Run)
                    .collect();
                let Some(pc) = lanes.iter().map(|&t| self.threads[t].pc).min() else { continue };
                let active: Vec<usize> = lanes.into_iter().filter(|&t| self.threads[t].pc == pc).collect();
                self.step(pc, &active, w)?;
                progressed = true;
                self.steps += 1;
                if self.steps > 20_000_000 {
                    return Err("the kernel runs too long (a loop that does not end?)".into());
                }
            }
            if !progressed {
                let waiting = self.threads.iter().filter(|t| t.state == State::Barrier).count();
                if waiting == 0 {
                    return Ok(());
                }
                let live = self.threads.iter().filter(|t| t.state != State::Done).count();
                if waiting != live || waiting != self.threads.len() {
                    return Err(format!(
                        "{waiting} threads wait at a barrier that {} threads never reach",
                        self.threads.len() - waiting
                    ));
                }
                for t in &mut self.threads {
                    t.state = State::Run;
                    t.pc += 1;
                }
            }
        }
    }

    fn step(&mut self, pc: usize, active: &[usize], warp: usize) -> Result<(), String> {
        let ins = self.m.code[pc].clone();
        let op: Vec<&str> = ins.op.iter().map(String::as_str).collect();
        // Predicates (a collective op must not be predicated).
        let mut on = Vec::with_capacity(active.len());
        for &t in active {
            let enabled = match ins.pred {
                None => true,
                Some((p, neg)) => (self.read(t, &Src::Reg(p), pc)? != 0) != neg,
            };
            if enabled {
                on.push(t);
            } else {
                self.threads[t].pc += 1;
            }
        }
        let collective = matches!(op[0], "shfl" | "ldmatrix" | "mma" | "bar");
        if collective {
            let full = self.threads.len().min(32 * (warp + 1)) - 32 * warp;
            if on.len() != full {
                return Err(self.err(pc, format!("{} of {full} lanes execute a warp-collective instruction", on.len())));
            }
            match op[0] {
                "bar" => {
                    for &t in &on {
                        self.threads[t].state = State::Barrier;
                    }
                }
                "shfl" => self.shfl(pc, &on)?,
                "ldmatrix" => self.ldmatrix(pc, &on, &op)?,
                _ => self.mma(pc, &on, &op)?,
            }
            if op[0] != "bar" {
                for &t in &on {
                    self.threads[t].pc += 1;
                }
            }
            return Ok(());
        }
        for &t in &on {
            let next = self.exec(t, pc, &op)?;
            self.threads[t].pc = next;
        }
        Ok(())
    }

    fn complete(&mut self, t: usize, keep: usize, pc: usize) -> Result<(), String> {
        while self.threads[t].groups.len() > keep {
            let group = self.threads[t].groups.remove(0);
            for c in group {
                let mut bytes = vec![0u8; c.size];
                if c.valid > 0 {
                    match self.global.find(c.src, c.valid) {
                        Ok(src) => bytes[..c.valid].copy_from_slice(src),
                        Err(e) => return Err(self.err(pc, e)),
                    }
                }
                self.smem(c.dst, c.size, c.size, pc)?.copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    /// One thread executes one instruction; returns its next pc.
    fn exec(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<usize, String> {
        let ty = *op.last().unwrap();
        let a = |s: &Self, i| s.src(t, pc, i);
        match op[0] {
            "ret" => {
                self.threads[t].state = State::Done;
                return Ok(pc);
            }
            "bra" => {
                if let Opd::Label(l) = self.m.code[pc].args[0] {
                    return Ok(l);
                }
                return Err(self.err(pc, "a branch without a label"));
            }
            "cp" => match op[2] {
                "commit_group" => {
                    let g = std::mem::take(&mut self.threads[t].open);
                    self.threads[t].groups.push(g);
                }
                "wait_group" => {
                    let keep = a(self, 0)? as usize;
                    self.complete(t, keep, pc)?;
                }
                _ => {
                    let dst = self.addr(t, pc, 0)?;
                    let src = self.addr(t, pc, 1)?;
                    let size = a(self, 2)? as usize;
                    let valid = a(self, 3)? as usize;
                    if valid > size
                        || !(dst as usize).is_multiple_of(size)
                        || (valid > 0 && !(src as usize).is_multiple_of(size))
                    {
                        return Err(self.err(pc, format!("cp.async of {valid}/{size} bytes, {src:#x} -> {dst}")));
                    }
                    self.threads[t].open.push(Copy { dst, src, size, valid });
                }
            },
            "ld" | "st" => self.memory(t, pc, op)?,
            "mov" => self.mov(t, pc)?,
            "cvta" => {
                let v = a(self, 1)?;
                let d = self.dst(pc, 0)?;
                self.set(t, d, v);
            }
            "setp" => {
                let (x, y) = (a(self, 1)?, a(self, 2)?);
                let cmp = op[1];
                let r = match ty {
                    "f32" | "f64" => {
                        let (x, y) = if ty == "f32" {
                            (f32of(x) as f64, f32of(y) as f64)
                        } else {
                            (f64::from_bits(x), f64::from_bits(y))
                        };
                        match cmp {
                            "lt" => x < y,
                            "le" => x <= y,
                            "gt" => x > y,
                            "ge" => x >= y,
                            "eq" => x == y,
                            "ne" => x != y && !x.is_nan() && !y.is_nan(),
                            "neu" => x != y || x.is_nan() || y.is_nan(),
                            _ => return Err(self.err(pc, "comparison")),
                        }
                    }
                    _ => {
                        let (x, y): (i128, i128) = match ty {
                            "s32" => (x as u32 as i32 as i128, y as u32 as i32 as i128),
                            "u32" | "b32" => (x as u32 as i128, y as u32 as i128),
                            "s64" => (x as i64 as i128, y as i64 as i128),
                            _ => (x as i128, y as i128),
                        };
                        match cmp {
                            "lt" => x < y,
                            "le" => x <= y,
                            "gt" => x > y,
                            "ge" => x >= y,
                            "eq" => x == y,
                            "ne" => x != y,
                            _ => return Err(self.err(pc, "comparison")),
                        }
                    }
                };
                let d = self.dst(pc, 0)?;
                self.set(t, d, r as u64);
            }
            "selp" => {
                let c = a(self, 3)? != 0;
                let v = if c { a(self, 1)? } else { a(self, 2)? };
                let d = self.dst(pc, 0)?;
                self.set(t, d, v);
            }
            "cvt" => self.cvt(t, pc, op)?,
            "and" | "or" | "xor" if ty == "pred" => {
                let (x, y) = (a(self, 1)? != 0, self.pred_operand(t, pc, 2)?);
                let v = match op[0] {
                    "and" => x && y,
                    "or" => x || y,
                    _ => x != y,
                };
                let d = self.dst(pc, 0)?;
                self.set(t, d, v as u64);
            }
            "not" if ty == "pred" => {
                let v = a(self, 1)? == 0;
                let d = self.dst(pc, 0)?;
                self.set(t, d, v as u64);
            }
            "bfe" => {
                let (x, pos, len) = (a(self, 1)?, a(self, 2)? as u32, a(self, 3)? as u32);
                let field = ((x as u32) >> pos) & ((1u64 << len) - 1) as u32;
                let v = if ty == "s32" && len > 0 && field >> (len - 1) & 1 == 1 {
                    (field | !(((1u64 << len) - 1) as u32)) as u64
                } else {
                    field as u64
                };
                let d = self.dst(pc, 0)?;
                self.set(t, d, v);
            }
            "prmt" => {
                let (x, y, sel) = (a(self, 1)? as u32, a(self, 2)? as u32, a(self, 3)? as u32);
                let bytes = [x, x >> 8, x >> 16, x >> 24, y, y >> 8, y >> 16, y >> 24].map(|b| b & 0xff);
                let mut v = 0u32;
                for k in 0..4 {
                    v |= bytes[((sel >> (4 * k)) & 7) as usize] << (8 * k);
                }
                let d = self.dst(pc, 0)?;
                self.set(t, d, v as u64);
            }
            _ => self.arith(t, pc, op)?,
        }
        Ok(pc + 1)
    }

    fn pred_operand(&self, t: usize, pc: usize, i: usize) -> Result<bool, String> {
        Ok(self.src(t, pc, i)? != 0)
    }

    fn mov(&mut self, t: usize, pc: usize) -> Result<(), String> {
        let args = self.m.code[pc].args.clone();
        let ty = self.m.code[pc].op[1].clone();
        let half = if ty == "b64" { 32 } else { 16 };
        match (&args[0], &args[1]) {
            (Opd::Vec(dst), Opd::Src(s)) => {
                let v = self.read(t, s, pc)?;
                for (k, d) in dst.iter().enumerate() {
                    if let Src::Reg(r) = d {
                        self.set(t, *r, (v >> (half * k)) & ((1u64 << half) - 1));
                    }
                }
            }
            (Opd::Src(Src::Reg(d)), Opd::Vec(src)) => {
                let mut v = 0u64;
                for (k, s) in src.iter().enumerate() {
                    v |= (self.read(t, s, pc)? & ((1u64 << half) - 1)) << (half * k);
                }
                self.set(t, *d, v);
            }
            (Opd::Src(Src::Reg(d)), Opd::Src(s)) => {
                let v = self.read(t, s, pc)?;
                let v = match ty.as_str() {
                    "b16" => v & 0xffff,
                    "b32" | "u32" | "f32" => v & 0xffff_ffff,
                    "pred" => (v != 0) as u64,
                    _ => v,
                };
                self.set(t, *d, v);
            }
            _ => return Err(self.err(pc, "mov operands")),
        }
        Ok(())
    }

    fn memory(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let ty = *op.last().unwrap();
        let space = op[1];
        let lanes: usize = op.iter().find_map(|p| p.strip_prefix('v').and_then(|n| n.parse().ok())).unwrap_or(1);
        let eb = match ty {
            "u8" | "s8" => 1,
            "b16" | "u16" => 2,
            "f32" | "b32" | "s32" | "u32" => 4,
            _ => 8,
        };
        let (data_at, addr_at) = if op[0] == "ld" { (0, 1) } else { (1, 0) };
        if space == "param" {
            let v = self.addr(t, pc, 1)?;
            let d = self.dst(pc, 0)?;
            let v = if ty == "u32" { v & 0xffff_ffff } else { v };
            self.set(t, d, v);
            return Ok(());
        }
        let addr = self.addr(t, pc, addr_at)?;
        let total = eb * lanes;
        let regs: Vec<Src> = match &self.m.code[pc].args[data_at] {
            Opd::Vec(v) => v.clone(),
            Opd::Src(s) => vec![s.clone()],
            _ => return Err(self.err(pc, "memory operand")),
        };
        if regs.len() != lanes {
            return Err(self.err(pc, "vector width"));
        }
        if !(addr as usize).is_multiple_of(total) {
            return Err(self.err(pc, format!("{space} address {addr:#x} is not {total}-byte aligned")));
        }
        if op[0] == "ld" {
            let bytes = if space == "global" {
                match self.global.find(addr, total) {
                    Ok(b) => b.to_vec(),
                    Err(e) => return Err(self.err(pc, e)),
                }
            } else {
                self.smem(addr, total, total, pc)?.to_vec()
            };
            for (k, r) in regs.iter().enumerate() {
                let mut v = 0u64;
                for b in 0..eb {
                    v |= (bytes[k * eb + b] as u64) << (8 * b);
                }
                if ty == "s8" {
                    v = v as u8 as i8 as i64 as u64 & 0xffff_ffff;
                }
                if let Src::Reg(r) = r {
                    self.set(t, *r, v);
                }
            }
        } else {
            let mut bytes = Vec::with_capacity(total);
            for r in &regs {
                let v = self.read(t, r, pc)?;
                bytes.extend_from_slice(&v.to_le_bytes()[..eb]);
            }
            if space == "global" {
                let message = match self.global.find(addr, total) {
                    Ok(dest) => {
                        dest.copy_from_slice(&bytes);
                        None
                    }
                    Err(e) => Some(e),
                };
                if let Some(e) = message {
                    return Err(self.err(pc, e));
                }
            } else {
                self.smem(addr, total, total, pc)?.copy_from_slice(&bytes);
            }
        }
        Ok(())
    }

    fn cvt(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let n = op.len();
        let (to, from) = (op[n - 2], op[n - 1]);
        let mode = op.get(1).copied().unwrap_or("");
        let x = self.src(t, pc, 1)?;
        let round = |v: f64| -> f64 {
            match mode {
                "rzi" => v.trunc(),
                "rmi" => v.floor(),
                "rni" => {
                    let r = v.round();
                    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
                        r - v.signum()
                    } else {
                        r
                    }
                }
                _ => v,
            }
        };
        let as_f64 = |v: u64| -> f64 {
            match from {
                "f32" => f32of(v) as f64,
                "f64" => f64::from_bits(v),
                "bf16" => bf16_to_f32(v) as f64,
                "f16" => f16_to_f32(v) as f64,
                "s32" => v as u32 as i32 as f64,
                "u32" => v as u32 as f64,
                "s64" => v as i64 as f64,
                _ => v as f64,
            }
        };
        let v = match (to, from) {
            ("bf16x2" | "f16x2", "f32") => {
                let lo = f32of(self.src(t, pc, 2)?);
                let hi = f32of(x);
                let enc = |f: f32| -> u64 {
                    if to == "bf16x2" {
                        half::bf16::from_f32(f).to_bits() as u64
                    } else {
                        half::f16::from_f32(f).to_bits() as u64
                    }
                };
                enc(lo) | (enc(hi) << 16)
            }
            ("e4m3x2" | "e5m2x2", "f32") => {
                let e4 = to == "e4m3x2";
                let lo = f32of(self.src(t, pc, 2)?);
                f32_to_fp8(lo, e4) | (f32_to_fp8(f32of(x), e4) << 8)
            }
            ("f16x2", "e4m3x2" | "e5m2x2") => {
                let e4 = from == "e4m3x2";
                let lo = half::f16::from_f32(fp8_to_f32(x & 0xff, e4)).to_bits() as u64;
                let hi = half::f16::from_f32(fp8_to_f32((x >> 8) & 0xff, e4)).to_bits() as u64;
                lo | (hi << 16)
            }
            ("bf16", "f32") => half::bf16::from_f32(f32of(x)).to_bits() as u64,
            ("f16", "f32") => half::f16::from_f32(f32of(x)).to_bits() as u64,
            ("f32", _) => bits32(round(as_f64(x)) as f32),
            ("f64", _) => round(as_f64(x)).to_bits(),
            ("s32", "f32" | "f64") => {
                let v = round(as_f64(x));
                let v = if v.is_nan() { 0.0 } else { v.clamp(i32::MIN as f64, i32::MAX as f64) };
                v as i32 as u32 as u64
            }
            ("u32", "f32") => {
                let v = round(as_f64(x));
                let v = if v.is_nan() { 0.0 } else { v.clamp(0.0, u32::MAX as f64) };
                v as u32 as u64
            }
            ("s64", "f32" | "f64") => {
                let v = round(as_f64(x));
                (if v.is_nan() { 0 } else { v as i64 }) as u64
            }
            ("u64", "u32") => x & 0xffff_ffff,
            ("u32", "u64") => x & 0xffff_ffff,
            ("s64", "s32") => x as u32 as i32 as i64 as u64,
            ("u32", "u16") => x & 0xffff,
            ("u16", "u32") => x & 0xffff,
            ("s32", "s8") => (x as u8 as i8 as i32) as u32 as u64,
            _ => return Err(self.err(pc, format!("cvt to {to} from {from}"))),
        };
        let d = self.dst(pc, 0)?;
        self.set(t, d, v);
        Ok(())
    }

    fn arith(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let ty = *op.last().unwrap();
        let name = op[0];
        let nargs = self.m.code[pc].args.len();
        let x = self.src(t, pc, 1)?;
        let y = if nargs > 2 { self.src(t, pc, 2)? } else { 0 };
        let z = if nargs > 3 { self.src(t, pc, 3)? } else { 0 };
        let v = match ty {
            "f32" => {
                let (a, b, c) = (f32of(x), f32of(y), f32of(z));
                bits32(match name {
                    "add" => a + b,
                    "sub" => a - b,
                    "mul" => a * b,
                    "div" => a / b,
                    "fma" => a.mul_add(b, c),
                    "max" => a.max(b),
                    "min" => a.min(b),
                    "neg" => -a,
                    "abs" => a.abs(),
                    "sqrt" => a.sqrt(),
                    "rsqrt" => 1.0 / a.sqrt(),
                    "rcp" => 1.0 / a,
                    "ex2" => a.exp2(),
                    "lg2" => a.log2(),
                    "tanh" => a.tanh(),
                    "shl" => return self.finish(t, pc, ((x as u32) << (y as u32)) as u64),
                    "and" => return self.finish(t, pc, x & y & 0xffff_ffff),
                    _ => return Err(self.err(pc, "f32 op")),
                })
            }
            "f64" => {
                let (a, b) = (f64::from_bits(x), f64::from_bits(y));
                match name {
                    "add" => a + b,
                    "sub" => a - b,
                    "mul" => a * b,
                    "div" => a / b,
                    "max" => a.max(b),
                    "min" => a.min(b),
                    "neg" => -a,
                    "abs" => a.abs(),
                    "sqrt" => a.sqrt(),
                    // `copysign d, a, b`: b with the sign of a.
                    "copysign" => b.copysign(a),
                    _ => return Err(self.err(pc, "f64 op")),
                }
                .to_bits()
            }
            "f16x2" => {
                let h = |v: u64, k: u32| half::f16::from_bits((v >> (16 * k)) as u16).to_f32();
                let lo = half::f16::from_f32(h(x, 0) * h(y, 0)).to_bits() as u64;
                let hi = half::f16::from_f32(h(x, 1) * h(y, 1)).to_bits() as u64;
                lo | (hi << 16)
            }
            "s32" | "u32" | "b32" => {
                let signed = ty == "s32";
                let (a, b, c) = (x as u32, y as u32, z as u32);
                let (sa, sb) = (a as i32, b as i32);
                (match name {
                    "add" => a.wrapping_add(b),
                    "sub" => a.wrapping_sub(b),
                    "mul" => a.wrapping_mul(b),
                    "mad" => a.wrapping_mul(b).wrapping_add(c),
                    "div" if signed => sa.checked_div(sb).unwrap_or(-1) as u32,
                    "div" => a.checked_div(b).unwrap_or(u32::MAX),
                    "rem" if signed => sa.checked_rem(sb).unwrap_or(sa) as u32,
                    "rem" => a.checked_rem(b).unwrap_or(a),
                    "max" if signed => sa.max(sb) as u32,
                    "max" => a.max(b),
                    "min" if signed => sa.min(sb) as u32,
                    "min" => a.min(b),
                    "and" => a & b,
                    "or" => a | b,
                    "xor" => a ^ b,
                    "not" => !a,
                    "neg" => sa.wrapping_neg() as u32,
                    "abs" => sa.wrapping_abs() as u32,
                    "shl" => a.checked_shl(b).unwrap_or(0),
                    "shr" if signed => (sa >> b.min(31)) as u32,
                    "shr" => a.checked_shr(b).unwrap_or(0),
                    _ => return Err(self.err(pc, format!("{name}.{ty}"))),
                }) as u64
            }
            "s64" | "u64" | "b64" => {
                let signed = ty == "s64";
                let (sa, sb, sc) = (x as i64, y as i64, z as i64);
                (match name {
                    "add" => sa.wrapping_add(sb),
                    "sub" => sa.wrapping_sub(sb),
                    "mul" => sa.wrapping_mul(sb),
                    "mad" => sa.wrapping_mul(sb).wrapping_add(sc),
                    "div" => sa.checked_div(sb).unwrap_or(-1),
                    "rem" => sa.checked_rem(sb).unwrap_or(sa),
                    "max" if signed => sa.max(sb),
                    "max" => x.max(y) as i64,
                    "min" if signed => sa.min(sb),
                    "min" => x.min(y) as i64,
                    "and" => sa & sb,
                    "or" => sa | sb,
                    "xor" => sa ^ sb,
                    "neg" => sa.wrapping_neg(),
                    "abs" => sa.wrapping_abs(),
                    "shl" => sa.wrapping_shl(sb as u32),
                    "shr" if signed => sa >> sb.min(63),
                    "shr" => (x >> y.min(63)) as i64,
                    _ => return Err(self.err(pc, format!("{name}.{ty}"))),
                }) as u64
            }
            _ => return Err(self.err(pc, format!("{name}.{ty}"))),
        };
        self.finish(t, pc, v)
    }

    fn finish(&mut self, t: usize, pc: usize, v: u64) -> Result<(), String> {
        let d = self.dst(pc, 0)?;
        self.set(t, d, v);
        Ok(())
    }

    fn shfl(&mut self, pc: usize, lanes: &[usize]) -> Result<(), String> {
        let mask = match &self.m.code[pc].args[2] {
            Opd::Src(Src::Imm(m)) => *m as usize,
            _ => return Err(self.err(pc, "shuffle lane mask")),
        };
        let vals: Vec<u64> = lanes.iter().map(|&t| self.src(t, pc, 1)).collect::<Result<_, _>>()?;
        let d = self.dst(pc, 0)?;
        for (i, &t) in lanes.iter().enumerate() {
            let v = vals[i ^ mask];
            self.set(t, d, v);
        }
        Ok(())
    }

    fn ldmatrix(&mut self, pc: usize, lanes: &[usize], op: &[&str]) -> Result<(), String> {
        let n: usize = op.iter().find_map(|p| p.strip_prefix('x').and_then(|n| n.parse().ok())).unwrap_or(1);
        let trans = op.contains(&"trans");
        let rows: Vec<u64> = lanes.iter().map(|&t| self.addr(t, pc, 1)).collect::<Result<_, _>>()?;
        let regs = match &self.m.code[pc].args[0] {
            Opd::Vec(v) => v.clone(),
            _ => return Err(self.err(pc, "ldmatrix destinations")),
        };
        let halves = |row_lane: usize, col: usize, s: &mut Self| -> Result<u64, String> {
            let addr = rows[row_lane] + 2 * col as u64;
            if !rows[row_lane].is_multiple_of(16) {
                return Err(s.err(pc, "ldmatrix row address not 16-byte aligned"));
            }
            let b = s.smem(addr, 2, 2, pc)?;
            Ok(u16::from_le_bytes([b[0], b[1]]) as u64)
        };
        for (m, r) in regs.iter().enumerate().take(n) {
            let Src::Reg(r) = r else { return Err(self.err(pc, "ldmatrix destination")) };
            for (l, &t) in lanes.iter().enumerate() {
                let (lo, hi) = if trans {
                    (halves(8 * m + 2 * (l % 4), l / 4, self)?, halves(8 * m + 2 * (l % 4) + 1, l / 4, self)?)
                } else {
                    (halves(8 * m + l / 4, 2 * (l % 4), self)?, halves(8 * m + l / 4, 2 * (l % 4) + 1, self)?)
                };
                self.set(t, *r, lo | (hi << 16));
            }
        }
        Ok(())
    }

    fn mma(&mut self, pc: usize, lanes: &[usize], op: &[&str]) -> Result<(), String> {
        let shape = op[3];
        let (atype, btype) = (op[op.len() - 3], op[op.len() - 2]);
        let int = atype == "s8";
        // `.f16` accumulators: two f16x2 words (c0, c1) and (c2, c3), summed exactly and
        // rounded once to f16.
        let f16_acc = op[6] == "f16";
        let k = if shape == "m16n8k16" { 16 } else { 32 };
        let per = if k == 16 { 2 } else { 4 };
        let args = self.m.code[pc].args.clone();
        let regs = |i: usize| -> Vec<Src> {
            match &args[i] {
                Opd::Vec(v) => v.clone(),
                _ => Vec::new(),
            }
        };
        let (d, a, b, c) = (regs(0), regs(1), regs(2), regs(3));
        let elem = |bits: u64, ty: &str| -> f64 {
            match ty {
                "bf16" => bf16_to_f32(bits) as f64,
                "f16" => f16_to_f32(bits) as f64,
                "e4m3" => fp8_to_f32(bits, true) as f64,
                "e5m2" => fp8_to_f32(bits, false) as f64,
                _ => bits as u8 as i8 as f64,
            }
        };
        let width = 32 / per;
        let mut am = [[0f64; 32]; 16];
        let mut bm = [[0f64; 8]; 32];
        let mut cm = [[0f64; 8]; 16];
        for (l, &t) in lanes.iter().enumerate() {
            let (g, tg) = (l / 4, l % 4);
            for (q, s) in a.iter().enumerate() {
                let word = self.read(t, s, pc)?;
                for e in 0..per {
                    let i = q * per + e;
                    let (row, col) = if per == 2 {
                        (g + 8 * ((i / 2) & 1), 2 * tg + (i & 1) + 8 * (i / 4))
                    } else {
                        (g + 8 * ((i / 4) & 1), 4 * tg + (i & 3) + 16 * (i / 8))
                    };
                    am[row][col] = elem((word >> (width * e)) & ((1 << width) - 1), atype);
                }
            }
            for (q, s) in b.iter().enumerate() {
                let word = self.read(t, s, pc)?;
                for e in 0..per {
                    let i = q * per + e;
                    let row = if per == 2 { 2 * tg + (i & 1) + 8 * (i / 2) } else { 4 * tg + (i & 3) + 16 * (i / 4) };
                    bm[row][g] = elem((word >> (width * e)) & ((1 << width) - 1), btype);
                }
            }
            if f16_acc {
                for i in 0..4 {
                    let v = self.read(t, &c[i / 2], pc)?;
                    cm[g + 8 * (i / 2)][2 * tg + (i & 1)] = f16_to_f32((v >> (16 * (i & 1))) & 0xffff) as f64;
                }
            } else {
                for (i, s) in c.iter().enumerate() {
                    let v = self.read(t, s, pc)?;
                    cm[g + 8 * (i / 2)][2 * tg + (i & 1)] = if int { v as u32 as i32 as f64 } else { f32of(v) as f64 };
                }
            }
        }
        if f16_acc {
            for (l, &t) in lanes.iter().enumerate() {
                let (g, tg) = (l / 4, l % 4);
                for (w, s) in d.iter().enumerate() {
                    let mut word = 0u64;
                    for h in 0..2 {
                        let (row, col) = (g + 8 * w, 2 * tg + h);
                        let acc = cm[row][col] + (0..k).map(|kk| am[row][kk] * bm[kk][col]).sum::<f64>();
                        word |= (half::f16::from_f64(acc).to_bits() as u64) << (16 * h);
                    }
                    let Src::Reg(r) = s else { return Err(self.err(pc, "mma destination")) };
                    self.set(t, *r, word);
                }
            }
            return Ok(());
        }
        for (l, &t) in lanes.iter().enumerate() {
            let (g, tg) = (l / 4, l % 4);
            for (i, s) in d.iter().enumerate() {
                let (row, col) = (g + 8 * (i / 2), 2 * tg + (i & 1));
                let mut acc = cm[row][col];
                for kk in 0..k {
                    acc += am[row][kk] * bm[kk][col];
                }
                let Src::Reg(r) = s else { return Err(self.err(pc, "mma destination")) };
                let bits = if int { acc as i64 as i32 as u32 as u64 } else { bits32(acc as f32) };
                self.set(t, *r, bits);
            }
        }
        Ok(())
    }
}

/// Runs every program of the grid; tensors are copied back into `args`.
fn emulate(code: &TargetCode, args: &mut [Arg]) -> Result<u64, String> {
    let module = parse(&code.text)?;
    let tensors = check_args(&code.abi, args)?;
    let shapes: Vec<Vec<i64>> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let binding = code.abi.bind(&shapes)?;
    let mut global = Global { buffers: Vec::new() };
    let mut pointers = Vec::new();
    let mut next = 0x10_0000u64;
    for a in args.iter() {
        if let Arg::Tensor(t) = a {
            pointers.push(next);
            global.buffers.push((next, t.data.clone()));
            next += (t.data.len() as u64 + 4096).next_multiple_of(256);
        }
    }
    let params = pack(&code.abi, args, &pointers)?;
    if params.slots.len() != module.params.len() {
        return Err(format!("{} parameter slots for {} PTX parameters", params.slots.len(), module.params.len()));
    }
    let values: HashMap<String, u64> = module.params.iter().cloned().zip(params.slots.iter().copied()).collect();
    let mut steps = 0;
    let [gx, gy, gz] = binding.grid;
    for z in 0..gz {
        for y in 0..gy {
            for x in 0..gx {
                let threads = (0..code.abi.threads)
                    .map(|_| Thread {
                        regs: vec![None; module.regs],
                        pc: 0,
                        state: State::Run,
                        open: Vec::new(),
                        groups: Vec::new(),
                    })
                    .collect();
                let mut cta = Cta {
                    m: &module,
                    threads,
                    smem: vec![0xAB; code.smem_bytes as usize],
                    global: &mut global,
                    params: &values,
                    ctaid: [x, y, z],
                    nctaid: [gx, gy, gz],
                    steps: 0,
                };
                cta.run().map_err(|e| format!("program ({x}, {y}, {z}): {e}"))?;
                if cta.threads.iter().any(|t| !t.groups.is_empty() || !t.open.is_empty()) {
                    return Err(format!("program ({x}, {y}, {z}) ends with asynchronous copies still pending"));
                }
                steps += cta.steps;
            }
        }
    }
    let mut buffers = global.buffers.into_iter();
    for a in args.iter_mut() {
        if let Arg::Tensor(t) = a {
            t.data = buffers.next().expect("one buffer per tensor").1;
        }
    }
    Ok(steps)
}

// ----- the kernels -------------------------------------------------------------------

/// Kernels for the ops and types the corpus does not reach: every float function, 16-
/// and 8-bit floats, casts to fp8 and integers, integer arithmetic, reductions across
/// warps, register transposes through shared memory, FMA dots, int8 and f16 tensor-core
/// dots (with a transposed B), shared buffers read in a blocked layout.
const OPS: &str = r#"from tessera import *

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def dropout_mask(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32], p: f32, seed: int):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            u = tile.rand((ctx.BM, ctx.BN), seed, (7, r0, c0))
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.where(u >= p, x / (1.0 - p), u)

@kernel.schedule(Schedule(block=(64, 64), warps=4))
def float_math(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32], Z: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            y = tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN], other=1.0)
            a = tile.exp(x) + tile.log(tile.abs(y) + 1.0) + tile.sqrt(tile.abs(x)) + tile.rsqrt(tile.abs(y) + 1.0)
            b = tile.tanh(x) * tile.sigmoid(y) - tile.relu(x) + tile.gelu(y) + tile.silu(x)
            c = tile.maximum(a, b) / tile.minimum(a + 2.0, b + 3.0) - x ** 2
            d = tile.where(x > y, c, -c)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = d

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def narrow_math(X: Tensor["R", "C", bf16], Y: Tensor["R", "C", f16], Z: Tensor["R", "C", bf16], W: Tensor["R", "C", f16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            y = tile.load(Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            z = tile.exp(x) * x + tile.cast(y, bf16)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = z
            W[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(tile.cast(z, f32) * 0.5, f16)

@kernel.schedule(Schedule(block=(16, 128), warps=4))
def casts(X: Tensor["R", "C", f32], A: Tensor["R", "C", fp8_e4m3], B: Tensor["R", "C", fp8_e5m2], I: Tensor["R", "C", int8], J: Tensor["R", "C", i32], Y: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            a = tile.cast(x, fp8_e4m3)
            b = tile.cast(x, fp8_e5m2)
            i = tile.cast(x, int8)
            j = tile.cast(x * 100.0, i32)
            A[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = a
            B[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = b
            I[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = i
            J[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = j // 3 + j % 7
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(a, f32) + tile.cast(b, f32) + tile.cast(i, f32) + tile.cast(j, f32)

@kernel.schedule(Schedule(block=(64, 128), warps=4))
def row_sums(X: Tensor["R", "C", f32], S: Tensor["R", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:ctx.BN])
        S[r0:r0 + ctx.BM] = tile.sum(x, 1)

@kernel.schedule(Schedule(block=(64, 32), warps=4))
def col_stats(X: Tensor["R", "C", f32], M: Tensor["C", f32]):
    ctx = tile.context()
    for c0 in tile.parallel(0, C, ctx.BN):
        x = tile.load(X[0:ctx.BM, c0:c0 + ctx.BN], other=0.5)
        M[c0:c0 + ctx.BN] = tile.max(x, 0) + tile.min(x, 0)

@kernel.schedule(Schedule(block=(64, 32), warps=4))
def transpose(X: Tensor["R", "C", f32], T: Tensor["C", "R", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            T[c0:c0 + ctx.BN, r0:r0 + ctx.BM] = x.T

@kernel.schedule(Schedule(block=(32, 48), k=16, warps=4))
def odd_dot(A: Tensor["M", "K", f32], B: Tensor["K", "N", f32], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@kernel.schedule(Schedule(block=(64, 64), k=64, warps=4, stages=2))
def int8_gemm(A: Tensor["M", "K", int8], B: Tensor["K", "N", int8], C: Tensor["M", "N", i32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), i32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, stages=3))
def f16_gemm_bt(A: Tensor["M", "K", f16], B: Tensor["N", "K", f16], C: Tensor["M", "N", f16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[n0:n0 + ctx.BN, k0:k0 + ctx.BK]).T)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(acc, f16)

@kernel.schedule(Schedule(block=(64, 64), warps=4))
def shared_roundtrip(X: Tensor["R", "C", f32], Y: Tensor["R", "C", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BM):
            s = tile.alloc_shared((ctx.BM, ctx.BM), f32, pad=4)
            tile.cp_async(s, X[r0:r0 + ctx.BM, c0:c0 + ctx.BM])
            tile.barrier()
            Y[r0:r0 + ctx.BM, c0:c0 + ctx.BM] = tile.load(s).T
"#;

fn sources() -> Vec<(String, PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let mut out = Vec::new();
    let dirs = [root.join("examples"), root.join("tests/corpus/valid")];
    out.push(("ops.tsr".to_string(), PathBuf::from("ops.tsr"), OPS.to_string()));
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tsr"))
            .collect();
        files.sort();
        for path in files {
            let label = path.display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((label, path, text));
        }
    }
    out
}

/// Small shapes (the emulator is slow): one a multiple of the tiles, one ragged and
/// misaligned (odd row lengths take the element-by-element copy and access paths).
fn shapes(kernel: &str) -> &'static [&'static str] {
    match kernel {
        "gemm" | "small_matmul" | "narrow_matmul" | "linear_gelu" => {
            &["M=64,N=64,K=64", "M=70,N=36,K=40", "M=33,N=17,K=9"]
        }
        "fp8_gemm" => &["M=128,N=128,K=128", "M=40,N=72,K=80"],
        "softmax" | "layernorm" => &["R=2,C=512", "R=3,C=300", "R=2,C=77"],
        "flash_attention" => &["BH=1,S=64,D=64", "BH=1,S=100,D=64"],
        "saxpy" => &["n=1000"],
        "vector_add" => &["N=4096", "N=1001"],
        "float_math" | "narrow_math" | "casts" | "transpose" | "shared_roundtrip" | "dropout_mask" => {
            &["R=64,C=128", "R=33,C=70"]
        }
        "row_sums" => &["R=128,C=128", "R=70,C=100"],
        "col_stats" => &["R=64,C=96", "R=50,C=45"],
        "odd_dot" | "int8_gemm" | "f16_gemm_bt" => &["M=64,N=96,K=64", "M=40,N=50,K=36"],
        _ => &[],
    }
}

fn check_kernel(
    label: &str,
    kernel: &str,
    func: &tessera_passes::ir::Func,
    code: &TargetCode,
    spec: &str,
) -> Vec<String> {
    let symbols: BTreeMap<String, i64> = spec
        .split(',')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let what = format!("{label} `{kernel}` {} [{spec}]", code.target);
    let abi = code.abi.clone();
    let mut inputs = match seeded(func, &symbols, SEED) {
        Ok(a) => a,
        Err(e) => return vec![format!("{what}: inputs: {e}")],
    };
    for (name, v) in [("eps", 1e-5), ("causal", 1.0), ("alpha", 1.5), ("scale", 0.5)] {
        let _ = set_scalar(&abi, &mut inputs, name, v);
    }
    let mut expected = inputs.clone();
    if let Err(e) = run_kernel(func, &mut expected) {
        eprintln!("SKIPPED {what}: no oracle: {e}");
        return Vec::new();
    }
    let mut actual = inputs.clone();
    match emulate(code, &mut actual) {
        Ok(steps) => eprintln!("{what}: {steps} warp steps"),
        Err(e) => return vec![format!("{what}: {e}")],
    }
    compare_outputs(func, &expected, &actual)
        .into_iter()
        .filter(|o| !o.comparison.passed)
        .map(|o| format!("{what}: output `{}`: {}", o.name, o.comparison))
        .collect()
}

#[test]
fn generated_ptx_computes_what_the_interpreter_computes() {
    let only = std::env::var("TESSERA_EMULATE").ok();
    let ptxas = tessera_passes::ptx::ptxas::locate();
    let mut failures = Vec::new();
    let mut covered = 0;
    for (label, path, text) in sources() {
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone(), text.clone(), None);
        for entry in &item_index(&db, file).functions {
            if fn_signature(&db, entry.key).kind != FunctionKind::Kernel {
                continue;
            }
            let kernel = entry.key.name(&db).to_string();
            if only.as_deref().is_some_and(|o| o != kernel) {
                continue;
            }
            let Ok((default, _)) = default_config(&db, entry.key, &BTreeMap::new()) else { continue };
            // The default and the last candidate of an autotune space (the largest tiles,
            // most warps and stages): both code shapes of every kernel.
            let mut configs = vec![default.clone()];
            let space = tessera_frontend::check::fn_decorators(&db, entry.key)
                .schedule
                .as_ref()
                .map(|s| s.configurations())
                .unwrap_or_default();
            if let Some(last) = space.last() {
                let last = tessera_passes::Config { schedule: last.clone(), shapes: default.shapes.clone() };
                if last != default {
                    configs.push(last);
                }
            }
            for config in configs {
                for target in [Target::Sm80, Target::Sm90] {
                    let func = match tile_ir(&db, entry.key, config.clone(), target).clone() {
                        Ok(f) => f,
                        Err(e) => {
                            failures.push(format!("{label} `{kernel}`: tile IR: {}", e.message));
                            continue;
                        }
                    };
                    let code = match tessera_passes::ptx::emit(&func, target) {
                        Ok(c) => c,
                        Err(e) => {
                            failures.push(format!("{label} `{kernel}`: PTX: {}", e.message));
                            continue;
                        }
                    };
                    // The kernels only this test has are assembled here too.
                    if let (true, Some(ptxas)) = (label == "ops.tsr", &ptxas) {
                        if let Err(e) = tessera_passes::ptx::ptxas::assemble_with(ptxas, &code.text, target.name()) {
                            failures.push(format!("{label} `{kernel}` {target}: ptxas: {e}"));
                        }
                    }
                    for spec in shapes(&kernel) {
                        failures.extend(check_kernel(&label, &kernel, &func, &code, spec));
                        covered += 1;
                    }
                }
            }
        }
    }
    assert!(covered > 0);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

// ----- numerics policies -------------------------------------------------------------------

/// Kernels of every numerics policy (docs/ir.md, "Numerics policies"): conversions with
/// and without `@saturate` (overflow: NaN for e4m3, Inf for e5m2, wrapping integers),
/// stochastic rounding from the run's seed, and f16 accumulation in tensor-core and FMA
/// dots and in reductions.
const POLICIES: &str = r#"from tessera import *

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def policy_casts(X: Tensor["R", "C", f32], S: Tensor["R", "C", fp8_e4m3 @saturate], P: Tensor["R", "C", fp8_e4m3],
                 Q: Tensor["R", "C", fp8_e5m2], T: Tensor["R", "C", fp8_e5m2 @saturate], I: Tensor["R", "C", int8],
                 J: Tensor["R", "C", int8 @saturate], Z: Tensor["R", "C", bf16 @stochastic_round],
                 E: Tensor["R", "C", fp8_e4m3 @stochastic_round]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        for c0 in tile.parallel(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            big = x * 300.0
            huge = x * 40000.0
            S[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, fp8_e4m3)
            P[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, fp8_e4m3)
            Q[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(huge, fp8_e5m2)
            T[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(huge, fp8_e5m2)
            I[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, int8)
            J[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(big, int8)
            Z[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x, bf16)
            E[r0:r0 + ctx.BM, c0:c0 + ctx.BN] = tile.cast(x * 8.0, fp8_e4m3)

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))
def f16_acc_gemm(A: Tensor["M", "K", f16 @accum(f16)], B: Tensor["K", "N", f16 @accum(f16)], C: Tensor["M", "N", f16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            c = tile.zeros((ctx.BM, ctx.BN), f16)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                c = tile.mma(a, b, accumulator=c)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = c

@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4))
def bf16_acc_gemm(A: Tensor["M", "K", bf16 @accum(bf16)], B: Tensor["K", "N", bf16 @accum(bf16)], C: Tensor["M", "N", bf16]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            c = tile.zeros((ctx.BM, ctx.BN), bf16)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                c = tile.mma(a, b, accumulator=c)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = c

@kernel.schedule(Schedule(block=(4, 128), warps=4))
def f16_acc_rows(X: Tensor["R", "C", f16 @accum(f16)], Y: Tensor["R", f16]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        s = tile.zeros((ctx.BM,), f16)
        for c0 in tile.range(0, C, ctx.BN):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            s = s + tile.row_sum(x)
        Y[r0:r0 + ctx.BM] = s
"#;

fn same_bits(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// The PTX of every policy computes what the interpreter computes: conversions and
/// stochastic rounding bit for bit (NaN = NaN), f16 and bf16 accumulation within a few
/// ulp of the accumulator (the order of the additions differs: `mma` rounds once per k16
/// step, reductions combine per thread, then across lanes and warps).
#[test]
fn policies_in_ptx_compute_what_the_interpreter_computes() {
    let db = Database::default();
    let file = SourceFile::new(&db, PathBuf::from("policies.tsr"), POLICIES.to_string(), None);
    let mut failures = Vec::new();
    for entry in &item_index(&db, file).functions {
        let kernel = entry.key.name(&db).to_string();
        let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
        for target in [Target::Sm80, Target::Sm90] {
            let func =
                tile_ir(&db, entry.key, config.clone(), target).clone().unwrap_or_else(|e| panic!("{}", e.message));
            let code = tessera_passes::ptx::emit(&func, target).unwrap_or_else(|e| panic!("{kernel}: {}", e.message));
            let specs: &[&str] = match kernel.as_str() {
                "policy_casts" => &["R=64,C=128", "R=33,C=70"],
                "f16_acc_rows" => &["R=8,C=512"],
                _ => &["M=64,N=64,K=128"],
            };
            for spec in specs {
                let symbols: BTreeMap<String, i64> = spec
                    .split(',')
                    .map(|p| {
                        let (k, v) = p.split_once('=').unwrap();
                        (k.to_string(), v.parse().unwrap())
                    })
                    .collect();
                let inputs = seeded(&func, &symbols, SEED).unwrap();
                if let Some(slot) = code.abi.seed_slot() {
                    assert_eq!(inputs[slot], Arg::Index(SEED as i64), "the run's seed in the hidden parameter");
                }
                let mut expected = inputs.clone();
                run_kernel(&func, &mut expected).unwrap_or_else(|e| panic!("{kernel}: {e}"));
                let mut actual = inputs.clone();
                if let Err(e) = emulate(&code, &mut actual) {
                    failures.push(format!("{kernel} {target} [{spec}]: {e}"));
                    continue;
                }
                for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
                    let (Arg::Tensor(e), Arg::Tensor(a)) = (e, a) else { continue };
                    let (ev, av) = (e.to_f64(), a.to_f64());
                    let exact = kernel == "policy_casts";
                    // Rounding every step in a different order: within 2·√n ulp of the
                    // f16/bf16 accumulator (n additions) at the results' magnitude.
                    let n = symbols.get("K").or(symbols.get("C")).copied().unwrap_or(1) as f64;
                    let mbits = if e.dtype == DType::BF16 { 7 } else { 10 };
                    let top = ev.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
                    let tol = 2.0 * n.sqrt() * 2f64.powi(top.log2().floor() as i32 - mbits);
                    let bad = ev
                        .iter()
                        .zip(&av)
                        .position(|(&x, &y)| if exact { !same_bits(x, y) } else { (x - y).abs() > tol });
                    if let Some(at) = bad {
                        failures.push(format!(
                            "{kernel} {target} [{spec}] parameter {i}: element {at}: interpreter {:e}, PTX {:e}",
                            ev[at], av[at]
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
