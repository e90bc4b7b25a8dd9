/* Sampling and the rejection step; see kernels/sample.h. */
#include "kernels/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

double mtpq_uniform(uint64_t *rng) { return (double)(next(rng) >> 11) * (1.0 / 9007199254740992.0); }

void mtpq_rng_seed(uint64_t *rng, uint64_t seed, uint64_t stream) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + stream * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL; /* splitmix64's finaliser: distinct, non-zero states */
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  *rng = (z ^ (z >> 31)) | 1;
}

/* keys: a probability's bits (>= 0: they order as the values) over the
 * complement of the id, so that descending keys are the most probable
 * first and, among equals, the lower id first */
static int by_key_desc(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int32_t key_id(uint64_t k) { return (int32_t)(0xFFFFFFFFu - (uint32_t)(k & 0xFFFFFFFFu)); }

void mtpq_sample_probs(const float *logits, int64_t V, const struct mtpq_sampling *s, float *probs, uint64_t *keys) {
  float mx = -INFINITY;
  for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
  double sum = 0;
  for (int64_t v = 0; v < V; v++) {
    probs[v] = logits[v] == -INFINITY ? 0.0f : expf((logits[v] - mx) / s->temperature);
    sum += probs[v];
  }
  for (int64_t v = 0; v < V; v++) probs[v] = (float)(probs[v] / sum);
  const int topk = s->top_k > 0 && s->top_k < V;
  const int topp = s->top_p > 0 && s->top_p < 1;
  if (!topk && !topp) return;
  /* Only the tokens at or above a threshold t are sorted: with t such that
   * they hold at least top_k tokens and at least top_p of the mass, the
   * top-k and top-p sets (ties included) lie among them, every other token
   * being less probable than each of them (a 151,936-token sort was most of
   * a sampled step's time). t is a power of two: one pass counts the tokens
   * and sums the mass by float exponent, and t is the largest exponent's
   * 2^e down to which both are reached. */
  int64_t cnt_e[256] = {0};
  double mass_e[256] = {0};
  for (int64_t v = 0; v < V; v++) {
    uint32_t b;
    memcpy(&b, &probs[v], 4);
    cnt_e[b >> 23 & 0xFF]++, mass_e[b >> 23 & 0xFF] += probs[v];
  }
  float thr = 0;
  int64_t cnt = 0;
  double mass = 0;
  for (int e = 255; e > 0; e--) {
    cnt += cnt_e[e], mass += mass_e[e];
    /* (a margin over top_p: the sums below run in other orders) */
    if (cnt && (!topk || cnt >= s->top_k) && (!topp || mass >= (double)s->top_p + 1e-6)) {
      const uint32_t b = (uint32_t)e << 23;
      memcpy(&thr, &b, 4);
      break;
    }
  }
  int64_t n = 0; /* the candidates, most probable first */
  for (int64_t v = 0; v < V; v++)
    if (probs[v] > 0 && probs[v] >= thr) {
      uint32_t b;
      memcpy(&b, &probs[v], 4);
      keys[n++] = (uint64_t)b << 32 | (0xFFFFFFFFu - (uint32_t)v);
    }
  qsort(keys, (size_t)n, sizeof *keys, by_key_desc);
  int64_t keep = n;
  if (topk && keep > s->top_k) { /* with the ties of the k-th */
    keep = s->top_k;
    while (keep < n && (keys[keep] >> 32) == (keys[s->top_k - 1] >> 32)) keep++;
  }
  if (topp) {                /* of the mass the top-k left */
    double tot = 0, acc = 0; /* the mass top-k kept, or all of it */
    if (topk)
      for (int64_t i = 0; i < keep; i++) tot += probs[key_id(keys[i])];
    else
      for (int64_t v = 0; v < V; v++) tot += probs[v];
    int64_t j = 0;
    while (j < keep && acc < (double)s->top_p * tot) acc += probs[key_id(keys[j++])];
    keep = j ? j : 1;
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; i++) kept += probs[key_id(keys[i])];
  for (int64_t i = keep; i < n; i++) probs[key_id(keys[i])] = 0.0f;
  for (int64_t v = 0; v < V; v++) /* below the threshold: out of both sets */
    if (probs[v] < thr) probs[v] = 0.0f;
  for (int64_t i = 0; i < keep; i++) probs[key_id(keys[i])] = (float)(probs[key_id(keys[i])] / kept);
}

int32_t mtpq_sample_draw(const float *probs, int64_t V, uint64_t *rng) {
  const double u = mtpq_uniform(rng);
  double acc = 0;
  int64_t last = -1;
  for (int64_t v = 0; v < V; v++) {
    if (probs[v] <= 0) continue;
    acc += probs[v], last = v;
    if (u < acc) return (int32_t)v;
  }
  return (int32_t)last; /* u beyond the rounded total: the last token with mass */
}

int mtpq_sample_reject(const float *p, const float *q, int64_t V, int32_t d, uint64_t *rng, int32_t *out) {
  const double u = mtpq_uniform(rng);
  if (q[d] > 0 && u * (double)q[d] < (double)p[d]) return 1; /* u < min(1, p/q) */
  double tot = 0;
  for (int64_t v = 0; v < V; v++) tot += p[v] > q[v] ? (double)p[v] - q[v] : 0.0;
  const double w = mtpq_uniform(rng) * tot;
  double acc = 0;
  int64_t last = -1;
  for (int64_t v = 0; v < V; v++) {
    if (p[v] <= q[v]) continue;
    acc += (double)p[v] - q[v], last = v;
    if (w < acc) {
      *out = (int32_t)v;
      return 0;
    }
  }
  /* nothing above q (p == q up to rounding): p itself */
  *out = last >= 0 ? (int32_t)last : mtpq_sample_draw(p, V, rng);
  return 0;
}
