/* CUDA backend of the sampler (internal to kernels/; reached through
 * mtpq_sampler_open with MTPQ_BACKEND_CUDA). Without a CUDA build the entry
 * points return MTPQ_E_NO_GPU (kernels/cuda_stub.c).
 *
 * The rows live in device memory; the kernels (kernels/cuda/sampler.cu)
 * compute the distributions, draws and rejection steps there from the
 * uniforms u the host hands them (the CPU reference's next ones, in its
 * order) and report how many they used. */
#ifndef MTPQ_KERNELS_SAMPLER_CUDA_H
#define MTPQ_KERNELS_SAMPLER_CUDA_H

#include <stdint.h>

#include "io/status.h"
#include "kernels/sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* uniforms a sequence's acceptance may use (k <= 7): a test a draft, the residual's
 * draw, and p's own draw where nothing of p lies above q */
#define MTPQ_CSAMPLE_MAX_U 10

/* the rows in device memory: *p nseq x rows target rows, *q nseq x qrows draft rows (sampler.c lays
 * them out; the kernels read them so: row r of sequence b at (b x rows + r) x V, (b x qrows + r) x V) */
enum mtpq_status mtpq__csample_open(int64_t V, int nseq, int rows, int64_t qrows, void **out, float **p, float **q,
                                    struct mtpq_err *err);
void mtpq__csample_close(void *c);
/* V floats between a row and host memory */
enum mtpq_status mtpq__csample_copy(float *row, float *host, int64_t V, int to_dev, struct mtpq_err *err);
enum mtpq_status mtpq__csample_draft(void *c, int b, int r, const struct mtpq_sampling *sp, double u, int32_t *tok,
                                     struct mtpq_err *err);
/* u: n x MTPQ_CSAMPLE_MAX_U uniforms; used[i]: how many of sequence i's it took */
enum mtpq_status mtpq__csample_accept(void *c, int n, const int *seq, const int *keff, const int32_t *const *d,
                                      const struct mtpq_sampling *sp, const double *u, int *acc, int32_t *next,
                                      int *used, struct mtpq_err *err);

#ifdef __cplusplus
}
#endif
#endif
