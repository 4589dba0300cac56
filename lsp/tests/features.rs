//! Every capability of the server, end to end over stdio against the real binary.
//! Fixtures mark cursors with `$0`; results are rendered as text and compared with
//! `expect!` snapshots (`UPDATE_EXPECT=1 cargo test -p tessera-lsp` refreshes them).

mod support;

use expect_test::{expect, Expect};
use serde_json::{json, Value};
use support::*;

const URI: &str = "file:///tmp/tessera-lsp-tests/gemm.tsr";

const GEMM: &str = r#"import tessera as ts
from tessera import tile, Tensor, bf16, f32

BLOCK = 128

@ts.kernel.autotune(
    space=dict(BM=[64, 128], BN=[64, 128], BK=[32, 64], warps=[4, 8]),
    metric="latency_ms", budget_ms=500)
def gemm(A: Tensor["M", "K", bf16 @accum(f32)],
         B: Tensor["K", "N", bf16],
         C: Tensor["M", "N", f32]):
    """C = A @ B, one BM x BN block per tile program."""
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

/// GEMM with `$0` inserted before the `nth` occurrence of `needle` on the first line
/// that contains `line`.
fn at(line: &str, needle: &str) -> String {
    let start = GEMM.find(line).unwrap_or_else(|| panic!("no line {line:?}"));
    let pos = start + GEMM[start..].find(needle).expect("needle on the line");
    format!("{}$0{}", &GEMM[..pos], &GEMM[pos..])
}

/// Opens `src` (with one `$0`) and returns the server, the text and the cursor.
fn open(src: &str) -> (Server, String, Value) {
    let (text, pos) = cursors(src);
    let mut s = Server::initialized(json!({}));
    s.open_and_wait(URI, &text);
    let pos = pos.into_iter().next().unwrap_or(json!({"line": 0, "character": 0}));
    (s, text, pos)
}

fn doc_pos(pos: &Value) -> Value {
    json!({"textDocument": {"uri": URI}, "position": pos})
}

fn check_hover(src: &str, expect: Expect) {
    let (mut s, text, pos) = open(src);
    let h = s.result("textDocument/hover", doc_pos(&pos));
    let actual = if h.is_null() {
        "null".to_string()
    } else {
        format!("[{}]\n{}", slice(&text, &h["range"]), h["contents"]["value"].as_str().unwrap())
    };
    expect.assert_eq(&actual);
}

