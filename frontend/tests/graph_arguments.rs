//! Arguments of graph operations: a tensor given for a float parameter (`eps`,
//! `dropout`) is E0802 at the argument, with the tensor parameter it was meant for as the
//! fix when only one is left unset. It used to pass `tessera check` and fail when
//! lowered ("a constant number here").

use tessera_frontend::check::file_diagnostics;
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::{Database, SourceFile};

fn diagnostics(body: &str) -> Vec<Diagnostic> {
    let src = format!(
        "from tessera import *\n\n@jit\ndef f(x: Tensor[\"B\", \"D\", f32], g: Tensor[\"D\", f32]) -> Tensor[\"B\", \"D\", f32]:\n    return {body}\n"
    );
    let db = Database::default();
    let file = SourceFile::new(&db, "f.tsr".into(), src, None);
    file_diagnostics(&db, file).clone()
}

#[test]
fn a_tensor_for_a_float_parameter_names_the_tensor_parameter() {
    let d = diagnostics("rmsnorm_safe(x, g)");
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, Code::E0802);
    assert_eq!(d[0].message, "`rmsnorm_safe`: `eps` is a number (default 1e-6), but `g` is [D]");
    let fix = d[0].fix.as_ref().expect("a fix");
    assert_eq!(fix.edits.len(), 1);
    assert_eq!(fix.edits[0].text, "weight=g");
    // Two tensor parameters unset: a note names both, and nothing is guessed.
    let d = diagnostics("layernorm_safe(x, g)");
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].fix.is_none());
    assert!(d[0].notes.iter().any(|n| n.contains("`weight=g` or `bias=g`")), "{d:#?}");
    // A residual's dropout rate given a tensor.
    let d = diagnostics("residual(x, x, x)");
    assert!(d.len() == 1 && d[0].message.starts_with("`residual`: `dropout` is a number"), "{d:#?}");
    // Numbers, and tensors by keyword, are fine.
    for fine in [
        "rmsnorm_safe(x, 1e-5, g)",
        "rmsnorm_safe(x, weight=g)",
        "layernorm_safe(x, 1e-5, g, g)",
        "residual(x, x, 0.1)",
    ] {
        assert!(diagnostics(fine).is_empty(), "{fine}: {:#?}", diagnostics(fine));
    }
}
