//! PTX text under construction: virtual registers by class, instruction lines tagged
//! with the Tile IR location they implement, labels, and the kernel prologue (values
//! that depend only on the thread id, computed once at entry).

use std::fmt;

use crate::ir::Loc;

/// PTX register classes. Every Tile IR element lives in one of these.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Class {
    Pred,
    B16,
    /// 32-bit integers, packed 16/8-bit words and shared-memory addresses.
    B32,
    F32,
    /// 64-bit integers: indices, global addresses.
    B64,
    F64,
}

impl Class {
    pub const ALL: [Class; 6] = [Class::Pred, Class::B16, Class::B32, Class::F32, Class::B64, Class::F64];

    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "p",
            Class::B16 => "h",
            Class::B32 => "r",
            Class::F32 => "f",
            Class::B64 => "rd",
            Class::F64 => "fd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::F32 => ".f32",
            Class::B64 => ".b64",
            Class::F64 => ".f64",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Reg {
    pub class: Class,
    pub id: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}{}", self.class.prefix(), self.id)
    }
}

/// An instruction operand: a register or an immediate of the instruction's type.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Operand {
    Reg(Reg),
    /// An integer immediate (also the value of a `bool` constant: 0 or 1).
    Int(i64),
    /// An `f32` immediate by its bits.
    F32(u32),
    /// An `f64` immediate by its bits.
    F64(u64),
}

impl Operand {
    pub fn f32(v: f32) -> Operand {
        Operand::F32(v.to_bits())
    }

    pub fn as_int(self) -> Option<i64> {
        match self {
            Operand::Int(v) => Some(v),
            _ => None,
        }
    }
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Operand {
        Operand::Reg(r)
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Reg(r) => write!(f, "{r}"),
            Operand::Int(v) => write!(f, "{v}"),
            Operand::F32(bits) => write!(f, "0f{bits:08X}"),
            Operand::F64(bits) => write!(f, "0d{bits:016X}"),
        }
    }
}

/// Emitted lines with the Tile IR location each implements.
pub type Lines = Vec<(String, Option<Loc>)>;

/// Where lines go: the body in program order, or the prologue (thread-only values).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Section {
    Prologue,
    Body,
}

/// The lines of one kernel and its register counts.
#[derive(Default)]
pub struct Builder {
    counts: [u32; 6],
    prologue: Lines,
    body: Lines,
    labels: u32,
    pub loc: Option<Loc>,
    section_stack: Vec<Section>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder { section_stack: vec![Section::Body], ..Builder::default() }
    }

    pub fn reg(&mut self, class: Class) -> Reg {
        let slot = &mut self.counts[class as usize];
        let id = *slot;
        *slot += 1;
        Reg { class, id }
    }

    pub fn label(&mut self, what: &str) -> String {
        self.labels += 1;
        format!("${what}_{}", self.labels)
    }

    /// Emits an instruction (`;` appended) into the current section.
    pub fn ins(&mut self, text: impl Into<String>) {
        let mut line = String::from("\t");
        line.push_str(&text.into());
        line.push(';');
        self.push(line);
    }

    /// Emits a predicated instruction: `@p ins` (or `@!p` when `negate`).
    pub fn ins_if(&mut self, pred: Reg, negate: bool, text: impl Into<String>) {
        let bang = if negate { "!" } else { "" };
        self.ins(format!("@{bang}{pred} {}", text.into()));
    }

    pub fn place_label(&mut self, label: &str) {
        self.push(format!("{label}:"));
    }

    fn push(&mut self, line: String) {
        let loc = self.loc.clone();
        match self.section() {
            Section::Prologue => self.prologue.push((line, loc)),
            Section::Body => self.body.push((line, loc)),
        }
    }

    pub fn section(&self) -> Section {
        *self.section_stack.last().expect("a section is open")
    }

    /// Runs `f` with lines going to the prologue.
    pub fn in_prologue<T>(&mut self, f: impl FnOnce(&mut Builder) -> T) -> T {
        self.section_stack.push(Section::Prologue);
        let out = f(self);
        self.section_stack.pop();
        out
    }

    /// Register declarations for every class used.
    pub fn declarations(&self) -> Vec<String> {
        Class::ALL
            .iter()
            .filter(|c| self.counts[**c as usize] > 0)
            .map(|c| format!("\t.reg {} %{}<{}>;", c.decl(), c.prefix(), self.counts[*c as usize]))
            .collect()
    }

    /// The prologue and the body.
    pub fn take_lines(&mut self) -> (Lines, Lines) {
        (std::mem::take(&mut self.prologue), std::mem::take(&mut self.body))
    }
}
