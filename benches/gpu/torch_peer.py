"""The GPU peers of Tessera's acceptance benchmarks, timed the same way as `tessera run`
times a kernel (CUDA events around each launch, median after warm-up): cuBLAS through
torch.matmul for a bf16 GEMM, cuBLASLt through torch._scaled_mm for an e4m3 GEMM, and
PyTorch's scaled_dot_product_attention (its flash
backend on Hopper) for causal attention. Prints one JSON object.

    python3 benches/gpu/torch_peer.py [--gemm 4096] [--bh 32 --s 4096 --d 128]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def time_ms(fn, warmup=10, repeat=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gemm", type=int, default=4096)
    p.add_argument("--bh", type=int, default=32)
    p.add_argument("--s", type=int, default=4096)
    p.add_argument("--d", type=int, default=128)
    a = p.parse_args()
    torch.manual_seed(0)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    n = a.gemm
    A = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    med, mn = time_ms(lambda: torch.matmul(A, B))
    flops = 2.0 * n * n * n
    out["gemm_bf16"] = {"m": n, "n": n, "k": n, "median_ms": med, "min_ms": mn, "tflops": flops / med / 1e9}
    # Tessera's gemm writes an f32 C: cuBLAS with an f32 result too, where torch offers it.
    try:
        med32, mn32 = time_ms(lambda: torch.mm(A, B, out_dtype=torch.float32))
        out["gemm_bf16_f32_out"] = {"median_ms": med32, "min_ms": mn32, "tflops": flops / med32 / 1e9}
    except (TypeError, RuntimeError) as e:
        out["gemm_bf16_f32_out"] = {"error": str(e)[:200]}

    # FP8 (e4m3) GEMM through cuBLASLt, B column-major as it requires, bf16 out, with
    # cuBLAS's own promotion of the tensor cores' fp8 sums (use_fast_accum=False), the
    # peer of examples/fp8_gemm.tsr.
    try:
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        fp8 = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=False)
        med8, mn8 = time_ms(fp8)
        out["gemm_fp8_e4m3"] = {"median_ms": med8, "min_ms": mn8, "tflops": flops / med8 / 1e9}
    except (AttributeError, TypeError, RuntimeError) as e:
        out["gemm_fp8_e4m3"] = {"error": str(e)[:200]}

    # B*H heads of length S: batch 4 x 8 heads when B*H = 32.
    heads = 8 if a.bh % 8 == 0 else 1
    batch = a.bh // heads
    q = torch.randn(batch, heads, a.s, a.d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    v = torch.randn_like(q)
    med, mn = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # Causal: half of the S x S score matrix; two matmuls of 2*S*S*D each.
    aflops = 4.0 * a.bh * a.s * a.s * a.d / 2
    out["sdpa_causal_bf16"] = {"bh": a.bh, "s": a.s, "d": a.d, "median_ms": med, "min_ms": mn, "tflops": aflops / med / 1e9}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
