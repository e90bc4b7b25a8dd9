// Per-block timeline of a draft step's kernels, for diagnosis only: built
// when MTPQ_TIMELINE is defined (CMake -DMTPQ_CUDA_TIMELINE=ON), empty
// otherwise, so the default kernels are unchanged. Thread 0 of every block
// of every instrumented kernel takes a record when the block starts
// (rt_trigger), when its wait for the kernel before returns (rt_wait) and
// when warp 0 reaches the kernel's end (rt_tl_end): %globaltimer, the launch
// (%gridid) and the SM, and optionally two marks within (RT_TL_MID: where a
// kernel's time after its wait goes). A step graph's kernel node keeps its
// grid id from one replay to the next, so tests/bench/timeline.py splits a
// grid's records into the call's steps by start time.
// The host side is in session.cu and step.cu (MTPQ_CUDA_TL_FILE names the
// CSV file each draft call writes; tests/bench/timeline.py reads it).
#pragma once
#include <stdint.h>

struct rt_tl_rec {
  unsigned long long grid;  // %gridid
  unsigned long long t[5];  // start, wait returned, end, mid 1, mid 2 (%globaltimer, ns; 0: not reached)
  unsigned int block, sm;   // linear block index, %smid
};

#ifdef MTPQ_TIMELINE
// defined once, in session.cu; the timeline build compiles with relocatable
// device code so that every kernel family's file shares them
extern __device__ rt_tl_rec *rt_tl_buf;   // set by the host (cudaMemcpyToSymbol)
extern __device__ unsigned int rt_tl_cap; // records it holds
extern __device__ unsigned int rt_tl_n;   // records taken (the host zeroes it before a call)

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

// whether the block's wait has been recorded (kept here, not read back from its record)
__device__ __forceinline__ unsigned int &rt_tl_waited() {
  __shared__ unsigned int w;
  return w;
}

__device__ __forceinline__ void rt_tl_start() {
  if (threadIdx.x | threadIdx.y | threadIdx.z) return;
  const unsigned int i = atomicAdd(&rt_tl_n, 1u);
  rt_tl_slot() = i < rt_tl_cap ? i : ~0u;
  rt_tl_waited() = 0;
  if (i >= rt_tl_cap) return;
  unsigned long long g;
  unsigned int sm;
  asm volatile("mov.u64 %0, %gridid;" : "=l"(g));
  asm volatile("mov.u32 %0, %smid;" : "=r"(sm));
  rt_tl_rec &r = rt_tl_buf[i];
  r.grid = g, r.t[0] = rt_tl_now(), r.t[1] = r.t[2] = r.t[3] = r.t[4] = 0;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), r.sm = sm;
}

// k: 1 the wait returned (the first time only), 2 the end
__device__ __forceinline__ void rt_tl_mark(int k) {
  if (threadIdx.x | threadIdx.y | threadIdx.z) return;
  const unsigned int i = rt_tl_slot();
  if (i == ~0u || (k == 1 && rt_tl_waited())) return;
  if (k == 1) rt_tl_waited() = 1;
  rt_tl_buf[i].t[k] = rt_tl_now();
}

// mid mark k (1 or 2) once v is computed: the add consumes v, and a warp
// issues in order, so the clock is read only after v's loads or reductions
// have landed (thread 0's v; the argument is not evaluated without
// MTPQ_TIMELINE)
__device__ __forceinline__ void rt_tl_mid(int k, float v) {
  if (threadIdx.x | threadIdx.y | threadIdx.z) return;
  const unsigned int i = rt_tl_slot();
  if (i == ~0u) return;
  unsigned long long t;
  asm volatile("{\n\t.reg .f32 z;\n\tadd.f32 z, %1, 0f00000000;\n\tmov.u64 %0, %%globaltimer;\n\t}" : "=l"(t) : "f"(v) : "memory");
  rt_tl_buf[i].t[2 + k] = t;
}
#define RT_TL_START() rt_tl_start()
#define RT_TL_WAITED() rt_tl_mark(1)
#define RT_TL_END() rt_tl_mark(2)
#define RT_TL_MID(k, v) rt_tl_mid(k, v)
// a value that depends on every element of v (for RT_TL_MID)
template <int N> __device__ __forceinline__ float rt_tl_dep(const float (&v)[N]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; i++) s += v[i];
  return s;
}
#else
#define RT_TL_START() ((void)0)
#define RT_TL_WAITED() ((void)0)
#define RT_TL_END() ((void)0)
#define RT_TL_MID(k, v) ((void)0)
#endif
