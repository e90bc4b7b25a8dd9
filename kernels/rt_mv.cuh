// Matrix-vector kernels of the CUDA drafter runtime (included by
// kernels/runtime_cuda.cu only). A launch runs a list of tasks (blockIdx.y);
// a task computes y[j][r] = sum over its terms of w_term * dot(W_term[r], x_term[j])
// for nb tokens j sharing the weights, so
//   - q/k/v, router + shared_expert_gate, gate/up of every routed expert of
//     every token and the shared expert are one launch each;
//   - the MoE down projection sums the routed experts and the shared expert
//     with their routing weights inside the kernel (no atomics: the result
//     is the same on every run);
//   - the head keeps, per token, the largest logit as a 64-bit key and
//     publishes it with one atomicMax per block (the argmax fused with the
//     matrix-vector product).
// Weights stream once from HBM with 16-byte loads marked evict-first
// (__ldcs): a lane owns 16 consecutive columns of a row in each 512-column
// band (16 B of FP8, 32 B of BF16, 8 B of NVFP4 + its E4M3 block scale), a
// warp owns R whole rows and keeps U loads in flight per lane, so partial
// sums combine with shuffles only (no shared memory, no block barrier),
// except where S warps share R rows (k_mv's S, one token: see there). FP8 decodes through the
// hardware E4M3 -> half conversion (exact), NVFP4 by placing each nibble's
// bits in a half and one HMUL2 by the block scale per pair (exact: see
// rt_decode16; a shared-memory table before, about twice the instructions
// per weight). Accumulation is float32;
// the order of the sums differs from the CPU reference, hence the tolerance
// the tests state.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/rt_tl.cuh"

#define RT_NMAX 8   // tokens per launch
#define RT_TMAX 17  // terms per task: up to 16 routed experts + the shared expert
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

// ordered float bits << 32 | ~row: the max key is the largest logit, ties to the lower row
__device__ __forceinline__ unsigned long long rt_argmax_key(float v, uint32_t row) {
  uint32_t b = __float_as_uint(v);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((unsigned long long)b << 32) | (0xFFFFFFFFu - row);
}

__device__ __forceinline__ float rt_e2m1(int c) {
  const float m[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = m[c & 7];
  return (c & 8) ? -v : v;
}

__device__ __forceinline__ float rt_e4m3(uint8_t b) {
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
  return __half2float(__half(h));
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

// NVFP4 weights (k, k + 4) of the 8 in word q (element e in bits 4e..4e+3)
// as the half pair value * 2^-14, built from their bits alone: the nibble's
// sign to bit 15, its exponent and mantissa (e1 e0 m) to bits 11..9. A half
// with exponent field e and mantissa m * 512 is 2^(e-15) (1 + m/2) for e > 0
// and m * 2^-15 for e == 0, which is the E2M1 value times 2^-14 in both cases
// (subnormal included), so no table and no per-nibble branch.
template <int K> __device__ __forceinline__ __half2 rt_e2m1x2_biased(uint32_t q) {
  const uint32_t t = q << (12 - 4 * K);
  const uint32_t h = (t & 0x80008000u) | ((t >> 3) & 0x0E000E00u);
  return *reinterpret_cast<const __half2 *>(&h); // (a __half2_raw built from the halves costs a PRMT and a shift)
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
    // w = E2M1 * E4M3 block scale * 2^-14, exact: the product has at most 6
    // significant bits and lies in [2^-24, 6 * 448 * 2^-14], all of which half
    // holds (its lowest bit, 2^-24, is the half subnormal step), so one HMUL2
    // per pair; rt_terms puts the 2^14 back into the term weight (a power of
    // two: the block sums are the unscaled ones times 2^-14, bit for bit,
    // while |w x| stays above float's subnormal range)
    const __half2 s = __half2half2(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)sb, __NV_E4M3)));
    const uint32_t u[2] = {raw[0].x, raw[0].y};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float2 f;
      f = __half22float2(__hmul2(rt_e2m1x2_biased<0>(u[i]), s)), w[8 * i] = f.x, w[8 * i + 4] = f.y;
      f = __half22float2(__hmul2(rt_e2m1x2_biased<1>(u[i]), s)), w[8 * i + 1] = f.x, w[8 * i + 5] = f.y;
      f = __half22float2(__hmul2(rt_e2m1x2_biased<2>(u[i]), s)), w[8 * i + 2] = f.x, w[8 * i + 6] = f.y;
      f = __half22float2(__hmul2(rt_e2m1x2_biased<3>(u[i]), s)), w[8 * i + 3] = f.x, w[8 * i + 7] = f.y;
    }
  }
}

