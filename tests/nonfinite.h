/* The non-finite logit tests' pokes into a synthetic target: check_target
 * runs them on the CPU backend, check_gpu_target on the CUDA one (the CUDA
 * backend uploads the weights at its first sequence, so poke before). Include
 * after <check.h>, <math.h>, <string.h> and kernels/target_model.h. */
#ifndef MTPQ_TESTS_NONFINITE_H
#define MTPQ_TESTS_NONFINITE_H

#include <stdint.h>

/* case k: 0 and 1 put NaN and inf in the final norm's weight ((1 + w) x: then
 * in every logit); 2 and 3 make one head row's logit NaN, row mid through a
 * +NaN BF16 weight and row 1 through a -NaN one, in a copy of the BF16 head
 * in head (n halves, the head's whole size) */
static void nonfinite_poke(struct mtpq_target *t, int k, int64_t mid, uint16_t *head, int64_t n) {
  if (k < 2) {
    t->final_norm[5] = k ? INFINITY : NAN;
    return;
  }
  ck_assert(t->head.f == LIN_BF16 && t->head.rows * t->head.cols == n);
  memcpy(head, t->head.w, (size_t)n * sizeof *head);
  head[(k == 2 ? mid : 1) * t->head.cols + 9] = k == 2 ? 0x7FC0 : 0xFFC0;
  t->head.w = (const unsigned char *)head;
}

#endif
