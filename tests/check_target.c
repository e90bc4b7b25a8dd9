/* The target model (kernels/target.h) on the CPU reference backend: layer
 * stacks of the shipped models; decoding token by token equals a verify of
 * T tokens followed by accepting slot j, for every j, bit for bit (hidden
 * states, argmax, the GDN states), and so does a prompt through
 * mtpq_target_prefill; misuse of verify/accept is refused. The
 * numbers against independent implementations are in
 * tests/interop/test_traces.py (numpy) and the transformers fixtures. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kernels/decode.h"
#include "kernels/sample.h"
#include "kernels/sampler.h"
#include "quant/drafter.h"
#include "kernels/target.h"
#include "kernels/rt_cpu.h"
#include "kernels/target_model.h"
#include "kernels/traces.h"
#include "quant/numerics.h"
#include "nonfinite.h"
#include "testutil.h"

static const char *models[] = {MTPQ_TESTDATA "/target/hybrid-next", MTPQ_TESTDATA "/target/hybrid-35",
                               MTPQ_TESTDATA "/tiny-qwen3next/model"};

START_TEST(test_layer_stacks) {
  struct mtpq_err err = {0};
  static const char *want[] = {"LAL", "LAL", "AAAA"};
  for (int m = 0; m < 3; m++) {
    struct mtpq_target *t = NULL;
    ck_assert_msg(mtpq_target_open(models[m], &t, &err) == MTPQ_OK, "%s", err.msg);
    char got[8] = "";
    for (int i = 0; i < mtpq_target_layers(t) && i < 7; i++) got[i] = mtpq_target_layer_type(t, i);
    ck_assert_str_eq(got, want[m]);
    ck_assert_int_eq(mtpq_target_vocab(t), m < 2 ? 300 : 151936);
    mtpq_target_close(t);
  }
  ck_assert_int_eq(mtpq_target_open(MTPQ_TESTDATA "/no-such-model", &(struct mtpq_target *){NULL}, &err) != MTPQ_OK, 1);
}
END_TEST

/* token by token against verify + accept(j) for every j, on model _i */
START_TEST(test_verify_equals_decode) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  ck_assert_msg(mtpq_target_open(models[_i], &t, &err) == MTPQ_OK, "%s", err.msg);
  const int64_t H = mtpq_target_hidden(t), V = mtpq_target_vocab(t);
  enum { P = 6, T = 4, N = P + T + 3 };
  int32_t x[N];
  uint64_t r = 12345 + (uint64_t)_i;
  for (int i = 0; i < N; i++)
    r = r * 6364136223846793005ull + 1442695040888963407ull, x[i] = (int32_t)((r >> 33) % (uint64_t)V);
  /* reference: one token at a time */
  struct mtpq_target_seq *a = NULL;
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, 1, &a, &err), MTPQ_OK);
  float *ha = malloc((size_t)(N * H) * 4);
  int32_t ga[N];
  for (int i = 0; i < N; i++) ck_assert_int_eq(mtpq_target_step(a, x[i], ha + i * H, NULL, &ga[i], &err), MTPQ_OK);
  for (int j = 0; j < T; j++) {
    struct mtpq_target_seq *b = NULL;
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, T, &b, &err), MTPQ_OK);
    float *hb = malloc((size_t)(N * H) * 4);
    int32_t gb[N];
    for (int i = 0; i < P; i++) ck_assert_int_eq(mtpq_target_step(b, x[i], hb + i * H, NULL, &gb[i], &err), MTPQ_OK);
    /* a verify of T tokens, some of them not what follows (x[P + j + 1..] replaced): only slot j is kept */
    int32_t v[T];
    for (int i = 0; i < T; i++) v[i] = i <= j ? x[P + i] : (x[P + i] + 7) % (int32_t)V;
    ck_assert_int_eq(mtpq_target_verify(b, T, v, hb + P * H, gb + P, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_seq_len(b), P + T);
    ck_assert_int_eq(mtpq_target_accept(b, j, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_seq_len(b), P + j + 1);
    /* the GDN states equal the reference's after the same tokens: replay it to there */
    struct mtpq_target_seq *c = NULL;
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, 1, &c, &err), MTPQ_OK);
    for (int i = 0; i <= P + j; i++) ck_assert_int_eq(mtpq_target_step(c, x[i], NULL, NULL, NULL, &err), MTPQ_OK);
    for (int l = 0; l < mtpq_target_layers(t); l++) {
      const float *rb, *rc;
      int64_t cn, rn, cn2, rn2;
      const float *cb = mtpq_target_seq_gdn(b, l, &rb, &cn, &rn), *cc = mtpq_target_seq_gdn(c, l, &rc, &cn2, &rn2);
      ck_assert((cb == NULL) == (cc == NULL));
      if (!cb) continue;
      ck_assert_msg(!memcmp(cb, cc, (size_t)cn * 4) && !memcmp(rb, rc, (size_t)rn * 4), "layer %d GDN state, j = %d", l,
                    j);
    }
    mtpq_target_seq_close(c);
    for (int i = P + j + 1; i < N; i++)
      ck_assert_int_eq(mtpq_target_step(b, x[i], hb + i * H, NULL, &gb[i], &err), MTPQ_OK);
    ck_assert_msg(!memcmp(ha, hb, (size_t)(N * H) * 4), "%s: hidden states differ after accepting slot %d", models[_i],
                  j);
    ck_assert_msg(!memcmp(ga, gb, sizeof ga), "%s: argmax differs after accepting slot %d", models[_i], j);
    mtpq_target_seq_close(b);
    free(hb);
  }
  /* a prompt through mtpq_target_prefill, then steps: the reference's hidden states and argmax bit for bit */
  struct mtpq_target_seq *b = NULL;
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, 2, &b, &err), MTPQ_OK);
  float *hp = malloc((size_t)(N * H) * 4);
  ck_assert_int_eq(mtpq_target_prefill(b, N + 1, x, hp, &err), MTPQ_E_INVAL); /* past the sequence */
  ck_assert_int_eq(mtpq_target_seq_len(b), 0);
  ck_assert_int_eq(mtpq_target_prefill(b, P, x, hp, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_target_seq_len(b), P);
  ck_assert_int_eq(mtpq_target_prefill(b, 0, x, NULL, &err), MTPQ_OK);
  int32_t gp = -1;
  ck_assert_int_eq(mtpq_target_step(b, x[P], hp + P * H, NULL, &gp, &err), MTPQ_OK);
  ck_assert_msg(!memcmp(ha, hp, (size_t)((P + 1) * H) * 4) && gp == ga[P], "%s: prefill then a step differs",
                models[_i]);
  mtpq_target_seq_close(b);
  free(hp);
  /* misuse */
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, 2, &b, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_target_accept(b, 0, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_target_verify(b, 3, x, NULL, NULL, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_target_verify(b, 2, x, NULL, NULL, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_target_accept(b, 2, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_target_step(b, (int32_t)V, NULL, NULL, NULL, &err), MTPQ_E_BAD_VALUE);
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, 0, &(struct mtpq_target_seq *){NULL}, &err),
                   MTPQ_E_INVAL);
  mtpq_target_seq_close(b);
  mtpq_target_seq_close(a);
  free(ha);
  mtpq_target_close(t);
}
END_TEST

/* mtpq_target_verify_many: each sequence as its own mtpq_target_verify
 * (hidden states, argmax, the state slot each then accepts, bit for bit);
 * misuse refused; all or none when one sequence's tokens are bad */
START_TEST(test_verify_many) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL, *t2 = NULL;
  ck_assert_msg(mtpq_target_open(models[0], &t, &err) == MTPQ_OK, "%s", err.msg);
  const int64_t H = mtpq_target_hidden(t), V = mtpq_target_vocab(t);
  enum { S = 3, T = 3, N = 24 };
  const int P[S] = {5, 11, 8}, J[S] = {2, 0, 1}; /* prompt lengths, the slot each accepts */
  struct mtpq_target_seq *m[S], *one[S];
  int32_t x[S][N], am[S][T], a1[S][T];
  float *hm = malloc((size_t)(S * T * H) * 4), *h1 = malloc((size_t)(S * T * H) * 4);
  const int32_t *tk[S];
  float *hp[S];
  int32_t *ap[S];
  for (int b = 0; b < S; b++) {
    for (int i = 0; i < N; i++) x[b][i] = (int32_t)((i * 131 + b * 17 + 5) % V);
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, T, &m[b], &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, N, T, &one[b], &err), MTPQ_OK);
    for (int i = 0; i < P[b]; i++) {
      ck_assert_int_eq(mtpq_target_step(m[b], x[b][i], NULL, NULL, NULL, &err), MTPQ_OK);
      ck_assert_int_eq(mtpq_target_step(one[b], x[b][i], NULL, NULL, NULL, &err), MTPQ_OK);
    }
    tk[b] = x[b] + P[b], hp[b] = hm + (size_t)(b * T * H), ap[b] = am[b];
    ck_assert_int_eq(mtpq_target_verify(one[b], T, tk[b], h1 + (size_t)(b * T * H), a1[b], &err), MTPQ_OK);
  }
  ck_assert_msg(mtpq_target_verify_many(m, S, T, tk, hp, NULL, ap, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert(!memcmp(hm, h1, (size_t)(S * T * H) * 4) && !memcmp(am, a1, sizeof am));
  for (int b = 0; b < S; b++) {
    ck_assert_int_eq(mtpq_target_accept(m[b], J[b], &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_accept(one[b], J[b], &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_seq_len(m[b]), P[b] + J[b] + 1);
    float ga[64], gb[64];
    int32_t na = -1, nb = -2;
    ck_assert(H <= 64);
    ck_assert_int_eq(mtpq_target_step(m[b], x[b][20], ga, NULL, &na, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_step(one[b], x[b][20], gb, NULL, &nb, &err), MTPQ_OK);
    ck_assert_msg(!memcmp(ga, gb, (size_t)H * 4) && na == nb, "sequence %d after accepting slot %d", b, J[b]);
  }
  /* misuse: a sequence twice, another target, a verify longer than the slots */
  struct mtpq_target_seq *dup[2] = {m[0], m[0]}, *other = NULL, *mixed[2] = {m[0], NULL};
  ck_assert_int_eq(mtpq_target_verify_many(dup, 2, 1, tk, NULL, NULL, NULL, &err), MTPQ_E_INVAL);
  ck_assert_msg(strstr(err.msg, "are one"), "%s", err.msg);
  ck_assert_msg(mtpq_target_open(models[1], &t2, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_int_eq(mtpq_target_seq_open(t2, MTPQ_BACKEND_CPU, N, T, &other, &err), MTPQ_OK);
  mixed[1] = other;
  ck_assert_int_eq(mtpq_target_verify_many(mixed, 2, 1, tk, NULL, NULL, NULL, &err), MTPQ_E_INVAL);
  ck_assert_msg(strstr(err.msg, "another target"), "%s", err.msg);
  ck_assert_int_eq(mtpq_target_verify_many(m, S, T + 1, tk, NULL, NULL, NULL, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_target_verify_many(m, 0, 1, tk, NULL, NULL, NULL, &err), MTPQ_E_INVAL);
  /* all or none: the third sequence's token is outside the vocabulary; the first two keep no verify */
  int32_t bad[T] = {1, 2, (int32_t)V};
  const int32_t *tb[S] = {x[0], x[1], bad};
  int64_t len[S];
  for (int b = 0; b < S; b++) len[b] = mtpq_target_seq_len(m[b]);
  ck_assert_int_eq(mtpq_target_verify_many(m, S, T, tb, NULL, NULL, NULL, &err), MTPQ_E_BAD_VALUE);
  for (int b = 0; b < S; b++) {
    ck_assert_int_eq(mtpq_target_seq_len(m[b]), len[b]);
    ck_assert_int_eq(mtpq_target_accept(m[b], 0, &err), MTPQ_E_INVAL); /* no verify pending */
  }
  for (int b = 0; b < S; b++) mtpq_target_seq_close(m[b]), mtpq_target_seq_close(one[b]);
  mtpq_target_seq_close(other);
  mtpq_target_close(t2);
  mtpq_target_close(t);
  free(hm), free(h1);
}
END_TEST

/* a config whose linear_attention layers lack the GDN sizes is refused naming them */
START_TEST(test_config_refusals) {
  char *dir = tu_scratch(), *cfg = tu_path(dir, "config.json");
  const char *c = "{\"hidden_size\":8,\"num_attention_heads\":2,\"vocab_size\":10,\"rms_norm_eps\":1e-6,"
                  "\"num_hidden_layers\":2,\"head_dim\":8,\"layer_types\":[\"linear_attention\",\"full_attention\"]}";
  tu_write(cfg, c, strlen(c));
  char *st = tu_path(dir, "model.safetensors");
  tu_write_st(st, "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[10,8],\"data_offsets\":[0,160]}}",
              160);
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  ck_assert_int_eq(mtpq_target_open(dir, &t, &err), MTPQ_E_CONFIG_FIELD);
  ck_assert_msg(strstr(err.msg, "linear_num_key_heads"), "%s", err.msg);
  const char *c2 = "{\"hidden_size\":8,\"num_attention_heads\":2,\"vocab_size\":10,\"rms_norm_eps\":1e-6,"
                   "\"num_hidden_layers\":2,\"layer_types\":[\"linear_attention\",\"mamba\"]}";
  tu_write(cfg, c2, strlen(c2));
  ck_assert_int_eq(mtpq_target_open(dir, &t, &err), MTPQ_E_CONFIG_FIELD);
  ck_assert_msg(strstr(err.msg, "layer_types[1] is \"mamba\""), "%s", err.msg);
  tu_rmtree(dir);
  free(cfg), free(st), free(dir);
}
END_TEST

/* the sampler's distribution (kernels/sample.h): temperature, then top-k
 * with the k-th's ties kept, then top-p of the mass the top-k left, ties to
 * the lower id; and the rejection step's two limits */
START_TEST(test_sampler) {
  const float lg[6] = {2.0f, 1.0f, 2.0f, 0.0f, -INFINITY, 1.0f};
  float p[6], q[6];
  uint64_t keys[6], rng;
  struct mtpq_sampling s = {1.0f, 1.0f, 0, 1};
  mtpq_sample_probs(lg, 6, &s, p, keys);
  const double z = 2 * exp(2.0) + 2 * exp(1.0) + 1;
  ck_assert(fabs(p[0] - exp(2.0) / z) < 1e-6 && p[4] == 0 && fabs(p[3] - 1 / z) < 1e-6);
  s.top_k = 2; /* ids 0 and 2 (tied first) */
  mtpq_sample_probs(lg, 6, &s, p, keys);
  ck_assert(p[0] == 0.5f && p[2] == 0.5f && p[1] == 0 && p[5] == 0);
  s.top_k = 3; /* the third is tied with id 5: both kept */
  mtpq_sample_probs(lg, 6, &s, p, keys);
  ck_assert(p[1] > 0 && p[5] > 0 && p[3] == 0);
  s.top_k = 0, s.top_p = 0.5f; /* id 0 alone has 0.35 of the mass; with id 2, 0.70 */
  mtpq_sample_probs(lg, 6, &s, p, keys);
  ck_assert(fabs(p[0] - 0.5) < 1e-6 && fabs(p[2] - 0.5) < 1e-6 && p[1] == 0);
  s.top_p = 1.0f, s.temperature = 0.5f; /* sharper: p(0) / p(1) = e^2 */
  mtpq_sample_probs(lg, 6, &s, p, keys);
  ck_assert(fabs(p[0] / p[1] - exp(2.0)) < 1e-4);
  mtpq_rng_seed(&rng, 3, 0);
  int32_t out = -1;
  for (int i = 0; i < 100; i++) ck_assert_int_eq(mtpq_sample_reject(p, p, 6, 1, &rng, &out), 1); /* q == p */
  memset(q, 0, sizeof q);
  q[4] = 1.0f; /* a draft the target never makes: always rejected, replaced by a draw from p */
  for (int i = 0; i < 100; i++) ck_assert(!mtpq_sample_reject(p, q, 6, 4, &rng, &out) && out != 4 && p[out] > 0);
}
END_TEST

/* the sampler's distribution by its definition: every token sorted (most
 * probable first, ties to the lower id), top-k with the k-th's ties, top-p
 * of the mass the top-k left, renormalised */
static const float *ref_p; /* qsort's comparator reads the probabilities here */
static int by_p_desc(const void *a, const void *b) {
  const float *p = ref_p;
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return p[x] > p[y] ? -1 : p[x] < p[y] ? 1 : x - y;
}

static void ref_probs(const float *lg, int64_t V, const struct mtpq_sampling *s, float *p, int32_t *ord) {
  const struct mtpq_sampling all = {s->temperature, 1.0f, 0, 0};
  uint64_t *keys = malloc((size_t)V * 8);
  mtpq_sample_probs(lg, V, &all, p, keys); /* temperature only */
  free(keys);
  for (int64_t v = 0; v < V; v++) ord[v] = (int32_t)v;
  ref_p = p;
  qsort(ord, (size_t)V, sizeof *ord, by_p_desc);
  int64_t keep = V;
  if (s->top_k > 0 && s->top_k < V) {
    keep = s->top_k;
    while (keep < V && p[ord[keep]] == p[ord[s->top_k - 1]]) keep++;
  }
  if (s->top_p > 0 && s->top_p < 1) {
    double tot = 0, acc = 0;
    if (s->top_k > 0 && s->top_k < V)
      for (int64_t i = 0; i < keep; i++) tot += p[ord[i]];
    else
      for (int64_t v = 0; v < V; v++) tot += p[v];
    int64_t j = 0;
    while (j < keep && acc < (double)s->top_p * tot) acc += p[ord[j++]];
    keep = j ? j : 1;
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; i++) kept += p[ord[i]];
  for (int64_t i = keep; i < V; i++) p[ord[i]] = 0.0f;
  for (int64_t i = 0; i < keep; i++) p[ord[i]] = (float)(p[ord[i]] / kept);
}

/* mtpq_sample_probs sorts only the tokens above a threshold: bit for bit the
 * definition's distribution on a full vocabulary, for flat, peaked and tied
 * logits and several settings */
START_TEST(test_sampler_threshold) {
  enum { V = 151936 };
  float *lg = malloc(V * 4), *p = malloc(V * 4), *r = malloc(V * 4);
  uint64_t *keys = malloc((size_t)V * 8), rng;
  int32_t *ord = malloc(V * 4);
  const struct mtpq_sampling set[] = {{0.8f, 0.95f, 0, 0},  {1.0f, 0.5f, 0, 0},   {0.6f, 1.0f, 40, 0},
                                      {1.2f, 0.9f, 100, 0}, {0.7f, 0.999f, 0, 0}, {1.0f, 0.3f, 5, 0}};
  for (int shape = 0; shape < 3; shape++) {
    mtpq_rng_seed(&rng, 9, (uint64_t)shape);
    for (int64_t v = 0; v < V; v++) {
      const double u = mtpq_uniform(&rng);
      lg[v] = shape == 0   ? (float)(u * 20 - 10)                       /* flat */
              : shape == 1 ? (float)(v % 997 == 0 ? 14 + u : u * 8 - 4) /* a few peaks over a heavy tail */
                           : (float)((int)(u * 6));                     /* six values: ties everywhere */
    }
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
      mtpq_sample_probs(lg, V, &set[i], p, keys);
      ref_probs(lg, V, &set[i], r, ord);
      ck_assert_msg(!memcmp(p, r, (size_t)V * 4), "shape %d, setting %zu: not the definition's distribution", shape, i);
    }
  }
  free(lg), free(p), free(r), free(keys), free(ord);
}
END_TEST

/* The CPU sampler (kernels/sampler.h) is kernels/sample.c on its rows: a draft's token and q, and an
 * acceptance's drafts accepted, next token and stream, equal the functions' own on the same logits and
 * stream; a bad row, a sequence named twice and a draft outside the vocabulary are refused. */
START_TEST(test_sampler_rows) {
  enum { V = 5000, K = 3 };
  struct mtpq_err err = {0};
  struct mtpq_sampler *m = NULL;
  ck_assert_int_eq(mtpq_sampler_open(MTPQ_BACKEND_CPU, V, 2, K + 1, &m, &err), MTPQ_OK);
  const struct mtpq_sampling sp = {0.9f, 0.9f, 0, 0};
  static float lp[K + 1][V], lq[K][V], pp[V], qq[K][V], row[V];
  static uint64_t keys[V];
  uint64_t s;
  mtpq_rng_seed(&s, 3, 3);
  for (int r = 0; r <= K; r++)
    for (int v = 0; v < V; v++) {
      lp[r][v] = (float)(6 * mtpq_uniform(&s));
      if (r < K) lq[r][v] = lp[r][v] + (float)(mtpq_uniform(&s) - 0.5);
    }
  for (int trial = 0; trial < 20; trial++) {
    uint64_t a, b;
    mtpq_rng_seed(&a, 11, (uint64_t)trial), b = a;
    int32_t d[K], dr[K];
    for (int r = 0; r < K; r++) { /* the drafts: the sampler's, then the functions' */
      ck_assert(!mtpq_sampler_row_copy(m, 1, r, 1, lq[r], 1, &err));
      ck_assert(!mtpq_sampler_draft(m, 1, r, &sp, &a, &d[r], &err));
      mtpq_sample_probs(lq[r], V, &sp, qq[r], keys);
      dr[r] = mtpq_sample_draw(qq[r], V, &b);
      ck_assert_int_eq(d[r], dr[r]);
      ck_assert(!mtpq_sampler_row_copy(m, 1, r, 1, row, 0, &err));
      ck_assert(!memcmp(row, qq[r], sizeof row));
    }
    for (int r = 0; r <= K; r++) ck_assert(!mtpq_sampler_row_copy(m, 1, r, 0, lp[r], 1, &err));
    const int seq = 1, keff = K;
    const int32_t *dp = d;
    uint64_t *ap = &a;
    int acc;
    int32_t next;
    ck_assert(!mtpq_sampler_accept(m, 1, &seq, &keff, &dp, &sp, &ap, &acc, &next, &err));
    int j = 0;
    int32_t want = -1;
    for (; j < K; j++) {
      mtpq_sample_probs(lp[j], V, &sp, pp, keys);
      if (!mtpq_sample_reject(pp, qq[j], V, dr[j], &b, &want)) break;
    }
    if (j == K) mtpq_sample_probs(lp[K], V, &sp, pp, keys), want = mtpq_sample_draw(pp, V, &b);
    ck_assert_int_eq(acc, j);
    ck_assert_int_eq(next, want);
    ck_assert(a == b);
  }
  const int two[2] = {0, 0}, ks[2] = {0, 0}, big = K + 1, one = 1, zero = 0;
  const int32_t bad = V, *bp = &bad;
  uint64_t r0 = 1, *rp[2] = {&r0, &r0};
  int acc[2];
  int32_t next[2];
  ck_assert_int_eq(mtpq_sampler_accept(m, 2, two, ks, NULL, &sp, rp, acc, next, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_sampler_accept(m, 1, &zero, &big, NULL, &sp, rp, acc, next, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_sampler_accept(m, 1, &zero, &one, &bp, &sp, rp, acc, next, &err), MTPQ_E_BAD_VALUE);
  ck_assert_int_eq(mtpq_sampler_row_copy(m, 2, 0, 0, row, 1, &err), MTPQ_E_INVAL);
  ck_assert_int_eq(mtpq_sampler_row_copy(m, 0, K, 1, row, 1, &err), MTPQ_E_INVAL);
  mtpq_sampler_close(m);
}
END_TEST

/* the BF16 K/V cache option: set before the first token only; hidden
 * states near the float32 cache's (BF16 rounding of K and V) but not equal */
START_TEST(test_kv_bf16) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  ck_assert_int_eq(mtpq_target_open(models[0], &t, &err), MTPQ_OK);
  const int64_t H = mtpq_target_hidden(t);
  float *a = malloc((size_t)H * 4), *b = malloc((size_t)H * 4);
  struct mtpq_target_seq *s32 = NULL, *s16 = NULL;
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 16, 1, &s32, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 16, 1, &s16, &err), MTPQ_OK);
  ck_assert_int_eq(mtpq_target_seq_kv_bf16(s16, &err), MTPQ_OK);
  for (int p = 0; p < 10; p++) {
    ck_assert_int_eq(mtpq_target_step(s32, 5 + 7 * p, a, NULL, NULL, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_target_step(s16, 5 + 7 * p, b, NULL, NULL, &err), MTPQ_OK);
  }
  double num = 0, den = 0;
  for (int64_t j = 0; j < H; j++) num += (double)(a[j] - b[j]) * (a[j] - b[j]), den += (double)a[j] * a[j];
  ck_assert_msg(num > 0 && sqrt(num / den) < 2e-2, "BF16 vs float32 cache: relative difference %g", sqrt(num / den));
  ck_assert_int_eq(mtpq_target_seq_kv_bf16(s32, &err), MTPQ_E_INVAL);
  mtpq_target_seq_close(s32), mtpq_target_seq_close(s16);
  free(a), free(b);
  mtpq_target_close(t);
}
END_TEST

/* a small Qwen3-Next shape for synthetic targets: GDN then attention, 4 experts top-2 and a shared one */
static const char *small_cfg =
    "{\"model_type\": \"qwen3_next\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"head_dim\": 32, \"vocab_size\": 100, \"moe_intermediate_size\": 32, "
    "\"shared_expert_intermediate_size\": 32, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
    "\"rms_norm_eps\": 1e-6, \"full_attention_interval\": 2, \"linear_num_key_heads\": 1, "
    "\"linear_num_value_heads\": 2, \"linear_key_head_dim\": 16, \"linear_value_head_dim\": 16, "
    "\"linear_conv_kernel_dim\": 4}";

/* Synthetic targets (kernels/target_synth.c), as the CUDA tests and the
 * 80B benchmark use them: each format set runs on the CPU reference with
 * finite, non-constant outputs, the same seed gives the same hidden states,
 * another seed other ones, and no two experts share their weights. */
START_TEST(test_synthetic) {
  struct mtpq_err err = {0};
  for (int f = MTPQ_SYNTH_BF16; f <= MTPQ_SYNTH_FP8; f++) {
    float h[3][64];
    for (int r = 0; r < 3; r++) {
      struct mtpq_target *t = NULL;
      ck_assert_msg(mtpq_target_synth(small_cfg, (enum mtpq_synth_formats)f, r < 2 ? 5 : 6, &t, &err) == MTPQ_OK, "%s",
                    err.msg);
      ck_assert_int_eq(mtpq_target_layer_type(t, 0), 'L');
      ck_assert_int_eq(mtpq_target_layer_type(t, 1), 'A');
      const struct rt_mlp *m = &t->layers[1].mlp; /* (kernels/target_model.h) */
      const size_t eb = f == MTPQ_SYNTH_BF16 ? 32 * 64 * 2 : 32 * 64 / 2;
      for (int e = 1; e < 4; e++) ck_assert(memcmp(m->eg[0].w, m->eg[e].w, eb) != 0);
      if (f != MTPQ_SYNTH_BF16) { /* an expert's row through the CPU product against its codes decoded here (the
                                     product's E4M3 table is set up by whatever opens a target: zeros before) */
        const struct lin *L = &m->eg[0];
        float x[64];
        double ref = 0;
        for (int j = 0; j < 64; j++) x[j] = (float)((j * 37) % 11) - 5.0f;
        for (int j = 0; j < 64; j++) {
          const unsigned char code = L->f == LIN_NVFP4 ? (L->w[j / 2] >> (4 * (j & 1))) & 15 : L->w[j];
          const double v =
              L->f == LIN_NVFP4 ? mtpq_e2m1_to_f32(code) * mtpq_e4m3_to_f32(L->scales[j / 16]) : mtpq_e4m3_to_f32(code);
          ref += v * L->s * x[j];
        }
        const double got = rt_lin_dot(L, 0, x);
        ck_assert_msg(ref != 0 && fabs(got - ref) <= 1e-5 * fabs(ref),
                      "synthetic format %d: expert 0 row 0: %g, decoded %g", f, got, ref);
      }
      struct mtpq_target_seq *s = NULL;
      ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 8, 1, &s, &err), MTPQ_OK);
      for (int p = 0; p < 4; p++) ck_assert_int_eq(mtpq_target_step(s, 3 + p, h[r], NULL, NULL, &err), MTPQ_OK);
      double ss = 0;
      for (int j = 0; j < 64; j++) ck_assert(isfinite(h[r][j])), ss += (double)h[r][j] * h[r][j];
      ck_assert(ss > 1.0); /* the final norm's output: about sqrt(64) in norm */
      mtpq_target_seq_close(s);
      mtpq_target_close(t);
    }
    ck_assert_mem_eq(h[0], h[1], sizeof h[0]);
    ck_assert(memcmp(h[0], h[2], sizeof h[0]) != 0);
  }
}
END_TEST

/* NaN or inf in a target's weights that reach its logits: the step fails with MTPQ_E_BAD_VALUE, the target and
 * the position named, and no token (a token chosen from NaN logits would be row 0, silently), whether every
 * logit is NaN or inf or one row's is NaN, wherever that row is and whatever its sign bit */
START_TEST(test_nonfinite_logits) {
  struct mtpq_err err = {0};
  static uint16_t head[100 * 64]; /* (small_cfg's vocabulary x hidden, BF16) */
  for (int k = 0; k < 4; k++) {
    struct mtpq_target *t = NULL;
    ck_assert_msg(mtpq_target_synth(small_cfg, MTPQ_SYNTH_BF16, 5, &t, &err) == MTPQ_OK, "%s", err.msg);
    struct mtpq_target_seq *s = NULL;
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 8, 1, &s, &err), MTPQ_OK);
    int32_t tok = -7;
    ck_assert_msg(mtpq_target_step(s, 3, NULL, NULL, &tok, &err) == MTPQ_OK, "%s", err.msg);
    ck_assert(tok >= 0);
    /* (k >= 2: row 77 lies inside the second head thread's share, row 1 in the first's) */
    nonfinite_poke(t, k, 77, head, 100 * 64);
    tok = -7;
    ck_assert_int_eq(mtpq_target_step(s, 4, NULL, NULL, &tok, &err), MTPQ_E_BAD_VALUE);
    ck_assert_int_eq(tok, -7);
    ck_assert_msg(strstr(err.msg, k == 1 ? "synthetic target: position 1: a logit is inf: "
                                         : "synthetic target: position 1: a logit is nan: ") &&
                      strstr(err.msg, "NaN or inf in the target's weights"),
                  "%s", err.msg);
    mtpq_target_seq_close(s);
    mtpq_target_close(t);
  }
}
END_TEST

/* mtpq_target_seq_route_margin: 1 at every position of a dense target; on a
 * MoE target in [0, 1] at the positions run, neither all 1 nor all 0,
 * -1 past them; exactly 0 at every position once every router row is zero (all
 * experts tie) */
START_TEST(test_route_margin) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_target_seq *s = NULL;
  ck_assert_msg(mtpq_target_open(models[0], &t, &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 8, 1, &s, &err), MTPQ_OK);
  for (int p = 0; p < 3; p++) ck_assert_int_eq(mtpq_target_step(s, 5 + p, NULL, NULL, NULL, &err), MTPQ_OK);
  for (int p = 0; p < 3; p++) ck_assert(mtpq_target_seq_route_margin(s, p) == 1.0);
  ck_assert(mtpq_target_seq_route_margin(s, 3) == -1.0 && mtpq_target_seq_route_margin(s, 99) == -1.0);
  mtpq_target_seq_close(s), mtpq_target_close(t);
  static unsigned char zero[4 * 64 * 2];
  for (int z = 0; z < 2; z++) {
    ck_assert_msg(mtpq_target_synth(small_cfg, MTPQ_SYNTH_NVIDIA, 3, &t, &err) == MTPQ_OK, "%s", err.msg);
    for (int i = 0; z && i < 2; i++) t->layers[i].mlp.router.w = zero; /* (kernels/target_model.h) */
    ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 8, 1, &s, &err), MTPQ_OK);
    double least = 1, most = 0;
    for (int p = 0; p < 6; p++) {
      ck_assert_int_eq(mtpq_target_step(s, 7 * p + 1, NULL, NULL, NULL, &err), MTPQ_OK);
      const double m = mtpq_target_seq_route_margin(s, p);
      ck_assert_msg(z ? m == 0.0 : m >= 0.0 && m <= 1.0, "routers %s: position %d: margin %g", z ? "zero" : "random", p,
                    m);
      least = m < least ? m : least, most = m > most ? m : most;
    }
    ck_assert(least < 1.0 && (z || most > 0.0));
    ck_assert(mtpq_target_seq_route_margin(s, 6) == -1.0);
    mtpq_target_seq_close(s), mtpq_target_close(t);
  }
}
END_TEST

