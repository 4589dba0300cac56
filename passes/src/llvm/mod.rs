//! LLVM IR generation from CPU Tile IR.
//!
//! The output is LLVM 14 IR as text (typed pointers), deterministic for a given Tile IR,
//! with the Tile IR location of every line in `TargetCode::line_locs`. It is target
//! independent: the CPU backend adds the host's CPU name and features when it compiles.
//!
//! # Calling convention
//!
//! For a kernel `k` the module defines:
//!
//! - `i32 @k(<slots>, i64 %pid.x, i64 %pid.y, i64 %pid.z, i64 %grid.x, i64 %grid.y,
//!   i64 %grid.z)` runs ONE tile program. `<slots>` are the ABI slots of
//!   `crate::abi::KernelAbi::slots` as typed parameters: a tensor is a pointer to its
//!   storage (`float*` for f32 and tf32, `double*`, `i16*` for bf16 and f16 bits, `i8*`
//!   for fp8, int8, int4 and bool, `i32*`, `i64*`) followed by an `i64` per dim; an
//!   f32-class scalar is a `float`, f64 a `double`, bool an `i32` (0 or 1), integer and
//!   index scalars `i64`. Tensor pointers are `noalias`: distinct tensor arguments must
//!   not overlap. Returns 0, or the 1-based code of the first runtime error (integer
//!   division by zero, a negative integer power) in `@"k.errors"`.
//! - `i32 @"k.grid"(i64* %slots, i64 %grid.x, i64 %grid.y, i64 %grid.z, i64 %begin,
//!   i64 %end)` runs the programs of the linear grid points `begin..end` (point `l` is
//!   `x = l % gx`, `y = (l / gx) % gy`, `z = l / (gx * gy)`), stopping at the first one
//!   that fails and returning its code. `slots` holds one 8-byte word per ABI slot:
//!   pointers and i64 as themselves, i32 zero-extended, f32 as its bits in the low 32
//!   bits, f64 as its bits. Disjoint ranges may run on different threads at once.
//!   `TargetCode::entry` names this launcher.
//! - `i8* @"k.error"(i32 %code)`: the message of an error code (a C string; null for a
//!   code that is not one).
//! - `i64 @"k.stack"()`: the bytes of stack one program needs for its tile buffers.
//!
//! # Code shape
//!
//! Tiles are lazy expressions or memory (see `tiles`): elementwise chains, broadcasts
//! and loads fuse into the loop of the store, reduction or dot consuming them, processed
//! in `<16 x float>` chunks (zmm registers; functions ask for 512-bit vectors). Loads and
//! stores check once per tile whether the whole window is inside the tensor and then use
//! plain vector accesses; only windows on an edge take the `llvm.masked.*` path. Loads
//! of read-only tensors used by several ops are read in place (no copy) when inside the
//! tensor. `tile.dot` is a register-blocked micro-kernel (`dot`). Transcendental
//! functions are branch-free polynomial approximations (`numerics`).

mod builder;
mod dot;
mod emit;
mod numerics;
mod plan;
mod policy;
mod tiles;

use std::rc::Rc;

use tessera_frontend::check::DType;

use crate::abi::{scalar_slot, KernelAbi, Slot};
use crate::error::LowerError;
use crate::ir::{Func, Level, Loc, Type};
use crate::target::Target;
use crate::target::TargetCode;

use builder::{Elem, FnBuilder, Line, VTy};
use emit::{Lowerer, Val};
use numerics::Storage;
use tiles::TensorV;

/// Programs needing more stack than this (tile buffers) are rejected: the runtime's
/// threads could not run them.
pub const MAX_STACK_BYTES: u64 = 1 << 30;

/// The launcher symbol of a kernel (what `TargetCode::entry` names).
pub fn launcher_name(kernel: &str) -> String {
    format!("{kernel}.grid")
}

/// The function giving the message of an error code.
pub fn error_fn_name(kernel: &str) -> String {
    format!("{kernel}.error")
}

