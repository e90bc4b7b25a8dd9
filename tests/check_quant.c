/* Unit tests for quant/: the golden vectors from ModelOpt/torch (CPU and CUDA
 * arithmetic, copied from shared/golden into testdata/golden), hand-checked
 * edge values from formats.md, the format table, threads, group amax. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "quant/quant.h"
#include "testutil.h"

static const char *golden_path[2] = {MTPQ_TESTDATA "/golden/nvfp4_fp8_golden_torchcuda.safetensors",
                                     MTPQ_TESTDATA "/golden/nvfp4_fp8_golden_torchcpu.safetensors"};
static const enum mtpq_arith golden_arith[2] = {MTPQ_ARITH_CUDA, MTPQ_ARITH_CPU};

/* Tensor "<a><b>" of a golden file; fails the test when absent. */
static const struct mtpq_tensor *need(const struct mtpq_st_file *f, const char *a, const char *b) {
  char name[128];
  snprintf(name, sizeof name, "%s%s", a, b);
  const struct mtpq_tensor *t = mtpq_st_find(f, name);
  ck_assert_msg(t != NULL, "golden tensor %s missing", name);
  return t;
}

static float f32_at(const struct mtpq_tensor *t) {
  float v;
  memcpy(&v, t->data, 4);
  return v;
}

/* Byte comparison reporting the first mismatch. */
static void expect_bytes(const char *what, const uint8_t *got, const uint8_t *want, size_t n) {
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (first == n) first = i;
      bad++;
    }
  ck_assert_msg(bad == 0, "%s: %zu of %zu bytes differ; first at %zu: got 0x%02x want 0x%02x", what,
                bad, n, first, first < n ? got[first] : 0, first < n ? want[first] : 0);
}

static struct mtpq_st_file *open_golden(int which) {
  struct mtpq_st_file *f = NULL;
  struct mtpq_err err = {0};
  ck_assert_msg(mtpq_st_open(golden_path[which], &f, &err) == MTPQ_OK, "%s", err.msg);
  return f;
}

START_TEST(test_golden_e4m3_table) {
  struct mtpq_st_file *f = open_golden(_i);
  const struct mtpq_tensor *in = need(f, "e4m3.all_bf16.", "input");
  const struct mtpq_tensor *raw = need(f, "e4m3.all_bf16.", "raw");
  const struct mtpq_tensor *sat = need(f, "e4m3.all_bf16.", "sat");
  ck_assert_uint_eq(in->numel, 65536);
  struct mtpq_qtensor q;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_E4M3, in->data, 1, 65536, NULL, &q, &err), MTPQ_OK);
  expect_bytes("e4m3 raw", q.data, raw->data, 65536);
  mtpq_qtensor_free(&q);
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_E4M3_SAT, in->data, 1, 65536, NULL, &q, &err), MTPQ_OK);
  expect_bytes("e4m3 sat", q.data, sat->data, 65536);
  mtpq_qtensor_free(&q);
  /* Decoding: every finite code decodes to a value that encodes back to it. */
  for (int c = 0; c < 256; c++) {
    float v = mtpq_e4m3_to_f32((uint8_t)c);
    if ((c & 0x7F) == 0x7F) ck_assert(isnan(v));
    else ck_assert_int_eq(mtpq_e4m3_from_f32(v), (c == 0x80) ? 0x80 : c);
  }
  mtpq_st_close(f);
}
END_TEST

