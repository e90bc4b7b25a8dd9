/* Reference quantizers (scalar C) and the format table. The per-element and
 * per-block arithmetic lives in quant/numerics.h, shared with the CUDA
 * kernels; this file handles shapes, padding, amax, threads and memory. */
#include "quant/quant.h"

#include "quant/cpu_rows.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t load_bf16(const unsigned char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

struct mtpq_quant_opts mtpq_quant_default_opts(void) {
  struct mtpq_quant_opts o = {MTPQ_ARITH_CUDA, -1.0f, 1};
  return o;
}

enum mtpq_status mtpq_amax_bf16(const void *bf16, size_t n, const char *label, float *amax,
                                struct mtpq_err *err) {
  const unsigned char *p = bf16;
  /* |x| as bits: for finite bf16 the larger magnitude has the larger bits,
   * and Inf/NaN have the largest (>= 0x7F80), so one max finds both. */
  uint16_t best = mtpq__amax_bits(p, n);
  if (best >= 0x7F80)
    for (size_t i = 0; i < n; i++) {
      uint16_t a = load_bf16(p + 2 * i) & 0x7FFF;
      if (a >= 0x7F80)
        return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: element %zu is %s",
                            label ? label : "tensor", i, a == 0x7F80 ? "infinite" : "NaN");
    }
  *amax = mtpq_bf16_to_f32(best);
  return MTPQ_OK;
}

void mtpq_qtensor_free(struct mtpq_qtensor *q) {
  if (!q) return;
  free(q->data);
  free(q->scales);
  memset(q, 0, sizeof *q);
}

/* ---- threading: split rows over workers ---------------------------------- */

struct rows_job {
  void (*fn)(void *ctx, int64_t r0, int64_t r1);
  void *ctx;
  int64_t r0, r1;
};

static void *rows_worker(void *arg) {
  struct rows_job *j = arg;
  j->fn(j->ctx, j->r0, j->r1);
  return NULL;
}

static void run_rows(void (*fn)(void *, int64_t, int64_t), void *ctx, int64_t rows, int threads) {
  if (threads <= 1 || rows < 2 * threads) {
    fn(ctx, 0, rows);
    return;
  }
  if (threads > 256) threads = 256;
  pthread_t tid[256];
  struct rows_job jobs[256];
  int started[256] = {0};
  for (int t = 1; t < threads; t++) {
    jobs[t] = (struct rows_job){fn, ctx, rows * t / threads, rows * (t + 1) / threads};
    started[t] = pthread_create(&tid[t], NULL, rows_worker, &jobs[t]) == 0;
    if (!started[t]) fn(ctx, jobs[t].r0, jobs[t].r1); /* no thread: do it here */
  }
  fn(ctx, 0, rows / threads);
  for (int t = 1; t < threads; t++)
    if (started[t]) pthread_join(tid[t], NULL);
}

/* ---- NVFP4 ----------------------------------------------------------------- */

struct nvfp4_ctx {
  const unsigned char *x;
  int64_t cols, cols16;
  float S2;
  uint8_t *packed, *scales;
};

static void nvfp4_rows(void *vctx, int64_t r0, int64_t r1) {
  const struct nvfp4_ctx *c = vctx;
  int64_t nb = c->cols16 / MTPQ_NVFP4_BLOCK;
  for (int64_t r = r0; r < r1; r++)
    mtpq__nvfp4_row(c->x + (size_t)r * (size_t)c->cols * 2, c->cols, c->S2,
                    c->packed + r * (c->cols16 / 2), c->scales + r * nb);
}

static enum mtpq_status nvfp4_quantize(const void *bf16, int64_t rows, int64_t cols,
                                       const struct mtpq_quant_opts *o, struct mtpq_qtensor *out,
                                       struct mtpq_err *err) {
  memset(out, 0, sizeof *out);
  float amax = o->group_amax;
  if (amax < 0) {
    enum mtpq_status st = mtpq_amax_bf16(bf16, (size_t)(rows * cols), NULL, &amax, err);
    if (st) return st;
  }
  int64_t cols16 = (cols + 15) / 16 * 16;
  out->fmt = MTPQ_FMT_NVFP4;
  out->rows = rows;
  out->cols = cols;
  out->cols_padded = cols16;
  out->data_bytes = (size_t)(rows * cols16 / 2);
  out->scale_bytes = (size_t)(rows * cols16 / 16);
  out->data = malloc(out->data_bytes ? out->data_bytes : 1);
  out->scales = malloc(out->scale_bytes ? out->scale_bytes : 1);
  if (!out->data || !out->scales) {
    mtpq_qtensor_free(out);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "NVFP4: out of memory for [%lld, %lld]",
                        (long long)rows, (long long)cols);
  }
  out->scale = mtpq_nvfp4_global_scale(amax, o->arith);
  struct nvfp4_ctx c = {bf16, cols, cols16, out->scale, out->data, out->scales};
  run_rows(nvfp4_rows, &c, rows, o->threads);
  return MTPQ_OK;
}

