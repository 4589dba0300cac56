//! Module constants run in order, like Python's top level, and a function's signature
//! must not need itself through a constant: both are diagnostics, never a hang or panic.

use tessera_frontend::check::file_diagnostics;
use tessera_frontend::{Database, SourceFile};

/// `(code, line, message)` of every diagnostic, lines 1-based.
fn check(src: &str) -> Vec<(String, usize, String)> {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.to_string(), None);
    file_diagnostics(&db, file)
        .iter()
        .map(|d| (d.code.to_string(), src[..d.range.start as usize].lines().count(), d.message.clone()))
        .collect()
}

const HEADER: &str = "import tessera as ts\nfrom tessera import *\n\n";

#[test]
fn a_constant_cannot_use_a_later_function() {
    let src = format!(
        "{HEADER}G = grad(f)\n\n@ts.autodiff\ndef f(x: Tensor[\"n\", f32]) -> f32:\n    return ts.sum(x)\n\nH = grad(f)\n"
    );
    let names: Vec<_> = check(&src).into_iter().filter(|d| d.0 == "E0200").collect();
    // `G` (line 4) is before `def f`; `H` (line 10) after it.
    assert_eq!(names, vec![("E0200".to_string(), 4, "`f` is used before its definition".to_string())]);
}

#[test]
fn an_annotation_that_needs_its_own_function_is_one_error() {
    let src = format!("{HEADER}@ts.jit\ndef f(x: Tensor[N, f32]) -> Tensor[N, f32]:\n    return x\n\nN = grad(f)\n");
    let d = check(&src);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "E0200");
    assert_eq!(d[0].1, 5);
    assert!(d[0].2.contains("signature of `f` depends on itself"), "{d:?}");
}

#[test]
fn a_decorator_that_needs_its_own_function_is_one_error() {
    let src = format!(
        "{HEADER}@ts.kernel.autotune(space=SPACE)\ndef k(x: Tensor[\"n\", f32]):\n    pass\n\nSPACE = grad(k)\n"
    );
    let d = check(&src);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].2.contains("signature of `k` depends on itself"), "{d:?}");
}
