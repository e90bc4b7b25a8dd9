/* CUDA backend entry points of the drafter runtime (internal to kernels/;
 * reached through mtpq_session_* with MTPQ_BACKEND_CUDA). Without a CUDA
 * build they return MTPQ_E_NO_GPU (kernels/gpu_stub.c). */
#ifndef MTPQ_KERNELS_RUNTIME_CUDA_H
#define MTPQ_KERNELS_RUNTIME_CUDA_H

#include "kernels/rt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mtpq_status mtpq__cuda_session_open(const struct mtpq_rt_model *d, int64_t max_pos, int window, int nseq,
                                         void **out, struct mtpq_err *err);
void mtpq__cuda_select(void *g, int seq);
int mtpq__cuda_profile(void *g, int n, const char **names, double *us, int max, struct mtpq_err *err);
enum mtpq_status mtpq__cuda_draft(void *g, int n, const int32_t *tokens, const float *hidden,
                                  const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err);
/* the last draft call's device time, its first step's start to its last
 * step's end, in microseconds (-1: none yet) */
double mtpq__cuda_draft_device_us(void *g);
/* replace what is in L2 (bench-step: before each timed call) */
enum mtpq_status mtpq__cuda_flush_l2(void *g, struct mtpq_err *err);
void mtpq__cuda_session_close(void *g);
enum mtpq_status mtpq__cuda_step(void *g, int n, const int32_t *tokens, const void *hidden, int hidden_bf16,
                                 const int64_t *positions, float *out_hidden, struct mtpq_err *err);
/* device memory for the live loop's hand-over (NULL: none) */
void *mtpq__cuda_alloc(size_t bytes);
void mtpq__cuda_free(void *p);
enum mtpq_status mtpq__cuda_copy(void *dst, const void *src, size_t bytes, struct mtpq_err *err);
/* mtpq_session_step_at and mtpq_session_draft_at (kernels/runtime.h) */
enum mtpq_status mtpq__cuda_step_at(void *g, int n, const int32_t *tokens, const float *hidden, int bf16,
                                    const int64_t *positions, float *out_hidden, struct mtpq_err *err);
enum mtpq_status mtpq__cuda_draft_at(void *g, int n, const float *const *hidden, const int64_t *positions, int steps,
                                     int32_t *out_tokens, struct mtpq_err *err);
/* hidden: host or device memory; logits: host memory, or device memory when on_device (a sampler's row,
 * kernels/sampler.h) */
enum mtpq_status mtpq__cuda_head(void *g, const float *hidden, int32_t *tok, float *logits, int on_device,
                                 struct mtpq_err *err);

#ifdef __cplusplus
}
#endif
#endif
