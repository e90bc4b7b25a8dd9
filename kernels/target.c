/* The target model: loading and the CPU reference forward; see
 * kernels/target.h. */
#include "kernels/target.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/repo.h"
#include "kernels/rt_cpu.h"
#include "kernels/rt_model.h"
#include "kernels/target_model.h"
#include "kernels/target_cuda.h"

struct mtpq_target_seq {
  const struct mtpq_target *t;
  void *gpu;                 /* the CUDA backend's sequence (kernels/target_cuda.h), or NULL: the CPU reference */
  float *gdn_conv, *gdn_rec; /* CUDA: mtpq_target_seq_gdn's host copies */
  int64_t max_pos, len;
  float **kc, **vc;        /* per layer, NULL where the layer has none */
  uint16_t **kc16, **vc16; /* mtpq_target_seq_kv_bf16: the BF16 cache instead, per layer */
  /* GDN state, per layer: nbuf buffers (conv [conv_dim][K - 1], rec
   * [HV][dk][dv]); the state now is buffer cur, and a verify of T tokens
   * writes token t's state into buffer (cur + 1 + t) % nbuf, so that
   * accepting t selects that buffer instead of copying or re-running */
  float ***conv, ***rec;
  int nbuf, cur;
  int64_t vbase; /* a pending verify: the length before it, its tokens, the buffer before it */
  int vcount, vcur;
  float *h, *a, *y, *m, *qg, *kk, *vv, *att, *sc, *pr, *g1, *u1, *t1, *proj, *zz, *bb, *aa, *mix, *o;
  float *rmargin; /* CPU: each position's routing margin (mtpq_target_seq_route_margin), -1 not computed */
  float *xr;      /* CPU: mtpq_target_seq_fp16_experts's rounded rows */
  int fp16_in;
};

/* the full name of a layer's tensor ("PREFIXlayers.I.SUF"; i < 0: "PREFIXSUF") */
static void tname(const struct mtpq_target *t, int64_t i, const char *suf, char *out, size_t cap) {
  if (i < 0)
    snprintf(out, cap, "%s%s", t->pre, suf);
  else
    snprintf(out, cap, "%slayers.%lld.%s", t->pre, (long long)i, suf);
}

static enum mtpq_status lin(const struct mtpq_target *t, int64_t i, const char *suf, struct lin *L,
                            struct mtpq_err *err) {
  char m[320];
  tname(t, i, suf, m, sizeof m);
  return mtpq__rt_load_lin(t->repo, m, L, err);
}

static enum mtpq_status vec(const struct mtpq_target *t, int64_t i, const char *suf, int64_t n, float **out,
                            struct mtpq_err *err) {
  char m[320];
  tname(t, i, suf, m, sizeof m);
  return mtpq__rt_load_vec(t->repo, m, n, out, err);
}

static const struct mtpq_tensor *find(const struct mtpq_target *t, int64_t i, const char *suf) {
  char m[320];
  tname(t, i, suf, m, sizeof m);
  return mtpq_repo_find(t->repo, m);
}

/* the layer's MLP: MoE (router mlp.gate) with per-expert or fused BF16
 * experts and an optional gated shared expert, or dense gate/up/down */
static enum mtpq_status load_mlp(struct mtpq_target *t, int64_t i, struct tlayer *l, struct mtpq_err *err) {
  struct rt_mlp *w = &l->mlp;
  enum mtpq_status st = MTPQ_OK;
  if (!find(t, i, "mlp.gate.weight")) { /* dense */
    st = lin(t, i, "mlp.gate_proj", &w->sg, err);
    if (!st) st = lin(t, i, "mlp.up_proj", &w->su, err);
    if (!st) st = lin(t, i, "mlp.down_proj", &w->sd, err);
    if (!st && w->sg.rows > t->inter) t->inter = w->sg.rows;
    return st;
  }
  w->moe = 1, w->E = t->cfg.num_experts, w->topk = t->cfg.num_experts_per_tok, w->norm_topk = t->cfg.norm_topk_prob;
  if (w->E < 1 || w->topk < 1 || w->topk > w->E || w->topk > 64)
    return mtpq_err_set(err, MTPQ_E_CONFIG_FIELD, "%s: layer %lld has a router but num_experts %lld, top-%lld",
                        mtpq_repo_dir(t->repo), (long long)i, (long long)w->E, (long long)w->topk);
  st = lin(t, i, "mlp.gate", &w->router, err);
  if (!st && w->router.rows != w->E)
    st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: layer %lld's router has %lld rows for %lld experts",
                      mtpq_repo_dir(t->repo), (long long)i, (long long)w->router.rows, (long long)w->E);
  if (!st && find(t, i, "mlp.shared_expert.gate_proj.weight")) {
    st = lin(t, i, "mlp.shared_expert.gate_proj", &w->sg, err);
    if (!st) st = lin(t, i, "mlp.shared_expert.up_proj", &w->su, err);
    if (!st) st = lin(t, i, "mlp.shared_expert.down_proj", &w->sd, err);
    if (!st && find(t, i, "mlp.shared_expert_gate.weight")) st = lin(t, i, "mlp.shared_expert_gate", &w->seg, err);
    if (!st && w->sg.rows > t->inter) t->inter = w->sg.rows;
  }
  if (st) return st;
  l->experts = calloc((size_t)(3 * w->E), sizeof *l->experts);
  if (!l->experts) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  struct lin *eg = l->experts, *eu = eg + w->E, *ed = eu + w->E;
  w->eg = eg, w->eu = eu, w->ed = ed;
  const struct mtpq_tensor *gu = find(t, i, "mlp.experts.gate_up_proj");
  const struct mtpq_tensor *dn = find(t, i, "mlp.experts.down_proj");
  for (int64_t e = 0; e < w->E && !st; e++) {
    if (gu && dn) { /* fused: [E, 2I, H] and [E, H, I], BF16 */
      if (gu->dtype != MTPQ_DTYPE_BF16 || dn->dtype != MTPQ_DTYPE_BF16 || gu->rank != 3 || dn->rank != 3 ||
          gu->shape[0] != w->E || dn->shape[0] != w->E)
        return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                            "%s: layer %lld's fused experts are not BF16 [E, 2I, H] and "
                            "[E, H, I]",
                            mtpq_repo_dir(t->repo), (long long)i);
      int64_t I = gu->shape[1] / 2, H = gu->shape[2];
      const unsigned char *base = (const unsigned char *)gu->data + (size_t)(e * 2 * I * H * 2);
      eg[e] = (struct lin){LIN_BF16, I, H, base, NULL, 0};
      eu[e] = (struct lin){LIN_BF16, I, H, base + I * H * 2, NULL, 0};
      ed[e] =
          (struct lin){LIN_BF16,     dn->shape[1],
                       dn->shape[2], (const unsigned char *)dn->data + (size_t)(e * dn->shape[1] * dn->shape[2] * 2),
                       NULL,         0};
    } else {
      char f[128];
      snprintf(f, sizeof f, "mlp.experts.%lld.gate_proj", (long long)e);
      st = lin(t, i, f, &eg[e], err);
      snprintf(f, sizeof f, "mlp.experts.%lld.up_proj", (long long)e);
      if (!st) st = lin(t, i, f, &eu[e], err);
      snprintf(f, sizeof f, "mlp.experts.%lld.down_proj", (long long)e);
      if (!st) st = lin(t, i, f, &ed[e], err);
    }
    if (!st && eg[e].rows > t->inter) t->inter = eg[e].rows;
  }
  return st;
}

