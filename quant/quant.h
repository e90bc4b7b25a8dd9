/* Quantization formats: the reference (scalar C) quantizers and
 * dequantizers, driven by one format table.
 *
 * Inputs are BF16 row-major matrices [rows, cols] given as raw bytes (they
 * may come straight from a mapped safetensors file, so no alignment is
 * assumed). Outputs are owned by a struct mtpq_qtensor and freed with
 * mtpq_qtensor_free().
 *
 * NVFP4 (ModelOpt dynamic path, formats.md section 2):
 *   data   = packed E2M1 codes [rows, cols16/2], even element in the low nibble
 *   scales = E4M3 block scales [rows, cols16/16], row-major, not swizzled
 *   scale  = weight_scale_2 (S2 = amax/2688)
 *   cols16 = cols rounded up to 16: ModelOpt pads the last block with zeros.
 * FP8 per tensor (formats.md section 5):
 *   data = E4M3 codes [rows, cols], scale = weight_scale, no block scales.
 * E4M3 elementwise casts (no scale) are in the table for the conversion
 * tests and the CLI's format list.
 */
#ifndef MTPQ_QUANT_QUANT_H
#define MTPQ_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"
#include "quant/numerics.h"

enum mtpq_format {
  MTPQ_FMT_NVFP4,
  MTPQ_FMT_FP8,                  /* float32 recipe (mtpq's default) */
  MTPQ_FMT_FP8_MODELOPT_QTENSOR, /* ModelOpt FP8QTensor.quantize on bf16 */
  MTPQ_FMT_FP8_MODELOPT_EXPORT,  /* ModelOpt's HF export path */
  MTPQ_FMT_E4M3,                 /* elementwise cast, NaN above 464 */
  MTPQ_FMT_E4M3_SAT,             /* elementwise cast after clamping to +-448 */
  MTPQ_FMT_COUNT
};

struct mtpq_qtensor {
  enum mtpq_format fmt;
  int64_t rows, cols;  /* logical input shape */
  int64_t cols_padded; /* NVFP4: cols rounded up to 16; else cols */
  uint8_t *data;       /* codes */
  size_t data_bytes;
  uint8_t *scales;     /* NVFP4 block scales (E4M3), else NULL */
  size_t scale_bytes;
  float scale;         /* NVFP4 weight_scale_2 / FP8 weight_scale / 0 */
};

struct mtpq_quant_opts {
  enum mtpq_arith arith;
  /* >= 0: use this amax instead of the tensor's own (group quantization:
   * the max over a fused group such as an expert's gate and up). */
  float group_amax;
  int threads; /* 0 or 1: single-threaded */
};

/* Defaults: CUDA arithmetic, own amax, one thread. */
struct mtpq_quant_opts mtpq_quant_default_opts(void);

typedef enum mtpq_status (*mtpq_quantize_fn)(const void *bf16, int64_t rows, int64_t cols,
                                             const struct mtpq_quant_opts *o,
                                             struct mtpq_qtensor *out, struct mtpq_err *err);
typedef void (*mtpq_dequantize_fn)(const struct mtpq_qtensor *q, float *out);

struct mtpq_format_info {
  const char *name;        /* CLI name */
  int block;               /* elements per scale block; 0 = per tensor */
  const char *scale_layout;
  const char *description;
  mtpq_quantize_fn quantize;     /* reference, always built */
  mtpq_dequantize_fn dequantize; /* into float [rows, cols_padded] */
  int has_gpu;             /* a CUDA kernel exists (see quant/gpu_quant.h) */
  double rmse_bound;       /* tests: max RMS(dequant - x) / RMS(x) on Gaussian data */
};

const struct mtpq_format_info *mtpq_format_get(enum mtpq_format f);
/* MTPQ_FMT_COUNT if unknown. */
enum mtpq_format mtpq_format_parse(const char *name);

/* Max |x| over n bf16 values. Returns MTPQ_E_BAD_VALUE (message names the
 * index and value; label names the tensor) if any value is NaN or infinite. */
enum mtpq_status mtpq_amax_bf16(const void *bf16, size_t n, const char *label, float *amax,
                                struct mtpq_err *err);

/* Quantize with format f (dispatches through the table). */
enum mtpq_status mtpq_quantize(enum mtpq_format f, const void *bf16, int64_t rows, int64_t cols,
                               const struct mtpq_quant_opts *o, struct mtpq_qtensor *out,
                               struct mtpq_err *err);
void mtpq_qtensor_free(struct mtpq_qtensor *q); /* NULL-safe; leaves q zeroed */

/* Dequantize NVFP4 parts directly (used by verify and the runtime). */
void mtpq_nvfp4_dequantize_parts(const uint8_t *packed, const uint8_t *scales, float S2,
                                 int64_t rows, int64_t cols16, float *out);

/* Ordinal of a code on its format's number line (monotonic in value; +0 and
 * -0 share 0), so |ord(a) - ord(b)| is the code distance. */
static inline int mtpq_e4m3_ordinal(uint8_t c) { return (c & 0x80) ? -(int)(c & 0x7F) : (int)c; }
static inline int mtpq_e2m1_ordinal(uint8_t c) { return (c & 8) ? -(int)(c & 7) : (int)(c & 7); }

#endif
