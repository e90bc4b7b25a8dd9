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
#include "kernels/rope.h"
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"

static float e4m3_lut[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_init(void) {
  for (int i = 0; i < 256; i++) e4m3_lut[i] = mtpq_e4m3_to_f32((uint8_t)i);
}

static float bf16f(const unsigned char *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return mtpq_bf16_to_f32(h);
}

/* Row r of L dotted with x (float32 accumulation, 8 partial sums). */
static float lin_dot(const struct lin *L, int64_t r, const float *x) {
  float acc[8] = {0};
  int64_t c = L->cols;
  if (L->f == LIN_BF16) {
    const unsigned char *w = L->w + (size_t)r * (size_t)c * 2;
    int64_t i = 0;
    for (; i + 8 <= c; i += 8)
      for (int k = 0; k < 8; k++) {
        uint16_t h;
        memcpy(&h, w + 2 * (i + k), 2);
        acc[k] += mtpq_f32_from_bits((uint32_t)h << 16) * x[i + k];
      }
    for (; i < c; i++) acc[0] += bf16f(w + 2 * i) * x[i];
  } else if (L->f == LIN_FP8) {
    const unsigned char *w = L->w + (size_t)r * (size_t)c;
    int64_t i = 0;
    for (; i + 8 <= c; i += 8)
      for (int k = 0; k < 8; k++) acc[k] += e4m3_lut[w[i + k]] * x[i + k];
    for (; i < c; i++) acc[0] += e4m3_lut[w[i]] * x[i];
    for (int k = 0; k < 8; k++) acc[k] *= L->s;
  } else { /* NVFP4: codes x fp8(block scale) x S2 */
    const unsigned char *w = L->w + (size_t)r * (size_t)(c / 2);
    const unsigned char *sc = L->scales + (size_t)r * (size_t)(c / 16);
    for (int64_t b = 0; b < c / 16; b++) {
      float part[2] = {0, 0};
      for (int i = 0; i < 8; i++) {
        unsigned char byte = w[b * 8 + i];
        part[0] += mtpq_e2m1_to_f32(byte & 15) * x[b * 16 + 2 * i];
        part[1] += mtpq_e2m1_to_f32((unsigned char)(byte >> 4)) * x[b * 16 + 2 * i + 1];
      }
      acc[b & 7] += (part[0] + part[1]) * (e4m3_lut[sc[b]] * L->s);
    }
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static void lin_apply(const struct lin *L, const float *x, float *y) {
  for (int64_t r = 0; r < L->rows; r++) y[r] = lin_dot(L, r, x);
}

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
  pthread_once(&e4m3_once, e4m3_init);
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

static void zcnorm(const float *x, const float *w, int64_t n, float eps, float *y) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * (1.0f + w[i]);
}

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu(float x) { return x * sigm(x); }

static void rope(float *x, int64_t rot, int64_t pos, float theta) {
  for (int64_t j = 0; j < rot / 2; j++) mtpq_rope_pair(x, j, rot, pos, theta);
}

/* Threaded head: argmax (and optionally logits) of out over the head rows. */
struct head_job {
  const struct lin *L;
  const float *x;
  int64_t r0, r1;
  float best;
  int64_t arg;
  float *logits;
};

static void *head_worker(void *p) {
  struct head_job *j = p;
  j->best = -INFINITY;
  j->arg = -1;
  for (int64_t r = j->r0; r < j->r1; r++) {
    float v = lin_dot(j->L, r, j->x);
    if (j->logits) j->logits[r] = v;
    if (v > j->best || j->arg < 0) j->best = v, j->arg = r;
  }
  return NULL;
}

static int64_t head_argmax(const struct lin *L, const float *x, float *logits) {
  enum { NT = 2 };
  struct head_job jobs[NT];
  pthread_t tid[NT];
  int started[NT] = {0};
  for (int t = 0; t < NT; t++) {
    jobs[t] = (struct head_job){L, x, L->rows * t / NT, L->rows * (t + 1) / NT, 0, -1, logits};
    if (t > 0) started[t] = pthread_create(&tid[t], NULL, head_worker, &jobs[t]) == 0;
    if (t > 0 && !started[t]) head_worker(&jobs[t]);
  }
  head_worker(&jobs[0]);
  int64_t arg = jobs[0].arg;
  float best = jobs[0].best;
  for (int t = 1; t < NT; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    if (jobs[t].best > best) best = jobs[t].best, arg = jobs[t].arg; /* ties keep the lower row */
  }
  return arg;
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

void mtpq_session_head(struct mtpq_session *s, const float *hidden, int32_t *out_token, float *out_logits) {
  struct mtpq_rt_model *d = s->d;
  if (s->gpu) {
    struct mtpq_err e;
    if (mtpq__cuda_head(s->gpu, hidden, out_token, out_logits, &e) != MTPQ_OK) *out_token = -1;
    return;
  }
  if (!d->reduced) {
    *out_token = (int32_t)head_argmax(&d->head, hidden, out_logits);
    return;
  }
  float *small = out_logits ? malloc((size_t)d->head.rows * 4) : NULL;
  int64_t r = head_argmax(&d->head, hidden, small);
  if (out_logits) {
    for (int64_t v = 0; v < d->full_vocab; v++) out_logits[v] = -INFINITY;
    for (int64_t k = 0; small && k < d->head.rows; k++) out_logits[d->ids[k]] = small[k];
  }
  free(small);
  *out_token = (int32_t)d->ids[r];
}

enum mtpq_status mtpq_session_step(struct mtpq_session *s, int n, const int32_t *tokens,
                                   const void *hidden, int hidden_bf16, const int64_t *positions,
                                   float *out_hidden, struct mtpq_err *err) {
  if (s->gpu) return mtpq__cuda_step(s->gpu, n, tokens, hidden, hidden_bf16, positions, out_hidden, err);
  struct mtpq_rt_model *d = s->d;
  int64_t H = d->H, D = d->D, Nq = d->Nq, Nkv = d->Nkv, KV = Nkv * D;
  float *e = s->v[0], *c = s->v[1], *x0 = s->v[2], *a = s->v[3], *qg = s->v[4], *kk = s->v[5],
        *vv = s->v[6], *att = s->v[7], *y = s->v[8], *y2 = s->v[9], *m = s->v[10], *t1 = s->v[11],
        *sc = s->v[12], *g1 = s->v[13], *u1 = s->v[14], *pr = s->v[15];
  for (int i = 0; i < n; i++) {
    int64_t pos = positions[i];
    if (pos < 0 || pos >= s->max_pos)
      return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld outside the %lld-position cache", (long long)pos,
                          (long long)s->max_pos);
    if (tokens[i] < 0 || tokens[i] >= d->embed_rows)
      return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the embedding (%lld rows)", tokens[i],
                          (long long)d->embed_rows);
    /* embedding and hidden, normed and concatenated */
    for (int64_t j = 0; j < H; j++) e[j] = bf16f(d->embed + ((size_t)tokens[i] * (size_t)H + (size_t)j) * 2);
    zcnorm(e, d->nrm[0], H, d->eps, c);
    if (hidden_bf16)
      for (int64_t j = 0; j < H; j++) t1[j] = bf16f((const unsigned char *)hidden + ((size_t)i * H + j) * 2);
    else
      memcpy(t1, (const float *)hidden + (size_t)i * H, (size_t)H * 4);
    zcnorm(t1, d->nrm[1], H, d->eps, c + H);
    lin_apply(&d->fc, c, x0);
    /* attention */
    zcnorm(x0, d->nrm[2], H, d->eps, a);
    lin_apply(&d->q, a, qg);
    lin_apply(&d->k, a, kk);
    lin_apply(&d->v, a, vv);
    for (int64_t h = 0; h < Nkv; h++) {
      zcnorm(kk + h * D, d->nrm[5], D, d->eps, kk + h * D);
      rope(kk + h * D, d->rot, pos, d->theta);
    }
    /* the cache holds K and V rounded to BF16 (nearest even), as vLLM's
     * cache of a BF16 model does; a token attends to its own row as cached */
    for (int64_t j = 0; j < KV; j++)
      s->kc[pos * KV + j] = mtpq_f32_to_bf16(kk[j]), s->vc[pos * KV + j] = mtpq_f32_to_bf16(vv[j]);
    int64_t lo = s->window > 0 && pos + 1 > s->window ? pos + 1 - s->window : 0;
    float scale = 1.0f / sqrtf((float)D);
    for (int64_t h = 0; h < Nq; h++) {
      float *q = qg + h * 2 * D, *gate = q + D;
      zcnorm(q, d->nrm[4], D, d->eps, q);
      rope(q, d->rot, pos, d->theta);
      int64_t kvh = h / (Nq / Nkv);
      float mx = -INFINITY;
      for (int64_t p = lo; p <= pos; p++) {
        const uint16_t *kp = s->kc + p * KV + kvh * D;
        float dot = 0;
        for (int64_t j = 0; j < D; j++) dot += q[j] * mtpq_bf16_to_f32(kp[j]);
        sc[p] = dot * scale;
        if (sc[p] > mx) mx = sc[p];
      }
      double sum = 0;
      for (int64_t p = lo; p <= pos; p++) sum += (sc[p] = expf(sc[p] - mx));
      float *o = att + h * D;
      for (int64_t j = 0; j < D; j++) o[j] = 0;
      for (int64_t p = lo; p <= pos; p++) {
        const uint16_t *vp = s->vc + p * KV + kvh * D;
        float w = (float)(sc[p] / sum);
        for (int64_t j = 0; j < D; j++) o[j] += w * mtpq_bf16_to_f32(vp[j]);
      }
      for (int64_t j = 0; j < D; j++) o[j] *= sigm(gate[j]);
    }
    lin_apply(&d->o, att, y);
    for (int64_t j = 0; j < H; j++) y[j] += x0[j]; /* r2 */
    zcnorm(y, d->nrm[3], H, d->eps, y2);
    /* MLP */
    for (int64_t j = 0; j < H; j++) m[j] = 0;
    if (d->moe) {
      lin_apply(&d->router, y2, pr);
      float mx = -INFINITY;
      for (int64_t ex = 0; ex < d->E; ex++) mx = pr[ex] > mx ? pr[ex] : mx;
      double sum = 0;
      for (int64_t ex = 0; ex < d->E; ex++) sum += (pr[ex] = expf(pr[ex] - mx));
      for (int64_t ex = 0; ex < d->E; ex++) pr[ex] = (float)(pr[ex] / sum);
      int64_t sel[64];
      float wsel[64], wsum = 0;
      int64_t K = d->topk < 64 ? d->topk : 64;
      for (int64_t k = 0; k < K; k++) { /* top-k, ties to the lower expert */
        int64_t best = -1;
        for (int64_t ex = 0; ex < d->E; ex++) {
          int used = 0;
          for (int64_t q2 = 0; q2 < k; q2++) used |= sel[q2] == ex;
          if (!used && (best < 0 || pr[ex] > pr[best])) best = ex;
        }
        sel[k] = best, wsel[k] = pr[best], wsum += pr[best];
      }
      for (int64_t k = 0; k < K; k++) {
        float w = d->norm_topk ? wsel[k] / wsum : wsel[k];
        const struct lin *G = &d->eg[sel[k]], *U = &d->eu[sel[k]], *Dn = &d->ed[sel[k]];
        lin_apply(G, y2, g1);
        lin_apply(U, y2, u1);
        for (int64_t j = 0; j < G->rows; j++) g1[j] = silu(g1[j]) * u1[j];
        lin_apply(Dn, g1, t1);
        for (int64_t j = 0; j < H; j++) m[j] += w * t1[j];
      }
    }
    lin_apply(&d->sg, y2, g1);
    lin_apply(&d->su, y2, u1);
    for (int64_t j = 0; j < d->sg.rows; j++) g1[j] = silu(g1[j]) * u1[j];
    lin_apply(&d->sd, g1, t1);
    float sgate = 1.0f;
    if (d->moe) {
      float z;
      lin_apply(&d->seg, y2, &z);
      sgate = sigm(z);
    }
    for (int64_t j = 0; j < H; j++) m[j] += sgate * t1[j] + y[j]; /* + residual r2 */
    float *outh = out_hidden + (size_t)i * H;
    zcnorm(m, d->nrm[6], H, d->eps, outh);
  }
  return MTPQ_OK;
}