/* the CUDA prefill's FP16 expert inputs emulated on the CPU (rt_round_f16_row,
 * mtpq_target_seq_fp16_experts): a row scaled so its largest magnitude lands
 * in [2^14, 2^15), rounded, scaled back; a zero row stays; the NVFP4
 * synthetic target's hidden states move (by about FP16's rounding, not
 * more), the all-BF16 one's not at all */
START_TEST(test_fp16_experts) {
  const float row[4] = {3.0f, 1e-3f, -0.5f, 1.0f + 0x1p-12f};
  float out[4], z[3] = {0, 0, 0}, tiny[2] = {1e-38f, 3e-39f};
  rt_round_f16_row(row, 4, out);
  for (int i = 0; i < 4; i++) /* 3 = 1.5 x 2^1: e = 1 - 14 */
    ck_assert_msg(out[i] == ldexpf(mtpq_round_f16(ldexpf(row[i], 13)), -13), "%d: %a", i, out[i]);
  ck_assert(out[0] == 3.0f && out[3] == 1.0f && out[1] != 1e-3f);
  rt_round_f16_row(z, 3, z);
  ck_assert(z[0] == 0 && z[1] == 0 && z[2] == 0);
  rt_round_f16_row(tiny, 2, tiny); /* e clamped at -112: 2^-126 x 2^... stays finite */
  ck_assert(isfinite(tiny[0]) && isfinite(tiny[1]) && tiny[0] > 0);
  struct mtpq_err err = {0};
  for (int f = MTPQ_SYNTH_BF16; f <= MTPQ_SYNTH_NVIDIA; f++) {
    float h[2][4][64];
    struct mtpq_target *t = NULL;
    ck_assert_msg(mtpq_target_synth(small_cfg, (enum mtpq_synth_formats)f, 5, &t, &err) == MTPQ_OK, "%s", err.msg);
    for (int on = 0; on < 2; on++) {
      struct mtpq_target_seq *s = NULL;
      ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, 8, 1, &s, &err), MTPQ_OK);
      ck_assert_int_eq(mtpq_target_seq_fp16_experts(s, on, &err), MTPQ_OK);
      for (int p = 0; p < 4; p++) ck_assert_int_eq(mtpq_target_step(s, 3 + p, h[on][p], NULL, NULL, &err), MTPQ_OK);
      mtpq_target_seq_close(s);
    }
    double num = 0, den = 0;
    for (int p = 0; p < 4; p++)
      for (int j = 0; j < 64; j++)
        num += ((double)h[1][p][j] - h[0][p][j]) * ((double)h[1][p][j] - h[0][p][j]),
            den += (double)h[0][p][j] * h[0][p][j];
    if (f == MTPQ_SYNTH_BF16)
      ck_assert_msg(num == 0, "BF16 experts moved: %g", sqrt(num / den));
    else
      ck_assert_msg(num > 0 && sqrt(num / den) < 4e-3, "NVFP4 experts: %g", sqrt(num / den));
    mtpq_target_close(t);
  }
}
END_TEST

