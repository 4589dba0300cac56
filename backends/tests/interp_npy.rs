//! `.npy` files: round trips through `npy::write`/`npy::read`, and NumPy itself reading
//! ours and writing ones we read (skipped when NumPy is missing, unless `CI` is set).

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_backends::interp::inputs::{random_tensor, Rng};
use tessera_backends::npy;
use tessera_backends::tensor::HostTensor;
use tessera_frontend::check::DType;

const DTYPES: [DType; 11] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::I32,
    DType::I64,
    DType::Int8,
    DType::Bool,
    DType::BF16,
    DType::Fp8E4m3,
    DType::Fp8E5m2,
    DType::Int4,
];

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-npy-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tensors() -> Vec<HostTensor> {
    let mut rng = Rng::new(42);
    DTYPES.iter().enumerate().map(|(i, &d)| random_tensor(d, &[3, 1 + i, 2], &mut rng)).collect()
}

#[test]
fn files_round_trip() {
    let dir = scratch_dir("round-trip");
    for t in tensors() {
        let path = dir.join(format!("{}.npy", t.dtype));
        let note = npy::write(&path, &t).unwrap();
        let back = npy::read(&path).unwrap();
        assert_eq!(back.dims, t.dims);
        assert_eq!(back.to_f64(), t.to_f64(), "{}", t.dtype);
        let widened = matches!(t.dtype, DType::BF16 | DType::Fp8E4m3 | DType::Fp8E5m2 | DType::Int4);
        assert_eq!(note.is_some(), widened, "{}: {note:?}", t.dtype);
        if widened {
            assert_ne!(back.dtype, t.dtype);
        } else {
            assert_eq!(back, t);
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

fn numpy_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import numpy"]).status().is_ok_and(|s| s.success());
    if !ok && std::env::var_os("CI").is_some() {
        panic!("CI is set but python3 with numpy is not available");
    }
    ok
}

fn python(script: &str, dir: &Path) -> String {
    let out = Command::new("python3").arg("-c").arg(script).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "python failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn numpy_reads_our_files() {
    if !numpy_available() {
        eprintln!("skipped: python3 with numpy is not available");
        return;
    }
    let dir = scratch_dir("numpy-reads");
    let mut expected = Vec::new();
    for t in tensors() {
        npy::write(&dir.join(format!("{}.npy", t.dtype)), &t).unwrap();
        let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
        expected.push((t.dtype.to_string(), dims.join("x"), t.to_f64().iter().sum::<f64>()));
    }
    let names: Vec<String> = DTYPES.iter().map(|d| format!("'{d}'")).collect();
    let script = format!(
        "import numpy as np\n\
         for n in [{}]:\n\
         \x20   a = np.load(n + '.npy')\n\
         \x20   print(n, 'x'.join(str(d) for d in a.shape), repr(float(a.astype(np.float64).sum())))\n",
        names.join(", ")
    );
    let printed = python(&script, &dir);
    let got: Vec<(String, String, f64)> = printed
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            (parts[0].to_string(), parts[1].to_string(), parts[2].parse().unwrap())
        })
        .collect();
    assert_eq!(got.len(), expected.len(), "{printed}");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!((&g.0, &g.1), (&e.0, &e.1));
        // The same values summed in another order.
        assert!((g.2 - e.2).abs() <= 1e-9 * (1.0 + e.2.abs()), "{}: numpy sums to {}, we to {}", e.0, g.2, e.2);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn we_read_numpy_files() {
    if !numpy_available() {
        eprintln!("skipped: python3 with numpy is not available");
        return;
    }
    let dir = scratch_dir("numpy-writes");
    python(
        "import numpy as np\n\
         a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8\n\
         np.save('f4.npy', a)\n\
         np.save('f8.npy', a.astype(np.float64))\n\
         np.save('f2.npy', a.astype(np.float16))\n\
         np.save('i4.npy', np.arange(-5, 5, dtype=np.int32))\n\
         np.save('i8.npy', np.arange(-5, 5, dtype=np.int64))\n\
         np.save('i1.npy', np.arange(-5, 5, dtype=np.int8))\n\
         np.save('b1.npy', np.array([True, False, True]))\n\
         np.save('scalar.npy', np.float32(2.5))\n\
         with open('v2.npy', 'wb') as f:\n\
         \x20   np.lib.format.write_array(f, a, version=(2, 0))\n\
         np.save('fortran.npy', np.asfortranarray(a))\n",
        &dir,
    );
    let grid: Vec<f64> = (0..24).map(|i| i as f64 / 8.0).collect();
    for (name, dtype) in [("f4", DType::F32), ("f8", DType::F64), ("f2", DType::F16), ("v2", DType::F32)] {
        let t = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
        assert_eq!((t.dtype, t.dims.clone()), (dtype, vec![2, 3, 4]), "{name}");
        assert_eq!(t.to_f64(), grid, "{name}");
    }
    let ints: Vec<f64> = (-5..5).map(|i| i as f64).collect();
    for (name, dtype) in [("i4", DType::I32), ("i8", DType::I64), ("i1", DType::Int8)] {
        let t = npy::read(&dir.join(format!("{name}.npy"))).unwrap();
        assert_eq!(t.dtype, dtype, "{name}");
        assert_eq!(t.to_f64(), ints, "{name}");
    }
    let b = npy::read(&dir.join("b1.npy")).unwrap();
    assert_eq!((b.dtype, b.to_f64()), (DType::Bool, vec![1.0, 0.0, 1.0]));
    let s = npy::read(&dir.join("scalar.npy")).unwrap();
    assert_eq!((s.dims.len(), s.to_f64()), (0, vec![2.5]));
    let err = npy::read(&dir.join("fortran.npy")).unwrap_err();
    assert!(err.to_string().contains("Fortran"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}
