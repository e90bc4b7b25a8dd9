/* Scalar number formats shared by the C reference and the CUDA kernels.
 *
 * This header compiles as C11 and under nvcc (functions are host+device), so
 * the CPU and the GPU run literally the same arithmetic. Every float
 * operation here is one IEEE binary32 operation (the build forbids FMA
 * contraction: -ffp-contract=off for C, --fmad=false for CUDA), which is what
 * makes byte equality with torch/ModelOpt possible.
 *
 * References: ../shared/docs/formats.md sections 1-2 and 5.
 *  - E4M3 (float8_e4m3fn): s eeee mmm, bias 7, no inf, 0x7F/0xFF NaN, max 448.
 *    float -> e4m3 is torch's c10 routine: RNE; magnitudes >= 480 and NaN give
 *    NaN, and (464, 480) rounds to 0x7F = NaN too (no saturation).
 *  - E2M1 (FP4): code = sign<<3 | idx, values {0,.5,1,1.5,2,3,4,6}; ModelOpt's
 *    _cast_fp4 tie rules (round half to even on the grid, > 5 saturates to 6,
 *    NaN -> 7, the sign bit set only when y < 0).
 *  - bf16: upper half of binary32; float -> bf16 rounds to nearest even, NaN
 *    becomes 0x7FC0.
 */
#ifndef MTPQ_QUANT_NUMERICS_H
#define MTPQ_QUANT_NUMERICS_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define MTPQ_HD __host__ __device__ __forceinline__
#else
#include <string.h>
#define MTPQ_HD static inline
#endif

/* Which torch arithmetic to reproduce for "tensor / Python scalar":
 * CUDA multiplies by the float32 reciprocal, the CPU divides. */
enum mtpq_arith { MTPQ_ARITH_CUDA = 0, MTPQ_ARITH_CPU = 1 };

#define MTPQ_E4M3_MAX 448.0f
#define MTPQ_E2M1_MAX 6.0f
#define MTPQ_NVFP4_BLOCK 16
/* RN32(1/2688) and RN32(1/448): the reciprocals torch's CUDA kernels use. */
#define MTPQ_INV_2688_BITS 0x39C30C31u
#define MTPQ_INV_448_BITS 0x3B124925u
/* E4M3 code of 1.0, the block scale ModelOpt gives an all-zero block. */
#define MTPQ_E4M3_ONE 0x38u

MTPQ_HD uint32_t mtpq_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MTPQ_HD float mtpq_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

MTPQ_HD float mtpq_bf16_to_f32(uint16_t h) { return mtpq_f32_from_bits((uint32_t)h << 16); }

