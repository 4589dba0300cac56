//! Element-level numerics of docs/ir.md: which arithmetic an op's result dtype computes
//! in, and how its result is rounded. Decided once per op when the program is compiled;
//! the executor only calls the chosen function per element.

use tessera_frontend::arith::{floor_div_i64, floor_rem_f32, floor_rem_f64, floor_rem_i64, shl_i64, shr_i64};
use tessera_frontend::check::DType;
use tessera_passes::ir::OpKind;

use crate::tensor::{round_stochastic, round_to, round_with};

/// The arithmetic a result type computes in.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Domain {
    /// `index`: exact 64-bit integers.
    Index,
    /// f64: computed in f64.
    F64,
    /// f32, tf32, bf16, f16, fp8: computed in f32, rounded to the dtype.
    F32(DType),
    /// Integer dtypes: exact, wrapped to the dtype's width (two's complement).
    Int(DType),
    Bool,
}

impl Domain {
    pub(crate) fn of_dtype(d: DType) -> Domain {
        match d {
            DType::F64 => Domain::F64,
            DType::Bool => Domain::Bool,
            d if d.is_int() => Domain::Int(d),
            d => Domain::F32(d),
        }
    }

    /// Rounds an exact value into this domain (a cast's rounding).
    pub(crate) fn convert(self, x: f64) -> f64 {
        self.convert_with(x, false)
    }

    /// A cast's rounding under `@saturate` when `saturate` (docs/ir.md, "Numerics policies").
    pub(crate) fn convert_with(self, x: f64, saturate: bool) -> f64 {
        match self {
            Domain::Index => saturate_index(x) as f64,
            Domain::F64 => x,
            Domain::F32(d) | Domain::Int(d) => round_with(d, x, saturate),
            Domain::Bool => f64::from(u8::from(x != 0.0)),
        }
    }

    /// A cast's `@stochastic_round` with the uniform number `u` of the element.
    pub(crate) fn convert_stochastic(self, x: f64, u: f64, saturate: bool) -> f64 {
        match self {
            Domain::F32(d) => round_stochastic(d, x, u, saturate),
            _ => self.convert_with(x, saturate),
        }
    }
}

/// Float → index: truncate toward zero, saturate, NaN → 0 (as for the integer dtypes).
pub(crate) fn saturate_index(x: f64) -> i64 {
    if x.is_nan() {
        0
    } else {
        x.trunc() as i64
    }
}

/// Rounds an f32 result to a dtype computed in f32.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Rounder {
    F32,
    BF16,
    F16,
    Other(DType),
    /// fp8 under `@saturate`: overflow clamps to the largest finite value.
    Saturating(DType),
}

impl Rounder {
    pub(crate) fn new(d: DType) -> Rounder {
        match d {
            DType::F32 => Rounder::F32,
            DType::BF16 => Rounder::BF16,
            DType::F16 => Rounder::F16,
            d => Rounder::Other(d),
        }
    }

    #[inline]
    pub(crate) fn round(self, x: f32) -> f64 {
        match self {
            Rounder::F32 => x as f64,
            // half's f32 conversions round to nearest even from all of the f32's bits.
            Rounder::BF16 => half::bf16::from_f32(x).to_f64(),
            Rounder::F16 => half::f16::from_f32(x).to_f64(),
            Rounder::Other(d) => round_to(d, x as f64),
            Rounder::Saturating(d) => round_with(d, x as f64, true),
        }
    }

