//! Execution: memory, threads and one CTA stepping warp by warp (barriers, predicates,
//! asynchronous copies), and `emulate`, which runs a kernel's whole grid.

use std::collections::HashMap;

use tessera_backends::cuda::args::{check_args, pack};
use tessera_backends::tensor::{round_to_saturating, Arg, HostTensor};
use tessera_frontend::check::DType;
use tessera_passes::codegen::TargetCode;

use super::decode::{parse, Module, Opd, Src};

// ----- memory ------------------------------------------------------------------------

/// Global memory: one buffer per tensor at a distinct, 256-byte aligned address.
#[derive(Default)]
pub(crate) struct Global {
    buffers: Vec<(u64, Vec<u8>)>,
}

impl Global {
    pub(crate) fn find(&mut self, addr: u64, len: usize) -> Result<&mut [u8], String> {
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
pub(crate) enum State {
    Run,
    Barrier,
    /// At a warpgroup-collective `wgmma` instruction, until the warpgroup's other warps
    /// reach it (`wgmma::Warpgroup`).
    Warpgroup,
    /// At `barrier.cluster.wait`, until every thread of the cluster has arrived as often
    /// as this one (`super::cluster`).
    ClusterWait,
    Done,
}

struct Copy {
    dst: u64,
    src: u64,
    size: usize,
    valid: usize,
}

pub(crate) struct Thread {
    pub(crate) regs: Vec<Option<u64>>,
    pub(crate) pc: usize,
    pub(crate) state: State,
    open: Vec<Copy>,
    groups: Vec<Vec<Copy>>,
    /// Instructions this thread executed (the clock of `written`).
    pub(crate) executed: u64,
    /// When each register was last written by an instruction of this thread (not by a
    /// `wgmma` landing its result): `wgmma.fence` must come after it.
    pub(crate) written: Vec<u64>,
    /// `executed` at this thread's last `wgmma.fence` (None: never).
    pub(crate) wgmma_fence: Option<u64>,
    /// Registers an in-flight `wgmma.mma_async` writes (their value is absent until the
    /// `wgmma.wait_group` that completes it).
    pub(crate) in_flight: Vec<bool>,
    /// The named barrier this thread waits at (`State::Barrier`).
    barrier: u64,
    /// This thread's `barrier.cluster.arrive`s.
    pub(crate) cluster_arrivals: u64,
}

impl Thread {
    fn new(regs: usize) -> Thread {
        Thread {
            regs: vec![None; regs],
            pc: 0,
            state: State::Run,
            open: Vec::new(),
            groups: Vec::new(),
            executed: 0,
            written: vec![0; regs],
            wgmma_fence: None,
            in_flight: vec![false; regs],
            barrier: 0,
            cluster_arrivals: 0,
        }
    }
}

pub(crate) struct Cta<'a> {
    pub(crate) m: &'a Module,
    pub(crate) threads: Vec<Thread>,
    pub(crate) smem: Vec<u8>,
    /// The `wgmma` state of each warpgroup (asynchronous groups and their reads).
    pub(crate) warpgroups: Vec<super::wgmma::Warpgroup>,
    /// 16-byte chunks of shared memory written by the generic proxy (`st.shared`, a
    /// landed `cp.async`) and not yet followed by a `fence.proxy.async` of the writing
    /// thread: the async proxy (`wgmma`) must not read them.
    pub(crate) unfenced: HashMap<u64, usize>,
    /// The grid's global memory, while this program runs (a cluster's programs take
    /// turns holding it: `super::cluster`).
    pub(crate) global: Global,
    params: &'a HashMap<String, u64>,
    /// Tensor maps by the generic address of their parameter (`super::tma`).
    pub(crate) tensor_maps: &'a HashMap<u64, super::tma::TensorMap>,
    /// mbarriers by shared address, and TMA box copies not landed yet.
    pub(crate) mbarriers: HashMap<u64, super::tma::Mbarrier>,
    pub(crate) box_copies: Vec<super::tma::BoxCopy>,
    /// Each thread's TMA stores not read out of shared memory yet.
    pub(crate) bulk_stores: HashMap<usize, super::tma::BulkStores>,
    /// Each warp's registers per thread: what `ptxas` allocates at entry for one CTA per
    /// SM (65536 / threads, in steps of 8), then what `setmaxnreg` sets.
    pub(crate) warp_registers: Vec<u32>,
    /// Threads that have arrived at a named barrier with `bar.arrive` (without waiting)
    /// since it last completed, by barrier.
    arrivals: HashMap<u64, usize>,
    pub(crate) ctaid: [u64; 3],
    pub(crate) nctaid: [u64; 3],
    /// Its position in its cluster and the cluster's shape (`[1, 1, 1]`: none).
    pub(crate) cluster_pos: [u64; 3],
    pub(crate) cluster_dims: [u64; 3],
    /// What it did to other programs of its cluster this round, delivered after it
    /// (`super::cluster::Remote`).
    pub(crate) outbox: Vec<super::cluster::Remote>,
    pub(crate) steps: u64,
}

pub(crate) fn f32of(v: u64) -> f32 {
    f32::from_bits(v as u32)
}
pub(crate) fn bits32(x: f32) -> u64 {
    x.to_bits() as u64
}
pub(crate) fn bf16_to_f32(h: u64) -> f32 {
    f32::from_bits(((h as u32) & 0xffff) << 16)
}
pub(crate) fn f16_to_f32(h: u64) -> f32 {
    half::f16::from_bits(h as u16).to_f32()
}
pub(crate) fn fp8_to_f32(byte: u64, e4m3: bool) -> f32 {
    let dtype = if e4m3 { DType::Fp8E4m3 } else { DType::Fp8E5m2 };
    HostTensor { dtype, dims: vec![1], data: vec![byte as u8] }.get(0) as f32
}
/// `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`: round to nearest even, clamped to the largest
/// finite value (Inf too), NaN kept.
pub(crate) fn f32_to_fp8(x: f32, e4m3: bool) -> u64 {
    let dtype = if e4m3 { DType::Fp8E4m3 } else { DType::Fp8E5m2 };
    let mut t = HostTensor::zeros(dtype, &[1]);
    t.set(0, round_to_saturating(dtype, x as f64));
    t.data[0] as u64
}

impl Cta<'_> {
    pub(crate) fn err(&self, pc: usize, message: impl std::fmt::Display) -> String {
        let ins = &self.m.code[pc];
        format!("PTX line {} (`{}`): {message}", ins.line, ins.op.join("."))
    }

