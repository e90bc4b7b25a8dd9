/* The CUDA sampler (kernels/cuda/sampler.cu) against the CPU reference
 * (kernels/sample.c, through the CPU sampler) on the same logits and the
 * same random streams: the same kept tokens and probabilities within float
 * rounding, the same draws, the same rejection steps and the same stream
 * left behind; the rejection step's output distributed as the target's
 * sampling (chi-square); and the sampled live loop on the CUDA backend, a
 * batch equal to each sequence alone. Label gpu: exits 77 without a
 * device. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decode.h"
#include "kernels/sampler.h"
#include "kernels/target.h"
#include "kernels/traces.h"
#include "quant/gpu_quant.h"
#include "tests/chi2.h"
#include "testutil.h"

enum { VQ = 151936 }; /* Qwen3-Next's vocabulary */

static double unif(uint64_t *s) { return mtpq_uniform(s); }

/* logits of shape 0: Gaussian, sd 3; 1: the same with one token at 30; 2: eight distinct values (ties
 * everywhere); 3: a reduced head's row (-inf at two ids in three, Gaussian else) */
static void make_logits(float *l, int64_t V, int shape, uint64_t seed) {
  uint64_t s;
  mtpq_rng_seed(&s, seed, (uint64_t)shape);
  for (int64_t v = 0; v < V; v++) {
    const double g = sqrt(-2 * log(1 - unif(&s))) * cos(6.283185307179586 * unif(&s));
    l[v] = shape == 2 ? (float)(int)(unif(&s) * 8) : (float)(3 * g);
    if (shape == 3 && v % 3) l[v] = -INFINITY;
  }
  if (shape == 1) l[V / 3] = 30;
}

static const struct mtpq_sampling settings[] = {
    {0.8f, 0.95f, 0, 1}, {1.0f, 1.0f, 50, 1}, {0.7f, 0.9f, 20, 1}, {1.3f, 1.0f, 0, 1}, {0.6f, 0.5f, 0, 1},
};
enum { NSET = sizeof settings / sizeof settings[0] };

struct pair {
  struct mtpq_sampler *c, *g; /* the CPU reference's, the CUDA backend's */
};

static void pair_open(struct pair *p, int64_t V, int nseq, int rows) {
  struct mtpq_err err = {0};
  ck_assert_msg(!mtpq_sampler_open(MTPQ_BACKEND_CPU, V, nseq, rows, &p->c, &err) &&
                    !mtpq_sampler_open(MTPQ_BACKEND_CUDA, V, nseq, rows, &p->g, &err),
                "%s", err.msg);
}

static void pair_close(struct pair *p) { mtpq_sampler_close(p->c), mtpq_sampler_close(p->g); }

/* the same host row into both samplers */
static void put(struct pair *p, int b, int r, int q, float *l) {
  struct mtpq_err err = {0};
  ck_assert_msg(!mtpq_sampler_row_copy(p->c, b, r, q, l, 1, &err) && !mtpq_sampler_row_copy(p->g, b, r, q, l, 1, &err),
                "%s", err.msg);
}

/* A draft's distribution and draw, every shape under every setting: the kept tokens equal, each kept
 * probability within 1e-5 relative of the reference's, the drawn token and the stream left equal. */
