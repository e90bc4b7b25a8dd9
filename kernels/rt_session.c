/* Sessions of the drafter runtime (see kernels/runtime.h): the CPU reference
 * backend, and the dispatch to the CUDA backend (kernels/runtime_cuda.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model.h"
#include "io/util.h"
#include "kernels/runtime.h"
#include "kernels/rt_model.h"
#include "kernels/rt_cpu.h"
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"

/* ---- session and forward -------------------------------------------------------- */

#define N_SCRATCH 16
struct mtpq_session {
  struct mtpq_rt_model *d;
  int64_t max_pos;
  int window, nseq, cur;  /* cur: the selected sequence */
  uint16_t *kc, *vc;         /* the selected sequence's [max_pos, Nkv*D], BF16 bits (as vLLM caches) */
  uint16_t *kc_all, *vc_all; /* nseq caches */
  /* scratch: e c x0 a qg kk vv att y y2 m t1 sc g1 u1 pr */
  float *v[N_SCRATCH];
  void *gpu; /* MTPQ_BACKEND_CUDA: the device session */
};

void mtpq_session_close(struct mtpq_session *s) {
  if (!s) return;
  mtpq__cuda_session_close(s->gpu);
  free(s->kc_all);
  free(s->vc_all);
  for (int i = 0; i < N_SCRATCH; i++) free(s->v[i]);
  free(s);
}

enum mtpq_status mtpq_session_open(struct mtpq_rt_model *d, enum mtpq_backend be, int64_t max_pos,
                                   int window, struct mtpq_session **out, struct mtpq_err *err) {
  return mtpq_session_open_batch(d, be, max_pos, window, 1, out, err);
}

