/* Checkpoint description from config + tensor names; see io/model.h. */
#include "io/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const PFX_MM = "model.language_model.";
static const char *const PFX_TXT = "model.";

const char *mtpq_family_name(enum mtpq_family f) {
  switch (f) {
  case MTPQ_FAMILY_QWEN3_NEXT: return "qwen3_next";
  case MTPQ_FAMILY_QWEN3_5: return "qwen3_5";
  case MTPQ_FAMILY_QWEN3_5_MOE: return "qwen3_5_moe";
  default: return "unknown";
  }
}

const char *mtpq_expert_layout_name(enum mtpq_expert_layout l) {
  switch (l) {
  case MTPQ_EXPERTS_PER_EXPERT: return "per-expert";
  case MTPQ_EXPERTS_FUSED: return "fused";
  default: return "none";
  }
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Parse a decimal index at s followed by '.'; -1 if none. */
static long index_at(const char *s) {
  long v = 0;
  const char *p = s;
  if (*p < '0' || *p > '9') return -1;
  while (*p >= '0' && *p <= '9') {
    v = v * 10 + (*p - '0');
    if (v > 100000000) return -1;
    p++;
  }
  return *p == '.' ? v : -1;
}

/* The distinct indices seen (layers, experts): a bitmap with room for
 * 8192, on the stack, so describing never allocates and never fails
 * (checkpoints have at most a few hundred of either; larger indices are not
 * counted). */
#define IDX_MAX 8192
struct idxset {
  unsigned char seen[IDX_MAX / 8];
  int count;
};

static void idx_add(struct idxset *s, long v) {
  if (v < 0 || v >= IDX_MAX) return;
  const unsigned char bit = (unsigned char)(1u << (v & 7));
  if (!(s->seen[v >> 3] & bit)) {
    s->seen[v >> 3] |= bit;
    s->count++;
  }
}

static enum mtpq_family family_from_type(const char *mt) {
  if (strcmp(mt, "qwen3_next") == 0) return MTPQ_FAMILY_QWEN3_NEXT;
  if (strcmp(mt, "qwen3_5") == 0 || strcmp(mt, "qwen3_5_text") == 0) return MTPQ_FAMILY_QWEN3_5;
  if (strcmp(mt, "qwen3_5_moe") == 0 || strcmp(mt, "qwen3_5_moe_text") == 0)
    return MTPQ_FAMILY_QWEN3_5_MOE;
  return MTPQ_FAMILY_UNKNOWN;
}

void mtpq_model_describe(const struct mtpq_repo *r, const struct mtpq_model_config *cfg,
                         struct mtpq_model_desc *d) {
  memset(d, 0, sizeof *d);
  struct idxset trunk = {0}, mtp = {0}, experts = {0};
  int any_trunk_experts = 0;
  d->multimodal = mtpq_repo_find(r, "model.language_model.embed_tokens.weight") != NULL;
  for (size_t i = 0; i < mtpq_repo_count(r) && !d->multimodal; i++)
    if (starts_with(mtpq_repo_at(r, i)->name, PFX_MM)) d->multimodal = 1;
  d->trunk_prefix = d->multimodal ? PFX_MM : PFX_TXT;
  size_t tl = strlen(d->trunk_prefix);

  for (size_t i = 0; i < mtpq_repo_count(r); i++) {
    const struct mtpq_tensor *t = mtpq_repo_at(r, i);
    const char *n = t->name;
    if (starts_with(n, d->trunk_prefix) && starts_with(n + tl, "layers.")) {
      long L = index_at(n + tl + 7);
      idx_add(&trunk, L);
      if (strstr(n, ".mlp.experts.")) any_trunk_experts = 1;
    } else if (starts_with(n, "mtp.")) {
      d->mtp_tensors++;
      d->mtp_bytes += t->nbytes;
      if (starts_with(n, "mtp.layers.")) {
        long L = index_at(n + 11);
        idx_add(&mtp, L);
        if (L == 0) {
          const char *e = strstr(n, ".mlp.experts.");
          if (e) {
            e += strlen(".mlp.experts.");
            long E = index_at(e);
            if (E >= 0) {
              idx_add(&experts, E);
              d->expert_layout = MTPQ_EXPERTS_PER_EXPERT;
            } else if (strcmp(e, "gate_up_proj") == 0 && t->rank == 3) {
              d->expert_layout = MTPQ_EXPERTS_FUSED;
              d->mtp_experts = (int)t->shape[0];
            }
          }
        }
      }
    }
  }
  d->trunk_layers = trunk.count;
  d->mtp_layers = mtp.count;
  if (d->expert_layout == MTPQ_EXPERTS_PER_EXPERT) d->mtp_experts = experts.count;

  if (cfg && cfg->model_type[0]) d->family = family_from_type(cfg->model_type);
  if (d->family == MTPQ_FAMILY_UNKNOWN && (d->trunk_layers || d->mtp_layers)) {
    int moe = any_trunk_experts || d->mtp_experts > 0;
    if (d->multimodal) d->family = moe ? MTPQ_FAMILY_QWEN3_5_MOE : MTPQ_FAMILY_QWEN3_5;
    else if (moe) d->family = MTPQ_FAMILY_QWEN3_NEXT;
  }

  char name[128];
  snprintf(name, sizeof name, "%sembed_tokens.weight", d->trunk_prefix);
  d->embed = mtpq_repo_find(r, name);
  const struct mtpq_tensor *head = mtpq_repo_find(r, "lm_head.weight");
  if (cfg && cfg->tie_word_embeddings == 1) d->tied = 1;
  else if (cfg && cfg->tie_word_embeddings == 0) d->tied = 0;
  else d->tied = head == NULL && d->embed != NULL;
  d->lm_head = d->tied ? d->embed : head;
}
