/* The live greedy draft/verify loop; see kernels/decode.h. */
#include "kernels/decode.h"

#include <stdlib.h>
#include <string.h>

#include "io/util.h"
#include "kernels/sampler.h"

/* The target's hidden states and the drafter's outputs stay where the
 * backend keeps data (device memory on the CUDA backend: a round moves
 * token ids between host and device, nothing else). The drafter reads the
 * target's hidden states as a BF16 model hands them over (vLLM's MTP
 * proposer; the traces bench-acceptance replays hold them so too): rounded
 * to BF16, to nearest even, as mtpq_session_step_at reads them. */

/* The prompt x[0, P) through the target: all but its last token as a
 * prefill (mtpq_target_prefill), the last one verified alone, with the
 * head: its logits into lg[0, V) when lg, else its argmax into x[P]. The
 * hidden states into h (NULL: none wanted). */
static enum mtpq_status prefill(struct mtpq_target_seq *s, int32_t *x, int64_t P, float *h, int64_t H, float *lg,
                                struct mtpq_err *err) {
  int32_t a = 0;
  enum mtpq_status rc = mtpq_target_prefill(s, P - 1, x, h, err);
  if (!rc) rc = mtpq_target_verify_logits(s, 1, x + P - 1, h ? h + (P - 1) * H : NULL, lg, lg ? NULL : &a, err);
  if (!rc) rc = mtpq_target_accept(s, 0, err);
  if (!rc && !lg) x[P] = a;
  return rc;
}

/* A round's outcome committed: the j accepted drafts d and the token after
 * them (next) at x[c + 1 ..] (within N), and the acceptance counted as
 * bench-acceptance counts it. */
static void commit_round(int32_t *x, int64_t N, int64_t c, const int32_t *d, int j, int keff, int32_t next,
                         struct mtpq_accept_stats *acc) {
  for (int i = 0; i < j; i++) x[c + 1 + i] = d[i];
  if (c + 1 + j < N) x[c + 1 + j] = next;
  acc->drafts++, acc->draft_tokens += (uint64_t)keff;
  for (int i = 0; i < j; i++) acc->accepted[i]++;
  for (int i = 0; i <= j && i < keff; i++) acc->reached[i]++;
}

/* One sequence of a batched decode (greedy; a sampled one, struct sseq, adds its own to it). */
struct gseq {
  struct mtpq_target_seq *s;
  int32_t *x; /* the caller's output: prompt, then the tokens */
  enum mtpq_backend be;
  float *h,
      *out; /* backend memory (NULL without a drafter): the target's hidden states, the drafter's catch-up outputs */
  int32_t *tok;       /* catch-up tokens */
  int64_t *pos;       /* catch-up positions */
  int64_t N, c, from; /* length when done, tokens committed, the drafter's next slot */
  struct mtpq_accept_stats acc;
};

/* The drafter catches up on g's slots (h[t], x[t + 1]) at t = from .. c - 1
 * the target produced since its last round (one step call; the sequence's
 * token t sits at position c0 + t); its outputs go to out[0 .. c - from). */
static enum mtpq_status catch_up(struct mtpq_session *dr, struct gseq *g, int64_t c0, int64_t H, struct mtpq_err *err) {
  const int64_t m = g->c - g->from;
  for (int64_t i = 0; i < m; i++) g->tok[i] = g->x[g->from + i + 1], g->pos[i] = c0 + g->from + i;
  return mtpq_session_step_at(dr, (int)m, g->tok, g->h + g->from * H, 1, g->pos, g->out, err);
}

/* g's hidden state at its token t (where the target writes it), NULL without a drafter */
static float *hid_at(const struct gseq *g, int64_t t, int64_t H) { return g->h ? g->h + t * H : NULL; }

/* g for a prompt of P tokens and n_new more (the prompt copied to the caller's out; with a drafter, hidden
 * states and catch-up room for all of them in the backend's memory) and its target sequence (max_pos
 * positions, verifying up to nv) */
