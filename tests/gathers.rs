//! Gathers by a loaded index tile inside `tile.parallel` loops (an embedding lookup):
//! the grid is the loops' (it was given a third axis over the gathered table, as for
//! `tile.linear_id()`, whose programs all stored the same elements: the interpreter
//! called it a race, the CPU did the work once per program). Outputs are compared with
//! the table's rows picked in Rust.
//!
//! And gathers and scatters by index tiles into tensors of rank 2 and 3
//! (`tests/fixtures/gathers/gathers.tsr`, NumPy's advanced indexing) against Rust's
//! indexing of the saved inputs (the PTX is checked by the emulator): ids outside the
//! table (negative, or past its rows) read 0 and write nothing, and a column past its dim
//! never reaches the next row.

use tessera_frontend::check::DType;

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{input, input_shaped, on_each_device};

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

const GATHERS: &str = "tests/fixtures/gathers/gathers.tsr";

/// Token ids for a table of `v` rows: repeats, the last row, and ids outside it.
fn token_ids(t: usize, v: usize) -> Vec<f64> {
    (0..t)
        .map(|i| match i % 9 {
            4 => -1.0,
            7 => v as f64,
            8 => (v - 1) as f64,
            _ => ((i * 5) % v) as f64,
        })
        .collect()
}

#[test]
fn an_embedding_lookup_reads_each_ids_row_and_zero_outside_the_table() {
    // D = 100 is not a multiple of the 64-wide column tiles: the last tile's columns
    // 100..128 must not read row id + 1.
    let (t, v, d) = (37usize, 11usize, 100usize);
    let tmp = tempfile::tempdir().unwrap();
    let ids = token_ids(t, v);
    let ids_in = input(tmp.path(), "Ids", DType::I32, &ids);
    let dims = format!("T={t},V={v},D={d}");
    on_each_device(GATHERS, "embedding", &["--dims", &dims, "--input", &ids_in], |device, saved| {
        let (table, out) = (saved.read("Table.npy"), saved.read("Out.out.npy"));
        for (row, &id) in ids.iter().enumerate() {
            for c in 0..d {
                let want = if (0.0..v as f64).contains(&id) { table[id as usize * d + c] } else { 0.0 };
                assert_eq!(out[row * d + c], want, "{device}: Out[{row}, {c}] (id {id})");
            }
        }
    });
}

#[test]
fn an_embedding_gradient_adds_each_row_of_dy_into_its_ids_row() {
    let (t, v, d) = (37usize, 11usize, 100usize);
    let tmp = tempfile::tempdir().unwrap();
    let ids = token_ids(t, v);
    let ids_in = input(tmp.path(), "Ids", DType::I32, &ids);
    let dims = format!("T={t},V={v},D={d}");
    on_each_device(GATHERS, "embedding_grad", &["--dims", &dims, "--input", &ids_in], |device, saved| {
        let (dy, de) = (saved.read("DY.npy"), saved.read("DE.out.npy"));
        let mut want = vec![0f64; v * d];
        for (row, &id) in ids.iter().enumerate() {
            if (0.0..v as f64).contains(&id) {
                for c in 0..d {
                    want[id as usize * d + c] += dy[row * d + c];
                }
            }
        }
        for (i, (&g, &w)) in de.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{device}: DE[{}, {}] = {g}, want {w}", i / d, i % d);
        }
    });
}

