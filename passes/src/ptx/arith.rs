//! Constants and elementwise ops: integer folding, float and integer arithmetic, unary
//! functions per element.

use tessera_frontend::check::DType;

use crate::ir::{policy as ir_policy, Attr, Op, OpKind, Type, ValueId};

use super::builder::{Builder, Class, Operand, Reg};
use super::emit::*;
use super::f64_math;
use super::numerics::{arith_type, materialize, round_wide_with, wide_class};

impl Emitter<'_> {
    pub(super) fn constant(&mut self, op: &Op) -> R<()> {
        let value = op.attr("value").ok_or_else(|| self.fail(op, "no `value`"))?;
        let operand = match (self.f.ty(op.results[0]), value) {
            (Type::Index, Attr::Int(v)) => Operand::Int(*v),
            (Type::Index, Attr::Float(bits)) => Operand::Int(f64::from_bits(*bits) as i64),
            (Type::Scalar(d), a) => {
                let v = match a {
                    Attr::Bool(b) => f64::from(u8::from(*b)),
                    a => a.as_float().ok_or_else(|| self.fail(op, "a non-numeric constant"))?,
                };
                const_operand(*d, v)
            }
            (other, _) => return Err(self.fail(op, format!("a constant of type {other}"))),
        };
        self.set(op.results[0], Val::Scalar(operand));
        Ok(())
    }

    /// The element type of a value for arithmetic (`index` computes as `i64`).
    pub(super) fn elem_dtype(&self, v: ValueId) -> Option<DType> {
        match self.f.ty(v) {
            Type::Index => Some(DType::I64),
            t => t.dtype(),
        }
    }

    pub(super) fn elementwise(&mut self, op: &Op) -> R<()> {
        let result = op.results[0];
        let out_dtype = self.elem_dtype(result).ok_or_else(|| self.fail(op, "a result without an element type"))?;
        let in_dtype = self.elem_dtype(op.operands[if op.kind == OpKind::Select { 1 } else { 0 }]).unwrap_or(out_dtype);
        let is_tile = matches!(self.f.ty(result), Type::Tile(_));
        if !is_tile {
            let args: Vec<Operand> = op.operands.iter().map(|&v| self.scalar(op, v)).collect::<R<_>>()?;
            let r = self.element(op, in_dtype, out_dtype, &args)?;
            self.set(result, Val::Scalar(r));
            return Ok(());
        }
        let (dtype, shape, layout) = self.tile_type(op, result)?;
        let n = self.map(op, &layout, &shape)?.len();
        let mut columns: Vec<Vec<Operand>> = Vec::new();
        for &v in &op.operands {
            match self.val(op, v)?.clone() {
                Val::Tile(t) => {
                    if t.layout != layout || t.shape != shape {
                        return Err(self.fail(
                            op,
                            format!("internal error: operand layout {} differs from the result's {}", t.layout, layout),
                        ));
                    }
                    columns.push(self.wide(&t));
                }
                Val::Scalar(s) => columns.push(vec![s; n]),
                other => return Err(self.fail(op, format!("an operand that is {}", kind_name(&other)))),
            }
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let args: Vec<Operand> = columns.iter().map(|c| c[i]).collect();
            out.push(self.element(op, in_dtype, out_dtype, &args)?);
        }
        self.set(result, Val::Tile(TileVal { dtype, shape, layout, repr: Repr::Wide(out) }));
        Ok(())
    }

    /// One element of an elementwise op. `dtype` is the operands' element type (the
    /// values for `select`), `out` the result's.
    pub(super) fn element(&mut self, op: &Op, dtype: DType, out: DType, args: &[Operand]) -> R<Operand> {
        let target = self.target;
        match op.kind {
            OpKind::Cast => {
                let saturate = ir_policy::saturates(op);
                if ir_policy::stochastic(op) && dtype.is_float() {
                    if let Some(r) = super::policy::stochastic(&mut self.b, args[0], args[1], out, saturate) {
                        return Ok(r);
                    }
                }
                self.cast(dtype, out, args[0], saturate)
            }
            OpKind::Select => {
                let c = materialize(&mut self.b, Class::Pred, args[0]);
                Ok(self.select(out, c, args[1], args[2]))
            }
            OpKind::Cmp => {
                let pred = op.str_attr("pred").unwrap_or("eq");
                if let (Operand::Int(a), Operand::Int(b)) = (args[0], args[1]) {
                    if wide_class(dtype) != Class::Pred {
                        let v = crate::ir::compare_holds(pred, a, b).unwrap_or(a != b);
                        return Ok(Operand::Int(v as i64));
                    }
                }
                let class = wide_class(dtype);
                let r = self.b.reg(Class::Pred);
                if class == Class::Pred {
                    let (a, b) = (
                        materialize(&mut self.b, Class::Pred, args[0]),
                        materialize(&mut self.b, Class::Pred, args[1]),
                    );
                    match pred {
                        "eq" => {
                            self.b.ins(format!("xor.pred {r}, {a}, {b}"));
                            self.b.ins(format!("not.pred {r}, {r}"));
                        }
                        "ne" => self.b.ins(format!("xor.pred {r}, {a}, {b}")),
                        other => return Err(self.fail(op, format!("`{other}` on booleans"))),
                    }
                    return Ok(Operand::Reg(r));
                }
                let cmp = match (pred, class) {
                    ("ne", Class::F32 | Class::F64) => "neu",
                    (p @ ("lt" | "le" | "gt" | "ge" | "eq" | "ne"), _) => p,
                    (other, _) => return Err(self.fail(op, format!("unknown predicate `{other}`"))),
                };
                let a = materialize(&mut self.b, class, args[0]);
                self.b.ins(format!("setp.{cmp}.{} {r}, {a}, {}", arith_type(dtype), args[1]));
                Ok(Operand::Reg(r))
            }
            k if k.is_binary() => {
                let r = self.binary(op, dtype, args[0], args[1])?;
                let saturate = ir_policy::saturates(op);
                Ok(if dtype.is_float() { round_wide_with(&mut self.b, target, dtype, r, saturate) } else { r })
            }
            _ => {
                let r = self.unary(op, dtype, args[0])?;
                let saturate = ir_policy::saturates(op);
                Ok(if dtype.is_float() { round_wide_with(&mut self.b, target, dtype, r, saturate) } else { r })
            }
        }
    }

    pub(super) fn binary(&mut self, op: &Op, dtype: DType, a: Operand, b: Operand) -> R<Operand> {
        let class = wide_class(dtype);
        if class == Class::Pred {
            let (x, y) = (materialize(&mut self.b, Class::Pred, a), materialize(&mut self.b, Class::Pred, b));
            let r = self.b.reg(Class::Pred);
            let ins = match op.kind {
                OpKind::And | OpKind::Min | OpKind::Mul => "and",
                OpKind::Or | OpKind::Max => "or",
                OpKind::Xor => "xor",
                _ => return Err(self.unsupported(op, "on booleans")),
            };
            self.b.ins(format!("{ins}.pred {r}, {x}, {y}"));
            return Ok(Operand::Reg(r));
        }
        if let (Operand::Int(x), Operand::Int(y)) = (a, b) {
            if let Some(v) = fold_int(op.kind, x, y) {
                return Ok(Operand::Int(dtype.wrap_int(v)));
            }
        }
        // x + 0, x * 1 and friends appear all over index arithmetic.
        match (op.kind, a, b) {
            (OpKind::Add, x, Operand::Int(0)) | (OpKind::Add, Operand::Int(0), x) if !dtype.is_float() => return Ok(x),
            (OpKind::Sub, x, Operand::Int(0)) if !dtype.is_float() => return Ok(x),
            (OpKind::Mul, x, Operand::Int(1)) | (OpKind::Mul, Operand::Int(1), x) if !dtype.is_float() => return Ok(x),
            (OpKind::Mul, _, Operand::Int(0)) | (OpKind::Mul, Operand::Int(0), _) if !dtype.is_float() => {
                return Ok(Operand::Int(0))
            }
            _ => {}
        }
        let ty = arith_type(dtype);
        let bits = if class == Class::B64 { 64 } else { 32 };
        let x = materialize(&mut self.b, class, a);
        let r = self.b.reg(class);
        let b_ = &mut self.b;
        if dtype.is_float() {
            let f = if class == Class::F64 { "f64" } else { "f32" };
            match op.kind {
                OpKind::Add => b_.ins(format!("add.{f} {r}, {x}, {b}")),
                OpKind::Sub => b_.ins(format!("sub.{f} {r}, {x}, {b}")),
                OpKind::Mul => b_.ins(format!("mul.{f} {r}, {x}, {b}")),
                OpKind::Div => b_.ins(format!("div.rn.{f} {r}, {x}, {b}")),
                OpKind::Max => b_.ins(format!("max.{f} {r}, {x}, {b}")),
                OpKind::Min => b_.ins(format!("min.{f} {r}, {x}, {b}")),
                OpKind::FloorDiv => {
                    b_.ins(format!("div.rn.{f} {r}, {x}, {b}"));
                    b_.ins(format!("cvt.rmi.{f}.{f} {r}, {r}"));
                }
                OpKind::Rem => {
                    // Python's: x - b * floor(x / b), in the divisor's sign.
                    let divisor = materialize(b_, class, b);
                    let q = b_.reg(class);
                    b_.ins(format!("div.rn.{f} {q}, {x}, {divisor}"));
                    b_.ins(format!("cvt.rmi.{f}.{f} {q}, {q}"));
                    b_.ins(format!("neg.{f} {q}, {q}"));
                    b_.ins(format!("fma.rn.{f} {r}, {q}, {divisor}, {x}"));
                }
                OpKind::Pow if class == Class::F32 => pow_f32(b_, r, x, b),
                OpKind::Pow => f64_math::pow(b_, r, x, b),
                _ => return Err(self.unsupported(op, format!("on {dtype}"))),
            }
            return Ok(Operand::Reg(r));
        }
        let pow2 = |v: Operand| v.as_int().filter(|&c| c > 0 && c.count_ones() == 1);
        match op.kind {
            OpKind::Add => b_.ins(format!("add.{ty} {r}, {x}, {b}")),
            OpKind::Sub => b_.ins(format!("sub.{ty} {r}, {x}, {b}")),
            OpKind::Mul => b_.ins(format!("mul.lo.{ty} {r}, {x}, {b}")),
            OpKind::Div => b_.ins(format!("div.{ty} {r}, {x}, {b}")),
            OpKind::Max => b_.ins(format!("max.{ty} {r}, {x}, {b}")),
            OpKind::Min => b_.ins(format!("min.{ty} {r}, {x}, {b}")),
            OpKind::And => b_.ins(format!("and.b{bits} {r}, {x}, {b}")),
            OpKind::Or => b_.ins(format!("or.b{bits} {r}, {x}, {b}")),
            OpKind::Xor => b_.ins(format!("xor.b{bits} {r}, {x}, {b}")),
            OpKind::Shl | OpKind::Shr => shift(b_, op.kind, ty, bits, r, x, b),
            OpKind::Pow => int_pow(b_, class, ty, bits, r, x, b),
            OpKind::FloorDiv | OpKind::Rem if class == Class::B64 && wide_constant_divisor(b).is_some() => {
                // ptxas turns a 64-bit `div`/`rem`, even by a constant, into a call of a
                // division subroutine (`__cuda_sm20_rem_s64`): a pipelined loop's stage
                // index paid two calls per iteration. A multiply by the reciprocal instead.
                let c = wide_constant_divisor(b).unwrap();
                let q = if op.kind == OpKind::FloorDiv { r } else { b_.reg(class) };
                floor_div_by_constant(b_, q, x, c);
                if op.kind == OpKind::Rem {
                    b_.ins(format!("mul.lo.s64 {r}, {q}, {c}"));
                    b_.ins(format!("sub.s64 {r}, {x}, {r}"));
                }
            }
            OpKind::FloorDiv => match pow2(b) {
                // An arithmetic shift floors.
                Some(c) => b_.ins(format!("shr.{ty} {r}, {x}, {}", c.trailing_zeros())),
                None => {
                    // The remainder from the quotient: a second `div`-class instruction is
                    // a second subroutine call for 64-bit operands.
                    let rem = b_.reg(class);
                    b_.ins(format!("div.{ty} {r}, {x}, {b}"));
                    b_.ins(format!("mul.lo.{ty} {rem}, {r}, {b}"));
                    b_.ins(format!("sub.{ty} {rem}, {x}, {rem}"));
                    let (nz, neg, both) = (b_.reg(Class::Pred), b_.reg(Class::Pred), b_.reg(Class::Pred));
                    b_.ins(format!("setp.ne.{ty} {nz}, {rem}, 0"));
                    b_.ins(format!("xor.b{bits} {rem}, {rem}, {b}"));
                    b_.ins(format!("setp.lt.{ty} {neg}, {rem}, 0"));
                    b_.ins(format!("and.pred {both}, {nz}, {neg}"));
                    b_.ins_if(both, false, format!("sub.{ty} {r}, {r}, 1"));
                }
            },
            OpKind::Rem => match pow2(b) {
                // Two's complement: the low bits are the remainder by a positive power of two.
                Some(c) => b_.ins(format!("and.b{bits} {r}, {x}, {}", c - 1)),
                None => {
                    // Python's: a truncated remainder whose sign differs from the
                    // divisor's moves by the divisor (`-7 % 3 == 2`, `7 % -3 == -2`).
                    b_.ins(format!("rem.{ty} {r}, {x}, {b}"));
                    let y = materialize(b_, class, b);
                    let (nz, differ, both) = (b_.reg(Class::Pred), b_.reg(Class::Pred), b_.reg(Class::Pred));
                    let signs = b_.reg(class);
                    b_.ins(format!("setp.ne.{ty} {nz}, {r}, 0"));
                    b_.ins(format!("xor.b{bits} {signs}, {r}, {y}"));
                    b_.ins(format!("setp.lt.{ty} {differ}, {signs}, 0"));
                    b_.ins(format!("and.pred {both}, {nz}, {differ}"));
                    b_.ins_if(both, false, format!("add.{ty} {r}, {r}, {y}"));
                }
            },
            _ => return Err(self.unsupported(op, format!("on {dtype}"))),
        }
        Ok(match dtype {
            DType::Int8 => {
                self.b.ins(format!("cvt.s32.s8 {r}, {r}"));
                Operand::Reg(r)
            }
            _ => Operand::Reg(r),
        })
    }

    pub(super) fn unary(&mut self, op: &Op, dtype: DType, a: Operand) -> R<Operand> {
        let class = wide_class(dtype);
        let x = materialize(&mut self.b, class, a);
        let b = &mut self.b;
        if class == Class::Pred {
            if op.kind != OpKind::Not {
                return Err(self.unsupported(op, "on booleans"));
            }
            let r = b.reg(Class::Pred);
            b.ins(format!("not.pred {r}, {x}"));
            return Ok(Operand::Reg(r));
        }
        let r = b.reg(class);
        if !dtype.is_float() {
            let ty = arith_type(dtype);
            let bits = if class == Class::B64 { 64 } else { 32 };
            match op.kind {
                // Narrow results wrap as in `binary`: -(-128) is -128 in int8.
                OpKind::Neg if dtype == DType::Int8 => {
                    b.ins(format!("neg.{ty} {r}, {x}"));
                    b.ins(format!("cvt.s32.s8 {r}, {r}"));
                }
                OpKind::Abs if dtype == DType::Int8 => {
                    b.ins(format!("abs.{ty} {r}, {x}"));
                    b.ins(format!("cvt.s32.s8 {r}, {r}"));
                }
                OpKind::Neg => b.ins(format!("neg.{ty} {r}, {x}")),
                OpKind::Abs => b.ins(format!("abs.{ty} {r}, {x}")),
                OpKind::Not => b.ins(format!("not.b{bits} {r}, {x}")),
                OpKind::Relu => b.ins(format!("max.{ty} {r}, {x}, 0")),
                _ => return Err(self.unsupported(op, format!("on {dtype}"))),
            }
            return Ok(Operand::Reg(r));
        }
        if class == Class::F64 {
            match op.kind {
                OpKind::Neg => b.ins(format!("neg.f64 {r}, {x}")),
                OpKind::Abs => b.ins(format!("abs.f64 {r}, {x}")),
                OpKind::Sqrt => b.ins(format!("sqrt.rn.f64 {r}, {x}")),
                OpKind::Floor => b.ins(format!("cvt.rmi.f64.f64 {r}, {x}")),
                OpKind::Ceil => b.ins(format!("cvt.rpi.f64.f64 {r}, {x}")),
                OpKind::Round => b.ins(format!("cvt.rni.f64.f64 {r}, {x}")),
                OpKind::Relu => b.ins(format!("max.f64 {r}, {x}, 0d0000000000000000")),
                OpKind::Exp => f64_math::exp(b, r, x),
                OpKind::Log => f64_math::log(b, r, x),
                OpKind::Tanh => f64_math::tanh(b, r, x),
                OpKind::Rsqrt => f64_math::rsqrt(b, r, x),
                OpKind::Sigmoid => f64_math::sigmoid(b, r, x),
                OpKind::Silu => f64_math::silu(b, r, x),
                OpKind::Gelu => f64_math::gelu(b, r, x),
                _ => return Err(self.unsupported(op, "on f64")),
            }
            return Ok(Operand::Reg(r));
        }
        let log2e = Operand::f32(std::f32::consts::LOG2_E);
        match op.kind {
            OpKind::Neg => b.ins(format!("neg.f32 {r}, {x}")),
            OpKind::Abs => b.ins(format!("abs.f32 {r}, {x}")),
            // Integer rounding of a float: `cvt.rmi` (toward -inf), `.rpi` (+inf), `.rni`
            // (nearest, halves to even).
            OpKind::Floor => b.ins(format!("cvt.rmi.f32.f32 {r}, {x}")),
            OpKind::Ceil => b.ins(format!("cvt.rpi.f32.f32 {r}, {x}")),
            OpKind::Round => b.ins(format!("cvt.rni.f32.f32 {r}, {x}")),
            OpKind::Exp => {
                b.ins(format!("mul.f32 {r}, {x}, {log2e}"));
                b.ins(format!("ex2.approx.ftz.f32 {r}, {r}"));
            }
            OpKind::Log => {
                b.ins(format!("lg2.approx.ftz.f32 {r}, {x}"));
                b.ins(format!("mul.f32 {r}, {r}, {}", Operand::f32(std::f32::consts::LN_2)));
            }
            OpKind::Sqrt => b.ins(format!("sqrt.rn.f32 {r}, {x}")),
            OpKind::Rsqrt => b.ins(format!("rsqrt.approx.ftz.f32 {r}, {x}")),
            OpKind::Tanh => b.ins(format!("tanh.approx.f32 {r}, {x}")),
            OpKind::Relu => b.ins(format!("max.f32 {r}, {x}, 0f00000000")),
            OpKind::Sigmoid => sigmoid(b, r, x),
            OpKind::Silu => {
                let s = b.reg(Class::F32);
                sigmoid(b, s, x);
                b.ins(format!("mul.f32 {r}, {x}, {s}"));
            }
            OpKind::Gelu => {
                // 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))
                let t = b.reg(Class::F32);
                b.ins(format!("mul.f32 {t}, {x}, {x}"));
                b.ins(format!("fma.rn.f32 {t}, {t}, {}, 0f3F800000", Operand::f32(0.044715)));
                b.ins(format!("mul.f32 {t}, {t}, {x}"));
                b.ins(format!("mul.f32 {t}, {t}, {}", Operand::f32(0.797_884_6)));
                b.ins(format!("tanh.approx.f32 {t}, {t}"));
                b.ins(format!("add.f32 {t}, {t}, 0f3F800000"));
                b.ins(format!("mul.f32 {t}, {t}, {x}"));
                b.ins(format!("mul.f32 {r}, {t}, 0f3F000000"));
            }
            OpKind::Not => return Err(self.unsupported(op, "on floats")),
            _ => return Err(self.unsupported(op, "")),
        }
        Ok(Operand::Reg(r))
    }

    // ----- views and shared slots ------------------------------------------------------
}