    pub(crate) fn read(&self, t: usize, s: &Src, pc: usize) -> Result<u64, String> {
        Ok(match s {
            Src::Reg(r) if self.threads[t].in_flight[*r] => {
                return Err(self.err(
                    pc,
                    format!(
                        "thread {t} reads {} while the wgmma.mma_async that writes it is in flight (before its \
                         wgmma.wait_group)",
                        self.m.names[*r]
                    ),
                ))
            }
            Src::Reg(r) => self.threads[t].regs[*r]
                .ok_or_else(|| self.err(pc, format!("thread {t} reads {} before any write", self.m.names[*r])))?,
            Src::Not(r) => (self.read(t, &Src::Reg(*r), pc)? == 0) as u64,
            Src::Imm(v) => *v,
            Src::Smem => 0,
            Src::Param(name) => {
                *self.params.get(name).ok_or_else(|| self.err(pc, format!("`{name}` is not a parameter")))?
            }
            Src::Special(name) => match *name {
                "tid" => t as u64,
                "ctaid.x" => self.ctaid[0],
                "ctaid.y" => self.ctaid[1],
                "ctaid.z" => self.ctaid[2],
                "nctaid.x" => self.nctaid[0],
                "nctaid.y" => self.nctaid[1],
                "nctaid.z" => self.nctaid[2],
                "cluster_ctaid.x" => self.cluster_pos[0],
                "cluster_ctaid.y" => self.cluster_pos[1],
                "cluster_ctaid.z" => self.cluster_pos[2],
                "cluster_nctaid.x" => self.cluster_dims[0],
                "cluster_nctaid.y" => self.cluster_dims[1],
                "cluster_nctaid.z" => self.cluster_dims[2],
                "cluster_ctarank" => self.cluster_rank(),
                "laneid" => t as u64 % 32,
                other => return Err(self.err(pc, format!("special register %{other}"))),
            },
        })
    }