static enum mtpq_status gseq_open(struct gseq *g, struct mtpq_target *t, enum mtpq_backend be, int drafter,
                                  const int32_t *prompt, int64_t P, int64_t n_new, int k, int32_t *out, int64_t max_pos,
                                  int nv, struct mtpq_err *err) {
  const int64_t H = mtpq_target_hidden(t);
  const size_t rows = (size_t)(P + n_new) * (size_t)H * sizeof(float);
  g->N = P + n_new, g->c = P, g->x = out, g->acc.k = k, g->be = be;
  memcpy(g->x, prompt, (size_t)P * sizeof *g->x);
  if (drafter) {
    g->h = mtpq_backend_alloc(be, rows), g->out = mtpq_backend_alloc(be, rows);
    if (!g->h || !g->out)
      return mtpq_err_set(err, MTPQ_E_NOMEM, "out of %s memory (2 x %zu bytes of hidden states)",
                          be == MTPQ_BACKEND_CUDA ? "device" : "host", rows);
  }
  g->tok = malloc((size_t)g->N * sizeof *g->tok), g->pos = malloc((size_t)g->N * sizeof *g->pos);
  if (!g->tok || !g->pos) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  return mtpq_target_seq_open(t, be, max_pos, nv, &g->s, err);
}

static void gseq_free(struct gseq *g) {
  mtpq_target_seq_close(g->s);
  mtpq_backend_free(g->be, g->h), mtpq_backend_free(g->be, g->out);
  free(g->tok), free(g->pos);
}

/* The drafter fits the target and the backend: k in 1..7 on CUDA (a verify
 * of k + 1 <= 8 tokens), 1..MTPQ_MAX_K on the CPU; the target's hidden size
 * (and, when vocab is set, its vocabulary: the sampled loop compares full
 * distributions). No drafter: nothing to check. */
static enum mtpq_status check_drafter(const struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                      int k, int vocab, struct mtpq_err *err) {
  if (!drafter) return MTPQ_OK;
  const int kmax = be == MTPQ_BACKEND_CUDA ? 7 : MTPQ_MAX_K;
  if (k < 1 || k > kmax)
    return mtpq_err_set(err, MTPQ_E_INVAL, "k = %d outside 1..%d (the %s backend)", k, kmax,
                        be == MTPQ_BACKEND_CUDA ? "CUDA" : "CPU");
  if (mtpq_rt_model_hidden(drafter) != mtpq_target_hidden(t) ||
      (vocab && mtpq_rt_model_vocab(drafter) != mtpq_target_vocab(t)))
    return mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH,
                        "the drafter (hidden %lld, vocabulary %lld) does not fit the target (%lld, %lld)",
                        (long long)mtpq_rt_model_hidden(drafter), (long long)mtpq_rt_model_vocab(drafter),
                        (long long)mtpq_target_hidden(t), (long long)mtpq_target_vocab(t));
  return MTPQ_OK;
}

/* B sequences (1..MTPQ_MAX_SEQS) of P[b] >= 1 prompt tokens, n_new >= 1 new ones each */
static enum mtpq_status check_batch(int B, const int64_t *P, int64_t n_new, struct mtpq_err *err) {
  if (B < 1 || B > MTPQ_MAX_SEQS || n_new < 1)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a batch of %d sequences (1..%d), %lld new tokens", B, MTPQ_MAX_SEQS,
                        (long long)n_new);
  for (int b = 0; b < B; b++)
    if (P[b] < 1) return mtpq_err_set(err, MTPQ_E_INVAL, "sequence %d: a prompt of %lld tokens", b, (long long)P[b]);
  return MTPQ_OK;
}

/* the benchmark hooks make sense: a context >= 0, a pattern of at least one round */
static enum mtpq_status check_bench(const struct mtpq_decode_bench *bench, struct mtpq_err *err) {
  if (bench && (bench->context < 0 || (bench->pattern && bench->npattern < 1)))
    return mtpq_err_set(err, MTPQ_E_INVAL, "a benchmark context of %lld, an acceptance pattern of %lld rounds",
                        (long long)bench->context, (long long)bench->npattern);
  return MTPQ_OK;
}

/* a round of keff drafts: j accepted, or the benchmark's pattern's next count (at most keff) in its place;
 * the count kept in the benchmark's record */
static int bench_round(struct mtpq_decode_bench *bench, int j, int keff) {
  if (bench && bench->pattern) {
    const int pj = bench->pattern[bench->cursor++ % bench->npattern];
    j = pj < keff ? pj : keff;
  }
  if (bench && bench->rounds && bench->nrounds < bench->cap) bench->rounds[bench->nrounds++] = (uint8_t)j;
  return j;
}