static enum mtpq_status load_gdn(struct mtpq_target *t, int64_t i, struct tlayer *l, struct mtpq_err *err) {
  enum mtpq_status st;
  const int64_t kd = t->HK * t->dk, vd = t->HV * t->dv;
  if (find(t, i, "linear_attn.in_proj_qkvz.weight")) {
    st = lin(t, i, "linear_attn.in_proj_qkvz", &l->qkvz, err);
    if (!st) st = lin(t, i, "linear_attn.in_proj_ba", &l->ba, err);
    if (!st && (l->qkvz.rows != 2 * kd + 2 * vd || l->ba.rows != 2 * t->HV))
      st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH,
                        "%s: layer %lld: in_proj_qkvz has %lld rows, in_proj_ba %lld; "
                        "the config gives %lld and %lld",
                        mtpq_repo_dir(t->repo), (long long)i, (long long)l->qkvz.rows, (long long)l->ba.rows,
                        (long long)(2 * kd + 2 * vd), (long long)(2 * t->HV));
  } else {
    st = lin(t, i, "linear_attn.in_proj_qkv", &l->qkv, err);
    if (!st) st = lin(t, i, "linear_attn.in_proj_z", &l->z, err);
    if (!st) st = lin(t, i, "linear_attn.in_proj_b", &l->b, err);
    if (!st) st = lin(t, i, "linear_attn.in_proj_a", &l->a, err);
    if (!st && (l->qkv.rows != 2 * kd + vd || l->z.rows != vd || l->b.rows != t->HV || l->a.rows != t->HV))
      st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH,
                        "%s: layer %lld: in_proj_qkv/z/b/a rows %lld/%lld/%lld/%lld; the "
                        "config gives %lld/%lld/%lld/%lld",
                        mtpq_repo_dir(t->repo), (long long)i, (long long)l->qkv.rows, (long long)l->z.rows,
                        (long long)l->b.rows, (long long)l->a.rows, (long long)(2 * kd + vd), (long long)vd,
                        (long long)t->HV, (long long)t->HV);
  }
  if (!st) st = lin(t, i, "linear_attn.out_proj", &l->out, err);
  if (!st) st = vec(t, i, "linear_attn.conv1d.weight", t->conv_dim * t->Kc, &l->conv_w, err);
  if (!st) st = vec(t, i, "linear_attn.dt_bias", t->HV, &l->dt_bias, err);
  if (!st) st = vec(t, i, "linear_attn.A_log", t->HV, &l->A_log, err);
  if (!st) st = vec(t, i, "linear_attn.norm.weight", t->dv, &l->gnorm, err);
  return st;
}

void mtpq_target_close(struct mtpq_target *t) {
  if (!t) return;
  if (t->gpu) mtpq__tcuda_free(t);
  for (int64_t i = 0; t->layers && i < t->L; i++) {
    struct tlayer *l = &t->layers[i];
    free(l->in_norm), free(l->post_norm), free((void *)l->attn.qn), free((void *)l->attn.kn);
    free(l->conv_w), free(l->dt_bias), free(l->A_log), free(l->gnorm), free(l->experts);
  }
  free(t->layers);
  free(t->final_norm);
  mtpq__target_synth_free(t->synth);
  mtpq_config_free(&t->cfg);
  mtpq_repo_close(t->repo);
  free(t);
}

