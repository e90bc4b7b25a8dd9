/* Percentile bootstrap of acceptance metrics; see kernels/accept_ci.h. */
#include "kernels/accept_ci.h"

#include <stdlib.h>
#include <string.h>

/* splitmix64: a small, seedable stream; the draws need no more */
static uint64_t next64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* [lo, hi]: the 2.5% and 97.5% points of v (sorted here) */
static void percentiles(double *v, int m, double out[2]) {
  qsort(v, (size_t)m, sizeof *v, cmp_double);
  int lo = (int)(0.025 * m), hi = (int)(0.975 * m) - 1;
  if (hi < lo) hi = lo;
  out[0] = v[lo], out[1] = v[hi];
}

/* metrics[0] = MAL, metrics[1 + i] = per-position rate i */
static void metrics(const struct mtpq_accept_stats *s, int k, double *m) {
  m[0] = mtpq_accept_mal(s);
  for (int i = 0; i < k; i++) m[1 + i] = mtpq_accept_perpos(s, i);
}

enum mtpq_status mtpq_accept_bootstrap(const struct mtpq_accept_stats *u, const struct mtpq_accept_stats *base,
                                       const int *sel, size_t n, int iters, struct mtpq_accept_ci *ci,
                                       struct mtpq_err *err) {
  memset(ci, 0, sizeof *ci);
  if (iters <= 0) iters = MTPQ_BOOTSTRAP_ITERS;
  struct mtpq_accept_stats sum = {0}, bsum = {0};
  int k = 0;
  for (size_t j = 0; j < n; j++) {
    const size_t i = sel ? (size_t)sel[j] : j;
    if (u[i].k > k) k = u[i].k;
    mtpq_accept_add(&sum, &u[i]);
    if (base) mtpq_accept_add(&bsum, &base[i]);
  }
  if (k > MTPQ_MAX_K) k = MTPQ_MAX_K;
  sum.k = bsum.k = k;
  ci->k = k, ci->units = n, ci->paired = base != NULL;
  const int M = 1 + k; /* metrics a drafter */
  double pt[1 + MTPQ_MAX_K], bpt[1 + MTPQ_MAX_K];
  metrics(&sum, k, pt);
  metrics(&bsum, k, bpt);
  ci->mal = pt[0];
  for (int i = 0; i < k; i++) ci->perpos[i] = pt[1 + i];
  if (base) {
    ci->dmal = pt[0] - bpt[0];
    for (int i = 0; i < k; i++) ci->dperpos[i] = pt[1 + i] - bpt[1 + i];
  }
  if (n < 2) { /* nothing to resample: the point itself */
    ci->mal_ci[0] = ci->mal_ci[1] = ci->mal, ci->dmal_ci[0] = ci->dmal_ci[1] = ci->dmal;
    for (int i = 0; i < k; i++) {
      ci->perpos_ci[i][0] = ci->perpos_ci[i][1] = ci->perpos[i];
      ci->dperpos_ci[i][0] = ci->dperpos_ci[i][1] = ci->dperpos[i];
    }
    return MTPQ_OK;
  }
  /* draws[m * iters + r]: metric m of resample r (then the differences) */
  double *v = malloc((size_t)(2 * M) * (size_t)iters * sizeof *v);
  if (!v) return mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory (bootstrap of %zu units)", n);
  uint64_t rng = 0x6d747071u; /* "mtpq": fixed, so a report is reproducible */
  for (int r = 0; r < iters; r++) {
    struct mtpq_accept_stats a = {0}, b = {0};
    for (size_t j = 0; j < n; j++) {
      const size_t pick = (size_t)(next64(&rng) % n), i = sel ? (size_t)sel[pick] : pick;
      mtpq_accept_add(&a, &u[i]);
      if (base) mtpq_accept_add(&b, &base[i]);
    }
    a.k = b.k = k;
    double x[1 + MTPQ_MAX_K], y[1 + MTPQ_MAX_K];
    metrics(&a, k, x);
    if (base) metrics(&b, k, y);
    for (int m = 0; m < M; m++) {
      v[(size_t)m * (size_t)iters + (size_t)r] = x[m];
      if (base) v[(size_t)(M + m) * (size_t)iters + (size_t)r] = x[m] - y[m];
    }
  }
  percentiles(v, iters, ci->mal_ci);
  for (int i = 0; i < k; i++) percentiles(v + (size_t)(1 + i) * (size_t)iters, iters, ci->perpos_ci[i]);
  if (base) {
    percentiles(v + (size_t)M * (size_t)iters, iters, ci->dmal_ci);
    for (int i = 0; i < k; i++) percentiles(v + (size_t)(M + 1 + i) * (size_t)iters, iters, ci->dperpos_ci[i]);
  }
  free(v);
  return MTPQ_OK;
}
