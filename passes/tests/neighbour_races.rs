//! E0501 for a kernel that updates a tensor in place where one program's load reaches
//! into a neighbouring program's store (the programs run in no fixed order), and quiet
//! where the windows only meet within one program. And for a plain store into the window
//! every program of a grid axis adds into with `tile.atomic_add` (a total zeroed in the
//! kernel that sums into it), quiet where the adds go to each program's own elements or
//! to another window, or where a condition on the axis decides which programs add (not
//! proven either way).

use tessera_frontend::text::LineIndex;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{file_diagnostics, Target};

/// `E0501@line: message` for each race, with the labels' messages, 1-based lines.
fn races(body: &str) -> Vec<String> {
    let text = format!("from tessera import *\n\nBLOCK = 64\n\n{body}");
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.clone(), None);
    let index = LineIndex::new(&text);
    let line = |at: u32| index.line_col(&text, at).line + 1;
    file_diagnostics(&db, file, Target::Sm90)
        .iter()
        .filter(|d| format!("{:?}", d.code) == "E0501")
        .map(|d| {
            let labels: Vec<String> =
                d.labels.iter().map(|l| format!("{}: {}", line(l.range.start), l.message)).collect();
            format!("E0501@{}: {} [{}]", line(d.range.start), d.message, labels.join("; "))
        })
        .collect()
}

