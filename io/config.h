/* config.json of a Qwen3-Next / Qwen3.5 checkpoint.
 *
 * Sizes are read from `text_config` when present (Qwen3.5 multimodal
 * configs nest the language model there), else from the top level. RoPE is
 * read from top-level `rope_theta` / `partial_rotary_factor` (released
 * Qwen3-Next configs) or from transformers-5 `rope_parameters` (either at the
 * top level or in text_config); the first found wins in that order.
 */
#ifndef MTPQ_IO_CONFIG_H
#define MTPQ_IO_CONFIG_H

#include <stdint.h>

#include "io/status.h"

#define MTPQ_MAX_LAYERS 256

struct mtpq_model_config {
  char model_type[64];     /* top-level model_type ("qwen3_next", "qwen3_5_moe") */
  char architecture[128];  /* architectures[0], "" if absent */
  int64_t hidden_size;
  int64_t num_attention_heads;
  int64_t num_key_value_heads;
  int64_t head_dim;        /* hidden_size / heads when absent */
  int64_t num_hidden_layers;
  int64_t vocab_size;
  int64_t intermediate_size;              /* 0 if absent */
  int64_t moe_intermediate_size;          /* 0 if absent */
  int64_t shared_expert_intermediate_size;
  int64_t num_experts;                    /* 0 for dense models */
  int64_t num_experts_per_tok;
  int64_t mtp_num_hidden_layers;          /* 0 if absent */
  double rms_norm_eps;
  double rope_theta;
  double partial_rotary_factor;           /* 0.25 when absent (transformers default) */
  int tie_word_embeddings;                /* 0/1; -1 when absent */
  int norm_topk_prob;                     /* defaults to 1, as vLLM */
  /* the hybrid stack (target-architecture.md 1): layer_types[i] 'A' full
   * attention, 'L' linear attention (Gated DeltaNet), from the config's
   * layer_types list, else from full_attention_interval (layer i is full
   * attention when (i + 1) % interval == 0), else all 'A' */
  char layer_types[MTPQ_MAX_LAYERS + 1];
  int64_t full_attention_interval;                      /* 0 if absent */
  int64_t linear_num_key_heads, linear_num_value_heads; /* GDN sizes; 0 if absent */
  int64_t linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
  void *json;  /* the parsed document (cJSON *), owned */
};

/* Parse a config.json file. Required: hidden_size, num_attention_heads,
 * vocab_size, rms_norm_eps. Free with mtpq_config_free(). */
enum mtpq_status mtpq_config_load(const char *path, struct mtpq_model_config *cfg,
                                  struct mtpq_err *err);
/* DIR/config.json when the file exists (*found = 1), else nothing loaded
 * and *found = 0; a file that exists but does not parse is an error. */
enum mtpq_status mtpq_config_load_dir(const char *dir, struct mtpq_model_config *cfg, int *found,
                                      struct mtpq_err *err);
/* Same, from a string (label names it in messages). */
enum mtpq_status mtpq_config_parse(const char *text, size_t len, const char *label,
                                   struct mtpq_model_config *cfg, struct mtpq_err *err);
void mtpq_config_free(struct mtpq_model_config *cfg); /* NULL-safe */

#endif