/* Against transformers (float32, testdata/target/fx-*, made by
 * tests/bench/make_target_fixtures.py): the logits of a 64-token prefill
 * and of 16 greedy decode steps within relative error 1e-5 with every
 * argmax equal, and the final-norm hidden states. (The fixtures hold no GDN
 * states: transformers 5.17's cache did not give them to the script.) */
static const char *fx[] = {MTPQ_TESTDATA "/target/fx-qwen3next", MTPQ_TESTDATA "/target/fx-qwen35moe",
                           MTPQ_TESTDATA "/target/fx-qwen35dense"};

static double relerr(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / den);
}

START_TEST(test_transformers_fixtures) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  ck_assert_msg(mtpq_target_open(fx[_i], &t, &err) == MTPQ_OK, "%s", err.msg);
  char rp[512];
  snprintf(rp, sizeof rp, "%s/ref.safetensors", fx[_i]);
  struct mtpq_st_file *r = NULL;
  ck_assert_int_eq(mtpq_st_open(rp, &r, &err), MTPQ_OK);
  const struct mtpq_tensor *ids = mtpq_st_find(r, "ids"), *pl = mtpq_st_find(r, "prefill_logits"),
                           *dl = mtpq_st_find(r, "decode_logits"), *hid = mtpq_st_find(r, "hidden");
  ck_assert(ids && pl && dl && hid);
  const int64_t H = mtpq_target_hidden(t), V = mtpq_target_vocab(t), P = pl->shape[0], N = dl->shape[0];
  ck_assert_int_eq(pl->shape[1], V);
  struct mtpq_target_seq *s = NULL;
  ck_assert_int_eq(mtpq_target_seq_open(t, MTPQ_BACKEND_CPU, P + N, 1, &s, &err), MTPQ_OK);
  float *lg = malloc((size_t)((P + N) * V) * 4), *hs = malloc((size_t)((P + N) * H) * 4);
  int64_t id[256];
  memcpy(id, ids->data, (size_t)(P + N) * 8);
  int32_t am = 0, argmax_bad = 0;
  for (int64_t p = 0; p < P + N; p++) {
    ck_assert_int_eq(mtpq_target_step(s, (int32_t)id[p], hs + p * H, lg + p * V, &am, &err), MTPQ_OK);
    const float *ref = p < P ? (const float *)pl->data + p * V : (const float *)dl->data + (p - P) * V;
    int64_t ra = 0;
    for (int64_t v = 1; v < V; v++) ra = ref[v] > ref[ra] ? v : ra;
    argmax_bad += ra != am;
  }
  double ep = relerr(lg, pl->data, (size_t)(P * V)), ed = relerr(lg + P * V, dl->data, (size_t)(N * V));
  double eh = relerr(hs, hid->data, (size_t)((P + N) * H));
  printf("%s: prefill logits rel. error %.2e, decode %.2e, hidden %.2e, argmax differences %d of %lld\n", fx[_i], ep,
         ed, eh, argmax_bad, (long long)(P + N));
  ck_assert_msg(ep < 1e-5 && ed < 1e-5 && eh < 1e-5, "%s: %.3g %.3g %.3g", fx[_i], ep, ed, eh);
  ck_assert_int_eq(argmax_bad, 0);
  free(lg), free(hs);
  mtpq_target_seq_close(s);
  mtpq_st_close(r);
  mtpq_target_close(t);
}
END_TEST

