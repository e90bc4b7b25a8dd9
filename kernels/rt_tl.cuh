// Per-block timeline of a draft step's kernels, for diagnosis only: built
// when MTPQ_TIMELINE is defined (CMake -DMTPQ_CUDA_TIMELINE=ON), empty
// otherwise, so the default kernels are unchanged. Thread 0 of every block
// of every instrumented kernel takes a record when the block starts
// (rt_trigger), when its wait for the kernel before returns (rt_wait) and
// when warp 0 reaches the kernel's end (rt_tl_end): %globaltimer, the launch
// (%gridid) and the SM. A step graph's kernel node keeps its grid id from
// one replay to the next, so tests/bench/timeline.py splits a grid's
// records into the call's steps by start time. The wait's record reads the
// record back first (one L2 round trip more after every wait).
// Included by kernels/rt_mv.cuh only; the host side is in runtime_cuda.cu
// (MTPQ_CUDA_TL_FILE).
#pragma once
#include <stdint.h>

struct rt_tl_rec {
  unsigned long long grid;  // %gridid
  unsigned long long t[3];  // start, wait returned, end (%globaltimer, ns; 0: not reached)
  unsigned int block, sm;   // linear block index, %smid
};

#ifdef MTPQ_TIMELINE
__device__ rt_tl_rec *rt_tl_buf;   // set by the host (cudaMemcpyToSymbol)
__device__ unsigned int rt_tl_cap; // records it holds
__device__ unsigned int rt_tl_n;   // records taken (the host zeroes it before a call)

__device__ __forceinline__ unsigned long long rt_tl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// the block's record (shared by its threads; ~0u: none, the buffer full)
__device__ __forceinline__ unsigned int &rt_tl_slot() {
  __shared__ unsigned int slot;
  return slot;
}

__device__ __forceinline__ void rt_tl_start() {
  if (threadIdx.x | threadIdx.y | threadIdx.z) return;
  const unsigned int i = atomicAdd(&rt_tl_n, 1u);
  rt_tl_slot() = i < rt_tl_cap ? i : ~0u;
  if (i >= rt_tl_cap) return;
  unsigned long long g;
  unsigned int sm;
  asm volatile("mov.u64 %0, %gridid;" : "=l"(g));
  asm volatile("mov.u32 %0, %smid;" : "=r"(sm));
  rt_tl_rec &r = rt_tl_buf[i];
  r.grid = g, r.t[0] = rt_tl_now(), r.t[1] = r.t[2] = 0;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), r.sm = sm;
}

// k: 1 the wait returned (the first time only), 2 the end
__device__ __forceinline__ void rt_tl_mark(int k) {
  if (threadIdx.x | threadIdx.y | threadIdx.z) return;
  const unsigned int i = rt_tl_slot();
  if (i == ~0u || (k == 1 && rt_tl_buf[i].t[1])) return;
  rt_tl_buf[i].t[k] = rt_tl_now();
}
#define RT_TL_START() rt_tl_start()
#define RT_TL_WAITED() rt_tl_mark(1)
#define RT_TL_END() rt_tl_mark(2)
#else
#define RT_TL_START() ((void)0)
#define RT_TL_WAITED() ((void)0)
#define RT_TL_END() ((void)0)
#endif
