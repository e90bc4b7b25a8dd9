/* GPU kernels vs the C reference, byte for byte (label gpu; exits 77 = skip
 * without a CUDA device or a CUDA build). Fresh seeded random inputs of
 * several shapes (including widths that are not a multiple of 16 and
 * heavy-tailed data), both arithmetics, own and group amax, and the golden
 * vectors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/safetensors.h"
#include "quant/gpu_quant.h"
#include "testutil.h"

static uint64_t run_seed;

static uint16_t *random_bf16(size_t n, uint64_t seed, int heavy) {
  uint16_t *x = malloc(n * 2 + 2);
  uint64_t s = seed * 31 + 7;
  for (size_t i = 0; i < n; i++) {
    double u1 = ((tu_rand(&s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (tu_rand(&s) >> 11) / 9007199254740992.0;
    double g = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
    if (heavy) g = g / pow(((tu_rand(&s) >> 11) + 1.0) / 9007199254740993.0, 0.7);
    x[i] = mtpq_f32_to_bf16((float)(0.02 * g));
  }
  if (n > 100) x[n / 3] = 0;       /* exact zero */
  if (n > 200) x[n / 2] = 0x8000;  /* negative zero */
  return x;
}

static void compare(const char *what, const struct mtpq_qtensor *c, const struct mtpq_qtensor *g) {
  ck_assert_msg(mtpq_f32_bits(c->scale) == mtpq_f32_bits(g->scale), "%s: scale cpu 0x%08x gpu 0x%08x",
                what, mtpq_f32_bits(c->scale), mtpq_f32_bits(g->scale));
  ck_assert_uint_eq(c->data_bytes, g->data_bytes);
  ck_assert_uint_eq(c->scale_bytes, g->scale_bytes);
  for (size_t i = 0; i < c->data_bytes; i++)
    if (c->data[i] != g->data[i]) ck_abort_msg("%s: data byte %zu (block %zu): cpu 0x%02x gpu 0x%02x",
                  what, i, c->fmt == MTPQ_FMT_NVFP4 ? i / 8 : i, c->data[i], g->data[i]);
  for (size_t i = 0; i < c->scale_bytes; i++)
    if (c->scales[i] != g->scales[i]) ck_abort_msg("%s: block scale %zu: cpu 0x%02x gpu 0x%02x", what,
                  i, c->scales[i], g->scales[i]);
}

static const int64_t shapes[][2] = {{1, 16}, {3, 40}, {64, 128}, {257, 1040}, {512, 2048}, {96, 8192}};

START_TEST(test_gpu_equals_cpu) {
  for (int f = 0; f < MTPQ_FMT_COUNT; f++) {
    const struct mtpq_format_info *fi = mtpq_format_get((enum mtpq_format)f);
    if (!fi->has_gpu) continue;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
      int64_t rows = shapes[si][0], cols = shapes[si][1];
      for (int arith = 0; arith < 2; arith++)
        for (int grp = 0; grp < 2; grp++) {
          uint16_t *x = random_bf16((size_t)(rows * cols), run_seed + si * 13 + (uint64_t)_i, _i);
          struct mtpq_quant_opts o = mtpq_quant_default_opts();
          o.arith = (enum mtpq_arith)arith;
          o.group_amax = grp ? 0.75f : -1.0f;
          struct mtpq_qtensor c, g;
          struct mtpq_err err = {0};
          ck_assert_int_eq(mtpq_quantize((enum mtpq_format)f, x, rows, cols, &o, &c, &err), MTPQ_OK);
          ck_assert_msg(mtpq_gpu_quantize((enum mtpq_format)f, x, rows, cols, &o, &g, &err) == MTPQ_OK,
                        "%s", err.msg);
          char what[128];
          snprintf(what, sizeof what, "%s [%lld,%lld] arith=%s group=%d heavy=%d", fi->name,
                   (long long)rows, (long long)cols, arith ? "cpu" : "cuda", grp, _i);
          compare(what, &c, &g);
          mtpq_qtensor_free(&c);
          mtpq_qtensor_free(&g);
          free(x);
        }
    }
  }
}
END_TEST