void mtpq_nvfp4_dequantize_parts(const uint8_t *packed, const uint8_t *scales, float S2,
                                 int64_t rows, int64_t cols16, float *out) {
  int64_t nb = cols16 / 16;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < nb; b++) {
      /* ModelOpt dequant: code value x (fp8 scale x S2). */
      float g = mtpq_e4m3_to_f32(scales[r * nb + b]) * S2;
      for (int i = 0; i < 16; i++) {
        int64_t col = b * 16 + i;
        uint8_t byte = packed[r * (cols16 / 2) + col / 2];
        uint8_t code = (col & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15);
        out[r * cols16 + col] = mtpq_e2m1_to_f32(code) * g;
      }
    }
}

static void nvfp4_dequantize(const struct mtpq_qtensor *q, float *out) {
  mtpq_nvfp4_dequantize_parts(q->data, q->scales, q->scale, q->rows, q->cols_padded, out);
}

/* ---- FP8 per tensor and E4M3 casts --------------------------------------- */

struct fp8_ctx {
  const unsigned char *x;
  int64_t cols;
  float divisor;
  enum mtpq_fp8_recipe recipe;
  int cast; /* 0: scaled FP8, 1: raw cast, 2: saturating cast */
  uint8_t *out;
};

static void fp8_rows(void *vctx, int64_t r0, int64_t r1) {
  const struct fp8_ctx *c = vctx;
  if (!c->cast) {
    mtpq__fp8_row(c->x + 2 * r0 * c->cols, (r1 - r0) * c->cols, c->divisor, c->recipe,
                  c->out + r0 * c->cols);
    return;
  }
  for (int64_t i = r0 * c->cols; i < r1 * c->cols; i++) {
    float v = mtpq_bf16_to_f32(load_bf16(c->x + 2 * i));
    c->out[i] = c->cast == 1 ? mtpq_e4m3_from_f32(v) : mtpq_e4m3_from_f32_sat(v);
  }
}

static enum mtpq_status fp8_common(const void *bf16, int64_t rows, int64_t cols,
                                   const struct mtpq_quant_opts *o, enum mtpq_format fmt,
                                   struct mtpq_qtensor *out, struct mtpq_err *err) {
  memset(out, 0, sizeof *out);
  static const enum mtpq_fp8_recipe recipe_of[MTPQ_FMT_COUNT] = {
      [MTPQ_FMT_FP8] = MTPQ_FP8_F32,
      [MTPQ_FMT_FP8_MODELOPT_QTENSOR] = MTPQ_FP8_MODELOPT_QTENSOR,
      [MTPQ_FMT_FP8_MODELOPT_EXPORT] = MTPQ_FP8_MODELOPT_EXPORT};
  int cast = fmt == MTPQ_FMT_E4M3 ? 1 : fmt == MTPQ_FMT_E4M3_SAT ? 2 : 0;
  struct fp8_ctx c = {bf16, cols, 0.0f, recipe_of[fmt], cast, NULL};
  out->fmt = fmt;
  out->rows = rows;
  out->cols = cols;
  out->cols_padded = cols;
  if (!cast) {
    float amax = o->group_amax;
    if (amax < 0) {
      enum mtpq_status st = mtpq_amax_bf16(bf16, (size_t)(rows * cols), NULL, &amax, err);
      if (st) return st;
    }
    out->scale = mtpq_fp8_scale(amax, c.recipe, o->arith);
    c.divisor = mtpq_fp8_divisor(out->scale, c.recipe, o->arith);
  }
  out->data_bytes = (size_t)(rows * cols);
  out->data = malloc(out->data_bytes ? out->data_bytes : 1);
  if (!out->data)
    return mtpq_err_set(err, MTPQ_E_NOMEM, "FP8: out of memory for [%lld, %lld]", (long long)rows,
                        (long long)cols);
  c.out = out->data;
  run_rows(fp8_rows, &c, rows, o->threads);
  return MTPQ_OK;
}

