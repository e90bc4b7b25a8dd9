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

enum lin_fmt { LIN_BF16, LIN_FP8, LIN_NVFP4 };

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


#ifdef __cplusplus
}
#endif
#endif
