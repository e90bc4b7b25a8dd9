// What a chain of dependent kernels costs on this GPU by itself: the floor
// under a kernel-per-operation draft step (issue 7). A step at 4K batch 1 is
// 15 dependent kernels on its critical path; this times graphs of 15 kernels
// that do nothing but stream the bytes the real ones read (the 80B shape's
// sizes), so the gap between the real step and this
// is the kernels' own work and the gap between this and bytes / HBM is the
// chain's. Stand-alone (no mtpq code), built on the GPU machine:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/chain_floor tests/bench/chain_floor.cu
//   timeout 60 /tmp/chain_floor [ROWS]   (ROWS: comma-separated substrings of the rows to run; default all)
//   CHAIN_STEP=stock /tmp/chain_floor [ROWS]   (the stock BF16 drafter's bytes instead of mtpq's)
// Prints one row per variant: us per graph (median of 9 runs of 100 launches).
// The "reading the last's output" rows add what every real kernel does
// after its wait: read the vector the kernel before wrote (from L2), reduce
// it over the block, write one for the next. The "prologue" rows add what
// every real kernel does before it can request its first weights: two
// dependent loads from L2, each followed by a block barrier (k_mv's task
// copy into shared memory, then its weight-table entries). The "filling"
// rows hold each SM's shared memory with 2 blocks (or half of it with 1), so
// that the next kernel's blocks become resident only as these leave, as
// when every block of mtpq's k_mv holds ~120 registers a thread.
//
// The persistent rows run the phases in one kernel whose blocks meet between
// phases instead of at kernel boundaries: k_persist (4 blocks/SM, grid_bar),
// k_persist2 ("megakernel", "flagmega": a block of 1,024 an SM, the next
// phase's first loads before the barrier; grid_bar or flag_bar), k_persist4
// ("streaming megakernel", "ring4": a producer warp streams each SM's share
// of every phase into a shared-memory ring ahead of the barriers; "ring4i":
// the slots dealt to the blocks in turn; "ring4t": a timeline of each
// phase's start and end per block) and k_persist5 ("l2mega": the phases
// ahead prefetched into L2 instead). Run on the H200 on 2026-12-01
// (LEDGER.md, entry 1): every persistent form was slower than the
// kernel chain, because a barrier (or any latency-bound load: a flag's poll,
// the input read after it) queues behind the SM's own weight traffic, and
// behind the L2's when prefetches fill it: 1.5 us a barrier with no bytes
// moving, 3-6 us with the ring full.
//
// The two "48 MB" ring rows time the streamed gate/up of the target at T =
// 4 (k_mvs: 48 MB a launch, 36 KB units, one block an SM) by its copies
// alone, with each block's contiguous share and with the units dealt in
// turn, and print when the blocks end (their figures: LEDGER.md, entry 66).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_stream.cuh"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

// the block's threads meet: all of them, or (named > 0) the first named
// threads at barrier 1 (k_persist4's consumers, its producer warp going on)
__device__ __forceinline__ void block_meet(int named) {
  if (named) asm volatile("bar.sync 1, %0;" ::"r"(named) : "memory");
  else __syncthreads();
}

// what every real kernel does after its wait: each thread reads one of the
// 2,048 floats at in (the block a 256-float slice, from L2) and the block
// (or its named threads) sums them through shared memory
__device__ float input_sum(const float *in, int named = 0) {
  __shared__ float part[32];
  float x = __ldcg(in + (blockIdx.x & 7) * 256 + (threadIdx.x & 255));
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
  block_meet(named);
  float sum = 0.0f;
  for (int k = 0; k < (named ? named : (int)blockDim.x) / 32; k++) sum += part[k];
  return sum;
}

// streams n16 16-byte words of w (8 loads in flight per thread), before
// (before 1) or after griddepcontrol.wait, or (before 2) a thread's first 8
// loads before it and the rest after (what a kernel that keeps its first
// loads in registers can do); sink written only on an impossible value so
// the loads stay. xin, yout (dep, with before 2): after the wait each
// thread reads one float of the 2,048 the kernel before wrote (from L2) and
// the block sums them (a barrier), as every real kernel reads its input and
// most reduce it; blocks 0..7 write the 2,048 the next kernel reads
__global__ void __launch_bounds__(256) k_stream(const uint4 *w, int64_t n16, unsigned *sink, int before,
                                                const float *xin, float *yout, const int *pro) {
  asm volatile("griddepcontrol.launch_dependents;");
  unsigned a = 0;
  if (pro) { // the task, then the table entry it names (both 0 here: w does not move)
    __shared__ int chain[2];
    if (threadIdx.x == 0) chain[0] = __ldcg(pro + (blockIdx.x & 31));
    __syncthreads();
    if (threadIdx.x == 0) chain[1] = __ldcg(pro + 32 + chain[0]);
    __syncthreads();
    w += chain[1];
  }
  if (before == 3) { // the first 8 rounds of the block's share into L2 (nothing comes back to the SM), then
                     // the wait, the input read (not queued behind this kernel's weights), then the stream
    const int64_t st = (int64_t)gridDim.x * blockDim.x;
    if (threadIdx.x == 0)
      for (int k = 0; k < 8; k++) {
        const int64_t i = (int64_t)blockIdx.x * blockDim.x + k * st;
        if (i >= n16) break;
        const int64_t n = n16 - i < (int64_t)blockDim.x ? n16 - i : (int64_t)blockDim.x;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + i), "r"((unsigned)(n * 16)) : "memory");
      }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float sum = xin ? input_sum(xin) : 0.0f;
    a = stream(w, n16);
    if (yout && blockIdx.x < 8) yout[blockIdx.x * 256 + threadIdx.x] = sum * 0.5f + (float)(a & 1);
  } else if (before == 2) {
    const int64_t st = (int64_t)gridDim.x * blockDim.x, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = i + u * st < n16 ? __ldcs(w + i + u * st) : make_uint4(0, 0, 0, 0);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float sum = xin ? input_sum(xin) : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; u++) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    a ^= stream(w, n16, 8);
    if (yout && blockIdx.x < 8) yout[blockIdx.x * 256 + threadIdx.x] = sum * 0.5f + (float)(a & 1);
  } else {
    if (!before) asm volatile("griddepcontrol.wait;" ::: "memory");
    a = stream(w, n16);
    if (before) asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  if (a == 0x9E3779B9u) sink[blockIdx.x & 1023] = a;
}