    pub(crate) fn src(&self, t: usize, pc: usize, i: usize) -> Result<u64, String> {
        match &self.m.code[pc].args[i] {
            Opd::Src(s) => self.read(t, s, pc),
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not a value"))),
        }
    }

    pub(crate) fn dst(&self, pc: usize, i: usize) -> Result<usize, String> {
        match &self.m.code[pc].args[i] {
            Opd::Src(Src::Reg(r)) => Ok(*r),
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not a register"))),
        }
    }

    pub(crate) fn addr(&self, t: usize, pc: usize, i: usize) -> Result<u64, String> {
        match &self.m.code[pc].args[i] {
            Opd::Mem { base: Some(r), offset, .. } => Ok(self.read(t, &Src::Reg(*r), pc)?.wrapping_add(*offset as u64)),
            Opd::Mem { param: Some(p), .. } => {
                self.params.get(p).copied().ok_or_else(|| self.err(pc, format!("no parameter {p}")))
            }
            other => Err(self.err(pc, format!("operand {i} is {other:?}, not an address"))),
        }
    }

    pub(crate) fn set(&mut self, t: usize, r: usize, v: u64) {
        let thread = &mut self.threads[t];
        thread.regs[r] = Some(v);
        thread.written[r] = thread.executed;
    }

    /// The 16-byte shared chunks that issued, not yet landed `cp.async`s of any thread
    /// write: they may land at any moment until their `cp.async.wait_group`.
    pub(crate) fn chunks_of_copies_in_flight(&self) -> std::collections::HashSet<u64> {
        let mut out = std::collections::HashSet::new();
        for t in &self.threads {
            for c in t.open.iter().chain(t.groups.iter().flatten()) {
                out.extend(c.dst / 16..(c.dst + c.size as u64).div_ceil(16));
            }
        }
        // A TMA box covers its whole range (its swizzle permutes chunks inside it).
        for c in &self.box_copies {
            out.extend(c.dst / 16..(c.dst + c.bytes).div_ceil(16));
        }
        out
    }

    /// A generic-proxy write of shared bytes by thread `t` (see `unfenced`).
    pub(crate) fn note_generic_write(&mut self, t: usize, addr: u64, len: usize) {
        for chunk in addr / 16..(addr + len as u64).div_ceil(16) {
            self.unfenced.insert(chunk, t);
        }
    }

    pub(crate) fn smem(&mut self, addr: u64, len: usize, align: usize, pc: usize) -> Result<&mut [u8], String> {
        if !(addr as usize).is_multiple_of(align) {
            return Err(self.err(pc, format!("shared address {addr} is not {align}-byte aligned")));
        }
        if addr as usize + len > self.smem.len() {
            return Err(self.err(pc, format!("shared access {addr}+{len} past {} bytes", self.smem.len())));
        }
        Ok(&mut self.smem[addr as usize..addr as usize + len])
    }

    /// Each warp with a running thread executes one instruction; whether any did.
    pub(crate) fn round(&mut self) -> Result<bool, String> {
        let warps = self.threads.len().div_ceil(32);
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
        Ok(progressed)
    }

