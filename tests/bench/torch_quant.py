#!/usr/bin/env python3
"""PyTorch implementation of the same NVFP4 / FP8 formulas mtpq implements
(ModelOpt's NVFP4QTensor dynamic path and the float32 FP8 recipe), timed on
the same machine as `mtpq bench-quant`, and written out so mtpq can prove
its bytes equal torch's:

  torch_quant.py --rows R --cols C --out DIR [--iters N]

prints a table (GB/s of BF16 input: CPU 1 thread, CPU all threads, CUDA)
and writes DIR/source.safetensors (X.weight BF16) plus
DIR/reference_{cuda,cpu}.safetensors (NVFP4 as nvfp4.weight*, FP8 as
fp8.weight*), for `mtpq verify-bitexact --requantize --arith cuda|cpu`.
Needs torch and safetensors (the GPU machine has both).
"""
import argparse
import os
import statistics
import time

import torch
from safetensors.torch import save_file

BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def nvfp4(w):
    rows, cols = w.shape
    amax = w.abs().amax().float()
    s2 = amax / 2688.0                       # CUDA: x * RN32(1/2688); CPU: x / 2688
    wb = w.float().view(rows, cols // 16, 16)
    s = wb.abs().amax(-1) / (6.0 * s2)       # true division by a tensor
    s = torch.where(s == 0, torch.ones_like(s), s).clamp(2 ** -9, 448.0)
    q = s.to(torch.float8_e4m3fn)
    y = wb / (q.float() * s2).unsqueeze(-1)
    m = y.abs()
    idx = torch.searchsorted(torch.tensor(BOUNDS, device=w.device), m)
    idx = idx + ((m == 0.75) | (m == 1.75) | (m == 3.5)).to(idx.dtype)
    code = (((y < 0).to(torch.uint8) << 3) | idx.to(torch.uint8)).view(rows, cols)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed, q.view(rows, cols // 16), s2


def fp8(w):
    scale = w.abs().amax().float() / 448.0
    q = (w.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale


def timed(fn, w, iters, cuda):
    for _ in range(2):
        fn(w)
    ts = []
    for _ in range(iters):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(w)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(w)
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    w = (torch.randn(a.rows, a.cols, generator=g) * 0.02).to(torch.bfloat16)
    nbytes = w.numel() * 2
    rows = []
    nthreads = torch.get_num_threads()
    for name, fn in (("nvfp4", nvfp4), ("fp8", fp8)):
        for th in (1, nthreads):
            torch.set_num_threads(th)
            t = timed(fn, w, max(1, a.iters // (2 if th == 1 else 1)), False)
            rows.append((name, "cpu", th, t))
        torch.set_num_threads(nthreads)
        if torch.cuda.is_available():
            wc = w.cuda()
            rows.append((name, "cuda", 0, timed(fn, wc, max(20, a.iters), True)))
    print(f"torch {torch.__version__}: BF16 [{a.rows}, {a.cols}] ({nbytes / 1e6:.1f} MB), median")
    print(f"{'format':8} {'device':6} {'threads':>8} {'ms':>12} {'GB/s in':>12}")
    for name, dev, th, t in rows:
        print(f"{name:8} {dev:6} {th if th else '-':>8} {t * 1e3:12.3f} {nbytes / t / 1e9:12.2f}")
    save_file({"nvfp4.weight": w, "fp8.weight": w.clone()}, os.path.join(a.out, "source.safetensors"))
    devices = [("cpu", w)] + ([("cuda", w.cuda())] if torch.cuda.is_available() else [])
    for dev, x in devices:
        p, s, s2 = nvfp4(x)
        q, sc = fp8(x)
        save_file({"nvfp4.weight": p.cpu().contiguous(), "nvfp4.weight_scale": s.cpu().contiguous(),
                   "nvfp4.weight_scale_2": s2.cpu(), "fp8.weight": q.cpu().contiguous(),
                   "fp8.weight_scale": sc.cpu()},
                  os.path.join(a.out, f"reference_{dev}.safetensors"))


if __name__ == "__main__":
    main()
