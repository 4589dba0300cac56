//! LLVM IR generation from CPU Tile IR.

use crate::codegen::TargetCode;
use crate::ir::Func;
use crate::LowerError;

pub fn emit(func: &Func) -> Result<TargetCode, LowerError> {
    Err(LowerError { message: "LLVM IR generation is not built yet".into(), range: func.loc.range })
}
