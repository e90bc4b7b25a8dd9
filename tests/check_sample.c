/* The sampled live loop against the target's own sampling distribution
 * (issue 49's proof; label stats: the default suite runs it, the ASan pass
 * does not, its 80,000 decodes being slow there). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decode.h"
#include "kernels/sample.h"
#include "kernels/target.h"
#include "tests/chi2.h"
#include "testutil.h"

/* Sampled speculative decoding is distributed as the target's own sampling
 * (the proof of issue 49): on hybrid-mtp (V 300, its own MTP layer as the
 * drafter, k = 2), the token emitted right after the first sampled one
 * (a draft accepted with probability min(1, p/q), or a draw from
 * max(0, p - q)) over 20,000 seeded runs, against the exact distribution
 * sum_a p0(a) p1(. | a) computed from the target's logits; chi-square over
 * the tokens expected at least 5 times (the rest pooled), p > 0.01, for two
 * settings, with and without speculation. */
START_TEST(test_sampled_distribution) {
  static const struct mtpq_sampling set[2] = {{1.0f, 0.9f, 0, 11}, {0.7f, 1.0f, 20, 12}};
  const struct mtpq_sampling *sp = &set[_i / 2];
  const int spec = _i % 2;
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(mtpq_target_open(MTPQ_TESTDATA "/target/hybrid-mtp", &t, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_msg(mtpq_rt_model_open(MTPQ_TESTDATA "/target/hybrid-mtp", NULL, &d, &err) == MTPQ_OK, "%s", err.msg);
  enum { P = 6, RUNS = 20000 };
  const int32_t prompt[P + 1] = {17, 201, 5, 99, 240, 63, 0};
  const int64_t V = mtpq_target_vocab(t);
  float *lg = malloc((size_t)V * 4), *p0 = malloc((size_t)V * 4), *p1 = malloc((size_t)V * 4);
  double *ex = calloc((size_t)V, sizeof *ex);
  uint64_t *keys = malloc((size_t)V * 8);
  int64_t *obs = calloc((size_t)V, sizeof *obs);
  /* the exact distribution of the second sampled token */
  struct mtpq_target_seq *s = NULL;
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, P + 2, 1, &s, &err), MTPQ_OK);
  for (int i = 0; i < P; i++) ck_assert_int_eq(mtpq_target_step(s, prompt[i], NULL, lg, NULL, &err), MTPQ_OK);
  mtpq_target_seq_close(s);
  mtpq_sample_probs(lg, V, sp, p0, keys);
  for (int64_t a = 0; a < V; a++) {
    if (p0[a] <= 0) continue;
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, P + 2, 1, &s, &err), MTPQ_OK);
    for (int i = 0; i < P; i++) ck_assert_int_eq(mtpq_target_step(s, prompt[i], NULL, NULL, NULL, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_step(s, (int32_t)a, NULL, lg, NULL, &err), MTPQ_OK);
    mtpq_target_seq_close(s);
    mtpq_sample_probs(lg, V, sp, p1, keys);
    for (int64_t v = 0; v < V; v++) ex[v] += (double)p0[a] * p1[v] * RUNS;
  }
  struct mtpq_accept_stats all = {0};
  for (int r = 0; r < RUNS; r++) {
    int32_t out[P + 2];
    struct mtpq_accept_stats st;
    ck_assert_msg(mtpq_decode_sample(t, spec ? d : NULL, MTPQ_BACKEND_CPU, prompt, P, 2, 2, sp, (uint64_t)r, out, &st,
                                     NULL, &err) == MTPQ_OK,
                  "%s", err.msg);
    obs[out[P + 1]]++;
    if (spec) st.k = 2, mtpq_accept_add(&all, &st);
  }
  double chi;
  int bins;
  const double pv = chi2_test(ex, obs, V, &chi, &bins);
  printf("sampled (temperature %.1f, top-p %.1f, top-k %d) %s: chi-square %.1f over %d bins, p = %.3f", sp->temperature,
         sp->top_p, sp->top_k, spec ? "with speculation (k = 2)" : "without speculation", chi, bins, pv);
  if (spec)
    printf("; first draft accepted in %llu of %llu rounds", (unsigned long long)all.accepted[0],
           (unsigned long long)all.drafts);
  printf("\n");
  ck_assert_msg(bins >= 3, "only %d bins", bins);
  ck_assert_msg(pv > 0.01, "the emitted tokens are not distributed as the target's sampling: p = %g", pv);
  if (spec) /* both branches of the rejection step ran */
    ck_assert(all.accepted[0] > RUNS / 20 && all.accepted[0] < all.drafts - RUNS / 20);
  mtpq_rt_model_close(d);
  mtpq_target_close(t);
  free(lg), free(p0), free(p1), free(ex), free(keys), free(obs);
}
END_TEST

int main(void) {
  Suite *su = suite_create("sample");
  TCase *tc = tcase_create("distribution");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_sampled_distribution, 0, 4);
  suite_add_tcase(su, tc);
  return tu_run_suite(su, 0);
}