#[test]
fn a_paged_kv_cache_is_read_through_its_block_table() {
    // 5 blocks of P = 16 tokens; a sequence of 70 tokens in blocks 3, 0, 4, 1, 2.
    let (blocks, p, d, s) = (5usize, 16usize, 80usize, 70usize);
    let tmp = tempfile::tempdir().unwrap();
    let table = [3.0, 0.0, 4.0, 1.0, 2.0];
    let table_in = input(tmp.path(), "Blocks", DType::I32, &table);
    let dims = format!("NB={blocks},D={d},S={s},NS={}", table.len());
    on_each_device(GATHERS, "paged_gather", &["--dims", &dims, "--input", &table_in], |device, saved| {
        let (cache, out) = (saved.read("Cache.npy"), saved.read("Out.out.npy"));
        for token in 0..s {
            let block = table[token / p] as usize;
            for c in 0..d {
                let want = cache[(block * p + token % p) * d + c];
                assert_eq!(out[token * d + c], want, "{device}: token {token}, column {c}");
            }
        }
    });
}

#[test]
fn a_scatter_by_two_index_tiles_writes_rows_and_columns_where_they_point() {
    let (r, c) = (21usize, 40usize);
    let tmp = tempfile::tempdir().unwrap();
    // A permutation of the rows, but row 3 goes nowhere (-1) and row 5 past the end.
    let perm: Vec<f64> = (0..r)
        .map(|i| match i {
            3 => -1.0,
            5 => r as f64,
            _ => ((i * 8) % r) as f64,
        })
        .collect();
    let perm_in = input(tmp.path(), "Perm", DType::I32, &perm);
    let y0: Vec<f64> = (0..r * c).map(|i| -(i as f64)).collect();
    let y_in = input_shaped(tmp.path(), "Y", DType::F32, &[r, c], &y0);
    let dims = format!("R={r},C={c}");
    let args = ["--dims", &dims, "--input", &perm_in, "--input", &y_in];
    on_each_device(GATHERS, "permute_rows", &args, |device, saved| {
        let (x, y) = (saved.read("X.npy"), saved.read("Y.out.npy"));
        let mut want = y0.clone();
        for (row, &dest) in perm.iter().enumerate() {
            if (0.0..r as f64).contains(&dest) {
                for col in 0..c {
                    want[dest as usize * c + (c - 1 - col)] = x[row * c + col];
                }
            }
        }
        assert_eq!(y, want, "{device}");
    });
}

#[test]
fn advanced_indices_apart_put_their_block_first() {
    let (a, b, c, n) = (4usize, 50usize, 5usize, 23usize);
    let tmp = tempfile::tempdir().unwrap();
    let sel: Vec<f64> = (0..n).map(|i| if i == 7 { -1.0 } else { ((i * 3) % (a + 1)) as f64 }).collect();
    let sel_in = input(tmp.path(), "Sel", DType::I32, &sel);
    let dims = format!("A={a},B={b},C={c},N={n}");
    on_each_device(GATHERS, "pick", &["--dims", &dims, "--input", &sel_in], |device, saved| {
        let (x, out) = (saved.read("X.npy"), saved.read("Out.out.npy"));
        for (row, &s) in sel.iter().enumerate() {
            for col in 0..b {
                // X[sel[row], col, 2], 0 for an index outside A.
                let want = if (0.0..a as f64).contains(&s) { x[(s as usize * b + col) * c + 2] } else { 0.0 };
                assert_eq!(out[row * b + col], want, "{device}: Out[{row}, {col}] (sel {s})");
            }
        }
    });
}

