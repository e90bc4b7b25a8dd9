/* The quantization plan of a drafter repo; see quant/drafter.h. Writing the
 * repo is in quant/drafter_write.c, its metadata in quant/drafter_meta.c. */
#include "quant/drafter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model.h"
#include "io/util.h"
#include "quant/drafter_priv.h"

struct mtpq_drafter_params mtpq_drafter_default_params(void) {
  struct mtpq_drafter_params p = {0};
  p.fp8_input_scale = 1.0;
  p.arith = MTPQ_ARITH_CUDA;
  p.fp8_format = MTPQ_FMT_FP8;
  p.threads = 1;
  p.max_shard_bytes = (uint64_t)5 << 30;
  return p;
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static struct mtpq_plan_item *add_item(struct mtpq_plan *pl, size_t *cap) {
  if (pl->n == *cap) {
    size_t nc = *cap ? 2 * *cap : 64;
    struct mtpq_plan_item *ni = realloc(pl->items, nc * sizeof *ni);
    if (!ni) return NULL;
    pl->items = ni;
    *cap = nc;
  }
  struct mtpq_plan_item *it = &pl->items[pl->n++];
  memset(it, 0, sizeof *it);
  return it;
}

/* Module suffixes quantized to FP8 (the draft linears). */
static int is_fp8_module(const char *mod) {
  static const char *suf[] = {".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj",
                              ".self_attn.o_proj", ".mlp.shared_expert.gate_proj",
                              ".mlp.shared_expert.up_proj", ".mlp.shared_expert.down_proj",
                              ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj"};
  if (strcmp(mod, "mtp.fc") == 0) return 1;
  for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++)
    if (mtpq__ends_with(mod, suf[i]) && starts_with(mod, "mtp.layers.")) return 1;
  return 0;
}

static int cmp_items(const void *a, const void *b) {
  return strcmp(((const struct mtpq_plan_item *)a)->name, ((const struct mtpq_plan_item *)b)->name);
}

void mtpq_plan_free(struct mtpq_plan *pl) {
  if (!pl) return;
  for (size_t i = 0; i < pl->n; i++) free(pl->items[i].name);
  free(pl->items);
  struct drafter_priv *pv = pl->priv;
  if (pv) {
    mtpq_repo_close(pv->target);
    if (pv->have_cfg) mtpq_config_free(&pv->cfg);
    free(pv->ids);
    free(pv->head);
    free(pv);
  }
  free(pl);
}

static enum mtpq_status need_bf16(const struct mtpq_tensor *t, struct mtpq_err *err) {
  if (t->dtype != MTPQ_DTYPE_BF16)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED, "tensor %s is %s; quantize needs BF16 weights", t->name,
                        mtpq_dtype_name(t->dtype));
  return MTPQ_OK;
}

static enum mtpq_status nvfp4_cols_ok(const char *name, int64_t rows, int64_t cols, struct mtpq_err *err) {
  if (cols % 16)
    return mtpq_err_set(err, MTPQ_E_UNSUPPORTED,
                        "tensor %s: shape [%lld, %lld]: the input width is not divisible by the NVFP4 "
                        "block of 16 (vLLM cannot serve it)",
                        name, (long long)rows, (long long)cols);
  return MTPQ_OK;
}

static enum mtpq_status add_expert(struct mtpq_plan *pl, size_t *cap, const char *layer_prefix, long e,
                                   const char *proj, const void *src, int64_t rows, int64_t cols,
                                   const char *src_name, int group, struct mtpq_err *err) {
  char name[512];
  snprintf(name, sizeof name, "%s.mlp.experts.%ld.%s", layer_prefix, e, proj);
  enum mtpq_status st = nvfp4_cols_ok(src_name, rows, cols, err);
  if (st) return st;
  struct mtpq_plan_item *it = add_item(pl, cap);
  if (!it || !(it->name = mtpq__strdup(name))) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  it->kind = MTPQ_ITEM_NVFP4;
  it->src = src, it->rows = rows, it->cols = cols, it->src_name = src_name;
  it->group = strcmp(proj, "down_proj") == 0 ? -1 : group;
  it->in_bytes = (uint64_t)(rows * cols * 2);
  it->out_bytes = (uint64_t)(rows * cols / 2 + rows * cols / 16 + 8);
  return MTPQ_OK;
}