/* The tiny model's stock drafter (drs[0]) and an mtpq drafter of it written
 * by the library into dir (drs[1]: FP8 linears, NVFP4 experts, a reduced
 * FP8 head of the nid ids 0, step, 2 step, ...). */
static void tiny_drafters(const char *dir, int64_t nid, int64_t step, struct mtpq_rt_model *drs[2]) {
  struct mtpq_err err = {0};
  char *ids = tu_path(dir, "ids.safetensors"), *qd = tu_path(dir, "q");
  struct mtpq_st_writer *w = NULL;
  int64_t shape[1] = {nid};
  int64_t *iv = malloc((size_t)nid * 8);
  for (int64_t i = 0; i < nid; i++) iv[i] = step * i;
  ck_assert(!mtpq_stw_init(ids, &w, &err) && !mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, &err) &&
            !mtpq_stw_begin(w, &err) && !mtpq_stw_write_all(w, "ids", iv, (uint64_t)nid * 8, &err) &&
            !mtpq_stw_commit(w, &err));
  mtpq_stw_free(w);
  free(iv);
  struct mtpq_drafter_params dp = mtpq_drafter_default_params();
  dp.target = models[2], dp.vocab_ids = ids, dp.out = qd, dp.expert_input_scale = 0.1667;
  struct mtpq_plan *pl = NULL;
  ck_assert_msg(!mtpq_drafter_plan(&dp, &pl, &err) && !mtpq_drafter_write(&dp, pl, NULL, NULL, &err), "%s", err.msg);
  mtpq_plan_free(pl);
  drs[0] = drs[1] = NULL;
  ck_assert_msg(mtpq_rt_model_open(models[2], NULL, &drs[0], &err) == MTPQ_OK, "%s", err.msg);
  ck_assert_msg(mtpq_rt_model_open(models[2], qd, &drs[1], &err) == MTPQ_OK, "%s", err.msg);
  free(ids), free(qd);
}