/// The function giving the stack bytes one program needs.
pub fn stack_fn_name(kernel: &str) -> String {
    format!("{kernel}.stack")
}

pub fn emit(func: &Func) -> Result<TargetCode, LowerError> {
    let fail = |message: String| LowerError { message, range: func.loc.range };
    if func.level != Level::Tile {
        return Err(fail(format!("`{}` is {} IR: LLVM IR is generated from Tile IR", func.name, func.level.name())));
    }
    let abi = KernelAbi::of(func).map_err(fail)?;
    let name = func.name.to_string();
    let mut b = FnBuilder::new();
    b.loc = Some(func.loc.clone());
    let pid = [b.fresh("pid.x"), b.fresh("pid.y"), b.fresh("pid.z")];
    let grid = [b.fresh("grid.x"), b.fresh("grid.y"), b.fresh("grid.z")];
    let err_slot = b.fresh("err.slot");
    // Parameters: the ABI slots, typed.
    let mut params: Vec<String> = Vec::new();
    let mut param_vals: Vec<(usize, ParamVal)> = Vec::new();
    for (i, &p) in func.params.iter().enumerate() {
        let pname = func.values[p.0 as usize].name.clone().map_or(format!("arg{i}"), |n| n.to_string());
        match func.ty(p) {
            Type::Tensor(t) => {
                let st = Storage::of_tensor(t.dtype);
                let ptr = b.fresh(&pname);
                params.push(format!("{}* noalias {ptr}", st.elem().ir()));
                let mut dims = Vec::new();
                for (d, dim) in t.dims.iter().enumerate() {
                    let dn = b.fresh(&format!("{pname}.d{d}"));
                    params.push(format!("i64 {dn}"));
                    dims.push(dim.as_const().map_or(dn, |c| c.to_string()));
                }
                param_vals.push((i, ParamVal::Tensor { ptr, dims, st, dtype: t.dtype }));
            }
            Type::Scalar(d) => {
                let v = b.fresh(&pname);
                let ty = match scalar_slot(*d) {
                    Slot::F32 => "float",
                    Slot::F64 => "double",
                    Slot::I32 => "i32",
                    _ => "i64",
                };
                params.push(format!("{ty} {v}"));
                param_vals.push((i, ParamVal::Scalar { v, dtype: *d }));
            }
            Type::Index => {
                let v = b.fresh(&pname);
                params.push(format!("i64 {v}"));
                param_vals.push((i, ParamVal::Index(v)));
            }
            other => return Err(fail(format!("parameter `{pname}` has type {other}, which a kernel cannot take"))),
        }
    }
    for v in pid.iter().chain(&grid) {
        params.push(format!("i64 {v}"));
    }
    let signature = params.clone();
    b.emit(format!("{err_slot} = alloca i32, align 4"));
    b.emit(format!("store i32 0, i32* {err_slot}"));
    let mut l = Lowerer::new(func, b, pid, grid);
    l.err_slot = err_slot;
    for (i, pv) in param_vals {
        let p = func.params[i];
        let val = match pv {
            ParamVal::Tensor { ptr, dims, st, dtype } => {
                let rank = dims.len();
                let mut strides = vec!["1".to_string(); rank];
                for d in (0..rank.saturating_sub(1)).rev() {
                    strides[d] = l.b.mul(&strides[d + 1], &dims[d + 1]);
                }
                Val::Tensor(Rc::new(TensorV { ptr, dims, strides, st, dtype, param: i }))
            }
            ParamVal::Scalar { v, dtype } => {
                let s = match scalar_slot(dtype) {
                    Slot::F32 => numerics::round_f32(&mut l.b, dtype, VTy::scalar(Elem::F32), &v),
                    Slot::I32 => l.b.val("flag", format!("icmp ne i32 {v}, 0")),
                    Slot::F64 => v,
                    _ => numerics::cast(&mut l.b, None, Some(dtype), 0, &v),
                };
                Val::Scalar(s)
            }
            ParamVal::Index(v) => Val::Scalar(v),
        };
        l.set(p, val);
    }
    l.region(&func.body)?;
    if !l.b.blocks[l.b.cur].terminated {
        let e = l.b.val("err", format!("load i32, i32* {}", l.err_slot));
        l.b.terminate(format!("ret i32 {e}"));
    }
    let errors = std::mem::take(&mut l.errors);
    let stack = l.b.stack_bytes;
    if stack > MAX_STACK_BYTES {
        return Err(fail(format!(
            "one tile program of `{name}` needs {} MiB of tile buffers, more than the CPU backend allows ({} MiB): \
             choose smaller tiles",
            stack >> 20,
            MAX_STACK_BYTES >> 20
        )));
    }
    let (body, decls) = l.b.finish();

    // ----- the module ------------------------------------------------------------------
    let mut out = Module::default();
    out.line(format!("; Tessera CPU kernel `{name}`: LLVM 14 IR (typed pointers)."), None);
    out.line(
        format!("; @\"{name}\" runs one tile program; @\"{}\" runs a range of grid points.", launcher_name(&name)),
        None,
    );
    out.line(format!("source_filename = \"{name}\""), None);
    out.line(String::new(), None);
    let err_sym = global(&format!("{name}.errors"));
    let mut entries = Vec::new();
    for (i, msg) in errors.iter().enumerate() {
        let bytes = msg.len() + 1;
        let sym = global(&format!("{name}.error.{i}"));
        out.line(format!("{sym} = private unnamed_addr constant [{bytes} x i8] c\"{}\\00\"", escape(msg)), None);
        entries.push(format!("i8* getelementptr inbounds ([{bytes} x i8], [{bytes} x i8]* {sym}, i64 0, i64 0)"));
    }
    if entries.is_empty() {
        out.line(format!("{err_sym} = private constant [0 x i8*] zeroinitializer"), None);
    } else {
        out.line(format!("{err_sym} = private constant [{} x i8*] [{}]", entries.len(), entries.join(", ")), None);
    }
    out.line(String::new(), None);
    let fsym = global(&name);
    out.line(format!("define i32 {fsym}({}) #0 {{", signature.join(", ")), Some(func.loc.clone()));
    for Line { text, loc } in body {
        out.line(text, loc);
    }
    out.line("}".into(), None);
    out.line(String::new(), None);
    launcher(&mut out, &name, &abi, func);
    out.line(String::new(), None);
    let n = errors.len();
    out.line(format!("define i8* {}(i32 %code) #0 {{", global(&error_fn_name(&name))), None);
    out.line("entry:".into(), None);
    out.line("  %index = sub i32 %code, 1".into(), None);
    out.line(format!("  %known = icmp ult i32 %index, {n}"), None);
    out.line("  br i1 %known, label %get, label %none".into(), None);
    out.line("get:".into(), None);
    out.line("  %i = zext i32 %index to i64".into(), None);
    out.line(format!("  %p = getelementptr [{n} x i8*], [{n} x i8*]* {err_sym}, i64 0, i64 %i"), None);
    out.line("  %m = load i8*, i8** %p, align 8".into(), None);
    out.line("  ret i8* %m".into(), None);
    out.line("none:".into(), None);
    out.line("  ret i8* null".into(), None);
    out.line("}".into(), None);
    out.line(String::new(), None);
    out.line(format!("define i64 {}() #0 {{", global(&stack_fn_name(&name))), None);
    out.line(format!("  ret i64 {stack}"), None);
    out.line("}".into(), None);
    out.line(String::new(), None);
    for d in decls.values() {
        out.line(d.clone(), None);
    }
    out.line(String::new(), None);
    out.line(
        "attributes #0 = { nounwind \"prefer-vector-width\"=\"512\" \"min-legal-vector-width\"=\"512\" }".into(),
        None,
    );
    Ok(TargetCode {
        target: Target::Cpu,
        entry: launcher_name(&name),
        text: out.text,
        line_locs: out.locs,
        abi,
        smem_bytes: 0,
    })
}

