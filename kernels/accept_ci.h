/* 95% intervals of acceptance metrics by the percentile bootstrap over
 * units (traces in bench-acceptance, prompts in bench-decode).
 *
 * Rounds of one trace are not independent (an easy passage accepts run
 * after run), so intervals that treat rounds as samples are too narrow; the
 * unit of resampling is the trace. A resample draws n units with
 * replacement and sums their counts; the metric is computed from the sums
 * (a ratio estimate, as the point estimate is). Paired: a second drafter's
 * units are resampled with the same draws (the same traces or prompts), so
 * the interval of the difference is free of the traces' own spread. The
 * draws come from a fixed seed: the same input, the same interval.
 */
#ifndef MTPQ_KERNELS_ACCEPT_CI_H
#define MTPQ_KERNELS_ACCEPT_CI_H

#include <stddef.h>
#include <stdint.h>

#include "io/status.h"
#include "kernels/replay.h"

#define MTPQ_BOOTSTRAP_ITERS 2000

struct mtpq_accept_ci {
  int k;
  size_t units;
  double mal, mal_ci[2]; /* point estimate and [lo, hi] */
  double perpos[MTPQ_MAX_K], perpos_ci[MTPQ_MAX_K][2];
  int paired;              /* the fields below are set */
  double dmal, dmal_ci[2]; /* this - base */
  double dperpos[MTPQ_MAX_K], dperpos_ci[MTPQ_MAX_K][2];
};

/* Units u[sel[0..n)] (sel NULL: u[0..n)), each one trace's or prompt's
 * counts; base (may be NULL): the reference drafter's counts of the same
 * units, index for index. iters resamples (<= 0: MTPQ_BOOTSTRAP_ITERS).
 * With fewer than 2 units the intervals are the point estimate itself. */
enum mtpq_status mtpq_accept_bootstrap(const struct mtpq_accept_stats *u, const struct mtpq_accept_stats *base,
                                       const int *sel, size_t n, int iters, struct mtpq_accept_ci *ci,
                                       struct mtpq_err *err);

#endif
