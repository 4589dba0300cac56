//! The hovers that need a target: a kernel's estimated resources and a shared buffer's
//! size and bank-conflict verdict, under the kernel's default configuration. The
//! language server shows them; they are markdown because that is what hovers carry.

use super::{Analysis, Overrides};
use crate::target::Target;

impl Analysis<'_> {
    /// Extra markdown for the hover of a kernel: estimated registers per thread, shared
    /// memory per block and occupancy for `target` under its default configuration, from
    /// the analyses behind W0600/W0602/E0500. `None` for the CPU and for functions that do
    /// not lower.
    pub fn kernel_hover(&self, kernel: &str, target: Target) -> Option<String> {
        if !target.is_gpu() {
            return None;
        }
        let f = self.function(kernel).ok()?;
        let config = self.configure(f, None, &Overrides::default()).ok()?.config;
        let r = self.resources(f, &config, target).ok()?;
        // Under warp specialization the peak is a consumer thread's, and their `setmaxnreg`
        // count (not the target's 255) is what it must fit.
        let registers = match r.consumer_registers {
            Some(limit) => {
                format!("~{} registers per consumer thread (estimate; setmaxnreg gives them {limit})", r.registers.peak)
            }
            None => format!("~{} registers/thread (estimate)", r.registers.peak),
        };
        let mut md = format!(
            "**On {target}** ({config}): {registers}, {} shared memory, {} threads",
            crate::units::bytes(r.smem_bytes),
            r.threads
        );
        if let Some(o) = &r.occupancy {
            let limiters: Vec<&str> = o.limiters().iter().map(|l| l.name()).collect();
            md.push_str(&format!(
                "; occupancy {:.1}% ({} block{} of {} warps per SM, limited by {})",
                o.fraction() * 100.0,
                o.blocks,
                if o.blocks == 1 { "" } else { "s" },
                o.warps_per_block,
                limiters.join(" and ")
            ));
        }
        if !r.registers.largest.is_empty() {
            let largest: Vec<String> =
                r.registers.largest.iter().map(|v| format!("`{}` {} regs", v.name, v.registers)).collect();
            md.push_str(&format!("\n\nLargest live values at the peak: {}", largest.join(", ")));
        }
        Some(md)
    }

    /// Extra markdown for the hover of a `tile.dot` call of `kernel` (`at`: an absolute
    /// offset inside the call): the instructions the hardware runs it as on `target`
    /// under the kernel's default configuration, read from its Tile IR (`wgmma`,
    /// `mma.sync` or FMAs, and why FMAs). `None` for the CPU, a kernel that does not
    /// lower, and a call no dot of the Tile IR comes from.
    pub fn dot_hover(&self, kernel: &str, at: u32, target: Target) -> Option<String> {
        if !target.is_gpu() {
            return None;
        }
        let f = self.function(kernel).ok()?;
        let config = self.configure(f, None, &Overrides::default()).ok()?.config;
        let tile = self.tile_ir(f, &config, target).ok()?;
        let dot = tile
            .walk()
            .into_iter()
            .filter(|&id| tile.op(id).kind == crate::ir::OpKind::Dot)
            .filter_map(|id| Some((id, self.absolute(&tile.op(id).loc)?)))
            .filter(|(_, r)| r.start <= at && at < r.end)
            .min_by_key(|(_, r)| r.end - r.start)?
            .0;
        Some(format!("**On {target}** ({config}): {}", dot_instructions(&tile, dot)?))
    }

    /// Extra markdown for the hover of a shared-memory buffer (`buffer`, a local of
    /// `kernel`): its size and bank-conflict verdict on `target` (W0601's analysis).
    pub fn buffer_hover(&self, kernel: &str, buffer: &str, target: Target) -> Option<String> {
        if !target.is_gpu() {
            return None;
        }
        let f = self.function(kernel).ok()?;
        let config = self.configure(f, None, &Overrides::default()).ok()?.config;
        let r = self.resources(f, &config, target).ok()?;
        let conflicts = self.bank_conflicts(f, &config, target).ok()?;
        let used = r.buffers.iter().find(|b| b.name == buffer)?;
        let mut md = format!("**On {target}**: {} (all pipeline stages)", crate::units::bytes(used.bytes));
        match conflicts.iter().find(|c| c.buffer == buffer) {
            Some(c) => {
                md.push_str(&format!("; **{}-way bank conflict** on {}", c.ways, c.access));
                match &c.fix {
                    Some(crate::analysis::BankFix::Swizzle) => md.push_str(" — `swizzle=\"xor\"` removes it"),
                    Some(crate::analysis::BankFix::Pad(p)) => md.push_str(&format!(" — `pad={p}` removes it")),
                    None => {}
                }
            }
            None => md.push_str("; every access is free of bank conflicts"),
        }
        Some(md)
    }

    /// Extra markdown for the hover of a tensor `value` of the sharded graph function
    /// `function`: its layout on the mesh, its global shape and the shape each device
    /// holds (sharding propagation's answer for the value's last definition). `None`
    /// when the function is not sharded.
    pub fn sharding_hover(&self, function: &str, value: &str) -> Option<String> {
        let f = self.function(function).ok()?;
        let program = crate::dist::function::sharded_program(self.db, f.key, &Default::default()).ok()??;
        let graph = crate::queries::graph_ir(self.db, f.key).clone().ok()?;
        // The value's last definition: SSA names repeat as `h`, `h_1`, ... in order.
        let v = graph
            .values
            .iter()
            .enumerate()
            .filter(|(_, info)| {
                info.name.as_deref().is_some_and(|n| {
                    n == value
                        || n.strip_prefix(value)
                            .and_then(|r| r.strip_prefix('_'))
                            .is_some_and(|r| r.parse::<u32>().is_ok())
                })
            })
            .map(|(i, _)| crate::ir::ValueId(i as u32))
            .next_back()?;
        let s = program.propagation.sharding(v)?;
        let crate::ir::Type::Tensor(t) = graph.ty(v) else { return None };
        let mesh: Vec<String> = program.mesh.0.iter().map(|(a, n)| format!("{a}={n}")).collect();
        let (global, local) = program.mesh.shapes(&t.dims, s);
        let mut md = format!(
            "**Sharded** on the mesh ({}): layout `{}`\n\nglobal `{global}`, each device holds `{local}`",
            mesh.join(", "),
            s.describe(),
        );
        if !s.partial.is_empty() {
            md.push_str(" (a partial sum: an all-reduce completes it)");
        }
        Some(md)
    }
}