/// `r = x ** e` on integers, wrapping: square-and-multiply over the exponent's bits below
/// its sign, in a loop of a fixed trip count (uniform over the CTA, so `bra.uni`; every
/// thread takes the same path whatever its exponent). A negative exponent is an error the
/// interpreter reports; here it gives the power of its low bits, as the CPU code does.
fn int_pow(b: &mut Builder, class: Class, ty: &str, bits: u32, r: Reg, x: Reg, e: Operand) {
    let (base, exp, prod, bit) = (b.reg(class), b.reg(class), b.reg(class), b.reg(class));
    let (count, odd, more) = (b.reg(Class::B32), b.reg(Class::Pred), b.reg(Class::Pred));
    b.ins(format!("mov.b{bits} {r}, 1"));
    b.ins(format!("mov.b{bits} {base}, {x}"));
    b.ins(format!("mov.b{bits} {exp}, {e}"));
    b.ins(format!("mov.u32 {count}, {}", bits - 1));
    let top = b.label("ipow");
    b.place_label(&top);
    b.ins(format!("and.b{bits} {bit}, {exp}, 1"));
    b.ins(format!("setp.ne.{ty} {odd}, {bit}, 0"));
    b.ins(format!("mul.lo.{ty} {prod}, {r}, {base}"));
    b.ins(format!("selp.b{bits} {r}, {prod}, {r}, {odd}"));
    b.ins(format!("mul.lo.{ty} {base}, {base}, {base}"));
    b.ins(format!("shr.u{bits} {exp}, {exp}, 1"));
    b.ins(format!("sub.u32 {count}, {count}, 1"));
    b.ins(format!("setp.ne.u32 {more}, {count}, 0"));
    b.ins_if(more, false, format!("bra.uni {top}"));
}

