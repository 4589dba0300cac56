//! The built-in calls of a kernel (`tile.load`, `tile.dot`, `tile.cast`, reductions, ...)
//! as Graph IR.

use tessera_frontend::check::{DType, Dim, ElemType, Ty};
use tessera_frontend::syntax::ast::*;

use super::{unsupported, Lower, LowerError, Val, R};
use crate::ir::policy;
use crate::ir::*;

impl Lower<'_, '_> {
    pub(super) fn call(&mut self, e: ExprId, func: ExprId, args: &[Arg]) -> R<Val> {
        let loc = self.eloc(e);
        let path = match self.ty_of(func) {
            Ty::Builtin(p) => *p,
            other => return unsupported(format!("calling {other} in a kernel"), loc.range),
        };
        let positional: Vec<ExprId> = args.iter().filter(|a| a.name.is_none()).map(|a| a.value).collect();
        let kw = |name: &str| args.iter().find(|a| a.name.as_ref().is_some_and(|(n, _)| n == name)).map(|a| a.value);
        let arg = |name: &str, pos: usize| kw(name).or_else(|| positional.get(pos).copied());
        let name = path.strip_prefix("tile.").unwrap_or(path);
        let unary = |k: &str| -> Option<OpKind> {
            Some(match k {
                "exp" => OpKind::Exp,
                "log" => OpKind::Log,
                "sqrt" => OpKind::Sqrt,
                "rsqrt" => OpKind::Rsqrt,
                "tanh" => OpKind::Tanh,
                "sigmoid" => OpKind::Sigmoid,
                "relu" => OpKind::Relu,
                "gelu" => OpKind::Gelu,
                "silu" => OpKind::Silu,
                "abs" => OpKind::Abs,
                "floor" => OpKind::Floor,
                "ceil" => OpKind::Ceil,
                "round" => OpKind::Round,
                "neg" => OpKind::Neg,
                _ => return None,
            })
        };
        // 2^x and log2(x) through e^x and ln(x): `e^(x ln 2)`, `ln(x) / ln 2`.
        if matches!(name, "exp2" | "log2") {
            let x = arg("x", 0).ok_or_else(|| LowerError { message: "missing operand".into(), range: loc.range })?;
            let v = self.value(x)?;
            let v = self.operand(v, x)?;
            let t = self.result_type(e)?;
            let v = self.coerce(v, &t, &loc)?;
            let ln2 = self.const_scalar(std::f64::consts::LN_2, DType::F32, &loc);
            let ln2 = self.coerce(ln2, &t, &loc)?;
            let r = if name == "exp2" {
                let scaled = self.b.op1(OpKind::Mul, vec![v, ln2], t.clone(), vec![], &loc);
                self.b.op1(OpKind::Exp, vec![scaled], t, vec![], &loc)
            } else {
                let ln = self.b.op1(OpKind::Log, vec![v], t.clone(), vec![], &loc);
                self.b.op1(OpKind::Div, vec![ln, ln2], t, vec![], &loc)
            };
            self.mark_saturating(e, r);
            return Ok(Val::One(r));
        }
        if let Some(kind) = unary(name) {
            let x = arg("x", 0).ok_or_else(|| LowerError { message: "missing operand".into(), range: loc.range })?;
            let v = self.value(x)?;
            let v = self.operand(v, x)?;
            let t = self.result_type(e)?;
            let v = self.coerce(v, &t, &loc)?;
            let r = self.b.op1(kind, vec![v], t, vec![], &loc);
            self.mark_saturating(e, r);
            return Ok(Val::One(r));
        }
        match name {
            "context" => Ok(Val::Many(vec![])),
            "load" => {
                let src = arg("src", 0).unwrap();
                if kw("rows").is_some() {
                    return unsupported("tile.load(t, rows=, cols=)", loc.range);
                }
                let v = self.value(src)?;
                let t = self.result_type(e)?;
                match self.vty(v) {
                    Type::View(_) => {
                        let mut operands = vec![v];
                        let user_mask = match kw("mask") {
                            Some(m) => Some(self.value(m)?),
                            None => None,
                        };
                        if let Some(m) = user_mask.or(self.mask) {
                            let m = self.coerce(m, &Type::tile(t.dims().to_vec(), DType::Bool), &loc)?;
                            operands.push(m);
                        }
                        let mut attrs = vec![];
                        if let Some(o) = kw("other") {
                            // The padding is a constant of the load; one known only at run
                            // time must not quietly become 0.
                            let value = match self.ty_of(o) {
                                Ty::Float(Some(f)) => Some(f.get()),
                                Ty::Int(Some(d)) => d.as_const().map(|c| c as f64),
                                Ty::Bool(Some(b)) => Some(f64::from(u8::from(*b))),
                                _ => None,
                            };
                            let Some(value) = value else {
                                return unsupported(
                                    "a load's `other=` that is not a constant number (`0.0`, `-INF`, \
                                     `float(\"-inf\")`): the padding of a partial tile is fixed when the kernel is \
                                     compiled; select with `tile.where` for a value known only at run time"
                                        .to_string(),
                                    self.body.expr_range(o),
                                );
                            };
                            attrs.push(("other", Attr::float(value)));
                        }
                        Ok(Val::One(self.b.op1(OpKind::Load, operands, t, attrs, &loc)))
                    }
                    Type::Smem(_) => Ok(Val::One(self.b.op1(OpKind::LoadShared, vec![v], t, vec![], &loc))),
                    _ => Ok(Val::One(v)),
                }
            }
            "store" | "atomic_add" => {
                let dst = arg("dst", 0).unwrap();
                let val = arg("value", 1).unwrap();
                let v = self.value(val)?;
                // `mask=` narrows the enclosing masked region, if any, for this store.
                let saved = self.mask;
                if let Some(m) = kw("mask") {
                    let m = self.value(m)?;
                    let dims = match self.vty(v) {
                        Type::Tile(t) => t.dims,
                        _ => self.vty(m).dims().to_vec(),
                    };
                    let mt = Type::tile(dims, DType::Bool);
                    let m = self.coerce(m, &mt, &loc)?;
                    self.mask = Some(match saved {
                        Some(outer) => {
                            let outer = self.coerce(outer, &mt, &loc)?;
                            self.b.op1(OpKind::And, vec![outer, m], mt, vec![], &loc)
                        }
                        None => m,
                    });
                }
                let stored = self.store_to(dst, v, val, name == "atomic_add");
                self.mask = saved;
                stored?;
                Ok(Val::Many(vec![]))
            }
            "zeros" | "full" => {
                let t = self.result_type(e)?;
                let value = if name == "zeros" {
                    0.0
                } else {
                    match self.ty_of(arg("value", 1).unwrap()) {
                        Ty::Float(Some(f)) => f.get(),
                        Ty::Int(Some(d)) if d.is_const() => d.as_const().unwrap() as f64,
                        _ => {
                            let v = self.value(arg("value", 1).unwrap())?;
                            return Ok(Val::One(self.coerce(v, &t, &loc)?));
                        }
                    }
                };
                Ok(Val::One(self.b.op1(OpKind::Full, vec![], t, vec![("value", Attr::float(value))], &loc)))
            }
            "rand" => {
                let t = self.result_type(e)?;
                let seed = self.value(arg("seed", 1).unwrap())?;
                let seed = self.coerce(seed, &Type::Index, &loc)?;
                let mut operands = vec![seed];
                let offsets = match self.expr(arg("offsets", 2).unwrap())? {
                    Val::One(v) => vec![v],
                    Val::Many(vs) => vs,
                };
                for o in offsets {
                    operands.push(self.coerce(o, &Type::Index, &loc)?);
                }
                Ok(Val::One(self.b.op1(OpKind::Rand, operands, t, vec![], &loc)))
            }
            "arange" => {
                let t = self.result_type(e)?;
                Ok(Val::One(self.b.op1(OpKind::Arange, vec![], t, vec![], &loc)))
            }
            "dot" | "mma" => {
                let (ae, be) = (arg("a", 0).unwrap(), arg("b", 1).unwrap());
                let a = self.value(ae)?;
                let a = self.operand(a, ae)?;
                let b = self.value(be)?;
                let b = self.operand(b, be)?;
                // `tile.mma(..., accumulator=acc)`, or Triton's `tile.dot(a, b, acc)`.
                let acc_arg = kw("accumulator").or_else(|| kw("acc")).or_else(|| positional.get(2).copied());
                let acc = match acc_arg {
                    Some(c) if matches!(self.ty_of(c), Ty::Tile(_)) => Some(self.value(c)?),
                    _ => None,
                };
                let policy = self.accum_policy(&[ae, be]);
                Ok(Val::One(self.dot(e, a, b, acc, policy)?))
            }
            "cast" => {
                let x = arg("t", 0).unwrap();
                let v = self.value(x)?;
                let v = self.operand(v, x)?;
                let t = self.result_type(e)?;
                let elem = policy::elem_of(self.ty_of(e)).cloned();
                // `uniform=`: a stochastic conversion's draws, given (the graph plan's casts).
                let stochastic = elem.as_ref().is_some_and(policy::wants_stochastic)
                    && matches!(t, Type::Tile(_))
                    && self.vty(v).dtype().is_some_and(DType::is_float);
                if let Some(u) = kw("uniform").filter(|_| stochastic) {
                    let u = self.value(u)?;
                    let u = self.operand(u, e)?;
                    let mut attrs = vec![(policy::ROUNDING, Attr::Str(policy::STOCHASTIC.into()))];
                    if elem.as_ref().is_some_and(policy::wants_saturate) {
                        attrs.push((policy::SATURATE, Attr::Bool(true)));
                    }
                    return Ok(Val::One(self.b.op1(OpKind::Cast, vec![v, u], t, attrs, &loc)));
                }
                Ok(Val::One(self.convert(v, t, elem.as_ref(), None, &loc)))
            }
            "transpose" => {
                let x = arg("t", 0).unwrap();
                let v = self.value(x)?;
                let v = self.operand(v, x)?;
                let t = self.result_type(e)?;
                Ok(Val::One(self.b.op1(OpKind::Transpose, vec![v], t, vec![], &loc)))
            }
            "broadcast" => {
                let x = arg("t", 0).unwrap();
                let v = self.value(x)?;
                let v = self.operand(v, x)?;
                let t = self.result_type(e)?;
                Ok(Val::One(self.coerce(v, &t, &loc)?))
            }
            "maximum" | "minimum" | "pow" => {
                let (a, b) = (self.value(arg("a", 0).unwrap())?, self.value(arg("b", 1).unwrap())?);
                let (a, b) = (self.operand(a, e)?, self.operand(b, e)?);
                let t = self.result_type(e)?;
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let k = match name {
                    "maximum" => OpKind::Max,
                    "minimum" => OpKind::Min,
                    _ => OpKind::Pow,
                };
                Ok(Val::One(self.b.op1(k, vec![a, b], t, vec![], &loc)))
            }
            "max" | "min" if positional.len() == 2 && path == name => {
                let (a, b) = (self.value(positional[0])?, self.value(positional[1])?);
                let t = self.result_type(e)?;
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let k = if name == "max" { OpKind::Max } else { OpKind::Min };
                Ok(Val::One(self.b.op1(k, vec![a, b], t, vec![], &loc)))
            }
            "where" => {
                let c = self.value(arg("cond", 0).unwrap())?;
                let (a, b) = (self.value(arg("a", 1).unwrap())?, self.value(arg("b", 2).unwrap())?);
                let t = self.result_type(e)?;
                let (a, b) = (self.coerce(a, &t, &loc)?, self.coerce(b, &t, &loc)?);
                let c = self.coerce(c, &Type::tile(t.dims().to_vec(), DType::Bool), &loc)?;
                Ok(Val::One(self.b.op1(OpKind::Select, vec![c, a, b], t, vec![], &loc)))
            }
            "row_max" | "row_sum" | "sum" | "max" | "min" => {
                let x = arg("t", 0).unwrap();
                let v = self.value(x)?;
                let v = self.operand(v, x)?;
                let rank = self.vty(v).dims().len() as i64;
                let axis = if name.starts_with("row_") {
                    rank - 1
                } else {
                    match kw("axis").or_else(|| positional.get(1).copied()).map(|a| self.body.expr(a).clone()) {
                        Some(Expr::Int(a)) => a.rem_euclid(rank),
                        Some(Expr::Unary { op: UnaryOp::Neg, operand }) => match self.body.expr(operand) {
                            Expr::Int(a) => (-a).rem_euclid(rank),
                            _ => rank - 1,
                        },
                        _ => rank - 1,
                    }
                };
                let kind = if name.ends_with("sum") {
                    "sum"
                } else if name.ends_with("max") {
                    "max"
                } else {
                    "min"
                };
                let t = self.result_type(e)?;
                let mut attrs = vec![("kind", Attr::Str(kind.into())), ("axis", Attr::Int(axis))];
                if let Some(acc) = policy::elem_of(self.ty_of(x)).and_then(ElemType::accum).filter(|_| kind == "sum") {
                    attrs.push((policy::ACC, Attr::DType(acc)));
                }
                Ok(Val::One(self.b.op1(OpKind::Reduce, vec![v], t, attrs, &loc)))
            }
            "causal_mask" | "mask_causal" => {
                let s = self.value(arg("s", 0).unwrap())?;
                let q = self.value(arg("q_off", 1).unwrap())?;
                let k = self.value(arg("k_off", 2).unwrap())?;
                let t = self.result_type(e)?;
                Ok(Val::One(self.b.op1(OpKind::CausalMask, vec![s, q, k], t, vec![], &loc)))
            }
            "softmax_online" => {
                let s = self.value(arg("s", 0).unwrap())?;
                let st = self.vty(s);
                let rows = st.dims()[0].clone();
                let row_ty = Type::tile(vec![rows], DType::F32);
                let m = self.b.op1(
                    OpKind::Reduce,
                    vec![s],
                    row_ty.clone(),
                    vec![("kind", Attr::Str("max".into())), ("axis", Attr::Int(1))],
                    &loc,
                );
                let mb = self.coerce_row(m, &st, &loc)?;
                let diff = self.b.op1(OpKind::Sub, vec![s, mb], st.clone(), vec![], &loc);
                let p = self.b.op1(OpKind::Exp, vec![diff], st.clone(), vec![], &loc);
                let l = self.b.op1(
                    OpKind::Reduce,
                    vec![p],
                    row_ty,
                    vec![("kind", Attr::Str("sum".into())), ("axis", Attr::Int(1))],
                    &loc,
                );
                Ok(Val::Many(vec![p, m, l]))
            }
            "softmax_accumulate" => {
                let get = |this: &mut Self, n: &str, i: usize| -> R<ValueId> { this.value(arg(n, i).unwrap()) };
                let (acc, m, l, p, v, mc, lc) = (
                    get(self, "acc", 0)?,
                    get(self, "m", 1)?,
                    get(self, "l", 2)?,
                    get(self, "p", 3)?,
                    get(self, "v", 4)?,
                    get(self, "m_c", 5)?,
                    get(self, "l_c", 6)?,
                );
                let v = self.operand(v, arg("v", 4).unwrap())?;
                let row = self.vty(m);
                let m_new = self.b.op1(OpKind::Max, vec![m, mc], row.clone(), vec![], &loc);
                let d1 = self.b.op1(OpKind::Sub, vec![m, m_new], row.clone(), vec![], &loc);
                let alpha = self.b.op1(OpKind::Exp, vec![d1], row.clone(), vec![], &loc);
                let d2 = self.b.op1(OpKind::Sub, vec![mc, m_new], row.clone(), vec![], &loc);
                let beta = self.b.op1(OpKind::Exp, vec![d2], row.clone(), vec![], &loc);
                let al = self.b.op1(OpKind::Mul, vec![alpha, l], row.clone(), vec![], &loc);
                let bl = self.b.op1(OpKind::Mul, vec![beta, lc], row.clone(), vec![], &loc);
                let l_new = self.b.op1(OpKind::Add, vec![al, bl], row, vec![], &loc);
                let acc_ty = self.vty(acc);
                let vdt = self.vty(v).dtype().unwrap();
                let pt = self.vty(p);
                let pc = self.b.op1(OpKind::Cast, vec![p], Type::tile(pt.dims().to_vec(), vdt), vec![], &loc);
                let zero = self.b.op1(OpKind::Full, vec![], acc_ty.clone(), vec![("value", Attr::float(0.0))], &loc);
                let pv = self.b.op1(OpKind::Dot, vec![pc, v, zero], acc_ty.clone(), vec![], &loc);
                let ab = self.coerce_row(alpha, &acc_ty, &loc)?;
                let bb = self.coerce_row(beta, &acc_ty, &loc)?;
                let scaled = self.b.op1(OpKind::Mul, vec![ab, acc], acc_ty.clone(), vec![], &loc);
                let pvs = self.b.op1(OpKind::Mul, vec![bb, pv], acc_ty.clone(), vec![], &loc);
                let acc_new = self.b.op1(OpKind::Add, vec![scaled, pvs], acc_ty, vec![], &loc);
                Ok(Val::Many(vec![acc_new, m_new, l_new]))
            }
            "alloc_shared" => {
                let t = self.result_type(e)?;
                Ok(Val::One(self.b.op1(OpKind::AllocShared, vec![], t, vec![], &loc)))
            }
            "cp_async" => {
                let dst = self.value(arg("dst", 0).unwrap())?;
                let src = self.value(arg("src", 1).unwrap())?;
                self.b.op(OpKind::CpAsync, vec![dst, src], vec![], vec![], &loc);
                Ok(Val::Many(vec![]))
            }
            "barrier" => {
                self.b.op(OpKind::Barrier, vec![], vec![], vec![], &loc);
                Ok(Val::Many(vec![]))
            }
            "program_id" | "num_programs" => {
                let axis = match kw("axis").or_else(|| positional.first().copied()).map(|a| self.body.expr(a).clone()) {
                    Some(Expr::Int(a)) => a,
                    _ => 0,
                };
                let k = if name == "program_id" { OpKind::ProgramId } else { OpKind::NumPrograms };
                Ok(Val::One(self.b.op1(k, vec![], Type::Index, vec![("axis", Attr::Int(axis))], &loc)))
            }
            "linear_id" => {
                self.uses_linear_id = true;
                let t = self.result_type(e)?;
                let block = self.dim_value(&Dim::sym("BLOCK"), &loc)?;
                let pid = self.b.op1(OpKind::ProgramId, vec![], Type::Index, vec![("axis", Attr::Int(0))], &loc);
                let base = self.b.op1(OpKind::Mul, vec![pid, block], Type::Index, vec![], &loc);
                let base_t = self.coerce(base, &t, &loc)?;
                let ar = self.b.op1(OpKind::Arange, vec![], t.clone(), vec![], &loc);
                Ok(Val::One(self.b.op1(OpKind::Add, vec![base_t, ar], t, vec![], &loc)))
            }
            "float" | "int" => {
                // A constant the checker folded (`float("-inf")`, `float(2)`).
                if let (Ty::Float(Some(v)), "float") = (self.ty_of(e), name) {
                    return Ok(Val::One(self.const_scalar(v.get(), DType::F32, &loc)));
                }
                let x = self.value(positional[0])?;
                let t = self.result_type(e)?;
                Ok(Val::One(self.coerce(x, &t, &loc)?))
            }
            "cdiv" => {
                let (a, b) = (self.value(positional[0])?, self.value(positional[1])?);
                let one = self.const_index(1, &loc);
                let s = self.b.op1(OpKind::Add, vec![a, b], Type::Index, vec![], &loc);
                let s = self.b.op1(OpKind::Sub, vec![s, one], Type::Index, vec![], &loc);
                Ok(Val::One(self.b.op1(OpKind::FloorDiv, vec![s, b], Type::Index, vec![], &loc)))
            }
            _ => unsupported(format!("`{path}` in a kernel"), loc.range),
        }
    }
}