enum mtpq_status mtpq_decode_greedy_batch(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                          int B, const int32_t *const *prompts, const int64_t *P, int64_t n_new, int k,
                                          int32_t *const *outs, struct mtpq_accept_stats *st,
                                          struct mtpq_decode_times *tm, struct mtpq_decode_bench *bench,
                                          struct mtpq_err *err) {
  enum mtpq_status rc = check_batch(B, P, n_new, err);
  if (rc) return rc;
  const int64_t c0 = bench ? bench->context : 0; /* the position of each sequence's first token */
  rc = check_bench(bench, err);
  if (rc) return rc;
  rc = check_drafter(t, drafter, be, k, 0, err);
  if (rc) return rc;
  const int64_t H = mtpq_target_hidden(t);
  struct gseq q[MTPQ_MAX_SEQS];
  memset(q, 0, sizeof q);
  int64_t most = 0;
  for (int b = 0; b < B && !rc; b++) {
    struct gseq *g = &q[b];
    rc = gseq_open(g, t, be, drafter != NULL, prompts[b], P[b], n_new, k, outs[b], c0 + P[b] + n_new,
                   drafter ? k + 1 : 1, err);
    most = g->N > most ? g->N : most;
    if (!rc && c0) rc = mtpq_target_seq_jump(g->s, c0, err);
  }
  /* the drafter: one session, a KV cache per sequence; every round drafts for all B at once (a finished
   * sequence drafts on, unread, from its last position: room for k more) */
  struct mtpq_session *dr = NULL;
  int32_t *dd = malloc((size_t)(B * (k > 1 ? k : 1)) * sizeof *dd);
  int64_t dp[MTPQ_MAX_SEQS];
  const float *drow[MTPQ_MAX_SEQS];          /* each sequence's last catch-up output (NULL: finished) */
  struct mtpq_target_seq *vs[MTPQ_MAX_SEQS]; /* a verify of several sequences: theirs, tokens, hidden, argmax */
  const int32_t *vt[MTPQ_MAX_SEQS];
  float *vh[MTPQ_MAX_SEQS];
  int32_t *va[MTPQ_MAX_SEQS];
  if (!rc && !dd) rc = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  if (!rc && drafter) rc = mtpq_session_open_batch(drafter, be, c0 + most + k + 1, 0, B, &dr, err);
  /* the prompts: their hidden states, and the target's first token (the argmax after the last) */
  const double start = mtpq__now();
  for (int b = 0; b < B && !rc; b++) rc = prefill(q[b].s, q[b].x, P[b], q[b].h, H, NULL, err);
  const double gen0 = mtpq__now();
  double ts = 0, ds = 0, as = 0, t0;
  for (int live = B; !rc && live > 0;) {
    if (!drafter) { /* the target alone, a token a sequence a step (all live sequences together): x[c] in, x[c + 1] out */
      int n = 0;
      for (int b = 0; b < B; b++) {
        struct gseq *g = &q[b];
        if (g->c >= g->N - 1) continue;
        vs[n] = g->s, vt[n] = g->x + g->c, vh[n] = NULL, va[n] = g->x + g->c + 1, n++;
      }
      t0 = mtpq__now();
      rc = mtpq_target_verify_many(vs, n, 1, vt, vh, NULL, va, err);
      ts += mtpq__now() - t0, t0 = mtpq__now();
      for (int i = 0; i < n && !rc; i++) rc = mtpq_target_accept(vs[i], 0, err);
      as += mtpq__now() - t0, live = 0;
      for (int b = 0; b < B && !rc; b++) {
        struct gseq *g = &q[b];
        if (g->c >= g->N - 1) continue;
        g->c++, live += g->c < g->N - 1;
      }
      continue;
    }
    /* each sequence's drafter catches up (its own slots since its last round); then all sequences' k
     * drafts in one call: the head on each one's last output, the k - 1 steps after it (on the CUDA
     * backend the host waits once, for the drafts) */
    t0 = mtpq__now();
    for (int b = 0; b < B && !rc; b++) {
      struct gseq *g = &q[b];
      dp[b] = c0 + g->c, drow[b] = NULL;
      if (g->c >= g->N - 1) continue; /* finished: its place in the batch, unread */
      rc = mtpq_session_select(dr, b, err);
      if (!rc) rc = catch_up(dr, g, c0, H, err);
      drow[b] = g->out + (g->c - g->from - 1) * H;
    }
    if (!rc) rc = mtpq_session_draft_at(dr, B, drow, dp, k, dd, err);
    ds += mtpq__now() - t0;
    /* the target verifies each live sequence's [x[c], d0 .. d(keff-1)] at c .. c + keff: those with the
     * same keff together (mtpq_target_verify_many; all of them but near the end) */
    int32_t d[MTPQ_MAX_SEQS][MTPQ_MAX_K + 1], v[MTPQ_MAX_SEQS][MTPQ_MAX_K + 1], a[MTPQ_MAX_SEQS][MTPQ_MAX_K + 1];
    int kf[MTPQ_MAX_SEQS];
    for (int b = 0; b < B; b++) {
      struct gseq *g = &q[b];
      kf[b] = g->c >= g->N - 1 ? 0 : (int)(g->N - 1 - g->c < k ? g->N - 1 - g->c : k);
      for (int i = 0; i < kf[b]; i++) d[b][i] = dd[i * B + b];
      v[b][0] = g->x[g->c];
      memcpy(v[b] + 1, d[b], (size_t)kf[b] * sizeof **v);
    }
    t0 = mtpq__now();
    for (int ke = 1; ke <= k && !rc; ke++) {
      int n = 0;
      for (int b = 0; b < B; b++)
        if (kf[b] == ke) vs[n] = q[b].s, vt[n] = v[b], vh[n] = hid_at(&q[b], q[b].c, H), va[n] = a[b], n++;
      if (n) rc = mtpq_target_verify_many(vs, n, ke + 1, vt, vh, NULL, va, err);
    }
    ts += mtpq__now() - t0;
    live = 0;
    for (int b = 0; b < B && !rc; b++) {
      struct gseq *g = &q[b];
      if (!kf[b]) continue;
      const int64_t c = g->c;
      const int keff = kf[b];
      t0 = mtpq__now();
      int j = 0;
      while (j < keff && d[b][j] == a[b][j]) j++;
      j = bench_round(bench, j, keff); /* (a benchmark's pattern: its acceptance, not the comparison's) */
      if (!rc) rc = mtpq_target_accept(g->s, j, err);
      if (rc) break;
      commit_round(g->x, g->N, c, d[b], j, keff, a[b][j], &g->acc); /* a[b][j]: the target's token after the drafts */
      g->from = c, g->c += j + 1, live += g->c < g->N - 1;
      as += mtpq__now() - t0;
    }
  }
  for (int b = 0; b < B && st; b++) st[b] = q[b].acc, st[b].draft_s = ds / B;
  if (tm) *tm = (struct mtpq_decode_times){gen0 - start, mtpq__now() - gen0, ts, ds, as};
  mtpq_session_close(dr);
  for (int b = 0; b < B; b++) gseq_free(&q[b]);
  free(dd);
  return rc;
}