/* Every finite bf16 pattern through every FP8 recipe with divisor exactly
 * 1.0 (CPU arithmetic, amax 448): exhaustive for the E4M3 conversion of
 * bf16-valued inputs, which is all the ModelOpt recipes ever convert. */
START_TEST(test_gpu_fp8_all_bf16) {
  uint16_t *all = malloc(65536 * 2);
  for (int i = 0; i < 65536; i++) all[i] = (i & 0x7F80) == 0x7F80 ? 0 : (uint16_t)i;
  for (int f = MTPQ_FMT_FP8; f <= MTPQ_FMT_FP8_MODELOPT_EXPORT; f++) {
    struct mtpq_quant_opts o = mtpq_quant_default_opts();
    o.arith = MTPQ_ARITH_CPU;
    o.group_amax = 448.0f;
    struct mtpq_qtensor c, g;
    struct mtpq_err err = {0};
    ck_assert_int_eq(mtpq_quantize((enum mtpq_format)f, all, 256, 256, &o, &c, &err), MTPQ_OK);
    ck_assert_msg(c.scale == 1.0f || f == MTPQ_FMT_FP8_MODELOPT_QTENSOR, "scale %g", c.scale);
    ck_assert_int_eq(mtpq_gpu_quantize((enum mtpq_format)f, all, 256, 256, &o, &g, &err), MTPQ_OK);
    compare(mtpq_format_get((enum mtpq_format)f)->name, &c, &g);
    mtpq_qtensor_free(&c);
    mtpq_qtensor_free(&g);
  }
  free(all);
}
END_TEST

START_TEST(test_gpu_golden) {
  static const char *paths[2] = {MTPQ_TESTDATA "/golden/nvfp4_fp8_golden_torchcuda.safetensors",
                                 MTPQ_TESTDATA "/golden/nvfp4_fp8_golden_torchcpu.safetensors"};
  struct mtpq_st_file *f = NULL;
  struct mtpq_err err = {0};
  ck_assert_int_eq(mtpq_st_open(paths[_i], &f, &err), MTPQ_OK);
  static const char *cases[] = {"typ", "tail", "edge", "odd", "big"};
  for (int k = 0; k < 5; k++) {
    char name[64];
    snprintf(name, sizeof name, "nvfp4.%s.input", cases[k]);
    const struct mtpq_tensor *in = mtpq_st_find(f, name);
    ck_assert_ptr_nonnull(in);
    snprintf(name, sizeof name, "nvfp4.%s.weight", cases[k]);
    const struct mtpq_tensor *w = mtpq_st_find(f, name);
    struct mtpq_quant_opts o = mtpq_quant_default_opts();
    o.arith = _i ? MTPQ_ARITH_CPU : MTPQ_ARITH_CUDA;
    struct mtpq_qtensor g;
    ck_assert_int_eq(mtpq_gpu_quantize(MTPQ_FMT_NVFP4, in->data, in->shape[0], in->shape[1], &o, &g, &err),
                     MTPQ_OK);
    ck_assert_int_eq(memcmp(g.data, w->data, w->nbytes), 0);
    mtpq_qtensor_free(&g);
  }
  mtpq_st_close(f);
}
END_TEST

int main(void) {
  if (tu_no_gpu()) return 77;
  const char *env = getenv("MTPQ_TEST_SEED");
  run_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
  printf("device: %s, seed %llu (set MTPQ_TEST_SEED to repeat)\n", mtpq_gpu_name(),
         (unsigned long long)run_seed);
  Suite *s = suite_create("gpu");
  TCase *tc = tcase_create("quant");
  tcase_add_loop_test(tc, test_gpu_equals_cpu, 0, 2);
  tcase_add_loop_test(tc, test_gpu_golden, 0, 2);
  tcase_add_test(tc, test_gpu_fp8_all_bf16);
  tcase_set_timeout(tc, 300);
  suite_add_tcase(s, tc);
  return tu_run_suite(s, 1);
}
