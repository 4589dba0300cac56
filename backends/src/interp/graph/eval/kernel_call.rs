//! `graph.call_kernel {callee, written}` in the reference: the called kernel runs on copies
//! of its arguments through a [`KernelReference`] (for `tessera run`, the kernel's own f64
//! reference: its Graph IR walked by `crate::semantics`, which shares nothing with the
//! plan's Tile IR), and the op's results are the new values of the written parameters.

use std::collections::BTreeMap;

use tessera_passes::ir::{Attr, Func, Op, OpId};

use super::super::values::{Tensor, Val};
use super::super::GraphArg;
use super::{run_graph_with, Machine, R};
use crate::interp::InterpError;
use crate::tensor::Arg;

/// [`super::run_graph_f64_with_dims`] for a function that calls kernels
/// (`graph.call_kernel`): `kernels` runs each called kernel's own reference.
pub fn run_graph_f64_with_kernels(
    func: &Func,
    args: &[GraphArg],
    dims: &BTreeMap<String, i64>,
    seed: i64,
    kernels: &dyn KernelReference,
) -> Result<Vec<GraphArg>, InterpError> {
    run_graph_with(func, args, dims, seed, true, Some(kernels)).map(|(out, _)| out)
}

/// Runs a kernel a graph function calls, by name, with the reference's numerics.
pub trait KernelReference {
    /// Runs `callee` on `args` (one per parameter); the tensors it writes are updated in
    /// place. `stdlib`: the dtype of a stdlib kernel's instance (the op's `stdlib`).
    fn run(&self, callee: &str, stdlib: Option<&str>, args: &mut [Arg]) -> Result<(), String>;
}

impl Machine<'_> {
    pub(super) fn call_kernel(&self, id: OpId, op: &Op) -> R<Vec<Val>> {
        let callee = op.str_attr("callee").ok_or_else(|| self.err(id, "graph.call_kernel needs `callee`".into()))?;
        let kernels = self.kernels.ok_or_else(|| {
            self.err(id, format!("calls the kernel `{callee}`, and this evaluation has no reference of kernels"))
        })?;
        let written: Vec<usize> = match op.attr("written") {
            Some(Attr::Ints(w)) => w.iter().filter_map(|&i| usize::try_from(i).ok()).collect(),
            _ => return Err(self.err(id, "graph.call_kernel needs `written`".into())),
        };
        let mut args = Vec::new();
        for &o in &op.operands {
            let v = self.get(id, o)?;
            args.push(v.to_arg().ok_or_else(|| self.err(id, format!("passes {} to a kernel", v.describe())))?);
        }
        kernels
            .run(callee, op.str_attr("stdlib"), &mut args)
            .map_err(|m| self.err(id, format!("the kernel `{callee}`: {m}")))?;
        written
            .iter()
            .map(|&i| match args.get(i) {
                Some(Arg::Tensor(t)) => Ok(Val::Tensor(Tensor::from_host(t))),
                _ => Err(self.err(id, format!("`{callee}`'s written parameter {i} is not a tensor"))),
            })
            .collect()
    }
}