MTPQ_HD uint16_t mtpq_f32_to_bf16(float f) {
  uint32_t u = mtpq_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* RN_bf16 as a float value. */
MTPQ_HD float mtpq_round_bf16(float f) { return mtpq_bf16_to_f32(mtpq_f32_to_bf16(f)); }

/* RN_f16 (IEEE binary16, round to nearest even) as a float value: 11
 * significant bits down to 2^-14, steps of 2^-24 below it, 0 under half of
 * that; magnitudes that round past 65504 give infinity, NaN stays NaN. */
MTPQ_HD float mtpq_round_f16(float f) {
  const uint32_t u = mtpq_f32_bits(f), a = u & 0x7FFFFFFFu, s = u & 0x80000000u;
  if (a >= 0x7F800000u) return f;
  if (a >= 0x477FF000u) return mtpq_f32_from_bits(s | 0x7F800000u); /* 65520 and up */
  const int e = (int)(a >> 23) - 127;                               /* (float32 subnormals: -127) */
  const int drop = e >= -14 ? 13 : 13 + (-14 - e);                  /* mantissa bits below the grid */
  if (a < 0x00800000u || drop > 24) return mtpq_f32_from_bits(s);
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t r = (m + (1u << (drop - 1)) - 1u + ((m >> drop) & 1u)) >> drop;
  /* r x 2^(e - 23 + drop): r < 2^12 converts exactly, the power of two is a normal float */
  return mtpq_f32_from_bits(s | mtpq_f32_bits((float)r * mtpq_f32_from_bits((uint32_t)(e - 23 + drop + 127) << 23)));
}

/* The power of two 2^e by which a row whose largest magnitude is mx is
 * divided before it is rounded to FP16 (mtpq_round_f16): e puts mx in
 * [2^14, 2^15), 0 for a row of zeros, clamped to [-112, 113] so that 2^e
 * and 2^-e stay normal floats. The CUDA prefill's FP8 and NVFP4 expert
 * inputs (kernels/cuda/k_egemm.cu, k_p_tof16) and the CPU reference that
 * emulates them (kernels/rt_cpu.c, rt_round_f16_row) both take it here. */
MTPQ_HD int mtpq_f16_row_exp(float mx) {
  const int e = mx > 0.0f ? ilogbf(mx) - 14 : 0;
  return e < -112 ? -112 : e > 113 ? 113 : e;
}

/* torch c10 fp8e4m3fn_from_fp32_value. */
MTPQ_HD uint8_t mtpq_e4m3_from_f32(float f) {
  const uint32_t fp8_max = 1087u << 20;     /* 480.0 */
  const uint32_t denorm_mask = 141u << 23;  /* 2^14 as float */
  uint32_t u = mtpq_f32_bits(f);
  uint32_t sign = u & 0x80000000u;
  uint8_t r;
  u ^= sign;
  if (u >= fp8_max) {
    r = 0x7F;
  } else if (u < (121u << 23)) {
    /* Subnormal range: the float add rounds to a 2^-9 grid (RNE). */
    u = mtpq_f32_bits(mtpq_f32_from_bits(u) + mtpq_f32_from_bits(denorm_mask));
    r = (uint8_t)(u - denorm_mask);
  } else {
    uint32_t mant_odd = (u >> 20) & 1u;
    u += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu;
    u += mant_odd;
    r = (uint8_t)(u >> 20);
  }
  return (uint8_t)(r | (sign >> 24));
}

/* Saturating variant: clamp to [-448, 448] first (NaN stays NaN). */
MTPQ_HD uint8_t mtpq_e4m3_from_f32_sat(float f) {
  if (f > MTPQ_E4M3_MAX) f = MTPQ_E4M3_MAX;
  else if (f < -MTPQ_E4M3_MAX) f = -MTPQ_E4M3_MAX;
  return mtpq_e4m3_from_f32(f);
}

MTPQ_HD float mtpq_e4m3_to_f32(uint8_t b) {
  uint32_t s = (uint32_t)(b & 0x80) << 24;
  uint32_t e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0xF && m == 7) return mtpq_f32_from_bits(s | 0x7FC00000u);
  if (e == 0) /* subnormal: m * 2^-9, exact in binary32 */
    return mtpq_f32_from_bits(s | mtpq_f32_bits((float)m * 0.001953125f));
  return mtpq_f32_from_bits(s | ((e + 120u) << 23) | (m << 20));
}