    /// A program whose warps can no longer progress: done, or why it is stuck.
    pub(crate) fn stalled(&self) -> Result<(), String> {
        if let Some(t) = self.threads.iter().position(|t| t.state == State::Warpgroup) {
            return Err(format!(
                "thread {t} waits at a warpgroup-collective wgmma instruction (PTX line {}) that the rest of \
                 its warpgroup never reaches",
                self.m.code[self.threads[t].pc].line
            ));
        }
        // A barrier completes when its last thread arrives (`bar`): one still
        // waiting now waits for threads that never come.
        let waiting: Vec<usize> =
            (0..self.threads.len()).filter(|&t| self.threads[t].state == State::Barrier).collect();
        let Some(&first) = waiting.first() else {
            // A barrier left with arrivals nobody waited for is a protocol error
            // (its next use would complete early).
            if let Some((id, n)) = self.arrivals.iter().find(|&(_, &n)| n > 0) {
                return Err(format!("the kernel ends with {n} arrivals at barrier {id} that no thread waited for"));
            }
            return Ok(());
        };
        Err(format!(
            "{} threads wait at barrier {} (PTX line {}) that {} other threads never reach",
            waiting.len(),
            self.threads[first].barrier,
            self.m.code[self.threads[first].pc].line,
            self.threads.len() - waiting.len()
        ))
    }

