//! Element types: a storage dtype plus numerics policies (LANGUAGE.md §4).

use std::fmt;

#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum DType {
    F64,
    F32,
    TF32,
    BF16,
    F16,
    Fp8E4m3,
    Fp8E5m2,
    Int8,
    Int4,
    I32,
    I64,
    Bool,
}

impl DType {
    pub const ALL: &'static [DType] = &[
        DType::F64,
        DType::F32,
        DType::TF32,
        DType::BF16,
        DType::F16,
        DType::Fp8E4m3,
        DType::Fp8E5m2,
        DType::Int8,
        DType::Int4,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// Every spelling (canonical names and aliases).
    pub const SPELLINGS: &'static [(&'static str, DType)] = &[
        ("f64", DType::F64),
        ("fp64", DType::F64),
        ("float64", DType::F64),
        ("f32", DType::F32),
        ("fp32", DType::F32),
        ("float32", DType::F32),
        ("tf32", DType::TF32),
        ("bf16", DType::BF16),
        ("bfloat16", DType::BF16),
        ("f16", DType::F16),
        ("fp16", DType::F16),
        ("float16", DType::F16),
        ("fp8_e4m3", DType::Fp8E4m3),
        ("e4m3", DType::Fp8E4m3),
        ("fp8_e5m2", DType::Fp8E5m2),
        ("e5m2", DType::Fp8E5m2),
        ("int8", DType::Int8),
        ("i8", DType::Int8),
        ("int4", DType::Int4),
        ("i32", DType::I32),
        ("int32", DType::I32),
        ("i64", DType::I64),
        ("int64", DType::I64),
        ("bool", DType::Bool),
    ];

    pub fn from_name(name: &str) -> Option<DType> {
        DType::SPELLINGS.iter().find(|(s, _)| *s == name).map(|(_, d)| *d)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::TF32 => "tf32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::Fp8E4m3 => "fp8_e4m3",
            DType::Fp8E5m2 => "fp8_e5m2",
            DType::Int8 => "int8",
            DType::Int4 => "int4",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    /// Storage bits per element.
    pub fn bits(self) -> u32 {
        match self {
            DType::F64 | DType::I64 => 64,
            DType::F32 | DType::TF32 | DType::I32 => 32,
            DType::BF16 | DType::F16 => 16,
            DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Int8 | DType::Bool => 8,
            DType::Int4 => 4,
        }
    }

    pub fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F64 | DType::F32 | DType::TF32 | DType::BF16 | DType::F16 | DType::Fp8E4m3 | DType::Fp8E5m2
        )
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::Int8 | DType::Int4 | DType::I32 | DType::I64)
    }

    /// Wraps an exact integer to this type's width (two's complement); other types keep
    /// it. One rule for every backend, so that folded constants and computed values agree.
    pub fn wrap_int(self, v: i64) -> i64 {
        match self {
            DType::I32 => v as i32 as i64,
            DType::Int8 => v as i8 as i64,
            DType::Int4 => (v << 60) >> 60,
            _ => v,
        }
    }

    pub fn is_fp8(self) -> bool {
        matches!(self, DType::Fp8E4m3 | DType::Fp8E5m2)
    }

    /// Types whose matmuls want an explicit accumulation policy (W0404).
    pub fn is_low_precision(self) -> bool {
        self.is_fp8() || matches!(self, DType::Int8 | DType::Int4)
    }

    /// Mantissa bits (precision) of float types, for "at least as wide" comparisons.
    fn mantissa(self) -> u32 {
        match self {
            DType::F64 => 52,
            DType::F32 => 23,
            DType::TF32 => 10,
            DType::BF16 => 7,
            DType::F16 => 10,
            DType::Fp8E4m3 => 3,
            DType::Fp8E5m2 => 2,
            _ => 0,
        }
    }

    fn exponent(self) -> u32 {
        match self {
            DType::F64 => 11,
            DType::F32 | DType::TF32 | DType::BF16 => 8,
            DType::F16 | DType::Fp8E5m2 => 5,
            DType::Fp8E4m3 => 4,
            _ => 0,
        }
    }

    /// Whether every value of `other` is representable in `self` (range and precision).
    pub fn at_least_as_wide_as(self, other: DType) -> bool {
        if self == other {
            return true;
        }
        match (self.is_float(), other.is_float()) {
            (true, true) => self.mantissa() >= other.mantissa() && self.exponent() >= other.exponent(),
            (false, false) => self.bits() >= other.bits() && self != DType::Bool && other != DType::Bool,
            (true, false) => other.is_int() && self.mantissa() + 1 >= other.bits(),
            (false, true) => false,
        }
    }

    /// The tensor-core K granularity: 16 for 16-bit inputs, 32 for 8-bit ones (E0502).
    pub fn mma_multiple(self) -> Option<u32> {
        match self {
            DType::F16 | DType::BF16 => Some(16),
            DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Int8 | DType::Int4 => Some(32),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            DType::F64 => "64-bit IEEE float",
            DType::F32 => "32-bit IEEE float",
            DType::TF32 => "TensorFloat-32 (f32 range, 10-bit mantissa on tensor cores)",
            DType::BF16 => "bfloat16 (f32 range, 7-bit mantissa)",
            DType::F16 => "IEEE half precision (5-bit exponent, 10-bit mantissa)",
            DType::Fp8E4m3 => "FP8 E4M3 (max ±448, 3-bit mantissa)",
            DType::Fp8E5m2 => "FP8 E5M2 (max ±57344, 2-bit mantissa)",
            DType::Int8 => "8-bit signed integer",
            DType::Int4 => "4-bit signed integer",
            DType::I32 => "32-bit signed integer",
            DType::I64 => "64-bit signed integer",
            DType::Bool => "boolean",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Device {
    Gpu,
    Cpu,
}

/// A numerics or state policy. Floats are stored by their bits so types stay `Eq`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Policy {
    Accum(DType),
    StochasticRound,
    LossScale(u64),
    Saturate,
    Fp32Master,
    Paged,
    Checkpointable,
    RollingWindow,
    Device(Device),
}

impl Policy {
    pub const NAMES: &'static [&'static str] = &[
        "accum",
        "stochastic_round",
        "loss_scale",
        "saturate",
        "fp32_master",
        "paged",
        "checkpointable",
        "rolling_window",
        "device",
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Policy::Accum(_) => "accum",
            Policy::StochasticRound => "stochastic_round",
            Policy::LossScale(_) => "loss_scale",
            Policy::Saturate => "saturate",
            Policy::Fp32Master => "fp32_master",
            Policy::Paged => "paged",
            Policy::Checkpointable => "checkpointable",
            Policy::RollingWindow => "rolling_window",
            Policy::Device(_) => "device",
        }
    }

    /// State policies belong on KVCache / OptimizerState, not on tensor elements.
    pub fn is_state_policy(&self) -> bool {
        matches!(
            self,
            Policy::Fp32Master | Policy::Paged | Policy::Checkpointable | Policy::RollingWindow | Policy::Device(_)
        )
    }

    pub fn loss_scale(&self) -> Option<f64> {
        match self {
            Policy::LossScale(bits) => Some(f64::from_bits(*bits)),
            _ => None,
        }
    }

    /// What the policy does to the numbers, in one sentence (hover text).
    pub fn explain(&self, storage: DType) -> String {
        match self {
            Policy::Accum(acc) => {
                format!("products and sums are accumulated in {acc}, then rounded to {storage} on store")
            }
            Policy::StochasticRound => {
                format!("values are rounded to {storage} stochastically (unbiased on average) instead of to nearest")
            }
            Policy::LossScale(bits) => format!(
                "gradients are multiplied by {} before the backward pass and divided by it afterwards, \
                 keeping small {storage} gradients from flushing to zero",
                f64::from_bits(*bits)
            ),
            Policy::Saturate => {
                format!("out-of-range values are clamped to the largest finite {storage} instead of becoming inf/NaN")
            }
            Policy::Fp32Master => {
                "an f32 master copy is kept and updated; the low-precision copy is derived from it".into()
            }
            Policy::Paged => "the state lives in fixed-size pages that are allocated on demand".into(),
            Policy::Checkpointable => "the state is saved with checkpoints and restored on resume".into(),
            Policy::RollingWindow => "the oldest entries are evicted once the window is full".into(),
            Policy::Device(Device::Gpu) => "the state is placed in GPU memory".into(),
            Policy::Device(Device::Cpu) => "the state is placed in host memory".into(),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Accum(d) => write!(f, "@accum({d})"),
            Policy::LossScale(bits) => write!(f, "@loss_scale({})", f64::from_bits(*bits)),
            Policy::Device(Device::Gpu) => f.write_str("@device(gpu)"),
            Policy::Device(Device::Cpu) => f.write_str("@device(cpu)"),
            other => write!(f, "@{}", other.name()),
        }
    }
}

