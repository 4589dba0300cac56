//! Fixture tests: `$0` marks the cursor; results are rendered as text and compared with
//! `expect!` snapshots (`UPDATE_EXPECT=1 cargo test` refreshes them).

use expect_test::{expect, Expect};

use super::*;
use crate::{Database, SourceFile};

fn fixture(src: &str) -> (Database, SourceFile, u32) {
    let offset = src.find("$0").expect("fixture has a $0 cursor") as u32;
    let text = src.replacen("$0", "", 1);
    let db = Database::default();
    let file = SourceFile::new(&db, "test.tsr".into(), text, None);
    (db, file, offset)
}

fn text_of(db: &Database, file: SourceFile) -> String {
    file.text(db).clone()
}

const GEMM: &str = r#"import tessera as ts
from tessera import tile, Tensor, bf16, f32

BLOCK = 128

@ts.kernel.autotune(
    space=dict(BM=[64, 128], BN=[64, 128], BK=[32, 64], warps=[4, 8]),
    metric="latency_ms", budget_ms=500)
def gemm(A: Tensor["M", "K", bf16 @accum(f32)],
         B: Tensor["K", "N", bf16],
         C: Tensor["M", "N", f32]):
    """C = A @ B."""
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                acc += tile.dot(a, b)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc

@ts.jit
def graph(x: Tensor["B", "D", bf16], w: Tensor["D", "N", bf16]) -> Tensor["B", "N", bf16]:
    y = x @ w
    return gelu(y)
"#;

fn at(marker_line: &str, needle: &str) -> String {
    // GEMM with `$0` inserted before `needle` on the first line containing `marker_line`.
    let line_start = GEMM.find(marker_line).expect("marker");
    let pos = line_start + GEMM[line_start..].find(needle).expect("needle");
    format!("{}$0{}", &GEMM[..pos], &GEMM[pos..])
}

fn check_hover(src: &str, expect: Expect) {
    let (db, file, offset) = fixture(src);
    let text = text_of(&db, file);
    let actual = match hover(&db, file, offset) {
        Some(h) => format!("{} {:?}\n{}\n", h.range.slice(&text), h.subject, h.markdown),
        None => "no hover\n".to_string(),
    };
    expect.assert_eq(&actual);
}