/* the sizes from the config, checked (dir names the model in errors) */
enum mtpq_status mtpq__target_setup(struct mtpq_target *t, const char *dir, struct mtpq_err *err) {
  enum mtpq_status st = MTPQ_OK;
  const struct mtpq_model_config *c = &t->cfg;
  snprintf(t->pre, sizeof t->pre, "%s",
           t->repo && mtpq_repo_find(t->repo, "model.language_model.embed_tokens.weight") ? "model.language_model."
                                                                                          : "model.");
  t->H = c->hidden_size, t->L = c->num_hidden_layers, t->Nq = c->num_attention_heads, t->Nkv = c->num_key_value_heads;
  t->D = c->head_dim, t->eps = (float)c->rms_norm_eps, t->theta = (float)c->rope_theta;
  t->rot = (int64_t)(c->head_dim * c->partial_rotary_factor);
  t->HK = c->linear_num_key_heads, t->HV = c->linear_num_value_heads, t->dk = c->linear_key_head_dim;
  t->dv = c->linear_value_head_dim, t->Kc = c->linear_conv_kernel_dim;
  t->conv_dim = 2 * t->HK * t->dk + t->HV * t->dv;
  if (t->L < 1 || t->Nkv < 1 || t->Nq % t->Nkv || t->rot % 2) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD,
                      "%s: %lld layers, %lld query heads over %lld KV heads, rotary dims "
                      "%lld: not a model this runtime runs",
                      dir, (long long)t->L, (long long)t->Nq, (long long)t->Nkv, (long long)t->rot);
    return st;
  }
  if (strchr(c->layer_types, 'L') &&
      (t->HK < 1 || t->HV < t->HK || t->HV % t->HK || t->dk < 1 || t->dv < 1 || t->Kc < 2)) {
    st = mtpq_err_set(err, MTPQ_E_CONFIG_FIELD,
                      "%s: linear_attention layers need linear_num_key_heads, "
                      "linear_num_value_heads (a multiple), linear_key/value_head_dim and linear_conv_kernel_dim >= 2 "
                      "(got %lld, %lld, %lld, %lld, %lld)",
                      dir, (long long)t->HK, (long long)t->HV, (long long)t->dk, (long long)t->dv, (long long)t->Kc);
    return st;
  }
  return st;
}

enum mtpq_status mtpq_target_open(const char *dir, struct mtpq_target **out, struct mtpq_err *err) {
  *out = NULL;
  rt_cpu_init();
  struct mtpq_target *t = calloc(1, sizeof *t);
  if (!t) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  int found = 0;
  enum mtpq_status st = mtpq_repo_open(dir, &t->repo, err);
  if (!st) st = mtpq_config_load_dir(mtpq_repo_dir(t->repo), &t->cfg, &found, err);
  if (!st && !found) st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no config.json", dir);
  if (st) goto fail;
  st = mtpq__target_setup(t, dir, err);
  if (st) goto fail;
  const struct mtpq_model_config *c = &t->cfg;
  char n[128];
  snprintf(n, sizeof n, "%sembed_tokens.weight", t->pre);
  const struct mtpq_tensor *emb = mtpq_repo_find(t->repo, n);
  if (!emb || (emb->dtype != MTPQ_DTYPE_BF16 && emb->dtype != MTPQ_DTYPE_F32) || emb->rank != 2 ||
      emb->shape[1] != t->H) {
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: %s missing or not BF16/F32 [V, %lld]", dir, n, (long long)t->H);
    goto fail;
  }
  t->embed = emb->data, t->embed_f32 = emb->dtype == MTPQ_DTYPE_F32, t->embed_rows = emb->shape[0];
  if (mtpq_repo_find(t->repo, "lm_head.weight"))
    st = mtpq__rt_load_lin(t->repo, "lm_head", &t->head, err);
  else
    t->head = (struct lin){t->embed_f32 ? LIN_F32 : LIN_BF16, emb->shape[0], t->H, emb->data, NULL, 0}; /* tied */
  if (!st && t->head.cols != t->H)
    st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH, "%s: the head has %lld columns, hidden size %lld", dir,
                      (long long)t->head.cols, (long long)t->H);
  t->V = t->head.rows;
  if (!st) st = vec(t, -1, "norm.weight", t->H, &t->final_norm, err);
  if (!st && !(t->layers = calloc((size_t)t->L, sizeof *t->layers))) st = mtpq_err_set(err, MTPQ_E_NOMEM, "oom");
  for (int64_t i = 0; i < t->L && !st; i++) {
    struct tlayer *l = &t->layers[i];
    l->kind = c->layer_types[i];
    st = vec(t, i, "input_layernorm.weight", t->H, &l->in_norm, err);
    if (!st) st = vec(t, i, "post_attention_layernorm.weight", t->H, &l->post_norm, err);
    if (!st && l->kind == 'A') {
      struct rt_attn *w = &l->attn;
      w->Nq = t->Nq, w->Nkv = t->Nkv, w->D = t->D, w->rot = t->rot, w->theta = t->theta, w->eps = t->eps;
      st = lin(t, i, "self_attn.q_proj", &w->q, err);
      if (!st) st = lin(t, i, "self_attn.k_proj", &w->k, err);
      if (!st) st = lin(t, i, "self_attn.v_proj", &w->v, err);
      if (!st) st = lin(t, i, "self_attn.o_proj", &w->o, err);
      if (!st) st = vec(t, i, "self_attn.q_norm.weight", t->D, (float **)&w->qn, err);
      if (!st) st = vec(t, i, "self_attn.k_norm.weight", t->D, (float **)&w->kn, err);
      if (!st && (w->q.rows != 2 * t->Nq * t->D || w->k.rows != t->Nkv * t->D || w->o.cols != t->Nq * t->D))
        st = mtpq_err_set(err, MTPQ_E_DTYPE_MISMATCH,
                          "%s: layer %lld: q_proj has %lld rows (q and gate: %lld), "
                          "k_proj %lld (%lld)",
                          dir, (long long)i, (long long)w->q.rows, (long long)(2 * t->Nq * t->D), (long long)w->k.rows,
                          (long long)(t->Nkv * t->D));
    } else if (!st) {
      st = load_gdn(t, i, l, err);
    }
    if (!st) st = load_mlp(t, i, l, err);
  }
  if (st) goto fail;
  *out = t;
  return MTPQ_OK;