// The terms of a row set (all of one format F and one shape): the lane's
// chunks are (term, band, row) triples, term then band major, issued UU at
// a time so that UU loads are in flight per lane before any is used (BF16
// chunks are two loads: half as many); a task of several terms (the MoE down
// projection: one per routed expert) keeps them in flight across terms.
// UU % R == 0 keeps the row index a compile-time constant, and x (read
// through L1, or shared memory) is loaded once per band and reused for the R
// rows: with one x load per weight chunk the L1 traffic for x was 4 to 8
// times the weight traffic and capped the FP8 head at about 1.5 TB/s.
//
// S > 1 (split over K): the warp takes groups part, part + S, ... of the
// row set's (term, band) groups; k_mv adds the S warps' sums.
template <int F, int NB, int R, int U, int S = 1>
__device__ __forceinline__ void rt_terms(const dlin *Ls, const float *Wt, const float *Wt2, const mv_term *tm,
                                         int nterm, int64_t r0,
                                         int64_t rows, int64_t xs, int nb, int lane,
                                         float (&acc)[R][NB], int part = 0) {
  constexpr int UU = F == 0 ? (U / 2 >= R ? U / 2 : R) : U;
  static_assert(UU % R == 0, "a batch holds whole bands");
  constexpr int B2 = F == 0 ? 4 : F == 1 ? 2 : 1; // bytes per weight, times 2
  const int cols = (int)Ls[0].cols;
  const int lb = (cols + 511) / 512, ng = nterm * lb; // (term, band) groups of R chunks
  // byte offsets of the lane's first chunk in each row (weights, NVFP4
  // block scales; a matrix is under 4 GiB: the session checks), computed
  // once per row set; bit i of rok: row r0 + i exists
  uint32_t wo[R], so[R], rok = 0;
#pragma unroll
  for (int i = 0; i < R; i++) {
    const bool ok = r0 + i < rows;
    const uint32_t r = (uint32_t)(ok ? r0 + i : r0);
    rok |= (uint32_t)ok << i;
    // (a row's bytes first: r * cols * B2 would overflow 32 bits for BF16 matrices of 2 GiB or more)
    wo[i] = r * (uint32_t)(cols * B2 / 2) + lane * 8 * B2, so[i] = r * (uint32_t)(cols / 16) + lane;
  }
  // the warp's groups: all (S == 1), or every S-th from part
  const int ngw = S == 1 ? ng : ng > part ? (ng - part + S - 1) / S : 0;
  int k0 = S == 1 ? 0 : part / lb, b0 = S == 1 ? 0 : part % lb; // the batch's first (term, band)
  for (int g0 = 0; g0 < ngw; g0 += UU / R) {
    uint4 raw[UU][F == 0 ? 2 : 1];
    uint8_t sb[UU];
    int kv[UU / R], bv[UU / R]; // each group's term and band
    {
      int k = k0, b = b0;
#pragma unroll
      for (int v = 0; v < UU / R; v++) {
        kv[v] = k < nterm ? k : nterm - 1, bv[v] = b;
        const bool ok = g0 + v < ngw && b * 512 + lane * 16 < cols;
        const uint8_t *w = Ls[kv[v]].w + (uint64_t)b * 256 * B2, *sc = F == 2 ? Ls[kv[v]].sc + b * 32 : nullptr;
#pragma unroll
        for (int i = 0; i < R; i++)
          if (ok && (rok >> i & 1)) rt_load16<F>(w + wo[i], sc + so[i], raw[v * R + i], &sb[v * R + i]);
        if constexpr (S == 1) {
          if (++b == lb) b = 0, ++k;
        } else {
          for (b += S; b >= lb; b -= lb) ++k;
        }
      }
      k0 = k, b0 = b;
    }
    // the weights are constant: a dense task's first batch is requested
    // before waiting for the kernel before (x comes from it); a no-op wait
    // once waited (and routed tasks waited in k_mv already, but for
    // RT_MV_SEL_EARLY ones)
    if (g0 == 0) rt_wait();
#pragma unroll
    for (int v = 0; v < UU / R; v++) {
      const int k = kv[v], c0 = bv[v] * 512 + lane * 16;
      if (!(g0 + v < ngw && c0 < cols)) continue;
      float xv[NB][16];
#pragma unroll
      for (int j = 0; j < NB; j++) {
        if (j >= nb) continue;
        const float4 *p = reinterpret_cast<const float4 *>(tm[k].x + j * xs + c0);
#pragma unroll
        for (int e4 = 0; e4 < 4; e4++) {
          const float4 x = __ldg(p + e4);
          xv[j][4 * e4] = x.x, xv[j][4 * e4 + 1] = x.y, xv[j][4 * e4 + 2] = x.z, xv[j][4 * e4 + 3] = x.w;
        }
      }
      // the term weight of even and odd rows (the same but in a gate/up pair
      // matrix, whose row sets start even: R is even there); NVFP4: rt_decode16's 2^-14 undone
      const float wt0 = F == 2 ? Wt[k] * 16384.0f : Wt[k], wt1 = F == 2 ? Wt2[k] * 16384.0f : Wt2[k];
#pragma unroll
      for (int i = 0; i < R; i++) {
        if (!(rok >> i & 1)) continue;
        float w[16];
        rt_decode16<F>(raw[v * R + i], sb[v * R + i], w);
#pragma unroll
        for (int j = 0; j < NB; j++) {
          if (j >= nb) continue;
          float s = 0.0f;
#pragma unroll
          for (int e = 0; e < 16; e++) s = fmaf(w[e], xv[j][e], s);
          acc[i][j] = fmaf(i & 1 ? wt1 : wt0, s, acc[i][j]);
        }
      }
    }
  }
}