static void check_nvfp4_case(const struct mtpq_st_file *f, enum mtpq_arith arith,
                             const char *pfx, const void *input, int64_t rows, int64_t cols,
                             int check_dequant) {
  char buf[160];
  struct mtpq_quant_opts o = mtpq_quant_default_opts();
  o.arith = arith;
  struct mtpq_qtensor q;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, input, rows, cols, &o, &q, &err), MTPQ_OK);
  const struct mtpq_tensor *w = need(f, pfx, ".weight");
  const struct mtpq_tensor *ws = need(f, pfx, ".weight_scale");
  const struct mtpq_tensor *s2 = need(f, pfx, ".weight_scale_2");
  ck_assert_uint_eq(q.data_bytes, w->nbytes);
  ck_assert_uint_eq(q.scale_bytes, ws->nbytes);
  ck_assert_int_eq(w->shape[1] * 2, q.cols_padded);
  uint32_t gb = mtpq_f32_bits(q.scale), wb = mtpq_f32_bits(f32_at(s2));
  ck_assert_msg(gb == wb, "%s weight_scale_2: got 0x%08x want 0x%08x", pfx, gb, wb);
  snprintf(buf, sizeof buf, "%s.weight_scale", pfx);
  expect_bytes(buf, q.scales, ws->data, ws->nbytes);
  snprintf(buf, sizeof buf, "%s.weight", pfx);
  expect_bytes(buf, q.data, w->data, w->nbytes);
  if (check_dequant) {
    const struct mtpq_tensor *dq = need(f, pfx, ".dequant");
    float *out = malloc((size_t)(rows * q.cols_padded) * sizeof *out);
    mtpq_format_get(MTPQ_FMT_NVFP4)->dequantize(&q, out);
    for (int64_t i = 0; i < rows * q.cols_padded; i++) {
      float want;
      memcpy(&want, (const char *)dq->data + 4 * i, 4);
      if (out[i] != want) ck_abort_msg("%s dequant[%lld]: got %.9g want %.9g", pfx, (long long)i,
                    out[i], want);
    }
    free(out);
  }
  mtpq_qtensor_free(&q);
}

START_TEST(test_golden_nvfp4) {
  static const char *cases[] = {"typ", "tail", "edge", "odd", "big"};
  struct mtpq_st_file *f = open_golden(_i);
  for (int c = 0; c < 5; c++) {
    char pfx[64];
    snprintf(pfx, sizeof pfx, "nvfp4.%s", cases[c]);
    const struct mtpq_tensor *in = need(f, pfx, ".input");
    check_nvfp4_case(f, golden_arith[_i], pfx, in->data, in->shape[0], in->shape[1],
                     strcmp(cases[c], "big") != 0);
  }
  /* Per-expert: four experts of one [4, 96, 128] tensor, each its own scale. */
  const struct mtpq_tensor *in = need(f, "nvfp4.experts.", "input");
  for (int e = 0; e < 4; e++) {
    char pfx[64];
    snprintf(pfx, sizeof pfx, "nvfp4.experts.%d", e);
    check_nvfp4_case(f, golden_arith[_i], pfx, (const char *)in->data + (size_t)e * 96 * 128 * 2,
                     96, 128, 0);
  }
  mtpq_st_close(f);
}
END_TEST

START_TEST(test_golden_fp8) {
  static const char *cases[] = {"typ", "tail", "edge"};
  struct mtpq_st_file *f = open_golden(_i);
  for (int c = 0; c < 3; c++) {
    char pfx[64], what[96];
    snprintf(pfx, sizeof pfx, "fp8.%s", cases[c]);
    const struct mtpq_tensor *in = need(f, pfx, ".input");
    struct mtpq_quant_opts o = mtpq_quant_default_opts();
    o.arith = golden_arith[_i];
    static const struct {
      enum mtpq_format fmt;
      const char *w, *s;
    } recipes[] = {{MTPQ_FMT_FP8, ".weight", ".weight_scale"},
                   {MTPQ_FMT_FP8_MODELOPT_QTENSOR, ".modelopt_weight", ".modelopt_weight_scale"}};
    for (int r = 0; r < 2; r++) {
      struct mtpq_qtensor q;
      struct mtpq_err err = {0};
      ck_assert_int_eq(mtpq_quantize(recipes[r].fmt, in->data, in->shape[0], in->shape[1], &o, &q, &err),
                       MTPQ_OK);
      const struct mtpq_tensor *w = need(f, pfx, recipes[r].w), *s = need(f, pfx, recipes[r].s);
      snprintf(what, sizeof what, "%s %s scale", pfx, mtpq_format_get(recipes[r].fmt)->name);
      ck_assert_msg(mtpq_f32_bits(q.scale) == mtpq_f32_bits(f32_at(s)), "%s: got 0x%08x want 0x%08x",
                    what, mtpq_f32_bits(q.scale), mtpq_f32_bits(f32_at(s)));
      snprintf(what, sizeof what, "%s %s weight", pfx, mtpq_format_get(recipes[r].fmt)->name);
      expect_bytes(what, q.data, w->data, w->nbytes);
      mtpq_qtensor_free(&q);
    }
  }
  mtpq_st_close(f);
}
END_TEST

