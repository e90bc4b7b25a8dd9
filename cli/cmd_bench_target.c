/* mtpq bench-target: the target model's decode step (one token), verify
 * steps (T tokens in one forward) at given contexts and the prefill rate of
 * a prompt, against the floor bytes / HBM bandwidth; a real target or a
 * synthetic one made in memory (kernels/target_synth.c). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kernels/runtime.h"
#include "kernels/target.h"
#include "quant/gpu_quant.h"

const struct cli_opt bench_target_opts[] = {
    {"target", 0, OPT_STR, 0, "DIR", "target repo (config.json and safetensors)"},
    {"synthetic", 0, OPT_STR, 0, "NAME", "a target with random weights instead: qwen3-next-80b"},
    {"formats", 0, OPT_STR, 0, "nvidia|fp8|bf16",
     "the synthetic target's weight formats (default nvidia: "
     "NVIDIA's NVFP4 layout)"},
    {"context", 0, OPT_UINT, OPT_MULTI, "N",
     "cached positions before the timed steps (repeatable; default 4096 "
     "and 32768)"},
    {"verify", 0, OPT_UINT, OPT_MULTI, "T", "verify steps of T tokens, 2..8 (repeatable; default 2 and 4)"},
    {"prefill", 0, OPT_UINT, 0, "N", "prompt tokens of the prefill timing (default 4096; 0: none)"},
    {"iters", 0, OPT_UINT, 0, "N", "timed steps per row (default 20)"},
    {"backend", 0, OPT_STR, 0, "auto|cpu|cuda", "runtime backend (default auto: cuda when a GPU is present)"},
    {"hbm-gbps", 0, OPT_REAL, 0, "X", "HBM read bandwidth for the floor (default: measured on the GPU)"},
    {"profile", 0, OPT_FLAG, 0, NULL,
     "CUDA: also each kernel family's time in one decode and one verify step "
     "(kernels launched one by one, summed over the layers)"},
    {"json", 0, OPT_FLAG, 0, NULL, "print the results as JSON"},
    {NULL, 0, 0, 0, NULL, NULL},
};

/* median device and wall microseconds of iters forwards of T tokens at context ctx */
static enum mtpq_status time_rows(struct mtpq_target_seq *s, int64_t ctx, int T, int iters, double *dev_us,
                                  double *wall_us, struct mtpq_err *err) {
  double *d = calloc((size_t)iters, sizeof *d), *w = calloc((size_t)iters, sizeof *w);
  int32_t tok[8] = {11, 12, 13, 14, 15, 16, 17, 18}, am[8];
  enum mtpq_status st = d && w ? MTPQ_OK : mtpq_err_set(err, MTPQ_E_NOMEM, "out of memory");
  for (int i = -2; i < iters && !st; i++) { /* two untimed: graph capture, warm-up */
    st = mtpq_target_seq_jump(s, ctx, err);
    double t0 = cli_now_s();
    if (!st)
      st = T == 1 ? mtpq_target_step(s, tok[0], NULL, NULL, am, err) : mtpq_target_verify(s, T, tok, NULL, am, err);
    if (!st && i >= 0) w[i] = (cli_now_s() - t0) * 1e6, d[i] = mtpq_target_seq_last_us(s);
  }
  if (!st) {
    *dev_us = cli_median(d, iters), *wall_us = cli_median(w, iters);
  }
  free(d), free(w);
  return st;
}

