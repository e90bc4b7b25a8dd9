/* mtpq bench-step: time draft steps (drafter forward + head argmax, fed
 * back) for batches of 1..8 sequences at given contexts, stock vs mtpq
 * drafters side by side, against the memory-bound floor bytes / bandwidth. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "quant/gpu_quant.h"
#include "kernels/runtime.h"
#include "kernels/target.h"

const struct cli_opt bench_step_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (its mtp.* is the stock drafter; required)"},
    {"drafter", 0, OPT_STR, OPT_MULTI, "DIR", "an mtpq drafter repo to compare with stock (repeatable)"},
    {"context", 0, OPT_UINT, OPT_MULTI, "N", "cached positions before the timed step (repeatable; default 4096)"},
    {"batch", 'b', OPT_UINT, OPT_MULTI, "N", "sequences drafting together, 1..8 (repeatable; default 1)"},
    {"iters", 0, OPT_UINT, 0, "N", "timed draft calls per row (default 100)"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {"hbm-gbps", 0, OPT_REAL, 0, "X",
     "HBM read bandwidth for the floor and % columns (default: measured on the "
     "GPU; 4560 with the CPU backend)"},
    {"target-step-ms", 0, OPT_REAL, 0, "X", "target verify-step time for the decode tokens/s estimate"},
    {"mal", 0, OPT_REAL, 0, "X", "mean acceptance length for the estimate (from bench-acceptance)"},
    {"target-model", 0, OPT_STR, 0, "DIR|synthetic:NAME",
     "measure the target's verify step (k + 1 tokens at each "
     "context, batch 1) instead of --target-step-ms: a target "
     "repo or synthetic:qwen3-next-80b"},
    {"k", 'k', OPT_UINT, 0, "N", "draft steps per timed call and per round of the estimate (default 3)"},
    {"profile", 0, OPT_FLAG, 0, NULL, "CUDA: also print each kernel's time in one step (launched one by one)"},
    {"warm-l2", 0, OPT_FLAG, 0, NULL,
     "CUDA: start each timed call with what the call before left in L2 (default: "
     "flush L2 first, as the target's verify step between two calls does)"},
    {"json", 0, OPT_FLAG, 0, NULL, "print the results as JSON (rows, device, settings) instead of the table"},
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

/* Fill positions [0, ctx) of each of `batch` sequences with pseudo-random
 * tokens and hidden states, then time `iters` calls drafting k tokens for
 * all of them from position ctx (each call rewrites the same KV entries, so
 * the timed steps attend over ctx+1 .. ctx+k positions). Returns the median
 * seconds per draft step (call / k) and, on the CUDA backend, the median
 * device time per step (the call's steps alone, without staging its inputs,
 * copying the drafts back and the host's wait; -1 otherwise). */
static enum mtpq_status time_step(struct mtpq_rt_model *d, enum mtpq_backend be, int64_t ctx, int batch, int k,
                                  int iters, const char *label, int profile, int warm, double *median,
                                  double *dev_median, struct mtpq_err *err) {
  int64_t H = mtpq_rt_model_hidden(d), V = mtpq_rt_model_vocab(d);
  enum { CHUNK = 256 };
  struct mtpq_session *s = NULL;
  enum mtpq_status st = mtpq_session_open_batch(d, be, ctx + k, 0, batch, &s, err);
  if (st) return st;
  float *h = malloc((size_t)(CHUNK * H) * sizeof *h), *out = malloc((size_t)(CHUNK * H) * sizeof *out);
  double *t = malloc((size_t)iters * sizeof *t), *dv = malloc((size_t)iters * sizeof *dv);
  int32_t *drafted = malloc((size_t)(k * batch) * sizeof *drafted);
  if (!h || !out || !t || !dv || !drafted) st = mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int32_t tok[CHUNK];
  int64_t pos[CHUNK];
  for (int q = 0; q < batch && !st; q++) {
    st = mtpq_session_select(s, q, err);
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
  }
  int64_t p[MTPQ_MAX_SEQS];
  for (int q = 0; q < batch; q++) tok[q] = (int32_t)q, p[q] = ctx;
  for (int i = -5; i < iters && !st; i++) { /* 5 untimed warm-up calls */
    if (!warm && (st = mtpq_session_flush_l2(s, err)) != MTPQ_OK) break;
    double t0 = cli_now_s();
    st = mtpq_session_draft(s, batch, tok, h, p, k, drafted, err);
    if (i >= 0) t[i] = (cli_now_s() - t0) / k, dv[i] = mtpq_session_draft_device_us(s) * 1e-6 / k;
  }
  if (!st) *median = cli_median(t, iters), *dev_median = dv[0] > 0 ? cli_median(dv, iters) : -1;
  if (!st && profile) {
    const char *names[64];
    double us[64], tot = 0;
    int nk = mtpq_session_profile(s, batch, names, us, 64, err);
    if (nk < 0) st = MTPQ_E_GPU;
    for (int i = 0; i < nk; i++) tot += us[i];
    if (nk > 0) printf("profile: %s, context %lld, batch %d: one step launched kernel by kernel, %.1f us\n", label,
                       (long long)ctx, batch, tot);
    for (int i = 0; i < nk; i++) printf("  %-32s %9.1f us\n", names[i], us[i]);
  }
  free(h);
  free(out);
  free(t);
  free(dv);
  free(drafted);
  mtpq_session_close(s);
  return st;
}

