/* mtpq bench-step: time one batch-1 draft step (drafter forward + head
 * argmax) at a given context, stock vs mtpq drafters side by side, against
 * the memory-bound floor bytes / bandwidth. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kernels/gpu_quant.h"
#include "kernels/runtime.h"

const struct cli_opt bench_step_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (its mtp.* is the stock drafter; required)"},
    {"drafter", 0, OPT_STR, OPT_MULTI, "DIR", "an mtpq drafter repo to compare with stock (repeatable)"},
    {"context", 0, OPT_UINT, OPT_MULTI, "N", "cached positions before the timed step (repeatable; default 4096)"},
    {"iters", 0, OPT_UINT, 0, "N", "timed steps per row (default 100)"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {"hbm-gbps", 0, OPT_REAL, 0, "X", "HBM read bandwidth for the % column (default 4560, the H200 here)"},
    {"target-step-ms", 0, OPT_REAL, 0, "X", "target verify-step time for the decode tokens/s estimate"},
    {"mal", 0, OPT_REAL, 0, "X", "mean acceptance length for the estimate (from bench-acceptance)"},
    {"k", 'k', OPT_UINT, 0, "N", "draft tokens per round for the estimate (default 3)"},
    {NULL, 0, 0, 0, NULL, NULL},
};

int cli_backend(const char *cmd, const char *name, enum mtpq_backend *be) {
  struct mtpq_err err = {0};
  if (!name || strcmp(name, "auto") == 0) {
    *be = mtpq_gpu_available(&err) ? MTPQ_BACKEND_CUDA : MTPQ_BACKEND_CPU;
    return 0;
  }
  if (strcmp(name, "cpu") == 0) {
    *be = MTPQ_BACKEND_CPU;
    return 0;
  }
  if (strcmp(name, "cuda") == 0) {
    if (!mtpq_gpu_available(&err)) {
      cli_error("%s: --backend cuda: %s", cmd, err.msg);
      return MTPQ_EXIT_GPU;
    }
    *be = MTPQ_BACKEND_CUDA;
    return 0;
  }
  return cli_usage_error(cmd, "--backend must be auto, cpu or cuda, not '%s'", name);
}

/* Fill positions [0, ctx) with pseudo-random tokens and hidden states, then
 * time `iters` steps at position ctx (each rewrites that KV entry, so every
 * timed step attends over ctx + 1 positions). Returns the median seconds. */
static enum mtpq_status time_step(struct mtpq_drafter *d, enum mtpq_backend be, int64_t ctx, int iters,
                                  double *median, struct mtpq_err *err) {
  int64_t H = mtpq_drafter_hidden(d), V = mtpq_drafter_vocab(d);
  enum { CHUNK = 256 };
  struct mtpq_session *s = NULL;
  enum mtpq_status st = mtpq_session_open(d, be, ctx + 1, 0, &s, err);
  if (st) return st;
  float *h = malloc((size_t)(CHUNK * H) * sizeof *h), *out = malloc((size_t)(CHUNK * H) * sizeof *out);
  double *t = malloc((size_t)iters * sizeof *t);
  if (!h || !out || !t) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int32_t tok[CHUNK];
  int64_t pos[CHUNK];
  for (int64_t p0 = 0; p0 < ctx && !st; p0 += CHUNK) {
    int n = (int)(ctx - p0 < CHUNK ? ctx - p0 : CHUNK);
    for (int i = 0; i < n; i++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      tok[i] = (int32_t)((rng >> 33) % (uint64_t)V);
      pos[i] = p0 + i;
      for (int64_t j = 0; j < H; j++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        h[i * H + j] = (float)((double)(rng >> 40) / (double)(1 << 24) - 0.5);
      }
    }
    st = mtpq_session_step(s, n, tok, h, 0, pos, out, err);
  }
  int32_t next = 0;
  int64_t p = ctx;
  for (int i = -5; i < iters && !st; i++) { /* 5 untimed warm-up steps */
    double t0 = cli_now_s();
    st = mtpq_session_step(s, 1, &next, h, 0, &p, out, err);
    if (!st) mtpq_session_head(s, out, &next, NULL);
    if (i >= 0) t[i] = cli_now_s() - t0;
  }
  if (!st) {
    *median = cli_median(t, iters);
  }
  free(h);
  free(out);
  free(t);
  mtpq_session_close(s);
  return st;
}

