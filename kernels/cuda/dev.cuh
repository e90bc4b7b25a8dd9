// Device-side types and helpers shared by the CUDA backend's kernel families
// (kernels/cuda/k_*.cu): the weight table and task lists the products run
// (dlin, mv_task), programmatic dependent launch (rt_trigger, rt_wait), the
// weight formats' decoders, reductions, argmax keys. Header-only device
// code; each kernel itself is defined in exactly one k_*.cu.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "quant/numerics.h"
}
#include "kernels/cuda/timeline.cuh"


#define RT_NMAX 8   // tokens per launch
#define RT_TMAX 17  // terms per task: up to 16 routed experts + the shared expert
#define RT_EMAX 4096 // experts k_route takes (RT_RPT logits a thread, at most 8 warps)
#define RT_KST 64   // stride of the per-token routing arrays
#define RT_MV_LATE_TRIGGER 1 // k_mv's flags (see k_mv)
#define RT_MV_SEL_EARLY 2
#define RT_FLAT 4 // tasks a flat k_mv grid can hold (mv_flat)
#define RT_MV_FLAT(FMT) ((FMT) == 0 || (FMT) == 1) // the k_mv formats that take a flat grid

struct dlin {
  int f; // LIN_BF16 / LIN_FP8 / LIN_NVFP4
  int64_t rows, cols;
  const uint8_t *w;
  const uint8_t *sc;
  float s;
  float s2; // the odd rows' scale: a routed expert's gate/up pair matrix (rows 2i gate i, 2i + 1 up i)
            // has the up projection's there; s for every other matrix
};

struct mv_term {
  int lin;          // index into the weight table
  int sel_k;        // >= 0: lin += sel[tok * RT_KST + sel_k] (the routed expert)
  const float *x;   // input of token 0; token j at x + j * xs
  const float *w;   // device scalar weighting the term (routing weight), or NULL
};

struct mv_task {
  int nterm, nb, tok;
  int64_t xs, ys;
  float *y;                   // y[j * ys + r]; NULL with best
  unsigned long long *best;   // argmax keys per token (the head), or NULL
  float *logits;              // with best: the logits too, or NULL
  int glu;                    // rows are (gate, up) pairs: y[j * ys + r / 2] = silu(gate) * up (even R)
  mv_term t[RT_TMAX];
};

// Programmatic dependent launch (sm_90): every kernel of a step lets the
// next one be scheduled at once (rt_trigger) and waits for its predecessor's
// results (rt_wait) only after the work that needs none of them (task set-up,
// weight and cache loads); both are no-ops for a kernel launched without the
// attribute. Nothing is written to global memory before rt_wait: the
// previous kernel may still be reading it.
__device__ __forceinline__ void rt_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void rt_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  RT_TL_WAITED();
}

