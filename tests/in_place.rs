//! Kernels that read and write one tensor (`tests/fixtures/in_place/normalize.tsr`):
//! one program reading an element another writes has no single result, and the run
//! says so on every run instead of a verdict that flipped (and blamed code generation);
//! a kernel that writes back only what each program read itself is checked as usual.
//! The same holds between `tile.atomic_add` and a plain write or read of the element in
//! another program (`tests/fixtures/in_place/atomics.tsr`): a total zeroed by program 0
//! while the others add into it was called `correct`, since the reference ran program 0
//! first.

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::{input, on_each_device, root};
use tessera_frontend::check::DType;

const FIXTURE: &str = "tests/fixtures/in_place/normalize.tsr";

fn positive_inputs(n: usize) -> Vec<f64> {
    (0..n).map(|i| 1.0 + (i % 7) as f64).collect()
}

#[test]
fn a_program_that_reads_what_another_writes_gets_no_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let x = input(tmp.path(), "X", DType::F32, &positive_inputs(4096));
    for device in ["interp", "cpu"] {
        for _ in 0..3 {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
                .current_dir(root())
                .args(["run", FIXTURE, "--kernel", "normalize_in_place", "--device", device, "--input", &x])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("no CPU backend") {
                break;
            }
            assert_eq!(o.status.code(), Some(1), "{device}: {err}");
            // Whichever of the two programs comes second finds it: the sum's load, or the
            // store into a block another program's sum read.
            let at_load = err.contains("normalize.tsr:14:")
                && err.contains("reads `X[")
                && err.contains("which another program writes");
            let at_store = err.contains("normalize.tsr:15:")
                && err.contains("writes `X[")
                && err.contains("which another program reads");
            assert!(at_load || at_store, "{device}: {err}");
        }
    }
}

#[test]
fn out_of_place_and_same_element_updates_are_checked_as_usual() {
    let tmp = tempfile::tempdir().unwrap();
    let values = positive_inputs(1000);
    let x = input(tmp.path(), "X", DType::F32, &values);
    let args = ["--input", x.as_str()];
    let total: f64 = values.iter().sum();
    on_each_device(FIXTURE, "normalize", &args, |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
        for (i, (&y, &v)) in saved.read("Y.out.npy").iter().zip(&values).enumerate() {
            assert!((y - v / total).abs() <= 1e-6 * (v / total), "{device}: Y[{i}] = {y}, want {}", v / total);
        }
    });
    on_each_device(FIXTURE, "double", &args, |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
        let want: Vec<f64> = values.iter().map(|v| v * 2.0).collect();
        assert_eq!(saved.read("X.out.npy"), want, "{device}");
    });
}

/// A histogram by read-modify-write through its bucket ids loses the updates of programs
/// that share a bucket: stopped, with `tile.atomic_add` as the fix.
#[test]
fn a_histogram_by_read_modify_write_is_stopped_with_atomic_add_as_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let kernel = "from tessera import *\n\nBLOCK = 64\n\n@kernel\n\
        def histogram(X: Tensor[\"N\", i32], Hist: Tensor[\"B\", i32]):\n    \
        for i0 in tile.parallel(0, N, BLOCK):\n        \
        b = tile.load(X[i0:i0 + BLOCK], other=-1)\n        \
        Hist[b] = Hist[b] + 1\n";
    let path = tmp.path().join("histogram.tsr");
    std::fs::write(&path, kernel).unwrap();
    let ids: Vec<f64> = (0..1024).map(|i| ((i * 7) % 16) as f64).collect();
    let x = input(tmp.path(), "X", DType::I32, &ids);
    let hist = input(tmp.path(), "Hist", DType::I32, &[0.0; 16]);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", path.to_str().unwrap(), "--kernel", "histogram", "--device", "interp"])
        .args(["--input", &x, "--input", &hist])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("`Hist[") && err.contains("add into the element with `tile.atomic_add`"), "{err}");
}

const ATOMICS: &str = "tests/fixtures/in_place/atomics.tsr";

/// The exit code and standard error of `kernel` of [`ATOMICS`] on `device`.
fn run_atomics(kernel: &str, device: &str, x: &str) -> (Option<i32>, String) {
    run_kernel(ATOMICS, kernel, device, x)
}

/// The exit code and standard error of `kernel` of `file` on `device`, with `x` as `X`.
fn run_kernel(file: &str, kernel: &str, device: &str, x: &str) -> (Option<i32>, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .args(["run", file, "--kernel", kernel, "--device", device, "--input", x])
        .output()
        .unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_plain_write_or_read_of_what_other_programs_add_into_gets_no_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let x = input(tmp.path(), "X", DType::F32, &positive_inputs(4096));
    for device in ["interp", "cpu"] {
        // The same window written and added into: E0501 before anything runs.
        let corpus = "tests/corpus/invalid/e0501_atomic_total_zeroed_in_kernel.tsr";
        let (code, err) = run_kernel(corpus, "total", device, &x);
        if err.contains("no CPU backend") {
            continue;
        }
        assert_eq!(code, Some(1), "{device}: {err}");
        let refusal = "zeroed_in_kernel.tsr:13:13: cannot run `total`: E0501 race: this store writes elements of \
                       `Total` that every program along `i0` adds into with `tile.atomic_add`";
        assert!(err.contains(refusal), "{device}: {err}");
        for _ in 0..3 {
            // A wider window: the reference finds it, at program 0's write or at an add of
            // another program, whichever comes second.
            let (code, err) = run_atomics("zeroed_wider", device, &x);
            assert_eq!(code, Some(1), "{device}: {err}");
            let at_add = err.contains("atomics.tsr:18:")
                && err.contains("adds into `Total[0]` with `tile.atomic_add`, which another program writes");
            let at_write = err.contains("atomics.tsr:17:")
                && err.contains("writes `Total[0]`, which another program adds into with `tile.atomic_add`");
            assert!(at_add || at_write, "{device}: {err}");
            assert!(err.contains("set the tensor before the launch"), "{device}: {err}");

            let (code, err) = run_atomics("read_back", device, &x);
            assert_eq!(code, Some(1), "{device}: {err}");
            assert!(err.contains("`Total[0]`") && err.contains("read the sums in a second kernel"), "{device}: {err}");
        }
    }
}

#[test]
fn adds_into_a_programs_own_elements_and_adds_alone_are_checked_as_usual() {
    let tmp = tempfile::tempdir().unwrap();
    let values = positive_inputs(1000);
    let x = input(tmp.path(), "X", DType::F32, &values);
    let args = ["--input", x.as_str()];
    on_each_device(ATOMICS, "own_elements", &args, |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
        let want: Vec<f64> = values.iter().map(|v| v * 3.0).collect();
        assert_eq!(saved.read("Y.out.npy"), want, "{device}");
    });
    let total: f64 = values.iter().sum();
    on_each_device(ATOMICS, "total", &args, |device, saved| {
        assert!(saved.text.contains("result    correct"), "{device}: {}", saved.text);
        assert_eq!(saved.read("Total.out.npy"), vec![total], "{device}");
    });
}
