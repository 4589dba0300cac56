//! The instructions one thread or one warp executes beyond control flow: moves, loads
//! and stores, conversions, arithmetic, and the warp-collective `shfl`, `ldmatrix` and
//! `mma`.

use super::decode::{Opd, Src};
use super::execute::{bf16_to_f32, bits32, f16_to_f32, f32_to_fp8, f32of, fp8_to_f32, Cta};

impl Cta<'_> {
    pub(crate) fn pred_operand(&self, t: usize, pc: usize, i: usize) -> Result<bool, String> {
        Ok(self.src(t, pc, i)? != 0)
    }

    pub(crate) fn mov(&mut self, t: usize, pc: usize) -> Result<(), String> {
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

    pub(crate) fn memory(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
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
                self.note_generic_write(t, addr, total);
            }
        }
        Ok(())
    }

    /// `red.global.add.{f32,f64,s32,u64} [addr], x`: the element plus `x`, in one step (the
    /// emulator runs one thread at a time, so every reduction is atomic).
    pub(crate) fn reduce_global(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let (space, what, ty) = (op[1], op[2], *op.last().unwrap());
        if space != "global" || what != "add" {
            return Err(self.err(pc, format!("red.{space}.{what}")));
        }
        let eb = if matches!(ty, "f32" | "s32" | "u32") { 4 } else { 8 };
        let addr = self.addr(t, pc, 0)?;
        if !(addr as usize).is_multiple_of(eb) {
            return Err(self.err(pc, format!("red address {addr:#x} is not {eb}-byte aligned")));
        }
        let x = self.src(t, pc, 1)?;
        let dest = match self.global.find(addr, eb) {
            Ok(dest) => dest,
            Err(e) => return Err(self.err(pc, e)),
        };
        let mut old = [0u8; 8];
        old[..eb].copy_from_slice(dest);
        let old = u64::from_le_bytes(old);
        let new = match ty {
            "f32" => (f32::from_bits(old as u32) + f32::from_bits(x as u32)).to_bits() as u64,
            "f64" => (f64::from_bits(old) + f64::from_bits(x)).to_bits(),
            "s32" | "u32" => (old as u32).wrapping_add(x as u32) as u64,
            "u64" | "s64" => old.wrapping_add(x),
            other => return Err(format!("red.global.add.{other}")),
        };
        dest.copy_from_slice(&new.to_le_bytes()[..eb]);
        Ok(())
    }

    pub(crate) fn cvt(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
        let n = op.len();
        let (to, from) = (op[n - 2], op[n - 1]);
        let mode = op.get(1).copied().unwrap_or("");
        let x = self.src(t, pc, 1)?;
        // The integer rounding modes; any other modifier (`rn`, `sat`, `satfinite`, the
        // types) leaves the value to the conversion's own rounding.
        let round = |v: f64| -> f64 {
            match mode {
                "rzi" => v.trunc(),
                "rmi" => v.floor(),
                "rpi" => v.ceil(),
                "rni" => v.round_ties_even(),
                _ => v,
            }
        };
        if matches!(mode, "rz" | "rm" | "rp") {
            return Err(self.err(pc, format!("cvt.{mode}: directed rounding of a float result is not emulated")));
        }
        // ptxas takes a 64-bit register as a 32-bit source and reads its low half: an i64
        // gather index cut to 32 bits that way went unnoticed.
        if let Opd::Src(Src::Reg(r)) = &self.m.code[pc].args[1] {
            if matches!(from, "s32" | "u32" | "b32") && self.m.names[*r].starts_with("%rd") {
                return Err(self.err(pc, format!("cvt.{to}.{from} of the 64-bit register {}", self.m.names[*r])));
            }
        }
        // ptxas refuses a rounding modifier on an exact float widening (`cvt.rn.f64.f32`).
        if mode == "rn" && to == "f64" && matches!(from, "f32" | "f16" | "bf16") {
            return Err(self.err(pc, format!("cvt.rn.{to}.{from}: an exact widening takes no rounding modifier")));
        }
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

    pub(crate) fn arith(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<(), String> {
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
                let (a, b, c) = (f64::from_bits(x), f64::from_bits(y), f64::from_bits(z));
                match name {
                    "fma" => a.mul_add(b, c),
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
                    "mul" if op.contains(&"hi") && signed => ((sa as i64 * sb as i64) >> 32) as u32,
                    "mul" if op.contains(&"hi") => ((a as u64 * b as u64) >> 32) as u32,
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
                    // `mul.hi.u64`: the high half of the 128-bit product.
                    "mul" if op.contains(&"hi") && !signed => ((x as u128 * y as u128) >> 64) as i64,
                    "mul" if op.contains(&"hi") => ((sa as i128 * sb as i128) >> 64) as i64,
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
                    // The amount is a `.u32` operand, clamped to the width.
                    "shl" => sa.checked_shl(y as u32).unwrap_or(0),
                    "shr" if signed => sa >> (y as u32).min(63),
                    "shr" => x.checked_shr(y as u32).unwrap_or(0) as i64,
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

    pub(crate) fn shfl(&mut self, pc: usize, lanes: &[usize]) -> Result<(), String> {
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

    pub(crate) fn ldmatrix(&mut self, pc: usize, lanes: &[usize], op: &[&str]) -> Result<(), String> {
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

    pub(crate) fn mma(&mut self, pc: usize, lanes: &[usize], op: &[&str]) -> Result<(), String> {
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