/// `permute_rows` (16-row programs) with `perm`, the rows of X given by `x`: what the run
/// says, exit status and standard error, on `device`.
fn permute_rows_run(device: &str, perm: &[f64], x: &[f64], dir: &std::path::Path) -> (Option<i32>, String) {
    let (r, c) = (perm.len(), x.len() / perm.len());
    let perm_in = input(dir, "Perm", DType::I32, perm);
    let x_in = input_shaped(dir, "X", DType::F32, &[r, c], x);
    let dims = format!("R={r},C={c}");
    let args = ["run", GATHERS, "--kernel", "permute_rows", "--device", device, "--dims", &dims];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(saved_runs::root())
        .args(args)
        .args(["--input", &perm_in, "--input", &x_in])
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Rows 3 and 19 (programs r0 = 0 and r0 = 16) both go to row 3 with different values:
/// which write lands is unspecified, and the CPU's threads kept either on different runs,
/// so a verdict flipped between WRONG and correct. The reference reports the element and
/// both programs instead, on every run.
#[test]
fn programs_that_scatter_different_values_into_one_element_get_no_verdict() {
    let (r, c) = (21usize, 40usize);
    let tmp = tempfile::tempdir().unwrap();
    let perm: Vec<f64> = (0..r).map(|i| if i == 19 { 3.0 } else { i as f64 }).collect();
    let x: Vec<f64> = (0..r * c).map(|i| i as f64).collect();
    for device in ["interp", "cpu"] {
        for _ in 0..3 {
            let (code, err) = permute_rows_run(device, &perm, &x, tmp.path());
            if err.contains("no CPU backend") {
                break;
            }
            assert_eq!(code, Some(1), "{device}: {err}");
            // Column 0 of X lands in column 39 of Y (the columns are reversed).
            let want = "the programs at r0 = 0, c0 = 0 and at r0 = 16, c0 = 0 write `Y[3, 39]` and leave \
                        different values (120 and 760)";
            assert!(err.contains(want) && err.contains("tile.atomic_add"), "{device}: {err}");
        }
    }
}

/// Two lanes of one program's scatter with different values: unspecified on a GPU, whose
/// threads write at once, although the CPU backend writes its lanes in order.
#[test]
fn lanes_that_scatter_different_values_into_one_element_get_no_verdict() {
    let (r, c) = (21usize, 40usize);
    let tmp = tempfile::tempdir().unwrap();
    let perm: Vec<f64> = (0..r).map(|i| if i == 5 { 2.0 } else { i as f64 }).collect();
    let x: Vec<f64> = (0..r * c).map(|i| i as f64).collect();
    let (code, err) = permute_rows_run("interp", &perm, &x, tmp.path());
    assert_eq!(code, Some(1), "{err}");
    let want = "lanes [2, 0] and [5, 0] of this scatter (in the program at r0 = 0, c0 = 0) write `Y[2, 39]` \
                with different values (80 and 200)";
    assert!(err.contains(want), "{err}");
}

/// Repeated ids that write equal values lose nothing: the kernel has one result, and it is
/// checked.
#[test]
fn ids_that_repeat_with_equal_values_are_checked_as_usual() {
    let (r, c) = (21usize, 40usize);
    let tmp = tempfile::tempdir().unwrap();
    // Rows 1, 5 and 19 all go to row 1, within a program and across programs, and hold
    // the same values.
    let perm: Vec<f64> = (0..r).map(|i| if i == 5 || i == 19 { 1.0 } else { i as f64 }).collect();
    let x: Vec<f64> =
        (0..r * c).map(|i| if [1, 5, 19].contains(&(i / c)) { (i % c) as f64 } else { i as f64 }).collect();
    let x_in = input_shaped(tmp.path(), "X", DType::F32, &[r, c], &x);
    let perm_in = input(tmp.path(), "Perm", DType::I32, &perm);
    let y0: Vec<f64> = (0..r * c).map(|i| -(i as f64)).collect();
    let y_in = input_shaped(tmp.path(), "Y", DType::F32, &[r, c], &y0);
    let dims = format!("R={r},C={c}");
    let args = ["--dims", &dims, "--input", &perm_in, "--input", &x_in, "--input", &y_in];
    on_each_device(GATHERS, "permute_rows", &args, |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
        let y = saved.read("Y.out.npy");
        for row in 0..r {
            for col in 0..c {
                // Rows 5 and 19 are nobody's destination: they keep Y's values.
                let want = match row {
                    5 | 19 => y0[row * c + col],
                    _ => x[row * c + (c - 1 - col)],
                };
                assert_eq!(y[row * c + col], want, "{device}: Y[{row}, {col}]");
            }
        }
    });
}