    /// The same rounding under `@saturate` (only fp8 results change).
    pub(crate) fn saturating(self) -> Rounder {
        match self {
            Rounder::Other(d) if d.is_fp8() => Rounder::Saturating(d),
            r => r,
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Rem,
    Pow,
    Max,
    Min,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

impl BinOp {
    /// The operation of an IR op (`OpKind::is_binary`), for both interpreters.
    pub(crate) fn of(kind: OpKind) -> Option<BinOp> {
        Some(match kind {
            OpKind::Add => BinOp::Add,
            OpKind::Sub => BinOp::Sub,
            OpKind::Mul => BinOp::Mul,
            OpKind::Div => BinOp::Div,
            OpKind::FloorDiv => BinOp::FloorDiv,
            OpKind::Rem => BinOp::Rem,
            OpKind::Pow => BinOp::Pow,
            OpKind::Max => BinOp::Max,
            OpKind::Min => BinOp::Min,
            OpKind::And => BinOp::And,
            OpKind::Or => BinOp::Or,
            OpKind::Xor => BinOp::Xor,
            OpKind::Shl => BinOp::Shl,
            OpKind::Shr => BinOp::Shr,
            _ => return None,
        })
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum UnOp {
    Neg,
    Not,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Silu,
    Floor,
    Ceil,
    /// To the nearest integer, halves to even.
    Round,
}

impl UnOp {
    /// The operation of an IR op (`OpKind::is_unary_math`), for both interpreters.
    pub(crate) fn of(kind: OpKind) -> Option<UnOp> {
        Some(match kind {
            OpKind::Neg => UnOp::Neg,
            OpKind::Not => UnOp::Not,
            OpKind::Abs => UnOp::Abs,
            OpKind::Exp => UnOp::Exp,
            OpKind::Log => UnOp::Log,
            OpKind::Sqrt => UnOp::Sqrt,
            OpKind::Rsqrt => UnOp::Rsqrt,
            OpKind::Tanh => UnOp::Tanh,
            OpKind::Sigmoid => UnOp::Sigmoid,
            OpKind::Relu => UnOp::Relu,
            OpKind::Gelu => UnOp::Gelu,
            OpKind::Silu => UnOp::Silu,
            OpKind::Floor => UnOp::Floor,
            OpKind::Ceil => UnOp::Ceil,
            OpKind::Round => UnOp::Round,
            _ => return None,
        })
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Pred {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Pred {
    pub(crate) fn parse(s: &str) -> Option<Pred> {
        Some(match s {
            "lt" => Pred::Lt,
            "le" => Pred::Le,
            "gt" => Pred::Gt,
            "ge" => Pred::Ge,
            "eq" => Pred::Eq,
            "ne" => Pred::Ne,
            _ => return None,
        })
    }

    /// IEEE comparisons: every predicate but `ne` is false when an operand is NaN.
    #[inline]
    pub(crate) fn eval_f64(self, a: f64, b: f64) -> bool {
        self.holds(a, b)
    }

    pub(crate) fn eval_i64(self, a: i64, b: i64) -> bool {
        self.holds(a, b)
    }

    /// `PartialOrd`'s operators: on floats they are the IEEE comparisons.
    #[inline]
    fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Pred::Lt => a < b,
            Pred::Le => a <= b,
            Pred::Gt => a > b,
            Pred::Ge => a >= b,
            Pred::Eq => a == b,
            Pred::Ne => a != b,
        }
    }
}

/// Why an element operation has no value (the executor names the op and program).
pub(crate) type ElemError = &'static str;

/// A binary operation specialized to its domain.
#[derive(Copy, Clone)]
pub(crate) enum BinFn {
    F32(fn(f32, f32) -> f32, Rounder),
    F64(fn(f64, f64) -> f64),
    Int(fn(i64, i64) -> Result<i64, ElemError>, DType),
    Bool(fn(bool, bool) -> bool),
}

impl BinFn {
    /// `None` when the op is not defined on the domain (the message says so).
    pub(crate) fn new(op: BinOp, dom: Domain) -> Option<BinFn> {
        Some(match dom {
            Domain::F32(d) => BinFn::F32(
                match op {
                    BinOp::Add => |a, b| a + b,
                    BinOp::Sub => |a, b| a - b,
                    BinOp::Mul => |a, b| a * b,
                    BinOp::Div => |a, b| a / b,
                    BinOp::FloorDiv => |a, b| (a / b).floor(),
                    BinOp::Rem => floor_rem_f32,
                    // powf in f64 of f32 operands, rounded once: the f32 result.
                    BinOp::Pow => |a: f32, b: f32| (a as f64).powf(b as f64) as f32,
                    BinOp::Max => f32::max,
                    BinOp::Min => f32::min,
                    BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr => return None,
                },
                Rounder::new(d),
            ),
            Domain::F64 => BinFn::F64(match op {
                BinOp::Add => |a, b| a + b,
                BinOp::Sub => |a, b| a - b,
                BinOp::Mul => |a, b| a * b,
                BinOp::Div => |a, b| a / b,
                BinOp::FloorDiv => |a, b| (a / b).floor(),
                BinOp::Rem => floor_rem_f64,
                BinOp::Pow => f64::powf,
                BinOp::Max => f64::max,
                BinOp::Min => f64::min,
                BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr => return None,
            }),
            Domain::Int(d) => BinFn::Int(int_fn(op), d),
            Domain::Index => BinFn::Int(int_fn(op), DType::I64),
            Domain::Bool => BinFn::Bool(match op {
                BinOp::And | BinOp::Min | BinOp::Mul => |a, b| a & b,
                BinOp::Or | BinOp::Max => |a, b| a | b,
                BinOp::Xor => |a, b| a ^ b,
                _ => return None,
            }),
        })
    }

    /// The op under `@saturate` (fp8 results clamp on overflow).
    pub(crate) fn saturating(self) -> BinFn {
        match self {
            BinFn::F32(f, r) => BinFn::F32(f, r.saturating()),
            other => other,
        }
    }

    #[inline]
    pub(crate) fn eval(&self, a: f64, b: f64) -> Result<f64, ElemError> {
        Ok(match *self {
            BinFn::F32(f, r) => r.round(f(a as f32, b as f32)),
            BinFn::F64(f) => f(a, b),
            BinFn::Int(f, d) => d.wrap_int(f(a as i64, b as i64)?) as f64,
            BinFn::Bool(f) => f64::from(u8::from(f(a != 0.0, b != 0.0))),
        })
    }

    /// On index values (exact i64, beyond f64's 53 bits).
    pub(crate) fn eval_index(&self, a: i64, b: i64) -> Result<i64, ElemError> {
        match *self {
            BinFn::Int(f, d) => Ok(d.wrap_int(f(a, b)?)),
            _ => Err("not an integer operation"),
        }
    }

    /// Elementwise over two tiles of equal length.
    pub(crate) fn tile(&self, a: &[f64], b: &[f64], out: &mut Vec<f64>) -> Result<(), ElemError> {
        out.clear();
        out.reserve(a.len());
        match *self {
            BinFn::F32(f, r) => out.extend(a.iter().zip(b).map(|(&x, &y)| r.round(f(x as f32, y as f32)))),
            BinFn::F64(f) => out.extend(a.iter().zip(b).map(|(&x, &y)| f(x, y))),
            BinFn::Int(f, d) => {
                for (&x, &y) in a.iter().zip(b) {
                    out.push(d.wrap_int(f(x as i64, y as i64)?) as f64);
                }
            }
            BinFn::Bool(f) => out.extend(a.iter().zip(b).map(|(&x, &y)| f64::from(u8::from(f(x != 0.0, y != 0.0))))),
        }
        Ok(())
    }
}

impl std::fmt::Debug for BinFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BinFn::F32(_, r) => return write!(f, "f32 then {r:?}"),
            BinFn::F64(_) => "f64",
            BinFn::Int(_, d) => return write!(f, "int {d}"),
            BinFn::Bool(_) => "bool",
        })
    }
}

impl std::fmt::Debug for UnFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UnFn::F32(_, r) => return write!(f, "f32 then {r:?}"),
            UnFn::F64(_) => "f64",
            UnFn::Int(_, d) => return write!(f, "int {d}"),
            UnFn::Bool(_) => "bool",
        })
    }
}

