//! Many undefined names (issue 10): each is reported once, with the "did you mean" a
//! full scan of the names in scope would give, and checking stays linear in their
//! number. 20 000 undefined module constants used to take minutes: every one compared
//! itself with every module name, and a function's diagnostics were deduplicated by a
//! scan of the ones before. `cargo bench --bench check` prints the times.

use std::time::{Duration, Instant};

use tessera_frontend::check::file_diagnostics;
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::{Database, SourceFile};

const N: usize = 20_000;

/// Far above the seconds a debug build needs for N, far below the minutes the quadratic
/// path took: a regression to n² fails here, machine noise does not.
const BOUND: Duration = Duration::from_secs(60);

fn undefined(src: String) -> (Vec<Diagnostic>, Duration) {
    let db = Database::default();
    let file = SourceFile::new(&db, "many.tsr".into(), src, None);
    let t = Instant::now();
    let diagnostics = file_diagnostics(&db, file).clone();
    let elapsed = t.elapsed();
    (diagnostics.into_iter().filter(|d| d.code == Code::E0200).collect(), elapsed)
}

fn fix_message(d: &Diagnostic) -> Option<&str> {
    d.fix.as_ref().map(|f| f.message.as_str())
}

#[test]
fn twenty_thousand_undefined_module_constants() {
    // `c{i} = u{i}`: every constant reads an undefined name one letter away from its own.
    let src: String = (0..N).map(|i| format!("c{i} = u{i}\n")).collect();
    let (diagnostics, elapsed) = undefined(src);
    assert_eq!(diagnostics.len(), N);
    for (i, d) in diagnostics.iter().enumerate() {
        assert_eq!(d.message, format!("undefined name `u{i}`"));
        // Two-character names get no suggestion (any two are close).
        let expected = if i < 10 { None } else { Some(format!("did you mean `c{i}`?")) };
        assert_eq!(fix_message(d), expected.as_deref(), "{i}");
    }
    assert!(elapsed < BOUND, "{N} undefined module constants took {elapsed:?}");
}

#[test]
fn twenty_thousand_undefined_names_in_one_function() {
    // `v{i} = u{i}`: the function's locals grow with its undefined names.
    let src: String =
        std::iter::once("def f():\n".to_string()).chain((0..N).map(|i| format!("    v{i} = u{i}\n"))).collect();
    let (diagnostics, elapsed) = undefined(src);
    assert_eq!(diagnostics.len(), N);
    for (i, d) in diagnostics.iter().enumerate() {
        assert_eq!(d.message, format!("undefined name `u{i}`"));
    }
    // `v1234` is bound after `u1234` is read, so nothing is one edit away; locals two
    // edits away (`v123`, `v1233`, ...) are.
    let d = &diagnostics[1234];
    let suggestion = fix_message(d).expect("a suggestion for u1234");
    assert!(suggestion.starts_with("did you mean `v"), "{suggestion}");
    assert!(elapsed < BOUND, "{N} undefined names in one function took {elapsed:?}");
}

#[test]
fn twenty_thousand_undefined_names_and_one_local() {
    // `x = u{i}`: nothing to suggest; every name still reported once per statement.
    let src: String =
        std::iter::once("def f():\n".to_string()).chain((0..N).map(|i| format!("    x = u{i}\n"))).collect();
    let (diagnostics, elapsed) = undefined(src);
    assert_eq!(diagnostics.len(), N);
    assert!(diagnostics.iter().all(|d| d.fix.is_none()));
    assert!(elapsed < BOUND, "{N} undefined names took {elapsed:?}");
}

#[test]
fn the_closest_local_parameter_or_module_name_is_suggested() {
    let src = "from tessera import *\n\naccumulate = 1\n\ndef f(total_rows: int):\n    counter = 0\n    a = countr + total_row + acumulate\n";
    let (diagnostics, _) = undefined(src.to_string());
    let fixes: Vec<_> = diagnostics.iter().map(|d| fix_message(d).unwrap_or("-")).collect();
    assert_eq!(
        fixes,
        ["did you mean `counter`?", "did you mean `total_rows`?", "did you mean `accumulate`?"],
        "{diagnostics:?}"
    );
}

