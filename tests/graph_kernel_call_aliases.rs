//! A kernel called from `@jit` that stores into a parameter through a local bound to it
//! (`out = Z`, then `out[...] = v`): the parameter counts as written (the call's value
//! includes it), and the run matches NumPy on every device.

mod graph_oracles;

use std::process::Command;

use graph_oracles::{devices, numpy, tessera, text};

const PROGRAM: &str = "from tessera import *

@kernel
def scaled(X: Tensor[\"N\", f32], Y: Tensor[\"N\", f32], Z: Tensor[\"N\", f32]):
    ctx = tile.context()
    out = Z
    alias = out
    for i in tile.parallel(0, N, ctx.BM):
        alias[i:i + ctx.BM] = tile.load(X[i:i + ctx.BM]) * 3.0
        Y[i:i + ctx.BM] = X[i:i + ctx.BM] + 1.0

@jit
def f(x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:
    y, z = scaled(x, zeros((N,), dtype=f32), zeros((N,), dtype=f32))
    return y * z
";

#[test]
fn a_store_through_a_local_alias_is_a_written_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.tsr");
    std::fs::write(&file, PROGRAM).unwrap();
    let o = tessera().args(["lower", file.to_str().unwrap(), "--kernel", "f"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("{callee = \"scaled\", written = [1, 2]}"), "{}", text(&o));
    if !numpy() {
        return;
    }
    for device in devices() {
        let out = dir.path().join(device);
        let o = tessera()
            .args(["run", file.to_str().unwrap(), "--kernel", "f", "--dims", "N=300", "--device", device])
            .args(["--repeat", "1", "--save", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{device}: {}", text(&o));
        let script = "import sys, numpy as np\no = sys.argv[1]\nx = np.load(o + '/x.npy').astype(np.float64)\n\
                      want = (x + 1) * (3 * x)\ngot = np.load(o + '/return.out.npy')\n\
                      assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.max(np.abs(got - want))\n";
        let p = Command::new("python3").args(["-c", script, out.to_str().unwrap()]).output().unwrap();
        assert!(p.status.success(), "{device}: {}", text(&p));
        let wrong = script.replace("want = (x + 1)", "want = (x + 1.01)");
        let p = Command::new("python3").args(["-c", &wrong, out.to_str().unwrap()]).output().unwrap();
        assert!(!p.status.success(), "the oracle accepts a wrong result");
    }
}
