//! Who wrote each element, in a kernel that scatters plainly (`Out[ids] = v`): the ids are
//! data, so two programs, or two lanes of one scatter, may write the same element. Where
//! they leave the same value nothing is lost. Where they leave different values, which
//! write lands is unspecified on a GPU and between the CPU backend's threads, so the
//! kernel has no single result: a verdict against the reference's order would flip from
//! run to run. The reference reports it instead, at the scatter.
//!
//! Such kernels run their programs one after another, so each program's writes to an
//! element are contiguous in time: the element holds the previous writer's last value
//! when a program first writes it, and this program's last value when the program ends.
//! Comparing the two for every element a program took over finds two programs whose last
//! writes differ exactly when some pair does, in any program order.

use std::collections::HashMap;

use tessera_passes::ir::{Func, OpId, ValueId};

use crate::interp::memory::GlobalTensor;

/// Where a tile program is: its `grid.parallel` induction variables, or its grid point
/// (kernels that read `grid.program_id`).
#[derive(Clone, Debug)]
pub(super) enum Position {
    Loops(Vec<(ValueId, i64)>),
    Point([u64; 3]),
}

/// A program's first write of an element another program wrote before it.
#[derive(Clone, Debug)]
pub(super) struct Takeover {
    tensor: usize,
    element: usize,
    /// The element's bits when this program first wrote it: the previous writer's last value.
    before: u64,
    previous: u32,
    op: OpId,
}

pub(super) struct WriteLog {
    /// Per parameter: 1 + the number of the program that last wrote each element (0:
    /// none); empty for parameters that are not tensors.
    writer: Vec<Vec<u32>>,
    /// Each program's position, by its number.
    programs: Vec<Position>,
}

impl WriteLog {
    pub fn new(tensors: &[Option<GlobalTensor>]) -> WriteLog {
        let writer = tensors.iter().map(|t| t.as_ref().map_or_else(Vec::new, |t| vec![0; t.len()])).collect();
        WriteLog { writer, programs: Vec::new() }
    }

    /// Program `me` starts at `at`: programs are numbered from 1 in the order they run.
    pub fn begin(&mut self, me: u32, at: Position) {
        self.programs.push(at);
        debug_assert_eq!(self.programs.len() as u32, me, "programs run in order");
    }

    /// Program `me` is about to write element `element` of parameter `tensor`, which now
    /// holds `before`: the takeover to check when the program ends, if another program
    /// wrote the element last.
    pub fn note(&mut self, me: u32, tensor: usize, element: usize, before: f64, op: OpId) -> Option<Takeover> {
        let w = &mut self.writer[tensor][element];
        let previous = std::mem::replace(w, me);
        (previous != 0 && previous != me).then_some(Takeover {
            tensor,
            element,
            before: before.to_bits(),
            previous,
            op,
        })
    }

    /// At the end of program `me`: the first element it took over whose value it changed,
    /// as the message of the fault at the op of its first write there.
    pub fn finish(
        &self,
        func: &Func,
        me: u32,
        takeovers: &[Takeover],
        tensors: &[Option<GlobalTensor>],
    ) -> Result<(), (OpId, String)> {
        for t in takeovers {
            let Some(g) = &tensors[t.tensor] else { continue };
            let now = g.get(t.element);
            if now.to_bits() != t.before {
                let message = format!(
                    "{} write `{}` and leave different values ({} and {}): which write lands is \
                     unspecified on a GPU and between the CPU backend's threads, {NO_SINGLE_RESULT}",
                    both_programs(func, &self.programs[t.previous as usize - 1], &self.programs[me as usize - 1]),
                    element_name(func, t.tensor, t.element, &g.dims),
                    f64::from_bits(t.before),
                    now,
                );
                return Err((t.op, message));
            }
        }
        Ok(())
    }
}

/// The lanes of one scatter that have written each element, to find two that write
/// different values.
#[derive(Default)]
pub(super) struct LaneWrites {
    first: HashMap<usize, (usize, u64)>,
}

impl LaneWrites {
    /// Lane `lane` writes `value` to element `element`: the earlier lane and its value when
    /// one wrote a different value there.
    pub fn write(&mut self, element: usize, lane: usize, value: f64) -> Option<(usize, f64)> {
        match self.first.insert(element, (lane, value.to_bits())) {
            Some((l, bits)) if bits != value.to_bits() => Some((l, f64::from_bits(bits))),
            _ => None,
        }
    }
}

pub(super) const NO_SINGLE_RESULT: &str =
    "so the kernel has no single result to check; add into the element with `tile.atomic_add`, or make the ids unique";

fn both_programs(func: &Func, a: &Position, b: &Position) -> String {
    match (a, b) {
        (Position::Loops(a), Position::Loops(b)) => {
            format!("the programs at {} and at {}", loop_values(func, a), loop_values(func, b))
        }
        (Position::Point(a), Position::Point(b)) => format!("programs {} and {}", point(a), point(b)),
        _ => format!("{} and {}", describe(func, a), describe(func, b)),
    }
}

/// `the program at r0 = 16, c0 = 0`, or `program (1, 0, 0)`.
pub(super) fn describe(func: &Func, at: &Position) -> String {
    match at {
        Position::Point(p) => format!("program {}", point(p)),
        Position::Loops(ivs) => format!("the program at {}", loop_values(func, ivs)),
    }
}

fn loop_values(func: &Func, ivs: &[(ValueId, i64)]) -> String {
    let parts: Vec<String> = ivs
        .iter()
        .map(|(v, x)| match &func.values[v.0 as usize].name {
            Some(name) => format!("{name} = {x}"),
            None => format!("%{} = {x}", v.0),
        })
        .collect();
    parts.join(", ")
}

fn point([x, y, z]: &[u64; 3]) -> String {
    format!("({x}, {y}, {z})")
}

/// `Y[3, 0]`: a parameter's element by its coordinates.
pub(super) fn element_name(func: &Func, tensor: usize, element: usize, dims: &[i64]) -> String {
    let v = func.params[tensor];
    let name = func.values[v.0 as usize].name.as_ref().map_or_else(|| format!("arg{tensor}"), |n| n.to_string());
    let dims: Vec<usize> = dims.iter().map(|&d| d.max(1) as usize).collect();
    format!("{name}{}", coordinates(element, &dims))
}

/// `[3, 0]`: the row-major coordinates of flat index `i` in `dims`.
pub(super) fn coordinates(i: usize, dims: &[usize]) -> String {
    format!("{:?}", crate::launch::unravel(i, dims))
}
