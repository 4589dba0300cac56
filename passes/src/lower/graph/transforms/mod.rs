//! Function transforms of graph functions: `vmap(f, ...)(args)` (`vmap.rs`) and
//! `jvp(f, primals, tangents)` (`jvp.rs`).
//!
//! Both start the same way: `f`'s body is lowered on its own into a scratch function
//! (`trace`), whose parameters stand for the arguments as `f` sees them (for `vmap`, one
//! example: the mapped axis removed). The transform then walks the scratch graph op by op
//! and emits the transformed ops into the caller's graph: batched ops for `vmap`, primal
//! and tangent ops for `jvp`. Effects keep their order on the caller's token chain.
//! Every op the transform emits carries an attribute naming it (`vmap = "f"`,
//! `jvp = "f"`), so `tessera lower --stage graph` and the explorer show where it acted.

mod jvp;
mod vmap;

use std::collections::HashMap;

use smol_str::SmolStr;
use tessera_frontend::check::Dim;
use tessera_frontend::syntax::ast::Arg;
use tessera_frontend::text::TextRange;

use super::{unsupported, Body, Callee, Graph, Val, R};
use crate::ir::*;

/// `f`'s graph alone: its parameters (one per argument value, in the order the
/// caller's values were given) and its returned values.
pub(super) struct Traced {
    pub func: Func,
    /// Scratch parameter → the caller's value it stands for.
    pub inputs: Vec<(ValueId, ValueId)>,
    pub outputs: Vec<ValueId>,
    /// The scratch function's first effect token.
    pub token: ValueId,
}

/// The type `f` sees for an argument of the given parameter and type (None: its own).
pub(super) type Retype<'r> = dyn Fn(&str, &Type) -> R<Option<Type>> + 'r;

/// The product of some dims.
pub(super) fn product(dims: &[Dim]) -> Dim {
    dims.iter().fold(Dim::constant(1), |acc, d| acc.mul_plain(d))
}

/// A tensor type with other dims.
pub(super) fn with_dims(t: &Type, dims: Vec<Dim>) -> Type {
    match t {
        Type::Tensor(tt) => Type::Tensor(TensorType { dims, dtype: tt.dtype, policies: tt.policies.clone() }),
        other => other.clone(),
    }
}

impl Body<'_, '_, '_> {
    /// Lowers `f`'s body into a scratch function. `args` binds `f`'s parameters to the
    /// caller's values; `retype` gives the type `f` sees for a caller's value (None:
    /// its own type).
    pub(super) fn trace(&mut self, of: &str, args: &[Arg], range: TextRange, retype: &Retype<'_>) -> R<Traced> {
        let callee = self.callee(of, range)?;
        let env = self.bind_arguments(&callee, args, range)?;
        self.trace_env(of, &callee, env, range, retype)
    }

    /// [`Body::trace`] with `f`'s parameters already bound to the caller's values.
    pub(in crate::lower::graph) fn trace_env(
        &mut self,
        of: &str,
        callee: &Callee,
        env: HashMap<SmolStr, Val>,
        range: TextRange,
        retype: &Retype<'_>,
    ) -> R<Traced> {
        let loc = self.loc(range);
        let mut func = Func::new(&callee.def.name, FuncKind::Graph, Level::Graph, loc.clone());
        let mut inputs = Vec::new();
        let mut scratch_env = HashMap::new();
        // Parameters in the callee's order, so the scratch graph is deterministic.
        for p in &callee.sig.params {
            let Some(val) = env.get(p.name.as_str()) else { continue };
            let placeholder = |func: &mut Func, v: ValueId, body: &Self| -> R<ValueId> {
                let have = body.vty(v);
                let ty = retype(&p.name, &have)?.unwrap_or(have);
                let s = func.new_value(ty, Some(&p.name));
                func.params.push(s);
                Ok(s)
            };
            let scratch = match val {
                Val::One(v) => {
                    let s = placeholder(&mut func, *v, self)?;
                    inputs.push((s, *v));
                    Val::One(s)
                }
                Val::Many(vs) => {
                    let mut ss = Vec::new();
                    for v in vs {
                        let s = placeholder(&mut func, *v, self)?;
                        inputs.push((s, *v));
                        ss.push(s);
                    }
                    Val::Many(ss)
                }
                Val::None => Val::None,
                Val::State(_) | Val::Tuple(_) => {
                    return unsupported(format!("a KVCache argument of `{of}` in a transform"), range)
                }
            };
            scratch_env.insert(SmolStr::new(&p.name), scratch);
        }
        let (outputs, token, streams) = {
            let mut b = Builder::new(&mut func);
            let token = b.op1(OpKind::EffectToken, vec![], Type::Token, vec![], &loc);
            let mut g = Graph {
                b,
                token,
                streams: self.g.streams,
                depth: self.g.depth + 1,
                custom_vjps: Vec::new(),
                tracing: true,
                globals: HashMap::new(),
            };
            let out = {
                let mut inner = Body {
                    g: &mut g,
                    name: SmolStr::new(&callee.def.name),
                    def: &callee.def,
                    sig: &callee.sig,
                    inf: &callee.inf,
                    resolve: self.resolve,
                    env: scratch_env,
                    dims: std::collections::BTreeMap::new(),
                };
                inner.stmts(&callee.def.body)?.unwrap_or(Val::None)
            };
            let outputs = match out {
                Val::One(v) => vec![v],
                Val::Many(vs) => vs,
                Val::None => return unsupported(format!("`{of}` returns nothing to transform"), range),
                Val::State(_) | Val::Tuple(_) => {
                    return unsupported(format!("`{of}` returns a KVCache, which is not transformed"), range)
                }
            };
            g.b.op(OpKind::Return, outputs.clone(), vec![], vec![], &loc);
            let streams = g.streams;
            g.b.finish();
            (outputs, token, streams)
        };
        self.g.streams = streams;
        // Ops whose results nothing reads need no transform (nor a refusal).
        crate::tile::remove_dead_ops(&mut func);
        Ok(Traced { func, inputs, outputs, token })
    }

    /// Emits an op into the caller's graph with the transform's attribute; a token
    /// result moves the caller's token chain on.
    pub(super) fn emit_tagged(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        types: Vec<Type>,
        mut attrs: Vec<(&'static str, Attr)>,
        tag: (&'static str, &SmolStr),
        loc: &Loc,
    ) -> Vec<ValueId> {
        if !attrs.iter().any(|(k, _)| *k == tag.0) {
            attrs.push((tag.0, Attr::Str(tag.1.clone())));
        }
        let results = self.g.b.op(kind, operands, types.clone(), attrs, loc);
        for (r, t) in results.iter().zip(&types) {
            if *t == Type::Token {
                self.g.token = *r;
            }
        }
        results
    }
}

/// The constant a scratch value is (a scalar constant, or one broadcast or cast).
pub(super) fn constant_of(f: &Func, v: ValueId) -> Option<f64> {
    let op = f.ops.iter().find(|op| op.results.contains(&v))?;
    match op.kind {
        OpKind::Constant => op.attr("value").and_then(Attr::as_float),
        OpKind::GBroadcast | OpKind::Cast => constant_of(f, op.operands[0]),
        OpKind::Fill => op.attr("value").and_then(Attr::as_float),
        _ => None,
    }
}
