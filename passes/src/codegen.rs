//! Target IR: PTX for NVIDIA GPUs, LLVM IR for the CPU, as text with a source
//! location per line and the kernel's calling contract.

use std::sync::Arc;

use tessera_frontend::{Db, FnKey};

use crate::config::Config;
use crate::error::LowerError;
use crate::queries::tile_ir;
use crate::target::Target;
pub use crate::target::TargetCode;

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