/* The live greedy loop (kernels/decode.h) is lossless: with the tiny
 * model's stock drafter and an mtpq drafter of it (FP8 linears, NVFP4
 * experts, a reduced FP8 head of every 2nd id, written here by the
 * library), at k = 1..4, speculative output equals plain greedy output
 * token for token, and every round's tokens are accounted for. */
START_TEST(test_greedy_lossless) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  ck_assert_int_eq(mtpq_target_open(models[2], &t, &err), MTPQ_OK);
  char *dir = tu_scratch();
  struct mtpq_rt_model *drs[2];
  tiny_drafters(dir, 75834, 2, drs);
  struct mtpq_traces *tr = NULL;
  ck_assert_int_eq(mtpq_traces_open(MTPQ_TESTDATA "/tiny-qwen3next/traces.safetensors", &tr, &err), MTPQ_OK);
  enum { P = 40, NEW = 24 };
  for (size_t q = 0; q < 2; q++) {
    const struct mtpq_trace *x = mtpq_traces_at(tr, q * 12); /* one code, one prose prompt */
    int32_t prompt[P], plain[P + NEW], spec[P + NEW];
    memcpy(prompt, x->tokens + 192 - P, sizeof prompt);
    ck_assert_int_eq(mtpq_decode_greedy(t, NULL, MTPQ_BACKEND_CPU, prompt, P, NEW, 0, plain, NULL, NULL, NULL, &err),
                     MTPQ_OK);
    struct mtpq_accept_stats st3 = {0}; /* the stock drafter at k = 3 */
    for (int k = 1; k <= 8; k++) {
      struct mtpq_accept_stats st;
      const int q8 = k > 4; /* k 5..8: the quantized drafter at k - 4 */
      const int kk = q8 ? k - 4 : k;
      uint8_t rounds[NEW];
      struct mtpq_decode_bench rec = {.rounds = rounds, .cap = NEW};
      ck_assert_msg(mtpq_decode_greedy(t, drs[q8], MTPQ_BACKEND_CPU, prompt, P, NEW, kk, spec, &st, NULL, &rec, &err) ==
                        MTPQ_OK,
                    "%s", err.msg);
      ck_assert_uint_eq((uint64_t)rec.nrounds, st.drafts);
      if (k == 3) st3 = st;
      ck_assert_msg(!memcmp(plain, spec, sizeof plain),
                    "%s, %s drafter, k = %d: speculative output differs from greedy", x->name, q8 ? "mtpq" : "stock",
                    kk);
      uint64_t acc = 0;
      for (int i = 0; i < kk; i++) acc += st.accepted[i];
      /* each round commits its accepted drafts and one token of the target's (the last maybe cut by the end) */
      ck_assert_uint_le(NEW - 1, acc + st.drafts);
      ck_assert_uint_ge(NEW, acc + st.drafts - 1);
      printf("%s, %s drafter, k = %d: %llu rounds, MAL %.3f, output equal to plain greedy\n", x->name,
             q8 ? "mtpq" : "stock", kk, (unsigned long long)st.drafts, mtpq_accept_mal(&st));
      /* throughput runs replay an acceptance pattern: the recorded one replays this run exactly (the same
       * output, the same counts, round by round) */
      int32_t forced[P + NEW];
      struct mtpq_accept_stats fs;
      struct mtpq_decode_bench pb = {.pattern = rounds, .npattern = rec.nrounds};
      ck_assert_msg(!mtpq_decode_greedy(t, drs[q8], MTPQ_BACKEND_CPU, prompt, P, NEW, kk, forced, &fs, NULL, &pb, &err),
                    "%s", err.msg);
      ck_assert(!memcmp(forced, plain, sizeof plain));
      ck_assert_uint_eq(fs.drafts, st.drafts);
      ck_assert_int_eq(pb.cursor, rec.nrounds);
      for (int i = 0; i < kk; i++) ck_assert_uint_eq(fs.accepted[i], st.accepted[i]);
    }
    /* a pattern that accepts every draft: each round k + 1 tokens (the last round cut by the end), the drafts
     * taken whether the target agrees or not, so the output is not the target's */
    const uint8_t all3 = 3;
    struct mtpq_decode_bench pb = {.pattern = &all3, .npattern = 1};
    struct mtpq_accept_stats fs;
    int32_t forced[P + NEW];
    ck_assert(!mtpq_decode_greedy(t, drs[0], MTPQ_BACKEND_CPU, prompt, P, NEW, 3, forced, &fs, NULL, &pb, &err));
    ck_assert_uint_eq(fs.drafts, (NEW - 1 + 3) / 4);
    ck_assert_uint_eq(fs.accepted[0], fs.drafts);
    ck_assert(!memcmp(forced, plain, P * sizeof *plain));
    ck_assert_msg(st3.accepted[2] == st3.drafts || memcmp(forced, plain, sizeof plain) != 0,
                  "the real run rejected a draft, the forced one must differ");
  }
  mtpq_traces_close(tr);
  mtpq_rt_model_close(drs[0]), mtpq_rt_model_close(drs[1]);
  mtpq_target_close(t);
  tu_rmtree(dir);
  free(dir);
}
END_TEST