/// `r = x << n` or `x >> n` (arithmetic: every integer dtype is signed). PTX reads the
/// amount as `.u32` and clamps it to the width, which is Tessera's rule
/// (`frontend::arith::shl_i64`: every bit shifted out); a 64-bit amount is clamped before
/// it is narrowed, so that 2^32 + 1 does not shift by 1. `.u32` immediates are spelled
/// in range.
fn shift(b: &mut Builder, kind: OpKind, ty: &str, bits: u32, r: Reg, x: Reg, n: Operand) {
    let name = if kind == OpKind::Shl { format!("shl.b{bits}") } else { format!("shr.{ty}") };
    let amount = match n {
        Operand::Int(c) if (0..i64::from(bits)).contains(&c) => c.to_string(),
        Operand::Int(_) if kind == OpKind::Shl => return b.ins(format!("mov.b{bits} {r}, 0")),
        Operand::Int(_) => (bits - 1).to_string(),
        n if bits == 64 => {
            let wide = materialize(b, Class::B64, n);
            let (clamped, narrow) = (b.reg(Class::B64), b.reg(Class::B32));
            b.ins(format!("min.u64 {clamped}, {wide}, 64"));
            b.ins(format!("cvt.u32.u64 {narrow}, {clamped}"));
            narrow.to_string()
        }
        n => materialize(b, Class::B32, n).to_string(),
    };
    b.ins(format!("{name} {r}, {x}, {amount}"));
}

