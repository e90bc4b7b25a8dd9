/* Internal state shared by quant/drafter*.c (not public API). */
#ifndef MTPQ_QUANT_DRAFTER_PRIV_H
#define MTPQ_QUANT_DRAFTER_PRIV_H

#include "io/config.h"
#include "io/repo.h"
#include "quant/drafter.h"

struct drafter_priv {
  struct mtpq_repo *target;
  struct mtpq_model_config cfg;
  int have_cfg;
  int64_t *ids;     /* the draft vocabulary, ascending */
  size_t n_ids;
  uint16_t *head;   /* gathered BF16 rows [n_ids, H] */
};

/* Read and check the ids file; gather the head rows. */
enum mtpq_status mtpq__drafter_load_ids(const struct mtpq_drafter_params *p, struct drafter_priv *pv,
                                        const struct mtpq_tensor *head, struct mtpq_err *err);

/* Write config.json, hf_quant_config.json, the model card and copies of the
 * target's generation/tokenizer files into dir. */
enum mtpq_status mtpq__drafter_meta(const struct mtpq_drafter_params *p, const struct mtpq_plan *pl,
                                    const char *dir, struct mtpq_err *err);

/* 1 when a cancel was requested (SIGINT/SIGTERM in the CLI). */
int mtpq__cancelled(void);

#endif
