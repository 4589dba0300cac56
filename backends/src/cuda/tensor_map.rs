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
    use sys::CUtensorMapSwizzle as Swizzle;
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
    let data = data_type(spec.dtype);
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

/// The tensor-map element type of a `dtype` tensor. The TMA moves elements as bytes (no
/// conversion, zeros out of bounds), so only the element size must be right; every dtype
/// a kernel can copy or store has one (int8 and fp8 are UINT8, like int4 and bool, which
/// the runtime keeps one per byte).
fn data_type(dtype: tessera_frontend::check::DType) -> sys::CUtensorMapDataType {
    use sys::CUtensorMapDataType as Data;
    use tessera_frontend::check::DType;
    match dtype {
        DType::BF16 => Data::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::F32 | DType::TF32 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::F64 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        DType::I32 => Data::CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::I64 => Data::CU_TENSOR_MAP_DATA_TYPE_INT64,
        DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Int8 | DType::Int4 | DType::Bool => {
            Data::CU_TENSOR_MAP_DATA_TYPE_UINT8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An int8 GEMM's i32 output goes out by TMA store under `copy = "tma"`: every dtype
    /// has a tensor-map type whose element is the runtime's element size.
    #[test]
    fn every_dtype_has_a_tensor_map_type_of_its_element_size() {
        use sys::CUtensorMapDataType as Data;
        for &d in tessera_frontend::check::DType::ALL {
            let bytes = match data_type(d) {
                Data::CU_TENSOR_MAP_DATA_TYPE_UINT8 => 1,
                Data::CU_TENSOR_MAP_DATA_TYPE_UINT16
                | Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                | Data::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 => 2,
                Data::CU_TENSOR_MAP_DATA_TYPE_UINT64
                | Data::CU_TENSOR_MAP_DATA_TYPE_INT64
                | Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT64 => 8,
                _ => 4,
            };
            assert_eq!(bytes, crate::tensor::elem_bytes(d), "{d}");
        }
    }
}