/* ModelOpt NVFP4QTensor._cast_fp4 on one value. */
MTPQ_HD uint8_t mtpq_e2m1_code(float y) {
  float m = y < 0 ? -y : y;
  uint8_t idx;
  if (m != m) {
    idx = 7; /* searchsorted puts NaN past the end */
  } else {
    idx = (uint8_t)((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                    (m >= 3.5f) + (m > 5.0f));
  }
  return (uint8_t)(((y < 0) << 3) | idx);
}

MTPQ_HD float mtpq_e2m1_to_f32(uint8_t code) {
  /* Value of idx = code & 7 is {0, .5, 1, 1.5, 2, 3, 4, 6}. */
  uint8_t i = code & 7;
  float v = i < 4 ? 0.5f * (float)i : (i == 7 ? 6.0f : (float)(i - 2));
  return (code & 8) ? -v : v;
}

/* E2M1 index (0..7) of RNE(m) on the E2M1 grid, m = |y| >= 0 or NaN, by
 * float rounding instead of a compare chain: adding c (2^22, 2^23 or 2^24,
 * whose ulp is the grid spacing 0.5, 1 or 2 of m's range) rounds m to the
 * grid in one IEEE add with ties to even, which are ModelOpt's tie rules;
 * m >= 6 and NaN saturate to 6. Equal to mtpq_e2m1_code(m) & 7 for every
 * float (tests/check_quant.c checks all 2^31 non-negative patterns in the
 * slow suite and a dense sample in the unit suite). */
MTPQ_HD uint8_t mtpq_e2m1_index_rn(float m) {
  float c = m < 2.0f ? 4194304.0f : (m < 4.0f ? 8388608.0f : 16777216.0f);
  float mm = m < 6.0f ? m : 6.0f;
  float v = (mm + c) - c;
  if (v < 1.0f) return (uint8_t)(v > 0.0f);
  return (uint8_t)((mtpq_f32_bits(v) >> 22) - 252u);
}

/* E2M1 code of RN32(x / g) without a division, when that is safe: rg must
 * be RN32(1 / g) with g positive, normal and within [2^-100, 2^100].
 * q = RN32(x * rg) is within 1.5 ulp of x / g, so unless q lies within 8
 * ulps of a decision point of the E2M1 rounding (odd multiples of half the
 * grid spacing) RN32(x / g) rounds to the same code. Returns 0 (and leaves
 * *code unset) when q is that close, or tiny; the caller then divides. */
MTPQ_HD int mtpq_e2m1_code_try(float x, float rg, uint8_t *code) {
  float q = x * rg;
  float m = q < 0 ? -q : q;
  float c = m < 2.0f ? 4194304.0f : (m < 4.0f ? 8388608.0f : 16777216.0f);
  float mm = m < 6.0f ? m : 6.0f;
  float v = (mm + c) - c;
  float d = mm - v;
  d = d < 0 ? -d : d;
  float dist = d - c * 5.9604644775390625e-8f; /* c * 2^-24: half the grid spacing */
  dist = dist < 0 ? -dist : dist;
  if (dist <= m * 9.5367431640625e-7f /* 2^-20: 8 ulps */ || (m != 0.0f && m < 7.8886091e-31f))
    return 0;
  uint8_t idx = v < 1.0f ? (uint8_t)(v > 0.0f) : (uint8_t)((mtpq_f32_bits(v) >> 22) - 252u);
  *code = (uint8_t)(((q < 0) << 3) | idx);
  return 1;
}

/* 1 if mtpq_e2m1_code_try may be used with divisor g. */
MTPQ_HD int mtpq_divisor_in_range(float g) { return g >= 7.8886091e-31f && g <= 1.2676506e30f; }

/* E2M1 code of RN32(x / g): equal to mtpq_e2m1_code(x / g) for all finite x
 * and positive normal g; divides only when mtpq_e2m1_code_try declines. */
MTPQ_HD uint8_t mtpq_e2m1_code_div(float x, float g, float rg) {
  uint8_t c;
  if (mtpq_divisor_in_range(g) && mtpq_e2m1_code_try(x, rg, &c)) return c;
  return mtpq_e2m1_code(x / g);
}

/* NVFP4 global scale S2 = amax / 2688 in the chosen arithmetic. */
MTPQ_HD float mtpq_nvfp4_global_scale(float amax, enum mtpq_arith a) {
  return a == MTPQ_ARITH_CUDA ? amax * mtpq_f32_from_bits(MTPQ_INV_2688_BITS) : amax / 2688.0f;
}

/* FP8 per-tensor scale amax / 448 in the chosen arithmetic. */
MTPQ_HD float mtpq_fp8_scale_f32(float amax, enum mtpq_arith a) {
  return a == MTPQ_ARITH_CUDA ? amax * mtpq_f32_from_bits(MTPQ_INV_448_BITS) : amax / 448.0f;
}

/* Block scale code from the block amax and D = RN32(6 * S2) (ModelOpt >=
 * 0.45: zero -> 1.0, clamp to [2^-9, 448], then the E4M3 cast). */
MTPQ_HD uint8_t mtpq_nvfp4_block_scale(float block_amax, float D) {
  float s = block_amax / D;
  if (s == 0.0f) s = 1.0f;
  if (s < 0.001953125f) s = 0.001953125f;
  if (s > MTPQ_E4M3_MAX) s = MTPQ_E4M3_MAX;
  return mtpq_e4m3_from_f32(s);
}

/* Quantize one 16-element block of bf16 values (pad with zeros before the
 * call). Writes 8 packed bytes (even element in the low nibble) and returns
 * the E4M3 block scale. S2 == 0 (an all-zero tensor) is special-cased to
 * scale 1.0 and zero codes, where ModelOpt would emit NaN scales. */
MTPQ_HD uint8_t mtpq_nvfp4_block(const uint16_t *x16, float S2, uint8_t *out8) {
  float v[MTPQ_NVFP4_BLOCK];
  float amax = 0.0f;
  for (int i = 0; i < MTPQ_NVFP4_BLOCK; i++) {
    v[i] = mtpq_bf16_to_f32(x16[i]);
    float m = v[i] < 0 ? -v[i] : v[i];
    amax = m > amax ? m : amax;
  }
  if (S2 == 0.0f) {
    for (int i = 0; i < 8; i++) out8[i] = 0;
    return MTPQ_E4M3_ONE;
  }
  float D = 6.0f * S2;
  uint8_t q = mtpq_nvfp4_block_scale(amax, D);
  float g = mtpq_e4m3_to_f32(q) * S2;
  for (int i = 0; i < 8; i++) {
    uint8_t lo = mtpq_e2m1_code(v[2 * i] / g);
    uint8_t hi = mtpq_e2m1_code(v[2 * i + 1] / g);
    out8[i] = (uint8_t)(lo | (hi << 4));
  }
  return q;
}

/* mtpq_nvfp4_block with the division-free code path (the GPU kernels use
 * it; the bytes are the same). Measured on the H200, keeping the rare exact
 * division inline per element beat collecting it in a second loop (which
 * doubled register use). */
MTPQ_HD uint8_t mtpq_nvfp4_block_fast(const uint16_t *x16, float S2, uint8_t *out8) {
  float v[MTPQ_NVFP4_BLOCK];
  uint32_t am = 0;
  for (int i = 0; i < MTPQ_NVFP4_BLOCK; i++) {
    uint32_t a = x16[i] & 0x7FFFu;
    am = a > am ? a : am;
    v[i] = mtpq_bf16_to_f32(x16[i]);
  }
  if (S2 == 0.0f) {
    for (int i = 0; i < 8; i++) out8[i] = 0;
    return MTPQ_E4M3_ONE;
  }
  uint8_t q = mtpq_nvfp4_block_scale(mtpq_bf16_to_f32((uint16_t)am), 6.0f * S2);
  float g = mtpq_e4m3_to_f32(q) * S2;
  float rg = 1.0f / g;
  for (int i = 0; i < 8; i++) {
    uint8_t lo = mtpq_e2m1_code_div(v[2 * i], g, rg);
    uint8_t hi = mtpq_e2m1_code_div(v[2 * i + 1], g, rg);
    out8[i] = (uint8_t)(lo | (hi << 4));
  }
  return q;
}

/* FP8 per-tensor element, three recipes (formats.md section 5 and golden/):
 *  F32:              q = e4m3(clamp(x / scale, -448, 448))          (any arith)
 *  MODELOPT_QTENSOR: scale is bf16-valued; q = e4m3(RN_bf16(x / scale))
 *  MODELOPT_EXPORT:  CUDA divides by RN_bf16(scale), CPU by scale, then
 *                    q = e4m3(RN_bf16(quotient))                     (no clamp)
 * A zero scale (all-zero tensor) gives zero codes. */
enum mtpq_fp8_recipe {
  MTPQ_FP8_F32 = 0,
  MTPQ_FP8_MODELOPT_QTENSOR = 1,
  MTPQ_FP8_MODELOPT_EXPORT = 2,
};

/* The scale stored as weight_scale for each recipe. */
MTPQ_HD float mtpq_fp8_scale(float amax, enum mtpq_fp8_recipe r, enum mtpq_arith a) {
  if (r == MTPQ_FP8_MODELOPT_QTENSOR) /* bf16 tensor / 448 in bf16 */
    return mtpq_round_bf16(mtpq_fp8_scale_f32(amax, a));
  return mtpq_fp8_scale_f32(amax, a);
}

/* divisor: the value each element is divided by (precomputed per tensor by
 * mtpq_fp8_divisor). */
MTPQ_HD float mtpq_fp8_divisor(float scale, enum mtpq_fp8_recipe r, enum mtpq_arith a) {
  if (r == MTPQ_FP8_MODELOPT_EXPORT && a == MTPQ_ARITH_CUDA) return mtpq_round_bf16(scale);
  return scale;
}

MTPQ_HD uint8_t mtpq_fp8_element(uint16_t x, float divisor, enum mtpq_fp8_recipe r) {
  if (divisor == 0.0f) return 0;
  float y = mtpq_bf16_to_f32(x) / divisor;
  if (r == MTPQ_FP8_F32) return mtpq_e4m3_from_f32_sat(y);
  return mtpq_e4m3_from_f32(mtpq_round_bf16(y));
}

/* mtpq_fp8_element without a division in the common case (GPU kernels).
 * rdiv = RN32(1 / divisor). As in mtpq_e2m1_code_div, q = RN32(x * rdiv)
 * is within 1.5 ulp of x / divisor, so the result can only differ from the
 * exact one when q is within 8 ulps of a rounding decision point: for the
 * f32 recipe the E4M3 midpoints (float mantissa low 20 bits near 0x80000 in
 * the E4M3 normal range; the subnormal range |q| < 2^-6 always divides),
 * for the ModelOpt recipes the bf16 midpoints (low 16 bits near 0x8000);
 * tiny quotients and divisors outside [2^-100, 2^100] also divide. */
MTPQ_HD uint8_t mtpq_fp8_element_fast(uint16_t xb, float divisor, float rdiv,
                                      enum mtpq_fp8_recipe r) {
  if (divisor == 0.0f) return 0;
  float x = mtpq_bf16_to_f32(xb);
  float q = x * rdiv;
  uint32_t u = mtpq_f32_bits(q) & 0x7FFFFFFFu;
  int exact = !(divisor >= 7.8886091e-31f && divisor <= 1.2676506e30f);
  if (r == MTPQ_FP8_F32) {
    uint32_t lo = u & 0xFFFFFu;
    uint32_t dlo = lo > 0x80000u ? lo - 0x80000u : 0x80000u - lo;
    exact |= u < 0x3C820000u /* 2^-6 * 1.0156 */ || (u < 0x43F00000u && dlo <= 8u);
    if (exact) return mtpq_fp8_element(xb, divisor, r);
    return mtpq_e4m3_from_f32_sat(q);
  }
  uint32_t lo = u & 0xFFFFu;
  uint32_t dlo = lo > 0x8000u ? lo - 0x8000u : 0x8000u - lo;
  exact |= (u != 0 && u < 0x0C800000u /* 2^-102 */) || dlo <= 8u;
  if (exact) return mtpq_fp8_element(xb, divisor, r);
  return mtpq_e4m3_from_f32(mtpq_round_bf16(q));
}

#endif