#define FP8_WRAPPER(fn, fmt)                                                                  \
  static enum mtpq_status fn(const void *x, int64_t r, int64_t c,                              \
                             const struct mtpq_quant_opts *o, struct mtpq_qtensor *out,         \
                             struct mtpq_err *err) {                                           \
    return fp8_common(x, r, c, o, fmt, out, err);                                              \
  }
FP8_WRAPPER(fp8_f32_quantize, MTPQ_FMT_FP8)
FP8_WRAPPER(fp8_qtensor_quantize, MTPQ_FMT_FP8_MODELOPT_QTENSOR)
FP8_WRAPPER(fp8_export_quantize, MTPQ_FMT_FP8_MODELOPT_EXPORT)
FP8_WRAPPER(e4m3_quantize, MTPQ_FMT_E4M3)
FP8_WRAPPER(e4m3_sat_quantize, MTPQ_FMT_E4M3_SAT)

static void fp8_dequantize(const struct mtpq_qtensor *q, float *out) {
  float s = q->scale;
  for (size_t i = 0; i < q->data_bytes; i++) out[i] = mtpq_e4m3_to_f32(q->data[i]) * s;
}

static void e4m3_dequantize(const struct mtpq_qtensor *q, float *out) {
  for (size_t i = 0; i < q->data_bytes; i++) out[i] = mtpq_e4m3_to_f32(q->data[i]);
}

/* ---- the table ------------------------------------------------------------- */

#ifdef MTPQ_HAVE_CUDA
#define GPU_BUILT 1
#else
#define GPU_BUILT 0
#endif

static const struct mtpq_format_info formats[MTPQ_FMT_COUNT] = {
    [MTPQ_FMT_NVFP4] = {"nvfp4", 16, "E4M3 per 16 along rows + F32 global (amax/2688)",
                        "ModelOpt NVFP4 weights: E2M1 codes, even element in the low nibble",
                        nvfp4_quantize, nvfp4_dequantize, GPU_BUILT, 0.12},
    [MTPQ_FMT_FP8] = {"fp8", 0, "F32 per tensor (amax/448)",
                      "FP8 E4M3 per tensor, float32 recipe: e4m3(clamp(x/scale, +-448))",
                      fp8_f32_quantize, fp8_dequantize, GPU_BUILT, 0.04},
    [MTPQ_FMT_FP8_MODELOPT_QTENSOR] = {"fp8-modelopt-qtensor", 0, "bf16-valued F32 per tensor",
                                       "ModelOpt FP8QTensor on bf16: e4m3(bf16(x/bf16(amax/448)))",
                                       fp8_qtensor_quantize, fp8_dequantize, GPU_BUILT, 0.04},
    [MTPQ_FMT_FP8_MODELOPT_EXPORT] = {"fp8-modelopt-export", 0, "F32 per tensor (amax/448)",
                                      "ModelOpt HF export: e4m3(bf16(x/scale)), scale bf16-rounded on CUDA",
                                      fp8_export_quantize, fp8_dequantize, GPU_BUILT, 0.04},
    [MTPQ_FMT_E4M3] = {"e4m3", 0, "none", "elementwise float8_e4m3fn cast (torch: NaN above 464)",
                       e4m3_quantize, e4m3_dequantize, 0, 0.04},
    [MTPQ_FMT_E4M3_SAT] = {"e4m3-sat", 0, "none", "elementwise cast after clamping to [-448, 448]",
                           e4m3_sat_quantize, e4m3_dequantize, 0, 0.04},
};

const struct mtpq_format_info *mtpq_format_get(enum mtpq_format f) {
  return (unsigned)f < MTPQ_FMT_COUNT ? &formats[f] : NULL;
}

enum mtpq_format mtpq_format_parse(const char *name) {
  for (int f = 0; f < MTPQ_FMT_COUNT; f++)
    if (strcmp(formats[f].name, name) == 0) return (enum mtpq_format)f;
  return MTPQ_FMT_COUNT;
}

enum mtpq_status mtpq_quantize(enum mtpq_format f, const void *bf16, int64_t rows, int64_t cols,
                               const struct mtpq_quant_opts *o, struct mtpq_qtensor *out,
                               struct mtpq_err *err) {
  const struct mtpq_format_info *fi = mtpq_format_get(f);
  if (!fi) return mtpq_err_set(err, MTPQ_E_INVAL, "unknown format %d", (int)f);
  if (rows < 0 || cols < 0)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%s: negative shape [%lld, %lld]", fi->name,
                        (long long)rows, (long long)cols);
  struct mtpq_quant_opts d = mtpq_quant_default_opts();
  return fi->quantize(bf16, rows, cols, o ? o : &d, out, err);
}
