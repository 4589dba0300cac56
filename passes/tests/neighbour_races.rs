//! E0501 for a kernel that updates a tensor in place where one program's load reaches
//! into a neighbouring program's store (the programs run in no fixed order), and quiet
//! where the windows only meet within one program.

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
