/* The chi-square test's tail for the statistical tests (check_sample,
 * check_gpu_sample). */
#ifndef MTPQ_TESTS_CHI2_H
#define MTPQ_TESTS_CHI2_H

#include <math.h>
#include <stdint.h>

/* the upper tail of the chi-square distribution with df degrees of
 * freedom at x: Q(df/2, x/2), the regularised upper incomplete gamma
 * function (its series below a + 1, its continued fraction above) */
static inline double chi2_sf(double x, int df) {
  const double a = df / 2.0, z = x / 2.0;
  if (z <= 0) return 1.0;
  const double lg = lgamma(a);
  if (z < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && fabs(term) > 1e-15 * fabs(sum); n++) term *= z / (a + n), sum += term;
    return 1.0 - sum * exp(-z + a * log(z) - lg);
  }
  double b = z + 1 - a, c = 1e300, d = 1 / b, h = d; /* modified Lentz */
  for (int i = 1; i < 1000; i++) {
    const double an = -i * (i - a);
    b += 2, d = an * d + b, c = b + an / c;
    if (fabs(d) < 1e-300) d = 1e-300;
    if (fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-15) break;
  }
  return exp(-z + a * log(z) - lg) * h;
}

/* Pearson's test of observed counts obs[0, n) against expected counts
 * ex[0, n): the tokens expected at least 5 times a bin each, the rest
 * pooled into one; the statistic into *chi, the bins into *bins; returns
 * the p-value. */
static inline double chi2_test(const double *ex, const int64_t *obs, int64_t n, double *chi, int *bins) {
  double c = 0, rest_e = 0;
  int64_t rest_o = 0;
  int k = 0;
  for (int64_t v = 0; v < n; v++) {
    if (ex[v] >= 5)
      c += (obs[v] - ex[v]) * (obs[v] - ex[v]) / ex[v], k++;
    else
      rest_e += ex[v], rest_o += obs[v];
  }
  if (rest_e > 0) c += (rest_o - rest_e) * (rest_o - rest_e) / rest_e, k++;
  *chi = c, *bins = k;
  return k > 1 ? chi2_sf(c, k - 1) : 0.0;
}

#endif
