//! i64 tensors holding values past 2^53 (`tests/fixtures/wide_integers/increment.tsr`):
//! a file's values reach the device bit for bit (they went through f64, so the CPU added
//! one to a rounded value), and the run gives no verdict, since the f64 reference holds
//! them rounded (it called the rounded result correct, and the exact one wrong).

#[path = "support/saved_runs.rs"]
mod saved_runs;
use saved_runs::run_saved;
use tessera_backends::npy;
use tessera_backends::tensor::HostTensor;
use tessera_frontend::check::DType;

fn i64s(t: &HostTensor) -> Vec<i64> {
    assert_eq!(t.dtype, DType::I64);
    t.data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn i64_values_past_2_53_reach_the_cpu_exactly_and_get_no_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let x: Vec<i64> = (0..256).map(|i| (1i64 << 60) + i).collect();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let path = tmp.path().join("X.npy");
    npy::write(&path, &HostTensor { dtype: DType::I64, dims: vec![256], data: bytes }).unwrap();
    let arg = format!("X={}", path.display());
    let fixture = "tests/fixtures/wide_integers/increment.tsr";
    let Some(saved) = run_saved(fixture, "inc", "cpu", &["--input", &arg]) else { return };
    assert!(saved.text.contains("result    not checked"), "{}", saved.text);
    assert!(
        saved.warnings.contains("`X` holds i64 values beyond 2^53 (X[0] is about 1.152922e18)"),
        "{}",
        saved.warnings
    );
    let read = |name: &str| i64s(&npy::read(&saved.dir.join(name)).unwrap());
    assert_eq!(read("X.npy"), x, "the saved input is the file's");
    let want: Vec<i64> = x.iter().map(|v| v + 1).collect();
    assert_eq!(read("Y.out.npy"), want);
}