#[test]
fn hover_local_tile_shape() {
    check_hover(
        &at("acc = tile.zeros", "acc"),
        expect![[r#"
            [acc]
            ```tessera
            acc: tile<BMxBNxf32>
            ```

            local of kernel `gemm`

            rank 2: [BM, BN]

            - f32 storage (32-bit IEEE float)"#]],
    );
}

/// `where(cond, a, b)` broadcasts the condition too: number branches give a tile of the
/// condition's shape (it was typed a scalar).
#[test]
fn hover_where_of_numbers_is_a_tile_of_the_conditions_shape() {
    let src = GEMM.replace(
        "            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc\n",
        "            $0signs = tile.where(acc > 0.0, 1.0, -1.0)\n            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = signs\n",
    );
    check_hover(
        &src,
        expect![[r#"
            [signs]
            ```tessera
            signs: tile<BMxBNxf32>
            ```

            local of kernel `gemm`

            rank 2: [BM, BN]

            - f32 storage (32-bit IEEE float)"#]],
    );
}

#[test]
fn hover_tensor_param_explains_policies() {
    check_hover(
        &at("a = tile.load(A[", "A["),
        expect![[r#"
            [A]
            ```tessera
            A: Tensor["M", "K", bf16 @accum(f32)]
            ```

            parameter of kernel `gemm`

            rank 2: [M, K]

            - bf16 storage (bfloat16 (f32 range, 7-bit mantissa))
            - products and sums are accumulated in f32, then rounded to bf16 on store"#]],
    );
}

#[test]
fn hover_builtin_signature_and_doc() {
    check_hover(
        &at("acc += tile.dot", "dot"),
        expect![[r#"
            [dot]
            ```tessera
            tile.dot(a, b, acc=None) -> tile
            ```

            Tile matmul: [M,K] x [K,N] -> [M,N] f32 (i32 for int8/int4, f64 for f64); with `acc` (Triton's `tl.dot(a, b, acc)`), acc + a@b in acc's dtype. On GPUs, f16, bf16, fp8 and int8 operands run on tensor cores when M is a multiple of 16, N of 8 and K of 16 (32 for 8-bit); other dims, and f32/tf32/f64 operands, run as FMAs.

            *kernel intrinsic: only inside `@kernel` functions*

            here: `tile<BMxBNxf32>`

            ---

            **On sm_90** (BD=64, BK=32, BM=64, BN=64, stages=2, swizzle=none, vector=4, warps=4): 64×64×32 (bf16 × bf16 → f32) as warp MMAs: `mma.sync.aligned.m16n8k16` (`HMMA` in SASS) on 2×2 warps, 16 per warp"#]],
    );
}

#[test]
fn hover_atomic_add_says_what_it_adds_into() {
    let src = GEMM.replace(
        "C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc",
        "tile.$0atomic_add(C[m0:m0 + ctx.BM, n0:n0 + ctx.BN], acc)",
    );
    check_hover(
        &src,
        expect![[r#"
        [atomic_add]
        ```tessera
        tile.atomic_add(dst, value, mask=None)
        ```

        Adds a tile into a slice of a global tensor (or, by an index tile, its elements: a histogram), element by element atomically: programs may add into the same elements (split-K, column sums). f32, f64, i32 and i64; out-of-bounds elements are dropped.

        *kernel intrinsic: only inside `@kernel` functions*"#]],
    );
}

#[test]
fn hover_kernel_shows_schedule() {
    check_hover(
        &at("def gemm", "gemm"),
        expect![[r#"
            [gemm]
            ```tessera
            @kernel.autotune
            def gemm(
                A: Tensor["M", "K", bf16 @accum(f32)],
                B: Tensor["K", "N", bf16],
                C: Tensor["M", "N", f32],
            )
            ```

            C = A @ B, one BM x BN block per tile program.

            ---

            **kernel** — the body runs once per tile program of the launch grid; specialized per launch on `M`, `K`, `N`

            **Schedule**: autotuned over 16 configurations (metric `latency_ms`, budget 500 ms)

            - `BM` ∈ {64, 128}
            - `BN` ∈ {64, 128}
            - `BK` ∈ {32, 64}
            - `warps` ∈ {4, 8}

            ---

            **On sm_90** (BD=64, BK=32, BM=64, BN=64, stages=2, swizzle=none, vector=4, warps=4): ~67 registers/thread (estimate), 16 KiB shared memory, 128 threads; occupancy 43.8% (7 blocks of 4 warps per SM, limited by registers)

            Largest live values at the peak: `acc` 32 regs, `a` 8 regs, `b` 8 regs"#]],
    );
}

/// Under warp specialization the kernel hover's registers are a consumer thread's,
/// against the count the consumers' `setmaxnreg` gives them.
#[test]
fn hover_a_warp_specialized_kernel_gives_consumer_registers() {
    let src = include_str!("../../tests/fixtures/wgmma/warp_specialized.tsr").replace("def ws_gemm", "def $0ws_gemm");
    let (mut s, _, pos) = open(&src);
    let h = s.result("textDocument/hover", doc_pos(&pos));
    let text = h["contents"]["value"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("registers per consumer thread (estimate; setmaxnreg gives them 240)"), "{text}");
    assert!(!text.contains("registers/thread"), "{text}");
}

/// A `tile.dot`'s hover says what it runs as under the kernel's configuration: Hopper
/// warpgroup MMAs (int8: IGMMA), warp MMAs, or FMAs and why.
#[test]
fn hover_a_dot_says_which_instructions_run_it() {
    let hover = |src: &str| {
        let (mut s, _, pos) = open(src);
        let h = s.result("textDocument/hover", doc_pos(&pos));
        h["contents"]["value"].as_str().unwrap_or_default().to_string()
    };
    let int8 = include_str!("../../tests/fixtures/wgmma/int8.tsr").replacen("tile.dot(", "tile.$0dot(", 1);
    let text = hover(&int8);
    assert!(text.contains("Tile matmul"), "{text}");
    assert!(
        text.contains("`wgmma.mma_async.m64n64k32.s32.s8.s8` (`IGMMA` in SASS), 2 warpgroups each computing 64×64, 4 instructions per warpgroup"),
        "{text}"
    );
    assert!(text.contains("B from shared memory (K-major)"), "{text}");
    let gemm = include_str!("../../tests/fixtures/wgmma/warp_specialized.tsr").replacen("tile.dot(", "tile.$0dot(", 1);
    let text = hover(&gemm);
    assert!(text.contains("`wgmma.mma_async.m64n128k16.f32.bf16.bf16` (`HGMMA` in SASS)"), "{text}");
    let f32 = gemm.replace("bf16", "f32").replace(", mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\"", "");
    let text = hover(&f32);
    assert!(
        text.contains(
            "as FMAs on the CUDA cores, not tensor cores: tensor cores take 16- and 8-bit operands, these are f32"
        ),
        "{text}"
    );
    let sync = gemm.replace(", mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\"", "");
    let text = hover(&sync);
    assert!(text.contains("as warp MMAs: `mma.sync.aligned.m16n8k16` (`HMMA` in SASS) on"), "{text}");
}

#[test]
fn hover_schedule_key_symbol_policy_graph_value() {
    check_hover(
        &at("acc = tile.zeros", "BN)"),
        expect![[r#"
            [BN]
            ```tessera
            ctx.BN: int
            ```

            schedule key of `gemm`, autotuned over {64, 128}"#]],
    );
    check_hover(
        &at("for k0 in", "K, ctx"),
        expect![[r#"
            [K]
            ```tessera
            K: int
            ```

            dim symbol of `gemm`, bound at each call by `A` dim 1 (`K`), `B` dim 0 (`K`)"#]],
    );
    check_hover(
        &at("def gemm", "accum"),
        expect![[r#"
            [accum]
            ```tessera
            @accum(dtype)
            ```

            dtype policy: Accumulate products and sums in `dtype` (at least as wide as the storage). fp8 dots on Hopper tensor cores (`mma="wgmma"`) sum each chunk of up to 128 products at about 14 bits, then add it in `dtype`.

            Written after a dtype in a type: `bf16 @accum(...)`."#]],
    );
    check_hover(
        &at("    y = x @ w", "y"),
        expect![[r#"
            [y]
            ```tessera
            y: Tensor["B", "N", bf16]
            ```

            local of graph function `graph`

            rank 2: [B, N]

            - bf16 storage (bfloat16 (f32 range, 7-bit mantissa))"#]],
    );
    check_hover(&at("def gemm", "def"), expect!["null"]);
}

#[test]
fn inlay_hints_for_bindings() {
    let (mut s, text, _) = open(GEMM);
    let hints = s.result(
        "textDocument/inlayHint",
        json!({"textDocument": {"uri": URI}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 100, "character": 0}}}),
    );
    let lines: Vec<String> = hints
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let p = &h["position"];
            let line = text.lines().nth(p["line"].as_u64().unwrap() as usize).unwrap();
            let col = p["character"].as_u64().unwrap() as usize;
            format!("{}|{}", line[..col].trim_start(), h["label"].as_str().unwrap())
        })
        .collect();
    expect![[r#"
        ctx|: schedule context
        acc|: tile<BMxBNxf32>
        a|: tile<BMxBKxbf16 @accum(f32)>
        b|: tile<BKxBNxbf16>
        y|: Tensor["B", "N", bf16]"#]]
    .assert_eq(&lines.join("\n"));
}

fn locations(text: &str, locs: &Value) -> String {
    locs.as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let line = l["range"]["start"]["line"].as_u64().unwrap() as usize;
            format!(
                "{} {:?} in {:?}",
                fmt_range(&l["range"]),
                slice(text, &l["range"]),
                text.lines().nth(line).unwrap().trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn goto_definition() {
    for (src, expect) in [
        (
            at("acc += tile.dot", "a, b"),
            expect![[r#"18:16-18:17 "a" in "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])""#]],
        ),
        (
            at("a = tile.load(A[", "A["),
            expect![[r#"9:9-9:10 "A" in "def gemm(A: Tensor[\"M\", \"K\", bf16 @accum(f32)],""#]],
        ),
        (
            at("acc = tile.zeros", "BM,"),
            expect![[r#"7:15-7:17 "BM" in "space=dict(BM=[64, 128], BN=[64, 128], BK=[32, 64], warps=[4, 8]),""#]],
        ),
        (
            at("for m0 in", "M, "),
            expect![[r#"9:20-9:21 "M" in "def gemm(A: Tensor[\"M\", \"K\", bf16 @accum(f32)],""#]],
        ),
        (
            at("from tessera import", "tile,"),
            expect![[r#"2:20-2:24 "tile" in "from tessera import tile, Tensor, bf16, f32""#]],
        ),
    ] {
        let (mut s, text, pos) = open(&src);
        let r = s.result("textDocument/definition", doc_pos(&pos));
        expect.assert_eq(&locations(&text, &r));
    }
    // Built-ins have no source: null.
    let (mut s, _, pos) = open(&at("acc += tile.dot", "dot"));
    assert!(s.result("textDocument/definition", doc_pos(&pos)).is_null());
}

#[test]
fn find_references() {
    let (mut s, text, pos) = open(&at("acc += tile.dot", "acc"));
    let r = s.result(
        "textDocument/references",
        json!({"textDocument": {"uri": URI}, "position": pos, "context": {"includeDeclaration": true}}),
    );
    expect![[r#"
        16:12-16:15 "acc" in "acc = tile.zeros((ctx.BM, ctx.BN), f32)"
        20:16-20:19 "acc" in "acc += tile.dot(a, b)"
        21:48-21:51 "acc" in "C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc""#]]
    .assert_eq(&locations(&text, &r));
    let (mut s, text, pos) = open(&at("for m0 in", "M, "));
    let r = s.result(
        "textDocument/references",
        json!({"textDocument": {"uri": URI}, "position": pos, "context": {"includeDeclaration": false}}),
    );
    expect![[r#"14:31-14:32 "M" in "for m0 in tile.parallel(0, M, ctx.BM):""#]].assert_eq(&locations(&text, &r));
}

#[test]
fn rename_locals_params_functions_and_refusals() {
    let (mut s, text, pos) = open(&at("acc = tile.zeros", "acc"));
    let prep = s.result("textDocument/prepareRename", doc_pos(&pos));
    assert_eq!(slice(&text, &prep), "acc");
    let edit = s
        .result("textDocument/rename", json!({"textDocument": {"uri": URI}, "position": pos, "newName": "accum_tile"}));
    let edits = edit["changes"][URI].as_array().unwrap();
    let renamed = apply_edits(&text, edits);
    assert_eq!(renamed.matches("accum_tile").count(), 3, "{renamed}");
    assert!(!renamed.contains("acc ") && !renamed.contains(" acc\n"));
    // The renamed file still checks clean.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": renamed}]}),
    );
    assert_eq!(frontend_diagnostics(&s.diagnostics_for(URI, 2)), json!([]));

    // A parameter.
    let (mut s, text, pos) = open(&at("def graph", "w:"));
    let edit =
        s.result("textDocument/rename", json!({"textDocument": {"uri": URI}, "position": pos, "newName": "weight"}));
    let renamed = apply_edits(&text, edit["changes"][URI].as_array().unwrap());
    assert!(renamed.contains("weight: Tensor[\"D\", \"N\", bf16]") && renamed.contains("y = x @ weight"));

    // Refusals: a built-in, a keyword, an invalid or taken new name.
    let refusal = |src: &str, new_name: &str| -> String {
        let (mut s, _, pos) = open(src);
        let prep = s.request("textDocument/prepareRename", doc_pos(&pos));
        let rename = s.request(
            "textDocument/rename",
            json!({"textDocument": {"uri": URI}, "position": pos, "newName": new_name}),
        );
        format!(
            "prepare: {} | rename: {}",
            prep.get("error").map_or_else(|| prep["result"].to_string(), |e| e["message"].to_string()),
            rename["error"]["message"]
        )
    };
    expect![[r#"prepare: "`tile.zeros` is a built-in and cannot be renamed" | rename: "`tile.zeros` is a built-in and cannot be renamed""#]]
    .assert_eq(&refusal(&at("acc = tile.zeros", "zeros"), "z"));
    expect![[
        r#"prepare: "`for` is a keyword and cannot be renamed" | rename: "`for` is a keyword and cannot be renamed""#
    ]]
    .assert_eq(&refusal(&at("for m0 in", "for"), "z"));
    expect![[r#"prepare: "`bf16` is the name of a tessera member; write `bf16 as NEW_NAME` in the import to rename it" | rename: "`bf16` is the name of a tessera member; write `bf16 as NEW_NAME` in the import to rename it""#]]
    .assert_eq(&refusal(&at("B: Tensor", "bf16"), "z"));
    expect![[r#"prepare: {"start":{"line":17,"character":16},"end":{"line":17,"character":17}} | rename: "`while` is a keyword""#]]
    .assert_eq(&refusal(&at("a = tile.load(A", "a ="), "while"));
    expect![[r#"prepare: {"start":{"line":17,"character":16},"end":{"line":17,"character":17}} | rename: "`acc` is already a name in `gemm`""#]]
    .assert_eq(&refusal(&at("a = tile.load(A", "a ="), "acc"));
}

fn completion_labels(src: &str, n: usize) -> String {
    let (text, pos) = cursors(src);
    let mut s = Server::initialized(json!({}));
    s.open(URI, &text);
    let r = s.result("textDocument/completion", doc_pos(&pos[0]));
    let mut items: Vec<Value> = r["items"].as_array().unwrap().clone();
    items.sort_by(|a, b| a["sortText"].as_str().cmp(&b["sortText"].as_str()));
    items
        .iter()
        .take(n)
        .map(|i| format!("{} ({}) {}", i["label"].as_str().unwrap(), i["kind"], i["detail"].as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn completion_members_keys_policies_dtypes() {
    let src = GEMM.replace("acc += tile.dot(a, b)", "acc += tile.d$0");
    expect![[r#"
        abs (3) tile.abs(x) -> tile
        alloc_shared (3) tile.alloc_shared(shape, dtype, swizzle="none", pad=0) -> shared buffer
        arange (3) tile.arange(n) -> tile<nxi32>
        atomic_add (3) tile.atomic_add(dst, value, mask=None)
        barrier (3) tile.barrier()"#]]
    .assert_eq(&completion_labels(&src, 5));
    // The documentation of a member is its signature and doc.
    let (text, pos) = cursors(&src);
    let mut s = Server::initialized(json!({}));
    s.open(URI, &text);
    let r = s.result("textDocument/completion", doc_pos(&pos[0]));
    let dot = r["items"].as_array().unwrap().iter().find(|i| i["label"] == "dot").unwrap();
    expect![[r#"
        ```tessera
        tile.dot(a, b, acc=None) -> tile
        ```

        Tile matmul: [M,K] x [K,N] -> [M,N] f32 (i32 for int8/int4, f64 for f64); with `acc` (Triton's `tl.dot(a, b, acc)`), acc + a@b in acc's dtype. On GPUs, f16, bf16, fp8 and int8 operands run on tensor cores when M is a multiple of 16, N of 8 and K of 16 (32 for 8-bit); other dims, and f32/tf32/f64 operands, run as FMAs."#]]
    .assert_eq(dot["documentation"]["value"].as_str().unwrap());
    assert_eq!(slice(&text, &dot["textEdit"]["range"]), "d");

    let src = GEMM.replace("acc += tile.dot(a, b)", "acc += ctx.$0");
    expect![[r#"
        BD (5) default 64
        BK (5) autotuned: {32, 64}
        BM (5) autotuned: {64, 128}
        BN (5) autotuned: {64, 128}
        cluster_x (5) default 1
        cluster_y (5) default 1
        copy (5) default "cp.async"
        mma (5) default "mma.sync"
        producer (5) default "none"
        stages (5) default 2
        swizzle (5) default "none"
        vector (5) default 4
        warps (5) autotuned: {4, 8}
        K (25) dim symbol of the signature
        M (25) dim symbol of the signature
        N (25) dim symbol of the signature"#]]
    .assert_eq(&completion_labels(&src, 20));

    let src = GEMM.replace("B: Tensor[\"K\", \"N\", bf16]", "B: Tensor[\"K\", \"N\", bf16 @$0]");
    expect![[r#"
        accum (20) @accum(dtype)
        checkpointable (20) @checkpointable
        device (20) @device(gpu|cpu)
        fp32_master (20) @fp32_master
        loss_scale (20) @loss_scale(k)
        paged (20) @paged
        rolling_window (20) @rolling_window
        saturate (20) @saturate
        stochastic_round (20) @stochastic_round"#]]
    .assert_eq(&completion_labels(&src, 20));

    let src = GEMM.replace("B: Tensor[\"K\", \"N\", bf16]", "B: Tensor[\"K\", \"N\", f$0]");
    expect![[r#"
        bf16 (22) bfloat16 (f32 range, 7-bit mantissa)
        bool (22) boolean
        f16 (22) IEEE half precision (5-bit exponent, 10-bit mantissa)
        f32 (22) 32-bit IEEE float"#]]
    .assert_eq(&completion_labels(&src, 4));

    let src = GEMM.replace("metric=\"latency_ms\", budget_ms=500)", "metric=\"latency_ms\", $0)");
    expect![[r#"
        budget_ms= (6) budget_ms=None
        cache= (6) cache=None
        BLOCK (21) module constant"#]]
    .assert_eq(&completion_labels(&src, 3));

    let src = GEMM.replace("    return gelu(y)", "    return $0");
    expect![[r#"
        w (6) Tensor["D", "N", bf16]
        x (6) Tensor["B", "D", bf16]
        y (6) Tensor["B", "N", bf16]
        B (25) int (dim symbol)
        BLOCK (21) module constant
        D (25) int (dim symbol)
        N (25) int (dim symbol)
        Tensor (9) tessera.Tensor
        bf16 (9) dtype bf16
        f32 (9) dtype f32"#]]
    .assert_eq(&completion_labels(&src, 10));
}

#[test]
fn signature_help_active_parameter() {
    let src =
        GEMM.replace("acc = tile.zeros((ctx.BM, ctx.BN), f32)", "acc = tile.alloc_shared((ctx.BM, ctx.BN), f32, $0");
    let (text, pos) = cursors(&src);
    let mut s = Server::initialized(json!({}));
    s.open(URI, &text);
    let h = s.result("textDocument/signatureHelp", doc_pos(&pos[0]));
    let sig = &h["signatures"][0];
    let label = sig["label"].as_str().unwrap();
    let active = h["activeParameter"].as_u64().unwrap() as usize;
    let [a, b] = [0, 1].map(|i| sig["parameters"][active]["label"][i].as_u64().unwrap() as usize);
    expect![[r#"tile.alloc_shared(shape, dtype, swizzle="none", pad=0) -> shared buffer [swizzle="none"]"#]]
        .assert_eq(&format!("{label} [{}]", &label[a..b]));
    // By keyword, and for a user function.
    let src = GEMM.replace("    return gelu(y)", "    return graph(x, w=$0");
    let (text, pos) = cursors(&src);
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": text}]}),
    );
    let h = s.result("textDocument/signatureHelp", doc_pos(&pos[0]));
    expect![[r#"graph(x: Tensor["B", "D", bf16], w: Tensor["D", "N", bf16]) -> Tensor["B", "N", bf16] active=1"#]]
        .assert_eq(&format!("{} active={}", h["signatures"][0]["label"].as_str().unwrap(), h["activeParameter"]));
}

#[test]
fn document_symbols_and_kernels_request() {
    let (mut s, text, _) = open(GEMM);
    let syms = s.result("textDocument/documentSymbol", json!({"textDocument": {"uri": URI}}));
    let lines: Vec<String> = syms
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} kind={} detail={} range={} name={:?}",
                d["name"].as_str().unwrap(),
                d["kind"],
                d["detail"],
                fmt_range(&d["range"]),
                slice(&text, &d["selectionRange"])
            )
        })
        .collect();
    expect![[r#"
        BLOCK kind=14 detail="int = 128" range=4:0-4:11 name="BLOCK"
        gemm kind=12 detail="kernel.autotune" range=6:0-21:51 name="gemm"
        graph kind=12 detail="jit" range=23:0-26:18 name="graph""#]]
    .assert_eq(&lines.join("\n"));
    let kernels = s.result("tessera/kernels", json!({"uri": URI}));
    let lines: Vec<String> = kernels
        .as_array()
        .unwrap()
        .iter()
        .map(|k| format!("{} {} {}", k["name"].as_str().unwrap(), k["kind"].as_str().unwrap(), fmt_range(&k["range"])))
        .collect();
    expect![[r#"
        gemm kernel 6:0-21:51
        graph graph 23:0-26:18"#]]
    .assert_eq(&lines.join("\n"));
}

#[test]
fn folding_ranges() {
    let src = format!("# a comment\n# block\n{GEMM}");
    let (mut s, _, _) = open(&src);
    let folds = s.result("textDocument/foldingRange", json!({"textDocument": {"uri": URI}}));
    let lines: Vec<String> = folds
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}-{} {}",
                f["startLine"].as_u64().unwrap() + 1,
                f["endLine"].as_u64().unwrap() + 1,
                f["kind"].as_str().unwrap_or("")
            )
        })
        .collect();
    expect![[r#"
        1-2 comment
        3-4 imports
        8-10 region
        11-23 region
        16-23 region
        17-23 region
        19-22 region
        26-28 region"#]]
    .assert_eq(&lines.join("\n"));
}

#[test]
fn semantic_tokens() {
    let src = "import tessera as ts\nBLOCK = 128\n\n@ts.kernel\ndef k(x: ts.Tensor[\"N\", bf16 @accum(f32)]):\n    # doc\n    ctx = tile.context()\n    t = tile.load(x[0:ctx.BM])\n    for i in range(N):\n        pass\n";
    let (mut s, text, _) = open(src);
    let types = [
        "namespace",
        "type",
        "typeParameter",
        "parameter",
        "variable",
        "property",
        "function",
        "method",
        "keyword",
        "comment",
        "string",
        "number",
        "decorator",
    ];
    let mods = ["declaration", "readonly", "defaultLibrary", "policy"];
    let data = s.result("textDocument/semanticTokens/full", json!({"textDocument": {"uri": URI}}));
    let data: Vec<u64> = data["data"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let (mut line, mut col) = (0u64, 0u64);
    let mut out = Vec::new();
    for t in data.chunks(5) {
        if t[0] > 0 {
            line += t[0];
            col = t[1];
        } else {
            col += t[1];
        }
        let l = text.lines().nth(line as usize).unwrap();
        let word: String = l.chars().skip(col as usize).take(t[2] as usize).collect();
        let m: Vec<&str> = (0..4).filter(|b| t[4] & (1 << b) != 0).map(|b| mods[b]).collect();
        out.push(format!("{word} {} {}", types[t[3] as usize], m.join(",")).trim_end().to_string());
    }
    expect![[r#"
        import keyword
        tessera namespace defaultLibrary
        as keyword
        ts namespace declaration,defaultLibrary
        BLOCK variable declaration,readonly
        128 number
        @ decorator
        ts namespace defaultLibrary
        kernel decorator defaultLibrary
        def keyword
        k function declaration
        x parameter declaration
        ts namespace defaultLibrary
        Tensor type defaultLibrary
        "N" string
        bf16 type defaultLibrary
        @ decorator policy
        accum decorator defaultLibrary,policy
        f32 type defaultLibrary
        # doc comment
        ctx variable declaration
        tile namespace defaultLibrary
        context function defaultLibrary
        t variable declaration
        tile namespace defaultLibrary
        load function defaultLibrary
        x parameter
        0 number
        ctx variable
        BM property readonly
        for keyword
        i variable declaration
        in keyword
        range function defaultLibrary
        N typeParameter
        pass keyword"#]]
    .assert_eq(&out.join("\n"));
}

#[test]
fn code_actions_apply_fix_its() {
    let src = GEMM.replace("acc += tile.dot(a, b)", "acc += tile.dto(a, b)");
    let (mut s, text, _) = open(&src);
    let uri_diags = s.result(
        "textDocument/codeAction",
        json!({
            "textDocument": {"uri": URI},
            "range": {"start": {"line": 19, "character": 0}, "end": {"line": 19, "character": 40}},
            "context": {"diagnostics": []},
        }),
    );
    let actions = uri_diags.as_array().unwrap();
    assert_eq!(actions.len(), 1, "{uri_diags}");
    let a = &actions[0];
    expect![[r#"did you mean `tile.dot`? quickfix E0201"#]].assert_eq(&format!(
        "{} {} {}",
        a["title"].as_str().unwrap(),
        a["kind"].as_str().unwrap(),
        a["diagnostics"][0]["code"].as_str().unwrap()
    ));
    let fixed = apply_edits(&text, a["edit"]["changes"][URI].as_array().unwrap());
    assert_eq!(fixed, GEMM);
    // Applying it clears the diagnostic.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": fixed}]}),
    );
    assert_eq!(frontend_diagnostics(&s.diagnostics_for(URI, 2)), json!([]));
    // No action outside the diagnostic.
    let none = s.result(
        "textDocument/codeAction",
        json!({
            "textDocument": {"uri": URI},
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
            "context": {"diagnostics": []},
        }),
    );
    assert_eq!(none, json!([]));
}

#[test]
fn code_lenses_above_kernels() {
    let (mut s, _, _) = open(GEMM);
    let lenses = s.result("textDocument/codeLens", json!({"textDocument": {"uri": URI}}));
    let lines: Vec<String> = lenses
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            format!(
                "{} {} {} {}",
                fmt_range(&l["range"]),
                l["command"]["title"].as_str().unwrap(),
                l["command"]["command"].as_str().unwrap(),
                l["command"]["arguments"]
            )
        })
        .collect();
    expect![[r#"
        9:4-9:8 ▶ Explore tessera.explore ["file:///tmp/tessera-lsp-tests/gemm.tsr","gemm"]
        9:4-9:8 ⚡ Run tessera.run ["file:///tmp/tessera-lsp-tests/gemm.tsr","gemm"]"#]]
    .assert_eq(&lines.join("\n"));
    // The commands are the client's: the server does not register them.
    let mut s = Server::start();
    let init = s.result("initialize", json!({"capabilities": {}}));
    assert!(init["capabilities"].get("executeCommandProvider").is_none());
}

#[test]
fn formatting() {
    let messy = "from tessera import *\n@jit\ndef f(x:Tensor[\"N\",bf16@accum(f32)],y :Tensor[\"N\",bf16],*,p=0.1)->Tensor[\"N\",bf16]:\n  z=residual(x,y , dropout = p)   # keep\n  return z\n";
    let (mut s, text, _) = open(messy);
    let edits = s.result(
        "textDocument/formatting",
        json!({"textDocument": {"uri": URI}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    let formatted = apply_edits(&text, edits.as_array().unwrap());
    expect![[r#"
        from tessera import *


        @jit
        def f(x: Tensor["N", bf16 @accum(f32)], y: Tensor["N", bf16], *, p=0.1) -> Tensor["N", bf16]:
            z = residual(x, y, dropout=p)  # keep
            return z
    "#]]
    .assert_eq(&formatted);
    // Already formatted: no edits.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": formatted}]}),
    );
    let edits = s.result(
        "textDocument/formatting",
        json!({"textDocument": {"uri": URI}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    assert_eq!(edits, json!([]));
    // Syntax errors: refused with an error, not a broken file.
    s.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 3}, "contentChanges": [{"text": "def f(:\n  pass\n"}]}),
    );
    let r = s.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": URI}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    expect!["-32803 cannot format a file with syntax errors: 1:6: error[E0102] `(` is never closed"]
        .assert_eq(&format!("{} {}", r["error"]["code"], r["error"]["message"].as_str().unwrap()));
}

#[test]
fn lowering_request_returns_ir_mapped_to_the_source() {
    let (mut s, _, _) = open(GEMM);
    let r = s.result("tessera/lowering", json!({"uri": URI, "kernel": "gemm", "stage": "tile", "target": "sm_90"}));
    let text = r["text"].as_str().unwrap();
    assert!(text.starts_with("func.func @gemm("), "{text}");
    assert!(text.contains("grid = ["), "Tile IR has a grid: {text}");
    let map = r["sourceMap"].as_array().unwrap();
    assert!(map.len() > 10, "{r}");
    // Every mapped IR line exists and points inside the document.
    let lines = text.lines().count() as u64;
    for m in map {
        assert!(m["irLine"].as_u64().unwrap() < lines, "{m}");
        assert!(m["range"]["start"]["line"].as_u64().unwrap() < GEMM.lines().count() as u64, "{m}");
    }
    let all = s.result("tessera/lowering", json!({"uri": URI, "kernel": "gemm", "stage": "all", "target": "cpu"}));
    let all_text = all["text"].as_str().unwrap();
    for stage in ["graph", "sched", "tile", "target"] {
        assert!(all_text.contains(&format!("// ===== {stage} IR: gemm (cpu) =====")), "{all_text}");
    }
    let r = s.request("tessera/lowering", json!({"uri": URI, "kernel": "nope", "stage": "tile"}));
    assert_eq!(r["error"]["message"], "unknown kernel: nope", "{r}");
    let r = s.request("tessera/lowering", json!({"uri": URI, "kernel": "gemm", "stage": "ptx"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn settings_target_and_tessera_toml() {
    // W0705 (an autotune key never read through ctx) shows by default and is filtered by
    // tessera.toml's `ignore`, found upward from the file.
    let dir = std::env::temp_dir().join(format!("tessera-lsp-toml-{}", std::process::id()));
    let sub = dir.join("src");
    std::fs::create_dir_all(&sub).unwrap();
    let src = "from tessera import *\n\n@kernel.autotune(space=dict(BLOCK=[64, 128]))\ndef k(x: Tensor[\"N\", f32]):\n    pass\n";
    let file = sub.join("k.tsr");
    std::fs::write(&file, src).unwrap();
    let uri = format!("file://{}", file.display());
    let mut s = Server::initialized(json!({"target": "sm_80"}));
    let d = s.open_and_wait(&uri, src);
    let kept = frontend_diagnostics(&d);
    let codes: Vec<&str> = kept.as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["W0705"]);
    std::fs::write(dir.join("tessera.toml"), "target = \"sm_90\"\nignore = [\"W07\"]\n").unwrap();
    s.notify(
        "workspace/didChangeWatchedFiles",
        json!({"changes": [{"uri": format!("file://{}/tessera.toml", dir.display()), "type": 1}]}),
    );
    let d = s.wait_notification("textDocument/publishDiagnostics", |p| frontend_diagnostics(p) == json!([]));
    assert_eq!(d["uri"], uri.as_str());
    // Without the target lints only the frontend's checks are published.
    s.notify("workspace/didChangeConfiguration", json!({"settings": {"tessera": {"targetLints": false}}}));
    let d = s.wait_notification("textDocument/publishDiagnostics", |p| p["uri"] == uri.as_str());
    assert_eq!(frontend_diagnostics(&d), d["diagnostics"]);
    // A settings change is accepted in both shapes.
    s.notify("workspace/didChangeConfiguration", json!({"settings": {"tessera": {"target": "cpu"}}}));
    s.notify("workspace/didChangeConfiguration", json!({"settings": {"target": "sm_80"}}));
    assert!(s.is_alive());
    let _ = std::fs::remove_dir_all(&dir);
}
