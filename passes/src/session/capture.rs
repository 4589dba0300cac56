//! The session's errors and its one place that catches panics and cancellation.
//!
//! Every answer of the session is a [`Cancellable`]: the value, or a [`SessionError`]
//! that says what happened with a kind a front door can act on (show the span, retry
//! after an edit, report a compiler bug) — never text that has to be parsed back.

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tessera_frontend::text::TextRange;

use crate::error::LowerError;

/// What kind of failure a [`SessionError`] is.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ErrorKind {
    /// The file has no function of the requested name.
    NoFunction,
    /// An override (a schedule key or a dim) was refused by the override rule.
    Rejected,
    /// The program does not lower (a diagnostic-like error with a span).
    Lowering,
    /// An edit arrived while the answer was computed: ask again.
    Cancelled,
    /// A compiler bug (a panic), caught so the rest keeps working.
    Internal,
}

/// Why a session answer has no value.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SessionError {
    pub kind: ErrorKind,
    pub message: String,
    /// Absolute range in the file, where the error has one.
    pub range: Option<TextRange>,
}

/// A session answer: the value, or why there is none.
pub type Cancellable<T> = Result<T, SessionError>;

impl SessionError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> SessionError {
        SessionError { kind, message: message.into(), range: None }
    }

    /// A lowering error of a function whose item starts at `anchor` (its ranges are
    /// relative to the item; the session's are absolute).
    pub fn lowering(anchor: u32, e: &LowerError) -> SessionError {
        let range = (e.range != TextRange::default() || anchor != 0).then(|| e.range.shift(anchor));
        SessionError { kind: ErrorKind::Lowering, message: e.message.clone(), range }
    }

    pub fn is_cancelled(&self) -> bool {
        self.kind == ErrorKind::Cancelled
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SessionError {}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Whether a panic payload is salsa's cancellation (an edit on another handle).
pub fn is_cancellation(payload: &(dyn Any + Send)) -> bool {
    payload.is::<salsa::Cancelled>()
}

/// The session error a caught panic payload stands for: a cancellation, or an internal
/// error "while {what}".
pub fn from_panic(what: &str, payload: &(dyn Any + Send)) -> SessionError {
    if is_cancellation(payload) {
        SessionError::new(ErrorKind::Cancelled, "the file changed while this was computed")
    } else {
        SessionError::new(ErrorKind::Internal, format!("internal error while {what}: {}", panic_message(payload)))
    }
}

/// Runs `f`, turning a panic into [`ErrorKind::Internal`] and salsa's cancellation
/// into [`ErrorKind::Cancelled`]. (Whether the panic hook also prints is the front
/// door's choice: the explorer silences it while it owns the terminal.)
pub fn catch<T>(what: &str, f: impl FnOnce() -> T) -> Cancellable<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| from_panic(what, &*payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_internal_error_naming_the_work() {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = catch("lowering `k`", || -> u32 { panic!("boom") });
        std::panic::set_hook(previous);
        let e = caught.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(e.message, "internal error while lowering `k`: boom");
        assert_eq!(catch("x", || 3).unwrap(), 3);
    }
}