// 16 bytes global -> shared without passing through registers (sm_80+),
// in the thread's open group of copies; complete at rt_cp_wait (all) or
// rt_cp_wait_group<N> (all but the N groups committed last)
__device__ __forceinline__ void rt_cp16(void *dst, const void *src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
// the same, or 16 zero bytes (src not read) where ok is false
__device__ __forceinline__ void rt_cp16z(void *dst, const void *src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void rt_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void rt_cp_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
template <int N> __device__ __forceinline__ void rt_cp_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A launch's task into shared memory, a word per thread of the block
// (blockDim 256; a struct copy by one thread went through local memory);
// the caller syncs
__device__ __forceinline__ void rt_task_load(const mv_task *src, mv_task &T) {
  const int *s = reinterpret_cast<const int *>(src);
  int *d = reinterpret_cast<int *>(&T);
  for (int i = threadIdx.x; i < (int)(sizeof(mv_task) / 4); i += 256) d[i] = s[i];
}

// Each of the launch's nb tokens' largest argmax key over the block's 8
// warps' keys (bb, after a barrier), published with one atomicMax (k_mv's
// head path, k_head_mma and k_head_dyn)
template <int NB>
__device__ __forceinline__ void rt_block_best(const unsigned long long (&bb)[8][NB], int nb, unsigned long long *best) {
  const int tid = threadIdx.x;
  if (tid >= nb) return;
  unsigned long long m = 0;
  for (int w = 0; w < 8; w++) m = bb[w][tid] > m ? bb[w][tid] : m;
  if (m) atomicMax(best + tid, m);
}

// silu(g) * u, as k_swiglu computes it (the products' gate/up epilogue uses the same)
__device__ __forceinline__ float rt_silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float rt_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// ordered float bits << 32 | ~row: the max key is the largest logit, ties to the lower row; every NaN, whatever
// its sign bit, is keyed as the largest positive NaN, above +inf, so a NaN anywhere is the max (the target's
// non-finite check, mtpq__target_nonfinite, sees it)
__device__ __forceinline__ unsigned long long rt_argmax_key(float v, uint32_t row) {
  uint32_t b = v != v ? 0x7FFFFFFFu : __float_as_uint(v);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((unsigned long long)b << 32) | (0xFFFFFFFFu - row);
}

// the logit a key was made from (rt_argmax_key's upper half, undone): a NaN's key is above +inf's
__host__ __device__ __forceinline__ float rt_argmax_key_value(unsigned long long k) {
  const uint32_t b = (uint32_t)(k >> 32);
  return mtpq_f32_from_bits(b & 0x80000000u ? b & 0x7FFFFFFFu : ~b);
}

// the E2M1 code c (sign, 2 exponent bits, 1 mantissa bit) as float, built from its bits (a table indexed at
// run time would sit in local memory): 0, 0.5, then (1 + m / 2) 2^(e - 1)
__device__ __forceinline__ float rt_e2m1(int c) {
  const uint32_t u = (uint32_t)c, mag = u & 7u;
  const uint32_t b = mag < 2u ? (mag ? 0x3F000000u : 0u) : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
  return __uint_as_float(b | (u & 8u) << 28);
}

__device__ __forceinline__ float rt_e4m3(uint8_t b) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
  return __half2float(__half(h));
}

// an E4M3 byte (a block scale) as a half pair of itself, exact: the HMUL2 operand of the NVFP4 decode
__device__ __forceinline__ __half2 rt_e4m3_h2dup(uint8_t b) {
  return __half2half2(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
}

__device__ __forceinline__ float2 rt_e4m3x2(uint16_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
  return __half22float2(__half2(h));
}

// The lane's 16 weights at w (16-byte aligned; NVFP4: 8 bytes, and its
// block scale at sc), raw, streamed once (evict-first). The caller computes
// w and sc from offsets fixed per row set (the terms of a task share one
// shape), so a load costs an add, not a 64-bit multiply and divisions.
template <int F>
__device__ __forceinline__ void rt_load16(const uint8_t *w, const uint8_t *sc, uint4 *raw, uint8_t *sb) {
  if (F == 1) { // FP8
    raw[0] = __ldcs(reinterpret_cast<const uint4 *>(w));
  } else if (F == 0) { // BF16
    const uint4 *p = reinterpret_cast<const uint4 *>(w);
    raw[0] = __ldcs(p);
    raw[1] = __ldcs(p + 1);
  } else { // NVFP4
    uint2 v = __ldcs(reinterpret_cast<const uint2 *>(w));
    raw[0] = make_uint4(v.x, v.y, 0, 0);
    *sb = __ldcs(sc);
  }
}

// The 8 NVFP4 weights of word q (element e in bits 4e .. 4e + 3) as E4M3
// codes of the value times 2^-6, built from their bits alone: the nibble's
// sign to bit 7, its exponent and mantissa (e1 e0 m) to bits 4 .. 2, so the
// code's exponent field is e and its mantissa m00: 2^(e-7) (1 + m/2) for
// e > 0 and m 2^-7 for e == 0, the E2M1 value times 2^-6 in both cases
// (subnormal included; never a NaN code). Elements 0, 2, 4, 6 in the bytes
// of ev, 1, 3, 5, 7 in those of od; one conversion (rt_e4m3h2) then makes
// a half pair, no table and no per-nibble branch.
__device__ __forceinline__ void rt_e2m1_e4m3(uint32_t q, uint32_t &ev, uint32_t &od) {
  ev = ((q << 2) & 0x1C1C1C1Cu) | ((q << 4) & 0x80808080u);
  od = ((q >> 2) & 0x1C1C1C1Cu) | (q & 0x80808080u);
}

// bytes 2j, 2j + 1 of v (E4M3 codes) as a half pair, exact
__device__ __forceinline__ __half2 rt_e4m3h2(uint32_t v, int j) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(j ? v >> 16 : v & 0xFFFFu), __NV_E4M3));
}

