//! Editor-facing queries over the checked program: plain data (offsets, strings), no protocol.
