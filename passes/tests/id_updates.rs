//! W0609: a scatter that writes back what a gather of the same tensor read at the same
//! ids (`Hist[b] = Hist[b] + 1`) loses the updates of repeated ids.

use tessera_frontend::text::LineIndex;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{file_diagnostics, Target};

/// `W0609@line` for each report in `body`, 1-based lines.
fn reports(body: &str) -> Vec<String> {
    let text = format!("from tessera import *\n\n{body}");
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), text.clone(), None);
    let index = LineIndex::new(&text);
    file_diagnostics(&db, file, Target::Sm90)
        .iter()
        .filter(|d| format!("{:?}", d.code) == "W0609")
        .map(|d| format!("W0609@{}", index.line_col(&text, d.range.start).line + 1))
        .collect()
}

fn one_d(update: &str) -> String {
    format!(
        "@kernel
def k(X: Tensor[\"N\", i32], Hist: Tensor[\"B\", i32], Other: Tensor[\"B\", i32]):
    for i0 in tile.parallel(0, N, 256):
        b = tile.load(X[i0:i0 + 256], other=-1)
        {update}
"
    )
}

#[test]
fn a_histogram_by_read_modify_write_is_w0609() {
    assert_eq!(reports(&one_d("Hist[b] = Hist[b] + 1")), ["W0609@7"]);
    assert_eq!(reports(&one_d("Hist[b] = tile.maximum(Hist[b] * 2, b)")), ["W0609@7"]);
}

#[test]
fn an_atomic_add_another_tensor_other_ids_or_ids_of_the_place_are_not_reported() {
    for update in [
        "tile.atomic_add(Hist[b], tile.full((256,), 1, i32))",
        "Hist[b] = Other[b] + 1",
        "Hist[b + 1] = Hist[b] + 1",
        "Hist[b] = b",
        // Ids from the program's place never repeat (saxpy's `y[i] = alpha * x[i] + y[i]`).
        "Hist[i0 + tile.arange(256)] = Hist[i0 + tile.arange(256)] + 1",
    ] {
        assert!(reports(&one_d(update)).is_empty(), "{update}");
    }
}

#[test]
fn rows_updated_through_two_index_tiles_are_w0609() {
    // The gather and the scatter each compute the flat index of `ids[:, None], cols[None, :]`.
    let found = reports(
        "@kernel.schedule(Schedule(block=(16, 64), warps=4))
def scale_rows(Ids: Tensor[\"T\", i32], E: Tensor[\"V\", \"D\", f32]):
    ctx = tile.context()
    for t0 in tile.parallel(0, T, ctx.BM):
        ids = tile.load(Ids[t0:t0 + ctx.BM], other=-1)
        for d0 in tile.parallel(0, D, ctx.BN):
            cols = d0 + tile.arange(ctx.BN)
            E[ids[:, None], cols[None, :]] = E[ids[:, None], cols[None, :]] * 0.5
",
    );
    assert_eq!(found, ["W0609@10"]);
}
