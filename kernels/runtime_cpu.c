/* CPU reference backend of the drafter runtime (see kernels/runtime.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model.h"
#include "io/util.h"
#include "kernels/runtime.h"
#include "kernels/runtime_model.h"
#include "kernels/rope.h"
#include "kernels/runtime_cuda.h"
#include "quant/numerics.h"

static float e4m3_lut[256];

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

/* ---- loading ------------------------------------------------------------------- */

static const struct mtpq_tensor *find2(const struct mtpq_repo *a, const struct mtpq_repo *b, const char *n) {
  const struct mtpq_tensor *t = a ? mtpq_repo_find(a, n) : NULL;
  return t ? t : (b ? mtpq_repo_find(b, n) : NULL);
}

static enum mtpq_status load_lin(struct mtpq_drafter *d, const char *mod, struct lin *L, struct mtpq_err *err) {
  char n[512];
  const struct mtpq_repo *src = d->drafter ? d->drafter : d->target;
  snprintf(n, sizeof n, "%s.weight", mod);
  const struct mtpq_tensor *w = mtpq_repo_find(src, n);
  if (!w || w->rank != 2)
    return mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no 2-D tensor %s", mtpq_repo_dir(src), n);
  snprintf(n, sizeof n, "%s.weight_scale", mod);
  const struct mtpq_tensor *s = mtpq_repo_find(src, n);
  snprintf(n, sizeof n, "%s.weight_scale_2", mod);
  const struct mtpq_tensor *s2 = mtpq_repo_find(src, n);
  L->rows = w->shape[0];
  L->w = w->data;
  if (w->dtype == MTPQ_DTYPE_BF16) {
    L->f = LIN_BF16, L->cols = w->shape[1];
  } else if (w->dtype == MTPQ_DTYPE_F8_E4M3 && s && s->dtype == MTPQ_DTYPE_F32) {
    L->f = LIN_FP8, L->cols = w->shape[1];
    memcpy(&L->s, s->data, 4);
  } else if (w->dtype == MTPQ_DTYPE_U8 && s && s->dtype == MTPQ_DTYPE_F8_E4M3 && s2) {
    L->f = LIN_NVFP4, L->cols = w->shape[1] * 2, L->scales = s->data;
    memcpy(&L->s, s2->data, 4);
  } else {
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: %s is %s without the scales of a known format",
                        mtpq_repo_dir(src), w->name, mtpq_dtype_name(w->dtype));
  }
  return MTPQ_OK;
}

static enum mtpq_status load_norm(struct mtpq_drafter *d, const char *name, int64_t n, float **out,
                                  struct mtpq_err *err) {
  const struct mtpq_tensor *t = find2(d->drafter, d->target, name);
  if (!t || t->dtype != MTPQ_DTYPE_BF16 || (int64_t)t->numel != n)
    return mtpq_err_set(err, MTPQ_E_NOT_FOUND, "norm %s: missing or not BF16 [%lld]", name, (long long)n);
  *out = malloc((size_t)n * sizeof **out);
  if (!*out) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++) (*out)[i] = bf16f((const unsigned char *)t->data + 2 * i);
  return MTPQ_OK;
}

/* Experts: per-expert modules (any repo), or fused BF16 tensors of a target. */
static enum mtpq_status load_experts(struct mtpq_drafter *d, struct mtpq_err *err) {
  d->eg = calloc((size_t)d->E, sizeof *d->eg);
  d->eu = calloc((size_t)d->E, sizeof *d->eu);
  d->ed = calloc((size_t)d->E, sizeof *d->ed);
  if (!d->eg || !d->eu || !d->ed) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  const struct mtpq_repo *src = d->drafter ? d->drafter : d->target;
  const struct mtpq_tensor *gu = mtpq_repo_find(src, "mtp.layers.0.mlp.experts.gate_up_proj");
  const struct mtpq_tensor *dn = mtpq_repo_find(src, "mtp.layers.0.mlp.experts.down_proj");
  for (int64_t e = 0; e < d->E; e++) {
    if (gu && dn && gu->dtype == MTPQ_DTYPE_BF16 && gu->rank == 3) {
      int64_t I = gu->shape[1] / 2, H = gu->shape[2];
      const unsigned char *base = (const unsigned char *)gu->data + (size_t)(e * 2 * I * H * 2);
      d->eg[e] = (struct lin){LIN_BF16, I, H, base, NULL, 0};
      d->eu[e] = (struct lin){LIN_BF16, I, H, base + I * H * 2, NULL, 0};
      d->ed[e] = (struct lin){LIN_BF16, dn->shape[1], dn->shape[2],
                              (const unsigned char *)dn->data + (size_t)(e * dn->shape[1] * dn->shape[2] * 2), NULL, 0};
      continue;
    }
    char m[256];
    enum mtpq_status st;
    snprintf(m, sizeof m, "mtp.layers.0.mlp.experts.%lld.gate_proj", (long long)e);
    if ((st = load_lin(d, m, &d->eg[e], err))) return st;
    snprintf(m, sizeof m, "mtp.layers.0.mlp.experts.%lld.up_proj", (long long)e);
    if ((st = load_lin(d, m, &d->eu[e], err))) return st;
    snprintf(m, sizeof m, "mtp.layers.0.mlp.experts.%lld.down_proj", (long long)e);
    if ((st = load_lin(d, m, &d->ed[e], err))) return st;
  }
  return MTPQ_OK;
}