/* formats.md 1.2 and 2.2 / 5: hand-checked values. */
START_TEST(test_edge_values) {
  ck_assert_uint_eq(mtpq_e4m3_from_f32(448.0f), 0x7E);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(464.0f), 0x7E);   /* tie to even */
  ck_assert_uint_eq(mtpq_e4m3_from_f32(465.0f), 0x7F);   /* NaN, no saturation */
  ck_assert_uint_eq(mtpq_e4m3_from_f32(479.0f), 0x7F);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(1e30f), 0x7F);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(-INFINITY), 0xFF);
  ck_assert_uint_eq(mtpq_e4m3_from_f32_sat(465.0f), 0x7E);
  ck_assert_uint_eq(mtpq_e4m3_from_f32_sat(-1e9f), 0xFE);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(ldexpf(1.0f, -10)), 0x00);      /* tie to even */
  ck_assert_uint_eq(mtpq_e4m3_from_f32(1.5f * ldexpf(1.0f, -10)), 0x01);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(-0.0f), 0x80);
  ck_assert_uint_eq(mtpq_e4m3_from_f32(ldexpf(1.0f, -6)), 0x08);
  /* E2M1 ties go to the even code; > 5 saturates; sign only for y < 0. */
  static const float ys[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 100.0f, -0.1f, -0.0f, 0.0f};
  static const uint8_t want[] = {0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 0, 0};
  for (size_t i = 0; i < sizeof ys / sizeof ys[0]; i++)
    ck_assert_msg(mtpq_e2m1_code(ys[i]) == want[i], "e2m1(%g) = %u want %u", ys[i],
                  mtpq_e2m1_code(ys[i]), want[i]);
  ck_assert_uint_eq(mtpq_e2m1_code(NAN), 7);
  /* CPU vs CUDA: the examples of formats.md. */
  ck_assert_uint_eq(mtpq_f32_bits(mtpq_nvfp4_global_scale(0.12890625f, MTPQ_ARITH_CUDA)), 0x38492493);
  ck_assert_uint_eq(mtpq_f32_bits(mtpq_nvfp4_global_scale(0.12890625f, MTPQ_ARITH_CPU)), 0x38492492);
  ck_assert_uint_eq(mtpq_f32_bits(mtpq_fp8_scale_f32(0.126953125f, MTPQ_ARITH_CUDA)), 0x3994924A);
  ck_assert_uint_eq(mtpq_f32_bits(mtpq_fp8_scale_f32(0.126953125f, MTPQ_ARITH_CPU)), 0x39949249);
  /* bf16 rounding: ties to even, NaN canonical. */
  ck_assert_uint_eq(mtpq_f32_to_bf16(mtpq_f32_from_bits(0x3F808000)), 0x3F80);
  ck_assert_uint_eq(mtpq_f32_to_bf16(mtpq_f32_from_bits(0x3F818000)), 0x3F82);
  ck_assert_uint_eq(mtpq_f32_to_bf16(NAN), 0x7FC0);
}
END_TEST