enum mtpq_status mtpq_decode_greedy(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                    const int32_t *prompt, int64_t P, int64_t n_new, int k, int32_t *x,
                                    struct mtpq_accept_stats *st, struct mtpq_decode_times *tm,
                                    struct mtpq_decode_bench *bench, struct mtpq_err *err) {
  return mtpq_decode_greedy_batch(t, drafter, be, 1, &prompt, &P, n_new, k, &x, st, tm, bench, err);
}

/* One sequence of a batched sampled decode. */
struct sseq {
  struct gseq seq; /* what a greedy sequence has */
  int32_t d[MTPQ_MAX_K + 1], v[MTPQ_MAX_K + 1];
  int keff;     /* this round's drafts (0: no speculation; -1: finished) */
  uint64_t rng; /* (sp->seed, stream + b): the stream the sequence alone would draw from */
};

/* the drafter's keff drafts for sequence b (selected in dr; its token t at position c0 + t), each drawn
 * from its own distribution q (the same temperature, top-k and top-p; the sampler's draft rows) and fed
 * back; dh: 2 H floats of room in the backend's memory;
 * *samp: the seconds the draws took (the loop's own time, not the drafter's) */
static enum mtpq_status draft_sampled(struct mtpq_session *dr, struct mtpq_sampler *smp, int b, struct sseq *g,
                                      int64_t c0, int64_t H, const struct mtpq_sampling *sp, float *dh, double *samp,
                                      struct mtpq_err *err) {
  enum mtpq_status rc = catch_up(dr, &g->seq, c0, H, err);
  const float *cur = g->seq.out + (g->seq.c - g->seq.from - 1) * H; /* the drafter's last output */
  for (int i = 0; !rc && i < g->keff; i++) {
    int32_t am;
    if (i > 0) { /* token d[i - 1] at position c + i - 1 with the drafter's previous output (not rounded) */
      const int64_t pi = c0 + g->seq.c + i - 1;
      float *nx = cur == dh ? dh + H : dh;
      rc = mtpq_session_step_at(dr, 1, &g->d[i - 1], cur, 0, &pi, nx, err);
      if (rc) break;
      cur = nx;
    }
    mtpq_session_head_at(dr, cur, &am, mtpq_sampler_q(smp, b, i));
    if (am < 0) return mtpq_err_set(err, MTPQ_E_GPU, "sequence %d: the drafter's head failed at draft %d", b, i);
    const double s0 = mtpq__now();
    rc = mtpq_sampler_draft(smp, b, i, sp, &g->rng, &g->d[i], err);
    *samp += mtpq__now() - s0;
  }
  return rc;
}

