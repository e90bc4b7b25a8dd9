/* CUDA drafter backend vs the CPU reference (label gpu; exits 77 without a
 * device or a CUDA build): the tiny model's stock drafter and its quantized
 * drafter (FP8 linears, NVFP4 experts, reduced FP8 head, written by the
 * library in a scratch directory), first-pass outputs and chained steps, and
 * the full greedy replay of every trace with both backends; then random
 * small targets (gen_fixture: widths that fill part of a 512-column band,
 * 1..8 query heads per KV head, a width that is not a multiple of 16 for
 * the generic kernel) stock and quantized: a 40-slot prefill (chunks of up
 * to 8 slots) within relative error 1e-4 of the CPU, and batched drafts of
 * 2, 3 and 5 sequences with different contexts (launches of 2, 4 and 8
 * tokens), then of one of them alone (the head at one token; some also
 * under each setting of knobs[] below), giving the CPU's tokens, and the head's logits for
 * three hidden states; one of them once more at contexts over 8K. The
 * stock (BF16) heads at 5..8 tokens go through cuBLASLt by default, so the
 * batched drafts of 5 sequences check that path against the CPU too.
 * MTPQ_GPU_SHAPES=0,4,7 (say) runs only those random shapes and leaves out
 * the 8K case ("long" names it): a short check of one kernel on the GPU
 * machine, whose calls are limited to 10 minutes.
 * Tolerance: both backends accumulate in float32 in different orders, and
 * both cache K and V in BF16, so a value that differs by a float ulp between
 * them can round to neighbouring BF16 values (2^-8 apart): outputs that went
 * through the cache agree to 1.8e-7 .. 2.7e-5 (H200, random shapes 0-10 and
 * the 8K case; r0, r2, r4 and r7 over 1e-5), 1.6e-7 .. 3.7e-7 while both
 * cached float32 (bound 1e-5 then); the tiny model's quantized first pass
 * (launches of 8 tokens) 2.8e-7 with its FP8 products on k_mv and 6.2e-5 on
 * the tensor cores (k_dmma, whose sums are the tensor core's), its argmax
 * and replay still the CPU's; against a cache
 * left unrounded the CPU is 8.7e-4 off the PyTorch reference (check_runtime).
 * The head's logits from one hidden state stay within 1e-5. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kernels/cuda/tune.h"
#include "kernels/traces.h"
#include "quant/gpu_quant.h"
#include "kernels/replay.h"
#include "kernels/runtime.h"
#include "quant/drafter.h"
#include "testutil.h"
#include "hand_over.h"

#define T MTPQ_TESTDATA "/tiny-qwen3next"
static char *qdir;

static double rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / den);
}

static void compare_backends(const char *drafter) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(mtpq_rt_model_open(T "/model", drafter, &d, &err) == MTPQ_OK, "%s", err.msg);
  struct mtpq_traces *tr = NULL;
  ck_assert_int_eq(mtpq_traces_open(T "/traces.safetensors", &tr, &err), MTPQ_OK);
  int64_t H = mtpq_rt_model_hidden(d);
  uint64_t rounds = 0, agree = 0;
  struct mtpq_accept_stats sc = {0}, sg = {0};
  for (size_t i = 0; i < mtpq_traces_count(tr); i++) {
    const struct mtpq_trace *xt = mtpq_traces_at(tr, i);
    int64_t n = xt->n;
    int32_t *x = malloc((size_t)n * 4);
    memcpy(x, xt->tokens, (size_t)n * 4);
    const void *hidden = xt->hidden_bf16;
    struct mtpq_session *c = NULL, *g = NULL;
    ck_assert_int_eq(mtpq_session_open(d, MTPQ_BACKEND_CPU, n, 0, &c, &err), MTPQ_OK);
    ck_assert_msg(mtpq_session_open(d, MTPQ_BACKEND_CUDA, n, 0, &g, &err) == MTPQ_OK, "%s", err.msg);
    if (rounds == 0) { /* first pass over the prompt of the first trace */
      int32_t tok[192];
      int64_t pos[192];
      memcpy(tok, x + 1, sizeof tok);
      for (int k = 0; k < 192; k++) pos[k] = k;
      float *oc = malloc((size_t)(192 * H) * 4), *og = malloc((size_t)(192 * H) * 4);
      ck_assert_int_eq(mtpq_session_step(c, 192, tok, hidden, 1, pos, oc, &err), MTPQ_OK);
      ck_assert_msg(mtpq_session_step(g, 192, tok, hidden, 1, pos, og, &err) == MTPQ_OK, "%s", err.msg);
      double e = rel_err(og, oc, (size_t)(192 * H));
      printf("%s: first pass, CUDA vs CPU relative error %.3g\n", drafter ? drafter : "stock", e);
      ck_assert_msg(e < 1e-4, "first pass: relative error %.3g", e);
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
    ck_assert_int_eq(mtpq_replay_trace(c, x, hidden, n, 192, 3, &sc, &err), MTPQ_OK);
    ck_assert_msg(mtpq_replay_trace(g, x, hidden, n, 192, 3, &sg, &err) == MTPQ_OK, "%s", err.msg);
    mtpq_session_close(c), mtpq_session_close(g);
    free(x);
  }
  printf("%s: argmax agreement on the first pass %llu/%llu; replay drafts cpu %llu gpu %llu, accepted cpu %llu/%llu/%llu "
         "gpu %llu/%llu/%llu\n", drafter ? drafter : "stock", (unsigned long long)agree, (unsigned long long)rounds,
         (unsigned long long)sc.drafts, (unsigned long long)sg.drafts, (unsigned long long)sc.accepted[0],
         (unsigned long long)sc.accepted[1], (unsigned long long)sc.accepted[2], (unsigned long long)sg.accepted[0],
         (unsigned long long)sg.accepted[1], (unsigned long long)sg.accepted[2]);
  ck_assert_uint_eq(agree, rounds);
  sc.draft_s = sg.draft_s = sc.catchup_s = sg.catchup_s = 0; /* wall-clock times: the backends' speeds differ */
  ck_assert_int_eq(memcmp(&sc, &sg, sizeof sc), 0);
  mtpq_traces_close(tr);
  mtpq_rt_model_close(d);
}

