//! The target lints on small programs: each fires where it should, says what it
//! should, and stays quiet on the clean variant.

use tessera_frontend::diagnostics::Diagnostic;
use tessera_frontend::text::LineIndex;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{file_diagnostics, Target};

/// `CODE@line: message` for every diagnostic, 1-based lines.
fn lint(text: &str, target: Target) -> Vec<String> {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.to_string(), None);
    let index = LineIndex::new(text);
    file_diagnostics(&db, file, target)
        .iter()
        .map(|d: &Diagnostic| format!("{:?}@{}: {}", d.code, index.line_col(text, d.range.start).line + 1, d.message))
        .collect()
}

/// The sm_90 diagnostics of `text` with `code`.
fn lint_code(text: &str, code: &str) -> Vec<String> {
    lint(text, Target::Sm90).into_iter().filter(|l| l.starts_with(code)).collect()
}

/// A file of the repository's test corpus (`tests/corpus`).
fn corpus(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Applies the fix of the first diagnostic with `code` and returns the new text.
fn apply_fix(text: &str, code: &str, target: Target) -> String {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.to_string(), None);
    let diags = file_diagnostics(&db, file, target);
    let d = diags.iter().find(|d| format!("{:?}", d.code) == code).unwrap_or_else(|| panic!("no {code}"));
    let fix = d.fix.as_ref().unwrap_or_else(|| panic!("{code} has no fix"));
    let mut out = text.to_string();
    let mut edits = fix.edits.clone();
    edits.sort_by_key(|e| std::cmp::Reverse(e.range.start));
    for e in edits {
        out.replace_range(e.range.start as usize..e.range.end as usize, &e.text);
    }
    out
}

fn codes(lints: &[String]) -> Vec<&str> {
    lints.iter().map(|l| l.split(':').next().unwrap()).collect()
}

const HEADER: &str = "from tessera import *\n\n";

#[test]
fn a_read_right_after_async_copies_is_one_race_and_the_fix_removes_it() {
    let text = corpus("invalid/e0501_race.tsr");
    let lints = lint(&text, Target::Sm90);
    assert_eq!(lints.iter().filter(|l| l.starts_with("E0501")).count(), 1, "{lints:#?}");
    assert!(lints.iter().any(|l| l.starts_with("E0501@14:") && l.contains("`a_s` and `b_s`")), "{lints:#?}");
    let fixed = apply_fix(&text, "E0501", Target::Sm90);
    assert!(fixed.contains("                tile.barrier()\n                acc = tile.mma(a_s, b_s"), "{fixed}");
    assert!(!codes(&lint(&fixed, Target::Sm90)).contains(&"E0501@14"), "{:#?}", lint(&fixed, Target::Sm90));
}