START_TEST(test_draft_vs_cpu) {
  const int shape = _i % 4;
  const struct mtpq_sampling *sp = &settings[_i / 4];
  struct mtpq_err err = {0};
  struct pair p;
  pair_open(&p, VQ, 1, 2);
  float *l = malloc((size_t)VQ * 4), *qc = malloc((size_t)VQ * 4), *qg = malloc((size_t)VQ * 4);
  make_logits(l, VQ, shape, 100 + (uint64_t)_i);
  int64_t kept = 0, diff = 0;
  double worst = 0;
  for (int draw = 0; draw < 8; draw++) {
    uint64_t rc, rg;
    mtpq_rng_seed(&rc, (uint64_t)_i, (uint64_t)draw), rg = rc;
    int32_t tc = -1, tg = -2;
    put(&p, 0, 0, 1, l);
    ck_assert_msg(!mtpq_sampler_draft(p.c, 0, 0, sp, &rc, &tc, &err) &&
                      !mtpq_sampler_draft(p.g, 0, 0, sp, &rg, &tg, &err),
                  "%s", err.msg);
    ck_assert_msg(tc == tg, "shape %d, setting %d, draw %d: CUDA drew %d, the reference %d", shape, _i / 4, draw, tg,
                  tc);
    ck_assert(rc == rg);
  }
  ck_assert(!mtpq_sampler_row_copy(p.c, 0, 0, 1, qc, 0, &err) && !mtpq_sampler_row_copy(p.g, 0, 0, 1, qg, 0, &err));
  for (int64_t v = 0; v < VQ; v++) {
    if ((qc[v] > 0) != (qg[v] > 0)) {
      diff++;
      continue;
    }
    if (qc[v] > 0) {
      const double e = fabs((double)qg[v] - qc[v]) / qc[v];
      kept++, worst = e > worst ? e : worst;
    }
  }
  printf("sampler shape %d, temperature %.1f top-p %.2f top-k %d: %lld kept, %lld differ, rel. err <= %.2e\n", shape,
         sp->temperature, sp->top_p, sp->top_k, (long long)kept, (long long)diff, worst);
  ck_assert_msg(diff == 0, "%lld tokens kept by one backend only", (long long)diff);
  ck_assert_msg(worst <= 1e-5, "a kept probability off by %g relative", worst);
  ck_assert(kept >= 1);
  pair_close(&p);
  free(l), free(qc), free(qg);
}
END_TEST

/* Rounds of acceptance for two sequences at once (3 and 1 drafts): drafts drawn from q (a perturbed copy
 * of the target's logits, so that both branches of the rejection step run), then the rejection steps, on
 * both backends with the same streams: the same drafts, accepted counts, next tokens and streams. */
START_TEST(test_accept_vs_cpu) {
  const struct mtpq_sampling *sp = &settings[_i];
  struct mtpq_err err = {0};
  struct pair p;
  pair_open(&p, VQ, 2, 4);
  float *l = malloc((size_t)VQ * 4), *lq = malloc((size_t)VQ * 4);
  const int keff[2] = {3, 1}, seq[2] = {0, 1};
  int rejected = 0, all = 0;
  for (int round = 0; round < 12; round++) {
    uint64_t rc[2], rg[2], *pc[2] = {&rc[0], &rc[1]}, *pg[2] = {&rg[0], &rg[1]};
    int32_t dc[2][4], dg[2][4];
    for (int b = 0; b < 2; b++) {
      mtpq_rng_seed(&rc[b], 40 + (uint64_t)_i, (uint64_t)(round * 2 + b)), rg[b] = rc[b];
      for (int r = 0; r <= keff[b]; r++) {
        const int shape = (round + r + b) % 4;
        make_logits(l, VQ, shape, 7 + (uint64_t)(round * 16 + r * 4 + b));
        put(&p, b, r, 0, l);
        if (r == keff[b]) continue;
        uint64_t n;
        mtpq_rng_seed(&n, 99, (uint64_t)(round * 16 + r * 4 + b));
        for (int64_t v = 0; v < VQ; v++) lq[v] = shape == 2 ? l[v] : l[v] + (float)(1.5 * (unif(&n) - 0.5));
        put(&p, b, r, 1, lq);
        ck_assert_msg(!mtpq_sampler_draft(p.c, b, r, sp, &rc[b], &dc[b][r], &err) &&
                          !mtpq_sampler_draft(p.g, b, r, sp, &rg[b], &dg[b][r], &err),
                      "%s", err.msg);
        ck_assert_int_eq(dc[b][r], dg[b][r]);
      }
    }
    const int32_t *dpc[2] = {dc[0], dc[1]}, *dpg[2] = {dg[0], dg[1]};
    int ac[2], ag[2];
    int32_t nc[2], ng[2];
    ck_assert_msg(!mtpq_sampler_accept(p.c, 2, seq, keff, dpc, sp, pc, ac, nc, &err) &&
                      !mtpq_sampler_accept(p.g, 2, seq, keff, dpg, sp, pg, ag, ng, &err),
                  "%s", err.msg);
    for (int b = 0; b < 2; b++) {
      ck_assert_msg(ac[b] == ag[b] && nc[b] == ng[b],
                    "setting %d, round %d, sequence %d: CUDA accepted %d then %d, the reference %d then %d", _i, round,
                    b, ag[b], ng[b], ac[b], nc[b]);
      ck_assert(rc[b] == rg[b]);
      rejected += ac[b] < keff[b], all++;
    }
  }
  printf("sampler acceptance, temperature %.1f top-p %.2f top-k %d: %d of %d sequence rounds ended in a rejection, "
         "equal to the reference\n",
         sp->temperature, sp->top_p, sp->top_k, rejected, all);
  pair_close(&p);
  free(l), free(lq);
}
END_TEST

