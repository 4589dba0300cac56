//! The error every lowering and planning step returns. (The user's own errors, found
//! before lowering, are in `errors`.)

use tessera_frontend::text::TextRange;

/// A construct the lowering does not handle (the checker accepted it).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LowerError {
    pub message: String,
    /// Item-relative.
    pub range: TextRange,
}
