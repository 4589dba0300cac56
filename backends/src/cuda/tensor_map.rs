//! Tensor maps for TMA copies (`copy = "tma"`): encoded at upload, from the tensor
//! arguments, through the driver.

use std::ffi::c_void;

use super::{check, sys, GpuError};
use crate::tensor::Arg;

/// The tensor map of a TMA copy (`copy = "tma"`, `passes::tma`) for the tensor argument
/// it reads, through `cuTensorMapEncodeTiled`: dims and byte strides innermost first,
/// the box and swizzle the kernel was compiled for, zeros outside the tensor. A tensor
/// whose rows are not a multiple of 16 bytes cannot have one: that is an argument error
/// naming it, before the driver is asked.
pub(super) fn encode(
    abi: &tessera_passes::abi::KernelAbi,
    spec: &tessera_passes::tma::TensorMapSpec,
    args: &[Arg],
    pointers: &[u64],
) -> Result<sys::CUtensorMap, GpuError> {
    use sys::{CUtensorMapDataType as Data, CUtensorMapSwizzle as Swizzle};
    let tensor_index = args[..spec.param].iter().filter(|a| matches!(a, Arg::Tensor(_))).count();
    let (Some(Arg::Tensor(t)), Some(&ptr)) = (args.get(spec.param), pointers.get(tensor_index)) else {
        return Err(GpuError::Args(format!("internal error: tensor map {spec:?} of a non-tensor argument")));
    };
    let name = abi.params.get(spec.param).map_or("?", |p| p.name());
    let eb = crate::tensor::elem_bytes(t.dtype) as u64;
    let dims: Vec<u64> = t.dims.iter().rev().map(|&d| d as u64).collect();
    let mut strides = Vec::new();
    let mut stride = eb;
    for d in &dims[..dims.len().saturating_sub(1)] {
        stride *= d;
        strides.push(stride);
    }
    let shape: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
    if let Some(why) = tessera_passes::tma::stride_problem(name, &shape, eb) {
        return Err(GpuError::Args(why));
    }
    let data = match spec.dtype {
        tessera_frontend::check::DType::BF16 => Data::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        tessera_frontend::check::DType::F16 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        tessera_frontend::check::DType::F32 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        // The TMA moves bytes: 8-bit floats travel as UINT8.
        d if d.is_fp8() => Data::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        other => return Err(GpuError::Args(format!("copy=\"tma\" of a {other} tensor (`{name}`) is not supported"))),
    };
    let swizzle = match spec.swizzle_bytes {
        32 => Swizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => Swizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => Swizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        _ => Swizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
    };
    let element_strides = vec![1u32; dims.len()];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array holds `rank` entries (strides `rank - 1`), the map is a valid
    // out-pointer, and the address is the tensor's device allocation.
    unsafe {
        check(
            "cuTensorMapEncodeTiled",
            sys::cuTensorMapEncodeTiled(
                &mut map,
                data,
                dims.len() as u32,
                ptr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                spec.box_dims.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            ),
        )?;
    }
    Ok(map)
}