/* The CUDA rejection step's output is distributed as the target's sampling: over 20,000 seeded rounds of
 * one draft (drawn from q on the device) on 2,000 tokens, the emitted token (the draft if accepted, else the
 * residual's draw) against p itself; chi-square over the tokens expected at least 5 times (the rest
 * pooled), p > 0.01, for two settings. */
START_TEST(test_accept_distribution) {
  static const struct mtpq_sampling set[2] = {{1.0f, 0.9f, 0, 3}, {0.7f, 1.0f, 20, 4}};
  const struct mtpq_sampling *sp = &set[_i];
  enum { V = 2000, RUNS = 20000 };
  struct mtpq_err err = {0};
  struct mtpq_sampler *g = NULL, *c = NULL;
  ck_assert_msg(!mtpq_sampler_open(MTPQ_BACKEND_CUDA, V, 1, 2, &g, &err) &&
                    !mtpq_sampler_open(MTPQ_BACKEND_CPU, V, 1, 2, &c, &err),
                "%s", err.msg);
  static float l[V], lq[V], p[V];
  uint64_t n;
  mtpq_rng_seed(&n, 5, (uint64_t)_i);
  for (int v = 0; v < V; v++) {
    const double g0 = sqrt(-2 * log(1 - unif(&n))) * cos(6.283185307179586 * unif(&n));
    l[v] = (float)(2 * g0), lq[v] = l[v] + (float)(2 * (unif(&n) - 0.5));
  }
  memcpy(p, l, sizeof p); /* the expected distribution: the reference's p */
  ck_assert(!mtpq_sampler_row_copy(c, 0, 0, 0, p, 1, &err));
  uint64_t r0;
  int a0;
  int32_t x0;
  const int zero = 0, seq = 0;
  uint64_t *rp = &r0;
  mtpq_rng_seed(&r0, 1, 1);
  ck_assert(!mtpq_sampler_accept(c, 1, &seq, &zero, NULL, sp, &rp, &a0, &x0, &err));
  ck_assert(!mtpq_sampler_row_copy(c, 0, 0, 0, p, 0, &err));
  static int64_t obs[V];
  memset(obs, 0, sizeof obs);
  int accepted = 0;
  for (int r = 0; r < RUNS; r++) {
    uint64_t rng;
    mtpq_rng_seed(&rng, sp->seed, (uint64_t)r);
    uint64_t *rr = &rng;
    int32_t d, next;
    int acc;
    const int one = 1;
    ck_assert(!mtpq_sampler_row_copy(g, 0, 0, 0, l, 1, &err) && !mtpq_sampler_row_copy(g, 0, 1, 0, l, 1, &err) &&
              !mtpq_sampler_row_copy(g, 0, 0, 1, lq, 1, &err));
    ck_assert_msg(!mtpq_sampler_draft(g, 0, 0, sp, &rng, &d, &err), "%s", err.msg);
    const int32_t *dp = &d;
    ck_assert_msg(!mtpq_sampler_accept(g, 1, &seq, &one, &dp, sp, &rr, &acc, &next, &err), "%s", err.msg);
    obs[acc ? d : next]++, accepted += acc;
  }
  static double ex[V];
  for (int v = 0; v < V; v++) ex[v] = (double)p[v] * RUNS;
  double chi;
  int bins;
  const double pv = chi2_test(ex, obs, V, &chi, &bins);
  printf("CUDA rejection step (temperature %.1f, top-p %.1f, top-k %d): chi-square %.1f over %d bins, p = %.3f; "
         "draft accepted in %d of %d rounds\n",
         sp->temperature, sp->top_p, sp->top_k, chi, bins, pv, accepted, RUNS);
  ck_assert_msg(bins >= 3, "only %d bins", bins);
  ck_assert_msg(pv > 0.01, "the emitted tokens are not distributed as p: p-value %g", pv);
  ck_assert(accepted > RUNS / 20 && accepted < RUNS - RUNS / 20); /* both branches ran */
  mtpq_sampler_close(g), mtpq_sampler_close(c);
}
END_TEST