#[test]
fn overwriting_a_buffer_the_previous_iteration_still_reads_is_a_race() {
    let text = format!(
        "{HEADER}@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, stages=1))
def copy(A: Tensor[\"M\", \"K\", f32], C: Tensor[\"M\", \"K\", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        buf = tile.alloc_shared((ctx.BM, ctx.BK), f32)
        for k0 in tile.range(0, K, ctx.BK):
            tile.cp_async(buf, A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
            tile.barrier()
            C[m0:m0 + ctx.BM, k0:k0 + ctx.BK] = tile.load(buf)
"
    );
    let lints = lint(&text, Target::Sm90);
    let race: Vec<&String> = lints.iter().filter(|l| l.starts_with("E0501")).collect();
    assert_eq!(race.len(), 1, "{lints:#?}");
    assert!(race[0].starts_with("E0501@9:") && race[0].contains("previous iteration"), "{lints:#?}");
    // A barrier after the read closes the window.
    let fixed = text.replace("= tile.load(buf)\n", "= tile.load(buf)\n            tile.barrier()\n");
    assert!(!lint(&fixed, Target::Sm90).iter().any(|l| l.starts_with("E0501")), "{:#?}", lint(&fixed, Target::Sm90));
}

#[test]
fn programs_that_all_store_the_same_elements_race_unless_the_grid_axis_places_the_store() {
    let text = corpus("invalid/e0501_grid_store_race.tsr");
    let lints = lint(&text, Target::Sm90);
    let race: Vec<&String> = lints.iter().filter(|l| l.starts_with("E0501")).collect();
    assert_eq!(race.len(), 1, "{lints:#?}");
    assert!(race[0].starts_with("E0501@15:") && race[0].contains("along `n0`"), "{lints:#?}");
    // No error at all: a variant that stopped earlier would have no race lint either.
    let no_race = |text: &str| !lint(text, Target::Sm90).iter().any(|l| l.starts_with('E'));
    // Placed by `n0`, directly or through a local.
    assert!(no_race(&text.replace("0:ctx.BN] = acc", "n0:n0 + ctx.BN] = acc")));
    assert!(no_race(&text.replace(
        "            C[m0:m0 + ctx.BM, 0:ctx.BN] = acc",
        "            col = n0 * 1\n            C[m0:m0 + ctx.BM, col:col + ctx.BN] = acc"
    )));
    // Stored by one program of the axis only.
    assert!(no_race(&text.replace(
        "            C[m0:m0 + ctx.BM, 0:ctx.BN] = acc",
        "            if n0 == 0:\n                C[m0:m0 + ctx.BM, 0:ctx.BN] = acc"
    )));
    // A grid axis of one program (constant bounds) cannot race with itself.
    assert!(no_race(&text.replace("tile.parallel(0, N, ctx.BN)", "tile.parallel(0, 64, 64)")));
    // Ignoring `m0` instead is the same race, reported along `m0`.
    let rows = text.replace("C[m0:m0 + ctx.BM, 0:ctx.BN]", "C[0:ctx.BM, n0:n0 + ctx.BN]");
    assert!(lint(&rows, Target::Sm90).iter().any(|l| l.starts_with("E0501@15:") && l.contains("along `m0`")));
    // A store outside the `n0` loop is made by every program of `n0`, whatever its place.
    let outside = text.replace(
        "        for n0 in tile.parallel(0, N, ctx.BN):\n",
        "        C[m0:m0 + ctx.BM, 0:ctx.BN] = tile.zeros((ctx.BM, ctx.BN), f32)\n        for n0 in tile.parallel(0, N, ctx.BN):\n",
    );
    let lints = lint(&outside, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("E0501@9:") && l.contains("outside the `n0` loop")), "{lints:#?}");
}

/// A value assigned inside a `tile.parallel` loop is each program's own: a running sum
/// over the axis would sum one block. The fix iterates sequentially, which checks clean
/// and is the prefix sum the author meant; a fresh name inside the loop is fine.
#[test]
fn a_value_reassigned_in_a_grid_loop_is_not_carried_across_programs() {
    let text = corpus("invalid/e0503_carried_across_programs.tsr");
    let lints = lint(&text, Target::Sm90);
    assert_eq!(lints.len(), 1, "{lints:#?}");
    assert!(
        lints[0].starts_with("E0503@10:") && lints[0].contains("`acc` is carried from one iteration"),
        "{lints:#?}"
    );
    let fixed = apply_fix(&text, "E0503", Target::Sm90);
    assert!(fixed.contains("for k0 in tile.range(0, K, 16):"), "{fixed}");
    assert!(lint(&fixed, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{:#?}", lint(&fixed, Target::Sm90));
    let fresh =
        text.replace("            acc += tile.load", "            blk = acc + tile.load").replace("= acc\n", "= blk\n");
    assert!(
        lint(&fresh, Target::Sm90).iter().all(|l| !l.starts_with('E')),
        "{fresh}\n{:#?}",
        lint(&fresh, Target::Sm90)
    );
    // Assigned without reading the value from before: each program's own, fine inside
    // the loop; read after the loop, it is the value from before (E0503 at that read).
    let reinit = text.replace("            acc += tile.load", "            acc = tile.load");
    assert!(lint(&reinit, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{:#?}", lint(&reinit, Target::Sm90));
    let read_after = reinit.replace(
        "            P[k0:k0 + 16, n0:n0 + 32] = acc\n",
        "            P[k0:k0 + 16, n0:n0 + 32] = acc\n        P[0:16, n0:n0 + 32] = acc\n",
    );
    let lints = lint(&read_after, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("E0503@12:") && l.contains("value from before")), "{lints:#?}");
}

#[test]
fn a_program_id_is_read_inside_the_grid_loop_of_its_axis() {
    let text = corpus("invalid/e0503_program_id_outside_grid.tsr");
    let lints = lint(&text, Target::Sm90);
    assert_eq!(lints.len(), 1, "{lints:#?}");
    assert!(lints[0].starts_with("E0503@7:") && lints[0].contains("outside the `i0` loop"), "{lints:#?}");
    // Inside the loop it is the loop's trip; an axis no loop makes is 0 everywhere.
    let inside = text.replace(
        "    p = tile.program_id(0)  # <- E0503\n    for i0 in tile.parallel(0, N, 64):\n",
        "    for i0 in tile.parallel(0, N, 64):\n        p = tile.program_id(0)\n",
    );
    assert!(lint(&inside, Target::Sm90).is_empty(), "{inside}: {:#?}", lint(&inside, Target::Sm90));
    assert!(lint(&text.replace("program_id(0)", "program_id(1)"), Target::Sm90).is_empty());
}

#[test]
fn shared_memory_over_the_budget_points_at_the_largest_buffer() {
    let text = corpus("invalid/e0500_smem.tsr");
    let lints = lint(&text, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("E0500@7:") && l.contains("256 KiB") && l.contains("227 KiB")),
        "{lints:#?}"
    );
    let smaller = text.replace("k=256", "k=128");
    assert!(!lint(&smaller, Target::Sm90).iter().any(|l| l.starts_with("E0500")));
    // sm_80 allows 163 KiB per block: 128 KiB fits there too, 192 KiB does not.
    let mid = text.replace("k=256", "k=192");
    assert!(lint(&mid, Target::Sm80).iter().any(|l| l.starts_with("E0500@7:")), "{:#?}", lint(&mid, Target::Sm80));
    assert!(!lint(&mid, Target::Sm90).iter().any(|l| l.starts_with("E0500")));
    // The CPU has no shared-memory budget.
    assert!(!lint(&text, Target::Cpu).iter().any(|l| l.starts_with("E0500")));
}

#[test]
fn a_huge_accumulator_is_register_pressure_at_the_kernel_name() {
    let text = corpus("invalid/w0600_registers.tsr");
    let lints = lint(&text, Target::Sm90);
    let w: Vec<&String> = lints.iter().filter(|l| l.starts_with("W0600")).collect();
    assert_eq!(w.len(), 1, "{lints:#?}");
    assert!(w[0].starts_with("W0600@4:"), "{lints:#?}");
    let small = text.replace("block=(256, 256)", "block=(64, 64)");
    assert!(!lint(&small, Target::Sm90).iter().any(|l| l.starts_with("W0600")), "{:#?}", lint(&small, Target::Sm90));
}

/// W0602's note gives each resource's limit on resident blocks; one that allows more
/// blocks than an SM holds (no shared memory: 228 KiB / 1 KiB reserved = 228 on sm_90,
/// where an SM holds 32) is no limit, not a count.
#[test]
fn occupancy_names_a_resource_that_does_not_bind_as_no_limit() {
    let text = format!(
        "{HEADER}@kernel.schedule(Schedule(block=(128, 128), k=32, warps=4))\n\
         def fma_gemm(A: Tensor[\"M\", \"K\", f32], B: Tensor[\"K\", \"N\", f32], C: Tensor[\"M\", \"N\", f32]):\n    \
         ctx = tile.context()\n    \
         for m0 in tile.parallel(0, M, ctx.BM):\n        \
         for n0 in tile.parallel(0, N, ctx.BN):\n            \
         acc = tile.zeros((ctx.BM, ctx.BN), f32)\n            \
         for k0 in tile.range(0, K, ctx.BK):\n                \
         acc += tile.dot(tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]), tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]))\n            \
         C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc\n"
    );
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text, None);
    let diags = file_diagnostics(&db, file, Target::Sm90);
    let w = diags.iter().find(|d| d.code == tessera_frontend::diagnostics::Code::W0602).expect("W0602");
    let note = w.notes.join(" ");
    assert!(note.contains("shared memory: not a limit (0 B per block)"), "{note}");
    assert!(note.contains("registers: 2 blocks/SM"), "{note}");
    assert!(!note.contains("228"), "{note}");
}

#[test]
fn ldmatrix_on_unswizzled_half_rows_is_8_way_and_the_fix_swizzles() {
    let text = corpus("invalid/w0601_bank.tsr");
    let lints = lint(&text, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("W0601@9:") && l.contains("8-way") && l.contains("`a_s`")),
        "{lints:#?}"
    );
    let fixed = apply_fix(&text, "W0601", Target::Sm90);
    assert!(fixed.contains("tile.alloc_shared((ctx.BM, ctx.BK), f16, swizzle=\"xor\")"), "{fixed}");
    assert!(!lint(&fixed, Target::Sm90).iter().any(|l| l.starts_with("W0601")), "{:#?}", lint(&fixed, Target::Sm90));
    let padded =
        text.replace("tile.alloc_shared((ctx.BM, ctx.BK), f16)", "tile.alloc_shared((ctx.BM, ctx.BK), f16, pad=8)");
    assert!(!lint(&padded, Target::Sm90).iter().any(|l| l.starts_with("W0601")), "{:#?}", lint(&padded, Target::Sm90));
}

#[test]
fn an_autotune_space_with_no_fitting_configuration_is_e0703() {
    let text = corpus("invalid/e0703_space.tsr");
    let lints = lint(&text, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("E0703@3:") && l.contains("all 1")), "{lints:#?}");
    // Adding a small candidate: it survives and the big one is pruned with a note.
    let partial = text.replace("BM=[512]", "BM=[512, 32]").replace("BK=[256]", "BK=[256, 32]");
    let lints = lint(&partial, Target::Sm90);
    assert!(!lints.iter().any(|l| l.starts_with("E0703")), "{lints:#?}");
    assert!(lints.iter().any(|l| l.starts_with("W0702@3:") && l.contains("2 of 4")), "{lints:#?}");
}

#[test]
fn a_column_walk_of_a_row_major_tensor_is_uncoalesced() {
    let text = format!(
        "{HEADER}@kernel
def first_column(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", f32]):
    for m0 in tile.parallel(0, M, 128):
        Y[m0:m0 + 128] = tile.load(X[m0:m0 + 128, 0])
"
    );
    let lints = lint(&text, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("W0603@6:") && l.contains("dim 0 of `X`")), "{lints:#?}");
    let rows = text
        .replace("X[m0:m0 + 128, 0]", "X[0, m0:m0 + 128]")
        .replace("\"M\", \"N\", f32], Y", "\"N\", \"M\", f32], Y");
    assert!(!lint(&rows, Target::Sm90).iter().any(|l| l.starts_with("W0603")), "{:#?}", lint(&rows, Target::Sm90));
}

#[test]
fn independent_sequential_iterations_could_be_tile_programs() {
    let text = format!(
        "{HEADER}@kernel
def scale_rows(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", \"N\", f32]):
    for m0 in tile.parallel(0, M, 64):
        for n0 in tile.range(0, N, 64):
            Y[m0:m0 + 64, n0:n0 + 64] = tile.load(X[m0:m0 + 64, n0:n0 + 64]) * 2.0
"
    );
    let lints = lint(&text, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("W0604@6:")), "{lints:#?}");
    let fixed = apply_fix(&text, "W0604", Target::Sm90);
    assert!(fixed.contains("for n0 in tile.parallel(0, N, 64):"), "{fixed}");
    assert!(!lint(&fixed, Target::Sm90).iter().any(|l| l.starts_with("W0604")));
    // Carrying a value across iterations (a running sum) makes them dependent.
    let carried = format!(
        "{HEADER}@kernel
def row_sums(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", f32]):
    for m0 in tile.parallel(0, M, 64):
        acc = tile.zeros((64,), f32)
        for n0 in tile.range(0, N, 64):
            acc = acc + tile.sum(tile.load(X[m0:m0 + 64, n0:n0 + 64]), axis=1)
        Y[m0:m0 + 64] = acc
"
    );
    assert!(
        !lint(&carried, Target::Sm90).iter().any(|l| l.starts_with("W0604")),
        "{:#?}",
        lint(&carried, Target::Sm90)
    );
}

/// A flash-attention body with the softmax step `STEP` and the key loop from `START`.
fn attention(start: &str, step: &str) -> String {
    format!(
        "{HEADER}@kernel.schedule(block(64, 64))\ndef attn(Q: Tensor[\"S\", \"D\", bf16], K: Tensor[\"S\", \"D\", bf16], V: Tensor[\"S\", \"D\", bf16], O: Tensor[\"S\", \"D\", bf16]):\n    ctx = tile.context()\n    for q0 in tile.parallel(0, S, ctx.BM):\n        q = tile.load(Q[q0:q0 + ctx.BM, :])\n        acc = tile.zeros((ctx.BM, D), f32)\n        m = tile.full((ctx.BM,), -INF, f32)\n        l = tile.zeros((ctx.BM,), f32)\n        for k0 in tile.range({start}, S, ctx.BN):\n            k = tile.load(K[k0:k0 + ctx.BN, :])\n            v = tile.load(V[k0:k0 + ctx.BN, :])\n            s = tile.causal_mask(tile.dot(q, k.T), q0, k0)\n{step}\n        O[q0:q0 + ctx.BM, :] = tile.cast(acc / l[:, None], bf16)\n"
    )
}

const BLOCK_MAX: &str = "            p, m_c, l_c = tile.softmax_online(s)\n            acc, m, l = tile.softmax_accumulate(acc, m, l, tile.cast(p, bf16), v, m_c, l_c)";
const RUNNING_MAX: &str = "            m_new = tile.maximum(m, tile.row_max(s))\n            p = tile.exp(s - m_new[:, None])\n            alpha = tile.exp(m - m_new)\n            l = alpha * l + tile.row_sum(p)\n            acc = alpha[:, None] * acc + tile.dot(tile.cast(p, bf16), v)\n            m = m_new";

#[test]
fn a_softmax_that_can_see_a_fully_masked_row_is_w0605() {
    // The seeds' online softmax takes each block's own maximum: a block above the
    // diagonal gives exp(-inf - -inf).
    let lints = lint(&attention("0", BLOCK_MAX), Target::Sm90);
    let w: Vec<&String> = lints.iter().filter(|l| l.starts_with("W0605")).collect();
    assert_eq!(w.len(), 1, "{lints:#?}");
    assert!(w[0].starts_with("W0605@15:") && w[0].contains("exp(-inf - -inf) is NaN"), "{lints:#?}");
    // A running maximum from key 0 has seen key 0 in every row: no warning.
    let lints = lint(&attention("0", RUNNING_MAX), Target::Sm90);
    assert!(lints.iter().all(|l| !l.starts_with("W0605")), "{lints:#?}");
    // A running maximum whose key loop starts past key 0 can start on a masked block.
    let lints = lint(&attention("q0 + ctx.BM", RUNNING_MAX), Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("W0605@16:") && l.contains("does not start at key 0")), "{lints:#?}");
    // Every target: the rule reads Graph IR, before any schedule.
    assert!(lint(&attention("0", BLOCK_MAX), Target::Cpu).iter().any(|l| l.starts_with("W0605@15:")));
    // A block's own maximum is safe where no row can be masked whole: the diagonal
    // block (keys at the queries' offset), or keys from 0 for queries from 0.
    let no_w0605 = |text: &str| {
        let lints = lint(text, Target::Sm90);
        assert!(lints.iter().all(|l| !l.starts_with('E') && !l.starts_with("W0605")), "{text}\n{lints:#?}");
    };
    no_w0605(&attention("0", BLOCK_MAX).replace("q0, k0)", "q0, q0)"));
    let row_softmax = format!(
        "{HEADER}@kernel\ndef causal_rows(S: Tensor[\"R\", \"C\", f32], P: Tensor[\"R\", \"C\", f32]):\n    for r0 in tile.parallel(0, R, 16):\n        s = tile.causal_mask(tile.load(S[r0:r0 + 16, 0:64]), r0, 0)\n        e = tile.exp(s - tile.row_max(s)[:, None])\n        P[r0:r0 + 16, 0:64] = e / tile.row_sum(e)[:, None]\n"
    );
    no_w0605(&row_softmax);
    // Keys from 16 for queries from 0: row 0 of the first block sees only masked keys.
    let shifted = row_softmax.replace("r0, 0)", "r0, 16)");
    assert!(
        lint(&shifted, Target::Sm90).iter().any(|l| l.starts_with("W0605@")),
        "{:#?}",
        lint(&shifted, Target::Sm90)
    );
}

/// A reduction over a tile whose last block may run past the tensor's edge takes in the
/// load's padding: right for a sum of a zero-padded value (or of its square), wrong for
/// a max, or for a softmax's `sum(exp(x - m))`. `other=-INF` (the fix) or a mask of the
/// positions past the edge makes them right.
#[test]
fn a_reduction_that_takes_in_a_partial_tiles_padding_is_w0606() {
    let text = corpus("invalid/w0606_padded_reduction.tsr");
    let w = |text: &str| lint_code(text, "W0606");
    let found = w(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("W0606@12:") && found[0].contains("hold 0.0 there, not -inf"), "{found:#?}");
    let fixed = apply_fix(&text, "W0606", Target::Sm90);
    assert!(fixed.contains("c0:c0 + ctx.BN], other=-INF)"), "{fixed}");
    assert!(w(&fixed).is_empty(), "{:#?}", w(&fixed));
    // Masked past the edge: right.
    let masked = text.replace(
        "            m = tile.maximum(",
        "            x = tile.where((c0 + tile.arange(ctx.BN))[None, :] < C, x, -INF)\n            m = tile.maximum(",
    );
    assert!(w(&masked).is_empty() && lint(&masked, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{masked}");
    // A sum of squares of zero padding is right; a sum of exponentials is not.
    let squares = text.replace("tile.maximum(m, tile.row_max(x))", "m + tile.row_sum(x * x)");
    assert!(w(&squares).is_empty(), "{:#?}", w(&squares));
    // A max of values that are never negative ignores zero padding (a quantizer's
    // `row_max(abs(x))`); shifted below zero, it does not.
    let magnitudes = text.replace("tile.row_max(x)", "tile.row_max(tile.abs(x) * 2.0 + x * x)");
    assert!(w(&magnitudes).is_empty(), "{:#?}", w(&magnitudes));
    let shifted = text.replace("tile.row_max(x)", "tile.row_max(tile.abs(x) - 1.0)");
    assert!(w(&shifted).iter().any(|l| l.contains("hold -1.0 there")), "{:#?}", w(&shifted));
    let exps = text.replace("tile.maximum(m, tile.row_max(x))", "m + tile.row_sum(tile.exp(x))");
    assert!(w(&exps).iter().any(|l| l.contains("this sum") && l.contains("hold 1.0 there")), "{:#?}", w(&exps));
    // The corpus's softmax pads with -INF: its max and its sum of exponentials are right.
    assert!(w(&corpus("valid/softmax.tsr")).is_empty());
    // Its flash attention masks keys past the end only when causal: the max and the sum
    // of the non-causal path take in the zero-padded keys' scores.
    let attention = w(&corpus("valid/flash_attention.tsr"));
    assert!(attention.iter().any(|l| l.starts_with("W0606@27:") && l.contains("`K`")), "{attention:#?}");
}

/// A store whose last tile runs past its loop's bound inside its tensor (RoPE's first
/// half into its second): W0607 where the axis provably goes on past the bound (another
/// window of the tensor starts there, or the dim is longer by a positive polynomial);
/// not for a masked store, nor where nothing says the axis is longer.
#[test]
fn a_store_past_its_loops_bound_inside_the_tensor_is_w0607() {
    let text = corpus("invalid/w0607_store_past_loop_bound.tsr");
    let w = |text: &str| lint_code(text, "W0607");
    let found = w(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("W0607@18: where `BN` does not divide `H`, the last `h0` tile of this store writes `Y`'s dim 1 past the loop's bound, from `H` up to `BN + H - 1`"),
        "{found:#?}"
    );
    // Masked at the bound, by the store's `mask=` or a masked region: right.
    let store = "Y[t0:t0 + ctx.BM, h0:h0 + ctx.BN] = tile.cast(x1 * c - x2 * s, f16)";
    let masked = text.replace(
        store,
        "tile.store(Y[t0:t0 + ctx.BM, h0:h0 + ctx.BN], tile.cast(x1 * c - x2 * s, f16), mask=(h0 + tile.arange(ctx.BN))[None, :] < H)",
    );
    let region = text.replace(
        &format!("            {store}"),
        &format!("            if (h0 + tile.arange(ctx.BN))[None, :] < H:\n                {store}"),
    );
    for fixed in [&masked, &region] {
        assert_ne!(fixed, &text);
        assert!(w(fixed).is_empty() && lint(fixed, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{fixed}");
    }
    // Without the second half's window nothing says `D` goes on past `H`: not reported.
    let first_half_only: String = text.lines().filter(|l| !l.contains("H + h0:H + h0")).collect::<Vec<_>>().join("\n");
    assert!(w(&first_half_only).is_empty(), "{:#?}", w(&first_half_only));
    // A dim written `2*H` does: reported without it.
    let declared = first_half_only.replace("\"D\"", "\"2*H\"").replace("x2 = ", "x2 = x1 # ").replace(" - x2 * s", "");
    assert_eq!(w(&declared).len(), 1, "{declared}\n{:#?}", lint(&declared, Target::Sm90));
    // A loop that the tile divides (a constant trip) never leaves it.
    let constant = declared.replace("tile.parallel(0, H, ctx.BN)", "tile.parallel(0, 128, ctx.BN)");
    assert!(w(&constant).is_empty(), "{:#?}", w(&constant));
    // As a sequential loop, its stores overlap across iterations: not W0604's "disjoint".
    let sequential = text.replace("for h0 in tile.parallel", "for h0 in tile.range");
    let all = lint(&sequential, Target::Sm90);
    assert!(all.iter().any(|l| l.starts_with("W0607")) && !all.iter().any(|l| l.starts_with("W0604")), "{all:#?}");
}

/// A cross-entropy kernel picks the target's logit with `cols == target`: past the
/// vocabulary's edge that is false for any target inside it (loaded indices are taken to
/// lie in the dims they index), so its sum takes 0 there, not the -INF padding. With `!=`
/// the padding enters the sum.
#[test]
fn selecting_by_a_loaded_index_keeps_the_padding_out() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(1, 256), warps=4))
def cross_entropy(logits: Tensor["N", "V", f32], target: Tensor["N", i32], loss: Tensor["N", f32]):
    ctx = tile.context()
    for r in tile.parallel(0, N, 1):
        m = tile.full((1,), -INF, f32)
        l = tile.zeros((1,), f32)
        t = tile.load(target[r:r + 1])
        picked = tile.zeros((1,), f32)
        for v0 in tile.range(0, V, ctx.BN):
            x = tile.load(logits[r:r + 1, v0:v0 + ctx.BN], other=-INF)
            m_new = tile.maximum(m, tile.row_max(x))
            l = l * tile.exp(m - m_new) + tile.row_sum(tile.exp(x - m_new[:, None]))
            m = m_new
            cols = v0 + tile.arange(ctx.BN)
            picked = picked + tile.row_sum(tile.where(cols[None, :] == t[:, None], x, 0.0))
        loss[r:r + 1] = m + tile.log(l) - picked
"#;
    let w = |text: &str| lint_code(text, "W0606");
    assert!(w(text).is_empty(), "{:#?}", w(text));
    let others = w(&text.replace("cols[None, :] == t[:, None]", "cols[None, :] != t[:, None]"));
    assert!(others.len() == 1 && others[0].starts_with("W0606@17:"), "{others:#?}");
}

/// Decode attention over a KV cache of `S` rows of which the first `L` (an int parameter)
/// are valid: `idx < L` masks the scores past the valid length, and so past the cache's
/// edge, as `idx < S` would. Without the mask the padded keys' scores (0) enter the max.
#[test]
fn a_mask_by_a_valid_length_parameter_keeps_the_padding_out() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(16, 64), warps=4))
def decode(Q: Tensor["BH", "D", f32], K: Tensor["BH", "S", "D", f32], O: Tensor["BH", f32], L: int = 50):
    ctx = tile.context()
    for bh in tile.parallel(0, BH, 1):
        q = tile.load(Q[bh:bh + 1, 0:ctx.BN])
        m = tile.full((1,), -INF, f32)
        for s0 in tile.range(0, L, ctx.BM):
            k = tile.load(K[bh, s0:s0 + ctx.BM, 0:ctx.BN])
            scores = tile.sum(k * q, 1)
            idx = s0 + tile.arange(ctx.BM)
            scores = tile.where(idx < L, scores, -INF)
            m = tile.maximum(m, tile.max(scores, 0))
        O[bh:bh + 1] = m
"#;
    let w = |text: &str| lint_code(text, "W0606");
    assert!(w(text).is_empty(), "{:#?}", w(text));
    let unmasked = w(&text.replace("            scores = tile.where(idx < L, scores, -INF)\n", ""));
    assert!(unmasked.len() == 1 && unmasked[0].starts_with("W0606@13:"), "{unmasked:#?}");
}

/// An integer division whose divisor is a partial tile's zero padding divides by zero
/// past the edge (the interpreter stops there): W0608 at the division, with `other=1` as
/// the fix. A nonzero `other`, a divisor masked past the edge, a constant divisor, a
/// float division (inf, no fault) and a tile that always divides the dim are not reported.
#[test]
fn an_integer_divisor_that_holds_a_partial_tiles_padding_is_w0608() {
    let text = corpus("invalid/w0608_padded_divisor.tsr");
    let w = |text: &str| lint_code(text, "W0608");
    let found = w(&text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("W0608@13: the last tile of `W` may run past"), "{found:#?}");
    let fixed = apply_fix(&text, "W0608", Target::Sm90);
    assert!(fixed.contains("tile.load(W[i0:i0 + BLOCK], other=1)"), "{fixed}");
    assert!(w(&fixed).is_empty(), "{:#?}", w(&fixed));
    // `%` and a cast of the padding divide by zero too; the dividend's padding does not.
    assert_eq!(w(&text.replace("x // w", "x % tile.cast(tile.cast(w, f32), i32)")).len(), 1);
    assert!(w(&text.replace("x // w", "w // 3")).is_empty());
    assert!(w(&text.replace("x // w", "x // 7")).is_empty());
    // Masked past the edge.
    let masked = text.replace("x // w  #", "x // tile.where(i0 + tile.arange(BLOCK) < N, w, 1)  #");
    assert!(w(&masked).is_empty() && lint(&masked, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{masked}");
    // A float division by zero is inf (no fault).
    let floats = text.replace("i32]", "f32]").replace("x // w", "x / w");
    assert!(w(&floats).is_empty() && lint(&floats, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{floats}");
    // A block that divides a constant length never pads.
    let whole = text.replace("Tensor[\"N\"", "Tensor[1024").replace("(0, N,", "(0, 1024,");
    assert!(w(&whole).is_empty() && lint(&whole, Target::Sm90).iter().all(|l| !l.starts_with('E')), "{whole}");
}

/// A max over booleans is an "any": False is its neutral value, so padding that compares
/// False (`0.0 > 0.0`, or `other=-1.0` then `> 0`) is right, and padding that compares
/// True (`0.0 >= 0.0`) is not. (A min over booleans, an "all", is the converse.)
#[test]
fn padding_that_compares_false_is_neutral_in_a_boolean_max() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(16, 64), warps=4))
def any_positive(X: Tensor["R", "C", f32], Y: Tensor["R", i32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:ctx.BN])
        Y[r0:r0 + ctx.BM] = tile.cast(tile.max(x > 0.0, 1), i32)
"#;
    let w = |text: &str| lint_code(text, "W0606");
    assert!(w(text).is_empty(), "{:#?}", w(text));
    let other = text.replace("0:ctx.BN])", "0:ctx.BN], other=-1.0)");
    assert!(w(&other).is_empty(), "{:#?}", w(&other));
    let true_padding = w(&text.replace("x > 0.0", "x >= 0.0"));
    assert!(true_padding.len() == 1 && true_padding[0].starts_with("W0606@8:"), "{true_padding:#?}");
    let all = w(&text.replace("x > 0.0", "x >= 0.0").replace("tile.max(", "tile.min("));
    assert!(all.is_empty(), "{all:#?}");
    let all_false = w(&text.replace("tile.max(", "tile.min("));
    assert!(all_false.len() == 1, "{all_false:#?}");
}

/// The argmax idiom: `x == row_max(x)[:, None]` is never true past the edge, where
/// `other=-INF` pads (finite data's max is above -inf), so those lanes hold the sentinel,
/// which a min of indices (a max, for the last index) takes no harm from while the
/// sentinel lies above (below) every index. It was reported as a padded min.
#[test]
fn the_argmax_idiom_keeps_the_padding_out_of_its_index_reduction() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(16, 64), warps=4))
def row_argmax(X: Tensor["R", "C", f32], Out: Tensor["R", i32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        best = tile.full((ctx.BM,), -INF, f32)
        arg = tile.zeros((ctx.BM,), i32)
        for c0 in tile.range(0, C, ctx.BN):
            cols = c0 + tile.arange(ctx.BN)
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN], other=-INF)
            m = tile.row_max(x)
            first = tile.min(tile.where(x == m[:, None], cols[None, :], C), 1)
            arg = tile.where(m > best, first, arg)
            best = tile.maximum(best, m)
        Out[r0:r0 + ctx.BM] = arg
