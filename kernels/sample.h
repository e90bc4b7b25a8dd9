/* Sampling for the live loop (../shared/docs/speculative-decoding.md):
 * the sampling distribution of a position's logits as vLLM's sampler makes
 * it (temperature, then top-k and top-p), draws from it, and the rejection
 * step of speculative sampling (Leviathan et al.; Chen et al.): a draft d
 * drawn from q is accepted with probability min(1, p(d) / q(d)), and on
 * rejection the token is drawn from max(0, p - q) normalised, so that the
 * emitted token is distributed as p whatever q is. */
#ifndef MTPQ_KERNELS_SAMPLE_H
#define MTPQ_KERNELS_SAMPLE_H

#include <stdint.h>

struct mtpq_sampling {
  float temperature; /* > 0 (0: greedy, which the sampler does not handle) */
  float top_p;       /* (0, 1]; 1: off */
  int top_k;         /* 0: off */
  uint64_t seed;
};

/* a uniform double in [0, 1) from the state (xorshift64*, 53 bits) */
double mtpq_uniform(uint64_t *rng);
void mtpq_rng_seed(uint64_t *rng, uint64_t seed, uint64_t stream);

/* probs[V] of logits[V] (-inf: never): softmax(logits / temperature), then
 * top-k (the tokens whose probability is at least the k-th largest's) and
 * top-p (the most probable tokens, in decreasing order, until their mass
 * reaches top_p; the rest zero), renormalised; ties in order to the lower
 * id. keys: V words of scratch (used only with top-k or top-p). */
void mtpq_sample_probs(const float *logits, int64_t V, const struct mtpq_sampling *s, float *probs, uint64_t *keys);
/* a token drawn from probs[V] (inverse CDF; mass 1 up to rounding) */
int32_t mtpq_sample_draw(const float *probs, int64_t V, uint64_t *rng);
/* The rejection step for draft d (drawn from q): 1 if accepted; else 0
 * with *out drawn from max(0, p - q) normalised. */
int mtpq_sample_reject(const float *p, const float *q, int64_t V, int32_t d, uint64_t *rng, int32_t *out);

#endif
