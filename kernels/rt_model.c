/* Loading the runtime's model (kernels/rt_model.h): the drafter's tensors
 * mapped from the target repo and, for an mtpq drafter, its own repo; no
 * copy but the norm weights (widened to float32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model.h"
#include "io/util.h"
#include "kernels/rt_model.h"
#include "kernels/runtime.h"
#include "quant/numerics.h"

static float bf16f(const unsigned char *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return mtpq_bf16_to_f32(h);
}

/* ---- loading ------------------------------------------------------------------- */

static const struct mtpq_tensor *find2(const struct mtpq_repo *a, const struct mtpq_repo *b, const char *n) {
  const struct mtpq_tensor *t = a ? mtpq_repo_find(a, n) : NULL;
  return t ? t : (b ? mtpq_repo_find(b, n) : NULL);
}

enum mtpq_status mtpq__rt_load_lin(const struct mtpq_repo *src, const char *mod, struct lin *L, struct mtpq_err *err) {
  char n[512];
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
  } else if (w->dtype == MTPQ_DTYPE_F32) {
    L->f = LIN_F32, L->cols = w->shape[1];
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

static enum mtpq_status load_lin(struct mtpq_rt_model *d, const char *mod, struct lin *L, struct mtpq_err *err) {
  const struct mtpq_repo *src = d->drafter ? d->drafter : d->target;
  enum mtpq_status st = mtpq__rt_load_lin(src, mod, L, err);
  if (!st && L->f == LIN_F32)
    st = mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "%s: %s.weight is F32: the drafter takes BF16, FP8 or NVFP4 weights",
                      mtpq_repo_dir(src), mod);
  return st;
}

enum mtpq_status mtpq__rt_load_vec(const struct mtpq_repo *src, const char *name, int64_t n, float **out,
                                   struct mtpq_err *err) {
  *out = NULL;
  const struct mtpq_tensor *t = mtpq_repo_find(src, name);
  if (!t || (t->dtype != MTPQ_DTYPE_BF16 && t->dtype != MTPQ_DTYPE_F32) || (int64_t)t->numel != n)
    return mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: %s: missing, or not BF16/F32 with %lld values", mtpq_repo_dir(src),
                        name, (long long)n);
  *out = malloc((size_t)(n ? n : 1) * sizeof **out);
  if (!*out) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++)
    if (t->dtype == MTPQ_DTYPE_BF16)
      (*out)[i] = bf16f((const unsigned char *)t->data + 2 * i);
    else
      memcpy(&(*out)[i], (const unsigned char *)t->data + 4 * i, 4);
  return MTPQ_OK;
}

static enum mtpq_status load_norm(struct mtpq_rt_model *d, const char *name, int64_t n, float **out,
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
static enum mtpq_status load_experts(struct mtpq_rt_model *d, struct mtpq_err *err) {
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

void mtpq_rt_model_close(struct mtpq_rt_model *d) {
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
static enum mtpq_status same_target(struct mtpq_rt_model *d, const char *ddir, struct mtpq_err *err) {
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

enum mtpq_status mtpq_rt_model_open(const char *target_dir, const char *drafter_dir,
                                   struct mtpq_rt_model **out, struct mtpq_err *err) {
  *out = NULL;
  struct mtpq_rt_model *d = calloc(1, sizeof *d);
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
  mtpq_rt_model_close(d);
  return st;
}

int64_t mtpq_rt_model_hidden(const struct mtpq_rt_model *d) { return d->H; }
int64_t mtpq_rt_model_vocab(const struct mtpq_rt_model *d) { return d->full_vocab; }
int mtpq_rt_model_reduced_head(const struct mtpq_rt_model *d) { return d->reduced; }