/// `a ** e` (e ≥ 0) modulo 2^64, by squaring over all of `e`'s bits: an exponent past
/// `u32::MAX` (an i64 tile's) is not clamped, so odd bases agree with the CPU and PTX
/// code, which loop over the bits too.
fn wrapping_pow_i64(a: i64, mut e: i64) -> i64 {
    let (mut result, mut base) = (1i64, a);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    result
}

fn int_fn(op: BinOp) -> fn(i64, i64) -> Result<i64, ElemError> {
    match op {
        BinOp::Add => |a, b| Ok(a.wrapping_add(b)),
        BinOp::Sub => |a, b| Ok(a.wrapping_sub(b)),
        BinOp::Mul => |a, b| Ok(a.wrapping_mul(b)),
        // Integer `/` truncates toward zero (LLVM `sdiv`, PTX `div.s32`).
        BinOp::Div => |a, b| if b == 0 { Err("integer division by zero") } else { Ok(a.wrapping_div(b)) },
        BinOp::FloorDiv => |a, b| if b == 0 { Err("integer division by zero") } else { Ok(floor_div_i64(a, b)) },
        BinOp::Rem => |a, b| if b == 0 { Err("integer remainder by zero") } else { Ok(floor_rem_i64(a, b)) },
        BinOp::Pow => |a, b| {
            if b < 0 {
                Err("integer power with a negative exponent")
            } else {
                Ok(wrapping_pow_i64(a, b))
            }
        },
        BinOp::Max => |a, b| Ok(a.max(b)),
        BinOp::Min => |a, b| Ok(a.min(b)),
        BinOp::And => |a, b| Ok(a & b),
        BinOp::Or => |a, b| Ok(a | b),
        BinOp::Xor => |a, b| Ok(a ^ b),
        BinOp::Shl => |a, b| Ok(shl_i64(a, b)),
        BinOp::Shr => |a, b| Ok(shr_i64(a, b)),
    }
}

