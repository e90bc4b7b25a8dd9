// Tensor-core building blocks shared by the head (kernels/rt_head.cuh; the
// dense products at 2..8 tokens, kernels/rt_dmma.cuh, use them through it)
// and the attention (kernels/rt_ops.cuh, k_attn's MMA path): the m16n8k16
// MMA, the three-piece split that carries a float exactly in 16-bit halves
// (and rt_split_p's two-piece f16 form, for FP8 products at 8 tokens), and
// ldmatrix. Included by rt_head.cuh and rt_ops.cuh only.
#pragma once
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

// v as three pieces of the half type H (hi + mid + lo), each a round to nearest of what is left
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
// bits); P = 2, f16 only: hi + lo, each a round to nearest, so v to 2^-23
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