START_TEST(test_stock) { compare_backends(NULL); }
END_TEST

static char *scratch;

/* the settings compare_random_knobs runs under besides the defaults, bit k
 * of its others for knobs[k]: every kill switch and every MTPQ_CUDA_TUNE key
 * of kernels/cuda/tune.h (mtpq_cuda_tune_override: the environment is read
 * once a process) */
static const struct {
  const char *graphs, *pdl, *tune;
} knobs[] = {
    {NULL, NULL, "head_mma=0"},  /* the head on k_mv's FFMA path at every token count */
    {NULL, NULL, "attn_ring=0"}, /* a block per split (the default: the ring, two blocks per SM over several splits) */
    {NULL, NULL, "attn_x=1"},    /* the ring with one block per (KV head, token): all the splits merged in one */
    {NULL, NULL, "kv_ef=1"},     /* the cached K/V copied with the evict-first hint at any length */
    {NULL, NULL, "dmma=0"},      /* the plain dense products at 2..8 tokens on k_mv's FFMA path (default: k_dmma) */
    {NULL, NULL, "lt=0"},        /* the BF16 heads on k_head_mma at every token count (default: cuBLASLt from 5) */
    {NULL, NULL, "lt=1"},        /* the BF16 heads through cuBLASLt at every token count, one included */
    {NULL, NULL, "glu=0"},       /* the routed gate/up as separate matrices, then k_swiglu */
    {"0", NULL, NULL},           /* MTPQ_CUDA_GRAPHS=0: the kernels launched one by one */
    {NULL, "0", NULL},           /* MTPQ_CUDA_PDL=0: no programmatic dependent launch */
    {NULL, NULL, "mvs=1"},       /* one-token NVFP4 products streamed wherever k_mvs applies (default: past a wave) */
    {NULL, NULL, "dmv=1"},       /* plain dense products of few rows at 2..8 tokens a warp a row (k_dmv) */
};
static const char *knob_now = "defaults";
#define NKNOB (sizeof knobs / sizeof knobs[0])

/* one random target: prefill + batched drafts (5, 3 and 2 sequences: the
 * launches of 8, 4 and 2 tokens), CPU vs CUDA */