fail:
  mtpq_target_close(t);
  return st;
}

int64_t mtpq_target_hidden(const struct mtpq_target *t) { return t->H; }
int64_t mtpq_target_vocab(const struct mtpq_target *t) { return t->V; }
int mtpq_target_layers(const struct mtpq_target *t) { return (int)t->L; }
char mtpq_target_layer_type(const struct mtpq_target *t, int layer) {
  return layer >= 0 && layer < t->L ? t->layers[layer].kind : 0;
}

void mtpq_target_seq_close(struct mtpq_target_seq *s) {
  if (!s) return;
  mtpq__tcuda_seq_close(s->gpu);
  free(s->gdn_conv), free(s->gdn_rec);
  for (int64_t i = 0; i < s->t->L; i++) {
    if (s->kc) free(s->kc[i]), free(s->vc[i]);
    for (int b = 0; b < s->nbuf; b++) {
      if (s->conv && s->conv[i]) free(s->conv[i][b]);
      if (s->rec && s->rec[i]) free(s->rec[i][b]);
    }
    if (s->conv) free(s->conv[i]);
    if (s->rec) free(s->rec[i]);
  }
  for (int64_t i = 0; s->kc16 && i < s->t->L; i++) free(s->kc16[i]), free(s->vc16[i]);
  free(s->kc16), free(s->vc16);
  free(s->kc), free(s->vc), free(s->conv), free(s->rec);
  float *bufs[] = {s->h,  s->a,  s->y,    s->m,  s->qg, s->kk, s->vv,  s->att, s->sc,      s->pr, s->g1,
                   s->u1, s->t1, s->proj, s->zz, s->bb, s->aa, s->mix, s->o,   s->rmargin, s->xr};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  free(s);
}

enum mtpq_status mtpq_target_seq_open(struct mtpq_target *t, enum mtpq_backend be, int64_t max_pos, int max_verify,
                                      struct mtpq_target_seq **out, struct mtpq_err *err) {
  *out = NULL;
  if (max_pos < 1) return mtpq_err_set(err, MTPQ_E_INVAL, "a sequence of %lld positions", (long long)max_pos);
  const int most = be == MTPQ_BACKEND_CUDA ? MTPQ_TCUDA_MAX_T : MTPQ_TARGET_MAX_VERIFY;
  if (max_verify < 1 || max_verify > most)
    return mtpq_err_set(err, MTPQ_E_INVAL, "verify of %d tokens: the %s backend takes 1..%d", max_verify,
                        be == MTPQ_BACKEND_CUDA ? "CUDA" : "CPU", most);
  struct mtpq_target_seq *s = calloc(1, sizeof *s);
  if (!s) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  s->t = t, s->max_pos = max_pos, s->nbuf = max_verify + 1;
  if (be == MTPQ_BACKEND_CUDA) {
    enum mtpq_status st = mtpq__tcuda_seq_open(t, max_pos, s->nbuf, &s->gpu, err);
    if (st) {
      free(s);
      return st;
    }
    *out = s;
    return MTPQ_OK;
  }
  const int64_t KV = t->Nkv * t->D, E = t->cfg.num_experts > 0 ? t->cfg.num_experts : 1;
  const int64_t vd = t->HV * t->dv, kd = t->HK * t->dk;
  int ok = (s->kc = calloc((size_t)t->L, sizeof *s->kc)) && (s->vc = calloc((size_t)t->L, sizeof *s->vc)) &&
           (s->conv = calloc((size_t)t->L, sizeof *s->conv)) && (s->rec = calloc((size_t)t->L, sizeof *s->rec));
  for (int64_t i = 0; ok && i < t->L; i++) {
    if (t->layers[i].kind == 'A')
      ok = (s->kc[i] = calloc((size_t)(max_pos * KV), 4)) && (s->vc[i] = calloc((size_t)(max_pos * KV), 4));
    else {
      ok = (s->conv[i] = calloc((size_t)s->nbuf, sizeof **s->conv)) &&
           (s->rec[i] = calloc((size_t)s->nbuf, sizeof **s->rec));
      for (int b = 0; ok && b < s->nbuf; b++)
        ok = (s->conv[i][b] = calloc((size_t)(t->conv_dim * (t->Kc - 1)), 4)) &&
             (s->rec[i][b] = calloc((size_t)(t->HV * t->dk * t->dv), 4));
    }
  }
  const int64_t inter = t->inter > 0 ? t->inter : 1;
  float **bufs[] = {&s->h,  &s->a,  &s->y,    &s->m,  &s->qg, &s->kk, &s->vv,  &s->att, &s->sc,      &s->pr, &s->g1,
                    &s->u1, &s->t1, &s->proj, &s->zz, &s->bb, &s->aa, &s->mix, &s->o,   &s->rmargin, &s->xr};
  const int64_t sizes[] = {t->H,
                           t->H,
                           t->H,
                           t->H,
                           2 * t->Nq * t->D,
                           KV,
                           KV,
                           t->Nq * t->D,
                           max_pos,
                           E,
                           inter,
                           inter,
                           t->H,
                           2 * kd + 2 * vd + 2 * t->HV,
                           vd,
                           t->HV,
                           t->HV,
                           t->conv_dim,
                           vd,
                           max_pos,
                           t->H > inter ? t->H : inter};
  for (size_t i = 0; ok && i < sizeof sizes / sizeof sizes[0]; i++)
    ok = (*bufs[i] = malloc((size_t)(sizes[i] > 0 ? sizes[i] : 1) * 4)) != NULL;
  if (!ok) {
    mtpq_target_seq_close(s);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for a %lld-position target sequence", (long long)max_pos);
  }
  for (int64_t p = 0; p < max_pos; p++) s->rmargin[p] = -1.0f;
  *out = s;
  return MTPQ_OK;
}

