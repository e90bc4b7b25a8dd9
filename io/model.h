/* What a checkpoint is: family, trunk prefix, MTP layer layout, LM head.
 *
 * Family comes from config.json's model_type when a config is given
 * (qwen3_next; qwen3_5 / qwen3_5_text -> dense Qwen3.5; qwen3_5_moe /
 * qwen3_5_moe_text -> Qwen3.5-MoE), else from the tensor names. The MTP
 * layout is always read from the tensors: layers are the distinct N of
 * `mtp.layers.N.`; experts are per-expert (`mlp.experts.E.gate_proj.weight`)
 * or fused (`mlp.experts.gate_up_proj` [E, 2I, H], no `.weight` suffix).
 */
#ifndef MTPQ_IO_MODEL_H
#define MTPQ_IO_MODEL_H

#include "io/config.h"
#include "io/repo.h"

enum mtpq_family {
  MTPQ_FAMILY_UNKNOWN,
  MTPQ_FAMILY_QWEN3_NEXT,
  MTPQ_FAMILY_QWEN3_5,     /* dense */
  MTPQ_FAMILY_QWEN3_5_MOE,
};

enum mtpq_expert_layout {
  MTPQ_EXPERTS_NONE,       /* dense MLP or no MTP */
  MTPQ_EXPERTS_PER_EXPERT,
  MTPQ_EXPERTS_FUSED,
};

struct mtpq_model_desc {
  enum mtpq_family family;
  int multimodal;             /* trunk under model.language_model. */
  const char *trunk_prefix;   /* "model." or "model.language_model." (static) */
  int trunk_layers;           /* distinct N of <trunk>layers.N. */
  int mtp_layers;             /* distinct N of mtp.layers.N. */
  int mtp_experts;            /* experts of mtp.layers.0 (0 if dense/none) */
  enum mtpq_expert_layout expert_layout;
  size_t mtp_tensors;
  uint64_t mtp_bytes;
  int tied;                   /* LM head is the embedding */
  const struct mtpq_tensor *embed;   /* NULL if absent */
  const struct mtpq_tensor *lm_head; /* the head actually used (embed if tied) */
};

/* Describe repo r; cfg may be NULL. Never fails on a valid repo: missing
 * parts are reported as zero/NULL fields. */
void mtpq_model_describe(const struct mtpq_repo *r, const struct mtpq_model_config *cfg,
                         struct mtpq_model_desc *d);

/* "qwen3_next", "qwen3_5", "qwen3_5_moe" or "unknown". */
const char *mtpq_family_name(enum mtpq_family f);
/* "none", "per-expert", "fused". */
const char *mtpq_expert_layout_name(enum mtpq_expert_layout l);

#endif
