//! Compilation targets.

use std::fmt;
use std::str::FromStr;

use crate::abi::KernelAbi;
use crate::ir::Loc;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub enum Target {
    Sm80,
    #[default]
    Sm90,
    Cpu,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Sm80, Target::Sm90, Target::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90 => "sm_90",
            Target::Cpu => "cpu",
        }
    }

    pub fn is_gpu(self) -> bool {
        self != Target::Cpu
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown target `{s}` (expected sm_80, sm_90 or cpu)"))
    }
}

/// Generated code for one kernel, configuration and target.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TargetCode {
    pub target: Target,
    /// The symbol to launch (PTX `.entry`, LLVM function name).
    pub entry: String,
    /// The whole module: PTX (`.version`, `.target`, the entry) or LLVM IR.
    pub text: String,
    /// For each line of `text`, the Tile IR op location it was generated from.
    pub line_locs: Vec<Option<Loc>>,
    pub abi: KernelAbi,
    /// Shared memory a tile program needs (GPU; bytes, static plus dynamic).
    pub smem_bytes: u64,
}
