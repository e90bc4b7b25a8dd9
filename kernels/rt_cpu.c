/* The CPU reference backend's building blocks; see kernels/rt_cpu.h. */
#include "kernels/rt_cpu.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/rope.h"
#include "quant/numerics.h"

static float e4m3_lut[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_init(void) {
  for (int i = 0; i < 256; i++) e4m3_lut[i] = mtpq_e4m3_to_f32((uint8_t)i);
}
void rt_cpu_init(void) { pthread_once(&e4m3_once, e4m3_init); }

float rt_bf16f(const unsigned char *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return mtpq_bf16_to_f32(h);
}

/* Row r of L dotted with x (float32 accumulation, 8 partial sums). */
float rt_lin_dot(const struct lin *L, int64_t r, const float *x) {
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
    for (; i < c; i++) acc[0] += rt_bf16f(w + 2 * i) * x[i];
  } else if (L->f == LIN_F32) {
    const unsigned char *w = L->w + (size_t)r * (size_t)c * 4;
    int64_t i = 0;
    for (; i + 8 <= c; i += 8)
      for (int k = 0; k < 8; k++) {
        float v;
        memcpy(&v, w + 4 * (i + k), 4);
        acc[k] += v * x[i + k];
      }
    for (; i < c; i++) {
      float v;
      memcpy(&v, w + 4 * i, 4);
      acc[0] += v * x[i];
    }
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

void rt_lin_apply(const struct lin *L, const float *x, float *y) {
  for (int64_t r = 0; r < L->rows; r++) y[r] = rt_lin_dot(L, r, x);
}

void rt_zcnorm(const float *x, const float *w, int64_t n, float eps, float *y) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * (1.0f + w[i]);
}

float rt_sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
float rt_silu(float x) { return x * rt_sigm(x); }

void rt_rope(float *x, int64_t rot, int64_t pos, float theta) {
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
  int nan; /* a row's logit was NaN */
};

static void *head_worker(void *p) {
  struct head_job *j = p;
  j->best = -INFINITY;
  j->arg = -1;
  j->nan = 0;
  for (int64_t r = j->r0; r < j->r1; r++) {
    float v = rt_lin_dot(j->L, r, j->x);
    if (j->logits) j->logits[r] = v;
    if (v > j->best || j->arg < 0) j->best = v, j->arg = r;
    j->nan |= v != v;
  }
  return NULL;
}

/* best (NULL: not wanted): the chosen row's logit, or NaN where any row's logit is NaN (a NaN is never above
 * another logit, so the comparisons alone would see one only in the first row of a thread's share) */
int64_t rt_head_argmax(const struct lin *L, const float *x, float *logits, float *best_out) {
  enum { NT = 2 };
  struct head_job jobs[NT];
  pthread_t tid[NT];
  int started[NT] = {0};
  for (int t = 0; t < NT; t++) {
    jobs[t] = (struct head_job){L, x, L->rows * t / NT, L->rows * (t + 1) / NT, 0, -1, logits, 0};
    if (t > 0) started[t] = pthread_create(&tid[t], NULL, head_worker, &jobs[t]) == 0;
    if (t > 0 && !started[t]) head_worker(&jobs[t]);
  }
  head_worker(&jobs[0]);
  int64_t arg = jobs[0].arg;
  float best = jobs[0].best;
  int nan = jobs[0].nan;
  for (int t = 1; t < NT; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    if (jobs[t].best > best) best = jobs[t].best, arg = jobs[t].arg; /* ties keep the lower row */
    nan |= jobs[t].nan;
  }
  if (best_out) *best_out = nan ? NAN : best;
  return arg;
}

void rt_cpu_attention(const struct rt_attn *w, const float *a, int64_t pos, int64_t window, uint16_t *kc16,
                      uint16_t *vc16, float *kc32, float *vc32, const struct rt_attn_scratch *s, float *out) {
  const int64_t D = w->D, Nq = w->Nq, Nkv = w->Nkv, KV = Nkv * D;
  float *qg = s->qg, *kk = s->kk, *vv = s->vv, *att = s->att, *sc = s->sc;
  rt_lin_apply(&w->q, a, qg);
  rt_lin_apply(&w->k, a, kk);
  rt_lin_apply(&w->v, a, vv);
  for (int64_t h = 0; h < Nkv; h++) {
    rt_zcnorm(kk + h * D, w->kn, D, w->eps, kk + h * D);
    rt_rope(kk + h * D, w->rot, pos, w->theta);
  }
  /* a BF16 cache holds K and V rounded to nearest even, as vLLM's cache of
   * a BF16 model does; a token attends to its own row as cached */
  if (kc16)
    for (int64_t j = 0; j < KV; j++)
      kc16[pos * KV + j] = mtpq_f32_to_bf16(kk[j]), vc16[pos * KV + j] = mtpq_f32_to_bf16(vv[j]);
  else
    memcpy(kc32 + pos * KV, kk, (size_t)KV * 4), memcpy(vc32 + pos * KV, vv, (size_t)KV * 4);
  int64_t lo = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
  float scale = 1.0f / sqrtf((float)D);
  for (int64_t h = 0; h < Nq; h++) {
    float *q = qg + h * 2 * D, *gate = q + D;
    rt_zcnorm(q, w->qn, D, w->eps, q);
    rt_rope(q, w->rot, pos, w->theta);
    int64_t kvh = h / (Nq / Nkv);
    float mx = -INFINITY;
    for (int64_t p = lo; p <= pos; p++) {
      float dot = 0;
      if (kc16) {
        const uint16_t *kp = kc16 + p * KV + kvh * D;
        for (int64_t j = 0; j < D; j++) dot += q[j] * mtpq_bf16_to_f32(kp[j]);
      } else {
        const float *kp = kc32 + p * KV + kvh * D;
        for (int64_t j = 0; j < D; j++) dot += q[j] * kp[j];
      }
      sc[p] = dot * scale;
      if (sc[p] > mx) mx = sc[p];
    }
    double sum = 0;
    for (int64_t p = lo; p <= pos; p++) sum += (sc[p] = expf(sc[p] - mx));
    float *o = att + h * D;
    for (int64_t j = 0; j < D; j++) o[j] = 0;
    for (int64_t p = lo; p <= pos; p++) {
      float wp = (float)(sc[p] / sum);
      if (vc16) {
        const uint16_t *vp = vc16 + p * KV + kvh * D;
        for (int64_t j = 0; j < D; j++) o[j] += wp * mtpq_bf16_to_f32(vp[j]);
      } else {
        const float *vp = vc32 + p * KV + kvh * D;
        for (int64_t j = 0; j < D; j++) o[j] += wp * vp[j];
      }
    }
    for (int64_t j = 0; j < D; j++) o[j] *= rt_sigm(gate[j]);
  }
  rt_lin_apply(&w->o, att, out);
}

/* the most probable of the E experts not among sel[0..n), the lower one on a tie (n < E) */
static int64_t best_unused(const float *pr, int64_t E, const int64_t *sel, int64_t n) {
  int64_t best = -1;
  for (int64_t ex = 0; ex < E; ex++) {
    int used = 0;
    for (int64_t q = 0; q < n; q++) used |= sel[q] == ex;
    if (!used && (best < 0 || pr[ex] > pr[best])) best = ex;
  }
  return best;
}

void rt_round_f16_row(const float *x, int64_t n, float *out) {
  float mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
  const int e = mtpq_f16_row_exp(mx);
  for (int64_t i = 0; i < n; i++) out[i] = ldexpf(mtpq_round_f16(ldexpf(x[i], -e)), e);
}

void rt_cpu_mlp(const struct rt_mlp *w, const float *x, int64_t H, const float *res, const struct rt_mlp_scratch *s,
                float *out) {
  float *pr = s->pr, *g1 = s->g1, *u1 = s->u1, *t1 = s->t1;
  for (int64_t j = 0; j < H; j++) out[j] = 0;
  if (w->moe) {
    rt_lin_apply(&w->router, x, pr);
    float mx = -INFINITY;
    for (int64_t ex = 0; ex < w->E; ex++) mx = pr[ex] > mx ? pr[ex] : mx;
    double sum = 0;
    for (int64_t ex = 0; ex < w->E; ex++) sum += (pr[ex] = expf(pr[ex] - mx));
    for (int64_t ex = 0; ex < w->E; ex++) pr[ex] = (float)(pr[ex] / sum);
    int64_t sel[64];
    float wsel[64], wsum = 0;
    int64_t K = w->topk < 64 ? w->topk : 64;
    for (int64_t k = 0; k < K; k++) { /* top-k, ties to the lower expert */
      const int64_t best = best_unused(pr, w->E, sel, k);
      sel[k] = best, wsel[k] = pr[best], wsum += pr[best];
    }
    if (s->margin && K > 0 && K < w->E && wsel[K - 1] > 0) { /* the k-th choice against the best expert left out */
      const float next = pr[best_unused(pr, w->E, sel, K)];
      const float g = (wsel[K - 1] - next) / wsel[K - 1];
      if (g < *s->margin) *s->margin = g;
    }
    if (s->fp16_in) rt_round_f16_row(x, H, s->xr);
    for (int64_t k = 0; k < K; k++) {
      float wk = w->norm_topk ? wsel[k] / wsum : wsel[k];
      const struct lin *G = &w->eg[sel[k]], *U = &w->eu[sel[k]], *Dn = &w->ed[sel[k]];
      const float *xi = s->fp16_in && G->f != LIN_BF16 ? s->xr : x;
      rt_lin_apply(G, xi, g1);
      rt_lin_apply(U, xi, u1);
      for (int64_t j = 0; j < G->rows; j++) g1[j] = rt_silu(g1[j]) * u1[j];
      if (s->fp16_in && Dn->f != LIN_BF16) rt_round_f16_row(g1, G->rows, g1);
      rt_lin_apply(Dn, g1, t1);
      for (int64_t j = 0; j < H; j++) out[j] += wk * t1[j];
    }
  }
  if (w->sg.w) { /* the shared expert, or the dense MLP */
    rt_lin_apply(&w->sg, x, g1);
    rt_lin_apply(&w->su, x, u1);
    for (int64_t j = 0; j < w->sg.rows; j++) g1[j] = rt_silu(g1[j]) * u1[j];
    rt_lin_apply(&w->sd, g1, t1);
  } else {
    for (int64_t j = 0; j < H; j++) t1[j] = 0;
  }
  float sgate = 1.0f;
  if (w->seg.w) {
    float z;
    rt_lin_apply(&w->seg, x, &z);
    sgate = rt_sigm(z);
  }
  for (int64_t j = 0; j < H; j++) out[j] += sgate * t1[j] + (res ? res[j] : 0.0f);
}