/// What the hardware runs the Tile IR dot `dot` as (markdown, one paragraph).
fn dot_instructions(f: &crate::ir::Func, dot: crate::ir::OpId) -> Option<String> {
    use tessera_frontend::check::DType;
    let op = f.op(dot);
    let (a, b, c) = (f.ty(op.operands[0]), f.ty(op.operands[1]), f.ty(op.operands[2]));
    let (at, bt, ct) = (a.dtype()?, b.dtype()?, c.dtype()?);
    let (ad, cd) = (a.const_dims()?, c.const_dims()?);
    let (m, n, k) = (*cd.first()?, *cd.get(1)?, *ad.get(1)?);
    // The K of one instruction, as instruction selection chose it.
    let k_step = match op.str_attr("instr") {
        Some("wgmma") => crate::wgmma::k_step(at),
        _ => crate::sched::mma_sync_k(at),
    };
    let shape = format!("{m}×{n}×{k} ({at} × {bt} → {ct})");
    Some(match op.str_attr("instr")? {
        "wgmma" => {
            let groups = op.int_attr("warpgroups").unwrap_or(1).max(1);
            let across_n = op.int_attr(crate::wgmma::ACROSS_N).unwrap_or(1).max(1);
            let (rows, cols) = (m / (groups / across_n).max(1), n / across_n);
            let instructions = (rows / crate::wgmma::WGMMA_M).max(1) * (k / k_step).max(1);
            let sass = match at {
                DType::Int8 => "IGMMA",
                d if d.is_fp8() => "QGMMA",
                _ => "HGMMA",
            };
            let a_from = if op.attr(crate::wgmma::A_IN_REGISTERS).is_some() {
                "A in registers (the accumulator's fragment layout)"
            } else if op.attr(crate::wgmma::A_M_MAJOR).is_some() {
                "A from shared memory through a matrix descriptor (M-major)"
            } else {
                "A from shared memory through a matrix descriptor (K-major)"
            };
            let b_major = if op.attr(crate::wgmma::B_K_MAJOR).is_some() { "K-major" } else { "N-major" };
            let mut text = format!(
                "{shape} as Hopper warpgroup MMAs: `wgmma.mma_async.m64n{cols}k{k_step}.{}.{}.{}` (`{sass}` in SASS), \
                 {groups} warpgroup{} each computing {rows}×{cols}, {instructions} instruction{} per warpgroup; {a_from}, \
                 B from shared memory ({b_major})",
                if ct == DType::I32 { "s32" } else { "f32" },
                crate::ptx::wgmma::operand_type(at)?,
                crate::ptx::wgmma::operand_type(bt)?,
                if groups == 1 { "" } else { "s" },
                if instructions == 1 { "" } else { "s" },
            );
            if at.is_fp8() {
                text.push_str(&format!(
                    "; fp8 sums are added into the {ct} accumulator every {} of K (promotion)",
                    crate::wgmma::FP8_PROMOTION_K
                ));
            }
            text
        }
        "fma" => {
            let why = if at.bits() > 16 || bt.bits() > 16 {
                format!("tensor cores take 16- and 8-bit operands, these are {at}")
            } else {
                format!(
                    "M = {m}, N = {n}, K = {k} are not multiples of the tensor-core instruction's 16 × 8 × {k_step}"
                )
            };
            format!("{shape} as FMAs on the CUDA cores, not tensor cores: {why}")
        }
        instr => {
            let warps = match op.attr("warps") {
                Some(crate::ir::Attr::Ints(w)) => w.clone(),
                _ => Vec::new(),
            };
            let (wm, wn) = (warps.first().copied().unwrap_or(1).max(1), warps.get(1).copied().unwrap_or(1).max(1));
            let per_warp = (m / wm / 16).max(1) * (n / wn / 8).max(1) * (k / k_step).max(1);
            let sass = if ct == DType::I32 { "IMMA" } else { "HMMA" };
            format!(
                "{shape} as warp MMAs: `mma.sync.aligned.{instr}` (`{sass}` in SASS) on {wm}×{wn} warps, {per_warp} per \
                 warp"
            )
        }
    })
}
