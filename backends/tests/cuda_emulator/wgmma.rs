//! Hopper's warpgroup MMA as the PTX ISA defines it ("Asynchronous Warpgroup Level
//! Matrix Multiply-Accumulate Instructions"), for the subset the code generator emits:
//! `wgmma.fence`, `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}` with
//! B in shared memory and A in shared memory or in registers (the A fragment: register
//! j of lane l in warp w % 4 holds row 16 (w % 4) + l / 4 + 8 (j % 2), columns
//! 2 (l % 4) + 8 (j / 2) and the next, the lower column in the low half),
//! `wgmma.commit_group`, `wgmma.wait_group`.
//!
//! Written from the ISA, not from `passes::ptx::wgmma` (they share no code):
//!
//! - The four instructions are warpgroup-collective: a warp waits at one until the other
//!   three warps of its warpgroup (threads `128 g .. 128 g + 127`) reach the same one.
//! - A matrix descriptor is decoded field by field (start address, LBO, SBO >> 4 in bits
//!   0–13, 16–29, 32–45; base offset 49–51; swizzle mode 62–63), and each element's
//!   shared address follows the canonical layouts: K-major (`imm-trans = 0`) rows of 8
//!   elements-per-16-bytes "core matrices" with 8-row groups `SBO` apart and, without
//!   swizzle, the second 16-byte column `LBO` away (with a swizzle, rows are the swizzle
//!   width and LBO is unused); MN-major (`imm-trans = 1`) 16-byte chunks along M/N
//!   (the swizzle width's worth contiguous, further blocks `LBO` apart; without swizzle,
//!   each chunk's 8 K rows are 16 bytes apart and the next chunk `SBO` away) with 8-row
//!   K groups `SBO` apart (without swizzle: `LBO`). The swizzle (32/64/128 bytes:
//!   `Swizzle<1|2|3, 4, 3>`) XORs address bits 4.. with bits 7.. of the shared address.
//! - The accumulator fragment: register `i` of lane `l` in warp `w % 4` of the warpgroup
//!   is row `16 (w % 4) + l / 4 + 8 ((i / 2) % 2)`, column `8 (i / 4) + 2 (l % 4) + i % 2`.
//! - Asynchrony: the result lands in the registers at the `wgmma.wait_group` that
//!   completes its group; until then reading or writing those registers is an error. A
//!   later `wgmma` of the same warpgroup chains on the pending value (the ISA orders
//!   wgmmas on the same accumulator). The shared bytes it read must be unchanged when it
//!   completes (the hardware may read them any time until then).
//! - `wgmma.fence` must come after any other write of the accumulator registers by the
//!   thread, shared bytes written through the generic proxy (`st.shared`, landed
//!   `cp.async`) must have been followed by a `fence.proxy.async` of their writer, and no
//!   bytes a `cp.async` still in flight targets may be read (it may land any time before
//!   its wait; the emulator lands it at the wait).
//!
//! Products of 16-bit operands are exact; the k16 sum and the accumulation are done in
//! f64 and rounded once to f32 (the hardware's internal order differs; the comparison
//! with the interpreter has a tolerance). The integer form
//! (`m64nNk32.s32.{s8,u8}.{s8,u8} d, a-desc, b-desc, scale-d`, N in 8, 16, 24 or a
//! multiple of 16) sums exactly and wraps to 32 bits (no `.satfinite`).

use std::collections::{HashMap, VecDeque};

use super::decode::{Opd, Src};
use super::execute::{bf16_to_f32, bits32, f16_to_f32, f32of, fp8_to_f32, Cta, State};

/// One committed (or still open) group of `wgmma.mma_async`s of a warpgroup.
#[derive(Default)]
pub(crate) struct Group {
    /// (thread, register, f32 bits) each result writes when the group completes.
    results: Vec<(usize, usize, u64)>,
    /// Every shared byte the group's instructions read, with its value then.
    reads: Vec<(u64, u8)>,
}

/// The `wgmma` state of one warpgroup.
#[derive(Default)]
pub(crate) struct Warpgroup {
    open: Group,
    committed: VecDeque<Group>,
    /// Per (thread, register) written by pending groups: how many groups, and the
    /// newest value (what a chained wgmma accumulates onto).
    in_flight: HashMap<(usize, usize), (usize, u64)>,
}

impl Warpgroup {
    pub(crate) fn pending(&self) -> bool {
        !self.committed.is_empty() || !self.open.results.is_empty()
    }
}

