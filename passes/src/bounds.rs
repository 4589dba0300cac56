//! Resource bounds: a configuration whose tiles cannot exist on the target is refused
//! before anything is built per tile element. Every lowering of a kernel (lints, the
//! autotuner, `lower`, `run`, the explorer, the language server) goes through
//! [`check_tiles`] in `specialize`, so the work and memory of what follows is bounded by
//! the target's limits, not by the numbers in a schedule.

use tessera_frontend::check::DType;

use crate::analysis::limits::GpuLimits;
use crate::config::Config;
use crate::error::LowerError;
use crate::ir::{Func, Type};
use crate::target::Target;

/// Bytes of tile values one CPU tile program may hold in one tile (its registers and
/// stack buffers): 64 MiB, 16 M f32 elements.
pub const CPU_TILE_BYTES: u128 = 64 << 20;

/// Bytes one tile may occupy on `target`: a GPU block holds its tiles in registers, at
/// most (max threads per block) x (registers per thread) x 4 bytes.
pub fn tile_byte_limit(target: Target) -> (u128, String) {
    match GpuLimits::of(target) {
        Some(l) => {
            let bytes = 1024u128 * l.max_registers_per_thread as u128 * 4;
            (bytes, format!("a block on {} holds at most {bytes} bytes of tiles in registers (1024 threads x {} registers x 4 bytes)", l.arch, l.max_registers_per_thread))
        }
        None => {
            (CPU_TILE_BYTES, format!("a tile program on the CPU holds at most {} MiB per tile", CPU_TILE_BYTES >> 20))
        }
    }
}

fn elem_bytes(d: DType) -> u128 {
    match d {
        DType::Int4 => 1,
        d => d.bytes() as u128,
    }
}

/// The first tile (or shared buffer) of `f`, under `config`, too large for `target`.
pub fn check_tiles(f: &Func, config: &Config, target: Target) -> Result<(), LowerError> {
    let (limit, why) = tile_byte_limit(target);
    let defs = f.definitions();
    for (i, v) in f.values.iter().enumerate() {
        let (dims, dtype, what) = match &v.ty {
            Type::Tile(t) => (&t.dims, t.dtype, "tile"),
            Type::Smem(s) => (&s.dims, s.dtype, "shared buffer"),
            _ => continue,
        };
        let mut elements: u128 = 1;
        let mut known = true;
        for d in dims {
            match d.eval(&|s| config.key(s)) {
                Some(n) if n >= 0 => elements = elements.saturating_mul(n as u128),
                Some(_) => return Err(limit_error(f, &defs, i, format!("a {what} with a negative dim: {d}"))),
                None => known = false,
            }
        }
        if !known {
            continue;
        }
        let bytes = elements.saturating_mul(elem_bytes(dtype));
        // Shared buffers have their own budget (E0500), checked on the real sizes once
        // they are small enough to measure; only absurd ones stop here.
        let cap = if what == "tile" { limit } else { limit.max(1 << 31) };
        if bytes > cap {
            let name = v.name.as_ref().map(|n| format!(" `{n}`")).unwrap_or_default();
            let shape: Vec<String> =
                dims.iter().map(|d| d.eval(&|s| config.key(s)).map_or(d.to_string(), |n| n.to_string())).collect();
            let message = format!(
                "the {what}{name} would be [{}] x {dtype}: {elements} elements, {bytes} bytes; {why}",
                shape.join(", "),
            );
            return Err(limit_error(f, &defs, i, message));
        }
    }
    Ok(())
}

fn limit_error(f: &Func, defs: &[Option<crate::ir::OpId>], value: usize, message: String) -> LowerError {
    let range = defs.get(value).copied().flatten().map(|op| f.op(op).loc.range).unwrap_or(f.loc.range);
    LowerError { message, range }
}