"#;
    let w = |text: &str| lint_code(text, "W0606");
    assert!(w(text).is_empty(), "{:#?}", w(text));
    // The index inside the tile, with the tile's width as the sentinel.
    let local = text.replace("cols[None, :], C)", "tile.arange(ctx.BN)[None, :], ctx.BN)");
    assert!(w(&local).is_empty(), "{:#?}", w(&local));
    // The last index: a max, with -1 below every index.
    let last =
        text.replace("tile.min(tile.where(", "tile.max(tile.where(").replace("cols[None, :], C)", "cols[None, :], -1)");
    assert!(w(&last).is_empty(), "{:#?}", w(&last));
    // A sentinel of 0 is below the indices a min competes with: the padding's 0 wins.
    let low = w(&text.replace("cols[None, :], C)", "cols[None, :], 0)"));
    assert!(low.len() == 1 && low[0].starts_with("W0606@13:"), "{low:#?}");
    // A sum of the picked indices adds one sentinel per padded lane.
    let summed = w(&text.replace("tile.min(tile.where(", "tile.sum(tile.where("));
    assert!(summed.len() == 1 && summed[0].starts_with("W0606@13:"), "{summed:#?}");
    // Zero padding: the max takes it in, and then the padded lanes may equal it.
    let zero = w(&text.replace(", other=-INF)", ")"));
    assert!(zero.len() == 2 && zero[0].starts_with("W0606@12:") && zero[1].starts_with("W0606@13:"), "{zero:#?}");
    // A row's max compared with another tile says nothing about where it is attained.
    let other = w(&text.replace("x == m[:, None]", "x + 1.0 == m[:, None]"));
    assert!(other.len() == 1 && other[0].starts_with("W0606@13:"), "{other:#?}");
}