// the same for bytes 0 and 1 (the low one first) as the f16 pair's bits: an MMA fragment register
__device__ __forceinline__ uint32_t rt_e4m3x2_h2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xFFFF), __NV_E4M3);
  return (uint32_t)h.x | (uint32_t)h.y << 16;
}

// the two BF16 values of a 32-bit word (element 0 in the low half), widened
// (BF16 weights here, the BF16 K/V cache rows in k_attn)
__device__ __forceinline__ float2 rt_bf16x2(uint32_t u) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
}

template <int F>
__device__ __forceinline__ void rt_decode16(const uint4 *raw, uint8_t sb, float *w) {
  if (F == 1) {
    const uint32_t u[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float2 a = rt_e4m3x2((uint16_t)(u[i] & 0xFFFF)), b = rt_e4m3x2((uint16_t)(u[i] >> 16));
      w[4 * i] = a.x, w[4 * i + 1] = a.y, w[4 * i + 2] = b.x, w[4 * i + 3] = b.y;
    }
  } else if (F == 0) {
    const uint32_t u[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const float2 f = rt_bf16x2(u[i]);
      w[2 * i] = f.x, w[2 * i + 1] = f.y;
    }
  } else {
    // w = E2M1 * E4M3 block scale * 2^-6, exact: the product is a multiple
    // of 2^-16 (E2M1 of 2^-1, the scale of 2^-9) below 6 * 448 * 2^-6 = 42,
    // which half holds (its subnormal step is 2^-24), so one HMUL2 per pair;
    // rt_terms puts the 2^6 back into the term weight (a power of two: the
    // block sums are the unscaled ones times 2^-6, bit for bit, while |w x|
    // stays above float's subnormal range)
    const __half2 s = rt_e4m3_h2dup(sb);
    const uint32_t u[2] = {raw[0].x, raw[0].y};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      uint32_t ev, od;
      rt_e2m1_e4m3(u[i], ev, od);
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const float2 fe = __half22float2(__hmul2(rt_e4m3h2(ev, j), s)), fo = __half22float2(__hmul2(rt_e4m3h2(od, j), s));
        w[8 * i + 4 * j] = fe.x, w[8 * i + 4 * j + 2] = fe.y, w[8 * i + 4 * j + 1] = fo.x, w[8 * i + 4 * j + 3] = fo.y;
      }
    }
  }
}

// x[0..15] from p (16-byte aligned) through the read-only path: a lane's 16 columns of a band
__device__ __forceinline__ void rt_ld_x16(const float *p, float (&x)[16]) {
  const float4 *q = reinterpret_cast<const float4 *>(p);
#pragma unroll
  for (int e4 = 0; e4 < 4; e4++) {
    const float4 v = __ldg(q + e4);
    x[4 * e4] = v.x, x[4 * e4 + 1] = v.y, x[4 * e4 + 2] = v.z, x[4 * e4 + 3] = v.w;
  }
}

// a lane's 16 decoded weights times its 16 x, summed in column order (k_mv's partial sum)
__device__ __forceinline__ float rt_dot16(const float (&w)[16], const float (&x)[16]) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 16; e++) s = fmaf(w[e], x[e], s);
  return s;
}

// A k_mv grid of one row (fg.n > 0): task t's row blocks are blocks
// off[t] .. off[t + 1] - 1, so each task has only the blocks its rows need.
// The grid (row blocks, tasks) covers the largest task for every task: for
// q/k/v of the 80B shape (8,192, 512 and 512 rows) most of its blocks have
// no rows and still take a block's slot, so the last task's blocks became
// resident only as the first wave left (ledger 5). Tasks of unequal rows
// that fit one wave at their own block counts run flat (q/k/v, the router
// with the shared expert's gate).
struct mv_flat {
  int n;                 // tasks in the flat grid; 0: the (row blocks, tasks) grid
  int off[RT_FLAT + 1];  // off[n]: the grid's blocks
};

