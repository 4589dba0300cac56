//! The reference's bookkeeping of tile programs in the kernels that need it: numbering
//! each program, the plain writes of a kernel that scatters ([`WriteLog`]) and the
//! elements of a tensor updated in place ([`Crossings`](crossing::Crossings)), and the
//! faults they raise.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use tessera_passes::ir::OpId;

use super::crossing::{self, Access};
use super::writes::{self, Position, WriteLog};
use super::{Env, Fault, Machine, R};
use crate::interp::memory::GlobalTensor;

impl Machine<'_> {
    /// Runs one tile program at `at`; with a [`WriteLog`] or
    /// [`Crossings`](crossing::Crossings), numbers it, and with a [`WriteLog`] checks at
    /// its end that the elements it took over from other programs keep their values.
    pub(super) fn program(
        &self,
        env: &mut Env,
        at: impl FnOnce(&Env) -> Position,
        body: impl FnOnce(&mut Env) -> R<()>,
    ) -> R<()> {
        if self.writes.is_none() && self.crossings.is_none() {
            return body(env);
        }
        let me = self.next_program.fetch_add(1, Ordering::Relaxed) + 1;
        let position = at(env);
        if let Some(log) = &self.writes {
            lock(log).begin(me, position.clone());
        }
        env.program = me;
        env.position = Some(position);
        let r = body(env);
        let takeovers = std::mem::take(&mut env.takeovers);
        env.program = 0;
        env.position = None;
        r?;
        match &self.writes {
            Some(log) => lock(log)
                .finish(self.func, me, &takeovers, self.tensors)
                .map_err(|(op, message)| Fault { op: Some(op), message }),
            None => Ok(()),
        }
    }

    /// The fault of a program that touches an element one way (`mine`: reads, writes,
    /// adds into) that another program touches another way (`theirs`).
    pub(super) fn crossing(&self, env: &Env, (mine, theirs): (Access, Access), arg: usize, element: usize) -> Fault {
        let program = self.program_text(env);
        let dims = self.tensors[arg].as_ref().map_or(&[][..], |t| &t.dims[..]);
        let element = writes::element_name(self.func, arg, element, dims);
        Fault { op: None, message: crossing::crossing_message(&program, mine, theirs, &element) }
    }

    /// `the program at i0 = 64`: the running program, for a message.
    fn program_text(&self, env: &Env) -> String {
        env.position
            .as_ref()
            .map_or_else(|| "code outside the innermost grid loop".to_string(), |p| writes::describe(self.func, p))
    }

    /// Program `env.program` touching element `i` of `arg` with `access`: the access of
    /// another program it crosses (as `(mine, theirs)`), if any.
    pub(super) fn crosses(&self, env: &Env, arg: usize, i: usize, access: Access) -> Option<(Access, Access)> {
        let c = self.crossings.as_ref().filter(|_| env.program != 0)?;
        c.access(arg, i, env.program, access).map(|theirs| (access, theirs))
    }

    pub(super) fn lanes_conflict(
        &self,
        env: &Env,
        arg: usize,
        element: usize,
        tile_dims: &[usize],
        lanes: [usize; 2],
        values: [f64; 2],
    ) -> String {
        let t = self.tensors[arg].as_ref().expect("a scattered parameter is a tensor");
        let program = self.program_text(env);
        format!(
            "lanes {} and {} of this scatter (in {program}) write `{}` with different values ({} and {}): which lands \
             is unspecified on a GPU, whose threads write at once, {}",
            writes::coordinates(lanes[0], tile_dims),
            writes::coordinates(lanes[1], tile_dims),
            writes::element_name(self.func, arg, element, &t.dims),
            values[0],
            values[1],
            writes::NO_SINGLE_RESULT
        )
    }

    /// A plain write of element `i` of parameter `arg` by op `op`; the access of another
    /// program it crosses (a read, an atomic add), if any.
    pub(super) fn write(
        &self,
        env: &mut Env,
        op: OpId,
        arg: usize,
        t: &GlobalTensor,
        i: usize,
        x: f64,
    ) -> Option<(Access, Access)> {
        let crossed = self.crosses(env, arg, i, Access::Write);
        if let (Some(log), true) = (&self.writes, env.program != 0) {
            if let Some(takeover) = lock(log).note(env.program, arg, i, t.get(i), op) {
                env.takeovers.push(takeover);
            }
        }
        t.set(i, x);
        if let Some(owner) = &t.owner {
            owner[i].store(1, Ordering::Relaxed);
        }
        crossed
    }
}

pub(super) fn lock(log: &Mutex<WriteLog>) -> std::sync::MutexGuard<'_, WriteLog> {
    // A panic while holding it would have ended the run already.
    log.lock().unwrap_or_else(|e| e.into_inner())
}
