//! The source formatter shared by `tessera fmt` and the language server.