/* Expert input_scale from the last trunk layer that has them. */
static void target_expert_scales(const struct mtpq_repo *r, const char *trunk, double *gu, double *dn) {
  long best_layer = -1;
  *gu = *dn = 0;
  size_t tl = strlen(trunk);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < mtpq_repo_count(r); i++) {
      const struct mtpq_tensor *t = mtpq_repo_at(r, i);
      if (!starts_with(t->name, trunk) || !starts_with(t->name + tl, "layers.") ||
          !mtpq__ends_with(t->name, "_proj.input_scale") || !strstr(t->name, ".mlp.experts.") ||
          t->dtype != MTPQ_DTYPE_F32 || t->numel != 1)
        continue;
      long L = strtol(t->name + tl + 7, NULL, 10);
      if (pass == 0) {
        if (L > best_layer) best_layer = L;
        continue;
      }
      if (L != best_layer) continue;
      float v;
      memcpy(&v, t->data, 4);
      if (!isfinite(v)) continue;
      if (strstr(t->name, ".down_proj.")) *dn = fmax(*dn, v);
      else *gu = fmax(*gu, v);
    }
}

enum mtpq_status mtpq_drafter_plan(const struct mtpq_drafter_params *p, struct mtpq_plan **out,
                                   struct mtpq_err *err) {
  *out = NULL;
  struct mtpq_plan *pl = calloc(1, sizeof *pl);
  struct drafter_priv *pv = calloc(1, sizeof *pv);
  if (!pl || !pv) {
    free(pl);
    free(pv);
    return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  pl->priv = pv;
  size_t cap = 0;
  enum mtpq_status st = mtpq_repo_open(p->target, &pv->target, err);
  if (st) goto fail;
  char *cpath = mtpq__path_join(mtpq_repo_dir(pv->target), "config.json");
  if (!cpath) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto fail;
  }
  st = mtpq_config_load(cpath, &pv->cfg, err);
  free(cpath);
  if (st) goto fail;
  pv->have_cfg = 1;
  struct mtpq_model_desc d;
  mtpq_model_describe(pv->target, &pv->cfg, &d);
  snprintf(pl->family, sizeof pl->family, "%s", mtpq_family_name(d.family));
  pl->experts = d.mtp_experts;
  pl->layers = d.mtp_layers;
  pl->hidden = pv->cfg.hidden_size;
  if (d.mtp_tensors == 0) {
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no mtp.* tensors: this checkpoint has no MTP layer", p->target);
    goto fail;
  }
  if (!d.lm_head) {
    st = mtpq_err_set(err, MTPQ_E_NOT_FOUND, "%s: no lm_head.weight and no tied embedding", p->target);
    goto fail;
  }
  /* 1. mtp.* tensors */
  for (size_t i = 0; i < mtpq_repo_count(pv->target) && !st; i++) {
    const struct mtpq_tensor *t = mtpq_repo_at(pv->target, i);
    if (!starts_with(t->name, "mtp.")) continue;
    const char *ex = strstr(t->name, ".mlp.experts.");
    if (ex && starts_with(t->name, "mtp.layers.")) {
      char layer[256];
      snprintf(layer, sizeof layer, "%.*s", (int)(ex - t->name), t->name);
      const char *rest = ex + strlen(".mlp.experts.");
      long L = strtol(t->name + 11, NULL, 10);
      if ((st = need_bf16(t, err))) break;
      if (strcmp(rest, "gate_up_proj") == 0 && t->rank == 3) { /* fused [E, 2I, H] */
        int64_t E = t->shape[0], I = t->shape[1] / 2, H = t->shape[2];
        for (int64_t e = 0; e < E && !st; e++) {
          const unsigned char *base = (const unsigned char *)t->data + (size_t)(e * 2 * I * H * 2);
          st = add_expert(pl, &cap, layer, (long)e, "gate_proj", base, I, H, t->name, (int)(L * 100000 + e), err);
          if (!st) st = add_expert(pl, &cap, layer, (long)e, "up_proj", base + I * H * 2, I, H, t->name,
                                   (int)(L * 100000 + e), err);
        }
        continue;
      }
      if (strcmp(rest, "down_proj") == 0 && t->rank == 3) { /* fused [E, H, I] */
        for (int64_t e = 0; e < t->shape[0] && !st; e++)
          st = add_expert(pl, &cap, layer, (long)e, "down_proj",
                          (const unsigned char *)t->data + (size_t)(e * t->shape[1] * t->shape[2] * 2),
                          t->shape[1], t->shape[2], t->name, -1, err);
        continue;
      }
      char *end = NULL;
      long e = strtol(rest, &end, 10);
      if (end != rest && *end == '.' && t->rank == 2 && mtpq__ends_with(t->name, ".weight")) {
        char proj[64];
        snprintf(proj, sizeof proj, "%.*s", (int)(strlen(end + 1) - 7), end + 1);
        st = add_expert(pl, &cap, layer, e, proj, t->data, t->shape[0], t->shape[1], t->name,
                        (int)(L * 100000 + e), err);
        continue;
      }
    }
    char mod[512];
    int is_w = mtpq__ends_with(t->name, ".weight") && strlen(t->name) - 7 < sizeof mod;
    if (is_w) snprintf(mod, sizeof mod, "%.*s", (int)(strlen(t->name) - 7), t->name);
    struct mtpq_plan_item *it = add_item(pl, &cap);
    if (!it) {
      st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
      break;
    }
    if (is_w && t->rank == 2 && is_fp8_module(mod)) {
      if ((st = need_bf16(t, err))) break;
      it->name = mtpq__strdup(mod);
      it->kind = MTPQ_ITEM_FP8;
      it->rows = t->shape[0], it->cols = t->shape[1];
      it->out_bytes = t->numel + 8;
    } else {
      it->name = mtpq__strdup(t->name);
      it->kind = MTPQ_ITEM_COPY;
      it->out_bytes = t->nbytes;
    }
    it->src = t->data;
    it->src_name = t->name;
    it->in_bytes = t->nbytes;
    it->input_scale = (float)p->fp8_input_scale;
    if (!it->name) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  }
  if (st) goto fail;
  /* 2. expert input_scale */
  int any_nvfp4 = 0;
  for (size_t i = 0; i < pl->n; i++) any_nvfp4 |= pl->items[i].kind == MTPQ_ITEM_NVFP4;
  if (any_nvfp4) {
    if (p->expert_input_scale > 0) {
      pl->expert_input_scale_gate_up = pl->expert_input_scale_down = p->expert_input_scale;
      pl->expert_input_scale_origin = "given (--expert-input-scale)";
    } else {
      double gu, dn;
      target_expert_scales(pv->target, d.trunk_prefix, &gu, &dn);
      if (!(gu > 0) || !(dn > 0)) {
        st = mtpq_err_set(err, MTPQ_E_INVAL,
                          "%s: the target has no expert input_scale (it is not an NVFP4 checkpoint), so the "
                          "NVFP4 experts' static input_scale cannot be derived; pass --expert-input-scale X "
                          "(NVIDIA's calibration-free value is 0.1667 = 448/2688)",
                          p->target);
        goto fail;
      }
      pl->expert_input_scale_gate_up = 2 * gu;
      pl->expert_input_scale_down = 2 * dn;
      pl->expert_input_scale_origin = "2 x the largest expert input_scale of the target's last trunk layer";
    }
    for (size_t i = 0; i < pl->n; i++)
      if (pl->items[i].kind == MTPQ_ITEM_NVFP4)
        pl->items[i].input_scale = (float)(pl->items[i].group < 0 ? pl->expert_input_scale_down
                                                                  : pl->expert_input_scale_gate_up);
  }
  /* 3. draft head from the ids */
  st = mtpq__drafter_load_ids(p, pv, d.lm_head, err);
  if (st) goto fail;
  struct mtpq_plan_item *hd = add_item(pl, &cap);
  if (!hd || !(hd->name = mtpq__strdup("mtp.draft_lm_head"))) {
    st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
    goto fail;
  }
  hd->kind = MTPQ_ITEM_HEAD;
  hd->src = pv->head;
  hd->rows = (int64_t)pv->n_ids;
  hd->cols = d.lm_head->shape[1];
  hd->src_name = d.lm_head->name;
  hd->input_scale = (float)p->fp8_input_scale;
  hd->in_bytes = (uint64_t)(hd->rows * hd->cols * 2);
  hd->out_bytes = (uint64_t)(hd->rows * hd->cols + 8);
  pl->head_rows = hd->rows;
  pl->vocab_rows = d.lm_head->shape[0];
  pl->head_source = d.lm_head->name;
  qsort(pl->items, pl->n, sizeof *pl->items, cmp_items);
  for (size_t i = 0; i < pl->n; i++) {
    pl->in_bytes += pl->items[i].in_bytes;
    pl->out_bytes += pl->items[i].out_bytes;
  }
  *out = pl;
  return MTPQ_OK;
fail:
  mtpq_plan_free(pl);
  return st;
}