#[test]
fn a_load_one_element_into_the_next_programs_store_is_a_race() {
    let found = races(
        "@kernel
def shift_left(X: Tensor[\"N\", f32]):
    for i0 in tile.parallel(0, N, BLOCK):
        x = tile.load(X[i0 + 1:i0 + 1 + BLOCK])
        X[i0:i0 + BLOCK] = x
",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    let want = "E0501@9: race: this store writes elements of `X` that an earlier program along `i0` loads";
    assert!(found[0].starts_with(want), "{found:?}");
    assert!(found[0].contains("8: reads elements a later program writes"), "{found:?}");

    // Shifted the other way, an earlier program writes what this one reads.
    let found = races(
        "@kernel
def shift_right(X: Tensor[\"N\", f32]):
    for i0 in tile.parallel(1, N, BLOCK):
        x = tile.load(X[i0 - 1:i0 - 1 + BLOCK])
        X[i0:i0 + BLOCK] = x
",
    );
    assert!(found.len() == 1 && found[0].contains("that a later program along `i0` loads"), "{found:?}");
}

#[test]
fn a_halo_read_in_place_races_under_a_schedule_key() {
    // A three-point stencil written back into its input: the halo reaches both neighbours,
    // whatever BN is.
    let found = races(
        "@kernel.schedule(Schedule(block=(128, 1), warps=4))
def smooth(X: Tensor[\"N\", f32]):
    ctx = tile.context()
    for i0 in tile.parallel(1, N - 1, ctx.BM):
        left = tile.load(X[i0 - 1:i0 - 1 + ctx.BM])
        mid = tile.load(X[i0:i0 + ctx.BM])
        X[i0:i0 + ctx.BM] = (left + mid) * 0.5
",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("E0501@11:"), "{found:?}");
}

#[test]
fn rows_shifted_along_the_grid_race_and_other_columns_do_not_count() {
    let shifted = races(
        "@kernel.schedule(Schedule(block=(16, 64), warps=4))
def rows_up(X: Tensor[\"M\", \"N\", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            x = tile.load(X[m0 + 2:m0 + 2 + ctx.BM, n0:n0 + ctx.BN])
            X[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = x
",
    );
    assert_eq!(shifted.len(), 1, "{shifted:?}");
    assert!(shifted[0].contains("along `m0`"), "{shifted:?}");

    // A load from another tensor, the same window updated in place, and an atomic add
    // into the shifted window are all race-free.
    for body in [
        "x = tile.load(Y[m0 + 2:m0 + 2 + ctx.BM, n0:n0 + ctx.BN])\n            X[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = x",
        "x = tile.load(X[m0:m0 + ctx.BM, n0:n0 + ctx.BN])\n            X[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = x * 2.0",
        "x = tile.load(Y[m0:m0 + ctx.BM, n0:n0 + ctx.BN])\n            tile.atomic_add(X[m0 + 2:m0 + 2 + ctx.BM, n0:n0 + ctx.BN], x)",
    ] {
        let found = races(&format!(
            "@kernel.schedule(Schedule(block=(16, 64), warps=4))
def k(X: Tensor[\"M\", \"N\", f32], Y: Tensor[\"M\", \"N\", f32]):
    ctx = tile.context()
    for m0 in tile.parallel(0, M, ctx.BM):
        for n0 in tile.parallel(0, N, ctx.BN):
            {body}
"
        ));
        assert!(found.is_empty(), "{body}: {found:?}");
    }
}

#[test]
fn an_edge_mask_does_not_hide_the_race() {
    let found = races(
        "@kernel
def shift_left_masked(X: Tensor[\"N\", f32]):
    for i0 in tile.parallel(0, N, BLOCK):
        x = tile.load(X[i0 + 1:i0 + 1 + BLOCK], mask=i0 + 1 + tile.arange(BLOCK) < N)
        tile.store(X[i0:i0 + BLOCK], x, mask=i0 + tile.arange(BLOCK) < N)
",
    );
    assert_eq!(found.len(), 1, "{found:?}");
}

const ZEROED: &str = "@kernel
def total(X: Tensor[\"N\", f32], Total: Tensor[2, f32]):
    for i0 in tile.parallel(0, N, BLOCK):
        x = tile.load(X[i0:i0 + BLOCK])
        if i0 == 0:
            Total[0:1] = tile.zeros((1,), f32)
        tile.atomic_add(Total[0:1], tile.sum(x, 0)[None])
";

#[test]
fn a_total_zeroed_in_the_kernel_that_adds_into_it_is_a_race() {
    let found = races(ZEROED);
    assert_eq!(found.len(), 1, "{found:?}");
    let want = "E0501@10: race: this store writes elements of `Total` that every program along `i0` adds into";
    assert!(found[0].starts_with(want), "{found:?}");
    assert!(found[0].contains("11: every `i0` program adds here"), "{found:?}");
    // The store's window spelled with other constants of the same value is the same.
    let spelled = ZEROED.replace("Total[0:1] = tile.zeros", "Total[0:2 - 1] = tile.zeros");
    assert_eq!(races(&spelled).len(), 1, "{:?}", races(&spelled));
    // 2-D: the programs of a second axis add into one row block.
    let rows = "@kernel
def col_sums(X: Tensor[\"R\", \"C\", f32], S: Tensor[1, \"C\", f32]):
    for c0 in tile.parallel(0, C, BLOCK):
        for r0 in tile.parallel(0, R, BLOCK):
            x = tile.load(X[r0:r0 + BLOCK, c0:c0 + BLOCK])
            if r0 == 0:
                S[0:1, c0:c0 + BLOCK] = tile.zeros((1, BLOCK), f32)
            tile.atomic_add(S[0:1, c0:c0 + BLOCK], tile.sum(x, 0)[None, :])
";
    let found = races(rows);
    assert!(found.len() == 1 && found[0].contains("every program along `r0` adds into"), "{found:?}");
}

#[test]
fn adds_into_own_elements_another_window_or_under_a_condition_on_the_axis_are_not_reported() {
    let own = "@kernel
def own(X: Tensor[\"N\", f32], Y: Tensor[\"N\", f32]):
    for i0 in tile.parallel(0, N, BLOCK):
        x = tile.load(X[i0:i0 + BLOCK])
        Y[i0:i0 + BLOCK] = x
        tile.atomic_add(Y[i0:i0 + BLOCK], x)
";
    assert!(races(own).is_empty(), "{:?}", races(own));
    // Another element of the tensor: the store only races with itself (one program).
    let other = ZEROED.replace("Total[0:1] = tile.zeros", "Total[1:2] = tile.zeros");
    assert!(races(&other).is_empty(), "{:?}", races(&other));
    // Adds under a condition on the axis: this check does not prove which programs add,
    // so it stays quiet (this one races all the same, and the run's reference says so).
    let guarded = ZEROED.replace(
        "        tile.atomic_add(Total[0:1], tile.sum(x, 0)[None])",
        "        if i0 > 0:\n            tile.atomic_add(Total[0:1], tile.sum(x, 0)[None])",
    );
    assert!(races(&guarded).is_empty(), "{:?}", races(&guarded));
    // Adds alone commute.
    let adds = ZEROED.replace("        if i0 == 0:\n            Total[0:1] = tile.zeros((1,), f32)\n", "");
    assert!(races(&adds).is_empty(), "{:?}", races(&adds));
}