    /// `bar.sync id[, count]` by a warp's lanes `on`: they wait at barrier `id` until
    /// `count` threads (all of the CTA without a count) have arrived, then all go on.
    /// `bar.arrive id, count`: they count towards the barrier without waiting.
    /// Without a count, a thread that has exited can never arrive: that is an error here
    /// (hardware behaviour is not something to rely on), so a kernel whose producer
    /// exits synchronizes the rest with a named barrier and a count.
    fn arrive_at_barrier(&mut self, pc: usize, on: &[usize], op: &[&str]) -> Result<(), String> {
        let t0 = on[0];
        let wait = match op.get(1) {
            Some(&"sync") => true,
            Some(&"arrive") => false,
            other => return Err(self.err(pc, format!("bar.{other:?} is not emulated"))),
        };
        let id = self.src(t0, pc, 0)?;
        let count = match self.m.code[pc].args.len() {
            1 if !wait => return Err(self.err(pc, "bar.arrive without a thread count")),
            1 => {
                if let Some(t) = self.threads.iter().position(|t| t.state == State::Done) {
                    return Err(self.err(pc, format!("a CTA-wide barrier after thread {t} has exited")));
                }
                self.threads.len()
            }
            _ => self.src(t0, pc, 1)? as usize,
        };
        if count == 0 || !count.is_multiple_of(32) {
            return Err(self.err(pc, format!("a barrier count of {count} threads is not whole warps")));
        }
        if wait {
            for &t in on {
                self.threads[t].state = State::Barrier;
                self.threads[t].barrier = id;
            }
        } else {
            *self.arrivals.entry(id).or_insert(0) += on.len();
            for &t in on {
                self.threads[t].pc += 1;
            }
        }
        let waiting: Vec<usize> = (0..self.threads.len())
            .filter(|&t| self.threads[t].state == State::Barrier && self.threads[t].barrier == id)
            .collect();
        let arrived = waiting.len() + self.arrivals.get(&id).copied().unwrap_or(0);
        if arrived > count {
            return Err(self.err(pc, format!("{arrived} threads arrive at barrier {id} of {count}")));
        }
        if arrived == count {
            self.arrivals.remove(&id);
            for t in waiting {
                self.threads[t].state = State::Run;
                self.threads[t].pc += 1;
            }
        }
        Ok(())
    }

    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 n` by a whole warp (lanes `on`): its
    /// registers per thread become `n` (a multiple of 8 in 24..=256). An `inc` the
    /// register file cannot hold yet waits
    /// (the warp retries) until other warps' `dec`s have given registers back.
    fn setmaxnreg(&mut self, pc: usize, on: &[usize], op: &[&str], warp: usize) -> Result<(), String> {
        let n = self.src(on[0], pc, 0)? as u32;
        if !(24..=256).contains(&n) || !n.is_multiple_of(8) {
            return Err(self.err(pc, format!("setmaxnreg {n}: not a multiple of 8 in 24..=256")));
        }
        if !matches!(op.get(1), Some(&"inc" | &"dec")) {
            return Err(self.err(pc, format!("setmaxnreg.{:?} is not emulated", op.get(1))));
        }
        let others: u32 = self.warp_registers.iter().enumerate().filter(|&(w, _)| w != warp).map(|(_, r)| r * 32).sum();
        if others + n * 32 > 65536 {
            return Ok(());
        }
        self.warp_registers[warp] = n;
        for &t in on {
            self.threads[t].pc += 1;
        }
        Ok(())
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
        for &t in &on {
            self.threads[t].executed += 1;
        }
        if op[0] == "wgmma" {
            let full = self.threads.len().min(32 * (warp + 1)) - 32 * warp;
            if on.len() != full {
                return Err(self.err(pc, format!("{} of {full} lanes execute a warpgroup-collective wgmma", on.len())));
            }
            return self.arrive_at_wgmma(pc, &on, warp);
        }
        let collective = matches!(op[0], "shfl" | "ldmatrix" | "mma" | "bar" | "setmaxnreg");
        // A warp whose predicate is off for every lane skips the instruction (a warp
        // predicated out of `bar.arrive`); part of a warp at a collective is an error.
        if collective && on.is_empty() {
            return Ok(());
        }
        if collective {
            let full = self.threads.len().min(32 * (warp + 1)) - 32 * warp;
            if on.len() != full {
                return Err(self.err(pc, format!("{} of {full} lanes execute a warp-collective instruction", on.len())));
            }
            match op[0] {
                // `bar.warp.sync -1`: the whole warp is here (checked above).
                "bar" if op.get(1) == Some(&"warp") => {}
                "bar" => return self.arrive_at_barrier(pc, &on, &op),
                "setmaxnreg" => return self.setmaxnreg(pc, &on, &op, warp),
                "shfl" => self.shfl(pc, &on)?,
                "ldmatrix" => self.ldmatrix(pc, &on, &op)?,
                _ => self.mma(pc, &on, &op)?,
            }
            // (A `bar.sync` moves its threads on when the barrier completes.)
            for &t in &on {
                self.threads[t].pc += 1;
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
                self.note_generic_write(t, c.dst, c.size);
            }
        }
        Ok(())
    }

    /// One thread executes one instruction; returns its next pc.
    fn exec(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<usize, String> {
        let ty = *op.last().unwrap();
        let a = |s: &Self, i| s.src(t, pc, i);
        match op[0] {
            "ret" | "exit" => {
                self.threads[t].state = State::Done;
                return Ok(pc);
            }
            "trap" => return Err(self.err(pc, format!("thread {t} executes trap"))),
            // `fence.proxy.async.shared::cta`: this thread's generic shared writes so
            // far are visible to the async proxy.
            "fence" if op.get(1) == Some(&"proxy") && op.get(2) == Some(&"async") => {
                self.unfenced.retain(|_, writer| *writer != t);
            }
            // `fence.mbarrier_init.release.cluster`: initializations are applied at once here.
            "fence" if op.get(1) == Some(&"mbarrier_init") => {}
            "mbarrier" => self.mbarrier_op(t, pc, op)?,
            "mapa" => self.mapa(t, pc)?,
            "barrier" if op.get(1) == Some(&"cluster") => return self.cluster_barrier(t, pc, op),
            "cp" if op.get(2) == Some(&"bulk") => self.bulk(t, pc, op)?,
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
            "red" => self.reduce_global(t, pc, op)?,
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
}

/// Runs every program of the grid; tensors are copied back into `args`.
pub(crate) fn emulate(code: &TargetCode, args: &mut [Arg]) -> Result<u64, String> {
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
    let maps = code.abi.tensor_maps.len();
    if params.slots.len() + maps != module.params.len() {
        return Err(format!(
            "{} parameter slots and {maps} tensor maps for {} PTX parameters",
            params.slots.len(),
            module.params.len()
        ));
    }
    // Tensor maps follow the slots; each parameter's "address" keys its map.
    let mut slots = params.slots.clone();
    let mut tensor_maps = HashMap::new();
    let tensor_args: Vec<(usize, &tessera_backends::tensor::HostTensor)> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            Arg::Tensor(t) => Some((i, t)),
            _ => None,
        })
        .collect();
    for (k, spec) in code.abi.tensor_maps.iter().enumerate() {
        let n =
            tensor_args.iter().position(|&(i, _)| i == spec.param).ok_or("a tensor map of a non-tensor argument")?;
        let address = 0x7e00_0000_0000 + 128 * k as u64;
        tensor_maps.insert(address, super::tma::encode(spec, pointers[n], &tensor_args[n].1.dims)?);
        slots.push(address);
    }
    let values: HashMap<String, u64> = module.params.iter().cloned().zip(slots).collect();
    let mut steps = 0;
    // Whole clusters (`cluster=(x, y)`): the programs past the grid store nothing.
    let grid = code.abi.launch_grid(binding.grid);
    let cluster = code.abi.cluster.map(|c| c.max(1) as u64);
    let [gx, gy, gz] = grid;
    for z in (0..gz).step_by(cluster[2] as usize) {
        for y in (0..gy).step_by(cluster[1] as usize) {
            for x in (0..gx).step_by(cluster[0] as usize) {
                let mut ctas = Vec::new();
                for (dz, dy, dx) in (0..cluster[2])
                    .flat_map(|dz| (0..cluster[1]).flat_map(move |dy| (0..cluster[0]).map(move |dx| (dz, dy, dx))))
                {
                    let threads = (0..code.abi.threads).map(|_| Thread::new(module.regs)).collect();
                    ctas.push(Cta {
                        m: &module,
                        threads,
                        // The shared window starts at address 0: aligned for any `.align`.
                        smem: vec![0xAB; code.smem_bytes as usize],
                        warpgroups: (0..code.abi.threads.div_ceil(128)).map(|_| Default::default()).collect(),
                        unfenced: HashMap::new(),
                        global: Global::default(),
                        params: &values,
                        tensor_maps: &tensor_maps,
                        mbarriers: HashMap::new(),
                        box_copies: Vec::new(),
                        bulk_stores: HashMap::new(),
                        arrivals: HashMap::new(),
                        warp_registers: vec![
                            (65536 / code.abi.threads.max(1)).min(255) / 8 * 8;
                            code.abi.threads.div_ceil(32) as usize
                        ],
                        ctaid: [x + dx, y + dy, z + dz],
                        nctaid: grid,
                        cluster_pos: [dx, dy, dz],
                        cluster_dims: cluster,
                        outbox: Vec::new(),
                        steps: 0,
                    });
                }
                super::cluster::run_cluster(&mut ctas, &mut global)?;
                for cta in &ctas {
                    let [x, y, z] = cta.ctaid;
                    // A committed group without copies has nothing to land.
                    if cta.threads.iter().any(|t| t.groups.iter().any(|g| !g.is_empty()) || !t.open.is_empty()) {
                        return Err(format!("program ({x}, {y}, {z}) ends with asynchronous copies still pending"));
                    }
                    if !cta.box_copies.is_empty() {
                        return Err(format!(
                            "program ({x}, {y}, {z}) ends with TMA copies that no mbarrier wait landed"
                        ));
                    }
                    if cta.bulk_stores.values().any(|s| s.pending()) {
                        return Err(format!(
                            "program ({x}, {y}, {z}) ends with TMA stores no cp.async.bulk.wait_group.read waited for"
                        ));
                    }
                    if cta.warpgroups.iter().any(|w| w.pending()) {
                        return Err(format!(
                            "program ({x}, {y}, {z}) ends with wgmma.mma_async groups still in flight"
                        ));
                    }
                    steps += cta.steps;
                }
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