/// Past the edge `-inf > 0.0` is False (finite data is assumed, as everywhere here), so
/// `where(x > 0, x, 0)` of an `other=-INF` load holds 0 there: its sum is right.
#[test]
fn an_infinite_pad_compared_with_finite_data_is_a_known_bool() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(16, 64), warps=4))
def positive_sum(X: Tensor["R", "C", f32], Y: Tensor["R", f32]):
    ctx = tile.context()
    for r0 in tile.parallel(0, R, ctx.BM):
        x = tile.load(X[r0:r0 + ctx.BM, 0:ctx.BN], other=-INF)
        m = tile.row_max(x)
        Y[r0:r0 + ctx.BM] = tile.row_sum(tile.where(x > m[:, None] - 1.0, x, 0.0))
"#;
    let w = |text: &str| lint_code(text, "W0606");
    assert!(w(text).is_empty(), "{:#?}", w(text));
    // `>=` a finite value, and `!=`, are False and True past the edge: True takes `x` (-inf).
    let taken = w(&text.replace("x > m[:, None] - 1.0", "x != m[:, None]"));
    assert!(taken.len() == 1 && taken[0].starts_with("W0606@9:"), "{taken:#?}");
}

/// Split-K: the `s` programs of an output tile write the same elements of C. A store
/// races (E0501); `tile.atomic_add` is what the axis is for, and is not reported.
#[test]
fn atomic_adds_from_every_program_of_an_axis_are_not_a_race() {
    let text = r#"from tessera import *

SPLIT = 3

@kernel.schedule(Schedule(block=(32, 32), k=32, warps=4))
def split_k(A: Tensor["M", "K", f16], B: Tensor["K", "N", f16], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            for s in tile.parallel(0, SPLIT, 1):
                acc = tile.zeros((ctx.BM, ctx.BN), f32)
                for k0 in tile.range(s * ctx.BK, K, SPLIT * ctx.BK):
                    acc += tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]) @ tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                tile.atomic_add(C[m0:m0 + ctx.BM, n0:n0 + ctx.BN], acc)
