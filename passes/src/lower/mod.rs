//! Source → Graph IR.

pub mod kernel;

pub use kernel::LowerError;