int64_t mtpq_target_seq_len(const struct mtpq_target_seq *s) { return s->len; }

enum mtpq_status mtpq_target_seq_fp16_experts(struct mtpq_target_seq *s, int on, struct mtpq_err *err) {
  if (s->gpu)
    return mtpq_err_set(err, MTPQ_E_INVAL,
                        "the FP16 expert inputs are the CUDA prefill's own; only a CPU sequence "
                        "emulates them");
  s->fp16_in = on != 0;
  return MTPQ_OK;
}

double mtpq_target_seq_route_margin(const struct mtpq_target_seq *s, int64_t pos) {
  return s->gpu || pos < 0 || pos >= s->max_pos ? -1.0 : s->rmargin[pos];
}

const float *mtpq_target_seq_gdn(struct mtpq_target_seq *s, int layer, const float **rec, int64_t *conv_n,
                                 int64_t *rec_n) {
  const struct mtpq_target *t = s->t;
  if (layer < 0 || layer >= t->L || t->layers[layer].kind != 'L') return NULL;
  *conv_n = t->conv_dim * (t->Kc - 1), *rec_n = t->HV * t->dk * t->dv;
  if (s->gpu) {
    struct mtpq_err e;
    if (!s->gdn_conv) s->gdn_conv = malloc((size_t)*conv_n * 4), s->gdn_rec = malloc((size_t)*rec_n * 4);
    if (!s->gdn_conv || !s->gdn_rec || mtpq__tcuda_seq_gdn(s->gpu, layer, s->cur, s->gdn_conv, s->gdn_rec, &e))
      return NULL;
    *rec = s->gdn_rec;
    return s->gdn_conv;
  }
  *rec = s->rec[layer][s->cur];
  return s->conv[layer][s->cur];
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* One token through a Gated DeltaNet layer (target-architecture.md 2): x is
 * the normed input [H], out [H]. */
static void gdn_step(const struct mtpq_target *t, const struct tlayer *l, struct mtpq_target_seq *s, int64_t li,
                     int src, int dst, const float *x, float *out) {
  const int64_t HK = t->HK, HV = t->HV, dk = t->dk, dv = t->dv, r = HV / HK, kd = HK * dk, Kc = t->Kc;
  float *mix = s->mix, *z = s->zz, *b = s->bb, *a = s->aa, *o = s->o, *p = s->proj;
  if (l->qkvz.w) { /* Qwen3-Next: per key-head group j, [q_j | k_j | v (r heads) | z (r heads)], then [b (r) | a (r)] */
    rt_lin_apply(&l->qkvz, x, p);
    float *ba = p + 2 * kd + 2 * HV * dv;
    rt_lin_apply(&l->ba, x, ba);
    const int64_t g = 2 * dk + 2 * r * dv;
    for (int64_t j = 0; j < HK; j++) {
      const float *gp = p + j * g;
      memcpy(mix + j * dk, gp, (size_t)dk * 4);
      memcpy(mix + kd + j * dk, gp + dk, (size_t)dk * 4);
      memcpy(mix + 2 * kd + j * r * dv, gp + 2 * dk, (size_t)(r * dv) * 4);
      memcpy(z + j * r * dv, gp + 2 * dk + r * dv, (size_t)(r * dv) * 4);
      memcpy(b + j * r, ba + j * 2 * r, (size_t)r * 4);
      memcpy(a + j * r, ba + j * 2 * r + r, (size_t)r * 4);
    }
  } else { /* Qwen3.5: [q | k | v] already in the conv's order; z, b, a apart */
    rt_lin_apply(&l->qkv, x, mix);
    rt_lin_apply(&l->z, x, z);
    rt_lin_apply(&l->b, x, b);
    rt_lin_apply(&l->a, x, a);
  }
  /* depthwise causal conv1d over the last K inputs of each channel, SiLU;
   * the state keeps the last K - 1 inputs, oldest first */
  const float *cs = s->conv[li][src];
  float *cd = s->conv[li][dst];
  for (int64_t c = 0; c < t->conv_dim; c++) {
    const float *w = l->conv_w + c * Kc, *h = cs + c * (Kc - 1);
    float *hd = cd + c * (Kc - 1), acc = 0.0f;
    for (int64_t i = 0; i < Kc - 1; i++) acc += w[i] * h[i];
    acc += w[Kc - 1] * mix[c];
    memmove(hd, h + 1, (size_t)(Kc - 2) * 4); /* (hd may be h) */
    hd[Kc - 2] = mix[c];
    mix[c] = rt_silu(acc);
  }
  float *q = mix, *k = mix + kd, *v = mix + 2 * kd;
  for (int64_t j = 0; j < HK; j++) { /* l2norm(q) * dk^-0.5, l2norm(k) */
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = 0; i < dk; i++) sq += q[j * dk + i] * q[j * dk + i], sk += k[j * dk + i] * k[j * dk + i];
    const float rq = 1.0f / sqrtf(sq + 1e-6f) / sqrtf((float)dk), rk = 1.0f / sqrtf(sk + 1e-6f);
    for (int64_t i = 0; i < dk; i++) q[j * dk + i] *= rq, k[j * dk + i] *= rk;
  }
  const float *S0 = s->rec[li][src];
  float *S = s->rec[li][dst];
  for (int64_t h = 0; h < HV; h++) {
    const float beta = rt_sigm(b[h]), g = -expf(l->A_log[h]) * softplus(a[h] + l->dt_bias[h]), dec = expf(g);
    const float *qh = q + (h / r) * dk, *kh = k + (h / r) * dk, *vh = v + h * dv;
    float *Sh = S + h * dk * dv, *oh = o + h * dv;
    for (int64_t i = 0; i < dk * dv; i++) Sh[i] = S0[h * dk * dv + i] * dec;
    for (int64_t j = 0; j < dv; j++) { /* u = S^T k; d = beta (v - u); S += k d^T */
      float u = 0.0f;
      for (int64_t i = 0; i < dk; i++) u += Sh[i * dv + j] * kh[i];
      const float dj = beta * (vh[j] - u);
      for (int64_t i = 0; i < dk; i++) Sh[i * dv + j] += kh[i] * dj;
    }
    for (int64_t j = 0; j < dv; j++) { /* o = S^T q */
      float acc = 0.0f;
      for (int64_t i = 0; i < dk; i++) acc += Sh[i * dv + j] * qh[i];
      oh[j] = acc;
    }
    /* the gated norm: w (as stored) x rmsnorm(o) x silu(z) */
    double ss = 0;
    for (int64_t j = 0; j < dv; j++) ss += (double)oh[j] * oh[j];
    const float rn = 1.0f / sqrtf((float)(ss / (double)dv) + t->eps);
    for (int64_t j = 0; j < dv; j++) oh[j] = l->gnorm[j] * (oh[j] * rn) * rt_silu(z[h * dv + j]);
  }
  rt_lin_apply(&l->out, o, out);
}