static void compare_random(const char *target, const char *drafter, int64_t ctx0) {
  struct mtpq_err err = {0};
  struct mtpq_rt_model *d = NULL;
  ck_assert_msg(mtpq_rt_model_open(target, drafter, &d, &err) == MTPQ_OK, "%s", err.msg);
  int64_t H = mtpq_rt_model_hidden(d), V = mtpq_rt_model_vocab(d);
  enum { NS = 5, STEPS = 4, PRE = 40 };
  /* sequence q holds ctx0 + 13 q positions and drafts STEPS on (sequence 0 twice): 13 NS + STEPS covers all */
  struct mtpq_session *c = NULL, *g = NULL;
  ck_assert_int_eq(mtpq_session_open_batch(d, MTPQ_BACKEND_CPU, ctx0 + 13 * NS + STEPS, 0, NS, &c, &err), MTPQ_OK);
  ck_assert_msg(mtpq_session_open_batch(d, MTPQ_BACKEND_CUDA, ctx0 + 13 * NS + STEPS, 0, NS, &g, &err) == MTPQ_OK, "%s",
                err.msg);
  float *h = malloc((size_t)(PRE * H) * 4), *oc = malloc((size_t)(PRE * H) * 4), *og = malloc((size_t)(PRE * H) * 4);
  int32_t tok[PRE];
  int64_t pos[PRE], start[NS];
  uint64_t r = 88172645463325252ull;
  double worst = 0;
  for (int q = 0; q < NS; q++) { /* sequence q: ctx0 + 13 q positions, in slots of PRE */
    ck_assert_int_eq(mtpq_session_select(c, q, &err), MTPQ_OK);
    ck_assert_int_eq(mtpq_session_select(g, q, &err), MTPQ_OK);
    int64_t len = ctx0 + 13 * q;
    for (int64_t p0 = 0; p0 < len; p0 += PRE) {
      int n = (int)(len - p0 < PRE ? len - p0 : PRE);
      for (int i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)V), pos[i] = p0 + i;
        for (int64_t j = 0; j < H; j++) r ^= r << 13, r ^= r >> 7, r ^= r << 17, h[i * H + j] = (float)((r >> 40) % 2001) / 1000.0f - 1.0f;
      }
      ck_assert_int_eq(mtpq_session_step(c, n, tok, h, 0, pos, oc, &err), MTPQ_OK);
      ck_assert_msg(mtpq_session_step(g, n, tok, h, 0, pos, og, &err) == MTPQ_OK, "%s", err.msg);
      double e = rel_err(og, oc, (size_t)(n * H));
      worst = e > worst ? e : worst;
    }
    start[q] = len;
  }
  printf("%s: prefill relative error %.3g\n", drafter ? drafter : target, worst);
  ck_assert_msg(worst < 1e-4, "%s: prefill relative error %.3g", drafter ? drafter : target, worst);
  int32_t t0[NS], dc[NS * STEPS], dg[NS * STEPS];
  for (int q = 0; q < NS; q++) t0[q] = tok[q];
  int same = 0, all = 0;
  /* the first 2 and 3 sequences again from the same tokens and positions
     (their K/V slots rewritten with the same rows), then all 5 */
  static const int ns[] = {2, 3, NS};
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(mtpq_session_draft(c, ns[k], t0, h, start, STEPS, dc, &err), MTPQ_OK);
    /* the second call after bench-step's L2 flush: it must leave the session as it was */
    if (k == 1) ck_assert_msg(mtpq_session_flush_l2(g, &err) == MTPQ_OK, "%s", err.msg);
    ck_assert_msg(mtpq_session_draft(g, ns[k], t0, h, start, STEPS, dg, &err) == MTPQ_OK, "%s", err.msg);
    for (int i = 0; i < ns[k] * STEPS; i++) same += dc[i] == dg[i];
    all += ns[k] * STEPS;
  }
  /* sequence 0 alone, on from its drafts: one token a step, so the head at
   * one token (k_head_dyn, k_head_mma, or k_mv where they do not apply or are switched off) */
  int32_t t1 = dc[(STEPS - 1) * NS], d1c[STEPS], d1g[STEPS];
  int64_t s1 = start[0] + STEPS;
  ck_assert_int_eq(mtpq_session_draft(c, 1, &t1, h, &s1, STEPS, d1c, &err), MTPQ_OK);
  ck_assert_msg(mtpq_session_draft(g, 1, &t1, h, &s1, STEPS, d1g, &err) == MTPQ_OK, "%s", err.msg);
  int same1 = 0;
  for (int i = 0; i < STEPS; i++) same1 += d1c[i] == d1g[i];
  /* the head alone with its logits, three times over (the CUDA backend's
   * one-token head launches one after another: each must cover every row;
   * oc's first rows hold hidden states of the prefill), within the
   * prefill's tolerance of the CPU's */
  float *lc = malloc((size_t)V * 4), *lg = malloc((size_t)V * 4);
  double lworst = 0;
  for (int rep = 0; rep < 3; rep++) {
    int32_t ac, ag;
    mtpq_session_head(c, oc + (size_t)rep * H, &ac, lc);
    mtpq_session_head(g, oc + (size_t)rep * H, &ag, lg);
    for (int64_t v = 0; v < V; v++) /* -inf outside a reduced head, in both */
      if (isinf(lc[v]) || isinf(lg[v]))
        ck_assert_msg(lc[v] == lg[v], "logit %lld: cpu %g gpu %g", (long long)v, lc[v], lg[v]);
    double num = 0, den = 0;
    for (int64_t v = 0; v < V; v++)
      if (!isinf(lc[v])) num += ((double)lg[v] - lc[v]) * ((double)lg[v] - lc[v]), den += (double)lc[v] * lc[v];
    const double e = sqrt(num / den);
    lworst = e > lworst ? e : lworst;
    ck_assert_int_eq(ac, ag);
  }
  ck_assert_msg(lworst < 1e-5, "%s: head logits relative error %.3g", drafter ? drafter : target, lworst);
  free(lc), free(lg);
  printf("%s (%s", drafter ? drafter : target, knob_now);
  printf("): prefill relative error %.3g; batched drafts %d/%d tokens equal, one-sequence drafts %d/%d, head logits "
         "relative error %.3g\n", worst, same, all, same1, STEPS, lworst);
  ck_assert_int_eq(same, all);
  ck_assert_int_eq(same1, STEPS);
  free(h), free(oc), free(og);
  mtpq_session_close(c), mtpq_session_close(g);
  mtpq_rt_model_close(d);
}