enum mtpq_status mtpq_session_open_batch(struct mtpq_rt_model *d, enum mtpq_backend be, int64_t max_pos, int window,
                                         int nseq, struct mtpq_session **out, struct mtpq_err *err) {
  *out = NULL;
  if (nseq < 1 || nseq > MTPQ_MAX_SEQS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences: a session holds 1..%d", nseq, MTPQ_MAX_SEQS);
  struct mtpq_session *s = calloc(1, sizeof *s);
  if (!s) return mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
  s->d = d, s->max_pos = max_pos, s->window = window, s->nseq = nseq;
  rt_cpu_init();
  if (be == MTPQ_BACKEND_CUDA) {
    enum mtpq_status st = mtpq__cuda_session_open(d, max_pos, window, nseq, &s->gpu, err);
    if (st) {
      free(s);
      return st;
    }
    *out = s;
    return MTPQ_OK;
  }
  size_t kv = (size_t)(max_pos * d->Nkv * d->D);
  int64_t inter = d->sg.rows;
  if (d->moe && d->eg[0].rows > inter) inter = d->eg[0].rows;
  int64_t H = d->H, KV = d->Nkv * d->D;
  int64_t sizes[N_SCRATCH] = {H, 2 * H, H, H, 2 * d->Nq * d->D, KV, KV, d->Nq * d->D, H, H, H, H,
                              max_pos, inter, inter, d->E > 0 ? d->E : 1};
  int ok = 1;
  for (int i = 0; i < N_SCRATCH; i++) ok &= (s->v[i] = malloc((size_t)sizes[i] * sizeof(float))) != NULL;
  s->kc = s->kc_all = calloc(kv ? kv * (size_t)nseq : 1, sizeof *s->kc);
  s->vc = s->vc_all = calloc(kv ? kv * (size_t)nseq : 1, sizeof *s->vc);
  if (!s->kc || !s->vc || !ok) {
    mtpq_session_close(s);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for a %lld-position KV cache", (long long)max_pos);
  }
  *out = s;
  return MTPQ_OK;
}

int64_t mtpq_session_hidden(const struct mtpq_session *s) { return s->d->H; }

enum mtpq_status mtpq_session_select(struct mtpq_session *s, int seq, struct mtpq_err *err) {
  if (seq < 0 || seq >= s->nseq)
    return mtpq_err_set(err, MTPQ_E_INVAL, "sequence %d of a %d-sequence session", seq, s->nseq);
  s->cur = seq;
  if (s->gpu) { /* the device session holds the caches */
    mtpq__cuda_select(s->gpu, seq);
    return MTPQ_OK;
  }
  size_t kv = (size_t)(s->max_pos * s->d->Nkv * s->d->D);
  s->kc = s->kc_all + kv * (size_t)seq, s->vc = s->vc_all + kv * (size_t)seq;
  return MTPQ_OK;
}

int mtpq_session_profile(struct mtpq_session *s, int n, const char **names, double *us, int max,
                         struct mtpq_err *err) {
  return s->gpu ? mtpq__cuda_profile(s->gpu, n, names, us, max, err) : 0;
}

enum mtpq_status mtpq_session_flush_l2(struct mtpq_session *s, struct mtpq_err *err) {
  return s->gpu ? mtpq__cuda_flush_l2(s->gpu, err) : MTPQ_OK;
}

double mtpq_session_draft_device_us(const struct mtpq_session *s) {
  return s->gpu ? mtpq__cuda_draft_device_us(s->gpu) : -1;
}

enum mtpq_status mtpq_session_draft(struct mtpq_session *s, int n, const int32_t *tokens, const float *hidden,
                                    const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err) {
  if (n < 1 || n > s->nseq) return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences in a %d-sequence session", n, s->nseq);
  if (steps < 1 || steps > MTPQ_MAX_DRAFT_STEPS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d draft steps: 1..%d", steps, MTPQ_MAX_DRAFT_STEPS);
  if (s->gpu) return mtpq__cuda_draft(s->gpu, n, tokens, hidden, positions, steps, out_tokens, err);
  int64_t H = s->d->H;
  float *h = malloc((size_t)H * 4 * 2);
  if (!h) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = MTPQ_OK;
  int cur = s->cur;
  for (int i = 0; i < n && !st; i++) {
    st = mtpq_session_select(s, i, err);
    memcpy(h, hidden + (size_t)i * H, (size_t)H * 4);
    int32_t tok = tokens[i];
    for (int k = 0; k < steps && !st; k++) {
      int64_t pos = positions[i] + k;
      st = mtpq_session_step(s, 1, &tok, h, 0, &pos, h + H, err);
      if (!st) mtpq_session_head(s, h + H, &tok, NULL);
      out_tokens[k * n + i] = tok;
      memcpy(h, h + H, (size_t)H * 4);
    }
  }
  free(h);
  struct mtpq_err e2;
  mtpq_session_select(s, cur, &e2);
  return st;
}

static void head(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *out_logits, int at) {
  struct mtpq_rt_model *d = s->d;
  if (s->gpu) {
    struct mtpq_err e;
    if (mtpq__cuda_head(s->gpu, hidden, out_token, out_logits, at, &e) != MTPQ_OK) *out_token = -1;
    return;
  }
  if (!d->reduced) {
    *out_token = (int32_t)rt_head_argmax(&d->head, hidden, out_logits, NULL);
    return;
  }
  float *small = out_logits ? malloc((size_t)d->head.rows * 4) : NULL;
  int64_t r = rt_head_argmax(&d->head, hidden, small, NULL);
  if (out_logits) {
    for (int64_t v = 0; v < d->full_vocab; v++) out_logits[v] = -INFINITY;
    for (int64_t k = 0; small && k < d->head.rows; k++) out_logits[d->ids[k]] = small[k];
  }
  free(small);
  *out_token = (int32_t)d->ids[r];
}

void mtpq_session_head(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *out_logits) {
  head(s, hidden, out_token, out_logits, 0);
}

void mtpq_session_head_at(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *logits) {
  head(s, hidden, out_token, logits, 1);
}

enum mtpq_status mtpq_session_step(struct mtpq_session *s, int n, const int32_t *tokens,
                                   const void *hidden, int hidden_bf16, const int64_t *positions,
                                   float *out_hidden, struct mtpq_err *err) {
  if (s->gpu) return mtpq__cuda_step(s->gpu, n, tokens, hidden, hidden_bf16, positions, out_hidden, err);
  struct mtpq_rt_model *d = s->d;
  int64_t H = d->H, D = d->D, Nq = d->Nq, Nkv = d->Nkv;
  float *e = s->v[0], *c = s->v[1], *x0 = s->v[2], *a = s->v[3], *qg = s->v[4], *kk = s->v[5],
        *vv = s->v[6], *att = s->v[7], *y = s->v[8], *y2 = s->v[9], *m = s->v[10], *t1 = s->v[11],
        *sc = s->v[12], *g1 = s->v[13], *u1 = s->v[14], *pr = s->v[15];
  const struct rt_attn aw = {d->q, d->k, d->v, d->o, d->nrm[4], d->nrm[5], Nq, Nkv, D, d->rot, d->theta, d->eps};
  const struct rt_attn_scratch as = {qg, kk, vv, att, sc};
  const struct rt_mlp mw = {d->moe, d->E,  d->topk, d->norm_topk, d->router, d->moe ? d->seg : (struct lin){0},
                            d->sg,  d->su, d->sd,   d->eg,        d->eu,     d->ed};
  const struct rt_mlp_scratch ms = {pr, g1, u1, t1, NULL, NULL, 0};
  for (int i = 0; i < n; i++) {
    int64_t pos = positions[i];
    if (pos < 0 || pos >= s->max_pos)
      return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld outside the %lld-position cache", (long long)pos,
                          (long long)s->max_pos);
    if (tokens[i] < 0 || tokens[i] >= d->embed_rows)
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tokens[i],
                          (long long)d->embed_rows);
    /* embedding and hidden, normed and concatenated */
    for (int64_t j = 0; j < H; j++) e[j] = rt_bf16f(d->embed + ((size_t)tokens[i] * (size_t)H + (size_t)j) * 2);
    rt_zcnorm(e, d->nrm[0], H, d->eps, c);
    if (hidden_bf16)
      for (int64_t j = 0; j < H; j++) t1[j] = rt_bf16f((const unsigned char *)hidden + ((size_t)i * H + j) * 2);
    else
      memcpy(t1, (const float *)hidden + (size_t)i * H, (size_t)H * 4);
    rt_zcnorm(t1, d->nrm[1], H, d->eps, c + H);
    rt_lin_apply(&d->fc, c, x0);
    /* attention */
    rt_zcnorm(x0, d->nrm[2], H, d->eps, a);
    rt_cpu_attention(&aw, a, pos, s->window, s->kc, s->vc, NULL, NULL, &as, y);
    for (int64_t j = 0; j < H; j++) y[j] += x0[j]; /* r2 */
    rt_zcnorm(y, d->nrm[3], H, d->eps, y2);
    rt_cpu_mlp(&mw, y2, H, y, &ms, m); /* + residual r2 */
    float *outh = out_hidden + (size_t)i * H;
    rt_zcnorm(m, d->nrm[6], H, d->eps, outh);
  }
  return MTPQ_OK;
}