/* token at position len, GDN state read from buffer src and written to dst */
static enum mtpq_status forward_one(struct mtpq_target_seq *s, int32_t token, int src, int dst, float *hidden,
                                    float *logits, int32_t *argmax, struct mtpq_err *err) {
  const struct mtpq_target *t = s->t;
  const int64_t H = t->H, pos = s->len;
  if (pos >= s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "position %lld past the sequence's %lld", (long long)pos,
                        (long long)s->max_pos);
  if (token < 0 || (int64_t)token >= t->head.rows)
    return mtpq_err_set(err, MTPQ_E_BAD_VALUE, "token %d outside the vocabulary (%lld)", token, (long long)t->V);
  float *h = s->h, *a = s->a, *y = s->y, *m = s->m;
  if (t->embed_f32)
    memcpy(h, t->embed + (size_t)token * (size_t)H * 4, (size_t)H * 4);
  else
    for (int64_t j = 0; j < H; j++) h[j] = rt_bf16f(t->embed + ((size_t)token * (size_t)H + (size_t)j) * 2);
  const struct rt_attn_scratch as = {s->qg, s->kk, s->vv, s->att, s->sc};
  float margin = 1.0f;
  const struct rt_mlp_scratch ms = {s->pr, s->g1, s->u1, s->t1, &margin, s->xr, s->fp16_in};
  for (int64_t i = 0; i < t->L; i++) {
    const struct tlayer *l = &t->layers[i];
    rt_zcnorm(h, l->in_norm, H, t->eps, a);
    if (l->kind == 'A')
      rt_cpu_attention(&l->attn, a, pos, 0, s->kc16 ? s->kc16[i] : NULL, s->kc16 ? s->vc16[i] : NULL,
                       s->kc16 ? NULL : s->kc[i], s->kc16 ? NULL : s->vc[i], &as, y);
    else
      gdn_step(t, l, s, i, src, dst, a, y);
    for (int64_t j = 0; j < H; j++) h[j] += y[j];
    rt_zcnorm(h, l->post_norm, H, t->eps, a);
    rt_cpu_mlp(&l->mlp, a, H, h, &ms, m); /* + the residual */
    memcpy(h, m, (size_t)H * 4);
  }
  s->rmargin[pos] = margin;
  s->len++;
  rt_zcnorm(h, t->final_norm, H, t->eps, a);
  if (hidden) memcpy(hidden, a, (size_t)H * 4);
  if (logits || argmax) {
    float best;
    const int64_t r = rt_head_argmax(&t->head, a, logits, &best);
    if (!isfinite(best)) return mtpq__target_nonfinite(t, pos, best, err);
    if (argmax) *argmax = (int32_t)r;
  }
  return MTPQ_OK;
}

/* a verify taken back: the length and the slot read before it (the slots it wrote are free again) */
static void unverify(struct mtpq_target_seq *s) { s->len = s->vbase, s->cur = s->vcur, s->vcount = 0; }

/* the CUDA backend: T tokens from slot cur, token i's state into slot (cur + 1 + i) % nbuf */
static enum mtpq_status gpu_forward(struct mtpq_target_seq *s, int T, const int32_t *tokens, float *hidden,
                                    float *logits, int32_t *argmax, struct mtpq_err *err) {
  if (s->len + T > s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "%d tokens at position %lld past the sequence's %lld", T, (long long)s->len,
                        (long long)s->max_pos);
  const int head = logits ? 2 : argmax ? 1 : 0;
  int32_t am[MTPQ_TCUDA_MAX_T];
  enum mtpq_status st =
      mtpq__tcuda_forward(s->gpu, T, tokens, s->len, s->cur, head, hidden, logits, argmax ? am : NULL, err);
  if (!st && argmax) memcpy(argmax, am, (size_t)T * sizeof *am);
  return st;
}