"#;
    assert!(lint_code(text, "E0501").is_empty(), "{:#?}", lint(text, Target::Sm90));
    let stored = text
        .replace("tile.atomic_add(C[m0:m0 + ctx.BM, n0:n0 + ctx.BN], acc)", "C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc");
    let races = lint_code(&stored, "E0501");
    assert!(races.len() == 1 && races[0].starts_with("E0501@14:"), "{races:#?}");
}

/// A count of positive values in a row block masks the rows past the edge with `False`:
/// a bool constant is 0 there, so the sum takes no padding.
#[test]
fn a_bool_constant_in_a_mask_is_zero_past_the_edge() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(32, 64), warps=4))
def positives(X: Tensor["R", "C", f32], Count: Tensor["C", i32]):
    ctx = tile.context()
    for c0 in tile.parallel(0, C, ctx.BN):
        acc = tile.zeros((ctx.BN,), i32)
        for r0 in tile.range(0, R, ctx.BM):
            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])
            rows = r0 + tile.arange(ctx.BM)
            acc += tile.sum(tile.cast(tile.where(rows[:, None] < R, x > 0.0, False), i32), 0)
        Count[c0:c0 + ctx.BN] = acc
"#;
    assert!(lint_code(text, "W0606").is_empty(), "{:#?}", lint_code(text, "W0606"));
    // Past the edge `x` is 0, and `0.0 > 0.0` is False: even unmasked, that count is right.
    let unmasked = text.replace("rows[:, None] < R", "rows[:, None] < R + 1");
    assert!(lint_code(&unmasked, "W0606").is_empty(), "{:#?}", lint_code(&unmasked, "W0606"));
    // A count of the values that are not negative counts the padding's zeros.
    let unmasked = lint_code(&unmasked.replace("x > 0.0", "x >= 0.0"), "W0606");
    assert!(unmasked.len() == 1 && unmasked[0].starts_with("W0606@11:"), "{unmasked:#?}");
}