/* The sampled live loop on the CUDA backend (the sampler on the device): a batch of 3 equals each sequence
 * decoded alone with its stream, with and without speculation (k = 3; the tiny model and its stock
 * drafter). */
START_TEST(test_loop_batch) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_rt_model *d = NULL;
  const char *dir = MTPQ_TESTDATA "/tiny-qwen3next/model";
  ck_assert_msg(!mtpq_target_open(dir, &t, &err) && !mtpq_rt_model_open(dir, NULL, &d, &err), "%s", err.msg);
  struct mtpq_traces *tr = NULL;
  ck_assert_int_eq(mtpq_traces_open(MTPQ_TESTDATA "/tiny-qwen3next/traces.safetensors", &tr, &err), MTPQ_OK);
  enum { B = 3, NEW = 24, P = 48 };
  static int32_t prompt[B][P], alone[B][P + NEW], got[B][P + NEW];
  const int32_t *pp[B];
  int32_t *op[B];
  const int64_t Ps[B] = {P, P, P};
  const struct mtpq_sampling sp = {0.8f, 0.95f, 0, 9};
  for (int spec = 0; spec < 2; spec++) {
    struct mtpq_accept_stats sb[B], all = {0};
    all.k = 3;
    for (int b = 0; b < B; b++) {
      const struct mtpq_trace *x = mtpq_traces_at(tr, (size_t)(b * 5 + 2));
      memcpy(prompt[b], x->tokens, (size_t)P * sizeof **prompt);
      pp[b] = prompt[b], op[b] = got[b];
      ck_assert_msg(!mtpq_decode_sample(t, spec ? d : NULL, MTPQ_BACKEND_CUDA, prompt[b], P, NEW, 3, &sp,
                                        70 + (uint64_t)b, alone[b], NULL, NULL, &err),
                    "%s", err.msg);
    }
    memset(got, 0xff, sizeof got);
    ck_assert_msg(!mtpq_decode_sample_batch(t, spec ? d : NULL, MTPQ_BACKEND_CUDA, B, pp, Ps, NEW, 3, &sp, 70, op, sb,
                                            NULL, NULL, &err),
                  "%s", err.msg);
    for (int b = 0; b < B; b++) {
      ck_assert_msg(!memcmp(got[b], alone[b], sizeof got[b]), "CUDA sampled batch, %s: sequence %d differs from alone",
                    spec ? "k = 3" : "no speculation", b);
      if (spec) mtpq_accept_add(&all, &sb[b]);
    }
    printf("CUDA sampled batch of 3 (%s): equal to each alone%s", spec ? "k = 3" : "no speculation", spec ? "" : "\n");
    if (spec) printf(", %llu rounds, MAL %.3f\n", (unsigned long long)all.drafts, mtpq_accept_mal(&all));
  }
  mtpq_traces_close(tr);
  mtpq_rt_model_close(d);
  mtpq_target_close(t);
}
END_TEST

int main(void) {
  if (tu_no_gpu()) return 77;
  Suite *s = suite_create("gpu_sample");
  TCase *tc = tcase_create("cuda_vs_cpu");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_draft_vs_cpu, 0, 4 * NSET);
  tcase_add_loop_test(tc, test_accept_vs_cpu, 0, NSET);
  tcase_add_loop_test(tc, test_accept_distribution, 0, 2);
  tcase_add_test(tc, test_loop_batch);
  suite_add_tcase(s, tc);
  return tu_run_suite(s, 1);
}
