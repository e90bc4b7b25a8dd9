/* Bytes one batch-1 draft step must read: the memory-bound floor of the
 * step is this count over the HBM read bandwidth (issue 7). Counted from the
 * loaded tensors so it follows whatever formats the repo holds. */
#include "kernels/runtime.h"
#include "kernels/rt_model.h"

static int64_t lin_bytes(const struct lin *L) {
  if (!L->w) return 0;
  int64_t n = L->rows * L->cols;
  switch (L->f) {
  case LIN_BF16: return 2 * n;
  case LIN_FP8: return n + 4;
  case LIN_NVFP4: return n / 2 + n / 16 + 4; /* E2M1 pairs + E4M3 scale per 16 + scale_2 */
  case LIN_F32: return 4 * n;
  }
  return 0;
}

int64_t mtpq_rt_model_step_bytes(const struct mtpq_rt_model *d, int64_t context, int kv_elem_bytes) {
  return mtpq_rt_model_step_bytes_batch(d, context, kv_elem_bytes, 1);
}

int64_t mtpq_rt_model_step_bytes_batch(const struct mtpq_rt_model *d, int64_t context, int kv_elem_bytes, int batch) {
  int64_t b = 0; /* read once for the batch: norm weights (a few KB) are left out */
  const struct lin *dense[] = {&d->fc, &d->q, &d->k, &d->v, &d->o, &d->router, &d->seg, &d->sg, &d->su, &d->sd};
  for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) b += lin_bytes(dense[i]);
  b += lin_bytes(&d->head);
  int64_t per = 2 * d->H; /* per sequence: one embedding row */
  if (d->moe && d->eg) /* routing reads top-k experts; all experts have one shape */
    per += d->topk * (lin_bytes(&d->eg[0]) + lin_bytes(&d->eu[0]) + lin_bytes(&d->ed[0]));
  per += context * 2 * d->Nkv * d->D * kv_elem_bytes; /* K and V of every cached position */
  return b + (int64_t)batch * per;
}