// a grid-wide barrier for a persistent kernel whose blocks are all resident:
// the last block to arrive resets the count and moves the generation on
__device__ void grid_bar(unsigned *count, volatile unsigned *gen, unsigned nb, int named = 0) {
  block_meet(named);
  if (threadIdx.x == 0) {
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(count, 1u) == nb - 1) {
      *count = 0;
      __threadfence();
      atomicAdd((unsigned *)gen, 1u);
    } else
      while (*gen == g) {
      }
    __threadfence();
  }
  block_meet(named);
}

// A cheaper grid barrier: one counter that only grows (no reset, no
// generation word): thread 0 adds 1 with release semantics after the block
// meets, then polls with acquire loads until the counter reaches target
// (the launch's base + the phases done, times the blocks). One atomic that
// needs no answer and one poll loop, where grid_bar makes three round trips
// (read gen, fence, atomicAdd) before its own. Thread 0 must have no loads of
// its own in flight: its release would wait for them.
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ void flag_bar(unsigned *cnt, unsigned target, int named = 0, int sleep_ns = 0) {
  block_meet(named);
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt) : "memory");
    while ((int)(ld_acquire(cnt) - target) < 0)
      if (sleep_ns) __nanosleep(sleep_ns);
  }
  block_meet(named);
}

// flag_bar's words in the bar buffer (grid_bar's are words 0 and 32): the
// tickets and the counter
#define FB_TICKETS 64
#define FB_COUNT 96

// a block's ticket (taken by one thread at the block's start): the launch's
// number is the ticket / blocks
__device__ __forceinline__ unsigned flag_ticket(unsigned *bar) { return atomicAdd(bar + FB_TICKETS, 1u); }

// the counter value phase p's barrier waits for in this launch: each launch
// moves the counter by (nphase - 1) x blocks
__device__ __forceinline__ unsigned flag_target(unsigned ticket, unsigned nb, int nphase, int p) {
  return ((ticket / nb) * (unsigned)(nphase - 1) + (unsigned)p) * nb;
}

// the same streams as one kernel: phase p reads n16[p] words at buf + off[p],
// a grid barrier between phases (what a persistent step kernel would pay
// instead of kernel boundaries)
__global__ void __launch_bounds__(256) k_persist(const uint8_t *buf, const int64_t *off, const int64_t *n16,
                                                 int nphase, unsigned *bar, unsigned *sink) {
  unsigned a = 0;
  for (int p = 0; p < nphase; p++) {
    a ^= stream(reinterpret_cast<const uint4 *>(buf + off[p]), n16[p]);
    if (p + 1 < nphase) grid_bar(bar, bar + 32, gridDim.x);
  }
  if (a == 0x9E3779B9u) sink[blockIdx.x & 1023] = a;
}

