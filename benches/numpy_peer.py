"""The NumPy peer of benches/cpu_kernels.rs: prints one JSON object with

- sgemm: f32 C = A @ B at 2048^3 (OpenBLAS, threads from OPENBLAS_NUM_THREADS, which
  the caller sets before NumPy loads), best of several runs;
- copy: a 4096x4096 f32 copy (np.copyto), bandwidth counting bytes read plus written;
- softmax and layernorm over 4096x4096 f32 rows written in NumPy, for reference.

Usage: OPENBLAS_NUM_THREADS=2 python3 benches/numpy_peer.py [--quick]
"""

import json
import os
import sys
import time

import numpy as np


def best_of(fn, runs, clock=time.perf_counter):
    fn()
    best = float("inf")
    for _ in range(runs):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def main():
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(1)
    n = 2048
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    t_gemm = best_of(lambda: np.matmul(a, b, out=c), 3 if quick else 10)
    # CPU time over all threads (process_time), per thread: the run time without
    # preemption on a shared machine (OpenBLAS threads that spin count too).
    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", "1") or 1)
    cpu_gemm = best_of(lambda: np.matmul(a, b, out=c), 3, time.process_time) / threads

    rows = cols = 4096
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    y = np.empty_like(x)
    t_copy = best_of(lambda: np.copyto(y, x), 5 if quick else 40)
    cpu_copy = best_of(lambda: np.copyto(y, x), 10, time.thread_time)

    def softmax():
        m = x.max(axis=1, keepdims=True)
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        np.divide(y, y.sum(axis=1, keepdims=True), out=y)

    gamma = rng.standard_normal(cols, dtype=np.float32)
    beta = rng.standard_normal(cols, dtype=np.float32)

    def layernorm():
        mean = x.mean(axis=1, keepdims=True)
        var = x.var(axis=1, keepdims=True)
        np.subtract(x, mean, out=y)
        np.multiply(y, 1.0 / np.sqrt(var + 1e-5), out=y)
        np.multiply(y, gamma, out=y)
        np.add(y, beta, out=y)

    t_softmax = best_of(softmax, 2 if quick else 5)
    t_layernorm = best_of(layernorm, 2 if quick else 5)
    moved = 2 * x.nbytes
    print(
        json.dumps(
            {
                "threads": int(os.environ.get("OPENBLAS_NUM_THREADS", "0") or 0),
                "numpy": np.__version__,
                "sgemm": {
                    "n": n,
                    "ms": t_gemm * 1e3,
                    "gflops": 2 * n**3 / t_gemm / 1e9,
                    "cpu_ms": cpu_gemm * 1e3,
                    "cpu_gflops": 2 * n**3 / cpu_gemm / 1e9,
                },
                "copy": {
                    "rows": rows,
                    "cols": cols,
                    "ms": t_copy * 1e3,
                    "gbps": moved / t_copy / 1e9,
                    "cpu_ms": cpu_copy * 1e3,
                    "cpu_gbps": moved / cpu_copy / 1e9,
                },
                "softmax": {"ms": t_softmax * 1e3, "gbps": moved / t_softmax / 1e9},
                "layernorm": {"ms": t_layernorm * 1e3, "gbps": moved / t_layernorm / 1e9},
            }
        )
    )


if __name__ == "__main__":
    main()