/// Names from PyTorch and JAX get the Tessera built-in as their fix, with its signature;
/// every such name maps to a built-in that exists, and the fixed program checks clean.
#[test]
fn familiar_names_and_keywords_from_other_frameworks_point_at_tessera_s() {
    use tessera_frontend::check::builtins::{familiar_name, lookup};
    for name in ["softmax", "logsumexp", "layer_norm", "layernorm", "rms_norm", "swish", "bmm", "mse_loss"] {
        let target = familiar_name(name).unwrap_or_else(|| panic!("{name}"));
        assert!(lookup(target).is_some(), "{name} -> {target}");
    }
    let src = "from tessera import *\n\n@jit\ndef f(x: Tensor[\"B\", \"D\", f32]) -> Tensor[\"B\", \"D\", f32]:\n    return layer_norm(softmax(x, axis=-1))\n";
    let (diagnostics, _) = undefined(src.to_string());
    assert_eq!(diagnostics.len(), 2, "{diagnostics:#?}");
    let mut fixed = src.to_string();
    for d in diagnostics.iter().rev() {
        let fix = d.fix.as_ref().unwrap();
        assert!(d.notes.iter().any(|n| n.starts_with("Tessera's is `")), "{d:?}");
        for edit in &fix.edits {
            fixed.replace_range(edit.range.start as usize..edit.range.end as usize, &edit.text);
        }
    }
    assert!(fixed.contains("return layernorm_safe(softmax_safe(x, axis=-1))"), "{fixed}");
    let db = Database::default();
    let file = SourceFile::new(&db, "fixed.tsr".into(), fixed, None);
    assert!(file_diagnostics(&db, file).is_empty());
    // Their keywords: PyTorch's `dim=` is `axis=`; JAX's `argnums` is said to be `wrt`.
    let src = "from tessera import *\n\n@autodiff\ndef loss(x: Tensor[\"B\", \"D\", f32], W: Tensor[\"D\", \"D\", f32]) -> f32:\n    return sum(softmax_safe(x @ W, dim=-1))\n\n@jit\ndef g(x: Tensor[\"B\", \"D\", f32], W: Tensor[\"D\", \"D\", f32]):\n    return grad(loss, argnums=(1,))(x, W)\n";
    let db = Database::default();
    let file = SourceFile::new(&db, "keywords.tsr".into(), src.to_string(), None);
    let diagnostics = file_diagnostics(&db, file).clone();
    let dim = diagnostics.iter().find(|d| d.message.contains("no parameter `dim`")).expect("dim");
    assert_eq!(dim.fix.as_ref().unwrap().edits[0].text, "axis");
    let argnums = diagnostics.iter().find(|d| d.message.contains("no parameter `argnums`")).expect("argnums");
    assert!(argnums.notes.iter().any(|n| n.contains("`wrt` names the parameters")), "{argnums:?}");
}

/// `tile` members from Triton's `tl` and CUDA get the Tessera member as their fix, not the
/// closest spelling (`tile.trans` was offered `tile.tanh`); every one exists, and the fixed
/// kernel checks clean.
#[test]
fn triton_tile_names_point_at_tessera_s() {
    use tessera_frontend::check::builtins::{familiar_tile_member, lookup};
    for name in ["trans", "permute", "debug_barrier", "static_range", "expand_dims", "to", "reduce_max", "zeros_like"] {
        let member = familiar_tile_member(name).unwrap_or_else(|| panic!("{name}"));
        assert!(lookup(&format!("tile.{member}")).is_some(), "{name} -> tile.{member}");
    }
    let src = "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, stages=2))\n\
def linear(A: Tensor[\"M\", \"K\", bf16], W: Tensor[\"N\", \"K\", bf16], C: Tensor[\"M\", \"N\", f32]):\n    \
ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        for n0 in tile.parallel(0, N, ctx.BN):\n            \
acc = tile.zeros((ctx.BM, ctx.BN), f32)\n            for k0 in tile.static_range(0, K, ctx.BK):\n                \
w = tile.load(W[n0:n0 + ctx.BN, k0:k0 + ctx.BK])\n                \
acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.trans(w))\n            \
C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc\n";
    assert_fixes_then_clean(
        src,
        &[
            (Code::E0201, "did you mean `tile.range`, Tessera's name for `static_range`?"),
            (Code::E0201, "did you mean `tile.transpose`, Tessera's name for `trans`?"),
        ],
    );
}

