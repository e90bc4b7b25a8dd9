// Tensor-core building blocks shared by the head (kernels/rt_head.cuh; the
// dense products at 2..8 tokens, kernels/rt_dmma.cuh, use them through it)
// and the attention (kernels/rt_ops.cuh, k_attn's MMA path): the m16n8k16
// MMA, the three-piece split that carries a float exactly in 16-bit halves
// (and rt_split_p's two-piece f16 form, for FP8 products at 8 tokens), and
// ldmatrix. Included by rt_head.cuh, rt_ops.cuh and k_mvs.cu (the streamed
// experts' gate/up) only.
#pragma once
#include "kernels/cuda/dev.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

// D += A B, m16n8k16, f32 accumulate; BF: bf16 operands, else f16
template <bool BF>
__device__ __forceinline__ void rt_mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (BF)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// v as three pieces of the half type H (hi + mid + lo), each what is left rounded to nearest
template <typename H> __device__ __forceinline__ void rt_split3(float v, H &hi, H &mid, H &lo) {
  if constexpr (std::is_same<H, __half>::value) {
    hi = __float2half_rn(v);
    const float r1 = v - __half2float(hi); // exact (v and hi agree above hi's last bit)
    mid = __float2half_rn(r1);
    lo = __float2half_rn(r1 - __half2float(mid));
  } else {
    hi = __float2bfloat16_rn(v);
    const float r1 = v - __bfloat162float(hi);
    mid = __float2bfloat16_rn(r1);
    lo = __float2bfloat16_rn(r1 - __bfloat162float(mid));
  }
}

// v as P pieces of H at q[0], q[ps] (and q[2 ps]): P = 3, rt_split3 (all 24
// bits); P = 2, f16 only: hi + lo, each rounded to nearest, so v to 2^-23
// of itself (float's own rounding is 2^-24): at 8 tokens the FP8
// products' x then fills 16 MMA columns where three pieces took 24, one
// n-tile fewer (MMAs and shared-memory loads of x a band)
template <typename H, int P> __device__ __forceinline__ void rt_split_p(float v, H *q, int ps) {
  static_assert(P == 3 || (P == 2 && std::is_same<H, __half>::value), "two pieces only in f16");
  if constexpr (P == 3) {
    rt_split3<H>(v, q[0], q[ps], q[2 * ps]);
  } else {
    q[0] = __float2half_rn(v);
    q[ps] = __float2half_rn(v - __half2float(q[0])); // (the difference is exact)
  }
}

// a (row, token)'s P piece sums added, in piece order
template <int P> __device__ __forceinline__ float rt_piece_sum(const float *sr) {
  return P == 3 ? sr[0] + sr[1] + sr[2] : sr[0] + sr[1];
}

// four 8 x 8 matrices of 16-bit values from shared memory (lane l gives row
// l % 8 of matrix l / 8), as the m16n8k16 A fragment a[0..3] when lanes 0-15
// point at rows 0-15 of columns 0-7 and lanes 16-31 at columns 8-15; TR:
// each matrix transposed (.trans), so that rows stored as the MMA's k take
// the A fragment's k
template <bool TR> __device__ __forceinline__ void rt_ldsm4(uint32_t (&a)[4], const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  if constexpr (TR)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(s)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(s)
                 : "memory");
#endif
}

// two bf16 (lo: the lower k) as an MMA register
__device__ __forceinline__ uint32_t rt_bf16pair(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi) << 16;
}

// The lane's (g = lane / 4, t = lane % 4) weights of bands b0 .. b0 + U - 1
// of tile tl (16 rows), those below bhi: rows g and g + 8, columns 64 b +
// 16 t .. + 15, NL 16-byte loads a row and band (FP8 1, BF16 2); zeros past
// the rows and bands
template <int F, int U, int NL>
__device__ __forceinline__ void rt_head_load(const uint8_t *w, size_t rowb, int64_t rows, int64_t tl, int b0, int bhi,
                                             int g, int t, uint4 (&ra)[U][NL], uint4 (&rb)[U][NL]) {
  const int64_t r = tl * 16 + g;
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int b = b0 + u;
    const uint4 *p = reinterpret_cast<const uint4 *>(w + (size_t)(b * 64 + t * 16) * (F == 1 ? 1 : 2));
#pragma unroll
    for (int h = 0; h < NL; h++) {
      ra[u][h] = b < bhi && r < rows ? __ldcs(p + (size_t)r * rowb / 16 + h) : make_uint4(0, 0, 0, 0);
      rb[u][h] = b < bhi && r + 8 < rows ? __ldcs(p + (size_t)(r + 8) * rowb / 16 + h) : make_uint4(0, 0, 0, 0);
    }
  }
}