enum mtpq_status mtpq_target_step(struct mtpq_target_seq *s, int32_t token, float *hidden, float *logits,
                                  int32_t *argmax, struct mtpq_err *err) {
  s->vcount = 0; /* a step after a verify accepts all of it */
  if (s->gpu) {
    enum mtpq_status st = gpu_forward(s, 1, &token, hidden, logits, argmax, err);
    if (!st) s->len++, s->cur = (s->cur + 1) % s->nbuf;
    return st;
  }
  return forward_one(s, token, s->cur, s->cur, hidden, logits, argmax, err);
}

enum mtpq_status mtpq_target_prefill(struct mtpq_target_seq *s, int64_t n, const int32_t *tokens, float *hidden,
                                     struct mtpq_err *err) {
  const int64_t H = s->t->H;
  if (n < 0 || s->len + n > s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a prompt of %lld tokens at position %lld past the sequence's %lld",
                        (long long)n, (long long)s->len, (long long)s->max_pos);
  s->vcount = 0; /* (as a step after a verify) */
  for (int64_t p = 0; p < n;) {
    enum mtpq_status st;
    int64_t c = n - p;
    if (s->gpu) {
      c = c < MTPQ_TCUDA_PREFILL ? c : MTPQ_TCUDA_PREFILL;
      st = mtpq__tcuda_prefill(s->gpu, (int)c, tokens + p, s->len, s->cur, hidden ? hidden + p * H : NULL, err);
      if (!st) s->len += c, s->cur = (s->cur + 1) % s->nbuf;
    } else {
      c = 1;
      st = forward_one(s, tokens[p], s->cur, s->cur, hidden ? hidden + p * H : NULL, NULL, NULL, err);
    }
    if (st) return st;
    p += c;
  }
  return MTPQ_OK;
}

enum mtpq_status mtpq_target_verify(struct mtpq_target_seq *s, int T, const int32_t *tokens, float *hidden,
                                    int32_t *argmax, struct mtpq_err *err) {
  return mtpq_target_verify_logits(s, T, tokens, hidden, NULL, argmax, err);
}

enum mtpq_status mtpq_target_verify_logits(struct mtpq_target_seq *s, int T, const int32_t *tokens, float *hidden,
                                           float *logits, int32_t *argmax, struct mtpq_err *err) {
  if (T < 1 || T >= s->nbuf)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a verify of %d tokens in a sequence opened for 1..%d", T, s->nbuf - 1);
  if (s->len + T > s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "a verify of %d tokens at position %lld past the sequence's %lld", T,
                        (long long)s->len, (long long)s->max_pos);
  const int64_t H = s->t->H;
  s->vbase = s->len, s->vcur = s->cur, s->vcount = 0;
  if (s->gpu) {
    enum mtpq_status st = gpu_forward(s, T, tokens, hidden, logits, argmax, err);
    if (st) return st;
    s->len += T, s->vcount = T, s->cur = (s->vcur + T) % s->nbuf;
    return MTPQ_OK;
  }
  for (int i = 0; i < T; i++) {
    const int src = i ? (s->vcur + i) % s->nbuf : s->vcur, dst = (s->vcur + 1 + i) % s->nbuf;
    enum mtpq_status st =
        forward_one(s, tokens[i], src, dst, hidden ? hidden + (size_t)i * (size_t)H : NULL,
                    logits ? logits + (size_t)i * (size_t)s->t->V : NULL, argmax ? argmax + i : NULL, err);
    if (st) {
      unverify(s); /* nothing verified */
      return st;
    }
  }
  s->vcount = T, s->cur = (s->vcur + T) % s->nbuf;
  return MTPQ_OK;
}

enum mtpq_status mtpq_target_verify_many(struct mtpq_target_seq *const *s, int n, int T, const int32_t *const *tokens,
                                         float *const *hidden, float *const *logits, int32_t *const *argmax,
                                         struct mtpq_err *err) {
  if (n < 1) return mtpq_err_set(err, MTPQ_E_INVAL, "a verify of %d sequences", n);
  for (int b = 0; b < n; b++) {
    if (s[b]->t != s[0]->t || !s[b]->gpu != !s[0]->gpu)
      return mtpq_err_set(err, MTPQ_E_INVAL, "verify of several sequences: sequence %d is of another %s", b,
                          s[b]->t != s[0]->t ? "target" : "backend");
    for (int c = 0; c < b; c++)
      if (s[c] == s[b]) return mtpq_err_set(err, MTPQ_E_INVAL, "verify of several sequences: %d and %d are one", c, b);
    if (T < 1 || T >= s[b]->nbuf)
      return mtpq_err_set(err, MTPQ_E_INVAL, "sequence %d: a verify of %d tokens in a sequence opened for 1..%d", b, T,
                          s[b]->nbuf - 1);
    if (s[b]->len + T > s[b]->max_pos)
      return mtpq_err_set(err, MTPQ_E_INVAL, "sequence %d: a verify of %d tokens at position %lld past its %lld", b, T,
                          (long long)s[b]->len, (long long)s[b]->max_pos);
  }
  enum mtpq_status st = MTPQ_OK;
  int done = 0;
  if (!s[0]->gpu) { /* the reference: one after another */
    for (; done < n && !st; done += !st)
      st = mtpq_target_verify_logits(s[done], T, tokens[done], hidden ? hidden[done] : NULL,
                                     logits ? logits[done] : NULL, argmax ? argmax[done] : NULL, err);
  } else { /* forwards of as many whole sequences as MTPQ_TCUDA_MAX_T tokens hold */
    const int per = MTPQ_TCUDA_MAX_T / T;
    for (; done < n && !st;) {
      const int m = n - done < per ? n - done : per;
      void *gs[MTPQ_TCUDA_MAX_T];
      int64_t pos[MTPQ_TCUDA_MAX_T];
      int cur[MTPQ_TCUDA_MAX_T];
      for (int b = 0; b < m; b++) gs[b] = s[done + b]->gpu, pos[b] = s[done + b]->len, cur[b] = s[done + b]->cur;
      st = mtpq__tcuda_forward_many(gs, m, T, tokens + done, pos, cur,
                                    logits   ? 2
                                    : argmax ? 1
                                             : 0,
                                    hidden ? hidden + done : NULL, logits ? logits + done : NULL,
                                    argmax ? argmax + done : NULL, err);
      for (int b = 0; b < m && !st; b++) {
        struct mtpq_target_seq *q = s[done + b];
        q->vbase = q->len, q->vcur = q->cur, q->len += T, q->vcount = T, q->cur = (q->vcur + T) % q->nbuf;
      }
      if (!st) done += m;
    }
  }
  for (int b = 0; st && b < done; b++) unverify(s[b]); /* all or none */
  return st;
}