/* compare_random with the defaults (the heads on tensor cores where it applies,
 * cols % 64 == 0: k_head_dyn at one token, k_head_mma at 2..8), then once
 * with each knob whose bit is set in others (knobs[]) */
static void compare_random_knobs(const char *target, const char *drafter, int64_t ctx0, int others) {
  compare_random(target, drafter, ctx0);
  struct mtpq_err err = {0};
  for (size_t k = 0; k < NKNOB; k++)
    if (others & 1 << k) {
      ck_assert_msg(mtpq_cuda_tune_override(knobs[k].graphs, knobs[k].pdl, knobs[k].tune, &err) == MTPQ_OK, "%s",
                    err.msg);
      knob_now = knobs[k].tune ? knobs[k].tune : knobs[k].graphs ? "MTPQ_CUDA_GRAPHS=0" : "MTPQ_CUDA_PDL=0";
      compare_random(target, drafter, ctx0);
    }
  ck_assert(mtpq_cuda_tune_override(NULL, NULL, NULL, &err) == MTPQ_OK);
  knob_now = "defaults";
}

/* whether MTPQ_GPU_SHAPES (a comma-separated list of shape indices and
 * "long") is unset or names this shape */
static int shape_on(const char *name) {
  const char *e = getenv("MTPQ_GPU_SHAPES");
  if (!e || !*e) return 1;
  const size_t n = strlen(name);
  for (const char *p = e; *p;) {
    const char *q = strchr(p, ',');
    const size_t len = q ? (size_t)(q - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return 1;
    p += len + (q != NULL);
  }
  return 0;
}

/* gen_fixture: a random target in dir */
static void gen_target(const char *dir, int hidden, int experts, int inter, int heads, int kv, int head_dim, int vocab,
                       int seed) {
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "%s %s --hidden %d --experts %d --inter %d --heads %d --kv %d --head-dim %d --vocab %d "
           "--seed %d > /dev/null", MTPQ_GEN_FIXTURE, dir, hidden, experts, inter, heads, kv, head_dim, vocab, seed);
  ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

START_TEST(test_random_shapes) {
  /* hidden, experts, inter, heads, kv, head_dim, vocab, quantize */
  /* (gen_fixture routes top-10) */
  static const int sh[][8] = {{256, 16, 64, 4, 2, 64, 1000, 1}, {320, 16, 48, 8, 1, 32, 777, 1},
                              {1024, 12, 96, 16, 2, 128, 3000, 1}, {200, 12, 40, 2, 2, 24, 500, 0},
                              /* 8 query heads per KV head at head_dim 256: the 80B attention shape, which
                                 the CUDA backend runs through its own k_attn instantiation */
                              {512, 16, 64, 16, 2, 256, 2000, 1},
                              /* a head too large for one wave at 8 rows per warp, BF16 (60,000 rows) and
                                 FP8 (the reduced 20,000): k_head_mma at 2..8 tokens, and with it off
                                 the FFMA head's large-launch path */
                              {64, 16, 32, 4, 2, 16, 60000, 1},
                              /* at one token on 132 SMs: the routed gate/up, as 10 row-pair matrices of 960
                                 rows, at 6 rows per warp (their own rule); the 9,000-row BF16 head (5 rows
                                 per warp on k_mv when written; now on the tensor cores, k_head_mma) */
                              {64, 16, 480, 4, 2, 16, 9000, 1},
                              /* at one token, 2 or more bands of x in every product: row sets shared by
                                 warps (k_mv S: fc 4 bands, S = 4; o 8 bands, S = 4),
                                 q/k/v of 9,216 FP8 rows
                                 at 5 a warp, routed gate/up pairs of 1,024 rows at 6 and the 11,334-row
                                 reduced FP8 head (k_head_mma at one token, k_mv at 2..8) */
                              {1024, 16, 512, 16, 2, 256, 34000, 1},
                              /* the routing past 32 experts (96: 3 a lane of k_route's one warp) and past
                                 512 (600: two warps, their keys met through shared memory) */
                              {64, 96, 32, 4, 2, 16, 1000, 1}, {64, 600, 16, 4, 2, 16, 800, 0},
                              /* hidden 2,048, the 80B shape's: the norm kernels' instances for exactly
                                 that many values (kernels/rt_ops.cuh, RT_NQX) */
                              {2048, 16, 64, 4, 2, 64, 1000, 1}};
  int ran = 0;
  for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
    char dir[700], name[24];
    snprintf(name, sizeof name, "%zu", k);
    if (!shape_on(name)) continue;
    ran++;
    snprintf(dir, sizeof dir, "%s/r%zu", scratch, k);
    gen_target(dir, sh[k][0], sh[k][1], sh[k][2], sh[k][3], sh[k][4], sh[k][5], sh[k][6], (int)k + 7);
    /* r5-r10 (the large heads r5-r7, then small ones) also with the head on
       k_mv; r0 and r4 (the 80B attention shape) with a block per split and
       with one ring block over all the splits; r0 also with the cached K/V
       copied evict-first (by default only past half of L2, which no test's
       cache reaches), without graphs and without programmatic dependent
       launch; r0 and r10 (fc: 8 slices of 512 columns, k_dmma's largest
       cluster) with the dense products at 2..8 tokens on k_mv; r0, r5 and
       r10 with the stock BF16 heads on k_head_mma at 5..8 tokens (by
       default there through cuBLASLt), r0, r3 (hidden 200) and r5 with them
       through cuBLASLt at every token count; r0 and r6 (routed gate/up of
       960 rows) with separate gate and up matrices; r0 (256 columns: one
       128-column chunk a half), r1 (320 columns: not streamed, k_mvs takes
       multiples of 256), r2 and r10 (2,048 columns, the 80B shape's) with
       the quantized drafter's routed gate/up streamed at every token count
       (k_mvs; by default only where k_mv would take more than a wave: r7's
       1,024-row pairs from 2 tokens on); r0, r2 and r10 with the dense
       products of few rows at 2..8 tokens on k_dmv (dmv=1: those of
       whole 256-column multiples, the routers among them) */
    const int others = (k >= 5 ? 1 : 0) | (k == 0 || k == 4 ? 2 | 4 : 0) | (k == 0 ? 8 | 256 | 512 : 0) |
                       (k == 0 || k == 10 ? 16 : 0) | (k == 0 || k == 5 || k == 10 ? 32 : 0) |
                       (k == 0 || k == 3 || k == 5 ? 64 : 0) | (k == 0 || k == 6 ? 128 : 0) |
                       (k <= 2 || k == 10 ? 1024 : 0) | (k == 0 || k == 2 || k == 10 ? 2048 : 0);
    compare_random_knobs(dir, NULL, 21 + 9 * (int64_t)k, others);
    if (!sh[k][7]) continue;
    /* a reduced head of every 3rd id */
    struct mtpq_err err = {0};
    char ids[760], q[760];
    snprintf(ids, sizeof ids, "%s/ids.safetensors", dir);
    snprintf(q, sizeof q, "%s-q", dir);
    int64_t n = (sh[k][6] + 2) / 3, shape[1] = {n};
    int64_t *v = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) v[i] = 3 * i;
    struct mtpq_st_writer *w = NULL;
    ck_assert(!mtpq_stw_init(ids, &w, &err) && !mtpq_stw_add(w, "ids", MTPQ_DTYPE_I64, 1, shape, &err) &&
              !mtpq_stw_begin(w, &err) && !mtpq_stw_write_all(w, "ids", v, (uint64_t)n * 8, &err) &&
              !mtpq_stw_commit(w, &err));
    mtpq_stw_free(w);
    free(v);
    struct mtpq_drafter_params p = mtpq_drafter_default_params();
    p.target = dir, p.vocab_ids = ids, p.out = q, p.expert_input_scale = 0.1667;
    struct mtpq_plan *pl = NULL;
    ck_assert_msg(!mtpq_drafter_plan(&p, &pl, &err) && !mtpq_drafter_write(&p, pl, NULL, NULL, &err), "%s", err.msg);
    mtpq_plan_free(pl);
    compare_random_knobs(dir, q, 30 + 5 * (int64_t)k, others);
  }
  /* over 256 attention splits of 32 positions (8K): k_attn_combine's later
     passes (one 16-wide head: the CPU's prefill of 5 x 8K positions is cheap) */
  if (shape_on("long")) {
    ran++;
    char dir[700];
    snprintf(dir, sizeof dir, "%s/long", scratch);
    gen_target(dir, 64, 16, 32, 1, 1, 16, 500, 3);
    /* (by default the ring, a merged partial a block, and k_attn_combine<1> over them; a block
       per split: a partial a split, <4> in one pass; one ring block over all; the evict-first hint) */
    compare_random_knobs(dir, NULL, 8230, 2 | 4 | 8);
  }
  ck_assert_msg(ran > 0, "MTPQ_GPU_SHAPES=%s names no shape", getenv("MTPQ_GPU_SHAPES"));
}
END_TEST