/* ---- the live loop's hand-over (kernels/decode.c) -------------------------------- */

void *mtpq_backend_alloc(enum mtpq_backend be, size_t bytes) {
  return be == MTPQ_BACKEND_CUDA ? mtpq__cuda_alloc(bytes) : malloc(bytes ? bytes : 1);
}

void mtpq_backend_free(enum mtpq_backend be, void *p) {
  if (be == MTPQ_BACKEND_CUDA)
    mtpq__cuda_free(p);
  else
    free(p);
}

enum mtpq_status mtpq_backend_copy(enum mtpq_backend be, void *dst, const void *src, size_t bytes,
                                   struct mtpq_err *err) {
  if (be == MTPQ_BACKEND_CUDA) return mtpq__cuda_copy(dst, src, bytes, err);
  memcpy(dst, src, bytes);
  return MTPQ_OK;
}

enum mtpq_status mtpq_session_step_at(struct mtpq_session *s, int n, const int32_t *tokens, const float *hidden,
                                      int bf16, const int64_t *positions, float *out_hidden, struct mtpq_err *err) {
  if (s->gpu) return mtpq__cuda_step_at(s->gpu, n, tokens, hidden, bf16, positions, out_hidden, err);
  if (!bf16) return mtpq_session_step(s, n, tokens, hidden, 0, positions, out_hidden, err);
  /* a slot at a time, its row rounded first (the step runs its slots one after another anyway) */
  const int64_t H = s->d->H;
  float *h = malloc((size_t)H * sizeof *h);
  if (!h) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = MTPQ_OK;
  for (int i = 0; i < n && !st; i++) {
    for (int64_t j = 0; j < H; j++) h[j] = mtpq_bf16_to_f32(mtpq_f32_to_bf16(hidden[(size_t)i * H + j]));
    st = mtpq_session_step(s, 1, tokens + i, h, 0, positions + i, out_hidden + (size_t)i * H, err);
  }
  free(h);
  return st;
}

enum mtpq_status mtpq_session_draft_at(struct mtpq_session *s, int n, const float *const *hidden,
                                       const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err) {
  if (n < 1 || n > s->nseq) return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences in a %d-sequence session", n, s->nseq);
  if (steps < 1 || steps > MTPQ_MAX_DRAFT_STEPS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d draft steps: 1..%d", steps, MTPQ_MAX_DRAFT_STEPS);
  if (s->gpu) return mtpq__cuda_draft_at(s->gpu, n, hidden, positions, steps, out_tokens, err);
  const int64_t H = s->d->H;
  float *h = calloc((size_t)(n * H), sizeof *h); /* the rows side by side, zeros where none */
  if (!h) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    if (hidden[i]) memcpy(h + (size_t)i * H, hidden[i], (size_t)H * sizeof *h);
    mtpq_session_head(s, h + (size_t)i * H, &out_tokens[i], NULL);
  }
  enum mtpq_status st =
      steps > 1 ? mtpq_session_draft(s, n, out_tokens, h, positions, steps - 1, out_tokens + n, err) : MTPQ_OK;
  free(h);
  return st;
}