#[test]
fn hover_local_tile() {
    check_hover(
        &at("acc = tile.zeros", "acc"),
        expect![[r#"
            acc Other
            ```tessera
            acc: tile<BMxBNxf32>
            ```

            local of kernel `gemm`

            rank 2: [BM, BN]

            - f32 storage (32-bit IEEE float)
        "#]],
    );
}

#[test]
fn hover_param_with_policy() {
    check_hover(
        &at("a = tile.load(A[", "A["),
        expect![[r#"
            A Other
            ```tessera
            A: Tensor["M", "K", bf16 @accum(f32)]
            ```

            parameter of kernel `gemm`

            rank 2: [M, K]

            - bf16 storage (bfloat16 (f32 range, 7-bit mantissa))
            - products and sums are accumulated in f32, then rounded to bf16 on store
        "#]],
    );
}

#[test]
fn hover_builtin_with_call_type() {
    check_hover(
        &at("acc = tile.zeros", "zeros"),
        expect![[r#"
            zeros Other
            ```tessera
            tile.zeros(shape, dtype=f32) -> tile
            ```

            A new tile of zeros.

            *kernel intrinsic: only inside `@kernel` functions*

            here: `tile<BMxBNxf32>`
        "#]],
    );
}

#[test]
fn hover_kernel_name() {
    check_hover(
        &at("def gemm", "gemm"),
        expect![[r#"
            gemm Kernel { name: "gemm" }
            ```tessera
            @kernel.autotune
            def gemm(
                A: Tensor["M", "K", bf16 @accum(f32)],
                B: Tensor["K", "N", bf16],
                C: Tensor["M", "N", f32],
            )
            ```

            C = A @ B.

            ---

            **kernel** — the body runs once per tile program of the launch grid; specialized per launch on `M`, `K`, `N`

            **Schedule**: autotuned over 16 configurations (metric `latency_ms`, budget 500 ms)

            - `BM` ∈ {64, 128}
            - `BN` ∈ {64, 128}
            - `BK` ∈ {32, 64}
            - `warps` ∈ {4, 8}
        "#]],
    );
}

#[test]
fn hover_schedule_key_and_symbol_and_dtype() {
    check_hover(
        &at("acc = tile.zeros", "BM,"),
        expect![[r#"
            BM Other
            ```tessera
            ctx.BM: int
            ```

            schedule key of `gemm`, autotuned over {64, 128}
        "#]],
    );
    check_hover(
        &at("for m0 in", "M, ctx"),
        expect![[r#"
            M Other
            ```tessera
            M: int
            ```

            dim symbol of `gemm`, bound at each call by `A` dim 0 (`M`), `C` dim 0 (`M`)
        "#]],
    );
    check_hover(
        &at("def gemm", "bf16 @"),
        expect![[r#"
            bf16 Other
            ```tessera
            dtype bf16
            ```

            bfloat16 (f32 range, 7-bit mantissa) — 16 bits per element; tensor-core dims must be multiples of 16

            aliases: `bfloat16`

            *imported from `tessera` as `bf16`*
        "#]],
    );
    check_hover(
        &at("def gemm", "accum"),
        expect![[r#"
            accum Other
            ```tessera
            @accum(dtype)
            ```

            dtype policy: Accumulate products and sums in `dtype` (at least as wide as the storage). fp8 dots on Hopper tensor cores (`mma="wgmma"`) sum each chunk of up to 128 products at about 14 bits, then add it in `dtype`.

            Written after a dtype in a type: `bf16 @accum(...)`.
        "#]],
    );
    check_hover(
        &at("@ts.kernel", "autotune"),
        expect![[r#"
            autotune Other
            ```tessera
            kernel.autotune(space, metric="latency_ms", budget_ms=None, cache=None) -> decorator
            ```

            A kernel with a schedule search space: space=dict(KEY=[candidates, ...]).

            *decorator*
        "#]],
    );
}

#[test]
fn definitions_and_references() {
    let (db, file, offset) = fixture(&at("acc += tile.dot", "acc"));
    let text = text_of(&db, file);
    let defs: Vec<&str> = goto_definition(&db, file, offset).iter().map(|t| t.focus.slice(&text)).collect();
    assert_eq!(defs, ["acc"]);
    let refs: Vec<(u32, ReferenceKind)> = find_references(&db, file, offset, true)
        .iter()
        .map(|r| (crate::text::LineIndex::new(&text).line_of(r.range.start) + 1, r.kind))
        .collect();
    assert_eq!(refs, [(16, ReferenceKind::Write), (20, ReferenceKind::Write), (21, ReferenceKind::Read)]);
    // ctx.BM jumps to the autotune space.
    let (db, file, offset) = fixture(&at("acc = tile.zeros", "BM,"));
    let t = goto_definition(&db, file, offset);
    assert_eq!(t[0].focus.slice(&text_of(&db, file)), "BM");
    assert!(t[0].focus.start < text_of(&db, file).find("def gemm").unwrap() as u32);
}

#[test]
fn rename_rules() {
    let (db, file, offset) = fixture(&at("a = tile.load", "a = "));
    let edits = rename(&db, file, offset, "a_tile").unwrap();
    assert_eq!(edits.len(), 2);
    let (db, file, offset) = fixture(&at("acc = tile.zeros", "zeros"));
    assert!(matches!(prepare_rename(&db, file, offset), Err(RenameError::NotRenamable(_))));
    let (db, file, offset) = fixture(&at("for m0", "for"));
    assert_eq!(prepare_rename(&db, file, offset).unwrap_err().to_string(), "`for` is a keyword and cannot be renamed");
    let (db, file, offset) = fixture(&at("a = tile.load", "a = "));
    assert!(matches!(rename(&db, file, offset, "for"), Err(RenameError::InvalidName(_))));
    assert!(matches!(rename(&db, file, offset, "acc"), Err(RenameError::Conflict(_))));
    // A parameter: its uses and the definition.
    let (db, file, offset) = fixture(&at("def graph", "x:"));
    let edits = rename(&db, file, offset, "inp").unwrap();
    assert_eq!(edits.len(), 2);
}

fn labels(items: &[CompletionItem]) -> Vec<String> {
    let mut v: Vec<&CompletionItem> = items.iter().collect();
    v.sort_by(|a, b| a.sort_text.cmp(&b.sort_text));
    v.iter().map(|i| i.label.clone()).collect()
}

fn has(l: &[String], s: &str) -> bool {
    l.iter().any(|x| x == s)
}

#[test]
fn completion_contexts() {
    // tile. members
    let src = GEMM.replace("            C[m0:m0", "            x = tile.$0\n            C[m0:m0");
    let (db, file, offset) = fixture(&src);
    let c = completions(&db, file, offset);
    let l = labels(&c.items);
    assert!(has(&l, "load") && has(&l, "cp_async") && !has(&l, "softmax_safe"), "{l:?}");
    let load = c.items.iter().find(|i| i.label == "load").unwrap();
    assert!(load.detail.as_deref().unwrap().starts_with("tile.load(src"));
    // ctx. keys
    let src = GEMM.replace("            C[m0:m0", "            x = ctx.B$0\n            C[m0:m0");
    let (db, file, offset) = fixture(&src);
    let c = completions(&db, file, offset);
    let l = labels(&c.items);
    assert!(has(&l, "BM") && has(&l, "M") && has(&l, "warps"), "{l:?}");
    assert_eq!(c.replace.len(), 1);
    // policies after @ in a type
    let src = GEMM.replace("B: Tensor[\"K\", \"N\", bf16]", "B: Tensor[\"K\", \"N\", bf16 @$0]");
    let (db, file, offset) = fixture(&src);
    let l = labels(&completions(&db, file, offset).items).join(",");
    assert!(l.starts_with("accum,"), "{l}");
    // dtypes in a type
    let src = GEMM.replace("B: Tensor[\"K\", \"N\", bf16]", "B: Tensor[\"K\", \"N\", b$0]");
    let (db, file, offset) = fixture(&src);
    let l = labels(&completions(&db, file, offset).items);
    assert!(has(&l, "bf16") && !has(&l, "tile"), "{l:?}");
    // keyword arguments of a builtin
    let src = GEMM.replace("tile.zeros((ctx.BM, ctx.BN), f32)", "tile.alloc_shared((ctx.BM, ctx.BN), f32, $0)");
    let (db, file, offset) = fixture(&src);
    let l = labels(&completions(&db, file, offset).items);
    assert!(has(&l, "swizzle=") && has(&l, "pad="), "{l:?}");
    // decorators
    let src = GEMM.replace("@ts.jit", "@$0");
    let (db, file, offset) = fixture(&src);
    let l = labels(&completions(&db, file, offset).items);
    assert!(has(&l, "kernel.autotune") && has(&l, "jit"), "{l:?}");
    // names in scope
    let src = GEMM.replace("    return gelu(y)", "    return $0");
    let (db, file, offset) = fixture(&src);
    let l = labels(&completions(&db, file, offset).items);
    assert_eq!(&l[..3], ["w", "x", "y"]);
    assert!(has(&l, "softmax_safe") && !has(&l, "cp_async"), "{l:?}");
}

#[test]
fn signature_help_active_parameter() {
    let src = GEMM.replace("tile.zeros((ctx.BM, ctx.BN), f32)", "tile.load(A, mask=m, $0");
    let (db, file, offset) = fixture(&src);
    let h = signature_help(&db, file, offset).unwrap();
    assert!(h.label.starts_with("tile.load(src, mask=None"));
    assert_eq!(h.active_param, Some(2));
    let (s, e) = h.params[2];
    assert_eq!(&h.label[s as usize..e as usize], "other=0");
    let src = GEMM.replace("tile.zeros((ctx.BM, ctx.BN), f32)", "tile.load(A, prefetch=$0");
    let (db, file, offset) = fixture(&src);
    assert_eq!(signature_help(&db, file, offset).unwrap().active_param, Some(4));
    let src = GEMM.replace("    return gelu(y)", "    return graph(x, $0");
    let (db, file, offset) = fixture(&src);
    let h = signature_help(&db, file, offset).unwrap();
    assert!(h.label.starts_with("graph(x: Tensor[\"B\", \"D\", bf16], w:"), "{}", h.label);
    assert_eq!(h.active_param, Some(1));
}

#[test]
fn inlay_hints_and_structure() {
    let (db, file, _) = fixture(&format!("$0{GEMM}"));
    let text = text_of(&db, file);
    let hints: Vec<String> = inlay_hints(&db, file, None)
        .iter()
        .map(|h| format!("{}{}", &text[h.offset as usize - 3..h.offset as usize], h.label))
        .collect();
    expect![[r#"
        [
            "ctx: schedule context",
            "acc: tile<BMxBNxf32>",
            "  a: tile<BMxBKxbf16 @accum(f32)>",
            "  b: tile<BKxBNxbf16>",
            "  y: Tensor[\"B\", \"N\", bf16]",
        ]
    "#]]
    .assert_debug_eq(&hints);
    let symbols: Vec<String> =
        file_structure(&db, file).iter().map(|s| format!("{} {:?} {}", s.name, s.kind, s.detail)).collect();
    expect![[r#"
        [
            "BLOCK Constant int = 128",
            "gemm Kernel kernel.autotune",
            "graph Graph jit",
        ]
    "#]]
    .assert_debug_eq(&symbols);
    let index = crate::text::LineIndex::new(&text);
    let folds: Vec<String> = folding_ranges(&db, file)
        .iter()
        .map(|f| format!("{}-{} {:?}", index.line_of(f.range.start) + 1, index.line_of(f.range.end) + 1, f.kind))
        .filter(|s| {
            let (a, b) = s.split_once(' ').unwrap().0.split_once('-').unwrap();
            a != b
        })
        .collect();
    expect![[r#"
        [
            "1-2 Imports",
            "6-8 Region",
            "9-21 Region",
            "9-11 Region",
            "14-21 Region",
            "15-21 Region",
            "17-20 Region",
            "24-26 Region",
        ]
    "#]]
    .assert_debug_eq(&folds);
}

#[test]
fn highlighting_classes() {
    let (db, file, _) = fixture(&format!("$0{GEMM}"));
    let text = text_of(&db, file);
    let tokens = highlight(&db, file);
    let class_of = |needle: &str, nth: usize| -> String {
        let pos = text.match_indices(needle).nth(nth).unwrap().0 as u32;
        let Some(t) = tokens.iter().find(|t| t.range.start == pos) else {
            return format!("unclassified {needle:?}");
        };
        format!("{:?}/{}", t.tag, t.mods.0)
    };
    assert_eq!(class_of("gemm", 0), "Function/1");
    assert_eq!(class_of("bf16 @", 0), "Type/4");
    assert_eq!(class_of("accum", 0), "Decorator/12");
    assert_eq!(class_of("autotune", 0), "Decorator/4");
    assert_eq!(class_of("ctx.BM", 1).replace("Variable/0", "var"), "var");
    assert_eq!(class_of("BM)", 0), "Property/2");
    assert_eq!(class_of("M, ctx", 0), "TypeParameter/0");
    assert_eq!(class_of("tile.zeros", 0), "Namespace/4");
    assert_eq!(class_of("zeros", 0), "Function/4");
    assert_eq!(class_of("BLOCK", 0), "Variable/3");
}

#[test]
fn decorators_namespaces_and_constants_in_decorators() {
    let src = "import tessera as ts\nfrom tessera import *\n\nbase = Schedule(block=(128, 128), k=32)\n\n@kernel.schedule(base)\ndef k(x: Tensor[\"N\", f32]):\n    ctx = tile.context()\n    y = ts.$0\n";
    let (db, file, offset) = fixture(src);
    let l = labels(&completions(&db, file, offset).items);
    assert!(has(&l, "tile") && has(&l, "dist") && has(&l, "f32") && has(&l, "gelu"), "{l:?}");
    let src2 = src.replace("y = ts.$0", "y = dist.$0");
    let (db, file, offset) = fixture(&src2);
    let l = labels(&completions(&db, file, offset).items);
    assert_eq!(l, ["mesh", "tensor"]);
    let src3 = src.replace("@kernel.schedule(base)", "@ts.kernel.$0").replace("y = ts.$0", "pass");
    let (db, file, offset) = fixture(&src3);
    let l = labels(&completions(&db, file, offset).items);
    assert_eq!(l, ["auto", "autotune", "schedule"]);
    // A constant used in a decorator: references and rename reach it.
    let src4 = src.replace("@kernel.schedule(base)", "@kernel.schedule(b$0ase)").replace("y = ts.$0", "pass");
    let (db, file, offset) = fixture(&src4);
    let text = text_of(&db, file);
    let refs = find_references(&db, file, offset, true);
    assert_eq!(refs.len(), 2);
    let edits = rename(&db, file, offset, "sched").unwrap();
    let mut out = text.clone();
    for e in edits.iter().rev() {
        out.replace_range(e.range.start as usize..e.range.end as usize, &e.text);
    }
    assert!(out.contains("sched = Schedule(") && out.contains("@kernel.schedule(sched)"), "{out}");
    // Hover in a decorator shows the schedule builtin.
    let h = hover(&db, file, text.find("schedule(").unwrap() as u32).unwrap();
    assert!(h.markdown.contains("kernel.schedule(schedule)"), "{}", h.markdown);
    // Through an import alias: signature help and keyword arguments.
    let src5 = "from tessera import *\nfrom tessera import alloc_shared as a\n\n@kernel\ndef k(x: Tensor[\"N\", f32]):\n    s = tile.alloc_shared((16, 16), f32, sw$0)\n";
    let (db, file, offset) = fixture(src5);
    let h = signature_help(&db, file, offset).unwrap();
    assert_eq!(h.active_param, Some(2), "{}", h.label);
    let l = labels(&completions(&db, file, offset).items);
    assert_eq!(l[0], "pad=", "{l:?}");
    let src6 = "import tessera as ts\nfrom tessera import gelu as g\n\n@ts.jit\ndef f(x: ts.Tensor[\"N\", ts.f32]) -> ts.Tensor[\"N\", ts.f32]:\n    return g($0\n";
    let (db, file, offset) = fixture(src6);
    let h = signature_help(&db, file, offset).unwrap();
    assert!(h.label.starts_with("gelu(x)"), "{}", h.label);
}

/// Parameters named where no expression reads them: in a `grad(f, wrt=...)` string and in
/// an `OptimizerState[W]` annotation. Go to definition, references and rename reach them.
#[test]
fn parameters_named_in_strings_and_optimizer_state() {
    let src = r#"from tessera import *

@jit
@autodiff
def loss(x: Tensor["B", "D", f32], W: Tensor["D", "N", f32]) -> Tensor[f32]:
    return mean(x @ W)

@jit
def step(x: Tensor["B", "D", f32], W: Tensor["D", "N", f32]):
    (g,) = grad(loss, wrt=("$0W",))(x, W)
    return g

@jit
def adam_step(P: Tensor["K", "N", bf16], state: OptimizerState[P] @fp32_master,
              g: Tensor["K", "N", bf16], lr: float):
    P, state = state.adam(P, g, lr=lr)
    return P, state
"#;
    let (db, file, offset) = fixture(src);
    let text = text_of(&db, file);
    let line = |o: u32| crate::text::LineIndex::new(&text).line_of(o) + 1;
    // From the string: `loss`'s parameter W (not `step`'s).
    let defs: Vec<u32> = goto_definition(&db, file, offset).iter().map(|t| line(t.focus.start)).collect();
    assert_eq!(defs, [5]);
    assert_eq!(prepare_rename(&db, file, offset).unwrap().slice(&text), "W");
    let edits = rename(&db, file, offset, "weight").unwrap();
    let mut out = text.clone();
    let mut sorted = edits.clone();
    sorted.sort_by_key(|e| e.range.start);
    for e in sorted.iter().rev() {
        out.replace_range(e.range.start as usize..e.range.end as usize, &e.text);
    }
    assert!(out.contains("weight: Tensor[\"D\", \"N\", f32]) -> Tensor[f32]:\n    return mean(x @ weight)"), "{out}");
    assert!(out.contains("wrt=(\"weight\",))(x, W)"), "{out}");
    // `OptimizerState[P]`: P is the parameter.
    let at_state = text.find("OptimizerState[P]").unwrap() as u32 + "OptimizerState[".len() as u32;
    let defs: Vec<u32> = goto_definition(&db, file, at_state).iter().map(|t| line(t.focus.start)).collect();
    assert_eq!(defs, [14]);
    let at_param = text.find("def adam_step(P").unwrap() as u32 + "def adam_step(".len() as u32;
    let refs: Vec<u32> = find_references(&db, file, at_param, true).iter().map(|r| r.range.start).collect();
    assert!(refs.contains(&at_state), "{refs:?}");
    assert!(hover(&db, file, at_state).is_some_and(|h| h.markdown.contains("P")));
}