/// A decoded matrix descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Descriptor {
    pub(crate) start: u64,
    pub(crate) lbo: u64,
    pub(crate) sbo: u64,
    pub(crate) base_offset: u64,
    /// 0 none, 1 128B, 2 64B, 3 32B.
    pub(crate) mode: u64,
}

impl Descriptor {
    pub(crate) fn decode(bits: u64) -> Descriptor {
        Descriptor {
            start: (bits & 0x3fff) << 4,
            lbo: ((bits >> 16) & 0x3fff) << 4,
            sbo: ((bits >> 32) & 0x3fff) << 4,
            base_offset: (bits >> 49) & 7,
            mode: bits >> 62,
        }
    }

    /// The swizzle width in bytes (None: no swizzle, the interleaved layout).
    fn width(self) -> Option<u64> {
        match self.mode {
            1 => Some(128),
            2 => Some(64),
            3 => Some(32),
            _ => None,
        }
    }

    /// The shared address of element (`mn`, `k`) of `eb`-byte elements, `k_major` as
    /// `imm-trans = 0` says (8-bit operands are always K-major).
    pub(crate) fn address(self, mn: u64, k: u64, k_major: bool, eb: u64) -> u64 {
        let unswizzled = match (k_major, self.width()) {
            // ((8, m), (T, 2)) : ((W/16 chunks, SBO), (1, 1 chunk))
            (true, Some(w)) => self.start + (mn / 8) * self.sbo + (mn % 8) * w + k * eb,
            // ((8, m), (T, 2)) : ((1 chunk, SBO), (1, LBO))
            (true, None) => self.start + (mn / 8) * self.sbo + (mn % 8) * 16 + (k * eb / 16) * self.lbo + (k * eb) % 16,
            // ((T, W/16, n), (8, k)) : ((1, 1 chunk, LBO), (W/16 chunks, SBO))
            (false, Some(w)) => {
                let x = mn * eb;
                self.start + (x / w) * self.lbo + (k / 8) * self.sbo + (k % 8) * w + x % w
            }
            // ((T, 1, n), (8, k)) : ((1, 1 chunk, SBO), (1 chunk, LBO))
            (false, None) => {
                let x = mn * eb;
                self.start + (x / 16) * self.sbo + (k / 8) * self.lbo + (k % 8) * 16 + x % 16
            }
        };
        match self.width() {
            Some(w) => {
                let bits = (w / 16).trailing_zeros();
                unswizzled ^ (((unswizzled >> 7) & ((1 << bits) - 1)) << 4)
            }
            None => unswizzled,
        }
    }
}

