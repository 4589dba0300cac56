//! Target IR: PTX for NVIDIA GPUs, LLVM IR for the CPU, as text with a source
//! location per line and the kernel's calling contract.

use std::sync::Arc;

use tessera_frontend::{Db, FnKey};

use crate::abi::KernelAbi;
use crate::ir::Loc;
use crate::{tile_ir, Config, LowerError, Target};

/// Generated code for one kernel, configuration and target.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TargetCode {
    pub target: Target,
    /// The symbol to launch (PTX `.entry`, LLVM function name).
    pub entry: String,
    /// The whole module: PTX (`.version`, `.target`, the entry) or LLVM IR.
    pub text: String,
    /// For each line of `text`, the Tile IR op location it was generated from.
    pub line_locs: Vec<Option<Loc>>,
    pub abi: KernelAbi,
    /// Shared memory a tile program needs (GPU; bytes, static plus dynamic).
    pub smem_bytes: u64,
}

/// Target IR of a kernel for one configuration and target.
// Per-configuration IR is large: keep the most recently used.
#[salsa::tracked(returns(ref), lru = 128)]
pub fn target_code<'db>(
    db: &'db dyn Db,
    key: FnKey<'db>,
    config: Config,
    target: Target,
) -> Result<Arc<TargetCode>, LowerError> {
    let tile = tile_ir(db, key, config, target).clone()?;
    let code = match target {
        Target::Sm80 | Target::Sm90 => crate::ptx::emit(&tile, target)?,
        Target::Cpu => crate::llvm::emit(&tile)?,
    };
    Ok(Arc::new(code))
}