/* The batch tests' fixture: the tiny target, its stock and mtpq drafters,
 * four prompts of different lengths (two code, two prose) and room for
 * their outputs. */
enum { TB = 4, TB_NEW = 20, TB_PMAX = 48 };
struct tiny_batch {
  struct mtpq_target *t;
  char *dir;
  struct mtpq_rt_model *drs[2];
  int64_t P[TB];
  int32_t prompt[TB][TB_PMAX], plain[TB][TB_PMAX + TB_NEW], got[TB][TB_PMAX + TB_NEW];
  const int32_t *pp[TB];
  int32_t *op[TB];
};

static struct tiny_batch *tiny_batch_open(void) {
  struct mtpq_err err = {0};
  struct tiny_batch *f = calloc(1, sizeof *f);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(mtpq_target_open(models[2], &f->t, &err), MTPQ_OK);
  f->dir = tu_scratch();
  tiny_drafters(f->dir, 50000, 3, f->drs);
  struct mtpq_traces *tr = NULL;
  ck_assert_int_eq(mtpq_traces_open(MTPQ_TESTDATA "/tiny-qwen3next/traces.safetensors", &tr, &err), MTPQ_OK);
  const int64_t P[TB] = {40, 23, 48, 31};
  for (int b = 0; b < TB; b++) {
    const struct mtpq_trace *x = mtpq_traces_at(tr, (size_t)(b * 6));
    f->P[b] = P[b];
    memcpy(f->prompt[b], x->tokens + 192 - P[b], (size_t)P[b] * sizeof **f->prompt);
    f->pp[b] = f->prompt[b], f->op[b] = f->got[b];
  }
  mtpq_traces_close(tr);
  return f;
}