/* formats.md 2.9 test vector (from an independent re-implementation). */
START_TEST(test_formats_doc_vector) {
  static const uint16_t x[32] = {0x3cd3, 0x3ced, 0x3aae, 0xbde1, 0xbcb3, 0x3a24, 0xbca7, 0xbceb,
                                 0x3b83, 0x3b2f, 0x3c33, 0xbc96, 0x38d2, 0xbaaa, 0xbcf7, 0x3c30,
                                 0x3bd2, 0x3d44, 0x3b85, 0xbb3e, 0x0000, 0x8000, 0x3c95, 0xbbf0,
                                 0x3b8f, 0x3ca8, 0x3c64, 0x3b28, 0xbcb1, 0x3c12, 0x3ac9, 0x3c6c};
  static const uint8_t w[16] = {0x33, 0xf0, 0x0a, 0xba, 0x00, 0xa1, 0x80, 0x1b,
                                0x72, 0x91, 0x00, 0xa4, 0x51, 0x14, 0x2d, 0x40};
  struct mtpq_qtensor q;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, x, 1, 32, NULL, &q, &err), MTPQ_OK);
  ck_assert_uint_eq(mtpq_f32_bits(q.scale), 0x382B6DB7);
  ck_assert_uint_eq(q.scales[0], 0x7E);
  ck_assert_uint_eq(q.scales[1], 0x74);
  expect_bytes("doc vector", q.data, w, 16);
  mtpq_qtensor_free(&q);
}
END_TEST

/* Gaussian bf16 data, seeded. */
static uint16_t *gaussian_bf16(size_t n, uint64_t seed, float sigma) {
  uint16_t *x = malloc(n * 2);
  uint64_t s = seed * 7 + 3;
  for (size_t i = 0; i < n; i++) {
    double u1 = ((tu_rand(&s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (tu_rand(&s) >> 11) / 9007199254740992.0;
    x[i] = mtpq_f32_to_bf16((float)(sigma * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
  }
  return x;
}

/* Every format in the table round-trips within its stated error bound, and
 * multi-threaded output equals single-threaded output. */
START_TEST(test_format_table) {
  const struct mtpq_format_info *fi = mtpq_format_get((enum mtpq_format)_i);
  ck_assert_ptr_nonnull(fi);
  ck_assert(fi->quantize != NULL); /* (function pointers: not through ck_assert_ptr's void *) */
  ck_assert(fi->dequantize != NULL);
  ck_assert_int_eq(mtpq_format_parse(fi->name), _i);
  ck_assert(fi->rmse_bound > 0);
  int64_t rows = 64, cols = 200; /* not a multiple of 16 on purpose */
  uint16_t *x = gaussian_bf16((size_t)(rows * cols), (uint64_t)_i, 0.02f);
  struct mtpq_qtensor q1, q4;
  struct mtpq_err err = {0};
  struct mtpq_quant_opts o = mtpq_quant_default_opts();
  ck_assert_int_eq(mtpq_quantize((enum mtpq_format)_i, x, rows, cols, &o, &q1, &err), MTPQ_OK);
  o.threads = 4;
  ck_assert_int_eq(mtpq_quantize((enum mtpq_format)_i, x, rows, cols, &o, &q4, &err), MTPQ_OK);
  expect_bytes("threads", q4.data, q1.data, q1.data_bytes);
  if (q1.scales) expect_bytes("threads scales", q4.scales, q1.scales, q1.scale_bytes);
  float *dq = malloc((size_t)(rows * q1.cols_padded) * sizeof *dq);
  fi->dequantize(&q1, dq);
  double se = 0, sx = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double v = mtpq_bf16_to_f32(x[r * cols + c]);
      double d = dq[r * q1.cols_padded + c] - v;
      se += d * d;
      sx += v * v;
    }
  double rel = sqrt(se / sx);
  ck_assert_msg(rel < fi->rmse_bound, "%s: relative RMSE %.4f above bound %.4f", fi->name, rel,
                fi->rmse_bound);
  if (_i == MTPQ_FMT_NVFP4) /* padding columns dequantize to zero */
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = cols; c < q1.cols_padded; c++) ck_assert(dq[r * q1.cols_padded + c] == 0.0f);
  free(dq);
  free(x);
  mtpq_qtensor_free(&q1);
  mtpq_qtensor_free(&q4);
}
END_TEST

START_TEST(test_group_and_bad_values) {
  int64_t rows = 32, cols = 64;
  uint16_t *gate = gaussian_bf16((size_t)(rows * cols), 1, 0.02f);
  uint16_t *up = gaussian_bf16((size_t)(rows * cols), 2, 0.05f);
  struct mtpq_err err = {0};
  float ag, au;
  ck_assert_int_eq(mtpq_amax_bf16(gate, (size_t)(rows * cols), "gate", &ag, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_amax_bf16(up, (size_t)(rows * cols), "up", &au, &err), MTPQ_OK);
  ck_assert(au > ag);
  struct mtpq_quant_opts o = mtpq_quant_default_opts();
  o.group_amax = au; /* group max */
  struct mtpq_qtensor qg, qu, qown;
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, gate, rows, cols, &o, &qg, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, up, rows, cols, &o, &qu, &err), MTPQ_OK);
  ck_assert_uint_eq(mtpq_f32_bits(qg.scale), mtpq_f32_bits(qu.scale));
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, gate, rows, cols, NULL, &qown, &err), MTPQ_OK);
  ck_assert(qown.scale < qg.scale); /* its own, smaller amax */
  mtpq_qtensor_free(&qg);
  mtpq_qtensor_free(&qu);
  mtpq_qtensor_free(&qown);
  /* All-zero tensor: zero codes, scale 1.0 blocks, S2 = 0 (not NaN bytes). */
  uint16_t zeros[32] = {0};
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, zeros, 1, 32, NULL, &qg, &err), MTPQ_OK);
  ck_assert(qg.scale == 0.0f);
  ck_assert_uint_eq(qg.scales[0], MTPQ_E4M3_ONE);
  for (int i = 0; i < 16; i++) ck_assert_uint_eq(qg.data[i], 0);
  mtpq_qtensor_free(&qg);
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_FP8, zeros, 1, 32, NULL, &qg, &err), MTPQ_OK);
  for (int i = 0; i < 32; i++) ck_assert_uint_eq(qg.data[i], 0);
  mtpq_qtensor_free(&qg);
  /* NaN and Inf are refused with the index. */
  gate[77] = 0x7FC0;
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, gate, rows, cols, NULL, &qg, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "element 77 is NaN"));
  gate[77] = 0xFF80;
  ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_FP8, gate, rows, cols, NULL, &qg, &err), MTPQ_E_BAD_VALUE);
  ck_assert_ptr_nonnull(strstr(err.msg, "infinite"));
  free(gate);
  free(up);
}
END_TEST