// A megakernel's way through the same phases: one block of 1,024 threads
// per SM (8 loads in flight a thread: 128 KB an SM), a grid barrier of 132
// arrivals between phases, and (pre) each thread's first 8 loads of the next
// phase issued before the barrier, its weights being constant: what a
// kernel boundary cannot do when the SMs are full (the "filling" rows). With
// dep, after each barrier every thread reads one float of the 2,048 the
// phase before wrote (from L2) and the block reduces them.
__global__ void __launch_bounds__(1024, 1) k_persist2(const uint8_t *buf, const int64_t *off, const int64_t *n16,
                                                      int nphase, unsigned *bar, unsigned *sink, int pre,
                                                      float *vec, int flags) {
  unsigned a = 0;
  __shared__ unsigned ticket;
  if (flags) { // the flag barrier's launch number
    if (threadIdx.x == 0) ticket = flag_ticket(bar);
    __syncthreads();
  }
  const int64_t st = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 v[8];
  bool have = false;
  for (int p = 0; p < nphase; p++) {
    const uint4 *w = reinterpret_cast<const uint4 *>(buf + off[p]);
    const int64_t n = n16[p];
    if (!have)
#pragma unroll
      for (int u = 0; u < 8; u++) v[u] = i0 + u * st < n ? __ldcs(w + i0 + u * st) : make_uint4(0, 0, 0, 0);
    if (vec && p > 0) a ^= (unsigned)(input_sum(vec + (p & 1) * 2048) > 1e30f); // the input the phase before wrote
#pragma unroll
    for (int u = 0; u < 8; u++) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    a ^= stream(w, n, 8);
    if (p + 1 < nphase) {
      if (vec && blockIdx.x < 8 && threadIdx.x < 256) vec[((p + 1) & 1) * 2048 + blockIdx.x * 256 + threadIdx.x] = (float)(a & 1);
      have = pre != 0 && !(flags && threadIdx.x < 32); // (flags: warp 0, whose thread 0 releases, keeps none)
      if (have) {
        const uint4 *w2 = reinterpret_cast<const uint4 *>(buf + off[p + 1]);
        const int64_t n2 = n16[p + 1];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = i0 + u * st < n2 ? __ldcs(w2 + i0 + u * st) : make_uint4(0, 0, 0, 0);
      }
      if (flags) flag_bar(bar + FB_COUNT, flag_target(ticket, gridDim.x, nphase, p + 1));
      else grid_bar(bar, bar + 32, gridDim.x);
    }
  }
  if (a == 0x9E3779B9u) sink[blockIdx.x & 1023] = a;
}

// mbarrier and bulk-copy helpers for k_persist4
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
  uint32_t ok = 0;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(smem_u32(b)), "r"(parity)
                 : "memory");
  } while (!ok);
}

__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

#define P4_RING (192 * 1024) // bytes of ring a block
#define P4_MAXSLOTS 48

// A streaming megakernel: one block per SM, 8 consumer warps and a
// producer warp. The producer copies this block's share of every phase,
// phase after phase, into a ring of P4_RING / chunk slots of shared memory
// (cp.async.bulk, evict-first), as far ahead as the ring allows: the weights
// are constant, so nothing waits for the phases' dependencies but the ring's
// space. The consumers read each slot (as a product would) and, after each
// phase, meet the other blocks: sync 0 not at all (what the ring streams by
// itself), 1 grid_bar, 2 flag_bar (3: polling every 100 ns); with dep they
// then read the 2,048 floats the phase before wrote. nphase 1 with all
// bytes in one phase: the ring's streaming rate alone. ilv: a phase's slots dealt to the blocks in turn
// (slot c to block c % blocks, so the chip reads each phase front to back
// together, as a grid-stride loop does) instead of one contiguous share a
// block. tl (not null): %globaltimer at each phase's start and end, per block.
__global__ void __launch_bounds__(288, 1) k_persist4(const uint8_t *buf, const int64_t *off, const int64_t *n16,
                                                     int nphase, unsigned *bar, unsigned *sink, float *vec, int sync,
                                                     int chunk, int ilv, unsigned long long *tl) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[P4_MAXSLOTS], empty[P4_MAXSLOTS];
  __shared__ unsigned ticket;
  const int tid = threadIdx.x, warp = tid >> 5, nslot = P4_RING / chunk, c16 = chunk / 16;
  const unsigned nb = gridDim.x, b = blockIdx.x;
  if (tid == 0) {
    for (int k = 0; k < nslot; k++) mbar_init(&full[k], 1), mbar_init(&empty[k], 8);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    ticket = sync >= 2 ? flag_ticket(bar) : 0;
  }
  __syncthreads();
  if (warp == 8) { // the producer
    if ((tid & 31) == 0) {
      uint64_t pol;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
      int sl = 0;
      uint32_t par = 0; // the empty barriers' phase to wait for, once the ring has gone round
      bool round2 = false;
      for (int p = 0; p < nphase; p++) {
        const int64_t w0 = ilv ? b * (int64_t)c16 : n16[p] * b / nb, w1 = ilv ? n16[p] : n16[p] * (b + 1) / nb;
        const int64_t step = ilv ? (int64_t)nb * c16 : c16;
        for (int64_t w = w0; w < w1; w += step) {
          if (round2) mbar_wait(&empty[sl], par);
          const uint32_t bytes = (uint32_t)((w1 - w < c16 ? w1 - w : c16) * 16);
          mbar_expect(&full[sl], bytes);
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
                       "%2, [%3], %4;" ::"r"(smem_u32(ring + (size_t)sl * chunk)),
                       "l"(buf + off[p] + w * 16), "r"(bytes), "r"(smem_u32(&full[sl])), "l"(pol)
                       : "memory");
          if (++sl == nslot) sl = 0, par ^= round2 ? 1u : 0u, round2 = true;
        }
      }
    }
    return;
  }
  unsigned a = 0;
  int sl = 0;
  uint32_t par = 0;
  for (int p = 0; p < nphase; p++) {
    if (p > 0) {
      if (sync == 1) grid_bar(bar, bar + 32, nb, 256);
      else if (sync >= 2) flag_bar(bar + FB_COUNT, flag_target(ticket, nb, nphase, p), 256, sync == 3 ? 100 : 0);
      if (vec) a ^= (unsigned)(input_sum(vec + (p & 1) * 2048, 256) > 1e30f);
    }
    if (tl && tid == 0) tl[((size_t)b * nphase + p) * 2] = gtimer();
    const int64_t w0 = ilv ? b * (int64_t)c16 : n16[p] * b / nb, w1 = ilv ? n16[p] : n16[p] * (b + 1) / nb;
    const int64_t step = ilv ? (int64_t)nb * c16 : c16;
    for (int64_t w = w0; w < w1; w += step) {
      mbar_wait(&full[sl], par);
      const int nw = (int)(w1 - w < c16 ? w1 - w : c16);
      const uint4 *q = reinterpret_cast<const uint4 *>(ring + (size_t)sl * chunk);
      for (int k = tid; k < nw; k += 256) {
        const uint4 v = q[k];
        a ^= v.x ^ v.y ^ v.z ^ v.w;
      }
      __syncwarp();
      if ((tid & 31) == 0) mbar_arrive(&empty[sl]);
      if (++sl == nslot) sl = 0, par ^= 1u;
    }
    if (vec && p + 1 < nphase && b < 8) vec[((p + 1) & 1) * 2048 + b * 256 + tid] = (float)(a & 1);
    if (tl) {
      block_meet(256);
      if (tid == 0) tl[((size_t)b * nphase + p) * 2 + 1] = gtimer();
    }
  }
  if (a == 0x9E3779B9u) sink[b & 1023] = a;
}

