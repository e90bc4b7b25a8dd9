/* Vectorizable CPU row kernels for NVFP4 and FP8 (internal to quant/).
 * They compute exactly what mtpq_nvfp4_block / mtpq_fp8_element compute
 * (quant/numerics.h), restructured so the compiler can use SIMD: integer
 * amax on bf16 magnitude bits, division and code selection as straight-line
 * per-lane work. IEEE division and comparisons are exact in SIMD, and FMA
 * contraction is off, so the bytes are the same (the golden tests run on
 * this path; check_quant also compares it with the block function). */
#ifndef MTPQ_QUANT_CPU_ROWS_H
#define MTPQ_QUANT_CPU_ROWS_H

#include <stdint.h>

#include "quant/numerics.h"

/* One row of `cols` bf16 (any alignment), cols16 = cols rounded up to 16. */
void mtpq__nvfp4_row(const unsigned char *x, int64_t cols, float S2, uint8_t *packed,
                     uint8_t *scales);
/* n elements; divisor/recipe as mtpq_fp8_element. */
void mtpq__fp8_row(const unsigned char *x, int64_t n, float divisor, enum mtpq_fp8_recipe r,
                   uint8_t *out);

/* Max of the bf16 magnitude bits (x & 0x7FFF) over n values. */
uint16_t mtpq__amax_bits(const unsigned char *x, size_t n);

#endif
