//! `tile.atomic_add`, checked against Rust's arithmetic on the saved inputs, on the
//! interpreter and the CPU backend (whose programs run on several threads, adding into
//! the same elements; the PTX is checked by the emulator, kernels `split_k_gemm`,
//! `column_sums`, `histogram` and `embedding_backward`):
//! - split-K GEMM: `SPLIT` programs per output tile add their partial products into C;
//! - column sums over row blocks: each program adds a row vector (and an int32 count),
//!   which on a GPU the threads hold replicated, so each element must be added once;
//! - by an index tile: a histogram (many elements of one program into one bucket) and an
//!   embedding's gradient (a repeated id adds its rows twice, as `np.add.at`).

use tessera_frontend::check::DType;

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{input, input_shaped, on_each_device, run_saved};

const ATOMICS: &str = "tests/fixtures/atomics/atomics.tsr";

#[test]
fn split_k_programs_add_their_partial_products_into_c() {
    let (m, k, n) = (70usize, 200usize, 50usize);
    let dims = format!("M={m},K={k},N={n}");
    // C starts non-zero (outputs are seeded zero): a kernel that stored instead of adding
    // would lose it, and one that added a program's product twice would be off by it.
    let tmp = tempfile::tempdir().unwrap();
    let start: Vec<f64> = (0..m * n).map(|i| (i % 7) as f64 - 3.0).collect();
    let c_in = input_shaped(tmp.path(), "C", DType::F32, &[m, n], &start);
    on_each_device(ATOMICS, "split_k_gemm", &["--dims", &dims, "--input", &c_in], |device, saved| {
        let (a, b, c0, c) = (saved.read("A.npy"), saved.read("B.npy"), saved.read("C.npy"), saved.read("C.out.npy"));
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                let want = c0[i * n + j] + dot;
                // f32 partial sums of f16 products, three of them added in f32.
                let got = c[i * n + j];
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{device}: C[{i}, {j}] = {got}, want {want}");
            }
        }
        assert_eq!(c0, start, "{device}: the initial C");
    });
}

#[test]
fn column_sums_add_each_row_blocks_vector_once() {
    let (r, cols) = (100usize, 150usize);
    let dims = format!("R={r},C={cols}");
    let tmp = tempfile::tempdir().unwrap();
    let s_in = input(tmp.path(), "S", DType::F32, &(0..cols).map(|j| j as f64 / 10.0).collect::<Vec<_>>());
    let n_in = input(tmp.path(), "Count", DType::I32, &(0..cols).map(|j| (j % 5) as f64).collect::<Vec<_>>());
    let args = ["--dims", &dims, "--input", &s_in, "--input", &n_in];
    on_each_device(ATOMICS, "column_sums", &args, |device, saved| {
        let (x, s0, n0) = (saved.read("X.npy"), saved.read("S.npy"), saved.read("Count.npy"));
        let (s, n) = (saved.read("S.out.npy"), saved.read("Count.out.npy"));
        for j in 0..cols {
            let sum: f64 = (0..r).map(|i| x[i * cols + j]).sum();
            let positive = (0..r).filter(|&i| x[i * cols + j] > 0.0).count() as f64;
            assert!(
                (s[j] - (s0[j] + sum)).abs() <= 1e-4 * sum.abs().max(1.0),
                "{device}: S[{j}] = {}, want {}",
                s[j],
                s0[j] + sum
            );
            assert_eq!(n[j], n0[j] + positive, "{device}: Count[{j}]");
        }
    });
}

#[test]
fn a_histogram_counts_every_element_into_its_bucket() {
    let (n, buckets) = (1000usize, 16usize);
    let dims = format!("N={n},NB={buckets}");
    on_each_device(ATOMICS, "histogram", &["--dims", &dims], |device, saved| {
        let (x, h) = (saved.read("X.npy"), saved.read("Hist.out.npy"));
        let mut want = vec![0f64; buckets];
        for &v in &x {
            // The kernel's f32 arithmetic: (x + 4) * 2, floored, clamped to the buckets.
            let b = (((v as f32 + 4.0) * 2.0).floor() as i64).clamp(0, buckets as i64 - 1);
            want[b as usize] += 1.0;
        }
        assert_eq!(h, want, "{device}");
        assert!(want.iter().filter(|&&c| c > 1.0).count() > 4, "collisions inside programs");
    });
}

#[test]
fn an_embedding_gradient_adds_every_row_of_dy_into_its_ids_row() {
    let (t, v, d) = (37usize, 11usize, 96usize);
    let tmp = tempfile::tempdir().unwrap();
    // Ids that repeat (within and across programs) and miss some rows.
    let ids: Vec<f64> = (0..t).map(|i| ((i * 7) % v) as f64 * f64::from(u8::from(i % 5 != 0))).collect();
    let ids_in = input(tmp.path(), "Ids", DType::I32, &ids);
    let dims = format!("T={t},D={d},VD={}", v * d);
    on_each_device(ATOMICS, "embedding_backward", &["--dims", &dims, "--input", &ids_in], |device, saved| {
        let (dy, de) = (saved.read("DY.npy"), saved.read("DE.out.npy"));
        let mut want = vec![0f64; v * d];
        for (row, &id) in ids.iter().enumerate() {
            for c in 0..d {
                want[id as usize * d + c] += dy[row * d + c];
            }
        }
        for (i, (&g, &w)) in de.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{device}: DE[{}, {}] = {g}, want {w}", i / d, i % d);
        }
    });
}

/// Sampling programs cannot check additions: an element is the sum of every program's
/// additions, and a sample's reference has only some of them (a sampled check of a
/// 256x256x1536 split-K GEMM said WRONG in 25,597 elements). `--check sampled` and the
/// large problems `auto` would sample run every program instead, and say why.
#[test]
fn a_kernel_that_adds_atomically_is_checked_in_full() {
    let Some(saved) = run_saved(ATOMICS, "split_k_gemm", "cpu", &["--dims", "M=128,N=128,K=768", "--check", "sampled"])
    else {
        return;
    };
    assert!(
        saved.text.contains("check     full") && saved.text.contains("the kernel adds atomically"),
        "{}",
        saved.text
    );
    assert!(saved.text.contains("result    correct"), "{}", saved.text);
}