/// `src`'s diagnostics are `expected` (code, fix message), and applying every fix leaves
/// a file that checks clean.
fn assert_fixes_then_clean(src: &str, expected: &[(Code, &str)]) {
    let db = Database::default();
    let file = SourceFile::new(&db, "k.tsr".into(), src.to_string(), None);
    let diagnostics = file_diagnostics(&db, file).clone();
    let fixes: Vec<_> = diagnostics.iter().map(|d| (d.code, fix_message(d).unwrap_or("-"))).collect();
    assert_eq!(fixes, expected, "{diagnostics:#?}");
    let mut fixed = src.to_string();
    for d in diagnostics.iter().rev() {
        for edit in &d.fix.as_ref().unwrap().edits {
            fixed.replace_range(edit.range.start as usize..edit.range.end as usize, &edit.text);
        }
    }
    let file = SourceFile::new(&db, "fixed.tsr".into(), fixed.clone(), None);
    assert!(file_diagnostics(&db, file).is_empty(), "{fixed}\n{:#?}", file_diagnostics(&db, file));
}

/// Triton functions `tile` lacks get a note, never an edit-distance fix that would
/// compile into another function (`tile.erf` to `tile.exp`, `tile.fma` to `tile.mma`,
/// `tile.cos` to `tile.cast`).
#[test]
fn missing_triton_functions_get_no_fix_into_another_function() {
    for (name, note) in [
        ("erf", "Triton's `tl.erf` has no `tile` counterpart yet"),
        ("cumsum", "Triton's `tl.cumsum` has no `tile` counterpart yet"),
        ("cos", "Triton's `tl.cos` has no `tile` counterpart yet"),
        ("fma", "Triton's `tl.fma` has no `tile` counterpart: write `a * b + c`"),
        (
            "argmax",
            "Triton's `tl.argmax` has no `tile` counterpart: write the first index of the max as \
             `tile.min(tile.where(x == tile.max(x, 1)[:, None], cols[None, :], N), 1)` with \
             `cols = c0 + tile.arange(ctx.BN)` and a load padded with `other=-INF`",
        ),
    ] {
        let src = format!(
            "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 1), warps=4))\n\
             def k(X: Tensor[\"N\", f32], Y: Tensor[\"N\", f32]):\n    ctx = tile.context()\n    \
             for n0 in tile.parallel(0, N, ctx.BM):\n        x = tile.load(X[n0:n0 + ctx.BM])\n        \
             Y[n0:n0 + ctx.BM] = tile.{name}(x)\n"
        );
        let db = Database::default();
        let file = SourceFile::new(&db, "k.tsr".into(), src, None);
        let diagnostics = file_diagnostics(&db, file).clone();
        assert_eq!(diagnostics.len(), 1, "{name}: {diagnostics:#?}");
        let d = &diagnostics[0];
        assert_eq!(d.code, Code::E0201);
        assert!(d.fix.is_none(), "{name}: {:?}", d.fix);
        assert!(d.notes.iter().any(|n| n == note), "{name}: {:?}", d.notes);
    }
}

/// `tile.cdiv` and `tile.INF` (Triton's `tl.cdiv`, NumPy habits) are Tessera built-ins of
/// their own: the fix drops `tile.`, and the fixed kernel checks clean.
#[test]
fn top_level_builtins_written_under_tile_drop_the_prefix() {
    let src = "from tessera import *\n\n@kernel.schedule(Schedule(block=(64, 1), warps=4))\n\
               def k(X: Tensor[\"N\", f32], Y: Tensor[\"N\", f32]):\n    ctx = tile.context()\n    \
               for n0 in tile.parallel(0, tile.cdiv(N, ctx.BM) * ctx.BM, ctx.BM):\n        \
               x = tile.load(X[n0:n0 + ctx.BM], other=-tile.INF)\n        Y[n0:n0 + ctx.BM] = x\n";
    assert_fixes_then_clean(
        src,
        &[
            (Code::E0201, "`cdiv` is a built-in function of its own: write `cdiv(...)`"),
            (Code::E0201, "`INF` is a built-in constant of its own: write `INF`"),
        ],
    );
}
