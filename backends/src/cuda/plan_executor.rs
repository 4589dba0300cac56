//! A graph function's launch plan on the GPU: each planned kernel's Tile IR emitted as
//! PTX for the device's target, loaded once (modules are cached by their PTX text), and
//! launched on the plan's host tensors. The plan's buffers live on the host, so each
//! launch copies its arguments in and the tensors back out: a graph run on the GPU
//! checks the same kernels a kernel run launches, not a fused device-resident program.

use std::collections::HashMap;

use tessera_passes::codegen::TargetCode;
use tessera_passes::ir::Func;
use tessera_passes::Target;

use super::{GpuDevice, GpuKernel};
use crate::interp::graph::KernelExecutor;
use crate::tensor::Arg;

pub struct GpuPlanExecutor {
    device: GpuDevice,
    target: Target,
    /// Loaded modules by PTX text (a plan launches the same kernel at several shapes).
    loaded: HashMap<String, GpuKernel>,
}

impl GpuPlanExecutor {
    /// The first GPU and its target, or why there is none.
    pub fn open() -> Result<GpuPlanExecutor, String> {
        let device = GpuDevice::open().map_err(|e| e.to_string())?;
        let target = device.target().map_err(|e| e.to_string())?;
        Ok(GpuPlanExecutor { device, target, loaded: HashMap::new() })
    }

    pub fn target(&self) -> Target {
        self.target
    }

    pub fn description(&self) -> String {
        format!(
            "{} (compute capability {}.{})",
            self.device.name(),
            self.device.compute_capability().0,
            self.device.compute_capability().1
        )
    }
}

/// The PTX a planned kernel launches as (`backends/tests/cuda_emulator.rs` runs the same
/// code through the PTX emulator).
pub fn kernel_code(tile_ir: &Func, target: Target) -> Result<TargetCode, String> {
    tessera_passes::ptx::emit(tile_ir, target).map_err(|e| format!("`{}`: PTX: {}", tile_ir.name, e.message))
}

impl KernelExecutor for GpuPlanExecutor {
    fn launch(&mut self, tile_ir: &Func, args: &mut [Arg]) -> Result<(), String> {
        let code = kernel_code(tile_ir, self.target)?;
        if !self.loaded.contains_key(&code.text) {
            let kernel = self.device.load(&code).map_err(|e| format!("`{}` on the GPU: {e}", tile_ir.name))?;
            self.loaded.insert(code.text.clone(), kernel);
        }
        let kernel = &self.loaded[&code.text];
        self.device.launch(kernel, args, 0).map(|_| ()).map_err(|e| format!("`{}` on the GPU: {e}", tile_ir.name))
    }
}