#define MAX_ROWS 9
#define MAX_CTX 8

int cmd_bench_step(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-step";
  if (cli_parse(cmd, bench_step_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *target = cli_str(bench_step_opts, &a, "target");
  if (!target || a.npos) return cli_usage_error(cmd, "--target is required");
  int idr = cli_opt_index(bench_step_opts, "drafter"), ic = cli_opt_index(bench_step_opts, "context");
  if (a.set[idr] + 1 > MAX_ROWS) return cli_usage_error(cmd, "at most %d drafters", MAX_ROWS - 1);
  if (a.set[ic] > MAX_CTX) return cli_usage_error(cmd, "at most %d --context values", MAX_CTX);
  int nctx = a.set[ic] ? a.set[ic] : 1;
  int64_t ctxs[MAX_CTX] = {4096};
  for (int i = 0; i < a.set[ic]; i++) ctxs[i] = (int64_t)strtoull(a.multi[ic][i], NULL, 10);
  int iters = (int)cli_uint(bench_step_opts, &a, "iters", 100), k = (int)cli_uint(bench_step_opts, &a, "k", 3);
  if (iters < 1 || iters > 100000) return cli_usage_error(cmd, "--iters must be 1..100000");
  const char *hb = cli_str(bench_step_opts, &a, "hbm-gbps"), *ts = cli_str(bench_step_opts, &a, "target-step-ms"),
             *ms = cli_str(bench_step_opts, &a, "mal");
  double hbm = hb ? strtod(hb, NULL) : 4560.0, tstep = ts ? strtod(ts, NULL) : 0, malv = ms ? strtod(ms, NULL) : 0;
  if (!(hbm > 0)) return cli_usage_error(cmd, "--hbm-gbps must be positive");
  if ((ts != NULL) != (ms != NULL)) return cli_usage_error(cmd, "--target-step-ms and --mal go together");
  enum mtpq_backend be;
  int rc = cli_backend(cmd, cli_str(bench_step_opts, &a, "backend"), &be);
  if (rc) return rc;
  int nr = 1 + a.set[idr];
  static double sec[MAX_ROWS][MAX_CTX];
  static int64_t bytes[MAX_ROWS][MAX_CTX];
  struct mtpq_err err = {0};
  for (int d = 0; d < nr; d++) {
    struct mtpq_drafter *dr = NULL;
    enum mtpq_status st = mtpq_drafter_open(target, d ? a.multi[idr][d - 1] : NULL, &dr, &err);
    for (int c = 0; c < nctx && !st; c++) {
      bytes[d][c] = mtpq_drafter_step_bytes(dr, ctxs[c] + 1, 4);
      st = time_step(dr, be, ctxs[c], iters, &sec[d][c], &err);
    }
    mtpq_drafter_close(dr);
    if (st) return cli_fail(st, &err);
  }
  printf("bench-step: batch 1, %s backend, median of %d steps (drafter forward + head argmax), HBM %.0f GB/s\n",
         be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu", iters, hbm);
  printf("%-34s %7s %10s %10s %9s %7s %10s %8s\n", "drafter", "context", "us/step", "MB read", "GB/s", "% HBM",
         "floor us", "speedup");
  for (int c = 0; c < nctx; c++)
    for (int d = 0; d < nr; d++) {
      double us = sec[d][c] * 1e6, gbs = (double)bytes[d][c] / sec[d][c] / 1e9;
      printf("%-34.34s %7lld %10.1f %10.2f %9.1f %6.1f%% %10.1f %7.2fx\n",
             d ? a.multi[idr][d - 1] : "stock (target mtp.*)", (long long)ctxs[c], us, (double)bytes[d][c] / 1e6, gbs,
             100.0 * gbs / hbm, (double)bytes[d][c] / (hbm * 1e3), sec[0][c] / sec[d][c]);
      if (ts) /* one round: k draft steps, then one target verify step, yielding MAL tokens */
        printf("%-34s %7s est. decode %.1f tokens/s = MAL %.3f / (%.3f ms + %d x %.3f ms)\n", "", "",
               malv * 1e3 / (tstep + k * us / 1e3), malv, tstep, k, us / 1e3);
    }
  printf("bytes = dense linears + top-k experts + head + one embedding row + float32 K/V of context+1 positions; "
         "floor = bytes / HBM; speedup = stock us / this us\n");
  return 0;
}
