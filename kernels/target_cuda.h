/* CUDA backend of the target model (internal to kernels/; reached through
 * mtpq_target_seq_open with MTPQ_BACKEND_CUDA). Without a CUDA build the
 * entry points return MTPQ_E_NO_GPU (kernels/cuda_stub.c).
 *
 * The device copy of a target (weights as stored: BF16, FP8 per tensor,
 * NVFP4) is made once per target; a sequence holds its BF16 K/V caches and
 * nbuf slots of GDN state (conv and fp32 recurrent) on the device. A forward
 * of T (1..MTPQ_TCUDA_MAX_T) tokens at positions pos0.. reads the GDN state
 * of slot cur and writes token i's state into slot (cur + 1 + i) % nbuf, as
 * the CPU reference's verify does. */
#ifndef MTPQ_KERNELS_TARGET_CUDA_H
#define MTPQ_KERNELS_TARGET_CUDA_H

#include <stdint.h>

#include "io/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mtpq_target;

#define MTPQ_TCUDA_MAX_T 8

/* the device copy of t, into t->gpu (once) */
enum mtpq_status mtpq__tcuda_load(struct mtpq_target *t, struct mtpq_err *err);
void mtpq__tcuda_free(struct mtpq_target *t);
enum mtpq_status mtpq__tcuda_seq_open(struct mtpq_target *t, int64_t max_pos, int nbuf, void **out,
                                      struct mtpq_err *err);
void mtpq__tcuda_seq_close(void *s);
/* head: 0 none (prefill chunks), 1 argmax, 2 argmax and logits [T][V] */
enum mtpq_status mtpq__tcuda_forward(void *s, int T, const int32_t *tokens, int64_t pos0, int cur, int head,
                                     float *hidden, float *logits, int32_t *argmax, struct mtpq_err *err);
/* One forward of Tn tokens of each of n sequences of one target (n Tn <=
 * MTPQ_TCUDA_MAX_T; each product reads its weights once for all of them):
 * sequence b's tokens[b] at positions pos0[b].., from its slot cur[b], as
 * mtpq__tcuda_forward would run them alone; hidden[b] [Tn][H], logits[b]
 * [Tn][V], argmax[b] [Tn] (arrays or entries may be NULL). */
enum mtpq_status mtpq__tcuda_forward_many(void *const *s, int n, int Tn, const int32_t *const *tokens,
                                          const int64_t *pos0, const int *cur, int head, float *const *hidden,
                                          float *const *logits, int32_t *const *argmax, struct mtpq_err *err);
/* A prompt chunk of n (1..MTPQ_TCUDA_PREFILL) tokens at positions pos0..
 * through the trunk with its products as GEMMs (kernels/cuda/prefill.cuh):
 * the GDN state read from slot cur, the state after the last token into
 * slot (cur + 1) % nbuf (no other slot is written), the K/V cache at the
 * chunk's positions, the final-norm hidden states into hidden [n][H] (may
 * be NULL); no head. */
#define MTPQ_TCUDA_PREFILL 4096
enum mtpq_status mtpq__tcuda_prefill(void *s, int n, const int32_t *tokens, int64_t pos0, int cur, float *hidden,
                                     struct mtpq_err *err);
/* the GDN state of a linear-attention layer in slot: conv [conv_dim][K - 1], rec [HV][dk][dv] (host copies) */
enum mtpq_status mtpq__tcuda_seq_gdn(void *s, int layer, int slot, float *conv, float *rec, struct mtpq_err *err);
/* the last forward again, each kernel alone between two events: up to max
 * kernel names (borrowed) and their microseconds summed over the layers;
 * the count, or -1 with err */
int mtpq__tcuda_profile(void *s, int T, const char **names, double *us, int max, struct mtpq_err *err);
/* the last forward's device time in microseconds (CUDA events around its graph), -1 before any */
double mtpq__tcuda_last_us(void *s);

#ifdef __cplusplus
}
#endif
#endif