/// A packed `[T, 2F]` gate/up row summed over its first half: the gate's last tile reads
/// the up half's first columns (the up window at `F + f0` says the axis goes on) into the
/// sum. The same load feeding an elementwise store (clipped at `F` by the output) is not
/// reported, nor a load the sum takes in through a `tile.where`.
#[test]
fn a_load_past_its_loops_bound_is_w0607_where_a_reduction_takes_it_in() {
    let text = r#"from tessera import *

@kernel.schedule(Schedule(block=(16, 64), warps=4))
def gate_dot_up(X: Tensor["T", "F2", f32], S: Tensor["T", f32], Y: Tensor["T", "F", f32]):
    ctx = tile.context()
    for t0 in tile.parallel(0, T, ctx.BM):
        ss = tile.zeros((ctx.BM,), f32)
        for f0 in tile.range(0, F, ctx.BN):
            g = tile.load(X[t0:t0 + ctx.BM, f0:f0 + ctx.BN])
            u = tile.load(X[t0:t0 + ctx.BM, F + f0:F + f0 + ctx.BN])
            Y[t0:t0 + ctx.BM, f0:f0 + ctx.BN] = g * u
            ss += tile.row_sum(g * u)
        S[t0:t0 + ctx.BM] = ss
"#;
    let found = lint_code(text, "W0607");
    assert!(found.len() == 1 && found[0].starts_with("W0607@9:") && found[0].contains("this sum takes"), "{found:#?}");
    let no_sum = text.replace("            ss += tile.row_sum(g * u)\n", "");
    assert!(lint_code(&no_sum, "W0607").is_empty(), "{:#?}", lint_code(&no_sum, "W0607"));
    let masked = text.replace(
        "ss += tile.row_sum(g * u)",
        "ss += tile.row_sum(tile.where((f0 + tile.arange(ctx.BN))[None, :] < F, g * u, 0.0))",
    );
    assert!(lint_code(&masked, "W0607").is_empty(), "{:#?}", lint_code(&masked, "W0607"));
}

#[test]
fn valid_examples_have_no_target_errors() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in [root.join("examples"), root.join("tests/corpus/valid")] {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for f in entries.map(|e| e.unwrap().path()) {
            let text = std::fs::read_to_string(&f).unwrap();
            for t in [Target::Sm90, Target::Sm80, Target::Cpu] {
                let errors: Vec<String> = lint(&text, t).into_iter().filter(|l| l.starts_with('E')).collect();
                assert!(errors.is_empty(), "{} {t}: {errors:#?}", f.display());
            }
        }
    }
}

#[test]
#[ignore = "a debugging aid: prints the Tile IR and resources of LINT_FILE"]
fn print_resources() {
    use std::collections::BTreeMap;
    use tessera_frontend::db::item_index;
    let Ok(path) = std::env::var("LINT_FILE") else { return };
    let text = std::fs::read_to_string(path).unwrap();
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.to_string(), None);
    for e in item_index(&db, file).functions.iter() {
        let Ok((config, _)) = tessera_passes::default_config(&db, e.key, &BTreeMap::new()) else { continue };
        let r = tessera_passes::analysis::kernel_resources(&db, e.key, config.clone(), Target::Sm90).clone();
        let tile = tessera_passes::tile_ir(&db, e.key, config, Target::Sm90).clone();
        if let Ok(tile) = tile {
            eprintln!("{}", tessera_passes::print_ir(&db, file, &tile).text);
        }
        eprintln!("{r:#?}");
    }
}

/// Pruning reads `kernel_budget`, the lints and editors read `kernel_resources`: for every
/// autotune candidate of every example and valid corpus kernel, on both GPU targets, the
/// budget's two figures are the resources' own (so a pruned candidate and a reported
/// figure can never disagree).
#[test]
fn the_pruning_budget_is_the_resources_figures() {
    use std::collections::BTreeMap;
    use tessera_frontend::check::{fn_decorators, fn_signature, FunctionKind};
    use tessera_frontend::db::item_index;
    use tessera_passes::analysis::{kernel_budget, kernel_resources};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["examples", "tests/corpus/valid"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "tsr") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut compared = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let db = Database::default();
        let file = SourceFile::new(&db, path.clone(), text, None);
        for e in item_index(&db, file).functions.iter() {
            if fn_signature(&db, e.key).kind != FunctionKind::Kernel {
                continue;
            }
            let Ok(graph) = tessera_passes::graph_ir(&db, e.key).clone() else { continue };
            let schedule = fn_decorators(&db, e.key).schedule.clone().unwrap_or_default();
            for candidate in schedule.configurations() {
                let (config, _) = tessera_passes::config::config_for(&graph, candidate, &BTreeMap::new());
                for target in [Target::Sm90, Target::Sm80] {
                    let budget = kernel_budget(&db, e.key, config.clone(), target).clone();
                    let resources = kernel_resources(&db, e.key, config.clone(), target).clone();
                    match (budget, resources) {
                        (Ok(b), Ok(r)) => {
                            let at = format!("{} {} {config} on {target}", path.display(), e.key.name(&db));
                            assert_eq!(b.smem_bytes, r.smem_bytes, "{at}");
                            assert_eq!(b.register_peak, r.registers.peak, "{at}");
                            compared += 1;
                        }
                        (Err(a), Err(b)) => assert_eq!(a, b),
                        (b, r) => panic!("{}: budget {b:?} but resources {r:?}", path.display()),
                    }
                }
            }
        }
    }
    assert!(compared > 100, "only {compared} candidates compared");
}

// ----- mma = "wgmma" -------------------------------------------------------------------------

/// A bf16 GEMM whose schedule asks for `wgmma` (its pieces replaced by each case).
const WGMMA_GEMM: &str = r#"@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, mma="wgmma"))
def g(A: Tensor["M", "K", bf16], B: Tensor["K", "N", bf16], C: Tensor["M", "N", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            acc = tile.zeros((ctx.BM, ctx.BN), f32)
            for k0 in tile.range(0, K, ctx.BK):
                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])
                b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])
                acc += tile.dot(a, b)
            C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = acc
"#;