/* The vectorized CPU row kernels (quant/cpu_rows.c) against the scalar
 * per-block / per-element functions the CUDA kernels use, on heavy-tailed
 * data with exact ties, zeros and every recipe. */
START_TEST(test_rows_equal_block_reference) {
  static const int64_t widths[] = {16, 40, 200, 1040, 4096};
  for (size_t wi = 0; wi < 5; wi++) {
    int64_t rows = 7, cols = widths[wi], cols16 = (cols + 15) / 16 * 16;
    uint16_t *x = gaussian_bf16((size_t)(rows * cols), 100 + wi, 0.03f);
    uint64_t s = 5 + wi;
    for (int64_t i = 0; i < rows * cols; i += 3) /* grid values and ties */
      x[i] = mtpq_f32_to_bf16((float)((int)(tu_rand(&s) % 25) - 12) * 0.25f * 0.01f);
    x[5] = mtpq_f32_to_bf16(-3.0f); /* sets the amax */
    for (int arith = 0; arith < 2; arith++) {
      struct mtpq_quant_opts o = mtpq_quant_default_opts();
      o.arith = (enum mtpq_arith)arith;
      struct mtpq_qtensor q;
      struct mtpq_err err = {0};
      ck_assert_int_eq(mtpq_quantize(MTPQ_FMT_NVFP4, x, rows, cols, &o, &q, &err), MTPQ_OK);
      uint8_t packed[8];
      for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < cols16 / 16; b++) {
          uint16_t blk[16] = {0};
          for (int i = 0; i < 16 && b * 16 + i < cols; i++) blk[i] = x[r * cols + b * 16 + i];
          uint8_t sc = mtpq_nvfp4_block(blk, q.scale, packed);
          ck_assert_msg(sc == q.scales[r * (cols16 / 16) + b], "width %lld row %lld block %lld scale",
                        (long long)cols, (long long)r, (long long)b);
          ck_assert_msg(memcmp(packed, q.data + r * (cols16 / 2) + b * 8, 8) == 0,
                        "width %lld row %lld block %lld codes", (long long)cols, (long long)r, (long long)b);
        }
      mtpq_qtensor_free(&q);
      for (int f = MTPQ_FMT_FP8; f <= MTPQ_FMT_FP8_MODELOPT_EXPORT; f++) {
        static const enum mtpq_fp8_recipe rec[] = {MTPQ_FP8_F32, MTPQ_FP8_MODELOPT_QTENSOR,
                                                   MTPQ_FP8_MODELOPT_EXPORT};
        enum mtpq_fp8_recipe r = rec[f - MTPQ_FMT_FP8];
        ck_assert_int_eq(mtpq_quantize((enum mtpq_format)f, x, rows, cols, &o, &q, &err), MTPQ_OK);
        float div = mtpq_fp8_divisor(q.scale, r, o.arith);
        for (int64_t i = 0; i < rows * cols; i++)
          if (q.data[i] != mtpq_fp8_element(x[i], div, r)) ck_abort_msg("%s element %lld: 0x%02x vs 0x%02x",
                        mtpq_format_get((enum mtpq_format)f)->name, (long long)i, q.data[i],
                        mtpq_fp8_element(x[i], div, r));
        mtpq_qtensor_free(&q);
      }
    }
    free(x);
  }
  /* The select-based E4M3 cast of the FP8 rows, on every bf16 pattern scaled
   * into every range (subnormal, normal, tie, overflow-to-NaN). */
  uint16_t *all = malloc(65536 * 2);
  for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  for (int i = 0; i < 65536; i++)
    if ((all[i] & 0x7F80) == 0x7F80) all[i] = 0; /* inputs are finite */
  struct mtpq_quant_opts o = mtpq_quant_default_opts();
  o.group_amax = 448.0f * 448.0f; /* divisor 448: exercises every output range */
  struct mtpq_qtensor q;
  struct mtpq_err err = {0};
  for (int f = MTPQ_FMT_FP8; f <= MTPQ_FMT_FP8_MODELOPT_EXPORT; f++) {
    static const enum mtpq_fp8_recipe rec[] = {MTPQ_FP8_F32, MTPQ_FP8_MODELOPT_QTENSOR, MTPQ_FP8_MODELOPT_EXPORT};
    ck_assert_int_eq(mtpq_quantize((enum mtpq_format)f, all, 1, 65536, &o, &q, &err), MTPQ_OK);
    float div = mtpq_fp8_divisor(q.scale, rec[f - MTPQ_FMT_FP8], o.arith);
    for (int i = 0; i < 65536; i++)
      if (q.data[i] != mtpq_fp8_element(all[i], div, rec[f - MTPQ_FMT_FP8])) ck_abort_msg("bf16 0x%04x", i);
    mtpq_qtensor_free(&q);
  }
  free(all);
}
END_TEST