static void tiny_batch_close(struct tiny_batch *f) {
  mtpq_rt_model_close(f->drs[0]), mtpq_rt_model_close(f->drs[1]);
  mtpq_target_close(f->t);
  tu_rmtree(f->dir);
  free(f->dir), free(f);
}

/* Batch 4 with ragged acceptance (issue 49): four prompts of different
 * lengths decoded together give, sequence by sequence, the plain greedy
 * output, at k = 1..4 with the stock and the mtpq drafters; at k = 3 the
 * batch's acceptance is the sum of the four decoded alone. */
START_TEST(test_greedy_batch) {
  struct mtpq_err err = {0};
  struct tiny_batch *f = tiny_batch_open();
  enum { B = TB, NEW = TB_NEW };
  struct mtpq_accept_stats alone = {0};
  alone.k = 3;
  for (int b = 0; b < B; b++) {
    ck_assert(!mtpq_decode_greedy(f->t, NULL, MTPQ_BACKEND_CPU, f->prompt[b], f->P[b], NEW, 0, f->plain[b], NULL, NULL,
                                  NULL, &err));
    struct mtpq_accept_stats s1;
    ck_assert(!mtpq_decode_greedy(f->t, f->drs[0], MTPQ_BACKEND_CPU, f->prompt[b], f->P[b], NEW, 3, f->got[b], &s1,
                                  NULL, NULL, &err));
    mtpq_accept_add(&alone, &s1);
  }
  for (int k = 1; k <= 8; k++) {
    const int q8 = k > 4, kk = q8 ? k - 4 : k;
    struct mtpq_accept_stats sb[B], st = {0};
    memset(f->got, 0xff, sizeof f->got);
    ck_assert_msg(!mtpq_decode_greedy_batch(f->t, f->drs[q8], MTPQ_BACKEND_CPU, B, f->pp, f->P, NEW, kk, f->op, sb,
                                            NULL, NULL, &err),
                  "%s", err.msg);
    st.k = kk;
    for (int b = 0; b < B; b++) mtpq_accept_add(&st, &sb[b]);
    for (int b = 0; b < B; b++)
      ck_assert_msg(!memcmp(f->got[b], f->plain[b], (size_t)(f->P[b] + NEW) * sizeof **f->got),
                    "batch of 4, %s drafter, k = %d: sequence %d differs from its plain greedy output",
                    q8 ? "mtpq" : "stock", kk, b);
    if (!q8 && kk == 3) {
      ck_assert_uint_eq(st.drafts, alone.drafts);
      for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(st.accepted[i], alone.accepted[i]);
        ck_assert_uint_eq(st.reached[i], alone.reached[i]);
      }
    }
    printf("batch of 4, %s drafter, k = %d: %llu rounds, MAL %.3f, every output equal to plain greedy\n",
           q8 ? "mtpq" : "stock", kk, (unsigned long long)st.drafts, mtpq_accept_mal(&st));
  }
  /* no speculation in a batch: the same outputs too; a batch of 9 is refused */
  ck_assert(
      !mtpq_decode_greedy_batch(f->t, NULL, MTPQ_BACKEND_CPU, B, f->pp, f->P, NEW, 0, f->op, NULL, NULL, NULL, &err));
  for (int b = 0; b < B; b++) ck_assert(!memcmp(f->got[b], f->plain[b], (size_t)(f->P[b] + NEW) * sizeof **f->got));
  ck_assert_int_eq(mtpq_decode_greedy_batch(f->t, f->drs[0], MTPQ_BACKEND_CPU, 9, f->pp, f->P, NEW, 3, f->op, NULL,
                                            NULL, NULL, &err),
                   MTPQ_E_INVAL);
  tiny_batch_close(f);
}
END_TEST

/* sampled (temperature 0.8, top-p 0.9), batch of 4: sequence b is, token for
 * token and round for round, what it is decoded alone with stream 100 + b;
 * with and without speculation */