/// Each reason E0704 gives, at the dot (line 12), and nothing on the clean kernel.
#[test]
fn wgmma_where_it_cannot_run_is_e0704_with_the_reason_at_the_dot() {
    let clean = format!("{HEADER}{WGMMA_GEMM}");
    assert!(!lint(&clean, Target::Sm90).iter().any(|l| l.starts_with('E')), "{:#?}", lint(&clean, Target::Sm90));
    let cases: &[(&str, &str, Target, &str)] = &[
        ("", "", Target::Sm80, "the target is sm_80"),
        ("bf16", "f16", Target::Sm90, ""),
        ("warps=4", "warps=2", Target::Sm90, "warps = 2 is not a multiple of 4"),
        // M = 64 over two warpgroups: they split N (32 columns each) instead.
        ("warps=4", "warps=8", Target::Sm90, ""),
        ("block=(64, 64)", "block=(32, 64)", Target::Sm90, "M = 32 is not a multiple of 64"),
        ("block=(64, 64)", "block=(64, 48)", Target::Sm90, ""),
        ("block=(64, 64)", "block=(64, 320)", Target::Sm90, "N = 320"),
        ("block=(64, 64)", "block=(64, 8)", Target::Sm90, "a row of the [K, N] B operand is 16 bytes"),
        // A computed in registers and a K-major B (attention's operands) are taken.
        (
            "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])",
            "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]) * 2.0",
            Target::Sm90,
            "",
        ),
        (
            "b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])",
            "b = tile.load(B[n0:n0 + ctx.BN, k0:k0 + ctx.BK]).T",
            Target::Sm90,
            "",
        ),
        (
            "b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])",
            "b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN]) * 2.0",
            Target::Sm90,
            "B is computed in registers",
        ),
        // A read transposed (M-major, `imm-trans-a`) is taken for 16-bit operands.
        (
            "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])",
            "a = tile.load(A[k0:k0 + ctx.BK, m0:m0 + ctx.BM]).T",
            Target::Sm90,
            "",
        ),
    ];
    for (from, to, target, reason) in cases {
        let mut text = clean.replace(from, to);
        if to.starts_with("b = ") && to.ends_with(".T") {
            text = text.replace("B: Tensor[\"K\", \"N\", bf16]", "B: Tensor[\"N\", \"K\", bf16]");
        }
        if to.starts_with("a = ") && to.ends_with(".T") {
            text = text.replace("A: Tensor[\"M\", \"K\", bf16]", "A: Tensor[\"K\", \"M\", bf16]");
        }
        let lints = lint(&text, *target);
        let e0704: Vec<&String> = lints.iter().filter(|l| l.starts_with("E0704")).collect();
        if reason.is_empty() {
            assert!(e0704.is_empty(), "{from} -> {to}: {lints:#?}");
            continue;
        }
        assert_eq!(e0704.len(), 1, "{from} -> {to} on {target}: {lints:#?}");
        assert!(e0704[0].starts_with("E0704@12:") && e0704[0].contains(reason), "{from} -> {to}: {lints:#?}");
    }
    // Warpgroups across N need A from shared memory (each would hold a slice of A's rows'
    // columns otherwise).
    let split_computed_a = clean.replace("warps=4", "warps=8").replace(
        "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])",
        "a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK]) * 2.0",
    );
    let lints = lint(&split_computed_a, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("E0704@12:") && l.contains("split N across 2 warpgroups")),
        "{lints:#?}"
    );
    // fp8 with B loaded as [K, N] goes through the transposing stage (k a multiple of 32);
    // a [K, N] fp8 buffer the kernel fills itself is its own layout: E0704 with advice.
    let fp8 = clean.replace("bf16", "fp8_e4m3");
    let lints = lint(&fp8, Target::Sm90);
    assert!(!lints.iter().any(|l| l.starts_with('E')), "{lints:#?}");
    // Its transposed shared reads conflict, and the warning says whose they are.
    assert!(
        lints.iter().any(|l| l.starts_with("W0601@") && l.contains("8-bit `wgmma`'s transposing stage")),
        "{lints:#?}"
    );
    let fp8_buffer = fp8
        .replace(
            "acc = tile.zeros((ctx.BM, ctx.BN), f32)",
            "acc = tile.zeros((ctx.BM, ctx.BN), f32)\n            b_s = tile.alloc_shared((ctx.BK, ctx.BN), fp8_e4m3)",
        )
        .replace(
            "b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])",
            "tile.cp_async(b_s, B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])\n                tile.barrier()",
        )
        .replace("acc += tile.dot(a, b)", "acc = tile.mma(a, b_s, accumulator=acc)");
    let lints = lint(&fp8_buffer, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("E0704@") && l.contains("fill the buffer as [N, K]")), "{lints:#?}");
    // f32 operands: the dtype is the reason (no tensor cores for f32 under mma.sync either).
    let f32 = clean.replace("bf16", "f32");
    let lints = lint(&f32, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("E0704@12:")
            && l.contains("f32 x f32")
            && l.contains("tf32")
            && l.contains("f32 FMAs")),
        "{lints:#?}"
    );
}

/// int8 dots run on integer `wgmma` (the int8 fixture lints clean of errors); its shapes
/// are fewer than the float ones' (N of 8, 16, 24 or a multiple of 16), and that is E0704.
/// A block's N is a power of two or a multiple of 16 (E0701), so the odd N is a
/// warpgroup's half of it: BM = 64 on 8 warps splits N across two warpgroups.
#[test]
fn int8_wgmma_takes_the_integer_shapes_only() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let int8 = std::fs::read_to_string(root.join("tests/fixtures/wgmma/int8.tsr")).unwrap();
    let lints = lint(&int8, Target::Sm90);
    assert!(!lints.iter().any(|l| l.starts_with('E')), "{lints:#?}");
    // 40 columns per warpgroup: a float wgmma takes m64n40, an integer one does not.
    let n40 = int8.replace("block=(128, 64)", "block=(64, 80)");
    let lints = lint(&n40, Target::Sm90);
    assert!(
        lints
            .iter()
            .any(|l| l.starts_with("E0704@")
                && l.contains("N = 80 (40 per warpgroup): an integer `wgmma` covers 8, 16, 24")),
        "{lints:#?}"
    );
    // A [K, N] int8 B is transposed by every warp: no producer warpgroup (E0707).
    let producer =
        int8.replace("stages=2, mma=\"wgmma\")", "stages=2, mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\")");
    let lints = lint(&producer, Target::Sm90);
    assert!(lints.iter().any(|l| l.starts_with("E0707@") && l.contains("B is int8 loaded as [K, N]")), "{lints:#?}");
    // 8-bit WGMMA has no transpose: an M-major A is E0704 (B has the transposing stage).
    let transposed_a = int8
        .replace("def i8_gemm_nn(A: Tensor[\"M\", \"K\", int8]", "def i8_gemm_nn(A: Tensor[\"K\", \"M\", int8]")
        .replace("tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])", "tile.load(A[k0:k0 + ctx.BK, m0:m0 + ctx.BM]).T");
    let lints = lint(&transposed_a, Target::Sm90);
    assert!(
        lints
            .iter()
            .any(|l| l.starts_with("E0704@") && l.contains("A is read transposed; int8 `wgmma` reads A K-major")),
        "{lints:#?}"
    );
    let n48 = int8.replace("block=(128, 64)", "block=(64, 96)");
    assert!(!lint(&n48, Target::Sm90).iter().any(|l| l.starts_with('E')), "{:#?}", lint(&n48, Target::Sm90));
}

/// Under `copy = "tma"` neither the TMA's box copies (the hardware writes through the
/// swizzle) nor the epilogue's stores into its TMA-store buffer are bank conflicts: the
/// WGMMA fixtures (f32 outputs) and the fp8 GEMM (bf16 output) lint clean of W0601.
#[test]
fn tma_copies_and_the_tma_store_buffer_are_free_of_bank_conflicts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let gemms = std::fs::read_to_string(root.join("tests/fixtures/wgmma/gemms.tsr")).unwrap();
    let gemms = gemms.replace("mma=\"wgmma\")", "mma=\"wgmma\", copy=\"tma\")");
    let fp8 = std::fs::read_to_string(root.join("tests/fixtures/wgmma/fp8.tsr")).unwrap();
    let fp8 = fp8.replace("mma=\"wgmma\")", "mma=\"wgmma\", copy=\"tma\")");
    for text in [gemms, fp8] {
        assert!(text.contains("copy=\"tma\""));
        let lints = lint(&text, Target::Sm90);
        assert!(!lints.iter().any(|l| l.starts_with('E') || l.starts_with("W0601")), "{lints:#?}");
    }
}

