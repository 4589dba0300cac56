//! Kernel arguments as the launch passes them: one 8-byte slot per ABI slot, in the
//! order `passes::abi` defines (a tensor's device pointer then its dims as `i64`;
//! scalars by `abi::scalar_slot`; indices as `i64`). The driver reads as many bytes
//! from each slot as the PTX parameter has, so 4-byte values sit in the low bytes.

use tessera_frontend::check::DType;
use tessera_passes::abi::{scalar_slot, AbiParam, KernelAbi, Slot};

use crate::tensor::{elem_bytes, Arg};

/// The parameter slots of one launch.
#[derive(Clone, PartialEq, Debug)]
pub struct Params {
    pub slots: Vec<u64>,
    /// What each slot holds, for messages and tests.
    pub kinds: Vec<Slot>,
}

/// Checks `args` against the kernel's parameters and returns each tensor's shape (for
/// `KernelAbi::bind`) and byte size, in parameter order.
pub fn check_args(abi: &KernelAbi, args: &[Arg]) -> Result<Vec<(Vec<i64>, usize)>, String> {
    if args.len() != abi.params.len() {
        return Err(format!("`{}` takes {} arguments, got {}", abi.name, abi.params.len(), args.len()));
    }
    let mut tensors = Vec::new();
    for (param, arg) in abi.params.iter().zip(args) {
        match (param, arg) {
            (AbiParam::Tensor { name, dtype, dims }, Arg::Tensor(t)) => {
                if t.dtype != *dtype {
                    return Err(format!("`{name}` is a {dtype} tensor, got {}", t.dtype));
                }
                if t.dims.len() != dims.len() {
                    return Err(format!("`{name}` has rank {}, got a tensor of rank {}", dims.len(), t.dims.len()));
                }
                let bytes = t.numel() * elem_bytes(t.dtype);
                if t.data.len() != bytes {
                    return Err(format!("`{name}` holds {} bytes, its shape needs {bytes}", t.data.len()));
                }
                tensors.push((t.dims.iter().map(|&d| d as i64).collect(), bytes));
            }
            (AbiParam::Scalar { name, dtype }, Arg::Scalar(given, _)) => {
                let compatible = given == dtype
                    || (given.is_float() && dtype.is_float())
                    || (!given.is_float() && !dtype.is_float());
                if !compatible {
                    return Err(format!("`{name}` is a {dtype} scalar, got a {given}"));
                }
            }
            (AbiParam::Index { .. }, Arg::Index(_)) => {}
            (AbiParam::Scalar { name, .. } | AbiParam::Index { name }, Arg::Scalar(..) | Arg::Index(_)) => {
                return Err(format!("`{name}` is {}, got {}", describe_param(param), describe_arg(arg)));
            }
            (p, a) => return Err(format!("`{}` is {}, got {}", p.name(), describe_param(p), describe_arg(a))),
        }
    }
    Ok(tensors)
}

fn describe_param(p: &AbiParam) -> String {
    match p {
        AbiParam::Tensor { dtype, .. } => format!("a {dtype} tensor"),
        AbiParam::Scalar { dtype, .. } => format!("a {dtype} scalar"),
        AbiParam::Index { .. } => "an index".into(),
    }
}

fn describe_arg(a: &Arg) -> String {
    match a {
        Arg::Tensor(t) => format!("a {} tensor", t.dtype),
        Arg::Scalar(d, _) => format!("a {d} scalar"),
        Arg::Index(_) => "an index".into(),
    }
}

/// The launch's parameter slots: `pointers` are the tensors' device addresses, in
/// parameter order. `args` must have passed `check_args`.
pub fn pack(abi: &KernelAbi, args: &[Arg], pointers: &[u64]) -> Result<Params, String> {
    let mut slots = Vec::new();
    let mut kinds = Vec::new();
    let mut next_tensor = 0;
    for (param, arg) in abi.params.iter().zip(args) {
        match (param, arg) {
            (AbiParam::Tensor { .. }, Arg::Tensor(t)) => {
                let ptr = *pointers
                    .get(next_tensor)
                    .ok_or_else(|| format!("no device pointer for tensor `{}`", param.name()))?;
                next_tensor += 1;
                slots.push(ptr);
                kinds.push(Slot::Pointer);
                for &d in &t.dims {
                    slots.push(d as i64 as u64);
                    kinds.push(Slot::I64);
                }
            }
            (AbiParam::Scalar { dtype, .. }, Arg::Scalar(_, value)) => {
                let slot = scalar_slot(*dtype);
                slots.push(scalar_bits(slot, *dtype, *value));
                kinds.push(slot);
            }
            (AbiParam::Index { .. }, Arg::Index(v)) => {
                slots.push(*v as u64);
                kinds.push(Slot::I64);
            }
            _ => return Err(format!("argument for `{}` does not match its parameter", param.name())),
        }
    }
    if kinds != abi.slots() {
        return Err(format!("internal error: packed {:?}, the ABI of `{}` is {:?}", kinds, abi.name, abi.slots()));
    }
    Ok(Params { slots, kinds })
}