/// A unary operation specialized to its domain.
#[derive(Copy, Clone)]
pub(crate) enum UnFn {
    F32(fn(f32) -> f32, Rounder),
    F64(fn(f64) -> f64),
    Int(fn(i64) -> i64, DType),
    Bool(fn(bool) -> bool),
}

pub(crate) fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl UnFn {
    pub(crate) fn new(op: UnOp, dom: Domain) -> Option<UnFn> {
        Some(match dom {
            // The transcendental functions are evaluated in f64 from the f32 operand and
            // rounded once to f32: the correctly rounded f32 result but for rare
            // double-rounding cases, which the comparison tolerance (a few f32 ulp) covers.
            Domain::F32(d) => UnFn::F32(
                match op {
                    UnOp::Neg => |x: f32| -x,
                    UnOp::Abs => f32::abs,
                    UnOp::Relu => |x: f32| x.max(0.0),
                    UnOp::Exp => |x| (x as f64).exp() as f32,
                    UnOp::Log => |x| (x as f64).ln() as f32,
                    UnOp::Sqrt => |x| (x as f64).sqrt() as f32,
                    UnOp::Rsqrt => |x| (1.0 / (x as f64).sqrt()) as f32,
                    UnOp::Tanh => |x| (x as f64).tanh() as f32,
                    UnOp::Sigmoid => |x| sigmoid(x as f64) as f32,
                    UnOp::Gelu => |x| gelu(x as f64) as f32,
                    UnOp::Silu => |x| (x as f64 * sigmoid(x as f64)) as f32,
                    UnOp::Floor => f32::floor,
                    UnOp::Ceil => f32::ceil,
                    UnOp::Round => f32::round_ties_even,
                    UnOp::Not => return None,
                },
                Rounder::new(d),
            ),
            Domain::F64 => UnFn::F64(match op {
                UnOp::Neg => |x: f64| -x,
                UnOp::Abs => f64::abs,
                UnOp::Relu => |x: f64| x.max(0.0),
                UnOp::Exp => f64::exp,
                UnOp::Log => f64::ln,
                UnOp::Sqrt => f64::sqrt,
                UnOp::Rsqrt => |v| 1.0 / v.sqrt(),
                UnOp::Tanh => f64::tanh,
                UnOp::Sigmoid => sigmoid,
                UnOp::Gelu => gelu,
                UnOp::Silu => |v| v * sigmoid(v),
                UnOp::Floor => f64::floor,
                UnOp::Ceil => f64::ceil,
                UnOp::Round => f64::round_ties_even,
                UnOp::Not => return None,
            }),
            Domain::Int(_) | Domain::Index => {
                let d = if let Domain::Int(d) = dom { d } else { DType::I64 };
                UnFn::Int(
                    match op {
                        UnOp::Neg => i64::wrapping_neg,
                        UnOp::Abs => i64::wrapping_abs,
                        UnOp::Relu => |x: i64| x.max(0),
                        UnOp::Not => |x: i64| !x,
                        _ => return None,
                    },
                    d,
                )
            }
            Domain::Bool => UnFn::Bool(match op {
                UnOp::Not => |b: bool| !b,
                UnOp::Abs | UnOp::Relu => |b| b,
                _ => return None,
            }),
        })
    }

    /// The op under `@saturate` (fp8 results clamp on overflow).
    pub(crate) fn saturating(self) -> UnFn {
        match self {
            UnFn::F32(f, r) => UnFn::F32(f, r.saturating()),
            other => other,
        }
    }

    #[inline]
    pub(crate) fn eval(&self, x: f64) -> f64 {
        match *self {
            UnFn::F32(f, r) => r.round(f(x as f32)),
            UnFn::F64(f) => f(x),
            UnFn::Int(f, d) => d.wrap_int(f(x as i64)) as f64,
            UnFn::Bool(f) => f64::from(u8::from(f(x != 0.0))),
        }
    }

    pub(crate) fn eval_index(&self, x: i64) -> Option<i64> {
        match *self {
            UnFn::Int(f, d) => Some(d.wrap_int(f(x))),
            _ => None,
        }
    }

    pub(crate) fn tile(&self, a: &[f64], out: &mut Vec<f64>) {
        out.clear();
        out.reserve(a.len());
        match *self {
            UnFn::F32(f, r) => out.extend(a.iter().map(|&x| r.round(f(x as f32)))),
            UnFn::F64(f) => out.extend(a.iter().map(|&x| f(x))),
            _ => out.extend(a.iter().map(|&x| self.eval(x))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_arithmetic_floors_and_the_remainder_takes_the_divisors_sign() {
        let fd = BinFn::new(BinOp::FloorDiv, Domain::Index).unwrap();
        let rem = BinFn::new(BinOp::Rem, Domain::Index).unwrap();
        assert_eq!(fd.eval_index(-7, 2), Ok(-4));
        assert_eq!(fd.eval_index(7, -2), Ok(-4));
        assert_eq!(fd.eval_index(-8, 2), Ok(-4));
        assert_eq!(fd.eval_index(7, 2), Ok(3));
        // Python's `%`: a == (a // b) * b + a % b.
        assert_eq!(rem.eval_index(-7, 2), Ok(1));
        assert_eq!(rem.eval_index(-7, -2), Ok(-1));
        assert_eq!(rem.eval_index(7, -2), Ok(-1));
        assert_eq!(rem.eval_index(7, 3), Ok(1));
        assert!(rem.eval_index(1, 0).is_err());
        assert!(fd.eval_index(1, 0).is_err());
    }

    #[test]
    fn low_precision_ops_compute_in_f32_and_round_once() {
        // bf16: 1 + 2^-8 is a tie that rounds to even (1.0); computing the sum in f32
        // first keeps the exact 1 + 2^-8 + 2^-9 and rounds it up.
        let add = BinFn::new(BinOp::Add, Domain::F32(DType::BF16)).unwrap();
        assert_eq!(add.eval(1.0, 2f64.powi(-8)).unwrap(), 1.0);
        assert_eq!(add.eval(1.0 + 2f64.powi(-7), 2f64.powi(-8) + 2f64.powi(-9)).unwrap(), 1.0 + 2f64.powi(-6));
        let mul = BinFn::new(BinOp::Mul, Domain::F32(DType::Fp8E4m3)).unwrap();
        assert!(mul.eval(300.0, 300.0).unwrap().is_nan()); // e4m3 overflow: NaN
        assert_eq!(mul.saturating().eval(300.0, 300.0).unwrap(), 448.0); // @saturate
        let i8add = BinFn::new(BinOp::Add, Domain::Int(DType::Int8)).unwrap();
        assert_eq!(i8add.eval(127.0, 1.0).unwrap(), -128.0); // integer arithmetic wraps
        let gelu_f32 = UnFn::new(UnOp::Gelu, Domain::F32(DType::F32)).unwrap();
        assert!((gelu_f32.eval(1.0) - 0.8411920071).abs() < 1e-6);
        assert!(BinFn::new(BinOp::And, Domain::F32(DType::F32)).is_none());
    }

    #[test]
    fn integer_powers_use_the_whole_exponent() {
        // 3^(2^33) by 33 squarings, then one more factor of 3: the exponent 2^33 + 1 is
        // past u32::MAX, which used to be clamped.
        let mut squared = 3i64;
        for _ in 0..33 {
            squared = squared.wrapping_mul(squared);
        }
        assert_eq!(wrapping_pow_i64(3, (1 << 33) + 1), squared.wrapping_mul(3));
        assert_eq!(wrapping_pow_i64(-7, 5), -16807);
        assert_eq!(wrapping_pow_i64(2, 64), 0);
        assert_eq!(wrapping_pow_i64(5, 0), 1);
        assert_eq!(wrapping_pow_i64(0, 0), 1);
    }
}