/// A conflict in a buffer `wgmma` reads through a descriptor names the two ways out, and
/// each removes it: `copy="tma"`, and rows of 128 bytes (BN = 64 f16) for the 128-byte
/// swizzle. `two_tiles_narrow_b`'s B has rows of 96 bytes (the 32-byte swizzle).
#[test]
fn a_descriptor_buffer_conflict_names_the_ways_out_and_each_works() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let gemms = std::fs::read_to_string(root.join("tests/fixtures/wgmma/gemms.tsr")).unwrap();
    let start = gemms.find("@kernel.schedule(Schedule(block=(128, 48)").unwrap();
    let end = start + gemms[start..].find("\n\n").unwrap();
    let kernel = format!("from tessera import *\n\n{}\n", &gemms[start..end]);
    let conflicts = |text: &str| -> Vec<String> {
        lint(text, Target::Sm90).into_iter().filter(|l| l.starts_with("W0601")).collect()
    };
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), kernel.clone(), None);
    let found: Vec<Diagnostic> =
        file_diagnostics(&db, file, Target::Sm90).iter().filter(|d| d.code.as_str() == "W0601").cloned().collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    let note = found[0].notes.join(" ");
    assert!(
        note.contains("32-byte swizzle")
            && note.contains("`copy=\"tma\"` has the TMA unit write it instead")
            && note.contains("rows of 128 bytes"),
        "{note}"
    );
    let tma = kernel.replace("mma=\"wgmma\")", "mma=\"wgmma\", copy=\"tma\")");
    assert!(conflicts(&tma).is_empty(), "{:#?}", conflicts(&tma));
    let wide = kernel.replace("block=(128, 48)", "block=(128, 64)");
    assert!(conflicts(&wide).is_empty(), "{:#?}", conflicts(&wide));
}

/// In an autotune space the candidates that cannot take `wgmma` are pruned with the
/// reason (W0702, category WGMMA); a space of nothing else is E0703.
#[test]
fn wgmma_candidates_that_cannot_run_are_pruned_with_the_reason() {
    let space = format!(
        "{HEADER}{}",
        WGMMA_GEMM.replace(
            "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, mma=\"wgmma\"))",
            "@kernel.autotune(space=dict(BM=[64], BN=[64], BK=[32], warps=[2, 4], mma=[\"mma.sync\", \"wgmma\"]))"
        )
    );
    let lints = lint(&space, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("W0702@3:") && l.contains("1 of 4") && l.contains("1 by WGMMA")),
        "{lints:#?}"
    );
    let lints = lint(&space, Target::Sm80);
    assert!(
        lints.iter().any(|l| l.starts_with("W0702@3:") && l.contains("2 of 4") && l.contains("2 by WGMMA")),
        "{lints:#?}"
    );
    let only = space.replace("mma=[\"mma.sync\", \"wgmma\"]", "mma=[\"wgmma\"]");
    assert!(lint(&only, Target::Sm80).iter().any(|l| l.starts_with("E0703@3:")), "{:#?}", lint(&only, Target::Sm80));
    assert!(!lint(&only, Target::Sm90).iter().any(|l| l.starts_with('E')), "{:#?}", lint(&only, Target::Sm90));
}

/// `producer = "warpgroup"`: a producer warpgroup's GEMM checks clean on sm_90 (its
/// consumers' estimate held to the 240 registers `setmaxnreg` gives them), and in an
/// autotune space the candidates without TMA copies are pruned with the reason (W0702,
/// category "producer warpgroup").
#[test]
fn producer_warpgroup_candidates_that_cannot_be_fed_are_pruned_with_the_reason() {
    let fixed = format!(
        "{HEADER}{}",
        WGMMA_GEMM.replace("mma=\"wgmma\")", "mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\")")
    );
    let lints = lint(&fixed, Target::Sm90);
    assert!(!lints.iter().any(|l| l.starts_with('E') || l.starts_with("W06")), "{lints:#?}");
    let space = format!(
        "{HEADER}{}",
        WGMMA_GEMM.replace(
            "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, mma=\"wgmma\"))",
            "@kernel.autotune(space=dict(BM=[64], BN=[64], BK=[32], warps=[4], mma=[\"wgmma\"], \
             copy=[\"cp.async\", \"tma\"], producer=[\"none\", \"warpgroup\"]))"
        )
    );
    let lints = lint(&space, Target::Sm90);
    assert!(
        lints
            .iter()
            .any(|l| l.starts_with("W0702@3:") && l.contains("1 of 4") && l.contains("1 by producer warpgroup")),
        "{lints:#?}"
    );
}

/// Flash attention (the example, its two dots and online softmax in the K loop) with a
/// producer warpgroup and with ping-pong consumers checks clean on sm_90; ping-pong with
/// one consumer warpgroup is E0707, naming `warps=8`.
#[test]
fn attention_takes_a_producer_and_ping_pong_consumers() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flash_attention.tsr");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("@ts.kernel.autotune(").expect("the example's autotune decorator");
    let end = start + text[start..].find("\ndef ").expect("its def");
    for (schedule, clean) in [
        ("block=(128, 128), warps=8, stages=2, mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\"", true),
        ("block=(128, 128), warps=8, stages=2, mma=\"wgmma\", copy=\"tma\", producer=\"pingpong\"", true),
        ("block=(64, 64), warps=4, stages=2, mma=\"wgmma\", copy=\"tma\", producer=\"pingpong\"", false),
    ] {
        let source = format!("{}@ts.kernel.schedule(ts.Schedule({schedule})){}", &text[..start], &text[end..]);
        let lints = lint(&source, Target::Sm90);
        let errors: Vec<&String> = lints.iter().filter(|l| l.starts_with('E')).collect();
        if clean {
            assert!(errors.is_empty(), "{schedule}: {lints:#?}");
        } else {
            assert!(errors.iter().any(|l| l.starts_with("E0707") && l.contains("warps=8")), "{schedule}: {lints:#?}");
        }
    }
}

/// `cluster = (x, y)`: a clustered GEMM with a producer checks clean on sm_90, and is
/// E0708 on sm_80 (clusters are Hopper's); in an autotune space the clustered candidates
/// without a producer are pruned with the reason (W0702, category "cluster").
#[test]
fn cluster_candidates_without_a_producer_are_pruned_with_the_reason() {
    let fixed = format!(
        "{HEADER}{}",
        WGMMA_GEMM.replace("mma=\"wgmma\")", "mma=\"wgmma\", copy=\"tma\", producer=\"warpgroup\", cluster=(2, 2))")
    );
    let lints = lint(&fixed, Target::Sm90);
    assert!(!lints.iter().any(|l| l.starts_with('E') || l.starts_with("W06")), "{lints:#?}");
    let lints = lint(&fixed, Target::Sm80);
    assert!(lints.iter().any(|l| l.starts_with("E07")), "{lints:#?}");
    let space = format!(
        "{HEADER}{}",
        WGMMA_GEMM.replace(
            "@kernel.schedule(Schedule(block=(64, 64), k=32, warps=4, mma=\"wgmma\"))",
            "@kernel.autotune(space=dict(BM=[64], BN=[64], BK=[32], warps=[4], mma=[\"wgmma\"], copy=[\"tma\"], \
             producer=[\"none\", \"warpgroup\"], cluster_x=[1, 2]))"
        )
    );
    let lints = lint(&space, Target::Sm90);
    assert!(
        lints.iter().any(|l| l.starts_with("W0702@3:") && l.contains("1 of 4") && l.contains("1 by cluster")),
        "{lints:#?}"
    );
}
