// The bytes alone, as the runtime's kernels read weights (16-byte
// evict-first loads, 8 in flight a thread): shared by the stand-alone
// benchmarks tests/bench/chain_floor.cu and lt_bench.cu (each compiled by
// itself with nvcc; this header beside them).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

// this thread's share of n16 16-byte words at w, 8 loads in flight, folded
// into one word
__device__ __forceinline__ unsigned stream(const uint4 *w, int64_t n16, int64_t skip = 0) {
  const int64_t st = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x + skip * st; // skip: rounds done already
  unsigned a = 0;
  for (; i + 7 * st < n16; i += 8 * st) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = __ldcs(w + i + u * st);
#pragma unroll
    for (int u = 0; u < 8; u++) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += st) {
    const uint4 v = __ldcs(w + i);
    a ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return a;
}