impl Cta<'_> {
    /// A warp reached a `wgmma` instruction: it waits for its warpgroup, and the last
    /// warp to arrive executes the instruction for all four.
    pub(crate) fn arrive_at_wgmma(&mut self, pc: usize, lanes: &[usize], warp: usize) -> Result<(), String> {
        for &t in lanes {
            self.threads[t].state = State::Warpgroup;
        }
        let group = warp / 4;
        let members: Vec<usize> = (128 * group..(128 * (group + 1)).min(self.threads.len())).collect();
        if members.len() != 128 {
            return Err(
                self.err(pc, format!("a warpgroup of {} threads (the CTA is not whole warpgroups)", members.len()))
            );
        }
        if !members.iter().all(|&t| self.threads[t].state == State::Warpgroup) {
            return Ok(());
        }
        if let Some(&t) = members.iter().find(|&&t| self.threads[t].pc != pc) {
            return Err(self.err(
                pc,
                format!("warpgroup {group} meets at different wgmma instructions (thread {t} is at another)"),
            ));
        }
        let op: Vec<String> = self.m.code[pc].op.clone();
        match op.get(1).map(String::as_str) {
            Some("fence") => {
                for &t in &members {
                    self.threads[t].wgmma_fence = Some(self.threads[t].executed);
                }
            }
            Some("commit_group") => {
                let open = std::mem::take(&mut self.warpgroups[group].open);
                self.warpgroups[group].committed.push_back(open);
            }
            Some("wait_group") => {
                let keep = self.src(members[0], pc, 0)? as usize;
                while self.warpgroups[group].committed.len() > keep {
                    let Some(done) = self.warpgroups[group].committed.pop_front() else { break };
                    self.complete_wgmma(pc, group, done)?;
                }
            }
            Some("mma_async") => self.mma_async(pc, group, &members)?,
            _ => return Err(self.err(pc, "a wgmma instruction the emulator does not know")),
        }
        for &t in &members {
            self.threads[t].state = State::Run;
            self.threads[t].pc += 1;
        }
        Ok(())
    }

    /// A group completes: its results land, and what it read must not have changed.
    fn complete_wgmma(&mut self, pc: usize, group: usize, done: Group) -> Result<(), String> {
        for &(addr, byte) in &done.reads {
            if self.smem[addr as usize] != byte {
                return Err(self.err(
                    pc,
                    format!(
                        "shared byte {addr}, read by an in-flight wgmma.mma_async, was overwritten before it completed"
                    ),
                ));
            }
        }
        for (t, r, v) in done.results {
            if self.threads[t].regs[r].is_some() {
                return Err(self.err(
                    pc,
                    format!("thread {t} wrote {} while a wgmma.mma_async writing it was in flight", self.m.names[r]),
                ));
            }
            let pending = self.warpgroups[group].in_flight.get_mut(&(t, r)).expect("a pending result is counted");
            pending.0 -= 1;
            // A newer group in flight on the register keeps it in flight.
            if pending.0 == 0 {
                self.warpgroups[group].in_flight.remove(&(t, r));
                self.threads[t].regs[r] = Some(v);
                self.threads[t].in_flight[r] = false;
            }
        }
        Ok(())
    }

    /// The value of a same-warpgroup operand every member must agree on.
    fn uniform(&self, pc: usize, members: &[usize], i: usize) -> Result<u64, String> {
        let v = self.src(members[0], pc, i)?;
        for &t in members {
            if self.src(t, pc, i)? != v {
                return Err(self.err(pc, format!("operand {i} differs across the warpgroup (thread {t})")));
            }
        }
        Ok(v)
    }

    fn mma_async(&mut self, pc: usize, group: usize, members: &[usize]) -> Result<(), String> {
        let op = self.m.code[pc].op.clone();
        // wgmma.mma_async.sync.aligned.m64nNkK.f32.atype.btype: K = 16 for f16/bf16, 32 for
        // the 8-bit e4m3/e5m2 (which take no transpose immediates: both K-major).
        let (atype, btype) = (op.get(6).cloned().unwrap_or_default(), op.get(7).cloned().unwrap_or_default());
        let eight_bit = |t: &str| matches!(t, "e4m3" | "e5m2" | "s8" | "u8");
        let integer = |t: &str| matches!(t, "s8" | "u8");
        let int = integer(&atype) && integer(&btype);
        let fp8 = eight_bit(&atype) && eight_bit(&btype) && !integer(&atype) && !integer(&btype);
        let (kk, eb): (u64, u64) = if fp8 || int { (32, 1) } else { (16, 2) };
        let shape = op.get(4).cloned().unwrap_or_default();
        let n: u64 = shape
            .strip_prefix("m64n")
            .and_then(|s| s.strip_suffix(&format!("k{kk}")))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| self.err(pc, format!("shape `{shape}` for {atype} x {btype}: m64nNk{kk}")))?;
        let accumulator = if int { "s32" } else { "f32" };
        if n == 0 || !n.is_multiple_of(8) || n > 256 || op.get(5).map(String::as_str) != Some(accumulator) {
            return Err(
                self.err(pc, format!("an m64nNkK with N a multiple of 8 up to 256 and an {accumulator} accumulator"))
            );
        }
        if int && n > 24 && !n.is_multiple_of(16) {
            return Err(self.err(pc, format!("m64n{n}k32 for integers: N is 8, 16, 24 or a multiple of 16")));
        }
        if !fp8 && !int && (eight_bit(&atype) || eight_bit(&btype) || atype != btype) {
            return Err(self.err(pc, format!("operand types {atype} x {btype}")));
        }
        let elem = |bits: u64, ty: &str| -> Result<f64, String> {
            match ty {
                "bf16" => Ok(bf16_to_f32(bits) as f64),
                "f16" => Ok(f16_to_f32(bits) as f64),
                "e4m3" => Ok(fp8_to_f32(bits & 0xff, true) as f64),
                "e5m2" => Ok(fp8_to_f32(bits & 0xff, false) as f64),
                "s8" => Ok((bits & 0xff) as u8 as i8 as f64),
                "u8" => Ok((bits & 0xff) as f64),
                other => Err(format!("operand type {other}")),
            }
        };
        let args = self.m.code[pc].args.clone();
        let d = match &args[0] {
            Opd::Vec(v) if v.len() as u64 == n / 2 => v.clone(),
            _ => return Err(self.err(pc, format!("m64n{n} has {} {accumulator} accumulator registers", n / 2))),
        };
        // A is a descriptor, or four b32 registers per thread (the A fragment): then the
        // immediates are imm-scale-a, imm-scale-b and imm-trans-b only.
        enum A {
            Descriptor(Descriptor),
            Fragment(Vec<Src>),
        }
        let a_operand = match &args[1] {
            Opd::Vec(v) if v.len() == 4 => A::Fragment(v.clone()),
            Opd::Vec(v) => return Err(self.err(pc, format!("an A fragment of {} registers (m64nNk16 has 4)", v.len()))),
            _ => A::Descriptor(Descriptor::decode(self.uniform(pc, members, 1)?)),
        };
        let db = Descriptor::decode(self.uniform(pc, members, 2)?);
        let scale_d = self.uniform(pc, members, 3)? != 0;
        let imm = |i: usize| match args.get(i) {
            Some(Opd::Src(Src::Imm(v))) => Some(*v as i64),
            _ => None,
        };
        let imms = match a_operand {
            A::Fragment(_) if fp8 || int => {
                return Err(self.err(pc, "an 8-bit wgmma with A in registers is not emulated"))
            }
            A::Fragment(_) => (imm(4), imm(5), Some(0), imm(6), args.len() == 7),
            // The integer form has no immediates: no scaling, both operands K-major.
            A::Descriptor(_) if int => (Some(1), Some(1), Some(0), Some(0), args.len() == 4),
            A::Descriptor(_) if fp8 => (imm(4), imm(5), Some(0), Some(0), args.len() == 6),
            A::Descriptor(_) => (imm(4), imm(5), imm(6), imm(7), args.len() == 8),
        };
        let (scale_a, scale_b, trans_a, trans_b) = match imms {
            (Some(sa), Some(sb), Some(ta), Some(tb), true)
                if [1, -1].contains(&sa) && [1, -1].contains(&sb) && ta & !1 == 0 && tb & !1 == 0 =>
            {
                (sa as f64, sb as f64, ta == 1, tb == 1)
            }
            _ => {
                return Err(self.err(
                    pc,
                    "imm-scale-a/b must be 1 or -1 and imm-trans-a/b 0 or 1 (no imm-trans-a with A in registers)",
                ))
            }
        };
        let da = match &a_operand {
            A::Descriptor(d) => Some(*d),
            A::Fragment(_) => None,
        };
        for (name, desc) in [("A", da), ("B", Some(db))] {
            if let Some(desc) = desc.filter(|d| d.base_offset != 0) {
                return Err(self.err(pc, format!("{name}'s descriptor has base offset {}", desc.base_offset)));
            }
        }
        // The operands, element by element from shared memory.
        let mut reads = Vec::new();
        let landing = self.chunks_of_copies_in_flight();
        let mut load = |s: &mut Self, addr: u64, ty: &str| -> Result<f64, String> {
            if landing.contains(&(addr / 16)) {
                return Err(
                    s.err(pc, format!("wgmma reads shared byte {addr}, which a cp.async in flight may still write"))
                );
            }
            if let Some(&writer) = s.unfenced.get(&(addr / 16)) {
                return Err(s.err(
                    pc,
                    format!(
                        "wgmma reads shared byte {addr}, which thread {writer} wrote through the generic proxy with \
                         no fence.proxy.async after it"
                    ),
                ));
            }
            let bytes = s.smem(addr, eb as usize, eb as usize, pc)?.to_vec();
            let mut bits = 0u64;
            for (i, &byte) in bytes.iter().enumerate() {
                reads.push((addr + i as u64, byte));
                bits |= (byte as u64) << (8 * i);
            }
            elem(bits, ty).map_err(|e| s.err(pc, e))
        };
        let mut a = vec![vec![0f64; kk as usize]; 64];
        match &a_operand {
            A::Descriptor(da) => {
                for (m, row) in a.iter_mut().enumerate() {
                    for (k, x) in row.iter_mut().enumerate() {
                        *x = scale_a * load(self, da.address(m as u64, k as u64, !trans_a, eb), &atype)?;
                    }
                }
            }
            A::Fragment(regs) => {
                // Register j of lane l in warp w % 4: rows 16 (w % 4) + l / 4 (+ 8 for j
                // odd), columns 2 (l % 4) (+ 8 for j ≥ 2) and the next, low half first.
                for (m_idx, &t) in members.iter().enumerate() {
                    let (w, l) = (m_idx / 32, m_idx % 32);
                    let fence = self.threads[t].wgmma_fence;
                    for (j, src) in regs.iter().enumerate() {
                        let Src::Reg(r) = src else {
                            return Err(self.err(pc, "an A fragment operand is not a register"));
                        };
                        if fence.is_none_or(|f| self.threads[t].written[*r] > f) {
                            return Err(self.err(
                                pc,
                                format!(
                                    "thread {t} wrote {} after the last wgmma.fence; the wgmma needs one",
                                    self.m.names[*r]
                                ),
                            ));
                        }
                        let word = self.read(t, src, pc)?;
                        let row = 16 * w + l / 4 + 8 * (j % 2);
                        for half in 0..2 {
                            let k = 2 * (l % 4) + 8 * (j / 2) + half;
                            let bits = (word >> (16 * half)) & 0xffff;
                            a[row][k] = scale_a * elem(bits, &atype).map_err(|e| self.err(pc, e))?;
                        }
                    }
                }
            }
        }
        let mut b = vec![vec![0f64; n as usize]; kk as usize];
        for (k, row) in b.iter_mut().enumerate() {
            for (col, x) in row.iter_mut().enumerate() {
                *x = scale_b * load(self, db.address(col as u64, k as u64, !trans_b, eb), &btype)?;
            }
        }
        // The accumulator: each member's registers, or the pending value of an earlier
        // wgmma of this warpgroup on the same register.
        let mut results = Vec::with_capacity(members.len() * d.len());
        for (m_idx, &t) in members.iter().enumerate() {
            let (w, l) = ((m_idx / 32) as u64, (m_idx % 32) as u64);
            let Some(fence) = self.threads[t].wgmma_fence else {
                return Err(self.err(pc, format!("thread {t} issues wgmma.mma_async with no wgmma.fence before it")));
            };
            for (i, s) in d.iter().enumerate() {
                let Src::Reg(r) = s else { return Err(self.err(pc, "an accumulator operand is not a register")) };
                let r = *r;
                if self.threads[t].written[r] > fence {
                    return Err(self.err(
                        pc,
                        format!("thread {t} wrote {} after the last wgmma.fence; the wgmma needs one", self.m.names[r]),
                    ));
                }
                let i = i as u64;
                let row = (16 * w + l / 4 + 8 * ((i / 2) % 2)) as usize;
                let col = (8 * (i / 4) + 2 * (l % 4) + i % 2) as usize;
                let previous = if scale_d { Some(self.pending_or_register(pc, group, t, r)?) } else { None };
                // Exact: 32 products of 8-bit integers, or of 16-bit floats, fit f64.
                let sum: f64 = (0..kk as usize).map(|k| a[row][k] * b[k][col]).sum();
                let bits = if int {
                    let before = previous.map_or(0, |v| v as u32 as i32);
                    before.wrapping_add(sum as i64 as i32) as u32 as u64
                } else {
                    bits32((previous.map_or(0.0, |v| f32of(v) as f64) + sum) as f32)
                };
                results.push((t, r, bits));
            }
        }
        for &(t, r, v) in &results {
            self.threads[t].regs[r] = None;
            self.threads[t].in_flight[r] = true;
            let pending = self.warpgroups[group].in_flight.entry((t, r)).or_insert((0, 0));
            *pending = (pending.0 + 1, v);
        }
        let open = &mut self.warpgroups[group].open;
        open.results.extend(results);
        open.reads.extend(reads);
        Ok(())
    }

    /// A shared byte in `lo..hi` that an in-flight `wgmma.mma_async` of any warpgroup
    /// still reads: the hardware may read it any time until the group completes, so a
    /// copy into it is a write-after-read race whenever the copy lands.
    pub(crate) fn wgmma_reading(&self, lo: u64, hi: u64) -> Option<u64> {
        self.warpgroups
            .iter()
            .flat_map(|w| std::iter::once(&w.open).chain(w.committed.iter()))
            .flat_map(|g| g.reads.iter())
            .map(|&(addr, _)| addr)
            .find(|addr| (lo..hi).contains(addr))
    }

    /// The accumulator input of thread `t`'s register `r`: the newest pending result of
    /// this warpgroup for it, else the register.
    fn pending_or_register(&self, pc: usize, group: usize, t: usize, r: usize) -> Result<u64, String> {
        match self.warpgroups[group].in_flight.get(&(t, r)) {
            Some(&(_, newest)) => Ok(newest),
            None => self.read(t, &Src::Reg(r), pc),
        }
    }
}
