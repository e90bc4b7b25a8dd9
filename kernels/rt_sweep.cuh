// One grid-stride read of a device buffer, shared by kernels/hbm.cu (the HBM
// read bandwidth bench-step's floor uses) and kernels/runtime_cuda.cu (the
// L2 flush before bench-step's timed calls): the two differ only in how the
// loads treat L2.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

// n 16-byte words at p. EF: evict-first (__ldcs), as the runtime streams its
// weights; else ordinary loads, which replace what L2 holds. The store into
// sink never happens in practice; it keeps the loads.
template <bool EF> static __global__ void k_sweep(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = EF ? __ldcs(p + i) : p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}