// The task of a flat grid's block b (fg.n > 0) and its row blocks' range lo
// .. hi - 1, as unrolled selects: a parameter indexed at run time would go
// to local memory (k_mv, and k_dmma's grid rows)
__device__ __forceinline__ int rt_flat_task(const mv_flat &fg, int b, int &lo, int &hi) {
  int task = 0;
  lo = 0, hi = fg.off[1];
#pragma unroll
  for (int i = 1; i < RT_FLAT; i++)
    if (i < fg.n && b >= fg.off[i]) task = i, lo = fg.off[i], hi = fg.off[i + 1];
  return task;
}

// max (op 0) or sum (op 1) of v over the block's nw <= 8 warps, returned to
// every thread; sh: 9 floats of shared memory. A butterfly within each warp,
// then one over the warps' partials (the missing ones the identity) in warp
// 0, published through sh[8]; nw == 1: the warp's butterfly alone, no barrier.
__device__ __forceinline__ float rt_block_reduce(float v, int op, int nw, float *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = op ? v + u : fmaxf(v, u);
  }
  if (nw == 1) return v;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < nw ? sh[threadIdx.x] : op ? 0.0f : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) {
      const float u = __shfl_xor_sync(0xFFFFFFFFu, t, o);
      t = op ? t + u : fmaxf(t, u);
    }
    if (threadIdx.x == 0) sh[8] = t;
  }
  __syncthreads();
  return sh[8];
}

static __device__ float rt_block_sum(float v) { // blockDim.x == 256
  __shared__ float sh[9];
  return rt_block_reduce(v, 1, 8, sh);
}

static __device__ float rt_block_max(float v) { // blockDim.x == 256
  __shared__ float sh[9];
  return rt_block_reduce(v, 0, 8, sh);
}

// bytes of a matrix's weights (NVFP4: without its block scales)
__host__ __device__ __forceinline__ int64_t rt_lin_bytes(const dlin &L) {
  return L.f == 0 ? L.rows * L.cols * 2 : L.f == 1 ? L.rows * L.cols : L.rows * L.cols / 2;
}

// the largest 64-bit key over a warp (every lane gets it): the high words'
// maximum, then the low words' among the lanes holding that high word
__device__ __forceinline__ unsigned long long rt_warp_max_key(unsigned long long k) {
  const unsigned hi = __reduce_max_sync(0xFFFFFFFFu, (unsigned)(k >> 32));
  const unsigned lo = __reduce_max_sync(0xFFFFFFFFu, (unsigned)(k >> 32) == hi ? (unsigned)k : 0u);
  return (unsigned long long)hi << 32 | lo;
}

#define RT_CS 32 // cached positions per attention block

// Shared memory of k_attn, in floats: query heads, (RING 2 at G = 8, D =
// 256: the 8 warps' partial scores, which otherwise meet in the query heads'
// place), the split's K and V rows in BF16 as cached (each row padded by 8
// values, 16 bytes, so that 8 lanes reading 8 rows at one column hit
// distinct banks), scores, a warp's float row (this launch's keys, normed
// and roped before they are rounded), (RING 2: the running maxima, sums,
// factors and outputs, and the keys' norm constants: rt_head_consts' 16 + 2
// x 8 floats a lane, 1,024)
__host__ __device__ inline int64_t rt_attn_smem(int G, int D, int ring) {
  return (int64_t)G * D + (ring && G == 8 && D == 256 ? 2048 : 0) + (int64_t)RT_CS * (D + 8) +
         (int64_t)G * RT_CS + 8 * (int64_t)D + (ring ? (int64_t)G * D + 4 * G + 1024 : 0);
}


// a row element as float: float as is, a BF16 value (its 16 bits) widened
__device__ __forceinline__ float rt_f32(float x) { return x; }
__device__ __forceinline__ float rt_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

#define RT_NQ 32 // elements per thread a norm keeps in registers (n <= 256 * RT_NQ)
