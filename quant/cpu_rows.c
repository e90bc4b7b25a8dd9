/* CPU row kernels; see quant/cpu_rows.h. Built with -O3 and, on x86-64, an
 * AVX2 clone chosen at load time (target_clones), with a baseline fallback. */
#include "quant/cpu_rows.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MTPQ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MTPQ_CLONES
#endif

/* E2M1 code of y, branch-free (same rules as mtpq_e2m1_code; y is finite
 * here because inputs are checked and g > 0, but NaN is still mapped to 7). */
static inline uint8_t code_of(float y) {
  float m = fabsf(y);
  int idx = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) +
            (m > 5.0f);
  idx |= -(int)(m != m) & 7;
  return (uint8_t)(((int)(y < 0.0f) << 3) | idx);
}

#define CHUNK_BLOCKS 8
#define CHUNK (16 * CHUNK_BLOCKS)

/* CHUNK_BLOCKS full blocks of bf16 h[] -> packed[CHUNK/2], scales[]. The
 * per-block scale work is scalar; the per-element work runs over the whole
 * chunk so the vectorizer gets long, uniform loops. */
static inline void nvfp4_chunk(const uint16_t *h, int nblk, float S2, uint8_t *packed,
                               uint8_t *scales) {
  float g[CHUNK], y[CHUNK];
  uint8_t c[CHUNK];
  for (int b = 0; b < nblk; b++) {
    uint16_t am = 0;
    for (int i = 0; i < 16; i++) {
      uint16_t a = h[16 * b + i] & 0x7FFF;
      am = (uint16_t)(am ^ ((a ^ am) & (0u - (unsigned)(a > am))));
    }
    uint8_t q = mtpq_nvfp4_block_scale(mtpq_bf16_to_f32(am), 6.0f * S2);
    float gb = mtpq_e4m3_to_f32(q) * S2;
    for (int i = 0; i < 16; i++) g[16 * b + i] = gb;
    scales[b] = q;
  }
  int n = 16 * nblk;
  for (int i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    float v;
    memcpy(&v, &u, 4);
    y[i] = v / g[i];
  }
  for (int i = 0; i < n; i++) c[i] = code_of(y[i]);
  for (int j = 0; j < n / 2; j++) packed[j] = (uint8_t)(c[2 * j] | (c[2 * j + 1] << 4));
}

MTPQ_CLONES
void mtpq__nvfp4_row(const unsigned char *x, int64_t cols, float S2, uint8_t *packed,
                     uint8_t *scales) {
  int64_t nb = (cols + 15) / 16;
  if (S2 == 0.0f) { /* all-zero tensor: see mtpq_nvfp4_block */
    memset(packed, 0, (size_t)nb * 8);
    memset(scales, MTPQ_E4M3_ONE, (size_t)nb);
    return;
  }
  uint16_t h[CHUNK];
  int64_t full = cols / 16; /* blocks without padding */
  int64_t b = 0;
  for (; b + CHUNK_BLOCKS <= full; b += CHUNK_BLOCKS) {
    memcpy(h, x + 32 * b, sizeof h);
    nvfp4_chunk(h, CHUNK_BLOCKS, S2, packed + 8 * b, scales + b);
  }
  for (; b < nb; b++) {
    int64_t c0 = b * 16;
    memset(h, 0, 32);
    memcpy(h, x + 2 * c0, (size_t)((cols - c0 < 16 ? cols - c0 : 16) * 2));
    nvfp4_chunk(h, 1, S2, packed + 8 * b, scales + b);
  }
}

/* mtpq_e4m3_from_f32 with its three paths computed side by side and one
 * selected, so it vectorizes (the wrapped arithmetic of unused paths is
 * discarded by the select). */
static inline uint8_t e4m3_select(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t rn = (u + ((uint32_t)(7 - 127) << 23) + 0x7FFFFu + ((u >> 20) & 1u)) >> 20;
  float a;
  memcpy(&a, &u, 4);
  a += 16384.0f;
  uint32_t rs;
  memcpy(&rs, &a, 4);
  rs -= 141u << 23;
  uint32_t big = 0u - (uint32_t)(u >= (1087u << 20));
  uint32_t sub = 0u - (uint32_t)(u < (121u << 23));
  uint32_t r = (big & 0x7Fu) | (~big & ((sub & rs) | (~sub & rn)));
  return (uint8_t)((r & 0xFFu) | (sign >> 24));
}

MTPQ_CLONES
void mtpq__fp8_row(const unsigned char *x, int64_t n, float divisor, enum mtpq_fp8_recipe r,
                   uint8_t *out) {
  if (divisor == 0.0f) { /* all-zero tensor: zero codes (see numerics.h) */
    memset(out, 0, (size_t)n);
    return;
  }
  const int64_t B = 256;
  uint16_t h[256];
  for (int64_t i0 = 0; i0 < n; i0 += B) {
    int64_t m = n - i0 < B ? n - i0 : B;
    memcpy(h, x + 2 * i0, (size_t)m * 2);
    if (r == MTPQ_FP8_F32) {
      for (int64_t i = 0; i < m; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float v;
        memcpy(&v, &u, 4);
        float y = v / divisor;
        y = y > MTPQ_E4M3_MAX ? MTPQ_E4M3_MAX : y;
        y = y < -MTPQ_E4M3_MAX ? -MTPQ_E4M3_MAX : y;
        out[i0 + i] = e4m3_select(y);
      }
    } else {
      for (int64_t i = 0; i < m; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float v;
        memcpy(&v, &u, 4);
        uint32_t yb;
        float y = v / divisor;
        memcpy(&yb, &y, 4);
        /* RN_bf16 (inputs are finite: no NaN case) */
        yb = (yb + 0x7FFFu + ((yb >> 16) & 1u)) & 0xFFFF0000u;
        memcpy(&y, &yb, 4);
        out[i0 + i] = e4m3_select(y);
      }
    }
  }
}

MTPQ_CLONES
uint16_t mtpq__amax_bits(const unsigned char *x, size_t n) {
  uint16_t best = 0, h[512];
  for (size_t i0 = 0; i0 < n; i0 += 512) {
    size_t m = n - i0 < 512 ? n - i0 : 512;
    memcpy(h, x + 2 * i0, m * 2);
    for (size_t i = 0; i < m; i++) {
      uint16_t a = h[i] & 0x7FFF;
      best = (uint16_t)(best ^ ((a ^ best) & (0u - (unsigned)(a > best))));
    }
  }
  return best;
}