/// A constant divisor that [`floor_div_by_constant`] takes: positive and not a power of
/// two (those are shifts and masks).
fn wide_constant_divisor(b: Operand) -> Option<i64> {
    b.as_int().filter(|&c| c > 1 && c.count_ones() != 1)
}

/// The multiplier and shift that divide a 63-bit unsigned value by `c` (Granlund and
/// Montgomery, "Division by invariant integers using multiplication", theorem 4.2):
/// with `l = ceil(log2 c)` and `m = floor(2^(63+l) / c) + 1`, `floor(n / c) =
/// floor(m n / 2^(63+l))` for every `n < 2^63`, and `m < 2^64` because `c > 2^(l-1)`.
pub(super) fn reciprocal_of(c: i64) -> (u64, u32) {
    debug_assert!(c > 1 && c.count_ones() != 1);
    let l = 64 - (c as u64 - 1).leading_zeros();
    let m = (1u128 << (63 + l)) / c as u128 + 1;
    (u64::try_from(m).expect("the multiplier fits 64 bits"), l - 1)
}

/// `q = floor(x / c)` for a signed 64-bit `x` and a constant `c` of [`wide_constant_divisor`].
/// For negative `x`, `floor(x / c) = !floor(!x / c)` with `!x >= 0`, so one unsigned
/// division of `x ^ (x >> 63)` serves both signs.
fn floor_div_by_constant(b: &mut Builder, q: Reg, x: Reg, c: i64) {
    let (m, shift) = reciprocal_of(c);
    let sign = b.reg(Class::B64);
    b.ins(format!("shr.s64 {sign}, {x}, 63"));
    b.ins(format!("xor.b64 {q}, {x}, {sign}"));
    b.ins(format!("mul.hi.u64 {q}, {q}, {m:#x}"));
    b.ins(format!("shr.u64 {q}, {q}, {shift}"));
    b.ins(format!("xor.b64 {q}, {q}, {sign}"));
}

