/* mtpq bench-quant: NVFP4 / FP8 quantization throughput (GB/s of BF16
 * input) on 1 CPU thread, all CPU threads and the GPU, as a table. Every
 * measured configuration's output is compared with the single-thread
 * reference, so a fast wrong kernel cannot report a number. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "quant/gpu_quant.h"
#include "quant/quant.h"

const struct cli_opt bench_quant_opts[] = {
    {"rows", 0, OPT_UINT, 0, "N", "matrix rows (default 4096)"},
    {"cols", 0, OPT_UINT, 0, "N", "matrix columns (default 4096)"},
    {"iters", 0, OPT_UINT, 0, "N", "timed runs per configuration, median reported (default 5)"},
    {"threads", 'j', OPT_UINT, 0, "N", "the multi-thread row uses N threads (default: all cores)"},
    {"no-gpu", 0, OPT_FLAG, 0, NULL, "skip the GPU rows"},
    {"json", 0, OPT_FLAG, 0, NULL, "print JSON rows instead of a table"},
    {NULL, 0, 0, 0, NULL, NULL},
};

static int same(const struct mtpq_qtensor *a, const struct mtpq_qtensor *b) {
  return a->data_bytes == b->data_bytes && memcmp(a->data, b->data, a->data_bytes) == 0 &&
         a->scale_bytes == b->scale_bytes &&
         (!a->scale_bytes || memcmp(a->scales, b->scales, a->scale_bytes) == 0) &&
         memcmp(&a->scale, &b->scale, 4) == 0;
}

struct row {
  const char *fmt, *where;
  int threads;
  double seconds, gbps;
  int equal;
};

int cmd_bench_quant(int argc, char **argv) {
  struct cli_args a;
  int help;
  const char *cmd = "bench-quant";
  if (cli_parse(cmd, bench_quant_opts, argc, argv, &a, &help)) return MTPQ_EXIT_USAGE;
  if (a.npos) return cli_usage_error(cmd, "bench-quant takes no arguments");
  int64_t rows = (int64_t)cli_uint(bench_quant_opts, &a, "rows", 4096);
  int64_t cols = (int64_t)cli_uint(bench_quant_opts, &a, "cols", 4096);
  int iters = (int)cli_uint(bench_quant_opts, &a, "iters", 5);
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = (int)cli_uint(bench_quant_opts, &a, "threads", nproc > 0 ? (unsigned long long)nproc : 1);
  if (rows < 1 || cols < 16 || rows * cols > (int64_t)1 << 32 || iters < 1 || threads < 1 || threads > 256)
    return cli_usage_error(cmd, "need rows >= 1, cols >= 16, rows*cols <= 2^32, iters >= 1, 1 <= threads <= 256");

  size_t n = (size_t)(rows * cols);
  uint16_t *x = malloc(n * 2);
  if (!x) {
    cli_error("out of memory for %zu bytes", n * 2);
    return MTPQ_EXIT_FAILURE;
  }
  /* Gaussian weights (sigma 0.02), seeded: never time on zeros. */
  uint64_t s = 88172645463325252ULL;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u2 = (s >> 11) / 9007199254740992.0;
    x[i] = mtpq_f32_to_bf16((float)(0.02 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)));
  }
  struct mtpq_err err = {0};
  int gpu = !cli_has(bench_quant_opts, &a, "no-gpu") && mtpq_gpu_available(&err);
  if (!gpu && !cli_has(bench_quant_opts, &a, "no-gpu")) cli_warn("GPU rows skipped: %s", err.msg);

  static const enum mtpq_format fmts[] = {MTPQ_FMT_NVFP4, MTPQ_FMT_FP8};
  struct row out[24];
  int nrow = 0, rc = 0;
  double gpu_copy = 0;
  for (size_t fi = 0; fi < 2 && !rc; fi++) {
    enum mtpq_format f = fmts[fi];
    struct mtpq_qtensor ref = {0};
    int tcfg[2] = {1, threads};
    for (int k = 0; k < (threads > 1 ? 2 : 1) && !rc; k++) {
      struct mtpq_quant_opts o = mtpq_quant_default_opts();
      o.threads = tcfg[k];
      double *ts = malloc(sizeof(double) * (size_t)iters);
      struct mtpq_qtensor q = {0};
      int eq = 1;
      for (int it = 0; it < iters && !rc; it++) {
        double t0 = cli_now_s();
        enum mtpq_status st = mtpq_quantize(f, x, rows, cols, &o, &q, &err);
        ts[it] = cli_now_s() - t0;
        if (st) rc = cli_fail(st, &err);
        else if (!ref.data) ref = q, q = (struct mtpq_qtensor){0};
        else {
          eq &= same(&ref, &q);
          mtpq_qtensor_free(&q);
        }
      }
      double med = cli_median(ts, iters);
      out[nrow++] = (struct row){mtpq_format_get(f)->name, "cpu", tcfg[k], med, (double)n * 2 / med / 1e9, eq};
      free(ts);
    }
    if (gpu && !rc) {
      struct mtpq_quant_opts o = mtpq_quant_default_opts();
      struct mtpq_gpu_bench gt = {0};
      struct mtpq_qtensor q = {0};
      enum mtpq_status st = mtpq_gpu_quantize(f, x, rows, cols, &o, &q, &err);
      if (!st) st = mtpq_gpu_quant_bench(f, x, rows, cols, &o, iters < 20 ? 20 : iters, &gt, &err);
      if (st) rc = cli_fail(st, &err);
      else {
        int eq = same(&ref, &q);
        out[nrow++] = (struct row){mtpq_format_get(f)->name, "gpu", 0, gt.full, (double)n * 2 / gt.full / 1e9, eq};
        out[nrow++] = (struct row){mtpq_format_get(f)->name, "gpu:amax", 0, gt.amax, (double)n * 2 / gt.amax / 1e9, eq};
        out[nrow++] = (struct row){mtpq_format_get(f)->name, "gpu:q", 0, gt.quant, (double)n * 2 / gt.quant / 1e9, eq};
        gpu_copy = gt.copy;
      }
      mtpq_qtensor_free(&q);
    }
    mtpq_qtensor_free(&ref);
  }
  free(x);
  if (rc) return rc;
  int all_equal = 1;
  for (int i = 0; i < nrow; i++) all_equal &= out[i].equal;
  if (cli_has(bench_quant_opts, &a, "json")) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rows", (double)rows);
    cJSON_AddNumberToObject(o, "cols", (double)cols);
    cJSON_AddStringToObject(o, "gpu", gpu ? mtpq_gpu_name() : "");
    cJSON *arr = cJSON_AddArrayToObject(o, "results");
    for (int i = 0; i < nrow; i++) {
      cJSON *r = cJSON_CreateObject();
      cJSON_AddStringToObject(r, "format", out[i].fmt);
      cJSON_AddStringToObject(r, "device", out[i].where);
      cJSON_AddNumberToObject(r, "threads", out[i].threads);
      cJSON_AddNumberToObject(r, "seconds", out[i].seconds);
      cJSON_AddNumberToObject(r, "gb_per_s", out[i].gbps);
      cJSON_AddBoolToObject(r, "bytes_equal_reference", out[i].equal);
      cJSON_AddItemToArray(arr, r);
    }
    char *t = cJSON_Print(o);
    puts(t);
    free(t);
    cJSON_Delete(o);
  } else {
    printf("mtpq bench-quant: BF16 [%lld, %lld] (%.1f MB), median of %d runs%s%s\n",
           (long long)rows, (long long)cols, (double)n * 2 / 1e6, iters, gpu ? ", GPU: " : "",
           gpu ? mtpq_gpu_name() : "");
    printf("%-8s %-9s %8s %12s %12s  %s\n", "format", "device", "threads", "ms", "GB/s in", "bytes = reference");
    for (int i = 0; i < nrow; i++) {
      char th[16];
      if (out[i].threads) snprintf(th, sizeof th, "%d", out[i].threads);
      else snprintf(th, sizeof th, "-");
      printf("%-8s %-9s %8s %12.3f %12.2f  %s\n", out[i].fmt, out[i].where, th, out[i].seconds * 1e3,
             out[i].gbps, out[i].equal ? "yes" : "NO");
    }
  }
  if (gpu_copy > 0 && !cli_has(bench_quant_opts, &a, "json"))
    printf("gpu:amax = amax pass alone; gpu:q = quantization with the amax given; device copy of the\n"
           "input for reference: %.3f ms = %.0f GB/s read+write\n",
           gpu_copy * 1e3, (double)n * 4 / gpu_copy / 1e9);
  if (!all_equal) {
    cli_error("a configuration produced bytes different from the single-thread reference");
    return MTPQ_EXIT_DIFFERS;
  }
  return 0;
}