int cmd_bench_target(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-target";
  if (cli_parse(cmd, bench_target_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  const char *dir = cli_str(bench_target_opts, &a, "target"), *syn = cli_str(bench_target_opts, &a, "synthetic");
  if ((!dir) == (!syn) || a.npos) return cli_usage_error(cmd, "one of --target or --synthetic is required");
  const char *cfg = syn ? mtpq_target_synth_config(syn) : NULL;
  if (syn && !cfg) return cli_usage_error(cmd, "--synthetic: no shape named '%s' (qwen3-next-80b)", syn);
  const char *fs = cli_str(bench_target_opts, &a, "formats");
  enum mtpq_synth_formats f = MTPQ_SYNTH_NVIDIA;
  if (fs && !strcmp(fs, "bf16"))
    f = MTPQ_SYNTH_BF16;
  else if (fs && !strcmp(fs, "fp8"))
    f = MTPQ_SYNTH_FP8;
  else if (fs && strcmp(fs, "nvidia"))
    return cli_usage_error(cmd, "--formats must be nvidia, fp8 or bf16");
  enum mtpq_backend be;
  int rc = cli_backend(cmd, cli_str(bench_target_opts, &a, "backend"), &be);
  if (rc) return rc;
  const int ic = cli_opt_index(bench_target_opts, "context"), iv = cli_opt_index(bench_target_opts, "verify");
  int64_t ctxs[16] = {4096, 32768};
  int nctx = a.set[ic] ? a.set[ic] : 2, Ts[9] = {1, 2, 4}, nT = a.set[iv] ? 1 + a.set[iv] : 3;
  if (nctx > 16 || nT > 9) return cli_usage_error(cmd, "at most 16 --context and 8 --verify values");
  for (int i = 0; i < a.set[ic]; i++) {
    char *end;
    ctxs[i] = strtoll(a.multi[ic][i], &end, 10);
    if (*end || ctxs[i] < 0 || ctxs[i] > 1 << 20) return cli_usage_error(cmd, "--context must be 0..1048576");
  }
  for (int i = 0; i < a.set[iv]; i++) {
    Ts[1 + i] = atoi(a.multi[iv][i]);
    if (Ts[1 + i] < 2 || Ts[1 + i] > 8) return cli_usage_error(cmd, "--verify must be 2..8");
  }
  const int iters = (int)cli_uint(bench_target_opts, &a, "iters", 20);
  const int64_t prefill = (int64_t)cli_uint(bench_target_opts, &a, "prefill", 4096);
  if (iters < 1 || iters > 100000) return cli_usage_error(cmd, "--iters must be 1..100000");
  struct mtpq_err err = {0};
  double hbm = 0;
  const char *hb = cli_str(bench_target_opts, &a, "hbm-gbps");
  if (hb)
    hbm = atof(hb);
  else if (be == MTPQ_BACKEND_CUDA && mtpq_gpu_read_gbps(&hbm, &err))
    return cli_fail(MTPQ_E_GPU, &err);
  struct mtpq_target *t = NULL;
  double t0 = cli_now_s();
  enum mtpq_status st = syn ? mtpq_target_synth(cfg, f, 1, &t, &err) : mtpq_target_open(dir, &t, &err);
  if (st) return cli_fail(st, &err);
  int64_t most = 0;
  for (int i = 0; i < nctx; i++) most = ctxs[i] > most ? ctxs[i] : most;
  struct mtpq_target_seq *s = NULL;
  st = mtpq_target_seq_open(t, be, (most > prefill ? most : prefill) + 16, 8, &s, &err);
  const double load_s = cli_now_s() - t0;
  cJSON *jo = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(jo, "rows");
  cJSON_AddStringToObject(jo, "target", syn ? syn : dir);
  if (syn) cJSON_AddStringToObject(jo, "formats", fs ? fs : "nvidia");
  cJSON_AddStringToObject(jo, "backend", be == MTPQ_BACKEND_CUDA ? "cuda" : "cpu");
  cJSON_AddStringToObject(jo, "device", be == MTPQ_BACKEND_CUDA ? mtpq_gpu_name() : "");
  cJSON_AddNumberToObject(jo, "hbm_gbps", hbm);
  const int json = cli_has(bench_target_opts, &a, "json");
  if (!json && !st) {
    printf("bench-target: %s%s%s, %s backend%s%s, median of %d steps (load + upload %.1f s)\n", syn ? "synthetic " : "",
           syn ? syn : dir,
           syn ? (f == MTPQ_SYNTH_NVIDIA ? " (NVIDIA NVFP4 layout)"
                  : f == MTPQ_SYNTH_FP8  ? " (FP8)"
                                         : " (BF16)")
               : "",
           be == MTPQ_BACKEND_CUDA ? "CUDA" : "CPU", be == MTPQ_BACKEND_CUDA ? ", " : "",
           be == MTPQ_BACKEND_CUDA ? mtpq_gpu_name() : "", iters, load_s);
    printf("%8s %-10s %10s %10s %9s %8s %6s %9s %7s\n", "context", "step", "dev us", "call us", "MB read", "GB/s",
           "%HBM", "floor us", "x floor");
  }
  double decode_us = 0;
  for (int c = 0; c < nctx && !st; c++)
    for (int i = 0; i < nT && !st; i++) {
      double dus = 0, wus = 0;
      st = time_rows(s, ctxs[c], Ts[i], iters, &dus, &wus, &err);
      if (st) break;
      const double us = dus > 0 ? dus : wus, bytes = (double)mtpq_target_step_bytes(t, ctxs[c], Ts[i], 1);
      const double gbs = bytes / us * 1e-3, floor_us = hbm > 0 ? bytes / hbm * 1e-3 : 0;
      if (Ts[i] == 1) decode_us = us;
      cJSON *r = cJSON_CreateObject();
      cJSON_AddNumberToObject(r, "context", (double)ctxs[c]);
      cJSON_AddNumberToObject(r, "tokens", Ts[i]);
      cJSON_AddNumberToObject(r, "device_us", dus);
      cJSON_AddNumberToObject(r, "call_us", wus);
      cJSON_AddNumberToObject(r, "bytes", bytes);
      cJSON_AddNumberToObject(r, "gbps", gbs);
      cJSON_AddNumberToObject(r, "floor_us", floor_us);
      if (Ts[i] > 1) cJSON_AddNumberToObject(r, "x_decode", us / decode_us);
      cJSON_AddItemToArray(rows, r);
      if (!json) {
        char name[16];
        snprintf(name, sizeof name, Ts[i] == 1 ? "decode" : "verify T=%d", Ts[i]);
        printf("%8lld %-10s %10.1f %10.1f %9.1f %8.0f %6.1f %9.1f %7.2f\n", (long long)ctxs[c], name, dus, wus,
               bytes / 1e6, gbs, hbm > 0 ? 100.0 * gbs / hbm : 0.0, floor_us, floor_us > 0 ? us / floor_us : 0.0);
      }
      if (cli_has(bench_target_opts, &a, "profile") && be == MTPQ_BACKEND_CUDA) {
        const char *names[64];
        double kus[64], tot = 0;
        const int nk = mtpq_target_seq_profile(s, Ts[i], names, kus, 64, &err);
        cJSON *pr = cJSON_AddObjectToObject(r, "profile_us");
        for (int k = 0; k < nk; k++) tot += kus[k], cJSON_AddNumberToObject(pr, names[k], kus[k]);
        for (int k = 0; k < nk && !json; k++)
          printf("    %-28s %9.1f us %5.1f%%\n", names[k], kus[k], 100.0 * kus[k] / tot);
        if (!json && nk > 0) printf("    %-28s %9.1f us (kernels launched one by one)\n", "sum", tot);
      }
    }
  if (!st && prefill > 0) { /* the prompt's prefill (no head), twice: the first also makes the workspace */
    int32_t *tok = malloc((size_t)prefill * sizeof *tok);
    if (!tok) st = mtpq_err_set(&err, MTPQ_E_NOMEM, "out of memory");
    /* a prompt of ids spread over the vocabulary (Knuth's multiplicative hash), so the routed experts see a
       spread of inputs as with text; a few repeated ids would send most rows to a few experts */
    const uint64_t V = (uint64_t)mtpq_target_vocab(t);
    for (int64_t p = 0; !st && p < prefill; p++) tok[p] = (int32_t)(1 + ((uint64_t)p * 2654435761u) % (V - 1));
    double sec[2] = {0, 0};
    for (int r = 0; r < 2 && !st; r++) {
      st = mtpq_target_seq_jump(s, 0, &err);
      const double p0 = cli_now_s();
      if (!st) st = mtpq_target_prefill(s, prefill, tok, NULL, &err);
      sec[r] = cli_now_s() - p0;
    }
    free(tok);
    if (!st) {
      cJSON_AddNumberToObject(jo, "prefill_tokens", (double)prefill);
      cJSON_AddNumberToObject(jo, "prefill_tokens_per_s", (double)prefill / sec[1]);
      cJSON_AddNumberToObject(jo, "prefill_first_s", sec[0]);
      if (!json)
        printf("prefill: %lld tokens in %.3f s, %.0f tokens/s (the first prompt: %.3f s)\n", (long long)prefill, sec[1],
               (double)prefill / sec[1], sec[0]);
    }
  }
  if (!st && json) {
    char *o = cJSON_Print(jo);
    puts(o);
    free(o);
  } else if (!st) {
    printf("dev us: CUDA events around the step's graph; call us: the call's wall time (copies, sync); MB read: every "
           "weight used once (routed experts: top-k a layer), K/V of the context, GDN states read and written; floor: "
           "MB read / HBM GB/s (%.0f)\n",
           hbm);
  }
  cJSON_Delete(jo);
  mtpq_target_seq_close(s);
  mtpq_target_close(t);
  return st ? cli_fail(st, &err) : 0;
}