START_TEST(test_sample_batch) {
  struct mtpq_err err = {0};
  struct tiny_batch *f = tiny_batch_open();
  enum { B = TB, NEW = TB_NEW };
  const struct mtpq_sampling sp = {0.8, 0.9, 0, 4242};
  for (int k = 0; k <= 3; k += 3) {
    struct mtpq_rt_model *d = k ? f->drs[1] : NULL;
    struct mtpq_accept_stats sb[B];
    for (int b = 0; b < B; b++)
      ck_assert_msg(!mtpq_decode_sample(f->t, d, MTPQ_BACKEND_CPU, f->prompt[b], f->P[b], NEW, k ? k : 1, &sp,
                                        100 + (uint64_t)b, f->plain[b], &sb[b], NULL, &err),
                    "%s", err.msg);
    memset(f->got, 0xff, sizeof f->got);
    struct mtpq_accept_stats sm[B];
    ck_assert_msg(!mtpq_decode_sample_batch(f->t, d, MTPQ_BACKEND_CPU, B, f->pp, f->P, NEW, k ? k : 1, &sp, 100, f->op,
                                            sm, NULL, NULL, &err),
                  "%s", err.msg);
    int differ = 0;
    for (int b = 0; b < B; b++) {
      ck_assert_msg(!memcmp(f->got[b], f->plain[b], (size_t)(f->P[b] + NEW) * sizeof **f->got),
                    "sampled batch of 4, k = %d: sequence %d differs from its own sampled decode", k, b);
      ck_assert_uint_eq(sm[b].drafts, sb[b].drafts);
      for (int i = 0; i < k; i++) ck_assert_uint_eq(sm[b].accepted[i], sb[b].accepted[i]);
      differ += b && memcmp(f->got[b] + f->P[b], f->got[0] + f->P[0], NEW * sizeof **f->got) != 0;
    }
    ck_assert_int_eq(differ, B - 1); /* (the prompts differ, and so do their streams) */
    printf("sampled batch of 4, k = %d: every sequence equal to its own decode alone\n", k);
  }
  tiny_batch_close(f);
}
END_TEST

/* The throughput runs' hooks on hybrid-mtp (random weights, its own MTP
 * layer): a pattern of zeros takes the target's token every round (the
 * target's greedy output, k times slower); from a later position (zeros
 * cached before it) the same prompt continues differently, since the zero
 * rows share the softmax; the position is the drafter's too. */
START_TEST(test_decode_bench_hooks) {
  struct mtpq_err err = {0};
  struct mtpq_target *t = NULL;
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(!mtpq_target_open(MTPQ_TESTDATA "/target/hybrid-mtp", &t, &err), "%s", err.msg);
  ck_assert_msg(!mtpq_rt_model_open(MTPQ_TESTDATA "/target/hybrid-mtp", NULL, &d, &err), "%s", err.msg);
  enum { P = 6, NEW = 20 };
  const int32_t prompt[P] = {5, 17, 42, 99, 3, 250};
  int32_t plain[P + NEW], zero[P + NEW], late[P + NEW], late0[P + NEW];
  ck_assert(!mtpq_decode_greedy(t, NULL, MTPQ_BACKEND_CPU, prompt, P, NEW, 0, plain, NULL, NULL, NULL, &err));
  const uint8_t z = 0;
  struct mtpq_accept_stats st;
  struct mtpq_decode_bench b = {.pattern = &z, .npattern = 1};
  ck_assert(!mtpq_decode_greedy(t, d, MTPQ_BACKEND_CPU, prompt, P, NEW, 2, zero, &st, NULL, &b, &err));
  ck_assert(!memcmp(zero, plain, sizeof plain));
  ck_assert_uint_eq(st.drafts, NEW - 1);
  ck_assert_uint_eq(st.accepted[0], 0);
  /* from position 37: no speculation, and the zeros pattern, agree with each other but not with position 0 */
  struct mtpq_decode_bench c = {.context = 37}, cz = {.context = 37, .pattern = &z, .npattern = 1};
  ck_assert(!mtpq_decode_greedy(t, NULL, MTPQ_BACKEND_CPU, prompt, P, NEW, 0, late0, NULL, NULL, &c, &err));
  ck_assert(!mtpq_decode_greedy(t, d, MTPQ_BACKEND_CPU, prompt, P, NEW, 2, late, NULL, NULL, &cz, &err));
  ck_assert(!memcmp(late, late0, sizeof late));
  ck_assert(memcmp(late, plain, sizeof plain) != 0);
  /* a negative context is refused */
  struct mtpq_decode_bench neg = {.context = -1};
  ck_assert_int_eq(mtpq_decode_greedy(t, d, MTPQ_BACKEND_CPU, prompt, P, NEW, 2, late, NULL, NULL, &neg, &err),
                   MTPQ_E_INVAL);
  /* sampled: the pattern's counts take the rejection steps' place round by round (recorded as they are
   * taken), from position 37 as from 0 */
  const struct mtpq_sampling sp = {0.9f, 0.95f, 0, 4};
  const uint8_t pat[3] = {2, 0, 1};
  uint8_t rec[64];
  for (int64_t ctx = 0; ctx <= 37; ctx += 37) {
    struct mtpq_decode_bench sb = {.context = ctx, .pattern = pat, .npattern = 3, .rounds = rec, .cap = 64};
    const int32_t *pp = prompt;
    const int64_t Pp = P;
    int32_t *op = late;
    ck_assert_msg(
        !mtpq_decode_sample_batch(t, d, MTPQ_BACKEND_CPU, 1, &pp, &Pp, NEW, 2, &sp, 1, &op, &st, NULL, &sb, &err), "%s",
        err.msg);
    ck_assert_int_ge(sb.nrounds, 5);
    uint64_t acc0 = 0;
    int64_t made = P;
    for (int64_t i = 0; i < sb.nrounds; i++) {
      const int keff = NEW - 1 - (made - P) < 2 ? (int)(NEW - 1 - (made - P)) : 2,
                want = pat[i % 3] < keff ? pat[i % 3] : keff;
      ck_assert_int_eq(rec[i], want);
      acc0 += rec[i] >= 1;
      made += rec[i] + 1;
    }
    ck_assert(made == P + NEW - 1 || made == P + NEW); /* (the last round's token may fall past the end) */
    ck_assert_uint_eq(st.drafts, (uint64_t)sb.nrounds);
    ck_assert_uint_eq(st.accepted[0], acc0);
  }
  mtpq_rt_model_close(d);
  mtpq_target_close(t);
}
END_TEST

int main(void) {
  Suite *su = suite_create("target");
  TCase *tc = tcase_create("target");
  tcase_add_test(tc, test_layer_stacks);
  tcase_add_loop_test(tc, test_verify_equals_decode, 0, 3);
  tcase_add_test(tc, test_verify_many);
  tcase_add_test(tc, test_config_refusals);
  tcase_add_loop_test(tc, test_transformers_fixtures, 0, 3);
  tcase_add_test(tc, test_greedy_lossless);
  tcase_add_test(tc, test_decode_bench_hooks);
  tcase_add_test(tc, test_greedy_batch);
  tcase_add_test(tc, test_sample_batch);
  tcase_add_test(tc, test_synthetic);
  tcase_add_test(tc, test_nonfinite_logits);
  tcase_add_test(tc, test_route_margin);
  tcase_add_test(tc, test_fp16_experts);
  tcase_add_test(tc, test_kv_bf16);
  tcase_add_test(tc, test_sampler);
  tcase_add_test(tc, test_sampler_threshold);
  tcase_add_test(tc, test_sampler_rows);
  tcase_set_timeout(tc, 900); /* (each decode test: minutes under ASan + UBSan) */
  suite_add_tcase(su, tc);
  return tu_run_suite(su, 0);
}