/* The division-free E2M1 paths the GPU kernels use (numerics.h) against
 * the exact ones. */
static int slow_mode(void) { return getenv("MTPQ_SLOW") != NULL; }

/* mtpq_round_f16 (the FP16 rounding of the prefill's expert inputs) against
 * binary16 decoded here: every finite value stays, every midpoint between
 * neighbours goes to the one with the even code, a hair off a midpoint goes
 * to the nearer; 65520 and up overflow, NaN stays NaN */
static double f16_value(int c) { /* positive codes: exponent field e, mantissa m */
  const int e = (c >> 10) & 31, m = c & 1023;
  return e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
}
START_TEST(test_round_f16) {
  for (int c = 0; c < 0x7C00; c++) {
    const float v = (float)f16_value(c);
    ck_assert_msg(mtpq_round_f16(v) == v && mtpq_round_f16(-v) == -v, "code %04x (%a) moved", c, v);
    if (c + 1 < 0x7C00) {
      const double lo = f16_value(c), hi = f16_value(c + 1), mid = (lo + hi) / 2;
      const float want = (float)((c & 1) ? hi : lo), got = mtpq_round_f16((float)mid);
      ck_assert_msg((double)(float)mid == mid && got == want, "midpoint of %04x: %a, want %a", c, got, want);
      ck_assert(mtpq_round_f16(nextafterf((float)mid, 0.0f)) == (float)lo);
      ck_assert(mtpq_round_f16(nextafterf((float)mid, INFINITY)) == (float)hi);
    }
  }
  ck_assert(mtpq_round_f16(65519.99f) == 65504.0f && isinf(mtpq_round_f16(65520.0f)));
  ck_assert(isinf(mtpq_round_f16(-1e30f)) && mtpq_round_f16(-1e30f) < 0 && isnan(mtpq_round_f16(NAN)));
  ck_assert(mtpq_round_f16(1e-40f) == 0.0f && mtpq_round_f16(0x1p-25f) == 0.0f);
}
END_TEST

