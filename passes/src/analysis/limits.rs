//! GPU limits (TARGETS.md): the one table of per-architecture facts, and occupancy as
//! CUDA's occupancy calculator computes it.

use crate::target::Target;

/// Per-architecture limits.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct GpuLimits {
    pub arch: &'static str,
    pub registers_per_sm: u32,
    pub max_registers_per_thread: u32,
    pub smem_per_sm: u32,
    /// Per-block maximum with the dynamic shared memory opt-in.
    pub smem_per_block: u32,
    pub max_warps_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub sms: Option<u32>,
}

const KB: u32 = 1024;

pub const SM80: GpuLimits = GpuLimits {
    arch: "sm_80",
    registers_per_sm: 65536,
    max_registers_per_thread: 255,
    smem_per_sm: 164 * KB,
    smem_per_block: 163 * KB,
    max_warps_per_sm: 64,
    max_blocks_per_sm: 32,
    sms: Some(108),
};
pub const SM86: GpuLimits = GpuLimits {
    arch: "sm_86",
    registers_per_sm: 65536,
    max_registers_per_thread: 255,
    smem_per_sm: 100 * KB,
    smem_per_block: 99 * KB,
    max_warps_per_sm: 48,
    max_blocks_per_sm: 16,
    sms: None,
};
pub const SM89: GpuLimits = GpuLimits {
    arch: "sm_89",
    registers_per_sm: 65536,
    max_registers_per_thread: 255,
    smem_per_sm: 100 * KB,
    smem_per_block: 99 * KB,
    max_warps_per_sm: 48,
    max_blocks_per_sm: 24,
    sms: None,
};
pub const SM90: GpuLimits = GpuLimits {
    arch: "sm_90",
    registers_per_sm: 65536,
    max_registers_per_thread: 255,
    smem_per_sm: 228 * KB,
    smem_per_block: 227 * KB,
    max_warps_per_sm: 64,
    max_blocks_per_sm: 32,
    sms: Some(132),
};

pub const WARP_SIZE: u32 = 32;
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
pub const BANKS: u32 = 32;
pub const BANK_BYTES: u32 = 4;
/// Shared memory the driver reserves per block.
pub const SMEM_RESERVED_PER_BLOCK: u32 = 1024;
pub const SMEM_ALLOCATION_UNIT: u32 = 128;
pub const REGISTER_ALLOCATION_UNIT: u32 = 256;

impl GpuLimits {
    pub fn of(target: Target) -> Option<&'static GpuLimits> {
        match target {
            Target::Sm80 => Some(&SM80),
            Target::Sm90 => Some(&SM90),
            Target::Cpu => None,
        }
    }
}

/// Which resource bounds the blocks per SM.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Limiter {
    Warps,
    Registers,
    SharedMemory,
    Blocks,
}

impl Limiter {
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Warps => "warps",
            Limiter::Registers => "registers",
            Limiter::SharedMemory => "shared memory",
            Limiter::Blocks => "blocks per SM",
        }
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Occupancy {
    /// Blocks per SM allowed by each limiter.
    pub by_warps: u32,
    pub by_registers: u32,
    pub by_smem: u32,
    pub by_blocks: u32,
    pub blocks: u32,
    pub warps_per_block: u32,
    pub max_warps_per_sm: u32,
}

impl Occupancy {
    /// Resident warps over the maximum, 0..=1.
    pub fn fraction(&self) -> f64 {
        (self.blocks * self.warps_per_block) as f64 / self.max_warps_per_sm as f64
    }

    /// The binding limiters (those equal to the resulting block count).
    pub fn limiters(&self) -> Vec<Limiter> {
        [
            (Limiter::Registers, self.by_registers),
            (Limiter::SharedMemory, self.by_smem),
            (Limiter::Warps, self.by_warps),
            (Limiter::Blocks, self.by_blocks),
        ]
        .into_iter()
        .filter(|(_, n)| *n == self.blocks)
        .map(|(l, _)| l)
        .collect()
    }
}

fn round_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

/// Occupancy of a block of `threads` threads using `registers` per thread and
/// `smem_bytes` of shared memory (TARGETS.md, "Occupancy").
pub fn occupancy(limits: &GpuLimits, threads: u32, registers: u32, smem_bytes: u64) -> Occupancy {
    let warps = threads.div_ceil(WARP_SIZE).max(1);
    let by_warps = limits.max_warps_per_sm / warps;
    let per_warp = round_up(WARP_SIZE as u64 * registers.max(1) as u64, REGISTER_ALLOCATION_UNIT as u64);
    let warps_by_registers = 4 * (16384 / per_warp.max(1));
    let by_registers = (warps_by_registers / warps as u64) as u32;
    let smem = round_up(smem_bytes + SMEM_RESERVED_PER_BLOCK as u64, SMEM_ALLOCATION_UNIT as u64);
    let by_smem = (limits.smem_per_sm as u64 / smem) as u32;
    let by_blocks = limits.max_blocks_per_sm;
    let blocks = by_warps.min(by_registers).min(by_smem).min(by_blocks);
    Occupancy {
        by_warps,
        by_registers,
        by_smem,
        by_blocks,
        blocks,
        warps_per_block: warps,
        max_warps_per_sm: limits.max_warps_per_sm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_example_of_targets_md() {
        // sm_90, 128 threads, 168 registers → 5376 per warp → 3 blocks → 12 warps → 18.75%.
        let o = occupancy(&SM90, 128, 168, 0);
        assert_eq!(o.by_registers, 3);
        assert_eq!(o.blocks, 3);
        assert!((o.fraction() - 0.1875).abs() < 1e-9);
        assert_eq!(o.limiters(), vec![Limiter::Registers]);
    }

    #[test]
    fn shared_memory_and_warps_limit_too() {
        // 100 KB per block on sm_80: (100 KB + 1 KB) rounded → 1 block of 164 KB.
        let o = occupancy(&SM80, 256, 32, 100 * 1024);
        assert_eq!(o.by_smem, 1);
        assert_eq!(o.limiters(), vec![Limiter::SharedMemory]);
        // 1024 threads = 32 warps: two blocks fill 64 warps.
        let o = occupancy(&SM90, 1024, 32, 0);
        assert_eq!(o.by_warps, 2);
        assert!((o.fraction() - 1.0).abs() < 1e-9);
    }
}