enum mtpq_status mtpq_target_accept(struct mtpq_target_seq *s, int j, struct mtpq_err *err) {
  if (s->vcount < 1) return mtpq_err_set(err, MTPQ_E_INVAL, "accept without a verify before it");
  if (j < 0 || j >= s->vcount)
    return mtpq_err_set(err, MTPQ_E_INVAL, "accept of slot %d after a verify of %d tokens", j, s->vcount);
  s->len = s->vbase + j + 1, s->cur = (s->vcur + 1 + j) % s->nbuf, s->vcount = 0;
  return MTPQ_OK;
}

enum mtpq_status mtpq_target_seq_kv_bf16(struct mtpq_target_seq *s, struct mtpq_err *err) {
  if (s->gpu || s->kc16) return MTPQ_OK;
  if (s->len) return mtpq_err_set(err, MTPQ_E_INVAL, "the K/V cache's format is set before the first token");
  const struct mtpq_target *t = s->t;
  const size_t n = (size_t)(s->max_pos * t->Nkv * t->D) * 2;
  int ok = (s->kc16 = calloc((size_t)t->L, sizeof *s->kc16)) && (s->vc16 = calloc((size_t)t->L, sizeof *s->vc16));
  for (int64_t i = 0; ok && i < t->L; i++)
    if (t->layers[i].kind == 'A') ok = (s->kc16[i] = calloc(n, 1)) && (s->vc16[i] = calloc(n, 1));
  if (!ok) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory for a BF16 K/V cache");
  return MTPQ_OK;
}

enum mtpq_status mtpq_target_seq_jump(struct mtpq_target_seq *s, int64_t len, struct mtpq_err *err) {
  if (len < 0 || len >= s->max_pos)
    return mtpq_err_set(err, MTPQ_E_INVAL, "length %lld in a %lld-position sequence", (long long)len,
                        (long long)s->max_pos);
  s->len = len, s->vcount = 0;
  return MTPQ_OK;
}

double mtpq_target_seq_last_us(const struct mtpq_target_seq *s) { return s->gpu ? mtpq__tcuda_last_us(s->gpu) : -1; }

int mtpq_target_seq_profile(struct mtpq_target_seq *s, int T, const char **names, double *us, int max,
                            struct mtpq_err *err) {
  if (!s->gpu) {
    mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "a kernel profile needs the CUDA backend");
    return -1;
  }
  return mtpq__tcuda_profile(s->gpu, T, names, us, max, err);
}

static int64_t lin_bytes(const struct lin *L) {
  if (!L->w) return 0;
  const int64_t n = L->rows * L->cols;
  return L->f == LIN_BF16 ? 2 * n : L->f == LIN_F32 ? 4 * n : L->f == LIN_FP8 ? n : n / 2 + n / 16;
}

int64_t mtpq_target_step_bytes(const struct mtpq_target *t, int64_t ctx, int T, int head) {
  int64_t b = head ? lin_bytes(&t->head) : 0;
  b += (int64_t)T * t->H * (t->embed_f32 ? 4 : 2);
  for (int64_t i = 0; i < t->L; i++) {
    const struct tlayer *l = &t->layers[i];
    const struct rt_mlp *m = &l->mlp;
    const struct lin *ls[] = {&l->attn.q, &l->attn.k, &l->attn.v, &l->attn.o, &l->qkvz, &l->ba, &l->qkv, &l->z,
                              &l->b,      &l->a,      &l->out,    &m->router, &m->seg,  &m->sg, &m->su,  &m->sd};
    for (size_t k = 0; k < sizeof ls / sizeof ls[0]; k++) b += lin_bytes(ls[k]);
    if (m->moe) b += m->topk * (lin_bytes(&m->eg[0]) + lin_bytes(&m->eu[0]) + lin_bytes(&m->ed[0]));
    if (l->kind == 'A')
      b += (ctx + T) * t->Nkv * t->D * 2 * 2; /* BF16 K and V */
    else
      b += (int64_t)(1 + T) * (t->HV * t->dk * t->dv + t->conv_dim * (t->Kc - 1)) * 4;
  }
  return b;
}
