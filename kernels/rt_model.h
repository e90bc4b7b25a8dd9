/* The loaded drafter model, shared by the CPU and CUDA backends (internal
 * to kernels/). Weight tensors point into the mapped repos. */
#ifndef MTPQ_KERNELS_RUNTIME_MODEL_H
#define MTPQ_KERNELS_RUNTIME_MODEL_H

#include <stdint.h>

#include "io/config.h"
#include "io/repo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LIN_F32: float32 weights (the target's CPU reference takes them, for
 * float32 reference checkpoints; the drafter and the CUDA backend do not) */
enum lin_fmt { LIN_BF16, LIN_FP8, LIN_NVFP4, LIN_F32 };

struct lin {
  enum lin_fmt f;
  int64_t rows, cols;
  const unsigned char *w;
  const unsigned char *scales; /* NVFP4 block scales */
  float s;                     /* FP8 weight_scale / NVFP4 weight_scale_2 */
};

struct mtpq_rt_model {
  struct mtpq_repo *target, *drafter;
  struct mtpq_model_config cfg;
  int64_t H, Nq, Nkv, D, E, topk, rot;
  float eps, theta;
  int norm_topk, moe;
  float *nrm[7]; /* pre_e, pre_h, in, post, q, k, final */
  struct lin fc, q, k, v, o, router, seg, sg, su, sd;
  struct lin *eg, *eu, *ed;
  const unsigned char *embed; /* BF16 [V, H] */
  int64_t embed_rows;
  struct lin head;
  int reduced;
  int64_t *ids, full_vocab;
};

/* A linear layer MOD ("MOD.weight" and its scale tensors) as src stores it:
 * BF16, FP8 per tensor (weight_scale F32), or NVFP4 (packed U8, E4M3
 * weight_scale per 16, weight_scale_2); anything else is refused naming it. */
enum mtpq_status mtpq__rt_load_lin(const struct mtpq_repo *src, const char *mod, struct lin *L, struct mtpq_err *err);
/* NAME (BF16 or F32, n values) as a malloc'd float array */
enum mtpq_status mtpq__rt_load_vec(const struct mtpq_repo *src, const char *name, int64_t n, float **out,
                                   struct mtpq_err *err);

#ifdef __cplusplus
}
#endif
#endif
