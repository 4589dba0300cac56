//! Gathers by a loaded index tile inside `tile.parallel` loops (an embedding lookup):
//! the grid is the loops' (it was given a third axis over the gathered table, as for
//! `tile.linear_id()`, whose programs all stored the same elements: the interpreter
//! called it a race, the CPU did the work once per program). Outputs are compared with
//! the table's rows picked in Rust.

use tessera_frontend::check::DType;

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{input, on_each_device};

#[test]
fn an_embedding_lookup_gathers_each_tokens_row() {
    let tmp = tempfile::tempdir().unwrap();
    let (v, d, t) = (50usize, 96usize, 37usize);
    // Ids that repeat, skip rows and end at the table's last row.
    let ids: Vec<f64> = (0..t - 1).map(|i| ((i * 17 + 3) % v) as f64).chain([v as f64 - 1.0]).collect();
    // Row r, column c holds r + c / 128 (exact in f32).
    let table: Vec<f64> = (0..v * d).map(|k| (k / d) as f64 + (k % d) as f64 / 128.0).collect();
    let (ids_arg, table_arg) = (input(tmp.path(), "Ids", DType::I32, &ids), input(tmp.path(), "E", DType::F32, &table));
    let dims = format!("D={d}");
    let fixture = "tests/fixtures/gathers/embedding.tsr";
    let args = ["--input", &ids_arg, "--input", &table_arg, "--dims", &dims];
    on_each_device(fixture, "embedding", &args, |device, saved| {
        let y = saved.read("Y.out.npy");
        assert_eq!(y.len(), t * d, "{device}");
        for (i, &id) in ids.iter().enumerate() {
            for c in 0..d {
                assert_eq!(y[i * d + c], table[id as usize * d + c], "{device}: Y[{i}, {c}] (token {id})");
            }
        }
    });
}
