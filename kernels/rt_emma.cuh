// The routed experts' NVFP4 products (one token a task: gate/up row pairs
// with SwiGLU, and the down projection summing the chosen experts) on
// tensor cores; included by kernels/runtime_cuda.cu after rt_head.cuh.
//
// Why: k_mv's NVFP4 path is bound by its decode and FMA instructions
// (kernels/runtime_cuda.cu, fp4r): per pair of weights a HMUL2, two
// conversions to float and two FFMAs. Here a pair is a HMUL2 (the same exact
// E2M1 x E4M3 x 2^-14 half pair, rt_decode16) that goes straight into an
// f16 MMA, which takes 256 weights a warp-instruction.
//
// Layout (PTX m16n8k16, f16): lane (g, t) of a warp loads, for its tile's
// rows g and g + 8 and each 64-column band b, the 16 columns c = 64 b + 16 t
// .. c + 15 (8 bytes, words w0, w1; element e of a word in bits 4e..4e+3)
// and their block scale. MMA j of the band takes word j / 2's elements
// (K, K + 4) in k slots (2t, 2t + 1) and (K + 1, K + 5) in (2t + 8, 2t + 9),
// K = 2 (j % 2): the pairs rt_e2m1x2_biased builds. A dot product does not
// care which column a k slot stands for, so x's pieces are stored permuted
// within each group of 8 columns (position p holds column RT_EM_PERM(p): 0,
// 4, 1, 5, 2, 6, 3, 7), and B word i of the lane's 16 halves is then what
// MMA i / 2 needs, as in rt_head_band.
//
// Exactness as in rt_head.cuh: the half pairs are exact, x is three f16
// pieces of x * 2^s (s per task, from the largest |x| over its terms), each
// product exact in the f32 accumulator. A task of several terms (the down:
// one per chosen expert) folds each term's weight (routing weight x global
// scale x 2^14) into its x before the split, so that the terms share one
// accumulator: one float rounding per element more than k_mv, and the
// order of the sums is the tensor core's; hence the gpu tests' tolerance.
#pragma once
#include "kernels/rt_head.cuh"

#define RT_EM_PERM(p) (((p) >> 1) | (((p) & 1) << 2)) // stored position p -> column within its group of 8

// The band's four A fragments from the lane's rows g (wa, scale sa) and g +
// 8 (wb, sb), times B (the lane's 16 halves of the term's plane at the
// band: plane < 0 none) into acc
__device__ __forceinline__ void rt_em_band(uint2 wa, uint2 wb, uint8_t sa, uint8_t sb, const __half *pl,
                                           float (&acc)[4]) {
  const __half2 ha = __half2half2(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)sa, __NV_E4M3)));
  const __half2 hb = __half2half2(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)sb, __NV_E4M3)));
  uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
  if (pl) q0 = reinterpret_cast<const uint4 *>(pl)[0], q1 = reinterpret_cast<const uint4 *>(pl)[1];
  const uint32_t xb[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  const uint32_t ua[2] = {wa.x, wa.y}, ub[2] = {wb.x, wb.y};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const int w = j >> 1;
    __half2 a0, a1, a2, a3;
    if (j & 1) {
      a0 = __hmul2(rt_e2m1x2_biased<2>(ua[w]), ha), a1 = __hmul2(rt_e2m1x2_biased<2>(ub[w]), hb);
      a2 = __hmul2(rt_e2m1x2_biased<3>(ua[w]), ha), a3 = __hmul2(rt_e2m1x2_biased<3>(ub[w]), hb);
    } else {
      a0 = __hmul2(rt_e2m1x2_biased<0>(ua[w]), ha), a1 = __hmul2(rt_e2m1x2_biased<0>(ub[w]), hb);
      a2 = __hmul2(rt_e2m1x2_biased<1>(ua[w]), ha), a3 = __hmul2(rt_e2m1x2_biased<1>(ub[w]), hb);
    }
    rt_mma16816<false>(acc, *reinterpret_cast<uint32_t *>(&a0), *reinterpret_cast<uint32_t *>(&a1),
                       *reinterpret_cast<uint32_t *>(&a2), *reinterpret_cast<uint32_t *>(&a3), xb[2 * j],
                       xb[2 * j + 1]);
  }
}