START_TEST(test_e2m1_index_rn) {
  /* Unit: every pattern within 4096 ulps of each decision point and of the
   * range changes, plus every 257th pattern up to 16. Slow: all 2^31. */
  static const float pts[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.0f, 2.5f, 3.5f, 4.0f, 5.0f, 6.0f};
  uint64_t checked = 0;
  if (slow_mode()) {
    for (uint32_t u = 0; u <= 0x7FFFFFFFu; u++) {
      float m = mtpq_f32_from_bits(u);
      if (mtpq_e2m1_index_rn(m) != (mtpq_e2m1_code(m) & 7)) ck_abort_msg( "bits 0x%08x", u);
      if (u == 0x7FFFFFFFu) break;
    }
    return;
  }
  for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
    uint32_t c = mtpq_f32_bits(pts[k]);
    for (uint32_t u = c - 4096; u <= c + 4096; u++, checked++) {
      float m = mtpq_f32_from_bits(u);
      if (mtpq_e2m1_index_rn(m) != (mtpq_e2m1_code(m) & 7)) ck_abort_msg( "m %.9g", m);
    }
  }
  for (uint32_t u = 0; u < 0x41800000u; u += 257, checked++) {
    float m = mtpq_f32_from_bits(u);
    if (mtpq_e2m1_index_rn(m) != (mtpq_e2m1_code(m) & 7)) ck_abort_msg( "m %.9g", m);
  }
  ck_assert_uint_eq(mtpq_e2m1_index_rn(NAN), 7);
  ck_assert_uint_eq(mtpq_e2m1_index_rn(INFINITY), 7);
  ck_assert_uint_gt(checked, 4000000);
}
END_TEST