#[cfg(test)]
mod tests {
    use super::reciprocal_of;

    /// The PTX sequence of `floor_div_by_constant`, step by step.
    fn floor_div(x: i64, c: i64) -> i64 {
        let (m, shift) = reciprocal_of(c);
        let sign = x >> 63;
        let n = (x ^ sign) as u64;
        let q = (((n as u128 * m as u128) >> 64) as u64) >> shift;
        q as i64 ^ sign
    }

    #[test]
    fn the_reciprocal_divides_every_64_bit_value_like_floor_division() {
        let divisors = [3, 5, 6, 7, 9, 10, 11, 12, 13, 25, 100, 641, 1000, 6_700_417, (1 << 31) - 1, (1 << 32) + 1];
        let divisors = divisors.into_iter().chain([i64::MAX, i64::MAX - 1, (1 << 62) + 1, (1 << 62) - 1]);
        // A deterministic spread of dividends: edges, and values of every magnitude.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut xs = vec![0, 1, -1, 2, -2, i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1];
        for _ in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            xs.push((state as i64) >> (state % 64));
        }
        for c in divisors {
            for k in [-2i64, -1, 0, 1, 2, 3, 1000] {
                xs.push(c.wrapping_mul(k));
                xs.push(c.wrapping_mul(k).wrapping_sub(1));
                xs.push(c.wrapping_mul(k).wrapping_add(1));
            }
            for &x in &xs {
                assert_eq!(floor_div(x, c), x.div_euclid(c), "floor({x} / {c})");
            }
        }
    }
}