// A k_mv grid of one row (fg.n > 0): task t's row blocks are blocks
// off[t] .. off[t + 1] - 1, so each task has only the blocks its rows need.
// The grid (row blocks, tasks) covers the largest task for every task: for
// q/k/v (8,192, 512 and 512 rows at 5 rows a warp, 80B shape) 615 blocks of
// which 384 have no rows and still take a block's slot, so the v task's
// blocks became resident only as the first wave left, ~5 us after the others
// (per-block timeline, tests/bench/RESULTS.md, sixteenth round); flat: 231.
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

// blockDim 256 (8 warps, each its own R rows); grid (row blocks, tasks) or flat (fg).
// Every lin's cols % 16 == 0; the terms of a task share one shape. FMT: the format of every term (0 BF16, 1 FP8,
// 2 NVFP4), or 3 for a mix chosen per term (the MoE down projection: NVFP4
// experts + an FP8 shared expert); one format per kernel keeps the register
// count (and so the blocks per SM) of that format alone.
//
// S > 1 (plain y: no argmax, no gate/up pairs, one format; S | R: R = S at
// one token, R = S or 2S for dense products at 2..8 tokens):
// S warps share each set of R rows, each summing every S-th (term, band)
// group, and the first adds the others' sums (from shared memory, in part
// order). A block covers the rows it would without sharing, with each
// warp's weight loads as many, but a band of x loaded by a warp serves R
// rows instead of one: at one row per warp fc and o (K = 4,096) read 4 bytes
// of x per byte of FP8 weights and the routed experts' down (10 terms of
// 512 columns) 7 per byte of NVFP4, which came from L2 (ncu: fc and o 9.7
// us for 8 MB; splitting their rows over warps without sharing x did not
// move them, tests/bench/RESULTS.md).
//
// fl (RT_MV_*): LATE_TRIGGER lets the next launch start only after this one's
// wait, so once it starts every launch before this one is complete;
// SEL_EARLY (a launch after such a one, two or more after the routing) reads
// sel and the routing weights before its wait, from L2 (not L1, which may
// hold an earlier step's), so its routed weights are requested before the
// wait as a dense task's are. H200, 4K batch 1: 140.4 -> 137.6 us a step
// (32K: 205.1 -> 203.0; tests/bench/RESULTS.md, tenth round).
template <int NB, int R, int U, int FMT, int S = 1>
__global__ void __launch_bounds__(256, FMT == 3 || NB > 2 ? 1 : 2)
    k_mv(const dlin *tab, const mv_task *tasks, const int *sel, int fl, mv_flat fg) {
  RT_TL_START();
  static_assert(S == 1 || (FMT != 3 && 8 % S == 0 && R % S == 0), "split rows: one format, S | R");
  constexpr int WB = 8 / S; // row sets a block
  __shared__ float red[S > 1 ? 8 : 1][R][NB];
  __shared__ mv_task T;
  __shared__ dlin Ls[RT_TMAX];
  __shared__ float Wt[RT_TMAX], Wt2[RT_TMAX];
  __shared__ unsigned long long bbest[8][NB];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool early = fl & RT_MV_SEL_EARLY;
  if (!(fl & RT_MV_LATE_TRIGGER)) rt_trigger();
  // this block's task, its index among the task's row blocks and their count
  // (unrolled selects: a parameter indexed at run time would go to local
  // memory); dense FP8/BF16 only: the NVFP4 instances' tasks are of one
  // shape, and the selects cost them registers (spills in three)
  int task = (int)blockIdx.y, bx = (int)blockIdx.x, nbx = (int)gridDim.x;
  if (RT_MV_FLAT(FMT) && fg.n) {
    int lo, hi;
    task = rt_flat_task(fg, bx, lo, hi);
    bx -= lo, nbx = hi - lo;
  }
  rt_task_load(tasks + task, T);
  __syncthreads();
  // a routed term's weights depend on sel and its weight on the routing, so
  // such tasks wait here (unless early); a dense task's table entry and
  // scale are the plan's, and rt_terms requests its first weights before it
  // waits
  bool dep = false;
  for (int k = 0; k < T.nterm; k++) dep = dep || T.t[k].sel_k >= 0 || T.t[k].w != nullptr;
  if (dep && !early) rt_wait();
  if (fl & RT_MV_LATE_TRIGGER) {
    rt_wait(); // (a no-op if waited above)
    rt_trigger();
  }
  if (tid < T.nterm) {
    const mv_term &m = T.t[tid];
    int li = m.lin;
    if (m.sel_k >= 0) {
      const int *sp = sel + T.tok * RT_KST + m.sel_k;
      li += early ? __ldcg(sp) : *sp;
    }
    Ls[tid] = tab[li];
    const float w = m.w ? (early ? __ldcg(m.w) : *m.w) : 1.0f; // the routing weight (1 for a dense term)
    Wt[tid] = w * (Ls[tid].f == 0 ? 1.0f : Ls[tid].s);
    Wt2[tid] = w * (Ls[tid].f == 0 ? 1.0f : Ls[tid].s2);
  }
  if (tid < 8 * NB) bbest[tid / NB][tid % NB] = 0;
  __syncthreads();
  const int64_t rows = Ls[0].rows;
  const int nb = T.nb, nterm = T.nterm;
  unsigned long long mybest[NB];
#pragma unroll
  for (int j = 0; j < NB; j++) mybest[j] = 0;
  const int part = warp % S;
  for (int64_t r0 = ((int64_t)bx * WB + warp / S) * R; r0 < rows; r0 += (int64_t)nbx * WB * R) {
    float acc[R][NB];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int j = 0; j < NB; j++) acc[i][j] = 0.0f;
    if constexpr (FMT != 3) {
      rt_terms<FMT, NB, R, U, S>(Ls, Wt, Wt2, T.t, nterm, r0, rows, T.xs, nb, lane, acc, part);
    } else {
      for (int k = 0; k < nterm; k++) {
        if (Ls[k].f == 1) rt_terms<1, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
        else if (Ls[k].f == 0) rt_terms<0, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
        else rt_terms<2, NB, R, U>(Ls + k, Wt + k, Wt2 + k, T.t + k, 1, r0, rows, T.xs, nb, lane, acc);
      }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int j = 0; j < NB; j++) acc[i][j] = rt_warp_sum(acc[i][j]);
    if constexpr (S > 1) { // the row set's S warps meet at barrier 1 + warp / S (all run the same row sets)
      if (lane == 0 && part)
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
          for (int j = 0; j < NB; j++) red[warp][i][j] = acc[i][j];
      asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / S), "r"(32 * S) : "memory");
      if (lane == 0 && !part)