// One band's products: the lane's weights ra, rb (rows g, g + 8, as
// rt_head_load left them) as the band's four A fragments, each multiplied
// by the B pieces of every n-tile (plane[n]: this lane's x plane, -1 none;
// pc: the planes, ps halves apart) into acc[n]
template <int F, int NT, int NL, typename H>
__device__ __forceinline__ void rt_head_band(const uint4 (&ra)[NL], const uint4 (&rb)[NL], const H *pc, int ps,
                                             const int (&plane)[NT], int band, int t, float (&acc)[NT][4]) {
  uint32_t a[4][4]; // the band's four A fragments (rows g, g + 8; k slots as the loads)
  if constexpr (F == 1) {
    const uint32_t wa[4] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w}, wb[4] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      a[j][0] = rt_e4m3x2_h2(wa[j]), a[j][1] = rt_e4m3x2_h2(wb[j]), a[j][2] = rt_e4m3x2_h2(wa[j] >> 16),
      a[j][3] = rt_e4m3x2_h2(wb[j] >> 16);
  } else { // a BF16 word is a column pair already
    const uint32_t wa[8] = {ra[0].x, ra[0].y, ra[0].z, ra[0].w, ra[1].x, ra[1].y, ra[1].z, ra[1].w};
    const uint32_t wb[8] = {rb[0].x, rb[0].y, rb[0].z, rb[0].w, rb[1].x, rb[1].y, rb[1].z, rb[1].w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      a[j][0] = wa[2 * j], a[j][1] = wb[2 * j], a[j][2] = wa[2 * j + 1], a[j][3] = wb[2 * j + 1];
  }
#pragma unroll
  for (int n = 0; n < NT; n++) {
    uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
    if (plane[n] >= 0) { // the plane's x columns c .. c + 15
      const uint4 *p = reinterpret_cast<const uint4 *>(pc + plane[n] * ps + band * 64 + t * 16);
      q0 = p[0], q1 = p[1];
    }
    const uint32_t xb[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
      rt_mma16816<F == 0>(acc[n], a[j][0], a[j][1], a[j][2], a[j][3], xb[2 * j], xb[2 * j + 1]);
  }
}

// At one token: the warp's sums of its rows g (s0) and g + 8 (s8) in lane
// (g, 0), from the MMA's accumulators (column 0 and 1 in lane (g, 0),
// column 2 in lane (g, 1): token 0's three pieces)
__device__ __forceinline__ void rt_head_rowsums(const float (&acc)[4], int t, float &s0, float &s8) {
  const float v0 = t == 0 ? acc[0] + acc[1] : acc[0], v8 = t == 0 ? acc[2] + acc[3] : acc[2];
  s0 = v0 + __shfl_down_sync(0xFFFFFFFFu, v0, 1), s8 = v8 + __shfl_down_sync(0xFFFFFFFFu, v8, 1);
}

// Each of the task's nb tokens' x as P pieces of x * 2^s in shared
// memory (pc: P nb planes of cols + 16 halves; s per token, so that the
// largest |x| lies in [2^14, 2^15)), and post[j] = ls * 2^-s, the factor of
// token j's row sums (ls: the FP8 tensor scale, 1 for BF16); after rt_wait,
// all of the block's threads; ends with a barrier
template <typename H, int P = 3>
__device__ __forceinline__ void rt_head_pieces(const mv_task &T, float ls, int cols, H *pc, float *post, float *fsh) {
  const int ps = cols + 16;
  for (int j = 0; j < T.nb; j++) {
    const float *x = T.t[0].x + (int64_t)j * T.xs;
    float m = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) m = fmaxf(m, fabsf(x[c]));
    m = rt_block_reduce(m, 0, 8, fsh);
    const int s = m > 0.0f ? 14 - ilogbf(m) : 0;
    H *q = pc + (size_t)P * j * ps;
    for (int c = threadIdx.x; c < cols; c += 256) rt_split_p<H, P>(ldexpf(x[c], s), q + c, ps);
    if (threadIdx.x == 0) post[j] = ldexpf(ls, -s);
  }
  __syncthreads();
}