// blockDim 256: 8 / WT tiles of 16 rows of one task (blockIdx.y), WT warps
// a tile, each summing every WT-th (term, band) group; grid (ceil(rows /
// (16 * 8 / WT)), tasks). Tasks of one token (nb 1), NVFP4 terms of one
// shape, cols % 64 == 0; dynamic shared memory: nterm x 3 x (cols + 16)
// halves (each term's pieces). fl: k_mv's RT_MV_* flags, with its meaning.
template <int WT>
__global__ void __launch_bounds__(256, 2) k_emma(const dlin *tab, const mv_task *tasks, const int *sel, int fl) {
  RT_TL_START();
  constexpr int U = 8; // groups a batch of loads: 8 x (16 + 2) bytes a lane
  extern __shared__ __align__(16) unsigned char rt_emsm[];
  __half *pc = reinterpret_cast<__half *>(rt_emsm);
  __shared__ mv_task T;
  __shared__ dlin Ls[RT_TMAX];
  __shared__ float Wt[RT_TMAX], Wt2[RT_TMAX], fsh[9], red[8][16];
  __shared__ int sexp;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const bool early = fl & RT_MV_SEL_EARLY;
  if (!(fl & RT_MV_LATE_TRIGGER)) rt_trigger();
  rt_task_load(tasks + blockIdx.y, T);
  __syncthreads();
  bool dep = false;
  for (int k = 0; k < T.nterm; k++) dep = dep || T.t[k].sel_k >= 0 || T.t[k].w != nullptr;
  if (dep && !early) rt_wait();
  if (fl & RT_MV_LATE_TRIGGER) {
    rt_wait();
    rt_trigger();
  }
  if (tid < T.nterm) { // (k_mv's)
    const mv_term &m = T.t[tid];
    int li = m.lin;
    if (m.sel_k >= 0) {
      const int *sp = sel + T.tok * RT_KST + m.sel_k;
      li += early ? __ldcg(sp) : *sp;
    }
    Ls[tid] = tab[li];
    const float w = m.w ? (early ? __ldcg(m.w) : *m.w) : 1.0f;
    Wt[tid] = w * Ls[tid].s * 16384.0f, Wt2[tid] = w * Ls[tid].s2 * 16384.0f; // (rt_decode16's 2^-14 undone)
  }
  __syncthreads();
  const int nterm = T.nterm, cols = (int)Ls[0].cols, lb = cols / 64, ng = nterm * lb, ps = cols + 16;
  const int64_t rows = Ls[0].rows;
  const bool fold = !T.glu; // several terms: each term's weight folded into its x
  const int part = warp % WT;
  const int64_t tl = (int64_t)blockIdx.x * (8 / WT) + warp / WT, r = tl * 16 + g;
  const uint32_t rowb = (uint32_t)cols / 2, rows_sc = (uint32_t)cols / 16;
  // the warp's first batch of weights, requested before x is ready
  uint2 wa[U], wb[U];
  uint8_t sa[U], sb[U];
  int gk[U];
  auto load = [&](int g0) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int q = g0 + u * WT; // the group: term q / lb, band q % lb
      gk[u] = q;
      wa[u] = wb[u] = make_uint2(0, 0), sa[u] = sb[u] = 0;
      if (q >= ng) continue;
      const dlin &L = Ls[q / lb];
      const uint32_t c = (uint32_t)(q % lb) * 64 + t * 16;
      if (r < rows) wa[u] = __ldcs(reinterpret_cast<const uint2 *>(L.w + (uint32_t)r * rowb + c / 2)),
                    sa[u] = __ldcs(L.sc + (uint32_t)r * rows_sc + c / 16);
      if (r + 8 < rows) wb[u] = __ldcs(reinterpret_cast<const uint2 *>(L.w + (uint32_t)(r + 8) * rowb + c / 2)),
                        sb[u] = __ldcs(L.sc + (uint32_t)(r + 8) * rows_sc + c / 16);
    }
  };
  load(part);
  rt_wait(); // (a no-op once waited) x comes from the kernel before
  // x of every term as three pieces of x * 2^s (permuted in groups of 8)
  float m = 0.0f;
  for (int i = tid; i < nterm * cols; i += 256) {
    const int k = i / cols;
    const float v = __ldcg(T.t[k].x + (i - k * cols)) * (fold ? Wt[k] : 1.0f);
    m = fmaxf(m, fabsf(v));
  }
  m = rt_block_reduce(m, 0, 8, fsh);
  if (tid == 0) sexp = m > 0.0f ? 14 - ilogbf(m) : 0;
  __syncthreads();
  const int s = sexp;
  for (int i = tid; i < nterm * cols; i += 256) {
    const int k = i / cols, p = i - k * cols, c = (p & ~7) | RT_EM_PERM(p & 7);
    const float v = __ldcg(T.t[k].x + c) * (fold ? Wt[k] : 1.0f);
    __half *q = pc + 3 * k * ps;
    rt_split3<__half>(ldexpf(v, s), q[p], q[ps + p], q[2 * ps + p]);
  }
  __syncthreads();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int g0 = part; g0 < ng; g0 += U * WT) {
    if (g0 != part) load(g0);
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int q = gk[u];
      if (q >= ng) continue;
      const int k = q / lb;
      rt_em_band(wa[u], wb[u], sa[u], sb[u], g < 3 ? pc + (3 * k + g) * ps + (q % lb) * 64 + t * 16 : nullptr, acc);
    }
  }
  float s0, s8; // rows g and g + 8 in lane (g, 0)
  rt_head_rowsums(acc, t, s0, s8);
  if (WT > 1) { // the tile's WT warps meet: the first adds the others' sums in part order
    if (t == 0 && part) red[warp][g] = s0, red[warp][g + 8] = s8;
    __syncthreads();
    if (t == 0 && !part)
      for (int p = 1; p < WT; p++) s0 += red[warp + p][g], s8 += red[warp + p][g + 8];
  }
  if (!part) {
    const float post = ldexpf(1.0f, -s);
    // row parity = g's (tiles start even): gate rows even, up rows odd in a pair matrix
    const float v0 = s0 * post * (fold ? 1.0f : (g & 1 ? Wt2[0] : Wt[0]));
    const float v8 = s8 * post * (fold ? 1.0f : (g & 1 ? Wt2[0] : Wt[0]));
    const float u0 = __shfl_down_sync(0xFFFFFFFFu, v0, 4), u8 = __shfl_down_sync(0xFFFFFFFFu, v8, 4); // row + 1
    if (t == 0) {
      if (T.glu) {
        if (!(g & 1) && r < rows) T.y[r / 2] = rt_silu_mul(v0, u0);
        if (!(g & 1) && r + 8 < rows) T.y[(r + 8) / 2] = rt_silu_mul(v8, u8);
      } else {
        if (r < rows) T.y[r] = v0;
        if (r + 8 < rows) T.y[r + 8] = v8;
      }
    }
  }
  RT_TL_END();
}
