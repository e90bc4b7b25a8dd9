/* The sampled loop's distributions where its logits are made (issue 49):
 * the rows a target verify and a drafter head write, their sampling
 * distributions (kernels/sample.h: temperature, top-k, top-p), the draws
 * and the rejection step, in the memory of the backend that made them:
 * host memory and kernels/sample.c on the CPU backend; device memory and
 * kernels/cuda/sampler.cu on the CUDA backend, so that a sampled round
 * moves a few tokens between host and device instead of distributions
 * over the vocabulary (151,936 floats each on Qwen3-Next).
 *
 * Random numbers: both backends draw from the caller's stream (struct
 * mtpq_sampling's seed, kernels/sample.h) in the order the CPU reference
 * draws them: the CUDA backend is handed the uniforms the reference would
 * draw next, reports how many it used, and the stream advances by that
 * many. On the same logits both emit the same tokens up to the float
 * rounding of the distributions (sums in other orders).
 *
 * Ownership: a sampler holds nseq x rows target rows and nseq x (rows - 1)
 * draft rows of V floats, and its scratch; one thread at a time. */
#ifndef MTPQ_KERNELS_SAMPLER_H
#define MTPQ_KERNELS_SAMPLER_H

#include <stdint.h>

#include "io/status.h"
#include "kernels/replay.h"  /* MTPQ_MAX_K */
#include "kernels/runtime.h" /* enum mtpq_backend, MTPQ_MAX_SEQS */
#include "kernels/sample.h"

struct mtpq_sampler;

/* rows: the positions a verify has (k + 1; 1 without speculation): 1 ..
 * MTPQ_MAX_K + 1 on the CPU, 1 .. 8 on the CUDA backend */
enum mtpq_status mtpq_sampler_open(enum mtpq_backend be, int64_t V, int nseq, int rows, struct mtpq_sampler **out,
                                   struct mtpq_err *err);
void mtpq_sampler_close(struct mtpq_sampler *m); /* NULL-safe */

/* Sequence b's target row r (0 .. rows - 1) and draft row r (0 .. rows -
 * 2), V floats where the backend keeps data: hand them to
 * mtpq_target_verify_many as its logits and to mtpq_session_head_at. */
float *mtpq_sampler_p(struct mtpq_sampler *m, int b, int r);
float *mtpq_sampler_q(struct mtpq_sampler *m, int b, int r);

/* Sequence b's row r (q: a draft row) to or from host memory, V floats
 * (tests and diagnosis). */
enum mtpq_status mtpq_sampler_row_copy(struct mtpq_sampler *m, int b, int r, int q, float *host, int to_sampler,
                                       struct mtpq_err *err);

/* Draft r of sequence b: its draft row turned from logits into the
 * sampling distribution q (in place, mtpq_sample_probs) and a token drawn
 * from it (mtpq_sample_draw: one uniform). */
enum mtpq_status mtpq_sampler_draft(struct mtpq_sampler *m, int b, int r, const struct mtpq_sampling *sp, uint64_t *rng,
                                    int32_t *tok, struct mtpq_err *err);

/* One round's acceptance for n distinct sequences seq[i]: target rows 0 ..
 * keff[i] hold the verify's logits (turned into p in place), draft rows 0
 * .. keff[i] - 1 the q of drafts d[i][0 ..] (d may be NULL where every
 * keff[i] is 0). Draft j is accepted with
 * probability min(1, p(d)/q(d)); the first rejected one is replaced by a
 * draw from max(0, p - q) normalised; when all are accepted a bonus token
 * is drawn from row keff[i] (keff[i] = 0: the target's own draw). Into
 * acc[i] the drafts accepted, next[i] the token after them; rng[i]
 * advanced as mtpq_sample_reject and mtpq_sample_draw advance it. The CPU
 * backend runs the sequences on threads of their own (the first inline). */
enum mtpq_status mtpq_sampler_accept(struct mtpq_sampler *m, int n, const int *seq, const int *keff,
                                     const int32_t *const *d, const struct mtpq_sampling *sp, uint64_t *const *rng,
                                     int *acc, int32_t *next, struct mtpq_err *err);

#endif