START_TEST(test_quantized) { compare_backends(qdir); }

/* the live loop's hand-over in device memory (tests/hand_over.h) against the
 * host-memory calls, on both drafters */
START_TEST(test_hand_over) {
  check_hand_over(T "/model", NULL, MTPQ_BACKEND_CUDA);
  check_hand_over(T "/model", qdir, MTPQ_BACKEND_CUDA);
}
END_TEST
END_TEST

int main(void) {
  if (tu_no_gpu()) return 77;
  struct mtpq_err err = {0};
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
  scratch = dir;
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
  /* two cases, so that CK_RUN_CASE=random runs the random shapes alone (a
     short check of a kernel change on the GPU machine) */
  Suite *s = suite_create("gpu_runtime");
  TCase *tc = tcase_create("tiny");
  tcase_add_test(tc, test_stock);
  tcase_add_test(tc, test_quantized);
  tcase_add_test(tc, test_hand_over);
  tcase_set_timeout(tc, 600);
  suite_add_tcase(s, tc);
  TCase *tr = tcase_create("random");
  tcase_add_test(tr, test_random_shapes);
  tcase_set_timeout(tr, 600);
  suite_add_tcase(s, tr);
  const int status = tu_run_suite(s, 1);
  tu_rmtree(dir);
  return status;
}