/* the round's outcome for g: the target keeps the state slot of the j accepted drafts and the round is
 * committed with next, the token after them (keff = 0: no speculation, the target's own draw) */
static enum mtpq_status commit_sampled(struct sseq *g, int j, int32_t next, struct mtpq_err *err) {
  enum mtpq_status rc = mtpq_target_accept(g->seq.s, j, err);
  if (rc) return rc;
  if (!g->keff) { /* no speculation: the target's token, no round to count */
    g->seq.x[++g->seq.c] = next;
    return MTPQ_OK;
  }
  commit_round(g->seq.x, g->seq.N, g->seq.c, g->d, j, g->keff, next, &g->seq.acc);
  g->seq.from = g->seq.c, g->seq.c += j + 1;
  return MTPQ_OK;
}

enum mtpq_status mtpq_decode_sample_batch(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                          int B, const int32_t *const *prompts, const int64_t *P, int64_t n_new, int k,
                                          const struct mtpq_sampling *sp, uint64_t stream, int32_t *const *outs,
                                          struct mtpq_accept_stats *st, struct mtpq_decode_times *tm,
                                          struct mtpq_decode_bench *bench, struct mtpq_err *err) {
  enum mtpq_status rc = check_batch(B, P, n_new, err);
  if (!rc) rc = check_bench(bench, err);
  if (rc) return rc;
  const int64_t c0 = bench ? bench->context : 0; /* the position of each sequence's first token */
  if (!(sp->temperature > 0) || !(sp->top_p > 0 && sp->top_p <= 1) || sp->top_k < 0)
    return mtpq_err_set(err, MTPQ_E_INVAL, "sampling with temperature %g, top-p %g, top-k %d", sp->temperature,
                        sp->top_p, sp->top_k);
  rc = check_drafter(t, drafter, be, k, 1, err);
  if (rc) return rc;
  const int64_t H = mtpq_target_hidden(t), V = mtpq_target_vocab(t), K1 = drafter ? k + 1 : 1; /* a verify's rows */
  struct sseq q[MTPQ_MAX_SEQS];
  memset(q, 0, sizeof q);
  int64_t most = 0;
  for (int b = 0; b < B && !rc; b++) {
    struct sseq *g = &q[b];
    mtpq_rng_seed(&g->rng, sp->seed, stream + (uint64_t)b);
    rc = gseq_open(&g->seq, t, be, drafter != NULL, prompts[b], P[b], n_new, k, outs[b], c0 + P[b] + n_new, (int)K1,
                   err);
    if (!rc && c0) rc = mtpq_target_seq_jump(g->seq.s, c0, err);
    most = g->seq.N > most ? g->seq.N : most;
  }
  /* the distributions: where the backend makes the logits (on the CUDA backend they never cross to the host) */
  struct mtpq_sampler *smp = NULL;
  if (!rc) rc = mtpq_sampler_open(be, V, B, (int)K1, &smp, err);
  float *dh = drafter ? mtpq_backend_alloc(be, (size_t)(2 * H) * sizeof *dh) : NULL; /* the drafter's own chain */
  if (!rc && drafter && !dh) rc = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  struct mtpq_session *dr = NULL;
  if (!rc && drafter) rc = mtpq_session_open_batch(drafter, be, c0 + most, 0, B, &dr, err);
  struct mtpq_target_seq *vs[MTPQ_MAX_SEQS]; /* a verify of several sequences: theirs, tokens, hidden, logits */
  const int32_t *vt[MTPQ_MAX_SEQS], *adraft[MTPQ_MAX_SEQS];
  float *vh[MTPQ_MAX_SEQS], *vl[MTPQ_MAX_SEQS];
  /* an acceptance: its sequences, their drafts and streams; the drafts accepted and the tokens after them */
  int aseq[MTPQ_MAX_SEQS], akeff[MTPQ_MAX_SEQS], aacc[MTPQ_MAX_SEQS];
  int32_t anext[MTPQ_MAX_SEQS];
  uint64_t *arng[MTPQ_MAX_SEQS];
  const double start = mtpq__now();
  for (int b = 0; b < B && !rc; b++) { /* the prompts; each one's first token drawn from its last token's logits */
    struct sseq *g = &q[b];
    const int zero = 0;
    uint64_t *rp = &g->rng;
    rc = prefill(g->seq.s, g->seq.x, P[b], g->seq.h, H, mtpq_sampler_p(smp, b, 0), err);
    if (!rc) rc = mtpq_sampler_accept(smp, 1, &b, &zero, NULL, sp, &rp, aacc, anext, err);
    if (!rc) g->seq.x[P[b]] = anext[0];
  }
  const double gen0 = mtpq__now();
  double ts = 0, ds = 0, as = 0, samp = 0, t0;
  for (int live = B; !rc && live > 0;) {
    /* the drafts of each live sequence (none without a drafter), then the target's logits for all live
     * sequences with the same number of drafts in one verify (mtpq_target_verify_many), into the sampler */
    for (int b = 0; b < B && !rc; b++) {
      struct sseq *g = &q[b];
      g->keff = g->seq.c >= g->seq.N - 1 ? -1
                : !drafter               ? 0
                                         : (int)(g->seq.N - 1 - g->seq.c < k ? g->seq.N - 1 - g->seq.c : k);
      if (g->keff < 1) continue;
      t0 = mtpq__now();
      rc = mtpq_session_select(dr, b, err);
      if (!rc) rc = draft_sampled(dr, smp, b, g, c0, H, sp, dh, &samp, err);
      ds += mtpq__now() - t0;
    }
    t0 = mtpq__now();
    for (int ke = 0; ke <= (drafter ? k : 0) && !rc; ke++) {
      int n = 0;
      for (int b = 0; b < B; b++) {
        struct sseq *g = &q[b];
        if (g->keff != ke) continue;
        g->v[0] = g->seq.x[g->seq.c];
        memcpy(g->v + 1, g->d, (size_t)ke * sizeof *g->v);
        vs[n] = g->seq.s, vt[n] = g->v, vh[n] = hid_at(&g->seq, g->seq.c, H), vl[n] = mtpq_sampler_p(smp, b, 0), n++;
      }
      if (n) rc = mtpq_target_verify_many(vs, n, ke + 1, vt, vh, vl, NULL, err);
    }
    ts += mtpq__now() - t0;
    /* the live sequences' acceptance together (the rejection steps and draws), then each one's state slot */
    t0 = mtpq__now();
    int n = 0;
    for (int b = 0; b < B; b++)
      if (q[b].keff >= 0) aseq[n] = b, akeff[n] = q[b].keff, adraft[n] = q[b].d, arng[n] = &q[b].rng, n++;
    if (!rc && n) rc = mtpq_sampler_accept(smp, n, aseq, akeff, adraft, sp, arng, aacc, anext, err);
    live = 0;
    for (int i = 0; i < n && !rc; i++) {
      struct sseq *g = &q[aseq[i]];
      if (g->keff > 0) aacc[i] = bench_round(bench, aacc[i], g->keff);
      rc = commit_sampled(g, aacc[i], anext[i], err);
      live += g->seq.c < g->seq.N - 1;
    }
    as += mtpq__now() - t0;
  }
  ds -= samp, as += samp; /* (the drafts' distributions and draws are the acceptance's sampling) */
  for (int b = 0; b < B && st; b++) st[b] = q[b].seq.acc, st[b].draft_s = ds / B;
  if (tm) *tm = (struct mtpq_decode_times){gen0 - start, mtpq__now() - gen0, ts, ds, as};
  mtpq_session_close(dr);
  mtpq_sampler_close(smp);
  for (int b = 0; b < B; b++) gseq_free(&q[b].seq);
  mtpq_backend_free(be, dh);
  return rc;
}

enum mtpq_status mtpq_decode_sample(struct mtpq_target *t, struct mtpq_rt_model *drafter, enum mtpq_backend be,
                                    const int32_t *prompt, int64_t P, int64_t n_new, int k,
                                    const struct mtpq_sampling *sp, uint64_t stream, int32_t *x,
                                    struct mtpq_accept_stats *st, struct mtpq_decode_times *tm, struct mtpq_err *err) {
  return mtpq_decode_sample_batch(t, drafter, be, 1, &prompt, &P, n_new, k, sp, stream, &x, st, tm, NULL, err);
}