void mtpq_drafter_close(struct mtpq_drafter *d) {
  if (!d) return;
  mtpq_repo_close(d->target);
  mtpq_repo_close(d->drafter);
  mtpq_config_free(&d->cfg);
  for (int i = 0; i < 7; i++) free(d->nrm[i]);
  free(d->eg);
  free(d->eu);
  free(d->ed);
  free(d->ids);
  free(d);
}

/* A drafter repo must come from this target: its copied BF16 norms equal the
 * target's and its sizes match. */
static enum mtpq_status same_target(struct mtpq_drafter *d, const char *ddir, struct mtpq_err *err) {
  static const char *norms[] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                                "mtp.norm.weight", "mtp.layers.0.input_layernorm.weight"};
  for (int i = 0; i < 4; i++) {
    const struct mtpq_tensor *a = mtpq_repo_find(d->target, norms[i]), *b = mtpq_repo_find(d->drafter, norms[i]);
    if (!a || !b || a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes) != 0)
      return mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH,
                          "%s: tensor %s differs from the target's: this drafter repo was made from another target",
                          ddir, norms[i]);
  }
  return MTPQ_OK;
}

enum mtpq_status mtpq_drafter_open(const char *target_dir, const char *drafter_dir,
                                   struct mtpq_drafter **out, struct mtpq_err *err) {
  *out = NULL;
  for (int i = 0; i < 256; i++) e4m3_lut[i] = mtpq_e4m3_to_f32((uint8_t)i);
  struct mtpq_drafter *d = calloc(1, sizeof *d);
  if (!d) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  enum mtpq_status st = mtpq_repo_open(target_dir, &d->target, err);
  if (!st && drafter_dir) st = mtpq_repo_open(drafter_dir, &d->drafter, err);
  char *cp = st ? NULL : mtpq__path_join(mtpq_repo_dir(d->target), "config.json");
  if (!st) st = cp ? mtpq_config_load(cp, &d->cfg, err) : mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
  free(cp);
  if (st) goto fail;
  struct mtpq_model_desc md;
  mtpq_model_describe(d->target, &d->cfg, &md);
  if (md.mtp_layers == 0) {
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no mtp.* tensors", target_dir);
    goto fail;
  }
  d->H = d->cfg.hidden_size, d->Nq = d->cfg.num_attention_heads, d->Nkv = d->cfg.num_key_value_heads;
  d->D = d->cfg.head_dim, d->E = md.mtp_experts, d->topk = d->cfg.num_experts_per_tok;
  d->rot = (int64_t)(d->D * d->cfg.partial_rotary_factor);
  d->eps = (float)d->cfg.rms_norm_eps, d->theta = (float)d->cfg.rope_theta;
  d->norm_topk = d->cfg.norm_topk_prob, d->moe = d->E > 0;
  if (d->moe && (d->topk < 1 || d->topk > d->E)) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s/config.json: num_experts_per_tok %lld is outside 1..%lld (the MTP "
                      "layer's experts)", target_dir, (long long)d->topk, (long long)d->E);
    goto fail;
  }
  if (d->Nkv < 1 || d->Nq % d->Nkv || d->D < 2 || d->rot % 2) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s/config.json: %lld query heads, %lld KV heads, head_dim %lld, rotary "
                      "dim %lld: need KV heads dividing query heads and even dims", target_dir, (long long)d->Nq,
                      (long long)d->Nkv, (long long)d->D, (long long)d->rot);
    goto fail;
  }
  if (d->drafter && (st = same_target(d, drafter_dir, err))) goto fail;
  static const char *nn[7] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                              "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight",
                              "mtp.layers.0.self_attn.q_norm.weight", "mtp.layers.0.self_attn.k_norm.weight",
                              "mtp.norm.weight"};
  for (int i = 0; i < 7 && !st; i++) st = load_norm(d, nn[i], i == 4 || i == 5 ? d->D : d->H, &d->nrm[i], err);
  static const char *mods[] = {"mtp.fc", "mtp.layers.0.self_attn.q_proj", "mtp.layers.0.self_attn.k_proj",
                               "mtp.layers.0.self_attn.v_proj", "mtp.layers.0.self_attn.o_proj"};
  struct lin *dst[] = {&d->fc, &d->q, &d->k, &d->v, &d->o};
  for (int i = 0; i < 5 && !st; i++) st = load_lin(d, mods[i], dst[i], err);
  if (!st && d->moe) {
    st = load_lin(d, "mtp.layers.0.mlp.gate", &d->router, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.shared_expert_gate", &d->seg, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.shared_expert.gate_proj", &d->sg, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.shared_expert.up_proj", &d->su, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.shared_expert.down_proj", &d->sd, err);
    if (!st) st = load_experts(d, err);
  } else if (!st) {
    st = load_lin(d, "mtp.layers.0.mlp.gate_proj", &d->sg, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.up_proj", &d->su, err);
    if (!st) st = load_lin(d, "mtp.layers.0.mlp.down_proj", &d->sd, err);
  }
  if (st) goto fail;
  if (!md.embed || md.embed->dtype != MTPQ_DTYPE_BF16 || !md.lm_head) {
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: BF16 embedding or head missing", target_dir);
    goto fail;
  }
  d->embed = md.embed->data;
  d->embed_rows = md.embed->shape[0];
  d->full_vocab = md.lm_head->shape[0];
  if (d->drafter && mtpq_repo_find(d->drafter, "mtp.draft_lm_head.weight")) {
    st = load_lin(d, "mtp.draft_lm_head", &d->head, err);
    const struct mtpq_tensor *ids = NULL;
    char *ip = mtpq__path_join(drafter_dir, "mtp_draft_vocab_ids.safetensors");
    struct mtpq_st_file *f = NULL;
    if (!st && ip && mtpq_st_open(ip, &f, err) == MTPQ_OK) ids = mtpq_st_find(f, "ids");
    if (!st && (!ids || ids->dtype != MTPQ_DTYPE_I64 || (int64_t)ids->numel != d->head.rows))
      st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: ids file missing or not matching the draft head", drafter_dir);
    if (!st) {
      d->ids = malloc(ids->nbytes);
      if (!d->ids) st = mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
      else memcpy(d->ids, ids->data, ids->nbytes);
      for (int64_t i = 0; !st && i < d->head.rows; i++)
        if (d->ids[i] < 0 || d->ids[i] >= d->full_vocab)
          st = mtpq_err_set(err, MTPQ_E_BAD_VALUE, "%s: id %lld outside the vocabulary", drafter_dir, (long long)d->ids[i]);
    }
    mtpq_st_close(f);
    free(ip);
    d->reduced = 1;
  } else {
    d->head = (struct lin){LIN_BF16, md.lm_head->shape[0], md.lm_head->shape[1], md.lm_head->data, NULL, 0};
  }
  if (st) goto fail;
  *out = d;
  return MTPQ_OK;
fail:
  mtpq_drafter_close(d);
  return st;
}

