//! Source → Graph IR.

pub mod graph;
pub mod kernel;

pub use kernel::LowerError;
