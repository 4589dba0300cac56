//! PTX generation from GPU Tile IR (sm_80, sm_90).

use crate::codegen::TargetCode;
use crate::ir::Func;
use crate::{LowerError, Target};

pub fn emit(func: &Func, target: Target) -> Result<TargetCode, LowerError> {
    let _ = target;
    Err(LowerError { message: "PTX generation is not built yet".into(), range: func.loc.range })
}