#define MAX_ROWS 9
#define MAX_CTX 8
#define MAX_BATCH 4 /* --batch values */

int cmd_bench_step(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-step";
  if (cli_parse(cmd, bench_step_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *target = cli_str(bench_step_opts, &a, "target");
  if (!target || a.npos) return cli_usage_error(cmd, "--target is required");
  int idr = cli_opt_index(bench_step_opts, "drafter"), ic = cli_opt_index(bench_step_opts, "context"),
      ib = cli_opt_index(bench_step_opts, "batch");
  if (a.set[idr] + 1 > MAX_ROWS) return cli_usage_error(cmd, "at most %d drafters", MAX_ROWS - 1);
  if (a.set[ic] > MAX_CTX) return cli_usage_error(cmd, "at most %d --context values", MAX_CTX);
  if (a.set[ib] > MAX_BATCH) return cli_usage_error(cmd, "at most %d --batch values", MAX_BATCH);
  int nctx = a.set[ic] ? a.set[ic] : 1, nbat = a.set[ib] ? a.set[ib] : 1;
  int64_t ctxs[MAX_CTX] = {4096};
  int bats[MAX_BATCH] = {1};
  for (int i = 0; i < a.set[ic]; i++) ctxs[i] = (int64_t)strtoull(a.multi[ic][i], NULL, 10);
  for (int i = 0; i < a.set[ib]; i++) {
    bats[i] = (int)strtoul(a.multi[ib][i], NULL, 10);
    if (bats[i] < 1 || bats[i] > MTPQ_MAX_SEQS) return cli_usage_error(cmd, "--batch must be 1..%d", MTPQ_MAX_SEQS);
  }
  int iters = (int)cli_uint(bench_step_opts, &a, "iters", 100), k = (int)cli_uint(bench_step_opts, &a, "k", 3);
  if (iters < 1 || iters > 100000) return cli_usage_error(cmd, "--iters must be 1..100000");
  if (k < 1 || k > MTPQ_MAX_DRAFT_STEPS) return cli_usage_error(cmd, "-k must be 1..%d", MTPQ_MAX_DRAFT_STEPS);
  const char *hb = cli_str(bench_step_opts, &a, "hbm-gbps"), *ts = cli_str(bench_step_opts, &a, "target-step-ms"),
             *ms = cli_str(bench_step_opts, &a, "mal");
  double hbm = hb ? strtod(hb, NULL) : 0, tstep = ts ? strtod(ts, NULL) : 0, malv = ms ? strtod(ms, NULL) : 0;
  if (hb && !(hbm > 0)) return cli_usage_error(cmd, "--hbm-gbps must be positive");
  const char *tm = cli_str(bench_step_opts, &a, "target-model");
  if (tm && ts) return cli_usage_error(cmd, "--target-model measures what --target-step-ms gives: one of them");
  if ((ts != NULL || tm != NULL) != (ms != NULL))
    return cli_usage_error(cmd, "--mal goes with --target-step-ms or --target-model");
  if (cli_has(bench_step_opts, &a, "json") && cli_has(bench_step_opts, &a, "profile"))
    return cli_usage_error(cmd, "--profile prints a text table: not with --json");
  enum mtpq_backend be;
  int rc = cli_backend(cmd, cli_str(bench_step_opts, &a, "backend"), &be);
  if (rc) return rc;
  struct mtpq_err err = {0};
  const char *hsrc = "--hbm-gbps";
  if (!hb && be == MTPQ_BACKEND_CUDA) {
    enum mtpq_status st = mtpq_gpu_read_gbps(&hbm, &err);
    if (st) return cli_fail(st, &err);
    hsrc = "measured";
  } else if (!hb) {
    hbm = 4560.0, hsrc = "default";
  }
  int nr = 1 + a.set[idr];
  const int json = cli_has(bench_step_opts, &a, "json"), warm = cli_has(bench_step_opts, &a, "warm-l2");
  char settings[512] = "";
  if (be == MTPQ_BACKEND_CUDA) {
    enum mtpq_status sst = mtpq_cuda_settings(settings, sizeof settings, &err);
    if (sst) return cli_fail(sst, &err);
    if (cli_verbosity >= 2) cli_note("CUDA settings: %s", settings);
  }
  cJSON *jo = NULL, *jrows = NULL;
  if (json) {
    jo = cJSON_CreateObject();
    cJSON_AddStringToObject(jo, "command", "bench-step");
    cJSON_AddStringToObject(jo, "version", MTPQ_VERSION);
    cJSON_AddStringToObject(jo, "backend", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(jo, "device", be == MTPQ_BACKEND_CUDA ? mtpq_gpu_name() : "");
    cJSON_AddStringToObject(jo, "cuda_settings", settings);
    cJSON_AddNumberToObject(jo, "hbm_gbps", hbm);
    cJSON_AddStringToObject(jo, "hbm_source", hsrc);
    cJSON_AddNumberToObject(jo, "iters", iters);
    cJSON_AddNumberToObject(jo, "k", k);
    cJSON_AddStringToObject(jo, "l2", be != MTPQ_BACKEND_CUDA ? "-" : warm ? "warm" : "flushed");
    cJSON_AddStringToObject(jo, "target", target);
    jrows = cJSON_AddArrayToObject(jo, "rows");
  } else {
  printf("bench-step: %s backend%s%s, median of %d calls of %d draft steps (drafter forward + head argmax, fed back), "
         "HBM read %.0f GB/s (%s)%s\n", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu", be == MTPQ_BACKEND_CUDA ? " on " : "",
         be == MTPQ_BACKEND_CUDA ? mtpq_gpu_name() : "", iters, k, hbm, hsrc,
         be != MTPQ_BACKEND_CUDA ? "" : cli_has(bench_step_opts, &a, "warm-l2") ? ", L2 as the call before left it"
                                                                            : ", L2 flushed before each call");
  printf("%-30s %7s %5s %9s %9s %8s %6s %9s %7s %8s %10s %9s %7s\n", "drafter", "context", "batch", "us/step",
         "MB read", "GB/s", "% HBM", "floor us", "x floor", "speedup", "drafts/s", "dev us", "dev x");
  fflush(stdout);
  }
  /* --target-model: the target's verify step of k + 1 tokens at each context, measured once per context */
  struct mtpq_target *tgt = NULL;
  struct mtpq_target_seq *tsq = NULL;
  if (tm) {
    int64_t most = 0;
    for (int c = 0; c < nctx; c++) most = ctxs[c] > most ? ctxs[c] : most;
    const char *syn = strncmp(tm, "synthetic:", 10) ? NULL : tm + 10, *cfg = syn ? mtpq_target_synth_config(syn) : NULL;
    enum mtpq_status st = syn && !cfg ? mtpq_err_set(&err, MTPQ_E_INVAL, "--target-model: no shape named '%s'", syn)
                          : syn       ? mtpq_target_synth(cfg, MTPQ_SYNTH_NVIDIA, 1, &tgt, &err)
                                      : mtpq_target_open(tm, &tgt, &err);
    if (!st) st = mtpq_target_seq_open(tgt, be, most + k + 2, k + 1 > 8 ? k + 1 : 8, &tsq, &err);
    if (st) {
      mtpq_target_close(tgt);
      cJSON_Delete(jo);
      return cli_fail(st, &err);
    }
  }
  /* row by row, printed as measured (a long run shows its progress) */
  for (int c = 0; c < nctx; c++) {
    if (tsq) { /* the median of 20 verify steps (device time on CUDA, wall on the CPU) */
      double v[20];
      int32_t toks[MTPQ_MAX_DRAFT_STEPS + 1] = {0}, am[MTPQ_MAX_DRAFT_STEPS + 1];
      enum mtpq_status st = MTPQ_OK;
      for (int i = -2; i < 20 && !st; i++) {
        st = mtpq_target_seq_jump(tsq, ctxs[c], &err);
        double t0 = cli_now_s();
        if (!st) st = mtpq_target_verify(tsq, k + 1, toks, NULL, am, &err);
        const double dev = mtpq_target_seq_last_us(tsq);
        if (i >= 0) v[i] = dev > 0 ? dev / 1e3 : (cli_now_s() - t0) * 1e3;
      }
      if (st) {
        mtpq_target_seq_close(tsq), mtpq_target_close(tgt);
        cJSON_Delete(jo);
        return cli_fail(st, &err);
      }
      tstep = cli_median(v, 20), ts = "measured";
      if (!json)
        printf("target verify step (%d tokens, context %lld, %s): %.3f ms\n", k + 1, (long long)ctxs[c], tm, tstep);
    }
    for (int b = 0; b < nbat; b++) {
      double stock = 0;
      for (int d = 0; d < nr; d++) {
        struct mtpq_rt_model *dr = NULL;
        const char *name = d ? a.multi[idr][d - 1] : "stock (target mtp.*)";
        double sv = 0, dsv = -1;
        int64_t by = 0;
        enum mtpq_status st = mtpq_rt_model_open(target, d ? a.multi[idr][d - 1] : NULL, &dr, &err);
        if (!st) { /* the k timed steps attend over ctx+1 .. ctx+k positions: their mean */
          by = mtpq_rt_model_step_bytes_batch(dr, ctxs[c] + (k + 1) / 2, 2, bats[b]);
          st = time_step(dr, be, ctxs[c], bats[b], k, iters, d ? name : "stock", cli_has(bench_step_opts, &a, "profile"),
                         warm, &sv, &dsv, &err);
        }
        mtpq_rt_model_close(dr);
        if (st) {
          mtpq_target_seq_close(tsq), mtpq_target_close(tgt);
          cJSON_Delete(jo);
          return cli_fail(st, &err);
        }
        if (d == 0) stock = sv;
        double us = sv * 1e6, gbs = (double)by / sv / 1e9, floor = (double)by / (hbm * 1e3);
        if (json) {
          cJSON *r = cJSON_CreateObject();
          cJSON_AddStringToObject(r, "drafter", d ? name : target);
          cJSON_AddStringToObject(r, "kind", d ? "drafter" : "stock");
          cJSON_AddNumberToObject(r, "context", (double)ctxs[c]);
          cJSON_AddNumberToObject(r, "batch", bats[b]);
          cJSON_AddNumberToObject(r, "us_per_step", us);
          cJSON_AddNumberToObject(r, "bytes", (double)by);
          cJSON_AddNumberToObject(r, "gbps", gbs);
          cJSON_AddNumberToObject(r, "pct_hbm", 100.0 * gbs / hbm);
          cJSON_AddNumberToObject(r, "floor_us", floor);
          cJSON_AddNumberToObject(r, "x_floor", us / floor);
          cJSON_AddNumberToObject(r, "speedup", stock / sv);
          cJSON_AddNumberToObject(r, "drafts_per_s", bats[b] / sv);
          cJSON_AddNumberToObject(r, "dev_us", dsv > 0 ? dsv * 1e6 : -1);
          cJSON_AddNumberToObject(r, "dev_x_floor", dsv > 0 ? dsv * 1e6 / floor : -1);
          if (ts) cJSON_AddNumberToObject(r, "est_tokens_per_s", malv * 1e3 / (tstep + k * us / 1e3));
          if (ts) cJSON_AddNumberToObject(r, "target_step_ms", tstep);
          cJSON_AddItemToArray(jrows, r);
          continue;
        }
        printf("%-30.30s %7lld %5d %9.1f %9.2f %8.1f %5.1f%% %9.1f %7.2f %7.2fx %10.0f", name, (long long)ctxs[c],
               bats[b], us, (double)by / 1e6, gbs, 100.0 * gbs / hbm, floor, us / floor, stock / sv, bats[b] / sv);
        if (dsv > 0) printf(" %9.1f %7.2f\n", dsv * 1e6, dsv * 1e6 / floor);
        else printf(" %9s %7s\n", "-", "-");
        if (ts) /* one round: k draft steps, then one target verify step, yielding MAL tokens per sequence */
          printf("%-30s %7s %5s est. decode %.1f tokens/s per sequence = MAL %.3f / (%.3f ms + %d x %.4f ms)\n", "",
                 "", "", malv * 1e3 / (tstep + k * us / 1e3), malv, tstep, k, us / 1e3);
        fflush(stdout);
      }
    }
  }
  mtpq_target_seq_close(tsq);
  mtpq_target_close(tgt);
  if (json) {
    char *t = cJSON_Print(jo);
    puts(t);
    free(t);
    cJSON_Delete(jo);
    return 0;
  }
  if (tm && nbat > 1)
    printf("(the measured target step is batch 1's: the estimate's rows of larger batches use it as it is)\n");
  printf("bytes = dense linears + head once, plus per sequence: top-k experts, one embedding row, BF16 K/V of "
         "the positions attended; floor = bytes / HBM; x floor = us / floor; speedup = stock us / this us; drafts/s = "
         "batch / step; us/step = a call's wall time / k; dev us = its k steps' device time / k (CUDA: events around "
         "the steps, without staging the inputs, copying the drafts back and the host's wait), dev x = dev us / "
         "floor\n");
  return 0;
}