fn scalar_bits(slot: Slot, dtype: DType, value: f64) -> u64 {
    match slot {
        Slot::F32 => (value as f32).to_bits() as u64,
        Slot::F64 => value.to_bits(),
        Slot::I32 => u64::from(value != 0.0),
        Slot::I64 | Slot::Pointer => {
            if dtype.is_float() {
                value.to_bits()
            } else {
                value as i64 as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::HostTensor;
    use tessera_frontend::check::Dim;

    fn gemm_abi() -> KernelAbi {
        let t = |name: &str, a: &str, b: &str| AbiParam::Tensor {
            name: name.into(),
            dtype: DType::BF16,
            dims: vec![Dim::sym(a), Dim::sym(b)],
        };
        KernelAbi {
            name: "gemm".into(),
            params: vec![
                t("A", "M", "K"),
                t("B", "K", "N"),
                AbiParam::Scalar { name: "alpha".into(), dtype: DType::F32 },
                AbiParam::Scalar { name: "causal".into(), dtype: DType::Bool },
                AbiParam::Index { name: "offset".into() },
            ],
            grid: [Dim::constant(1), Dim::constant(1), Dim::constant(1)],
            threads: 128,
            seed: None,
            tensor_maps: Vec::new(),
            cluster: [1, 1, 1],
        }
    }

    #[test]
    fn slots_follow_the_abi() {
        let abi = gemm_abi();
        let args = vec![
            Arg::Tensor(HostTensor::zeros(DType::BF16, &[3, 5])),
            Arg::Tensor(HostTensor::zeros(DType::BF16, &[5, 7])),
            Arg::Scalar(DType::F32, 1.5),
            Arg::Scalar(DType::Bool, 1.0),
            Arg::Index(-2),
        ];
        let shapes = check_args(&abi, &args).unwrap();
        assert_eq!(shapes, vec![(vec![3, 5], 30), (vec![5, 7], 70)]);
        let p = pack(&abi, &args, &[0x1000, 0x2000]).unwrap();
        assert_eq!(p.slots, vec![0x1000, 3, 5, 0x2000, 5, 7, 1.5f32.to_bits() as u64, 1, (-2i64) as u64]);
        assert_eq!(p.kinds, abi.slots());
        assert_eq!(p.kinds[6], Slot::F32);
        assert_eq!(p.kinds[7], Slot::I32);
    }

    #[test]
    fn mismatches_are_named() {
        let abi = gemm_abi();
        let mut args = vec![
            Arg::Tensor(HostTensor::zeros(DType::F32, &[3, 5])),
            Arg::Tensor(HostTensor::zeros(DType::BF16, &[5, 7])),
            Arg::Scalar(DType::F32, 1.5),
            Arg::Scalar(DType::Bool, 1.0),
            Arg::Index(0),
        ];
        assert_eq!(check_args(&abi, &args).unwrap_err(), "`A` is a bf16 tensor, got f32");
        args[0] = Arg::Tensor(HostTensor::zeros(DType::BF16, &[15]));
        assert_eq!(check_args(&abi, &args).unwrap_err(), "`A` has rank 2, got a tensor of rank 1");
        args[0] = Arg::Tensor(HostTensor::zeros(DType::BF16, &[3, 5]));
        args[4] = Arg::Scalar(DType::F32, 0.0);
        assert_eq!(check_args(&abi, &args).unwrap_err(), "`offset` is an index, got a f32 scalar");
        assert!(check_args(&abi, &args[..2]).unwrap_err().contains("takes 5 arguments, got 2"));
    }
}