// A megakernel whose weights reach the SMs as ordinary loads from L2: one
// block of 1,024 threads per SM, a flag_bar between phases, and (thread 32)
// bulk L2 prefetches of the phases ahead, up to `window` bytes (chip-wide)
// past the start of the phase being computed. Prefetches return nothing to
// the SM, so a barrier's poll and the input read after it do not queue
// behind the SM's weight traffic, as they do behind k_persist4's ring
// (its timeline: 3-6 us a barrier after a phase with bytes, 1.2-1.3 after
// one without).
// The phases are read grid-stride (the chip front to back together).
__global__ void __launch_bounds__(1024, 1) k_persist5(const uint8_t *buf, const int64_t *off, const int64_t *n16,
                                                      int nphase, unsigned *bar, unsigned *sink, float *vec,
                                                      int64_t window, unsigned long long *tl) {
  __shared__ unsigned ticket;
  const unsigned nb = gridDim.x, b = blockIdx.x;
  const int tid = threadIdx.x;
  if (tid == 0) ticket = flag_ticket(bar);
  __syncthreads();
  int pf_p = 0;         // thread 32: the phase and this block's byte in it that the prefetches have reached
  int64_t pf_b = 0;
  int64_t phase0 = 0;   // thread 32: the chip-wide bytes before the current phase
  unsigned a = 0;
  for (int p = 0; p < nphase; p++) {
    if (p > 0) {
      flag_bar(bar + FB_COUNT, flag_target(ticket, nb, nphase, p));
      if (vec) a ^= (unsigned)(input_sum(vec + (p & 1) * 2048) > 1e30f);
    }
    if (tl && tid == 0) tl[((size_t)b * nphase + p) * 2] = gtimer();
    if (tid == 32 && window > 0) { // prefetch this block's share of what lies within the window
      if (pf_p < p) pf_p = p, pf_b = 0; // (the prefetches fell behind the phases)
      int64_t chip = phase0;       // chip-wide bytes before phase pf_p
      for (int q = p; q < pf_p; q++) chip += n16[q] * 16;
      while (pf_p < nphase && chip < phase0 + window) {
        const int64_t nbytes = n16[pf_p] * 16, lo = nbytes * b / nb / 16 * 16, hi = nbytes * (b + 1) / nb / 16 * 16;
        const int64_t lim = lo + (phase0 + window - chip) / nb / 16 * 16; // this block's part of the window left
        int64_t x = lo + pf_b;
        const int64_t end = hi < lim ? hi : lim;
        for (; x < end; x += 16384) {
          const uint32_t len = (uint32_t)(end - x < 16384 ? end - x : 16384);
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(buf + off[pf_p] + x), "r"(len) : "memory");
        }
        pf_b = x - lo;
        if (x < hi) break; // the window ends inside this phase
        chip += nbytes, pf_p++, pf_b = 0;
      }
    }
    const uint4 *w = reinterpret_cast<const uint4 *>(buf + off[p]);
    a ^= stream(w, n16[p]);
    if (vec && p + 1 < nphase && b < 8 && tid < 256) vec[((p + 1) & 1) * 2048 + b * 256 + tid] = (float)(a & 1);
    if (tid == 32) phase0 += n16[p] * 16;
    if (tl) {
      __syncthreads();
      if (tid == 0) tl[((size_t)b * nphase + p) * 2 + 1] = gtimer();
    }
  }
  if (a == 0x9E3779B9u) sink[b & 1023] = a;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : nullptr; // run the rows whose name contains this
  setvbuf(stdout, nullptr, _IOLBF, 0); // a row that hangs (killed by timeout) keeps the rows before it
  // bytes each kernel of the step's critical path reads (4K, batch 1): prep,
  // fc, norm, q/k/v, attention (float K/V of 4,096 positions), combine, o,
  // residual+norm, router, routing, routed gate/up, down, final norm, head,
  // feedback
  const double MB = 1e6;
  // CHAIN_STEP=stock: the stock BF16 drafter's bytes instead (BF16 linears and
  // routed experts, the full 151,936-row BF16 head; the shared expert, on a
  // side stream in mtpq's step, left out as above)
  const char *which = getenv("CHAIN_STEP");
  const bool stock = which && strcmp(which, "stock") == 0;
  const std::vector<double> step =
      stock ? std::vector<double>{0.004 * MB, 16.78 * MB, 0, 37.75 * MB, 16.78 * MB, 0, 16.78 * MB, 0,
                                  2.10 * MB,  0,          41.94 * MB, 20.97 * MB, 0, 622.3 * MB, 0}
            : std::vector<double>{0.004 * MB, 8.39 * MB, 0, 18.87 * MB, 16.78 * MB, 0, 8.39 * MB, 0,
                                  2.10 * MB,  0,          11.1 * MB, 5.9 * MB, 0, 201.9 * MB, 0};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  double total = 0;
  for (double b : step) total += b;
  uint8_t *buf;
  unsigned *sink;
  CK(cudaMalloc(&buf, (size_t)(total + 64 * step.size())));
  CK(cudaMemset(buf, 1, (size_t)(total + 64 * step.size())));
  CK(cudaMalloc(&sink, 4096));
  float *vec; // two 2,048-float vectors the dep variants pass from kernel to kernel
  CK(cudaMalloc(&vec, 2 * 2048 * sizeof(float)));
  CK(cudaMemset(vec, 0, 2 * 2048 * sizeof(float)));
  unsigned long long *tl; // k_persist4's and k_persist5's timelines: blocks (one an SM) x phases x (start, end)
  CK(cudaMalloc(&tl, (size_t)sms * 64 * 2 * sizeof(unsigned long long))); // (64 phases: d_off's size)
  int *pro; // the prologue rows' task and table words (zeros)
  CK(cudaMalloc(&pro, 64 * sizeof(int)));
  CK(cudaMemset(pro, 0, 64 * sizeof(int)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // HBM read rate of one big stream, for the floor
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct variant {
    const char *name;
    int pdl, before, bytes, head, chain, blocks_per_sm;
    int fused;   // 1: the 6 byte-free kernels (norms, combine, routing, feedback) folded into their neighbours
    int persist; // one persistent kernel, a grid barrier between phases (2: k_persist2, 1 block of 1,024 an SM;
                 // before = its next phase's first loads before the barrier, dep = reading the last's output;
                 // 4: k_persist4, the weights through a ring in shared memory, dep as for 2;
                 // 5: k_persist5, the weights prefetched into L2 ahead of the phases)
    int skip;    // the kernel of step left out (0: none; k > 0: step[k])
    int dep;     // each kernel reads 2,048 floats the one before wrote and reduces them (with before 2)
    int pro;     // each kernel's two dependent loads before its first weight load
    int full;    // KB of (unused) shared memory a block: blocks_per_sm of them fill the SM, so the next
                 // kernel's blocks cannot be resident before these leave (as with mtpq's register-bound k_mv)
    int sync;    // persist 2: 2 = flag_bar instead of grid_bar; persist 4: 0 none, 1 grid_bar, 2 flag_bar,
                 // 3 flag_bar polling every 100 ns
    int chunk;   // persist 4: KB a ring slot
    int one;     // all the bytes as one phase
    int ilv;     // persist 4: slots dealt to the blocks in turn
    int tl;      // persist 4, 5: print the phases' timeline of the last launch
    int window;  // persist 5: MB of L2 prefetch ahead
    int mb;      // persist 4 with one: only the phase's first mb MB (0: all)
  };
  const char *kname[] = {"prep", "fc", "norm", "q/k/v", "attention", "combine", "o", "residual+norm",
                         "router", "routing", "routed gate/up", "down", "final norm", "head", "feedback"};
  const variant vs[] = {
      {"15 empty kernels, no PDL", 0, 0, 0, 1, 1, 8},
      {"15 empty kernels, PDL", 1, 0, 0, 1, 1, 8},
      {"step bytes, loads after wait, no PDL", 0, 0, 1, 1, 1, 8},
      {"step bytes, loads after wait, PDL", 1, 0, 1, 1, 1, 8},
      {"step bytes, loads before wait, PDL", 1, 1, 1, 1, 1, 8},
      {"step bytes, loads after wait, PDL, 2 blocks/SM", 1, 0, 1, 1, 1, 2},
      {"head alone", 1, 0, 1, 1, 0, 8},
      {"chain without the head, loads after wait, PDL", 1, 0, 1, 0, 1, 8},
      {"9 kernels (byte-free ones folded in), after wait, PDL", 1, 0, 1, 1, 1, 8, 1},
      {"9 kernels, loads before wait, PDL", 1, 1, 1, 1, 1, 8, 1},
      {"one persistent kernel, 15 phases, 4 blocks/SM", 0, 0, 1, 1, 1, 4, 0, 1},
      {"one persistent kernel, 9 phases, 4 blocks/SM", 0, 0, 1, 1, 1, 4, 1, 1},
      {"one persistent kernel, 15 phases, no bytes", 0, 0, 0, 1, 1, 4, 0, 1},
      {"step bytes, first 8 loads a thread before wait, PDL", 1, 2, 1, 1, 1, 8},
      {"the same, each reading and reducing the last's output", 1, 2, 1, 1, 1, 8, 0, 0, 0, 1},
      {"15 kernels, no bytes, each reading the last's output", 1, 2, 0, 1, 1, 8, 0, 0, 0, 1},
      {"l2pf: first 8 rounds into L2 before wait, then reading the last's output", 1, 3, 1, 1, 1, 8, 0, 0, 0, 1},
      {"l2pf: first 8 rounds into L2 before wait, no input read", 1, 3, 1, 1, 1, 8},
      {"l2pf: the same, 9 kernels, reading the last's output", 1, 3, 1, 1, 1, 8, 1, 0, 0, 1},
      {"first 8 loads before wait, reading, 9 kernels", 1, 2, 1, 1, 1, 8, 1, 0, 0, 1},
      {"first 8 loads before wait, reading, 2 blocks/SM", 1, 2, 1, 1, 1, 2, 0, 0, 0, 1},
      {"first 8 loads before wait, reading, 9 kernels, 2 blocks/SM", 1, 2, 1, 1, 1, 2, 1, 0, 0, 1},
      {"first 8 loads before wait, reading, 4 blocks/SM", 1, 2, 1, 1, 1, 4, 0, 0, 0, 1},
      {"step bytes, loads before wait, PDL, 2 blocks/SM", 1, 1, 1, 1, 1, 2},
      {"step bytes, prologue, loads after wait, PDL", 1, 0, 1, 1, 1, 8, 0, 0, 0, 0, 1},
      {"step bytes, prologue, loads before wait, PDL", 1, 1, 1, 1, 1, 8, 0, 0, 0, 0, 1},
      {"the same, 2 blocks/SM", 1, 1, 1, 1, 1, 2, 0, 0, 0, 0, 1},
      {"15 kernels, no bytes, prologue, PDL", 1, 1, 0, 1, 1, 8, 0, 0, 0, 0, 1},
      {"megakernel: 1 block/SM x 1024, 15 phases", 0, 0, 1, 1, 1, 1, 0, 2},
      {"megakernel: + next phase's loads before barrier", 0, 1, 1, 1, 1, 1, 0, 2},
      {"megakernel: + each phase reading the last's output", 0, 1, 1, 1, 1, 1, 0, 2, 0, 1},
      {"megakernel: the same, 9 phases", 0, 1, 1, 1, 1, 1, 1, 2, 0, 1},
      {"megakernel: 15 phases, no bytes", 0, 0, 0, 1, 1, 1, 0, 2},
      {"streaming megakernel: weights through a 192 KB ring, 15 phases", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 1, 16},
      {"streaming megakernel: + each phase reading the last's output", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 1, 16},
      {"streaming megakernel: the same, 9 phases", 0, 0, 1, 1, 1, 1, 1, 4, 0, 1, 0, 0, 1, 16},
      {"streaming megakernel: 15 phases, no bytes", 0, 0, 0, 1, 1, 1, 0, 4, 0, 0, 0, 0, 1, 16},
      {"loads after wait, 2 blocks/SM filling the SM", 1, 0, 1, 1, 1, 2, 0, 0, 0, 0, 0, 100},
      {"loads before wait, 2 blocks/SM filling the SM", 1, 1, 1, 1, 1, 2, 0, 0, 0, 0, 0, 100},
      {"loads before wait, 1 block/SM filling half", 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 100},
      {"ring4: all bytes as one phase, 16 KB slots", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 16, 1},
      // the target's routed gate/up at T = 4 on the 80B shape (k_mvs, ledgers 62-63): 48 MB over one block an
      // SM in 36 KB units, each block a contiguous share (as k_mvs) or the units dealt in turn; the timeline
      // shows how far apart the blocks end
      {"ring4: 48 MB as one phase, 36 KB slots (k_mvs at T = 4)", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 36, 1, 0, 1, 0, 48},
      {"ring4i: 48 MB as one phase, 36 KB slots, interleaved", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 36, 1, 1, 1, 0, 48},
      {"ring4: all bytes as one phase, 32 KB slots", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 32, 1},
      {"ring4: head alone, 16 KB slots", 0, 0, 1, 1, 0, 1, 0, 4, 0, 0, 0, 0, 0, 16},
      {"ring4: 15 phases, no barrier, 16 KB", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 16},
      {"ring4: 15 phases, flag_bar, 16 KB", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 2, 16},
      {"ring4: 15 phases, flag_bar, dep, 16 KB", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 2, 16},
      {"ring4: 15 phases, flag_bar, dep, 8 KB", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 2, 8},
      {"ring4: 15 phases, flag_bar, dep, 32 KB", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 2, 32},
      {"ring4: 9 phases, flag_bar, dep, 16 KB", 0, 0, 1, 1, 1, 1, 1, 4, 0, 1, 0, 0, 2, 16},
      {"ring4: 15 phases, flag_bar, no bytes", 0, 0, 0, 1, 1, 1, 0, 4, 0, 0, 0, 0, 2, 16},
      {"ring4i: all bytes as one phase, 16 KB, interleaved", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 16, 1, 1},
      {"ring4i: head alone, 16 KB, interleaved", 0, 0, 1, 1, 0, 1, 0, 4, 0, 0, 0, 0, 0, 16, 0, 1},
      {"ring4i: 15 phases, no barrier, interleaved", 0, 0, 1, 1, 1, 1, 0, 4, 0, 0, 0, 0, 0, 16, 0, 1},
      {"ring4i: 15 phases, flag_bar, dep, interleaved", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 2, 16, 0, 1, 1},
      {"ring4i: 15 phases, flag_bar 100 ns polls, dep, interleaved", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 3, 16, 0, 1},
      {"ring4i: 9 phases, flag_bar, dep, interleaved", 0, 0, 1, 1, 1, 1, 1, 4, 0, 1, 0, 0, 2, 16, 0, 1, 1},
      {"ring4t: 15 phases, flag_bar, dep, contiguous", 0, 0, 1, 1, 1, 1, 0, 4, 0, 1, 0, 0, 2, 16, 0, 0, 1},
      {"ring4t: 15 phases, flag_bar, no bytes", 0, 0, 0, 1, 1, 1, 0, 4, 0, 0, 0, 0, 2, 16, 0, 0, 1},
      {"l2mega: 15 phases, dep, no prefetch", 0, 0, 1, 1, 1, 1, 0, 5, 0, 1, 0, 0, 2, 0, 0, 0, 1, 0},
      {"l2mega: 15 phases, dep, 12 MB ahead", 0, 0, 1, 1, 1, 1, 0, 5, 0, 1, 0, 0, 2, 0, 0, 0, 0, 12},
      {"l2mega: 15 phases, dep, 24 MB ahead", 0, 0, 1, 1, 1, 1, 0, 5, 0, 1, 0, 0, 2, 0, 0, 0, 1, 24},
      {"l2mega: 15 phases, dep, 36 MB ahead", 0, 0, 1, 1, 1, 1, 0, 5, 0, 1, 0, 0, 2, 0, 0, 0, 0, 36},
      {"l2mega: 9 phases, dep, 24 MB ahead", 0, 0, 1, 1, 1, 1, 1, 5, 0, 1, 0, 0, 2, 0, 0, 0, 1, 24},
      {"l2mega: 15 phases, no bytes", 0, 0, 0, 1, 1, 1, 0, 5, 0, 1, 0, 0, 2, 0, 0, 0, 0, 24},
      {"flagmega: 15 phases, no bytes", 0, 0, 0, 1, 1, 1, 0, 2, 0, 0, 0, 0, 2},
      {"flagmega: 15 phases", 0, 0, 1, 1, 1, 1, 0, 2, 0, 0, 0, 0, 2},
      {"flagmega: + next phase's loads before barrier", 0, 1, 1, 1, 1, 1, 0, 2, 0, 0, 0, 0, 2},
      {"flagmega: + each phase reading the last's output", 0, 1, 1, 1, 1, 1, 0, 2, 0, 1, 0, 0, 2},
      {"flagmega: the same, 9 phases", 0, 1, 1, 1, 1, 1, 1, 2, 0, 1, 0, 0, 2},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 1},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 3},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 4},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 6},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 8},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 10},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 11},
      {"", 1, 0, 1, 1, 1, 8, 0, 0, 2},
  };
  unsigned *bar;
  int64_t *d_off, *d_n16;
  CK(cudaMalloc(&bar, 1024)); // grid_bar's words 0 and 32, flag_bar's FB_TICKETS and FB_COUNT
  CK(cudaMemset(bar, 0, 1024));
  CK(cudaMalloc(&d_off, 64 * sizeof(int64_t)));
  CK(cudaMalloc(&d_n16, 64 * sizeof(int64_t)));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_persist, 256, 0));
  CK(cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
  CK(cudaFuncSetAttribute(k_persist4, cudaFuncAttributeMaxDynamicSharedMemorySize, P4_RING));
  printf("%d SMs; %s step bytes %.2f MB\n", sms, stock ? "stock BF16" : "mtpq", total / MB);
  printf("%-50s %10s %10s\n", "variant", "us/graph", "GB/s");
  for (const variant &v : vs) {
    cudaGraph_t gr;
    cudaGraphExec_t ex;
    // the kernels (or phases) of this variant: offset, bytes, index in step
    struct item {
      size_t o;
      double b;
      size_t k;
    };
    std::vector<item> it;
    size_t off = 0;
    double bytes = 0;
    for (size_t k = 0; k < step.size(); k++) {
      const bool is_head = k == 13;
      const size_t o = off;
      off += (size_t)step[k] / 64 * 64 + 64;
      if ((is_head && !v.head) || (!is_head && !v.chain)) continue;
      if (v.fused && step[k] == 0 && k != 0) continue; // k 0 (prep) stays: it starts the step
      if (v.skip && (size_t)v.skip == k) continue;
      it.push_back(item{o, v.bytes ? step[k] : 0, k});
      bytes += it.back().b;
    }
    if (only) { // comma-separated substrings of the rows to run
      bool hit = false;
      for (const char *q = only; *q && !hit;) {
        const char *e = strchr(q, ',');
        const size_t len = e ? (size_t)(e - q) : strlen(q);
        hit = len && std::string(v.name).find(std::string(q, len)) != std::string::npos;
        q += len + (e != nullptr);
      }
      if (!hit) continue;
    }
    if (v.persist) { // the phase table before the capture (no copies while capturing)
      if (v.persist == 1 && occ < v.blocks_per_sm) {
        printf("%-50s (needs %d blocks per SM resident, %d fit)\n", v.name, v.blocks_per_sm, occ);
        continue;
      }
      std::vector<int64_t> h_off, h_n16;
      for (const item &x : it) h_off.push_back((int64_t)x.o), h_n16.push_back((int64_t)(x.b / 16));
      if (v.one) { // one phase from the first item's offset over all the bytes (the gaps between items are < 64 B)
        int64_t n = 0;
        for (int64_t q : h_n16) n += q;
        if (v.mb && n > (int64_t)v.mb * 1000000 / 16) n = (int64_t)v.mb * 1000000 / 16, bytes = (double)n * 16;
        h_off.resize(1), h_n16.assign(1, n);
      }
      CK(cudaMemset(bar, 0, 1024)); // the barriers' counters and tickets start from 0 for each row
      CK(cudaMemcpy(d_off, h_off.data(), h_off.size() * 8, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(d_n16, h_n16.data(), h_n16.size() * 8, cudaMemcpyHostToDevice));
    }
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    if (v.persist == 5)
      k_persist5<<<sms, 1024, 0, s>>>(buf, d_off, d_n16, (int)it.size(), bar, sink, v.dep ? vec : nullptr,
                                      (int64_t)v.window * 1000000, v.tl ? tl : nullptr);
    else if (v.persist == 4)
      k_persist4<<<sms, 288, P4_RING, s>>>(buf, d_off, d_n16, v.one ? 1 : (int)it.size(), bar, sink,
                                           v.dep ? vec : nullptr, v.sync, v.chunk * 1024, v.ilv, v.tl ? tl : nullptr);
    else if (v.persist == 2)
      k_persist2<<<sms, 1024, 0, s>>>(buf, d_off, d_n16, (int)it.size(), bar, sink, v.before, v.dep ? vec : nullptr,
                                        v.sync == 2);
    else if (v.persist)
      k_persist<<<sms * v.blocks_per_sm, 256, 0, s>>>(buf, d_off, d_n16, (int)it.size(), bar, sink);
    else
      for (size_t q = 0; q < it.size(); q++) {
        const item &x = it[q];
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3((unsigned)(sms * v.blocks_per_sm)), cfg.blockDim = dim3(256), cfg.stream = s;
        cfg.attrs = at, cfg.numAttrs = v.pdl && x.k > 0 ? 1 : 0;
        cfg.dynamicSmemBytes = (size_t)v.full * 1024;
        const float *xin = v.dep ? vec + (q & 1) * 2048 : nullptr;
        float *yout = v.dep ? vec + ((q + 1) & 1) * 2048 : nullptr;
        CK(cudaLaunchKernelEx(&cfg, k_stream, (const uint4 *)(buf + x.o), (int64_t)(x.b / 16), sink, v.before, xin,
                              yout, v.pro ? (const int *)pro : nullptr));
      }
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ex, gr, 0));
    for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ex, s));
    std::vector<float> t;
    for (int r = 0; r < 9; r++) {
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < 100; i++) CK(cudaGraphLaunch(ex, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1e3f / 100);
    }
    std::sort(t.begin(), t.end());
    char name[96];
    if (v.skip) // leave-one-out rows: what kernel k adds to the chain is the first row's time less this one
      snprintf(name, sizeof name, "without %s (%.1f MB), after wait, PDL", kname[v.skip], step[v.skip] / MB);
    else
      snprintf(name, sizeof name, "%s", v.name);
    printf("%-50s %10.1f %10.1f\n", name, t[4], bytes > 0 ? bytes / (t[4] * 1e-6) / 1e9 : 0.0);
    if (v.tl) { // the last launch's phases: when the blocks started and ended each (us from the first start)
      const int np = v.one ? 1 : (int)it.size();
      std::vector<unsigned long long> h((size_t)sms * np * 2);
      CK(cudaMemcpy(h.data(), tl, h.size() * 8, cudaMemcpyDeviceToHost));
      unsigned long long t0 = ~0ull;
      for (int b = 0; b < sms; b++) t0 = std::min(t0, h[(size_t)b * np * 2]);
      printf("  phase  MB     start(min..max)   end(min..median..max)   us\n");
      for (int p = 0; p < np; p++) {
        std::vector<double> st, en;
        for (int b = 0; b < sms; b++)
          st.push_back((h[((size_t)b * np + p) * 2] - t0) * 1e-3), en.push_back((h[((size_t)b * np + p) * 2 + 1] - t0) * 1e-3);
        std::sort(st.begin(), st.end()), std::sort(en.begin(), en.end());
        printf("  %2d %-14s %6.2f  %6.2f..%6.2f   %6.2f..%6.2f..%6.2f\n", p, v.one ? "all" : kname[it[p].k],
               (v.one ? bytes : it[p].b) / MB, st.front(), st.back(), en.front(), en[en.size() / 2], en.back());
      }
    }
    CK(cudaGraphExecDestroy(ex));
    CK(cudaGraphDestroy(gr));
  }
  return 0;
}