#pragma unroll
        for (int p = 1; p < S; p++)
#pragma unroll
          for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < NB; j++) acc[i][j] += red[warp + p][i][j];
      asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / S), "r"(32 * S) : "memory"); // red read before rewritten
      if (part) continue;
    }
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < R; i++) {
        const int64_t r = r0 + i;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < NB; j++) {
          if (j >= nb) continue;
          if (T.best) {
            unsigned long long key = rt_argmax_key(acc[i][j], (uint32_t)r);
            mybest[j] = key > mybest[j] ? key : mybest[j];
            if (T.logits) T.logits[j * T.ys + r] = acc[i][j];
          } else if (T.glu) { // (k_swiglu's arithmetic, so the same act)
            if (!(i & 1) && i + 1 < R) T.y[j * T.ys + r / 2] = rt_silu_mul(acc[i][j], acc[i + 1][j]);
          } else {
            T.y[j * T.ys + r] = acc[i][j];
          }
        }
      }
    }
  }
  rt_wait(); // (warps without rows have not waited) nothing below runs before the kernel before is done
  if (T.best) {
    if (lane == 0)
#pragma unroll
      for (int j = 0; j < NB; j++) bbest[warp][j] = mybest[j];
    __syncthreads();
    rt_block_best(bbest, nb, T.best);
  }
  RT_TL_END();
}