START_TEST(test_e2m1_code_div) {
  static const float bounds[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint64_t s = 77, n = slow_mode() ? 400000000ULL : 3000000ULL;
  for (uint64_t it = 0; it < n; it++) {
    /* x: any finite bf16; g: positive normal, biased towards the ranges
     * real scales live in; every third case is steered onto a decision
     * point by choosing g = x / b and stepping a few ulps. */
    uint16_t xb = (uint16_t)(tu_rand(&s) >> 48);
    if ((xb & 0x7F80) == 0x7F80) continue;
    float x = mtpq_bf16_to_f32(xb);
    float g;
    if (it % 3 == 0 && x != 0.0f) {
      float b = bounds[tu_rand(&s) % 7];
      float ax = x < 0 ? -x : x;
      g = ax / b;
      int step = (int)(tu_rand(&s) % 41) - 20;
      g = mtpq_f32_from_bits(mtpq_f32_bits(g) + (uint32_t)step);
    } else {
      int e = (int)(tu_rand(&s) % 60) - 40;
      g = ldexpf(1.0f + (float)(tu_rand(&s) >> 40) / 16777216.0f, e);
    }
    if (!(g > 0.0f) || isinf(g)) continue;
    float rg = 1.0f / g;
    uint8_t want = mtpq_e2m1_code(x / g), got = mtpq_e2m1_code_div(x, g, rg);
    if (got != want) ck_abort_msg("x %.9g (0x%04x) g %.9g (0x%08x): got %u want %u", x, xb, g,
                  mtpq_f32_bits(g), got, want);
  }
  /* FP8: the same for every recipe, with divisors steered so x / d lands
   * near E4M3 and bf16 rounding midpoints. */
  for (uint64_t it = 0; it < n; it++) {
    uint16_t xb = (uint16_t)(tu_rand(&s) >> 48);
    if ((xb & 0x7F80) == 0x7F80) continue;
    float x = mtpq_bf16_to_f32(xb), ax = x < 0 ? -x : x;
    float d;
    if (it % 2 == 0 && ax != 0.0f) {
      /* a target with a midpoint in its low bits, then a few ulps around it */
      uint32_t tb = (uint32_t)(0x3C000000u + (tu_rand(&s) >> 40) % 0x7800000u);
      tb = (it % 4 == 0) ? (tb & ~0xFFFFFu) | 0x80000u : (tb & ~0xFFFFu) | 0x8000u;
      d = ax / mtpq_f32_from_bits(tb);
      d = mtpq_f32_from_bits(mtpq_f32_bits(d) + (uint32_t)((int)(tu_rand(&s) % 41) - 20));
    } else {
      d = ldexpf(1.0f + (float)(tu_rand(&s) >> 40) / 16777216.0f, (int)(tu_rand(&s) % 50) - 30);
    }
    if (!(d > 0.0f) || isinf(d)) continue;
    for (int rc = 0; rc < 3; rc++) {
      enum mtpq_fp8_recipe r = (enum mtpq_fp8_recipe)rc;
      uint8_t want = mtpq_fp8_element(xb, d, r), got = mtpq_fp8_element_fast(xb, d, 1.0f / d, r);
      if (got != want) ck_abort_msg("recipe %d x 0x%04x d %.9g (0x%08x): got 0x%02x want 0x%02x", rc, xb, d,
                                    mtpq_f32_bits(d), got, want);
    }
  }
  /* Whole blocks: the fast block function equals the exact one. */
  for (int t = 0; t < 2000; t++) {
    uint16_t *x = gaussian_bf16(16, (uint64_t)t + 1000, t % 2 ? 0.02f : 3.0f);
    if (t % 5 == 0)
      for (int i = 0; i < 16; i += 2) x[i] = mtpq_f32_to_bf16((float)(i - 8) * 0.125f);
    float S2 = mtpq_nvfp4_global_scale(0.5f + (float)(t % 7), (enum mtpq_arith)(t & 1));
    uint8_t a[8], b[8];
    uint8_t sa = mtpq_nvfp4_block(x, S2, a), sb = mtpq_nvfp4_block_fast(x, S2, b);
    ck_assert_uint_eq(sa, sb);
    ck_assert_int_eq(memcmp(a, b, 8), 0);
    free(x);
  }
}
END_TEST

static Suite *quant_suite(void) {
  Suite *s = suite_create("quant");
  TCase *tc = tcase_create("golden");
  tcase_add_loop_test(tc, test_golden_e4m3_table, 0, 2);
  tcase_add_loop_test(tc, test_golden_nvfp4, 0, 2);
  tcase_add_loop_test(tc, test_golden_fp8, 0, 2);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  tc = tcase_create("numerics");
  tcase_add_test(tc, test_edge_values);
  tcase_add_test(tc, test_formats_doc_vector);
  tcase_add_loop_test(tc, test_format_table, 0, MTPQ_FMT_COUNT);
  tcase_add_test(tc, test_group_and_bad_values);
  tcase_add_test(tc, test_rows_equal_block_reference);
  tcase_add_test(tc, test_round_f16);
  tcase_add_test(tc, test_e2m1_index_rn);
  tcase_add_test(tc, test_e2m1_code_div);
  tcase_set_timeout(tc, slow_mode() ? 3600 : 120);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(quant_suite(), 0); }
