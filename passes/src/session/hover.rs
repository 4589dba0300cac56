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