/// A storage dtype with its policies (kept sorted: policies are a set).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ElemType {
    pub dtype: DType,
    pub policies: Vec<Policy>,
}

impl ElemType {
    pub fn plain(dtype: DType) -> ElemType {
        ElemType { dtype, policies: Vec::new() }
    }

    pub fn with_policies(dtype: DType, mut policies: Vec<Policy>) -> ElemType {
        policies.sort();
        policies.dedup();
        ElemType { dtype, policies }
    }

    pub fn accum(&self) -> Option<DType> {
        self.policies.iter().find_map(|p| match p {
            Policy::Accum(d) => Some(*d),
            _ => None,
        })
    }

    /// Merges the policies of two operands (§5.1): the result carries both sets.
    /// Returns the conflicting accumulation types if they disagree (E0403).
    pub fn merge(&self, other: &ElemType) -> Result<ElemType, (DType, DType)> {
        if let (Some(a), Some(b)) = (self.accum(), other.accum()) {
            if a != b {
                return Err((a, b));
            }
        }
        let mut policies = self.policies.clone();
        policies.extend(other.policies.iter().cloned());
        Ok(ElemType::with_policies(self.dtype, policies))
    }

    /// One sentence per policy, for hovers.
    pub fn explain(&self) -> Vec<String> {
        let mut out = vec![format!("{} storage ({})", self.dtype, self.dtype.describe())];
        out.extend(self.policies.iter().map(|p| p.explain(self.dtype)));
        if self.accum().is_none() && self.dtype.is_low_precision() {
            out.push(format!(
                "no @accum policy: a matmul of {} values accumulates at the hardware default",
                self.dtype
            ));
        }
        out
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype)?;
        for p in &self.policies {
            write!(f, " {p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert!(DType::F32.at_least_as_wide_as(DType::BF16));
        assert!(DType::F32.at_least_as_wide_as(DType::F16));
        assert!(!DType::BF16.at_least_as_wide_as(DType::F16));
        assert!(!DType::Fp8E4m3.at_least_as_wide_as(DType::F16));
        assert!(DType::I32.at_least_as_wide_as(DType::Int8));
    }

    #[test]
    fn merge_detects_conflicting_accumulation() {
        let a = ElemType::with_policies(DType::BF16, vec![Policy::Accum(DType::F32)]);
        let b = ElemType::with_policies(DType::BF16, vec![Policy::Accum(DType::BF16)]);
        assert_eq!(a.merge(&b), Err((DType::F32, DType::BF16)));
        assert_eq!(a.merge(&ElemType::plain(DType::BF16)).unwrap(), a);
        assert_eq!(a.to_string(), "bf16 @accum(f32)");
    }
}
