/* mtpq quantize: turn a target's MTP layer into an -mtpfp8 drafter repo.
 *
 * Recipe (every choice overridable through struct mtpq_drafter_params):
 *   MoE experts  mtp.layers.L.mlp.experts.E.{gate,up,down}_proj: NVFP4 per
 *                expert; gate and up share one amax (one weight_scale_2);
 *                fused Qwen3.5 experts (experts.gate_up_proj [E, 2I, H], gate
 *                rows first; experts.down_proj [E, H, I]) are written per
 *                expert. input_scale: the given value, else 2 x the largest
 *                expert input_scale of the target's last trunk layer that has
 *                them (separately for gate/up and for down), else refused.
 *   Draft linears mtp.fc, self_attn.{q,k,v,o}_proj, shared_expert.{gate,up,
 *                down}_proj, a dense mlp.{gate,up,down}_proj: FP8 E4M3 per
 *                tensor (weight_scale = amax/448) with a static input_scale
 *                (default 1.0, NVIDIA's calibration-free choice).
 *   Kept BF16    the router mlp.gate, mlp.shared_expert_gate, all norms.
 *   Draft head   mtp.draft_lm_head.weight: the rows of lm_head (or the tied
 *                embedding) for the ids of the vocabulary file, ascending,
 *                FP8 per tensor (+ weight_scale, input_scale).
 * The repo is built in a hidden temporary directory beside DIR and renamed
 * into place only when complete.
 */
#ifndef MTPQ_QUANT_DRAFTER_H
#define MTPQ_QUANT_DRAFTER_H

#include <stdint.h>

#include "quant/quant.h"

struct mtpq_drafter_params {
  const char *target;      /* local repo directory */
  const char *vocab_ids;   /* safetensors with one I64 tensor, ascending */
  const char *out;         /* output directory */
  double expert_input_scale; /* <= 0: derive from the target */
  double fp8_input_scale;    /* static input_scale of FP8 linears and the head */
  enum mtpq_arith arith;
  enum mtpq_format fp8_format;
  int use_gpu;
  int force;
  int threads;
  uint64_t max_shard_bytes; /* shard model.safetensors above this */
  /* the card's base_model and the manifest's revision: NULL for what the
   * target tells (mtpq_drafter_base_model) */
  const char *base_model, *revision;
  /* the card's evidence (quant/card.h; NULL: none): a bench-acceptance or
   * bench-decode --json report that measured this drafter's weights, and
   * the command line that made the repo */
  const char *acceptance, *command;
  /* the drafter's Hub id in the card's title and serve line (NULL: the
   * output directory's name; mtpq upload rewrites them to the repo it
   * publishes to, quant/card.h) */
  const char *repo_id;
};

/* The Hub id and revision a target directory stands for: base (given) when
 * not NULL; else ORG/NAME and the commit of a Hub cache snapshot
 * (.../models--ORG--NAME/snapshots/COMMIT, or mtpq's partial fetch
 * .../models--ORG--NAME/COMMIT-SELECTION); else the config.json's
 * _name_or_path when it has the ORG/NAME form; else the directory's name.
 * id and rev (rev "" when unknown) are written into the buffers. */
void mtpq_drafter_base_model(const char *target_dir, const char *base, char *id, size_t id_cap, char *rev,
                             size_t rev_cap);

struct mtpq_drafter_params mtpq_drafter_default_params(void);

/* What the recipe reads of a target with these tensor names (quant/
 * drafter_select.c): keep[i] = 1 for every mtp.*, the head (lm_head.* when
 * untied, the trunk's embed_tokens.* when tied; tied: the config's
 * tie_word_embeddings, -1 when it does not say) and the expert input_scales
 * of the last trunk layer that has them. For fetching from the Hub. */
void mtpq_drafter_select(int tied, const char *const *names, size_t n, unsigned char *keep);

enum mtpq_item_kind { MTPQ_ITEM_COPY, MTPQ_ITEM_FP8, MTPQ_ITEM_NVFP4, MTPQ_ITEM_HEAD };

/* One output module (or copied tensor) of the plan. */
struct mtpq_plan_item {
  char *name;              /* output tensor (COPY) or module prefix */
  enum mtpq_item_kind kind;
  const void *src;         /* BF16 rows (or whole tensor for COPY) */
  int64_t rows, cols;
  const char *src_name;    /* source tensor it comes from */
  int group;               /* NVFP4: items with the same group share amax */
  float input_scale;
  uint64_t in_bytes, out_bytes;
};

struct mtpq_plan {
  size_t n;
  struct mtpq_plan_item *items;
  char family[32];
  int experts, layers;
  int64_t hidden, head_rows, vocab_rows;
  const char *head_source;
  uint64_t in_bytes, out_bytes;
  double expert_input_scale_gate_up, expert_input_scale_down;
  const char *expert_input_scale_origin;
  void *priv; /* owned resources */
};

/* Open the target and the ids, and decide every output tensor. */
enum mtpq_status mtpq_drafter_plan(const struct mtpq_drafter_params *p, struct mtpq_plan **out,
                                   struct mtpq_err *err);
void mtpq_plan_free(struct mtpq_plan *plan);

typedef void (*mtpq_progress_fn)(void *ctx, size_t done, size_t total, const char *name);

/* Quantize and write the repo. */
enum mtpq_status mtpq_drafter_write(const struct mtpq_drafter_params *p, struct mtpq_plan *plan,
                                    mtpq_progress_fn progress, void *ctx, struct mtpq_err *err);

/* Whether out may be written: an empty path is refused (MTPQ_E_INVAL);
 * an existing one needs force (MTPQ_E_EXISTS), and even then only an
 * earlier mtpq output (a directory holding mtpq_manifest.json) or an empty
 * directory is replaced; a file or another non-empty directory is refused
 * (MTPQ_E_EXISTS), naming what it holds. mtpq_drafter_write checks this
 * first; callers check it before their work starts. */
enum mtpq_status mtpq_drafter_check_out(const char *out, int force, struct mtpq_err *err);

/* Ask a running mtpq_drafter_write to stop and remove its temporary
 * directory (async-signal-safe: sets a flag). */
void mtpq_request_cancel(void);

#endif
