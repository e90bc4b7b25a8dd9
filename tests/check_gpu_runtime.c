/* CUDA drafter backend vs the CPU reference (label gpu; exits 77 without a
 * device or a CUDA build): the tiny model's stock drafter and its quantized
 * drafter (FP8 linears, NVFP4 experts, reduced FP8 head, written by the
 * library in a scratch directory), first-pass outputs and chained steps, and
 * the full greedy replay of every trace with both backends. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kernels/gpu_quant.h"
#include "kernels/replay.h"
#include "kernels/runtime.h"
#include "quant/drafter.h"
#include "testutil.h"

#define T MTPQ_TESTDATA "/tiny-qwen3next"
static char *qdir;

static double rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / den);
}

static void compare_backends(const char *drafter) {
  struct mtpq_err err = {0};
  struct mtpq_drafter *d = NULL;
  ck_assert_msg(mtpq_drafter_open(T "/model", drafter, &d, &err) == MTPQ_OK, "%s", err.msg);
  struct mtpq_st_file *tr = NULL;
  ck_assert_int_eq(mtpq_st_open(T "/traces.safetensors", &tr, &err), MTPQ_OK);
  int64_t H = mtpq_drafter_hidden(d);
  uint64_t rounds = 0, agree = 0;
  struct mtpq_accept_stats sc = {0}, sg = {0};
  for (size_t i = 0; i < mtpq_st_count(tr); i++) {
    const struct mtpq_tensor *xt = mtpq_st_at(tr, i);
    size_t nl = strlen(xt->name);
    if (nl < 7 || strcmp(xt->name + nl - 7, ".tokens")) continue;
    char hn[256];
    snprintf(hn, sizeof hn, "%.*s.hidden", (int)(nl - 7), xt->name);
    const struct mtpq_tensor *ht = mtpq_st_find(tr, hn);
    int64_t n = xt->shape[0];
    int32_t *x = malloc((size_t)xt->nbytes);
    memcpy(x, xt->data, (size_t)xt->nbytes);
    struct mtpq_session *c = NULL, *g = NULL;
    ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, n, 0, &c, &err), MTPQ_OK);
    ck_assert_msg(mtpq_session_open(d, MTPQ_BACKEND_CUDA, n, 0, &g, &err) == MTPQ_OK, "%s", err.msg);
    if (rounds == 0) { /* first pass over the prompt of the first trace */
      int32_t tok[192];
      int64_t pos[192];
      memcpy(tok, x + 1, sizeof tok);
      for (int k = 0; k < 192; k++) pos[k] = k;
      float *oc = malloc((size_t)(192 * H) * 4), *og = malloc((size_t)(192 * H) * 4);
      ck_assert_int_eq(mtpq_session_step(c, 192, tok, ht->data, 1, pos, oc, &err), MTPQ_OK);
      ck_assert_msg(mtpq_session_step(g, 192, tok, ht->data, 1, pos, og, &err) == MTPQ_OK, "%s", err.msg);
      double e = rel_err(og, oc, (size_t)(192 * H));
      printf("%s: first pass, CUDA vs CPU relative error %.3g\n", drafter ? drafter : "stock", e);
      ck_assert_msg(e < 1e-5, "first pass: relative error %.3g", e);
      for (int k = 0; k < 192; k++) {
        int32_t a, b;
        mtpq_session_head(c, oc + k * H, &a, NULL);
        mtpq_session_head(g, og + k * H, &b, NULL);
        agree += a == b;
        rounds++;
      }
      free(oc), free(og);
      mtpq_session_close(c), mtpq_session_close(g);
      ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, n, 0, &c, &err), MTPQ_OK);
      ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CUDA, n, 0, &g, &err), MTPQ_OK);
    }
    ck_assert_int_eq(mtpq_replay_trace(c, x, ht->data, n, 192, 3, &sc, &err), MTPQ_OK);
    ck_assert_msg(mtpq_replay_trace(g, x, ht->data, n, 192, 3, &sg, &err) == MTPQ_OK, "%s", err.msg);
    mtpq_session_close(c), mtpq_session_close(g);
    free(x);
  }
  printf("%s: argmax agreement on the first pass %llu/%llu; replay drafts cpu %llu gpu %llu, accepted cpu %llu/%llu/%llu "
         "gpu %llu/%llu/%llu\n", drafter ? drafter : "stock", (unsigned long long)agree, (unsigned long long)rounds,
         (unsigned long long)sc.drafts, (unsigned long long)sg.drafts, (unsigned long long)sc.accepted[0],
         (unsigned long long)sc.accepted[1], (unsigned long long)sc.accepted[2], (unsigned long long)sg.accepted[0],
         (unsigned long long)sg.accepted[1], (unsigned long long)sg.accepted[2]);
  ck_assert_uint_eq(agree, rounds);
  ck_assert_int_eq(memcmp(&sc, &sg, sizeof sc), 0);
  mtpq_st_close(tr);
  mtpq_drafter_close(d);
}

START_TEST(test_stock) { compare_backends(NULL); }
END_TEST

START_TEST(test_quantized) { compare_backends(qdir); }
END_TEST

int main(void) {
  struct mtpq_err err = {0};
  if (!mtpq_gpu_available(&err)) {
    printf("skip: %s\n", err.msg);
    return 77;
  }
  /* not tu_scratch(): check's assertions report to the runner even when
   * they pass, so none may run before srunner_run_all in CK_NOFORK mode */
  const char *base = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/mtpq-test-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    perror(dir);
    return 1;
  }
  qdir = tu_path(dir, "q");
  /* a quantized drafter of the tiny model: ids every 2nd id below 151669 */
  char *ids = tu_path(dir, "ids.safetensors");
  struct mtpq_st_writer *w = NULL;
  int64_t n = 75834, shape[1] = {75834};
  int64_t *v = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) v[i] = 2 * i;
  if (mtpq_stw_init(ids, &w, &err) || mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, &err) ||
      mtpq_stw_begin(w, &err) || mtpq_stw_write_all(w, "ids", v, (uint64_t)n * 8, &err) || mtpq_stw_commit(w, &err)) {
    printf("ids: %s\n", err.msg);
    return 1;
  }
  mtpq_stw_free(w);
  free(v);
  struct mtpq_drafter_params p = mtpq_drafter_default_params();
  p.target = T "/model", p.vocab_ids = ids, p.out = qdir, p.expert_input_scale = 0.1667;
  struct mtpq_plan *pl = NULL;
  if (mtpq_drafter_plan(&p, &pl, &err) || mtpq_drafter_write(&p, pl, NULL, NULL, &err)) {
    printf("quantize: %s\n", err.msg);
    return 1;
  }
  mtpq_plan_free(pl);
  Suite *s = suite_create("gpu_runtime");
  TCase *tc = tcase_create("runtime");
  tcase_add_test(tc, test_stock);
  tcase_add_test(tc, test_quantized);
  tcase_set_timeout(tc, 600);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  tu_rmtree(dir);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