enum ParamVal {
    Tensor { ptr: String, dims: Vec<String>, st: Storage, dtype: DType },
    Scalar { v: String, dtype: DType },
    Index(String),
}

#[derive(Default)]
struct Module {
    text: String,
    locs: Vec<Option<Loc>>,
}

impl Module {
    fn line(&mut self, text: String, loc: Option<Loc>) {
        self.text.push_str(&text);
        self.text.push('\n');
        self.locs.push(loc);
    }
}

/// `@"name"` (quoted: kernel names may contain dots in derived symbols).
fn global(name: &str) -> String {
    format!("@\"{}\"", escape(name))
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// `@"k.grid"`: unpacks the slot words and runs a range of grid points.
fn launcher(out: &mut Module, name: &str, abi: &KernelAbi, func: &Func) {
    let loc = Some(func.loc.clone());
    let slots = abi.slots();
    out.line(
        format!(
            "define i32 {}(i64* %slots, i64 %grid.x, i64 %grid.y, i64 %grid.z, i64 %begin, i64 %end) #0 {{",
            global(&launcher_name(name))
        ),
        loc.clone(),
    );
    out.line("entry:".into(), None);
    // The typed pointer of each tensor's pointer slot, in order.
    let mut ptr_types = Vec::new();
    for &p in &func.params {
        if let Type::Tensor(t) = func.ty(p) {
            ptr_types.push(format!("{}*", Storage::of_tensor(t.dtype).elem().ir()));
        }
    }
    let mut ptr_types = ptr_types.into_iter();
    let mut args = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        out.line(format!("  %w{i}.p = getelementptr i64, i64* %slots, i64 {i}"), loc.clone());
        out.line(format!("  %w{i} = load i64, i64* %w{i}.p, align 8"), loc.clone());
        let arg = match s {
            Slot::Pointer => {
                let ty = ptr_types.next().unwrap_or_else(|| "i8*".into());
                out.line(format!("  %a{i} = inttoptr i64 %w{i} to {ty}"), loc.clone());
                format!("{ty} %a{i}")
            }
            Slot::I64 => format!("i64 %w{i}"),
            Slot::I32 => {
                out.line(format!("  %a{i} = trunc i64 %w{i} to i32"), loc.clone());
                format!("i32 %a{i}")
            }
            Slot::F32 => {
                out.line(format!("  %t{i} = trunc i64 %w{i} to i32"), loc.clone());
                out.line(format!("  %a{i} = bitcast i32 %t{i} to float"), loc.clone());
                format!("float %a{i}")
            }
            Slot::F64 => {
                out.line(format!("  %a{i} = bitcast i64 %w{i} to double"), loc.clone());
                format!("double %a{i}")
            }
        };
        args.push(arg);
    }
    for l in [
        "  %go = icmp slt i64 %begin, %end",
        "  br i1 %go, label %loop, label %done",
        "loop:",
        "  %l = phi i64 [ %begin, %entry ], [ %l.next, %next ]",
        "  %x = urem i64 %l, %grid.x",
        "  %t = udiv i64 %l, %grid.x",
        "  %y = urem i64 %t, %grid.y",
        "  %z = udiv i64 %t, %grid.y",
    ] {
        out.line(l.into(), if l.ends_with(':') { None } else { loc.clone() });
    }
    args.extend(["i64 %x", "i64 %y", "i64 %z", "i64 %grid.x", "i64 %grid.y", "i64 %grid.z"].map(String::from));
    out.line(format!("  %rc = call i32 {}({})", global(name), args.join(", ")), loc.clone());
    for l in [
        "  %bad = icmp ne i32 %rc, 0",
        "  br i1 %bad, label %fail, label %next",
        "next:",
        "  %l.next = add i64 %l, 1",
        "  %more = icmp slt i64 %l.next, %end",
        "  br i1 %more, label %loop, label %done",
        "fail:",
        "  ret i32 %rc",
        "done:",
        "  ret i32 0",
        "}",
    ] {
        out.line(l.into(), if l.ends_with(':') || l == "}" { None } else { loc.clone() });
    }
}