// Any shape (cols % 16 != 0 somewhere): warp per row, one element per lane
// per step; the same tasks and results, slower.
__device__ __forceinline__ float rt_elem(const dlin &L, int64_t r, int64_t c) {
  if (L.f == 0) return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t *>(L.w)[r * L.cols + c] << 16);
  if (L.f == 1) return rt_e4m3(L.w[r * L.cols + c]);
  uint8_t byte = L.w[(r * L.cols + c) / 2];
  return rt_e2m1((c & 1) ? byte >> 4 : byte & 15) * rt_e4m3(L.sc[(r * L.cols + c) / 16]);
}

__global__ void __launch_bounds__(256) k_mv_any(const dlin *tab, const mv_task *tasks, const int *sel) {
  RT_TL_START();
  __shared__ mv_task T;
  rt_trigger();
  rt_task_load(tasks + blockIdx.y, T);
  rt_wait();
  __syncthreads();
  const int lane = threadIdx.x & 31;
  int li0 = T.t[0].lin + (T.t[0].sel_k >= 0 ? sel[T.tok * RT_KST + T.t[0].sel_k] : 0);
  const int64_t rows = tab[li0].rows;
  const int pair = T.glu ? 2 : 1; // a gate/up pair matrix: a warp takes both rows of a pair
  for (int64_t r = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * pair; r < rows; r += (int64_t)gridDim.x * 8 * pair) {
    for (int j = 0; j < T.nb; j++) {
      float a0 = 0.0f, a1 = 0.0f; // the pair's rows (one row: a0)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (h >= pair) break;
        float acc = 0.0f;
        for (int k = 0; k < T.nterm; k++) {
          const mv_term &m = T.t[k];
          const dlin L = tab[m.lin + (m.sel_k >= 0 ? sel[T.tok * RT_KST + m.sel_k] : 0)];
          float p = 0.0f;
          for (int64_t c = lane; c < L.cols; c += 32) p += rt_elem(L, r + h, c) * m.x[j * T.xs + c];
          acc += (m.w ? *m.w : 1.0f) * (L.f == 0 ? 1.0f : (r + h) & 1 ? L.s2 : L.s) * p;
        }
        acc = rt_warp_sum(acc);
        if (h) a1 = acc;
        else a0 = acc;
      }
      if (lane == 0) {
        if (T.best) {
          atomicMax(T.best + j, rt_argmax_key(a0, (uint32_t)r));
          if (T.logits) T.logits[j * T.ys + r] = a0;
        } else if (T.glu) {
          T.y[j * T.ys + r / 2] = rt_silu_mul(a0, a1);
        } else {
          T.y[j * T.ys + r] = a0;
        }
      }
    }
  }
  RT_TL_END();
}