int64_t mtpq_drafter_hidden(const struct mtpq_drafter *d) { return d->H; }
int64_t mtpq_drafter_vocab(const struct mtpq_drafter *d) { return d->full_vocab; }
int mtpq_drafter_reduced_head(const struct mtpq_drafter *d) { return d->reduced; }

/* ---- session and forward -------------------------------------------------------- */

#define N_SCRATCH 16
struct mtpq_session {
  struct mtpq_drafter *d;
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

enum mtpq_status mtpq_session_open(struct mtpq_drafter *d, enum mtpq_backend be, int64_t max_pos,
                                   int window, struct mtpq_session **out, struct mtpq_err *err) {
  return mtpq_session_open_batch(d, be, max_pos, window, 1, out, err);
}

enum mtpq_status mtpq_session_open_batch(struct mtpq_drafter *d, enum mtpq_backend be, int64_t max_pos, int window,
                                         int nseq, struct mtpq_session **out, struct mtpq_err *err) {
  *out = NULL;
  if (nseq < 1 || nseq > MTPQ_MAX_SEQS)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d sequences: a session holds 1..%d", nseq, MTPQ_MAX_SEQS);
  struct mtpq_session *s = calloc(1, sizeof *s);
  if (!s) return mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
  s->d = d, s->max_pos = max_pos, s->window = window, s->nseq = nseq;
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

int64_t mtpq__session_hidden(const struct mtpq_session *s) { return s->d->H; }

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
  struct mtpq_drafter *d = s->d;
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
  struct mtpq_drafter *d = s->d;
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
